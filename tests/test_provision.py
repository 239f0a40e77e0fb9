"""The provisioning decision as a table: what is rented, and the reason when nothing is."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from vastui.domain.machines import PerfRecord
from vastui.engine.provision import REASON_KINDS, Candidate, FleetView, decide, gate, rent_reason
from vastui.engine.ranking import RankedOffer, rank_offers
from vastui.vast.models import Offer

MAX = 0.008  # $/proof
# RTX 4090 with 516 GB RAM: the model default, 32 proofs/h, until measured.
OFFERS = {
    "cheap": (1, 101, 0.20),  # required 25: viable, $0.00625/proof
    "dear": (2, 102, 0.24),  # required 30: viable, $0.0075/proof
    "slow": (3, 103, 0.30),  # required 38: not viable, $0.0094/proof
    # cheapest and viable by its ranking (256 GB class), but 170 GB cannot hold PoRep and Snap
    # resident (vastui/domain/plan.py)
    "small": (4, 104, 0.10, 170_000),
}


def offer(oid: int, machine: int, dph: float, cpu_ram_mb: int = 516_000) -> Offer:
    return Offer.from_api(
        {"id": oid, "machine_id": machine, "gpu_name": "RTX 4090", "num_gpus": 1,
         "dph_total": dph, "cpu_ram": cpu_ram_mb}
    )  # fmt: skip


def ranked(*names: str, perf: list[PerfRecord] | None = None) -> list[RankedOffer]:
    return rank_offers([offer(*OFFERS[n]) for n in names], perf or [], set(), MAX)


def view(**kw: Any) -> FleetView:
    base: dict[str, Any] = dict(target=3, max_concurrent_benchmarks=2, max_cost_per_proof=MAX)
    base.update(kw)
    return FleetView(**base)


ALL = ("cheap", "dear", "slow")
CASES: list[tuple[str, FleetView, tuple[str, ...], int | None, str | None]] = [
    # (case, view, offers, offer rented, reason kind)
    ("target zero", view(target=0), ALL, None, "target_zero"),
    ("at target", view(by_stage={"proving": 3}), ALL, None, "at_target"),
    ("rents in flight count", view(by_stage={"proving": 2}, pending_rents=1), ALL, None,
     "at_target"),
    ("an API error decides nothing", view(api_error="Vast API error 503: busy"), ALL, None,
     "api_error"),
    ("dry picks stand in for workers", view(dry_run=True, dry_picks=3), ALL, None, "dry_run"),
    ("a dry run picks with a reason", view(dry_run=True), ALL, 1, "dry_run"),
    ("a dry pick is not picked again", view(dry_run=True, dry_picks=1,
     blocked_offers=frozenset({1})), ALL, 2, "dry_run"),
    ("benchmark concurrency cap", view(by_stage={"benchmark": 1}, pending_rents=1), ALL, None,
     "bench_concurrency_cap"),
    ("dry picks fill the pipeline", view(dry_run=True, dry_picks=2, target=5), ALL, None,
     "bench_concurrency_cap"),
    ("proving workers leave the pipeline", view(by_stage={"proving": 2}), ALL, 1, None),
    ("the best viable offer", view(), ALL, 1, None),
    ("an offer rented before is not blocked", view(by_stage={"proving": 1}), ALL, 1, None),
    ("a busy machine is skipped", view(busy_machines=frozenset({101})), ALL, 2, None),
    ("a banned machine is skipped", view(bad_machines=frozenset({101})), ALL, 2, None),
    ("a rent in flight blocks its offer", view(pending_rents=1, blocked_offers=frozenset({1})),
     ALL, 2, None),
    ("the cap skips a dearer offer", view(dph_in_use=4.78, max_total_dph=5.0), ALL, 1, None),
    ("the cap takes the one that fits", view(dph_in_use=4.78, max_total_dph=5.0,
     busy_machines=frozenset({101})), ("cheap", "dear"), None, "fleet_dph_cap"),
    ("fleet $/h cap", view(dph_in_use=4.9, max_total_dph=5.0), ALL, None, "fleet_dph_cap"),
    ("nothing viable", view(), ("slow",), None, "no_viable_offer"),
    ("no offers at all", view(), (), None, "no_viable_offer"),
    ("only banned offers", view(bad_machines=frozenset({101, 102, 103})), ALL, None,
     "no_viable_offer"),
    ("a tunnel down rents nothing", view(tunnel_down="instance 7: lotus api refused"), ALL,
     None, "tunnel_down"),
    ("a tunnel down does not hide the target", view(by_stage={"proving": 3},
     tunnel_down="instance 7: lotus api refused"), ALL, None, "at_target"),
    ("out of credit rents nothing", view(no_credit="Vast API error 400 [missing_billing]"),
     ALL, None, "no_credit"),
    ("the daily budget reached", view(spent_today=50.0, max_daily_spend=50.0), ALL, None,
     "daily_budget"),
    ("under the daily budget", view(spent_today=49.99, max_daily_spend=50.0), ALL, 1, None),
    ("no daily budget (0)", view(spent_today=1e6, max_daily_spend=0.0), ALL, 1, None),
    ("the budget does not hide the target", view(by_stage={"proving": 3}, spent_today=60.0,
     max_daily_spend=50.0), ALL, None, "at_target"),
    ("the rent breaker: 4 rents per slot in the hour", view(rents_last_hour=12,
     max_rents_per_slot_hour=4), ALL, None, "rent_breaker"),
    ("under the breaker", view(rents_last_hour=11, max_rents_per_slot_hour=4), ALL, 1, None),
    ("no breaker (0)", view(rents_last_hour=999, max_rents_per_slot_hour=0), ALL, 1, None),
    ("the breaker does not hide the target", view(by_stage={"proving": 3}, rents_last_hour=99,
     max_rents_per_slot_hour=4), ALL, None, "at_target"),
    ("too little RAM for the memory plan is never rented", view(), ("small", "dear"), 2, None),
    ("only offers too small for the plan", view(), ("small",), None, "no_viable_offer"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "fleet", "names", "rent", "kind"), CASES, ids=[c[0] for c in CASES]
)
def test_decide(case: str, fleet: FleetView, names, rent: int | None, kind: str | None) -> None:
    decision = decide(fleet, ranked(*names))
    assert (decision.rent.offer.id if decision.rent else None) == rent
    assert (decision.reason.kind if decision.reason else None) == kind
    if decision.reason is not None:
        assert decision.reason.kind in REASON_KINDS
        assert decision.reason.text and "\n" not in decision.reason.text


def test_gate_needs_no_market_only_when_the_answer_does_not_depend_on_it() -> None:
    assert gate(view()) is None
    assert gate(view(dph_in_use=99.0, max_total_dph=1.0)) is None, "the cap needs the offers"
    early = gate(view(by_stage={"setup": 1, "loading": 1}))
    assert early is not None and early.reason is not None
    assert early.reason.text == (
        "benchmark concurrency cap: 2 worker(s) not yet proving "
        "(fleet.max_concurrent_benchmarks = 2)"
    )


def test_the_budget_reason_names_both_numbers() -> None:
    early = gate(view(spent_today=50.004, max_daily_spend=50.0))
    assert early is not None and early.reason is not None
    assert early.reason.text.startswith(
        "daily budget reached: $50.00 spent today (UTC) of $50.00 (fleet.max_daily_spend)"
    )


def test_no_viable_offer_names_the_best_candidate_and_the_maximum() -> None:
    offers = rank_offers([offer(4, 104, 0.40), offer(3, 103, 0.30)], [], set(), MAX)
    reason = decide(view(), offers).reason
    assert reason is not None and reason.best is not None
    # Both at the model default (32/h): the cheaper offer 3 has the lower $/proof.
    assert reason.text == "no viable offer: best 3 RTX 4090 $0.0094/proof > max $0.0080"
    best = reason.best.to_json()
    assert best["offer_id"] == 3 and best["machine_id"] == 103 and best["gpu_name"] == "RTX 4090"
    assert best["expected_cost_per_proof"] == pytest.approx(0.3 / 32, abs=1e-5)
    assert best["max_cost_per_proof"] == MAX


def test_no_viable_offer_when_the_rounded_up_rate_is_missed() -> None:
    # 0.2321/0.008 = 29.01 → 30 required; 29.5 measured is $0.00787/proof, under the maximum.
    known = PerfRecord(101, "RTX 4090", 1, 29.5, 29.5, 1, 1.0, cpu_ram_gb=516.0)
    [r] = rank_offers([offer(1, 101, 0.2321)], [known], set(), MAX)
    reason = decide(view(), [r]).reason
    assert reason is not None and reason.kind == "no_viable_offer"
    assert reason.text == (
        "no viable offer: best 1 RTX 4090 29.5 proofs/h < 30 required at $0.232/h "
        "(max $0.0080/proof)"
    )


def test_texts_of_the_caps_and_the_dry_run() -> None:
    cap = decide(view(dph_in_use=4.9, max_total_dph=5.0), ranked(*ALL)).reason
    assert cap is not None and cap.best is not None and cap.best.offer_id == 1
    assert cap.text == "fleet $/h cap: $4.900/h in use + $0.200/h for offer 1 > max $5.00/h"
    dry = decide(view(dry_run=True), ranked(*ALL)).reason
    assert dry is not None
    assert dry.text == "dry run: would rent 1 RTX 4090 $0.0063/proof <= max $0.0080"
    stand_in = decide(view(dry_run=True, dry_picks=2, by_stage={"proving": 1}), []).reason
    assert stand_in is not None and stand_in.text == (
        "dry run: 2 would-be rent(s) stand in for the missing 2 worker(s); nothing is rented"
    )


def test_rent_reason_says_why_this_offer() -> None:
    [best, *_] = ranked(*ALL)
    assert rent_reason(view(by_stage={"proving": 1}), best) == (
        "auto: 1/3 workers; offer 1 RTX 4090 on machine 101: "
        "$0.0063/proof <= max $0.0080 (model-default)"
    )


def test_candidate_of_a_multi_gpu_offer_and_an_unknown_rate() -> None:
    o = Offer.from_api({"id": 9, "machine_id": 9, "gpu_name": "Mystery GPU", "num_gpus": 2,
                        "dph_total": 0.5, "cpu_ram": 516_000})  # fmt: skip
    [r] = rank_offers([o], [], set(), MAX)
    c = Candidate.of(r, MAX)
    assert c.describe() == "9 2x Mystery GPU expected rate unknown (unknown), max $0.0080/proof"
    assert replace(c, expected_rate=None).to_json()["expected_rate"] is None


# -- the view, built from what the engine observed (provision.build_view) ----------------------


def test_the_view_counts_rents_in_flight_and_dry_picks_as_workers_and_draining_as_cost() -> None:
    from vastui.config import FleetSection
    from vastui.engine.provision import LiveWorker, RentInFlight, build_view

    fleet = FleetSection(target_workers=4, max_daily_spend=50.0)
    workers = [
        LiveWorker("proving", 11, 0.30),
        LiveWorker("benchmark", 12, 0.25, tunnel_down="instance 2: lotus api: refused"),
        LiveWorker("proving", 13, 0.40, draining=True),
        LiveWorker("loading", None, 0.20),
    ]
    rents = [RentInFlight(offer_id=501, machine_id=14, dph=0.22), RentInFlight(None, None, 0.0)]
    got = build_view(
        fleet, workers, rents, dry_run=True, dry_offers={777: 0.5}, bad_machines=frozenset({9}),
        api_error="429", spent_today=12.5, rents_last_hour=3,
    )  # fmt: skip
    assert got.by_stage == {"loading": 1, "benchmark": 1, "proving": 1}
    assert got.draining == 1 and got.pending_rents == 2 and got.dry_picks == 1
    assert got.workers == 5  # three live, two rents in flight
    assert got.blocked_offers == frozenset({501, 777})
    assert got.busy_machines == frozenset({11, 12, 13, 14})  # a draining worker's too
    assert got.dph_in_use == pytest.approx(0.30 + 0.25 + 0.40 + 0.20 + 0.22 + 0.5)
    assert got.tunnel_down == "instance 2: lotus api: refused"
    assert (got.target, got.max_daily_spend, got.spent_today) == (4, 50.0, 12.5)
    assert (got.api_error, got.rents_last_hour, got.bad_machines) == ("429", 3, frozenset({9}))
    # not a dry run: the dry picks are not counted, whatever the acts remember
    real = build_view(fleet, workers, [], dry_offers={777: 0.5})
    assert real.dry_picks == 0 and 777 not in real.blocked_offers
    # a draining worker's tunnel report is not the fleet's
    only = build_view(fleet, [replace(workers[1], draining=True)], [])
    assert only.tunnel_down is None and only.by_stage == {}
