"""The trial invariants (reliability/invariants.py): given snapshots, the violations."""

from __future__ import annotations

import subprocess
import sys

import pytest

from reliability import invariants as inv
from reliability.invariants import (
    OrphanWatch,
    Sample,
    StoreEvent,
    StoreInstance,
    StoreIntent,
    StoreView,
    VastRow,
)

FLEET = "trial"
A = "vastui-trial-aaaaaaaaaaaa"
B = "vastui-trial-bbbbbbbbbbbb"
OTHER_FLEET = "vastui-other-cccccccccccc"


def row(iid: int, label: str | None = A, status: str = "running") -> VastRow:
    return VastRow(iid, label, status, machine_id=iid // 10)


def live(iid: int, label: str | None = A, machine: int = 7) -> StoreInstance:
    return StoreInstance(iid, label, "proving", machine_id=machine)


def killed(
    iid: int,
    kind: str = "manual",
    *,
    label: str | None = A,
    machine: int | None = 7,
    outcome: str | None = None,
    lines: tuple[str, ...] = (),
    reason: str = "why",
) -> StoreInstance:
    return StoreInstance(iid, label, "killed", machine, kind, reason, outcome, lines)


def destroy_event(iid: int, reason: str = "why") -> StoreEvent:
    return StoreEvent("destroy", iid, 7, reason)


def subjects(violations: list[inv.Violation]) -> list[tuple[str, str]]:
    return [v.key for v in violations]


# -- reading the CLI ------------------------------------------------------------------------


def test_vast_rows_reads_the_cli_list() -> None:
    raw = [
        {"id": 5, "label": A, "actual_status": "running", "machine_id": 9},
        {"id": 6, "label": None, "actual_status": None, "machine_id": "x"},
    ]
    assert inv.vast_rows(raw) == [VastRow(5, A, "running", 9), VastRow(6, None, None, None)]
    assert inv.vast_rows({"instances": raw[:1]}) == [VastRow(5, A, "running", 9)]


@pytest.mark.parametrize("raw", [None, "[]", {"x": 1}, [{"id": "5"}], [{"id": True}], [3]])
def test_vast_rows_refuses_what_is_not_a_list_of_instances(raw: object) -> None:
    with pytest.raises(ValueError, match=r"expected a list|without an integer id"):
        inv.vast_rows(raw)


def test_json_detail_damage_reads_empty() -> None:
    assert inv.json_detail('{"ban": "x"}') == {"ban": "x"}
    assert inv.json_detail(None) == {}
    assert inv.json_detail("[1]") == {}
    assert inv.json_detail("{bad") == {}


# -- double rents ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("observations", "store", "expected"),
    [
        ([[row(1)], [row(1)]], StoreView(), []),
        ([[row(1)], [row(2)]], StoreView(), [("double_rent", f"label {A}")]),  # one, then another
        ([[row(1), row(2)]], StoreView(), [("double_rent", f"label {A}")]),
        ([[row(1)]], StoreView(instances=(killed(3),)), [("double_rent", f"label {A}")]),
        ([[row(1), row(2, B)]], StoreView(), []),
        ([[row(1, "foreign"), row(2, "foreign")]], StoreView(), []),  # not ours: not an intent
        (
            [[row(1, OTHER_FLEET), row(2, OTHER_FLEET)]],
            StoreView(),
            [("double_rent", f"label {OTHER_FLEET}")],
        ),
    ],
)
def test_double_rents(
    observations: list[list[VastRow]], store: StoreView, expected: list[tuple[str, str]]
) -> None:
    seen: dict[str, frozenset[int]] = {}
    for rows in observations:
        seen = inv.labels_seen(seen, rows)
    assert subjects(inv.double_rents(seen, store)) == expected


def test_double_rents_from_the_clouds_ledger() -> None:
    ledger = {A: 1, B: 2, "reliability-foreign": 3, "vastui-x": 2}
    assert subjects(inv.double_rents_ledger(ledger)) == [("double_rent", f"label {B}")]


# -- orphans --------------------------------------------------------------------------------


def test_untracked() -> None:
    store = StoreView(instances=(live(1), killed(2, label=B)))
    rows = [row(1), row(2, B), row(3, "vastui-trial-cccccccccccc"), row(4, "foreign")]
    got = inv.untracked(rows, store, FLEET)
    assert set(got) == {2, 3}
    assert "killed" in got[2]
    assert got[3] == "not in the store"


