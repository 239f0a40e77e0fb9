"""Interruptible bids as pure decisions (vastui/engine/bidding.py): the quote and its cap, the
outbid policy, what one look at Vast changes, the learned risk, and the spend of a stopped bid."""

from __future__ import annotations

from dataclasses import replace

import pytest

from vastui.config import Config
from vastui.domain.worker import BidHistory, InstanceRecord
from vastui.engine import bidding, policy
from vastui.engine.bidding import BidQuote, RaiseBid, Risk, RiskModel
from vastui.engine.ranking import rank_offers
from vastui.engine.spend import instance_cost
from vastui.vast.models import Offer

AUTO = replace(Config(), bids=replace(Config().bids, mode="auto"))
CALM = Risk(0.0, 0.0, 0.0)


def test_cost_per_proof_and_max_bid_are_inverse():
    risk = Risk(0.2, 1.5, 0.4)
    for bid in (0.05, 0.2, 0.7):
        cost = bidding.cost_per_proof(bid, 0.01, 30.0, risk)
        assert cost is not None
        assert bidding.max_bid(30.0, 0.01, risk, cost) == pytest.approx(bid)
    # more interruptions, dearer proofs; none at all: the plain price per proof
    assert bidding.cost_per_proof(0.2, 0.01, 30.0, CALM) == pytest.approx(0.21 / 30.0)
    dear = bidding.cost_per_proof(0.2, 0.01, 30.0, Risk(0.5, 1.5, 0.4))
    assert dear is not None and dear > bidding.cost_per_proof(0.2, 0.01, 30.0, risk)  # type: ignore[operator]
    # a machine that loses more than it proves is never worth a bid
    assert bidding.cost_per_proof(0.2, 0.01, 30.0, Risk(3.0, 1.0, 0.5)) is None


@pytest.mark.parametrize(
    ("min_bid", "on_demand_cost", "expect"),
    [
        # cheap going price: bid it plus the margin (0.15), capped well above
        (0.10, 0.30 / 30, ("bid", 0.115)),
        # the margin would pass the cap: bid the cap itself
        (0.20, 0.22 / 30, ("cap", None)),
        # the going price is already over what on-demand costs per proof: no bid
        (0.35, 0.30 / 30, None),
        # on-demand unknown: the budget (0.008 $/proof) is the ceiling
        (0.10, None, ("bid", 0.115)),
        (0.30, None, None),
    ],
)
def test_quote_bids_above_the_going_price_and_never_over_its_cap(min_bid, on_demand_cost, expect):
    q = bidding.quote(min_bid, 0.0, 30.0, on_demand_cost, CALM, AUTO)
    if expect is None:
        assert q is None
        return
    assert q is not None and q.price >= min_bid and q.price <= q.cap + 1e-9
    ceiling = min(AUTO.fleet.max_cost_per_proof, on_demand_cost or 1.0)
    assert q.cap == pytest.approx(ceiling * 30.0, abs=1e-4)
    assert q.cost_per_proof <= ceiling + 1e-9
    kind, price = expect
    if kind == "bid":
        assert q.price == pytest.approx(price)
    else:
        assert q.price == pytest.approx(q.cap, abs=1e-4)


def test_no_quote_when_bids_are_off_or_the_rate_unknown():
    assert bidding.quote(0.1, 0.0, 30.0, 0.01, CALM, Config()) is None
    assert bidding.quote(0.1, 0.0, None, 0.01, CALM, AUTO) is None
    assert bidding.quote(None, 0.0, 30.0, 0.01, CALM, AUTO) is None


def test_better_only_when_cheaper_per_proof():
    q = BidQuote(0.1, 0.2, 0.1, 0.004, CALM)
    assert bidding.better(q, 0.005) and not bidding.better(q, 0.004)
    assert bidding.better(q, None) and not bidding.better(None, 0.005)


def _outbid(**kw: object) -> InstanceRecord:
    base = dict(
        vast_id=5, state="proving", is_bid=True, bid_price=0.10, bid_cap=0.20, outbid_since=1000.0
    )
    base.update(kw)
    return InstanceRecord(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("rec", "going", "now", "expect"),
    [
        # not outbid: nothing to do
        (_outbid(outbid_since=None), 0.15, 1010.0, None),
        # the going price is under the cap: raise over it by raise_step, at most the cap
        (_outbid(), 0.12, 1010.0, RaiseBid(0.138)),
        (_outbid(), 0.19, 1010.0, RaiseBid(0.20)),
        # over the cap: wait for it to win again ...
        (_outbid(), 0.25, 1000.0 + 44 * 60, None),
        (_outbid(), None, 1000.0 + 44 * 60, None),
        # ... up to keep_outbid_min (45), then let it go
        (_outbid(), 0.25, 1000.0 + 46 * 60, "outbid"),
        (_outbid(bid_cap=None), 0.12, 1000.0 + 46 * 60, "outbid"),
    ],
)
def test_the_outbid_policy_raises_waits_or_lets_go(rec, going, now, expect):
    act = bidding.on_outbid(rec, going, now, replace(Config().bids, keep_outbid_min=45.0))
    if isinstance(expect, str):
        assert isinstance(act, policy.Kill) and act.kind == expect
        assert not act.strike and act.ban is None, "the market's doing, not the machine's"
        assert "outbid for 46 min" in act.reason
    else:
        assert act == expect


