"""Which instances are this database's: its fleet identity, its intents, and the others' seen.

A mixin of :class:`vastui.store.Store`. Several controllers may share one Vast account (a
console on a laptop beside the production engine, staging beside production). An instance is
this database's only if it intended it: a rent intent with its label, written before the
request. Every other instance with vastui's label is another controller's; it is recorded here
as seen (``foreign_instances``), and never adopted, counted or destroyed.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from vastui.store.errors import StoreError


@dataclass(frozen=True, slots=True)
class ForeignInstance:
    """An instance with vastui's label that this database never intended, as last listed."""

    vast_id: int
    label: str
    owner: str  # the fleet its label names: "<fleet>.<fleet id>", or "<fleet>" (older label)
    machine_id: int | None = None
    gpu_name: str | None = None
    num_gpus: int | None = None
    dph_total: float | None = None
    vast_status: str | None = None
    first_seen_at: float = 0.0
    last_seen_at: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _finite_or_none(value: float | None) -> float | None:
    return value if isinstance(value, float | int) and math.isfinite(value) else None


class OwnershipOps:
    """Mixed into :class:`vastui.store.Store` (which provides ``_read`` and ``transaction``)."""

    async def fleet_id(self) -> str:
        """This database's fleet identity (8 hex digits, made once at its creation)."""
        async with self._read() as conn:  # type: ignore[attr-defined]
            cur = await conn.execute("SELECT value FROM meta WHERE key = 'fleet_id'")
            row = await cur.fetchone()
            await cur.close()
        if row is None or len(str(row[0])) != 8:
            raise StoreError("database has no fleet identity (meta.fleet_id): not a vastui store")
        return str(row[0])

    async def intended(self, label: str) -> bool:
        """Whether this database ever meant to rent an instance with this label (a rent intent
        that went, or may have gone, out; a dry run's never did) or recorded one under it."""
        async with self._read() as conn:  # type: ignore[attr-defined]
            cur = await conn.execute(
                "SELECT 1 FROM intents WHERE kind = 'rent' AND label = ? AND status != 'dry_run' "
                "UNION ALL SELECT 1 FROM instances WHERE label = ? LIMIT 1",
                (label, label),
            )
            row = await cur.fetchone()
            await cur.close()
        return row is not None

    async def put_foreign(self, seen: list[ForeignInstance], *, now: float) -> list[str]:
        """Replace the foreign instances with those of the last list; return the owners seen
        for the first time ever (each is warned about once, not at every list)."""
        new_owners: list[str] = []
        async with self.transaction() as conn:  # type: ignore[attr-defined]
            async with conn.execute("SELECT vast_id, first_seen_at FROM foreign_instances") as c:
                first = {int(r[0]): float(r[1]) for r in await c.fetchall()}
            await conn.execute("DELETE FROM foreign_instances")
            for f in seen:
                await conn.execute(
                    "INSERT INTO foreign_instances (vast_id, label, owner, machine_id, gpu_name, "
                    "num_gpus, dph_total, vast_status, first_seen_at, last_seen_at) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        f.vast_id, f.label, f.owner, f.machine_id, f.gpu_name, f.num_gpus,
                        _finite_or_none(f.dph_total), f.vast_status,
                        first.get(f.vast_id, now), now,
                    ),
                )  # fmt: skip
            for owner in sorted({f.owner for f in seen}):
                cur = await conn.execute(
                    "INSERT OR IGNORE INTO meta (key, value) VALUES (?, ?)",
                    (f"warned_foreign:{owner}", repr(now)),
                )
                if cur.rowcount == 1:
                    new_owners.append(owner)
        return new_owners

    async def list_foreign(self) -> list[ForeignInstance]:
        async with self._read() as conn:  # type: ignore[attr-defined]
            cur = await conn.execute(
                "SELECT vast_id, label, owner, machine_id, gpu_name, num_gpus, dph_total, "
                "vast_status, first_seen_at, last_seen_at FROM foreign_instances ORDER BY vast_id"
            )
            rows = await cur.fetchall()
            await cur.close()
        return [ForeignInstance(*tuple(r)) for r in rows]
