"""Numbers from a worker within physics (vastui/engine/physics.py): a benchmark's rate under
its GPUs' ceiling and in agreement with its own proofs and time; cuzk's counters that only
grow, and no faster than the GPUs prove. Tables first, then the engine refusing them: nothing
refused reaches the performance record, the ranking, the production counts or a verdict, and a
worker that keeps lying is destroyed and struck with the reason named."""

from __future__ import annotations

from typing import Any

import pytest

from tests.enginekit import World, rent_one, result
from tests.test_production import _to_proving, raw
from vastui.domain.reports import parse_bench_result, parse_event
from vastui.engine import physics
from vastui.engine.production import ProdState, Reading

CEIL_4090 = physics.rate_ceiling("RTX 4090", 1)


def bench(rate: Any, done: Any = 12, window: Any = 1800.0) -> dict[str, Any]:
    return {"outcome": "pass", "rate_per_hour": rate, "proofs_completed": done,
            "window_seconds": window}  # fmt: skip


@pytest.mark.parametrize(
    ("case", "result_", "gpu", "n", "refused"),
    [
        ("a real 4090", bench(31.0, 12, 1500.0), "RTX 4090", 1, None),
        ("the fastest a 4090 could be", bench(CEIL_4090), "RTX 4090", 1, None),
        ("a billion proofs an hour", bench(1e9), "RTX 4090", 1, "above what 1x RTX 4090"),
        ("past the ceiling", bench(CEIL_4090 + 0.1, 100, 1800.0), "RTX 4090", 1, "ceiling"),
        ("eight GPUs may do eight times", bench(7 * CEIL_4090, 1000, 1800.0), "RTX 4090", 8,
         None),
        ("an unknown model: the fastest known", bench(140.0, 100, 3600.0), "B300", 1, None),
        ("an unknown model past it", bench(150.0, 100, 3600.0), "B300", 1, "ceiling"),
        ("disagrees with its own proofs and time", bench(90.0, 3, 3600.0), "RTX 4090", 1,
         "disagrees with its own 3 proofs"),
        ("the fill makes the slope above the average", bench(40.0, 12, 1800.0), "RTX 4090", 1,
         None),
        ("no rate: nothing to refuse", bench(None), "RTX 4090", 1, None),
        ("no window: the ceiling alone", bench(60.0, 3, None), "RTX 4090", 1, None),
    ],
)  # fmt: skip
def test_bench_refusal(case, result_, gpu, n, refused) -> None:
    why = physics.bench_refusal(parse_bench_result(result_), gpu, n)
    if refused is None:
        assert why is None, why
    else:
        assert why is not None and refused in why and "\n" not in why


def refusal(last=(100, 10, 0, 50.0, 1000.0), now=(100, 10, 0, 110.0, 1060.0)) -> str | None:
    pid0, done0, fail0, up0, at0 = last
    pid, done, fail, up, at = now
    return physics.counters_refusal(pid0, done0, fail0, up0, at0, pid, done, fail, up, at,
                                    CEIL_4090)  # fmt: skip


@pytest.mark.parametrize(
    ("case", "now", "refused"),
    [
        ("nothing new", (100, 10, 0, 110.0, 1060.0), None),
        ("a proof a minute", (100, 11, 0, 110.0, 1060.0), None),
        ("as fast as it could", (100, 10 + 3, 0, 110.0, 1060.0), None),  # 1.6 + slack 2
        ("faster than its GPU", (100, 10 + 4, 0, 110.0, 1060.0), "more than its GPUs"),
        ("a jump to 2^52", (100, 2**52, 0, 110.0, 1060.0), "more than its GPUs"),
        ("failures count as proofs done", (100, 10, 5, 110.0, 1060.0), "more than its GPUs"),
        ("back with the same daemon", (100, 9, 0, 110.0, 1060.0), "went back"),
        ("a restart (new pid) starts at zero", (101, 0, 0, 5.0, 1060.0), None),
        ("a restart (uptime back) starts at zero", (100, 0, 0, 5.0, 1060.0), None),
    ],
)
def test_counters_refusal(case, now, refused) -> None:
    why = refusal(now=now)
    if refused is None:
        assert why is None, why
    else:
        assert why is not None and refused in why


def test_no_last_reading_no_judgement() -> None:
    assert refusal(last=(None, 0, 0, 0.0, None), now=(100, 2**52, 0, 1.0, 0.0)) is None


# ------------------------------------------------------------------ the engine refusing them


async def test_a_benchmark_of_a_billion_proofs_an_hour_is_refused_and_struck(world: World, store):
    engine, iid = await rent_one(world, store)
    rec = await store.instances.get(iid)
    for stage in ("setup", "paramfetch", "benchmark"):
        await engine.handle_worker_event(iid, parse_event({"stage": stage, "event": "start"}))
    event = result("pass", 1e9)
    event["result"].update(proofs_completed=12, window_seconds=1800.0)
    await engine.handle_worker_event(iid, parse_event(event))
    rec = await store.instances.get(iid)
    assert rec.killed and rec.kill_kind == "bench_implausible"
    assert "1e+09 proofs/h is above what" in rec.kill_reason
    assert rec.bench_rate is None and iid not in world.cloud.instances
    assert await store.perf.of_machine(rec.machine_id) == [], "not in the performance record"
    assert [s.kind for s in await store.badlist.strikes(rec.machine_id)] == ["bench_implausible"]
    offers = await engine.refresh_offers(force=True)
    mine = [r for r in offers if r.offer.machine_id == rec.machine_id]
    assert all(r.known_rate is None for r in mine), "the ranking never saw it"
    await engine.close()


async def test_counters_that_lie_are_kept_out_of_production_and_end_the_worker(world, store):
    engine, iid = await rent_one(world, store)
    await _to_proving(engine, store, iid)
    rec = await store.instances.get(iid)
    done = 13
    for minute in range(10):  # honest: a proof every two minutes
        world.clock.advance(60)
        done += minute % 2
        assert await engine.handle_counters(
            iid, Reading.parse(raw(done, pid=77, uptime=600 + 60 * minute))
        )
    honest = (await store.instances.get(iid)).prod_completed
    assert honest == 5
    lies = [raw(2**52, pid=77, uptime=1300), raw(done - 4, pid=77, uptime=1400),
            raw(done + 500, pid=77, uptime=1500)]  # fmt: skip
    for n, lie in enumerate(lies, 1):
        world.clock.advance(60)
        await engine.handle_counters(iid, Reading.parse(lie))
        rec = await store.instances.get(iid)
        assert rec.prod_completed == honest, "a refused reading counts nothing"
        assert len(ProdState.from_json(rec.prod_state).refusals) == n or rec.killed
    assert rec.killed and rec.kill_kind == "prove_implausible"
    assert "3 counter readings refused" in rec.kill_reason
    assert "more than its GPUs could prove" in rec.kill_reason
    assert [s.kind for s in await store.badlist.strikes(rec.machine_id)] == ["prove_implausible"]
    await engine.close()
