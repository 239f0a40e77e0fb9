"""The provisioning decision, as a pure function: the offer to rent next, or why nothing is.

One file: the view a decision reads, the decision with its typed reasons, and the shrinking
that is its other side change together (a reason added is a view field, a gate and a line).

Every cycle the engine builds a :class:`FleetView` (its target, its live workers by stage, the
rents still in flight, the limits) and asks :func:`decide` with the ranked offers. The answer
is the offer to rent (or none) and, whenever the fleet is not being grown, a typed
:class:`Reason` the operator sees until its cause goes away:

==========================  ======================================================================
``target_zero``             the target is 0: nothing is rented
``at_target``               live workers + rents in flight reach the target
``api_error``               this cycle's Vast call failed: no decision on a stale view
``no_credit``               Vast refused a rent for billing (the account is out of credit): no
                            machine is blamed; cleared by the next credit read above zero
``rent_breaker``            more than ``fleet.max_rents_per_slot_hour`` rents per target slot in
                            the last hour: something undoes every rent (a lagging list, a host
                            that never starts); renting stops until the hour's count falls
``daily_budget``            today's spend (UTC) reached ``fleet.max_daily_spend``: nothing more
                            is rented today, nothing is destroyed for it
``tunnel_down``             workers report the controller's tunnel (Lotus API, curio's database)
                            down: a new worker could benchmark but not prove
``fleet_failure``           one failure on several machines (engine/fleetwide.py): the image,
                            the configuration or the controller is broken, not the machines
``dry_run``                 a dry run: the would-be rent (or the would-be rents standing in)
``bench_concurrency_cap``   ``fleet.max_concurrent_benchmarks`` workers are not yet proving
``fleet_dph_cap``           every viable offer would take the fleet over ``fleet.max_total_dph``
``no_viable_offer``         no offer is expected to reach the rate its price requires
==========================  ======================================================================

When the work is urgent (``FleetView.urgency``, issue 43) the viable offers are taken in the
order urgent work wants: what each earns over the hours the work lasts, which counts when it
proves (vastui/engine/ranking.py ``rank_urgent``); the rent's reason says it was so ranked.
Without it (the default) the ranking's own order holds.

Only a rent in flight blocks an offer (and a machine with a live worker stays busy): an offer
rented before may be rented again, and a machine that failed is kept off by the bad list (and
its strikes), a slow one by its measured rate in the ranking, not by its offer id.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from vastui.config import FleetSection
from vastui.domain import plan
from vastui.engine.policy import LIVE_STAGES, PIPELINE_STAGES
from vastui.engine.ranking import RANKED_BY_TIME, RankedOffer, Urgency, rank_urgent

REASON_KINDS: tuple[str, ...] = (
    "target_zero",
    "at_target",
    "api_error",
    "no_credit",
    "rent_breaker",
    "daily_budget",
    "tunnel_down",
    "fleet_failure",
    "identity_collision",
    "dry_run",
    "bench_concurrency_cap",
    "fleet_dph_cap",
    "no_viable_offer",
)


@dataclass(frozen=True, slots=True)
class Candidate:
    """The offer that best explains a reason: the one the engine would rent, were it allowed."""

    offer_id: int
    machine_id: int
    gpu_name: str
    num_gpus: int
    dph_total: float
    expected_rate: float | None
    min_rate: float
    rate_source: str
    expected_cost_per_proof: float | None
    max_cost_per_proof: float
    bid_price: float | None = None  # rented as a bid at this $/h (vastui/engine/bidding.py)

    @classmethod
    def of(cls, ranked: RankedOffer, max_cost_per_proof: float) -> Candidate:
        o = ranked.offer
        return cls(
            offer_id=o.id,
            machine_id=o.machine_id,
            gpu_name=o.gpu_name,
            num_gpus=o.num_gpus,
            dph_total=ranked.dph_total,
            expected_rate=ranked.expected_rate,
            min_rate=ranked.min_rate,
            rate_source=ranked.rate_source,
            expected_cost_per_proof=ranked.expected_cost_per_proof,
            max_cost_per_proof=max_cost_per_proof,
            bid_price=None if ranked.rent_bid is None else ranked.rent_bid.price,
        )

    @property
    def gpu(self) -> str:
        return self.gpu_name if self.num_gpus == 1 else f"{self.num_gpus}x {self.gpu_name}"

    def economics(self) -> str:
        """Why this offer is (not) worth its price, in the operator's terms."""
        cost, cap = self.expected_cost_per_proof, self.max_cost_per_proof
        if self.expected_rate is None or cost is None:
            return f"expected rate unknown ({self.rate_source}), max ${cap:.4f}/proof"
        if cost > cap:
            return f"${cost:.4f}/proof > max ${cap:.4f}"
        if self.expected_rate < self.min_rate:
            # ${cost} is under the cap, but the gate rounds the min_rate up.
            return (
                f"{self.expected_rate:.1f} proofs/h < {self.min_rate:.0f} required "
                f"at ${self.dph_total:.3f}/h (max ${cap:.4f}/proof)"
            )
        return f"${cost:.4f}/proof <= max ${cap:.4f}"

    def describe(self) -> str:
        bid = "" if self.bid_price is None else f" as a bid at ${self.bid_price:.4f}/h"
        return f"{self.offer_id} {self.gpu}{bid} {self.economics()}"

    def to_json(self) -> dict[str, object]:
        return {
            "offer_id": self.offer_id,
            "machine_id": self.machine_id,
            "gpu_name": self.gpu_name,
            "num_gpus": self.num_gpus,
            "dph_total": round(self.dph_total, 4),
            "expected_rate": None if self.expected_rate is None else round(self.expected_rate, 1),
            "min_rate": self.min_rate,
            "rate_source": self.rate_source,
            "expected_cost_per_proof": (
                None
                if self.expected_cost_per_proof is None
                else round(self.expected_cost_per_proof, 5)
            ),
            "max_cost_per_proof": self.max_cost_per_proof,
            "bid_price": self.bid_price,
        }


