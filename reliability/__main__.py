"""`python -m reliability soak|crash|api-outage|ssh-cut|resources|second-controller|storm`:
trials of real engines against a served cloud.

Run from the repository root with the project's Python (`.venv/bin/python -m reliability ...`).
Exit status 0 when every invariant held, 1 on any violation, 2 on a usage error.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from reliability import controllers, crash, outage, report, resources, soak, storm, unit
from reliability.procs import FleetSpec
from reliability.trial import Trial, TrialOptions

RESULTS = Path(__file__).resolve().parent / "results"
QUICK_SOAK = (6.0, 240.0)  # simulated hours, speed: 90 s of wall time
QUICK_RESOURCES = (4.0, 120.0, 3.0)  # wall minutes, speed, seconds between samples
# Outages: the light API faults and no injected machine faults (a destroy in the window is
# then the outage's, or a slow machine's on its own word: RELIABILITY.md), at 60x (120x quick).
OUTAGE_DEFAULTS = {"profile": "light", "machine_fault_rate": 0.0}
COMMON_DEFAULTS = {"profile": "heavy", "machine_fault_rate": 1.0}
OUTAGE_SPEED, QUICK_OUTAGE_SPEED = 60.0, 120.0
# storm: a fleet fault on every machine; nothing else fails (the outages' defaults)
LIGHT = ("api-outage", "ssh-cut", "storm")
PAIR_SPEED, QUICK_PAIR_HOURS = 120.0, 2.0  # second-controller; simulated hours watched, quick


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m reliability", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--seed", type=int, default=1, help="the cloud's and the trials' seed")
    common.add_argument(
        "--profile", choices=["none", "light", "heavy"],
        help="the API's faults (default heavy; light for api-outage and ssh-cut)",
    )  # fmt: skip
    common.add_argument(
        "--machine-fault-rate", type=float, help="default 1; 0 for api-outage and ssh-cut"
    )
    common.add_argument(
        "--target", type=int, help="workers the fleet keeps (default 3; 2 for second-controller)"
    )
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

    for name, minutes, what in (
        ("api-outage", 30.0, "the Vast API unreachable for the engine while its fleet proves"),
        ("ssh-cut", 90.0, "the workers' SSH refused (the controller cut off) while they prove"),
    ):
        o = sub.add_parser(name, parents=[common], help=what)
        o.add_argument("--speed", type=float, help="simulated seconds per second (default 60)")
        o.add_argument("--outage-min", type=float, default=minutes, help="simulated minutes out")
        o.add_argument(
            "--after-min", type=float, default=60.0, help="simulated minutes watched after"
        )
        o.add_argument(
            "--ready-hours", type=float, default=8.0,
            help="simulated hours allowed to reach a proving fleet",
        )  # fmt: skip
        if name == "api-outage":
            o.add_argument("--mode", choices=["refuse", "blackhole"], default="refuse")

    p = sub.add_parser(
        "second-controller", parents=[common],
        help="two engines, one account and config, a database each (issue 17 item 1)",
    )  # fmt: skip
    p.add_argument("--second-target", type=int, default=1, help="the second engine's target")
    p.add_argument(
        "--together", action="store_true",
        help="start both at once (default: the second once the first is at target)",
    )  # fmt: skip
    p.add_argument("--speed", type=float, default=PAIR_SPEED)
    p.add_argument(
        "--sim-hours", type=float, default=6.0, help="simulated hours watched once both run"
    )
    p.add_argument(
        "--ready-hours", type=float, default=8.0,
        help="simulated hours allowed for the first fleet to reach its target",
    )  # fmt: skip

    st = sub.add_parser(
        "storm", parents=[common], help="one failure on every machine: pause, blame nobody, resume"
    )
    st.add_argument("--fault", choices=storm.FAULTS, default="bench_input_broken")
    st.add_argument(
        "--onset", choices=["before", "renting"], default="before",
        help="the fault on before the engine starts, or once its first rent intent is written",
    )  # fmt: skip
    st.add_argument("--speed", type=float, help="simulated seconds per second (default 60)")
    st.add_argument("--pause-hours", type=float, default=4.0, help="simulated hours to the pause")
    st.add_argument(
        "--hold-min", type=float, default=30.0, help="simulated minutes paused, the fault on"
    )
    st.add_argument(
        "--settle-hours", type=float, default=2.0,
        help="at most this long for the instances rented during the fault to go",
    )  # fmt: skip
    st.add_argument(
        "--ready-hours", type=float, default=8.0,
        help="simulated hours after the resume allowed to prove at target",
    )  # fmt: skip
    st.add_argument(
        "--after-min", type=float, default=30.0, help="simulated minutes watched after that"
    )

    r = sub.add_parser("resources", parents=[common], help="an hour's resource soak")
    r.add_argument("--minutes", type=float, default=60.0, help="wall minutes")
    r.add_argument("--speed", type=float, default=60.0, help="simulated seconds per second")
    r.add_argument("--sample-every", type=float, default=10.0, help="wall seconds")
    r.add_argument("--warmup", type=float, default=0.25, help="share of the run not judged")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # (not set_defaults: subparsers built from one parent share its actions and their defaults)
    defaults = OUTAGE_DEFAULTS if args.command in LIGHT else COMMON_DEFAULTS
    if args.target is None:
        args.target = 2 if args.command == "second-controller" else 3
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.command == "soak" and args.quick:
        args.sim_hours, args.speed = QUICK_SOAK
    if args.command == "crash" and args.quick:
        args.trials = min(args.trials, 6)
        args.unit_restarts = min(args.unit_restarts, 1)
    if args.command in LIGHT and args.speed is None:
        args.speed = QUICK_OUTAGE_SPEED if args.quick else OUTAGE_SPEED
    if args.command == "second-controller" and args.quick:
        args.sim_hours = min(args.sim_hours, QUICK_PAIR_HOURS)
    if args.command == "storm" and args.quick:
        args.after_min = min(args.after_min, 30.0)
    if args.command in ("api-outage", "ssh-cut") and args.quick:
        args.after_min = min(args.after_min, 30.0)
    if args.command == "resources" and args.quick:
        args.minutes, args.speed, args.sample_every = QUICK_RESOURCES
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
        api_proxy=args.command in ("api-outage", "second-controller"),
        fleet_faults=args.command == "storm",
    )
    trial = Trial(opts)
    # SIGTERM (a `kill` of a background run) ends the trial like Ctrl-C: its engine and cloud
    # stopped, the work directory removed unless kept.
    signal.signal(signal.SIGTERM, _terminated)
    try:
        trial.start()
        if args.command == "soak":
            body = soak.run(trial, args.sim_hours)
        elif args.command in ("api-outage", "ssh-cut"):
            plan = outage.OutagePlan(
                kind="api" if args.command == "api-outage" else "ssh",
                minutes=args.outage_min,
                after_min=args.after_min,
                ready_hours=args.ready_hours,
                mode=getattr(args, "mode", "refuse"),
            )
            body = outage.run(trial, plan)
        elif args.command == "second-controller":
            plan_pair = controllers.PairPlan(
                second_target=args.second_target, together=args.together,
                sim_hours=args.sim_hours, ready_hours=args.ready_hours,
            )  # fmt: skip
            body = controllers.run(trial, plan_pair)
        elif args.command == "storm":
            plan_storm = storm.StormPlan(
                fault=args.fault, onset=args.onset, pause_hours=args.pause_hours,
                hold_min=args.hold_min, settle_hours=args.settle_hours,
                ready_hours=args.ready_hours, after_min=args.after_min,
            )  # fmt: skip
            body = storm.run(trial, plan_storm)
        elif args.command == "resources":
            body = resources.run(trial, args.minutes, args.sample_every, args.warmup)
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


def _terminated(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


if __name__ == "__main__":
    sys.exit(main())
