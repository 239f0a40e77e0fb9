"""The worker side of a simulated cloud, one code path for the demo and `vastui sim serve`.

When the cloud reports an instance running, a sandbox runs the real worker-image scripts behind
an SSH server on the ports the API reports (the proxy endpoint at once, the direct port later,
as Vast does), with the account's keys. On the controller's side stand a Lotus API and curio's
cluster database (a real PostgreSQL, vastsim/harmonydb.py), which the workers reach through the
SSH tunnel the engine opens (config `ssh.lotus_api`, `ssh.curio_db`, `ssh.curio_db_cql`); out on
the internet, the proofshare market (vastsim/proofsvc.py), which they reach directly.

Sandboxes live in `<state dir>/sim/vastui-sim-<owner pid>-*`: the owner's pid lets a later run
stop the workers of one that died without cleaning up.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vastsim.cloud import SimCloud
from vastsim.harmonydb import (
    CURIO_DEFAULT_DATABASE,
    CURIO_DEFAULT_PASSWORD,
    CURIO_DEFAULT_USER,
    SIM_CHAIN_TOKEN,
    SIM_READ_TOKEN,
    ClusterDatabase,
)
from vastsim.lotus import FakeLotus
from vastsim.proofsvc import DemandPolicy, Market
from vastsim.workers import SimWorkerHost, reap_stale_sandboxes
from vastui.config import ensure_state_dir

log = logging.getLogger("vastsim.hosting")

# Hosts go offline while they work for us at the hazard their listed reliability implies
# (vastsim.outages: offline_hazard_per_hour, its ASSUMPTION), scaled by the machine fault
# rate. The engine lets such an instance go and, the machine being free again, may rent it back
# on its measured rate.
# Simulated seconds after running until an instance's direct SSH port is reported; until then
# only Vast's proxy endpoint (ssh_host:ssh_port) is.
DIRECT_SSH_AFTER = (20.0, 120.0)


def host_maintenance(machine_fault_rate: float) -> float:
    """SimCloud's ``host_maintenance`` for a machine fault rate: the scale of each machine's
    outage hazard (vastsim.outages; 1: the demo's, 0: no outages), no longer a chance per
    rental."""
    return max(0.0, machine_fault_rate)


def sandbox_parent() -> Path:
    return ensure_state_dir("sim")  # vastui's state directory and this one: 0700


@dataclass
class WorkerHosts:
    """A cloud's running worker hosts and the controller-side stand-ins."""

    cloud: SimCloud
    host: SimWorkerHost
    lotus: FakeLotus
    db: ClusterDatabase
    sandbox_root: Path

    def controller_addrs(self) -> dict[str, str]:
        """The engine's `[ssh]` addresses of the stand-ins, by config key."""
        return {
            "lotus_api": f"127.0.0.1:{self.lotus.port}",
            "curio_db": f"127.0.0.1:{self.db.port}",
            "curio_db_cql": f"127.0.0.1:{self.db.cql_port}",
        }

    # What the engine's workers need to log in to curio's database (config `[curio] db_user`,
    # `db_name`, and the password file), and what the engine's own cluster reader uses.
    @property
    def curio_db_user(self) -> str:
        return self.db.user

    @property
    def curio_db_name(self) -> str:
        return self.db.database

    @property
    def curio_db_password(self) -> str:
        return self.db.password

    @property
    def market(self) -> Market:
        return self.db.market


@asynccontextmanager
async def worker_hosts(
    cloud: SimCloud,
    *,
    speed: float,
    machine_fault_rate: float = 1.0,
    poll_interval: float = 0.5,
    parent: Path | None = None,
    db_password: str = CURIO_DEFAULT_PASSWORD,
    db_user: str = CURIO_DEFAULT_USER,
    db_name: str = CURIO_DEFAULT_DATABASE,
    snap_share: float = 0.25,
    demand: DemandPolicy | None = None,
    lotus_token: str = "sign",
) -> AsyncIterator[WorkerHosts]:
    """Run ``cloud``'s worker hosts until the block ends; then every sandbox process is killed
    and the sandboxes removed, the cluster's database server stopped and its files removed.
    Call before any instance is created (the proxy-then-direct SSH endpoints are decided at
    create). The cluster's password is curio's own default unless given (a worker without one
    configured sends that). ``demand``: the market's rules (vastsim/demand.py); none, every
    ask is filled."""
    parent = parent or sandbox_parent()
    reaped = reap_stale_sandboxes(parent)
    if reaped:
        log.info("stopped %d worker processes left by a simulated cloud that died", reaped)
    if cloud.direct_ssh_after is None:
        cloud.direct_ssh_after = DIRECT_SSH_AFTER
    async with contextlib.AsyncExitStack() as stack:
        # The owner's pid in the name lets a later run clean up if this one dies uncleanly.
        root = Path(tempfile.mkdtemp(prefix=f"vastui-sim-{os.getpid()}-", dir=parent))
        stack.callback(shutil.rmtree, root, True)
        host = SimWorkerHost(
            cloud, root, speed=speed, machine_fault_rate=machine_fault_rate,
            poll_interval=poll_interval,
        )  # fmt: skip
        host.attach()
        stack.push_async_callback(host.close)
        # the node knows both tokens; the cluster's base layer gives curio the one asked for
        # ("read": proofs computed, no ask or completion ever signed)
        lotus = FakeLotus(tokens=(SIM_CHAIN_TOKEN, SIM_READ_TOKEN))
        await lotus.start()
        stack.push_async_callback(lotus.stop)
        # curio's cluster database, whose base layer names the chain node as the controller
        # sees it
        db = ClusterDatabase(
            user=db_user, password=db_password, database=db_name,
            chain_addr=f"127.0.0.1:{lotus.port}", clock=cloud.clock.now, seed=cloud.seed,
            snap_share=snap_share, demand=demand,
            chain_token=SIM_READ_TOKEN if lotus_token == "read" else SIM_CHAIN_TOKEN,
        )  # fmt: skip
        stack.push_async_callback(db.stop)
        await db.start()
        host.proofsvc_url = db.proofsvc_url  # the sandboxes' SIM_PROOFSVC_URL

        async def controller(name: str, on: bool, _params: dict[str, Any]) -> None:
            """The fleet fault ``controller_down`` (vastsim/fleet.py): the controller's
            Lotus API and curio's database refuse connections, or listen again."""
            if name != "controller_down":
                return
            for service in (lotus, db):
                await (service.go_down() if on else service.come_back())

        cloud.fleet.hooks.append(controller)
        stack.callback(cloud.fleet.hooks.remove, controller)
        if cloud.fleet.on("controller_down"):  # switched on before the hosts started
            await controller("controller_down", True, {})
        yield WorkerHosts(cloud, host, lotus, db, root)


__all__ = [
    "DIRECT_SSH_AFTER",
    "WorkerHosts",
    "host_maintenance",
    "sandbox_parent",
    "worker_hosts",
]