@dataclass(frozen=True, slots=True)
class Reason:
    kind: str  # one of REASON_KINDS
    text: str  # one line for the operator
    best: Candidate | None = None


# how a fleet-wide failure's pause ends, unless it says otherwise (vastui/engine/payment.py)
FLEET_FAILURE_UNTIL = "until a worker passes its benchmark or `vastui resume`"


@dataclass(frozen=True, slots=True)
class FleetView:
    """What the engine knows at the start of a provisioning decision."""

    target: int
    max_concurrent_benchmarks: int
    max_cost_per_proof: float
    by_stage: Mapping[str, int] = field(default_factory=dict)  # live vastui workers
    pending_rents: int = 0  # rent intents whose outcome is not known yet
    blocked_offers: frozenset[int] = frozenset()  # offers of rents in flight, dry picks, ...
    dry_picks: int = 0  # would-be rents of this dry run: they stand in for workers
    busy_machines: frozenset[int] = frozenset()  # a live worker or a rent in flight
    bad_machines: frozenset[int] = frozenset()
    dph_in_use: float = 0.0  # live workers + rents in flight (+ dry picks)
    max_total_dph: float = math.inf
    dry_run: bool = False
    api_error: str | None = None  # this cycle's Vast error, one line
    tunnel_down: str | None = None  # what a worker says of the controller's tunnel, one line
    fleet_failure: str | None = None  # the signature that paused provisioning, one line
    fleet_failure_until: str = FLEET_FAILURE_UNTIL
    no_credit: str | None = None  # Vast's billing refusal of the last rent, one line
    spent_today: float = 0.0  # dollars since midnight UTC (spend.fleet_spend)
    max_daily_spend: float = 0.0  # fleet.max_daily_spend; 0: no daily cap
    # workers cordoned in curio's cluster and waiting to be destroyed (vastui/engine/drain.py):
    # on their way out, not in by_stage, their $/h still in dph_in_use
    draining: int = 0
    # a new worker's curio identity is another live machine's in the cluster, one line
    identity_collision: str | None = None
    rents_last_hour: int = 0  # rents this fleet sent (or may have) in the last hour
    max_rents_per_slot_hour: int = 0  # fleet.max_rents_per_slot_hour; 0: no breaker
    pooled: int = 0  # stopped in the warm pool (vastui/engine/pool.py): not workers, storage
    # the work is urgent: the offer to rent is the one that earns most over its hours, which
    # counts when it proves (ranking.rank_urgent); None: the ranking's $/proof order
    urgency: Urgency | None = None

    @property
    def live(self) -> int:
        return sum(self.by_stage.values())

    @property
    def workers(self) -> int:
        """What the status shows: live vastui instances + rents in flight."""
        return self.live + self.pending_rents

    @property
    def in_pipeline(self) -> int:
        """Workers not yet proving, counting rents in flight and dry picks."""
        loading = sum(n for stage, n in self.by_stage.items() if stage in PIPELINE_STAGES)
        return loading + self.pending_rents + self.dry_picks


