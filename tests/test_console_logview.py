"""LogView: bounded buffer, follow/pause badge, search, wrap, error styles, source tags."""

from __future__ import annotations

from typing import Any

import pytest
from rich.style import Style
from textual import events
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.pilot import Pilot
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Footer, Input, Static

from vastui.console.logview import (
    DEFAULT_MAX_LINES,
    PREFIX_WIDTH,
    LogView,
)


class LogApp(App[None]):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__()
        self._kwargs = kwargs
        self.animation_level = "none"  # scrolls land at once: no waiting on animations

    def compose(self) -> ComposeResult:
        yield LogView(id="log", **self._kwargs)
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#logview-query", Input).cursor_blink = False  # deterministic
        self.query_one(LogView).focus()


def _view(app: App[None]) -> LogView:
    return app.query_one(LogView)


def _focused(app: App[None]) -> Widget | None:
    return app.focused


def _rows(view: LogView) -> list[Strip]:
    lines = view.viewport
    return [lines.render_line(y) for y in range(lines.scrollable_content_region.height)]


def _texts(view: LogView) -> list[str]:
    return [strip.text.rstrip() for strip in _rows(view)]


def _numbered(prefix: str, count: int, start: int = 0) -> list[str]:
    return [f"{prefix} {i}" for i in range(start, start + count)]


# ---------------------------------------------------------------- classification / helpers


def test_bindings_have_ids_and_descriptions() -> None:
    ids = {b.id: b for b in LogView.BINDINGS if isinstance(b, Binding)}
    for binding_id in ("logs-search", "logs-next", "logs-prev", "logs-follow", "logs-wrap"):
        assert binding_id in ids and ids[binding_id].description
    assert ids["logs-follow"].key == "end,G"


# ---------------------------------------------------------------- rendering


async def test_markup_in_lines_is_shown_literally() -> None:
    line = "[bold red]x[/] [link=http://e]y[/link]"
    app = LogApp()
    async with app.run_test(size=(80, 10)) as pilot:
        view = _view(app)
        view.append("engine", [line, "[$accent]z[/] :smile: \\[escaped]"])
        await pilot.pause()
        texts = _texts(view)
        assert texts[0] == line
        assert texts[1] == "[$accent]z[/] :smile: \\[escaped]"
        background = view.viewport.rich_style.bgcolor
        for segment in _rows(view)[0]:
            style = segment.style or Style()
            assert not style.link and not style.bold
            assert style.bgcolor == background, "text must carry the widget's background"


async def test_error_lines_get_the_error_style() -> None:
    app = LogApp()
    async with app.run_test(size=(80, 10)) as pilot:
        view = _view(app)
        view.append("cuzk-daemon", ["all fine", "CUDA error: device lost"])
        await pilot.pause()
        error_style = view.line_style("CUDA error: device lost")
        assert error_style is not None and error_style.color is not None
        assert view.line_style("all fine") is None
        plain, error = _rows(view)[:2]
        assert all((seg.style or Style()).color != error_style.color for seg in plain)
        coloured = [seg for seg in error if seg.text.strip()]
        assert coloured and all(
            seg.style and seg.style.color == error_style.color for seg in coloured
        )


async def test_source_prefix_only_when_sources_are_merged() -> None:
    app = LogApp()
    async with app.run_test(size=(80, 10)) as pilot:
        view = _view(app)
        view.append("cuzk-daemon", ["c1"])
        await pilot.pause()
        assert not view.shows_prefix
        assert _texts(view)[0] == "c1"

        view.append("benchmark", ["b1"])
        await pilot.pause()
        assert view.shows_prefix
        assert _texts(view)[:2] == ["cuzk   │ c1", "bench  │ b1"]
        assert len("cuzk   │ ") == PREFIX_WIDTH

        view.set_sources({"benchmark"})
        await pilot.pause()
        assert not view.shows_prefix
        assert view.line_count == 1 and _texts(view)[0] == "b1"
        view.append("cuzk-daemon", ["c2"])  # filtered out, but buffered
        assert view.line_count == 1 and view.buffered == 3

        view.set_sources({"benchmark", "cuzk-daemon"})
        await pilot.pause()
        assert view.shows_prefix and view.lines == ["c1", "b1", "c2"]

        view.set_sources(None)
        assert view.lines == ["c1", "b1", "c2"]


