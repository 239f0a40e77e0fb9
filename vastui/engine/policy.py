"""Decisions, as pure functions of what the engine knows: who dies, why, and who is banned.

Kill kinds are typed (a short code) and come with a one-line human reason. A machine is
banned only for faults that belong to the machine (a benchmark error exit, GPU errors, a
stuck image load); a low benchmark rate is not a ban: it updates the performance record.
Lesser marks against a machine are strikes (failed proofs, a worker destroyed in production,
a benchmark or param fetch past its deadline, a benchmark without a rate, an instance exited or
offline on Vast); ``proving.strikes_to_ban`` of them ban it. An offer id never keeps a machine
off: a machine may be rented again, so every fault of the machine must leave a mark here (a
ban, a strike) or in its measured rate (a slow benchmark), or it would be re-rented in a loop.
Faults that may be ours (no first report, a setup that never passes the tunnel check) mark
nothing.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from vastui.config import Config
from vastui.domain import plan
from vastui.domain.reports import BenchResult, WorkerEvent
from vastui.domain.stages import STAGES
from vastui.domain.worker import InstanceRecord

GPU_ERROR = re.compile(
    r"CUDA error|out of memory|illegal memory access|Xid \d+|GPU has fallen off|"
    r"cudaError|NVRM|ECC error",
    re.IGNORECASE,
)
LIVE_STAGES = STAGES  # the store's: loading, setup, paramfetch, benchmark, proving
PIPELINE_STAGES = ("loading", "setup", "paramfetch", "benchmark")  # not yet proving
# Not doing work on Vast: container exited, host offline/unknown, stopped or frozen.
UNHEALTHY = ("exited", "offline", "unknown", "stopped", "frozen")
WORKER_STAGE = {
    "setup": "setup",
    "paramfetch": "paramfetch",
    "benchmark": "benchmark",
    "prove": "proving",
}
# The benchmark's own time limit (benchmark.sh BENCH_TIMEOUT) scales with the rate the price
# requires: a cheap machine may be slow and still pay, and a fixed 2400 s cut such machines off
# before their last proof (bench/README.md, economics). Stalls are caught sooner by the
# script's per-stage limits (ready 300 s, PCE 900 s, a proof 1800 s) and the early abort.
BENCH_TIMEOUT_FLOOR_S = 2400  # the script's default, kept for fast machines
BENCH_SETUP_S = 1200  # cuzk-daemon ready (<= 300 s) + warmup and PCE extraction (<= 900 s)
BENCH_PACE_SLACK = 1.5  # the timed run's allowance over its length at exactly min_rate
BENCH_DEADLINE_GRACE_S = 300  # the engine's deadline waits this much past the script's limit
BENCH_TIMEOUT_CAP_S = 6 * 3600  # no benchmark is worth more than this; min_rate >= 1 anyway
BENCH_KILL_KIND = {
    "below_min": "bench_below_min",
    "aborted_early": "bench_aborted_early",
    "error": "bench_error",
    "timeout": "bench_timeout",
}


@dataclass(frozen=True)
class Kill:
    kind: str
    reason: str
    stage: str | None = None
    error_lines: tuple[str, ...] = ()
    bench_outcome: str | None = None
    ban: str | None = None  # a reason to ban the machine too
    detail: dict[str, Any] = field(default_factory=dict)
    strike: bool = False  # a strike on the machine (when not banned outright)

    def to_detail(self) -> dict[str, Any]:
        """Everything needed to carry this kill out again after a failed or crashed destroy."""
        return {
            "kind": self.kind,
            "stage": self.stage,
            "error_lines": list(self.error_lines),
            "bench_outcome": self.bench_outcome,
            "ban": self.ban,
            "detail": self.detail,
            "strike": self.strike,
        }

    @classmethod
    def from_detail(cls, reason: str, detail: dict[str, Any]) -> Kill:
        lines = detail.get("error_lines") or []
        return cls(
            kind=str(detail.get("kind") or "manual"),
            reason=reason,
            stage=detail.get("stage") if isinstance(detail.get("stage"), str) else None,
            error_lines=tuple(str(x) for x in lines if isinstance(x, str)),
            bench_outcome=detail.get("bench_outcome"),
            ban=detail.get("ban") if isinstance(detail.get("ban"), str) else None,
            detail=dict(detail.get("detail") or {}),
            strike=detail.get("strike") is True,
        )


def gpu_errors(lines: Sequence[str]) -> list[str]:
    return [line for line in lines if GPU_ERROR.search(line)]


def bench_timeout_s(min_rate: float | None, proofs: int) -> int:
    """Seconds benchmark.sh is given: its set-up, then `proofs` at `min_rate` with slack.

    29 p/h and 12 proofs: 1200 + 1.5 x 1490 = 3435 s; 13 p/h ($0.10/h at $0.008/proof): 6185 s,
    where a fixed 2400 s cut it off about halfway though every proof it made would pay."""
    if min_rate is None or not math.isfinite(min_rate) or min_rate <= 0 or proofs < 1:
        return BENCH_TIMEOUT_FLOOR_S
    run = proofs * 3600.0 / min_rate * BENCH_PACE_SLACK
    budget = BENCH_SETUP_S + math.ceil(min(run, float(BENCH_TIMEOUT_CAP_S)))
    return min(max(BENCH_TIMEOUT_FLOOR_S, budget), BENCH_TIMEOUT_CAP_S)


PARAMFETCH_FLOOR_S = 5400  # the script's default and the original's 90 min
PARAMFETCH_SETUP_S = 600  # resolving, retries, checksums
PARAMFETCH_SLACK = 1.5  # over the transfer at the listed speed (a shared link, a slow mirror)
PARAMFETCH_CAP_S = 6 * 3600


def paramfetch_timeout_s(inet_down_mbps: float | None) -> int:
    """Seconds the parameter fetch is given: every 32 GiB file curio fetches with
    EnableProofShare (~135 GiB, plan.PARAMS_DISK_GIB) at the offer's listed download speed, with
    slack; at least the original's 90 min, at most 6 h. At 100 Mbit/s that is 5 h: a fixed
    90 min would end every slow-linked worker before its benchmark."""
    if inet_down_mbps is None or not math.isfinite(inet_down_mbps) or inet_down_mbps <= 0:
        return PARAMFETCH_FLOOR_S
    transfer = plan.PARAMS_DISK_GIB * plan.GIB * 8 / (inet_down_mbps * 1e6)
    wanted = PARAMFETCH_SETUP_S + math.ceil(min(transfer * PARAMFETCH_SLACK, PARAMFETCH_CAP_S))
    return min(max(PARAMFETCH_FLOOR_S, wanted), PARAMFETCH_CAP_S)


def bench_deadline_s(rec: InstanceRecord, config: Config) -> float:
    """How long the engine lets the benchmark stage run: the configured deadline, or the
    script's own limit for this worker's min_rate plus a grace, whichever is longer."""
    script = bench_timeout_s(rec.min_rate, config.fleet.bench_proofs) + BENCH_DEADLINE_GRACE_S
    return max(config.deadlines.benchmark_min * 60.0, float(script))


def deadline_kill(rec: InstanceRecord, now: float, config: Config) -> Kill | None:
    """A live instance stuck past its stage's deadline."""
    d = config.deadlines
    minutes = 60.0
    if rec.state == "loading":
        since = rec.loading_at or rec.created_at
        if since is not None and now - since > d.loading_min * minutes:
            return Kill(
                "deadline_loading",
                f"image load took over {d.loading_min:g} min (status: {rec.status_msg or '?'})",
                "loading",
                # Vast's status message is the only error line a load has (a registry's pull
                # error): a missing image is then one signature on every machine (fleetwide).
                error_lines=(rec.status_msg,) if rec.status_msg else (),
                ban=f"stuck image load (> {d.loading_min:g} min)",
            )
    elif rec.state == "setup" and rec.first_report_at is None:
        since = rec.setup_at
        if since is not None and now - since > d.first_report_min * minutes:
            return Kill(
                "deadline_first_report",
                f"no report from the worker {d.first_report_min:g} min after it started",
                "setup",
            )
    elif rec.state == "setup":
        # It reported, but never got past setup (the tunnel check retries for minutes).
        since = rec.setup_at
        if since is not None and now - since > d.setup_min * minutes:
            return Kill("deadline_setup", f"setup took over {d.setup_min:g} min", "setup")
    elif rec.state == "paramfetch":
        since = rec.paramfetch_at
        limit = max(
            d.paramfetch_min * minutes,
            (rec.paramfetch_timeout or PARAMFETCH_FLOOR_S) + BENCH_DEADLINE_GRACE_S,
        )
        if since is not None and now - since > limit:
            return Kill(
                "deadline_paramfetch",
                f"param fetch timeout ({round(limit / minutes, 1):g} min)",
                "paramfetch",
                strike=True,
            )
    elif rec.state == "benchmark":
        since = rec.benchmark_at
        limit = bench_deadline_s(rec, config)
        if since is not None and now - since > limit:
            return Kill(
                "deadline_benchmark",
                f"benchmark timeout ({round(limit / minutes, 1):g} min)",
                "benchmark",
                strike=True,
            )
    return None


