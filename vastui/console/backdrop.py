"""The dimmed screen behind a dialog, drawn as Textual draws it, at a fraction of the cost.

A ModalScreen with a translucent background renders the screen beneath through Textual's
`BackgroundScreen`, which tints every segment on its own: colours converted, blended and a
style built per segment, thousands of times for a screen of tables (twice per dialog opened,
on its resume and its resize: the largest part of opening the detail view, issue 32). The
segments of a screen share a few dozen styles, so each style is tinted once here, by
Textual's own `BackgroundScreen.process_segments`: what is drawn is the same, cell for cell.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Generic, Self, TypeVar

from rich.console import Console, ConsoleOptions, RenderResult
from rich.segment import Segment
from rich.style import Style
from textual.color import Color
from textual.geometry import Region
from textual.renderables.background_screen import BackgroundScreen
from textual.screen import ModalScreen

R = TypeVar("R")


# (style, tint) -> the tinted style: the screens beneath share their styles from one dialog
# to the next; bounded (emptied when full), as the styles of a long session are not
_TINTED: dict[tuple[Style | None, Color], Style | None] = {}
_TINTED_MAX = 8192


def tinted_style(style: Style | None, color: Color) -> Style | None:
    """The style Textual gives a segment of ``style`` behind a backdrop of ``color``."""
    key = (style, color)
    try:
        return _TINTED[key]
    except KeyError:
        pass
    (segment,) = BackgroundScreen.process_segments([Segment(" ", style)], color)
    if len(_TINTED) >= _TINTED_MAX:
        _TINTED.clear()
    _TINTED[key] = segment.style
    return segment.style


class TintedScreen:
    """`BackgroundScreen`'s rendering, each distinct style tinted once. With an `Opening`, the
    dialog's first two renders (its resume and its resize, a few milliseconds apart, the
    screen beneath unchanged) share one rendering."""

    def __init__(self, screen: Any, color: Color, opening: Opening | None = None) -> None:
        self.screen = screen
        self.color = color
        self.opening = opening

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        opening = self.opening
        key = (id(self.screen), options.max_width, options.height, self.color)
        if opening is not None:
            kept = opening.take(key)
            if kept is not None:
                return kept
        segments = list(self._tinted(console, options))
        if opening is not None:
            opening.keep(key, segments)
        return segments

    def _tinted(self, console: Console, options: ConsoleOptions) -> Iterator[Segment]:
        color = self.color
        tinted: dict[Style | None, Style | None] = {}  # this render's, without the tuple key
        for segment in console.render(self.screen._compositor, options):
            text, style, control = segment
            if control:
                yield segment
                continue
            try:
                new = tinted[style]
            except KeyError:
                new = tinted[style] = tinted_style(style, color)
            yield Segment(text, new, control)


class Opening:
    """One rendering of the backdrop, kept for the dialog's second render only: after that
    (or a render of another size, or a change beneath) every render is drawn afresh, so
    nothing the screen beneath shows later is missed."""

    def __init__(self) -> None:
        self.done = False
        self._kept: tuple[object, list[Segment]] | None = None

    def take(self, key: object) -> list[Segment] | None:
        kept, self._kept = self._kept, None
        if kept is None:
            return None
        self.done = True  # the second render: kept no longer, whatever it is
        return kept[1] if kept[0] == key else None

    def keep(self, key: object, segments: list[Segment]) -> None:
        if not self.done:
            self._kept = (key, segments)

    def drop(self) -> None:
        """The screen beneath changed: nothing kept is true any more."""
        self.done, self._kept = True, None


class Dialog(ModalScreen[R], Generic[R]):
    """A modal screen whose dimmed backdrop is drawn by `TintedScreen`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._opening = Opening()

    def refresh(
        self, *regions: Region, repaint: bool = True, layout: bool = False,
        recompose: bool = False,
    ) -> Self:  # fmt: skip
        if regions:  # what the screen beneath changed (Screen._compositor_refresh)
            self._opening.drop()
        return super().refresh(*regions, repaint=repaint, layout=layout, recompose=recompose)

    def render(self) -> Any:
        rendered = super().render()
        if isinstance(rendered, BackgroundScreen):
            opening = None if self._opening.done else self._opening
            return TintedScreen(rendered.screen, rendered.color, opening)
        return rendered
