"""Engine-side store operations: intents, commands, the lease, destroy records."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from vastui.domain.worker import InstanceRecord
from vastui.store import LeaseHeld, Store, StoreError

T0 = 1_790_000_000.0


@pytest.fixture
async def store(tmp_path: Path):
    s = await Store.open(tmp_path / "s.db")
    yield s
    await s.close()


async def test_destroy_kill_is_atomic_with_its_event_and_first_cause_wins(store: Store):
    await store.instances.upsert(
        InstanceRecord(vast_id=5, machine_id=77, state="benchmark"), now=T0
    )
    rec = await store.mark_killed(
        5, "bench_below_min", "benchmark below_min: 21.3 < 29.0", error_lines=["x"],
        event="destroy", now=T0 + 1,
    )  # fmt: skip
    assert rec.state == "killed" and rec.failed_stage == "benchmark"
    assert rec.kill_kind == "bench_below_min" and rec.error_lines == ("x",)
    again = await store.mark_killed(5, "manual", "again", event="destroy", now=T0 + 2)
    assert again.kill_kind == "bench_below_min"
    events = await store.events.all(kind="destroy")
    assert [(e.instance_id, e.machine_id, e.reason) for e in events] == [
        (5, 77, "benchmark below_min: 21.3 < 29.0")
    ]


async def test_intents_round_trip_and_label_is_unique(store: Store):
    intent = await store.intents.create("rent", "auto", label="vastui-main-a", offer_id=9, now=T0)
    assert intent.status == "pending" and intent.detail == {}
    assert [i.id for i in await store.intents.all(status="pending")] == [intent.id]
    with pytest.raises(StoreError, match=r"cannot store: UNIQUE constraint failed: intents\.label"):
        await store.intents.create("rent", "auto", label="vastui-main-a", now=T0)
    await store.intents.finish(intent.id, "done", instance_id=1234, now=T0 + 1)
    [done] = await store.intents.all(kind="rent")
    assert done.status == "done" and done.instance_id == 1234
    assert await store.intents.all(status="pending") == []


async def test_commands_are_claimed_once(store: Store):
    cid = await store.commands.submit("ignore", {"machine_id": 7, "reason": "r"}, now=T0)
    first = await store.commands.claim()
    assert [c.id for c in first] == [cid] and first[0].args["machine_id"] == 7
    assert await store.commands.claim() == []
    await store.commands.finish(cid, False, "machine 7 unknown", now=T0)
    cmd = await store.commands.get(cid)
    assert cmd is not None and cmd.status == "failed" and cmd.result == "machine 7 unknown"
    with pytest.raises(ValueError):
        await store.commands.submit("rm -rf", {})


async def test_crash_requeues_claimed_commands(store: Store):
    cid = await store.commands.submit("unignore", {"machine_id": 7}, now=T0)
    await store.commands.claim()
    assert await store.commands.requeue_running() == 1
    assert [c.id for c in await store.commands.claim()] == [cid]


async def test_lease_one_engine_per_database(store: Store):
    kw = {"pid": 1, "hostname": "h", "mode": "headless", "ttl": 30.0}
    await store.lease.acquire("a", now=T0, **kw)
    with pytest.raises(LeaseHeld, match="another vastui engine"):
        await store.lease.acquire("b", now=T0 + 10, **kw)
    assert await store.lease.renew("a", ttl=30.0, now=T0 + 20)
    assert not await store.lease.renew("b", ttl=30.0, now=T0 + 20)
    holder = await store.lease.holder(now=T0 + 49)
    assert holder is not None and holder.owner == "a"
    # An expired lease (its engine died) can be taken over; its row is still recorded (a
    # console tells a lapse from a clean stop, which deletes it).
    assert await store.lease.holder(now=T0 + 51) is None
    lapsed = await store.lease.recorded()
    assert lapsed is not None and lapsed.owner == "a"
    taken = await store.lease.acquire("b", now=T0 + 51, **kw)
    assert taken.owner == "b"
    await store.lease.release("a")  # not the owner: nothing happens
    assert (await store.lease.holder(now=T0 + 52)).owner == "b"
    await store.lease.release("b")
    assert await store.lease.holder(now=T0 + 52) is None
    assert await store.lease.recorded() is None


async def test_update_instance_whitelist(store: Store):
    await store.instances.upsert(InstanceRecord(vast_id=5), now=T0)
    rec = await store.instances.update(5, events_seen=3, vast_status="running")
    assert rec.events_seen == 3 and rec.vast_status == "running"
    with pytest.raises(ValueError, match="state"):
        await store.instances.update(5, state="proving")


async def test_a_dead_engine_of_this_host_does_not_hold_the_lease(store: Store):
    """After a SIGKILL the restarted engine takes over at once, not after the lease lapses;
    a live engine of this host, or any engine of another host, still holds it."""
    import socket
    import subprocess
    import sys

    here = socket.gethostname()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    await store.lease.acquire("dead", pid=gone.pid, hostname=here, mode="headless", ttl=30.0)
    taken = await store.lease.acquire("new", pid=os.getpid(), hostname=here, mode="headless",
                                      ttl=30.0)  # fmt: skip
    assert taken.owner == "new"
    with pytest.raises(LeaseHeld):  # this process lives
        await store.lease.acquire("third", pid=1, hostname=here, mode="headless", ttl=30.0)
    await store.lease.release("new")
    await store.lease.acquire("far", pid=gone.pid, hostname="elsewhere", mode="headless", ttl=30.0)
    with pytest.raises(LeaseHeld):  # another host's pid means nothing here
        await store.lease.acquire("new", pid=os.getpid(), hostname=here, mode="headless", ttl=30.0)


async def test_runner_ids_are_monotonic_unique_and_never_reused(store: Store):
    """The original's runner_id: one counter per fleet database, never reused, a gap allowed."""
    first = await store.instances.next_runner_id()
    second = await store.instances.next_runner_id()
    assert (first, second) == (1, 2)
    await store.instances.upsert(InstanceRecord(vast_id=5, runner_id=second), now=T0)
    await store.mark_killed(5, "manual", "gone", now=T0 + 1)
    assert await store.instances.next_runner_id() == 3, "a killed worker's id is not given again"
    await store.instances.note_runner_id(40)  # an adopted instance carried 40
    assert await store.instances.next_runner_id() == 41
    await store.instances.note_runner_id(7)  # a lower one seen later does not move the counter back
    assert await store.instances.next_runner_id() == 42
    # two rows cannot hold one identity: they would be one curio machine
    with pytest.raises(StoreError, match=r"UNIQUE constraint failed: instances\.runner_id"):
        await store.instances.upsert(InstanceRecord(vast_id=6, runner_id=second), now=T0)
    # no identity (a legacy row) is not a clash
    await store.instances.upsert(InstanceRecord(vast_id=8), now=T0)
    await store.instances.upsert(InstanceRecord(vast_id=9), now=T0)
    rec = await store.instances.get(5)
    assert rec is not None and rec.runner_id == 2 and rec.to_json()["runner_id"] == 2


async def test_the_counter_continues_above_ids_already_stored(tmp_path: Path):
    """A database whose rows hold ids the counter never gave (written before the counter, or by
    hand) still gets new ids above them."""
    import sqlite3

    s = await Store.open(tmp_path / "c.db")
    await s.instances.upsert(InstanceRecord(vast_id=5, runner_id=17), now=T0)
    await s.close()
    raw = sqlite3.connect(tmp_path / "c.db")
    with raw:
        raw.execute("UPDATE counters SET value = 0")
    raw.close()
    s = await Store.open(tmp_path / "c.db")
    try:
        assert await s.instances.next_runner_id() == 18
    finally:
        await s.close()
