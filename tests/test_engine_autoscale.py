"""The engine with ``fleet.target_workers = "auto"`` (vastui/engine/autoscale.py): the target
follows the work curio's cluster holds, each change an event with its reason, the status says
it, a lowered target drains its surplus, and without a reading of the cluster it holds. A real
PostgreSQL with curio's schema; the engine on the simulated cloud's ManualClock."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tests.enginekit import World
from tests.pgfixtures import CurioDb
from tests.test_engine_cluster import engine_on, events, proving_fleet
from vastui.engine.autoscale import State
from vastui.store import Store


def auto(world: World, lo: int, hi: int, **more: Any) -> None:
    fleet = replace(world.config.fleet, auto_target=True, min_workers=lo, max_workers=hi, **more)
    world.config = replace(world.config, fleet=fleet)


async def test_work_left_waiting_raises_the_target_and_a_worker_is_rented(
    world: World, store: Store, curio_db: CurioDb
) -> None:
    auto(world, 2, 4)
    engine, _ids, _machines = await proving_fleet(world, store, curio_db, 2)
    assert (await store.status.get()).target == 2
    # the cluster holds six requests no node claimed: both workers are full
    curio_db.market(6, world.clock.now())
    await engine.step()
    assert (await store.status.get()).target == 2, "one busy minute rents nothing"
    world.clock.advance(6 * 60)
    await engine.step()
    status = await store.status.get()
    assert status.target == 3
    auto_status = status.cluster["autoscale"]
    assert auto_status["target"] == 3 and auto_status["unclaimed"] == 6
    assert auto_status["reason"].startswith("work waits: 6 requests unclaimed for 6 min (2 ")
    [change] = await events(store, "target")
    assert change.reason == auto_status["reason"] and change.detail["after"] == 3
    live = await store.instances.all(include_killed=False)
    rents = await store.intents.all(kind="rent")
    assert len(live) + len([i for i in rents if i.status == "pending"]) == 3, "one more rented"
    # a restarted engine keeps the target and its history
    await engine.close()
    again = await engine_on(world, store, curio_db)
    await again.step()
    assert (await store.status.get()).target == 3
    assert len(await events(store, "target")) == 1
    await again.close()


async def test_idle_workers_lower_the_target_and_the_surplus_is_drained(
    world: World, store: Store, curio_db: CurioDb
) -> None:
    auto(world, 2, 4)
    engine, _ids, machines = await proving_fleet(world, store, curio_db, 2)
    world.config = replace(world.config, fleet=replace(world.config.fleet, min_workers=1))
    engine.config = world.config
    for _ in range(31):  # half an hour with nothing done and nothing waiting
        world.clock.advance(60)
        await engine.step()
        if (await store.status.get()).target == 1:
            break
    status = await store.status.get()
    assert status.target == 1
    [change] = await events(store, "target")
    assert change.reason.startswith("workers idle: the fleet proved 0/h of its")
    assert change.detail["direction"] == "down"
    await engine.step()
    drained = [r.vast_id for r in await store.instances.all() if r.drain_started_at is not None]
    assert len(drained) == 1 and len(await events(store, "cordoned")) == 1
    assert curio_db.unschedulable(machines[drained[0]]) is True
    await engine.close()


async def test_without_a_reading_of_the_cluster_the_target_holds(
    world: World, store: Store, curio_db: CurioDb
) -> None:
    auto(world, 1, 4)
    await store.put_autoscale(State(3).to_json(), None, now=world.clock.now(), detail={})
    engine = await world.engine(store)  # no cluster reader
    await engine.step()
    status = await store.status.get()
    assert status.target == 3
    assert engine.auto is not None and engine.auto.reason == "holding 3: curio's cluster not read"
    assert await events(store, "target") == []
    await engine.close()
