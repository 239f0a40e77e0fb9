"""Importing the original vast-manager state.db (both schema generations) into the store."""

from __future__ import annotations

import hashlib
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest

from vastui.domain.worker import InstanceRecord
from vastui.store import Store, StoreError, import_legacy
from vastui.store.legacy import ImportReport, parse_legacy_time

T0 = 1_796_033_100.0  # 2026-11-30T10:05:00Z


def epoch(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


# The original DDL (reference §1.3). The pre-re-key generation keyed bad_hosts/host_perf by
# host_id (the operator account) and its instances table predates the metadata columns.
COUNTERS_DDL = """
CREATE TABLE counters (key TEXT PRIMARY KEY, value INTEGER NOT NULL DEFAULT 0);
INSERT INTO counters (key, value) VALUES ('runner_id_seq', 0);
"""
OLD_INSTANCES_DDL = """
CREATE TABLE instances (
    uuid TEXT PRIMARY KEY,
    label TEXT NOT NULL,
    runner_id INTEGER UNIQUE NOT NULL,
    state TEXT NOT NULL DEFAULT 'registered',
    min_rate REAL NOT NULL DEFAULT 50,
    registered_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,
    param_done_at TIMESTAMP,
    bench_done_at TIMESTAMP,
    bench_rate REAL,
    killed_at TIMESTAMP,
    kill_reason TEXT
);
"""
METADATA_COLUMNS = [
    "vast_id INTEGER",
    "host_id INTEGER",
    "machine_id INTEGER",
    "gpu_name TEXT",
    "num_gpus INTEGER",
    "dph_total REAL",
    "geolocation TEXT",
    "cpu_name TEXT",
    "cpu_ram_mb INTEGER",
    "gpu_ram_mb INTEGER",
    "ssh_cmd TEXT",
    "public_ip TEXT",
]
PRE_REKEY_DDL = """
CREATE TABLE bad_hosts (
    host_id TEXT PRIMARY KEY,
    reason TEXT NOT NULL,
    added_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP
);
CREATE TABLE host_perf (
    host_id INTEGER NOT NULL,
    gpu_name TEXT NOT NULL,
    num_gpus INTEGER NOT NULL,
    bench_rate REAL NOT NULL,
    cpu_ram_mb INTEGER,
    measured_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,
    PRIMARY KEY (host_id, gpu_name, num_gpus)
);
"""
POST_REKEY_DDL = PRE_REKEY_DDL.replace("host_id", "machine_id")


def build_pre_rekey(path: Path) -> Path:
    """A host_id-era state.db: account-keyed tables, instances without metadata columns."""
    with sqlite3.connect(path) as db:
        db.executescript(COUNTERS_DDL + OLD_INSTANCES_DDL + PRE_REKEY_DDL)
        db.executemany(
            "INSERT INTO bad_hosts (host_id, reason, added_at) VALUES (?, ?, ?)",
            [
                ("4242", "slow operator", "2026-02-01 08:00:00"),
                ("5151", "flaky", "2026-02-02 09:30:00"),
                ("not-a-number", "junk row", "2026-02-03 00:00:00"),
            ],
        )
        db.executemany(
            "INSERT INTO host_perf (host_id, gpu_name, num_gpus, bench_rate, cpu_ram_mb,"
            " measured_at) VALUES (?, ?, ?, ?, ?, ?)",
            [
                (4242, "RTX 3090", 1, 12.5, 257645, "2026-02-01 07:00:00"),
                (6060, "RTX 4090", 2, 55.0, 516096, "2026-02-05 12:00:00"),
            ],
        )
        db.executemany(
            "INSERT INTO instances (uuid, label, runner_id, state, min_rate, registered_at,"
            " param_done_at, bench_done_at, bench_rate, killed_at, kill_reason)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                ("u-1", "C.3000001", 1, "running", 29.0, "2026-02-10 10:00:00",
                 "2026-02-10 10:40:00", "2026-02-10 11:10:00", 31.4, None, None),
                ("u-2", "C.3000002", 2, "killed", 29.0, "2026-02-11 10:00:00",
                 "2026-02-11 10:50:00", "2026-02-11 11:20:00", 21.0, "2026-02-11 11:20:01",
                 "bench_rate 21.0 below min_rate 29.0"),
                ("u-3", "C.3000003", 3, "registered", 50.0, "2026-02-12 10:00:00",
                 None, None, None, None, None),
                ("u-4", "some-other-label", 4, "registered", 50.0, "2026-02-12 11:00:00",
                 None, None, None, None, None),
            ],
        )  # fmt: skip
    return path


