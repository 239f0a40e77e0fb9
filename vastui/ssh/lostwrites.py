"""asyncssh stops writing to a socket once asyncio has found it lost.

asyncio tells a protocol of a failed send only by scheduling its ``connection_lost``; until that
callback runs, each write to the transport is dropped and counted, and from the sixth on logs
"socket.send() raised exception." (asyncio/selector_events.py ``_SelectorSocketTransport.write``,
``constants.LOG_THRESHOLD_FOR_CONNLOST_WRITES``). asyncssh writes on in that window while it
works through what it read before the loss (ronf/asyncssh#303, where its author describes it):
every packet of one read handled in one go, each a channel's data passed to a forwarded socket
(asyncssh/forward.py ``SSHForwarder.write``) or a window adjust and data sent on the SSH
connection (asyncssh/connection.py ``SSHConnection._send``). A tunnel that carries data when a
worker, a service behind the tunnel or the SSH connection goes away (every shutdown) logged the
line dozens of times. Both writers here skip a transport asyncio has marked closing, as its own
``StreamWriter.drain`` does: what they would have written is dropped either way.

``install`` replaces the two methods once, for the process (the engine's SSH and the simulator's
sshd both call it); the bodies are asyncssh 2.24's with the one check added.
"""

from __future__ import annotations

import contextlib
from typing import Any

from asyncssh.connection import SSHConnection
from asyncssh.forward import SSHForwarder

_INSTALLED = "_vastui_skips_lost_transports"


def _open(transport: Any) -> bool:
    """A transport still worth writing to: there, and not closing (asyncio marks a lost socket
    closing at once; an asyncssh channel is closing once it cannot send)."""
    return transport is not None and not transport.is_closing()


def _connection_send(self: SSHConnection, data: bytes) -> None:
    """``SSHConnection._send``, skipping a lost socket."""
    transport: Any = getattr(self, "_transport", None)
    if _open(transport):
        with contextlib.suppress(ConnectionError):
            transport.write(data)


def _forwarder_write(self: SSHForwarder, data: bytes) -> None:
    """``SSHForwarder.write``, skipping a lost socket."""
    transport: Any = getattr(self, "_transport", None)
    if _open(transport):
        with contextlib.suppress(OSError):
            transport.write(data)


# What the replaced methods were when they were copied (asyncssh 2.24.1): a release that changes
# them is met by a test (tests/test_ssh_lost_writes.py), not by a silent copy of an old body.
ORIGINALS: dict[str, Any] = {}


def install() -> None:
    """Make asyncssh skip lost sockets (idempotent)."""
    if getattr(SSHConnection, _INSTALLED, False):
        return
    ORIGINALS["SSHConnection._send"] = SSHConnection._send
    ORIGINALS["SSHForwarder.write"] = SSHForwarder.write
    setattr(SSHConnection, "_send", _connection_send)  # noqa: B010 - a method replaced
    setattr(SSHForwarder, "write", _forwarder_write)  # noqa: B010
    setattr(SSHConnection, _INSTALLED, True)


def installed() -> bool:
    return bool(getattr(SSHConnection, _INSTALLED, False))
