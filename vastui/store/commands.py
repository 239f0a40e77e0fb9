"""Commands from the console (or the CLI) to the engine that holds the database (table
``commands``): submitted, claimed by one engine, answered."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from typing import Any

from vastui.domain.journal import COMMAND_KINDS, Command

from .common import stamp
from .database import Database, execute, fetch_all, fetch_one
from .errors import StoreError

# A command's arguments as JSON: an id and a reason of domain.machines.REASON_MAX_CHARS fit, each
# character at most six in JSON (\uXXXX); the engine parses every command it claims.
ARGS_MAX_CHARS = 4096


def command_from_row(row: sqlite3.Row) -> Command:
    data = dict(zip(row.keys(), row, strict=True))
    data["args"] = json.loads(data["args"])
    return Command(**data)


class CommandRepo:
    """The ``commands`` table."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def submit(
        self,
        kind: str,
        args: Mapping[str, Any],
        *,
        source: str = "console",
        now: float | None = None,
    ) -> int:
        if kind not in COMMAND_KINDS:
            raise ValueError(f"unknown command {kind!r}")
        body = json.dumps(dict(args))
        if len(body) > ARGS_MAX_CHARS:
            raise StoreError(
                f"{kind}: its text is {len(body)} characters, at most {ARGS_MAX_CHARS}: not sent"
            )
        # One statement, no explicit transaction: a console's loop must not hold the write
        # lock (Database.write_one). StoreBusy: not stored; the console keeps it and retries.
        return await self._db.write_one(
            "INSERT INTO commands (kind, args, source, created_at) VALUES (?, ?, ?, ?)",
            (kind, body, source, stamp(now)),
        )

    async def claim(self, now: float | None = None) -> list[Command]:
        """Pending commands, marked running atomically so no two engines run one twice."""
        async with self._db.transaction() as conn:
            rows = await fetch_all(
                conn, "SELECT * FROM commands WHERE status = 'pending' ORDER BY id"
            )
            if rows:
                await execute(
                    conn,
                    f"UPDATE commands SET status = 'running' WHERE id IN "
                    f"({','.join('?' * len(rows))})",
                    [r["id"] for r in rows],
                )
        return [command_from_row(r) for r in rows]

    async def finish(
        self, command_id: int, ok: bool, result: str, now: float | None = None
    ) -> None:
        async with self._db.transaction() as conn:
            await execute(
                conn,
                "UPDATE commands SET status = ?, result = ?, done_at = ? WHERE id = ?",
                ("done" if ok else "failed", result, stamp(now), command_id),
            )

    async def has_pending(self) -> bool:
        async with self._db.read() as conn:
            row = await fetch_one(conn, "SELECT 1 FROM commands WHERE status = 'pending' LIMIT 1")
        return row is not None

    async def get(self, command_id: int) -> Command | None:
        async with self._db.read() as conn:
            row = await fetch_one(conn, "SELECT * FROM commands WHERE id = ?", (command_id,))
        return command_from_row(row) if row else None

    async def requeue_running(self) -> int:
        """After a crash: commands claimed but never finished go back to pending."""
        async with self._db.transaction() as conn:
            return await execute(
                conn, "UPDATE commands SET status = 'pending' WHERE status = 'running'"
            )
