"""Issue 43 item 3: when the work is urgent, offers are ranked by when they would prove as well
as by $/proof, and each says so (vastui/engine/ranking.py rank_urgent, provision.decide)."""

from __future__ import annotations

import json
import math

import pytest

from vastui.config import FleetSection
from vastui.console.panes.offers import rank_mode
from vastui.engine import provision
from vastui.engine.autoscale import Observed
from vastui.engine.ranking import (
    DEFAULT_BURST_H,
    DEFAULT_INET_MBPS,
    RANKED_BY_COST,
    RANKED_BY_TIME,
    SETUP_FIXED_H,
    Urgency,
    fetch_mbps,
    from_record,
    rank_offers,
    rank_urgent,
    time_to_prove_h,
    to_record,
    urgency_of,
)
from vastui.vast.models import Offer

MAX = 0.008  # $/proof at most
RATE = 32.0  # an RTX 4090 with ample RAM, never measured (ranking.DEFAULT_GPU_RATES)
PARAMS_BITS = 135 * 2**30 * 8  # plan.PARAMS_DISK_GIB, ~145 GB


def offer(
    oid: int,
    dph: float,
    inet_down: float | None,
    disk_bw: float | None = None,
    gpu: str = "RTX 4090",
) -> Offer:
    return Offer(
        id=oid, machine_id=oid, host_id=1, gpu_name=gpu, num_gpus=1, gpu_ram_gb=24.0,
        cpu_ram_gb=512.0, cpu_cores=32.0, cpu_name=None, dph_total=dph, disk_space_gb=500.0,
        inet_down=inet_down, inet_up=inet_down, pcie_bw=None, reliability=0.99,
        geolocation=None, cuda_max_good=12.8, verified=True, rentable=True, disk_bw=disk_bw,
    )  # fmt: skip


CHEAP_SLOW = offer(1, 0.20, 500.0)  # $0.00625/proof; proves after ~1.35 h
DEAR_FAST = offer(2, 0.24, 10_000.0)  # $0.0075/proof; proves after ~0.74 h
PAIR = [CHEAP_SLOW, DEAR_FAST]


def hours_at(mbps: float) -> float:
    return PARAMS_BITS / (mbps * 1e6) / 3600.0 + SETUP_FIXED_H + 13 / RATE


# -- time to prove ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("inet_down", "disk_bw", "mbps"),
    [
        (10_000.0, 50.0, 400.0),  # a 50 MB/s disk bounds a 10 Gbit/s link
        (10_000.0, 3000.0, 10_000.0),  # a fast disk: the link bounds it
        (1000.0, None, 1000.0),  # no disk figure: the link alone
        (None, None, DEFAULT_INET_MBPS),
        (0.0, None, DEFAULT_INET_MBPS),  # not a measurement: never a division by zero
        (-5.0, None, DEFAULT_INET_MBPS),
        (math.nan, None, DEFAULT_INET_MBPS),
        (math.inf, None, DEFAULT_INET_MBPS),
        (1e9, None, DEFAULT_INET_MBPS),  # a petabit link: not trusted
        (0.01, None, 1.0),  # slow stays slow, at the floor
        (1000.0, 0.0, 1000.0),  # an untrusted disk figure bounds nothing
        (1000.0, math.nan, 1000.0),
        (1000.0, 1e9, 1000.0),
        (1000.0, 1.0, 80.0),  # a disk below the floor: the floor, 10 MB/s
        (1e9, 50.0, 400.0),  # the link falls back, the disk still bounds it
    ],
)
def test_the_slower_of_link_and_disk_within_sane_bounds(inet_down, disk_bw, mbps):
    assert fetch_mbps(inet_down, disk_bw) == pytest.approx(mbps)


