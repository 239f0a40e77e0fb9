"""`python -m reliability api-outage|ssh-cut`: the controller loses its reach while a fleet proves.

Both start one engine on the served cloud's clock and wait until the fleet is at its target
with every worker proving. Then, for ``--outage-min`` simulated minutes:

* **api-outage**: the Vast API is unreachable for the engine alone. The engine reaches the API
  through a TCP proxy (reliability/proxy.py) that refuses every connection (``--mode
  refuse``: a network or DNS failure) or accepts and never answers (``--mode blackhole``: a
  dead load balancer); live connections are reset. The observer (the vastai CLI) talks to the
  cloud directly all along.
* **ssh-cut**: every worker's sshd refuses connections and drops the live ones
  (``POST /_sim/ssh``, vastsim/sshd.py ``refuse_connections``): the controller cut off from
  its workers, and with it their tunnel to the controller's curio database and Lotus API. The
  workers go on proving what they hold; the Vast API answers as usual.

Then contact comes back, and the trial watches ``--after-min`` simulated minutes more. Besides
every invariant of the soak (orphans and double rents from the cloud's own ledger, above all),
it asserts: ``outage_destroy`` / ``cut_off_destroy`` (nothing destroyed, struck or banned in the
window that the outage explains) and ``outage_recovery`` (the engine lists again, or reads its
workers again, and the fleet is at target within the bound).

By default no machine faults are injected (``--machine-fault-rate 0``) and the API's faults are
the light profile's. A destroy in the window is the outage's unless Vast itself listed the
instance exited or offline, or the worker's own word decided it while the engine could hear it
(the world keeps its slow machines without injected faults: curio's overdue proofs end them).
Destroys for lost contact (unresponsive, tunnel down, a stage's deadline, vanished) never are.
"""

from __future__ import annotations

import calendar
import re
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from reliability import invariants as inv
from reliability.crash import clean_stop
from reliability.soak import Watch
from reliability.trial import ENGINE_POLL, STEP_BOUND, Trial, refill_bound

# The engine's first instance list after the API returns: one step held at its worst (a call's
# timeout and retry budget) and a few steps.
LIST_BOUND = STEP_BOUND + 4 * ENGINE_POLL
EXITED_GRACE_S = 300.0  # deadlines.exited_grace_min: an instance found exited then waits this


@dataclass
class OutagePlan:
    kind: str  # "api" | "ssh"
    minutes: float  # simulated minutes without contact
    after_min: float  # simulated minutes watched after contact is back
    ready_hours: float  # simulated hours allowed to reach a proving fleet
    mode: str = "refuse"  # api: refuse | blackhole

    @property
    def invariant(self) -> str:
        return "outage_destroy" if self.kind == "api" else "cut_off_destroy"

    @property
    def what(self) -> str:
        return "the Vast API" if self.kind == "api" else "SSH to the workers"


def proving(trial: Trial) -> list[inv.StoreInstance]:
    store = trial.last_store or inv.StoreView()
    return [i for i in store.instances if not i.killed and i.state == "proving"]


def fleet_proving(trial: Trial) -> bool:
    """At target on the cloud, and as many workers proving in the store."""
    listed = trial.samples[-1].alive if trial.samples else 0
    return listed >= trial.target and len(proving(trial)) >= trial.target


