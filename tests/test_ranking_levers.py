"""The ranking's levers (issue 18, item 4), off by default because the economics bench shows
they do not pay (bench/README.md): the set-up spread over a rental's life, and a GPU model's
few measurements blended with the built-in prior."""

from __future__ import annotations

import pytest

from vastui.config import Config
from vastui.domain.machines import PerfRecord
from vastui.engine.ranking import DEFAULT_GPU_RATES, Levers, rank_offers, setup_hours
from vastui.vast.models import Offer


def offer(oid: int, inet_down: float, gpu: str = "RTX 4090", dph: float = 0.20) -> Offer:
    return Offer(
        id=oid, machine_id=oid, host_id=1, gpu_name=gpu, num_gpus=1, gpu_ram_gb=24.0,
        cpu_ram_gb=512.0, cpu_cores=32.0, cpu_name=None, dph_total=dph, disk_space_gb=500.0,
        inet_down=inet_down, inet_up=inet_down, pcie_bw=None, reliability=0.99,
        geolocation=None, cuda_max_good=12.8, verified=True, rentable=True,
    )  # fmt: skip


def test_setup_hours_are_the_download_the_fixed_setup_and_the_benchmark():
    fast, slow = setup_hours(10_000, 30.0, 12), setup_hours(100, 30.0, 12)
    # 135 GiB at 100 Mbit/s is 3.2 h; at 10 Gbit/s two minutes
    assert slow - fast == pytest.approx(135 * 2**30 * 8 / 1e8 / 3600 * 0.99, rel=0.01)
    assert setup_hours(None, 30.0, 12) == setup_hours(1000, 30.0, 12)
    assert setup_hours(1000, 15.0, 12) > setup_hours(1000, 30.0, 12)


def test_spreading_the_setup_prefers_the_faster_link_at_one_price():
    offers = [offer(101, 120.0), offer(102, 5000.0)]
    plain = rank_offers(offers, [], {}, 0.008)
    assert plain[0].expected_cost_per_proof == plain[1].expected_cost_per_proof
    spread = rank_offers(offers, [], {}, 0.008, levers=Levers(setup_lifetime_h=48.0))
    assert [r.offer.id for r in spread] == [102, 101]
    assert spread[0].expected_cost_per_proof > plain[0].expected_cost_per_proof
    # viability is the rate's, never the set-up's
    assert [r.viable for r in spread] == [r.viable for r in plain]


def test_prior_blend_weighs_few_measurements_against_the_builtin_prior():
    measured = [
        PerfRecord(machine_id=1, gpu_name="RTX 4090", num_gpus=1, best_rate=60.0,
                   last_rate=60.0, samples=1, measured_at=0.0, cpu_ram_gb=512.0)
    ]  # fmt: skip
    other = [offer(2, 1000.0)]
    peers = rank_offers(other, measured, {}, 0.008)[0]
    assert peers.prior_rate == pytest.approx(60.0)
    blended = rank_offers(other, measured, {}, 0.008, levers=Levers(prior_blend=True))[0]
    assert blended.prior_rate == pytest.approx((60.0 + 2 * DEFAULT_GPU_RATES["RTX 4090"]) / 3)


def test_the_levers_are_off_by_default():
    levers = Levers.of(Config())
    assert levers.setup_lifetime_h == 0 and not levers.prior_blend


def test_each_proofs_bandwidth_counts_at_the_offers_price_per_gb():
    """Every request's ~51 MB download and its proof's upload are billed at the offer's $/GB
    (issue 30 item 4): two offers alike but for bandwidth rank by it, by 51 MB x the price."""
    from dataclasses import replace

    from vastui.engine.ranking import PARAMS_GB, PROOF_UP_GB, REQUEST_GB

    free = offer(201, 1000.0)
    billed = replace(free, id=202, machine_id=202, inet_down_cost=0.02, inet_up_cost=0.01)
    ranked = {r.offer.id: r for r in rank_offers([billed, free], [], {}, 0.008)}
    assert [r.offer.id for r in rank_offers([billed, free], [], {}, 0.008)] == [201, 202]
    extra = ranked[202].expected_cost_per_proof - ranked[201].expected_cost_per_proof
    assert extra == pytest.approx(REQUEST_GB * 0.02 + PROOF_UP_GB * 0.01, abs=1e-5)
    # with the set-up spread over a life, the parameters' download at $/GB too
    life = Levers(setup_lifetime_h=48.0)
    spread = {r.offer.id: r for r in rank_offers([billed, free], [], {}, 0.008, levers=life)}
    rate = ranked[201].expected_rate
    assert rate is not None
    more = spread[202].expected_cost_per_proof - spread[201].expected_cost_per_proof
    assert more == pytest.approx(extra + PARAMS_GB * 0.02 / (48.0 * rate), rel=0.05)
