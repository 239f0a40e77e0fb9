"""Issue 17 item 3: a failure that is not the machine's is not charged to the machines.

The signature (stage, kind, first real error line without ids and numbers) as a table; the
detection as a table; then the engine against the simulated cloud: the same benchmark error on
three machines pauses provisioning and takes back the bans, a single machine's fault still
bans it, and a worker that passes ends the pause."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.enginekit import World, rent_distinct, result
from vastui.domain.reports import parse_event
from vastui.engine import fleetwide
from vastui.engine.fleetwide import Failure, detect, signature
from vastui.store import Store

SIGNATURE_CASES = [
    # (stage, kind, lines, the signature)
    ("benchmark", "bench_error",
     ["[bench] starting", "2026-03-13T17:19:40Z ERROR: C1 input /data/c1/sector-1234.json not "
      "found on machine 56004", "exit 1"],
     "benchmark/bench_error: ERROR: C# input /data/c#/sector-#.json not found on machine #"),
    ("loading", "loading_stuck",
     ["Error response from daemon: manifest for ghcr.io/x/worker:v9 not found: manifest unknown"],
     "loading/loading_stuck: Error response from daemon: manifest for ghcr.io/x/worker:v# not "
     "found: manifest unknown"),
    ("setup", "setup_error", ["dial tcp 10.0.0.5:5433: connect: connection refused"],
     "setup/setup_error: dial tcp <addr>: connect: connection refused"),
    ("paramfetch", "deadline_paramfetch", [], "paramfetch/deadline_paramfetch"),
    (None, "gpu", ["no error word here 42"], "-/gpu: no error word here #"),
    ("benchmark", "bench_error", ["job 7f3a9c2e-1b2c-4d5e-8f90-123456789abc failed, 0xdeadbeef1"],
     "benchmark/bench_error: job <id> failed, <hex>"),
]  # fmt: skip


@pytest.mark.parametrize(("stage", "kind", "lines", "sig"), SIGNATURE_CASES)
def test_signature(stage: str | None, kind: str, lines: list[str], sig: str) -> None:
    assert signature(stage, kind, lines) == sig


def test_two_machines_lines_differing_in_ids_have_one_signature() -> None:
    a = signature("benchmark", "bench_error", ["ERROR: C1 for sector 17 missing (instance 3001)"])
    b = signature("benchmark", "bench_error", ["ERROR: C1 for sector 923 missing (instance 4112)"])
    c = signature("benchmark", "bench_error", ["ERROR: CUDA error 700: illegal memory access"])
    assert a == b != c


H = 3600.0
DETECT_CASES = [
    # (failures as (machine, signature, at), now, window, machines, the signatures found)
    ("three machines, one hour", [(1, "s", 0), (2, "s", 600), (3, "s", 1200)], 1200, H, 3, ["s"]),
    ("one machine three times", [(1, "s", 0), (1, "s", 600), (1, "s", 1200)], 1200, H, 3, []),
    ("two machines", [(1, "s", 0), (2, "s", 600)], 600, H, 3, []),
    ("the first left the window", [(1, "s", 0), (2, "s", 600), (3, "s", 1200)], H + 1, H, 3, []),
    ("three different failures", [(1, "a", 0), (2, "b", 0), (3, "c", 0)], 10, H, 3, []),
    ("a threshold of two", [(1, "a", 0), (2, "a", 5), (3, "b", 5)], 10, H, 2, ["a"]),
    ("not after now", [(1, "s", 0), (2, "s", 5), (3, "s", 50)], 10, H, 3, []),
    ("widest first", [(1, "a", 0), (2, "a", 0), (3, "b", 0), (4, "b", 0), (5, "b", 0),
                      (6, "a", 0), (7, "b", 0)], 1, H, 3, ["b", "a"]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "seen", "now", "window", "machines", "found"),
    DETECT_CASES,
    ids=[c[0] for c in DETECT_CASES],
)
def test_detect(
    case: str, seen: list[tuple[int, str, float]], now: float, window: float, machines: int,
    found: list[str],
) -> None:  # fmt: skip
    failures = [Failure(m, s, at, instance_id=100 + i) for i, (m, s, at) in enumerate(seen)]
    got = detect(failures, now, window_s=window, machines=machines)
    assert [f.signature for f in got] == found
    for f in got:
        assert len(f.machines) >= machines and f.first_at <= f.last_at <= now


# -- the engine ----------------------------------------------------------------------------


def _broken_env(iid: int) -> list[str]:
    """What every worker says when the image's benchmark input is missing (its ids differ)."""
    sector = iid % 997
    return [
        f"[bench] sector {sector}: reading C1 input",
        f"ERROR: C1 input /data/c1/sector-{sector}.json not found (instance {iid})",
    ]


