"""`vastui status`: the report gathered from the store, and its plain lines."""

from __future__ import annotations

import json
from typing import Any

import pytest

from vastui.domain.engine_state import EngineStatus
from vastui.domain.worker import InstanceRecord
from vastui.status import gather, limits, render
from vastui.store import Store

H = 3600.0
DAY0 = 1_796_000_400.0  # the day boundary passed in (2026-11-30T00:20:00Z, any value will do)
NOW = DAY0 + 10 * H
WALL = 1_800_000_000.0  # the lease is wall-clock, apart from the engine's clock


def report(**kw: Any) -> dict[str, Any]:
    engine = {
        "target": 3,
        "workers": 2,
        "by_stage": {"proving": 2},
        "reason_kind": "no_viable_offer",
        "reason": "no viable offer: best 123 RTX 4090 $0.0091/proof > max $0.0080",
        "best": {"offer_id": 123},
        "dry_run": False,
        "updated_at": "2026-11-30T10:20:00Z",
        "reason_since": "2026-11-30T10:00:00Z",
    }
    engine.update(kw.pop("engine", {}))
    base: dict[str, Any] = {
        "now": "2026-11-30T10:20:00Z",
        "live": True,
        "engine": engine,
        "engine_seen_age_s": 3.0,
        "lease": {"mode": "headless", "pid": 4242, "hostname": "ctl", "heartbeat_age_s": 3.2},
        "stages": {"proving": 2, "killed": 1},
        "spend": {"today": 1.234, "total": 4.56, "rejected": 0.78, "day_start": DAY0},
    }
    base.update(kw)
    return base


RENDER_CASES = [
    ("below target", report(), "workers 2/3 (proving 2)  below target: no viable offer: best 123 "
     "RTX 4090 $0.0091/proof > max $0.0080"),
    ("at target", report(engine={"workers": 3, "by_stage": {"benchmark": 1, "proving": 2},
     "reason_kind": "at_target", "reason": "at target: 3/3 workers"}),
     "workers 3/3 (benchmark 1, proving 2)  at target: 3/3 workers"),
    ("renting, a rent in flight", report(engine={"by_stage": {"loading": 1}, "reason_kind": None,
     "reason": None}), "workers 2/3 (loading 1, renting 1)  renting towards the target"),
    ("dry run", report(engine={"workers": 0, "by_stage": {}, "dry_run": True,
     "reason_kind": "dry_run", "reason": "dry run: 3 would-be rent(s) stand in"}),
     "workers 0/3  below target: dry run: 3 would-be rent(s) stand in  [dry-run]"),
    ("target zero", report(engine={"target": 0, "workers": 0, "by_stage": {},
     "reason_kind": "target_zero", "reason": "target is 0 workers: nothing is rented"}),
     "workers 0/0  target is 0 workers: nothing is rented"),
    ("no engine yet", report() | {"engine": None},
     "workers: no status yet (no engine has run a cycle on this database)"),
    # Issue 17: without a live engine the last published status is history, never the fleet now.
    ("engine gone", report(live=False, lease=None, engine_seen_age_s=300.0,
     engine={"workers": 3, "by_stage": {"proving": 3}, "reason_kind": "at_target",
     "reason": "at target: 3/3 workers"}),
     "fleet as last seen by its engine 5m ago: workers 3/3 (proving 3); then at target: 3/3 "
     "workers (not watched now)"),
    ("engine gone, never dated", report(live=False, lease=None, engine_seen_age_s=None),
     "fleet as last seen by its engine at an unknown time: workers 2/3 (proving 2); then below "
     "target: no viable offer: best 123 RTX 4090 $0.0091/proof > max $0.0080 (not watched now)"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "rep", "line"), RENDER_CASES, ids=[c[0] for c in RENDER_CASES])
def test_render_workers_line(case: str, rep: dict[str, Any], line: str) -> None:
    assert render(rep).splitlines()[1] == line


def test_render_is_three_plain_lines() -> None:
    assert render(report()).splitlines() == [
        "engine: headless (pid 4242 on ctl), heartbeat 3s ago",
        "workers 2/3 (proving 2)  below target: no viable offer: best 123 RTX 4090 "
        "$0.0091/proof > max $0.0080",
        "spend $1.23 today, $4.56 since start, $0.78 on rejected workers",
    ]
    assert render(report(lease=None, live=False, engine_seen_age_s=7300.0)).splitlines()[0] == (
        "engine: none running (no live lease on this database); last seen 2.0h ago"
    )


def test_render_names_the_money_limits_the_engine_published() -> None:
    engine = {"workers": 2, "target": 3, "by_stage": {"proving": 2}, "reason_kind": "daily_budget",
              "reason": "daily budget reached: $50.00 spent today (UTC) of $50.00",
              "daily_budget": 50.0, "dph": 0.84, "dph_cap": 5.0, "credit": 12.345}  # fmt: skip
    assert render(report(engine=engine)).splitlines()[2] == (
        "spend $1.23 today, $4.56 since start, $0.78 on rejected workers; daily budget $50.00 "
        "(UTC); $0.84/h of $5.00/h cap; credit $12.35"
    )
    assert limits({"credit": None, "dph_cap": 5.0}) == ["$5.00/h cap"]
    assert limits({"credit": True, "daily_budget": "50"}) == []  # what a row cannot hold


def _inst(vid: int, **kw: Any) -> InstanceRecord:
    return InstanceRecord(vast_id=vid, label=f"vastui-main-{vid:012x}", dph_total=0.5, **kw)


