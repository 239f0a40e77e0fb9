"""Shared helpers for the worker stand-ins (``cuzk-daemon``, ``cuzk-bench``, ``curio``,
``nvidia-smi``).

The stand-ins replace the real GPU/network binaries inside a simulated worker. What they print
and how they fail is read from the real source (filecoin-project/curio @ e0294b0f, ``extern/cuzk``,
``lib/fastparamfetch``, ``deps``, ``cmd/curio``; sppark 0.1.14; tracing-subscriber 0.3.22, as
pinned by ``extern/cuzk/Cargo.lock``); each behaviour names its source file in a comment. Only
*time* is modelled: durations follow the machine profile, scaled by ``SIM_SPEED``. Standard
library only; each script puts its own directory on ``sys.path`` and imports this module.

Machine profile: ``$WORKER_ROOT/.sim/machine.json`` (written by the simulator)::

    {
      "gpu_name": "RTX 4090",      # shown by nvidia-smi and in the daemon's status
      "num_gpus": 1,               # GPUs of the rented slice
      "cpu_ram_gb": 256.0,         # RAM of the slice: the container's memory limit (cgroup)
      "host_ram_gb": 256.0,        # RAM of the whole machine: what /proc/meminfo MemTotal shows
      "cpu_cores": 32.0,           # CPU cores of the slice
      "inet_down_mbps": 1000.0,    # download speed (duration of curio fetch-params)
      "rate_per_hour": 32.0,       # proofs/hour this slice sustains when the daemon is fed
                                   #   as production curio feeds it (several proofs in flight)
      "fault": "none",             # see FAULTS
      "fault_after": 3,            # index of the daemon's proof where the fault strikes
                                   #   (0 = the first proof a daemon runs, the warmup)
      "fault_every": 5,            # gpu_panic: every this many proofs after fault_after
      "bind_delay_s": 0.05,        # seconds between "ready" in the log and the port answering
      "snap_factor": 1.0,          # a SnapDeals proof's synthesis and GPU time / a PoRep proof's
                                   #   (1.0: 16 partitions x ~81M constraints, engine.rs:2322-2325,
                                   #   memory.rs:52, vs 10 x ~130M, cuzk-project.md:158-160)
      "pce_fast_path": false,      # model a cuzk whose synthesis uses the cached PCE (see the
                                   #   daemon's docstring: at e0294b0f it never does)
      "seed": 0                    # seeds the per-proof jitter (deterministic)
    }

Every key is optional; a missing file means the defaults. The simulator also lays out
``$WORKER_ROOT/proc/meminfo`` (host RAM) and ``$WORKER_ROOT/sys/fs/cgroup/memory.max`` (the
slice's limit): the stand-in daemon reads the first for ``total_budget = "auto"`` exactly as the
real one reads ``/proc/meminfo``, and is killed when its memory passes the second, as the kernel
kills a container that passes its cgroup limit.

Environment: ``WORKER_ROOT`` (sandbox root, default ``/``), ``SIM_SPEED`` (simulated seconds per
real second), ``SIM_T0`` (optional anchor of the simulated clock; else machine.json's mtime),
``NO_COLOR`` (tracing-subscriber's switch for ANSI colours, which are on by default, even into a
file), ``RUST_LOG`` (the daemon's and the bench's log filter, overriding their configured level).

One file: the one module every stand-in imports (standard library only, no package).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import select
import signal
import socket
import sys
import threading
import time
from datetime import UTC, datetime
from typing import Any

DEFAULT_MACHINE: dict[str, Any] = {
    "gpu_name": "RTX 4090",
    "num_gpus": 1,
    "cpu_ram_gb": 256.0,
    "host_ram_gb": None,  # None: same as cpu_ram_gb (the slice is the whole machine)
    "cpu_cores": 32.0,
    "inet_down_mbps": 1000.0,
    "rate_per_hour": 32.0,
    "fault": "none",
    "fault_after": 3,
    "fault_every": 5,
    "bind_delay_s": 0.05,
    "snap_factor": 1.0,
    "pce_fast_path": False,
    "seed": 0,
}

# Faults a machine can have, each a real failure mode of the real binaries:
#   none
#   gpu_panic        a recoverable CUDA error (out of memory) in the GPU start of proof
#                    fault_after, then every fault_every proofs: that proof FAILS, the daemon
#                    lives on (supraseal-c2 src/lib.rs:316 panic, caught by tokio; engine.rs:3298)
#   gpu_oom          the same error for every proof whose GPU start overlaps a running PCE
#                    extraction (GPU out of memory while the PCE is extracted: the warmup fails)
#   cuda_abort       a sticky CUDA error (illegal memory access) in proof fault_after: the C++
#                    catch handler's gpu.sync() throws again, std::terminate, SIGABRT (134)
#                    (supraseal-c2 cuda/groth16_cuda.cu:1052, sppark util/gpu_t.cuh:158)
#   host_oom         host memory grows past the container limit in proof fault_after: the
#                    kernel's OOM killer ends the daemon with SIGKILL, no line of its own
#   no_cuda          the container sees no GPU: the SRS load fails, every proof FAILS
#                    (supraseal-c2 cuda/groth16_cuda.cu:418 "No CUDA devices available")
#   nvidia_smi_hang  nvidia-smi hangs (a GPU fallen off the bus): the daemon, which runs it at
#                    start (engine.rs:1165), never gets ready
#   hang             proof fault_after never finishes on the GPU (nothing in cuzk times out:
#                    engine.rs:3556 awaits without a timeout)
#   pce_save_fail    the PCE cannot be written (read-only or full disk): WARN, not fatal
#                    (pipeline.rs:463)
#   pce_extract_fail the background PCE extraction fails: WARN, not fatal (engine.rs:2282)
#   stalled_download curio fetch-params stops making progress
#   slow             the machine proves at half its rate
#   snap_invalid     the GPU's SnapDeals proofs do not verify: cuzk self-checks PoRep proofs only
#                    (engine.rs, every "self-check" line is PoRep's), so the daemon returns the
#                    Snap proof COMPLETED and counts it; curio's CheckOutput rejects it
#                    (lib/proofsvc/common/types.go:274-305: "invalid UpdateProof")
FAULTS = frozenset(
    {
        "none",
        "gpu_panic",
        "gpu_oom",
        "cuda_abort",
        "host_oom",
        "no_cuda",
        "nvidia_smi_hang",
        "hang",
        "pce_save_fail",
        "pce_extract_fail",
        "stalled_download",
        "slow",
        "snap_invalid",
    }
)

GIB = 1024**3
GROTH_PROOF_BYTES = 192  # one partition's Groth16 proof (pipeline.rs:167)
PARTITIONS = 10
PROOF_LEN = 1920  # 10 partitions x 192 bytes (engine.rs:506 proof_len)
# SnapDeals 32 GiB: 16 partitions (engine.rs:2322-2325; storage-proofs-update's update_partitions,
# which parse_snap_deals_input reads, pipeline.rs:2771-2772), assembled by concatenation
# (ProofAssembler::assemble, pipeline.rs:2142-2150): 16 x 192 bytes.
SNAP_PARTITIONS = 16
SNAP_PROOF_LEN = SNAP_PARTITIONS * GROTH_PROOF_BYTES
SNAP_REGISTERED_PROOF = 3  # RegisteredUpdateProof::StackedDrg32GiBV1 (prover.rs:488-497)
# The BLS12-381 scalar field modulus: a commitment is a field element in 32 little-endian bytes,
# and as_safe_commitment rejects bytes that are not one (filecoin-proofs api/util.rs).
BLS12_381_R = 0x73EDA753299D7D483339D80809A1D80553BDA402FFFE5BFEFFFFFFFF00000001

# The SRS of 32 GiB PoRep (srs_manager.rs:83) and the files `curio fetch-params 32GiB` fetches
# for it (lotus build/proof-params parameters.json; sizes are not in the JSON, these are the
# usual on-disk sizes). The stand-ins write small placeholders; sizes are only logged.
SRS_PARAMS = (
    "v28-stacked-proof-of-replication-merkletree-poseidon_hasher-8-8-0-sha256_hasher-"
    "82a357d2f2ca81dc61bb45f4a762807aedee1b0a53fd6c4e77b46a01bfef7820.params"
)
PARAM_FILES = (
    # (file name, size in GiB, cid)
    (SRS_PARAMS, 44.7, "QmengpM684XLQfG8754ToonszgEg2bQeAGUan5uXTHUQzJ"),
    (
        SRS_PARAMS[: -len(".params")] + ".vk",
        0.0015,
        "Qmf93EMrADXAK6CyiSfE8xx45fkMfR3uzKEPCvZC1n2kzb",
    ),
    (
        "v28-empty-sector-update-merkletree-poseidon_hasher-8-8-0-"
        "3b7f44a9362e3985369454947bc94022e118211e49fd672d52bec1cbfd599d18.params",
        33.0,  # "33 GiB file" (cuzk-core/src/srs_manager.rs:90)
        "QmUa2kfqGqPXNt4Rg5oQu8ns8Bhn4orjU7wvXXBt8z7C6v",
    ),
    (
        "v28-proof-of-spacetime-fallback-merkletree-poseidon_hasher-8-8-0-"
        "0377ded656c6f524f1618760bffe4e0a1c51d5a70c4509eedae8a27555733edc.params",
        57.0,  # WindowPoSt "57 GiB file" (srs_manager.rs:84)
        "QmVxjFRyhmyQaZEtCh7nk2abc7LhFkzhnRX4rcHqCCpikR",
    ),
    (
        "v28-proof-of-spacetime-fallback-merkletree-poseidon_hasher-8-8-0-"
        "559e581f022bb4e4ec6e719e563bf0e026ad6de42e56c18714a2c692b1b88d7e.params",
        0.18,  # WinningPoSt "184 MiB" (srs_manager.rs:86)
        "QmXiiXheXvZV8rVkdDCFPdUYJVCNa67THGa7VgQRkqNojy",
    ),
    ("v28-fil-inner-product-v1.srs", 0.25, "Qmdq44DjcQnFfU3PJcdX7J49GCqcUYszr1TxMbHtAkvQ3g"),
)
# The SRS of SnapDeals 32 GiB (srs_manager.rs:90-91, "33 GiB file"); the same file as above.
SNAP_SRS_PARAMS = PARAM_FILES[2][0]
# lib/fastparamfetch/paramfetch.go:30
PARAM_GATEWAY = "https://pub-08ae819c828244bdbe5f615fd8c5e144.r2.dev/ipfs/"


# ---------------------------------------------------------------- environment


def worker_root() -> str:
    root = os.environ.get("WORKER_ROOT") or "/"
    return root.rstrip("/")


def rpath(rel: str) -> str:
    """Path under the worker root (``rel`` with or without a leading slash)."""
    return f"{worker_root()}/{rel.lstrip('/')}"


def localize(path: str) -> str:
    """Where a path the worker scripts name lives: scripts pass paths already under the worker
    root; a bare absolute path (a built-in default such as /data/zk/params) is mapped under it."""
    root = worker_root()
    if not root or path == root or path.startswith(root + "/"):
        return path
    return rpath(path)


NET_STATS = "sys/class/net/eth0/statistics"  # the container's interface counters (Linux sysfs)


def net_count(rx: int = 0, tx: int = 0) -> None:
    """Bytes over the worker's own internet, added to its interface counters as a kernel would:
    the host meters them and the simulated cloud bills them at the offer's $/GB (vastsim/
    workers.py ``net_bytes``). Several stand-in processes count at once: under a file lock."""
    import fcntl

    for name, delta in (("rx_bytes", rx), ("tx_bytes", tx)):
        if delta <= 0:
            continue
        path = rpath(f"{NET_STATS}/{name}")
        with contextlib.suppress(OSError):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            with os.fdopen(fd, "r+", encoding="ascii") as fh:
                fcntl.flock(fh, fcntl.LOCK_EX)
                try:
                    total = int(fh.read().strip() or 0)
                except ValueError:
                    total = 0
                # the counter only grows, so the new text is never shorter: written in place,
                # a reader sees the old number or the new one
                fh.seek(0)
                fh.write(f"{total + int(delta)}\n")


def machine_path() -> str:
    return rpath(".sim/machine.json")


def load_machine() -> dict[str, Any]:
    machine = dict(DEFAULT_MACHINE)
    try:
        with open(machine_path(), encoding="utf-8") as fh:
            data = json.load(fh)
        if isinstance(data, dict):
            machine.update({k: v for k, v in data.items() if v is not None})
    except (OSError, ValueError):
        pass
    machine["num_gpus"] = max(1, int(machine["num_gpus"]))
    machine["cpu_ram_gb"] = float(machine["cpu_ram_gb"])
    host = machine.get("host_ram_gb")
    machine["host_ram_gb"] = max(float(host), machine["cpu_ram_gb"]) if host else None
    machine["cpu_cores"] = max(1.0, float(machine["cpu_cores"]))
    machine["inet_down_mbps"] = max(0.1, float(machine["inet_down_mbps"]))
    machine["rate_per_hour"] = max(0.01, float(machine["rate_per_hour"]))
    machine["fault_after"] = max(0, int(machine["fault_after"]))
    machine["fault_every"] = max(1, int(machine["fault_every"]))
    machine["bind_delay_s"] = max(0.0, float(machine["bind_delay_s"]))
    machine["snap_factor"] = max(0.01, float(machine["snap_factor"]))
    machine["pce_fast_path"] = machine["pce_fast_path"] is True
    machine["seed"] = int(machine["seed"])
    if machine["fault"] not in FAULTS:
        machine["fault"] = "none"
    return machine


def speed() -> float:
    try:
        value = float(os.environ.get("SIM_SPEED", "1"))
    except ValueError:
        value = 1.0
    return value if value > 0 else 1.0


_ANCHOR: float | None = None


def _anchor() -> float:
    global _ANCHOR
    if _ANCHOR is None:
        t0 = os.environ.get("SIM_T0")
        try:
            _ANCHOR = float(t0) if t0 else os.stat(machine_path()).st_mtime
        except (OSError, ValueError):
            _ANCHOR = time.time()
    return _ANCHOR


def sim_now() -> float:
    """The simulated wall clock (epoch seconds): the controller's, when it says where it stood
    (WORKER_CLOCK_SIM0 at wall time WORKER_CLOCK_WALL0, as worker-image/vastui-lib.sh reads it),
    else anchored at the sandbox's start."""
    try:
        wall0 = float(os.environ["WORKER_CLOCK_WALL0"])
        sim0 = float(os.environ["WORKER_CLOCK_SIM0"])
    except (KeyError, ValueError):
        anchor = _anchor()
        return anchor + (time.time() - anchor) * speed()
    return sim0 + (time.time() - wall0) * speed()


