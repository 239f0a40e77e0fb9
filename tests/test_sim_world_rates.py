"""The simulated world's GPU rates, drawn apart from vastui's priors
(vastsim.market.world_rate_mean): a neutral world for the economics bench and the demo."""

from __future__ import annotations

import statistics

import pytest

from vastsim.market import (
    GPU_BY_NAME,
    GPU_MODELS,
    RATE_FACTOR_RANGE,
    generate_market,
    world_rate_factor,
    world_rate_mean,
)
from vastui.engine.ranking import DEFAULT_GPU_RATES

NOW = 1_790_000_000.0


def test_the_reference_figures_are_vastuis_priors_and_the_world_is_off_them():
    """The figures are original-system.md §4's (and vastui's priors hold the same); each world
    multiplies each model's by a factor of its own in [0.75, 1.25]."""
    lo, hi = RATE_FACTOR_RANGE
    assert (lo, hi) == (0.75, 1.25)
    for model in GPU_MODELS:
        assert model.rate_mean == DEFAULT_GPU_RATES[model.name]
    factors = {
        (ws, m.name): world_rate_factor(ws, m.name) for ws in range(1, 41) for m in GPU_MODELS
    }
    assert all(lo <= f <= hi for f in factors.values())
    assert min(factors.values()) < 0.8 and max(factors.values()) > 1.2
    # Differently on each world seed, and per model within a world.
    for m in GPU_MODELS:
        assert len({round(factors[ws, m.name], 9) for ws in range(1, 41)}) == 40
    assert len({round(factors[7, m.name], 9) for m in GPU_MODELS}) == len(GPU_MODELS)
    # Deterministic.
    assert world_rate_factor(7, "RTX 4090") == world_rate_factor(7, "RTX 4090")
    assert world_rate_mean(7, GPU_BY_NAME["RTX 4090"]) == pytest.approx(
        32.0 * world_rate_factor(7, "RTX 4090")
    )


def test_machines_draw_their_rate_around_the_worlds_mean_not_the_prior():
    machines = generate_market(7, hosts=1500, clock_now=NOW)
    for m in machines:
        mean = world_rate_mean(7, GPU_BY_NAME[m.gpu_name])
        assert m.perf["model_mean"] == mean
        assert m.perf["reference_mean"] == GPU_BY_NAME[m.gpu_name].rate_mean
        assert m.base_rate == pytest.approx(mean * m.perf["draw"])
    # The draws are N(1, 15 %) around the world's mean: per model, the machines' mean rate
    # is the world's, not the prior's, where the two are apart.
    checked = 0
    for model in GPU_MODELS:
        rates = [m.base_rate for m in machines if m.gpu_name == model.name]
        world = world_rate_mean(7, model)
        if len(rates) >= 100 and abs(world / model.rate_mean - 1) > 0.1:
            assert statistics.mean(rates) == pytest.approx(world, rel=0.05)
            assert abs(statistics.mean(rates) - model.rate_mean) > 0.05 * model.rate_mean
            checked += 1
    assert checked >= 2


def test_the_rest_of_the_world_does_not_move_with_the_rates(monkeypatch):
    """The factors come from dice of their own: the world of a seed at its reference rates has
    the same machines, offers and ids, and each machine the same draw around its mean."""
    from vastsim import market as sim_market

    neutral = generate_market(7, hosts=60, clock_now=NOW)
    monkeypatch.setattr(sim_market, "RATE_FACTOR_RANGE", (1.0, 1.0))
    reference = generate_market(7, hosts=60, clock_now=NOW)
    assert [m.offers for m in neutral] == [m.offers for m in reference]
    assert [m.perf["draw"] for m in neutral] == [m.perf["draw"] for m in reference]
    assert all(m.base_rate == m.perf["reference_mean"] * m.perf["draw"] for m in reference)
    assert [m.base_rate for m in neutral] != [m.base_rate for m in reference]
