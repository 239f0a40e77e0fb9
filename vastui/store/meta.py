"""The database's own facts (table ``meta``, key → text): its fleet identity, the provisioning
pause a fleet-wide failure causes (engine/fleetwide.py decides it), the failure signatures once
declared the fleet's, which other controllers' fleets were already warned about, and the
automatic target's state (engine/autoscale.py decides it)."""

from __future__ import annotations

import json
from typing import Any

import aiosqlite

from .common import json_dict
from .database import Database, execute, fetch_one
from .errors import StoreError

_PAUSE = "fleet_failure"  # the pause in force: its signature, text, when
_KNOWN = "fleet_signatures"  # every signature declared the fleet's -> when (engine clock)
_KEEP_KNOWN = 100  # the newest hundred signatures are plenty
_AUTOSCALE = "autoscale"  # the automatic target's state (vastui/engine/autoscale.py)

_UPSERT = (
    "INSERT INTO meta (key, value) VALUES (?, ?)"
    " ON CONFLICT(key) DO UPDATE SET value = excluded.value"
)


async def _value(conn: aiosqlite.Connection, key: str) -> str | None:
    row = await fetch_one(conn, "SELECT value FROM meta WHERE key = ?", (key,))
    return None if row is None else str(row[0])


class MetaRepo:
    """The ``meta`` table."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def fleet_id(self) -> str:
        """This database's fleet identity (8 hex digits, made once at its creation)."""
        async with self._db.read() as conn:
            value = await _value(conn, "fleet_id")
        if value is None or len(value) != 8:
            raise StoreError("database has no fleet identity (meta.fleet_id): not a vastui store")
        return value

    # -- the provisioning pause ----------------------------------------------------------

    async def fleet_failure(self) -> dict[str, Any] | None:
        """The pause in force (its signature, text, ...), or None."""
        async with self._db.read() as conn:
            text = await _value(conn, _PAUSE)
        if text is None:
            return None
        value = json_dict(text)
        return value if isinstance(value.get("signature"), str) else None

    async def fleet_signature_since(self, signature: str) -> float | None:
        """When this signature was last declared the fleet's (None: never)."""
        async with self._db.read() as conn:
            text = await _value(conn, _KNOWN)
        at = json_dict(text).get(signature) if text is not None else None
        return float(at) if isinstance(at, int | float) and not isinstance(at, bool) else None

    @staticmethod
    async def pause_row(conn: aiosqlite.Connection, value: dict[str, Any], now: float) -> None:
        """Inside the caller's transaction: the pause is ``value``, and its signature is
        remembered as the fleet's since ``now``."""
        await execute(conn, _UPSERT, (_PAUSE, json.dumps(value, default=str)))
        text = await _value(conn, _KNOWN)
        known = json_dict(text) if text is not None else {}
        known[str(value["signature"])] = now
        if len(known) > _KEEP_KNOWN:
            known = dict(sorted(known.items(), key=lambda kv: kv[1])[-_KEEP_KNOWN:])
        await execute(conn, _UPSERT, (_KNOWN, json.dumps(known)))

    @staticmethod
    async def unpause_row(conn: aiosqlite.Connection) -> bool:
        """Inside the caller's transaction: lift the pause; False if there was none."""
        return await execute(conn, "DELETE FROM meta WHERE key = ?", (_PAUSE,)) == 1

    # -- the automatic target ------------------------------------------------------------

    async def autoscale(self) -> dict[str, Any] | None:
        """The automatic target's state as last put (None: never decided)."""
        async with self._db.read() as conn:
            text = await _value(conn, _AUTOSCALE)
        return None if text is None else json_dict(text)

    @staticmethod
    async def autoscale_row(conn: aiosqlite.Connection, value: dict[str, Any]) -> None:
        await execute(conn, _UPSERT, (_AUTOSCALE, json.dumps(value)))

    # -- foreign fleets ------------------------------------------------------------------

    @staticmethod
    async def first_warning(conn: aiosqlite.Connection, owner: str, now: float) -> bool:
        """Inside the caller's transaction: whether another controller's fleet ``owner`` is
        seen for the first time ever (it is warned about once, not at every list)."""
        changed = await execute(
            conn,
            "INSERT OR IGNORE INTO meta (key, value) VALUES (?, ?)",
            (f"warned_foreign:{owner}", repr(now)),
        )
        return changed == 1