async def test_reset_and_clear() -> None:
    app = LogApp(max_lines=3)
    async with app.run_test(size=(80, 10)) as pilot:
        view = _view(app)
        view.reset([("engine", "e1"), ("setup", "s1"), ("engine", "e2"), ("curio", "c1")])
        await pilot.pause()
        assert view.lines == ["s1", "e2", "c1"] and view.line_count == 3
        assert view.total_received == 4 and view.following
        view.clear()
        await pilot.pause()
        assert view.lines == [] and view.line_count == 0 and view.buffered == 0
        assert _texts(view)[0] == ""


# ---------------------------------------------------------------- bounded memory, volume


async def test_buffer_never_exceeds_the_bound() -> None:
    app = LogApp()
    async with app.run_test(size=(80, 24)) as pilot:
        view = _view(app)
        assert view.max_lines == DEFAULT_MAX_LINES
        for batch in range(200):
            view.append("cuzk-daemon", _numbered("l", 1000, batch * 1000))
            assert view.buffered <= DEFAULT_MAX_LINES
            assert view.line_count <= DEFAULT_MAX_LINES
        await pilot.pause()
        assert view.total_received == 200_000
        assert view.buffered == DEFAULT_MAX_LINES == view.line_count
        assert view.lines[0] == "l 180000" and view.lines[-1] == "l 199999"
        # One batch larger than the bound keeps only its tail.
        view.append("benchmark", _numbered("b", 50_000))
        assert view.buffered == DEFAULT_MAX_LINES
        assert view.lines[0] == "b 30000" and view.lines[-1] == "b 49999"


async def test_many_batches_are_counted_and_the_last_line_renders() -> None:
    app = LogApp(max_lines=50_000)
    async with app.run_test(size=(100, 24)) as pilot:
        view = _view(app)
        for batch in range(50):
            view.append("benchmark", _numbered(f"batch {batch} line", 1000))
        await pilot.pause()
        assert view.line_count == 50_000 == view.total_received
        assert view.following
        assert view.viewport.scroll_y == view.viewport.max_scroll_y
        assert _texts(view)[-1] == "batch 49 line 999"


# ---------------------------------------------------------------- follow mode


async def test_scroll_up_pauses_and_badge_counts_new_lines() -> None:
    app = LogApp()
    async with app.run_test(size=(80, 24)) as pilot:
        view = _view(app)
        lines = view.viewport
        view.append("cuzk-daemon", _numbered("old", 100))
        await pilot.pause()
        assert view.following and lines.scroll_y == lines.max_scroll_y
        assert view.badge_text == ""

        await pilot.press("up")
        assert not view.following
        assert view.badge_text == "paused — press End to follow"
        scroll_y = lines.scroll_y
        top = _texts(view)[0]

        view.append("cuzk-daemon", _numbered("new", 7))
        await pilot.pause()
        assert view.pending_new == 7
        assert view.badge_text == "7 new lines — press End to follow"
        assert lines.scroll_y == scroll_y and _texts(view)[0] == top, "the view must not move"
        assert _texts(view)[-1].endswith("7 new lines — press End to follow")

        await pilot.press("end")
        assert view.following and view.pending_new == 0 and view.badge_text == ""
        assert lines.scroll_y == lines.max_scroll_y
        assert _texts(view)[-1] == "new 6"

        view.append("cuzk-daemon", ["newest"])
        await pilot.pause()
        assert _texts(view)[-1] == "newest" and view.pending_new == 0


