"""Versioned schema migrations, tracked with ``PRAGMA user_version``.

``MIGRATIONS[i]`` upgrades a database from version ``i`` to ``i + 1``. Each script is applied in
its own transaction together with the ``user_version`` bump, so a failed migration leaves the
database at the previous version. Never edit a released script; append a new one.
"""

from __future__ import annotations

import sqlite3

import aiosqlite

_V1 = """
CREATE TABLE instances (
    vast_id          INTEGER PRIMARY KEY,
    label            TEXT,
    offer_id         INTEGER,
    machine_id       INTEGER,
    host_id          INTEGER,
    gpu_name         TEXT,
    num_gpus         INTEGER,
    dph_total        REAL,
    cpu_ram_gb       REAL,
    geolocation      TEXT,
    image            TEXT,
    image_digest     TEXT,
    state            TEXT NOT NULL DEFAULT 'loading'
                     CHECK (state IN ('loading','setup','paramfetch','benchmark','proving',
                                      'killed','legacy')),
    stage_started_at REAL,
    created_at       REAL NOT NULL,
    loading_at       REAL,
    setup_at         REAL,
    paramfetch_at    REAL,
    benchmark_at     REAL,
    proving_at       REAL,
    killed_at        REAL,
    bench_rate       REAL,
    min_rate         REAL,
    bench_outcome    TEXT,
    failed_stage     TEXT,
    kill_kind        TEXT,
    kill_reason      TEXT,
    error_lines      TEXT,
    ssh_host         TEXT,
    ssh_port         INTEGER,
    source           TEXT NOT NULL DEFAULT 'vastui' CHECK (source IN ('vastui','legacy'))
);
CREATE INDEX instances_state ON instances(state);
CREATE INDEX instances_machine ON instances(machine_id);

CREATE TABLE bad_machines (
    machine_id INTEGER PRIMARY KEY CHECK (machine_id > 0),
    host_id    INTEGER,
    gpu_name   TEXT,
    reason     TEXT NOT NULL,
    source     TEXT NOT NULL CHECK (source IN ('manual','automatic','legacy')),
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    expires_at REAL,
    strikes    INTEGER NOT NULL DEFAULT 1,
    evidence   TEXT
);

CREATE TABLE legacy_review (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    kind            TEXT NOT NULL CHECK (kind IN ('bad_host','perf')),
    host_id         INTEGER NOT NULL,
    gpu_name        TEXT,
    num_gpus        INTEGER,
    bench_rate      REAL,
    reason          TEXT,
    legacy_added_at REAL,
    imported_at     REAL NOT NULL,
    source_path     TEXT NOT NULL,
    UNIQUE (kind, host_id, gpu_name, num_gpus)
);
-- SQLite treats NULLs as distinct in UNIQUE constraints; bad_host rows have NULL gpu_name and
-- num_gpus, so this expression index is what actually makes re-imports idempotent.
CREATE UNIQUE INDEX legacy_review_identity
    ON legacy_review(kind, host_id, COALESCE(gpu_name, ''), COALESCE(num_gpus, -1));

CREATE TABLE machine_perf (
    machine_id  INTEGER NOT NULL CHECK (machine_id > 0),
    gpu_name    TEXT NOT NULL,
    num_gpus    INTEGER NOT NULL,
    best_rate   REAL NOT NULL,
    last_rate   REAL NOT NULL,
    samples     INTEGER NOT NULL DEFAULT 1,
    cpu_ram_gb  REAL,
    measured_at REAL NOT NULL,
    host_id     INTEGER,
    PRIMARY KEY (machine_id, gpu_name, num_gpus)
);

CREATE TABLE events (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    ts          REAL NOT NULL,
    kind        TEXT NOT NULL,
    instance_id INTEGER,
    machine_id  INTEGER,
    reason      TEXT NOT NULL,
    detail      TEXT
);
CREATE INDEX events_kind ON events(kind, id);
CREATE INDEX events_machine ON events(machine_id);
CREATE TRIGGER events_no_update BEFORE UPDATE ON events
BEGIN
    SELECT RAISE(ABORT, 'events is append-only: UPDATE refused');
END;
CREATE TRIGGER events_no_delete BEFORE DELETE ON events
BEGIN
    SELECT RAISE(ABORT, 'events is append-only: DELETE refused');
END;
"""

# Version 2: SSH host keys, trusted on first use and pinned per Vast instance. A changed key is
# never re-pinned automatically; the operator verifies it and forgets the old pin.
_V2 = """
CREATE TABLE host_keys (
    instance_id INTEGER PRIMARY KEY CHECK (instance_id > 0),
    host        TEXT NOT NULL,
    port        INTEGER NOT NULL CHECK (port > 0 AND port < 65536),
    public_key  TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    pinned_at   REAL NOT NULL
);
"""

