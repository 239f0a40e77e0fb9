"""Vast's lists lag (vast-api.md; SkyPilot and dstack both learned it): a new instance missing
from every answer for a while, served over real HTTP. One miss is evidence, not the truth: an
instance this fleet rented keeps its slot while it is unseen, is not rented twice, and is never
destroyed as unknown when it shows up. The engine and the cloud share a ManualClock; each step
moves it on by STEP simulated seconds."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from tests.enginekit import World, no_sleep
from vastsim import serve
from vastui.engine.engine import Engine
from vastui.store import Store
from vastui.vast.client import RetryPolicy, VastClient

STEP = 10.0


@asynccontextmanager
async def served_engine(world: World, store: Store) -> AsyncIterator[Engine]:
    """The engine, talking to ``world.cloud`` over real HTTP on loopback."""
    port: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    server = asyncio.create_task(serve(world.cloud, port=0, ready=port.set_result))
    url = f"http://127.0.0.1:{await asyncio.wait_for(port, 10)}"
    world.client = lambda: VastClient(  # type: ignore[method-assign]
        world.cloud.api_key, url, pacing={}, sleep=no_sleep, retry=RetryPolicy(create_lookups=2)
    )
    engine = await world.engine(store)
    try:
        yield engine
    finally:
        await engine.close()
        server.cancel()
        with pytest.raises(asyncio.CancelledError):
            await server


async def run(engine: Engine, world: World, seconds: float) -> None:
    for _ in range(int(seconds / STEP)):
        world.clock.advance(STEP)
        await engine.step()


@pytest.mark.parametrize("lag", [30.0, 240.0], ids=["30s", "240s"])
async def test_a_new_instance_missing_from_the_lists_is_rented_once_and_never_destroyed(
    tmp_path, store: Store, lag: float
) -> None:
    world = World(tmp_path, target=1)
    world.cloud.list_lag_s = lag
    async with served_engine(world, store) as engine:
        await run(engine, world, lag + 120.0)
        rents = await store.intents.all(kind="rent")
        assert len(rents) == 1, [(i.status, i.note) for i in rents]
        assert len(world.cloud.instances) == 1, "one instance on the account"
        [rec] = await store.instances.all(include_killed=True)
        assert not rec.killed and rec.vast_id in world.cloud.instances
        assert await store.events.all(kind="kill") == []
        assert await store.events.all(kind="destroy") == []


async def test_a_list_that_lags_past_the_vanish_age_is_bounded_and_loses_no_instance(
    tmp_path, store: Store
) -> None:
    """Longer than the engine waits (VANISH_MIN_AGE, 300 s): a new instance is recorded gone and
    its slot rented again, at most fleet.max_rents_per_slot_hour times an hour (the breaker);
    one that shows up is adopted back, never destroyed as unknown. Once the lists catch up,
    every instance on the account is one the database tracks, and every record it calls
    destroyed is gone from the account. (Nothing reports from these workers: their first-report
    deadline ends them, a destroy with its reason.)"""
    world = World(tmp_path, target=1)
    world.cloud.list_lag_s = 900.0
    cap = world.config.fleet.max_rents_per_slot_hour
    async with served_engine(world, store) as engine:
        await run(engine, world, 3600.0)
        rents = await store.intents.all(kind="rent")
        assert 2 <= len(rents) <= cap, [(i.status, i.note) for i in rents]
        adopted = [e.reason for e in await store.events.all(kind="adopt")]
        assert any("listed again after it was recorded vanished" in r for r in adopted)
        world.cloud.list_lag_s = 0.0  # the lists catch up
        await run(engine, world, 3 * STEP)
        records = {r.vast_id: r for r in await store.instances.all(include_killed=True)}
        for vast_id in world.cloud.instances:
            assert vast_id in records and not records[vast_id].killed, records.get(vast_id)
        for rec in records.values():
            if rec.killed:
                assert rec.vast_id not in world.cloud.instances
        assert sum(not r.killed for r in records.values()) <= 1
