"""What both policies share in the economics bench: the event queue, the fleet's instances as
vastui's store records (so spend is vastui/engine/spend.py's, for both), the machines the fleet
holds, and the figures of a run.

Bandwidth is billed for every policy alike, as spend.py bills it: each record carries its
offer's link and $/GB (``inet_down``, ``inet_down_cost``, ``inet_up_cost``) and the first
parameter fetch's start and end (``params_from``/``params_to``, as store.instances.set_stage
keeps them), so each rental pays the parameters (plan.PARAMS_GB, ~145 GB, or what its link
carried before it was destroyed mid-fetch); at the end of a run each record is given the
requests its production downloaded and the proofs it sent (``requests_carried``/
``proofs_carried``: the bench has no curio cluster to read them from).
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from bench.economics_worker import Bench, Production, Rental, plan
from bench.economics_world import MACHINE_DOWN_S, Market, rental_rng
from vastui.config import Config
from vastui.domain.worker import InstanceRecord
from vastui.engine import spend
from vastui.engine.bidding import BidQuote
from vastui.vast.models import Offer

FIRST_ID = 3_000_001


class Clock:
    """A discrete-event queue on simulated seconds: ``at(t, fn, *args)`` runs ``fn(*args)``
    at t, in time order (ties in the order they were scheduled)."""

    def __init__(self) -> None:
        self.now = 0.0
        self._queue: list[tuple[float, int, Callable[..., None], tuple[Any, ...]]] = []
        self._seq = itertools.count()

    def at(self, t: float, fn: Callable[..., None], *args: Any) -> None:
        if math.isfinite(t):
            heapq.heappush(self._queue, (max(t, self.now), next(self._seq), fn, args))

    def every(self, first: float, period: float, fn: Callable[[], None]) -> None:
        """``fn()`` at first, first + period, ... for as long as the run lasts."""

        def tick() -> None:
            fn()
            self.at(self.now + period, tick)

        self.at(first, tick)

    def run_until(self, end: float) -> None:
        while self._queue and self._queue[0][0] <= end:
            t, _, fn, args = heapq.heappop(self._queue)
            self.now = t
            fn(*args)
        self.now = end


@dataclass(slots=True)
class Worker:
    """One rental: its store record (what the policy knows), its hidden timeline, the offer."""

    rec: InstanceRecord
    offer: Offer
    rental: Rental
    bench: Bench | None = None
    production: Production | None = None
    # An interruptible worker: proofs of its earlier runs (before an outbid stopped it), the
    # run it is in (events and readings of an earlier run are dropped), when the container
    # starts again after a resume, and the host's floor for a bid on this offer.
    banked: int = 0
    run: int = 0
    boot_until: float | None = None
    floor: float = 0.0

    @property
    def live(self) -> bool:
        return not self.rec.killed

    def delivered(self, now: float) -> int:
        """Proofs delivered in production by now (the truth, not what was measured)."""
        return self.work(now)[0]

    def work(self, now: float) -> tuple[int, int]:
        """(completed, failed) proofs in production by now: each one a request downloaded,
        each completed one a proof sent (an earlier run's failures are not kept: a floor)."""
        if self.production is None:
            return self.banked, 0
        end = now if self.rec.killed_at is None else min(now, self.rec.killed_at)
        done, failed = self.production.counts(end)
        return self.banked + done, failed

    def billed(self, now: float) -> InstanceRecord:
        """The record as spend.py bills it at ``now``: with the requests and proofs of its
        production (spend.cluster_work reads them from the carried counts)."""
        done, failed = self.work(now)
        if done + failed == 0:
            return self.rec
        return replace(
            self.rec,
            requests_carried=self.rec.requests_carried + done + failed,
            proofs_carried=self.rec.proofs_carried + done,
        )


@dataclass
class Fleet:
    """The fleet's instances and the machines it holds, for one policy's run."""

    market: Market
    config: Config
    clock: Clock
    # The search the fleet rents from: None, the fleet's filter and disk (vastui's); the
    # literal original passes its own (economics_world.ORIGINAL_FILTER, ORIGINAL_DISK_GB).
    offer_filter: str | None = None
    disk_gb: float | None = None
    workers: dict[int, Worker] = field(default_factory=dict)
    _live: dict[int, Worker] = field(default_factory=dict)  # in rent order
    rentals: Counter[int] = field(default_factory=Counter)  # machine → rentals so far
    down_until: dict[int, float] = field(default_factory=dict)  # machines off the market
    target_reached_at: float | None = None
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(FIRST_ID))

    @property
    def live(self) -> list[Worker]:
        return list(self._live.values())

    def busy(self) -> set[int]:
        return {w.offer.machine_id for w in self._live.values()}

    def available(self, now: float) -> list[Offer]:
        """Today's listings without the machines the fleet holds or that are down."""
        busy = self.busy()
        return [
            o
            for o in self.market.listed(now, self.offer_filter, self.disk_gb)
            if o.machine_id not in busy and self.down_until.get(o.machine_id, 0.0) <= now
        ]

    def rent(self, offer: Offer, min_rate: float, bid: BidQuote | None = None) -> Worker:
        """Create the instance (it appears at once, as Vast answers a create), with its
        hidden timeline drawn from the machine's k-th rental dice; as ``bid`` when given."""
        now = self.clock.now
        k = self.rentals[offer.machine_id]
        self.rentals[offer.machine_id] += 1
        rental = plan(
            now=now,
            rate=self.market.rate(offer),
            inet_down=offer.inet_down,
            cores=offer.cpu_cores,
            ram_gb=offer.cpu_ram_gb,
            hidden=self.market.hidden_for(offer.machine_id, k),
            rng=rental_rng(self.market.seed, offer.machine_id, k),
            # the reliability every offer of the machine lists
            reliability=self.market.by_id[offer.machine_id].reliability,
            fault_rate=self.market.scenario.fault_rate,
        )
        vast_id = next(self._ids)
        rec = InstanceRecord(
            vast_id=vast_id,
            label=f"vastui-bench-{vast_id:012x}",
            offer_id=offer.id,
            machine_id=offer.machine_id,
            host_id=offer.host_id,
            gpu_name=offer.gpu_name,
            num_gpus=offer.num_gpus,
            dph_total=offer.dph_total,
            cpu_ram_gb=offer.cpu_ram_gb,
            inet_down=offer.inet_down,
            inet_down_cost=offer.inet_down_cost,
            inet_up_cost=offer.inet_up_cost,
            state="loading",
            stage_started_at=now,
            created_at=now,
            loading_at=now,
            min_rate=min_rate,
        )
        if bid is not None:  # acts.record_rent's bid columns
            rec = replace(
                rec, dph_total=bid.total, is_bid=True, bid_price=bid.price, bid_cap=bid.cap,
                storage_dph=offer.storage_total_cost,
            )  # fmt: skip
        worker = Worker(rec, offer, rental, floor=self.market.floor(offer))
        self.workers[vast_id] = self._live[vast_id] = worker
        return worker

    def set_stage(self, w: Worker, stage: str) -> None:
        """store.instances.set_stage: state, stage_started_at and ``<stage>_at``, the first
        parameter fetch's start and end (store/instances.py:38-40); a no-op when already there."""
        if w.rec.state != stage and not w.rec.killed:
            now = self.clock.now
            fields: dict[str, Any] = {"state": stage, "stage_started_at": now, f"{stage}_at": now}
            if stage == "paramfetch" and w.rec.params_from is None:
                fields["params_from"] = now
            elif stage in ("benchmark", "proving") and w.rec.params_to is None:
                fields["params_to"] = now
            w.rec = replace(w.rec, **fields)
            if stage == "proving":
                self._count_target()

    def mark_killed(self, w: Worker, kind: str, reason: str, stage: str | None = None) -> None:
        """The destroy recorded (Store.complete_destroy): the machine goes back on the market
        (or off it for a while when its host went offline)."""
        now = self.clock.now
        w.rec = replace(
            w.rec,
            state="killed",
            killed_at=now,
            kill_kind=kind,
            kill_reason=reason,
            failed_stage=stage or w.rec.state,
        )
        self._live.pop(w.rec.vast_id, None)
        offline = w.rental.offline
        if offline is not None and now >= offline:
            self.down_until[w.offer.machine_id] = offline + MACHINE_DOWN_S

    def _count_target(self) -> None:
        proving = sum(1 for w in self._live.values() if w.rec.state == "proving")
        if self.target_reached_at is None and proving >= self.config.fleet.target_workers:
            self.target_reached_at = self.clock.now

    def figures(self, now: float) -> Outcome:
        records = [w.billed(now) for w in self.workers.values()]
        money = spend.fleet_spend(records, now, day_start=0.0)
        proofs = sum(w.delivered(now) for w in self.workers.values())
        rejected = [w for w in self.workers.values() if spend.is_rejected(w.rec)]
        kinds = Counter(w.rec.kill_kind or "live" for w in self.workers.values())
        return Outcome(
            spent=money.total,
            rejected_spent=money.rejected,
            bandwidth=money.bandwidth,
            proofs=proofs,
            rentals=len(records),
            rejected=len(rejected),
            target_hours=None
            if self.target_reached_at is None
            else self.target_reached_at / 3600.0,
            kinds=dict(kinds),
            interruptions=sum(r.interruptions for r in records),
            bid_rentals=sum(1 for r in records if r.is_bid),
        )


@dataclass(frozen=True, slots=True)
class Outcome:
    spent: float
    rejected_spent: float
    proofs: int
    rentals: int
    rejected: int
    target_hours: float | None  # None: the target was never reached
    kinds: dict[str, int] = field(default_factory=dict)
    bans: int = 0
    interruptions: int = 0  # outbids of its bid rentals
    bid_rentals: int = 0
    bandwidth: float = 0.0  # of ``spent``: the parameters and requests at the offers' $/GB

    @property
    def cost_per_proof(self) -> float:
        return self.spent / self.proofs if self.proofs else math.inf

    def with_bans(self, bans: int) -> Outcome:
        return replace(self, bans=bans)
