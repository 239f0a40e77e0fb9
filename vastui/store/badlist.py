"""The bad list (table ``bad_machines``, per machine_id), the strikes against machines that may
lead to it (table ``strikes``), and the legacy rows set aside for review (``legacy_review``)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiosqlite

from vastui.domain.machines import (
    BAD_SOURCES,
    REASON_MAX_CHARS,
    BadEntry,
    BanSpec,
    LegacyReviewEntry,
    Strike,
)

from .checks import check_optional_positive_int, check_optional_time, check_positive_int, check_text
from .common import json_list, lines_json, stamp
from .database import Database, execute, fetch_all, fetch_one
from .errors import StoreError
from .events import insert_event
from .health import decode_row, plain_row

_RANK = {source: rank for rank, source in enumerate(BAD_SOURCES)}  # lower = stronger


def bad_entry_from_row(row: sqlite3.Row) -> BadEntry:
    return BadEntry(
        machine_id=row["machine_id"],
        reason=row["reason"],
        source=row["source"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        host_id=row["host_id"],
        gpu_name=row["gpu_name"],
        expires_at=row["expires_at"],
        bans=row["bans"],
        evidence=json_list(row["evidence"]),
    )


_strike_from_row = plain_row(Strike)
_review_from_row = plain_row(LegacyReviewEntry)


def checked_ban(ban: BanSpec) -> BanSpec:
    """A ban fit to record, or StoreError naming what is wrong."""
    check_positive_int("machine_id", ban.machine_id)
    reason = check_text("reason", ban.reason)
    if ban.source == "manual" and len(reason) > REASON_MAX_CHARS:
        raise StoreError(f"reason must be at most {REASON_MAX_CHARS} characters, got {len(reason)}")
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


_BY_MACHINE = "SELECT * FROM bad_machines WHERE machine_id = ?"


async def verify_bad_list(conn: aiosqlite.Connection, path: Path) -> None:
    """Every bad-list row decodes (at open: the engine decides on each of them)."""
    async with conn.execute("SELECT * FROM bad_machines") as cur:
        async for row in cur:
            decode_row(path, "bad_machines", "machine_id", BadEntry, row, bad_entry_from_row)


class BadListRepo:
    """The ``bad_machines``, ``strikes`` and ``legacy_review`` tables."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def decode(self, row: sqlite3.Row) -> BadEntry:
        return self._db.decode("bad_machines", "machine_id", BadEntry, row, bad_entry_from_row)

    async def add(
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
        ban = checked_ban(BanSpec(
            machine_id, reason, source, host_id, gpu_name, expires_at,
            tuple(evidence) if evidence is not None else (),
        ))  # fmt: skip
        ev = lines_json(evidence)
        async with self._db.transaction() as conn:
            row = await self.ban_row(conn, ban, ev, stamp(now))
        return self.decode(row)

    async def ban_row(
        self,
        conn: aiosqlite.Connection,
        ban: BanSpec,
        evidence_json: str | None,
        ts: float,
        instance_id: int | None = None,
    ) -> sqlite3.Row:
        """Inside the caller's transaction: upsert the bad-list row of a checked ban and its
        'ban' event."""
        machine_id, reason, source = ban.machine_id, ban.reason, ban.source
        old = await fetch_one(conn, _BY_MACHINE, (machine_id,))
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
            if _RANK[source] < _RANK.get(keep_source, len(BAD_SOURCES)):
                keep_source = source
            bans = int(old["bans"]) + 1
            await conn.execute(
                "UPDATE bad_machines SET reason = ?, source = ?, updated_at = ?,"
                " expires_at = ?, bans = ?, evidence = COALESCE(?, evidence),"
                " host_id = COALESCE(?, host_id), gpu_name = COALESCE(?, gpu_name)"
                " WHERE machine_id = ?",
                (reason, keep_source, ts, _merge_expiry(old["expires_at"], ban.expires_at),
                 bans, evidence_json, ban.host_id, ban.gpu_name, machine_id),
            )  # fmt: skip
        row = await fetch_one(conn, _BY_MACHINE, (machine_id,))
        assert row is not None
        await insert_event(
            conn, "ban", reason, ts=ts, instance_id=instance_id, machine_id=machine_id,
            detail={
                "source": row["source"],
                "bans": bans,
                "expires_at": row["expires_at"],
                "host_id": row["host_id"],
                "gpu_name": row["gpu_name"],
            },
        )  # fmt: skip
        return row

    async def remove(
        self, machine_id: int, reason: str = "manual unignore", now: float | None = None
    ) -> bool:
        """Unban a machine and write an 'unban' event atomically. False (and no event) if absent."""
        ts = stamp(now)
        check_positive_int("machine_id", machine_id)
        reason = check_text("reason", reason)
        async with self._db.transaction() as conn:
            return await self.unban_row(conn, machine_id, reason, ts)

    @staticmethod
    async def unban_row(
        conn: aiosqlite.Connection,
        machine_id: int,
        reason: str,
        ts: float,
        *,
        automatic_since: float | None = None,
    ) -> bool:
        """Inside the caller's transaction: delete a machine's bad-list row and write its
        'unban' event. With ``automatic_since``, only an automatic ban updated since then."""
        sql = _BY_MACHINE
        params: list[Any] = [machine_id]
        if automatic_since is not None:  # a fleet-wide failure takes back only its own bans
            sql += " AND source = 'automatic' AND updated_at >= ?"
            params.append(automatic_since)
        old = await fetch_one(conn, sql, params)
        if old is None:
            return False
        await conn.execute("DELETE FROM bad_machines WHERE machine_id = ?", (machine_id,))
        await insert_event(
            conn, "unban", reason, ts=ts, machine_id=machine_id,
            detail={"previous_reason": old["reason"], "source": old["source"], "bans": old["bans"]},
        )  # fmt: skip
        return True

    async def get(self, machine_id: int) -> BadEntry | None:
        """The bad-list entry for a machine, expired or not."""
        async with self._db.read() as conn:
            row = await fetch_one(conn, _BY_MACHINE, (machine_id,))
        return self.decode(row) if row else None

    async def all(self, include_expired: bool = False, now: float | None = None) -> list[BadEntry]:
        """Bad-list entries, oldest first; expired ones only with ``include_expired``."""
        sql = "SELECT * FROM bad_machines"
        params: tuple[Any, ...] = ()
        if not include_expired:
            sql += " WHERE expires_at IS NULL OR expires_at > ?"
            params = (stamp(now),)
        sql += " ORDER BY created_at, machine_id"
        async with self._db.read() as conn:
            rows = await fetch_all(conn, sql, params)
        return [self.decode(r) for r in rows]

    async def machine_ids(self, now: float | None = None) -> set[int]:
        """Machine ids currently banned (expired entries excluded)."""
        async with self._db.read() as conn:
            rows = await fetch_all(
                conn,
                "SELECT machine_id FROM bad_machines WHERE expires_at IS NULL OR expires_at > ?",
                (stamp(now),),
            )
        return {int(r[0]) for r in rows}

    async def legacy_review(self) -> list[LegacyReviewEntry]:
        """Pre-re-key legacy rows (keyed by operator account ``host_id``) awaiting review."""
        async with self._db.read() as conn:
            rows = await fetch_all(
                conn, "SELECT * FROM legacy_review ORDER BY kind, host_id, gpu_name, num_gpus, id"
            )
        return [_review_from_row(r) for r in rows]

    # -- strikes -------------------------------------------------------------------------

    async def add_strike(
        self,
        machine_id: int,
        kind: str,
        reason: str,
        *,
        instance_id: int | None = None,
        since: float | None = None,
        now: float | None = None,
    ) -> int:
        """Record a strike and its 'strike' event in one transaction; return the machine's
        strikes since ``since`` (all of them when None), this one included."""
        ts = stamp(now)
        if isinstance(machine_id, bool) or not isinstance(machine_id, int) or machine_id <= 0:
            raise ValueError(f"machine_id must be a positive integer, got {machine_id!r}")
        async with self._db.transaction() as conn:
            await conn.execute(
                "INSERT INTO strikes (machine_id, instance_id, kind, reason, ts)"
                " VALUES (?, ?, ?, ?, ?)",
                (machine_id, instance_id, kind, reason, ts),
            )
            await insert_event(
                conn, "strike", reason, instance_id=instance_id, machine_id=machine_id,
                detail={"kind": kind}, ts=ts,
            )  # fmt: skip
            row = await fetch_one(
                conn,
                "SELECT COUNT(*) AS n FROM strikes WHERE machine_id = ? AND ts >= ?",
                (machine_id, since if since is not None else float("-inf")),
            )
        assert row is not None
        return int(row["n"])

    async def strikes(self, machine_id: int | None = None) -> list[Strike]:
        query = "SELECT * FROM strikes"
        args: tuple[Any, ...] = ()
        if machine_id is not None:
            query += " WHERE machine_id = ?"
            args = (machine_id,)
        async with self._db.read() as conn:
            rows = await fetch_all(conn, query + " ORDER BY id", args)
        return [_strike_from_row(r) for r in rows]

    @staticmethod
    async def forgive_strikes(conn: aiosqlite.Connection, instance_ids: Iterable[int]) -> None:
        """Inside the caller's transaction: drop the strikes these instances earned."""
        for iid in instance_ids:
            await execute(conn, "DELETE FROM strikes WHERE instance_id = ?", (iid,))