@pytest.mark.parametrize("key", ["pageup", "home"])
async def test_other_keys_pause_and_g_resumes(key: str) -> None:
    app = LogApp()
    async with app.run_test(size=(80, 24)) as pilot:
        view = _view(app)
        view.append("setup", _numbered("x", 200))
        await pilot.pause()
        await pilot.press(key)
        assert not view.following
        view.append("setup", ["more"])
        await pilot.pause()
        assert view.pending_new == 1 and view.badge_text.startswith("1 new line —")
        await pilot.press("G")
        assert view.following and view.viewport.scroll_y == view.viewport.max_scroll_y


@pytest.mark.parametrize("key", ["up", "pageup", "home"])
async def test_a_key_that_looks_up_pauses_before_the_view_reached_the_end(key: str) -> None:
    """A busy terminal draws the newest line a frame late: a key pressed before that moves
    nothing, and must still pause (found by a loaded CI run of the test above)."""
    app = LogApp()
    async with app.run_test(size=(80, 24)) as pilot:
        view = _view(app)
        view.append("setup", _numbered("x", 200))
        await pilot.pause()
        view.viewport.scroll_programmatically(y=0)  # where a late frame leaves it
        await pilot.press(key)
        assert not view.following
        view.append("setup", ["more"])
        await pilot.pause()
        assert view.viewport.scroll_y == 0 and view.pending_new == 1


async def test_mouse_wheel_pauses_and_scrolling_back_down_resumes() -> None:
    app = LogApp()
    async with app.run_test(size=(80, 24)) as pilot:
        view = _view(app)
        lines = view.viewport
        view.append("curio", _numbered("x", 200))
        await pilot.pause()
        lines.post_message(events.MouseScrollUp(lines, 5, 5, 0, -1, 0, False, False, False))
        await pilot.pause()
        assert not view.following
        view.append("curio", ["y"])
        await pilot.pause()
        for _ in range(5):
            await pilot.press("pagedown")
        assert view.following and view.pending_new == 0


async def test_trimming_while_paused_keeps_the_reading_position() -> None:
    app = LogApp(max_lines=300)
    async with app.run_test(size=(80, 24)) as pilot:
        view = _view(app)
        view.append("engine", _numbered("x", 300))
        await pilot.pause()
        await pilot.press("pageup", "pageup")
        top = _texts(view)[0]
        view.append("engine", _numbered("y", 20))  # 20 old lines drop off the top
        await pilot.pause()
        assert view.buffered == 300 and view.pending_new == 20
        assert _texts(view)[0] == top


# ---------------------------------------------------------------- search


def _match_styles(view: LogView) -> tuple[Style, Style]:
    return (
        view.get_component_rich_style("logview--match", partial=True),
        view.get_component_rich_style("logview--match-current", partial=True),
    )


def _highlighted(view: LogView) -> list[tuple[str, str]]:
    """(segment text, 'match'|'current') for highlighted segments on screen."""
    match, current = _match_styles(view)
    found = []
    for strip in _rows(view):
        for seg in strip:
            if seg.style and seg.style.bgcolor == current.bgcolor:
                found.append((seg.text, "current"))
            elif seg.style and seg.style.bgcolor == match.bgcolor:
                found.append((seg.text, "match"))
    return found


async def _search(pilot: Pilot[None], query: str) -> None:
    await pilot.press("slash", *query, "enter")
    await pilot.pause()


