"""How `vastui --demo cluster`, run in a second terminal beside a running demo, reaches the
demo's curio cluster database.

That database is a real PostgreSQL which the demo's process starts (vastsim/harmonydb.py) on a
free loopback port, with a password drawn for the run, and which dies with that process.
`vastui cluster` is a look at curio's database itself, apart from the engine's own reading (a
second opinion on what the engine believes, read with the same statements and shown as the
same report), so `vastui --demo cluster` does what it does against a real cluster: it connects.
The demo engine makes that possible by leaving, while it runs, the address, user, database and
password where only its user can read them (0600, in the 0700 state directory beside the demo's
database: the same protection as ``curio-db-password`` beside a config), and removes the file
when it stops. The password is never in vastui's database, a log, or on a screen.

A file a killed demo left behind names a process that no longer holds the demo database's
engine lease: it is never used, and the reader says in one line that no demo is running. (The
console shows the engine's last published reading instead: vastui/cluster_report.py
``published``; it needs no connection of its own.)
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
from dataclasses import dataclass
from pathlib import Path

from vastui.config.paths import ensure_parent_dir, write_private
from vastui.domain.engine_state import Lease
from vastui.sanitize import sanitize_line
from vastui.store.lease import holder_is_dead


class DemoNotRunning(Exception):
    """No running demo publishes its cluster's access beside this database; one line."""


@dataclass(frozen=True, slots=True)
class DemoClusterAccess:
    """What a reader needs to connect to a running demo's curio database. ``password`` is a
    secret: never printed, logged or stored anywhere else."""

    host: str
    port: int
    user: str
    dbname: str
    password: str
    pid: int  # the demo engine's process, the one holding the demo database's lease
    hostname: str

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def __repr__(self) -> str:  # never the password, whatever prints it
        return f"DemoClusterAccess({self.address}, user={self.user!r}, pid={self.pid})"


def access_path(db_path: Path) -> Path:
    """Beside the demo's database: ``demo.db`` → ``demo.db.curio-db``."""
    return Path(db_path).with_name(f"{Path(db_path).name}.curio-db")


def write_access(db_path: Path, addr: str, user: str, dbname: str, password: str) -> Path:
    """Publish this process's demo cluster for readers (0600; replaced atomically)."""
    host, _, port = addr.rpartition(":")
    path = access_path(db_path)
    ensure_parent_dir(path)
    data = {
        "host": host or "127.0.0.1", "port": int(port), "user": user, "dbname": dbname,
        "password": password, "pid": os.getpid(), "hostname": socket.gethostname(),
    }  # fmt: skip
    write_private(path, json.dumps(data))
    return path


def remove_access(path: Path) -> None:
    """Take the file back when this process's demo stops (only if it is still this one's)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if isinstance(data, dict) and data.get("pid") == os.getpid():
        with contextlib.suppress(OSError):
            path.unlink()


def find_access(db_path: Path, holder: Lease | None) -> DemoClusterAccess:
    """The running demo's access, given the demo database's lease holder; DemoNotRunning (one
    line, what to do) when no live demo engine holds it or it published nothing."""
    start = "start one (`vastui --demo`, or `vastui --demo --engine-only`) and run this beside it"
    if holder is None or holder_is_dead(holder):
        raise DemoNotRunning(f"no demo is running on {db_path}: {start}")
    if holder.hostname != socket.gethostname():
        who = sanitize_line(holder.hostname, 80)
        raise DemoNotRunning(f"the demo on {db_path} runs on {who}, not here: run this there")
    path = access_path(db_path)
    access = _read(path)
    if access is None or access.pid != holder.pid or access.hostname != holder.hostname:
        raise DemoNotRunning(
            f"the demo engine (pid {holder.pid}) publishes no access to its curio cluster at "
            f"{path} (it does not read the cluster: [curio] read_cluster = false, or it is "
            "still starting); the console's Cluster tab shows what it reads"
        )
    return access


def _read(path: Path) -> DemoClusterAccess | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return DemoClusterAccess(
            host=str(data["host"]), port=int(data["port"]), user=str(data["user"]),
            dbname=str(data["dbname"]), password=str(data["password"]), pid=int(data["pid"]),
            hostname=str(data["hostname"]),
        )  # fmt: skip
    except (OSError, ValueError, KeyError, TypeError):
        return None


__all__ = [
    "DemoClusterAccess", "DemoNotRunning", "access_path", "find_access", "remove_access",
    "write_access",
]  # fmt: skip
