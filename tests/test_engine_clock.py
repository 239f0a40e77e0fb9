"""Durations on a clock that never steps (vastui/engine/clock.py): a wall clock stepped 2 h
forward and 2 h back destroys, strikes and bans nothing. The engine's clocks are injected: the
world's ManualClock is the monotonic truth, the wall clock is it plus a step."""

from __future__ import annotations

import logging
from collections.abc import Callable

from tests.enginekit import PUBKEY, World, rent_distinct
from vastui.engine.clock import STEP_TOLERANCE_S, SteadyClock
from vastui.engine.engine import Engine, EngineSettings
from vastui.store import Store

HOURS_2 = 2 * 3600.0


def test_the_steady_clock_moves_with_the_monotonic_clock_and_notes_each_step(caplog) -> None:
    wall, mono = [1_790_000_000.0], [50.0]
    clock = SteadyClock(wall=lambda: wall[0], monotonic=lambda: mono[0])
    caplog.set_level(logging.WARNING, "vastui.engine.clock")
    assert clock() == 1_790_000_000.0
    mono[0] += 10
    wall[0] += 10 + STEP_TOLERANCE_S / 2  # NTP-sized drift: not a step
    assert clock() == 1_790_000_010.0 and caplog.records == []
    wall[0] += HOURS_2  # a step forward
    mono[0] += 5
    assert clock() == 1_790_000_015.0
    assert clock() == 1_790_000_015.0  # (noted once)
    wall[0] -= 2 * HOURS_2  # and back, past where it was
    assert clock() == 1_790_000_015.0
    steps = [r.getMessage() for r in caplog.records]
    assert len(steps) == 2, steps
    assert "stepped +7" in steps[0] and "stepped -14" in steps[1]


async def _engine(world: World, store: Store, clock: Callable[[], float]) -> Engine:
    return Engine(
        world.config, store, world.client(), ssh=None, public_key=PUBKEY, clock=clock,
        settings=EngineSettings(offers_refresh=0.0),
    )  # fmt: skip


async def _step_the_wall(world: World, store: Store, steady: bool) -> list[str]:
    """Two workers in their pipeline, then the wall clock 2 h forward, a step, 2 h back, a
    step. Returns the kill kinds recorded."""
    offset = [0.0]

    def wall() -> float:
        return world.clock.now() + offset[0]

    clock = SteadyClock(wall=wall, monotonic=world.clock.now) if steady else wall
    engine = await _engine(world, store, clock)
    try:
        await rent_distinct(world, engine, 2)
        assert all(not r.killed for r in await store.instances.all(include_killed=True))
        for step in (HOURS_2, -HOURS_2):
            offset[0] += step
            world.clock.advance(30)
            await engine.step()
    finally:
        await engine.close()
    return [r.kill_kind or "" for r in await store.instances.all(include_killed=True) if r.killed]


async def test_a_wall_clock_stepped_2h_forward_and_back_destroys_strikes_and_bans_nothing(
    world: World, store: Store, caplog
) -> None:
    caplog.set_level(logging.WARNING, "vastui.engine.clock")
    assert await _step_the_wall(world, store, steady=True) == []
    assert await store.badlist.strikes() == []
    assert await store.badlist.all(now=world.clock.now()) == []
    assert [e.kind for e in await store.events.all() if e.kind in ("kill", "destroy")] == []
    steps = [r.getMessage() for r in caplog.records if "wall clock stepped" in r.getMessage()]
    assert len(steps) == 2, "each step is logged once"


async def test_the_same_steps_on_the_raw_wall_clock_would_destroy(world: World, store: Store):
    """The hazard is real in this world: judged on the wall clock, the step forward expires
    the workers' deadlines at once."""
    kinds = await _step_the_wall(world, store, steady=False)
    assert kinds and all(k.startswith("deadline_") for k in kinds), kinds
