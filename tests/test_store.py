"""Tests for vastui.store: schema, pragmas, migrations, instances, bad list, perf, events."""

from __future__ import annotations

import asyncio
import sqlite3
import stat
from dataclasses import replace
from pathlib import Path

import pytest

from vastui.domain.engine_state import EngineStatus
from vastui.domain.journal import Event
from vastui.domain.machines import BadEntry, LegacyReviewEntry, PerfRecord
from vastui.domain.timefmt import iso_utc
from vastui.domain.worker import InstanceRecord
from vastui.store import SCHEMA_VERSION, Store, StoreError
from vastui.store.common import json_dict
from vastui.store.migrations import MIGRATIONS

T0 = 1_796_033_100.0  # 2026-11-30T10:05:00Z
HOUR = 3600.0


@pytest.fixture
async def store(tmp_path: Path):
    s = await Store.open(tmp_path / "state" / "vastui.db")
    try:
        yield s
    finally:
        await s.close()


def _event_count(path: Path, kind: str | None = None) -> int:
    with sqlite3.connect(path) as conn:
        if kind is None:
            return conn.execute("SELECT COUNT(*) FROM events").fetchone()[0]
        return conn.execute("SELECT COUNT(*) FROM events WHERE kind = ?", (kind,)).fetchone()[0]


# -- file, pragmas, migrations ----------------------------------------------------------------


def test_iso_utc() -> None:
    assert iso_utc(T0) == "2026-11-30T10:05:00Z"
    assert iso_utc(None) is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (None, {}),
        ("", {}),
        ('{"machine_id": 3}', {"machine_id": 3}),
        ("[1, 2]", {}),  # not an object
        ('"text"', {}),
        ('{"machine_id": 3', {}),  # damaged
    ],
)
def test_json_dict_reads_damage_as_empty(text: str | None, expected: dict) -> None:
    assert json_dict(text) == expected


async def test_open_creates_parent_dirs_and_file_mode_0600(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "vastui.db"
    async with await Store.open(path) as s:
        assert not s.closed
        assert path.exists()
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        await s.events.add("rent", "x", now=T0)
        # SQLite gives the WAL and shared-memory files the database file's permissions.
        for extra in ("-wal", "-shm"):
            side = path.with_name(path.name + extra)
            assert stat.S_IMODE(side.stat().st_mode) == 0o600
    assert s.closed


async def test_wal_user_version_and_pragmas(store: Store) -> None:
    assert await store.schema_version() == SCHEMA_VERSION == len(MIGRATIONS)
    conn = store.db.require()
    async with conn.execute("PRAGMA journal_mode") as cur:
        assert (await cur.fetchone())[0] == "wal"
    async with conn.execute("PRAGMA busy_timeout") as cur:
        assert (await cur.fetchone())[0] == 5000
    async with conn.execute("PRAGMA foreign_keys") as cur:
        assert (await cur.fetchone())[0] == 1
    # WAL is persistent: a fresh stdlib connection sees it too.
    with sqlite3.connect(store.path) as raw:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        tables = {r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"instances", "bad_machines", "legacy_review", "machine_perf", "events"} <= tables


async def test_reopen_keeps_data_and_does_not_remigrate(tmp_path: Path) -> None:
    path = tmp_path / "vastui.db"
    async with await Store.open(path) as s:
        await s.badlist.add(101, "flaky GPU", now=T0)
        await s.perf.record_rate(101, "RTX 4090", 1, 31.4, now=T0)
    async with await Store.open(path) as s:
        assert await s.schema_version() == SCHEMA_VERSION
        assert await s.badlist.machine_ids(now=T0) == {101}
        assert [p.best_rate for p in await s.perf.of_machine(101)] == [31.4]
        assert len(await s.events.all()) == 1


async def test_newer_schema_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "vastui.db"
    async with await Store.open(path):
        pass
    with sqlite3.connect(path) as raw:
        raw.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 5}")
    with pytest.raises(StoreError) as exc:
        await Store.open(path)
    assert str(exc.value) == (
        f"database {path} has schema version {SCHEMA_VERSION + 5}, "
        f"newer than this vastui ({SCHEMA_VERSION})"
    )


