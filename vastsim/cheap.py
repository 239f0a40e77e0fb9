"""Cheap stand-in workers: many simulated instances on a small machine, for benchmarks.

`SimWorkerHost` runs the real worker-image scripts (bash, a cuzk-daemon stand-in, curio) in a
sandbox per instance: true to the worker, but a few processes each. A fleet of hundreds on two
cores needs less: `CheapWorkerHost` gives each running instance a real SSH server (the same
`SandboxSshd`: the account's keys, a host key of its own) whose `workerctl` is answered in
this process, from a scripted timeline that speaks the worker's protocol
(worker-image/README.md): `status`, `session`, `events [--follow] [--after N]` (JSON lines
with a wall `ts`), `cuzk-counters`, `cuzk-status`, `logs SOURCE [--tail N] [--follow]`.

What the engine sees over SSH is what a real worker sends; what it costs the simulator is a
coroutine per instance and an SSH channel per command.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import shlex
import socket
import time
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncssh

from vastsim.cloud import SimCloud
from vastsim.sshd import SandboxSshd

log = logging.getLogger("vastsim.cheap")

LOG_SOURCES = ("setup", "paramfetch", "benchmark", "cuzk", "curio")
_CHUNK = 64 * 1024  # bytes written per drain on a log firehose


@dataclass(frozen=True)
class CheapScript:
    """The timeline every cheap worker follows (real seconds; each worker's gaps jittered).

    ``stage_gap``: between lifecycle events (setup → paramfetch → benchmark → prove).
    ``progress_every``: once proving, a `prove progress` event this often (None: none), a
    steady load of events for the controller to decide on.
    ``log_rate``: lines per second a followed log adds (None: as fast as the channel takes
    them); ``log_total``: a followed log ends after this many lines (None: never).
    """

    stage_gap: float = 1.0
    progress_every: float | None = 10.0
    # the benchmark's rate, as a multiple of the worker's MIN_RATE: below 1 the benchmark ends
    # below_min and the worker stops there, as benchmark.sh and the entrypoint do
    rate_margin: float = 1.5
    log_rate: float | None = 50.0
    log_total: int | None = None
    seed: int = 0


def _line_ts(now: float) -> str:
    """ISO 8601 UTC with microseconds, as cuzk's tracing lines start."""
    whole = int(now)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{int((now % 1) * 1e6):06d}Z"


def log_line(source: str, n: int, now: float) -> str:
    """The n-th line of a worker log: cuzk's are ANSI-coloured tracing lines, as cuzk.log holds
    them (the controller must strip the escapes); every 50th is an error line."""
    stamp = _line_ts(now)
    if source == "cuzk":
        level = "\x1b[31mERROR\x1b[0m" if n % 50 == 49 else "\x1b[32m INFO\x1b[0m"
        return (
            f"\x1b[2m{stamp}\x1b[0m {level} \x1b[2mcuzk_core::engine\x1b[0m\x1b[2m:\x1b[0m "
            f"proof {n} completed gpu=0 sector=1 partition={n % 10} took=41.{n % 10}s"
        )
    level = "ERROR" if n % 50 == 49 else "INFO"
    return f"{stamp} {level} {source}: step {n} of the {source} stage done in 0.{n % 10}s"


@dataclass
class CheapWorker:
    """One instance's worker state: its event log, its stage, its daemon's counters."""

    instance_id: int
    min_rate: float
    script: CheapScript
    rng: random.Random
    image: str = "unknown"
    events: list[str] = field(default_factory=list)
    stage: str = "setup"
    state: str = "running"
    proving_since: float | None = None
    started: float = field(default_factory=time.time)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def bench_rate(self) -> float:
        return round(max(1.0, self.min_rate) * self.script.rate_margin, 2)

    @property
    def bench_passes(self) -> bool:
        return self.bench_rate >= self.min_rate

    def emit(self, stage: str, event: str, **extra: Any) -> None:
        """Append one event (a wall `ts`, as the entrypoint's $EPOCHREALTIME) and wake the
        followers."""
        self.stage = stage
        record = {"ts": round(time.time(), 6), "stage": stage, "event": event, **extra}
        self.events.append(json.dumps(record, separators=(",", ":")))
        self.changed.set()
        self.changed = asyncio.Event()

    async def run(self) -> None:
        """The lifecycle, then a steady trickle of `prove progress` events."""
        gap = self.script.stage_gap
        steps: list[tuple[str, str, dict[str, Any]]] = [
            ("setup", "start", {}),
            ("setup", "ok", {"duration_s": 1}),
            ("paramfetch", "start", {}),
            ("paramfetch", "progress", {"percent": 50, "stalled": False}),
            ("paramfetch", "ok", {"duration_s": 2}),
            ("benchmark", "start", {}),
            ("benchmark", "result", {"result": self._bench_result()}),
        ]
        if self.bench_passes:
            steps += [
                ("benchmark", "ok", {"duration_s": 3}),
                ("prove", "start", {}),
                ("prove", "progress", {"detail": "cuzk-daemon of the benchmark kept (pid 4242)"}),
            ]
        else:  # the entrypoint's fail_stage with the result's reason; the worker ends there
            reason = self._bench_result()["reason"]
            steps.append(("benchmark", "fail", {"reason": reason, "error_tail": []}))
        await asyncio.sleep(self.rng.uniform(0, gap))
        for stage, event, extra in steps:
            self.emit(stage, event, **extra)
            await asyncio.sleep(gap * self.rng.uniform(0.5, 1.5))
        if not self.bench_passes:
            self.state = "failed"
            return
        self.proving_since = time.time()
        every = self.script.progress_every
        while every:
            await asyncio.sleep(every * self.rng.uniform(0.8, 1.2))
            self.emit("prove", "progress", detail="running")

    def _bench_result(self) -> dict[str, Any]:
        """benchmark.sh's result for a run that reached its verdict: pass at or above MIN_RATE,
        else below_min (worker-image/README.md, bench-result.json)."""
        rate, floor = self.bench_rate, self.min_rate
        outcome = "pass" if self.bench_passes else "below_min"
        compare = ">=" if self.bench_passes else "<"
        return {
            "outcome": outcome,
            "stage": "done",
            "reason": f"benchmark {outcome}: {rate:.1f} {compare} {floor:.1f} proofs/h "
            "(12 proofs, 0 failed, 10 in flight)",
            "rate_per_hour": rate,
            "partial_rate_per_hour": None,
            "min_rate": floor,
            "proofs_completed": 12,
            "proofs_failed": 0,
            "pce": "cached",
            "exit_code": 0 if self.bench_passes else 10,
            "error_tail": [],
        }

    def status(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "state": self.state,
            "stage_started_at": self.started,
            "reason": None,
            "updated_at": time.time(),
            "image": {"name": self.image, "digest": "sha256:" + "0" * 64},
            "pid": 4000 + self.instance_id % 1000,
            "bench_result": None,
            "entrypoint_alive": True,
            "now": time.time(),
        }

    def counters(self) -> dict[str, Any]:
        """`workerctl cuzk-counters`: proofs completed at the benchmark's rate since proving."""
        now = time.time()
        if self.proving_since is None:
            return {"daemon_pid": None, "alive": False, "exit_status": None, "signal": None,
                    "status": None, "grpc": None, "error_tail": []}  # fmt: skip
        uptime = int(now - self.started) + 600
        done = 13 + int((now - self.proving_since) * self.bench_rate / 3600.0)
        return {
            "daemon_pid": 4242,
            "alive": True,
            "exit_status": None,
            "signal": None,
            "status": {
                "uptime_secs": uptime,
                "counters": {"total_completed": done, "total_failed": 0, "queue_depth": 3},
                "pipelines": [{"id": 1, "state": "proving"}],
            },
            "grpc": {"uptime_seconds": uptime, "completed": done, "failed": 0},
            "error_tail": [],
        }

    async def follow_events(self, after: int) -> AsyncIterator[str]:
        """Yield event lines from line `after`, then each new one as it is emitted."""
        position = after
        while True:
            waiter = self.changed
            while position < len(self.events):
                yield self.events[position]
                position += 1
            await waiter.wait()


class CheapSshd(SandboxSshd):
    """A worker's SSH server whose `workerctl` is answered in this process."""

    def __init__(
        self, worker: CheapWorker, root: Path, cloud: SimCloud, host_key: asyncssh.SSHKey
    ) -> None:
        iid = worker.instance_id
        super().__init__(root, {}, lambda: cloud.authorized_keys(iid), host_key)
        self.worker = worker

    async def _handle(self, process: asyncssh.SSHServerProcess[Any]) -> None:
        try:
            status = await self._workerctl(process, shlex.split(process.command or ""))
        except (asyncssh.Error, OSError, ConnectionError, BrokenPipeError):
            return  # the client went away (it stopped following)
        with contextlib.suppress(asyncssh.Error, OSError):
            process.exit(status)

    async def _workerctl(self, process: asyncssh.SSHServerProcess[Any], argv: list[str]) -> int:
        if not argv or argv[0] != "workerctl" or len(argv) < 2:
            process.stderr.write(b"cheap worker: only workerctl is answered\n")
            return 127
        command, args = argv[1], argv[2:]
        worker = self.worker
        if command in ("status", "cuzk-counters", "cuzk-status"):
            answer = worker.status() if command == "status" else worker.counters()
            process.stdout.write(json.dumps(answer).encode() + b"\n")
            return 0
        if command == "session":  # worker-image/workerctl's cmd_session
            await _until_closed(process, self._session(process))
            return 0
        if command == "events":
            await _until_closed(process, self._events(process, args))
            return 0
        if command == "logs" and args and args[0] in LOG_SOURCES:
            await _until_closed(process, self._logs(process, args[0], args[1:]))
            return 0
        process.stderr.write(f"workerctl: unknown command {command!r}\n".encode())
        return 2

    async def _session(self, process: asyncssh.SSHServerProcess[Any]) -> None:
        """A read per line in, `STATUS JSON` per line out, until the client closes it."""
        while line := await process.stdin.readline():
            name = line.decode(errors="replace").strip()
            if name in ("status", "cuzk-counters", "cuzk-status"):
                answer = self.worker.status() if name == "status" else self.worker.counters()
                process.stdout.write(b"0 " + json.dumps(answer).encode() + b"\n")
            else:
                process.stdout.write(b"2 null\n")

    async def _events(self, process: asyncssh.SSHServerProcess[Any], args: list[str]) -> None:
        after = int(args[args.index("--after") + 1]) if "--after" in args else 0
        if "--follow" not in args and "-f" not in args:
            for line in self.worker.events[after:]:
                process.stdout.write(line.encode() + b"\n")
            return
        async for line in self.worker.follow_events(after):
            process.stdout.write(line.encode() + b"\n")
            await process.stdout.drain()

    async def _logs(
        self, process: asyncssh.SSHServerProcess[Any], source: str, args: list[str]
    ) -> None:
        tail = int(args[args.index("--tail") + 1]) if "--tail" in args else 200
        follow = "--follow" in args or "-f" in args
        script = self.worker.script
        total = tail if not follow else script.log_total
        rate = script.log_rate if follow else None
        cycle = _log_cycle(source)
        n = 0
        while total is None or n < total:
            # Rate-limited: a tenth of a second's lines per write; a firehose: a chunk's worth.
            count = max(1, int(rate / 10)) if rate else cycle.per_chunk
            if total is not None:
                count = min(count, total - n)
            process.stdout.write(cycle.take(n, count, time.time()))
            await process.stdout.drain()
            n += count
            if rate:
                await asyncio.sleep(count / rate)


class _LogCycle:
    """A source's lines, made once and sent round and round with the time of sending: a log
    firehose costs the simulator a copy per chunk, not a format per line."""

    SIZE = 512
    _EPOCH = _line_ts(0.0).encode()

    def __init__(self, source: str) -> None:
        lines = [(log_line(source, n, 0.0) + "\n").encode() for n in range(self.SIZE)]
        self.block = b"".join(lines)
        self.starts = [0]
        for line in lines:
            self.starts.append(self.starts[-1] + len(line))
        self.per_chunk = max(1, self.SIZE * _CHUNK // len(self.block))

    def take(self, first: int, count: int, now: float) -> bytes:
        """Lines ``first`` .. ``first + count - 1`` (round the cycle), stamped ``now``."""
        parts = []
        while count > 0:
            i = first % self.SIZE
            j = min(self.SIZE, i + count)
            parts.append(self.block[self.starts[i] : self.starts[j]])
            count -= j - i
            first += j - i
        return b"".join(parts).replace(self._EPOCH, _line_ts(now).encode())


_CYCLES: dict[str, _LogCycle] = {}


def _log_cycle(source: str) -> _LogCycle:
    cycle = _CYCLES.get(source)
    if cycle is None:
        cycle = _CYCLES[source] = _LogCycle(source)
    return cycle


async def _until_closed(process: asyncssh.SSHServerProcess[Any], work: Awaitable[None]) -> None:
    """Run `work` until it ends or the client closes the channel (it stopped following)."""
    task = asyncio.ensure_future(work)
    closed = asyncio.ensure_future(process.channel.wait_closed())
    try:
        await asyncio.wait({task, closed}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        closed.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
    if task.done() and not task.cancelled():
        task.result()


class PortRange:
    """SSH ports handed out below the kernel's ephemeral range (32768 and up on Linux): the
    cloud reports a port at create and the server binds it at running, and in between an
    outgoing connection (hundreds, on a fleet) must not take it."""

    def __init__(self, start: int = 20_000, end: int = 32_000) -> None:
        self._next = start
        self._end = end

    def __call__(self) -> int:
        while self._next < self._end:
            port = self._next
            self._next += 1
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
            return port
        raise RuntimeError(f"no free port left below {self._end}")


class CheapWorkerHost:
    """The worker side of a `SimCloud` with cheap workers (same `attach` as SimWorkerHost)."""

    def __init__(
        self,
        cloud: SimCloud,
        root: Path,
        *,
        script: CheapScript | None = None,
        poll_interval: float = 0.5,
    ) -> None:
        self.cloud = cloud
        self.root = root
        self.script = script or CheapScript()
        self.poll_interval = poll_interval
        self.workers: dict[int, CheapWorker] = {}
        self.servers: dict[int, CheapSshd] = {}
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._monitor: asyncio.Task[None] | None = None

    def attach(self) -> None:
        """Hook into the cloud: real free ports for SSH, a worker on first `running`."""
        self.cloud.alloc_port = PortRange()
        self.cloud.on_running = self._on_running
        self.root.mkdir(parents=True, exist_ok=True)
        if self._monitor is None:
            self._monitor = asyncio.create_task(self._watch(), name="cheap-worker-monitor")

    async def _on_running(self, inst: dict[str, Any]) -> None:
        iid = int(inst["id"])
        sim = self.cloud.instance(iid)
        if sim is None or iid in self.servers:
            return
        try:
            min_rate = float(sim.env.get("MIN_RATE") or 0.0)
        except ValueError:
            min_rate = 0.0
        rng = random.Random(self.script.seed * 1_000_003 + iid)
        worker = CheapWorker(iid, min_rate, self.script, rng, image=sim.image or "unknown")
        root = self.root / f"instance-{iid}"
        (root / "run").mkdir(parents=True, exist_ok=True)
        sshd = CheapSshd(worker, root, self.cloud, asyncssh.generate_private_key("ssh-ed25519"))
        await sshd.start(sim.ssh_port)
        self.workers[iid] = worker
        self.servers[iid] = sshd
        self._tasks[iid] = asyncio.create_task(worker.run(), name=f"cheap-worker-{iid}")

    async def _watch(self) -> None:
        """Drive the cloud's lifecycle; stop the workers of instances that are gone."""
        while True:
            await asyncio.sleep(self.poll_interval)
            try:
                await self.cloud.tick()
                for iid in list(self.servers):
                    inst = self.cloud.instance(iid)
                    if inst is None or self.cloud.status_of(inst)[0] != "running":
                        await self.stop_instance(iid)
            except Exception:
                log.exception("cheap worker monitor")

    async def stop_instance(self, iid: int) -> None:
        task = self._tasks.pop(iid, None)
        if task is not None:
            task.cancel()
        self.workers.pop(iid, None)
        sshd = self.servers.pop(iid, None)
        if sshd is not None:
            await sshd.stop()

    async def close(self) -> None:
        if self._monitor is not None:
            self._monitor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._monitor
            self._monitor = None
        for iid in list(self.servers):
            await self.stop_instance(iid)


__all__ = ["CheapScript", "CheapSshd", "CheapWorker", "CheapWorkerHost", "PortRange", "log_line"]
