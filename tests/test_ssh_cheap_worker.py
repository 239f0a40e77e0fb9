"""The cheap stand-in workers (`vastsim.cheap`, for benchmarks at fleet scale) speak the
worker protocol over real SSH as vastui's own client reads it: status, the event stream with
its line positions, cuzk counters the production parser accepts, logs (sanitised: cuzk's lines
carry colour codes) that end after the asked number of lines."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import asyncssh
import pytest

from vastsim import ManualClock, SimCloud
from vastsim.cheap import CheapScript, CheapWorkerHost, PortRange
from vastui.engine.production import Reading
from vastui.ssh import MemoryPins, SshPool, Worker


@pytest.fixture
async def worker(tmp_path: Path) -> AsyncIterator[Worker]:
    clock = ManualClock()
    cloud = SimCloud(seed=3, hosts=5, clock=clock)
    script = CheapScript(stage_gap=0.0, progress_every=None, log_total=1000, log_rate=None)
    host = CheapWorkerHost(cloud, tmp_path, script=script, poll_interval=3600.0)
    host.attach()
    key = asyncssh.generate_private_key("ssh-ed25519")
    cloud.ssh_add({"ssh_key": key.export_public_key().decode()})
    offer_id = cloud.available_offers[0]["id"]
    iid = cloud.create(offer_id, {"image": "img", "env": {"MIN_RATE": "20"}})["new_contract"]
    clock.advance(3600)
    await cloud.tick()  # running: its SSH server starts
    pool = SshPool(client_key=key, pins=MemoryPins())
    try:
        yield pool.worker(iid, ("127.0.0.1", cloud.instance(iid).ssh_port))  # type: ignore[union-attr]
    finally:
        await pool.close_all()
        await host.close()


async def test_status_and_the_lifecycle_events_in_order(worker: Worker) -> None:
    assert (await worker.status())["image"]["name"] == "img"
    seen = []
    async with contextlib.aclosing(worker.positioned_events()) as events:
        async for position, event in events:
            seen.append((position, event.stage, event.event))
            if event.stage == "benchmark" and event.event == "result":
                assert event.result is not None and event.result.outcome == "pass"
                assert (event.result.rate_per_hour or 0) >= 20  # above its MIN_RATE
            if len(seen) == 10:
                break
    assert [p for p, _, _ in seen] == list(range(1, 11))
    assert seen[0][1:] == ("setup", "start") and seen[-1][1:] == ("prove", "progress")
    # resumed after a position: nothing twice
    async with contextlib.aclosing(worker.positioned_events(after=8)) as events:
        position, event = await anext(events)
    assert (position, event.stage, event.event) == (9, "prove", "start")


async def test_counters_parse_as_a_live_daemon_once_proving(worker: Worker) -> None:
    async with contextlib.aclosing(worker.positioned_events()) as events:
        async for _, event in events:
            if event.stage == "prove":
                break
    for _ in range(100):  # the worker's timeline reaches production right after prove start
        reading = Reading.parse(await worker.cuzk_counters())
        if reading.alive:
            break
    assert reading.alive and reading.completed is not None and reading.completed >= 13


async def test_logs_are_sanitised_and_end_after_the_asked_lines(worker: Worker) -> None:
    lines = [line async for line in worker.logs("cuzk", follow=False, tail=3)]
    assert len(lines) == 3 and all("\x1b" not in line and " INFO " in line for line in lines)
    total = 0
    async with contextlib.aclosing(worker.log_batches("cuzk", keep=100)) as batches:
        async for batch in batches:
            total += len(batch) + batch.skipped
            assert batch.ahead and len(batch) <= 100
    assert total == 1000  # the script's log_total: shown or counted as skipped


def test_ports_are_handed_out_below_the_ephemeral_range() -> None:
    ports = PortRange(start=21_000, end=21_010)
    got = [ports() for _ in range(3)]
    assert got == sorted(set(got)) and all(21_000 <= p < 21_010 for p in got)
