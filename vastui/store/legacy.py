"""Import the original Go vast-manager's ``state.db`` into a vastui :class:`Store`.

The legacy file is opened read-only and never modified. Two schema generations exist for
``bad_hosts`` and ``host_perf`` (detected per table from its columns):

* **pre-re-key** (``host_id`` column): keyed by the Vast operator ACCOUNT id, not the physical
  machine. Banning an account id as if it were a machine id would ban the wrong box (or none),
  so these rows go to ``legacy_review`` only, to be shown and counted separately; they are never
  written to ``bad_machines`` or ``machine_perf``.
* **post-re-key** (``machine_id`` column): imported into ``bad_machines`` (source ``legacy``; an
  existing entry is never touched, so manual/automatic bans are never downgraded) and
  ``machine_perf`` (best_rate = max of existing and legacy, samples >= 1).

``instances`` rows with a Vast id (the ``vast_id`` column, or a ``C.<id>`` label when the column
is missing in an old file) become ``InstanceRecord`` rows with ``source='legacy'``; an instance
vastui already has is never overwritten. Importing the same file twice adds nothing new. Every
import writes one ``import`` event carrying the counts.
"""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .errors import StoreError
from .events import insert_event
from .store import Store

LEGACY_TABLES: tuple[str, ...] = ("bad_hosts", "host_perf", "instances")

# original state -> (vastui state, stage the instance was in)
_STATE_MAP: dict[str, str] = {
    "registered": "paramfetch",
    "params_done": "benchmark",
    "bench_done": "benchmark",
    "running": "proving",
    "killed": "killed",
}

# kill_reason text written by the original tool -> typed kill_kind
_KILL_KIND_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"below min_rate", re.I), "bench_below_min"),
    (re.compile(r"param fetch timeout", re.I), "deadline_paramfetch"),
    (re.compile(r"benchmark timeout", re.I), "deadline_benchmark"),
    (re.compile(r"manual", re.I), "manual"),
    (re.compile(r"^bad host", re.I), "bad_machine"),
    (re.compile(r"disappeared", re.I), "vanished"),
    (re.compile(r"unregistered", re.I), "unregistered"),
)

_LABEL_RE = re.compile(r"^C\.(\d+)$")
_SSH_RE = re.compile(r"-p\s+(\d+)\s+\S*@(\S+)")


@dataclass
class ImportReport:
    """What :func:`import_legacy` did. ``review_*`` rows are host_id-era and NOT enforced."""

    path: str
    bad_machines: int = 0
    perf: int = 0
    instances: int = 0
    review_bad_hosts: int = 0
    review_perf: int = 0
    skipped: list[str] = field(default_factory=list)
    generations: dict[str, str] = field(default_factory=dict)  # table -> pre-re-key/post-re-key

    @property
    def imported(self) -> int:
        return self.bad_machines + self.perf + self.instances

    def counts(self) -> dict[str, int]:
        return {
            "bad_machines": self.bad_machines,
            "perf": self.perf,
            "instances": self.instances,
            "review_bad_hosts": self.review_bad_hosts,
            "review_perf": self.review_perf,
            "skipped": len(self.skipped),
        }

    def summary(self) -> str:
        text = (
            f"imported from {self.path}: {self.bad_machines} bad machines, "
            f"{self.perf} perf records, {self.instances} instances"
        )
        if self.review_bad_hosts or self.review_perf:
            text += (
                f"; set aside for review (host_id era, operator accounts, not enforced): "
                f"{self.review_bad_hosts} bad hosts, {self.review_perf} perf records"
            )
        if self.skipped:
            text += f"; {len(self.skipped)} skipped"
        return text


# ---------------------------------------------------------------------------------------------
# parsing helpers


def parse_legacy_time(value: object) -> float | None:
    """Parse a Go/SQLite TIMESTAMP (``'2026-03-13 17:09:15'``, RFC 3339, Go ``time.String``,
    or epoch seconds) to epoch seconds UTC. Naive times are UTC. Unparseable -> ``None``."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    text = str(value).strip()
    if not text:
        return None
    # Go's time.String(): "2026-03-13 17:09:15.123 +0000 UTC" / "... m=+0.01" monotonic suffix
    text = re.sub(r"\s+m=[+-][\d.]+$", "", text)
    text = re.sub(r"\s+([+-]\d{2})(\d{2})\s+[A-Z]{2,5}$", r"\1:\2", text)
    text = re.sub(r"\s+[A-Z]{3,5}$", "", text)
    text = text.replace("T", " ", 1)
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    # Python accepts at most 6 fractional digits; Go writes up to 9.
    text = re.sub(r"(\.\d{6})\d+", r"\1", text)
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


def _as_id(value: object) -> int | None:
    """A positive integer id from an INTEGER or TEXT column, else None."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, float):
        return int(value) if value.is_integer() and value > 0 else None
    if isinstance(value, int):
        return value if value > 0 else None
    text = str(value).strip()
    if not text.isdigit():
        return None
    number = int(text)
    return number if number > 0 else None


