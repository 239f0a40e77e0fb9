"""`python -m reliability crash`: SIGKILL the engine at random points, restart it at once.

Each trial is one engine process: started at once after the previous one died (as systemd's
`Restart=on-failure` would), armed for one crash point in turn (VASTUI_CRASH_POINTS) or to be
killed from outside at a random moment. Destroys are provoked through the store's commands
table (the console's path) so that the destroy points are reached; rents follow by themselves
whenever the fleet is below its target. The invariants are checked continuously, after each
trial, and at the end with an unarmed engine settled.
"""

from __future__ import annotations

import json
import random
import signal
import sqlite3
import time
from dataclasses import dataclass, field
from typing import Any

from reliability import invariants as inv
from reliability.trial import ORPHAN_BOUND, Trial, refill_bound
from vastui.engine.crashpoints import NAMES

EXTERNAL = "external"
SHRINK = "shrink"
TRIAL_TIMEOUT = 15.0  # seconds an armed engine gets to reach its point before an outside kill
PROVOKE_EVERY = 2.0  # seconds between looks for something of ours to destroy (armed engine)
DESTROY_POINTS = ("destroy.before_send", "destroy.answered")
# A drain is a planned destroy of a proving worker (engine/drain.py drains): its trial first lets
# an unarmed engine run until the whole fleet proves, then arms one with the target one lower.
DRAIN_POINT = "drain.cordoned"
PROVE_BOUND = 240.0  # wall seconds the fleet gets to prove before a drain trial


@dataclass
class TrialResult:
    index: int
    plan: str  # the armed point, "external" or "shrink"
    died_by: str  # the crash point that fired, or "external"
    lease_s: float | None  # seconds until the new engine held the lease
    stimulus: str | None
    alive_after: int | None
    violations: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return self.__dict__.copy()


