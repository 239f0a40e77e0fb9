"""A console started while a headless engine holds the lease attaches instead of running one."""

from __future__ import annotations

from pathlib import Path

import pytest
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


async def fleet_with_a_cluster_reading(db: Path) -> None:
    """A store as an engine leaves it after reading curio's cluster: a proving worker's reading
    in its record, the totals and an orphan in its published status."""
    import json
    import time

    from vastui.domain.engine_state import EngineStatus
    from vastui.domain.worker import InstanceRecord

    now = time.time()
    async with await Store.open(db) as store:
        rec = InstanceRecord(
            vast_id=501, label="vastui-main-0000000001f5", state="proving", runner_id=3,
            created_at=now - 900, proving_at=now - 300,
            cluster_state=json.dumps({
                "machine_id": 12, "host_and_port": "127.0.0.1:12403", "last_contact": now - 20,
                "cordoned": False, "held": 2, "held_by_name": {"PSProve": 2}, "done": 5,
                "failed": 0, "last_error": None,
            }),
            cluster_checked_at=now - 2,
        )  # fmt: skip
        await store.instances.upsert(rec, now=now)
        cluster = {
            "state": "ok", "address": "127.0.0.1:5433", "read_at": now - 2, "window_s": 3600,
            "machines": 3, "psprove_waiting": 1, "psprove_claimed": 2,
            "orphans": [{"machine_id": 13, "host_and_port": "127.0.0.1:12409",
                         "name": "vastui-main-r9", "last_contact": now - 90, "cordoned": False}],
            "orphans_total": 1,
        }  # fmt: skip
        await store.status.put(
            EngineStatus(
                target=1,
                workers=1,
                by_stage={"proving": 1},
                reason_kind=None,
                reason=None,
                best=None,
                dry_run=False,
                updated_at=now,
                wall_at=now,
                cluster=cluster,
            )
        )


@pytest.mark.parametrize("read_only", [False, True])
async def test_the_cluster_tab_shows_the_engines_reading_without_one(
    tmp_path: Path, read_only: bool
) -> None:
    """Attached to a headless engine, or reading the store only, the console shows curio's
    cluster as the engine published it: no connection of its own to curio's database."""
    db = tmp_path / "c.db"
    await fleet_with_a_cluster_reading(db)
    if not read_only:
        await hold_lease(db)
    opts = Options(config=Config(), db=db, demo=True)
    source = await choose_source(opts, read_only=read_only)
    assert isinstance(source, ReadOnlySource if read_only else AttachedSource)
    app = VastuiApp(opts, source, read_only=read_only)
    async with app.run_test(size=(160, 40)) as pilot:
        await settle(pilot, None, lambda: app.snapshot.engine_status is not None)
        await pilot.press("5")
        table = app.query_one("#cluster-table", RowTable)
        await settle(pilot, None, lambda: table.row_count == 2)
        assert [str(table.key_at(i)) for i in range(2)] == ["501-12", "orphan-13"]
        said = str(app.query_one("#cluster-header", Static).render())
        assert "read 2s ago: 1 machine of this fleet, 1 orphan" in said