def _as_float(value: object) -> float | None:
    if not isinstance(value, int | float | str | bytes) or isinstance(value, bool):
        return None  # SQLite hands back nothing else
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if number == number else None  # NaN -> None


def _kill_kind(reason: str | None) -> str:
    for pattern, kind in _KILL_KIND_PATTERNS:
        if reason and pattern.search(reason):
            return kind
    return "legacy"


def _mb_to_gb(mb: object) -> float | None:
    value = _as_float(mb)
    return None if value is None else round(value / 1000.0, 3)  # Vast MB -> GB (CLI uses /1000)


# ---------------------------------------------------------------------------------------------
# reading the legacy file (sync, run in a thread)


@dataclass
class _LegacyData:
    columns: dict[str, set[str]]
    rows: dict[str, list[dict[str, Any]]]


def _read_legacy(path: Path) -> _LegacyData:
    if not path.exists():
        raise StoreError(f"legacy database {path} does not exist")
    if not path.is_file():
        raise StoreError(f"legacy database {path} is not a regular file")
    uri = path.resolve().as_uri() + "?mode=ro"
    try:
        conn = sqlite3.connect(uri, uri=True)
    except sqlite3.Error as e:
        raise StoreError(f"cannot open legacy database {path}: {e}") from e
    try:
        conn.row_factory = sqlite3.Row
        try:
            names = {
                r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            }
        except sqlite3.DatabaseError as e:
            raise StoreError(f"{path} is not an SQLite database ({e})") from e
        present = [t for t in LEGACY_TABLES if t in names]
        if not present:
            raise StoreError(
                f"{path} is not a vast-manager state.db: none of the tables "
                f"{', '.join(LEGACY_TABLES)} exist"
            )
        data = _LegacyData(columns={}, rows={})
        for table in present:
            cols = {r["name"] for r in conn.execute(f"PRAGMA table_info({table})")}
            data.columns[table] = cols
            data.rows[table] = [dict(r) for r in conn.execute(f"SELECT * FROM {table}")]
        return data
    except sqlite3.Error as e:
        raise StoreError(f"cannot read legacy database {path}: {e}") from e
    finally:
        conn.close()


# ---------------------------------------------------------------------------------------------


async def import_legacy(store: Store, path: Path, now: float | None = None) -> ImportReport:
    """Import a vast-manager ``state.db`` into ``store``; see the module docstring.

    Raises :class:`StoreError` (one line naming the path) if the file is missing, is not an
    SQLite database, or has none of the expected tables. All writes happen in one transaction.
    """
    ts = time.time() if now is None else float(now)
    path = Path(path)
    data = await asyncio.to_thread(_read_legacy, path)
    report = ImportReport(path=str(path))
    source_path = str(path.resolve())

    async with store.transaction() as conn:
        if "bad_hosts" in data.rows:
            await _import_bad_hosts(conn, data, report, ts, source_path)
        if "host_perf" in data.rows:
            await _import_host_perf(conn, data, report, ts, source_path)
        if "instances" in data.rows:
            await _import_instances(conn, data, report, ts)
        await insert_event(
            conn,
            "import",
            f"imported legacy state.db {path}",
            ts=ts,
            detail={
                "path": source_path,
                **report.counts(),
                "generations": report.generations,
                "skipped_reasons": report.skipped[:50],
            },
        )
    return report


def _generation(table: str, cols: set[str], report: ImportReport) -> str | None:
    if "machine_id" in cols:
        report.generations[table] = "post-re-key"
        return "post"
    if "host_id" in cols:
        report.generations[table] = "pre-re-key"
        return "pre"
    report.generations[table] = "unknown"
    report.skipped.append(f"{table}: no machine_id or host_id column; table ignored")
    return None


