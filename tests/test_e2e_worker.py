"""End to end, through the real pieces: the simulated Vast cloud and its API (VastClient over
ASGI), sandboxes running the real worker-image scripts behind per-instance SSH servers, vastui's
SSH layer with the controller's Lotus tunnel, and a plain OpenSSH client.

No mocks. No test sleeps for timing: every wait is on a condition, with a timeout only as an
upper bound. Every sandbox process is gone when a test ends (checked in the fixture).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncssh
import pytest

from tests.helpers import eventually
from vastsim import ManualClock, SimCloud
from vastsim.demo import client_for_cloud
from vastsim.lotus import FakeLotus
from vastsim.workers import MARKER, SimWorkerHost, kill_sandbox_processes
from vastui.config import DEFAULT_FILTER
from vastui.domain.reports import WorkerEvent
from vastui.engine.engine import ONSTART
from vastui.ssh import (
    MemoryPins,
    RemoteForward,
    SshAuthFailed,
    SshConnectionLost,
    SshUnreachable,
    Worker,
    WorkerConnection,
)
from vastui.vast.client import VastClient
from vastui.vast.models import Instance

pytestmark = pytest.mark.skipif(
    shutil.which("curl") is None, reason="the worker scripts need curl (the tunnel check)"
)

IMAGE = "ghcr.io/vastui/worker:e2e-test"
FILTER = DEFAULT_FILTER + " num_gpus=1"  # a CUDA 13 driver, AVX, RAM for the plan
LOTUS_PORT = 1234
# Upper bounds only: a passing run takes a fraction of these.
LONG = 60.0
SHORT = 20.0


async def no_sleep(_seconds: float) -> None:
    return None


def sandbox_pids(root: Path) -> list[int]:
    """Live processes carrying this sandbox's marker (read-only twin of kill_sandbox_processes)."""
    marker = f"{MARKER}={root}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if marker in environ.split(b"\0"):
            pids.append(int(entry.name))
    return pids


@dataclass
class Sim:
    cloud: SimCloud
    clock: ManualClock
    host: SimWorkerHost
    client: VastClient
    key: asyncssh.SSHKey
    roots: list[Path] = field(default_factory=list)
    conns: list[WorkerConnection] = field(default_factory=list)
    _labels: int = 0

    @property
    def public_key(self) -> str:
        return self.key.export_public_key("openssh").decode()

    async def rent(self, env: dict[str, str]) -> Instance:
        """Rent like the engine does, run the clock until the API says running. The worker's
        stage limits are raised unless a test sets them: at 1000x the benchmark's 300 s for
        the daemon to be ready are 0.3 real seconds, which a loaded machine's stall alone
        passes (the limits have their own tests in test_worker_scripts.py)."""
        env = {**SCALED_LIMITS, **env}
        await self.client.ensure_ssh_key(self.public_key)
        offers = (await self.client.search_offers(FILTER, order="dph", limit=5)).offers
        assert offers, "the simulated market has offers"
        self._labels += 1
        created = await self.client.create_instance(
            offers[0].id,
            label=f"vastui-e2e-{self._labels}",
            image=IMAGE,
            disk_gb=250,  # the parameters and PCE files (vastui/domain/plan.py)
            env=env,
            onstart=ONSTART,
        )
        iid = created.instance_id
        for _ in range(100):
            inst = await self.client.show_instance(iid)  # ticks the cloud: fires on_running
            if inst is not None and inst.is_running:
                break
            self.clock.advance(15)
        else:
            raise AssertionError(f"instance {iid} never reached running")
        box = await self.host.wait_started(iid)
        self.roots.append(box.root)
        assert box.sshd.port is not None
        assert inst.ssh_endpoint() == ("127.0.0.1", box.sshd.port)
        return inst

    def connect(
        self,
        inst: Instance,
        *,
        forwards: Sequence[RemoteForward] = (),
        key: asyncssh.SSHKey | None = None,
        username: str = "root",
    ) -> WorkerConnection:
        endpoint = inst.ssh_endpoint()
        assert endpoint is not None
        conn = WorkerConnection(
            inst.id,
            *endpoint,
            client_key=key or self.key,
            pins=MemoryPins(),
            username=username,
            forwards=forwards,
            sleep=no_sleep,
            connect_timeout=SHORT,
        )
        self.conns.append(conn)
        return conn