async def test_search_counts_highlights_and_cycles_matches() -> None:
    app = LogApp()
    async with app.run_test(size=(80, 24)) as pilot:
        view = _view(app)
        view.append("cuzk-daemon", ["alpha", "Proof DONE", "beta", "proof done again", "gamma"])
        view.append("benchmark", ["bench PROOF proof"])
        await pilot.pause()

        await pilot.press("slash", *"proof")
        assert view.searching and _focused(app) is app.query_one("#logview-query", Input)
        assert view.search_query == "proof", "n typed in the search box is text, not a binding"
        assert view.match_count == 4
        await pilot.press("enter")
        await pilot.pause()
        assert _focused(app) is view.viewport
        highlighted = _highlighted(view)
        assert sorted(text for text, _ in highlighted) == ["PROOF", "Proof", "proof", "proof"]
        assert [kind for _, kind in highlighted].count("current") == 1

        first = view.current_match
        await pilot.press("n")
        assert view.current_match == (first + 1) % 4
        await pilot.press("N", "N")
        assert view.current_match == (first - 1) % 4
        # Wrapping: four `n` presses come back to the same match.
        before = view.current_match
        await pilot.press("n", "n", "n", "n")
        assert view.current_match == before

        view.append("setup", ["one more proof"])
        assert view.match_count == 5

        await pilot.press("escape")
        await pilot.pause()
        assert not view.searching and view.search_query == "" and view.match_count == 0
        assert view.current_match == -1 and _highlighted(view) == []
        await pilot.press("n")  # no search: n is not ours any more
        assert view.current_match == -1


async def test_search_jumps_to_matches_off_screen_and_pauses() -> None:
    app = LogApp()
    async with app.run_test(size=(80, 24)) as pilot:
        view = _view(app)
        view.append("engine", ["needle at the top", *_numbered("hay", 300), "needle below"])
        await pilot.pause()
        view.search("needle")  # the API the search box drives
        await pilot.pause()
        assert view.match_count == 2
        # Nearest on screen (the bottom one) is current; `n` wraps to the top one.
        assert view.current_match == 1 and view.following
        await pilot.press("n")
        assert view.current_match == 0
        assert not view.following
        assert "needle at the top" in _texts(view)
        await pilot.press("n")
        assert view.current_match == 1
        assert _texts(view)[-1].startswith("needle below")  # the badge overlays its right end


async def test_search_with_no_matches_and_escape_from_the_box() -> None:
    app = LogApp()
    async with app.run_test(size=(80, 24)) as pilot:
        view = _view(app)
        view.append("engine", ["a", "b"])
        await _search(pilot, "zq")
        assert view.match_count == 0 and view.current_match == -1
        assert str(app.query_one("#logview-matches").render()) == "no matches"
        await pilot.press("n", "N")
        assert view.current_match == -1

        await pilot.press("slash", "a")  # the box keeps the previous query: "zqa"
        assert _focused(app) is app.query_one("#logview-query", Input)
        await pilot.press("escape")
        assert not view.searching and view.search_query == "" and _focused(app) is view.viewport


# ---------------------------------------------------------------- wrap, keymap


async def test_wrap_toggle() -> None:
    app = LogApp()
    async with app.run_test(size=(60, 12)) as pilot:
        view = _view(app)
        view.append("paramfetch", ["short", "x" * 150 + "END", "ERROR " + "é" * 80])
        await pilot.pause()
        lines = view.viewport
        assert not view.wrap and lines.max_scroll_x > 0
        await pilot.press("w")
        await pilot.pause()
        assert view.wrap and lines.max_scroll_x == 0
        width = lines.scrollable_content_region.width
        assert lines.virtual_size.width == width
        texts = _texts(view)
        assert texts[0] == "short" and texts[1] == "x" * width
        assert any(t.endswith("END") for t in texts)
        assert lines.virtual_size.height > 3
        assert all(strip.cell_length == width for strip in _rows(view))

        view.append("setup", ["merged now " * 20])  # prefix appears: rows rewrap
        await pilot.pause()
        assert all(strip.cell_length == width for strip in _rows(view))
        await pilot.press("w")
        await pilot.pause()
        assert not view.wrap and lines.virtual_size.height == 4


async def test_bindings_can_be_remapped_by_id() -> None:
    app = LogApp()
    async with app.run_test(size=(80, 12)) as pilot:
        app.set_keymap({"logs-wrap": "ctrl+w", "logs-follow": "f"})
        view = _view(app)
        view.append("engine", _numbered("x", 50))
        await pilot.pause()
        await pilot.press("w")
        assert not view.wrap
        await pilot.press("ctrl+w")
        assert view.wrap
        await pilot.press("up")
        assert not view.following and view.badge_text == "paused — press f to follow"
        await pilot.press("f")
        assert view.following


