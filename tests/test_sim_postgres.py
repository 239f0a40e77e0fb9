"""The simulated curio cluster's PostgreSQL (vastsim/postgres.py) and the cluster database
on it (vastsim/harmonydb.py): a server that starts and leaves nothing behind, goes down (its
port refusing) and comes back with its data, runs as ``nobody`` under root (from a copy of the
binaries when nobody cannot reach them), dies with its owner and is cleaned up after; one line
when there is no PostgreSQL at all. Waits are conditions with an upper bound."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.helpers import WAIT, wait_for
from vastsim import postgres
from vastsim.harmonydb import ClusterDatabase
from vastsim.postgres import PostgresServer, PostgresUnavailable

ROOT = os.geteuid() == 0


def refused(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return False
    except ConnectionRefusedError:
        return True


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie (our own child, not yet reaped) is gone for this purpose
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            return fh.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


@pytest.fixture
def fresh_binaries() -> Iterator[None]:
    """A test that changes where the binaries come from finds them again, before and after."""
    saved = postgres._binaries
    postgres._binaries = None
    try:
        yield
    finally:
        postgres._binaries = saved


def test_a_server_starts_goes_down_comes_back_and_leaves_nothing() -> None:
    server = PostgresServer(password="pg-test-secret")
    server.start()
    try:
        top = server.top
        assert top is not None and server.proc is not None
        pid = server.proc.pid
        with psycopg.connect(server.conninfo(), autocommit=True) as conn:
            conn.execute("CREATE TABLE t (x int)")
            conn.execute("INSERT INTO t VALUES (42)")
        if ROOT:  # PostgreSQL refuses root: it runs as nobody
            assert os.stat(f"/proc/{pid}").st_uid == postgres.pwd.getpwnam("nobody").pw_uid
        # a wrong password is refused (SCRAM), there is no Unix socket
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            psycopg.connect(server.conninfo().replace("pg-test-secret", "wrong")).close()
        assert not list(top.rglob(".s.PGSQL.*"))
        server.go_down()
        assert server.down and refused(server.host, server.port)
        assert not alive(pid)
        server.come_back()
        with psycopg.connect(server.conninfo(), autocommit=True) as conn:
            assert conn.execute("SELECT x FROM t").fetchall() == [(42,)]
        pid = server.proc.pid
    finally:
        server.stop()
    assert not top.exists(), "its files removed"
    assert not alive(pid) and refused(server.host, server.port)


async def test_the_cluster_database_goes_down_and_comes_back_with_its_tables() -> None:
    """The fleet fault controller_down (vastsim/fleet.py): YSQL and YCQL refuse
    connections, the tables are kept; stop() removes the server and its files."""
    db = ClusterDatabase(password="another-password")  # not the session's: its own server
    await db.start()
    try:
        assert db.server is not None and db.server.top is not None
        top = db.server.top
        db.set_layer("extra", "[Subsystems]\n")
        await db.go_down()
        assert db.down
        assert refused(db.host, db.port) and refused(db.host, db.cql_port)
        await db.come_back()
        assert not db.down
        assert db.layer("extra") == "[Subsystems]\n"
        assert db.view()["meta"]["enabled"] is True  # proofshare on, as the web UI sets it
        socket.create_connection((db.host, db.cql_port), timeout=5).close()
    finally:
        await db.stop()
    assert not top.exists()
    assert refused(db.host, db.port)


def test_a_killed_owner_leaves_no_server_running_and_nothing_after_the_next_start(
    tmp_path: Path,
) -> None:
    """The postmaster's parent-death signal (SIGQUIT) ends it with its owner; the next start
    removes what the owner left (reap_stale)."""
    owner = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent("""
            import sys, time
            from vastsim.postgres import PostgresServer
            s = PostgresServer()
            s.start()
            print(s.proc.pid, s.top, flush=True)
            time.sleep(3600)
        """)],
        stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[1],
    )  # fmt: skip
    try:
        assert owner.stdout is not None
        pid_text, top_text = owner.stdout.readline().split()
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait(WAIT)
    pid, top = int(pid_text), Path(top_text)
    wait_for(lambda: not alive(pid), what="the postmaster ended with its owner")
    assert top.exists(), "left behind until the next start"
    postgres.reap_stale()
    assert not top.exists()


def test_reap_stale_removes_only_what_dead_owners_left(tmp_path: Path) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    dead = tmp_path / f"vastui-pg-{gone.pid}-abc"
    (dead / "data").mkdir(parents=True)
    mine = tmp_path / f"vastui-pg-{os.getpid()}-def"
    mine.mkdir()
    other = tmp_path / "vastui-pg-bin-123-x"  # a copy of binaries: not a server's
    other.mkdir()
    assert postgres.reap_stale(tmp_path) == 1
    assert not dead.exists() and mine.exists() and other.exists()


def test_no_postgres_is_one_line(
    monkeypatch: pytest.MonkeyPatch, fresh_binaries: None, tmp_path: Path
) -> None:
    monkeypatch.setenv(postgres.BINDIR_ENV, str(tmp_path / "nowhere"))
    with pytest.raises(PostgresUnavailable) as err:
        postgres.find_binaries()
    text = str(err.value)
    assert "\n" not in text and postgres.BINDIR_ENV in text and "nowhere" in text


@pytest.mark.skipif(not ROOT, reason="only root runs the server as nobody")
def test_binaries_nobody_cannot_reach_are_copied_for_it(
    monkeypatch: pytest.MonkeyPatch, fresh_binaries: None, tmp_path: Path
) -> None:
    """A checkout under a 0700 home: nobody cannot run its wheel's binaries, so the server runs
    from a copy (bin, lib, share) nobody can read."""
    package = postgres.find_binaries().bindir.parent.parent  # the wheel's pgserver/
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    shutil.copytree(package, private / package.name, symlinks=True)
    vendored = package.parent / f"{package.name}.libs"  # initdb's libpq (auditwheel)
    if vendored.is_dir():
        shutil.copytree(vendored, private / vendored.name, symlinks=True)
    monkeypatch.setenv(postgres.BINDIR_ENV, str(private / package.name / "pginstall" / "bin"))
    monkeypatch.setattr(postgres, "_copies", {})
    postgres._binaries = None
    server = PostgresServer()
    try:
        server.start()
        assert "copied for nobody" in server.binaries.source
        copy = server.binaries.bindir.parents[2]
        assert copy.name.startswith("vastui-pg-bin-")
        assert copy.parent == Path(tempfile.gettempdir())
        with psycopg.connect(server.conninfo(), autocommit=True) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        server.stop()
        for copied in postgres._copies.values():
            shutil.rmtree(copied.bindir.parents[2], ignore_errors=True)
