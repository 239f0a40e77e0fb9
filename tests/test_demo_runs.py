"""A demo run's database is the run's (issue 31 item 2): the next demo starts from a clean
fleet, the finished run's database kept aside as history (vastui/store/archive.py)."""

from __future__ import annotations

import os
import socket
import sqlite3
from pathlib import Path

from tests.helpers import e2e_config
from vastui.backend import Options
from vastui.domain.worker import InstanceRecord
from vastui.engine.runtime import RunOptions, engine_runtime
from vastui.store import Store
from vastui.store.archive import KEEP, archive_finished_run, carry_learning, runs_dir

T0 = 1_790_000_000.0


async def _db_with_an_instance(path: Path, vast_id: int = 101) -> None:
    async with await Store.open(path) as store:
        rec = InstanceRecord(vast_id=vast_id, label=f"vastui-main-{vast_id:012x}", machine_id=7,
                             state="proving", created_at=T0)  # fmt: skip
        await store.instances.upsert(rec, now=T0)


async def test_a_finished_run_moves_aside_with_its_sidecars(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    assert await archive_finished_run(db) is None  # nothing there
    await _db_with_an_instance(db)
    reader = sqlite3.connect(db)  # a reader still open (a `vastui status`): its WAL stays
    reader.execute("SELECT count(*) FROM instances").fetchall()
    assert (tmp_path / "demo.db-wal").exists()
    dest = await archive_finished_run(db, now=T0)
    assert dest is not None and dest.parent == runs_dir(db) == tmp_path / "demo-runs"
    assert not db.exists() and not (tmp_path / "demo.db-wal").exists()
    assert dest.with_name(dest.name + "-wal").exists()
    reader.close()
    async with await Store.open(dest, migrate=False) as old:
        assert [r.vast_id for r in await old.instances.all()] == [101]
    # the same second again: a name of its own, nothing overwritten
    await _db_with_an_instance(db, 102)
    again = await archive_finished_run(db, now=T0)
    assert again is not None and again != dest and dest.exists()


async def test_an_empty_run_or_a_running_engine_is_left_where_it_is(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    async with await Store.open(db):
        pass
    assert await archive_finished_run(db) is None and db.exists()  # nothing happened in it
    await _db_with_an_instance(db)
    async with await Store.open(db) as store:
        await store.lease.acquire("other", pid=os.getpid(), hostname=socket.gethostname(),
                                  mode="headless", ttl=30.0)  # fmt: skip
        assert await archive_finished_run(db) is None and db.exists()
        # a lease left by a process that no longer runs holds nothing
        await store.lease.release("other")
        await store.lease.acquire("dead", pid=2**22 + 17, hostname=socket.gethostname(),
                                  mode="headless", ttl=30.0)  # fmt: skip
    assert await archive_finished_run(db) is not None and not db.exists()


async def test_only_the_newest_runs_are_kept(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    kept = []
    for i in range(KEEP + 2):
        await _db_with_an_instance(db, 100 + i)
        kept.append(await archive_finished_run(db, now=T0 + 60 * i))
    left = sorted(runs_dir(db).glob("demo-*.db"))
    assert left == kept[-KEEP:]


async def test_a_second_demo_shows_no_kill_and_no_row_of_the_first(demo_state: Path) -> None:
    """The first run rents; its cloud ends with it. The second starts clean: none of the first
    run's instances, no vanish recorded as a kill, no spend carried over; the first run's
    database is history, whole."""
    db = demo_state / "demo.db"
    opts = Options(config=e2e_config(), db=db, demo=True, seed=8)
    async with engine_runtime(opts, RunOptions(seed=8, target_workers=2)) as rt:
        assert rt.archived is None
        for _ in range(3):
            await rt.engine.step()
            if len(await rt.store.instances.all()) == 2:
                break
        first = sorted(r.vast_id for r in await rt.store.instances.all())
        # what it learned of machines (the same machines in every demo run)
        late = rt.engine.clock() + 7200.0  # a run's simulated time runs ahead of the wall
        await rt.store.badlist.add(4242, "ignored by hand", now=late)
        await rt.store.perf.record_rate(4243, "RTX 4090", 1, 30.0, now=late)
        await rt.store.badlist.add_strike(4244, "bench_error", "boom", instance_id=first[-1] + 9,
                                          now=late)  # fmt: skip
    assert len(first) == 2
    async with engine_runtime(opts, RunOptions(seed=8, target_workers=0)) as rt:
        for _ in range(2):
            await rt.engine.step()
        assert await rt.store.instances.all() == []
        assert [e for e in await rt.store.events.all() if e.instance_id in first] == []
        assert rt.archived is not None and rt.archived.parent == demo_state / "demo-runs"
        # the learning came along, and the new cloud's time and ids carry on after it
        assert [b.machine_id for b in await rt.store.badlist.all()] == [4242]
        assert [p.machine_id for p in await rt.store.perf.all()] == [4243]
        assert [s.machine_id for s in await rt.store.badlist.strikes()] == [4244]
        assert rt.engine.clock() > late
        assert rt.demo is not None
    async with await Store.open(rt.archived, migrate=False) as old:
        assert sorted(r.vast_id for r in await old.instances.all()) == first


async def test_learning_from_an_older_schema_comes_as_far_as_it_can(tmp_path: Path) -> None:
    """A column the old run did not have is left to its default; a table it cannot give is
    skipped, not fatal."""
    old = tmp_path / "old.db"
    con = sqlite3.connect(old)
    con.executescript(
        "CREATE TABLE machine_perf (machine_id INTEGER, gpu_name TEXT, num_gpus INTEGER,"
        " best_rate REAL, last_rate REAL, measured_at REAL);"
        "INSERT INTO machine_perf VALUES (77, 'RTX 3090', 2, 20.0, 18.0, 1.0);"
        "CREATE TABLE strikes (machine_id INTEGER);"  # NOT NULL columns it cannot fill
        "INSERT INTO strikes VALUES (78);"
    )
    con.commit()
    con.close()
    new = tmp_path / "demo.db"
    async with await Store.open(new):
        pass
    assert carry_learning(new, old) == {"machine_perf": 1, "strikes": 0}  # its row, not copied
    async with await Store.open(new) as store:
        (perf,) = await store.perf.all()
        assert (perf.machine_id, perf.best_rate, perf.samples) == (77, 20.0, 1)
        assert await store.badlist.strikes() == []