def build_post_rekey(path: Path) -> Path:
    """A current state.db: machine-keyed tables and instances with the metadata columns."""
    with sqlite3.connect(path) as db:
        db.executescript(COUNTERS_DDL + OLD_INSTANCES_DDL + POST_REKEY_DDL)
        for col in METADATA_COLUMNS:  # the original's idempotent ALTER TABLE migrations
            db.execute(f"ALTER TABLE instances ADD COLUMN {col}")
        db.executemany(
            "INSERT INTO bad_hosts (machine_id, reason, added_at) VALUES (?, ?, ?)",
            [
                ("18234", "Not good enough (RTX 3090, Poland, PL)", "2026-03-13 18:03:00"),
                ("20000", "driver crashes", "2026-03-12 08:00:00"),
                ("-3", "junk", "2026-03-12 08:00:00"),
            ],
        )
        db.executemany(
            "INSERT INTO host_perf (machine_id, gpu_name, num_gpus, bench_rate, cpu_ram_mb,"
            " measured_at) VALUES (?, ?, ?, ?, ?, ?)",
            [
                (18234, "RTX 4090", 1, 31.4, 257645, "2026-03-13 17:49:02"),
                (30000, "RTX 5090", 1, 45.0, None, "2026-03-13 16:00:00"),
            ],
        )
        db.executemany(
            "INSERT INTO instances (uuid, label, runner_id, state, min_rate, registered_at,"
            " param_done_at, bench_done_at, bench_rate, killed_at, kill_reason, vast_id,"
            " host_id, machine_id, gpu_name, num_gpus, dph_total, geolocation, cpu_ram_mb,"
            " ssh_cmd, public_ip) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            [
                ("p-1", "C.3245511", 42, "bench_done", 29.0, "2026-03-13 17:12:01",
                 "2026-03-13 17:16:40", "2026-03-13 17:49:02", 31.4, None, None, 3245511,
                 777, 18234, "RTX 4090", 1, 0.232, "Poland, PL", 257645,
                 "ssh -p 41022 root@203.0.113.7", "203.0.113.7"),
                ("p-2", "C.3245600", 43, "killed", 29.0, "2026-03-13 16:00:00",
                 "2026-03-13 17:17:00", None, None, "2026-03-13 18:02:25",
                 "benchmark timeout (45min)", 3245600, 778, 20000, "RTX 3090", 1, 0.15,
                 "Spain, ES", 128000, None, None),
                ("p-3", "C.3245700", 44, "params_done", 29.0, "2026-03-13 18:05:00",
                 "2026-03-13 18:40:00", None, None, None, None, 3245700, 779, 30000,
                 "RTX 5090", 1, 0.4, "Texas, US", 516096, None, None),
            ],
        )  # fmt: skip
    return path


async def _table_counts(store: Store) -> dict[str, int]:
    return {
        "bad": len(await store.badlist.all(include_expired=True, now=T0)),
        "perf": len(await store.perf.all()),
        "review": len(await store.badlist.legacy_review()),
        "instances": len(await store.instances.all()),
    }


@pytest.fixture
async def store(tmp_path: Path):
    s = await Store.open(tmp_path / "vastui.db")
    try:
        yield s
    finally:
        await s.close()


# -- pre-re-key -------------------------------------------------------------------------------


