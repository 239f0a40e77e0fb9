"""The append-only event log (table ``events``; triggers refuse UPDATE and DELETE)."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from typing import Any

import aiosqlite

from vastui.domain.journal import Event

from .checks import check_optional_positive_int, check_text
from .common import detail_json, json_dict, json_obj, stamp
from .database import Database, fetch_all, fetch_one, insert
from .errors import StoreError


def event_from_row(row: sqlite3.Row) -> Event:
    return Event(
        id=row["id"],
        ts=row["ts"],
        kind=row["kind"],
        reason=row["reason"],
        instance_id=row["instance_id"],
        machine_id=row["machine_id"],
        detail=json_obj(row["detail"]),
    )


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
    """Append an event on ``conn`` inside the caller's transaction (a write and its event are
    one); return its id."""
    return await insert(
        conn,
        "INSERT INTO events (ts, kind, instance_id, machine_id, reason, detail)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        (ts, kind, instance_id, machine_id, reason, detail_json(detail)),
    )


class EventRepo:
    """The ``events`` table: appends, listings, and the failure signatures destroys carry."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def add(
        self,
        kind: str,
        reason: str,
        *,
        instance_id: int | None = None,
        machine_id: int | None = None,
        detail: Mapping[str, Any] | None = None,
        now: float | None = None,
    ) -> Event:
        """Append one event (see :data:`EVENT_KINDS` for the documented kinds)."""
        ts = stamp(now)
        kind = check_text("event kind", kind)
        reason = check_text("event reason", reason)
        check_optional_positive_int("instance_id", instance_id)
        check_optional_positive_int("machine_id", machine_id)
        detail_json(detail)  # validate before taking the lock
        async with self._db.transaction() as conn:
            event_id = await insert_event(
                conn, kind, reason, ts=ts, instance_id=instance_id, machine_id=machine_id,
                detail=detail,
            )  # fmt: skip
            row = await fetch_one(conn, "SELECT * FROM events WHERE id = ?", (event_id,))
        assert row is not None
        return event_from_row(row)

    async def all(self, limit: int | None = None, kind: str | None = None) -> list[Event]:
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
        async with self._db.read() as conn:
            rows = await fetch_all(conn, sql, params)
        return [event_from_row(r) for r in rows]

    async def recent_failures(self, since: float) -> list[tuple[int, str, float, int | None]]:
        """(machine_id, signature, ts, instance_id) of every destroy after ``since`` that
        carries a failure signature (engine/fleetwide.py looks for one failing many)."""
        async with self._db.read() as conn:
            rows = await fetch_all(
                conn,
                "SELECT machine_id, instance_id, ts, detail FROM events "
                "WHERE kind = 'destroy' AND ts > ? AND machine_id IS NOT NULL ORDER BY id",
                (since,),
            )
        out = []
        for machine_id, instance_id, ts, detail in rows:
            sig = json_dict(detail).get("signature")
            if isinstance(sig, str) and sig:
                out.append((int(machine_id), sig, float(ts), instance_id))
        return out
