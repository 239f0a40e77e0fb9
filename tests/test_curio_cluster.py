"""curio's cluster, where workers meet, with the stand-in curio rebuilt from curio's source
(vastsim/standins/curio cites each behaviour) against the simulated cluster database, a real
PostgreSQL holding curio's schema (vastsim/harmonydb.py): machine identity keyed by host:port
with 0.0.0.0 replaced by the database connection's address; a second registration of an
identity taking back the first's tasks; the smart driver's load balancing dialling the cluster's
advertised addresses; GOLOG_LOG_LEVEL; ProveTimeout with a retry while the daemon goes on; both
proof kinds from the market (vastsim/proofsvc.py); the cordon; a dead node's tasks, freed by
an operator's statement at once or by curio's own cleanup after 10 minutes; the proofshare
request singleton stranded on a dead node; a GPU whose SnapDeals proofs do not verify; the
queue, its submissions and the payments. Every wait is a condition with an upper bound;
nothing is timed (time is asserted only as the simulated clock's, in curio's own lines)."""

from __future__ import annotations

import json
import re
import signal
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import WAIT, Controller, wait_for
from tests.test_worker_standins import SIM, Box, prove_snap, status_of
from vastsim.proofsvc import Ask, Market, UnlimitedDemand

LAYER = "cuzk-worker"


_BOXES: list[Box] = []


@pytest.fixture(autouse=True)
def _stop_every_node() -> Iterator[None]:
    """Every process a test started (daemons, curio nodes) is killed at its end."""
    try:
        yield
    finally:
        while _BOXES:
            _BOXES.pop().kill_all()


def node(tmp_path: Path, name: str, controller: Controller, **machine: Any) -> Box:
    """A worker root with its own daemon, the parameters PSProve waits for, and the tunnel's
    forward files (as the sandbox's SSH server writes them)."""
    box = Box(tmp_path / name)
    _BOXES.append(box)
    box.machine(**{"rate_per_hour": 40.0, "cpu_cores": 16, "cpu_ram_gb": 256, **machine})
    controller.tunnel_files(box.root / "run")
    assert box.run(["curio", "fetch-params", "32GiB"]).returncode == 0
    # the daemon's param_cache, as benchmark.sh links it (link_params)
    for f in (box.root / "var" / "tmp" / "filecoin-proof-parameters").iterdir():
        if not (box.params / f.name).exists():
            (box.params / f.name).symlink_to(f)
    return box


def env(controller: Controller, **extra: str) -> dict[str, str]:
    token = f"{controller.token}:/ip4/{controller.lotus_addr.replace(':', '/tcp/')}/http"
    return {
        **controller.env(),
        "CURIO_DB_HOST": "127.0.0.1",
        "CURIO_DB_PORT": controller.db_addr.rsplit(":", 1)[1],
        "CURIO_DB_HOST_CQL": "127.0.0.1",
        "CURIO_DB_CASSANDRA_PORT": controller.cql_addr.rsplit(":", 1)[1],
        "CURIO_DB_LOAD_BALANCE": "false",
        "FULLNODE_API_INFO": token,
        **extra,
    }


def set_layer(box: Box, controller: Controller, *, max_pending: int = 2,
              timeout: str = "1000h", title: str = LAYER) -> None:  # fmt: skip
    layer = box.root / f"{title}.toml"
    layer.write_text(
        f'[Subsystems]\n  EnableProofShare = true\n[Cuzk]\n  Address = "{box.listen}"\n'
        f'  MaxPending = {max_pending}\n  ProveTimeout = "{timeout}"\n'
    )
    res = box.run(["curio", "config", "set", "--title", title, str(layer)], **env(controller))
    assert res.returncode == 0, res.stderr


def run_curio(box: Box, controller: Controller, *args: str, log: str = "curio.log",
              layer: str = LAYER, **extra: str) -> tuple[subprocess.Popen, Path]:  # fmt: skip
    path = box.root / log
    proc = box.start(["curio", "run", *args, "--layers", layer], path, **env(controller, **extra))
    return proc, path


def begun(log: Path) -> set[int]:
    """Every task this node began work on (task_type_handler.go:303)."""
    pattern = r'Beginning work on Task\t\{"id": (\d+)'
    return {int(m.group(1)) for m in re.finditer(pattern, log.read_text())}


def recovered(log: Path) -> set[int]:
    """Tasks this node took back at start (harmonytask.go:351-389 → from "recovered")."""
    pattern = r'Beginning work on Task\t\{"id": (\d+), "from": "recovered"'
    return {int(m.group(1)) for m in re.finditer(pattern, log.read_text())}


