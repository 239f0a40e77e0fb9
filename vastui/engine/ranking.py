"""Rank offers by expected $/proof, learned per machine and per GPU model.

For each offer:
- known rate: the machine's own last measured rate (scaled per GPU if it was measured with
  a different slice of the same machine);
- prior, for machines never measured: the median per-GPU rate of measured machines with the
  same GPU model and RAM class, else of the same GPU model, else a built-in default per model
  (the reference's working assumption, `original-system.md` §4), times the GPU count;
- min_rate: ceil(dph_total / max $/proof): the rate at which this price pays off;
- expected $/proof = dph_total / expected rate.

When the work is urgent (issue 43: a burst expected to last a few hours), the order is what
each offer would earn over that time, which counts when it proves: its time from rent to first
proof (the parameters at the slower of its link and its disk, the set-up, the benchmark) is
hours it bills and does not prove (``Urgency``, ``rank_urgent``). Each ranked offer says which
order ranked it (``ranked_by``, ``rank_note``).

One file: the ranked offer, the record it is published as and the two orders that make it
change together (a field added to RankedOffer is a key of the record and a term of an order).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from vastui.config import Config
from vastui.domain.machines import PerfRecord
from vastui.domain.plan import GIB, PARAMS_DISK_GIB, PARAMS_GB, PROOF_UP_GB, REQUEST_GB
from vastui.engine.bidding import BidQuote, Risk, RiskModel, better, quote
from vastui.numbers import parse_number
from vastui.pricing import min_rate_at
from vastui.vast.models import ModelError, Offer, unchecked_constructor

if TYPE_CHECKING:
    from vastui.engine.autoscale import Observed

# Which order ranked an offer: its expected $/proof (always, unless the work is urgent), or,
# the work being urgent, what it earns over the time the work lasts (which counts when it
# proves; rank_urgent).
RANKED_BY_COST = "cost_per_proof"
RANKED_BY_TIME = "time_to_prove"

# Per-GPU proofs/hour with ample RAM and CPU; used only until a machine of that model is measured.
DEFAULT_GPU_RATES: dict[str, float] = {
    "RTX PRO 4000": 22.0,
    "RTX 3090": 18.0,
    "RTX 4090": 32.0,
    "RTX 5070 Ti": 30.0,
    "RTX 5090": 42.0,
    "H100 SXM": 40.0,
    "H100 PCIE": 36.0,
    "A100 SXM4": 26.0,
    "RTX PRO 6000 WS": 48.0,
    "RTX PRO 6000": 48.0,
}
# RAM per GPU decides how many partitions cuzk can pipeline (original-system.md §4 table).
RAM_CLASSES: tuple[tuple[float, str], ...] = ((160, "128"), (320, "256"), (448, "384"))
RAM_FACTORS = {"128": 0.3, "256": 0.7, "384": 0.9, "512+": 1.0}


def ram_class(cpu_ram_gb: float | None, num_gpus: int) -> str:
    if not cpu_ram_gb:
        return "unknown"
    per_gpu = cpu_ram_gb / max(1, num_gpus)
    for limit, name in RAM_CLASSES:
        if per_gpu < limit:
            return name
    return "512+"


@dataclass(frozen=True, slots=True)
class RankedOffer:
    offer: Offer
    known_rate: float | None  # measured on this very machine
    prior_rate: float | None  # what a machine like it is expected to do
    rate_source: str  # "measured", "partial" (an aborted benchmark's), "peers(N)", ...
    expected_rate: float | None
    min_rate: float
    expected_cost_per_proof: float | None
    bad: bool
    bad_reason: str | None = None
    # The bid it would place (vastui/engine/bidding.py; None: bids off, or no bid worth it)
    # and whether it rents it so, beating on demand; then the min_rate and the expected
    # $/proof above are the bid's.
    bid: BidQuote | None = None
    as_bid: bool = False
    # Which order ranked it (RANKED_BY_COST or RANKED_BY_TIME) and, ranked by when it proves,
    # its hours from rent to first proof and what ordered it: its margin in dollars over the
    # urgent work's hours (the market's price known), else its $/proof over them. The fields
    # above stay the steady-state ones: viability is never the urgency's.
    ranked_by: str = RANKED_BY_COST
    time_to_prove_h: float | None = None
    urgent_margin: float | None = None
    urgent_cost_per_proof: float | None = None

    @property
    def rank_note(self) -> str:
        """How it was ranked, for the operator."""
        if self.ranked_by != RANKED_BY_TIME:
            return "ranked by $/proof"
        note = "ranked by when it proves: work is urgent"
        if self.time_to_prove_h is not None:
            note += f" (proves in ~{self.time_to_prove_h * 60:.0f} min"
            if self.urgent_margin is not None:
                note += f", earns ${self.urgent_margin:.2f} over the work"
            elif self.urgent_cost_per_proof is not None:
                note += f", ${self.urgent_cost_per_proof:.4f}/proof over the work"
            note += ")"
        return note

    @property
    def rent_bid(self) -> BidQuote | None:
        """The bid to rent it with; None: on demand."""
        return self.bid if self.as_bid else None

    @property
    def dph_total(self) -> float:
        """What it bills while running, as it would be rented."""
        return self.bid.total if self.as_bid and self.bid is not None else self.offer.dph_total

    @property
    def on_demand_cost_per_proof(self) -> float | None:
        """Expected $/proof rented on demand, whichever way it would be rented."""
        rate = self.expected_rate
        return self.offer.dph_total / rate if rate and rate > 0 else None

    @property
    def viable(self) -> bool:
        """Worth renting: not bad, and expected to reach the rate its price requires."""
        return (
            not self.bad and self.expected_rate is not None and self.expected_rate >= self.min_rate
        )

    def sort_key(self) -> tuple[int, float, int, float]:
        return _sort_key(self.expected_cost_per_proof, self.known_rate, self.dph_total)

    def to_json(self) -> dict[str, object]:
        row: dict[str, object] = dict(self.offer.to_json())
        row.update(
            known_rate=_r(self.known_rate),
            prior_rate=_r(self.prior_rate),
            rate_source=self.rate_source,
            expected_rate=_r(self.expected_rate),
            min_rate=self.min_rate,
            expected_cost_per_proof=_r(self.expected_cost_per_proof, 5),
            bad=self.bad,
            bid=None if self.bid is None else self.bid.to_json(),
            as_bid=self.as_bid,
        )
        return row


def _sort_key(
    cost: float | None, known_rate: float | None, dph_total: float
) -> tuple[int, float, int, float]:
    """Cheapest expected $/proof first, unknown last; at an equal expected $/proof a machine's
    own measured record beats an estimate; then the lower price."""
    return (
        0 if cost is not None else 1,
        cost if cost is not None else 0.0,
        0 if known_rate is not None else 1,
        dph_total,
    )


def to_record(ranked: RankedOffer) -> dict[str, object]:
    """What the engine publishes for attached consoles: the offer as a Vast row that reads back
    exactly (`Offer.to_api`), and the ranking."""
    return {
        "offer": ranked.offer.to_api(),
        "known_rate": ranked.known_rate,
        "prior_rate": ranked.prior_rate,
        "rate_source": ranked.rate_source,
        "expected_rate": ranked.expected_rate,
        "min_rate": ranked.min_rate,
        "expected_cost_per_proof": ranked.expected_cost_per_proof,
        "bad": ranked.bad,
        "bad_reason": ranked.bad_reason,
        "bid": None if ranked.bid is None else ranked.bid.to_json(),
        "as_bid": ranked.as_bid,
        "ranked_by": ranked.ranked_by,
        "time_to_prove_h": ranked.time_to_prove_h,
        "urgent_margin": ranked.urgent_margin,
        "urgent_cost_per_proof": ranked.urgent_cost_per_proof,
    }


def from_record(row: Mapping[str, Any]) -> RankedOffer | None:
    """A published row back to a RankedOffer (None if it does not parse: skip it). The offer
    goes through the same strict reader as a search answer; rows published before offers kept
    only their own fields hold Vast's whole row under "raw", read the same way."""
    try:
        offer = Offer.from_api(row["offer"] if "offer" in row else row["raw"])
        return RankedOffer(
            offer=offer,
            known_rate=_opt(row.get("known_rate")),
            prior_rate=_opt(row.get("prior_rate")),
            rate_source=str(row.get("rate_source") or "unknown"),
            expected_rate=_opt(row.get("expected_rate")),
            # "required_rate": the same number, as an engine before issue 29 published it
            min_rate=float(row["min_rate"] if "min_rate" in row else row["required_rate"]),
            expected_cost_per_proof=_opt(row.get("expected_cost_per_proof")),
            bad=row.get("bad") is True,
            bad_reason=None if row.get("bad_reason") is None else str(row["bad_reason"]),
            bid=_bid_from(row.get("bid")),
            as_bid=row.get("as_bid") is True and _bid_from(row.get("bid")) is not None,
            # rows published before issue 43 hold none of these: ranked by $/proof
            ranked_by=RANKED_BY_TIME if row.get("ranked_by") == RANKED_BY_TIME else RANKED_BY_COST,
            time_to_prove_h=_opt(row.get("time_to_prove_h")),
            urgent_margin=_opt(row.get("urgent_margin")),  # a loss is negative
            urgent_cost_per_proof=_opt(row.get("urgent_cost_per_proof")),
        )
    except (KeyError, TypeError, ValueError, ModelError):
        return None


