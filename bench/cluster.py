"""curio's cluster database in the simulated world and the engine's reader of it (issue 27):
the choices behind them, measured.

* **The server**: a fresh PostgreSQL (initdb, start, the database) and its stop, from each
  source found here: the pgserver wheel (a dependency) and the system's server, interleaved.
* **The driver**: the same reading (the reader's three heaviest statements over 200 workers,
  2,000 tasks and 50,000 PSProve results) with psycopg 3 (async, the engine's) and asyncpg
  (when installed: `pip install asyncpg`), interleaved: wall time per reading and the client's
  CPU per reading.
* **The reader**: ``ClusterReader.read`` over the same 200 workers (every statement it sends).

Figures only: the goals are the issue's choices, argued from these numbers in its note.
"""

from __future__ import annotations

import asyncio
import glob
import resource
import statistics
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.common import Figure

WORKERS = 200


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _sources() -> dict[str, Path]:
    import importlib.util

    out = {}
    spec = importlib.util.find_spec("pgserver")
    if spec is not None and spec.submodule_search_locations:
        out["wheel"] = Path(spec.submodule_search_locations[0]) / "pginstall" / "bin"
    system = sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    if system:
        out["system"] = Path(system[0])
    return out


def _servers(repeat: int) -> dict[str, Figure]:
    from vastsim.postgres import PostgresServer, _version, find_binaries

    base = find_binaries()
    figures: dict[str, Figure] = {}
    samples: dict[str, list[tuple[float, float]]] = {}
    sources = _sources()
    for _ in range(repeat):
        for name, bindir in sources.items():
            version = _version(bindir)
            if version is None:
                continue
            bins = type(base)(bindir, version, name)
            server = PostgresServer(binaries=bins)
            t0 = time.perf_counter()
            server.start()
            t1 = time.perf_counter()
            server.stop()
            t2 = time.perf_counter()
            samples.setdefault(f"{name}_{version}", []).append((t1 - t0, t2 - t1))
    for key, values in samples.items():
        figures[f"server.{key}.start_s"] = round(statistics.median(v[0] for v in values), 3)
        figures[f"server.{key}.stop_s"] = round(statistics.median(v[1] for v in values), 3)
    return figures


def _fill(conninfo: str) -> None:
    import psycopg

    from vastsim import curio_schema

    with psycopg.connect(conninfo, autocommit=True) as c:
        curio_schema.apply(c)
        c.execute(
            "INSERT INTO harmony_machines (host_and_port, cpu, ram, gpu) "
            f"SELECT '127.0.0.1:' || (12400 + g), 8, 1, 1 FROM generate_series(1, {WORKERS}) g"
        )
        c.execute(
            "INSERT INTO harmony_machine_details (machine_id, machine_name) "
            "SELECT id, 'vastui-main-r' || (id) FROM harmony_machines"
        )
        c.execute(
            "INSERT INTO harmony_task (name, posted_time, added_by, owner_id) SELECT 'PSProve', "
            f"now(), 1, CASE WHEN g % 3 = 0 THEN NULL ELSE 1 + g % {WORKERS} END "
            "FROM generate_series(1, 2000) g"
        )
        c.execute(
            "INSERT INTO harmony_task_history (task_id, name, posted, work_start, work_end, "
            "result, completed_by_host_and_port, err) SELECT g, 'PSProve', now(), now(), "
            "now() - (g % 1000) * interval '1 minute', g % 7 <> 0, "
            f"'127.0.0.1:' || (12401 + g % {WORKERS}), 'boom' FROM generate_series(1, 50000) g"
        )
        c.execute("ANALYZE")


Q_MACHINES = """SELECT m.id, m.host_and_port, m.last_contact, m.unschedulable,
  (SELECT count(*) FROM harmony_task t WHERE t.owner_id = m.id)
FROM harmony_machines m WHERE m.host_and_port = ANY($1)"""
Q_HISTORY = """SELECT completed_by_host_and_port, count(*) FILTER (WHERE result),
  count(*) FILTER (WHERE NOT result) FROM harmony_task_history
WHERE name = 'PSProve' AND work_end >= $2 AND completed_by_host_and_port = ANY($1)
GROUP BY completed_by_host_and_port"""
Q_TASKS = """SELECT count(*) FILTER (WHERE owner_id IS NULL), count(*) FILTER
  (WHERE owner_id IS NOT NULL) FROM harmony_task WHERE name = 'PSProve'"""


