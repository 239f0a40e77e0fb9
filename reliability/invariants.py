"""The invariants of a fleet under trial, as pure functions of what was observed.

Two views are compared: the cloud as the official vastai CLI lists it (:class:`VastRow`, the
source of truth for what exists and pays rent) and the engine's store, read read-only
(:class:`StoreView`, what vastui decided). Each check returns :class:`Violation` s; the drivers
(``reliability/soak.py``, ``reliability/crash.py``) take the snapshots and fold the checks that
need time (orphans, target) over them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from vastui.engine.labels import fleet_id_of, fleet_of, is_vastui_label, owner_of
from vastui.engine.policy import gpu_errors
from vastui.store.common import json_dict

# invariant → what it promises (the report prints these)
INVARIANTS: dict[str, str] = {
    "double_rent": "no two rentals for one intent (one instance per label, ever)",
    "orphan": "no instance of ours paying rent untracked (or tracked as killed) beyond the bound",
    "foreign_touched": "nothing without our label touched, adopted or recorded",
    "destroy_unrecorded": "every destroy has its destroy event and reason in the store",
    "ban_missing": "every machine fault banned (machine_id on the bad list)",
    "integrity": "PRAGMA integrity_check is ok",
    "over_target": "never more of ours alive than the target",
    "below_target": "never below the target longer than a refill takes, when offers allow",
    "engine_exit": "the engine runs until told to stop (no crash, no silent exit)",
    "restart_refused": "an engine restarted after a SIGKILL takes the lease at once",
    "unclean_stop": "SIGTERM stops the engine within seconds with status 0",
    "file_mode": "the files the engine writes are private (0600) under the unit's UMask",
    "worker_lost_to_tunnel": "no worker destroyed because the controller's own tunnel was down",
    "outage_destroy": "nothing destroyed, struck or banned because the Vast API was unreachable",
    "cut_off_destroy": "no healthy worker destroyed, struck or banned because the controller "
    "could not reach it over SSH",
    "outage_recovery": "after an outage the engine lists (or reads its workers) again and the "
    "fleet is at target within the bound",
    "trial_setup": "the trial reached the state it tests (a fleet at target, proving)",
    "resource_growth": "the engine's RSS, descriptors, connections and threads, the SSH "
    "sessions and the WAL level off (after a warm-up, the last third's peak within tolerance "
    "of the middle third's)",
    "db_growth": "the database grows only with the history it keeps (rows per instance "
    "rented and bytes per row level off)",
    "cross_destroy": "two controllers on one account: neither sends a destroy for an instance "
    "its database never intended, and every instance gone from the cloud was destroyed by its "
    "own controller",
    "foreign_unseen": "each database lists the other's live instances as foreign within the "
    "orphan bound, never one of its own, and warns once per foreign fleet",
    "rent_war": "each controller rents at most its target plus the instances it destroyed "
    "itself (no rent-and-destroy war)",
    "storm_overrun": "a fleet-wide failure pauses provisioning by its fleet_failure_machines-th "
    "machine: no more victims before the pause, none rented after it",
    "storm_blame": "no machine struck or banned for a fleet-wide failure (at the end)",
    "storm_pause": "while a fleet-wide fault lasts: paused with reason fleet_failure and the "
    "signature in status, nothing rented",
    "storm_recovery": "once the fault is gone and `vastui resume` has run, the fleet is at target "
    "within the bound, proving within the ready bound, and not paused again",
    "observed_too_little": "the observer saw the cloud in at least half of its observations "
    "(a trial does not pass on the ledger alone)",
    "crash_point_unreached": "every crash point a trial armed was reached (not replaced by an "
    "outside kill)",
}


@dataclass(frozen=True)
class Violation:
    invariant: str
    subject: str  # what it is about: "instance 3100001", "label vastui-x-…", "t=120"
    detail: str
    at: float | None = None  # wall time of the observation that showed it

    @property
    def key(self) -> tuple[str, str]:
        """One report per invariant and subject, however many observations show it."""
        return (self.invariant, self.subject)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


# -- the cloud, as the official CLI lists it -------------------------------------------


@dataclass(frozen=True)
class VastRow:
    id: int
    label: str | None
    status: str | None  # actual_status
    machine_id: int | None = None


def vast_rows(raw: Any) -> list[VastRow]:
    """`vastai show instances --raw` (a JSON list of instance objects) → rows.

    Raises ValueError on anything else: an observation that cannot be read is no observation.
    """
    if isinstance(raw, dict) and isinstance(raw.get("instances"), list):
        raw = raw["instances"]
    if not isinstance(raw, list):
        raise ValueError(f"expected a list of instances, got {type(raw).__name__}")
    rows = []
    for obj in raw:
        if not isinstance(obj, dict) or not _is_int(obj.get("id")):
            raise ValueError(f"instance without an integer id: {str(obj)[:120]}")
        label = obj.get("label")
        status = obj.get("actual_status")
        machine = obj.get("machine_id")
        rows.append(
            VastRow(
                id=obj["id"],
                label=label if isinstance(label, str) else None,
                status=status if isinstance(status, str) else None,
                machine_id=machine if _is_int(machine) else None,
            )
        )
    return rows


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def owned(label: str | None, fleet: str, fleet_id: str | None = None) -> bool:
    """A label of this fleet and, once the database's identity is known, of this database (its
    fleet id in the label; a label older than identities has none and stays the fleet's). Two
    databases with one fleet name on one account tell their instances apart only so."""
    if fleet_of(label) != fleet:
        return False
    fid = fleet_id_of(label)
    return fleet_id is None or fid is None or fid == fleet_id


def ours(rows: Iterable[VastRow], fleet: str, fleet_id: str | None = None) -> list[VastRow]:
    return [r for r in rows if owned(r.label, fleet, fleet_id)]


def strays(rows: Iterable[VastRow], fleet: str, known: Iterable[str]) -> list[VastRow]:
    """Rows of this fleet's name under a fleet id that no database of the trial has: rented
    under an identity nobody keeps (nobody would ever destroy them)."""
    ids = set(known)
    return [
        r
        for r in rows
        if fleet_of(r.label) == fleet and (fid := fleet_id_of(r.label)) and fid not in ids
    ]


# -- the store, read read-only ------------------------------------------------------------


@dataclass(frozen=True)
class StoreInstance:
    vast_id: int
    label: str | None
    state: str
    machine_id: int | None = None
    kill_kind: str | None = None
    kill_reason: str | None = None
    bench_outcome: str | None = None
    error_lines: tuple[str, ...] = ()
    source: str = "vastui"
    # the engine's clock (the served cloud's simulated time)
    killed_at: float | None = None
    last_seen_at: float | None = None  # the last Vast list that showed it, reconciled
    proving_at: float | None = None
    prod_checked_at: float | None = None  # the last good read of its counters
    drain_deadline: float | None = None  # draining: cordoned, destroyed by then (engine clock)

    @property
    def killed(self) -> bool:
        return self.state == "killed"

    @property
    def draining(self) -> bool:
        return self.drain_deadline is not None and not self.killed


@dataclass(frozen=True)
class StoreEvent:
    kind: str
    instance_id: int | None
    machine_id: int | None
    reason: str
    detail: Mapping[str, Any] = field(default_factory=dict)
    ts: float | None = None  # engine clock (``vastui resume`` stamps its own: the wall clock)


@dataclass(frozen=True)
class StoreForeign:
    """A row of ``foreign_instances``: another controller's instance as the engine last
    listed it."""

    vast_id: int
    label: str
    owner: str
    first_seen_at: float | None = None
    last_seen_at: float | None = None


@dataclass(frozen=True)
class StoreIntent:
    id: int
    kind: str  # rent | destroy
    status: str  # pending | done | failed | dry_run
    label: str | None = None
    instance_id: int | None = None
    machine_id: int | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)
    created_at: float | None = None  # engine clock
    reason: str = ""


@dataclass(frozen=True)
class StoreStrike:
    machine_id: int
    instance_id: int | None
    kind: str
    reason: str
    ts: float  # engine clock


@dataclass(frozen=True)
class StoreBan:
    machine_id: int
    reason: str
    source: str  # manual | automatic | legacy
    created_at: float  # engine clock


@dataclass(frozen=True)
class StoreView:
    instances: tuple[StoreInstance, ...] = ()
    events: tuple[StoreEvent, ...] = ()
    intents: tuple[StoreIntent, ...] = ()
    banned: frozenset[int] = frozenset()  # machine ids with a bad-list row (any source)
    strikes: Mapping[int, int] = field(default_factory=dict)  # machine id → strikes
    integrity: tuple[str, ...] = ("ok",)
    strike_rows: tuple[StoreStrike, ...] = ()
    ban_rows: tuple[StoreBan, ...] = ()
    fleet_id: str | None = None  # meta.fleet_id: this database's identity, in its labels
    foreign_rows: tuple[StoreForeign, ...] = ()
    pause: Mapping[str, Any] | None = None  # meta.fleet_failure: the provisioning pause

    def by_id(self) -> dict[int, StoreInstance]:
        return {i.vast_id: i for i in self.instances}


def json_detail(text: str | None) -> dict[str, Any]:
    """An event's or intent's detail column; damage reads as empty (the checks then say so):
    the store's own lenient reader."""
    return json_dict(text)


