"""Production, measured: cuzk's proof counters, read over SSH, become proofs completed and failed
since the benchmark, a measured rate, and a verdict. Pure functions of what was read.

A reading is ``workerctl cuzk-counters``: the daemon's pid and liveness, its ``/status`` JSON
(cuzk-core/src/status.rs: ``counters.total_completed``/``total_failed`` count proofs assembled
since the daemon started) and its gRPC GetStatus counters (cuzk-server/src/service.rs, which also
count proofs that failed before assembly, such as a GPU start panic). A restarted daemon starts
its counters at zero: a new pid or a smaller uptime opens a new segment, so nothing is lost or
counted twice. The rate is judged only over time the daemon was fed: as many proofs in flight as
its benchmark measured at (``full_at``: its MaxPending less one, counted as cuzk's ``/status``
does, pipelines plus its queue). A worker idle, or half fed, for lack of demand is not slow: a
pipelined GPU with one proof in flight proves at a fraction of its rate (production judges a
worker on the work it was given). Beside that rate (its capacity, kept full), the time it had
any work and its proofs/h over it are measured whatever its feed (``Measure.worked_rate``): what
it delivered on the work the market gave it, for the operator to read, never to judge.

The daemon's counters also count proofs nobody waited for: curio gives up on a Prove call at its
``[Cuzk] ProveTimeout`` (lib/cuzk/client.go:116-122) and retries the task, while the daemon,
which cannot cancel (extern/cuzk/cuzk-server/src/service.rs:173-183), proves the old job to the
end. So the reading carries curio's own count of calls that outlived the deadline
(``workerctl cuzk-counters`` → ``curio.timeouts``), and proofs that keep outliving it end the
worker (``prove_overdue``).
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass, field, replace
from typing import Any

from vastui.config import Config
from vastui.domain.reports import BenchResult, WorkerEvent, curio_report
from vastui.engine.policy import Kill, failure_kill
from vastui.numbers import parse_count

MAX_SAMPLES = 2000  # bounds prod_state whatever the poll cadence
MIN_BUSY_S = 600.0  # a rate is published once it rests on this much busy time (noise)


@dataclass(frozen=True)
class Reading:
    """One ``workerctl cuzk-counters`` answer, validated (untrusted numbers are bounded)."""

    pid: int | None
    alive: bool
    exit_status: int | None
    signal: str | None
    completed: int | None  # max of /status and gRPC counters; None if neither answered
    failed: int | None
    uptime: float | None
    busy: bool
    error_tail: tuple[str, ...] = ()
    # proofs in the daemon: its pipelines and its queue (cuzk-core/src/status.rs
    # StatusSnapshot.pipelines, CountersSnapshot.queue_depth); None: /status did not answer
    in_flight: int | None = None  # the daemon's error lines and how it died, once it has
    curio_timeouts: int | None = None  # curio's Prove calls past ProveTimeout, since proving
    curio_info: dict[str, Any] | None = None  # the node as the cluster knows it
    # the engine's own: how long the read took (engine clock), which bounds how far the daemon's
    # clock may be trusted over the arrival times (``measure``)
    latency: float = 0.0

    @property
    def exit_reason(self) -> str:
        """The prove stage's own words for a dead daemon (worker-image daemon_exit_reason)."""
        sig = f"{self.signal}, " if self.signal else ""
        return f"cuzk-daemon exited ({sig}status {self.exit_status})"

    @classmethod
    def parse(cls, raw: dict[str, Any]) -> Reading:
        status = _obj(raw.get("status"))
        grpc = _obj(raw.get("grpc"))
        counters = _obj(status.get("counters"))
        done = [parse_count(counters.get("total_completed")), parse_count(grpc.get("completed"))]
        fail = [parse_count(counters.get("total_failed")), parse_count(grpc.get("failed"))]
        uptimes = [
            _count_float(status.get("uptime_secs")),
            _count_float(grpc.get("uptime_seconds")),
        ]
        pipelines = status.get("pipelines")
        workers = status.get("gpu_workers")
        busy = bool(pipelines) or (parse_count(counters.get("queue_depth")) or 0) > 0
        if isinstance(workers, list):
            busy = busy or any(isinstance(w, dict) and w.get("state") == "proving" for w in workers)
        in_flight = None
        if isinstance(pipelines, list):
            in_flight = len(pipelines) + (parse_count(counters.get("queue_depth")) or 0)
        signal = raw.get("signal")
        tail = raw.get("error_tail")
        tail = tail if isinstance(tail, list) else []
        curio = _obj(raw.get("curio"))
        return cls(
            pid=parse_count(raw.get("daemon_pid")),
            alive=raw.get("alive") is True,
            exit_status=parse_count(raw.get("exit_status")),
            signal=signal if isinstance(signal, str) and signal.isalnum() else None,
            completed=max((d for d in done if d is not None), default=None),
            failed=max((f for f in fail if f is not None), default=None),
            uptime=max((u for u in uptimes if u is not None), default=None),
            busy=busy,
            error_tail=tuple(x[:500] for x in tail if isinstance(x, str))[-20:],
            curio_timeouts=parse_count(curio.get("timeouts")),
            curio_info=curio_report(curio.get("info")),
            in_flight=in_flight,
        )


