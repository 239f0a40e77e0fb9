"""Store operations for the engine: instance progress, intents, commands, the lease.

A mixin of :class:`vastui.store.Store`, kept apart so the core store stays readable.
"""

from __future__ import annotations

import json
import math
import os
import socket
import sqlite3
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vastui.store.records import BanSpec, EngineStatus, InstanceRecord, Strike, stamp

# Instance columns the engine may update piecemeal (stage moves go through set_stage).
PROGRESS_COLUMNS = frozenset(
    {
        "events_seen", "bench_result", "vast_status", "status_msg", "last_seen_at",
        "unhealthy_since", "first_report_at", "image_digest", "ssh_host", "ssh_port",
        "bench_rate", "bench_outcome", "min_rate", "label", "dph_total", "bench_failed",
        "prod_completed", "prod_failed", "prod_rate", "prod_checked_at", "prod_state",
        "tunnel_down_since", "tunnel_detail", "max_pending", "curio_info", "runner_id",
        "bid_price", "bid_cap", "outbid_since", "interruptions", "stopped_s", "storage_dph",
    }
)  # fmt: skip
COMMAND_KINDS = ("deploy", "destroy", "ignore", "unignore")


def pid_alive(pid: int) -> bool:
    """Whether a process of this host still runs (someone else's counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except (OverflowError, ValueError):
        return False
    try:  # a zombie (killed, not yet reaped by its parent) runs no more
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no procfs: trust kill(0)
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


def holder_is_dead(holder: Lease) -> bool:
    """A lease row left by an engine of this host that no longer runs (SIGKILL, OOM): it holds
    nothing. Another host's engine can only be judged by its heartbeat."""
    return holder.hostname == socket.gethostname() and not pid_alive(holder.pid)


class LeaseHeld(Exception):
    """Another engine holds the lease on this database."""

    def __init__(self, holder: Lease) -> None:
        self.holder = holder
        super().__init__(
            f"another vastui engine ({holder.mode}, pid {holder.pid} on {holder.hostname}) "
            f"is running on this database; its lease expires "
            f"{max(0, int(holder.expires_at - time.time()))}s after its last heartbeat"
        )


# An intent's note while pending: its request has gone out (see `mark_intent_sent`).
INTENT_SENT = "sent"


# A destroy intent's detail key for the ban decided with it (see Store.complete_destroy).
BAN_KEY = "ban_record"


@dataclass(frozen=True, slots=True)
class Intent:
    id: int
    kind: str
    status: str
    label: str | None
    offer_id: int | None
    machine_id: int | None
    instance_id: int | None
    reason: str
    detail: dict[str, Any]
    created_at: float
    updated_at: float
    note: str | None

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> Intent:
        data = {k: row[k] for k in row.keys()}  # noqa: SIM118 - sqlite3.Row needs keys()
        data["detail"] = json.loads(data["detail"]) if data["detail"] else {}
        return cls(**data)

    @property
    def ban(self) -> BanSpec | None:
        """The ban a destroy intent carries (recorded when the destroy completes), if any."""
        detail = self.detail if isinstance(self.detail, dict) else {}
        return BanSpec.from_json(detail.get(BAN_KEY))

    @property
    def sent(self) -> bool:
        return self.note == INTENT_SENT


@dataclass(frozen=True, slots=True)
class Command:
    id: int
    kind: str
    args: dict[str, Any]
    status: str
    source: str
    created_at: float
    done_at: float | None
    result: str | None

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> Command:
        data = {k: row[k] for k in row.keys()}  # noqa: SIM118 - sqlite3.Row needs keys()
        data["args"] = json.loads(data["args"])
        return cls(**data)


@dataclass(frozen=True, slots=True)
class Lease:
    name: str
    owner: str
    pid: int
    hostname: str
    mode: str
    acquired_at: float
    heartbeat_at: float
    expires_at: float

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> Lease:
        return cls(**{k: row[k] for k in row.keys()})  # noqa: SIM118