# Version 3: the engine. Worker progress on instances, intents persisted before acting (so a
# crash between "decide" and "done" is recovered), commands from the console to a headless
# engine, and the one-engine-per-database lease.
_V3 = """
ALTER TABLE instances ADD COLUMN events_seen INTEGER NOT NULL DEFAULT 0;
ALTER TABLE instances ADD COLUMN bench_result TEXT;
ALTER TABLE instances ADD COLUMN vast_status TEXT;
ALTER TABLE instances ADD COLUMN status_msg TEXT;
ALTER TABLE instances ADD COLUMN last_seen_at REAL;
ALTER TABLE instances ADD COLUMN unhealthy_since REAL;
ALTER TABLE instances ADD COLUMN first_report_at REAL;
CREATE TABLE intents (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    kind        TEXT NOT NULL CHECK (kind IN ('rent','destroy')),
    status      TEXT NOT NULL DEFAULT 'pending'
                CHECK (status IN ('pending','done','failed','dry_run')),
    label       TEXT UNIQUE,
    offer_id    INTEGER,
    machine_id  INTEGER,
    instance_id INTEGER,
    reason      TEXT NOT NULL,
    detail      TEXT,
    created_at  REAL NOT NULL,
    updated_at  REAL NOT NULL,
    note        TEXT
);
CREATE INDEX intents_pending ON intents(status, kind);
CREATE TABLE commands (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    kind       TEXT NOT NULL CHECK (kind IN ('deploy','destroy','ignore','unignore')),
    args       TEXT NOT NULL,
    status     TEXT NOT NULL DEFAULT 'pending'
               CHECK (status IN ('pending','running','done','failed')),
    source     TEXT NOT NULL DEFAULT 'console',
    created_at REAL NOT NULL,
    done_at    REAL,
    result     TEXT
);
CREATE INDEX commands_pending ON commands(status, id);
CREATE TABLE lease (
    name         TEXT PRIMARY KEY,
    owner        TEXT NOT NULL,
    pid          INTEGER NOT NULL,
    hostname     TEXT NOT NULL,
    mode         TEXT NOT NULL,
    acquired_at  REAL NOT NULL,
    heartbeat_at REAL NOT NULL,
    expires_at   REAL NOT NULL
);
"""

# Version 4: production is measured. Proofs completed and failed since the benchmark and the
# measured rate per instance (prod_state keeps the samples behind them), failed benchmark proofs,
# and strikes: marks against a machine that are not yet a ban (strikes_to_ban of them are).
_V4 = """
ALTER TABLE instances ADD COLUMN bench_failed INTEGER;
ALTER TABLE instances ADD COLUMN prod_completed INTEGER;
ALTER TABLE instances ADD COLUMN prod_failed INTEGER;
ALTER TABLE instances ADD COLUMN prod_rate REAL;
ALTER TABLE instances ADD COLUMN prod_checked_at REAL;
ALTER TABLE instances ADD COLUMN prod_state TEXT;
CREATE TABLE strikes (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    machine_id  INTEGER NOT NULL CHECK (machine_id > 0),
    instance_id INTEGER,
    kind        TEXT NOT NULL,
    reason      TEXT NOT NULL,
    ts          REAL NOT NULL
);
CREATE INDEX strikes_machine ON strikes(machine_id, ts);
"""

# Version 5: the engine explains itself. One row, rewritten every reconcile cycle: the target,
# the workers by stage, and why the fleet is below target (a typed kind, one line of text, the
# best candidate offer), in the engine's clock; reason_since is when that reason began.
_V5 = """
CREATE TABLE engine_status (
    id           INTEGER PRIMARY KEY CHECK (id = 1),
    target       INTEGER NOT NULL,
    workers      INTEGER NOT NULL,
    by_stage     TEXT NOT NULL,
    reason_kind  TEXT,
    reason       TEXT,
    best         TEXT,
    dry_run      INTEGER NOT NULL DEFAULT 0 CHECK (dry_run IN (0, 1)),
    updated_at   REAL NOT NULL,
    reason_since REAL
);
"""

# The engine's ranked offers, for consoles attached to it: they show what the engine would
# rent, not a search of their own.
_V6 = """
CREATE TABLE engine_offers (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    filter      TEXT NOT NULL,
    body        TEXT NOT NULL,
    updated_at  REAL NOT NULL
);
"""

