"""Wiring shared by the CLI, the console and (later) the engine: config, Vast client, store.

`--demo` means: an in-process simulated Vast cloud, its own database. `--api-url` points the
real client at any Vast-compatible server (a served simulator or console.vast.ai).
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vastui.config import Config, default_db_path, load_api_key

# httpx, the client and the store are imported where they are used: `vastui --help`, `locate`
# or `status` must not pay for what they never touch (bench/startup.py).
if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from vastui.sim import SimCloud
    from vastui.store import Store
    from vastui.vast.client import VastClient

DEMO_SEED = 7
# The demo's world: its machines (ids, hardware, hidden speed and faults) are the same in every
# run, so what vastui learned about a machine stays true; each run's seed draws the market.
DEMO_WORLD_SEED = 7
DEMO_BASE_URL = "http://vast.sim"


@dataclass
class Options:
    """The shared command-line options."""

    config: Config
    db: Path | None = None
    api_url: str | None = None
    demo: bool = False
    seed: int | None = DEMO_SEED  # demo: None draws a new market (new_demo_seed)
    speed: float = 30.0

    @property
    def db_path(self) -> Path:
        return self.db or default_db_path(self.demo)


DEMO_HOSTS = 400  # ~2,400 offers, ~200 through the default filter


def new_demo_seed() -> int:
    """A market seed for a demo run given none: small enough to type back with --seed."""
    import secrets

    return secrets.randbelow(999_999) + 1


def make_demo_cloud(
    seed: int | None = DEMO_SEED, speed: float = 30.0, *, start: float | None = None, **kwargs: Any
) -> SimCloud:
    """The demo's simulated cloud: the demo world, the market of ``seed`` (None: a new one),
    simulated time from ``start`` (default: now) at ``speed``."""
    from vastui.sim import ScaledClock, SimCloud

    kwargs.setdefault("hosts", DEMO_HOSTS)
    kwargs.setdefault("world_seed", DEMO_WORLD_SEED)
    seed = new_demo_seed() if seed is None else seed
    return SimCloud(seed=seed, speed=speed, clock=ScaledClock(speed, start=start), **kwargs)


def client_for_cloud(cloud: SimCloud, **kwargs: Any) -> VastClient:
    """A real VastClient talking to an in-process simulated cloud through ASGI."""
    import httpx

    from vastui.sim import make_app
    from vastui.vast.client import VastClient

    transport = httpx.ASGITransport(app=make_app(cloud))
    return VastClient(cloud.api_key, DEMO_BASE_URL, transport=transport, **kwargs)


def make_client(opts: Options, cloud: SimCloud | None = None) -> VastClient:
    from vastui.vast.client import RetryPolicy, VastClient

    cfg = opts.config
    retry = RetryPolicy(max_attempts=cfg.vast.max_attempts)
    if opts.demo:
        assert cloud is not None
        return client_for_cloud(cloud, retry=retry, timeout=cfg.vast.timeout_s)
    api_key, _source = load_api_key()
    return VastClient(
        api_key, opts.api_url or cfg.vast.api_url, retry=retry, timeout=cfg.vast.timeout_s
    )


@asynccontextmanager
async def open_store(opts: Options, *, write: bool = False) -> AsyncIterator[Store]:
    """The store for a command: one that only reads never creates or migrates the database
    (an engine may be migrating it this moment); one that writes migrates under the lock."""
    from vastui.store import Store, StoreNotCurrent

    try:
        store = await Store.open(opts.db_path, migrate=write)
    except StoreNotCurrent as exc:
        if not exc.absent:
            raise
        # Nothing known yet: empty listings, and no file made behind the engine's back.
        store = await Store.empty(opts.db_path)
    try:
        yield store
    finally:
        await store.close()


@asynccontextmanager
async def open_client(opts: Options) -> AsyncIterator[VastClient]:
    cloud = make_demo_cloud(opts.seed, opts.speed) if opts.demo else None
    client = make_client(opts, cloud)
    try:
        yield client
    finally:
        await client.aclose()
