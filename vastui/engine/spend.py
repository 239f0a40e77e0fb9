"""Dollars spent, per instance and for the fleet, as pure functions of the instance records.

Billed time × $/h, from what Vast gives (/work/shared/reference/vast-api.md §6, the instance
object, and §11, the lifecycle):

* **$/h** is the instance's ``dph_total``: storage included (``dph_base + storage_total_cost``),
  refreshed from Vast's instance listing on every engine cycle (``Engine._refresh``), the
  offer's price until Vast lists the instance. Vast gives no running cost per instance:
  ``duration`` is ``now - start_date`` (the vastai CLI overwrites it client-side) and
  ``end_date`` is the end of the machine's offer window, not of the rental.
* **billed time** runs from ``created_at`` (Vast's ``start_date`` for an adopted instance; the
  engine's clock at the create call for one it rented: "storage billing starts at creation")
  to ``killed_at``, or to ``now`` for an instance still alive. All in the engine's clock.

An interruptible (bid) instance bills only storage while outbid (``storage_dph``; the time
stopped is ``stopped_s`` plus the open episode since ``outbid_since``). This is a ceiling:
Vast bills only storage while an instance loads and the GPU from
``running`` on, which for a few minutes of image load is cents. Legacy rows (imported from the
original tool) are not counted: what the original tool paid is not recorded, and their ends are
often unknown.

**Rejected** workers are the ones the gate turned away: killed before they reached proving
(whatever the kind: a benchmark below its rate, a deadline, a failed stage, a ban, an operator's
destroy, a vanished instance: the money bought no proofs), or killed with a gate kind
(``bench_*``, ``deadline_*``, ``<stage>_failed`` of a stage before proving). A worker that proved
and was then destroyed for its production (``prove_*``) is not rejected: it was paid for proofs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, tzinfo

from vastui.domain.worker import InstanceRecord

GATE_KIND_PREFIXES = ("bench_", "deadline_")
GATE_FAILED_KINDS = ("setup_failed", "paramfetch_failed", "benchmark_failed")


@dataclass(frozen=True, slots=True)
class Spend:
    today: float  # since the day boundary
    total: float  # since start: every vastui instance recorded
    rejected: float  # on rejected workers, since start
    day_start: float  # the day boundary used for `today` (engine clock)
    draining: float = 0.0  # on workers while they drained before their destroy, since start

    def to_json(self) -> dict[str, float]:
        return {
            "today": round(self.today, 4),
            "total": round(self.total, 4),
            "rejected": round(self.rejected, 4),
            "draining": round(self.draining, 4),
            "day_start": self.day_start,
        }


def billed_interval(rec: InstanceRecord, now: float) -> tuple[float, float] | None:
    """(start, end) of the time Vast bills for this instance, or None if nothing is known."""
    start = rec.created_at if rec.created_at is not None else rec.loading_at
    if start is None:
        return None
    if rec.killed:
        end = rec.killed_at if rec.killed_at is not None else rec.last_seen_at
        if end is None:
            return None
    else:
        end = now
    return start, max(start, end)


def instance_cost(rec: InstanceRecord, now: float, since: float | None = None) -> float:
    """Dollars this instance cost up to `now` (only the part after `since`, when given)."""
    span = billed_interval(rec, now)
    if span is None or not rec.dph_total or rec.dph_total < 0:
        return 0.0
    first, end = span
    start = first if since is None else max(first, since)
    billed = max(0.0, end - start)
    stopped = _stopped_within(rec, first, start, end)
    storage = rec.storage_dph if rec.storage_dph is not None else 0.0
    return ((billed - stopped) * rec.dph_total + stopped * min(storage, rec.dph_total)) / 3600.0


def _stopped_within(rec: InstanceRecord, first: float, start: float, end: float) -> float:
    """Seconds of [start, end] an outbid bid spent stopped (billing storage only): the open
    episode exactly, the closed ones (``stopped_s``) spread over the rental in proportion."""
    if not rec.is_bid:
        return 0.0
    open_s = 0.0
    if rec.outbid_since is not None:
        open_s = max(0.0, end - max(start, rec.outbid_since))
    whole = max(0.0, end - first)
    closed = rec.stopped_s * ((end - start) / whole) if whole > 0 else 0.0
    return min(max(0.0, end - start), open_s + closed)


SURPLUS_KIND = "surplus"  # destroyed because the target was lowered (provision.surplus)


def is_rejected(rec: InstanceRecord) -> bool:
    """Killed before it proved, or killed by the gate (see the module's definition)."""
    if not rec.killed or rec.kill_kind == SURPLUS_KIND:  # released, not rejected
        return False
    if rec.proving_at is None:
        return True
    kind = rec.kill_kind or ""
    return kind.startswith(GATE_KIND_PREFIXES) or kind in GATE_FAILED_KINDS


def counted(records: Iterable[InstanceRecord]) -> list[InstanceRecord]:
    """The instances whose spend vastui knows: its own (not legacy imports)."""
    return [r for r in records if r.source == "vastui"]


def fleet_spend(records: Iterable[InstanceRecord], now: float, day_start: float) -> Spend:
    """Today (since `day_start`), since start, and on rejected workers, billed up to `now`."""
    mine = counted(records)
    return Spend(
        today=sum(instance_cost(r, now, since=day_start) for r in mine),
        total=sum(instance_cost(r, now) for r in mine),
        rejected=sum(instance_cost(r, now) for r in mine if is_rejected(r)),
        day_start=day_start,
        draining=sum(drain_cost(r, now) for r in mine),
    )


def drain_cost(rec: InstanceRecord, now: float) -> float:
    """What a worker cost while it drained (cordoned, finishing its tasks, until destroyed)."""
    if rec.drain_started_at is None:
        return 0.0
    return instance_cost(rec, now, since=rec.drain_started_at)


@dataclass(frozen=True, slots=True)
class ProofCosts:
    """The fleet's $/proof over a window, as curio's cluster counts its proofs."""

    spent: float  # on workers while they proved, within the window
    per_computed: float | None  # ÷ PSProve tasks curio recorded done for the fleet
    per_paid: float | None  # ÷ the cluster's paid proofs, at the fleet's share of its done


def proof_costs(
    records: Iterable[InstanceRecord],
    now: float,
    window_s: float,
    fleet_done: int,
    cluster_done: int,
    paid: int,
) -> ProofCosts:
    """Payments are the cluster's (one wallet, proofshare_provider_payments), not per machine:
    the fleet is credited its share of them, as its share of the PSProve tasks the cluster
    finished in the window. Challenge proofs are never paid (they are not in payments)."""
    since = now - window_s
    spent = sum(
        instance_cost(r, now, since=max(since, r.proving_at))
        for r in counted(records)
        if r.proving_at is not None
    )
    per_computed = spent / fleet_done if fleet_done > 0 else None
    share = min(1.0, fleet_done / cluster_done) if cluster_done > 0 else 0.0
    per_paid = spent / (paid * share) if paid > 0 and share > 0 else None
    return ProofCosts(spent, per_computed, per_paid)


def local_midnight(now: float, tz: tzinfo | None = None) -> float:
    """The start of `now`'s day: midnight in `tz` (None: this machine's local time zone)."""
    # A naive local datetime's timestamp() resolves the offset in force at that midnight.
    midnight = datetime.fromtimestamp(now, tz).replace(hour=0, minute=0, second=0, microsecond=0)
    return midnight.timestamp()


def worker_cost_per_proof(rec: InstanceRecord) -> tuple[float | None, bool]:
    """What a worker's proofs cost: $/h over its production rate measured, else over its
    benchmark's (then ``True``: an estimate); None when neither is known."""
    if not rec.dph_total or rec.dph_total <= 0:
        return None, False
    if rec.prod_rate and rec.prod_rate > 0:
        return rec.dph_total / rec.prod_rate, False
    if rec.bench_rate and rec.bench_rate > 0:
        return rec.dph_total / rec.bench_rate, True
    return None, False
