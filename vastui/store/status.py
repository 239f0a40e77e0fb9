"""What the engine publishes for its readers: its status (table ``engine_status``, one row)
and its ranked offers (table ``engine_offers``, one row)."""

from __future__ import annotations

import json
import math
import sqlite3
from typing import Any

from vastui.domain.delivery import Delivery
from vastui.domain.engine_state import EngineStatus

from .common import json_obj
from .database import Database, fetch_one
from .errors import StoreError


def status_from_row(row: sqlite3.Row) -> EngineStatus:
    by_stage = json_obj(row["by_stage"]) or {}
    return EngineStatus(
        target=int(row["target"]),
        workers=int(row["workers"]),
        by_stage={str(k): int(v) for k, v in by_stage.items()},
        reason_kind=row["reason_kind"],
        reason=row["reason"],
        best=json_obj(row["best"]),
        dry_run=bool(row["dry_run"]),
        updated_at=float(row["updated_at"]),
        reason_since=row["reason_since"],
        wall_at=row["wall_at"],
        simulated=bool(row["simulated"]),
        credit=_money(row["credit"]),
        spent_today=_money(row["spent_today"]),
        daily_budget=_money(row["daily_budget"]),
        dph=_money(row["dph"]),
        dph_cap=_money(row["dph_cap"]),
        cluster=json_obj(row["cluster"]),
        cut_off=row["cut_off"],
        cut_off_since=row["cut_off_since"] if row["cut_off"] is not None else None,
        delivery=Delivery.from_json(json_obj(row["delivery"])),
    )


def check_status(status: EngineStatus) -> None:
    """StoreError naming the first field not fit to store."""
    for name, value in (("target", status.target), ("workers", status.workers)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise StoreError(f"engine status {name} must be an integer >= 0, got {value!r}")
    for stage, count in status.by_stage.items():
        if not isinstance(stage, str) or isinstance(count, bool) or not isinstance(count, int):
            raise StoreError(f"engine status by_stage must map stage to count, got {stage!r}")
    if not isinstance(status.updated_at, int | float) or not math.isfinite(status.updated_at):
        raise StoreError(
            f"engine status updated_at must be epoch seconds, got {status.updated_at!r}"
        )
    for name in ("credit", "spent_today", "daily_budget", "dph", "dph_cap", "cut_off_since"):
        value = getattr(status, name)
        if value is not None and (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise StoreError(f"engine status {name} must be a finite number, got {value!r}")


def _money(value: Any) -> float | None:
    """A stored amount: a finite number, else unknown (the file may be older or edited)."""
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


class StatusRepo:
    """The ``engine_status`` and ``engine_offers`` tables."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def put(self, status: EngineStatus) -> EngineStatus:
        """Replace the one status row; ``reason_since`` is kept while the reason kind lasts
        (the given one is ignored) and set to ``updated_at`` when it changes."""
        check_status(status)
        async with self._db.transaction() as conn:
            old = await fetch_one(
                conn, "SELECT reason_kind, reason_since FROM engine_status WHERE id = 1"
            )
            since = status.updated_at
            if old is not None and old["reason_kind"] == status.reason_kind:
                since = old["reason_since"] if old["reason_since"] is not None else since
            await conn.execute(
                "INSERT INTO engine_status (id, target, workers, by_stage, reason_kind, reason,"
                " best, dry_run, updated_at, reason_since, wall_at, simulated, credit,"
                " spent_today, daily_budget, dph, dph_cap, cluster, cut_off, cut_off_since,"
                " delivery) VALUES (1,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
                " ON CONFLICT(id) DO UPDATE SET target = excluded.target,"
                " workers = excluded.workers, by_stage = excluded.by_stage,"
                " reason_kind = excluded.reason_kind, reason = excluded.reason,"
                " best = excluded.best, dry_run = excluded.dry_run,"
                " updated_at = excluded.updated_at, reason_since = excluded.reason_since,"
                " wall_at = excluded.wall_at, simulated = excluded.simulated,"
                " credit = excluded.credit, spent_today = excluded.spent_today,"
                " daily_budget = excluded.daily_budget, dph = excluded.dph,"
                " dph_cap = excluded.dph_cap, cluster = excluded.cluster,"
                " cut_off = excluded.cut_off, cut_off_since = excluded.cut_off_since,"
                " delivery = excluded.delivery",
                (
                    status.target, status.workers, json.dumps(dict(status.by_stage)),
                    status.reason_kind, status.reason,
                    None if status.best is None else json.dumps(status.best, default=str),
                    int(status.dry_run), status.updated_at, since,
                    status.wall_at, int(status.simulated), status.credit, status.spent_today,
                    status.daily_budget, status.dph, status.dph_cap,
                    None if status.cluster is None else json.dumps(status.cluster, default=str),
                    status.cut_off, status.cut_off_since,
                    None if status.delivery is None else json.dumps(status.delivery.to_json()),
                ),
            )  # fmt: skip
            row = await fetch_one(conn, "SELECT * FROM engine_status WHERE id = 1")
        assert row is not None
        return status_from_row(row)

    async def get(self) -> EngineStatus | None:
        """The engine's last published status, or None if no engine has run a cycle here."""
        async with self._db.read() as conn:
            row = await fetch_one(conn, "SELECT * FROM engine_status WHERE id = 1")
        return status_from_row(row) if row else None

    async def put_offers(self, filter_text: str, offers: list[dict[str, Any]], now: float) -> None:
        """Replace the engine's published offers (already ranked, JSON-safe rows)."""
        body = json.dumps(offers, separators=(",", ":"), default=str)
        async with self._db.transaction() as conn:
            await conn.execute(
                "INSERT INTO engine_offers (id, filter, body, updated_at) VALUES (1, ?, ?, ?)"
                " ON CONFLICT(id) DO UPDATE SET filter = excluded.filter, body = excluded.body,"
                " updated_at = excluded.updated_at",
                (filter_text, body, float(now)),
            )

    async def get_offers(self) -> tuple[str, list[dict[str, Any]], float] | None:
        """(filter, rows, updated_at) the engine last published, or None."""
        async with self._db.read() as conn:
            row = await fetch_one(
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
