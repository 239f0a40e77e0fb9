"""The cheap stand-in workers report their benchmark as benchmark.sh does (issue 17 item 5): a
rate below MIN_RATE is below_min, never a pass, and the worker stops at the benchmark as the
entrypoint does; the result's fields are the real ones."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from vastsim.cheap import CheapScript, CheapWorker
from vastui.domain.reports import parse_bench_result
from vastui.engine import policy


async def run(margin: float, min_rate: float = 20.0) -> tuple[CheapWorker, list[dict[str, Any]]]:
    script = CheapScript(stage_gap=0.0, progress_every=None, rate_margin=margin)
    worker = CheapWorker(1, min_rate, script, random.Random(0))
    await worker.run()
    return worker, [json.loads(line) for line in worker.events]


def bench_result(events: list[dict[str, Any]]) -> dict[str, Any]:
    [event] = [e for e in events if (e["stage"], e["event"]) == ("benchmark", "result")]
    return event["result"]


async def test_a_slow_cheap_worker_is_below_min_and_stops_there() -> None:
    worker, events = await run(0.8)
    result = bench_result(events)
    assert (result["outcome"], result["stage"], result["exit_code"]) == ("below_min", "done", 10)
    assert result["rate_per_hour"] == 16.0 and result["min_rate"] == 20.0
    assert result["reason"] == (
        "benchmark below_min: 16.0 < 20.0 proofs/h (12 proofs, 0 failed, 10 in flight)"
    )
    assert (events[-1]["stage"], events[-1]["event"]) == ("benchmark", "fail")
    assert events[-1]["reason"] == result["reason"]
    assert not any(e["stage"] == "prove" for e in events)
    assert worker.status()["state"] == "failed" and worker.proving_since is None
    kill = policy.benchmark_kill(parse_bench_result(result), 20.0)
    assert kill is not None and kill.kind == "bench_below_min"


@pytest.mark.parametrize("margin", [1.0, 1.5])
async def test_a_cheap_worker_at_or_above_its_min_rate_passes_and_proves(margin: float) -> None:
    _, events = await run(margin)
    result = bench_result(events)
    assert (result["outcome"], result["stage"], result["exit_code"]) == ("pass", "done", 0)
    assert result["rate_per_hour"] == 20.0 * margin and result["partial_rate_per_hour"] is None
    assert policy.bench_rate(parse_bench_result(result)) == 20.0 * margin
    assert policy.benchmark_kill(parse_bench_result(result), 20.0) is None
    assert [(e["stage"], e["event"]) for e in events[-3:]] == [
        ("benchmark", "ok"),
        ("prove", "start"),
        ("prove", "progress"),
    ]
