"""The engine against the simulated cloud, shared by the engine's tests: a World (a seeded cloud
on a ManualClock shared with the engine), a fresh store, and helpers to rent a worker and feed it
a benchmark result."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from tests.helpers import deploy
from vastsim import ManualClock, SimCloud
from vastsim.demo import client_for_cloud
from vastui.config import Config
from vastui.engine.engine import VANISH_MIN_AGE, VANISH_MISSES, Engine, EngineSettings
from vastui.store import Store
from vastui.vast.client import RetryPolicy, VastClient

PUBKEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEngineTestKeyMaterial000000000000000 vastui"


async def no_sleep(_s: float) -> None:
    return None


class World:
    def __init__(self, tmp: Path, target: int = 0, dry_run: bool = False, db: str = "s.db"):
        self.tmp = tmp
        self.clock = ManualClock()
        self.cloud = SimCloud(seed=7, clock=self.clock, hosts=400)
        self.config = Config()
        self.config = replace(
            self.config,
            fleet=replace(self.config.fleet, target_workers=target, max_concurrent_benchmarks=2),
        )
        self.dry_run = dry_run
        self.db = db

    def client(self) -> VastClient:
        return client_for_cloud(
            self.cloud, pacing={}, sleep=no_sleep, retry=RetryPolicy(create_lookups=2)
        )

    async def engine(self, store: Store, dry_run: bool | None = None) -> Engine:
        return Engine(
            self.config,
            store,
            self.client(),
            ssh=None,
            public_key=PUBKEY,
            clock=self.clock.now,
            settings=EngineSettings(
                dry_run=self.dry_run if dry_run is None else dry_run, offers_refresh=0.0
            ),
        )

    async def until_running(self, engine: Engine) -> None:
        for _ in range(40):
            self.clock.advance(30)
            await engine.step()
            live = await engine.store.instances.all(include_killed=False)
            if live and all(r.state != "loading" for r in live):
                return
        raise AssertionError("instances never left loading")

    async def until_gone(self, engine: Engine, vast_id: int) -> int:
        """Steps (the clock moving on) until the engine records ``vast_id`` vanished: one miss
        in Vast's answers is evidence, not the truth (engine.py VANISH_MISSES, VANISH_MIN_AGE).
        Returns the steps it took."""
        every = VANISH_MIN_AGE / (VANISH_MISSES - 1)
        for n in range(1, 3 * VANISH_MISSES + 1):
            await engine.step()
            rec = await engine.store.instances.get(vast_id)
            if rec is not None and rec.killed:
                return n
            self.clock.advance(every)
        raise AssertionError(f"instance {vast_id} never recorded gone")


async def rent_one(world: World, store: Store) -> tuple[Engine, int]:
    engine = await world.engine(store)
    offers = await engine.refresh_offers(force=True)
    viable = next(r for r in offers if r.viable)
    iid = await deploy(engine, viable.offer.id)
    assert iid is not None
    await world.until_running(engine)
    return engine, iid


async def rent_distinct(world: World, engine: Engine, n: int) -> list[int]:
    """Rent ``n`` viable offers on ``n`` different machines with one engine, until running."""
    ids: list[int] = []
    used: set[int] = set()
    for ranked in [r for r in await engine.refresh_offers(force=True) if r.viable]:
        if len(ids) == n:
            break
        if ranked.offer.machine_id in used:
            continue
        iid = await deploy(engine, ranked.offer.id)
        assert iid is not None
        ids.append(iid)
        used.add(ranked.offer.machine_id)
    assert len(ids) == n, f"only {len(ids)} viable offers on different machines"
    await world.until_running(engine)
    return ids


def result(outcome: str, rate: float | None, tail: list[str] | None = None, stage: str = "done"):
    return {
        "stage": "benchmark",
        "event": "result",
        "result": {
            "outcome": outcome,
            "stage": stage,
            "rate_per_hour": rate,
            "proofs_completed": 3,
            "error_tail": tail or [],
        },
    }
