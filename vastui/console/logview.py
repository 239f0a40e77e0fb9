"""`LogView`: the widget that draws a `LogBuffer` (console/logbuffer.py) — a streaming,
searchable, bounded log pane for worker and engine logs.

The app's message handlers feed it with `append(source, lines)`, where `lines` are already
sanitised plain text; the buffer keeps, filters, wraps and searches them, and this view draws
them (its viewport, `LogViewport` in logviewport.py, renders the rows) and turns keys and
scrolling into calls on the buffer. Lines are never interpreted as markup.

Design (after textual's `Log` and toolong's `LogLines`):

- rendering goes through the line API (`ScrollView.render_line`) with an LRU cache of rendered
  strips, so the cost of a frame depends on the height of the view, not on the backlog;
- appends only buffer: the view is repainted once per frame however many batches arrived
  in it (a stream at thousands of lines a second costs a frame, not an append's repaint);
- follow mode: at the bottom the view follows new lines; any scroll away from the bottom
  (keys, wheel, scrollbar) pauses it and a badge counts the lines that arrived since;
  `end` (or `G`) resumes, as does scrolling back down to the bottom;
- search: `/` opens an inline input; all case-insensitive matches in the shown lines are
  highlighted, `n`/`N` cycle through them and `escape` closes the search;
- `w` toggles character wrapping (no horizontal scrolling while wrapped).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, Self

from rich.style import Style
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.reactive import var
from textual.widget import Widget
from textual.widgets import Input, Label

from vastui.console.logbuffer import DEFAULT_MAX_LINES, LogBuffer
from vastui.console.logtext import PREFIX_WIDTH, Entry, classify_line, text_width
from vastui.console.logviewport import LogViewport

__all__ = ["DEFAULT_MAX_LINES", "PREFIX_WIDTH", "LogView"]


class LogView(Widget):
    """A bounded, searchable, follow-mode log pane fed with `append(source, lines)`."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("slash", "search", "Search", key_display="/", id="logs-search"),
        Binding("n", "next_match", "Next", id="logs-next"),
        Binding("N", "prev_match", "Prev", id="logs-prev"),
        Binding("end,G", "follow", "Follow", id="logs-follow"),
        Binding("w", "toggle_wrap", "Wrap", id="logs-wrap"),
        Binding("escape", "close_search", "Close search", id="logs-search-close"),
    ]

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "logview--error",
        "logview--warning",
        "logview--match",
        "logview--match-current",
        "logview--separator",
        "logview--badge",
    }

    DEFAULT_CSS = """
    LogView {
        height: 1fr;
        layout: vertical;
        & > .logview--error { color: $text-error; }
        & > .logview--warning { color: $text-warning; }
        & > .logview--match { background: $warning-muted; }
        & > .logview--match-current { background: $accent; color: $background; text-style: bold; }
        & > .logview--separator { color: $foreground-muted; }
        & > .logview--badge { background: $warning; color: $background; text-style: bold; }
        & > #logview-search {
            dock: bottom;
            height: 1;
            display: none;
            background: $boost;
        }
        &.-searching > #logview-search { display: block; }
        #logview-slash { width: 2; padding-left: 1; }
        #logview-query { width: 1fr; }
        #logview-matches { width: auto; padding: 0 1; color: $text-muted; }
    }
    """

    # Mirrors of the buffer's state (set by `_sync`), for watchers and readers.
    following: var[bool] = var(True, init=False)
    """True while the view sticks to the newest line."""
    pending_new: var[int] = var(0, init=False)
    """Lines shown since following paused (the badge count)."""
    line_count: var[int] = var(0, init=False)
    """Lines currently shown (after the source filter)."""
    match_count: var[int] = var(0, init=False)
    """Search matches in the shown lines."""
    current_match: var[int] = var(-1, init=False)
    """Index of the current search match, -1 for none."""
    wrap: var[bool] = var(False, init=False)
    """Wrap long lines (disables horizontal scrolling)."""

    def __init__(
        self,
        *,
        max_lines: int = DEFAULT_MAX_LINES,
        wrap: bool = False,
        name: str | None = None,
        id: str | None = None,
        classes: str | None = None,
        disabled: bool = False,
    ) -> None:
        super().__init__(name=name, id=id, classes=classes, disabled=disabled)
        self._buffer = LogBuffer(max_lines)
        self._buffer.set_wrap(wrap)
        self._follow_key_display = "End"
        self._frame_due = False  # appends since the last frame: one repaint owed
        self._lines = LogViewport(self, self._buffer)
        self.set_reactive(LogView.wrap, wrap)
        self._lines.set_class(wrap, "-wrap")

    # ------------------------------------------------------------------ composition

    def compose(self) -> ComposeResult:
        yield self._lines
        with Horizontal(id="logview-search"):
            yield Label("/", id="logview-slash")
            yield Input(id="logview-query", placeholder="search", compact=True)
            yield Label("", id="logview-matches", markup=False)

    def focus(self, scroll_visible: bool = True) -> Self:
        """Focusing the view focuses its scrolling lines."""
        self._lines.focus(scroll_visible)
        return self

    # ------------------------------------------------------------------ public API

    @property
    def buffer(self) -> LogBuffer:
        """The model: lines, filter, wrapping, search and follow state."""
        return self._buffer

    @property
    def viewport(self) -> LogViewport:
        """The scrolling line widget (scroll offsets, `render_line`)."""
        return self._lines

    @property
    def max_lines(self) -> int:
        return self._buffer.max_lines

    @property
    def buffered(self) -> int:
        """Lines held in the buffer (all sources), at most `max_lines`."""
        return self._buffer.buffered

    @property
    def total_received(self) -> int:
        """Lines appended since the last `clear`/`reset`, dropped ones included."""
        return self._buffer.total_received

    @property
    def sources(self) -> frozenset[str] | None:
        """The source filter (None: all sources merged)."""
        return self._buffer.sources

    @property
    def search_query(self) -> str:
        """The active search query ('' when not searching)."""
        return self._buffer.query

    @property
    def searching(self) -> bool:
        return self.has_class("-searching")

    @property
    def shows_prefix(self) -> bool:
        """Whether lines carry a source tag (several sources merged)."""
        return self._buffer.shows_prefix

    @property
    def lines(self) -> list[str]:
        """The texts of the shown lines, oldest first (a copy)."""
        return self._buffer.lines

    @property
    def badge_text(self) -> str:
        """The paused-follow cue ('' while following)."""
        if self.following:
            return ""
        key = self._follow_key_display
        count = self.pending_new
        if count:
            noun = "line" if count == 1 else "lines"
            return f"{count:,} new {noun} — press {key} to follow"
        return f"paused — press {key} to follow"

    def append(self, source: str, lines: Sequence[str]) -> None:
        """Add lines from one source (plain text, never markup). Call from the app thread."""
        ingested = self._buffer.append(source, lines)
        if not lines:
            return
        if not self._buffer.following and ingested.rows_removed and self._lines.is_mounted:
            # Keep the lines the user is reading in place while old ones drop off the top.
            y = max(0, self._lines.scroll_y - ingested.rows_removed)
            self._lines.scroll_programmatically(y=y)
        self._sync()
        self._owe_frame()

    def reset(self, lines: list[tuple[str, str]]) -> None:
        """Replace everything with `(source, text)` lines, oldest first (a merged log put back
        in time order). A reader on a match stays on it."""
        self._buffer.reset(lines)
        self._changed()
        if not self.following and self._buffer.current() is not None:
            self._reveal_match(self._buffer.current_match)

    def clear(self) -> None:
        """Drop every line (the search query and source filter stay)."""
        self._buffer.clear()
        self._changed()

    def set_sources(self, visible: set[str] | frozenset[str] | None) -> None:
        """Show only these sources (None: all sources merged)."""
        self._buffer.set_sources(visible)
        self._changed()

    def line_style(self, text: str) -> Style | None:
        """The highlight style a line gets from its content (None for plain lines)."""
        kind = classify_line(text)
        return (
            None
            if kind is None
            else self.get_component_rich_style(f"logview--{kind}", partial=True)
        )

    def search(self, query: str) -> None:
        """Highlight case-insensitive matches of `query` (''/clears) and select the nearest."""
        bindings_changed = bool(query) != bool(self._buffer.query)
        self._buffer.set_query(query)
        self._sync()
        self._lines.refresh()
        self._update_match_label()
        if bindings_changed:  # n/N/escape appear in or leave the footer
            self.refresh_bindings()
        if query:
            top = round(self._lines.scroll_y)
            height = self._lines.scrollable_content_region.height
            self._select(self._buffer.nearest_match(top, top + max(0, height - 1)))

    def next_match(self, step: int = 1) -> None:
        """Move the current match by `step`, wrapping around, and scroll it into view."""
        index = self._buffer.step(step)
        if index is not None:
            self._select(index)

    def follow(self) -> None:
        """Resume following and jump to the newest line."""
        self._buffer.resume()
        self._sync()
        self._lines.scroll_to_end()

    # ------------------------------------------------------------------ what LogViewport reports

    def user_scrolled(self, old: float, new: float) -> None:
        """The user scrolled: away from the bottom pauses following, back to it resumes."""
        lines = self._lines
        if new < old and self.following and round(new) < lines.max_scroll_y:
            self._buffer.pause()
            self._sync()
        elif new > old and not self.following and round(new) >= lines.max_scroll_y:
            self._buffer.resume()
            self._sync()

    def user_looked_up(self) -> None:
        """A key that looks up (up, page up, home) over lines taller than the view pauses."""
        if self.following and self._lines.max_scroll_y > 0:
            self._buffer.pause()
            self._sync()

    def viewport_resized(self) -> None:
        buffer = self._buffer
        if buffer.rows_stale(self._lines.content_width):
            anchor = None if self.following else self._top_entry()
            self._lines.invalidate()
            self._lines.refresh_geometry()
            if anchor is not None:
                self._lines.scroll_programmatically(y=buffer.row_of(anchor[0], 0))
        if self.following:
            self._lines.scroll_to_end()
            self.call_after_refresh(self._lines.scroll_to_end)
        self._lines.refresh()

    def styles_changed(self) -> None:
        self._lines.invalidate()

    # ------------------------------------------------------------------ actions

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("next_match", "prev_match"):
            return bool(self._buffer.query)
        if action == "close_search":
            return self.searching or bool(self._buffer.query)
        return True

    def action_search(self) -> None:
        self.add_class("-searching")
        query_input = self.query_one("#logview-query", Input)
        query_input.focus()
        self.refresh_bindings()

    def action_next_match(self) -> None:
        self.next_match(1)

    def action_prev_match(self) -> None:
        self.next_match(-1)

    def action_follow(self) -> None:
        self.follow()

    def action_toggle_wrap(self) -> None:
        self.wrap = not self.wrap

    def action_close_search(self) -> None:
        query_input = self.query_one("#logview-query", Input)
        had_focus = query_input.has_focus
        self.remove_class("-searching")
        with query_input.prevent(Input.Changed):
            query_input.value = ""
        self.search("")
        if had_focus:
            self._lines.focus()
        self.refresh_bindings()

    @on(Input.Changed, "#logview-query")
    def _query_changed(self, event: Input.Changed) -> None:
        event.stop()
        self.search(event.value)

    @on(Input.Submitted, "#logview-query")
    def _query_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self._lines.focus()
        if self.current_match >= 0:
            self._reveal_match(self.current_match)

    # ------------------------------------------------------------------ watchers

    def watch_following(self, following: bool) -> None:
        if not following:
            self._follow_key_display = self._follow_key()
        self._lines.repaint()

    def watch_pending_new(self) -> None:
        self._lines.repaint()

    def watch_match_count(self) -> None:
        self._update_match_label()

    def watch_current_match(self) -> None:
        self._update_match_label()

    def watch_wrap(self, wrap: bool) -> None:
        anchor = None if self.following else self._top_entry()
        self._buffer.set_wrap(wrap)
        self._lines.set_class(wrap, "-wrap")
        self._sync()
        self._lines.refresh_geometry()
        if wrap:
            self._lines.scroll_programmatically(x=0)
        if self.following:
            self._lines.scroll_to_end()
        elif anchor is not None:
            self._lines.scroll_programmatically(y=self._buffer.row_of(anchor[0], 0))

    # ------------------------------------------------------------------ state → screen

    def _sync(self) -> None:
        """Mirror the buffer's state into the reactives (their watchers run on change)."""
        buffer = self._buffer
        self.line_count = buffer.line_count
        self.match_count = buffer.match_count
        self.current_match = buffer.current_match
        self.following = buffer.following
        self.pending_new = buffer.pending_new

    def _changed(self) -> None:
        """After a change of everything shown (reset, clear, filter): geometry, follow, paint."""
        self._sync()
        self._lines.refresh_geometry()
        if self.following:
            self._lines.scroll_to_end()
        self._lines.repaint()

    def _owe_frame(self) -> None:
        """Appends repaint once per frame: the first of a frame schedules the update that
        lays out, follows and repaints for all of them."""
        if self._frame_due:
            return
        self._frame_due = True
        if self.is_mounted:
            self.call_later(self._frame)
        else:
            self._frame()

    def _frame(self) -> None:
        self._frame_due = False
        self._lines.refresh_geometry()
        if self.following:
            self._lines.scroll_to_end()
        self._lines.repaint()

    def _select(self, index: int) -> None:
        if index != self._buffer.current_match:
            self._buffer.select(index)
            self._sync()
            self._lines.refresh()
        self._reveal_match(index)

    def _reveal_match(self, index: int) -> None:
        match = self._buffer.match(index)
        if not self._lines.is_mounted or match is None:
            return
        seq, start, end = match
        row = self._buffer.row_of(seq, start)
        lines = self._lines
        height = lines.scrollable_content_region.height
        top = round(lines.scroll_y)
        last_visible = top + height - (2 if not self.following else 1)  # badge hides a row
        moved = False
        if not top <= row <= last_visible:
            lines.scroll_programmatically(y=max(0, row - height // 2))
            moved = True
        if not self.wrap:
            entry = self._buffer.entry(self._buffer.index_of(seq))
            text = entry[2] if entry is not None else ""
            content = max(1, lines.scrollable_content_region.width - self._buffer.prefix_width)
            col = text_width(text[:start])
            col_end = col + text_width(text[start:end])
            if col < lines.scroll_x or col_end > lines.scroll_x + content:
                lines.scroll_programmatically(x=max(0, col - content // 4))
        if moved and not lines.is_vertical_scroll_end:
            self._buffer.pause()
            self._sync()

    def _update_match_label(self) -> None:
        if not self.is_mounted:
            return
        label = self.query_one("#logview-matches", Label)
        if not self._buffer.query:
            label.update("")
        elif not self.match_count:
            label.update("no matches")
        else:
            label.update(f"{self.current_match + 1}/{self.match_count:,}")

    def _follow_key(self) -> str:
        """How the badge names the follow key (honours an app keymap while we are focused)."""
        if not self.is_mounted:
            return "End"
        keys = [
            active.binding
            for active in self.screen.active_bindings.values()
            if active.binding.id == "logs-follow" and active.node is self
        ]
        if not keys:
            return "End"
        display = self.app.get_key_display(keys[0])
        return (
            display.title()
            if len(display) > 1 and display.isalpha() and display.islower()
            else display
        )

    # ------------------------------------------------------------------ geometry

    def _top_entry(self) -> Entry | None:
        buffer = self._buffer
        return buffer.entry_at_row(round(self._lines.scroll_y)) or buffer.entry(
            buffer.line_count - 1
        )

    # ------------------------------------------------------------------ styles

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._lines.invalidate()  # the component styles (error, match, badge) may have changed
