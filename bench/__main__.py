"""`python -m bench [--quick] [--only NAME,...]`: run vastui's benchmarks, print a table, and
write bench/results.json (the machine, every figure, each goal met or missed).

Each module runs in its own child process (`--child`): its imports, memory peak and event
loop do not leak into the next one's figures, and one that crashes or hangs is reported in
the table (with a time limit), not fatal to the run.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.common import (
    BENCH_DIR,
    RESULTS_PATH,
    Goal,
    clean_figures,
    load_results,
    machine,
    merge_results,
    owner,
    write_results,
)

# name → (what it measures, time limit in seconds: quick, full). The full run's limits add up
# to the 10 minutes; --quick's to 2.
MODULES: dict[str, tuple[str, int, int]] = {
    "offers": ("offer pipeline: parse + rank 10,000 offers vs json.loads", 20, 45),
    "startup": ("`vastui offers --json` process vs `vastai search offers --raw`", 25, 45),
    "keys": ("key to screen in a real terminal vs a minimal Textual app", 45, 180),
    "detail": ("the detail view opening, drawn and settled, vs a minimal app's modal", 45, 150),
    "fleet": (
        "engine following 200 workers: CPU, RSS, tick, event-to-decision; the scale curve to "
        "1,000 workers",
        150,
        1500,
    ),
    "logstream": ("log lines/s into the log pane vs a bare asyncssh reader", 20, 90),
    "economics": (
        "vastui's policy vs the original's over a simulated week; the automatic target vs the "
        "best fixed one on the market's work",
        200,
        1500,
    ),
    # its own module (issue 43): 10 curves x 3 seeds on the priced market take most of an hour
    "demand": (
        "the automatic target vs the best fixed one on the priced market's work: margin, "
        "detection, false raises",
        900,
        4800,
    ),
    "cluster": (
        "curio's database: PostgreSQL start (wheel vs system), psycopg vs asyncpg, the reader",
        60,
        180,
    ),
}


def _stop(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds the module: its finally blocks stop what it started


def _child(name: str, quick: bool, out: Path) -> int:
    """Run one module in this process and write its figures and goals to `out`."""
    signal.signal(signal.SIGTERM, _stop)
    result: dict[str, Any] = {}
    try:
        module = importlib.import_module(f"bench.{name}")
        started = time.perf_counter()
        figures = module.run(quick)
        result["seconds"] = round(time.perf_counter() - started, 1)
        result["figures"] = figures if isinstance(figures, dict) else {}
        result["goals"] = [asdict(g) for g in getattr(module, "GOALS", [])]
    except (Exception, SystemExit) as exc:  # reported in the table, never a crash
        traceback.print_exc(file=sys.stderr)
        result["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
    out.write_text(json.dumps(result, default=str))
    return 0


def _run_module(name: str, quick: bool, timeout: int) -> dict[str, Any]:
    """One module in a child process: {"status", "seconds", "figures", "goals"}."""
    if not (BENCH_DIR / f"{name}.py").exists():
        return {"status": "missing", "figures": {}, "goals": []}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        argv = [sys.executable, "-m", "bench", "--child", name, "--child-out", str(out)]
        if quick:
            argv.append("--quick")
        started = time.perf_counter()
        # The module's stdout joins our stderr: stdout carries only the table. Its own session
        # (process group), so a module past its time is stopped with all it started.
        child = subprocess.Popen(
            argv, cwd=BENCH_DIR.parent, stdout=sys.stderr, start_new_session=True
        )
        try:
            child.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _stop_group(child)
            return {"status": f"timeout after {timeout}s", "figures": {}, "goals": []}
        except KeyboardInterrupt:  # its own session: ^C reaches only us, so pass it on
            _stop_group(child, grace=5.0)
            raise
        wall = round(time.perf_counter() - started, 1)
        if _group_alive(child.pid):  # the module left processes behind: stop them too
            _stop_group(child, grace=5.0)
        try:
            result = json.loads(out.read_text())
        except (OSError, ValueError):
            return {"status": "crashed (no result)", "seconds": wall, "figures": {}, "goals": []}
    if "error" in result:
        return {"status": f"failed: {result['error']}", "seconds": wall, "figures": {}, "goals": []}
    return {
        "status": "ok",
        "seconds": wall,
        "figures": result.get("figures", {}),
        "goals": result.get("goals", []),
    }


def _stop_group(child: subprocess.Popen[bytes], grace: float = 10.0) -> None:
    """SIGTERM to the module's process group (the module unwinds and stops what it started),
    then, after a grace, SIGKILL to whatever is left of that group. A no-op once it is empty."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        child.wait(timeout=grace)
    time.sleep(1.0)  # the leader's helpers got the SIGTERM too: a moment to finish
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.pid, signal.SIGKILL)
    child.wait()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.3f}".rstrip("0").rstrip(".") if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


