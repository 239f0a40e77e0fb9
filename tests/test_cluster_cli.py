"""`vastui cluster` and the cluster's line in `vastui status` (vastui/cluster_report.py), on a
real PostgreSQL with curio's schema (tests/pgfixtures.py)."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import replace
from pathlib import Path

import pytest

from tests.pgfixtures import CurioDb
from vastui.cli import main
from vastui.console.summary import cluster_text
from vastui.domain.engine_state import EngineStatus
from vastui.domain.worker import InstanceRecord
from vastui.engine import identity
from vastui.status import auto_line, cluster_line, money_line
from vastui.store import Store

T0 = time.time() - 3600.0
STATUS = EngineStatus(
    target=3,
    workers=3,
    by_stage={},
    reason_kind=None,
    reason=None,
    best=None,
    dry_run=False,
    updated_at=T0,
)


async def fleet_store(path: Path, db: CurioDb) -> dict[str, int]:
    """Three workers of fleet "main": two proving (curio machines), one destroyed and released;
    and a row of this fleet's name no record matches (an orphan)."""
    store = await Store.open(path)
    machines = {}
    try:
        for vast_id, runner in ((101, 1), (102, 2), (103, 3)):
            addr = identity.curio_listen(runner)
            name = identity.node_name("main", runner)
            mid = db.register(addr, name, T0 + 3000)
            machines[addr] = mid
            rec = InstanceRecord(
                vast_id=vast_id, label=f"vastui-main-{vast_id}", state="proving",
                runner_id=runner, created_at=T0, proving_at=T0 + 600, machine_id=9000 + runner,
                curio_info=json.dumps({"machine_id": mid, "host_and_port": addr}),
            )  # fmt: skip
            await store.instances.upsert(rec, now=T0)
        await store.mark_killed(103, "surplus", "above target", now=T0 + 3100)
        await store.note_released(103, 0, "destroyed: 0 tasks", now=T0 + 3100)
        db.q("DELETE FROM harmony_machines WHERE host_and_port = %s", (identity.curio_listen(3),))
        db.register(identity.curio_listen(9), identity.node_name("main", 9), T0 + 3000)
        db.register("10.0.0.9:12300", "operator-node", T0 + 3000)  # not ours at all
        t = db.add_task("PSProve", T0)
        db.claim(machines[identity.curio_listen(1)], [t, db.add_task("PSProve", T0)])
        db.complete(t, identity.curio_listen(1), True, "", T0 + 3200)
        db.market(4, T0 + 3000, computed=3, submitted=2, pow_=1, paid=1)
    finally:
        await store.close()
    return machines


def config_for(tmp_path: Path, db: CurioDb, password: str) -> Path:
    cfg = tmp_path / "vastui.toml"
    cfg.write_text(
        f'[ssh]\ncurio_db = "{db.server.address}"\n[curio]\ndb_name = "{db.name}"\n',
        encoding="utf-8",
    )
    secret = tmp_path / "curio-db-password"
    secret.write_text(password + "\n", encoding="utf-8")
    secret.chmod(0o600)
    return cfg


def test_cluster_lists_this_fleets_machines_and_the_totals(
    tmp_path: Path, curio_db: CurioDb, capsys: pytest.CaptureFixture[str]
) -> None:
    machines = asyncio.run(fleet_store(tmp_path / "s.db", curio_db))
    cfg = config_for(tmp_path, curio_db, curio_db.server.password)
    base = ["--config", str(cfg), "--db", str(tmp_path / "s.db")]
    assert main([*base, "cluster", "--json"]) == 0
    out, err = capsys.readouterr()
    report = json.loads(out)
    rows = {r["host_and_port"]: r for r in report["machines"]}
    assert set(rows) == {identity.curio_listen(n) for n in (1, 2, 9)}  # 3: released, not shown
    first = rows[identity.curio_listen(1)]
    assert (first["instance"], first["curio_machine_id"], first["tasks_held"]) == (
        101, machines[identity.curio_listen(1)], 1,
    )  # fmt: skip
    assert (first["psprove_done"], first["psprove_failed"], first["cordoned"]) == (1, 0, False)
    assert rows[identity.curio_listen(9)]["state"] == "orphan"
    assert rows[identity.curio_listen(9)]["instance"] is None
    t = report["totals"]
    assert (t["psprove_waiting"], t["psprove_claimed"], t["machines"]) == (0, 1, 4)
    assert (t["taken"], t["computed"], t["submitted"], t["challenges"], t["paid"]) == (
        4,
        3,
        2,
        1,
        1,
    )
    assert curio_db.server.password not in out + err
    # the table: a row per machine, then the totals
    assert main([*base, "cluster"]) == 0
    text = capsys.readouterr().out
    assert text.splitlines()[0].split()[:3] == ["CURIO", "ID", "HOST:PORT"]
    assert "PSProve 0 waiting, 1 claimed" in text and "1 paid" in text


