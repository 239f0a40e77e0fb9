"""The key footer: one line of the focused pane's keys (as remapped), redrawn only when they
change, a click on a key presses it, the key under the mouse shows its tooltip."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from tests.helpers import settle
from vastsim.console_fixtures import FixedSource, fixed_app, fixed_data
from vastui.backend import Options
from vastui.config import Config
from vastui.console.app import VastuiApp
from vastui.console.footer import KeyFooter
from vastui.console.rowtable import RowTable


async def loaded(pilot: Any) -> None:
    app = pilot.app
    await settle(pilot, app, lambda: app.query_one("#offers-table", RowTable).row_count > 0)


def line(app: VastuiApp) -> str:
    return app.query_one(KeyFooter).render().plain


def spot(footer: KeyFooter, description: str) -> int:
    """The column where the key with this description is drawn."""
    footer.render()
    return next(s.start for s in footer.spots if s.item.description == description)


async def test_footer_is_one_line_of_the_focused_panes_keys(tmp_path: Path) -> None:
    app = fixed_app(tmp_path)
    async with app.run_test(size=(200, 50)) as pilot:
        await loaded(pilot)
        text = line(app)
        assert len(text) == 200
        assert text.startswith(" d Deploy  i Ignore  e Vast filter  / Find  b Bad  s Sort ")
        assert text.endswith("▏^p palette ")
        assert "Destroy" not in text
        await pilot.press("2")
        await settle(pilot, app, lambda: "Destroy" in line(app))
        assert " x Destroy " in line(app) and "Deploy" not in line(app)
        await pilot.press("1", "slash")  # the find input has focus: its keys only
        await settle(pilot, app, lambda: "Deploy" not in line(app) and "Find" in line(app))


async def test_footer_follows_the_keymap(tmp_path: Path) -> None:
    snap, ranked = fixed_data()
    config = Config()
    config = replace(config, ui=replace(config.ui, keymap={"offers-deploy": "D"}))
    opts = Options(config=config, db=tmp_path / "k.db", demo=True)
    app = VastuiApp(opts, FixedSource(opts, snap, ranked))
    async with app.run_test(size=(200, 50)) as pilot:
        await loaded(pilot)
        assert " D Deploy " in line(app) and " d Deploy " not in line(app)


async def test_footer_is_not_redrawn_when_its_keys_stay(tmp_path: Path) -> None:
    app = fixed_app(tmp_path)
    async with app.run_test(size=(200, 50)) as pilot:
        await loaded(pilot)
        footer = app.query_one(KeyFooter)
        keys = footer.keys
        app.screen.refresh_bindings()  # the bindings are looked at again; nothing changed
        await pilot.pause()
        assert footer.keys is keys


async def test_a_click_on_a_key_presses_it(tmp_path: Path) -> None:
    app = fixed_app(tmp_path)
    async with app.run_test(size=(200, 50)) as pilot:
        await loaded(pilot)
        footer = app.query_one(KeyFooter)
        assert app.pane("offers").sort_key == "cpp"
        await pilot.click(KeyFooter, offset=(spot(footer, "Sort") + 1, 0))
        await settle(pilot, app, lambda: app.pane("offers").sort_key == "min")
        await pilot.click(KeyFooter, offset=(spot(footer, "Help") + 1, 0))
        await settle(pilot, app, lambda: type(app.screen).__name__ == "HelpScreen")


async def test_the_key_under_the_mouse_is_highlighted_with_its_tooltip(tmp_path: Path) -> None:
    app = fixed_app(tmp_path)
    async with app.run_test(size=(200, 50)) as pilot:
        await loaded(pilot)
        footer = app.query_one(KeyFooter)
        plain = footer.render()
        await pilot.hover(KeyFooter, offset=(spot(footer, "Deploy") + 2, 0))
        await settle(pilot, app, lambda: footer.tooltip == "Rent the selected offer")
        lit = footer.render()
        assert lit.plain == plain.plain and lit.spans != plain.spans  # same text, one key lit
        await pilot.hover(KeyFooter, offset=(150, 0))  # between the keys and the palette
        await settle(pilot, app, lambda: footer.tooltip is None)


async def test_the_palette_lists_each_action_once(tmp_path: Path) -> None:
    """Textual's own commands (Quit, Theme, Keys) and the console's: each name once (Quit was
    listed twice, the app's ctrl+q beside Textual's: issue 31 item 6)."""
    from textual.system_commands import SystemCommandsProvider

    from vastui.console.palette import VastuiCommands

    app = fixed_app(tmp_path)
    async with app.run_test(size=(200, 50)) as pilot:
        await loaded(pilot)
        names: list[str] = []
        for provider in (SystemCommandsProvider(app.screen), VastuiCommands(app.screen)):
            names += [hit.text async for hit in provider.discover()]
    assert "Quit" in names and "Offers: Deploy" in names, names
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)


async def test_the_detail_view_shows_its_own_keys(tmp_path: Path) -> None:
    """The detail view over the instances pane showed the pane's keys (Destroy, Ignore), not its
    own (issue 31 item 6)."""
    from vastui.console.detail import DetailScreen

    app = fixed_app(tmp_path)
    async with app.run_test(size=(200, 50)) as pilot:
        await loaded(pilot)
        await pilot.press("2")
        table = app.query_one("#instances-table", RowTable)
        table.move_cursor(row=table.get_row_index("3000005"))
        await pilot.press("enter")
        await settle(pilot, app, lambda: isinstance(app.screen, DetailScreen))
        text = app.screen.query_one(KeyFooter).render().plain
        assert "Close" in text and "Refresh cuzk now" in text, text
        assert "Destroy" not in text and "Ignore" not in text, text
