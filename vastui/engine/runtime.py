"""Running an engine: the lease, the Vast client (real or simulated), SSH, heartbeats.

Used by `vastui --engine-only` (headless, a systemd service) and by the console when no
headless engine holds the database.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from vastui.alerts import Notifier
from vastui.backend import Options, make_client
from vastui.config import Config, FleetSection, load_curio_db_password
from vastui.demo_cluster import remove_access, write_access
from vastui.engine.clock import SteadyClock, steady_scaled
from vastui.engine.cluster import ClusterReader
from vastui.engine.engine import Engine, EngineSettings
from vastui.engine.keys import ensure_ssh_key
from vastui.engine.monitor import Monitor
from vastui.metrics import FleetCollector, MetricsServer
from vastui.sanitize import sanitize_line
from vastui.ssh import RemoteForward, SshPool, StorePins
from vastui.store import LeaseHeld, Store, StoreError
from vastui.store.archive import archive_finished_run, carry_learning, run_lock
from vastui.store.errors import StoreFatal
from vastui.worlds import DemoRequest, load_world

log = logging.getLogger("vastui.engine")

LEASE_TTL = 30.0  # real seconds
# An attached console counts the engine gone after a few seconds without a heartbeat
# (vastui/console/sources/attached.py HEARTBEAT_STALE): beat every second, a one-row UPDATE.
HEARTBEAT_EVERY = 1.0


@dataclass
class RunOptions:
    speed: float = 60.0  # demo only: simulated seconds per real second
    seed: int | None = None  # demo only: the market's seed; None draws a new one (logged)
    target_workers: int | Literal["auto"] | None = None
    dry_run: bool = False
    mode: str = "headless"  # or "console"
    machine_fault_rate: float = 1.0  # demo only: about one machine in six has a fault
    metrics: str | None = None  # --metrics host:port (else [metrics] listen; neither: off)
    demand: str = "unlimited"  # demo only: the proofshare market's work (vastsim/demand.py)
    new_wallet: bool = False  # demo only: the provider earns its work slots first
    lotus_token: str = "sign"  # demo only: the chain node's token curio gets ("read": no signing)


def parse_duration(text: str) -> float:
    """`120s`, `2m`, `1h`, `90` (seconds) → seconds; a clear error otherwise."""
    units = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
    raw = text.strip().lower()
    factor = units.get(raw[-1:])
    number = raw[:-1] if factor is not None else raw
    try:
        value = float(number) * (factor or 1.0)
    except ValueError:
        raise ValueError(f"bad duration {text!r}: use e.g. 120s, 2m, 1h") from None
    if value <= 0:
        raise ValueError(f"bad duration {text!r}: must be positive")
    return value


@dataclass
class EngineRuntime:
    engine: Engine
    store: Store
    demo: Any | None  # the SimWorkerHost in demo mode
    cluster: Any | None = None  # the simulated curio cluster database in demo mode
    archived: Path | None = None  # demo: where the previous run's database went


def run_config(config: Config, run: RunOptions) -> Config:
    """The config with the command line's target: ``--target-workers auto`` follows the work,
    a number keeps that many (and no automatic target)."""
    if run.target_workers == "auto":
        return replace(config, fleet=replace(config.fleet, auto_target=True))
    if run.target_workers is not None:
        fleet = replace(config.fleet, target_workers=run.target_workers, auto_target=False)
        return replace(config, fleet=fleet)
    return config


def target_words(fleet: FleetSection) -> str:
    """The target as a log line says it: a number of workers, or the automatic one's bounds."""
    if fleet.auto_target:
        return f"auto, {fleet.min_workers} to {fleet.max_workers} workers"
    return f"{fleet.target_workers} workers"


def _auto_floor(config: Config) -> int:
    """An automatic target's least fleet (its min_workers), 0 with a fixed target."""
    return config.fleet.min_workers if config.fleet.auto_target else 0