async def test_open_non_database_is_store_error(tmp_path: Path) -> None:
    path = tmp_path / "junk.db"
    path.write_bytes(b"this is not sqlite at all, just text\n" * 200)
    with pytest.raises(StoreError, match=r"junk\.db"):
        await Store.open(path)


async def test_closed_store_raises(tmp_path: Path) -> None:
    s = await Store.open(tmp_path / "x.db")
    await s.close()
    await s.close()  # idempotent
    with pytest.raises(StoreError, match="closed"):
        await s.badlist.all(now=T0)


# -- instances --------------------------------------------------------------------------------


def _inst(vast_id: int = 3245511, **kw) -> InstanceRecord:
    base = dict(
        label=f"C.{vast_id}",
        offer_id=1234567,
        machine_id=18234,
        host_id=777,
        gpu_name="RTX 4090",
        num_gpus=1,
        dph_total=0.232,
        cpu_ram_gb=257.6,
        geolocation="Poland, PL",
        image="ghcr.io/example/worker:1",
        min_rate=29.0,
        ssh_host="203.0.113.7",
        ssh_port=41022,
    )
    base.update(kw)
    return InstanceRecord(vast_id=vast_id, **base)


async def test_instance_upsert_get_list(store: Store) -> None:
    rec = await store.instances.upsert(_inst(), now=T0)
    assert rec.created_at == T0 and rec.stage_started_at == T0 and rec.state == "loading"
    assert rec.source == "vastui"
    assert await store.instances.get(3245511) == rec
    assert await store.instances.get(999) is None

    # Upsert again later: metadata updated, created_at kept.
    rec2 = await store.instances.upsert(
        _inst(dph_total=0.25, created_at=T0 + 50, image_digest="sha256:abc"), now=T0 + 100
    )
    assert rec2.created_at == T0
    assert rec2.dph_total == 0.25 and rec2.image_digest == "sha256:abc"

    await store.instances.upsert(_inst(3245600), now=T0 + 10)
    await store.mark_killed(3245600, "manual", "killed by operator", now=T0 + 20)
    assert [i.vast_id for i in await store.instances.all()] == [3245511, 3245600]
    assert [i.vast_id for i in await store.instances.all(include_killed=False)] == [3245511]


async def test_set_stage_sets_matching_columns(store: Store) -> None:
    await store.instances.upsert(_inst(), now=T0)
    rec = await store.instances.set_stage(3245511, "setup", now=T0 + 60)
    assert (rec.state, rec.stage, rec.setup_at, rec.stage_started_at) == (
        "setup",
        "setup",
        T0 + 60,
        T0 + 60,
    )
    rec = await store.instances.set_stage(3245511, "paramfetch", now=T0 + 120)
    assert rec.paramfetch_at == T0 + 120 and rec.setup_at == T0 + 60
    # Same stage again: no-op, the stage clock is not reset.
    rec = await store.instances.set_stage(3245511, "paramfetch", now=T0 + 500)
    assert rec.stage_started_at == T0 + 120
    rec = await store.instances.set_stage(3245511, "benchmark", now=T0 + 1000)
    rec = await store.instances.set_stage(3245511, "proving", now=T0 + 3000)
    assert (rec.benchmark_at, rec.proving_at, rec.stage_started_at) == (
        T0 + 1000,
        T0 + 3000,
        T0 + 3000,
    )


async def test_a_stage_and_the_fields_that_call_for_it_change_together(store: Store) -> None:
    """A resumed bid is no longer outbid and back in loading in one write: a reader (the
    console, a test, `vastui status`) never sees it resumed yet still proving."""
    await store.instances.upsert(_inst(), now=T0)
    await store.instances.set_stage(3245511, "proving", now=T0 + 100)
    await store.instances.update(3245511, outbid_since=T0 + 200, prod_completed=7)
    rec = await store.instances.set_stage(
        3245511, "loading", T0 + 900, outbid_since=None, stopped_s=700.0, prod_state=None
    )
    assert (rec.state, rec.outbid_since, rec.stopped_s) == ("loading", None, 700.0)
    assert rec.stage_started_at == T0 + 900 and rec.prod_completed == 7
    with pytest.raises(ValueError, match="not updatable piecemeal"):
        await store.instances.set_stage(3245511, "setup", T0 + 950, state="proving")
    assert (await store.instances.get(3245511)).state == "loading"  # nothing half-done


