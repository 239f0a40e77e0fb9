"""The systemd unit as written (deploy/vastui-engine.service), run the way systemd runs it.

No systemd is needed: the unit's ExecStart, Environment and UMask are read from the file, its
installation paths mapped into the trial's work directory, and `Restart=on-failure` played out:
SIGKILL, wait RestartSec, start the same command line again; the new engine must take its lease
at once. `systemd-analyze verify` checks the file itself when it is installed.
"""

from __future__ import annotations

import shlex
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reliability import invariants as inv
from reliability.procs import SIM_KEY, start_engine, venv_bin
from reliability.trial import Trial

UNIT = Path(__file__).resolve().parents[1] / "deploy" / "vastui-engine.service"


@dataclass
class Unit:
    values: dict[str, list[str]] = field(default_factory=dict)  # "Section.Key" → values

    def get(self, key: str, default: str | None = None) -> str | None:
        found = self.values.get(key)
        return found[-1] if found else default

    def all(self, key: str) -> list[str]:
        return list(self.values.get(key, []))


def parse_unit(text: str) -> Unit:
    """systemd's unit syntax, as much as the check needs: sections, repeated keys, comments,
    backslash continuations."""
    unit = Unit()
    section = ""
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.strip()
        pending = ""
        if line.endswith("\\"):
            pending = line[:-1].rstrip() + " "
            continue
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            continue
        key, sep, value = line.partition("=")
        if sep:
            unit.values.setdefault(f"{section}.{key.strip()}", []).append(value.strip())
    return unit


def installed_paths(trial: Trial) -> dict[str, str]:
    """Where the unit's installation paths are in this trial (longest first)."""
    state = str(trial.wd.root / "state")
    return {
        "/opt/vastui/venv/bin/": str(venv_bin("vastui").parent) + "/",
        "/etc/vastui/config.toml": str(trial.wd.config),
        "/var/lib/vastui": state,
    }


def substitute(text: str, paths: dict[str, str]) -> str:
    for old in sorted(paths, key=len, reverse=True):
        text = text.replace(old, paths[old])
    return text


def command_and_env(unit: Unit, paths: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    exec_start = unit.get("Service.ExecStart")
    if not exec_start:
        raise SystemExit(f"{UNIT}: no ExecStart")
    cmd = shlex.split(substitute(exec_start.lstrip("-@+!:"), paths))
    env: dict[str, str] = {}
    for line in unit.all("Service.Environment"):
        for item in shlex.split(line):
            key, _, value = item.partition("=")
            env[key] = substitute(value, paths)
    env["VAST_API_KEY"] = SIM_KEY  # what EnvironmentFile= carries on a real host
    return cmd, env


def verify(unit_path: Path, paths: dict[str, str], out_dir: Path) -> str | None:
    """`systemd-analyze verify` of the unit with its paths mapped; its complaints, or None
    when it has none (or is not installed)."""
    copy = out_dir / unit_path.name
    copy.write_text(substitute(unit_path.read_text(encoding="utf-8"), paths), encoding="utf-8")
    try:
        done = subprocess.run(
            ["systemd-analyze", "verify", "--man=no", str(copy)],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = (done.stdout + done.stderr).strip()
    return text or None if done.returncode == 0 else text or f"status {done.returncode}"


def run(trial: Trial, restarts: int = 3) -> dict[str, Any]:
    """Start the unit's command, SIGKILL it ``restarts`` times (restarting after RestartSec),
    then stop it with SIGTERM. Needs the trial's served cloud; the fleet is the trial's."""
    unit = parse_unit(UNIT.read_text(encoding="utf-8"))
    paths = installed_paths(trial)
    cmd, env = command_and_env(unit, paths)
    umask = int(unit.get("Service.UMask", "0022") or "0022", 8)
    restart_sec = float((unit.get("Service.RestartSec", "0.1") or "0.1").rstrip("s"))
    burst = int(unit.get("Unit.StartLimitBurst", "5") or "5")
    complaints = verify(UNIT, paths, trial.wd.root / "config")
    takeovers: list[float] = []
    starts: list[float] = []
    for attempt in range(restarts + 1):
        started = time.monotonic()
        # Against the served cloud, on its clock (as an EnvironmentFile= line would carry it).
        assert trial.sim is not None
        trial.engine = start_engine(
            trial.wd, cmd, sim_clock=trial.sim.clock, extra_env=env, umask=umask
        )
        trial.engine_up_since = time.time()
        starts.append(started)
        if not trial.wait_lease(timeout=20.0):
            tail = trial.engine.output().strip().splitlines()[-1:] or ["no output"]
            trial.record([inv.Violation("restart_refused", f"unit start {attempt}", tail[0][:200])])
            break
        takeovers.append(time.monotonic() - started)
        trial.wait(3.0)
        if attempt < restarts:
            trial.kill_engine(signal.SIGKILL)
            time.sleep(restart_sec)  # systemd waits RestartSec, then starts it again
    modes = _modes(trial)
    code = trial.kill_engine(signal.SIGTERM) if trial.engine and trial.engine.alive() else None
    if code != 0:
        trial.record([inv.Violation("unclean_stop", "unit sigterm", f"status {code}")])
    for path, mode in modes.items():
        if mode & 0o077:
            trial.record([inv.Violation("file_mode", f"file {path}", f"mode {mode:04o}")])
    return {
        "exec_start": shlex.join(cmd),
        "umask": f"{umask:04o}",
        "restart_sec": restart_sec,
        "start_limit_burst": burst,
        "starts": len(starts),
        "lease_takeover_s": [round(t, 2) for t in takeovers],
        "sigterm_status": code,
        "file_modes": {p: f"{m:04o}" for p, m in modes.items()},
        "systemd_analyze_verify": complaints or "ok",
    }


def _modes(trial: Trial) -> dict[str, int]:
    state = trial.wd.root / "state"
    out = {}
    for path in [state / "vastui.db", state / "engine.log", state / "id_ed25519"]:
        if path.exists():
            out[path.name] = path.stat().st_mode & 0o777
    return out
