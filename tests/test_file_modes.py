"""Every file vastui writes is 0600 in 0700 directories, whatever the umask (issue 10, defect 7).

The engine's log carries hosts, labels and server messages; the database holds the fleet; the
key opens every worker. None of them is for other users of the machine.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from vastui.config import (
    Config,
    default_db_path,
    ensure_state_dir,
    make_private_dir,
    state_dir,
    write_private,
)
from vastui.domain.worker import InstanceRecord
from vastui.engine.headless import setup_logging
from vastui.engine.keys import ensure_ssh_key
from vastui.store import Store

T0 = 1_790_000_000.0


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(params=[0o022, 0o002, 0o077, 0o277], ids=lambda m: f"umask{m:03o}")
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


@pytest.fixture
def engine_log() -> Iterator[None]:
    """setup_logging installs root handlers: take them away again."""
    yield
    root = logging.getLogger()
    for handler in [h for h in root.handlers if getattr(h, "vastui", False)]:
        root.removeHandler(handler)
        handler.close()


async def test_everything_vastui_writes_is_private(
    umask: int, engine_log: None, _isolated_env: Path
) -> None:
    state_home = Path(os.environ["XDG_STATE_HOME"])
    assert not state_home.exists()  # vastui creates the whole chain
    store = await Store.open(default_db_path())
    try:
        await store.instances.upsert(InstanceRecord(vast_id=5), now=T0)  # -wal and -shm exist
        setup_logging(state_dir() / "engine.log")
        logging.getLogger("vastui.engine").warning("a line with a host 10.0.0.1")
        key_path, _ = ensure_ssh_key(Config())
        sim = ensure_state_dir("sim")
        write_private(state_dir() / "ui.json", "{}")
        files = {
            p.name: mode(p)
            for p in state_dir().iterdir()
            if p.is_file()  # sqlite may or may not have left other files: all are checked
        }
        assert {"vastui.db", "vastui.db-wal", "vastui.db-shm", "engine.log"} <= set(files)
        assert {"id_ed25519", "id_ed25519.pub", "ui.json"} <= set(files)
        assert files == dict.fromkeys(files, 0o600)
        assert key_path == state_dir() / "id_ed25519"
        for directory in (state_home.parent, state_home, state_dir(), sim):
            assert mode(directory) == 0o700, directory
    finally:
        await store.close()


async def test_an_older_vastuis_loose_modes_are_tightened(
    engine_log: None, caplog: pytest.LogCaptureFixture
) -> None:
    base = state_dir()
    base.mkdir(parents=True, mode=0o755)
    base.chmod(0o755)
    log = base / "engine.log"
    log.write_text("old line\n")
    log.chmod(0o644)
    db = default_db_path()
    async with await Store.open(db):
        pass
    db.chmod(0o644)
    (base / "sim").mkdir(mode=0o755)
    (base / "sim").chmod(0o755)
    with caplog.at_level(logging.WARNING, logger="vastui.files"):
        async with await Store.open(db):
            pass
        setup_logging(log)
        ensure_state_dir("sim")
    assert mode(base) == 0o700 and mode(base / "sim") == 0o700
    assert mode(log) == 0o600 and mode(db) == 0o600
    assert log.read_text().startswith("old line\n")  # tightened, not replaced
    warnings = [r.getMessage() for r in caplog.records if r.name == "vastui.files"]
    assert f"{base} was open to other users (mode 0755); now 0700" in warnings
    assert f"{log} was open to other users (mode 0644); now 0600" in warnings
    assert all("\n" not in w for w in warnings)


async def test_directories_of_the_operator_are_left_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o755)
    async with await Store.open(shared / "fleet.db"):
        pass
    assert mode(shared) == 0o755  # --db in a directory of theirs: not chmodded
    assert mode(shared / "fleet.db") == 0o600
    created = tmp_path / "new" / "deeper"
    async with await Store.open(created / "fleet.db"):
        pass
    assert mode(created) == 0o700 and mode(created.parent) == 0o700  # made by vastui

    chosen = tmp_path / "chosen"
    chosen.mkdir()
    chosen.chmod(0o750)
    monkeypatch.setenv("VASTUI_STATE_DIR", str(chosen))
    with caplog.at_level(logging.WARNING, logger="vastui.files"):
        assert ensure_state_dir() == chosen
    assert mode(chosen) == 0o750  # chosen by the operator: said, not changed
    assert f"{chosen} is open to other users (mode 0750); chmod 700 it" in caplog.messages


def test_make_private_dir_never_loosens(tmp_path: Path) -> None:
    tight = tmp_path / "tight"
    tight.mkdir(mode=0o700)
    tight.chmod(0o500)
    make_private_dir(tight, "tighten")
    assert mode(tight) == 0o500
    tight.chmod(0o700)


def test_a_read_only_file_stays_read_only(tmp_path: Path) -> None:
    """Tightening takes group/other bits away and never adds any."""
    from vastui.config import tighten_private

    path = tmp_path / "ro.db"
    path.write_bytes(b"")
    path.chmod(0o444)
    tighten_private(path)
    assert mode(path) == 0o400


def test_tightening_a_file_never_opens_it(tmp_path, monkeypatch):
    """Closing any descriptor of a file drops every POSIX lock this process holds on it: a
    database's -shm that lost SQLite's lock is truncated by the next process to connect, and the
    engine dies of SIGBUS. So modes are fixed by path, never through a descriptor."""
    import os

    from vastui import config as cfg

    loose = tmp_path / "x.db-shm"
    loose.write_bytes(b"\0" * 64)
    loose.chmod(0o644)
    opened: list[str] = []
    real_open = os.open

    def spy(path, *args, **kwargs):
        opened.append(str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", spy)
    cfg.tighten_private(loose)
    assert (loose.stat().st_mode & 0o777) == 0o600
    assert str(loose) not in opened


async def test_every_directory_vastui_makes_under_its_state_is_private_and_quiet(
    umask: int, _isolated_env: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """On a fresh HOME nothing vastui makes is open to others, so nothing is warned about: the
    demo's run lock (taken before the database is opened), the finished runs' directory, the
    simulated workers' sandboxes."""
    from vastsim.hosting import sandbox_parent
    from vastui.store.archive import archive_finished_run, run_lock, runs_dir

    state_home = Path(os.environ["XDG_STATE_HOME"])
    assert not state_home.exists()
    db = default_db_path(demo=True)
    with caplog.at_level(logging.WARNING, logger="vastui.files"):
        with run_lock(db):
            async with await Store.open(db) as store:
                await store.instances.upsert(InstanceRecord(vast_id=5), now=T0)
        with run_lock(db):
            assert await archive_finished_run(db) is not None
        sim = sandbox_parent()
    assert [r.getMessage() for r in caplog.records if r.name == "vastui.files"] == []
    for directory in (state_home.parent, state_home, state_dir(), runs_dir(db), sim):
        assert mode(directory) == 0o700, directory
