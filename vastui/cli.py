"""The `vastui` command line. Every listing has `--json` (one object per line).

Errors are one line on stderr (`vastui: error: ...`) and exit status 2, argparse's included;
nothing is lost. A reader that leaves early (`vastui offers | head -1`) ends the listing quietly.

One file: every subcommand's parser and handler side by side, so the command line reads as
one table; the work is done in backend, engine and store.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import select
import sys
import time
import types
from collections.abc import Callable, Coroutine, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from vastui import __version__
from vastui.sanitize import sanitize_line

# Each verb imports what it needs, in its own function: httpx, the store (aiosqlite), the
# engine (asyncssh) and the console (Textual) cost a `vastui offers` or `vastui --help` most
# of its start-up otherwise (bench/startup.py measures it).
if TYPE_CHECKING:
    from vastui.backend import Options
    from vastui.domain.worker import InstanceRecord
    from vastui.engine.runtime import RunOptions

EXIT_ERROR = 2
# 128 + SIGPIPE: what a shell reports for a program the closed pipe killed (`set -o pipefail`
# then sees the listing was cut short, as with `seq 1000000 | head -1`).
EXIT_BROKEN_PIPE = 141


class CliError(Exception):
    pass


# -- output helpers ----------------------------------------------------------------------


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1 else f"{value:,.2f}".rstrip("0").rstrip(".")
    return sanitize_line(str(value), 60)


def print_rows(
    rows: list[dict[str, Any]],
    columns: Sequence[str],
    as_json: bool,
    headers: Mapping[str, str] | None = None,
) -> None:
    """A table of ``columns`` (header: ``headers[c]`` or ``C``), or one JSON object per row."""
    if as_json:
        for row in rows:
            # ASCII-only: no raw C1 or bidi characters reach a terminal through --json.
            print(json.dumps(row, ensure_ascii=True, separators=(",", ":")))
        return
    if not rows:
        print("(none)")
        return
    names = [(headers or {}).get(c, c.upper()) for c in columns]
    table = [[_cell(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(n), *(len(r[i]) for r in table)) for i, n in enumerate(names)]
    print("  ".join(n.ljust(w) for n, w in zip(names, widths, strict=True)).rstrip())
    for r in table:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())


def _warn(message: str) -> None:
    print(f"vastui: warning: {sanitize_line(message, 500)}", file=sys.stderr)


# -- commands ----------------------------------------------------------------------------


# The ranking columns under the console offers pane's names (console/panes/offers.py).
OFFER_COLUMNS = [
    "id", "machine_id", "gpu_name", "num_gpus", "dph_total", "expected_cost_per_proof",
    "min_rate", "known_rate", "expected_rate", "rate_source", "gpu_ram_gb", "cpu_ram_gb",
    "cpu_cores", "inet_down", "reliability", "geolocation", "bid_price", "bid_cost_per_proof",
    "rent_as", "bad",
]  # fmt: skip
OFFER_HEADERS = {
    "expected_cost_per_proof": "EXP $/P",
    "min_rate": "MIN",
    "known_rate": "KNOWN",
    "expected_rate": "EXP RATE",
    "rate_source": "FROM",
    "bid_price": "BID $/H",
    "bid_cost_per_proof": "BID $/P",
    "rent_as": "AS",
}


async def cmd_offers(opts: Options, args: argparse.Namespace) -> int:
    from vastui.backend import open_client, open_store
    from vastui.engine.bidding import RiskModel
    from vastui.engine.ranking import Levers, rank_offers

    query = args.filter if args.filter is not None else opts.config.offers.filter
    async with open_client(opts) as client, open_store(opts) as store:
        result = await client.search_offers(
            query,
            order=opts.config.offers.order,
            limit=args.limit or opts.config.offers.limit,
            allocated_storage=opts.config.fleet.disk_gb,  # price includes the disk we rent
            offer_type=args.type,
        )
        bad = {e.machine_id: e.reason for e in await store.badlist.all()}
        perf = await store.perf.all()
        history = await store.bid_history(now=time.time())
    for line in result.rejected:
        _warn(f"skipped offer: {line}")
    # The engine's and the console's ranking (engine/ranking.py), in its order; with bids on,
    # each offer's bid beside its on-demand price, as the engine would weigh them.
    bids = None
    if opts.config.bids.mode != "off" and args.type == "on-demand":
        bids = (opts.config, RiskModel(history, opts.config))
    ranked = rank_offers(
        result.offers, perf, bad, opts.config.fleet.max_cost_per_proof, bids,
        Levers.of(opts.config),
    )  # fmt: skip
    rows = []
    for r in ranked:
        if r.bad and not args.all:
            continue
        row = r.to_json()
        row["bid_cost_per_proof"] = None if r.bid is None else round(r.bid.cost_per_proof, 5)
        row["bid_price"] = None if r.bid is None else r.bid.price
        row["rent_as"] = "bid" if r.as_bid else "on-demand"
        if not args.json:
            row["bad"] = "BAD" if r.bad else ""
        rows.append(row)
    hidden = sum(r.bad for r in ranked) if not args.all else 0
    print_rows(rows, OFFER_COLUMNS, args.json, OFFER_HEADERS)
    if hidden and not args.json:
        print(f"({hidden} offers on bad machines hidden; --all shows them)", file=sys.stderr)
    return 0


INSTANCE_HEADERS = {"cost_per_proof": "$/PROOF"}


def _instance_row(rec: InstanceRecord, now: float, as_json: bool) -> dict[str, Any]:
    """A worker's record with what it cost up to ``now`` (the fleet's clock), its $/proof (the
    console's and the strip's: engine/spend.py) and the kind of its destroy."""
    from vastui.engine.spend import worker_cost_per_proof, worker_spent

    row = rec.to_json()
    spent = worker_spent(rec, now)
    cost, estimated = worker_cost_per_proof(rec)
    row["spent"] = None if spent is None else round(spent, 4)
    row["kill_kind"] = rec.kill_kind
    if as_json:
        row["cost_per_proof"] = None if cost is None else round(cost, 6)
        # True: over the benchmark's rate, production not measured yet
        row["cost_per_proof_estimated"] = estimated if cost is not None else None
    else:  # "~" marks the estimate, as the console's instances pane does
        row["cost_per_proof"] = None if cost is None else f"{'~' if estimated else ''}{cost:.4f}"
        row["state"] = rec.phase  # what it does now: a stopped worker is not proving
    return row


async def cmd_instances(opts: Options, args: argparse.Namespace) -> int:
    from vastui import status as fleet_status
    from vastui.backend import open_store

    async with open_store(opts) as store:
        records = await store.instances.all(include_killed=not args.live_only)
        foreign = await store.foreign.all()
        # The fleet's one clock (a demo engine's is simulated): spend runs up to it.
        now = fleet_status.fleet_now(await store.status.get(), time.time())
    rows = [_instance_row(r, now, args.json) for r in records]
    columns = [
        "id", "label", "machine_id", "gpu_name", "state", "stage", "dph_total",
        "bench_rate", "min_rate", "prod_completed", "prod_rate", "cost_per_proof", "spent",
        "bid_price", "interruptions", "outbid_since", "kill_kind", "kill_reason",
    ]  # fmt: skip
    if args.all:  # another controller's, as the engine last listed them: apart, never ours
        rows += [
            {"id": f.vast_id, "label": f.label, "machine_id": f.machine_id,
             "gpu_name": f.gpu_name, "state": "foreign", "owner": f.owner,
             "dph_total": f.dph_total, "vast_status": f.vast_status}
            for f in foreign
        ]  # fmt: skip
        columns.append("owner")
    print_rows(rows, columns, args.json, INSTANCE_HEADERS)
    if foreign and not args.all and not args.json:
        owners = ", ".join(sorted({f.owner for f in foreign}))
        print(
            f"({len(foreign)} instances of other controllers on this account hidden "
            f"(fleet {owners}); --all shows them)",
            file=sys.stderr,
        )
    return 0


# How long `vastui bad add/remove` waits for a live engine to carry it out: its step takes the
# commands first (engine.run_commands), so seconds; past this the command stays queued.
CLI_COMMAND_WAIT_S = 30.0
CLI_COMMAND_POLL_S = 0.2


async def _through_engine(store: Any, kind: str, args: dict[str, Any]) -> str | None:
    """With a live engine on the database, an operator's write goes to it as the console's
    does (the commands table), so that one process writes the fleet's records, on the fleet's
    one clock (a demo engine's is simulated: a write of our own would be stamped in real time
    among its events). Its answer; None when no engine is live (the caller writes itself)."""
    from vastui.store.lease import holder_is_dead

    holder = await store.lease.holder()
    if holder is None or holder_is_dead(holder):
        return None
    cid = await store.commands.submit(kind, args, source="cli")
    deadline = time.monotonic() + CLI_COMMAND_WAIT_S
    while time.monotonic() < deadline:
        cmd = await store.commands.get(cid)
        if cmd is not None and cmd.status == "done":
            return sanitize_line(cmd.result or "done", 300)
        if cmd is not None and cmd.status == "failed":
            raise CliError(f"the engine (pid {holder.pid}) refused it: {cmd.result}")
        await asyncio.sleep(CLI_COMMAND_POLL_S)
    raise CliError(
        f"sent to the engine (pid {holder.pid} on {holder.hostname}) as command {cid}, no "
        f"answer within {CLI_COMMAND_WAIT_S:.0f} s: it carries it out at its next step "
        "(`vastui events` shows it)"
    )


async def cmd_bad(opts: Options, args: argparse.Namespace) -> int:
    from vastui import status as fleet_status
    from vastui.backend import open_store
    from vastui.store import StoreBusy

    async with open_store(opts, write=args.bad_cmd in ("add", "remove")) as store:
        # A write meets a lock held past the store's busy timeout: nothing was written, and
        # this process cannot keep the command for later (the console does): say so.
        if args.bad_cmd == "add":
            if args.machine_id <= 0:
                raise CliError(f"machine id must be a positive integer, got {args.machine_id}")
            try:
                done = await _through_engine(
                    store, "ignore", {"machine_id": args.machine_id, "reason": args.reason}
                )
                if done is not None:
                    print(done)
                    return 0
                now = fleet_status.fleet_now(await store.status.get(), time.time())
                entry = await store.badlist.add(
                    args.machine_id, args.reason, source="manual", now=now
                )
            except StoreBusy as exc:
                raise CliError(
                    f"NOT done: machine {args.machine_id} was not added to the bad list ({exc}); "
                    "run the command again"
                ) from None
            print(f"machine {entry.machine_id} is on the bad list (bans {entry.bans})")
            return 0
        if args.bad_cmd == "remove":
            try:
                done = await _through_engine(store, "unignore", {"machine_id": args.machine_id})
                if done is not None:
                    print(done)
                    return 0
                now = fleet_status.fleet_now(await store.status.get(), time.time())
                removed = await store.badlist.remove(args.machine_id, now=now)
            except StoreBusy as exc:
                raise CliError(
                    f"NOT done: machine {args.machine_id} was not removed from the bad list "
                    f"({exc}); run the command again"
                ) from None
            if removed:
                print(f"machine {args.machine_id} removed from the bad list")
                return 0
            raise CliError(f"machine {args.machine_id} is not on the bad list")
        entries = [e.to_json() for e in await store.badlist.all(include_expired=args.all)]
        review = [e.to_json() for e in await store.badlist.legacy_review()]
    columns = ["machine_id", "host_id", "gpu_name", "reason", "source", "created_at", "expires_at"]
    print_rows(entries + (review if args.json else []), columns, args.json)
    if review and not args.json:
        print(
            f"\n{len(review)} legacy entries keyed by host (operator account) id, "
            "flagged for review (not machine bans):"
        )
        print_rows(review, ["host_id", "gpu_name", "reason", "created_at"], False)
    return 0


async def cmd_perf(opts: Options, args: argparse.Namespace) -> int:
    from vastui.backend import open_store

    async with open_store(opts) as store:
        rows = [p.to_json() for p in await store.perf.all()]
    columns = [
        "machine_id", "gpu_name", "num_gpus", "best_rate", "last_rate", "last_partial",
        "samples", "cpu_ram_gb", "measured_at",
    ]  # fmt: skip
    print_rows(rows, columns, args.json, {"last_partial": "PARTIAL"})
    return 0


async def cmd_events(opts: Options, args: argparse.Namespace) -> int:
    from vastui.backend import open_store
    from vastui.domain.journal import EVENT_KINDS

    async with open_store(opts) as store:
        events = await store.events.all(limit=args.limit, kind=args.kind)
    # A kind in the log counts even if EVENT_KINDS misses it (written by a newer vastui).
    if args.kind is not None and not events and args.kind not in EVENT_KINDS:
        raise CliError(f"unknown event kind {args.kind!r}; kinds: {', '.join(EVENT_KINDS)}")
    print_rows(
        [e.to_json() for e in events],
        ["ts", "kind", "instance_id", "machine_id", "reason"],
        args.json,
    )
    return 0


async def cmd_status(opts: Options, args: argparse.Namespace) -> int:
    from datetime import UTC

    from vastui import status as fleet_status
    from vastui.backend import open_store
    from vastui.engine.spend import local_midnight

    async with open_store(opts) as store:
        # The fleet's one clock (the engine's status says whether it is a simulator's).
        now = fleet_status.fleet_now(await store.status.get(), time.time())
        report = await fleet_status.gather(store, now, day_start=local_midnight(now, UTC))
    if args.json:
        print(json.dumps(report, sort_keys=True))
    else:
        print(fleet_status.render(report))
    return 0


async def cmd_cluster(opts: Options, args: argparse.Namespace) -> int:
    from vastui import cluster_report
    from vastui import status as fleet_status
    from vastui.backend import open_store
    from vastui.config import load_curio_db_password
    from vastui.demo_cluster import DemoNotRunning, find_access
    from vastui.engine.cluster import ClusterError, ClusterReader
    from vastui.engine.runtime import CURIO_DEFAULT_PASSWORD

    config = opts.config
    if not config.curio.read_cluster:
        raise CliError("curio's cluster is not read ([curio] read_cluster = false)")
    if opts.demo:
        # The running demo's own database, as its engine left it for readers (demo_cluster.py)
        async with open_store(opts) as store:
            holder = await store.lease.holder()
        try:
            access = find_access(opts.db_path, holder)
        except DemoNotRunning as exc:
            raise CliError(str(exc)) from None
        host, port, user, dbname = access.host, access.port, access.user, access.dbname
        password: str | None = access.password
    elif not config.ssh.curio_db:
        raise CliError("curio's cluster is not read (no [ssh] curio_db)")
    else:
        addr, user, dbname = config.ssh.curio_db, config.curio.db_user, config.curio.db_name
        host, _, port_text = addr.rpartition(":")
        host, port = host or "127.0.0.1", int(port_text)
        password = load_curio_db_password(config.path)
    reader = ClusterReader(
        host, port, user=user, dbname=dbname, password=password or CURIO_DEFAULT_PASSWORD,
        application="vastui cluster",
    )  # fmt: skip
    try:
        async with open_store(opts) as store:
            now = fleet_status.fleet_now(await store.status.get(), time.time())
            report = await cluster_report.gather(store, reader, config, now)
    except ClusterError as exc:
        raise CliError(str(exc)) from None
    finally:
        await reader.close()
    if args.json:
        print(json.dumps(report, sort_keys=True, ensure_ascii=True))
        return 0
    print_rows(report["machines"], cluster_report.COLUMNS, False, cluster_report.HEADERS)
    print(cluster_report.render_totals(report))
    return 0


async def cmd_import_legacy(opts: Options, args: argparse.Namespace) -> int:
    from vastui.backend import open_store
    from vastui.store import import_legacy

    async with open_store(opts, write=True) as store:
        report = await import_legacy(store, Path(args.path))
    print(report.summary())
    return 0


async def cmd_resume(opts: Options, args: argparse.Namespace) -> int:
    from vastui import status as fleet_status
    from vastui.backend import open_store

    async with open_store(opts, write=True) as store:
        pause = await store.meta.fleet_failure()
        # on the fleet's clock (a demo engine's is simulated), as the pause it ends
        now = fleet_status.fleet_now(await store.status.get(), time.time())
        if pause is None or not await store.clear_fleet_failure(
            "cleared by the operator (vastui resume)", now=now
        ):
            raise CliError("provisioning is not paused for a fleet-wide failure")
    print(f"provisioning resumes (was paused for: {sanitize_line(str(pause.get('text')), 300)})")
    return 0


async def cmd_migrate(opts: Options, args: argparse.Namespace) -> int:
    from vastui.backend import open_store
    from vastui.store import SCHEMA_VERSION

    async with open_store(opts, write=True) as store:
        version = await store.schema_version()
    print(f"database {opts.db_path} is at schema version {version} (this vastui: {SCHEMA_VERSION})")
    return 0


def cmd_locate(opts: Options, args: argparse.Namespace) -> int:
    from vastui.config import ApiKeyError, default_config_path, load_api_key, state_dir

    try:
        _, key_source = load_api_key()
    except ApiKeyError:
        key_source = "(none found)"
    cfg_path = opts.config.path or default_config_path()
    exists = "" if cfg_path.exists() else " (absent: defaults in use)"
    print(f"config    {cfg_path}{exists}")
    print(f"database  {opts.db_path}")
    print(f"state     {state_dir()}")
    api_url = "in-process simulator" if opts.demo else opts.api_url or opts.config.vast.api_url
    print(f"api url   {api_url}")
    print(f"api key   {key_source}")
    return 0


def cmd_sim_serve(opts: Options, args: argparse.Namespace) -> int:
    """A whole simulated cloud over HTTP: the demo's world and market (``--seed``), worker
    hosts as the demo runs them, the controller's stand-ins (vastsim/, found through
    vastui/worlds.py)."""
    from vastui.worlds import ServeRequest, WorldError, WorldMissing, load_world

    request = ServeRequest(
        seed=args.seed, speed=args.speed, api_key=args.api_key, faults=args.faults,
        machine_fault_rate=args.machine_fault_rate, bid_pressure=args.bid_pressure,
        list_lag=args.list_lag, port=args.port, workers=args.workers,
        write_config=args.write_config, demand=args.demand, new_wallet=args.new_wallet,
        lotus_token=args.lotus_token,
    )  # fmt: skip
    try:
        load_world().serve(request)
    except (WorldError, WorldMissing) as exc:
        raise CliError(str(exc)) from None
    return 0


def _non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= value < float("inf"):  # NaN fails too
        raise argparse.ArgumentTypeError(f"must be a number >= 0: {text!r}")
    return value


# The fastest a simulated world runs (--speed, simulated seconds per real second). The engine
# looks at a simulated fleet every 0.5 s of real time (engine/runtime.py scale_settings) and
# curio's stand-in polls at most every 50 ms (vastsim/standins/curio MIN_TICK_S): at 1000x a
# look spans 500 simulated seconds, so the proofshare market's 45-minute deadline still holds
# five of them; at 10,000x one look (83 minutes) would outlast it, and a request could be asked,
# expire and be penalised unseen. A demo database carries its simulated time into the next run
# (runtime.demo_request): a real day at 1000x is under three years of it.
MAX_SPEED = 1000.0
DEMO_FIL_USD = 3.0  # the demo's FIL price (cmd_console)


def _speed(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value <= MAX_SPEED:  # NaN fails too
        raise argparse.ArgumentTypeError(
            f"must be > 0 and <= {MAX_SPEED:g} (simulated seconds per real second): {text!r}"
        )
    return value


def _run_options(args: argparse.Namespace, mode: str) -> RunOptions:
    from vastui.engine.runtime import RunOptions

    return RunOptions(
        speed=args.speed,
        seed=args.seed,
        target_workers=args.target_workers,
        dry_run=args.dry_run,
        mode=mode,
        metrics=args.metrics,
        demand=args.demand,
        new_wallet=args.new_wallet,
    )


def _on_a_terminal() -> bool:
    """Textual draws on stderr and reads keys from stdin: without a terminal it would write
    escape codes into a file or a pipe for as long as it ran."""
    return sys.stdin.isatty() and sys.stderr.isatty()


def _check_api_key(opts: Options, args: argparse.Namespace) -> None:
    """An engine of this process needs the Vast API key (a served simulator's too): without one
    the refusal is one line before anything starts, not an engine failing inside the console.
    The demo's world needs none; nor does a console that runs no engine (read-only, or attached
    to the engine that holds the database's lease: that engine has its own key)."""
    import asyncio

    from vastui.config import ApiKeyError, load_api_key

    if opts.demo:
        return
    try:
        load_api_key()
    except ApiKeyError as exc:
        if not args.engine_only and (args.read_only or asyncio.run(_engine_running(opts))):
            return
        served = " (a served simulator: the key it was started with)" if opts.api_url else ""
        raise CliError(f"{exc}{served}") from None


async def _engine_running(opts: Options) -> bool:
    """Whether an engine holds the database's lease (the console would attach to it, as
    console/sources/choose.py decides)."""
    from vastui.backend import open_store
    from vastui.store import StoreNotCurrent

    try:
        async with open_store(opts) as store:
            return await store.lease.holder() is not None
    except StoreNotCurrent:  # older than this code: the console's own engine migrates it
        return False


def cmd_console(opts: Options, args: argparse.Namespace) -> int:
    from vastui.engine.runtime import parse_duration
    from vastui.store import LeaseHeld, StoreError

    opts.seed, opts.speed = args.seed, args.speed
    try:
        duration = parse_duration(args.for_) if args.for_ else None
    except ValueError as exc:
        raise CliError(str(exc)) from None
    run = _run_options(args, "headless" if args.engine_only else "console")
    if opts.demo:  # the world's market, checked before anything starts or logs
        from vastui.worlds import load_world

        load_world().check_demand(run.demand, run.new_wallet)
    _check_api_key(opts, args)
    fleet = opts.config.fleet
    if (
        run.target_workers is None
        and opts.demo
        and fleet.target_workers == 0
        and not fleet.auto_target
    ):
        run.target_workers = 3  # the demo keeps a small fleet busy, headless or not
    if opts.demo and fleet.fil_usd <= 0:
        # the simulated market pays in FIL and margin needs dollars: the demo's FIL price
        # (ASSUMPTION, the economics bench's FIL_USD; an operator sets fleet.fil_usd)
        opts.config = dataclasses.replace(
            opts.config, fleet=dataclasses.replace(fleet, fil_usd=DEMO_FIL_USD)
        )
    if args.engine_only:
        from vastui.engine.headless import run_headless

        try:
            return run_headless(opts, run, duration)
        except (LeaseHeld, StoreError, ValueError) as exc:  # held, a dead store, a bad knob
            raise CliError(str(exc)) from None
    if not _on_a_terminal():
        raise CliError(
            "the console needs a terminal (stdin and stderr are not one): run the engine "
            "headless with --engine-only, or attach from a terminal"
        )
    from vastui.console.app import run_console
    from vastui.console.themes import ThemeError

    try:
        return run_console(opts, read_only=args.read_only, theme=args.theme, run=run)
    except (ThemeError, ValueError) as exc:  # a bad theme or keymap entry: one line
        raise CliError(str(exc)) from None


# -- parser ------------------------------------------------------------------------------


def _check_url(url: str) -> None:
    import httpx  # the client's own URL rules; any verb given --api-url talks to it anyway

    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, ValueError) as exc:
        raise CliError(f"--api-url {url!r}: not a valid URL ({exc})") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise CliError(f"--api-url {url!r}: expected http(s)://host[:port]")