@pytest.fixture
async def lotus() -> AsyncIterator[FakeLotus]:
    server = FakeLotus()
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


SCALED_LIMITS = {
    name: "1000000"
    for name in ("BENCH_TIMEOUT", "BENCH_PROOF_TIMEOUT", "BENCH_PCE_TIMEOUT",
                 "BENCH_READY_TIMEOUT", "CUZK_READY_TIMEOUT", "CURIO_READY_TIMEOUT")
}  # fmt: skip


@pytest.fixture
async def sim(tmp_path: Path) -> AsyncIterator[Sim]:
    clock = ManualClock()
    cloud = SimCloud(seed=11, clock=clock)
    host = SimWorkerHost(
        cloud, tmp_path / "sim", speed=1000, machine_fault_rate=0.0, poll_interval=0.2
    )
    host.attach()
    client = client_for_cloud(cloud, pacing={}, sleep=no_sleep)
    key = asyncssh.generate_private_key("ssh-ed25519")
    s = Sim(cloud, clock, host, client, key)
    try:
        yield s
    finally:
        for conn in s.conns:
            await conn.close()
        await client.aclose()
        await host.close()
        # Nothing may outlive the test: not the entrypoint, not the stand-in daemons.
        for root in s.roots:
            await eventually(lambda r=root: not sandbox_pids(r), SHORT, f"{root} processes to exit")


def tunnel(lotus: FakeLotus) -> list[RemoteForward]:
    return [RemoteForward("127.0.0.1", LOTUS_PORT, "127.0.0.1", lotus.port)]


async def events_until(
    worker: Worker, stop: Callable[[WorkerEvent], bool], timeout: float = LONG
) -> list[WorkerEvent]:
    """Follow ``workerctl events`` until an event satisfies ``stop`` (included)."""
    seen: list[WorkerEvent] = []
    try:
        async with asyncio.timeout(timeout):
            async with contextlib.aclosing(worker.events()) as stream:
                async for event in stream:
                    seen.append(event)
                    if stop(event):
                        return seen
    except TimeoutError:
        raise AssertionError(f"no such event within {timeout:g}s; got {seen}") from None
    raise AssertionError(f"event stream ended early: {seen}")


def first_stage_order(events: list[WorkerEvent]) -> list[str]:
    order: list[str] = []
    for event in events:
        if event.stage is not None and event.stage not in order:
            order.append(event.stage)
    return order


async def raw_events(worker: Worker) -> list[dict[str, Any]]:
    """The worker's event log as its scripts wrote it (the contract's every field; the engine
    reads its typed WorkerEvent)."""
    done = await worker.conn.run("workerctl events", timeout=SHORT)
    return [json.loads(line) for line in done.stdout_lines if line.strip()]


def last_raw(raw: list[dict[str, Any]], key: str, value: str) -> dict[str, Any]:
    return next(e for e in reversed(raw) if e.get(key) == value)


# ---------------------------------------------------------------------------------------------


