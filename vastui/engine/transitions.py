"""What one observation of a worker does to it: pure transitions returning typed effects.

A worker event (one line of its events.jsonl), its benchmark result and a reading of cuzk's
counters each become a list of effects, in the order they are carried out. The engine carries
them out on the store (``acts.carry_out``); the economics bench carries out the same effects on
its in-memory fleet (bench/economics_vastui.py), so the bench plays the engine's decisions and
never a copy of them. No I/O, no clock, no store here: the caller passes ``now`` and the record.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from vastui.config import Config
from vastui.domain.reports import BenchResult, WorkerEvent
from vastui.domain.worker import InstanceRecord, Progress
from vastui.engine import physics, policy, production
from vastui.sanitize import sanitize_line


@dataclass(frozen=True)
class Update:
    """Write these fields on the instance's record."""

    fields: Progress


@dataclass(frozen=True)
class EnterStage:
    """The worker moved on to ``stage`` (one of ``policy.LIVE_STAGES``)."""

    stage: str


@dataclass(frozen=True)
class Note:
    """A line in the operator's event log; ``warn`` also logs it as a warning."""

    kind: str
    text: str
    detail: Mapping[str, Any] | None = None
    warn: bool = False


@dataclass(frozen=True)
class RecordRate:
    """A measured rate into the machine's performance record (what the ranking learns);
    ``partial``: an aborted benchmark's pace, shown as such."""

    rate: float
    partial: bool = False


@dataclass(frozen=True)
class Strike:
    """A mark against the machine (acts.strike: enough of them ban it)."""

    kind: str
    reason: str


@dataclass(frozen=True)
class KillWorker:
    """Destroy the instance (acts.kill: the strike or ban the kill carries). Always last."""

    kill: policy.Kill


@dataclass(frozen=True)
class Production:
    """The worker's production state after a counters reading; ``measured`` when a live
    reading was folded in (then with its rate, when, and what curio said of itself)."""

    state: production.ProdState
    measured: bool
    rate: float | None = None
    checked_at: float | None = None
    curio_info: str | None = None


@dataclass(frozen=True)
class Passed:
    """The worker passed its benchmark: evidence against a fleet-wide failure (acts)."""


Effect = Update | EnterStage | Note | Production | RecordRate | Strike | KillWorker | Passed


@dataclass(frozen=True)
class Counters:
    """One counters reading as the engine sees it (follow.py): ``reading`` None when
    `workerctl cuzk-counters` answered nothing usable, ``unreachable`` when there was no SSH
    connection at all, ``others_reachable`` whether another proving worker answered lately."""

    reading: production.Reading | None
    unreachable: bool = False
    others_reachable: bool = True


def on_event(
    rec: InstanceRecord,
    event: WorkerEvent,
    now: float,
    config: Config,
    position: int | None = None,
) -> list[Effect]:
    """One worker event (worker-image/README.md: start, ok, fail, progress, result)."""
    fields: Progress = {"events_seen": position if position is not None else rec.events_seen + 1}
    if rec.first_report_at is None:
        fields["first_report_at"] = now
    effects: list[Effect] = [Update(fields)]
    stage = policy.WORKER_STAGE.get(event.stage or "")
    kind = event.event
    if kind == "start" and stage is not None and stage != rec.state:
        effects.append(EnterStage(stage))
    elif kind == "result" and event.result is not None:
        effects += on_benchmark(rec, event.result, config)
    elif kind == "progress" and event.stage == "prove":
        effects += on_prove_progress(rec, event, now)
    elif kind == "fail":
        effects.append(KillWorker(policy.failure_kill(event)))
    return effects


def on_benchmark(rec: InstanceRecord, result: BenchResult, config: Config) -> list[Effect]:
    """benchmark.sh's result: the record, the machine's rate, the gate, a strike."""
    refusal = physics.bench_refusal(result, rec.gpu_name, rec.num_gpus)
    if refusal is not None:  # nothing of it is kept: not its rate, not its sizing
        why = sanitize_line(refusal, 300)
        return [
            Update({"bench_rate": None, "bench_outcome": "implausible",
                    "bench_result": result.text}),
            Note("benchmark", f"refused: {why}", {"outcome": "implausible"}, warn=True),
            KillWorker(
                policy.Kill("bench_implausible", f"benchmark refused: {why}", "benchmark",
                            bench_outcome="implausible", strike=True)
            ),
        ]  # fmt: skip
    rate = policy.bench_rate(result)
    outcome = result.outcome or "error"
    max_pending = result.max_pending
    effects: list[Effect] = [
        Update(
            {
                "bench_rate": rate,
                "bench_outcome": outcome,
                "bench_result": result.text,
                "bench_failed": result.proofs_failed,
                "max_pending": max_pending
                if max_pending is not None and max_pending <= 10_000
                else None,
            }
        )
    ]
    # The machine's record is what it can do in production: at most what curio's deadline
    # lets it keep with fewer proofs in flight (policy.effective_rate).
    usable = policy.effective_rate(result, config)
    if usable is not None and usable > 0:
        effects.append(RecordRate(usable))
    partial = policy.bench_partial_record(result)
    if partial is not None:
        effects.append(RecordRate(partial, partial=True))
    effects.append(
        Note(
            "benchmark",
            f"{outcome}: {'n/a' if rate is None else f'{rate:.1f}'} proofs/h "
            f"(min {rec.min_rate if rec.min_rate is not None else '?'})",
            {"rate": rate, "outcome": outcome},
        )
    )
    kill = policy.benchmark_kill(result, rec.min_rate, config)
    if kill is not None:
        effects.append(KillWorker(kill))
        return effects
    if outcome == "pass":
        effects.append(Passed())
    strike = policy.benchmark_strike(result)
    if strike is not None:
        effects.append(Strike("bench_failed_proofs", sanitize_line(strike, 300)))
    return effects


