"""The money limits of issue 20 on the engine: a daily budget stops rents (and destroys
nothing); an account out of credit is the reason nothing is rented, never a strike or a ban,
and credit added ends it."""

from __future__ import annotations

from dataclasses import replace

from tests.enginekit import World
from vastui.store import Store


async def test_out_of_credit_is_no_credit_not_a_machines_fault(world: World, store: Store):
    world.config = replace(world.config, fleet=replace(world.config.fleet, target_workers=2))
    world.cloud.user["credit"] = 0.0
    engine = await world.engine(store)
    await engine.step()
    assert engine.status is not None and engine.status.reason_kind == "no_credit"
    assert "You lack credit" in (engine.status.reason or "")
    assert engine.credit == 0.0
    assert await store.list_instances(include_killed=True) == []
    assert await store.list_strikes() == [] and await store.list_bad() == []
    # the refused offer stays rentable: the account was at fault, not the machine
    ranked = [r for r in engine._offers if r.viable]
    assert ranked, "the engine's ranking still has its viable offers"
    world.cloud.user["credit"] = 50.0  # the operator pays
    world.clock.advance(30)
    await engine.step()
    assert engine.no_credit is None and engine.credit == 50.0
    assert len(await store.list_instances()) == 1
    assert engine.status is not None and engine.status.reason_kind != "no_credit"


async def test_the_daily_budget_stops_rents_and_destroys_nothing(world: World, store: Store):
    fleet = replace(world.config.fleet, target_workers=3, max_concurrent_benchmarks=3,
                    max_daily_spend=0.5)  # fmt: skip
    world.config = replace(world.config, fleet=fleet)
    engine = await world.engine(store)
    await engine.step()
    first = await store.list_instances()
    assert len(first) == 1  # one rent per step
    # the day goes on (the clock starts at 14:13 UTC): the first worker's bill reaches $0.50
    dph = first[0].dph_total or 0.0
    world.clock.advance(0.5 / dph * 3600 + 1)
    await engine.step()
    assert engine.status is not None and engine.status.reason_kind == "daily_budget"
    assert engine.status.reason and "of $0.50 (fleet.max_daily_spend)" in engine.status.reason
    live = await store.list_instances()
    assert [r.vast_id for r in live] == [first[0].vast_id], "nothing rented, nothing destroyed"
    assert not any(r.killed for r in live)
