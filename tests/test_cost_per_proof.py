"""One $/proof (issue 31 item 4): the strip, `vastui status`, the metric and the detail view
give the same figure over one fixture fleet: the proving workers' $/h over the rate cuzk
measured on them (vastui/engine/spend.py proving_cost); a worker's own is the same over one."""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path

import pytest

from tests.helpers import e2e_config
from vastui.console.detailtext import production_text
from vastui.console.snapshot import Snapshot
from vastui.console.summary import StripState, strip_text
from vastui.domain.engine_state import EngineStatus
from vastui.domain.worker import InstanceRecord
from vastui.engine.monitor import Monitor, StepFacts
from vastui.engine.spend import proving_cost, worker_cost_per_proof
from vastui.metrics import FleetCollector
from vastui.status import gather, render
from vastui.store import Store

NOW = 1_790_000_000.0


def rec(vast_id: int, state: str, dph: float, **kw: object) -> InstanceRecord:
    return InstanceRecord(
        vast_id=vast_id, label=f"vastui-main-{vast_id:012x}", state=state, dph_total=dph,
        created_at=NOW - 7200, **kw,  # type: ignore[arg-type]
    )  # fmt: skip


# two proving workers measured, one proving not yet measured, one benchmarking, one killed
FLEET = [
    rec(1, "proving", 0.52, proving_at=NOW - 3600, prod_completed=40, prod_failed=0,
        prod_rate=41.0, bench_rate=40.0),
    rec(2, "proving", 0.31, proving_at=NOW - 3000, prod_completed=17, prod_failed=1,
        prod_rate=19.5, bench_rate=21.0),
    rec(3, "proving", 0.44, proving_at=NOW - 300, bench_rate=30.0),
    rec(4, "benchmark", 0.25),
]  # fmt: skip
EXPECTED = (0.52 + 0.31) / (41.0 + 19.5)


def dollars(pattern: str, text: str) -> float:
    found = re.search(pattern, text)
    assert found, f"{pattern!r} not in {text!r}"
    return float(found.group(1))


def test_the_definition() -> None:
    cost = proving_cost(FLEET)
    assert cost.per_proof == pytest.approx(EXPECTED)
    assert (cost.measured, cost.proving, cost.rate) == (2, 3, 60.5)
    # a worker's own is the same over one; the fleet's is their rate-weighted mean
    own = [worker_cost_per_proof(r)[0] for r in FLEET[:2]]
    assert own == [pytest.approx(0.52 / 41.0), pytest.approx(0.31 / 19.5)]
    assert own[0] is not None and own[1] is not None
    assert (own[0] * 41.0 + own[1] * 19.5) / 60.5 == pytest.approx(EXPECTED)


async def test_strip_status_metric_and_detail_agree(tmp_path: Path) -> None:
    # the strip
    snap = Snapshot(instances=FLEET)
    strip = strip_text(StripState(snap, snap.fleet_economics(), None, None, (), None)).plain
    shown = dollars(r"\$(\d+\.\d+)/p proving", strip)
    # `vastui status`, from the store, with an engine live on it
    async with await Store.open(tmp_path / "fleet.db") as store:
        for r in FLEET:
            await store.instances.upsert(r, now=NOW)
        await store.status.put(EngineStatus(
            target=4, workers=4, by_stage={"proving": 3, "benchmark": 1}, reason_kind="at_target",
            reason="at target", best=None, dry_run=False, updated_at=NOW,
        ))  # fmt: skip
        await store.lease.acquire("t", pid=os.getpid(), hostname=socket.gethostname(),
                                  mode="headless", ttl=60.0)  # fmt: skip
        report = await gather(store, NOW)
    status = render(report)
    said = dollars(r"\$(\d+\.\d+)/proof", status)
    assert "2 of 3 proving workers measured" in status
    # the metric, as the engine's monitor samples it
    monitor = Monitor(e2e_config(), collector=FleetCollector())
    facts = StepFacts(now=NOW, status=status_of(report))
    sample = monitor._sample(facts, FLEET, 0)
    assert sample.cost_per_proof is not None
    for figure in (shown, said, sample.cost_per_proof):
        assert figure == pytest.approx(EXPECTED, abs=5e-5), figure  # within the 4 places shown
    # the detail: each worker's own, by the same definition
    for r in FLEET[:2]:
        text = production_text(r, lambda _t: "now")
        assert text is not None
        own = dollars(r"at \$(\d+\.\d+)/proof", text.plain)
        assert own == pytest.approx((r.dph_total or 0) / (r.prod_rate or 1), abs=5e-5)


def status_of(report: dict[str, object]) -> EngineStatus:
    engine = report["engine"]
    assert isinstance(engine, dict)
    return EngineStatus(
        target=engine["target"], workers=engine["workers"], by_stage=engine["by_stage"],
        reason_kind=engine["reason_kind"], reason=engine["reason"], best=None, dry_run=False,
        updated_at=NOW,
    )  # fmt: skip
