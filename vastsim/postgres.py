"""A real PostgreSQL server for the simulated world: curio's cluster database.

curio's database is YugabyteDB, whose YSQL is the PostgreSQL wire protocol (port 5433); every
migration curio ships applies to a PostgreSQL 15 server as written (../shared/reference/
cuzk-verified.md, "What a controller can read and do"). So the simulated cluster runs on a real
server that the demo, ``vastui sim serve`` and the tests start and remove: a fresh data
directory (initdb), a free loopback port, no Unix socket, password authentication
(SCRAM-SHA-256, as a YugabyteDB with ``ysql_enable_auth``), durability off (a throwaway
cluster).

Where the server comes from, first found (``find_binaries``):

1. ``$VASTUI_PG_BINDIR`` (a directory holding ``initdb`` and ``postgres``);
2. the ``pgserver`` wheel (a dependency: PostgreSQL 16 built for manylinux and macOS, so a
   machine with only Python runs the demo); only its binaries are used, never its Python
   API (which adds a system user, chmods parent directories and registers exit hooks);
3. the system's server: ``pg_config --bindir``, ``/usr/lib/postgresql/*/bin``, ``$PATH``.

PostgreSQL refuses to run as root (``initdb``: "cannot be run as root"); a root process runs it
as ``nobody``, with a data directory that user owns, from a copy of the binaries when the
installed ones are out of its reach (a checkout under a 0700 home).

The postmaster gets a parent-death signal (SIGQUIT: PostgreSQL's immediate shutdown), so a
simulator that is killed does not leave it running; a later start removes what it left
(``vastui-pg-<owner pid>-*`` in the temporary directory, the owner gone).
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import importlib.util
import logging
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger("vastsim.postgres")

BINDIR_ENV = "VASTUI_PG_BINDIR"
DIR_PREFIX = "vastui-pg-"
UNPRIVILEGED = "nobody"  # who runs the server when we are root
READY_TIMEOUT_S = 60.0  # a loaded 2-core machine starts it in well under a second
STOP_TIMEOUT_S = 15.0
# A throwaway cluster: nothing is worth an fsync. TimeZone UTC: curio's TIMESTAMP columns hold
# UTC (YugabyteDB's default); listen_addresses is set per start.
SERVER_SETTINGS = {
    "unix_socket_directories": "",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "TimeZone": "UTC",
    "max_connections": "200",
    "shared_buffers": "32MB",
    "log_min_messages": "warning",
    "log_line_prefix": "%m [%p] ",
}


class PostgresUnavailable(RuntimeError):
    """No PostgreSQL server can be started here; the message is one line that says why."""


@dataclass(frozen=True)
class PgBinaries:
    bindir: Path
    version: str  # "16.2"
    source: str  # where they were found, for the log and the note

    def tool(self, name: str) -> str:
        return str(self.bindir / name)


def _version(bindir: Path) -> str | None:
    try:
        out = subprocess.run(
            [str(bindir / "postgres"), "--version"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    # "postgres (PostgreSQL) 16.2", "postgres (PostgreSQL) 15.18 (Debian 15.18-0+deb12u1)"
    found = re.search(r"\(PostgreSQL\)\s+(\S+)", out.stdout)
    return found.group(1) if out.returncode == 0 and found else None


def _candidates() -> list[tuple[Path, str]]:
    found: list[tuple[Path, str]] = []
    env = os.environ.get(BINDIR_ENV, "").strip()
    if env:
        return [(Path(env), f"${BINDIR_ENV}")]
    spec = importlib.util.find_spec("pgserver")  # located, never imported (see the docstring)
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            found.append((Path(location) / "pginstall" / "bin", "the pgserver wheel"))
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, timeout=10)
        if out.returncode == 0 and out.stdout.strip():
            found.append((Path(out.stdout.strip()), "the system (pg_config)"))
    for path in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        found.append((Path(path), "the system"))
    which = shutil.which("postgres")
    if which:
        found.append((Path(which).resolve().parent, "the system ($PATH)"))
    return found


_binaries: PgBinaries | None = None
_binaries_lock = threading.Lock()


def find_binaries() -> PgBinaries:
    """The first usable PostgreSQL (``initdb`` and ``postgres`` that run), once per process."""
    global _binaries
    with _binaries_lock:
        if _binaries is not None:
            return _binaries
        tried = []
        for bindir, source in _candidates():
            if not (bindir / "initdb").is_file() or not (bindir / "postgres").is_file():
                tried.append(str(bindir))
                continue
            version = _version(bindir)
            if version is None:
                tried.append(f"{bindir} (does not run)")
                continue
            _binaries = PgBinaries(bindir, version, source)
            return _binaries
        raise PostgresUnavailable(
            "no PostgreSQL server for the simulated curio cluster: install vastui's dependencies "
            f"(the pgserver wheel) or set {BINDIR_ENV}"
            + (f" (tried {', '.join(tried)})" if tried else "")
        )


# -- running as root ---------------------------------------------------------------------


def _run_as() -> pwd.struct_passwd | None:
    """Who runs the server: None for ourselves, ``nobody`` when we are root."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(UNPRIVILEGED)
    except KeyError:
        raise PostgresUnavailable(
            f"PostgreSQL refuses to run as root and there is no user {UNPRIVILEGED!r} to run "
            "it as: run vastui as another user"
        ) from None


