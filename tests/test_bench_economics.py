"""The economics bench's pure parts: the world's hidden faults (as the simulator draws them),
benchmark.sh's rate and early abort, the benchmark outcomes the real policy then judges,
production counts, the event clock, and both policies on a small world (deterministic, no
timing asserted)."""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import replace
from pathlib import Path

import pytest

from bench.economics import config
from bench.economics_fleet import Clock, Worker
from bench.economics_original import OriginalPolicy
from bench.economics_vastui import VastuiPolicy
from bench.economics_worker import (
    BENCH_TIMEOUT_S,
    SYNTH_SHARE,
    Production,
    Rental,
    _failing_between,
    early_abort,
    literal_bench,
    lsq_rate,
    original_bench,
    plan,
    vastui_bench,
)
from bench.economics_world import (
    NEUTRAL_PRICE_CENTRE,
    ORIGINAL_DISK_GB,
    ORIGINAL_FILTER,
    PUBLISHED_4090_ON_DEMAND,
    PUBLISHED_S_PER_PROOF,
    Hidden,
    Market,
    Scenario,
    machine_fault,
)
from vastsim import ManualClock, SimCloud
from vastsim.outages import outage_after
from vastsim.workers import SimWorkerHost
from vastui.domain.plan import PARAMS_GB, PROOF_UP_GB, REQUEST_GB
from vastui.domain.reports import parse_bench_result
from vastui.engine import policy, spend
from vastui.engine.ranking import DEFAULT_GPU_RATES

H = 3600.0
NO_FAULT = Hidden()


def rental(rate: float, hidden: Hidden = NO_FAULT, *, cores: float = 64.0) -> Rental:
    interval = 3600.0 / rate
    return Rental(
        created=0.0,
        running=100.0,
        paramfetch_start=130.0,
        paramfetch_end=500.0,
        offline=None,
        interval=interval,
        fill=1.5 * interval,
        cores=cores,
        hidden=hidden,
        jitter=(1.0,) * 16,
    )


# -- the world ------------------------------------------------------------------------------


@pytest.mark.parametrize("rate", [0.0, 1.0, 3.0])
def test_machine_faults_are_the_simulators(tmp_path: Path, rate: float) -> None:
    cloud = SimCloud(seed=5, world_seed=7, clock=ManualClock(), hosts=60)
    host = SimWorkerHost(cloud, tmp_path, speed=1.0, machine_fault_rate=rate)
    for machine in cloud.machines:
        expected = host.fault_for(machine.machine_id)
        got = machine_fault(7, machine.machine_id, rate)
        assert got.fault == expected["fault"]
        if got.fault != "none":
            assert (got.fault_after, got.fault_every) == (
                expected["fault_after"],
                expected["fault_every"],
            )


def test_the_market_is_the_same_for_the_same_seed_and_moves_by_day() -> None:
    cfg = config(target=2)
    a = Market(world_seed=7, seed=3, hosts=60, scenario=Scenario("x", 1, 0.2), config=cfg, days=1)
    b = Market(world_seed=7, seed=3, hosts=60, scenario=Scenario("x", 1, 0.2), config=cfg, days=1)
    day0 = [(o.id, o.dph_total) for o in a.listed(0.0)]
    assert day0 == [(o.id, o.dph_total) for o in b.listed(0.0)]
    assert day0 != [(o.id, o.dph_total) for o in a.listed(86400.0)]
    assert a.hidden == b.hidden
    assert all(o.dph_total <= 0.9 for o in a.listed(0.0))  # the default filter's dph<=0.9


