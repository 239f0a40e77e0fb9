"""curio's cluster database on the controller, for the demo, ``vastui sim serve`` and the tests:
a real PostgreSQL server (vastsim/postgres.py; YugabyteDB's YSQL is PostgreSQL's protocol,
port 5433 in production) holding the part of curio's schema its workers use
(vastsim/curio_schema.sql), the cluster's YCQL (vastsim/ycql.py) and, beside them, the
proofshare market the workers reach over their own internet (vastsim/proofsvc.py).

The workers' stand-in curio (vastsim/standins/curio) is a PostgreSQL client sending curio's
own statements; what the cluster is, then, is what those statements do on these tables. This
module only sets the cluster up as an operator would (curio @ e0294b0f):

* the ``base`` layer in ``harmony_config``, whose ``[Apis]`` name the controller's chain node
  (``curio config set``: cmd/curio/config.go:117-121);
* proofshare enabled, with a wallet and an ask price, as curio's web UI sets them
  (web/api/webrpcporep/proofshare.go:88-92);
* ``yb_servers()``: the cluster's tservers, three on the controller's private network by default
  (a worker that dials them instead of the tunnel cannot reach them), or curio's documented single
  node (``nodes=("127.0.0.1",)``, documentation/en/setup.md:57).

Time: curio's statements say ``CURRENT_TIMESTAMP``/``NOW()``; the stand-ins send the simulated
now instead (TIMESTAMP columns hold naive UTC, TIMESTAMPTZ aware UTC; the server runs in UTC).
Only time is modelled: a reader of these columns compares them with the same simulated clock.

A process may share one server among its clusters (``share_server``: the test suite starts one
PostgreSQL per session and gives each cluster a database of its own); a cluster that asks for
another user or password, or a database another live cluster holds, starts its own.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import logging
import socket
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from vastsim import curio_schema
from vastsim.curio_schema import DEFAULT_NODES
from vastsim.fleet import hold_port
from vastsim.lotus import make_token
from vastsim.postgres import READY_TIMEOUT_S, PostgresServer, PostgresUnavailable
from vastsim.proofsvc import DemandPolicy, Market, ProofService, fil_to_atto

log = logging.getLogger("vastsim.harmonydb")

# The controller's API tokens (lotus's JWT payload, vastsim/lotus.py): the one an operator gives
# curio (read, write and sign: its proofshare tasks sign through it), and a read-only one.
SIM_CHAIN_TOKEN = make_token(("read", "write", "sign"))
SIM_READ_TOKEN = make_token(("read",))
LOOKS_DEAD_S = 600.0  # harmony/resources/resources.go:22 LOOKS_DEAD_TIMEOUT
# curio's own defaults for its database (cmd/curio/main.go:108-186): what a worker without a
# configured password sends.
CURIO_DEFAULT_USER = "yugabyte"
CURIO_DEFAULT_PASSWORD = "yugabyte"
CURIO_DEFAULT_DATABASE = "yugabyte"
DEFAULT_PRICE_FIL = "0.005"  # the provider's ask, FIL per proof (an operator's choice)


def _f1_address(seed: bytes) -> str:
    """A well-formed secp256k1 (f1) address: blake2b-160 of a key, its blake2b-32 checksum
    over the protocol byte and payload, base32 lower case without padding."""
    payload = hashlib.blake2b(seed, digest_size=20).digest()
    checksum = hashlib.blake2b(b"\x01" + payload, digest_size=4).digest()
    return "f1" + base64.b32encode(payload + checksum).decode().lower().rstrip("=")


SIM_WALLET = _f1_address(b"vastui simulated proofshare provider")


def base_layer(chain_addr: str, token: str = SIM_CHAIN_TOKEN) -> str:
    host, _, port = chain_addr.rpartition(":")
    secret = base64.b64encode(b"simulated-storage-rpc-secret-0001").decode()
    return (
        "[Apis]\n"
        f'  ChainApiInfo = ["{token}:/ip4/{host}/tcp/{port}/http"]\n'
        f'  StorageRPCSecret = "{secret}"\n'
    )


# -- one server for many clusters (the test suite) ---------------------------------------------

_shared: PostgresServer | None = None
_leased: set[str] = set()


def share_server(server: PostgresServer | None) -> None:
    """Every later cluster of this process that asks for ``server``'s user and password gets a
    database of its own on it instead of a server of its own; None: each starts its own."""
    global _shared
    _shared = server


def _epoch(value: Any) -> Any:
    """A TIMESTAMP (naive UTC) or TIMESTAMPTZ read back as epoch seconds; anything else as is."""
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp()
    return value


class ClusterDatabase:
    """curio's cluster database (YSQL on a real PostgreSQL, YCQL) and the proofshare market."""

    def __init__(
        self,
        *,
        user: str = CURIO_DEFAULT_USER,
        password: str = CURIO_DEFAULT_PASSWORD,
        database: str = CURIO_DEFAULT_DATABASE,
        chain_addr: str = "127.0.0.1:1234",
        nodes: Sequence[str] = DEFAULT_NODES,
        clock: Callable[[], float] = time.time,
        snap_share: float = 0.25,
        seed: int = 0,
        pow_share: float = 0.1,
        price_fil: str = DEFAULT_PRICE_FIL,
        wallet: str = SIM_WALLET,
        server: PostgresServer | None = None,
        market: Market | None = None,
        demand: DemandPolicy | None = None,
        chain_token: str = SIM_CHAIN_TOKEN,
    ) -> None:
        self.user = user
        self.password = password
        self.database = database
        self.chain_addr = chain_addr
        self.chain_token = chain_token  # what the base layer gives curio for the chain node
        self.nodes = tuple(nodes)
        self.clock = clock
        self.wallet = wallet
        self.price = fil_to_atto(price_fil)
        # a finite market's challenges are its policy's (vastsim/demand.py), not dice
        self.market = market or Market(
            clock=clock, seed=seed, snap_share=snap_share,
            pow_share=pow_share if demand is None else 0.0, policy=demand,
        )  # fmt: skip
        self.proofsvc = ProofService(self.market)
        self.server: PostgresServer | None = server
        self._owned = False  # we started the server (and stop it)
        self._lease: str | None = None  # the database we hold on a shared server
        self.ycql: Any = None
        self.host = "127.0.0.1"
        self.port = 0
        self.cql_port = 0
        self._held_cql: socket.socket | None = None

    # -- where ------------------------------------------------------------------------

    def conninfo(self) -> str:
        """A libpq connection string for this cluster's database (the password in it: never
        log it)."""
        assert self.server is not None, "start first"
        return self.server.conninfo(self.database)

    @property
    def proofsvc_url(self) -> str:
        return self.proofsvc.url

    # -- lifecycle -------------------------------------------------------------------

    def _choose_server(self, host: str) -> PostgresServer:
        if self.server is not None:
            return self.server
        shared = _shared
        if (
            shared is not None
            and shared.user == self.user
            and shared.password == self.password
            and shared.host == host
            and self.database not in _leased
        ):
            _leased.add(self.database)
            self._lease = self.database
            return shared
        self._owned = True
        return PostgresServer(
            user=self.user, password=self.password, database=self.database, host=host
        )

    async def start(self, host: str = "127.0.0.1") -> tuple[int, int]:
        """The server (initdb in a thread, the postmaster spawned from this loop's thread: its
        parent-death signal follows the thread that forks it), the schema and the operator's
        set-up, YCQL, the market. Returns (YSQL port, YCQL port)."""
        from vastsim.ycql import FakeYcql

        self.host = host
        server = self.server = self._choose_server(host)
        try:
            if self._owned:
                await asyncio.to_thread(server.initdb)
                server.spawn()
                await self._until_ready()
            await asyncio.to_thread(self._create)
            self.port = server.port
            self.ycql = FakeYcql(rpc_address=self.nodes[0], peers=self.nodes[1:])
            self.cql_port = await self.ycql.start(host)
            self.proofsvc.start(host)
        except BaseException:
            await self.stop()
            raise
        log.info(
            "curio cluster database %r on %s:%s (PostgreSQL %s%s), YCQL on %s, market %s",
            self.database, host, self.port, server.binaries.version,
            "" if self._owned else ", shared", self.cql_port, self.proofsvc.url,
        )  # fmt: skip
        return self.port, self.cql_port

    async def _until_ready(self) -> None:
        assert self.server is not None
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not self.server.ready():
            if time.monotonic() > deadline:
                raise PostgresUnavailable(
                    f"PostgreSQL did not accept connections within {READY_TIMEOUT_S:.0f} s: "
                    f"{self.server.log_tail()}"
                )
            await asyncio.sleep(0.01)

    def _create(self) -> None:
        """The database, curio's schema, and the cluster as an operator sets it up."""
        import psycopg
        from psycopg import sql

        assert self.server is not None
        name = sql.Identifier(self.database)
        with psycopg.connect(self.server.conninfo("postgres"), autocommit=True) as admin:
            if not self._owned:  # a database a dead test left on the shared server
                admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(name))
            admin.execute(sql.SQL("CREATE DATABASE {}").format(name))
            # YugabyteDB runs YSQL's READ COMMITTED as Snapshot isolation unless
            # yb_enable_read_committed_isolation is set (docs.yugabyte.com, "Isolation levels";
            # on by default only for universes deployed by yugabyted at v2025.2 or later): two
            # nodes' adders updating one row conflict (40001, which curio retries) rather than
            # the second overwriting the first, as PostgreSQL's READ COMMITTED would.
            admin.execute(
                sql.SQL("ALTER DATABASE {} SET default_transaction_isolation = 'repeatable read'")
                .format(name)
            )  # fmt: skip
        with psycopg.connect(self.conninfo()) as conn:
            curio_schema.apply(conn, self.nodes)
            with conn.transaction():
                # cmd/curio/config.go:117-121 (setConfig)
                conn.execute(
                    "INSERT INTO harmony_config (title, config) VALUES (%s, %s) "
                    "ON CONFLICT (title) DO UPDATE SET config = excluded.config",
                    ("base", base_layer(self.chain_addr, self.chain_token)),
                )
                # web/api/webrpcporep/proofshare.go:88-92 (PSSetMeta): pprice in attoFIL
                conn.execute(
                    "UPDATE proofshare_meta SET enabled = %s, wallet = %s, pprice = %s "
                    "WHERE singleton = TRUE",
                    (True, self.wallet, str(self.price)),
                )

    @property
    def down(self) -> bool:
        return self._held_cql is not None

    async def go_down(self) -> None:
        """The cluster is down (the fleet fault ``controller_down``): YSQL and YCQL drop their
        connections and refuse new ones, their ports held so that no other server takes them
        (vastsim/fleet.py ``hold_port``); the tables are kept for ``come_back``. On a shared
        server every database on it goes down too."""
        if self.server is None or self._held_cql is not None:
            return
        await asyncio.to_thread(self.server.go_down)
        if self.ycql is not None:
            await self.ycql.stop()  # the same tables when it listens again
        self._held_cql = hold_port(self.host, self.cql_port)

    async def come_back(self) -> None:
        """Listen again on the same ports, with the same data."""
        held, self._held_cql = self._held_cql, None
        if held is None or self.server is None:
            return
        try:
            if self.server.down:
                self.server.come_back(wait=False)  # spawned from this loop's thread
                await self._until_ready()
            if self.ycql is not None:
                held.close()
                await self.ycql.start(self.host, self.cql_port)
        finally:
            held.close()

    async def stop(self) -> None:
        """The market, YCQL and the database gone: an own server stopped and its files
        removed, a shared server's database dropped."""
        self.proofsvc.stop()
        if self._held_cql is not None:
            self._held_cql.close()
            self._held_cql = None
        if self.ycql is not None:
            await self.ycql.stop()
            self.ycql = None
        server = self.server
        if server is None:
            return
        if self._owned:
            await asyncio.to_thread(server.stop)
            self._owned = False
            self.server = None
        elif self._lease is not None:
            if server.down:
                server.come_back(wait=False)
                await self._until_ready()
            with contextlib.suppress(Exception):
                await asyncio.to_thread(self._drop)
            _leased.discard(self._lease)
            self._lease = None

    def _drop(self) -> None:
        import psycopg
        from psycopg import sql

        assert self.server is not None
        with psycopg.connect(self.server.conninfo("postgres"), autocommit=True) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                    sql.Identifier(self.database)
                )
            )

    # -- reading and writing, for tests (synchronous: psycopg) -------------------------

    def connect(self) -> Any:
        """A psycopg connection to the cluster's database (autocommit)."""
        import psycopg

        return psycopg.connect(self.conninfo(), autocommit=True, connect_timeout=10)

    def layer(self, title: str) -> str | None:
        with self.connect() as conn:
            row = conn.execute(
                "SELECT config FROM harmony_config WHERE title=%s", (title,)
            ).fetchone()  # cmd/curio/config.go:151
        return None if row is None else str(row[0])

    def set_layer(self, title: str, text: str) -> None:
        with self.connect() as conn:  # cmd/curio/config.go:117-121
            conn.execute(
                "INSERT INTO harmony_config (title, config) VALUES (%s, %s) "
                "ON CONFLICT (title) DO UPDATE SET config = excluded.config",
                (title, text),
            )

    def delete_layer(self, title: str) -> None:
        with self.connect() as conn:  # cmd/curio/config.go:195
            conn.execute("DELETE FROM harmony_config WHERE title=%s", (title,))

    def view(self) -> dict[str, Any]:
        """The cluster as curio's web UI shows it: machines (with their details and the tasks
        each holds), tasks, history, the proofshare queue and payments; times as epoch
        seconds."""
        from psycopg.rows import dict_row

        with self.connect() as conn:
            conn.row_factory = dict_row

            def rows(query: str) -> list[dict[str, Any]]:
                return [{k: _epoch(v) for k, v in r.items()} for r in conn.execute(query)]

            machines = rows(
                "SELECT m.id, m.host_and_port, m.cpu, m.ram, m.gpu, m.last_contact, "
                "m.unschedulable, m.restart_request, d.machine_name AS name, d.tasks, "
                "d.layers, d.startup_time FROM harmony_machines m "
                "LEFT JOIN harmony_machine_details d ON d.machine_id = m.id ORDER BY m.id"
            )
            tasks = rows(
                "SELECT id, name, posted_time, update_time, owner_id, added_by, retries "
                "FROM harmony_task ORDER BY id"
            )
            history = rows(
                "SELECT id, task_id, name, posted, work_start, work_end, result, err, "
                "completed_by_host_and_port FROM harmony_task_history ORDER BY id"
            )
            queue = rows(
                "SELECT service_id, obtained_at, request_cid, compute_task_id, compute_done, "
                "submit_task_id, submit_done, was_pow FROM proofshare_queue "
                "ORDER BY obtained_at, service_id"
            )
            payments = rows(
                "SELECT provider_id, request_cid, payment_nonce, payment_cumulative_amount, "
                "created_at FROM proofshare_provider_payments ORDER BY provider_id, payment_nonce"
            )
            meta = rows("SELECT enabled, wallet, pprice, request_task_id FROM proofshare_meta")
        for m in machines:
            m["claims"] = [t["id"] for t in tasks if t["owner_id"] == m["id"]]
        return {
            "machines": machines,
            "tasks": tasks,
            "history": history,
            "queue": queue,
            "payments": payments,
            "meta": meta[0] if meta else {},
        }


__all__ = [
    "CURIO_DEFAULT_DATABASE",
    "CURIO_DEFAULT_PASSWORD",
    "CURIO_DEFAULT_USER",
    "DEFAULT_NODES",
    "LOOKS_DEAD_S",
    "SIM_CHAIN_TOKEN",
    "SIM_READ_TOKEN",
    "SIM_WALLET",
    "ClusterDatabase",
    "base_layer",
    "share_server",
]