# -- no two rentals for one intent ---------------------------------------------------------


def labels_seen(
    before: Mapping[str, frozenset[int]], rows: Iterable[VastRow]
) -> dict[str, frozenset[int]]:
    """Every instance id ever listed under each vastui label (fold over observations)."""
    out = dict(before)
    for row in rows:
        if row.label and is_vastui_label(row.label):
            out[row.label] = out.get(row.label, frozenset()) | {row.id}
    return out


def double_rents(seen: Mapping[str, frozenset[int]], store: StoreView) -> list[Violation]:
    """A label is one rent intent: more than one instance under it is a double rental."""
    ids: dict[str, set[int]] = {label: set(v) for label, v in seen.items()}
    for inst in store.instances:
        if inst.label and is_vastui_label(inst.label):
            ids.setdefault(inst.label, set()).add(inst.vast_id)
    return [
        Violation("double_rent", f"label {label}", f"instances {sorted(found)} share one label")
        for label, found in sorted(ids.items())
        if len(found) > 1
    ]


def double_rents_ledger(created: Mapping[str, int]) -> list[Violation]:
    """The cloud's own count of creates per label (``/_sim/stats`` ``labels_created``, when the
    served cloud keeps one): exact, where polling may miss an instance created and destroyed
    between two observations."""
    return [
        Violation("double_rent", f"label {label}", f"the cloud created {count} instances under it")
        for label, count in sorted(created.items())
        if is_vastui_label(label) and isinstance(count, int) and count > 1
    ]


# -- orphans ----------------------------------------------------------------------------------


def untracked(
    rows: Iterable[VastRow], store: StoreView, fleet: str, known: Iterable[str] | None = None
) -> dict[int, str]:
    """Ours on the cloud, paying, that the store does not follow: id → why. Ours: this
    database's (its fleet id, once known). With ``known`` (the fleet ids of every database in
    the trial), a row of this fleet's name under any other id is untracked too: nobody's."""
    records = store.by_id()
    out: dict[int, str] = {}
    rows = list(rows)
    for row in ours(rows, fleet, store.fleet_id):
        rec = records.get(row.id)
        if rec is None:
            out[row.id] = "not in the store"
        elif rec.killed:
            out[row.id] = f"recorded as killed ({rec.kill_kind}) but still listed"
    if known is not None:
        for row in strays(rows, fleet, known):
            out[row.id] = f"under fleet id {fleet_id_of(row.label)}, which no database here has"
    return out


@dataclass(frozen=True)
class OrphanWatch:
    """Since when (wall time) each untracked instance of ours has been seen untracked."""

    since: Mapping[int, float] = field(default_factory=dict)


def orphans(
    watch: OrphanWatch,
    at: float,
    rows: Sequence[VastRow],
    store: StoreView,
    fleet: str,
    engine_up_since: float | None,
    bound: float,
    known: Iterable[str] | None = None,
) -> tuple[OrphanWatch, list[Violation]]:
    """Fold one observation. An orphan is counted only while an engine runs (from when it came
    back, if later than first seen): it is a violation once older than ``bound`` seconds."""
    now_untracked = untracked(rows, store, fleet, known)
    since = {iid: watch.since.get(iid, at) for iid in now_untracked}
    found = []
    if engine_up_since is not None:
        for iid, why in sorted(now_untracked.items()):
            age = at - max(since[iid], engine_up_since)
            if age > bound:
                found.append(
                    Violation(
                        "orphan",
                        f"instance {iid}",
                        f"{why} for {age:.0f}s with the engine up (bound {bound:.0f}s)",
                        at,
                    )
                )
    return OrphanWatch(since), found


# -- nothing without our label touched --------------------------------------------------------


