"""The engine against the simulated cloud: provisioning, the benchmark gate, every destroy
path, and the money invariants. Worker events are fed directly (the SSH path has its own
end-to-end tests); the cloud runs on a ManualClock shared with the engine."""

from __future__ import annotations

import logging
import math
import time
from dataclasses import replace
from pathlib import Path

import pytest

from tests.enginekit import PUBKEY, World, rent_one, result
from tests.helpers import deploy, destroy
from vastui.domain.reports import parse_event
from vastui.engine import policy
from vastui.engine.commands import COMMAND_TTL
from vastui.engine.engine import VANISH_MIN_AGE, VANISH_MISSES, EngineError
from vastui.engine.labels import is_vastui_label
from vastui.engine.ranking import from_record
from vastui.status import gather, render
from vastui.store import Store

# -- provisioning ------------------------------------------------------------------------


async def test_auto_provisioning_rents_viable_offers_up_to_limits(world: World, store: Store):
    world.config = replace(world.config, fleet=replace(world.config.fleet, target_workers=3))
    engine = await world.engine(store)
    for _ in range(6):
        await engine.step()
    live = await store.instances.all(include_killed=False)
    # At most max_concurrent_benchmarks (2) in the pipeline at once, even with target 3.
    assert len(live) == 2
    assert len(world.cloud.instances) == 2
    fleet_id = await store.meta.fleet_id()
    for rec in live:
        assert is_vastui_label(rec.label) and rec.label.startswith(f"vastui-main.{fleet_id}-")
        sim = world.cloud.instances[rec.vast_id]
        assert sim.env["MIN_RATE"] == f"{rec.min_rate:.1f}"
        assert rec.min_rate == world.config.min_rate_for(rec.dph_total)
        bench = policy.bench_timeout_s(rec.min_rate, world.config.fleet.bench_proofs)
        assert sim.env["BENCH_TIMEOUT"] == str(bench)
    assert len({r.machine_id for r in live}) == 2
    assert [e.kind for e in await store.events.all(kind="rent")] == ["rent", "rent"]
    assert PUBKEY.split()[1] in str(world.cloud.ssh_keys), "key put on the account before renting"
    await engine.close()


async def test_never_rents_bad_or_too_slow_machines(world: World, store: Store):
    engine = await world.engine(store)
    offers = await engine.refresh_offers(force=True)
    best = next(r for r in offers if r.viable)
    await store.badlist.add(best.offer.machine_id, "test ban")
    with pytest.raises(EngineError, match=f"machine {best.offer.machine_id} is on the bad list"):
        await deploy(engine, best.offer.id)
    # A machine known to be slow for its price is not rented automatically.
    slow = next(r for r in offers if r.viable and r.offer.machine_id != best.offer.machine_id)
    await store.perf.record_rate(slow.offer.machine_id, slow.offer.gpu_name,
                                 slow.offer.num_gpus, 1.0)  # fmt: skip
    world.config = replace(world.config, fleet=replace(world.config.fleet, target_workers=5))
    engine = await world.engine(store)
    for _ in range(4):
        await engine.step()
    rented = {r.machine_id for r in await store.instances.all()}
    assert best.offer.machine_id not in rented and slow.offer.machine_id not in rented
    await engine.close()


async def test_no_double_rent_of_one_offer(world: World, store: Store):
    engine = await world.engine(store)
    offer = next(r for r in await engine.refresh_offers(force=True) if r.viable).offer
    iid = await deploy(engine, offer.id)
    with pytest.raises(EngineError, match=f"already has live instance {iid}"):
        await deploy(engine, offer.id)
    assert len(world.cloud.instances) == 1
    await engine.close()


async def test_a_rent_in_flight_blocks_its_offer_and_its_machine(world: World, store: Store):
    engine = await world.engine(store)
    offer = next(r for r in await engine.refresh_offers(force=True) if r.viable).offer
    intent = await store.intents.create("rent", "auto", label="vastui-main-0123456789ab",
                                       offer_id=offer.id, machine_id=offer.machine_id)  # fmt: skip
    with pytest.raises(EngineError, match=f"in flight \\(intent {intent.id}\\); not renting twice"):
        await deploy(engine, offer.id)
    assert world.cloud.instances == {}
    await engine.close()


async def _proved_well(world: World, store: Store) -> tuple:
    """A worker rented by hand that passed its benchmark well above its rate and proves."""
    engine, iid = await rent_one(world, store)
    rec = await store.instances.get(iid)
    for stage in ("setup", "paramfetch", "benchmark"):
        await engine.handle_worker_event(iid, parse_event({"stage": stage, "event": "start"}))
    await engine.handle_worker_event(iid, parse_event(result("pass", rec.min_rate * 1.5)))
    await engine.handle_worker_event(iid, parse_event({"stage": "prove", "event": "start"}))
    assert (await store.instances.get(iid)).state == "proving"
    return engine, await store.instances.get(iid)


def _only_machine(world: World, machine_id: int, target: int) -> None:
    """Offers of this one machine only, so an automatic rent can only be a re-rent."""
    fleet = replace(world.config.fleet, target_workers=target)
    offers = replace(
        world.config.offers, filter=f"{world.config.offers.filter} machine_id={machine_id}"
    )
    world.config = replace(world.config, fleet=fleet, offers=offers)


