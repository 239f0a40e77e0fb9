"""The database: one SQLite file (WAL, mode 0600) through one aiosqlite connection.

Design notes:

* One connection per :class:`Database`, in autocommit mode; every write runs in an explicit
  ``BEGIN IMMEDIATE`` transaction (:meth:`Database.transaction`). All access is serialized with
  an ``asyncio.Lock`` so a reader never sees another coroutine's half-finished transaction.
* A write waits ``BUSY_TIMEOUT_MS`` for another connection's write lock (``BEGIN IMMEDIATE``
  takes it first thing: no lock upgrade, which SQLite's busy handler would not wait for), then
  fails as :class:`StoreBusy`, nothing written: its caller keeps what it meant to write.
* SQLite failures are mapped to :class:`StoreError` (retry) or :class:`StoreFatal` (the
  database can no longer be trusted: see ``health.py``); a write inside a failed transaction is
  rolled back. The first fatal failure is remembered: the database stays unfit for this process,
  and :meth:`Database.check_health` says so cheaply (a stat), every engine step.
* The repositories (``instances.py``, ``badlist.py``, ...) each hold a :class:`Database` and
  reach the connection only through :meth:`read` and :meth:`transaction`.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any

import aiosqlite

from vastui.config import ensure_parent_dir, open_private, tighten_private

from .errors import StoreError, StoreFatal, StoreNotCurrent
from .health import FileIdentity, R, check_identity, decode_row, quick_check, store_error
from .migrations import SCHEMA_VERSION, apply_migrations, current_version

# How long a write waits for another connection's write lock (SQLite's busy handler, in
# aiosqlite's thread: the event loop runs on meanwhile) before it is StoreBusy, not done.
BUSY_TIMEOUT_MS = 5000

# Run once on a freshly opened connection, before the database is handed out: the rows the
# engine decides on must all decode (the store checks them; see Store.open).
Verify = Callable[[aiosqlite.Connection, Path], Awaitable[None]]


async def fetch_one(
    conn: aiosqlite.Connection, sql: str, params: Iterable[Any] = ()
) -> sqlite3.Row | None:
    async with conn.execute(sql, tuple(params)) as cur:
        return await cur.fetchone()


async def fetch_all(
    conn: aiosqlite.Connection, sql: str, params: Iterable[Any] = ()
) -> list[sqlite3.Row]:
    async with conn.execute(sql, tuple(params)) as cur:
        return list(await cur.fetchall())


async def execute(conn: aiosqlite.Connection, sql: str, params: Iterable[Any] = ()) -> int:
    """Run one statement; return the rows it changed."""
    async with conn.execute(sql, tuple(params)) as cur:
        return cur.rowcount


async def insert(conn: aiosqlite.Connection, sql: str, params: Iterable[Any] = ()) -> int:
    """Run one INSERT; return the new row's id."""
    async with conn.execute(sql, tuple(params)) as cur:
        row_id = cur.lastrowid
    if row_id is None:  # pragma: no cover - an INSERT always sets it
        raise StoreError("an insert returned no row id")
    return row_id


# -- opening ----------------------------------------------------------------------------------


def _prepare_file(path: Path) -> None:
    """The database's directory (0700) and file (0600) exist before SQLite touches them."""
    try:
        ensure_parent_dir(path)
        if path.exists():
            tighten_private(path)
        else:
            os.close(open_private(path, os.O_RDWR))
    except OSError as e:
        raise StoreError(f"cannot create database {path}: {e.strerror or e}") from e


async def _connect(path: Path) -> aiosqlite.Connection:
    """aiosqlite's connection, its worker thread gone when the connect fails.

    On a failed connect aiosqlite (0.22, core.py ``Connection._connect``) queues its thread's
    stop and raises at once; the thread then hands the stop's result to this event loop, which
    ``asyncio.run`` may have closed by then: an "Event loop is closed" traceback after the
    one-line error (``vastui --db DIR status``). The thread is waited for before raising."""
    conn = aiosqlite.connect(path, isolation_level=None)
    try:
        return await conn
    except BaseException:
        thread = getattr(conn, "_thread", None)  # aiosqlite's own; none in another version
        if thread is not None and thread.is_alive():
            await asyncio.to_thread(thread.join)
        raise


def _open_error(path: Path, e: sqlite3.Error) -> StoreError:
    error = store_error(path, e, "")
    if isinstance(error, StoreFatal):
        return error
    return StoreError(f"cannot open database {path}: {' '.join(str(e).split())}")