def foreign_touched(
    foreign: frozenset[int],
    rows: Sequence[VastRow] | None,
    store: StoreView,
    fleet: str,
    others: frozenset[int] = frozenset(),
) -> list[Violation]:
    """The harness's foreign instances stay listed; the store never records or adopts anything
    without this fleet's label (and this database's fleet id, once known), nor names in an
    event or intent a foreign instance or one of ``others`` (another database's on the same
    account, which come and go as their controller decides). ``rows`` None: this observation of
    the cloud failed."""
    found = []
    untouchable = foreign | others
    if rows is not None:
        listed = {r.id for r in rows}
        for iid in sorted(foreign - listed):
            found.append(
                Violation("foreign_touched", f"instance {iid}", "foreign instance no longer listed")
            )
    for inst in store.instances:
        if inst.vast_id in untouchable or not owned(inst.label, fleet, store.fleet_id):
            found.append(
                Violation(
                    "foreign_touched",
                    f"instance {inst.vast_id}",
                    f"the store tracks it (label {inst.label!r}, state {inst.state})",
                )
            )
    for ev in store.events:
        if ev.instance_id in untouchable:
            found.append(
                Violation(
                    "foreign_touched",
                    f"instance {ev.instance_id}",
                    f"a {ev.kind} event names it: {ev.reason[:120]}",
                )
            )
    for intent in store.intents:
        if intent.instance_id in untouchable:
            found.append(
                Violation(
                    "foreign_touched",
                    f"instance {intent.instance_id}",
                    f"{intent.kind} intent {intent.id} names it",
                )
            )
    return found


# -- every destroy recorded ---------------------------------------------------------------------


def destroys_unrecorded(store: StoreView, *, allow_vanished: bool = False) -> list[Violation]:
    """Each killed instance has a kind, a reason and its destroy event; in a trial nothing but
    the engine destroys our instances, so a "vanished" one is a destroy whose record was lost."""
    destroyed = {
        ev.instance_id for ev in store.events if ev.kind == "destroy" and ev.reason.strip()
    }
    found = []
    for inst in store.instances:
        if not inst.killed:
            continue
        subject = f"instance {inst.vast_id}"
        if not (inst.kill_kind and inst.kill_reason and inst.kill_reason.strip()):
            found.append(Violation("destroy_unrecorded", subject, "killed without kind or reason"))
        elif inst.kill_kind == "vanished":
            if not allow_vanished:
                found.append(
                    Violation(
                        "destroy_unrecorded",
                        subject,
                        "recorded as vanished: it was destroyed without its reason",
                    )
                )
        elif inst.vast_id not in destroyed:
            found.append(
                Violation(
                    "destroy_unrecorded",
                    subject,
                    f"killed ({inst.kill_kind}) without a destroy event",
                )
            )
    return found


def gone_unrecorded(
    ever_ours: Iterable[int], rows: Sequence[VastRow], store: StoreView
) -> list[Violation]:
    """Ours that were listed once and are gone now must be recorded as killed (end check)."""
    listed = {r.id for r in rows}
    known = store.by_id()
    found = []
    for iid in sorted(set(ever_ours) - listed):
        rec = known.get(iid)
        if rec is None:
            found.append(
                Violation(
                    "destroy_unrecorded", f"instance {iid}", "gone from the cloud, never recorded"
                )
            )
        elif not rec.killed:
            found.append(
                Violation(
                    "destroy_unrecorded",
                    f"instance {iid}",
                    f"gone from the cloud, still {rec.state} in the store",
                )
            )
    return found


# -- every machine fault banned ---------------------------------------------------------------


def ban_worthy(inst: StoreInstance) -> str | None:
    """Why a killed instance's machine must be banned (engine/policy.py's rule), or None: a
    stuck image load, a benchmark that errored, GPU errors in its lines."""
    if not inst.killed or not inst.machine_id:
        return None
    if inst.kill_kind == "deadline_loading":
        return "stuck image load"
    if inst.kill_kind == "bench_error" and inst.bench_outcome == "error":
        return "benchmark error"
    gpu = gpu_errors(inst.error_lines)
    if gpu:
        return f"GPU error: {gpu[-1][:80]}"
    return None


def _intent_ban(intent: StoreIntent) -> int | None:
    """The machine a completed destroy intent decided to ban (its ``ban_record``, or the older
    ``ban`` reason with the intent's machine), else None."""
    if intent.kind != "destroy" or intent.status != "done":
        return None
    record = intent.detail.get("ban_record")
    if isinstance(record, dict) and _is_int(record.get("machine_id")):
        return int(record["machine_id"])
    if intent.detail.get("ban") and intent.machine_id:
        return intent.machine_id
    return None


def forgiven_by_fleet_failure(store: StoreView) -> frozenset[int]:
    """The instances whose failure the engine declared the fleet's (engine/fleetwide.py): those
    a ``fleet_failure`` pause names (its earlier victims, their strikes and bans taken back),
    and every destroy recorded as uncharged (``fleet_failure`` in its detail). Only a trial that
    switches a fleet-wide fault on may excuse these from ``ban_missing``: anywhere else such a
    declaration is a machine's fault gone unbanned."""
    out: set[int] = set()
    for ev in store.events:
        if ev.kind == "fleet_failure" and isinstance(ev.detail.get("instances"), list):
            out.update(i for i in ev.detail["instances"] if _is_int(i))
        if ev.kind == "destroy" and ev.detail.get("fleet_failure") is True and ev.instance_id:
            out.add(ev.instance_id)
    return frozenset(out)


def bans_missing(
    store: StoreView, strikes_to_ban: int, forgiven: frozenset[int] = frozenset()
) -> list[Violation]:
    """Every machine fault banned; ``forgiven``: instances whose failure was declared the
    fleet's (a storm trial only, :func:`forgiven_by_fleet_failure`)."""
    need: dict[int, str] = {}
    for inst in store.instances:
        why = ban_worthy(inst)
        if why and inst.machine_id and inst.vast_id not in forgiven:
            need.setdefault(inst.machine_id, f"instance {inst.vast_id}: {why}")
    for intent in store.intents:
        machine = _intent_ban(intent)
        if machine and intent.instance_id not in forgiven:
            need.setdefault(machine, f"destroy intent {intent.id} decided a ban")
    if strikes_to_ban > 0:
        for machine, count in store.strikes.items():
            if count >= strikes_to_ban:
                need.setdefault(machine, f"{count} strikes (ban at {strikes_to_ban})")
    return [
        Violation("ban_missing", f"machine {machine}", f"not on the bad list; {why}")
        for machine, why in sorted(need.items())
        if machine not in store.banned
    ]


# -- no worker lost to the controller's own tunnel ---------------------------------------------

