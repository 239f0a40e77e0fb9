"""What a worker must hold, and how many proofs it may keep in flight (pure).

The numbers are the worker's (worker-image/vastui-lib.sh ``cuzk_plan`` and ``deadline_size``,
which decide on the worker; tests/test_worker_plan.py keeps the two equal). The engine uses them
to skip offers that cannot hold the plan and to check what a worker reports.

Memory, in GiB (extern/cuzk/cuzk-core/src): a proofshare provider proves PoRep C2 and
SnapDeals alike (tasks/proofshare/task_prove.go:271-289; an ask carries only a price,
lib/proofsvc/provictl.go:78-90), so both circuits' SRS (the .params file the budget reserves,
srs_manager.rs:181-190) and PCE stay resident, with room for a PCE being built (memory.rs:57)
and two PoRep partitions in synthesis (memory.rs:39).

curio's deadline: ``[Cuzk] ProveTimeout`` (30 min) runs from the Prove call, the daemon's queue
included (lib/cuzk/client.go:116-122), with up to ``MaxPending`` calls in flight
(client.go:46-62). At rate R a proof waits MaxPending / R in steady state (Little's law) and up to
(MaxPending - 1) / R + S when they arrive together (S: a proof's own service time). A call past
the deadline is retried while the daemon proves on (no CancelProof:
extern/cuzk/cuzk-server/src/service.rs:173-183).

Why size MaxPending rather than reject: a machine too slow for 10 proofs in 30 min (under
~20 proofs/h) may still pay at its price (a $0.10/h machine needs 13 proofs/h at $0.008/proof),
and with fewer proofs in flight it keeps its rate as long as they cover R x S, the pipeline's
depth. The benchmark measures R and S at production concurrency (its ten proofs submitted at
once: S is the quickest); the worker runs with the largest MaxPending whose worst wait fits
ProveTimeout / (1 + margin), and the verdict holds the rate it can keep there, at most
MaxPending / S, against min_rate. Only a machine whose single proof outlasts the deadline fits
no MaxPending at all.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

POREP_SRS_GIB = 45  # PoRep 32G .params, ~44.7 GiB
POREP_PCE_GIB = 26  # 25.7 GiB (cuzk-project.md)
SNAP_SRS_GIB = 33  # SnapDeals 32G "33 GiB file" (srs_manager.rs:88-91)
SNAP_PCE_GIB = 17
PCE_BUILD_GIB = 14  # PCE_EXTRACTION_TRANSIENT_BYTES (memory.rs:57)
PARTITION_GIB = 14  # POREP_PARTITION_FULL_BYTES (memory.rs:39)
MIN_PARTITIONS = 2
PARAMS_DISK_GIB = 135  # every 32 GiB parameter file curio fetches (paramfetch.go:82-98)
PCE_DISK_GIB = 43  # the PCE files the daemon saves (cuzk-pce/src/disk.rs)
DEFAULT_MARGIN_GIB = 5  # CUZK_SAFETY_MARGIN_GIB; cuzk's own default (memory.rs:35)
IMAGE_DISK_GIB = 12  # the worker image on the instance's disk (CUDA runtime, three binaries)
GIB = 1024**3
PARAMS_GB = PARAMS_DISK_GIB * GIB / 1e9  # downloaded once per rental, billed per GB
# Each request's data downloaded from the market (~51 MB for a PoRep, cuzk-verified.md "Where a
# proofshare worker meets the world"; a SnapDeals request is smaller: this is a ceiling) and the
# proof sent back (a few hundred bytes of SNARK in a small JSON body: 0.0001 GB is generous).
REQUEST_GB = 0.051
PROOF_UP_GB = 0.0001


def memory_need_gib() -> int:
    """The budget a worker's cuzk needs, in GiB."""
    resident = POREP_SRS_GIB + POREP_PCE_GIB + SNAP_SRS_GIB + SNAP_PCE_GIB
    return resident + PCE_BUILD_GIB + MIN_PARTITIONS * PARTITION_GIB


def ram_short(cpu_ram_gb: float | None, margin_gib: int = DEFAULT_MARGIN_GIB) -> str | None:
    """Why an offer's RAM (Vast's cpu_ram, GB) cannot hold the plan, or None."""
    if cpu_ram_gb is None or not math.isfinite(cpu_ram_gb):
        return None
    budget = int(cpu_ram_gb * 1e9 // GIB) - margin_gib
    need = memory_need_gib()
    if budget >= need:
        return None
    return f"{cpu_ram_gb:g} GB of RAM: a budget of {budget} GiB, the plan needs {need} GiB"


def disk_need_gb() -> float:
    """Disk (GB, as Vast rents it) for the image, every parameter file and the PCE files."""
    return math.ceil((PARAMS_DISK_GIB + PCE_DISK_GIB + IMAGE_DISK_GIB) * GIB / 1e9)


@dataclass(frozen=True)
class Sizing:
    max_pending: int  # 0: no MaxPending lets a proof finish within the deadline
    rate: float  # proofs/h the worker keeps at that MaxPending
    latency_s: float  # a proof's wait at that MaxPending
    limit_s: float  # ProveTimeout / (1 + margin)


def deadline_sizing(
    rate: float, service_s: float, max_pending: int, timeout_s: float, margin: float
) -> Sizing:
    """The MaxPending a worker runs with, in the integer steps the worker takes (milli-proofs,
    milliseconds, thousandths), so that engine and worker agree to the unit.

    A proof's wait with M in flight is at worst (M - 1) / R + S: when M calls arrive at once (a
    curio that starts, a burst of tasks) the last one completes a service time S after its
    submission plus M - 1 completions ahead of it, one every 1/R; in steady state it is M / R,
    which is no more (S >= 1/R). The largest M whose worst wait fits ProveTimeout / (1 + margin)."""
    rate_m = round(rate * 1000)  # the worker's JSON has thousandths: read them back exactly
    service_ms = round(service_s * 1000)
    timeout_ms = round(timeout_s * 1000)
    margin_m = round(margin * 1000)
    limit_ms = timeout_ms * 1000 // (1000 + margin_m)
    none = Sizing(0, 0.0, 0.0, limit_ms / 1000)
    if rate_m <= 0 or service_ms <= 0 or max_pending <= 0:
        return none
    if service_ms > limit_ms:  # a proof alone outlasts the deadline
        return Sizing(0, 0.0, service_ms / 1000, limit_ms / 1000)
    fit = min((limit_ms - service_ms) * rate_m // 3_600_000_000 + 1, max_pending)
    latency = (fit - 1) * 3_600_000_000 // rate_m + service_ms
    kept = min(fit * 3_600_000_000 // service_ms, rate_m)
    return Sizing(fit, kept / 1000, latency / 1000, limit_ms / 1000)


def duration_s(text: str) -> float:
    """A Go duration as the config takes it ("30m", "1h30m", "90s") in seconds."""
    total = 0
    rest = text
    while rest:
        i = 0
        while i < len(rest) and rest[i].isascii() and rest[i].isdigit():
            i += 1
        if i == 0 or i == len(rest) or rest[i] not in "hms":
            return 1800.0
        total += int(rest[:i]) * {"h": 3600, "m": 60, "s": 1}[rest[i]]
        rest = rest[i + 1 :]
    return float(total) if total > 0 else 1800.0