async def _prepare_connection(conn: aiosqlite.Connection, path: Path, migrate: bool) -> None:
    """Pragmas, integrity, schema: a database that fails ``quick_check`` is never migrated,
    nor one opened by a process that only reads (``migrate=False``)."""
    await conn.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_MS)}")
    await quick_check(conn, path)
    async with conn.execute("PRAGMA journal_mode=WAL") as cur:
        row = await cur.fetchone()
    if not row or str(row[0]).lower() != "wal":
        raise StoreError(f"database {path}: could not enable WAL mode (got {row!r})")
    await conn.execute("PRAGMA foreign_keys=ON")
    version = await current_version(conn)
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"database {path} has schema version {version}, "
            f"newer than this vastui ({SCHEMA_VERSION})"
        )
    if version == 0 and not migrate:  # made this moment by a process that is migrating it
        raise StoreNotCurrent(f"database {path} has no schema yet", absent=True)
    if version < SCHEMA_VERSION and not migrate:
        raise StoreNotCurrent(
            f"database {path} has schema version {version}, older than this vastui "
            f"({SCHEMA_VERSION}): the engine upgrades it when it starts (or `vastui migrate`)"
        )
    await apply_migrations(conn, version)


async def _rollback(conn: aiosqlite.Connection) -> None:
    """Roll back if a transaction is open; a failing rollback must not hide the cause."""
    try:
        if conn.in_transaction:
            await conn.rollback()
    except sqlite3.Error:
        pass


async def _rollback_queued(conn: aiosqlite.Connection) -> None:
    """A ROLLBACK behind whatever aiosqlite's thread has queued (the queue is first in, first
    out); none to roll back is fine."""
    with suppress(sqlite3.Error):
        await conn.execute("ROLLBACK")