async def test_one_failure_on_three_machines_is_the_fleets(world: World, store: Store) -> None:
    engine = await world.engine(store)
    ids = await rent_distinct(world, engine, 3)
    machines = [(await store.instances.get(i)).machine_id for i in ids]
    assert len(set(machines)) == 3
    for iid in ids[:2]:
        await engine.handle_worker_event(iid, parse_event(result("error", None, _broken_env(iid))))
    # Two machines: each still looks like a machine's fault, and is banned.
    bad = await store.badlist.all(now=world.clock.now())
    assert sorted(b.machine_id for b in bad) == sorted(machines[:2])
    await engine.handle_worker_event(
        ids[2], parse_event(result("error", None, _broken_env(ids[2])))
    )
    # The third: the fleet's. Nobody is banned or struck for it, the two bans are taken back.
    assert await store.badlist.all(now=world.clock.now()) == []
    for m in machines:
        assert await store.badlist.strikes(m) == []
    pause = await store.meta.fleet_failure()
    assert pause is not None and sorted(pause["machines"]) == sorted(machines)
    assert pause["signature"].startswith("benchmark/bench_error: ERROR: C# input")
    third = await store.instances.get(ids[2])
    assert third.killed and "fleet-wide failure" in (third.kill_reason or "")
    unbans = await store.events.all(kind="unban")
    assert sorted(e.machine_id for e in unbans) == sorted(machines[:2])
    # Provisioning is paused, with the reason and the signature in the status.
    world.config = replace(world.config, fleet=replace(world.config.fleet, target_workers=3))
    engine.config = world.config
    engine.acts.config = world.config
    before = set(world.cloud.instances)
    world.clock.advance(60)
    await engine.step()
    assert set(world.cloud.instances) == before, "nothing rented while paused"
    status = await store.status.get()
    assert status.reason_kind == "fleet_failure" and "C# input" in (status.reason or "")
    await engine.close()


async def test_a_single_machines_fault_still_bans_it(world: World, store: Store) -> None:
    engine = await world.engine(store)
    ids = await rent_distinct(world, engine, 3)
    tails = [
        ["ERROR cuzk_core::engine: CUDA error 700: illegal memory access"],
        ["ERROR: C1 input /data/c1/sector-1.json not found (instance 1)"],
        ["ERROR gpu_worker: GPU has fallen off the bus"],
    ]
    for iid, tail in zip(ids, tails, strict=True):
        await engine.handle_worker_event(iid, parse_event(result("error", None, tail)))
    bad = await store.badlist.all(now=world.clock.now())
    assert len(bad) == 3, "three different faults: three machines' own"
    assert await store.meta.fleet_failure() is None
    await engine.close()


async def test_a_worker_that_passes_ends_the_pause(world: World, store: Store) -> None:
    engine = await world.engine(store)
    ids = await rent_distinct(world, engine, 4)
    for iid in ids[:3]:
        await engine.handle_worker_event(iid, parse_event(result("error", None, _broken_env(iid))))
    assert await store.meta.fleet_failure() is not None
    rec = await store.instances.get(ids[3])
    await engine.handle_worker_event(ids[3], parse_event(result("pass", (rec.min_rate or 1) + 5)))
    assert await store.meta.fleet_failure() is None
    reasons = [e.reason for e in await store.events.all(kind="fleet_failure")]
    assert reasons[0].startswith("provisioning paused: benchmark/bench_error")
    assert reasons[-1].startswith(f"provisioning resumed: instance {ids[3]}")
    await engine.close()


async def test_the_check_can_be_turned_off(world: World, store: Store) -> None:
    world.config = replace(world.config, fleet=replace(world.config.fleet,
                                                       fleet_failure_machines=0))  # fmt: skip
    engine = await world.engine(store)
    ids = await rent_distinct(world, engine, 3)
    for iid in ids:
        await engine.handle_worker_event(iid, parse_event(result("error", None, _broken_env(iid))))
    assert len(await store.badlist.all(now=world.clock.now())) == 3
    assert await store.meta.fleet_failure() is None
    assert fleetwide.SIGNATURE_MAX >= 100
    await engine.close()


