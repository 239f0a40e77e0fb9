"""`vastui --engine-only`: runs without Textual, stops cleanly, one engine per database."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vastui.cli import main
from vastui.engine.runtime import parse_duration
from vastui.store import Store


async def lease_of(db: Path):
    async with await Store.open(db) as store:
        return await store.lease.holder()


def wait_for_lease(proc: subprocess.Popen[str], db: Path) -> None:
    """Until the engine holds its lease (up to 30 s on a loaded machine): it is running."""
    for _ in range(300):
        if db.exists() and asyncio.run(lease_of(db)) is not None:
            break
        if proc.poll() is not None:
            break
        time.sleep(0.1)  # polling for a condition, bounded above
    assert proc.poll() is None, "engine exited early"


def test_for_stops_the_engine_by_itself(tmp_path: Path, capsys):
    """`--for` ends the run with status 0 and the lease released. What it rented in the time
    is not asserted: under load the demo's set-up can take the whole 2 s (the next test)."""
    db = tmp_path / "e.db"
    argv = ["--engine-only", "--demo", "--db", str(db), "--for", "2s", "--speed", "200",
            "--target-workers", "2", "--dry-run"]  # fmt: skip
    assert main(argv) == 0
    assert asyncio.run(lease_of(db)) is None, "the lease is released on exit"
    assert all(e.reason.startswith("[dry-run]") for e in asyncio.run(events_of(db)))


async def events_of(db: Path):
    async with await Store.open(db, migrate=False) as store:
        return await store.events.all()


def test_a_dry_run_demo_rents_nothing_and_says_so(tmp_path: Path):
    """Its rents are events marked [dry-run] and nothing else: waited for, then stopped (a
    fixed `--for 2s` ended a loaded run before its first step had rented)."""
    db = tmp_path / "e.db"
    env = dict(os.environ, VASTUI_STATE_DIR=str(tmp_path / "state"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "vastui", "--engine-only", "--demo", "--db", str(db),
         "--speed", "200", "--target-workers", "2", "--dry-run"],
        env=env, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        wait_for_lease(proc, db)
        for _ in range(600):  # polling for a condition, bounded above (60 s)
            if any(e.kind == "rent" for e in asyncio.run(events_of(db))) or proc.poll() is not None:
                break
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0
    out = subprocess.run(
        [sys.executable, "-m", "vastui", "events", "--db", str(db), "--json"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    events = [json.loads(line) for line in out.stdout.splitlines()]
    assert events and all(e["reason"].startswith("[dry-run]") for e in events)
    assert {e["kind"] for e in events} == {"rent"}


def test_second_engine_is_refused(tmp_path: Path, capsys):
    db = tmp_path / "e.db"

    async def hold() -> None:
        async with await Store.open(db) as store:
            await store.lease.acquire("other", pid=4242, hostname="ctl", mode="headless", ttl=600)

    asyncio.run(hold())
    code = main(["--engine-only", "--demo", "--db", str(db), "--for", "1s"])
    err = capsys.readouterr().err
    assert code == 2
    assert "another vastui engine (headless, pid 4242 on ctl)" in err
    assert err.strip().count("\n") == 0


def test_sigterm_stops_cleanly_and_imports_no_textual(tmp_path: Path):
    db = tmp_path / "e.db"
    env = dict(os.environ, VASTUI_STATE_DIR=str(tmp_path / "state"))
    code = (
        "import sys, runpy; sys.argv = ['vastui'] + sys.argv[1:];"
        "from vastui.cli import main; rc = main(sys.argv[1:]);"
        "bad = [m for m in sys.modules if m.split('.')[0] == 'textual'];"
        "print('TEXTUAL', bad, file=sys.stderr); sys.exit(rc)"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "--engine-only", "--demo", "--db", str(db), "--dry-run"],
        env=env, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        wait_for_lease(proc, db)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "TEXTUAL []" in err
    assert "engine started" in err and "stopping after" in err
    assert asyncio.run(lease_of(db)) is None
    assert (tmp_path / "state" / "engine-demo.log").exists()


@pytest.mark.parametrize(
    ("text", "seconds"), [("120s", 120), ("2m", 120), ("1h", 3600), ("90", 90), ("1.5m", 90)]
)
def test_parse_duration(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "abc", "-5s", "0"])
def test_parse_duration_rejects(text):
    with pytest.raises(ValueError, match="bad duration"):
        parse_duration(text)


def test_bad_duration_is_one_line(tmp_path: Path, capsys):
    assert main(["--engine-only", "--demo", "--db", str(tmp_path / "x.db"), "--for", "soon"]) == 2
    assert "bad duration 'soon'" in capsys.readouterr().err


def test_a_deleted_database_stops_the_engine_non_zero_with_its_reason(tmp_path: Path):
    """systemd must see a failure (and restart it), not a healthy service that decides nothing."""
    db = tmp_path / "e.db"
    env = dict(os.environ, VASTUI_STATE_DIR=str(tmp_path / "state"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "vastui", "--engine-only", "--demo", "--db", str(db), "--dry-run",
         "--speed", "50"],
        env=env, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        wait_for_lease(proc, db)
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1
    last = err.strip().splitlines()[-1]
    assert last.startswith("vastui: engine stopped: database ")
    assert "deleted or replaced" in last
    assert "lease lost" not in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("extra", "target"),
    [([], 3), (["--target-workers", "0"], 0), (["--target-workers", "5"], 5),
     (["--target-workers", "auto"], "auto")],
)  # fmt: skip
def test_the_headless_demo_keeps_the_consoles_demo_fleet(
    tmp_path: Path, monkeypatch, extra, target
):
    from vastui.engine import headless

    seen = []

    def fake(opts, run, duration):
        seen.append((run.mode, run.target_workers))
        return 0

    monkeypatch.setattr(headless, "run_headless", fake)
    assert main(["--engine-only", "--demo", "--db", str(tmp_path / "e.db"), *extra]) == 0
    assert seen == [("headless", target)]


def test_a_target_workers_that_is_neither_a_number_nor_auto_is_one_line(tmp_path, capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--engine-only", "--demo", "--db", str(tmp_path / "e.db"), "--target-workers", "x"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not an integer or auto: 'x'" in err[0]


def test_auto_from_the_command_line_makes_the_engine_follow_the_work() -> None:
    """--target-workers auto sets the config's automatic target, a number takes it back."""
    from dataclasses import replace

    from vastui.config import Config
    from vastui.engine.runtime import RunOptions, run_config

    auto = replace(Config().fleet, auto_target=True)
    assert run_config(Config(), RunOptions(target_workers="auto")).fleet.auto_target
    fixed = run_config(replace(Config(), fleet=auto), RunOptions(target_workers=4)).fleet
    assert (fixed.auto_target, fixed.target_workers) == (False, 4)