@dataclass(frozen=True, slots=True)
class LiveWorker:
    """What provisioning needs of one live worker of this fleet."""

    stage: str
    machine_id: int | None
    dph: float  # $/h
    draining: bool = False  # cordoned, waiting to be destroyed: a cost, not a worker
    tunnel_down: str | None = None  # what it says of the controller's tunnel, when down


@dataclass(frozen=True, slots=True)
class RentInFlight:
    """A rent whose outcome is not known yet: a worker of the target, and its cost."""

    offer_id: int | None
    machine_id: int | None
    dph: float


def build_view(
    fleet: FleetSection,
    workers: Sequence[LiveWorker],
    rents: Sequence[RentInFlight],
    *,
    dry_run: bool = False,
    dry_offers: Mapping[int, float] | None = None,
    bad_machines: frozenset[int] = frozenset(),
    api_error: str | None = None,
    fleet_failure: str | None = None,
    no_credit: str | None = None,
    spent_today: float = 0.0,
    identity_collision: str | None = None,
    rents_last_hour: int = 0,
    target: int | None = None,
    fleet_failure_until: str | None = None,
    pooled: Sequence[int | None] = (),
    urgency: Urgency | None = None,
) -> FleetView:
    """The fleet as a provisioning decision sees it, from what the engine observed. Rents whose
    outcome is still unknown count as workers (and cost); in a dry run the would-be rents of this
    run (``dry_offers``: offer → $/h) stand in for the instances they would make; draining
    workers are on their way out: not workers of the target, still a cost. ``target``: the
    automatic target of this step (vastui/engine/autoscale.py), else the configured one;
    ``pooled``: the machines of the workers stopped in the warm pool (not workers; their
    machines are not rented anew: a scale-up starts them); ``urgency``: the work is urgent
    (ranking.urgency_of), the offer to rent is picked by when it proves as well as its price."""
    dry = dict(dry_offers or {}) if dry_run else {}
    live = [w for w in workers if not w.draining]
    stages: dict[str, int] = {}
    for w in live:
        stages[w.stage] = stages.get(w.stage, 0) + 1
    tunnel = next((w.tunnel_down for w in live if w.tunnel_down is not None), None)
    return FleetView(
        target=fleet.target_workers if target is None else target,
        max_concurrent_benchmarks=fleet.max_concurrent_benchmarks,
        max_cost_per_proof=fleet.max_cost_per_proof,
        by_stage={st: n for st in LIVE_STAGES if (n := stages.get(st, 0))},
        pending_rents=len(rents),
        blocked_offers=frozenset({r.offer_id for r in rents if r.offer_id is not None} | set(dry)),
        dry_picks=len(dry),
        busy_machines=frozenset(
            {w.machine_id for w in workers if w.machine_id is not None}
            | {r.machine_id for r in rents if r.machine_id is not None}
            # its own stopped worker is started from the pool, not rented anew
            | {m for m in pooled if m is not None}
        ),
        bad_machines=bad_machines,
        dph_in_use=sum(w.dph for w in workers) + sum(dry.values()) + sum(r.dph for r in rents),
        max_total_dph=fleet.max_total_dph,
        dry_run=dry_run,
        tunnel_down=tunnel,
        max_daily_spend=fleet.max_daily_spend,
        draining=len(workers) - len(live),
        max_rents_per_slot_hour=fleet.max_rents_per_slot_hour,
        api_error=api_error,
        fleet_failure=fleet_failure,
        fleet_failure_until=fleet_failure_until or FLEET_FAILURE_UNTIL,
        no_credit=no_credit,
        spent_today=spent_today,
        identity_collision=identity_collision,
        rents_last_hour=rents_last_hour,
        pooled=len(pooled),
        urgency=urgency,
    )


@dataclass(frozen=True, slots=True)
class Decision:
    rent: RankedOffer | None  # the offer to rent now (in a dry run: to record as would-rent)
    reason: Reason | None  # None while renting towards the target for real


