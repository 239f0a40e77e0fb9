"""What the workers send, made safe to show and to parse (pure: bytes in, lines out).

Output is decoded as UTF-8 with replacement, split on ``\\n`` and passed through
:func:`vastui.sanitize.sanitize_line`; terminal escapes and controls never survive; a line
longer than its cap is cut and marked; JSON from a worker never holds NaN or Infinity.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections import deque
from collections.abc import AsyncGenerator, Sequence
from typing import Any

from vastui.sanitize import MAX_LINE, sanitize_line

# A display line longer than this many bytes is cut (sanitize_line bounds it to MAX_LINE chars).
DISPLAY_LINE_BYTES = 4 * MAX_LINE + 4
# Lines meant for parsing (JSON) may be longer, but not unboundedly so.
TEXT_LINE_BYTES = 1 << 20


def refuse_json_constant(name: str) -> Any:
    """NaN and Infinity are not JSON (Python's json takes them): a worker's line with one is
    not an answer, as no number a worker reports may be infinite."""
    raise ValueError(f"{name} is not a JSON value")


class LineSplitter:
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

    def __init__(self, source: AsyncGenerator[bytes, None], keep: int, max_line_bytes: int) -> None:
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


async def display_batches(chunks: AsyncGenerator[bytes, None]) -> AsyncGenerator[LogBatch, None]:
    """Display lines of a byte stream, a batch per chunk that ends a line or more."""
    splitter = _DisplaySplitter(DISPLAY_LINE_BYTES)
    async with contextlib.aclosing(chunks) as source:
        async for chunk in source:
            lines = splitter.feed(chunk)
            if lines:
                yield LogBatch(lines)
    last = splitter.flush()
    if last is not None:
        yield LogBatch([last])


async def display_batches_ahead(
    chunks: AsyncGenerator[bytes, None], keep: int
) -> AsyncGenerator[LogBatch, None]:
    """Display lines of a byte stream read ahead (:class:`_ReadAhead`): each batch what came
    since the last, its newest ``keep`` lines at most (``skipped`` counts the others)."""
    reader = _ReadAhead(chunks, keep, DISPLAY_LINE_BYTES)
    splitter = _DisplaySplitter(DISPLAY_LINE_BYTES)
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

    The same lines as :class:`LineSplitter` + :func:`display_line`, line for line (a line
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
        """A block holding an over-long line: line by line, as :class:`LineSplitter`."""
        splitter = LineSplitter(self._max)
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


def split_output(data: bytes) -> list[str]:
    splitter = LineSplitter(DISPLAY_LINE_BYTES)
    pieces = splitter.feed(data)
    last = splitter.flush()
    if last is not None:
        pieces.append(last)
    return [display_line(text, cut) for text, cut in pieces]
