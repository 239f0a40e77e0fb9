"""`LogViewport`: the scrolling viewport of a `LogView` (console/logview.py). It draws the rows of
the view's `LogBuffer` through the line API, each line from its raw text (never markup) into a
cached `Strip`, so a frame costs the height of the view, not the backlog; and it tells its
owner, through the owner's public methods, when the user scrolls and when it is resized."""

from __future__ import annotations

import zlib
from typing import ClassVar, Protocol

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding, BindingType
from textual.cache import LRUCache
from textual.dom import DOMNode
from textual.geometry import Offset, Region, Size
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widget import Widget

from vastui.console.logbuffer import LogBuffer
from vastui.console.logtext import (
    PREFIX_WIDTH,
    SEPARATOR,
    TAG_WIDTH,
    Entry,
    LineKind,
    classify_line,
    source_tag,
    text_width,
)


class ViewportOwner(Protocol):
    """What the viewport asks of the widget that owns it (console/logview.py `LogView`)."""

    @property
    def badge_text(self) -> str: ...

    @property
    def rich_style(self) -> Style: ...

    def user_scrolled(self, old: float, new: float) -> None: ...

    def user_looked_up(self) -> None: ...

    def viewport_resized(self) -> None: ...

    def get_component_rich_style(self, *names: str, partial: bool = False) -> Style: ...


_SOURCE_COLOURS: dict[str, str] = {
    "cuzk": "#56b6c2",
    "bench": "#c678dd",
    "param": "#61afef",
    "curio": "#98c379",
    "setup": "#d19a66",
    "engine": "#abb2bf",
}
_PALETTE = ("#56b6c2", "#c678dd", "#61afef", "#98c379", "#d19a66", "#e5c07b", "#ef8fb4")


def source_colour(tag: str) -> str:
    colour = _SOURCE_COLOURS.get(tag)
    if colour is None:  # crc32, not hash(): stable across runs (snapshots)
        colour = _PALETTE[zlib.crc32(tag.encode()) % len(_PALETTE)]
    return colour


