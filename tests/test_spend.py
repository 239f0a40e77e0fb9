"""Spend as pure functions of instance records: billed time × $/h, today, since start, rejected."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from vastui.domain.worker import InstanceRecord
from vastui.engine.spend import (
    billed_interval,
    fleet_spend,
    instance_cost,
    is_rejected,
    local_midnight,
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
        "today": 4.5, "total": 6.5, "rejected": 1.5, "draining": 0.0, "day_start": DAY0,
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

    from vastui.engine.spend import drain_cost, proof_costs

    rec = killed(7, DAY0, DAY0 + 3 * H, "surplus")  # $0.50/h
    assert drain_cost(rec, DAY0 + 4 * H) == 0.0
    rec = replace(rec, drain_started_at=DAY0 + 2.5 * H, proving_at=DAY0 + H)
    assert drain_cost(rec, DAY0 + 4 * H) == pytest.approx(0.25)
    assert fleet_spend([rec], DAY0 + 4 * H, DAY0).draining == pytest.approx(0.25)
    # $/proof over the last hour: $0.50 spent proving, 10 proofs done by the fleet out of the
    # cluster's 20, which were paid 8: the fleet's share is 4 paid proofs
    costs = proof_costs([rec], DAY0 + 3 * H, H, fleet_done=10, cluster_done=20, paid=8)
    assert costs.spent == pytest.approx(0.5)
    assert costs.per_computed == pytest.approx(0.05) and costs.per_paid == pytest.approx(0.125)
    none = proof_costs([rec], DAY0 + 3 * H, H, fleet_done=0, cluster_done=20, paid=8)
    assert none.per_computed is None and none.per_paid is None
