"""Machines as the fleet remembers them, keyed by Vast's ``machine_id`` (the physical machine,
never the operator's ``host_id``): the bad list, the strikes that may lead to it, the legacy rows
set aside for review, and each machine's measured rates."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .timefmt import iso_utc

# Sources of a bad-machine entry, strongest first: an import never downgrades a stronger source.
BAD_SOURCES: tuple[str, ...] = ("manual", "automatic", "legacy")
# The longest reason an operator may give a ban (the console's prompt, `vastui bad add`): a
# sentence or two; the engine's own reasons are cut at 300 where they are decided.
REASON_MAX_CHARS = 500


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
class Strike:
    """A mark against a machine (table ``strikes``): not a ban, until enough of them are."""

    id: int
    machine_id: int
    instance_id: int | None
    kind: str
    reason: str
    ts: float

    def to_json(self) -> dict[str, Any]:
        return {
            "machine_id": self.machine_id,
            "instance_id": self.instance_id,
            "kind": self.kind,
            "reason": self.reason,
            "ts": iso_utc(self.ts),
        }


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
    # last_rate is an aborted benchmark's pace over the proofs it finished (policy.
    # bench_partial_record), not a finished run's (migration 15)
    last_partial: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "machine_id": self.machine_id,
            "gpu_name": self.gpu_name,
            "num_gpus": self.num_gpus,
            "best_rate": self.best_rate,
            "last_rate": self.last_rate,
            "last_partial": self.last_partial,
            "samples": self.samples,
            "cpu_ram_gb": self.cpu_ram_gb,
            "measured_at": iso_utc(self.measured_at),
        }