async def test_pre_rekey_goes_to_review_only(store: Store, tmp_path: Path) -> None:
    legacy = build_pre_rekey(tmp_path / "old-state.db")
    report = await import_legacy(store, legacy, now=T0)

    assert report.generations == {"bad_hosts": "pre-re-key", "host_perf": "pre-re-key"}
    assert (report.bad_machines, report.perf) == (0, 0)
    assert (report.review_bad_hosts, report.review_perf) == (2, 2)
    assert report.instances == 3
    assert any("not-a-number" in s for s in report.skipped)
    assert any("some-other-label" in s for s in report.skipped)

    # Account ids must never become machine ids.
    assert await store.badlist.all(include_expired=True, now=T0) == []
    assert await store.badlist.machine_ids(now=T0) == set()
    assert await store.perf.all() == []
    for account in (4242, 5151, 6060):
        assert await store.perf.of_machine(account) == []
        assert await store.badlist.get(account) is None

    review = await store.badlist.legacy_review()
    assert [(r.kind, r.host_id, r.gpu_name, r.num_gpus) for r in review] == [
        ("bad_host", 4242, None, None),
        ("bad_host", 5151, None, None),
        ("perf", 4242, "RTX 3090", 1),
        ("perf", 6060, "RTX 4090", 2),
    ]
    bad4242 = review[0]
    assert bad4242.reason == "slow operator"
    assert bad4242.legacy_added_at == epoch("2026-02-01 08:00:00")
    assert bad4242.imported_at == T0
    assert bad4242.source_path == str(legacy.resolve())
    assert review[3].bench_rate == 55.0
    assert review[3].reason and "operator account 6060" in review[3].reason
    j = bad4242.to_json()
    assert j["machine_id"] is None and j["host_id"] == 4242 and j["source"] == "legacy-review"
    assert j["created_at"] == "2026-02-01T08:00:00Z"

    assert "set aside for review" in report.summary()
    assert "\n" not in report.summary()


async def test_old_instances_table_without_metadata(store: Store, tmp_path: Path) -> None:
    legacy = build_pre_rekey(tmp_path / "old-state.db")
    await import_legacy(store, legacy, now=T0)

    running = await store.instances.get(3000001)
    assert running is not None
    assert running.source == "legacy" and running.label == "C.3000001"
    assert running.state == "proving" and running.stage == "proving"
    assert running.machine_id is None and running.gpu_name is None
    assert running.created_at == epoch("2026-02-10 10:00:00")
    assert running.paramfetch_at == epoch("2026-02-10 10:00:00")
    assert running.benchmark_at == epoch("2026-02-10 10:40:00")
    assert running.bench_rate == 31.4 and running.min_rate == 29.0
    assert running.bench_outcome == "pass"

    killed = await store.instances.get(3000002)
    assert killed is not None and killed.state == "killed"
    assert killed.kill_reason == "bench_rate 21.0 below min_rate 29.0"
    assert killed.kill_kind == "bench_below_min"
    assert killed.failed_stage == "benchmark" and killed.bench_outcome == "fail"
    assert killed.killed_at == epoch("2026-02-11 11:20:01")
    assert killed.to_json()["stage"] == "benchmark"

    fetching = await store.instances.get(3000003)
    assert fetching is not None and fetching.state == "paramfetch"
    assert fetching.stage_started_at == epoch("2026-02-12 10:00:00")


# -- post-re-key ------------------------------------------------------------------------------


