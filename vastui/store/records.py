"""Frozen record types returned by :class:`vastui.store.Store`.

All timestamps are REAL epoch seconds (UTC). ``to_json()`` renders them as ISO-8601 UTC
strings (``"2026-11-30T10:05:00Z"``); ``None`` stays ``None``. Each ``to_json()`` produces an
exact, documented key set that the CLI's ``--json`` output and the console rely on.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

# Pipeline stages in order. ``killed`` is terminal; ``legacy`` marks imported rows whose original
# state could not be mapped.
STAGES: tuple[str, ...] = ("loading", "setup", "paramfetch", "benchmark", "proving")


def stamp(now: float | None) -> float:
    """The time a row is written at: the caller's clock (the engine's), else the wall's."""
    return time.time() if now is None else float(now)


STATES: tuple[str, ...] = (*STAGES, "killed", "legacy")

# Known kill reason codes (``instances.kill_kind``). Free text is accepted; these are the ones
# vastui writes itself.
KILL_KINDS: tuple[str, ...] = (
    "bench_below_min",  # benchmark finished below min_rate
    "prove_below_min",  # measured production rate below min_rate over the window
    "prove_failing",  # failed proofs in production
    "prove_unresponsive",  # cuzk-daemon stopped answering while proving
    "prove_unreachable",  # no SSH to the worker for long while its fellows answered
    "prove_daemon_died",  # cuzk-daemon exited while proving
    "prove_overdue",  # proofs outlived curio's ProveTimeout: the daemon proves unwanted work
    "bench_deadline",  # too slow for curio's ProveTimeout at any MaxPending that keeps min_rate
    "tunnel_down",  # waited too long for the controller's tunnel: the controller's fault
    "setup_machine",  # the machine is not what it was listed as (memory, CPU, driver)
    "setup_identity",  # no curio identity for the worker (the controller's configuration)
    "deadline_setup",  # a stage exceeded its deadline (deadline_<stage>)
    "deadline_paramfetch",
    "deadline_benchmark",
    "manual",  # operator killed it
    "bad_machine",  # the machine is on the bad list
    "vanished",  # instance disappeared from Vast
    "exited",  # the worker / container exited
    "unregistered",  # never reported in within the grace period
    "legacy",  # imported from the original tool, cause unknown
)

# Sources of a bad-machine entry, strongest first: an import never downgrades a stronger source.
BAD_SOURCES: tuple[str, ...] = ("manual", "automatic", "legacy")

# Event kinds written by vastui (``events.kind`` is free text; these are documented):
#   rent       an instance was created on Vast
#   destroy    an instance was destroyed on Vast
#   ban        a machine was added to (or banned again on) the bad list [written by Store.add_bad]
#   unban      a machine was removed from the bad list               [written by Store.remove_bad]
#   adopt      a running Vast instance not created by vastui was taken under management
#   stage      an instance moved to another pipeline stage
#   foreign    instances of another controller (a vastui label this database never intended)
#              were seen on the account, first time for their fleet: never adopted or destroyed
#   fleet_failure  one failure on several machines paused provisioning (or the pause ended)
#   kill       an instance was marked killed
#   import     a legacy state.db was imported                       [written by import_legacy]
#   benchmark  a benchmark result was recorded
#   strike     a mark against a machine (failed proofs, a production kill); enough of them ban
#   tunnel     a worker reported the controller's tunnel down (or up again)
#   error      something failed (detail carries the error)
EVENT_KINDS: tuple[str, ...] = (
    "rent",
    "destroy",
    "ban",
    "unban",
    "adopt",
    "foreign",
    "fleet_failure",
    "stage",
    "kill",
    "import",
    "benchmark",
    "strike",
    "tunnel",
    "error",
)


def iso_utc(ts: float | None) -> str | None:
    """Render epoch seconds as ``YYYY-MM-DDTHH:MM:SSZ`` (UTC); ``None`` stays ``None``."""
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _json_list(text: str | None) -> tuple[str, ...] | None:
    if text is None:
        return None
    value = json.loads(text)
    if not isinstance(value, list):  # always written as a list: anything else is damage
        raise ValueError(f"expected a JSON list of lines, got {type(value).__name__}")
    return tuple(str(v) for v in value)


