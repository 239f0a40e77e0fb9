"""The store's typed errors: what a caller may retry, and what ends the engine."""

from __future__ import annotations


class StoreError(Exception):
    """A store operation failed; the message is one line, fit to show an operator."""


class StoreFatal(StoreError):
    """The database can no longer be trusted or written: disk full, read-only, I/O error,
    corrupt, or its file was deleted or replaced under the running process.

    The engine cannot go on deciding without a store it can record in: it must stop with this
    one line and a non-zero status, so that systemd restarts it (and the operator sees why).
    A busy or locked database is *not* fatal: that stays a plain :class:`StoreError`.
    """


class StoreBusy(StoreError):
    """Another connection held the database's write lock past the busy timeout (an engine's
    transaction stretched by a loaded event loop, a `vastui bad add`, a sqlite3 shell): this
    write was not done (its transaction rolled back whole), and the same write may be tried
    again. Never fatal: what asked for it keeps it and says so."""


class StoreNotCurrent(StoreError):
    """A process that only reads found no database, or one older than its code: it never
    migrates (that is the engine's, or a writing command's, under the migration lock).
    ``absent``: there is nothing in it yet (no file, or one not yet given its schema)."""

    def __init__(self, message: str, *, absent: bool = False) -> None:
        super().__init__(message)
        self.absent = absent
