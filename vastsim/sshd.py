"""SSH servers for simulated instances: user `root`, the account's keys, commands run by bash
in the instance's sandbox, and remote port forwards (the controller's tunnel).

Like a real Vast instance, the server runs whatever command the client sends, as a shell would,
with the instance's environment. A plain OpenSSH client works as well as vastui's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import weakref
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import asyncssh

from vastui.ssh.lostwrites import install as skip_lost_sockets

log = logging.getLogger("vastsim.sshd")
skip_lost_sockets()  # a tunnel's data is not written on to a socket found lost (one log line each)

# The worker's 127.0.0.1:1234 is the Lotus API; many simulated instances share this host's
# loopback, so each forward listens on a free port and the sandbox learns it from this file.
LOTUS_PORT = 1234


class _Server(asyncssh.SSHServer):
    def __init__(self, sandbox: SandboxSshd) -> None:
        self.sandbox = sandbox
        self.conn: asyncssh.SSHServerConnection | None = None

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self.conn = conn
        self.sandbox.connections.add(conn)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.conn is not None:
            self.sandbox.connections.discard(self.conn)
            self.sandbox.forward_closed(self.conn)

    def begin_auth(self, username: str) -> bool:
        return True

    def password_auth_supported(self) -> bool:
        return False

    def public_key_auth_supported(self) -> bool:
        return True

    def validate_public_key(self, username: str, key: asyncssh.SSHKey) -> bool:
        return username == "root" and self.sandbox.key_allowed(key)

    async def server_requested(self, listen_host: str, listen_port: int) -> Any:
        assert self.conn is not None
        # Listen on a free loopback port; forwarded connections name the requested address
        # so the client matches them to its forward.
        listener = await self.conn.forward_local_port(
            "127.0.0.1", 0, listen_host or "127.0.0.1", listen_port
        )
        self.sandbox.forward_opened(self.conn, listen_port, listener.get_port())
        return listener


class SandboxSshd:
    """One SSH server for one simulated instance."""

    def __init__(
        self,
        root: Path,
        env: Mapping[str, str],
        authorized_keys: Callable[[], list[str]],
        host_key: asyncssh.SSHKey,
    ) -> None:
        self.root = root
        self.env = dict(env)
        self._authorized_keys = authorized_keys
        self.host_key = host_key
        self.servers: list[asyncssh.SSHAcceptor] = []
        self.connections: set[asyncssh.SSHServerConnection] = set()
        self.processes: set[asyncio.subprocess.Process] = set()
        self._forwards: dict[asyncssh.SSHServerConnection, dict[int, int]] = {}
        self.port: int | None = None  # the first port (Vast's proxy endpoint)
        self.ports: list[int] = []
        self._host = "127.0.0.1"
        self._held: list[socket.socket] = []  # the ports, bound, not listening: refusing

    def key_allowed(self, key: asyncssh.SSHKey) -> bool:
        wanted = key.public_data
        for line in self._authorized_keys():
            try:
                if asyncssh.import_public_key(line).public_data == wanted:
                    return True
            except (asyncssh.KeyImportError, ValueError):
                continue
        return False

    async def start(self, port: int, host: str = "127.0.0.1", also: tuple[int, ...] = ()) -> int:
        """Listen on ``port`` and the ``also`` ports: one server, one host key, as Vast's SSH
        proxy and an instance's direct port both reach the same container's sshd."""
        self._host = host
        try:
            for each in (port, *also):
                server = await self._listen(each)
                self.servers.append(server)
                self.ports.append(server.sockets[0].getsockname()[1])
        except BaseException:
            await self.stop()  # no half-started server left listening
            raise
        self.port = self.ports[0]
        _LIVE.add(self)
        if _refusing:
            await self.refuse()
        return self.port

    @property
    def forward_count(self) -> int:
        """Remote port forwards open now, over every connection."""
        return sum(len(f) for f in self._forwards.values())

    async def _listen(self, port: int) -> asyncssh.SSHAcceptor:
        return await asyncssh.create_server(
            lambda: _Server(self),
            self._host,
            port,
            server_host_keys=[self.host_key],
            process_factory=self._handle,
            encoding=None,
            allow_scp=False,
            agent_forwarding=False,
            x11_forwarding=False,
        )

    # -- the controller cut off (refuse_connections) ---------------------------------------

    async def refuse(self) -> None:
        """Refuse connections on every port (each kept bound, not listening: a connect is
        refused, and no other socket takes the port) and drop the live ones, with their
        commands and forwards."""
        if not self.servers:
            return
        for conn in list(self.connections):
            conn.abort()
        for server in self.servers:
            server.close()
        self.servers = []
        for port in self.ports:
            held = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            held.bind((self._host, port))
            self._held.append(held)

    async def accept(self) -> None:
        """Listen again on the same ports."""
        if not self._held:
            return
        for held in self._held:
            held.close()
        self._held = []
        self.servers = [await self._listen(port) for port in self.ports]

    # -- tunnel ------------------------------------------------------------------------

    def _forward_file(self, remote_port: int) -> Path:
        if remote_port == LOTUS_PORT:
            return self.root / "run" / "lotus-api-addr"
        return self.root / "run" / "forwards" / str(remote_port)

    def forward_opened(
        self, conn: asyncssh.SSHServerConnection, remote_port: int, real_port: int
    ) -> None:
        self._forwards.setdefault(conn, {})[remote_port] = real_port
        path = self._forward_file(remote_port)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"127.0.0.1:{real_port}\n")

    def forward_closed(self, conn: asyncssh.SSHServerConnection) -> None:
        for remote_port, real_port in self._forwards.pop(conn, {}).items():
            path = self._forward_file(remote_port)
            with contextlib.suppress(OSError):
                if path.read_text().strip() == f"127.0.0.1:{real_port}":
                    path.unlink()

    # -- commands ----------------------------------------------------------------------

    async def _handle(self, process: asyncssh.SSHServerProcess[Any]) -> None:
        command = process.command
        argv = ["/bin/bash", "-c", command] if command else ["/bin/bash", "-s"]
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                cwd=self.root,
                env=self.env,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:
            process.stderr.write(f"vastui-sim: cannot start shell: {exc}\n".encode())
            process.exit(127)
            return
        self.processes.add(proc)
        pumps = [
            asyncio.create_task(_pump_out(proc.stdout, process.stdout)),
            asyncio.create_task(_pump_out(proc.stderr, process.stderr)),
        ]
        feeder = asyncio.create_task(_pump_in(process.stdin, proc.stdin))
        finished: asyncio.Future[Any] = asyncio.gather(proc.wait(), *pumps)
        closed: asyncio.Future[Any] = asyncio.ensure_future(process.channel.wait_closed())
        try:
            await asyncio.wait({finished, closed}, return_when=asyncio.FIRST_COMPLETED)
            if not finished.done() or finished.exception() is not None:
                # The client went away (e.g. it stopped following a log): end the command.
                _killpg(proc)
                await proc.wait()
                finished.cancel()
                return
            returncode = proc.returncode if proc.returncode is not None else 255
            process.exit(returncode if returncode >= 0 else 128 - returncode)
        except (asyncssh.Error, OSError, ConnectionError):
            _killpg(proc)
        finally:
            # A client that goes away breaks or cancels a pump; that is expected, not an
            # "exception was never retrieved" for asyncio to log.
            finished.add_done_callback(_retrieve)
            feeder.cancel()
            closed.cancel()
            for pump in pumps:
                pump.cancel()
            self.processes.discard(proc)

    async def stop(self) -> None:
        """Like the machine going away: drop connections, kill commands."""
        _LIVE.discard(self)
        for held in self._held:
            held.close()
        self._held = []
        for server in self.servers:
            server.close()
            with contextlib.suppress(Exception):
                await server.wait_closed()
        self.servers = []
        for conn in list(self.connections):
            conn.abort()
        procs = list(self.processes)
        for proc in procs:
            _killpg(proc)
        # Reap them here: a command still running when the event loop closes leaves its
        # subprocess transport unclosed ("Loop ... that handles pid N is closed").
        for proc in procs:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(5.0):
                    await proc.wait()


# -- every sandbox's sshd at once: the controller cut off from its workers -------------------
# One switch per process (`vastui sim serve` serves one cloud), set through ``POST /_sim/ssh``
# (vastsim/app.py) by the reliability trials: while it is on, every sandbox's sshd refuses
# connections, those that start meanwhile too.
_LIVE: weakref.WeakSet[SandboxSshd] = weakref.WeakSet()
_refusing = False


async def refuse_connections(refuse: bool) -> int:
    """Every sandbox's sshd refuses connections (dropping the live ones), or listens again;
    how many sshds were switched."""
    global _refusing
    _refusing = refuse
    boxes = list(_LIVE)
    for box in boxes:
        try:
            await (box.refuse() if refuse else box.accept())
        except OSError as exc:  # one port taken meanwhile must not spare the others
            log.warning("sshd on %s: cannot %s: %s", box.ports, "refuse" if refuse else "listen",
                        exc)  # fmt: skip
    return len(boxes)


def refusing() -> bool:
    return _refusing


def census() -> dict[str, int]:
    """What the sandboxes' sshds hold now: servers listening, connections, sessions (commands
    running) and remote forwards."""
    boxes = list(_LIVE)
    return {
        "sshds": len(boxes),
        "listening": sum(len(b.servers) for b in boxes),
        "connections": sum(len(b.connections) for b in boxes),
        "sessions": sum(len(b.processes) for b in boxes),
        "forwards": sum(b.forward_count for b in boxes),
    }


async def _pump_out(reader: asyncio.StreamReader | None, writer: Any) -> None:
    if reader is None:
        return
    while chunk := await reader.read(65536):
        writer.write(chunk)
        await writer.drain()


async def _pump_in(reader: Any, writer: asyncio.StreamWriter | None) -> None:
    if writer is None:
        return
    try:
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()
    except (asyncssh.Error, OSError, ConnectionError):
        pass
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            writer.close()


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


def _killpg(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
