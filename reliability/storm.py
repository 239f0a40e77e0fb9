"""`python -m reliability storm`: one failure on every machine (a broken image or input).

The served cloud's fleet faults (vastsim/fleet.py, ``PUT``/``DELETE /_sim/faults/<name>``)
make every machine rented while one is on fail alike: ``bench_input_broken`` (default; every
benchmark fails cuzk's self-check with the same lines, ids differing) or ``image_missing``
(the instance stays loading with the registry's pull error until the engine's loading
deadline, 30 simulated minutes). One engine, target 3, no machine faults, the light API
profile. The fault goes on before the engine starts (``--onset before``), or as soon as its
first rent intent is written (``--onset renting``: that first worker is sound; when it passes
its benchmark it ends a pause while the fault is still on, and the engine pauses again at the
next failure).

The engine gives every kill that would strike or ban a failure signature
(vastui/engine/fleetwide.py); the same one on ``fleet.fleet_failure_machines`` (3) machines
within ``fleet.fleet_failure_window_min`` (60) pauses provisioning (``fleet_failure``), takes
back the earlier victims' strikes and automatic bans and charges nobody while paused. The trial
waits for the pause (``--pause-hours``), watches it with the fault on for ``--hold-min`` and
until the instances rented while the fault was on are gone (at most ``--settle-hours``), turns
the fault off and runs ``vastui resume`` on the engine's database (if still paused), as an
operator would once the image is fixed; then the fleet must be back at its target, proving,
within ``--ready-hours``, and is watched ``--after-min`` more. Besides the soak's invariants
(no orphan, no double rent from the cloud's ledger, every destroy recorded; ``ban_missing``
with the fleet's declared victims excused, and only they):

* ``storm_overrun``: at most ``fleet_failure_machines`` machines failed with the signature up
  to each pause (from the end of the one before); later victims were in flight;
* ``storm_blame``: at the end no strike and no automatic ban on a machine for that signature;
* ``storm_pause``: paused at all within the bound; while paused and below target the engine's
  status says ``fleet_failure`` with the signature; no rent intent written while paused;
* ``storm_recovery``: ``vastui resume`` succeeds; the fleet is listed at its target within the
  refill bound of the resume and proving within ``--ready-hours``; no pause after the resume.

That one machine's fault still bans it is the soak's ``ban_missing`` (machine faults on, no
fleet-wide excuse there: a pause declared on machine faults leaves their bans missing).
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass, replace
from typing import Any

import httpx

from reliability import invariants as inv
from reliability.crash import clean_stop
from reliability.observe import read_store
from reliability.outage import engine_lines, fleet_proving, proving
from reliability.procs import SIM_KEY, venv_bin
from reliability.soak import Watch
from reliability.trial import Trial, refill_bound
from vastui.config import FleetSection

FAULTS = ("bench_input_broken", "image_missing")
MACHINES = FleetSection().fleet_failure_machines  # the engine's default (not overridden here)


@dataclass
class StormPlan:
    fault: str = "bench_input_broken"
    onset: str = "before"  # before | renting
    pause_hours: float = 4.0  # simulated hours allowed to reach the pause
    hold_min: float = 30.0  # simulated minutes the pause is watched with the fault on
    settle_hours: float = 2.0  # ... and at most this long for the in-flight victims to go
    ready_hours: float = 8.0  # after the resume: simulated hours allowed to prove at target
    after_min: float = 30.0  # simulated minutes watched once proving at target again


def fleet_fault(trial: Trial, name: str, on: bool) -> dict[str, Any]:
    """Switch one of the cloud's fleet faults (``PUT``/``DELETE /_sim/faults/<name>``)."""
    assert trial.sim is not None
    url = f"{trial.sim.url.rstrip('/')}/_sim/faults/{name}"
    headers = {"Authorization": f"Bearer {SIM_KEY}"}
    if on:
        resp = httpx.put(url, json={"on": True}, headers=headers, timeout=30.0)
    else:
        resp = httpx.request("DELETE", url, json={}, headers=headers, timeout=30.0)
    resp.raise_for_status()
    data = resp.json()
    return data.get("faults", {}) if isinstance(data, dict) else {}


def resume(trial: Trial) -> subprocess.CompletedProcess[str]:
    """``vastui resume`` on the engine's database, as the operator would run it."""
    cmd = [str(venv_bin("vastui")), "resume", "--db", str(trial.wd.db)]
    cmd += ["--config", str(trial.wd.config)]
    return subprocess.run(
        cmd, capture_output=True, text=True, env=trial.wd.env(), timeout=60, check=False
    )


def episodes(trial: Trial) -> list[inv.Episode]:
    return inv.pause_episodes(trial.last_store or inv.StoreView())