async def test_set_stage_errors(store: Store) -> None:
    with pytest.raises(StoreError, match="no instance 42"):
        await store.instances.set_stage(42, "setup", now=T0)
    await store.instances.upsert(_inst(42), now=T0)
    with pytest.raises(StoreError, match="unknown stage"):
        await store.instances.set_stage(42, "bogus", now=T0)
    with pytest.raises(StoreError, match="unknown stage"):
        await store.instances.set_stage(42, "killed", now=T0)
    await store.mark_killed(42, "manual", "bye", now=T0)
    with pytest.raises(StoreError, match="killed"):
        await store.instances.set_stage(42, "proving", now=T0)


async def test_mark_killed(store: Store) -> None:
    await store.instances.upsert(_inst(), now=T0)
    await store.instances.set_stage(3245511, "benchmark", now=T0 + 100)
    rec = await store.mark_killed(
        3245511,
        "bench_below_min",
        "bench_rate 21.0 below min_rate 29.0",
        bench_outcome="fail",
        error_lines=["RESULT: 21.0 proofs/hour (min 29.0) FAIL"],
        now=T0 + 200,
    )
    assert rec.state == "killed" and rec.killed and rec.killed_at == T0 + 200
    assert rec.failed_stage == "benchmark" and rec.stage == "benchmark"
    assert rec.kill_kind == "bench_below_min"
    assert rec.error_lines == ("RESULT: 21.0 proofs/hour (min 29.0) FAIL",)
    assert rec.bench_outcome == "fail"
    # Killing again keeps the first cause.
    again = await store.mark_killed(3245511, "vanished", "gone", now=T0 + 300)
    assert again == rec
    with pytest.raises(StoreError, match="no instance"):
        await store.mark_killed(1, "manual", "x", now=T0)
    with pytest.raises(StoreError, match="kill reason"):
        await store.mark_killed(3245511, "manual", "  ", now=T0)


async def test_instance_validation(store: Store) -> None:
    with pytest.raises(StoreError, match="vast_id"):
        await store.instances.upsert(InstanceRecord(vast_id=0), now=T0)
    with pytest.raises(StoreError, match="state"):
        await store.instances.upsert(InstanceRecord(vast_id=5, state="running"), now=T0)
    with pytest.raises(StoreError, match="machine_id"):
        await store.instances.upsert(InstanceRecord(vast_id=5, machine_id=-3), now=T0)


# -- bad machines -----------------------------------------------------------------------------


async def test_bad_add_strike_remove_with_events(store: Store) -> None:
    entry = await store.badlist.add(
        18234,
        "Not good enough (RTX 3090, Poland, PL)",
        host_id=777,
        gpu_name="RTX 3090",
        evidence=["bench 12.0/h"],
        now=T0,
    )
    assert entry == BadEntry(
        machine_id=18234,
        reason="Not good enough (RTX 3090, Poland, PL)",
        source="manual",
        created_at=T0,
        updated_at=T0,
        host_id=777,
        gpu_name="RTX 3090",
        expires_at=None,
        bans=1,
        evidence=("bench 12.0/h",),
    )
    assert _event_count(store.path, "ban") == 1

    # Banned again: reason/evidence/updated_at replaced, created_at kept, event written.
    entry = await store.badlist.add(
        18234, "failed again", source="automatic", evidence=["bench 10.0/h"], now=T0 + HOUR
    )
    assert entry.bans == 2
    assert entry.reason == "failed again"
    assert entry.evidence == ("bench 10.0/h",)
    assert entry.created_at == T0 and entry.updated_at == T0 + HOUR
    assert entry.source == "manual"  # an automatic strike never downgrades a manual ban
    assert entry.host_id == 777 and entry.gpu_name == "RTX 3090"
    assert _event_count(store.path, "ban") == 2

    assert await store.badlist.machine_ids(now=T0 + HOUR) == {18234}
    assert await store.badlist.remove(18234, now=T0 + 2 * HOUR) is True
    assert _event_count(store.path, "unban") == 1
    assert await store.badlist.machine_ids(now=T0 + 2 * HOUR) == set()
    assert await store.badlist.get(18234) is None

    # Removing an absent machine: False, and no event.
    assert await store.badlist.remove(18234, now=T0 + 3 * HOUR) is False
    assert _event_count(store.path) == 3

    events = await store.events.all()
    assert [e.kind for e in events] == ["ban", "ban", "unban"]
    assert all(e.machine_id == 18234 for e in events)
    assert events[1].detail is not None and events[1].detail["bans"] == 2
    assert events[2].reason == "manual unignore"


