"""What the command line prints when it refuses: one line, `vastui: error: ...`, status 2, and
nothing before or after it (no log line, no traceback from a thread at exit)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from vastui.store import Store, StoreError


def vastui(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`vastui ARGV` in its own process: what a thread prints at exit is seen too."""
    return subprocess.run(
        [sys.executable, "-m", "vastui", *argv],
        capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
    )  # fmt: skip


def assert_one_line_error(done: subprocess.CompletedProcess[str], *words: str) -> None:
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert done.stdout == ""
    assert done.stderr.startswith("vastui: error: ") and done.stderr.count("\n") == 1, done.stderr
    for word in words:
        assert word in done.stderr, done.stderr


# -- a directory given as the database ---------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["status"],
        ["status", "--json"],
        ["instances"],
        ["events"],
        ["bad"],
        ["bad", "add", "7", "--reason", "r"],
        ["perf"],
        ["cluster"],
        ["offers"],
        ["migrate"],
        ["--engine-only", "--for", "1s"],
        ["--demo", "--engine-only", "--for", "1s"],
    ],
)
def test_a_directory_as_the_database_is_one_line(tmp_path: Path, argv: list[str]) -> None:
    folder = tmp_path / "state"
    folder.mkdir()
    done = vastui("--db", str(folder), *argv, env={"VAST_API_KEY": "k" * 64})
    assert_one_line_error(done, f"--db {folder}", "directory")
    assert list(folder.iterdir()) == [], "nothing was written in it"


def test_a_store_that_fails_to_open_leaves_no_thread_behind(tmp_path: Path) -> None:
    """aiosqlite's worker thread must be gone when the open fails: a thread still running when
    asyncio.run closes the loop dies in a traceback ("Event loop is closed")."""

    def connection_threads() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if "_connection_worker_thread" in t.name]

    before = set(connection_threads())

    async def attempt() -> list[threading.Thread]:
        with pytest.raises(StoreError, match=str(tmp_path)):
            await Store.open(tmp_path)  # a directory: SQLite cannot open it
        return [t for t in connection_threads() if t not in before and t.is_alive()]

    assert asyncio.run(attempt()) == []


# -- no Vast API key ---------------------------------------------------------------------


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    from vastui.cli import main

    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def console(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[dict[str, object]]:
    """A terminal, and the console's start recorded instead of run (Textual never starts)."""
    started: list[dict[str, object]] = []

    def run_console(opts: object, **kwargs: object) -> int:
        started.append(kwargs)
        return 0

    monkeypatch.setattr("vastui.console.app.run_console", run_console)
    monkeypatch.setattr("vastui.cli._on_a_terminal", lambda: True)
    monkeypatch.setenv("VASTUI_STATE_DIR", str(tmp_path / "state"))
    return started


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["--api-url", "http://127.0.0.1:8642"],  # a served simulator wants its key too
        ["--engine-only", "--for", "1s"],
        ["--engine-only", "--for", "1s", "--api-url", "http://127.0.0.1:8642"],
    ],
)
def test_no_api_key_refuses_before_anything_starts(capsys, console, tmp_path, argv) -> None:
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "" and console == []
    assert err.startswith("vastui: error: no Vast API key") and err.count("\n") == 1, err
    assert "VAST_API_KEY" in err and str(Path.home() / ".config/vastai/vast_api_key") in err
    assert "--demo" in err
    assert not (tmp_path / "state").exists(), "nothing was created"


def test_a_key_file_is_enough(capsys, console) -> None:
    key = Path.home() / ".config" / "vastai" / "vast_api_key"
    key.parent.mkdir(parents=True)
    key.write_text("k" * 64)
    code, _, err = run(capsys)
    assert code == 0 and len(console) == 1, err


@pytest.mark.parametrize("argv", [["--demo"], ["--read-only"]])
def test_a_console_that_runs_no_engine_of_its_own_needs_no_key(capsys, console, argv) -> None:
    code, _, err = run(capsys, *argv)
    assert code == 0 and len(console) == 1, err


