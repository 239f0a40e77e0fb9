"""The console's terminal going away (vastui/console/terminal.py): a write that meets a hung-up
terminal is swallowed and reported once, so Textual's writer thread lives on, its queue never
fills, and the console exits as on SIGHUP; other errors still raise."""

from __future__ import annotations

import contextlib
import errno
import io
import os
import pty
import sys

import pytest

from vastui.console.terminal import TerminalGuard, guarded_terminal


class Failing(io.StringIO):
    def __init__(self, err: int | None) -> None:
        super().__init__()
        self.err = err

    def write(self, text: str) -> int:
        if self.err is not None:
            raise OSError(self.err, os.strerror(self.err))
        return super().write(text)

    def flush(self) -> None:
        if self.err is not None:
            raise OSError(self.err, os.strerror(self.err))


def test_a_hung_up_terminal_is_reported_once_and_writes_go_nowhere():
    inner = Failing(None)
    guard = TerminalGuard(inner)
    calls: list[int] = []
    guard.on_lost(lambda: calls.append(1))
    assert guard.write("frame 1") == 7 and inner.getvalue() == "frame 1"
    inner.err = errno.EIO
    for _ in range(100):  # more frames than Textual's writer queue holds (30)
        assert guard.write("frame") == 5
        guard.flush()
    assert guard.lost.is_set() and calls == [1]
    late: list[int] = []
    guard.on_lost(lambda: late.append(1))
    assert late == [1], "a callback set after the loss runs at once"


@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EACCES])
def test_other_errors_still_raise(err: int):
    guard = TerminalGuard(Failing(err))
    with pytest.raises(OSError):
        guard.write("x")
    assert not guard.lost.is_set()


def test_a_real_pty_hung_up_by_its_master_reads_as_lost():
    master, slave = pty.openpty()
    out = os.fdopen(slave, "w", buffering=1)
    guard = TerminalGuard(out)
    guard.write("before\n")
    os.close(master)  # the terminal emulator went away
    for _ in range(5):
        guard.write("after\n")
        guard.flush()
    assert guard.lost.is_set()
    with contextlib.suppress(OSError):  # its buffer cannot reach the terminal either
        out.close()


def test_the_guard_stands_in_for_sys_stderr_only_within_the_block():
    original = sys.__stderr__
    with guarded_terminal() as guard:
        assert guard is not None and sys.__stderr__ is guard and guard.inner is original
        assert guard.fileno() == original.fileno()  # what Textual's driver asks of it
    assert sys.__stderr__ is original
