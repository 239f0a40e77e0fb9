"""The engine lease (table ``lease``, one row): one engine at a time per database."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

from vastui.domain.engine_state import Lease

from .common import stamp
from .database import Database, execute, fetch_one
from .health import plain_row

_lease_from_row = plain_row(Lease)


class LeaseHeld(Exception):
    """Another engine holds the lease on this database."""

    def __init__(self, holder: Lease) -> None:
        self.holder = holder
        super().__init__(
            f"another vastui engine ({holder.mode}, pid {holder.pid} on {holder.hostname}) "
            f"is running on this database; its lease expires "
            f"{max(0, int(holder.expires_at - time.time()))}s after its last heartbeat"
        )


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


_ROW = "SELECT * FROM lease WHERE name = 'engine'"


class LeaseRepo:
    """The ``lease`` table."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def acquire(
        self, owner: str, *, pid: int, hostname: str, mode: str, ttl: float,
        now: float | None = None,
    ) -> Lease:  # fmt: skip
        """Take the engine lease, or raise LeaseHeld if a live one belongs to someone else."""
        ts = stamp(now)
        async with self._db.transaction() as conn:
            row = await fetch_one(conn, _ROW)
            if row is not None and row["owner"] != owner and row["expires_at"] > ts:
                holder = _lease_from_row(row)
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
            row = await fetch_one(conn, _ROW)
        assert row is not None
        return _lease_from_row(row)

    async def renew(self, owner: str, *, ttl: float, now: float | None = None) -> bool:
        ts = stamp(now)
        async with self._db.transaction() as conn:
            changed = await execute(
                conn,
                "UPDATE lease SET heartbeat_at = ?, expires_at = ? WHERE name = 'engine'"
                " AND owner = ?",
                (ts, ts + ttl, owner),
            )
        return changed == 1

    async def release(self, owner: str) -> None:
        async with self._db.transaction() as conn:
            await execute(conn, "DELETE FROM lease WHERE name = 'engine' AND owner = ?", (owner,))

    async def recorded(self) -> Lease | None:
        """The lease row, lapsed or not (None: none, as after a clean stop released it)."""
        async with self._db.read() as conn:
            row = await fetch_one(conn, _ROW)
        return None if row is None else _lease_from_row(row)

    async def holder(self, now: float | None = None) -> Lease | None:
        """The live lease, if any (an expired one counts as none)."""
        lease = await self.recorded()
        return None if lease is None or lease.expires_at <= stamp(now) else lease
