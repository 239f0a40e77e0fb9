"""SSH host keys pinned per Vast instance (table ``host_keys``), trusted on first use: a
changed key is never re-pinned automatically (the operator verifies it and forgets the pin)."""

from __future__ import annotations

import sqlite3

from vastui.domain.worker import HostKeyRecord

from .checks import check_positive_int, check_text
from .common import stamp
from .database import Database, execute, fetch_one
from .errors import StoreError


def host_key_from_row(row: sqlite3.Row) -> HostKeyRecord:
    return HostKeyRecord(
        instance_id=row["instance_id"],
        host=row["host"],
        port=row["port"],
        public_key=row["public_key"],
        fingerprint=row["fingerprint"],
        pinned_at=row["pinned_at"],
    )


def openssh_key_body(public_key: object) -> str:
    """``"<type> <base64>"`` of an OpenSSH public key line; the comment is dropped."""
    if not isinstance(public_key, str):
        raise StoreError(f"public_key must be a string, got {type(public_key).__name__}")
    parts = public_key.split()
    if len(parts) < 2:
        raise StoreError("public_key must be an OpenSSH public key line ('<type> <base64>')")
    return f"{parts[0]} {parts[1]}"


_ROW = "SELECT * FROM host_keys WHERE instance_id = ?"


class HostKeyRepo:
    """The ``host_keys`` table."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def get(self, instance_id: int) -> HostKeyRecord | None:
        """The host key pinned for an instance, or None if nothing is pinned yet."""
        check_positive_int("instance_id", instance_id)
        async with self._db.read() as conn:
            row = await fetch_one(conn, _ROW, (instance_id,))
        return host_key_from_row(row) if row else None

    async def pin(
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
        :meth:`forget` first.
        """
        ts = stamp(now)
        check_positive_int("instance_id", instance_id)
        host = check_text("host", host)
        if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
            raise StoreError(f"port must be an integer in 1..65535, got {port!r}")
        key = openssh_key_body(public_key)
        fingerprint = check_text("fingerprint", fingerprint)
        async with self._db.transaction() as conn:
            old = await fetch_one(conn, _ROW, (instance_id,))
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
            row = await fetch_one(conn, _ROW, (instance_id,))
        assert row is not None
        return host_key_from_row(row)

    async def forget(self, instance_id: int) -> bool:
        """Drop an instance's pin (after the operator verified a re-key). False if none."""
        check_positive_int("instance_id", instance_id)
        async with self._db.transaction() as conn:
            removed = await execute(
                conn, "DELETE FROM host_keys WHERE instance_id = ?", (instance_id,)
            )
        return removed > 0