def test_a_console_attaching_to_a_running_engine_needs_no_key(capsys, console, tmp_path) -> None:
    import socket

    db = tmp_path / "fleet.db"

    async def engine_holds_the_lease() -> None:
        async with await Store.open(db) as store:
            await store.lease.acquire(
                "engine", pid=os.getpid(), hostname=socket.gethostname(), mode="headless",
                ttl=600.0,
            )  # fmt: skip

    asyncio.run(engine_holds_the_lease())
    code, _, err = run(capsys, "--db", str(db))
    assert code == 0 and len(console) == 1, err
    # without the engine, the console would run its own: the key is needed
    code, _, err = run(capsys, "--db", str(tmp_path / "other.db"))
    assert code == 2 and "no Vast API key" in err and len(console) == 1


# -- flags checked before anything starts or logs ----------------------------------------


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--demand", "bogus:3"], ["demand 'bogus:3'", "steady:R"]),
        (["--new-wallet"], ["--new-wallet needs a finite --demand"]),
    ],
)
def test_a_bad_demo_market_is_the_only_line(tmp_path: Path, extra, words) -> None:
    state = tmp_path / "state"
    done = vastui(
        "--demo", "--engine-only", "--db", str(tmp_path / "d.db"), "--for", "1s", *extra,
        env={"VASTUI_STATE_DIR": str(state)},
    )  # fmt: skip
    assert_one_line_error(done, *words)
    assert not (tmp_path / "d.db").exists()


