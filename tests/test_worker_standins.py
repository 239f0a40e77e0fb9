"""The simulator's worker stand-ins (vastui/sim/standins): formats, faults, determinism."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.helpers import WAIT, free_port, wait_for

REPO = Path(__file__).resolve().parents[1]
STANDINS = REPO / "vastui" / "sim" / "standins"
PYBIN = os.path.dirname(sys.executable)


def load_simlib() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_simlib_under_test", STANDINS / "_simlib.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Box:
    def __init__(self, root: Path):
        self.root = root
        (root / ".sim").mkdir(parents=True)
        self.c1 = root / "c1.json"
        self.c1.write_text("{}\n")
        self.procs: list[subprocess.Popen] = []
        self.listen = f"127.0.0.1:{free_port()}"
        self.status_addr = f"127.0.0.1:{free_port()}"
        self.env = {
            "PATH": f"{STANDINS}:{PYBIN}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            "WORKER_ROOT": str(root),
            "SIM_SPEED": "5000",
            "NO_COLOR": "1",
            "CUZK_LISTEN": self.listen,
        }
        self.machine()

    def machine(self, **kw: Any) -> None:
        data = {"rate_per_hour": 40.0, "seed": 1, "inet_down_mbps": 2000.0}
        data.update(kw)
        (self.root / ".sim" / "machine.json").write_text(json.dumps(data))

    def start(self, argv: list[str], log: Path, **env: str) -> subprocess.Popen:
        with open(log, "ab") as fh:
            proc = subprocess.Popen(
                argv,
                env=dict(self.env, **env),
                stdout=fh,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.procs.append(proc)
        return proc

    def run(self, argv: list[str], **env: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            argv,
            env=dict(self.env, **env),
            capture_output=True,
            text=True,
            timeout=WAIT,
            start_new_session=True,
        )

    def start_daemon(self, **env: str) -> tuple[subprocess.Popen, Path]:
        config = self.root / "cuzk.toml"
        config.write_text(
            f'[daemon]\nlisten = "{self.listen}"\nstatus_listen = "{self.status_addr}"\n'
        )
        log = self.root / "cuzk.log"
        proc = self.start(["cuzk-daemon", "--config", str(config)], log, **env)
        wait_for(lambda: "cuzk-daemon ready" in log.read_text(), what="daemon ready")
        return proc, log

    def kill_all(self) -> None:
        for proc in self.procs:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)


@pytest.fixture
def box(tmp_path: Path) -> Iterator[Box]:
    b = Box(tmp_path / "root")
    try:
        yield b
    finally:
        b.kill_all()


def get(url: str) -> tuple[int, dict[str, str], bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


# ------------------------------------------------------------------ _simlib


def test_simlib_profile_defaults_and_determinism(tmp_path: Path, monkeypatch) -> None:
    sim = load_simlib()
    monkeypatch.setenv("WORKER_ROOT", str(tmp_path))
    machine = sim.load_machine()
    assert machine == sim.DEFAULT_MACHINE
    (tmp_path / ".sim").mkdir()
    (tmp_path / ".sim" / "machine.json").write_text(
        json.dumps({"rate_per_hour": 36, "fault": "bogus", "seed": 5})
    )
    machine = sim.load_machine()
    assert machine["fault"] == "none" and machine["rate_per_hour"] == 36.0
    times = [sim.proof_seconds(machine, i) for i in range(12)]
    assert times == [sim.proof_seconds(machine, i) for i in range(12)]
    assert all(100 * 0.97 <= t <= 100 * 1.03 for t in times)
    assert len(set(times)) > 1
    other = [sim.proof_seconds(dict(machine, seed=6), i) for i in range(12)]
    assert other != times
    slow = [sim.proof_seconds(dict(machine, fault="slow"), i) for i in range(12)]
    assert slow == pytest.approx([2 * t for t in times])


def test_simlib_tracing_line_format(monkeypatch) -> None:
    sim = load_simlib()
    monkeypatch.setenv("NO_COLOR", "1")
    line = sim.tracing_line("INFO", "cuzk_daemon", "cuzk-daemon starting", version="0.1.0")
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z  INFO cuzk_daemon: cuzk-daemon starting "
        r"version=0\.1\.0",
        line,
    )
    assert " ERROR cuzk_core::engine: boom" in sim.tracing_line(
        "ERROR", "cuzk_core::engine", "boom"
    )
    monkeypatch.delenv("NO_COLOR")
    coloured = sim.tracing_line("INFO", "cuzk_daemon", "cuzk-daemon ready, serving on x")
    assert "\x1b[32m INFO\x1b[0m" in coloured and "cuzk-daemon ready, serving on x" in coloured
    go = sim.golog_line("INFO", "paramfetch", "fastparamfetch/paramfetch.go:262", "Fetching x")
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z\tINFO\tparamfetch\t"
        r"fastparamfetch/paramfetch\.go:262\tFetching x",
        go,
    )


# ------------------------------------------------------------------ cuzk-daemon / cuzk-bench


def test_daemon_status_api_and_bench_output(box: Box) -> None:
    proc, log = box.start_daemon(SIM_SPEED="400")
    text = log.read_text()
    for needle in (
        "cuzk-daemon starting",
        "configuration loaded",
        "memory budget initialized total_budget_gib=",
        "initializing GPU workers num_gpus=1",
        f"status HTTP server listening addr={box.status_addr}",
        f"cuzk-daemon ready, serving on {box.listen}",
    ):
        assert needle in text

    status_url = f"http://{box.status_addr}/status"
    code, headers, _ = get(f"http://{box.status_addr}/nope")
    assert code == 404
    code, headers, body = get(status_url)
    assert code == 200 and headers.get("Access-Control-Allow-Origin") == "*"
    idle = json.loads(body)
    assert idle["pipelines"] == [] and idle["counters"]["total_completed"] == 0

    result: dict[str, subprocess.CompletedProcess] = {}
    argv = ["cuzk-bench", "--addr", f"http://{box.listen}", "single", "-t", "porep"]
    thread = threading.Thread(
        target=lambda: result.update(r=box.run([*argv, "--c1", str(box.c1)], SIM_SPEED="400"))
    )
    thread.start()

    def busy() -> dict | None:
        status = json.loads(get(status_url)[2])
        return status if status["pipelines"] else None

    status = wait_for(busy, what="a proof in flight")
    pipe = status["pipelines"][0]
    assert pipe["total_partitions"] == 10 and len(pipe["partitions"]) == 10
    assert {"index", "state", "synth_ms", "gpu_ms"} <= set(pipe["partitions"][0])
    for key in ("memory", "synthesis", "gpu_workers", "allocations", "counters", "buffers"):
        assert key in status
    thread.join(WAIT)
    single = result["r"]
    assert single.returncode == 0, single.stderr
    out = single.stdout
    assert "=== Proof Result ===" in out
    assert re.search(r"^status:    COMPLETED$", out, re.M)
    assert re.search(
        r"^timings:   total=\d+ ms \(queue=\d+ ms, srs=\d+ ms, synth=\d+ ms, gpu=\d+ ms\)$",
        out,
        re.M,
    )
    wall = int(re.search(r"^wall time: (\d+) ms$", out, re.M).group(1))
    assert wall > 36_800  # first proof includes the SRS load (simulated ms)
    assert re.search(r"^proof:     1920 bytes \(hex: [0-9a-f]+\.\.\.\)$", out, re.M)
    text = log.read_text()
    assert "loading SRS from disk circuit_id=porep-32g" in text
    assert "background PCE extraction starting for PoRep 32G" in text

    batch = box.run([*argv[:3], "batch", "-t", "porep", "--c1", str(box.c1), "-c", "2"])
    assert batch.returncode == 0, batch.stderr
    assert "=== Batch Benchmark ===" in batch.stdout
    assert re.search(
        r"^  \[2/2\] COMPLETED — [\d.]+s \(prove=\d+ ms, queue=\d+ ms\)$", batch.stdout, re.M
    )
    assert "=== Batch Summary ===" in batch.stdout
    assert re.search(r"^throughput:    [\d.]+ proofs/min \([\d.]+s/proof\)$", batch.stdout, re.M)
    final = json.loads(get(status_url)[2])
    assert final["counters"]["total_completed"] == 3

    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=WAIT) == 0
    assert "received SIGINT, shutting down" in log.read_text()


def test_bench_errors(box: Box) -> None:
    addr = f"http://127.0.0.1:{free_port()}"
    res = box.run(["cuzk-bench", "--addr", addr, "single", "-t", "porep", "--c1", str(box.c1)])
    assert res.returncode == 1
    assert f"Error: failed to connect to daemon at {addr}" in res.stderr
    res = box.run(["cuzk-bench", "--addr", addr, "single", "-t", "porep", "--c1", "/nonexistent"])
    assert res.returncode == 1 and "Error: failed to read /nonexistent" in res.stderr


def test_daemon_gpu_oom_after_pce(box: Box) -> None:
    params = box.root / "data" / "zk" / "params"
    params.mkdir(parents=True)
    (params / "pce-porep-32g.bin").write_text("x")
    box.machine(fault="gpu_oom")
    _, log = box.start_daemon()
    res = box.run(
        ["cuzk-bench", "--addr", box.listen, "single", "-t", "porep", "--c1", str(box.c1)]
    )
    assert res.returncode == 1
    assert re.search(r"^status:    FAILED$", res.stdout, re.M)
    assert re.search(r"^error:     .*CUDA error 2: out of memory$", res.stdout, re.M)
    text = log.read_text()
    assert "PCE loaded from disk" in text
    assert re.search(
        r" ERROR cuzk_core::engine: GPU prove failed .*CUDA error 2: out of memory", text
    )


# ------------------------------------------------------------------ curio


def test_curio_fetch_params(box: Box) -> None:
    res = box.run(["curio", "fetch-params", "32GiB"])
    assert res.returncode == 0, res.stderr
    out = res.stdout + res.stderr
    cache = box.root / "var" / "tmp" / "filecoin-proof-parameters"
    names = sorted(p.name for p in cache.iterdir())
    assert len(names) == 3 and any(n.endswith(".params") for n in names)
    assert re.search(
        r"\tINFO\tparamfetch\tfastparamfetch/paramfetch\.go:\d+\tFetching "
        + re.escape(str(cache))
        + r"/v28-\S+\.params from https://\S+/ipfs/",
        out,
    )
    assert re.search(
        r"^\[#[0-9a-f]{6} [\d.]+[KMG]iB/47GiB\(\d+%\) CN:16 DL:\S+ ETA:\S+\]$", out, re.M
    )
    assert out.count(" is ok") == 3
    assert out.rstrip().endswith("parameter and key-fetching complete")
    again = box.run(["curio", "fetch-params", "32GiB"])
    assert "Fetching" not in again.stdout + again.stderr
    assert (again.stdout + again.stderr).count(" is ok") == 3


def test_curio_run_proves_through_daemon(box: Box) -> None:
    box.start_daemon()
    log = box.root / "curio.log"
    proc = box.start(["curio", "run"], log, FULLNODE_API_INFO="secret-token:/ip4/x/tcp/1/http")
    wait_for(lambda: "PSProve: proof submitted" in log.read_text(), what="a PSProve proof")
    text = log.read_text()
    assert f'connected to cuzk daemon\t{{"addr": "{box.listen}"}}' in text
    assert "secret-token" not in text
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=WAIT) == 0