def test_a_rentals_outage_is_the_simulators_and_follows_the_machines_reliability() -> None:
    """The bench draws a rental's outage as the simulated cloud does (vastsim.outages, from
    the machine's listed reliability and the scenario's fault rate); a fault rate of 0 never
    takes a host down, and the rental's other dice do not move with it."""

    def rental_of(seed: int, reliability: float, fault_rate: float) -> Rental:
        return plan(
            now=0.0, rate=30.0, inet_down=1000.0, cores=64.0, ram_gb=512.0, hidden=NO_FAULT,
            rng=random.Random(seed), reliability=reliability, fault_rate=fault_rate,
        )  # fmt: skip

    for seed in range(50):
        clean = rental_of(seed, 0.9, 0.0)
        assert clean.offline is None
        for reliability in (0.9, 0.999):
            r = rental_of(seed, reliability, 1.0)
            assert replace(r, offline=None) == clean
            rng = random.Random(seed)
            rng.uniform(0, 1), rng.uniform(0, 1), rng.uniform(0, 1)  # loading, pull, setup
            after = outage_after(rng, reliability, 1.0)
            assert r.offline == (None if after is None else r.running + after)
    # Over many rentals, the less reliable machine loses its host more often within a day.
    down = {
        rel: sum(
            (r := rental_of(s, rel, 1.0)).offline is not None and r.offline - r.running <= 86400
            for s in range(4000)
        )
        for rel in (0.9, 0.999)
    }
    assert 300 <= down[0.9] <= 500 and down[0.999] <= 15, down


# -- benchmark.sh's arithmetic ----------------------------------------------------------------


def test_lsq_rate_is_the_pace_of_finishes() -> None:
    times = [100.0 + 120.0 * i for i in range(12)]
    assert lsq_rate(times, list(range(1, 13))) == pytest.approx(30.0)
    assert lsq_rate([0.0, 360.0], [1, 2]) == pytest.approx(10.0)
    assert lsq_rate([5.0], [1]) is None
    # a failed proof (no completion) counts its time
    assert lsq_rate(times, [1, 2, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]) < 30.0


@pytest.mark.parametrize(
    ("pace_rate", "min_rate", "aborts"),
    [(10.0, 30.0, True), (30.0, 30.0, False), (26.0, 30.0, False), (20.0, 30.0, True)],
)
def test_early_abort_allows_a_quarter_better_pace(
    pace_rate: float, min_rate: float, aborts: bool
) -> None:
    step = 3600.0 / pace_rate
    times = [step * i for i in range(1, 5)]
    assert early_abort(times, [1, 2, 3, 4], 12, min_rate) is aborts
    assert early_abort(times[:3], [1, 2, 3], 12, min_rate) is False  # four finishes needed


@pytest.mark.parametrize(
    ("times", "aborts"),
    [
        ([120.0, 240.0, 360.0, 2400.0], False),  # a 30/h pace and one straggler
        ([120.0, 240.0, 2400.0, 360.0], False),  # the straggler read before a proof it follows
        ([120.0, 240.0, 2400.0, 360.0, 480.0], False),  # then the pace again
        ([360.0, 720.0, 1080.0, 4000.0], True),  # a 10/h pace fails without the straggler too
        ([360.0, 720.0, 1080.0, 1440.0], True),
    ],
)
def test_early_abort_reads_finishes_in_time_order_and_forgives_one_straggler(
    times: list[float], aborts: bool
) -> None:
    assert early_abort(times, list(range(1, len(times) + 1)), 12, 30.0) is aborts


# -- benchmark outcomes, judged by the real policy ----------------------------------------------


def test_a_fast_clean_machine_passes_at_its_rate() -> None:
    bench = vastui_bench(rental(60.0), min_rate=30.0)
    assert bench.passed
    assert bench.result["rate_per_hour"] == pytest.approx(60.0, rel=1e-6)
    assert policy.benchmark_kill(parse_bench_result(bench.result), 30.0) is None
    assert bench.duration < BENCH_TIMEOUT_S


def test_a_slow_machine_is_aborted_early_without_a_ban() -> None:
    bench = vastui_bench(rental(20.0), min_rate=40.0)
    assert bench.result["rate_per_hour"] is None  # a partial rate is not the machine's
    assert bench.result["partial_rate_per_hour"] == pytest.approx(20.0, rel=1e-6)
    kill = policy.benchmark_kill(parse_bench_result(bench.result), 40.0)
    assert kill is not None and kill.kind == "bench_aborted_early"
    # no rate for its record to keep it off: a strike (a second rent bans it)
    assert kill.ban is None and kill.strike


