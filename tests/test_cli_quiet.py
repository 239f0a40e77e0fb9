"""What the command line prints when it refuses: one line, `vastui: error: ...`, status 2, and
nothing before or after it (no log line, no traceback from a thread at exit)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from vastui.store import Store, StoreError


def vastui(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`vastui ARGV` in its own process: what a thread prints at exit is seen too."""
    return subprocess.run(
        [sys.executable, "-m", "vastui", *argv],
        capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
    )  # fmt: skip


def assert_one_line_error(done: subprocess.CompletedProcess[str], *words: str) -> None:
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert done.stdout == ""
    assert done.stderr.startswith("vastui: error: ") and done.stderr.count("\n") == 1, done.stderr
    for word in words:
        assert word in done.stderr, done.stderr


# -- a directory given as the database ---------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["status"],
        ["status", "--json"],
        ["instances"],
        ["events"],
        ["bad"],
        ["bad", "add", "7", "--reason", "r"],
        ["perf"],
        ["cluster"],
        ["offers"],
        ["migrate"],
        ["--engine-only", "--for", "1s"],
        ["--demo", "--engine-only", "--for", "1s"],
    ],
)
def test_a_directory_as_the_database_is_one_line(tmp_path: Path, argv: list[str]) -> None:
    folder = tmp_path / "state"
    folder.mkdir()
    done = vastui("--db", str(folder), *argv, env={"VAST_API_KEY": "k" * 64})
    assert_one_line_error(done, f"--db {folder}", "directory")
    assert list(folder.iterdir()) == [], "nothing was written in it"


def test_a_store_that_fails_to_open_leaves_no_thread_behind(tmp_path: Path) -> None:
    """aiosqlite's worker thread must be gone when the open fails: a thread still running when
    asyncio.run closes the loop dies in a traceback ("Event loop is closed")."""

    def connection_threads() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if "_connection_worker_thread" in t.name]

    before = set(connection_threads())

    async def attempt() -> list[threading.Thread]:
        with pytest.raises(StoreError, match=str(tmp_path)):
            await Store.open(tmp_path)  # a directory: SQLite cannot open it
        return [t for t in connection_threads() if t not in before and t.is_alive()]

    assert asyncio.run(attempt()) == []
