"""One long-lived `workerctl session` channel per worker for the controller's reads (status,
cuzk-status, cuzk-counters): issue 32 measured a channel opened per counters read at a tenth
of a big fleet's engine CPU. The protocol is worker-image/workerctl's `cmd_session`: a command
name per line in, `EXIT_STATUS JSON` per line out, in order.

A session that fails (its channel closed, a connection lost, an answer late or malformed) is
dropped and the next read opens another: a read is retried once on a fresh session only when
the old one was found dead before it answered anything, since the reads change nothing on the
worker. A worker whose image has no `session` (its workerctl exits 2 at once) is asked command
by command, as before."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, Protocol

import asyncssh

from .errors import SshConnectionLost, SshTimeout, WorkerCommandFailed, WorkerProtocolError


class WorkerConnection(Protocol):
    """What a session needs of its connection (connection.py's WorkerConnection)."""

    instance_id: int

    async def open_process(self, command: str, *, stdin_eof: bool = True) -> tuple[Any, Any]: ...

    async def run_json(self, command: str, *, timeout: float) -> Any: ...

    def parse_json(self, text: str, what: str) -> Any: ...


READS = frozenset({"status", "cuzk-status", "cuzk-counters"})
SESSION_COMMAND = "workerctl session"
MAX_ANSWER_BYTES = 1 << 20  # an answer line longer than this is a protocol error


class ReadSession:
    def __init__(self, conn: WorkerConnection) -> None:
        self.conn = conn
        self._process: Any = None
        self._lock = asyncio.Lock()  # one question at a time: answers come in order
        self.supported = True  # False once the worker's workerctl has no `session`
        self.opened = 0  # sessions opened (what the tests count)

    async def ask(self, name: str, timeout: float) -> Any:
        """`workerctl NAME` answered on the session: its JSON (strings sanitised).

        Raises what `WorkerConnection.run_json` raises for the same command: SshTimeout,
        SshConnectionLost/SshUnreachable, WorkerCommandFailed (a non-zero status),
        WorkerProtocolError (bad JSON)."""
        if name not in READS:
            raise ValueError(f"not a workerctl read: {name!r}")
        command = f"workerctl {name}"
        if not self.supported:
            return await self.conn.run_json(command, timeout=timeout)
        async with self._lock:
            try:
                async with asyncio.timeout(timeout):
                    line = await self._exchange(name, command)
            except TimeoutError:
                self.drop()
                raise SshTimeout(self.conn.instance_id, command, timeout) from None
            except BaseException:
                # Cancelled (the follower stopped) or failed with a question asked and its
                # answer not read: the next question on this session would read that answer.
                self.drop()
                raise
        if line is None:  # no session on this worker: command by command from now on
            return await self.conn.run_json(command, timeout=timeout)
        return self._answer(line, command)

    async def _exchange(self, name: str, command: str) -> bytes | None:
        """Send one question, read its answer line; None when the worker has no `session`."""
        for attempt in range(2):
            reused = self._alive()
            process = reused or await self._open()
            try:
                process.stdin.write(name.encode() + b"\n")
                line: bytes = await process.stdout.readuntil(b"\n")
            except (asyncio.IncompleteReadError, asyncssh.Error, OSError) as e:
                partial = isinstance(e, asyncio.IncompleteReadError) and bool(e.partial)
                if not reused and not partial and await _no_session(process):
                    self.drop()
                    self.supported = False
                    return None
                self.drop()
                if reused and not partial and attempt == 0:
                    continue  # it had died since its last answer: once more on a new one
                raise SshConnectionLost(
                    self.conn.instance_id, f"session ended while running: {command}"
                ) from None
            if len(line) > MAX_ANSWER_BYTES:
                self.drop()
                raise WorkerProtocolError(self.conn.instance_id, f"answer too long: {command}")
            return line
        raise AssertionError("unreachable")  # pragma: no cover

    def _answer(self, line: bytes, command: str) -> Any:
        status, _, text = line.decode("utf-8", errors="replace").rstrip("\n").partition(" ")
        if not status.isdigit():
            self.drop()  # out of step with the protocol: a new session for the next read
            raise WorkerProtocolError(
                self.conn.instance_id, f"bad session answer to {command}: {line[:80]!r}"
            )
        if int(status) != 0:
            raise WorkerCommandFailed(self.conn.instance_id, command, int(status))
        return self.conn.parse_json(text, command)

    def _alive(self) -> Any:
        process = self._process
        if process is None or process.channel.is_closing():
            self._process = None
            return None
        return process

    async def _open(self) -> Any:
        _, process = await self.conn.open_process(SESSION_COMMAND, stdin_eof=False)
        self._process = process
        self.opened += 1
        return process

    def drop(self) -> None:
        """Close the session's channel (the next read opens a new one)."""
        process, self._process = self._process, None
        if process is not None:
            with contextlib.suppress(Exception):
                process.close()


async def _no_session(process: Any) -> bool:
    """The worker's workerctl refused `session` at once (a usage error, status 2: an image from
    before it; 127: no workerctl at all). Its exit status follows the end of its output."""
    with contextlib.suppress(Exception):
        await process.wait_closed()  # bounded by the read's timeout
    return process.exit_status in (2, 127)