def machines(controller: Controller) -> list[dict[str, Any]]:
    return controller.view()["machines"]


def machine(controller: Controller, host_and_port: str) -> dict[str, Any] | None:
    return next((m for m in machines(controller) if m["host_and_port"] == host_and_port), None)


def claims(controller: Controller, host_and_port: str, name: str = "PSProve") -> set[int]:
    """The tasks of a type the machine at ``host_and_port`` owns (harmony_task.owner_id)."""
    row = machine(controller, host_and_port)
    if row is None:
        return set()
    return {t["id"] for t in controller.view()["tasks"]
            if t["owner_id"] == row["id"] and t["name"] == name}  # fmt: skip


def proofs(controller: Controller, by: str | None = None) -> list[dict[str, Any]]:
    """PSProve results in harmony_task_history, by one node or all."""
    return [h for h in controller.view()["history"] if h["name"] == "PSProve"
            and (by is None or h["completed_by_host_and_port"] == by)]  # fmt: skip


def begun_at(log: Path) -> dict[int, float]:
    """When (the node's simulated clock, epoch seconds) the node began each task."""
    found = {}
    for line in log.read_text().splitlines():
        m = re.match(r'(\S+)\t\w+\t.*Beginning work on Task\t\{"id": (\d+)', line)
        if m:
            when = datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
            found.setdefault(int(m.group(2)), when.timestamp())
    return found


SLOW = {"rate_per_hour": 0.05}  # each proof takes hours: the tasks stay owned


def holding(controller: Controller, host_and_port: str, n: int = 2) -> set[int]:
    """Once the node holds ``n`` PSProve tasks: which."""

    def held() -> set[int] | None:
        ids = claims(controller, host_and_port)
        return ids if len(ids) == n else None

    return wait_for(held, what=f"{host_and_port} holding {n} proofs")


# ------------------------------------------------------------------ identity


def test_without_an_identity_every_worker_is_one_machine(tmp_path, controller) -> None:
    """Two workers at curio's default --listen register as the same machine: 0.0.0.0 becomes
    the tunnel's 127.0.0.1 (deps/deps.go:291-305), and harmony_machines is keyed by host:port
    (resources.go:81-99)."""
    a, b = node(tmp_path, "a", controller), node(tmp_path, "b", controller)
    for box in (a, b):
        box.start_daemon()
        set_layer(box, controller, title=f"{LAYER}-{box.root.name}")
        run_curio(box, controller, layer=f"{LAYER}-{box.root.name}")
    wait_for(lambda: all("Setting up RPC server" in (x.root / "curio.log").read_text()
                         for x in (a, b)), what="both nodes up")  # fmt: skip
    rows = machines(controller)
    assert [m["host_and_port"] for m in rows] == ["127.0.0.1:12300"], "one machine for two"
    # the second registration took over the first's row (its name, its details)
    assert rows[0]["id"] == 1


def test_each_worker_its_own_machine_with_its_identity(tmp_path, controller) -> None:
    a, b = node(tmp_path, "a", controller), node(tmp_path, "b", controller)
    for i, box in enumerate((a, b), start=1):
        box.start_daemon()
        set_layer(box, controller, title=f"{LAYER}-{i}")
        run_curio(box, controller, "--listen", f"127.0.0.1:1240{i}", "--name", f"w{i}",
                  layer=f"{LAYER}-{i}")  # fmt: skip
    # the row first (resources.go:81-107), its details after (cmd/curio/tasks/tasks.go:742)
    wait_for(lambda: len([m for m in machines(controller) if m["name"]]) == 2,
             what="two machines with their details")  # fmt: skip
    rows = sorted(machines(controller), key=lambda m: m["host_and_port"])
    assert [(m["host_and_port"], m["name"]) for m in rows] == [
        ("127.0.0.1:12401", "w1"), ("127.0.0.1:12402", "w2"),
    ]  # fmt: skip
    assert "PSProve" in rows[0]["tasks"].split(",")
    # `curio cli --machine <listen> info` is how a worker learns its machine id
    res = a.run(["curio", "cli", "--machine", "127.0.0.1:12401", "info"], **env(controller))
    assert res.returncode == 0, res.stderr
    assert f"ID: {rows[0]['id']}\nName: w1\n" in res.stdout
    assert "HostPort: 127.0.0.1:12401\n" in res.stdout


