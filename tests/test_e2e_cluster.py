"""Three workers proving, as the demo runs them (the engine, the simulated cloud, real SSH, the
real worker scripts, the stand-ins rebuilt from curio's and cuzk's source), seen from curio's
cluster: three distinct curio machines, each at the identity its runner id gives it; no worker
connected past its tunnel; a worker whose curio is killed and restarted takes back its own
tasks and none of another's.

No mocks and no sleeps for timing: conditions are waited for with an upper bound only.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
from dataclasses import replace
from pathlib import Path

from tests.helpers import E2E_WORKER_ENV, eventually
from vastui.backend import Options
from vastui.config import Config
from vastui.domain.worker import InstanceRecord
from vastui.engine import identity
from vastui.engine.labels import fleet_id_of
from vastui.engine.runtime import RunOptions, engine_runtime

SPEED = 300.0
LONG = 300.0  # an upper bound only


def begun(text: str) -> set[int]:
    return {int(m) for m in re.findall(r'Beginning work on Task\t\{"id": (\d+)', text)}


def recovered(text: str) -> set[int]:
    return {
        int(m)
        for m in re.findall(r'Beginning work on Task\t\{"id": (\d+), "from": "recovered"', text)
    }


async def test_three_workers_are_three_curio_machines(demo_state: Path) -> None:
    base = Config()
    config = replace(
        base,
        deadlines=replace(
            base.deadlines, paramfetch_min=24 * 60.0, benchmark_min=24 * 60.0, setup_min=600.0
        ),
        fleet=replace(base.fleet, target_workers=3, max_concurrent_benchmarks=3),
        # at 300x curio's 30 min ProveTimeout are 6 real seconds, which a loaded machine's stall
        # alone can pass: what is tested here is the cluster, not the deadline
        curio=replace(base.curio, prove_timeout="4h"),
    )
    opts = Options(config=config, db=demo_state / "fleet.db", demo=True, seed=11, speed=SPEED)
    run = RunOptions(speed=SPEED, seed=11, target_workers=3, machine_fault_rate=0.0)
    async with engine_runtime(opts, run) as rt:
        engine = rt.engine
        engine.settings.worker_env.update(E2E_WORKER_ENV)
        stop = asyncio.Event()
        runner = asyncio.create_task(engine.run(stop))
        try:

            async def three_reporting() -> list[InstanceRecord] | None:
                live = await engine.store.instances.all(include_killed=False)
                proving = [r for r in live if r.state == "proving" and r.curio_info]
                return proving if len(proving) >= 3 else None

            workers = (await eventually(three_reporting, LONG, "three workers proving"))[:3]
            # their identities: unique runner ids, each curio at the address its id gives
            runner_ids = [w.runner_id for w in workers]
            assert None not in runner_ids and len(set(runner_ids)) == 3
            machines = {m["id"]: m for m in rt.cluster.view()["machines"]}
            for w in workers:
                info = json.loads(w.curio_info or "{}")
                listen = identity.curio_listen(w.runner_id or 0)
                assert info["host_and_port"] == info["listen"] == listen
                assert machines[info["machine_id"]]["host_and_port"] == listen
                # the node's name carries the database's fleet id (from its label)
                name = identity.node_name("main", w.runner_id or 0, fleet_id_of(w.label))
                assert machines[info["machine_id"]]["name"] == name
            assert len({json.loads(w.curio_info or "{}")["machine_id"] for w in workers}) == 3
            # nothing past the tunnel: no load balancing, no dial to the cluster's 10.x nodes
            logs = {w.vast_id: rt.demo.sandboxes[w.vast_id].root / "var/log/vastui/curio.log"
                    for w in workers}  # fmt: skip
            for log in logs.values():
                text = log.read_text()
                assert "loadBalance=false" in text and "loadBalance=true" not in text
                assert "unavailableHosts" not in text and "10.0.0." not in text

            # one worker's curio dies while it holds tasks; the worker restarts it as the same
            # machine, which takes back what that machine owns (harmonytask.go:351-389)
            victim, *others = workers
            victim_machine = json.loads(victim.curio_info or "{}")["machine_id"]

            async def holding() -> list[int] | None:
                row = next(m for m in rt.cluster.view()["machines"] if m["id"] == victim_machine)
                return row["claims"] if len(row["claims"]) >= 5 else None

            await eventually(holding, LONG, "the victim holding tasks")
            root = rt.demo.sandboxes[victim.vast_id].root
            # its log so far, read before the kill: the worker restarts its curio within a
            # fraction of a second at 300x, and a log read after the kill could already hold the
            # restart it is meant to be compared with (seen under load: the wait never ended)
            text = logs[victim.vast_id].read_text()
            before_kill = len(text)
            os.kill(int((root / "run" / "curio.pid").read_text()), signal.SIGKILL)

            # what its machine owns in the cluster (a task claimed but not yet begun when it died
            # is owned too, and taken back), read at each poll until it is back: a claim the dead
            # process sent may commit after the kill (it crosses the tunnel's relay first), and
            # only that process or its restart can make a task this machine's
            def victims() -> set[int]:
                with rt.cluster.connect() as conn:  # its claims (the view's, without the rest)
                    rows = conn.execute(
                        "SELECT id FROM harmony_task WHERE owner_id = %s", (victim_machine,)
                    )
                    return {int(r[0]) for r in rows}

            owned = victims()

            async def restarted() -> str | None:
                # curio's restart, and the recovered tasks' first lines: their goroutines log
                # before or after the RPC server's line (cmd/curio/run.go:144-154)
                owned.update(victims())
                rec = await engine.store.instances.get(victim.vast_id)
                assert rec is not None and not rec.killed, (
                    f"the victim was destroyed instead: {rec and rec.kill_reason}"
                )
                now = logs[victim.vast_id].read_text()[before_kill:]
                return now if "Setting up RPC server" in now and recovered(now) else None

            after = await eventually(restarted, LONG, "curio restarted")
            assert [m["id"] for m in rt.cluster.view()["machines"]].count(victim_machine) == 1
            taken = recovered(after)
            # its own tasks: what its machine owned when its curio died (begun or about to be)
            assert taken and taken <= owned and begun(text) & owned
            # ... and none another worker began
            for w in others:
                assert not taken & begun(logs[w.vast_id].read_text())
            rec = await engine.store.instances.get(victim.vast_id)
            assert rec is not None and not rec.killed, "the worker is kept"
        finally:
            stop.set()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(runner, 30)
