"""A stand-in for the curio cluster's database (YugabyteDB: YSQL on 5433, YCQL on 9042) on the
controller, for the demo and the tests. Workers reach it through the SSH tunnel, as they reach
the Lotus API.

It keeps what the workers meet in (curio @ e0294b0f; file names below are relative to it):

* ``harmony_config``: the config layers, with a ``base`` layer whose ``[Apis]`` name the
  controller's chain node (harmony/harmonydb/sql/20230919-config.sql);
* ``harmony_machines``: one row per curio node, upserted by ``host_and_port``, which is NOT
  unique: two nodes that register the same host:port share one row and one machine id
  (harmony/resources/resources.go:81-99); rows whose heartbeat is older than 10 minutes are
  deleted at every registration (resources.go:22, 121-129);
* ``harmony_machine_details``: the node's name, task types and layers (cmd/curio/tasks/
  tasks.go:731-748, ON CONFLICT (machine_id));
* ``harmony_task`` and ``harmony_task_history``: task claims (``owner_id``) and their results,
  with harmonytask's semantics: a claim sets ``owner_id`` only where it is NULL
  (harmony/harmonytask/task_type_handler.go:165-181); a node that starts takes back every task
  whose ``owner_id`` is its machine id (harmonytask.go:351-389); a result deletes the task, a
  failure clears the owner and counts a retry, MaxFailures ends it
  (task_type_handler.go:405-495);
* ``proofshare_queue``: the market's requests (PoRep C2 and SnapDeals, tasks/proofshare/
  task_prove.go:271-289); the PShareRequest singleton that fills it (task_request.go) is played
  by the database itself: it keeps a backlog of unclaimed PSProve tasks, in a seeded mix of both
  kinds. A proof stored for a task another node already finished updates nothing (task_prove.go
  ``UPDATE proofshare_queue ... WHERE compute_task_id = $2`` → "no task found"): work done twice.

The cluster's topology is what a production cluster looks like from the controller: three
tservers on its private network (``yb_servers()``, which YugabyteDB's smart driver reads for load
balancing: yugabyte/pgx load_balance.go ``LB_QUERY``). A worker that dials those addresses
instead of the tunnel cannot reach them. ``nodes=("127.0.0.1",)`` is the single-node set-up of
curio's documentation/en/setup.md:57 (``yugabyted start --advertise_address 127.0.0.1``).

The YSQL wire protocol is JSON lines, spoken only by the stand-in ``curio``
(``vastui/sim/standins/curio``); the YCQL port speaks the real CQL native protocol
(``vastui/sim/ycql.py``).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import random
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from vastui.sim.fleet import hold_port

log = logging.getLogger("vastui.sim.harmonydb")

# A JWT-shaped token: lotus only takes the "TOKEN:" prefix of an API info for one
# (deps/apiinfo_parse_curio.go).
SIM_CHAIN_TOKEN = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJBbGxvdyI6WyJyZWFkIl19.c2ltLXNpZ25hdHVyZQ"
LOOKS_DEAD_S = 600.0  # harmony/resources/resources.go:22 LOOKS_DEAD_TIMEOUT
PSPROVE_MAX_FAILURES = 20  # tasks/proofshare/task_prove.go TypeDetails MaxFailures
PSPROVE = "PSProve"  # tasks/tasknames
# A production cluster's tservers, as yb_servers() and system.local/peers advertise them.
DEFAULT_NODES: tuple[str, ...] = ("10.0.0.5", "10.0.0.6", "10.0.0.7")
MAX_LINE = 1 << 20


def base_layer(chain_addr: str, token: str = SIM_CHAIN_TOKEN) -> str:
    host, _, port = chain_addr.rpartition(":")
    secret = base64.b64encode(b"simulated-storage-rpc-secret-0001").decode()
    return (
        "[Apis]\n"
        f'  ChainApiInfo = ["{token}:/ip4/{host}/tcp/{port}/http"]\n'
        f'  StorageRPCSecret = "{secret}"\n'
    )


@dataclass
class Machine:
    id: int
    host_and_port: str
    cpu: int
    ram: int
    gpu: float
    last_contact: float
    unschedulable: bool = False
    # harmony_machine_details
    name: str | None = None
    tasks: str | None = None
    layers: str | None = None
    startup_time: float | None = None


@dataclass
class Task:
    id: int
    name: str
    posted_time: float
    update_time: float
    owner_id: int | None = None
    retries: int = 0


@dataclass
class Request:
    """A proofshare_queue row: one market request."""

    service_id: int
    kind: str  # "porep" or "snap"
    miner: int
    sector: int
    obtained_at: float
    compute_task_id: int | None = None
    compute_done: bool = False


@dataclass
class History:
    task_id: int
    name: str
    posted: float
    work_start: float
    work_end: float
    result: bool
    completed_by_host_and_port: str
    err: str


@dataclass
class Cluster:
    """The tables, and the operations curio runs on them (one at a time: the server is one
    asyncio loop, as a transaction would serialise them)."""

    clock: Callable[[], float]
    snap_share: float = 0.25
    backlog: int = 4  # unclaimed PSProve tasks the market keeps ready
    seed: int = 0
    machines: dict[int, Machine] = field(default_factory=dict)
    tasks: dict[int, Task] = field(default_factory=dict)
    requests: dict[int, Request] = field(default_factory=dict)
    history: list[History] = field(default_factory=list)
    wasted: list[dict[str, Any]] = field(default_factory=list)  # proofs nobody could store
    _next_machine: int = 1
    _next_task: int = 1000
    _next_request: int = 1

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed * 7907 + 11)

    # -- harmony_machines -------------------------------------------------------------

    def register(self, host_and_port: str, cpu: int, ram: int, gpu: float) -> int:
        """resources.go:81-99: UPDATE ... WHERE host_and_port = $1 RETURNING id, else INSERT;
        the first id wins; then CleanupMachines (resources.go:121-129)."""
        now = self.clock()
        same = [m for m in self.machines.values() if m.host_and_port == host_and_port]
        for m in same:
            m.cpu, m.ram, m.gpu, m.last_contact = cpu, ram, gpu, now
        if same:
            machine_id = same[0].id
        else:
            machine_id = self._next_machine
            self._next_machine += 1
            self.machines[machine_id] = Machine(machine_id, host_and_port, cpu, ram, gpu, now)
        for m in list(self.machines.values()):
            if m.last_contact < now - LOOKS_DEAD_S:
                del self.machines[m.id]
        return machine_id

    def details(self, machine_id: int, name: str, tasks: str, layers: str) -> None:
        m = self.machines.get(machine_id)
        if m is not None:
            m.name, m.tasks, m.layers, m.startup_time = name, tasks, layers, self.clock()

    def heartbeat(self, machine_id: int) -> None:
        m = self.machines.get(machine_id)
        if m is not None:
            m.last_contact = self.clock()

    # -- harmony_task -----------------------------------------------------------------

    def owned(self, machine_id: int) -> list[dict[str, Any]]:
        """harmonytask.go:357-365: the tasks a starting node takes back."""
        return [asdict(t) for t in self.tasks.values() if t.owner_id == machine_id]

    def claim(self, machine_id: int, name: str, limit: int) -> list[dict[str, Any]]:
        """task_type_handler.go:165-181: owner_id set where it is NULL, oldest first; a task
        that failed waits its RetryWait (10 s x retries, task_prove.go TypeDetails)."""
        if name == PSPROVE:
            self._fill_market()
        now = self.clock()
        free = sorted(
            (
                t
                for t in self.tasks.values()
                if t.name == name and t.owner_id is None and t.update_time + 10 * t.retries <= now
            ),
            key=lambda t: (t.posted_time, t.id),
        )
        taken = free[: max(0, limit)]
        for t in taken:
            t.owner_id = machine_id
        return [asdict(t) for t in taken]

    def request_of(self, task_id: int) -> dict[str, Any] | None:
        for r in self.requests.values():
            if r.compute_task_id == task_id:
                return asdict(r)
        return None

    def store_proof(self, task_id: int, host_and_port: str) -> int:
        """task_prove.go Do: ``UPDATE proofshare_queue SET ... compute_task_id = NULL WHERE
        compute_task_id = $2``: 0 rows when another node stored this task's proof first."""
        n = 0
        for r in self.requests.values():
            if r.compute_task_id == task_id:
                r.compute_task_id, r.compute_done = None, True
                n += 1
        if n == 0:
            self.wasted.append({"task_id": task_id, "host_and_port": host_and_port})
        return n

    def complete(
        self, task_id: int, done: bool, err: str, work_start: float, host_and_port: str
    ) -> str | None:
        """recordCompletion (task_type_handler.go:405-495); an error text when the task row is
        gone (another node completed it): "could not log completion"."""
        t = self.tasks.get(task_id)
        if t is None:
            return "could not log completion: no rows in result set "
        if done or t.retries >= PSPROVE_MAX_FAILURES - 1:
            del self.tasks[task_id]
        else:
            t.owner_id, t.retries, t.update_time = None, t.retries + 1, self.clock()
        self.history.append(
            History(task_id, t.name, t.posted_time, work_start, self.clock(), done,
                    host_and_port, "" if done else f"error: {err}")
        )  # fmt: skip
        return None

    def still_owned(self, task_id: int, machine_id: int) -> bool:
        t = self.tasks.get(task_id)
        return t is not None and t.owner_id == machine_id

    def _fill_market(self) -> None:
        """The PShareRequest singleton's job: requests from the market become PSProve tasks
        (task_request.go:81-120 creates the task and sets compute_task_id)."""
        now = self.clock()
        ready = sum(1 for t in self.tasks.values() if t.name == PSPROVE and t.owner_id is None)
        for _ in range(max(0, self.backlog - ready)):
            task = Task(self._next_task, PSPROVE, now, now)
            self._next_task += 1
            self.tasks[task.id] = task
            kind = "snap" if self._rng.random() < self.snap_share else "porep"
            req = Request(
                self._next_request, kind, self._rng.randint(1000, 99999),
                self._rng.randint(1, 9999), now, compute_task_id=task.id,
            )  # fmt: skip
            self._next_request += 1
            self.requests[req.service_id] = req

    # -- for tests and the console ----------------------------------------------------

    def view(self) -> dict[str, Any]:
        """The cluster as curio's web UI would show it: machines with their claims, results."""
        machines = []
        for m in sorted(self.machines.values(), key=lambda m: m.id):
            claims = sorted(t.id for t in self.tasks.values() if t.owner_id == m.id)
            machines.append({**asdict(m), "claims": claims})
        return {
            "machines": machines,
            "tasks": [asdict(t) for t in sorted(self.tasks.values(), key=lambda t: t.id)],
            "history": [asdict(h) for h in self.history],
            "wasted": list(self.wasted),
        }


