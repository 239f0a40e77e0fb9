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


# The attribute (`extra={REPEAT_KEY: ...}`) by which a record tells RepeatLimiter which of the
# lines sharing its template it is.
REPEAT_KEY = "vastui_repeat_key"


class RepeatLimiter(logging.Filter):
    """At most one warning (or worse) per minute of each kind (its logger and message template,
    not its arguments), the rest counted and summed up in the next one let through: a fault that
    repeats every step for every worker (a controller cut off from its workers, a dead
    database) is a line a minute in the log, not thousands. Seconds on the monotonic clock.
    Lines below WARNING pass: they are the fleet's own news, one per change.

    A record whose template is shared by lines that say different things names what sets it
    apart (``extra={REPEAT_KEY: ...}``): the wall clock stepping forward and then back within
    the minute is two facts under one template, and both are logged; the same step again is
    still held back."""

    def __init__(self, every_s: float = 60.0, clock: Callable[[], float] = time.monotonic):
        super().__init__()
        self.every_s = every_s
        self.clock = clock
        self._last: dict[tuple[str, str, str], float] = {}
        self._held: dict[tuple[str, str, str], int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        decided = getattr(record, "vastui_repeat", None)
        if decided is not None:  # the same record at another handler: the same answer
            return bool(decided)
        record.vastui_repeat = keep = self._keep(record)
        return keep

    def _keep(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        key = (record.name, str(record.msg), str(getattr(record, REPEAT_KEY, "")))
        now = self.clock()
        last = self._last.get(key)
        if last is not None and now - last < self.every_s:
            self._held[key] = self._held.get(key, 0) + 1
            return False
        self._last[key] = now
        held = self._held.pop(key, 0)
        if held and last is not None:
            record.msg = f"{record.msg} (and {held} more like it in the last {now - last:.0f} s)"
        if len(self._last) > 10_000:  # bounded, whatever the messages
            self._last.clear()
        return True
