"""Dollars spent, per instance and for the fleet, as pure functions of the instance records.

Time billed at its rate (storage, or the GPU's $/h while running) and bandwidth per GB, from
what Vast gives (/work/shared/reference/vast-api.md §6, the instance
object, and §11, the lifecycle):

* **$/h** is the instance's ``dph_total``: storage included (``dph_base + storage_total_cost``),
  refreshed from Vast's instance listing on every engine cycle (``Engine._refresh``), the
  offer's price until Vast lists the instance. Vast gives no running cost per instance:
  ``duration`` is ``now - start_date`` (the vastai CLI overwrites it client-side) and
  ``end_date`` is the end of the machine's offer window, not of the rental.
* **billed time** runs from ``created_at`` (Vast's ``start_date`` for an adopted instance; the
  engine's clock at the create call for one it rented: "storage billing starts at creation")
  to ``killed_at``, or to ``now`` for an instance still alive. All in the engine's clock.

Vast bills only storage (``storage_dph``) while an instance loads, the GPU from ``running_at``
on: the first listing that shows it running, moved back by its ``uptime_mins`` when that is
plausible (:func:`running_since`). An instance with no ``running_at`` that went past loading (an
older row) is billed ``dph_total`` from its creation: a ceiling.

**Bandwidth** is billed per GB at the offer's ``inet_down_cost``/``inet_up_cost`` (vast-api.md
§3): the parameters once per rental (plan.PARAMS_GB, as they came: the part the offer's link
could carry while the fetch ran, the rest when it ended), each request curio's cluster
recorded for the worker (plan.REQUEST_GB, a PoRep's: a ceiling for SnapDeals) and each proof's
upload.

An interruptible (bid) instance bills only storage while outbid (``storage_dph``; the time
stopped is ``stopped_s`` plus the open episode since ``outbid_since``). Legacy rows (imported
from the original tool) are not counted: what the original tool paid is not recorded, and their
ends are often unknown.

**Rejected** workers are the ones the gate turned away: killed before they reached proving
(whatever the kind: a benchmark below its rate, a deadline, a failed stage, a ban, an operator's
destroy, a vanished instance: the money bought no proofs), or killed with a gate kind
(``bench_*``, ``deadline_*``, ``<stage>_failed`` of a stage before proving). A worker that proved
and was then destroyed for its production (``prove_*``) is not rejected: it was paid for proofs.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, tzinfo
from functools import lru_cache

from vastui.domain.plan import PARAMS_GB, PROOF_UP_GB, REQUEST_GB
from vastui.domain.worker import InstanceRecord, Progress

GATE_KIND_PREFIXES = ("bench_", "deadline_")
GATE_FAILED_KINDS = ("setup_failed", "paramfetch_failed", "benchmark_failed")


@dataclass(frozen=True, slots=True)
class Spend:
    today: float  # since the day boundary
    total: float  # since start: every vastui instance recorded
    rejected: float  # on rejected workers, since start
    day_start: float  # the day boundary used for `today` (engine clock)
    draining: float = 0.0  # on workers while they drained before their destroy, since start
    bandwidth: float = 0.0  # of `total`: bytes billed at the offers' $/GB
    pool: float = 0.0  # of `total`: storage of workers stopped in the warm pool

    def to_json(self) -> dict[str, float]:
        return {
            "today": round(self.today, 4),
            "total": round(self.total, 4),
            "rejected": round(self.rejected, 4),
            "draining": round(self.draining, 4),
            "bandwidth": round(self.bandwidth, 4),
            "pool": round(self.pool, 4),
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


def running_since(rec: InstanceRecord, uptime_mins: float | None, now: float) -> float:
    """When the instance began to run, seen running at ``now``: ``now`` less its uptime, but
    never before its creation (vast-api.md's example has ``uptime_mins`` equal to ``duration``,
    the time since ``start_date``: whether it counts from creation or from running is not
    documented, and either reading stays within these bounds). No uptime: its creation, the
    ceiling (a budget must not count low)."""
    first = rec.created_at if rec.created_at is not None else rec.loading_at
    if uptime_mins is None:
        return now if first is None else min(now, first)
    since = now - uptime_mins * 60.0
    return min(now, since if first is None else max(first, since))


def instance_cost(rec: InstanceRecord, now: float, since: float | None = None) -> float:
    """Dollars this instance cost up to `now` (only the part after `since`, when given)."""
    return time_cost(rec, now, since) + bandwidth_cost(rec, now, since)


# What "spent" means wherever the operator reads it (the strip, the instances pane, the CLI).
SPENT_MEANS = (
    "what Vast bills: storage while loading or stopped, $/h while running, bandwidth at the "
    "offer's $/GB"
)


def worker_spent(rec: InstanceRecord, now: float) -> float | None:
    """What this worker cost up to ``now``; None for a legacy row (what the original tool paid
    is not recorded: :func:`counted`)."""
    return instance_cost(rec, now) if counted([rec]) else None


def time_cost(rec: InstanceRecord, now: float, since: float | None = None) -> float:
    """Dollars of GPU and storage time up to `now` (after `since`, when given)."""
    span = billed_interval(rec, now)
    if span is None or not rec.dph_total or rec.dph_total < 0:
        return 0.0
    first, end = span
    start = first if since is None else max(first, since)
    billed = max(0.0, end - start)
    storage = min(rec.storage_dph if rec.storage_dph is not None else 0.0, rec.dph_total)
    stopped = _stopped_within(rec, first, start, end)
    loading = _loading_within(rec, start, end) if rec.storage_dph is not None else 0.0
    idle = min(billed, stopped + loading)
    return ((billed - idle) * rec.dph_total + idle * storage) / 3600.0


def _loading_within(rec: InstanceRecord, start: float, end: float) -> float:
    """Seconds of [start, end] before the instance ran (billed as storage); none when it went
    past loading with no ``running_at`` (an older row: the ceiling)."""
    ran = rec.running_at
    if ran is None:
        never_ran = rec.stage == "loading" and rec.setup_at is None
        return max(0.0, end - start) if never_ran else 0.0
    return max(0.0, min(end, ran) - start)


def bandwidth_cost(rec: InstanceRecord, now: float, since: float | None = None) -> float:
    """Dollars of bandwidth: the parameters and the requests, at the offer's $/GB."""
    down = rec.inet_down_cost or 0.0
    up = rec.inet_up_cost or 0.0
    if down <= 0 and up <= 0:
        return 0.0
    end = now
    if rec.killed:
        end = rec.killed_at if rec.killed_at is not None else (rec.last_seen_at or now)
    if since is not None and end <= since:
        return 0.0  # all of it before the window (a day's history: no JSON read)
    fetched = params_gb(rec, end) - (params_gb(rec, since) if since is not None else 0.0)
    cost = max(0.0, fetched) * down
    requests, proofs = cluster_work(rec)
    share = 1.0
    if since is not None and rec.proving_at is not None and end > rec.proving_at:
        # spread over the proving time: the requests' times are not kept
        share = max(0.0, end - max(since, rec.proving_at)) / (end - rec.proving_at)
    return cost + share * (requests * REQUEST_GB * down + proofs * PROOF_UP_GB * up)


