"""What the console shows of the fleet, read in one go by its source (console/sources/), and
what the strip computes from it: the fleet's cost and proof rate."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from vastui.cluster_report import published, render_totals
from vastui.domain.engine_state import EngineStatus, Lease
from vastui.domain.journal import Event
from vastui.domain.machines import BadEntry, LegacyReviewEntry, PerfRecord
from vastui.domain.worker import ForeignInstance, InstanceRecord
from vastui.engine.spend import Spend, proving_cost


@dataclass
class Snapshot:
    """Everything the panes show, read in one go."""

    instances: list[InstanceRecord] = field(default_factory=list)
    # Instances with vastui's label that this database never intended: another controller's.
    foreign: list[ForeignInstance] = field(default_factory=list)
    bad: list[BadEntry] = field(default_factory=list)
    legacy: list[LegacyReviewEntry] = field(default_factory=list)
    perf: list[PerfRecord] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    lease: Lease | None = None
    taken_at: float = 0.0
    engine_status: EngineStatus | None = None
    spend: Spend | None = None  # the fleet's, on the fleet's clock at `taken_at`

    def counts(self) -> dict[str, int]:
        live = [r for r in self.instances if not r.killed]
        return {
            "running": sum(r.state == "proving" for r in live),
            "benchmarking": sum(r.state == "benchmark" for r in live),
            "fetching": sum(r.state in ("setup", "paramfetch") for r in live),
            "loading": sum(r.state == "loading" for r in live),
            "killed": sum(r.killed for r in self.instances),
        }

    @cached_property
    def cluster(self) -> dict[str, Any]:
        """curio's cluster as the engine last read and published it (in any mode: each
        worker's reading in its record, the totals and the orphans in its status), the report
        `vastui cluster` prints (vastui/cluster_report.py ``published``), ages at `taken_at`."""
        status = self.engine_status
        return published(self.instances, status.cluster if status else None, self.taken_at)

    @property
    def cluster_totals(self) -> str | None:
        """The cluster's totals in `vastui cluster`'s two lines (None: nothing read yet)."""
        report = self.cluster
        return render_totals(report) if report["totals"] else None

    def fleet_economics(self) -> FleetEconomics:
        """What the fleet costs and proves: measured where cuzk's counters say so, estimated
        (from the benchmarks) where they do not yet."""
        live = [r for r in self.instances if not r.killed]
        proving = [r for r in live if r.state == "proving"]
        cost = proving_cost(live)  # the one $/proof (vastui/engine/spend.py)
        est = sum(r.bench_rate or 0.0 for r in proving)
        proving_dph = sum(r.dph_total or 0.0 for r in proving)
        return FleetEconomics(
            dph=sum(r.dph_total or 0.0 for r in live),
            measured_rate=cost.rate,
            measured_cpp=cost.per_proof,
            measured_workers=cost.measured,
            proving_workers=cost.proving,
            est_rate=est,
            est_cpp=proving_dph / est if est > 0 else None,
            proofs=sum(r.prod_completed or 0 for r in live),
            failed=sum(r.prod_failed or 0 for r in live),
        )


@dataclass(frozen=True)
class FleetEconomics:
    dph: float  # $/h of every live instance
    measured_rate: float | None  # proofs/h measured on proving workers (None: none measured)
    measured_cpp: float | None  # $/proof of those workers, measured
    measured_workers: int
    proving_workers: int
    est_rate: float  # proofs/h the benchmarks promise for every proving worker
    est_cpp: float | None
    proofs: int  # proofs completed in production by live workers
    failed: int
