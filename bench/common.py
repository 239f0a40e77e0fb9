"""Shared harness for vastui's benchmarks: the machine, timing statistics, ratios, results.

The contract every bench module follows (bench/__main__.py runs them):
- `def run(quick: bool) -> dict[str, float | int | str]`: flat figures, keys prefixed by the
  module (`"offers.ratio_vs_json"`); progress may go to stderr, never to stdout.
- `GOALS: list[Goal]` (optional): the issue's goals over those figures.
Absolute times on this shared, noisy machine mean little; report ratios taken within one run
(`interleave` alternates the contenders so a burst of load hits all of them alike).
"""

from __future__ import annotations

import gc
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
RESULTS_PATH = BENCH_DIR / "results.json"
Figure = float | int | str


# -- the machine -------------------------------------------------------------------------


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)  # from the installed metadata: no import of the package
    except metadata.PackageNotFoundError:
        return "absent"


def machine() -> dict[str, Any]:
    """What the figures were measured on: CPU, cores usable, load, Python, library versions."""
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count() or 0
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = []
    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count() or 0,
        "cores_usable": usable,
        "load_average": load,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "textual": _version("textual"),
        "httpx": _version("httpx"),
        "vastui": _version("vastui"),
        "vastai": _version("vastai"),
    }


# -- timing ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Stats:
    """Seconds over repetitions."""

    samples: tuple[float, ...]

    @property
    def n(self) -> int:
        return len(self.samples)

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def p95(self) -> float:
        return percentile(self.samples, 95)

    @property
    def min(self) -> float:
        return min(self.samples)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.samples)

    def ms(self, prefix: str) -> dict[str, Figure]:
        """`{prefix.median_ms, prefix.p95_ms}`: the figures most benches report."""
        return {f"{prefix}.median_ms": ms(self.median), f"{prefix}.p95_ms": ms(self.p95)}


def percentile(samples: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile (no interpolation: a p95 is a value that was observed)."""
    if not samples:
        return math.nan
    ordered = sorted(samples)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


def ms(seconds: float, digits: int = 2) -> float:
    return round(seconds * 1000, digits)


def timeit(
    fn: Callable[[], object], repeat: int = 7, warmup: int = 1, *, collect: bool = True
) -> Stats:
    """Time `fn()` `repeat` times after `warmup` untimed calls. The garbage collector runs
    before each call (`collect`) and stays on during it: what a real caller pays."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeat):
        if collect:
            gc.collect()
        started = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - started)
    return Stats(tuple(samples))


def interleave(
    contenders: Mapping[str, Callable[[], object]], repeat: int = 7, warmup: int = 1
) -> dict[str, Stats]:
    """Time several functions round-robin (a, b, c, a, b, c, ...), so a burst of load from
    another process hits each alike; the ratio of their medians is then meaningful."""
    for _ in range(warmup):
        for fn in contenders.values():
            fn()
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(repeat):
        for name, fn in contenders.items():
            gc.collect()
            started = time.perf_counter()
            fn()
            samples[name].append(time.perf_counter() - started)
    return {name: Stats(tuple(s)) for name, s in samples.items()}


def ratio(numerator: float, denominator: float, digits: int = 3) -> float | None:
    """numerator / denominator, rounded; None when the denominator is not positive."""
    if not denominator > 0 or not math.isfinite(numerator):
        return None
    return round(numerator / denominator, digits)


def run_process(argv: Sequence[str], env: Mapping[str, str] | None = None) -> bytes:
    """Run a whole process to its exit and return its stdout; a non-zero exit is an error."""
    done = subprocess.run(argv, env=dict(env) if env else None, capture_output=True)
    if done.returncode != 0:
        tail = done.stderr.decode(errors="replace").strip().splitlines()[-1:]
        raise RuntimeError(f"{' '.join(argv[:3])}... exited {done.returncode}: {tail}")
    return done.stdout


def time_process(
    argv: Sequence[str], repeat: int = 5, env: Mapping[str, str] | None = None, warmup: int = 1
) -> Stats:
    """Wall time of a whole process, start to exit (`interleave` + `run_process` to compare)."""
    return timeit(lambda: run_process(argv, env), repeat=repeat, warmup=warmup, collect=False)


def _status_mb(field: str) -> float | None:
    """A memory figure of this process from /proc/self/status, in MB (None where there is none)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return None


def rss_mb() -> float:
    """This process's resident set now, in MB (0 where /proc has none)."""
    return _status_mb("VmRSS") or 0.0


