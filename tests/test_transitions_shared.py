"""The economics bench plays the engine's own decisions: a table of observations, each fed to
the engine (on the simulated cloud and a real store) and to the bench's fleet model
(bench/economics_vastui.py), must leave the worker in the same state: its stage or kill, its
benchmark fields, its production state, the machine's strikes, ban and learned rate.

Both sides run ``vastui.engine.transitions``; what can drift is how each carries the effects
out (``acts.carry_out`` on the store, ``VastuiPolicy._carry_out`` in memory), and that is what
this test pins down."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from bench.economics import SCENARIOS, WORLD_SEED
from bench.economics_vastui import VastuiPolicy
from bench.economics_world import Market
from tests.enginekit import World, rent_one, result
from vastui.domain.reports import parse_event
from vastui.engine import production
from vastui.store import Store

DAEMON_PID = 777
FIELDS = (
    "state", "kill_kind", "failed_stage", "bench_rate", "bench_outcome", "bench_failed",
    "max_pending", "events_seen", "tunnel_down_since", "tunnel_detail", "curio_info",
)  # fmt: skip


def start(stage: str) -> tuple[str, Any]:
    return ("event", {"stage": stage, "event": "start"})


def bench(outcome: str, rate_x: float | None, **extra: Any) -> tuple[str, Any]:
    """A benchmark result at ``rate_x`` times the worker's min_rate (filled in per side)."""
    return ("bench", (outcome, rate_x, extra))


def counters(completed: int | None, *, alive: bool = True, exit_status: int | None = None):
    return ("counters", (completed, alive, exit_status))


UP_TO_BENCH = [start("setup"), start("paramfetch"), start("benchmark")]
PROVING = [*UP_TO_BENCH, bench("pass", 1.5), start("prove")]