def test_a_slow_machine_that_pays_gets_the_time_its_proofs_take() -> None:
    # 24 proofs/h passes a min of 18, but 12 proofs after the warmup did not fit in a fixed
    # 2400 s: the budget now follows min_rate (policy.bench_timeout_s), so it passes.
    bench = vastui_bench(rental(24.0), min_rate=18.0)
    assert bench.result["outcome"] == "pass", bench.result
    assert BENCH_TIMEOUT_S < bench.duration < policy.bench_timeout_s(18.0, 12)
    assert policy.benchmark_kill(parse_bench_result(bench.result), 18.0) is None


@pytest.mark.parametrize("min_rate", [13.0, 29.0, 60.0])
def test_a_hung_proof_still_ends_at_the_budget_with_a_strike(min_rate: float) -> None:
    bench = vastui_bench(rental(2 * min_rate, Hidden("hang", 4, 3)), min_rate=min_rate)
    assert bench.result["outcome"] == "timeout"
    assert bench.duration == policy.bench_timeout_s(min_rate, 12)
    kill = policy.benchmark_kill(parse_bench_result(bench.result), min_rate)
    assert kill is not None and kill.kind == "bench_timeout" and kill.strike


@pytest.mark.parametrize(
    ("hidden", "outcome", "banned"),
    [
        (Hidden("cuda_abort", 3, 4), "error", True),
        (Hidden("host_oom", 5, 4), "error", True),
        (Hidden("gpu_panic", 2, 3), "error", True),  # 2, 5, 8, 11: more than 2 failed
        (Hidden("gpu_oom", 0, 3), "error", True),
        (Hidden("no_cuda", 0, 3), "error", True),
        (Hidden("hang", 4, 3), "timeout", False),
        (Hidden("cuda_abort", 30, 4), "pass", False),  # strikes later, in production
    ],
)
def test_faults_end_the_benchmark_as_the_worker_reports_them(
    hidden: Hidden, outcome: str, banned: bool
) -> None:
    bench = vastui_bench(rental(60.0, hidden), min_rate=30.0)
    assert bench.result["outcome"] == outcome
    kill = policy.benchmark_kill(parse_bench_result(bench.result), 30.0)
    assert (kill is not None and kill.ban is not None) is banned


def test_a_pass_with_failed_proofs_is_a_strike() -> None:
    bench = vastui_bench(rental(60.0, Hidden("gpu_panic", 8, 6)), min_rate=30.0)
    assert bench.passed and bench.result["proofs_failed"] == 1
    assert policy.benchmark_strike(parse_bench_result(bench.result)) is not None


def test_the_original_benchmark_runs_everything_and_crashes_post_nothing() -> None:
    clean = original_bench(rental(60.0))
    assert clean.rate == pytest.approx(60.0, rel=1e-6)
    assert clean.duration > vastui_bench(rental(60.0), 30.0).duration  # the restart
    slow = original_bench(rental(10.0))
    assert slow.rate == pytest.approx(10.0, rel=1e-6)  # no early abort: all 12 proofs
    assert slow.duration > 45 * 60  # the monitor's timeout comes first
    for fault in ("cuda_abort", "hang", "no_cuda", "gpu_oom"):
        crashed = original_bench(rental(60.0, Hidden(fault, 3, 4)))
        assert crashed.rate is None and math.isinf(crashed.duration)


# -- production -------------------------------------------------------------------------------


