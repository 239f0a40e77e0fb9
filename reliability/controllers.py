"""`python -m reliability second-controller`: two engines on one Vast account.

Two real engines run against the same served cloud with the same API key and the same config,
byte for byte (its ``fleet.name`` included), each with a database of its own: the first with
``--target`` (2), the second with ``--second-target`` (1), the second started once the first's
fleet is at its target (or, ``--together``, both at once). Each database has its own fleet
identity (``meta.fleet_id``, in every label it rents with: vastui/engine/labels.py); an
instance is a database's only if it intended it. Both databases are made (``vastui migrate``)
before either engine starts, so the observer knows both identities from its first look.

Each engine reaches the API through a proxy of its own in the harness (reliability/proxy.py,
passing everything): the cloud cannot tell two clients with one key apart, the proxies can, and
they read off every DELETE each engine sends. The observer lists the cloud once per round (the
vastai CLI) and judges each database on it; besides every invariant of the soak (per database:
orphans, over/below target, destroys recorded, bans; double rents from the cloud's ledger):

* ``foreign_touched``: neither store records, adopts or names (in an event or an intent) an
  instance listed under the other's fleet id; nothing in a store under a label of another id,
  nor without a rent intent of its own with its label (ownership by intent);
* ``cross_destroy``: neither engine sends a DELETE for an instance that is not its own; every
  instance gone from the cloud was destroyed by its own engine; the cloud destroyed no more
  than the two engines asked;
* ``foreign_unseen``: each store's ``foreign_instances`` holds the other's live instances once
  listed longer than the orphan bound with its engine up, and never one of its own; exactly one
  ``foreign`` event per foreign fleet (at the end, one for each fleet it had time to see);
* ``rent_war``: the cloud's creates under each database's labels are at most its target plus
  the instances it destroyed itself.

The report also says whether the two fleets' workers shared a curio identity: runner ids are
counted per database and the identity is ``vastui-<fleet>-r<id>`` on ``127.0.0.1:<12400+id>``
(vastui/engine/identity.py), and here both engines' workers tunnel to the one cluster stand-in.
"""

from __future__ import annotations

import contextlib
import sqlite3
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from reliability import invariants as inv
from reliability.crash import clean_stop
from reliability.observe import fleet_id
from reliability.procs import engine_config, venv_bin, write_config
from reliability.soak import VIABLE_EVERY, excuse_if_no_offers, restart_after_exit
from reliability.trial import ORPHAN_BOUND, Trial, refill_bound
from vastui.engine.labels import fleet_id_of, fleet_of


@dataclass
class PairPlan:
    second_target: int
    together: bool  # both engines started at once (else the second once the first is at target)
    sim_hours: float  # simulated hours watched once both run
    ready_hours: float  # simulated hours allowed for the first fleet to reach its target