def test_a_host_name_leaves_the_identity_empty(tmp_path, controller) -> None:
    """--listen with a host name: deps.go:294-306 sets the address only for an IP literal."""
    a = node(tmp_path, "a", controller)
    a.start_daemon()
    set_layer(a, controller)
    run_curio(a, controller, "--listen", "worker.example:12401")
    wait_for(lambda: machines(controller), what="a machine")
    assert [m["host_and_port"] for m in machines(controller)] == [""]


def test_a_restarted_node_takes_back_its_own_tasks_and_no_others(tmp_path, controller) -> None:
    """harmonytask.go:351-389: a starting node resurrects every task owned by its machine id.
    With one identity each, a restart takes back only its own; with a shared one, the other's."""
    a, b = node(tmp_path, "a", controller, **SLOW), node(tmp_path, "b", controller, **SLOW)
    for i, box in enumerate((a, b), start=1):
        box.start_daemon()
        set_layer(box, controller, title=f"{LAYER}-{i}")
    proc_a, _ = run_curio(a, controller, "--listen", "127.0.0.1:12401", layer=f"{LAYER}-1")
    run_curio(b, controller, "--listen", "127.0.0.1:12402", layer=f"{LAYER}-2")

    def claims() -> dict[str, list[int]]:
        return {m["host_and_port"]: m["claims"] for m in machines(controller)}

    wait_for(lambda: all(len(c) == 2 for c in claims().values()) and len(claims()) == 2,
             what="both nodes holding MaxPending tasks")  # fmt: skip
    held = claims()
    # a's curio dies (the daemon keeps proving) and comes back with the same identity
    proc_a.send_signal(signal.SIGKILL)
    proc_a.wait(WAIT)
    run_curio(a, controller, "--listen", "127.0.0.1:12401", log="curio-2.log",
              layer=f"{LAYER}-1")  # fmt: skip
    # each recovered task logs from its own thread (a goroutine in curio): wait for them all
    wait_for(lambda: len(recovered(a.root / "curio-2.log")) >= len(held["127.0.0.1:12401"]),
             what="a's recovery")  # fmt: skip
    # its own tasks, still owned by its machine id (nobody else could claim them) ...
    assert recovered(a.root / "curio-2.log") == set(held["127.0.0.1:12401"])
    # ... and none of b's, which b proves on, as before
    assert not recovered(a.root / "curio-2.log") & begun(b.root / "curio.log")
    assert not recovered(b.root / "curio.log")


def test_a_shared_identity_takes_back_another_workers_tasks(tmp_path, controller) -> None:
    """The failure the identity prevents: b starting as the same machine as a proves a's tasks
    a second time (harmonytask.go:351-389 skips the claim for owned tasks)."""
    a, b = node(tmp_path, "a", controller, **SLOW), node(tmp_path, "b", controller, **SLOW)
    for i, box in enumerate((a, b), start=1):
        box.start_daemon()
        set_layer(box, controller, title=f"{LAYER}-{i}")
    run_curio(a, controller, layer=f"{LAYER}-1")  # default --listen 0.0.0.0:12300
    wait_for(lambda: machines(controller) and len(machines(controller)[0]["claims"]) == 2,
             what="a holding two tasks")  # fmt: skip
    run_curio(b, controller, layer=f"{LAYER}-2")
    wait_for(lambda: recovered(b.root / "curio.log"), what="b taking a's tasks")
    # every task b took back at its start is one a began: a's tasks, proved a second time
    assert recovered(b.root / "curio.log") <= begun(a.root / "curio.log")
    # both daemons now prove the same tasks: the one that finishes second stores nothing

    def proving_in_b() -> set[int]:
        status = json.loads(b.run(["curl", "-s", f"http://{b.status_addr}/status"]).stdout)
        jobs = {p["job_id"] for p in status["pipelines"]}
        return {int(j.rsplit("-", 1)[1]) for j in jobs if j.startswith("ps-")}

    wait_for(lambda: proving_in_b() & recovered(b.root / "curio.log"),
             what="b's daemon proving a's tasks")  # fmt: skip


# ------------------------------------------------------------------ the database connection


def test_load_balancing_dials_the_clusters_advertised_addresses(tmp_path, controller) -> None:
    """--db-load-balance defaults to true (cmd/curio/main.go:166-170): the smart driver reads
    yb_servers() and connects to a production cluster's private addresses, which a worker
    cannot reach through its tunnel (yugabyte/pgx load_balance.go)."""
    a = node(tmp_path, "a", controller)
    res = a.run(["curio", "run"], **{**env(controller), "CURIO_DB_LOAD_BALANCE": "true"})
    assert res.returncode == 1
    for host in ("10.0.0.5", "10.0.0.6", "10.0.0.7"):
        assert (
            f"Adding {host} to unavailableHosts due to {host}:5433 ({host}): dial error: "
            f"dial tcp {host}:5433: connect: connection timed out"
        ) in res.stderr
    assert res.stderr.endswith(
        f"ERROR: failed to connect to `user=yugabyte database={controller.db.database}`: could "
        "not find a server to connect to\n\n"
    )
    assert "loadBalance=true" in res.stderr
    assert machines(controller) == [], "it never registered"


