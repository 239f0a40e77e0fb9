"""`python -m reliability headline`: what an operator reads of a demo fleet, recorded.

A headless demo engine (`vastui --engine-only --demo`) runs the automatic target against a
pulse of demand; every few seconds the recorder reads its database (read-only, never migrating
it) and keeps what the strip, `vastui status` and the metrics would show at that moment (the
strip's own text, made by the console's own function), beside the raw counts behind them and
each worker's phase. `tests/test_headline_run.py` holds a recorded run to the promises: one
headline, moving only as the work does, and no stopped worker counted as proving anywhere.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from vastui.config import Config
from vastui.console.snapshot import Snapshot
from vastui.console.summary import StripState, strip_text
from vastui.domain.plan import PROOF_UP_GB, REQUEST_GB
from vastui.engine.monitor import Monitor, StepFacts
from vastui.engine.spend import bandwidth_cost, cluster_work
from vastui.metrics import FleetCollector
from vastui.status import delivery_lines
from vastui.store import Store, StoreNotCurrent

ROOT = Path(__file__).resolve().parent.parent
DEMAND = "pulse:30:200:2:6"


async def sample(db: Path, wall0: float) -> dict[str, Any] | None:
    """One reading of the database, as the operator's views make it; None before the engine
    has published its first status (or while the database is being created)."""
    try:
        store = await Store.open(db, migrate=False)
    except (StoreNotCurrent, OSError, ValueError):  # not there yet: the next sample
        return None
    except Exception as exc:  # mid-migration or locked: the next sample, said once
        print(f"sample skipped: {exc}", file=sys.stderr)
        return None
    async with store:
        status = await store.status.get()
        if status is None:
            return None
        records = await store.instances.all()
    snap = Snapshot(instances=records, engine_status=status, taken_at=status.updated_at)
    strip = strip_text(StripState(snap, status, None, (), None)).plain.split("\n")[0]
    scrape = _metrics(records, status)
    d = status.delivery
    return {
        "wall_s": round(time.monotonic() - wall0, 1),
        "sim_at": status.updated_at,
        "strip": strip,
        "status": delivery_lines(d),
        "delivery": None if d is None else d.to_json(),
        "metrics": scrape,
        "by_stage": dict(status.by_stage),
        "phases": {str(r.vast_id): r.phase for r in records if not r.killed},
        "target": status.target,
        "workers": status.workers,
        # every dollar of bandwidth billed so far: the one part of the window's cost that
        # may jump (a parameter fetch ending, a request downloaded)
        "bandwidth_total": round(sum(bandwidth_cost(r, status.updated_at) for r in records), 6),
        # the requests' and proofs' bandwidth is spread over each worker's proving time
        # (spend.bandwidth_cost): what of it leaves a window per hour
        "spread_dph": round(sum(_spread_dph(r, status.updated_at) for r in records), 6),
        "labels": {str(r.vast_id): r.label for r in records if not r.killed},
    }


def _spread_dph(rec: Any, now: float) -> float:
    """$/h of a worker's request and proof bandwidth as spend spreads it over its proving."""
    if rec.source != "vastui" or rec.proving_at is None:
        return 0.0
    end = rec.killed_at if rec.killed and rec.killed_at is not None else now
    if end <= rec.proving_at:
        return 0.0
    requests, proofs = cluster_work(rec)
    dollars = requests * REQUEST_GB * (rec.inet_down_cost or 0.0)
    dollars += proofs * PROOF_UP_GB * (rec.inet_up_cost or 0.0)
    return dollars * 3600.0 / (end - rec.proving_at)


def _metrics(records: list[Any], status: Any) -> dict[str, Any]:
    """The headline and the workers' stages as the engine's monitor puts them in a scrape."""
    monitor = Monitor(Config(), collector=FleetCollector())
    s = monitor._sample(StepFacts(now=status.updated_at, status=status), records, 0)
    return {
        "delivered_per_h": None if s.delivery is None else s.delivery.proofs_per_hour,
        "cost_per_paid": None if s.delivery is None else s.delivery.cost_per_paid,
        "worker_stages": {w.label: w.stage for w in s.workers},
    }


