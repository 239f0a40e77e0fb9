"""The vastui state store: one SQLite file (WAL, mode 0600) accessed through aiosqlite.

Design notes:

* One connection per :class:`Store`, in autocommit mode; every multi-statement write runs in an
  explicit ``BEGIN IMMEDIATE`` transaction. All access is serialized with an ``asyncio.Lock``
  so a reader never sees another coroutine's half-finished transaction.
* Times are REAL epoch seconds (UTC). Every writing method takes ``now=`` (default
  ``time.time()``) so callers and tests are deterministic.
* Invalid input raises :class:`StoreError` with a one-line message; SQLite failures inside a
  transaction are rolled back and re-raised as :class:`StoreError` too.
* The store's health is the engine's health (see ``health.py``): a database that cannot be
  written (full, read-only, I/O error), is corrupt, fails ``quick_check`` at open, holds a row
  that does not decode, or whose file was deleted or replaced under the open connection raises
  :class:`StoreFatal`; :meth:`Store.check_health` says so cheaply (a stat), every step.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import sqlite3
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, fields, replace
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

import aiosqlite

from vastui.config import ensure_parent_dir, open_private, tighten_private
from vastui.store.fleet import BAN_KEY, FleetOps, Intent
from vastui.store.records import BidHistory, bid_history, stamp

from .errors import StoreError, StoreFatal, StoreNotCurrent
from .health import FileIdentity, check_identity, decode_row, quick_check, store_error
from .migrations import SCHEMA_VERSION, apply_migrations, current_version
from .ownership import OwnershipOps
from .pause import PauseOps
from .records import (
    BAD_SOURCES,
    STAGES,
    STATES,
    BadEntry,
    BanSpec,
    Event,
    InstanceRecord,
    LegacyReviewEntry,
    PerfRecord,
)


@dataclass(frozen=True, slots=True)
class HostKeyRecord:
    """An SSH host key pinned (trust on first use) for one Vast instance."""

    instance_id: int
    host: str
    port: int
    public_key: str  # OpenSSH one-line form: "<type> <base64>" (no comment)
    fingerprint: str  # e.g. "SHA256:..."
    pinned_at: float

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> HostKeyRecord:
        return cls(
            instance_id=row["instance_id"],
            host=row["host"],
            port=row["port"],
            public_key=row["public_key"],
            fingerprint=row["fingerprint"],
            pinned_at=row["pinned_at"],
        )


# ---------------------------------------------------------------------------------------------
# validation helpers (shared with legacy.py)


def check_positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise StoreError(f"{name} must be a positive integer, got {value!r}")
    return value


def check_optional_positive_int(name: str, value: object) -> int | None:
    return None if value is None else check_positive_int(name, value)


def check_text(name: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise StoreError(f"{name} must be a non-empty string, got {value!r}")
    return value.strip()


def check_rate(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise StoreError(f"{name} must be a number, got {value!r}")
    rate = float(value)
    if not math.isfinite(rate) or rate < 0:
        raise StoreError(f"{name} must be a finite number >= 0, got {value!r}")
    return rate


def check_optional_time(name: str, value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise StoreError(f"{name} must be epoch seconds or None, got {value!r}")
    return float(value)


def _lines_json(name: str, lines: Iterable[str] | None) -> str | None:
    if lines is None:
        return None
    if isinstance(lines, str):
        lines = [lines]
    out = [str(line) for line in lines]
    return json.dumps(out, ensure_ascii=False)


def _detail_json(detail: Mapping[str, Any] | None) -> str | None:
    if detail is None:
        return None
    if not isinstance(detail, Mapping):
        raise StoreError(f"event detail must be a mapping, got {type(detail).__name__}")
    try:
        return json.dumps(dict(detail), ensure_ascii=False, sort_keys=True, default=str)
    except (TypeError, ValueError) as e:
        raise StoreError(f"event detail is not JSON-serializable: {e}") from e


_R = TypeVar("_R")
_INSTANCE_COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(InstanceRecord))
_BAD_RANK = {source: rank for rank, source in enumerate(BAD_SOURCES)}  # lower = stronger


def _check_ban(ban: BanSpec) -> BanSpec:
    """A ban fit to record, or StoreError naming what is wrong."""
    check_positive_int("machine_id", ban.machine_id)
    reason = check_text("reason", ban.reason)
    if ban.source not in BAD_SOURCES:
        raise StoreError(f"bad-machine source must be one of {BAD_SOURCES}, got {ban.source!r}")
    check_optional_positive_int("host_id", ban.host_id)
    expires_at = check_optional_time("expires_at", ban.expires_at)
    return replace(ban, reason=reason, expires_at=expires_at)


def _merge_expiry(old: float | None, new: float | None) -> float | None:
    """A repeat ban lasts as long as the longer of the two (None = forever)."""
    if old is None or new is None:
        return None
    return max(old, new)


# ---------------------------------------------------------------------------------------------
# opening


def _prepare_file(path: Path) -> None:
    """The database's directory (0700) and file (0600) exist before SQLite touches them."""
    try:
        ensure_parent_dir(path)
        if path.exists():
            tighten_private(path)
        else:
            os.close(open_private(path, os.O_RDWR))
    except OSError as e:
        raise StoreError(f"cannot create database {path}: {e.strerror or e}") from e