async def test_rent_tunnel_benchmark_and_logs(sim: Sim, lotus: FakeLotus) -> None:
    env = {"MIN_RATE": "1.0", "BENCH_PROOFS": "3", "BENCH_TIMEOUT": "100000",
           "VASTUI_RUNNER_ID": "1"}  # fmt: skip
    inst = await sim.rent(env)
    assert inst.image == IMAGE and env.items() <= dict(inst.env).items()
    conn = sim.connect(inst, forwards=tunnel(lotus))
    worker = Worker(conn, timeout=SHORT)
    await conn.connect()
    assert conn.forward_errors == {}

    events = await events_until(
        worker,
        lambda e: e.event == "fail" or (e.stage, e.event) == ("benchmark", "result"),
    )
    assert all(e.event != "fail" for e in events), events
    assert first_stage_order(events) == ["setup", "paramfetch", "benchmark"]
    kinds = [(e.stage, e.event) for e in events]
    assert kinds[:2] == [("setup", "start"), ("setup", "ok")]
    assert ("paramfetch", "ok") in kinds and ("benchmark", "start") in kinds
    assert kinds.index(("paramfetch", "ok")) < kinds.index(("benchmark", "start"))
    raw = await raw_events(worker)
    setup_ok = raw[1]
    assert setup_ok["curio_listen"] == "127.0.0.1:12401"  # its identity, from its runner id

    result = last_raw(raw, "event", "result")["result"]
    assert result["outcome"] == "pass", result
    assert result["rate_per_hour"] > 0
    assert result["min_rate"] == 1.0 and result["bench_proofs"] == 3
    assert result["proofs_completed"] == 3 and result["exit_code"] == 0

    status = await worker.status()
    assert status["image"]["name"] == IMAGE
    assert status["bench_result"]["outcome"] == "pass"

    # To prove, the worker needs the controller: the Lotus API answers through the SSH tunnel,
    # curio's database (not forwarded in this test) does not, and the worker says so.
    await events_until(worker, lambda e: e.tunnel is not None and e.tunnel.down)
    down = last_raw(await raw_events(worker), "tunnel", "down")["down"]
    assert [line.split(" 127.0.0.1:")[0] for line in down] == [
        "curio database (YSQL)",
        "curio database (YCQL)",
    ]
    assert lotus.calls >= 1, "the prove stage reached the controller's Lotus through the tunnel"

    # The cuzk-daemon log, streamed and sanitised; the raw file is coloured (ANSI).
    raw = (sim.roots[0] / "var/log/vastui/cuzk.log").read_bytes()
    assert b"\x1b[" in raw
    lines: list[str] = []
    async with asyncio.timeout(LONG):
        async with contextlib.aclosing(worker.logs("cuzk", tail=100_000)) as stream:
            async for line in stream:
                lines.append(line)
                if "cuzk-daemon ready" in line:
                    break
    assert any("cuzk-daemon ready, serving on" in line for line in lines)
    assert not any("\x1b" in line for line in lines)


