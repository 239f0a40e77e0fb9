"""curio's cluster database, as the engine reads it, and the only two writes it makes there.

curio's database is YugabyteDB, whose YSQL is the PostgreSQL protocol: psycopg 3 reads it (the
issue 27 note says why not asyncpg). The tables are curio's own (filecoin-project/curio @
e0294b0f, ``harmony/harmonydb/sql/``; ../shared/reference/cuzk-verified.md, "What a controller
can read and do in curio's cluster database"):

* ``harmony_machines`` (a node's row, keyed in practice by ``host_and_port``, which is NOT
  unique: resources.go:81-99), ``unschedulable`` (the cordon), ``last_contact`` (a heartbeat a
  minute, resources.go:109-118); ``harmony_machine_details.machine_name`` (``--name``,
  cmd/curio/tasks/tasks.go:731-748);
* ``harmony_task`` (``owner_id`` NULL: waiting work; else claimed), ``harmony_task_history``
  (each PSProve's result, ``err`` and ``completed_by_host_and_port``: what curio's alert
  manager counts per machine, alertmanager/alerts.go:197-224);
* ``proofshare_queue`` (requests taken, computed, submitted; ``was_pow``: an unpaid challenge)
  and ``proofshare_provider_payments`` (one row per paid proof).

The two writes (never anything else, and never on a row that is not this fleet's worker):

* **cordon** a worker before a planned destroy: ``curio cli cordon``'s statement
  (``UPDATE harmony_machines SET unschedulable = true WHERE id = $1``, cmd/curio/rpc/rpc.go:
  376-378); the node then claims no new work and finishes what it holds (harmonytask.go:
  647-663);
* **release** a destroyed worker's tasks: ``UPDATE harmony_task SET owner_id = NULL WHERE
  owner_id = $1`` (what a node does for its own at start, harmonytask.go:383) and its row
  deleted (``ON DELETE SET NULL``, 20230719-harmony.sql:17), in one transaction: at once,
  instead of after curio's 10-minute ``LOOKS_DEAD_TIMEOUT`` (resources.go:22). An outbid
  worker (stopped by Vast, its curio with it) has its tasks released and keeps its row.

A row is this fleet's worker only when its ``host_and_port`` is the worker's identity and what
else the cluster knows of it agrees: the machine id the worker reported (``curio cli info``)
and the node name in ``harmony_machine_details``; at least one of the two must be known.

Times: curio writes ``CURRENT_TIMESTAMP`` into TIMESTAMP columns (UTC, YugabyteDB's default
TimeZone); the reader compares them with the engine's clock (UTC epoch seconds), which in the
simulated world is the world's own clock. A reading is information: no worker is destroyed
because the cluster cannot be read.

One file: every statement vastui sends to curio's database, side by side, so that what it
reads and the only two writes it makes can be audited in one place.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from vastui.config import Config
from vastui.domain.worker import InstanceRecord
from vastui.engine import identity
from vastui.engine.demandshift import Run
from vastui.engine.labels import fleet_id_of
from vastui.redact import redact
from vastui.sanitize import sanitize_line

log = logging.getLogger("vastui.engine.cluster")

PSPROVE = "PSProve"  # tasks/tasknames
PSHARE_REQUEST = "bg:PShareRequest"  # tasks/proofshare/task_request.go TypeDetails
PSHARE_SUBMIT = "PShareSubmit"  # tasks/proofshare/task_submit.go TypeDetails
# A signature the Lotus API refused: every ask (task_request.go:313 → provictl.go:84) and every
# completion (task_submit.go → provictl.go:231-234) is signed through WalletSign
# (lib/proofsvc/sigs.go:241); a token without "sign" gets go-jsonrpc's "missing permission to
# invoke 'WalletSign' (need 'sign')" (auth/auth.go).
SIGN_REFUSED = r"failed to sign|missing permission to invoke"
LOOKS_DEAD_S = 600.0  # harmony/resources/resources.go:22 LOOKS_DEAD_TIMEOUT
CONNECT_TIMEOUT_S = 5
STATEMENT_TIMEOUT_MS = 10_000
READ_TIMEOUT_S = 20.0  # a whole reading (its statements), after which it is given up
# After a failure the database is not tried again for a while (2, 4, ... 60 s, monotonic): a
# cluster that hangs must not hold every engine step up by its timeouts.
BACKOFF_S = (2.0, 60.0)
SERIALIZATION_RETRIES = 4  # a transaction that conflicts with a node's write, tried again


class ClusterError(Exception):
    """The cluster could not be read or written; one line, secrets removed."""


class ClusterAbsent(ClusterError):
    """Nothing answers at the configured address (an operator without curio's database)."""


@dataclass(frozen=True, slots=True)
class Worker:
    """One worker of this fleet as the cluster should know it."""

    vast_id: int
    host_and_port: str  # its curio identity, 127.0.0.1:<base + runner id>
    node_name: str  # curio run --name
    machine_id: int | None  # as the worker reported it (curio cli info), if it did
    since: float  # PSProve results are counted from here (engine clock: it began proving)
    window_since: float  # ... and, for the verdict, from here (the production window)


@dataclass(frozen=True, slots=True)
class Row:
    """A ``harmony_machines`` row at a worker's address, with its details' node name."""

    machine_id: int
    host_and_port: str
    name: str | None
    last_contact: float | None
    cordoned: bool

    def to_json(self) -> dict[str, Any]:
        """As the engine publishes an orphan (its status row): the node name is curio's, cleaned."""
        return {
            "machine_id": self.machine_id, "host_and_port": self.host_and_port,
            "name": sanitize_line(self.name, 80) if self.name else None,
            "last_contact": self.last_contact, "cordoned": self.cordoned,
        }  # fmt: skip


def worker_of(rec: InstanceRecord, config: Config, now: float) -> Worker | None:
    """A record of this fleet as the cluster should know it: its identity from its runner id
    (vastui/engine/identity.py), the machine id it reported (``curio cli info``); None without
    a runner id (it never had an identity)."""
    if rec.runner_id is None:
        return None
    base = config.curio.listen_port_base
    machine = None
    if rec.curio_info:
        try:
            info = json.loads(rec.curio_info)
        except ValueError:
            info = None
        value = info.get("machine_id") if isinstance(info, dict) else None
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            machine = value
    return Worker(
        vast_id=rec.vast_id,
        host_and_port=identity.curio_listen(rec.runner_id, base),
        node_name=identity.node_name(config.fleet.name, rec.runner_id, fleet_id_of(rec.label)),
        machine_id=machine,
        since=rec.proving_at or rec.created_at or 0.0,
        window_since=now - config.proving.window_min * 60.0,
    )


def cluster_held(rec: InstanceRecord) -> int | None:
    """The tasks a worker's curio machine held at the engine's last reading of the cluster."""
    if not rec.cluster_state:
        return None
    try:
        state = json.loads(rec.cluster_state)
    except ValueError:
        return None
    held = state.get("held") if isinstance(state, dict) else None
    return held if isinstance(held, int) and not isinstance(held, bool) and held >= 0 else None


def belongs(worker: Worker, row: Row) -> bool:
    """The row is this worker's: its address, and what else is known agrees (the reported
    machine id, the node name), at least one of them known."""
    if row.host_and_port != worker.host_and_port:
        return False
    if worker.machine_id is not None and row.machine_id != worker.machine_id:
        return False
    if row.name is not None and row.name != worker.node_name:
        return False
    return worker.machine_id is not None or row.name is not None


@dataclass(frozen=True, slots=True)
class MachineState:
    """What the cluster says of one worker."""

    vast_id: int
    host_and_port: str
    machine_id: int | None = None  # its row's id; None: no row of its own
    last_contact: float | None = None
    cordoned: bool = False
    held: int = 0  # tasks it owns
    held_by_name: dict[str, int] = field(default_factory=dict)
    done: int = 0  # PSProve results in the window
    failed: int = 0
    done_total: int = 0  # ... since it began proving
    failed_total: int = 0
    last_error: str | None = None  # its latest failed PSProve's err (untrusted, cleaned)
    last_error_at: float | None = None
    foreign: str | None = None  # a row at its address that is not its own: whose
    failed_controller: int = 0  # PSProve failed in the window on the controller's side

    def to_json(self) -> dict[str, Any]:
        return {
            "machine_id": self.machine_id, "host_and_port": self.host_and_port,
            "last_contact": self.last_contact, "cordoned": self.cordoned, "held": self.held,
            "held_by_name": dict(self.held_by_name), "done": self.done, "failed": self.failed,
            "done_total": self.done_total, "failed_total": self.failed_total,
            "last_error": self.last_error, "last_error_at": self.last_error_at,
            "foreign": self.foreign, "failed_controller": self.failed_controller,
        }  # fmt: skip


@dataclass(frozen=True, slots=True)
class Totals:
    """The cluster's work, whoever does it: PSProve tasks waiting and claimed now, the
    ``bg:PShareRequest`` singleton's owner, and the market's requests over the window."""

    waiting: int = 0  # PSProve tasks no machine owns
    claimed: int = 0
    request_owner: int | None = None  # machine id holding bg:PShareRequest (None: nobody)
    request_owner_addr: str | None = None
    request_task: bool = False  # a bg:PShareRequest task exists
    request_asking_since: float | None = None  # posted (or last released) then, engine clock
    machines: int = 0  # rows in harmony_machines
    taken: int = 0  # proofshare_queue rows obtained in the window
    computed: int = 0
    submitted: int = 0
    challenges: int = 0  # submitted challenge proofs (was_pow): unpaid
    paid: int = 0  # payments for the requests taken in the window (that cohort)
    paid_recent: int = 0  # payments recorded in the window, whichever request they pay
    cluster_done: int = 0  # PSProve successes by any machine in the window
    cluster_failed: int = 0
    # requests the cluster holds that no node has claimed, as curio's request task counts
    # them, and when the oldest of them was obtained (engine clock)
    unclaimed: int = 0
    oldest_unclaimed_at: float | None = None
    # bg:PShareRequest's runs that ended in the window: how long it asked, and the requests
    # obtained meanwhile (the market's demand for this cluster, vastui/engine/autoscale.py),
    # each run from its first poll's batch on (_REQUEST_RUNS)
    request_runs_s: float = 0.0
    request_obtained: int = 0
    # the payment path: asks and completions whose signature the Lotus API refused in the
    # window, the last one's words and time, and the last sign that it works (a request
    # obtained, which took a signed ask, or a completion submitted), engine clock
    # requests obtained longer ago than the market's deadline and not submitted: missed (the
    # market takes them back and charges 50 challenge proofs), or about to be found so
    overdue: int = 0
    sign_refused: int = 0
    sign_error: str | None = None
    sign_refused_at: float | None = None
    signed_at: float | None = None
    paid_fil: float = 0.0  # what the market paid over the window (FIL)
    ask_fil: float | None = None  # the ask price set in curio (FIL per proof)

    def to_json(self) -> dict[str, Any]:
        return {
            "psprove_waiting": self.waiting, "psprove_claimed": self.claimed,
            "request_owner": self.request_owner, "request_owner_addr": self.request_owner_addr,
            "request_task": self.request_task, "machines": self.machines, "taken": self.taken,
            "request_asking_since": self.request_asking_since,
            "computed": self.computed, "submitted": self.submitted,
            "challenges": self.challenges, "paid": self.paid, "paid_recent": self.paid_recent,
            "cluster_done": self.cluster_done, "cluster_failed": self.cluster_failed,
            "unclaimed": self.unclaimed, "oldest_unclaimed_at": self.oldest_unclaimed_at,
            "request_runs_s": self.request_runs_s, "request_obtained": self.request_obtained,
            "overdue": self.overdue,
            "sign_refused": self.sign_refused, "sign_error": self.sign_error,
            "sign_refused_at": self.sign_refused_at, "signed_at": self.signed_at,
            "paid_fil": self.paid_fil, "ask_fil": self.ask_fil,
        }  # fmt: skip


@dataclass(frozen=True, slots=True)
class ClusterView:
    read_at: float  # engine clock
    window_s: float
    workers: dict[int, MachineState]  # by Vast instance id
    totals: Totals


def orphans(rows: Iterable[Row], view: ClusterView, unread: Iterable[Worker] = ()) -> list[Row]:
    """The rows with this fleet's node name (``named_rows``) that no record of ours matches: not
    the own row of a worker ``view`` read, nor a row of a worker it did not read (``unread``:
    one alive but not proving, whose row may still be there). Each is a release never done."""
    own = {s.machine_id for s in view.workers.values() if s.machine_id is not None}
    others = list(unread)
    return [
        r for r in rows
        if r.machine_id not in own and not any(belongs(w, r) for w in others)
    ]  # fmt: skip


def to_db_time(ts: float) -> datetime:
    """Engine seconds → curio's TIMESTAMP (naive UTC)."""
    return datetime.fromtimestamp(ts, UTC).replace(tzinfo=None)


def from_db_time(value: Any) -> float | None:
    if not isinstance(value, datetime):
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return float(value.timestamp())


def _seconds(value: Any) -> float:
    """A duration the database summed: finite and not negative, else 0."""
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return max(0.0, float(value))
    return 0.0


def _fil(value: Any) -> float:
    """FIL from attoFIL or FIL text (untrusted): bounded by the token's supply (2e9 FIL); a
    value that does not parse or is out of bounds is 0, not trusted."""
    try:
        x = float(str(value))
    except (TypeError, ValueError):
        return 0.0
    if "." not in str(value) and abs(x) >= 1e9:  # attoFIL
        x /= 1e18
    return x if math.isfinite(x) and 0.0 <= x <= 2e9 else 0.0


def _count(value: Any) -> int:
    return int(value) if isinstance(value, int) and value >= 0 else 0


_ROWS = """
SELECT m.id, m.host_and_port, d.machine_name, m.last_contact, coalesce(m.unschedulable, false)
FROM harmony_machines m LEFT JOIN harmony_machine_details d ON d.machine_id = m.id
WHERE m.host_and_port = ANY(%(addrs)s)
ORDER BY m.id
"""
_HELD = """
SELECT owner_id, name, count(*) FROM harmony_task
WHERE owner_id = ANY(%(ids)s) GROUP BY owner_id, name
"""
# Failures that are not the machine's. "no task found": another node stored the task's proof
# first, the task having been given to two (task_prove.go:221-226). The controller's tunnel: the
# worker reaches curio's database and the Lotus API only at its own loopback's 5433, 9042 and
# 1234 (vastui/engine/runtime.py WORKER_PORTS), and a proof whose store failed there (an engine
# restarting, the controller's database down) failed on the controller's side; pgx says "conn
# closed" when that connection went away mid-query.
CONTROLLER_SIDE = r"(127\.0\.0\.1|localhost|\[::1\]):(5433|9042|1234)\M|\mconn closed\M"
NOT_THE_MACHINE = r"no task found|" + CONTROLLER_SIDE

# Each worker's PSProve results since it began proving, those in the window apart, its latest
# error that is its own, and the failures on the controller's side in the window: curio's own
# record of what it finished (task_type_handler.go:484-489).
_RESULTS = """
WITH f(addr, since, wsince) AS (
    SELECT * FROM unnest(%(addrs)s::text[], %(since)s::timestamp[], %(wsince)s::timestamp[])
),
h AS (
    SELECT completed_by_host_and_port, work_end, result,
           NOT result AND coalesce(err, '') !~* %(theirs)s AS failed,
           NOT result AND coalesce(err, '') ~* %(controller)s AS controller, err
    FROM harmony_task_history
    WHERE name = %(name)s AND completed_by_host_and_port = ANY(%(addrs)s)
)
SELECT f.addr,
       count(*) FILTER (WHERE h.result AND h.work_end >= f.wsince),
       count(*) FILTER (WHERE h.failed AND h.work_end >= f.wsince),
       count(*) FILTER (WHERE h.result),
       count(*) FILTER (WHERE h.failed),
       (array_agg(h.err ORDER BY h.work_end DESC) FILTER (WHERE h.failed))[1],
       max(h.work_end) FILTER (WHERE h.failed),
       count(*) FILTER (WHERE h.controller AND h.work_end >= f.wsince)
FROM f JOIN h ON h.completed_by_host_and_port = f.addr AND h.work_end >= f.since
GROUP BY f.addr
"""
_TASKS = """
SELECT count(*) FILTER (WHERE name = %(prove)s AND owner_id IS NULL),
       count(*) FILTER (WHERE name = %(prove)s AND owner_id IS NOT NULL),
       count(*) FILTER (WHERE name = %(req)s),
       (SELECT count(*) FROM harmony_machines)
FROM harmony_task
"""
# ... and since when it has waited to run: update_time is written when a task is posted or
# released (harmony/harmonytask/harmonytask.go:762, task_type_handler.go:456,476), not at the
# claim (task_type_handler.go:175-178); the request task is posted when the queue runs low and
# claimed at the next scheduling poll, so this is its run's start within that poll. The run
# asking now, whose exposure without a request yet is evidence of the rate too.
_REQUEST_OWNER = """
SELECT t.owner_id, m.host_and_port, t.update_time FROM harmony_task t
LEFT JOIN harmony_machines m ON m.id = t.owner_id
WHERE t.name = %(req)s AND t.owner_id IS NOT NULL ORDER BY t.id LIMIT 1
"""
_MARKET = """
SELECT count(*), count(*) FILTER (WHERE compute_done), count(*) FILTER (WHERE submit_done),
       count(*) FILTER (WHERE submit_done AND was_pow)
FROM proofshare_queue WHERE obtained_at >= %(since)s
"""
# Payments for the requests taken in the window (one cohort: taken → computed → submitted →
# paid, so that paid never exceeds what was submitted unpaid-challenges aside).
_PAID = """
SELECT count(*) FROM proofshare_provider_payments p
WHERE p.request_cid IN (SELECT request_cid FROM proofshare_queue WHERE obtained_at >= %(since)s)
"""
# Payments recorded in the window, by when they came (the submit task inserts each one as the
# market answers the completion, tasks/proofshare/task_submit.go:189-192): the headline's paid
# proofs, which move with the work as it is paid, not with when its request arrived.
_PAID_RECENT = """
SELECT count(*) FROM proofshare_provider_payments WHERE created_at >= %(since)s
"""
# curio's own count of the requests waiting for a node (tasks/proofshare/task_request.go:85-90:
# the queue its request task keeps between 5 and 8), with the oldest one's arrival
_UNCLAIMED = """
SELECT count(*), min(q.obtained_at)
FROM proofshare_queue q
LEFT JOIN harmony_task t ON t.id = q.compute_task_id
WHERE q.compute_done = FALSE AND (q.compute_task_id IS NULL OR t.owner_id IS NULL)
"""
# The request task's runs that ended in the window (each one from its claim to its record,
# harmony/harmonytask/task_type_handler.go:484-486: it asks until the queue is refilled,
# tasks/proofshare/task_request.go:162-380) and the requests it obtained meanwhile. A run's first
# poll (the rows within a second of its first: one poll's inserts, ProofRequestPollInterval is
# 3 s apart) is left out, and its time is counted from there: what the market held for this
# provider when it began asking is a backlog, not a rate, and counted in it would make a short
# run's demand look larger than it is (a run of three requests whose first is such a batch
# would read half again the rate).
_REQUEST_RUNS = """
WITH runs AS (
    SELECT row_number() OVER () AS id, greatest(work_start, %(since)s) AS s, work_end AS e
    FROM harmony_task_history
    WHERE name = %(req)s AND work_end >= %(since)s AND work_end >= work_start
),
got AS (
    SELECT r.id, q.obtained_at AT TIME ZONE 'UTC' AS t
    FROM runs r JOIN proofshare_queue q ON (q.obtained_at AT TIME ZONE 'UTC') BETWEEN r.s AND r.e
),
firsts AS (SELECT id, min(t) AS f FROM got GROUP BY id)
SELECT coalesce(sum(extract(epoch FROM (r.e - coalesce(f.f, r.s)))), 0)::float8,
       (SELECT count(*) FROM got g JOIN firsts f ON f.id = g.id
        WHERE g.t >= f.f + INTERVAL '1 second')
FROM runs r LEFT JOIN firsts f ON f.id = r.id
"""
# The same runs one by one (vastui/engine/demandshift.py tests the stream for changes): each
# run's end, the seconds it asked from its first poll's batch on, the requests obtained after it
# and in that batch.
_REQUEST_RUN_LIST = """
WITH runs AS (
    SELECT row_number() OVER (ORDER BY work_end) AS id, work_start AS s, work_end AS e
    FROM harmony_task_history
    WHERE name = %(req)s AND work_end > %(since)s AND work_end >= work_start
    ORDER BY work_end LIMIT 20000
),
got AS (
    SELECT r.id, q.obtained_at AT TIME ZONE 'UTC' AS t
    FROM runs r JOIN proofshare_queue q ON (q.obtained_at AT TIME ZONE 'UTC') BETWEEN r.s AND r.e
),
firsts AS (SELECT id, min(t) AS f FROM got GROUP BY id)
SELECT r.e, extract(epoch FROM (r.e - coalesce(f.f, r.s)))::float8,
       (SELECT count(*) FROM got g WHERE g.id = r.id AND g.t >= f.f + INTERVAL '1 second'),
       (SELECT count(*) FROM got g WHERE g.id = r.id AND g.t < f.f + INTERVAL '1 second')
FROM runs r LEFT JOIN firsts f ON f.id = r.id ORDER BY r.e
"""
# What the market paid over the window, attoFIL: each wallet's voucher is cumulative
# (ProofReward.CumulativeAmount, lib/proofsvc/common/types.go:45-53; the submit task records
# each one, tasks/proofshare/task_submit.go:189-192), so the window's pay is its highest in the
# window less its highest before.
_REVENUE = """
SELECT coalesce(sum(w.hi - coalesce(w.lo, 0)), 0)::text FROM (
    SELECT p.provider_id, max(p.payment_cumulative_amount::numeric) AS hi,
           (SELECT max(b.payment_cumulative_amount::numeric) FROM proofshare_provider_payments b
            WHERE b.provider_id = p.provider_id AND b.created_at < %(since)s) AS lo
    FROM proofshare_provider_payments p WHERE p.created_at >= %(since)s
    GROUP BY p.provider_id
) w
"""
# The ask price the operator set in curio (proofshare_meta.pprice, FIL per proof: the web UI's
# "Price (FIL/p)", Snark-Market.md "Pricing")
_ASK = "SELECT pprice FROM proofshare_meta LIMIT 1"
_OVERDUE = """
SELECT count(*) FROM proofshare_queue WHERE NOT submit_done AND obtained_at < %(due)s
"""
_SIGNING = """
SELECT count(*) FILTER (WHERE NOT result AND coalesce(err, '') ~* %(refused)s),
       (array_agg(err ORDER BY work_end DESC)
            FILTER (WHERE NOT result AND coalesce(err, '') ~* %(refused)s))[1],
       max(work_end) FILTER (WHERE NOT result AND coalesce(err, '') ~* %(refused)s),
       max(work_end) FILTER (WHERE result AND name = %(submit)s),
       (SELECT max(obtained_at) FROM proofshare_queue)
FROM harmony_task_history
WHERE name IN (%(req)s, %(submit)s) AND work_end >= %(since)s
"""
_CLUSTER_RESULTS = """
SELECT count(*) FILTER (WHERE result), count(*) FILTER (WHERE NOT result)
FROM harmony_task_history WHERE name = %(name)s AND work_end >= %(since)s
"""
_ROW_FOR_UPDATE = """
SELECT m.id, m.host_and_port, d.machine_name, m.last_contact, coalesce(m.unschedulable, false)
FROM harmony_machines m LEFT JOIN harmony_machine_details d ON d.machine_id = m.id
WHERE m.host_and_port = %(addr)s
ORDER BY m.id
FOR UPDATE OF m
"""


class ClusterReader:
    """One connection to curio's database (reopened after any failure), its readings and its
    two writes. ``password`` is a secret: it is never logged and is removed from errors."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        user: str,
        dbname: str,
        password: str | None,
        application: str = "vastui",
        configured: bool = True,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.host = host
        self.port = port
        self.user = user
        self.dbname = dbname
        self._password = password
        self.application = application
        self._conn: Any = None  # psycopg.AsyncConnection
        self._lock = asyncio.Lock()
        self.enabled = True
        # The operator named this cluster (vastui/engine/runtime.py ``cluster_configured``):
        # nothing answering there is an outage, never a reason to stop reading it.
        self.configured = configured
        self._monotonic = monotonic  # the backoff's clock (a test's, the engine's)
        self.last_error: str | None = None
        self.last_ok_at: float | None = None  # engine clock of the last good reading
        self._failures = 0
        self._retry_at = 0.0  # self._monotonic() before which it is not tried again

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def _clean(self, exc: BaseException) -> str:
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return sanitize_line(redact(text, [self._password]), 300)

    async def _connect(self) -> Any:
        import psycopg
        from psycopg.conninfo import make_conninfo

        if self._conn is not None and not self._conn.closed:
            return self._conn
        info = make_conninfo(
            host=self.host, port=str(self.port), user=self.user, dbname=self.dbname,
            password=self._password or "", connect_timeout=str(CONNECT_TIMEOUT_S),
            application_name=self.application,
            options=f"-c statement_timeout={STATEMENT_TIMEOUT_MS} -c TimeZone=UTC",
        )  # fmt: skip
        try:
            self._conn = await psycopg.AsyncConnection.connect(info, autocommit=True)
        except psycopg.OperationalError as exc:
            line = self._clean(exc)
            if "refused" in line.lower() or "could not translate host" in line.lower():
                raise ClusterAbsent(f"curio's database at {self.address}: {line}") from None
            raise ClusterError(f"curio's database at {self.address}: {line}") from None
        return self._conn

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                await conn.close()
            except Exception as exc:  # closing a broken connection: nothing left to do
                log.debug("closing the cluster connection: %s", self._clean(exc))

    async def _run(self, work: Any) -> Any:
        """Run ``work(conn)`` under the lock and a time limit; any failure closes the
        connection (the next call reconnects) and is one ClusterError line."""
        import psycopg

        async with self._lock:
            wait = self._retry_at - self._monotonic()
            if wait > 0 and self.last_error is not None:
                raise ClusterError(f"{self.last_error} (tried again in {wait:.0f} s)")
            try:
                conn = await self._connect()
                for attempt in range(SERIALIZATION_RETRIES):
                    try:
                        async with asyncio.timeout(READ_TIMEOUT_S):
                            result = await work(conn)
                        break
                    except (psycopg.errors.SerializationFailure, psycopg.errors.DeadlockDetected):
                        # a conflict with a node's own write (YugabyteDB reports it as curio's
                        # harmonyquery retries it, SQLSTATE 40001): the transaction again
                        if attempt == SERIALIZATION_RETRIES - 1:
                            raise
            except (ClusterError, psycopg.Error, OSError, TimeoutError) as exc:
                await self.close()
                if isinstance(exc, ClusterError):
                    error = exc
                else:
                    what = "timed out" if isinstance(exc, TimeoutError) else self._clean(exc)
                    error = ClusterError(f"curio's database at {self.address}: {what}")
                self._failures += 1
                first, cap = BACKOFF_S
                self._retry_at = self._monotonic() + min(cap, first * 2 ** (self._failures - 1))
                self.last_error = str(error)
                raise error from None
            self._failures, self._retry_at = 0, 0.0
            return result

    async def probe(self) -> None:
        """One round trip; ClusterAbsent when nothing answers there."""

        async def work(conn: Any) -> None:
            await conn.execute("SELECT 1 FROM harmony_machines LIMIT 1")

        await self._run(work)

    # -- reading ----------------------------------------------------------------------------

    async def read(
        self, workers: Sequence[Worker], now: float, window_s: float, deadline_s: float = 2700.0
    ) -> ClusterView:
        """Each worker's state and the cluster's totals; ``deadline_s``: the market's deadline
        (Snark-Market.md:169), past which a request not yet submitted is counted overdue."""
        addrs = sorted({w.host_and_port for w in workers})
        since = to_db_time(now - window_s)

        async def work(conn: Any) -> ClusterView:
            rows = await _fetch(conn, _ROWS, {"addrs": addrs})
            by_addr: dict[str, list[Row]] = {}
            for r in rows:
                row = Row(int(r[0]), str(r[1]), r[2], from_db_time(r[3]), bool(r[4]))
                by_addr.setdefault(row.host_and_port, []).append(row)
            own: dict[int, Row] = {}
            foreign: dict[int, str] = {}
            for w in workers:
                candidates = by_addr.get(w.host_and_port, [])
                mine = [row for row in candidates if belongs(w, row)]
                if mine:
                    own[w.vast_id] = mine[0]
                others = [row for row in candidates if not belongs(w, row)]
                if others:
                    o = others[0]
                    foreign[w.vast_id] = f"machine {o.machine_id}" + (
                        f" ({sanitize_line(o.name, 60)})" if o.name else ""
                    )
            held: dict[int, dict[str, int]] = {}
            ids = sorted({row.machine_id for row in own.values()})
            for owner, name, n in await _fetch(conn, _HELD, {"ids": ids}):
                held.setdefault(int(owner), {})[str(name)] = _count(n)
            params = {
                "addrs": [w.host_and_port for w in workers],
                "since": [to_db_time(w.since) for w in workers],
                "wsince": [to_db_time(max(w.since, w.window_since)) for w in workers],
                "name": PSPROVE,
                "theirs": NOT_THE_MACHINE,
                "controller": CONTROLLER_SIDE,
            }
            results: dict[str, tuple[Any, ...]] = {}
            if workers:
                results = {str(r[0]): tuple(r[1:]) for r in await _fetch(conn, _RESULTS, params)}
            states = {}
            for w in workers:
                got = own.get(w.vast_id)
                res = results.get(w.host_and_port, (0, 0, 0, 0, None, None, 0))
                err = res[4] if isinstance(res[4], str) else None
                counts = held.get(got.machine_id, {}) if got is not None else {}
                states[w.vast_id] = MachineState(
                    vast_id=w.vast_id, host_and_port=w.host_and_port,
                    machine_id=got.machine_id if got else None,
                    last_contact=got.last_contact if got else None,
                    cordoned=got.cordoned if got else False,
                    held=sum(counts.values()), held_by_name=counts,
                    done=_count(res[0]), failed=_count(res[1]), done_total=_count(res[2]),
                    failed_total=_count(res[3]),
                    last_error=sanitize_line(err, 500) if err else None,
                    last_error_at=from_db_time(res[5]), foreign=foreign.get(w.vast_id),
                    failed_controller=_count(res[6]),
                )  # fmt: skip
            totals = await self._totals(conn, since, to_db_time(now - deadline_s))
            return ClusterView(now, window_s, states, totals)

        view: ClusterView = await self._run(work)
        self.last_ok_at, self.last_error = now, None
        return view

    async def _totals(self, conn: Any, since: datetime, due: datetime) -> Totals:
        tasks = (await _fetch(conn, _TASKS, {"prove": PSPROVE, "req": PSHARE_REQUEST}))[0]
        owner = await _fetch(conn, _REQUEST_OWNER, {"req": PSHARE_REQUEST})
        since_tz = since.replace(tzinfo=UTC)
        market = (await _fetch(conn, _MARKET, {"since": since_tz}))[0]
        paid = (await _fetch(conn, _PAID, {"since": since_tz}))[0]
        paid_recent = (await _fetch(conn, _PAID_RECENT, {"since": since_tz}))[0]
        done = (await _fetch(conn, _CLUSTER_RESULTS, {"name": PSPROVE, "since": since}))[0]
        unclaimed = (await _fetch(conn, _UNCLAIMED, {}))[0]
        overdue = (await _fetch(conn, _OVERDUE, {"due": due.replace(tzinfo=UTC)}))[0]
        runs = (await _fetch(conn, _REQUEST_RUNS, {"req": PSHARE_REQUEST, "since": since}))[0]
        signing = (
            await _fetch(conn, _SIGNING, {
                "req": PSHARE_REQUEST, "submit": PSHARE_SUBMIT, "since": since,
                "refused": SIGN_REFUSED,
            })
        )[0]  # fmt: skip
        signed = [t for t in (from_db_time(signing[3]), from_db_time(signing[4])) if t is not None]
        revenue = (await _fetch(conn, _REVENUE, {"since": since_tz}))[0]
        ask = await _fetch(conn, _ASK, {})
        return Totals(
            waiting=_count(tasks[0]), claimed=_count(tasks[1]), request_task=_count(tasks[2]) > 0,
            machines=_count(tasks[3]),
            request_owner=int(owner[0][0]) if owner else None,
            request_owner_addr=str(owner[0][1]) if owner and owner[0][1] else None,
            request_asking_since=from_db_time(owner[0][2]) if owner else None,
            taken=_count(market[0]), computed=_count(market[1]), submitted=_count(market[2]),
            challenges=_count(market[3]), paid=_count(paid[0]),
            paid_recent=_count(paid_recent[0]),
            cluster_done=_count(done[0]), cluster_failed=_count(done[1]),
            unclaimed=_count(unclaimed[0]), oldest_unclaimed_at=from_db_time(unclaimed[1]),
            request_runs_s=_seconds(runs[0]), request_obtained=_count(runs[1]),
            overdue=_count(overdue[0]),
            sign_refused=_count(signing[0]),
            sign_error=sanitize_line(signing[1], 300) if isinstance(signing[1], str) else None,
            sign_refused_at=from_db_time(signing[2]), signed_at=max(signed, default=None),
            paid_fil=_fil(revenue[0]), ask_fil=_fil(ask[0][0]) if ask else None,
        )  # fmt: skip

    async def request_runs(self, since: float, now: float) -> list[Run]:
        """The request task's runs that ended after ``since`` (engine clock), one by one."""

        async def work(conn: Any) -> list[Run]:
            rows = await _fetch(conn, _REQUEST_RUN_LIST,
                                {"req": PSHARE_REQUEST, "since": to_db_time(since)})  # fmt: skip
            out = []
            for end, asked, got, first in rows:
                t = from_db_time(end)
                # bounded by physics: a run cannot end in the future nor ask longer than a day
                if t is None or t > now + 60.0:
                    continue
                asked_s = min(max(0.0, _seconds(asked)), 86400.0)
                out.append(Run(t, asked_s, _count(got), _count(first)))
            return out

        runs: list[Run] = await self._run(work)
        return runs

    async def rows_at(self, host_and_port: str) -> list[Row]:
        async def work(conn: Any) -> list[Row]:
            rows = await _fetch(conn, _ROWS, {"addrs": [host_and_port]})
            return [Row(int(r[0]), str(r[1]), r[2], from_db_time(r[3]), bool(r[4])) for r in rows]

        result: list[Row] = await self._run(work)
        return result

    async def named_rows(self, *prefixes: str) -> list[Row]:
        """Rows whose node name starts with one of ``prefixes`` (this fleet's:
        ``identity.node_prefixes``), whoever's instance they were: a row no record of ours
        matches is an orphan (:func:`orphans`)."""

        async def work(conn: Any) -> list[Row]:
            rows = await _fetch(
                conn,
                "SELECT m.id, m.host_and_port, d.machine_name, m.last_contact,"
                " coalesce(m.unschedulable, false) FROM harmony_machines m"
                " JOIN harmony_machine_details d ON d.machine_id = m.id"
                " WHERE EXISTS (SELECT 1 FROM unnest(%(prefixes)s::text[]) p"
                " WHERE starts_with(d.machine_name, p)) ORDER BY m.id",
                {"prefixes": list(prefixes)},
            )
            return [Row(int(r[0]), str(r[1]), r[2], from_db_time(r[3]), bool(r[4])) for r in rows]

        result: list[Row] = await self._run(work)
        return result

    async def identity_in_use(self, worker: Worker, now: float) -> str | None:
        """Whether another live machine (a heartbeat within curio's 10 minutes) holds this
        worker's address: one line saying which, else None."""
        return (await self.live_holders([worker], now)).get(worker.host_and_port)

    async def live_holders(self, workers: Sequence[Worker], now: float) -> dict[str, str]:
        """Which of these workers' addresses another live machine holds (a heartbeat within
        curio's 10 minutes; a row with the worker's own node name is its earlier incarnation,
        not another node), in one reading: address -> one line saying which."""
        wanted = {w.host_and_port: w for w in workers}

        async def work(conn: Any) -> list[Row]:
            rows = await _fetch(conn, _ROWS, {"addrs": sorted(wanted)})
            return [Row(int(r[0]), str(r[1]), r[2], from_db_time(r[3]), bool(r[4])) for r in rows]

        rows: list[Row] = await self._run(work) if wanted else []
        out: dict[str, str] = {}
        for row in rows:
            worker = wanted.get(row.host_and_port)
            if worker is None or row.host_and_port in out or row.name == worker.node_name:
                continue
            if row.last_contact is None or now - row.last_contact > LOOKS_DEAD_S:
                continue
            ago = max(0.0, now - row.last_contact)
            who = f" (node {sanitize_line(row.name, 60)!r})" if row.name else ""
            out[row.host_and_port] = (
                f"curio identity {row.host_and_port} is already used by live machine "
                f"{row.machine_id}{who}, last contact {ago / 60:.0f} min ago: another fleet or "
                "node uses this address; give this fleet its own [curio] listen_port_base"
            )
        return out

    # -- the two writes ---------------------------------------------------------------------

    async def cordon(self, worker: Worker) -> int | None:
        """Cordon the worker's machine (rpc.go:376-378, guarded by its identity). Its machine
        id, or None when the cluster has no row that is this worker's."""

        async def work(conn: Any) -> int | None:
            async with conn.transaction():
                row = await _own_row(conn, worker)
                if row is None:
                    return None
                await conn.execute(
                    "UPDATE harmony_machines SET unschedulable = true "
                    "WHERE id = %(id)s AND host_and_port = %(addr)s",
                    {"id": row.machine_id, "addr": worker.host_and_port},
                )
                return row.machine_id

        result: int | None = await self._run(work)
        return result

    async def release(self, worker: Worker, *, keep_row: bool = False) -> tuple[int, int | None]:
        """Free the tasks the worker's machine holds and (unless ``keep_row``, an outbid
        worker that may resume) delete its row, in one transaction. (tasks freed, machine id);
        (0, None) when the cluster has no row that is this worker's."""

        async def work(conn: Any) -> tuple[int, int | None]:
            async with conn.transaction():
                row = await _own_row(conn, worker)
                if row is None:
                    return 0, None
                cur = await conn.execute(
                    "UPDATE harmony_task SET owner_id = NULL WHERE owner_id = %(id)s",
                    {"id": row.machine_id},
                )
                freed = max(0, cur.rowcount)
                if not keep_row:
                    await conn.execute(
                        "DELETE FROM harmony_machines WHERE id = %(id)s AND host_and_port = %(a)s",
                        {"id": row.machine_id, "a": worker.host_and_port},
                    )
                return freed, row.machine_id

        result: tuple[int, int | None] = await self._run(work)
        return result


async def _fetch(conn: Any, sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    cur = await conn.execute(sql, params)
    rows: list[tuple[Any, ...]] = await cur.fetchall()
    return rows


async def _own_row(conn: Any, worker: Worker) -> Row | None:
    rows = await _fetch(conn, _ROW_FOR_UPDATE, {"addr": worker.host_and_port})
    for r in rows:
        row = Row(int(r[0]), str(r[1]), r[2], from_db_time(r[3]), bool(r[4]))
        if belongs(worker, row):
            return row
    return None


def split_addr(addr: str, default_port: int = 5433) -> tuple[str, int]:
    host, sep, port = addr.rpartition(":")
    if not sep:
        return addr or "127.0.0.1", default_port
    return host or "127.0.0.1", int(port)


def only_live(states: Iterable[MachineState], now: float) -> list[MachineState]:
    return [
        s for s in states if s.last_contact is not None and now - s.last_contact <= LOOKS_DEAD_S
    ]


__all__ = [
    "LOOKS_DEAD_S",
    "PSHARE_REQUEST",
    "PSPROVE",
    "ClusterAbsent",
    "ClusterError",
    "ClusterReader",
    "ClusterView",
    "MachineState",
    "Row",
    "Totals",
    "Worker",
    "belongs",
    "cluster_held",
    "from_db_time",
    "orphans",
    "to_db_time",
]
