"""The engine and curio's cluster (vastui/engine/cluster.py, drain.py): drains before a planned
destroy, tasks released after every destroy, curio's count of a worker's proofs, identity
collisions. The engine runs on the simulated cloud's ManualClock (tests/enginekit.py); the
cluster is a real PostgreSQL with curio's schema, and curio's nodes are played with curio's own
statements (tests/pgfixtures.py)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from tests.enginekit import World, rent_distinct, result
from tests.helpers import destroy
from tests.pgfixtures import CurioDb
from vastui.domain.reports import parse_event
from vastui.engine import acts as acts_module
from vastui.engine import identity
from vastui.engine.engine import Engine
from vastui.engine.labels import fleet_id_of
from vastui.store import Store

FLEET = "main"  # Config().fleet.name


class Crash(BaseException):
    """A crash point reached: the engine dies here (tests stand in for SIGKILL)."""


def ident(rec: Any) -> tuple[str, str]:
    fid = fleet_id_of(rec.label)
    return identity.curio_listen(rec.runner_id), identity.node_name(FLEET, rec.runner_id, fid)


async def engine_on(world: World, store: Store, db: CurioDb) -> Engine:
    engine = await world.engine(store)
    engine.cluster = engine.acts.cluster = db.reader()
    return engine


async def proving_fleet(world: World, store: Store, db: CurioDb, n: int, tasks: int = 2):
    """``n`` workers proving, each a curio machine in the cluster holding ``tasks`` PSProve
    tasks, each having told the engine its machine id (curio cli info)."""
    engine = await engine_on(world, store, db)
    ids = await rent_distinct(world, engine, n)
    machines: dict[int, int] = {}
    for iid in ids:
        for stage in ("setup", "paramfetch", "benchmark"):
            await engine.handle_worker_event(iid, parse_event({"stage": stage, "event": "start"}))
        rec = await store.instances.get(iid)
        await engine.handle_worker_event(iid, parse_event(result("pass", rec.min_rate + 5)))
        await engine.handle_worker_event(iid, parse_event({"stage": "prove", "event": "start"}))
        addr, name = ident(rec)
        mid = db.register(addr, name, world.clock.now())
        machines[iid] = mid
        report = {"machine_id": mid, "host_and_port": addr, "name": name}
        await engine.handle_worker_event(
            iid,
            parse_event(
                {"stage": "prove", "event": "progress", "detail": "curio", "curio": report}
            ),
        )
        db.claim(mid, [db.add_task("PSProve", world.clock.now()) for _ in range(tasks)])
        assert (await store.instances.get(iid)).state == "proving"
    return engine, ids, machines


def count_destroys(engine: Engine) -> dict[int, int]:
    counts: dict[int, int] = {}
    real = engine.client.destroy_instance

    async def counting(instance_id: int) -> bool:
        counts[instance_id] = counts.get(instance_id, 0) + 1
        return await real(instance_id)

    engine.client.destroy_instance = counting  # type: ignore[method-assign]
    return counts


def target(world: World, n: int) -> None:
    world.config = replace(world.config, fleet=replace(world.config.fleet, target_workers=n))


def owned_by(db: CurioDb, machine_ids: list[int]) -> list[tuple[Any, ...]]:
    return db.q("SELECT id, owner_id FROM harmony_task WHERE owner_id = ANY(%s)", (machine_ids,))


async def events(store: Store, kind: str) -> list[Any]:
    return [e for e in await store.events.all() if e.kind == kind]


async def test_a_lowered_target_drains_the_surplus_then_destroys_it(
    world: World, store: Store, curio_db: CurioDb
) -> None:
    db = curio_db
    target(world, 3)
    first, ids, machines = await proving_fleet(world, store, db, 3)
    await first.close()
    # restarted with a target of 1
    target(world, 1)
    engine = await engine_on(world, store, db)
    destroys = count_destroys(engine)
    await engine.step()
    drained = [r.vast_id for r in await store.instances.all() if r.drain_started_at is not None]
    assert len(drained) == 2 and all(iid in world.cloud.instances for iid in drained)
    kept = next(i for i in ids if i not in drained)
    for iid in drained:  # cordoned: no new work, the tasks it holds still its own
        assert db.unschedulable(machines[iid]) is True
        assert len(db.owned(machines[iid])) == 2
    assert db.unschedulable(machines[kept]) is False
    cordoned = await events(store, "cordoned")
    assert sorted(e.instance_id for e in cordoned) == sorted(drained)
    status = await store.status.get()
    assert status.workers == 1 and status.cluster["draining"] == 2
    # still draining: nothing is destroyed, nothing more is rented, nobody else is cordoned
    world.clock.advance(60)
    await engine.step()
    assert destroys == {} and len(await events(store, "cordoned")) == 2
    assert len(await store.instances.all(include_killed=False)) == 3
    # the first finishes what it holds (curio's recordCompletion), the second one of two
    a, b = drained
    addr_a = ident(await store.instances.get(a))[0]
    addr_b = ident(await store.instances.get(b))[0]
    for task in db.owned(machines[a]):
        db.complete(task, addr_a, True, "", world.clock.now())
    db.complete(db.owned(machines[b])[0], addr_b, True, "", world.clock.now())
    world.clock.advance(60)
    await engine.step()
    rec_a, rec_b = await store.instances.get(a), await store.instances.get(b)
    assert rec_a.killed and rec_a.kill_kind == "surplus" and "drained: " in rec_a.kill_reason
    assert not rec_b.killed and destroys == {a: 1}
    assert db.unschedulable(machines[a]) is None  # its row deleted with the release
    db.complete(db.owned(machines[b])[0], addr_b, True, "", world.clock.now())
    world.clock.advance(60)
    await engine.step()
    assert (await store.instances.get(b)).killed and destroys == {a: 1, b: 1}
    assert owned_by(db, [machines[a], machines[b]]) == []
    released = await events(store, "tasks_released")
    assert sorted(e.instance_id for e in released) == sorted(drained)
    assert all(e.detail["tasks"] == 0 for e in released)  # they held nothing when destroyed
    assert len(await events(store, "cordoned")) == 2  # one per drain
    assert [r.vast_id for r in await store.instances.all(include_killed=False)] == [kept]
    assert len(db.owned(machines[kept])) == 2 and db.unschedulable(machines[kept]) is False
    await engine.close()


async def test_a_surplus_worker_holding_no_task_is_destroyed_in_the_step_that_cordons_it(
    world: World, store: Store, curio_db: CurioDb
) -> None:
    db = curio_db
    target(world, 2)
    engine, ids, machines = await proving_fleet(world, store, db, 2, tasks=0)
    db.claim(machines[ids[0]], [db.add_task("bg:PShareRequest", world.clock.now())])
    target(world, 1)
    engine.config = world.config
    destroys = count_destroys(engine)
    await engine.step()
    [cordoned] = await events(store, "cordoned")
    rec = await store.instances.get(cordoned.instance_id)
    assert rec.killed and destroys == {rec.vast_id: 1}
    assert "(drained: its curio machine holds no task)" in rec.kill_reason
    assert rec.released_at is not None and db.unschedulable(machines[rec.vast_id]) is None
    # the singleton it may hold is background work, freed by the release
    assert db.q("SELECT owner_id FROM harmony_task WHERE name = 'bg:PShareRequest'") == [
        (None,) if rec.vast_id == ids[0] else (machines[ids[0]],)
    ]
    await engine.close()


async def test_a_drain_ends_at_its_deadline_and_the_tasks_it_held_go_back_to_the_queue(
    world: World, store: Store, curio_db: CurioDb
) -> None:
    db = curio_db
    target(world, 2)
    engine, _ids, machines = await proving_fleet(world, store, db, 2, tasks=3)
    target(world, 1)
    engine.config = world.config
    await engine.step()
    [rec] = [r for r in await store.instances.all() if r.drain_started_at is not None]
    held = db.owned(machines[rec.vast_id])
    assert rec.drain_deadline is not None and len(held) == 3
    # at its rate (bench min_rate + 5 p/h) three proofs need well under the market's 40 min
    assert rec.drain_deadline - rec.drain_started_at <= 40 * 60
    world.clock.set(rec.drain_deadline - 1)
    await engine.step()
    assert not (await store.instances.get(rec.vast_id)).killed
    world.clock.set(rec.drain_deadline + 1)
    await engine.step()
    done = await store.instances.get(rec.vast_id)
    assert done.killed and "drain deadline passed with 3 task(s) held" in done.kill_reason
    assert done.released_tasks == 3
    back = db.q("SELECT owner_id FROM harmony_task WHERE id = ANY(%s)", (held,))
    assert back == [(None,)] * 3  # waiting work again, at once: not after curio's 10 minutes
    [ev] = await events(store, "tasks_released")
    assert ev.instance_id == rec.vast_id and ev.detail["tasks"] == 3
    await engine.close()


async def test_a_worker_destroyed_without_a_drain_frees_its_tasks_in_the_same_step(
    world: World, store: Store, curio_db: CurioDb
) -> None:
    db = curio_db
    target(world, 0)  # manual mode: nothing is rented or shrunk
    engine, ids, machines = await proving_fleet(world, store, db, 2, tasks=2)
    a, b = ids
    # by hand: the operator's destroy does not wait
    held = db.owned(machines[a])
    await destroy(engine, a)
    assert (await store.instances.get(a)).killed and a not in world.cloud.instances
    assert db.q("SELECT owner_id FROM harmony_task WHERE id = ANY(%s)", (held,)) == [(None,)] * 2
    assert (await store.instances.get(a)).released_tasks == 2
    assert await events(store, "cordoned") == []
    # killed by the cloud: gone from Vast; the step that concludes it is gone (one miss is
    # evidence, not the truth) frees its tasks
    held_b = db.owned(machines[b])
    world.cloud.destroy(b)
    await world.until_gone(engine, b)
    rec_b = await store.instances.get(b)
    assert rec_b.killed and rec_b.kill_kind == "vanished" and rec_b.released_tasks == 2
    assert db.q("SELECT owner_id FROM harmony_task WHERE id = ANY(%s)", (held_b,)) == [(None,)] * 2
    # a vanish is concluded, not confirmed: the row stays (curio's 10-minute cleanup ends it),
    # so a worker listed again and adopted back still has its machine
    assert db.unschedulable(machines[b]) is False
    assert len(await events(store, "tasks_released")) == 2
    await engine.close()


async def test_a_release_the_cluster_refused_is_done_at_the_next_readable_step(
    world: World, store: Store, curio_db: CurioDb
) -> None:
    db = curio_db
    target(world, 0)
    engine, ids, machines = await proving_fleet(world, store, db, 1, tasks=2)
    [a] = ids
    held = db.owned(machines[a])
    good = engine.cluster
    engine.cluster = engine.acts.cluster = replace_port(good)
    await destroy(engine, a)
    assert (await store.instances.get(a)).released_at is None  # owed
    await engine.step()
    assert (await store.status.get()).cluster["state"] == "error"
    engine.cluster = engine.acts.cluster = good
    await engine.step()
    assert (await store.instances.get(a)).released_tasks == 2
    assert db.q("SELECT owner_id FROM harmony_task WHERE id = ANY(%s)", (held,)) == [(None,)] * 2
    assert [e.reason for e in await events(store, "cluster")][-1].endswith("readable again")
    await engine.close()


def replace_port(reader: Any) -> Any:
    from vastsim.postgres import _free_port
    from vastui.engine.cluster import ClusterReader

    return ClusterReader(
        reader.host, _free_port("127.0.0.1"), user=reader.user, dbname=reader.dbname,
        password="x",
    )  # fmt: skip


async def test_curio_failing_every_psprove_destroys_the_worker_with_curios_line(
    world: World, store: Store, curio_db: CurioDb
) -> None:
    from vastui.engine.production import Reading

    db = curio_db
    target(world, 0)
    engine, ids, machines = await proving_fleet(world, store, db, 1, tasks=0)
    [a] = ids
    rec = await store.instances.get(a)
    addr = ident(rec)[0]
    line = "failed to compute proof: proof check failed: invalid UpdateProof"
    for minute in range(4):
        world.clock.advance(60)
        # cuzk: every proof done, none failed
        reading = {"pid": 77, "alive": True, "status": {"counters": {
            "total_completed": 13 + minute, "total_failed": 0}, "uptime_secs": 4000 + 60 * minute,
            "pipeline": {"active": 1}}}  # fmt: skip
        await engine.handle_counters(a, Reading.parse(reading))
        task = db.add_task("PSProve", world.clock.now())
        db.claim(machines[a], [task])
        db.complete(task, addr, False, line, world.clock.now())
        await engine.step()
        if (await store.instances.get(a)).killed:
            break
    done = await store.instances.get(a)
    assert done.killed and done.kill_kind == "prove_curio_failing"
    assert line in done.kill_reason and "curio failed 3 of 3 PSProve tasks" in done.kill_reason
    assert done.error_lines == (f"error: {line}",)
    [strike] = await store.badlist.strikes(done.machine_id)
    assert strike.kind == "prove_curio_failing"
    await engine.close()


@pytest.mark.parametrize(
    "theirs",
    [
        "someone-else-{n}",  # the operator's own nodes
        "vastui-main.0badf1ee-r{n}",  # another database with this fleet's name: same runner ids
    ],
)
async def test_an_address_another_live_machine_holds_is_skipped_and_renting_goes_on(
    world: World, store: Store, curio_db: CurioDb, theirs: str
) -> None:
    db = curio_db
    target(world, 2)
    # another fleet's live machines on the addresses runners 1 and 2 would take (its ports
    # walked up into this fleet's), and a dead one's row on runner 4's
    others = [db.register(identity.curio_listen(n), theirs.format(n=n), world.clock.now())
              for n in (1, 2)]  # fmt: skip
    db.register(identity.curio_listen(4), theirs.format(n=4), world.clock.now() - 11 * 60)
    engine = await engine_on(world, store, db)
    await engine.step()
    status = await store.status.get()
    assert status.reason_kind != "identity_collision"
    [rec] = await store.instances.all()
    assert rec.runner_id == 3, "the next runner id whose address is free"
    [ev] = await events(store, "cluster")
    assert "runner id(s) 1-2 skipped, runner id 3 taken" in ev.reason
    assert f"live machine {others[0]}" in ev.reason and "listen_port_base" in ev.reason
    # still live: renting goes on past them, said once; a dead machine's row takes nothing
    world.clock.advance(60)
    for mid in others:
        db.heartbeat(mid, world.clock.now())
    await engine.step()
    assert sorted(r.runner_id for r in await store.instances.all()) == [3, 4]
    assert len(await events(store, "cluster")) == 1
    assert await store.badlist.strikes() == []
    await engine.close()


async def test_a_band_of_runner_ids_all_taken_holds_renting_for_one_step_only(
    world: World, store: Store, curio_db: CurioDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = curio_db
    monkeypatch.setattr(acts_module, "RUNNER_ID_BAND", 2)
    target(world, 1)
    for n in (1, 2, 3):  # another fleet's live machines, wider than one rent looks
        db.register(identity.curio_listen(n), f"someone-else-{n}", world.clock.now())
    engine = await engine_on(world, store, db)
    await engine.step()
    status = await store.status.get()
    assert status.reason_kind == "identity_collision" and await store.instances.all() == []
    assert "runner ids 1-2 skipped" in status.reason and "no machine is blamed" in status.reason
    world.clock.advance(30)
    await engine.step()
    [rec] = await store.instances.all()
    assert rec.runner_id == 4 and (await store.status.get()).reason_kind != "identity_collision"
    said = [e.reason for e in await events(store, "cluster")]
    assert len(said) == 2 and said[1].startswith("runner id(s) 3 skipped, runner id 4 taken")
    await engine.close()


async def test_an_engine_killed_mid_drain_finishes_it_once(
    world: World, store: Store, curio_db: CurioDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = curio_db
    target(world, 2)
    first, _ids, machines = await proving_fleet(world, store, db, 2, tasks=1)
    target(world, 1)
    first.config = world.config

    def die_at_cordon(name: str) -> None:
        if name == "drain.cordoned":
            raise Crash(name)

    monkeypatch.setattr(acts_module, "crash_point", die_at_cordon)
    with pytest.raises(Crash):
        await first.step()
    monkeypatch.setattr(acts_module, "crash_point", lambda name: None)
    [rec] = [r for r in await store.instances.all() if r.drain_started_at is not None]
    assert db.unschedulable(machines[rec.vast_id]) is True
    # a new engine on the same database (the first is gone without a word)
    engine = await engine_on(world, store, db)
    destroys = count_destroys(engine)
    world.clock.advance(30)
    await engine.step()
    assert destroys == {} and not (await store.instances.get(rec.vast_id)).killed
    addr = ident(rec)[0]
    for task in db.owned(machines[rec.vast_id]):
        db.complete(task, addr, True, "", world.clock.now())
    world.clock.advance(30)
    await engine.step()
    world.clock.advance(30)
    await engine.step()
    assert destroys == {rec.vast_id: 1}
    assert len(await events(store, "cordoned")) == 1
    assert [e.instance_id for e in await events(store, "destroy")] == [rec.vast_id]
    assert len(await events(store, "tasks_released")) == 1
    assert len(await store.instances.all(include_killed=False)) == 1
    await engine.close()


def down_reader(db: CurioDb, world: World, *, configured: bool = True) -> Any:
    """A reader of ``db`` while curio's database refuses connections (nothing listens at its
    port); ``come_back`` points it at the database again. Its backoff runs on the test's
    clock."""
    from vastsim.postgres import _free_port

    reader = db.reader()
    reader.configured = configured
    reader._monotonic = world.clock.now
    reader.port = _free_port("127.0.0.1")
    return reader


def come_back(reader: Any, db: CurioDb) -> None:
    reader.port = db.server.port


def alert_hook(world: World) -> tuple[Any, list[dict[str, Any]]]:
    import json

    import httpx

    from vastui.alerts import Notifier
    from vastui.engine.monitor import Monitor

    posts: list[dict[str, Any]] = []

    def hook(request: httpx.Request) -> httpx.Response:
        posts.append(json.loads(request.content))
        return httpx.Response(200)

    notifier = Notifier(webhook="https://hooks.example/x", transport=httpx.MockTransport(hook))
    return Monitor(world.config, notifier=notifier), posts


@pytest.mark.parametrize("configured", [True, False])
async def test_a_release_owed_across_a_restart_is_done_when_the_cluster_comes_back(
    world: World, store: Store, curio_db: CurioDb, configured: bool
) -> None:
    db = curio_db
    target(world, 0)
    first, ids, machines = await proving_fleet(world, store, db, 1, tasks=2)
    [a] = ids
    held = db.owned(machines[a])
    first.cluster = first.acts.cluster = down_reader(db, world)
    await destroy(first, a)  # while curio's database refuses: its release is owed
    assert (await store.instances.get(a)).released_at is None
    await first.close()
    # restarted while the database still refuses; configured or not, this fleet's workers
    # joined the cluster there: an outage, not "no cluster"
    engine = await world.engine(store)
    reader = down_reader(db, world, configured=configured)
    engine.cluster = engine.acts.cluster = reader
    engine.monitor, posts = alert_hook(world)
    for _ in range(24):  # 12 minutes: past [alerts] cluster_unreadable_min (10)
        await engine.step()
        world.clock.advance(30)
    cluster = (await store.status.get()).cluster
    assert reader.enabled and cluster["state"] == "error", cluster
    assert (await store.instances.get(a)).released_at is None
    come_back(reader, db)
    for _ in range(5):  # tried again every step (within its backoff)
        await engine.step()
        world.clock.advance(30)
        if (await store.instances.get(a)).released_at is not None:
            break
    rec = await store.instances.get(a)
    assert rec.released_tasks == 2
    assert db.q("SELECT owner_id FROM harmony_task WHERE id = ANY(%s)", (held,)) == [(None,)] * 2
    assert (await store.status.get()).cluster["state"] == "ok"
    said = [e.reason for e in await events(store, "cluster")]
    assert said[0].startswith("curio's cluster cannot be read") and "refused" in said[0]
    assert said[-1] == "curio's cluster is readable again"
    assert len(await events(store, "tasks_released")) == 1
    await engine.monitor.notifier.drain()
    await engine.monitor.notifier.close()
    assert [(p["alert"], p["state"]) for p in posts] == [
        ("cluster_unreadable", "firing"),
        ("cluster_unreadable", "resolved"),
    ]
    await engine.close()


async def test_a_configured_cluster_down_at_the_first_start_is_an_outage(
    world: World, store: Store, curio_db: CurioDb
) -> None:
    target(world, 1)
    engine = await world.engine(store)
    reader = down_reader(curio_db, world)  # named in the config: no workers yet
    engine.cluster = engine.acts.cluster = reader
    await engine.step()
    cluster = (await store.status.get()).cluster
    assert reader.enabled and cluster["state"] == "error" and "refused" in cluster["error"]
    assert len(await store.instances.all()) == 1  # renting goes on without it
    come_back(reader, curio_db)
    for _ in range(5):
        world.clock.advance(30)
        await engine.step()
        if (await store.status.get()).cluster["state"] == "ok":
            break
    assert (await store.status.get()).cluster["state"] == "ok"
    await engine.close()


async def test_no_cluster_configured_and_none_there_turns_the_reader_off_with_one_line(
    world: World, store: Store, curio_db: CurioDb, caplog: pytest.LogCaptureFixture
) -> None:
    target(world, 1)
    engine = await world.engine(store)
    reader = down_reader(curio_db, world, configured=False)  # the defaults only
    engine.cluster = engine.acts.cluster = reader
    caplog.set_level("INFO", logger="vastui.engine")
    for _ in range(3):
        await engine.step()
        world.clock.advance(30)
    off = [r for r in caplog.records if "the cluster reader is off" in r.getMessage()]
    assert len(off) == 1 and not reader.enabled
    assert (await store.status.get()).cluster["state"] == "off"
    assert len(await store.instances.all()) == 1  # renting goes on without it
    await engine.close()


async def test_an_outbid_worker_frees_its_tasks_when_vast_stops_it(
    world: World, store: Store, curio_db: CurioDb
) -> None:
    from tests.test_engine_bids import bids_on, rent_a_bid

    db = curio_db
    bids_on(world)
    engine, iid = await rent_a_bid(world, store)
    engine.cluster = engine.acts.cluster = db.reader()
    for stage in ("setup", "paramfetch", "benchmark"):
        await engine.handle_worker_event(iid, parse_event({"stage": stage, "event": "start"}))
    rec = await store.instances.get(iid)
    await engine.handle_worker_event(iid, parse_event(result("pass", rec.min_rate + 5)))
    await engine.handle_worker_event(iid, parse_event({"stage": "prove", "event": "start"}))
    addr, name = ident(rec)
    mid = db.register(addr, name, world.clock.now())
    report = {"machine_id": mid, "host_and_port": addr, "name": name}
    await engine.handle_worker_event(
        iid,
        parse_event({"stage": "prove", "event": "progress", "detail": "curio", "curio": report}),
    )
    held = db.claim(mid, [db.add_task("PSProve", world.clock.now()) for _ in range(2)])
    rec = await store.instances.get(iid)
    assert rec.state == "proving" and rec.bid_cap is not None
    world.cloud.instances[iid].bid_floor = rec.bid_cap * 2  # outbid past its cap
    world.clock.advance(30)
    await engine.step()
    rec = await store.instances.get(iid)
    assert rec.outbid_since is not None and not rec.killed
    # stopped by Vast, its curio with it: what it held can finish only elsewhere
    assert db.q("SELECT owner_id FROM harmony_task WHERE id = ANY(%s)", (held,)) == [(None,)] * 2
    assert db.unschedulable(mid) is False  # its row kept: it may win its bid back
    [ev] = await events(store, "tasks_released")
    assert ev.detail["tasks"] == 2 and ev.detail["outbid"] is True
    world.clock.advance(30)
    await engine.step()
    assert len(await events(store, "tasks_released")) == 1  # once per outbid
    # it never wins back: let go; its row goes with the destroy
    world.clock.advance(world.config.bids.keep_outbid_min * 60 + 60)
    await engine.step()
    rec = await store.instances.get(iid)
    assert rec.killed and rec.kill_kind == "outbid"
    assert db.unschedulable(mid) is None
    assert [e.detail["tasks"] for e in await events(store, "tasks_released")] == [2, 0]
    await engine.close()


async def test_the_engine_publishes_its_reading_with_the_orphans_of_this_fleet(
    world: World, store: Store, curio_db: CurioDb
) -> None:
    """Each step's reading of the cluster is published for readers without a connection of
    their own (the console's cluster pane): each worker's in its record, and, in the status,
    the totals and the rows of this fleet's node name that no record matches. A row of a
    worker not proving (not read this step) is its own, not an orphan; another node's is not
    this fleet's at all."""
    from vastui import cluster_report

    db = curio_db
    target(world, 2)
    engine, ids, machines = await proving_fleet(world, store, db, 2)
    waiting = await store.instances.get(ids[1])
    now = world.clock.now()
    # back to an earlier stage (a bid resumed): not read this step, its row still its own
    await store.instances.upsert(replace(waiting, state="benchmark"), now=now)
    fleet_id = fleet_id_of(waiting.label)
    orphan = db.register(identity.curio_listen(40), identity.node_name(FLEET, 40, fleet_id), now)
    db.register(identity.curio_listen(41), identity.node_name("other", 41, fleet_id), now)
    db.register("10.0.0.9:12300", "operator-node", now)
    await engine.step()
    status = await store.status.get()
    assert status is not None and status.cluster is not None
    published = status.cluster
    assert [o["machine_id"] for o in published["orphans"]] == [orphan]
    assert published["orphans_total"] == 1 and published["machines"] == 5
    report = cluster_report.published(await store.instances.all(), published, now)
    rows = {r["curio_machine_id"]: r for r in report["machines"]}
    assert set(rows) == {machines[ids[0]], orphan}
    mine = rows[machines[ids[0]]]
    assert (mine["instance"], mine["state"], mine["tasks_held"]) == (ids[0], "proving", 2)
    assert (
        mine["held_by_name"] == {"PSProve": 2}
        and mine["name"] == ident(await store.instances.get(ids[0]))[1]
    )
    assert rows[orphan]["state"] == "orphan" and rows[orphan]["instance"] is None
    assert report["reader"]["state"] == "ok" and report["totals"]["psprove_claimed"] == 4
    await engine.close()