def test_load_balancing_works_where_the_cluster_advertises_loopback(tmp_path) -> None:
    """The single-node set-up of curio's documentation (setup.md:57, --advertise_address
    127.0.0.1): the advertised address is the worker's end of the tunnel."""
    controller = Controller(nodes=("127.0.0.1",))
    try:
        a = node(tmp_path, "a", controller)
        a.start_daemon()
        set_layer(a, controller)
        _, log = run_curio(a, controller, "--listen", "127.0.0.1:12401",
                           CURIO_DB_LOAD_BALANCE="true")  # fmt: skip
        wait_for(lambda: "Setting up RPC server" in log.read_text(), what="curio up")
        assert "loadBalance=true" in log.read_text()
        assert [m["host_and_port"] for m in machines(controller)] == ["127.0.0.1:12401"]
    finally:
        controller.close()


# ------------------------------------------------------------------ logging and deadline


@pytest.mark.parametrize(("level", "shown"), [(None, True), ("info", True), ("warn", False)])
def test_an_inherited_log_level_hides_the_line_the_worker_waits_for(
    tmp_path, controller, level: str | None, shown: bool
) -> None:
    a = node(tmp_path, "a", controller)
    a.start_daemon()
    set_layer(a, controller)
    extra = {"GOLOG_LOG_LEVEL": level} if level else {}
    _, log = run_curio(a, controller, "--listen", "127.0.0.1:12401", **extra)
    wait_for(lambda: machines(controller), what="registered")
    wait_for(lambda: "Setting up RPC server" in log.read_text() or not shown, what="up")
    assert ("cuzk proving daemon enabled" in log.read_text()) == shown


def test_a_proof_past_prove_timeout_is_retried_while_the_daemon_goes_on(tmp_path, controller):
    """lib/cuzk/client.go:116-122: ProveTimeout wraps the whole call, the daemon's queue
    included; curio gives up and retries (task_prove.go: RetryWait 10 s x retries), the daemon,
    which cannot cancel (cuzk-server/src/service.rs:173-183), proves on."""
    a = node(tmp_path, "a", controller, rate_per_hour=0.05)
    a.start_daemon()
    set_layer(a, controller, max_pending=1, timeout="2h")
    _, log = run_curio(a, controller, "--listen", "127.0.0.1:12401")
    wait_for(lambda: "Do() returned error" in log.read_text(), what="the deadline")
    line = next(x for x in log.read_text().splitlines() if "Do() returned error" in x)
    task = int(re.search(r'"id": "(\d+)"', line).group(1))
    kind = "snap" if "cuzk snap prove failed" in line else "porep"
    assert (
        f'"error": "failed to compute proof: cuzk {kind} prove failed: cuzk Prove RPC: rpc error: '
        'code = DeadlineExceeded desc = context deadline exceeded"'
    ) in line
    status = json.loads(a.run(["curl", "-s", f"http://{a.status_addr}/status"]).stdout)
    assert any(str(task) in p["job_id"] for p in status["pipelines"]), "the daemon proves on"
    tasks = {t["id"]: t for t in controller.view()["tasks"]}
    assert tasks[task]["retries"] >= 1
    history = [h for h in controller.view()["history"] if h["task_id"] == task]
    assert history and not history[0]["result"] and "DeadlineExceeded" in history[0]["err"]


def test_the_market_sends_both_kinds(tmp_path) -> None:
    """A provider cannot refuse SnapDeals requests (lib/proofsvc/provictl.go:78-90): PSProve
    proves either kind (task_prove.go:271-289)."""
    controller = Controller(snap_share=0.5, seed=3)
    try:
        a = node(tmp_path, "a", controller)
        a.start_daemon()
        set_layer(a, controller, max_pending=4)
        _, log = run_curio(a, controller, "--listen", "127.0.0.1:12401")

        def kinds() -> dict[str, int] | None:
            status = json.loads(a.run(["curl", "-s", f"http://{a.status_addr}/status"]).stdout)
            done = status["counters"]["completed_by_kind"]
            return done if len([k for k, n in done.items() if n]) == 2 else None

        assert set(wait_for(kinds, what="both kinds proved")) == {"porep-c2", "snap-update"}
        wait_for(lambda: len([h for h in proofs(controller) if h["result"]]) >= 4,
                 what="proofs delivered")  # fmt: skip
        assert "PSProve PoRep proof validated" in log.read_text()
        # each result names the node that did it (task_type_handler.go:484-486)
        assert {h["completed_by_host_and_port"] for h in proofs(controller)} == {"127.0.0.1:12401"}
    finally:
        controller.close()


