"""Production, measured: cuzk's counters → proofs, rate, verdict (pure functions, table tests),
and the engine acting on them: destroyed with a typed reason, a strike, a ban after enough."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import pytest

from tests.enginekit import World, rent_distinct, rent_one, result
from tests.helpers import deploy
from vastui.config import Config
from vastui.domain.reports import parse_event
from vastui.engine import production
from vastui.engine.policy import failure_kill
from vastui.engine.production import ProdState, Reading

WINDOW = 3600.0


def raw(
    done: Any = 0,
    failed: Any = 0,
    *,
    pid: Any = 100,
    uptime: Any = 10.0,
    alive: bool = True,
    busy: bool = True,
    in_flight: int = 1,
    grpc_failed: Any = None,
    exit_status: Any = None,
    signal: Any = None,
) -> dict[str, Any]:
    return {
        "daemon_pid": pid,
        "alive": alive,
        "exit_status": exit_status,
        "signal": signal,
        "status": {
            "uptime_secs": uptime,
            "pipelines": [{"job_id": f"j{i}"} for i in range(in_flight)] if busy else [],
            "gpu_workers": [],
            "counters": {"total_completed": done, "total_failed": failed, "queue_depth": 0},
        },
        "grpc": None
        if grpc_failed is None
        else {"uptime_seconds": uptime, "completed": done, "failed": grpc_failed},
    }


def feed(points: list[tuple[float, dict[str, Any]]], bench=(None, 0, 0)) -> ProdState:
    state = ProdState()
    for t, r in points:
        state = production.fold(state, Reading.parse(r), t, WINDOW, bench)
    return state


# ------------------------------------------------------------------ reading untrusted numbers


@pytest.mark.parametrize(
    ("value", "parsed"),
    [(5, 5), (5.0, 5), (-1, None), (2**63, None), (float("nan"), None), (True, None), ("7", None)],
)
def test_reading_trusts_no_number(value: Any, parsed: int | None) -> None:
    r = Reading.parse(raw(done=value, pid=value))
    assert r.completed == parsed and r.pid == parsed


def test_reading_takes_the_larger_of_status_and_grpc_failures() -> None:
    # /status counts assembled proofs only; a GPU start panic is counted by GetStatus alone
    r = Reading.parse(raw(done=10, failed=0, grpc_failed=3))
    assert (r.completed, r.failed) == (10, 3)
    assert Reading.parse({"status": "x", "grpc": [], "alive": "yes"}) == Reading(
        None, False, None, None, None, None, None, False
    )
    assert Reading.parse(raw(signal="SIG\x1b[31mABRT")).signal is None  # untrusted text


# ------------------------------------------------------------------ folding counters


def test_fold_starts_from_the_benchmarks_counters_on_the_same_daemon() -> None:
    # the benchmark daemon finished with 13 completed and 1 failed; production keeps it
    state = feed([(0.0, raw(15, 1, pid=42))], bench=(42, 13, 1))
    assert (state.completed, state.failed) == (2, 0)
    # a different daemon (restarted before production): its counters are all production's
    state = feed([(0.0, raw(3, 0, pid=7))], bench=(42, 13, 1))
    assert (state.completed, state.failed) == (0, 0)


def test_fold_survives_a_daemon_restart_without_losing_or_doubling() -> None:
    state = feed(
        [
            (0.0, raw(0, 0, pid=1, uptime=10)),
            (60.0, raw(5, 1, pid=1, uptime=70)),
            (120.0, raw(2, 0, pid=2, uptime=30)),  # new pid: a new segment
            (180.0, raw(4, 0, pid=2, uptime=90)),
            (240.0, raw(1, 0, pid=2, uptime=5)),  # same pid, uptime went back: reset
        ]
    )
    assert (state.completed, state.failed) == (5 + 4 + 1, 1)


def test_measure_counts_only_busy_time_after_the_pipeline_filled() -> None:
    state = feed(
        [
            (0.0, raw(0, busy=True)),  # production begins: the pipeline fills
            (300.0, raw(1, busy=True)),  # the first proof: primed from here
            (900.0, raw(6, busy=False)),  # 5 proofs in the busy 600 s
            (2100.0, raw(6, busy=True)),  # 1200 s idle: no demand, not slowness
            (2700.0, raw(11, busy=True)),
        ]
    )
    m = production.measure(state, 2700.0, WINDOW)
    assert m.busy_s == 1200.0 and m.completed == 11
    assert m.rate == pytest.approx(10 * 3600 / 1200)
    # before MIN_BUSY_S of busy time, no rate is published: a few proofs are noise
    filling = feed([(0.0, raw(0)), (60.0, raw(1)), (300.0, raw(3))])
    early = production.measure(filling, 300.0, WINDOW)
    assert early.rate is None and early.completed == 3


@pytest.mark.parametrize(
    ("case", "second", "latency", "busy_s"),
    [
        # the second read took 500 s (a stalled host): the daemon counted over 600 s, not 1100
        ("late arrival", (1200.0, 700.0), 500.0, 600.0),
        ("the arrivals agree", (900.0, 900.0), 0.0, 800.0),
        # a clock that ran further than the reads allow: arrival times
        ("a clock that lies", (900.0, 5000.0), 10.0, 800.0),
        ("a clock that stands", (900.0, 100.0), 10.0, 800.0),
        ("no clock", (900.0, None), 300.0, 800.0),
    ],
)
def test_busy_time_is_the_daemons_own_clock_within_the_reads_latency(
    case: str, second: tuple[float, float | None], latency: float, busy_s: float
) -> None:
    state = ProdState()
    t2, up2 = second
    points = [(0.0, 0, 0.0, 0.0), (100.0, 1, 100.0, 0.0), (t2, 11, up2, latency)]
    for t, done, up, lat in points:
        reading = replace(Reading.parse(raw(done, uptime=up)), latency=lat)
        state = production.fold(state, reading, t, WINDOW, (None, 0, 0))
    m = production.measure(state, t2, WINDOW)
    assert m.busy_s == busy_s, case
    assert m.rate == pytest.approx(10 * 3600 / busy_s)


def test_a_restart_between_reads_is_timed_by_the_arrivals() -> None:
    state = ProdState()
    points = [(0.0, 1, 0, 500.0), (100.0, 1, 1, 600.0), (700.0, 2, 6, 550.0)]
    for t, pid, done, up in points:
        reading = replace(Reading.parse(raw(done, pid=pid, uptime=up)), latency=50.0)
        state = production.fold(state, reading, t, WINDOW, (None, 0, 0))
    assert production.measure(state, 700.0, WINDOW).busy_s == 600.0


def test_samples_are_bounded() -> None:
    state = feed([(float(t), raw(t)) for t in range(0, 20000, 5)])
    assert len(state.samples) <= production.MAX_SAMPLES
    assert state.samples[0][0] >= 20000 - 5 - 2 * WINDOW


# ------------------------------------------------------------------ the verdict


CONFIG = Config()


def verdict_after(points, reading, now, min_rate=29.0, silent_from=None):
    state = feed(points)
    if silent_from is not None:
        state = production.silent(state, silent_from)
    parsed = None if reading is None else Reading.parse(reading)
    return production.verdict(state, parsed, now, min_rate, CONFIG)


def steady(rate: float, minutes: int, busy: bool = True) -> list[tuple[float, dict[str, Any]]]:
    return [(m * 60.0, raw(int(rate * m / 60), busy=busy)) for m in range(0, minutes + 1)]


@pytest.mark.parametrize(
    ("case", "points", "reading", "now", "kind"),
    [
        ("healthy", steady(33, 70), raw(38), 4200.0, None),
        ("slow, whole window busy", steady(20, 70), raw(23), 4200.0, "prove_below_min"),
        ("slow, but not judged yet", steady(20, 40), raw(13), 2400.0, None),
        ("slow, but idle: no demand", steady(20, 70, busy=False), raw(23, busy=False), 4200.0,
         None),
        ("failures climb", [(0.0, raw(0, 0)), (600.0, raw(5, 1)), (1200.0, raw(9, 3))],
         raw(9, 3), 1200.0, "prove_failing"),
        ("daemon died", steady(33, 5), raw(2, alive=False, exit_status=134, signal="SIGABRT"),
         300.0, "prove_daemon_died"),
        ("silent for a moment", steady(33, 5), None, 400.0, None),
        ("silent too long", steady(33, 5), None, 360.0 + 5 * 60, "prove_unresponsive"),
        ("never answered", [], None, 5 * 60.0, "prove_unresponsive"),
        ("alive, answers nothing", steady(33, 5), {"alive": True, "daemon_pid": 5}, 660.0,
         "prove_unresponsive"),
        # the engine was down for an hour: its first failed read starts the silence
        ("engine back after an outage", steady(33, 5), None, 3900.0, None),
    ],
)  # fmt: skip
def test_verdict(case: str, points, reading, now: float, kind: str | None) -> None:
    silent_from = None if reading is not None else {"never answered": 0.0}.get(case, 360.0)
    if case == "alive, answers nothing":
        silent_from = 360.0
    if case == "engine back after an outage":
        silent_from = 3900.0
    kill = verdict_after(points, reading, now, silent_from=silent_from)
    assert (kill.kind if kill else None) == kind, case
    if kill is not None:
        assert kill.strike and kill.stage == "proving" and kill.ban is None
        assert kill.reason


def test_verdict_reason_names_the_numbers() -> None:
    kill = verdict_after(steady(20, 70), raw(23), 4200.0)
    assert kill is not None
    assert re.fullmatch(
        r"measured (19|20)\.\d < 29\.0 proofs/h over 60 min of proving", kill.reason
    )
    died = verdict_after([], raw(alive=False, exit_status=137, signal="SIGKILL"), 10.0)
    assert (
        died is not None and died.reason == "prove failed: cuzk-daemon exited (SIGKILL, status 137)"
    )
    plain = verdict_after([], raw(alive=False, exit_status=1), 10.0)
    assert plain is not None and plain.reason == "prove failed: cuzk-daemon exited (status 1)"


def test_a_dead_daemon_reads_as_the_prove_stage_reports_it() -> None:
    """The engine may see the death in the counters before the worker's failure event arrives:
    either way the same kind, reason, error lines and ban (policy.failure_kill)."""
    tail = [
        "terminate called after throwing an instance of 'sppark::cuda_error'",
        '  what():  cudaStreamSynchronize(stream)@gpu_t.cuh:158 failed: "an illegal memory access"',
        "cuzk-daemon was killed by SIGABRT (exit status 134)",
    ]
    reading = raw(alive=False, exit_status=134, signal="SIGABRT") | {"error_tail": tail}
    seen = verdict_after([], reading, 10.0)
    event = {"stage": "prove", "reason": "cuzk-daemon exited (SIGABRT, status 134)",
             "error_tail": tail}  # fmt: skip
    told = failure_kill(parse_event(event))
    assert seen == told
    assert seen is not None and seen.error_lines == tuple(tail) and seen.ban is not None
    # untrusted: bounded, strings only
    junk = raw(alive=False, exit_status=134) | {"error_tail": ["x" * 9000, 5] * 40}
    parsed = Reading.parse(junk)
    assert len(parsed.error_tail) == 20 and all(len(x) == 500 for x in parsed.error_tail)


# ------------------------------------------------------------------ the engine acting on it


async def _to_proving(engine, store, iid: int) -> None:  # type: ignore[no-untyped-def]
    """Setup, paramfetch, a passed benchmark on daemon 77 (13 proofs), then proving."""
    rec = await store.instances.get(iid)
    for stage in ("setup", "paramfetch", "benchmark"):
        await engine.handle_worker_event(iid, parse_event({"stage": stage, "event": "start"}))
    bench = result("pass", rec.min_rate + 4)
    bench["result"].update(daemon_pid=77, daemon_completed=13, daemon_failed=0)
    await engine.handle_worker_event(iid, parse_event(bench))
    await engine.handle_worker_event(iid, parse_event({"stage": "prove", "event": "start"}))


async def proving_worker(world: World, store):
    engine, iid = await rent_one(world, store)
    await _to_proving(engine, store, iid)
    return engine, iid, await store.instances.get(iid)


async def test_engine_records_measured_production(world, store):
    engine, iid, rec = await proving_worker(world, store)
    rate = rec.min_rate + 4
    t0 = world.clock.now()
    for minute in range(0, 31):
        world.clock.advance(60 if minute else 0)
        done = 13 + int(rate * minute / 60)
        assert await engine.handle_counters(iid, Reading.parse(raw(done, pid=77)))
    rec = await store.instances.get(iid)
    assert rec.state == "proving" and rec.prod_completed == int(rate * 30 / 60)
    assert rec.prod_failed == 0 and rec.prod_checked_at == t0 + 1800
    assert rec.prod_rate == pytest.approx(rate, rel=0.05)
    assert await store.badlist.strikes() == []
    await engine.close()


async def test_a_reading_is_dated_when_it_was_read_not_when_the_engine_got_to_it(world, store):
    # The race behind a flaky e2e rate under load: a step holding the engine's lock delays
    # the handling of a reading; dated at handling, the proofs it counts were spread over a
    # longer time than they took, and the rate bent.
    engine, iid, rec = await proving_worker(world, store)
    rate = rec.min_rate + 4
    t0 = world.clock.now()
    for minute in range(0, 31):
        read_at = t0 + 60 * minute
        world.clock.set(read_at + (45 if minute % 2 else 0))  # every other one handled late
        done = 13 + int(rate * minute / 60)
        assert await engine.handle_counters(iid, Reading.parse(raw(done, pid=77)), False, read_at)
    rec = await store.instances.get(iid)
    assert rec.prod_checked_at == t0 + 1800
    assert rec.prod_rate == pytest.approx(rate, rel=0.05)
    assert production.ProdState.from_json(rec.prod_state).last_ok == t0 + 1800
    await engine.close()


async def test_engine_destroys_a_slow_prover_with_a_strike_and_bans_on_the_second(world, store):
    world.config = replace(world.config, proving=replace(world.config.proving, window_min=10))
    engine, iid, rec = await proving_worker(world, store)
    slow = rec.min_rate / 2
    alive = True
    for minute in range(0, 25):
        world.clock.advance(60 if minute else 0)
        alive = await engine.handle_counters(
            iid, Reading.parse(raw(13 + int(slow * minute / 60), pid=77))
        )
        if not alive:
            break
    assert not alive
    rec = await store.instances.get(iid)
    assert rec.state == "killed" and rec.kill_kind == "prove_below_min"
    assert rec.failed_stage == "proving" and iid not in world.cloud.instances
    [strike] = await store.badlist.strikes(rec.machine_id)
    assert strike.kind == "prove_below_min" and strike.instance_id == iid
    assert await store.badlist.machine_ids(now=world.clock.now()) == set()  # one strike: no ban
    # what it really did is its record now: the ranking will not rent it on its benchmark
    [perf] = [p for p in await store.perf.all() if p.machine_id == rec.machine_id]
    assert perf.last_rate == pytest.approx(rec.prod_rate) and perf.last_rate < rec.min_rate

    # a second strike on the same machine bans it (proving.strikes_to_ban = 2)
    engine2, iid2 = await rent_again(world, store, engine, rec.machine_id)
    await engine2.handle_worker_event(
        iid2,
        parse_event({
            "stage": "prove", "event": "fail", "reason": "cuzk-daemon exited (SIGKILL, status 137)",
            "error_tail": ["cuzk-daemon was killed by SIGKILL (exit status 137) without an error "
                           "line: the kernel's out-of-memory killer, most likely"],
        }),
    )  # fmt: skip
    rec2 = await store.instances.get(iid2)
    assert rec2.kill_kind == "prove_daemon_died"
    assert len(await store.badlist.strikes(rec.machine_id)) == 2
    [bad] = await store.badlist.all(now=world.clock.now())
    assert bad.machine_id == rec.machine_id and bad.source == "automatic"
    assert bad.reason.startswith("2 strikes, the last: prove failed: cuzk-daemon exited")
    await engine2.close()


async def rent_again(world: World, store, engine, machine_id: int):
    """Rent another slice (another offer) of the same machine."""
    used = {r.offer_id for r in await store.instances.all()}
    offers = await engine.refresh_offers(force=True)
    same = [r for r in offers if r.offer.machine_id == machine_id and r.offer.id not in used]
    assert same, "the seeded market has a second slice of this machine"
    iid = await deploy(engine, same[0].offer.id)
    assert iid is not None
    await world.until_running(engine)
    await engine.handle_worker_event(iid, parse_event({"stage": "prove", "event": "start"}))
    return engine, iid


async def test_a_passed_benchmark_with_failed_proofs_is_a_strike_not_a_kill(world, store):
    engine, iid = await rent_one(world, store)
    rec = await store.instances.get(iid)
    panic = 'error:     GPU start panicked: task 18 panicked with message "cudaMalloc ..."'
    bench = result("pass", rec.min_rate + 2, [panic])
    bench["result"].update(proofs_completed=11, proofs_failed=1)
    await engine.handle_worker_event(iid, parse_event(bench))
    rec = await store.instances.get(iid)
    assert rec.state != "killed" and rec.bench_failed == 1
    [strike] = await store.badlist.strikes(rec.machine_id)
    assert strike.kind == "bench_failed_proofs"
    assert strike.reason == f"1 of 12 benchmark proofs failed: {panic}"
    [event] = await store.events.all(kind="strike")
    assert event.machine_id == rec.machine_id
    await engine.close()


async def test_an_unreadable_worker_is_destroyed_after_unresponsive_min(world, store):
    engine, iid, _ = await proving_worker(world, store)
    assert await engine.handle_counters(iid, Reading.parse(raw(13, pid=77)))
    world.clock.advance(60)
    for _ in range(4):  # silent from here
        world.clock.advance(60)
        assert await engine.handle_counters(iid, None)
    world.clock.advance(120)
    assert not await engine.handle_counters(iid, None)
    rec = await store.instances.get(iid)
    assert rec.kill_kind == "prove_unresponsive"
    assert rec.kill_reason == "cuzk-daemon did not answer for 5 min while proving"
    await engine.close()


async def test_the_curio_db_password_goes_to_the_worker_and_nowhere_else(
    world, store, tmp_path, monkeypatch, caplog
):
    caplog.set_level("DEBUG")
    monkeypatch.setenv("VASTUI_CURIO_DB_PASSWORD", "s3cret-curio-db")
    engine, iid = await rent_one(world, store)
    env = world.cloud.instances[iid].env
    assert env["CURIO_DB_PASSWORD"] == "s3cret-curio-db"
    assert (env["CUZK_MAX_PENDING"], env["CURIO_PROOFSHARE"], env["CUZK_PROVE_TIMEOUT"]) == (
        "10", "1", "30m",
    )  # fmt: skip
    await engine.close()
    await store.close()
    for path in tmp_path.glob("s.db*"):
        assert b"s3cret-curio-db" not in path.read_bytes(), path
    assert "s3cret-curio-db" not in caplog.text


# ------------------------------------------------------------------ the controller cut off


UNREACHABLE_CASES = [
    # (unreachable for minutes, the engine reaches other workers, the kill kind or None)
    ("cut off briefly, fellows answer", 10, True, None),
    ("cut off long, fellows answer", 31, True, "prove_unreachable"),
    ("cut off long, nobody answers", 600, False, None),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "minutes", "others", "kind"), UNREACHABLE_CASES, ids=[c[0] for c in UNREACHABLE_CASES]
)
def test_an_unreachable_worker_is_not_a_silent_daemon(
    case: str, minutes: float, others: bool, kind: str | None
) -> None:
    state = feed([(0.0, raw(5))])
    state = production.silent(state, 60.0, unreachable=True)
    assert state.unreachable_since == 60.0 and state.silent_since is None
    kill = production.verdict(
        state, None, 60.0 + minutes * 60, 30.0, Config(), others_reachable=others
    )
    assert (kill.kind if kill else None) == kind
    if kill is not None:
        assert kill.strike and "reaches its other workers" in kill.reason
    # a read that connects but finds the daemon silent is the daemon's silence again
    state = production.silent(state, 120.0)
    assert state.unreachable_since is None and state.silent_since == 120.0


async def _two_proving(world: World, store) -> tuple[Any, list[int]]:
    engine = await world.engine(store)
    ids = await rent_distinct(world, engine, 2)
    for iid in ids:
        await _to_proving(engine, store, iid)
        assert await engine.handle_counters(iid, Reading.parse(raw(13, pid=77)))
    return engine, ids


async def test_the_controller_cut_off_from_every_worker_destroys_none(world, store):
    """Issue 17: SSH to every worker refused for hours (the controller's network): nobody is
    destroyed or struck; curio goes on proving without us."""
    engine, ids = await _two_proving(world, store)
    for _ in range(180):  # three hours, a read a minute, none connects
        world.clock.advance(60)
        for iid in ids:
            assert await engine.handle_counters(iid, None, True)
    for iid in ids:
        rec = await store.instances.get(iid)
        assert not rec.killed and rec.state == "proving"
        assert await store.badlist.strikes(rec.machine_id) == []
    # SSH is back: the counters are read again and the clocks reset
    for iid in ids:
        assert await engine.handle_counters(iid, Reading.parse(raw(20, pid=77)))
        state = ProdState.from_json((await store.instances.get(iid)).prod_state)
        assert state.unreachable_since is None and state.silent_since is None
    await engine.close()


async def test_one_worker_unreachable_while_its_fellow_answers_goes(world, store):
    engine, (lost, fine) = await _two_proving(world, store)
    done = 13
    for minute in range(1, 40):
        world.clock.advance(60)
        done += 1 if minute % 2 else 0
        assert await engine.handle_counters(fine, Reading.parse(raw(done, pid=77)))
        alive = await engine.handle_counters(lost, None, True)
        if not alive:
            break
    rec = await store.instances.get(lost)
    assert rec.kill_kind == "prove_unreachable" and 30 <= minute <= 32
    assert [s.kind for s in await store.badlist.strikes(rec.machine_id)] == ["prove_unreachable"]
    assert not (await store.instances.get(fine)).killed
    await engine.close()


def fed(rate: float, minutes: int, in_flight: int) -> ProdState:
    """A worker with MaxPending 10 (fed from 9 in flight) proving ``rate`` with ``in_flight``
    proofs in the daemon for ``minutes``."""
    state = ProdState()
    for m in range(minutes + 1):
        reading = Reading.parse(raw(int(rate * m / 60), in_flight=in_flight))
        state = production.fold(state, reading, m * 60.0, WINDOW, (None, 0, 0),
                                production.full_at(10))  # fmt: skip
    return state


@pytest.mark.parametrize(
    ("in_flight", "judged"), [(1, False), (5, False), (8, False), (9, True), (10, True)]
)
def test_a_worker_is_judged_only_on_the_work_it_was_given(in_flight: int, judged: bool) -> None:
    """The market sent too little to fill it: a pipelined GPU with a few proofs in flight
    proves at a fraction of its rate, and that is the demand's doing, not the machine's."""
    state = fed(12, 70, in_flight)
    m = production.measure(state, 4200.0, WINDOW)
    assert (m.rate is not None) == judged
    kill = production.verdict(state, Reading.parse(raw(14, in_flight=in_flight)), 4200.0, 29.0,
                              CONFIG, measured=m)  # fmt: skip
    assert (kill.kind if kill else None) == ("prove_below_min" if judged else None)


@pytest.mark.parametrize(("max_pending", "at"), [(None, None), (0, None), (1, 1), (2, 1),
                                                  (5, 4), (10, 9), (100, 99)])  # fmt: skip
def test_fed_means_its_max_pending_in_flight_but_one(max_pending, at) -> None:
    assert production.full_at(max_pending) == at


def test_in_flight_is_the_daemons_pipelines_and_queue() -> None:
    r = raw(3, in_flight=4)
    r["status"]["counters"]["queue_depth"] = 2
    assert Reading.parse(r).in_flight == 6
    assert Reading.parse({"alive": True, "grpc": {"completed": 3}}).in_flight is None


async def test_engine_spares_a_half_fed_slow_worker_and_ends_a_fed_one(world, store):
    world.config = replace(world.config, proving=replace(world.config.proving, window_min=10))
    engine, iid, rec = await proving_worker(world, store)
    await store.instances.update(iid, max_pending=10)
    slow = rec.min_rate / 2
    for minute in range(25):
        world.clock.advance(60 if minute else 0)
        reading = raw(13 + int(slow * minute / 60), pid=77, in_flight=3)
        assert await engine.handle_counters(iid, Reading.parse(reading)), "half fed: spared"
    assert await store.badlist.strikes() == []
    alive = True
    for minute in range(25, 60):
        world.clock.advance(60)
        reading = raw(13 + int(slow * minute / 60), pid=77, in_flight=10)
        alive = await engine.handle_counters(iid, Reading.parse(reading))
        if not alive:
            break
    assert not alive, "fed and still slow: destroyed"
    rec = await store.instances.get(iid)
    assert rec.kill_kind == "prove_below_min"
    await engine.close()