async def test_a_machine_that_proved_well_is_rented_again_by_hand_and_automatically(world, store):
    engine, rec = await _proved_well(world, store)
    # Destroyed for a reason that is not the machine's: the same offer may be rented again.
    await destroy(engine, rec.vast_id, "operator needed the budget")
    again = await deploy(engine, rec.offer_id)
    assert again is not None and again != rec.vast_id
    assert (await store.instances.get(again)).machine_id == rec.machine_id
    # Ended outside vastui (vanished): once known gone, the machine is rented back.
    async with world.client() as client:
        await client.destroy_instance(again)
    _only_machine(world, rec.machine_id, target=1)
    auto = await world.engine(store)
    await world.until_gone(auto, again)
    await auto.step()
    assert (await store.instances.get(again)).kill_kind == "vanished"
    [live] = await store.instances.all(include_killed=False)
    assert live.machine_id == rec.machine_id and live.vast_id in world.cloud.instances
    rents = await store.intents.all(kind="rent")
    assert [i.status for i in rents] == ["done", "done", "done"]
    assert len({i.label for i in rents}) == 3, "one intent, one label, one instance each"
    # The very offer rented before: an offer id no longer keeps a machine off.
    assert {(i.offer_id, i.machine_id) for i in rents} == {(rec.offer_id, rec.machine_id)}
    # Chosen by its measured record, as the automatic rent's reason says.
    assert rents[-1].reason.startswith("auto: 0/1 workers; offer ")
    assert rents[-1].reason.endswith("(measured)")
    await engine.close()
    await auto.close()


async def test_a_banned_machine_is_not_rented_again(world, store):
    engine, rec = await _proved_well(world, store)
    await engine.handle_worker_event(
        rec.vast_id,
        parse_event({"stage": "prove", "event": "fail", "reason": "cuzk-daemon exited (status 1)",
         "error_tail": ["CUDA error 700: an illegal memory access was encountered"]}),
    )  # fmt: skip
    assert (await store.instances.get(rec.vast_id)).killed
    assert rec.machine_id in await store.badlist.machine_ids(now=world.clock.now())
    with pytest.raises(EngineError, match=f"machine {rec.machine_id} is on the bad list"):
        await deploy(engine, rec.offer_id)
    _only_machine(world, rec.machine_id, target=1)
    auto = await world.engine(store)
    await auto.step()
    assert await store.instances.all(include_killed=False) == []
    status = await store.status.get()
    assert status.reason_kind == "no_viable_offer" and status.best is None
    await engine.close()
    await auto.close()


def _fleet(world: World, **kw) -> None:
    world.config = replace(world.config, fleet=replace(world.config.fleet, **kw))


async def _to_proving(engine, iid: int) -> None:
    for stage in ("setup", "paramfetch", "benchmark"):
        await engine.handle_worker_event(iid, parse_event({"stage": stage, "event": "start"}))
    rec = await engine.store.instances.get(iid)
    await engine.handle_worker_event(iid, parse_event(result("pass", rec.min_rate + 5)))
    await engine.handle_worker_event(iid, parse_event({"stage": "prove", "event": "start"}))


async def test_the_status_says_target_workers_and_why_and_follows_the_cause(world, store):
    _fleet(world, target_workers=3)  # max_concurrent_benchmarks = 2
    engine = await world.engine(store)
    await engine.step()
    status = await store.status.get()
    assert (status.target, status.workers, status.reason_kind) == (3, 1, None)  # renting
    assert status.by_stage == {"loading": 1} and status.updated_at == world.clock.now()
    await engine.step()
    cap = await store.status.get()
    assert (cap.workers, cap.reason_kind, cap.by_stage) == (
        2,
        "bench_concurrency_cap",
        {"loading": 2},
    )
    assert cap.reason.startswith("benchmark concurrency cap: 2 worker(s) not yet proving")
    assert engine.status == cap
    world.clock.advance(30)
    await engine.step()
    lasting = await store.status.get()
    assert lasting.reason == cap.reason and lasting.reason_since == cap.reason_since
    assert lasting.updated_at == cap.updated_at + 30

    # Vast fails to list: nothing is decided on a stale view, and the status says why.
    world.cloud.faults.script("list", ["503"] * 40)
    await engine.step()
    world.cloud.faults.clear()
    error = await store.status.get()
    assert error.reason_kind == "api_error" and "503" in error.reason
    assert engine.last_error is not None and engine.last_error in error.reason

    # Both workers prove: the pipeline frees up, the third is rented, the target is reached.
    for rec in await store.instances.all():
        await _to_proving(engine, rec.vast_id)
    await engine.step()
    done = await store.status.get()
    assert (done.workers, done.reason_kind, done.reason) == (
        3,
        "at_target",
        "at target: 3/3 workers",
    )
    assert done.by_stage == {"proving": 2, "loading": 1}
    assert len(world.cloud.instances) == 3
    await engine.close()

    # A maximum $/proof that no offer reaches: the best candidate and its numbers.
    _fleet(world, target_workers=4, max_cost_per_proof=0.0005)
    engine = await world.engine(store)
    await engine.step()
    none = await store.status.get()
    assert none.reason_kind == "no_viable_offer" and none.best is not None
    best = none.best
    assert best["expected_cost_per_proof"] > best["max_cost_per_proof"] == 0.0005
    assert none.reason.startswith(f"no viable offer: best {best['offer_id']} ")
    assert none.reason.endswith("> max $0.0005")
    busy = {r.machine_id for r in await store.instances.all(include_killed=False)}
    assert best["machine_id"] not in busy
    await engine.close()

    # The fleet $/h cap.
    in_use = sum(r.dph_total for r in await store.instances.all(include_killed=False))
    _fleet(world, target_workers=4, max_cost_per_proof=0.008, max_total_dph=in_use + 0.01)
    engine = await world.engine(store)
    await engine.step()
    over = await store.status.get()
    assert over.reason_kind == "fleet_dph_cap" and over.reason.startswith("fleet $/h cap: $")
    assert len(world.cloud.instances) == 3
    await engine.close()

    _fleet(world, target_workers=0)
    engine = await world.engine(store)
    await engine.step()
    assert (await store.status.get()).reason_kind == "target_zero"
    await engine.close()


