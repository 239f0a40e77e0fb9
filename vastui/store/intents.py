"""Intents (table ``intents``): every rent and destroy recorded before its request goes out, so
that a crash between deciding and done is completed on restart, and so that an instance is this
database's only if it intended it."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from typing import Any

import aiosqlite

from vastui.domain.journal import INTENT_SENT, Intent

from .common import stamp
from .database import Database, execute, fetch_all, fetch_one, insert


def intent_from_row(row: sqlite3.Row) -> Intent:
    data = dict(zip(row.keys(), row, strict=True))
    data["detail"] = json.loads(data["detail"]) if data["detail"] else {}
    return Intent(**data)


class IntentRepo:
    """The ``intents`` table."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def decode(self, row: sqlite3.Row) -> Intent:
        return self._db.decode("intents", "id", Intent, row, intent_from_row)

    async def create(
        self,
        kind: str,
        reason: str,
        *,
        label: str | None = None,
        offer_id: int | None = None,
        machine_id: int | None = None,
        instance_id: int | None = None,
        detail: Mapping[str, Any] | None = None,
        status: str = "pending",
        now: float | None = None,
    ) -> Intent:
        ts = stamp(now)
        async with self._db.transaction() as conn:
            intent_id = await insert(
                conn,
                "INSERT INTO intents (kind, status, label, offer_id, machine_id, instance_id,"
                " reason, detail, created_at, updated_at) VALUES (?,?,?,?,?,?,?,?,?,?)",
                (kind, status, label, offer_id, machine_id, instance_id, reason,
                 json.dumps(dict(detail or {})), ts, ts),
            )  # fmt: skip
            row = await fetch_one(conn, "SELECT * FROM intents WHERE id = ?", (intent_id,))
        assert row is not None
        return self.decode(row)

    async def finish(
        self,
        intent_id: int,
        status: str,
        *,
        instance_id: int | None = None,
        note: str | None = None,
        now: float | None = None,
    ) -> None:
        async with self._db.transaction() as conn:
            await execute(
                conn,
                "UPDATE intents SET status = ?, instance_id = COALESCE(?, instance_id),"
                " note = COALESCE(?, note), updated_at = ? WHERE id = ?",
                (status, instance_id, note, stamp(now), intent_id),
            )

    async def mark_sent(self, intent_id: int, *, now: float | None = None) -> None:
        """Written just before the request goes out: a pending rent intent without this mark
        was never sent (its engine died first) and frees its slot at once on restart."""
        async with self._db.transaction() as conn:
            await execute(
                conn,
                "UPDATE intents SET note = ?, updated_at = ? WHERE id = ? AND status = 'pending'",
                (INTENT_SENT, stamp(now), intent_id),
            )

    async def all(self, *, status: str | None = None, kind: str | None = None) -> list[Intent]:
        sql, params = "SELECT * FROM intents WHERE 1=1", []
        if status is not None:
            sql += " AND status = ?"
            params.append(status)
        if kind is not None:
            sql += " AND kind = ?"
            params.append(kind)
        async with self._db.read() as conn:
            rows = await fetch_all(conn, sql + " ORDER BY id", params)
        return [self.decode(r) for r in rows]

    async def rents_since(self, since: float) -> int:
        """Rent intents created at or after ``since`` that went, or may have gone, out (a dry
        run's never did)."""
        async with self._db.read() as conn:
            row = await fetch_one(
                conn,
                "SELECT COUNT(*) FROM intents WHERE kind = 'rent' AND status != 'dry_run' "
                "AND created_at >= ?",
                (since,),
            )
        return int(row[0]) if row is not None else 0

    async def intended(self, label: str) -> bool:
        """Whether this database ever meant to rent an instance with this label (a rent intent
        that went, or may have gone, out; a dry run's never did) or recorded one under it."""
        async with self._db.read() as conn:
            row = await fetch_one(
                conn,
                "SELECT 1 FROM intents WHERE kind = 'rent' AND label = ? AND status != 'dry_run' "
                "UNION ALL SELECT 1 FROM instances WHERE label = ? LIMIT 1",
                (label, label),
            )
        return row is not None

    async def get_row(self, conn: aiosqlite.Connection, intent_id: int) -> Intent | None:
        """Inside the caller's transaction: one intent, or None."""
        row = await fetch_one(conn, "SELECT * FROM intents WHERE id = ?", (intent_id,))
        return self.decode(row) if row is not None else None

    @staticmethod
    async def close_row(conn: aiosqlite.Connection, intent_id: int, ts: float) -> None:
        """Inside the caller's transaction: the intent is done."""
        await execute(
            conn, "UPDATE intents SET status = 'done', updated_at = ? WHERE id = ?", (ts, intent_id)
        )
