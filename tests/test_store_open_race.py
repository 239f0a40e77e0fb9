"""Processes that open one fresh database at once (an engine started by systemd, `vastui status`
beside it) all get the schema: each migration step takes the write lock and reads the version
again under it, so none runs a step another already applied ("table instances already exists").
Real processes, released together by a file; nothing is timed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.helpers import WAIT, wait_for
from vastui.store import SCHEMA_VERSION

OPEN = """
import asyncio, os, sys, time
from pathlib import Path
from vastui.store import Store
go = Path(sys.argv[2])
Path(sys.argv[3]).touch()  # ready
while not go.exists():
    time.sleep(0.001)
async def main():
    store = await Store.open(Path(sys.argv[1]))
    print(await store.schema_version())
    await store.close()
asyncio.run(main())
"""


def test_many_processes_open_a_fresh_database_at_once(tmp_path: Path) -> None:
    db, go = tmp_path / "fresh.db", tmp_path / "go"
    procs = []
    for i in range(8):
        ready = tmp_path / f"ready-{i}"
        procs.append(
            (
                subprocess.Popen(
                    [sys.executable, "-c", OPEN, str(db), str(go), str(ready)],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                ),
                ready,
            )
        )
    wait_for(lambda: all(ready.exists() for _, ready in procs), what="every process ready")
    go.touch()
    for proc, _ in procs:
        out, err = proc.communicate(timeout=WAIT)
        assert proc.returncode == 0, err
        assert out.strip() == str(SCHEMA_VERSION)


CLI = """
import sys, time
from pathlib import Path
go = Path(sys.argv[1])
Path(sys.argv[2]).touch()  # ready
from vastui.cli import main
while not go.exists():
    time.sleep(0.001)
sys.exit(main(sys.argv[3:]))
"""

# Issue 17: an engine's migration (here `vastui migrate`, which opens as the engine does), a
# writing command, and the operator's readers on one fresh file, released together.
RACERS = [
    ["migrate"],
    ["bad", "add", "42", "--reason", "raced"],
    ["status", "--json"],
    ["bad", "list"],
    ["events"],
    ["instances", "--json"],
    ["perf"],
    ["status"],
]


def _race(tmp_path: Path, db: Path, argvs: list[list[str]]) -> list[tuple[int, str, str]]:
    go = tmp_path / "go-cli"
    procs = []
    for i, argv in enumerate(argvs):
        ready = tmp_path / f"cli-ready-{i}"
        cmd = [sys.executable, "-c", CLI, str(go), str(ready), *argv, "--db", str(db)]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        procs.append((proc, ready))
    wait_for(lambda: all(ready.exists() for _, ready in procs), what="every process ready")
    go.touch()
    out = []
    for proc, _ in procs:
        stdout, stderr = proc.communicate(timeout=WAIT)
        out.append((proc.returncode, stdout, stderr))
    return out


def test_readers_and_writers_race_on_a_fresh_database(tmp_path: Path) -> None:
    """Writers migrate under the lock; readers never migrate: each either reads the new
    database or finds none (nothing known yet). No process fails, none runs a step twice."""
    db = tmp_path / "fresh.db"
    results = _race(tmp_path, db, RACERS)
    for argv, (code, _, err) in zip(RACERS, results, strict=True):
        assert code == 0, (argv, err)
        assert "already exists" not in err and "duplicate column" not in err, (argv, err)
    import asyncio

    from vastui.store import Store

    async def check() -> None:
        async with await Store.open(db, migrate=False) as store:
            assert await store.schema_version() == SCHEMA_VERSION
            assert [b.machine_id for b in await store.badlist.all()] == [42]

    asyncio.run(check())


def test_a_reader_never_migrates_an_older_database(tmp_path: Path) -> None:
    """A database older than the code: every reader says so in one line and leaves it as it
    is; the engine's open (or `vastui migrate`) upgrades it."""
    import asyncio
    import sqlite3

    from vastui.store.migrations import MIGRATIONS

    db = tmp_path / "old.db"
    conn = sqlite3.connect(db)
    for script in MIGRATIONS[:-1]:
        conn.executescript(script)
    conn.execute(f"PRAGMA user_version = {len(MIGRATIONS) - 1}")
    conn.commit()
    conn.close()
    db.chmod(0o600)
    readers = [argv for argv in RACERS if argv[0] not in ("migrate",) and argv[1:2] != ["add"]]
    for code, out, err in _race(tmp_path, db, readers):
        assert code == 2 and out == ""
        assert err.count("\n") == 1 and "older than this vastui" in err, err
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION - 1
    from vastui.store import Store

    async def upgrade() -> int:
        async with await Store.open(db) as store:
            return await store.schema_version()

    assert asyncio.run(upgrade()) == SCHEMA_VERSION