def full_at(max_pending: int | None) -> int | None:
    """Proofs in flight from which a worker counts as fed: its MaxPending less the one whose
    place is being filled (curio claims the next task at its next poll, 3 s,
    harmony/harmonytask/harmonytask.go:32-36, then downloads its ~51 MB before it calls Prove,
    tasks/proofshare/task_prove.go:204). Fewer is a worker the market did not fill, or one
    draining: its pipeline's tail proves slower, which is not the machine's. None: unknown,
    every busy moment counts."""
    if max_pending is None or max_pending < 1:
        return None
    return max(1, max_pending - 1)


def feed_share(reading: Reading, fed_at: int | None) -> float:
    """1 when the daemon holds a full feed (``fed_at`` or more in flight, or either unknown),
    the share of it when it holds fewer, 0 when it holds nothing."""
    if not reading.busy:
        return 0.0
    if fed_at is None or reading.in_flight is None or reading.in_flight >= fed_at:
        return 1.0
    return max(1, reading.in_flight) / fed_at  # busy with none counted: one in its GPU


@dataclass
class ProdState:
    """What the engine keeps per proving instance (``instances.prod_state``)."""

    pid: int | None = None
    base_completed: int = 0  # the current daemon's counters when production began
    base_failed: int = 0
    offset_completed: int = 0  # proofs of earlier daemons (restarts)
    offset_failed: int = 0
    last_completed: int = 0  # the current daemon's counters at the last reading
    last_failed: int = 0
    last_uptime: float = 0.0
    last_ok: float | None = None  # engine clock of the last good reading
    started: float | None = None  # when the first reading came in
    primed: bool = False  # a proof completed since production began: the pipeline is full
    silent_since: float | None = None  # the first failed read since the last good one
    # the first read since the last good one that found no SSH connection at all
    unreachable_since: float | None = None
    # [t, completed, failed, feed, curio timeouts, daemon uptime (-1: none), read latency];
    # feed: 1 fed (its MaxPending less one in flight), the share of that when fewer, 0 idle
    samples: list[list[float]] = field(default_factory=list)
    # readings refused as impossible (vastui/engine/physics.py): when, and the last one's why
    refusals: list[float] = field(default_factory=list)
    refused: str | None = None

    @property
    def completed(self) -> int:
        return self.offset_completed + self.last_completed - self.base_completed

    @property
    def failed(self) -> int:
        return self.offset_failed + self.last_failed - self.base_failed

    def to_json(self) -> str:
        return json.dumps(self.__dict__, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | None) -> ProdState:
        if not text:
            return cls()
        try:
            data = json.loads(text)
        except ValueError:
            return cls()
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known) if isinstance(data, dict) else cls()


