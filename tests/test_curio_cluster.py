"""curio's cluster, where workers meet, with the stand-in curio rebuilt from curio's source
(vastui/sim/standins/curio cites each behaviour) against the simulated cluster database
(vastui/sim/harmonydb.py): machine identity keyed by host:port with 0.0.0.0 replaced by the
database connection's address; a second registration of an identity taking back the first's
tasks; the smart driver's load balancing dialling the cluster's advertised addresses;
GOLOG_LOG_LEVEL; ProveTimeout with a retry while the daemon goes on; both proof kinds from the
market. Every wait is a condition with an upper bound; nothing is timed."""

from __future__ import annotations

import json
import re
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import WAIT, Controller, wait_for
from tests.test_worker_standins import Box

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
        "CURIO_DB_HOST": "127.0.0.1",
        "CURIO_DB_PORT": controller.db_addr.rsplit(":", 1)[1],
        "CURIO_DB_PASSWORD": "s3cret-db",
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
    wait_for(lambda: len(machines(controller)) == 2, what="two machines")
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
    slow = {"rate_per_hour": 0.05}  # each proof takes many seconds: tasks stay owned
    a, b = node(tmp_path, "a", controller, **slow), node(tmp_path, "b", controller, **slow)
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
    slow = {"rate_per_hour": 0.05}
    a, b = node(tmp_path, "a", controller, **slow), node(tmp_path, "b", controller, **slow)
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
        "ERROR: failed to connect to `user=yugabyte database=yugabyte`: could not find a server "
        "to connect to\n\n"
    )
    assert "loadBalance=true" in res.stderr
    assert machines(controller) == [], "it never registered"


def test_load_balancing_works_where_the_cluster_advertises_loopback(tmp_path) -> None:
    """The single-node set-up of curio's documentation (setup.md:57, --advertise_address
    127.0.0.1): the advertised address is the worker's end of the tunnel."""
    controller = Controller(db_password="s3cret-db", nodes=("127.0.0.1",))
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
    controller = Controller(db_password="s3cret-db", snap_share=0.5, seed=3)
    try:
        a = node(tmp_path, "a", controller)
        a.start_daemon()
        set_layer(a, controller, max_pending=4)
        _, log = run_curio(a, controller, "--listen", "127.0.0.1:12401")
        wait_for(lambda: len([h for h in controller.view()["history"] if h["result"]]) >= 6,
                 what="six proofs delivered")  # fmt: skip
        status = json.loads(a.run(["curl", "-s", f"http://{a.status_addr}/status"]).stdout)
        kinds = status["counters"]["completed_by_kind"]
        assert set(kinds) == {"porep-c2", "snap-update"} and all(kinds.values()), kinds
        assert "PSProve PoRep proof validated" in log.read_text()
    finally:
        controller.close()
