from __future__ import annotations

import pytest

from vastui.domain.machines import PerfRecord
from vastui.engine.ranking import DEFAULT_GPU_RATES, RAM_FACTORS, ram_class, rank_offers
from vastui.vast.models import Offer


def offer(oid: int, machine: int, gpu: str = "RTX 4090", n: int = 1, dph: float = 0.3,
          ram_gb: float = 516.0) -> Offer:  # fmt: skip
    return Offer.from_api(
        {
            "id": oid,
            "machine_id": machine,
            "gpu_name": gpu,
            "num_gpus": n,
            "dph_total": dph,
            "cpu_ram": ram_gb * 1000,
        }
    )


def perf(machine: int, rate: float, gpu: str = "RTX 4090", n: int = 1, ram_gb: float = 516.0,
         at: float = 1.0) -> PerfRecord:  # fmt: skip
    return PerfRecord(machine, gpu, n, best_rate=rate, last_rate=rate, samples=1, measured_at=at,
                      cpu_ram_gb=ram_gb)  # fmt: skip


def test_min_rate_and_cost_per_proof_from_known_rate():
    [r] = rank_offers([offer(1, 10, dph=0.232)], [perf(10, 40.0)], set(), 0.008)
    assert r.min_rate == 29.0
    assert r.known_rate == 40.0 and r.rate_source == "measured"
    assert r.expected_cost_per_proof == pytest.approx(0.232 / 40.0)
    assert r.viable


def test_known_slow_machine_is_not_viable_at_its_price_but_is_when_cheap():
    slow = [perf(10, 20.0)]
    [pricey] = rank_offers([offer(1, 10, dph=0.3)], slow, set(), 0.008)
    assert pricey.min_rate == 38.0 and not pricey.viable
    [cheap] = rank_offers([offer(1, 10, dph=0.15)], slow, set(), 0.008)
    assert cheap.min_rate == 19.0 and cheap.viable


def test_prior_is_median_of_peers_with_same_model_and_ram_class():
    measured = [perf(20, 30.0), perf(21, 34.0), perf(22, 50.0), perf(23, 10.0, ram_gb=128.0)]
    [r] = rank_offers([offer(1, 99, n=2, ram_gb=1032.0)], measured, set(), 0.008)
    assert r.known_rate is None and r.rate_source == "peers(3)"
    assert r.expected_rate == pytest.approx(34.0 * 2)


def test_prior_falls_back_to_model_default_with_ram_factor():
    [r] = rank_offers([offer(1, 99, gpu="RTX 5090", ram_gb=256.0)], [], set(), 0.008)
    assert r.rate_source == "model-default"
    assert r.expected_rate == pytest.approx(DEFAULT_GPU_RATES["RTX 5090"] * RAM_FACTORS["256"])
    [u] = rank_offers([offer(2, 98, gpu="GTX 1080")], [], set(), 0.008)
    assert u.expected_rate is None and not u.viable and u.rate_source == "unknown"


def test_known_rate_scales_per_gpu_across_slices_of_one_machine():
    [r] = rank_offers([offer(1, 10, n=4, dph=0.8)], [perf(10, 35.0, n=1)], set(), 0.008)
    assert r.known_rate == pytest.approx(140.0)


def test_bad_machines_flagged_never_viable_and_ranking_sorts_by_expected_cost():
    offers = [offer(1, 10, dph=0.5), offer(2, 11, dph=0.2), offer(3, 12, dph=0.3),
              offer(4, 13, gpu="Mystery GPU", dph=0.01)]  # fmt: skip
    measured = [perf(10, 100.0), perf(11, 20.0), perf(12, 40.0)]
    ranked = rank_offers(offers, measured, {12: "GPU errors"}, 0.008)
    assert [r.offer.id for r in ranked] == [1, 3, 2, 4]  # 0.005, 0.0075, 0.01 $/proof, unknown
    bad = next(r for r in ranked if r.offer.id == 3)
    assert bad.bad and bad.bad_reason == "GPU errors" and not bad.viable


@pytest.mark.parametrize(
    ("ram", "n", "klass"),
    [
        (128, 1, "128"),
        (258, 1, "256"),
        (387, 1, "384"),
        (516, 1, "512+"),
        (516, 4, "128"),
        (None, 1, "unknown"),
    ],
)
def test_ram_class(ram, n, klass):
    assert ram_class(ram, n) == klass


def test_a_machine_that_proved_well_is_preferred_by_its_measured_record():
    # Machine 10 measured 42.5/h. Machine 11 is its peer (same model, same RAM class) at the same
    # price: its prior is the peers' median, 42.5 too; at equal $/proof the measured record wins.
    ranked = rank_offers([offer(2, 11), offer(1, 10)], [perf(10, 42.5)], set(), 0.008)
    assert [r.offer.id for r in ranked] == [1, 2]
    assert [r.rate_source for r in ranked] == ["measured", "peers(1)"]
    # Against another model's default (RTX 5090: 42/h) at the same price, the measured rate wins.
    ranked = rank_offers(
        [offer(3, 12, gpu="RTX 5090"), offer(1, 10)], [perf(10, 42.5)], set(), 0.008
    )
    assert [r.offer.id for r in ranked] == [1, 3]


def test_an_aborted_benchmarks_pace_ranks_its_machine_and_its_peers() -> None:
    """A machine that just aborted its benchmark at 24.1 proofs/h (below its min_rate 29) is
    not rented again at the same price on the strength of its GPU's prior: its own partial pace
    is its known rate, marked partial, and its peers' prior learns it too."""
    from dataclasses import replace as _replace

    mine = offer(7, 70, dph=0.29)
    max_cpp = 0.01  # min_rate 29 at $0.29/h
    fresh = rank_offers([mine], [], set(), max_cpp)[0]
    assert fresh.viable and fresh.known_rate is None  # the prior says yes
    aborted = _replace(perf(70, 24.1), last_partial=True)
    again = rank_offers([mine], [aborted], set(), max_cpp)[0]
    assert (again.known_rate, again.rate_source, again.viable) == (24.1, "partial", False)
    peer = offer(8, 80, dph=0.29)
    assert rank_offers([peer], [aborted], set(), max_cpp)[0].prior_rate == pytest.approx(24.1)