def test_production_counts_finishes_failures_and_stops() -> None:
    p = Production(start=0.0, interval=60.0, fill=90.0, hidden=Hidden(), offline=None)
    assert p.counts(149.0) == (0, 0)
    assert p.counts(150.0) == (1, 0)
    assert p.counts(90.0 + 60.0 * 10) == (10, 0)
    assert p.death() is None and math.isinf(p.stopped_at())

    panic = replace(p, hidden=Hidden("gpu_panic", 8, 5))  # indexes 13, 18, 23, ... fail
    assert panic.counts(90.0 + 60.0 * 11) == (8, 3)  # 13..23: 13, 18 and 23 failed

    dies = replace(p, hidden=Hidden("cuda_abort", 20, 4))  # the 8th production proof
    at, reason, tail = dies.death() or (0.0, "", ())
    assert dies.counts(1e6) == (7, 0)
    assert at == pytest.approx(90.0 + 7 * 60.0 + 30.0)
    assert "SIGABRT" in reason and policy.gpu_errors(tail)

    offline = replace(p, offline=400.0)
    assert offline.counts(1e6) == offline.counts(400.0) == (5, 0)


def test_failing_between_matches_counting() -> None:
    rng = random.Random(1)
    for _ in range(200):
        h = Hidden("gpu_panic", rng.randint(0, 40), rng.randint(1, 6))
        lo, hi = rng.randint(0, 50), rng.randint(0, 80)
        brute = sum(
            1
            for i in range(lo, hi + 1)
            if i >= h.fault_after and (i - h.fault_after) % h.fault_every == 0
        )
        assert _failing_between(h, lo, hi) == brute


# -- the clock --------------------------------------------------------------------------------


def test_clock_runs_in_time_order_ties_first_in_first_out() -> None:
    clock = Clock()
    seen: list[tuple[float, str]] = []
    clock.at(5.0, lambda: seen.append((clock.now, "b")))
    clock.at(5.0, lambda: seen.append((clock.now, "c")))
    clock.at(1.0, lambda: seen.append((clock.now, "a")))
    clock.at(math.inf, lambda: seen.append((clock.now, "never")))
    clock.every(0.0, 4.0, lambda: seen.append((clock.now, "tick")))
    clock.run_until(8.0)
    assert seen == [(0.0, "tick"), (1.0, "a"), (4.0, "tick"), (5.0, "b"), (5.0, "c"), (8.0, "tick")]
    assert clock.now == 8.0


# -- both policies on a small world -------------------------------------------------------------


def small_market(seed: int = 3) -> Market:
    return Market(
        world_seed=7, seed=seed, hosts=120, scenario=Scenario("clean", 0, 0), config=config(2),
        days=1,
    )  # fmt: skip


def first_machine(fleet_policy: VastuiPolicy | OriginalPolicy) -> int:
    return next(iter(fleet_policy.fleet.workers.values())).offer.machine_id


def test_runs_are_deterministic() -> None:
    a = VastuiPolicy(small_market(), config(2)).run(24)
    b = VastuiPolicy(small_market(), config(2)).run(24)
    assert a == b and a.rentals > 0
    c = OriginalPolicy(small_market(), config(2)).run(24)
    d = OriginalPolicy(small_market(), config(2)).run(24)
    assert c == d and c.rentals > 0


def test_vastui_bans_a_failing_machine_the_original_rents_it_again() -> None:
    market = small_market()
    vastui = VastuiPolicy(market, config(2))
    vastui.run(24)
    original = OriginalPolicy(market, config(2))
    original.run(24)
    for mid in (first_machine(vastui), first_machine(original)):
        market.hidden[mid] = Hidden("cuda_abort", 3, 4)  # an error in every benchmark

    again = VastuiPolicy(market, config(2))
    out = again.run(24)
    mid = first_machine(vastui)
    assert mid in again.bad
    assert sum(1 for w in again.fleet.workers.values() if w.offer.machine_id == mid) == 1
    assert out.rejected_spent > 0

    blind = OriginalPolicy(market, config(2))
    blind.run(24)
    mid = first_machine(original)
    rents = [w for w in blind.fleet.workers.values() if w.offer.machine_id == mid]
    assert len(rents) > 3  # no memory: the cheapest machine is deployed every check
    assert all(w.rec.kill_kind == "deadline_benchmark" for w in rents[:-1])