def baseline_from_bench(result: BenchResult | None) -> tuple[int | None, int, int]:
    """The benchmark daemon's pid and its counters when the benchmark ended: the warmup and
    every timed proof ran on the daemon that production keeps (worker-image/benchmark.sh)."""
    if result is None:
        return None, 0, 0
    return result.daemon_pid, result.daemon_completed or 0, result.daemon_failed or 0


def fold(
    state: ProdState,
    reading: Reading,
    now: float,
    window_s: float,
    bench: tuple[int | None, int, int],
    fed_at: int | None = None,
) -> ProdState:
    """A good reading folded into the state. ``fed_at``: ``full_at`` of the worker's
    MaxPending; fewer proofs in flight are not held against its rate."""
    s = replace(state, samples=list(state.samples))
    done = reading.completed or 0
    fail = reading.failed or 0
    if s.started is None:
        s.started = now
        bench_pid, bench_done, bench_fail = bench
        s.pid = reading.pid
        if reading.pid is not None and reading.pid == bench_pid:
            s.base_completed, s.base_failed = min(bench_done, done), min(bench_fail, fail)
        else:
            s.base_completed, s.base_failed = done, fail
        s.last_completed, s.last_failed = done, fail
    restarted = reading.pid != s.pid or (
        reading.uptime is not None and reading.uptime + 1e-6 < s.last_uptime
    )
    if restarted or done < s.last_completed or fail < s.last_failed:
        s.offset_completed += s.last_completed - s.base_completed
        s.offset_failed += s.last_failed - s.base_failed
        s.base_completed = s.base_failed = 0
        s.pid = reading.pid
    s.last_completed, s.last_failed = done, fail
    s.last_uptime = reading.uptime or 0.0
    s.last_ok = now
    s.silent_since = None
    s.unreachable_since = None
    # Until the first proof completes, the pipeline is filling (a proof's whole latency, not the
    # interval between proofs): that time is not held against the machine.
    s.primed = s.primed or s.completed > 0
    busy = feed_share(reading, fed_at) if s.primed else 0.0
    timeouts = float(reading.curio_timeouts or 0)
    uptime = -1.0 if reading.uptime is None else reading.uptime
    s.samples.append(
        [now, float(s.completed), float(s.failed), busy, timeouts, uptime,
         max(0.0, reading.latency)]
    )  # fmt: skip
    keep_from = now - 2 * window_s
    s.samples = [x for x in s.samples if x[0] >= keep_from][-MAX_SAMPLES:]
    return s


def silent(state: ProdState, now: float, *, unreachable: bool = False) -> ProdState:
    """A read that failed: the silence starts now unless it already had. It is the engine's own
    failed reads that count, so an engine that was down does not hold its absence against the
    worker. A read that found no SSH connection at all is not the daemon's silence: it starts
    its own clock (and a read that connects ends it)."""
    if unreachable:
        return (
            state if state.unreachable_since is not None else replace(state, unreachable_since=now)
        )
    return replace(
        state,
        silent_since=state.silent_since if state.silent_since is not None else now,
        unreachable_since=None,
    )


@dataclass(frozen=True)
class Measure:
    rate: float | None  # proofs/hour over busy time in the window (None: not enough of it)
    busy_s: float  # seconds of the window with work in flight
    failed: int  # failed proofs in the window
    completed: int  # completed proofs in the window
    overdue: int = 0  # curio's Prove calls that outlived ProveTimeout in the window
    # the work it was given, whatever its feed: the time it had any proof in flight, and its
    # proofs/h over that time (None until MIN_BUSY_S of it)
    worked_s: float = 0.0
    worked_rate: float | None = None


