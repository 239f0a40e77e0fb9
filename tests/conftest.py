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
