"""The console's terminal going away: noticed, and the console stops cleanly.

A closed terminal does not always send SIGHUP: under `make demo` in tmux, `tmux kill-session`
hung the pty up with make as the session leader, and neither make nor the console got a signal.
Textual's writer thread then died on the first frame (`write` raises EIO on a hung-up pty;
textual/drivers/_writer_thread.py has no handler), its bounded queue filled, and the event loop
blocked for ever in `Queue.put`: the engine never stopped, the simulated workers ran on, and
SIGTERM (a loop signal handler) could not run either.

Textual's Linux driver writes every frame to ``sys.__stderr__`` (textual/drivers/linux_driver.py
``LinuxDriver.__init__``). The console runs with that file wrapped in :class:`TerminalGuard`:
a write or flush that fails because the terminal is gone is swallowed, and the console is told
once, from the writer thread, so that it exits (stopping its engine) as it does on SIGHUP.
"""

from __future__ import annotations

import contextlib
import errno
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any, TextIO

# What writing to a terminal that has gone says (a hung-up pty: EIO; a closed fd: EBADF).
GONE = frozenset({errno.EIO, errno.EBADF, errno.ENXIO, errno.EPIPE})


class TerminalGuard:
    """A text file in front of the terminal that survives its loss and reports it."""

    def __init__(self, inner: TextIO) -> None:
        self.inner = inner
        self.lost = threading.Event()
        self._on_lost: Callable[[], None] | None = None
        self._lock = threading.Lock()

    def on_lost(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (from whichever thread notices) once the terminal is gone; at
        once if it already is."""
        with self._lock:
            self._on_lost = callback
        if self.lost.is_set():
            callback()

    def _gone(self, exc: OSError) -> bool:
        if exc.errno not in GONE:
            return False
        if not self.lost.is_set():
            self.lost.set()
            with self._lock:
                callback = self._on_lost
            if callback is not None:
                callback()
        return True

    def write(self, text: str) -> int:
        if self.lost.is_set():
            return len(text)
        try:
            return self.inner.write(text)
        except OSError as exc:
            if not self._gone(exc):
                raise
            return len(text)

    def flush(self) -> None:
        if self.lost.is_set():
            return
        try:
            self.inner.flush()
        except OSError as exc:
            if not self._gone(exc):
                raise

    def __getattr__(self, name: str) -> Any:  # fileno, isatty, encoding, ...
        return getattr(self.inner, name)


@contextlib.contextmanager
def guarded_terminal() -> Iterator[TerminalGuard | None]:
    """``sys.__stderr__`` wrapped in a TerminalGuard for the block (None: there is none)."""
    original = sys.__stderr__
    if original is None:
        yield None
        return
    guard = TerminalGuard(original)
    # typeshed declares sys.__stderr__ final; Textual's driver writes to it, so it is swapped
    sys.__stderr__ = guard  # type: ignore[misc,assignment]
    try:
        yield guard
    finally:
        sys.__stderr__ = original  # type: ignore[misc]  # the same final attribute, restored
