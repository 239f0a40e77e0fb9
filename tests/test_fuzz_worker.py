"""Hostile worker output: event lines and log lines, as bytes off an SSH channel.

The event parser never raises, delivers each JSON object line once (across dropped
connections), and hands on only display-safe, shallow objects. A log line, however it is
chunked, comes out as one display-safe line that renders as literal text: no escape, no
control character, no markup interpreted.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import shlex
import unicodedata
from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console
from rich.text import Text
from textual.app import App, ComposeResult

from tests.fuzz_strategies import HOSTILE_PIECES, hostile_bytes, hostile_text
from vastui.console.cells import t
from vastui.console.logtext import clean as _clean
from vastui.console.logview import LogView
from vastui.domain.reports import WorkerEvent
from vastui.sanitize import MAX_LINE, sanitize_line
from vastui.ssh.errors import SshConnectionLost
from vastui.ssh.lines import TEXT_LINE_BYTES, LineSplitter, display_line
from vastui.ssh.worker import MAX_EVENT_DEPTH, Worker

BIDI = set("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
WIDER = settings(max_examples=4 * settings.default.max_examples)


def unsafe(text: str) -> list[str]:
    """What must never reach the terminal: controls but tab, bidi reorderings, line and paragraph
    separators, lone surrogates."""
    return [
        ch
        for ch in text
        if (unicodedata.category(ch) in ("Cc", "Cs") and ch != "\t")
        or ch in BIDI
        or ch in "\u2028\u2029"
    ]


def strings_of(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (k, *strings_of(v))]
    if isinstance(value, list):
        return [s for v in value for s in strings_of(v)]
    return []


def depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((depth(v) for v in value), default=0)
    return 0


# --- event lines ---------------------------------------------------------------------------

json_value = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**80), max_value=2**80),
        st.floats(allow_nan=False, allow_infinity=False),
        hostile_text,
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(hostile_text, inner, max_size=3)
    ),
    max_leaves=8,
)
event_object = st.dictionaries(
    st.one_of(st.sampled_from(["ts", "stage", "event", "reason", "error_tail"]), hostile_text),
    json_value,
    max_size=5,
)


def _encode(value: Any, ascii_only: bool) -> bytes:
    return json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")


event_line = st.one_of(
    st.builds(_encode, event_object, st.booleans()),
    st.builds(_encode, json_value, st.booleans()),
    hostile_bytes(),
    st.sampled_from(
        [
            b'{"ts": NaN, "stage": "setup", "event": "start"}',
            b'{"x": Infinity}',
            b'{"n": ' + b"9" * 5000 + b"}",  # beyond Python's int-from-string limit
            b'{"a":' * 40 + b"1" + b"}" * 40,  # deeper than an event may be
            b'{"a":' * 2000 + b"1" + b"}" * 2000,  # deeper than json.loads itself allows
            b"[" * 100_000,
            b'{"msg": "\\u001b]52;c;cHduZWQ=\\u0007 \\u009b2J [bold red]x[/]"}',
            b'{"event": "start"}\r',
            b"",
        ]
    ),
)
event_log = st.tuples(st.lists(event_line, max_size=8), st.booleans()).map(
    lambda parts: b"\n".join(line.replace(b"\n", b" ") for line in parts[0]) + b"\n" * parts[1]
)

# Small, so that over-long (cut) lines come up often; the real cap is 1 MiB.
LINE_CAP = 256


class EventLogConn:
    """`workerctl events --follow --after N` over a fixed log, through the real line splitter,
    in chunks, dropping the connection after the given numbers of chunks."""

    instance_id = 7
    max_attempts = 3

    def __init__(self, log: bytes, chunk: int, drops: list[int], cap: int = LINE_CAP) -> None:
        self.log, self.chunk, self.drops, self.cap = log, chunk, list(drops), cap
        self.commands: list[str] = []

    async def iter_text_lines(self, command: str) -> AsyncIterator[tuple[str, bool]]:
        self.commands.append(command)
        after = int(shlex.split(command)[-1])
        data = self.log
        for _ in range(after):  # the worker skips the first N lines
            data = data[data.index(b"\n") + 1 :]
        drop_after = self.drops.pop(0) if self.drops else None
        splitter = LineSplitter(self.cap)
        for n, start in enumerate(range(0, len(data), self.chunk)):
            if n == drop_after:
                raise SshConnectionLost(self.instance_id, "connection lost")
            for item in splitter.feed(data[start : start + self.chunk]):
                yield item
        last = splitter.flush()
        if last is not None:
            yield last

    async def backoff_sleep(self, retry: int) -> None:
        return None


async def _events(conn: EventLogConn, resumes: int) -> list[tuple[int, WorkerEvent]]:
    worker = Worker(conn, max_resumes=resumes)  # type: ignore[arg-type]
    async with contextlib.aclosing(worker.positioned_events()) as events:
        return [item async for item in events]


@WIDER
@given(
    log=event_log,
    chunk=st.integers(min_value=1, max_value=64),
    drops=st.lists(st.integers(min_value=0, max_value=6), max_size=3),
)
def test_events_are_safe_and_each_delivered_once(log: bytes, chunk: int, drops: list[int]) -> None:
    whole = asyncio.run(_events(EventLogConn(log, len(log) or 1, []), 0))
    chunked = asyncio.run(_events(EventLogConn(log, chunk, drops), len(drops) + 1))
    # Dropped connections resume with --after <lines seen>: nothing lost, nothing twice.
    assert chunked == whole
    positions = [position for position, _ in whole]
    assert positions == sorted(set(positions)) and len(positions) <= log.count(b"\n") + 1
    for _, event in whole:
        assert isinstance(event, WorkerEvent)
        fields = dataclasses.asdict(event)  # the typed event, its result and curio node within
        assert depth(fields) <= MAX_EVENT_DEPTH
        for text in strings_of(fields):
            assert not unsafe(text) and "\x1b" not in text, text
            assert len(text) <= MAX_LINE


def test_an_event_deeper_than_the_sanitiser_can_walk_is_skipped() -> None:
    """json.loads nests as deep as the stack allows, the sanitiser (a frame per level, two per
    object) about half as deep: a RecursionError escaped the event stream and ended the
    watcher. Where the window lies depends on the stack in use, so every depth is tried."""
    deep = [b'{"a":' * n + b"1" + b"}" * n for n in range(40, 1000, 20)]
    log = b"\n".join([*deep, b'{"event": "start"}']) + b"\n"
    events = asyncio.run(_events(EventLogConn(log, 4096, [], cap=TEXT_LINE_BYTES), 0))
    assert events == [(len(deep) + 1, WorkerEvent(event="start"))]


def test_nan_and_infinity_are_not_events() -> None:
    log = b'{"ts": NaN}\n{"rate": -Infinity}\n{"ts": 1.5, "event": "ok"}\n'
    assert asyncio.run(_events(EventLogConn(log, 4096, []), 0)) == [
        (3, WorkerEvent(event="ok", ts=1.5))
    ]


# --- log lines -----------------------------------------------------------------------------


def split(data: bytes, chunk: int) -> list[str]:
    """What `follow` shows for a byte stream: split with the byte cap, then sanitised."""
    splitter = LineSplitter(LINE_CAP)
    pieces = [p for i in range(0, len(data), chunk) for p in splitter.feed(data[i : i + chunk])]
    last = splitter.flush()
    return [display_line(text, cut) for text, cut in [*pieces, *([last] if last else [])]]


@given(data=hostile_bytes(), chunk=st.integers(min_value=1, max_value=32))
def test_log_lines_are_safe_however_they_are_chunked(data: bytes, chunk: int) -> None:
    lines = split(data, chunk)
    assert lines == split(data, len(data) or 1)  # a multi-byte character split across reads
    assert len(lines) == data.count(b"\n") + (not data.endswith(b"\n") and data != b"")
    for line in lines:
        assert not unsafe(line) and len(line) <= MAX_LINE, line


@given(text=st.one_of(hostile_text, st.text()), max_len=st.integers(min_value=0, max_value=600))
def test_sanitised_text_is_safe_bounded_and_stable(text: str, max_len: int) -> None:
    out = sanitize_line(text, max_len)
    assert not unsafe(out) and len(out) <= max_len
    assert sanitize_line(out, max_len) == out
    encoded = text.encode("utf-8", "surrogatepass")
    assert sanitize_line(encoded, max_len) == sanitize_line(
        encoded.decode("utf-8", "replace"), max_len
    )


# Printable text with markup in it: nothing may be lost or interpreted.
markup_text = st.lists(
    st.one_of(
        st.sampled_from([p for p in HOSTILE_PIECES if not unsafe(p) and p.isprintable()]),
        st.text(st.characters(categories=("L", "N", "P", "S", "Zs")), max_size=8),
    ),
    max_size=10,
).map("".join)


@given(text=markup_text)
def test_printable_text_and_markup_pass_unchanged_and_render_literally(text: str) -> None:
    line = sanitize_line(text)
    assert line == text[:MAX_LINE] or len(text) > MAX_LINE
    cell = t(line)
    assert cell.plain == sanitize_line(line, 500) and not cell.spans  # no markup became style
    shown = _clean(line)  # what LogView renders
    segments = list(Text(shown, no_wrap=True, end="").render(Console(width=1000)))
    assert "".join(s.text for s in segments) == shown
    assert all(s.control is None and not unsafe(s.text) for s in segments)


@given(data=hostile_bytes())
def test_any_log_line_renders_without_controls(data: bytes) -> None:
    for line in split(data, 7):
        shown = _clean(line)
        segments = list(Text(shown, no_wrap=True, end="").render(Console(width=1000)))
        assert "".join(s.text for s in segments) == shown
        assert all(s.control is None and not unsafe(s.text) for s in segments)


class _LogApp(App[None]):
    def compose(self) -> ComposeResult:
        yield LogView(id="log")


CORPUS = [
    b"\x1b]52;c;cHduZWQ=\x07clipboard",
    b"\x1b[2J\x1b[?1049hscreen",
    b"osc8 \x1b]8;;http://evil\x1b\\link\x1b]8;;\x1b\\",
    b"c1 \xc2\x9b31m csi \xc2\x9d0;t\xc2\x9c",
    b"[bold red]x[/] [@click=app.quit]q[/] [link=http://e]y[/link] [$accent]z",
    b"bad utf8 \xff\xfe \xed\xa0\x80 \xc3",
    b"bidi \xe2\x80\xae reversed \xe2\x81\xa6 isolate",
    b"tab\there\rcarriage",
    b"x" * (LINE_CAP + 50),
]


async def test_hostile_lines_render_literally_in_the_log_view() -> None:
    lines = split(b"\n".join(CORPUS), 5)
    app = _LogApp()
    async with app.run_test(size=(300, 20)) as pilot:
        view = app.query_one(LogView)
        view.append("cuzk", lines)
        await pilot.pause()
        rows = [view.viewport.render_line(y) for y in range(len(lines))]
    for row in rows:
        assert all(not unsafe(segment.text) for segment in row)
    texts = [row.text for row in rows]
    assert any("[bold red]x[/] [@click=app.quit]q[/]" in text for text in texts)
    assert any("clipboard" in text and "52;" not in text for text in texts)


@pytest.mark.parametrize("max_len", [0, 1])
def test_a_tiny_bound_is_still_a_bound(max_len: int) -> None:
    """sanitize_line(text, 0) used to return all but the last character, plus an ellipsis."""
    assert len(sanitize_line("abcdef", max_len)) <= max_len