async def test_a_rent_that_fails_before_its_create_is_the_reason(world, store):
    _fleet(world, target_workers=1)
    engine = await world.engine(store)
    world.cloud.faults.script("ssh", ["503"] * 40)  # the key cannot be put on the account
    await engine.step()
    world.cloud.faults.clear()
    status = await store.status.get()
    assert status.reason_kind == "api_error" and status.reason.startswith("error this cycle: rent:")
    assert world.cloud.instances == {} and await store.intents.all() == []
    await engine.step()
    assert (await store.status.get()).reason_kind == "at_target"
    await engine.close()


async def test_a_dry_run_logs_each_would_rent_with_its_reason(world, store, caplog):
    _fleet(world, target_workers=1)
    engine = await world.engine(store, dry_run=True)
    with caplog.at_level(logging.INFO, logger="vastui.engine"):
        await engine.step()
        await engine.step()
    would = [r.getMessage() for r in caplog.records if "would rent" in r.getMessage()]
    assert len(would) == 1 and would[0].startswith("dry-run: would rent offer ")
    assert ": auto: 0/1 workers; offer " in would[0]
    [intent] = await store.intents.all(kind="rent")
    assert intent.status == "dry_run" and would[0].endswith(intent.reason)
    status = await store.status.get()
    assert status.dry_run and status.reason_kind == "dry_run" and status.workers == 0
    assert "1 would-be rent(s) stand in" in status.reason
    assert world.cloud.instances == {}
    await engine.close()


@pytest.mark.parametrize("fault", ["lost", "lost-timeout"])
async def test_lost_create_answer_yields_one_instance_and_one_record(world, store, fault):
    world.cloud.faults.script("create", [fault])
    world.cloud.faults.lost_delay = 5.0
    engine = await world.engine(store)
    engine.client.timeout = 0.3
    offer = next(r for r in await engine.refresh_offers(force=True) if r.viable).offer
    iid = await deploy(engine, offer.id)
    await engine.step()
    await engine.step()
    assert list(world.cloud.instances) == [iid]
    assert [r.vast_id for r in await store.instances.all()] == [iid]
    [intent] = await store.intents.all(kind="rent")
    assert intent.status == "done" and intent.instance_id == iid
    await engine.close()


async def test_pending_rent_intent_is_resolved_by_label_after_a_crash(world, store):
    """Crash after Vast created the instance, before vastui recorded it."""
    engine = await world.engine(store)
    offer = next(r for r in await engine.refresh_offers(force=True) if r.viable).offer
    label = "vastui-main-0123456789ab"
    await store.intents.create("rent", "auto", label=label, offer_id=offer.id,
                              machine_id=offer.machine_id, detail={"offer": offer.to_json(),
                              "min_rate": 29.0, "image": "img"})  # fmt: skip
    async with world.client() as client:
        created = await client.create_instance(offer.id, label=label, image="img", disk_gb=250)
    await engine.step()
    rec = await store.instances.get(created.instance_id)
    assert rec is not None and rec.label == label and rec.machine_id == offer.machine_id
    assert (await store.intents.all(kind="rent"))[0].status == "done"
    assert len(world.cloud.instances) == 1
    await engine.close()


async def test_a_lost_database_adopts_nothing_it_never_intended(world: World, tmp_path: Path):
    """Issue 17: a database that never intended an instance does not own it, whatever its
    label: not adopted, not counted against the target, never destroyed as surplus; it is
    shown apart, with one warning naming the fleet its label carries."""
    async with await Store.open(tmp_path / "a.db") as first:
        engine, iid = await rent_one(world, first)
        owner = f"main.{await first.meta.fleet_id()}"
        await engine.close()
    async with await Store.open(tmp_path / "b.db") as fresh:
        assert await fresh.meta.fleet_id() != owner.split(".")[1], "each database its own identity"
        world.config = replace(world.config, fleet=replace(world.config.fleet, target_workers=1))
        engine = await world.engine(fresh)
        for _ in range(4):
            world.clock.advance(120)
            await engine.step()
        assert await fresh.instances.get(iid) is None, "not adopted"
        assert iid in world.cloud.instances, "not destroyed"
        assert await fresh.events.all(kind="adopt") == []
        assert [f.vast_id for f in await fresh.foreign.all()] == [iid]
        assert (await fresh.foreign.all())[0].owner == owner
        warned = await fresh.events.all(kind="foreign")
        assert len(warned) == 1 and owner in warned[0].reason
        assert "different curio.listen_port_base ranges" in warned[0].reason  # one fleet name
        # it rents its own target (1) as if the other's instance were not there
        assert len(await fresh.instances.all(include_killed=False)) == 1
        assert len(world.cloud.instances) == 2
        await engine.close()


