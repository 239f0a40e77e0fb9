"""Bids at the command line: `vastui offers --type bid` as the vastai CLI prices it, the bid
beside the on-demand price with [bids] on, and `vastui status` counting stopped bids."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import bandwidth_of
from tests.test_cli import jsonl, run
from vastui.domain.worker import InstanceRecord
from vastui.status import render
from vastui.store import Store


def test_offers_type_bid_prices_at_the_minimum_bid(capsys, tmp_path: Path):
    db = str(tmp_path / "s.db")
    code, out, _ = run(capsys, "offers", "--demo", "--db", db, "--json", "--limit", "400")
    on_demand = {r["id"]: r for r in jsonl(out)}
    assert code == 0 and on_demand
    code, out, _ = run(capsys, "offers", "--demo", "--db", db, "--json", "--type", "bid",
                       "--limit", "400")  # fmt: skip
    bids = jsonl(out)
    assert code == 0 and bids
    both = [r for r in bids if r["id"] in on_demand]
    assert both, "the same offers, priced another way"
    for r in both:
        assert r["dph_total"] < on_demand[r["id"]]["dph_total"], "a bid is cheaper per hour"
        # min_bid plus the storage of the fleet's 250 GB (at most $0.30/GB-month in the sim)
        assert 0 < r["dph_total"] - r["min_bid"] <= 250 * 0.30 / 720 + 1e-4


def test_with_bids_on_each_offer_shows_its_bid_beside_on_demand(capsys, tmp_path: Path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('[bids]\nmode = "auto"\n')
    db = str(tmp_path / "s.db")
    code, out, _ = run(capsys, "--config", str(cfg), "offers", "--demo", "--db", db, "--json")
    rows = jsonl(out)
    assert code == 0 and rows
    quoted = [r for r in rows if r["bid_cost_per_proof"] is not None]
    assert quoted, "cheap minimum bids give quotes"
    for r in quoted:
        assert r["bid_price"] >= r["min_bid"]
        on_demand = r["dph_total"] / r["expected_rate"]
        if r["rent_as"] == "bid":
            assert r["bid_cost_per_proof"] < on_demand
            assert r["expected_cost_per_proof"] == pytest.approx(
                r["bid_cost_per_proof"] + bandwidth_of(r), rel=2e-2
            )
        else:
            assert r["expected_cost_per_proof"] == pytest.approx(
                on_demand + bandwidth_of(r), rel=2e-2
            )
    assert any(r["rent_as"] == "bid" for r in rows)
    # the plain table names the columns
    code, out, _ = run(capsys, "--config", str(cfg), "offers", "--demo", "--db", db)
    assert code == 0 and "BID $/P" in out.splitlines()[0]


def test_a_bad_bid_mode_is_one_line(capsys, tmp_path: Path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('[bids]\nmode = "always"\n')
    code, _, err = run(capsys, "--config", str(cfg), "offers", "--demo", "--db",
                       str(tmp_path / "s.db"))  # fmt: skip
    assert code != 0 and len(err.strip().splitlines()) == 1
    assert "bids.mode" in err and "off or auto" in err


async def test_status_counts_workers_stopped_by_a_higher_bid(tmp_path: Path):
    from vastui.status import gather

    store = await Store.open(tmp_path / "s.db")
    try:
        for vid, outbid in ((1, 100.0), (2, None)):
            await store.instances.upsert(
                InstanceRecord(
                    vast_id=vid, label=f"vastui-main-{vid:012x}", machine_id=vid, state="proving",
                    created_at=0.0, dph_total=0.2, is_bid=True, bid_price=0.15,
                    storage_dph=0.01, outbid_since=outbid, interruptions=1,
                ),
                now=0.0,
            )  # fmt: skip
        report = await gather(store, now=200.0, day_start=0.0, wall_now=200.0)
    finally:
        await store.close()
    assert report["bids"] == {"workers": 2, "stopped_outbid": 1, "interruptions": 2}
    json.dumps(report)
    report["engine"] = {"workers": 2, "target": 2, "by_stage": {"proving": 2}}
    line = render(report).splitlines()[1]
    assert "2 as bids" in line and "stopped: outbid 1" in line