# A worker's curio reaches the cluster database through the engine's SSH remote forward (the
# worker's 127.0.0.1:5433, or the port the simulator writes to run/forwards/5433:
# worker-image/entrypoint.sh curio_env). Refused there, the tunnel was down (the engine
# restarting, or reconnecting to a new SSH endpoint): the controller's outage, not the worker's.
TUNNEL_REFUSED = re.compile(r"dial tcp 127\.0\.0\.1:\d+: connect: connection refused")


def tunnel_kills(store: StoreView) -> list[Violation]:
    """Workers destroyed for a stage failure whose error lines show the local tunnel refused."""
    found = []
    for inst in store.instances:
        if not inst.killed or not (inst.kill_kind or "").endswith("_failed"):
            continue
        refused = [line for line in inst.error_lines if TUNNEL_REFUSED.search(line)]
        if refused:
            found.append(
                Violation(
                    "worker_lost_to_tunnel",
                    f"instance {inst.vast_id}",
                    f"destroyed ({inst.kill_kind}: {inst.kill_reason}); its curio found the "
                    f"controller's tunnel closed: {refused[-1][-160:]}",
                )
            )
    return found


# -- the store's file -----------------------------------------------------------------------


def integrity(store: StoreView) -> list[Violation]:
    if list(store.integrity) == ["ok"]:
        return []
    return [Violation("integrity", "database", "; ".join(store.integrity)[:300])]


# -- the target ------------------------------------------------------------------------------


def target_at(timeline: Sequence[tuple[float, int]], at: float) -> int | None:
    """The target in effect at ``at``: the last (time, target) at or before it."""
    current = None
    for since, target in timeline:
        if since <= at:
            current = target
    return current


def allowed_alive(timeline: Sequence[tuple[float, int]], at: float, grace: float) -> int | None:
    """The most of ours allowed at ``at``: a lowered target gets ``grace`` seconds to shrink."""
    values = [t for since, t in timeline if at - grace < since <= at]
    before = target_at(timeline, at - grace)  # in effect when the grace began
    if before is not None:
        values.append(before)
    return max(values) if values else None


def over_target(
    at: float,
    rows: Sequence[VastRow],
    fleet: str,
    timeline: Sequence[tuple[float, int]],
    grace: float,
    fleet_id: str | None = None,
    draining: frozenset[int] = frozenset(),
) -> list[Violation]:
    """Every listed instance of ours pays (a stopped or exited one pays its storage). A worker
    draining before its planned destroy (``draining``: cordoned, with a deadline, in the store)
    is on its way out and not counted: the engine rents its replacement meanwhile, by design
    (engine/drain.py), and the drain's own bound is checked apart (its destroy is recorded)."""
    allowed = allowed_alive(timeline, at, grace)
    alive = ours(rows, fleet, fleet_id)
    counted = [r for r in alive if r.id not in draining]
    if allowed is None or len(counted) <= allowed:
        return []
    ids = ", ".join(str(r.id) for r in alive)
    more = f" ({len(alive) - len(counted)} draining)" if len(counted) < len(alive) else ""
    return [
        Violation(
            "over_target",
            f"t={at:.0f}",
            f"{len(counted)} of ours listed ({ids}){more}, allowed {allowed}",
            at,
        )
    ]


@dataclass(frozen=True)
class Sample:
    at: float
    alive: int  # ours listed on the cloud
    target: int
    excused: bool = False  # no viable offer the engine could have rented (checked apart)


@dataclass(frozen=True)
class Stretch:
    """Time spent below the target: from the first sample below (or from a look at the market
    that found nothing viable) to the first sample back at the target (or the next such look,
    or the last sample)."""

    start: float
    end: float
    best: int  # the most of ours listed during it
    target: int
    after_empty_market: bool  # it starts at a look that found nothing viable
    open: bool  # still below at the last sample

    @property
    def length(self) -> float:
        return self.end - self.start


def below_stretches(samples: Sequence[Sample], start: float) -> list[Stretch]:
    """The stretches below target (from ``start``). A look at the market that found nothing
    viable (an excused sample) ends one stretch and starts the next: the engine's time to
    refill counts from when offers may have come back."""
    out: list[Stretch] = []
    run: list[Sample] = []
    for s in (x for x in samples if x.at >= start):
        if s.alive >= s.target:
            if run:
                out.append(_stretch(run, s.at, open_=False))
                run = []
            continue
        if s.excused and run:
            out.append(_stretch(run, s.at, open_=False))
            run = []
        run.append(s)
    if run:
        out.append(_stretch(run, run[-1].at, open_=True))
    return out


def _stretch(run: list[Sample], end: float, *, open_: bool) -> Stretch:
    return Stretch(run[0].at, end, max(s.alive for s in run), run[-1].target, run[0].excused, open_)


def below_target(samples: Sequence[Sample], bound: float, start: float) -> list[Violation]:
    """The fleet may be below its target for at most ``bound`` seconds at a time (the time the
    engine needs to replace a worker), counted from when offers may have been viable."""
    return [
        Violation(
            "below_target",
            f"t={s.start:.0f}",
            f"at most {s.best} of target {s.target} listed for {s.length:.0f}s"
            f"{' (still below at the end)' if s.open else ''}, bound {bound:.0f}s; the market "
            "was not shown empty in that time",
            s.end,
        )
        for s in below_stretches(samples, start)
        if s.length > bound
    ]


# -- an outage: the Vast API unreachable, or the workers' SSH refused ----------------------------

# Kills that say the engine lost sight or word of an instance: never the outage's excuse.
CONTACT_KINDS = frozenset(
    {
        "prove_unresponsive",
        "tunnel_down",
        "deadline_loading",
        "deadline_first_report",
        "deadline_setup",
        "deadline_paramfetch",
        "deadline_benchmark",
        "vanished",
    }
)
VAST_VISIBLE = frozenset({"offline", "exited"})  # Vast itself lists the instance unhealthy
ALWAYS_EXCUSED = frozenset({"manual", "surplus"})  # the operator's, or above the target


@dataclass(frozen=True)
class Outage:
    """One outage, in the engine's clock (the served cloud's simulated time)."""

    invariant: str  # outage_destroy (the Vast API) | cut_off_destroy (the workers' SSH)
    what: str  # "the Vast API" | "SSH to the workers", for the report
    start: float
    end: float  # contact back
    window_end: float  # a destroy decided up to here counts as the outage's
    blind_to: str  # "api" | "ssh": what the engine could not see meanwhile