async def test_plain_openssh_client_and_env(sim: Sim, tmp_path: Path) -> None:
    ssh = shutil.which("ssh")
    if ssh is None:
        pytest.skip("no OpenSSH client (ssh) on PATH")
    inst = await sim.rent({"MIN_RATE": "1.0", "BENCH_PROOFS": "3", "VASTUI_RUNNER_ID": "4"})
    endpoint = inst.ssh_endpoint()
    assert endpoint is not None
    host, port = endpoint
    keyfile = tmp_path / "id_ed25519"
    sim.key.write_private_key(str(keyfile))
    keyfile.chmod(0o600)
    child_env = {k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"}

    async def openssh(command: str) -> str:
        proc = await asyncio.create_subprocess_exec(
            ssh, "-F", "/dev/null", "-p", str(port), "-i", str(keyfile),
            "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
            "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes", "-o", "IdentityAgent=none",
            "-o", "LogLevel=ERROR", f"root@{host}", command,
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=child_env,
        )  # fmt: skip
        out, err = await asyncio.wait_for(proc.communicate(), SHORT)
        assert proc.returncode == 0, err.decode(errors="replace")
        return out.decode()

    status = json.loads(await openssh("workerctl status"))
    assert status["image"]["name"] == IMAGE
    assert status["state"] in ("pending", "running")
    assert isinstance(status["now"], float)
    assert (await openssh('echo "$MIN_RATE"')).strip() == "1.0"

    # The same through vastui's connection.
    conn = sim.connect(inst)
    result = await conn.run('echo "$MIN_RATE" "$BENCH_PROOFS"', timeout=SHORT)
    assert result.ok and result.stdout_lines == ["1.0 3"]


async def test_without_the_tunnel_the_worker_benchmarks_then_waits(sim: Sim) -> None:
    """The controller's tunnel is needed only to prove: with none, the worker sets up, fetches
    the parameters and benchmarks, then waits, reporting the tunnel down (never a failure)."""
    # at 1000x the benchmark's default limit (2400 s) is 2.4 real seconds, which a loaded
    # machine's stalls alone pass: not what this is about (the timeouts have their own tests)
    inst = await sim.rent({"MIN_RATE": "1.0", "BENCH_PROOFS": "3", "VASTUI_RUNNER_ID": "2",
                           "BENCH_TIMEOUT": "100000"})  # fmt: skip
    conn = sim.connect(inst)  # no forward: nothing answers at the worker's :1234, :5433, :9042
    worker = Worker(conn, timeout=SHORT)

    events = await events_until(
        worker, lambda e: e.event == "fail" or (e.tunnel is not None and e.tunnel.down)
    )
    assert [e for e in events if e.event == "fail"] == []
    assert first_stage_order(events) == ["setup", "paramfetch", "benchmark", "prove"]
    raw = await raw_events(worker)
    assert last_raw(raw, "event", "result")["result"]["outcome"] == "pass"
    down = last_raw(raw, "tunnel", "down")["down"]
    assert [line.split(" 127.0.0.1:")[0] for line in down] == [
        "lotus api",
        "curio database (YSQL)",
        "curio database (YCQL)",
    ]
    status = await worker.status()
    assert (status["stage"], status["state"], status["entrypoint_alive"]) == (
        "prove",
        "running",
        True,
    )


async def test_wrong_key_and_user_are_refused(sim: Sim) -> None:
    inst = await sim.rent({"MIN_RATE": "1.0", "VASTUI_RUNNER_ID": "3"})
    endpoint = inst.ssh_endpoint()
    assert endpoint is not None
    other = asyncssh.generate_private_key("ssh-ed25519")

    stranger = sim.connect(inst, key=other)
    with pytest.raises(SshAuthFailed):
        await stranger.connect()
    assert stranger.connect_attempts == 1, "an auth failure is never retried"

    with pytest.raises(asyncssh.PermissionDenied):
        await asyncssh.connect(
            *endpoint,
            username="root",
            client_keys=[other],
            known_hosts=None,
            agent_path=None,
            config=None,
            password=None,
            kbdint_auth=False,
            gss_auth=False,
        )

    not_root = sim.connect(inst, username="ubuntu")
    with pytest.raises(SshAuthFailed):
        await not_root.connect()

    # The account's key as root is let in.
    ok = sim.connect(inst)
    result = await ok.run("echo in", timeout=SHORT)
    assert result.ok and result.stdout_lines == ["in"]


async def test_destroy_stops_the_sandbox(sim: Sim, lotus: FakeLotus) -> None:
    inst = await sim.rent({"MIN_RATE": "1.0", "BENCH_PROOFS": "3", "VASTUI_RUNNER_ID": "4"})
    root = sim.roots[0]
    conn = sim.connect(inst, forwards=tunnel(lotus))
    worker = Worker(conn, timeout=SHORT, max_resumes=0)
    # Destroy mid-benchmark: the entrypoint, benchmark.sh and the cuzk-daemon stand-in run.
    events = await events_until(
        worker, lambda e: e.event == "fail" or (e.stage, e.event) == ("benchmark", "start")
    )
    assert events[-1].event == "start", events
    assert sandbox_pids(root), "the sandbox has live processes before the destroy"

    lines = conn.follow("workerctl logs benchmark --follow")
    assert await anext(lines) is not None  # a command is running over SSH, too
    assert await sim.client.destroy_instance(inst.id) is True

    # The monitor notices; the SSH server goes away with the machine.
    with pytest.raises(SshConnectionLost):
        async with asyncio.timeout(LONG):
            async for _ in lines:
                pass
    await lines.aclose()
    await eventually(lambda: inst.id not in sim.host.sandboxes, LONG, "the sandbox to be stopped")
    await eventually(lambda: not sandbox_pids(root), SHORT, "the sandbox processes to exit")
    assert kill_sandbox_processes(root) == 0
    with pytest.raises(SshUnreachable):
        await conn.run("true", timeout=SHORT)
