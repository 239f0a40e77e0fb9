"""The benchmark's time limit follows the rate the price requires (policy.bench_timeout_s): a
cheap, slow machine that pays gets the time its proofs take; a stalled one is still cut off."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from vastui.config import Config
from vastui.domain.worker import InstanceRecord
from vastui.engine import policy


@pytest.mark.parametrize(
    ("min_rate", "proofs", "seconds"),
    [
        (None, 12, 2400),  # unknown rate: the script's default
        (60.0, 12, 2400),  # fast machine: 1200 + 1.5 x 720 = 2280, the floor holds
        (30.0, 12, 3360),  # 1200 + 1.5 x 1440
        (29.0, 12, 3435),  # 1200 + ceil(1.5 x 1489.66)
        (13.0, 12, 6185),  # $0.10/h at $0.008/proof: 1200 + ceil(1.5 x 3323.08)
        (29.0, 3, 2400),
        (1.0, 12, policy.BENCH_TIMEOUT_CAP_S),  # capped: no benchmark is worth a day
        (0.0, 12, 2400),  # nonsense in: the default, never a division by zero
        (-5.0, 12, 2400),
        (math.nan, 12, 2400),
        (math.inf, 12, 2400),
        (29.0, 0, 2400),
    ],
)
def test_bench_timeout_scales_with_the_min_rate(min_rate, proofs, seconds):
    assert policy.bench_timeout_s(min_rate, proofs) == seconds


def test_a_slow_machine_at_its_min_rate_fits_its_budget():
    for min_rate in (1.0, 5.0, 13.0, 29.0, 47.0, 100.0):
        proofs = 12
        at_min_rate = policy.BENCH_SETUP_S + proofs * 3600 / min_rate
        assert policy.bench_timeout_s(min_rate, proofs) >= min(
            at_min_rate, policy.BENCH_TIMEOUT_CAP_S
        )


def _bench_rec(min_rate: float | None) -> InstanceRecord:
    return InstanceRecord(
        vast_id=7, label="vastui-main-x", machine_id=3, state="benchmark",
        benchmark_at=1000.0, min_rate=min_rate,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("min_rate", "benchmark_min", "limit_s"),
    [
        (None, 45.0, 2700.0),  # the configured 45 min is longer than 2400 + 300
        (29.0, 45.0, 3735.0),  # the script's 3435 s + 300 s grace
        (13.0, 45.0, 6485.0),
        (29.0, 120.0, 7200.0),  # an operator's longer deadline wins
    ],
)
def test_the_engine_deadline_waits_past_the_script_limit(min_rate, benchmark_min, limit_s):
    base = Config()
    config = replace(base, deadlines=replace(base.deadlines, benchmark_min=benchmark_min))
    rec = _bench_rec(min_rate)
    assert policy.bench_deadline_s(rec, config) == limit_s
    assert policy.deadline_kill(rec, 1000.0 + limit_s, config) is None
    kill = policy.deadline_kill(rec, 1000.0 + limit_s + 1, config)
    assert kill is not None and kill.kind == "deadline_benchmark" and kill.strike
    assert kill.reason == f"benchmark timeout ({round(limit_s / 60, 1):g} min)"
