"""`python -m reliability resources`: a resource soak. One engine runs against the served cloud
(the soak's fault profile) for ``--minutes`` of wall time at ``--speed``, while the harness
samples, every ``--sample-every`` seconds:

* the engine process (``/proc/<pid>``): resident memory, open descriptors, threads, CPU time;
* its TCP connections, from its socket descriptors matched against ``/proc/net/tcp{,6}``:
  established to the Vast API, to the workers' sshds, to the controller-side stand-ins (the
  tunnels' far ends: the Lotus API, curio's database), to and from its own listeners (the CQL
  pinning proxy a forward goes through); and its listening sockets;
* the workers' side of SSH as the served cloud counts it (``/_sim/stats`` ``ssh``, vastsim/
  sshd.py ``census``): connections, sessions (commands running: the engine's channels) and
  remote forwards;
* the database: the file, its ``-wal`` and ``-shm``, and its rows (all tables) per instance
  ever rented.

The series is in the report. The invariants ``resource_growth`` and ``db_growth`` judge it with
:func:`reliability.invariants.growth`: after a warm-up, the last third's peak must stay within
a stated tolerance of the middle third's (RELIABILITY.md says why). Every invariant of the soak
is checked all along as well.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from reliability import invariants as inv
from reliability.crash import clean_stop
from reliability.soak import Watch
from reliability.trial import Trial, refill_bound

MIB = 1024.0 * 1024.0
ESTABLISHED, LISTEN = "01", "0A"

# metric → (invariant, tolerance). Counts get an absolute slack of a few (a worker more or less
# busy at the peak), sizes a relative one. The engine's SSH connections and the tunnels' far
# ends follow the live workers (at most the target), so their peaks recur while the fleet
# churns; a leak raises them.
JUDGED: dict[str, tuple[str, inv.Tolerance]] = {
    "rss_mib": ("resource_growth", inv.Tolerance(0.05, 4.0)),
    "fds": ("resource_growth", inv.Tolerance(0.15, 10.0)),
    "threads": ("resource_growth", inv.Tolerance(0.0, 2.0)),
    "tcp_api": ("resource_growth", inv.Tolerance(0.0, 3.0)),
    "tcp_ssh": ("resource_growth", inv.Tolerance(0.25, 3.0)),
    "tcp_tunnel": ("resource_growth", inv.Tolerance(0.25, 10.0)),
    "tcp_self": ("resource_growth", inv.Tolerance(0.25, 10.0)),
    "sim_ssh_connections": ("resource_growth", inv.Tolerance(0.25, 3.0)),
    "sim_ssh_sessions": ("resource_growth", inv.Tolerance(0.25, 4.0)),
    "wal_mib": ("resource_growth", inv.Tolerance(0.10, 1.0)),
    "rows_per_instance": ("db_growth", inv.Tolerance(0.15, 2.0)),
    "bytes_per_row": ("db_growth", inv.Tolerance(0.15, 64.0)),
}


# -- /proc ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class TcpEntry:
    local_port: int
    remote_port: int
    state: str  # hex, as /proc/net/tcp has it: 01 established, 0A listening
    inode: int


def parse_net_tcp(text: str) -> list[TcpEntry]:
    """``/proc/net/tcp`` or ``tcp6``: one entry per socket (the header and junk skipped)."""
    out = []
    for line in text.splitlines()[1:]:
        parts = line.split()
        if len(parts) < 10:
            continue
        try:
            local_port = int(parts[1].rsplit(":", 1)[1], 16)
            remote_port = int(parts[2].rsplit(":", 1)[1], 16)
            inode = int(parts[9])
        except (IndexError, ValueError):
            continue
        out.append(TcpEntry(local_port, remote_port, parts[3].upper(), inode))
    return out


def socket_inodes(fd_targets: Iterable[str]) -> set[int]:
    """The inodes of ``socket:[N]`` descriptor targets."""
    out = set()
    for target in fd_targets:
        if target.startswith("socket:[") and target.endswith("]"):
            try:
                out.add(int(target[8:-1]))
            except ValueError:
                continue
    return out


def classify(
    entries: Iterable[TcpEntry],
    inodes: set[int],
    *,
    api_ports: set[int],
    tunnel_ports: set[int],
) -> dict[str, int]:
    """The process's TCP sockets by what they reach: the API, the stand-ins (the tunnels' far
    ends), its own listeners (both ends: a forward the engine hands to its own local proxy,
    vastui/ssh/cqlpin.py), anything else (the workers' sshds)."""
    mine = [e for e in entries if e.inode in inodes and e.inode != 0]
    listening = {e.local_port for e in mine if e.state == LISTEN}
    counts = {"tcp_api": 0, "tcp_tunnel": 0, "tcp_ssh": 0, "tcp_self": 0, "listening": 0}
    for e in mine:
        if e.state == LISTEN:
            counts["listening"] += 1
        elif e.state != ESTABLISHED:
            continue
        elif e.remote_port in api_ports:
            counts["tcp_api"] += 1
        elif e.remote_port in tunnel_ports:
            counts["tcp_tunnel"] += 1
        elif e.local_port in listening or e.remote_port in listening:
            counts["tcp_self"] += 1
        else:
            counts["tcp_ssh"] += 1
    return counts


def proc_status(text: str) -> dict[str, int]:
    """``/proc/<pid>/status``: resident kB and threads."""
    out = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "Threads"):
            try:
                out[key] = int(value.split()[0])
            except (IndexError, ValueError):
                continue
    return out