def params_gb(rec: InstanceRecord, at: float) -> float:
    """GB of parameters the rental had downloaded by ``at``: during its first fetch, what the
    offer's link carries in its time so far; once it ended (the benchmark began), all of them
    (the rest, if the link was slower than listed, at its end). So a figure over a window never
    changes after the fact: the parameters enter a window as they came and leave it the same
    way. The first fetch is the one billed (``params_from``/``params_to``; a start from the
    warm pool passes through the stages again and finds them on its disk); a row from before
    those were kept reads its stage times, and one with no start billed them all at its end."""
    start = rec.params_from if rec.params_from is not None else rec.paramfetch_at
    ended = rec.params_to
    if ended is None:
        ended = rec.benchmark_at if rec.benchmark_at is not None else rec.proving_at
    if ended is not None and (at >= ended or start is None or start >= ended):
        return PARAMS_GB if at >= ended else 0.0
    if start is None or at <= start or not rec.inet_down or rec.inet_down <= 0:
        return 0.0
    return min(PARAMS_GB, (at - start) * rec.inet_down / 8.0 / 1000.0)


def cluster_work(rec: InstanceRecord) -> tuple[int, int]:
    """(requests it downloaded, proofs it sent): what curio's cluster last counted for it since
    its proving began (curio @ e0294b0f tasks/proofshare/task_prove.go:204-215: Do fetches the
    request with proofsvc.GetProof before it computes the proof, so the ones it holds were
    fetched too; each success sent a proof), plus what was counted before a restart (the count
    starts again with each proving stage)."""
    requests, proofs = _work_of(rec.cluster_state) if rec.cluster_state else (0, 0)
    return requests + rec.requests_carried, proofs + rec.proofs_carried


