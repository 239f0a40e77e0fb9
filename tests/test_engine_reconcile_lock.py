"""A step holds the engine's lock one worker at a time (issue 32): a worker's event is decided
between two workers' reconciles, not after the whole fleet's, and a worker it changed is read
again before the reconcile judges it. What the listing changed of workers that need nothing
else is written at the reconcile's end, in one transaction."""

from __future__ import annotations

import asyncio

import pytest

from tests.enginekit import World, rent_distinct
from vastui.domain.reports import parse_event
from vastui.domain.worker import InstanceRecord
from vastui.engine.engine import Engine
from vastui.store import Store


@pytest.fixture
def world(tmp_path):
    return World(tmp_path)


@pytest.fixture
async def store(tmp_path):
    s = await Store.open(tmp_path / "s.db")
    yield s
    await s.close()


class Recorder:
    """The order in which the engine decided: reconciles and events, by worker."""

    def __init__(self, engine: Engine) -> None:
        self.order: list[tuple[str, int]] = []
        self.tasks: list[asyncio.Task[bool]] = []
        reconcile_one = engine._reconcile_one

        async def recorded(rec: InstanceRecord, *args, **kwargs) -> None:
            self.order.append(("reconcile", rec.vast_id))
            await reconcile_one(rec, *args, **kwargs)

        engine._reconcile_one = recorded  # type: ignore[method-assign]


FAIL = {"stage": "setup", "event": "fail", "reason": "setup failed: disk full"}


async def test_an_event_is_decided_between_two_workers_reconciles(world, store):
    engine = await world.engine(store)
    ids = await rent_distinct(world, engine, 3)
    first, _, last = ids
    recorder = Recorder(engine)
    inner = engine._reconcile_one

    async def first_sends_an_event(rec: InstanceRecord, *args, **kwargs) -> None:
        if rec.vast_id == first and not recorder.tasks:
            # The last worker fails while the reconcile is on the first.
            recorder.tasks.append(
                asyncio.create_task(engine.handle_worker_event(last, parse_event(FAIL)))
            )
        await inner(rec, *args, **kwargs)
        await asyncio.sleep(0)  # the event's task waits on the lock by now

    engine._reconcile_one = first_sends_an_event  # type: ignore[method-assign]
    decided = engine.handle_worker_event

    async def recorded_event(vast_id: int, event, **kwargs) -> bool:
        live = await decided(vast_id, event, **kwargs)
        recorder.order.append(("event", vast_id))
        return live

    engine.handle_worker_event = recorded_event  # type: ignore[method-assign]
    world.clock.advance(30)
    await engine.step()
    assert recorder.tasks and await recorder.tasks[0] is False
    # Decided after the first worker's reconcile, before the next one's ...
    assert recorder.order.index(("event", last)) == 1, recorder.order
    # ... and the worker it killed is not judged on the record read before.
    assert ("reconcile", last) not in recorder.order
    rec = await store.instances.get(last)
    assert rec is not None and rec.killed and rec.kill_reason is not None
    await engine.close()


async def test_what_the_listing_changed_is_written_once_at_the_end(world, store, monkeypatch):
    engine = await world.engine(store)
    ids = await rent_distinct(world, engine, 3)
    calls: list[list[int]] = []
    update_observed = store.instances.update_observed

    async def counted(rows) -> int:
        rows = list(rows)
        calls.append(sorted(vast_id for vast_id, _ in rows))
        return await update_observed(rows)

    monkeypatch.setattr(store.instances, "update_observed", counted)
    # A minute on: each worker's listing time is due, nothing else changed.
    world.clock.advance(61)
    await engine.step()
    assert calls == [sorted(ids)]
    now = world.clock.now()
    for vast_id in ids:
        rec = await store.instances.get(vast_id)
        assert rec is not None and rec.last_seen_at == pytest.approx(now, abs=1.0)
    # Within the minute: nothing is written at all.
    world.clock.advance(5)
    await engine.step()
    assert calls == [sorted(ids)]
    await engine.close()


async def test_observed_writes_leave_a_killed_row_alone(world, store):
    engine = await world.engine(store)
    first, second = await rent_distinct(world, engine, 2)
    await engine.handle_worker_event(second, parse_event(FAIL))
    killed = await store.instances.get(second)
    assert killed is not None and killed.killed
    written = await store.instances.update_observed(
        [(first, {"vast_status": "exited", "last_seen_at": 1.0}),
         (second, {"vast_status": "running", "last_seen_at": 2.0})]
    )  # fmt: skip
    assert written == 1
    after = await store.instances.get(second)
    assert after == killed
    rec = await store.instances.get(first)
    assert rec is not None and (rec.vast_status, rec.last_seen_at) == ("exited", 1.0)
    with pytest.raises(ValueError, match="not updatable piecemeal"):
        await store.instances.update_observed([(first, {"state": "proving"})])  # type: ignore[typeddict-unknown-key]
    await engine.close()