def first_rent(trial: Trial) -> bool:
    """The engine wrote a rent intent (its database read read-only)."""
    store = read_store(trial.wd.db)
    return store is not None and any(i.kind == "rent" for i in store.intents)


def judged(found: list[inv.Episode], resumed_sim: float | None) -> list[inv.Episode]:
    """The episodes with the operator's resume dated on the engine's clock (``vastui resume``
    stamps its event with the wall clock: the trial knows when it ran it)."""
    out = []
    for e in found:
        if resumed_sim is not None and e.ended and e.ended.startswith("cleared by the operator"):
            e = replace(e, ended_at=resumed_sim)
        out.append(e)
    return out


def run(trial: Trial, plan: StormPlan) -> dict[str, Any]:
    speed = trial.opts.speed
    walls = {
        "pause": plan.pause_hours * 3600.0 / speed,
        "hold": plan.hold_min * 60.0 / speed,
        "settle": plan.settle_hours * 3600.0 / speed,
        "ready": plan.ready_hours * 3600.0 / speed,
        "after": plan.after_min * 60.0 / speed,
    }
    bound = refill_bound(speed)
    trial.say(
        f"storm: {plan.fault} on {plan.onset} the first rent; pause expected by the "
        f"{MACHINES}th machine within {plan.pause_hours:g} simulated hours ({walls['pause']:.0f}s)"
    )
    fault_on: dict[str, float] = {}

    def switch_on() -> None:
        fleet_fault(trial, plan.fault, True)
        fault_on.update(wall=time.time(), sim=trial.sim_now())
        trial.say(f"fleet fault {plan.fault} on")

    if plan.onset == "before":
        switch_on()
    trial.start_engine()
    if not trial.wait_lease():
        trial.record([inv.Violation("restart_refused", "start", "the engine took no lease")])
    start = time.time()
    watch = Watch(trial, start)
    if plan.onset == "renting":
        # The first rent intent written: its create may have gone out sound, the next not.
        # (A tight look at the store: the engine rents one offer per search, 2.5 s apart.)
        deadline = time.monotonic() + walls["pause"]
        while time.monotonic() < deadline and not first_rent(trial):
            time.sleep(0.1)
        switch_on()

    # 1. The storm, until the pause.
    paused = watch(walls["pause"], until=lambda: bool(episodes(trial)))
    store = trial.last_store or inv.StoreView()
    if not paused:
        sigs = sorted({v.signature for v in inv.victims(store)})
        trial.record(
            [
                inv.Violation(
                    "storm_pause", "pause",
                    f"no fleet_failure pause within {plan.pause_hours:g} simulated hours of "
                    f"{plan.fault}; signatures recorded: {sigs[:5]}",
                )
            ]
        )  # fmt: skip
        return _finish(trial, plan, fault_on, start, None, None, bound, walls)
    episode = episodes(trial)[0]
    pause_wall = time.time()
    trial.say(
        f"paused after {pause_wall - start:.0f}s: {episode.signature!r} on machines "
        f"{list(episode.machines)}"
    )

    # 2. The pause, the fault still on: its status, no rents; the in-flight victims go. (With
    # --onset renting a sound worker may pass its benchmark meanwhile and end the pause: the
    # engine rents into the storm again, and pauses again at the next failure.)
    def judge_pause() -> None:
        store = trial.last_store or inv.StoreView()
        trial.confirm("pause_status", inv.pause_status(trial.status(), store.pause))

    def in_flight() -> list[int]:
        """Live instances rented while the fault was on, not proving (none of them can)."""
        s = trial.last_store or inv.StoreView()
        rents = inv.rented_at(s)
        return [
            i.vast_id
            for i in s.instances
            if not i.killed and rents.get(i.vast_id, 0.0) >= fault_on["sim"]
            and i.state != "proving"
        ]  # fmt: skip

    watch(walls["hold"], each=judge_pause)
    settled = watch(walls["settle"], until=lambda: not in_flight(), each=judge_pause)
    if not settled:
        trial.say(f"instances rented during the fault still live: {in_flight()}; resuming anyway")

    # 3. The fault fixed; the operator resumes (if still paused: a pass may have ended it).
    fleet_fault(trial, plan.fault, False)
    trial.observe()
    still = (trial.last_store or inv.StoreView()).pause is not None
    resumed_wall, resumed_sim = time.time(), trial.sim_now()
    done = resume(trial) if still else subprocess.CompletedProcess([], 0, "not paused", "")
    trial.say(f"fault off; `vastui resume`: status {done.returncode}: {done.stdout.strip()[:200]}")
    if done.returncode != 0:
        trial.record(
            [inv.Violation("storm_recovery", "vastui resume",
                           f"status {done.returncode}: {(done.stderr or done.stdout)[-300:]}")]
        )  # fmt: skip
    resume_info = {
        "wall_after_start_s": round(resumed_wall - start, 1),
        "engine_clock": resumed_sim,
        "ran": still,
        "status": done.returncode,
        "output": (done.stdout or done.stderr).strip()[:300],
        "in_flight_left": in_flight(),
    }
    return _finish(
        trial, plan, fault_on, start, episode, (resumed_wall, resumed_sim, resume_info), bound,
        walls,
    )  # fmt: skip


