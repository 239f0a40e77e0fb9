"""A socket found lost is not written on (vastui/ssh/lostwrites.py): asyncio logs "socket.send()
raised exception." for every write past the fifth to a lost socket, and asyncssh went on writing
to one while it worked through what it had read before the loss. A busy tunnel that ends (the
engine's shutdown, the simulator's, a worker or a service gone) logs no such line."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import asyncssh
import pytest
from asyncssh.forward import SSHForwarder

from vastsim.sshd import LOTUS_PORT, SandboxSshd
from vastui.ssh.lostwrites import installed

LOST = "socket.send() raised exception."
CHUNK = b"x" * 65536


def lost_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage() == LOST]


@pytest.fixture
def asyncio_warnings(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.WARNING, logger="asyncio")
    return caplog


def test_vastuis_ssh_skips_lost_sockets() -> None:
    import vastui.ssh  # noqa: F401 - importing it is enough

    assert installed()


# -- the two writers, each to a socket whose send has just failed ------------------------


class _Shell(asyncssh.SSHServerSession[bytes]):
    def shell_requested(self) -> bool:
        return True  # and what the client sends is dropped


class _Sink(asyncssh.SSHServer):
    def begin_auth(self, username: str) -> bool:
        return False  # no authentication: a test server

    def session_requested(self) -> asyncssh.SSHServerSession[bytes]:
        return _Shell()


async def test_the_ssh_connection_stops_writing_once_its_socket_is_lost(
    asyncio_warnings: pytest.LogCaptureFixture,
) -> None:
    host_key = asyncssh.generate_private_key("ssh-ed25519")
    server = await asyncssh.create_server(
        _Sink, "127.0.0.1", 0, server_host_keys=[host_key], encoding=None
    )
    port = server.sockets[0].getsockname()[1]
    conn = await asyncssh.connect("127.0.0.1", port, username="t", known_hosts=None)
    try:
        chan, _ = await conn.create_session(asyncssh.SSHClientSession, encoding=None)
        # the next send fails (EPIPE): asyncio marks the socket lost and schedules
        # connection_lost, which cannot run before this loop yields
        conn.get_extra_info("socket").shutdown(socket.SHUT_WR)
        for _ in range(20):
            chan.write(b"x" * 1000)
        await conn.wait_closed()
    finally:
        conn.abort()
        server.close()
        await server.wait_closed()
    assert lost_lines(asyncio_warnings) == []


async def test_a_forwarder_stops_writing_once_its_socket_is_lost(
    asyncio_warnings: pytest.LogCaptureFixture,
) -> None:
    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()
        writer.close()

    service = await asyncio.start_server(accept, "127.0.0.1", 0)
    port = service.sockets[0].getsockname()[1]
    loop = asyncio.get_running_loop()
    transport, forwarder = await loop.create_connection(SSHForwarder, "127.0.0.1", port)
    try:
        transport.get_extra_info("socket").shutdown(socket.SHUT_WR)
        for _ in range(20):  # a channel's data, many packets of one read
            forwarder.write(b"x" * 1000)
    finally:
        forwarder.close()
        service.close()
        await service.wait_closed()
    assert lost_lines(asyncio_warnings) == []


# -- a busy tunnel, ended each way a shutdown ends it --------------------------------------


class Tunnel:
    """The simulator's sshd for one worker, the engine's connection with the worker's Lotus
    forward (as WorkerConnection opens it), a service behind it streaming to every connection,
    and the worker's processes streaming through it."""

    def __init__(self, tmp_path: Path) -> None:
        self.root = tmp_path
        self.key = asyncssh.generate_private_key("ssh-ed25519")
        self.box = SandboxSshd(
            tmp_path, {"PATH": "/usr/bin:/bin"},
            lambda: [self.key.export_public_key().decode()],
            asyncssh.generate_private_key("ssh-ed25519"),
        )  # fmt: skip
        self.served: list[asyncio.StreamWriter] = []
        self.talkers: list[asyncio.Task[None]] = []
        self.workers: list[asyncio.StreamWriter] = []
        self.received: list[int] = []

    async def start(self, connections: int = 8) -> None:
        await self.box.start(0)
        self.service = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        service_port = self.service.sockets[0].getsockname()[1]
        self.conn = await asyncssh.connect(
            "127.0.0.1", self.box.port, username="root", client_keys=[self.key],
            known_hosts=None,
        )  # fmt: skip
        await self.conn.forward_remote_port("127.0.0.1", LOTUS_PORT, "127.0.0.1", service_port)
        port = int((self.root / "run" / "lotus-api-addr").read_text().rsplit(":", 1)[1])
        for i in range(connections):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            self.workers.append(writer)
            self.received.append(0)
            self.talkers.append(asyncio.create_task(self._talk(i, reader, writer)))

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.served.append(writer)
        drain = asyncio.create_task(_read_all(reader))
        try:
            while not drain.done():
                writer.write(CHUNK)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            drain.cancel()
            writer.close()

    async def _talk(
        self, i: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            while True:
                writer.write(CHUNK)
                await writer.drain()
                data = await reader.read(len(CHUNK))
                if not data:
                    return
                self.received[i] += len(data)
        except (ConnectionError, OSError):
            return

    async def busy(self, each: int = 1 << 20) -> None:
        """Until every connection has carried ``each`` bytes from the service."""
        async with asyncio.timeout(60):
            while min(self.received) < each:
                await asyncio.sleep(0.01)

    async def close(self) -> None:
        for task in self.talkers:
            task.cancel()
        await asyncio.gather(*self.talkers, return_exceptions=True)
        self.conn.abort()
        await self.box.stop()
        self.service.close()
        for writer in self.served:
            writer.transport.abort()
        await self.service.wait_closed()


async def _read_all(reader: asyncio.StreamReader) -> None:
    while await reader.read(1 << 16):
        pass


@pytest.fixture
async def tunnel(tmp_path: Path) -> AsyncIterator[Tunnel]:
    t = Tunnel(tmp_path)
    await t.start()
    try:
        yield t
    finally:
        await t.close()


@pytest.mark.parametrize(
    "end", ["engine_closes", "engine_aborts", "sshd_stops", "workers_vanish", "service_vanishes"]
)
async def test_a_busy_tunnel_ends_without_lost_write_lines(
    tunnel: Tunnel, asyncio_warnings: pytest.LogCaptureFixture, end: str
) -> None:
    await tunnel.busy()
    if end == "engine_closes":  # the engine's stop: its SSH pool closes every connection
        tunnel.conn.close()
        await tunnel.conn.wait_closed()
    elif end == "engine_aborts":
        tunnel.conn.abort()
        await tunnel.conn.wait_closed()
    elif end == "sshd_stops":  # the simulator's stop: every sandbox's sshd drops its clients
        await tunnel.box.stop()
        await tunnel.conn.wait_closed()
    elif end == "workers_vanish":  # the sandbox's processes killed
        for writer in tunnel.workers:
            writer.transport.abort()
    else:  # curio's database or the Lotus stand-in stopped under its clients
        for writer in tunnel.served:
            writer.transport.abort()
    async with asyncio.timeout(60):
        await asyncio.gather(*tunnel.talkers, return_exceptions=True)
    await tunnel.close()
    assert lost_lines(asyncio_warnings) == []


# asyncssh 2.24.1's bodies, which vastui/ssh/lostwrites.py copied with one check added
COPIED = {
    "SSHConnection._send": [
        "if self._transport:", "try:", "self._transport.write(data)",
        "except ConnectionError: # pragma: no cover", "pass",
    ],
    "SSHForwarder.write": [
        "if not self._transport:", "return # pragma: no cover", "try:",
        "self._transport.write(data)", "except OSError: # pragma: no cover", "pass",
    ],
}  # fmt: skip


def test_the_methods_replaced_are_the_ones_copied() -> None:
    """A newer asyncssh that changes either method must be read again before the copy stands."""
    import inspect

    from vastui.ssh import lostwrites

    lostwrites.install()
    for name, body in COPIED.items():
        source = inspect.getsource(lostwrites.ORIGINALS[name])
        lines = [ln.strip() for ln in source.splitlines()[1:] if ln.strip()]
        lines = [ln for ln in lines if not ln.startswith('"""')]
        assert lines == body, f"asyncssh's {name} changed: read it again ({lines})"