# ------------------------------------------------------------------ the cordon, dead nodes


def test_a_cordoned_node_claims_nothing_new_and_finishes_what_it_holds(
    tmp_path, controller
) -> None:
    """`curio cli cordon` is ``UPDATE harmony_machines SET unschedulable = true WHERE id = $1``
    (cmd/curio/rpc/rpc.go:376-378). The node reads the flag with the unowned tasks
    (checkNodeFlags, harmonytask.go:647-664) and then claims nothing (pollerTryAllWork,
    harmonytask.go:454-517); the tasks it holds run to the end. Here the node is cordoned while
    its curio is down, so the flag is read before its first claim (scheduler.go:115-129), and
    the tasks it holds are the ones it takes back at start (harmonytask.go:357-389)."""
    fast = {"rate_per_hour": 400.0}
    a = node(tmp_path, "a", controller, rate_per_hour=2.0)  # a proof: ~0.4 s at 5000x
    a.start_daemon()
    set_layer(a, controller, title=f"{LAYER}-a")
    proc, _ = run_curio(a, controller, "--listen", "127.0.0.1:12401", layer=f"{LAYER}-a")
    held = holding(controller, "127.0.0.1:12401")
    proc.send_signal(signal.SIGKILL)
    proc.wait(WAIT)
    row = machine(controller, "127.0.0.1:12401")
    assert row is not None
    # rpc.go:377 (cordoned while its curio is down: the flag is read before any claim)
    cordon = "UPDATE harmony_machines SET unschedulable = %s WHERE id = %s"
    controller.sql(cordon, (True, row["id"]))
    _, log = run_curio(a, controller, "--listen", "127.0.0.1:12401", log="curio-2.log",
                       layer=f"{LAYER}-a")  # fmt: skip
    # its own tasks, finished by it
    wait_for(lambda: {h["task_id"] for h in proofs(controller, "127.0.0.1:12401")
                      if h["result"]} >= held, what="a finishing what it holds")  # fmt: skip
    # work goes on without it: another node does it
    b = node(tmp_path, "b", controller, **fast)
    b.start_daemon()
    set_layer(b, controller, title=f"{LAYER}-b", max_pending=4)
    run_curio(b, controller, "--listen", "127.0.0.1:12402", layer=f"{LAYER}-b")
    wait_for(lambda: len([h for h in proofs(controller, "127.0.0.1:12402") if h["result"]]) >= 4,
             what="b proving")  # fmt: skip
    assert begun(log) == recovered(log) == held, "the cordoned node began nothing new"
    assert machine(controller, "127.0.0.1:12401")["unschedulable"] is True
    # uncordoned, it claims again
    controller.sql(cordon, (False, row["id"]))
    wait_for(lambda: begun(log) - held, what="a claiming again once uncordoned")


def test_a_restart_request_ends_a_cordoned_node_once_it_owns_no_task(tmp_path, controller):
    """curio's web UI cordons a node and asks it to restart (web/api/webrpc/cluster.go:499-521:
    ``restart_request = NOW()``); the node exits with exitStatusRestartRequest (100) once it
    owns no task, clearing both flags (harmonytask.go:666-684)."""
    a = node(tmp_path, "a", controller, rate_per_hour=2.0)
    a.start_daemon()
    set_layer(a, controller)
    proc, log = run_curio(a, controller, "--listen", "127.0.0.1:12401")
    held = holding(controller, "127.0.0.1:12401")
    row = machine(controller, "127.0.0.1:12401")
    controller.sql(
        "UPDATE harmony_machines SET unschedulable = %s, restart_request = %s WHERE id = %s",
        (True, datetime.fromtimestamp(controller.clock.now(), tz=UTC), row["id"]),
    )
    assert proc.wait(WAIT) == 100
    done = {h["task_id"] for h in proofs(controller, "127.0.0.1:12401") if h["result"]}
    assert held <= done, "it finished what it held first"
    assert "no tasks pending, restarting" in log.read_text()
    after = machine(controller, "127.0.0.1:12401")
    assert (after["unschedulable"], after["restart_request"]) == (False, None)
    assert not [t for t in controller.view()["tasks"] if t["owner_id"] == row["id"]]