def _finish(
    trial: Trial,
    plan: StormPlan,
    fault_on: dict[str, float],
    start: float,
    episode: inv.Episode | None,
    resumed: tuple[float, float, dict[str, Any]] | None,
    bound: float,
    walls: dict[str, float],
) -> dict[str, Any]:
    watch = Watch(trial, start)
    recovered_s = None
    if resumed is not None:
        resumed_wall, resumed_sim, _ = resumed
        ok = watch(walls["ready"], until=lambda: fleet_proving(trial))
        recovered_s = round(time.time() - resumed_wall, 1) if ok else None
        if not ok:
            trial.record(
                [inv.Violation("storm_recovery", "proving",
                               f"{len(proving(trial))} of {trial.target} workers proving "
                               f"{plan.ready_hours:g} simulated hours after the resume")]
            )  # fmt: skip
        watch(walls["after"])
    else:
        fleet_fault(trial, plan.fault, False)
    trial.final_checks()
    store = trial.last_store or inv.StoreView()
    found = judged(episodes(trial), resumed[1] if resumed is not None else None)
    if episode is not None and resumed is not None:
        resumed_wall, resumed_sim, _ = resumed
        spans = inv.paused_spans(found, trial.sim_now())
        trial.record(inv.storm_overrun(store, found, MACHINES))
        for sig in sorted({e.signature for e in found}):
            trial.record(inv.storm_blame(store, sig))
        trial.record(inv.rents_while_paused(store, spans))
        trial.record(inv.recovered_target(trial.samples, bound, resumed_wall))
        trial.record(
            [
                inv.Violation(
                    "storm_recovery", f"pause at {e.paused_at - resumed_sim:.0f}s",
                    f"paused again after the resume: {e.signature[:120]}",
                )
                for e in found
                if e.paused_at > resumed_sim
            ]
        )  # fmt: skip
        if store.pause is not None:
            trial.record(
                [inv.Violation("storm_recovery", "pause at the end",
                               f"still paused: {str(store.pause.get('text'))[:160]}")]
            )  # fmt: skip
    took = clean_stop(trial)
    status = trial.status() or {}
    since = fault_on.get("sim", trial.sim_now())

    def rel(at: float) -> float:
        return round((at - since) / 60.0, 1)

    rents = inv.rented_at(store)
    return {
        "fault": plan.fault,
        "onset": plan.onset,
        "fleet_failure_machines": MACHINES,
        "fault_on_after_start_s": round(fault_on["wall"] - start, 1) if fault_on else None,
        "pause": None
        if episode is None
        else {
            "signature": episode.signature,
            "machines": list(episode.machines),
            "instances": list(episode.instances),
            "sim_min_after_fault_on": rel(episode.paused_at),
        },
        "episodes": [
            {
                "signature": e.signature[:160],
                "sim_min_after_fault_on": rel(e.paused_at),
                "machines": list(e.machines),
                "ended": e.ended,
                "ended_min_after_fault_on": None if e.ended_at is None else rel(e.ended_at),
            }
            for e in found
        ],
        "victims": [
            {
                "instance": v.instance_id,
                "machine": v.machine_id,
                "signature": v.signature[:160],
                "decided_min_after_fault_on": rel(v.decided_at),
                "charged_when_decided": v.charged,
                "rented_min_after_fault_on": rel(rents[v.instance_id])
                if v.instance_id in rents
                else None,
            }
            for v in inv.victims(store)
        ],
        "rents_min_after_fault_on": sorted(
            rel(i.created_at) for i in store.intents if i.kind == "rent" and i.created_at
        ),
        "resume": resumed[2] if resumed is not None else None,
        "recovered_after_resume_s": recovered_s,
        "still_proving_at_end": sorted(i.vast_id for i in proving(trial)),
        "strikes_at_end": len(store.strike_rows),
        "bans_at_end": [
            {"machine": b.machine_id, "source": b.source, "reason": b.reason[:120]}
            for b in store.ban_rows
        ],
        "engine_log": engine_lines(trial, 0.0),
        "engine_status_at_end": {
            k: status.get(k) for k in ("target", "workers", "by_stage", "reason_kind", "reason")
        },
        "walls_s": {k: round(v, 1) for k, v in walls.items()},
        "refill_bound_s": round(bound, 1),
        "samples": len(trial.samples),
        "sigterm_stop_s": None if took is None else round(took, 2),
    }