def json_dict(text: str | None) -> dict[str, Any]:
    """A JSON object column for a reader that only shows or folds it: empty, damaged or not an
    object reads as {} (the record itself is never rewritten from here)."""
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _json_obj(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    value = json.loads(text)
    return value if isinstance(value, dict) else {"value": value}


@dataclass(frozen=True, slots=True)
class BidHistory:
    """A machine's record as a bid (Store.bid_history): how often it was outbid, the hours it
    ran and the hours it was stopped."""

    machine_id: int
    gpu_name: str
    interruptions: int
    running_h: float
    stopped_h: float


def bid_history(records: Iterable[InstanceRecord], now: float) -> list[BidHistory]:
    """Each machine's record as a bid, summed over its bid rentals: the store's view
    (Store.bid_history) and the economics bench's alike. Running time is from its setup (or
    create) to its end (or ``now``) less the time stopped, the open episode included."""
    sums: dict[tuple[int, str], list[float]] = {}
    for r in records:
        if not r.is_bid or r.machine_id is None or r.gpu_name is None:
            continue
        end = r.killed_at if r.killed_at is not None else now
        start = r.setup_at if r.setup_at is not None else r.created_at
        stopped = r.stopped_s
        if r.outbid_since is not None:  # stopped still, or when it was let go
            stopped += max(0.0, end - r.outbid_since)
        running = max(0.0, end - (start if start is not None else end) - stopped)
        acc = sums.setdefault((r.machine_id, r.gpu_name), [0.0, 0.0, 0.0])
        acc[0] += r.interruptions
        acc[1] += running / 3600.0
        acc[2] += stopped / 3600.0
    return [
        BidHistory(machine, gpu, int(n), hours, stopped)
        for (machine, gpu), (n, hours, stopped) in sorted(sums.items())
    ]


@dataclass(frozen=True, slots=True)
class InstanceRecord:
    """One rented Vast instance (table ``instances``)."""

    vast_id: int
    label: str | None = None
    offer_id: int | None = None
    machine_id: int | None = None
    host_id: int | None = None  # Vast operator ACCOUNT id, informational only
    gpu_name: str | None = None
    num_gpus: int | None = None
    dph_total: float | None = None
    cpu_ram_gb: float | None = None
    geolocation: str | None = None
    image: str | None = None  # image requested at rent time
    image_digest: str | None = None  # digest reported by the worker
    state: str = "loading"
    stage_started_at: float | None = None
    created_at: float | None = None
    loading_at: float | None = None
    setup_at: float | None = None
    paramfetch_at: float | None = None
    benchmark_at: float | None = None
    proving_at: float | None = None
    killed_at: float | None = None
    bench_rate: float | None = None
    min_rate: float | None = None
    bench_outcome: str | None = None  # 'pass' / 'fail' (or another engine-defined outcome)
    failed_stage: str | None = None
    kill_kind: str | None = None
    kill_reason: str | None = None
    error_lines: tuple[str, ...] | None = None
    ssh_host: str | None = None
    ssh_port: int | None = None
    source: str = "vastui"  # 'vastui' or 'legacy'
    events_seen: int = 0  # worker events consumed, to resume `workerctl events --after N`
    bench_result: str | None = None  # the worker's bench-result.json, as JSON text
    vast_status: str | None = None  # last actual_status seen on Vast
    status_msg: str | None = None  # last Vast status_msg (untrusted text)
    last_seen_at: float | None = None  # last time the instance was in the Vast list
    unhealthy_since: float | None = None  # exited/offline/unknown since
    first_report_at: float | None = None  # first event from the worker
    bench_failed: int | None = None  # proofs that failed in the benchmark
    prod_completed: int | None = None  # proofs completed in production (since the benchmark)
    prod_failed: int | None = None  # proofs failed in production
    prod_rate: float | None = None  # measured proofs/hour while busy, over the proving window
    prod_checked_at: float | None = None  # last time cuzk's counters were read
    prod_state: str | None = None  # JSON: counter baselines and samples (engine-private)
    runner_id: int | None = None  # the worker's identity in curio's cluster (unique per fleet)
    tunnel_down_since: float | None = None  # the worker waits for the controller's tunnel
    tunnel_detail: str | None = None  # what the worker says is down (untrusted text)
    max_pending: int | None = None  # [Cuzk] MaxPending its curio runs with
    curio_info: str | None = None  # JSON: its curio node as the cluster knows it
    paramfetch_timeout: int | None = None  # seconds the worker's parameter fetch was given
    # Interruptible (bid) rentals: vastui/engine/bidding.py.
    is_bid: bool = False
    bid_price: float | None = None  # $/h for the machine, what it pays while it runs
    bid_cap: float | None = None  # never bid above: the machine would lose to on-demand
    storage_dph: float | None = None  # what it bills while stopped
    outbid_since: float | None = None  # stopped by a higher bid since
    interruptions: int = 0  # times a higher bid stopped it
    stopped_s: float = 0.0  # seconds spent outbid (closed episodes)

    @property
    def stage(self) -> str | None:
        """The current stage; for killed rows, the stage the instance died in."""
        return self.failed_stage if self.state == "killed" else self.state

    @property
    def killed(self) -> bool:
        return self.state == "killed"

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> InstanceRecord:
        data = {k: row[k] for k in row.keys()}  # noqa: SIM118 - sqlite3.Row needs keys()
        data["error_lines"] = _json_list(data.get("error_lines"))
        data["is_bid"] = bool(data.get("is_bid"))
        return cls(**data)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.vast_id,
            "label": self.label,
            "machine_id": self.machine_id,
            "host_id": self.host_id,
            "gpu_name": self.gpu_name,
            "state": self.state,
            "stage": self.stage,
            "dph_total": self.dph_total,
            "bench_rate": self.bench_rate,
            "min_rate": self.min_rate,
            "prod_completed": self.prod_completed,
            "prod_failed": self.prod_failed,
            "prod_rate": self.prod_rate,
            "image": self.image,
            "kill_reason": self.kill_reason,
            "runner_id": self.runner_id,
            "max_pending": self.max_pending,
            "tunnel_down_since": iso_utc(self.tunnel_down_since),
            "bid_price": self.bid_price if self.is_bid else None,
            "interruptions": self.interruptions if self.is_bid else None,
            "outbid_since": iso_utc(self.outbid_since),
        }