class Database:
    """The connection, its lock, transactions and health. Create with
    ``await Database.open(path)`` (or :meth:`empty`)."""

    def __init__(
        self, path: Path, conn: aiosqlite.Connection, identity: FileIdentity | None = None
    ) -> None:
        self.path = path
        self._conn: aiosqlite.Connection | None = conn
        self._lock = asyncio.Lock()
        # The file this connection has open: a stat that differs means it is not ours any more.
        self._identity = identity if identity is not None else FileIdentity.of(path)
        self._fatal: StoreFatal | None = None  # the first fatal failure; it stays fatal

    # -- lifecycle --------------------------------------------------------------------------

    @classmethod
    async def open(
        cls, path: Path, *, migrate: bool = True, verify: Verify | None = None
    ) -> Database:
        """Open (creating if needed) the database at ``path`` and migrate it to the latest schema.

        A new file is created with mode 0600 (its directory 0700) before SQLite touches it.
        Raises :class:`StoreFatal` if the file is corrupt or not a database (``quick_check``,
        or ``verify`` finding a row that does not decode) and :class:`StoreError` if its schema
        is newer than this code. A process that only reads passes ``migrate=False``: a missing
        database or one older than this code is then :class:`StoreNotCurrent` (it creates and
        migrates nothing; processes that open a fresh file at once must not all migrate it).
        """
        path = Path(path)
        if not migrate and not path.exists():
            raise StoreNotCurrent(
                f"no database at {path} yet: the engine creates it when it starts", absent=True
            )
        _prepare_file(path)
        try:
            conn = await _connect(path)
        except sqlite3.Error as e:
            raise _open_error(path, e) from e
        conn.row_factory = sqlite3.Row
        try:
            identity = FileIdentity.of(path)
            await _prepare_connection(conn, path, migrate)
            if verify is not None:
                await verify(conn, path)
        except StoreError:
            await conn.close()
            raise
        except sqlite3.Error as e:
            await conn.close()
            raise _open_error(path, e) from e
        except OSError as e:
            await conn.close()
            raise StoreFatal(f"database {path} cannot be reached: {e.strerror or e}") from e
        except BaseException:
            await conn.close()
            raise
        for suffix in ("-wal", "-shm"):  # SQLite gives them the database's mode: check
            tighten_private(path.with_name(path.name + suffix))
        return cls(path, conn, identity)

    @classmethod
    async def empty(cls, path: Path) -> Database:
        """A database with nothing in it, in memory, for a reader that found no database at
        ``path``: nothing is known yet, and the reader creates no file (the engine will)."""
        conn = await aiosqlite.connect(":memory:", isolation_level=None)
        conn.row_factory = sqlite3.Row
        try:
            await apply_migrations(conn, 0)
        except BaseException:
            await conn.close()
            raise
        return cls(Path(path), conn, FileIdentity(0, 0))  # any write refuses: no such file

    async def check_health(self) -> None:
        """Raise :class:`StoreFatal` if this database can no longer be trusted: an earlier write
        hit a fatal error, or the file was deleted or replaced under the open connection."""
        if self._fatal is not None:
            raise self._fatal
        self._check_file()

    def _check_file(self) -> None:
        try:
            check_identity(self.path, self._identity)
        except StoreFatal as e:
            raise self.remember(e) from None

    def remember(self, error: StoreError) -> StoreError:
        """Keep the first fatal error: once the database is unfit it stays so for this process."""
        if isinstance(error, StoreFatal) and self._fatal is None:
            self._fatal = error
        return error

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            async with self._lock:
                await conn.close()

    @property
    def closed(self) -> bool:
        return self._conn is None

    async def schema_version(self) -> int:
        async with self.read() as conn:
            return await current_version(conn)

    # -- access -----------------------------------------------------------------------------

    def require(self) -> aiosqlite.Connection:
        """The open connection (StoreError once closed). For the store's own use and tests."""
        if self._conn is None:
            raise StoreError(f"database {self.path} is closed")
        return self._conn

    @asynccontextmanager
    async def read(self) -> AsyncIterator[aiosqlite.Connection]:
        """Hold the lock for reads; SQLite failures become StoreError/StoreFatal."""
        async with self._lock:
            conn = self.require()
            try:
                yield conn
            except sqlite3.Error as e:
                raise self.remember(store_error(self.path, e, "", writing=False)) from e
            except (OverflowError, UnicodeEncodeError) as e:
                raise StoreError(f"database {self.path}: {e}") from e

    async def write_one(self, sql: str, params: Iterable[Any] = ()) -> int:
        """One INSERT in SQLite's own implicit transaction; the new row's id. The write lock is
        taken and given back within the one call in aiosqlite's thread, never held across a
        turn of this process's event loop: a transaction (:meth:`transaction`) holds it while
        its coroutine waits for the loop, and a console's loop, busy drawing under load, would
        hold it from every other writer (the engine's too). StoreBusy: nothing was written."""
        async with self._lock:
            conn = self.require()
            await self.check_health()
            try:
                return await insert(conn, sql, params)
            except sqlite3.Error as e:
                raise self.remember(store_error(self.path, e, "cannot store")) from e
            except (OverflowError, UnicodeEncodeError) as e:
                raise StoreError(f"database {self.path}: cannot store: {e}") from e

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[aiosqlite.Connection]:
        """Hold the lock and a ``BEGIN IMMEDIATE`` transaction; commit on success, roll back on
        any failure. The yielded connection must not escape the ``async with`` block.

        Refuses (StoreFatal) once the database is unfit: after a fatal error, or when the file
        is no longer the one opened (a write would go to a deleted file, or fight another
        engine's new database).
        """
        async with self._lock:
            conn = self.require()
            await self.check_health()
            try:
                await conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as e:
                raise self.remember(store_error(self.path, e, "cannot begin transaction")) from e
            except BaseException:
                # Cancelled (a stop) while the BEGIN ran in aiosqlite's thread, or still waited in
                # its queue: it may begin after this, and a connection left in a transaction
                # refuses the next BEGIN (the lease's release at exit said "cannot start a
                # transaction within a transaction"). So a ROLLBACK goes in the queue behind it
                # whatever in_transaction says now.
                await _rollback_queued(conn)
                raise
            try:
                yield conn
            except BaseException as e:
                await _rollback(conn)
                if isinstance(e, sqlite3.Error):
                    raise self.remember(store_error(self.path, e, "cannot store")) from e
                if isinstance(e, StoreFatal):
                    self.remember(e)
                if isinstance(e, OverflowError | UnicodeEncodeError):
                    # Bad values: an id beyond 64 bits, text with a lone surrogate.
                    raise StoreError(f"database {self.path}: cannot store: {e}") from e
                raise
            else:
                try:
                    await conn.commit()
                except sqlite3.Error as e:
                    await _rollback(conn)
                    raise self.remember(store_error(self.path, e, "commit failed")) from e
                except BaseException:  # cancelled during the commit: done or rolled back
                    await _rollback(conn)
                    raise

    def decode(
        self,
        table: str,
        key: str,
        cls: type[R],
        row: sqlite3.Row,
        from_row: Callable[[sqlite3.Row], R],
    ) -> R:
        """Decode a row the engine decides on; one that does not decode is StoreFatal naming
        the table and the row (warning every step about it would change nothing)."""
        try:
            return decode_row(self.path, table, key, cls, row, from_row)
        except StoreFatal as e:
            raise self.remember(e) from None
