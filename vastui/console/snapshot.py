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
from vastui.engine.spend import Spend


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
    # the fleet is history, and why (a finished demo run: its cloud ended with it): what the
    # records say live is what its engine last saw, not what runs now
    history: str | None = None

    def counts(self) -> dict[str, int]:
        """Live workers by what they do now (``InstanceRecord.phase``): a stopped worker (the
        warm pool, an outbid bid) is counted as stopped, never as proving."""
        live = [r for r in self.instances if not r.killed]
        return {
            "running": sum(r.phase == "proving" for r in live),
            "benchmarking": sum(r.phase == "benchmark" for r in live),
            "fetching": sum(r.phase in ("setup", "paramfetch") for r in live),
            "loading": sum(r.phase == "loading" for r in live),
            "pooled": sum(r.phase == "pooled" for r in live),
            "outbid": sum(r.phase == "outbid" for r in live),
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