def _open_error(path: Path, e: sqlite3.Error) -> StoreError:
    error = store_error(path, e, "")
    if isinstance(error, StoreFatal):
        return error
    return StoreError(f"cannot open database {path}: {' '.join(str(e).split())}")


async def _prepare_connection(conn: aiosqlite.Connection, path: Path, migrate: bool) -> None:
    """Pragmas, integrity, schema: a database that fails ``quick_check`` is never migrated,
    nor one opened by a process that only reads (``migrate=False``)."""
    await conn.execute("PRAGMA busy_timeout=5000")
    await quick_check(conn, path)
    async with conn.execute("PRAGMA journal_mode=WAL") as cur:
        row = await cur.fetchone()
    if not row or str(row[0]).lower() != "wal":
        raise StoreError(f"database {path}: could not enable WAL mode (got {row!r})")
    await conn.execute("PRAGMA foreign_keys=ON")
    version = await current_version(conn)
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"database {path} has schema version {version}, "
            f"newer than this vastui ({SCHEMA_VERSION})"
        )
    if version == 0 and not migrate:  # made this moment by a process that is migrating it
        raise StoreNotCurrent(f"database {path} has no schema yet", absent=True)
    if version < SCHEMA_VERSION and not migrate:
        raise StoreNotCurrent(
            f"database {path} has schema version {version}, older than this vastui "
            f"({SCHEMA_VERSION}): the engine upgrades it when it starts (or `vastui migrate`)"
        )
    await apply_migrations(conn, version)


async def _check_rows(conn: aiosqlite.Connection, path: Path) -> None:
    """Every instance and bad-list row decodes, or the store does not open (an engine that
    cannot read its fleet must say so once, not warn every step)."""
    for table, key, cls in (
        ("instances", "vast_id", InstanceRecord),
        ("bad_machines", "machine_id", BadEntry),
    ):
        async with conn.execute(f"SELECT * FROM {table}") as cur:
            async for row in cur:
                decode_row(path, table, key, cls, row)


# ---------------------------------------------------------------------------------------------