@pytest.mark.parametrize(
    ("steps", "expected_at"),
    [
        # (time, listed untracked?, engine up since) ; bound 10
        ([(0, True, 0.0), (5, True, 0.0), (11, True, 0.0)], [11]),
        ([(0, True, 0.0), (9, True, 0.0), (10, False, 0.0), (15, True, 0.0), (24, True, 0.0)], []),
        # the engine was down: the clock starts when it is back
        (
            [
                (0, True, None),
                (30, True, None),
                (35, True, 32.0),
                (41, True, 32.0),
                (43, True, 32.0),
            ],
            [43],
        ),
        ([(0, True, None), (100, True, None)], []),
    ],
)
def test_orphans_bound_counts_while_the_engine_runs(
    steps: list[tuple[float, bool, float | None]], expected_at: list[float]
) -> None:
    watch = OrphanWatch()
    hits: list[float] = []
    for at, listed, up in steps:
        rows = [row(9, B)] if listed else []
        watch, found = inv.orphans(watch, at, rows, StoreView(), FLEET, up, bound=10.0)
        hits += [v.at for v in found if v.at is not None]
    assert hits == expected_at


def test_tracked_instance_is_no_orphan() -> None:
    store = StoreView(instances=(live(9, B),))
    watch, found = inv.orphans(OrphanWatch({9: 0.0}), 100.0, [row(9, B)], store, FLEET, 0.0, 10)
    assert found == [] and watch.since == {}


# -- foreign --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rows", "store", "expected"),
    [
        ([row(50, "foreign")], StoreView(), []),
        (None, StoreView(), []),  # the observation failed: no claim about presence
        ([], StoreView(), [("foreign_touched", "instance 50")]),
        (
            [row(50, "foreign")],
            StoreView(events=(StoreEvent("destroy", 50, 1, "x"),)),
            [("foreign_touched", "instance 50")],
        ),
        (
            [row(50, "foreign")],
            StoreView(intents=(StoreIntent(1, "destroy", "pending", instance_id=50),)),
            [("foreign_touched", "instance 50")],
        ),
        (
            [row(50, "foreign")],
            StoreView(instances=(live(61, "x"),)),
            [("foreign_touched", "instance 61")],
        ),
        (
            [row(50, "foreign")],
            StoreView(instances=(live(62, OTHER_FLEET),)),
            [("foreign_touched", "instance 62")],
        ),
        ([row(50, "foreign")], StoreView(instances=(live(63, A),)), []),
    ],
)
def test_foreign_touched(
    rows: list[VastRow] | None, store: StoreView, expected: list[tuple[str, str]]
) -> None:
    assert subjects(inv.foreign_touched(frozenset({50}), rows, store, FLEET)) == expected


# -- destroys recorded ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("store", "expected"),
    [
        (StoreView(instances=(killed(1),), events=(destroy_event(1),)), []),
        (StoreView(instances=(live(1),)), []),
        (StoreView(instances=(killed(1),)), [("destroy_unrecorded", "instance 1")]),
        (
            StoreView(instances=(killed(1),), events=(destroy_event(1, " "),)),
            [("destroy_unrecorded", "instance 1")],
        ),
        (
            StoreView(instances=(killed(1),), events=(StoreEvent("kill", 1, 7, "x"),)),
            [("destroy_unrecorded", "instance 1")],
        ),
        (
            StoreView(instances=(killed(1, reason=""),), events=(destroy_event(1),)),
            [("destroy_unrecorded", "instance 1")],
        ),
        (StoreView(instances=(killed(1, "vanished"),)), [("destroy_unrecorded", "instance 1")]),
    ],
)
def test_destroys_unrecorded(store: StoreView, expected: list[tuple[str, str]]) -> None:
    assert subjects(inv.destroys_unrecorded(store)) == expected


def test_vanished_allowed_when_others_destroy() -> None:
    assert (
        inv.destroys_unrecorded(StoreView(instances=(killed(1, "vanished"),)), allow_vanished=True)
        == []
    )


def test_gone_unrecorded() -> None:
    store = StoreView(instances=(killed(1), live(2), live(4)))
    got = inv.gone_unrecorded([1, 2, 3, 4], [row(4)], store)
    assert subjects(got) == [
        ("destroy_unrecorded", "instance 2"),
        ("destroy_unrecorded", "instance 3"),
    ]