def test_cluster_errors_are_one_line_without_the_password(
    tmp_path: Path, curio_db: CurioDb, capsys: pytest.CaptureFixture[str]
) -> None:
    asyncio.run(fleet_store(tmp_path / "s.db", curio_db))
    cfg = config_for(tmp_path, curio_db, "wrong-secret-value")
    assert main(["--config", str(cfg), "--db", str(tmp_path / "s.db"), "cluster"]) == 2
    _, err = capsys.readouterr()
    assert err.count("\n") == 1 and "password authentication failed" in err
    assert "wrong-secret-value" not in err
    off = tmp_path / "off.toml"
    off.write_text("[curio]\nread_cluster = false\n", encoding="utf-8")
    assert main(["--config", str(off), "--db", str(tmp_path / "s.db"), "cluster"]) == 2
    assert "not read" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("cluster", "line"),
    [
        (None, None),
        ({"state": "off", "address": "127.0.0.1:5433"}, "cluster: not read (nothing answered"),
        ({"state": "error", "error": "refused"}, "cluster: cannot be read: refused"),
        (
            {"state": "ok", "psprove_waiting": 3, "psprove_claimed": 5, "window_s": 3600,
             "cluster_done": 36, "cluster_failed": 1, "fleet_done": 36, "paid_recent": 30,
             "taken": 25, "computed": 19, "submitted": 17, "challenges": 2, "paid": 12,
             "draining": 1, "overdue": 2},
            "cluster: PSProve 3 waiting, 5 claimed; last 60 min: PSProve 36 done, 1 failed; "
            "30 payments; of the 25 requests taken in it: 19 computed, 17 submitted (2 unpaid "
            "challenges), 12 paid so far; 1 draining; 2 past the market's deadline",
        ),
    ],
)  # fmt: skip
def test_the_status_line_of_the_cluster(cluster: dict | None, line: str | None) -> None:
    got = cluster_line(cluster)
    assert (got is None) if line is None else (got is not None and got.startswith(line))


@pytest.mark.parametrize(
    ("auto", "line"),
    [
        (None, None),
        (
            {"target": 3, "min_workers": 1, "max_workers": 8, "reason": "holding 3: curio's "
             "cluster not read"},
            "auto target 3 (min 1, max 8); holding 3: curio's cluster not read",
        ),
        (
            {"target": 5, "min_workers": 2, "max_workers": 8, "utilisation": 0.9,
             "done_per_h": 54.2, "capacity_per_h": 60.0, "unclaimed": 6,
             "reason": "work waits: 6 requests unclaimed for 7 min"},
            "auto target 5 (min 2, max 8); utilisation 90% (54/h of 60/h); 6 requests "
            "unclaimed; work waits: 6 requests unclaimed for 7 min",
        ),
    ],
)  # fmt: skip
def test_the_status_line_of_the_automatic_target(auto: dict | None, line: str | None) -> None:
    cluster = {"state": "ok"} if auto is None else {"state": "ok", "autoscale": auto}
    assert auto_line(cluster) == line
    if auto is not None:
        strip = cluster_text(replace(STATUS, cluster=cluster))
        assert strip is not None and f"auto {auto['min_workers']}–8" in strip.plain
        assert ("unclaimed" in strip.plain) == ("unclaimed" in auto)