def peak_rss_mb() -> float:
    """This process's peak resident set so far, in MB: VmHWM, its own memory's high-water
    mark. (getrusage's ru_maxrss carries across exec: a child started by a process of 150 MB
    reported 150 MB at once.)"""
    peak = _status_mb("VmHWM")
    if peak is not None:
        return peak
    import resource

    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def progress(message: str) -> None:
    """Progress for the person waiting: stderr, so a module's stdout stays clean."""
    print(f"  [{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# -- goals -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Goal:
    """The issue's goal over one figure: `figure op limit` (op is "<=" or ">=")."""

    figure: str
    op: str
    limit: float
    text: str = ""

    def check(self, figures: Mapping[str, Figure]) -> dict[str, Any]:
        value = figures.get(self.figure)
        verdict: dict[str, Any] = {"goal": f"{self.op} {self.limit:g}", "value": value}
        if self.text:
            verdict["text"] = self.text
        if not isinstance(value, int | float) or isinstance(value, bool) or math.isnan(value):
            verdict["met"] = None  # not measured in this run
            return verdict
        met = value <= self.limit if self.op == "<=" else value >= self.limit
        verdict["met"] = bool(met)
        # By how much: the factor between the value and the limit, >1 when missed.
        if value and self.limit:
            off = value / self.limit if self.op == "<=" else self.limit / value
            verdict["off_by"] = round(off, 3)
        return verdict


# -- results -----------------------------------------------------------------------------


def clean_figures(module: str, raw: Mapping[str, Any]) -> tuple[dict[str, Figure], list[str]]:
    """The module's figures as flat JSON scalars; anything else is dropped with a note."""
    figures: dict[str, Figure] = {}
    notes: list[str] = []
    for key, value in raw.items():
        if value is None:
            continue  # not measured
        if isinstance(value, bool):
            value = int(value)
        if isinstance(value, float) and not math.isfinite(value):
            notes.append(f"{key}: not finite ({value})")
            continue
        if not isinstance(value, int | float | str):
            notes.append(f"{key}: {type(value).__name__} is not a figure")
            continue
        if owner(key) != module:
            key = f"{module}.{key}"
        figures[key] = value
    return figures, notes


def load_results(path: Path = RESULTS_PATH) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


# Figures whose first segment is not their module's: the demand bench (bench/demand.py) keeps the
# names it had inside the economics module (issue 43 names them so)
PREFIX_OWNERS = {"economics.demand": "demand", "economics.margin": "demand"}


def owner(key: str) -> str:
    """The module a figure or goal key belongs to."""
    for prefix, module in PREFIX_OWNERS.items():
        if key == prefix or key.startswith(prefix + "."):
            return module
    return key.split(".")[0]


def merge_results(
    previous: Mapping[str, Any],
    machine_info: Mapping[str, Any],
    modules: Mapping[str, Mapping[str, Any]],
    figures: Mapping[str, Figure],
    goals: Mapping[str, Mapping[str, Any]],
    quick: bool,
) -> dict[str, Any]:
    """The new results.json: a module run now replaces its own figures and goals; modules not
    run keep theirs from before (`--only offers` leaves the keys benchmark's figures alone)."""
    ran = set(modules)
    old_modules = dict(previous.get("modules") or {})
    old_figures = {k: v for k, v in (previous.get("figures") or {}).items() if owner(k) not in ran}
    old_goals = {k: v for k, v in (previous.get("goals") or {}).items() if owner(k) not in ran}
    old_modules.update(modules)
    return {
        "machine": dict(machine_info),
        "written_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "quick": quick,
        "modules": dict(sorted(old_modules.items())),
        "figures": dict(sorted({**old_figures, **figures}.items())),
        "goals": dict(sorted({**old_goals, **goals}.items())),
    }


def write_results(results: Mapping[str, Any], path: Path = RESULTS_PATH) -> None:
    """Atomically: a reader never sees half a file."""
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(results, indent=2, sort_keys=False) + "\n")
    os.replace(tmp, path)


# -- shared inputs -----------------------------------------------------------------------

# Generated inputs (payloads) survive between runs here; delete the folder to regenerate.
CACHE_DIR = Path(os.environ.get("VASTUI_BENCH_CACHE") or "/tmp/vastui-bench")


def market_payload(n_offers: int = 10_000, seed: int = 1) -> bytes:
    """A realistic `POST /api/v0/bundles/` answer of `n_offers` offers: the simulator's market
    (every field Vast sends) searched with vastui's default filter, order and disk, as bytes.
    Generating the ~22,000-host world takes seconds, so the bytes are cached by (n, seed)."""
    path = CACHE_DIR / f"bundles-{n_offers}-{seed}.json"
    try:
        return path.read_bytes()
    except OSError:
        pass
    from vastsim import ManualClock, SimCloud
    from vastui.config import Config
    from vastui.vast.query import build_search_body

    config = Config()
    body = build_search_body(
        config.offers.filter,
        order=config.offers.order,
        limit=n_offers,
        allocated_storage=config.fleet.disk_gb,
    )
    hosts = max(40, n_offers * 22 // 10)  # about 1 offer in 13 passes the default filter
    while True:
        cloud = SimCloud(seed=seed, clock=ManualClock(), hosts=hosts)
        offers = cloud.search(body)["offers"]
        if len(offers) >= n_offers or hosts > n_offers * 20:
            break
        hosts = hosts * 3 // 2
    data = json.dumps({"offers": offers[:n_offers]}, separators=(", ", ": ")).encode()
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return data
