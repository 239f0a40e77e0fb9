"""The warm pool (vastui/engine/pool.py) in the engine: with the automatic target, a surplus
worker is drained, then stopped (not destroyed), its tasks freed; a scale-up starts it before
renting; a start Vast queues counts as a worker on its way and is destroyed at its deadline; a
worker kept too long is destroyed; the pool's storage has its line in the spend. A real
PostgreSQL with curio's schema; the engine on the simulated cloud's ManualClock."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tests.enginekit import World
from tests.pgfixtures import CurioDb
from tests.test_engine_autoscale import auto
from tests.test_engine_cluster import events, proving_fleet
from vastui.domain.worker import InstanceRecord
from vastui.engine import spend
from vastui.engine.engine import Engine
from vastui.store import Store


async def pooled_one(world: World, store: Store, db: CurioDb) -> tuple[Engine, InstanceRecord]:
    """Two workers proving under the automatic target, the work gone: the target falls to one
    and the surplus, drained, is stopped into the warm pool."""
    auto(world, 2, 4)
    engine, _ids, machines = await proving_fleet(world, store, db, 2)
    world.config = replace(world.config, fleet=replace(world.config.fleet, min_workers=1))
    engine.config = engine.acts.config = world.config
    for _ in range(200):
        world.clock.advance(60)
        await engine.step()
        pooled = [r for r in await store.instances.all() if r.pooled_since is not None]
        if pooled:
            break
    [rec] = pooled
    assert not rec.killed and rec.drain_started_at is None
    assert db.owned(machines[rec.vast_id]) == [], "its tasks were freed"
    return engine, rec


async def test_a_surplus_worker_is_stopped_into_the_pool_and_started_before_a_rent(
    world: World, store: Store, curio_db: CurioDb
) -> None:
    engine, rec = await pooled_one(world, store, curio_db)
    sim = world.cloud.instances[rec.vast_id]
    assert sim.intended == "stopped", "stopped on Vast, not destroyed"
    [stop] = [e for e in await events(store, "pool")]
    assert "stopped into the warm pool" in stop.reason and "new rental's set-up" in stop.reason
    assert not [e for e in await events(store, "destroy") if e.instance_id == rec.vast_id]
    status = await store.status.get()
    assert status.workers == 1, "a pooled worker is not a worker of the target"
    view = await engine.fleet_view()
    assert view.pooled == 1 and rec.machine_id in view.busy_machines, "not rented anew"
    world.clock.advance(3600)
    await engine.step()
    cost = spend.pool_cost(await store.instances.get(rec.vast_id), engine.clock())
    assert cost > 0 and spend.fleet_spend(await store.instances.all(), engine.clock(), 0).pool > 0
    # work waits again: the target rises and the pooled worker starts, nothing is rented
    rents = len(await store.intents.all(kind="rent"))
    curio_db.market(6, world.clock.now())
    for _ in range(20):
        world.clock.advance(60)
        await engine.step()
        again = await store.instances.get(rec.vast_id)
        if again.pooled_since is None:
            break
    assert again.pooled_since is None and again.state in ("loading", "setup")
    assert again.pooled_s > 3600 and again.stopped_s >= again.pooled_s
    assert world.cloud.instances[rec.vast_id].intended == "running"
    assert len(await store.intents.all(kind="rent")) == rents, "started, not rented"
    assert (await events(store, "pool"))[-1].reason.startswith("started from the warm pool")
    await engine.close()


async def test_a_queued_start_is_a_worker_on_its_way_until_its_deadline(
    world: World, store: Store, curio_db: CurioDb
) -> None:
    engine, rec = await pooled_one(world, store, curio_db)
    world.cloud.force_resources_unavailable(rec.vast_id)
    curio_db.market(6, world.clock.now())
    for _ in range(20):
        world.clock.advance(60)
        await engine.step()
        queued = await store.instances.get(rec.vast_id)
        if queued.pool_start_at is not None:
            break
    assert queued.pool_start_at is not None and queued.pooled_since is not None
    assert "queued by Vast (resources_unavailable" in (await events(store, "pool"))[-1].reason
    rents = len(await store.intents.all(kind="rent"))
    world.clock.advance(60)
    await engine.step()
    assert len(await store.intents.all(kind="rent")) == rents, "on its way: nothing rented"
    world.clock.advance(10 * 60)
    await engine.step()
    gone = await store.instances.get(rec.vast_id)
    assert gone.killed and gone.kill_kind == "pool_unavailable", gone
    assert not await store.badlist.strikes(gone.machine_id or 0), "no strike: not its fault"
    await engine.step()
    assert len(await store.intents.all(kind="rent")) > rents, "rented elsewhere"
    await engine.close()


async def test_a_pooled_worker_kept_too_long_is_destroyed(
    world: World, store: Store, curio_db: CurioDb
) -> None:
    engine, rec = await pooled_one(world, store, curio_db)
    world.clock.advance(world.config.fleet.warm_pool_max_h * 3600)
    await engine.step()
    gone = await store.instances.get(rec.vast_id)
    assert (
        gone.killed
        and gone.kill_kind == "pool_expired"
        and "warm pool for" in (gone.kill_reason or "")
    )
    assert rec.vast_id not in world.cloud.instances
    # its stopped time billed as storage: the pool's line is its storage over that time
    cost = spend.pool_cost(gone, engine.clock())
    hours = (gone.killed_at - (gone.pooled_since or 0.0)) / 3600
    assert abs(cost - hours * (gone.storage_dph or 0.0)) < 1e-6
    await engine.close()


async def test_a_fixed_target_lowered_destroys_its_surplus(
    world: World, store: Store, curio_db: CurioDb
) -> None:
    fleet: dict[str, Any] = {"target_workers": 2}
    world.config = replace(world.config, fleet=replace(world.config.fleet, **fleet))
    engine, ids, _machines = await proving_fleet(world, store, curio_db, 2, tasks=0)
    world.config = replace(world.config, fleet=replace(world.config.fleet, target_workers=1))
    engine.config = engine.acts.config = world.config
    for _ in range(10):
        world.clock.advance(60)
        await engine.step()
    recs = [await store.instances.get(i) for i in ids]
    assert sorted(r.kill_kind or "" for r in recs) == ["", "surplus"]
    assert not any(r.pooled_since for r in recs) and not await events(store, "pool")
    await engine.close()


async def test_an_idle_surplus_worker_goes_to_the_pool_in_the_step_that_cordons_it(
    world: World, store: Store, curio_db: CurioDb
) -> None:
    """Holding no task, it has nothing to drain: the reading after its cordon says so, and it
    is stopped at once, not a step (or a drain's deadline) later."""
    auto(world, 2, 4)
    engine, _ids, _machines = await proving_fleet(world, store, curio_db, 2, tasks=0)
    world.config = replace(world.config, fleet=replace(world.config.fleet, min_workers=1))
    engine.config = engine.acts.config = world.config
    for _ in range(200):
        world.clock.advance(60)
        await engine.step()
        if await events(store, "cordoned"):
            break
    [cordoned] = await events(store, "cordoned")
    rec = await store.instances.get(cordoned.instance_id)
    assert rec.pooled_since == cordoned.ts and rec.drain_started_at is None
    [stop] = await events(store, "pool")
    assert "(drained: its curio machine holds no task)" in stop.reason
    assert world.cloud.instances[rec.vast_id].intended == "stopped"
    [released] = await events(store, "tasks_released")
    assert released.instance_id == rec.vast_id and released.detail["tasks"] == 0
    await engine.close()