def measure(state: ProdState, now: float, window_s: float) -> Measure:
    """The window's numbers: an interval counts as busy when work was in flight at its start.
    The window's points are its samples and the last one before it. One pass: the engine
    measures every reading and the economics bench millions of them."""
    start = now - window_s
    points: list[list[float]] = []
    before: list[float] | None = None
    for x in state.samples:
        if x[0] >= start:
            points.append(x)
        else:
            before = x
    if before is not None:
        points.insert(0, before)
    busy = done = worked = worked_done = 0.0
    overdue = 0
    # samples of older releases have no timeouts; a restarted curio starts its count again
    for a, b in itertools.pairwise(points):
        if a[3] > 0:
            span = _elapsed(a, b)
            worked += span
            worked_done += b[1] - a[1]
            if a[3] >= 1.0:
                busy += span
                done += b[1] - a[1]
        ta, tb = (a[4] if len(a) > 4 else 0.0), (b[4] if len(b) > 4 else 0.0)
        overdue += int(tb - ta) if tb >= ta else int(tb)
    failed = int(points[-1][2] - points[0][2]) if len(points) >= 2 else 0
    completed = int(points[-1][1] - points[0][1]) if len(points) >= 2 else 0
    enough = min(MIN_BUSY_S, 0.9 * window_s)
    rate = done * 3600.0 / busy if busy >= enough else None
    worked_rate = worked_done * 3600.0 / worked if worked >= enough else None
    return Measure(rate, busy, failed, completed, overdue, worked, worked_rate)


def _elapsed(a: list[float], b: list[float]) -> float:
    """The time between two readings. The daemon dates its counters itself (``uptime_secs`` in
    the same /status answer, cuzk-core/src/status.rs:467): between two readings of one daemon
    that is the time the proofs were counted over, where the arrival times also carry each
    read's latency (an SSH round trip, a cuzk-bench process; seconds on a loaded host). It is
    trusted only within what the latencies allow (a restart, a clock that lies or runs at
    another rate falls back to the arrival times); 1 s is gRPC's whole-second uptime."""
    dt = b[0] - a[0]
    if len(a) > 6 and len(b) > 6 and a[5] >= 0 and b[5] >= 0:
        dd = b[5] - a[5]
        if dt - b[6] - 1.0 <= dd <= dt + a[6] + 1.0 and dd > 0:
            return dd
    return dt


def verdict(
    state: ProdState,
    reading: Reading | None,
    now: float,
    min_rate: float | None,
    config: Config,
    *,
    others_reachable: bool = True,
    measured: Measure | None = None,
) -> Kill | None:
    """Whether a proving worker must go: a dead or silent daemon, failing proofs, or a measured
    rate below its min_rate over the whole window. Each of these is a strike on the machine.

    A worker the engine cannot reach at all (no SSH connection) is not a silent daemon: curio
    goes on proving without us. It is the machine's (its network, its sshd) only while the
    engine reaches its other workers (``others_reachable``); then, past
    ``proving.unreachable_min``, it goes, with a strike. When no worker answers, the controller
    is the one cut off: nobody is destroyed for it (RELIABILITY.md, ssh-cut). ``measured``:
    ``measure(state, now, window)`` when the caller has it already."""
    p = config.proving
    window = p.window_min * 60.0
    if reading is None and state.unreachable_since is not None:
        if not others_reachable:
            return None
        if now - state.unreachable_since >= p.unreachable_min * 60.0:
            return Kill(
                "prove_unreachable",
                f"no SSH connection to the worker for {(now - state.unreachable_since) / 60:.0f}"
                " min while the controller reaches its other workers",
                "proving",
                strike=True,
            )
        return None
    if reading is not None and not reading.alive and reading.exit_status is not None:
        # Word for word what the prove stage reports when it sees the same death: whichever of
        # the two the engine hears first, the kill reads the same.
        event = WorkerEvent(
            stage="prove", reason=reading.exit_reason, error_tail=reading.error_tail
        )
        return failure_kill(event)
    if reading is None or not reading.alive or reading.completed is None:
        # unreachable, no daemon, or a daemon that answers neither /status nor GetStatus
        since = state.silent_since if state.silent_since is not None else now
        if now - since >= p.unresponsive_min * 60.0:
            return Kill(
                "prove_unresponsive",
                f"cuzk-daemon did not answer for {(now - since) / 60:.0f} min while proving",
                "proving",
                strike=True,
            )
        return None
    m = measured if measured is not None else measure(state, now, window)
    if m.failed >= p.max_failures:
        return Kill(
            "prove_failing",
            f"{m.failed} proofs failed in production within {p.window_min:g} min "
            f"({m.completed} completed)",
            "proving",
            strike=True,
            detail={"failed": m.failed, "completed": m.completed},
        )
    if m.overdue >= p.max_overdue:
        return Kill(
            "prove_overdue",
            f"{m.overdue} proofs outlived curio's ProveTimeout {config.curio.prove_timeout} "
            f"within {p.window_min:g} min: the daemon proves work curio gave up on",
            "proving",
            strike=True,
            detail={"overdue": m.overdue, "completed": m.completed},
        )
    rate = m.rate
    judged = min_rate is not None and rate is not None and m.busy_s >= 0.9 * window
    if judged and rate is not None and min_rate is not None and rate < min_rate:
        return Kill(
            "prove_below_min",
            f"measured {rate:.1f} < {min_rate:.1f} proofs/h over {p.window_min:g} min of proving",
            "proving",
            strike=True,
            detail={"rate": round(rate, 3)},
        )
    return None


