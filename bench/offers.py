"""Item 2, the offer pipeline: what vastui does with a Vast search answer of 10,000 offers,
as a ratio to `json.loads` of the same bytes.

The pipeline measured (`offers.pipeline`) is exactly what the engine and `vastui offers` do
between receiving the answer's bytes and having a ranked list:
  parse   `models.parse_json`: orjson (stdlib for what it refuses), nesting bounded outside
          the offer rows (`scalar_records`, as the client reads a search answer)
  models  `Offer.from_api` for every offer, through the client's `_valid` (skip and report)
  rank    `rank_offers`: known rate, prior, min_rate, expected $/proof, bad flag, sort
"Filter" in the issue's sense happens server-side: Vast applies the query (the payload is
the simulator's answer to vastui's default filter); the client filters nothing more, it
only marks offers on bad machines. The ranking sees a realistic history: 300 measured
machines from the payload and 100 bad-listed ones.
"""

from __future__ import annotations

import gc
import json
import random
import tracemalloc
from collections.abc import Callable
from typing import Any

from bench.common import Goal, interleave, market_payload, ms, progress, ratio
from vastui.domain.machines import PerfRecord
from vastui.engine.ranking import rank_offers
from vastui.vast.client import VastClient, _decode_offers
from vastui.vast.models import Offer, parse_json

GOALS = [
    Goal("offers.ratio_vs_json", "<=", 1.2, "parse + models + rank of 10,000 offers"),
]
MAX_COST_PER_PROOF = 0.008


def history(raw_offers: list[dict[str, Any]], seed: int = 3) -> tuple[list[PerfRecord], dict]:
    """A fleet's memory of this market: 300 measured machines and 100 bad-listed ones."""
    rng = random.Random(seed)
    machines = sorted({(o["machine_id"], o["gpu_name"], o["num_gpus"]) for o in raw_offers})
    perf = []
    for machine_id, gpu_name, num_gpus in rng.sample(machines, min(300, len(machines))):
        rate = rng.uniform(10, 45) * num_gpus
        perf.append(
            PerfRecord(
                machine_id, gpu_name, num_gpus, best_rate=rate, last_rate=rate, samples=1,
                measured_at=1.7e9, cpu_ram_gb=rng.choice([256.0, 512.0, 1024.0]),
            )
        )  # fmt: skip
    banned = rng.sample(machines, min(100, len(machines)))
    return perf, {machine_id: "bench_below_min" for machine_id, _, _ in banned}


def run(quick: bool) -> dict[str, Any]:
    n = 10_000
    progress(f"payload of {n:,} offers (cached after the first run)")
    payload = market_payload(n)
    raw = json.loads(payload)["offers"]
    perf, bad = history(raw)
    client = VastClient("bench-key", "http://bench.invalid")

    def models(items: list[Any]) -> list[Offer]:
        offers, rejected = client._valid(items, Offer.from_api, "search offers")
        assert not rejected, rejected[:3]
        return offers

    offers = models(raw)
    where = "POST /bundles/"

    def decode() -> list[Offer]:  # exactly the client's search path: pieces, then models
        got, rejected = client._accepted(*_decode_offers(payload, where), "search offers")
        assert not rejected, rejected[:3]
        return got

    def whole() -> list[Offer]:  # the answer parsed whole, then models: the old way
        return models(parse_json(payload, where, scalar_records=True)["offers"])

    def pipeline() -> None:
        rank_offers(decode(), perf, bad, MAX_COST_PER_PROOF)

    progress("peak memory of the decode, in pieces and whole (tracemalloc)")
    peaks = {name: _peak_mb(fn) for name, fn in (("decode", decode), ("whole", whole))}

    repeat = 5 if quick else 15
    progress(f"timing {repeat} rounds: json.loads, pipeline, and each stage")
    stats = interleave(
        {
            "json": lambda: json.loads(payload),
            "pipeline": pipeline,
            "decode": decode,
            "whole": whole,
            "parse": lambda: parse_json(payload, where, scalar_records=True),
            "models": lambda: models(raw),
            "rank": lambda: rank_offers(offers, perf, bad, MAX_COST_PER_PROOF),
        },
        repeat=repeat,
    )
    base = stats["json"].median
    figures: dict[str, Any] = {
        "offers.count": len(offers),
        "offers.payload_mb": round(len(payload) / 1e6, 2),
        "offers.ratio_vs_json": ratio(stats["pipeline"].median, base),
        # Best of each: less moved by other processes' bursts than the medians.
        "offers.ratio_vs_json_best": ratio(stats["pipeline"].min, stats["json"].min),
        "offers.json_ms": ms(base),
        "offers.pipeline_ms": ms(stats["pipeline"].median),
        "offers.pipeline_p95_ms": ms(stats["pipeline"].p95),
    }
    figures["offers.decode_peak_mb"] = peaks["decode"]
    figures["offers.whole_peak_mb"] = peaks["whole"]
    for stage in ("decode", "whole", "parse", "models", "rank"):
        figures[f"offers.{stage}_ms"] = ms(stats[stage].median)
        figures[f"offers.{stage}_vs_json"] = ratio(stats[stage].median, base)
    return figures


def _peak_mb(fn: Callable[[], object]) -> float:
    """Peak of Python allocations while `fn` runs (its result dropped at once)."""
    gc.collect()
    tracemalloc.start()
    try:
        fn()
        return round(tracemalloc.get_traced_memory()[1] / 1e6, 1)
    finally:
        tracemalloc.stop()
