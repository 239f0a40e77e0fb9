"""The console's link to the fleet, without widgets.

Two modes, one interface:
- **own engine**: no other engine holds the database's lease, so the console runs one
  in-process (the same `engine_runtime` the headless mode uses);
- **attached**: a headless engine (`vastui --engine-only`) holds the lease. The console starts
  no engine: it reads that engine's state from the store and sends its commands (deploy,
  destroy, ignore, unignore) through the store's command table.

Either way the store is the source of truth the UI reads; actions are store commands.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC
from pathlib import Path
from typing import Any

from vastui.backend import Options, make_client, make_demo_cloud
from vastui.config import load_api_key, state_dir
from vastui.engine.bidding import RiskModel
from vastui.engine.engine import Engine
from vastui.engine.keys import ensure_ssh_key
from vastui.engine.ranking import Levers, RankedOffer, from_record, rank_offers
from vastui.engine.runtime import EngineRuntime, RunOptions, engine_runtime
from vastui.engine.spend import Spend, fleet_spend, instance_cost, local_midnight
from vastui.logfmt import ClockFormatter
from vastui.pricing import required_rate
from vastui.redact import SecretFilter
from vastui.sanitize import sanitize_line
from vastui.ssh import LOG_SOURCES, SshPool, StorePins, Worker
from vastui.store import (
    BadEntry,
    EngineStatus,
    Event,
    ForeignInstance,
    InstanceRecord,
    Lease,
    LegacyReviewEntry,
    PerfRecord,
    Store,
    StoreNotCurrent,
)
from vastui.store.common import json_dict
from vastui.store.lease import holder_is_dead
from vastui.vast.client import VastClient

log = logging.getLogger("vastui.console")
LOG_KEEP = 5_000  # lines a log stream hands the pane per batch at most (the newest)

ENGINE_LOG_LINES = 5_000
HEARTBEAT_STALE = 4.0  # seconds without a lease heartbeat before the engine counts as gone


@dataclass
class Snapshot:
    """Everything the panes show, read in one go."""

    instances: list[InstanceRecord] = field(default_factory=list)
    # Instances with vastui's label that this database never intended: another controller's.
    foreign: list[ForeignInstance] = field(default_factory=list)
    bad: list[BadEntry] = field(default_factory=list)
    legacy: list[LegacyReviewEntry] = field(default_factory=list)
    perf: list[PerfRecord] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    lease: Lease | None = None
    taken_at: float = 0.0
    engine_status: EngineStatus | None = None
    spend: Spend | None = None  # the fleet's, on the fleet's clock at `taken_at`

    def counts(self) -> dict[str, int]:
        live = [r for r in self.instances if not r.killed]
        return {
            "running": sum(r.state == "proving" for r in live),
            "benchmarking": sum(r.state == "benchmark" for r in live),
            "fetching": sum(r.state in ("setup", "paramfetch") for r in live),
            "loading": sum(r.state == "loading" for r in live),
            "killed": sum(r.killed for r in self.instances),
        }

    def fleet_economics(self) -> FleetEconomics:
        """What the fleet costs and proves: measured where cuzk's counters say so, estimated
        (from the benchmarks) where they do not yet."""
        live = [r for r in self.instances if not r.killed]
        proving = [r for r in live if r.state == "proving"]
        measured = [r for r in proving if r.prod_rate is not None]
        rate = sum(r.prod_rate or 0.0 for r in measured)
        measured_dph = sum(r.dph_total or 0.0 for r in measured)
        est = sum(r.bench_rate or 0.0 for r in proving)
        proving_dph = sum(r.dph_total or 0.0 for r in proving)
        return FleetEconomics(
            dph=sum(r.dph_total or 0.0 for r in live),
            measured_rate=rate if measured else None,
            measured_cpp=measured_dph / rate if rate > 0 else None,
            measured_workers=len(measured),
            proving_workers=len(proving),
            est_rate=est,
            est_cpp=proving_dph / est if est > 0 else None,
            proofs=sum(r.prod_completed or 0 for r in live),
            failed=sum(r.prod_failed or 0 for r in live),
        )


@dataclass(frozen=True)
class FleetEconomics:
    dph: float  # $/h of every live instance
    measured_rate: float | None  # proofs/h measured on proving workers (None: none measured)
    measured_cpp: float | None  # $/proof of those workers, measured
    measured_workers: int
    proving_workers: int
    est_rate: float  # proofs/h the benchmarks promise for every proving worker
    est_cpp: float | None
    proofs: int  # proofs completed in production by live workers
    failed: int


class _RingHandler(logging.Handler):
    """The in-process engine's log, for the Logs pane (bounded), secrets redacted as in the
    headless engine's log (vastui/engine/headless.py)."""

    def __init__(
        self, ring: collections.deque[str], clock: Callable[[], float], secrets: list[str]
    ) -> None:
        super().__init__(logging.INFO)
        self.ring = ring
        self.total = 0  # lines ever appended: the ring's length stops growing when full
        self.setFormatter(ClockFormatter(clock))  # the fleet's clock, as the workers' lines
        self.addFilter(SecretFilter(secrets))

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):
            self.ring.append(sanitize_line(self.format(record), 2000))
            self.total += 1


