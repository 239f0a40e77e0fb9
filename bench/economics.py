"""Policy economics (issue 11, item 6): vastui's policy against the original's over a simulated
week on the same seeded market, and how the result moves with the market's share of faulty
and slow machines.

The world is the demo's (vastsim.market, 400 hosts, world seed 7): machines with a hidden
speed and fault drawn from the seed (each GPU model's mean speed off vastui's priors by a factor
of the seed's own), each day's listings and prices drawn from the run's seed.
vastui's fleet is run by its real decision functions (bench/economics_vastui.py); the
original's by its rules (bench/economics_original.py); both rent from the same listings, with
the same worker timings (bench/economics_worker.py) and the same dice per machine and rental.
Money is vastui/engine/spend.py's: dph_total × billed time plus bandwidth (the parameters and
each request at the offer's $/GB, every policy alike: bench/economics_fleet.py), rejected =
killed before proving or by the gate.

The neutral world (bench/economics_world.py ``NeutralWorld``) is run on every scenario and world
seed against the literal original (its own filter, benchmark and Ignore:
bench/economics_original.py ``literal``), beside the fair original.

`python -m bench.economics [--quick]` runs it alone; `python -m bench` runs it with the rest.

One file: the module's runs and the figures read off them (the scenarios, the bid sweep, the
neutral world against both originals) share one set of totals and one comparison; the worlds,
the policies and the fleet are modules of their own.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from bench.common import Goal, progress
from bench.economics_fleet import Outcome
from bench.economics_original import OPERATOR_CHECK_S, OriginalPolicy
from bench.economics_vastui import VastuiPolicy
from bench.economics_world import Market, Scenario
from vastui.config import Config

WORLD_SEED = 7  # vastsim.demo.DEMO_WORLD_SEED
HOSTS = 400  # vastsim.demo.DEMO_HOSTS: ~2,400 offers, ~150 through the default filter
TARGET_WORKERS = 10
DAYS = 7
SEEDS_FULL = (7, 8, 11)
SEEDS_QUICK = (7,)
HEADLINE = "demo"
SENSITIVITY_CHECK_MIN = (15, 240)  # the operator's look every 15 min, every 4 h
SCENARIOS: tuple[Scenario, ...] = (
    Scenario("clean", 0.0, 0.0),  # no machine faults, no outages, no slow surprises
    # the demo's world: ~1 machine in 6 faulty, outages as each machine's reliability implies
    Scenario("demo", 1.0, 0.0),
    Scenario("rough", 1.5, 0.15),
    Scenario("harsh", 2.0, 0.30),
)
# The headline opponent is the original at its best (economics_original.py ``fair``), on
# several worlds (hidden machines and faults drawn from each world seed, the market from the
# same seed). vastui runs with bids on (``[bids] mode = "auto"``) and off; the original rents
# on demand only (original-system.md: its deploy sends no bid price).
WORLD_SEEDS_FULL = (7, 8, 9, 10, 11)
WORLD_SEEDS_QUICK = (7,)
FAIR = "economics.vs_fair_original"
FAIR_OFF = f"{FAIR}.bids_off"
NEUTRAL = "economics.neutral"
LITERAL = f"{NEUTRAL}.vs_literal_original"
INF_MARK = "inf"  # a ratio whose vastui side made no proof: "inf: <why>" (not a number)
# Other bidders per machine (vastsim/bids.py): no source publishes how often an
# interruptible instance is outbid (vast-api.md §14), so the headline takes the simulator's
# pressure 1 and the sweep shows where bids stop paying.
BID_PRESSURE = 1.0
PRESSURES_FULL = (0.0, 0.25, 1.0, 2.0, 4.0, 8.0)
PRESSURES_QUICK = (0.25, 1.0, 4.0)
GOALS = [
    Goal(f"{FAIR}.cost_per_proof_ratio.median", "<=", 0.75, "vastui $/proof ÷ the fair original's"),
    Goal(f"{FAIR}.cost_per_proof_ratio.worst", "<=", 0.85, "the same, the worst world"),
    Goal(f"{FAIR_OFF}.cost_per_proof_ratio.median", "<=", 0.75, "the same, bids off"),
    Goal(f"{FAIR_OFF}.cost_per_proof_ratio.worst", "<=", 0.85, "bids off, the worst world"),
    Goal(f"{FAIR}.rejected_spend_ratio.median", "<=", 0.3, "$ on rejected workers, ratio"),
    Goal(f"{FAIR}.hours_to_target_ratio.median", "<=", 1.0, "hours to the target, ratio"),
    # the same goals in the neutral world (issue 30 item 6), the operator looking hourly
    Goal(
        f"{NEUTRAL}.vs_fair_original_60min.cost_per_proof_ratio.median",
        "<=",
        0.75,
        "vastui ÷ the fair original, neutral world",
    ),
    Goal(
        f"{NEUTRAL}.vs_fair_original_60min.cost_per_proof_ratio.worst",
        "<=",
        0.85,
        "the same, the worst neutral world",
    ),
    # issue 43 item 5: against the original as its source runs, in the neutral world
    Goal(
        f"{LITERAL}.cost_per_proof_ratio.median",
        "<=",
        0.7,
        "vastui ÷ the literal original, neutral world, scenarios × world seeds",
    ),
    Goal(f"{LITERAL}.cost_per_proof_ratio.worst", "<=", 0.85, "the same, the worst run"),
    # A run where vastui made no proof has no finite ratio: its .worst reads "inf: ..." (not a
    # number, so the harness calls that goal not measured); this one says it was missed.
    Goal(
        f"{LITERAL}.vastui_idle_runs",
        "<=",
        0,
        "neutral runs where vastui made no proof (its $/proof ratio infinite or undefined)",
    ),
]
Policy = Callable[[Market, Config], Outcome]


def config(target: int = TARGET_WORKERS, bids: str = "off", **fleet: Any) -> Config:
    """vastui's defaults (max $0.008/proof, 2 benchmarks at once, $5/h cap, the deadlines),
    with the fleet's target and its bid mode."""
    base = Config()
    return replace(
        base,
        fleet=replace(base.fleet, target_workers=target, **fleet),
        bids=replace(base.bids, mode=bids),
    )