def on_prove_progress(rec: InstanceRecord, event: WorkerEvent, now: float) -> list[Effect]:
    """What the prove stage says of the controller's tunnel (down: waiting, never the
    machine's fault) and of its curio node."""
    fields: Progress = {}
    effects: list[Effect] = []
    tunnel = event.tunnel
    if tunnel is not None:
        if tunnel.down:
            fields["tunnel_detail"] = sanitize_line(tunnel.detail, 300)
            if rec.tunnel_down_since is None:
                fields["tunnel_down_since"] = now
                effects.append(Note("tunnel", f"tunnel down: {fields['tunnel_detail']}", warn=True))
        elif rec.tunnel_down_since is not None:
            fields["tunnel_down_since"] = None
            fields["tunnel_detail"] = None
            effects.append(Note("tunnel", "tunnel up"))
    if event.curio is not None:
        fields["curio_info"] = json.dumps(event.curio)
    return [Update(fields), *effects] if fields else effects


def on_counters(
    rec: InstanceRecord,
    state: production.ProdState,
    bench_result: BenchResult | None,
    seen: Counters,
    now: float,
    config: Config,
) -> list[Effect]:
    """Fold one counters reading into the worker's production state (``state``, the record's
    ``prod_state`` parsed; ``bench_result`` its benchmark's result) and judge it."""
    window = config.proving.window_min * 60.0
    reading = seen.reading
    effects: list[Effect] = []
    prod_rate = rec.prod_rate
    m: production.Measure | None = None
    if reading is not None and reading.alive and reading.completed is not None:
        bench = production.baseline_from_bench(bench_result)
        refusal = _counters_refusal(rec, state, reading, bench, now)
        if refusal is not None:
            return _refused(state, refusal, now, window)
        fed_at = production.full_at(rec.max_pending)
        state = production.fold(state, reading, now, window, bench, fed_at)
        m = production.measure(state, now, window)
        prod_rate = None if m.rate is None else round(m.rate, 3)
        info = json.dumps(reading.curio_info) if reading.curio_info else rec.curio_info
        effects.append(Production(state, True, prod_rate, now, info))
    else:
        quiet = production.silent(state, now, unreachable=seen.unreachable)
        if quiet != state:
            state = quiet
            effects.append(Production(state, False))
    kill = production.verdict(
        state, reading, now, rec.min_rate, config,
        others_reachable=seen.others_reachable, measured=m,
    )  # fmt: skip
    if kill is not None and kill.kind == "prove_below_min" and prod_rate:
        # What it really does becomes the machine's last rate: the ranking must not rent it
        # again on the strength of its benchmark.
        effects.append(RecordRate(prod_rate))
    if kill is not None:
        effects.append(KillWorker(kill))
    return effects


def _counters_refusal(
    rec: InstanceRecord,
    state: production.ProdState,
    reading: production.Reading,
    bench: tuple[int | None, int, int],
    now: float,
) -> str | None:
    """Why this reading cannot be true: against the last good one, or (the first reading of
    the benchmark's daemon) against the counters its benchmark ended with, since proving began."""
    ceiling = physics.rate_ceiling(rec.gpu_name, rec.num_gpus)
    done, fail = reading.completed or 0, reading.failed or 0
    if state.started is not None:
        return physics.counters_refusal(
            state.pid, state.last_completed, state.last_failed, state.last_uptime,
            state.last_ok, reading.pid, done, fail, reading.uptime, now, ceiling,
        )  # fmt: skip
    bench_pid, bench_done, bench_fail = bench
    if bench_pid is None or reading.pid != bench_pid:
        return None  # another daemon: production counts from its first reading
    since = rec.stage_started_at if rec.stage_started_at is not None else now
    return physics.counters_refusal(
        bench_pid, bench_done, bench_fail, 0.0, since, reading.pid, done, fail, None, now,
        ceiling,
    )  # fmt: skip


def _refused(state: production.ProdState, why: str, now: float, window: float) -> list[Effect]:
    """A refused reading: kept out of every count and verdict; repeated, it ends the worker."""
    recent = [t for t in state.refusals if t >= now - window][-physics.REFUSALS_TO_KILL :]
    state = replace(state, refusals=[*recent, now], refused=sanitize_line(why, 300))
    effects: list[Effect] = [
        Production(state, False),
        Note("counters", f"reading refused: {state.refused}", warn=True),
    ]
    if len(state.refusals) >= physics.REFUSALS_TO_KILL:
        effects.append(
            KillWorker(
                policy.Kill(
                    "prove_implausible",
                    f"{len(state.refusals)} counter readings refused in "
                    f"{window / 60:g} min, the last: {state.refused}",
                    "proving",
                    strike=True,
                )
            )
        )
    return effects