def test_spend_is_billed_time_by_price_and_bandwidth_by_the_gb() -> None:
    vastui = VastuiPolicy(small_market(), config(2))
    out = vastui.run(24)
    workers = list(vastui.fleet.workers.values())
    by_hand = sum(
        ((w.rec.killed_at or 24 * H) - (w.rec.created_at or 0.0)) / H * (w.rec.dph_total or 0.0)
        for w in workers
    )
    assert out.spent == pytest.approx(by_hand + out.bandwidth)
    assert out.bandwidth == pytest.approx(sum(bandwidth_by_hand(w, 24 * H) for w in workers))
    assert 0 <= out.rejected_spent <= out.spent


def bandwidth_by_hand(w: Worker, now: float) -> float:
    """The parameters (all of them once the fetch ended, else what the link carried), each
    production request down and each proof up, at the offer's $/GB."""
    end = w.rec.killed_at if w.rec.killed_at is not None else now
    down, up = w.offer.inet_down_cost or 0.0, w.offer.inet_up_cost or 0.0
    if w.rec.params_to is not None:
        params = PARAMS_GB
    elif w.rec.params_from is not None:
        params = min(PARAMS_GB, (end - w.rec.params_from) * (w.offer.inet_down or 0) / 8000)
    else:
        params = 0.0
    done, failed = w.work(now)
    return params * down + (done + failed) * REQUEST_GB * down + done * PROOF_UP_GB * up


@pytest.mark.parametrize("policy_of", ["vastui", "original", "fair", "literal"])
def test_every_policy_pays_the_parameters_download_of_each_rental(policy_of: str) -> None:
    """Issue 43 item 5: a rental's cost includes the ~145 GB of parameters × the offer's
    $/GB, whichever policy rented it (the records once carried no $/GB: bandwidth was 0)."""
    market = small_market()
    runner = (
        VastuiPolicy(market, config(2))
        if policy_of == "vastui"
        else OriginalPolicy(
            market, config(2), fair=policy_of == "fair", literal=policy_of == "literal"
        )
    )
    out = runner.run(24)
    fetched = [w for w in runner.fleet.workers.values() if w.rec.params_to is not None]
    assert fetched and out.bandwidth > 0
    for w in fetched:
        price = w.offer.inet_down_cost or 0.0
        assert w.rec.inet_down_cost == price
        billed = spend.instance_cost(w.billed(24 * H), 24 * H)
        time_only = spend.time_cost(w.rec, 24 * H)
        assert billed - time_only >= PARAMS_GB * price - 1e-9
    assert out.bandwidth == pytest.approx(
        sum(bandwidth_by_hand(w, 24 * H) for w in runner.fleet.workers.values())
    )


# -- the original at its best (issue 18) ------------------------------------------------------


def test_the_fair_originals_crashed_benchmark_posts_zero_at_once() -> None:
    for fault in ("cuda_abort", "no_cuda", "gpu_oom"):
        crashed = original_bench(rental(60.0, Hidden(fault, 3, 4)), crash_posts_zero=True)
        assert crashed.rate == 0.0 and crashed.duration < 45 * 60, fault
    hung = original_bench(rental(60.0, Hidden("hang", 3, 4)), crash_posts_zero=True)
    assert hung.rate is None and math.isinf(hung.duration)  # a hang posts nothing: the timeout


def test_the_fair_original_reads_known_perf() -> None:
    market = small_market()
    fair = OriginalPolicy(market, config(2), fair=True)
    offers = sorted(fair.fleet.available(0.0), key=lambda o: (o.dph_total, o.id))[:4]
    a, b, c, d = offers
    rates = {
        b.machine_id: 1000.0,  # pays: first
        c.machine_id: 0.1,  # known too slow for its price: passed over
        d.machine_id: 2000.0,  # pays better per proof: before b
    }
    fair.known = {m: {("RTX 4090", 1): r} for m, r in rates.items()}
    order = fair._by_known_perf(offers)
    assert c not in order and order[-1] is a  # the unknown after the known, in $/h order
    assert order[:2] == sorted([b, d], key=lambda o: o.dph_total / rates[o.machine_id])