def policies(hours: float, sensitivity: bool = False, fair: bool = False) -> dict[str, Policy]:
    runners: dict[str, Policy] = {
        "vastui": lambda m, c: VastuiPolicy(m, c).run(hours),
        "original": lambda m, c: OriginalPolicy(m, c).run(hours),
        # The original with a human who presses Ignore on every machine that failed: how much
        # of the difference is memory alone.
        "original_ignore": lambda m, c: OriginalPolicy(m, c, ignore_failed=True).run(hours),
    }
    if fair:
        runners["original_fair"] = lambda m, c: OriginalPolicy(m, c, fair=True).run(hours)
    if sensitivity:  # how much the original's result owes to its operator's cadence
        for minutes in SENSITIVITY_CHECK_MIN:
            runners[f"original_check_{minutes}min"] = lambda m, c, s=minutes * 60.0: OriginalPolicy(
                m, c, check_s=s
            ).run(hours)
    return runners


@dataclass(frozen=True, slots=True)
class Totals:
    """One policy over several seeds: sums, and the per-seed results for the spread."""

    runs: tuple[Outcome, ...]

    @property
    def spent(self) -> float:
        return sum(r.spent for r in self.runs)

    @property
    def rejected_spent(self) -> float:
        return sum(r.rejected_spent for r in self.runs)

    @property
    def proofs(self) -> int:
        return sum(r.proofs for r in self.runs)

    @property
    def cost_per_proof(self) -> float:
        return self.spent / self.proofs if self.proofs else math.inf

    @property
    def hours_to_target(self) -> float:
        """The median over seeds; inf when most never reached it."""
        return statistics.median(
            math.inf if r.target_hours is None else r.target_hours for r in self.runs
        )

    def figures(self, prefix: str, horizon_h: float) -> dict[str, Any]:
        n = len(self.runs)
        hours = self.hours_to_target
        return {
            f"{prefix}.usd_per_1000_proofs": _per_1000(self.cost_per_proof),
            f"{prefix}.spent_usd": round(self.spent / n, 2),
            f"{prefix}.rejected_usd": round(self.rejected_spent / n, 2),
            f"{prefix}.bandwidth_usd": round(sum(r.bandwidth for r in self.runs) / n, 2),
            f"{prefix}.rejected_share": _ratio(self.rejected_spent, self.spent),
            f"{prefix}.proofs": round(self.proofs / n),
            f"{prefix}.hours_to_target": round(hours, 1)
            if math.isfinite(hours)
            else f"not reached in {horizon_h:g} h",
            f"{prefix}.rentals": round(sum(r.rentals for r in self.runs) / n, 1),
            f"{prefix}.rejected_workers": round(sum(r.rejected for r in self.runs) / n, 1),
            f"{prefix}.machines_banned": round(sum(r.bans for r in self.runs) / n, 1),
        }


