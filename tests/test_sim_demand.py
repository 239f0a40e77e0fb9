"""The market's finite work (vastsim/demand.py): a demand curve, slots earned with challenge
proofs, the 45-minute deadline and its penalty (curio @ e0294b0f,
documentation/en/experimental-features/Snark-Market.md:162-172), over the market stand-in's
own calls and its HTTP face (429 for an ask without a slot, provictl.go:111-115)."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

from vastsim.demand import (
    CHALLENGES_PER_SLOT,
    DEADLINE_S,
    MISS_PENALTY,
    Curve,
    DemandError,
    FiniteDemand,
    parse_curve,
)
from vastsim.proofsvc import Market, ProofService

HOUR = 3600.0
WALLET = "f1abcdefghijklmnopqrstuvwxyzabcdefghijklm"
PRICE = 5 * 10**15


class Clock:
    def __init__(self) -> None:
        self.t = 1_000_000.0

    def __call__(self) -> float:
        return self.t


def market(spec: str, balance: int = 50 * 64, seed: int = 1) -> tuple[Market, FiniteDemand, Clock]:
    clock = Clock()
    demand = FiniteDemand(parse_curve(spec), seed=seed, balance=balance, start=clock.t)
    return Market(clock=clock, seed=seed, pow_share=0.0, policy=demand), demand, clock


@pytest.mark.parametrize(
    ("spec", "curve"),
    [
        ("steady:30", Curve("steady", 30.0)),
        ("daily:20", Curve("daily", 20.0, amplitude=0.5)),
        ("daily:20:1", Curve("daily", 20.0, amplitude=1.0)),
        ("step:10:40", Curve("step", 10.0, after=40.0, at_h=1.0)),
        ("step:40:5:3.5", Curve("step", 40.0, after=5.0, at_h=3.5)),
        ("pulse:2:300:1:2.5", Curve("pulse", 2.0, after=300.0, at_h=1.0, until_h=2.5)),
        ("bursts:20:150:12", Curve("bursts", 20.0, after=150.0, at_h=12.0)),
    ],
)
def test_a_curve_spec_parses(spec: str, curve: Curve) -> None:
    assert parse_curve(spec) == curve
    assert parse_curve(curve.spec()) == curve


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("steady", "want steady:R"),
        ("weekly:3", "want steady:R"),
        ("steady:1:2", "steady takes 1 to 1 numbers"),
        ("step:3", "step takes 2 to 3 numbers"),
        ("daily:10:2", "the amplitude is at most 1"),
        ("steady:-1", "finite and not negative"),
        ("steady:1e9", "at most 100000 requests per hour"),
        ("steady:1..2", "a number does not parse"),
        ("pulse:1:2:3", "pulse takes 4 to 4 numbers"),
        ("pulse:1:2:3:3", "the pulse must end after it begins"),
        ("bursts:1:2", "bursts takes 3 to 3 numbers"),
        ("bursts:1:2:0", "the period must be more than 0 hours"),
    ],
)
def test_a_bad_curve_spec_is_one_line_naming_it(spec: str, words: str) -> None:
    with pytest.raises(DemandError) as err:
        parse_curve(spec)
    assert words in str(err.value) and spec in str(err.value) and "\n" not in str(err.value)


def test_a_step_and_a_day_have_the_rate_they_say() -> None:
    step = parse_curve("step:10:40:2")
    assert [step.at(h) for h in (0, 1.99, 2, 30)] == [10, 10, 40, 40]
    pulse = parse_curve("pulse:2:300:1:2.5")
    assert [pulse.at(h) for h in (0, 1, 2.49, 2.5, 9)] == [2, 300, 300, 2, 2]
    assert pulse.peak == 300
    bursts = parse_curve("bursts:20:150:12")
    assert [bursts.at(h) for h in (0, 5.99, 6, 11.99, 12, 18, 30.5)] == [20, 20, 150, 150, 20,
                                                                        150, 150]  # fmt: skip
    assert bursts.peak == 150 and parse_curve(bursts.spec()) == bursts
    day = parse_curve("daily:20:0.5")
    assert day.at(0) == pytest.approx(20) and day.at(6) == pytest.approx(30)
    assert day.at(18) == pytest.approx(10) and day.peak == 30


def test_requests_arrive_at_the_curves_rate_and_lapse_without_an_ask() -> None:
    """60/h for 10 h: about 600 arrive (Poisson: within 4 sigma); with no ask open, every one
    goes to another provider."""
    m, demand, clock = market("steady:60")
    for _ in range(600):
        clock.t += 60.0
        m.poll(WALLET)
    assert 600 - 4 * 600**0.5 < demand.arrived < 600 + 4 * 600**0.5
    assert demand.lapsed + len(demand.waiting) == demand.arrived and len(demand.waiting) <= 3
    assert m.stats()["requests"] == 0


def test_the_same_seed_matches_the_same_requests() -> None:
    def run(seed: int) -> list[str]:
        m, _demand, clock = market("daily:40", seed=seed)
        for _ in range(400):
            clock.t += 30.0
            if not m.asks:
                m.create_ask(WALLET, PRICE)
            m.poll(WALLET)
        return sorted(m.requests)

    assert run(3) == run(3) and run(3) != run(4)


def test_an_open_ask_takes_what_arrives_and_only_that() -> None:
    m, demand, clock = market("steady:6")  # one each ten minutes on average
    asks = [m.create_ask(WALLET, PRICE) for _ in range(8)]
    assert all(a is not None and not a.challenge for a in asks)
    clock.t += 2 * HOUR
    work = m.poll(WALLET)
    # only what arrived within the patience before this poll: the rest went elsewhere
    assert len(work["requests"]) == demand.matched_paid <= 2 and demand.lapsed >= 4
    for _ in range(240):
        clock.t += 30.0
        m.poll(WALLET)
    assert demand.matched_paid >= 4 and all(not r.pow for r in m.requests.values())


def test_a_new_wallet_proves_challenges_two_at_a_time_and_earns_a_slot_per_fifty() -> None:
    m, demand, clock = market("steady:100", balance=0)
    first = [m.create_ask(WALLET, PRICE) for _ in range(3)]
    assert [a is not None and a.challenge for a in first] == [True, True, False]
    assert first[2] is None, "no slot and two challenges held: 429"
    done = 0
    while demand.accounts[WALLET].slots == 0:
        clock.t += 60.0
        reqs = m.poll(WALLET)["requests"]
        assert all(m.requests[r["request_cid"]].pow for r in reqs), "challenges only"
        for r in reqs:
            assert m.complete(WALLET, r["request_cid"], b"proof") is not None
            done += 1
        while demand.accounts[WALLET].slots == 0 and m.create_ask(WALLET, PRICE) is not None:
            pass
    assert done == CHALLENGES_PER_SLOT and demand.accounts[WALLET].balance == 50
    paid = m.create_ask(WALLET, PRICE)
    assert paid is not None and not paid.challenge, "a slot: a paid ask"
    assert m.stats()["providers"][WALLET]["cumulative"] == 0, "challenges are unpaid"


def test_work_past_the_deadline_is_taken_back_at_a_cost_of_fifty() -> None:
    m, demand, clock = market("steady:600")
    ask = m.create_ask(WALLET, PRICE)
    assert ask is not None
    clock.t += 30.0
    [req] = m.poll(WALLET)["requests"]
    clock.t += DEADLINE_S + 1
    assert m.poll(WALLET)["requests"] == [], "no longer this provider's"
    assert m.complete(WALLET, req["request_cid"], b"late") is None, "410 Gone"
    account = demand.accounts[WALLET]
    assert account.missed == 1 and account.balance == 50 * 64 - MISS_PENALTY
    on_time = m.create_ask(WALLET, PRICE)
    assert on_time is not None
    clock.t += 30.0
    [req] = m.poll(WALLET)["requests"]
    clock.t += DEADLINE_S - 60
    reward = m.complete(WALLET, req["request_cid"], b"proof")
    assert reward is not None and reward["amount"] == str(PRICE)
    assert account.missed == 1


def test_the_http_face_answers_an_ask_without_a_slot_with_429() -> None:
    m, _demand, _clock = market("steady:1", balance=0)
    svc = ProofService(m)
    svc.start()
    try:
        codes = []
        for _ in range(3):
            url = f"{svc.url}/provider/work/ask/{WALLET}?price={PRICE}&signature=00"
            try:
                with urllib.request.urlopen(urllib.request.Request(url, method="POST"), timeout=10):
                    codes.append(200)
            except urllib.error.HTTPError as err:
                codes.append(err.code)
        assert codes == [200, 200, 429]
        assert m.stats()["providers"][WALLET]["refused"] == 1
    finally:
        svc.stop()


def test_a_new_curve_takes_over_from_now() -> None:
    m, demand, clock = market("steady:0")
    for _ in range(60):
        clock.t += 60.0
        m.poll(WALLET)
    assert demand.arrived == 0
    with m.lock:
        demand.set_curve(parse_curve("steady:600"), clock.t)
    for _ in range(60):
        clock.t += 60.0
        m.poll(WALLET)
    assert 600 - 4 * 600**0.5 < demand.arrived < 600 + 4 * 600**0.5