async def _import_bad_hosts(
    conn: Any, data: _LegacyData, report: ImportReport, ts: float, source_path: str
) -> None:
    gen = _generation("bad_hosts", data.columns["bad_hosts"], report)
    if gen is None:
        return
    key = "machine_id" if gen == "post" else "host_id"
    for row in data.rows["bad_hosts"]:
        ident = _as_id(row.get(key))
        reason = str(row.get("reason") or "").strip() or "imported from legacy bad_hosts"
        added = parse_legacy_time(row.get("added_at"))
        if ident is None:
            report.skipped.append(f"bad_hosts {key}={row.get(key)!r}: not a positive integer")
            continue
        if gen == "pre":
            cur = await conn.execute(
                "INSERT OR IGNORE INTO legacy_review (kind, host_id, gpu_name, num_gpus,"
                " bench_rate, reason, legacy_added_at, imported_at, source_path)"
                " VALUES ('bad_host', ?, NULL, NULL, NULL, ?, ?, ?, ?)",
                (ident, reason, added, ts, source_path),
            )
            report.review_bad_hosts += max(cur.rowcount, 0)
            await cur.close()
            continue
        async with conn.execute(
            "SELECT source FROM bad_machines WHERE machine_id = ?", (ident,)
        ) as cur:
            existing = await cur.fetchone()
        if existing is not None:
            report.skipped.append(
                f"bad_hosts machine {ident}: already on the bad list ({existing[0]})"
            )
            continue
        await conn.execute(
            "INSERT INTO bad_machines (machine_id, reason, source, created_at, updated_at,"
            " bans) VALUES (?, ?, 'legacy', ?, ?, 1)",
            (ident, reason, added if added is not None else ts, ts),
        )
        report.bad_machines += 1


async def _import_host_perf(
    conn: Any, data: _LegacyData, report: ImportReport, ts: float, source_path: str
) -> None:
    gen = _generation("host_perf", data.columns["host_perf"], report)
    if gen is None:
        return
    key = "machine_id" if gen == "post" else "host_id"
    for row in data.rows["host_perf"]:
        ident = _as_id(row.get(key))
        gpu = str(row.get("gpu_name") or "").strip()
        num = _as_id(row.get("num_gpus"))
        rate = _as_float(row.get("bench_rate"))
        measured = parse_legacy_time(row.get("measured_at"))
        label = f"host_perf {key}={row.get(key)!r} {gpu or '?'}x{row.get('num_gpus')!r}"
        if ident is None or not gpu or num is None or rate is None or rate < 0:
            report.skipped.append(f"{label}: incomplete or invalid row")
            continue
        if gen == "pre":
            reason = (
                f"host_id-era benchmark {rate:.1f} proofs/h on {gpu} x{num} "
                f"(operator account {ident}, machine unknown)"
            )
            cur = await conn.execute(
                "INSERT OR IGNORE INTO legacy_review (kind, host_id, gpu_name, num_gpus,"
                " bench_rate, reason, legacy_added_at, imported_at, source_path)"
                " VALUES ('perf', ?, ?, ?, ?, ?, ?, ?, ?)",
                (ident, gpu, num, rate, reason, measured, ts, source_path),
            )
            report.review_perf += max(cur.rowcount, 0)
            await cur.close()
            continue
        async with conn.execute(
            "SELECT best_rate, samples FROM machine_perf"
            " WHERE machine_id = ? AND gpu_name = ? AND num_gpus = ?",
            (ident, gpu, num),
        ) as cur:
            existing = await cur.fetchone()
        if existing is None:
            await conn.execute(
                "INSERT INTO machine_perf (machine_id, gpu_name, num_gpus, best_rate, last_rate,"
                " samples, cpu_ram_gb, measured_at, host_id) VALUES (?, ?, ?, ?, ?, 1, ?, ?, NULL)",
                (
                    ident,
                    gpu,
                    num,
                    rate,
                    rate,
                    _mb_to_gb(row.get("cpu_ram_mb")),
                    measured if measured is not None else ts,
                ),
            )
            report.perf += 1
        elif rate > existing[0] or existing[1] < 1:
            await conn.execute(
                "UPDATE machine_perf SET best_rate = MAX(best_rate, ?), samples = MAX(samples, 1),"
                " cpu_ram_gb = COALESCE(cpu_ram_gb, ?)"
                " WHERE machine_id = ? AND gpu_name = ? AND num_gpus = ?",
                (rate, _mb_to_gb(row.get("cpu_ram_mb")), ident, gpu, num),
            )
            report.perf += 1
        else:
            report.skipped.append(f"{label}: already known with best_rate >= {rate:.1f}")