@dataclass(frozen=True)
class Decision:
    """A destroy the engine decided: its intent (or, with none, the kill's record)."""

    instance_id: int
    machine_id: int | None
    kind: str
    reason: str
    at: float  # engine clock


def destroys_decided(store: StoreView) -> list[Decision]:
    """Every destroy decided, once per instance, at its earliest record: the destroy intent
    (written before the request is sent), else the instance's kill (a vanished one has none)."""
    out: dict[int, Decision] = {}
    for intent in store.intents:
        if intent.kind != "destroy" or intent.instance_id is None or intent.created_at is None:
            continue
        kind = str(intent.detail.get("kind") or "?")
        d = Decision(intent.instance_id, intent.machine_id, kind, intent.reason, intent.created_at)
        if intent.instance_id not in out or d.at < out[intent.instance_id].at:
            out[intent.instance_id] = d
    for inst in store.instances:
        if inst.killed and inst.vast_id not in out and inst.killed_at is not None:
            out[inst.vast_id] = Decision(
                inst.vast_id, inst.machine_id, inst.kill_kind or "?", inst.kill_reason or "",
                inst.killed_at,
            )  # fmt: skip
    return sorted(out.values(), key=lambda d: (d.at, d.instance_id))


def outage_excuse(d: Decision, outage: Outage, unhealthy_seen: Mapping[int, str]) -> str | None:
    """Why a destroy decided in an outage's window is not the outage's doing, or None.

    Vast listing the instance exited or offline (the observer saw it so) excuses the kills
    Vast's status decides. A kill on the worker's own word (a dead daemon, failing or overdue
    proofs, a benchmark's verdict; the world has slow machines even without injected faults) is
    the machine's when the engine could hear that word: any time while only the API was out,
    only once SSH was back after a cut. Lost contact (``CONTACT_KINDS``) is never an excuse."""
    if d.kind in ALWAYS_EXCUSED:
        return d.kind
    if d.kind in VAST_VISIBLE:
        status = unhealthy_seen.get(d.instance_id)
        return f"Vast listed it {status}" if status else None
    if d.kind in CONTACT_KINDS:
        return None
    if outage.blind_to == "ssh":
        if d.at < outage.end:
            return None  # nothing the worker said could reach the engine then
        return "on the worker's own word, heard once SSH was back"
    return "on the worker's own word, heard over SSH"


def outage_harm(
    outage: Outage,
    store: StoreView,
    unhealthy_seen: Mapping[int, str],
) -> list[Violation]:
    """Every destroy decided, strike given and automatic ban made from the outage's start to
    its window's end that nothing but the outage explains. Times are the engine's clock."""
    found = []
    excused_machines: set[int] = set()

    def rel(at: float) -> str:
        if at < outage.end:
            return f"{(at - outage.start) / 60:.1f} min into the outage"
        return f"{(at - outage.end) / 60:.1f} min after it ended"

    for d in destroys_decided(store):
        if not outage.start <= d.at <= outage.window_end:
            continue
        why = outage_excuse(d, outage, unhealthy_seen)
        if why is not None:
            if d.machine_id is not None:
                excused_machines.add(d.machine_id)
            continue
        found.append(
            Violation(
                outage.invariant,
                f"instance {d.instance_id}",
                f"destroyed as {d.kind} ({d.reason[:160]}), decided {rel(d.at)} "
                f"({outage.what} out for {(outage.end - outage.start) / 60:.0f} min)",
                d.at,
            )
        )

    def in_window(at: float, machine: int) -> bool:
        return outage.start <= at <= outage.window_end and machine not in excused_machines

    struck: set[int] = set()  # machines with a strike of the outage's
    for strike in store.strike_rows:
        if in_window(strike.ts, strike.machine_id):
            struck.add(strike.machine_id)
            found.append(
                Violation(
                    outage.invariant,
                    f"machine {strike.machine_id} strike {strike.kind}",
                    f"struck ({strike.reason[:120]}) {rel(strike.ts)}",
                    strike.ts,
                )
            )
    for ban in store.ban_rows:
        if ban.source != "automatic":
            continue
        if in_window(ban.created_at, ban.machine_id):
            why = f"banned ({ban.reason[:120]}) {rel(ban.created_at)}"
        elif ban.created_at > outage.window_end and ban.machine_id in struck:
            # later, but the outage's strike counted towards it
            why = f"banned ({ban.reason[:120]}) {rel(ban.created_at)}, one strike the outage's"
        else:
            continue
        found.append(
            Violation(outage.invariant, f"machine {ban.machine_id} ban", why, ban.created_at)
        )
    return found


def listed_again(
    restored: float, answered: Sequence[tuple[float, str, int]], bound: float
) -> list[Violation]:
    """After the Vast API came back (wall time ``restored``), the engine's first instance list
    answered 200 within ``bound`` seconds. ``answered``: (wall time, path, status) of the
    engine's requests as the proxy saw them."""
    lists = [at for at, path, status in answered if at >= restored and status == 200
             and re.match(r"^/api/v[01]/instances/?(\?|$)", path)]  # fmt: skip
    first = min(lists, default=None)
    if first is not None and first - restored <= bound:
        return []
    seen = "none" if first is None else f"the first after {first - restored:.0f}s"
    return [
        Violation(
            "outage_recovery",
            "instance list",
            f"no instance list answered within {bound:.0f}s of the API's return ({seen})",
        )
    ]


def counters_read_again(store: StoreView, restored: float) -> list[Violation]:
    """After SSH came back (engine clock ``restored``), every worker still proving that was
    proving before has had its counters read again (checked at the end of the trial)."""
    return [
        Violation(
            "outage_recovery",
            f"instance {inst.vast_id}",
            "proving, but its counters were not read since SSH came back "
            f"(last read {'never' if inst.prod_checked_at is None else 'before'})",
        )
        for inst in store.instances
        if not inst.killed
        and inst.state == "proving"
        and inst.proving_at is not None
        and inst.proving_at < restored
        and (inst.prod_checked_at is None or inst.prod_checked_at < restored)
    ]


def recovered_target(samples: Sequence[Sample], bound: float, restored: float) -> list[Violation]:
    """From the outage's end (wall time), below the target no longer than ``bound`` at a time
    (the below_target rule, counted from the return)."""
    return [
        Violation("outage_recovery", v.subject, v.detail, v.at)
        for v in below_target(samples, bound, restored)
    ]


# -- resources: no growth without bound -------------------------------------------------------


@dataclass(frozen=True)
class Tolerance:
    """How far the last third's peak may lie above the middle third's: ``rel`` of it plus
    ``abs`` (in the metric's unit)."""

    rel: float
    abs: float