def unhealthy_kill(rec: InstanceRecord, now: float, config: Config) -> Kill | None:
    """An instance exited/offline/unknown on Vast for longer than the grace period."""
    if rec.vast_status not in UNHEALTHY or rec.unhealthy_since is None:
        return None
    grace = config.deadlines.exited_grace_min * 60.0
    if now - rec.unhealthy_since <= grace:
        return None
    kind = "offline" if rec.vast_status in ("offline", "unknown") else "exited"
    return Kill(
        kind,
        f"instance {rec.vast_status} on Vast for over {config.deadlines.exited_grace_min:g} min"
        + (f" ({rec.status_msg})" if rec.status_msg else ""),
        rec.state,
        strike=True,
    )


def reconcile_kill(
    rec: InstanceRecord, now: float, config: Config, bad_reason: str | None
) -> Kill | None:
    """What the reconcile pass does with one live worker: its machine on the bad list
    (``bad_reason``, "" when none is recorded), unhealthy on Vast past the grace, or stuck past
    its stage's deadline; None keeps it."""
    if bad_reason is not None:
        return Kill(
            "bad_machine",
            f"machine {rec.machine_id} is on the bad list"
            + (f": {bad_reason}" if bad_reason else ""),
        )
    return (
        unhealthy_kill(rec, now, config)
        or deadline_kill(rec, now, config)
        or tunnel_kill(rec, now, config)
    )


