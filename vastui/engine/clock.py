"""The engine's clock: epoch seconds that never step.

Every deadline, window and rate the engine judges is a difference of two readings of its clock,
and records carry its readings too. The wall clock steps (a VM resumed, NTP correcting a drifted
clock, an operator's ``date -s``): read directly, one step forward expires every deadline at once
and one back stretches them. :class:`SteadyClock` reads the wall clock once, at start, and moves
on with the monotonic clock from there, so that it reads as epoch time (for records and display)
while its differences are the monotonic clock's. A step of the wall clock is noticed, logged once
(per step), and changes no decision.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from vastui.logfmt import REPEAT_KEY

log = logging.getLogger("vastui.engine.clock")

STEP_TOLERANCE_S = 60.0  # a wall clock this far from the steady one has stepped (NTP slews less)


class SteadyClock:
    """Callable: the wall clock at construction, then the monotonic clock's elapsed time."""

    def __init__(
        self,
        wall: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._wall = wall
        self._monotonic = monotonic
        self._wall0 = wall()
        self._mono0 = monotonic()
        self._noted = 0.0  # the wall clock's offset last logged

    def __call__(self) -> float:
        now = self._wall0 + (self._monotonic() - self._mono0)
        offset = self._wall() - now
        if abs(offset - self._noted) > STEP_TOLERANCE_S:
            step = offset - self._noted
            log.warning(
                "the wall clock stepped %+.0f s (now %+.0f s from the engine's steady clock): "
                "deadlines and windows keep the monotonic clock; records keep the steady time",
                step, offset,
                # Each step is its own news (a step back after one forward undoes it): the log's
                # repeat limiter holds back only the same step, by direction and minutes.
                extra={REPEAT_KEY: f"{round(step / 60):+d} min"},
            )  # fmt: skip
            self._noted = offset
        return now


def steady_scaled(
    start: float, wall0: float, speed: float, monotonic: Callable[[], float] = time.monotonic
) -> Callable[[], float]:
    """A served simulator's clock (``start`` at wall time ``wall0``, ``speed`` times faster),
    read as the wall clock is once and then moved on by the monotonic clock."""
    here = SteadyClock(monotonic=monotonic)
    return lambda: start + (here() - wall0) * speed
