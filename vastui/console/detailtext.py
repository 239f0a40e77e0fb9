"""The detail view's texts, made from a record and from cuzk's answer (no widgets): the
production line with the worker's $/proof, Vast's word on it, the cuzk status panel. Every value
from outside is untrusted: sanitized, short, never markup."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.text import Text

from vastui.domain.worker import InstanceRecord
from vastui.engine.delivery import WorkerShare
from vastui.engine.production import MIN_BUSY_S, Measure
from vastui.sanitize import sanitize_line


def render_cuzk(status: dict[str, Any]) -> Text:
    """Memory budget, pipelines and partitions, GPU workers (original-system.md §4). Every
    value is the daemon's (untrusted): a missing one reads "?", a null one "-", never None."""
    status = as_dict(status)
    out = Text()
    mem = as_dict(status.get("memory"))
    total, used = as_float(mem.get("total_bytes")), as_float(mem.get("used_bytes"))
    if total:
        frac = max(0.0, min(1.0, used / total))
        bar = "█" * int(frac * 30) + "░" * (30 - int(frac * 30))
        out.append(f"memory  {bar} {used / 2**30:.0f}/{total / 2**30:.0f} GiB\n")
    synth = as_dict(status.get("synthesis"))
    out.append(
        f"synthesis {shown(synth.get('active', '?'), 6)}/"
        f"{shown(synth.get('max_concurrent', '?'), 6)} active\n"
    )
    counters = as_dict(status.get("counters"))
    out.append(
        f"proofs since the daemon started (the benchmark's too): "
        f"{shown(counters.get('total_completed', '?'), 12)} done, "
        f"{shown(counters.get('total_failed', '?'), 12)} failed; queue "
        f"{shown(counters.get('queue_depth', '?'), 12)}\n"
    )
    styles = {"done": "green", "gpu": "bold magenta", "synthesizing": "cyan", "failed": "red"}
    for pipe in map(as_dict, as_list(status.get("pipelines"))[:6]):
        out.append(
            f"job {shown(pipe.get('job_id'), 12)} "
            f"{shown(pipe.get('partitions_done', 0), 6)}/"
            f"{shown(pipe.get('total_partitions', 0), 6)} "
        )
        for part in map(as_dict, as_list(pipe.get("partitions"))[:16]):
            state = str(part.get("state"))
            out.append("■", style=styles.get(state, "dim"))
        out.append("\n")
    for worker in map(as_dict, as_list(status.get("gpu_workers"))[:8]):
        job = worker.get("current_job")
        out.append(
            f"gpu{shown(worker.get('gpu_ordinal'), 4)} worker "
            f"{shown(worker.get('worker_id'), 6)}: {shown(worker.get('state'), 20)}"
            + ("" if job is None else f" job {shown(job, 12)}")
            + "\n"
        )
    return out


def as_dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def as_list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def shown(value: object, width: int) -> str:
    """A value from cuzk's status (untrusted): "-" for none, else one sanitized short line."""
    return "-" if value is None else sanitize_line(str(value), width)


BEFORE_END = ", before it ended"  # a killed worker's readings are its last, not now's


def vast_status_text(rec: InstanceRecord) -> Text:
    """Vast's word on the instance; a killed one's is what Vast last listed (issue 31 item 3:
    a destroyed worker read "running")."""
    text = Text(f"{shown(rec.vast_status or '-', 40)}: {sanitize_line(rec.status_msg or '', 200)}")
    if rec.killed:
        text.stylize("dim")
        text.append(f"  (as Vast last listed it{BEFORE_END})", style="dim")
    return text


def production_text(
    rec: InstanceRecord,
    when: Callable[[float | None], str | None],
    share: WorkerShare | None = None,
    measured: Measure | None = None,
    window_s: float | None = None,
) -> Text | None:
    """Measured, not assumed: cuzk's counters since the benchmark; its part of the fleet's
    headline over the window (``share``: curio's count, the paid share, what it was billed); its
    pace on the work it was given, whatever its feed (``measured``: its production over the
    window); its rate kept full (its capacity), measured in production once it was fed
    ``production.MIN_BUSY_S``, else its benchmark's."""
    if rec.prod_completed is None:
        return None if rec.phase != "proving" else Text("not measured yet", style="dim")
    text = Text(f"{rec.prod_completed} proofs since the benchmark, {rec.prod_failed or 0} failed")
    minutes = f"{window_s / 60:.0f}" if window_s else "?"
    if share is not None and share.computed is not None:
        # curio's count over the fleet's window: the headline's, for this worker
        text.append(f"; {share.computed} delivered in the last {minutes} min")
        cpp = share.cost_per_paid
        if cpp is not None:
            text.append(f" at ${cpp:.4f}/paid", style="bold")
    if measured is not None and measured.worked_rate is not None and window_s:
        text.append(
            f"; {measured.worked_rate:.1f}/h on the work it was given (it had work "
            f"{min(1.0, measured.worked_s / window_s):.0%} of the time)"
        )
    text.append("; kept full it proves ")
    if rec.prod_rate is not None:
        low = rec.min_rate is not None and rec.prod_rate < rec.min_rate
        text.append(f"{rec.prod_rate:.1f}/h", style="bold red" if low else "bold")
        text.append(" (measured)")
    else:
        text.append(f"{num_text(rec.bench_rate)}/h", style="bold")
        text.append(" (its benchmark", style="dim")
        if measured is not None and measured.busy_s < MIN_BUSY_S:
            text.append(
                f"; production measures it after {MIN_BUSY_S / 60:.0f} min fully fed, "
                f"{measured.busy_s / 60:.0f} min of the last {minutes} so far: the market has "
                "not kept it full)",
                style="dim",
            )
        else:
            text.append(")", style="dim")
    if rec.prod_checked_at is not None:
        text.append(f" (read {when(rec.prod_checked_at)})", style="dim")
    return text


def as_float(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def num_text(value: Any) -> str:
    return f"{value:.1f}" if isinstance(value, int | float) and not isinstance(value, bool) else "-"