async def test_ban_event_is_in_the_same_transaction(store: Store) -> None:
    """If the event insert fails, the bad-list change is rolled back with it."""
    with sqlite3.connect(store.path) as raw:
        raw.execute(
            "CREATE TRIGGER fail_ban BEFORE INSERT ON events WHEN NEW.kind IN ('ban','unban')"
            " BEGIN SELECT RAISE(ABORT, 'injected'); END"
        )
    with pytest.raises(StoreError, match="injected"):
        await store.badlist.add(5, "x", now=T0)
    assert await store.badlist.all(include_expired=True, now=T0) == []
    assert _event_count(store.path) == 0

    with sqlite3.connect(store.path) as raw:
        raw.execute("DROP TRIGGER fail_ban")
    await store.badlist.add(5, "x", now=T0)
    with sqlite3.connect(store.path) as raw:
        raw.execute(
            "CREATE TRIGGER fail_unban BEFORE INSERT ON events WHEN NEW.kind = 'unban'"
            " BEGIN SELECT RAISE(ABORT, 'injected'); END"
        )
    with pytest.raises(StoreError, match="injected"):
        await store.badlist.remove(5, now=T0)
    assert await store.badlist.machine_ids(now=T0) == {5}
    assert _event_count(store.path) == 1


async def test_bad_source_upgrade_and_expiry_merge(store: Store) -> None:
    e = await store.badlist.add(7, "auto strike", source="automatic", expires_at=T0 + HOUR, now=T0)
    assert e.source == "automatic" and e.expires_at == T0 + HOUR
    e = await store.badlist.add(7, "operator says no", source="manual", now=T0 + 1)
    assert e.source == "manual" and e.expires_at is None and e.bans == 2
    e = await store.badlist.add(8, "a", source="automatic", expires_at=T0 + HOUR, now=T0)
    e = await store.badlist.add(8, "b", source="automatic", expires_at=T0 + 5 * HOUR, now=T0 + 2)
    assert e.expires_at == T0 + 5 * HOUR


async def test_expired_entries_excluded(store: Store) -> None:
    await store.badlist.add(1, "permanent", now=T0)
    await store.badlist.add(2, "temporary", source="automatic", expires_at=T0 + HOUR, now=T0)
    assert await store.badlist.machine_ids(now=T0 + HOUR - 1) == {1, 2}
    assert await store.badlist.machine_ids(now=T0 + HOUR) == {1}
    assert [b.machine_id for b in await store.badlist.all(now=T0 + 2 * HOUR)] == [1]
    both = await store.badlist.all(include_expired=True, now=T0 + 2 * HOUR)
    assert [b.machine_id for b in both] == [1, 2]
    assert both[1].active(T0 + 2 * HOUR) is False


async def test_bad_validation(store: Store) -> None:
    for bad_id in (0, -1, "18234", 1.5, True, None):
        with pytest.raises(StoreError, match="machine_id must be a positive integer"):
            await store.badlist.add(bad_id, "x", now=T0)  # type: ignore[arg-type]
    with pytest.raises(StoreError, match="reason"):
        await store.badlist.add(1, "   ", now=T0)
    with pytest.raises(StoreError, match="source"):
        await store.badlist.add(1, "x", source="legacy-review", now=T0)
    with pytest.raises(StoreError, match="machine_id"):
        await store.badlist.remove(0, now=T0)
    assert _event_count(store.path) == 0


async def test_error_messages_are_one_line(store: Store) -> None:
    with pytest.raises(StoreError) as exc:
        await store.badlist.add(-5, "x", now=T0)
    assert "\n" not in str(exc.value)


# -- perf -------------------------------------------------------------------------------------