async def test_a_row_lost_but_intended_is_adopted(world: World, store: Store):
    """An instance this database intended (its rent intent is kept) whose row is gone, as
    after a crash between the create and its record, is adopted, not left running unseen."""
    engine, iid = await rent_one(world, store)
    await engine.close()
    async with store.transaction() as conn:
        await conn.execute("DELETE FROM instances WHERE vast_id = ?", (iid,))
    engine = await world.engine(store)
    await engine.step()
    rec = await store.instances.get(iid)
    assert rec is not None and rec.state in ("loading", "setup")
    assert [e.kind for e in await store.events.all(kind="adopt")] == ["adopt"]
    assert await store.foreign.all() == []
    assert len(world.cloud.instances) == 1, "adopted, not re-rented"
    await engine.close()


# -- the benchmark gate and every destroy path -------------------------------------------


async def test_benchmark_pass_goes_proving_and_records_perf(world, store):
    engine, iid = await rent_one(world, store)
    rec = await store.instances.get(iid)
    for stage in ("setup", "paramfetch", "benchmark"):
        await engine.handle_worker_event(iid, parse_event({"stage": stage, "event": "start"}))
    await engine.handle_worker_event(iid, parse_event(result("pass", rec.min_rate + 5)))
    await engine.handle_worker_event(iid, parse_event({"stage": "prove", "event": "start"}))
    rec = await store.instances.get(iid)
    assert rec.state == "proving" and rec.bench_rate == rec.min_rate + 5
    [perf] = await store.perf.of_machine(rec.machine_id)
    assert perf.last_rate == rec.min_rate + 5 and perf.machine_id == rec.machine_id
    assert iid in world.cloud.instances
    await engine.close()


@pytest.mark.parametrize(
    ("outcome", "kind", "banned"),
    [
        ("below_min", "bench_below_min", False),
        ("aborted_early", "bench_aborted_early", False),
        ("timeout", "bench_timeout", False),
        ("error", "bench_error", True),
    ],
)
async def test_benchmark_failures_destroy_with_typed_reason(world, store, outcome, kind, banned):
    engine, iid = await rent_one(world, store)
    rec = await store.instances.get(iid)
    tail = ["2026-03-13T17:19:40Z ERROR cuzk_core::engine: CUDA error 700: illegal memory access"]
    # Every outcome comes with a rate, as an older image sent one beside error, timeout and
    # aborted_early (issue 17 item 5): only below_min's is the machine's.
    rate = rec.min_rate - 3
    await engine.handle_worker_event(
        iid, parse_event(result(outcome, rate, tail if banned else None))
    )
    rec = await store.instances.get(iid)
    assert rec.state == "killed" and rec.kill_kind == kind and rec.failed_stage == "benchmark"
    assert rec.bench_outcome == outcome
    assert iid not in world.cloud.instances
    [destroy] = await store.events.all(kind="destroy")
    assert destroy.instance_id == iid and destroy.reason == rec.kill_reason
    bad = await store.badlist.all(now=world.clock.now())
    if banned:
        assert [b.machine_id for b in bad] == [rec.machine_id]
        assert bad[0].source == "automatic" and bad[0].host_id == rec.host_id
        assert bad[0].machine_id != bad[0].host_id
        assert "CUDA error 700" in rec.kill_reason and rec.error_lines == tuple(tail)
    else:
        assert bad == []
    perf = await store.perf.of_machine(rec.machine_id)
    if outcome == "below_min":
        assert [p.last_rate for p in perf] == [rate]
    else:
        assert perf == [], "the machine's record learns no rate from a failed benchmark"
    # Without a measured rate to keep it off (a timeout, an early abort), a machine that is not
    # banned is struck: an offer id no longer does.
    strikes = [x.kind for x in await store.badlist.strikes(rec.machine_id)]
    assert strikes == ([kind] if outcome in ("timeout", "aborted_early") else [])
    await engine.close()


async def test_pass_below_our_gate_is_still_killed(world, store):
    engine, iid = await rent_one(world, store)
    rec = await store.instances.get(iid)
    await engine.handle_worker_event(iid, parse_event(result("pass", rec.min_rate - 1)))
    assert (await store.instances.get(iid)).kill_kind == "bench_below_min"
    await engine.close()


async def test_a_machine_that_cannot_hold_the_plan_is_banned_at_setup(world, store):
    engine, iid = await rent_one(world, store)
    reason = ("memory plan needs 163 GiB (PoRep SRS 45 + PCE 26, Snap SRS 33 + PCE 17, PCE "
              "build 14, 2 partitions x 14); the budget is 134 GiB (container limit 139 GiB - "
              "margin 5 GiB)")  # fmt: skip
    await engine.handle_worker_event(
        iid,
        parse_event({"stage": "setup", "event": "fail", "reason": reason, "error_tail": [reason]}),
    )
    rec = await store.instances.get(iid)
    assert rec.kill_kind == "setup_machine" and rec.kill_reason == f"setup failed: {reason}"
    [bad] = await store.badlist.all(now=world.clock.now())
    assert bad.machine_id == rec.machine_id and bad.reason == f"setup: {reason}"
    await engine.close()