def gate(view: FleetView) -> Decision | None:
    """The decision when it does not depend on the market (no search needed), else None."""
    if view.target <= 0:
        return Decision(
            None,
            Reason("target_zero", "target is 0 workers: manual mode, nothing is rented or shrunk"),
        )
    if view.workers > view.target:
        return Decision(
            None,
            Reason(
                "at_target",
                f"above target: {view.workers}/{view.target} workers; the surplus is destroyed",
            ),
        )
    if view.workers >= view.target:
        return Decision(
            None, Reason("at_target", f"at target: {view.workers}/{view.target} workers")
        )
    if view.api_error:
        return Decision(None, Reason("api_error", f"error this cycle: {view.api_error}"))
    if view.no_credit:
        return Decision(
            None,
            Reason(
                "no_credit",
                f"no credit: {view.no_credit}; nothing is rented until the account has credit, "
                "and no machine is blamed",
            ),
        )
    cap = view.max_rents_per_slot_hour * view.target
    if cap > 0 and view.rents_last_hour >= cap:
        return Decision(
            None,
            Reason(
                "rent_breaker",
                f"rent breaker: {view.rents_last_hour} rents in the last hour for a target of "
                f"{view.target} (fleet.max_rents_per_slot_hour = {view.max_rents_per_slot_hour})"
                "; something undoes every rent: nothing more is rented until the hour's count "
                "falls",
            ),
        )
    if 0 < view.max_daily_spend <= view.spent_today:
        return Decision(
            None,
            Reason(
                "daily_budget",
                f"daily budget reached: ${view.spent_today:.2f} spent today (UTC) of "
                f"${view.max_daily_spend:.2f} (fleet.max_daily_spend); nothing more is rented "
                "until midnight UTC, running workers are kept",
            ),
        )
    if view.tunnel_down:
        return Decision(
            None,
            Reason(
                "tunnel_down",
                f"the controller's tunnel is down ({view.tunnel_down}): workers wait to prove; "
                "nothing is rented until it is back, and no machine is blamed",
            ),
        )
    if view.fleet_failure:
        return Decision(
            None,
            Reason(
                "fleet_failure",
                f"fleet-wide failure: {view.fleet_failure}; provisioning paused, no machine "
                f"blamed, {view.fleet_failure_until}",
            ),
        )
    if view.identity_collision:
        return Decision(
            None,
            Reason(
                "identity_collision",
                f"{view.identity_collision}; the next rent looks past these runner ids, and no "
                "machine is blamed",
            ),
        )
    if view.dry_run and view.workers + view.dry_picks >= view.target:
        return Decision(
            None,
            Reason(
                "dry_run",
                f"dry run: {view.dry_picks} would-be rent(s) stand in for the missing "
                f"{view.target - view.workers} worker(s); nothing is rented",
            ),
        )
    if view.in_pipeline >= view.max_concurrent_benchmarks:
        return Decision(
            None,
            Reason(
                "bench_concurrency_cap",
                f"benchmark concurrency cap: {view.in_pipeline} worker(s) not yet proving "
                f"(fleet.max_concurrent_benchmarks = {view.max_concurrent_benchmarks})",
            ),
        )
    return None


def decide(view: FleetView, offers: Sequence[RankedOffer]) -> Decision:
    """The offer to rent (offers ranked best first), or the reason none is."""
    early = gate(view)
    if early is not None:
        return early
    open_offers = [r for r in offers if _rentable(view, r)]
    viable = [r for r in open_offers if r.viable]
    if view.urgency is not None:
        # only the viable ones: what it would earn orders them, never whether one is viable
        viable = rank_urgent(viable, view.urgency)
    for ranked in viable:
        if view.dph_in_use + ranked.dph_total <= view.max_total_dph:
            return Decision(ranked, _dry_reason(view, ranked) if view.dry_run else None)
    if viable:
        best = Candidate.of(viable[0], view.max_cost_per_proof)
        return Decision(
            None,
            Reason(
                "fleet_dph_cap",
                f"fleet $/h cap: ${view.dph_in_use:.3f}/h in use + ${best.dph_total:.3f}/h "
                f"for offer {best.offer_id} > max ${view.max_total_dph:.2f}/h",
                best,
            ),
        )
    return Decision(None, _no_viable(view, open_offers))


