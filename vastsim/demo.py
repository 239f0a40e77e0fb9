"""The demo's cloud: the demo world's machines and a seeded market, on a scaled clock, and a real
VastClient talking to it in-process (ASGI)."""

from __future__ import annotations

import secrets
from typing import Any

import httpx

from vastsim.app import make_app
from vastsim.clock import ScaledClock
from vastsim.cloud import SimCloud
from vastui.backend import DEMO_SEED
from vastui.vast.client import VastClient

# The demo's world: its machines (ids, hardware, hidden speed and faults) are the same in every
# run, so what vastui learned about a machine stays true; each run's seed draws the market.
DEMO_WORLD_SEED = 7
DEMO_BASE_URL = "http://vast.sim"
DEMO_HOSTS = 400  # ~2,400 offers, ~200 through the default filter


def new_demo_seed() -> int:
    """A market seed for a demo run given none: small enough to type back with --seed."""
    return secrets.randbelow(999_999) + 1


def make_demo_cloud(
    seed: int | None = DEMO_SEED, speed: float = 30.0, *, start: float | None = None, **kwargs: Any
) -> SimCloud:
    """The demo's simulated cloud: the demo world, the market of ``seed`` (None: a new one),
    simulated time from ``start`` (default: now) at ``speed``."""
    kwargs.setdefault("hosts", DEMO_HOSTS)
    kwargs.setdefault("world_seed", DEMO_WORLD_SEED)
    seed = new_demo_seed() if seed is None else seed
    return SimCloud(seed=seed, speed=speed, clock=ScaledClock(speed, start=start), **kwargs)


def client_for_cloud(cloud: SimCloud, **kwargs: Any) -> VastClient:
    """A real VastClient talking to an in-process simulated cloud through ASGI."""
    transport = httpx.ASGITransport(app=make_app(cloud))
    return VastClient(cloud.api_key, DEMO_BASE_URL, transport=transport, **kwargs)