async def test_a_tunnel_down_is_the_controllers_and_pauses_renting(world, store):
    """The worker benchmarks, then waits for the tunnel: the engine records it, says so in its
    status, rents nothing meanwhile, strikes nothing, and after deadlines.tunnel_min destroys
    the worker with kind tunnel_down (no ban, no strike)."""
    world.config = replace(world.config, fleet=replace(world.config.fleet, target_workers=3))
    engine, iid = await rent_one(world, store)
    await engine.handle_worker_event(iid, parse_event({"stage": "prove", "event": "start"}))
    down = {"stage": "prove", "event": "progress", "tunnel": "down",
            "detail": "waiting for the controller's tunnel: lotus api 127.0.0.1:1234: refused",
            "down": ["lotus api 127.0.0.1:1234: curl: (7) Failed to connect",
                     "curio database (YSQL) 127.0.0.1:5433: connection refused"]}  # fmt: skip
    await engine.handle_worker_event(iid, parse_event(down))
    rec = await store.instances.get(iid)
    assert rec.tunnel_down_since == world.clock.now()
    assert rec.tunnel_detail == (
        "lotus api 127.0.0.1:1234: curl: (7) Failed to connect; curio database (YSQL) "
        "127.0.0.1:5433: connection refused"
    )
    live = len(await store.instances.all(include_killed=False))
    await engine.step()
    status = await store.status.get()
    assert status.reason_kind == "tunnel_down"
    assert status.reason.startswith(f"the controller's tunnel is down (instance {iid}: lotus api")
    assert len(await store.instances.all(include_killed=False)) == live, "nothing rented"
    [event] = await store.events.all(kind="tunnel")
    assert event.reason.startswith("tunnel down: lotus api") and event.instance_id == iid
    # up again: recorded, and renting resumes
    await engine.handle_worker_event(
        iid, parse_event({"stage": "prove", "event": "progress", "tunnel": "up"})
    )
    assert (await store.instances.get(iid)).tunnel_down_since is None
    # down for longer than the deadline: destroyed, unblamed
    await engine.handle_worker_event(iid, parse_event(down))
    world.clock.advance(world.config.deadlines.tunnel_min * 60 + 31)
    await engine.step()
    rec = await store.instances.get(iid)
    assert rec.kill_kind == "tunnel_down" and rec.kill_reason.startswith(
        "the controller's tunnel was down for over 60 min (lotus api"
    )
    assert await store.badlist.all(now=world.clock.now()) == []
    assert await store.badlist.strikes(rec.machine_id) == []
    await engine.close()


async def test_every_rent_gets_its_own_runner_identity(world, store):
    """The original's runner_id: unique and monotonic, in the rent's intent and its env."""
    world.config = replace(world.config, fleet=replace(world.config.fleet, target_workers=2))
    engine = await world.engine(store)
    for _ in range(4):
        await engine.step()
    live = await store.instances.all(include_killed=False)
    assert sorted(r.runner_id for r in live) == [1, 2]
    for rec in live:
        env = world.cloud.instance(rec.vast_id).env
        assert env["VASTUI_RUNNER_ID"] == str(rec.runner_id)
        assert env["CURIO_LISTEN"] == f"127.0.0.1:{12400 + rec.runner_id}"
        # the database's fleet id (in its labels) tells its machines from another's
        fid = rec.label.split(".")[1].split("-")[0]
        assert env["CURIO_NODE_NAME"] == f"vastui-main.{fid}-r{rec.runner_id}"
        assert env["BENCH_SNAP_PROOFS"] == "2" and env["PROVE_DEADLINE_MARGIN"] == "0.2"
    intents = await store.intents.all(kind="rent")
    assert sorted(i.detail["runner_id"] for i in intents) == [1, 2]
    await engine.close()


async def test_an_adopted_instance_keeps_the_identity_it_was_created_with(world, store):
    """A worker's curio identity was fixed in its environment at create: adoption (of an
    instance this database intended, whose row was lost) records it, and later rents are
    given ids above it."""
    engine, iid = await rent_one(world, store)
    rec = await store.instances.get(iid)
    env = dict(world.cloud.instance(iid).env)
    await engine.close()
    async with store.transaction() as conn:
        await conn.execute("DELETE FROM instances WHERE vast_id = ?", (iid,))
        await conn.execute("UPDATE counters SET value = 0 WHERE key = 'runner_id_seq'")
    adopter = await world.engine(store)
    try:
        await adopter.step()
        adopted = await store.instances.get(iid)
        assert adopted is not None and adopted.runner_id == rec.runner_id == int(
            env["VASTUI_RUNNER_ID"]
        )
        assert await store.instances.next_runner_id() == rec.runner_id + 1
    finally:
        await adopter.close()


@pytest.mark.parametrize(
    ("stage", "kind"), [("paramfetch", "deadline_paramfetch"), ("benchmark", "deadline_benchmark")]
)
async def test_stage_deadlines(world, store, stage, kind):
    engine, iid = await rent_one(world, store)
    await engine.handle_worker_event(iid, parse_event({"stage": stage, "event": "start"}))
    rec = await store.instances.get(iid)
    if stage == "benchmark":  # the benchmark's deadline follows the worker's min_rate
        assert rec.min_rate is not None
        minutes = math.ceil(policy.bench_deadline_s(rec, engine.config) / 60) + 1
    else:  # paramfetch_min, or the offer's link's own time for 135 GiB if longer
        limit = max(
            engine.config.deadlines.paramfetch_min * 60,
            (rec.paramfetch_timeout or policy.PARAMFETCH_FLOOR_S) + policy.BENCH_DEADLINE_GRACE_S,
        )
        minutes = math.ceil(limit / 60) + 1
    world.clock.advance((minutes - 2) * 60)
    await engine.step()
    assert (await store.instances.get(iid)).state == stage
    world.clock.advance(3 * 60)
    await engine.step()
    rec = await store.instances.get(iid)
    assert rec.kill_kind == kind and rec.failed_stage == stage
    assert iid not in world.cloud.instances
    assert [x.kind for x in await store.badlist.strikes(rec.machine_id)] == [kind]
    await engine.close()