def test_status_shows_the_pause_and_resume_lifts_it(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    import asyncio

    from vastui.cli import main

    db = tmp_path / "p.db"

    async def pause() -> None:
        async with await Store.open(db) as store:
            value = {"signature": "benchmark/bench_error: ERROR: C# input missing",
                     "text": "benchmark/bench_error: ERROR: C# input missing on 3 machines "
                     "(1, 2, 3)", "since": 1_790_000_000.0}  # fmt: skip
            await store.declare_fleet_failure(
                value, forgive_machines=[], forgive_instances=[], since=0.0, now=1_790_000_000.0
            )

    asyncio.run(pause())
    assert main(["status", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "provisioning paused since 2026-09-21T" in out and "C# input missing on 3" in out
    assert main(["resume", "--db", str(db)]) == 0
    assert "provisioning resumes" in capsys.readouterr().out
    assert main(["resume", "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not paused" in err
    assert main(["status", "--db", str(db)]) == 0
    assert "paused" not in capsys.readouterr().out


def test_a_stuck_load_carries_vasts_pull_error_into_its_signature() -> None:
    """A missing image: every machine's load is stuck with the registry's error in Vast's
    status message; the kill carries it, so the signature is one across machines."""
    from vastui.config import Config
    from vastui.domain.worker import InstanceRecord
    from vastui.engine import policy

    def stuck(vid: int) -> policy.Kill:
        msg = (
            f"Error response from daemon: manifest for ghcr.io/op/vastui-worker:typo{vid} not "
            "found: manifest unknown: manifest unknown"
        )
        rec = InstanceRecord(vast_id=vid, label="x", state="loading", loading_at=100.0,
                             status_msg=msg, machine_id=vid)  # fmt: skip
        kill = policy.deadline_kill(rec, 100.0 + 31 * 60.0, Config())
        assert kill is not None and kill.error_lines == (msg,)
        return kill

    a, b = stuck(11), stuck(12)
    assert signature(a.stage, a.kind, a.error_lines) == signature(b.stage, b.kind, b.error_lines)
    assert "manifest unknown" in signature(a.stage, a.kind, a.error_lines)


async def test_a_straggler_failing_after_the_resume_is_not_charged(
    world: World, store: Store
) -> None:
    """RELIABILITY.md finding 7 (storm): a worker rented into the failure fails the same way
    after `vastui resume` ended the pause, when the earlier failures have left the window: the
    signature is still the fleet's, its machine is not banned."""
    engine = await world.engine(store)
    ids = await rent_distinct(world, engine, 4)
    for iid in ids[:3]:
        await engine.handle_worker_event(iid, parse_event(result("error", None, _broken_env(iid))))
    assert await store.meta.fleet_failure() is not None
    assert await store.clear_fleet_failure("operator", now=world.clock.now())
    world.clock.advance(3 * 3600)  # the three failures are out of the 60-minute window
    await engine.handle_worker_event(
        ids[3], parse_event(result("error", None, _broken_env(ids[3])))
    )
    straggler = await store.instances.get(ids[3])
    assert straggler.killed and "fleet-wide failure" in (straggler.kill_reason or "")
    assert await store.badlist.all(now=world.clock.now()) == []
    assert await store.badlist.strikes(straggler.machine_id) == []
    assert await store.meta.fleet_failure() is None, "one straggler does not pause again"
    await engine.close()


async def test_slow_machines_are_each_their_own_never_the_fleets(
    world: World, store: Store
) -> None:
    """Three machines whose benchmarks aborted early (too slow for their min_rate) read alike
    ("partial rate # < # proofs/h"), yet each is its machine's pace: a loaded host's CI run paused
    the whole fleet on them. Each is struck and recorded; nothing is paused."""
    engine = await world.engine(store)
    ids = await rent_distinct(world, engine, 3)
    machines = [(await store.instances.get(i)).machine_id for i in ids]
    for iid in ids:
        slow = result("aborted_early", None, ["[bench] aborted early"], stage="timed_run")
        slow["result"]["partial_rate_per_hour"] = 12.5
        await engine.handle_worker_event(iid, parse_event(slow))
    assert await store.meta.fleet_failure() is None
    for m in machines:
        assert [s.kind for s in await store.badlist.strikes(m)] == ["bench_aborted_early"]
        [perf] = await store.perf.of_machine(m)
        assert (perf.last_rate, perf.last_partial) == (12.5, True)
    await engine.close()
