"""One headline (vastui/domain/delivery.py): delivered proofs/h and $ per paid proof over a stated
window, capacity apart, computed once by the engine (vastui/engine/delivery.py) and shown the
same by the strip, `vastui status`, the metrics and the detail; a stopped worker (the warm pool,
an outbid bid) is never counted as proving anywhere, and its disk is a line of its own."""

from __future__ import annotations

import os
import re
import socket
from dataclasses import replace
from pathlib import Path

import pytest

from tests.helpers import e2e_config
from vastui.console.detailtext import production_text
from vastui.console.snapshot import Snapshot
from vastui.console.summary import StripState, strip_text
from vastui.domain.delivery import CLUSTER, CUZK, Delivery
from vastui.domain.engine_state import EngineStatus
from vastui.domain.worker import InstanceRecord
from vastui.engine import delivery
from vastui.engine.delivery import ClusterCount, worker_share
from vastui.engine.monitor import Monitor, StepFacts
from vastui.engine.production import ProdState
from vastui.engine.spend import instance_cost
from vastui.metrics import FleetCollector
from vastui.status import gather, render
from vastui.store import Store

NOW = 1_790_000_000.0
H = 3600.0


def rec(vast_id: int, state: str, dph: float, **kw: object) -> InstanceRecord:
    return InstanceRecord(
        vast_id=vast_id, label=f"vastui-main-{vast_id:012x}", state=state, dph_total=dph,
        created_at=NOW - 2 * H, running_at=NOW - 2 * H + 600, storage_dph=0.02,
        **kw,  # type: ignore[arg-type]
    )  # fmt: skip


# two proving workers (one measured in production, one by its benchmark only), one stopped in
# the warm pool (its stored state is still "proving"), one benchmarking, one destroyed within
# the window and one destroyed long before it
FLEET = [
    rec(1, "proving", 0.52, proving_at=NOW - H, prod_completed=40, prod_failed=0,
        prod_rate=41.0, bench_rate=40.0, max_pending=3),
    rec(2, "proving", 0.31, proving_at=NOW - 50 * 60, prod_completed=17, prod_failed=1,
        bench_rate=21.0),
    rec(3, "proving", 0.44, proving_at=NOW - 90 * 60, bench_rate=30.0, prod_rate=29.0,
        pooled_since=NOW - 20 * 60),
    rec(4, "benchmark", 0.25),
    rec(5, "killed", 0.40, proving_at=NOW - 80 * 60, killed_at=NOW - 30 * 60,
        failed_stage="proving", kill_kind="surplus", bench_rate=25.0),
    rec(6, "killed", 0.40, killed_at=NOW - 5 * H, failed_stage="benchmark",
        kill_kind="bench_below_min"),
]  # fmt: skip
COUNT = ClusterCount(fleet_done=52, cluster_done=52, paid=48, challenges=2)
WINDOW = H


def headline() -> Delivery:
    return delivery.compute(FLEET, NOW, WINDOW, COUNT)


def test_the_definition() -> None:
    d = headline()
    assert (d.source, d.computed, d.paid, d.challenges) == (CLUSTER, 52, 48.0, 2)
    assert d.proofs_per_hour == pytest.approx(52.0)
    # every dollar billed over the window, the stopped and the destroyed workers' too, none of
    # the one destroyed before it
    billed = sum(instance_cost(r, NOW, since=NOW - WINDOW) for r in FLEET)
    assert d.cost == pytest.approx(billed, abs=1e-6)
    assert instance_cost(FLEET[5], NOW, since=NOW - WINDOW) == 0.0
    assert d.cost_per_paid == pytest.approx(billed / 48)
    # capacity: the proving workers kept full, measured (41) or by benchmark (21); the pooled
    # worker's 29 is not capacity now
    assert (d.capacity, d.capacity_measured, d.proving) == (62.0, 1, 2)
    # the running fleet's $/h without the stopped worker, whose disk is apart
    assert d.dph == pytest.approx(0.52 + 0.31 + 0.25)
    assert (d.stopped, d.stopped_dph) == (1, 0.02)


def test_a_share_of_the_cluster_is_the_fleets_part_of_the_payments() -> None:
    shared = delivery.compute(FLEET, NOW, WINDOW, replace(COUNT, cluster_done=104))
    assert shared.paid == 24.0  # the fleet finished half of the cluster's PSProve tasks


def test_without_a_cluster_cuzk_counts_and_nothing_is_known_paid() -> None:
    points = [[NOW - 70 * 60, 0, 0, 1], [NOW - 30 * 60, 10, 0, 1], [NOW, 31, 0, 1]]
    state = ProdState(samples=[[float(x) for x in p] for p in points])
    fleet = [replace(FLEET[0], prod_state=state.to_json()), *FLEET[1:]]
    d = delivery.compute(fleet, NOW, WINDOW, None)
    assert (d.source, d.computed, d.paid, d.cost_per_paid) == (CUZK, 31, None, None)
    assert d.cost_per_computed == pytest.approx(d.cost / 31)


def test_the_record_round_trips_and_refuses_what_is_not_one() -> None:
    d = headline()
    assert Delivery.from_json(d.to_json()) == d
    assert Delivery.from_json({**d.to_json(), "computed": float("nan")}) is None
    assert Delivery.from_json({**d.to_json(), "source": "guess"}) is None
    assert Delivery.from_json({"computed": 3}) is None
    assert Delivery.from_json("52 p/h") is None


def figure(pattern: str, text: str) -> float:
    found = re.search(pattern, text)
    assert found, f"{pattern!r} not in {text!r}"
    return float(found.group(1))


