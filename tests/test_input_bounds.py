"""Every text an operator gives is bounded where it enters: the filter on the command line
and in the console, a ban's reason (the console's prompts, `vastui bad add`), a command's text.
Over its bound it is refused in one line that says the bound, and nothing is done with it.
(The config file's keys: tests/test_config.py; the query parser's work: tests/test_query.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import Input, Static

from tests.helpers import settle
from tests.test_cli import run
from vastsim.console_fixtures import fixed_app
from vastui.console.dialogs import PromptScreen
from vastui.console.rowtable import RowTable
from vastui.domain.machines import REASON_MAX_CHARS
from vastui.store import Store, StoreError
from vastui.vast.query import MAX_FILTER_CHARS


def test_a_filter_over_its_bound_on_the_command_line_is_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    long = "num_gpus>=1 " * (MAX_FILTER_CHARS // 12 + 1)
    code, out, err = run(capsys, "offers", "--demo", "--db", str(tmp_path / "s.db"),
                         "--filter", long)  # fmt: skip
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and len(err) < 200
    assert err.rstrip().endswith(f"{len(long)} characters, at most {MAX_FILTER_CHARS}")


def test_a_reason_over_its_bound_bans_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    db = str(tmp_path / "s.db")
    reason = "x" * (REASON_MAX_CHARS + 1)
    code, out, err = run(capsys, "bad", "add", "4242", "--reason", reason, "--db", db)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert f"at most {REASON_MAX_CHARS} characters, got {REASON_MAX_CHARS + 1}" in err
    code, out, _ = run(capsys, "bad", "list", "--db", db, "--json")
    assert code == 0 and out == ""
    assert run(capsys, "bad", "add", "4242", "--reason", reason[:-1], "--db", db)[0] == 0


async def test_a_command_whose_text_is_over_its_bound_is_not_queued(tmp_path: Path) -> None:
    async with await Store.open(tmp_path / "s.db") as store:
        with pytest.raises(StoreError, match="at most 4096: not sent"):
            await store.commands.submit("ignore", {"machine_id": 1, "reason": "x" * 5000})
        assert await store.commands.claim() == []


async def test_the_consoles_prompts_refuse_a_paste_over_their_bound(tmp_path: Path) -> None:
    app = fixed_app(tmp_path)
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(pilot, app, lambda: app.query_one("#offers-table", RowTable).row_count > 0)
        for key, bound in (("e", MAX_FILTER_CHARS), ("i", REASON_MAX_CHARS)):
            await pilot.press(key)
            await settle(pilot, app, lambda: isinstance(app.screen, PromptScreen))
            field = app.screen.query_one(Input)
            field.value = ""
            field.insert_text_at_cursor("gpu_name=A" + "A" * 10 * MAX_FILTER_CHARS)  # a paste
            assert len(field.value) == bound + 1  # kept one over: refused, saying the bound
            await pilot.press("enter")
            await pilot.pause()
            error = str(app.screen.query_one("#prompt-error", Static).render())
            assert error == f"too long: at most {bound} characters"
            assert isinstance(app.screen, PromptScreen), "still open: nothing was sent"
            await pilot.press("escape")
            await settle(pilot, app, lambda: not isinstance(app.screen, PromptScreen))
        assert app.source.view_filter == app.opts.config.offers.filter
