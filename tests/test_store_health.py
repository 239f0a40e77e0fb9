"""The store's health is the engine's health (issue 10, defects 1, 8 and 10).

A database that cannot be written, is corrupt, or whose file was deleted or replaced under the
open connection is StoreFatal with one line naming the file; busy/locked stays a plain
StoreError. A destroy and the ban decided with it are one intent, recorded in one transaction.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from vastui.domain.machines import BanSpec
from vastui.domain.worker import InstanceRecord
from vastui.store import Store, StoreBusy, StoreError, StoreFatal
from vastui.store.health import decode_row, fatal_error
from vastui.store.instances import instance_from_row

T0 = 1_790_000_000.0
LEASE = {"pid": 4242, "hostname": "elsewhere", "mode": "headless", "ttl": 30.0}


@pytest.fixture
async def store(tmp_path: Path):
    s = await Store.open(tmp_path / "vastui.db")
    yield s
    await s.close()


def _sqlite_error(code: int, name: str, text: str) -> sqlite3.OperationalError:
    exc = sqlite3.OperationalError(text)
    exc.sqlite_errorcode = code  # type: ignore[attr-defined]
    exc.sqlite_errorname = name  # type: ignore[attr-defined]
    return exc


def _one_line(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text
    return text


# -- which failures are fatal -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "name", "text", "expected"),
    [
        (13, "SQLITE_FULL", "database or disk is full",
         "cannot be written: database or disk is full (SQLITE_FULL)"),
        (8, "SQLITE_READONLY", "attempt to write a readonly database",
         "cannot be written: attempt to write a readonly database (SQLITE_READONLY)"),
        (10, "SQLITE_IOERR", "disk I/O error", "cannot be written: disk I/O error (SQLITE_IOERR)"),
        (778, "SQLITE_IOERR_WRITE", "disk I/O error",
         "cannot be written: disk I/O error (SQLITE_IOERR_WRITE)"),
        (11, "SQLITE_CORRUPT", "database disk image is malformed",
         "is corrupt: database disk image is malformed (SQLITE_CORRUPT)"),
        (26, "SQLITE_NOTADB", "file is not a database",
         "is corrupt: file is not a database (SQLITE_NOTADB)"),
        (5, "SQLITE_BUSY", "database is locked", None),
        (6, "SQLITE_LOCKED", "database table is locked", None),
        (19, "SQLITE_CONSTRAINT", "UNIQUE constraint failed", None),
    ],
)  # fmt: skip
def test_fatal_codes(code: int, name: str, text: str, expected: str | None) -> None:
    path = Path("/x/vastui.db")
    fatal = fatal_error(path, _sqlite_error(code, name, text))
    if expected is None:
        assert fatal is None
    else:
        assert isinstance(fatal, StoreFatal)
        assert str(fatal) == f"database /x/vastui.db {expected}"


def test_an_error_without_a_code_is_not_fatal() -> None:
    assert fatal_error(Path("/x.db"), sqlite3.OperationalError("whatever")) is None
    assert fatal_error(Path("/x.db"), ValueError("no active connection")) is None


# -- cannot write -----------------------------------------------------------------------------


async def test_a_read_only_database_is_fatal_and_stays_so(store: Store) -> None:
    """Works as root too: query_only makes every write fail with SQLITE_READONLY."""
    await store.instances.upsert(InstanceRecord(vast_id=5, state="loading"), now=T0)
    await store.db.require().execute("PRAGMA query_only=1")
    with pytest.raises(StoreFatal) as exc:
        await store.events.add("rent", "rented offer 1", instance_id=5, now=T0)
    assert _one_line(exc.value) == (
        f"database {store.path} cannot be written: "
        "attempt to write a readonly database (SQLITE_READONLY)"
    )
    with pytest.raises(StoreFatal) as again:
        await store.check_health()
    assert str(again.value) == str(exc.value)
    # Once unfit, writes are refused outright: nothing half-recorded after the failure.
    await store.db.require().execute("PRAGMA query_only=0")
    with pytest.raises(StoreFatal):
        await store.mark_killed(5, "manual", "x", event="destroy", now=T0)
    assert (await store.instances.get(5)).state == "loading"  # type: ignore[union-attr]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through file modes (query_only above)")
async def test_a_read_only_file_and_directory_are_fatal(tmp_path: Path) -> None:
    path = tmp_path / "db" / "vastui.db"
    async with await Store.open(path) as s:
        await s.events.add("rent", "before", now=T0)
    path.chmod(0o444)
    path.parent.chmod(0o555)
    try:
        with pytest.raises(StoreFatal, match=r"cannot be (written|read): .*\(SQLITE_"):
            s = await Store.open(path)
            try:
                await s.events.add("rent", "after", now=T0)
            finally:
                await s.close()
    finally:
        path.parent.chmod(0o700)
        path.chmod(0o600)


async def test_disk_full_is_fatal(store: Store) -> None:
    conn = store.db.require()
    async with conn.execute("PRAGMA page_count") as cur:
        row = await cur.fetchone()
    assert row is not None
    await conn.execute(f"PRAGMA max_page_count={row[0]}")
    with pytest.raises(StoreFatal) as exc:
        for i in range(1, 200):
            await store.events.add("rent", "x" * 2000, instance_id=i, now=T0)
    assert _one_line(exc.value) == (
        f"database {store.path} cannot be written: database or disk is full (SQLITE_FULL)"
    )
    with pytest.raises(StoreFatal):
        await store.check_health()


async def test_an_io_error_in_a_write_is_fatal(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    conn = store.db.require()
    real = type(conn).execute

    def failing(self, sql: str, *args, **kwargs):  # type: ignore[no-untyped-def]
        if sql.startswith("INSERT INTO events"):
            raise _sqlite_error(778, "SQLITE_IOERR_WRITE", "disk I/O error")
        return real(self, sql, *args, **kwargs)

    monkeypatch.setattr(type(conn), "execute", failing)
    with pytest.raises(StoreFatal) as exc:
        await store.events.add("rent", "x", now=T0)
    assert str(exc.value) == (
        f"database {store.path} cannot be written: disk I/O error (SQLITE_IOERR_WRITE)"
    )


async def test_busy_is_not_fatal(store: Store) -> None:
    await store.db.require().execute("PRAGMA busy_timeout=0")
    other = sqlite3.connect(store.path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        with pytest.raises(StoreError) as exc:
            await store.events.add("rent", "x", now=T0)
        assert not isinstance(exc.value, StoreFatal)
        assert isinstance(exc.value, StoreBusy)  # nothing written: its caller keeps it
        assert "database is locked" in str(exc.value)
        other.execute("ROLLBACK")
    finally:
        other.close()
    await store.check_health()
    await store.events.add("rent", "x", now=T0)  # a transient failure leaves the store usable


async def test_renew_lease_says_the_real_reason(store: Store) -> None:
    """The heartbeat must not call an unwritable database 'another engine took over'."""
    await store.lease.acquire("a", now=T0, **LEASE)
    assert await store.lease.renew("a", ttl=30.0, now=T0 + 1) is True
    assert await store.lease.renew("b", ttl=30.0, now=T0 + 1) is False  # really lost
    await store.db.require().execute("PRAGMA query_only=1")
    with pytest.raises(StoreFatal, match=r"cannot be written: .*SQLITE_READONLY"):
        await store.lease.renew("a", ttl=30.0, now=T0 + 2)


# -- the file deleted or replaced under the engine --------------------------------------------


async def test_a_deleted_database_is_fatal(store: Store) -> None:
    await store.check_health()
    await store.events.add("rent", "x", now=T0)
    for suffix in ("", "-wal", "-shm"):
        Path(f"{store.path}{suffix}").unlink(missing_ok=True)
    message = f"database {store.path} was deleted or replaced under the running engine"
    with pytest.raises(StoreFatal) as exc:
        await store.check_health()
    assert _one_line(exc.value) == message
    with pytest.raises(StoreFatal, match="deleted or replaced"):
        await store.events.add("rent", "y", now=T0)  # SQLite would write to the unlinked file


async def test_a_replaced_database_is_fatal_and_the_new_one_untouched(
    store: Store, tmp_path: Path
) -> None:
    await store.lease.acquire("first", now=T0, **LEASE)
    other = tmp_path / "other.db"
    async with await Store.open(other) as second:
        await second.events.add("rent", "the other engine's", now=T0)
    os.replace(other, store.path)  # a second engine started afresh on the same path
    theirs = store.path.read_bytes()
    with pytest.raises(StoreFatal, match="was deleted or replaced under the running engine"):
        await store.check_health()
    with pytest.raises(StoreFatal):
        await store.lease.renew("first", ttl=30.0, now=T0 + 1)
    with pytest.raises(StoreFatal):
        await store.events.add("rent", "mine", now=T0 + 1)
    assert store.path.read_bytes() == theirs
    copy = tmp_path / "copy" / "theirs.db"  # read it apart from the old engine's -wal/-shm
    copy.parent.mkdir()
    copy.write_bytes(theirs)
    raw = sqlite3.connect(copy)
    try:
        assert raw.execute("SELECT reason FROM events").fetchall() == [("the other engine's",)]
        assert raw.execute("SELECT COUNT(*) FROM lease").fetchone() == (0,)
    finally:
        raw.close()


# -- corruption -------------------------------------------------------------------------------


async def test_corrupt_bytes_fail_quick_check_at_open(tmp_path: Path) -> None:
    path = tmp_path / "vastui.db"
    async with await Store.open(path) as s:
        for i in range(1, 300):
            await s.events.add("rent", "r" * 500, instance_id=i, now=T0)
            await s.instances.upsert(InstanceRecord(vast_id=i, label=f"l{i}"), now=T0)
    size = path.stat().st_size
    assert size > 64 * 1024
    with path.open("r+b") as fh:
        fh.seek(size // 2 // 4096 * 4096)
        fh.write(b"\xa5" * 8192)
    with pytest.raises(StoreFatal) as exc:
        await Store.open(path)
    assert _one_line(exc.value).startswith(f"database {path} is corrupt: quick_check failed: ")


async def test_a_garbage_row_fails_quick_check_at_open(tmp_path: Path) -> None:
    path = tmp_path / "vastui.db"
    async with await Store.open(path):
        pass
    raw = sqlite3.connect(path, isolation_level=None)
    try:
        raw.execute("PRAGMA ignore_check_constraints=1")
        raw.execute("INSERT INTO instances (vast_id, state, created_at) VALUES (9, 'bogus', 1)")
    finally:
        raw.close()
    with pytest.raises(StoreFatal) as exc:
        await Store.open(path)
    assert _one_line(exc.value) == (
        f"database {path} is corrupt: quick_check failed: CHECK constraint failed in instances"
    )


@pytest.mark.parametrize(
    ("column", "value", "why"),
    [
        ("created_at", "'garbage'", "created_at holds 'garbage' (str), expected a number"),
        ("machine_id", "'m'", "machine_id holds 'm' (str), expected an integer"),
        ("error_lines", "'{not json'", "Expecting property name enclosed in double quotes"),
        ("error_lines", "'7'", "expected a JSON list of lines, got int"),
    ],
)
async def test_an_undecodable_instance_row_is_fatal(
    tmp_path: Path, column: str, value: str, why: str
) -> None:
    path = tmp_path / "vastui.db"
    s = await Store.open(path)
    try:
        await s.instances.upsert(InstanceRecord(vast_id=4242, machine_id=7), now=T0)
        raw = sqlite3.connect(path, isolation_level=None)
        try:
            raw.execute(f"UPDATE instances SET {column} = {value} WHERE vast_id = 4242")
        finally:
            raw.close()
        head = f"database {path}: table instances row 4242 cannot be decoded: "
        with pytest.raises(StoreFatal) as exc:  # at runtime: once, not a warning every step
            await s.instances.all()
        assert _one_line(exc.value).startswith(head) and why in str(exc.value)
        with pytest.raises(StoreFatal):
            await s.check_health()
    finally:
        await s.close()
    with pytest.raises(StoreFatal) as at_open:  # and at open
        await Store.open(path)
    assert str(at_open.value).startswith(head) and why in str(at_open.value)


async def test_a_row_decodes_alike_whole_or_in_part(store: Store) -> None:
    """A whole row (SELECT *) decodes by position; a selection of columns in any other order,
    by name: the same record, the columns not selected at their defaults."""
    rec = InstanceRecord(
        vast_id=9, machine_id=7, state="proving", error_lines=("a", "b"), is_bid=True,
        bid_price=0.3, interruptions=2, created_at=T0, stage_started_at=T0,
    )  # fmt: skip
    assert await store.instances.upsert(rec, now=T0) == rec
    conn = store.db.require()
    async with conn.execute(
        "SELECT is_bid, error_lines, vast_id, machine_id, state FROM instances"
    ) as cur:
        row = await cur.fetchone()
        part = decode_row(
            store.path, "instances", "vast_id", InstanceRecord, row, instance_from_row
        )
    assert part == InstanceRecord(
        vast_id=9, machine_id=7, state="proving", error_lines=("a", "b"), is_bid=True
    )
    async with conn.execute("SELECT vast_id, machine_id FROM instances") as cur:
        row = await cur.fetchone()
    assert instance_from_row(row) == InstanceRecord(vast_id=9, machine_id=7)


# -- destroy and ban: one intent --------------------------------------------------------------

BAN = BanSpec(
    machine_id=77,
    reason="gpu error: Xid 79",
    source="automatic",
    host_id=12,
    gpu_name="RTX 4090",
    expires_at=T0 + 86400,
    evidence=("NVRM: Xid 79", "GPU has fallen off the bus"),
)


async def _live(store: Store) -> None:
    await store.instances.upsert(
        InstanceRecord(vast_id=5, machine_id=77, host_id=12, gpu_name="RTX 4090", state="setup"),
        now=T0,
    )


async def test_destroy_and_ban_are_recorded_together(store: Store) -> None:
    await _live(store)
    intent = await store.create_destroy_intent(
        5, "setup failed: gpu error", machine_id=77, detail={"kind": "stage_failed"}, ban=BAN,
        now=T0 + 1,
    )  # fmt: skip
    assert intent.ban == BAN and intent.detail["kind"] == "stage_failed"
    rec, bad = await store.complete_destroy(
        intent.id, "stage_failed", "setup failed: gpu error", error_lines=["Xid 79"],
        detail={"already_gone": False}, now=T0 + 2,
    )  # fmt: skip
    assert rec is not None and rec.killed and rec.kill_kind == "stage_failed"
    assert bad is not None and bad.machine_id == 77 and bad.source == "automatic"
    assert bad.expires_at == T0 + 86400 and bad.evidence == BAN.evidence
    [done] = await store.intents.all(kind="destroy")
    assert done.status == "done"
    events = [(e.kind, e.instance_id, e.machine_id) for e in await store.events.all()]
    assert events == [("destroy", 5, 77), ("ban", 5, 77)]
    # Completing it again (a retry after an answer was lost) records nothing twice.
    again = await store.complete_destroy(intent.id, "stage_failed", "x", now=T0 + 3)
    assert again[1] is None and again[0] is not None and again[0].kill_kind == "stage_failed"
    assert len(await store.events.all()) == 2
    assert (await store.badlist.get(77)).bans == 1  # type: ignore[union-attr]


async def test_a_failed_ban_leaves_the_destroy_pending(store: Store) -> None:
    """One transaction: if the ban cannot be written, the kill is not recorded either and the
    intent stays pending, to be carried out again."""
    await _live(store)
    intent = await store.create_destroy_intent(5, "gpu error", machine_id=77, ban=BAN, now=T0)
    raw = sqlite3.connect(store.path)
    try:
        raw.execute(
            "CREATE TRIGGER fail_ban BEFORE INSERT ON events WHEN NEW.kind = 'ban'"
            " BEGIN SELECT RAISE(ABORT, 'injected'); END"
        )
        raw.commit()
    finally:
        raw.close()
    with pytest.raises(StoreError, match="injected"):
        await store.complete_destroy(intent.id, "stage_failed", "gpu error", now=T0 + 1)
    assert not (await store.instances.get(5)).killed  # type: ignore[union-attr]
    assert [i.id for i in await store.intents.all(status="pending")] == [intent.id]
    assert await store.events.all() == [] and await store.badlist.get(77) is None


async def test_a_pending_destroy_found_at_restart_carries_its_ban(tmp_path: Path) -> None:
    path = tmp_path / "vastui.db"
    async with await Store.open(path) as s:
        await _live(s)
        await s.create_destroy_intent(5, "gpu error", machine_id=77, ban=BAN, now=T0)
        # the engine dies here: the DELETE may or may not have been sent
    async with await Store.open(path) as s:
        [pending] = await s.intents.all(status="pending", kind="destroy")
        assert pending.instance_id == 5 and pending.ban == BAN
        _, bad = await s.complete_destroy(pending.id, "stage_failed", "gpu error", now=T0 + 60)
        assert bad is not None and bad.reason == BAN.reason
        assert await s.badlist.machine_ids(now=T0 + 60) == {77}


async def test_an_already_killed_instance_still_gets_its_ban(store: Store) -> None:
    await _live(store)
    intent = await store.create_destroy_intent(5, "gpu error", machine_id=77, ban=BAN, now=T0)
    await store.mark_killed(5, "vanished", "instance disappeared from vast", event="kill", now=T0)
    rec, bad = await store.complete_destroy(intent.id, "stage_failed", "gpu error", now=T0 + 1)
    assert rec is not None and rec.kill_kind == "vanished"  # the first cause wins
    assert bad is not None
    assert [e.kind for e in await store.events.all()] == ["kill", "ban"]


async def test_a_destroy_without_a_ban_and_bad_input(store: Store) -> None:
    await _live(store)
    with pytest.raises(StoreError, match="machine_id must be a positive integer"):
        await store.create_destroy_intent(5, "x", ban=BanSpec(0, "r"), now=T0)
    with pytest.raises(StoreError, match="source"):
        await store.create_destroy_intent(5, "x", ban=BanSpec(7, "r", source="cron"), now=T0)
    assert await store.intents.all() == []
    intent = await store.create_destroy_intent(5, "manual destroy", now=T0)
    assert intent.ban is None
    rec, bad = await store.complete_destroy(intent.id, "manual", "manual destroy", now=T0 + 1)
    assert rec is not None and rec.killed and bad is None
    with pytest.raises(StoreError, match="no destroy intent 99"):
        await store.complete_destroy(99, "manual", "x", now=T0)