def simulate(
    scenario: Scenario,
    seeds: Sequence[int],
    runners: dict[str, Policy],
    cfg: Config,
    days: int = DAYS,
) -> dict[str, Totals]:
    """Every policy on the market of every seed (one market per seed, shared)."""
    runs: dict[str, list[Outcome]] = {name: [] for name in runners}
    for seed in seeds:
        market = Market(
            world_seed=WORLD_SEED, seed=seed, hosts=HOSTS, scenario=scenario, config=cfg, days=days
        )
        for name, run in runners.items():
            runs[name].append(run(market, cfg))
    return {name: Totals(tuple(r)) for name, r in runs.items()}


def compare(vastui: Totals, other: Totals) -> dict[str, float | None]:
    """The ratios the goals read (vastui ÷ the other), with the spread over seeds."""
    per_seed = [
        _ratio(a.cost_per_proof, b.cost_per_proof)
        for a, b in zip(vastui.runs, other.runs, strict=True)
    ]
    known = [r for r in per_seed if r is not None]
    return {
        "cost_per_proof_ratio": _ratio(vastui.cost_per_proof, other.cost_per_proof),
        "cost_per_proof_ratio_worst_seed": max(known) if known else None,
        "rejected_spend_ratio": _ratio(vastui.rejected_spent, other.rejected_spent),
        "proofs_ratio": _ratio(vastui.proofs, other.proofs),
        "spend_ratio": _ratio(vastui.spent, other.spent),
    }


def world_market(
    world_seed: int,
    cfg: Config,
    bid_pressure: float,
    neutral: bool = False,
    scenario: Scenario | None = None,
) -> Market:
    """The demo's market shape on one world: its machines, hidden speeds and faults, and its
    market all drawn from the world seed; other bidders at ``bid_pressure``; ``neutral``: the
    world that shares fewer of vastui's assumptions (bench/economics_world.py); ``scenario``:
    how rough it is (default the demo's)."""
    demo = next(s for s in SCENARIOS if s.name == HEADLINE)
    return Market(
        world_seed=world_seed, seed=world_seed, hosts=HOSTS, scenario=scenario or demo,
        config=cfg, days=DAYS, bid_pressure=bid_pressure, neutral=neutral,
    )  # fmt: skip


NEUTRAL_CHECK_MIN = (60, 15)  # the fair operator's look: the headline's cadence, and closer


@dataclass
class Sides:
    """vastui's runs and an original's, paired run by run (the same market each time)."""

    vastui: list[Outcome]
    other: list[Outcome]

    def ratios(self, key: str) -> dict[str, Any]:
        """Per-run ratios, vastui ÷ the other: $/proof (and without bandwidth), $ on rejected
        workers, proofs; their median, worst and best, an infinity marked."""
        pairs = list(zip(self.vastui, self.other, strict=True))
        idle = sum(1 for v, _ in pairs if v.proofs == 0)
        mark = f"vastui made no proof in {idle} of {len(pairs)} runs"
        out: dict[str, Any] = {}
        for name, values, why in (
            ("cost_per_proof_ratio", [_div(_cpp(v), _cpp(o)) for v, o in pairs], mark),
            (
                "cost_per_proof_ratio_ex_bandwidth",
                [_div(_cpp_ex(v), _cpp_ex(o)) for v, o in pairs],
                mark,
            ),
            # infinite only when the other side rejected nothing, or proved nothing: dropped
            (
                "rejected_spend_ratio",
                [_div(v.rejected_spent, o.rejected_spent) for v, o in pairs],
                None,
            ),
            ("proofs_ratio", [_div(v.proofs, o.proofs) for v, o in pairs], None),
        ):
            out.update(_spread(f"{key}.{name}", values, why))
        return out

    @staticmethod
    def money(key: str, runs: Sequence[Outcome]) -> dict[str, Any]:
        """One side's money per run (means) and $ per 1,000 proofs over all its runs."""
        n = len(runs)
        spent = sum(r.spent for r in runs)
        proofs = sum(r.proofs for r in runs)
        return {
            f"{key}.spent_usd": round(spent / n, 2),
            f"{key}.bandwidth_usd": round(sum(r.bandwidth for r in runs) / n, 2),
            f"{key}.rejected_usd": round(sum(r.rejected_spent for r in runs) / n, 2),
            f"{key}.proofs": round(proofs / n),
            f"{key}.rentals": round(sum(r.rentals for r in runs) / n, 1),
            f"{key}.target_reached_runs": sum(1 for r in runs if r.target_hours is not None),
            f"{key}.usd_per_1000_proofs": _per_1000(spent / proofs if proofs else math.inf),
            f"{key}.bandwidth_usd_per_1000_proofs": _per_1000(
                sum(r.bandwidth for r in runs) / proofs if proofs else math.inf
            ),
        }


