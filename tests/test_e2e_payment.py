"""A read-only Lotus token end to end, as the demo runs it: curio proves nothing it was not
asked for, since every ask is signed through the Lotus API (lib/proofsvc/sigs.go:211-242) and
the chain node refuses WalletSign to a token without "sign" (vastsim/lotus.py). The engine
names the payment path as the cause, pauses provisioning and strikes nobody. No sleeps for
timing: conditions are waited for with an upper bound only."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import replace
from pathlib import Path
from typing import Any

from tests.helpers import E2E_WORKER_ENV, e2e_config, eventually
from vastui.backend import Options
from vastui.engine.runtime import RunOptions, engine_runtime

SPEED = 300.0
LONG = 400.0  # an upper bound only


async def test_a_read_only_lotus_token_pauses_provisioning_on_the_payment_path(
    demo_state: Path,
) -> None:
    base = e2e_config()
    config = replace(base, fleet=replace(base.fleet, target_workers=3, max_concurrent_benchmarks=1))
    opts = Options(config=config, db=demo_state / "fleet.db", demo=True, seed=11, speed=SPEED)
    run = RunOptions(speed=SPEED, seed=11, machine_fault_rate=0.0, lotus_token="read")
    async with engine_runtime(opts, run) as rt:
        engine, cluster = rt.engine, rt.cluster
        engine.settings.worker_env.update(E2E_WORKER_ENV)
        stop = asyncio.Event()
        runner = asyncio.create_task(engine.run(stop))
        store = engine.store
        try:

            async def paused() -> Any:
                pause = await store.meta.fleet_failure()
                return pause if pause and pause.get("signature") == "payment_path" else None

            pause = await eventually(paused, LONG, "provisioning paused for the payment path")
            assert "missing permission to invoke 'WalletSign' (need 'sign')" in pause["text"]

            async def said() -> Any:
                status = await store.status.get()
                return status if status and status.reason_kind == "fleet_failure" else None

            status = await eventually(said, LONG, "the status naming it")
            assert "the payment path" in (status.reason or "")
            strikes = await store.badlist.strikes()
            assert [s for s in strikes if s.kind.startswith("prove_")] == [], strikes
            assert not [s for s in strikes if "sign" in s.reason], strikes
            # the market never heard an ask: nothing was computed, nothing paid
            assert cluster.market.stats()["requests"] == 0
        finally:
            stop.set()
            with contextlib.suppress(asyncio.CancelledError):
                await runner
