"""Log lines stamped on the fleet's one clock: ISO 8601 UTC, like the workers' lines, so the
console can merge the engine's log with theirs in time order. In the demo that clock is the
simulated one (faster than the wall clock); elsewhere it is the wall clock."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class ClockFormatter(logging.Formatter):
    def __init__(self, clock: Callable[[], float] | None = None) -> None:
        super().__init__(FORMAT)
        self.clock = clock  # None: the record's own (wall) time

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        # A record is formatted as it is emitted, so the clock's "now" is the record's time.
        ts = self.clock() if self.clock is not None else record.created
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts))
        return f"{stamp}.{int(ts % 1 * 1000):03d}Z"
