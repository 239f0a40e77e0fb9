"""The engine and curio's cluster end to end, as the demo runs them (the engine, the simulated
cloud, real SSH, the real worker scripts, the stand-in curio on a real PostgreSQL):

* workers go on proving when the controller's SSH connections (their tunnels) drop and come
  back;
* a lowered target drains the worker it gives up (cordoned, destroyed once it holds no task or
  at its drain's deadline) and frees what it held: no task stays owned by its machine;
* a worker whose curio fails every PSProve while cuzk counts its proofs done (a GPU whose Snap
  proofs do not verify: cuzk self-checks PoRep only) is destroyed with curio's own line.

No mocks and no sleeps for timing: conditions are waited for with an upper bound only.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from tests.helpers import E2E_WORKER_ENV, eventually
from vastsim import sshd
from vastui.backend import Options
from vastui.config import Config
from vastui.domain.worker import InstanceRecord
from vastui.engine.runtime import RunOptions, engine_runtime

SPEED = 300.0
LONG = 300.0  # an upper bound only


def e2e_config(target: int) -> Config:
    base = Config()
    return replace(
        base,
        deadlines=replace(
            base.deadlines, paramfetch_min=24 * 60.0, benchmark_min=24 * 60.0, setup_min=600.0
        ),
        fleet=replace(base.fleet, target_workers=target, max_concurrent_benchmarks=target),
        # at 300x curio's 30 min ProveTimeout are 6 real seconds, which a loaded machine's stall
        # alone can pass: what is tested here is the cluster, not the deadline
        curio=replace(base.curio, prove_timeout="4h"),
    )


def owned_by(view: dict[str, Any], machine_id: int) -> list[int]:
    return [t["id"] for t in view["tasks"] if t.get("owner_id") == machine_id]


async def test_a_lowered_target_drains_the_surplus_and_frees_what_it_held(
    demo_state: Path,
) -> None:
    config = e2e_config(2)
    opts = Options(config=config, db=demo_state / "fleet.db", demo=True, seed=11, speed=SPEED)
    run = RunOptions(speed=SPEED, seed=11, target_workers=2, machine_fault_rate=0.0)
    async with engine_runtime(opts, run) as rt:
        engine, cluster = rt.engine, rt.cluster
        engine.settings.worker_env.update(E2E_WORKER_ENV)
        stop = asyncio.Event()
        runner = asyncio.create_task(engine.run(stop))
        try:

            async def two_read() -> list[InstanceRecord] | None:
                live = await engine.store.instances.all(include_killed=False)
                read = [
                    r for r in live
                    if r.state == "proving" and r.curio_info and r.cluster_state
                    and json.loads(r.cluster_state).get("machine_id") is not None
                ]  # fmt: skip
                return read if len(read) >= 2 else None

            workers = await eventually(
                two_read, LONG, "two workers proving, read in curio's cluster"
            )
            # the controller's SSH connections drop and come back (an engine restart): each
            # worker's tunnel ends anew (a sandbox's forward on a new port) and curio, which
            # reconnects to the same address, goes on proving
            dropped_at = engine.clock()
            assert await sshd.refuse_connections(True) == 2  # every live one dropped ...
            await sshd.refuse_connections(False)  # ... and listening again
            addrs = {json.loads(w.curio_info or "{}")["host_and_port"] for w in workers}

            async def proving_again() -> bool:
                after = [h for h in cluster.view()["history"] if h["work_end"] > dropped_at]
                proved = {
                    h["completed_by_host_and_port"] for h in after
                    if h["result"] and h["name"] == "PSProve"
                }  # fmt: skip
                # and the proofs go on being submitted (PShareSubmit signs through the Lotus
                # tunnel, whose end also moved)
                submitted = any(h["result"] and h["name"] == "PShareSubmit" for h in after)
                return addrs <= proved and submitted

            await eventually(
                proving_again, LONG, "both workers' curio proving and submitting after the drop"
            )
            lowered = replace(engine.config, fleet=replace(engine.config.fleet, target_workers=1))
            engine.config = engine.acts.config = lowered

            async def cordoned() -> Any:
                events = await engine.store.events.all(kind="cordoned")
                return events or None

            [event] = await eventually(cordoned, LONG, "a worker cordoned")
            victim = event.instance_id
            machine = int(event.detail["curio_machine"])
            row = next((m for m in cluster.view()["machines"] if m["id"] == machine), None)
            assert row is None or row["unschedulable"] is True  # (gone: drained already)

            async def released() -> InstanceRecord | None:
                rec = await engine.store.instances.get(victim)
                return rec if rec is not None and rec.killed and rec.released_at else None

            rec = await eventually(released, LONG, "the drained worker destroyed and released")
            assert rec.kill_kind == "surplus"
            assert "(drained: " in (rec.kill_reason or "") or "drain deadline passed" in (
                rec.kill_reason or ""
            ), rec.kill_reason
            assert rec.drain_started_at is not None and rec.drain_deadline is not None
            # holding tasks, it is never destroyed before its deadline (how long after it is the
            # loaded machine's step time, not the engine's decision: no bound on that here)
            if "drain deadline passed" in (rec.kill_reason or ""):
                assert (rec.killed_at or 0) >= rec.drain_deadline
            view = cluster.view()
            assert owned_by(view, machine) == [], "a destroyed worker's machine owns no task"
            assert machine not in {m["id"] for m in view["machines"]}, "its row is deleted"
            released = [
                e for e in await engine.store.events.all(kind="tasks_released")
                if e.instance_id == victim
            ]  # fmt: skip
            assert len(released) == 1 and released[0].detail["curio_machine"] == machine
            destroys = [
                e for e in await engine.store.events.all(kind="destroy") if e.instance_id == victim
            ]  # fmt: skip
            assert len(destroys) == 1
            assert len(await engine.store.events.all(kind="cordoned")) == 1  # one drain
            live = await engine.store.instances.all(include_killed=False)
            every = await engine.store.instances.all()
            assert [r.state for r in live] == ["proving"] and live[0].drain_started_at is None, [
                (r.vast_id, r.state, r.kill_kind, r.kill_reason) for r in every
            ]
        finally:
            stop.set()
            with contextlib.suppress(asyncio.CancelledError):
                await runner


async def test_curio_failing_every_proof_cuzk_finished_destroys_the_worker_with_its_line(
    demo_state: Path,
) -> None:
    config = e2e_config(1)
    opts = Options(config=config, db=demo_state / "fleet.db", demo=True, seed=11, speed=SPEED)
    run = RunOptions(speed=SPEED, seed=11, target_workers=1, machine_fault_rate=0.0)
    async with engine_runtime(opts, run) as rt:
        engine, cluster = rt.engine, rt.cluster
        engine.settings.worker_env.update(E2E_WORKER_ENV)
        # every machine's GPU makes Snap proofs that do not verify; the market sends only Snap
        for m in rt.demo.cloud.machines:
            rt.demo.fault_overrides[m.machine_id] = "snap_invalid"
        cluster.market.snap_share = 1.0
        stop = asyncio.Event()
        runner = asyncio.create_task(engine.run(stop))
        try:

            async def killed() -> InstanceRecord | None:
                for rec in await engine.store.instances.all():
                    if rec.killed and rec.kill_kind == "prove_curio_failing":
                        return rec
                return None

            rec = await eventually(killed, LONG, "the worker destroyed for curio's failures")
            assert "proof check failed: invalid UpdateProof" in (rec.kill_reason or "")
            assert rec.error_lines and "invalid UpdateProof" in rec.error_lines[0]
            # cuzk counted those proofs as done: only curio's count could tell
            state = json.loads(rec.cluster_state or "{}")
            assert state.get("done", 0) == 0 and state.get("failed", 0) >= 3
            # its strike (an earlier rental of the machine may have one of its own: a loaded
            # test machine can make a benchmark abort early)
            strikes = await engine.store.badlist.strikes(rec.machine_id)
            assert [s.kind for s in strikes if s.instance_id == rec.vast_id] == [
                "prove_curio_failing"
            ]
        finally:
            stop.set()
            with contextlib.suppress(asyncio.CancelledError):
                await runner