def manual_rent_refusal(view: FleetView) -> str | None:
    """Why a rent by hand is refused: at the target it would only be destroyed as surplus.
    With a target of 0 (manual mode) the operator rents freely."""
    if view.target > 0 and view.workers >= view.target:
        return (
            f"at target: {view.workers}/{view.target} workers; a worker rented by hand would be "
            "surplus (raise fleet.target_workers, or destroy one first)"
        )
    return None


def rent_reason(view: FleetView, ranked: RankedOffer) -> str:
    """Why this rent: recorded on its intent and logged (a dry run logs it as "would rent")."""
    best = Candidate.of(ranked, view.max_cost_per_proof)
    return (
        f"auto: {view.workers}/{view.target} workers; offer {best.offer_id} {best.gpu} "
        f"on machine {best.machine_id}"
        + ("" if best.bid_price is None else f" as a bid at ${best.bid_price:.4f}/h")
        + f": {best.economics()} ({best.rate_source})"
        + _rank_note(ranked)
    )


def _rentable(view: FleetView, ranked: RankedOffer) -> bool:
    """Not banned (the ranking may predate a ban), not busy, not blocked by a rent in flight."""
    o = ranked.offer
    return not (
        ranked.bad
        # what the worker would refuse before paramfetch (worker-image/entrypoint.sh setup)
        or plan.ram_short(o.cpu_ram_gb) is not None
        or o.machine_id in view.bad_machines
        or o.machine_id in view.busy_machines
        or o.id in view.blocked_offers
    )


def _dry_reason(view: FleetView, ranked: RankedOffer) -> Reason:
    best = Candidate.of(ranked, view.max_cost_per_proof)
    return Reason("dry_run", f"dry run: would rent {best.describe()}{_rank_note(ranked)}", best)


def _rank_note(ranked: RankedOffer) -> str:
    """Said of a rent when urgent work ranked it (by $/proof, as always: nothing)."""
    return f"; {ranked.rank_note}" if ranked.ranked_by == RANKED_BY_TIME else ""


def _no_viable(view: FleetView, open_offers: Sequence[RankedOffer]) -> Reason:
    if not open_offers:
        return Reason(
            "no_viable_offer",
            "no viable offer: no offer matches the filter on a free, unbanned machine",
        )
    # The ranking puts the lowest expected $/proof first (unknown rates last).
    best = Candidate.of(open_offers[0], view.max_cost_per_proof)
    return Reason("no_viable_offer", f"no viable offer: best {best.describe()}", best)


# -- shrinking: the target honoured downwards ---------------------------------------------


@dataclass(frozen=True, slots=True)
class Worker:
    """A live vastui worker as the shrinking decision sees it."""

    vast_id: int
    state: str  # one of policy.LIVE_STAGES
    created_at: float
    cost_per_proof: float | None = None  # measured (production, else benchmark); None unknown


# Surplus order: first the workers that deliver nothing yet, least advanced stage first (the
# least sunk into them), then proving workers by their measured $/proof, worst first (unknown
# counts as worst: nothing shows it earns its price); ties go to the newest.
_STAGE_ORDER = {stage: i for i, stage in enumerate(PIPELINE_STAGES)}


def surplus(workers: Sequence[Worker], target: int, pending_rents: int = 0) -> list[Worker]:
    """The workers to destroy so that live + rents in flight come down to the target.

    A rent in flight cannot be destroyed yet; it counts, so a lowered target is reached once
    it lands (and then it may be the surplus). A target of 0 is manual mode: the engine rents
    nothing and destroys nothing for the target (the operator deploys by hand)."""
    if target <= 0:
        return []
    excess = len(workers) + pending_rents - target
    if excess <= 0:
        return []
    return sorted(workers, key=_surplus_key)[: min(excess, len(workers))]


def _surplus_key(w: Worker) -> tuple[int, float, float, int]:
    if w.state in _STAGE_ORDER:
        return (0, float(_STAGE_ORDER[w.state]), -w.created_at, -w.vast_id)
    cost = w.cost_per_proof if w.cost_per_proof is not None else math.inf
    return (1, -cost, -w.created_at, -w.vast_id)


def surplus_reason(count: int, target: int, w: Worker) -> str:
    what = (
        f"not proving yet ({w.state})"
        if w.state in _STAGE_ORDER
        else (
            f"proving at ${w.cost_per_proof:.4f}/proof"
            if w.cost_per_proof is not None
            else "proving, rate not measured yet"
        )
    )
    return f"above target: {count} workers > target {target}; chosen as surplus: {what}"