def _reachable_by(user: pwd.struct_passwd, bins: PgBinaries) -> bool:
    try:
        out = subprocess.run(
            [bins.tool("postgres"), "--version"], capture_output=True, timeout=30,
            user=user.pw_uid, group=user.pw_gid, cwd="/",
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return False
    return out.returncode == 0


_copies: dict[Path, PgBinaries] = {}


def _binaries_for(user: pwd.struct_passwd | None, bins: PgBinaries) -> PgBinaries:
    """Binaries ``user`` can run: the installed ones, else a copy (bin, lib, share) in a
    directory of our own that it can read (once per process, removed at exit)."""
    if user is None or _reachable_by(user, bins):
        return bins
    with _binaries_lock:
        if bins.bindir in _copies:
            return _copies[bins.bindir]
        top = Path(tempfile.mkdtemp(prefix=f"{DIR_PREFIX}bin-{os.getpid()}-"))
        os.chmod(top, 0o755)
        # The same layout under the copy: a wheel's binaries find the shared libraries auditwheel
        # vendored beside the package through an RPATH ($ORIGIN/../../../pgserver.libs: initdb
        # needs its libpq), so <package>.libs goes where that path points.
        install = bins.bindir.parent  # .../pgserver/pginstall
        dest = top / install.parent.name / install.name
        for part in ("bin", "lib", "share"):
            src = install / part
            if src.is_dir():
                shutil.copytree(src, dest / part, symlinks=True)
        vendored = install.parent.parent / f"{install.parent.name}.libs"
        if vendored.is_dir():
            shutil.copytree(vendored, top / vendored.name, symlinks=True)
        _chmod_readable(top)
        copy = PgBinaries(dest / "bin", bins.version, f"{bins.source}, copied for {user.pw_name}")
        _copies[bins.bindir] = copy
        import atexit

        atexit.register(shutil.rmtree, top, True)
        return copy


def _chmod_readable(top: Path) -> None:
    for root, dirs, files in os.walk(top):
        for d in dirs:
            os.chmod(os.path.join(root, d), 0o755)
        for f in files:
            path = os.path.join(root, f)
            if not os.path.islink(path):
                os.chmod(path, os.stat(path).st_mode | 0o444)


# -- the server ----------------------------------------------------------------------------


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


_libc: ctypes.CDLL | None = None


def _parent_death_quit() -> None:
    """In the child, after the switch of user (which would clear it): SIGQUIT when the thread
    that started us ends (PR_SET_PDEATHSIG = 1)."""
    if _libc is not None:
        _libc.prctl(1, signal.SIGQUIT, 0, 0, 0)


if sys.platform.startswith("linux"):
    with contextlib.suppress(OSError):
        _libc = ctypes.CDLL(None, use_errno=True)


class PostgresServer:
    """One PostgreSQL server on a loopback port, its data in a temporary directory.

    ``start`` (initdb, the postmaster, the database) and ``stop`` (the server gone and its
    files removed) are synchronous; the asyncio callers run ``initdb`` in a thread, but the
    postmaster is always spawned from the caller's own thread: its parent-death signal fires
    when the thread that forked it ends, so it must be a thread that lives as long as the
    cloud (an event loop's), never a pool's."""

    def __init__(
        self,
        *,
        user: str = "yugabyte",
        password: str | None = None,
        database: str = "yugabyte",
        host: str = "127.0.0.1",
        binaries: PgBinaries | None = None,
    ) -> None:
        self.user = user
        self.password = password or secrets.token_urlsafe(18)
        self.database = database
        self.host = host
        self.port = 0
        self._bins = binaries
        self._as = _run_as()
        self.top: Path | None = None  # our temporary directory: data, log
        self.proc: subprocess.Popen[bytes] | None = None
        self._held: socket.socket | None = None  # the port, while down
        self.started_in_s: float | None = None  # initdb + start, for the log and the bench

    # -- addresses -----------------------------------------------------------------------

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def conninfo(self, database: str | None = None) -> str:
        """A libpq connection string (password included: never log it)."""
        return (
            f"host={self.host} port={self.port} user={self.user} "
            f"password={self.password} dbname={database or self.database}"
        )

    @property
    def binaries(self) -> PgBinaries:
        if self._bins is None:
            self._bins = find_binaries()
        return self._bins

    # -- lifecycle -------------------------------------------------------------------------

    def initdb(self) -> None:
        """A fresh data directory (the part that can run in a thread)."""
        t0 = time.monotonic()
        reap_stale()
        bins = _binaries_for(self._as, self.binaries)
        self._bins = bins
        top = Path(tempfile.mkdtemp(prefix=f"{DIR_PREFIX}{os.getpid()}-"))
        self.top = top
        os.chmod(top, 0o700)
        pwfile = top / "pw"
        pwfile.write_text(self.password + "\n", encoding="utf-8")
        os.chmod(pwfile, 0o600)
        if self._as is not None:
            os.chown(top, self._as.pw_uid, self._as.pw_gid)
            os.chown(pwfile, self._as.pw_uid, self._as.pw_gid)
        out = subprocess.run(
            [
                bins.tool("initdb"), "-D", str(top / "data"), "-U", self.user,
                "--auth=scram-sha-256", f"--pwfile={pwfile}", "-E", "UTF8", "--locale=C",
                "--no-sync",
            ],
            capture_output=True, text=True, timeout=300, cwd=str(top), **self._user_kwargs(),
        )  # fmt: skip
        pwfile.unlink(missing_ok=True)
        if out.returncode != 0:
            tail = (out.stderr or out.stdout).strip().splitlines()[-1:] or ["no output"]
            raise PostgresUnavailable(f"initdb failed ({bins.source}): {tail[0][:200]}")
        self.started_in_s = time.monotonic() - t0

    def spawn(self, port: int | None = None) -> None:
        """Start the postmaster on ``port`` (a free one by default); returns at once."""
        assert self.top is not None, "initdb first"
        self.port = port or self.port or _free_port(self.host)
        settings = {**SERVER_SETTINGS, "listen_addresses": self.host, "port": str(self.port)}
        args = [self.binaries.tool("postgres"), "-D", str(self.top / "data")]
        for key, value in settings.items():
            args += ["-c", f"{key}={value}"]
        logfile = open(self.top / "postgres.log", "ab")  # noqa: SIM115 (the child keeps it)
        try:
            self.proc = subprocess.Popen(
                args, stdin=subprocess.DEVNULL, stdout=logfile, stderr=subprocess.STDOUT,
                cwd=str(self.top), start_new_session=True, preexec_fn=_parent_death_quit,
                **self._user_kwargs(),
            )  # fmt: skip
        finally:
            logfile.close()

    def _user_kwargs(self) -> dict[str, Any]:
        if self._as is None:
            return {}
        return {"user": self._as.pw_uid, "group": self._as.pw_gid, "extra_groups": []}

    def ready(self) -> bool:
        """The postmaster says it accepts connections (postmaster.pid's status line), and the
        port answers. Raises when the server has exited."""
        if self.proc is None or self.top is None:
            return False
        if self.proc.poll() is not None:
            raise PostgresUnavailable(
                f"PostgreSQL exited with status {self.proc.returncode}: {self.log_tail()}"
            )
        try:
            lines = (self.top / "data" / "postmaster.pid").read_text().splitlines()
        except OSError:
            return False
        if len(lines) < 8 or lines[7].strip() != "ready":
            return False
        try:
            with socket.create_connection((self.host, self.port), timeout=1.0):
                return True
        except OSError:
            return False

    def log_tail(self, n: int = 3) -> str:
        if self.top is None:
            return ""
        try:
            text = (self.top / "postgres.log").read_text(errors="replace")
        except OSError:
            return "no log"
        return " | ".join(line.strip()[:200] for line in text.strip().splitlines()[-n:])

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while not self.ready():
            if time.monotonic() > deadline:
                raise PostgresUnavailable(
                    f"PostgreSQL did not accept connections within {timeout:.0f} s: "
                    f"{self.log_tail()}"
                )
            time.sleep(0.01)

    def create_database(self) -> None:
        """The cluster's database (initdb made only ``postgres``), with psql's protocol."""
        import psycopg

        with psycopg.connect(self.conninfo("postgres"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{self.database}"')

    def start(self) -> None:
        """initdb, the postmaster, the database: a server ready for clients."""
        t0 = time.monotonic()
        self.initdb()
        self.spawn()
        self.wait_ready()
        self.create_database()
        self.started_in_s = time.monotonic() - t0
        log.info(
            "PostgreSQL %s (%s) on %s, started in %.2f s",
            self.binaries.version, self.binaries.source, self.address, self.started_in_s,
        )  # fmt: skip

    def halt(self) -> None:
        """Stop the postmaster (fast shutdown: clients are disconnected), keep the data."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        for sig, wait in ((signal.SIGINT, STOP_TIMEOUT_S), (signal.SIGQUIT, 5.0)):
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(sig)
            try:
                proc.wait(wait)
                return
            except subprocess.TimeoutExpired:
                continue
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5.0)

    def go_down(self) -> None:
        """The database is down: its clients cut off, its port refusing (held, not listening,
        so that no other server takes it); the data kept for ``come_back``."""
        if self._held is not None:
            return
        self.halt()
        from vastsim.fleet import hold_port

        self._held = hold_port(self.host, self.port)

    def come_back(self, wait: bool = True) -> None:
        """Serve again on the same port, the same data (``wait``: until it accepts
        connections; an event loop polls ``ready()`` itself instead)."""
        held, self._held = self._held, None
        if held is None:
            return
        held.close()
        self.spawn(self.port)
        if wait:
            self.wait_ready()

    @property
    def down(self) -> bool:
        return self._held is not None

    def stop(self) -> None:
        """The server gone and its files removed."""
        self.halt()
        if self._held is not None:
            self._held.close()
            self._held = None
        if self.top is not None:
            shutil.rmtree(self.top, ignore_errors=True)
            self.top = None


# -- what a dead owner left ----------------------------------------------------------------


def _owner_gone(name: str) -> bool:
    parts = name[len(DIR_PREFIX) :].split("-")
    if not parts or not parts[0].isdigit():
        return False
    try:
        os.kill(int(parts[0]), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def reap_stale(parent: Path | None = None) -> int:
    """Stop the servers of simulators that died without cleaning up and remove their files.
    (A postmaster whose owner died got SIGQUIT already; this covers one that did not.)"""
    base = parent or Path(tempfile.gettempdir())
    removed = 0
    for top in base.glob(f"{DIR_PREFIX}[0-9]*-*"):
        if not top.is_dir() or not _owner_gone(top.name):
            continue
        with contextlib.suppress(OSError, ValueError):
            first = (top / "data" / "postmaster.pid").read_text().splitlines()[0]
            os.kill(int(first), signal.SIGQUIT)
        shutil.rmtree(top, ignore_errors=True)
        removed += 1
    return removed


__all__ = [
    "PgBinaries",
    "PostgresServer",
    "PostgresUnavailable",
    "find_binaries",
    "reap_stale",
]
