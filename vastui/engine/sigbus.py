"""A SIGBUS is one line and status 1, as every other fatal store error is.

SQLite in WAL mode maps the database's ``-shm`` file; when that file is truncated, removed or
replaced under the engine (another process "repairing" it, a full or failing disk), the next
touch of the mapping raises SIGBUS and the process dies of it (status 135) without a word, and
no Python code can catch it where it happens: a Python-level handler returns to the faulting
instruction, which faults again. So the handler is a native one (ctypes installs a C callback
with ``sigaction``'s old cousin ``signal``): it writes its one line and ends the process with
``_exit(1)``, which systemd's ``Restart=on-failure`` treats as the failure it is. Nothing else
is attempted in it: the process's memory is not to be trusted any more.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal

_HANDLER = ctypes.CFUNCTYPE(None, ctypes.c_int)
_installed: list[object] = []  # the callback must outlive the handler's installation


def install(db_path: str) -> bool:
    """SIGBUS ends the process with one line naming ``db_path`` and status 1. False where a
    native handler cannot be installed (then the default stands)."""
    line = (
        f"vastui: engine stopped: a memory-mapped file went away under the engine (SIGBUS): "
        f"the database's shared memory {db_path}-shm was truncated, removed or replaced, or "
        "its disk failed\n"
    ).encode("utf-8", "replace")

    def on_sigbus(_signum: int) -> None:
        os.write(2, line)
        os._exit(1)

    callback = _HANDLER(on_sigbus)
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.signal.restype = ctypes.c_void_p
        libc.signal.argtypes = (ctypes.c_int, _HANDLER)
        if libc.signal(signal.SIGBUS, callback) != ctypes.c_void_p(-1).value:
            _installed.append(callback)
            return True
    return False