@pytest.mark.parametrize(
    "release",
    [
        # what a node does for its own tasks (harmonytask.go:383), by the machine id
        "UPDATE harmony_task SET owner_id = NULL WHERE owner_id = %s",
        # the machine's row gone: harmony_task.owner_id ... ON DELETE SET NULL
        # (harmony/harmonydb/sql/20230719-harmony.sql:17)
        "DELETE FROM harmony_machines WHERE id = %s",
    ],
    ids=["release", "delete-machine"],
)
def test_a_dead_nodes_tasks_freed_by_the_controller_go_to_another_node_at_once(
    tmp_path, controller, release: str
) -> None:
    """A destroyed worker's curio gives nothing back (harmonytask.go:414-432 runs only on a
    clean shutdown); the controller frees its tasks with one statement, and another node claims
    them on its next poll, long before the 10-minute cleanup would (resources.go:22)."""
    a = node(tmp_path, "a", controller, **SLOW)
    a.start_daemon()
    set_layer(a, controller, title=f"{LAYER}-a")
    proc, _ = run_curio(a, controller, "--listen", "127.0.0.1:12401", layer=f"{LAYER}-a")
    held = holding(controller, "127.0.0.1:12401")
    proc.send_signal(signal.SIGKILL)  # the worker is destroyed
    proc.wait(WAIT)
    dead = machine(controller, "127.0.0.1:12401")
    assert dead is not None
    controller.sql(release, (dead["id"],))
    b = node(tmp_path, "b", controller, **SLOW)
    b.start_daemon()
    set_layer(b, controller, title=f"{LAYER}-b", max_pending=4)
    _, log = run_curio(b, controller, "--listen", "127.0.0.1:12402", layer=f"{LAYER}-b")
    wait_for(lambda: begun(log) >= held, what="b taking a's tasks")
    assert 'Cleaned up machines\t{"count": 0}' in log.read_text(), "no cleanup freed them"
    still = machine(controller, "127.0.0.1:12401")
    assert (still is not None) == release.startswith("UPDATE"), "the dead row stays, or went"


def test_a_dead_nodes_tasks_stay_until_the_ten_minute_cleanup(tmp_path) -> None:
    """Without the controller, a dead node's tasks wait until a live node finds it 10 minutes
    without a heartbeat (LOOKS_DEAD_TIMEOUT, resources.go:22; CleanupMachines at registration
    and every 5 minutes, resources.go:109-111, scheduler.go:100-111), when ON DELETE SET NULL
    frees them. At 60x the stand-in keeps curio's 10 minutes exactly (its looks_dead_s); the
    second node's clock is 7 minutes ahead, to get there sooner. Asserted on the simulated
    clock, in curio's own lines: its registration's cleanup removed the dead node only if 10
    minutes had passed, and it began none of the dead node's tasks before that."""
    speed = "60"
    controller = Controller(speed=float(speed))
    try:
        b = node(tmp_path, "b", controller, rate_per_hour=400.0)  # it keeps claiming
        b.env["SIM_SPEED"] = speed
        warm(b)  # before a dies: b's curio registers soon after, as the test needs
        set_layer(b, controller, title=f"{LAYER}-b", max_pending=4)
        a = node(tmp_path, "a", controller, **SLOW)
        a.env["SIM_SPEED"] = speed
        a.start_daemon()
        set_layer(a, controller, title=f"{LAYER}-a")
        proc, _ = run_curio(a, controller, "--listen", "127.0.0.1:12401", layer=f"{LAYER}-a")
        held = holding(controller, "127.0.0.1:12401")
        proc.send_signal(signal.SIGKILL)
        proc.wait(WAIT)
        last_contact = machine(controller, "127.0.0.1:12401")["last_contact"]
        ahead = float(controller.env()["WORKER_CLOCK_SIM0"]) + 420
        _, log = run_curio(b, controller, "--listen", "127.0.0.1:12402", layer=f"{LAYER}-b",
                           WORKER_CLOCK_SIM0=f"{ahead:.6f}")  # fmt: skip
        try:
            wait_for(lambda: begun(log) >= held, what="b taking a's tasks after the cleanup")
        except AssertionError as exc:  # what the cluster held then, for whoever reads it
            rows = [(m["id"], m["host_and_port"], m["last_contact"]) for m in machines(controller)]
            owners = {t["id"]: t["owner_id"] for t in controller.view()["tasks"] if t["id"] in held}
            raise AssertionError(
                f"{exc}; a's last contact {last_contact}, machines {rows}, a's tasks {owners}, "
                f"b's clock now {_clock_now(b, log)}"
            ) from None
        stamp, count = re.search(
            r'^(\S+)\t\w+\t.*Cleaned up machines\t\{"count": (\d+)\}', log.read_text(), re.M
        ).groups()  # fmt: skip
        registered = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
        dead_for = registered.timestamp() - last_contact
        assert int(count) == (1 if dead_for >= 600 else 0), (dead_for, count)
        when = begun_at(log)
        assert all(when[t] >= last_contact + 600 for t in held), {
            t: when[t] - last_contact for t in held
        }
        assert machine(controller, "127.0.0.1:12401") is None, "the dead machine was cleaned up"
    finally:
        controller.close()