MAX_BAN_DAYS = 3650.0  # config/schema.py bounds fleet.auto_ban_days by it too: ten years is forever


def ban_expiry(now: float, auto_ban_days: float) -> float | None:
    """When an automatic ban made now lapses; None: never (``auto_ban_days`` 0). Bounded: a
    value no store can hold must never stand between a decided destroy and its DELETE."""
    if not auto_ban_days > 0:  # (NaN included)
        return None
    return now + min(auto_ban_days, MAX_BAN_DAYS) * 86400.0


def strike_window_start(now: float, auto_ban_days: float) -> float | None:
    """The oldest strike that still counts towards a ban; None: every strike counts
    (``fleet.auto_ban_days`` 0, bans that never expire)."""
    return now - auto_ban_days * 86400 if auto_ban_days > 0 else None


def strike_ban(count: int, strikes_to_ban: int, last_reason: str) -> str | None:
    """The ban a machine's strikes lead to (its reason), or None while below the threshold."""
    if strikes_to_ban <= 0 or count < strikes_to_ban:
        return None
    return f"{count} strikes, the last: {last_reason}"[:300]


# The outcomes of a benchmark that ran to its end: only these measured the machine's rate
# (worker-image/benchmark.sh writes rate_per_hour for no other).
RATED_OUTCOMES = ("pass", "below_min")


def bench_rate(result: BenchResult) -> float | None:
    """The machine's rate from its benchmark result, or None unless the run ended in pass or
    below_min. A run that ended otherwise (a daemon dead after two proofs, a timeout, an early
    abort) measured a few finishes, not the machine: an older image still sends that as
    rate_per_hour beside outcome error, and it is not taken (issue 17 item 5)."""
    if result.outcome not in RATED_OUTCOMES:
        return None
    return result.rate_per_hour


def bench_partial_rate(result: BenchResult) -> float | None:
    """What a benchmark that did not end in pass or below_min measured before it ended, for a
    person to read (a kill reason, the console): partial_rate_per_hour, or an older image's
    rate_per_hour beside such an outcome. Never a rate to judge the machine by; only an early
    abort's is its record, marked partial (``bench_partial_record``)."""
    if result.outcome in RATED_OUTCOMES:
        return None
    partial = result.partial_rate_per_hour
    return partial if partial is not None else result.rate_per_hour


