"""A rented worker as the fleet knows it: its record (one row of the store's ``instances``), the
instances of other controllers seen on the account, a machine's record as a bid, and the SSH host
key pinned for a worker. Plain values: the store maps them to rows, everything above reads them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any, TypedDict

from .timefmt import iso_utc


@dataclass(frozen=True, slots=True)
class InstanceRecord:
    """One rented Vast instance (table ``instances``).

    All timestamps are REAL epoch seconds (UTC); ``to_json()`` renders them as ISO-8601 UTC and
    produces the exact key set the CLI's ``--json`` output and the console rely on.
    """

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
    # curio's cluster (migration 12): the last reading of this worker there (JSON), a drain
    # (cordoned before a planned destroy) and the release of its tasks once destroyed.
    cluster_state: str | None = None
    cluster_checked_at: float | None = None
    drain_started_at: float | None = None  # cordoned at
    drain_deadline: float | None = None  # destroyed by then, whatever it holds
    released_at: float | None = None  # its tasks freed in the cluster (destroyed, or outbid)
    released_tasks: int | None = None  # how many, the last time
    # Every cost counted (migration 14): vastui/engine/spend.py.
    running_at: float | None = None  # Vast bills storage before, the GPU from then on
    inet_down: float | None = None  # the offer's download link, Mbit/s
    inet_down_cost: float | None = None  # $/GB
    inet_up_cost: float | None = None  # $/GB
    # The warm pool (vastui/engine/pool.py): stopped on purpose since (None: not pooled), its
    # start asked at (Vast queued it: resources_unavailable), seconds pooled (closed episodes).
    pooled_since: float | None = None
    pool_start_at: float | None = None
    pooled_s: float = 0.0
    # curio's count of its requests and proofs before its last restart (spend.cluster_work)
    requests_carried: int = 0
    proofs_carried: int = 0
    # its latest closed stops, exactly (JSON [[from, to], ...], at most STOPS_KEPT): what
    # stopped_s sums, kept so that a window's cost does not change when an episode closes
    # (migration 15; older episodes are spread over the rental: vastui/engine/spend.py)
    stops: str | None = None
    # the parameters' first fetch: its start and its end (the benchmark, or proving, began);
    # later passes through the stages (a start from the warm pool) fetch nothing again
    params_from: float | None = None
    params_to: float | None = None

    @property
    def stopped_since(self) -> float | None:
        """Stopped (by a higher bid, or into the warm pool) since: nothing to read or judge."""
        return self.outbid_since if self.outbid_since is not None else self.pooled_since

    @property
    def phase(self) -> str:
        """What it is doing now (``stages.PHASES``): its state, or ``pooled``/``outbid`` while
        stopped (its stored state is the stage it was in; it bills only its disk)."""
        if self.state in ("killed", "legacy"):
            return self.state
        if self.pooled_since is not None:
            return "pooled"
        if self.outbid_since is not None:
            return "outbid"
        return self.state

    @property
    def stage(self) -> str | None:
        """The current stage; for killed rows, the stage the instance died in."""
        return self.failed_stage if self.state == "killed" else self.state

    @property
    def killed(self) -> bool:
        return self.state == "killed"

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.vast_id,
            "label": self.label,
            "machine_id": self.machine_id,
            "host_id": self.host_id,
            "gpu_name": self.gpu_name,
            "state": self.state,
            "phase": self.phase,
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
            "drain_started_at": iso_utc(self.drain_started_at),
            "drain_deadline": iso_utc(self.drain_deadline),
            "released_tasks": self.released_tasks,
        }


class Progress(TypedDict, total=False):
    """What a worker's life changes on its record piecemeal, checked by the type checker (a
    misspelt field fails ``make test``, not the engine); a stage move and a kill go their own
    ways (``set_stage``, ``mark_killed``)."""

    events_seen: int
    bench_result: str | None
    vast_status: str | None
    status_msg: str | None
    last_seen_at: float | None
    unhealthy_since: float | None
    first_report_at: float | None
    image_digest: str | None
    ssh_host: str | None
    ssh_port: int | None
    bench_rate: float | None
    bench_outcome: str | None
    min_rate: float | None
    label: str | None
    dph_total: float | None
    bench_failed: int | None
    prod_completed: int | None
    prod_failed: int | None
    prod_rate: float | None
    prod_checked_at: float | None
    prod_state: str | None
    tunnel_down_since: float | None
    tunnel_detail: str | None
    max_pending: int | None
    curio_info: str | None
    runner_id: int | None
    bid_price: float | None
    bid_cap: float | None
    outbid_since: float | None
    interruptions: int
    stopped_s: float
    storage_dph: float | None
    cluster_state: str | None
    cluster_checked_at: float | None
    running_at: float | None
    pooled_since: float | None
    pool_start_at: float | None
    pooled_s: float
    requests_carried: int
    proofs_carried: int
    stops: str | None
    drain_started_at: float | None
    drain_deadline: float | None


@dataclass(frozen=True, slots=True)
class ForeignInstance:
    """An instance with vastui's label that this database never intended, as last listed."""

    vast_id: int
    label: str
    owner: str  # the fleet its label names: "<fleet>.<fleet id>", or "<fleet>" (older label)
    machine_id: int | None = None
    gpu_name: str | None = None
    num_gpus: int | None = None
    dph_total: float | None = None
    vast_status: str | None = None
    first_seen_at: float = 0.0
    last_seen_at: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class HostKeyRecord:
    """An SSH host key pinned (trust on first use) for one Vast instance."""

    instance_id: int
    host: str
    port: int
    public_key: str  # OpenSSH one-line form: "<type> <base64>" (no comment)
    fingerprint: str  # e.g. "SHA256:..."
    pinned_at: float


@dataclass(frozen=True, slots=True)
class BidHistory:
    """A machine's record as a bid: how often it was outbid, the hours it ran and the hours it
    was stopped."""

    machine_id: int
    gpu_name: str
    interruptions: int
    running_h: float
    stopped_h: float


def bid_history(records: Iterable[InstanceRecord], now: float) -> list[BidHistory]:
    """Each machine's record as a bid, summed over its bid rentals (the store's view and the
    economics bench's alike).

    Running time: from its setup (or create) to its end (or ``now``), less the time stopped, the
    open episode included."""
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
