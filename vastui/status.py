"""`vastui status`: what the fleet is doing and why, with its spend, read from the store alone.

:func:`gather` reads (never writes) the database: the engine's last published status (its
target, its workers by stage, why it is below target), the spend, the instances by stage and the
engine lease. :func:`render` turns that report into a few plain lines; the report itself is the
``--json`` form.

One clock in every answer, the fleet's: the wall clock for a real fleet, the simulator's in the
demo (the engine says which in its status). Without a live engine the published status is the
fleet *as last seen*, with its age, never the live fleet: a real fleet's instances still run
and bill meanwhile (``now`` is the wall clock), a demo's simulated cloud stopped with its engine
(``now`` is its last cycle).
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from vastui.domain.engine_state import EngineStatus
from vastui.domain.stages import STATES
from vastui.domain.timefmt import iso_utc
from vastui.engine.spend import counted, fleet_spend, local_midnight, proving_cost
from vastui.store import Store
from vastui.store.lease import holder_is_dead


def fleet_now(engine: EngineStatus | None, wall: float) -> float:
    """The fleet's clock: the wall clock, unless the engine's clock is a simulator's (then its
    last cycle: a reader cannot run a stopped or distant simulator's clock forward)."""
    return engine.updated_at if engine is not None and engine.simulated else wall


async def gather(
    store: Store,
    now: float | None = None,
    *,
    day_start: float | None = None,
    wall_now: float | None = None,
) -> dict[str, Any]:
    """The status report. ``now`` is the fleet's clock (default :func:`fleet_now`: billing runs
    up to it); ``day_start`` is where "today" begins (default: local midnight of ``now``);
    ``wall_now`` dates the lease and the engine's last sign of life (ages, not times)."""
    wall = time.time() if wall_now is None else wall_now
    engine = await store.status.get()
    if now is None:
        now = fleet_now(engine, wall)
    records = counted(await store.instances.all())
    start = local_midnight(now) if day_start is None else day_start
    holder = await store.lease.holder(now=wall)
    if holder is not None and holder_is_dead(holder):
        holder = None  # SIGKILLed on this host: its row lapses later, its process is gone now
    stages = Counter(r.state for r in records)
    live_bids = [r for r in records if r.is_bid and not r.killed]
    foreign = await store.foreign.all()
    pause = await store.meta.fleet_failure()
    seen_age = None
    if engine is not None and engine.wall_at is not None:
        seen_age = round(max(0.0, wall - engine.wall_at), 1)
    return {
        "now": iso_utc(now),
        "live": holder is not None,
        "engine": None if engine is None else engine.to_json(),
        "engine_seen_age_s": seen_age,
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
        "proving": proving_cost(records).to_json(),  # the one $/proof (engine/spend.py)
        # Interruptible workers: how many, how many a higher bid has stopped now.
        "bids": {
            "workers": len(live_bids),
            "stopped_outbid": sum(1 for r in live_bids if r.outbid_since is not None),
            "interruptions": sum(r.interruptions for r in live_bids),
        },
        "fleet_failure": None
        if pause is None
        else {
            "text": pause.get("text"),
            "since": iso_utc(_float(pause.get("since"))),
            "resumes": "curio's next signature that goes through resumes too"
            if pause.get("signature") == "payment_path"
            else "a passing worker resumes too",
        },
        "foreign": {
            "instances": len(foreign),
            "fleets": sorted({f.owner for f in foreign}),
        },
    }


def render(report: dict[str, Any]) -> str:
    """A few plain lines: the engine, the workers and the reason, the spend (and other
    controllers' instances on the account, when the engine saw any)."""
    lines = [_engine_line(report), _workers_line(report)]
    proving = _proving_line(report)
    if proving:
        lines.append(proving)
    lines.append(_spend_line(report))
    engine = report.get("engine") or {}
    if engine.get("cut_off"):
        lines.append(
            f"cut off from its workers since {engine.get('cut_off_since')}: "
            f"{engine['cut_off']}; workers wait to prove, no machine is blamed"
        )
    cluster = cluster_line((report.get("engine") or {}).get("cluster"))
    if cluster:
        lines.append(cluster)
    auto = auto_line((report.get("engine") or {}).get("cluster"))
    if auto:
        lines.append(auto)
    pause = report.get("fleet_failure")
    if pause:
        lines.append(
            f"provisioning paused since {pause['since']}: fleet-wide failure {pause['text']}; "
            f"no machine blamed. Fix the cause, then `vastui resume` ({pause['resumes']})"
        )
    foreign = report.get("foreign") or {}
    if foreign.get("instances"):
        lines.append(
            f"other controllers on this account: {foreign['instances']} instances (fleet "
            f"{', '.join(foreign['fleets'])}); never adopted, counted or destroyed"
        )
    return "\n".join(lines)


def _engine_line(report: dict[str, Any]) -> str:
    lease = report.get("lease")
    if not lease:
        age = report.get("engine_seen_age_s")
        seen = f"; last seen {_age(age)} ago" if age is not None else ""
        return f"engine: none running (no live lease on this database){seen}"
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
    bids = report.get("bids") or {}
    if bids.get("workers"):
        parts.append(f"{bids['workers']} as bids")
    if bids.get("stopped_outbid"):
        parts.append(f"stopped: outbid {bids['stopped_outbid']}")
    line = f"workers {status['workers']}/{status['target']}"
    if parts:
        line += f" ({', '.join(parts)})"
    if not report.get("live"):
        # What the engine last published is history: say how old, and nothing as if live.
        age = report.get("engine_seen_age_s")
        when = f"{_age(age)} ago" if age is not None else "at an unknown time"
        return (
            f"fleet as last seen by its engine {when}: {line}; then {_reason_text(status)}"
            " (not watched now)"
        )
    line += f"  {_reason_text(status)}"
    if status.get("dry_run"):
        line += "  [dry-run]"
    return line


