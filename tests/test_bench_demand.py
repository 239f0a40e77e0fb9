"""The fleet against the market's work (bench/demand.py): the engine's own automatic target
on the simulator's market with finite work and a model of curio's cluster."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from bench import demand
from bench.demand import PARAMS_GB, REQUEST_GB, WALLET, World, auto_config, auto_policy


def trace(spec: str, new_wallet: bool, hours: float) -> tuple[list[tuple[float, int, int]], World]:
    """(hour, target, the wallet's slots) at each change of target."""
    world = World(spec, new_wallet, 1, hours, tick_s=60.0, priced=False)
    policy = auto_policy(auto_config())
    changes: list[tuple[float, int, int]] = []

    def target(w: World) -> int:
        n = policy(w)
        account = w.demand.accounts.get(WALLET)
        if not changes or changes[-1][1] != n:
            changes.append(((w.t - w.t0) / 3600.0, n, account.slots if account else 0))
        return n

    world.run(target)
    return changes, world


def test_a_new_wallet_keeps_min_workers_while_it_earns_slots_and_grows_with_them() -> None:
    """No slots: only challenge proofs, two at a time (vastsim/demand.py), which one worker
    carries; the fleet stays at min_workers (1) until the slots earned let the market send
    more than it proves, then grows."""
    changes, world = trace("steady:100", True, 120.0)
    [(start, first, _)] = changes[:1]
    assert (start, first) == (0.0, 1)
    grown = [(h, n, slots) for h, n, slots in changes if n > 1]
    assert grown, f"never grew: {changes}"
    hour, _n, slots = grown[0]
    assert hour > 48.0, "a day of challenges earns a few slots, not a second worker's work"
    assert slots >= 10, "it grew once the slots outnumber what one worker holds (MaxPending)"
    account = world.demand.accounts[WALLET]
    assert account.missed == 0 and account.slots > slots


def test_an_established_wallet_follows_a_step_up_and_not_before() -> None:
    changes, _world = trace("step:20:150:8", False, 24.0)
    ups = [h for h, n, _s in changes[1:]]
    assert ups and min(ups) >= 8.0, f"no growth before the step: {changes}"
    assert max(n for _h, n, _s in changes) >= 3, f"grew toward 150/h: {changes}"


def test_the_warm_pool_restarts_a_given_up_worker_and_bills_its_storage() -> None:
    """A daily cycle: the fleet grows, shrinks (the surplus stopped into the pool, the
    engine's own pool.keep), and grows again from the pool (pool.pick): the restarted worker
    proves again without a new rental's set-up."""
    config = auto_config()
    world = World("daily:100:0.8", False, 1, 48.0, tick_s=60.0, pool_config=config, priced=False)
    run = world.run(auto_policy(config))
    restarted = [w for w in world.rentals if w.restarted_at]
    assert restarted and run.pool_starts == sum(len(w.restarted_at) for w in restarted)
    w = restarted[0]
    assert w.reproved_at and w.reproved_at[0] > w.restarted_at[0] and w.pooled_s > 0
    assert run.warm_up_min is not None and run.warm_up_min < 60.0, "not a new rental's hours"
    # its stopped time is billed as storage, not at its $/h
    until = w.gone_at if w.gone_at is not None else world.end
    stopped = w.pooled_s + (until - w.pooled_since if w.pooled_since else 0.0)
    running = (until - w.rented_at - stopped) / 3600.0
    expected = running * w.dph + w.storage_dph * stopped / 3600.0
    expected += w.inet_cost * (PARAMS_GB + REQUEST_GB * w.requests)
    assert abs(w.cost(world.end) - expected) < 1e-9
    # the market's payments at FIL_USD: without rivals, each paid proof pays the ask
    assert run.earned_usd == pytest.approx(run.paid * 0.015)
    assert run.margin == pytest.approx(run.earned_usd - run.cost)


def test_a_worker_dying_in_production_is_replaced_at_the_next_step_or_the_operators_look(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """vastui's engine sees the daemon's death within its step and rents again; the fair
    original's operator only at their next look, the dead instance billing until then. Its
    tasks go back to the cluster at once either way (its curio fails them)."""
    real_draw = demand.draw

    def draw(world_seed: int, k: int, now: float) -> demand.Rental:
        rental = replace(real_draw(world_seed, k, now), passes=True)
        rental.dies_after_s = 2 * 3600.0 if k == 0 else None
        return rental

    monkeypatch.setattr(demand, "draw", draw)
    gaps = {}
    for look in (None, 3600.0):
        world = World("steady:60", False, 1, 12.0, look_s=look)
        world.run(lambda _w: 1)
        dead, second = world.rentals[0], world.rentals[1]
        assert dead.dead_at is not None and dead.in_flight == []
        assert dead.proving_s == pytest.approx(2 * 3600.0, abs=world.tick_s)
        assert dead.gone_at is not None and second.rented_at == dead.gone_at
        gaps[look] = dead.gone_at - dead.dead_at
        if look is not None:
            assert (dead.gone_at - world.t0) % look < demand.STEP_S  # at a look
    assert gaps[None] <= demand.STEP_S < gaps[3600.0] <= 3600.0 + demand.STEP_S


def test_a_start_vast_queues_is_on_its_way_until_the_engine_gives_it_up_and_rents(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every start from the pool queued (resources_unavailable): the worker counts as on its
    way (no rental meanwhile) until pool.expired destroys it after warm_pool_start_min; then
    the fleet rents."""
    monkeypatch.setattr(demand, "START_QUEUED", 1.0)
    config = auto_config()
    world = World("daily:100:0.8", False, 1, 48.0, tick_s=60.0, pool_config=config)
    run = world.run(auto_policy(config))
    queued = [w for w in world.rentals if w.start_queued_at is not None]
    assert queued and run.pool_starts == 0, "no start ran"
    assert "pool_unavailable" in world.pool_kills
    wait = config.fleet.warm_pool_start_min * 60.0
    for w in queued:
        assert w.gone_at is not None and w.gone_at - w.start_queued_at >= wait
        assert w.pooled_since is not None  # never ran again: billed as storage to the end
        # nobody rented while it was on its way; the rent came once it was given up
        during = [r for r in world.rentals if w.start_queued_at < r.rented_at < w.gone_at]
        assert during == []
    # once given up, within a step: another pooled worker asked to start, or a rental
    first = min(w.gone_at for w in queued if w.gone_at is not None)
    nxt = [r.rented_at for r in world.rentals if r.rented_at >= first]
    nxt += [w.start_queued_at for w in queued if w.start_queued_at >= first]
    assert nxt and min(nxt) - first <= demand.STEP_S


def test_a_proof_alone_is_slower_than_one_among_others() -> None:
    """cuzk's pipeline (original-system.md §4): one proof alone 88.9 s, 37.7 s each pipelined."""
    from bench.demand import MAX_PENDING, pipeline

    assert pipeline(0) == 0.0
    assert pipeline(1) == pytest.approx(37.7 / 88.9)
    assert pipeline(MAX_PENDING) == pytest.approx(1.0) == pipeline(MAX_PENDING + 5)
    shares = [pipeline(k) for k in range(1, MAX_PENDING + 1)]
    assert shares == sorted(shares) and len(set(shares)) == MAX_PENDING
    # throughput per proof in flight falls: each proof waits longer among more, but less long
    # than alone would make it
    assert all(a / i > b / (i + 1) for i, (a, b) in enumerate(itertools.pairwise(shares), 1))


def test_on_the_priced_market_rivals_take_their_share_and_snap_pays_more() -> None:
    """Two fixed workers on a market of 200 requests/h with rivals (vastsim/demand.py
    rivals_for): the rivals take some, the fleet is paid P × cost ÷ 10 by kind, and what it
    earned is what the market paid."""
    world = World("steady:200", False, 2, 12.0, tick_s=60.0)
    run = world.run(lambda _w: 2)
    d = world.demand
    assert d.rivals is not None and d.rivals.members
    assert d.taken_by_rivals > 0 and d.taken_by_us["porep"] > 0 and d.taken_by_us["snap"] > 0
    paid = [r for r in world.market.requests.values() if r.done and not r.pow]
    assert run.earned_usd == pytest.approx(sum(r.amount for r in paid) / 10**18 * demand.FIL_USD)
    snap = [r.amount / r.market_price for r in paid if r.kind == "snap"]
    porep = [r.amount / r.market_price for r in paid if r.kind == "porep"]
    assert snap and porep
    assert min(snap) == pytest.approx(1.6, rel=1e-6) and max(porep) == pytest.approx(1.0, rel=1e-6)