def neutral_world(
    world_seeds: Sequence[int], scenarios: Sequence[Scenario], hours: float, cfg: Config
) -> dict[str, Any]:
    """vastui (bids on, and off) in the neutral world on every scenario and world seed,
    against the literal original (its own filter, benchmark and Ignore; and, as a row, the
    same with a pipelined benchmark) and, on the demo's scenario, against the original at its
    best with the operator looking every 60 and every 15 minutes (issue 30 item 6's figures)."""
    on = replace(cfg, bids=replace(cfg.bids, mode="auto"))
    off = replace(cfg, bids=replace(cfg.bids, mode="off"))
    fair_ratios: dict[str, list[float]] = {}
    mine: dict[str, list[Outcome]] = {"": [], ".bids_off": []}
    literal: list[Outcome] = []
    piped: list[Outcome] = []
    by_scenario: dict[str, Sides] = {}
    for scenario in scenarios:
        for ws in world_seeds:
            progress(f"economics: the neutral world {ws}, {scenario.name} market")
            market = world_market(ws, cfg, BID_PRESSURE, neutral=True, scenario=scenario)
            runs = {"": VastuiPolicy(market, on).run(hours)}
            runs[".bids_off"] = VastuiPolicy(market, off).run(hours)
            for suffix, v in runs.items():
                mine[suffix].append(v)
            literal.append(OriginalPolicy(market, off, literal=True).run(hours))
            piped.append(
                OriginalPolicy(market, off, literal=True, sequential_bench=False).run(hours)
            )
            sides = by_scenario.setdefault(scenario.name, Sides([], []))
            sides.vastui.append(runs[""])
            sides.other.append(literal[-1])
            if scenario.name == HEADLINE:
                fair_ratios = _vs_fair_neutral(market, off, runs, hours, fair_ratios)
    out: dict[str, Any] = {
        f"{NEUTRAL}.world_seeds": len(world_seeds),
        f"{NEUTRAL}.scenarios": len(scenarios),
    }
    idle = sum(1 for v in mine[""] if v.proofs == 0)
    idle_off = sum(1 for v in mine[".bids_off"] if v.proofs == 0)
    for key, values in fair_ratios.items():
        # only the headline scenario's runs meet the fair original: an infinite ratio is one
        # of its worlds where vastui made no proof
        why = f"vastui made no proof in {sum(map(math.isinf, values))} of {len(values)} worlds"
        out.update(_spread(key, values, why if key.endswith("cost_per_proof_ratio") else None))
    for suffix, runs_of in mine.items():
        out.update(Sides(runs_of, literal).ratios(f"{LITERAL}{suffix}"))
    out.update(Sides.money(f"{LITERAL}.vastui", mine[""]))
    out.update(Sides.money(f"{LITERAL}.vastui_bids_off", mine[".bids_off"]))
    out.update(Sides.money(f"{LITERAL}.literal_original", literal))
    out[f"{LITERAL}.vastui_idle_runs"] = idle
    out[f"{LITERAL}.vastui_bids_off_idle_runs"] = idle_off
    for name, sides in by_scenario.items():
        ratios = [_div(_cpp(v), _cpp(o)) for v, o in zip(sides.vastui, sides.other, strict=True)]
        out.update(
            _spread(f"{LITERAL}.by_scenario.{name}.cost_per_proof_ratio", ratios, "vastui idle")
        )
    pipelined = f"{NEUTRAL}.vs_literal_original_pipelined_bench"
    out.update(Sides(mine[""], piped).ratios(pipelined))
    out.update(Sides.money(f"{pipelined}.literal_original", piped))
    return out