async def test_demo_cluster_reads_the_running_demos_cluster(
    demo_state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`vastui --demo cluster` beside a running demo reads the demo's own curio database (its
    engine leaves the access 0600 beside the demo's database, vastui/demo_cluster.py); with no
    demo running, one line and status 2."""
    from tests.helpers import e2e_config
    from vastui.backend import Options
    from vastui.demo_cluster import access_path
    from vastui.engine.cluster import to_db_time
    from vastui.engine.runtime import RunOptions, engine_runtime

    db = demo_state / "demo.db"
    argv = ["--demo", "--db", str(db), "cluster", "--json"]
    assert await asyncio.to_thread(main, argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no demo is running" in err
    opts = Options(config=e2e_config(), db=db, demo=True, seed=8)
    async with engine_runtime(opts, RunOptions(seed=8, target_workers=0)) as rt:
        await rt.engine.step()
        fleet_id = await rt.store.meta.fleet_id()
        name = identity.node_name("main", 9, fleet_id)
        with rt.cluster.connect() as conn:  # a node of this fleet's name no record matches
            (mid,) = conn.execute(
                "INSERT INTO harmony_machines (host_and_port, cpu, ram, gpu, last_contact) "
                "VALUES (%s, 32, 1, 1.0, %s) RETURNING id",
                (identity.curio_listen(9), to_db_time(rt.engine.clock())),
            ).fetchone()
            conn.execute(
                "INSERT INTO harmony_machine_details (tasks, layers, startup_time, miners, "
                "machine_id, machine_name, version) VALUES ('', 'base', now(), '', %s, %s, 's')",
                (mid, name),
            )
        path = access_path(db)
        assert path.stat().st_mode & 0o777 == 0o600
        assert await asyncio.to_thread(main, argv) == 0
        out, err = capsys.readouterr()
        report = json.loads(out)
        [row] = report["machines"]
        assert (row["state"], row["curio_machine_id"], row["name"]) == ("orphan", mid, name)
        assert report["totals"]["machines"] >= 1
        assert rt.cluster.password not in out + err
        assert await asyncio.to_thread(main, argv[:-1]) == 0  # the table too
        assert "orphan" in capsys.readouterr().out
    assert not path.exists()  # taken back when the demo stopped
    assert await asyncio.to_thread(main, argv) == 2
    assert "no demo is running" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("auto", "line"),
    [
        ({"target": 2}, None),
        (
            {"fleet_usd_per_h": 0.8, "won_share": 0.4, "obtained_per_h": 24.0,
             "capacity_per_h": 60.0, "ask_fil": 0.005},
            "the fleet bills $0.80/h (set fleet.fil_usd to see the margin); won 40% of what "
            "the fleet could prove (24/h of 60/h); ask 0.005 FIL",
        ),
        (
            {"fleet_usd_per_h": 0.8, "earned_usd_per_h": 1.1, "margin_usd_per_h": 0.3,
             "margin_usd_per_day": 7.2, "won_share": 0.4, "obtained_per_h": 24.0,
             "capacity_per_h": 60.0, "paid_fil_per_proof": 0.0052, "ask_fil": 0.005,
             "suggested_ask_fil": 0.0031},
            "margin $+0.30/h ($+7.20/day): the market paid $1.10/h, the fleet bills $0.80/h; "
            "won 40% of what the fleet could prove (24/h of 60/h); paid 0.0052 FIL/proof; ask "
            "0.005 FIL; an ask of 0.0031 FIL would still pay the fleet's $/proof (the ask is "
            "yours to set)",
        ),
    ],
)  # fmt: skip
def test_the_status_shows_the_margin_and_the_share_of_the_work_won(
    auto: dict, line: str | None
) -> None:
    assert money_line(auto) == line
    full = auto_line({"state": "ok", "autoscale": {"min_workers": 1, "max_workers": 4, **auto}})
    assert full is not None
    assert (line in full) if line else ("\n" not in full)
    if "margin_usd_per_h" in auto:
        strip = cluster_text(replace(STATUS, cluster={"state": "ok", "autoscale": auto}))
        assert strip is not None and "margin $+0.30/h" in strip.plain
