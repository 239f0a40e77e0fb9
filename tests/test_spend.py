"""Spend as pure functions of instance records: storage, GPU time and bandwidth as Vast bills
them; today, since start, rejected."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from vastui.domain.plan import PARAMS_GB, PROOF_UP_GB, REQUEST_GB
from vastui.domain.worker import InstanceRecord
from vastui.engine.spend import (
    bandwidth_cost,
    billed_interval,
    fleet_spend,
    instance_cost,
    is_rejected,
    local_midnight,
    running_since,
    time_cost,
)

H = 3600.0
DAY0 = datetime(2026, 11, 30, tzinfo=UTC).timestamp()  # the day boundary in these tests
NOW = DAY0 + 10 * H


def inst(vid: int, **kw: Any) -> InstanceRecord:
    base: dict[str, Any] = dict(label=f"vastui-main-{vid:012x}", dph_total=0.5, state="proving")
    base.update(kw)
    return InstanceRecord(vast_id=vid, **base)


def killed(vid: int, start: float, end: float, kind: str, proving_at: float | None = None,
           **kw: Any) -> InstanceRecord:  # fmt: skip
    return inst(vid, state="killed", created_at=start, killed_at=end, kill_kind=kind,
                proving_at=proving_at, **kw)  # fmt: skip


COST_CASES = [
    # (case, record, since, dollars)
    ("alive: billed up to now", inst(1, created_at=NOW - 2 * H), None, 1.0),
    ("alive since yesterday, today only", inst(2, created_at=DAY0 - 5 * H), DAY0, 5.0),
    ("killed: billed up to its kill", killed(3, NOW - 3 * H, NOW - 1 * H, "manual"), None, 1.0),
    ("killed yesterday costs nothing today", killed(4, DAY0 - 3 * H, DAY0 - H, "manual"), DAY0,
     0.0),
    ("no created_at: from loading_at", inst(5, loading_at=NOW - H), None, 0.5),
    ("no start at all", inst(6), None, 0.0),
    ("killed without a kill time: up to last seen",
     inst(7, state="killed", created_at=NOW - 4 * H, last_seen_at=NOW - 3 * H), None, 0.5),
    ("killed, no end known", inst(8, state="killed", created_at=NOW - 4 * H), None, 0.0),
    ("no price", inst(9, created_at=NOW - H, dph_total=None), None, 0.0),
    ("a clock behind the start bills nothing", inst(10, created_at=NOW + H), None, 0.0),
]  # fmt: skip


@pytest.mark.parametrize(("case", "rec", "since", "dollars"), COST_CASES,
                         ids=[c[0] for c in COST_CASES])  # fmt: skip
def test_instance_cost(case: str, rec: InstanceRecord, since: float | None, dollars: float):
    assert instance_cost(rec, NOW, since=since) == pytest.approx(dollars)


def test_billed_interval_of_an_alive_instance_runs_to_now():
    assert billed_interval(inst(1, created_at=NOW - H), NOW) == (NOW - H, NOW)
    assert billed_interval(inst(1, created_at=NOW - H), NOW + H) == (NOW - H, NOW + H)


REJECTED_CASES = [
    # (case, record, rejected)
    ("alive", inst(1, created_at=NOW), False),
    ("benchmark below its rate", killed(2, 0, 1, "bench_below_min"), True),
    ("param fetch deadline", killed(3, 0, 1, "deadline_paramfetch"), True),
    ("setup failed", killed(4, 0, 1, "setup_failed"), True),
    ("banned before proving", killed(5, 0, 1, "bad_machine"), True),
    ("destroyed by hand before proving", killed(6, 0, 1, "manual"), True),
    ("vanished before proving", killed(7, 0, 1, "vanished"), True),
    ("proved, then slow in production", killed(8, 0, 1, "prove_below_min", proving_at=0.5), False),
    ("proved, then its daemon died", killed(9, 0, 1, "prove_daemon_died", proving_at=0.5), False),
    ("proved, destroyed by hand", killed(10, 0, 1, "manual", proving_at=0.5), False),
    ("a gate kind after proving (legacy rows)", killed(11, 0, 1, "bench_below_min",
     proving_at=0.5), True),
    ("a stage failure after proving", killed(12, 0, 1, "benchmark_failed", proving_at=0.5), True),
]  # fmt: skip


@pytest.mark.parametrize(("case", "rec", "rejected"), REJECTED_CASES,
                         ids=[c[0] for c in REJECTED_CASES])  # fmt: skip
def test_is_rejected(case: str, rec: InstanceRecord, rejected: bool):
    assert is_rejected(rec) is rejected


def test_fleet_spend_today_total_rejected():
    records = [
        inst(1, created_at=NOW - 2 * H),  # alive: $1.00 today
        inst(2, created_at=DAY0 - 4 * H, dph_total=0.25),  # alive since yesterday: $3.50, $2.50
        killed(3, DAY0 - 2 * H, DAY0 + H, "bench_below_min"),  # rejected: $1.50, $0.50 today
        killed(4, NOW - 3 * H, NOW - 2 * H, "prove_below_min", proving_at=NOW - 2.5 * H),  # $0.50
        inst(5, state="killed", source="legacy", created_at=0.0, killed_at=NOW),  # not counted
        inst(6, state="proving", source="legacy", created_at=0.0),  # not counted
    ]
    spend = fleet_spend(records, NOW, DAY0)
    assert spend.total == pytest.approx(1.0 + 3.5 + 1.5 + 0.5)
    assert spend.today == pytest.approx(1.0 + 2.5 + 0.5 + 0.5)
    assert spend.rejected == pytest.approx(1.5)
    assert spend.to_json() == {
        "today": 4.5, "total": 6.5, "rejected": 1.5, "draining": 0.0, "bandwidth": 0.0,
        "pool": 0.0, "day_start": DAY0,
    }  # fmt: skip
    later = fleet_spend(records, NOW + H, DAY0)  # the living keep billing, the dead do not
    assert later.total == pytest.approx(spend.total + 0.5 + 0.25)
    assert fleet_spend([], NOW, DAY0).total == 0.0


def test_the_day_boundary_is_a_parameter():
    records = [inst(1, created_at=DAY0 - 2 * H)]
    assert fleet_spend(records, NOW, DAY0).today == pytest.approx(5.0)
    assert fleet_spend(records, NOW, NOW - H).today == pytest.approx(0.5)


@pytest.mark.parametrize("offset_h", [0, 5.5, -8])
def test_local_midnight_in_a_time_zone(offset_h: float):
    tz = timezone(timedelta(hours=offset_h))
    moment = datetime(2026, 11, 30, 23, 59, tzinfo=tz)
    assert local_midnight(moment.timestamp(), tz) == datetime(2026, 11, 30, tzinfo=tz).timestamp()
    just_after = datetime(2026, 12, 1, 0, 0, 1, tzinfo=tz).timestamp()
    assert local_midnight(just_after, tz) == datetime(2026, 12, 1, tzinfo=tz).timestamp()


def test_local_midnight_of_this_machine_is_at_most_a_day_back():
    start = local_midnight(NOW)
    assert NOW - 86400 - 3600 < start <= NOW  # a DST change may make a day 25 hours
    assert datetime.fromtimestamp(start).time().isoformat() == "00:00:00"


def test_a_workers_cost_per_proof_is_measured_else_estimated():
    from vastui.engine.spend import worker_cost_per_proof

    rec = InstanceRecord(vast_id=1, dph_total=0.3, bench_rate=30.0)
    assert worker_cost_per_proof(rec) == (pytest.approx(0.01), True)
    assert worker_cost_per_proof(replace(rec, prod_rate=25.0)) == (pytest.approx(0.012), False)
    for broken in (replace(rec, dph_total=None), replace(rec, bench_rate=0.0),
                   replace(rec, dph_total=-1.0), replace(rec, bench_rate=-5.0)):  # fmt: skip
        assert worker_cost_per_proof(broken) == (None, False)


def test_a_drain_is_counted_from_its_cordon_to_its_destroy():
    from dataclasses import replace

    from vastui.engine.spend import drain_cost

    rec = killed(7, DAY0, DAY0 + 3 * H, "surplus")  # $0.50/h
    assert drain_cost(rec, DAY0 + 4 * H) == 0.0
    rec = replace(rec, drain_started_at=DAY0 + 2.5 * H, proving_at=DAY0 + H)
    assert drain_cost(rec, DAY0 + 4 * H) == pytest.approx(0.25)
    assert fleet_spend([rec], DAY0 + 4 * H, DAY0).draining == pytest.approx(0.25)


# ---------------------------------------------------------------- every cost counted (issue 30)

LOADING_CASES = [
    # (case, record, since, dollars): $0.5/h running, $0.1/h storage
    ("loaded for an hour, ran for two",
     inst(20, created_at=NOW - 3 * H, running_at=NOW - 2 * H, storage_dph=0.1), None, 1.1),
    ("today: only the running part after the boundary",
     inst(21, created_at=DAY0 - 2 * H, running_at=DAY0 - H, storage_dph=0.1), DAY0, 5.0),
    ("killed while loading: storage throughout",
     killed(22, NOW - 2 * H, NOW, "deadline_loading", storage_dph=0.1, failed_stage="loading"),
     None, 0.2),
    ("still loading: storage so far",
     inst(23, state="loading", created_at=NOW - H, storage_dph=0.1), None, 0.1),
    ("an older row past loading, no running_at: the ceiling",
     inst(24, created_at=NOW - 2 * H, setup_at=NOW - H, storage_dph=0.1), None, 1.0),
    ("no storage price known: the ceiling", inst(25, created_at=NOW - 2 * H,
     running_at=NOW - H), None, 1.0),
]  # fmt: skip


@pytest.mark.parametrize(("case", "rec", "since", "dollars"), LOADING_CASES,
                         ids=[c[0] for c in LOADING_CASES])  # fmt: skip
def test_time_cost_bills_storage_until_the_instance_runs(
    case: str, rec: InstanceRecord, since: float | None, dollars: float
) -> None:
    assert time_cost(rec, NOW, since=since) == pytest.approx(dollars)


RUNNING_CASES = [
    # (case, created_at, uptime_mins, running_since)
    ("uptime since it ran", NOW - H, 30.0, NOW - 1800.0),
    ("uptime since its creation (the other reading): its creation", NOW - H, 60.0, NOW - H),
    ("uptime beyond its creation: bounded by it", NOW - H, 600.0, NOW - H),
    ("no uptime: its creation, the ceiling", NOW - H, None, NOW - H),
    ("a negative uptime cannot be later than now", NOW - H, -5.0, NOW),
]  # fmt: skip


@pytest.mark.parametrize(("case", "created", "uptime", "expected"), RUNNING_CASES,
                         ids=[c[0] for c in RUNNING_CASES])  # fmt: skip
def test_running_since_is_bounded_by_creation_and_now(
    case: str, created: float, uptime: float | None, expected: float
) -> None:
    assert running_since(inst(30, created_at=created), uptime, NOW) == pytest.approx(expected)


def _work(done: int, failed: int = 0, held: int = 0) -> str:
    return json.dumps({"done_total": done, "failed_total": failed,
                       "held_by_name": {"PSProve": held, "PShareSubmit": 4}})  # fmt: skip


DOWN, UP = 0.02, 0.01  # $/GB
BANDWIDTH_CASES = [
    # (case, record, since, dollars)
    ("parameters fetched, no request yet",
     inst(40, paramfetch_at=NOW - 2 * H, benchmark_at=NOW - H), None, PARAMS_GB * DOWN),
    ("parameters half-way: what the link carried (1000 Mbit/s for 60 s = 7.5 GB)",
     inst(41, state="paramfetch", paramfetch_at=NOW - 60, inet_down=1000.0), None, 7.5 * DOWN),
    ("a fetch longer than the files: all of them",
     inst(42, state="paramfetch", paramfetch_at=NOW - 10 * H, inet_down=1000.0), None,
     PARAMS_GB * DOWN),
    ("requests done, failed and held are downloaded; the done ones uploaded",
     inst(43, paramfetch_at=NOW - 3 * H, proving_at=NOW - 2 * H,
          cluster_state=_work(10, 2, 3)), None,
     PARAMS_GB * DOWN + 15 * REQUEST_GB * DOWN + 10 * PROOF_UP_GB * UP),
    ("today: the parameters were yesterday, half the proving time is today",
     inst(44, paramfetch_at=DAY0 - 3 * H, proving_at=DAY0 - 2 * H, killed_at=DAY0 + 2 * H,
          state="killed", cluster_state=_work(10)), DAY0,
     0.5 * (10 * REQUEST_GB * DOWN + 10 * PROOF_UP_GB * UP)),
    ("a window that covers half the fetch: what the link carried in it (1000 Mbit/s: 150 s "
     "before it, 18.75 GB)",
     inst(51, paramfetch_at=NOW - H - 150, benchmark_at=NOW - 30 * 60, inet_down=1000.0),
     NOW - H, (PARAMS_GB - 18.75) * DOWN),
    ("the parameters leave a window as they came, not at once",
     inst(52, paramfetch_at=NOW - H - 600, benchmark_at=NOW - H + 540, inet_down=1000.0),
     NOW - H, (PARAMS_GB - 75.0) * DOWN),
    ("a link slower than listed: the rest when the fetch ended",
     inst(54, paramfetch_at=NOW - H - 600, benchmark_at=NOW - H + 540, inet_down=100.0),
     NOW - H, (PARAMS_GB - 7.5) * DOWN),
    ("started again from the warm pool: found on its disk, billed once, when first fetched",
     inst(53, paramfetch_at=NOW - 10 * 60, benchmark_at=NOW - 3 * H), NOW - H, 0.0),
    ("no per-GB price: nothing", inst(45, benchmark_at=NOW, inet_down_cost=None,
     inet_up_cost=None, cluster_state=_work(10)), None, 0.0),
    ("a cluster reading that is not ours to trust counts nothing",
     inst(46, cluster_state='{"done_total": -5, "failed_total": true, "held_by_name": []}'),
     None, 0.0),
    ("a broken reading counts nothing", inst(47, cluster_state="{not json"), None, 0.0),
    ("the work before a restart is carried (curio's count starts again)",
     inst(48, cluster_state=_work(4), requests_carried=6, proofs_carried=5), None,
     10 * REQUEST_GB * DOWN + 9 * PROOF_UP_GB * UP),
    ("killed before the window: nothing today",
     inst(49, state="killed", killed_at=DAY0 - H, paramfetch_at=DAY0 - 3 * H,
          proving_at=DAY0 - 2 * H, cluster_state=_work(10)), DAY0, 0.0),
]  # fmt: skip


@pytest.mark.parametrize(("case", "rec", "since", "dollars"), BANDWIDTH_CASES,
                         ids=[c[0] for c in BANDWIDTH_CASES])  # fmt: skip
def test_bandwidth_is_billed_at_the_offers_price_per_gb(
    case: str, rec: InstanceRecord, since: float | None, dollars: float
) -> None:
    priced = rec if "no per-GB" in case else replace(rec, inet_down_cost=DOWN, inet_up_cost=UP)
    assert bandwidth_cost(priced, NOW, since=since) == pytest.approx(dollars)


def test_instance_cost_is_time_and_bandwidth() -> None:
    rec = inst(50, created_at=NOW - 2 * H, running_at=NOW - H, storage_dph=0.1,
               benchmark_at=NOW - H, inet_down_cost=DOWN, inet_up_cost=UP)  # fmt: skip
    assert instance_cost(rec, NOW) == pytest.approx(0.1 + 0.5 + PARAMS_GB * DOWN)


def test_a_restart_carries_the_work_counted_so_far() -> None:
    from vastui.engine.spend import carried_work, cluster_work

    rec = inst(60, cluster_state=_work(10, 2, 3), requests_carried=4, proofs_carried=1)
    assert cluster_work(rec) == (19, 11)
    after = replace(rec, cluster_state=None, **carried_work(rec))  # its count starts again
    assert cluster_work(after) == (19, 11)


def test_a_window_costs_the_same_before_and_after_a_stop_closes() -> None:
    """A worker stopped in the warm pool for the last 50 minutes of a five-hour rental, then
    started again: the hour's cost must not change when its stop closes (the closed stop was
    spread over the whole rental: $0.42 appeared in the window at once in a recorded run)."""
    from vastui.engine.spend import closed_stop, stop_episodes

    pooled = inst(60, created_at=NOW - 5 * H, running_at=NOW - 5 * H, storage_dph=0.05,
                  pooled_since=NOW - 50 * 60, stopped_s=1800.0)  # fmt: skip
    before = instance_cost(pooled, NOW, since=NOW - H)
    resumed = replace(pooled, pooled_since=None, **closed_stop(pooled, NOW - 50 * 60, NOW))
    assert resumed.stopped_s == 1800.0 + 3000.0
    assert stop_episodes(resumed.stops) == ((NOW - 50 * 60, NOW),)
    assert instance_cost(resumed, NOW, since=NOW - H) == pytest.approx(before)
    # 50 stopped minutes in the hour, and a fifth of the older half hour (spread over the five
    # hours, as before); the rest running
    stopped = 3000.0 + 1800.0 / 5
    assert before == pytest.approx((0.5 * (H - stopped) + 0.05 * stopped) / H)
    assert instance_cost(resumed, NOW) == pytest.approx(instance_cost(pooled, NOW))


def test_kept_stops_are_bounded_and_only_what_they_say() -> None:
    from vastui.engine.spend import STOPS_KEPT, closed_stop, stop_episodes

    rec = inst(61)
    for i in range(STOPS_KEPT + 5):
        rec = replace(rec, **closed_stop(rec, NOW + 10 * i, NOW + 10 * i + 5))
    assert len(stop_episodes(rec.stops)) == STOPS_KEPT and rec.stopped_s == 5 * (STOPS_KEPT + 5)
    for junk in ("[[1, 2, 3]]", "[[2, 1]]", '[["a", 1]]', "[[1e400, 2]]", "{", "[true]"):
        assert stop_episodes(junk) == ()


async def test_a_start_from_the_warm_pool_does_not_fetch_the_parameters_again(
    tmp_path: Path,
) -> None:
    """A pooled worker started again passes through paramfetch and benchmark anew (its stage
    times move on), finding its parameters on its disk: their bandwidth stays where the first
    fetch put it (in a recorded run they moved to the restart, \\$0.38 into a window at once)."""
    from vastui.store import Store

    t0 = NOW - 5 * H
    rec = inst(70, state="loading", created_at=t0, inet_down=1000.0, inet_down_cost=DOWN)
    async with await Store.open(tmp_path / "s.db") as store:
        await store.instances.upsert(rec, now=t0)
        for stage, at in (("paramfetch", t0 + 60), ("benchmark", t0 + 1500),
                          ("proving", t0 + 3000)):  # fmt: skip
            await store.instances.set_stage(70, stage, now=at)
        first = await store.instances.get(70)
        for stage, at in (("loading", NOW - 600), ("paramfetch", NOW - 500),
                          ("benchmark", NOW - 480), ("proving", NOW - 300)):  # fmt: skip
            await store.instances.set_stage(70, stage, now=at)
        again = await store.instances.get(70)
    assert (again.params_from, again.params_to) == (t0 + 60, t0 + 1500)
    assert again.paramfetch_at == NOW - 500  # the stage times move on
    assert bandwidth_cost(again, NOW, since=NOW - H) == 0.0
    assert bandwidth_cost(again, NOW) == pytest.approx(PARAMS_GB * DOWN)
    assert bandwidth_cost(first, t0 + 3000) == pytest.approx(PARAMS_GB * DOWN)