@dataclass(frozen=True)
class Growth:
    metric: str
    judged: bool  # enough samples after the warm-up
    middle_max: float | None
    last_max: float | None
    allowed: float | None
    slope_per_hour: float | None  # Theil-Sen, over the samples after the warm-up (information)
    detects_per_hour: float | None  # the least steady growth the rule is sure to catch

    @property
    def grew(self) -> bool:
        return (
            self.judged
            and self.last_max is not None
            and self.allowed is not None
            and self.last_max > self.allowed
        )

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["grew"] = self.grew
        return out


MIN_PER_THIRD = 3  # samples in each third, or the series is not judged


def theil_sen(points: Sequence[tuple[float, float]], limit: int = 400) -> float | None:
    """The median of the pairwise slopes (robust to spikes), per unit of the first value; on at
    most ``limit`` evenly spaced points."""
    if len(points) < 2:
        return None
    if len(points) > limit:
        step = len(points) / limit
        points = [points[int(i * step)] for i in range(limit)]
    slopes = sorted(
        (b[1] - a[1]) / (b[0] - a[0])
        for i, a in enumerate(points)
        for b in points[i + 1 :]
        if b[0] > a[0]
    )
    if not slopes:
        return None
    mid = len(slopes) // 2
    return slopes[mid] if len(slopes) % 2 else (slopes[mid - 1] + slopes[mid]) / 2


def growth(
    metric: str,
    series: Sequence[tuple[float, float]],
    tolerance: Tolerance,
    warmup: float,
) -> Growth:
    """Judge one series of (seconds, value): after the first ``warmup`` share of its time, the
    rest in three equal spans of time; it grew without bound if the last span's peak exceeds
    the middle one's peak by more than the tolerance. Peaks, not means: a fleet's load comes
    and goes, and a bounded resource reaches the same peak again, while a leak raises every
    peak. The first span is left out too: the caches (SQLite's pages, the offers, asyncssh's
    buffers) may still be filling there."""
    points = sorted((float(t), float(v)) for t, v in series)
    if len(points) < 2:
        return Growth(metric, False, None, None, None, None, None)
    t0, t1 = points[0][0], points[-1][0]
    start = t0 + warmup * (t1 - t0)
    post = [p for p in points if p[0] >= start]
    span = (t1 - start) / 3.0
    middle = [v for t, v in post if start + span <= t < start + 2 * span]
    last = [v for t, v in post if t >= start + 2 * span]
    slope = theil_sen(post)
    slope_h = None if slope is None else slope * 3600.0
    if len(middle) < MIN_PER_THIRD or len(last) < MIN_PER_THIRD or span <= 0:
        return Growth(metric, False, None, None, None, slope_h, None)
    mid_max, last_max = max(middle), max(last)
    allowed = mid_max * (1.0 + tolerance.rel) + tolerance.abs
    # A steady growth of g per second raises the last peak over the middle one by about g x
    # span: it is caught once that exceeds the tolerance.
    detects = (allowed - mid_max) / span * 3600.0
    return Growth(metric, True, mid_max, last_max, allowed, slope_h, detects)


def growth_violations(results: Iterable[Growth], invariant: str) -> list[Violation]:
    return [
        Violation(
            invariant,
            g.metric,
            f"peak {g.last_max:g} in the last third over {g.allowed:g} allowed (middle third's "
            f"peak {g.middle_max:g}); slope {g.slope_per_hour or 0:+.3g}/h",
        )
        for g in results
        if g.grew
    ]


# -- two controllers on one account (issue 17 item 1) -----------------------------------------

FOREIGN_OWNER = re.compile(r"\(fleet (\S+?): ")  # the engine's `foreign` event (engine.py)
DELETE_PATH = re.compile(r"^/api/v[01]/instances/(\d+)/?(?:\?|$)")


def owner_label(fleet: str, fleet_id: str | None) -> str:
    """How the engine names a controller in its ``foreign`` events and ``foreign_instances``
    (labels.owner_of): ``<fleet>.<fleet id>``."""
    return f"{fleet}.{fleet_id}" if fleet_id else fleet


def unintended(store: StoreView) -> list[Violation]:
    """Ownership by intent (``store.intents.intended``): every instance a database records
    carries the label of a rent intent of its own (no dry run's). A label of the right shape is
    not enough: another database on the account rents under the same fleet name."""
    labels = {i.label for i in store.intents if i.kind == "rent" and i.status != "dry_run"}
    return [
        Violation(
            "foreign_touched", f"instance {inst.vast_id}",
            f"recorded ({inst.state}, label {inst.label!r}) without a rent intent of its own",
        )
        for inst in store.instances
        if inst.label not in labels
    ]  # fmt: skip


def foreign_seen(
    at: float,
    theirs: Sequence[VastRow],
    store: StoreView,
    first_listed: Mapping[int, float],
    up_since: float | None,
    bound: float,
) -> list[Violation]:
    """Another database's instances listed on the cloud (``theirs``) are in this store's
    ``foreign_instances`` once listed longer than ``bound`` with this engine up (it lists every
    step; one step may be held by a Vast call at its worst: the orphan bound); no instance of
    this database's is ever there."""
    found = []
    recorded = {f.vast_id for f in store.foreign_rows}
    if up_since is not None:
        for r in theirs:
            if r.id in recorded:
                continue
            age = at - max(first_listed.get(r.id, at), up_since)
            if age > bound:
                found.append(
                    Violation(
                        "foreign_unseen", f"instance {r.id}",
                        f"another controller's ({owner_of(r.label)}) listed for {age:.0f}s with "
                        f"this engine up, not in its foreign_instances (bound {bound:.0f}s)", at,
                    )
                )  # fmt: skip
    if store.fleet_id:
        for f in store.foreign_rows:
            if fleet_id_of(f.label) == store.fleet_id:
                found.append(
                    Violation(
                        "foreign_unseen", f"instance {f.vast_id}",
                        f"its own instance (label {f.label}) listed as another controller's", at,
                    )
                )  # fmt: skip
    return found