def sim_sleep(sim_seconds: float) -> None:
    if sim_seconds > 0:
        time.sleep(sim_seconds / speed())


class Pace:
    """Sleeps that keep to a schedule: each one ends at start + the simulated seconds scheduled
    so far, so the overhead of the work between sleeps (logging, a busy machine) does not add up
    and a rate in the machine profile is the rate the stand-in delivers."""

    def __init__(self, start: float | None = None) -> None:
        self.start = time.monotonic() if start is None else start
        self.scheduled = 0.0

    def sleep(self, sim_seconds: float) -> None:
        self.scheduled += max(0.0, sim_seconds)
        delay = self.end() - time.monotonic()
        if delay > 0:
            time.sleep(delay)

    def end(self) -> float:
        """When the schedule so far ends (monotonic seconds)."""
        return self.start + self.scheduled / speed()


def sleep_forever() -> None:
    """Block this thread for good; in the main thread, stay woken by every signal.

    The kernel gives a process's signal to any of its threads that does not block it, often a
    busy one. Python runs the handler in the main thread only, and only once that thread is back
    in the interpreter: a main thread in time.sleep(3600) ran a SIGTERM that landed on another
    thread up to an hour late (`curio run` outlived its SIGTERM by over 60 s under load). The
    C handler also writes the signal to the wakeup fd, which the main thread waits on here."""
    if threading.current_thread() is not threading.main_thread():
        while True:
            time.sleep(3600)
    wake_r, wake_w = socket.socketpair()
    wake_r.setblocking(False)
    wake_w.setblocking(False)
    signal.set_wakeup_fd(wake_w.fileno(), warn_on_full_buffer=False)
    while True:
        select.select([wake_r], [], [])
        with contextlib.suppress(BlockingIOError):
            wake_r.recv(256)  # the handler itself has run by now, back in the interpreter


