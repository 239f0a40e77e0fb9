"""What vastui counts a worker's spend at equals what the simulated cloud billed it, bandwidth
included (issue 30, "every cost counted"): the demo's whole world (the engine, the cloud, real
SSH, the worker scripts, curio's stand-in on a real PostgreSQL). The cloud meters the bytes the
container's stand-ins move (its interface counters) and bills them at the offer's $/GB, storage
while it loads and the GPU once it runs; vastui counts from what it can know (the parameters'
fetch, curio's tasks for the worker, the first listing that shows it running).

No mocks and no sleeps for timing: conditions are waited for with an upper bound only.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import replace
from pathlib import Path

from tests.helpers import E2E_WORKER_ENV, eventually
from tests.test_e2e_drain import LONG, SPEED, e2e_config
from vastui.backend import Options
from vastui.domain.plan import PARAMS_GB
from vastui.domain.worker import InstanceRecord
from vastui.engine import spend
from vastui.engine.runtime import RunOptions, engine_runtime


async def test_a_workers_spend_is_what_the_cloud_billed_it_bandwidth_included(
    demo_state: Path,
) -> None:
    config = e2e_config(1)
    opts = Options(config=config, db=demo_state / "fleet.db", demo=True, seed=5, speed=SPEED)
    run = RunOptions(speed=SPEED, seed=5, target_workers=1, machine_fault_rate=0.0)
    async with engine_runtime(opts, run) as rt:
        engine, cloud = rt.engine, rt.demo.cloud
        engine.settings.worker_env.update(E2E_WORKER_ENV)
        # PoRep requests only: vastui counts each request at a PoRep's size (a SnapDeals one is
        # smaller: there its count is a ceiling, tested in tests/test_spend.py)
        rt.cluster.market.snap_share = 0.0
        stop = asyncio.Event()
        runner = asyncio.create_task(engine.run(stop))
        try:

            async def proved() -> InstanceRecord | None:
                for rec in await engine.store.instances.all(include_killed=False):
                    state = json.loads(rec.cluster_state or "{}")
                    if rec.state == "proving" and state.get("done_total", 0) >= 3:
                        return rec
                return None

            rec = await eventually(proved, LONG, "a worker with three proofs in curio's cluster")
            charge = cloud.charges[rec.vast_id]
            assert charge.rx_bytes >= PARAMS_GB * 1e9  # the parameters came over its link
            # manual mode (nothing more rented), and the operator destroys the worker
            manual = replace(engine.config, fleet=replace(engine.config.fleet, target_workers=0))
            engine.config = engine.acts.config = manual
            await engine.store.commands.submit("destroy", {"instance_id": rec.vast_id})
            engine.wake()

            async def gone() -> InstanceRecord | None:
                got = await engine.store.instances.get(rec.vast_id)
                return got if got is not None and got.killed else None

            done = await eventually(gone, LONG, "the worker destroyed")
            billed = cloud.charges[done.vast_id]
            assert rec.vast_id not in cloud.instances
            counted = spend.instance_cost(done, engine.clock())
            bandwidth = spend.bandwidth_cost(done, engine.clock())
            assert billed.bw_down > 0 and bandwidth > 0
            assert abs(bandwidth - (billed.bw_down + billed.bw_up)) < 0.01, (bandwidth, billed)
            assert abs(counted - billed.amount) < 0.01, (counted, billed)
            # the API's row says the same (GET /api/v0/charges/)
            [row] = [r for r in cloud.charges_list()["results"]
                     if r["source"] == f"instance-{done.vast_id}"]  # fmt: skip
            assert abs(row["amount"] - billed.amount) < 1e-5
        finally:
            stop.set()
            with contextlib.suppress(asyncio.CancelledError):
                await runner