class Pair:
    """The two trials (the first is the report's, the second its peer) and what only the pair
    can judge: whose each instance is, who destroyed what."""

    def __init__(self, first: Trial, second: Trial) -> None:
        self.first, self.second = first, second
        self.names = {id(first): "first", id(second): "second"}
        self.fids: dict[str, str | None] = {"first": None, "second": None}
        self.first_listed: dict[int, float] = {}  # wall time the observer first listed each id
        self.whose: dict[int, str] = {}  # instance id → "first" | "second" (by its fleet id)
        self.saw_other: dict[str, float] = {}  # name → the other's instance listed with it up
        self.rounds = 0
        self.last_viable: dict[str, float] = {}
        self.stats: dict[str, Any] = {}  # the cloud's counters, read once per round

    def name(self, trial: Trial) -> str:
        return self.names[id(trial)]

    def other(self, trial: Trial) -> Trial:
        return self.second if trial is self.first else self.first

    def running(self) -> list[Trial]:
        return [t for t in (self.first, self.second) if t.engine is not None]

    def owner(self, name: str) -> str:
        return inv.owner_label(self.first.opts.fleet.name, self.fids[name])

    # -- one round of observation -----------------------------------------------------------

    def observe(self, *, final: bool = False) -> None:
        first = self.first
        assert first.cli is not None
        at = time.time()
        rows = first.cli.instances()
        self.rounds += 1
        self.stats = first.sim_counts() or {}
        if rows is not None:
            self._fold(at, rows)
        for trial in self.running():
            trial.observe(rows=rows, final=final)
        for trial in self.running():
            self._judge(trial, at, rows, final)

    def _fold(self, at: float, rows: list[inv.VastRow]) -> None:
        fleet = self.first.opts.fleet.name
        by_fid = {fid: name for name, fid in self.fids.items() if fid}
        for r in rows:
            self.first_listed.setdefault(r.id, at)
            if fleet_of(r.label) == fleet:
                name = by_fid.get(fleet_id_of(r.label) or "")
                if name is not None:
                    self.whose[r.id] = name
        for trial in (self.first, self.second):
            mine = self.name(trial)
            trial.others = {iid for iid, who in self.whose.items() if who != mine}
            up = trial.engine_up_since
            if up is not None and any(
                self.whose.get(r.id) not in (None, mine)
                and at - max(self.first_listed[r.id], up) > ORPHAN_BOUND
                for r in rows
            ):
                self.saw_other.setdefault(mine, at)

    def _judge(self, trial: Trial, at: float, rows: list[inv.VastRow] | None, final: bool) -> None:
        store = trial.last_store or inv.StoreView()
        mine = self.name(trial)
        other = self.other(trial)
        if rows is not None:
            theirs = [r for r in rows if self.whose.get(r.id) == self.name(other)]
            trial.confirm(
                "foreign_seen",
                inv.foreign_seen(
                    at, theirs, store, self.first_listed, trial.engine_up_since, ORPHAN_BOUND
                ),
                final,
            )
        expected = [self.owner(self.name(other))] if mine in self.saw_other else []
        trial.confirm(
            "foreign_warnings",
            inv.foreign_warnings(store, self.owner(mine), expected, final=final),
            final,
        )
        trial.confirm("unintended", inv.unintended(store), final)
        ledger = self.stats.get("labels_created")
        if isinstance(ledger, dict):
            top = max(t for _, t in trial.timeline)
            trial.confirm(
                "rent_war", inv.rent_war(ledger, store, trial.opts.fleet.name, top), final
            )
        trial.record(self._cross(trial))

    def deletes(self, trial: Trial) -> list[int]:
        if trial.proxy is None:
            return []
        return inv.delete_ids((m, p) for _, m, p in trial.proxy.requests())

    def _cross(self, trial: Trial) -> list[inv.Violation]:
        mine = self.name(trial)
        store = trial.last_store or inv.StoreView()
        own = {iid for iid, who in self.whose.items() if who == mine}
        own |= {i.vast_id for i in store.instances}
        theirs = {iid for iid, who in self.whose.items() if who != mine} | set(trial.foreign)
        return inv.cross_destroys(f"the {mine} controller", self.deletes(trial), own, theirs)

    # -- watching -------------------------------------------------------------------------------

    def watch(self, seconds: float, until: Callable[[], bool] | None = None) -> bool:
        every = self.first.opts.observe_every
        end = time.monotonic() + seconds
        while True:
            if until is not None and until():
                return True
            if time.monotonic() >= end:
                return False
            self.observe()
            for trial in self.running():
                if trial.engine is not None and not trial.engine.alive():
                    restart_after_exit(trial, trial.started)
                self._market(trial)
            time.sleep(max(0.0, min(every, end - time.monotonic())))

    def _market(self, trial: Trial) -> None:
        """Below target with nothing viable: the market is short (soak.excuse_if_no_offers)."""
        name = self.name(trial)
        if not trial.samples or trial.samples[-1].alive >= trial.target:
            return
        if time.monotonic() - self.last_viable.get(name, 0.0) > VIABLE_EVERY:
            self.last_viable[name] = time.monotonic()
            excuse_if_no_offers(trial)


def at_target(trial: Trial) -> bool:
    """Listed at its target, and as many live workers in its store."""
    store = trial.last_store or inv.StoreView()
    live = sum(1 for i in store.instances if not i.killed)
    listed = trial.samples[-1].alive if trial.samples else 0
    return listed >= trial.target and live >= trial.target


def migrate(trial: Trial) -> str | None:
    """Make the database (``vastui migrate``, as an operator would before a first start) and
    read its fleet identity."""
    cmd = [str(venv_bin("vastui")), "migrate", "--db", str(trial.wd.db)]
    cmd += ["--config", str(trial.wd.config)]
    subprocess.run(cmd, capture_output=True, text=True, env=trial.wd.env(), timeout=60, check=False)
    return fleet_id(trial.wd.db)


def curio_identities(db: Path) -> dict[int, dict[str, Any]]:
    """runner id → (instance, state, kill kind) for every instance with one (read-only)."""
    out: dict[int, dict[str, Any]] = {}
    with contextlib.suppress(sqlite3.Error):
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5.0)
        try:
            for iid, runner, state, kind in conn.execute(
                "SELECT vast_id, runner_id, state, kill_kind FROM instances "
                "WHERE runner_id IS NOT NULL"
            ):
                out[int(runner)] = {"instance": iid, "state": state, "kill_kind": kind}
        finally:
            conn.close()
    return out