async def test_gather_reads_the_status_spend_stages_and_lease(store: Store) -> None:
    await store.instances.upsert(
        _inst(1, state="proving", created_at=NOW - 2 * H, proving_at=NOW - H), now=NOW
    )
    await store.instances.upsert(_inst(2, created_at=DAY0 - 2 * H), now=NOW)
    await store.mark_killed(2, "bench_below_min", "benchmark below_min", now=DAY0 + H)
    await store.instances.upsert(_inst(3, source="legacy", state="legacy", created_at=0.0), now=NOW)
    await store.status.put(
        EngineStatus(target=3, workers=1, by_stage={"proving": 1}, reason_kind="fleet_dph_cap",
                     reason="fleet $/h cap: ...", best=None, dry_run=False, updated_at=NOW)
    )  # fmt: skip
    await store.lease.acquire("me", pid=77, hostname="ctl", mode="headless", ttl=30, now=WALL)

    rep = await gather(store, NOW, day_start=DAY0, wall_now=WALL + 5)
    assert json.loads(json.dumps(rep)) == rep, "the report is the --json form"
    assert rep["engine"]["reason_kind"] == "fleet_dph_cap" and rep["engine"]["workers"] == 1
    assert rep["stages"] == {"proving": 1, "killed": 1}, "legacy rows are not vastui's fleet"
    # 1: $1.00 (all today); 2: 3 h = $1.50, $0.50 of it today, rejected.
    assert rep["spend"] == {
        "today": 1.5, "total": 2.5, "rejected": 1.5, "draining": 0.0, "bandwidth": 0.0,
        "pool": 0.0, "day_start": DAY0,
    }  # fmt: skip
    assert rep["lease"] == {"mode": "headless", "pid": 77, "hostname": "ctl",
                            "heartbeat_age_s": 5.0}  # fmt: skip
    lines = render(rep).splitlines()
    assert lines[0] == "engine: headless (pid 77 on ctl), heartbeat 5s ago"
    assert lines[1] == "workers 1/3 (proving 1)  below target: fleet $/h cap: ..."
    # no headline published yet (the engine counts it each step): nothing rather than a guess
    assert lines[2] == "spend $1.50 today, $2.50 since start, $1.50 on rejected workers"
    # The lease lapsed: no engine is running, and the report says so, with the status's age.
    gone = await gather(store, NOW, day_start=DAY0, wall_now=WALL + 31)
    assert gone["lease"] is None and gone["live"] is False
    assert render(gone).splitlines()[1].startswith("fleet as last seen by its engine")
    assert "; then below target: fleet $/h cap" in render(gone)


async def test_one_clock_in_every_answer(store: Store) -> None:
    """Issue 17: a simulated engine's status (the demo) dates the whole report on its clock,
    `now` included, whatever the wall clock says; a real engine's, on the wall clock, where its
    instances go on billing while no engine runs."""
    sim_now = NOW  # the simulated clock runs days ahead of the wall
    await store.status.put(
        EngineStatus(target=1, workers=1, by_stage={"proving": 1}, reason_kind="at_target",
                     reason="at target", best=None, dry_run=False, updated_at=sim_now,
                     wall_at=WALL, simulated=True)
    )  # fmt: skip
    rep = await gather(store, wall_now=WALL + 600)
    assert rep["now"] == rep["engine"]["updated_at"] == "2026-11-30T11:00:00Z"
    assert rep["engine_seen_age_s"] == 600.0 and rep["engine"]["simulated_clock"] is True
    await store.status.put(
        EngineStatus(target=1, workers=1, by_stage={"proving": 1}, reason_kind="at_target",
                     reason="at target", best=None, dry_run=False, updated_at=WALL,
                     wall_at=WALL, simulated=False)
    )  # fmt: skip
    rep = await gather(store, wall_now=WALL + 600)
    assert rep["now"] == "2027-01-15T08:10:00Z"  # WALL + 600 s


async def test_gather_on_an_empty_database(store: Store) -> None:
    rep = await gather(store, NOW, wall_now=WALL)
    assert rep["engine"] is None and rep["lease"] is None and rep["stages"] == {}
    assert rep["spend"]["total"] == 0.0 and NOW - 25 * H < rep["spend"]["day_start"] <= NOW
    assert render(rep).splitlines() == [
        "engine: none running (no live lease on this database)",
        "workers: no status yet (no engine has run a cycle on this database)",
        "spend $0.00 today, $0.00 since start, $0.00 on rejected workers",
    ]


async def test_an_engine_killed_on_this_host_is_not_live(store: Store) -> None:
    """Its lease row outlives it until the TTL lapses; its pid is gone at once: status says
    the engine is gone, not that the fleet is live."""
    import socket

    await store.status.put(
        EngineStatus(target=1, workers=1, by_stage={"proving": 1}, reason_kind="at_target",
                     reason="at target", best=None, dry_run=False, updated_at=WALL,
                     wall_at=WALL)
    )  # fmt: skip
    dead_pid = 2**22 + 12345  # above pid_max's default: no such process
    await store.lease.acquire("x", pid=dead_pid, hostname=socket.gethostname(), mode="headless",
                              ttl=30, now=WALL)  # fmt: skip
    rep = await gather(store, wall_now=WALL + 2)
    assert rep["live"] is False and rep["lease"] is None
    assert render(rep).splitlines()[1].startswith("fleet as last seen by its engine 2s ago")
