"""`python -m reliability soak`: a simulated day at high speed against the served cloud.

One engine runs the fleet for ``sim_hours`` of the cloud's time, under a fault profile, on the
cloud's clock (VASTUI_SIM_CLOCK: its deadlines run on the instances' time, it steps every
0.5 s); the observer checks every invariant all along; the fleet may be below its target no
longer than a refill takes, unless the market offers nothing viable; at the end the engine is
stopped with SIGTERM. If the engine exits on its own, that is a violation, and it is restarted
(as systemd would) to go on.
"""

from __future__ import annotations

import time
from typing import Any

from reliability import invariants as inv
from reliability.crash import clean_stop
from reliability.trial import Trial, refill_bound

VIABLE_EVERY = 20.0  # wall seconds between looks at the market while below target
OBSERVE_SLICE = 2.0  # wall seconds of observing between checks on the engine and the market


def run(trial: Trial, sim_hours: float) -> dict[str, Any]:
    speed = trial.opts.speed
    wall = sim_hours * 3600.0 / speed
    bound = refill_bound(speed)
    trial.say(
        f"soak: {sim_hours:g} simulated hours at {speed:g}x = {wall:.0f}s; "
        f"below target at most {bound:.0f}s at a time"
    )
    engine = trial.start_engine()
    if not trial.wait_lease():
        trial.record([inv.Violation("restart_refused", "start", "the engine took no lease")])
    start = time.time()
    end = time.monotonic() + wall
    last_viable = 0.0
    while time.monotonic() < end:
        trial.wait(min(OBSERVE_SLICE, end - time.monotonic()))
        if trial.engine is not None and not trial.engine.alive():
            engine = _restart(trial, start)
        if _below(trial) and time.monotonic() - last_viable > VIABLE_EVERY:
            last_viable = time.monotonic()
            _excuse_if_no_offers(trial)
    trial.final_checks()
    trial.target_reached_check(bound, start)
    stretches = inv.below_stretches(trial.samples, start)
    at_target = sum(1 for s in trial.samples if s.alive >= s.target)
    took = _rounded(clean_stop(trial))
    return {
        "sim_hours": sim_hours,
        "wall_s": round(wall, 1),
        "below_target_bound_s": round(bound, 1),
        "below_target_stretches": len(stretches),
        "below_target_longest_s": round(max((s.length for s in stretches), default=0.0), 1),
        "samples": len(trial.samples),
        "share_of_samples_at_target": round(at_target / max(1, len(trial.samples)), 3),
        "engine_pid": engine.pid,
        "sigterm_stop_s": took,
    }


def _below(trial: Trial) -> bool:
    return bool(trial.samples) and trial.samples[-1].alive < trial.target


def _excuse_if_no_offers(trial: Trial) -> None:
    """Below target with nothing viable on the market: the market, not the engine, is short."""
    if trial.viable_offers() == 0:
        trial.counts["samples_excused_no_offers"] += 1
        last = trial.samples[-1]
        trial.samples[-1] = inv.Sample(last.at, last.alive, last.target, excused=True)


def _restart(trial: Trial, start: float) -> Any:
    assert trial.engine is not None
    code = trial.engine.proc.wait()
    tail = trial.engine.output().strip().splitlines()[-1:] or ["no output"]
    trial.record(
        [
            inv.Violation(
                "engine_exit", f"t={time.time() - start:.0f}", f"status {code}: {tail[0][:200]}",
                time.time(),
            )
        ]
    )  # fmt: skip
    trial.engine_died()
    engine = trial.start_engine()  # as systemd would
    trial.wait_lease()
    return engine


def _rounded(took: float | None) -> float | None:
    return None if took is None else round(took, 2)