def test_a_metrics_port_in_use_is_the_only_line(tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = vastui(
            "--demo", "--engine-only", "--db", str(tmp_path / "d.db"), "--for", "1s",
            "--metrics", f"127.0.0.1:{port}", env={"VASTUI_STATE_DIR": str(tmp_path / "state")},
        )  # fmt: skip
    assert_one_line_error(done, f"metrics address 127.0.0.1:{port}", "in use")
    assert not (tmp_path / "d.db").exists(), "nothing started"


@pytest.mark.parametrize("verb", [["--demo"], ["sim", "serve"]])
@pytest.mark.parametrize("speed", ["0", "-5", "1e9", "1000.5", "nan", "inf"])
def test_speed_says_what_it_accepts(capsys, verb: list[str], speed: str) -> None:
    import socket

    with pytest.raises(SystemExit) as exc, socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        # a speed let through ends at once all the same: the port is taken, nothing serves
        port = ["--port", str(taken.getsockname()[1])] if verb[0] == "sim" else []
        run(capsys, *verb, *port, "--speed", speed)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1, err
    assert f"must be > 0 and <= 1000 (simulated seconds per real second): '{speed}'" in err


def test_the_fastest_speed_is_accepted() -> None:
    from vastui.cli import build_parser

    args = build_parser().parse_args(["--demo", "--speed", "1000"])
    assert args.speed == 1000.0


# -- what spend and the parameters are, said once ----------------------------------------


def test_help_says_what_spend_counts_and_the_parameters_size() -> None:
    from vastui.console.panes.instances import InstancesPane
    from vastui.console.panes.offers import OffersPane
    from vastui.console.summary import STRIP_HELP
    from vastui.domain.plan import PARAMS_GB

    texts = [doc for _, doc in STRIP_HELP]
    texts += [c.doc for pane in (InstancesPane, OffersPane) for c in pane.COLUMNS]
    assert not [t for t in texts if "billed time ×" in t or "100 GB" in t]
    from vastui.engine.spend import SPENT_MEANS

    assert "bandwidth" in SPENT_MEANS and "storage" in SPENT_MEANS
    assert any(SPENT_MEANS in doc for what, doc in STRIP_HELP if what.startswith("spent $"))
    assert SPENT_MEANS in next(c.doc for c in InstancesPane.COLUMNS if c.key == "spent")
    dl = next(c.doc for c in OffersPane.COLUMNS if c.key == "dl")
    assert f"~{PARAMS_GB:.0f} GB" in dl and f"{PARAMS_GB:.0f}" == "145"


def test_instances_carry_spend_cost_per_proof_and_kill_kind(capsys, tmp_path: Path) -> None:
    import json

    from vastui.domain.engine_state import EngineStatus
    from vastui.domain.worker import InstanceRecord
    from vastui.engine.spend import instance_cost

    db = tmp_path / "fleet.db"
    t0 = 1_790_000_000.0
    now = t0 + 7200  # the demo engine's clock, as its status says: not the wall's
    proving = InstanceRecord(
        vast_id=1, dph_total=0.36, state="proving", created_at=t0, running_at=t0,
        proving_at=t0 + 600, bench_rate=40.0, prod_rate=30.0, inet_down_cost=0.01,
    )  # fmt: skip
    benched = InstanceRecord(
        vast_id=2, dph_total=0.5, state="benchmark", created_at=t0 + 60, running_at=t0 + 60,
        bench_rate=50.0,
    )  # fmt: skip
    killed = InstanceRecord(
        vast_id=3, dph_total=0.2, state="killed", created_at=t0, running_at=t0,
        killed_at=t0 + 1800, failed_stage="benchmark", kill_kind="bench_below_min_rate",
        kill_reason="benchmark 3/h below min_rate 25",
    )  # fmt: skip
    legacy = InstanceRecord(vast_id=4, dph_total=0.3, state="proving", source="legacy")

    async def seed() -> None:
        async with await Store.open(db) as store:
            for rec in (proving, benched, killed, legacy):
                await store.instances.upsert(rec, now=t0)
            status = EngineStatus(
                target=2, workers=2, by_stage={}, reason_kind=None, reason=None, best=None,
                dry_run=False, updated_at=now, simulated=True,
            )  # fmt: skip
            await store.status.put(status)

    asyncio.run(seed())
    code, out, _ = run(capsys, "instances", "--db", str(db), "--json")
    rows = {r["id"]: r for r in map(json.loads, out.splitlines())}
    assert code == 0 and set(rows) == {1, 2, 3, 4}
    for rec in (proving, benched, killed):
        assert rows[rec.vast_id]["spent"] == pytest.approx(instance_cost(rec, now), abs=1e-4)
    assert rows[1]["spent"] == pytest.approx(0.72 + 145 * 0.01, abs=0.01)  # 2 h and the params
    assert rows[3]["spent"] == pytest.approx(0.1, abs=1e-4)  # half an hour, then destroyed
    assert rows[4]["spent"] is None  # a legacy row: what it cost is not known
    assert (rows[1]["cost_per_proof"], rows[1]["cost_per_proof_estimated"]) == (0.012, False)
    assert (rows[2]["cost_per_proof"], rows[2]["cost_per_proof_estimated"]) == (0.01, True)
    assert (rows[3]["cost_per_proof"], rows[3]["cost_per_proof_estimated"]) == (None, None)
    assert rows[3]["kill_kind"] == "bench_below_min_rate" and rows[1]["kill_kind"] is None

    code, out, _ = run(capsys, "instances", "--db", str(db))
    header, *lines = out.splitlines()
    assert code == 0 and {"$/PROOF", "SPENT", "KILL_KIND"} <= set(header.split())
    by_id = {line.split()[0]: line for line in lines}
    assert " 0.0120 " in by_id["1"] and " ~0.0100 " in by_id["2"]
    assert "bench_below_min_rate" in by_id["3"]


def test_a_stopped_worker_is_listed_as_stopped_not_proving(capsys, tmp_path: Path) -> None:
    """`vastui instances --live-only` listed a worker stopped in the warm pool as `proving` at
    its running price: it is `pooled` (its stored state is the stage it was in, in --json's
    `state`; its `phase` says what it does now)."""
    import json

    from vastui.domain.worker import InstanceRecord

    db = tmp_path / "fleet.db"
    t0 = 1_790_000_000.0
    pooled = InstanceRecord(
        vast_id=7, dph_total=0.42, storage_dph=0.02, state="proving", created_at=t0,
        proving_at=t0 + 600, pooled_since=t0 + 3600,
    )  # fmt: skip

    async def seed() -> None:
        async with await Store.open(db) as store:
            await store.instances.upsert(pooled, now=t0)

    asyncio.run(seed())
    code, out, _ = run(capsys, "instances", "--live-only", "--db", str(db))
    [line] = out.splitlines()[1:]
    assert code == 0 and " pooled " in line and " proving " in line.replace(" pooled ", " ")
    code, out, _ = run(capsys, "instances", "--live-only", "--db", str(db), "--json")
    row = json.loads(out)
    assert (row["state"], row["phase"], row["stage"]) == ("proving", "pooled", "proving")