# Between two samples the window's cost moves by what the fleet was billed meanwhile (its $/h
# over the time between, its new bandwidth) and by what left the window: the $/h of an hour
# before over the same time, the bandwidth billed an hour before, and the requests' share
# (spend.bandwidth_cost spreads them over each worker's proving time: `spread_dph`). A little
# slack for the clock between one sample's reads.
COST_SLACK = 1.05
SHOWN = 5e-5 + 1e-9  # half the strip's last place ($0.0001), and a float's rounding
ABS_SLACK = 1e-4


def check(rows: list[dict[str, Any]]) -> list[str]:
    """What a recorded run breaks of the headline's promises, one line each (none: kept)."""
    out: list[str] = []
    rated = [r for r in rows if r.get("delivery")]
    sources = {r["delivery"]["source"] for r in rated}
    if len(sources) > 1:
        out.append(f"the headline changed definition during the run: {sorted(sources)}")
    for r in rows:
        out += _agree(r)
    times = [r["sim_at"] for r in rows]
    bandwidth = [r["bandwidth_total"] for r in rows]

    def billed_by(t: float) -> float:
        """The bandwidth billed by sim time ``t`` (0 before the run, linear between samples)."""
        if not times or t < times[0]:
            return 0.0
        i = bisect.bisect_right(times, t) - 1
        if i + 1 >= len(times):
            return bandwidth[-1]
        span = times[i + 1] - times[i]
        share = (t - times[i]) / span if span > 0 else 1.0
        return bandwidth[i] + share * (bandwidth[i + 1] - bandwidth[i])

    dph_seen: list[tuple[float, float]] = []  # (sim time, $/h running + stopped)
    for a, b in itertools.pairwise(rated):
        da, db = a["delivery"], b["delivery"]
        dph_seen.append((da["at"], da["dph"] + da["stopped_dph"]))
        dt = max(0.0, db["at"] - da["at"])
        window = db["window_s"]
        moved = (db["computed"] - da["computed"]) * 3600.0 / window
        if abs((db["proofs_per_hour"] - da["proofs_per_hour"]) - moved) > 1e-6:
            out.append(
                f"at {b['sim_at']:.0f}: proofs/h moved {da['proofs_per_hour']} -> "
                f"{db['proofs_per_hour']} while the proofs in the window moved "
                f"{da['computed']} -> {db['computed']}"
            )
        rate = max(da["dph"] + da["stopped_dph"], db["dph"] + db["stopped_dph"])
        came = rate * dt / 3600.0 + max(0.0, b["bandwidth_total"] - a["bandwidth_total"])
        hour_before = [x for t, x in dph_seen if t >= da["at"] - window - 600]
        spread = max(a.get("spread_dph", 0.0), b.get("spread_dph", 0.0))
        went = (
            max(hour_before, default=0.0) * dt / 3600.0
            + max(0.0, billed_by(db["at"] - window) - billed_by(da["at"] - window))
            + spread * dt / 3600.0
        )
        up, down = db["cost"] - da["cost"], da["cost"] - db["cost"]
        if up > came * COST_SLACK + ABS_SLACK:
            out.append(
                f"at {b['sim_at']:.0f}: the window's cost rose ${up:.4f} while the fleet was "
                f"billed ${came:.4f} meanwhile"
            )
        if down > went * COST_SLACK + ABS_SLACK:
            out.append(
                f"at {b['sim_at']:.0f}: the window's cost fell ${down:.4f}, more than left the "
                f"window meanwhile (${went:.4f})"
            )
    return out


