"""Fixed demo data for snapshot tests and the screenshots (no engine, no network, no clock), and
`FixedSource`, the fleet source that serves it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import replace
from datetime import UTC
from pathlib import Path
from typing import Any

from vastsim import ManualClock, SimCloud
from vastui.backend import Options
from vastui.config import DEFAULT_IMAGE, Config
from vastui.console.app import VastuiApp
from vastui.console.snapshot import Snapshot
from vastui.console.sources import Badge, Freshness
from vastui.console.sources.workers import ssh_command
from vastui.domain.engine_state import EngineStatus
from vastui.domain.journal import Event
from vastui.domain.machines import BadEntry, LegacyReviewEntry, PerfRecord
from vastui.domain.worker import ForeignInstance, InstanceRecord
from vastui.engine import delivery
from vastui.engine.bidding import RiskModel
from vastui.engine.ranking import RankedOffer, rank_offers
from vastui.engine.spend import fleet_spend, local_midnight
from vastui.pricing import min_rate
from vastui.vast.models import Offer

T0 = 1_790_000_000.0
GIB = 1024**3
# A proving daemon's GET /status (cuzk-core/src/status.rs), two proofs in flight.
CUZK_STATUS: dict[str, Any] = {
    "uptime_secs": 5400.2,
    "memory": {"total_bytes": 233 * GIB, "used_bytes": 209 * GIB, "available_bytes": 24 * GIB},
    "synthesis": {"max_concurrent": 25, "active": 10},
    "pipelines": [
        {"job_id": "ps-porep-48211-1187-1204", "proof_kind": "porep-c2", "started_secs_ago": 95.0,
         "total_partitions": 10, "partitions_done": 6,
         "partitions": [{"index": i, "synth_ms": 13100, "gpu_ms": 8800 if i < 6 else None,
                         "state": "done" if i < 6 else "gpu" if i == 6 else "synth_done"}
                        for i in range(10)]},
        {"job_id": "ps-porep-77030-402-1205", "proof_kind": "porep-c2", "started_secs_ago": 40.0,
         "total_partitions": 10, "partitions_done": 0,
         "partitions": [{"index": i, "state": "synthesizing", "synth_ms": None, "gpu_ms": None}
                        for i in range(10)]},
    ],
    "gpu_workers": [
        {"worker_id": 0, "gpu_ordinal": 0, "state": "proving",
         "current_job": "ps-porep-48211-1187-1204", "current_partition": 6, "busy_secs": 4711.0},
        {"worker_id": 1, "gpu_ordinal": 0, "state": "idle", "current_job": None,
         "current_partition": None, "busy_secs": 0.0},
    ],
    "allocations": {"srs": [], "pce": []},
    "counters": {"total_completed": 76, "total_failed": 0, "completed_by_kind": {},
                 "failed_by_kind": {}, "queue_depth": 0},
    "buffers": {"synth_in_flight": 10, "provers_in_flight": 1, "aux_in_flight": 0,
                "shells_in_flight": 0, "pending_handles": 0},
}  # fmt: skip


LogStream = Callable[[InstanceRecord, str], AsyncIterator[list[str]]]
KEY_PATH = Path("/home/operator/.local/state/vastui/id_ed25519")


class FixedSource:
    """A `FleetSource` of fixed data: no engine, no network, no clock. Commands are recorded
    (`submitted`) and reported done; `clock_at` is the fleet's time; `stream` replaces the
    fixed log lines with a stream of a test's own."""

    def __init__(
        self,
        opts: Options,
        snapshot: Snapshot,
        offers: list[RankedOffer],
        logs: Iterable[tuple[str, str]] = (),
        *,
        stream: LogStream | None = None,
    ) -> None:
        self.opts = opts
        self.fixed_snapshot = snapshot
        self.fixed_offers = offers
        self.logs = list(logs)
        self.stream = stream
        self.clock_at = T0
        self.submitted: list[tuple[str, dict[str, Any]]] = []
        self._filter: str | None = None

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    def badge(self) -> Badge | None:
        return None  # as the console's own engine shows

    def started_notice(self) -> tuple[str, str] | None:
        return None

    @property
    def detached_reason(self) -> str | None:
        return None

    def freshness(self, snapshot: Snapshot) -> Freshness | None:
        return Freshness("vast", 12.0, 120.0)

    async def snapshot(self) -> Snapshot:
        return self.fixed_snapshot

    async def offers(self, force: bool = False) -> list[RankedOffer]:
        return self.fixed_offers

    @property
    def view_filter(self) -> str:
        return self._filter or self.opts.config.offers.filter

    def set_filter(self, text: str) -> None:
        self._filter = text

    def now(self) -> float:
        return self.clock_at

    def ssh_command(self, rec: InstanceRecord) -> str | None:
        return ssh_command(KEY_PATH, rec)

    async def cuzk_status(self, rec: InstanceRecord) -> dict[str, Any]:
        return CUZK_STATUS

    def stream_logs(
        self, rec: InstanceRecord, source: str, tail: int = 500
    ) -> AsyncIterator[list[str]]:
        if self.stream is not None:
            return self.stream(rec, source)
        return self._fixed_logs(source)

    async def _fixed_logs(self, source: str) -> AsyncIterator[list[str]]:
        lines = [text for src, text in self.logs if src == source]
        if lines:
            yield lines

    def new_engine_log_lines(self) -> list[str]:
        return []

    def rewind_engine_log(self) -> None:
        return None

    async def submit(self, kind: str, **args: Any) -> int:
        self.submitted.append((kind, args))
        return len(self.submitted)

    async def wait_command(self, command_id: int, timeout: float = 60.0) -> tuple[bool, str]:
        return True, "done (fixed data: nothing was carried out)"

    def wake(self) -> None:
        return None

    def own_live_instances(self, snapshot: Snapshot) -> list[InstanceRecord]:
        return []

    def can_hand_over(self) -> bool:
        return False