def warm(box: Box) -> None:
    """Start the node's daemon and warm it as benchmark.sh does before curio feeds it: one PoRep
    and one SnapDeals proof, then both PCEs cached. A cold daemon fed proofs faster than it
    extracts a PCE starts one extraction per proof dispatched (engine.rs:2268-2290, 2422-2445),
    each holding its 14 GiB (PCE_EXTRACTION_TRANSIENT_BYTES) while insert_blocking polls for the
    PCE's own room (pipeline.rs:432-492): a dozen of them leave room for neither the PCE nor a
    synthesis, and the daemon proves nothing again. cuzk at e0294b0f does this, and so does
    its stand-in (seen here at 60x on a loaded machine: 14 extractions, then silence)."""
    _, log = box.start_daemon()
    assert status_of(box.prove().stdout) == "COMPLETED"
    vanilla, ids = SIM.make_snap_vanilla(1000, 1)
    path = box.root / "snap-warmup.json"
    path.write_bytes(vanilla)
    assert status_of(prove_snap(box, path, ids).stdout) == "COMPLETED"
    for what in ("\n", " for SnapDeals\n"):
        wait_for(lambda w=what: f"background PCE extraction complete{w}" in log.read_text(),
                 what=f"the PCE{what.rstrip()}")  # fmt: skip


def _clock_now(box: Box, log: Path) -> str:
    """The node's clock as its last log line stamps it."""
    lines = [x for x in log.read_text().splitlines() if x[:4].isdigit()]
    return lines[-1].split("\t", 1)[0] if lines else "?"


class Demand(UnlimitedDemand):
    """A market whose demand is switched: off, no ask is ever matched."""

    def __init__(self) -> None:
        self.on = False

    def match(self, market: Market, provider: str, asks: list[Ask], now: float) -> list[Ask]:
        return list(asks) if self.on else []


def test_a_dead_holder_of_the_request_task_stops_new_work_until_released(tmp_path) -> None:
    """bg:PShareRequest is the cluster's one request task (proofshare_meta.request_task_id,
    tasks/proofshare/task_request.go:66-118): while a dead node owns it, no node asks the market
    for work, whatever the market would give; freed, another node takes it and work flows."""
    demand = Demand()
    controller = Controller(market=Market(policy=demand))
    try:
        a = node(tmp_path, "a", controller)
        a.start_daemon()
        set_layer(a, controller, title=f"{LAYER}-a")
        proc, log_a = run_curio(a, controller, "--listen", "127.0.0.1:12401", layer=f"{LAYER}-a")
        # no demand: its request loop waits on its asks (task_request.go:334-351), holding it
        wait_for(lambda: "waiting before next poll" in log_a.read_text()
                 and claims(controller, "127.0.0.1:12401", "bg:PShareRequest"),
                 what="a in its request loop")  # fmt: skip
        stranded = claims(controller, "127.0.0.1:12401", "bg:PShareRequest")
        proc.send_signal(signal.SIGKILL)
        proc.wait(WAIT)
        dead = machine(controller, "127.0.0.1:12401")
        demand.on = True  # the market has work now: nobody asks for it
        b = node(tmp_path, "b", controller)
        b.start_daemon()
        set_layer(b, controller, title=f"{LAYER}-b")
        _, log_b = run_curio(b, controller, "--listen", "127.0.0.1:12402", layer=f"{LAYER}-b")

        def adder_ticks() -> int:  # each tick of b's request adder asks who may hold off
            return log_b.read_text().count("GetMinimumConflictSet result")

        wait_for(lambda: adder_ticks() >= 10, what="b's request adder running")
        view = controller.view()
        assert [t["id"] for t in view["tasks"] if t["name"] == "bg:PShareRequest"] == sorted(
            stranded
        ), "no second request task"
        assert view["meta"]["request_task_id"] in stranded
        assert not view["queue"] and not begun(log_b), "no work for anybody"
        assert controller.db.market.stats()["requests"] == 0
        controller.sql("UPDATE harmony_task SET owner_id = NULL WHERE owner_id = %s", (dead["id"],))
        wait_for(lambda: begun(log_b) >= stranded, what="b taking the request task")
        wait_for(lambda: [h for h in proofs(controller, "127.0.0.1:12402") if h["result"]],
                 what="work flowing again")  # fmt: skip
    finally:
        controller.close()


