"""Measured rates per machine (table ``machine_perf``), the ranking's memory of each machine."""

from __future__ import annotations

import sqlite3
from dataclasses import replace

from vastui.domain.machines import PerfRecord

from .checks import check_optional_positive_int, check_positive_int, check_rate, check_text
from .common import stamp
from .database import Database, fetch_all, fetch_one
from .health import plain_row

_plain = plain_row(PerfRecord)


def _perf_from_row(row: sqlite3.Row) -> PerfRecord:
    rec = _plain(row)
    return replace(rec, last_partial=bool(rec.last_partial))


class PerfRepo:
    """The ``machine_perf`` table."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def record_rate(
        self,
        machine_id: int,
        gpu_name: str,
        num_gpus: int,
        rate: float,
        *,
        cpu_ram_gb: float | None = None,
        host_id: int | None = None,
        now: float | None = None,
        partial: bool = False,
    ) -> PerfRecord:
        """Record a machine's measured rate (proofs/hour: a benchmark's, or production's when it
        falls short): best = max, last = rate, samples += 1. A ``partial`` one (an aborted
        benchmark's pace) is the last, marked so, and never raises the best."""
        ts = stamp(now)
        check_positive_int("machine_id", machine_id)
        gpu_name = check_text("gpu_name", gpu_name)
        check_positive_int("num_gpus", num_gpus)
        rate = check_rate("rate", rate)
        if cpu_ram_gb is not None:
            cpu_ram_gb = check_rate("cpu_ram_gb", cpu_ram_gb)
        check_optional_positive_int("host_id", host_id)
        async with self._db.transaction() as conn:
            await conn.execute(
                "INSERT INTO machine_perf (machine_id, gpu_name, num_gpus, best_rate, last_rate,"
                " samples, cpu_ram_gb, measured_at, host_id, last_partial)"
                " VALUES (?, ?, ?, ?, ?, 1, ?, ?, ?, ?)"
                " ON CONFLICT(machine_id, gpu_name, num_gpus) DO UPDATE SET"
                " best_rate = CASE WHEN excluded.last_partial THEN best_rate"
                " ELSE MAX(best_rate, excluded.best_rate) END,"
                " last_rate = excluded.last_rate, last_partial = excluded.last_partial,"
                " samples = samples + 1,"
                " cpu_ram_gb = COALESCE(excluded.cpu_ram_gb, cpu_ram_gb),"
                " measured_at = excluded.measured_at,"
                " host_id = COALESCE(excluded.host_id, host_id)",
                (machine_id, gpu_name, num_gpus, rate, rate, cpu_ram_gb, ts, host_id, int(partial)),
            )
            row = await fetch_one(
                conn,
                "SELECT * FROM machine_perf WHERE machine_id = ? AND gpu_name = ? AND num_gpus = ?",
                (machine_id, gpu_name, num_gpus),
            )
        assert row is not None
        return _perf_from_row(row)

    async def of_machine(self, machine_id: int) -> list[PerfRecord]:
        async with self._db.read() as conn:
            rows = await fetch_all(
                conn,
                "SELECT * FROM machine_perf WHERE machine_id = ? ORDER BY gpu_name, num_gpus",
                (machine_id,),
            )
        return [_perf_from_row(r) for r in rows]

    async def all(self) -> list[PerfRecord]:
        async with self._db.read() as conn:
            rows = await fetch_all(
                conn, "SELECT * FROM machine_perf ORDER BY machine_id, gpu_name, num_gpus"
            )
        return [_perf_from_row(r) for r in rows]