def test_known_perf_shows_the_last_row_of_the_machine_as_the_original_does() -> None:
    # host_perf is keyed by (machine, GPU, GPUs); the offers table shows one row per machine,
    # the last scanned (vast-manager main.go:1237-1251): the largest (gpu_name, num_gpus)
    market = small_market()
    offer = sorted(market.listed(0.0), key=lambda o: o.id)[0]
    one = replace(offer, num_gpus=1)
    rows = {("RTX 4090", 8): 800.0, ("RTX 4090", 1): 150.0}
    first = OriginalPolicy(market, config(2), fair=True)
    first.known = {offer.machine_id: dict(rows)}
    assert first._known_rate(one) == 800.0  # the bench's first model: the machine's best
    shown = OriginalPolicy(market, config(2), fair=True, known_by_slice=True)
    shown.known = {offer.machine_id: dict(rows)}
    assert shown._known_rate(one) == pytest.approx(100.0)  # the 8-GPU row, per GPU
    assert shown._known_rate(replace(offer, machine_id=offer.machine_id + 1)) is None


def test_the_fair_original_ignores_a_failing_machine_and_rents_it_once() -> None:
    market = small_market()
    original = OriginalPolicy(market, config(2))
    original.run(24)
    mid = first_machine(original)
    market.hidden[mid] = Hidden("cuda_abort", 3, 4)  # an error in every benchmark
    fair = OriginalPolicy(market, config(2), fair=True)
    fair.run(24)
    rents = [w for w in fair.fleet.workers.values() if w.offer.machine_id == mid]
    assert len(rents) == 1 and mid in fair.ignored
    assert rents[0].rec.kill_kind == "bench_below_min"  # 0 proofs/h posted, destroyed at once


def test_a_bid_worker_keeps_the_hosts_floor_not_the_going_price_it_was_rented_at():
    # The bench's outbid check is floor x the highest other bid at t (vastsim/bids.py); a
    # floor taken from a search's going price would count the bidders present at the rent twice.
    market = Market(
        world_seed=7, seed=7, hosts=40, scenario=Scenario("demo", 1.0, 0.0), config=config(),
        days=1, bid_pressure=8.0,
    )  # fmt: skip
    listed = list(market.listed(0.0))
    for t in (h * 3600.0 for h in range(0, 48)):
        seen = {o.id: o for o in market.with_going_bids(listed, t)}
        raised = [o for o in listed if o.id in seen and seen[o.id].min_bid != o.min_bid]
        if raised:
            break
    assert raised, "no other bidder in 48 h at pressure 8"
    for original in raised:
        going = seen[original.id]
        assert going.min_bid > original.min_bid
        assert market.floor(going) == original.min_bid


# -- the neutral world (issue 30 item 6, issue 43 item 5) -----------------------------------


DEMO = Scenario("demo", 1.0, 0.0)


def neutral_market(seed: int = 7, hosts: int = 60, scenario: Scenario = DEMO) -> Market:
    return Market(
        world_seed=seed, seed=seed, hosts=hosts, scenario=scenario, config=config(2), days=1,
        neutral=True,
    )  # fmt: skip


def test_the_same_seed_draws_the_same_neutral_world_and_another_seed_another() -> None:
    a, b, c = neutral_market(7), neutral_market(7), neutral_market(8)
    listed = a.listed(0.0)
    assert listed == b.listed(0.0) and listed != c.listed(0.0)
    assert a.listed(0.0, ORIGINAL_FILTER, ORIGINAL_DISK_GB) == b.listed(
        0.0, ORIGINAL_FILTER, ORIGINAL_DISK_GB
    )
    assert [a.rate(o) for o in listed] == [b.rate(o) for o in listed]
    fates = [(m, k) for m in list(a.hidden)[:30] for k in range(5)]
    assert [a.hidden_for(m, k) for m, k in fates] == [b.hidden_for(m, k) for m, k in fates]
    assert a.neutral is not None and b.neutral is not None
    assert a.neutral.unknown == b.neutral.unknown and a.neutral.ram_curve == b.neutral.ram_curve


