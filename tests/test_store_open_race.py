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
