"""The sequential change test on the request stream (vastui/engine/demandshift.py): seeded
streams made as curio's request task makes them, in front of a fleet of a given capacity."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from vastui.engine.demandshift import HOUR, Params, Run, Watch


def stream(
    seed: int, rate_of: Callable[[float], float], hours: float, cap: float, high: int = 8
) -> list[Run]:
    """curio's request task (task_request.go): asks for up to ``high`` less the queue while
    5 or fewer wait; the fleet drains the queue at ``cap``/h; arrivals Poisson at the rate."""
    rng = random.Random(seed)
    t, q, end, out = 0.0, 0.0, hours * HOUR, []
    while t < end:
        start, n, want = t, 0, max(3, high - int(q))
        while n < want and t < end:
            dt = rng.expovariate(rate_of(t) / HOUR)
            t, n = t + dt, n + 1
            q = max(0.0, q - cap / HOUR * dt)
        if t >= end:
            break
        out.append(Run(t, t - start, n))
        q += n
        if q > 5:  # the task waits until the fleet has taken the queue down to 5
            t += (q - 5) / cap * HOUR
            q = 5
        t += 3.0  # ProofRequestPollInterval
    return out


@pytest.mark.parametrize("rate", [10.0, 25.0, 60.0])
def test_a_steady_week_raises_at_most_one_false_alarm(rate: float) -> None:
    alarms = []
    for seed in range(3):
        watch = Watch()
        watch.feed(stream(seed, lambda _t: rate, 168, cap=rate * 1.3))
        alarms.append(watch.changes)
        level = watch.level
        assert level is not None and level.rate_per_h is not None
        assert abs(level.rate_per_h - rate) < 0.25 * rate  # the level is the rate
    assert sum(alarms) / len(alarms) <= 1.0, alarms


@pytest.mark.parametrize(
    ("before", "after", "cap", "within_min"),
    [(25.0, 150.0, 40.0, 45.0), (20.0, 160.0, 30.0, 45.0), (60.0, 120.0, 80.0, 90.0),
     (120.0, 30.0, 150.0, 120.0)],
)  # fmt: skip
def test_a_step_is_seen_and_the_new_level_is_its_rate(
    before: float, after: float, cap: float, within_min: float
) -> None:
    step = 20 * HOUR
    for seed in range(3):
        watch = Watch()
        seen = None
        for run in stream(seed, lambda t: before if t < step else after, 30, cap=cap):
            for level in watch.feed([run]):
                if run.end >= step and seen is None:
                    seen = (run.end - step) / 60.0, level
        assert seen is not None, f"seed {seed}: the step was not seen"
        minutes, level = seen
        assert minutes <= within_min, (seed, minutes)
        # the change point is put near the step, and the level ends at the last run
        assert abs(level.start - step) < 30 * 60.0
        final = watch.level
        assert final is not None and final.rate_per_h is not None
        assert abs(final.rate_per_h - after) < 0.3 * after


def test_runs_fed_twice_count_once_and_bad_runs_are_dropped() -> None:
    runs = stream(4, lambda _t: 40.0, 6, cap=60.0)
    once, twice = Watch(), Watch()
    once.feed(runs)
    twice.feed(runs[: len(runs) // 2])
    twice.feed(runs)  # the reading overlaps the last one
    twice.feed([Run(runs[-1].end + 10, 0.0, 3), Run(runs[-1].end + 20, float("nan"), 1)])
    assert once.levels == twice.levels


def test_a_rise_lasts_as_long_as_the_rises_before_it() -> None:
    # bursts: 6 h at 20/h, 6 h at 150/h, over two days
    def bursts(t: float) -> float:
        return 150.0 if (t / HOUR) % 12 >= 6 else 20.0

    watch = Watch()
    runs = stream(2, bursts, 42.5, cap=180.0)
    watch.feed(runs)
    assert watch.rising()
    past = watch.rise_hours()
    assert len(past) >= 2 and all(4.5 <= h <= 7.0 for h in past), past
    # 30 min into the burst that began at 42 h: about 5.5 h left, not as long as it lasted
    left = watch.expected_hours(42.5 * HOUR)
    assert left is not None and 4.0 <= left <= 6.5


def test_without_history_a_level_is_expected_to_last_as_long_again() -> None:
    watch = Watch(Params())
    assert watch.expected_hours(0.0) is None
    watch.feed(stream(5, lambda _t: 30.0, 4, cap=40.0))
    left = watch.expected_hours(4 * HOUR)
    assert left is not None and 3.5 <= left <= 4.1
    assert not watch.rising() and watch.rise_hours() == []


def test_the_rest_between_rises_is_learned() -> None:
    def bursts(t: float) -> float:
        return 150.0 if (t / HOUR) % 12 >= 6 else 20.0

    watch = Watch()
    assert watch.rise_gap_hours() is None
    watch.feed(stream(2, bursts, 42.5, cap=180.0))
    gap = watch.rise_gap_hours()
    assert gap is not None and 4.5 <= gap <= 7.5, gap


def test_work_that_comes_back_after_a_dry_spell_is_seen_at_once() -> None:
    """A market that dried up brings no request to count: the quiet level (one request in 20 h)
    is tested all the same, having been asked an hour, and the first run of the work's return
    is a change (waiting for 8 requests would make it the third)."""
    watch = Watch()
    t = 0.0
    for _ in range(40):  # 200/h: three requests in 54 s, runs back to back
        t += 54.0
        watch.feed([Run(t, 54.0, 3)])
    t += 20 * HOUR
    watch.feed([Run(t, 20 * HOUR, 1)])  # dried up
    level = watch.level
    assert level is not None and (level.rate_per_h or 0) < 1.0
    t += 54.0
    [back] = watch.feed([Run(t, 54.0, 3)])
    assert (back.rate_per_h or 0) > 100.0
