"""`LogView`: a streaming, searchable, bounded log pane for worker and engine logs.

The widget is pure UI: the app's message handlers feed it with `append(source, lines)`, where
`lines` are already sanitised plain text. Lines are never interpreted as markup; each one is
rendered from a `rich.text.Text` built from the raw string into a cached `Strip`.

Design (after textual's `Log` and toolong's `LogLines`):

- storage is a `deque` of `(seq, source, text)` bounded by `max_lines`; the rows currently
  shown (after the source filter) are a list of references into it, trimmed as the deque drops
  old lines;
- rendering goes through the line API (`ScrollView.render_line`) with an LRU cache of rendered
  strips, so the cost of a frame depends on the height of the view, not on the backlog, and
  `append` of thousands of lines costs a list extend plus bookkeeping;
- follow mode: at the bottom the view follows new lines; any scroll away from the bottom
  (keys, wheel, scrollbar) pauses it and a badge counts the lines that arrived since;
  `end` (or `G`) resumes, as does scrolling back down to the bottom;
- search: `/` opens an inline input; all case-insensitive matches in the shown lines are
  highlighted, `n`/`N` cycle through them and `escape` closes the search;
- `w` toggles character wrapping (no horizontal scrolling while wrapped).
"""

from __future__ import annotations

import re
import zlib
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Iterable, Sequence
from itertools import repeat
from operator import itemgetter
from typing import ClassVar, Literal, Self

from rich.cells import cell_len, get_character_cell_size
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events, on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.cache import LRUCache
from textual.containers import Horizontal
from textual.geometry import Size
from textual.reactive import var
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Input, Label

__all__ = [
    "DEFAULT_MAX_LINES",
    "ERROR_PATTERN",
    "SOURCE_TAGS",
    "LineKind",
    "LogView",
    "classify_line",
    "source_tag",
]

DEFAULT_MAX_LINES = 20_000

Entry = tuple[int, str, str]
"""A buffered line: (sequence number, source, text)."""
Row = tuple[Entry, int, int]
"""A wrapped row: (entry, start, end) as character offsets into the entry's text."""
Match = tuple[int, int, int]
"""A search match: (entry sequence number, start, end) as character offsets."""

LineKind = Literal["error", "warning"]

ERROR_PATTERN = re.compile(
    r"ERROR|\bpanic|[Ee]rror:|FAILED|CUDA error|[Oo]ut of memory|Traceback|\bFATAL\b"
)
"""Lines worth a red highlight. Case-sensitive on purpose: `ERROR`/`FAILED` are log-level
markers, whereas a lowercase "error" inside a sentence ("0 errors", "error_rate") is not."""
WARNING_PATTERN = re.compile(r"\bWARN(?:ING)?\b|[Ww]arning:")

SOURCE_TAGS: dict[str, str] = {
    "cuzk-daemon": "cuzk",
    "cuzk": "cuzk",
    "benchmark": "bench",
    "paramfetch": "param",
    "curio": "curio",
    "setup": "setup",
    "engine": "engine",
}
"""Short tags shown before each line when several sources are merged."""
TAG_WIDTH = 6
_SEPARATOR = " │ "
PREFIX_WIDTH = TAG_WIDTH + len(_SEPARATOR)

_SOURCE_COLOURS: dict[str, str] = {
    "cuzk": "#56b6c2",
    "bench": "#c678dd",
    "param": "#61afef",
    "curio": "#98c379",
    "setup": "#d19a66",
    "engine": "#abb2bf",
}
_PALETTE = ("#56b6c2", "#c678dd", "#61afef", "#98c379", "#d19a66", "#e5c07b", "#ef8fb4")

# Control characters (bar tab) would corrupt the terminal; callers sanitise, this is the backstop.
_CONTROLS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")
_CONTROLS_BUT_NEWLINE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# _CONTROLS_BUT_NEWLINE's ASCII members (tab is one: `_clean` expands it), each to a space.
_ASCII_CONTROLS_BUT_NEWLINE = {c: " " for c in (*range(0x00, 0x0A), *range(0x0B, 0x20), 0x7F)}
_SEQ = itemgetter(0)


def _row_key(row: Row) -> tuple[int, int]:
    return row[0][0], row[1]