def _vs_fair_neutral(
    market: Market,
    off: Config,
    mine: Mapping[str, Outcome],
    hours: float,
    ratios: dict[str, list[float]],
) -> dict[str, list[float]]:
    """vastui (bids on, and off) against the original at its best on one neutral world (issue
    30 item 6): Known Perf as the original shows it, the operator looking every 60 and every 15
    minutes; the per-world ratios appended to ``ratios``."""
    for minutes in NEUTRAL_CHECK_MIN:
        fair = OriginalPolicy(
            market, off, fair=True, known_by_slice=True, check_s=minutes * 60.0
        ).run(hours)
        for suffix, v in mine.items():
            key = f"{NEUTRAL}.vs_fair_original_{minutes}min{suffix}"
            ratios.setdefault(f"{key}.cost_per_proof_ratio", []).append(_div(_cpp(v), _cpp(fair)))
            ratios.setdefault(f"{key}.rejected_spend_ratio", []).append(
                _div(v.rejected_spent, fair.rejected_spent)
            )
    return ratios


def vs_fair(world_seeds: Sequence[int], hours: float, cfg: Config) -> dict[str, Any]:
    """vastui (bids on, and off) against the original at its best on each world (the demo's
    market shape, the world and its market drawn from the seed): per-world ratios, their
    median, worst and best; and the sweep over how often bids are outbid."""
    on = replace(cfg, bids=replace(cfg.bids, mode="auto"))
    off = replace(cfg, bids=replace(cfg.bids, mode="off"))
    ratios: dict[str, dict[str, list[float]]] = {FAIR: {}, FAIR_OFF: {}}
    fair_cpp: dict[int, float] = {}
    off_cpp: dict[int, float] = {}
    for ws in world_seeds:
        progress(f"economics: vastui vs the fair original, world {ws}")
        market = world_market(ws, cfg, BID_PRESSURE)
        fair = OriginalPolicy(market, off, fair=True).run(hours)
        fair_cpp[ws] = _cpp(fair)
        for prefix, c in ((FAIR, on), (FAIR_OFF, off)):
            v = VastuiPolicy(market, c).run(hours)
            if prefix == FAIR_OFF:
                off_cpp[ws] = _cpp(v)
            r = ratios[prefix]
            r.setdefault("cost_per_proof", []).append(_div(_cpp(v), fair_cpp[ws]))
            r.setdefault("rejected_spend", []).append(_div(v.rejected_spent, fair.rejected_spent))
            vh = math.inf if v.target_hours is None else v.target_hours
            fh = math.inf if fair.target_hours is None else fair.target_hours
            r.setdefault("hours", []).append(_div(vh, fh))
    out: dict[str, Any] = {"economics.world_seeds": len(world_seeds)}
    out["economics.bid_pressure"] = BID_PRESSURE
    for prefix, by_name in ratios.items():
        for name, key in (("cost_per_proof", "cost_per_proof_ratio"),
                          ("rejected_spend", "rejected_spend_ratio"),
                          ("hours", "hours_to_target_ratio")):  # fmt: skip
            out.update(_spread(f"{prefix}.{key}", by_name[name]))
    return out | {"_fair_cpp": fair_cpp, "_off_cpp": off_cpp}