# An early abort stops a timed run whose pace so far cannot reach min_rate even 25 % faster
# (worker-image/benchmark.sh early_abort_check, after at least three finishes): that pace is
# the machine's, measured at production concurrency, only on fewer proofs. It is its record
# (marked partial) so that the ranking does not rent it again at the same price on the
# strength of a prior it has just failed. Errors and timeouts measured the fault, not the pace.
PARTIAL_RECORDED = ("aborted_early",)
PARTIAL_MIN_PROOFS = 3


def bench_partial_record(result: BenchResult) -> float | None:
    """The partial rate a machine's record keeps: an early abort's pace over its finished
    proofs, else None."""
    if result.outcome not in PARTIAL_RECORDED or result.stage != "timed_run":
        return None
    if (result.proofs_completed or 0) < PARTIAL_MIN_PROOFS:
        return None
    partial = result.partial_rate_per_hour
    return partial if partial is not None and partial > 0 else None


def deadline_sizing(result: BenchResult, config: Config) -> plan.Sizing | None:
    """The MaxPending that lets a proof finish within curio's ProveTimeout on this machine, from
    its benchmark's rate and quickest latency at production concurrency (plan.deadline_sizing);
    None when the result has no latency (an image that does not measure it) or no rate (a run
    that did not finish: bench_rate)."""
    rate = bench_rate(result)
    service = result.latency_service
    if rate is None or service is None or rate <= 0 or service <= 0:
        return None
    return plan.deadline_sizing(
        rate, service, config.curio.max_pending, plan.duration_s(config.curio.prove_timeout),
        config.proving.deadline_margin,
    )  # fmt: skip


def effective_rate(result: BenchResult, config: Config) -> float | None:
    """What the machine proves in production: its benchmark's rate, or less when curio's
    deadline holds it to fewer proofs in flight. None for a run that did not finish (bench_rate):
    the machine's record learns nothing from a failed benchmark."""
    rate = bench_rate(result)
    sizing = deadline_sizing(result, config)
    if rate is None or sizing is None:
        return rate
    return min(rate, sizing.rate)


def _deadline_kill(
    result: BenchResult, min_rate: float | None, config: Config, tail: tuple[str, ...]
) -> Kill | None:
    """A machine too slow for curio's deadline at any MaxPending, or too slow at the one that
    fits it (plan.py says why sizing, not rejecting, is the rule). Not a fault of the machine:
    no ban, no strike; its usable rate becomes its record."""
    sizing = deadline_sizing(result, config)
    if sizing is None:
        return None
    rate = bench_rate(result)
    timeout = config.curio.prove_timeout
    limit = f"{sizing.limit_s / 60:.1f} min"
    reported = result.max_pending
    if sizing.max_pending == 0:
        reason = (
            f"benchmark: a proof takes {sizing.latency_s / 60:.1f} min at the least, over the "
            f"{limit} curio's ProveTimeout {timeout} allows"
        )
    elif min_rate is not None and sizing.rate < min_rate <= (rate or 0.0):
        reason = (
            f"benchmark: at MaxPending {sizing.max_pending} (a proof within {limit} of curio's "
            f"ProveTimeout {timeout}) it keeps {sizing.rate:.1f} < {min_rate:.1f} proofs/h"
        )
    elif reported is not None and reported > sizing.max_pending:
        reason = (
            f"benchmark: the worker would run MaxPending {reported}, but only "
            f"{sizing.max_pending} proofs in flight finish within {limit} of ProveTimeout {timeout}"
        )
    else:
        return None
    return Kill(
        "bench_deadline", reason[:300], "benchmark", tail, result.outcome or "error",
        detail={"rate": rate, "max_pending": sizing.max_pending,
                "kept_rate": sizing.rate, "latency_s": sizing.latency_s},
    )  # fmt: skip


