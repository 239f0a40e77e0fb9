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

from vastui.domain.delivery import CUZK, Delivery
from vastui.domain.engine_state import EngineStatus
from vastui.domain.stages import PHASES
from vastui.domain.timefmt import iso_utc
from vastui.engine.spend import counted, fleet_spend, local_midnight
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
    stages = Counter(r.phase for r in records)  # a stopped worker is not proving
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
        "stages": {phase: stages[phase] for phase in PHASES if stages[phase]},
        "spend": fleet_spend(records, now, start).to_json(),
        # the headline, as the engine last counted it (vastui/domain/delivery.py)
        "delivery": None
        if engine is None or engine.delivery is None
        else engine.delivery.to_json(),
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
    lines.extend(delivery_lines(Delivery.from_json(report.get("delivery")), report.get("live")))
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
    order = {state: i for i, state in enumerate(PHASES)}
    stages = sorted(by_stage.items(), key=lambda kv: order.get(kv[0], len(order)))
    parts = [f"{stage} {n}" for stage, n in stages if n]
    pending = status["workers"] - sum(by_stage.values())
    if pending > 0:
        parts.append(f"renting {pending}")
    stages_now = report.get("stages") or {}
    if stages_now.get("pooled"):
        parts.append(f"{stages_now['pooled']} stopped in the warm pool")
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


def delivery_lines(d: Delivery | None, live: object = True) -> list[str]:
    """The headline as the strip, the metrics and the detail give it: delivered proofs/h and
    $ per paid proof over the window, what curio and cuzk each counted, capacity apart, and
    the stopped workers' storage."""
    if d is None:
        return []
    minutes = f"{d.window_min:.0f} min"
    if d.source == CUZK:
        cpp = d.cost_per_computed
        line = (
            f"delivered: {d.proofs_per_hour:.0f} proofs/h over the last {minutes} ({d.computed}"
            " proved, by cuzk's counters: no curio cluster is read, so nothing is known paid)"
        )
        if cpp is not None:
            line += f", ${cpp:.4f} per proof"
    else:
        paid = "-" if d.paid is None else f"{d.paid:g}"
        line = (
            f"delivered: {d.proofs_per_hour:.0f} proofs/h over the last {minutes} "
            f"({d.computed} proved as curio records them, {paid} paid"
        )
        if d.challenges:
            line += f"; {d.challenges} unpaid challenges"
        line += ")"
        cpp = d.cost_per_paid
        line += f", {'-' if cpp is None else f'${cpp:.4f}'} per paid proof"
    line += f" (${d.cost:.2f} billed over the {minutes}: GPU hours, disks, bandwidth)"
    if not live:
        line += " [as last counted]"
    lines = [line]
    measured = d.capacity_measured
    by_bench = d.proving - measured
    how = f"{measured} measured in production" + (
        f", {by_bench} by {'its' if by_bench == 1 else 'their'} benchmark" if by_bench else ""
    )
    lines.append(
        f"capacity: {d.capacity:.0f} proofs/h if kept full ({d.proving} proving and taking "
        f"work: {how}); "
        f"running fleet ${d.dph:.2f}/h"
        + (f"; {d.stopped} stopped (warm pool, outbid): ${d.stopped_dph:.2f}/h of disk"
           if d.stopped else "")
    )  # fmt: skip
    gap = _reconcile(d)
    if gap:
        lines.append(gap)
    return lines


def _reconcile(d: Delivery) -> str | None:
    """curio's count beside cuzk's, and why they differ when they do."""
    if d.source == CUZK or d.cuzk_computed is None or d.cuzk_computed == d.computed:
        return None
    more = d.cuzk_computed - d.computed
    if more > 0:
        why = (
            "proofs curio gave up on (ProveTimeout) or rejected (CheckOutput), and proofs cuzk "
            "finished that curio has not recorded yet"
        )
        return f"cuzk counted {d.cuzk_computed} in the window, {more} more than curio: {why}"
    return (
        f"cuzk counted {d.cuzk_computed} in the window, {-more} fewer than curio: workers "
        "restarted or destroyed in the window (their counters went with their daemon)"
    )


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
        parts.append(f"last {window / 60:.0f} min: {window_counts(cluster)}")
    if cluster.get("draining"):
        parts.append(f"{cluster['draining']} draining")
    if cluster.get("overdue"):
        parts.append(f"{cluster['overdue']} past the market's deadline")
    return "cluster: " + "; ".join(parts) if parts else None


def window_counts(c: dict[str, Any]) -> str:
    """The window's counts, each cohort named: PSProve tasks by when they finished (the
    headline's), the requests by when they arrived (a request taken near the window's end is
    not computed yet, one computed early in it may have arrived before it: the two differ)."""
    text = f"PSProve {c.get('cluster_done')} done, {c.get('cluster_failed')} failed"
    if c.get("fleet_done") is not None and c.get("fleet_done") != c.get("cluster_done"):
        text += f" ({c.get('fleet_done')} by this fleet)"
    text += (
        f"; {c.get('paid_recent', c.get('paid'))} payments; of the {c.get('taken')} requests "
        f"taken in it: {c.get('computed')} computed, {c.get('submitted')} submitted "
        f"({c.get('challenges')} unpaid challenges), {c.get('paid')} paid so far"
    )
    return text


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
    line = "; ".join(parts)
    money = money_line(auto)
    return f"{line}\n{money}" if money else line


def money_line(auto: dict[str, Any]) -> str | None:
    """Margin and the market: earned less billed per hour and per day, the share of what the
    fleet could prove that it won, the price the market paid against the ask."""
    parts = []
    margin, day = _float(auto.get("margin_usd_per_h")), _float(auto.get("margin_usd_per_day"))
    earned, billed = _float(auto.get("earned_usd_per_h")), _float(auto.get("fleet_usd_per_h"))
    if margin is not None and day is not None and earned is not None and billed is not None:
        parts.append(f"margin ${margin:+.2f}/h (${day:+.2f}/day): the market paid "
                     f"${earned:.2f}/h, the fleet bills ${billed:.2f}/h")  # fmt: skip
    elif billed is not None:
        parts.append(f"the fleet bills ${billed:.2f}/h (set fleet.fil_usd to see the margin)")
    won, got = _float(auto.get("won_share")), _float(auto.get("obtained_per_h"))
    if won is not None and got is not None:
        cap = _float(auto.get("capacity_per_h")) or 0.0
        parts.append(f"won {won:.0%} of what the fleet could prove ({got:.0f}/h of {cap:.0f}/h)")
    paid, ask = _float(auto.get("paid_fil_per_proof")), _float(auto.get("ask_fil"))
    if paid is not None:
        parts.append(f"paid {paid:.6g} FIL/proof")
    if ask is not None:
        parts.append(f"ask {ask:.6g} FIL")
    suggested = _float(auto.get("suggested_ask_fil"))
    if suggested is not None:
        parts.append(f"an ask of {suggested:.6g} FIL would still pay the fleet's $/proof "
                     "(the ask is yours to set)")  # fmt: skip
    return "; ".join(parts) if parts else None


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
