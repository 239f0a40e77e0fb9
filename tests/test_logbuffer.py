"""The log view's model (vastui/console/logbuffer.py) on its own: no app, no Pilot."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.cells import cell_len

from vastui.console.logbuffer import LogBuffer
from vastui.console.logtext import (
    PREFIX_WIDTH,
    classify_line,
    clean,
    clean_batch,
    source_tag,
    text_width,
    wrap_entry,
)


def numbered(prefix: str, count: int, start: int = 0) -> list[str]:
    return [f"{prefix} {i}" for i in range(start, start + count)]


def filled(max_lines: int, *batches: tuple[str, list[str]]) -> LogBuffer:
    buffer = LogBuffer(max_lines)
    for source, lines in batches:
        buffer.append(source, lines)
    return buffer


# ---------------------------------------------------------------- text


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("2026-01-01 ERROR proof failed", "error"),
        ("thread 'main' panicked at src/lib.rs:1", "error"),
        ("error: could not open device", "error"),
        ("ValueError: bad value", "error"),
        ("test FAILED", "error"),
        ("CUDA error: an illegal memory access", "error"),
        ("CUDA out of memory. Tried to allocate 2 GiB", "error"),
        ("Out of memory: Killed process 123 (cuzk)", "error"),
        ("Traceback (most recent call last):", "error"),
        ("WARN slow sector", "warning"),
        ("WARN slow sector, then ERROR: lost", "error"),
        ("ERROR after all, WARN", "error"),
        ("warning: deprecated flag", "warning"),
        ("0 errors so far", None),
        ("error_rate=0.1", None),
        ("all good", None),
        ("failed_over=false", None),
        ("", None),
    ],
)
def test_classify_line(text: str, kind: str | None) -> None:
    assert classify_line(text) == kind


@pytest.mark.parametrize(
    ("source", "tag"),
    [("cuzk-daemon", "cuzk"), ("benchmark", "bench"), ("paramfetch", "param"),
     ("engine", "engine"), ("a-very-long-source", "a-very")],
)  # fmt: skip
def test_source_tag(source: str, tag: str) -> None:
    assert source_tag(source) == tag


@pytest.mark.parametrize(
    ("text", "cleaned"),
    [
        ("plain", "plain"),
        ("tab\there", "tab     here"),
        ("esc\x1b[31mred", "esc [31mred"),
        ("bell\x07 nul\x00 del\x7f", "bell  nul  del "),
        ("c1\x85 csi\x9b", "c1  csi "),
        ("nl\ninside\rcr", "nl inside cr"),
        ("wide 日本語 stays", "wide 日本語 stays"),
        ("[bold]markup[/] stays text", "[bold]markup[/] stays text"),
    ],
)
def test_clean_leaves_nothing_a_terminal_would_act_on(text: str, cleaned: str) -> None:
    assert clean(text) == cleaned


@pytest.mark.parametrize(
    "lines",
    [
        ["plain", "ascii"],
        ["tab\there", "ctrl\x07bell", "nl\ninside"],  # the per-line backstop
        ["wide 日本語", "x" * 300],
        ["ascii", "del\x7f", "esc\x1b[31m", "nul\x00"],  # the ASCII check (a translate)
        ["wide 日本語", "c1\x85", "del\x7f"],  # the regex check
    ],
)
def test_a_batch_is_cleaned_as_line_by_line(lines: list[str]) -> None:
    texts, width = clean_batch(lines)
    assert texts == [clean(line) for line in lines]
    assert width == max(text_width(text) for text in texts)


@given(st.lists(st.text(alphabet=st.characters(max_codepoint=0x7F), max_size=12), min_size=1))
def test_a_batch_of_ascii_lines_is_cleaned_as_line_by_line(lines: list[str]) -> None:
    texts, width = clean_batch(lines)
    assert texts == [clean(line) for line in lines]
    assert width == max(text_width(text) for text in texts)


@pytest.mark.parametrize(
    ("text", "width", "pieces"),
    [
        ("", 5, [""]),
        ("abc", 5, ["abc"]),
        ("abcdefghij", 4, ["abcd", "efgh", "ij"]),
        ("日本語のログ行です abc", 5, ["日本", "語の", "ログ", "行で", "す ab", "c"]),
        ("a日b", 1, ["a", "日", "b"]),  # a wide character alone in a row too narrow for it
    ],
)
def test_wrap_entry_wraps_by_cells(text: str, width: int, pieces: list[str]) -> None:
    rows = wrap_entry((1, "setup", text), width)
    assert [text[start:end] for _, start, end in rows] == pieces
    assert all(row[0] == (1, "setup", text) for row in rows)
    assert all(cell_len(p) <= width for p in pieces if len(p) > 1)


# ---------------------------------------------------------------- the bound


@pytest.mark.parametrize(
    ("max_lines", "batches", "buffered", "first", "last"),
    [
        (5, [("a", numbered("l", 3))], 3, "l 0", "l 2"),
        (5, [("a", numbered("l", 3)), ("a", numbered("m", 3))], 5, "l 1", "m 2"),
        (5, [("a", numbered("l", 3)), ("b", numbered("m", 3))], 5, "l 1", "m 2"),
        (5, [("a", numbered("l", 2)), ("b", numbered("m", 2)), ("a", numbered("n", 4))], 5,
         "m 1", "n 3"),
        (5, [("a", numbered("l", 12))], 5, "l 7", "l 11"),  # a batch beyond the bound: its tail
        (3, [("a", ["x"])] * 10, 3, "x", "x"),
    ],
)  # fmt: skip
def test_the_buffer_keeps_the_newest_lines_up_to_its_bound(
    max_lines: int, batches: list[tuple[str, list[str]]], buffered: int, first: str, last: str
) -> None:
    buffer = filled(max_lines, *batches)
    assert buffer.buffered == buffered == buffer.line_count == len(buffer.lines)
    assert buffer.lines[0] == first and buffer.lines[-1] == last
    assert buffer.total_received == sum(len(lines) for _, lines in batches)
    entries = [buffer.entry(i) for i in range(buffer.line_count)]
    seqs = [e[0] for e in entries if e is not None]
    assert seqs == sorted(set(seqs)) and buffer.entry(buffer.line_count) is None
    assert [buffer.index_of(s) for s in seqs] == list(range(len(seqs)))


def test_rows_removed_while_paused_are_reported() -> None:
    buffer = filled(10, ("a", numbered("l", 10)))
    buffer.pause()
    ingested = buffer.append("a", numbered("m", 4))
    assert ingested.shown == 4 and ingested.rows_removed == 4
    assert buffer.pending_new == 4


# ---------------------------------------------------------------- sources


@pytest.mark.parametrize(
    ("visible", "lines", "prefix"),
    [
        (None, ["c1", "b1", "c2"], True),
        ({"cuzk"}, ["c1", "c2"], False),
        ({"benchmark"}, ["b1"], False),
        ({"cuzk", "benchmark"}, ["c1", "b1", "c2"], True),
        (set(), [], False),
    ],
)
def test_the_source_filter(visible: set[str] | None, lines: list[str], prefix: bool) -> None:
    buffer = filled(100, ("cuzk", ["c1"]), ("benchmark", ["b1"]), ("cuzk", ["c2"]))
    buffer.set_sources(visible)
    assert buffer.lines == lines and buffer.line_count == len(lines)
    assert buffer.shows_prefix is prefix
    assert buffer.prefix_width == (PREFIX_WIDTH if prefix else 0)


def test_a_filtered_source_is_buffered_but_neither_shown_nor_counted() -> None:
    buffer = LogBuffer(100)
    buffer.set_sources({"cuzk"})
    buffer.pause()
    assert buffer.append("curio", ["hidden"]).shown == 0
    assert buffer.append("cuzk", ["shown"]).shown == 1
    assert buffer.lines == ["shown"] and buffer.buffered == 2 and buffer.pending_new == 1
    buffer.set_sources(None)
    assert buffer.lines == ["hidden", "shown"]


def test_one_source_has_no_prefix_until_another_arrives() -> None:
    buffer = filled(100, ("cuzk", ["a"]))
    epoch = buffer.epoch
    assert not buffer.shows_prefix
    buffer.append("curio", ["b"])
    assert buffer.shows_prefix and buffer.epoch != epoch  # drawn lines gain a tag


def test_reset_keeps_the_newest_and_their_sources_and_the_readers_pause() -> None:
    buffer = LogBuffer(3)
    buffer.reset([("engine", "e1"), ("setup", "s1"), ("engine", "e2"), ("curio", "c\t1")])
    assert buffer.lines == ["s1", "e2", "c       1"]
    assert [e[1] for e in (buffer.entry(i) for i in range(3)) if e] == ["setup", "engine", "curio"]
    assert buffer.total_received == 4 and buffer.following
    # a paused reader stays paused: the merge put back in order is not a jump to the end
    buffer = LogBuffer(10)
    buffer.append("engine", ["e1", "e2"])
    buffer.pause()
    buffer.reset([("engine", "e1"), ("setup", "s1"), ("engine", "e2"), ("curio", "c1")])
    assert not buffer.following and buffer.pending_new == 2
    buffer.clear()
    assert buffer.lines == [] and buffer.buffered == 0 == buffer.total_received


# ---------------------------------------------------------------- wrapping


@pytest.mark.parametrize(
    ("lines", "content_width", "rows"),
    [
        (["abcdefghij", "xy"], 4, 4),
        (["abcdefghij", "xy"], 10, 2),
        (["abcdefghij", "xy"], 100, 2),
        (["日本語のログ"], 4, 3),
        ([""], 4, 1),
    ],
)
def test_wrapped_row_count(lines: list[str], content_width: int, rows: int) -> None:
    buffer = filled(100, ("a", lines))
    assert buffer.row_count() == len(lines)
    buffer.set_wrap(True)
    assert buffer.rows_stale(content_width)
    buffer.wrap_rows(content_width)
    assert not buffer.rows_stale(content_width)
    assert buffer.row_count() == rows


def test_wrapped_rows_follow_appends_and_the_bound() -> None:
    buffer = filled(3, ("a", ["aaaaaa", "bb"]))
    buffer.set_wrap(True)
    buffer.wrap_rows(3)
    assert buffer.row_count() == 3
    buffer.pause()
    ingested = buffer.append("a", ["cccccc", "dd"])  # "aaaaaa" leaves: its two rows with it
    assert ingested.rows_removed == 2
    assert [buffer.row(i) for i in range(buffer.row_count())] == [
        ((2, "a", "bb"), 0, 2), ((3, "a", "cccccc"), 0, 3), ((3, "a", "cccccc"), 3, 6),
        ((4, "a", "dd"), 0, 2),
    ]  # fmt: skip
    assert buffer.row_of(3, 4) == 2 and buffer.entry_at_row(3) == (4, "a", "dd")


def test_a_prefix_narrows_the_wrap() -> None:
    buffer = filled(100, ("a", ["x" * 20]), ("b", ["y"]))
    buffer.set_wrap(True)
    assert buffer.wrap_width(PREFIX_WIDTH + 5) == 5
    buffer.wrap_rows(PREFIX_WIDTH + 5)
    assert buffer.row_count() == 5


# ---------------------------------------------------------------- search


@pytest.mark.parametrize(
    ("query", "matches"),
    [
        ("proof", [(1, 0, 5), (3, 7, 12), (3, 13, 18)]),
        ("PROOF", [(1, 0, 5), (3, 7, 12), (3, 13, 18)]),  # case-insensitive
        ("[", [(2, 0, 1)]),  # literal, not a pattern
        ("nothing", []),
        ("", []),
    ],
)
def test_search_finds_every_match(query: str, matches: list[tuple[int, int, int]]) -> None:
    buffer = filled(100, ("a", ["proof 1 done", "[x] skipped", "second proof proof"]))
    buffer.set_query(query)
    assert [buffer.match(i) for i in range(buffer.match_count)] == matches
    assert buffer.current_match == (0 if matches else -1)
    assert buffer.query == query


@pytest.mark.parametrize(
    ("current", "step", "expected"),
    [(0, 1, 1), (2, 1, 0), (0, -1, 2), (1, -1, 0), (-1, 1, 0), (-1, -1, 2)],
)
def test_stepping_through_matches_wraps_around(current: int, step: int, expected: int) -> None:
    buffer = filled(100, ("a", ["hit", "hit", "hit"]))
    buffer.set_query("hit")
    buffer.select(current)
    assert buffer.step(step) == expected


def test_no_step_without_matches() -> None:
    buffer = filled(100, ("a", ["x"]))
    buffer.set_query("y")
    assert buffer.step(1) is None


def test_new_lines_are_searched_and_old_matches_leave_with_their_lines() -> None:
    buffer = filled(3, ("a", ["hit 1", "miss", "hit 2"]))
    buffer.set_query("hit")
    buffer.select(1)
    epoch = buffer.epoch
    buffer.append("a", ["hit 3"])  # "hit 1" leaves the buffer
    assert [buffer.match(i) for i in range(buffer.match_count)] == [(3, 0, 3), (4, 0, 3)]
    assert buffer.current_match == 0 and buffer.current() == (3, 0, 3)  # the same match
    assert buffer.spans(1) is None and buffer.spans(4) == [(0, 3)]
    buffer.append("a", ["x", "y", "z"])  # every match leaves
    assert buffer.match_count == 0 and buffer.current_match == -1 and buffer.epoch != epoch


@pytest.mark.parametrize(
    ("top", "bottom", "nearest"),
    [(0, 2, 0), (3, 5, 1), (2, 3, 1), (6, 7, 1), (4, 4, 1)],
)
def test_the_nearest_match_is_on_screen_else_above(top: int, bottom: int, nearest: int) -> None:
    # matches on lines 1 and 3 (seq 2 and 4)
    buffer = filled(100, ("a", ["x", "hit", "x", "hit", "x", "x", "x", "x"]))
    buffer.set_query("hit")
    assert buffer.nearest_match(top, bottom) == nearest


# ---------------------------------------------------------------- follow


def test_following_counts_nothing_and_paused_counts_shown_lines() -> None:
    buffer = LogBuffer(100)
    assert buffer.following
    buffer.append("a", ["1", "2"])
    assert buffer.pending_new == 0
    buffer.pause()
    buffer.append("a", ["3"])
    buffer.append("a", [])
    assert buffer.pending_new == 1 and not buffer.following
    buffer.resume()
    assert buffer.following and buffer.pending_new == 0


def test_the_epoch_moves_when_drawn_lines_would_change() -> None:
    buffer = filled(100, ("a", ["hit", "hit"]))
    seen = {buffer.epoch}
    for change in (
        lambda: buffer.set_query("hit"),
        lambda: buffer.select(1),
        lambda: buffer.set_wrap(True),
        lambda: buffer.set_sources({"a"}),
    ):
        change()
        assert buffer.epoch not in seen
        seen.add(buffer.epoch)
    epoch = buffer.epoch
    buffer.append("a", ["plain"])  # new lines: what was drawn stays as it was
    buffer.select(buffer.current_match)  # the same match
    assert buffer.epoch == epoch


def test_the_model_imports_no_textual() -> None:
    import subprocess
    import sys

    code = "import sys, vastui.console.logbuffer; print('textual' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_reset_keeps_the_current_match_where_lines_are_put_back_in_order() -> None:
    """A merged log re-sorted when an older batch arrives (panes/logs.py): the match the reader
    is on stays current, found again by its line and place, however the lines moved."""
    buffer = LogBuffer(100)
    lines = [("cuzk", f"t{i:02d} GPU_END job {i}") for i in range(0, 20, 2)]
    buffer.reset(lines)
    buffer.set_query("gpu_end")
    buffer.select(3)  # "t06 GPU_END job 6"
    buffer.pause()
    before = buffer.current()
    assert before is not None
    # older lines of another source arrive: the merge puts them in between
    merged = sorted([*lines, *((("curio", f"t{i:02d} GPU_END curio {i}")) for i in range(1, 9, 2))],
                    key=lambda x: x[1])  # fmt: skip
    buffer.reset(merged)
    assert buffer.match_count == 14 and not buffer.following
    now = buffer.current()
    assert now is not None
    entry = buffer.entry(buffer.index_of(now[0]))
    assert entry is not None and entry[1:] == ("cuzk", "t06 GPU_END job 6") and now[1:] == (4, 11)
    assert buffer.current_match == 6  # three of curio's came before it
    # n from there is the next line in order, not the first of the log
    step = buffer.step(1)
    assert step is not None
    nxt = buffer.match(step)
    assert nxt is not None and buffer.entry(buffer.index_of(nxt[0]))[2] == "t07 GPU_END curio 7"
    # equal lines: the same one of them stays current
    buffer.reset([("a", "x GPU_END"), ("a", "x GPU_END"), ("a", "x GPU_END")])
    buffer.select(1)
    buffer.reset([("b", "y GPU_END"), ("a", "x GPU_END"), ("a", "x GPU_END"), ("a", "x GPU_END")])
    assert buffer.current_match == 2
    # the line gone (trimmed away): the first match, as a new search starts
    buffer.reset([("b", "z GPU_END")])
    assert buffer.current_match == 0
