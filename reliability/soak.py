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
from collections.abc import Callable
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
    watch(trial, wall, start)
    engine = trial.engine or engine
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


class Watch:
    """Observing a running engine: restart it if it exits on its own (a violation), look at the
    market now and then while the fleet is below its target."""

    def __init__(self, trial: Trial, start: float) -> None:
        self.trial = trial
        self.start = start  # wall time the trial's clock counts from
        self.last_viable = 0.0

    def __call__(
        self,
        seconds: float,
        until: Callable[[], bool] | None = None,
        each: Callable[[], None] | None = None,
    ) -> bool:
        """Observe for ``seconds`` (or until ``until`` holds: True then); ``each`` runs after
        every slice (a sampler)."""
        trial = self.trial
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if until is not None and until():
                return True
            trial.wait(min(OBSERVE_SLICE, max(0.0, end - time.monotonic())))
            if trial.engine is not None and not trial.engine.alive():
                restart_after_exit(trial, self.start)
            if below(trial) and time.monotonic() - self.last_viable > VIABLE_EVERY:
                self.last_viable = time.monotonic()
                excuse_if_no_offers(trial)
            if each is not None:
                each()
        return until is not None and until()


def watch(trial: Trial, seconds: float, start: float) -> None:
    Watch(trial, start)(seconds)


def below(trial: Trial) -> bool:
    return bool(trial.samples) and trial.samples[-1].alive < trial.target


def excuse_if_no_offers(trial: Trial) -> None:
    """Below target with nothing viable on the market: the market, not the engine, is short."""
    if trial.viable_offers() == 0:
        trial.counts["samples_excused_no_offers"] += 1
        last = trial.samples[-1]
        trial.samples[-1] = inv.Sample(last.at, last.alive, last.target, excused=True)


def restart_after_exit(trial: Trial, start: float) -> Any:
    """The engine exited on its own: a violation; start it again (as systemd would)."""
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
