"""Issue 11: an Offer keeps only its own validated fields, never Vast's whole row.

What the engine publishes for attached consoles (`ranking.to_record`) is the offer written
back as a Vast row (`Offer.to_api`), read by the same strict reader (`from_record`), and it
must come back exactly: GB that were MB / 1000 go back to MB, text already sanitized stays.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vastui.domain.machines import PerfRecord
from vastui.engine.ranking import from_record, rank_offers, to_record
from vastui.vast.models import INT64_MAX, MAX_DPH, MIN_DPH, Offer

QUANTITY = st.one_of(st.none(), st.integers(0, 10**12), st.floats(0, 1e12))
TEXT = st.one_of(st.none(), st.text(max_size=30), st.sampled_from(["x\x1b[31my", "a" * 1100]))
ROWS = st.fixed_dictionaries(
    {
        "id": st.integers(1, INT64_MAX),
        "machine_id": st.integers(1, INT64_MAX),
        "dph_total": st.floats(MIN_DPH, MAX_DPH),
    },
    optional={
        "host_id": st.one_of(st.none(), st.integers(-5, INT64_MAX)),
        "gpu_name": TEXT,
        "num_gpus": st.integers(1, 1024),
        "gpu_ram": QUANTITY,
        "cpu_ram": QUANTITY,
        "cpu_cores_effective": QUANTITY,
        "cpu_cores": QUANTITY,
        "cpu_name": TEXT,
        "disk_space": QUANTITY,
        "inet_down": QUANTITY,
        "inet_up": QUANTITY,
        "pcie_bw": QUANTITY,
        "reliability2": st.one_of(st.none(), st.floats(0, 1)),
        "reliability": st.one_of(st.none(), st.floats(0, 1)),
        "geolocation": TEXT,
        "cuda_max_good": st.one_of(st.none(), st.floats(0, 1000)),
        "verification": st.sampled_from([None, "verified", "unverified", "deverified", 3]),
        "rentable": st.sampled_from([None, True, False, 1, "true"]),
        "search": st.just({"deep": [[{"x": 1}]]}),  # what Vast sends besides: not kept
    },
)


@given(ROWS)
def test_an_offer_written_as_a_vast_row_reads_back_exactly(row):
    offer = Offer.from_api(row)
    again = Offer.from_api(offer.to_api())
    assert again == offer
    # Exactly: == would let 0.0 stand for -0.0; the published row is JSON (the store's).
    assert [repr(getattr(again, f)) for f in Offer.__slots__] == [
        repr(getattr(offer, f)) for f in Offer.__slots__
    ]
    assert Offer.from_api(json.loads(json.dumps(offer.to_api()))) == offer


@given(st.floats(0, 1e12) | st.integers(0, 10**12))
def test_gb_back_to_mb_reads_back_as_the_same_gb(mb):
    offer = Offer.from_api({"id": 1, "machine_id": 1, "dph_total": 0.5, "cpu_ram": mb})
    assert Offer.from_api(offer.to_api()).cpu_ram_gb == offer.cpu_ram_gb


def test_an_offer_keeps_no_row():
    offer = Offer.from_api({"id": 1, "machine_id": 2, "dph_total": 0.5, "extra": [1, 2]})
    assert not hasattr(offer, "raw") and not hasattr(offer, "__dict__")


def _ranked() -> list[Any]:
    rows = [
        {"id": 1, "machine_id": 10, "gpu_name": "RTX 4090", "dph_total": 0.3, "cpu_ram": 515896,
         "verification": "verified", "reliability2": 0.99, "gpu_ram": 24564},
        {"id": 2, "machine_id": 11, "gpu_name": "RTX 3090", "num_gpus": 2, "dph_total": 0.41},
        {"id": 3, "machine_id": 12, "gpu_name": "Mystery", "dph_total": 1.7},
    ]  # fmt: skip
    perf = [PerfRecord(10, "RTX 4090", 1, best_rate=40.0, last_rate=38.0, samples=1,
                       measured_at=1.0, cpu_ram_gb=512.0)]  # fmt: skip
    return rank_offers([Offer.from_api(r) for r in rows], perf, {12: "bench_below_min"}, 0.008)


def test_a_published_record_reads_back_as_the_same_ranked_offer():
    ranked = _ranked()
    stored = [json.loads(json.dumps(to_record(r))) for r in ranked]  # the store keeps JSON
    assert [from_record(row) for row in stored] == ranked
    assert all("raw" not in row and "search" not in row["offer"] for row in stored)


def test_a_record_published_by_the_previous_release_still_reads():
    """Until the engine's next search rewrites them, rows in a store hold Vast's whole row, and
    min_rate under its name before issue 29 ("required_rate")."""
    vast_row = {"id": 7, "machine_id": 70, "gpu_name": "RTX 4090", "dph_total": 0.25,
                "cpu_ram": 257949, "search": {"totalHour": 0.25}, "bundle_id": 3}  # fmt: skip
    old = {"raw": vast_row, "known_rate": None, "prior_rate": 32.0, "rate_source": "model-default",
           "expected_rate": 32.0, "required_rate": 32.0, "expected_cost_per_proof": 0.0078,
           "bad": False, "bad_reason": None}  # fmt: skip
    back = from_record(old)
    assert back is not None and back.offer == Offer.from_api(vast_row)
    assert back.min_rate == 32.0 and back.rate_source == "model-default"


@pytest.mark.parametrize(
    "offer",
    [{"id": "x"}, {"id": 2**64, "machine_id": 1, "dph_total": 0.5}, [1], None,
     {"id": 1, "machine_id": 1, "dph_total": math.inf}],
)  # fmt: skip
def test_a_record_with_an_impossible_offer_is_skipped(offer):
    assert from_record({"offer": offer, "min_rate": 3}) is None
    assert from_record({"raw": offer, "min_rate": 3}) is None
