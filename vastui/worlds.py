"""The simulated world behind ``--demo`` and ``vastui sim serve``, found by its entry point.

vastui never imports the simulator (``vastsim/``, beside it in the same distribution): the
simulator registers a ``World`` under the entry-point group ``vastui.worlds`` (pyproject.toml),
and vastui asks for it by name. So the dependency points one way (vastsim imports vastui's
public types), and an install without the simulator runs everything but the demo.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from vastui.vast.client import VastClient

GROUP = "vastui.worlds"
SIMULATOR = "sim"


class WorldMissing(RuntimeError):
    """No simulated world is installed (or its entry point does not load)."""


class WorldError(RuntimeError):
    """The world cannot do what was asked (a port taken, no worker scripts): one line."""


@dataclass(frozen=True)
class DemoRequest:
    """What a demo run asks of its world."""

    seed: int | None  # the market's (None: a new one, logged)
    speed: float  # simulated seconds per second
    machine_fault_rate: float  # machine faults and host outages, scaled (1: the demo's)
    after_id: int  # instance ids above every id this database has seen (Vast's only grow)
    start: float  # the world's time starts here (after this database's latest)
    demand: str = "unlimited"  # the market's work: "unlimited" or a curve (the world parses it)
    new_wallet: bool = False  # the provider starts with no work slots
    lotus_token: str = "sign"  # the chain node's token curio gets: "sign", or "read" only


@dataclass
class DemoWorld:
    """A running demo world: the Vast API, its clock, the controller's end of its workers."""

    client: VastClient  # a real client, to the world's Vast API
    clock: Callable[[], float]  # the world's time (the engine times deadlines on it)
    controller: dict[str, str]  # lotus_api, curio_db, curio_db_cql: addresses on loopback
    db_user: str  # curio's cluster database, as the workers reach it
    db_password: str
    db_name: str
    hosts: Any  # the world's own handles, for tests: its worker hosts
    cluster_db: Any  # and its cluster database


@dataclass(frozen=True)
class ServeRequest:
    """`vastui sim serve`: the world over HTTP."""

    seed: int
    speed: float
    api_key: str
    faults: str
    machine_fault_rate: float
    bid_pressure: float
    list_lag: float
    port: int
    workers: bool
    write_config: Path | None
    demand: str = "unlimited"  # the market's work: "unlimited" or a curve (the world parses it)
    new_wallet: bool = False  # the provider starts with no work slots
    lotus_token: str = "sign"  # the chain node's token curio gets: "sign", or "read" only


class World(Protocol):
    """What a simulated world offers vastui."""

    def client(self, seed: int | None, speed: float, **client_kwargs: Any) -> VastClient:
        """A client to a fresh world's Vast API alone (no workers): the CLI's ``--demo``."""
        ...

    def demo(self, request: DemoRequest) -> AbstractAsyncContextManager[DemoWorld]:
        """The whole world for a demo run, torn down (every process, every file) on exit."""
        ...

    def serve(self, request: ServeRequest) -> None:
        """Serve the world over HTTP until SIGTERM or SIGINT; WorldError for one line."""
        ...

    def check_demand(self, demand: str, new_wallet: bool) -> None:
        """WorldError (one line) if the world cannot run this market (``DemoRequest.demand``
        and ``new_wallet``): asked before a demo starts anything."""
        ...


def load_world(name: str = SIMULATOR) -> World:
    """The installed world ``name``, or WorldMissing naming what to install."""
    from importlib.metadata import entry_points

    found = entry_points(group=GROUP, name=name)
    if not found:
        raise WorldMissing(
            f"no simulated world {name!r} is installed (entry point group {GROUP}): "
            "install vastui with its simulator (pip install -e .) to run the demo"
        )
    try:
        factory = next(iter(found)).load()
        world: World = factory()
    except Exception as exc:  # a broken install: one line, not a traceback
        raise WorldMissing(f"the simulated world {name!r} does not load: {exc}") from exc
    return world
