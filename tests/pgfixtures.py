"""A real PostgreSQL with curio's schema for the engine's cluster tests, and curio's own
statements to fill it as curio's nodes would (filecoin-project/curio @ e0294b0f).

One server per test session (a start costs ~0.6 s); each test gets a database of its own
(CREATE DATABASE, ~0.1 s) with the schema. The times written are the test's clock, as the
simulated world writes them (vastsim: only time is modelled).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest

from vastsim import curio_schema
from vastsim.postgres import PostgresServer
from vastui.engine.cluster import ClusterReader, to_db_time

_names = itertools.count(1)


@pytest.fixture(scope="session")
def pg_server(_cluster_server: None) -> Iterator[PostgresServer]:
    """The session's one server (tests/conftest.py ``_cluster_server``)."""
    from vastsim import harmonydb

    server = harmonydb._shared
    assert server is not None, "tests/conftest.py starts the session's PostgreSQL"
    yield server


@dataclass
class CurioDb:
    """One test's database: a sync psycopg connection for curio's side, the reader's address."""

    server: PostgresServer
    name: str
    conn: Any

    def reader(self) -> ClusterReader:
        return ClusterReader(
            self.server.host, self.server.port, user=self.server.user, dbname=self.name,
            password=self.server.password,
        )  # fmt: skip

    def q(self, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
        cur = self.conn.execute(sql, params)
        return cur.fetchall() if cur.description else []

    # -- curio's statements -------------------------------------------------------------

    def register(self, host_and_port: str, name: str, now: float) -> int:
        """harmony/resources/resources.go:81-99 (CURRENT_TIMESTAMP: the test's clock), then
        the details upsert (cmd/curio/tasks/tasks.go:731-748)."""
        t = to_db_time(now)
        (mid,) = self.q(
            """
            WITH upsert AS (
                UPDATE harmony_machines SET cpu = %(cpu)s, ram = %(ram)s, gpu = %(gpu)s,
                    last_contact = %(now)s
                WHERE host_and_port = %(hp)s RETURNING id
            ),
            inserted AS (
                INSERT INTO harmony_machines (host_and_port, cpu, ram, gpu, last_contact)
                SELECT %(hp)s, %(cpu)s, %(ram)s, %(gpu)s, %(now)s
                WHERE NOT EXISTS (SELECT id FROM upsert) RETURNING id
            )
            SELECT id FROM upsert UNION ALL SELECT id FROM inserted
            """,
            {"hp": host_and_port, "cpu": 32, "ram": 256 * 10**9, "gpu": 1.0, "now": t},
        )[0]
        self.q(
            """INSERT INTO harmony_machine_details
               (tasks, layers, startup_time, miners, machine_id, machine_name, version)
               VALUES (%(tasks)s, 'base', %(now)s, '', %(id)s, %(name)s, 'sim')
               ON CONFLICT (machine_id) DO UPDATE SET tasks = %(tasks)s, startup_time = %(now)s,
                 machine_name = %(name)s""",
            {"tasks": "PSProve,PShareSubmit,bg:PShareRequest", "now": t, "id": mid, "name": name},
        )
        return int(mid)

    def heartbeat(self, machine_id: int, now: float) -> None:
        self.q(
            "UPDATE harmony_machines SET last_contact = %s WHERE id = %s",
            (to_db_time(now), machine_id),
        )

    def add_task(self, name: str, now: float) -> int:
        """harmonytask.go:808: AddTaskByName's INSERT."""
        (tid,) = self.q(
            "INSERT INTO harmony_task (name, added_by, posted_time) VALUES (%s, %s, %s) "
            "RETURNING id",
            (name, 1, to_db_time(now)),
        )[0]
        return int(tid)

    def claim(self, machine_id: int, ids: list[int]) -> list[int]:
        """task_type_handler.go:165-181."""
        rows = self.q(
            """
            WITH candidates AS (
                SELECT t.id FROM harmony_task t
                JOIN unnest(%(ids)s::bigint[]) AS x(id) ON x.id = t.id
                WHERE t.owner_id IS NULL
                ORDER BY array_position(%(ids)s::bigint[], t.id::bigint)
                LIMIT %(n)s FOR UPDATE SKIP LOCKED
            )
            UPDATE harmony_task t SET owner_id = %(owner)s FROM candidates c
            WHERE t.id = c.id RETURNING t.id
            """,
            {"ids": ids, "n": len(ids), "owner": machine_id},
        )
        return [int(r[0]) for r in rows]

    def complete(self, task_id: int, host_and_port: str, ok: bool, err: str, now: float) -> None:
        """recordCompletion (task_type_handler.go:405-495), one transaction."""
        with self.conn.transaction():
            posted, retries = self.q(
                "SELECT posted_time, retries FROM harmony_task WHERE id = %s", (task_id,)
            )[0]
            if ok:
                self.q("DELETE FROM harmony_task WHERE id = %s", (task_id,))
            else:
                self.q(
                    "UPDATE harmony_task SET owner_id = NULL, retries = %s, update_time = %s "
                    "WHERE id = %s",
                    (retries + 1, to_db_time(now), task_id),
                )
            self.q(
                """INSERT INTO harmony_task_history (task_id, name, posted, work_start, work_end,
                   result, completed_by_host_and_port, err) VALUES (%s, 'PSProve', %s, %s, %s,
                   %s, %s, %s)""",
                (task_id, posted, to_db_time(now - 60), to_db_time(now), ok, host_and_port,
                 "" if ok else f"error: {err}"),
            )  # fmt: skip

    def owned(self, machine_id: int) -> list[int]:
        return [int(r[0]) for r in self.q(
            "SELECT id FROM harmony_task WHERE owner_id = %s ORDER BY id", (machine_id,)
        )]  # fmt: skip

    def unschedulable(self, machine_id: int) -> bool | None:
        rows = self.q("SELECT unschedulable FROM harmony_machines WHERE id = %s", (machine_id,))
        return bool(rows[0][0]) if rows else None

    def market(self, n: int, now: float, *, computed: int = 0, submitted: int = 0,
               pow_: int = 0, paid: int = 0) -> None:  # fmt: skip
        """proofshare_queue rows as task_request.go:240-262 inserts them and task_prove.go /
        task_submit.go mark them; payments as task_submit.go inserts them."""
        t = datetime.fromtimestamp(now, UTC)
        for i in range(n):
            cid = f"bafy-sim-{next(_names)}"
            self.q(
                """INSERT INTO proofshare_queue (service_id, obtained_at, request_cid,
                   compute_done, submit_done, was_pow) VALUES (%s, %s, %s, %s, %s, %s)""",
                (i + 1, t, cid, i < computed, i < submitted, i < pow_),
            )
            if i < paid:
                self.q(
                    """INSERT INTO proofshare_provider_payments (provider_id, request_cid,
                       payment_nonce, payment_cumulative_amount, payment_signature, created_at)
                       VALUES (1000, %s, %s, %s, %s, %s)""",
                    (cid, next(_names), str(i + 1), b"sig", t),
                )


@pytest.fixture
def curio_db(pg_server: PostgresServer) -> Iterator[CurioDb]:
    import psycopg

    name = f"t{next(_names)}"
    with psycopg.connect(pg_server.conninfo("postgres"), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
        # as the simulated cluster's (vastsim/harmonydb.py): YugabyteDB's READ COMMITTED is
        # snapshot isolation unless yb_enable_read_committed_isolation is set
        admin.execute(
            f"ALTER DATABASE \"{name}\" SET default_transaction_isolation = 'repeatable read'"
        )
    conn = psycopg.connect(pg_server.conninfo(name), autocommit=True)
    curio_schema.apply(conn)
    try:
        yield CurioDb(pg_server, name, conn)
    finally:
        conn.close()
        with psycopg.connect(pg_server.conninfo("postgres"), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
