"""A dialog's dimmed backdrop (vastui/console/backdrop.py) is drawn cell for cell as Textual's
BackgroundScreen draws it, each style tinted once instead of each segment."""

from __future__ import annotations

from rich.console import Console
from rich.segment import Segment
from rich.text import Text
from textual._context import visible_screen_stack
from textual.app import App, ComposeResult
from textual.color import Color
from textual.renderables.background_screen import BackgroundScreen
from textual.widgets import Label, Static

from vastui.console.backdrop import Dialog, Opening, TintedScreen


class Colourful(App[None]):
    def compose(self) -> ComposeResult:
        for i in range(30):
            text = Text()
            for j in range(12):
                text.append(
                    f"cell{i}.{j} ", style=("bold red", "on blue", "green", "")[(i + j) % 4]
                )
            yield Static(text)


class Box(Dialog[None]):
    def compose(self) -> ComposeResult:
        yield Label("a dialog")


def _segments(renderable: object, width: int, height: int) -> list[Segment]:
    console = Console(width=width, height=height, color_system="truecolor", legacy_windows=False)
    options = console.options.update(width=width, height=height)
    return list(console.render(renderable, options))


async def test_the_backdrop_is_textuals_cell_for_cell() -> None:
    app = Colourful()
    async with app.run_test(size=(100, 30)) as pilot:
        base = app.screen
        await pilot.pause()
        dialog = Box()
        await app.push_screen(dialog)
        await pilot.pause()
        token = visible_screen_stack.set([base])  # as the compositor sets it to draw
        try:
            assert isinstance(dialog.render(), TintedScreen)  # the dialog draws with it
        finally:
            visible_screen_stack.reset(token)
        for color in (Color(0, 0, 0, 0.6), Color(10, 20, 30, 0.0), Color(255, 255, 255, 0.3)):
            ours = _segments(TintedScreen(base, color), 100, 30)
            textuals = _segments(BackgroundScreen(base, color), 100, 30)
            assert len(ours) > 100
            assert ours == textuals


def test_an_opening_serves_its_rendering_once_and_only_unchanged() -> None:
    segs = [Segment("x")]
    opening = Opening()
    assert opening.take("k") is None  # the first render: nothing kept yet
    opening.keep("k", segs)
    assert opening.take("k") is segs and opening.done  # the second: the same, once
    opening.keep("k", [Segment("y")])
    assert opening.take("k") is None  # never again
    other = Opening()
    other.keep("k", segs)
    assert other.take("another size") is None and other.done
    changed = Opening()
    changed.keep("k", segs)
    changed.drop()  # the screen beneath changed
    assert changed.take("k") is None and changed.done


async def test_a_change_beneath_is_drawn_in_the_dialogs_backdrop() -> None:
    app = Colourful()
    async with app.run_test(size=(100, 30)) as pilot:
        dialog = Box()
        await app.push_screen(dialog)
        await pilot.pause()
        assert dialog._opening.done  # its opening renders are over
        first = app.screen_stack[0].query(Static).first()
        first.update(Text("changed beneath", style="bold yellow"))
        await pilot.pause()
        await pilot.pause()
        shown = "".join(s.text for s in app.screen._compositor.render_update(full=True).strips[0])
        assert "beneath" in shown and "cell0.0" not in shown  # the new text, not the old
