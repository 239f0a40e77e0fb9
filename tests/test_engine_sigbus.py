"""A fatal store error is one line and status 1, even the one that arrives as a signal: the
database's -shm truncated under a running engine makes SQLite's next touch of its mapping
raise SIGBUS (status 135 and not a word, before vastui/engine/sigbus.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import WAIT, wait_for

REPO = Path(__file__).resolve().parent.parent


def test_a_shm_truncated_under_the_engine_is_one_line_and_status_1(tmp_path: Path) -> None:
    db = tmp_path / "fleet.db"
    env = {**os.environ, "VASTUI_STATE_DIR": str(tmp_path)}
    argv = [sys.executable, "-m", "vastui", "--engine-only", "--demo", "--db", str(db),
            "--seed", "3", "--speed", "100", "--target-workers", "0", "--for", "600s"]  # fmt: skip
    engine = subprocess.Popen(
        argv, cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        log = tmp_path / "engine-demo.log"
        wait_for(lambda: log.exists() and "fleet 0/0 workers" in log.read_text(),
                 what="the engine's first step")  # fmt: skip
        os.truncate(f"{db}-shm", 0)
        _, err = engine.communicate(timeout=WAIT)
    finally:
        if engine.poll() is None:
            engine.kill()
            engine.wait(WAIT)
    assert engine.returncode == 1, (engine.returncode, err[-500:])
    lines = err.strip().splitlines()
    assert lines and "SIGBUS" in lines[-1] and f"{db}-shm" in lines[-1]
    assert lines[-1].startswith("vastui: engine stopped: ")
