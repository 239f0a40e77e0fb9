"""The fleet's headline (``vastui/domain/delivery.py``), as a pure function of the records and of
what curio's cluster counted over the window: the engine calls it once a step, after it read the
cluster, and publishes the result."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from vastui.domain.delivery import CLUSTER, CUZK, Delivery
from vastui.domain.worker import InstanceRecord
from vastui.engine import production
from vastui.engine.drain import worker_rate
from vastui.engine.spend import counted, instance_cost


@dataclass(frozen=True, slots=True)
class ClusterCount:
    """What curio's cluster recorded over the window (vastui/engine/cluster.py)."""

    fleet_done: int  # PSProve tasks this fleet's machines finished, the destroyed ones' too
    cluster_done: int  # ... every machine's in the cluster
    paid: int  # payments the cluster recorded in the window (one wallet)
    challenges: int  # unpaid challenge proofs submitted, of the requests taken in the window


def compute(
    records: Iterable[InstanceRecord],
    now: float,
    window_s: float,
    cluster: ClusterCount | None,
) -> Delivery:
    """The headline at ``now`` over ``window_s``: curio's count when the cluster was read
    (``cluster``), else cuzk's counters (no paid figure then)."""
    since = now - window_s
    mine = [
        r for r in counted(records)
        # what ended before the window cost nothing in it and proved nothing in it
        if not r.killed or (r.killed_at if r.killed_at is not None else now) >= since
    ]  # fmt: skip
    running = [r for r in mine if not r.killed and r.stopped_since is None]
    stopped = [r for r in mine if not r.killed and r.stopped_since is not None]
    proving = [r for r in running if r.state == "proving" and r.drain_started_at is None]
    rates = [(r, rate) for r in proving if (rate := worker_rate(r)) is not None]
    cuzk = sum(_cuzk_done(r, now, window_s) for r in mine if r.proving_at is not None)
    if cluster is not None:
        share = min(1.0, cluster.fleet_done / cluster.cluster_done) if cluster.cluster_done else 0.0
        source, computed = CLUSTER, cluster.fleet_done
        paid: float | None = round(cluster.paid * share, 3)
        challenges: int | None = cluster.challenges
    else:
        source, computed, paid, challenges = CUZK, cuzk, None, None
    return Delivery(
        at=now,
        window_s=window_s,
        source=source,
        computed=computed,
        paid=paid,
        cost=round(sum(instance_cost(r, now, since=since) for r in mine), 6),
        capacity=round(sum(rate for _r, rate in rates), 3),
        capacity_measured=sum(1 for r, _rate in rates if r.prod_rate),
        proving=len(proving),
        dph=round(sum(r.dph_total or 0.0 for r in running), 6),
        stopped=len(stopped),
        stopped_dph=round(sum(_storage_dph(r) for r in stopped), 6),
        cuzk_computed=cuzk,
        challenges=challenges,
    )


def _cuzk_done(rec: InstanceRecord, now: float, window_s: float) -> int:
    """Proofs cuzk's counters show the worker completed in the window (its production state)."""
    if not rec.prod_state:
        return 0
    state = production.ProdState.from_json(rec.prod_state)
    return max(0, production.measure(state, now, window_s).completed)


def _storage_dph(rec: InstanceRecord) -> float:
    """What a stopped worker bills: its disk (``storage_dph``), never above its whole price."""
    storage = rec.storage_dph if rec.storage_dph is not None else 0.0
    return min(storage, rec.dph_total or storage)


@dataclass(frozen=True, slots=True)
class WorkerShare:
    """One worker's part of the headline, over the same window: the proofs curio recorded for
    it, the paid ones credited to it (the fleet's paid share of its own), what it was billed."""

    computed: int | None  # None: the cluster has not counted it
    paid: float | None
    cost: float

    @property
    def cost_per_paid(self) -> float | None:
        return self.cost / self.paid if self.paid else None


def worker_share(rec: InstanceRecord, fleet: Delivery, window_done: int | None) -> WorkerShare:
    """``window_done``: curio's count of its PSProve successes in the window (its cluster
    reading); the paid ones are the fleet's ratio of paid to computed, applied to its own."""
    cost = instance_cost(rec, fleet.at, since=fleet.at - fleet.window_s)
    paid = None
    if window_done is not None and fleet.paid is not None and fleet.computed > 0:
        paid = round(window_done * min(1.0, fleet.paid / fleet.computed), 3)
    return WorkerShare(window_done, paid, round(cost, 6))