def fixed_data() -> tuple[Snapshot, list[RankedOffer]]:
    cloud = SimCloud(seed=3, clock=ManualClock(), hosts=30)
    offers = [Offer.from_api(cloud.offers[i]) for i in sorted(cloud.offers)][:60]
    m = offers
    perf = [
        PerfRecord(m[0].machine_id, m[0].gpu_name, m[0].num_gpus, 95.6, 95.2, 2, T0, 515.9),
        PerfRecord(m[3].machine_id, m[3].gpu_name, m[3].num_gpus, 141.0, 141.0, 1, T0, 257.9),
    ]
    bad = [
        BadEntry(machine_id=m[5].machine_id, reason="benchmark error in warmup: CUDA error 700",
                 source="automatic", host_id=m[5].host_id, gpu_name=m[5].gpu_name,
                 created_at=T0, updated_at=T0, expires_at=T0 + 30 * 86400, bans=2),
        BadEntry(machine_id=m[6].machine_id, reason="Not good enough (RTX 3090, Poland, PL)",
                 source="manual", host_id=m[6].host_id, gpu_name=m[6].gpu_name,
                 created_at=T0 - 3600, updated_at=T0 - 3600),
    ]  # fmt: skip
    legacy = [
        LegacyReviewEntry(id=1, kind="bad_host", host_id=187302, gpu_name=None, num_gpus=None,
                          bench_rate=None, reason="slow host",
                          legacy_added_at=T0 - 86400 * 90, imported_at=T0, source_path="x.db"),
    ]  # fmt: skip
    # With bids on, as an operator who rents interruptible GPUs sees it: each offer's bid beside.
    bidding = replace(Config(), bids=replace(Config().bids, mode="auto"))
    ranked = rank_offers(
        offers, perf, {b.machine_id: b.reason for b in bad}, 0.008,
        (bidding, RiskModel([], bidding)),
    )  # fmt: skip

    def inst(vid: int, o: Offer, state: str, **kw: Any) -> InstanceRecord:
        kw.setdefault("image", DEFAULT_IMAGE)
        return InstanceRecord(
            vast_id=vid, label=f"vastui-main-{vid:012x}", offer_id=o.id, machine_id=o.machine_id,
            host_id=o.host_id, gpu_name=o.gpu_name, num_gpus=o.num_gpus, dph_total=o.dph_total,
            cpu_ram_gb=o.cpu_ram_gb, geolocation=o.geolocation,
            state=state, created_at=T0 - 3000,
            stage_started_at=T0 - 600, last_seen_at=T0, ssh_host="127.0.0.1", ssh_port=40022,
            min_rate=min_rate(o.dph_total, 0.008), **kw,
        )  # fmt: skip

    what = (
        "  what():  cudaStreamSynchronize(stream)@sppark-0.1.14/sppark/util/gpu_t.cuh:158 "
        'failed: "an illegal memory access was encountered"'
    )
    instances = [
        inst(3000001, m[0], "proving", bench_rate=95.2, bench_outcome="pass", bench_failed=0,
             prod_completed=63, prod_failed=0, prod_rate=93.8, prod_checked_at=T0 - 30,
             runner_id=1, max_pending=10, curio_info=json.dumps(
                 {"machine_id": 4, "host_and_port": "127.0.0.1:12401",
                  "name": "vastui-main-r1", "listen": "127.0.0.1:12401", "max_pending": 10,
                  "layer": "vastui-cuzk", "tasks": "PSAutoSettle,PShareSubmit,PSProve"}),
             # curio's count: three of the proofs cuzk finished failed in curio (a Snap proof
             # that does not verify); a lowered target drains it
             cluster_state=json.dumps(
                 {"machine_id": 4, "host_and_port": "127.0.0.1:12401", "last_contact": T0 - 20,
                  "cordoned": True, "held": 3, "held_by_name": {"PSProve": 2,
                  "bg:PShareRequest": 1}, "done": 11, "failed": 1, "done_total": 60,
                  "failed_total": 3, "last_error": "error: failed to compute proof: proof check "
                  "failed: invalid UpdateProof", "last_error_at": T0 - 300, "foreign": None}),
             cluster_checked_at=T0 - 5, drain_started_at=T0 - 240, drain_deadline=T0 + 960),
        inst(3000006, m[4], "proving", bench_rate=88.4, bench_outcome="pass", bench_failed=1,
             runner_id=6, max_pending=6, tunnel_down_since=T0 - 420,
             tunnel_detail="lotus api 127.0.0.1:1234: curl: (7) Failed to connect to 127.0.0.1 "
                           "port 1234: Connection refused",
             # its tunnel down: no heartbeat since, the proof it holds waits
             cluster_state=json.dumps(
                 {"machine_id": 9, "host_and_port": "127.0.0.1:12406", "last_contact": T0 - 415,
                  "cordoned": False, "held": 1, "held_by_name": {"PSProve": 1}, "done": 6,
                  "failed": 0, "done_total": 31, "failed_total": 0, "last_error": None}),
             cluster_checked_at=T0 - 5),
        inst(3000002, m[1], "benchmark", runner_id=2),
        # An interruptible worker a higher bid has stopped for 12 minutes, its second time.
        inst(3000007, m[8], "proving", bench_rate=61.0, bench_outcome="pass", bench_failed=0,
             prod_completed=40, prod_failed=0, prod_rate=60.2, runner_id=7, max_pending=10,
             is_bid=True, bid_price=round(m[8].dph_total * 0.55, 4), bid_cap=m[8].dph_total,
             storage_dph=0.02, outbid_since=T0 - 720, interruptions=2, stopped_s=1500.0,
             # stopped by Vast with its curio: its tasks released, its row kept for its resume
             cluster_state=json.dumps(
                 {"machine_id": 7, "host_and_port": "127.0.0.1:12407", "last_contact": T0 - 725,
                  "cordoned": False, "held": 0, "held_by_name": {}, "done": 3, "failed": 0,
                  "done_total": 40, "failed_total": 0, "last_error": None}),
             cluster_checked_at=T0 - 5),
        inst(3000003, m[2], "paramfetch", image="ghcr.io/vastui/curio-cuzk-worker:v0.9",
             runner_id=3),
        inst(3000004, m[3], "killed", bench_rate=141.0, bench_outcome="below_min",
             failed_stage="benchmark", kill_kind="bench_below_min",
             kill_reason="benchmark below_min: 141.0 < 1222.0 proofs/h", killed_at=T0 - 100,
             bench_result=json.dumps({"outcome": "below_min", "stage": "done",
                                      "rate_per_hour": 141.0, "proofs_completed": 12,
                                      "proofs_failed": 0, "exit_code": 10})),
        inst(3000005, m[5], "killed", bench_outcome="error", failed_stage="benchmark",
             kill_kind="bench_error", killed_at=T0 - 50,
             kill_reason=f"benchmark error in timed_run: {what.strip()}",
             error_lines=("terminate called after throwing an instance of 'sppark_error'", what,
                          "cuzk-daemon was killed by SIGABRT (exit status 134) \x1b[31m[red]"),
             bench_result=json.dumps({"outcome": "error", "stage": "timed_run",
                                      "rate_per_hour": 38.1, "proofs_completed": 3,
                                      "proofs_failed": 0, "exit_code": 12})),
    ]  # fmt: skip
    events = [
        Event(id=1, ts=T0 - 3000, kind="rent", instance_id=3000001, machine_id=m[0].machine_id,
              reason="rented", detail={}),
    ]  # fmt: skip
    status = EngineStatus(
        target=5, workers=5, by_stage={"proving": 3, "benchmark": 1, "paramfetch": 1},
        reason_kind="fleet_dph_cap",
        reason=f"fleet $/h cap: $4.000/h in use + ${m[7].dph_total:.3f}/h for offer {m[7].id} "
               "> max $4.00/h",
        best={"offer_id": m[7].id}, dry_run=False, updated_at=T0, reason_since=T0 - 600,
        credit=87.2, daily_budget=40.0, dph=4.0, dph_cap=4.0,
        cluster={"state": "ok", "address": "127.0.0.1:5433", "psprove_waiting": 3,
                 "psprove_claimed": 14, "window_s": 3600, "read_at": T0 - 5, "machines": 12,
                 "request_owner": 2, "request_owner_addr": "10.0.0.5:12300", "request_task": True,
                 "taken": 52, "computed": 47, "submitted": 45, "challenges": 4, "paid": 41,
                 "cluster_done": 47, "cluster_failed": 2, "paid_recent": 41,
                 "draining": 1,
                 # rows of this fleet's name no record matches: releases never done
                 "orphans": [
                     {"machine_id": 3, "host_and_port": "127.0.0.1:12412",
                      "name": "vastui-main-r12", "last_contact": T0 - 540, "cordoned": False},
                     {"machine_id": 11, "host_and_port": "127.0.0.1:12415",
                      "name": "vastui-main-r15", "last_contact": T0 - 95, "cordoned": True},
                 ],
                 "orphans_total": 2},
        delivery=delivery.compute(instances, T0, 3600.0, delivery.ClusterCount(
            fleet_done=47, cluster_done=47, paid=41, challenges=4)),
    )  # fmt: skip
    # Another controller on the same account (a staging console with its own database).
    foreign = [ForeignInstance(vast_id=3180077, label="vastui-main.5e1f0a2c-9b7d31c4e8a0",
                               owner="main.5e1f0a2c", machine_id=m[9].machine_id,
                               gpu_name=m[9].gpu_name, num_gpus=1, dph_total=0.342,
                               vast_status="running", first_seen_at=T0 - 5400,
                               last_seen_at=T0)]  # fmt: skip
    snap = Snapshot(instances=instances, foreign=foreign, bad=bad, legacy=legacy, perf=perf,
                    events=events, taken_at=T0, engine_status=status,
                    spend=fleet_spend(instances, T0, local_midnight(T0, UTC)))  # fmt: skip
    return snap, ranked


def fixed_app(tmp_path: Path, logs: Iterable[tuple[str, str]] = ()) -> VastuiApp:
    snap, ranked = fixed_data()
    config = Config()
    config = replace(config, ui=replace(config.ui, theme="vastui-night"))
    opts = Options(config=config, db=tmp_path / "f.db", demo=True)
    return VastuiApp(opts, FixedSource(opts, snap, ranked, logs))


LOGS = [
    ("cuzk", "2026-03-13T17:17:02.321000Z  INFO cuzk_daemon: cuzk-daemon ready, serving on "
             "127.0.0.1:9820"),
    ("benchmark", "[bench] warmup proof (SRS load, PCE extraction)"),
    ("cuzk", "2026-03-13T17:19:40.100000Z ERROR gpu_worker{worker_id=0 gpu=0}: cuzk_core::engine: "
             "GPU prove start task panicked error=task 18 panicked with message \"cudaMalloc("
             "&cache.ptr, sz_bytes)@cuda/groth16_cuda.cu:182 failed: \\\"out of memory\\\"\""),
    ("benchmark", "[bench] proof 3/12: COMPLETED in 276.435 s"),
]  # fmt: skip
