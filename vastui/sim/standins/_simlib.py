"""Shared helpers for the worker stand-ins (``cuzk-daemon``, ``cuzk-bench``, ``curio``).

The stand-ins replace the real GPU/network binaries inside a simulated worker: they print the
real log formats and take (scaled) time according to a machine profile. Standard library only;
each script puts its own directory on ``sys.path`` and imports this module.

Machine profile: ``$WORKER_ROOT/.sim/machine.json`` (written by the simulator)::

    {
      "gpu_name": "RTX 4090",      # str, shown in logs and /status
      "num_gpus": 1,               # int, GPUs of the rented slice
      "cpu_ram_gb": 256.0,         # float, RAM of the slice (memory budget in the daemon log)
      "cpu_cores": 32.0,           # float, CPU cores of the slice (rayon threads)
      "inet_down_mbps": 1000.0,    # float, download Mbit/s (duration of curio fetch-params)
      "rate_per_hour": 32.0,       # float, the machine's true steady proof rate (proofs/hour)
      "fault": "none",             # see FAULTS: none|daemon_crash|gpu_oom|stalled_download|
                                   #   slow|bench_error|hang
      "seed": 0                    # int, seeds the per-proof jitter (deterministic)
    }

Every key is optional (defaults below); a missing file means the defaults.

Environment:

* ``WORKER_ROOT`` - sandbox root (default ``/``); all paths hang off it.
* ``SIM_SPEED`` - simulated seconds per real second (default 1). Every sleep is
  ``sim_seconds / SIM_SPEED``; durations printed in logs are simulated.
* ``SIM_T0`` - optional real epoch at which the simulation started; log timestamps show the
  simulated clock ``SIM_T0 + (now - SIM_T0) * SIM_SPEED``. Without it the modification time of
  machine.json is the anchor (so all stand-ins of one worker agree).
* ``NO_COLOR`` - when set, tracing lines carry no ANSI colours (the real daemon's
  tracing-subscriber colours its output by default, even into a file).

Fault semantics (see each script): ``daemon_crash`` panics the daemon with a CUDA error during
the 4th proof of a daemon that loaded the PCE from disk; ``gpu_oom`` fails every such proof with
``CUDA error 2: out of memory``; ``slow`` halves the rate; ``bench_error`` kills the warmup daemon
with an ERROR after 10 simulated minutes; ``hang`` makes proofs never complete;
``stalled_download`` freezes ``curio fetch-params``.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import sys
import threading
import time
from datetime import UTC, datetime
from typing import Any

DEFAULT_MACHINE: dict[str, Any] = {
    "gpu_name": "RTX 4090",
    "num_gpus": 1,
    "cpu_ram_gb": 256.0,
    "cpu_cores": 32.0,
    "inet_down_mbps": 1000.0,
    "rate_per_hour": 32.0,
    "fault": "none",
    "seed": 0,
}

FAULTS = frozenset(
    {"none", "daemon_crash", "gpu_oom", "stalled_download", "slow", "bench_error", "hang"}
)

# Simulated durations (seconds) taken from the research notes (original-system.md §4, §8).
SRS_LOAD_S = 36.8
PCE_EXTRACT_S = 175.0
PCE_SAVE_S = 25.0
PCE_LOAD_S = 5.0
FIRST_PROOF_FACTOR = 1.45  # first proof of a type: synthesis without the PCE fast path
PARTITIONS = 10
PROOF_LEN = 1920

GIB = 1024**3

PARAM_FILES = (
    # (file name, size in GiB, cid)
    (
        "v28-stacked-proof-of-replication-merkletree-poseidon_hasher-8-8-0-sha256_hasher-"
        "82a357d2f2ca81dc61bb45f4a762807aedee1b0a53fd6c4e77b46a01bfef7820.params",
        47.0,
        "QmengpM684XLQfG8754ToonszgEg2bQeAGUan5uXTHUQzJ",
    ),
    (
        "v28-stacked-proof-of-replication-merkletree-poseidon_hasher-8-8-0-sha256_hasher-"
        "82a357d2f2ca81dc61bb45f4a762807aedee1b0a53fd6c4e77b46a01bfef7820.vk",
        0.0015,
        "QmS7ye6Ri2MfFzCkcUJ7FQ6zxDKuJ6J6B8k5PN7wzSR9sX",
    ),
    ("v28-fil-inner-product-v1.srs", 0.25, "Qmdq44DjcQnFfU3PJcdX7J49GCqcUYszr1TxMbHtAkvQ3g"),
)
PARAM_GATEWAY = "https://pub-08ae819c828244bdbe5f615fd8c5e144.r2.dev/ipfs/"


# ---------------------------------------------------------------- environment


def worker_root() -> str:
    root = os.environ.get("WORKER_ROOT") or "/"
    return root.rstrip("/")


def rpath(rel: str) -> str:
    """Path under the worker root (``rel`` without a leading slash)."""
    return f"{worker_root()}/{rel.lstrip('/')}"


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
    machine["cpu_cores"] = float(machine["cpu_cores"])
    machine["inet_down_mbps"] = max(0.1, float(machine["inet_down_mbps"]))
    machine["rate_per_hour"] = max(0.01, float(machine["rate_per_hour"]))
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
    """The simulated wall clock (epoch seconds)."""
    anchor = _anchor()
    return anchor + (time.time() - anchor) * speed()


def sim_sleep(sim_seconds: float) -> None:
    if sim_seconds > 0:
        time.sleep(sim_seconds / speed())


def sleep_forever() -> None:
    while True:
        time.sleep(3600)


class SimStopwatch:
    """Measures elapsed simulated time (real elapsed x SIM_SPEED)."""

    def __init__(self) -> None:
        self.start = time.monotonic()

    def sim_elapsed(self) -> float:
        return (time.monotonic() - self.start) * speed()

    def real_elapsed(self) -> float:
        return time.monotonic() - self.start


def proof_seconds(machine: dict[str, Any], index: int) -> float:
    """Simulated duration of one steady-state proof (deterministic for seed and index)."""
    rate = machine["rate_per_hour"]
    if machine["fault"] == "slow":
        rate /= 2.0
    rng = random.Random(machine["seed"] * 100_003 + index)
    return 3600.0 / rate * rng.uniform(0.97, 1.03)


# ---------------------------------------------------------------- log formats

_OUT_LOCK = threading.RLock()

_LEVEL_COLOURS = {"TRACE": "35", "DEBUG": "34", "INFO": "32", "WARN": "33", "ERROR": "31"}


def _colour() -> bool:
    return not os.environ.get("NO_COLOR")


def ts_rfc3339_us(epoch: float | None = None) -> str:
    when = datetime.fromtimestamp(sim_now() if epoch is None else epoch, tz=UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def ts_golog(epoch: float | None = None) -> str:
    when = datetime.fromtimestamp(sim_now() if epoch is None else epoch, tz=UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"


def _fmt_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def tracing_line(level: str, target: str, message: str, **fields: Any) -> str:
    """One tracing-subscriber ``fmt`` line: ``<RFC3339 µs>Z  INFO target: message k=v``."""
    ts = ts_rfc3339_us()
    lvl = f"{level:>5}"
    if _colour():
        parts = [
            f"\x1b[2m{ts}\x1b[0m",
            f"\x1b[{_LEVEL_COLOURS.get(level, '0')}m{lvl}\x1b[0m",
            f"\x1b[2m{target}\x1b[0m\x1b[2m:\x1b[0m",
            message,
        ]
        parts += [f"\x1b[3m{k}\x1b[0m\x1b[2m=\x1b[0m{_fmt_value(v)}" for k, v in fields.items()]
    else:
        parts = [ts, lvl, f"{target}:", message]
        parts += [f"{k}={_fmt_value(v)}" for k, v in fields.items()]
    return " ".join(parts)


def golog_line(level: str, logger: str, caller: str, message: str, **fields: Any) -> str:
    """One go-log (zap console) line: ``ts\\tLEVEL\\tlogger\\tcaller\\tmessage\\t{fields}``."""
    line = f"{ts_golog()}\t{level}\t{logger}\t{caller}\t{message}"
    if fields:
        line += "\t" + json.dumps(fields, separators=(", ", ": "))
    return line


def emit(line: str, stream: Any = None) -> None:
    out = stream or sys.stdout
    with _OUT_LOCK:
        try:
            out.write(line + "\n")
            out.flush()
        except (OSError, ValueError):
            pass


def tlog(level: str, target: str, message: str, **fields: Any) -> None:
    emit(tracing_line(level, target, message, **fields))


def glog(level: str, logger: str, caller: str, message: str, **fields: Any) -> None:
    emit(golog_line(level, logger, caller, message, **fields))


def install_exit_on_signals(on_signal: Any = None) -> None:
    """SIGTERM/SIGINT/SIGHUP: run ``on_signal(name)`` then exit 0 at once."""

    def handler(signum: int, _frame: Any) -> None:
        name = signal.Signals(signum).name
        if on_signal is not None:
            with contextlib.suppress(Exception):
                on_signal(name)
        with _OUT_LOCK:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            except (OSError, ValueError):
                pass
        os._exit(0)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, handler)


def split_addr(addr: str, default_port: int) -> tuple[str, int]:
    addr = addr.strip()
    for prefix in ("http://", "https://"):
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
