"""`python -m reliability soak`: a simulated day at high speed against the served cloud.

One engine runs the fleet for ``sim_hours`` of the cloud's time, under a fault profile; the
observer checks every invariant all along; the target must be reached in every window unless
the market offers nothing viable; at the end the engine is stopped with SIGTERM. If the engine
exits on its own, that is a violation, and it is restarted (as systemd would) to go on.

The engine steps every 30 s of wall time while the cloud runs hundreds of times faster, so a
simulated day would be a dozen steps: the engine is woken every ``nudge_every`` seconds by a
console command that changes nothing (as a console's commands wake it), compressing its idle
time. ``--nudge 0`` leaves it to its own poll.
"""

from __future__ import annotations

import time
from typing import Any

from reliability import invariants as inv
from reliability.crash import nudge
from reliability.trial import ENGINE_POLL, Trial

VIABLE_EVERY = 60.0  # wall seconds between looks at the market when below target


def run(trial: Trial, sim_hours: float, nudge_every: float = 5.0) -> dict[str, Any]:
    speed = trial.opts.speed
    wall = sim_hours * 3600.0 / speed
    window = target_window(wall, nudge_every)
    trial.say(
        f"soak: {sim_hours:g} simulated hours at {speed:g}x = {wall:.0f}s; windows {window:.0f}s"
    )
    engine = trial.start_engine()
    if not trial.wait_lease():
        trial.record([inv.Violation("restart_refused", "start", "the engine took no lease")])
    start = time.time()
    end = time.monotonic() + wall
    last_viable = 0.0
    while time.monotonic() < end:
        if nudge_every > 0 and trial.engine is not None and trial.engine.alive():
            nudge(trial)
        trial.wait(min(nudge_every or 10.0, end - time.monotonic()))
        if trial.engine is not None and not trial.engine.alive():
            code = trial.engine.proc.wait()
            tail = trial.engine.output().strip().splitlines()[-1:] or ["no output"]
            trial.record(
                [
                    inv.Violation(
                        "engine_exit",
                        f"t={time.time() - start:.0f}",
                        f"status {code}: {tail[0][:200]}",
                        time.time(),
                    )
                ]
            )
            trial.engine_died()
            engine = trial.start_engine()  # as systemd would
            trial.wait_lease()
        below = trial.samples and trial.samples[-1].alive < trial.target
        if below and time.monotonic() - last_viable > VIABLE_EVERY:
            last_viable = time.monotonic()
            if trial.viable_offers() == 0:  # the market, not the engine, is short
                trial.counts["windows_excused_no_offers"] += 1
                trial.samples[-1] = inv.Sample(
                    trial.samples[-1].at, trial.samples[-1].alive, trial.target, excused=True
                )
    trial.final_checks()
    trial.target_reached_check(window, start + ENGINE_POLL)  # the first step rents at once
    at_target = sum(1 for s in trial.samples if s.alive >= s.target)
    took = _stop(trial)
    return {
        "sim_hours": sim_hours,
        "wall_s": round(wall, 1),
        "window_s": round(window, 1),
        "samples": len(trial.samples),
        "share_of_samples_at_target": round(at_target / max(1, len(trial.samples)), 3),
        "engine_pid": engine.pid,
        "sigterm_stop_s": took,
        "nudge_every_s": nudge_every,
    }


def target_window(wall: float, nudge_every: float) -> float:
    """How long the fleet may stay below its target (wall seconds): a dozen engine steps,
    whether the engine is woken every ``nudge_every`` s or left to its own poll."""
    step = nudge_every if nudge_every > 0 else ENGINE_POLL
    return max(60.0, min(12 * step, wall / 2))


def _stop(trial: Trial) -> float | None:
    import signal

    assert trial.engine is not None
    started = time.monotonic()
    code = trial.kill_engine(signal.SIGTERM)
    took = time.monotonic() - started
    if code != 0 or took > 20:
        trial.record([inv.Violation("unclean_stop", "sigterm", f"status {code} after {took:.1f}s")])
        return None
    return round(took, 2)
