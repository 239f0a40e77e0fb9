"""The engine with bids on, against the simulated cloud's bid market: it rents as a bid when that
is cheaper per proof, records an outbid (never a strike), raises a bid under its cap, lets a
worker go after keep_outbid_min, restarts a resumed worker, and learns the interruption."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.enginekit import World
from vastsim.bids import BidMarket
from vastui.engine.engine import Engine
from vastui.store import Store


def bids_on(world: World, **bids: object) -> None:
    world.config = replace(
        world.config,
        fleet=replace(world.config.fleet, target_workers=1),
        bids=replace(world.config.bids, mode="auto", **bids),  # type: ignore[arg-type]
    )
    # Nobody else bids unless a test says so: every change below is the test's own.
    world.cloud.bids = BidMarket(world.cloud.seed, world.clock.now(), 0.0)


async def rent_a_bid(world: World, store: Store) -> tuple[Engine, int]:
    engine = await world.engine(store)
    await engine.step()
    live = await store.instances.all(include_killed=False)
    assert len(live) == 1, live
    await world.until_running(engine)
    return engine, live[0].vast_id


async def test_the_engine_rents_a_bid_when_it_is_cheaper_per_proof(world: World, store: Store):
    bids_on(world)
    engine, iid = await rent_a_bid(world, store)
    rec = await store.instances.get(iid)
    sim = world.cloud.instances[iid]
    assert rec.is_bid and sim.bid_price is not None
    assert rec.bid_price == sim.bid_price and rec.bid_cap is not None
    assert sim.bid_price <= rec.bid_cap
    assert sim.bid_price >= world.cloud.offers[sim.offer_id]["min_bid"]
    # What it bills is the bid plus storage, and min_rate is worked out from that.
    assert rec.dph_total == sim.offer["dph_total"]
    assert rec.min_rate == world.config.min_rate_for(sim.offer["dph_total"])
    rent = (await store.events.all(kind="rent"))[0]
    assert f"${round(sim.offer['dph_total'], 5)}/h" in rent.reason
    await engine.close()


async def test_off_rents_on_demand(world: World, store: Store):
    bids_on(world)
    world.config = replace(world.config, bids=replace(world.config.bids, mode="off"))
    engine, iid = await rent_a_bid(world, store)
    assert not (await store.instances.get(iid)).is_bid
    assert world.cloud.instances[iid].bid_price is None
    await engine.close()


async def test_an_outbid_under_the_cap_is_raised_and_the_worker_restarts(
    world: World, store: Store
):
    bids_on(world)
    engine, iid = await rent_a_bid(world, store)
    rec = await store.instances.get(iid)
    sim = world.cloud.instances[iid]
    # Another bidder above ours, still under our cap.
    assert rec.bid_cap is not None and rec.bid_price is not None
    assert rec.bid_cap > rec.bid_price
    floor = sim.bid_floor
    sim.bid_floor = round(rec.bid_price + (rec.bid_cap - rec.bid_price) / 2, 4)
    assert world.cloud.bids.going_price(sim.machine.machine_id, sim.bid_floor, 0) <= rec.bid_cap
    world.clock.advance(30)
    await engine.step()  # sees it stopped: outbid, then raises the bid over the going price
    rec = await store.instances.get(iid)
    assert rec.interruptions == 1 and rec.outbid_since is not None
    assert rec.unhealthy_since is None, "outbid is not unhealthy"
    assert rec.bid_price is not None and rec.bid_price > sim.bid_floor
    assert world.cloud.instances[iid].bid_price == rec.bid_price
    notes = [e.reason for e in await store.events.all(kind="bid")]
    assert any(n.startswith("outbid: stopped by a higher bid") for n in notes)
    assert any(n.startswith("bid raised") for n in notes)
    # The raised bid wins: the container starts again and the engine starts the worker over.
    world.clock.advance(60)
    await engine.step()
    rec = await store.instances.get(iid)
    assert rec.outbid_since is None and rec.stopped_s > 0
    assert rec.state in ("loading", "setup"), rec.state
    await world.until_running(engine)
    assert not await store.badlist.strikes(), "an outbid never strikes the machine"
    # The other bidder leaves: the raised bid comes down to the going price plus the margin.
    raised = rec.bid_price
    sim.bid_floor = floor
    world.clock.advance(30)
    await engine.step()
    rec = await store.instances.get(iid)
    assert rec.bid_price is not None and raised is not None and rec.bid_price < raised
    assert world.cloud.instances[iid].bid_price == rec.bid_price
    assert rec.dph_total == pytest.approx(world.cloud.instances[iid].offer["dph_total"])
    assert any(e.reason.startswith("bid lowered") for e in await store.events.all(kind="bid"))
    await engine.close()


async def test_an_outbid_over_the_cap_waits_then_lets_go_without_a_strike(
    world: World, store: Store
):
    bids_on(world)
    engine, iid = await rent_a_bid(world, store)
    rec = await store.instances.get(iid)
    sim = world.cloud.instances[iid]
    assert rec.bid_cap is not None
    sim.bid_floor = rec.bid_cap * 2  # the going price is twice what it may ever bid
    keep = world.config.bids.keep_outbid_min * 60
    world.clock.advance(30)
    await engine.step()
    rec = await store.instances.get(iid)
    assert rec.outbid_since is not None and not rec.killed
    # Past the exited grace and every stage deadline but within keep_outbid_min: kept.
    world.clock.advance(keep - 120)
    await engine.step()
    assert not (await store.instances.get(iid)).killed
    world.clock.advance(240)
    await engine.step()
    rec = await store.instances.get(iid)
    assert rec.killed and rec.kill_kind == "outbid", (rec.kill_kind, rec.kill_reason)
    assert iid not in world.cloud.instances
    assert not await store.badlist.strikes() and not await store.badlist.all(now=world.clock.now())
    history = [h for h in await store.bid_history(now=world.clock.now()) if h.interruptions]
    assert [(h.machine_id, h.interruptions) for h in history] == [(rec.machine_id, 1)]
    assert history[0].stopped_h > keep / 3600 - 0.01
    await engine.close()
