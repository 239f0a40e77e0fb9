"""Wiring shared by the CLI, the console and (later) the engine: config, Vast client, store.

`--demo` means: an in-process simulated Vast cloud (vastui/worlds.py finds it), its own
database. `--api-url` points the real client at any Vast-compatible server (a served simulator
or console.vast.ai).
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from vastui.config import Config, default_db_path, load_api_key

# httpx, the client and the store are imported where they are used: `vastui --help`, `locate`
# or `status` must not pay for what they never touch (bench/startup.py).
if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from vastui.store import Store
    from vastui.vast.client import VastClient

DEMO_SEED = 7  # the demo's market, unless --seed says otherwise


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


def make_client(opts: Options) -> VastClient:
    """The Vast client for a command: Vast's API (or any at ``--api-url``), or with ``--demo`` a
    fresh simulated world's (vastui/worlds.py)."""
    from vastui.vast.client import RetryPolicy, VastClient

    cfg = opts.config
    retry = RetryPolicy(max_attempts=cfg.vast.max_attempts)
    if opts.demo:
        from vastui.worlds import load_world

        return load_world().client(opts.seed, opts.speed, retry=retry, timeout=cfg.vast.timeout_s)
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
    client = make_client(opts)
    try:
        yield client
    finally:
        await client.aclose()