async def test_record_benchmark_best_last_samples(store: Store) -> None:
    p = await store.perf.record_rate(
        18234, "RTX 4090", 1, 31.4, cpu_ram_gb=257.6, host_id=777, now=T0
    )
    assert (p.best_rate, p.last_rate, p.samples, p.measured_at) == (31.4, 31.4, 1, T0)
    p = await store.perf.record_rate(18234, "RTX 4090", 1, 28.0, now=T0 + HOUR)
    assert (p.best_rate, p.last_rate, p.samples) == (31.4, 28.0, 2)
    assert p.cpu_ram_gb == 257.6 and p.host_id == 777 and p.measured_at == T0 + HOUR
    p = await store.perf.record_rate(18234, "RTX 4090", 1, 33.0, now=T0 + 2 * HOUR)
    assert (p.best_rate, p.last_rate, p.samples) == (33.0, 33.0, 3)
    await store.perf.record_rate(18234, "RTX 4090", 2, 60.0, now=T0)
    await store.perf.record_rate(9, "RTX 5090", 1, 40.0, now=T0)
    assert [(r.gpu_name, r.num_gpus) for r in await store.perf.of_machine(18234)] == [
        ("RTX 4090", 1),
        ("RTX 4090", 2),
    ]
    assert [r.machine_id for r in await store.perf.all()] == [9, 18234, 18234]
    assert await store.perf.of_machine(12345) == []


async def test_a_partial_rate_is_the_last_marked_and_never_the_best(store: Store) -> None:
    p = await store.perf.record_rate(18234, "RTX 4090", 1, 31.4, now=T0)
    assert p.last_partial is False
    p = await store.perf.record_rate(18234, "RTX 4090", 1, 45.0, now=T0 + HOUR, partial=True)
    assert (p.best_rate, p.last_rate, p.last_partial, p.samples) == (31.4, 45.0, True, 2)
    p = await store.perf.record_rate(18234, "RTX 4090", 1, 30.0, now=T0 + 2 * HOUR)
    assert (p.best_rate, p.last_rate, p.last_partial) == (31.4, 30.0, False)
    new = await store.perf.record_rate(7, "RTX 4090", 1, 24.1, now=T0, partial=True)
    assert (new.best_rate, new.last_rate, new.last_partial) == (24.1, 24.1, True)
    assert new.to_json()["last_partial"] is True


async def test_record_benchmark_validation(store: Store) -> None:
    with pytest.raises(StoreError, match="rate"):
        await store.perf.record_rate(1, "RTX 4090", 1, float("nan"), now=T0)
    with pytest.raises(StoreError, match="rate"):
        await store.perf.record_rate(1, "RTX 4090", 1, -1.0, now=T0)
    with pytest.raises(StoreError, match="num_gpus"):
        await store.perf.record_rate(1, "RTX 4090", 0, 1.0, now=T0)
    with pytest.raises(StoreError, match="gpu_name"):
        await store.perf.record_rate(1, "", 1, 1.0, now=T0)
    assert await store.perf.all() == []


# -- events -----------------------------------------------------------------------------------


async def test_events_are_append_only(store: Store) -> None:
    await store.events.add("rent", "rented offer 1234567", instance_id=3245511, now=T0)
    with sqlite3.connect(store.path) as raw:
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            raw.execute("UPDATE events SET reason = 'rewritten'")
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            raw.execute("DELETE FROM events")
    conn = store.db.require()
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        await conn.execute("DELETE FROM events WHERE id = 1")
    assert [e.reason for e in await store.events.all()] == ["rented offer 1234567"]


async def test_add_and_list_events(store: Store) -> None:
    for i, kind in enumerate(["rent", "stage", "stage", "destroy", "error"]):
        await store.events.add(
            kind,
            f"{kind} #{i}",
            instance_id=100 + i,
            machine_id=18234,
            detail={"i": i},
            now=T0 + i,
        )
    events = await store.events.all()
    assert [e.reason for e in events] == [
        "rent #0",
        "stage #1",
        "stage #2",
        "destroy #3",
        "error #4",
    ]
    assert events[0] == Event(
        id=1,
        ts=T0,
        kind="rent",
        reason="rent #0",
        instance_id=100,
        machine_id=18234,
        detail={"i": 0},
    )
    assert [e.reason for e in await store.events.all(limit=2)] == ["destroy #3", "error #4"]
    assert [e.reason for e in await store.events.all(kind="stage")] == ["stage #1", "stage #2"]
    assert [e.reason for e in await store.events.all(limit=1, kind="stage")] == ["stage #2"]
    assert await store.events.all(limit=0) == []
    with pytest.raises(StoreError, match="reason"):
        await store.events.add("rent", "", now=T0)
    with pytest.raises(StoreError, match="kind"):
        await store.events.add(" ", "x", now=T0)


