"""The store: the database, its repositories and the units of work that span tables.

The repositories are the store's interface, one per table group: ``store.instances``,
``store.badlist``, ``store.perf``, ``store.events``, ``store.intents``, ``store.commands``,
``store.lease``, ``store.host_keys``, ``store.status``, ``store.meta``, ``store.foreign`` (each
signature written once, in its repository). A write that spans several tables
(:meth:`Store.complete_destroy`, :meth:`Store.declare_fleet_failure`, :meth:`Store.put_foreign`,
...) is a method here: one transaction on one connection, each repository contributing its rows.
Times are REAL epoch seconds (UTC); every writing method takes ``now=`` (default the wall clock)
so callers and tests are deterministic. Invalid input is a one-line :class:`StoreError`; the
store's health is the engine's (see ``database.py`` and ``health.py``).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import aiosqlite

from vastui.domain.journal import BAN_KEY, Intent
from vastui.domain.machines import BadEntry, BanSpec
from vastui.domain.worker import BidHistory, ForeignInstance, InstanceRecord, bid_history

from .badlist import BadListRepo, checked_ban, verify_bad_list
from .checks import check_positive_int, check_text
from .commands import CommandRepo
from .common import lines_json, stamp
from .database import Database, fetch_one
from .errors import StoreError
from .events import EventRepo, insert_event
from .foreign import ForeignRepo
from .hostkeys import HostKeyRepo
from .instances import InstanceRepo, verify_instances
from .intents import IntentRepo
from .lease import LeaseRepo
from .meta import MetaRepo
from .perf import PerfRepo
from .status import StatusRepo


async def _verify_rows(conn: aiosqlite.Connection, path: Path) -> None:
    """Every instance and bad-list row decodes, or the store does not open (an engine that
    cannot read its fleet must say so once, not warn every step)."""
    await verify_instances(conn, path)
    await verify_bad_list(conn, path)


class Store:
    """Async access to the vastui SQLite database. Create with ``await Store.open(path)``."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.instances = InstanceRepo(db)
        self.badlist = BadListRepo(db)
        self.perf = PerfRepo(db)
        self.events = EventRepo(db)
        self.intents = IntentRepo(db)
        self.commands = CommandRepo(db)
        self.lease = LeaseRepo(db)
        self.host_keys = HostKeyRepo(db)
        self.status = StatusRepo(db)
        self.meta = MetaRepo(db)
        self.foreign = ForeignRepo(db)

    # -- lifecycle --------------------------------------------------------------------------

    @classmethod
    async def open(cls, path: Path, *, migrate: bool = True) -> Store:
        """Open (creating if needed) and migrate the database at ``path``; see
        :meth:`Database.open`. A row the engine decides on that does not decode is
        :class:`StoreFatal` here, at open."""
        return cls(await Database.open(path, migrate=migrate, verify=_verify_rows))

    @classmethod
    async def empty(cls, path: Path) -> Store:
        """A store with nothing in it, in memory, for a reader that found no database at
        ``path``: nothing is known yet, and the reader creates no file (the engine will)."""
        return cls(await Database.empty(path))

    @property
    def path(self) -> Path:
        return self.db.path

    @property
    def closed(self) -> bool:
        return self.db.closed

    async def check_health(self) -> None:
        """Raise :class:`StoreFatal` if this store can no longer be trusted: an earlier write hit
        a fatal error, or the file was deleted or replaced under the open connection. Cheap (a
        stat): the engine calls it every step."""
        await self.db.check_health()

    async def close(self) -> None:
        await self.db.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def schema_version(self) -> int:
        return await self.db.schema_version()

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[aiosqlite.Connection]:
        """The database's write transaction (see :meth:`Database.transaction`), for the store
        package's own writers (the legacy importer) and tests."""
        async with self.db.transaction() as conn:
            yield conn

    async def journal_mark(self) -> tuple[int, int]:
        """The last event's and the last intent's ids. Every act on the fleet or its bad list
        records one of them in the act's own transaction (an intent before a rent or a
        destroy, an event with a ban or an unban): a mark unchanged across an act that failed
        says it did nothing, and the act may be tried again without being done twice."""
        async with self.db.read() as conn:
            row = await fetch_one(
                conn,
                "SELECT (SELECT COALESCE(MAX(id), 0) FROM events),"
                " (SELECT COALESCE(MAX(id), 0) FROM intents)",
            )
        return (int(row[0]), int(row[1])) if row is not None else (0, 0)

    # -- instances --------------------------------------------------------------------------

    async def bid_history(self, *, now: float) -> list[BidHistory]:
        """Each machine's record as a bid (vastui/engine/bidding.py learns from it)."""
        return bid_history(await self.instances.list_bids(), now)

    async def mark_killed(
        self,
        vast_id: int,
        kind: str,
        reason: str,
        *,
        failed_stage: str | None = None,
        bench_outcome: str | None = None,
        error_lines: Iterable[str] | None = None,
        event: str | None = None,
        detail: Mapping[str, Any] | None = None,
        now: float | None = None,
    ) -> InstanceRecord:
        """Mark an instance killed (terminal). ``failed_stage`` defaults to its current stage.

        With ``event`` (e.g. ``"destroy"``), the event is appended in the same transaction, so a
        destroy is never recorded without its event. Killing an already-killed instance changes
        nothing and writes no event (the first recorded cause wins). Raises
        :class:`StoreError` for an unknown instance.
        """
        ts = stamp(now)
        check_positive_int("vast_id", vast_id)
        kind, reason, lines = InstanceRepo.check_kill(kind, reason, failed_stage, error_lines)
        async with self.db.transaction() as conn:
            before, row = await self.instances.kill_row(
                conn, vast_id, kind, reason, failed_stage, bench_outcome, lines, ts
            )
            if event is not None and before["state"] != "killed":
                await insert_event(
                    conn, event, reason, ts=ts, instance_id=vast_id,
                    machine_id=row["machine_id"],
                    detail={"kind": kind, "stage": row["failed_stage"], **(detail or {})},
                )  # fmt: skip
        return self.instances.decode(row)

    async def revive_vanished(
        self, vast_id: int, *, now: float | None = None
    ) -> InstanceRecord | None:
        """An instance recorded as vanished (no destroy was ever sent) that Vast lists again:
        back in the stage it was lost in, its stage clock restarted, with an ``adopt`` event.
        None when the row is not a vanished one (a destroyed instance stays destroyed)."""
        ts = stamp(now)
        async with self.db.transaction() as conn:
            row = await self.instances.row(conn, vast_id)
            if row is None or row["state"] != "killed" or row["kill_kind"] != "vanished":
                return None
            stage = row["failed_stage"] or "loading"
            await conn.execute(
                "UPDATE instances SET state = ?, killed_at = NULL, kill_kind = NULL,"
                " kill_reason = NULL, failed_stage = NULL, stage_started_at = ?"
                " WHERE vast_id = ?",
                (stage, ts, vast_id),
            )
            await insert_event(
                conn, "adopt",
                f"instance {vast_id} is listed again after it was recorded vanished: "
                f"adopted back in {stage}",
                ts=ts, instance_id=vast_id, machine_id=row["machine_id"],
            )  # fmt: skip
            after = await self.instances.row(conn, vast_id)
        return None if after is None else self.instances.decode(after)

    # -- destroy and ban: one intent, one unit of work ----------------------------------------

    async def create_destroy_intent(
        self,
        vast_id: int,
        reason: str,
        *,
        machine_id: int | None = None,
        detail: Mapping[str, Any] | None = None,
        ban: BanSpec | None = None,
        now: float | None = None,
    ) -> Intent:
        """Record the decision to destroy ``vast_id`` (and, with ``ban``, to ban its machine)
        before the DELETE is sent. The ban rides in the intent (``intent.ban``), so a restart
        that redoes the destroy records the ban too. ``detail`` is the kill to redo (e.g.
        ``policy.Kill.to_detail()``)."""
        check_positive_int("vast_id", vast_id)
        check_text("destroy reason", reason)
        if ban is not None:
            ban = checked_ban(ban)
        full = {**(detail or {}), BAN_KEY: ban.to_json() if ban is not None else None}
        return await self.intents.create(
            "destroy", reason, instance_id=vast_id, machine_id=machine_id, detail=full, now=now
        )

    async def complete_destroy(
        self,
        intent_id: int,
        kind: str,
        reason: str,
        *,
        failed_stage: str | None = None,
        bench_outcome: str | None = None,
        error_lines: Iterable[str] | None = None,
        detail: Mapping[str, Any] | None = None,
        now: float | None = None,
    ) -> tuple[InstanceRecord | None, BadEntry | None]:
        """After Vast confirmed a destroy: in ONE transaction mark the intent's instance killed
        with its 'destroy' event, record the ban the intent carries (bad-list upsert + 'ban'
        event) and close the intent. Either all of it is recorded or none of it is.

        Idempotent: an intent no longer pending changes nothing (returns the instance, None).
        An instance already killed keeps its first cause (no second destroy event) but the
        intent's ban is still recorded. Returns (instance or None if it has no row, the
        bad-list entry written or None).
        """
        ts = stamp(now)
        check_positive_int("intent_id", intent_id)
        kind, reason, lines = InstanceRepo.check_kill(kind, reason, failed_stage, error_lines)
        async with self.db.transaction() as conn:
            intent = await self.intents.get_row(conn, intent_id)
            if intent is None or intent.kind != "destroy":
                raise StoreError(f"no destroy intent {intent_id}")
            vast_id = intent.instance_id
            inst = await self.instances.row(conn, vast_id) if vast_id is not None else None
            if intent.status != "pending":
                return (self.instances.decode(inst) if inst is not None else None), None
            if inst is not None and vast_id is not None:
                before, inst = await self.instances.kill_row(
                    conn, vast_id, kind, reason, failed_stage, bench_outcome, lines, ts
                )
                if before["state"] != "killed":
                    await insert_event(
                        conn, "destroy", reason, ts=ts, instance_id=vast_id,
                        machine_id=inst["machine_id"],
                        detail={"kind": kind, "stage": inst["failed_stage"], **(detail or {})},
                    )  # fmt: skip
            bad = None
            ban = intent.ban
            if ban is not None:
                ban = checked_ban(ban)
                evidence = lines_json(ban.evidence) if ban.evidence else None
                bad = await self.badlist.ban_row(conn, ban, evidence, ts, instance_id=vast_id)
            await self.intents.close_row(conn, intent_id, ts)
        return (
            self.instances.decode(inst) if inst is not None else None,
            self.badlist.decode(bad) if bad is not None else None,
        )

    # -- curio's cluster: drains and releases --------------------------------------------------

    async def start_drain(
        self,
        intent_id: int,
        drain: Mapping[str, Any],
        text: str,
        *,
        now: float | None = None,
    ) -> bool:
        """A destroy intent's drain has begun (its worker's curio machine cordoned): in one
        transaction the drain rides in the intent (``detail["drain"]``: a restarted engine
        resumes it), the instance says it drains and until when, and one ``cordoned`` event.
        False (nothing written) when the intent already carries a drain or is not pending."""
        ts = stamp(now)
        check_positive_int("intent_id", intent_id)
        check_text("cordoned event", text)
        async with self.db.transaction() as conn:
            intent = await self.intents.get_row(conn, intent_id)
            if intent is None or intent.kind != "destroy" or intent.status != "pending":
                return False
            if isinstance(intent.detail.get("drain"), dict):
                return False
            detail = {**intent.detail, "drain": dict(drain)}
            await conn.execute(
                "UPDATE intents SET detail = ?, updated_at = ? WHERE id = ?",
                (json.dumps(detail), ts, intent_id),
            )
            vast_id = intent.instance_id
            row = await self.instances.row(conn, vast_id) if vast_id is not None else None
            if row is not None:
                await conn.execute(
                    "UPDATE instances SET drain_started_at = ?, drain_deadline = ?"
                    " WHERE vast_id = ?",
                    (drain.get("started"), drain.get("deadline"), vast_id),
                )
            await insert_event(
                conn, "cordoned", text, ts=ts, instance_id=vast_id,
                machine_id=row["machine_id"] if row is not None else None,
                detail={k: drain.get(k) for k in ("curio_machine", "held", "deadline")},
            )  # fmt: skip
        return True

    async def pool_stop(
        self, intent_id: int, vast_id: int, text: str, *, now: float | None = None
    ) -> InstanceRecord:
        """A drained surplus worker stopped into the warm pool (vastui/engine/pool.py): in one
        transaction it is pooled (its drain over), its destroy intent closed with the reason
        and one ``pool`` event."""
        ts = stamp(now)
        check_positive_int("vast_id", vast_id)
        check_text("pool event", text)
        async with self.db.transaction() as conn:
            row = await self.instances.row(conn, vast_id)
            if row is None:
                raise StoreError(f"no instance {vast_id}")
            await conn.execute(
                "UPDATE instances SET pooled_since = COALESCE(pooled_since, ?),"
                " pool_start_at = NULL, drain_started_at = NULL, drain_deadline = NULL"
                " WHERE vast_id = ?",
                (ts, vast_id),
            )
            await conn.execute(
                "UPDATE intents SET status = 'done', note = ?, updated_at = ? WHERE id = ?",
                (text[:300], ts, intent_id),
            )
            await insert_event(
                conn, "pool", text, ts=ts, instance_id=vast_id, machine_id=row["machine_id"]
            )
        rec = await self.instances.get(vast_id)
        assert rec is not None
        return rec

    async def note_released(
        self,
        vast_id: int,
        freed: int,
        text: str,
        *,
        detail: Mapping[str, Any] | None = None,
        event: bool = True,
        now: float | None = None,
    ) -> InstanceRecord:
        """A worker's tasks freed in curio's cluster (destroyed, or outbid): when and how many,
        and its ``tasks_released`` event, in one transaction."""
        ts = stamp(now)
        check_positive_int("vast_id", vast_id)
        async with self.db.transaction() as conn:
            await conn.execute(
                "UPDATE instances SET released_at = ?, released_tasks = ? WHERE vast_id = ?",
                (ts, int(freed), vast_id),
            )
            row = await self.instances.row(conn, vast_id)
            if row is None:
                raise StoreError(f"no instance {vast_id}")
            if event:
                await insert_event(
                    conn, "tasks_released", text, ts=ts, instance_id=vast_id,
                    machine_id=row["machine_id"], detail={"tasks": int(freed), **(detail or {})},
                )  # fmt: skip
        return self.instances.decode(row)

    # -- bad list and strikes -----------------------------------------------------------------

    # -- performance --------------------------------------------------------------------------

    # -- events -------------------------------------------------------------------------------

    # -- intents and commands -----------------------------------------------------------------

    # -- the lease ----------------------------------------------------------------------------

    # -- SSH host-key pins --------------------------------------------------------------------

    # -- the engine's status and offers -------------------------------------------------------

    # -- ownership: the fleet's identity and the other controllers' instances ----------------

    async def put_foreign(self, seen: list[ForeignInstance], *, now: float) -> list[str]:
        """Replace the foreign instances with those of the last list; return the owners seen
        for the first time ever (each is warned about once, not at every list)."""
        async with self.db.transaction() as conn:
            await ForeignRepo.replace_rows(conn, seen, now)
            return [
                owner
                for owner in sorted({f.owner for f in seen})
                if await MetaRepo.first_warning(conn, owner, now)
            ]

    # -- the provisioning pause of a fleet-wide failure ---------------------------------------

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
        text = str(value.get("text") or value["signature"])
        unban = f"fleet-wide failure, not the machine's: {text}"[:500]
        async with self.db.transaction() as conn:
            await MetaRepo.pause_row(conn, value, now)
            await BadListRepo.forgive_strikes(conn, forgive_instances)
            unbanned = [
                mid
                for mid in forgive_machines
                if await BadListRepo.unban_row(conn, mid, unban, now, automatic_since=since)
            ]
            await insert_event(
                conn, "fleet_failure", f"provisioning paused: {text}"[:500], ts=now, detail=value
            )
        return unbanned

    async def put_autoscale(
        self, state: dict[str, Any], change: str | None, *, now: float, detail: dict[str, Any]
    ) -> None:
        """The automatic target's state; a change of target is an event in the same
        transaction (kind ``target``)."""
        async with self.db.transaction() as conn:
            await MetaRepo.autoscale_row(conn, state)
            if change is not None:
                await insert_event(conn, "target", change[:500], ts=now, detail=detail)

    async def clear_fleet_failure(self, why: str, *, now: float) -> bool:
        """Lift the pause (False if there was none); the event says why."""
        async with self.db.transaction() as conn:
            if not await MetaRepo.unpause_row(conn):
                return False
            await insert_event(conn, "fleet_failure", f"provisioning resumed: {why}"[:500], ts=now)
        return True