def _target(text: str) -> int | str:
    """--target-workers: as fleet.target_workers is bounded (vastui/config/schema.py), or
    "auto"."""
    if text == "auto":
        return text
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer or auto: {text!r}") from None
    if not 0 <= value <= 1000:
        raise argparse.ArgumentTypeError(f"must be 0 to 1000 workers: {text!r}")
    return value


def _listen(text: str) -> str:
    """--metrics: checked as [metrics] listen is, before anything starts."""
    from vastui.config import is_listen

    if not is_listen(text):
        raise argparse.ArgumentTypeError(f"not host:port (e.g. 127.0.0.1:9464): {text!r}")
    return text


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port must be 0-65535 (0: any free port): {text!r}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if not 0 < value < 2**63:
        raise argparse.ArgumentTypeError(f"must be a positive 64-bit integer: {text!r}")
    return value


class OneLineParser(argparse.ArgumentParser):
    """argparse whose errors are one line (`vastui: error: ...`), not usage plus error.

    Subparsers are made of the same class (argparse's ``parser_class`` default), so the hint
    names the verb whose help explains the mistake. Exit status 2, as argparse's own.
    """

    def error(self, message: str) -> NoReturn:
        hint = f"(see {self.prog} --help)"
        self.exit(EXIT_ERROR, f"vastui: error: {sanitize_line(message, 500)} {hint}\n")

    def format_help(self) -> str:
        text = super().format_help()
        if _EVENT_KINDS in text:  # the list lives in the store: imported only for this help
            from vastui.domain.journal import EVENT_KINDS

            text = text.replace(_EVENT_KINDS, ", ".join(EVENT_KINDS))
        return text