class LogViewport(ScrollView, can_focus=True, inherit_bindings=False):
    """The rows of a `LogView`'s buffer, scrolled; the badge over the last row while paused."""

    ALLOW_SELECT = False  # mouse text selection is not implemented for the pinned source tags

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "scroll_up", "Scroll up", id="logs-scroll-up", show=False),
        Binding("down", "scroll_down", "Scroll down", id="logs-scroll-down", show=False),
        Binding("left", "scroll_left", "Scroll left", id="logs-scroll-left", show=False),
        Binding("right", "scroll_right", "Scroll right", id="logs-scroll-right", show=False),
        Binding("pageup", "page_up", "Page up", id="logs-page-up", show=False),
        Binding("pagedown", "page_down", "Page down", id="logs-page-down", show=False),
        Binding("home", "scroll_home", "Top", id="logs-top", show=False),
    ]

    # No `scrollbar-gutter: stable`: with it Textual 8.2.8 sized the horizontal scrollbar
    # from the gutter-less width when it laid the scrollbars out (widget.py
    # _arrange_scrollbars) and from the width less the gutter when the content changed
    # (_scroll_update), whichever ran last: the thumb was a cell longer or shorter from run to
    # run (test_snapshot_logs[size0], 1 run in 4).
    DEFAULT_CSS = """
    LogViewport {
        height: 1fr;
        background: $surface;
        color: $foreground;
        overflow: auto auto;
        &:focus { background-tint: $foreground 5%; }
        &.-wrap { overflow-x: hidden; }
    }
    """

    def __init__(self, owner: ViewportOwner, buffer: LogBuffer) -> None:
        super().__init__(id="logview-lines")
        self._owner = owner
        self._buffer = buffer
        self._epoch = buffer.epoch
        self._programmatic = 0
        self._cache: LRUCache[tuple[int, int], Strip] = LRUCache(1024)
        self._prefix_cache: dict[tuple[str, bool], Strip] = {}
        self._styles: dict[str, Style] = {}
        self._repainted_hidden = False  # repainted since last drawn: nothing more to do
        self._frame: tuple[Offset, Region] | None = None  # while a frame is drawn

    # ------------------------------------------------------------------ what the owner asks

    @property
    def content_width(self) -> int:
        return self.scrollable_content_region.width if self.is_mounted else 0

    def refresh_geometry(self) -> None:
        """The scrollable size for the buffer's rows (wrapping them for this width first)."""
        buffer = self._buffer
        if buffer.wrap:
            width = self.content_width
            buffer.wrap_rows(width)
        else:
            width = buffer.max_width + buffer.prefix_width
        self.virtual_size = Size(width, buffer.row_count())

    def scroll_programmatically(self, x: float | None = None, y: float | None = None) -> None:
        """Scroll without being mistaken for the user scrolling away from the bottom."""
        self._programmatic += 1
        try:
            self.scroll_to(x, y, animate=False, immediate=True)
        finally:
            self._programmatic -= 1

    def scroll_to_end(self) -> None:
        if self.is_mounted:
            self.scroll_programmatically(y=self.max_scroll_y)

    def repaint(self) -> None:
        """Repaint for new content; hidden (its pane is not the one shown), repaint once, which
        empties the line cache, and then only buffer: it is drawn afresh when shown. Geometry
        and scrolling still follow, so that first frame is right."""
        if self._hidden():
            if self._repainted_hidden:
                return
            self._repainted_hidden = True
        else:
            self._repainted_hidden = False
        self.refresh()

    def invalidate(self) -> None:
        """Forget every rendered row and style (the styles or what rows show changed)."""
        self._cache.clear()
        self._prefix_cache.clear()
        self._styles.clear()

    def _hidden(self) -> bool:
        """Whether an ancestor is not displayed (e.g. an inactive tab); a few style lookups."""
        node: DOMNode | None = self
        while isinstance(node, Widget):
            if not node.display:
                return True
            node = node.parent
        return False

    # ------------------------------------------------------------------ Textual's events

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        if not self._programmatic:
            self._owner.user_scrolled(old_value, new_value)

    # A key that looks up pauses following by itself: pressed before the view has reached the
    # newest line (a busy terminal draws it a frame late), it moves nothing to watch, and
    # following would carry the view away from what the operator asked to read.
    def action_scroll_up(self) -> None:
        self._owner.user_looked_up()
        super().action_scroll_up()

    def action_page_up(self) -> None:
        self._owner.user_looked_up()
        super().action_page_up()

    def action_scroll_home(self) -> None:
        self._owner.user_looked_up()
        super().action_scroll_home()

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self.invalidate()

    def on_resize(self, event: events.Resize) -> None:
        self._owner.viewport_resized()

    def on_mount(self) -> None:  # ScrollView.on_mount runs too: Textual dispatches along the MRO
        self._owner.viewport_resized()

    # ------------------------------------------------------------------ rendering

    def _base_style(self) -> Style:
        """The viewport's own style (background, colour), cached until styles change."""
        style = self._styles.get("")
        if style is None:
            style = self._styles[""] = self.rich_style
        return style

    def _component_style(self, name: str) -> Style:
        style = self._styles.get(name)
        if style is None:
            style = self._styles[name] = self._owner.get_component_rich_style(name, partial=True)
        return style

    def _line_style(self, kind: LineKind, base: Style) -> Style:
        """The base style with a line kind's highlight over it, cached until styles change."""
        style = self._styles.get(kind)
        if style is None:
            style = self._styles[kind] = base + self._component_style(f"logview--{kind}")
        return style

    def render_lines(self, crop: Region) -> list[Strip]:
        # What every row of this frame shares, looked up once (a row drawn alone looks it up).
        self._frame = self.scroll_offset, self.scrollable_content_region
        try:
            return super().render_lines(crop)
        finally:
            self._frame = None

    def render_line(self, y: int) -> Strip:
        self._repainted_hidden = False  # drawn: its line cache holds lines again
        buffer = self._buffer
        if buffer.epoch != self._epoch:  # rows already drawn would look different now
            self._epoch = buffer.epoch
            self.invalidate()
        (scroll_x, scroll_y), region = self._frame or (
            self.scroll_offset,
            self.scrollable_content_region,
        )
        width = region.width
        base = self._base_style()
        row = scroll_y + y
        if buffer.rows_stale(width):
            buffer.wrap_rows(width)
            self.call_later(self.refresh_geometry)  # the row count changed with the width
        if buffer.wrap:
            strip = self._render_wrapped_row(row, base).crop_extend(0, width, base)
        else:
            strip = self._render_plain_row(row, scroll_x, width, base)
        if not buffer.following and y == region.height - 1:
            strip = self._overlay_badge(strip, width)
        return strip

    def _render_plain_row(self, row: int, scroll_x: int, width: int, base: Style) -> Strip:
        entry = self._buffer.entry(row)
        if entry is None:
            return Strip.blank(width, base)
        key = (entry[0], -1)
        content = self._cache.get(key)
        if content is None:
            content = self._render_text(entry, 0, len(entry[2]), base)
            self._cache[key] = content
        prefix_width = self._buffer.prefix_width
        content = content.crop_extend(scroll_x, scroll_x + width - prefix_width, base)
        if prefix_width:
            return Strip.join([self._prefix(entry[1], True, base), content])
        return content

    def _render_wrapped_row(self, row: int, base: Style) -> Strip:
        found = self._buffer.row(row)
        if found is None:
            return Strip.blank(0, base)
        entry, start, end = found
        key = (entry[0], start)
        strip = self._cache.get(key)
        if strip is None:
            strip = self._render_text(entry, start, end, base)
            if self._buffer.shows_prefix:
                strip = Strip.join([self._prefix(entry[1], start == 0, base), strip])
            self._cache[key] = strip
        return strip

    def _render_text(self, entry: Entry, start: int, end: int, base: Style) -> Strip:
        seq, _, full = entry
        kind = classify_line(full)
        spans = self._buffer.spans(seq)
        if not spans:  # one style for the whole row: the segment Text.render would give
            plain = full[start:end]
            if not plain:
                return Strip([Segment("")], 0)
            style = base if kind is None else self._line_style(kind, base)
            return Strip([Segment(plain, style)], text_width(plain))
        text = Text(full[start:end], no_wrap=True, end="")
        text.stylize(base)  # a span, not Text(style=): render() drops the style of unspanned text
        if kind is not None:
            text.stylize(self._component_style(f"logview--{kind}"))
        match_style = self._component_style("logview--match")
        current_style = self._component_style("logview--match-current")
        current = self._buffer.current()
        for span_start, span_end in spans:
            if span_end <= start or span_start >= end:
                continue
            style = current_style if current == (seq, span_start, span_end) else match_style
            text.stylize(style, max(span_start, start) - start, min(span_end, end) - start)
        segments = list(text.render(self.app.console))
        return Strip(segments, text_width(text.plain))

    def _prefix(self, source: str, first: bool, base: Style) -> Strip:
        key = (source, first)
        strip = self._prefix_cache.get(key)
        if strip is None:
            tag = source_tag(source)
            label = f"{tag:<{TAG_WIDTH}}" if first else " " * TAG_WIDTH
            separator = self._component_style("logview--separator")
            strip = Strip(
                [
                    Segment(label, base + Style(color=source_colour(tag), bold=True)),
                    Segment(SEPARATOR, base + separator),
                ],
                PREFIX_WIDTH,
            )
            self._prefix_cache[key] = strip
        return strip

    def _overlay_badge(self, strip: Strip, width: int) -> Strip:
        badge = f" {self._owner.badge_text} "
        badge_width = min(cell_len(badge), width)
        if badge_width <= 0:
            return strip
        style = self._owner.rich_style + self._component_style("logview--badge")
        badge_strip = Strip([Segment(badge, style)]).crop(0, badge_width)
        return Strip.join([strip.crop(0, width - badge_width), badge_strip])