# Version 7: curio's cluster, where the workers meet. Each worker gets a runner identity, unique
# and monotonic per fleet database (as the original vast-manager's ``runner_id``,
# cmd/vast-manager/main.go: ``runner_id INTEGER UNIQUE``, a ``runner_id_seq`` counter): its curio
# listens on an address derived from it, so no two workers are one curio machine. Also what the
# worker says of the controller's tunnel (down since, why), the MaxPending its curio runs with
# (sized to curio's ProveTimeout), its curio node as the cluster knows it, and the time its
# parameter fetch was given (it follows the offer's download speed).
_V7 = """
ALTER TABLE instances ADD COLUMN runner_id INTEGER CHECK (runner_id IS NULL OR runner_id > 0);
ALTER TABLE instances ADD COLUMN tunnel_down_since REAL;
ALTER TABLE instances ADD COLUMN tunnel_detail TEXT;
ALTER TABLE instances ADD COLUMN max_pending INTEGER;
ALTER TABLE instances ADD COLUMN curio_info TEXT;
ALTER TABLE instances ADD COLUMN paramfetch_timeout INTEGER;
CREATE UNIQUE INDEX instances_runner ON instances(runner_id) WHERE runner_id IS NOT NULL;
CREATE TABLE counters (
    key   TEXT PRIMARY KEY,
    value INTEGER NOT NULL CHECK (value >= 0)
);
INSERT INTO counters (key, value) VALUES ('runner_id_seq', 0);
"""

# Version 8: one Vast account, several controllers. Each database has a fleet identity of its
# own (random, made once under the migration lock), carried in every label it rents with, so
# two controllers never claim one label; an instance is this database's only if it intended it
# (an intent with its label). Instances with vastui's label that it never intended are another
# controller's: seen, shown apart, never adopted, counted or destroyed (foreign_instances, as of
# the engine's last list). ``meta`` also remembers which foreign fleets were warned about.
# The engine's status also says when it was written on the wall clock and whether the engine's
# clock is simulated, so that a reader can tell a live fleet from one last seen minutes ago.
_V8 = """
ALTER TABLE engine_status ADD COLUMN wall_at REAL;
ALTER TABLE engine_status ADD COLUMN simulated INTEGER NOT NULL DEFAULT 0
    CHECK (simulated IN (0, 1));
CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
INSERT INTO meta (key, value) VALUES ('fleet_id', lower(hex(randomblob(4))));
CREATE TABLE foreign_instances (
    vast_id      INTEGER PRIMARY KEY,
    label        TEXT NOT NULL,
    owner        TEXT NOT NULL,
    machine_id   INTEGER,
    gpu_name     TEXT,
    num_gpus     INTEGER,
    dph_total    REAL,
    vast_status  TEXT,
    first_seen_at REAL NOT NULL,
    last_seen_at  REAL NOT NULL
);
"""

# Version 9: interruptible (bid) instances. The bid and its cap (the highest bid at which the
# machine still beats on-demand and the budget), the storage part of the price (what a stopped
# instance bills), since when it is outbid, how often it was, and the seconds it spent stopped.
_V9 = """
ALTER TABLE instances ADD COLUMN is_bid INTEGER NOT NULL DEFAULT 0 CHECK (is_bid IN (0, 1));
ALTER TABLE instances ADD COLUMN bid_price REAL;
ALTER TABLE instances ADD COLUMN bid_cap REAL;
ALTER TABLE instances ADD COLUMN storage_dph REAL;
ALTER TABLE instances ADD COLUMN outbid_since REAL;
ALTER TABLE instances ADD COLUMN interruptions INTEGER NOT NULL DEFAULT 0
    CHECK (interruptions >= 0);
ALTER TABLE instances ADD COLUMN stopped_s REAL NOT NULL DEFAULT 0 CHECK (stopped_s >= 0);
"""

# Version 10: a bad-list row's count is of the times the machine was banned (a repeat ban adds
# one), not of the rows of ``strikes`` (the marks that may lead to a ban): it is named so.
_V10 = """
ALTER TABLE bad_machines RENAME COLUMN strikes TO bans;
"""

# The money limits the engine works under, for `vastui status`, the console's strip and an
# attached console (issue 20): the account's credit as last read, today's (UTC) spend and
# its cap, the fleet's $/h and its cap.
_V11 = """
ALTER TABLE engine_status ADD COLUMN credit REAL;
ALTER TABLE engine_status ADD COLUMN spent_today REAL;
ALTER TABLE engine_status ADD COLUMN daily_budget REAL;
ALTER TABLE engine_status ADD COLUMN dph REAL;
ALTER TABLE engine_status ADD COLUMN dph_cap REAL;
"""

# curio's cluster as the engine reads it (issue 27): each worker's last reading there (JSON:
# vastui/engine/cluster.py MachineState), its drain (cordoned at, destroyed by the deadline) and
# the release of its tasks once destroyed (when, how many). Rows killed before this version are
# not owed a release: they are marked released at their kill. The engine's status carries the
# cluster's totals and its reader's state.
_V12 = """
ALTER TABLE instances ADD COLUMN cluster_state TEXT;
ALTER TABLE instances ADD COLUMN cluster_checked_at REAL;
ALTER TABLE instances ADD COLUMN drain_started_at REAL;
ALTER TABLE instances ADD COLUMN drain_deadline REAL;
ALTER TABLE instances ADD COLUMN released_at REAL;
ALTER TABLE instances ADD COLUMN released_tasks INTEGER;
UPDATE instances SET released_at = killed_at WHERE state = 'killed';
ALTER TABLE engine_status ADD COLUMN cluster TEXT;
"""

