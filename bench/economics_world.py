"""The world of the economics bench: the demo's simulated market (vastsim.market), what each
machine hides (its speed, its fault) and which machines are listed, at what price, each day.

Everything here is drawn from seeds, never from the order of events, so both policies face the
very same machines: the k-th rental of a machine gets the same image load, host outage and
proof jitter whichever policy rents it (common random numbers: the comparison's noise is the
policies', not the dice's).

The demo's world (``neutral=False``): each GPU model's hidden mean rate is the reference figure
that vastui's priors also hold, times a factor of the world seed in [0.75, 1.25]
(vastsim.market.world_rate_mean); the RAM effect is the demo market's curve, calibrated to the
ranking's own; a machine's fault is permanent and strikes every rental. Prices do not know a
machine's fault; a host goes offline at the hazard its listed reliability implies
(vastsim.outages).

The neutral world (``neutral=True``, issues 30 item 6 and 43 item 5) shares fewer of vastui's
assumptions (each number below is named, with its source or as an ASSUMPTION, where it is set):

* speeds: the one GPU model a source measured (the RTX 5070 Ti, 37.7 s/proof pipelined,
  original-system.md:294) proves at that figure; every other model at the reference (vastui's
  prior) times that measurement's ratio to its prior (≈3.2) and a spread of its own, U(0.7,
  1.3) per world: the true speeds centre on the published level, not on the priors. Two models
  per world are ones vastui has no prior for (listed under a name it does not know);
* the RAM effect per class is original-system.md §4's measured table (38 s ÷ s/proof) times
  U(0.8, 1.2) per world, not the ranking's factors;
* faults strike per rental, with a per-machine propensity: a faulty machine's rental is struck
  with its own chance (50-95 %: a bad machine sometimes passes), a good machine's with a small
  one (0-6 % × the scenario's fault rate: a good machine sometimes fails);
* prices: each model's on-demand $/GPU-hour has a centre from published figures (the RTX 4090's
  $0.31/h interruptible to $0.45/h on demand: published 2026 figures quoted in issue 43, also in
  cuzk-verified.md:226-227) and a spread; interruptible floors at the published ratio; bandwidth
  at $0-50 per TB (cuzk-verified.md:229-230).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from vastsim.bids import BidMarket
from vastsim.market import (
    GPU_BY_NAME,
    Machine,
    cpu_factor,
    generate_market,
    machine_fault_rng,
    market_moment,
    price_fields,
    reprice,
    slice_price,
)
from vastsim.query_eval import search_offers
from vastsim.workers import FAULTS
from vastui.config import Config
from vastui.vast.models import Offer
from vastui.vast.query import build_search_body

DAY = 86400.0
WORLD_T0 = 1_767_225_600.0  # 2026-01-01T00:00Z: only shifts the offers' dates
# How long a host that went offline stays off the market (ASSUMPTION: a working day).
MACHINE_DOWN_S = 6 * 3600.0
# Each day's market is drawn with its own seed; day 0 is the market of the run's seed itself.
DAY_SEED_STEP = 7919
# The original's default filter, the same on its server and UI (original-system.md:141;
# cmd/vast-manager/main.go:1260 @ misc/cuzk-rseal-merge); vastui's adds driver_version and
# has_avx (vastui/config/schema.py:33-36). Its deploy rents 250 GB of disk (main.go:1320).
ORIGINAL_FILTER = (
    "disk_space>=250 dph<=0.9 gpu_ram>12.5 cpu_ram>=240 cpu_cores>25 inet_down>100 cuda_vers>=13.0"
)
ORIGINAL_DISK_GB = 250.0


@dataclass(frozen=True, slots=True)
class Scenario:
    """How rough the market is: ``fault_rate`` scales the demo's machine faults and each
    host's outage hazard (vastsim.workers.FAULTS, vastsim.outages: 1.0 is the demo's
    world, about one machine in six with a fault, outages at the rate each machine's listed
    reliability implies); ``slow_share`` of the machines prove at half their rate (the
    stand-ins' ``slow`` fault), a surprise no listing shows."""

    name: str
    fault_rate: float
    slow_share: float


@dataclass(frozen=True, slots=True)
class Hidden:
    """What a machine hides: its fault (vastsim.standins._simlib.FAULTS) and slowness."""

    fault: str = "none"
    fault_after: int = 0  # the daemon's proof index where the fault strikes (0: the warmup)
    fault_every: int = 1  # gpu_panic: every this many proofs from fault_after
    slow: bool = False


def machine_fault(world_seed: int, machine_id: int, fault_rate: float) -> Hidden:
    """The machine's fault, drawn exactly as vastsim.workers.SimWorkerHost.fault_for does
    (the machine's own dice, the FAULTS table scaled by the fault rate)."""
    rng = machine_fault_rng(world_seed, machine_id)
    draw = rng.random()
    for name, probability, (lo, hi) in FAULTS:
        p = probability * fault_rate
        if draw < p:
            after = rng.randint(lo, hi)
            return Hidden(name, after, rng.randint(3, 6))
        draw -= p
    return Hidden()


def is_slow(world_seed: int, machine_id: int, share: float) -> bool:
    """A hidden half-rate machine, drawn apart from the faults (its own dice)."""
    return share > 0 and random.Random(f"slow:{world_seed}:{machine_id}").random() < share


def rental_rng(seed: int, machine_id: int, k: int) -> random.Random:
    """The dice of the k-th rental of a machine in a run: the same for both policies."""
    return random.Random(f"rental:{seed}:{machine_id}:{k}")


def day_seed(seed: int, day: int) -> int:
    return seed + DAY_SEED_STEP * day


class Market:
    """The demo's world and each day's listings that pass a filter.

    ``listed(day)`` is what a search with the fleet's filter (vastui.config.DEFAULT_FILTER,
    ordered by $/h, priced for the fleet's disk) returns that day, before machines rented by
    the fleet itself are taken out: the caller knows which machines it holds.
    ``listed(day, ORIGINAL_FILTER, ORIGINAL_DISK_GB)`` is the original's search of that day.
    """

    def __init__(
        self,
        *,
        world_seed: int,
        seed: int,
        hosts: int,
        scenario: Scenario,
        config: Config,
        days: int,
        bid_pressure: float = 1.0,
        neutral: bool = False,
    ) -> None:
        self.world_seed = world_seed
        self.seed = seed
        self.scenario = scenario
        self.days = days
        # Other bidders on each machine (vastsim/bids.py, the simulator's own market),
        # drawn from the run's seed: the same for every policy.
        self.bids = BidMarket(seed, 0.0, bid_pressure)
        self._floors: dict[int, float] = {}  # offer id -> the host's floor (min_bid, no bidder)
        self.machines: list[Machine] = generate_market(world_seed, hosts=hosts, clock_now=WORLD_T0)
        self.by_id = {m.machine_id: m for m in self.machines}
        self.neutral = NeutralWorld(world_seed, self.machines) if neutral else None
        self.hidden = {
            m.machine_id: _hidden(world_seed, m.machine_id, scenario) for m in self.machines
        }
        self._order, self._limit = config.offers.order, config.offers.limit
        self._default = (config.offers.filter, config.fleet.disk_gb)
        self._listings: dict[tuple[str, float, int], list[Offer]] = {}
        for day in range(days + 1):  # the fleet's own search, drawn up front
            self.listed(day * DAY)

    def _search(self, body: dict[str, Any], day: int) -> list[Offer]:
        seed = day_seed(self.seed, day)
        moment = market_moment(self.machines, seed, self.world_seed)
        raw: list[dict[str, Any]] = []
        for machine in self.machines:
            price = moment[machine.machine_id]
            if price is None:
                continue
            if self.neutral is None:
                reprice(machine, price)
            else:
                self.neutral.reprice(machine, seed)
            raw += machine.offers
        offers = [Offer.from_api(row) for row in search_offers(body, raw)]
        if self.neutral is not None:
            offers = [replace(o, gpu_name=self.neutral.listed_name(o.gpu_name)) for o in offers]
        return offers

    def listed(
        self, now: float, query: str | None = None, disk_gb: float | None = None
    ) -> Sequence[Offer]:
        """The day's listings through ``query`` (default: the fleet's filter) priced for
        ``disk_gb``; each (filter, disk, day) searched once (the day's prices are drawn from
        its seed: searching again reprices the machines the same way)."""
        day = min(int(now // DAY), self.days)
        key = (query or self._default[0], self._default[1] if disk_gb is None else disk_gb, day)
        found = self._listings.get(key)
        if found is None:
            body = build_search_body(
                key[0], order=self._order, limit=self._limit, allocated_storage=key[1]
            )
            found = self._listings[key] = self._search(body, day)
        return found

    def floor(self, offer: Offer) -> float:
        """The host's floor for a bid on the offer: its min_bid with nobody else bidding (not
        the going price a search at some moment put there: with_going_bids)."""
        return self._floors.get(offer.id, offer.min_bid or 0.0)

    def with_going_bids(self, offers: Sequence[Offer], now: float) -> list[Offer]:
        """The offers as a search at ``now`` lists them: min_bid is the going price (the
        floor times the highest other bid on the machine); a machine whose going price is over
        its on-demand price is rented on demand by someone else (vastsim/cloud.py search)."""
        out = []
        for o in offers:
            if o.min_bid is None:
                out.append(o)
                continue
            self._floors[o.id] = o.min_bid
            going = self.bids.going_price(o.machine_id, o.min_bid, now)
            if o.storage_total_cost is not None and going >= o.dph_total - o.storage_total_cost:
                continue
            out.append(o if going == o.min_bid else replace(o, min_bid=going))
        return out

    def rate(self, offer: Offer) -> float:
        """The slice's true proofs/hour when fed (hidden): the machine's draw, RAM and CPU
        shares (vastsim.market.Machine.rate_for), halved on a slow machine."""
        machine = self.by_id[offer.machine_id]
        if self.neutral is not None:
            rate = self.neutral.rate(machine, offer.num_gpus)
        else:
            rate = machine.rate_for(offer.num_gpus)
        return rate * 0.5 if self.hidden[offer.machine_id].slow else rate

    def hidden_for(self, machine_id: int, k: int) -> Hidden:
        """What the k-th rental of the machine meets: its fault (in the neutral world, struck
        or spared by the rental's dice at the machine's propensity)."""
        hidden = self.hidden[machine_id]
        if self.neutral is None:
            return hidden
        return self.neutral.episode(self.seed, machine_id, k, hidden, self.scenario.fault_rate)


# -- the neutral world (module docstring) ---------------------------------------------------

# Speeds. The one GPU model a source measured: cuzk's docs, RTX 5070 Ti on a 512+ GiB box,
# steady pipelined 37.4-37.7 s/proof (original-system.md:294, "≈95 proofs/h"); its RAM table
# (original-system.md:281-288) is NEUTRAL_RAM_TABLE below. vastui's prior for it is 30/h.
PUBLISHED_S_PER_PROOF = {"RTX 5070 Ti": 37.7}
# Every other model: no source measures it (original-system.md:298-299 gives figures as an
# ASSUMPTION; vastui's priors are those figures). ASSUMPTION: the priors' shape between models
# is kept and their level is the one measurement's: each model at its prior × (the 5070 Ti's
# published rate ÷ its prior, ≈3.2) × U(0.7, 1.3) of its own per world. Why the level moves
# with the measurement: the priors' source figure, "24-36 proofs/h on rented boxes" from 12
# proofs in 20-30 min (original-system.md:297), fits proofs run one at a time (one proof's
# latency is 2.36 × the pipelined interval on the measured box: 88.9 s against 37.7 s,
# original-system.md:292-294), while production keeps the pipeline full. So the true speeds
# centre on the published figure's level, not on the priors; a 4090 is not made 3× slower
# than a 5070 Ti, as a level left at the priors would make it.
PUBLISHED_LEVEL_MODEL = "RTX 5070 Ti"
NEUTRAL_MODEL_SPREAD = (0.7, 1.3)
NEUTRAL_UNKNOWN_MODELS = 2  # ASSUMPTION: models vastui has no prior for, per world
# original-system.md §4: 128 GiB 152 s/proof, 256 GiB 53 s, 384 GiB 43 s, 512+ GiB 38 s
NEUTRAL_RAM_TABLE = ((64.0, 0.0), (128.0, 38 / 152), (256.0, 38 / 53), (384.0, 38 / 43))
NEUTRAL_RAM_SPREAD = (0.8, 1.2)  # ASSUMPTION: other boxes than the one measured

# Faults, per rental at a per-machine propensity. ASSUMPTION (no source counts how often a
# rented machine fails): a faulty machine (the FAULTS table's share) strikes a rental with a
# chance of its own in BAD_PROPENSITY; a good one in GOOD_PROPENSITY × the scenario's fault
# rate (mean 3 % at the demo's rate, as the previous transient fault), a fault drawn as the
# FAULTS table weighs them.
BAD_PROPENSITY = (0.5, 0.95)
GOOD_PROPENSITY = (0.0, 0.06)

# Prices. Published 2026 figures quoted in issue 43 (also cuzk-verified.md:226-227, "a public
# overview of Vast.ai, as of 2026-05"): RTX 4090 about $0.31/h interruptible to $0.45/h on demand.
PUBLISHED_4090_ON_DEMAND = 0.45
PUBLISHED_4090_INTERRUPTIBLE = 0.31
INTERRUPTIBLE_SHARE = PUBLISHED_4090_INTERRUPTIBLE / PUBLISHED_4090_ON_DEMAND


def _demo_mid(name: str) -> float:
    model = GPU_BY_NAME[name]
    return (model.dph_lo + model.dph_hi) / 2


# Each model's on-demand $/GPU-hour at the centre of its spread.
NEUTRAL_PRICE_CENTRE: dict[str, float] = {
    "RTX 4090": PUBLISHED_4090_ON_DEMAND,
    # cuzk-verified.md:226 "RTX 3090 from about $0.18/h interruptible"; on demand at the 4090's
    # interruptible share: ASSUMPTION
    "RTX 3090": 0.18 / INTERRUPTIBLE_SHARE,
    # cuzk-verified.md:227 "A100 80 GB $0.78-1.20/h", "H100 80 GB $1.85-2.50/h": the middle
    # (ASSUMPTION: that these are on-demand ranges)
    "A100 SXM4": (0.78 + 1.20) / 2,
    "H100 SXM": (1.85 + 2.50) / 2,
    # ASSUMPTION, no published figure: the demo's price of the model relative to the 4090's
    # (the middles of GpuModel's ranges, vastsim/market.py) at the 4090's published $0.45
    **{
        name: PUBLISHED_4090_ON_DEMAND * _demo_mid(name) / _demo_mid("RTX 4090")
        for name in ("RTX 5090", "RTX 5070 Ti", "RTX PRO 4000", "RTX PRO 6000 WS")
    },
}
# ASSUMPTION: a machine's day price is the centre × U(0.65, 1.35), about 2× from the cheapest
# to the dearest: the gap a public observatory reports between verified and unverified RTX
# 4090 offers (cuzk-verified.md:228-229); a host's interruptible floor is its on-demand price
# × the published share × U(0.85, 1.15).
NEUTRAL_PRICE_SPREAD = (0.65, 1.35)
INTERRUPTIBLE_SPREAD = (0.85, 1.15)
# Bandwidth $/GB per machine: "egress prices from $0 to $50 per TB" (cuzk-verified.md:229-230);
# ASSUMPTION: in that range skewed to the cheap end as the demo's prices are (u², a mean of
# about $17/TB: most hosts compete on price), the same price up and down.
NEUTRAL_INET_COST = (0.0, 0.05)
NEUTRAL_INET_SKEW = 2.0


class NeutralWorld:
    """The neutral world's draws for one world seed, each from dice of its own."""

    def __init__(self, world_seed: int, machines: Sequence[Machine]) -> None:
        self.world_seed = world_seed
        models = sorted({m.gpu_name for m in machines})
        rng = random.Random(f"neutral-unknown:{world_seed}")
        self.unknown = set(rng.sample(models, min(NEUTRAL_UNKNOWN_MODELS, len(models))))
        ram = random.Random(f"neutral-ram:{world_seed}")
        points = [(0.0, 0.0)]
        for gib, share in NEUTRAL_RAM_TABLE:
            # a monotone curve: each class at least the one below
            points.append(
                (gib, max(points[-1][1], min(1.0, share * ram.uniform(*NEUTRAL_RAM_SPREAD))))
            )
        points.append((512.0, 1.0))
        self.ram_curve = tuple(points)
        anchor = PUBLISHED_LEVEL_MODEL
        self.level = 3600.0 / PUBLISHED_S_PER_PROOF[anchor] / GPU_BY_NAME[anchor].rate_mean
        for machine in machines:  # bandwidth is the machine's, whatever the day
            dice = random.Random(f"neutral-inet:{world_seed}:{machine.machine_id}")
            lo, hi = NEUTRAL_INET_COST
            cost = round(lo + (hi - lo) * dice.random() ** NEUTRAL_INET_SKEW, 4)
            for offer in machine.offers:
                offer["inet_down_cost"] = offer["inet_up_cost"] = cost
                offer["internet_down_cost_per_tb"] = offer["internet_up_cost_per_tb"] = round(
                    cost * 1000, 2
                )

    # -- speeds ---------------------------------------------------------------------------

    def model_rate(self, gpu_name: str) -> float:
        """The world's mean proofs/h per GPU of a model with ample RAM and CPU: the published
        figure, else the reference × the published level × the model's spread."""
        published = PUBLISHED_S_PER_PROOF.get(gpu_name)
        if published is not None:
            return 3600.0 / published
        spread = random.Random(f"neutral-rate:{self.world_seed}:{gpu_name}").uniform(
            *NEUTRAL_MODEL_SPREAD
        )
        return GPU_BY_NAME[gpu_name].rate_mean * self.level * spread

    def ram_factor(self, gib_per_gpu: float) -> float:
        if gib_per_gpu >= self.ram_curve[-1][0]:
            return 1.0
        for (x0, y0), (x1, y1) in zip(self.ram_curve, self.ram_curve[1:], strict=False):
            if x0 <= gib_per_gpu <= x1:
                return y0 + (y1 - y0) * (gib_per_gpu - x0) / (x1 - x0)
        return 0.0

    def rate(self, machine: Machine, num_gpus: int) -> float:
        """The slice's rate: its model's mean × the machine's own draw (N(1, 15 %), drawn with
        the world: vastsim.market), this world's RAM effect, the CPU share as the demo has it."""
        per_gpu = self.model_rate(machine.gpu_name) * machine.perf["draw"]
        ram = self.ram_factor(machine.ram_gib / machine.num_gpus)
        cpu = cpu_factor(machine.cpu_cores / machine.num_gpus)
        return num_gpus * per_gpu * ram * cpu

    def listed_name(self, gpu_name: str) -> str:
        """A model vastui has no prior for is listed under a name it does not know."""
        return f"{gpu_name} Ada" if gpu_name in self.unknown else gpu_name

    # -- prices ---------------------------------------------------------------------------

    def reprice(self, machine: Machine, seed: int) -> None:
        """The machine's asking prices in the market of ``seed`` (a day's): its model's centre
        × the spread, the interruptible floor at the published share; storage and bandwidth
        keep theirs."""
        rng = random.Random(f"neutral-price:{seed}:{machine.machine_id}")
        per_gpu = NEUTRAL_PRICE_CENTRE[machine.gpu_name] * rng.uniform(*NEUTRAL_PRICE_SPREAD)
        floor = INTERRUPTIBLE_SHARE * rng.uniform(*INTERRUPTIBLE_SPREAD)
        for offer in machine.offers:
            offer["dph_base"] = slice_price(per_gpu, offer["num_gpus"])
            offer["min_bid"] = round(offer["dph_base"] * min(floor, 0.95), 4)
            price_fields(offer, 5.0)

    # -- faults ---------------------------------------------------------------------------

    def propensity(self, machine_id: int, faulty: bool, fault_rate: float) -> float:
        """The chance a rental of this machine is struck."""
        rng = random.Random(f"propensity:{self.world_seed}:{machine_id}")
        if faulty:
            return rng.uniform(*BAD_PROPENSITY)
        return min(1.0, rng.uniform(*GOOD_PROPENSITY) * fault_rate)

    def episode(
        self, seed: int, machine_id: int, k: int, hidden: Hidden, fault_rate: float = 1.0
    ) -> Hidden:
        """What strikes the k-th rental of a machine (the same for every policy): its own fault
        at its propensity (a faulty machine), a fault drawn from the table (a good one), or
        nothing; a slow machine stays slow."""
        rng = random.Random(f"episode:{seed}:{machine_id}:{k}")
        faulty = hidden.fault != "none"
        if rng.random() >= self.propensity(machine_id, faulty, fault_rate):
            return Hidden(slow=hidden.slow)
        if faulty:
            return hidden
        return replace(_table_fault(rng), slow=hidden.slow)


def _table_fault(rng: random.Random) -> Hidden:
    """A fault drawn as the FAULTS table weighs them, its proof index from the table's range."""
    names = [(name, after) for name, _, after in FAULTS]
    name, (lo, hi) = rng.choices(names, weights=[p for _, p, _ in FAULTS])[0]
    return Hidden(name, rng.randint(lo, hi), rng.randint(3, 6))


def _hidden(world_seed: int, machine_id: int, scenario: Scenario) -> Hidden:
    fault = machine_fault(world_seed, machine_id, scenario.fault_rate)
    if is_slow(world_seed, machine_id, scenario.slow_share):
        return Hidden(fault.fault, fault.fault_after, fault.fault_every, slow=True)
    return fault