def test_time_to_prove_is_the_download_the_setup_and_the_benchmark():
    assert time_to_prove_h(DEAR_FAST, RATE, 12) == pytest.approx(hours_at(10_000.0))
    bounded = time_to_prove_h(offer(3, 0.24, 10_000.0, disk_bw=50.0), RATE, 12)
    # 145 GB at 50 MB/s is 48 min, not the link's 2
    assert bounded == pytest.approx(135 * 2**30 / 50e6 / 3600 + SETUP_FIXED_H + 13 / RATE)
    assert bounded is not None and bounded > hours_at(10_000.0) + 0.7
    insane = time_to_prove_h(offer(4, 0.24, 0.0, disk_bw=-1.0), RATE, 12)
    assert insane == pytest.approx(hours_at(DEFAULT_INET_MBPS))


@pytest.mark.parametrize("rate", [None, 0.0, -3.0, math.nan])
def test_no_rate_no_time_to_prove(rate):
    assert time_to_prove_h(DEAR_FAST, rate, 12) is None


# -- the order -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("urgency", "first"),
    [
        (None, 1),  # not urgent: the cheaper $/proof, as always
        (Urgency(3.0, usd_per_proof=0.012), 2),  # 3 h of work: it proves 36 min sooner
        (Urgency(3.0), 2),  # the price unknown: $/proof over the 3 h
        (Urgency(24.0, usd_per_proof=0.012), 1),  # a day of work: the set-up matters little
        (Urgency(24.0), 1),
    ],
)
def test_urgent_work_ranks_by_when_it_proves(urgency, first):
    ranked = rank_offers(PAIR, [], {}, MAX, urgency=urgency)
    assert ranked[0].offer.id == first
    assert {r.ranked_by for r in ranked} == {RANKED_BY_COST if urgency is None else RANKED_BY_TIME}
    # the steady-state figures (and so viability) are never the urgency's
    plain = rank_offers(PAIR, [], {}, MAX)
    by_id = {r.offer.id: r for r in plain}
    for r in ranked:
        assert r.expected_cost_per_proof == by_id[r.offer.id].expected_cost_per_proof
        assert r.viable == by_id[r.offer.id].viable


def test_the_margin_is_the_work_after_it_proves_less_its_setup():
    fast = rank_offers(PAIR, [], {}, MAX, urgency=Urgency(3.0, usd_per_proof=0.012))[0]
    ttp = hours_at(10_000.0)
    assert fast.time_to_prove_h == pytest.approx(ttp)
    want = (3.0 - ttp) * (RATE * 0.012 - 0.24) - 0.24 * ttp
    assert fast.urgent_margin == pytest.approx(want)  # ~ $0.15
    assert fast.urgent_cost_per_proof == pytest.approx(0.24 * 3.0 / (RATE * (3.0 - ttp)))


def test_an_offer_proving_nothing_within_the_work_comes_after_those_that_do():
    crawl = offer(5, 0.10, 100.0)  # the cheapest by far; proves after ~3.9 h
    ranked = rank_offers([crawl, DEAR_FAST], [], {}, MAX, urgency=Urgency(3.0))
    assert [r.offer.id for r in ranked] == [2, 5]
    assert ranked[1].urgent_cost_per_proof is None and ranked[1].time_to_prove_h > 3.0
    # with the price known its margin is its loss: the set-up's $/h and no proof
    priced = rank_offers([crawl, DEAR_FAST], [], {}, MAX, urgency=Urgency(3.0, 0.012))
    assert priced[1].urgent_margin == pytest.approx(-0.10 * priced[1].time_to_prove_h)


def test_an_unknown_rate_is_last_when_urgent_too():
    unknown = offer(6, 0.01, 10_000.0, gpu="GTX 1080")
    ranked = rank_offers([unknown, *PAIR], [], {}, MAX, urgency=Urgency(3.0, 0.012))
    assert ranked[-1].offer.id == 6 and ranked[-1].time_to_prove_h is None


