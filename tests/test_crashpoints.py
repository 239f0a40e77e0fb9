"""Crash points (vastui/engine/crashpoints.py): armed only by the environment, seeded, SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from vastui.engine import crashpoints
from vastui.engine.crashpoints import Arming, CrashSpecError, parse_points, parse_seed


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", {}),
        ("rent.answered:0.3", {"rent.answered": 0.3}),
        (
            " rent.answered:1 , destroy.answered:0.5,",
            {"rent.answered": 1.0, "destroy.answered": 0.5},
        ),
        ("*:0.01", {"*": 0.01}),
        ("step.end:0", {"step.end": 0.0}),  # kept: it overrides a wildcard
        ("a:0.2,a:0.7", {"a": 0.7}),  # the last entry wins
    ],
)
def test_parse_points(text: str, expected: dict[str, float]) -> None:
    assert parse_points(text) == expected


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("rent.answered", "not NAME:PROBABILITY"),
        (":0.5", "not NAME:PROBABILITY"),
        ("a:x", "not a number"),
        ("a:1.5", "probability must be 0 to 1"),
        ("a:-0.1", "probability must be 0 to 1"),
        ("a:nan", "probability must be 0 to 1"),
    ],
)
def test_parse_points_refuses_bad_entries(text: str, names: str) -> None:
    with pytest.raises(CrashSpecError, match=names):
        parse_points(text)


def test_parse_seed() -> None:
    assert parse_seed(None) == 0
    assert parse_seed(" ") == 0
    assert parse_seed("42") == 42
    with pytest.raises(CrashSpecError, match="not an integer"):
        parse_seed("4x")


def _draws(arming: Arming, name: str, n: int) -> list[bool]:
    return [arming.hits(name) for _ in range(n)]


def test_arming_is_seeded_per_name() -> None:
    spec = {"rent.answered": 0.5, "*": 0.2}
    first = _draws(Arming(spec, seed=3), "rent.answered", 64)
    assert first == _draws(Arming(spec, seed=3), "rent.answered", 64)
    assert first != _draws(Arming(spec, seed=4), "rent.answered", 64)
    assert 10 < sum(first) < 54  # about half
    # Another name's calls do not shift this name's draws.
    mixed = Arming(spec, seed=3)
    interleaved = []
    for _ in range(64):
        mixed.hits("step.end")
        interleaved.append(mixed.hits("rent.answered"))
    assert interleaved == first


def test_arming_wildcard_and_unlisted() -> None:
    assert not any(_draws(Arming({"rent.answered": 1.0}), "step.end", 20))
    assert all(_draws(Arming({"rent.answered": 1.0}), "rent.answered", 20))
    assert all(_draws(Arming({"*": 1.0}), "destroy.answered", 20))
    assert not any(_draws(Arming({"*": 1.0, "step.end": 0.0}), "step.end", 20))
    assert not Arming({"step.end": 0.0}).armed
    assert Arming({"step.end": 0.0, "*": 0.1}).armed


def test_unarmed_in_this_process(monkeypatch: pytest.MonkeyPatch) -> None:
    # What would be killed is recorded instead (this is the test process): unarmed, nothing;
    # armed from the environment, the point that hits (so the first half can fail too).
    killed: list[str] = []
    monkeypatch.setattr(crashpoints, "_die", killed.append)
    monkeypatch.delenv(crashpoints.ENV_POINTS, raising=False)
    crashpoints.reset()
    try:
        for name in crashpoints.NAMES:
            crashpoints.crash_point(name)
        assert killed == []
        monkeypatch.setenv(crashpoints.ENV_POINTS, "step.end:1")
        crashpoints.reset()
        for name in crashpoints.NAMES:
            crashpoints.crash_point(name)
        assert killed == ["step.end"]
    finally:
        crashpoints.reset()


# The real kill runs in a child process: SIGKILL of the test process would end the suite.
CHILD = """
import sys
from vastui.engine.crashpoints import crash_point
for i in range(int(sys.argv[1])):
    print(i, flush=True)
    crash_point(sys.argv[2])
print("alive", flush=True)
"""


def _child(env: dict[str, str], calls: int, name: str) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("VASTUI_CRASH")}
    full.update(env)
    return subprocess.run(
        [sys.executable, "-c", CHILD, str(calls), name],
        env=full,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_armed_point_kills_its_process_with_sigkill() -> None:
    done = _child({"VASTUI_CRASH_POINTS": "rent.answered:1"}, 5, "rent.answered")
    assert done.returncode == -signal.SIGKILL
    assert done.stdout.split() == ["0"]  # killed at the first call
    assert done.stderr == "crash point rent.answered: SIGKILL\n"


def test_unarmed_or_other_point_lives() -> None:
    for env in ({}, {"VASTUI_CRASH_POINTS": ""}, {"VASTUI_CRASH_POINTS": "rent.answered:1"}):
        done = _child(env, 5, "destroy.answered")
        assert done.returncode == 0, done.stderr
        assert done.stdout.split()[-1] == "alive"
        assert done.stderr == ""


def test_seeded_child_dies_at_the_same_call() -> None:
    env = {"VASTUI_CRASH_POINTS": "*:0.2", "VASTUI_CRASH_SEED": "11"}
    first = _child(env, 200, "step.end")
    again = _child(env, 200, "step.end")
    assert first.returncode == again.returncode == -signal.SIGKILL
    assert first.stdout == again.stdout
    expected = Arming({"*": 0.2}, seed=11)
    calls = next(i for i in range(200) if expected.hits("step.end"))
    assert first.stdout.split()[-1] == str(calls)


def test_bad_spec_disarms_with_one_line() -> None:
    done = _child({"VASTUI_CRASH_POINTS": "rent.answered:2"}, 3, "rent.answered")
    assert done.returncode == 0
    assert done.stdout.split()[-1] == "alive"
    assert done.stderr.count("\n") == 1
    assert "probability must be 0 to 1; crash points disarmed" in done.stderr
