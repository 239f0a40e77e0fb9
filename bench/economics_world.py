"""The world of the economics bench: the demo's simulated market (vastsim.market), what each
machine hides (its speed, its fault) and which machines are listed, at what price, each day.

Everything here is drawn from seeds, never from the order of events, so both policies face the
very same machines: the k-th rental of a machine gets the same image load, host outage and
proof jitter whichever policy rents it (common random numbers: the comparison's noise is the
policies', not the dice's).

The world is drawn independently of vastui: each GPU model's hidden mean rate is the reference
figure that vastui's priors also hold, times a factor of the world seed in [0.75, 1.25]
(vastsim.market.world_rate_mean); prices do not know a machine's fault; a host goes offline
at the hazard its listed reliability implies (vastsim.outages).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from vastsim.bids import BidMarket
from vastsim.market import (
    Machine,
    generate_market,
    machine_fault_rng,
    market_moment,
    reprice,
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
        return [Offer.from_api(row) for row in search_offers(body, raw)]

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
        rate = machine.rate_for(offer.num_gpus)
        return rate * 0.5 if self.hidden[offer.machine_id].slow else rate


def _hidden(world_seed: int, machine_id: int, scenario: Scenario) -> Hidden:
    fault = machine_fault(world_seed, machine_id, scenario.fault_rate)
    if is_slow(world_seed, machine_id, scenario.slow_share):
        return Hidden(fault.fault, fault.fault_after, fault.fault_every, slow=True)
    return fault
