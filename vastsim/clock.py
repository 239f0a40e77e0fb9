"""Simulated time sources for the Vast.ai simulator.

All simulator durations (image pulls, failures, billing) are expressed in *simulated*
seconds; a clock decides how simulated time relates to real time.
"""

from __future__ import annotations

import time
from typing import Protocol, runtime_checkable

DEFAULT_EPOCH = 1_790_000_000.0


@runtime_checkable
class SimClock(Protocol):
    """Anything with ``now() -> float`` (epoch seconds of simulated time)."""

    def now(self) -> float: ...


class ScaledClock:
    """Simulated time running ``speed`` times faster than real time.

    ``start`` is the simulated epoch at construction time (default: the real wall clock).
    """

    def __init__(self, speed: float = 1.0, start: float | None = None) -> None:
        if speed <= 0:
            raise ValueError("speed must be > 0")
        self.speed = float(speed)
        self.wall0 = time.time()  # the wall clock when this clock read `start`
        self.start = float(self.wall0 if start is None else start)
        self._t0 = time.monotonic()

    def now(self) -> float:
        return self.start + (time.monotonic() - self._t0) * self.speed


class ManualClock:
    """A clock that only moves when told to (for tests)."""

    def __init__(self, start: float = DEFAULT_EPOCH) -> None:
        self._now = float(start)

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> float:
        if seconds < 0:
            raise ValueError("cannot go back in time")
        self._now += float(seconds)
        return self._now

    def set(self, epoch: float) -> None:
        self._now = float(epoch)
