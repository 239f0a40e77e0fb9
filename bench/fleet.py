"""Engine at fleet scale: one engine following hundreds of simulated workers over real SSH on
loopback, with 10,000 offers in the market; and the scale curve to a thousand workers.

    .venv/bin/python -m bench.fleet [--quick] [--profile] [--workers N] [--scale]

The simulated cloud runs in a process of its own (`--serve`: a `SimCloud` of ~10,000 offers
served over HTTP by uvicorn, with `vastsim.cheap` workers: a real SSH server per instance
whose `workerctl` is answered from a scripted timeline), so this process holds the engine
alone and its CPU time and peak RSS are the engine's (plus this harness, which only waits).

The engine (the real `Engine`, `SshPool`, `VastClient` over HTTP with its production pacing,
SQLite store in a temporary directory) rents the workers itself (`deploy`, manual mode; the
machines picked from a search of the whole market), then follows them: events over `workerctl
events --follow`, cuzk counters on a cadence (on each worker's `workerctl session`), a
reconcile step on a cadence. Its target is one above the fleet and the fleet $/h cap is tiny,
so every step that finds its offers stale searches and ranks the market and then declines to
rent (`fleet_dph_cap`): the heaviest step the engine takes. Measured:

- ramp: every worker from rent to proving (~10 events each in a few seconds); its event delays
  include discovery (a worker is followed from the first step that sees it running);
- steady window, the engine as shipped (the default filter, at most 500 offers a search): CPU
  share (process CPU time / wall), each event's delay from its `ts` (the worker's wall clock
  when it wrote it) to the engine's decision (`handle_worker_event` returning, the store row
  written), peak RSS (`fleet.peak_rss_mb`, VmHWM);
- ticks: `engine.step()` with a forced offer refresh (search + parse + rank + publish + the
  reconcile of every worker), wall and the step's own CPU (bench/owncpu.py: its own resumes
  and its queries' SQL, not the followers' work meanwhile; `*_process_cpu_ms` is the whole
  process's), as a ratio to `json.loads` of the same answer timed in a process of its own just
  before each step (the median of the per-step ratios): `fleet.default.*` for the default
  query, `fleet.*` with every one of the 10,000 offers returned (then `fleet.peak_rss_10k_mb`);
  and steps at target (no search): `step_cpu_ms_per_worker`;
- the scale curve (issue 32): the same at 50, 200, 500 and 1,000 workers, each in a process of
  its own (its own peak RSS), as `fleet.scale.<workers>.<figure>`.

Load is harsher than production on purpose (see `Plan`): events ~25x a real fleet's rate,
counters read 3x as often, steps 6x as often.

One file: the cloud's process, the instrumented engine, the json.loads baseline's process and
the scale curve's are one measurement, each started by this module as `--serve`, `--point` or
`--json-baseline`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import asyncssh
import httpx

from bench.common import Goal, peak_rss_mb, percentile, progress, ratio, rss_mb
from bench.owncpu import Meter, install_sql_meter, measured
from vastui.config import Config
from vastui.domain.reports import WorkerEvent
from vastui.engine.engine import Engine, EngineSettings
from vastui.ssh import SshPool, StorePins
from vastui.store import Store
from vastui.vast.client import DEFAULT_PACING, VastClient
from vastui.vast.query import build_search_body

API_KEY = "bench-fleet-key"
WIDE = "verified=any external=any"  # every offer of the market comes back
OFFERS_LIMIT = 10_000

GOALS = [
    Goal("fleet.tick_cpu_ratio_vs_json", "<=", 2.0, "the step's own CPU searching all 10,000 "
         "offers with 200 workers, ÷ json.loads of the answer timed just before each step"),
    Goal("fleet.peak_rss_mb", "<=", 200.0, "engine process, default offers query"),
    Goal("fleet.peak_rss_10k_mb", "<=", 200.0, "engine process, 10,000 offers per search"),
    Goal("fleet.event_to_decision_p95_s", "<=", 1.0, "steady window"),
    Goal("fleet.cpu_share", "<=", 1.0, "cores used by the engine process, steady window"),
    Goal("fleet.scale.1000.event_to_decision_p95_s", "<=", 1.0, "1,000 workers, steady window"),
    Goal("fleet.scale.1000.event_to_decision_max_s", "<=", 2.0, "1,000 workers, steady window"),
    Goal("fleet.scale.1000.cpu_share", "<=", 0.5, "1,000 workers: cores, steady window"),
    Goal("fleet.scale.1000.peak_rss_mb", "<=", 300.0, "1,000 workers: the engine process"),
    Goal("fleet.scale.step_cpu_per_worker_1000_vs_50", "<=", 1.3,
         "a step's own CPU per worker at 1,000 ÷ at 50"),
]  # fmt: skip


@dataclass(frozen=True)
class Plan:
    workers: int = 200
    hosts: int = 1760  # ~10,200 offers in the world, 10,000 returned
    steady_s: float = 30.0
    ticks: int = 4
    poll_s: float = 5.0  # production: 30
    offers_refresh_s: float = 30.0  # production: 120
    prove_poll_s: float = 20.0  # production: proving.poll_s = 60
    progress_every: float = 10.0  # a prove progress event per worker this often (production: ~0)
    stage_gap: float = 0.7  # between a worker's lifecycle events
    ramp_timeout_s: float = 90.0

    @classmethod
    def quick(cls) -> Plan:
        return cls(
            workers=40, steady_s=4.0, ticks=2, ramp_timeout_s=20.0, stage_gap=0.3,
            progress_every=2.0,
        )  # fmt: skip


@dataclass
class Probe:
    """What the instrumented engine records."""

    delays: list[tuple[float, float]] = field(default_factory=list)  # (decided at, delay s)
    proving: set[int] = field(default_factory=set)  # workers whose prove start was decided
    late: list[tuple[float, int, str, float]] = field(default_factory=list)  # delay, worker,
    # event, decided at
    # at, wall, the step's own CPU (bench/owncpu.py), searched, the process's CPU meanwhile
    steps: list[tuple[float, float, float, bool, float]] = field(default_factory=list)


install_sql_meter()  # the step's queries are its own CPU too (bench/owncpu.py)


class TimedEngine(Engine):
    """The engine, timing each decision on a worker event and each step."""

    probe: Probe

    async def handle_worker_event(
        self, vast_id: int, event: WorkerEvent, *, position: int | None = None
    ) -> bool:
        live = await super().handle_worker_event(vast_id, event, position=position)
        if event.ts is not None:
            now = time.time()
            self.probe.delays.append((now, now - event.ts))
            if now - event.ts > 2.0:  # what a late decision was, for the person reading
                what = f"{event.stage}/{event.event}#{position}"
                self.probe.late.append((now - event.ts, vast_id, what, now))
        if (event.stage, event.event) == ("prove", "start") and live:
            self.probe.proving.add(vast_id)
        return live

    async def step(self) -> None:
        before = self._offers_at
        meter = Meter()
        wall0, cpu0 = time.perf_counter(), time.process_time()
        await measured(super().step(), meter)
        searched = self._offers_at is not None and self._offers_at != before
        self.probe.steps.append((
            wall0, time.perf_counter() - wall0, meter.total, searched,
            time.process_time() - cpu0,
        ))  # fmt: skip


# -- the simulated cloud, in its own process -----------------------------------------------


async def _serve(args: argparse.Namespace) -> None:
    from vastsim import ScaledClock, SimCloud
    from vastsim.cheap import CheapScript, CheapWorkerHost
    from vastsim.server import serve

    cloud = SimCloud(
        seed=11, speed=100.0, clock=ScaledClock(100.0), api_key=API_KEY, hosts=args.hosts,
        credit=1e12,
    )  # fmt: skip
    script = CheapScript(
        stage_gap=args.stage_gap, progress_every=args.progress_every or None,
        log_total=args.log_total or None, log_rate=args.log_rate or None,
    )  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="vastui-bench-fleet-") as tmp:
        host = CheapWorkerHost(cloud, Path(tmp), script=script, poll_interval=0.2)
        host.attach()
        task = asyncio.current_task()
        assert task is not None
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
        try:
            await serve(
                cloud, ready=lambda port: print(f"READY http://127.0.0.1:{port}", flush=True)
            )
        except asyncio.CancelledError:
            pass
        finally:
            await host.close()


class Cloud:
    """The cloud process: started, its URL read, its CPU time sampled, stopped."""

    def __init__(
        self, hosts: int, *, progress_every: float = 10.0, stage_gap: float = 1.0,
        log_total: int = 0, log_rate: float = 50.0,
    ) -> None:  # fmt: skip
        """``log_total`` 0: followed logs never end; ``log_rate`` 0: as fast as SSH takes them."""
        argv = [
            sys.executable, "-m", "bench.fleet", "--serve", "--hosts", str(hosts),
            "--progress-every", str(progress_every), "--stage-gap", str(stage_gap),
            "--log-total", str(log_total), "--log-rate", str(log_rate),
        ]  # fmt: skip
        root = Path(__file__).resolve().parent.parent
        self.proc = subprocess.Popen(argv, cwd=root, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        if not line.startswith("READY "):
            self.stop()
            raise RuntimeError(f"the simulated cloud did not start: {line!r}")
        self.url = line.split()[1]

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# -- the engine, here ----------------------------------------------------------------------


def _config(workers: int) -> Config:
    base = Config()
    return replace(
        base,
        fleet=replace(
            base.fleet,
            name="bench",
            target_workers=0,
            max_concurrent_benchmarks=workers + 10,
            max_total_dph=1e6,
        ),
        # no tunnels: the cheap workers have no Lotus to reach
        ssh=replace(base.ssh, lotus_api="", curio_db="", curio_db_cql=""),
    )


def _cpu() -> float:
    """CPU seconds of this process, every thread (aiosqlite's included)."""
    return time.process_time()


async def _engine(
    cloud: Cloud, plan: Plan, tmp: Path, profile: bool, full: bool = True
) -> dict[str, Any]:
    key = asyncssh.generate_private_key("ssh-ed25519")
    public_key = key.export_public_key().decode().strip()
    store = await Store.open(tmp / "fleet.db")
    # No pacing while the bench rents its fleet (Vast's 1 s between creates would take minutes),
    # then the client's production pacing (the pacer reads this dict): a list of 200 instances
    # is 8 pages of 25, each paced.
    pacing: dict[str, float] = {}
    client = VastClient(API_KEY, cloud.url, pacing=pacing, timeout=120.0)
    pool = SshPool(
        client_key=key, pins=StorePins(store), connect_timeout=30.0, backoff=(0.2, 2.0, 2.0)
    )
    settings = EngineSettings(
        poll_interval=plan.poll_s, offers_refresh=plan.offers_refresh_s,
        prove_poll=plan.prove_poll_s,
    )  # fmt: skip
    config = _config(plan.workers)
    engine = TimedEngine(config, store, client, ssh=pool, public_key=public_key, settings=settings)
    engine.probe = probe = Probe()
    figures: dict[str, Any] = {"fleet.workers": plan.workers}
    baseline: JsonBaseline | None = None
    try:
        # The engine as shipped: the default filter, at most 500 offers per search.
        figures |= await _follow(engine, cloud, plan, profile, pacing)
        if not full:  # a point of the scale curve: the steady window and steps at target
            figures |= await _ticks(engine, probe, plan, "fleet", at_target=True)
            figures["fleet.peak_rss_mb"] = peak_rss_mb()
            return figures
        baseline = JsonBaseline(cloud.url, engine.config)
        figures |= await _ticks(
            engine, probe, plan, "fleet.default", at_target=True, baseline=baseline
        )
        figures["fleet.default.offers_returned"] = baseline.offers
        figures["fleet.default.payload_mb"] = baseline.payload_mb
        baseline.close()
        figures["fleet.peak_rss_mb"] = peak_rss_mb()
        # Every one of the market's 10,000 offers returned by each search.
        engine.config = replace(
            engine.config, offers=replace(engine.config.offers, filter=WIDE, limit=OFFERS_LIMIT)
        )
        baseline = JsonBaseline(cloud.url, engine.config)
        profiler = _profiler(profile)
        figures |= await _ticks(engine, probe, plan, "fleet", at_target=False, baseline=baseline)
        _profile_report(profiler, "ticks searching all 10,000 offers")
        figures["fleet.offers_returned"] = baseline.offers
        figures["fleet.payload_mb"] = baseline.payload_mb
        figures["fleet.peak_rss_10k_mb"] = peak_rss_mb()
    finally:
        if baseline is not None:
            baseline.close()
        await engine.close()
        await client.aclose()
        await store.close()
    return figures


async def _rent(engine: Engine, plan: Plan) -> dict[str, Any]:
    """The engine rents the fleet itself, by hand (target 0), while its loop runs. The search
    that picks the machines returns the whole market (the default returns 500 offers: fewer
    distinct machines than a large fleet needs); the engine's own filter is put back after."""
    shipped = engine.config
    engine.config = replace(
        shipped, offers=replace(shipped.offers, filter=WIDE, limit=OFFERS_LIMIT)
    )
    started = time.perf_counter()
    offers = await engine.refresh_offers(force=True)
    first_search = time.perf_counter() - started
    engine.config = replace(engine.config, offers=shipped.offers)
    picks, machines = [], set()
    for ranked in offers:
        if ranked.offer.machine_id not in machines:
            machines.add(ranked.offer.machine_id)
            picks.append(ranked.offer.id)
        if len(picks) == plan.workers:
            break
    if len(picks) < plan.workers:
        raise RuntimeError(f"the market has {len(picks)} distinct machines, not {plan.workers}")
    progress(f"fleet: {len(offers):,} offers ranked; renting {len(picks)} workers")
    started = time.perf_counter()
    for offer_id in picks:  # as the console rents: a command, carried out by the engine
        await engine.store.commands.submit("deploy", {"offer_id": offer_id}, source="bench")
        await engine.run_commands()
    engine._offers_changed(None)  # the next search is the engine's own, with its filter
    return {
        "fleet.rent_search_offers": len(offers),
        "fleet.rent_search_ms": round(first_search * 1000, 1),
        "fleet.rent_each_ms": round((time.perf_counter() - started) / len(picks) * 1000, 2),
    }


async def _follow(
    engine: TimedEngine, cloud: Cloud, plan: Plan, profile: bool, pacing: dict[str, float]
) -> dict[str, Any]:
    """Rent the fleet, ramp every worker to proving, then a steady window of events, counters
    and steps."""
    probe = engine.probe
    stop = asyncio.Event()
    runner = asyncio.create_task(engine.run(stop))
    profiler = _profiler(profile)
    started = time.perf_counter()
    figures = await _rent(engine, plan)
    pacing.update(DEFAULT_PACING)
    # One above the fleet with a $/h cap no offer fits: each step with stale offers searches
    # and ranks the market, and rents nothing.
    engine.config = replace(
        engine.config,
        fleet=replace(engine.config.fleet, target_workers=plan.workers + 1, max_total_dph=0.01),
    )
    while time.perf_counter() - started < plan.ramp_timeout_s:
        await asyncio.sleep(0.25)
        if len(probe.proving) >= plan.workers:
            break
    ramp = time.perf_counter() - started
    progress(f"fleet: {len(probe.proving)}/{plan.workers} proving after {ramp:.1f} s; steady")
    ramp_delays = [d for _, d in probe.delays]
    _profile_report(profiler, "rent and ramp")
    profiler = _profiler(profile)
    wall0, cpu0, cloud0 = time.time(), _cpu(), cloud.cpu_seconds()
    steps0 = len(probe.steps)
    rss = []
    while time.time() - wall0 < plan.steady_s:
        await asyncio.sleep(1.0)
        rss.append(rss_mb())
    wall, cpu, cloud_cpu = time.time() - wall0, _cpu() - cpu0, cloud.cpu_seconds() - cloud0
    steps = len(probe.steps) - steps0
    _profile_report(profiler, "steady window")
    stop.set()
    await runner
    delays = [d for at, d in probe.delays if at >= wall0]
    for window, late in (
        ("ramp", [x for x in probe.late if x[3] < wall0]),
        ("steady window", [x for x in probe.late if x[3] >= wall0]),
    ):
        if late:
            shown = ", ".join(f"{w} {what} {d:.1f}s" for d, w, what, _ in sorted(late)[-8:])
            progress(f"fleet: {len(late)} decisions over 2 s late in the {window}: {shown}")
    figures |= {
        "fleet.proving": len(probe.proving),
        "fleet.ramp_s": round(ramp, 1),
        "fleet.cpu_share": round(cpu / wall, 3),
        "fleet.cloud_cpu_share": round(cloud_cpu / wall, 3),
        "fleet.events_per_s": round(len(delays) / wall, 1),
        "fleet.steps_in_window": steps,
        "fleet.rss_steady_mb": max(rss, default=rss_mb()),
    }
    figures |= _delays("fleet.event_to_decision", delays)
    figures |= _delays("fleet.ramp_event_to_decision", ramp_delays)
    return figures


def _delays(prefix: str, delays: list[float]) -> dict[str, Any]:
    if not delays:
        return {}
    return {
        f"{prefix}_median_s": round(statistics.median(delays), 4),
        f"{prefix}_p95_s": round(percentile(delays, 95), 4),
        f"{prefix}_max_s": round(max(delays), 4),
    }


async def _ticks(
    engine: Engine, probe: Probe, plan: Plan, prefix: str, at_target: bool,
    baseline: JsonBaseline | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Steps with a forced offer refresh (below target, nothing rentable), then, if asked,
    steps at target (no search); the followers keep running meanwhile. Each step's CPU is its
    own (bench/owncpu.py), each search step's ratio to a `json.loads` of the same answer timed
    just before it (``baseline``): the machine's pace at that moment, not at another."""
    runs = [("tick", plan.workers + 1, 0.0)]
    if at_target:
        runs.append(("tick_at_target", plan.workers, 1e9))
    out: dict[str, Any] = {}
    for label, target, refresh in runs:
        engine.config = replace(
            engine.config, fleet=replace(engine.config.fleet, target_workers=target)
        )
        engine.settings.offers_refresh = refresh
        first = len(probe.steps)
        loads: list[float] = []
        for _ in range(plan.ticks):
            if baseline is not None and label == "tick":
                loads.append(await baseline.loads_s())
            await engine.step()
        steps = probe.steps[first:]
        walls, cpus, process = [s[1] for s in steps], [s[2] for s in steps], [s[4] for s in steps]
        out[f"{prefix}.{label}_wall_ms"] = round(statistics.median(walls) * 1000, 1)
        out[f"{prefix}.{label}_cpu_ms"] = round(statistics.median(cpus) * 1000, 1)
        out[f"{prefix}.{label}_process_cpu_ms"] = round(statistics.median(process) * 1000, 1)
        if label == "tick_at_target":
            out[f"{prefix}.step_cpu_ms_per_worker"] = round(
                statistics.median(cpus) * 1000 / plan.workers, 3
            )
        if loads:
            ratios = [cpu / base for cpu, base in zip(cpus, loads, strict=True)]
            out[f"{prefix}.json_loads_ms"] = round(statistics.median(loads) * 1000, 2)
            out[f"{prefix}.tick_cpu_ratio_vs_json"] = round(statistics.median(ratios), 3)
            out[f"{prefix}.tick_cpu_ratio_vs_json_max"] = round(max(ratios), 3)
            out[f"{prefix}.tick_wall_ratio_vs_json"] = ratio(
                statistics.median(walls), statistics.median(loads)
            )
    return out


class JsonBaseline:
    """`json.loads` of the very answer the engine's search receives, timed in a process of its
    own (its 100+ MB of objects would be the engine's peak RSS here) when asked: interleaved
    with the ticks, so that each step is compared with the machine's pace at its moment."""

    def __init__(self, url: str, config: Config) -> None:
        body = build_search_body(
            config.offers.filter, order=config.offers.order, limit=config.offers.limit,
            allocated_storage=config.fleet.disk_gb,
        )  # fmt: skip
        argv = [sys.executable, "-m", "bench.fleet", "--json-baseline", url, json.dumps(body)]
        root = Path(__file__).resolve().parent.parent
        self.proc = subprocess.Popen(
            argv, cwd=root, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert self.proc.stdout is not None
        ready = self.proc.stdout.readline().split()
        if not ready or ready[0] != "READY":
            self.close()
            raise RuntimeError(f"the json.loads baseline did not start: {ready!r}")
        self.offers, self.payload_mb = int(ready[1]), float(ready[2])

    async def loads_s(self) -> float:
        """The median of three `json.loads` of the answer, now (seconds)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        line = await asyncio.to_thread(self.proc.stdout.readline)
        return float(line)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def _baseline_child(url: str, body: str) -> None:
    """`--json-baseline URL BODY`: fetch the answer once, then time `json.loads` of it for each
    line read from stdin."""
    answer = httpx.post(
        f"{url}/api/v0/bundles/", json=json.loads(body),
        headers={"Authorization": f"Bearer {API_KEY}"}, timeout=120.0,
    )  # fmt: skip
    payload = answer.content
    offers = len(json.loads(payload)["offers"])
    print(f"READY {offers} {len(payload) / 1e6:.2f}", flush=True)
    for _ in sys.stdin:
        samples = []
        for _ in range(3):
            started = time.perf_counter()
            json.loads(payload)
            samples.append(time.perf_counter() - started)
        print(f"{statistics.median(samples):.6f}", flush=True)


def _profiler(enabled: bool) -> Any:
    if not enabled:
        return None
    from pyinstrument import Profiler

    profiler = Profiler(async_mode="disabled")
    profiler.start()
    return profiler


def _profile_report(profiler: Any, what: str) -> None:
    if profiler is None:
        return
    profiler.stop()
    print(f"--- profile: {what}", file=sys.stderr)
    print(profiler.output_text(unicode=True, color=False, show_all=False), file=sys.stderr)


async def _measure(plan: Plan, profile: bool, full: bool = True) -> dict[str, Any]:
    progress(f"fleet: starting a cloud of ~{plan.hosts * 5.8:,.0f} offers")
    cloud = Cloud(plan.hosts, progress_every=plan.progress_every, stage_gap=plan.stage_gap)
    try:
        with tempfile.TemporaryDirectory(prefix="vastui-bench-engine-") as tmp:
            return await _engine(cloud, plan, Path(tmp), profile, full)
    finally:
        cloud.stop()


# The scale curve (issue 32): one engine process per fleet size, so that each peak RSS is
# its own; these figures of each point go to results.json as fleet.scale.<workers>.<figure>.
SCALE = (50, 200, 500, 1000)
SCALE_QUICK = (20, 40)
SCALE_FIGURES = (
    "event_to_decision_p95_s", "event_to_decision_max_s", "event_to_decision_median_s",
    "cpu_share", "cloud_cpu_share", "peak_rss_mb", "step_cpu_ms_per_worker",
    "tick_at_target_cpu_ms", "tick_at_target_wall_ms", "tick_at_target_process_cpu_ms",
    "events_per_s", "ramp_s", "proving",
)  # fmt: skip


def _point(workers: int, quick: bool) -> dict[str, Any]:
    """One point of the scale curve, measured in a process of its own."""
    argv = [sys.executable, "-m", "bench.fleet", "--point", "--workers", str(workers)]
    if quick:
        argv.append("--quick")
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(argv, cwd=root, stdout=subprocess.PIPE, text=True, check=True)
    line = done.stdout.strip().splitlines()[-1]
    if not line.startswith("POINT "):
        raise RuntimeError(f"scale point {workers}: no figures ({line[:200]!r})")
    measured_ = json.loads(line[len("POINT ") :])
    return {
        f"fleet.scale.{workers}.{name}": measured_[f"fleet.{name}"]
        for name in SCALE_FIGURES
        if f"fleet.{name}" in measured_
    }


def _scale(quick: bool) -> dict[str, Any]:
    sizes = SCALE_QUICK if quick else SCALE
    out: dict[str, Any] = {}
    for workers in sizes:
        progress(f"fleet: scale point, {workers} workers")
        out |= _point(workers, quick)
    low, high = sizes[0], sizes[-1]
    per_worker = [out.get(f"fleet.scale.{n}.step_cpu_ms_per_worker") for n in (low, high)]
    if all(isinstance(v, int | float) and v > 0 for v in per_worker):
        out[f"fleet.scale.step_cpu_per_worker_{high}_vs_{low}"] = ratio(
            per_worker[1], per_worker[0]
        )
    return out


def _point_plan(workers: int, quick: bool) -> Plan:
    base = Plan.quick() if quick else Plan()
    # Renting and ramping a thousand workers takes minutes: the ramp's limit grows with them.
    ramp = base.ramp_timeout_s + 0.3 * workers
    return replace(base, workers=workers, ticks=3, ramp_timeout_s=ramp)


def run(quick: bool) -> dict[str, Any]:
    figures = asyncio.run(_measure(Plan.quick() if quick else Plan(), profile=False))
    return figures | _scale(quick)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="pyinstrument the ramp, the steady window and the 10,000-offer ticks",
    )
    parser.add_argument("--workers", type=int)
    parser.add_argument(
        "--scale", action="store_true", help=f"only the scale curve ({', '.join(map(str, SCALE))})"
    )
    parser.add_argument("--point", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--json-baseline", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--hosts", type=int, default=Plan.hosts, help=argparse.SUPPRESS)
    parser.add_argument("--progress-every", type=float, default=10.0, help=argparse.SUPPRESS)
    parser.add_argument("--stage-gap", type=float, default=1.0, help=argparse.SUPPRESS)
    parser.add_argument("--log-total", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--log-rate", type=float, default=50.0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(_serve(args))
        return
    if args.json_baseline:
        _baseline_child(*args.json_baseline)
        return
    if args.point:
        plan = _point_plan(args.workers or Plan.workers, args.quick)
        figures = asyncio.run(_measure(plan, args.profile, full=False))
        print("POINT " + json.dumps(figures), flush=True)
        return
    if args.scale:
        figures = _scale(args.quick)
    else:
        plan = Plan.quick() if args.quick else Plan()
        if args.workers:
            plan = replace(plan, workers=args.workers)
        figures = asyncio.run(_measure(plan, args.profile))
    for key, value in figures.items():
        print(f"{key:40} {value}")


if __name__ == "__main__":
    main()