class FakeHarmonyDb:
    def __init__(
        self,
        *,
        user: str = "yugabyte",
        password: str = "yugabyte",
        database: str = "yugabyte",
        chain_addr: str = "127.0.0.1:1234",
        nodes: Sequence[str] = DEFAULT_NODES,
        clock: Callable[[], float] = time.time,
        snap_share: float = 0.25,
        seed: int = 0,
    ) -> None:
        self.user = user
        self.password = password
        self.database = database
        self.nodes = tuple(nodes)
        self.layers: dict[str, str] = {"base": base_layer(chain_addr)}
        self.cluster = Cluster(clock=clock, snap_share=snap_share, seed=seed)
        self.auth_failures = 0
        self._servers: list[asyncio.Server] = []
        self._handlers: set[asyncio.Task[Any]] = set()
        self.ycql: Any = None
        self.port = 0
        self.cql_port = 0
        self.host = "127.0.0.1"
        self._held: list[socket.socket] = []  # down: both ports, bound, not listening

    async def start(self, host: str = "127.0.0.1") -> tuple[int, int]:
        from vastui.sim.ycql import FakeYcql

        self.host = host
        ysql = await asyncio.start_server(self._handle, host, 0, limit=MAX_LINE)
        self._servers = [ysql]
        self.port = ysql.sockets[0].getsockname()[1]
        self.ycql = FakeYcql(rpc_address=self.nodes[0], peers=self.nodes[1:])
        self.cql_port = await self.ycql.start(host)
        return self.port, self.cql_port

    @property
    def down(self) -> bool:
        return bool(self._held)

    async def go_down(self) -> None:
        """The cluster is down (the fleet fault ``controller_down``): YSQL and YCQL drop their
        connections and refuse new ones, their ports held so that no other server takes them
        (vastui/sim/fleet.py ``hold_port``); the tables are kept for when it comes back."""
        if not self._servers or self._held:
            return
        await self._close_ysql()
        if self.ycql is not None:
            await self.ycql.stop()  # the same tables when it listens again
        self._held = [hold_port(self.host, self.port), hold_port(self.host, self.cql_port)]

    async def come_back(self) -> None:
        """Listen again on the same ports."""
        held, self._held = self._held, []
        if not held:
            return
        try:
            ysql = await asyncio.start_server(self._handle, self.host, self.port, limit=MAX_LINE)
            self._servers = [ysql]
            if self.ycql is not None:
                await self.ycql.start(self.host, self.cql_port)
        finally:
            for sock in held:
                sock.close()

    async def _close_ysql(self) -> None:
        for server in self._servers:
            server.close()
        for task in list(self._handlers):
            task.cancel()
        for task in list(self._handlers):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for server in self._servers:
            with contextlib.suppress(Exception):
                await server.wait_closed()
        self._servers = []

    async def stop(self) -> None:
        await self._close_ysql()
        for sock in self._held:
            sock.close()
        self._held = []
        if self.ycql is not None:
            await self.ycql.stop()
            self.ycql = None

    def view(self) -> dict[str, Any]:
        return self.cluster.view()

    def _track(self) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
            task.add_done_callback(self._handlers.discard)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._track()
        authed = False
        try:
            while line := await reader.readline():
                try:
                    request = json.loads(line)
                except ValueError:
                    break
                if not isinstance(request, dict):
                    break
                if request.get("op") == "auth":
                    authed = (
                        request.get("user") == self.user
                        and request.get("password") == self.password
                        and request.get("database") == self.database
                    )
                    if not authed:
                        self.auth_failures += 1
                        user = request.get("user")
                        answer: dict[str, Any] = {
                            "error": f'password authentication failed for user "{user}"'
                        }
                    else:
                        answer = {"ok": True}
                elif not authed:
                    answer = {"error": "not authenticated"}
                else:
                    try:
                        answer = self._query(request)
                    except (KeyError, TypeError, ValueError) as exc:
                        answer = {"error": f"bad request: {type(exc).__name__}: {exc}"}
                writer.write((json.dumps(answer) + "\n").encode())
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        except asyncio.CancelledError:
            # stop() cancels open connections: end quietly, or Python 3.11's stream callback
            # logs the cancelled handler task as an error.
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    def _query(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request.get("op")
        c = self.cluster
        if op == "get_layer":
            return {"config": self.layers.get(str(request.get("title")))}
        if op == "set_layer":
            title = str(request.get("title") or "")
            self.layers[title] = str(request.get("config") or "")
            log.info("layer %s created/updated", title)
            return {"ok": True}
        if op == "list_layers":
            return {"titles": sorted(self.layers)}
        if op == "yb_servers":
            # yb_servers(): host, port, num_connections, node_type, cloud, region, zone,
            # public_ip (yugabyte/pgx load_balance.go LB_QUERY)
            return {
                "servers": [
                    {"host": node, "port": 5433, "num_connections": 0, "node_type": "primary",
                     "cloud": "cloud1", "region": "datacenter1", "zone": "rack1",
                     "public_ip": ""}
                    for node in self.nodes
                ]
            }  # fmt: skip
        if op == "register_machine":
            machine_id = c.register(
                str(request["host_and_port"]), int(request["cpu"]), int(request["ram"]),
                float(request["gpu"]),
            )  # fmt: skip
            return {"id": machine_id}
        if op == "machine_details":
            c.details(
                int(request["machine_id"]), str(request["name"]), str(request["tasks"]),
                str(request["layers"]),
            )  # fmt: skip
            return {"ok": True}
        if op == "heartbeat":
            c.heartbeat(int(request["machine_id"]))
            return {"ok": True}
        if op == "owned_tasks":
            return {"tasks": c.owned(int(request["machine_id"]))}
        if op == "claim_tasks":
            return {
                "tasks": c.claim(
                    int(request["machine_id"]), str(request["name"]), int(request["limit"])
                )
            }
        if op == "task_request":
            found = c.request_of(int(request["task_id"]))
            return {"request": found} if found else {"error": "no task found"}
        if op == "store_proof":
            n = c.store_proof(int(request["task_id"]), str(request["host_and_port"]))
            return {"updated": n}
        if op == "record_completion":
            err = c.complete(
                int(request["task_id"]), bool(request["done"]), str(request.get("error") or ""),
                float(request["work_start"]), str(request["host_and_port"]),
            )  # fmt: skip
            return {"error": err} if err else {"ok": True}
        if op == "still_owned":
            return {"owned": c.still_owned(int(request["task_id"]), int(request["machine_id"]))}
        if op == "cluster_machines":
            # peering.go:117 SELECT host_and_port FROM harmony_machines
            return {"machines": [{"id": m.id, "host_and_port": m.host_and_port}
                                 for m in c.machines.values()]}  # fmt: skip
        if op == "node_info":
            # CurioAPI.Info (cmd/curio/rpc/rpc.go:392-425), for `curio cli info`
            m = c.machines.get(int(request["machine_id"]))
            return {"machine": asdict(m)} if m else {"error": "no rows in result set"}
        return {"error": f"unknown op {op!r}"}
