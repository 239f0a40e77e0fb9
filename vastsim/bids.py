"""The interruptible (bid) market of each simulated machine: other bidders come and go.

On Vast an interruptible instance runs while its bid is the highest on the machine; a higher
bid (or an on-demand rental, which outranks every bid) pauses it: stopped, not destroyed, its
disk kept and billed; it resumes by itself when its bid wins again (vast-api.md §14). No
source publishes how often that happens (§14: "sweep them"), so the pressure is a parameter.

Each machine has its own timeline of other bidders, drawn from ``(seed, machine_id)`` alone:
arrivals at ``ARRIVALS_PER_H × pressure`` per hour, each staying an exponential time and
bidding a multiple of the host's floor (the offer's generated ``min_bid``). The going price of
an offer at ``t`` is its floor times the highest multiple present (1 when nobody else bids).
The top of the spread is above every offer's on-demand price (the floor is 0.4-0.75 of it):
those bidders stand for on-demand renters, whom no sane bid outbids.

Pay-as-bid: an instance pays its own bid while it runs, storage while stopped.
"""

from __future__ import annotations

import bisect
import math
import random
from dataclasses import dataclass, field

# Other bidders arriving at one machine per hour at pressure 1 (ASSUMPTION, no source: at
# pressure 1 a machine sees a higher bidder every few hours).
ARRIVALS_PER_H = 0.2
STAY_MEAN_H = 3.0  # how long another bidder keeps the machine (ASSUMPTION)
# Another bidder's price per GPU, as a multiple of the host's floor (ASSUMPTION): most bid near
# the floor, a few far above (the on-demand renters).
SPREAD = (1.0, 3.0)
SPREAD_SKEW = 3.0
# Other bidders present when the simulated world starts are drawn from this far back.
WARMUP_H = 24.0
CHUNK_H = 24.0


@dataclass(slots=True)
class _Timeline:
    """Other bidders on one machine, in start order: (start, end, multiple)."""

    rng: random.Random
    horizon: float
    starts: list[float] = field(default_factory=list)
    bidders: list[tuple[float, float, float]] = field(default_factory=list)


class BidMarket:
    """The going interruptible price of every machine at any time, from the seed alone."""

    def __init__(self, seed: int, origin: float, pressure: float = 1.0) -> None:
        if not (math.isfinite(pressure) and pressure >= 0):
            raise ValueError(f"bid pressure must be a non-negative number, not {pressure!r}")
        self.seed = seed
        self.origin = origin
        self.pressure = pressure
        self._lines: dict[int, _Timeline] = {}

    def _line(self, machine_id: int, until: float) -> _Timeline:
        line = self._lines.get(machine_id)
        if line is None:
            rng = random.Random(f"bids:{self.seed}:{machine_id}")
            line = self._lines[machine_id] = _Timeline(rng, self.origin - WARMUP_H * 3600.0)
        rate = ARRIVALS_PER_H * self.pressure / 3600.0
        while line.horizon < until and rate > 0:
            end = line.horizon + CHUNK_H * 3600.0
            t = line.horizon
            while True:
                t += line.rng.expovariate(rate)
                if t >= end:
                    break
                stay = line.rng.expovariate(1.0 / (STAY_MEAN_H * 3600.0))
                lo, hi = SPREAD
                multiple = lo + (hi - lo) * line.rng.random() ** SPREAD_SKEW
                line.starts.append(t)
                line.bidders.append((t, t + stay, multiple))
            line.horizon = end
        return line

    def multiple(self, machine_id: int, t: float) -> float:
        """The highest other bid on the machine at ``t``, as a multiple of its floor (>= 1)."""
        line = self._line(machine_id, t)
        top = 1.0
        # Bidders start in order; a stay is at most a few days, so look back a bounded way.
        first = bisect.bisect_left(line.starts, t - 30 * 86400.0)
        last = bisect.bisect_right(line.starts, t)
        for start, end, multiple in line.bidders[first:last]:
            if start <= t < end and multiple > top:
                top = multiple
        return top

    def going_price(self, machine_id: int, floor: float, t: float) -> float:
        """An offer's minimum winning bid at ``t`` ($/h for its slice; ``floor`` its min_bid
        with nobody else bidding), rounded up to 1/10000 $: bidding what it shows wins."""
        going = floor * self.multiple(machine_id, t)
        if not (math.isfinite(going) and abs(going) < 1e12):  # a test's impossible offer
            return going
        return math.ceil(going * 10_000 - 1e-6) / 10_000

    def wins(self, machine_id: int, floor: float, bid: float, t: float) -> bool:
        """Whether a bid of ``bid`` $/h on an offer with that floor runs at ``t`` (a tie wins:
        the earlier bid keeps the machine)."""
        return bid >= floor * self.multiple(machine_id, t) - 1e-9

    def next_change(self, machine_id: int, t: float, until: float) -> float | None:
        """The first time after ``t`` (before ``until``) another bidder arrives or leaves."""
        line = self._line(machine_id, until)
        first = bisect.bisect_left(line.starts, t - 30 * 86400.0)
        best: float | None = None
        for start, end, _ in line.bidders[first:]:
            if start > until:
                break
            for edge in (start, end):
                if t < edge <= until and (best is None or edge < best):
                    best = edge
        return best


__all__ = ["ARRIVALS_PER_H", "SPREAD", "STAY_MEAN_H", "BidMarket"]