async def _drivers(server: Any, repeat: int) -> dict[str, Figure]:
    import psycopg

    addrs = [f"127.0.0.1:{12401 + i}" for i in range(WORKERS)]
    since = datetime.now(UTC).replace(tzinfo=None) - timedelta(hours=1)
    contenders: dict[str, Any] = {}
    pconn = await psycopg.AsyncConnection.connect(server.conninfo(), autocommit=True)
    pm = Q_MACHINES.replace("$1", "%(a)s")
    ph = Q_HISTORY.replace("$1", "%(a)s").replace("$2", "%(s)s")

    async def with_psycopg() -> None:
        await (await pconn.execute(pm, {"a": addrs})).fetchall()
        await (await pconn.execute(ph, {"a": addrs, "s": since})).fetchall()
        await (await pconn.execute(Q_TASKS)).fetchone()

    contenders["psycopg"] = with_psycopg
    aconn = None
    try:
        import asyncpg

        aconn = await asyncpg.connect(
            host=server.host, port=server.port, user=server.user, password=server.password,
            database=server.database,
        )  # fmt: skip

        async def with_asyncpg() -> None:
            await aconn.fetch(Q_MACHINES, addrs)
            await aconn.fetch(Q_HISTORY, addrs, since)
            await aconn.fetchrow(Q_TASKS)

        contenders["asyncpg"] = with_asyncpg
    except ImportError:
        pass
    wall: dict[str, list[float]] = {k: [] for k in contenders}
    cpu: dict[str, list[float]] = {k: [] for k in contenders}
    for fn in contenders.values():
        await fn()  # warm: plans, prepared statements
    for _ in range(repeat):
        for name, fn in contenders.items():
            c0, t0 = _cpu(), time.perf_counter()
            await fn()
            wall[name].append(time.perf_counter() - t0)
            cpu[name].append(_cpu() - c0)
    await pconn.close()
    if aconn is not None:
        await aconn.close()
    figures: dict[str, Figure] = {}
    for name in contenders:
        figures[f"driver.{name}.read_ms"] = round(statistics.median(wall[name]) * 1000, 2)
        figures[f"driver.{name}.client_cpu_ms"] = round(statistics.median(cpu[name]) * 1000, 3)
    return figures


async def _reader(server: Any, repeat: int) -> dict[str, Figure]:
    from vastui.engine.cluster import ClusterReader, Worker

    reader = ClusterReader(
        server.host, server.port, user=server.user, dbname=server.database,
        password=server.password,
    )  # fmt: skip
    now = time.time()
    workers = [
        Worker(i + 1, f"127.0.0.1:{12401 + i}", f"vastui-main-r{i + 1}", None, now - 7200, now)
        for i in range(WORKERS)
    ]
    await reader.read(workers, now, 3600.0)
    wall, cpu = [], []
    for _ in range(repeat):
        c0, t0 = _cpu(), time.perf_counter()
        await reader.read(workers, now, 3600.0)
        wall.append(time.perf_counter() - t0)
        cpu.append(_cpu() - c0)
    await reader.close()
    return {
        "reader.read_ms": round(statistics.median(wall) * 1000, 2),
        "reader.client_cpu_ms": round(statistics.median(cpu) * 1000, 3),
    }


def run(quick: bool) -> dict[str, Figure]:
    from vastsim.postgres import PostgresServer

    figures = _servers(2 if quick else 5)
    server = PostgresServer()
    server.start()
    try:
        _fill(server.conninfo())
        repeat = 20 if quick else 100
        figures.update(asyncio.run(_drivers(server, repeat)))
        figures.update(asyncio.run(_reader(server, repeat)))
    finally:
        server.stop()
    return figures


GOALS: list[Any] = []  # figures only (the module docstring says why)