def foreign_warnings(
    store: StoreView, own: str, expected: Iterable[str], *, final: bool
) -> list[Violation]:
    """One ``foreign`` event per foreign fleet, ever: never two for one owner, never one for
    this database itself; at the end, one for every owner in ``expected`` (the other databases
    whose instances this engine had time to see)."""
    counts: dict[str, int] = {}
    for ev in store.events:
        if ev.kind != "foreign":
            continue
        match = FOREIGN_OWNER.search(ev.reason)
        owner = match.group(1) if match else "?"
        counts[owner] = counts.get(owner, 0) + 1
    found = []
    for owner, n in sorted(counts.items()):
        if owner == own:
            found.append(
                Violation("foreign_unseen", f"warning {owner}", "warned about its own fleet")
            )
        elif n > 1:
            found.append(
                Violation("foreign_unseen", f"warning {owner}", f"{n} foreign events, not one")
            )
    if final:
        for owner in sorted(set(expected) - set(counts)):
            found.append(
                Violation(
                    "foreign_unseen", f"warning {owner}",
                    "its instances were listed, but no foreign event names the fleet",
                )
            )  # fmt: skip
    return found


def rent_war(
    created: Mapping[str, int], store: StoreView, fleet: str, target: int
) -> list[Violation]:
    """The cloud's creates under this database's labels (``/_sim/stats`` ``labels_created``,
    exact) are at most its target plus the instances it destroyed itself (each recorded with a
    kind and a reason: ``destroy_unrecorded``): a controller that destroyed the other's
    instances, or rented against a count that included them, rents more."""
    fid = store.fleet_id
    if fid is None:
        return []
    creates = sum(
        n
        for label, n in created.items()
        if isinstance(n, int) and fleet_of(label) == fleet and fleet_id_of(label) == fid
    )
    killed = sum(1 for i in store.instances if i.killed and owned(i.label, fleet, fid))
    if creates <= target + killed:
        return []
    return [
        Violation(
            "rent_war", f"fleet {owner_label(fleet, fid)}",
            f"{creates} instances created under its labels; allowed {target} (its target) + "
            f"{killed} it destroyed itself",
        )
    ]  # fmt: skip


def cross_destroys(
    who: str, deletes: Iterable[int], own: Iterable[int], theirs: Iterable[int]
) -> list[Violation]:
    """The instances a controller sent a DELETE for (read off its own API proxy, whatever the
    answer) are its own: never another database's (``theirs``: listed under its fleet id, or the
    harness's foreign instance), never one its own store and labels do not know (``own``)."""
    own_ids, their_ids = set(own), set(theirs)
    found = []
    for iid in sorted(set(deletes)):
        if iid in their_ids:
            found.append(
                Violation(
                    "cross_destroy", f"instance {iid}",
                    f"{who} sent a destroy for another controller's instance",
                )
            )  # fmt: skip
        elif iid not in own_ids:
            found.append(
                Violation(
                    "cross_destroy", f"instance {iid}",
                    f"{who} sent a destroy for an instance its database never recorded",
                )
            )  # fmt: skip
    return found


def gone_without_own_destroy(
    owner_of_id: Mapping[int, str],
    rows: Sequence[VastRow],
    deletes: Mapping[str, Iterable[int]],
) -> list[Violation]:
    """Every instance that was listed under one database's labels and is gone now was destroyed
    by that database's own controller (a DELETE through its proxy): in the simulator nothing
    else removes an instance. ``owner_of_id``: id → who (as in ``deletes``)."""
    listed = {r.id for r in rows}
    sent = {who: set(ids) for who, ids in deletes.items()}
    return [
        Violation(
            "cross_destroy", f"instance {iid}",
            f"{who}'s instance is gone from the cloud without a destroy from {who}",
        )
        for iid, who in sorted(owner_of_id.items())
        if iid not in listed and iid not in sent.get(who, set())
    ]  # fmt: skip


def destroy_ledger(cloud_destroyed: int | None, deletes_sent: int) -> list[Violation]:
    """The cloud's own count of destroys (``/_sim/stats`` ``instances_destroyed``) is no more
    than the DELETEs the controllers sent: no destroy came from elsewhere."""
    if cloud_destroyed is None or cloud_destroyed <= deletes_sent:
        return []
    return [
        Violation(
            "cross_destroy", "cloud ledger",
            f"the cloud destroyed {cloud_destroyed} instances, the controllers asked "
            f"{deletes_sent}",
        )
    ]  # fmt: skip


def delete_ids(requests: Iterable[tuple[str, str]]) -> list[int]:
    """Instance ids of the DELETE requests among (method, path)."""
    out = []
    for method, path in requests:
        match = DELETE_PATH.match(path) if method == "DELETE" else None
        if match:
            out.append(int(match.group(1)))
    return out


# -- a fleet-wide failure: one signature on every machine (issue 17 item 3) --------------------


@dataclass(frozen=True)
class Episode:
    """One provisioning pause for a fleet-wide failure, from the engine's events."""

    signature: str
    paused_at: float  # engine clock
    machines: tuple[int, ...]
    instances: tuple[int, ...]
    ended: str | None = None  # the resume event's reason: "cleared by the operator", "passed"
    # when it ended: the resume event's time (``vastui resume`` stamps the wall clock, not the
    # engine's: a trial on a simulated clock puts its own time of the resume here)
    ended_at: float | None = None


def pause_episodes(store: StoreView) -> list[Episode]:
    """The pauses in the order the engine recorded them (``fleet_failure`` events: "provisioning
    paused: ..." with the signature in its detail, "provisioning resumed: ..." ending it)."""
    out: list[Episode] = []
    for ev in store.events:
        if ev.kind != "fleet_failure":
            continue
        sig = ev.detail.get("signature")
        if ev.reason.startswith("provisioning paused") and isinstance(sig, str):
            ints = [x for x in ev.detail.get("machines") or [] if _is_int(x)]
            insts = [x for x in ev.detail.get("instances") or [] if _is_int(x)]
            out.append(Episode(sig, float(ev.ts or 0.0), tuple(ints), tuple(insts)))
        elif ev.reason.startswith("provisioning resumed") and out and out[-1].ended is None:
            why = ev.reason[len("provisioning resumed: ") :] or "resumed"
            out[-1] = replace(out[-1], ended=why, ended_at=ev.ts)
    return out


def paused_spans(episodes: Sequence[Episode], end: float) -> list[tuple[float, float]]:
    """(paused at, ended at) of each pause, engine clock; one still on ends at ``end``."""
    return [(e.paused_at, e.ended_at if e.ended_at is not None else end) for e in episodes]


@dataclass(frozen=True)
class Victim:
    instance_id: int
    machine_id: int | None
    signature: str
    decided_at: float  # engine clock: its destroy intent (before the request went out)
    charged: bool  # recorded with a strike or a ban (not uncharged as the fleet's)


