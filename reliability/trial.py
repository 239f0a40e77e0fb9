"""A fleet under trial: the served cloud, the engine (restarted as often as a trial likes), and
the observer folding every observation through the invariants."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from reliability import invariants as inv
from reliability.observe import (
    Cli,
    StoreUnreadable,
    create_foreign,
    engine_status,
    lease_pid,
    read_store,
    sim_counters,
)
from reliability.procs import (
    SIM_KEY,
    VAST_TIMEOUT,
    Engine,
    FleetSpec,
    Sim,
    Workdir,
    engine_command,
    engine_config,
    start_engine,
    start_sim,
    venv_bin,
    write_config,
)
from reliability.proxy import TcpProxy
from vastui.engine.policy import UNHEALTHY  # what Vast lists as not working

FOREIGN_LABEL = "reliability-foreign"  # not vastui's shape: the engine must never touch it
# An engine on the served cloud's clock steps every 0.5 s and searches offers every
# max(2, 300/speed) s (vastui/engine/runtime.py scale_settings).
ENGINE_POLL = 0.5
# One step may be held by one Vast call at its worst: the request's timeout (the trial's
# [vast] timeout_s) and the client's retry budget (vastui/vast/client.py RetryPolicy).
STEP_BOUND = VAST_TIMEOUT + 60.0
# An orphan must be adopted (or destroyed) within two steps, one of them held that long, of the
# engine being up (a restarted engine takes its lease at once and steps at once).
ORPHAN_BOUND = 2 * ENGINE_POLL + STEP_BOUND
# A rent answered 5xx that did nothing frees its slot after RENT_MISSES good lists and
# RENT_MISS_MIN_AGE engine-clock seconds (vastui/engine/engine.py).
RENT_MISS_MIN_AGE = 60.0


def refill_bound(speed: float) -> float:
    """How long (wall seconds) the fleet may stay below its target while offers allow: a step
    held at its worst, a failed rent's slot freed, an offer search, and two more steps."""
    offers_refresh = max(2.0, 300.0 / speed)
    return STEP_BOUND + RENT_MISS_MIN_AGE / speed + offers_refresh + 4 * ENGINE_POLL


# What the engine logs when it meets a fault of the cloud (vastui/vast/client.py, engine.py).
FAULT_LINES = {
    "rate_limited_429": re.compile(r"too frequent|\b429\b"),
    "gateway_5xx": re.compile(
        r"\b50[234]\b.*(Gateway|Unavailable)|(Gateway|Unavailable).*\b50[234]\b"
    ),
    "timeouts": re.compile(r"timed out|Timeout", re.IGNORECASE),
    "create_outcome_unknown": re.compile(r"unknown outcome"),
    "step_errors": re.compile(r"cannot list instances|engine step:"),
}
# Checks of one snapshot count once seen twice in a row: a crash leaves the store consistent,
# but two of the engine's transactions may straddle one read.
CONFIRM = 2


@dataclass
class TrialOptions:
    seed: int = 1
    speed: float = 100.0
    faults: str = "heavy"
    machine_fault_rate: float | None = 1.0
    fleet: FleetSpec = field(default_factory=FleetSpec)
    observe_every: float = 2.0  # wall seconds between observations
    integrity_every: int = 10  # observations between integrity checks
    workdir: Path | None = None
    keep: bool = False
    strikes_to_ban: int = 2  # config proving.strikes_to_ban (the default)
    api_proxy: bool = False  # the engine reaches the Vast API through a TcpProxy (api-outage)
    # The trial switches fleet-wide faults on (storm): failures the engine declared the fleet's
    # need no ban (invariants.forgiven_by_fleet_failure); elsewhere every machine fault does.
    fleet_faults: bool = False


# `Trial.observe(rows=...)` default: the observer lists the cloud itself.
_FETCH: Any = object()


