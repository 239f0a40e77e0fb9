"""One rental's hidden timeline: when Vast runs it, how long the stages take on this machine, how
its benchmark ends (vastui's benchmark.sh, or the original's full run) and what it proves.

Timings are the simulator's, which model the real programs (each constant names its source):
image load from vastsim/cloud.py; params from the stand-in ``curio fetch-params`` (bytes over
the offer's ``inet_down``); proof times from the stand-in ``cuzk-daemon`` (a proof is 1.5 I of
synthesis then I of GPU, I = 3600 / rate; fed with several proofs it finishes one every I); the
benchmark's stages, gates and exits from worker-image/benchmark.sh. Pure functions of the
machine's hidden truth and the rental's dice.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bench.economics_world import Hidden
from vastsim.outages import outage_after
from vastsim.standins import _simlib as simlib
from vastui.engine import policy

# vastsim/cloud.py create(): loading after U(20, 60) s, running U(60, 180) s later.
LOADING_S = (20.0, 60.0)
PULL_S = (60.0, 180.0)
# From running to the paramfetch stage: the entrypoint's setup and tunnel check (ASSUMPTION).
SETUP_S = (15.0, 45.0)
# `curio fetch-params 32GiB` (stand-in curio): every file, bytes / inet_down, at most 90 min.
PARAM_BYTES = sum(gib for _, gib, _ in simlib.PARAM_FILES) * simlib.GIB
MAX_FETCH_S = 90 * 60.0
# The stand-in cuzk-daemon: SRS load, PCE extraction (46.9 s on 96 cores), its slowdown.
DAEMON_READY_S = 5.0
SRS_LOAD_S = 30.0
PCE_EXTRACT_CORE_S = 47.0 * 96
EXTRACTION_SLOWDOWN = 1.4
SYNTH_SHARE = 1.5  # a proof's synthesis, in units of I; then I of GPU
# Syntheses run side by side as the memory budget allows (70 GiB each, after the SRS's 44 and
# the PCE's 25; the budget is the container's limit less benchmark.sh's 5 GiB margin); two of
# them saturate the cores, so k at once each take k/2 times as long: the pipeline's fill.
SRS_GIB, PCE_GIB, PROOF_SYNTH_GIB, MARGIN_GIB = 44.0, 25.0, 70.0, 5.0
JITTER = (0.97, 1.03)  # per proof (_simlib.jitter)
# worker-image/benchmark.sh defaults.
BENCH_TIMEOUT_S = 2400.0  # the floor; vastui sets it per worker (policy.bench_timeout_s)
BENCH_MAX_FAILED = 2
BENCH_INDEXES = 13  # the warmup (index 0) and 12 timed proofs: production starts at 13
# From a passed benchmark to proofs flowing in production: curio starts and takes work
# (ASSUMPTION, both policies).
PROVE_START_S = 60.0
# The original restarts its daemon after the warmup (original-system.md §3: 1-2 min).
ORIGINAL_RESTART_S = (60.0, 120.0)
# The literal original's worker (original-system.md §2-3 reconstructs it from main.go): after the
# benchmark it starts a new daemon for production (§2 step 4), which loads the SRS again before
# curio's first proof (INFERRED; on top of PROVE_START_S).
ORIGINAL_PROD_RESTART_S = DAEMON_READY_S + SRS_LOAD_S

# The lines the stand-ins print for each fault (vastsim/standins/cuzk-daemon), so that the
# real policy reads what it would read from a real worker.
STICKY = (
    "cudaStreamSynchronize(stream)@sppark-0.1.14/sppark/util/gpu_t.cuh:158 failed: "
    '"an illegal memory access was encountered"'
)
OOM = 'cudaMalloc(&cache.ptr, sz_bytes)@cuda/groth16_cuda.cu:182 failed: "out of memory"'
TAILS: dict[str, tuple[str, ...]] = {
    "cuda_abort": (STICKY, "cuzk-daemon was killed by SIGABRT (exit status 134)"),
    "host_oom": (
        "cuzk-daemon was killed by SIGKILL (exit status 137) without an error line: the "
        "kernel's out-of-memory killer, most likely",
    ),
    "gpu_panic": (f"task panicked with message {OOM!r}",),
    "gpu_oom": (f"task panicked with message {OOM!r}", "warmup proof failed"),
    "no_cuda": ("Error: failed to load SRS from /data/zk/params", "warmup proof failed"),
}
EXIT_REASON = {
    "cuda_abort": "cuzk-daemon exited (SIGABRT, status 134)",
    "host_oom": "cuzk-daemon exited (SIGKILL, status 137)",
}


@dataclass(frozen=True, slots=True)
class Rental:
    """What Vast and the machine will do with this rental, relative to nothing: absolute times."""

    created: float
    running: float  # Vast reports it running (the image is loaded)
    paramfetch_start: float
    paramfetch_end: float | None  # None: the download stalls
    offline: float | None  # the host goes offline (None: it stays up)
    interval: float  # seconds per proof when fed (I)
    fill: float  # seconds from a full pipeline's start to its first GPU work
    cores: float  # the slice's vCPUs (PCE extraction)
    hidden: Hidden
    jitter: tuple[float, ...]  # per benchmark proof (0-12), then SRS load, PCE, restart

    def alive_at(self, t: float) -> bool:
        """The host still works at t (an outage stops everything)."""
        return self.offline is None or t < self.offline


def plan(
    *,
    now: float,
    rate: float,
    inet_down: float | None,
    cores: float | None,
    ram_gb: float | None,
    hidden: Hidden,
    rng: random.Random,
    reliability: float,
    fault_rate: float,
) -> Rental:
    """The rental's timeline, drawn from its own dice (the same draws in the same order for
    both policies). The host goes offline after a time drawn from the hazard its listed
    ``reliability`` implies, scaled by the scenario's ``fault_rate`` (vastsim.outages, as
    the simulated cloud does; none within a week: it stays up)."""
    running = now + rng.uniform(*LOADING_S) + rng.uniform(*PULL_S)
    setup = rng.uniform(*SETUP_S)
    offline_after = outage_after(rng, reliability, fault_rate)
    jitter = tuple(rng.uniform(*JITTER) for _ in range(BENCH_INDEXES + 3))
    fetch = fetch_seconds(inet_down)
    start = running + setup
    interval = 3600.0 / max(rate, 0.01)
    return Rental(
        created=now,
        running=running,
        paramfetch_start=start,
        paramfetch_end=None if hidden.fault == "stalled_download" else start + fetch,
        offline=None if offline_after is None else running + offline_after,
        interval=interval,
        fill=SYNTH_SHARE * interval * max(1.0, synth_lanes(ram_gb) / 2.0),
        cores=max(1.0, cores or 32.0),
        hidden=hidden,
        jitter=jitter,
    )


def fetch_seconds(inet_down: float | None) -> float:
    """`curio fetch-params` on this link (stand-in curio: bytes × 8 / inet_down)."""
    mbps = inet_down if inet_down and inet_down > 0 else 1000.0
    return min(MAX_FETCH_S, PARAM_BYTES * 8 / (mbps * 1e6))


def synth_lanes(ram_gb: float | None) -> int:
    """Proofs the daemon synthesizes at once in this slice's memory (stand-in cuzk-daemon)."""
    budget = (ram_gb or 256.0) * 1e9 / simlib.GIB - MARGIN_GIB
    return max(1, min(10, int((budget - SRS_GIB - PCE_GIB) // PROOF_SYNTH_GIB)))


# -- the benchmark -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Bench:
    """How a benchmark ends: ``duration`` after it started; ``result`` is benchmark.sh's
    bench-result.json (vastui), ``rate`` the rate the original posts (None: it posts nothing)."""

    duration: float
    result: dict[str, Any]
    rate: float | None

    @property
    def passed(self) -> bool:
        return self.result.get("outcome") == "pass"


def lsq_rate(times: Sequence[float], done: Sequence[int]) -> float | None:
    """benchmark.sh final_rate_milli: the least-squares slope of proofs completed against
    time through every finish (3+ finishes), else completed over the span of two."""
    n = len(times)
    if n >= 3:
        t0 = times[0]
        xs = [t - t0 for t in times]
        sx, sy = sum(xs), float(sum(done))
        sxx = sum(x * x for x in xs)
        sxy = sum(x * y for x, y in zip(xs, done, strict=True))
        d = n * sxx - sx * sx
        if d <= 0:
            return None
        return max(0.0, (n * sxy - sx * sy) / d) * 3600.0
    if n == 2 and times[1] > times[0]:
        return (done[1] - done[0]) * 3600.0 / (times[1] - times[0])
    return None


def early_abort(times: Sequence[float], done: Sequence[int], total: int, min_rate: float) -> bool:
    """benchmark.sh early_abort_check: could even a 25% better pace than so far still reach
    MIN_RATE, read from the finishes in time order, with and without the latest one? ``done``
    counts completed proofs at each finish (in the order they were read)."""
    finished = len(times)
    if finished < 4 or finished >= total or min_rate <= 0:
        return False
    oks = [d - p for d, p in zip(done, [0, *done[:-1]], strict=True)]
    order = sorted(zip(times, oks, strict=True))
    bests = [_best_case(order[:k], total) for k in (finished, finished - 1)]
    return all(b is not None and b < min_rate for b in bests)


def _best_case(order: Sequence[tuple[float, int]], total: int) -> float | None:
    """benchmark.sh best_case_milli: every other proof completes, each after 0.8 of the mean
    interval so far; None when it cannot be judged."""
    gaps, remaining = len(order) - 1, total - len(order)
    if gaps < 2 or remaining <= 0:
        return None
    span = order[-1][0] - order[0][0]
    if span <= 0:
        return None
    done_since = sum(ok for _, ok in order[1:])
    return (done_since + remaining) * 3600.0 / (span + remaining * span * 4 / (5 * gaps))


def _fails(h: Hidden, index: int) -> bool:
    """gpu_panic: proof fault_after fails, then every fault_every proofs."""
    return (
        h.fault == "gpu_panic"
        and index >= h.fault_after
        and (index - h.fault_after) % h.fault_every == 0
    )


def _warmup(r: Rental) -> tuple[float, float]:
    """(end of the warmup proof, end of the PCE extraction), from the benchmark's start."""
    srs = DAEMON_READY_S + SRS_LOAD_S * r.jitter[BENCH_INDEXES]
    warm = srs + (1 + SYNTH_SHARE) * r.interval * EXTRACTION_SLOWDOWN * r.jitter[0]
    pce = srs + PCE_EXTRACT_CORE_S / r.cores * r.jitter[BENCH_INDEXES + 1]
    return warm, pce


def _result(outcome: str, stage: str, rate: float | None, **extra: Any) -> dict[str, Any]:
    """bench-result.json: a rate only for pass and below_min; what a run that ended otherwise
    measured is partial_rate_per_hour (worker-image/README.md)."""
    shown = None if rate is None else round(rate, 3)
    rated = outcome in policy.RATED_OUTCOMES
    return {
        "outcome": outcome,
        "stage": stage,
        "rate_per_hour": shown if rated else None,
        "partial_rate_per_hour": None if rated else shown,
        "proofs_completed": extra.pop("completed", 0),
        "proofs_failed": extra.pop("failed", 0),
        "error_tail": list(extra.pop("tail", ())),
        **extra,
    }


def vastui_bench(r: Rental, min_rate: float, proofs: int = 12) -> Bench:
    """worker-image/benchmark.sh on this machine: warmup, PCE wait, the timed run with
    early abort, its failure and time limits."""
    h = r.hidden
    limit = float(policy.bench_timeout_s(min_rate, proofs))  # what the engine sets
    if h.fault == "no_cuda":
        t = DAEMON_READY_S + 1.0
        return Bench(t, _result("error", "warmup", None, failed=1, tail=TAILS["no_cuda"]), None)
    warm, pce = _warmup(r)
    if h.fault == "gpu_oom":  # the warmup's GPU start meets the extraction's memory
        t = warm - r.interval * EXTRACTION_SLOWDOWN
        return Bench(t, _result("error", "warmup", None, failed=1, tail=TAILS["gpu_oom"]), None)
    start = max(warm, pce)
    if start >= limit:
        return Bench(limit, _result("timeout", "pce", None, completed=0), None)
    times: list[float] = []
    done: list[int] = []
    completed = failed = 0
    t = start + r.fill
    for index in range(1, proofs + 1):
        t += r.interval * r.jitter[index]
        dies = h.fault in ("cuda_abort", "host_oom") and index == h.fault_after
        if dies:
            at = t - 0.5 * r.interval
            res = _result(
                "error", "timed_run", lsq_rate(times, done), completed=completed, failed=failed,
                tail=TAILS[h.fault],
            )  # fmt: skip
            return Bench(min(at, limit), res, None)
        if h.fault == "hang" and index == h.fault_after:
            continue  # never finishes: the others go on, the deadline ends it
        if t >= limit:
            break
        if _fails(h, index):
            failed += 1
            if failed > BENCH_MAX_FAILED:
                res = _result(
                    "error", "timed_run", lsq_rate(times, done), completed=completed,
                    failed=failed, tail=TAILS["gpu_panic"],
                )  # fmt: skip
                return Bench(t, res, None)
        else:
            completed += 1
        times.append(t)
        done.append(completed)
        if early_abort(times, done, proofs, min_rate):
            rate = lsq_rate(times, done)
            res = _result("aborted_early", "timed_run", rate, completed=completed, failed=failed)
            return Bench(t, res, None)
    rate = lsq_rate(times, done)
    if len(times) < proofs or rate is None:
        res = _result("timeout", "timed_run", rate, completed=completed, failed=failed)
        return Bench(limit, res, None)
    outcome = "pass" if rate >= min_rate else "below_min"
    tail = TAILS["gpu_panic"] if failed else ()
    extra = {"daemon_pid": 4242, "daemon_completed": completed + 1, "daemon_failed": failed}
    res = _result(outcome, "done", rate, completed=completed, failed=failed, tail=tail, **extra)
    return Bench(t, res, None)


def original_bench(r: Rental, proofs: int = 12, crash_posts_zero: bool = False) -> Bench:
    """The original's benchmark (original-system.md §3): warmup, PCE wait, a daemon restart,
    then all 12 proofs, no early abort; the rate posted to /bench-done (measured like vastui's,
    an assumption in its favour). A hung proof posts nothing: the monitor's 45-minute benchmark
    timeout ends it. A crash (a daemon that died, a failed warmup) posts nothing either, unless
    ``crash_posts_zero``: the seed's script reports 0 proofs/h at once and /bench-done destroys
    the box (issue 18: the original at its best)."""
    h = r.hidden
    never = Bench(math.inf, {"outcome": "error"}, None)
    warm, pce = _warmup(r)
    if h.fault in ("no_cuda", "gpu_oom"):
        # the first proof's GPU phase fails: after the daemon's start and the SRS load
        crashed = SRS_LOAD_S + r.fill
        return (
            Bench(crashed, {"outcome": "posted", "rate_per_hour": 0.0}, 0.0)
            if (crash_posts_zero)
            else never
        )
    if h.fault == "hang" and 1 <= h.fault_after <= proofs:
        return never
    if h.fault in ("cuda_abort", "host_oom") and 1 <= h.fault_after <= proofs:
        if not crash_posts_zero:
            return never
        restart = ORIGINAL_RESTART_S[0]
        crashed = max(warm, pce) + restart + SRS_LOAD_S + r.fill + r.interval * h.fault_after
        return Bench(crashed, {"outcome": "posted", "rate_per_hour": 0.0}, 0.0)
    t = max(warm, pce) + _original_restart(r) + SRS_LOAD_S + r.fill
    times: list[float] = []
    done: list[int] = []
    completed = 0
    for index in range(1, proofs + 1):
        t += r.interval * r.jitter[index]
        completed += 0 if _fails(h, index) else 1
        times.append(t)
        done.append(completed)
    rate = lsq_rate(times, done) or 0.0
    return Bench(t, {"outcome": "posted", "rate_per_hour": rate}, rate)


def literal_bench(r: Rental, proofs: int = 12, sequential: bool = True) -> Bench:
    """The original's benchmark.sh as its sources tell it, not as vastui's worker runs it:

    * a warmup proof on a fresh daemon (SRS load, the PCE extraction it starts), and the wait
      for the extraction (original-system.md:211-213);
    * a daemon restart, 1-2 min (main.go:1546, original-system.md:129), which loads the SRS again
      and does not load the saved PCE (cuzk-verified.md:30-36): its first proof extracts it again,
      and the proofs run slower until that ends;
    * 12 proofs one after another (``sequential``): "N=12 sequential PoRep proofs" with
      ``cuzk-bench batch -c 12`` (original-system.md:217-218), whose concurrency defaults to 1
      (cuzk-verified.md:44): each proof's whole latency (1.5 I of synthesis, then I of GPU), not
      the pipelined pace production reaches. The comment's "12 proofs (~20-30min)" fits it (on a
      60-90/h pipelined machine, 12 latencies of 2.5 I take 20-30 min);
    * the rate posted to /bench-done: completed × 3600 / the batch's time
      (original-system.md:218), failed proofs not counted; no early abort;
    * a crash (a failed warmup, a daemon that died) or a hang posts nothing: the monitor's
      45-minute benchmark timeout ends it (nothing in the sources posts a failure).

    ``sequential=False`` (a row, not the literal): the batch run with concurrency enough to
    keep the pipeline full, a proof every I after the fill, as ``original_bench`` measures."""
    h = r.hidden
    never = Bench(math.inf, {"outcome": "error"}, None)
    if h.fault in ("no_cuda", "gpu_oom"):
        return never
    if h.fault in ("cuda_abort", "host_oom", "hang") and 1 <= h.fault_after <= proofs:
        return never
    warm, pce = _warmup(r)
    start = max(warm, pce) + _original_restart(r) + SRS_LOAD_S
    extracted = start + PCE_EXTRACT_CORE_S / r.cores * r.jitter[BENCH_INDEXES + 1]
    t = start if sequential else start + r.fill
    completed = 0
    for index in range(1, proofs + 1):
        step = (1 + SYNTH_SHARE) * r.interval if sequential else r.interval
        t += step * r.jitter[index] * (EXTRACTION_SLOWDOWN if t < extracted else 1.0)
        completed += 0 if _fails(h, index) else 1
    rate = completed * 3600.0 / (t - start)
    return Bench(t, {"outcome": "posted", "rate_per_hour": rate}, rate)


def _original_restart(r: Rental) -> float:
    """The daemon restart after the warmup, 1-2 min, from the rental's restart dice."""
    lo, hi = ORIGINAL_RESTART_S
    return lo + (hi - lo) * (r.jitter[BENCH_INDEXES + 2] - JITTER[0]) / (JITTER[1] - JITTER[0])


# -- production ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Production:
    """Proofs in production from ``start`` (the daemon fed as curio feeds it): a finish every
    I after the first proof's synthesis, until the daemon dies or hangs, or the host goes
    offline. Daemon proof indexes continue from the benchmark's (13 onwards)."""

    start: float
    interval: float
    fill: float
    hidden: Hidden
    offline: float | None

    @property
    def first(self) -> float:
        return self.start + self.fill

    def _stop_index(self) -> int | None:
        h = self.hidden
        if h.fault in ("cuda_abort", "host_oom", "hang") and h.fault_after >= BENCH_INDEXES:
            return h.fault_after - BENCH_INDEXES
        return None

    def death(self) -> tuple[float, str, tuple[str, ...]] | None:
        """When the daemon dies in production (a dying daemon), with its exit and lines."""
        stop = self._stop_index()
        if stop is None or self.hidden.fault == "hang":
            return None
        at = self.first + stop * self.interval + 0.5 * self.interval
        if self.offline is not None and at >= self.offline:
            return None
        return at, EXIT_REASON[self.hidden.fault], TAILS[self.hidden.fault]

    def stopped_at(self) -> float:
        """When proofs stop coming (a hang, a death, the host offline), or inf."""
        ends = [math.inf if self.offline is None else self.offline]
        stop = self._stop_index()
        if stop is not None:
            ends.append(self.first + stop * self.interval)
        return min(ends)

    def finishes(self, t: float) -> int:
        """Proof finishes (completed or failed) by time t."""
        t = min(t, self.stopped_at())
        if t < self.first + self.interval:
            return 0
        n = int((t - self.first) // self.interval)
        stop = self._stop_index()
        return n if stop is None else min(n, stop)

    def counts(self, t: float) -> tuple[int, int]:
        """(completed, failed) proofs by time t."""
        n = self.finishes(t)
        failed = _failing_between(self.hidden, BENCH_INDEXES, BENCH_INDEXES + n - 1)
        return n - failed, failed


def _failing_between(h: Hidden, lo: int, hi: int) -> int:
    """gpu_panic failures among the daemon's proof indexes lo..hi (inclusive)."""
    if h.fault != "gpu_panic" or hi < lo:
        return 0
    lo = max(lo, h.fault_after)
    if hi < lo:
        return 0
    first = h.fault_after + math.ceil((lo - h.fault_after) / h.fault_every) * h.fault_every
    return 0 if first > hi else (hi - first) // h.fault_every + 1
