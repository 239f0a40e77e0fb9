"""Fleet-wide faults of the simulated cloud (vastsim/fleet.py): a broken image, a broken
benchmark input, the controller's services down. Each makes every machine fail the same way,
and each test shows what a controller observes from outside: an instance's ``status_msg``
through the API, the benchmark result of two different machines, the worker's tunnel-down
report. Switched at runtime, in process (``SimCloud.fleet_fault``) and over HTTP
(``/_sim/faults``, also on a served cloud).

No sleeps for timing: every wait polls a condition with an upper bound only.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import shutil
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncssh
import httpx
import pytest

from tests import test_e2e_worker
from tests.helpers import eventually, sim_api, wait_for
from tests.test_e2e_worker import (
    SHORT,
    Sim,
    events_until,
    last_raw,
    no_sleep,
    raw_events,
    sandbox_pids,
)
from tests.test_sim_serve_cloud import AUTH, KEY, start_served, stop_served
from vastsim import ManualClock, SimCloud
from vastsim.demo import client_for_cloud
from vastsim.fleet import FleetFaultError, familiar
from vastsim.hosting import worker_hosts
from vastui.domain.reports import WorkerEvent
from vastui.ssh import RemoteForward, Worker
from vastui.ssh.cqlpin import CqlPinProxy

IMAGE = "ghcr.io/vastui/worker:fleet"
LONG = 120.0  # an upper bound only
# The workers' environment: three proofs; no paramfetch timeout (a machine with a slow link is not
# these tests' business) and generous time bounds (simulated seconds: a loaded test machine at
# 1000x must not time out).
WORKER_ENV = {"MIN_RATE": "1.0", "BENCH_PROOFS": "3", "PARAMFETCH_TIMEOUT": "0",
              "BENCH_TIMEOUT": "1000000", "BENCH_PROOF_TIMEOUT": "1000000",
              "BENCH_PCE_TIMEOUT": "1000000", "BENCH_READY_TIMEOUT": "1000000",
              "CUZK_READY_TIMEOUT": "1000000", "CURIO_READY_TIMEOUT": "1000000"}  # fmt: skip


def signature(line: str) -> str:
    """What a controller may group failures by: the line with its ids and numbers stripped
    (timestamps, uuids, hex ids, ports, counts)."""
    line = re.sub(r"\d{4}-\d\d-\d\dT[\d:.]+Z", "<ts>", line)
    line = re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "<id>", line)
    line = re.sub(r"\b[0-9a-f]{16,}\b", "<id>", line)
    return re.sub(r"\d+", "<n>", line)


# -- 1. an image the registry does not have ------------------------------------------------------


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def cloud(clock: ManualClock) -> SimCloud:
    return SimCloud(seed=5, clock=clock, hosts=60, api_key=KEY)


@pytest.fixture
async def api(cloud: SimCloud) -> AsyncIterator[httpx.AsyncClient]:
    async with sim_api(cloud, AUTH) as client:
        yield client


async def create(api: httpx.AsyncClient, image: str) -> int:
    offer = (await api.post("/api/v0/bundles/", json={"limit": 1})).json()["offers"][0]
    r = await api.put(f"/api/v0/asks/{offer['id']}/", json={"image": image, "runtype": "ssh"})
    assert r.status_code == 200 and r.json()["success"] is True, r.text  # accepted, as Vast does
    return int(r.json()["new_contract"])


async def show(api: httpx.AsyncClient, iid: int) -> dict[str, Any]:
    r = await api.get(f"/api/v0/instances/{iid}/")
    assert r.status_code == 200, r.text
    return r.json()["instances"]


async def test_an_image_the_registry_does_not_have_stays_loading_with_the_pull_error(
    api: httpx.AsyncClient, cloud: SimCloud, clock: ManualClock
):
    started: list[int] = []
    cloud.on_running = lambda inst: started.append(inst["id"])
    r = await api.put("/_sim/faults/image_missing", json={"images": [IMAGE]})
    assert r.status_code == 200 and r.json()["faults"]["image_missing"] == {
        "on": True,
        "params": {"images": [IMAGE], "error": "manifest_unknown"},
        "about": r.json()["faults"]["image_missing"]["about"],
    }
    storm = [await create(api, IMAGE), await create(api, IMAGE)]
    other = await create(api, "pytorch/pytorch:2.4.0")  # the registry has every other image
    clock.advance(3600)
    want = (
        "Error response from daemon: manifest for ghcr.io/vastui/worker:fleet not found: "
        "manifest unknown: manifest unknown"
    )
    seen = [await show(api, iid) for iid in storm]
    assert seen[0]["machine_id"] != seen[1]["machine_id"], "two machines fail alike"
    for inst in seen:
        assert (inst["actual_status"], inst["status_msg"]) == ("loading", want), inst
        assert (inst["intended_status"], inst["cur_state"]) == ("running", "running")
        assert inst["ssh_port"] is None and inst["ports"] is None
    assert (await show(api, other))["actual_status"] == "running"
    assert started == [other], "nothing ran from the missing image: no container, no onstart"

    # The host daemon's log says it as well; the container has no log.
    r = await api.put(f"/api/v0/instances/request_logs/{storm[0]}/", json={"daemon_logs": "true"})
    url = r.json()["result_url"].replace("http://vast.sim", "")
    text = ""
    for _ in range(3):  # the blob is there after two polls
        blob = await api.get(url)
        text = blob.text if blob.status_code == 200 else ""
    assert text.splitlines()[-1].endswith(f"vast-daemon: {want}")
    assert f"container C.{storm[0]}" not in text

    # The storm ends: a new rent pulls; an instance of the storm pulls again when rebooted.
    r = await api.delete("/_sim/faults/image_missing")
    assert r.status_code == 200 and r.json()["faults"]["image_missing"]["on"] is False
    after = await create(api, IMAGE)
    clock.advance(3600)
    assert (await show(api, after))["actual_status"] == "running"
    assert (await show(api, storm[1]))["status_msg"] == want, "a failed pull is not retried alone"
    assert (await api.put(f"/api/v0/instances/reboot/{storm[1]}/", json={})).json()["success"]
    clock.advance(3600)
    assert (await show(api, storm[1]))["actual_status"] == "running"
    assert started == [other, after, storm[1]]


async def test_a_missing_repository_is_refused_for_every_image(
    api: httpx.AsyncClient, cloud: SimCloud, clock: ManualClock
):
    # In process, every image at once: the repository gone (or private).
    await cloud.fleet_fault("image_missing", error="access_denied")
    iids = [await create(api, "magik6k/curio-cuzk"), await create(api, "docker.io/library/x:1")]
    clock.advance(600)
    assert [(await show(api, iid))["status_msg"] for iid in iids] == [
        "Error response from daemon: pull access denied for magik6k/curio-cuzk, repository does "
        "not exist or may require 'docker login': denied: requested access to the resource is "
        "denied",
        "Error response from daemon: pull access denied for x, repository does not exist or may "
        "require 'docker login': denied: requested access to the resource is denied",
    ]
    stats = (await api.get("/_sim/stats", headers={"Authorization": ""})).json()
    assert stats["fleet_faults"] == {"image_missing": {"error": "access_denied"}}
    await cloud.fleet_fault("image_missing", on=False)
    stats = (await api.get("/_sim/stats")).json()
    assert stats["fleet_faults"] == {}
    t0 = stats["fleet_switches"][0][0]
    assert stats["fleet_switches"] == [
        [t0, "image_missing", True],
        [t0 + 600, "image_missing", False],
    ]


async def test_the_fault_switch_answers(api: httpx.AsyncClient, cloud: SimCloud):
    r = await api.get("/_sim/faults", headers={"Authorization": ""})  # reading needs no key
    assert r.status_code == 200
    assert set(r.json()["faults"]) == {"image_missing", "bench_input_broken", "controller_down"}
    assert not any(f["on"] for f in r.json()["faults"].values())
    r = await api.put("/_sim/faults/bench_input_broken", json={}, headers={"Authorization": ""})
    assert r.status_code == 401 and r.json()["error"] == "auth_error"
    r = await api.put("/_sim/faults/disk_full", json={})
    assert r.status_code == 404 and r.json()["error"] == "no_such_fault"
    for body in ({"on": "yes"}, {"colour": 1}, {"images": [""]}, {"error": "teapot"}, [1]):
        r = await api.put("/_sim/faults/image_missing", json=body)
        assert r.status_code == 400 and r.json()["error"] == "invalid_args", body
    assert (await api.post("/_sim/faults", json={})).status_code == 405
    assert (await api.get("/_sim/faults/image_missing")).status_code == 405
    assert cloud.fleet.active == {}, "a refused switch changes nothing"
    r = await api.put("/_sim/faults/bench_input_broken", json={"on": True})
    assert r.json()["faults"]["bench_input_broken"]["on"] is True
    r = await api.put("/_sim/faults/bench_input_broken", json={"on": False})
    assert r.json()["faults"]["bench_input_broken"]["on"] is False
    with pytest.raises(FleetFaultError):
        await cloud.fleet_fault("image_missing", images=5)
    assert familiar("library/ubuntu") == ("ubuntu", "ubuntu:latest")


# -- 2. a benchmark input broken in the image ----------------------------------------------------


# One world of rented workers, the same as the e2e worker tests'.
sim = test_e2e_worker.sim


async def bench_result(sim: Sim, runner: str) -> tuple[int, dict[str, Any], dict[str, Any]]:
    """Rent a machine and follow its worker to its benchmark's end: the machine, the result
    event's result and, when it did not pass, the worker's fail event (else {})."""
    inst = await sim.rent({**WORKER_ENV, "VASTUI_RUNNER_ID": runner})
    worker = Worker(sim.connect(inst), timeout=SHORT)

    def done(e: WorkerEvent) -> bool:
        passed = (e.stage, e.event) == ("benchmark", "result")
        return e.event == "fail" or (passed and e.result is not None and e.result.outcome == "pass")

    events = await events_until(worker, done, timeout=LONG)
    raw = await raw_events(worker)  # the contract's every field, as the scripts wrote them
    result = last_raw(raw, "event", "result")["result"]
    assert isinstance(result, dict), raw[-3:]
    assert inst.machine_id is not None
    return (
        inst.machine_id,
        result,
        last_raw(raw, "event", "fail") if events[-1].event == "fail" else {},
    )


async def test_a_broken_benchmark_input_fails_every_machine_with_the_same_line(sim: Sim):
    await sim.cloud.fleet_fault("bench_input_broken")
    (machine_a, a, fail_a), (machine_b, b, fail_b) = [await bench_result(sim, r) for r in "12"]
    assert machine_a != machine_b
    for result in (a, b):
        assert (result["outcome"], result["stage"], result["exit_code"]) == ("error", "warmup", 12)
        assert (result["proofs_completed"], result["daemon_failed"]) == (0, 1)
    # The same reason, from the real daemon's self-check through the real scripts ...
    want = (
        "warmup proof failed: PoRep proof self-check failed: assembled proof did not verify "
        "(sector=1, miner=1000)"
    )
    assert a["reason"] == b["reason"] == want
    # ... and the same error lines, each with this machine's own time and job id: alike only once
    # those are stripped.
    assert len(a["error_tail"]) == len(b["error_tail"]) == 2, (a, b)
    assert a["error_tail"][0] != b["error_tail"][0]
    assert (
        signature(a["error_tail"][0])
        == signature(b["error_tail"][0])
        == (
            "<ts> ERROR cuzk_core::engine: Phase <n>: PoRep proof self-check FAILED — proof "
            "will NOT be returned to caller job_id=<id> proof_len=<n> sector=<n> miner=<n>"
        )
    )
    assert (
        a["error_tail"][1]
        == b["error_tail"][1]
        == (
            "error:     PoRep proof self-check failed: assembled proof did not verify "
            "(sector=1, miner=1000)"
        )
    )
    # The worker's fail event carries both (what the engine records for the machine).
    for fail, result in ((fail_a, a), (fail_b, b)):
        assert (fail["stage"], fail["reason"]) == ("benchmark", want), fail
        assert fail["error_tail"] == result["error_tail"]

    # The storm ends: a machine rented now has a sound image and passes.
    await sim.cloud.fleet_fault("bench_input_broken", on=False)
    _, c, fail_c = await bench_result(sim, "3")
    assert c["outcome"] == "pass" and fail_c == {}, c


# -- 3. the controller's services down -----------------------------------------------------------


def refused(addr: str) -> bool:
    host, _, port = addr.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=SHORT):
            return False
    except ConnectionRefusedError:
        return True


@pytest.mark.skipif(shutil.which("curl") is None, reason="the worker's tunnel check needs curl")
async def test_the_controller_down_is_a_tunnel_down_on_every_worker(tmp_path: Path):
    clock = ManualClock()
    cloud = SimCloud(seed=11, clock=clock)
    async with contextlib.AsyncExitStack() as stack:
        hosts = await stack.enter_async_context(
            worker_hosts(cloud, speed=1000, machine_fault_rate=0.0, parent=tmp_path)
        )
        # The engine's ends of the tunnel: Lotus, YSQL, and YCQL through the pinning proxy.
        pin = CqlPinProxy("127.0.0.1", hosts.db.cql_port)
        pin_port = await pin.start()
        stack.push_async_callback(pin.stop)
        addrs = hosts.controller_addrs()
        forwards = [
            RemoteForward("127.0.0.1", 1234, "127.0.0.1", hosts.lotus.port),
            RemoteForward("127.0.0.1", 5433, "127.0.0.1", hosts.db.port),
            RemoteForward("127.0.0.1", 9042, "127.0.0.1", pin_port),
        ]
        client = client_for_cloud(cloud, pacing={}, sleep=no_sleep)
        stack.push_async_callback(client.aclose)
        s = Sim(cloud, clock, hosts.host, client, asyncssh.generate_private_key("ssh-ed25519"))

        await cloud.fleet_fault("controller_down")
        assert all(refused(addrs[k]) for k in ("lotus_api", "curio_db", "curio_db_cql"))
        workers: list[Worker] = []
        for runner in ("1", "2"):
            inst = await s.rent({**WORKER_ENV, "VASTUI_RUNNER_ID": runner})
            conn = s.connect(inst, forwards=forwards)
            stack.push_async_callback(conn.close)
            await conn.connect()
            workers.append(Worker(conn, timeout=SHORT))
        reports = []
        for worker in workers:  # both benchmark (no tunnel needed), then wait for it
            events = await events_until(
                worker, lambda e: e.event == "fail" or (e.tunnel is not None and e.tunnel.down),
                timeout=LONG,
            )  # fmt: skip
            assert all(e.event != "fail" for e in events), events[-3:]
            result = next(e.result for e in events if e.event == "result")
            assert result is not None and result.outcome == "pass"
            reports.append(last_raw(await raw_events(worker), "tunnel", "down"))
        for report in reports:
            assert (report["stage"], report["event"], report["tunnel"]) == (
                "prove", "progress", "down",
            )  # fmt: skip
            # Through a live SSH tunnel the worker's end accepts and the controller's end is
            # refused: the worker's end closes the connection, before or after curl's request
            # arrives (an empty reply, or a reset: a race, as with OpenSSH's sshd); the database
            # ports still accept a TCP connect.
            assert len(report["down"]) == 1, report
            assert re.fullmatch(
                r"lotus api 127\.0\.0\.1:\d+: curl: (\(52\) Empty reply from server|"
                r"\(56\) Recv failure: Connection reset by peer)",
                report["down"][0],
            ), report
            assert report["detail"] == f"waiting for the controller's tunnel: {report['down'][0]}"

        # The storm ends: the same ports listen again and every worker says its tunnel is up.
        await cloud.fleet_fault("controller_down", on=False)
        assert not any(refused(addrs[k]) for k in ("lotus_api", "curio_db", "curio_db_cql"))
        for worker in workers:
            events = await events_until(
                worker, lambda e: e.tunnel is not None and not e.tunnel.down, timeout=LONG
            )
            assert events[-1].detail == "the controller's tunnel is up"
        await asyncio.gather(*(s.host.stop_instance(iid) for iid in list(s.host.sandboxes)))
        for root in s.roots:
            await eventually(lambda r=root: not sandbox_pids(r), SHORT, f"{root} processes to exit")


# -- the served cloud: the same switches over HTTP -----------------------------------------------


def test_a_served_cloud_switches_its_fleet_faults_over_http(tmp_path: Path):
    served = start_served(tmp_path)
    try:
        addrs = {
            key: ln.split(" = ")[1]
            for ln in served.lines
            for key in ("lotus_api", "curio_db", "curio_db_cql")
            if ln.startswith(f"vastui sim: ssh.{key} = ")
        }
        assert len(addrs) == 3 and not any(refused(a) for a in addrs.values())
        with served.http() as http:
            r = http.put("/_sim/faults/controller_down", json={})
            assert r.status_code == 200 and r.json()["faults"]["controller_down"]["on"] is True
            assert all(refused(a) for a in addrs.values())
            r = http.delete("/_sim/faults/controller_down")
            assert r.json()["faults"]["controller_down"]["on"] is False
            assert not any(refused(a) for a in addrs.values()), "the same ports, listening again"

            assert http.put("/_sim/faults/image_missing", json={"on": True}).status_code == 200
            iid = served.rent()
            want = (
                "Error response from daemon: manifest for img:1 not found: manifest unknown: "
                "manifest unknown"
            )
            wait_for(lambda: (served.show(iid) or {}).get("status_msg") == want, SHORT,
                     "the pull error")  # fmt: skip
            assert served.show(iid)["actual_status"] == "loading"
            assert http.get("/_sim/faults").json()["faults"]["image_missing"]["on"] is True
    finally:
        assert stop_served(served) == 0