@asynccontextmanager
async def engine_runtime(
    opts: Options, run: RunOptions, on_change: Callable[[str], Awaitable[None] | None] | None = None
) -> AsyncIterator[EngineRuntime]:
    """Open the store, take the lease, build client/SSH/engine; undo it all on exit."""
    config = run_config(opts.config, run)
    if (
        opts.demo
        and config.fleet.max_concurrent_benchmarks == FleetSection.max_concurrent_benchmarks
    ):
        # The demo benchmarks its whole target at once, so a short run shows every outcome.
        config = replace(
            config,
            fleet=replace(
                config.fleet,
                max_concurrent_benchmarks=max(2, config.fleet.target_workers, _auto_floor(config)),
            ),
        )
    owner = uuid.uuid4().hex
    archived = None
    # The metrics port first: one already in use is a one-line error before anything else
    # starts, moves a database or logs.
    metrics = _metrics_server(config, run)
    # A demo's cloud ends with its run: a finished run's database is moved aside, under the
    # lock that also covers this engine's lease (vastui/store/archive.py).
    try:
        with run_lock(opts.db_path) if opts.demo else contextlib.nullcontext():
            if opts.demo:
                archived = await archive_finished_run(opts.db_path)
            store = await Store.open(opts.db_path)
            try:
                await store.lease.acquire(
                    owner, pid=os.getpid(), hostname=socket.gethostname(), mode=run.mode,
                    ttl=LEASE_TTL,
                )  # fmt: skip
            except BaseException:
                await store.close()
                raise
    except BaseException:
        if metrics is not None:
            metrics.stop()
        raise
    if archived is not None:
        carried = carry_learning(opts.db_path, archived)
        learned = ", ".join(f"{n} {table}" for table, n in carried.items()) or "nothing"
        log.info("the demo starts from a clean fleet; the last run's database is kept at %s "
                 "(carried over what it learned per machine: %s)", archived, learned)  # fmt: skip
    stack = contextlib.AsyncExitStack()
    try:
        if metrics is not None:
            stack.callback(metrics.stop)
        stack.push_async_callback(_release, store, owner)
        key_path, public_key = ensure_ssh_key(config)
        # a bad password file is a one-line error now, not at a rent
        password = load_curio_db_password(config.path)
        settings = EngineSettings(dry_run=run.dry_run, curio_db_password=password)
        cluster = None
        if opts.demo:
            engine, demo, cluster = await _demo_parts(
                stack, config, store, run, key_path, public_key, settings, on_change,
                opts.db_path,
            )  # fmt: skip
        else:
            demo = None
            client = make_client(opts)
            stack.push_async_callback(client.aclose)
            targets = {}
            if config.ssh.curio_db_cql:
                targets["curio_db_cql"] = await pin_cql(stack, config.ssh.curio_db_cql)
            pool = SshPool(
                client_key=key_path,
                pins=StorePins(store),
                connect_timeout=config.ssh.connect_timeout_s,
                forwards=tunnels(config, targets),
            )
            clock = sim_clock()
            if clock is not None:  # a served simulator running fast: its time, its cadence
                scale_settings(settings, config, clock[1])
            reader = await open_cluster_reader(
                stack, config, config.ssh.curio_db, password, config.curio.db_user,
                config.curio.db_name,
            )  # fmt: skip
            engine = Engine(
                config, store, client, ssh=pool, public_key=public_key, settings=settings,
                on_change=on_change, clock=clock[0] if clock else SteadyClock(), cluster=reader,
            )  # fmt: skip
        stack.push_async_callback(engine.close)
        engine.monitor = await _monitor(stack, config, metrics, engine.client.secrets())
        heartbeat = asyncio.create_task(_heartbeat(store, owner, engine))
        try:
            yield EngineRuntime(engine, store, demo, cluster, archived)
        finally:
            heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await heartbeat
    finally:
        await stack.aclose()
        await store.close()


async def _demo_parts(
    stack: contextlib.AsyncExitStack,
    config: Config,
    store: Store,
    run: RunOptions,
    key_path: Path,
    public_key: str,
    settings: EngineSettings,
    on_change: Callable[[str], Awaitable[None] | None] | None,
    db_path: Path,
) -> tuple[Engine, Any, Any]:
    world = await stack.enter_async_context(load_world().demo(await demo_request(store, run)))
    targets = dict(world.controller)
    targets["curio_db_cql"] = await pin_cql(stack, targets["curio_db_cql"])
    pool = SshPool(
        client_key=key_path,
        pins=StorePins(store),
        connect_timeout=5.0,
        backoff=(0.2, 2.0, 2.0),
        forwards=tunnels(config, targets),
    )
    scale_settings(settings, config, run.speed)
    # the simulated cluster's own credentials: the workers get them, the reader uses them
    settings.curio_db_password = world.db_password
    config = replace(
        config, curio=replace(config.curio, db_user=world.db_user, db_name=world.db_name)
    )
    reader = await open_cluster_reader(
        stack, config, targets["curio_db"], world.db_password, world.db_user, world.db_name
    )
    if reader is not None:
        # `vastui --demo cluster` in another terminal reads the same database (demo_cluster.py)
        access = write_access(
            db_path, targets["curio_db"], world.db_user, world.db_name, world.db_password
        )
        stack.callback(remove_access, access)
    engine = Engine(
        config, store, world.client, ssh=pool, public_key=public_key, clock=world.clock,
        settings=settings, on_change=on_change, cluster=reader,
    )  # fmt: skip
    return engine, world.hosts, world.cluster_db


