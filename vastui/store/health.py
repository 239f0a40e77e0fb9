"""The store's health: which SQLite failures end the engine, the file's identity, row decoding.

A store that cannot record is an engine that cannot decide safely (a rent it cannot store runs
untracked, a destroy it cannot record is done twice). So disk full, read-only, I/O errors and
corruption are :class:`StoreFatal`, as is the file vanishing or being replaced under the open
connection (SQLite keeps writing to the unlinked inode, and a second engine would start afresh
on the new file). Busy/locked stay a plain, retryable :class:`StoreError`.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import sqlite3
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import aiosqlite

from .errors import StoreBusy, StoreError, StoreFatal

# Primary result codes (https://www.sqlite.org/rescode.html); extended codes keep them in the
# low byte, e.g. SQLITE_IOERR_WRITE = 778 = 10 | (3 << 8).
SQLITE_PERM = 3
SQLITE_BUSY = 5  # another connection holds the lock (past the busy timeout)
SQLITE_LOCKED = 6  # a conflict within this connection's shared cache
SQLITE_READONLY = 8
SQLITE_IOERR = 10
SQLITE_CORRUPT = 11
SQLITE_FULL = 13
SQLITE_CANTOPEN = 14
SQLITE_NOTADB = 26

UNWRITABLE = frozenset({SQLITE_PERM, SQLITE_READONLY, SQLITE_IOERR, SQLITE_FULL, SQLITE_CANTOPEN})
BUSY = frozenset({SQLITE_BUSY, SQLITE_LOCKED})
CORRUPT = frozenset({SQLITE_CORRUPT, SQLITE_NOTADB})
_NAMES = {
    SQLITE_PERM: "SQLITE_PERM",
    SQLITE_READONLY: "SQLITE_READONLY",
    SQLITE_IOERR: "SQLITE_IOERR",
    SQLITE_CORRUPT: "SQLITE_CORRUPT",
    SQLITE_FULL: "SQLITE_FULL",
    SQLITE_CANTOPEN: "SQLITE_CANTOPEN",
    SQLITE_NOTADB: "SQLITE_NOTADB",
}


def primary_code(exc: BaseException) -> int | None:
    """The SQLite primary result code of an exception (Python 3.11+ sets it), else None."""
    code = getattr(exc, "sqlite_errorcode", None)
    return code & 0xFF if isinstance(code, int) else None


def _first_line(text: str) -> str:
    return " ".join(str(text).split())[:300]


def fatal_error(path: Path, exc: BaseException, *, writing: bool = True) -> StoreFatal | None:
    """The one-line :class:`StoreFatal` for a fatal SQLite failure, or None if it is not one."""
    code = primary_code(exc)
    if code not in UNWRITABLE | CORRUPT:
        return None
    assert code is not None
    name = getattr(exc, "sqlite_errorname", None) or _NAMES[code]
    what = _first_line(str(exc)) or name
    if code in CORRUPT:
        return StoreFatal(f"database {path} is corrupt: {what} ({name})")
    verb = "written" if writing else "read"
    return StoreFatal(f"database {path} cannot be {verb}: {what} ({name})")


def store_error(path: Path, exc: BaseException, doing: str, *, writing: bool = True) -> StoreError:
    """Map an exception raised by SQLite: fatal codes to StoreFatal, busy and locked to
    StoreBusy, the rest to StoreError."""
    fatal = fatal_error(path, exc, writing=writing)
    if fatal is not None:
        return fatal
    prefix = f"database {path}: {doing}: " if doing else f"database {path}: "
    if primary_code(exc) in BUSY:
        return StoreBusy(f"{prefix}{_first_line(str(exc))} (another writer holds it)")
    return StoreError(prefix + _first_line(str(exc)))


# -- the file's identity --------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class FileIdentity:
    dev: int
    ino: int

    @classmethod
    def of(cls, path: Path) -> FileIdentity:
        st = os.stat(path)
        return cls(st.st_dev, st.st_ino)


def check_identity(path: Path, expected: FileIdentity) -> None:
    """Raise StoreFatal when the file at ``path`` is gone or is no longer the one opened."""
    try:
        now = FileIdentity.of(path)
    except FileNotFoundError:
        raise StoreFatal(
            f"database {path} was deleted or replaced under the running engine"
        ) from None
    except OSError as exc:
        raise StoreFatal(f"database {path} cannot be reached: {exc.strerror or exc}") from None
    if now != expected:
        raise StoreFatal(f"database {path} was deleted or replaced under the running engine")


async def quick_check(conn: aiosqlite.Connection, path: Path) -> None:
    """``PRAGMA quick_check`` at open: anything but "ok" is StoreFatal (first problem named)."""
    try:
        async with conn.execute("PRAGMA quick_check") as cur:
            rows = await cur.fetchall()
    except sqlite3.Error as exc:
        if primary_code(exc) in CORRUPT:
            name = getattr(exc, "sqlite_errorname", None) or "SQLITE_CORRUPT"
            raise StoreFatal(
                f"database {path} is corrupt: quick_check failed: {_first_line(str(exc))} ({name})"
            ) from exc
        raise store_error(path, exc, "quick_check", writing=False) from exc
    problems = [str(r[0]) for r in rows if str(r[0]) != "ok"]
    if problems:
        more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
        raise StoreFatal(
            f"database {path} is corrupt: quick_check failed: {_first_line(problems[0])}{more}"
        )


# -- decoding rows --------------------------------------------------------------------------


R = TypeVar("R")


def plain_row(cls: type[R]) -> Callable[[sqlite3.Row], R]:
    """The decoder of a record whose fields are its columns, unchanged."""

    def from_row(row: sqlite3.Row) -> R:
        return cls(**dict(zip(row.keys(), row, strict=True)))

    return from_row


@dataclasses.dataclass(frozen=True, slots=True)
class _Column:
    index: int  # its position in the row
    name: str
    kinds: tuple[type, ...]  # the Python types SQLite may hand back for the field
    nullable: bool
    expected: str  # for the operator: "a number", "an integer", "text"


@functools.cache
def _fields(cls: type) -> tuple[tuple[str, tuple[type, ...], bool, str], ...]:
    """Per dataclass field, what a row must hold. JSON-carrying fields are TEXT."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        args = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
        kinds: tuple[type, ...]
        if float in args:
            kinds, expected = (int, float), "a number"
        elif int in args or bool in args:  # SQLite has no booleans
            kinds, expected = (int,), "an integer"
        else:  # str, or JSON text for tuples and dicts
            kinds, expected = (str,), "text"
        out.append((f.name, kinds, type(None) in args, expected))
    return tuple(out)