async def test_no_first_report_deadline(world, store):
    engine, iid = await rent_one(world, store)
    world.clock.advance(16 * 60)
    await engine.step()
    assert (await store.instances.get(iid)).kill_kind == "deadline_first_report"
    assert await store.badlist.strikes() == [], "no report may be our fault: no mark on the machine"
    await engine.close()


async def test_stuck_image_load_is_destroyed_and_banned(world, store):
    engine = await world.engine(store)
    offer = next(r for r in await engine.refresh_offers(force=True) if r.viable).offer
    iid = await deploy(engine, offer.id)
    world.cloud.force_status(iid, "loading")
    world.clock.advance(31 * 60)
    await engine.step()
    rec = await store.instances.get(iid)
    assert rec.kill_kind == "deadline_loading"
    assert [b.machine_id for b in await store.badlist.all(now=world.clock.now())] == [
        offer.machine_id
    ]
    await engine.close()


@pytest.mark.parametrize("status", ["exited", "offline"])
async def test_exited_or_offline_past_grace(world, store, status):
    engine, iid = await rent_one(world, store)
    world.cloud.force_status(iid, status)
    await engine.step()
    assert not (await store.instances.get(iid)).killed, "within the grace period"
    world.clock.advance(6 * 60)
    await engine.step()
    rec = await store.instances.get(iid)
    assert rec.kill_kind == status and iid not in world.cloud.instances
    assert [x.kind for x in await store.badlist.strikes(rec.machine_id)] == [status]
    await engine.close()


async def test_ignoring_a_machine_destroys_its_instances(world, store):
    engine, iid = await rent_one(world, store)
    rec = await store.instances.get(iid)
    await store.commands.submit("ignore", {"machine_id": rec.machine_id, "reason": "flaky"})
    await engine.step()
    rec = await store.instances.get(iid)
    assert rec.kill_kind == "bad_machine" and iid not in world.cloud.instances
    await engine.close()


async def test_ignoring_an_offered_machine_records_its_host_and_gpu(world, store):
    """From the offers pane: a machine never rented. Its bad-list entry names its host and GPU
    as the market lists them (they read "-" before: issue 31 item 6)."""
    engine, _ = await rent_one(world, store)
    rented = {r.machine_id for r in await store.instances.all()}
    offer = next(r.offer for r in engine.ranked_offers() if r.offer.machine_id not in rented)
    assert offer.host_id is not None and offer.gpu_name
    await store.commands.submit("ignore", {"machine_id": offer.machine_id, "reason": "slow"})
    await engine.step()
    entry = await store.badlist.get(offer.machine_id)
    assert entry is not None and (entry.host_id, entry.gpu_name) == (offer.host_id, offer.gpu_name)
    await engine.close()


async def test_vanished_instance_is_marked_killed(world, store):
    engine, iid = await rent_one(world, store)
    async with world.client() as client:
        await client.destroy_instance(iid)
    steps = await world.until_gone(engine, iid)
    assert steps >= VANISH_MISSES, "one miss is evidence, not the truth"
    rec = await store.instances.get(iid)
    assert rec.kill_kind == "vanished" and rec.kill_reason == "instance disappeared from vast"
    await engine.close()


async def test_an_instance_missing_from_vasts_answers_keeps_its_slot(world, store):
    """Lists that lag (and a GET answering null) for less than VANISH_MIN_AGE: the instance is
    unseen, not gone; its slot is not rented again; listed again, it goes on."""
    first, iid = await rent_one(world, store)
    await first.close()
    _only_machine(world, (await store.instances.get(iid)).machine_id, target=1)
    engine = await world.engine(store)  # a target of 1: the slot it holds
    world.cloud.list_lag_s = 1e9  # every instance missing from every answer
    for _ in range(2 * VANISH_MISSES):
        world.clock.advance(VANISH_MIN_AGE / (2 * VANISH_MISSES + 1))
        await engine.step()
        assert not (await store.instances.get(iid)).killed
    world.cloud.list_lag_s = 0.0
    world.clock.advance(30)
    await engine.step()
    assert not (await store.instances.get(iid)).killed and iid in world.cloud.instances
    assert len(await store.intents.all(kind="rent")) == 1, "its slot was never rented again"
    assert await store.events.all(kind="kill") == []
    await engine.close()


async def test_a_vanished_instance_listed_again_is_adopted_back_not_destroyed(world, store):
    """Recorded vanished after the misses added up (no destroy was ever sent), then listed
    again: back in its stage, an adopt event, never destroyed as unknown or killed."""
    engine, iid = await rent_one(world, store)
    stage = (await store.instances.get(iid)).state
    world.cloud.list_lag_s = 1e9
    await world.until_gone(engine, iid)
    assert (await store.instances.get(iid)).kill_kind == "vanished"
    world.cloud.list_lag_s = 0.0
    world.clock.advance(30)
    await engine.step()
    rec = await store.instances.get(iid)
    assert not rec.killed and rec.state == stage and rec.kill_kind is None
    assert iid in world.cloud.instances, "not destroyed"
    adopted = [e.reason for e in await store.events.all(kind="adopt")]
    assert any("listed again after it was recorded vanished" in r for r in adopted)
    await engine.close()


