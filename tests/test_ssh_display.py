"""Log lines a chunk at a time (`_DisplaySplitter`, `display_lines`): the very lines the line-by-
line path gives (`LineSplitter` + `display_line`, i.e. `sanitize_line` per line), however the
bytes are chunked, whatever they hold: escapes that would run across a newline, CR LF, invalid
UTF-8 split across reads, lines over the byte cap and over MAX_LINE characters."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.fuzz_strategies import HOSTILE_PIECES, hostile_bytes
from vastui.sanitize import MAX_LINE, sanitize_line
from vastui.ssh.lines import (
    LineSplitter,
    LogBatch,
    _DisplaySplitter,
    display_batches,
    display_batches_ahead,
    display_line,
    display_lines,
)

CAP = 64  # small: over-long (cut) lines come up often


def per_line(data: bytes, cap: int) -> list[str]:
    splitter = LineSplitter(cap)
    pieces = splitter.feed(data)
    last = splitter.flush()
    return [display_line(text, cut) for text, cut in [*pieces, *([last] if last else [])]]


def chunked(data: bytes, cap: int, cuts: list[int]) -> list[str]:
    splitter = _DisplaySplitter(cap)
    out: list[str] = []
    start = 0
    for cut in [*sorted(c % (len(data) + 1) for c in cuts), len(data)]:
        out += splitter.feed(data[start:cut])
        start = max(start, cut)
    last = splitter.flush()
    return out + ([last] if last is not None else [])


# Hostile pieces glued with newlines and carriage returns where they hurt most.
lines_with_breaks = st.lists(
    st.one_of(
        hostile_bytes(),
        st.sampled_from([b"\n", b"\r\n", b"\r", b"\x1b\n", b"\x1b]0;x\n", b"\x1bP\n", b"\t"]),
        st.sampled_from([p.encode("utf-8", "surrogatepass") for p in HOSTILE_PIECES]),
    ),
    max_size=30,
).map(b"".join)


@settings(max_examples=400)
@given(data=lines_with_breaks, cuts=st.lists(st.integers(min_value=0), max_size=8))
def test_chunked_lines_equal_line_by_line(data: bytes, cuts: list[int]) -> None:
    assert chunked(data, CAP, cuts) == per_line(data, CAP)


@given(data=lines_with_breaks, cuts=st.lists(st.integers(min_value=0), max_size=4))
def test_chunked_lines_equal_line_by_line_at_the_real_cap(data: bytes, cuts: list[int]) -> None:
    cap = 4 * MAX_LINE + 4
    assert chunked(data, cap, cuts) == per_line(data, cap)


@given(lines=st.lists(st.text(max_size=30), max_size=10))
def test_display_lines_is_sanitize_line_per_line(lines: list[str]) -> None:
    lines = [line.replace("\n", " ") for line in lines]
    block = b"".join(line.encode("utf-8", "surrogatepass") + b"\n" for line in lines)
    expected = [sanitize_line(line.encode("utf-8", "surrogatepass")) for line in lines]
    assert display_lines(block) == expected


# ASCII with every control and escape introducer: the translate path of display_lines.
ascii_lines = st.lists(
    st.lists(
        st.one_of(
            st.text(alphabet=st.characters(max_codepoint=0x7F, exclude_characters="\n")),
            st.sampled_from(["\x1b[31m", "\x1b[0m", "\x1b]0;t\x07", "\x1bP", "\r", "\x7f"]),
        ),
        max_size=6,
    ).map("".join),
    max_size=10,
)


@given(lines=ascii_lines)
def test_display_lines_of_ascii_is_sanitize_line_per_line(lines: list[str]) -> None:
    block = b"".join(line.encode() + b"\n" for line in lines)
    assert display_lines(block) == per_line(block, 4 * MAX_LINE + 4)


def test_over_long_lines_are_cut_as_before() -> None:
    cap = 4 * MAX_LINE + 4
    long_chars = "é" * (MAX_LINE + 10)  # over MAX_LINE characters, under the byte cap
    data = b"a\n" + long_chars.encode() + b"\n" + b"x" * (cap + 50) + b"\r\nb\r\n"
    got = chunked(data, cap, [3, 70, 9000, 17000])
    assert got == per_line(data, cap)
    assert got[1] == long_chars[: MAX_LINE - 1] + "…"
    assert got[2] == "x" * (MAX_LINE - 1) + "…" and got[3] == "b"


def test_an_unterminated_last_line_is_flushed() -> None:
    splitter = _DisplaySplitter(CAP)
    assert splitter.feed(b"one\ntw") == ["one"]
    assert splitter.feed(b"o\x1b[31m") == []
    assert splitter.flush() == "two"
    assert splitter.flush() is None


# --- batches, and reading ahead -----------------------------------------------------------


async def _chunks(data: bytes, cuts: list[int], closed: list[bool] | None = None):  # type: ignore[no-untyped-def]
    start = 0
    try:
        for cut in [*sorted(c % (len(data) + 1) for c in cuts), len(data)]:
            if cut > start:
                yield data[start:cut]
                start = cut
    finally:
        if closed is not None:
            closed.append(True)


async def _collect(batches) -> list[LogBatch]:  # type: ignore[no-untyped-def]
    return [batch async for batch in batches]


REAL_CAP = 4 * MAX_LINE + 4


@settings(max_examples=200)
@given(data=lines_with_breaks, cuts=st.lists(st.integers(min_value=0), max_size=8))
def test_batches_hold_the_lines_line_by_line(data: bytes, cuts: list[int]) -> None:
    expected = per_line(data, REAL_CAP)
    direct = asyncio.run(_collect(display_batches(_chunks(data, cuts))))
    ahead = asyncio.run(_collect(display_batches_ahead(_chunks(data, cuts), keep=10_000)))
    assert [line for batch in direct for line in batch] == expected
    assert [line for batch in ahead for line in batch] == expected
    assert sum(batch.skipped for batch in ahead) == 0


def test_a_reader_slower_than_the_stream_gets_the_newest_lines_and_the_count() -> None:
    lines = [f"line {n}" for n in range(10_000)]
    data = ("\n".join(lines) + "\nlast, unterminated").encode()
    # The source never waits: it is read to its end before the consumer's first take.
    batches = asyncio.run(
        _collect(display_batches_ahead(_chunks(data, list(range(0, len(data), 997))), keep=300))
    )
    got = [line for batch in batches for line in batch]
    assert got == [*lines[-300:], "last, unterminated"]
    assert sum(batch.skipped for batch in batches) == 10_000 - 300


def test_an_over_long_line_in_progress_is_cut_as_line_by_line() -> None:
    data = b"a\n" + b"x" * (3 * REAL_CAP) + b"\nb\n" + b"y" * (2 * REAL_CAP)
    cuts = list(range(0, len(data), 4096))
    batches = asyncio.run(_collect(display_batches_ahead(_chunks(data, cuts), keep=10)))
    assert [line for batch in batches for line in batch] == per_line(data, REAL_CAP)


def test_an_error_comes_after_the_lines_before_it_and_drops_the_line_in_progress() -> None:
    class Lost(Exception):
        pass

    async def failing():  # type: ignore[no-untyped-def]
        yield b"one\ntwo\nthr"
        raise Lost

    async def run() -> list[str]:
        got: list[str] = []
        with pytest.raises(Lost):
            async for batch in display_batches_ahead(failing(), keep=5):
                got.extend(batch)
        return got

    assert asyncio.run(run()) == ["one", "two"]


def test_closing_the_batches_closes_the_stream() -> None:
    closed: list[bool] = []

    async def run() -> None:
        data = b"line\n" * 50_000
        batches = display_batches_ahead(_chunks(data, list(range(0, len(data), 100)), closed), 10)
        async with contextlib.aclosing(batches) as stream:
            async for _ in stream:
                break

    asyncio.run(run())
    assert closed == [True]
