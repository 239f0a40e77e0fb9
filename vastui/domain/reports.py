"""What a worker says, as typed values: the events of its entrypoint and its benchmark's result
(worker-image/README.md), and their one parser, called where they arrive (vastui/ssh/worker.py
for events; the record's copy of a result when it is read back).

The worker is a rented machine: nothing it sends is trusted. Numbers go through
vastui/numbers.py (finite, no bools), counts are non-negative integers, texts are bounded
lines, lists are tuples of strings; a field of the wrong shape reads as absent.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from vastui.numbers import parse_count, parse_number
from vastui.sanitize import sanitize_line


@dataclass(frozen=True, slots=True)
class BenchResult:
    """benchmark.sh's result (``bench-result.json``, and the ``result`` event that carries it).

    A field the worker did not send (or sent malformed) is None: an older image sends fewer.
    """

    outcome: str | None = None  # pass, below_min, aborted_early, timeout, error
    stage: str | None = None  # where it ended: daemon_start, warmup, timed_run, done, ...
    rate_per_hour: float | None = None  # only meaningful for pass and below_min
    partial_rate_per_hour: float | None = None  # what a run that ended otherwise measured
    proofs_completed: int | None = None
    proofs_failed: int | None = None
    window_seconds: float | None = None  # the timed run's length
    max_pending: int | None = None  # the MaxPending the worker would run with (<= 10,000)
    latency_service: float | None = None  # the quickest proof at production concurrency, s
    exit_code: int | None = None
    daemon_pid: int | None = None  # the daemon production keeps, and its counters at the end
    daemon_completed: int | None = None
    daemon_failed: int | None = None
    error_tail: tuple[str, ...] = ()  # its last error lines, oldest first
    text: str = "{}"  # the result as JSON, for the record (at most 20,000 characters)


@dataclass(frozen=True, slots=True)
class Tunnel:
    """What a prove-stage event says of the controller's tunnel (entrypoint.sh wait_tunnel)."""

    down: bool
    detail: str = ""  # what is down, a line


@dataclass(frozen=True, slots=True)
class WorkerEvent:
    """One line of the worker's event log: start, ok, fail, progress or result of a stage."""

    event: str | None = None
    stage: str | None = None  # the worker's word: setup, paramfetch, benchmark, prove
    ts: float | None = None  # when the worker wrote it, by its clock (epoch seconds)
    reason: str | None = None  # a failure's one line
    detail: str | None = None
    error_tail: tuple[str, ...] = ()
    result: BenchResult | None = None  # a result event's benchmark result
    tunnel: Tunnel | None = None  # a prove-stage progress event's word on the tunnel
    curio: dict[str, Any] | None = field(default=None, hash=False)  # its curio node, bounded


RESULT_TEXT_MAX = 20_000  # the result kept on the record, as JSON
TAIL_MAX = 200  # error lines kept from one report (the decisions read the last 20)
INT32_MAX = 2**31 - 1


def parse_bench_result(value: Mapping[str, Any]) -> BenchResult:
    """benchmark.sh's result, typed."""
    latency = value.get("latency_seconds")
    return BenchResult(
        outcome=_word(value.get("outcome")),
        stage=_word(value.get("stage")),
        rate_per_hour=parse_number(value.get("rate_per_hour")),
        partial_rate_per_hour=parse_number(value.get("partial_rate_per_hour")),
        proofs_completed=parse_count(value.get("proofs_completed")),
        proofs_failed=_int(value.get("proofs_failed")),
        window_seconds=parse_number(value.get("window_seconds")),
        max_pending=_int(value.get("max_pending")),
        latency_service=(
            parse_number(latency.get("service")) if isinstance(latency, Mapping) else None
        ),
        exit_code=_int(value.get("exit_code"), low=-INT32_MAX),
        daemon_pid=parse_count(value.get("daemon_pid")),
        daemon_completed=parse_count(value.get("daemon_completed")),
        daemon_failed=parse_count(value.get("daemon_failed")),
        error_tail=_lines(value.get("error_tail")),
        text=_json_text(value),
    )


def parse_stored_result(text: str | None) -> BenchResult | None:
    """A result as the record keeps it (``instances.bench_result``); None when there is none or
    it does not read back as an object (damaged, or cut at its limit)."""
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return parse_bench_result(value) if isinstance(value, dict) else None


def parse_event(value: Mapping[str, Any]) -> WorkerEvent:
    """One event of the worker's log, typed."""
    result = value.get("result")
    return WorkerEvent(
        event=_word(value.get("event")),
        stage=_word(value.get("stage")),
        ts=parse_number(value.get("ts")),
        reason=_text(value.get("reason"), 500),
        detail=_text(value.get("detail"), 500),
        error_tail=_lines(value.get("error_tail")),
        result=parse_bench_result(result) if isinstance(result, Mapping) else None,
        tunnel=_tunnel(value),
        curio=curio_report(value.get("curio")),
    )


def curio_report(value: Any) -> dict[str, Any] | None:
    """The worker's curio node as it reports it (machine id, host:port, name, task types,
    MaxPending): plain values only, bounded; None when absent or malformed."""
    if not isinstance(value, Mapping):
        return None
    out: dict[str, Any] = {}
    for key in ("machine_id", "max_pending"):
        v = value.get(key)
        if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**63:
            out[key] = v
    for key in ("host_and_port", "name", "tasks", "listen", "layer"):
        v = value.get(key)
        if isinstance(v, str):
            out[key] = v[:400]
    return out if "machine_id" in out else None


def _tunnel(value: Mapping[str, Any]) -> Tunnel | None:
    """entrypoint.sh wait_tunnel: ``tunnel`` up or down, with what is ``down``."""
    state = value.get("tunnel")
    if state == "up":
        return Tunnel(down=False)
    if state != "down":
        return None
    down = value.get("down")
    lines = [str(x) for x in down if isinstance(x, str)][:5] if isinstance(down, list) else []
    return Tunnel(down=True, detail="; ".join(lines) or str(value.get("detail") or "tunnel down"))


def _word(value: Any) -> str | None:
    """A short word (an outcome, a stage, an event kind); None when absent or empty."""
    if value is None or isinstance(value, dict | list) or value == "":
        return None
    return sanitize_line(str(value), 40) or None


def _text(value: Any, limit: int) -> str | None:
    if value is None or isinstance(value, dict | list):
        return None
    return sanitize_line(str(value), limit)


def _int(value: Any, *, low: int = 0) -> int | None:
    """An integer as the worker wrote it (not a float, not a bool), within int32."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= INT32_MAX:
        return None
    return value


def _lines(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list):
        return ()
    return tuple(x for x in value if isinstance(x, str))[-TAIL_MAX:]


def _json_text(value: Mapping[str, Any]) -> str:
    try:
        return json.dumps(dict(value))[:RESULT_TEXT_MAX]
    except (TypeError, ValueError):
        return "{}"