def test_the_ranked_offer_says_its_mode():
    plain = rank_offers(PAIR, [], {}, MAX)[0]
    assert plain.ranked_by == RANKED_BY_COST and plain.rank_note == "ranked by $/proof"
    urgent = rank_offers(PAIR, [], {}, MAX, urgency=Urgency(3.0, 0.012))[0]
    assert urgent.rank_note.startswith("ranked by when it proves: work is urgent (proves in ~44")
    assert "earns $0.15 over the work" in urgent.rank_note
    assert rank_urgent([plain], None) == [plain]  # no urgency: as they are
    assert rank_mode([urgent]) == ", by when it proves: work is urgent"
    assert rank_mode([plain]) == rank_mode([]) == ""


def test_a_published_urgent_ranking_reads_back():
    ranked = rank_offers(PAIR, [], {}, MAX, urgency=Urgency(3.0, 0.012))
    stored = [json.loads(json.dumps(to_record(r))) for r in ranked]
    assert [from_record(row) for row in stored] == ranked
    old = {k: v for k, v in stored[0].items() if k not in ("ranked_by", "time_to_prove_h")}
    back = from_record(old)  # a row published before issue 43
    assert back is not None and back.ranked_by == RANKED_BY_COST


def test_an_offer_reads_disk_bw():
    row = {"id": 9, "machine_id": 90, "gpu_name": "RTX 4090", "dph_total": 0.3, "disk_bw": 50.0}
    assert Offer.from_api(row).disk_bw == 50.0
    assert Offer.from_api({**row, "disk_bw": "fast"}).disk_bw is None
    assert Offer.from_api({**row, "disk_bw": -4.0}).disk_bw is None
    read = Offer.from_api(row)
    assert Offer.from_api(read.to_api()) == read


@pytest.mark.parametrize("bad", [math.nan, math.inf, -1.0])
def test_urgency_refuses_impossible_hours(bad):
    with pytest.raises(ValueError, match="hours"):
        Urgency(bad)


# -- whether the work is urgent --------------------------------------------------------------


@pytest.mark.parametrize(
    ("observed", "want"),
    [
        (None, None),
        (Observed(read=False, expected_h=2.0), None),  # no fresh reading: no claim
        (Observed(read=True, expected_h=3.0, usd_per_proof=0.012), Urgency(3.0, 0.012, 12)),
        (Observed(read=True, expected_h=3.0), Urgency(3.0, None, 12)),
        (Observed(read=True, expected_h=20.0, usd_per_proof=0.012), None),  # long work
        (Observed(read=True, expected_h=math.inf), None),
        (Observed(read=True, expected_h=-1.0), Urgency(0.0, None, 12)),  # ending now
        (Observed(read=True, oldest_unclaimed_s=1800.0), Urgency(DEFAULT_BURST_H, None, 12)),
        (Observed(read=True, oldest_unclaimed_s=600.0), None),  # waits, far from the deadline
        (Observed(read=True), None),
        (Observed(read=True, expected_h=3.0, usd_per_proof=math.nan), Urgency(3.0, None, 12)),
    ],
)
def test_urgency_of_the_autoscalers_reading(observed, want):
    assert urgency_of(observed, 12) == want


# -- provisioning ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("urgency", "rented"), [(None, 1), (Urgency(3.0, 0.012), 2), (Urgency(24.0, 0.012), 1)]
)
def test_provision_rents_by_when_it_proves_only_when_urgent(urgency, rented):
    ranked = rank_offers(PAIR, [], {}, MAX)  # the engine's ranking, by $/proof
    fleet = FleetSection(target_workers=1, max_cost_per_proof=MAX)
    view = provision.build_view(fleet, [], [], urgency=urgency)
    decision = provision.decide(view, ranked)
    assert decision.rent is not None and decision.rent.offer.id == rented
    reason = provision.rent_reason(view, decision.rent)
    assert ("work is urgent" in reason) == (urgency is not None)
    assert provision.decide(provision.build_view(fleet, [], []), ranked).rent == ranked[0]
