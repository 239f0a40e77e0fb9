"""A recorded demo run held to the headline's promises (reliability/headline.py): 30 minutes of
`vastui --engine-only --demo --target-workers auto --demand pulse:30:200:2:6`, read every few
seconds as the strip, `vastui status` and the metrics show it. The strip's proofs/h and $ per
paid proof never move by more than the work and the fleet's billing did, the four readers agree
in every reading, and no stopped worker is counted as proving anywhere. The checker itself is
shown to catch each broken promise on doctored copies of the run.

Re-record: `.venv/bin/python -m reliability headline` (30 wall minutes)."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest

from reliability.headline import check, load

RUN = Path(__file__).resolve().parent.parent / "reliability" / "results" / "headline.jsonl"


@pytest.fixture(scope="module")
def rows() -> list[dict[str, Any]]:
    return load(RUN)


def test_the_run_is_what_it_claims(rows: list[dict[str, Any]]) -> None:
    """30 minutes of the pulse: the target rose and fell, proofs were paid, and a worker was
    stopped in the warm pool at some point (else the stopped-worker promise is untested)."""
    assert rows[-1]["wall_s"] >= 25 * 60
    targets = [r["target"] for r in rows]
    assert max(targets) > min(targets), "the automatic target never moved"
    assert any((r["delivery"] or {}).get("paid") for r in rows), "nothing was ever paid"
    assert any("pooled" in r["phases"].values() for r in rows), "no worker was ever pooled"


def test_the_recorded_run_keeps_every_promise(rows: list[dict[str, Any]]) -> None:
    assert check(rows) == []


def with_delivery(rows: list[dict[str, Any]]) -> list[int]:
    return [i for i, r in enumerate(rows) if r.get("delivery")]


def test_a_switch_of_definition_is_caught(rows: list[dict[str, Any]]) -> None:
    bad = copy.deepcopy(rows)
    bad[with_delivery(bad)[-1]]["delivery"]["source"] = "cuzk"
    assert any("changed definition" in line for line in check(bad))


def test_a_stopped_worker_counted_as_proving_is_caught(rows: list[dict[str, Any]]) -> None:
    i = next(i for i, r in enumerate(rows) if "pooled" in r["phases"].values())
    bad = copy.deepcopy(rows)
    strip = bad[i]["strip"]
    n = int(m.group(1)) if (m := re.search(r" prove (\d+)", strip)) else 0
    bad[i]["strip"] = (
        re.sub(r" prove \d+", f" prove {n + 1}", strip)
        if m
        else (strip.replace("workers", f"prove {n + 1} workers", 1))
    )
    assert any("the strip says" in line for line in check(bad))


def test_a_headline_that_moves_without_the_work_is_caught(rows: list[dict[str, Any]]) -> None:
    i = with_delivery(rows)[len(with_delivery(rows)) // 2]
    bad = copy.deepcopy(rows)
    d = bad[i]["delivery"]
    d["proofs_per_hour"] += 30.0  # as an estimate switched in would
    lines = check(bad)
    assert any("proofs/h moved" in line for line in lines)


def test_a_cost_that_jumps_without_the_fleet_is_caught(rows: list[dict[str, Any]]) -> None:
    """The parameters leaving a window at once, a stop closing retroactively: the jumps that
    recorded runs showed before spend was fixed."""
    i = max(with_delivery(rows)[1:-1], key=lambda j: rows[j]["delivery"]["cost"])
    bad = copy.deepcopy(rows)
    bad[i]["delivery"]["cost"] *= 0.2
    lines = check(bad)
    assert any("the window's cost fell" in line for line in lines), lines
    bad[i]["delivery"]["cost"] *= 25  # five times the truth
    assert any("the window's cost rose" in line for line in check(bad))