CURIO_DEFAULT_PASSWORD = "yugabyte"  # curio's --db-password default (cmd/curio/main.go:108-186)


async def open_cluster_reader(
    stack: contextlib.AsyncExitStack,
    config: Config,
    addr: str,
    password: str | None,
    user: str,
    dbname: str,
) -> ClusterReader | None:
    """The engine's reader of curio's cluster database (vastui/engine/cluster.py). A cluster
    the operator configured (``cluster_configured``) is read every step: one that refuses or
    cannot be reached is an outage (shown, an event, alerted, tried again each step). Without
    one, the engine's first step probes the default address (not here: the lease's heartbeat
    must run meanwhile), and nothing there turns the reader off with one line."""
    if not config.curio.read_cluster or not addr:
        log.info("curio's cluster is not read ([curio] read_cluster = false or no [ssh] curio_db)")
        return None
    host, _, port = addr.rpartition(":")
    reader = ClusterReader(
        host or "127.0.0.1", int(port), user=user, dbname=dbname,
        password=password or CURIO_DEFAULT_PASSWORD,
        configured=cluster_configured(config, password),
    )  # fmt: skip
    stack.push_async_callback(reader.close)
    return reader


def cluster_configured(config: Config, password: str | None) -> bool:
    """Whether the operator configured curio's cluster: the config file names it (an [ssh]
    curio_db or [curio] key of its, ``CurioSection.cluster_named``) or its password is given
    ($VASTUI_CURIO_DB_PASSWORD or the curio-db-password file; the demo's own). Otherwise only
    the defaults point at it, and a first look that finds nothing there means no cluster
    (the engine also counts a cluster this database's workers joined: Engine._cluster_used)."""
    return config.curio.cluster_named or password is not None


def _metrics_server(config: Config, run: RunOptions) -> MetricsServer | None:
    """The engine's metrics served, as configured (``--metrics``, else ``[metrics] listen``),
    over a collector the monitor fills; None when off."""
    listen = run.metrics or config.metrics.listen
    if not listen:
        return None
    server = MetricsServer(FleetCollector())
    server.start(listen)
    return server


async def _monitor(
    stack: contextlib.AsyncExitStack,
    config: Config,
    metrics: MetricsServer | None,
    secrets: tuple[str, ...],
) -> Monitor:
    """Metrics (served from the engine's own registry) and alerts, as configured."""
    a = config.alerts
    notifier = Notifier(
        webhook=a.webhook or None, command=a.command, timeout_s=a.timeout_s, secrets=secrets
    )
    stack.push_async_callback(notifier.close)
    monitor = Monitor(config, collector=metrics.collector if metrics else None, notifier=notifier)
    monitor.server = metrics
    return monitor


async def pin_cql(stack: contextlib.AsyncExitStack, upstream: str) -> str:
    """The controller's end of every worker's YCQL tunnel: a proxy that pins the cluster to the
    tunnel (gocql would connect to the peers the cluster advertises, which a worker cannot
    reach: vastui/ssh/cqlpin.py). Returns the address the remote forwards go to."""
    from vastui.ssh.cqlpin import CqlPinProxy

    host, _, port = upstream.rpartition(":")
    proxy = CqlPinProxy(host or "127.0.0.1", int(port))
    listen = await proxy.start()
    stack.push_async_callback(proxy.stop)
    return f"127.0.0.1:{listen}"


def scale_settings(settings: EngineSettings, config: Config, speed: float) -> None:
    """Cadences for a simulated cloud running ``speed`` times faster than real time.
    Deadlines and offer refreshes run on simulated time; polls stay quick in real time."""
    settings.poll_interval = 0.5
    settings.offers_refresh = max(2.0, 300.0 / speed)
    # Each read runs workerctl (and cuzk-bench status) on the worker: keep it light in real time.
    settings.prove_poll = max(3.0, config.proving.poll_s / speed)


SIM_CLOCK_ENV = "VASTUI_SIM_CLOCK"


def sim_clock() -> tuple[Callable[[], float], float] | None:
    """The clock of a served simulator (``vastui sim serve`` prints ``VASTUI_SIM_CLOCK=wall0,
    start,speed``), so that an engine against it times deadlines on the instances' time.
    Only for the simulator: a real Vast account runs on the wall clock."""
    text = os.environ.get(SIM_CLOCK_ENV, "").strip()
    if not text:
        return None
    try:
        wall0, start, speed = (float(x) for x in text.split(","))
    except ValueError:
        raise ValueError(f"{SIM_CLOCK_ENV} must be wall0,start,speed; got {text[:60]!r}") from None
    if not (math.isfinite(wall0) and math.isfinite(start) and 0 < speed < 1e6):
        raise ValueError(f"{SIM_CLOCK_ENV}: not a usable clock: {text[:60]!r}")
    return steady_scaled(start, wall0, speed), speed


