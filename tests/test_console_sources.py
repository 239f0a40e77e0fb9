"""Attach versus run, for real: a console started beside a running `vastui --engine-only` reads
that engine and sends it commands without starting one; a console with no engine beside it
runs its own (`engine_runtime`, the demo's). No stand-in for either engine."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from textual.widgets import Static

from tests.helpers import eventually, settle
from vastui.backend import Options
from vastui.cli import main
from vastui.config import Config
from vastui.console.app import VastuiApp
from vastui.console.sources import AttachedSource, OwnEngineSource, choose_source
from vastui.demo_cluster import access_path
from vastui.domain.engine_state import Lease
from vastui.engine.runtime import RunOptions
from vastui.store import Store, StoreNotCurrent

REPO = Path(__file__).resolve().parents[1]
SEED = 7


def strip(app: VastuiApp) -> str:
    return str(app.query_one("#summary", Static).render())


async def holder_of(db: Path) -> Lease | None:
    try:
        store = await Store.open(db, migrate=False)
    except StoreNotCurrent:
        return None  # not made (or migrated) yet
    async with store:
        return await store.lease.holder()


def cluster_header(app: VastuiApp) -> str:
    return str(app.query_one("#cluster-header", Static).render())


async def test_an_attached_console_reads_and_commands_an_engine_it_did_not_start(
    demo_state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = demo_state / "fleet.db"
    argv = [sys.executable, "-m", "vastui", "--engine-only", "--demo", "--db", str(db),
            "--seed", str(SEED), "--speed", "100", "--target-workers", "1", "--dry-run",
            "--for", "300s"]  # fmt: skip
    engine = subprocess.Popen(
        argv, cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        lease = await eventually(lambda: holder_of(db), what="the headless engine's lease")
        assert lease.pid == engine.pid and lease.mode == "headless"
        # `vastui --demo cluster` in another terminal reads the demo's own curio database
        await eventually(access_path(db).exists, what="the demo's cluster access")
        assert await asyncio.to_thread(main, ["--demo", "--db", str(db), "cluster", "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["reader"] == {"state": "ok", "address": report["reader"]["address"]}
        opts = Options(config=Config(), db=db, demo=True, seed=SEED)
        source = await choose_source(opts)
        assert isinstance(source, AttachedSource)
        app = VastuiApp(opts, source)
        async with app.run_test(size=(200, 50)) as pilot:
            # That engine's state: its status (dry-run), its heartbeat, the offers it published.
            await settle(pilot, app, lambda: "ATTACHED" in strip(app) and "DRY-RUN" in strip(app))
            await settle(pilot, app, lambda: app.offers)

            async def shows_a_publication() -> bool:
                """What it shows is what the engine published (the engine publishes again
                as it searches: the console catches up with the newest)."""
                async with await Store.open(db, migrate=False) as store:
                    published = await store.status.get_offers()
                ids = {row["offer"]["id"] for row in published[1]} if published else set()
                return bool(ids) and {r.offer.id for r in app.offers} <= ids

            await settle(pilot, app, shows_a_publication)

            # curio's cluster as that engine reads it (the demo's own database)
            await pilot.press("5")
            await settle(pilot, app, lambda: "curio's cluster at 127.0.0.1:" in cluster_header(app))
            await pilot.press("1")

            # A command the console sends, carried out by the other process's engine.
            machine = app.pane("offers").selected_offer().offer.machine_id  # type: ignore[union-attr]
            await pilot.press("i")
            await pilot.pause()
            await pilot.press("enter")  # the default reason

            async def banned() -> bool:
                async with await Store.open(db, migrate=False) as store:
                    return machine in await store.badlist.machine_ids()

            await settle(pilot, app, banned)
            still = await holder_of(db)
            assert still is not None and still.pid == engine.pid, "the console took no lease"

            # That engine goes: the console says so, and runs none of its own.
            engine.send_signal(signal.SIGTERM)
            assert engine.wait(60) == 0
            await settle(pilot, app, lambda: "DETACHED" in strip(app))
        assert await holder_of(db) is None
    finally:
        if engine.poll() is None:
            engine.kill()
            engine.wait()


async def test_a_console_with_no_engine_beside_it_runs_its_own(demo_state: Path) -> None:
    db = demo_state / "fleet.db"
    opts = Options(config=Config(), db=db, demo=True, seed=SEED, speed=100)
    run = RunOptions(speed=100, seed=SEED, target_workers=1, dry_run=True, mode="console")
    source = await choose_source(opts, run=run)
    assert isinstance(source, OwnEngineSource)
    app = VastuiApp(opts, source)
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(pilot, app, lambda: app.snapshot.lease is not None and "DRY-RUN" in strip(app))
        lease = app.snapshot.lease
        assert lease is not None and lease.pid == os.getpid() and lease.mode == "console"
        assert "ATTACHED" not in strip(app) and "NO ENGINE" not in strip(app)
        await settle(pilot, app, lambda: app.offers)
        await pilot.press("5")
        await settle(pilot, app, lambda: "curio's cluster at 127.0.0.1:" in cluster_header(app))
        # A second console started now attaches to this one's engine.
        second = await choose_source(opts)
        assert isinstance(second, AttachedSource)
        assert second.attached_to is not None and second.attached_to.owner == lease.owner
    # Its engine stopped with it, and let the lease go.
    assert await holder_of(db) is None