# ---------------------------------------------------------------- snapshot


SNAPSHOT_LINES = [
    ("setup", "installing cuzk 0.9.2 from cache"),
    ("paramfetch", "fetching v28-proof-of-spacetime-fallback params (32GiB)"),
    ("paramfetch", "params verified: 14 files, checksum ok"),
    ("cuzk-daemon", "daemon listening on 127.0.0.1:9820 with 2 GPUs"),
    ("benchmark", "warmup proof 1/3 started"),
    ("cuzk-daemon", "gpu0: proof 1 took 41.2s [bold]not markup[/bold]"),
    ("benchmark", "warmup proof 1/3 done: 41.2s"),
    ("cuzk-daemon", "CUDA error: out of memory on gpu1 (allocating 6 GiB)"),
    ("curio", "task WdPost assigned: deadline 17, partition 0"),
    ("benchmark", "proof 2/3 done: 39.8s"),
    ("engine", "instance 4711: benchmark rate 88 proofs/h (min 60)"),
    ("curio", "WARN slow sector read: 3.1s"),
    ("benchmark", "proof 3/3 done: 40.1s; median 40.1s"),
    ("engine", "instance 4711 passed benchmark; joining the fleet"),
]


def test_snapshot_merged_sources_with_search(snap_compare: Any) -> None:
    app = LogApp()

    async def run_before(pilot: Pilot[None]) -> None:
        view = _view(app)
        view.reset(SNAPSHOT_LINES)
        await pilot.pause()
        await pilot.press("slash", *"proof", "enter", "n")
        await pilot.pause()

    assert snap_compare(app, terminal_size=(100, 24), run_before=run_before)


# ---------------------------------------------------------------- batches (append, the pane)


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
async def test_append_cleans_and_measures_as_line_by_line(lines: list[str]) -> None:
    from vastui.console.logtext import clean, text_width

    app = LogApp()
    async with app.run_test(size=(80, 12)):
        view = _view(app)
        view.append("cuzk", lines)
        assert view.lines == [clean(line) for line in lines]
        assert view.buffer.max_width == max(text_width(clean(line)) for line in lines)


class _StreamApp(App[None]):
    """A LogsPane on its own, the app its host: `queue_lines` as its streams call it (no
    stream is opened: what a host would stream is never asked for)."""

    def compose(self) -> ComposeResult:
        from vastui.console.panes.logs import LogsPane

        yield LogsPane(self, id="logs")  # type: ignore[arg-type]  # the part of a host it reads


async def test_the_pane_appends_queued_batches_in_one_go_in_order() -> None:
    from vastui.console.panes.logs import LogsPane

    app = _StreamApp()
    async with app.run_test(size=(80, 12)) as pilot:
        pane = app.query_one(LogsPane)
        pane.source, pane.instance = "cuzk", 3000001
        view = pane.query_one(LogView)
        appends: list[int] = []
        append = view.append
        view.append = lambda source, lines: (appends.append(len(lines)), append(source, lines))  # type: ignore[method-assign]
        for n in range(5):
            pane.queue_lines(pane.token, "cuzk", _numbered(f"b{n}", 3))
        pane.queue_lines(pane.token - 1, "cuzk", ["from a stopped stream"])
        await pilot.pause()
        assert appends == [15]  # one append for the five batches; the stale one never shown
        assert view.lines == [line for n in range(5) for line in _numbered(f"b{n}", 3)]
        # the pane's count, in its header as the tables have theirs in their tabs
        header = str(pane.query_one("#logs-header", Static).render())
        assert "instance 3000001  15 lines" in header
        # ... redrawn without laying the screen out (issue 32: a fast stream laid out the whole
        # screen with every batch, whichever pane showed), and only when it changed
        layouts: list[bool] = []
        static = pane.query_one("#logs-header", Static)
        refresh = static.refresh

        def recorded(*regions: Any, **kw: Any) -> Any:
            layouts.append(kw.get("layout", False))
            return refresh(*regions, **kw)

        static.refresh = recorded  # type: ignore[method-assign]
        pane.queue_lines(pane.token, "cuzk", _numbered("b5", 3))
        await pilot.pause()
        pane.render_header()  # nothing new: not redrawn
        assert layouts == [False]
        assert "18 lines" in str(static.render())