async def demo_request(store: Store, run: RunOptions) -> DemoRequest:
    """The demo world this database asks for: the market of ``run.seed``, ids and simulated time
    that carry on from earlier runs."""
    last_id, last_ts = await demo_history(store)
    return DemoRequest(
        seed=run.seed, speed=run.speed, machine_fault_rate=run.machine_fault_rate,
        after_id=last_id, start=max(time.time(), last_ts + 60.0), demand=run.demand,
        new_wallet=run.new_wallet, lotus_token=run.lotus_token,
    )  # fmt: skip


async def demo_history(store: Store) -> tuple[int, float]:
    """The highest instance id and the latest time this demo database holds.

    A new demo cloud gives ids above every id a previous run gave (Vast's ids only grow, and a
    reused id would be taken for the old instance), and its simulated clock starts after the
    previous run's, which ran ahead of the wall clock at the demo's speed."""
    instances = await store.instances.all()
    events = await store.events.all(limit=1)
    times = [e.ts for e in events]
    for rec in instances:
        times += [t for t in (rec.created_at, rec.last_seen_at, rec.killed_at) if t is not None]
    # what a new run carried over from the last one (vastui/store/archive.py) is as late
    strikes = await store.badlist.strikes()
    times += [s.ts for s in strikes]
    times += [b.updated_at for b in await store.badlist.all(include_expired=True)]
    times += [p.measured_at for p in await store.perf.all()]
    ids = [r.vast_id for r in instances] + [s.instance_id for s in strikes if s.instance_id]
    return max(ids, default=0), max(times, default=0.0)


# What the worker reaches on its own loopback, forwarded from the controller: the Lotus API
# (1234, for the setup check and curio's chain client) and curio's database, YSQL (5433) and
# YCQL (9042): curio's defaults (cmd/curio/main.go:108-186).
WORKER_PORTS = {"lotus_api": 1234, "curio_db": 5433, "curio_db_cql": 9042}


def tunnels(config: Config, targets: dict[str, str] | None = None) -> list[RemoteForward]:
    """Remote forwards for every worker connection; ``targets`` overrides the config's
    controller-side addresses (the demo's stand-ins)."""
    out = []
    for name, worker_port in WORKER_PORTS.items():
        addr = (targets or {}).get(name) or getattr(config.ssh, name)
        if not addr:
            continue
        host, _, port = addr.rpartition(":")
        out.append(RemoteForward("127.0.0.1", worker_port, host or "127.0.0.1", int(port)))
    return out


async def _release(store: Store, owner: str) -> None:
    """Give the lease back on exit; a dead store cannot, and must not hide why the engine
    stopped (the lease lapses by itself, and a dead holder's lease is taken over at once)."""
    try:
        await store.lease.release(owner)
    except StoreError as exc:
        log.warning("could not release the engine lease: %s", exc)


async def _heartbeat(store: Store, owner: str, engine: Engine) -> None:
    """Renew the lease; stop the engine once it is lost (another engine may own the fleet) or
    cannot be renewed (the store is dead: say so, not "another engine took over")."""
    last_renewed = time.monotonic()
    last_error: str | None = None
    while True:
        await asyncio.sleep(HEARTBEAT_EVERY)
        try:
            await store.check_health()  # a deleted or replaced file: stop within a second
            renewed = await store.lease.renew(owner, ttl=LEASE_TTL)
        except StoreFatal as exc:
            engine.stop_fatal(str(exc))
            return
        except Exception as exc:  # busy, locked: retried until the lease would lapse
            last_error = sanitize_line(str(exc), 200)
            log.warning("lease heartbeat failed: %s", last_error)
            renewed = None
        if renewed:
            last_renewed = time.monotonic()
            continue
        if renewed is False:
            holder = await _holder(store)
            engine.stop_fatal(f"engine lease lost: {holder} took over this database")
            return
        if time.monotonic() - last_renewed > LEASE_TTL:
            engine.stop_fatal(
                f"engine lease could not be renewed for {LEASE_TTL:.0f} s: {last_error}"
            )
            return


async def _holder(store: Store) -> str:
    try:
        lease = await store.lease.holder()
    except Exception:
        return "another engine"
    if lease is None:
        return "another engine (the lease row is gone)"
    return f"another engine (pid {lease.pid} on {sanitize_line(lease.hostname, 80)})"


__all__ = ["LeaseHeld", "RunOptions", "engine_runtime", "parse_duration"]