# -- to_json key sets -------------------------------------------------------------------------


async def test_to_json_key_sets(store: Store) -> None:
    inst = await store.instances.upsert(_inst(), now=T0)
    assert list(inst.to_json()) == [
        "id",
        "label",
        "machine_id",
        "host_id",
        "gpu_name",
        "state",
        "phase",
        "stage",
        "dph_total",
        "bench_rate",
        "min_rate",
        "prod_completed",
        "prod_failed",
        "prod_rate",
        "image",
        "kill_reason",
        "runner_id",
        "max_pending",
        "tunnel_down_since",
        "bid_price",
        "interruptions",
        "outbid_since",
        "drain_started_at",
        "drain_deadline",
        "released_tasks",
    ]
    assert inst.to_json()["id"] == 3245511
    await store.instances.set_stage(3245511, "paramfetch", now=T0 + 1)
    killed = await store.mark_killed(3245511, "deadline_paramfetch", "too slow", now=T0 + 2)
    kj = killed.to_json()
    assert (kj["state"], kj["stage"], kj["kill_reason"]) == ("killed", "paramfetch", "too slow")

    bad = await store.badlist.add(18234, "slow", expires_at=T0 + HOUR, now=T0)
    bad_keys = {"machine_id", "host_id", "gpu_name", "reason", "source", "created_at", "expires_at"}
    assert set(bad.to_json()) == bad_keys
    assert bad.to_json()["created_at"] == "2026-11-30T10:05:00Z"
    assert bad.to_json()["expires_at"] == "2026-11-30T11:05:00Z"

    review = LegacyReviewEntry(
        id=1,
        kind="bad_host",
        host_id=777,
        gpu_name=None,
        num_gpus=None,
        bench_rate=None,
        reason="old ban",
        legacy_added_at=None,
        imported_at=T0,
        source_path="/x/state.db",
    )
    rj = review.to_json()
    assert set(rj) == bad_keys
    assert rj["machine_id"] is None and rj["source"] == "legacy-review"
    assert rj["created_at"] is None and rj["expires_at"] is None

    perf = await store.perf.record_rate(18234, "RTX 4090", 1, 31.4, now=T0)
    assert set(perf.to_json()) == {
        "machine_id",
        "gpu_name",
        "num_gpus",
        "best_rate",
        "last_rate",
        "last_partial",
        "samples",
        "cpu_ram_gb",
        "measured_at",
    }
    assert perf.to_json()["measured_at"] == "2026-11-30T10:05:00Z"
    assert isinstance(perf, PerfRecord)

    ev = (await store.events.all())[0]
    assert set(ev.to_json()) == {"ts", "kind", "instance_id", "machine_id", "reason"}
    assert ev.to_json()["ts"] == "2026-11-30T10:05:00Z"


async def test_concurrent_writes_are_serialized(store: Store) -> None:
    await asyncio.gather(
        *(store.badlist.add(1 + i % 5, f"strike {i}", now=T0 + i) for i in range(25)),
        *(store.perf.record_rate(77, "RTX 4090", 1, float(i), now=T0 + i) for i in range(25)),
    )
    assert sorted(b.bans for b in await store.badlist.all(now=T0)) == [5, 5, 5, 5, 5]
    [perf] = await store.perf.of_machine(77)
    assert (perf.samples, perf.best_rate) == (25, 24.0)
    assert _event_count(store.path, "ban") == 25


# -- the engine's status ----------------------------------------------------------------------


def _status(kind: str | None, at: float, **kw) -> EngineStatus:
    base = dict(
        target=3,
        workers=2,
        by_stage={"proving": 1, "benchmark": 1},
        reason_kind=kind,
        reason=None if kind is None else f"{kind} at {at}",
        best=None,
        dry_run=False,
        updated_at=at,
    )
    base.update(kw)
    return EngineStatus(**base)


