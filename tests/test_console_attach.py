"""A console started while a headless engine holds the lease attaches instead of running one."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import Static

from tests.helpers import settle
from vastui.backend import Options
from vastui.config import Config
from vastui.console.app import VastuiApp
from vastui.console.rowtable import RowTable
from vastui.console.sources import AttachedSource, ReadOnlySource, choose_source
from vastui.store import Store


async def hold_lease(db: Path) -> None:
    async with await Store.open(db) as store:
        await store.lease.acquire("headless-1", pid=4242, hostname="ctl", mode="headless", ttl=600)


async def test_attaches_and_sends_commands_through_the_store(tmp_path: Path):
    db = tmp_path / "a.db"
    await hold_lease(db)
    opts = Options(config=Config(), db=db, demo=True)
    source = await choose_source(opts)
    assert isinstance(source, AttachedSource)
    app = VastuiApp(opts, source)
    async with app.run_test(size=(160, 40)) as pilot:
        await settle(pilot, None, lambda: app.query_one("#offers-table", RowTable).row_count > 0)
        assert source.attached_to is not None and source.attached_to.pid == 4242
        await settle(
            pilot, None, lambda: "ATTACHED" in str(app.query_one("#summary", Static).render())
        )
        machine = app.pane("offers").selected_offer().offer.machine_id
        await pilot.press("i")
        await pilot.pause()
        await pilot.press("enter")  # the default reason
        await pilot.pause()
    async with await Store.open(db) as store:
        [cmd] = await store.commands.claim()
        assert cmd.kind == "ignore" and cmd.args["machine_id"] == machine
        assert await store.badlist.all() == [], "the console itself changed nothing"
        holder = await store.lease.holder()
        assert holder is not None and holder.owner == "headless-1", "the lease was not taken"


async def test_read_only_console_runs_no_engine(tmp_path: Path):
    db = tmp_path / "r.db"
    opts = Options(config=Config(), db=db, demo=True)
    source = await choose_source(opts, read_only=True)
    assert isinstance(source, ReadOnlySource)
    app = VastuiApp(opts, source, read_only=True)
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(pilot, None, lambda: app.query_one("#offers-table", RowTable).row_count > 0)

        def summary() -> str:
            return str(app.query_one("#summary", Static).render())

        # the strip says so once the first snapshot is in (the offers may come first)
        await settle(pilot, None, lambda: "NO ENGINE" in summary())
        assert "READ-ONLY" in summary()
    async with await Store.open(db) as store:
        assert await store.lease.holder() is None