@functools.cache
def _columns(cls: type, names: tuple[str, ...]) -> tuple[_Column, ...]:
    """The checks for one query's columns, by position: sqlite3.Row finds a column by name
    with a linear scan, which the engine's every-step listings would pay per field."""
    where = {name: i for i, name in enumerate(names)}
    return tuple(
        _Column(where[name], name, kinds, nullable, expected)
        for name, kinds, nullable, expected in _fields(cls)
        if name in where  # a column the query did not select keeps the record's default
    )


def _describe(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def decode_row(
    path: Path,
    table: str,
    key: str,
    cls: type[R],
    row: sqlite3.Row,
    from_row: Callable[[sqlite3.Row], R],
) -> R:
    """``from_row(row)`` with every column's type checked first; a row that does not decode
    is StoreFatal naming the table and the row (a warning every step would change nothing)."""
    record: type = cls  # the class itself is the cache's key
    for column in _columns(record, tuple(row.keys())):
        value = row[column.index]
        if value is None:
            if column.nullable:
                continue
            _undecodable(path, table, key, row, f"{column.name} is NULL")
        # SQLite hands back exactly int, float, str, bytes or None (never a bool or subclass).
        if type(value) not in column.kinds:
            _undecodable(
                path, table, key, row,
                f"{column.name} holds {_describe(value)} ({type(value).__name__}),"
                f" expected {column.expected}",
            )  # fmt: skip
    try:
        return from_row(row)
    except (ValueError, TypeError, KeyError) as exc:
        why = _first_line(str(exc))
    _undecodable(path, table, key, row, why)  # outside the handler: no chained traceback


def _undecodable(path: Path, table: str, key: str, row: sqlite3.Row, why: str) -> NoReturn:
    ident = _describe(row[key]) if key in row.keys() else "?"  # noqa: SIM118 - Row has no `in`
    raise StoreFatal(f"database {path}: table {table} row {ident} cannot be decoded: {why}")