async def test_the_pane_says_how_many_lines_it_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    from vastui.console.panes import logs
    from vastui.ssh import LogBatch

    monkeypatch.setattr(logs, "PENDING_LIMIT", 50)
    app = _StreamApp()
    async with app.run_test(size=(80, 12)) as pilot:
        pane = app.query_one(logs.LogsPane)
        pane.source = "cuzk"
        view = pane.query_one(LogView)
        pane.queue_lines(pane.token, "cuzk", LogBatch(["newest"], skipped=1234, ahead=True))
        await pilot.pause()
        assert view.lines == [
            "[1,234 lines skipped: the log came faster than the screen can show]",
            "newest",
        ]
        # A backlog beyond PENDING_LIMIT before the pane's turn: the oldest go, said so.
        view.clear()
        pane.queue_lines(pane.token, "cuzk", _numbered("old", 10))
        pane.queue_lines(pane.token, "cuzk", _numbered("new", 50))
        await pilot.pause()
        assert view.lines == [
            "[10 lines skipped: the log came faster than the screen can show]",
            *_numbered("new", 50),
        ]
        assert pane.skipped_total == 1234 + 10


async def test_a_search_in_the_merged_log_keeps_its_match_as_lines_arrive(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The merged "all" log, searched, while batches arrive, older ones after newer ones (the
    merge is then put back in time order): the counter keeps the match the reader is on, and
    n steps through the matches in time order (issue 31 item 1: it read 38/51, then 0/58 after
    Enter, then 1/62 and 0/67 with n)."""
    from vastui.console.panes import logs
    from vastui.console.panes.logs import LogsPane

    monkeypatch.setattr(logs, "RESORT_S", 3600.0)  # the re-sort called by hand below

    def stamped(source: str, minutes: range, what: str = "GPU_END") -> list[str]:
        return [f"2026-12-05T10:{m:02d}:00Z {source} {what} {m}" for m in minutes]

    app = _StreamApp()
    async with app.run_test(size=(100, 20)) as pilot:
        pane = app.query_one(LogsPane)
        pane.source = "all"
        view = pane.query_one(LogView)
        pane.queue_lines(pane.token, "cuzk", stamped("cuzk", range(0, 40, 2)))
        await pilot.pause()
        view.search("gpu_end")
        await pilot.pause()
        total = view.match_count
        assert total == 20
        view.next_match(-1)
        view.next_match(-1)
        current = view.current_match
        seq, start, _end = view.buffer.match(current) or (0, 0, 0)
        line = view.buffer.entry(view.buffer.index_of(seq))
        assert line is not None and 0 <= current < total
        for n in range(3):
            # an older batch of another source (its lines fall between cuzk's), then a newer
            pane.queue_lines(pane.token, "curio", stamped("curio", range(2 * n + 1, 2 * n + 2)))
            pane.queue_lines(pane.token, "cuzk", stamped("cuzk", range(40 + n, 41 + n)))
            await pilot.pause()
            assert pane._resort_due
            pane._resort()  # its timer's call (RESORT_S after the first late batch)
            assert view.match_count == total + 2 * (n + 1)
            now = view.buffer.match(view.current_match)
            assert now is not None and now[1] == start
            assert view.buffer.entry(view.buffer.index_of(now[0]))[1:] == line[1:], n
        # n goes to the next match in time order
        view.next_match(1)
        now = view.buffer.match(view.current_match)
        assert now is not None
        after = view.buffer.entry(view.buffer.index_of(now[0]))
        assert after is not None and after[2] > line[2]
        times = [
            (view.buffer.entry(view.buffer.index_of(m[0])) or (0, "", ""))[2][:20]
            for m in (view.buffer.match(i) for i in range(view.match_count))
            if m is not None
        ]
        assert times == sorted(times)


async def test_the_merged_log_is_put_back_in_order_once_for_many_late_batches(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Late batches from several streams: each is shown at once where it arrives, and the merge
    is rebuilt in time order once per RESORT_S, not once per batch (a rebuild of 20,000 lines
    takes ~150 ms: one per batch left the console no time for its keys)."""
    from vastui.console.panes import logs
    from vastui.console.panes.logs import LogsPane

    monkeypatch.setattr(logs, "RESORT_S", 3600.0)  # not within this test: called by hand
    app = _StreamApp()
    async with app.run_test(size=(100, 20)) as pilot:
        pane = app.query_one(LogsPane)
        pane.source = "all"
        view = pane.query_one(LogView)
        resets: list[int] = []
        reset = view.reset
        view.reset = lambda lines: (resets.append(len(lines)), reset(lines))  # type: ignore[method-assign]
        pane.queue_lines(
            pane.token, "cuzk", [f"2026-12-05T10:{m:02d}:00Z cuzk {m}" for m in (10, 20)]
        )
        await pilot.pause()
        for m in (1, 2, 3, 4, 5):  # five late batches, each older than what is shown
            pane.queue_lines(pane.token, f"s{m}", [f"2026-12-05T10:{m:02d}:00Z s{m}"])
            await pilot.pause()
        assert resets == [] and len(view.lines) == 7  # shown where they arrived
        assert pane._resort_due
        pane._resort()
        assert resets == [7] and not pane._resort_due
        assert view.lines == sorted(view.lines)


# ---------------------------------------------------------------- hidden (another pane shown)


class HiddenLogApp(App[None]):
    """A log view in a box that can be hidden, as an inactive tab hides the Logs pane."""

    def __init__(self) -> None:
        super().__init__()
        self.animation_level = "none"

    def compose(self) -> ComposeResult:
        with Vertical(id="box"):
            yield LogView(id="log", max_lines=30)  # full from the start: steady geometry
        yield Static("another pane", id="other")


def _screen_text(app: App[None]) -> str:
    """The text of the screen as the compositor last rendered it (widgets' cached lines)."""
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


async def test_a_hidden_view_buffers_without_repainting_and_is_drawn_afresh_when_shown() -> None:
    app = HiddenLogApp()
    async with app.run_test(size=(60, 12)) as pilot:
        view = _view(app)
        view.append("engine", _numbered("old", 30))
        await pilot.pause()
        assert "old 29" in _screen_text(app)
        repaints: list[int] = []
        refresh = view.viewport.refresh
        app.query_one("#box").display = False
        await pilot.pause()
        view.viewport.refresh = lambda *a, **kw: (repaints.append(1), refresh(*a, **kw))[1]  # type: ignore[method-assign]
        for batch in range(5):
            view.append("engine", _numbered("new", 10, 10 * batch))
        await pilot.pause()
        # One repaint (its cached lines dropped), then the appends only buffer (the geometry
        # follows, but it does not change while the buffer is full).
        assert len(repaints) == 1
        assert view.lines[-1] == "new 49" and view.following

        app.query_one("#box").display = True
        await pilot.pause()
        screen = _screen_text(app)
        assert "new 49" in screen and "old 29" not in screen
        before = len(repaints)
        for n in range(50, 53):
            view.append("engine", [f"new {n}"])
        assert len(repaints) == before  # appends only buffer: the frame repaints
        await pilot.pause()
        assert len(repaints) == before + 1  # shown: one repaint for the frame's appends
        assert "new 52" in _screen_text(app)

        # Hidden again, after a showing without appends: its drawn lines are dropped again.
        app.query_one("#box").display = False
        await pilot.pause()
        view.append("engine", _numbered("end", 30))
        app.query_one("#box").display = True
        await pilot.pause()
        assert "end 29" in _screen_text(app) and "new 52" not in _screen_text(app)
