"""The engine under bad luck (issue 10): the target honoured downwards, acts cut short by a crash
finished on the next start, a stop that ends a step stuck in a wait, a dead store that stops the
engine instead of letting it limp."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from tests.enginekit import World, rent_distinct, rent_one, result
from tests.helpers import deploy
from vastui.config import Config
from vastui.domain.reports import parse_event
from vastui.domain.worker import InstanceRecord
from vastui.engine import policy, provision
from vastui.engine.engine import EngineError
from vastui.engine.provision import Worker, surplus
from vastui.engine.spend import is_rejected
from vastui.numbers import parse_number
from vastui.store import Store
from vastui.store.errors import StoreFatal

# -- shrinking: which workers are surplus (pure) --------------------------------------------

W = Worker


@pytest.mark.parametrize(
    ("workers", "target", "pending", "expected"),
    [
        # at or below the target: nothing
        ([W(1, "proving", 10, 0.005)], 1, 0, []),
        ([W(1, "proving", 10, 0.005)], 2, 0, []),
        # target 0 is manual mode: never shrunk
        ([W(1, "proving", 10, 0.005), W(2, "loading", 20)], 0, 0, []),
        # not proving first, least advanced stage first
        ([W(1, "proving", 10, 0.009), W(2, "benchmark", 5), W(3, "loading", 1)], 1, 0, [3, 2]),
        # same stage: the newest first
        ([W(1, "setup", 10), W(2, "setup", 30), W(3, "setup", 20)], 1, 0, [2, 3]),
        # proving: the worst measured $/proof first; unknown counts as worst
        (
            [W(1, "proving", 10, 0.004), W(2, "proving", 10, 0.007), W(3, "proving", 10, None)],
            1,
            0,
            [3, 2],
        ),
        # a rent in flight counts towards the target but cannot be destroyed
        ([W(1, "proving", 10, 0.004), W(2, "proving", 11, 0.005)], 2, 1, [2]),
        ([W(1, "proving", 10, 0.004)], 1, 3, [1]),
    ],
)
def test_surplus_order(workers, target, pending, expected):
    assert [w.vast_id for w in surplus(workers, target, pending)] == expected


def test_manual_rent_refused_only_at_a_positive_target():
    view = provision.FleetView(target=2, max_concurrent_benchmarks=2, max_cost_per_proof=0.008)
    assert provision.manual_rent_refusal(replace(view, by_stage={"proving": 1})) is None
    refusal = provision.manual_rent_refusal(replace(view, by_stage={"proving": 2}))
    assert refusal is not None and refusal.startswith("at target: 2/2 workers")
    assert provision.manual_rent_refusal(replace(view, target=0, by_stage={"proving": 5})) is None


@pytest.mark.parametrize(
    ("count", "threshold", "banned"),
    [(1, 3, False), (2, 3, False), (3, 3, True), (4, 3, True), (5, 0, False)],
)
def test_strike_ban_threshold(count, threshold, banned):
    ban = policy.strike_ban(count, threshold, "failed proofs")
    assert (ban is not None) == banned
    if banned:
        assert ban == f"{count} strikes, the last: failed proofs"


def test_reconcile_kill_bad_list_first():
    rec = InstanceRecord(vast_id=1, label="vastui-main-x", machine_id=9, state="proving")
    kill = policy.reconcile_kill(rec, 0.0, Config(), "flaky GPU")
    assert kill is not None and kill.kind == "bad_machine"
    assert kill.reason == "machine 9 is on the bad list: flaky GPU"
    assert policy.reconcile_kill(rec, 0.0, Config(), None) is None


@pytest.mark.parametrize(
    ("raw", "parsed"),
    [(12.5, 12.5), ("12.5", 12.5), ("1e2", 100.0), ("1_0", None), ("inf", None),
     ("nan", None), (float("inf"), None), (True, None), ("0x10", None), (" 7 ", 7.0)],
)  # fmt: skip
def test_worker_numbers_are_plain_finite_decimals(raw, parsed):
    assert parse_number(raw) == parsed


# -- the target honoured downwards --------------------------------------------------------


async def _fleet_of(world: World, store: Store, n: int) -> list[int]:
    engine = await world.engine(store)
    ids = await rent_distinct(world, engine, n)  # a machine holds one worker at a time
    await engine.close()
    return ids


async def test_lowering_the_target_destroys_the_surplus(world: World, store: Store):
    ids = await _fleet_of(world, store, 3)
    # The first worker proves (its benchmark passed at a rate well above its min_rate).
    engine = await world.engine(store)
    await engine.handle_worker_event(ids[0], parse_event({"stage": "benchmark", "event": "start"}))
    rec = await store.instances.get(ids[0])
    await engine.handle_worker_event(ids[0], parse_event(result("pass", (rec.min_rate or 1) * 3)))
    await engine.handle_worker_event(ids[0], parse_event({"stage": "prove", "event": "start"}))
    assert (await store.instances.get(ids[0])).state == "proving"
    world.config = replace(world.config, fleet=replace(world.config.fleet, target_workers=1))
    engine = await world.engine(store)
    await engine.step()
    live = await store.instances.all(include_killed=False)
    assert [r.vast_id for r in live] == [ids[0]], "the proving worker stays"
    for iid in ids[1:]:
        rec = await store.instances.get(iid)
        assert rec.kill_kind == "surplus"
        assert rec.kill_reason.startswith("above target: 3 workers > target 1")
        assert not is_rejected(rec), "released, not rejected"
        assert iid not in world.cloud.instances, "destroyed on Vast"
    destroys = {e.instance_id for e in await store.events.all(kind="destroy")}
    assert set(ids[1:]) <= destroys
    assert engine.status is not None and engine.status.reason_kind == "at_target"
    await engine.close()


async def test_a_manual_rent_at_a_positive_target_is_refused(world: World, store: Store):
    await _fleet_of(world, store, 1)
    world.config = replace(world.config, fleet=replace(world.config.fleet, target_workers=1))
    engine = await world.engine(store)
    offers = [r for r in await engine.refresh_offers(force=True) if r.viable]
    with pytest.raises(EngineError, match="at target: 1/1 workers"):
        await deploy(engine, offers[-1].offer.id)
    assert len(world.cloud.instances) == 1
    await engine.close()


# -- acts cut short by a crash ------------------------------------------------------------


async def _pending_rent(world: World, store: Store):
    """An engine, the best viable offer, and a pending rent intent for it (not marked sent)."""
    engine = await world.engine(store)
    offer = next(r for r in await engine.refresh_offers(force=True) if r.viable).offer
    intent = await store.intents.create(
        "rent", "auto", label="vastui-main-0123456789ab", offer_id=offer.id,
        machine_id=offer.machine_id, detail={"offer": offer.to_json()}, now=world.clock.now(),
    )  # fmt: skip
    return engine, offer, intent


async def test_a_rent_intent_never_sent_frees_its_slot_at_once(world: World, store: Store):
    # The engine died between writing the intent and sending the request.
    engine, offer, intent = await _pending_rent(world, store)
    assert not intent.sent
    world.clock.advance(1)
    await engine.step()
    (after,) = [i for i in await store.intents.all() if i.id == intent.id]
    assert after.status == "failed" and after.note == "never sent: the engine stopped first"
    await deploy(engine, offer.id)  # the machine is free again
    await engine.close()


async def test_a_sent_rent_intent_still_waits_for_its_label(world: World, store: Store):
    engine, offer, intent = await _pending_rent(world, store)
    await store.intents.mark_sent(intent.id, now=world.clock.now())
    world.clock.advance(1)
    await engine.step()
    (after,) = [i for i in await store.intents.all() if i.id == intent.id]
    assert after.status == "pending" and after.sent
    with pytest.raises(EngineError, match="in flight"):
        await deploy(engine, offer.id)
    await engine.close()


async def test_a_sent_rent_vast_never_lists_frees_its_slot(world: World, store: Store):
    """A create answered 5xx that did nothing: Vast would list the instance if it existed."""
    engine, offer, intent = await _pending_rent(world, store)
    await store.intents.mark_sent(intent.id, now=world.clock.now())
    statuses = []
    for _ in range(4):
        world.clock.advance(30)
        await engine.step()
        (after,) = [i for i in await store.intents.all() if i.id == intent.id]
        statuses.append(after.status)
    assert statuses == ["pending", "pending", "failed", "failed"]
    assert after.note == "no instance with its label in 3 instance lists"
    assert await deploy(engine, offer.id) is not None  # the machine is free again
    await engine.close()


@pytest.mark.parametrize("ban_rides_in_intent", [True, False])
async def test_a_crash_between_destroy_and_ban_keeps_the_ban(
    world: World, store: Store, ban_rides_in_intent: bool
):
    engine, iid = await rent_one(world, store)
    rec = await store.instances.get(iid)
    tail = ("CUDA error: an illegal memory access",)
    kill = policy.Kill("bench_error", "benchmark error", "benchmark", tail, "error", ban="GPU")
    if ban_rides_in_intent:  # as the engine writes it now
        intent = await store.create_destroy_intent(
            iid, kill.reason, machine_id=rec.machine_id, detail=kill.to_detail(),
            ban=engine.acts._ban_spec(rec, kill, world.clock.now()), now=world.clock.now(),
        )  # fmt: skip
    else:  # as an engine before this release wrote it
        intent = await store.intents.create(
            "destroy", kill.reason, instance_id=iid, machine_id=rec.machine_id,
            detail=kill.to_detail(), now=world.clock.now(),
        )  # fmt: skip
    # Destroyed and recorded, then the engine died before the ban.
    await world.client().destroy_instance(iid)
    await store.mark_killed(iid, kill.kind, kill.reason, event="destroy", now=world.clock.now())
    await engine.close()
    assert rec.machine_id not in await store.badlist.machine_ids()
    engine = await world.engine(store)
    await engine.step()
    assert rec.machine_id in await store.badlist.machine_ids(now=world.clock.now())
    (after,) = [i for i in await store.intents.all() if i.id == intent.id]
    assert after.status == "done"
    bans = await store.events.all(kind="ban")
    assert [e.machine_id for e in bans] == [rec.machine_id]
    await engine.step()  # done once: no second ban event
    assert len(await store.events.all(kind="ban")) == 1
    await engine.close()


async def test_a_crash_between_destroy_and_strike_counts_it_once(world: World, store: Store):
    engine, iid = await rent_one(world, store)
    rec = await store.instances.get(iid)
    kill = policy.Kill("deadline_benchmark", "benchmark timeout", "benchmark", strike=True)
    intent = await store.intents.create(
        "destroy", kill.reason, instance_id=iid, machine_id=rec.machine_id,
        detail=kill.to_detail(), now=world.clock.now(),
    )  # fmt: skip
    await world.client().destroy_instance(iid)
    await store.mark_killed(iid, kill.kind, kill.reason, event="destroy", now=world.clock.now())
    await engine.close()
    for _ in range(2):  # two restarts: the strike is counted once
        engine = await world.engine(store)
        await engine.step()
        await engine.close()
    strikes = await store.badlist.strikes(rec.machine_id)
    assert [(s.instance_id, s.kind) for s in strikes] == [(iid, "deadline_benchmark")]
    (after,) = [i for i in await store.intents.all() if i.id == intent.id]
    assert after.status == "done"


# -- stopping -----------------------------------------------------------------------------


async def test_a_stop_ends_a_step_stuck_in_a_wait_and_rents_nothing(world: World, store: Store):
    world.config = replace(world.config, fleet=replace(world.config.fleet, target_workers=2))
    engine = await world.engine(store)
    stuck = asyncio.Event()

    async def never_answers(*_a, **_k):
        stuck.set()
        await asyncio.Event().wait()  # a Retry-After storm, a slow answer

    engine.client.list_instances = never_answers  # type: ignore[method-assign]
    stop = asyncio.Event()
    run = asyncio.create_task(engine.run(stop))
    await asyncio.wait_for(stuck.wait(), 30)
    stop.set()
    await asyncio.wait_for(run, 30)  # returns: the stuck step was cancelled
    assert world.cloud.instances == {}
    with pytest.raises(EngineError, match="the engine is stopping"):
        offer = next(r for r in await engine.refresh_offers(force=True) if r.viable).offer
        await engine.acts.rent(offer, "after stop")
    assert world.cloud.instances == {}
    await engine.close()


# -- a dead store stops the engine ---------------------------------------------------------


async def test_a_dead_store_stops_the_engine_with_its_reason(world: World, store: Store):
    engine, _iid = await rent_one(world, store)

    async def gone() -> None:
        raise StoreFatal("database /x/vastui.db was deleted or replaced under the running engine")

    store.check_health = gone  # type: ignore[method-assign]
    stop = asyncio.Event()
    await asyncio.wait_for(engine.run(stop), 30)  # returns by itself: no stop was asked
    assert engine.halted
    assert engine.fatal == "database /x/vastui.db was deleted or replaced under the running engine"
    assert not stop.is_set()
    await engine.close()


async def test_a_store_error_in_a_follower_stops_the_engine(world: World, store: Store):
    engine = await world.engine(store)
    engine._task_failed(StoreFatal("database /x/vastui.db cannot be written: disk full"))
    assert engine.halted and engine.fatal == "database /x/vastui.db cannot be written: disk full"
    engine._task_failed(RuntimeError("a bug"))  # not fatal, and the first reason stays
    assert engine.fatal == "database /x/vastui.db cannot be written: disk full"
    await engine.close()


# -- numbers from outside that cannot be true -----------------------------------------------


async def test_impossible_offers_are_never_rented(world: World, store: Store):
    engine = await world.engine(store)
    viable = [r.offer for r in await engine.refresh_offers(force=True) if r.viable]
    free, huge, overflow = viable[0].id, viable[1].id, viable[2].id
    for oid, price in ((free, 0.0), (overflow, 1e308)):  # 0 would rank first with min_rate 0
        world.cloud.offers[oid].update(dph_base=price, storage_cost=0.0, min_bid=price)
    world.cloud.offers[huge]["machine_id"] = 2**64
    world.config = replace(
        world.config,
        fleet=replace(world.config.fleet, target_workers=2),
        offers=replace(world.config.offers, filter="gpu_ram>12.5"),  # no price cap
    )
    engine = await world.engine(store)
    ranked = await engine.refresh_offers(force=True)
    assert {free, huge, overflow}.isdisjoint(r.offer.id for r in ranked)
    assert all(r.min_rate >= 1 for r in ranked)
    for _ in range(3):
        await engine.step()
    rented = {r.offer_id for r in await store.instances.all()}
    assert len(rented) == 2 and {free, huge, overflow}.isdisjoint(rented)
    assert engine.last_error is None
    await engine.close()


async def test_an_impossible_number_in_our_instance_row_wedges_nothing(world: World, store: Store):
    engine, iid = await rent_one(world, store)
    world.cloud.instances[iid].offer["machine_id"] = 2**64  # Vast now reports nonsense
    world.clock.advance(30)
    await engine.step()
    rec = await store.instances.get(iid)
    assert not rec.killed and rec.machine_id is not None and rec.machine_id < 2**63
    assert not engine.halted and engine.last_error is None
    # ... and the worker is still supervised: its deadline still kills it.
    world.clock.advance(world.config.deadlines.first_report_min * 60 + 60)
    await engine.step()
    assert (await store.instances.get(iid)).kill_kind == "deadline_first_report"
    await engine.close()
