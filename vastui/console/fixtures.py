"""Fixed demo data for snapshot tests and the screenshots: no engine, no network, no clock."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

from vastui.backend import Options
from vastui.config import Config
from vastui.console.app import VastuiApp
from vastui.console.bridge import FleetBridge, Snapshot
from vastui.engine.ranking import RankedOffer, rank_offers
from vastui.sim import ManualClock, SimCloud
from vastui.store import BadEntry, Event, InstanceRecord, LegacyReviewEntry, PerfRecord
from vastui.vast.models import Offer

T0 = 1_790_000_000.0


class FixedBridge(FleetBridge):
    """Fixed data: no engine, no network, no clock."""

    def __init__(
        self,
        opts: Options,
        snapshot: Snapshot,
        offers: list[RankedOffer],
        logs: Iterable[tuple[str, str]] = (),
    ) -> None:
        super().__init__(opts)
        self._snap = snapshot
        self._fixed_offers = offers
        self._logs = list(logs)
        self.mode = "engine"

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def snapshot(self) -> Snapshot:
        return self._snap

    async def offers(self, force: bool = False) -> list[RankedOffer]:
        return self._fixed_offers

    @property
    def vast_age(self) -> float | None:
        return 12.0

    async def stream_logs(  # type: ignore[override]
        self, rec: InstanceRecord, source: str, tail: int = 500
    ) -> AsyncIterator[list[str]]:
        lines = [text for src, text in self._logs if src == source]
        if lines:
            yield lines


def fixed_data() -> tuple[Snapshot, list[RankedOffer]]:
    cloud = SimCloud(seed=3, clock=ManualClock(), hosts=30)
    offers = [Offer.from_api(cloud.offers[i]) for i in sorted(cloud.offers)][:60]
    m = offers
    perf = [
        PerfRecord(m[0].machine_id, m[0].gpu_name, m[0].num_gpus, 41.2, 40.8, 2, T0, 515.9),
        PerfRecord(m[3].machine_id, m[3].gpu_name, m[3].num_gpus, 18.0, 17.5, 1, T0, 257.9),
    ]
    bad = [
        BadEntry(machine_id=m[5].machine_id, reason="benchmark error in warmup: CUDA error 700",
                 source="automatic", host_id=m[5].host_id, gpu_name=m[5].gpu_name,
                 created_at=T0, updated_at=T0, expires_at=T0 + 30 * 86400, strikes=2),
        BadEntry(machine_id=m[6].machine_id, reason="Not good enough (RTX 3090, Poland, PL)",
                 source="manual", host_id=m[6].host_id, gpu_name=m[6].gpu_name,
                 created_at=T0 - 3600, updated_at=T0 - 3600),
    ]  # fmt: skip
    legacy = [
        LegacyReviewEntry(id=1, kind="bad_host", host_id=187302, gpu_name=None, num_gpus=None,
                          bench_rate=None, reason="slow host",
                          legacy_added_at=T0 - 86400 * 90, imported_at=T0, source_path="x.db"),
    ]  # fmt: skip
    ranked = rank_offers(offers, perf, {b.machine_id: b.reason for b in bad}, 0.008)

    def inst(vid: int, o: Offer, state: str, **kw: Any) -> InstanceRecord:
        kw.setdefault("image", "ghcr.io/vastui/curio-cuzk-worker:latest")
        return InstanceRecord(
            vast_id=vid, label=f"vastui-main-{vid:012x}", offer_id=o.id, machine_id=o.machine_id,
            host_id=o.host_id, gpu_name=o.gpu_name, num_gpus=o.num_gpus, dph_total=o.dph_total,
            cpu_ram_gb=o.cpu_ram_gb, geolocation=o.geolocation,
            state=state, created_at=T0 - 3000,
            stage_started_at=T0 - 600, last_seen_at=T0, ssh_host="127.0.0.1", ssh_port=40022,
            min_rate=float(int(o.dph_total / 0.008) + 1), **kw,
        )  # fmt: skip

    instances = [
        inst(3000001, m[0], "proving", bench_rate=40.8, bench_outcome="pass"),
        inst(3000002, m[1], "benchmark"),
        inst(3000003, m[2], "paramfetch", image="ghcr.io/vastui/curio-cuzk-worker:v0.9"),
        inst(3000004, m[3], "killed", bench_rate=17.5, bench_outcome="below_min",
             failed_stage="benchmark", kill_kind="bench_below_min",
             kill_reason="benchmark below_min: 17.5 < 29.0 proofs/h", killed_at=T0 - 100,
             bench_result=json.dumps({"outcome": "below_min", "stage": "done",
                                      "rate_per_hour": 17.5, "proofs_completed": 12,
                                      "proofs_failed": 0, "exit_code": 10})),
        inst(3000005, m[5], "killed", bench_outcome="error", failed_stage="benchmark",
             kill_kind="bench_error", killed_at=T0 - 50,
             kill_reason="benchmark error in warmup: CUDA error 700: illegal memory access",
             error_lines=("thread 'gpu-worker-0' panicked at cuzk-core/src/engine.rs:812:17",
                          "CUDA error 700: illegal memory access was encountered \x1b[31m[red]")),
    ]  # fmt: skip
    events = [
        Event(id=1, ts=T0 - 3000, kind="rent", instance_id=3000001, machine_id=m[0].machine_id,
              reason="rented", detail={}),
    ]  # fmt: skip
    snap = Snapshot(instances=instances, bad=bad, legacy=legacy, perf=perf, events=events,
                    taken_at=T0)  # fmt: skip
    return snap, ranked


def fixed_app(tmp_path: Path, logs: Iterable[tuple[str, str]] = ()) -> VastuiApp:
    snap, ranked = fixed_data()
    config = Config()
    config = replace(config, ui=replace(config.ui, theme="vastui-night"))
    opts = Options(config=config, db=tmp_path / "f.db", demo=True)
    return VastuiApp(opts, bridge=FixedBridge(opts, snap, ranked, logs))


LOGS = [
    ("cuzk", "2026-03-13T17:17:02.321000Z  INFO cuzk_daemon: cuzk-daemon ready, on 0.0.0.0:9820"),
    ("benchmark", "[bench] warmup proof 1/1"),
    ("cuzk", "2026-03-13T17:19:40.100000Z ERROR cuzk_core::engine: CUDA error 2: out of memory"),
    ("benchmark", "  [1/12] COMPLETED — 118.3s (prove=41230 ms, queue=2 ms)"),
]  # fmt: skip