def victims(store: StoreView, signature: str | None = None) -> list[Victim]:
    """Every destroy recorded with a failure signature (``signature``: only that one), at its
    decision's time."""
    decided = {d.instance_id: d.at for d in destroys_decided(store)}
    out = []
    for ev in store.events:
        sig = ev.detail.get("signature")
        if ev.kind != "destroy" or not isinstance(sig, str) or ev.instance_id is None:
            continue
        if signature is not None and sig != signature:
            continue
        at = decided.get(ev.instance_id, float(ev.ts or 0.0))
        charged = ev.detail.get("fleet_failure") is not True
        out.append(Victim(ev.instance_id, ev.machine_id, sig, at, charged))
    return sorted(out, key=lambda v: (v.decided_at, v.instance_id))


def rented_at(store: StoreView) -> dict[int, float]:
    """Instance id → when its rent intent was written (engine clock), by label."""
    by_label = {
        i.label: i.created_at
        for i in store.intents
        if i.kind == "rent" and i.label and i.created_at is not None
    }
    return {
        inst.vast_id: float(by_label[inst.label])
        for inst in store.instances
        if inst.label in by_label and by_label[inst.label] is not None
    }


def storm_overrun(store: StoreView, episodes: Sequence[Episode], machines: int) -> list[Violation]:
    """Each pause came by the ``machines``-th machine: at most that many machines failed with
    its signature from the end of the pause before (or the start) to its declaration. A victim
    decided later was in flight (rented before the pause: ``rents_while_paused`` says the rest);
    once a pause ends (a worker passed, the operator resumed), the engine's window still holds
    the earlier victims: the next failure with the signature pauses again at once."""
    found = []
    hit = victims(store)
    after = float("-inf")
    for k, e in enumerate(episodes):
        before = sorted(
            {v.machine_id for v in hit
             if v.signature == e.signature and after < v.decided_at <= e.paused_at}
        )  # fmt: skip
        if len(before) > machines:
            found.append(
                Violation(
                    "storm_overrun", f"pause {k + 1}",
                    f"{len(before)} machines ({', '.join(map(str, before))}) failed with "
                    f"{e.signature[:100]!r} before provisioning paused (at most {machines})",
                )
            )  # fmt: skip
        after = e.ended_at if e.ended_at is not None else float("inf")
    return found


def storm_blame(store: StoreView, signature: str) -> list[Violation]:
    """No strike and no automatic ban left on a machine for a failure with ``signature`` (the
    fleet's): checked at the end, after the engine took back its earlier victims' charges."""
    hit = victims(store, signature)
    instances = {v.instance_id for v in hit}
    machines = {v.machine_id for v in hit if v.machine_id is not None}
    found = [
        Violation(
            "storm_blame", f"machine {s.machine_id} strike",
            f"struck for instance {s.instance_id} ({s.kind}: {s.reason[:100]})",
        )
        for s in store.strike_rows
        if s.instance_id in instances
    ]  # fmt: skip
    found += [
        Violation(
            "storm_blame", f"machine {b.machine_id} ban",
            f"banned automatically ({b.reason[:120]}) after failing with the fleet's signature",
        )
        for b in store.ban_rows
        if b.source == "automatic" and b.machine_id in machines
    ]  # fmt: skip
    return found


def rents_while_paused(store: StoreView, spans: Sequence[tuple[float, float]]) -> list[Violation]:
    """No rent intent written while paused (``spans``: engine clock, :func:`paused_spans`)."""
    found = []
    for i in store.intents:
        if i.kind != "rent" or i.created_at is None:
            continue
        for start, end in spans:
            if start < i.created_at < end:
                found.append(
                    Violation(
                        "storm_pause", f"rent intent {i.id}",
                        f"written {i.created_at - start:.0f}s (engine clock) into a pause",
                    )
                )  # fmt: skip
                break
    return found


def pause_status(
    status: Mapping[str, Any] | None, pause: Mapping[str, Any] | None
) -> list[Violation]:
    """While paused (``pause``: the store's ``meta.fleet_failure``, its signature and ``since``)
    and below its target, the engine's published status says ``fleet_failure`` with the
    signature (at or above target, ``at_target`` comes first by design). A status written
    before the pause, or none, says nothing."""
    if not status or not pause:
        return []
    signature, since = pause.get("signature"), pause.get("since")
    updated = status.get("updated_at")
    if not isinstance(signature, str) or not isinstance(updated, int | float):
        return []
    if isinstance(since, int | float) and updated < since:
        return []
    workers, target = status.get("workers"), status.get("target")
    if isinstance(workers, int) and isinstance(target, int) and workers >= target:
        return []
    reason = str(status.get("reason") or "")
    if status.get("reason_kind") == "fleet_failure" and signature in reason:
        return []
    return [
        Violation(
            "storm_pause", "engine status",
            f"paused for {signature[:80]!r}, but the status says {status.get('reason_kind')}: "
            f"{reason[:160]}",
        )
    ]  # fmt: skip


# -- all at once -------------------------------------------------------------------------------


def snapshot_checks(
    rows: Sequence[VastRow] | None,
    store: StoreView,
    *,
    fleet: str,
    foreign: frozenset[int],
    strikes_to_ban: int,
    others: frozenset[int] = frozenset(),
    fleet_faults: bool = False,
) -> list[Violation]:
    """The checks that need one observation only (the drivers add the folded ones).
    ``others``: another database's instances on the account; ``fleet_faults``: the trial
    switches fleet-wide faults on (what the engine declared the fleet's needs no ban)."""
    found = foreign_touched(foreign, rows, store, fleet, others)
    found += destroys_unrecorded(store)
    forgiven = forgiven_by_fleet_failure(store) if fleet_faults else frozenset()
    found += bans_missing(store, strikes_to_ban, forgiven)
    found += integrity(store)
    found += tunnel_kills(store)
    return found


def dedupe(violations: Iterable[Violation]) -> list[Violation]:
    """The first report of each (invariant, subject)."""
    seen: set[tuple[str, str]] = set()
    out = []
    for v in violations:
        if v.key not in seen:
            seen.add(v.key)
            out.append(v)
    return out


MIN_OBSERVED_SHARE = 0.5  # of a trial's observations, those that saw the cloud


def observed_enough(observations: int, failed: int) -> list[Violation]:
    """A trial whose observer could not see the cloud most of the time checked its invariants
    on nothing: it does not pass on the ledger alone."""
    if observations <= 0:
        return [Violation("observed_too_little", "observer", "no observation at all")]
    seen = observations - failed
    if seen / observations < MIN_OBSERVED_SHARE:
        return [
            Violation(
                "observed_too_little", "observer",
                f"only {seen} of {observations} observations saw the cloud "
                f"(at least {MIN_OBSERVED_SHARE:.0%} needed)",
            )
        ]  # fmt: skip
    return []
