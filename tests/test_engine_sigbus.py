"""A fatal store error is one line and status 1, even the one that arrives as a signal: the
database's -shm truncated under a process using the store makes SQLite's next touch of its
mapping raise SIGBUS (status 135 and not a word, before vastui/engine/sigbus.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.helpers import WAIT

REPO = Path(__file__).resolve().parent.parent

USER = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from vastui.engine import sigbus
    from vastui.store import Store

    async def main(db):
        assert sigbus.install(db)
        store = await Store.open(Path(db))
        await store.events.add("fleet", "first")
        print("ready", flush=True)
        sys.stdin.readline()  # the test truncates the -shm, then says go
        for n in range(100_000):
            await store.events.add("fleet", f"note {n}")
        print("the mapping never faulted", flush=True)

    asyncio.run(main(sys.argv[1]))
    """
)


def test_a_shm_truncated_under_the_store_is_one_line_and_status_1(tmp_path: Path) -> None:
    db = tmp_path / "fleet.db"
    user = subprocess.Popen(
        [sys.executable, "-c", USER, str(db)], cwd=REPO, stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert user.stdout.readline().strip() == "ready"
        os.truncate(f"{db}-shm", 0)
        out, err = user.communicate("go\n", timeout=WAIT)
    finally:
        if user.poll() is None:
            user.kill()
            user.wait(WAIT)
    assert user.returncode == 1, (user.returncode, out, err[-500:])
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "SIGBUS" in lines[0] and f"{db}-shm" in lines[0], lines
    assert lines[0].startswith("vastui: engine stopped: ")


def test_the_headless_engine_installs_it_before_it_opens_the_store(monkeypatch, tmp_path) -> None:
    from vastui.backend import Options
    from vastui.config import Config
    from vastui.engine import headless
    from vastui.engine.runtime import RunOptions

    calls: list[str] = []
    monkeypatch.setenv("VASTUI_STATE_DIR", str(tmp_path))
    monkeypatch.setattr(headless.sigbus, "install", lambda db: calls.append(db) or True)

    async def no_engine(*_args, **_kw):
        assert calls, "installed before the engine (and its store) start"
        return {}, None

    monkeypatch.setattr(headless, "run_engine", no_engine)
    opts = Options(config=Config(), db=tmp_path / "fleet.db", demo=True)
    assert headless.run_headless(opts, RunOptions(), None) == 0
    assert calls == [str(tmp_path / "fleet.db")]