def _bid_from(raw: Any) -> BidQuote | None:
    if not isinstance(raw, Mapping):
        return None
    numbers = [_opt(raw.get(k)) for k in ("price", "cap", "total", "cost_per_proof")]
    per_hour, outbid_h = _opt(raw.get("interruptions_per_h")), _opt(raw.get("outbid_h"))
    if any(n is None or n < 0 for n in numbers) or per_hour is None or outbid_h is None:
        return None
    price, cap, total, cost = (float(n) for n in numbers if n is not None)
    source = str(raw.get("risk_source") or "prior")[:40]
    return BidQuote(price, cap, total, cost, Risk(per_hour, outbid_h, 0.0, source))


def _opt(value: Any) -> float | None:
    return parse_number(value)


def _r(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


@dataclass(frozen=True, slots=True)
class Levers:
    """Optional refinements of the ranking ([offers] setup_lifetime_h, prior_blend), each on
    only when the economics bench shows it pays."""

    setup_lifetime_h: float = 0.0
    bench_proofs: int = 12
    prior_blend: bool = False

    @classmethod
    def of(cls, config: Config) -> Levers:
        return cls(
            config.offers.setup_lifetime_h, config.fleet.bench_proofs, config.offers.prior_blend
        )


# Before its first proof a rental downloads every parameter file (plan.PARAMS_DISK_GIB at the
# offer's listed inet_down), loads and extracts (cuzk: SRS, PCE) and benchmarks.
SETUP_FIXED_H = 0.3  # image load, setup, daemon start, PCE extraction (ASSUMPTION)
DEFAULT_INET_MBPS = 1000.0
# Bandwidth: vastui/domain/plan.py REQUEST_GB, PROOF_UP_GB, PARAMS_GB (spend.py bills the same).


def bandwidth_per_proof(offer: Offer) -> float:
    """Dollars of bandwidth each proof costs at the offer's $/GB (unknown prices: none)."""
    return REQUEST_GB * (offer.inet_down_cost or 0.0) + PROOF_UP_GB * (offer.inet_up_cost or 0.0)


def setup_hours(inet_down: float | None, rate: float, bench_proofs: int) -> float:
    """Billed hours before a rental proves: the download, the fixed set-up, the benchmark."""
    mbps = inet_down if inet_down and inet_down > 0 else DEFAULT_INET_MBPS
    download = PARAMS_DISK_GIB * GIB * 8 / (mbps * 1e6) / 3600.0
    return download + SETUP_FIXED_H + (1 + bench_proofs) / rate


# -- when a rental proves (issue 43) ------------------------------------------------------
#
# The parameters (plan.PARAMS_DISK_GIB, ~145 GB) come over the offer's link and are written to
# its disk: the slower of the two bounds the download. Vast lists both per offer: inet_down in
# Mbit/s and disk_bw in MB/s (vast-api.md:142-143; the CLI's help, vastai/cli/commands/
# offers.py:86 and :107, says disk_bw is the disk's *read* bandwidth: taken as its sequential
# write speed too, ASSUMPTION). Whether a host already holds the worker image would shorten the
# set-up too, but Vast says nothing of it: no offer field names an image or a cache (the search
# fields, vastai/api/query.py:109-166; the CLI's field list, offers.py:72-123; vast-api.md
# §3.3, :123-166); "image" is a field of benchmarks and templates only (query.py:190, :236).
# So the image's pull stays inside SETUP_FIXED_H for every offer.
#
# A listed figure is trusted within physical bounds only: one not finite, not positive or past
# the ceiling is no measurement (the link falls back to DEFAULT_INET_MBPS, the disk to no bound
# of its own); one below the floor is a slow link or disk, kept slow at the floor.
MIN_INET_MBPS = 1.0  # ASSUMPTION: 145 GB at 1 Mbit/s is 13 days: slower is as good as never
MAX_INET_MBPS = 100_000.0  # ASSUMPTION: 100 Gbit/s, past any host's uplink
MIN_DISK_MBS = 10.0  # ASSUMPTION: slower than a spinning disk
MAX_DISK_MBS = 100_000.0  # ASSUMPTION: past any NVMe array a host lists


def _trusted(value: float | None, floor: float, ceiling: float) -> float | None:
    if value is None or not math.isfinite(value) or value <= 0.0 or value > ceiling:
        return None
    return max(value, floor)


def fetch_mbps(inet_down: float | None, disk_bw: float | None) -> float:
    """Mbit/s at which the parameters reach the disk: the link (Mbit/s) bounded by the disk
    (MB/s), each trusted only within physical bounds (untrusted link: the default; untrusted
    disk: no bound)."""
    link = _trusted(inet_down, MIN_INET_MBPS, MAX_INET_MBPS) or DEFAULT_INET_MBPS
    disk = _trusted(disk_bw, MIN_DISK_MBS, MAX_DISK_MBS)
    return link if disk is None else min(link, disk * 8.0)


def time_to_prove_h(offer: Offer, rate: float | None, bench_proofs: int) -> float | None:
    """Hours from rent to first proof: the parameters' download (``fetch_mbps``), the fixed
    set-up, the benchmark's 1 + bench_proofs proofs at the expected rate. None: no rate known
    (nothing says how long its benchmark takes)."""
    if rate is None or not math.isfinite(rate) or rate <= 0.0:
        return None
    download_s = PARAMS_DISK_GIB * GIB * 8 / (fetch_mbps(offer.inet_down, offer.disk_bw) * 1e6)
    return download_s / 3600.0 + SETUP_FIXED_H + (1 + max(0, bench_proofs)) / rate


# -- the order when the work is urgent (issue 43) -------------------------------------------

# The market's deadline: 45 min (curio's Snark-Market.md:169, cuzk-verified.md:125). Requests
# left waiting half of it mean the work outruns the fleet now.
DEADLINE_S = 2700.0
WAITING_SHARE = 0.5  # ASSUMPTION
# Work whose level is expected to last at most this long is urgent: a new rental proves 1 to 4
# h after it is rented, so over a few hours when it proves decides what it earns; over longer,
# its $/proof does (ASSUMPTION).
URGENT_MAX_H = 6.0
# Work waiting near the deadline with no learned duration is taken to last this long (a burst
# of a few hours, issue 43; ASSUMPTION).
DEFAULT_BURST_H = 3.0


@dataclass(frozen=True, slots=True)
class Urgency:
    """Work that is urgent: how much longer it is expected to last, and what the market pays
    per proof (None: not known; offers are then ordered by $/proof over those hours)."""

    hours: float
    usd_per_proof: float | None = None
    bench_proofs: int = 12

    def __post_init__(self) -> None:
        if not (math.isfinite(self.hours) and self.hours >= 0.0):
            raise ValueError(f"urgent work's hours must be finite and >= 0: {self.hours!r}")
        price = self.usd_per_proof
        if price is not None and not (math.isfinite(price) and price >= 0.0):
            raise ValueError(f"usd_per_proof must be finite and >= 0: {price!r}")


def urgency_of(
    observed: Observed | None, bench_proofs: int, max_hours: float = URGENT_MAX_H
) -> Urgency | None:
    """Whether the market's work is urgent, from the autoscaler's reading of the cluster
    (vastui/engine/autoscale.py Observed): its level expected to last at most ``max_hours``
    (demandshift's expected_h), or requests waiting past ``WAITING_SHARE`` of the deadline with
    no duration learned (then ``DEFAULT_BURST_H``). None: not urgent, or no fresh reading."""
    if observed is None or not observed.read:
        return None
    hours = observed.expected_h
    if hours is None or not math.isfinite(hours):
        waited = observed.oldest_unclaimed_s or 0.0
        if hours is not None or waited < WAITING_SHARE * DEADLINE_S:
            return None
        hours = DEFAULT_BURST_H
    if hours > max_hours:
        return None
    price = observed.usd_per_proof
    if price is not None and not (math.isfinite(price) and price >= 0.0):
        price = None
    return Urgency(max(0.0, hours), price, bench_proofs)


def urgent_worth(
    ranked: RankedOffer, urgency: Urgency
) -> tuple[float | None, float | None, float | None]:
    """(hours to first proof, margin $, $/proof) of renting this offer for urgent work.

    Its rate earns over the hours left once it proves: margin = (hours − time to prove) ×
    (rate × (price − bandwidth per proof) − $/h) − set-up (the parameters at its $/GB and its
    $/h while it sets up), as autoscale.raise_worth counts a raise. $/proof = everything it
    bills over the hours (its $/h all along, the parameters) ÷ the proofs made within them,
    plus the bandwidth per proof; None when it proves none within them. The rate is the
    offer's expected one: that a worker more is fed is the autoscaler's call, not the order's.
    Everything None without a rate."""
    rate = ranked.expected_rate
    offer = ranked.offer
    ttp = time_to_prove_h(offer, rate, urgency.bench_proofs)
    if ttp is None or rate is None:
        return None, None, None
    dph = ranked.dph_total  # as it would be rented (a bid's total)
    useful_h = max(0.0, urgency.hours - ttp)
    params_usd = PARAMS_GB * (offer.inet_down_cost or 0.0)
    per_proof = bandwidth_per_proof(offer)
    margin = None
    if urgency.usd_per_proof is not None:
        earn_per_h = rate * (urgency.usd_per_proof - per_proof) - dph
        margin = useful_h * earn_per_h - (params_usd + dph * ttp)
    proofs = rate * useful_h
    cost = (dph * urgency.hours + params_usd) / proofs + per_proof if proofs > 0 else None
    return ttp, margin, cost


def _urgent_key(ranked: RankedOffer) -> tuple[int, float, int, float]:
    """The most margin first (the market's price known), else the least $/proof over the
    work's hours; offers proving nothing within them after, soonest first; unknown rates last;
    then, as by $/proof, a measured machine and the lower price."""
    known = 0 if ranked.known_rate is not None else 1
    if ranked.urgent_margin is not None:
        return (0, -ranked.urgent_margin, known, ranked.dph_total)
    if ranked.urgent_cost_per_proof is not None:
        return (0, ranked.urgent_cost_per_proof, known, ranked.dph_total)
    if ranked.time_to_prove_h is not None:
        return (1, ranked.time_to_prove_h, known, ranked.dph_total)
    return (2, 0.0, known, ranked.dph_total)


def rank_urgent(ranked: Iterable[RankedOffer], urgency: Urgency | None) -> list[RankedOffer]:
    """Ranked offers in the order urgent work wants (``urgent_worth``), each marked so; with
    no urgency, as they are (today's order)."""
    if urgency is None:
        return list(ranked)
    marked = []
    for r in ranked:
        ttp, margin, cost = urgent_worth(r, urgency)
        marked.append(
            replace(
                r, ranked_by=RANKED_BY_TIME, time_to_prove_h=ttp, urgent_margin=margin,
                urgent_cost_per_proof=cost,
            )
        )  # fmt: skip
    return sorted(marked, key=_urgent_key)


class RateModel:
    """What we know about machine speed, built from the performance record."""

    def __init__(self, perf: Iterable[PerfRecord], prior_blend: bool = False) -> None:
        self.prior_blend = prior_blend
        self.by_machine: dict[int, list[PerfRecord]] = {}
        peers: dict[tuple[str, str], list[float]] = {}
        models: dict[str, list[float]] = {}
        for rec in perf:
            self.by_machine.setdefault(rec.machine_id, []).append(rec)
            if rec.last_rate is None or rec.num_gpus < 1:
                continue
            per_gpu = rec.last_rate / rec.num_gpus
            peers.setdefault((rec.gpu_name, ram_class(rec.cpu_ram_gb, rec.num_gpus)), []).append(
                per_gpu
            )
            models.setdefault(rec.gpu_name, []).append(per_gpu)
        # (median per-GPU rate, the source's label): labels made once, not once per offer.
        self._peer_median = {
            k: (statistics.median(v), f"peers({len(v)})", len(v)) for k, v in peers.items()
        }
        self._model_median = {
            k: (statistics.median(v), f"model({len(v)})", len(v)) for k, v in models.items()
        }

    def known_rate(self, offer: Offer) -> float | None:
        known = self.known(offer)
        return None if known is None else known[0]

    def known(self, offer: Offer) -> tuple[float, bool] | None:
        """The machine's own last rate for this offer's GPUs, and whether it is an aborted
        benchmark's partial pace."""
        mine = self.by_machine.get(offer.machine_id)
        if not mine:  # most offers: a machine never measured
            return None
        records = [r for r in mine if r.gpu_name == offer.gpu_name and r.last_rate is not None]
        if not records:
            return None
        exact = [r for r in records if r.num_gpus == offer.num_gpus]
        if exact:
            return exact[0].last_rate, exact[0].last_partial
        newest = max(records, key=lambda r: r.measured_at or 0.0)
        assert newest.last_rate is not None
        return newest.last_rate / newest.num_gpus * offer.num_gpus, newest.last_partial

    def prior(self, offer: Offer) -> tuple[float | None, str]:
        return self.prior_of(
            offer.gpu_name, offer.num_gpus, ram_class(offer.cpu_ram_gb, offer.num_gpus)
        )

    def prior_of(self, gpu_name: str, num_gpus: int, klass: str) -> tuple[float | None, str]:
        peer = self._peer_median.get((gpu_name, klass))
        default = DEFAULT_GPU_RATES.get(gpu_name)
        if peer is not None:
            return self._blend(peer, default, RAM_FACTORS.get(klass, 0.7)) * num_gpus, peer[1]
        model = self._model_median.get(gpu_name)
        if model is not None:
            ram = RAM_FACTORS.get(klass, 0.7)
            return self._blend(model, default, 1.0) * num_gpus * ram, model[1]
        if default is not None:
            return default * num_gpus * RAM_FACTORS.get(klass, 0.7), "model-default"
        return None, "unknown"

    def _blend(self, measured: tuple[float, str, int], default: float | None, ram: float) -> float:
        """A median of n measurements, or (with prior_blend) its blend with the built-in
        prior: n/(n+2) of the measured, 2/(n+2) of the prior."""
        if not self.prior_blend or default is None:
            return measured[0]
        n = measured[2]
        return (n * measured[0] + 2 * default * ram) / (n + 2)


def rank_offers(
    offers: Iterable[Offer],
    perf: Iterable[PerfRecord],
    bad: Mapping[int, str | None] | set[int],
    max_cost_per_proof: float,
    bids: tuple[Config, RiskModel] | None = None,
    levers: Levers | None = None,
    urgency: Urgency | None = None,
) -> list[RankedOffer]:
    """Annotate and sort offers, cheapest expected $/proof first (unknown last). With
    ``bids`` (the config, bids on, and what interruptions cost each machine), an offer is
    ranked as a bid when that is cheaper per proof than renting it on demand. With
    ``urgency`` (urgent work), ordered by what each earns over its hours (``rank_urgent``)."""
    bidding = bids is not None and bids[0].bids.mode != "off"
    levers = levers or Levers()
    model = RateModel(perf, levers.prior_blend)
    measured = model.by_machine
    lifetime = levers.setup_lifetime_h
    bad_reasons: Mapping[int, str | None] = bad if isinstance(bad, Mapping) else dict.fromkeys(bad)
    required = min_rate_at(max_cost_per_proof)  # the budget validated once, not per offer
    # The prior depends only on (GPU model, count, RAM class): thousands of offers share a few
    # hundred of those, so each is worked out once, and looked up by the offer's RAM itself
    # (machines of one kind often report the same RAM: no ram_class call then).
    priors: dict[tuple[str, int, str], tuple[float | None, str]] = {}
    by_ram: dict[tuple[str, int, float | None], tuple[float | None, str]] = {}
    ranked: list[RankedOffer] = []
    keys: list[tuple[int, float, int, float]] = []
    for offer in offers:
        machine = offer.machine_id
        mine = model.known(offer) if machine in measured else None
        known = None if mine is None else mine[0]
        like = (offer.gpu_name, offer.num_gpus, offer.cpu_ram_gb)
        found = by_ram.get(like)
        if found is None:
            peers = (like[0], like[1], ram_class(like[2], like[1]))
            found = priors.get(peers)
            if found is None:
                found = priors[peers] = model.prior_of(*peers)
            by_ram[like] = found
        prior, source = found
        expected = known if known is not None else prior
        if mine is not None:
            source = "partial" if mine[1] else "measured"
        dph = offer.dph_total
        cost = dph / expected if expected and expected > 0 else None
        if cost is not None and lifetime > 0 and expected:
            # the set-up billed before the first proof, spread over the rental's life, and the
            # parameters' download at the offer's $/GB
            cost *= 1.0 + setup_hours(offer.inet_down, expected, levers.bench_proofs) / lifetime
            cost += PARAMS_GB * (offer.inet_down_cost or 0.0) / (lifetime * expected)
        bid = None
        as_bid = False
        if bidding and offer.min_bid is not None and bids is not None:
            config, risks = bids
            risk = risks.risk(machine, offer.gpu_name, expected)
            bid = quote(offer.min_bid, offer.storage_total_cost, expected, cost, risk, config)
            as_bid = better(bid, cost, config.bids.min_saving)
            if as_bid and bid is not None:
                dph, cost = bid.total, bid.cost_per_proof
        if cost is not None:  # bandwidth is billed alike on demand and as a bid
            cost += bandwidth_per_proof(offer)
        ranked.append(
            _build_ranked(
                offer,
                known,
                prior,
                source,
                expected,
                required(dph),
                cost,
                machine in bad_reasons,
                bad_reasons.get(machine),
                bid,
                as_bid,
                RANKED_BY_COST,
                None,
                None,
                None,
            )
        )
        keys.append(_sort_key(cost, known, dph))
    if urgency is not None:
        return rank_urgent(ranked, urgency)
    # Sorting indices by precomputed keys (stable, as sorting by RankedOffer.sort_key is).
    order = sorted(range(len(ranked)), key=keys.__getitem__)
    return [ranked[i] for i in order]


# RankedOffer(...) without the frozen __init__'s object.__setattr__ per field: rank_offers
# builds 10,000 at a time from values it just computed (positional, in field order).
_build_ranked = unchecked_constructor(RankedOffer)
