"""The simulator as vastui's ``World`` (vastui/worlds.py): registered under the entry point
group ``vastui.worlds`` (pyproject.toml), so that vastui runs its demo and ``sim serve`` without
importing this package."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from vastsim.cloud import SimCloud
from vastsim.demand import (
    ESTABLISHED_BALANCE,
    DemandError,
    FiniteDemand,
    parse_curve,
    rivals_for,
)
from vastsim.demo import client_for_cloud, make_demo_cloud
from vastsim.hosting import host_maintenance, worker_hosts
from vastsim.server import ListenError, ServeOptions, run_server
from vastui.vast.client import VastClient
from vastui.worlds import DemoRequest, DemoWorld, ServeRequest, WorldError

log = logging.getLogger("vastui.engine")


def demo_cloud(request: DemoRequest) -> SimCloud:
    """The demo's cloud for a request: the market of its seed (logged, so that the run can be
    reproduced), ids and time after the asking database's."""
    cloud = make_demo_cloud(
        request.seed, request.speed, start=request.start, instance_ids_after=request.after_id,
        host_maintenance=host_maintenance(request.machine_fault_rate),
    )  # fmt: skip
    log.info(
        "demo market seed %d (run it again with --seed %d); instance ids above %d",
        cloud.seed, cloud.seed, request.after_id,
    )  # fmt: skip
    return cloud


class SimWorld:
    """The simulated Vast cloud with its worker hosts and the controller's stand-ins."""

    def client(self, seed: int | None, speed: float, **client_kwargs: Any) -> VastClient:
        return client_for_cloud(make_demo_cloud(seed, speed), **client_kwargs)

    def check_demand(self, demand: str, new_wallet: bool) -> None:
        try:
            market_demand(demand, 0, new_wallet)
        except DemandError as exc:
            raise WorldError(str(exc)) from None

    @asynccontextmanager
    async def demo(self, request: DemoRequest) -> AsyncIterator[DemoWorld]:
        self.check_demand(request.demand, request.new_wallet)  # before the cloud logs its seed
        cloud = demo_cloud(request)
        # The worker hosts and the controller's stand-ins, as `vastui sim serve` runs them.
        demand = market_demand(request.demand, cloud.seed, request.new_wallet)
        async with worker_hosts(
            cloud, speed=request.speed, machine_fault_rate=request.machine_fault_rate,
            demand=demand, lotus_token=request.lotus_token,
        ) as hosts:  # fmt: skip
            client = client_for_cloud(cloud, pacing={})
            try:
                yield DemoWorld(
                    client=client,
                    clock=cloud.clock.now,
                    controller=hosts.controller_addrs(),
                    db_user=hosts.db.user,
                    db_password=hosts.db.password,
                    db_name=hosts.db.database,
                    hosts=hosts.host,
                    cluster_db=hosts.db,
                )
            finally:
                await client.aclose()

    def serve(self, request: ServeRequest) -> None:
        cloud = make_demo_cloud(
            request.seed, request.speed, api_key=request.api_key, faults=request.faults,
            host_maintenance=(
                host_maintenance(request.machine_fault_rate) if request.workers else 0.0
            ),
            bid_pressure=request.bid_pressure,
        )  # fmt: skip
        cloud.list_lag_s = request.list_lag
        try:
            demand = market_demand(request.demand, request.seed, request.new_wallet)
        except DemandError as exc:
            raise WorldError(str(exc)) from None
        serve = ServeOptions(
            demand=demand,
            lotus_token=request.lotus_token,
            port=request.port,
            workers=request.workers,
            machine_fault_rate=request.machine_fault_rate,
            write_config=request.write_config,
        )
        try:
            run_server(cloud, serve)
        except ListenError as exc:  # e.g. the port is taken: one line, not uvicorn's traceback
            raise WorldError(str(exc)) from None
        except FileNotFoundError as exc:  # no worker-image scripts beside the package
            raise WorldError(f"{exc} (serve the API alone with --no-workers)") from None


def market_demand(spec: str, seed: int, new_wallet: bool) -> FiniteDemand | None:
    """The market's rules for a ``--demand`` spec (None: unlimited, every ask filled)."""
    if spec.strip() == "unlimited":
        if new_wallet:
            raise DemandError("--new-wallet needs a finite --demand (slots mean nothing unlimited)")
        return None
    balance = 0 if new_wallet else ESTABLISHED_BALANCE
    curve = parse_curve(spec)
    # the priced market (issue 43): rivals sized to the curve, a price that moves
    return FiniteDemand(curve, seed=seed, balance=balance, rivals=rivals_for(curve, seed))


def world() -> SimWorld:
    """The entry point's factory."""
    return SimWorld()
