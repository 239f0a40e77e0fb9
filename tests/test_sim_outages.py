"""The simulated world's outage model (vastsim.outages): a rented host goes offline at the
hazard its listed reliability implies, shared by the simulated cloud and the economics bench."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from vastsim.outages import OUTAGE_HORIZON_S, offline_hazard_per_hour, outage_after

DAY_S = 86400.0


def test_the_hazard_is_the_one_that_keeps_a_machine_up_a_day_with_its_reliability():
    for r in (0.9, 0.99, 0.9995):
        hazard = offline_hazard_per_hour(r)
        assert math.exp(-24 * hazard) == pytest.approx(r)
        assert offline_hazard_per_hour(r, 2.5) == pytest.approx(2.5 * hazard)
        assert offline_hazard_per_hour(r, 0.0) == 0.0
    assert offline_hazard_per_hour(1.0) == 0.0
    assert offline_hazard_per_hour(0.9) > offline_hazard_per_hour(0.99)
    assert offline_hazard_per_hour(0.0) == math.inf
    assert offline_hazard_per_hour(1.2) == 0.0  # clamped
    for bad in ((math.nan, 1.0), (0.9, math.nan), (0.9, -0.1)):
        with pytest.raises(ValueError):
            offline_hazard_per_hour(*bad)


@pytest.mark.parametrize("reliability", [0.9, 0.98])
def test_the_share_of_rentals_down_within_a_day_is_one_less_the_reliability(reliability):
    rng = random.Random(11)
    n = 20_000
    draws = [outage_after(rng, reliability) for _ in range(n)]
    within_day = sum(d is not None and d <= DAY_S for d in draws) / n
    expected = 1 - reliability
    assert within_day == pytest.approx(expected, abs=4 * math.sqrt(expected * (1 - expected) / n))
    assert all(d is None or 0 <= d <= OUTAGE_HORIZON_S for d in draws)
    # Exponential: memoryless, the mean time to an outage 24 / -ln(r) hours.
    mean_h = 1 / offline_hazard_per_hour(reliability)
    seen = [d / 3600 for d in draws if d is not None]
    assert len(seen) == pytest.approx(n * (1 - reliability**7), rel=0.05)  # within the week
    assert statistics.median(seen) < mean_h


def test_an_outage_draw_takes_one_die_whatever_the_hazard():
    """So a rental's later dice (the bench's proof jitter) are the same ones on every world."""
    tails = []
    for reliability, rate in ((0.9, 1.0), (0.9995, 1.0), (1.0, 1.0), (0.9, 0.0), (0.0, 1.0)):
        rng = random.Random(5)
        outage_after(rng, reliability, rate)
        tails.append(rng.random())
    assert len(set(tails)) == 1
    assert outage_after(random.Random(5), 0.9, 0.0) is None
    assert outage_after(random.Random(5), 0.0) == 0.0
    assert outage_after(random.Random(5), 0.9, horizon_s=0.0) is None
