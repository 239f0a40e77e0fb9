"""The priced proofshare market (vastsim/demand.py ``Rivals``, issue 43 item 4): other providers
with minimum asks and capacities, a market price P that moves with supply and demand, requests
matched cheapest ask first, Snap first, and paid at P × the proof's cost ÷ 10 (curio @ e0294b0f:
lib/proofsvc/common/types.go ``DeciCost``, tasks/proofshare/task_client_send.go:397-420,
documentation/en/experimental-features/Snark-Market.md). A fake clock; no sleeps."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from vastsim.demand import (
    DECI_COST,
    RIVAL_ASK_FIL,
    RIVAL_RATE_PER_H,
    RIVALS_COUNT,
    FiniteDemand,
    Rival,
    Rivals,
    market_pay,
    parse_curve,
)
from vastsim.proofsvc import Market

HOUR = 3600.0
WALLET = "f1abcdefghijklmnopqrstuvwxyzabcdefghijklm"


class Clock:
    def __init__(self) -> None:
        self.t = 1_000_000.0

    def __call__(self) -> float:
        return self.t


def fil(milli: float) -> int:
    """attoFIL of ``milli`` thousandths of a FIL, in whole nFIL."""
    return round(milli * 10**6) * 10**9


def priced(spec: str, rivals: Rivals | None, seed: int = 1) -> tuple[Market, FiniteDemand, Clock]:
    clock = Clock()
    demand = FiniteDemand(parse_curve(spec), seed=seed, start=clock.t, rivals=rivals)
    return Market(clock=clock, seed=seed, pow_share=0.0, policy=demand), demand, clock


def run(m: Market, clock: Clock, hours: float, price: int | None, asks: int = 2,
        poll_s: float = 30.0) -> None:  # fmt: skip
    """This provider keeps ``asks`` open at ``price`` (None: it never asks), polls every
    ``poll_s`` and proves at once."""
    for _ in range(round(hours * HOUR / poll_s)):
        clock.t += poll_s
        while price is not None and len(m.asks) < asks and m.create_ask(WALLET, price):
            pass
        for req in m.poll(WALLET)["requests"]:
            assert m.complete(WALLET, req["request_cid"], b"proof") is not None


def fixed(price_milli: float, members: list[Rival], snap_share: float = 0.25) -> Rivals:
    """A market whose price stays at ``price_milli`` mFIL (step 0)."""
    return Rivals(members=members, count=0, price=fil(price_milli), step=0.0, snap_share=snap_share)


def accounted(demand: FiniteDemand) -> bool:
    mine = sum(demand.taken_by_us.values())
    return demand.arrived == demand.taken_by_rivals + mine + demand.lapsed + len(demand.pending)


@pytest.mark.parametrize("seed", range(12))
def test_rivals_drawn_from_a_seed_lie_in_the_assumed_ranges(seed: int) -> None:
    rivals = Rivals(seed=seed)
    assert RIVALS_COUNT[0] <= len(rivals.members) <= RIVALS_COUNT[1]
    for r in rivals.members:
        assert fil(RIVAL_ASK_FIL[0] * 1000) <= r.ask <= fil(RIVAL_ASK_FIL[1] * 1000)
        assert r.ask % 10**9 == 0, "whole nFIL"
        assert RIVAL_RATE_PER_H[0] <= r.rate_per_h <= RIVAL_RATE_PER_H[1]
    again = Rivals(seed=seed)
    assert [(r.ask, r.rate_per_h) for r in again.members] == [
        (r.ask, r.rate_per_h) for r in rivals.members
    ]


def test_an_ask_under_the_rivals_gets_more_work_than_one_over_them_at_the_same_demand() -> None:
    def mine(price_milli: float) -> FiniteDemand:
        members = [Rival(fil(a), 30.0) for a in (4.0, 5.0, 6.0, 7.0)]
        m, demand, clock = priced("steady:150", fixed(10.0, members))
        run(m, clock, 6, fil(price_milli))
        assert accounted(demand)
        return demand

    cheap, dear = mine(3.0), mine(8.0)
    assert cheap.arrived == dear.arrived, "the same demand"
    assert sum(cheap.taken_by_us.values()) > 2 * sum(dear.taken_by_us.values())
    assert dear.taken_by_rivals > cheap.taken_by_rivals


@pytest.mark.parametrize(("ask_milli", "gets_work"), [(5.0, True), (4.0, True), (5.001, False)])
def test_an_ask_over_the_market_price_gets_nothing(ask_milli: float, gets_work: bool) -> None:
    m, demand, clock = priced("steady:200", fixed(5.0, [Rival(fil(3.0), 20.0)]))
    run(m, clock, 2, fil(ask_milli))
    got = sum(demand.taken_by_us.values())
    assert (got > 0) is gets_work and len(m.requests) == got
    assert demand.taken_by_rivals > 0 and accounted(demand)
    if not gets_work:  # what the rival could not take, nobody did
        assert demand.lapsed == demand.arrived - demand.taken_by_rivals - len(demand.pending)


def test_the_price_rises_while_demand_exceeds_every_supply() -> None:
    rivals = Rivals(members=[Rival(fil(4.0), 10.0), Rival(fil(4.5), 10.0)])
    m, demand, clock = priced("steady:500", rivals)
    run(m, clock, 3, None)
    prices = [p for _, p in rivals.history]
    assert len(prices) == 1 + 3 * HOUR / rivals.reprice_s, "one entry per reprice"
    assert prices[0] == fil(5.0)
    assert all(b > a for a, b in itertools.pairwise(prices)), prices
    assert prices[1] == fil(5.25) and demand.lapsed > 0


def test_the_price_falls_while_supply_idles_to_the_ask_that_takes_the_work() -> None:
    rivals = Rivals(members=[Rival(fil(3.0), 80.0) for _ in range(6)])
    m, demand, clock = priced("steady:5", rivals)
    run(m, clock, 3, None)
    prices = [p for _, p in rivals.history]
    assert all(b <= a for a, b in itertools.pairwise(prices)), prices
    assert prices[1] == fil(4.75) and prices[-1] == fil(3.0)
    assert demand.lapsed == 0 and demand.taken_by_rivals == demand.arrived > 0


def test_a_fixed_price_holds() -> None:
    rivals = fixed(6.0, [Rival(fil(3.0), 80.0)])
    m, _demand, clock = priced("steady:500", rivals)
    run(m, clock, 1, None)
    assert {p for _, p in rivals.history} == {fil(6.0)}


def test_a_snap_pays_one_point_six_porep_at_the_market_price_not_the_ask() -> None:
    m, demand, clock = priced("steady:200", fixed(5.0, [], snap_share=0.5))
    run(m, clock, 2, fil(3.0), asks=4)
    done = [r for r in m.requests.values() if r.done]
    pays = {kind: {r.amount for r in done if r.kind == kind} for kind in ("porep", "snap")}
    assert pays == {"porep": {fil(5.0)}, "snap": {fil(8.0)}}
    assert {r.market_price for r in done} == {fil(5.0)}
    assert [market_pay(fil(5.0), k) for k in ("porep", "snap")] == [fil(5.0), fil(8.0)]
    assert DECI_COST == {"porep": 10, "snap": 16}
    count = Counter(r.kind for r in done)
    assert count == Counter(demand.taken_by_us) and count["snap"] > 0 and count["porep"] > 0
    stats = m.stats()
    assert stats["paid_by_kind"] == {"porep": count["porep"] * fil(5.0),
                                     "snap": count["snap"] * fil(8.0)}  # fmt: skip
    assert stats["providers"][WALLET]["cumulative"] == sum(stats["paid_by_kind"].values())


def test_snap_is_matched_first_when_several_wait() -> None:
    # 50 requests a minute, one ask a minute: a Snap nearly always waits
    m, demand, clock = priced("steady:3000", fixed(5.0, [], snap_share=0.25))
    run(m, clock, 2, fil(5.0), asks=1, poll_s=60.0)
    got = sum(demand.taken_by_us.values())
    assert got > 100 and demand.taken_by_us["snap"] >= 0.95 * got
    assert demand.arrived_by_kind["snap"] < 0.35 * demand.arrived, "a quarter of the arrivals"
    assert Counter(r.kind for r in m.requests.values()) == Counter(demand.taken_by_us)


def test_a_busy_rival_takes_no_more_than_its_capacity() -> None:
    rival = Rival(fil(3.0), 10.0)  # 10 PoRep-equivalents an hour, two at once
    m, demand, clock = priced("steady:600", fixed(5.0, [rival]))
    run(m, clock, 5, None)
    assert rival.taken == demand.taken_by_rivals
    assert 10 * 5 / 1.6 <= rival.taken <= 10 * 5 + 2
    assert demand.lapsed > 2000 and accounted(demand)


def test_the_same_seed_makes_the_same_market() -> None:
    def market(seed: int) -> tuple[object, ...]:
        rivals = Rivals(seed=seed)
        m, demand, clock = priced("daily:300", rivals, seed=seed)
        run(m, clock, 4, fil(4.5), asks=3)
        assert accounted(demand)
        return (rivals.history, demand.taken_by_rivals, dict(demand.taken_by_us), demand.lapsed,
                sorted(m.requests), m.stats()["paid_by_kind"])  # fmt: skip

    assert market(7) == market(7) and market(7) != market(8)


def test_rivals_keep_the_arrivals_and_without_them_the_market_is_as_before() -> None:
    """The figures were recorded with the market before the priced one (the same seed, calls and
    draws): without rivals nothing moved; with them, the same requests arrive."""

    def market(rivals: Rivals | None) -> tuple[Market, FiniteDemand]:
        m, demand, clock = priced("daily:120", rivals, seed=5)
        for i in range(600):
            clock.t += 20.0
            while i % 3 == 0 and len(m.asks) < 2 and m.create_ask(WALLET, fil(5.0)):
                pass
            for req in m.poll(WALLET)["requests"]:
                if i % 7:
                    m.complete(WALLET, req["request_cid"], b"proof")
        return m, demand

    m, demand = market(None)
    stats = m.stats()
    assert (demand.arrived, demand.lapsed, demand.matched_paid) == (489, 115, 368)
    assert stats["completed_by_kind"] == {"porep": 270, "snap": 98}
    assert stats["providers"][WALLET]["cumulative"] == 368 * fil(5.0)
    first = sorted(m.requests.values(), key=lambda r: r.id)[:4]
    assert [(r.kind, r.miner, r.sector) for r in first] == [
        ("porep", 91460, 54773), ("porep", 58451, 17903), ("porep", 76150, 75081),
        ("snap", 94879, 39630),
    ]  # fmt: skip
    assert demand.taken_by_rivals == 0 and demand.rivals is None and not demand.pending
    assert all(r.market_price is None and r.amount == fil(5.0) for r in m.requests.values())
    _m, with_rivals = market(Rivals(seed=5))
    # the same buyers come; those whose most per proof is under P do not send
    assert with_rivals.rivals is not None
    assert with_rivals.arrived + with_rivals.rivals.priced_out == 489 and accounted(with_rivals)
    assert 0 < with_rivals.rivals.priced_out < 489 / 2


def test_buyers_send_less_as_the_price_rises() -> None:
    """A buyer sends only while P is at most its most per proof (BUYER_MAX_FIL, log-uniform
    0.004-0.02 FIL): at the floor nobody is priced out, at the ceiling everybody is."""
    from vastsim.demand import BUYER_MAX_FIL

    def out_of_1000(price_fil: float) -> int:
        r = Rivals(seed=3, count=0, price=fil(price_fil * 1000))
        return sum(1 for _ in range(1000) if not r.sends())

    low, mid, high = out_of_1000(BUYER_MAX_FIL[0] * 0.9), out_of_1000(0.009), out_of_1000(0.05)
    assert (low, high) == (0, 1000)
    assert 350 < mid < 650  # log-midpoint of 0.004-0.02 is ~0.0089