async def test_strip_status_metrics_and_detail_show_one_headline(tmp_path: Path) -> None:
    d = headline()
    engine = EngineStatus(
        target=3, workers=3, by_stage={"proving": 2, "benchmark": 1}, reason_kind="at_target",
        reason="at target", best=None, dry_run=False, updated_at=NOW, dph=d.dph, delivery=d,
    )  # fmt: skip
    # the strip
    snap = Snapshot(instances=FLEET, engine_status=engine)
    strip = strip_text(StripState(snap, engine, None, (), None)).plain
    assert figure(r"(\d+) p/h", strip) == 52
    assert figure(r"\$(\d+\.\d+)/paid", strip) == pytest.approx(d.cost_per_paid, abs=5e-5)
    assert figure(r"cap (\d+)", strip) == 62
    assert " prove 2 " in strip and " pool 1" in strip, strip
    assert figure(r"\$(\d+\.\d+)/h", strip) == pytest.approx(d.dph, abs=5e-3)
    # `vastui status`, from the store, with an engine live on it
    async with await Store.open(tmp_path / "fleet.db") as store:
        for r in FLEET:
            await store.instances.upsert(r, now=NOW)
        await store.status.put(engine)
        await store.lease.acquire("t", pid=os.getpid(), hostname=socket.gethostname(),
                                  mode="headless", ttl=60.0)  # fmt: skip
        report = await gather(store, NOW)
    said = render(report)
    assert figure(r"delivered: (\d+) proofs/h", said) == 52
    assert figure(r"\$(\d+\.\d+) per paid proof", said) == pytest.approx(d.cost_per_paid, abs=5e-5)
    assert figure(r"capacity: (\d+) proofs/h", said) == 62
    assert report["stages"].get("proving") == 2 and report["stages"].get("pooled") == 1
    assert "1 stopped in the warm pool" in said and "1 stopped (warm pool, outbid)" in said
    # the metrics, as the engine's monitor samples them
    monitor = Monitor(e2e_config(), collector=FleetCollector())
    sample = monitor._sample(StepFacts(now=NOW, status=engine), FLEET, 0)
    assert sample.delivery == d
    stages = {w.label: w.stage for w in sample.workers}
    assert stages[FLEET[2].label] == "pooled"
    assert sample.fleet_dollars_per_hour == pytest.approx(d.dph)
    # the detail: the same fleet figures, and each worker's part of them
    text = production_text(FLEET[0], lambda _t: "now", worker_share(FLEET[0], d, 30), None, H)
    assert text is not None
    share = worker_share(FLEET[0], d, 30)
    assert share.paid == pytest.approx(30 * 48 / 52, abs=1e-3)
    assert figure(r"(\d+) delivered in the last 60 min", text.plain) == 30
    assert figure(r"at \$(\d+\.\d+)/paid", text.plain) == pytest.approx(
        share.cost_per_paid, abs=5e-5
    )
    assert "kept full it proves 41.0/h (measured)" in text.plain


def test_a_stopped_worker_is_never_counted_as_proving() -> None:
    pooled, outbid = FLEET[2], replace(FLEET[1], outbid_since=NOW - 60, is_bid=True)
    assert (pooled.state, pooled.phase) == ("proving", "pooled")
    assert (outbid.state, outbid.phase) == ("proving", "outbid")
    counts = Snapshot(instances=[pooled, outbid, FLEET[0]]).counts()
    assert (counts["running"], counts["pooled"], counts["outbid"]) == (1, 1, 1)
    assert pooled.to_json()["phase"] == "pooled"
    d = delivery.compute([pooled, outbid, FLEET[0]], NOW, WINDOW, COUNT)
    assert (d.proving, d.stopped) == (1, 2)


def test_an_unfed_worker_is_not_measuring_for_ever() -> None:
    """A worker proving for hours that the market never filled (its MaxPending 10, four proofs
    in flight): its pace on the work it was given is measured, its capacity is its benchmark's,
    said so, with how long it was fed, instead of 'measuring the rate (10 min of proving)'."""
    from vastui.engine import production
    from vastui.engine.production import Reading

    state = ProdState()
    for m in range(61):  # 12 proofs an hour with 4 of a full 9 in flight
        reading = Reading.parse({"alive": True, "daemon_pid": 77, "status": {
            "uptime_secs": 600 + m * 60, "counters": {"total_completed": 12 * m // 60,
            "total_failed": 0, "queue_depth": 0}, "pipelines": [{}] * 4}})  # fmt: skip
        state = production.fold(state, reading, NOW - H + m * 60, H, (None, 0, 0), 9)
    m = production.measure(state, NOW, H)
    assert m.rate is None, "never fed: no rate to judge it by"
    assert m.worked_rate == pytest.approx(12.0, rel=0.1)
    worker = replace(FLEET[1], prod_completed=199, max_pending=10)
    text = production_text(worker, lambda _t: "now", worker_share(worker, headline(), 12), m, H)
    assert text is not None
    assert "measuring" not in text.plain
    paced = figure(r"(\d+\.\d)/h on the work it was given", text.plain)
    assert paced == pytest.approx(m.worked_rate, abs=0.05)
    # it had work from its first proof on (before that its pipeline filled): most of the hour
    assert figure(r"it had work (\d+)% of the time", text.plain) == round(100 * m.worked_s / H)
    assert m.worked_s > 0.85 * H
    assert "kept full it proves 21.0/h (its benchmark" in text.plain
    assert "0 min of the last 60 so far" in text.plain