def bid_sweep(
    world_seeds: Sequence[int],
    pressures: Sequence[float],
    hours: float,
    cfg: Config,
    fair_cpp: dict[int, float],
    off_cpp: dict[int, float],
) -> dict[str, Any]:
    """vastui with bids on at each outbid pressure, on every world: its $/proof against the
    fair original's and against its own with bids off (the original never bids, and bids off
    never meets another bidder: both are the same at every pressure), interruptions per worker
    and day, and the lowest pressure at which bids stop paying (median over worlds >= 1)."""
    on = replace(cfg, bids=replace(cfg.bids, mode="auto"))
    out: dict[str, Any] = {}
    stops: float | None = None
    for pressure in pressures:
        progress(f"economics: bids at outbid pressure {pressure:g}")
        vs_fair_r: list[float] = []
        vs_off: list[float] = []
        per_day: list[float] = []
        for ws in world_seeds:
            market = world_market(ws, cfg, pressure)
            v = VastuiPolicy(market, on).run(hours)
            vs_fair_r.append(_div(_cpp(v), fair_cpp[ws]))
            vs_off.append(_div(_cpp(v), off_cpp[ws]))
            per_day.append(v.interruptions / (TARGET_WORKERS * hours / 24.0))
        key = f"economics.bids_sweep.pressure_{pressure:g}"
        out.update(_spread(f"{key}.cost_per_proof_ratio", vs_fair_r))
        out.update(_spread(f"{key}.vs_bids_off", vs_off))
        out[f"{key}.interruptions_per_worker_day"] = round(statistics.median(per_day), 3)
        if stops is None and statistics.median(vs_off) >= 1.0:
            stops = pressure
    out["economics.bids_sweep.stop_paying_pressure"] = (
        stops if stops is not None else f"still paying at {max(pressures):g}"
    )
    return out


# The ranking's levers (issue 18, item 4), each against vastui without it (bids off, the same
# worlds): kept on by default only where the median world pays.
LEVERS: dict[str, dict[str, Any]] = {
    "setup_over_48h": {"setup_lifetime_h": 48.0},
    "setup_over_168h": {"setup_lifetime_h": 168.0},
    "prior_blend": {"prior_blend": True},
}


def levers(
    world_seeds: Sequence[int], hours: float, cfg: Config, base_cpp: dict[int, float]
) -> dict[str, Any]:
    """vastui's $/proof with each lever of the ranking ÷ without (``base_cpp``, the same
    config otherwise), per world: median, worst, best."""
    out: dict[str, Any] = {}
    for name, offers in LEVERS.items():
        progress(f"economics: the ranking's lever {name}")
        ratios = []
        lever_cfg = replace(cfg, offers=replace(cfg.offers, **offers))
        for ws in world_seeds:
            market = world_market(ws, cfg, BID_PRESSURE)
            v = VastuiPolicy(market, lever_cfg).run(hours)
            ratios.append(_div(_cpp(v), base_cpp[ws]))
        out.update(_spread(f"economics.levers.{name}.vs_without", ratios))
    return out


def _spread(key: str, values: Sequence[float], mark: str | None = None) -> dict[str, Any]:
    """Median, worst and best of per-run values; an infinite one is dropped (None), or, with
    ``mark``, written "inf: <mark>" (a goal on it is not met, nor measured: the idle-run goal
    says it)."""
    finite = [x for x in values if math.isfinite(x)]

    def shown(x: float) -> float | str | None:
        if mark is not None and not math.isfinite(x):
            return f"{INF_MARK}: {mark}"
        return _round(x)

    return {
        f"{key}.median": shown(statistics.median(values)),
        f"{key}.worst": shown(max(values)),
        f"{key}.best": _round(min(finite)) if finite else None,
    }


def _cpp(o: Outcome) -> float:
    return o.spent / o.proofs if o.proofs else math.inf


def _cpp_ex(o: Outcome) -> float:
    """$/proof without bandwidth."""
    return (o.spent - o.bandwidth) / o.proofs if o.proofs else math.inf


def _div(a: float, b: float) -> float:
    """a ÷ b for a ratio's spread: inf when b is 0 or infinite and a is not (and 1 for both)."""
    if (math.isinf(a) and math.isinf(b)) or (a == 0 and b == 0):
        return 1.0
    if b == 0 or math.isinf(a):
        return math.inf
    return a / b


def _round(x: float) -> float | None:
    return round(x, 3) if math.isfinite(x) else None


