"""The command line's edges: one-line errors (argparse and a busy port included), quiet on a
closed pipe, the ranking in `offers --json`, and an unknown `events --kind` refused."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import bandwidth_of
from vastui.cli import EXIT_BROKEN_PIPE, main
from vastui.domain.journal import EVENT_KINDS
from vastui.pricing import min_rate
from vastui.store import Store

RANK_KEYS = {
    "known_rate", "prior_rate", "rate_source", "expected_rate", "min_rate",
    "expected_cost_per_proof", "bad",
}  # fmt: skip
MAX_COST_PER_PROOF = 0.008  # the default fleet.max_cost_per_proof


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse's errors leave through parser.exit
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def jsonl(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def in_store(db: Path, *calls: tuple[str, tuple, dict]) -> None:
    async def go() -> None:
        store = await Store.open(db)
        try:
            for name, args, kwargs in calls:  # "repository.method"
                repo, method = name.split(".")
                await getattr(getattr(store, repo), method)(*args, **kwargs)
        finally:
            await store.close()

    asyncio.run(go())


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "state.db"


# -- one-line errors ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "hint"),
    [
        (["offers", "--limit", "x"], "vastui offers --help"),
        (["bad", "add", "0", "--reason", "r"], "vastui bad add --help"),
        (["bad", "add", "7"], "vastui bad add --help"),  # --reason missing
        (["nosuch"], "vastui --help"),
        (["sim"], "vastui sim --help"),
        (["sim", "serve", "--port", "70000"], "vastui sim serve --help"),
        (["events", "--bogus"], "vastui --help"),  # unknown options are the top parser's
        # flags are checked as the config is, before anything starts
        (["--engine-only", "--target-workers", "-1"], "vastui --help"),
        (["--engine-only", "--target-workers", "100000"], "vastui --help"),
        (["--engine-only", "--metrics", "127.0.0.1:99999"], "vastui --help"),
        (["--engine-only", "--metrics", "nowhere"], "vastui --help"),
        (["--demo", "--speed", "0"], "vastui --help"),
        (["--demo", "--speed", "nan"], "vastui --help"),
    ],
)
def test_argparse_errors_are_one_line(capsys, argv, hint):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert err.startswith("vastui: error: ") and err.count("\n") == 1, err
    assert f"(see {hint})" in err and "usage:" not in err


def test_argparse_error_text_is_sanitised(capsys):
    _, _, err = run(capsys, "offers", "--limit", "\x1b]0;pwned\x07")
    assert "\x1b" not in err and "\x07" not in err and err.count("\n") == 1


def test_help_still_exits_zero(capsys):
    code, out, _ = run(capsys, "offers", "--help")
    assert code == 0 and "--json" in out


def test_sim_serve_on_a_busy_port_is_one_line(capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, out, err = run(capsys, "sim", "serve", "--port", str(port))
    assert code == 2 and out == ""
    assert err.startswith("vastui: error: ") and err.count("\n") == 1, err
    assert f"127.0.0.1:{port}" in err and "in use" in err and "--port" in err


# -- a closed pipe -----------------------------------------------------------------------


@pytest.mark.parametrize("argv", [["offers", "--demo"], ["events"], ["perf", "--json"]])
def test_a_closed_pipe_ends_the_listing_quietly(argv, db: Path):
    # The read end is closed before vastui starts: its first write meets EPIPE, every time
    # (`| head -1` would depend on who is faster).
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "vastui", *argv, "--db", str(db)],
            stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120,
        )  # fmt: skip
    finally:
        os.close(write_end)
    if argv == ["perf", "--json"]:  # nothing to print: nothing to fail
        assert done.returncode == 0 and done.stderr == ""
        return
    assert done.returncode == EXIT_BROKEN_PIPE == 141
    assert done.stderr == ""


def test_a_broken_pipe_not_on_stdout_is_still_an_error(capsys, monkeypatch, db: Path):
    def broken(opts, args) -> int:  # e.g. a socket of our own, while stdout is fine
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr("vastui.cli.cmd_locate", broken)
    code, out, err = run(capsys, "locate", "--db", str(db))
    assert code == 2 and out == "" and err == "vastui: error: [Errno 32] Broken pipe\n"


# -- offers carry the ranking ------------------------------------------------------------


def test_offers_json_carries_the_ranking(capsys, db: Path):
    code, out, _ = run(capsys, "offers", "--demo", "--db", str(db), "--json")
    first = jsonl(out)
    assert code == 0 and first
    measured, banned = first[-1], first[0]
    in_store(
        db,
        ("perf.record_rate", (measured["machine_id"], measured["gpu_name"],
                              measured["num_gpus"], 500.0), {}),
        ("badlist.add", (banned["machine_id"], "slow"), {"source": "manual"}),
    )  # fmt: skip
    _, out, _ = run(capsys, "offers", "--demo", "--db", str(db), "--json", "--all")
    rows = jsonl(out)
    assert rows and all(set(r) >= RANK_KEYS for r in rows)
    for r in rows:
        # dph_total is rounded to 4 digits in JSON: the ceiling may be one above.
        assert r["min_rate"] - min_rate(r["dph_total"], MAX_COST_PER_PROOF) in (0, 1)
        if r["expected_rate"]:
            # the GPU's hour over its rate, and each proof's bandwidth at the offer's $/GB
            bandwidth = bandwidth_of(r)
            assert r["expected_cost_per_proof"] == pytest.approx(
                r["dph_total"] / r["expected_rate"] + bandwidth, abs=1e-5
            )
    mine = next(r for r in rows if r["id"] == measured["id"])
    assert mine["rate_source"] == "measured" and mine["known_rate"] == 500.0
    assert mine["expected_rate"] == 500.0
    assert {r["bad"] for r in rows if r["machine_id"] == banned["machine_id"]} == {True}
    assert {r["bad"] for r in rows if r["machine_id"] != banned["machine_id"]} == {False}
    # Ranked as the engine ranks: cheapest expected $/proof first, unknown last.
    costs = [r["expected_cost_per_proof"] for r in rows]
    known = [c for c in costs if c is not None]
    assert known == sorted(known) and costs[: len(known)] == known
    _, out, _ = run(capsys, "offers", "--demo", "--db", str(db), "--json")
    assert banned["machine_id"] not in {r["machine_id"] for r in jsonl(out)}


def test_offers_table_shows_the_ranking_columns(capsys, db: Path):
    code, out, _ = run(capsys, "offers", "--demo", "--db", str(db), "--limit", "5")
    header = out.splitlines()[0]
    assert code == 0
    for name in ("EXP $/P", "MIN", "KNOWN", "EXP RATE", "FROM", "BAD"):
        assert name in header


# -- event kinds -------------------------------------------------------------------------


def test_unknown_event_kind_is_a_one_line_error(capsys, db: Path):
    code, out, err = run(capsys, "events", "--db", str(db), "--kind", "nosuch")
    assert code == 2 and out == ""
    assert err.startswith("vastui: error: ") and err.count("\n") == 1
    assert "'nosuch'" in err and all(kind in err for kind in EVENT_KINDS)


def test_known_event_kind_without_events_is_an_empty_listing(capsys, db: Path):
    code, out, err = run(capsys, "events", "--db", str(db), "--kind", "destroy")
    assert (code, out.strip(), err) == (0, "(none)", "")


def test_event_kind_found_in_the_log_is_listed_even_if_undocumented(capsys, db: Path):
    in_store(db, ("events.add", ("newkind", "written by a newer vastui"), {}))
    code, out, _ = run(capsys, "events", "--db", str(db), "--kind", "newkind", "--json")
    assert code == 0 and [e["kind"] for e in jsonl(out)] == ["newkind"]


def test_the_console_without_a_terminal_is_one_line_and_starts_nothing(
    capsys, tmp_path, monkeypatch
):
    """Under pytest stdin and stderr are no terminal: the console refuses before it starts
    anything (no store, no engine, no escape codes)."""
    monkeypatch.setenv("VASTUI_STATE_DIR", str(tmp_path))
    code, out, err = run(capsys, "--demo")
    assert code != 0 and out == ""
    assert err.count("\n") == 1 and "the console needs a terminal" in err, err
    assert "\x1b" not in err
    assert list(tmp_path.iterdir()) == [], "nothing was started or written"
