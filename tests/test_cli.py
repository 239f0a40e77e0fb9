"""The command line, end to end on the in-process simulated cloud and a temporary store."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from vastui.cli import main

OFFER_KEYS = {
    "id", "machine_id", "host_id", "gpu_name", "num_gpus", "gpu_ram_gb", "cpu_ram_gb",
    "cpu_cores", "dph_total", "inet_down", "reliability", "geolocation", "min_bid",
    "inet_down_cost", "inet_up_cost",
}  # fmt: skip
# The ranking the console's offers pane shows (engine/ranking.py RankedOffer.to_json).
RANK_KEYS = {
    "known_rate", "prior_rate", "rate_source", "expected_rate", "min_rate",
    "expected_cost_per_proof", "bad", "bid", "as_bid",
    # the bid beside the on-demand price (bids off: none)
    "bid_price", "bid_cost_per_proof", "rent_as",
}  # fmt: skip
BAD_KEYS = {"machine_id", "host_id", "gpu_name", "reason", "source", "created_at", "expires_at"}
EVENT_KEYS = {"ts", "kind", "instance_id", "machine_id", "reason"}


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def jsonl(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@pytest.fixture
def db(tmp_path: Path) -> str:
    return str(tmp_path / "state.db")


def test_offers_json_on_demo(capsys, db):
    code, out, _ = run(capsys, "offers", "--demo", "--db", db, "--json")
    rows = jsonl(out)
    assert code == 0 and rows
    assert all(set(r) == OFFER_KEYS | RANK_KEYS for r in rows)
    # The default filter is applied by the simulator: every offer satisfies it.
    assert all(r["dph_total"] <= 0.9 and r["cpu_ram_gb"] >= 240 for r in rows)
    assert all(r["gpu_ram_gb"] > 12.5 for r in rows)


def test_offers_custom_filter_and_bad_list_hiding(capsys, db):
    code, out, _ = run(
        capsys, "offers", "--demo", "--db", db, "--json", "--filter", "gpu_name=RTX_4090"
    )
    rows = jsonl(out)
    assert code == 0 and rows and {r["gpu_name"] for r in rows} == {"RTX 4090"}
    victim = rows[0]["machine_id"]
    assert run(capsys, "bad", "add", str(victim), "--reason", "slow", "--db", db)[0] == 0
    _, out, _ = run(
        capsys, "offers", "--demo", "--db", db, "--json", "--filter", "gpu_name=RTX_4090"
    )
    assert victim not in {r["machine_id"] for r in jsonl(out)}
    _, out, _ = run(
        capsys, "offers", "--demo", "--db", db, "--json", "--all", "--filter", "gpu_name=RTX_4090"
    )
    assert victim in {r["machine_id"] for r in jsonl(out)}


def test_bad_filter_is_one_line_error(capsys, db):
    code, out, err = run(capsys, "offers", "--demo", "--db", db, "--filter", "gpu_ram>>12")
    assert code == 2 and out == ""
    assert err.startswith("vastui: error: ") and "gpu_ram>>12" in err
    assert err.count("\n") == 1


def test_bad_list_round_trip_and_events(capsys, db):
    assert run(capsys, "bad", "add", "4242", "--reason", "GPU errors", "--db", db)[0] == 0
    code, out, _ = run(capsys, "bad", "list", "--db", db, "--json")
    rows = jsonl(out)
    assert code == 0 and len(rows) == 1 and set(rows[0]) == BAD_KEYS
    assert rows[0]["machine_id"] == 4242 and rows[0]["source"] == "manual"
    assert run(capsys, "bad", "remove", "4242", "--db", db)[0] == 0
    code, _, err = run(capsys, "bad", "remove", "4242", "--db", db)
    assert code == 2 and "not on the bad list" in err
    _, out, _ = run(capsys, "events", "--db", db, "--json")
    events = jsonl(out)
    assert [e["kind"] for e in events] == ["ban", "unban"]
    assert all(set(e) == EVENT_KEYS for e in events)
    assert events[0]["machine_id"] == 4242 and events[0]["reason"] == "GPU errors"


def test_bad_add_rejects_non_positive_id(capsys, db):
    with pytest.raises(SystemExit) as info:
        main(["bad", "add", "0", "--reason", "x", "--db", db])
    assert info.value.code == 2


def test_empty_listings(capsys, db):
    for argv in (["instances"], ["perf"], ["events"]):
        code, out, _ = run(capsys, *argv, "--db", db, "--json")
        assert code == 0 and out == ""
        code, out, _ = run(capsys, *argv, "--db", db)
        assert code == 0 and "(none)" in out


def test_bad_config_is_one_line(capsys, tmp_path: Path, db):
    cfg = tmp_path / "c.toml"
    cfg.write_text("[fleet]\nbogus = 1\n")
    code, out, err = run(capsys, "--config", str(cfg), "bad", "list", "--db", db)
    assert code == 2 and out == ""
    assert str(cfg) in err and "fleet.bogus" in err and err.count("\n") == 1
    assert not Path(db).exists(), "a config error must not touch the database"


def test_missing_api_key_is_one_line(capsys, db):
    code, _, err = run(capsys, "offers", "--db", db)
    assert code == 2 and "no Vast API key" in err and err.count("\n") == 1


def test_locate_never_prints_the_key(capsys, monkeypatch, db):
    monkeypatch.setenv("VAST_API_KEY", "sk-very-secret-123")
    code, out, _ = run(capsys, "locate", "--db", db)
    assert code == 0 and "sk-very-secret-123" not in out
    assert "$VAST_API_KEY" in out and db in out


def test_import_legacy_cli(capsys, tmp_path: Path, db):
    legacy = tmp_path / "legacy.db"
    con = sqlite3.connect(legacy)
    con.executescript(
        """
        CREATE TABLE bad_hosts (machine_id TEXT PRIMARY KEY, reason TEXT NOT NULL,
            added_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP);
        CREATE TABLE host_perf (machine_id INTEGER NOT NULL, gpu_name TEXT NOT NULL,
            num_gpus INTEGER NOT NULL, bench_rate REAL NOT NULL, cpu_ram_mb INTEGER,
            measured_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,
            PRIMARY KEY (machine_id, gpu_name, num_gpus));
        INSERT INTO bad_hosts VALUES ('31244', 'Not good enough (RTX 3090, Poland, PL)',
            '2026-03-13 18:03:00');
        INSERT INTO host_perf VALUES (45890, 'RTX 4090', 1, 31.4, 257000, '2026-03-13 17:49:02');
        """
    )
    con.close()
    code, out, _ = run(capsys, "import-legacy", str(legacy), "--db", db)
    assert code == 0 and out.strip()
    _, out, _ = run(capsys, "bad", "list", "--db", db, "--json")
    assert [r["machine_id"] for r in jsonl(out)] == [31244]
    _, out, _ = run(capsys, "perf", "--db", db, "--json")
    assert [(r["machine_id"], r["best_rate"]) for r in jsonl(out)] == [(45890, 31.4)]


def test_import_legacy_bad_file_is_one_line(capsys, tmp_path: Path, db):
    junk = tmp_path / "junk.db"
    junk.write_text("not sqlite")
    code, _, err = run(capsys, "import-legacy", str(junk), "--db", db)
    assert code == 2 and str(junk) in err and err.count("\n") == 1


def test_module_entry_point_help():
    out = subprocess.run(
        [sys.executable, "-m", "vastui", "--help"], capture_output=True, text=True, check=True
    )
    for verb in ("offers", "instances", "bad", "perf", "events", "import-legacy", "locate", "sim"):
        assert verb in out.stdout


def test_status_says_target_reason_and_spend(capsys, db):
    import asyncio

    from vastui.domain.engine_state import EngineStatus
    from vastui.domain.worker import InstanceRecord
    from vastui.store import Store

    async def seed() -> None:
        async with await Store.open(Path(db)) as store:
            now = 1_790_000_000.0
            await store.instances.upsert(
                InstanceRecord(vast_id=7, label="vastui-main-7", dph_total=0.36, state="proving",
                               created_at=now - 3600, proving_at=now - 1800),
                now=now,
            )  # fmt: skip
            await store.status.put(
                EngineStatus(
                    target=3,
                    workers=1,
                    by_stage={"proving": 1},
                    reason_kind="no_viable_offer",
                    reason="no viable offer: best 4711 RTX 4090 $0.0091/proof > max $0.0080",
                    best=None,
                    dry_run=False,
                    updated_at=now,
                    simulated=True,  # a demo engine's: its clock, not the wall's
                )
            )

    asyncio.run(seed())
    code, out, err = run(capsys, "status", "--db", db)
    assert code == 0 and err == ""
    assert "workers 1/3" in out and "no viable offer: best 4711 RTX 4090" in out
    assert "spend $0.36" in out  # one hour at $0.36/h, on the engine's clock
    code, out, _ = run(capsys, "status", "--demo", "--db", db, "--json")
    report = json.loads(out)
    assert report["engine"]["target"] == 3 and report["engine"]["reason_kind"] == "no_viable_offer"
    assert report["spend"]["total"] == pytest.approx(0.36)


def test_instances_all_shows_other_controllers_apart(capsys, db):
    """Issue 17: another controller's instances (as the engine last listed them) are hidden
    from `instances` with a hint on stderr, and shown, marked foreign with their fleet, by --all."""
    import asyncio

    from vastui.domain.worker import ForeignInstance, InstanceRecord
    from vastui.store import Store

    async def seed() -> None:
        async with await Store.open(Path(db)) as store:
            await store.instances.upsert(
                InstanceRecord(vast_id=7, label=f"vastui-main.{await store.meta.fleet_id()}-"
                               "00000000000a", state="proving"), now=1.0,
            )  # fmt: skip
            await store.put_foreign(
                [ForeignInstance(vast_id=8, label="vastui-main.0badc0de-00000000000b",
                                 owner="main.0badc0de", gpu_name="RTX 4090")], now=2.0,
            )  # fmt: skip

    asyncio.run(seed())
    code, out, err = run(capsys, "instances", "--db", db, "--json")
    assert code == 0 and [json.loads(line)["id"] for line in out.splitlines()] == [7]
    code, out, err = run(capsys, "instances", "--db", db)
    assert code == 0 and "1 instances of other controllers" in err and "main.0badc0de" in err
    code, out, err = run(capsys, "instances", "--db", db, "--all", "--json")
    rows = [json.loads(line) for line in out.splitlines()]
    assert [(r["id"], r["state"], r.get("owner")) for r in rows] == [
        (7, "proving", None),
        (8, "foreign", "main.0badc0de"),
    ]
