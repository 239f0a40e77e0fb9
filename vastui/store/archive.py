"""A demo run's database is the run's: the next run starts from a clean one.

The demo's cloud lives in the process that runs it, so its instances end with the run. Carried
into the next run's database they read as vanished workers (kills), their rows pile up, and
their money is counted with the next run's (issue 31 item 2). The next demo engine therefore
moves a finished run's database aside, under ``<stem>-runs/``, before it opens its own: the
last :data:`KEEP` runs stay there as history (``vastui --demo --read-only --db FILE`` shows one).

The demo's machines are the same in every run (vastsim/demo.py DEMO_WORLD_SEED), so what was
learned of them, per machine, carries over (:func:`carry_learning`): the bad list, the strikes
and the measured rates. Instances, events and money stay with their run.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

from vastui.config import ensure_parent_dir, make_private_dir

from .errors import StoreError, StoreNotCurrent
from .lease import holder_is_dead
from .store import Store

log = logging.getLogger("vastui.store")

KEEP = 5  # earlier demo runs kept
LEARNED = ("bad_machines", "strikes", "machine_perf")  # per machine: true of the next run too
_SIDECARS = ("-wal", "-shm")  # SQLite's files beside the database, which move with it


def runs_dir(db: Path) -> Path:
    return db.with_name(f"{db.stem}-runs")


@contextlib.contextmanager
def run_lock(db: Path) -> Iterator[None]:
    """Held from the look at the old run's lease to the new engine's lease, so that two demos
    started together cannot both move a database (one would move the other's, open)."""
    ensure_parent_dir(db)  # 0700, as the database's own open would make it
    fd = os.open(db.with_name(f"{db.name}.run-lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing drops the lock


async def archive_finished_run(db: Path, *, now: float | None = None) -> Path | None:
    """Move the database at ``db`` into :func:`runs_dir` when it holds a finished run: nothing
    holds its lease and it recorded something. Returns where it went, or None (no file, an empty
    one, or an engine still running on it: its own start then fails on the lease, as before)."""
    try:
        store = await Store.open(db, migrate=False)
    except StoreNotCurrent as exc:
        if exc.absent:
            return None
        store = None  # an older schema's run: history all the same
    except StoreError:
        return None  # unreadable: the engine's own open says so, in one line
    if store is not None:
        async with store:
            live = await store.lease.holder()
            if live is not None and not holder_is_dead(live):
                return None
            if not await store.instances.all() and not await store.events.all(limit=1):
                return None  # nothing happened in it
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None else now))
    dest_dir = runs_dir(db)
    make_private_dir(dest_dir)
    dest = _free_name(dest_dir / f"{db.stem}-{stamp}{db.suffix}")
    # The sidecars first: a new database must never find the old run's write-ahead log.
    for suffix in _SIDECARS:
        side = db.with_name(db.name + suffix)
        with contextlib.suppress(FileNotFoundError):
            side.rename(dest.with_name(dest.name + suffix))
    db.rename(dest)
    _prune(dest_dir, db)
    return dest


def _free_name(path: Path) -> Path:
    n = 1
    out = path
    while out.exists():
        n += 1
        out = path.with_name(f"{path.stem}-{n}{path.suffix}")
    return out


def _prune(dest_dir: Path, db: Path) -> None:
    runs = sorted(dest_dir.glob(f"{db.stem}-*{db.suffix}"))  # the names sort by time
    for old in runs[:-KEEP]:
        for path in (old, *(old.with_name(old.name + s) for s in _SIDECARS)):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


def carry_learning(db: Path, archived: Path) -> dict[str, int]:
    """Copy what was learned per machine from the archived run into the new database at ``db``
    (just created, so nothing is overwritten): the rows copied per table. A table the old run's
    schema cannot give is skipped with a warning; the run goes on without it."""
    copied: dict[str, int] = {}
    con = sqlite3.connect(db.resolve().as_uri(), timeout=30, uri=True)
    try:
        con.execute("ATTACH DATABASE ? AS run", (archived.resolve().as_uri() + "?mode=ro",))
        for table in LEARNED:
            new = [r[1] for r in con.execute(f"PRAGMA main.table_info({table})")]
            old = {r[1] for r in con.execute(f"PRAGMA run.table_info({table})")}
            cols = ", ".join(c for c in new if c in old)
            if not cols:
                continue
            try:
                with con:
                    insert = f"INSERT OR IGNORE INTO main.{table} ({cols})"
                    cur = con.execute(f"{insert} SELECT {cols} FROM run.{table}")
                copied[table] = cur.rowcount
            except sqlite3.Error as exc:
                log.warning("the last demo run's %s was not carried over: %s", table, exc)
    finally:
        con.close()
    return copied