# -- safety ------------------------------------------------------------------------------


async def test_never_destroys_an_instance_without_vastui_label(world, store):
    async with world.client() as client:
        offer = (await client.search_offers("num_gpus=1", order="dph")).offers[0]
        theirs = await client.create_instance(offer.id, label="someone-elses-box", image="i",
                                              disk_gb=10)  # fmt: skip
    engine = await world.engine(store)
    await store.badlist.add(offer.machine_id, "ban the machine under their box")
    for _ in range(3):
        world.clock.advance(600)
        await engine.step()
    assert theirs.instance_id in world.cloud.instances
    assert await store.instances.get(theirs.instance_id) is None, "not adopted either"
    with pytest.raises(EngineError, match=f"instance {theirs.instance_id} is not one of vastui's"):
        await destroy(engine, theirs.instance_id)
    assert await store.events.all(kind="destroy") == []
    await engine.close()


async def test_other_fleets_instances_are_not_adopted(world, store):
    async with world.client() as client:
        offer = (await client.search_offers("num_gpus=1", order="dph")).offers[0]
        await client.create_instance(offer.id, label="vastui-other-0123456789ab", image="i",
                                     disk_gb=10)  # fmt: skip
    engine = await world.engine(store)
    await engine.step()
    assert await store.instances.all() == []
    await engine.close()


async def test_dry_run_decides_and_records_but_touches_nothing(world, tmp_path):
    # A real instance first, so the dry-run engine has something it would destroy.
    async with await Store.open(tmp_path / "d.db") as store:
        engine, iid = await rent_one(world, store)
        await engine.close()
        world.config = replace(world.config, fleet=replace(world.config.fleet, target_workers=4))
        dry = await world.engine(store, dry_run=True)
        before = set(world.cloud.instances)
        await store.badlist.add((await store.instances.get(iid)).machine_id, "would kill")
        for _ in range(3):
            await dry.step()
        assert set(world.cloud.instances) == before, "dry-run rents and destroys nothing"
        assert not (await store.instances.get(iid)).killed
        destroys = await store.events.all(kind="destroy")
        assert len(destroys) == 1 and destroys[0].reason.startswith("[dry-run]")
        rents = [e for e in await store.events.all(kind="rent") if "[dry-run]" in e.reason]
        real_label = (await store.instances.get(iid)).label
        dry_intents = [i for i in await store.intents.all(kind="rent") if i.label != real_label]
        # One live worker in its pipeline + one would-be rent = max_concurrent_benchmarks (2):
        # decided once, not again at every step.
        assert len(rents) == 1 and len(dry_intents) == 1
        assert all(i.status == "dry_run" for i in dry_intents)
        await dry.close()


async def test_console_commands_go_through_the_store(world, store):
    engine = await world.engine(store)
    offer = next(r for r in await engine.refresh_offers(force=True) if r.viable).offer
    deploy = await store.commands.submit("deploy", {"offer_id": offer.id})
    await engine.step()
    cmd = await store.commands.get(deploy)
    assert cmd.status == "done" and "rented instance" in cmd.result
    [rec] = await store.instances.all()
    destroy = await store.commands.submit("destroy", {"instance_id": rec.vast_id})
    unknown = await store.commands.submit("unignore", {"machine_id": 424242})
    await engine.step()
    assert (await store.commands.get(destroy)).status == "done"
    assert (await store.instances.get(rec.vast_id)).kill_kind == "manual"
    failed = await store.commands.get(unknown)
    assert failed.status == "failed" and "not on the bad list" in failed.result
    await engine.close()


async def test_a_command_sent_while_no_engine_ran_expires(world, store):
    """A rent confirmed minutes ago, to an engine that was gone, is not carried out later."""
    engine = await world.engine(store)
    offer = next(r for r in await engine.refresh_offers(force=True) if r.viable).offer
    stale = await store.commands.submit(
        "deploy", {"offer_id": offer.id}, now=time.time() - COMMAND_TTL - 5
    )
    fresh = await store.commands.submit("unignore", {"machine_id": 424242})
    await engine.step()
    cmd = await store.commands.get(stale)
    assert cmd.status == "failed" and cmd.result.startswith("expired: sent ")
    assert await store.instances.all() == [] and await store.intents.all(kind="rent") == []
    assert (await store.commands.get(fresh)).status == "failed"  # ran: "not on the bad list"
    await engine.close()


async def test_the_engine_publishes_its_ranked_offers(world, store):
    engine = await world.engine(store)
    ranked = await engine.refresh_offers(force=True)
    published = await store.status.get_offers()
    assert published is not None
    filter_text, rows, _at = published
    assert filter_text == engine.config.offers.filter
    back = [from_record(r) for r in rows]
    assert [b.offer.id for b in back if b] == [r.offer.id for r in ranked[: len(rows)]]
    assert back[0] == ranked[0] or back[0].to_json() == ranked[0].to_json()
    assert from_record({"raw": {"id": "x"}, "min_rate": 3}) is None  # skipped, not fatal
    await engine.close()