def carried_work(rec: InstanceRecord) -> Progress:
    """The record's fields that keep its work counted across a restart (a start from the warm
    pool, a bid that wins again): its count so far."""
    requests, proofs = cluster_work(rec)
    return Progress(requests_carried=requests, proofs_carried=proofs)


@lru_cache(maxsize=4096)
def _work_of(text: str) -> tuple[int, int]:
    """One reading's (requests, proofs); cached: every spend figure reads every record's."""
    try:
        state = json.loads(text)
    except ValueError:
        return 0, 0
    if not isinstance(state, dict):
        return 0, 0
    done = _count(state.get("done_total"))
    held = state.get("held_by_name")
    holding = _count(held.get("PSProve")) if isinstance(held, dict) else 0
    return done + _count(state.get("failed_total")) + holding, done


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


STOPS_KEPT = 32  # closed stops kept exactly per worker (older ones: spread, _stopped_within)


def _stopped_within(rec: InstanceRecord, first: float, start: float, end: float) -> float:
    """Seconds of [start, end] it spent stopped (an outbid bid, the warm pool: billing storage
    only): the open episode and the closed ones kept (``stops``) exactly, so that a window's
    cost stays what it was when an episode closes; the rest of ``stopped_s`` (older episodes,
    rows from before they were kept) spread over the rental in proportion."""
    open_s = 0.0
    if rec.stopped_since is not None:
        open_s = max(0.0, end - max(start, rec.stopped_since))
    kept = stop_episodes(rec.stops)
    exact = sum(max(0.0, min(end, b) - max(start, a)) for a, b in kept)
    rest = max(0.0, rec.stopped_s - sum(b - a for a, b in kept))
    whole = max(0.0, end - first)
    spread = rest * ((end - start) / whole) if whole > 0 else 0.0
    return min(max(0.0, end - start), open_s + exact + spread)


@lru_cache(maxsize=4096)
def stop_episodes(text: str | None) -> tuple[tuple[float, float], ...]:
    """A record's kept stops, [from, to] in order; anything that is not one is left out."""
    if not text:
        return ()
    try:
        raw = json.loads(text)
    except ValueError:
        return ()
    out: list[tuple[float, float]] = []
    for item in raw if isinstance(raw, list) else ():
        if (
            isinstance(item, list) and len(item) == 2
            and all(isinstance(x, int | float) and not isinstance(x, bool) for x in item)
            and math.isfinite(item[0]) and math.isfinite(item[1]) and item[0] <= item[1]
        ):  # fmt: skip
            out.append((float(item[0]), float(item[1])))
    return tuple(out[-STOPS_KEPT:])


def closed_stop(rec: InstanceRecord, since: float, until: float) -> Progress:
    """The record's fields once a stop from ``since`` ends at ``until`` (the warm pool left, a
    bid running again): its seconds added to ``stopped_s``, the episode kept exactly."""
    since = min(since, until)
    kept = [*stop_episodes(rec.stops), (since, until)][-STOPS_KEPT:]
    return Progress(
        stopped_s=rec.stopped_s + (until - since),
        stops=json.dumps([[round(a, 3), round(b, 3)] for a, b in kept]),
    )


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
        bandwidth=sum(bandwidth_cost(r, now) for r in mine),
        pool=sum(pool_cost(r, now) for r in mine),
    )


def pool_cost(rec: InstanceRecord, now: float) -> float:
    """What a worker cost stopped in the warm pool: storage over its pooled time (the closed
    episodes and the open one)."""
    if rec.storage_dph is None or rec.storage_dph <= 0:
        return 0.0
    seconds = rec.pooled_s
    if rec.pooled_since is not None:
        end = rec.killed_at if rec.killed and rec.killed_at is not None else now
        seconds += max(0.0, end - rec.pooled_since)
    return seconds * rec.storage_dph / 3600.0


def drain_cost(rec: InstanceRecord, now: float) -> float:
    """What a worker cost while it drained (cordoned, finishing its tasks, until destroyed)."""
    if rec.drain_started_at is None:
        return 0.0
    return instance_cost(rec, now, since=rec.drain_started_at)


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