class Store(FleetOps, OwnershipOps, PauseOps):
    """Async access to the vastui SQLite database. Create with ``await Store.open(path)``."""

    def __init__(
        self, path: Path, conn: aiosqlite.Connection, identity: FileIdentity | None = None
    ) -> None:
        self.path = path
        self._conn: aiosqlite.Connection | None = conn
        self._lock = asyncio.Lock()
        # The file this connection has open: a stat that differs means it is not ours any more.
        self._identity = identity if identity is not None else FileIdentity.of(path)
        self._fatal: StoreFatal | None = None  # the first fatal failure; it stays fatal

    # -- lifecycle --------------------------------------------------------------------------

    @classmethod
    async def open(cls, path: Path, *, migrate: bool = True) -> Store:
        """Open (creating if needed) the database at ``path`` and migrate it to the latest schema.

        A new file is created with mode 0600 (its directory 0700) before SQLite touches it.
        Raises :class:`StoreFatal` if the file is corrupt or not a database (``quick_check``,
        a row that does not decode) and :class:`StoreError` if its schema is newer than this
        code. A process that only reads passes ``migrate=False``: a missing database or one
        older than this code is then :class:`StoreNotCurrent` (it creates and migrates nothing;
        processes that open a fresh file at once must not all migrate it).
        """
        path = Path(path)
        if not migrate and not path.exists():
            raise StoreNotCurrent(
                f"no database at {path} yet: the engine creates it when it starts", absent=True
            )
        _prepare_file(path)
        try:
            conn = await aiosqlite.connect(path, isolation_level=None)
        except sqlite3.Error as e:
            raise _open_error(path, e) from e
        conn.row_factory = sqlite3.Row
        try:
            identity = FileIdentity.of(path)
            await _prepare_connection(conn, path, migrate)
            await _check_rows(conn, path)
        except StoreError:
            await conn.close()
            raise
        except sqlite3.Error as e:
            await conn.close()
            raise _open_error(path, e) from e
        except OSError as e:
            await conn.close()
            raise StoreFatal(f"database {path} cannot be reached: {e.strerror or e}") from e
        except BaseException:
            await conn.close()
            raise
        for suffix in ("-wal", "-shm"):  # SQLite gives them the database's mode: check
            tighten_private(path.with_name(path.name + suffix))
        return cls(path, conn, identity)

    @classmethod
    async def empty(cls, path: Path) -> Store:
        """A store with nothing in it, in memory, for a reader that found no database at
        ``path``: nothing is known yet, and the reader creates no file (the engine will)."""
        conn = await aiosqlite.connect(":memory:", isolation_level=None)
        conn.row_factory = sqlite3.Row
        try:
            await apply_migrations(conn, 0)
        except BaseException:
            await conn.close()
            raise
        return cls(Path(path), conn, FileIdentity(0, 0))  # any write refuses: no such file

    async def check_health(self) -> None:
        """Raise :class:`StoreFatal` if this store can no longer be trusted: an earlier write hit
        a fatal error, or the file was deleted or replaced under the open connection. Cheap (a
        stat): the engine calls it every step."""
        if self._fatal is not None:
            raise self._fatal
        self._check_file()

    def _check_file(self) -> None:
        try:
            check_identity(self.path, self._identity)
        except StoreFatal as e:
            raise self._remember(e) from None

    def _remember(self, error: StoreError) -> StoreError:
        """Keep the first fatal error: once the store is unfit it stays so for this process."""
        if isinstance(error, StoreFatal) and self._fatal is None:
            self._fatal = error
        return error

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            async with self._lock:
                await conn.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    @property
    def closed(self) -> bool:
        return self._conn is None

    async def schema_version(self) -> int:
        async with self._read() as conn:
            return await current_version(conn)

    # -- plumbing ---------------------------------------------------------------------------

    def _require(self) -> aiosqlite.Connection:
        if self._conn is None:
            raise StoreError(f"database {self.path} is closed")
        return self._conn

    @asynccontextmanager
    async def _read(self) -> AsyncIterator[aiosqlite.Connection]:
        async with self._lock:
            conn = self._require()
            try:
                yield conn
            except sqlite3.Error as e:
                raise self._remember(store_error(self.path, e, "", writing=False)) from e
            except (OverflowError, UnicodeEncodeError) as e:
                raise StoreError(f"database {self.path}: {e}") from e

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[aiosqlite.Connection]:
        """Hold the write lock and a ``BEGIN IMMEDIATE`` transaction; commit on success.

        For use inside the store package (e.g. the legacy importer); the yielded connection
        must not escape the ``async with`` block. Refuses (StoreFatal) once the store is unfit:
        after a fatal error, or when the file is no longer the one opened (a write would go to
        a deleted file, or fight another engine's new database).
        """
        async with self._lock:
            conn = self._require()
            if self._fatal is not None:
                raise self._fatal
            self._check_file()
            try:
                await conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as e:
                raise self._remember(store_error(self.path, e, "cannot begin transaction")) from e
            try:
                yield conn
            except BaseException as e:
                await self._rollback(conn)
                if isinstance(e, sqlite3.Error):
                    raise self._remember(store_error(self.path, e, "cannot store")) from e
                if isinstance(e, StoreFatal):
                    self._remember(e)
                if isinstance(e, OverflowError | UnicodeEncodeError):
                    # Bad values: an id beyond 64 bits, text with a lone surrogate.
                    raise StoreError(f"database {self.path}: cannot store: {e}") from e
                raise
            else:
                try:
                    await conn.commit()
                except sqlite3.Error as e:
                    await self._rollback(conn)
                    raise self._remember(store_error(self.path, e, "commit failed")) from e

    @staticmethod
    async def _rollback(conn: aiosqlite.Connection) -> None:
        """Roll back if a transaction is open; a failing rollback must not hide the cause."""
        try:
            if conn.in_transaction:
                await conn.rollback()
        except sqlite3.Error:
            pass

    def _decode(self, table: str, key: str, cls: type[_R], row: sqlite3.Row) -> _R:
        """Decode a row the engine decides on; one that does not decode is StoreFatal naming
        the table and the row (warning every step about it would change nothing)."""
        try:
            return decode_row(self.path, table, key, cls, row)
        except StoreFatal as e:
            raise self._remember(e) from None

    def _instance(self, row: sqlite3.Row) -> InstanceRecord:
        return self._decode("instances", "vast_id", InstanceRecord, row)

    def _bad(self, row: sqlite3.Row) -> BadEntry:
        return self._decode("bad_machines", "machine_id", BadEntry, row)

    @staticmethod
    async def _fetchone(
        conn: aiosqlite.Connection, sql: str, params: Iterable[Any] = ()
    ) -> sqlite3.Row | None:
        async with conn.execute(sql, tuple(params)) as cur:
            return await cur.fetchone()

    async def _instance_row(self, conn: aiosqlite.Connection, vast_id: int) -> sqlite3.Row | None:
        return await self._fetchone(conn, "SELECT * FROM instances WHERE vast_id = ?", (vast_id,))

    @staticmethod
    async def _fetchall(
        conn: aiosqlite.Connection, sql: str, params: Iterable[Any] = ()
    ) -> list[sqlite3.Row]:
        async with conn.execute(sql, tuple(params)) as cur:
            return list(await cur.fetchall())

    @staticmethod
    async def insert_event(
        conn: aiosqlite.Connection,
        kind: str,
        reason: str,
        *,
        ts: float,
        instance_id: int | None = None,
        machine_id: int | None = None,
        detail: Mapping[str, Any] | None = None,
    ) -> int:
        """Append an event on ``conn`` inside the caller's transaction; return its id."""
        cur = await conn.execute(
            "INSERT INTO events (ts, kind, instance_id, machine_id, reason, detail)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (ts, kind, instance_id, machine_id, reason, _detail_json(detail)),
        )
        event_id = cur.lastrowid
        await cur.close()
        assert event_id is not None
        return event_id

    # -- instances --------------------------------------------------------------------------

    async def upsert_instance(
        self, rec: InstanceRecord, *, now: float | None = None
    ) -> InstanceRecord:
        """Insert or replace an instance row (``created_at`` of an existing row is kept).

        ``created_at`` and ``stage_started_at`` default to ``now`` when ``None``. Returns the
        stored record.
        """
        ts = stamp(now)
        check_positive_int("vast_id", rec.vast_id)
        check_optional_positive_int("machine_id", rec.machine_id)
        if rec.state not in STATES:
            raise StoreError(f"unknown instance state {rec.state!r} (expected one of {STATES})")
        if rec.source not in ("vastui", "legacy"):
            raise StoreError(f"instance source must be 'vastui' or 'legacy', got {rec.source!r}")
        if rec.created_at is None:
            rec = replace(rec, created_at=ts)
        if rec.stage_started_at is None:
            rec = replace(rec, stage_started_at=ts)
        values = {name: getattr(rec, name) for name in _INSTANCE_COLUMNS}
        values["error_lines"] = _lines_json("error_lines", rec.error_lines)
        cols = ", ".join(_INSTANCE_COLUMNS)
        marks = ", ".join(f":{c}" for c in _INSTANCE_COLUMNS)
        updates = ", ".join(
            f"{c} = excluded.{c}" for c in _INSTANCE_COLUMNS if c not in ("vast_id", "created_at")
        )
        async with self.transaction() as conn:
            await conn.execute(
                f"INSERT INTO instances ({cols}) VALUES ({marks})"
                f" ON CONFLICT(vast_id) DO UPDATE SET {updates}",
                values,
            )
            row = await self._fetchone(
                conn, "SELECT * FROM instances WHERE vast_id = ?", (rec.vast_id,)
            )
        assert row is not None
        return self._instance(row)

    async def get_instance(self, vast_id: int) -> InstanceRecord | None:
        async with self._read() as conn:
            row = await self._instance_row(conn, vast_id)
        return self._instance(row) if row else None

    async def list_instances(self, include_killed: bool = True) -> list[InstanceRecord]:
        """All instances, oldest first."""
        sql = "SELECT * FROM instances"
        if not include_killed:
            sql += " WHERE state != 'killed'"
        sql += " ORDER BY created_at, vast_id"
        async with self._read() as conn:
            rows = await self._fetchall(conn, sql)
        return [self._instance(r) for r in rows]

    async def set_stage(self, vast_id: int, stage: str, now: float | None = None) -> InstanceRecord:
        """Move a live instance to ``stage``: sets state, stage_started_at and ``<stage>_at``.

        Setting the stage an instance is already in is a no-op (its clock is not reset).
        Raises :class:`StoreError` for an unknown instance, an unknown stage, or a killed
        instance (use :meth:`mark_killed` to kill).
        """
        ts = stamp(now)
        check_positive_int("vast_id", vast_id)
        if stage not in STAGES:
            raise StoreError(f"unknown stage {stage!r} (expected one of {', '.join(STAGES)})")
        async with self.transaction() as conn:
            row = await self._instance_row(conn, vast_id)
            if row is None:
                raise StoreError(f"no instance {vast_id}")
            if row["state"] == "killed":
                raise StoreError(f"instance {vast_id} is killed; cannot move it to {stage}")
            if row["state"] != stage:
                await conn.execute(
                    f"UPDATE instances SET state = ?, stage_started_at = ?, {stage}_at = ?"
                    " WHERE vast_id = ?",
                    (stage, ts, ts, vast_id),
                )
                row = await self._instance_row(conn, vast_id)
        assert row is not None
        return self._instance(row)

    async def mark_killed(
        self,
        vast_id: int,
        kind: str,
        reason: str,
        *,
        failed_stage: str | None = None,
        bench_outcome: str | None = None,
        error_lines: Iterable[str] | None = None,
        event: str | None = None,
        detail: Mapping[str, Any] | None = None,
        now: float | None = None,
    ) -> InstanceRecord:
        """Mark an instance killed (terminal). ``failed_stage`` defaults to its current stage.

        With ``event`` (e.g. ``"destroy"``), the event is appended in the same transaction, so a
        destroy is never recorded without its event. Killing an already-killed instance changes
        nothing and writes no event (the first recorded cause wins). Raises
        :class:`StoreError` for an unknown instance.
        """
        ts = stamp(now)
        check_positive_int("vast_id", vast_id)
        kind = check_text("kill kind", kind)
        reason = check_text("kill reason", reason)
        if failed_stage is not None and failed_stage not in STATES:
            raise StoreError(f"unknown failed_stage {failed_stage!r}")
        lines = _lines_json("error_lines", error_lines)
        async with self.transaction() as conn:
            before, row = await self.kill_row(
                conn, vast_id, kind, reason, failed_stage, bench_outcome, lines, ts
            )
            if event is not None and before["state"] != "killed":
                await self.insert_event(
                    conn,
                    event,
                    reason,
                    ts=ts,
                    instance_id=vast_id,
                    machine_id=row["machine_id"],
                    detail={"kind": kind, "stage": row["failed_stage"], **(detail or {})},
                )
        return self._instance(row)

    async def kill_row(
        self,
        conn: aiosqlite.Connection,
        vast_id: int,
        kind: str,
        reason: str,
        failed_stage: str | None,
        bench_outcome: str | None,
        lines_json: str | None,
        ts: float,
    ) -> tuple[sqlite3.Row, sqlite3.Row]:
        """Inside a transaction: mark a row killed unless it already is (the first cause wins).

        Returns (row before, row after); raises StoreError for an unknown instance.
        """
        row = await self._instance_row(conn, vast_id)
        if row is None:
            raise StoreError(f"no instance {vast_id}")
        if row["state"] == "killed":
            return row, row
        await conn.execute(
            "UPDATE instances SET state = 'killed', killed_at = ?, stage_started_at = ?,"
            " failed_stage = ?, kill_kind = ?, kill_reason = ?,"
            " bench_outcome = COALESCE(?, bench_outcome),"
            " error_lines = COALESCE(?, error_lines)"
            " WHERE vast_id = ?",
            (
                ts,
                ts,
                failed_stage or row["state"],
                kind,
                reason,
                bench_outcome,
                lines_json,
                vast_id,
            ),
        )
        after = await self._instance_row(conn, vast_id)
        assert after is not None
        return row, after

    # -- destroy and ban: one intent ---------------------------------------------------------

    async def create_destroy_intent(
        self,
        vast_id: int,
        reason: str,
        *,
        machine_id: int | None = None,
        detail: Mapping[str, Any] | None = None,
        ban: BanSpec | None = None,
        now: float | None = None,
    ) -> Intent:
        """Record the decision to destroy ``vast_id`` (and, with ``ban``, to ban its machine)
        before the DELETE is sent. The ban rides in the intent (``intent.ban``), so a restart
        that redoes the destroy records the ban too. ``detail`` is the kill to redo (e.g.
        ``policy.Kill.to_detail()``)."""
        check_positive_int("vast_id", vast_id)
        check_text("destroy reason", reason)
        if ban is not None:
            ban = _check_ban(ban)
        full = {**(detail or {}), BAN_KEY: ban.to_json() if ban is not None else None}
        return await self.create_intent(
            "destroy", reason, instance_id=vast_id, machine_id=machine_id, detail=full, now=now
        )

    async def complete_destroy(
        self,
        intent_id: int,
        kind: str,
        reason: str,
        *,
        failed_stage: str | None = None,
        bench_outcome: str | None = None,
        error_lines: Iterable[str] | None = None,
        detail: Mapping[str, Any] | None = None,
        now: float | None = None,
    ) -> tuple[InstanceRecord | None, BadEntry | None]:
        """After Vast confirmed a destroy: in ONE transaction mark the intent's instance killed
        with its 'destroy' event, record the ban the intent carries (bad-list upsert + 'ban'
        event) and close the intent. Either all of it is recorded or none of it is.

        Idempotent: an intent no longer pending changes nothing (returns the instance, None).
        An instance already killed keeps its first cause (no second destroy event) but the
        intent's ban is still recorded. Returns (instance or None if it has no row, the
        bad-list entry written or None).
        """
        ts = stamp(now)
        check_positive_int("intent_id", intent_id)
        kind = check_text("kill kind", kind)
        reason = check_text("kill reason", reason)
        if failed_stage is not None and failed_stage not in STATES:
            raise StoreError(f"unknown failed_stage {failed_stage!r}")
        lines = _lines_json("error_lines", error_lines)
        async with self.transaction() as conn:
            row = await self._fetchone(conn, "SELECT * FROM intents WHERE id = ?", (intent_id,))
            if row is None or row["kind"] != "destroy":
                raise StoreError(f"no destroy intent {intent_id}")
            intent = self._decode("intents", "id", Intent, row)
            vast_id = intent.instance_id
            inst = await self._instance_row(conn, vast_id) if vast_id is not None else None
            if intent.status != "pending":
                return (self._instance(inst) if inst is not None else None), None
            if inst is not None and vast_id is not None:
                before, inst = await self.kill_row(
                    conn, vast_id, kind, reason, failed_stage, bench_outcome, lines, ts
                )
                if before["state"] != "killed":
                    await self.insert_event(
                        conn, "destroy", reason, ts=ts, instance_id=vast_id,
                        machine_id=inst["machine_id"],
                        detail={"kind": kind, "stage": inst["failed_stage"], **(detail or {})},
                    )  # fmt: skip
            bad = None
            ban = intent.ban
            if ban is not None:
                ban = _check_ban(ban)
                evidence = _lines_json("evidence", ban.evidence) if ban.evidence else None
                bad = await self.ban_row(conn, ban, evidence, ts, instance_id=vast_id)
            await conn.execute(
                "UPDATE intents SET status = 'done', updated_at = ? WHERE id = ?",
                (ts, intent_id),
            )
        return (
            self._instance(inst) if inst is not None else None,
            self._bad(bad) if bad is not None else None,
        )

    # -- bad machines -----------------------------------------------------------------------

    async def add_bad(
        self,
        machine_id: int,
        reason: str,
        *,
        source: str = "manual",
        host_id: int | None = None,
        gpu_name: str | None = None,
        expires_at: float | None = None,
        evidence: Iterable[str] | None = None,
        now: float | None = None,
    ) -> BadEntry:
        """Ban a machine, or ban it again if already banned; writes a 'ban' event atomically.

        On a repeat: ``bans`` += 1, ``reason``/``updated_at`` are replaced, ``evidence`` is
        replaced when given, the stronger source is kept (manual > automatic > legacy) and the
        ban lasts as long as the longer of the two expiries (``None`` = forever).
        """
        ban = _check_ban(
            BanSpec(
                machine_id, reason, source, host_id, gpu_name, expires_at,
                tuple(evidence) if evidence is not None else (),
            )
        )  # fmt: skip
        ev = _lines_json("evidence", evidence)
        async with self.transaction() as conn:
            row = await self.ban_row(conn, ban, ev, stamp(now))
        return self._bad(row)

    async def ban_row(
        self,
        conn: aiosqlite.Connection,
        ban: BanSpec,
        evidence_json: str | None,
        ts: float,
        instance_id: int | None = None,
    ) -> sqlite3.Row:
        """Inside a transaction: upsert the bad-list row of a checked ban and its 'ban' event."""
        machine_id, reason, source = ban.machine_id, ban.reason, ban.source
        old = await self._fetchone(
            conn, "SELECT * FROM bad_machines WHERE machine_id = ?", (machine_id,)
        )
        if old is None:
            await conn.execute(
                "INSERT INTO bad_machines (machine_id, host_id, gpu_name, reason, source,"
                " created_at, updated_at, expires_at, bans, evidence)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, 1, ?)",
                (machine_id, ban.host_id, ban.gpu_name, reason, source, ts, ts,
                 ban.expires_at, evidence_json),
            )  # fmt: skip
            bans = 1
        else:
            keep_source = old["source"]
            if _BAD_RANK[source] < _BAD_RANK.get(keep_source, len(BAD_SOURCES)):
                keep_source = source
            bans = int(old["bans"]) + 1
            await conn.execute(
                "UPDATE bad_machines SET reason = ?, source = ?, updated_at = ?,"
                " expires_at = ?, bans = ?, evidence = COALESCE(?, evidence),"
                " host_id = COALESCE(?, host_id), gpu_name = COALESCE(?, gpu_name)"
                " WHERE machine_id = ?",
                (
                    reason,
                    keep_source,
                    ts,
                    _merge_expiry(old["expires_at"], ban.expires_at),
                    bans,
                    evidence_json,
                    ban.host_id,
                    ban.gpu_name,
                    machine_id,
                ),
            )
        row = await self._fetchone(
            conn, "SELECT * FROM bad_machines WHERE machine_id = ?", (machine_id,)
        )
        assert row is not None
        await self.insert_event(
            conn,
            "ban",
            reason,
            ts=ts,
            instance_id=instance_id,
            machine_id=machine_id,
            detail={
                "source": row["source"],
                "bans": bans,
                "expires_at": row["expires_at"],
                "host_id": row["host_id"],
                "gpu_name": row["gpu_name"],
            },
        )
        return row

    async def remove_bad(
        self, machine_id: int, reason: str = "manual unignore", now: float | None = None
    ) -> bool:
        """Unban a machine and write an 'unban' event atomically. False (and no event) if absent."""
        ts = stamp(now)
        check_positive_int("machine_id", machine_id)
        reason = check_text("reason", reason)
        async with self.transaction() as conn:
            old = await self._fetchone(
                conn, "SELECT * FROM bad_machines WHERE machine_id = ?", (machine_id,)
            )
            if old is None:
                return False
            await conn.execute("DELETE FROM bad_machines WHERE machine_id = ?", (machine_id,))
            await self.insert_event(
                conn,
                "unban",
                reason,
                ts=ts,
                machine_id=machine_id,
                detail={
                    "previous_reason": old["reason"],
                    "source": old["source"],
                    "bans": old["bans"],
                },
            )
        return True

    async def get_bad(self, machine_id: int) -> BadEntry | None:
        """The bad-list entry for a machine, expired or not."""
        async with self._read() as conn:
            row = await self._fetchone(
                conn, "SELECT * FROM bad_machines WHERE machine_id = ?", (machine_id,)
            )
        return self._bad(row) if row else None

    async def list_bad(
        self, include_expired: bool = False, now: float | None = None
    ) -> list[BadEntry]:
        """Bad-list entries, oldest first; expired ones only with ``include_expired``."""
        ts = stamp(now)
        sql = "SELECT * FROM bad_machines"
        params: tuple[Any, ...] = ()
        if not include_expired:
            sql += " WHERE expires_at IS NULL OR expires_at > ?"
            params = (ts,)
        sql += " ORDER BY created_at, machine_id"
        async with self._read() as conn:
            rows = await self._fetchall(conn, sql, params)
        return [self._bad(r) for r in rows]

    async def bad_machine_ids(self, now: float | None = None) -> set[int]:
        """Machine ids currently banned (expired entries excluded)."""
        ts = stamp(now)
        async with self._read() as conn:
            rows = await self._fetchall(
                conn,
                "SELECT machine_id FROM bad_machines WHERE expires_at IS NULL OR expires_at > ?",
                (ts,),
            )
        return {int(r[0]) for r in rows}

    async def list_legacy_review(self) -> list[LegacyReviewEntry]:
        """Pre-re-key legacy rows (keyed by operator account ``host_id``) awaiting review."""
        async with self._read() as conn:
            rows = await self._fetchall(
                conn, "SELECT * FROM legacy_review ORDER BY kind, host_id, gpu_name, num_gpus, id"
            )
        return [LegacyReviewEntry.from_row(r) for r in rows]

    # -- performance ------------------------------------------------------------------------

    async def record_rate(
        self,
        machine_id: int,
        gpu_name: str,
        num_gpus: int,
        rate: float,
        *,
        cpu_ram_gb: float | None = None,
        host_id: int | None = None,
        now: float | None = None,
    ) -> PerfRecord:
        """Record a machine's measured rate (proofs/hour: a benchmark's, or production's when it
        falls short): best = max, last = rate, samples += 1."""
        ts = stamp(now)
        check_positive_int("machine_id", machine_id)
        gpu_name = check_text("gpu_name", gpu_name)
        check_positive_int("num_gpus", num_gpus)
        rate = check_rate("rate", rate)
        if cpu_ram_gb is not None:
            cpu_ram_gb = check_rate("cpu_ram_gb", cpu_ram_gb)
        check_optional_positive_int("host_id", host_id)
        async with self.transaction() as conn:
            await conn.execute(
                "INSERT INTO machine_perf (machine_id, gpu_name, num_gpus, best_rate, last_rate,"
                " samples, cpu_ram_gb, measured_at, host_id) VALUES (?, ?, ?, ?, ?, 1, ?, ?, ?)"
                " ON CONFLICT(machine_id, gpu_name, num_gpus) DO UPDATE SET"
                " best_rate = MAX(best_rate, excluded.best_rate),"
                " last_rate = excluded.last_rate,"
                " samples = samples + 1,"
                " cpu_ram_gb = COALESCE(excluded.cpu_ram_gb, cpu_ram_gb),"
                " measured_at = excluded.measured_at,"
                " host_id = COALESCE(excluded.host_id, host_id)",
                (machine_id, gpu_name, num_gpus, rate, rate, cpu_ram_gb, ts, host_id),
            )
            row = await self._fetchone(
                conn,
                "SELECT * FROM machine_perf WHERE machine_id = ? AND gpu_name = ? AND num_gpus = ?",
                (machine_id, gpu_name, num_gpus),
            )
        assert row is not None
        return PerfRecord.from_row(row)

    async def get_perf(self, machine_id: int) -> list[PerfRecord]:
        async with self._read() as conn:
            rows = await self._fetchall(
                conn,
                "SELECT * FROM machine_perf WHERE machine_id = ? ORDER BY gpu_name, num_gpus",
                (machine_id,),
            )
        return [PerfRecord.from_row(r) for r in rows]

    async def list_perf(self) -> list[PerfRecord]:
        async with self._read() as conn:
            rows = await self._fetchall(
                conn, "SELECT * FROM machine_perf ORDER BY machine_id, gpu_name, num_gpus"
            )
        return [PerfRecord.from_row(r) for r in rows]

    async def bid_history(self, *, now: float) -> list[BidHistory]:
        """Each machine's record as a bid (vastui/engine/bidding.py learns from it)."""
        async with self._read() as conn:
            rows = await self._fetchall(
                conn, "SELECT * FROM instances WHERE is_bid = 1 ORDER BY vast_id"
            )
        return bid_history((self._instance(r) for r in rows), now)

    # -- events -----------------------------------------------------------------------------

    async def add_event(
        self,
        kind: str,
        reason: str,
        *,
        instance_id: int | None = None,
        machine_id: int | None = None,
        detail: Mapping[str, Any] | None = None,
        now: float | None = None,
    ) -> Event:
        """Append one event (see ``records.EVENT_KINDS`` for the documented kinds)."""
        ts = stamp(now)
        kind = check_text("event kind", kind)
        reason = check_text("event reason", reason)
        check_optional_positive_int("instance_id", instance_id)
        check_optional_positive_int("machine_id", machine_id)
        _detail_json(detail)  # validate before taking the lock
        async with self.transaction() as conn:
            event_id = await self.insert_event(
                conn,
                kind,
                reason,
                ts=ts,
                instance_id=instance_id,
                machine_id=machine_id,
                detail=detail,
            )
            row = await self._fetchone(conn, "SELECT * FROM events WHERE id = ?", (event_id,))
        assert row is not None
        return Event.from_row(row)

    async def list_events(self, limit: int | None = None, kind: str | None = None) -> list[Event]:
        """Events oldest first; with ``limit``, the newest ``limit`` events (still oldest first)."""
        where = ""
        params: list[Any] = []
        if kind is not None:
            where = " WHERE kind = ?"
            params.append(kind)
        if limit is not None:
            if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
                raise StoreError(f"limit must be a non-negative integer, got {limit!r}")
            sql = (
                f"SELECT * FROM (SELECT * FROM events{where} ORDER BY id DESC LIMIT ?) ORDER BY id"
            )
            params.append(limit)
        else:
            sql = f"SELECT * FROM events{where} ORDER BY id"
        async with self._read() as conn:
            rows = await self._fetchall(conn, sql, params)
        return [Event.from_row(r) for r in rows]

    # -- SSH host-key pins ------------------------------------------------------------------

    async def get_host_key(self, instance_id: int) -> HostKeyRecord | None:
        """The host key pinned for an instance, or None if nothing is pinned yet."""
        check_positive_int("instance_id", instance_id)
        async with self._read() as conn:
            row = await self._fetchone(
                conn, "SELECT * FROM host_keys WHERE instance_id = ?", (instance_id,)
            )
        return HostKeyRecord.from_row(row) if row else None

    async def pin_host_key(
        self,
        instance_id: int,
        host: str,
        port: int,
        public_key: str,
        fingerprint: str,
        now: float | None = None,
    ) -> HostKeyRecord:
        """Pin an instance's SSH host key (trust on first use).

        Pinning the key already pinned only refreshes ``host``/``port`` (an instance's endpoint
        may move between Vast's proxy and a direct port); ``pinned_at`` is kept. A *different*
        key is refused with :class:`StoreError`: the operator must verify the re-key and call
        :meth:`forget_host_key` first.
        """
        ts = stamp(now)
        check_positive_int("instance_id", instance_id)
        host = check_text("host", host)
        if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
            raise StoreError(f"port must be an integer in 1..65535, got {port!r}")
        key = _openssh_key_body(public_key)
        fingerprint = check_text("fingerprint", fingerprint)
        async with self.transaction() as conn:
            old = await self._fetchone(
                conn, "SELECT * FROM host_keys WHERE instance_id = ?", (instance_id,)
            )
            if old is None:
                await conn.execute(
                    "INSERT INTO host_keys (instance_id, host, port, public_key, fingerprint,"
                    " pinned_at) VALUES (?, ?, ?, ?, ?, ?)",
                    (instance_id, host, port, key, fingerprint, ts),
                )
            elif old["public_key"] == key:
                await conn.execute(
                    "UPDATE host_keys SET host = ?, port = ? WHERE instance_id = ?",
                    (host, port, instance_id),
                )
            else:
                raise StoreError(
                    f"instance {instance_id} already has a different pinned host key "
                    f"({old['fingerprint']}); forget it before pinning {fingerprint}"
                )
            row = await self._fetchone(
                conn, "SELECT * FROM host_keys WHERE instance_id = ?", (instance_id,)
            )
        assert row is not None
        return HostKeyRecord.from_row(row)

    async def forget_host_key(self, instance_id: int) -> bool:
        """Drop an instance's pin (after the operator verified a re-key). False if none."""
        check_positive_int("instance_id", instance_id)
        async with self.transaction() as conn:
            cur = await conn.execute("DELETE FROM host_keys WHERE instance_id = ?", (instance_id,))
            removed = cur.rowcount
            await cur.close()
        return removed > 0


def _openssh_key_body(public_key: object) -> str:
    """``"<type> <base64>"`` of an OpenSSH public key line; the comment is dropped."""
    if not isinstance(public_key, str):
        raise StoreError(f"public_key must be a string, got {type(public_key).__name__}")
    parts = public_key.split()
    if len(parts) < 2:
        raise StoreError("public_key must be an OpenSSH public key line ('<type> <base64>')")
    return f"{parts[0]} {parts[1]}"
