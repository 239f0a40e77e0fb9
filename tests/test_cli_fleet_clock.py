"""The event log has one clock: `vastui bad add/remove` beside a demo engine stamped its
`unban` in real time, listed after a `ban` stamped in simulated time a day later. With a live
engine on the database the CLI's write goes to it (the commands table, as the console's do), and
the engine records it on its clock; with none, the CLI stamps it on the fleet's clock (a
simulated fleet's last cycle), never the wall clock."""

from __future__ import annotations

import asyncio
import os
import socket
import time
from pathlib import Path

import pytest

from tests.enginekit import World
from tests.test_cli import run
from vastui.domain.engine_state import EngineStatus
from vastui.store import Store

SIM_NOW = 2_000_000_000.0  # a simulated clock years ahead of the wall


def status_at(now: float) -> EngineStatus:
    return EngineStatus(
        target=1, workers=0, by_stage={}, reason_kind=None, reason=None, best=None,
        dry_run=False, updated_at=now, wall_at=time.time(), simulated=True,
    )  # fmt: skip


async def stamps(db: Path) -> list[tuple[str, float]]:
    async with await Store.open(db) as store:
        return [(e.kind, e.ts) for e in await store.events.all() if e.kind in ("ban", "unban")]


async def test_without_an_engine_the_cli_writes_on_the_fleets_clock(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "demo.db"
    async with await Store.open(db) as store:
        await store.status.put(status_at(SIM_NOW))
    code, out, _ = await asyncio.to_thread(
        run, capsys, "bad", "add", "4242", "--reason", "slow", "--db", str(db)
    )
    assert code == 0 and "4242 is on the bad list" in out
    code, out, _ = await asyncio.to_thread(run, capsys, "bad", "remove", "4242", "--db", str(db))
    assert code == 0 and "removed" in out
    assert await stamps(db) == [("ban", SIM_NOW), ("unban", SIM_NOW)]


async def test_beside_a_live_engine_the_engine_writes_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    world = World(tmp_path)
    world.clock.advance(SIM_NOW - world.clock.now())
    db = tmp_path / "s.db"
    async with await Store.open(db) as store:
        engine = await world.engine(store)
        await store.lease.acquire("engine-1", pid=os.getpid(), hostname=socket.gethostname(),
                                  mode="headless", ttl=60)  # fmt: skip
        cli = asyncio.create_task(
            asyncio.to_thread(
                run, capsys, "bad", "add", "4242", "--reason", "slow", "--db", str(db)
            )
        )
        while not cli.done():  # the engine's steps take the commands first
            await engine.run_commands()
            await asyncio.sleep(0.05)
        code, out, _ = cli.result()
        assert code == 0 and out.strip() == "machine 4242 ignored", out
        world.clock.advance(3600)
        cli = asyncio.create_task(
            asyncio.to_thread(run, capsys, "bad", "remove", "4242", "--db", str(db))
        )
        while not cli.done():
            await engine.run_commands()
            await asyncio.sleep(0.05)
        code, out, _ = cli.result()
        assert code == 0 and out.strip() == "machine 4242 unignored", out
        await engine.close()
    assert await stamps(db) == [("ban", SIM_NOW), ("unban", SIM_NOW + 3600)]