@dataclass(frozen=True, slots=True)
class BadEntry:
    """A banned machine (table ``bad_machines``), keyed by Vast ``machine_id``."""

    machine_id: int
    reason: str
    source: str
    created_at: float
    updated_at: float
    host_id: int | None = None
    gpu_name: str | None = None
    expires_at: float | None = None
    bans: int = 1  # times the machine was banned (a repeat ban adds one), not its strikes
    evidence: tuple[str, ...] | None = None

    def active(self, now: float) -> bool:
        return self.expires_at is None or self.expires_at > now

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> BadEntry:
        return cls(
            machine_id=row["machine_id"],
            reason=row["reason"],
            source=row["source"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
            host_id=row["host_id"],
            gpu_name=row["gpu_name"],
            expires_at=row["expires_at"],
            bans=row["bans"],
            evidence=_json_list(row["evidence"]),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "machine_id": self.machine_id,
            "host_id": self.host_id,
            "gpu_name": self.gpu_name,
            "reason": self.reason,
            "source": self.source,
            "created_at": iso_utc(self.created_at),
            "expires_at": iso_utc(self.expires_at),
        }


@dataclass(frozen=True, slots=True)
class BanSpec:
    """A ban decided together with a destroy. It rides in the destroy intent's detail (key
    ``"ban_record"``) so that the kill, the ban and the intent's close are one transaction
    (:meth:`vastui.store.Store.complete_destroy`) and a crash in between loses nothing."""

    machine_id: int
    reason: str
    source: str = "automatic"
    host_id: int | None = None
    gpu_name: str | None = None
    expires_at: float | None = None  # None = forever
    evidence: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "machine_id": self.machine_id,
            "reason": self.reason,
            "source": self.source,
            "host_id": self.host_id,
            "gpu_name": self.gpu_name,
            "expires_at": self.expires_at,
            "evidence": list(self.evidence),
        }

    @classmethod
    def from_json(cls, data: object) -> BanSpec | None:
        """The ban an intent carries, or None when it carries none (or an unreadable one: the
        store validates it again before recording anything)."""
        if not isinstance(data, dict):
            return None
        machine_id, reason = data.get("machine_id"), data.get("reason")
        if isinstance(machine_id, bool) or not isinstance(machine_id, int):
            return None
        if not isinstance(reason, str):
            return None
        expires_at = data.get("expires_at")
        if expires_at is not None and (
            isinstance(expires_at, bool) or not isinstance(expires_at, int | float)
        ):
            return None  # not "forever" by accident
        host_id, gpu_name = data.get("host_id"), data.get("gpu_name")
        evidence = data.get("evidence")
        return cls(
            machine_id=machine_id,
            reason=reason,
            source=str(data.get("source") or "automatic"),
            host_id=host_id if isinstance(host_id, int) and not isinstance(host_id, bool) else None,
            gpu_name=gpu_name if isinstance(gpu_name, str) else None,
            expires_at=None if expires_at is None else float(expires_at),
            evidence=tuple(str(x) for x in evidence) if isinstance(evidence, list) else (),
        )