def plan_trials(count: int, rng: random.Random) -> list[str]:
    """Every named point in turn and an outside kill between them; one shrink of the target
    (then back) when there are enough trials."""
    cycle = [*NAMES, EXTERNAL]
    plan = [cycle[i % len(cycle)] for i in range(count)]
    if count >= 3:  # (a quick run's 6 trials too: the shrink is never left out)
        plan[count // 2] = SHRINK
    rng.shuffle(plan[1:])  # the first trial starts from an empty fleet: keep it a rent point
    return plan


def submit_command(db: str, kind: str, args: dict[str, Any]) -> None:
    """A console command through the store (the `commands` table, engine/engine.py claims it
    within a second): how an operator destroys or ignores while a headless engine runs."""
    conn = sqlite3.connect(db, timeout=10.0)
    try:
        conn.execute(
            "INSERT INTO commands (kind, args, source, created_at) VALUES (?, ?, 'reliability', ?)",
            (kind, json.dumps(args), time.time()),
        )
        conn.commit()
    finally:
        conn.close()


def provoke(trial: Trial, plan: str, rng: random.Random) -> str | None:
    """Make a destroy happen (and with it, below target, a rent): a manual destroy or an
    ignore of one of our live instances' machine. A drain trial's stimulus is its lowered
    target (prepare_drain): nothing more is destroyed."""
    if plan == DRAIN_POINT:
        return f"target {trial.target}, a proving surplus"
    store = trial.last_store or inv.StoreView()
    live = [i for i in store.instances if not i.killed and i.label]
    wants_destroy = plan in DESTROY_POINTS or plan == EXTERNAL
    at_target = len(live) >= trial.target
    if not live or not (wants_destroy or at_target):
        return None
    victim = rng.choice(live)
    if rng.random() < 0.3 and victim.machine_id:
        args = {"machine_id": victim.machine_id, "reason": "reliability trial: ignore"}
        submit_command(str(trial.wd.db), "ignore", args)
        return f"ignore machine {victim.machine_id}"
    args = {"instance_id": victim.vast_id, "reason": "reliability trial: destroy"}
    submit_command(str(trial.wd.db), "destroy", args)
    return f"destroy {victim.vast_id}"


def _all_proving(trial: Trial) -> bool:
    store = trial.last_store or inv.StoreView()
    live = [i for i in store.instances if not i.killed and i.label]
    return len(live) >= trial.opts.fleet.target and all(i.state == "proving" for i in live)


def prepare_drain(trial: Trial, index: int) -> None:
    """Before a drain trial: an unarmed engine at the full target until every worker proves
    (then killed from outside, like any trial's engine), so that the armed engine, started with
    the target one lower, has a proving surplus to drain (provision.surplus takes the workers
    not proving first). A fleet that never proves within the bound is a trial that could not
    be set up, said so."""
    trial.set_target(trial.opts.fleet.target)
    engine = trial.start_engine()
    trial.wait_lease(timeout=20.0)
    ready = trial.wait(PROVE_BOUND, until=lambda: _all_proving(trial))
    if engine.alive():
        trial.kill_engine()
    engine.proc.wait()
    trial.engine_died()
    trial.counts["died_by:external"] += 1
    if not ready:
        trial.record(
            [inv.Violation("trial_setup", f"trial {index}",
                           f"the fleet was not all proving within {PROVE_BOUND:g} s")]
        )  # fmt: skip
    trial.set_target(max(0, trial.opts.fleet.target - 1))


def run_one(trial: Trial, index: int, plan: str, rng: random.Random) -> TrialResult:
    before = len(trial.violations)
    if plan == SHRINK:
        trial.set_target(max(0, trial.opts.fleet.target - 1))
    elif plan == DRAIN_POINT:
        prepare_drain(trial, index)
    elif trial.target != trial.opts.fleet.target:
        trial.set_target(trial.opts.fleet.target)
    armed = "" if plan in (EXTERNAL, SHRINK) else f"{plan}:1"
    started = time.monotonic()
    engine = trial.start_engine(armed, crash_seed=rng.randrange(1 << 30))
    lease_s: float | None = None
    if trial.wait_lease(timeout=20.0):
        lease_s = time.monotonic() - started
    elif engine.alive() or engine.crash_hit() is None:
        tail = engine.output().strip().splitlines()[-1:] or ["no output"]
        trial.record(
            [inv.Violation("restart_refused", f"trial {index}", f"no lease: {tail[0][:200]}")]
        )
    trial.observe()
    stimulus = provoke(trial, plan, rng) if engine.alive() else None
    if plan == SHRINK:
        # The surplus must go within the bound; then an outside kill like any other.
        trial.wait(ORPHAN_BOUND + 5, until=lambda: _alive(trial) <= trial.target)
        trial.kill_engine()
    elif plan == EXTERNAL:
        trial.wait(rng.uniform(0.5, 8.0), until=lambda: not engine.alive())
        if engine.alive():
            trial.kill_engine()
    else:
        deadline = time.monotonic() + TRIAL_TIMEOUT
        while engine.alive() and time.monotonic() < deadline:
            if stimulus is None:  # nothing of ours was live yet: try again
                stimulus = provoke(trial, plan, rng)
            trial.wait(PROVOKE_EVERY, until=lambda: not engine.alive())
        if engine.alive():
            # the point it was armed for was not reached: that trial tested nothing it names
            trial.record(
                [inv.Violation("crash_point_unreached", f"trial {index}",
                               f"{plan} not reached in {TRIAL_TIMEOUT:g} s")]
            )  # fmt: skip
            trial.kill_engine()
    code = engine.proc.wait()
    hit = engine.crash_hit()
    died_by = hit or EXTERNAL
    if code != -signal.SIGKILL and not (code is not None and code < 0):
        trial.record(
            [inv.Violation("engine_exit", f"trial {index}", f"exited with status {code} by itself")]
        )
    trial.engine_died()
    trial.counts[f"died_by:{died_by}"] += 1
    trial.observe()
    found = [f"{v.invariant} {v.subject}" for v in trial.violations[before:]]
    return TrialResult(index, plan, died_by, lease_s, stimulus, _alive(trial), found)


def _alive(trial: Trial) -> int:
    return len(inv.ours(trial.last_rows or [], trial.opts.fleet.name))


def settle(trial: Trial) -> dict[str, Any]:
    """An unarmed engine, up until the fleet is back at its target (or the refill bound has
    passed); then the end checks, and a clean stop."""
    trial.set_target(trial.opts.fleet.target)
    engine = trial.start_engine()
    if not trial.wait_lease():
        trial.record(
            [inv.Violation("restart_refused", "settle", "the settling engine got no lease")]
        )
    started = time.monotonic()
    trial.wait(refill_bound(trial.opts.speed), until=lambda: _alive(trial) >= trial.target)
    took = time.monotonic() - started
    trial.wait(5.0)  # a little more: the store catches up with what was just rented
    trial.final_checks()
    alive = _alive(trial)
    if alive < trial.target:
        # A worker may have just been killed (a deadline on the cloud's clock) and replaced
        # after the last observation, or that observation failed under the faults: judge the
        # target on fresh looks, within one more refill bound.
        trial.wait(refill_bound(trial.opts.speed), until=lambda: _alive(trial) >= trial.target)
        alive = _alive(trial)
    viable = None
    if alive < trial.target:
        viable = trial.viable_offers()
        if viable != 0:  # some, or the look failed: no excuse
            status = trial.status() or {}
            why = f"; the engine says: {status.get('reason_kind')}: {status.get('reason')}"
            trial.record(
                [
                    inv.Violation(
                        "below_target",
                        "settle",
                        f"{alive} of target {trial.target} after settling, {viable} viable "
                        f"offers{why}",
                    )
                ]
            )
    return {
        "alive": alive,
        "target_reached_s": round(took, 1),
        "viable_offers_when_below": viable,
        "engine_pid": engine.pid,
    }


def clean_stop(trial: Trial) -> float | None:
    """SIGTERM: the engine must stop within seconds with status 0."""
    assert trial.engine is not None
    started = time.monotonic()
    code = trial.kill_engine(signal.SIGTERM)
    took = time.monotonic() - started
    if code != 0 or took > 20:
        trial.record([inv.Violation("unclean_stop", "sigterm", f"status {code} after {took:.1f}s")])
        return None
    return took


def run(trial: Trial, trials: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    plan = plan_trials(trials, rng)
    results = []
    for index, step in enumerate(plan):
        result = run_one(trial, index, step, rng)
        results.append(result)
        trial.say(
            f"trial {index:2d} {step:20s} died by {result.died_by:20s} lease "
            f"{_secs(result.lease_s)} {result.stimulus or '-':28s} alive {result.alive_after} "
            f"{'OK' if not result.violations else 'VIOLATIONS ' + ', '.join(result.violations)}"
        )
    settled = settle(trial)
    stopped = clean_stop(trial)
    return {
        "trials": [r.to_json() for r in results],
        "settle": settled,
        "sigterm_stop_s": stopped,
        "lease_takeover_s_max": max((r.lease_s or 0.0) for r in results) if results else None,
        "points_fired": sorted({r.died_by for r in results} - {EXTERNAL}),
    }


def _secs(value: float | None) -> str:
    return "  none" if value is None else f"{value:5.1f}s"
