"""The served cloud is a whole cloud: `vastui sim serve` runs worker hosts as the demo does, so
the OpenSSH client and the official vastai CLI work against it as against Vast.

In-process tests pin the API's answers on a ManualClock (bulk destroy, reboot, an instance
created stopped, the proxy endpoint first and the direct port later); the rest drive a real
`vastui sim serve` process over HTTP and SSH. No sleeps for timing: every wait polls a condition
with an upper bound.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncssh
import httpx
import pytest

from tests.helpers import sim_api, wait_for
from vastsim import ManualClock, SimCloud
from vastsim.demo import client_for_cloud
from vastsim.hosting import worker_hosts
from vastsim.workers import MARKER
from vastui.ssh import MemoryPins, Worker, WorkerConnection
from vastui.vast.models import Instance

KEY = "served-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
BIN = Path(sys.executable).parent
# Upper bounds only: a passing run takes a fraction of these.
WAIT = 20.0
# The container's onstart, as Vast runs it at every container start: it counts the starts.
ONSTART = 'echo boot >> "$WORKER_ROOT/boots"'
BOTH = "ssh_direc ssh_proxy"  # what vastui and `vastai create instance --ssh --direct` ask


# -- the API, in process, on a ManualClock -----------------------------------------------------


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def cloud(clock: ManualClock) -> SimCloud:
    ports = iter(range(50_000, 51_000))
    return SimCloud(
        seed=3, clock=clock, hosts=60, api_key=KEY, ssh_port_allocator=lambda: next(ports),
        direct_ssh_after=(30.0, 30.0),
    )  # fmt: skip


@pytest.fixture
async def api(cloud: SimCloud) -> AsyncIterator[httpx.AsyncClient]:
    async with sim_api(cloud, AUTH) as client:
        yield client


async def rent(api: httpx.AsyncClient, offer_id: int | None = None, **body: Any) -> int:
    if offer_id is None:
        query = {"direct_port_count": {"gte": 1}, "limit": 1}
        offer_id = (await api.post("/api/v0/bundles/", json=query)).json()["offers"][0]["id"]
    r = await api.put(f"/api/v0/asks/{offer_id}/", json={"image": "img:1", "runtype": BOTH, **body})
    assert r.status_code == 200, r.text
    return int(r.json()["new_contract"])


async def show(api: httpx.AsyncClient, iid: int) -> dict[str, Any]:
    r = await api.get(f"/api/v0/instances/{iid}/")
    assert r.status_code == 200, r.text
    return r.json()["instances"]


async def run_until(
    api: httpx.AsyncClient, clock: ManualClock, iid: int, status: str, step: float = 5.0
) -> list[str | None]:
    """Advance the clock until the instance shows ``status``; the statuses seen on the way."""
    seen: list[str | None] = []
    for _ in range(2000):
        inst = await show(api, iid)
        if not seen or seen[-1] != inst["actual_status"]:
            seen.append(inst["actual_status"])
        if inst["actual_status"] == status:
            return seen
        clock.advance(step)
    raise AssertionError(f"instance {iid} never showed {status}: {seen}")


async def test_bulk_destroy_as_the_vastai_cli_sends_it(api: httpx.AsyncClient, cloud: SimCloud):
    # vastai api/instances.py destroy_instance(client, [ids]): DELETE /instances/ with
    # {"instance_ids": [...]}; the CLI prints "destroying instance ..." when success is true.
    a, b, kept = await rent(api), await rent(api), await rent(api)
    offers = {i: cloud.instances[i].offer_id for i in (a, b)}
    r = await api.request("DELETE", "/api/v0/instances/", json={"instance_ids": [a, b, 999]})
    assert (r.status_code, r.json()) == (200, {"success": True})
    assert await show(api, a) is None and await show(api, b) is None
    assert (await show(api, kept))["id"] == kept
    listed = {o["id"] for o in (await api.post("/api/v0/bundles/", json={})).json()["offers"]}
    assert set(offers.values()) <= listed  # their GPUs are back on the market

    r = await api.request("DELETE", "/api/v0/instances", json={"instance_ids": [a, b]})
    assert r.status_code == 404 and r.json()["error"] == "instances_not_found"
    for body in ({}, {"instance_ids": []}, {"instance_ids": "1,2"}, {"instance_ids": [True]}):
        r = await api.request("DELETE", "/api/v0/instances/", json=body)
        assert r.status_code == 400 and r.json()["error"] == "invalid_args", body
    r = await api.request("DELETE", "/api/v0/instances/", content=b"{not json")
    assert r.status_code == 400 and r.json()["msg"] == "invalid request format"
    r = await api.request("DELETE", "/api/v0/instances/", json={"instance_ids": [kept]})
    assert r.status_code == 200 and cloud.instances == {}


async def test_bulk_destroy_needs_the_key(api: httpx.AsyncClient):
    iid = await rent(api)
    r = await api.request(
        "DELETE", "/api/v0/instances/", json={"instance_ids": [iid]}, headers={"Authorization": ""}
    )
    assert r.status_code == 401 and (await show(api, iid))["id"] == iid


async def test_reboot_stops_and_starts_the_container_again(
    api: httpx.AsyncClient, cloud: SimCloud, clock: ManualClock
):
    started: list[int] = []
    cloud.on_running = lambda inst: started.append(inst["id"])
    iid = await rent(api, onstart=ONSTART)
    await run_until(api, clock, iid, "running")
    before = await show(api, iid)
    assert started == [iid]

    r = await api.put(f"/api/v0/instances/reboot/{iid}/", json={})
    assert (r.status_code, r.json()) == (200, {"success": True})
    seen = await run_until(api, clock, iid, "running", step=1.0)
    assert seen == ["rebooting", "loading", "running"]
    assert started == [iid, iid], "the container started again: its onstart runs again"
    after = await show(api, iid)
    # Same machine, same ports; only the container restarted.
    for key in ("machine_id", "ssh_port", "intended_status", "cur_state", "label"):
        assert after[key] == before[key], key


async def test_reboot_answers(api: httpx.AsyncClient, clock: ManualClock):
    r = await api.put("/api/v0/instances/reboot/24681357/", json={})
    assert r.status_code == 404 and r.json()["error"] == "no_such_instance"
    r = await api.put("/api/v0/instances/reboot/abc/", json={})
    assert r.status_code == 400 and r.json() == {
        "success": False, "error": "invalid_args", "msg": "invalid instance_id",
    }  # fmt: skip
    r = await api.get("/api/v0/instances/reboot/1/")
    assert r.status_code == 405
    iid = await rent(api)
    assert (await api.put(f"/api/v0/instances/{iid}/", json={"state": "stopped"})).json() == {
        "success": True
    }
    r = await api.put(f"/api/v0/instances/reboot/{iid}", json={})
    assert r.status_code == 400 and r.json()["error"] == "invalid_args"


async def test_an_exited_container_comes_back_on_reboot(
    api: httpx.AsyncClient, cloud: SimCloud, clock: ManualClock
):
    iid = await rent(api)
    await run_until(api, clock, iid, "running")
    cloud.force_status(iid, "exited")
    assert (await api.put(f"/api/v0/instances/reboot/{iid}/", json={})).json()["success"]
    await run_until(api, clock, iid, "running", step=1.0)
    cloud.force_status(iid, "offline")  # a host out of reach does nothing
    assert (await api.put(f"/api/v0/instances/reboot/{iid}/", json={})).json()["success"]
    assert (await show(api, iid))["actual_status"] == "offline"


async def test_created_stopped_when_the_gpus_are_taken_and_cancel_unavail_is_false(
    api: httpx.AsyncClient, cloud: SimCloud, clock: ManualClock
):
    holder = await rent(api)
    offer = cloud.instances[holder].offer_id
    # cancel_unavail true asks for the 410; absent, the ask is gone (404)
    r = await api.put(f"/api/v0/asks/{offer}/", json={"image": "x", "cancel_unavail": True})
    assert r.status_code == 410 and r.json()["error"] == "no_such_ask"
    r = await api.put(f"/api/v0/asks/{offer}/", json={"image": "x"})
    assert r.status_code == 404 and r.json()["error"] == "no_such_ask"

    # false (what the vastai CLI sends): created, left stopped, its start queued (AUTO: HTTP
    # 200, success false, with new_contract)
    r = await api.put(f"/api/v0/asks/{offer}/", json={"image": "x", "cancel_unavail": False})
    body = r.json()
    assert r.status_code == 200 and body["success"] is False and body["new_contract"]
    waiting = int(body["new_contract"])
    inst = await show(api, waiting)
    assert (inst["actual_status"], inst["intended_status"]) == ("stopped", "running")
    assert (inst["cur_state"], inst["next_state"]) == ("stopped", "running")
    assert inst["ssh_port"] is None and inst["ports"] is None
    clock.advance(3600)
    assert (await show(api, waiting))["actual_status"] == "stopped"
    r = await api.put(f"/api/v0/instances/{waiting}/", json={"state": "running"})
    assert r.json()["error"] == "resources_unavailable"

    # The holder goes: the queued start goes ahead on the freed GPUs.
    assert (await api.delete(f"/api/v0/instances/{holder}/")).json() == {"success": True}
    await run_until(api, clock, waiting, "running")
    assert offer not in {o["id"] for o in (await api.post("/api/v0/bundles/", json={})).json()[
        "offers"
    ]}  # fmt: skip


async def test_destroying_a_queued_instance_gives_back_no_gpus(
    api: httpx.AsyncClient, cloud: SimCloud
):
    holder = await rent(api)
    offer = cloud.instances[holder].offer_id
    waiting = await rent(api, offer, cancel_unavail=False)
    assert (await api.delete(f"/api/v0/instances/{waiting}/")).json() == {"success": True}
    listed = {o["id"] for o in (await api.post("/api/v0/bundles/", json={})).json()["offers"]}
    assert offer not in listed, "the holder still has the GPUs"


async def test_proxy_endpoint_first_direct_port_later(api: httpx.AsyncClient, clock: ManualClock):
    iid = await rent(api)
    await run_until(api, clock, iid, "running", step=1.0)
    raw = await show(api, iid)
    proxy = raw["ssh_port"]
    assert raw["ssh_host"] == "127.0.0.1" and raw["ports"] == {}
    assert Instance.from_api(raw).ssh_endpoint() == ("127.0.0.1", proxy)
    clock.advance(30)
    raw = await show(api, iid)
    direct = int(raw["ports"]["22/tcp"][0]["HostPort"])
    assert direct != proxy and raw["ssh_port"] == proxy
    assert raw["public_ipaddr"] == "127.0.0.1"
    assert Instance.from_api(raw).ssh_endpoint() == ("127.0.0.1", direct)


async def test_a_proxy_only_runtype_never_gets_a_direct_port(
    api: httpx.AsyncClient, clock: ManualClock
):
    iid = await rent(api, runtype="ssh_proxy")
    await run_until(api, clock, iid, "running")
    clock.advance(3600)
    raw = await show(api, iid)
    assert raw["ports"] == {} and raw["direct_port_start"] == -1
    assert Instance.from_api(raw).ssh_endpoint() == ("127.0.0.1", raw["ssh_port"])


# -- vastui's SSH layer reaches the worker either way ------------------------------------------


async def test_vastui_reaches_the_same_sandbox_by_proxy_and_by_direct_port(tmp_path: Path):
    clock = ManualClock()
    cloud = SimCloud(seed=3, clock=clock, hosts=60, api_key=KEY)
    key = asyncssh.generate_private_key("ssh-ed25519")
    pins = MemoryPins()  # one pin per instance: both ports must show the same host key
    async with worker_hosts(cloud, speed=1000, machine_fault_rate=0.0, parent=tmp_path) as hosts:
        client = client_for_cloud(cloud, pacing={})
        try:
            await client.ensure_ssh_key(key.export_public_key("openssh").decode())
            offers = (await client.search_offers("direct_port_count>=1", limit=1)).offers
            created = await client.create_instance(
                offers[0].id, label="vastui-t-1", image="img:1", disk_gb=20, env={},
                onstart=ONSTART,
            )  # fmt: skip
            iid = created.instance_id

            async def endpoint() -> tuple[str, int]:
                for _ in range(400):
                    inst = await client.show_instance(iid)
                    if inst is not None and inst.is_running:
                        return inst.ssh_endpoint() or ("", 0)
                    clock.advance(2)
                raise AssertionError("never running")

            proxy = await endpoint()
            await hosts.host.wait_started(iid)
            clock.advance(max(hosts.cloud.direct_ssh_after or (0.0, 0.0)) + 1)
            direct = await endpoint()
            assert proxy != direct and {proxy[0], direct[0]} == {"127.0.0.1"}
            for host, port in (proxy, direct):
                conn = WorkerConnection(iid, host, port, client_key=key, pins=pins)
                try:
                    status = await Worker(conn, timeout=WAIT).status()
                finally:
                    await conn.close()
                assert status["state"] == "pending"  # workerctl answered from the sandbox
        finally:
            await client.aclose()
    assert not list(tmp_path.iterdir()), "the sandboxes are removed"


# -- a served cloud, over real HTTP and SSH ----------------------------------------------------


@dataclass
class Served:
    proc: subprocess.Popen[str]
    url: str
    lines: list[str]
    home: Path
    state: Path
    key_file: Path
    public_key: str

    def env(self) -> dict[str, str]:
        home = str(self.home)
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": home,
            "XDG_CONFIG_HOME": f"{home}/.config",
            "XDG_CACHE_HOME": f"{home}/.cache",
            "XDG_STATE_HOME": f"{home}/.local/state",
            "XDG_DATA_HOME": f"{home}/.local/share",
            "VASTAI_NO_UPDATE_CHECK": "1",
            "LANG": "C.UTF-8",
        }

    def http(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers=AUTH, timeout=WAIT)

    def sandbox(self, iid: int) -> Path:
        roots = list((self.state / "sim").glob(f"vastui-sim-{self.proc.pid}-*"))
        assert len(roots) == 1, roots
        return roots[0] / f"instance-{iid}"

    def rent(self, runtype: str = BOTH) -> int:
        with self.http() as http:
            query = {"direct_port_count": {"gte": 1}, "limit": 1, "rentable": {"eq": True}}
            offer = http.post("/api/v0/bundles/", json=query).json()["offers"][0]
            body = {"image": "img:1", "runtype": runtype, "onstart": ONSTART, "disk": 20,
                    "label": f"served-{offer['id']}", "cancel_unavail": True}  # fmt: skip
            r = http.put(f"/api/v0/asks/{offer['id']}/", json=body)
            assert r.status_code == 200, r.text
            return int(r.json()["new_contract"])

    def show(self, iid: int) -> dict[str, Any] | None:
        with self.http() as http:
            return http.get(f"/api/v0/instances/{iid}/").json()["instances"]

    def running(self, iid: int) -> dict[str, Any]:
        """Wait until it runs and its container has started (onstart ran)."""

        def ready() -> dict[str, Any] | None:
            inst = self.show(iid)
            if inst is None or inst["actual_status"] != "running":
                return None
            return inst if (self.sandbox(iid) / "boots").exists() else None

        return wait_for(ready, WAIT, f"instance {iid} running")

    def ssh(self, host: str, port: int, command: str, known_hosts: str = "/dev/null",
            check: str = "no") -> subprocess.CompletedProcess[str]:  # fmt: skip
        argv = [
            "ssh", "-F", "/dev/null", "-i", str(self.key_file), "-p", str(port),
            "-o", f"StrictHostKeyChecking={check}", "-o", f"UserKnownHostsFile={known_hosts}",
            "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes", "-o", "ConnectTimeout=10",
            "-o", "LogLevel=ERROR", f"root@{host}", command,
        ]  # fmt: skip
        return subprocess.run(
            argv, capture_output=True, text=True, timeout=WAIT, env=self.env(), check=False
        )

    def vastai(self, *argv: str) -> subprocess.CompletedProcess[str]:
        cli = BIN / "vastai"
        if not cli.exists():
            pytest.fail(f"the official vastai CLI is not installed in {BIN} (pip install vastai)")
        return subprocess.run(
            [str(cli), "--url", self.url, "--api-key", KEY, *argv], capture_output=True,
            text=True, timeout=WAIT * 2, env=self.env(), stdin=subprocess.DEVNULL, check=False,
        )  # fmt: skip


def start_served(base: Path, *extra: str) -> Served:
    home, state = base / "home", base / "state"
    home.mkdir(parents=True)
    key = asyncssh.generate_private_key("ssh-ed25519")
    key_file = base / "id_ed25519"
    key.write_private_key(str(key_file))
    key_file.chmod(0o600)
    env = {**os.environ, "HOME": str(home), "VASTUI_STATE_DIR": str(state)}
    env.pop("VAST_API_KEY", None)
    argv = [str(BIN / "vastui"), "sim", "serve", "--port", "0", "--speed", "600",
            "--machine-fault-rate", "0", "--api-key", KEY, *extra]  # fmt: skip
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    out: queue.Queue[str] = queue.Queue()
    lines: list[str] = []
    threading.Thread(target=lambda: [out.put(ln) for ln in proc.stdout or ()], daemon=True).start()

    def announced() -> bool:
        while not out.empty():
            lines.append(out.get().rstrip("\n"))
        assert proc.poll() is None, f"sim serve exited: {lines}"
        return any("serving simulated Vast API on" in ln for ln in lines) and any(
            "ssh.lotus_api" in ln for ln in lines
        )

    wait_for(announced, WAIT, "sim serve to listen")
    url = next(ln for ln in lines if "serving" in ln).split(" on ")[1].split()[0]
    served = Served(proc, url, lines, home, state, key_file, "")
    served.public_key = key.export_public_key("openssh").decode().strip()
    with served.http() as http:
        assert http.post("/api/v0/ssh/", json={"ssh_key": served.public_key}).json()["success"]
    return served


def stop_served(served: Served) -> int:
    if served.proc.poll() is None:
        served.proc.send_signal(signal.SIGTERM)
    try:
        return served.proc.wait(timeout=WAIT)
    except subprocess.TimeoutExpired:
        served.proc.kill()
        served.proc.wait()
        raise AssertionError("sim serve did not stop within its bound on SIGTERM") from None


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    s = start_served(tmp_path_factory.mktemp("served"))
    try:
        yield s
    finally:
        stop_served(s)


def test_serve_prints_what_an_engine_needs_and_never_the_key(served: Served):
    said = "\n".join(served.lines)
    assert KEY not in said
    for key in ("ssh.lotus_api", "ssh.curio_db", "ssh.curio_db_cql"):
        assert sum(ln.startswith(f"vastui sim: {key} = 127.0.0.1:") for ln in served.lines) == 1


def test_openssh_reaches_the_instance_by_proxy_and_by_direct_port(served: Served):
    # Which is reported first is pinned on a ManualClock above; at this speed the direct port
    # may already be there, so each endpoint is read from its own fields.
    iid = served.rent()
    inst = served.running(iid)
    proxy = (inst["ssh_host"], inst["ssh_port"])

    def direct() -> dict[str, Any] | None:
        raw = served.show(iid)
        return raw if raw and (raw.get("ports") or {}).get("22/tcp") else None

    raw = wait_for(direct, WAIT, "the direct port to be reported")
    endpoint = (raw["public_ipaddr"], int(raw["ports"]["22/tcp"][0]["HostPort"]))
    assert endpoint != proxy and raw["ssh_port"] == proxy[1]
    assert Instance.from_api(raw).ssh_endpoint() == endpoint  # what vastui picks once both are
    for host, port in (proxy, endpoint):
        done = served.ssh(host, port, "workerctl status")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["state"] == "pending"


def test_a_key_the_account_does_not_have_is_refused(served: Served, tmp_path: Path):
    iid = served.rent()
    inst = served.running(iid)
    other = asyncssh.generate_private_key("ssh-ed25519")
    other.write_private_key(str(tmp_path / "other"))
    (tmp_path / "other").chmod(0o600)
    mine = served.key_file
    served.key_file = tmp_path / "other"
    try:
        done = served.ssh("127.0.0.1", inst["ssh_port"], "true")
    finally:
        served.key_file = mine
    assert done.returncode == 255 and "Permission denied" in done.stderr


def test_vastai_cli_bulk_destroy(served: Served):
    a, b = served.rent(), served.rent()
    served.running(a)
    done = served.vastai("destroy", "instances", str(a), str(b), "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"destroying instance [{a}, {b}]." in done.stdout, done.stdout + done.stderr
    assert "retrying" not in done.stdout
    assert served.show(a) is None and served.show(b) is None


def test_vastai_cli_reboot_restarts_the_container(served: Served, tmp_path: Path):
    iid = served.rent()
    inst = served.running(iid)
    known = str(tmp_path / "known_hosts")
    first = served.ssh("127.0.0.1", inst["ssh_port"], "true", known, check="accept-new")
    assert first.returncode == 0, first.stderr
    boots = served.sandbox(iid) / "boots"
    assert boots.read_text().splitlines() == ["boot"]

    done = served.vastai("reboot", "instance", str(iid))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"Rebooting instance {iid}." in done.stdout
    # Vast runs onstart at every container start: a second boot, on the same machine and port.
    wait_for(lambda: len(boots.read_text().splitlines()) == 2, WAIT, "the container's second start")
    served.running(iid)

    def status() -> subprocess.CompletedProcess[str] | None:
        # StrictHostKeyChecking=yes: only the host key pinned before the reboot is accepted.
        done = served.ssh("127.0.0.1", inst["ssh_port"], "workerctl status", known, check="yes")
        return done if done.returncode == 0 else None

    again = wait_for(status, WAIT, "ssh after the reboot")
    assert json.loads(again.stdout)["state"] == "pending"  # the same host key: accepted


def test_vastai_cli_bids_creates_a_bid_and_changes_it(served: Served):
    # vastai 1.9.1: `search offers --type bid` sends type "bid" (cli/commands/offers.py:23-25),
    # `create instance --bid_price` sends it as `price` (api/instances.py:218-221), `change
    # bid --price` PUTs /instances/bid_price/{id}/ (api/instances.py:366-369).
    found = served.vastai("search", "offers", "--type", "bid", "--raw", "direct_port_count>=1")
    assert found.returncode == 0, found.stdout + found.stderr
    offers = json.loads(found.stdout)
    assert offers and all(o["is_bid"] for o in offers)
    offer = offers[0]
    assert offer["dph_total"] == pytest.approx(offer["min_bid"] + offer["storage_total_cost"])
    # Over every other bidder's price (vastsim/bids.py SPREAD): it runs and stays running.
    price = round(offer["min_bid"] * 3.5, 4)
    made = served.vastai(
        "create", "instance", str(offer["id"]), "--image", "img:1", "--disk", "20",
        "--bid_price", str(price), "--ssh", "--direct", "--raw",
    )  # fmt: skip
    assert made.returncode == 0, made.stdout + made.stderr
    iid = int(json.loads(made.stdout)["new_contract"])
    inst = wait_for(
        lambda: (i := served.show(iid)) and i["actual_status"] == "running" and i, WAIT, "bid runs"
    )  # fmt: skip
    assert inst["is_bid"] is True and inst["dph_base"] == price

    higher = round(price * 1.2, 4)
    changed = served.vastai("change", "bid", str(iid), "--price", str(higher))
    assert changed.returncode == 0, changed.stdout + changed.stderr
    assert "bid price changed" in changed.stdout
    shown = served.show(iid)
    assert shown is not None and shown["dph_base"] == higher
    done = served.vastai("destroy", "instance", str(iid), "--yes")
    assert done.returncode == 0 and served.show(iid) is None


def test_sigterm_stops_every_sandbox_and_removes_it(tmp_path: Path):
    config = tmp_path / "engine.toml"
    served = start_served(tmp_path, "--write-config", str(config))
    try:
        iid = served.rent()
        port = served.running(iid)["ssh_port"]
        root = served.sandbox(iid).parent
        # A process the instance's user left running: it must not outlive the cloud.
        sleeper = served.ssh("127.0.0.1", port, "nohup sleep 600 >/dev/null 2>&1 & echo started")
        assert sleeper.stdout.strip() == "started", sleeper.stderr
        wait_for(lambda: sandbox_pids(root), WAIT, "the sandbox's background process")
    finally:
        code = stop_served(served)
    assert code == 0
    assert not root.exists(), "the sandboxes are removed"
    assert sandbox_pids(root) == [], "no sandbox process outlives the served cloud"
    # The config written for an engine: 0600, the cloud's addresses, never the key.
    assert config.stat().st_mode & 0o777 == 0o600
    text = config.read_text()
    assert KEY not in text and f'api_url = "{served.url}"' in text
    for key in ("lotus_api", "curio_db", "curio_db_cql"):
        line = next(ln for ln in served.lines if f"ssh.{key} = " in ln)
        assert f'{key} = "{line.split(" = ")[1]}"' in text


def sandbox_pids(parent: Path) -> list[int]:
    """Live processes whose sandbox marker lies under ``parent``."""
    prefix = f"{MARKER}={parent}/".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(v.startswith(prefix) for v in environ):
            pids.append(int(entry.name))
    return pids


async def test_write_config_puts_curios_password_beside_it_and_never_prints_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """`vastui sim serve --write-config F`: curio's database has a password of its own, written
    to curio-db-password beside F (0600) and in nothing printed; F's [curio] names the user and
    the database; the psql line reads the file."""
    import asyncio
    import stat

    import psycopg

    from tests.helpers import eventually
    from vastsim.server import ServeOptions, serve_cloud

    monkeypatch.setenv("VASTUI_STATE_DIR", str(tmp_path / "state"))
    config = tmp_path / "cfg" / "vastui.toml"
    said: list[str] = []
    opts = ServeOptions(machine_fault_rate=0.0, write_config=config)
    task = asyncio.create_task(
        serve_cloud(SimCloud(seed=3, clock=ManualClock()), opts, said.append)
    )
    try:
        await eventually(lambda: any("psql" in line for line in said), 60, "the psql line")
        secret = config.parent / "curio-db-password"
        password = secret.read_text().strip()
        assert stat.S_IMODE(secret.stat().st_mode) == 0o600 and len(password) >= 24
        assert not any(password in line for line in said)
        text = config.read_text()
        assert '[curio]\ndb_name = "yugabyte"\ndb_user = "yugabyte"\n' in text
        assert password not in text
        psql = next(line for line in said if "psql" in line)
        port = psql.split(" -p ")[1].split()[0]
        assert psql.endswith(
            f"PGPASSWORD=$(cat {secret}) psql -h 127.0.0.1 -p {port} -U yugabyte yugabyte"
        )
        conninfo = f"host=127.0.0.1 port={port} user=yugabyte dbname=yugabyte password={password}"
        with psycopg.connect(conninfo, connect_timeout=10) as conn:
            assert conn.execute("SELECT title FROM harmony_config").fetchall() == [("base",)]
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