# -- bans -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("inst", "worthy"),
    [
        (killed(1, "deadline_loading"), True),
        (killed(1, "bench_error", outcome="error"), True),
        (killed(1, "bench_error", outcome="weird"), False),
        (killed(1, "bench_below_min", outcome="below_min"), False),
        (killed(1, "prove_daemon_died", lines=("CUDA error: an illegal memory access",)), True),
        (killed(1, "setup_failed", lines=("lotus api unreachable",)), False),
        (killed(1, "deadline_loading", machine=None), False),  # no machine to ban
        (live(1), False),
    ],
)
def test_ban_worthy(inst: StoreInstance, worthy: bool) -> None:
    assert (inv.ban_worthy(inst) is not None) is worthy


@pytest.mark.parametrize(
    ("store", "expected"),
    [
        (
            StoreView(
                instances=(killed(1, "bench_error", outcome="error"),), banned=frozenset({7})
            ),
            [],
        ),
        (
            StoreView(instances=(killed(1, "bench_error", outcome="error"),)),
            [("ban_missing", "machine 7")],
        ),
        (StoreView(instances=(killed(1, "manual"),)), []),
        (
            StoreView(
                intents=(
                    StoreIntent(
                        3,
                        "destroy",
                        "done",
                        machine_id=8,
                        detail={"ban_record": {"machine_id": 9, "reason": "x"}},
                    ),
                )
            ),
            [("ban_missing", "machine 9")],
        ),
        (
            StoreView(
                intents=(StoreIntent(3, "destroy", "done", machine_id=8, detail={"ban": "gpu"}),)
            ),
            [("ban_missing", "machine 8")],
        ),
        # a pending destroy has not decided anything yet
        (
            StoreView(
                intents=(StoreIntent(3, "destroy", "pending", machine_id=8, detail={"ban": "gpu"}),)
            ),
            [],
        ),
        (StoreView(strikes={5: 2}), [("ban_missing", "machine 5")]),
        (StoreView(strikes={5: 1}), []),
        (StoreView(strikes={5: 3}, banned=frozenset({5})), []),
    ],
)
def test_bans_missing(store: StoreView, expected: list[tuple[str, str]]) -> None:
    assert subjects(inv.bans_missing(store, strikes_to_ban=2)) == expected


REFUSED = (
    "ERROR: failed to connect to `user=yugabyte database=yugabyte`: 127.0.0.1:41519 "
    "(127.0.0.1): dial error: dial tcp 127.0.0.1:41519: connect: connection refused"
)


@pytest.mark.parametrize(
    ("inst", "lost"),
    [
        (killed(1, "prove_curio_failed", lines=("curio config set", REFUSED)), True),
        (killed(1, "prove_curio_failed", lines=("ERROR: chain API not configured",)), False),
        # the database refused a remote address: not the controller's local tunnel
        (killed(1, "prove_curio_failed", lines=(REFUSED.replace("127.0.0.1", "10.0.0.5"),)), False),
        (killed(1, "manual", lines=(REFUSED,)), False),  # not destroyed for the failure
        (live(1), False),
    ],
)
def test_tunnel_kills(inst: StoreInstance, lost: bool) -> None:
    found = inv.tunnel_kills(StoreView(instances=(inst,)))
    assert subjects(found) == ([("worker_lost_to_tunnel", "instance 1")] if lost else [])


def test_integrity() -> None:
    assert inv.integrity(StoreView()) == []
    bad = inv.integrity(StoreView(integrity=("row 3 missing from index x",)))
    assert subjects(bad) == [("integrity", "database")]


# -- target ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("at", "count", "expected"),
    [
        (5.0, 3, []),
        (5.0, 4, [("over_target", "t=5")]),
        (101.0, 3, []),  # lowered to 1 at 100: 10 s to shrink
        (111.0, 2, [("over_target", "t=111")]),
        (111.0, 1, []),
        (-1.0, 9, []),  # before any target: nothing to compare
    ],
)
def test_over_target(at: float, count: int, expected: list[tuple[str, str]]) -> None:
    rows = [row(i, f"vastui-trial-{i:012x}") for i in range(count)] + [row(99, "foreign")]
    timeline = [(0.0, 3), (100.0, 1)]
    assert subjects(inv.over_target(at, rows, FLEET, timeline, grace=10.0)) == expected


