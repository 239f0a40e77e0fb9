"""The warden of a simulated cloud's sandboxes: every process an instance starts dies with the
cloud that started it, even when that cloud is SIGKILLed and cleans up nothing.

A sandbox's processes carry a marker in their environment (``MARKER`` = the instance's
directory); the worker scripts background their daemons, so neither a process group nor a
parent-death signal on the shell reaches them all. The cloud starts one warden
(:func:`start_warden`): a small process whose parent-death signal is SIGTERM
(``PR_SET_PDEATHSIG``), which then SIGKILLs every process marked with a directory under the
cloud's root. This file imports nothing of vastui: the warden runs it by path, and a start-up
of the whole package would only widen the window before its signal is armed.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

MARKER = "VASTUI_SIM_SANDBOX"
PR_SET_PDEATHSIG = 1


def kill_marked(match: Callable[[str], bool]) -> int:
    """SIGKILL processes whose sandbox marker satisfies `match`.

    A listing of /proc is a snapshot: a process may fork after it and before its own kill
    (the entrypoint starting cuzk-daemon), so scan again until a pass finds nobody new.
    """
    prefix = f"{MARKER}=".encode()
    seen: set[int] = set()
    killed = 0
    for _ in range(100):  # each pass kills every parent of the next pass's newcomers
        fresh = False
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            pid = int(entry.name)
            if pid in seen:
                continue
            try:
                environ = (entry / "environ").read_bytes()
            except OSError:
                continue
            values = [v[len(prefix) :] for v in environ.split(b"\0") if v.startswith(prefix)]
            if values and match(values[0].decode("utf-8", "replace")):
                seen.add(pid)
                fresh = True
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
                    killed += 1
        if not fresh:
            break
    return killed


def under(root: Path) -> Callable[[str], bool]:
    top = str(root)
    return lambda value: value == top or value.startswith(top + os.sep)


def _arm() -> None:
    """In the warden's child, before exec: SIGTERM when the thread that started it ends, held
    (blocked, the mask survives exec) until the warden's handler is in place: a cloud killed
    while the warden's interpreter starts must not kill the warden by SIGTERM's default."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def start_warden(root: Path) -> subprocess.Popen[bytes]:
    """The warden of the sandboxes under ``root`` for this process (call it from the thread
    that lives as long as the cloud: the parent-death signal follows the thread)."""
    return subprocess.Popen(
        [sys.executable, "-I", "-S", __file__, str(root), str(os.getpid())],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True, preexec_fn=_arm,
    )  # fmt: skip


def stop_warden(warden: subprocess.Popen[bytes]) -> None:
    """The cloud closed cleanly (its sandboxes already stopped): the warden goes, quietly."""
    with contextlib.suppress(ProcessLookupError):
        warden.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        warden.wait(5)


def _main(argv: list[str]) -> int:
    root, parent = Path(argv[1]), int(argv[2])

    def end(*_: object) -> None:
        kill_marked(under(root))
        os._exit(0)

    signal.signal(signal.SIGTERM, end)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})  # (held since _arm)
    if os.getppid() != parent:  # the cloud died before the signal was armed
        end()
    while True:
        signal.pause()


if __name__ == "__main__":
    sys.exit(_main(sys.argv))