class Trial:
    def __init__(self, opts: TrialOptions, *, parent: Trial | None = None, name: str = "") -> None:
        self.opts = opts
        # A peer (second-controller): another engine with a database of its own on the
        # parent's served cloud; its findings go to the parent's report, tagged with its name.
        self.parent = parent
        self.tag = name
        if parent is not None:
            root = parent.wd.root / name
        else:
            root = opts.workdir or Path(tempfile.mkdtemp(prefix="vastui-reliability-"))
        self.wd = Workdir(root)
        self.sim: Sim | None = None
        self.cli: Cli | None = None
        self.engine: Engine | None = None
        self.engine_up_since: float | None = None
        self.foreign: frozenset[int] = frozenset()
        self.timeline: list[tuple[float, int]] = []
        self.samples: list[inv.Sample] = []
        self.seen: dict[str, frozenset[int]] = {}
        self.ever_ours: set[int] = set()
        self.watch = inv.OrphanWatch()
        self.pending: dict[tuple[str, str], int] = {}  # snapshot violation → times seen in a row
        self.pending_by: dict[str, dict[tuple[str, str], int]] = {}  # the drivers' (confirm)
        self.violations: list[inv.Violation] = []
        self.counts: Counter[str] = Counter()
        self.started = time.time()
        self.last_rows: list[inv.VastRow] | None = None
        self.last_store: inv.StoreView | None = None
        self.log_lines: list[str] = []
        self.orphan_max_age = 0.0  # the longest an instance of ours went untracked, engine up
        self.ledger_checks = 0  # observations that checked the cloud's creates per label
        self.credit_at_start: float | None = None
        self.proxy: TcpProxy | None = None
        # While the engine cannot reach the Vast API, it can neither adopt nor rent: the
        # orphan clock stops and samples below the target are excused (api-outage).
        self.blind = False
        self.unhealthy_seen: dict[int, str] = {}  # ours the observer saw exited/offline
        # Another database's instances on the same account (second-controller): never to be
        # recorded, named or destroyed by this one.
        self.others: set[int] = set()
        # The fleet ids of every database in the trial (None: this one's only); a row of the
        # fleet's name under any other id is an orphan (nobody's). Off for a peer (the parent
        # checks the account).
        self.known_fids: set[str] | None = None
        self.stray_check = parent is None

    # -- set-up ------------------------------------------------------------------------------

    def start(self) -> None:
        o = self.opts
        self.say(f"work directory {self.wd.root}")
        self.sim = start_sim(
            self.wd, seed=o.seed, speed=o.speed, faults=o.faults,
            machine_fault_rate=o.machine_fault_rate,
        )  # fmt: skip
        self.say(
            f"served cloud {self.sim.url} (seed {o.seed}, speed {o.speed:g}, {o.faults}); "
            f"engines run on its clock VASTUI_SIM_CLOCK={self.sim.clock}"
        )
        if o.api_proxy:
            where = urlsplit(self.sim.url)
            self.proxy = TcpProxy(where.hostname or "127.0.0.1", where.port or 80)
            self.proxy.start()
            self.say(f"the engine reaches the Vast API through a proxy at {self.proxy.url}")
        write_config(self.wd.config, engine_config(self.sim, o.fleet, api_url=self.engine_url))
        env = self.wd.env()
        self.cli = Cli(venv_bin("vastai"), self.sim.url, SIM_KEY, env)
        self.foreign = create_foreign(self.cli, FOREIGN_LABEL)
        if not self.foreign:
            raise SystemExit("reliability: could not rent the foreign instance with the vastai CLI")
        self.credit_at_start = self.cli.credit()
        self.say(
            f"foreign instance(s) {sorted(self.foreign)} rented with the vastai CLI; "
            f"account credit ${self.credit_at_start}"
        )
        self.set_target(o.fleet.target)

    def set_target(self, target: int) -> None:
        self.timeline.append((time.time(), target))
        self.target = target

    @property
    def engine_url(self) -> str:
        """The Vast API as the engine reaches it (the proxy's address, if any)."""
        assert self.sim is not None
        return self.proxy.url if self.proxy is not None else self.sim.url

    def sim_now(self, wall: float | None = None) -> float:
        """The engine's clock (the served cloud's simulated time) at ``wall`` (default now)."""
        assert self.sim is not None
        wall0, start, speed = (float(x) for x in self.sim.clock.split(","))
        return start + ((time.time() if wall is None else wall) - wall0) * speed

    def set_blind(self, blind: bool) -> None:
        """The engine cannot reach the Vast API (or can again: its view, and with it the
        orphan clock, starts afresh then)."""
        self.blind = blind
        if not blind and self.engine_up_since is not None:
            self.engine_up_since = time.time()

    def ssh_switch(self, refuse: bool) -> dict[str, Any]:
        """Every sandbox's sshd refuses connections (dropping the live ones), or listens again
        (``POST /_sim/ssh``); the cloud's count of its sshds."""
        import httpx

        assert self.sim is not None
        resp = httpx.post(
            self.sim.url.rstrip("/") + "/_sim/ssh", json={"refuse": refuse},
            headers={"Authorization": f"Bearer {SIM_KEY}"}, timeout=30.0,
        )  # fmt: skip
        resp.raise_for_status()
        data = resp.json()
        return data if isinstance(data, dict) else {}

    def peer(self, name: str, opts: TrialOptions) -> Trial:
        """Another engine on this trial's served cloud and account, with its own work directory
        (its database, logs, SSH key) under this one's, and its own API proxy if ``opts`` asks;
        its violations are this trial's, tagged ``name``. Its config is the driver's to write."""
        assert self.sim is not None and self.cli is not None
        other = Trial(opts, parent=self, name=name)
        other.sim, other.cli, other.foreign = self.sim, self.cli, self.foreign
        other.credit_at_start = self.credit_at_start
        other.started = self.started
        if opts.api_proxy:
            where = urlsplit(self.sim.url)
            other.proxy = TcpProxy(where.hostname or "127.0.0.1", where.port or 80)
            other.proxy.start()
        other.set_target(opts.fleet.target)
        return other

    def close(self) -> None:
        if self.engine is not None and self.engine.alive():
            self.engine.kill(signal.SIGTERM)
        if self.proxy is not None:
            self.proxy.stop()
        if self.parent is not None:
            return  # the cloud and the work directory are the parent's
        if self.sim is not None:
            self.sim.stop()
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.sim.proc.pid, signal.SIGKILL)  # its workers, if any were left
        if not self.opts.keep:
            shutil.rmtree(self.wd.root, ignore_errors=True)

    def say(self, line: str) -> None:
        if self.parent is not None:
            self.parent.say(f"[{self.tag}] {line}")
            return
        stamp = time.strftime("%H:%M:%S")
        self.log_lines.append(f"{stamp} {line}")
        print(f"[{stamp}] {line}", flush=True)

    # -- the engine ----------------------------------------------------------------------------

    def engine_cmd(self, target: int | None = None) -> list[str]:
        return engine_command(self.wd, self.engine_url, target)

    def start_engine(self, crash_points: str = "", crash_seed: int = 0) -> Engine:
        assert self.engine is None or not self.engine.alive()
        assert self.sim is not None
        self.engine = start_engine(
            self.wd, self.engine_cmd(self.target), sim_clock=self.sim.clock,
            crash_points=crash_points, crash_seed=crash_seed,
        )  # fmt: skip
        self.engine_up_since = time.time()
        self.counts["engine_starts"] += 1
        return self.engine

    def wait_lease(self, timeout: float = 20.0) -> bool:
        """Whether the engine just started took the lease (and is alive) within ``timeout``."""
        assert self.engine is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if lease_pid(self.wd.db) == self.engine.pid:
                return True
            if not self.engine.alive():
                return False
            time.sleep(0.1)
        return False

    def kill_engine(self, sig: int = signal.SIGKILL) -> int | None:
        assert self.engine is not None
        code = self.engine.kill(sig)
        self.engine_up_since = None
        return code

    def engine_died(self) -> bool:
        if self.engine is not None and not self.engine.alive() and self.engine_up_since:
            self.engine_up_since = None
            return True
        return False

    # -- observing ------------------------------------------------------------------------------

    def observe(
        self, *, check_integrity: bool = False, final: bool = False, rows: Any = _FETCH
    ) -> None:
        """One observation of the cloud and the store, through every invariant. ``rows``: the
        cloud as just listed by the caller (None: that listing failed), shared by the engines
        of one trial; by default the observer lists it now."""
        assert self.cli is not None
        at = time.time()
        self.engine_died()
        if rows is _FETCH:
            rows = self.cli.instances()
        self.counts["observations"] += 1
        if rows is None:
            self.counts["observations_failed"] += 1
        check = (
            check_integrity or final or self.counts["observations"] % self.opts.integrity_every == 0
        )
        try:
            store = read_store(self.wd.db, sorted(self.foreign | self.others), check=check)
        except StoreUnreadable as exc:
            self.record([inv.Violation("integrity", "database", f"unreadable: {exc}", at)])
            return
        if store is None:
            store = self.last_store or inv.StoreView()
        self.last_store = store
        if rows is not None:
            self.last_rows = rows
            self._fold_rows(at, rows, store)
        fleet = self.opts.fleet.name
        snap = inv.snapshot_checks(
            rows, store, fleet=fleet, foreign=self.foreign,
            strikes_to_ban=self.opts.strikes_to_ban, others=frozenset(self.others),
            fleet_faults=self.opts.fleet_faults,
        )  # fmt: skip
        snap += inv.double_rents(self.seen, store)
        self._confirm(snap, final)
        self.check_ledger()

    @property
    def fleet_id(self) -> str | None:
        """This database's fleet identity (in its labels), once read."""
        return self.last_store.fleet_id if self.last_store is not None else None

    def check_ledger(self) -> None:
        """One instance per label, exactly: the cloud's own count of creates per label."""
        if self.parent is not None:
            return  # one ledger for the account: the parent checks it
        ledger = (self.sim_counts() or {}).get("labels_created")
        if isinstance(ledger, dict):
            self.ledger_checks += 1
            self.record(inv.double_rents_ledger(ledger))

    def _fold_rows(self, at: float, rows: list[inv.VastRow], store: inv.StoreView) -> None:
        fleet = self.opts.fleet.name
        fid = store.fleet_id
        self.seen = inv.labels_seen(self.seen, rows)
        alive = inv.ours(rows, fleet, fid)
        self.ever_ours.update(r.id for r in alive)
        for r in alive:
            if r.status in UNHEALTHY:
                self.unhealthy_seen[r.id] = r.status or "?"
        up_since = None if self.blind else self.engine_up_since
        known = (self.known_fids or ({fid} if fid else None)) if self.stray_check else None
        self.watch, found = inv.orphans(
            self.watch, at, rows, store, fleet, up_since, ORPHAN_BOUND, known
        )
        if up_since is not None:
            for since in self.watch.since.values():
                age = at - max(since, up_since)
                self.orphan_max_age = max(self.orphan_max_age, age)
        draining = frozenset(i.vast_id for i in store.instances if i.draining)
        found += inv.over_target(
            at, rows, fleet, self.timeline, grace=ORPHAN_BOUND, fleet_id=fid, draining=draining
        )
        self.record(found)
        self.samples.append(inv.Sample(at, len(alive), self.target, excused=self.blind))
        self.counts["max_alive"] = max(self.counts["max_alive"], len(alive))

    def _confirm(self, snap: list[inv.Violation], final: bool) -> None:
        keys = {v.key for v in snap}
        self.pending = {k: self.pending.get(k, 0) + 1 for k in keys}
        self.record([v for v in snap if final or self.pending[v.key] >= CONFIRM])

    def confirm(self, name: str, snap: list[inv.Violation], final: bool = False) -> None:
        """A store-side check of a driver's own, counted once seen in two observations in a
        row (``CONFIRM``), always at the end; ``name`` keeps its streaks apart."""
        pending = self.pending_by.setdefault(name, {})
        keys = {v.key for v in snap}
        streak = {k: pending.get(k, 0) + 1 for k in keys}
        self.pending_by[name] = streak
        self.record([v for v in snap if final or streak[v.key] >= CONFIRM])

    def record(self, found: list[inv.Violation]) -> None:
        if self.parent is not None:
            self.parent.record(
                [inv.Violation(v.invariant, f"{self.tag}: {v.subject}", v.detail, v.at)
                 for v in found]
            )  # fmt: skip
            return
        known = {v.key for v in self.violations}
        for v in found:
            if v.key not in known:
                known.add(v.key)
                self.violations.append(v)
                self.say(f"VIOLATION {v.invariant} {v.subject}: {v.detail}")

    def wait(self, seconds: float, until: Callable[[], bool] | None = None) -> bool:
        """Observe every ``observe_every`` seconds for ``seconds``; True if ``until`` held."""
        deadline = time.monotonic() + seconds
        while True:
            if until is not None and until():
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self.observe()
            time.sleep(max(0.0, min(self.opts.observe_every, deadline - time.monotonic())))

    # -- the end -----------------------------------------------------------------------------------

    def final_checks(self) -> None:
        """With the engine up and settled: everything, once more, and what only the end shows."""
        self.observe(final=True)
        store = self.last_store or inv.StoreView()
        rows = self.last_rows or []
        self.record(inv.gone_unrecorded(self.ever_ours, rows, store))
        self.record(inv.destroys_unrecorded(store))
        self.record(inv.observed_enough(self.counts["observations"],
                                        self.counts["observations_failed"]))  # fmt: skip
        self.check_ledger()

    def target_reached_check(self, bound: float, start: float) -> None:
        self.record(inv.below_target(self.samples, bound, start))

    def viable_offers(self) -> int | None:
        """Offers the engine could rent now: on the market through its filter, not on a bad or
        busy machine, at an expected $/proof within the maximum (vastui's own ranking, as
        `vastui offers --json` prints it). None when the command failed (the cloud's faults):
        no look, so no excuse."""
        import json
        import subprocess

        assert self.sim is not None
        cmd = [str(venv_bin("vastui")), "offers", "--json", "--api-url", self.sim.url]
        cmd += ["--db", str(self.wd.db), "--config", str(self.wd.config)]
        try:
            done = subprocess.run(
                cmd, capture_output=True, text=True, env=self.wd.env({"VAST_API_KEY": SIM_KEY}),
                timeout=60, check=False,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            done = None
        if done is None or done.returncode != 0:
            self.counts["offer_looks_failed"] += 1
            return None
        busy = {r.machine_id for r in inv.ours(self.last_rows or [], self.opts.fleet.name)}
        count = 0
        for line in done.stdout.splitlines():
            try:
                offer = json.loads(line)
            except ValueError:
                continue
            cost = offer.get("expected_cost_per_proof")
            if offer.get("bad") or offer.get("machine_id") in busy or cost is None:
                continue
            if cost <= self.opts.fleet.max_cost_per_proof:
                count += 1
        return count

    def store_counts(self) -> dict[str, Any]:
        """What the store says happened: rents, destroys by kind, bans, adoptions."""
        store = self.last_store or inv.StoreView()
        kinds = Counter(i.kill_kind for i in store.instances if i.killed)
        events = Counter(e.kind for e in store.events)
        return {
            "instances_rented": sum(1 for i in store.instances if i.source == "vastui"),
            "instances_alive_at_end": sum(1 for i in store.instances if not i.killed),
            "destroyed_by_kind": dict(sorted(kinds.items())),
            "machines_banned": len(store.banned),
            "events": dict(sorted(events.items())),
            "intents": dict(Counter(f"{i.kind}:{i.status}" for i in store.intents)),
        }

    def engine_log_faults(self) -> dict[str, int]:
        """The cloud's faults as the engine met them (its log, every run): rate limits and
        gateway errors retried, creates whose answer was lost, lists that failed a step."""
        path = self.wd.log("engine.log")
        if not path.exists():
            return {}
        counts: Counter[str] = Counter()
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            for name, pattern in FAULT_LINES.items():
                if pattern.search(line):
                    counts[name] += 1
        return dict(sorted(counts.items()))

    def sim_counts(self) -> dict[str, Any] | None:
        return sim_counters(self.sim.url) if self.sim is not None else None

    def status(self) -> dict[str, Any] | None:
        return engine_status(self.wd.db)