def _agree(r: dict[str, Any]) -> list[str]:
    """The strip, `vastui status` and the metrics show the same record; a stopped worker is
    counted as proving nowhere."""
    out: list[str] = []
    at = f"at {r['sim_at']:.0f}"
    phases: dict[str, str] = r["phases"]
    proving = sum(1 for p in phases.values() if p == "proving")
    stopped = sum(1 for p in phases.values() if p in ("pooled", "outbid"))
    strip = r["strip"]
    shown = re.search(r" prove (\d+)", strip)
    if (int(shown.group(1)) if shown else 0) != proving:
        out.append(f"{at}: the strip says {shown.group(0) if shown else 'no prove'} with "
                   f"{proving} proving")  # fmt: skip
    if r["by_stage"].get("proving", 0) > proving:
        out.append(f"{at}: the engine's status counts {r['by_stage']} with {proving} proving")
    labels: dict[str, str] = r.get("labels", {})
    for vid, phase in phases.items():
        stage = r["metrics"]["worker_stages"].get(labels.get(vid, ""))
        if stage is not None and stage != phase:
            out.append(f"{at}: the metrics give instance {vid} stage {stage}, it is {phase}")
    d = r.get("delivery")
    if d is None:
        return out
    if d["proving"] > proving:
        out.append(f"{at}: the headline counts {d['proving']} proving of {proving}")
    if d["stopped"] != stopped:
        out.append(f"{at}: the headline counts {d['stopped']} stopped of {stopped}")
    rate = re.search(r"(\d+) p/h", strip)
    if rate is None or int(rate.group(1)) != round(d["proofs_per_hour"]):
        out.append(f"{at}: the strip's p/h {rate.group(0) if rate else None} is not "
                   f"{d['proofs_per_hour']}")  # fmt: skip
    per_paid = re.search(r"\$(\d+\.\d+)/paid", strip)
    want = d["cost_per_paid"]
    if (per_paid is None) != (want is None) or (
        per_paid is not None and want is not None and abs(float(per_paid.group(1)) - want) > SHOWN
    ):
        out.append(f"{at}: the strip's $/paid {per_paid and per_paid.group(0)} is not {want}")
    said = " ".join(r["status"])
    if f"delivered: {d['proofs_per_hour']:.0f} proofs/h" not in said:
        out.append(f"{at}: vastui status says {said[:80]!r}, not {d['proofs_per_hour']:.0f}/h")
    metric = r["metrics"]["delivered_per_h"]
    if metric is None or abs(metric - d["proofs_per_hour"]) > 1e-9:
        out.append(f"{at}: the metric says {metric}, the headline {d['proofs_per_hour']}")
    return out


def load(path: Path) -> list[dict[str, Any]]:
    lines = path.read_text().splitlines()
    return [json.loads(line) for line in lines[1:] if line.strip()]


async def record(out: Path, minutes: float, every_s: float, seed: int, speed: float) -> int:
    work = Path(tempfile.mkdtemp(prefix="vastui-headline-"))
    db = work / "demo.db"
    env = {k: v for k, v in os.environ.items() if k not in ("VASTUI_CONFIG", "VAST_API_KEY")}
    env["HOME"] = str(work / "home")
    cmd = [
        sys.executable, "-m", "vastui", "--engine-only", "--demo", "--db", str(db),
        "--target-workers", "auto", "--demand", DEMAND, "--seed", str(seed),
        "--speed", f"{speed:g}", "--for", f"{minutes:g}m",
    ]  # fmt: skip
    log = (work / "engine.err").open("w")
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    wall0 = time.monotonic()
    samples = 0
    try:
        with out.open("w") as f:
            f.write(json.dumps({"demand": DEMAND, "seed": seed, "speed": speed,
                                "minutes": minutes, "every_s": every_s}) + "\n")  # fmt: skip
            while proc.poll() is None:
                row = await sample(db, wall0)
                if row is not None:
                    f.write(json.dumps(row, separators=(",", ":")) + "\n")
                    f.flush()
                    samples += 1
                await asyncio.sleep(every_s)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
        log.close()
    print(f"{samples} samples in {out}; the engine exited {proc.returncode}; work in {work}")
    return 0 if proc.returncode == 0 and samples else 1


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m reliability.headline", description=__doc__)
    p.add_argument("--minutes", type=float, default=30.0, help="wall minutes the demo runs")
    p.add_argument("--every", type=float, default=5.0, help="wall seconds between samples")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--speed", type=float, default=60.0, help="the demo's (its default)")
    p.add_argument("--out", type=Path, default=ROOT / "reliability" / "results" / "headline.jsonl")
    p.add_argument("--check", type=Path, help="only check a recorded run")
    a = p.parse_args(argv)
    if a.check is None:
        status = asyncio.run(record(a.out, a.minutes, a.every, a.seed, a.speed))
        a.check = a.out
    else:
        status = 0
    broken = check(load(a.check))
    for line in broken:
        print(line)
    print(f"{len(broken)} broken promises in {a.check}")
    return 1 if broken else status


if __name__ == "__main__":
    raise SystemExit(main())
