"""Other controllers' instances on the account (table ``foreign_instances``), as last listed.

Several controllers may share one Vast account (a console on a laptop beside the production
engine, staging beside production). An instance is this database's only if it intended it: a
rent intent with its label, written before the request (``IntentRepo.intended``). Every other
instance with vastui's label is another controller's: recorded here as seen, and never adopted,
counted or destroyed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import aiosqlite

from vastui.domain.worker import ForeignInstance

from .database import Database, execute, fetch_all

_COLUMNS = (
    "vast_id, label, owner, machine_id, gpu_name, num_gpus, dph_total, vast_status,"
    " first_seen_at, last_seen_at"
)


def _finite_or_none(value: float | None) -> float | None:
    return value if isinstance(value, float | int) and math.isfinite(value) else None


class ForeignRepo:
    """The ``foreign_instances`` table."""

    def __init__(self, db: Database) -> None:
        self._db = db

    @staticmethod
    async def replace_rows(
        conn: aiosqlite.Connection, seen: Iterable[ForeignInstance], now: float
    ) -> None:
        """Inside the caller's transaction: the foreign instances are those of the last list
        (each keeps when it was first seen)."""
        rows = await fetch_all(conn, "SELECT vast_id, first_seen_at FROM foreign_instances")
        first = {int(r[0]): float(r[1]) for r in rows}
        await execute(conn, "DELETE FROM foreign_instances")
        await conn.executemany(
            f"INSERT INTO foreign_instances ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (f.vast_id, f.label, f.owner, f.machine_id, f.gpu_name, f.num_gpus,
                 _finite_or_none(f.dph_total), f.vast_status, first.get(f.vast_id, now), now)
                for f in seen
            ],
        )  # fmt: skip

    async def all(self) -> list[ForeignInstance]:
        async with self._db.read() as conn:
            rows = await fetch_all(
                conn, f"SELECT {_COLUMNS} FROM foreign_instances ORDER BY vast_id"
            )
        return [ForeignInstance(*tuple(r)) for r in rows]
