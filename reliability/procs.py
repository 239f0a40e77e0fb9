"""The real processes under trial: `vastui sim serve` and `vastui --engine-only`.

Everything runs in one work directory (state, config, logs, the database) with its own XDG
directories, so a trial never touches the operator's ~/.local/state or ~/.config.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

SIM_KEY = "sim-key"  # `vastui sim serve --api-key` default
URL_LINE = re.compile(r"(https?://[^\s)]+)")
CLOCK_LINE = re.compile(r"^vastui sim: VASTUI_SIM_CLOCK=(\S+)\s*$")
SIM_CLOCK_ENV = "VASTUI_SIM_CLOCK"  # vastui/engine/runtime.py sim_clock()


def venv_bin(name: str) -> Path:
    """A console script next to this Python (the project's .venv), else on PATH."""
    here = Path(sys.executable).parent / name
    if here.exists():
        return here
    from shutil import which

    found = which(name)
    if found is None:
        raise SystemExit(f"reliability: {name} not found next to {sys.executable} or on PATH")
    return Path(found)


@dataclass
class Workdir:
    root: Path

    def __post_init__(self) -> None:
        for sub in ("state", "config", "cache", "logs"):
            (self.root / sub).mkdir(parents=True, exist_ok=True, mode=0o700)

    @property
    def db(self) -> Path:
        return self.root / "state" / "vastui.db"  # where the systemd unit keeps it

    @property
    def config(self) -> Path:
        return self.root / "config" / "engine.toml"

    def log(self, name: str) -> Path:
        return self.root / "logs" / name

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment of every child: its own XDG dirs, no crash points unless asked."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("VASTUI_CRASH")}
        env.update(
            VASTUI_STATE_DIR=str(self.root / "state"),
            XDG_STATE_HOME=str(self.root / "state"),
            XDG_CONFIG_HOME=str(self.root / "config"),
            XDG_CACHE_HOME=str(self.root / "cache"),
            PYTHONUNBUFFERED="1",
        )
        env.pop("VASTUI_CONFIG", None)
        env.update(extra or {})
        return env


# -- the served cloud ----------------------------------------------------------------------


def serve_flags(vastui: Path) -> set[str]:
    """The options this vastui's `sim serve` knows (they grew over time)."""
    done = subprocess.run(
        [str(vastui), "sim", "serve", "--help"], capture_output=True, text=True, check=False
    )
    return set(re.findall(r"(--[a-z][a-z-]+)", done.stdout))


@dataclass
class Sim:
    proc: subprocess.Popen[str]
    url: str
    clock: str  # VASTUI_SIM_CLOCK as the cloud printed it: every engine runs on its time
    lines: list[str]
    config: dict[str, Any]  # what --write-config wrote (parsed), {} if not supported
    log: Path

    def stop(self) -> None:
        stop_process(self.proc, grace=15.0)


def start_sim(
    wd: Workdir,
    *,
    seed: int,
    speed: float,
    faults: str,
    machine_fault_rate: float | None,
    timeout: float = 60.0,
) -> Sim:
    vastui = venv_bin("vastui")
    flags = serve_flags(vastui)
    cmd = [str(vastui), "sim", "serve", "--port", "0", "--seed", str(seed)]
    cmd += ["--speed", f"{speed:g}", "--faults", faults, "--api-key", SIM_KEY]
    written = wd.root / "config" / "sim-written.toml"
    if "--write-config" in flags:
        cmd += ["--write-config", str(written)]
    if machine_fault_rate is not None and "--machine-fault-rate" in flags:
        cmd += ["--machine-fault-rate", f"{machine_fault_rate:g}"]
    log = wd.log("sim.log")
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=wd.env(),
        start_new_session=True,
    )  # fmt: skip
    lines: list[str] = []
    url, clock = _wait_for_start(proc, lines, timeout, wrote="--write-config" in flags)
    # The rest of its output goes to its log, read by a thread so the pipe never fills.
    _drain(proc.stdout, log, lines)
    config: dict[str, Any] = {}
    if written.exists():
        config = tomllib.loads(written.read_text(encoding="utf-8"))
    return Sim(proc, url, clock, lines, config, log)


