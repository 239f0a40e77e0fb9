"""The automatic target end to end, as the demo runs it (the engine, the simulated cloud, real
SSH, the real worker scripts, the stand-in curio on a real PostgreSQL, the proofshare market
with finite work, vastsim/demand.py): the market's work steps up and the target rises with its
reason; it stops and the target falls, the worker given up drained and stopped into the warm
pool; the work comes back and the pooled worker proves again, without a new rental.

The market's curve is switched by the test at conditions (a worker proving, the target risen),
not at clock times: a loaded machine runs the engine's steps late in simulated time. No sleeps
for timing: conditions are waited for with an upper bound only.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import replace
from pathlib import Path
from typing import Any

from tests.helpers import E2E_WORKER_ENV, e2e_config, eventually
from vastsim.demand import parse_curve
from vastui.backend import Options
from vastui.domain.engine_state import EngineStatus
from vastui.domain.worker import InstanceRecord
from vastui.engine.drain import worker_rate
from vastui.engine.runtime import RunOptions, engine_runtime

SPEED = 300.0
LONG = 400.0  # an upper bound only


def set_demand(cluster: Any, spec: str, now: float) -> None:
    market = cluster.market
    with market.lock:
        market.policy.set_curve(parse_curve(spec), now)


def changes(store: Any, direction: str) -> Any:
    """A check for ``eventually``: the target's changes in one direction, or None."""

    async def check() -> Any:
        found = [e for e in await store.events.all(kind="target")
                 if e.detail.get("direction") == direction]  # fmt: skip
        return found or None

    return check


async def test_the_target_follows_the_markets_work_up_and_down(demo_state: Path) -> None:
    base = e2e_config()
    config = replace(
        base,
        fleet=replace(
            base.fleet, auto_target=True, min_workers=1, max_workers=2,
            max_concurrent_benchmarks=2, scale_down_after_min=5.0,
        ),
    )  # fmt: skip
    opts = Options(config=config, db=demo_state / "fleet.db", demo=True, seed=11, speed=SPEED)
    run = RunOptions(
        speed=SPEED, seed=11, target_workers="auto", machine_fault_rate=0.0, demand="steady:2"
    )
    async with engine_runtime(opts, run) as rt:
        engine, cluster = rt.engine, rt.cluster
        engine.settings.worker_env.update(E2E_WORKER_ENV)
        stop = asyncio.Event()
        runner = asyncio.create_task(engine.run(stop))
        store = engine.store
        try:

            async def proving(n: int) -> list[InstanceRecord] | None:
                live = await store.instances.all(include_killed=False)
                done = [r for r in live if r.state == "proving" and r.drain_started_at is None]
                return done if len(done) >= n else None

            await eventually(lambda: proving(1), LONG, "the first worker proving")
            assert (await store.status.get()).target == 1, "a trickle: min_workers"
            set_demand(cluster, "steady:3000", engine.clock())

            [up, *_] = await eventually(changes(store, "up"), LONG, "the target raised")
            assert up.reason.startswith("work waits: ") and up.reason.endswith("target 1 → 2")
            assert up.detail["unclaimed"] > 0
            await eventually(lambda: proving(2), LONG, "a second worker proving")
            set_demand(cluster, "steady:0", engine.clock())

            [down, *_] = await eventually(changes(store, "down"), LONG, "the target lowered")
            assert down.reason.startswith("workers idle: ") and down.reason.endswith("→ 1")

            async def given_up() -> InstanceRecord | None:
                gone = [r for r in await store.instances.all(include_killed=True)
                        if (r.killed and r.kill_kind == "surplus") or r.pooled_since]  # fmt: skip
                return gone[0] if gone else None

            rec = await eventually(given_up, LONG, "the surplus worker stopped or destroyed")
            # a proving worker given up is drained first (cordoned), then stopped into the warm
            # pool if its rate pays (pool.keep: a loaded host's slower world can measure it
            # below its min_rate, and then it is destroyed); one still setting up (a
            # replacement for a failed benchmark) holds no work and is destroyed at once
            cordoned = [e.instance_id for e in await store.events.all(kind="cordoned")]
            if rec.proving_at is not None:
                assert rec.vast_id in cordoned, rec
                rate = worker_rate(rec)
                if rate is not None and rate >= (rec.min_rate or 0.0):
                    assert rec.pooled_since is not None, rec
                    assert rt.demo.cloud.instances[rec.vast_id].intended == "stopped"
                else:
                    assert rec.killed and rec.kill_kind == "surplus", rec
            else:
                assert rec.drain_started_at is None and "not proving" in (rec.kill_reason or "")
            # nobody struck in production for the work the market did not send (a benchmark
            # that fails its machine's min_rate is the machine's, whatever the demand)
            strikes = await store.badlist.strikes()
            assert [s for s in strikes if s.kind.startswith("prove_")] == [], strikes
            # the status is published once per step: the act that pooled the worker may end
            # before the step that decided it publishes

            async def settled() -> EngineStatus | None:
                status = await store.status.get()
                return status if status.target == 1 else None

            status = await eventually(settled, LONG, "the status at target 1")
            assert status.cluster["autoscale"]["target"] == 1
            if rec.pooled_since is None:
                return
            # the work comes back: the pooled worker starts again, its parameters and its
            # benchmark found on its disk, and proves (no new rental for it)
            rents = len(await store.intents.all(kind="rent"))
            set_demand(cluster, "steady:3000", engine.clock())

            async def warm_again() -> InstanceRecord | None:
                again = await store.instances.get(rec.vast_id)
                ok = again is not None and again.pooled_since is None and again.state == "proving"
                return again if ok else None

            again = await eventually(warm_again, LONG, "the pooled worker proving again")
            assert again.pooled_s > 0
            pool_events = await store.events.all(kind="pool")
            started = [
                e for e in pool_events
                if e.instance_id == rec.vast_id and e.reason.startswith("started")
            ]  # fmt: skip
            assert started, "started from the warm pool"
            assert len(await store.intents.all(kind="rent")) == rents, "no rental for it"
        finally:
            stop.set()
            with contextlib.suppress(asyncio.CancelledError):
                await runner