async def test_engine_status_is_one_row_and_its_reason_since_lasts_with_its_kind(
    store: Store,
) -> None:
    assert await store.status.get() is None
    best = {
        "offer_id": 123,
        "machine_id": 9,
        "gpu_name": "RTX 4090",
        "expected_cost_per_proof": 0.0091,
    }
    first = await store.status.put(_status("no_viable_offer", T0, best=best))
    assert first.reason_since == T0 and first.best == best
    # The same cause a cycle later: its text may change, its start does not.
    again = await store.status.put(_status("no_viable_offer", T0 + 30, reason_since=T0 + 30))
    assert again.reason_since == T0 and again.updated_at == T0 + 30
    assert again.reason == f"no_viable_offer at {T0 + 30}"
    # Another cause starts its own clock; so does renting (no reason).
    cap = await store.status.put(_status("bench_concurrency_cap", T0 + 60, dry_run=True))
    assert cap.reason_since == T0 + 60 and cap.dry_run is True and cap.best is None
    renting = await store.status.put(_status(None, T0 + 90))
    assert renting.reason_kind is None and renting.reason is None
    assert renting.reason_since == T0 + 90
    assert (await store.status.put(_status(None, T0 + 120))).reason_since == T0 + 90
    got = await store.status.get()
    assert got == await store.status.put(_status(None, T0 + 120))
    assert got.by_stage == {"proving": 1, "benchmark": 1} and got.target == 3
    with sqlite3.connect(store.path) as raw:
        assert raw.execute("SELECT COUNT(*) FROM engine_status").fetchone()[0] == 1
    assert got.to_json() == {
        "target": 3,
        "workers": 2,
        "by_stage": {"proving": 1, "benchmark": 1},
        "reason_kind": None,
        "reason": None,
        "best": None,
        "dry_run": False,
        "updated_at": "2026-11-30T10:07:00Z",
        "reason_since": "2026-11-30T10:06:30Z",
        "simulated_clock": False,
        "credit": None, "spent_today": None, "daily_budget": None, "dph": None, "dph_cap": None,
        "cluster": None, "cut_off": None, "cut_off_since": None, "delivery": None,
    }  # fmt: skip
    seen = await store.status.put(
        replace(_status(None, T0 + 140), cluster={"state": "ok", "psprove_waiting": 3})
    )
    assert seen.cluster == {"state": "ok", "psprove_waiting": 3}
    money = await store.status.put(
        replace(_status(None, T0 + 150), credit=42.5, spent_today=3.25, daily_budget=50.0,
                dph=0.9, dph_cap=5.0)
    )  # fmt: skip
    assert (money.credit, money.spent_today, money.daily_budget, money.dph, money.dph_cap) == (
        42.5, 3.25, 50.0, 0.9, 5.0,
    )  # fmt: skip
    with pytest.raises(StoreError, match="credit must be a finite number"):
        await store.status.put(replace(_status(None, T0), credit=float("nan")))


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("target", -1),
        ("workers", 1.5),
        ("by_stage", {"proving": "x"}),
        ("updated_at", float("nan")),
    ],
)
async def test_engine_status_validation(store: Store, field: str, value) -> None:
    with pytest.raises(StoreError, match=f"engine status {field}"):
        await store.status.put(_status("at_target", T0, **{field: value}))
    assert await store.status.get() is None


async def test_a_version_4_database_gains_the_status_table(tmp_path: Path) -> None:
    path = tmp_path / "v4.db"
    with sqlite3.connect(path) as raw:
        for script in MIGRATIONS[:4]:
            raw.executescript(script)
        raw.execute("PRAGMA user_version = 4")
        raw.execute(
            "INSERT INTO events (ts, kind, reason) VALUES (?, 'rent', 'kept across the upgrade')",
            (T0,),
        )
    async with await Store.open(path) as s:
        assert await s.schema_version() == SCHEMA_VERSION == 15
        assert [e.reason for e in await s.events.all()] == ["kept across the upgrade"]
        await s.status.put(_status("at_target", T0))
        assert (await s.status.get()).reason_kind == "at_target"
        assert await s.status.get_offers() is None
        await s.status.put_offers("gpu_name=RTX_4090", [{"raw": {"id": 1}}], T0)
        assert await s.status.get_offers() == ("gpu_name=RTX_4090", [{"raw": {"id": 1}}], T0)