def curio_verdict(
    cluster: dict[str, Any] | None, cuzk_completed: int | None, config: Config
) -> Kill | None:
    """Production as curio counts it: the worker's PSProve results in ``harmony_task_history``
    over the window (``cluster``: its last reading, vastui/engine/cluster.py MachineState).
    cuzk can count a proof as done that curio then fails (a download that never comes, a Snap
    proof that does not verify: cuzk self-checks PoRep only, curio's ``CheckOutput`` checks
    both, tasks/proofshare/task_prove.go:216-219): such a worker is paid nothing. At
    ``proving.max_failures`` failures, with no more successes than failures, it goes, with curio's
    own error line as its reason, and a strike (the fleet-wide check in ``acts`` lifts it when
    the same line fails other machines: then it is the fleet's)."""
    if not cluster:
        return None
    failed = parse_count(cluster.get("failed")) or 0
    done = parse_count(cluster.get("done")) or 0
    if failed < config.proving.max_failures or done > failed:
        return None
    error = cluster.get("last_error")
    line = error.strip() if isinstance(error, str) and error.strip() else "no error text"
    cuzk = f"; cuzk counted {cuzk_completed} done" if cuzk_completed else ""
    return Kill(
        "prove_curio_failing",
        f"curio failed {failed} of {failed + done} PSProve tasks in {config.proving.window_min:g}"
        f" min{cuzk}: {line}",
        "proving",
        error_lines=(line,),
        strike=True,
        detail={"curio_failed": failed, "curio_done": done, "cuzk_completed": cuzk_completed},
    )


# curio's error when it cannot reach the worker's own cuzk-daemon: its client wraps the gRPC
# error (curio lib/cuzk/client.go:124 "cuzk Prove RPC: %w"), Unavailable for a refused or lost
# connection (a daemon dead, restarting, or not where curio dials it).
CUZK_UNREACHABLE = re.compile(r"cuzk Prove RPC: rpc error: code = Unavailable\b")


def waits_for_cuzk(kill: Kill, state: ProdState, seen_since: float) -> bool:
    """Whether a ``prove_curio_failing`` verdict waits for the engine's own reading of cuzk.

    Failures that say curio could not reach the daemon follow a daemon's death at once (curio
    fails each claimed task in a moment while the engine reads cuzk once per ``poll_s``), and
    the engine's reading names a death with its own lines (``prove_daemon_died``, the CUDA error
    that banned the machine). So such a verdict waits: while the engine's latest reading of cuzk
    failed too, the cuzk verdicts judge (died, unresponsive); once a reading taken after the
    engine first saw these failures (``seen_since``, the engine's clock) answered, the daemon is
    alive and curio cannot reach it, and the verdict stands."""
    if not any(CUZK_UNREACHABLE.search(line) for line in kill.error_lines):
        return False
    if state.silent_since is not None:
        return True
    return state.last_ok is None or state.last_ok <= seen_since


def _obj(value: Any) -> dict[str, Any]:
    """A JSON object from the worker, or an empty one for anything else."""
    return value if isinstance(value, dict) else {}


def _count_float(value: Any) -> float | None:
    n = parse_count(value)
    return None if n is None else float(value)
