"""The fleet bench's CPU meter counts the measured coroutine's own resumes and queries, not the
work other tasks do meanwhile (bench/owncpu.py). Time is a counter the test moves: no clock."""

from __future__ import annotations

import asyncio

import aiosqlite
import pytest

from bench.owncpu import Meter, install_sql_meter, measured


class Ticks:
    """A CPU clock that moves only when a task says it worked."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def work(self, seconds: float) -> None:
        self.now += seconds


async def test_only_the_measured_coroutines_resumes_count() -> None:
    ticks = Ticks()
    meter = Meter(clock=ticks)
    gate = asyncio.Event()

    async def neighbour() -> None:
        for _ in range(5):
            ticks.work(10.0)  # a follower's work between the step's resumes
            await asyncio.sleep(0)
        gate.set()

    async def step() -> str:
        ticks.work(1.0)
        await asyncio.sleep(0)
        ticks.work(2.0)
        await gate.wait()
        ticks.work(0.5)
        return "done"

    other = asyncio.create_task(neighbour())
    assert await measured(step(), meter) == "done"
    await other
    assert meter.main == pytest.approx(3.5)
    assert ticks.now == pytest.approx(53.5)


async def test_an_error_and_a_cancellation_pass_through() -> None:
    meter = Meter(clock=Ticks())

    async def fails() -> None:
        await asyncio.sleep(0)
        raise KeyError("x")

    with pytest.raises(KeyError):
        await measured(fails(), meter)
    started = asyncio.Event()

    async def waits() -> None:
        started.set()
        await asyncio.Event().wait()

    task = asyncio.create_task(measured(waits(), meter))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_sql_counts_only_the_measured_tasks_queries(tmp_path) -> None:
    install_sql_meter()
    install_sql_meter()  # idempotent: not wrapped twice
    async with aiosqlite.connect(tmp_path / "m.db") as conn:
        await conn.execute("CREATE TABLE t (x)")
        heavy = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 300000)"
        meter = Meter()

        async def others() -> None:
            await conn.execute(heavy + " SELECT sum(i) FROM n")

        async def mine() -> None:
            await conn.execute("INSERT INTO t VALUES (1)")

        await others()
        await measured(mine(), meter)
        assert (meter.queries, meter.sql > 0.0) == (1, True)  # its own query, timed
        # The neighbour's query, sent while the measured task runs, is not its own; nor is a
        # query of a task the measured one started (it inherits the measured context).
        meter = Meter()

        async def mine_with_neighbours() -> None:
            spawned = asyncio.create_task(others())
            await asyncio.gather(others(), spawned)
            await conn.execute("INSERT INTO t VALUES (2)")

        await measured(mine_with_neighbours(), meter)
        assert meter.queries == 1
