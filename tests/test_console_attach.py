"""A console started while a headless engine holds the lease attaches instead of running one."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
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


@contextlib.asynccontextmanager
async def headless_engine(db: Path) -> AsyncIterator[None]:
    """A stand-in for a headless engine on another host: it holds the lease and beats its
    heart every second as runtime._heartbeat does (a console counts an engine without a
    heartbeat for HEARTBEAT_STALE gone: a loaded machine takes longer than that for the test)."""
    async with await Store.open(db) as store:
        await store.lease.acquire("headless-1", pid=4242, hostname="ctl", mode="headless", ttl=30)

        async def beat() -> None:
            while True:
                await asyncio.sleep(1.0)
                await store.lease.renew("headless-1", ttl=30)

        task = asyncio.create_task(beat())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def test_attaches_and_sends_commands_through_the_store(tmp_path: Path):
    db = tmp_path / "a.db"
    async with headless_engine(db):
        await _attach_and_ignore(db)


async def _attach_and_ignore(db: Path) -> None:
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


async def test_a_finished_demo_run_is_shown_as_history(tmp_path: Path):
    """`vastui --demo --read-only --db demo-runs/...` showed the run's workers as `proving`
    beside a new run's offers: a finished demo run's cloud ended with it, so its workers read as
    they were when it ended, its offers are the ones its engine last ranked, and the strip says
    it is history."""
    from vastui.domain.engine_state import EngineStatus
    from vastui.domain.worker import InstanceRecord

    db = tmp_path / "run.db"
    async with await Store.open(db) as store:
        await store.instances.upsert(
            InstanceRecord(3000001, label="vastui-main-000000000001", state="proving",
                           machine_id=77, gpu_name="RTX 4090", num_gpus=1, dph_total=0.3),
            now=1_790_000_000.0,
        )  # fmt: skip
        await store.status.put(EngineStatus(
            target=1, workers=1, by_stage={"proving": 1}, reason_kind="at_target",
            reason="at target", best=None, dry_run=False, updated_at=1_790_000_000.0,
            simulated=True,
        ))  # fmt: skip
        await store.status.put_offers("", [], now=1_790_000_000.0)
    opts = Options(config=Config(), db=db, demo=True)
    source = await choose_source(opts, read_only=True)
    assert isinstance(source, ReadOnlySource)
    app = VastuiApp(opts, source, read_only=True)
    async with app.run_test(size=(160, 40)) as pilot:

        def summary() -> str:
            return str(app.query_one("#summary", Static).render())

        await settle(pilot, None, lambda: "HISTORY" in summary())
        assert "history: a finished demo run" in summary()
        assert await source.offers() == [], "no new world's market beside the run's workers"
        await pilot.press("2")
        table = app.query_one("#instances-table", RowTable)
        await settle(pilot, None, lambda: table.row_count == 1)
        cells = " ".join(c.plain for c in app.pane("instances")._cells(table.record_at(0)))
        assert "proving when its run ended" in cells
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
    async with contextlib.AsyncExitStack() as stack:
        if not read_only:
            await stack.enter_async_context(headless_engine(db))
        await _cluster_tab(db, read_only)


async def _cluster_tab(db: Path, read_only: bool) -> None:
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