def benchmark_kill(
    result: BenchResult, min_rate: float | None, config: Config | None = None
) -> Kill | None:
    """The benchmark gate. None means: passed, keep it."""
    outcome = result.outcome or "error"
    rate = bench_rate(result)
    partial = bench_partial_rate(result)
    tail = result.error_tail[-20:]
    if outcome in ("pass", "below_min"):
        late = _deadline_kill(result, min_rate, config or Config(), tail)
        if late is not None:
            return late
    if outcome == "pass" and (min_rate is None or (rate is not None and rate >= min_rate)):
        return None
    if outcome == "pass":  # the worker says pass, but our own gate disagrees
        outcome = "below_min"
    kind = BENCH_KILL_KIND.get(outcome, "bench_error")
    rate_text = "n/a" if rate is None else f"{rate:.1f}"
    min_text = "?" if min_rate is None else f"{min_rate:.1f}"
    stage = result.stage or "?"
    if outcome == "below_min":
        reason = f"benchmark {outcome}: {rate_text} < {min_text} proofs/h"
    elif outcome == "aborted_early":
        partial_text = "n/a" if partial is None else f"{partial:.1f}"
        reason = f"benchmark {outcome}: partial rate {partial_text} < {min_text} proofs/h"
    elif outcome == "timeout":
        reason = f"benchmark timeout in {stage} ({result.proofs_completed or 0} proofs done)"
    else:
        # The most telling line: a GPU error if there is one, else the last error line.
        telling = (gpu_errors(tail) or list(tail) or ["no error line"])[-1].strip()
        reason = f"benchmark {outcome} in {stage}: {telling}"
    ban = None
    if outcome == "error" or gpu_errors(tail):
        ban = f"benchmark {outcome} in {stage}" + (
            f": {gpu_errors(tail)[-1].strip()}" if gpu_errors(tail) else ""
        )
    # No rate to keep a slow machine off (a timeout, an early abort, an abort before any proof):
    # a strike. A partial rate is for a person to read, never the machine's record.
    strike = ban is None and (outcome == "timeout" or rate is None)
    detail: dict[str, Any] = {"rate": rate}
    if partial is not None:
        detail["partial_rate"] = partial
    return Kill(kind, reason[:300], "benchmark", tail, outcome, ban, detail, strike)


def failure_kill(event: WorkerEvent) -> Kill:
    """A worker stage reported failure. In the prove stage the kind says what died; a daemon
    that dies while proving is a strike on its machine (a GPU error in its lines, a ban)."""
    stage = event.stage or "?"
    reason = event.reason or "failed"
    tail = event.error_tail[-20:]
    kind = f"{WORKER_STAGE.get(stage, stage)}_failed"
    strike = False
    ban = None
    if stage == "prove" and reason.startswith("cuzk-daemon"):
        kind, strike = "prove_daemon_died", True
    elif stage == "prove" and reason.startswith("curio"):
        kind = "prove_curio_failed"
    elif stage == "prove" and reason.startswith("tunnel down"):
        kind = "tunnel_down"  # the controller's: never the machine's
    elif stage == "setup" and reason.startswith(MACHINE_SETUP_FAULTS):
        # what the machine is (its memory, CPU, driver) is not what its listing promised
        kind, ban = "setup_machine", f"setup: {reason}"
    elif stage == "setup" and reason.startswith("curio identity"):
        kind = "setup_identity"  # the controller's configuration
    gpu = gpu_errors(tail)
    if gpu:
        ban = f"{stage} failed: {gpu[-1].strip()}"
    return Kill(
        kind, f"{stage} failed: {reason}"[:300], WORKER_STAGE.get(stage), tail, ban=ban,
        strike=strike,
    )  # fmt: skip


# Setup failures that describe the machine itself (worker-image/entrypoint.sh stage_setup): it
# would fail the same way every time it is rented.
MACHINE_SETUP_FAULTS = ("memory plan", "CPU lacks", "host driver")


def tunnel_kill(rec: InstanceRecord, now: float, config: Config) -> Kill | None:
    """A worker that has waited too long for the controller's tunnel: destroyed to stop its
    bill, with no mark against the machine (the tunnel is the controller's)."""
    since = rec.tunnel_down_since
    limit = config.deadlines.tunnel_min
    if since is None or rec.state != "proving" or now - since <= limit * 60.0:
        return None
    return Kill(
        "tunnel_down",
        f"the controller's tunnel was down for over {limit:g} min"
        + (f" ({rec.tunnel_detail})" if rec.tunnel_detail else ""),
        "proving",
    )


def benchmark_strike(result: BenchResult) -> str | None:
    """A passed benchmark whose proofs failed still marks the machine: the reason, or None."""
    failed = result.proofs_failed
    if failed is None or failed <= 0:
        return None
    total = failed + (result.proofs_completed or 0)
    tail = list(result.error_tail)
    telling = (gpu_errors(tail) or tail or ["no error line"])[-1].strip()
    return f"{failed} of {total} benchmark proofs failed: {telling}"[:300]