async def test_a_version_10_status_row_reads_its_money_as_unknown(tmp_path: Path) -> None:
    """Migration 11 adds the money limits to engine_status; a row written before reads None."""
    path = tmp_path / "v10.db"
    with sqlite3.connect(path) as raw:
        for script in MIGRATIONS[:10]:
            raw.executescript(script)
        raw.execute("PRAGMA user_version = 10")
        raw.execute(
            "INSERT INTO engine_status (id, target, workers, by_stage, dry_run, updated_at)"
            " VALUES (1, 2, 1, '{}', 0, ?)",
            (T0,),
        )
    async with await Store.open(path) as s:
        got = await s.status.get()
        assert got is not None and got.target == 2
        assert (got.credit, got.spent_today, got.daily_budget, got.dph, got.dph_cap) == (None,) * 5


async def test_a_version_9_database_keeps_its_ban_counts_as_bans(tmp_path: Path) -> None:
    """Migration 10 renames bad_machines.strikes (it counted bans, not strikes) to bans."""
    path = tmp_path / "v9.db"
    with sqlite3.connect(path) as raw:
        for script in MIGRATIONS[:9]:
            raw.executescript(script)
        raw.execute("PRAGMA user_version = 9")
        raw.execute(
            "INSERT INTO bad_machines (machine_id, reason, source, created_at, updated_at, strikes)"
            " VALUES (7, 'bad', 'automatic', ?, ?, 3)",
            (T0, T0),
        )
    async with await Store.open(path) as s:
        assert (await s.badlist.get(7)).bans == 3  # type: ignore[union-attr]
        assert (await s.badlist.add(7, "bad again", now=T0 + HOUR)).bans == 4
    with sqlite3.connect(path) as raw:
        columns = [r[1] for r in raw.execute("PRAGMA table_info(bad_machines)")]
    assert "bans" in columns and "strikes" not in columns


async def test_a_transaction_cancelled_as_it_begins_leaves_no_transaction_open(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    # A stop cancels the step: the cancellation reaches the coroutine after aiosqlite's thread
    # ran the BEGIN. The connection must not stay in it (the next BEGIN would be refused).
    conn = store.db.require()
    real = conn.execute

    async def begin_then_cancelled(sql: str, *args: object) -> object:
        result = await real(sql, *args)
        if sql == "BEGIN IMMEDIATE":
            raise asyncio.CancelledError
        return result

    monkeypatch.setattr(conn, "execute", begin_then_cancelled)
    with pytest.raises(asyncio.CancelledError):
        await store.events.add("rent", "x", now=T0)
    monkeypatch.setattr(conn, "execute", real)
    assert not conn.in_transaction
    assert (await store.events.add("rent", "after", now=T0)).reason == "after"


async def test_a_transaction_cancelled_before_its_begin_ran_leaves_no_transaction_open(
    store: Store,
) -> None:
    """The other order (seen under load, CI: the lease's release at exit refused with "cannot
    start a transaction within a transaction"): the cancellation reaches the coroutine while
    the BEGIN still waits in aiosqlite's queue. The connection reads as not in a transaction
    then, and the BEGIN runs after: a rollback must be queued behind it, not skipped."""
    import asyncio
    import threading

    conn = store.db.require()
    gate = threading.Event()
    await conn.create_function("hold", 0, lambda: gate.wait(30) and 1)
    held = asyncio.ensure_future(conn.execute("SELECT hold()"))  # aiosqlite's thread is busy
    task = asyncio.ensure_future(store.events.add("rent", "x", now=T0))
    # The transaction takes the database's lock and queues its BEGIN in one step (aiosqlite puts
    # the call on its queue before it waits): once the lock is held, the BEGIN waits behind
    # the held query.
    lock = store.db._lock
    for _ in range(1000):
        if lock.locked():
            break
        await asyncio.sleep(0)
    assert lock.locked() and not conn.in_transaction
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    gate.set()
    await held
    assert (await store.events.add("rent", "after", now=T0)).reason == "after"
    assert not conn.in_transaction
    assert [e.reason for e in await store.events.all()] == ["after"]
