"""A non-editable install works outside the checkout (issue 19, item 6): the wheel carries the
themes, the console's stylesheet and the worker image's scripts (setup.py, vastui/resources.py),
so the demo engine runs real workers and the console finds its named themes from anywhere.

The wheel is built by pip from this checkout into a target directory, and run with the test
venv's dependencies from a directory that is not the checkout."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("site")
    build = tmp_path_factory.mktemp("build")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target",
         str(target), str(ROOT)],
        capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "TMPDIR": str(build)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return target


def run(
    installed: Path, cwd: Path, *argv: str, timeout: float = 120
) -> subprocess.CompletedProcess:
    env = {
        **os.environ, "PYTHONPATH": str(installed), "VASTUI_STATE_DIR": str(cwd / "state"),
        "XDG_CONFIG_HOME": str(cwd / "config"), "HOME": str(cwd),
    }  # fmt: skip
    env.pop("VASTUI_CONFIG", None)
    return subprocess.run(
        [sys.executable, *argv], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=timeout, check=False,
    )  # fmt: skip


def test_the_installed_package_carries_its_files(installed: Path, tmp_path: Path):
    probe = run(installed, tmp_path, "-c", (
        "import json, vastui\n"
        "from vastui.resources import bundled_dir\n"
        "from vastui.console.themes import load_theme_dirs, theme_dirs\n"
        "from vastui.console.app import VastuiApp\n"
        "import pathlib\n"
        "css = pathlib.Path(vastui.__file__).parent / 'console' / VastuiApp.CSS_PATH\n"
        "print(json.dumps({'package': vastui.__file__, 'themes': [t.name for t in "
        "load_theme_dirs(theme_dirs())], 'worker': str(bundled_dir('worker-image')), "
        "'css': css.is_file()}))\n"
    ))  # fmt: skip
    assert probe.returncode == 0, probe.stderr[-2000:]
    seen = json.loads(probe.stdout)
    assert seen["package"].startswith(str(installed)), "the installed copy, not the checkout"
    assert {"vastui-night", "vastui-paper"} <= set(seen["themes"])
    worker = Path(seen["worker"])
    assert worker.is_relative_to(installed)
    assert {"entrypoint.sh", "benchmark.sh", "workerctl", "vastui-lib.sh"} <= {
        p.name for p in worker.iterdir()
    }
    assert seen["css"]


def test_the_installed_demo_engine_runs_real_workers(installed: Path, tmp_path: Path):
    done = run(
        installed, tmp_path, "-m", "vastui", "--engine-only", "--demo", "--for", "15s",
        "--speed", "300", "--target-workers", "1", "--db", str(tmp_path / "fleet.db"),
    )  # fmt: skip
    said = done.stdout + done.stderr
    assert done.returncode == 0, said[-3000:]
    assert "worker-image scripts not found" not in said
    # a sandbox with the shipped scripts ran the worker's entrypoint, which reported to the
    # engine (the sandboxes are gone with the engine; its database remembers)
    assert "sandbox" in said
    with sqlite3.connect(tmp_path / "fleet.db") as db:
        reported = db.execute(
            "SELECT count(*) FROM instances WHERE first_report_at IS NOT NULL"
        ).fetchone()[0]
    assert reported >= 1, said[-3000:]
