"""Simulated instances that run the real worker-image scripts.

When the simulated cloud reports an instance running, `SimWorkerHost` gives it a sandbox
directory (its `WORKER_ROOT`) holding the real `worker-image` scripts, an SSH server on the port
the API reports, and runs the instance's `onstart` command there, as Vast does. Only what needs a
GPU or the internet is a stand-in (`vastsim/standins/`: cuzk-daemon, cuzk-bench, curio,
nvidia-smi), driven by the machine profile in `.sim/machine.json`. The sandbox also has what a
container sees of its machine: `proc/meminfo` (the host's RAM) and `sys/fs/cgroup/memory.max`
(the slice's limit).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import math
import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncssh

from vastsim.clock import ScaledClock
from vastsim.cloud import SimCloud
from vastsim.fleet import BROKEN_C1_MINER
from vastsim.market import machine_fault_rng
from vastsim.proofsvc import URL_ENV as PROOFSVC_URL_ENV
from vastsim.sshd import SandboxSshd
from vastsim.standins import _simlib as simlib
from vastsim.warden import MARKER, kill_marked, start_warden, stop_warden
from vastui.resources import bundled_dir

log = logging.getLogger("vastsim.workers")

PACKAGE_DIR = Path(__file__).resolve().parent
STANDINS_DIR = PACKAGE_DIR / "standins"
WORKER_IMAGE_DIR = bundled_dir("worker-image")
WORKER_SCRIPTS = ("entrypoint.sh", "benchmark.sh", "workerctl", "vastui-lib.sh")
GIB = 1024**3

# Machine faults, by probability per machine (scaled by `machine_fault_rate`), with the range of
# the daemon proof index where they strike (0 is the benchmark's warmup; the benchmark runs 13
# proofs, so later indexes strike in production). A slow machine needs no fault: its rate comes
# from the market's per-machine draw. The faults are the stand-ins' (see _simlib.FAULTS).
FAULTS: tuple[tuple[str, float, tuple[int, int]], ...] = (
    ("cuda_abort", 0.03, (1, 9)),  # a sticky CUDA error during the benchmark
    ("cuda_abort", 0.03, (25, 60)),  # ... or while proving: the daemon dies in production
    ("gpu_panic", 0.03, (2, 8)),  # recoverable CUDA errors: failed proofs, a live daemon
    ("gpu_oom", 0.02, (0, 0)),  # GPU out of memory while the PCE is extracted
    ("stalled_download", 0.02, (0, 0)),
    ("no_cuda", 0.01, (0, 0)),
    ("host_oom", 0.01, (2, 30)),
    ("hang", 0.01, (3, 40)),
    ("pce_save_fail", 0.01, (0, 0)),  # non-fatal
    # appended last, so that every other machine's draw stays what it was
    ("snap_invalid", 0.01, (0, 0)),  # SnapDeals proofs that do not verify: curio rejects them
)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Sandbox:
    instance_id: int
    root: Path
    sshd: SandboxSshd
    env: dict[str, str]
    onstart: asyncio.subprocess.Process | None = None
    profile: dict[str, Any] = field(default_factory=dict)


class SimWorkerHost:
    def __init__(
        self,
        cloud: SimCloud,
        root: Path,
        *,
        speed: float,
        machine_fault_rate: float = 1.0,
        fault_overrides: dict[int, str | dict[str, Any]] | None = None,
        extra_env: dict[str, str] | None = None,
        poll_interval: float = 1.0,
    ) -> None:
        if not all((WORKER_IMAGE_DIR / s).exists() for s in WORKER_SCRIPTS):
            raise FileNotFoundError(f"worker-image scripts not found in {WORKER_IMAGE_DIR}")
        self.cloud = cloud
        self.root = root
        self.speed = speed
        self.machine_fault_rate = machine_fault_rate
        self.fault_overrides = dict(fault_overrides or {})
        self.extra_env = dict(extra_env or {})
        self.poll_interval = poll_interval
        self.sandboxes: dict[int, Sandbox] = {}
        self._wall0 = time.time()  # the sandboxes' one clock when the cloud's is not scaled
        # the proofshare market the workers reach over their own internet (SIM_PROOFSVC_URL)
        self.proofsvc_url: str | None = None
        self._monitor: asyncio.Task[None] | None = None
        self._starting: dict[int, asyncio.Task[None]] = {}
        # A container keeps its host key across restarts (a reboot, a stop and start).
        self._host_keys: dict[int, asyncssh.SSHKey] = {}
        # One start or stop of an instance's sandbox at a time: a stop still killing the old
        # container's processes must not kill the next start's.
        self._locks: dict[int, asyncio.Lock] = {}
        self._warden: subprocess.Popen[bytes] | None = None
        self._closing = False

    def attach(self) -> None:
        """Hook into the cloud: real free ports for SSH, sandboxes on first `running`."""
        self.cloud.alloc_port = free_port
        self.cloud.on_running = self._on_running
        self.cloud.net_meter = self.net_bytes
        self.root.mkdir(parents=True, exist_ok=True)
        if self._warden is None:  # the sandboxes die with this process, however it ends
            self._warden = start_warden(self.root)
        if self._monitor is None:
            self._closing = False
            self._monitor = asyncio.create_task(self._watch(), name="sim-worker-monitor")

    def net_bytes(self, iid: int) -> tuple[int, int] | None:
        """The container's interface counters (received, sent), as the host meters them; None
        while it has no sandbox. The stand-ins count into them (_simlib.net_count)."""
        box = self.sandboxes.get(iid)
        if box is None:
            return None
        stats = box.root / simlib.NET_STATS
        out = []
        for name in ("rx_bytes", "tx_bytes"):
            try:
                out.append(int((stats / name).read_text().strip() or 0))
            except (OSError, ValueError):
                out.append(0)
        return out[0], out[1]

    def fault_for(self, machine_id: int) -> dict[str, Any]:
        """The machine's fault and its parameters, drawn from the world seed (a faulty machine
        stays faulty from run to run), or overridden."""
        rng = machine_fault_rng(self.cloud.world_seed, machine_id)
        draw = rng.random()
        fault: dict[str, Any] = {"fault": "none"}
        for name, probability, (lo, hi) in FAULTS:
            p = probability * self.machine_fault_rate
            if draw < p:
                fault = {"fault": name, "fault_after": rng.randint(lo, hi),
                         "fault_every": rng.randint(3, 6)}  # fmt: skip
                break
            draw -= p
        override = self.fault_overrides.get(machine_id)
        if isinstance(override, str):
            fault = {"fault": override}
        elif isinstance(override, dict):
            fault = dict(override)
        return fault

    async def _on_running(self, inst: dict[str, Any]) -> None:
        """The cloud saw the instance's container start (first run, or again after a reboot or
        a stop and start): a sandbox already there is the old container, restarted."""
        iid = int(inst["id"])
        if iid not in self._starting:
            self._starting[iid] = asyncio.create_task(self._start(iid))

    def _lock(self, iid: int) -> asyncio.Lock:
        return self._locks.setdefault(iid, asyncio.Lock())

    async def wait_started(self, instance_id: int) -> Sandbox:
        task = self._starting.get(instance_id)
        if task is not None:
            await task
        return self.sandboxes[instance_id]

    async def _start(self, iid: int) -> None:
        try:
            async with self._lock(iid):
                await self._stop_locked(iid)
                await self._start_locked(iid)
        except Exception:
            log.exception("instance %s: sandbox failed to start", iid)
        finally:
            self._starting.pop(iid, None)

    async def _start_locked(self, iid: int) -> None:
        sim_inst = self.cloud.instance(iid)
        if sim_inst is None:
            return
        root = self.root / f"instance-{iid}"
        profile = self._profile(sim_inst)
        env = self._environment(sim_inst, root)
        self._lay_out(root, profile, broken_c1=sim_inst.broken_bench_input)
        host_key = self._host_keys.get(iid)
        if host_key is None:
            host_key = self._host_keys[iid] = asyncssh.generate_private_key("ssh-ed25519")
        sshd = SandboxSshd(root, env, lambda: self.cloud.authorized_keys(iid), host_key)
        # Vast's SSH proxy and, when it has one, the instance's direct port: the same sshd.
        direct = () if sim_inst.direct_port is None else (sim_inst.direct_port,)
        await sshd.start(sim_inst.ssh_port, also=direct)
        box = Sandbox(iid, root, sshd, env, profile=profile)
        self.sandboxes[iid] = box
        if sim_inst.onstart:
            box.onstart = await asyncio.create_subprocess_exec(
                "/bin/bash", "-c", sim_inst.onstart, cwd=root, env=env,
                stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
        log.info("instance %s: sandbox %s, ssh on %s", iid, root, sshd.ports)

    def _profile(self, inst: Any) -> dict[str, Any]:
        machine = inst.machine
        offer = inst.offer
        num_gpus = int(offer.get("num_gpus") or 1)
        return {
            "gpu_name": machine.gpu_name,
            "num_gpus": num_gpus,
            "cpu_ram_gb": round(float(offer.get("cpu_ram") or 0) / 1000.0, 1),
            "cpu_cores": float(offer.get("cpu_cores_effective") or machine.cpu_cores),
            "inet_down_mbps": float(offer.get("inet_down") or 1000.0),
            "disk_bw_mbps": float(offer.get("disk_bw") or 2000.0),
            "host_ram_gb": round(machine.ram_gib * GIB / 1e9, 1),
            "rate_per_hour": round(machine.rate_for(num_gpus), 2),
            "driver_version": str(offer.get("driver_version") or "580.82.07"),
            "disk_gb": float(inst.disk or 0.0),
            "seed": self.cloud.seed * 7919 + inst.id,
            **self.fault_for(machine.machine_id),
        }

    def _environment(self, inst: Any, root: Path) -> dict[str, str]:
        path = [
            str(root / "usr" / "local" / "bin"),
            str(STANDINS_DIR),
            # A real interpreter before any pyenv-style shim: stand-ins start often.
            str(Path(sys.executable).parent),
            "/usr/local/bin",
            "/usr/bin",
            "/bin",
        ]
        env = {
            # Never the controller's environment: it may hold secrets.
            "PATH": ":".join(path),
            "HOME": str(root / "root"),
            "LANG": "C.UTF-8",
            "WORKER_ROOT": str(root),
            "SIM_SPEED": str(self.speed),
            # The scripts' own clock runs at the stand-ins' pace (worker-image/vastui-lib.sh).
            "WORKER_TIME_SCALE": str(self.speed),
            **_clock_env(self.cloud.clock, self._wall0),
            "CUZK_LISTEN": f"127.0.0.1:{free_port()}",
            "CUZK_STATUS_ADDR": f"127.0.0.1:{free_port()}",
            "VAST_CONTAINERLABEL": f"C.{inst.id}",
            # Vast tells a container the external port of its internal port 22 (direct SSH).
            **({"VAST_TCP_PORT_22": str(inst.direct_port)} if inst.direct_port else {}),
            "CONTAINER_ID": str(inst.id),
            # df would report this machine's disk, shared by every sandbox: the rented disk
            # less the image stands in (worker-image/vastui-lib.sh disk_free_gib)
            "WORKER_DISK_FREE_GIB": str(max(0, int(float(inst.disk or 0) * 1e9 / 2**30) - 12)),
            "PYTHONDONTWRITEBYTECODE": "1",
            MARKER: str(root),
        }
        if self.proofsvc_url:
            env[PROOFSVC_URL_ENV] = self.proofsvc_url
        for key, value in inst.env.items():
            if key and not key.startswith("-"):  # "-p 8080:8080" style keys are docker options
                env[key] = str(value)
        if inst.image:
            env.setdefault("VASTUI_IMAGE", inst.image)
            # What a real image has baked in at build time (Dockerfile ARG → ENV).
            digest = hashlib.sha256(inst.image.encode()).hexdigest()
            env.setdefault("VASTUI_IMAGE_DIGEST", f"sha256:{digest}")
        env.update(self.extra_env)
        return env

    def _lay_out(self, root: Path, profile: dict[str, Any], *, broken_c1: bool = False) -> None:
        bin_dir = root / "usr" / "local" / "bin"
        bin_dir.mkdir(parents=True, exist_ok=True)
        for name in WORKER_SCRIPTS:
            shutil.copy2(WORKER_IMAGE_DIR / name, bin_dir / name)
        for sub in ("root", "run", "var/log", ".sim", "usr/local/share/vastui", "proc",
                    "sys/fs/cgroup"):  # fmt: skip
            (root / sub).mkdir(parents=True, exist_ok=True)
        # The benchmark's C1 input: the real envelope (51 MB in the real image, from lotus-bench
        # for miner t01000, sector 1); Phase1Out is a small simulated SealCommitPhase1Output.
        # An image with a broken benchmark input (the fleet fault bench_input_broken) has one
        # made for another miner: every PoRep proof of it fails cuzk's self-check.
        miner = BROKEN_C1_MINER if broken_c1 else 1000
        (root / "usr/local/share/vastui/c1.json").write_bytes(simlib.make_c1(miner, 1))
        lay_out_snap_input(root)
        (root / ".sim" / "machine.json").write_text(json.dumps(profile, indent=1) + "\n")
        lay_out_memory(root, profile)
        lay_out_cpu(root, profile)

    async def _watch(self) -> None:
        """Stop sandboxes whose instance is gone, exited or offline; start new runners."""
        while not self._closing:
            await asyncio.sleep(self.poll_interval)
            try:
                await self.cloud.tick()
                for iid in list(self.sandboxes):
                    inst = self.cloud.instance(iid)
                    status = None if inst is None else self.cloud.status_of(inst)[0]
                    if status != "running":
                        await self.stop_instance(iid)
            except Exception:
                log.exception("sim worker monitor")

    async def stop_instance(self, iid: int) -> None:
        async with self._lock(iid):
            await self._stop_locked(iid)
        inst = self.cloud.instance(iid)
        if inst is None:  # destroyed: nothing will start it again
            self._host_keys.pop(iid, None)
            self._locks.pop(iid, None)

    async def _stop_locked(self, iid: int) -> None:
        box = self.sandboxes.pop(iid, None)
        if box is None:
            return
        await box.sshd.stop()
        kill_sandbox_processes(box.root)
        if box.onstart is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(5.0):  # reaped, not a zombie
                    await box.onstart.wait()
        log.info("instance %s: sandbox stopped", iid)

    async def close(self) -> None:
        # A cancel can be lost (an await that swallows it: asyncio.wait_for in Python 3.11,
        # gh-86296): the monitor also stops at its next look, and is cancelled until it has.
        self._closing = True
        monitor, self._monitor = self._monitor, None
        while monitor is not None and not monitor.done():
            monitor.cancel()
            await asyncio.wait({monitor}, timeout=self.poll_interval + 1.0)
        for task in list(self._starting.values()):
            with contextlib.suppress(Exception):
                await task
        for iid in list(self.sandboxes):
            await self.stop_instance(iid)
        if self._warden is not None:
            stop_warden(self._warden)
            self._warden = None


def lay_out_memory(root: Path, profile: dict[str, Any]) -> None:
    """What a container sees of memory: /proc/meminfo shows the whole host (MemTotal), the
    cgroup limit is the rented slice."""
    host = float(profile.get("host_ram_gb") or profile["cpu_ram_gb"])
    slice_bytes = int(float(profile["cpu_ram_gb"]) * 1e9)
    (root / "proc" / "meminfo").write_text(
        f"MemTotal:       {int(host * 1e9 * 0.985) // 1024} kB\n"
        f"MemFree:        {int(host * 1e9 * 0.9) // 1024} kB\n"
    )
    (root / "sys" / "fs" / "cgroup" / "memory.max").write_text(f"{slice_bytes}\n")


# x86-64-v3 as /proc/cpuinfo names it (worker-image/vastui-lib.sh CPU_V3_FLAGS), among the usual
# flags of a recent AMD EPYC or Intel Xeon
CPU_FLAGS = (
    "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse "
    "sse2 ht syscall nx mmxext fxsr_opt pdpe1gb rdtscp lm constant_tsc rep_good nopl xtopology "
    "nonstop_tsc cpuid extd_apicid aperfmperf pni pclmulqdq monitor ssse3 fma cx16 sse4_1 sse4_2 "
    "x2apic movbe popcnt aes xsave avx f16c rdrand lahf_lm cmp_legacy svm extapic cr8_legacy abm "
    "sse4a misalignsse 3dnowprefetch osvw ibs skinit wdt tce topoext perfctr_core bmi1 avx2 smep "
    "bmi2 erms invpcid cqm rdt_a rdseed adx smap clflushopt clwb sha_ni xsaveopt xsavec xgetbv1"
)


def lay_out_cpu(root: Path, profile: dict[str, Any]) -> None:
    """What a container sees of its CPUs: the cgroup's quota and cpuset (the slice), the host's
    CPU flags (``cpu_flags`` in the profile overrides them: an old CPU without AVX2)."""
    cores = max(1, math.ceil(float(profile.get("cpu_cores") or 1)))
    cgroup = root / "sys" / "fs" / "cgroup"
    cgroup.mkdir(parents=True, exist_ok=True)
    (cgroup / "cpu.max").write_text(f"{cores * 100000} 100000\n")
    (cgroup / "cpuset.cpus.effective").write_text(f"0-{cores - 1}\n")
    flags = str(profile.get("cpu_flags") or CPU_FLAGS)
    (root / "proc").mkdir(parents=True, exist_ok=True)
    (root / "proc" / "cpuinfo").write_text(
        "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7543 32-Core "
        f"Processor\nflags\t\t: {flags}\n\n"
    )


def lay_out_snap_input(root: Path) -> None:
    """The benchmark's SnapDeals input, as the image bakes it (worker-image/Dockerfile): the
    vanilla partition proofs and the commitments they were made for."""
    vanilla, meta = simlib.make_snap_vanilla(1000, 1)
    share = root / "usr" / "local" / "share" / "vastui"
    share.mkdir(parents=True, exist_ok=True)
    (share / "snap-vanilla.json").write_bytes(vanilla)
    (share / "snap.json").write_text(json.dumps(meta) + "\n")


def kill_sandbox_processes(root: Path) -> int:
    """SIGKILL every process whose environment carries this sandbox's marker.

    Worker scripts background daemons (`nohup ... &`), so process groups are not enough.
    """
    target = str(root)
    return kill_marked(lambda value: value == target)


def reap_stale_sandboxes(parent: Path) -> int:
    """Kill what a demo that died without cleaning up left behind, and remove its files.

    Sandboxes live in `<parent>/vastui-sim-<owner pid>-*/instance-N`; an owner that is gone
    (killed with its terminal, say) cannot stop its workers any more.
    """

    def owner_gone(directory: Path) -> bool:
        parts = directory.name.split("-")
        if directory.parent != parent or len(parts) < 4 or not parts[2].isdigit():
            return False
        try:
            os.kill(int(parts[2]), 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False

    killed = kill_marked(lambda value: owner_gone(Path(value).parent))
    for directory in parent.glob("vastui-sim-*"):
        if owner_gone(directory):
            shutil.rmtree(directory, ignore_errors=True)
    return killed


def _clock_env(clock: object, wall0: float) -> dict[str, str]:
    """Where the cloud's scaled clock stood against the wall clock: the worker's log lines and
    the stand-ins' own (WORKER_CLOCK_*, worker-image/vastui-lib.sh now_iso) then read the
    engine's time, so every log merges in order with the engine's. A clock that is not scaled
    (a test's ManualClock) has no such mapping; the sandboxes then share one clock anyway, the
    wall clock from the host's start at their speed: curio's nodes compare each other's
    heartbeats (harmony/resources/resources.go:130-138), one clock per process would not do."""
    if not isinstance(clock, ScaledClock):
        return {"WORKER_CLOCK_WALL0": f"{wall0:.3f}", "WORKER_CLOCK_SIM0": f"{wall0:.3f}"}
    return {"WORKER_CLOCK_WALL0": f"{clock.wall0:.3f}", "WORKER_CLOCK_SIM0": f"{clock.start:.3f}"}