def test_a_draining_worker_is_not_over_the_target() -> None:
    """A worker cordoned before its planned destroy is on its way out: its replacement is rented
    meanwhile (engine/drain.py), and the fleet is not over its target for it."""
    rows = [row(i, f"vastui-trial-{i:012x}") for i in range(4)]
    timeline = [(0.0, 3)]
    assert subjects(inv.over_target(5.0, rows, FLEET, timeline, grace=10.0)) == [
        ("over_target", "t=5")
    ]
    assert inv.over_target(5.0, rows, FLEET, timeline, grace=10.0, draining=frozenset({2})) == []
    # one draining does not excuse two over
    more = [*rows, row(4, f"vastui-trial-{4:012x}")]
    found = inv.over_target(5.0, more, FLEET, timeline, grace=10.0, draining=frozenset({2}))
    assert subjects(found) == [("over_target", "t=5")] and "(1 draining)" in found[0].detail


def test_target_at_and_allowed() -> None:
    timeline = [(0.0, 3), (100.0, 1), (200.0, 2)]
    assert inv.target_at(timeline, 50) == 3
    assert inv.target_at(timeline, 150) == 1
    assert inv.allowed_alive(timeline, 105, grace=10) == 3
    assert inv.allowed_alive(timeline, 205, grace=10) == 2
    assert inv.allowed_alive([], 5, grace=10) is None


@pytest.mark.parametrize(
    ("alive", "excused", "expected"),
    [
        # samples every 10 s, bound 25 s: below for 20 s at a time is fine
        ([0, 1, 3, 3, 2, 2, 3, 3], [False] * 8, []),
        # below from t=0 to t=30 (the first sample back at target): 30 s
        ([0, 1, 2, 3, 3, 3, 3, 3], [False] * 8, [("below_target", "t=0")]),
        # the same, but a look at the market at t=20 found nothing viable: 20 s, then 10 s
        ([0, 1, 2, 3, 3, 3, 3, 3], [False, False, True] + [False] * 5, []),
        # still below at the last sample: t=40 to t=70
        ([3, 3, 3, 3, 2, 2, 2, 2], [False] * 8, [("below_target", "t=40")]),
        # two short stretches are two, neither too long
        ([2, 2, 3, 2, 2, 3, 2, 3], [False] * 8, []),
        # a market found empty only at t=60 does not excuse the 60 s before it
        ([1] * 8, [False] * 6 + [True, False], [("below_target", "t=0")]),
        # a market found empty every 20 s: never 25 s without a reason
        ([1] * 8, [False, False, True, False, True, False, True, False], []),
    ],
)
def test_below_target(
    alive: list[int], excused: list[bool], expected: list[tuple[str, str]]
) -> None:
    samples = [
        Sample(i * 10.0, a, 3, e) for i, (a, e) in enumerate(zip(alive, excused, strict=True))
    ]
    assert subjects(inv.below_target(samples, bound=25.0, start=0.0)) == expected


def test_below_stretches() -> None:
    samples = [Sample(0, 3, 3), Sample(10, 1, 3), Sample(20, 2, 3), Sample(30, 2, 2)]
    samples += [Sample(40, 0, 2, excused=True), Sample(50, 1, 2), Sample(60, 1, 2, excused=True)]
    samples += [Sample(70, 1, 2)]
    found = inv.below_stretches(samples, start=5.0)
    assert [(s.start, s.end, s.best, s.target, s.after_empty_market, s.open) for s in found] == [
        (10, 30, 2, 3, False, False),  # back at the (lowered) target at t=30
        (40, 60, 1, 2, True, False),  # from one empty market to the next
        (60, 70, 1, 2, True, True),
    ]
    assert found[0].length == 20
    assert inv.below_stretches(samples, start=80.0) == []


def test_refill_bound_follows_the_engine_cadence() -> None:
    from reliability.trial import ORPHAN_BOUND, STEP_BOUND, refill_bound

    # a step held by one call at its worst, then an offer search: minutes, not the hours of
    # an engine on the wall clock
    assert STEP_BOUND < refill_bound(360.0) < refill_bound(100.0) < STEP_BOUND + 6
    assert ORPHAN_BOUND == STEP_BOUND + 1.0


def test_snapshot_checks_and_dedupe() -> None:
    store = StoreView(instances=(killed(1, "bench_error", outcome="error"),))
    found = inv.snapshot_checks([], store, fleet=FLEET, foreign=frozenset({50}), strikes_to_ban=2)
    assert subjects(found) == [
        ("foreign_touched", "instance 50"),
        ("destroy_unrecorded", "instance 1"),
        ("ban_missing", "machine 7"),
    ]
    assert len(inv.dedupe(found + found)) == 3
    assert set(inv.INVARIANTS) >= {v.invariant for v in found}


