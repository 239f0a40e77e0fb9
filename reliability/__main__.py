"""`python -m reliability soak|crash`: trials of a real engine against a served cloud.

Run from the repository root with the project's Python (`.venv/bin/python -m reliability ...`).
Exit status 0 when every invariant held, 1 on any violation, 2 on a usage error.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from reliability import crash, report, soak, unit
from reliability.procs import FleetSpec
from reliability.trial import Trial, TrialOptions

RESULTS = Path(__file__).resolve().parent / "results"
QUICK_SOAK = (6.0, 240.0)  # simulated hours, speed: 90 s of wall time


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m reliability", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--seed", type=int, default=1, help="the cloud's and the trials' seed")
    common.add_argument("--profile", choices=["none", "light", "heavy"], default="heavy")
    common.add_argument("--machine-fault-rate", type=float, default=1.0)
    common.add_argument("--target", type=int, default=3, help="workers the fleet keeps")
    common.add_argument("--quick", action="store_true", help="a short run (CI-sized)")
    common.add_argument("--report", type=Path, help="JSON report (default reliability/results/)")
    common.add_argument("--workdir", type=Path, help="keep everything here (default: a temp dir)")
    common.add_argument("--keep", action="store_true", help="keep the work directory")

    s = sub.add_parser("soak", parents=[common], help="a simulated day at high speed")
    s.add_argument("--sim-hours", type=float, default=24.0)
    s.add_argument("--speed", type=float, default=360.0, help="simulated seconds per second")

    c = sub.add_parser("crash", parents=[common], help="SIGKILL trials with immediate restarts")
    c.add_argument("--trials", type=int, default=20)
    c.add_argument("--speed", type=float, default=100.0)
    c.add_argument("--unit-restarts", type=int, default=3, help="kills of the systemd unit")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "soak" and args.quick:
        args.sim_hours, args.speed = QUICK_SOAK
    if args.command == "crash" and args.quick:
        args.trials = min(args.trials, 6)
        args.unit_restarts = min(args.unit_restarts, 1)
    if args.workdir is not None:
        args.workdir.mkdir(parents=True, exist_ok=True)
    opts = TrialOptions(
        seed=args.seed,
        speed=args.speed,
        faults=args.profile,
        machine_fault_rate=args.machine_fault_rate,
        fleet=FleetSpec(target=args.target),
        workdir=args.workdir,
        keep=args.keep or args.workdir is not None,
    )
    trial = Trial(opts)
    try:
        trial.start()
        if args.command == "soak":
            body = soak.run(trial, args.sim_hours)
        else:
            body = crash.run(trial, args.trials, args.seed)
            body["systemd_unit"] = unit.run(trial, args.unit_restarts)
            trial.final_checks()  # the end checks again, after the unit's kills and restarts
        result = report.build(trial, args.command, sys.argv[1:] if argv is None else argv, body)
    finally:
        trial.close()
    print(report.table(result))
    name = f"{args.command}{'-quick' if args.quick else ''}.json"
    path = args.report or RESULTS / name
    report.write(result, path)
    print(f"report: {path}")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