async def test_the_image_digest_a_worker_reports_is_recorded_by_the_engine(world, store):
    # The follower hands `workerctl status` to the engine, which writes under its lock
    # (followers only observe); the text is untrusted: one sanitized line.
    engine, iid = await rent_one(world, store)
    await engine.handle_worker_status(iid, {"image": {"digest": "sha256:ab\x1b[31mcd"}})
    assert (await store.instances.get(iid)).image_digest == "sha256:abcd"
    for nothing in ({}, {"image": "x"}, {"image": {"digest": 7}}, []):
        await engine.handle_worker_status(iid, nothing)  # type: ignore[arg-type]
    assert (await store.instances.get(iid)).image_digest == "sha256:abcd"
    await engine.close()


TAIL = ["2026-03-13T17:19:40Z ERROR cuzk_core::engine: CUDA error 700: illegal memory access"]


async def test_an_absurd_ban_length_never_blocks_the_destroy_that_carries_it(world, store):
    """auto_ban_days = 1e308 (as a config built in code can say; the file refuses it): the ban's
    expiry is bounded (policy.MAX_BAN_DAYS), recorded, and the instance destroyed."""
    world.config = replace(world.config, fleet=replace(world.config.fleet, auto_ban_days=1e308))
    engine, iid = await rent_one(world, store)
    await engine.handle_worker_event(iid, parse_event(result("error", 1.0, TAIL)))
    rec = await store.instances.get(iid)
    assert rec.kill_kind == "bench_error" and iid not in world.cloud.instances
    [ban] = await store.badlist.all(now=world.clock.now())
    assert ban.expires_at is not None and math.isfinite(ban.expires_at)
    assert ban.expires_at == world.clock.now() + policy.MAX_BAN_DAYS * 86400
    await engine.close()


async def test_a_ban_the_store_refuses_never_blocks_the_destroy(world, store, monkeypatch):
    """Whatever makes recording the ban fail (a value the store refuses), the DELETE goes out,
    the destroy is recorded, and the refusal is an event anyone can read."""
    from vastui.store import StoreError

    engine, iid = await rent_one(world, store)
    create = store.create_destroy_intent

    async def refusing(*args, ban=None, **kw):
        if ban is not None:
            raise StoreError("expires_at must be a finite time")
        return await create(*args, **kw)

    monkeypatch.setattr(store, "create_destroy_intent", refusing)
    await engine.handle_worker_event(iid, parse_event(result("error", 1.0, TAIL)))
    rec = await store.instances.get(iid)
    assert rec.kill_kind == "bench_error" and iid not in world.cloud.instances
    [destroy] = await store.events.all(kind="destroy")
    assert destroy.instance_id == iid
    [note] = await store.events.all(kind="ban")
    assert "not recorded" in note.reason and "destroyed without it" in note.reason
    assert await store.badlist.all(now=world.clock.now()) == []
    await engine.close()


@pytest.mark.parametrize(
    ("days", "expiry"),
    [(0.0, None), (float("nan"), None), (30.0, 30 * 86400.0), (1e308, policy.MAX_BAN_DAYS * 86400),
     (float("inf"), policy.MAX_BAN_DAYS * 86400)],
)  # fmt: skip
def test_ban_expiry_is_bounded(days: float, expiry: float | None) -> None:
    got = policy.ban_expiry(1000.0, days)
    assert got == (None if expiry is None else 1000.0 + expiry)


async def test_a_controller_cut_off_from_its_workers_is_one_episode(world, store):
    """Every step repeats that the tunnel is down; the event log has one line when the cut
    starts and one when it ends, and the alert condition holds only meanwhile."""
    from vastui.alerts import Conditions, FleetFacts

    engine, iid = await rent_one(world, store)
    await engine.handle_worker_event(iid, parse_event({"stage": "prove", "event": "start"}))
    down = {
        "stage": "prove",
        "event": "progress",
        "tunnel": "down",
        "detail": "waiting for the controller's tunnel",
        "down": ["lotus api: refused"],
    }
    await engine.handle_worker_event(iid, parse_event(down))
    for _ in range(20):  # 10 minutes of steps, each seeing the tunnel down
        world.clock.advance(30)
        await engine.handle_worker_event(iid, parse_event(down))
        await engine.step()
    facts = FleetFacts(
        target=1,
        workers=1,
        reason_kind=None,
        reason=None,
        credit=None,
        bans_last_hour=0,
        kills_last_hour=0,
        cut_off=engine.cut_off,
    )
    assert "cut_off" in Conditions().holding(facts, world.clock.now())
    # its state is published: `vastui status` (and the strip, the metrics) say it
    published = await store.status.get()
    assert published is not None and published.cut_off == engine.cut_off
    assert published.cut_off_since == engine.cut_off_since
    assert world.clock.now() - published.cut_off_since == pytest.approx(600, abs=30)
    lines = render(await gather(store, now=world.clock.now())).splitlines()
    assert any(line.startswith("cut off from its workers since ") for line in lines), lines
    await engine.handle_worker_event(
        iid, parse_event({"stage": "prove", "event": "progress", "tunnel": "up"})
    )
    world.clock.advance(30)
    await engine.step()
    published = await store.status.get()
    assert published is not None and published.cut_off is None
    assert "cut off" not in render(await gather(store, now=world.clock.now()))
    events = [e.reason for e in await store.events.all(kind="cut_off")]
    assert len(events) == 2, events
    assert events[0].startswith("the controller is cut off from its workers: instance")
    assert events[1] == "the controller reaches its workers again (cut off for 10 min)"
    assert engine.cut_off is None
    assert "cut_off" not in Conditions().holding(replace(facts, cut_off=None), world.clock.now())
    await engine.close()