def run(trial: Trial, plan: PairPlan) -> dict[str, Any]:
    speed = trial.opts.speed
    assert trial.sim is not None
    first = trial
    # One config for both, byte for byte: the cloud's own address (each engine is given its
    # proxy's with --api-url), the same fleet name, the first's target (the second's comes on
    # its command line, --target-workers, as an operator would run a smaller one).
    config = engine_config(trial.sim, trial.opts.fleet, api_url=trial.sim.url)
    write_config(first.wd.config, config)
    second_opts = replace(
        trial.opts, fleet=replace(trial.opts.fleet, target=plan.second_target), workdir=None,
    )  # fmt: skip
    second = trial.peer("second", second_opts)
    write_config(second.wd.config, config)
    pair = Pair(first, second)
    pair.fids = {"first": migrate(first), "second": migrate(second)}
    first.known_fids = {f for f in pair.fids.values() if f}
    when = "together" if plan.together else "the second once the first is at target"
    trial.say(
        f"second-controller: one account, one config (fleet {trial.opts.fleet.name!r}); "
        f"databases {pair.owner('first')} (target {first.target}) and {pair.owner('second')} "
        f"(target {second.target}); {when}"
    )
    if None in pair.fids.values() or pair.fids["first"] == pair.fids["second"]:
        trial.record(
            [inv.Violation("trial_setup", "fleet ids", f"two databases, fleet ids {pair.fids}")]
        )
    bound = refill_bound(speed)
    watch_wall = plan.sim_hours * 3600.0 / speed
    ready_wall = plan.ready_hours * 3600.0 / speed

    def start(t: Trial) -> float:
        t.start_engine()
        if not t.wait_lease():
            t.record([inv.Violation("restart_refused", "start", "the engine took no lease")])
        return time.time()

    starts = {"first": start(first)}
    if plan.together:
        starts["second"] = start(second)
    else:
        ready = pair.watch(ready_wall, until=lambda: at_target(first))
        took = time.time() - starts["first"]
        trial.say(f"first fleet {'at target' if ready else 'NOT at target'} after {took:.0f}s")
        if not ready:
            trial.record(
                [inv.Violation("trial_setup", "first fleet",
                               f"not at its target {first.target} after {plan.ready_hours:g} "
                               "simulated hours: the second starts anyway")]
            )  # fmt: skip
        starts["second"] = start(second)
    trial.say(f"both engines up; watching {watch_wall:.0f}s ({plan.sim_hours:g} simulated hours)")
    pair.watch(watch_wall)

    # The end: every check once more, then what only the end shows.
    pair.observe(final=True)
    for t in (first, second):
        t.final_checks()
    rows = first.last_rows or []
    deletes = {pair.name(t): pair.deletes(t) for t in (first, second)}
    first.record(inv.gone_without_own_destroy(pair.whose, rows, deletes))
    stats = first.sim_counts() or {}
    destroyed = stats.get("instances_destroyed")
    first.record(
        inv.destroy_ledger(
            destroyed if isinstance(destroyed, int) else None, sum(map(len, deletes.values()))
        )
    )
    for t, began in ((first, starts["first"]), (second, starts["second"])):
        t.target_reached_check(bound, began)
    stops = {pair.name(t): clean_stop(t) for t in (first, second)}

    def summary(t: Trial) -> dict[str, Any]:
        name = pair.name(t)
        store = t.last_store or inv.StoreView()
        stretches = inv.below_stretches(t.samples, starts[name])
        ledger = stats.get("labels_created") or {}
        fid = pair.fids[name]
        return {
            "fleet_id": fid,
            "owner": pair.owner(name),
            "target": t.target,
            "started_after_s": round(starts[name] - first.started, 1),
            "created_on_cloud": sum(n for label, n in ledger.items() if fleet_id_of(label) == fid),
            "store": t.store_counts(),
            "foreign_instances_at_end": [
                {"instance": f.vast_id, "owner": f.owner} for f in store.foreign_rows
            ],
            "foreign_events": [e.reason[:200] for e in store.events if e.kind == "foreign"],
            "deletes_sent": len(deletes[name]),
            "deletes_of_the_other": sorted(
                set(deletes[name]) & {i for i, w in pair.whose.items() if w != name}
            ),
            "below_target_longest_s": round(max((s.length for s in stretches), default=0.0), 1),
            "share_of_samples_at_target": round(
                sum(1 for s in t.samples if s.alive >= s.target) / max(1, len(t.samples)), 3
            ),
            "orphan_max_age_s": round(t.orphan_max_age, 1),
            "engine_status_at_end": {
                k: (t.status() or {}).get(k) for k in ("target", "workers", "reason_kind")
            },
            "sigterm_stop_s": None if stops[name] is None else round(stops[name] or 0.0, 2),
            "proxy": t.proxy.stats() if t.proxy is not None else None,
        }

    ids = {pair.name(t): curio_identities(t.wd.db) for t in (first, second)}
    shared = sorted(set(ids["first"]) & set(ids["second"]))
    return {
        "together": plan.together,
        "sim_hours_watched": plan.sim_hours,
        "watch_wall_s": round(watch_wall, 1),
        "rounds": pair.rounds,
        "first": summary(first),
        "second": summary(second),
        "instances_by_owner": {
            name: sorted(i for i, w in pair.whose.items() if w == name)
            for name in ("first", "second")
        },
        "cloud_destroyed": destroyed,
        # Information, not judged: both fleets count runner ids from 1, and a worker's curio
        # identity is vastui-<fleet>-r<id> on 127.0.0.1:<12400+id>: one identity in one cluster.
        "curio_identities_shared": [
            {
                "runner_id": r,
                "identity": f"vastui-{trial.opts.fleet.name}-r{r}",
                "first": ids["first"][r],
                "second": ids["second"][r],
            }
            for r in shared
        ],
        "refill_bound_s": round(bound, 1),
        "foreign_bound_s": ORPHAN_BOUND,
    }