_EVENT_KINDS = "<event kinds>"  # in help text: replaced by the list when the help is shown


def build_parser() -> argparse.ArgumentParser:
    # SUPPRESS: an option given before the verb must survive the verb's own parser.
    shared = OneLineParser(add_help=False, argument_default=argparse.SUPPRESS)
    shared.add_argument("--db", type=Path, help="state database (default: in the state dir)")
    shared.add_argument("--config", type=Path, help="config file (default: $VASTUI_CONFIG or XDG)")
    shared.add_argument("--api-url", help="Vast API base URL (a served simulator, or Vast itself)")
    shared.add_argument(
        "--demo", action="store_true", help="use the in-process simulated cloud and its own db"
    )

    parser = OneLineParser(
        prog="vastui",
        description="Console and engine for a Filecoin proving fleet on Vast.ai GPUs.",
        parents=[shared],
    )
    parser.add_argument("--version", action="version", version=f"vastui {__version__}")
    parser.add_argument("--engine-only", action="store_true", help="run headless (no console)")
    parser.add_argument("--for", dest="for_", metavar="DURATION", help="stop after e.g. 120s, 2h")
    parser.add_argument(
        "--metrics", metavar="HOST:PORT", default=None, type=_listen,
        help="serve Prometheus metrics (e.g. 127.0.0.1:9464; else [metrics] listen; off)",
    )  # fmt: skip
    parser.add_argument(
        "--speed", type=_speed, default=60.0,
        help=f"demo: simulated seconds per real second (at most {MAX_SPEED:g})",
    )  # fmt: skip
    parser.add_argument(
        "--seed", type=int, default=None,
        help="demo: the market's seed (default: a new one each run; the log names it)",
    )  # fmt: skip
    parser.add_argument(
        "--target-workers",
        type=_target,
        help="keep this many workers, 0 to 1000, or auto: follow curio's cluster's work "
        "(overrides fleet.target_workers)",
    )
    parser.add_argument(
        "--demand", default="unlimited", metavar="CURVE",
        help="demo: the proofshare market's work, as `sim serve --demand` takes it",
    )  # fmt: skip
    parser.add_argument(
        "--new-wallet", action="store_true",
        help="demo: the provider starts with no work slots (it earns them with challenge proofs)",
    )  # fmt: skip
    parser.add_argument(
        "--dry-run", action="store_true", help="decide and record, but rent and destroy nothing"
    )
    parser.add_argument(
        "--read-only", action="store_true", help="console: no action that rents, destroys or bans"
    )
    parser.add_argument("--theme", help="console theme (bundled, user or Textual built-in)")
    parser.set_defaults(func=cmd_console, engine_only=False)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("offers", parents=[shared], help="search Vast offers")
    p.add_argument("--filter", help="vastai query syntax (default: the configured filter)")
    p.add_argument("--limit", type=_positive_int, help="maximum offers to ask for")
    p.add_argument("--all", action="store_true", help="include offers on bad-listed machines")
    p.add_argument(
        "--type", "-t", default="on-demand", choices=("on-demand", "bid", "interruptible"),
        help="pricing as the vastai CLI's --type: bid (interruptible) prices at each offer's "
        "min_bid; with [bids] mode = auto the on-demand search also shows each offer's bid",
    )  # fmt: skip
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.set_defaults(func=cmd_offers)

    p = sub.add_parser("instances", parents=[shared], help="instances vastui knows")
    p.add_argument("--live-only", action="store_true", help="hide killed instances")
    p.add_argument(
        "--all", action="store_true",
        help="also other controllers' instances on this account (never touched by this one)",
    )  # fmt: skip
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_instances)

    p = sub.add_parser("bad", parents=[shared], help="the bad list (per machine_id)")
    bad = p.add_subparsers(dest="bad_cmd", metavar="ACTION")
    bl = bad.add_parser("list", parents=[shared], help="show the bad list")
    bl.add_argument("--all", action="store_true", help="include expired entries")
    bl.add_argument("--json", action="store_true")
    ba = bad.add_parser("add", parents=[shared], help="ignore a machine")
    ba.add_argument("machine_id", type=_positive_int)
    ba.add_argument("--reason", required=True)
    br = bad.add_parser("remove", parents=[shared], help="unignore a machine")
    br.add_argument("machine_id", type=_positive_int)
    p.set_defaults(func=cmd_bad, bad_cmd="list", all=False, json=False)

    p = sub.add_parser("perf", parents=[shared], help="per-machine benchmark record")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_perf)

    p = sub.add_parser(
        "status", parents=[shared], help="the fleet against its target, why, and its spend"
    )
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser(
        "cluster", parents=[shared],
        help="this fleet's machines in curio's cluster (tasks held, PSProve results) and the "
        "cluster's work",
    )  # fmt: skip
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.set_defaults(func=cmd_cluster)

    p = sub.add_parser("events", parents=[shared], help="the event log")
    p.add_argument("--json", action="store_true")
    p.add_argument("--limit", type=_positive_int)
    p.add_argument("--kind", help=f"only this kind: {_EVENT_KINDS}")
    p.set_defaults(func=cmd_events)

    p = sub.add_parser(
        "resume", parents=[shared],
        help="lift the provisioning pause of a fleet-wide failure (once its cause is fixed)",
    )  # fmt: skip
    p.set_defaults(func=cmd_resume)

    p = sub.add_parser(
        "migrate", parents=[shared], help="create or upgrade the database (the engine does too)"
    )
    p.set_defaults(func=cmd_migrate)

    p = sub.add_parser("import-legacy", parents=[shared], help="import vast-manager's state.db")
    p.add_argument("path")
    p.set_defaults(func=cmd_import_legacy)

    p = sub.add_parser("locate", parents=[shared], help="print where vastui keeps things")
    p.set_defaults(func=cmd_locate)

    p = sub.add_parser("sim", help="the simulated Vast cloud")
    sim = p.add_subparsers(dest="sim_cmd", metavar="ACTION", required=True)
    ss = sim.add_parser(
        "serve",
        help="serve a simulated Vast cloud over HTTP, with its worker hosts",
        description="The Vast REST API over HTTP, and worker hosts as the demo runs them: each "
        "running instance a sandbox with the real worker scripts behind an SSH server on the "
        "ports the API reports, with the account's SSH keys; the Lotus API and curio's "
        "database stand in on the controller's side. SIGTERM or SIGINT stops it cleanly.",
    )
    ss.add_argument("--port", type=_port, default=8642, help="0: any free port")
    ss.add_argument("--seed", type=int, default=7, help="the market's seed (the demo's world)")
    ss.add_argument(
        "--speed", type=_speed, default=1.0,
        help=f"simulated seconds per second (at most {MAX_SPEED:g})",
    )  # fmt: skip
    ss.add_argument("--api-key", default="sim-key", help="the key clients must send")
    ss.add_argument("--faults", choices=["none", "light", "heavy"], default="none")
    ss.add_argument(
        "--machine-fault-rate", type=_non_negative, default=1.0,
        help="machine faults and host outages, scaled (1: the demo's; 0: none)",
    )  # fmt: skip
    ss.add_argument(
        "--bid-pressure", type=_non_negative, default=1.0,
        help="how often other bidders outbid an interruptible instance, scaled (0: never)",
    )  # fmt: skip
    ss.add_argument(
        "--list-lag", type=_non_negative, default=0.0, metavar="SECONDS",
        help="a new instance is missing from Vast's answers this many simulated seconds (as "
        "Vast's lists lag)",
    )  # fmt: skip
    ss.add_argument(
        "--demand", default="unlimited", metavar="CURVE",
        help="the proofshare market's work for this cluster: unlimited (every ask filled), "
        "steady:R, daily:R[:A], step:R1:R2[:H], pulse:R1:R2:H1:H2 or bursts:R1:R2:P "
        "(requests per hour; slots, the 45-minute deadline and its penalty as the market "
        "documents them)",
    )  # fmt: skip
    ss.add_argument(
        "--new-wallet", action="store_true",
        help="the provider's wallet has no work slots yet: it earns them with challenge proofs",
    )  # fmt: skip
    ss.add_argument(
        "--lotus-token", choices=["sign", "read"], default="sign",
        help="the chain node's token curio's layer gets: sign (as proofshare needs) or read "
        "(proofs computed, never asked for or paid)",
    )  # fmt: skip
    ss.add_argument(
        "--write-config", type=Path, metavar="PATH",
        help="write a vastui config (0600) for an engine against this cloud",
    )  # fmt: skip
    ss.add_argument(
        "--no-workers", dest="workers", action="store_false",
        help="serve the API alone: no sandboxes, SSH servers or stand-ins",
    )  # fmt: skip
    ss.set_defaults(func=cmd_sim_serve)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from vastui.backend import Options
    from vastui.config import load_config

    parser = build_parser()
    args = parser.parse_args(argv)
    reconfigure = getattr(sys.stdout, "reconfigure", None)  # not on a test's capture
    with contextlib.suppress(ValueError):
        # Remote text that cannot be encoded must not turn a listing into a traceback.
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")
    try:
        db = getattr(args, "db", None)
        if db is not None and not Path(db).parent.is_dir():
            # A typo must not quietly start a new, empty database somewhere else.
            raise CliError(f"--db {db}: directory {Path(db).parent} does not exist")
        if db is not None and Path(db).is_dir():
            raise CliError(f"--db {db}: a directory, not a database file (e.g. {db}/vastui.db)")
        api_url = getattr(args, "api_url", None)
        if api_url is not None:
            _check_url(api_url)
        config = load_config(getattr(args, "config", None))
        opts = Options(
            config=config,
            db=getattr(args, "db", None),
            api_url=getattr(args, "api_url", None),
            demo=getattr(args, "demo", False),
        )
        func: Callable[..., int | Coroutine[Any, Any, int]] = args.func
        result = func(opts, args)
        if isinstance(result, types.CoroutineType):
            import asyncio

            result = asyncio.run(result)
        sys.stdout.flush()  # a closed pipe shows here, inside the handler, not at exit
        return result if isinstance(result, int) else 0
    except BrokenPipeError as exc:  # an OSError: caught before the one-line error below
        if _stdout_reader_gone():
            return _reader_left()
        _error(exc)  # a pipe or socket of our own broke: that is an error
        return EXIT_ERROR
    except Exception as exc:
        if not _expected_error(exc):
            raise
        _error(exc)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130


