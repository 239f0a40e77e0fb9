"""A figure belongs to the module that measures it (bench/common.py owner): a run of one module
replaces its own figures and keeps the others', even where a module's names carry another's
first segment (the demand bench's economics.demand.* and economics.margin.*)."""

from __future__ import annotations

from bench.common import merge_results, owner


def test_the_demand_bench_owns_its_economics_names() -> None:
    assert owner("economics.margin.summary.detect_minutes.median") == "demand"
    assert owner("economics.demand.steady.seed1.auto.paid") == "demand"
    assert owner("economics.vs_fair_original.cost_per_proof_ratio.median") == "economics"
    assert owner("economics.marginal") == "economics"  # a prefix is a whole segment
    assert owner("offers.ratio_vs_json") == "offers"


def test_a_module_run_replaces_only_its_own_figures() -> None:
    before = {
        "figures": {"economics.margin.x": 1, "economics.vs_fair_original.y": 2, "offers.z": 3},
        "goals": {"economics.margin.x": {"met": False}, "economics.vs_fair_original.y": {}},
    }
    after = merge_results(before, {}, {"demand": {"status": "ok"}},
                          {"economics.margin.w": 4}, {}, quick=False)  # fmt: skip
    assert after["figures"] == {
        "economics.margin.w": 4, "economics.vs_fair_original.y": 2, "offers.z": 3,
    }  # fmt: skip
    assert set(after["goals"]) == {"economics.vs_fair_original.y"}
    again = merge_results(after, {}, {"economics": {"status": "ok"}}, {}, {}, quick=False)
    assert again["figures"] == {"economics.margin.w": 4, "offers.z": 3}


def test_a_modules_figures_keep_the_names_it_owns() -> None:
    from bench.common import clean_figures

    figures, notes = clean_figures("demand", {"economics.margin.x": 1.5, "y": 2, "z": [1]})
    assert figures == {"economics.margin.x": 1.5, "demand.y": 2} and len(notes) == 1