def run(quick: bool) -> dict[str, Any]:
    seeds = SEEDS_QUICK if quick else SEEDS_FULL
    hours = DAYS * 24.0
    cfg = config()
    figures: dict[str, Any] = {
        "economics.days": DAYS,
        "economics.seeds": len(seeds),
        "economics.target_workers": TARGET_WORKERS,
        "economics.hosts": HOSTS,
        "economics.operator_check_min": OPERATOR_CHECK_S / 60.0,
    }
    worlds = WORLD_SEEDS_QUICK if quick else WORLD_SEEDS_FULL
    fair = vs_fair(worlds, hours, cfg)
    fair_cpp, off_cpp = fair.pop("_fair_cpp"), fair.pop("_off_cpp")
    figures.update(fair)
    # the neutral world on every scenario (--quick: the headline's, as the sweep below)
    neutral = [s for s in SCENARIOS if s.name == HEADLINE] if quick else list(SCENARIOS)
    figures.update(neutral_world(worlds, neutral, hours, cfg))
    pressures = PRESSURES_QUICK if quick else PRESSURES_FULL
    figures.update(bid_sweep(worlds, pressures, hours, cfg, fair_cpp, off_cpp))
    if not quick:
        figures.update(levers(worlds, hours, cfg, off_cpp))
    scenarios = [s for s in SCENARIOS if s.name == HEADLINE] if quick else list(SCENARIOS)
    for scenario in scenarios:
        progress(f"economics: {scenario.name} market, {len(seeds)} seed(s), {DAYS} days")
        headline = scenario.name == HEADLINE
        totals = simulate(scenario, seeds, policies(hours, headline and not quick), cfg)
        ratios = compare(totals["vastui"], totals["original"])
        sweep = f"economics.sweep.{scenario.name}"
        figures[f"{sweep}.fault_rate"] = scenario.fault_rate
        figures[f"{sweep}.slow_share"] = scenario.slow_share
        for key, value in ratios.items():
            figures[f"{sweep}.{key}"] = value
        vs_ignore = compare(totals["vastui"], totals["original_ignore"])
        figures[f"{sweep}.cost_per_proof_ratio_vs_ignore"] = vs_ignore["cost_per_proof_ratio"]
        for name in ("vastui", "original"):
            figures[f"{sweep}.{name}_usd_per_1000_proofs"] = _per_1000(totals[name].cost_per_proof)
            figures[f"{sweep}.{name}_proofs"] = round(totals[name].proofs / len(seeds))
        if headline:
            figures.update({f"economics.{k}": v for k, v in ratios.items()})
            figures.update({f"economics.{k}_vs_ignore": v for k, v in vs_ignore.items()})
            for name, total in totals.items():
                if name.startswith("original_check_"):
                    prefix = f"economics.sensitivity.{name}"
                    figures[f"{prefix}.usd_per_1000_proofs"] = _per_1000(total.cost_per_proof)
                    figures[f"{prefix}.proofs"] = round(total.proofs / len(seeds))
                    for key in ("cost_per_proof_ratio", "rejected_spend_ratio"):
                        figures[f"{prefix}.{key}"] = compare(totals["vastui"], total)[key]
                else:
                    figures.update(total.figures(f"economics.{name}", hours))
            if not quick:
                figures.update(_uncapped(scenario, seeds, hours))
    return figures


def _uncapped(scenario: Scenario, seeds: Sequence[int], hours: float) -> dict[str, Any]:
    """Time to target when vastui benchmarks its whole target at once (as the demo does)."""
    cfg = config(max_concurrent_benchmarks=TARGET_WORKERS)
    totals = simulate(scenario, seeds, {"v": policies(hours)["vastui"]}, cfg)["v"]
    out = totals.figures("economics.vastui_bench_cap_at_target", hours)
    keep = ("hours_to_target", "usd_per_1000_proofs", "rejected_usd", "proofs")
    return {k: v for k, v in out.items() if k.rsplit(".", 1)[1] in keep}


def _ratio(a: float, b: float) -> float | None:
    if not b or not math.isfinite(a) or not math.isfinite(b) or b <= 0:
        return None
    return round(a / b, 3)


def _per_1000(cost_per_proof: float) -> float | None:
    """$ per 1,000 proofs: the table shows three decimals, a proof costs fractions of a cent."""
    return round(cost_per_proof * 1000, 3) if math.isfinite(cost_per_proof) else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.economics", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="the demo market, one seed")
    args = parser.parse_args(argv)
    figures = run(args.quick)
    for key, value in figures.items():
        print(f"{key:60s} {value}")
    for goal in GOALS:
        print(f"goal {goal.figure} {goal.op} {goal.limit:g}: {json.dumps(goal.check(figures))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