async def _import_instances(conn: Any, data: _LegacyData, report: ImportReport, ts: float) -> None:
    rows = data.rows["instances"]
    # Newest first, so if a vast id appears twice (re-registration) the latest row wins.
    rows = sorted(
        rows, key=lambda r: parse_legacy_time(r.get("registered_at")) or 0.0, reverse=True
    )
    seen: set[int] = set()
    for row in rows:
        label = row.get("label")
        vast_id = _as_id(row.get("vast_id"))
        if vast_id is None and isinstance(label, str):
            match = _LABEL_RE.match(label.strip())
            vast_id = int(match.group(1)) if match else None
        who = f"instances uuid={row.get('uuid')!r} label={label!r}"
        if vast_id is None:
            report.skipped.append(f"{who}: no Vast instance id")
            continue
        if vast_id in seen:
            report.skipped.append(f"{who}: duplicate of a newer row for vast id {vast_id}")
            continue
        seen.add(vast_id)

        legacy_state = str(row.get("state") or "").strip()
        state = _STATE_MAP.get(legacy_state, "legacy")
        registered = parse_legacy_time(row.get("registered_at"))
        param_done = parse_legacy_time(row.get("param_done_at"))
        bench_done = parse_legacy_time(row.get("bench_done_at"))
        killed_at = parse_legacy_time(row.get("killed_at"))
        bench_rate = _as_float(row.get("bench_rate"))
        min_rate = _as_float(row.get("min_rate"))
        kill_reason = row.get("kill_reason")

        bench_outcome = None
        if bench_rate is not None and min_rate is not None:
            bench_outcome = "pass" if bench_rate >= min_rate else "fail"
        failed_stage = kill_kind = None
        if state == "killed":
            kill_kind = _kill_kind(kill_reason)
            if bench_outcome == "fail" or kill_kind == "bench_below_min":
                failed_stage = "benchmark"
            elif bench_done is not None:
                failed_stage = "proving"
            elif param_done is not None:
                failed_stage = "benchmark"
            else:
                failed_stage = "paramfetch"
        stage_started = {
            "paramfetch": registered,
            "benchmark": param_done,
            "proving": bench_done,
            "killed": killed_at,
        }.get(state)

        ssh_host = row.get("public_ip") or None
        ssh_port = None
        ssh_cmd = row.get("ssh_cmd")
        if isinstance(ssh_cmd, str) and (m := _SSH_RE.search(ssh_cmd)):
            ssh_port = int(m.group(1))
            ssh_host = ssh_host or m.group(2)

        error_lines = None
        if legacy_state and state == "legacy":
            error_lines = json.dumps([f"original state {legacy_state!r} not recognised"])

        created = registered if registered is not None else ts
        cur = await conn.execute(
            "INSERT INTO instances (vast_id, label, machine_id, host_id, gpu_name, num_gpus,"
            " dph_total, cpu_ram_gb, geolocation, state, stage_started_at, created_at,"
            " paramfetch_at, benchmark_at, proving_at, killed_at, bench_rate, min_rate,"
            " bench_outcome, failed_stage, kill_kind, kill_reason, error_lines, ssh_host,"
            " ssh_port, source)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?,"
            " 'legacy') ON CONFLICT(vast_id) DO NOTHING",
            (
                vast_id,
                label,
                _as_id(row.get("machine_id")),
                _as_id(row.get("host_id")),
                row.get("gpu_name"),
                _as_id(row.get("num_gpus")),
                _as_float(row.get("dph_total")),
                _mb_to_gb(row.get("cpu_ram_mb")),
                row.get("geolocation"),
                state,
                stage_started if stage_started is not None else created,
                created,
                registered,
                param_done,
                bench_done if legacy_state == "running" else None,
                killed_at if state == "killed" else None,
                bench_rate,
                min_rate,
                bench_outcome,
                failed_stage,
                kill_kind,
                kill_reason if state == "killed" else None,
                error_lines,
                ssh_host,
                ssh_port,
            ),
        )
        if cur.rowcount > 0:
            report.instances += 1
        else:
            report.skipped.append(f"{who}: vast id {vast_id} already in the store")
        await cur.close()
