"""Log lines stamped on the fleet's one clock: ISO 8601 UTC, like the workers' lines, so the
console can merge the engine's log with theirs in time order. In the demo that clock is the
simulated one (faster than the wall clock); elsewhere it is the wall clock."""

from __future__ import annotations

import io
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

from vastui.config import open_private

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


class PrivateFileHandler(logging.FileHandler):
    """Appends to a log file that is 0600 whatever the umask: logs carry hosts, labels and
    server messages, for this user's eyes only. A looser file (an older vastui's) is tightened."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, mode="a", encoding="utf-8")

    def _open(self) -> io.TextIOWrapper:
        fd = open_private(Path(self.baseFilename), os.O_WRONLY | os.O_APPEND)
        return os.fdopen(fd, "a", encoding=self.encoding, errors=self.errors)
