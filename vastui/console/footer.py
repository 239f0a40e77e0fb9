"""KeyFooter: the focused pane's keys as one line, in one widget.

Textual's Footer removes, mounts and styles a FooterKey widget per binding whenever the
bindings change: each pane switch (every pane has its own keys) and each keystroke in an
input. That was half of a pane switch's CPU with 10,000 offers (bench/keys.py). This widget
draws the same line (key, then description, the theme's footer colours, the command palette's
key at the right) as one Text, and redraws it only when the keys shown change. A click on a key
presses it, as Footer's does; the key under the mouse is highlighted and its tooltip shown.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from rich.style import Style
from rich.text import Text
from textual import events
from textual.widget import Widget

if TYPE_CHECKING:
    from textual.screen import Screen

PALETTE_EDGE = "▏"  # Footer's `border-left: vkey` before the palette key


@dataclass(frozen=True)
class FooterKey:
    """One key as shown: what it presses, how it reads, whether it may run now."""

    key: str
    display: str
    description: str
    enabled: bool
    tooltip: str


@dataclass(frozen=True)
class Spot:
    """Where a key is drawn: columns start..end (exclusive) of the line."""

    start: int
    end: int
    item: FooterKey


def footer_keys(screen: Screen[object]) -> tuple[tuple[FooterKey, ...], FooterKey | None]:
    """The keys a footer shows for this screen's focus, one per action, in Footer's order,
    and the command palette's key (shown apart, at the right) if the app has a palette."""
    app = screen.app
    active = screen.active_bindings
    seen: set[str] = set()
    shown: list[FooterKey] = []
    for _node, binding, enabled, tooltip in active.values():
        if not binding.show or binding.action in seen:
            continue
        seen.add(binding.action)
        shown.append(FooterKey(binding.key, app.get_key_display(binding),
                               binding.description, enabled, tooltip))  # fmt: skip
    palette = None
    if app.ENABLE_COMMAND_PALETTE and app.COMMAND_PALETTE_BINDING in active:
        _node, binding, enabled, _tip = active[app.COMMAND_PALETTE_BINDING]
        palette = FooterKey(binding.key, app.get_key_display(binding), binding.description,
                            enabled, binding.tooltip or binding.description)  # fmt: skip
    return tuple(shown), palette


class KeyFooter(Widget, can_focus=False):
    """The bindings of the focused widget and its ancestors as one line (see the module)."""

    ALLOW_SELECT = False
    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "key-footer--key",
        "key-footer--description",
        "key-footer--hover",
        "key-footer--edge",
    }
    # Footer's and FooterKey's rules (textual/widgets/_footer.py), on spans of one line.
    DEFAULT_CSS = """
    KeyFooter {
        dock: bottom;
        height: 1;
        color: $footer-foreground;
        background: $footer-background;
        text-wrap: nowrap;
        .key-footer--key {
            color: $footer-key-foreground;
            background: $footer-key-background;
            text-style: bold;
        }
        .key-footer--description {
            color: $footer-description-foreground;
            background: $footer-description-background;
        }
        .key-footer--hover {
            color: $footer-key-foreground;
            background: $block-hover-background;
        }
        .key-footer--edge {
            color: $foreground 20%;
        }
    }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.keys: tuple[FooterKey, ...] = ()
        self.palette: FooterKey | None = None
        self.spots: list[Spot] = []
        self._hover: FooterKey | None = None

    def on_mount(self) -> None:
        self.screen.bindings_updated_signal.subscribe(self, self._bindings_changed)

    def on_unmount(self) -> None:
        self.screen.bindings_updated_signal.unsubscribe(self)

    def _bindings_changed(self, screen: Screen[object]) -> None:
        if not self.is_attached or screen is not self.screen:
            return
        keys, palette = footer_keys(screen)
        if (keys, palette) != (self.keys, self.palette):  # most updates change nothing shown
            self.keys, self.palette = keys, palette
            self.refresh()

    # -- drawing ---------------------------------------------------------------------------

    def render(self) -> Text:
        key_style = self.get_component_rich_style("key-footer--key")
        text_style = self.get_component_rich_style("key-footer--description")
        hover_style = self.get_component_rich_style("key-footer--hover")
        width = self.size.width
        line = Text(no_wrap=True, overflow="crop", end="")
        spots: list[Spot] = []
        tail = self._palette_text(key_style, text_style, hover_style)
        room = width - tail.cell_len
        for item in self.keys:
            start = line.cell_len
            if start >= room:
                break
            extra = hover_style if item is self._hover else Style()
            dim = Style(dim=True) if not item.enabled else Style()
            line.append(f" {item.display} ", key_style + extra + dim)
            if item.description:
                line.append(f"{item.description} ", text_style + extra + dim)
            spots.append(Spot(start, min(line.cell_len, room), item))
        line.truncate(max(0, room), pad=True)
        if self.palette is not None:
            start = room + 1  # after the edge
            spots.append(Spot(start, width, self.palette))
        line.append_text(tail)
        self.spots = spots
        return line

    def _palette_text(self, key_style: Style, text_style: Style, hover_style: Style) -> Text:
        """`▏^p palette ` at the right, as Footer docks its palette key."""
        tail = Text(end="")
        item = self.palette
        if item is None:
            return tail
        extra = hover_style if item is self._hover else Style()
        tail.append(PALETTE_EDGE, self.get_component_rich_style("key-footer--edge"))
        tail.append(item.display, key_style + extra)
        tail.append(f" {item.description} ", text_style + extra)
        return tail

    # -- the mouse -------------------------------------------------------------------------

    def spot_at(self, x: int) -> FooterKey | None:
        return next((s.item for s in self.spots if s.start <= x < s.end), None)

    def on_mouse_move(self, event: events.MouseMove) -> None:
        self._set_hover(self.spot_at(event.x))

    def on_leave(self, _event: events.Leave) -> None:
        self._set_hover(None)

    def _set_hover(self, item: FooterKey | None) -> None:
        if item is not self._hover:
            self._hover = item
            self.tooltip = (item.tooltip or item.description) if item is not None else None
            self.refresh()

    def on_mouse_down(self, event: events.MouseDown) -> None:
        item = self.spot_at(event.x)
        if item is None:
            return
        if item.enabled:
            self.app.simulate_key(item.key)
        else:
            self.app.bell()