def test_the_neutral_worlds_speeds_centre_on_the_published_figure_not_on_the_priors() -> None:
    """The true mean rate over many machines is the published level (the RTX 5070 Ti's
    37.7 s/proof, ≈3.2 × its prior), not vastui's prior; the demo's world centres on the prior."""
    published = 3600.0 / PUBLISHED_S_PER_PROOF["RTX 5070 Ti"]
    level = published / DEFAULT_GPU_RATES["RTX 5070 Ti"]
    for seed in (7, 8, 9):
        market = neutral_market(seed, hosts=400)
        world = market.neutral
        assert world is not None
        ratios: dict[str, list[float]] = {}
        for m in market.machines:
            true_full = world.model_rate(m.gpu_name) * m.perf["draw"]  # ample RAM and CPU
            ratios.setdefault(m.gpu_name, []).append(true_full / DEFAULT_GPU_RATES[m.gpu_name])
        measured = statistics.fmean(ratios["RTX 5070 Ti"])
        assert measured == pytest.approx(level, rel=0.1)  # the published figure, drawn around
        for model, values in ratios.items():
            assert 0.65 * level <= statistics.fmean(values) <= 1.35 * level, model
        every = statistics.fmean(r for values in ratios.values() for r in values)
        assert abs(every - 1.0) > 1.0  # far from the prior
        demo = statistics.fmean(
            m.base_rate / DEFAULT_GPU_RATES[m.gpu_name] for m in market.machines
        )
        assert abs(demo - 1.0) < 0.25  # the demo's world: the prior × U(0.75, 1.25)


def test_neutral_prices_follow_the_published_figures() -> None:
    market = neutral_market(7, hosts=400)
    per_gpu = [
        o.dph_total - (o.storage_total_cost or 0.0)
        for o in market.listed(0.0, "gpu_name=RTX_4090", 5.0)
        if o.num_gpus == 1
    ]
    assert per_gpu and NEUTRAL_PRICE_CENTRE["RTX 4090"] == PUBLISHED_4090_ON_DEMAND
    assert statistics.fmean(per_gpu) == pytest.approx(PUBLISHED_4090_ON_DEMAND, rel=0.15)
    assert min(per_gpu) >= 0.65 * PUBLISHED_4090_ON_DEMAND - 1e-9
    assert max(per_gpu) <= 1.35 * PUBLISHED_4090_ON_DEMAND + 1e-9
    # interruptible floors at the published $0.31 ÷ $0.45, spread
    shares = [
        o.min_bid / (o.dph_total - (o.storage_total_cost or 0.0))
        for o in market.listed(0.0)
        if o.min_bid
    ]
    assert shares
    assert all(0.55 <= x <= 0.8 for x in shares)
    assert len({o.inet_down_cost for o in market.listed(0.0)}) > 10  # $0-50/TB per machine
    assert all(0 <= (o.inet_down_cost or 0) <= 0.05 for o in market.listed(0.0))


def test_a_good_machine_fails_sometimes_and_a_bad_one_passes_sometimes() -> None:
    market = neutral_market(7, hosts=120)
    faulty = [m for m, h in market.hidden.items() if h.fault != "none"]
    good = [m for m, h in market.hidden.items() if h.fault == "none"]
    assert faulty and good
    rentals = 300

    def struck(mid: int) -> int:
        return sum(market.hidden_for(mid, k).fault != "none" for k in range(rentals))

    bad_counts = [struck(m) for m in faulty]
    assert all(0 < n < rentals for n in bad_counts)  # every bad machine passes sometimes
    assert statistics.fmean(bad_counts) > 0.5 * rentals  # and fails most rentals
    good_counts = [struck(m) for m in good[:60]]
    assert sum(1 for n in good_counts if n > 0) > 30  # good machines fail sometimes
    assert statistics.fmean(good_counts) < 0.08 * rentals  # rarely
    # a clean market has no faults at all; the same rental meets the same fate every time
    clean = neutral_market(7, hosts=120, scenario=Scenario("clean", 0.0, 0.0))
    assert all(clean.hidden_for(m, k).fault == "none" for m in good[:20] for k in range(50))
    assert [market.hidden_for(faulty[0], k) for k in range(20)] == [
        market.hidden_for(faulty[0], k) for k in range(20)
    ]