def classify_line(text: str) -> LineKind | None:
    """`"error"` for lines matching `ERROR_PATTERN`, `"warning"` for warnings, else None."""
    if ERROR_PATTERN.search(text):
        return "error"
    if WARNING_PATTERN.search(text):
        return "warning"
    return None


def source_tag(source: str) -> str:
    """The short tag for a source (known names are abbreviated, others truncated)."""
    return SOURCE_TAGS.get(source, source)[:TAG_WIDTH]


def _source_colour(tag: str) -> str:
    colour = _SOURCE_COLOURS.get(tag)
    if colour is None:  # crc32, not hash(): stable across runs (snapshots)
        colour = _PALETTE[zlib.crc32(tag.encode()) % len(_PALETTE)]
    return colour


def _clean(text: str) -> str:
    if "\t" in text:
        text = text.expandtabs(8)
    return _CONTROLS.sub(" ", text)


def _clean_all(lines: Sequence[str]) -> tuple[list[str], int]:
    """`_clean` of every line and the widest one's width, per batch where it can be: lines that
    arrive sanitised (the usual case) need nothing, which one scan of the batch shows."""
    block = "\n".join(lines)
    ascii_only = block.isascii()
    if (
        "\t" not in block
        and block.count("\n") == len(lines) - 1
        and _no_controls_but_newline(block, ascii_only)
    ):
        texts = list(lines)
    else:
        texts = [_clean(text) for text in lines]
    if ascii_only:
        return texts, max(map(len, texts))
    return texts, max(map(_text_width, texts))


def _no_controls_but_newline(block: str, ascii_only: bool) -> bool:
    if ascii_only:  # str.translate's ASCII fast path: several times cheaper than the regex
        return block.translate(_ASCII_CONTROLS_BUT_NEWLINE) == block
    return _CONTROLS_BUT_NEWLINE.search(block) is None


def _text_width(text: str) -> int:
    return len(text) if text.isascii() else cell_len(text)


def _wrap_entry(entry: Entry, width: int) -> list[Row]:
    """Character-wrap one entry into rows of at most `width` cells."""
    text = entry[2]
    length = len(text)
    if length <= width and (text.isascii() or cell_len(text) <= width):
        return [(entry, 0, length)]
    if text.isascii():
        return [(entry, i, min(i + width, length)) for i in range(0, length, width)]
    rows: list[Row] = []
    start = 0
    used = 0
    for index, char in enumerate(text):
        size = get_character_cell_size(char)
        if used + size > width and index > start:
            rows.append((entry, start, index))
            start, used = index, 0
        used += size
    rows.append((entry, start, length))
    return rows


