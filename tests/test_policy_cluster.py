"""Decisions about curio's cluster and deadline, as pure functions with tables: a benchmark held
to curio's ProveTimeout (sized, not rejected, unless no MaxPending fits), proofs that outlive it
in production, the controller's tunnel (never the machine's fault), setup failures that are the
machine's and ones that are the controller's."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from vastui.config import Config
from vastui.domain.reports import Tunnel, curio_report, parse_bench_result, parse_event
from vastui.domain.worker import InstanceRecord
from vastui.engine import policy, production
from vastui.engine.production import ProdState, Reading

CONFIG = Config()


def bench(rate: float | None, service: float | None, *, outcome: str = "pass", **kw: Any):
    out: dict[str, Any] = {
        "outcome": outcome,
        "rate_per_hour": rate,
        "stage": "done",
        "proofs_completed": 12,
        "proofs_failed": 0,
        "error_tail": [],
    }
    if service is not None:
        out["latency_seconds"] = {"p50": service * 3, "p95": service * 4, "max": service * 4,
                                  "service": service}  # fmt: skip
    out.update(kw)
    return out


DEADLINE_CASES = [
    # (case, result, min_rate, kill kind or None, reason or None)
    ("fast: MaxPending 10 fits", bench(32.0, 300.0, max_pending=10), 29.0, None, None),
    ("cheap and slow: sized to 4, keeps its rate", bench(13.5, 700.0, max_pending=4), 13.0,
     None, None),
    ("sized, but then below its min_rate", bench(13.5, 1400.0, max_pending=1), 13.5,
     "bench_deadline", "benchmark: at MaxPending 1 (a proof within 25.0 min of curio's "
     "ProveTimeout 30m) it keeps 2.6 < 13.5 proofs/h"),
    ("a single proof outlasts the deadline", bench(3.0, 1600.0, outcome="below_min"), 2.0,
     "bench_deadline", "benchmark: a proof takes 26.7 min at the least, over the 25.0 min "
     "curio's ProveTimeout 30m allows"),
    ("a worker that would run more than fits", bench(13.5, 700.0, max_pending=10), 13.0,
     "bench_deadline", "benchmark: the worker would run MaxPending 10, but only 4 proofs in "
     "flight finish within 25.0 min of ProveTimeout 30m"),
    ("an image without latencies is judged on its rate", bench(32.0, None), 29.0, None, None),
    ("below min for its rate alone", bench(20.0, 300.0, outcome="below_min"), 29.0,
     "bench_below_min", "benchmark below_min: 20.0 < 29.0 proofs/h"),
    ("an error is not a deadline matter", bench(None, None, outcome="error",
     error_tail=["error: boom"]), 29.0, "bench_error", "benchmark error in done: error: boom"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "result", "min_rate", "kind", "reason"),
    DEADLINE_CASES,
    ids=[c[0] for c in DEADLINE_CASES],
)
def test_the_benchmark_is_held_to_curios_deadline(case, result, min_rate, kind, reason) -> None:
    kill = policy.benchmark_kill(parse_bench_result(result), min_rate, CONFIG)
    assert (kill.kind if kill else None) == kind
    if reason is not None:
        assert kill is not None and kill.reason == reason
    if kind == "bench_deadline":
        assert kill is not None and kill.ban is None and not kill.strike, "not the machine's fault"


def test_the_machines_record_is_the_rate_it_keeps_within_the_deadline() -> None:
    assert policy.effective_rate(parse_bench_result(bench(32.0, 300.0)), CONFIG) == 32.0
    assert policy.effective_rate(parse_bench_result(bench(13.5, 1400.0)), CONFIG) == pytest.approx(
        2.571
    )
    assert policy.effective_rate(parse_bench_result(bench(3.0, 1600.0)), CONFIG) == 0.0
    assert policy.effective_rate(parse_bench_result(bench(32.0, None)), CONFIG) == 32.0
    longer = replace(CONFIG, curio=replace(CONFIG.curio, prove_timeout="1h"))
    assert policy.deadline_sizing(parse_bench_result(bench(13.5, 700.0)), longer).max_pending == 9


@pytest.mark.parametrize(
    ("event", "report"),
    [({"tunnel": "down", "down": ["lotus api 127.0.0.1:1234: refused", "x"]},
      Tunnel(True, "lotus api 127.0.0.1:1234: refused; x")),
     ({"tunnel": "down", "detail": "waiting"}, Tunnel(True, "waiting")),
     ({"tunnel": "up"}, Tunnel(False, "")),
     ({"detail": "running"}, None),
     ({"tunnel": "sideways"}, None),
     ({"tunnel": "down", "down": [1, {"a": 2}]}, Tunnel(True, "tunnel down"))],
)  # fmt: skip
def test_what_a_worker_says_of_the_tunnel(event, report) -> None:
    assert parse_event(event).tunnel == report


def test_what_a_worker_says_of_its_curio_node_is_bounded() -> None:
    good = {"machine_id": 3, "host_and_port": "127.0.0.1:12407", "name": "vastui-main-r7",
            "tasks": "PSProve", "max_pending": 5, "extra": "dropped"}  # fmt: skip
    assert curio_report(good) == {k: v for k, v in good.items() if k != "extra"}
    assert curio_report({"machine_id": True}) is None
    assert curio_report({"host_and_port": "x"}) is None, "no machine id: not a report"
    assert curio_report({"machine_id": 1, "name": "x" * 1000})["name"] == "x" * 400
    assert curio_report("nope") is None


def rec(**kw: Any) -> InstanceRecord:
    base: dict[str, Any] = dict(vast_id=7, label="vastui-main-aa", machine_id=70, state="proving")
    base.update(kw)
    return InstanceRecord(**base)


def test_a_worker_waiting_for_the_tunnel_goes_only_after_the_deadline_and_unblamed() -> None:
    limit = CONFIG.deadlines.tunnel_min * 60
    waiting = rec(tunnel_down_since=1000.0, tunnel_detail="lotus api: refused")
    assert policy.reconcile_kill(waiting, 1000.0 + limit, CONFIG, None) is None
    kill = policy.reconcile_kill(waiting, 1000.0 + limit + 1, CONFIG, None)
    assert kill is not None and kill.kind == "tunnel_down"
    assert kill.reason == "the controller's tunnel was down for over 60 min (lotus api: refused)"
    assert kill.ban is None and not kill.strike
    assert policy.reconcile_kill(rec(), 10**9, CONFIG, None) is None


FAILURES = [
    # (stage, reason, tail, kind, banned, struck)
    ("setup", "memory plan needs 163 GiB (...); the budget is 145 GiB", [], "setup_machine",
     True, False),
    ("setup", "CPU lacks x86-64-v3 (curio is built with GOAMD64=v3): missing avx2", [],
     "setup_machine", True, False),
    ("setup", "host driver 570.1 is older than 580, the minimum for the image's CUDA 13", [],
     "setup_machine", True, False),
    ("setup", "curio identity: no curio identity: neither CURIO_LISTEN nor ...", [],
     "setup_identity", False, False),
    ("setup", "disk plan needs 178 GiB free", [], "setup_failed", False, False),
    ("prove", "tunnel down for 600 s: lotus api", [], "tunnel_down", False, False),
    ("prove", "curio exited (status 1)", ["ERROR: boom"], "prove_curio_failed", False, False),
    ("prove", "cuzk-daemon exited (SIGABRT, status 134)", [], "prove_daemon_died", False, True),
    ("setup", "memory plan", ["CUDA error 700"], "setup_machine", True, False),
]  # fmt: skip


@pytest.mark.parametrize(("stage", "reason", "tail", "kind", "banned", "struck"), FAILURES)
def test_whose_fault_a_failed_stage_is(stage, reason, tail, kind, banned, struck) -> None:
    kill = policy.failure_kill(parse_event({"stage": stage, "reason": reason, "error_tail": tail}))
    assert kill.kind == kind
    assert (kill.ban is not None) == banned
    assert kill.strike == struck


def raw(done: int, timeouts: int | None, *, pid: int = 100) -> dict[str, Any]:
    out: dict[str, Any] = {
        "daemon_pid": pid, "alive": True, "exit_status": None, "signal": None,
        "status": {"uptime_secs": 10.0, "pipelines": [{"job_id": "j"}], "gpu_workers": [],
                   "counters": {"total_completed": done, "total_failed": 0, "queue_depth": 1}},
        "grpc": None,
    }  # fmt: skip
    if timeouts is not None:
        out["curio"] = {"alive": True, "timeouts": timeouts,
                        "info": {"machine_id": 4, "host_and_port": "127.0.0.1:12404"}}  # fmt: skip
    return out


def run(points: list[tuple[float, dict[str, Any]]]) -> tuple[ProdState, Any]:
    state = ProdState()
    reading = None
    for t, r in points:
        reading = Reading.parse(r)
        state = production.fold(state, reading, t, 3600.0, (None, 0, 0))
    return state, production.verdict(state, reading, points[-1][0], 10.0, CONFIG)


def test_proofs_that_outlive_curios_deadline_end_the_worker() -> None:
    # the daemon's counters look healthy (it proves the timed-out jobs to the end) ...
    _state, kill = run([(0, raw(0, 0)), (600, raw(10, 0)), (1200, raw(20, 1)), (1800, raw(30, 2))])
    assert kill is not None and kill.kind == "prove_overdue" and kill.strike
    assert kill.reason == (
        "2 proofs outlived curio's ProveTimeout 30m within 60 min: the daemon proves work curio "
        "gave up on"
    )
    # ... one timeout is tolerated (proving.max_overdue = 2)
    _, kill = run([(0, raw(0, 0)), (600, raw(10, 0)), (1200, raw(20, 1))])
    assert kill is None
    # timeouts older than the window do not count; a curio restarted counts from zero again
    _, kill = run([(0, raw(0, 5)), (4000, raw(40, 5)), (4600, raw(50, 5)), (5200, raw(60, 1))])
    assert kill is None
    # readings without a curio section (an older image) never count as overdue
    _, kill = run([(0, raw(0, None)), (600, raw(10, None)), (1200, raw(20, None))])
    assert kill is None


def test_a_reading_carries_the_workers_curio_node() -> None:
    reading = Reading.parse(raw(3, 0))
    assert reading.curio_timeouts == 0
    assert reading.curio_info == {"machine_id": 4, "host_and_port": "127.0.0.1:12404"}
    bad = raw(3, 0)
    bad["curio"] = {"timeouts": -4, "info": "x"}
    assert Reading.parse(bad).curio_timeouts is None and Reading.parse(bad).curio_info is None


@pytest.mark.parametrize(
    ("inet_down", "seconds"),
    [(None, 5400), (0.0, 5400), (float("nan"), 5400), (10_000.0, 5400), (1000.0, 5400),
     (500.0, 5400), (200.0, 9298), (100.0, 17995), (10.0, 21600)],
)  # fmt: skip
def test_the_parameter_fetch_is_given_the_time_its_link_needs(inet_down, seconds) -> None:
    """~135 GiB at the offer's listed speed, 1.5x, plus 600 s; at least 90 min, at most 6 h."""
    assert policy.paramfetch_timeout_s(inet_down) == seconds


def test_the_engines_paramfetch_deadline_follows_what_the_worker_was_given() -> None:
    slow = rec(state="paramfetch", paramfetch_at=0.0, paramfetch_timeout=17995)
    assert policy.reconcile_kill(slow, 17995 + 300, CONFIG, None) is None
    kill = policy.reconcile_kill(slow, 17995 + 301, CONFIG, None)
    assert kill is not None and kill.kind == "deadline_paramfetch" and kill.strike
    assert kill.reason == "param fetch timeout (304.9 min)"
    unknown = rec(state="paramfetch", paramfetch_at=0.0)  # adopted from an older release
    assert policy.reconcile_kill(unknown, 5700, CONFIG, None) is None
    assert policy.reconcile_kill(unknown, 5701, CONFIG, None) is not None
