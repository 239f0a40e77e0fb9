"""One persistent SSH connection per worker instance (asyncssh).

* **Host keys are trusted on first use and pinned per instance** (:mod:`vastui.ssh.pins`). A
  different key later raises :class:`HostKeyChanged` and the connection becomes ``blocked``:
  every further call raises the same error at once, without touching the network, until the
  operator has verified the re-key, forgotten the pin and called :meth:`WorkerConnection.unblock`.
* **Reconnects** use jittered exponential backoff, a bounded number of attempts per call, and
  never happen after a host-key change or an authentication failure.
* **Nothing the worker sends leaves this module raw**: output goes through
  :mod:`vastui.ssh.lines` (decoded, split, sanitized); the errors (:mod:`vastui.ssh.errors`)
  quote remote text sanitized too.
* Nothing from the user's ``~/.ssh`` is consulted: no config file, no agent, no known_hosts.

One file: one connection's state machine (connect, pin, reconnect, block); its errors are
errors.py, its line handling lines.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
from collections import deque
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import asyncssh

from vastui.domain.worker import HostKeyRecord
from vastui.sanitize import sanitize_line

from .errors import (
    HostKeyChanged,
    SshAuthFailed,
    SshClosed,
    SshConnectionLost,
    SshError,
    SshTimeout,
    SshUnreachable,
    WorkerCommandFailed,
    WorkerProtocolError,
    safe_text,
)
from .lines import (
    DISPLAY_LINE_BYTES,
    TEXT_LINE_BYTES,
    LineSplitter,
    LogBatch,
    display_batches,
    display_batches_ahead,
    display_line,
    refuse_json_constant,
    sanitize_json,
    split_output,
)
from .pins import HostKeyPins, ssh_key
from .session import ReadSession

log = logging.getLogger("vastui.ssh")

_READ_CHUNK = 65536
# Cap on what `run` keeps of one stream; the rest is drained and dropped.
MAX_OUTPUT_BYTES = 8 << 20
# How long to wait for a channel to close after its output ended.
_CLOSE_GRACE = 10.0
_STDERR_TAIL = 10


class ConnState(StrEnum):
    DISCONNECTED = "disconnected"
    CONNECTING = "connecting"
    CONNECTED = "connected"
    BLOCKED = "blocked"


class _Transient(Exception):
    """Internal: a connection attempt failed in a way worth retrying."""


# ---------------------------------------------------------------------------------------------
# value types


@dataclass(frozen=True, slots=True)
class RemoteForward:
    """Worker's ``remote_host:remote_port`` → controller's ``local_host:local_port``."""

    remote_host: str
    remote_port: int
    local_host: str
    local_port: int


@dataclass(frozen=True, slots=True)
class CommandResult:
    exit_status: int | None
    stdout_lines: list[str] = field(default_factory=list)
    stderr_lines: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.exit_status == 0


async def _read_capped(reader: Any, cap: int) -> bytes:
    buf = bytearray()
    while True:
        chunk = await reader.read(_READ_CHUNK)
        if not chunk:
            return bytes(buf)
        if len(buf) < cap:
            buf += chunk[: cap - len(buf)]


# ---------------------------------------------------------------------------------------------


StateCallback = Callable[["WorkerConnection", ConnState, str], object]


class _Client(asyncssh.SSHClient):
    """Per-connection asyncssh client: TOFU host-key check and loss notification."""

    def __init__(self, owner: WorkerConnection, pinned: asyncssh.SSHKey | None) -> None:
        self._owner = owner
        self._pinned = pinned
        self.offered: asyncssh.SSHKey | None = None
        self.conn: asyncssh.SSHClientConnection | None = None

    def connection_made(self, conn: asyncssh.SSHClientConnection) -> None:
        self.conn = conn

    def validate_host_public_key(
        self, host: str, addr: str, port: int, key: asyncssh.SSHKey
    ) -> bool:
        # asyncssh calls this only for keys outside the trusted set, which holds the pin.
        self.offered = key
        if self._pinned is None:
            return True  # first use: accepted here, pinned once the connection is up
        return key.public_data == self._pinned.public_data

    def connection_lost(self, exc: Exception | None) -> None:
        if self.conn is not None:
            self._owner.connection_gone(self.conn, exc)


class WorkerConnection:
    """A persistent, self-healing SSH connection to one worker instance."""

    def __init__(
        self,
        instance_id: int,
        host: str,
        port: int,
        *,
        client_key: asyncssh.SSHKey | str | Path,
        pins: HostKeyPins,
        username: str = "root",
        connect_timeout: float = 10.0,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
        backoff: tuple[float, float, float] = (0.5, 2.0, 30.0),
        max_attempts: int = 5,
        forwards: Sequence[RemoteForward] = (),
        on_state: StateCallback | None = None,
        keepalive_interval: float = 15.0,
        keepalive_count_max: int = 3,
        rng: Callable[[], float] = random.random,
    ) -> None:
        if max_attempts < 1:
            raise ValueError("max_attempts must be >= 1")
        self.instance_id = instance_id
        self.host = host
        self.port = port
        self.username = username
        self.connect_timeout = connect_timeout
        self.max_attempts = max_attempts
        self.forwards: tuple[RemoteForward, ...] = tuple(forwards)
        self.on_state = on_state
        self.keepalive_interval = keepalive_interval
        self.keepalive_count_max = keepalive_count_max
        self._client_key_src = client_key
        self._client_key: asyncssh.SSHKey | None = (
            client_key if isinstance(client_key, asyncssh.SSHKey) else None
        )
        self._pins = pins
        self._sleep = sleep
        self._backoff = backoff
        self._rng = rng
        self._conn: asyncssh.SSHClientConnection | None = None
        self._lock = asyncio.Lock()
        self._state = ConnState.DISCONNECTED
        self._blocked: HostKeyChanged | None = None
        self._closed = False
        self._listeners: dict[RemoteForward, asyncssh.SSHListener] = {}
        # the worker's reads (status, cuzk-counters) on one long-lived channel (issue 32)
        self.reads = ReadSession(self)
        self.forward_errors: dict[RemoteForward, str] = {}
        self.connect_attempts = 0  # network connection attempts made, ever

    # -- state ------------------------------------------------------------------------------

    @property
    def state(self) -> ConnState:
        return self._state

    @property
    def blocked_error(self) -> HostKeyChanged | None:
        return self._blocked

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def forwarded_ports(self) -> dict[RemoteForward, int]:
        """Each established remote forward → the port it listens on at the worker."""
        return {fw: lst.get_port() for fw, lst in self._listeners.items()}

    def _set_state(self, state: ConnState, detail: str = "") -> None:
        if state == self._state and not detail:
            return
        self._state = state
        log.debug("instance %s: ssh %s %s", self.instance_id, state.value, detail)
        if self.on_state is not None:
            try:
                self.on_state(self, state, detail)
            except Exception:
                log.exception("instance %s: on_state callback failed", self.instance_id)

    def unblock(self) -> None:
        """Allow connecting again after a host-key change (call after forgetting the pin)."""
        if self._blocked is not None:
            log.info("instance %s: ssh unblocked by operator", self.instance_id)
            self._blocked = None
            self._set_state(ConnState.DISCONNECTED, "unblocked")

    def backoff_delay(self, retry: int) -> float:
        """Delay before retry number ``retry`` (1-based): exponential, capped, jittered."""
        base, factor, cap = self._backoff
        delay = min(cap, base * factor ** max(0, retry - 1))
        return delay * (0.5 + 0.5 * self._rng())

    async def backoff_sleep(self, retry: int) -> None:
        """Sleep (with the injected ``sleep``) for :meth:`backoff_delay` of ``retry``."""
        await self._sleep(self.backoff_delay(retry))

    def set_endpoint(self, host: str, port: int) -> None:
        """Point at a new endpoint (Vast reports the direct port after the proxy, and may move
        an instance's SSH port).

        A live connection is kept: it carries the worker's tunnels, and dropping it would cut the
        controller's Lotus and database away from a worker that needs them at that moment (one
        refused connection can end a worker that just passed its benchmark). The next connect
        goes to the new endpoint and must still present the pinned host key. A blocked
        connection stays blocked.
        """
        if (host, port) == (self.host, self.port):
            return
        log.info(
            "instance %s: ssh endpoint %s:%s -> %s:%s%s",
            self.instance_id,
            self.host,
            self.port,
            host,
            port,
            " (at the next connect)" if self._alive() is not None else "",
        )
        self.host, self.port = host, port
        if self._alive() is None:
            self._conn, self._listeners = None, {}

    def _check_usable(self) -> None:
        if self._closed:
            raise SshClosed(self.instance_id, "connection closed")
        blocked = self._blocked
        if blocked is not None:
            # A fresh exception each time: re-raising one instance would grow its traceback.
            raise HostKeyChanged(blocked.instance_id, blocked.expected_fp, blocked.got_fp)

    # -- connecting -------------------------------------------------------------------------

    def _alive(self) -> asyncssh.SSHClientConnection | None:
        conn = self._conn
        if conn is not None and not conn.is_closed():
            return conn
        return None

    async def connect(self) -> None:
        """Connect now (normally done lazily by the first call)."""
        await self._ensure()

    async def _ensure(self) -> asyncssh.SSHClientConnection:
        self._check_usable()
        conn = self._alive()
        if conn is not None:
            return conn
        async with self._lock:
            self._check_usable()
            conn = self._alive()
            if conn is not None:
                return conn
            return await self._connect_with_retry()

    async def _connect_with_retry(self) -> asyncssh.SSHClientConnection:
        last = "no attempt made"
        for attempt in range(1, self.max_attempts + 1):
            if attempt > 1:
                await self._sleep(self.backoff_delay(attempt - 1))
                self._check_usable()
            self._set_state(ConnState.CONNECTING, f"attempt {attempt}/{self.max_attempts}")
            try:
                conn = await self._connect_once()
            except HostKeyChanged as e:
                self._blocked = e
                log.error("%s", e)
                self._set_state(ConnState.BLOCKED, str(e))
                raise
            except SshError as e:  # auth failure, pinning failure: never retried
                log.warning("%s", e)
                self._set_state(ConnState.DISCONNECTED, str(e))
                raise
            except _Transient as e:
                last = str(e)
                log.info(
                    "instance %s: ssh %s:%s attempt %d/%d failed: %s",
                    self.instance_id,
                    self.host,
                    self.port,
                    attempt,
                    self.max_attempts,
                    last,
                )
                continue
            except BaseException:
                self._set_state(ConnState.DISCONNECTED, "connect interrupted")
                raise
            self._conn = conn
            self._set_state(ConnState.CONNECTED, f"{self.host}:{self.port}")
            return conn
        err = SshUnreachable(
            self.instance_id,
            f"cannot reach {self.host}:{self.port} after {self.max_attempts} attempts: {last}",
            attempts=self.max_attempts,
        )
        self._set_state(ConnState.DISCONNECTED, str(err))
        raise err

    def _load_client_key(self) -> asyncssh.SSHKey:
        if self._client_key is None:
            try:
                src = self._client_key_src
                self._client_key = (
                    src if isinstance(src, asyncssh.SSHKey) else asyncssh.read_private_key(src)
                )
            except (OSError, asyncssh.KeyImportError, ValueError) as e:
                # Only the path and the error class: never the key text.
                raise SshAuthFailed(
                    self.instance_id,
                    f"cannot load client key {self._client_key_src}: {type(e).__name__}",
                ) from None
        return self._client_key

    async def _connect_once(self) -> asyncssh.SSHClientConnection:
        pinned = await self._pins.get(self.instance_id)
        pinned_key = self._pinned_ssh_key(pinned)
        client_key = self._load_client_key()
        client = _Client(self, pinned_key)
        trusted = [pinned_key] if pinned_key is not None else []
        self.connect_attempts += 1
        try:
            conn = await asyncssh.connect(
                self.host,
                self.port,
                client_factory=lambda: client,
                username=self.username,
                client_keys=[client_key],
                known_hosts=lambda _h, _a, _p: (trusted, [], []),
                x509_trusted_certs=None,
                config=None,
                agent_path=None,
                password=None,
                kbdint_auth=False,
                gss_auth=False,
                gss_kex=False,
                host_based_auth=False,
                preferred_auth="publickey",
                connect_timeout=self.connect_timeout,
                login_timeout=self.connect_timeout,
                keepalive_interval=self.keepalive_interval,
                keepalive_count_max=self.keepalive_count_max,
            )
        except asyncssh.HostKeyNotVerifiable as e:
            if pinned is None:
                raise _Transient(f"host key rejected: {safe_text(e)}") from None
            got = client.offered.get_fingerprint() if client.offered else "an unknown key"
            raise HostKeyChanged(self.instance_id, pinned.fingerprint, got) from None
        except asyncssh.KeyExchangeFailed as e:
            if pinned is not None and "host key" in str(e).lower():
                # The worker no longer offers a key of the pinned type at all.
                raise HostKeyChanged(
                    self.instance_id, pinned.fingerprint, "no key of the pinned type"
                ) from None
            raise _Transient(f"key exchange failed: {safe_text(e)}") from None
        except asyncssh.PermissionDenied as e:
            raise SshAuthFailed(
                self.instance_id,
                f"{self.username}@{self.host}:{self.port} refused our key: {safe_text(e)}",
            ) from None
        except asyncssh.Error as e:
            raise _Transient(f"{type(e).__name__}: {safe_text(e)}") from None
        except TimeoutError:
            raise _Transient(f"timed out after {self.connect_timeout:g}s") from None
        except OSError as e:
            raise _Transient(safe_text(e.strerror or e)) from None

        try:
            if pinned is None:
                await self._pin(conn)
            await self._start_forwards(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def _pinned_ssh_key(self, pinned: HostKeyRecord | None) -> asyncssh.SSHKey | None:
        if pinned is None:
            return None
        try:
            return ssh_key(pinned)
        except (asyncssh.KeyImportError, ValueError):
            raise SshError(
                self.instance_id, f"pinned host key {pinned.fingerprint} is unreadable"
            ) from None

    async def _pin(self, conn: asyncssh.SSHClientConnection) -> None:
        key = conn.get_server_host_key()
        if key is None:  # pragma: no cover - asyncssh always has one after kex
            raise SshError(self.instance_id, "server presented no host key")
        text = key.export_public_key("openssh").decode("ascii")
        try:
            await self._pins.pin(self.instance_id, self.host, self.port, text)
        except Exception as e:
            # Unpinned trust is not trust: refuse to use the connection.
            raise SshError(self.instance_id, f"cannot pin host key: {safe_text(e)}") from None
        log.info(
            "instance %s: pinned ssh host key %s (%s:%s)",
            self.instance_id,
            key.get_fingerprint(),
            self.host,
            self.port,
        )

    async def _start_forwards(self, conn: asyncssh.SSHClientConnection) -> None:
        self._listeners = {}
        self.forward_errors = {}
        for fw in self.forwards:
            try:
                listener = await conn.forward_remote_port(
                    fw.remote_host, fw.remote_port, fw.local_host, fw.local_port
                )
            except (asyncssh.Error, asyncssh.ChannelListenError, OSError) as e:
                msg = safe_text(e) or type(e).__name__
                self.forward_errors[fw] = msg
                log.warning(
                    "instance %s: remote forward %s:%s -> %s:%s failed: %s",
                    self.instance_id,
                    fw.remote_host,
                    fw.remote_port,
                    fw.local_host,
                    fw.local_port,
                    msg,
                )
                continue
            self._listeners[fw] = listener
            log.debug(
                "instance %s: remote forward %s:%s -> %s:%s up",
                self.instance_id,
                fw.remote_host,
                listener.get_port(),
                fw.local_host,
                fw.local_port,
            )

    def connection_gone(self, conn: asyncssh.SSHClientConnection, exc: Exception | None) -> None:
        if self._conn is not conn:
            return
        self._conn = None
        self._listeners = {}
        if self._closed:
            return
        detail = f"connection lost: {safe_text(exc)}" if exc else "connection closed"
        log.info("instance %s: ssh %s", self.instance_id, detail)
        if self._state == ConnState.CONNECTED:
            self._set_state(ConnState.DISCONNECTED, detail)

    async def close(self) -> None:
        """Close for good; later calls raise :class:`SshClosed`."""
        self._closed = True
        self.reads.drop()
        conn, self._conn = self._conn, None
        self._listeners = {}
        if conn is not None:
            conn.close()
            # A close waits for the socket's buffer to drain: a peer that reads nothing (a host
            # gone silent, a server whose window is full) would hold an engine's stop forever.
            # After the grace the connection is aborted: its socket goes at once.
            try:
                async with asyncio.timeout(_CLOSE_GRACE):
                    await conn.wait_closed()
            except TimeoutError:
                log.info("instance %s: ssh close not answered in %gs: aborted",
                         self.instance_id, _CLOSE_GRACE)  # fmt: skip
                conn.abort()
            except Exception:
                conn.abort()
        if self._state != ConnState.BLOCKED:
            self._set_state(ConnState.DISCONNECTED, "closed")

    # -- processes --------------------------------------------------------------------------

    def _lost_error(self, conn: asyncssh.SSHClientConnection, command: str) -> SshError:
        self.connection_gone(conn, None)
        if self._closed:
            return SshClosed(self.instance_id, f"connection closed while running: {command}")
        return SshConnectionLost(self.instance_id, f"connection lost while running: {command}")

    async def open_process(
        self, command: str, *, stdin_eof: bool = True
    ) -> tuple[asyncssh.SSHClientConnection, Any]:
        """Start ``command`` (bytes in and out); ``stdin_eof=False`` keeps its stdin open (a
        `workerctl session`). A connection found dead at this point is re-established once."""
        return await self._open(command, stdin_eof=stdin_eof)

    async def _open(
        self, command: str, *, stdin_eof: bool = True
    ) -> tuple[asyncssh.SSHClientConnection, Any]:
        """Start ``command``; a connection found dead at this point is re-established once."""
        for retry in (False, True):
            conn = await self._ensure()
            try:
                process = await conn.create_process(command, encoding=None)
            except asyncssh.ChannelOpenError as e:
                if not conn.is_closed():
                    raise SshError(
                        self.instance_id, f"worker refused a session: {safe_text(e)}"
                    ) from None
                err: Exception = e
            except (asyncssh.Error, OSError) as e:
                err = e
            else:
                if stdin_eof:
                    process.stdin.write_eof()
                return conn, process
            self.connection_gone(conn, None)
            if retry:
                raise SshConnectionLost(
                    self.instance_id, f"cannot start {command}: {safe_text(err)}"
                ) from None
        raise AssertionError("unreachable")  # pragma: no cover

    @staticmethod
    def _close_process(process: Any) -> None:
        with contextlib.suppress(Exception):
            if not process.channel.is_closing():
                process.send_signal("TERM")
        with contextlib.suppress(Exception):
            process.close()

    async def _finish(self, conn: asyncssh.SSHClientConnection, process: Any, command: str) -> Any:
        """After EOF on stdout: wait for the channel to close; raise if the connection died."""
        try:
            async with asyncio.timeout(_CLOSE_GRACE):
                await process.wait_closed()
        except TimeoutError:
            raise WorkerProtocolError(
                self.instance_id, f"channel did not close after output ended: {command}"
            ) from None
        if process.exit_status is None and process.exit_signal is None and conn.is_closed():
            raise self._lost_error(conn, command)
        return process

    async def run(self, command: str, *, timeout: float) -> CommandResult:
        """Run ``command`` to completion; output as sanitised lines.

        Connects first if needed (bounded retries). A command is never re-run: if the
        connection drops while it runs, :class:`SshConnectionLost` is raised. On ``timeout``
        the channel is closed and :class:`SshTimeout` raised.
        """
        exit_status, out, err = await self._exec(command, timeout)
        return CommandResult(exit_status, split_output(out), split_output(err))

    async def _exec(self, command: str, timeout: float) -> tuple[int | None, bytes, bytes]:
        # Connecting has its own bounds (connect_timeout, max_attempts); ``timeout`` is the
        # command's.
        await self._ensure()
        conn, process = None, None
        try:
            async with asyncio.timeout(timeout):
                conn, process = await self._open(command)
                try:
                    out, err = await asyncio.gather(
                        _read_capped(process.stdout, MAX_OUTPUT_BYTES),
                        _read_capped(process.stderr, MAX_OUTPUT_BYTES),
                    )
                except (asyncssh.Error, OSError):
                    raise self._lost_error(conn, command) from None
                await self._finish(conn, process, command)
        except TimeoutError:
            raise SshTimeout(self.instance_id, command, timeout) from None
        finally:
            if process is not None:
                self._close_process(process)
        if process.exit_status is None and process.exit_signal is not None:
            signal = safe_text(process.exit_signal[0], 40)
            raise WorkerCommandFailed(
                self.instance_id, command, None, split_output(err)[-_STDERR_TAIL:], signal
            )
        return process.exit_status, out, err

    async def run_json(self, command: str, *, timeout: float) -> Any:
        """Run ``command`` and parse its stdout as one JSON document (strings sanitised)."""
        exit_status, out, err = await self._exec(command, timeout)
        if exit_status != 0:
            raise WorkerCommandFailed(
                self.instance_id, command, exit_status, split_output(err)[-_STDERR_TAIL:]
            )
        return self.parse_json(out.decode("utf-8", errors="replace"), command)

    def parse_json(self, text: str, what: str) -> Any:
        try:
            return sanitize_json(json.loads(text, parse_constant=refuse_json_constant))
        except (ValueError, RecursionError) as e:
            snippet = sanitize_line(text.strip(), 80) or "(empty)"
            reason = e.msg if isinstance(e, json.JSONDecodeError) else type(e).__name__
            raise WorkerProtocolError(
                self.instance_id, f"bad JSON from {what}: {reason}: {snippet!r}"
            ) from None

    async def iter_text_lines(
        self, command: str, *, max_line_bytes: int = TEXT_LINE_BYTES
    ) -> AsyncGenerator[tuple[str, bool], None]:
        """Stream ``command``'s stdout as ``(text, cut)`` lines: decoded, **not sanitised**.

        For parsers (JSON) only; display text goes through :meth:`follow`. ``cut`` marks a line
        longer than ``max_line_bytes`` (its tail was dropped). Ends when the command exits 0;
        raises :class:`WorkerCommandFailed` on another status, :class:`SshConnectionLost` if the
        connection drops (an unterminated last line is then dropped, never half-delivered).
        Closing the iterator closes the channel.
        """
        splitter = LineSplitter(max_line_bytes)
        async with contextlib.aclosing(self._stdout_chunks(command)) as chunks:
            async for chunk in chunks:
                for item in splitter.feed(chunk):
                    yield item
        last = splitter.flush()
        if last is not None:
            yield last

    async def follow_batches(
        self, command: str, *, keep: int | None = None
    ) -> AsyncGenerator[LogBatch, None]:
        """Stream ``command``'s stdout as lists of sanitised lines: what each read brought.

        The lines of :meth:`follow`, with the same ending and errors; a log firehose then costs
        a decode and two regex passes per read, not per line. Use ``contextlib.aclosing``:
        leaving the loop closes the channel at once (and ``tail -F`` on the worker dies).

        ``keep``: the stream is read ahead in a task of its own, and each batch holds what came
        since the last one, but at most its newest ``keep`` lines: a consumer slower than the
        stream skips the older ones (counted in ``batch.skipped``, never decoded) instead of
        falling ever further behind, and memory stays bounded.
        """
        chunks = self._stdout_chunks(command)
        batches = display_batches(chunks) if keep is None else display_batches_ahead(chunks, keep)
        async with contextlib.aclosing(batches) as lines:
            async for batch in lines:
                yield batch

    async def follow(self, command: str) -> AsyncGenerator[str, None]:
        """Stream ``command``'s stdout as sanitised lines, as they arrive.

        Use ``async with contextlib.aclosing(conn.follow(cmd)) as lines`` so that leaving the
        loop closes the channel at once (and ``tail -F`` on the worker dies).
        """
        async with contextlib.aclosing(self.follow_batches(command)) as batches:
            async for batch in batches:
                for line in batch:
                    yield line

    async def _stdout_chunks(self, command: str) -> AsyncGenerator[bytes, None]:
        """``command``'s stdout as it is read. Ends when the command exits 0; raises
        :class:`WorkerCommandFailed` on another status, :class:`SshConnectionLost` if the
        connection drops. Closing the iterator closes the channel."""
        conn, process = await self._open(command)
        stderr_tail: deque[str] = deque(maxlen=_STDERR_TAIL)
        drain = asyncio.create_task(self._drain_stderr(process, stderr_tail))
        try:
            while True:
                try:
                    chunk = await process.stdout.read(_READ_CHUNK)
                except (asyncssh.Error, OSError):
                    raise self._lost_error(conn, command) from None
                if not chunk:
                    break
                yield chunk
            await self._finish(conn, process, command)
            with contextlib.suppress(Exception):  # a timeout; never a cancellation
                async with asyncio.timeout(_CLOSE_GRACE):
                    await drain
            if process.exit_status != 0:
                signal = safe_text(process.exit_signal[0], 40) if process.exit_signal else None
                raise WorkerCommandFailed(
                    self.instance_id, command, process.exit_status, list(stderr_tail), signal
                )
        finally:
            drain.cancel()
            self._close_process(process)

    @staticmethod
    async def _drain_stderr(process: Any, tail: deque[str]) -> None:
        splitter = LineSplitter(DISPLAY_LINE_BYTES)
        with contextlib.suppress(asyncssh.Error, OSError):
            while chunk := await process.stderr.read(_READ_CHUNK):
                tail.extend(display_line(t, c) for t, c in splitter.feed(chunk))
            last = splitter.flush()
            if last is not None:
                tail.append(display_line(*last))
