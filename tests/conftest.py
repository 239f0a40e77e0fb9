from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from tests.enginekit import World
from tests.helpers import Controller
from vastui.store import Store

# A real PostgreSQL with curio's schema, one per session (tests/pgfixtures.py)
pytest_plugins = ["tests.pgfixtures"]

# Textual reads this once, at import: it has to be set before any test imports textual.
os.environ["TEXTUAL_ANIMATIONS"] = "none"

# Property-based tests (tests/test_fuzz_*.py): "default" is fast and derandomized, so the suite
# gives the same answer on every run and machine; HYPOTHESIS_PROFILE=long searches much wider
# (and prints the blob that replays a failure). No example database: nothing written to the tree.
settings.register_profile(
    "default", max_examples=50, deadline=None, derandomize=True, database=None
)
settings.register_profile("long", max_examples=2000, deadline=None, database=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    """No test may read the developer's config, key files or state."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(home / ".local" / "state"))
    monkeypatch.delenv("VASTUI_CONFIG", raising=False)
    monkeypatch.delenv("VASTUI_STATE_DIR", raising=False)
    monkeypatch.delenv("VAST_API_KEY", raising=False)
    yield home


@pytest.fixture(autouse=True)
def _root_log_handlers() -> Iterator[None]:
    """A test that runs `vastui --engine-only` in-process installs root handlers on its own
    captured stderr (vastui/engine/headless.py setup_logging): removed after it, or a later test
    in the same worker has every log line written to a closed stream and reported, message and
    all, as a logging error on its own stderr."""
    import logging

    root = logging.getLogger()
    before = list(root.handlers)
    yield
    for handler in [h for h in root.handlers if h not in before]:
        root.removeHandler(handler)
        handler.close()


# The engine's world (tests/enginekit.py); a module may define its own `store`.
@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    yield World(tmp_path)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    s = await Store.open(tmp_path / "s.db")
    yield s
    await s.close()


# A demo runtime's state (its sandboxes, keys) under the test's own directory.
@pytest.fixture
def demo_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("VASTUI_STATE_DIR", str(tmp_path / "state"))
    return tmp_path


@pytest.fixture(autouse=True, scope="session")
def _cluster_server() -> Iterator[None]:
    """One PostgreSQL for the session's simulated curio clusters (vastsim/harmonydb.py
    share_server): each cluster (a Controller, a demo's worker hosts) gets a database of its own
    on it, ~0.1 s instead of a server's ~0.7 s start; a cluster with another password starts
    its own. Started from the main thread: the postmaster's parent-death signal follows it."""
    from vastsim import harmonydb
    from vastsim.postgres import PostgresServer

    server = PostgresServer(
        user=harmonydb.CURIO_DEFAULT_USER, password=harmonydb.CURIO_DEFAULT_PASSWORD,
        database="vastui_tests",
    )  # fmt: skip
    server.start()
    harmonydb.share_server(server)
    try:
        yield
    finally:
        harmonydb.share_server(None)
        server.stop()


# The controller a worker's tunnel reaches (tests/helpers.py); a module may define its own.
@pytest.fixture
def controller() -> Iterator[Controller]:
    c = Controller()
    try:
        yield c
    finally:
        c.close()


# A test that hangs says where: SIGUSR1 (or a test still running after STALL_S) writes every
# asyncio task's stack and every thread's to stderr and to $TMPDIR/vastui-stall-<pid>.txt. A
# diagnosis, not a timeout: the test goes on waiting.
STALL_S = float(os.environ.get("VASTUI_STALL_S", "300"))


def _await_chain(coro: object) -> list[str]:
    """A suspended coroutine's whole await chain (a task's own stack shows one frame)."""
    lines = []
    while coro is not None:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "ag_frame", None)
        if frame is not None:
            lines.append(f"{frame.f_code.co_filename}:{frame.f_lineno} {frame.f_code.co_name}")
        nxt = getattr(coro, "cr_await", None) or getattr(coro, "ag_await", None)
        if nxt is None and frame is None:
            lines.append(repr(coro))
        coro = nxt
    return lines


def _dump_stall(signum: int, frame: object) -> None:
    import asyncio
    import faulthandler
    import io
    import sys
    import tempfile

    out = io.StringIO()
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    tasks = asyncio.all_tasks(loop) if loop is not None else set()
    out.write(f"--- {len(tasks)} asyncio tasks ---\n")
    for task in tasks:
        out.write(f"{task!r}\n")
        out.writelines(f"    {line}\n" for line in _await_chain(task.get_coro()))
    text = out.getvalue()
    path = Path(tempfile.gettempdir()) / f"vastui-stall-{os.getpid()}.txt"
    with path.open("a") as f:
        f.write(text)
        f.flush()
        faulthandler.dump_traceback(file=f, all_threads=True)
    sys.stderr.write(text)


def pytest_configure(config: pytest.Config) -> None:
    import signal

    signal.signal(signal.SIGUSR1, _dump_stall)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    import signal
    import threading

    timer = threading.Timer(STALL_S, os.kill, (os.getpid(), signal.SIGUSR1))
    timer.daemon = True
    timer.start()
    try:
        return (yield)
    finally:
        timer.cancel()
