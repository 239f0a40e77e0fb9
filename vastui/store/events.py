"""The append-only event log (table ``events``; triggers refuse UPDATE and DELETE)."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiosqlite

from .checks import check_optional_positive_int, check_text
from .common import detail_json, iso_utc, json_dict, json_obj, stamp
from .database import Database, fetch_all, fetch_one, insert
from .errors import StoreError

# Event kinds written by vastui (``events.kind`` is free text; these are documented):
#   rent       an instance was created on Vast
#   destroy    an instance was destroyed on Vast
#   ban        a machine was added to (or banned again on) the bad list   [written by add_bad]
#   unban      a machine was removed from the bad list                  [written by remove_bad]
#   adopt      a running Vast instance not created by vastui was taken under management
#   stage      an instance moved to another pipeline stage
#   foreign    instances of another controller (a vastui label this database never intended)
#              were seen on the account, first time for their fleet: never adopted or destroyed
#   fleet_failure  one failure on several machines paused provisioning (or the pause ended)
#   kill       an instance was marked killed
#   import     a legacy state.db was imported                       [written by import_legacy]
#   benchmark  a benchmark result was recorded
#   strike     a mark against a machine (failed proofs, a production kill); enough of them ban
#   tunnel     a worker reported the controller's tunnel down (or up again)
#   error      something failed (detail carries the error)
EVENT_KINDS: tuple[str, ...] = (
    "rent",
    "destroy",
    "ban",
    "unban",
    "adopt",
    "foreign",
    "fleet_failure",
    "stage",
    "kill",
    "import",
    "benchmark",
    "strike",
    "tunnel",
    "error",
    "cordoned",  # a worker's curio machine cordoned before a planned destroy (its drain)
    "cut_off",  # the controller cut off from its workers, and back (one episode, two events)
    "tasks_released",  # a destroyed (or outbid) worker's tasks freed in curio's cluster
    "cluster",  # curio's cluster: unreadable, readable again; an identity collision
)


@dataclass(frozen=True, slots=True)
class Event:
    """One row of the append-only ``events`` log."""

    id: int
    ts: float
    kind: str
    reason: str
    instance_id: int | None = None
    machine_id: int | None = None
    detail: dict[str, Any] | None = None

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> Event:
        return cls(
            id=row["id"],
            ts=row["ts"],
            kind=row["kind"],
            reason=row["reason"],
            instance_id=row["instance_id"],
            machine_id=row["machine_id"],
            detail=json_obj(row["detail"]),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "ts": iso_utc(self.ts),
            "kind": self.kind,
            "instance_id": self.instance_id,
            "machine_id": self.machine_id,
            "reason": self.reason,
        }


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
        return Event.from_row(row)

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
        return [Event.from_row(r) for r in rows]

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