async def test_post_rekey_imports_bad_and_perf(store: Store, tmp_path: Path) -> None:
    legacy = build_post_rekey(tmp_path / "state.db")
    report = await import_legacy(store, legacy, now=T0)

    assert report.generations == {"bad_hosts": "post-re-key", "host_perf": "post-re-key"}
    assert (report.bad_machines, report.perf, report.instances) == (2, 2, 3)
    assert (report.review_bad_hosts, report.review_perf) == (0, 0)
    assert await store.badlist.legacy_review() == []
    assert any("'-3'" in s for s in report.skipped)

    assert await store.badlist.machine_ids(now=T0) == {18234, 20000}
    bad = await store.badlist.get(18234)
    assert bad is not None
    assert bad.source == "legacy" and bad.reason == "Not good enough (RTX 3090, Poland, PL)"
    assert bad.created_at == epoch("2026-03-13 18:03:00") and bad.expires_at is None
    assert bad.bans == 1

    [perf] = await store.perf.of_machine(18234)
    assert (perf.gpu_name, perf.num_gpus, perf.best_rate, perf.last_rate, perf.samples) == (
        "RTX 4090",
        1,
        31.4,
        31.4,
        1,
    )
    assert perf.cpu_ram_gb == 257.645
    assert perf.measured_at == epoch("2026-03-13 17:49:02")

    benched = await store.instances.get(3245511)
    assert benched is not None
    assert (benched.state, benched.machine_id, benched.host_id, benched.gpu_name) == (
        "benchmark",
        18234,
        777,
        "RTX 4090",
    )
    assert benched.dph_total == 0.232 and benched.geolocation == "Poland, PL"
    assert (benched.ssh_host, benched.ssh_port) == ("203.0.113.7", 41022)
    assert benched.cpu_ram_gb == 257.645

    timed_out = await store.instances.get(3245600)
    assert timed_out is not None and timed_out.state == "killed"
    assert timed_out.kill_kind == "deadline_benchmark"
    assert timed_out.failed_stage == "benchmark"

    events = await store.events.all(kind="import")
    assert len(events) == 1
    assert events[0].detail is not None
    assert events[0].detail["bad_machines"] == 2 and events[0].detail["instances"] == 3


async def test_post_rekey_never_downgrades_or_overwrites(store: Store, tmp_path: Path) -> None:
    await store.badlist.add(18234, "operator ban", source="manual", now=T0 - 100)
    await store.badlist.add(
        20000, "auto ban", source="automatic", expires_at=T0 + 3600, now=T0 - 100
    )
    await store.perf.record_rate(18234, "RTX 4090", 1, 25.0, now=T0 - 100)  # legacy 31.4 wins
    await store.perf.record_rate(30000, "RTX 5090", 1, 50.0, now=T0 - 100)  # ours 50 wins
    await store.instances.upsert(
        InstanceRecord(vast_id=3245511, label="mine", state="proving"), now=T0 - 100
    )

    report = await import_legacy(store, build_post_rekey(tmp_path / "state.db"), now=T0)
    assert report.bad_machines == 0
    assert report.perf == 1
    assert report.instances == 2

    manual = await store.badlist.get(18234)
    auto = await store.badlist.get(20000)
    assert manual is not None and (manual.source, manual.reason) == ("manual", "operator ban")
    assert auto is not None and (auto.source, auto.expires_at) == ("automatic", T0 + 3600)

    [p4090] = await store.perf.of_machine(18234)
    assert (p4090.best_rate, p4090.last_rate, p4090.samples) == (31.4, 25.0, 1)
    [p5090] = await store.perf.of_machine(30000)
    assert (p5090.best_rate, p5090.samples) == (50.0, 1)

    mine = await store.instances.get(3245511)
    assert mine is not None and (mine.label, mine.source, mine.state) == (
        "mine",
        "vastui",
        "proving",
    )


async def test_reimport_is_idempotent(store: Store, tmp_path: Path) -> None:
    pre = build_pre_rekey(tmp_path / "old.db")
    post = build_post_rekey(tmp_path / "new.db")
    await import_legacy(store, pre, now=T0)
    await import_legacy(store, post, now=T0)
    before = await _table_counts(store)
    assert before == {"bad": 2, "perf": 2, "review": 4, "instances": 6}
    snapshot = (
        await store.badlist.all(include_expired=True, now=T0),
        await store.perf.all(),
        await store.badlist.legacy_review(),
        await store.instances.all(),
    )

    again_pre = await import_legacy(store, pre, now=T0 + 10)
    again_post = await import_legacy(store, post, now=T0 + 10)
    for report in (again_pre, again_post):
        assert (report.bad_machines, report.perf, report.instances) == (0, 0, 0)
        assert (report.review_bad_hosts, report.review_perf) == (0, 0)
    assert await _table_counts(store) == before
    assert snapshot == (
        await store.badlist.all(include_expired=True, now=T0),
        await store.perf.all(),
        await store.badlist.legacy_review(),
        await store.instances.all(),
    )
    # One import event per call, nothing else.
    assert [e.kind for e in await store.events.all()] == ["import"] * 4