class LogLines(ScrollView, can_focus=True, inherit_bindings=False):
    """The scrolling line-API viewport of a `LogView`; all state lives in the `LogView`."""

    ALLOW_SELECT = False  # mouse text selection is not implemented for the pinned source tags

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "scroll_up", "Scroll up", show=False),
        Binding("down", "scroll_down", "Scroll down", show=False),
        Binding("left", "scroll_left", "Scroll left", show=False),
        Binding("right", "scroll_right", "Scroll right", show=False),
        Binding("pageup", "page_up", "Page up", show=False),
        Binding("pagedown", "page_down", "Page down", show=False),
        Binding("home", "scroll_home", "Top", show=False),
    ]

    DEFAULT_CSS = """
    LogLines {
        height: 1fr;
        background: $surface;
        color: $foreground;
        overflow: auto auto;
        scrollbar-gutter: stable;
        &:focus { background-tint: $foreground 5%; }
        &.-wrap { overflow-x: hidden; }
    }
    """

    def __init__(self, owner: LogView) -> None:
        super().__init__(id="logview-lines")
        self._owner = owner
        self._programmatic = 0

    def render_line(self, y: int) -> Strip:
        return self._owner._render_viewport_line(y)

    def scroll_programmatically(self, x: float | None = None, y: float | None = None) -> None:
        """Scroll without being mistaken for the user scrolling away from the bottom."""
        self._programmatic += 1
        try:
            self.scroll_to(x, y, animate=False, immediate=True)
        finally:
            self._programmatic -= 1

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        if not self._programmatic:
            self._owner._user_scrolled(old_value, new_value)

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._owner._invalidate_render()

    def on_resize(self, event: events.Resize) -> None:
        self._owner._viewport_resized()

    def on_mount(self) -> None:  # ScrollView.on_mount runs too: Textual dispatches along the MRO
        self._owner._viewport_resized()


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
        if max_lines < 1:
            raise ValueError("max_lines must be positive")
        self._max_lines = max_lines
        self._buffer: deque[Entry] = deque(maxlen=max_lines)
        self._view: list[Entry] = []
        self._rows: list[Row] = []
        self._rows_width = 0  # width the rows were wrapped for; 0 = stale
        self._seq = 0
        self._received = 0
        self._seen_sources: set[str] = set()
        self._visible: frozenset[str] | None = None
        self._show_prefix = False
        self._max_width = 0
        self._query = ""
        self._pattern: re.Pattern[str] | None = None
        self._matches: list[Match] = []
        self._match_spans: dict[int, list[tuple[int, int]]] = {}
        self._cache: LRUCache[tuple[int, int], Strip] = LRUCache(1024)
        self._prefix_cache: dict[tuple[str, bool], Strip] = {}
        self._styles: dict[str, Style] = {}
        self._follow_key_display = "End"
        self._repainted_hidden = False  # repainted since last drawn: nothing more to do
        self._lines = LogLines(self)
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
    def viewport(self) -> LogLines:
        """The scrolling line widget (scroll offsets, `render_line`)."""
        return self._lines

    @property
    def max_lines(self) -> int:
        return self._max_lines

    @property
    def buffered(self) -> int:
        """Lines held in the buffer (all sources), at most `max_lines`."""
        return len(self._buffer)

    @property
    def total_received(self) -> int:
        """Lines appended since the last `clear`/`reset`, dropped ones included."""
        return self._received

    @property
    def sources(self) -> frozenset[str] | None:
        """The source filter (None: all sources merged)."""
        return self._visible

    @property
    def search_query(self) -> str:
        """The active search query ('' when not searching)."""
        return self._query

    @property
    def searching(self) -> bool:
        return self.has_class("-searching")

    @property
    def shows_prefix(self) -> bool:
        """Whether lines carry a source tag (several sources merged)."""
        return self._show_prefix

    @property
    def lines(self) -> list[str]:
        """The texts of the shown lines, oldest first (a copy)."""
        return [entry[2] for entry in self._view]

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
        count = len(lines)
        if not count:
            return
        self._received += count
        if count > self._max_lines:  # only the tail can survive the bound
            self._seq += count - self._max_lines
            lines = lines[count - self._max_lines :]
        base = self._seq
        texts, width = _clean_all(lines)
        entries = list(zip(range(base + 1, base + len(texts) + 1), repeat(source), texts))
        self._seq = base + len(entries)
        self._buffer.extend(entries)
        shown = self._visible is None or source in self._visible
        self._after_ingest(entries if shown else [], {source}, width)

    def reset(self, lines: list[tuple[str, str]]) -> None:
        """Replace everything with `(source, text)` lines, oldest first (e.g. a ring buffer)."""
        self._clear_state()
        self._received = len(lines)
        tail = lines[-self._max_lines :]
        self._seq = len(lines) - len(tail)
        entries = [(self._seq + i, src, _clean(text)) for i, (src, text) in enumerate(tail, 1)]
        self._seq += len(entries)
        self._buffer.extend(entries)
        visible = self._visible
        shown = entries if visible is None else [e for e in entries if e[1] in visible]
        self._after_ingest(shown, {e[1] for e in entries})
        self._resume_follow()

    def clear(self) -> None:
        """Drop every line (the search query and source filter stay)."""
        self._clear_state()
        self._refresh_geometry()
        self._resume_follow()

    def set_sources(self, visible: set[str] | frozenset[str] | None) -> None:
        """Show only these sources (None: all sources merged)."""
        self._visible = None if visible is None else frozenset(visible)
        if self._visible is None:
            self._view = list(self._buffer)
        else:
            self._view = [e for e in self._buffer if e[1] in self._visible]
        self._max_width = max((_text_width(e[2]) for e in self._view), default=0)
        self._update_prefix()
        self._rows_width = 0
        self._rescan_matches()
        self._invalidate_render()
        self.line_count = len(self._view)
        self._refresh_geometry()
        if self.following:
            self._scroll_to_end()

    def line_style(self, text: str) -> Style | None:
        """The highlight style a line gets from its content (None for plain lines)."""
        kind = classify_line(text)
        return None if kind is None else self._component_style(f"logview--{kind}")

    def search(self, query: str) -> None:
        """Highlight case-insensitive matches of `query` (''/clears) and select the nearest."""
        self._set_query(query)
        self._select_initial_match()

    def next_match(self, step: int = 1) -> None:
        """Move the current match by `step`, wrapping around, and scroll it into view."""
        if not self._matches:
            return
        if self.current_match < 0:
            index = 0 if step > 0 else len(self._matches) - 1
        else:
            index = (self.current_match + step) % len(self._matches)
        self._set_current(index)
        self._reveal_match(index)

    def follow(self) -> None:
        """Resume following and jump to the newest line."""
        self._resume_follow()

    # ------------------------------------------------------------------ actions

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("next_match", "prev_match"):
            return bool(self._query)
        if action == "close_search":
            return self.searching or bool(self._query)
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
        self._resume_follow()

    def action_toggle_wrap(self) -> None:
        self.wrap = not self.wrap

    def action_close_search(self) -> None:
        query_input = self.query_one("#logview-query", Input)
        had_focus = query_input.has_focus
        self.remove_class("-searching")
        with query_input.prevent(Input.Changed):
            query_input.value = ""
        self._set_query("")
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
        if following:
            self.pending_new = 0
        else:
            self._follow_key_display = self._follow_key()
        self._refresh_badge()

    def watch_pending_new(self) -> None:
        self._refresh_badge()

    def watch_match_count(self) -> None:
        self._update_match_label()

    def watch_current_match(self) -> None:
        self._update_match_label()

    def watch_wrap(self, wrap: bool) -> None:
        anchor = None if self.following else self._top_entry()
        self._lines.set_class(wrap, "-wrap")
        self._rows_width = 0
        self._invalidate_render()
        self._refresh_geometry()
        if wrap:
            self._lines.scroll_programmatically(x=0)
        if self.following:
            self._scroll_to_end()
        elif anchor is not None:
            self._lines.scroll_programmatically(y=self._row_of(anchor[0], 0))

    # ------------------------------------------------------------------ ingest internals

    def _clear_state(self) -> None:
        self._buffer.clear()
        self._view = []
        self._rows = []
        self._rows_width = 0
        self._seen_sources = set()
        self._max_width = 0
        self._received = 0
        self._matches = []
        self._match_spans = {}
        self._update_prefix()
        self._invalidate_render()
        self.match_count = 0
        self.current_match = -1
        self.line_count = 0

    def _after_ingest(
        self, shown: list[Entry], sources: set[str], width: int | None = None
    ) -> None:
        """Account for freshly buffered entries (`width`: the widest one's, when known)."""
        if not sources <= self._seen_sources:
            self._seen_sources |= sources
            self._update_prefix()
        removed_rows = self._trim_to_buffer()
        if shown:
            self._view.extend(shown)
            if width is None:
                width = max(_text_width(e[2]) for e in shown)
            self._max_width = max(self._max_width, width)
            if self.wrap and self._rows_width:
                width = self._rows_width
                for entry in shown:
                    self._rows.extend(_wrap_entry(entry, width))
            if self._pattern is not None:
                self._scan(shown)
        self.line_count = len(self._view)
        self.match_count = len(self._matches)
        self._refresh_geometry()
        if self.following:
            self._scroll_to_end()
        else:
            self.pending_new += len(shown)
            if removed_rows and self._lines.is_mounted:
                # Keep the lines the user is reading in place while old ones drop off the top.
                self._lines.scroll_programmatically(y=max(0, self._lines.scroll_y - removed_rows))
        self._repaint()

    def _repaint(self) -> None:
        """Repaint the lines for new content; a hidden view (its pane is not the one shown)
        repaints once, which empties its line cache, and then only buffers: it is drawn
        afresh when shown. Geometry and scrolling still follow, so that first frame is right."""
        if self._hidden():
            if self._repainted_hidden:
                return
            self._repainted_hidden = True
        else:
            self._repainted_hidden = False
        self._lines.refresh()

    def _hidden(self) -> bool:
        """Whether an ancestor is not displayed (e.g. an inactive tab); a few style lookups."""
        node = self._lines
        while isinstance(node, Widget):
            if not node.display:
                return True
            node = node.parent
        return False

    def _trim_to_buffer(self) -> int:
        """Drop shown rows/matches whose lines left the buffer; the number of rows removed."""
        if not self._view:
            return 0
        first = self._buffer[0][0] if self._buffer else self._seq + 1
        if self._view[0][0] >= first:
            return 0
        cut = bisect_left(self._view, first, key=_SEQ)
        del self._view[:cut]
        removed = cut
        if self.wrap and self._rows_width:
            cut_rows = bisect_left(self._rows, (first, 0), key=_row_key)
            del self._rows[:cut_rows]
            removed = cut_rows
        if self._matches and self._matches[0][0] < first:
            cut_matches = bisect_left(self._matches, (first, -1, -1))
            for seq, _, _ in self._matches[:cut_matches]:
                self._match_spans.pop(seq, None)
            del self._matches[:cut_matches]
            current = self.current_match - cut_matches
            if current < 0:  # the current match scrolled out of the buffer
                current = 0 if self._matches else -1
                self._invalidate_render()
            self.current_match = current
        return removed

    def _update_prefix(self) -> None:
        shown_sources = self._seen_sources if self._visible is None else self._visible
        show = len(shown_sources) > 1
        if show != self._show_prefix:
            self._show_prefix = show
            self._rows_width = 0
            self._invalidate_render()

    # ------------------------------------------------------------------ search internals

    def _set_query(self, query: str) -> None:
        bindings_changed = bool(query) != bool(self._query)
        self._query = query
        self._pattern = re.compile(re.escape(query), re.IGNORECASE) if query else None
        self._rescan_matches()
        self._invalidate_render()
        self._lines.refresh()
        self._update_match_label()
        if bindings_changed:  # n/N/escape appear in or leave the footer
            self.refresh_bindings()

    def _rescan_matches(self) -> None:
        self._matches = []
        self._match_spans = {}
        if self._pattern is not None:
            self._scan(self._view)
        self.match_count = len(self._matches)
        self.current_match = 0 if self._matches else -1

    def _scan(self, entries: Iterable[Entry]) -> None:
        assert self._pattern is not None
        finditer = self._pattern.finditer
        matches = self._matches
        spans = self._match_spans
        for seq, _, text in entries:
            found = [(m.start(), m.end()) for m in finditer(text)]
            if found:
                spans[seq] = found
                matches.extend((seq, start, end) for start, end in found)

    def _select_initial_match(self) -> None:
        """Prefer a match on screen, else the nearest above (logs are read upwards)."""
        if not self._matches:
            self._set_current(-1)
            return
        top = self._top_entry()
        bottom = self._bottom_entry()
        if top is None or bottom is None:
            index = len(self._matches) - 1
        else:
            index = bisect_left(self._matches, (top[0], -1, -1))
            if not (index < len(self._matches) and self._matches[index][0] <= bottom[0]):
                index = index - 1 if index > 0 else 0
        self._set_current(index)
        self._reveal_match(index)

    def _set_current(self, index: int) -> None:
        if index != self.current_match:
            self.current_match = index
            self._invalidate_render()
            self._lines.refresh()

    def _reveal_match(self, index: int) -> None:
        if not self._lines.is_mounted or not 0 <= index < len(self._matches):
            return
        seq, start, end = self._matches[index]
        row = self._row_of(seq, start)
        lines = self._lines
        height = lines.scrollable_content_region.height
        top = round(lines.scroll_y)
        last_visible = top + height - (2 if not self.following else 1)  # badge hides a row
        moved = False
        if not top <= row <= last_visible:
            lines.scroll_programmatically(y=max(0, row - height // 2))
            moved = True
        if not self.wrap:
            text = self._view[bisect_left(self._view, seq, key=_SEQ)][2]
            content = max(1, lines.scrollable_content_region.width - self._prefix_width())
            col = _text_width(text[:start])
            col_end = col + _text_width(text[start:end])
            if col < lines.scroll_x or col_end > lines.scroll_x + content:
                lines.scroll_programmatically(x=max(0, col - content // 4))
        if moved and not lines.is_vertical_scroll_end:
            self.following = False

    def _update_match_label(self) -> None:
        if not self.is_mounted:
            return
        label = self.query_one("#logview-matches", Label)
        if not self._query:
            label.update("")
        elif not self.match_count:
            label.update("no matches")
        else:
            label.update(f"{self.current_match + 1}/{self.match_count:,}")

    # ------------------------------------------------------------------ scrolling internals

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

    def _user_scrolled(self, old: float, new: float) -> None:
        lines = self._lines
        if new < old and self.following and round(new) < lines.max_scroll_y:
            self.following = False
        elif new > old and not self.following and round(new) >= lines.max_scroll_y:
            self.following = True

    def _resume_follow(self) -> None:
        self.following = True
        self.pending_new = 0
        self._scroll_to_end()

    def _scroll_to_end(self) -> None:
        if self._lines.is_mounted:
            self._lines.scroll_programmatically(y=self._lines.max_scroll_y)

    def _viewport_resized(self) -> None:
        if self.wrap and self._rows_width != self._wrap_width():
            anchor = None if self.following else self._top_entry()
            self._rows_width = 0
            self._invalidate_render()
            self._refresh_geometry()
            if anchor is not None:
                self._lines.scroll_programmatically(y=self._row_of(anchor[0], 0))
        if self.following:
            self._scroll_to_end()
            self.call_after_refresh(self._scroll_to_end)
        self._lines.refresh()

    def _refresh_badge(self) -> None:
        self._repaint()

    # ------------------------------------------------------------------ geometry internals

    def _prefix_width(self) -> int:
        return PREFIX_WIDTH if self._show_prefix else 0

    def _wrap_width(self) -> int:
        return max(1, self._lines.scrollable_content_region.width - self._prefix_width())

    def _ensure_rows(self) -> list[Row]:
        """The wrapped rows for the current width, rebuilt when stale."""
        if not self._lines.is_mounted or self._lines.scrollable_content_region.width <= 0:
            return self._rows
        width = self._wrap_width()
        if self._rows_width != width:
            rows: list[Row] = []
            for entry in self._view:
                rows.extend(_wrap_entry(entry, width))
            self._rows = rows
            self._rows_width = width
        return self._rows

    def _row_count(self) -> int:
        if self.wrap:
            rows = self._ensure_rows()
            return len(rows) if self._rows_width else len(self._view)
        return len(self._view)

    def _refresh_geometry(self) -> None:
        lines = self._lines
        if self.wrap:
            width = lines.scrollable_content_region.width
        else:
            width = self._max_width + self._prefix_width()
        lines.virtual_size = Size(width, self._row_count())

    def _row_of(self, seq: int, start: int) -> int:
        if self.wrap and self._rows_width:
            return max(0, bisect_right(self._rows, (seq, start), key=_row_key) - 1)
        return bisect_left(self._view, seq, key=_SEQ)

    def _entry_at_row(self, row: int) -> Entry | None:
        if self.wrap and self._rows_width:
            return self._rows[row][0] if 0 <= row < len(self._rows) else None
        return self._view[row] if 0 <= row < len(self._view) else None

    def _top_entry(self) -> Entry | None:
        if not self._view:
            return None
        return self._entry_at_row(round(self._lines.scroll_y)) or self._view[-1]

    def _bottom_entry(self) -> Entry | None:
        if not self._view:
            return None
        height = self._lines.scrollable_content_region.height
        row = round(self._lines.scroll_y) + max(0, height - 1)
        return self._entry_at_row(min(row, self._row_count() - 1)) or self._view[-1]

    # ------------------------------------------------------------------ rendering

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._invalidate_render()

    def _invalidate_render(self) -> None:
        self._cache.clear()
        self._prefix_cache.clear()
        self._styles.clear()

    def _base_style(self) -> Style:
        """The viewport's own style (background, colour), cached until styles change."""
        style = self._styles.get("")
        if style is None:
            style = self._styles[""] = self._lines.rich_style
        return style

    def _component_style(self, name: str) -> Style:
        style = self._styles.get(name)
        if style is None:
            style = self._styles[name] = self.get_component_rich_style(name, partial=True)
        return style

    def _line_style(self, kind: LineKind, base: Style) -> Style:
        """The base style with a line kind's highlight over it, cached until styles change."""
        style = self._styles.get(kind)
        if style is None:
            style = self._styles[kind] = base + self._component_style(f"logview--{kind}")
        return style

    def _render_viewport_line(self, y: int) -> Strip:
        self._repainted_hidden = False  # drawn: its line cache holds lines again
        lines = self._lines
        scroll_x, scroll_y = lines.scroll_offset
        region = lines.scrollable_content_region
        width = region.width
        base = self._base_style()
        row = scroll_y + y
        if self.wrap and self._rows_width != self._wrap_width():
            self._ensure_rows()
            self.call_later(self._refresh_geometry)  # the row count changed with the width
        if self.wrap and self._rows_width:
            strip = self._render_wrapped_row(row, base)
            strip = strip.crop_extend(0, width, base)
        else:
            strip = self._render_plain_row(row, scroll_x, width, base)
        if not self.following and y == region.height - 1:
            strip = self._overlay_badge(strip, width)
        return strip

    def _render_plain_row(self, row: int, scroll_x: int, width: int, base: Style) -> Strip:
        if not 0 <= row < len(self._view):
            return Strip.blank(width, base)
        entry = self._view[row]
        key = (entry[0], -1)
        content = self._cache.get(key)
        if content is None:
            content = self._render_text(entry, 0, len(entry[2]), base)
            self._cache[key] = content
        prefix_width = self._prefix_width()
        content = content.crop_extend(scroll_x, scroll_x + width - prefix_width, base)
        if prefix_width:
            return Strip.join([self._prefix(entry[1], True, base), content])
        return content

    def _render_wrapped_row(self, row: int, base: Style) -> Strip:
        if not 0 <= row < len(self._rows):
            return Strip.blank(0, base)
        entry, start, end = self._rows[row]
        key = (entry[0], start)
        strip = self._cache.get(key)
        if strip is None:
            strip = self._render_text(entry, start, end, base)
            if self._show_prefix:
                strip = Strip.join([self._prefix(entry[1], start == 0, base), strip])
            self._cache[key] = strip
        return strip

    def _render_text(self, entry: Entry, start: int, end: int, base: Style) -> Strip:
        seq, _, full = entry
        kind = classify_line(full)
        spans = self._match_spans.get(seq)
        if not spans:  # one style for the whole row: the segment Text.render would give
            plain = full[start:end]
            if not plain:
                return Strip([Segment("")], 0)
            style = base if kind is None else self._line_style(kind, base)
            return Strip([Segment(plain, style)], _text_width(plain))
        text = Text(full[start:end], no_wrap=True, end="")
        text.stylize(base)  # a span, not Text(style=): render() drops the style of unspanned text
        if kind is not None:
            text.stylize(self._component_style(f"logview--{kind}"))
        match_style = self._component_style("logview--match")
        current_style = self._component_style("logview--match-current")
        current = self._matches[self.current_match] if self.current_match >= 0 else None
        for span_start, span_end in spans:
            if span_end <= start or span_start >= end:
                continue
            style = current_style if current == (seq, span_start, span_end) else match_style
            text.stylize(style, max(span_start, start) - start, min(span_end, end) - start)
        segments = list(text.render(self.app.console))
        return Strip(segments, _text_width(text.plain))

    def _prefix(self, source: str, first: bool, base: Style) -> Strip:
        key = (source, first)
        strip = self._prefix_cache.get(key)
        if strip is None:
            tag = source_tag(source)
            label = f"{tag:<{TAG_WIDTH}}" if first else " " * TAG_WIDTH
            separator = self._component_style("logview--separator")
            strip = Strip(
                [
                    Segment(label, base + Style(color=_source_colour(tag), bold=True)),
                    Segment(_SEPARATOR, base + separator),
                ],
                PREFIX_WIDTH,
            )
            self._prefix_cache[key] = strip
        return strip

    def _overlay_badge(self, strip: Strip, width: int) -> Strip:
        badge = f" {self.badge_text} "
        badge_width = min(cell_len(badge), width)
        if badge_width <= 0:
            return strip
        style = self.rich_style + self._component_style("logview--badge")
        badge_strip = Strip([Segment(badge, style)]).crop(0, badge_width)
        return Strip.join([strip.crop(0, width - badge_width), badge_strip])