class FleetBridge:
    def __init__(self, opts: Options, *, read_only: bool = False, run: RunOptions | None = None):
        self.opts = opts
        self.read_only = read_only
        self.run_options = run or RunOptions(mode="console")
        self.store: Store | None = None
        self.runtime: EngineRuntime | None = None
        self.attached_to: Lease | None = None
        self.client: VastClient | None = None  # attached mode: our own, for offer searches
        self.ssh: SshPool | None = None  # attached mode: our own, for log streams
        self.engine_log: collections.deque[str] = collections.deque(maxlen=ENGINE_LOG_LINES)
        self._offers: list[RankedOffer] = []
        self._offers_at: float | None = None
        self._stack = contextlib.AsyncExitStack()
        self._engine_task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._handler: _RingHandler | None = None
        self.mode = "starting"
        self.detached_reason: str | None = None
        self._status: EngineStatus | None = None
        self._view_filter: str | None = None  # this view's Vast filter, when edited
        self._published_at: float | None = None
        self._ring_seen = 0
        self._file_offset = 0

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        # Opened as a reader first: a console that attaches to an engine never migrates the
        # database under it. One that runs its own engine lets the engine migrate.
        try:
            self.store = await Store.open(self.opts.db_path, migrate=False)
        except StoreNotCurrent as exc:
            if self.read_only and not exc.absent:
                raise  # older than this code: one line, nothing migrated
            if self.read_only:  # nothing known yet, and no file made behind an engine's back
                self.store = await Store.empty(self.opts.db_path)
        if self.store is not None:
            self._stack.push_async_callback(self.store.close)
            holder = await self.store.lease_holder()
            if holder is not None or self.read_only:
                # A read-only console never runs an engine: engines rent and destroy.
                await self._attach(holder)
                return
        self._handler = _RingHandler(self.engine_log, self.now, [_api_key()])
        logging.getLogger("vastui").addHandler(self._handler)
        logging.getLogger("vastui").setLevel(logging.INFO)
        self.runtime = await self._stack.enter_async_context(
            engine_runtime(self.opts, self.run_options)
        )
        if self.store is None:  # the engine has created or migrated it
            self.store = await Store.open(self.opts.db_path, migrate=False)
            self._stack.push_async_callback(self.store.close)
        self.mode = "engine"
        self._engine_task = asyncio.create_task(self.runtime.engine.run(self._stop))

    async def _attach(self, holder: Lease | None) -> None:
        self.attached_to = holder
        self.mode = "attached" if holder is not None else "watching"
        if self.opts.demo:
            # The headless demo's simulated cloud lives in its process; search our own copy.
            from vastui.backend import client_for_cloud

            self.client = client_for_cloud(make_demo_cloud(self.opts.seed, self.opts.speed))
        else:
            self.client = make_client(self.opts)
        self._stack.push_async_callback(self.client.aclose)
        key_path, _ = ensure_ssh_key(self.opts.config)
        self.ssh = SshPool(client_key=key_path, pins=StorePins(self.store))  # type: ignore[arg-type]
        self._stack.push_async_callback(self.ssh.close_all)

    async def close(self) -> None:
        self._stop.set()
        if self._engine_task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(self._engine_task, 15)
        if self._handler is not None:
            logging.getLogger("vastui").removeHandler(self._handler)
        await self._stack.aclose()

    @property
    def engine(self) -> Engine | None:
        return self.runtime.engine if self.runtime is not None else None

    # -- reads -------------------------------------------------------------------------

    async def snapshot(self) -> Snapshot:
        assert self.store is not None
        store = self.store
        instances = await store.list_instances()
        status = await store.get_engine_status()
        self._status = status
        lease = await store.lease_holder()
        self._observe_engine(lease)
        now = self.now()
        return Snapshot(
            instances=instances,
            foreign=await store.list_foreign(),
            bad=await store.list_bad(),
            legacy=await store.list_legacy_review(),
            perf=await store.list_perf(),
            events=await store.list_events(limit=500),
            lease=lease,
            taken_at=now,
            engine_status=status,
            spend=fleet_spend(instances, now, local_midnight(now, UTC)),
        )

    # -- the engine we attach to: gone within seconds, not after its lease lapses ---------

    def _observe_engine(self, lease: Lease | None) -> None:
        engine = self.engine
        if self.mode == "engine" and engine is not None and engine.fatal is not None:
            self._gone(f"this console's engine stopped: {engine.fatal}")
            return
        if self.mode != "attached":
            return
        if lease is None:
            self._gone("its lease was released or lapsed")
            return
        if self.attached_to is not None and lease.owner != self.attached_to.owner:
            self.attached_to = lease  # a new engine took over: follow it
        if holder_is_dead(lease):
            self._gone(f"its process (pid {lease.pid}) is not running")
            return
        beat = time.time() - lease.heartbeat_at
        if beat > HEARTBEAT_STALE:
            self._gone(f"no heartbeat for {beat:.0f} s")
            return
        self.detached_reason = None

    def _gone(self, why: str) -> None:
        if self.detached_reason is None:
            log.warning("the attached engine is gone: %s", why)
        self.detached_reason = why

    @property
    def detached(self) -> bool:
        """Attached to an engine that no longer runs, or our own engine stopped itself (its
        store dead, its lease lost): nothing would carry out a command."""
        return self.mode in ("attached", "engine") and self.detached_reason is not None

    def now(self) -> float:
        """The fleet's clock: our engine's (simulated time in the demo), else the wall clock,
        or, attached to a demo engine, the time of its last published cycle."""
        if self.runtime is not None:
            return float(self.runtime.engine.clock())
        if self.opts.demo and self._status is not None:
            return self._status.updated_at
        return time.time()

    def instance_spend(self, rec: InstanceRecord) -> float | None:
        return instance_cost(rec, self.now()) if rec.source == "vastui" else None

    def ssh_command(self, rec: InstanceRecord) -> str | None:
        """What an operator types to reach the worker: with vastui's key (its account key)."""
        if not rec.ssh_host or rec.killed:
            return None
        return f"ssh -i {_home(self.key_path())} -p {rec.ssh_port or 22} root@{rec.ssh_host}"

    def key_path(self) -> Path:
        configured = self.opts.config.ssh.key_path
        return Path(configured).expanduser() if configured else state_dir() / "id_ed25519"

    def own_live_instances(self, snapshot: Snapshot) -> list[InstanceRecord]:
        """Live instances this console's own engine supervises (none when attached)."""
        if self.runtime is None:
            return []
        return [r for r in snapshot.instances if not r.killed and r.source == "vastui"]

    def can_hand_over(self) -> bool:
        """A headless engine can take the fleet on: not in the demo, whose cloud is ours."""
        return self.runtime is not None and not self.opts.demo

    async def offers(self, force: bool = False) -> list[RankedOffer]:
        """Ranked offers: the engine's own list, or our own search (attached, or with this
        view's own filter). Offers on machines that run a worker of ours are not offered."""
        engine = self.engine
        if engine is not None and self._view_filter is None:
            return await engine.refresh_offers(force=force)
        if engine is None and self._view_filter is None and self.mode == "attached":
            published = await self._published_offers()
            if published is not None:
                return published
        client = self.client if self.client is not None else engine.client if engine else None
        assert client is not None and self.store is not None
        cfg = self.opts.config
        fresh = self._offers_at is not None and time.monotonic() - self._offers_at < 60
        if fresh and not force:
            return self._offers
        result = await client.search_offers(
            self.view_filter,
            order=cfg.offers.order,
            limit=cfg.offers.limit,
            allocated_storage=cfg.fleet.disk_gb,
        )
        bad = {e.machine_id: e.reason for e in await self.store.list_bad()}
        busy = {r.machine_id for r in await self.store.list_instances(include_killed=False)}
        offers = [o for o in result.offers if o.machine_id not in busy]
        # ranked as the engine ranks them (engine.refresh_offers): bids, the levers
        bids = None
        if cfg.bids.mode != "off":
            history = await self.store.bid_history(now=self.now())
            bids = (cfg, RiskModel(history, cfg))
        self._offers = rank_offers(
            offers, await self.store.list_perf(), bad, cfg.fleet.max_cost_per_proof, bids,
            Levers.of(cfg),
        )  # fmt: skip
        self._offers_at = time.monotonic()
        return self._offers

    async def _published_offers(self) -> list[RankedOffer] | None:
        """The attached engine's own ranked offers (None: it has published none yet)."""
        assert self.store is not None
        published = await self.store.get_engine_offers()
        if published is None:
            return None
        _filter, rows, updated_at = published
        if updated_at != self._published_at:  # same list object while unchanged: no re-render
            busy = {r.machine_id for r in await self.store.list_instances(include_killed=False)}
            ranked = [from_record(row) for row in rows]
            self._offers = [r for r in ranked if r is not None and r.offer.machine_id not in busy]
            self._published_at = updated_at
        return self._offers

    @property
    def view_filter(self) -> str:
        return self._view_filter or self.opts.config.offers.filter

    def set_filter(self, text: str) -> None:
        """This view's Vast filter (validated by the caller). The engine keeps renting with
        the configured filter: editing what you look at never changes what it rents."""
        self._view_filter = None if text == self.opts.config.offers.filter else text
        self._offers_at = None
        self._published_at = None

    def min_rate_for(self, dph_total: float) -> float:
        return required_rate(dph_total, self.opts.config.fleet.max_cost_per_proof)

    @property
    def vast_age(self) -> float | None:
        """Seconds since the engine last listed instances on Vast (None: unknown)."""
        engine = self.engine
        if engine is not None and engine.vast_seen_at is not None:
            return time.time() - engine.vast_seen_at
        return None

    # -- actions (always through the store, so both modes behave the same) ---------------

    async def submit(self, kind: str, **args: Any) -> int:
        if self.read_only:
            raise PermissionError("read-only console: actions are disabled")
        if self.detached:
            raise ConnectionError(
                f"no engine to carry this out ({self.detached_reason}): start "
                "`vastui --engine-only`, or restart the console to run one"
            )
        assert self.store is not None
        command_id = await self.store.submit_command(kind, args)
        if self.engine is not None:
            self.engine.wake()
        return command_id

    async def wait_command(self, command_id: int, timeout: float = 60.0) -> tuple[bool, str]:
        """(ok, result) once the engine has run it; (False, ...) after the timeout."""
        assert self.store is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            cmd = await self.store.get_command(command_id)
            if cmd is not None and cmd.status in ("done", "failed"):
                return cmd.status == "done", cmd.result or ""
            if self.detached:
                return False, f"the engine is gone ({self.detached_reason}): not carried out"
            await asyncio.sleep(0.2)
        return False, "no answer from the engine yet (it will still run the command)"

    # -- logs ----------------------------------------------------------------------------

    def _worker(self, rec: InstanceRecord) -> Worker | None:
        pool = self.engine.ssh if self.engine is not None else self.ssh
        if pool is None or rec.ssh_host is None or rec.killed:
            return None
        return pool.worker(rec.vast_id, (rec.ssh_host, int(rec.ssh_port or 22)))

    async def stream_logs(
        self, rec: InstanceRecord, source: str, tail: int = 500
    ) -> AsyncIterator[list[str]]:
        """Batches of sanitised lines from one worker log source, following."""
        if source not in LOG_SOURCES:
            raise ValueError(f"unknown log source {source!r}")
        worker = self._worker(rec)
        if worker is None:
            raise ConnectionError(f"instance {rec.vast_id} has no SSH endpoint (yet)")
        # Batches read ahead of the pane, sanitised a read at a time (Worker.log_batches); a
        # pane slower than the log gets the newest LOG_KEEP lines of what came since its last
        # batch (batch.skipped counts the rest): it skips through a firehose, never lags.
        lines = worker.log_batches(source, follow=True, tail=tail, keep=LOG_KEEP)
        async with contextlib.aclosing(lines) as batches:
            async for batch in batches:
                yield batch

    def cluster_node(self, rec: InstanceRecord) -> dict[str, Any] | None:
        """The worker's curio machine in the simulated cluster, read-only: the demo's own engine
        holds the cluster database stand-in; anywhere else the worker's own report is all."""
        cluster = self.runtime.cluster if self.runtime is not None else None
        if cluster is None:
            return None
        return cluster_machine(cluster.view(), rec)

    async def cuzk_status(self, rec: InstanceRecord) -> dict[str, Any]:
        worker = self._worker(rec)
        if worker is None:
            raise ConnectionError(f"instance {rec.vast_id} is not reachable over SSH")
        return await worker.cuzk_status()

    def engine_log_file(self) -> Path:
        return state_dir() / ("engine-demo.log" if self.opts.demo else "engine.log")

    def new_engine_log_lines(self) -> list[str]:
        """Engine log lines since the last call: our engine's ring, or the headless log file."""
        if self.runtime is not None:
            total = self._handler.total if self._handler is not None else 0
            new = min(total - self._ring_seen, len(self.engine_log))
            self._ring_seen = total
            return list(self.engine_log)[-new:] if new > 0 else []
        path = self.engine_log_file()
        try:
            size = path.stat().st_size
            if size < self._file_offset:  # rotated or truncated
                self._file_offset = 0
            if self._file_offset == 0 and size > 256_000:
                self._file_offset = size - 256_000  # start near the end of a long log
            with path.open("rb") as fh:
                fh.seek(self._file_offset)
                data = fh.read(1_000_000)
        except OSError:
            return []
        cut = data.rfind(b"\n") + 1  # only whole lines
        self._file_offset += cut
        return [
            sanitize_line(line, 2000) for line in data[:cut].decode("utf-8", "replace").splitlines()
        ]

    def rewind_engine_log(self) -> None:
        self._ring_seen = 0
        self._file_offset = 0


def cluster_machine(view: dict[str, Any], rec: InstanceRecord) -> dict[str, Any] | None:
    """The row of ``rec``'s curio node in a cluster view (vastui/sim/harmonydb.py ``view``): by
    the machine id the worker reported, else by its identity's host:port."""
    info = json_dict(rec.curio_info)
    wanted = info.get("machine_id")
    listen = info.get("host_and_port")
    for machine in view.get("machines") or []:
        if machine.get("id") == wanted or (listen and machine.get("host_and_port") == listen):
            return machine
    return None


def _home(path: Path) -> str:
    """~ for the home directory: shorter, and the same on every screen of one operator."""
    home = str(Path.home())
    text = str(path)
    return "~" + text[len(home) :] if home != "/" and text.startswith(home + "/") else text


def _api_key() -> str:
    """The account's key, to keep out of the Logs pane ("" when there is none: the demo)."""
    try:
        return load_api_key()[0] or ""
    except Exception:  # a bad key file: the client says so itself
        return ""
