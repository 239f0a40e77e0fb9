"""Issue 17 item 5, "benchmark results are honest": the controller trusts a benchmark's rate only
from a run that ended in pass or below_min. A daemon that died after two proofs, a timeout, an
early abort: what they measured is a partial rate, for a person to read, never the machine's
record, never the rate a kill reason or the deadline sizing is based on. An older worker image
still sends rate_per_hour with outcome error; the controller does not take it."""

from __future__ import annotations

from typing import Any

import pytest

from vastui.config import Config
from vastui.domain.reports import parse_bench_result
from vastui.engine import policy

CONFIG = Config()


def result(outcome: Any, rate: Any = None, partial: Any = None, **kw: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"outcome": outcome, "stage": "timed_run", "rate_per_hour": rate,
                           "proofs_completed": 2, "proofs_failed": 0, "error_tail": []}  # fmt: skip
    if partial is not None:
        out["partial_rate_per_hour"] = partial
    out.update(kw)
    return out


RATE_CASES = [
    # (case, result, bench_rate, partial rate)
    ("a pass has its rate", result("pass", 32.0, stage="done"), 32.0, None),
    ("below_min has its rate", result("below_min", 20.0, stage="done"), 20.0, None),
    ("a pass from the worker as a string", result("pass", "31.5"), 31.5, None),
    ("a pass without a rate", result("pass", None), None, None),
    ("a pass with a rate that is no number", result("pass", "fast"), None, None),
    ("a pass with a bool for a rate", result("pass", True), None, None),
    ("a pass with inf", result("pass", "inf"), None, None),
    ("the daemon died after two proofs (an older image)", result("error", 310.0), None, 310.0),
    ("the daemon died after two proofs", result("error", None, 310.0), None, 310.0),
    ("an early abort", result("aborted_early", None, 12.5), None, 12.5),
    ("an early abort (an older image)", result("aborted_early", 12.5), None, 12.5),
    ("a timeout", result("timeout", 7.0), None, 7.0),
    ("an outcome this controller does not know", result("partial", 40.0), None, 40.0),
    ("no outcome at all", {"rate_per_hour": 40.0}, None, 40.0),
    ("an outcome that is not a string", result(["pass"], 40.0), None, 40.0),
    ("an outcome in capitals", result("PASS", 40.0), None, 40.0),
    ("an error with nothing measured", result("error", None), None, None),
    ("a partial rate beside a pass is not read", result("pass", 30.0, 99.0), 30.0, None),
    ("a partial rate that is no number", result("error", None, "lots"), None, None),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "res", "rate", "partial"), RATE_CASES, ids=[c[0] for c in RATE_CASES]
)
def test_only_a_finished_benchmark_has_a_rate(case, res, rate, partial) -> None:
    assert policy.bench_rate(parse_bench_result(res)) == rate
    assert policy.bench_partial_rate(parse_bench_result(res)) == partial


@pytest.mark.parametrize("outcome", ["error", "timeout", "aborted_early", "bogus"])
def test_the_machines_record_learns_nothing_from_a_failed_benchmark(outcome: str) -> None:
    latency = {"p50": 900.0, "p95": 1000.0, "max": 1000.0, "service": 11.0}
    res = result(outcome, 480.0, latency_seconds=latency, max_pending=10)
    assert policy.effective_rate(parse_bench_result(res), CONFIG) is None
    assert policy.deadline_sizing(parse_bench_result(res), CONFIG) is None
    kill = policy.benchmark_kill(parse_bench_result(res), 29.0, CONFIG)
    assert kill is not None and kill.detail["rate"] is None
    # what the run measured is named partial wherever it is shown
    assert "480" not in kill.reason.replace("partial rate 480.0", "")


def test_a_finished_benchmarks_rate_is_still_the_record() -> None:
    latency = {"p50": 300.0, "p95": 300.0, "max": 300.0, "service": 300.0}
    assert (
        policy.effective_rate(
            parse_bench_result(result("pass", 32.0, latency_seconds=latency)), CONFIG
        )
        == 32.0
    )
    assert policy.effective_rate(parse_bench_result(result("below_min", 20.0)), CONFIG) == 20.0


def test_an_early_abort_is_a_strike_and_says_its_rate_is_partial() -> None:
    kill = policy.benchmark_kill(
        parse_bench_result(result("aborted_early", None, 12.5)), 29.0, CONFIG
    )
    assert kill is not None and kill.kind == "bench_aborted_early"
    assert kill.reason == "benchmark aborted_early: partial rate 12.5 < 29.0 proofs/h"
    assert kill.detail == {"rate": None, "partial_rate": 12.5}
    # no rate for the record to keep a slow machine off: a strike, as for a timeout
    assert kill.ban is None and kill.strike


def test_a_daemon_that_died_is_still_banned_whatever_it_measured() -> None:
    tail = ["cuzk-daemon was killed by SIGABRT (exit status 134)"]
    kill = policy.benchmark_kill(
        parse_bench_result(result("error", 310.0, error_tail=tail)), 29.0, CONFIG
    )
    assert kill is not None and kill.kind == "bench_error" and kill.ban is not None
    assert kill.detail == {"rate": None, "partial_rate": 310.0}


PARTIAL_CASES = [
    # (case, result, the partial rate the machine's record keeps)
    ("an early abort after three proofs", result("aborted_early", None, 24.1,
                                                 proofs_completed=3), 24.1),
    ("an early abort after two proofs: too few", result("aborted_early", None, 24.1), None),
    ("an early abort before the timed run", result("aborted_early", None, 24.1,
                                                  proofs_completed=5, stage="warmup"), None),
    ("an early abort with no pace", result("aborted_early", None, None, proofs_completed=5),
     None),
    ("an early abort with a zero pace", result("aborted_early", None, 0.0, proofs_completed=5),
     None),
    ("a timeout measured the fault", result("timeout", None, 7.0, proofs_completed=5), None),
    ("an error measured the fault", result("error", None, 310.0, proofs_completed=5), None),
    ("a pass is recorded as a rate, not a partial", result("pass", 30.0, stage="done",
                                                           proofs_completed=12), None),
]  # fmt: skip


@pytest.mark.parametrize(("case", "res", "kept"), PARTIAL_CASES, ids=[c[0] for c in PARTIAL_CASES])
def test_an_early_aborts_pace_is_the_machines_partial_record(case, res, kept) -> None:
    assert policy.bench_partial_record(parse_bench_result(res)) == kept


def test_the_partial_record_is_a_record_rate_marked_partial() -> None:
    from vastui.domain.worker import InstanceRecord
    from vastui.engine import transitions

    rec = InstanceRecord(vast_id=1, state="benchmark", gpu_name="RTX 4090", num_gpus=1,
                         min_rate=29.0)  # fmt: skip
    res = parse_bench_result(result("aborted_early", None, 24.1, proofs_completed=3))
    effects = transitions.on_benchmark(rec, res, CONFIG)
    assert transitions.RecordRate(24.1, partial=True) in effects
    assert any(isinstance(e, transitions.KillWorker) for e in effects)
