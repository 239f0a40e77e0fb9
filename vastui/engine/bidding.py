"""Interruptible (bid) rentals: what to bid, what it is worth, and what to do when outbid.

On Vast an interruptible instance pays its own bid while it runs; a higher bid stops it (not
destroyed: its disk is kept and storage billed) until its bid wins again (vast-api.md §14). A
PoRep C2 proof takes minutes and is stateless, so an interruption costs the proofs in flight,
the time stopped (storage, no proofs) and the restart: setup, the daemon's SRS load and PCE
re-extraction (a restarted cuzk daemon does not reload its PCE; cuzk-verified.md).

Per running hour of a bid with ``λ`` interruptions per hour, each stopping it ``D`` hours and
costing ``L`` hours of proving on resume:

    $/proof = (bid + storage + λ·D·storage) / (rate · (1 − λ·L))

The bid is worth it only below the on-demand $/proof and the budget: the highest such bid is
its cap. ``λ`` and ``D`` are learned per machine, blended with its GPU model's and a prior
(gamma-Poisson: a machine with no record gets its model's rate, a few hours of record move it).
Pure: no I/O, no clock; the caller passes ``now``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from vastui.config import BidsSection, Config
from vastui.domain.worker import BidHistory, InstanceRecord, Progress
from vastui.engine import policy
from vastui.engine.spend import closed_stop

# Pseudo-hours of prior behind a GPU model's rate, and of the model's rate behind a machine's.
MODEL_PRIOR_H = 20.0
MACHINE_PRIOR_H = 6.0
# Pseudo-interruptions behind the prior mean outbid duration.
DURATION_PRIOR_N = 2.0


@dataclass(frozen=True, slots=True)
class Risk:
    """What an interruption costs a machine: how often, how long stopped, proving lost."""

    per_hour: float  # interruptions per running hour
    outbid_h: float  # mean hours stopped per interruption
    loss_h: float  # running hours without proofs after each (restart, proofs in flight)
    source: str = "prior"

    @property
    def uptime(self) -> float:
        """The share of running time that proves."""
        return max(0.0, 1.0 - self.per_hour * self.loss_h)


@dataclass(frozen=True, slots=True)
class BidQuote:
    """A bid on one offer: its price ($/h for the machine), the cap it may be raised to, what
    it bills running (price + storage) and its expected $/proof with the risk."""

    price: float
    cap: float
    total: float
    cost_per_proof: float
    risk: Risk

    def to_json(self) -> dict[str, object]:
        return {
            "price": self.price,
            "cap": self.cap,
            "total": round(self.total, 5),
            "cost_per_proof": round(self.cost_per_proof, 6),
            "interruptions_per_h": round(self.risk.per_hour, 4),
            "outbid_h": round(self.risk.outbid_h, 3),
            "risk_source": self.risk.source,
        }


@dataclass(frozen=True, slots=True)
class RaiseBid:
    """Bid this instead: outbid with the going price under the cap (a raise), or running far
    above the going price (bidding.lower)."""

    price: float


def price_up(value: float) -> float:
    """Vast takes bids to 1/10000 $: round up, so a bid meant to win does."""
    return math.ceil(value * 10_000 - 1e-6) / 10_000


def cost_per_proof(bid: float, storage: float, rate: float, risk: Risk) -> float | None:
    """Expected $/proof of a bid on a machine proving ``rate``/h when it runs."""
    proving = rate * risk.uptime
    if proving <= 0:
        return None
    return (bid + storage + risk.per_hour * risk.outbid_h * storage) / proving


def max_bid(rate: float, storage: float, risk: Risk, cost: float) -> float:
    """The bid at which the expected $/proof is ``cost`` (the inverse of cost_per_proof)."""
    return cost * rate * risk.uptime - storage - risk.per_hour * risk.outbid_h * storage


def quote(
    min_bid: float | None,
    storage: float | None,
    rate: float | None,
    on_demand_cost: float | None,
    risk: Risk,
    config: Config,
) -> BidQuote | None:
    """The bid to place on an offer whose going minimum is ``min_bid`` (None: no bid worth it).

    The cap is the bid at which the machine's $/proof reaches the lower of the on-demand
    $/proof and ``max_cost_per_proof``: a bid never pays more per proof than
    renting it on demand would. The first bid is the going price plus the margin, at most
    the cap."""
    if min_bid is None or rate is None or rate <= 0 or config.bids.mode == "off":
        return None
    storage = storage or 0.0
    ceiling = config.fleet.max_cost_per_proof
    if on_demand_cost is not None:
        ceiling = min(ceiling, on_demand_cost)
    cap = max_bid(rate, storage, risk, ceiling)
    floor = price_up(min_bid)
    if floor > cap:
        return None
    price = min(price_up(min_bid * (1.0 + config.bids.margin)), math.floor(cap * 10_000) / 10_000)
    price = max(price, floor)
    cost = cost_per_proof(price, storage, rate, risk)
    if cost is None:
        return None
    return BidQuote(price, round(cap, 4), price + storage, cost, risk)


def better(bid: BidQuote | None, on_demand_cost: float | None, min_saving: float = 0.0) -> bool:
    """Whether to rent the offer as this bid rather than on demand: cheaper per proof by at
    least ``min_saving`` (a share of the on-demand $/proof)."""
    if bid is None:
        return False
    return on_demand_cost is None or bid.cost_per_proof < on_demand_cost * (1.0 - min_saving)


def on_outbid(
    rec: InstanceRecord, going: float | None, now: float, bids: BidsSection
) -> RaiseBid | policy.Kill | None:
    """A stopped bid: raise it when the going price is under its cap, else wait for it to win
    again up to ``keep_outbid_min``, then destroy it (kind ``outbid``: the market's doing,
    never a strike on the machine)."""
    if rec.outbid_since is None:
        return None
    cap, price = rec.bid_cap, rec.bid_price
    if going is not None and cap is not None and price is not None and price < going <= cap:
        return RaiseBid(min(cap, price_up(going * (1.0 + bids.raise_step))))
    waited = now - rec.outbid_since
    if waited < bids.keep_outbid_min * 60.0:
        return None
    where = "" if going is None else f" (going ${going:.4f}/h"
    where += "" if not where or cap is None else f", cap ${cap:.4f}/h)"
    return policy.Kill(
        "outbid",
        f"outbid for {waited / 60:.0f} min, over the {bids.keep_outbid_min:g} min it may wait"
        + where,
        rec.state,
    )


def lower(rec: InstanceRecord, going: float | None, bids: BidsSection) -> RaiseBid | None:
    """A running bid raised over a bidder who has since left: bid the going price plus the
    margin again (a raise is not for ever). Only a drop of 5 % or more, so as not to churn."""
    if rec.outbid_since is not None or going is None or rec.bid_price is None:
        return None
    target = price_up(going * (1.0 + bids.margin))
    if rec.bid_cap is not None:
        target = min(target, rec.bid_cap)
    return RaiseBid(target) if target <= rec.bid_price * 0.95 else None


@dataclass(frozen=True, slots=True)
class BidChange:
    """What one look at a bid instance on Vast changes: record fields, a line for the event
    log, and the stage to go back to (a resumed container starts its worker afresh)."""

    fields: Progress
    note: str
    stage: str | None = None


def observe(rec: InstanceRecord, outbid: bool, status: str | None, now: float) -> BidChange | None:
    """A bid that a higher bid stopped (outbid), or that runs again after one."""
    if not rec.is_bid:
        return None
    if outbid and rec.outbid_since is None:
        return BidChange(
            {"outbid_since": now, "interruptions": rec.interruptions + 1, "unhealthy_since": None},
            f"outbid: stopped by a higher bid (bid ${rec.bid_price or 0:.4f}/h, interruption "
            f"{rec.interruptions + 1})",
        )
    # Its bid wins again: Vast means it to run (its status may be none yet, as at a create).
    if not outbid and rec.outbid_since is not None and status not in policy.UNHEALTHY:
        stopped = max(0.0, now - rec.outbid_since)
        return BidChange(
            # Its counters start again from a new daemon: production is measured afresh.
            {
                "outbid_since": None,
                "prod_state": None,
                **closed_stop(rec, rec.outbid_since, now),
            },
            f"resumed after {stopped / 60:.0f} min outbid: the worker starts again",
            "loading",
        )
    return None


class RiskModel:
    """Interruptions learned per machine, blended with its GPU model's and the prior."""

    def __init__(self, history: Iterable[BidHistory], config: Config) -> None:
        self.bids = config.bids
        self.by_machine: dict[int, BidHistory] = {}
        models: dict[str, list[BidHistory]] = {}
        for row in history:
            self.by_machine[row.machine_id] = row
            models.setdefault(row.gpu_name, []).append(row)
        prior, prior_d = self.bids.prior_interruptions_per_h, self.bids.prior_outbid_h
        self.models: dict[str, tuple[float, float, int]] = {}
        for name, rows in models.items():
            n = sum(r.interruptions for r in rows)
            hours = sum(r.running_h for r in rows)
            stopped = sum(r.stopped_h for r in rows)
            rate = (n + prior * MODEL_PRIOR_H) / (hours + MODEL_PRIOR_H)
            duration = (stopped + prior_d * DURATION_PRIOR_N) / (n + DURATION_PRIOR_N)
            self.models[name] = (rate, duration, len(rows))

    def risk(self, machine_id: int, gpu_name: str, rate: float | None) -> Risk:
        base = self.models.get(gpu_name)
        per_hour, outbid_h = (
            (self.bids.prior_interruptions_per_h, self.bids.prior_outbid_h)
            if base is None
            else base[:2]
        )
        source = "prior" if base is None else f"model({base[2]})"
        mine = self.by_machine.get(machine_id)
        if mine is not None and mine.gpu_name == gpu_name:
            per_hour = (mine.interruptions + per_hour * MACHINE_PRIOR_H) / (
                mine.running_h + MACHINE_PRIOR_H
            )
            outbid_h = (mine.stopped_h + outbid_h * DURATION_PRIOR_N) / (
                mine.interruptions + DURATION_PRIOR_N
            )
            source = "machine"
        # The proofs in flight (about two at a time, the pipeline) go with the container.
        in_flight_h = 2.0 / rate if rate and rate > 0 else 0.0
        return Risk(per_hour, outbid_h, self.bids.restart_loss_min / 60.0 + in_flight_h, source)


__all__ = [
    "BidChange",
    "BidQuote",
    "RaiseBid",
    "Risk",
    "RiskModel",
    "better",
    "cost_per_proof",
    "lower",
    "max_bid",
    "observe",
    "on_outbid",
    "price_up",
    "quote",
]