def _print_table(modules: dict[str, dict[str, Any]], figures: dict[str, Any], goals: dict) -> None:
    width = max([len(k) for k in figures] + [20])
    for name, info in modules.items():
        print(f"== {name}: {info['status']} ({info.get('seconds', '-')} s)")
        ranges = info.get("ranges", {})
        for key in sorted(k for k in figures if owner(k) == name):
            line = f"   {key.ljust(width)}  {_fmt(figures[key]):>12}"
            if key in ranges and ranges[key][0] != ranges[key][1]:
                line += f"  [{_fmt(ranges[key][0])}–{_fmt(ranges[key][1])}]"
            verdict = goals.get(key)
            if verdict is not None:
                mark = {True: "met", False: "MISSED", None: "not measured"}[verdict["met"]]
                line += f"   goal {verdict['goal']}: {mark}"
            print(line)
    missing = [k for k, v in goals.items() if owner(k) in modules and v["met"] is None]
    for key in missing:
        print(f"   {key}: goal {goals[key]['goal']} not measured")


def median_outcome(outcomes: list[dict[str, Any]]) -> dict[str, Any]:
    """One outcome from several runs of a module: each numeric figure the median of the runs
    that measured it, its range noted; the status of the first run that failed, if any."""
    ok = [o for o in outcomes if o["status"] == "ok"]
    if not ok:
        return outcomes[0]
    if len(outcomes) == 1:
        return ok[0]
    figures: dict[str, Any] = {}
    ranges: dict[str, list[float]] = {}
    for key in dict.fromkeys(k for o in ok for k in o["figures"]):
        values = [o["figures"][key] for o in ok if key in o["figures"]]
        numbers = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
        if len(numbers) == len(values):
            figures[key] = statistics.median(numbers)
            ranges[key] = [min(numbers), max(numbers)]
        else:
            figures[key] = values[-1]
    failed = [o["status"] for o in outcomes if o["status"] != "ok"]
    return {
        "status": "ok" if not failed else f"ok in {len(ok)} of {len(outcomes)} runs ({failed[0]})",
        "seconds": round(sum(o.get("seconds", 0.0) for o in outcomes), 1),
        "runs": len(ok),
        "ranges": ranges,
        "figures": figures,
        "goals": ok[0]["goals"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short run (< 2 minutes)")
    parser.add_argument("--only", help=f"comma-separated modules: {','.join(MODULES)}")
    parser.add_argument("--out", type=Path, default=RESULTS_PATH, help="results file")
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument(
        "--runs", type=int, default=1, metavar="N",
        help="run each module N times; each figure is the median (its range is noted)",
    )  # fmt: skip
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--child-out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return _child(args.child, args.quick, args.child_out)

    names = list(MODULES) if not args.only else [n.strip() for n in args.only.split(",") if n]
    unknown = [n for n in names if n not in MODULES]
    if unknown:
        parser.error(f"unknown module(s) {', '.join(unknown)}; known: {', '.join(MODULES)}")
    info = machine()
    modules: dict[str, dict[str, Any]] = {}
    figures: dict[str, Any] = {}
    goals: dict[str, dict[str, Any]] = {}
    for name in names:
        what, quick_limit, full_limit = MODULES[name]
        print(f"bench {name}: {what}", file=sys.stderr, flush=True)
        outcomes = [
            _run_module(name, args.quick, quick_limit if args.quick else full_limit)
            for _ in range(max(1, args.runs))
        ]
        outcome = median_outcome(outcomes)
        clean, notes = clean_figures(name, outcome["figures"])
        figures.update(clean)
        for raw in outcome["goals"]:
            goal = Goal(**raw)
            goals[goal.figure] = goal.check(clean)
        modules[name] = {k: v for k, v in outcome.items() if k not in ("figures", "goals")}
        if notes:
            modules[name]["notes"] = notes
    _print_table(modules, figures, goals)
    if not args.no_write:
        merged = merge_results(load_results(args.out), info, modules, figures, goals, args.quick)
        write_results(merged, args.out)
        print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