@pytest.mark.parametrize(
    ("rec", "going", "expect"),
    [
        # raised to 0.20 over a bidder who left: back to the going price plus the margin
        (_outbid(outbid_since=None, bid_price=0.20), 0.10, RaiseBid(0.115)),
        # within 5 % of where it would go: left alone (no churn)
        (_outbid(outbid_since=None, bid_price=0.118), 0.10, None),
        # never over the cap, never while outbid, never without a going price
        (_outbid(outbid_since=None, bid_price=0.30, bid_cap=0.10), 0.12, RaiseBid(0.10)),
        (_outbid(bid_price=0.20), 0.10, None),
        (_outbid(outbid_since=None, bid_price=0.20), None, None),
    ],
)
def test_a_running_bid_comes_down_when_the_going_price_does(rec, going, expect):
    assert bidding.lower(rec, going, Config().bids) == expect


def test_observe_counts_an_outbid_and_a_resume_restarts_the_worker():
    rec = InstanceRecord(vast_id=5, state="proving", is_bid=True, bid_price=0.1, stopped_s=60.0)
    change = bidding.observe(rec, True, "stopped", 500.0)
    assert change is not None and change.fields["outbid_since"] == 500.0
    assert change.fields["interruptions"] == 1 and change.stage is None
    assert bidding.observe(replace(rec, outbid_since=500.0), True, "stopped", 900.0) is None
    back = bidding.observe(replace(rec, outbid_since=500.0), False, "loading", 1100.0)
    assert back is not None and back.stage == "loading"
    assert back.fields == {"outbid_since": None, "stopped_s": 660.0, "prod_state": None,
                           "stops": "[[500.0, 1100.0]]"}  # fmt: skip
    # still stopped for another reason: not a resume; on demand: never an outbid
    assert bidding.observe(replace(rec, outbid_since=500.0), False, "exited", 1100.0) is None
    assert bidding.observe(replace(rec, is_bid=False), True, "stopped", 500.0) is None


def test_the_risk_is_learned_per_machine_over_its_gpu_model_and_the_prior():
    cfg = Config()
    empty = RiskModel([], cfg)
    prior = empty.risk(1, "RTX 4090", 30.0)
    assert prior.per_hour == cfg.bids.prior_interruptions_per_h and prior.source == "prior"
    assert prior.loss_h == pytest.approx(cfg.bids.restart_loss_min / 60 + 2 / 30)
    stormy = [BidHistory(1, "RTX 4090", 12, 10.0, 6.0), BidHistory(2, "RTX 4090", 0, 30.0, 0.0)]
    model = RiskModel(stormy, cfg)
    one, two, other = (model.risk(m, "RTX 4090", 30.0) for m in (1, 2, 3))
    assert one.per_hour > other.per_hour > two.per_hour > 0
    assert other.source == "model(2)" and one.source == "machine"
    # a machine of another model learns nothing from these
    assert model.risk(4, "RTX 3090", 20.0).per_hour == cfg.bids.prior_interruptions_per_h


def test_a_bid_is_ranked_as_a_bid_only_when_cheaper_per_proof():
    def offer(oid: int, dph: float, min_bid: float) -> Offer:
        return Offer(
            id=oid, machine_id=oid, host_id=1, gpu_name="RTX 4090", num_gpus=1, gpu_ram_gb=24.0,
            cpu_ram_gb=512.0, cpu_cores=32.0, cpu_name=None, dph_total=dph, disk_space_gb=500.0,
            inet_down=1000.0, inet_up=1000.0, pcie_bw=None, reliability=0.99, geolocation=None,
            cuda_max_good=12.8, verified=True, rentable=True, min_bid=min_bid,
            storage_total_cost=0.01,
        )  # fmt: skip

    offers = [offer(101, 0.26, 0.12), offer(102, 0.20, 0.19)]
    plain = rank_offers(offers, [], {}, 0.008)
    assert all(r.bid is None and r.rent_bid is None for r in plain)
    ranked = rank_offers(offers, [], {}, 0.008, (AUTO, RiskModel([], AUTO)))
    by_id = {r.offer.id: r for r in ranked}
    bid = by_id[101].rent_bid
    assert bid is not None and by_id[101].dph_total == pytest.approx(bid.total)
    assert by_id[101].expected_cost_per_proof == pytest.approx(bid.cost_per_proof)
    assert bid.cost_per_proof < 0.26 / by_id[101].expected_rate  # type: ignore[operator]
    assert by_id[102].rent_bid is None, "a bid near the on-demand price loses to it per proof"
    assert by_id[102].dph_total == 0.20 and not by_id[102].as_bid
    assert ranked[0].offer.id == 101, "the cheaper per proof first"


def test_a_stopped_bid_bills_storage_only():
    rec = InstanceRecord(
        vast_id=1, state="proving", created_at=0.0, dph_total=0.21, is_bid=True,
        storage_dph=0.01, stopped_s=1800.0, outbid_since=5400.0,
    )  # fmt: skip
    # 2 h: 0.5 h stopped before (closed) and 0.5 h stopped now (open): 1 h at 0.21, 1 h at 0.01
    assert instance_cost(rec, 7200.0) == pytest.approx(0.21 + 0.01)
    on_demand = replace(rec, is_bid=False, stopped_s=0.0, outbid_since=None)
    assert instance_cost(on_demand, 7200.0) == pytest.approx(0.42)
    # stopped in the warm pool: the same storage-only time
    pooled = replace(rec, is_bid=False, outbid_since=None, pooled_since=5400.0)
    assert instance_cost(pooled, 7200.0) == pytest.approx(0.21 + 0.01)
    # since 1 h: the open half hour exactly, the closed one spread over the 2 h (a quarter
    # hour of it falls here): 0.25 h at 0.21, 0.75 h at 0.01
    assert instance_cost(rec, 7200.0, since=3600.0) == pytest.approx(0.25 * 0.21 + 0.75 * 0.01)
