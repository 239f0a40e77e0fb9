"""Rented Vast instances (table ``instances``) and the runner identities given to them
(table ``counters``)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from dataclasses import fields, replace
from pathlib import Path
from typing import Unpack

import aiosqlite

from vastui.domain.stages import STAGES, STATES
from vastui.domain.worker import InstanceRecord, Progress

from .checks import check_optional_positive_int, check_positive_int, check_text
from .common import json_list, lines_json, stamp
from .database import Database, execute, fetch_all, fetch_one
from .errors import StoreError
from .health import decode_row

# The fields the engine may update piecemeal (stage moves go through set_stage).
PROGRESS_COLUMNS = frozenset(Progress.__optional_keys__)


_COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(InstanceRecord))
_ERROR_LINES = _COLUMNS.index("error_lines")
_IS_BID = _COLUMNS.index("is_bid")
_UPSERT = (
    f"INSERT INTO instances ({', '.join(_COLUMNS)}) VALUES ({', '.join(f':{c}' for c in _COLUMNS)})"
    " ON CONFLICT(vast_id) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in _COLUMNS if c not in ("vast_id", "created_at"))
)
_BY_ID = "SELECT * FROM instances WHERE vast_id = ?"
# What entering a stage keeps of the parameters' first fetch (set once: InstanceRecord.params_*)
_FIRST_FETCH = {
    "paramfetch": ", params_from = COALESCE(params_from, :ts)",
    "benchmark": ", params_to = COALESCE(params_to, :ts)",
    "proving": ", params_to = COALESCE(params_to, :ts)",
}


def instance_from_row(row: sqlite3.Row) -> InstanceRecord:
    """The record a row of ``instances`` holds (its JSON lines and its flag decoded)."""
    names = tuple(row.keys())
    if names == _COLUMNS:  # every column, in field order (SELECT *): the engine's listings
        values = list(row)
        values[_ERROR_LINES] = json_list(values[_ERROR_LINES])
        values[_IS_BID] = bool(values[_IS_BID])
        # Positional: 61 keywords cost 3x as much to match (the names are fresh strings).
        return InstanceRecord(*values)
    data = dict(zip(names, row, strict=True))
    if "error_lines" in data:
        data["error_lines"] = json_list(data["error_lines"])
    if "is_bid" in data:
        data["is_bid"] = bool(data["is_bid"])
    return InstanceRecord(**data)


async def verify_instances(conn: aiosqlite.Connection, path: Path) -> None:
    """Every instance row decodes (at open: an engine that cannot read its fleet says so once)."""
    async with conn.execute("SELECT * FROM instances") as cur:
        async for row in cur:
            decode_row(path, "instances", "vast_id", InstanceRecord, row, instance_from_row)


class InstanceRepo:
    """The ``instances`` table and the ``runner_id_seq`` counter."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def decode(self, row: sqlite3.Row) -> InstanceRecord:
        return self._db.decode("instances", "vast_id", InstanceRecord, row, instance_from_row)

    @staticmethod
    async def row(conn: aiosqlite.Connection, vast_id: int) -> sqlite3.Row | None:
        return await fetch_one(conn, _BY_ID, (vast_id,))

    async def upsert(self, rec: InstanceRecord, *, now: float | None = None) -> InstanceRecord:
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
        values = {name: getattr(rec, name) for name in _COLUMNS}
        values["error_lines"] = lines_json(rec.error_lines)
        async with self._db.transaction() as conn:
            await conn.execute(_UPSERT, values)
            row = await self.row(conn, rec.vast_id)
        assert row is not None
        return self.decode(row)

    async def get(self, vast_id: int) -> InstanceRecord | None:
        async with self._db.read() as conn:
            row = await self.row(conn, vast_id)
        return self.decode(row) if row else None

    async def all(self, include_killed: bool = True) -> list[InstanceRecord]:
        """All instances, oldest first."""
        sql = "SELECT * FROM instances"
        if not include_killed:
            sql += " WHERE state != 'killed'"
        sql += " ORDER BY created_at, vast_id"
        async with self._db.read() as conn:
            rows = await fetch_all(conn, sql)
        return [self.decode(r) for r in rows]

    async def list_bids(self) -> list[InstanceRecord]:
        """Every bid rental, killed or not."""
        async with self._db.read() as conn:
            rows = await fetch_all(
                conn, "SELECT * FROM instances WHERE is_bid = 1 ORDER BY vast_id"
            )
        return [self.decode(r) for r in rows]

    async def set_stage(
        self, vast_id: int, stage: str, now: float | None = None, **fields: Unpack[Progress]
    ) -> InstanceRecord:
        """Move a live instance to ``stage``: sets state, stage_started_at and ``<stage>_at``,
        and the progress ``fields`` given with it in the same transaction (a reader never sees
        one without the other: a resumed bid no longer outbid but still in its old stage).

        Setting the stage an instance is already in is a no-op (its clock is not reset).
        Raises :class:`StoreError` for an unknown instance, an unknown stage, or a killed
        instance (use ``mark_killed`` to kill).
        """
        ts = stamp(now)
        check_positive_int("vast_id", vast_id)
        if stage not in STAGES:
            raise StoreError(f"unknown stage {stage!r} (expected one of {', '.join(STAGES)})")
        unknown = set(fields) - PROGRESS_COLUMNS
        if unknown:
            raise ValueError(f"not updatable piecemeal: {sorted(unknown)}")
        async with self._db.transaction() as conn:
            row = await self.row(conn, vast_id)
            if row is None:
                raise StoreError(f"no instance {vast_id}")
            if row["state"] == "killed":
                raise StoreError(f"instance {vast_id} is killed; cannot move it to {stage}")
            if fields:
                sets = ", ".join(f"{k} = :{k}" for k in fields)
                await conn.execute(
                    f"UPDATE instances SET {sets} WHERE vast_id = :vast_id",
                    {**fields, "vast_id": vast_id},
                )
                row = await self.row(conn, vast_id)
            if row is not None and row["state"] != stage:
                # The parameters' first fetch is kept (a start from the warm pool fetches
                # nothing again, yet passes through the stages anew): spend bills them then.
                first = _FIRST_FETCH.get(stage, "")
                await conn.execute(
                    f"UPDATE instances SET state = :stage, stage_started_at = :ts, {stage}_at = :ts"
                    f"{first} WHERE vast_id = :vast_id",
                    {"stage": stage, "ts": ts, "vast_id": vast_id},
                )
                row = await self.row(conn, vast_id)
        assert row is not None
        return self.decode(row)

    async def update(self, vast_id: int, **fields: Unpack[Progress]) -> InstanceRecord:
        """Update progress fields (:class:`Progress`) of an instance."""
        unknown = set(fields) - PROGRESS_COLUMNS
        if unknown:
            raise ValueError(f"not updatable piecemeal: {sorted(unknown)}")
        if not fields:
            rec = await self.get(vast_id)
            if rec is None:
                raise StoreError(f"no instance {vast_id}")
            return rec
        sets = ", ".join(f"{k} = :{k}" for k in fields)
        async with self._db.transaction() as conn:
            await conn.execute(
                f"UPDATE instances SET {sets} WHERE vast_id = :vast_id",
                {**fields, "vast_id": vast_id},
            )
            row = await self.row(conn, vast_id)
        if row is None:
            raise StoreError(f"no instance {vast_id}")
        return self.decode(row)

    async def update_observed(self, rows: Iterable[tuple[int, Progress]]) -> int:
        """Progress fields of many live instances in one transaction (what one reconcile saw of
        each on Vast's list: issue 32, a transaction per worker per step was the largest share
        of a big fleet's engine CPU). A killed row is left as its kill wrote it. Returns the
        number of rows written."""
        groups: dict[tuple[str, ...], list[dict[str, object]]] = {}
        for vast_id, fields_ in rows:
            unknown = set(fields_) - PROGRESS_COLUMNS
            if unknown:
                raise ValueError(f"not updatable piecemeal: {sorted(unknown)}")
            if fields_:
                groups.setdefault(tuple(sorted(fields_)), []).append(
                    {**fields_, "vast_id": vast_id}
                )
        if not groups:
            return 0
        written = 0
        async with self._db.transaction() as conn:
            for keys, params in groups.items():
                sets = ", ".join(f"{k} = :{k}" for k in keys)
                cursor = await conn.executemany(
                    f"UPDATE instances SET {sets} WHERE vast_id = :vast_id AND state != 'killed'",
                    params,
                )
                written += max(cursor.rowcount, 0)
        return written

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
        """Inside the caller's transaction: mark a row killed unless it already is (the first
        cause wins). Returns (row before, row after); StoreError for an unknown instance."""
        row = await self.row(conn, vast_id)
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
            (ts, ts, failed_stage or row["state"], kind, reason, bench_outcome, lines_json,
             vast_id),
        )  # fmt: skip
        after = await self.row(conn, vast_id)
        assert after is not None
        return row, after

    @staticmethod
    def check_kill(
        kind: str, reason: str, failed_stage: str | None, error_lines: Iterable[str] | None
    ) -> tuple[str, str, str | None]:
        """A kill's kind and reason, checked, and its error lines as JSON."""
        kind = check_text("kill kind", kind)
        reason = check_text("kill reason", reason)
        if failed_stage is not None and failed_stage not in STATES:
            raise StoreError(f"unknown failed_stage {failed_stage!r}")
        return kind, reason, lines_json(error_lines)

    # -- runner identities ---------------------------------------------------------------

    async def next_runner_id(self) -> int:
        """A new runner identity: one more than any this database gave or saw (monotonic, never
        reused; a rent that never happened leaves a gap, as the original's counter does)."""
        async with self._db.transaction() as conn:
            row = await fetch_one(
                conn,
                "UPDATE counters SET value = MAX(value, (SELECT COALESCE(MAX(runner_id), 0)"
                " FROM instances)) + 1 WHERE key = 'runner_id_seq' RETURNING value",
            )
        if row is None:
            raise StoreError("the runner_id_seq counter is missing from the database")
        return int(row["value"])

    async def note_runner_id(self, runner_id: int) -> None:
        """An identity seen on an instance (adopted): later ones are given above it."""
        async with self._db.transaction() as conn:
            await execute(
                conn,
                "UPDATE counters SET value = MAX(value, ?) WHERE key = 'runner_id_seq'",
                (runner_id,),
            )