class FleetOps:
    """Engine-side operations; relies on Store's transaction()/_read()/_fetch* plumbing."""

    # -- instances ---------------------------------------------------------------------

    async def update_instance(self, vast_id: int, **fields: Any) -> InstanceRecord:
        unknown = set(fields) - PROGRESS_COLUMNS
        if unknown:
            raise ValueError(f"not updatable piecemeal: {sorted(unknown)}")
        if not fields:
            rec = await self.get_instance(vast_id)  # type: ignore[attr-defined]
            assert rec is not None
            return rec
        sets = ", ".join(f"{k} = :{k}" for k in fields)
        async with self.transaction() as conn:  # type: ignore[attr-defined]
            await conn.execute(
                f"UPDATE instances SET {sets} WHERE vast_id = :vast_id",
                {**fields, "vast_id": vast_id},
            )
            row = await self._instance_row(conn, vast_id)  # type: ignore[attr-defined]
        if row is None:
            from vastui.store.db import StoreError

            raise StoreError(f"no instance {vast_id}")
        return self._instance(row)  # type: ignore[attr-defined,no-any-return]

    # -- runner identities ---------------------------------------------------------------

    async def next_runner_id(self) -> int:
        """A new runner identity: one more than any this database gave or saw (monotonic, never
        reused; a rent that never happened leaves a gap, as the original's counter does)."""
        async with self.transaction() as conn:  # type: ignore[attr-defined]
            row = await self._fetchone(  # type: ignore[attr-defined]
                conn,
                "UPDATE counters SET value = MAX(value, (SELECT COALESCE(MAX(runner_id), 0)"
                " FROM instances)) + 1 WHERE key = 'runner_id_seq' RETURNING value",
            )
        if row is None:
            from vastui.store.errors import StoreError

            raise StoreError("the runner_id_seq counter is missing from the database")
        return int(row["value"])

    async def note_runner_id(self, runner_id: int) -> None:
        """An identity seen on an instance (adopted): later ones are given above it."""
        async with self.transaction() as conn:  # type: ignore[attr-defined]
            await conn.execute(
                "UPDATE counters SET value = MAX(value, ?) WHERE key = 'runner_id_seq'",
                (runner_id,),
            )

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
        async with self.transaction() as conn:  # type: ignore[attr-defined]
            await conn.execute(
                "INSERT INTO strikes (machine_id, instance_id, kind, reason, ts)"
                " VALUES (?, ?, ?, ?, ?)",
                (machine_id, instance_id, kind, reason, ts),
            )
            await self.insert_event(  # type: ignore[attr-defined]
                conn, "strike", reason, instance_id=instance_id, machine_id=machine_id,
                detail={"kind": kind}, ts=ts,
            )  # fmt: skip
            row = await self._fetchone(  # type: ignore[attr-defined]
                conn,
                "SELECT COUNT(*) AS n FROM strikes WHERE machine_id = ? AND ts >= ?",
                (machine_id, since if since is not None else float("-inf")),
            )
        assert row is not None
        return int(row["n"])

    async def list_strikes(self, machine_id: int | None = None) -> list[Strike]:
        query = "SELECT * FROM strikes"
        args: tuple[Any, ...] = ()
        if machine_id is not None:
            query += " WHERE machine_id = ?"
            args = (machine_id,)
        async with self._read() as conn:  # type: ignore[attr-defined]
            rows = await self._fetchall(conn, query + " ORDER BY id", args)  # type: ignore[attr-defined]
        return [Strike.from_row(r) for r in rows]

    # -- intents -------------------------------------------------------------------------

    async def create_intent(
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
        async with self.transaction() as conn:  # type: ignore[attr-defined]
            cur = await conn.execute(
                "INSERT INTO intents (kind, status, label, offer_id, machine_id, instance_id,"
                " reason, detail, created_at, updated_at) VALUES (?,?,?,?,?,?,?,?,?,?)",
                (kind, status, label, offer_id, machine_id, instance_id, reason,
                 json.dumps(dict(detail or {})), ts, ts),
            )  # fmt: skip
            intent_id = cur.lastrowid
            await cur.close()
            row = await self._fetchone(  # type: ignore[attr-defined]
                conn, "SELECT * FROM intents WHERE id = ?", (intent_id,)
            )
        assert row is not None
        return self._decode("intents", "id", Intent, row)  # type: ignore[attr-defined,no-any-return]

    async def finish_intent(
        self,
        intent_id: int,
        status: str,
        *,
        instance_id: int | None = None,
        note: str | None = None,
        now: float | None = None,
    ) -> None:
        async with self.transaction() as conn:  # type: ignore[attr-defined]
            await conn.execute(
                "UPDATE intents SET status = ?, instance_id = COALESCE(?, instance_id),"
                " note = COALESCE(?, note), updated_at = ? WHERE id = ?",
                (status, instance_id, note, stamp(now), intent_id),
            )

    async def mark_intent_sent(self, intent_id: int, *, now: float | None = None) -> None:
        """Written just before the request goes out: a pending rent intent without this mark
        was never sent (its engine died first) and frees its slot at once on restart."""
        async with self.transaction() as conn:  # type: ignore[attr-defined]
            await conn.execute(
                "UPDATE intents SET note = ?, updated_at = ? WHERE id = ? AND status = 'pending'",
                (INTENT_SENT, stamp(now), intent_id),
            )

    async def list_intents(
        self, *, status: str | None = None, kind: str | None = None
    ) -> list[Intent]:
        sql, params = "SELECT * FROM intents WHERE 1=1", []
        if status is not None:
            sql += " AND status = ?"
            params.append(status)
        if kind is not None:
            sql += " AND kind = ?"
            params.append(kind)
        async with self._read() as conn:  # type: ignore[attr-defined]
            rows = await self._fetchall(conn, sql + " ORDER BY id", params)  # type: ignore[attr-defined]
        return [self._decode("intents", "id", Intent, r) for r in rows]  # type: ignore[attr-defined]

    # -- commands (console → engine) -----------------------------------------------------

    async def submit_command(
        self,
        kind: str,
        args: Mapping[str, Any],
        *,
        source: str = "console",
        now: float | None = None,
    ) -> int:
        if kind not in COMMAND_KINDS:
            raise ValueError(f"unknown command {kind!r}")
        async with self.transaction() as conn:  # type: ignore[attr-defined]
            cur = await conn.execute(
                "INSERT INTO commands (kind, args, source, created_at) VALUES (?, ?, ?, ?)",
                (kind, json.dumps(dict(args)), source, stamp(now)),
            )
            command_id = cur.lastrowid
            await cur.close()
        assert command_id is not None
        return command_id

    async def claim_commands(self, now: float | None = None) -> list[Command]:
        """Pending commands, marked running atomically so no two engines run one twice."""
        async with self.transaction() as conn:  # type: ignore[attr-defined]
            rows = await self._fetchall(  # type: ignore[attr-defined]
                conn, "SELECT * FROM commands WHERE status = 'pending' ORDER BY id"
            )
            if rows:
                await conn.execute(
                    f"UPDATE commands SET status = 'running' WHERE id IN "
                    f"({','.join('?' * len(rows))})",
                    [r["id"] for r in rows],
                )
        return [Command.from_row(r) for r in rows]

    async def finish_command(
        self, command_id: int, ok: bool, result: str, now: float | None = None
    ) -> None:
        async with self.transaction() as conn:  # type: ignore[attr-defined]
            await conn.execute(
                "UPDATE commands SET status = ?, result = ?, done_at = ? WHERE id = ?",
                ("done" if ok else "failed", result, stamp(now), command_id),
            )

    async def has_pending_commands(self) -> bool:
        async with self._read() as conn:  # type: ignore[attr-defined]
            row = await self._fetchone(  # type: ignore[attr-defined]
                conn, "SELECT 1 FROM commands WHERE status = 'pending' LIMIT 1"
            )
        return row is not None

    async def get_command(self, command_id: int) -> Command | None:
        async with self._read() as conn:  # type: ignore[attr-defined]
            row = await self._fetchone(  # type: ignore[attr-defined]
                conn, "SELECT * FROM commands WHERE id = ?", (command_id,)
            )
        return Command.from_row(row) if row else None

    async def requeue_running_commands(self) -> int:
        """After a crash: commands claimed but never finished go back to pending."""
        async with self.transaction() as conn:  # type: ignore[attr-defined]
            cur = await conn.execute(
                "UPDATE commands SET status = 'pending' WHERE status = 'running'"
            )
            count = cur.rowcount
            await cur.close()
        return count

    # -- the engine's status -------------------------------------------------------------

    async def put_engine_status(self, status: EngineStatus) -> EngineStatus:
        """Replace the one status row; ``reason_since`` is kept while the reason kind lasts
        (the given one is ignored) and set to ``updated_at`` when it changes."""
        _check_status(status)
        async with self.transaction() as conn:  # type: ignore[attr-defined]
            old = await self._fetchone(  # type: ignore[attr-defined]
                conn, "SELECT reason_kind, reason_since FROM engine_status WHERE id = 1"
            )
            since = status.updated_at
            if old is not None and old["reason_kind"] == status.reason_kind:
                since = old["reason_since"] if old["reason_since"] is not None else since
            await conn.execute(
                "INSERT INTO engine_status (id, target, workers, by_stage, reason_kind, reason,"
                " best, dry_run, updated_at, reason_since, wall_at, simulated)"
                " VALUES (1,?,?,?,?,?,?,?,?,?,?,?)"
                " ON CONFLICT(id) DO UPDATE SET target = excluded.target,"
                " workers = excluded.workers, by_stage = excluded.by_stage,"
                " reason_kind = excluded.reason_kind, reason = excluded.reason,"
                " best = excluded.best, dry_run = excluded.dry_run,"
                " updated_at = excluded.updated_at, reason_since = excluded.reason_since,"
                " wall_at = excluded.wall_at, simulated = excluded.simulated",
                (
                    status.target, status.workers, json.dumps(dict(status.by_stage)),
                    status.reason_kind, status.reason,
                    None if status.best is None else json.dumps(status.best, default=str),
                    int(status.dry_run), status.updated_at, since,
                    status.wall_at, int(status.simulated),
                ),
            )  # fmt: skip
            row = await self._fetchone(  # type: ignore[attr-defined]
                conn, "SELECT * FROM engine_status WHERE id = 1"
            )
        assert row is not None
        return EngineStatus.from_row(row)

    async def put_engine_offers(
        self, filter_text: str, offers: list[dict[str, Any]], now: float
    ) -> None:
        """Replace the engine's published offers (already ranked, JSON-safe rows)."""
        body = json.dumps(offers, separators=(",", ":"), default=str)
        async with self.transaction() as conn:  # type: ignore[attr-defined]
            await conn.execute(
                "INSERT INTO engine_offers (id, filter, body, updated_at) VALUES (1, ?, ?, ?)"
                " ON CONFLICT(id) DO UPDATE SET filter = excluded.filter, body = excluded.body,"
                " updated_at = excluded.updated_at",
                (filter_text, body, float(now)),
            )

    async def get_engine_offers(self) -> tuple[str, list[dict[str, Any]], float] | None:
        """(filter, rows, updated_at) the engine last published, or None."""
        async with self._read() as conn:  # type: ignore[attr-defined]
            row = await self._fetchone(  # type: ignore[attr-defined]
                conn, "SELECT filter, body, updated_at FROM engine_offers WHERE id = 1"
            )
        if row is None:
            return None
        try:
            rows = json.loads(row["body"])
        except ValueError:
            return None
        if not isinstance(rows, list):
            return None
        return (
            str(row["filter"]),
            [r for r in rows if isinstance(r, dict)],
            float(row["updated_at"]),
        )

    async def get_engine_status(self) -> EngineStatus | None:
        """The engine's last published status, or None if no engine has run a cycle here."""
        async with self._read() as conn:  # type: ignore[attr-defined]
            row = await self._fetchone(  # type: ignore[attr-defined]
                conn, "SELECT * FROM engine_status WHERE id = 1"
            )
        return EngineStatus.from_row(row) if row else None

    # -- the lease -----------------------------------------------------------------------

    async def acquire_lease(
        self, owner: str, *, pid: int, hostname: str, mode: str, ttl: float,
        now: float | None = None,
    ) -> Lease:  # fmt: skip
        """Take the engine lease, or raise LeaseHeld if a live one belongs to someone else."""
        ts = stamp(now)
        async with self.transaction() as conn:  # type: ignore[attr-defined]
            row = await self._fetchone(  # type: ignore[attr-defined]
                conn, "SELECT * FROM lease WHERE name = 'engine'"
            )
            if row is not None and row["owner"] != owner and row["expires_at"] > ts:
                holder = Lease.from_row(row)
                # A restart after a SIGKILL takes over at once (systemd's Restart= must not
                # give up while the dead engine's lease runs out).
                if not holder_is_dead(holder):
                    raise LeaseHeld(holder)
            await conn.execute(
                "INSERT INTO lease (name, owner, pid, hostname, mode, acquired_at, heartbeat_at,"
                " expires_at) VALUES ('engine', ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT(name) DO UPDATE SET owner = excluded.owner, pid = excluded.pid,"
                " hostname = excluded.hostname, mode = excluded.mode,"
                " acquired_at = excluded.acquired_at, heartbeat_at = excluded.heartbeat_at,"
                " expires_at = excluded.expires_at",
                (owner, pid, hostname, mode, ts, ts, ts + ttl),
            )
            row = await self._fetchone(  # type: ignore[attr-defined]
                conn, "SELECT * FROM lease WHERE name = 'engine'"
            )
        assert row is not None
        return Lease.from_row(row)

    async def renew_lease(self, owner: str, *, ttl: float, now: float | None = None) -> bool:
        ts = stamp(now)
        async with self.transaction() as conn:  # type: ignore[attr-defined]
            cur = await conn.execute(
                "UPDATE lease SET heartbeat_at = ?, expires_at = ? WHERE name = 'engine'"
                " AND owner = ?",
                (ts, ts + ttl, owner),
            )
            ok = cur.rowcount == 1
            await cur.close()
        return ok

    async def release_lease(self, owner: str) -> None:
        async with self.transaction() as conn:  # type: ignore[attr-defined]
            await conn.execute("DELETE FROM lease WHERE name = 'engine' AND owner = ?", (owner,))

    async def lease_holder(self, now: float | None = None) -> Lease | None:
        """The live lease, if any (an expired one counts as none)."""
        async with self._read() as conn:  # type: ignore[attr-defined]
            row = await self._fetchone(  # type: ignore[attr-defined]
                conn, "SELECT * FROM lease WHERE name = 'engine'"
            )
        if row is None or row["expires_at"] <= stamp(now):
            return None
        return Lease.from_row(row)


def _check_status(status: EngineStatus) -> None:
    from vastui.store.db import StoreError

    for name in ("target", "workers"):
        value = getattr(status, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise StoreError(f"engine status {name} must be an integer >= 0, got {value!r}")
    for stage, count in status.by_stage.items():
        if not isinstance(stage, str) or isinstance(count, bool) or not isinstance(count, int):
            raise StoreError(f"engine status by_stage must map stage to count, got {stage!r}")
    if not isinstance(status.updated_at, int | float) or not math.isfinite(status.updated_at):
        raise StoreError(
            f"engine status updated_at must be epoch seconds, got {status.updated_at!r}"
        )
