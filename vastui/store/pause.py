"""A fleet-wide failure and the provisioning pause it causes (engine/fleetwide.py decides).

A mixin of :class:`vastui.store.Store`. Each destroy event carries its failure's signature in
its detail; the pause itself is one ``meta`` row (``fleet_failure``) that the engine sets and
that the operator (``vastui resume``) or a worker that passes its benchmark clears.
"""

from __future__ import annotations

import json
from typing import Any

from vastui.store.records import json_dict

_KEY = "fleet_failure"
_KNOWN = "fleet_signatures"  # every signature declared the fleet's -> when (engine clock)


class PauseOps:
    """Mixed into :class:`vastui.store.Store` (``_read``, ``transaction``, ``insert_event``)."""

    async def recent_failures(self, since: float) -> list[tuple[int, str, float, int | None]]:
        """(machine_id, signature, ts, instance_id) of every destroy after ``since`` that
        carries a failure signature."""
        async with self._read() as conn:  # type: ignore[attr-defined]
            cur = await conn.execute(
                "SELECT machine_id, instance_id, ts, detail FROM events "
                "WHERE kind = 'destroy' AND ts > ? AND machine_id IS NOT NULL ORDER BY id",
                (since,),
            )
            rows = await cur.fetchall()
            await cur.close()
        out = []
        for machine_id, instance_id, ts, detail in rows:
            sig = json_dict(detail).get("signature")
            if isinstance(sig, str) and sig:
                out.append((int(machine_id), sig, float(ts), instance_id))
        return out

    async def get_fleet_failure(self) -> dict[str, Any] | None:
        async with self._read() as conn:  # type: ignore[attr-defined]
            cur = await conn.execute("SELECT value FROM meta WHERE key = ?", (_KEY,))
            row = await cur.fetchone()
            await cur.close()
        if row is None:
            return None
        value = json_dict(row[0])
        return value if isinstance(value.get("signature"), str) else None

    async def declare_fleet_failure(
        self,
        value: dict[str, Any],
        *,
        forgive_machines: list[int],
        forgive_instances: list[int],
        since: float,
        now: float,
    ) -> list[int]:
        """Pause provisioning for a fleet-wide failure, and take back in the same transaction
        the strikes and automatic bans its earlier victims got (since ``since``): the failure
        was not theirs. Returns the machines unbanned."""
        unbanned: list[int] = []
        text = str(value.get("text") or value["signature"])
        async with self.transaction() as conn:  # type: ignore[attr-defined]
            await conn.execute(
                "INSERT INTO meta (key, value) VALUES (?, ?) "
                "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (_KEY, json.dumps(value, default=str)),
            )
            cur = await conn.execute("SELECT value FROM meta WHERE key = ?", (_KNOWN,))
            row = await cur.fetchone()
            await cur.close()
            known = json_dict(row[0]) if row else {}
            known[str(value["signature"])] = now
            if len(known) > 100:  # the newest hundred are plenty
                known = dict(sorted(known.items(), key=lambda kv: kv[1])[-100:])
            await conn.execute(
                "INSERT INTO meta (key, value) VALUES (?, ?) "
                "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (_KNOWN, json.dumps(known)),
            )
            for iid in forgive_instances:
                await conn.execute("DELETE FROM strikes WHERE instance_id = ?", (iid,))
            for mid in forgive_machines:
                cur = await conn.execute(
                    "SELECT reason, source, bans FROM bad_machines WHERE machine_id = ? "
                    "AND source = 'automatic' AND updated_at >= ?",
                    (mid, since),
                )
                old = await cur.fetchone()
                await cur.close()
                if old is None:
                    continue
                await conn.execute("DELETE FROM bad_machines WHERE machine_id = ?", (mid,))
                await self.insert_event(  # type: ignore[attr-defined]
                    conn, "unban", f"fleet-wide failure, not the machine's: {text}"[:500],
                    ts=now, machine_id=mid,
                    detail={"previous_reason": old[0], "source": old[1], "bans": old[2]},
                )  # fmt: skip
                unbanned.append(mid)
            await self.insert_event(  # type: ignore[attr-defined]
                conn, "fleet_failure", f"provisioning paused: {text}"[:500], ts=now,
                detail=value,
            )  # fmt: skip
        return unbanned

    async def fleet_signature_since(self, signature: str) -> float | None:
        """When this signature was last declared the fleet's (None: never). A pause may end
        while workers rented into the failure are still on their way to fail the same way."""
        async with self._read() as conn:  # type: ignore[attr-defined]
            cur = await conn.execute("SELECT value FROM meta WHERE key = ?", (_KNOWN,))
            row = await cur.fetchone()
            await cur.close()
        at = json_dict(row[0]).get(signature) if row else None
        return float(at) if isinstance(at, int | float) and not isinstance(at, bool) else None

    async def clear_fleet_failure(self, why: str, *, now: float) -> bool:
        """Lift the pause (False if there was none); the event says why."""
        async with self.transaction() as conn:  # type: ignore[attr-defined]
            cur = await conn.execute("DELETE FROM meta WHERE key = ?", (_KEY,))
            if cur.rowcount != 1:
                return False
            await self.insert_event(  # type: ignore[attr-defined]
                conn, "fleet_failure", f"provisioning resumed: {why}"[:500], ts=now
            )
        return True