# ------------------------------------------------------------------ proofs, submissions, payments


def test_a_gpu_whose_snap_proofs_do_not_verify_fails_in_curio_while_cuzk_counts_them(
    tmp_path,
) -> None:
    """cuzk self-checks PoRep proofs only (extern/cuzk/cuzk-core/src/engine.rs): a SnapDeals
    proof that does not verify is COMPLETED and counted by the daemon; curio's CheckOutput
    rejects it (lib/proofsvc/common/types.go:296-302) and PSProve fails
    (tasks/proofshare/task_prove.go:220-223)."""
    controller = Controller(snap_share=1.0)
    try:
        a = node(tmp_path, "a", controller, fault="snap_invalid")
        a.start_daemon()
        set_layer(a, controller)
        _, log = run_curio(a, controller, "--listen", "127.0.0.1:12401")
        wait_for(lambda: len(proofs(controller)) >= 3, what="three results")
        failed = [h for h in proofs(controller) if not h["result"]]
        assert all(not h["result"] for h in proofs(controller)), "none delivered"
        assert {h["err"] for h in failed} == {"error: proof check failed: invalid UpdateProof"}
        assert {h["completed_by_host_and_port"] for h in failed} == {"127.0.0.1:12401"}
        assert re.search(
            r"\tERROR\tharmonytask\tharmonytask/task_type_handler\.go:354\tDo\(\) returned "
            r'error\t\{"type": "PSProve", "id": "\d+", "error": "proof check failed: invalid '
            r'UpdateProof"\}',
            log.read_text(),
        )
        counters = json.loads(a.run(["curl", "-s", f"http://{a.status_addr}/status"]).stdout)[
            "counters"
        ]
        assert counters["completed_by_kind"].get("snap-update", 0) >= len(failed)
        assert counters["total_failed"] == 0, "the daemon saw nothing wrong"
        assert not [q for q in controller.view()["queue"] if q["compute_done"]]
    finally:
        controller.close()


def test_queue_rows_are_computed_submitted_and_paid_but_challenges_are_not(tmp_path) -> None:
    """A request's row (proofshare_queue) is computed by PSProve, submitted by PShareSubmit
    (task_submit.go:97-200: RespondWork, submit_done, was_pow), and a paid one leaves the
    market's voucher in proofshare_provider_payments (nonce and cumulative amount at the ask's
    price); a challenge proof (the market's PoW) is not paid."""
    controller = Controller(pow_share=0.4, seed=5)
    try:
        a = node(tmp_path, "a", controller)
        a.start_daemon()
        set_layer(a, controller, max_pending=4)
        run_curio(a, controller, "--listen", "127.0.0.1:12401")

        def submitted() -> list[dict[str, Any]] | None:
            rows = [q for q in controller.view()["queue"] if q["submit_done"]]
            kinds = {q["was_pow"] for q in rows}
            return rows if len(rows) >= 6 and kinds == {True, False} else None

        rows = wait_for(submitted, what="paid and challenge proofs submitted")
        view = controller.view()
        assert all(q["compute_done"] and q["submit_task_id"] is None for q in rows)
        paid = {q["request_cid"] for q in rows if not q["was_pow"]}
        payments = view["payments"]
        by_cid = {p["request_cid"] for p in payments}
        assert paid <= by_cid and not by_cid & {q["request_cid"] for q in rows if q["was_pow"]}
        price = int(view["meta"]["pprice"])
        nonces = sorted(p["payment_nonce"] for p in payments)
        assert nonces == list(range(1, len(payments) + 1))
        for p in payments:
            assert int(p["payment_cumulative_amount"]) == p["payment_nonce"] * price
        # the provider as the chain knows it (StateLookupID through the tunnel)
        assert {p["provider_id"] for p in payments} == {
            int(controller.lotus_lookup(view["meta"]["wallet"])[2:])
        }
        stats = controller.db.market.stats()
        assert stats["completed"] >= len(rows) and stats["challenges"] >= 1
    finally:
        controller.close()