# -- the trials' plan and the systemd unit as shipped ----------------------------------------


def test_crash_plan_covers_every_point() -> None:
    import random

    from reliability.crash import EXTERNAL, SHRINK, plan_trials
    from vastui.engine.crashpoints import NAMES

    plan = plan_trials(20, random.Random(5))
    assert len(plan) == 20
    assert set(NAMES) | {EXTERNAL, SHRINK} == set(plan)
    assert plan[0] == NAMES[0]  # an empty fleet first rents
    assert plan == plan_trials(20, random.Random(5))


def test_shipped_unit_runs_the_engine_as_an_operator_installs_it() -> None:
    from reliability.unit import UNIT, command_and_env, parse_unit, substitute

    unit = parse_unit(UNIT.read_text(encoding="utf-8"))
    assert unit.get("Service.Restart") == "on-failure"
    assert unit.get("Service.UMask") == "0077"
    assert float(unit.get("Service.RestartSec") or "99") <= 5
    assert int(unit.get("Unit.StartLimitBurst") or "0") >= 5
    paths = {"/opt/vastui/venv/bin/": "/v/bin/", "/etc/vastui/config.toml": "/c.toml",
             "/var/lib/vastui": "/s"}  # fmt: skip
    cmd, env = command_and_env(unit, paths)
    assert cmd == ["/v/bin/vastui", "--engine-only", "--config", "/c.toml", "--db", "/s/vastui.db"]
    assert env["VASTUI_STATE_DIR"] == "/s"
    assert substitute("/var/lib/vastui/x", paths) == "/s/x"


def test_parse_unit_syntax() -> None:
    from reliability.unit import parse_unit

    unit = parse_unit(
        "# c\n[Service]\nExecStart=/bin/a \\\n  --b\nEnvironment=A=1\nEnvironment=B=2\n; c\n"
    )
    assert unit.get("Service.ExecStart") == "/bin/a --b"
    assert unit.all("Service.Environment") == ["A=1", "B=2"]
    assert unit.get("Service.Nope", "d") == "d"


def _printing(text: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", f"import sys; sys.stdout.write({text!r})"],
        stdout=subprocess.PIPE,
        text=True,
    )


def test_the_served_clouds_url_and_clock_are_read() -> None:
    from reliability.procs import _wait_for_start

    out = (
        "vastui sim: serving simulated Vast API on http://127.0.0.1:4321 (seed 1, speed 360, "
        "faults heavy)\nvastui sim: ssh.lotus_api = 127.0.0.1:5\n"
        "vastui sim: VASTUI_SIM_CLOCK=1700000000.5,1700000000.5,360.0\n"
        "vastui sim: wrote /x/sim.toml; an engine: VASTUI_SIM_CLOCK=1,1,1 VAST_API_KEY=...\n"
    )
    lines: list[str] = []
    proc = _printing(out)
    got = _wait_for_start(proc, lines, 10.0, wrote=True)
    proc.wait()
    assert got == ("http://127.0.0.1:4321", "1700000000.5,1700000000.5,360.0")
    assert len(lines) == 4  # the config's line read too: the rest goes to the log


def test_a_cloud_without_its_clock_is_refused() -> None:
    from reliability.procs import _wait_for_start

    proc = _printing("vastui sim: serving simulated Vast API on http://127.0.0.1:4321 (x)\n")
    with pytest.raises(SystemExit, match="no VASTUI_SIM_CLOCK"):
        _wait_for_start(proc, [], 10.0, wrote=False)


def test_a_quick_crash_run_plans_the_shrink_too() -> None:
    import random

    from reliability.crash import SHRINK, plan_trials

    for count in (3, 6):
        assert SHRINK in plan_trials(count, random.Random(1)), count


@pytest.mark.parametrize(
    ("observations", "failed", "violated"),
    [(0, 0, True), (10, 0, False), (10, 5, False), (10, 6, True), (10, 10, True)],
)
def test_a_trial_that_saw_too_little_of_the_cloud_does_not_pass(observations, failed, violated):
    found = inv.observed_enough(observations, failed)
    assert bool(found) == violated
    assert all(v.invariant == "observed_too_little" for v in found)
    assert {v.invariant for v in found} <= set(inv.INVARIANTS)