SCENARIOS_TABLE: dict[str, list[tuple[str, Any]]] = {
    "pass then proving": PROVING,
    "below its min_rate": [*UP_TO_BENCH, bench("below_min", 0.6)],
    "a benchmark error": [*UP_TO_BENCH, bench("error", None, error_tail=["CUDA error 700"])],
    "a pass with failed proofs": [*UP_TO_BENCH, bench("pass", 1.4, proofs_failed=1)],
    "a failed paramfetch": [
        start("setup"),
        start("paramfetch"),
        ("event", {"stage": "paramfetch", "event": "fail", "reason": "paramfetch stalled"}),
    ],
    "the tunnel down, then up": [
        *PROVING,
        ("event", {"stage": "prove", "event": "progress", "tunnel": "down", "down": ["lotus"]}),
        ("event", {"stage": "prove", "event": "progress", "tunnel": "up"}),
    ],
    "proving well": [*PROVING, *[counters(n * 2) for n in range(1, 90)]],
    "proving below its min_rate": [*PROVING, *[counters(n // 8) for n in range(1, 90)]],
    "a daemon that died": [*PROVING, counters(3), counters(4, alive=False, exit_status=134)],
    "a silent daemon": [*PROVING, counters(3), *[counters(None) for _ in range(40)]],
}


def _result(outcome: str, rate_x: float | None, extra: dict[str, Any], min_rate: float):
    event = result(outcome, None if rate_x is None else round(min_rate * rate_x, 3))
    event["result"].update(extra, daemon_pid=DAEMON_PID, daemon_completed=3, daemon_failed=0)
    return event


def _reading(completed: int | None, alive: bool, exit_status: int | None, uptime: float):
    return production.Reading(
        pid=DAEMON_PID,
        alive=alive,
        exit_status=exit_status,
        signal=None,
        completed=completed,
        failed=0 if completed is not None else None,
        uptime=uptime,
        busy=True,
    )


STEP_S = 60.0  # proving.poll_s


async def _engine_side(world: World, store: Store, steps: list[tuple[str, Any]]) -> dict:
    engine, iid = await rent_one(world, store)
    rec0 = await store.instances.get(iid)
    assert rec0 is not None and rec0.min_rate
    t0 = world.clock.now()
    for kind, what in steps:
        world.clock.advance(STEP_S)
        rec = await store.instances.get(iid)
        assert rec is not None
        if rec.killed:
            break
        if kind == "event":
            await engine.handle_worker_event(iid, parse_event(dict(what)))
        elif kind == "bench":
            await engine.handle_worker_event(
                iid, parse_event(_result(*what, min_rate=rec0.min_rate))
            )
        else:
            done, alive, status = what
            uptime = world.clock.now() - rec0.created_at
            await engine.handle_counters(iid, _reading(done, alive, status, uptime))
    rec = await store.instances.get(iid)
    assert rec is not None
    strikes = sorted(s.kind for s in await store.badlist.strikes(rec.machine_id))
    perf = await store.perf.of_machine(rec.machine_id)
    banned = rec.machine_id in await store.badlist.machine_ids(now=world.clock.now())
    await engine.close()
    return {
        "rec0": rec0,
        "t0": t0,
        "record": {f: getattr(rec, f) for f in FIELDS},
        "prod": production.ProdState.from_json(rec.prod_state),
        "strikes": strikes,
        "rate": perf[0].last_rate if perf else None,
        "banned": banned,
    }


def _bench_side(world: World, rec0: Any, steps: list[tuple[str, Any]], t0: float) -> dict:
    demo = next(x for x in SCENARIOS if x.name == "demo")
    market = Market(
        world_seed=WORLD_SEED, seed=1, hosts=20, scenario=demo, config=world.config, days=1
    )
    policy = VastuiPolicy(market, world.config)
    offer = market.listed(0.0)[0]
    w = policy.fleet.rent(offer, rec0.min_rate)
    # the engine's record, under the bench's id (its fleet keys by vast_id)
    w.rec = replace(rec0, vast_id=w.rec.vast_id, machine_id=offer.machine_id)
    policy.clock.now = t0
    for kind, what in steps:
        policy.clock.now += STEP_S
        if not w.live:
            break
        if kind == "event":
            policy.on_event(w, dict(what))
        elif kind == "bench":
            policy.on_event(w, _result(*what, min_rate=rec0.min_rate))
        else:
            done, alive, status = what
            uptime = policy.clock.now - rec0.created_at
            policy.on_counters(w, _reading(done, alive, status, uptime), False, False)
    key = (offer.machine_id, offer.gpu_name, offer.num_gpus)  # the bench's record is by offer
    perf = policy.perf.get(key)
    return {
        "record": {f: getattr(w.rec, f) for f in FIELDS},
        "prod": policy.prod.get(w.rec.vast_id) or production.ProdState(),
        "strikes": sorted(k for _, _, k in policy.strikes.get(offer.machine_id, [])),
        "rate": perf.last_rate if perf else None,
        "banned": offer.machine_id in policy.bad,
    }


@pytest.mark.parametrize("name", list(SCENARIOS_TABLE))
async def test_the_bench_and_the_engine_agree(world: World, store: Store, name: str) -> None:
    steps = SCENARIOS_TABLE[name]
    engine = await _engine_side(world, store, steps)
    # the bench starts from the record and the time the engine had before the first observation
    rec0, t0 = engine.pop("rec0"), engine.pop("t0")
    played = _bench_side(world, rec0, steps, t0)
    assert played == engine
    # and the table means something: each scenario ends where its name says
    expected_state = {
        "a pass with failed proofs": "benchmark",  # a strike, not a kill
        "pass then proving": "proving",
        "the tunnel down, then up": "proving",
        "proving well": "proving",
    }.get(name, "killed")
    assert engine["record"]["state"] == expected_state, engine


# -- bids: what one look at Vast does to an interruptible worker ---------------------------------
#
# ("going", where): another bidder sets the going price "between" the worker's bid and its cap,
# "over" its cap, or leaves ("floor": the host's floor again); ("wait", minutes): the engine's
# reconcile every minute meanwhile. Both sides run vastui.engine.bidding (observe, on_outbid,
# lower); the engine against the simulated cloud's bid market, the bench against a stand-in
# market that says the same going price.

BID_FIELDS = ("state", "kill_kind", "is_bid", "bid_price", "interruptions")

BID_SCENARIOS: dict[str, tuple[list[tuple[str, Any]], str]] = {
    "outbid under the cap: raised, resumed": (
        [("going", "between"), ("wait", 3)],
        "setup",
    ),
    "outbid over the cap: kept, then let go": (
        [("going", "over"), ("wait", 60), ("wait", 70)],
        "killed",
    ),
    "outbid, then the bidder leaves": (
        [("going", "over"), ("wait", 30), ("going", "floor"), ("wait", 3)],
        "setup",
    ),
    "raised, then lowered once the bidder left": (
        [("going", "between"), ("wait", 3), ("going", "floor"), ("wait", 3)],
        "setup",
    ),
}


class StandInBids:
    """The bench market's bids, answering one going price for the worker's machine."""

    def __init__(self) -> None:
        self.going = 0.0

    def going_price(self, _machine_id: int, _floor: float, _t: float) -> float:
        return self.going

    def wins(self, _machine_id: int, _floor: float, bid: float, _t: float) -> bool:
        return bid >= self.going - 1e-9


def _going(where: str, floor: float, rec0: Any) -> float:
    if where == "between":
        return round(rec0.bid_price + (rec0.bid_cap - rec0.bid_price) / 2, 4)
    return round(rec0.bid_cap * 2, 4) if where == "over" else floor


async def _engine_bid_side(world: World, store: Store, steps: list[tuple[str, Any]]) -> dict:
    from vastsim.bids import BidMarket

    world.config = replace(world.config, bids=replace(world.config.bids, mode="auto"))
    world.cloud.bids = BidMarket(world.cloud.seed, world.clock.now(), 0.0)
    engine = await world.engine(store)
    ranked = next(r for r in await engine.refresh_offers(force=True) if r.rent_bid is not None)
    iid = await engine.acts.rent(ranked.offer, "test", ranked.rent_bid)
    assert iid is not None
    await world.until_running(engine)
    rented = await store.instances.get(iid)
    assert rented is not None and rented.min_rate
    for kind, what in PROVING:
        world.clock.advance(STEP_S)
        event = _result(*what, min_rate=rented.min_rate) if kind == "bench" else dict(what)
        await engine.handle_worker_event(iid, parse_event(event))
    rec0 = await store.instances.get(iid)
    assert rec0 is not None and rec0.state == "proving" and rec0.is_bid
    sim = world.cloud.instances[iid]
    floor, t0 = sim.bid_floor, world.clock.now()
    for kind, what in steps:
        if kind == "going":
            sim.bid_floor = _going(what, floor, rec0)
            what = 1
        for _ in range(what):
            world.clock.advance(STEP_S)
            await engine.step()
    rec = await store.instances.get(iid)
    assert rec is not None
    strikes = await store.badlist.strikes(rec.machine_id)
    await engine.close()
    return {
        "rec0": rec0, "t0": t0, "floor": floor,
        "record": {f: getattr(rec, f) for f in BID_FIELDS},
        "outbid": rec.outbid_since is not None, "stopped_min": round(rec.stopped_s / 60),
        "strikes": len(strikes),
    }  # fmt: skip


def _bench_bid_side(
    world: World, rec0: Any, steps: list[tuple[str, Any]], t0: float, floor: float
) -> dict:
    demo = next(x for x in SCENARIOS if x.name == "demo")
    market = Market(
        world_seed=WORLD_SEED, seed=1, hosts=20, scenario=demo, config=world.config, days=1
    )
    bids = StandInBids()
    market.bids = bids  # type: ignore[assignment]
    policy = VastuiPolicy(market, world.config)
    offer = market.listed(0.0)[0]
    w = policy.fleet.rent(offer, rec0.min_rate)
    w.rec = replace(rec0, vast_id=w.rec.vast_id, machine_id=offer.machine_id)
    w.rental = replace(w.rental, offline=None, running=0.0)  # the host stays up, running
    bids.going = floor
    policy.clock.now = t0
    for kind, what in steps:
        if kind == "going":
            bids.going = _going(what, floor, rec0)
            what = 1
        for _ in range(what):
            policy.clock.now += STEP_S
            if w.live:
                policy._reconcile(w)
    return {
        "record": {f: getattr(w.rec, f) for f in BID_FIELDS},
        "outbid": w.rec.outbid_since is not None, "stopped_min": round(w.rec.stopped_s / 60),
        "strikes": len(policy.strikes.get(offer.machine_id, [])),
    }  # fmt: skip


@pytest.mark.parametrize("name", list(BID_SCENARIOS))
async def test_the_bench_and_the_engine_agree_on_bids(
    world: World, store: Store, name: str
) -> None:
    steps, expected_state = BID_SCENARIOS[name]
    engine = await _engine_bid_side(world, store, steps)
    rec0, t0, floor = engine.pop("rec0"), engine.pop("t0"), engine.pop("floor")
    played = _bench_bid_side(world, rec0, steps, t0, floor)
    assert played == engine
    assert engine["record"]["state"] == expected_state, engine
    assert engine["record"]["interruptions"] == 1 and engine["strikes"] == 0