def _wait_for_start(
    proc: subprocess.Popen[str], lines: list[str], timeout: float, *, wrote: bool
) -> tuple[str, str]:
    """Read the cloud's first lines (vastsim/server.py serve_cloud): its URL, its clock
    (``vastui sim: VASTUI_SIM_CLOCK=wall0,start,speed``) and, when asked, the config written
    (said last)."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    url = clock = None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line.rstrip("\n"))
        match = URL_LINE.search(line)
        if match and "serving" in line:
            url = match.group(1)
        found = CLOCK_LINE.match(line)
        if found:
            clock = found.group(1)
        if url and clock and (not wrote or "wrote" in line):
            return url, clock
    stop_process(proc)
    what = "did not start" if url is None else "printed no VASTUI_SIM_CLOCK line"
    raise SystemExit(f"reliability: `vastui sim serve` {what}:\n" + "\n".join(lines[-20:]))


def _drain(stream: TextIO | None, path: Path, lines: list[str]) -> None:
    if stream is None:
        return

    def run() -> None:
        with path.open("a", encoding="utf-8") as out:
            out.write("\n".join(lines) + "\n")
            for line in stream:
                out.write(line)
                out.flush()

    threading.Thread(target=run, daemon=True).start()


# -- the engine's config --------------------------------------------------------------------


@dataclass
class FleetSpec:
    """What the trials ask of the fleet (the rest of the config comes from the served cloud)."""

    name: str = "trial"
    target: int = 3
    max_cost_per_proof: float = 0.05  # the sim's market: several offers viable, not all
    max_total_dph: float = 20.0
    max_concurrent_benchmarks: int = 3
    extra: dict[str, dict[str, Any]] = field(default_factory=dict)


# The engine's own timeout for one Vast request (config [vast] timeout_s). Shorter than the
# default 30 s: the served cloud is local, and a create answered after the timeout (the heavy
# profile's lost-timeout) holds the engine's step this long, hours of the cloud's time at 360x.
VAST_TIMEOUT = 10.0


def engine_config(
    sim: Sim, spec: FleetSpec, api_url: str | None = None
) -> dict[str, dict[str, Any]]:
    """The served cloud's written config with the trial's fleet. Deadlines and proving keep
    their defaults: the engine times them on the cloud's clock (VASTUI_SIM_CLOCK).
    ``api_url``: where the engine reaches the API, if not the cloud's own address."""
    config: dict[str, dict[str, Any]] = {k: dict(v) for k, v in sim.config.items()}
    config.setdefault("vast", {})["api_url"] = api_url or sim.url
    config["vast"].setdefault("timeout_s", VAST_TIMEOUT)
    config.setdefault("fleet", {}).update(
        name=spec.name,
        target_workers=spec.target,
        max_cost_per_proof=spec.max_cost_per_proof,
        max_total_dph=spec.max_total_dph,
        max_concurrent_benchmarks=spec.max_concurrent_benchmarks,
    )
    for section, values in spec.extra.items():
        config.setdefault(section, {}).update(values)
    return config


def to_toml(config: Mapping[str, Mapping[str, Any]]) -> str:
    """Flat sections of scalars (all a vastui config has), as TOML."""
    out = []
    for section, values in config.items():
        out.append(f"[{section}]")
        for key, value in values.items():
            if isinstance(value, bool):
                out.append(f"{key} = {'true' if value else 'false'}")
            elif isinstance(value, int | float | str):
                out.append(f"{key} = {json.dumps(value)}")
            elif isinstance(value, dict):
                continue  # tables of tables (ui.keymap): not needed by an engine
        out.append("")
    return "\n".join(out)


def write_config(path: Path, config: Mapping[str, Mapping[str, Any]]) -> None:
    path.write_text(to_toml(config), encoding="utf-8")
    path.chmod(0o600)


# -- the engine ------------------------------------------------------------------------------


@dataclass
class Engine:
    proc: subprocess.Popen[bytes]
    started_at: float  # wall time
    log: Path
    log_offset: int  # where this run's output starts in the log
    crash_points: str

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def output(self) -> str:
        with self.log.open("rb") as f:
            f.seek(self.log_offset)
            return f.read().decode(errors="replace")

    def crash_hit(self) -> str | None:
        """The crash point that killed it (its own stderr line), if one did."""
        match = re.search(r"crash point (\S+): SIGKILL", self.output())
        return match.group(1) if match else None

    def kill(self, sig: int = signal.SIGKILL) -> int | None:
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


def engine_command(wd: Workdir, url: str, target: int | None = None) -> list[str]:
    cmd = [str(venv_bin("vastui")), "--engine-only", "--api-url", url]
    cmd += ["--db", str(wd.db), "--config", str(wd.config)]
    if target is not None:
        cmd += ["--target-workers", str(target)]
    return cmd


def start_engine(
    wd: Workdir,
    cmd: list[str],
    *,
    sim_clock: str,
    crash_points: str = "",
    crash_seed: int = 0,
    extra_env: Mapping[str, str] | None = None,
    umask: int | None = None,
) -> Engine:
    # The cloud's clock: deadlines on the instances' time, a step every 0.5 s
    # (vastui/engine/runtime.py sim_clock, scale_settings).
    env = {"VAST_API_KEY": SIM_KEY, SIM_CLOCK_ENV: sim_clock, **(extra_env or {})}
    if crash_points:
        env.update(VASTUI_CRASH_POINTS=crash_points, VASTUI_CRASH_SEED=str(crash_seed))
    log = wd.log("engine.log")
    with log.open("ab") as out:
        offset = out.tell()
        out.write(f"=== {time.strftime('%H:%M:%S')} start {crash_points or 'unarmed'}\n".encode())
        offset = out.tell()
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, env=wd.env(env), start_new_session=True,
            preexec_fn=(lambda: os.umask(umask)) if umask is not None else None,
        )  # fmt: skip
    return Engine(proc, time.time(), log, offset, crash_points)


def stop_process(proc: subprocess.Popen[Any], grace: float = 10.0) -> int | None:
    """SIGTERM, then SIGKILL after ``grace`` seconds; its return code."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
    return proc.wait()
