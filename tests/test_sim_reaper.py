"""A demo that dies uncleanly leaves worker processes; the next demo stops them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from vastsim.workers import MARKER, kill_sandbox_processes, reap_stale_sandboxes


def start_worker(root: Path) -> subprocess.Popen[bytes]:
    root.mkdir(parents=True)
    env = {"PATH": os.environ["PATH"], MARKER: str(root)}
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], env=env)


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_reaps_only_sandboxes_whose_owner_is_gone(tmp_path: Path):
    stale_dir = tmp_path / f"vastui-sim-{dead_pid()}-abc"
    live_dir = tmp_path / f"vastui-sim-{os.getpid()}-def"
    stale = start_worker(stale_dir / "instance-1")
    live = start_worker(live_dir / "instance-2")
    try:
        assert reap_stale_sandboxes(tmp_path) == 1
        assert stale.wait(timeout=10) != 0
        assert not stale_dir.exists()
        assert live.poll() is None and live_dir.exists()
        assert kill_sandbox_processes(live_dir / "instance-2") == 1
        assert live.wait(timeout=10) != 0
    finally:
        for proc in (stale, live):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