class SimStopwatch:
    """Measures elapsed simulated time (real elapsed x SIM_SPEED)."""

    def __init__(self) -> None:
        self.start = time.monotonic()

    def sim_elapsed(self) -> float:
        return (time.monotonic() - self.start) * speed()


def jitter(machine: dict[str, Any], salt: str, index: int) -> float:
    """A deterministic factor in [0.97, 1.03] for (machine seed, what, which)."""
    rng = random.Random(f"{machine['seed']}:{salt}:{index}")
    return rng.uniform(0.97, 1.03)


def meminfo_total_bytes() -> int | None:
    """MemTotal from ``/proc/meminfo`` (under the worker root), as cuzk's
    ``detect_system_memory`` reads it (cuzk-core/src/memory.rs:83-100)."""
    try:
        with open(rpath("proc/meminfo"), encoding="utf-8") as fh:
            content = fh.read()
    except OSError:
        return None
    for line in content.splitlines():
        if line.startswith("MemTotal:"):
            rest = line[len("MemTotal:") :].strip()
            if rest.endswith("kB"):
                try:
                    return int(rest[:-2].strip()) * 1024
                except ValueError:
                    return None
    return None


def cgroup_limit_bytes() -> int | None:
    """The container's memory limit (cgroup v2 ``memory.max``, else v1), None if unlimited."""
    for rel in ("sys/fs/cgroup/memory.max", "sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(rpath(rel), encoding="utf-8") as fh:
                text = fh.read().strip()
        except OSError:
            continue
        if text == "max":
            return None
        try:
            value = int(text)
        except ValueError:
            continue
        return None if value >= 1 << 60 else value
    return None


# ---------------------------------------------------------------- tracing (Rust) log lines

_OUT_LOCK = threading.RLock()
_LEVELS = {"TRACE": 0, "DEBUG": 1, "INFO": 2, "WARN": 3, "ERROR": 4}
_LEVEL_COLOURS = {"TRACE": "35", "DEBUG": "34", "INFO": "32", "WARN": "33", "ERROR": "31"}


class Display:
    """A tracing field recorded with ``%`` (Display): printed bare, even when a string.

    Plain strings are recorded with ``record_str``, which tracing-subscriber prints Debug-quoted
    (tracing-subscriber 0.3.22 ``fmt/format/mod.rs:1247-1256``)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __str__(self) -> str:
        return str(self.value)


def debug_str(text: str) -> str:
    """Rust's ``{:?}`` of a string: quoted, with \\ \" and control characters escaped."""
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif ord(ch) < 0x20:
            out.append(f"\\u{{{ord(ch):x}}}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _fmt_value(value: Any) -> str:
    if isinstance(value, Display):
        return str(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return debug_str(value)
    return str(value)


class EnvFilter:
    """The subset of tracing-subscriber's ``EnvFilter`` the stand-ins need: a default level and
    ``target=level`` directives, comma separated (``info``, ``warn,cuzk_core=debug``).

    ``RUST_LOG`` wins when set and valid; otherwise the configured level
    (cuzk-daemon/src/main.rs:54-56: ``EnvFilter::try_from_default_env().unwrap_or_else(...)``).
    """

    def __init__(self, spec: str) -> None:
        self.default = 5  # nothing unless a directive says so
        self.targets: list[tuple[str, int]] = []
        for raw in spec.split(","):
            part = raw.strip()
            if not part:
                continue
            target, _, level = part.rpartition("=")
            number = _parse_level(level)
            if number is None:
                raise ValueError(f"invalid filter directive {part!r}")
            if target:
                self.targets.append((target, number))
            else:
                self.default = number
        self.targets.sort(key=lambda t: -len(t[0]))

    def enabled(self, level: str, target: str) -> bool:
        threshold = self.default
        for prefix, number in self.targets:
            if target == prefix or target.startswith(prefix + "::"):
                threshold = number
                break
        return _LEVELS[level] >= threshold

    @classmethod
    def from_env_or(cls, configured: str) -> EnvFilter:
        spec = os.environ.get("RUST_LOG")
        if spec is not None:
            with contextlib.suppress(ValueError):
                return cls(spec)
        try:
            return cls(configured)
        except ValueError:
            return cls("info")


def _parse_level(text: str) -> int | None:
    text = text.strip().upper()
    if text == "OFF":
        return 5
    if text == "WARNING":
        text = "WARN"
    return _LEVELS.get(text)


_FILTER = EnvFilter("info")


def set_filter(flt: EnvFilter) -> None:
    global _FILTER
    _FILTER = flt


def _colour() -> bool:
    # tracing-subscriber 0.3.22 fmt_layer.rs:717: ANSI unless NO_COLOR is set and non-empty.
    return not os.environ.get("NO_COLOR")


def ts_rfc3339_us(epoch: float | None = None) -> str:
    when = datetime.fromtimestamp(sim_now() if epoch is None else epoch, tz=UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def tracing_line(
    level: str, target: str, message: str, span: str | None = None, **fields: Any
) -> str:
    """One tracing-subscriber ``fmt`` (Full) line:
    ``<RFC3339 µs>Z  INFO span{..}: target: message k=v`` (fmt/format/mod.rs:905-1015)."""
    ts = ts_rfc3339_us()
    lvl = f"{level:>5}"
    if _colour():
        parts = [
            f"\x1b[2m{ts}\x1b[0m",
            f"\x1b[{_LEVEL_COLOURS.get(level, '0')}m{lvl}\x1b[0m",
        ]
        if span:
            parts.append(f"\x1b[1m{span}\x1b[0m\x1b[2m:\x1b[0m")
        parts += [f"\x1b[2m{target}\x1b[0m\x1b[2m:\x1b[0m", message]
        parts += [f"\x1b[3m{k}\x1b[0m\x1b[2m=\x1b[0m{_fmt_value(v)}" for k, v in fields.items()]
    else:
        parts = [ts, lvl]
        if span:
            parts.append(f"{span}:")
        parts += [f"{target}:", message]
        parts += [f"{k}={_fmt_value(v)}" for k, v in fields.items()]
    return " ".join(parts)


def emit(line: str, stream: Any = None) -> None:
    out = stream or sys.stdout
    with _OUT_LOCK:
        try:
            out.write(line + "\n")
            out.flush()
        except (OSError, ValueError):
            pass


def tlog(level: str, target: str, message: str, span: str | None = None, **fields: Any) -> None:
    """Log one tracing line to stdout (the fmt layer's default writer) if the filter allows."""
    if _FILTER.enabled(level, target):
        emit(tracing_line(level, target, message, span, **fields))


def anyhow_error(context: str, *causes: str) -> str:
    """What ``fn main() -> anyhow::Result<()>`` prints for an error: the Debug form,
    ``Error: <context>`` then the ``Caused by:`` chain (numbered when more than one)."""
    text = f"Error: {context}"
    if causes:
        text += "\n\nCaused by:"
        if len(causes) == 1:
            text += f"\n    {causes[0]}"
        else:
            for i, cause in enumerate(causes):
                text += f"\n    {i}: {cause}"
    return text


# ---------------------------------------------------------------- go-log (curio) log lines


def ts_golog(epoch: float | None = None) -> str:
    when = datetime.fromtimestamp(sim_now() if epoch is None else epoch, tz=UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"


def golog_line(level: str, logger: str, caller: str, message: str, **fields: Any) -> str:
    """One go-log v2 plaintext line (zap console encoder, stderr not a TTY, so no colour):
    ``ts\\tLEVEL\\tlogger\\tcaller\\tmessage\\t{fields}``."""
    line = f"{ts_golog()}\t{level}\t{logger}\t{caller}\t{message}"
    if fields:
        line += "\t" + json.dumps(fields, separators=(", ", ": "))
    return line


def glog(level: str, logger: str, caller: str, message: str, **fields: Any) -> None:
    # go-log writes to stderr by default.
    emit(golog_line(level, logger, caller, message, **fields), sys.stderr)


def split_addr(addr: str, default_port: int) -> tuple[str, int]:
    addr = addr.strip()
    for prefix in ("http://", "https://", "dns:///"):
        if addr.startswith(prefix):
            addr = addr[len(prefix) :]
    addr = addr.split("/", 1)[0]
    host, _, port = addr.rpartition(":")
    if not host:
        return addr or "127.0.0.1", default_port
    host = host.strip("[]")
    try:
        return host, int(port)
    except ValueError:
        return host, default_port


# ---------------------------------------------------------------- the C1 input


def replica_id(miner_id: int, sector_num: int) -> str:
    """The simulated replica id: what a real C1 output's replica id is bound to (the prover id,
    which the miner id determines, and the sector number; cuzk-core/src/prover.rs:51-60)."""
    import hashlib

    return hashlib.sha256(f"sim-replica:{miner_id}:{sector_num}".encode()).hexdigest()


def make_c1(miner_id: int = 1000, sector_num: int = 1) -> bytes:
    """A C1 file in the real envelope (``{"SectorNum", "Phase1Out", "SectorSize"}``, as lotus-bench
    ``simple commit1`` writes it and cuzk-core/src/prover.rs:42 ``C1OutputWrapper`` reads it):
    Phase1Out is base64 of a JSON SealCommitPhase1Output, here a small simulated one."""
    import base64

    phase1 = {
        "registered_proof": "StackedDrg32GiBV1_1",
        "vanilla_proofs": {"StackedDrg32GiBV1": [[] for _ in range(PARTITIONS)]},
        "comm_r": [1] * 32,
        "comm_d": [2] * 32,
        "replica_id": replica_id(miner_id, sector_num),
        "seed": [1] * 32,
        "ticket": [1] * 32,
    }
    body = {
        "SectorNum": sector_num,
        "Phase1Out": base64.b64encode(json.dumps(phase1).encode()).decode(),
        "SectorSize": 34359738368,
    }
    return json.dumps(body).encode()


# ---------------------------------------------------------------- the SnapDeals input


def snap_commitments(miner_id: int, sector_num: int) -> dict[str, bytes]:
    """The simulated commitments of a sector's update (CommR old, CommR new, CommD new): 32 bytes
    each, little-endian field elements (the top two bits cleared, as fr32 does), so
    as_safe_commitment accepts them (pipeline.rs:2755-2760)."""
    import hashlib

    out = {}
    for name in ("comm_r_old", "comm_r_new", "comm_d_new"):
        seed = f"sim-snap:{miner_id}:{sector_num}:{name}".encode()
        raw = bytearray(hashlib.sha256(seed).digest())
        raw[31] &= 0x3F
        out[name] = bytes(raw)
    return out


def make_snap_vanilla(miner_id: int = 1000, sector_num: int = 1) -> tuple[bytes, dict[str, str]]:
    """A SnapDeals vanilla-proofs file as cuzk-bench reads it (``--vanilla``: a JSON array of
    base64 strings, one per partition, as Go's json.Marshal([][]byte) writes them;
    cuzk-bench/src/main.rs:921-945) and what to pass with it: ``{"comm_r_old", "comm_r_new",
    "comm_d_new"}`` in hex, ``registered_proof`` "3" (Update 32G, main.rs:55-58), ``sector_num``,
    ``miner_id``.

    Each partition proof is a small simulated one bound to the sector's commitments (a real
    UpdatePartitionProof proves the update from comm_r_old to comm_r_new and comm_d_new): a proof
    built for other commitments does not verify (see :func:`verify_snap_proof`)."""
    import base64

    comms = snap_commitments(miner_id, sector_num)
    entries = []
    for k in range(SNAP_PARTITIONS):
        body = {
            "sim": "UpdatePartitionProof<SectorShape32GiB>",
            "partition": k,
            **{name: value.hex() for name, value in comms.items()},
        }
        entries.append(base64.b64encode(json.dumps(body).encode()).decode())
    ids = {name: value.hex() for name, value in comms.items()}
    ids.update(
        registered_proof=str(SNAP_REGISTERED_PROOF),
        sector_num=str(sector_num),
        miner_id=str(miner_id),
    )
    return json.dumps(entries).encode(), ids


def snap_prove_fields(miner_id: int = 1000, sector_num: int = 1) -> dict[str, Any]:
    """The ``submit`` fields of a SnapDeals Prove call to the stand-in daemon, as curio sends them
    (tasks/proofshare/task_prove.go:432-445, lib/ffi/cuzk_funcs.go:148-160): the stand-ins' JSON
    carries ``vanilla_proofs`` as base64 strings and the commitments as hex."""
    vanilla, ids = make_snap_vanilla(miner_id, sector_num)
    return {
        "proof_kind": 2,
        "registered_proof": SNAP_REGISTERED_PROOF,
        "sector_size": 34359738368,
        "priority": 2,
        "vanilla_proofs": json.loads(vanilla),
        "sector_number": sector_num,
        "miner_id": miner_id,
        "comm_r_old": ids["comm_r_old"],
        "comm_r_new": ids["comm_r_new"],
        "comm_d_new": ids["comm_d_new"],
    }


def _snap_tag(partition: int, nonce: bytes, comms: tuple[bytes, bytes, bytes]) -> bytes:
    import hashlib

    seed = b"sim-groth16:snap-32g:" + bytes([partition]) + nonce + b"".join(comms)
    return b"".join(hashlib.sha256(seed + bytes([i])).digest() for i in range(5))


def snap_proof(comm_r_old: bytes, comm_r_new: bytes, comm_d_new: bytes) -> bytes:
    """A simulated SnapDeals proof that verifies for these commitments: per partition 192 bytes,
    a 32-byte nonce and 160 bytes bound to (partition, nonce, commitments)."""
    comms = (comm_r_old, comm_r_new, comm_d_new)
    out = b""
    for k in range(SNAP_PARTITIONS):
        nonce = os.urandom(32)
        out += nonce + _snap_tag(k, nonce, comms)
    return out


def verify_snap_proof(
    proof: bytes, comm_r_old: bytes, comm_r_new: bytes, comm_d_new: bytes
) -> bool:
    """What a verifier (the chain, the proofshare service) says of a simulated SnapDeals proof."""
    if len(proof) != SNAP_PROOF_LEN:
        return False
    comms = (comm_r_old, comm_r_new, comm_d_new)
    for k in range(SNAP_PARTITIONS):
        part = proof[k * GROTH_PROOF_BYTES : (k + 1) * GROTH_PROOF_BYTES]
        if part[32:] != _snap_tag(k, part[:32], comms):
            return False
    return True
