"""The engine's log for the Logs pane: the in-process engine's records kept in a bounded ring
(secrets redacted, as the headless engine's log file is), or the headless engine's log file
read from where the last read ended. Both hand out only lines not handed out before."""

from __future__ import annotations

import collections
import contextlib
import logging
from collections.abc import Callable
from pathlib import Path

from vastui.logfmt import ClockFormatter
from vastui.redact import SecretFilter
from vastui.sanitize import sanitize_line

ENGINE_LOG_LINES = 5_000
FILE_START = 256_000  # bytes from the end a long log file is first read from
FILE_READ = 1_000_000  # bytes read at most per call


class RingHandler(logging.Handler):
    """Records as sanitised lines in a bounded ring, on the fleet's clock, secrets redacted as
    in the headless engine's log (vastui/engine/headless.py)."""

    def __init__(
        self, ring: collections.deque[str], clock: Callable[[], float], secrets: list[str]
    ) -> None:
        super().__init__(logging.INFO)
        self.ring = ring
        self.total = 0  # lines ever appended: the ring's length stops growing when full
        self.setFormatter(ClockFormatter(clock))  # the fleet's clock, as the workers' lines
        self.addFilter(SecretFilter(secrets))

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):
            self.ring.append(sanitize_line(self.format(record), 2000))
            self.total += 1


class RingLog:
    """The log of the engine this process runs: vastui's records while installed."""

    def __init__(self, clock: Callable[[], float], secrets: list[str]) -> None:
        self.ring: collections.deque[str] = collections.deque(maxlen=ENGINE_LOG_LINES)
        self.handler = RingHandler(self.ring, clock, secrets)
        self._seen = 0

    def install(self) -> None:
        logging.getLogger("vastui").addHandler(self.handler)
        logging.getLogger("vastui").setLevel(logging.INFO)

    def uninstall(self) -> None:
        logging.getLogger("vastui").removeHandler(self.handler)

    def new_lines(self) -> list[str]:
        total = self.handler.total
        new = min(total - self._seen, len(self.ring))
        self._seen = total
        return list(self.ring)[-new:] if new > 0 else []

    def rewind(self) -> None:
        self._seen = 0


class EngineLogFile:
    """A headless engine's log file, whole lines only, from near its end the first time."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0

    def new_lines(self) -> list[str]:
        try:
            size = self.path.stat().st_size
            if size < self._offset:  # rotated or truncated
                self._offset = 0
            if self._offset == 0 and size > FILE_START:
                self._offset = size - FILE_START  # start near the end of a long log
            with self.path.open("rb") as fh:
                fh.seek(self._offset)
                data = fh.read(FILE_READ)
        except OSError:
            return []
        cut = data.rfind(b"\n") + 1  # only whole lines
        self._offset += cut
        text = data[:cut].decode("utf-8", "replace")
        return [sanitize_line(line, 2000) for line in text.splitlines()]

    def rewind(self) -> None:
        self._offset = 0
