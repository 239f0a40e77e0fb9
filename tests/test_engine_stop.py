"""A stop (SIGTERM, `--for`, the console's quit) while an act is in flight: the engine stops
deciding, waits (within ACTS_STOP_S) for the destroy and its release to be recorded, then its
followers end, and only then may the store close. Nothing is written after it; no "database is
closed". The engine runs on the simulated cloud's ManualClock (tests/enginekit.py) with curio's
cluster on a real PostgreSQL (tests/pgfixtures.py); the act is held in flight until the stop is
asked."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.enginekit import World
from tests.helpers import eventually
from tests.pgfixtures import CurioDb
from tests.test_engine_cluster import events, ident, proving_fleet, target
from vastui.store import Store


def errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


async def test_a_stop_during_a_drained_workers_destroy_waits_for_it_and_its_release(
    world: World, store: Store, curio_db: CurioDb, caplog: pytest.LogCaptureFixture
) -> None:
    db = curio_db
    target(world, 2)
    engine, _ids, machines = await proving_fleet(world, store, db, 2, tasks=1)
    target(world, 1)
    engine.config = world.config
    await engine.step()  # the surplus is cordoned: it drains
    [rec] = [r for r in await store.instances.all() if r.drain_started_at is not None]
    for task in db.owned(machines[rec.vast_id]):  # it finishes what it held
        db.complete(task, ident(rec)[0], True, "", world.clock.now())
    world.clock.advance(60)
    stop = asyncio.Event()
    sent = asyncio.Event()
    real = engine.client.destroy_instance

    async def destroy_until_the_stop(instance_id: int) -> bool:
        sent.set()
        await stop.wait()  # the SIGTERM arrives while the DELETE is out
        return await real(instance_id)

    engine.client.destroy_instance = destroy_until_the_stop  # type: ignore[method-assign]
    caplog.set_level("INFO")
    runner = asyncio.create_task(engine.run(stop))
    await eventually(sent.is_set, what="the drained worker's destroy sent")
    stop.set()
    await runner
    await engine.close()
    done = await store.instances.get(rec.vast_id)
    assert done.killed and "drained: " in done.kill_reason
    assert done.released_at is not None and done.released_tasks == 0
    assert [e.instance_id for e in await events(store, "destroy")] == [rec.vast_id]
    assert [e.instance_id for e in await events(store, "tasks_released")] == [rec.vast_id]
    assert db.unschedulable(machines[rec.vast_id]) is None  # its row deleted with the release
    assert [i.status for i in await store.intents.all(kind="destroy")] == ["done"]
    said = [r.getMessage() for r in caplog.records]
    assert any(f"destroy of instance {rec.vast_id}" in m and "waiting" in m for m in said)
    assert errors(caplog) == []


class DeadDaemon:
    """A proving worker over SSH whose cuzk daemon has exited: its first counters reading
    destroys it (prove_daemon_died). Its event stream says nothing."""

    async def cuzk_counters(self) -> dict[str, Any]:
        return {"alive": False, "exit_status": 1, "daemon_pid": 77}

    async def status(self) -> dict[str, Any]:
        return {}

    async def positioned_events(self, after: int = 0) -> AsyncIterator[tuple[int, Any]]:
        await asyncio.Event().wait()
        yield after, None  # never reached


class Pool:
    def worker(self, vast_id: int, endpoint: tuple[str, int]) -> DeadDaemon:
        return DeadDaemon()

    async def close_instance(self, vast_id: int) -> None:
        return None

    async def close_all(self) -> None:
        return None


async def test_a_stop_while_a_follower_destroys_its_worker_closes_nothing_under_it(
    world: World, store: Store, curio_db: CurioDb, caplog: pytest.LogCaptureFixture
) -> None:
    """The follower that destroys its own worker stops following it (it lets go of its own
    task) and goes on to record the destroy and release its tasks: the engine's close waits
    for it before the store closes."""
    db = curio_db
    target(world, 0)
    engine, [a], machines = await proving_fleet(world, store, db, 1, tasks=2)
    held = db.owned(machines[a])
    engine.follow.ssh = Pool()  # type: ignore[assignment]
    stop = asyncio.Event()
    releasing: list[asyncio.Task[Any] | None] = []
    real = engine.cluster.release

    async def release_until_the_stop(worker: Any, *, keep_row: bool = False) -> Any:
        releasing.append(asyncio.current_task())
        await stop.wait()  # the SIGTERM arrives while the release is out
        return await real(worker, keep_row=keep_row)

    engine.cluster.release = release_until_the_stop  # type: ignore[method-assign]
    caplog.set_level("INFO")
    runner = asyncio.create_task(engine.run(stop))
    await eventually(lambda: releasing, what="the follower's destroy releasing its tasks")
    stop.set()
    # as the runtime ends: the engine's run, its close, then the store's
    await runner
    await engine.close()
    await store.close()
    follower = releasing[0]
    assert follower is not None and follower.get_name() == f"monitor-{a}"
    await asyncio.wait([follower], timeout=30)  # a follower let go of: nothing may be left
    assert errors(caplog) == []
    assert not any("is closed" in r.getMessage() for r in caplog.records)
    again = await Store.open(store.db.path)
    try:
        rec = await again.instances.get(a)
        assert rec.killed and rec.kill_kind == "prove_daemon_died"
        assert rec.released_tasks == 2
        assert [e.instance_id for e in await again.events.all(kind="tasks_released")] == [a]
    finally:
        await again.close()
    assert db.q("SELECT owner_id FROM harmony_task WHERE id = ANY(%s)", (held,)) == [(None,)] * 2


async def test_a_destroy_asked_while_the_engine_stops_is_sent_at_its_next_start(
    world: World, store: Store, curio_db: CurioDb
) -> None:
    """Nothing is sent once a stop is asked; the operator's destroy is not lost: it is a
    pending intent, which the next engine carries out."""
    from tests.helpers import destroy
    from vastui.engine.acts import EngineError

    target(world, 0)
    engine, [a], _machines = await proving_fleet(world, store, curio_db, 1, tasks=0)
    engine.acts.stopping = lambda: True  # a stop was asked
    with pytest.raises(EngineError, match="the engine is stopping"):
        await destroy(engine, a)
    assert a in world.cloud.instances and not (await store.instances.get(a)).killed
    [intent] = await store.intents.all(kind="destroy")
    assert intent.status == "pending"
    await engine.close()
    again = await world.engine(store)
    again.cluster = again.acts.cluster = curio_db.reader()
    await again.step()
    done = await store.instances.get(a)
    assert done.killed and done.kill_kind == "manual" and a not in world.cloud.instances
    assert done.released_at is not None
    await again.close()