# The errors that are one line and exit 2, by module: a class can only have been raised if its
# module was imported, so only those are looked at (importing them all would load the store,
# the client and asyncssh for every verb).
_EXPECTED_ERRORS = (
    ("vastui.config", "ConfigError"),
    ("vastui.config", "ApiKeyError"),
    ("vastui.vast.errors", "VastError"),
    ("vastui.store.errors", "StoreError"),
    ("vastui.worlds", "WorldMissing"),
    ("vastui.worlds", "WorldError"),
    ("vastui.vast.query", "QueryError"),
    ("vastui.engine.keys", "SshKeyError"),
)


def _expected_error(exc: Exception) -> bool:
    if isinstance(exc, CliError | OSError):
        return True
    for module_name, class_name in _EXPECTED_ERRORS:
        module = sys.modules.get(module_name)
        if module is not None and isinstance(exc, getattr(module, class_name)):
            return True
    return False


def _error(exc: BaseException) -> None:
    print(f"vastui: error: {sanitize_line(str(exc), 1000)}", file=sys.stderr)


def _stdout_reader_gone() -> bool:
    """Whether stdout is a pipe whose reader has left (poll reports an error on its end)."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # no real fd (captured), or no poll()
        return False


def _reader_left() -> int:
    """`vastui offers | head -1`: the reader left. Say nothing, as `seq 1000000 | head` does.

    Python's documented recipe (library/signal, "Note on SIGPIPE"): point stdout at devnull so
    the flush at exit cannot fail again. Not SIG_DFL for SIGPIPE, which would also kill the
    process on a write to a closed socket (httpx, asyncssh).
    """
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return EXIT_BROKEN_PIPE
