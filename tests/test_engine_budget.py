"""The money limits of issue 20 on the engine: a daily budget stops rents (and destroys
nothing); an account out of credit is the reason nothing is rented, never a strike or a ban,
and credit added ends it."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import httpx

from tests.enginekit import World
from tests.helpers import eventually
from vastui.alerts import Notifier
from vastui.engine.monitor import Monitor
from vastui.store import Store


async def test_out_of_credit_is_no_credit_not_a_machines_fault(world: World, store: Store):
    world.config = replace(world.config, fleet=replace(world.config.fleet, target_workers=2))
    world.cloud.user["credit"] = 0.0
    engine = await world.engine(store)
    await engine.step()
    assert engine.status is not None and engine.status.reason_kind == "no_credit"
    assert "You lack credit" in (engine.status.reason or "")
    assert engine.credit == 0.0
    assert await store.instances.all(include_killed=True) == []
    assert await store.badlist.strikes() == [] and await store.badlist.all() == []
    # the refused offer stays rentable: the account was at fault, not the machine
    ranked = [r for r in engine._offers if r.viable]
    assert ranked, "the engine's ranking still has its viable offers"
    world.cloud.user["credit"] = 50.0  # the operator pays
    world.clock.advance(30)
    await engine.step()
    assert engine.no_credit is None and engine.credit == 50.0
    assert len(await store.instances.all()) == 1
    assert engine.status is not None and engine.status.reason_kind != "no_credit"


async def test_the_daily_budget_stops_rents_and_destroys_nothing(world: World, store: Store):
    fleet = replace(world.config.fleet, target_workers=3, max_concurrent_benchmarks=3,
                    max_daily_spend=0.5)  # fmt: skip
    world.config = replace(world.config, fleet=fleet)
    engine = await world.engine(store)
    await engine.step()
    first = await store.instances.all()
    assert len(first) == 1  # one rent per step
    # the day goes on (the clock starts at 14:13 UTC): the first worker's bill reaches $0.50
    # (its GPU billed from when it runs, storage while it loads)
    dph = first[0].dph_total or 0.0
    sim = world.cloud.instances[first[0].vast_id]
    world.clock.advance(0.5 / dph * 3600 + (sim.t_running - sim.created_at) + 1)
    await engine.step()
    assert engine.status is not None and engine.status.reason_kind == "daily_budget"
    assert engine.status.reason and "of $0.50 (fleet.max_daily_spend)" in engine.status.reason
    live = await store.instances.all()
    assert [r.vast_id for r in live] == [first[0].vast_id], "nothing rented, nothing destroyed"
    assert not any(r.killed for r in live)


async def test_low_credit_alerts_once_per_episode_and_once_when_it_clears(world, store):
    posts: list[dict[str, object]] = []

    def hook(request: httpx.Request) -> httpx.Response:
        posts.append(json.loads(request.content))
        return httpx.Response(200)

    config = replace(world.config, alerts=replace(world.config.alerts, min_credit=10.0))
    world.config = replace(config, vast=replace(config.vast, credit_poll_s=30.0))
    engine = await world.engine(store)
    notifier = Notifier(webhook="https://hooks.example/x", transport=httpx.MockTransport(hook))
    engine.monitor = Monitor(world.config, notifier=notifier)
    world.cloud.user["credit"] = 5.0
    for _ in range(4):  # one episode over several steps and credit reads
        await engine.step()
        world.clock.advance(60)
    world.cloud.user["credit"] = 80.0
    for _ in range(3):
        await engine.step()
        world.clock.advance(60)
    await notifier.drain()
    await notifier.close()
    assert [(p["alert"], p["state"]) for p in posts] == [
        ("low_credit", "firing"),
        ("low_credit", "resolved"),
    ]
    assert "$5.00 is under the minimum $10.00" in str(posts[0]["summary"])


async def test_a_hook_that_hangs_leaves_the_engine_stepping(world, store, tmp_path):
    config = replace(world.config, alerts=replace(world.config.alerts, min_credit=10.0))
    world.config = config
    engine = await world.engine(store)
    pid_file = tmp_path / "hook.pid"
    notifier = Notifier(
        command=["/bin/sh", "-c", f"echo $$ > {pid_file}; exec sleep 3600"], timeout_s=300
    )
    engine.monitor = Monitor(world.config, notifier=notifier)
    world.cloud.user["credit"] = 5.0
    await engine.step()  # the alert goes to a hook that never answers
    world.clock.advance(60)
    world.cloud.user["credit"] = 0.0
    world.config = replace(world.config, fleet=replace(world.config.fleet, target_workers=1))
    engine.config = world.config
    await engine.step()  # and the engine carries on deciding meanwhile
    assert engine.status is not None and engine.status.reason_kind == "no_credit"
    assert notifier.sent == 0 and not engine.halted
    await eventually(pid_file.exists, what="the hook started")
    pid = int(pid_file.read_text())
    await notifier.close()  # and the engine's stop ends the hook with it

    def gone() -> bool:
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
        except (FileNotFoundError, ProcessLookupError):
            return True

    await eventually(gone, what="the hanging hook killed")


async def test_an_engine_that_stops_itself_sends_its_one_line(world, store):
    posts: list[dict[str, object]] = []

    def hook(request: httpx.Request) -> httpx.Response:
        posts.append(json.loads(request.content))
        return httpx.Response(200)

    engine = await world.engine(store)
    notifier = Notifier(webhook="https://hooks.example/x", transport=httpx.MockTransport(hook))
    engine.monitor = Monitor(world.config, notifier=notifier)
    engine.stop_fatal("store: the database file was replaced under the engine")
    engine.stop_fatal("a second reason is not a second alert")
    await engine.monitor.flush(30)
    await notifier.close()
    assert [(p["alert"], p["state"], p["summary"]) for p in posts] == [
        ("engine_stopped", "firing", "store: the database file was replaced under the engine")
    ]
