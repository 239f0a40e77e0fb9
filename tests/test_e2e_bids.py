"""An interruptible worker outbid and resumed, end to end on the simulated cloud: the engine
rents a bid, the worker proves over real SSH with the real scripts; a higher bid stops the
container (its processes killed, its disk kept); when the bid wins again the container starts
afresh, the worker skips the benchmark it passed on this machine, restarts its daemon and curio
as the same cluster machine, and proves again; the engine counts the interruption and strikes
nobody.

No mocks and no sleeps for timing: conditions are waited for with an upper bound only.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import replace
from pathlib import Path

from tests.helpers import E2E_WORKER_ENV, e2e_config, until_instance
from vastsim.bids import BidMarket
from vastui.backend import Options
from vastui.config import Config
from vastui.engine.runtime import RunOptions, engine_runtime

SPEED = 300.0


def events(sandbox: Path) -> list[dict]:
    path = sandbox / "var" / "lib" / "vastui" / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


async def test_an_outbid_worker_resumes_without_a_new_benchmark(demo_state: Path) -> None:
    # generous deadlines at 300x; the outbid the test makes is waited out
    config = e2e_config(bids=replace(Config().bids, mode="auto", keep_outbid_min=24 * 60.0))
    opts = Options(config=config, db=demo_state / "fleet.db", demo=True, seed=1, speed=SPEED)
    run = RunOptions(speed=SPEED, seed=1, target_workers=1, machine_fault_rate=0.0)
    async with engine_runtime(opts, run) as rt:
        engine, cloud = rt.engine, rt.demo.cloud
        cloud.bids = BidMarket(cloud.seed, cloud.now(), 0.0)  # only the test outbids
        engine.settings.worker_env.update(E2E_WORKER_ENV)
        stop = asyncio.Event()
        runner = asyncio.create_task(engine.run(stop))
        try:

            async def proving_bid():
                async with asyncio.timeout(240):
                    while True:
                        for rec in await engine.store.instances.all(include_killed=False):
                            if rec.state == "proving" and rec.is_bid and rec.prod_completed:
                                return rec
                        await asyncio.sleep(0.2)

            rec = await proving_bid()
            iid = rec.vast_id
            runner_id, sim = rec.runner_id, cloud.instances[iid]
            sandbox = rt.demo.sandboxes[iid].root
            assert sum(e["event"] == "result" for e in events(sandbox)) == 1
            floor = sim.bid_floor
            assert rec.bid_cap is not None
            sim.bid_floor = rec.bid_cap * 2  # a bidder over what it may ever pay

            rec = await until_instance(
                engine, iid, lambda r: r.outbid_since is not None, "the outbid"
            )
            assert rec.interruptions == 1 and not rec.killed
            sim.bid_floor = floor  # the bidder leaves: its bid wins again

            rec = await until_instance(
                engine, iid,
                lambda r: r.killed or (r.outbid_since is None and r.state == "proving"
                                       and (r.prod_completed or 0) >= 2),
                "proving again after the resume",
            )  # fmt: skip
            assert not rec.killed, rec.kill_reason
            assert rec.stopped_s > 0 and rec.interruptions == 1
            assert rec.runner_id == runner_id, "the same machine in curio's cluster"
            seen = events(sandbox)
            assert sum(e["event"] == "result" for e in seen) == 1, "no second benchmark"
            resumed = [e for e in seen if e.get("stage") == "benchmark" and e.get("resumed")]
            assert len(resumed) == 1 and resumed[0]["event"] == "ok"
            assert [e["stage"] for e in seen if e["event"] == "start"].count("prove") == 2
            # (an earlier rental may have a strike of its own: a loaded test machine can make a
            # benchmark abort early, as one in a full run of the suite did)
            strikes = await engine.store.badlist.strikes()
            assert not [s for s in strikes if s.instance_id == iid], "an outbid strikes nobody"
            notes = [e.reason for e in await engine.store.events.all(kind="bid")]
            assert any(n.startswith("outbid") for n in notes)
            assert any(n.startswith("resumed after") for n in notes)
        finally:
            stop.set()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(runner, 30)