def sample_process(pid: int, api_ports: set[int], tunnel_ports: set[int]) -> dict[str, Any] | None:
    """One look at a live process; None when it is gone."""
    base = Path("/proc") / str(pid)
    try:
        status = proc_status((base / "status").read_text())
        targets = []
        for fd in os.listdir(base / "fd"):
            try:
                targets.append(os.readlink(base / "fd" / fd))
            except OSError:
                continue
        stat = (base / "stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / ticks if len(fields) > 12 else None
    entries: list[TcpEntry] = []
    for name in ("tcp", "tcp6"):
        try:
            entries += parse_net_tcp((base / "net" / name).read_text())
        except OSError:
            continue
    inodes = socket_inodes(targets)
    return {
        "rss_mib": round(status.get("VmRSS", 0) / 1024.0, 2),
        "threads": status.get("Threads"),
        "fds": len(targets),
        "sockets": len(inodes),
        "cpu_s": None if cpu is None else round(cpu, 2),
        **classify(entries, inodes, api_ports=api_ports, tunnel_ports=tunnel_ports),
    }


# -- the database --------------------------------------------------------------------------


def sample_db(db: Path) -> dict[str, Any]:
    """The file, its WAL and shared memory, and its rows (read-only)."""

    def size(path: Path) -> int:
        try:
            return path.stat().st_size
        except OSError:
            return 0

    out: dict[str, Any] = {
        "db_mib": round(size(db) / MIB, 3),
        "wal_mib": round(size(Path(f"{db}-wal")) / MIB, 3),
        "shm_mib": round(size(Path(f"{db}-shm")) / MIB, 3),
    }
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5.0)
    except sqlite3.Error:
        return out
    try:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        ]
        rows = {t: conn.execute(f'SELECT COUNT(*) FROM "{t}"').fetchone()[0] for t in tables}
        free = conn.execute("PRAGMA freelist_count").fetchone()[0]
        page = conn.execute("PRAGMA page_size").fetchone()[0]
    except sqlite3.Error:
        return out
    finally:
        conn.close()
    total = sum(rows.values())
    instances = rows.get("instances", 0)
    out.update(
        rows=total,
        instances=instances,
        events=rows.get("events", 0),
        free_mib=round(free * page / MIB, 3),
        rows_per_instance=round(total / instances, 2) if instances else None,
        bytes_per_row=round(size(db) / total, 1) if total else None,
    )
    return out


# -- the run ---------------------------------------------------------------------------------