def run(trial: Trial, plan: OutagePlan) -> dict[str, Any]:
    speed = trial.opts.speed
    out_s = plan.minutes * 60.0 / speed
    after_s = max(plan.after_min * 60.0 / speed, LIST_BOUND + refill_bound(speed))
    trial.say(
        f"{plan.kind} outage: {plan.what} out for {plan.minutes:g} simulated min "
        f"({out_s:.0f}s at {speed:g}x{', ' + plan.mode if plan.kind == 'api' else ''}) once "
        f"{trial.target} workers prove; then {after_s:.0f}s watched"
    )
    trial.start_engine()
    if not trial.wait_lease():
        trial.record([inv.Violation("restart_refused", "start", "the engine took no lease")])
    start = time.time()
    watch = Watch(trial, start)

    # 1. A fleet at its target, every worker proving.
    ready_wall = plan.ready_hours * 3600.0 / speed
    ready = watch(ready_wall, until=lambda: fleet_proving(trial))
    ready_s = time.time() - start
    at_cut = sorted(i.vast_id for i in proving(trial))
    if not ready:
        trial.record(
            [
                inv.Violation(
                    "trial_setup", "proving fleet",
                    f"{len(at_cut)} of {trial.target} workers proving after {plan.ready_hours:g} "
                    "simulated hours: the outage is tried on what there is",
                )
            ]
        )  # fmt: skip
    trial.say(f"{len(at_cut)} workers proving ({at_cut}) after {ready_s:.0f}s: cutting")

    # 2. The outage.
    cut_wall, cut_sim = time.time(), trial.sim_now()
    census_cut = _cut(trial, plan)
    watch(out_s)
    # 3. Contact back.
    restored_wall, restored_sim = time.time(), trial.sim_now()
    census_back = _restore(trial, plan)
    trial.say(f"contact back after {restored_wall - cut_wall:.0f}s; watching {after_s:.0f}s")
    watch(after_s)
    end_sim = trial.sim_now()

    # 4. Judged on the store at the end.
    trial.final_checks()
    store = trial.last_store or inv.StoreView()
    outage = inv.Outage(
        plan.invariant, plan.what, cut_sim, restored_sim,
        restored_sim + plan.after_min * 60.0, blind_to=plan.kind,
    )  # fmt: skip
    trial.record(inv.outage_harm(outage, store, trial.unhealthy_seen))
    bound = refill_bound(speed)
    before = [s for s in trial.samples if s.at < restored_wall]
    trial.record(inv.below_target(before, bound, start))
    recovery_bound = bound + EXITED_GRACE_S / speed
    status = trial.status() or {}
    said = f"; the engine says {status.get('reason_kind')}: {str(status.get('reason'))[:200]}"
    trial.record(
        [
            inv.Violation(v.invariant, v.subject, v.detail + said, v.at)
            for v in inv.recovered_target(trial.samples, recovery_bound, restored_wall)
        ]
    )
    first_list = None
    if plan.kind == "api" and trial.proxy is not None:
        answered = [(a.at, a.path, a.status) for a in trial.proxy.answers(restored_wall)]
        trial.record(inv.listed_again(restored_wall, answered, LIST_BOUND))
        lists = [at for at, path, status in answered if status == 200 and "/instances" in path]
        first_list = round(min(lists) - restored_wall, 1) if lists else None
    else:
        trial.record(inv.counters_read_again(store, restored_sim))
    took = clean_stop(trial)

    def rel_min(at: float) -> float:
        return round((at - cut_sim) / 60.0, 1)

    decided = [
        {
            "instance": d.instance_id,
            "machine": d.machine_id,
            "kind": d.kind,
            "reason": d.reason[:200],
            "min_after_cut": rel_min(d.at),
            "excused": inv.outage_excuse(d, outage, trial.unhealthy_seen),
        }
        for d in inv.destroys_decided(store)
        if cut_sim <= d.at <= end_sim
    ]
    rents = [
        i for i in store.intents if i.kind == "rent" and i.created_at and cut_sim <= i.created_at
    ]
    return {
        "outage": {
            "kind": plan.kind,
            "mode": plan.mode if plan.kind == "api" else "refuse",
            "simulated_min": plan.minutes,
            "wall_s": round(restored_wall - cut_wall, 1),
            "after_min": plan.after_min,
            "after_wall_s": round(after_s, 1),
            "ready_after_s": round(ready_s, 1),
            "ready": ready,
            "proving_at_cut": at_cut,
            "engine_clock_cut": cut_sim,
            "engine_clock_back": restored_sim,
            "census_at_cut": census_cut,
            "census_at_return": census_back,
        },
        "destroys_from_cut": decided,
        "rents_from_cut": [
            {"min_after_cut": rel_min(i.created_at or cut_sim), "status": i.status} for i in rents
        ],
        "still_proving_at_end": sorted(i.vast_id for i in proving(trial)),
        "first_list_after_return_s": first_list,
        "list_bound_s": LIST_BOUND,
        "recovery_bound_s": round(recovery_bound, 1),
        "engine_log_from_cut": engine_lines(trial, cut_sim),
        "engine_status_at_end": {
            k: status.get(k) for k in ("target", "workers", "by_stage", "reason_kind", "reason")
        },
        "proxy": trial.proxy.stats() if trial.proxy is not None else None,
        "samples": len(trial.samples),
        "sigterm_stop_s": None if took is None else round(took, 2),
    }


def _cut(trial: Trial, plan: OutagePlan) -> dict[str, Any]:
    if plan.kind == "api":
        assert trial.proxy is not None
        trial.set_blind(True)
        trial.proxy.set_mode(plan.mode)
        return {"proxy": trial.proxy.stats()}
    return trial.ssh_switch(True)


def _restore(trial: Trial, plan: OutagePlan) -> dict[str, Any]:
    if plan.kind == "api":
        assert trial.proxy is not None
        trial.proxy.set_mode("pass")
        trial.set_blind(False)
        return {"proxy": trial.proxy.stats()}
    return trial.ssh_switch(False)


# What the engine says when it cannot reach the API or a worker (vastui/engine/engine.py,
# follow.py): counted from the cut on.
ENGINE_LINES = {
    "cannot_list_instances": re.compile(r"cannot list instances"),
    "counters_unavailable": re.compile(r"cuzk counters unavailable"),
    "worker_stream_ended": re.compile(r"worker stream ended"),
    "status_unavailable": re.compile(r"status unavailable"),
    "destroyed": re.compile(r"\bdestroyed \d+ \("),
    "tunnel_down": re.compile(r"tunnel is down"),
    "fleet_wide_failure": re.compile(r"fleet-wide failure: "),
    "provisioning_resumes": re.compile(r"provisioning resumes"),
}
STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)")


def engine_lines(trial: Trial, since: float) -> dict[str, int]:
    """The engine's log lines of each kind stamped at or after ``since`` (engine clock: its log
    lines carry the cloud's simulated time, ISO 8601 UTC, vastui/logfmt.py); unstamped lines
    (a traceback) go with the line before."""
    path = trial.wd.log("engine.log")
    if not path.exists():
        return {}
    counts: Counter[str] = Counter()
    counting = False
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        match = STAMP.match(line)
        if match:
            at = calendar.timegm(time.strptime(match.group(1), "%Y-%m-%dT%H:%M:%S"))
            counting = at >= int(since)
        if not counting:
            continue
        for name, pattern in ENGINE_LINES.items():
            if pattern.search(line):
                counts[name] += 1
    return dict(sorted(counts.items()))