@dataclass(frozen=True, slots=True)
class LegacyReviewEntry:
    """A row from a pre-re-key legacy DB, keyed by an operator ACCOUNT id (``host_id``).

    ``host_id`` is NOT a machine id and must never be used as one; these rows are shown for
    an operator to review and are never enforced.
    """

    id: int
    kind: str  # 'bad_host' or 'perf'
    host_id: int
    gpu_name: str | None
    num_gpus: int | None
    bench_rate: float | None
    reason: str | None
    legacy_added_at: float | None
    imported_at: float
    source_path: str

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> LegacyReviewEntry:
        return cls(**{k: row[k] for k in row.keys()})  # noqa: SIM118

    def to_json(self) -> dict[str, Any]:
        return {
            "machine_id": None,
            "host_id": self.host_id,
            "gpu_name": self.gpu_name,
            "reason": self.reason,
            "source": "legacy-review",
            "created_at": iso_utc(self.legacy_added_at),
            "expires_at": None,
        }


@dataclass(frozen=True, slots=True)
class PerfRecord:
    """Benchmark history for one (machine, GPU model, GPU count) (table ``machine_perf``)."""

    machine_id: int
    gpu_name: str
    num_gpus: int
    best_rate: float
    last_rate: float
    samples: int
    measured_at: float
    cpu_ram_gb: float | None = None
    host_id: int | None = None

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> PerfRecord:
        return cls(**{k: row[k] for k in row.keys()})  # noqa: SIM118

    def to_json(self) -> dict[str, Any]:
        return {
            "machine_id": self.machine_id,
            "gpu_name": self.gpu_name,
            "num_gpus": self.num_gpus,
            "best_rate": self.best_rate,
            "last_rate": self.last_rate,
            "samples": self.samples,
            "cpu_ram_gb": self.cpu_ram_gb,
            "measured_at": iso_utc(self.measured_at),
        }


@dataclass(frozen=True, slots=True)
class Strike:
    """A mark against a machine (table ``strikes``): not a ban, until enough of them are."""

    id: int
    machine_id: int
    instance_id: int | None
    kind: str
    reason: str
    ts: float

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> Strike:
        return cls(**{k: row[k] for k in row.keys()})  # noqa: SIM118

    def to_json(self) -> dict[str, Any]:
        return {
            "machine_id": self.machine_id,
            "instance_id": self.instance_id,
            "kind": self.kind,
            "reason": self.reason,
            "ts": iso_utc(self.ts),
        }


@dataclass(frozen=True, slots=True)
class EngineStatus:
    """What the engine last said about its fleet (table ``engine_status``, one row).

    Written every reconcile cycle; ``updated_at`` is the engine's clock. ``reason_kind`` is one
    of ``vastui.engine.provision.REASON_KINDS`` (None while the engine is renting towards its
    target); ``reason_since`` is when the current reason kind began (kept while it lasts).
    """

    target: int
    workers: int  # live vastui instances + pending rents
    by_stage: dict[str, int]  # live vastui instances per stage
    reason_kind: str | None
    reason: str | None  # one line for the operator
    best: dict[str, Any] | None  # the best candidate offer, when it explains the reason
    dry_run: bool
    updated_at: float
    reason_since: float | None = None
    wall_at: float | None = None  # the wall clock when written (updated_at is the engine's)
    simulated: bool = False  # the engine's clock is a simulator's (the demo), not the wall

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> EngineStatus:
        by_stage = _json_obj(row["by_stage"]) or {}
        return cls(
            target=int(row["target"]),
            workers=int(row["workers"]),
            by_stage={str(k): int(v) for k, v in by_stage.items()},
            reason_kind=row["reason_kind"],
            reason=row["reason"],
            best=_json_obj(row["best"]),
            dry_run=bool(row["dry_run"]),
            updated_at=float(row["updated_at"]),
            reason_since=row["reason_since"],
            wall_at=row["wall_at"],
            simulated=bool(row["simulated"]),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "workers": self.workers,
            "by_stage": dict(self.by_stage),
            "reason_kind": self.reason_kind,
            "reason": self.reason,
            "best": self.best,
            "dry_run": self.dry_run,
            "updated_at": iso_utc(self.updated_at),
            "reason_since": iso_utc(self.reason_since),
            "simulated_clock": self.simulated,
        }


@dataclass(frozen=True, slots=True)
class Event:
    """One row of the append-only ``events`` log."""

    id: int
    ts: float
    kind: str
    reason: str
    instance_id: int | None = None
    machine_id: int | None = None
    detail: dict[str, Any] | None = None

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> Event:
        return cls(
            id=row["id"],
            ts=row["ts"],
            kind=row["kind"],
            reason=row["reason"],
            instance_id=row["instance_id"],
            machine_id=row["machine_id"],
            detail=_json_obj(row["detail"]),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "ts": iso_utc(self.ts),
            "kind": self.kind,
            "instance_id": self.instance_id,
            "machine_id": self.machine_id,
            "reason": self.reason,
        }