def judge(
    series: Sequence[Mapping[str, Any]], warmup: float
) -> tuple[list[inv.Growth], list[inv.Violation]]:
    """Every judged metric of the series (``t`` in seconds): its growth and the violations."""
    results: list[inv.Growth] = []
    found: list[inv.Violation] = []
    for metric, (invariant, tolerance) in JUDGED.items():
        points = [
            (float(s["t"]), float(s[metric]))
            for s in series
            if isinstance(s.get(metric), int | float) and not isinstance(s.get(metric), bool)
        ]
        g = inv.growth(metric, points, tolerance, warmup)
        results.append(g)
        found += inv.growth_violations([g], invariant)
    return results, found


def per_hour(series: Sequence[Mapping[str, Any]], key: str, clock: str = "t") -> float | None:
    points = [
        (float(s[clock]), float(s[key]))
        for s in series
        if isinstance(s.get(key), int | float) and isinstance(s.get(clock), int | float)
    ]
    slope = inv.theil_sen(points)
    return None if slope is None else round(slope * 3600.0, 4)


def run(trial: Trial, minutes: float, sample_every: float, warmup: float) -> dict[str, Any]:
    assert trial.sim is not None
    speed = trial.opts.speed
    wall = minutes * 60.0
    trial.say(
        f"resources: {minutes:g} min of wall time at {speed:g}x ({wall * speed / 3600:.1f} "
        f"simulated hours), a sample every {sample_every:g}s, warm-up {warmup:.0%}"
    )
    api_ports = {urlsplit(trial.sim.url).port or 80}
    tunnel_ports = {
        int(v.rsplit(":", 1)[1])
        for v in (trial.sim.config.get("ssh") or {}).values()
        if isinstance(v, str) and v.rsplit(":", 1)[-1].isdigit()
    }
    trial.start_engine()
    if not trial.wait_lease():
        trial.record([inv.Violation("restart_refused", "start", "the engine took no lease")])
    start = time.time()
    sim_start = trial.sim_now()
    series: list[dict[str, Any]] = []
    pids: list[int] = []
    next_sample = 0.0

    def sample() -> None:
        nonlocal next_sample
        if time.monotonic() < next_sample or trial.engine is None:
            return
        next_sample = time.monotonic() + sample_every
        pid = trial.engine.pid
        if pid not in pids:
            pids.append(pid)
        row: dict[str, Any] = {
            "t": round(time.time() - start, 1),
            "sim_h": round((trial.sim_now() - sim_start) / 3600.0, 3),
            "pid": pid,
            "ours_listed": trial.samples[-1].alive if trial.samples else None,
        }
        row.update(sample_process(pid, api_ports, tunnel_ports) or {})
        census = ((trial.sim_counts() or {}).get("ssh") or {}) if trial.sim else {}
        for key in ("connections", "sessions", "forwards"):
            if isinstance(census.get(key), int):
                row[f"sim_ssh_{key}"] = census[key]
        row.update(sample_db(trial.wd.db))
        series.append(row)

    Watch(trial, start)(wall, each=sample)
    trial.final_checks()
    trial.target_reached_check(refill_bound(speed), start)
    growths, found = judge(series, warmup)
    trial.record(found)
    took = clean_stop(trial)
    sim_days = max(1e-9, (trial.sim_now() - sim_start) / 86400.0)
    last = series[-1] if series else {}
    return {
        "minutes": minutes,
        "sample_every_s": sample_every,
        "warmup": warmup,
        "engine_pids": pids,
        "growth": [g.to_json() for g in growths],
        "tolerances": {
            m: {"invariant": i, "rel": t.rel, "abs": t.abs} for m, (i, t) in JUDGED.items()
        },
        "database": {
            "db_mib_end": last.get("db_mib"),
            "rows_end": last.get("rows"),
            "instances_end": last.get("instances"),
            "db_mib_per_wall_hour": per_hour(series, "db_mib"),
            "db_mib_per_simulated_day": round((last.get("db_mib") or 0.0) / sim_days, 3),
            "instances_per_simulated_day": round((last.get("instances") or 0) / sim_days, 1),
        },
        "series": series,
        "samples": len(trial.samples),
        "sigterm_stop_s": None if took is None else round(took, 2),
    }
