"""`vastui status`: what the fleet is doing and why, with its spend, read from the store alone.

:func:`gather` reads (never writes) the database: the engine's last published status (its
target, its workers by stage, why it is below target), the spend, the instances by stage and the
engine lease. :func:`render` turns that report into a few plain lines; the report itself is the
``--json`` form. Times in the report are the engine's clock (``now``), except the lease's
heartbeat, which is wall-clock like the lease itself.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from vastui.engine.spend import counted, fleet_spend, local_midnight
from vastui.store import STATES, Store, iso_utc


async def gather(
    store: Store, now: float, *, day_start: float | None = None, wall_now: float | None = None
) -> dict[str, Any]:
    """The status report. `now` is the engine's clock (billing runs up to it); `day_start`
    is where "today" begins (default: local midnight of `now`); `wall_now` dates the lease."""
    wall = time.time() if wall_now is None else wall_now
    engine = await store.get_engine_status()
    records = counted(await store.list_instances())
    start = local_midnight(now) if day_start is None else day_start
    holder = await store.lease_holder(now=wall)
    stages = Counter(r.state for r in records)
    return {
        "now": iso_utc(now),
        "engine": None if engine is None else engine.to_json(),
        "lease": None
        if holder is None
        else {
            "mode": holder.mode,
            "pid": holder.pid,
            "hostname": holder.hostname,
            "heartbeat_age_s": round(max(0.0, wall - holder.heartbeat_at), 1),
        },
        "stages": {state: stages[state] for state in STATES if stages[state]},
        "spend": fleet_spend(records, now, start).to_json(),
    }


def render(report: dict[str, Any]) -> str:
    """A few plain lines: the engine, the workers and the reason, the spend."""
    return "\n".join([_engine_line(report), _workers_line(report), _spend_line(report)])


def _engine_line(report: dict[str, Any]) -> str:
    lease = report.get("lease")
    if not lease:
        return "engine: none running (no live lease on this database)"
    return (
        f"engine: {lease['mode']} (pid {lease['pid']} on {lease['hostname']}), "
        f"heartbeat {lease['heartbeat_age_s']:.0f}s ago"
    )


def _workers_line(report: dict[str, Any]) -> str:
    status = report.get("engine")
    if not status:
        return "workers: no status yet (no engine has run a cycle on this database)"
    by_stage: dict[str, int] = status.get("by_stage") or {}
    order = {state: i for i, state in enumerate(STATES)}
    stages = sorted(by_stage.items(), key=lambda kv: order.get(kv[0], len(order)))
    parts = [f"{stage} {n}" for stage, n in stages if n]
    pending = status["workers"] - sum(by_stage.values())
    if pending > 0:
        parts.append(f"renting {pending}")
    line = f"workers {status['workers']}/{status['target']}"
    if parts:
        line += f" ({', '.join(parts)})"
    line += f"  {_reason_text(status)}"
    if status.get("dry_run"):
        line += "  [dry-run]"
    return line


def _reason_text(status: dict[str, Any]) -> str:
    kind, reason = status.get("reason_kind"), status.get("reason")
    if kind in ("at_target", "target_zero"):
        return str(reason)
    if kind is None:
        return "renting towards the target"
    return f"below target: {reason}"


def _spend_line(report: dict[str, Any]) -> str:
    spend = report["spend"]
    return (
        f"spend ${spend['today']:.2f} today, ${spend['total']:.2f} since start, "
        f"${spend['rejected']:.2f} on rejected workers"
    )