# The controller cut off from its workers (issue 28): the episode's newest line and its start
# (the engine's clock), for `vastui status`, the strip and an attached console.
_V13 = """
ALTER TABLE engine_status ADD COLUMN cut_off TEXT;
ALTER TABLE engine_status ADD COLUMN cut_off_since REAL;
"""

# Every cost counted (issue 30): when the instance began to run (Vast bills storage before
# that, the GPU from then on), the offer's link and its per-GB prices (the parameters, each
# request's download and each proof's upload are billed at them). The warm pool: stopped on
# purpose since, its start asked at (queued by Vast), and the seconds it spent pooled; the
# requests and proofs curio counted for it before a restart (its count starts again with its
# next proving stage: cluster.worker_of).
_V14 = """
ALTER TABLE instances ADD COLUMN running_at REAL;
ALTER TABLE instances ADD COLUMN inet_down REAL;
ALTER TABLE instances ADD COLUMN inet_down_cost REAL;
ALTER TABLE instances ADD COLUMN inet_up_cost REAL;
ALTER TABLE instances ADD COLUMN pooled_since REAL;
ALTER TABLE instances ADD COLUMN pool_start_at REAL;
ALTER TABLE instances ADD COLUMN pooled_s REAL NOT NULL DEFAULT 0 CHECK (pooled_s >= 0);
ALTER TABLE instances ADD COLUMN requests_carried INTEGER NOT NULL DEFAULT 0
    CHECK (requests_carried >= 0);
ALTER TABLE instances ADD COLUMN proofs_carried INTEGER NOT NULL DEFAULT 0
    CHECK (proofs_carried >= 0);
"""

# The fleet's headline (vastui/domain/delivery.py): delivered and paid proofs over the window,
# their cost and the capacity beside them, as the engine last counted them (JSON). A machine's
# record may be an aborted benchmark's pace (vastui/engine/policy.py bench_partial_record): its
# last rate is marked partial, and a partial never raises its best. A worker's latest closed
# stops (the warm pool, outbid), kept exactly: a window's cost does not change when one closes;
# and the parameters' first fetch, which a start from the warm pool does not repeat.
_V15 = """
ALTER TABLE engine_status ADD COLUMN delivery TEXT;
ALTER TABLE machine_perf ADD COLUMN last_partial INTEGER NOT NULL DEFAULT 0
    CHECK (last_partial IN (0, 1));
ALTER TABLE instances ADD COLUMN stops TEXT;
ALTER TABLE instances ADD COLUMN params_from REAL;
ALTER TABLE instances ADD COLUMN params_to REAL;
"""

MIGRATIONS: list[str] = [
    _V1, _V2, _V3, _V4, _V5, _V6, _V7, _V8, _V9, _V10, _V11, _V12, _V13, _V14, _V15,
]  # fmt: skip

SCHEMA_VERSION: int = len(MIGRATIONS)


async def current_version(conn: aiosqlite.Connection) -> int:
    async with conn.execute("PRAGMA user_version") as cur:
        row = await cur.fetchone()
    return int(row[0]) if row else 0


async def apply_migrations(conn: aiosqlite.Connection, from_version: int) -> int:
    """Apply every migration after ``from_version``; return the resulting version.

    All the steps run in one transaction that holds the write lock (``BEGIN IMMEDIATE``) and
    reads the version again under it: processes that open a fresh database at once (an engine
    started by systemd, ``vastui migrate`` beside it) wait for each other, and a step another
    process applied meanwhile is skipped rather than run twice ("table instances already
    exists"). Readers (WAL) see the database before or after, never half-way. The connection
    must be in autocommit mode (``isolation_level=None``).
    """
    if from_version >= len(MIGRATIONS):
        return from_version
    await conn.execute("BEGIN IMMEDIATE")
    try:
        version = await current_version(conn)
        while version < len(MIGRATIONS):
            for statement in _statements(MIGRATIONS[version]):
                await conn.execute(statement)
            version += 1
        await conn.execute(f"PRAGMA user_version = {version}")
        await conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            await conn.rollback()
        raise
    return version


def _statements(script: str) -> list[str]:
    """A migration script as single statements (a trigger's body stays whole): executescript
    would commit the transaction that holds the lock before it runs."""
    out: list[str] = []
    pending = ""
    for line in script.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            if pending.strip():
                out.append(pending.strip())
            pending = ""
    if pending.strip() and not pending.strip().startswith("--"):
        raise ValueError(f"incomplete statement in a migration: {pending.strip()[:80]!r}")
    return out
