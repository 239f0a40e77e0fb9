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

The neutral world (``neutral=True``, issue 30 item 6) shares fewer of vastui's assumptions:

* each model's mean rate is the reference times U(0.6, 1.4) (priors off by up to ±40 %), and
  two models per world are ones vastui has no prior for (listed under a name it does not know);
* the RAM effect per class is original-system.md §4's measured table (38 s ÷ s/proof) times
  U(0.8, 1.2) per world, not the ranking's factors;
* half the faulty machines fail intermittently (a rental is struck with probability 1/2: a ban
  may be bad luck), and a good machine's rental fails once with probability 3 % (a CUDA abort:
  a strike on a good machine).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from vastsim.bids import BidMarket
from vastsim.market import (
    Machine,
    cpu_factor,
    generate_market,
    machine_fault_rng,
    market_moment,
    reprice,
    world_rate_factor,
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
    """The demo's world and each day's listings that pass the operator's filter.

    ``listed(day)`` is what a search with the default filter (vastui.config.DEFAULT_FILTER,
    ordered by $/h, priced for the fleet's disk) returns that day, before machines rented by
    the fleet itself are taken out: the caller knows which machines it holds.
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
        body = build_search_body(
            config.offers.filter,
            order=config.offers.order,
            limit=config.offers.limit,
            allocated_storage=config.fleet.disk_gb,
        )
        self._days = [self._search(body, day) for day in range(days + 1)]

    def _search(self, body: dict[str, Any], day: int) -> list[Offer]:
        moment = market_moment(self.machines, day_seed(self.seed, day), self.world_seed)
        raw: list[dict[str, Any]] = []
        for machine in self.machines:
            price = moment[machine.machine_id]
            if price is not None:
                reprice(machine, price)
                raw += machine.offers
        offers = [Offer.from_api(row) for row in search_offers(body, raw)]
        if self.neutral is not None:
            offers = [replace(o, gpu_name=self.neutral.listed_name(o.gpu_name)) for o in offers]
        return offers

    def listed(self, now: float) -> Sequence[Offer]:
        day = min(int(now // DAY), len(self._days) - 1)
        return self._days[day]

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
        """What the k-th rental of the machine meets: its fault (in the neutral world, an
        intermittent one may spare the rental, a good machine may fail once)."""
        hidden = self.hidden[machine_id]
        if self.neutral is None:
            return hidden
        return self.neutral.episode(self.seed, machine_id, k, hidden)


# The neutral world (module docstring): its numbers are ASSUMPTIONS, chosen to sit apart from
# vastui's own (ranking.DEFAULT_GPU_RATES, ranking.RAM_FACTORS).
NEUTRAL_RATE_RANGE = (0.6, 1.4)
NEUTRAL_UNKNOWN_MODELS = 2
# original-system.md §4: 128 GiB 152 s/proof, 256 GiB 53 s, 384 GiB 43 s, 512+ GiB 38 s
NEUTRAL_RAM_TABLE = ((64.0, 0.0), (128.0, 38 / 152), (256.0, 38 / 53), (384.0, 38 / 43))
NEUTRAL_RAM_SPREAD = (0.8, 1.2)
INTERMITTENT_SHARE = 0.5  # of the faulty machines
INTERMITTENT_STRIKE = 0.5  # the chance a rental of an intermittent machine is struck
TRANSIENT_FAULT = 0.03  # the chance a good machine's rental fails once


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

    def rate_factor(self, gpu_name: str) -> float:
        return random.Random(f"neutral-rate:{self.world_seed}:{gpu_name}").uniform(
            *NEUTRAL_RATE_RANGE
        )

    def ram_factor(self, gib_per_gpu: float) -> float:
        if gib_per_gpu >= self.ram_curve[-1][0]:
            return 1.0
        for (x0, y0), (x1, y1) in zip(self.ram_curve, self.ram_curve[1:], strict=False):
            if x0 <= gib_per_gpu <= x1:
                return y0 + (y1 - y0) * (gib_per_gpu - x0) / (x1 - x0)
        return 0.0

    def rate(self, machine: Machine, num_gpus: int) -> float:
        """The slice's rate: the machine's own draw around its model's mean (its
        ``base_rate`` taken off the demo world's factor onto this one's), this world's RAM
        effect, the CPU share as the demo world has it."""
        per_gpu = machine.base_rate / world_rate_factor(self.world_seed, machine.gpu_name)
        per_gpu *= self.rate_factor(machine.gpu_name)
        ram = self.ram_factor(machine.ram_gib / machine.num_gpus)
        cpu = cpu_factor(machine.cpu_cores / machine.num_gpus)
        return num_gpus * per_gpu * ram * cpu

    def listed_name(self, gpu_name: str) -> str:
        """A model vastui has no prior for is listed under a name it does not know."""
        return f"{gpu_name} Ada" if gpu_name in self.unknown else gpu_name

    def episode(self, seed: int, machine_id: int, k: int, hidden: Hidden) -> Hidden:
        """What strikes the k-th rental of a machine (the same for every policy)."""
        rng = random.Random(f"episode:{seed}:{machine_id}:{k}")
        draw = rng.random()
        if hidden.fault == "none":
            if draw < TRANSIENT_FAULT:
                return replace(hidden, fault="cuda_abort", fault_after=rng.randint(1, 60))
            return hidden
        intermittent = random.Random(f"intermittent:{self.world_seed}:{machine_id}").random()
        if intermittent < INTERMITTENT_SHARE and draw >= INTERMITTENT_STRIKE:
            return replace(hidden, fault="none", fault_after=0)
        return hidden


def _hidden(world_seed: int, machine_id: int, scenario: Scenario) -> Hidden:
    fault = machine_fault(world_seed, machine_id, scenario.fault_rate)
    if is_slow(world_seed, machine_id, scenario.slow_share):
        return Hidden(fault.fault, fault.fault_after, fault.fault_every, slow=True)
    return fault
