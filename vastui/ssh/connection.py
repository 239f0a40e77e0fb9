"""One persistent SSH connection per worker instance (asyncssh).

* **Host keys are trusted on first use and pinned per instance** (:mod:`vastui.ssh.pins`). A
  different key later raises :class:`HostKeyChanged` and the connection becomes ``blocked``:
  every further call raises the same error at once, without touching the network, until the
  operator has verified the re-key, forgotten the pin and called :meth:`WorkerConnection.unblock`.
* **Reconnects** use jittered exponential backoff, a bounded number of attempts per call, and
  never happen after a host-key change or an authentication failure.
* **Nothing the worker sends leaves this module raw**: output is decoded as UTF-8 with
  replacement, split on ``\\n`` and passed through :func:`vastui.sanitize.sanitize_line`; error
  messages quoting remote text are sanitised too.
* Nothing from the user's ``~/.ssh`` is consulted: no config file, no agent, no known_hosts.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import re
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import asyncssh

from vastui.sanitize import MAX_LINE, sanitize_line

from .pins import HostKeyPins, PinnedKey

log = logging.getLogger("vastui.ssh")

_READ_CHUNK = 65536
# A display line longer than this many bytes is cut (sanitize_line bounds it to MAX_LINE chars).
_DISPLAY_LINE_BYTES = 4 * MAX_LINE + 4
# Lines meant for parsing (JSON) may be longer, but not unboundedly so.
TEXT_LINE_BYTES = 1 << 20
# Cap on what `run` keeps of one stream; the rest is drained and dropped.
MAX_OUTPUT_BYTES = 8 << 20
# How long to wait for a channel to close after its output ended.
_CLOSE_GRACE = 10.0
_STDERR_TAIL = 10


def refuse_json_constant(name: str) -> Any:
    """NaN and Infinity are not JSON (Python's json takes them): a worker's line with one is
    not an answer, as no number a worker reports may be infinite."""
    raise ValueError(f"{name} is not a JSON value")


class ConnState(StrEnum):
    DISCONNECTED = "disconnected"
    CONNECTING = "connecting"
    CONNECTED = "connected"
    BLOCKED = "blocked"


# ---------------------------------------------------------------------------------------------
# errors (messages are one line and safe to show)


def _safe(text: object, max_len: int = 300) -> str:
    return sanitize_line(str(text), max_len)


class SshError(Exception):
    """Base of every error raised by :mod:`vastui.ssh`."""

    def __init__(self, instance_id: int, message: str) -> None:
        super().__init__(f"instance {instance_id}: {_safe(message, 600)}")
        self.instance_id = instance_id


class HostKeyChanged(SshError):
    """The worker presented a host key other than the pinned one. Never retried."""

    def __init__(self, instance_id: int, expected_fp: str, got_fp: str) -> None:
        super().__init__(
            instance_id,
            f"SSH host key changed: pinned {expected_fp}, got {got_fp}; connection blocked "
            "until the operator verifies the new key and forgets the pin",
        )
        self.expected_fp = expected_fp
        self.got_fp = got_fp


class SshAuthFailed(SshError):
    """The worker refused our client key (or the key could not be loaded). Never retried."""


class SshUnreachable(SshError):
    """No connection could be established within the allowed attempts."""

    def __init__(self, instance_id: int, message: str, attempts: int = 0) -> None:
        super().__init__(instance_id, message)
        self.attempts = attempts


class SshConnectionLost(SshUnreachable):
    """An established connection dropped while a command was running."""


class SshTimeout(SshError):
    """A command did not finish in time; its channel was closed."""

    def __init__(self, instance_id: int, command: str, timeout: float) -> None:
        super().__init__(instance_id, f"command timed out after {timeout:g}s: {command}")
        self.command = command
        self.timeout = timeout


class SshClosed(SshError):
    """The :class:`WorkerConnection` was closed by its owner."""


class WorkerProtocolError(SshError):
    """The worker answered something that is not what the protocol says (e.g. bad JSON)."""


class WorkerCommandFailed(SshError):
    """A worker command exited non-zero (or was killed by a signal)."""

    def __init__(
        self,
        instance_id: int,
        command: str,
        exit_status: int | None,
        stderr_tail: Sequence[str] = (),
        signal: str | None = None,
    ) -> None:
        how = f"signal {signal}" if signal else f"status {exit_status}"
        last = stderr_tail[-1] if stderr_tail else ""
        super().__init__(
            instance_id, f"command failed ({how}): {command}" + (f": {last}" if last else "")
        )
        self.command = command
        self.exit_status = exit_status
        self.signal = signal
        self.stderr_tail = list(stderr_tail)


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


# ---------------------------------------------------------------------------------------------
# line handling


class _LineSplitter:
    """Split a byte stream on ``\\n`` with a per-line byte cap; decode with replacement."""

    def __init__(self, max_bytes: int) -> None:
        self._max = max_bytes
        self._buf = bytearray()
        self._cut = False

    def feed(self, data: bytes) -> list[tuple[str, bool]]:
        out: list[tuple[str, bool]] = []
        start = 0
        while True:
            nl = data.find(b"\n", start)
            if nl < 0:
                self._append(data[start:])
                return out
            self._append(data[start:nl])
            out.append(self._take())
            start = nl + 1

    def flush(self) -> tuple[str, bool] | None:
        """The unterminated last line, if any."""
        if not self._buf and not self._cut:
            return None
        return self._take()

    def _append(self, piece: bytes) -> None:
        if self._cut or not piece:
            return
        room = self._max - len(self._buf)
        if len(piece) > room:
            self._buf += piece[:room]
            self._cut = True
        else:
            self._buf += piece

    def _take(self) -> tuple[str, bool]:
        raw = bytes(self._buf)
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        text, cut = raw.decode("utf-8", errors="replace"), self._cut
        self._buf.clear()
        self._cut = False
        return text, cut


# sanitize_line's two patterns (vastui/sanitize.py), unable to match across a newline: one pass
# over many lines joined by "\n" then cleans each line exactly as sanitize_line does on its own
# (an unterminated OSC or DCS ends at its line's end either way). tests/test_ssh_display.py
# holds the two equal.
_ESCAPES_IN_LINE = re.compile(
    r"""
      (?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?
    | (?:\x1b\]|\x9d)[^\x07\x1b\x9c\n]*(?:\x07|\x1b\\|\x9c)?
    | \x1b[PX^_][^\x1b\x9c\n]*(?:\x1b\\|\x9c)?
    | \x1b[^\n]?
    """,
    re.VERBOSE,
)
# Colour codes (ESC [ ... m) fill worker logs (cuzk's tracing lines carry eight a line). When
# every ESC of a text starts one (and no C1 CSI or OSC is there to swallow one or start inside
# one), they go in a pass of the CSI branch alone, four times cheaper: the result is the same.
_CSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]?")
_CONTROLS_IN_LINE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e"
    "\u2066-\u2069\ud800-\udfff]"
)

# _CONTROLS_IN_LINE's ASCII members, each to a space (str.translate has an ASCII fast path).
_ASCII_CONTROLS = {c: " " for c in (*range(0x00, 0x09), *range(0x0B, 0x20), 0x7F)}


def display_lines(block: bytes) -> list[str]:
    """Display lines of ``block``: whole lines, each ended by ``\\n``, none longer than the
    display cap. One decode and two passes (regex, or translate) for the block, not per line: what
    ``[display_line(line) for line in lines]`` gives, at a fraction of the cost."""
    if b"\r" in block:  # a scan, where replace() would copy every block
        block = block.replace(b"\r\n", b"\n")
    text = _strip_escapes(block.decode("utf-8", errors="replace"))
    # The usual log is ASCII: a translate, several times cheaper than the regex.
    text = text.translate(_ASCII_CONTROLS) if text.isascii() else _CONTROLS_IN_LINE.sub(" ", text)
    lines = text.split("\n")
    lines.pop()  # after the block's last "\n"
    if lines and max(map(len, lines)) > MAX_LINE:
        lines = [line if len(line) <= MAX_LINE else sanitize_line(line) for line in lines]
    return lines


def _strip_escapes(text: str) -> str:
    """``_ESCAPES_IN_LINE.sub("", text)``, faster on colour-coded logs."""
    if text.count("\x1b") == text.count("\x1b[") and "\x9b" not in text and "\x9d" not in text:
        return _CSI.sub("", text)
    return _ESCAPES_IN_LINE.sub("", text)


class LogBatch(list[str]):
    """Display lines of a log, and how many older lines were skipped just before them (read off
    the channel but never decoded: the reader keeps only the newest, see ``follow_batches``).
    ``ahead``: the stream is read ahead meanwhile, so its consumer may take its time."""

    __slots__ = ("ahead", "skipped")

    def __init__(self, lines: Sequence[str] = (), skipped: int = 0, ahead: bool = False) -> None:
        super().__init__(lines)
        self.skipped = skipped
        self.ahead = ahead


class _ReadAhead:
    """A stream's chunks read in a task of its own into a buffer that keeps the newest ``keep``
    whole lines: the consumer takes what is there when it is ready; one slower than the stream
    skips the oldest lines (counted) rather than falling behind. The buffer holds whole lines
    only, in chunks, so skipping costs per chunk, not per line; the line in progress waits
    here (its first ``max_line_bytes`` + 1: enough for the consumer to cut it as too long)."""

    def __init__(self, source: AsyncIterator[bytes], keep: int, max_line_bytes: int) -> None:
        if keep < 1:
            raise ValueError("keep must be >= 1")
        self._source = source
        self._keep = keep
        self._cap = max_line_bytes + 1
        self._chunks: deque[bytes] = deque()  # each ends with a newline
        self._counts: deque[int] = deque()  # newlines in each chunk
        self._lines = 0
        self._tail = b""  # the line in progress
        self._tail_cut = False  # ... over the cap: its bytes are dropped up to its newline
        self._skipped = 0
        self._done = False
        self._error: BaseException | None = None
        self._ready = asyncio.Event()
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        try:
            async with contextlib.aclosing(self._source) as source:
                async for chunk in source:
                    self._add(chunk)
        except Exception as exc:  # handed to the consumer after what was read before it
            self._error = exc
        finally:
            self._done = True
            self._ready.set()

    def _add(self, chunk: bytes) -> None:
        end = chunk.rfind(b"\n")
        if end < 0:
            self._grow_tail(chunk)
            return
        if self._tail_cut:  # the over-long line's bytes up to its newline are not kept
            chunk = chunk[chunk.find(b"\n") :]
            end = chunk.rfind(b"\n")
            self._tail_cut = False
        whole = self._tail + chunk[: end + 1]
        self._tail = b""
        self._grow_tail(chunk[end + 1 :])
        count = whole.count(b"\n")
        self._chunks.append(whole)
        self._counts.append(count)
        self._lines += count
        if self._lines > 2 * self._keep:  # trimmed in bulk, not at every read
            self._trim()
        self._ready.set()

    def _grow_tail(self, piece: bytes) -> None:
        if self._tail_cut or not piece:
            return
        room = self._cap - len(self._tail)
        if len(piece) > room:
            piece = piece[:room]
            self._tail_cut = True
        self._tail += piece

    def _trim(self) -> None:
        """Drop the oldest whole lines, down to ``keep``."""
        chunks, counts = self._chunks, self._counts
        while len(chunks) > 1 and self._lines - counts[0] >= self._keep:
            chunks.popleft()
            self._lines -= counts[0]
            self._skipped += counts.popleft()
        need = self._lines - self._keep
        if need > 0:
            first, end = chunks[0], -1
            for _ in range(need):
                end = first.find(b"\n", end + 1)
            chunks[0] = first[end + 1 :]
            counts[0] -= need
            self._lines -= need
            self._skipped += need

    async def take(self) -> tuple[bytes, int, bool]:
        """Whole lines that came since the last take (the newest ``keep`` at most), the lines
        skipped before them, and whether the stream ended (then the unterminated last line
        too). The stream's error, if any, is raised once everything before it was taken."""
        while not self._chunks and not self._done:
            self._ready.clear()
            await self._ready.wait()
        if self._lines > self._keep:
            self._trim()
        data = b"".join(self._chunks)
        self._chunks.clear()
        self._counts.clear()
        self._lines = 0
        skipped, self._skipped = self._skipped, 0
        if not self._done:
            return data, skipped, False
        if self._error is None:  # the end: the unterminated last line too (to be flushed)
            data, self._tail = data + self._tail, b""
            return data, skipped, True
        if data:
            return data, skipped, False  # the error comes with the next take
        raise self._error

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._task


async def display_batches(chunks: AsyncIterator[bytes]) -> AsyncIterator[LogBatch]:
    """Display lines of a byte stream, a batch per chunk that ends a line or more."""
    splitter = _DisplaySplitter(_DISPLAY_LINE_BYTES)
    async with contextlib.aclosing(chunks) as source:
        async for chunk in source:
            lines = splitter.feed(chunk)
            if lines:
                yield LogBatch(lines)
    last = splitter.flush()
    if last is not None:
        yield LogBatch([last])


async def display_batches_ahead(chunks: AsyncIterator[bytes], keep: int) -> AsyncIterator[LogBatch]:
    """Display lines of a byte stream read ahead (:class:`_ReadAhead`): each batch what came
    since the last, its newest ``keep`` lines at most (``skipped`` counts the others)."""
    reader = _ReadAhead(chunks, keep, _DISPLAY_LINE_BYTES)
    splitter = _DisplaySplitter(_DISPLAY_LINE_BYTES)
    try:
        while True:
            data, skipped, done = await reader.take()
            batch = LogBatch(splitter.feed(data), skipped, ahead=True)
            if done:
                last = splitter.flush()
                if last is not None:
                    batch.append(last)
            if batch or batch.skipped:
                yield batch
            if done:
                return
    finally:
        await reader.close()


class _DisplaySplitter:
    """Bytes → display-safe lines, a chunk at a time (:meth:`WorkerConnection.follow`).

    The same lines as :class:`_LineSplitter` + :func:`display_line`, line for line (a line
    over ``max_bytes`` keeps its first ``max_bytes`` and ends in "…"), but whole runs of
    lines are decoded and sanitised at once: a log firehose costs per chunk, not per line.
    """

    def __init__(self, max_bytes: int) -> None:
        self._max = max_bytes
        self._rest = b""  # the unterminated line so far (at most max_bytes of it)
        self._cut = False  # that line is over the cap: its tail is being dropped

    def feed(self, data: bytes) -> list[str]:
        out: list[str] = []
        if self._cut:  # the rest of an over-long line, up to its end
            end = data.find(b"\n")
            if end < 0:
                return out
            out.append(self._take())
            data = data[end + 1 :]
        last = data.rfind(b"\n")
        if last < 0:
            self._keep(data)
            return out
        block = self._rest + data[: last + 1]
        self._rest = b""
        self._keep(data[last + 1 :])
        if len(block) > self._max + 1 and max(map(len, block.split(b"\n"))) > self._max:
            out.extend(self._slow(block))
        else:
            out.extend(display_lines(block))
        return out

    def flush(self) -> str | None:
        """The unterminated last line, if any."""
        if not self._rest and not self._cut:
            return None
        return self._take()

    def _keep(self, piece: bytes) -> None:
        room = self._max - len(self._rest)
        if len(piece) > room:
            self._rest += piece[:room]
            self._cut = True
        else:
            self._rest += piece

    def _take(self) -> str:
        raw, cut = self._rest, self._cut
        self._rest, self._cut = b"", False
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        return display_line(raw.decode("utf-8", errors="replace"), cut)

    def _slow(self, block: bytes) -> list[str]:
        """A block holding an over-long line: line by line, as :class:`_LineSplitter`."""
        splitter = _LineSplitter(self._max)
        return [display_line(text, cut) for text, cut in splitter.feed(block)]


def display_line(text: str, cut: bool = False) -> str:
    """A sanitised display line; ``cut`` marks a line truncated upstream."""
    line = sanitize_line(text)
    if cut and not line.endswith("…"):
        line = line[: MAX_LINE - 1] + "…"
    return line


def sanitize_json(value: Any) -> Any:
    """Sanitise every string (keys and values) in a parsed JSON document."""
    if isinstance(value, str):
        return sanitize_line(value)
    if isinstance(value, dict):
        return {sanitize_line(str(k)): sanitize_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [sanitize_json(v) for v in value]
    return value


def _split_output(data: bytes) -> list[str]:
    splitter = _LineSplitter(_DISPLAY_LINE_BYTES)
    pieces = splitter.feed(data)
    last = splitter.flush()
    if last is not None:
        pieces.append(last)
    return [display_line(text, cut) for text, cut in pieces]


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
            self._owner._connection_lost(self.conn, exc)


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
                self._client_key = asyncssh.read_private_key(self._client_key_src)
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
                raise _Transient(f"host key rejected: {_safe(e)}") from None
            got = client.offered.get_fingerprint() if client.offered else "an unknown key"
            raise HostKeyChanged(self.instance_id, pinned.fingerprint, got) from None
        except asyncssh.KeyExchangeFailed as e:
            if pinned is not None and "host key" in str(e).lower():
                # The worker no longer offers a key of the pinned type at all.
                raise HostKeyChanged(
                    self.instance_id, pinned.fingerprint, "no key of the pinned type"
                ) from None
            raise _Transient(f"key exchange failed: {_safe(e)}") from None
        except asyncssh.PermissionDenied as e:
            raise SshAuthFailed(
                self.instance_id,
                f"{self.username}@{self.host}:{self.port} refused our key: {_safe(e)}",
            ) from None
        except asyncssh.Error as e:
            raise _Transient(f"{type(e).__name__}: {_safe(e)}") from None
        except TimeoutError:
            raise _Transient(f"timed out after {self.connect_timeout:g}s") from None
        except OSError as e:
            raise _Transient(_safe(e.strerror or e)) from None

        try:
            if pinned is None:
                await self._pin(conn)
            await self._start_forwards(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def _pinned_ssh_key(self, pinned: PinnedKey | None) -> asyncssh.SSHKey | None:
        if pinned is None:
            return None
        try:
            return pinned.ssh_key()
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
            raise SshError(self.instance_id, f"cannot pin host key: {_safe(e)}") from None
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
                msg = _safe(e) or type(e).__name__
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

    def _connection_lost(self, conn: asyncssh.SSHClientConnection, exc: Exception | None) -> None:
        if self._conn is not conn:
            return
        self._conn = None
        self._listeners = {}
        if self._closed:
            return
        detail = f"connection lost: {_safe(exc)}" if exc else "connection closed"
        log.info("instance %s: ssh %s", self.instance_id, detail)
        if self._state == ConnState.CONNECTED:
            self._set_state(ConnState.DISCONNECTED, detail)

    async def close(self) -> None:
        """Close for good; later calls raise :class:`SshClosed`."""
        self._closed = True
        conn, self._conn = self._conn, None
        self._listeners = {}
        if conn is not None:
            conn.close()
            with contextlib.suppress(Exception):
                await conn.wait_closed()
        if self._state != ConnState.BLOCKED:
            self._set_state(ConnState.DISCONNECTED, "closed")

    # -- processes --------------------------------------------------------------------------

    def _lost_error(self, conn: asyncssh.SSHClientConnection, command: str) -> SshError:
        self._connection_lost(conn, None)
        if self._closed:
            return SshClosed(self.instance_id, f"connection closed while running: {command}")
        return SshConnectionLost(self.instance_id, f"connection lost while running: {command}")

    async def _open(self, command: str) -> tuple[asyncssh.SSHClientConnection, Any]:
        """Start ``command``; a connection found dead at this point is re-established once."""
        for retry in (False, True):
            conn = await self._ensure()
            try:
                process = await conn.create_process(command, encoding=None)
            except asyncssh.ChannelOpenError as e:
                if not conn.is_closed():
                    raise SshError(
                        self.instance_id, f"worker refused a session: {_safe(e)}"
                    ) from None
                err: Exception = e
            except (asyncssh.Error, OSError) as e:
                err = e
            else:
                process.stdin.write_eof()
                return conn, process
            self._connection_lost(conn, None)
            if retry:
                raise SshConnectionLost(
                    self.instance_id, f"cannot start {command}: {_safe(err)}"
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
            await asyncio.wait_for(process.wait_closed(), _CLOSE_GRACE)
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
        return CommandResult(exit_status, _split_output(out), _split_output(err))

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
            signal = _safe(process.exit_signal[0], 40)
            raise WorkerCommandFailed(
                self.instance_id, command, None, _split_output(err)[-_STDERR_TAIL:], signal
            )
        return process.exit_status, out, err

    async def run_json(self, command: str, *, timeout: float) -> Any:
        """Run ``command`` and parse its stdout as one JSON document (strings sanitised)."""
        exit_status, out, err = await self._exec(command, timeout)
        if exit_status != 0:
            raise WorkerCommandFailed(
                self.instance_id, command, exit_status, _split_output(err)[-_STDERR_TAIL:]
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
    ) -> AsyncIterator[tuple[str, bool]]:
        """Stream ``command``'s stdout as ``(text, cut)`` lines: decoded, **not sanitised**.

        For parsers (JSON) only; display text goes through :meth:`follow`. ``cut`` marks a line
        longer than ``max_line_bytes`` (its tail was dropped). Ends when the command exits 0;
        raises :class:`WorkerCommandFailed` on another status, :class:`SshConnectionLost` if the
        connection drops (an unterminated last line is then dropped, never half-delivered).
        Closing the iterator closes the channel.
        """
        splitter = _LineSplitter(max_line_bytes)
        async with contextlib.aclosing(self._stdout_chunks(command)) as chunks:
            async for chunk in chunks:
                for item in splitter.feed(chunk):
                    yield item
        last = splitter.flush()
        if last is not None:
            yield last

    async def follow_batches(
        self, command: str, *, keep: int | None = None
    ) -> AsyncIterator[LogBatch]:
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

    async def follow(self, command: str) -> AsyncIterator[str]:
        """Stream ``command``'s stdout as sanitised lines, as they arrive.

        Use ``async with contextlib.aclosing(conn.follow(cmd)) as lines`` so that leaving the
        loop closes the channel at once (and ``tail -F`` on the worker dies).
        """
        async with contextlib.aclosing(self.follow_batches(command)) as batches:
            async for batch in batches:
                for line in batch:
                    yield line

    async def _stdout_chunks(self, command: str) -> AsyncIterator[bytes]:
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
                await asyncio.wait_for(drain, _CLOSE_GRACE)
            if process.exit_status != 0:
                signal = _safe(process.exit_signal[0], 40) if process.exit_signal else None
                raise WorkerCommandFailed(
                    self.instance_id, command, process.exit_status, list(stderr_tail), signal
                )
        finally:
            drain.cancel()
            self._close_process(process)

    @staticmethod
    async def _drain_stderr(process: Any, tail: deque[str]) -> None:
        splitter = _LineSplitter(_DISPLAY_LINE_BYTES)
        with contextlib.suppress(asyncssh.Error, OSError):
            while chunk := await process.stderr.read(_READ_CHUNK):
                tail.extend(display_line(t, c) for t, c in splitter.feed(chunk))
            last = splitter.flush()
            if last is not None:
                tail.append(display_line(*last))
