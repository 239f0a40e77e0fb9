"""The trial's report: a summary table on stdout and the same as JSON."""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path
from typing import Any

from reliability import invariants as inv
from reliability.trial import ORPHAN_BOUND, Trial, refill_bound
from vastui.engine.labels import is_vastui_label

# The invariants each command checks (the soak's and the crash trial's are the first 13, and
# every trial's observer must have seen the cloud).
BASE = (*list(inv.INVARIANTS)[:13], "observed_too_little")
CHECKED: dict[str, tuple[str, ...]] = {
    "soak": BASE,
    "crash": (*BASE, "crash_point_unreached"),
    "api-outage": (*BASE, "outage_destroy", "outage_recovery", "trial_setup"),
    "ssh-cut": (*BASE, "cut_off_destroy", "outage_recovery", "trial_setup"),
    "resources": (*BASE, "resource_growth", "db_growth"),
    "second-controller": (*BASE, "cross_destroy", "foreign_unseen", "rent_war", "trial_setup"),
    "storm": (*BASE, "storm_overrun", "storm_blame", "storm_pause", "storm_recovery"),
}


def build(trial: Trial, command: str, argv: list[str], body: dict[str, Any]) -> dict[str, Any]:
    counts = {k: v for k, v in sorted(trial.counts.items())}
    checked = CHECKED.get(command, tuple(inv.INVARIANTS))
    names = [*checked, *(v.invariant for v in trial.violations if v.invariant not in checked)]
    by_invariant = {name: sum(1 for v in trial.violations if v.invariant == name) for name in names}
    return {
        "command": command,
        "argv": argv,
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(trial.started)),
        "wall_s": round(time.time() - trial.started, 1),
        "machine": f"{platform.node()} {platform.machine()} python {platform.python_version()}",
        "options": {
            "seed": trial.opts.seed,
            "speed": trial.opts.speed,
            "faults": trial.opts.faults,
            "machine_fault_rate": trial.opts.machine_fault_rate,
            "target": trial.opts.fleet.target,
            "fleet": trial.opts.fleet.name,
        },
        "result": body,
        "observer": counts,
        "store": trial.store_counts(),
        "sim_clock": trial.sim.clock if trial.sim is not None else None,
        "bounds": {
            "orphan_bound_s": ORPHAN_BOUND,
            "orphan_max_age_s": round(trial.orphan_max_age, 1),
            "refill_bound_s": round(refill_bound(trial.opts.speed), 1),
            "double_rent_ledger_checks": trial.ledger_checks,
        },
        "sim_stats": sim_summary(trial.sim_counts()),
        "account_credit": {
            "start": trial.credit_at_start,
            "end": trial.cli.credit() if trial.cli is not None else None,
        },
        "faults_met_by_engine": trial.engine_log_faults(),
        "foreign_instances": sorted(trial.foreign),
        "invariants": {
            name: {"promise": inv.INVARIANTS.get(name, ""), "violations": by_invariant[name]}
            for name in dict.fromkeys(names)
        },
        "violations": [v.to_json() for v in trial.violations],
        # (seconds from the start, ours alive, target, excused): to re-judge the target windows
        "samples": [
            [round(x.at - trial.started, 1), x.alive, x.target, int(x.excused)]
            for x in trial.samples
        ],
        "ok": not trial.violations,
        "workdir": str(trial.wd.root) if trial.opts.keep else None,
    }


def table(report: dict[str, Any]) -> str:
    lines = [f"reliability {report['command']}: {'OK' if report['ok'] else 'VIOLATIONS'}"]
    lines.append(f"  wall time        {report['wall_s']:.0f}s   options {report['options']}")
    store = report["store"]
    lines.append(
        f"  rented           {store['instances_rented']}   alive at end "
        f"{store['instances_alive_at_end']}   banned machines {store['machines_banned']}"
    )
    kinds = ", ".join(f"{k} {v}" for k, v in store["destroyed_by_kind"].items()) or "none"
    lines.append(f"  destroyed        {kinds}")
    obs = report["observer"]
    lines.append(
        f"  observations     {obs.get('observations', 0)} "
        f"(failed under faults {obs.get('observations_failed', 0)}), engine starts "
        f"{obs.get('engine_starts', 0)}"
    )
    died = {k.split(":", 1)[1]: v for k, v in obs.items() if k.startswith("died_by:")}
    if died:
        lines.append("  SIGKILLs         " + ", ".join(f"{k} {v}" for k, v in sorted(died.items())))
    met = report.get("faults_met_by_engine") or {}
    if met:
        lines.append("  faults met       " + ", ".join(f"{k} {v}" for k, v in met.items()))
    sim = report.get("sim_stats")
    if sim:
        lines.append(
            f"  cloud stats      faults {sim['faults_total']} {json.dumps(sim['faults_by_agent'])}"
            f", created {sim['instances_created']}, destroyed {sim['instances_destroyed']}, "
            f"most creates under one vastui label {sim['max_creates_per_vastui_label']}"
        )
        lines.append(f"  faults by kind   {json.dumps(sim['faults_by_kind'], sort_keys=True)}")
    credit = report["account_credit"]
    lines.append(f"  account credit   ${credit['start']} at the start, ${credit['end']} at the end")
    b = report["bounds"]
    lines.append(
        f"  bounds           orphan {b['orphan_max_age_s']}s of {b['orphan_bound_s']}s, "
        f"refill {b['refill_bound_s']}s, ledger checks {b['double_rent_ledger_checks']}"
    )
    lines.append("  invariant                          violations")
    for name, info in report["invariants"].items():
        lines.append(f"    {name:32s} {info['violations']}")
    growth = (report.get("result") or {}).get("growth") or []
    if growth:
        lines.append("  growth (judged after the warm-up: middle third's peak -> last third's)")
    for g in growth:
        if not g.get("judged"):
            lines.append(f"    {g['metric']:22s} not judged (too few samples)")
            continue
        lines.append(
            f"    {g['metric']:22s} {g['middle_max']:g} -> {g['last_max']:g} (allowed "
            f"{g['allowed']:.4g}) slope {g['slope_per_hour'] or 0:+.3g}/h, catches "
            f">{g['detects_per_hour']:.3g}/h{'  GREW' if g.get('grew') else ''}"
        )
    for v in report["violations"][:30]:
        lines.append(f"  ! {v['invariant']} {v['subject']}: {v['detail']}")
    return "\n".join(lines)


def sim_summary(stats: dict[str, Any] | None) -> dict[str, Any] | None:
    """``/_sim/stats`` for the report: the counters, faults folded by kind (429, 5xx, ...) over
    endpoints, and the largest count of creates under one vastui label (1: no double rent)."""
    if not stats:
        return None
    kinds: dict[str, int] = {}
    for key, count in (stats.get("faults") or {}).items():
        kind = key.split(":", 1)[-1].split("+", 1)[0]
        kind = "429" if kind.startswith("429") else kind
        kinds[kind] = kinds.get(kind, 0) + int(count)
    labels = stats.get("labels_created") or {}
    ours = [n for label, n in labels.items() if is_vastui_label(label)]
    return {
        **{k: v for k, v in stats.items() if k != "labels_created"},
        "faults_by_kind": dict(sorted(kinds.items())),
        "vastui_labels_created": len(ours),
        "max_creates_per_vastui_label": max(ours, default=0),
    }


def write(report: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2, sort_keys=False) + "\n", encoding="utf-8")