def test_the_neutral_world_lists_two_models_under_names_vastui_has_no_prior_for() -> None:
    market = neutral_market()
    world = market.neutral
    assert world is not None and len(world.unknown) == 2
    names = {o.gpu_name for o in market.listed(0.0)}
    assert not world.unknown & names
    assert {world.listed_name(m) for m in world.unknown} & names
    for model in world.unknown:
        assert world.listed_name(model) not in DEFAULT_GPU_RATES
    curve = [world.ram_factor(g) for g in (64, 128, 256, 384, 512, 1024)]
    assert curve == sorted(curve) and curve[-1] == 1.0


# -- the literal original (issue 43 item 5) ---------------------------------------------------


def test_the_literal_original_rents_through_its_own_filter() -> None:
    """An offer vastui's filter refuses (its driver_version>=580) but the original's accepts
    is rentable by the literal original, and the literal original rents it when cheapest."""
    market = small_market()
    cheapest = min(
        market.listed(0.0, ORIGINAL_FILTER, ORIGINAL_DISK_GB), key=lambda o: (o.dph_total, o.id)
    )
    for offer in market.by_id[cheapest.machine_id].offers:
        offer["driver_version"], offer["driver_vers"] = "575.57.08", 575_057_008
    market._listings.clear()  # search again with the machine's new driver
    assert cheapest.machine_id not in {o.machine_id for o in market.listed(0.0)}
    literal = OriginalPolicy(market, config(2), literal=True)
    assert cheapest.id in {o.id for o in literal.fleet.available(0.0)}
    vastui = VastuiPolicy(market, config(2))
    assert cheapest.id not in {o.id for o in vastui.fleet.available(0.0)}
    literal.run(1)
    assert cheapest.machine_id in {w.offer.machine_id for w in literal.fleet.workers.values()}
    # the fair original rents through vastui's filter (generous): it never sees it
    fair = OriginalPolicy(market, config(2), fair=True)
    fair.run(1)
    assert cheapest.machine_id not in {w.offer.machine_id for w in fair.fleet.workers.values()}


def test_the_literal_benchmark_times_proofs_one_at_a_time() -> None:
    r = rental(60.0)
    seq = literal_bench(r)
    piped = literal_bench(r, sequential=False)
    assert seq.rate is not None and piped.rate is not None
    # each proof's whole latency (synthesis, then GPU), slowed while the PCE is extracted again
    assert seq.rate < 60.0 / (1 + SYNTH_SHARE) * 1.001
    assert seq.rate > 60.0 / (1 + SYNTH_SHARE) / 1.5
    assert piped.rate == pytest.approx(60.0, rel=0.2) and seq.duration > piped.duration
    failed = literal_bench(rental(60.0, Hidden("gpu_panic", 2, 3)))
    assert failed.rate is not None and failed.rate < seq.rate  # failed proofs not counted
    for fault in ("cuda_abort", "hang", "no_cuda", "gpu_oom", "host_oom"):
        crashed = literal_bench(rental(60.0, Hidden(fault, 3, 4)))
        assert crashed.rate is None and math.isinf(crashed.duration), fault  # the timeout


def test_the_literal_operator_ignores_the_red_known_perf_badge_only() -> None:
    market = small_market()
    literal = OriginalPolicy(market, config(2), literal=True)
    literal.known = {1: {("RTX 4090", 1): 24.9}, 2: {("RTX 4090", 1): 25.0}}
    literal.operator()
    assert literal.ignored == {1}  # below 25 p/h: "bad" (ui.html:1140), "Not good enough"