async def test_generation_detected_per_table(store: Store, tmp_path: Path) -> None:
    """A half-migrated file: bad_hosts re-keyed, host_perf still keyed by host_id."""
    path = tmp_path / "mixed.db"
    with sqlite3.connect(path) as db:
        db.executescript(
            POST_REKEY_DDL.split("CREATE TABLE host_perf")[0]
            + "CREATE TABLE host_perf"
            + PRE_REKEY_DDL.split("CREATE TABLE host_perf")[1]
        )
        db.execute("INSERT INTO bad_hosts VALUES ('111', 'bad box', '2026-03-01 00:00:00')")
        db.execute(
            "INSERT INTO host_perf VALUES (222, 'RTX 4090', 1, 30.0, NULL, '2026-03-01 00:00:00')"
        )
    report = await import_legacy(store, path, now=T0)
    assert report.generations == {"bad_hosts": "post-re-key", "host_perf": "pre-re-key"}
    assert await store.badlist.machine_ids(now=T0) == {111}
    assert await store.perf.all() == []
    assert [(r.kind, r.host_id) for r in await store.badlist.legacy_review()] == [("perf", 222)]


async def test_legacy_file_is_not_modified(store: Store, tmp_path: Path) -> None:
    legacy = build_post_rekey(tmp_path / "state.db")
    digest = hashlib.sha256(legacy.read_bytes()).hexdigest()
    await import_legacy(store, legacy, now=T0)
    assert hashlib.sha256(legacy.read_bytes()).hexdigest() == digest
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "state.db",
        "vastui.db",
        "vastui.db-shm",
        "vastui.db-wal",
    ]


# -- errors -----------------------------------------------------------------------------------


async def test_non_database_file_is_clear_error(store: Store, tmp_path: Path) -> None:
    junk = tmp_path / "state.db"
    junk.write_text("definitely not sqlite\n" * 100)
    with pytest.raises(StoreError) as exc:
        await import_legacy(store, junk, now=T0)
    msg = str(exc.value)
    assert str(junk) in msg and "not an SQLite database" in msg and "\n" not in msg
    assert await store.events.all() == []


async def test_missing_file_and_wrong_tables(store: Store, tmp_path: Path) -> None:
    missing = tmp_path / "nope.db"
    with pytest.raises(StoreError, match="does not exist") as exc:
        await import_legacy(store, missing, now=T0)
    assert str(missing) in str(exc.value)
    assert not missing.exists()  # read-only open must not create it

    other = tmp_path / "other.db"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE something (x)")
    with pytest.raises(StoreError, match="none of the tables") as exc:
        await import_legacy(store, other, now=T0)
    assert str(other) in str(exc.value)

    with pytest.raises(StoreError, match="not a regular file"):
        await import_legacy(store, tmp_path, now=T0)


# -- helpers ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-03-13 17:09:15", "2026-03-13 17:09:15"),
        ("2026-03-13T17:09:15Z", "2026-03-13 17:09:15"),
        ("2026-03-13 17:09:15.123456789+00:00", "2026-03-13 17:09:15.123456"),
        ("2026-03-13 19:09:15+02:00", "2026-03-13 17:09:15"),
        ("2026-03-13 17:09:15.5 +0000 UTC", "2026-03-13 17:09:15.5"),
    ],
)
def test_parse_legacy_time(text: str, expected: str) -> None:
    assert parse_legacy_time(text) == pytest.approx(epoch(expected))


def test_parse_legacy_time_edge_cases() -> None:
    assert parse_legacy_time(None) is None
    assert parse_legacy_time("") is None
    assert parse_legacy_time("garbage") is None
    assert parse_legacy_time(1_700_000_000) == 1_700_000_000.0


def test_report_summary_one_line() -> None:
    r = ImportReport(path="/x/state.db", bad_machines=2, perf=1, instances=3, skipped=["a"])
    assert r.summary() == (
        "imported from /x/state.db: 2 bad machines, 1 perf records, 3 instances; 1 skipped"
    )
    assert r.counts()["skipped"] == 1