def _proving_line(report: dict[str, Any]) -> str | None:
    """The proving workers' measured rate and $/proof, as the strip and the metrics give it."""
    p = report.get("proving") or {}
    if not p.get("proving") or not report.get("live"):
        return None  # nothing proving, or history (the workers line says as of when)
    rate, cpp = _float(p.get("proofs_per_hour")), _float(p.get("dollars_per_proof"))
    if rate is None:
        n = p["proving"]
        return f"proving: {n} worker{'s' if n != 1 else ''}, no rate measured yet"
    line = f"proving: {rate:.0f} proofs/h"
    if cpp is not None:
        line += f" at ${cpp:.4f}/proof (their ${_float(p.get('dollars_per_hour')) or 0:.2f}/h)"
    if p.get("measured", 0) < p["proving"]:
        line += f"; {p['measured']} of {p['proving']} proving workers measured"
    return line


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def _reason_text(status: dict[str, Any]) -> str:
    kind, reason = status.get("reason_kind"), status.get("reason")
    if kind in ("at_target", "target_zero"):
        return str(reason)
    if kind is None:
        return "renting towards the target"
    return f"below target: {reason}"


def _spend_line(report: dict[str, Any]) -> str:
    spend = report["spend"]
    line = (
        f"spend ${spend['today']:.2f} today, ${spend['total']:.2f} since start, "
        f"${spend['rejected']:.2f} on rejected workers"
    )
    draining = _float(spend.get("draining"))
    if draining:
        line += f", ${draining:.2f} while draining"
    parts = [
        f"${amount:.2f} {what}"
        for what, amount in (("bandwidth", _float(spend.get("bandwidth"))),
                             ("warm pool", _float(spend.get("pool"))))
        if amount
    ]  # fmt: skip
    if parts:
        line += f" (of it: {', '.join(parts)})"
    return line + "".join(f"; {part}" for part in limits(report.get("engine") or {}))


def cluster_line(cluster: dict[str, Any] | None) -> str | None:
    """curio's cluster as the engine last read it: its PSProve work, the market's requests over
    the window, the fleet's $/proof computed and paid; or why it is not read."""
    if not cluster:
        return None
    state = cluster.get("state")
    if state == "off":
        return f"cluster: not read (nothing answered at {cluster.get('address')} at start)"
    parts = []
    if state == "error":
        parts.append(f"cannot be read: {cluster.get('error')}")
    if cluster.get("psprove_waiting") is not None:
        parts.append(
            f"PSProve {cluster['psprove_waiting']} waiting, {cluster.get('psprove_claimed')} "
            "claimed"
        )
        window = _float(cluster.get("window_s")) or 0.0
        parts.append(
            f"last {window / 60:.0f} min: {cluster.get('computed')} computed, "
            f"{cluster.get('submitted')} submitted ({cluster.get('challenges')} challenges), "
            f"{cluster.get('paid')} paid"
        )
        costs = []
        for key, what in (("cost_per_computed", "computed"), ("cost_per_paid", "paid")):
            value = _float(cluster.get(key))
            if value is not None:
                costs.append(f"${value:.4f}/proof {what}")
        if costs:
            parts.append(", ".join(costs))
    if cluster.get("draining"):
        parts.append(f"{cluster['draining']} draining")
    if cluster.get("overdue"):
        parts.append(f"{cluster['overdue']} past the market's deadline")
    return "cluster: " + "; ".join(parts) if parts else None


def auto_line(cluster: dict[str, Any] | None) -> str | None:
    """The automatic target (fleet.target_workers = "auto"): its bounds, what it last saw and
    why it stands where it does."""
    auto = (cluster or {}).get("autoscale")
    if not isinstance(auto, dict):
        return None
    parts = [f"auto target {auto.get('target')} (min {auto.get('min_workers')}, max "
             f"{auto.get('max_workers')})"]  # fmt: skip
    util, done, cap = (_float(auto.get(k)) for k in ("utilisation", "done_per_h", "capacity_per_h"))
    if util is not None and done is not None and cap is not None:
        parts.append(f"utilisation {util:.0%} ({done:.0f}/h of {cap:.0f}/h)")
    demand = _float(auto.get("demand_per_h"))
    if demand is not None:
        parts.append(f"the market sends {demand:.0f} requests/h")
    if auto.get("unclaimed") is not None:
        parts.append(f"{auto.get('unclaimed')} requests unclaimed")
    if auto.get("pooled"):
        parts.append(f"{auto['pooled']} stopped in the warm pool (max {auto.get('pool_max')})")
    if auto.get("reason"):
        parts.append(str(auto["reason"]))
    return "; ".join(parts)


def limits(status: dict[str, Any]) -> list[str]:
    """The money limits the engine last published: the daily budget, the $/h cap, the
    account's credit (each only when known)."""
    out = []
    budget, dph, cap = (_float(status.get(k)) for k in ("daily_budget", "dph", "dph_cap"))
    if budget is not None:
        out.append(f"daily budget ${budget:.2f} (UTC)")
    if cap is not None:
        now = f"${dph:.2f}/h of " if dph is not None else ""
        out.append(f"{now}${cap:.2f}/h cap")
    credit = _float(status.get("credit"))
    if credit is not None:
        out.append(f"credit ${credit:.2f}")
    return out
