"""Configuration: TOML with strict validation, defaults from the original vast-manager.

Location: `$VASTUI_CONFIG`, else `$XDG_CONFIG_HOME/vastui/config.toml` (`~/.config/...`).
A missing file means defaults. An unknown key or a wrong type is a `ConfigError` whose one-line
message names the file, the key and what was expected. The Vast API key never comes from here.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import tomllib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vastui.pricing import required_rate

DEFAULT_FILTER = (
    "disk_space>=250 dph<=0.9 gpu_ram>12.5 cpu_ram>=240 cpu_cores>25 inet_down>100 cuda_vers>=13.0"
)
# What `make image` builds from worker-image/Dockerfile (curio, cuzk-daemon, cuzk-bench and
# the vastui scripts); push it where your Vast account can pull it and set fleet.image.
DEFAULT_IMAGE = "ghcr.io/vastui/curio-cuzk-worker:e0294b0f-cuda13.0.2"
LABEL_PREFIX = "vastui"


class ConfigError(Exception):
    """One line: file, key, expectation."""


@dataclass
class VastSection:
    api_url: str = "https://console.vast.ai"
    timeout_s: float = 30.0
    max_attempts: int = 5


@dataclass
class OffersSection:
    filter: str = DEFAULT_FILTER
    order: str = "dph"
    limit: int = 500
    refresh_s: float = 120.0


@dataclass
class FleetSection:
    name: str = "main"
    image: str = DEFAULT_IMAGE
    disk_gb: float = 250.0
    max_cost_per_proof: float = 0.008  # $/proof; min_rate = ceil(dph_total / this)
    target_workers: int = 0
    max_total_dph: float = 5.0
    max_concurrent_benchmarks: int = 2
    bench_proofs: int = 12
    auto_ban_days: float = 30.0  # automatic bans expire; 0 keeps them forever


@dataclass
class DeadlinesSection:
    # Minutes; the first three are the original vast-manager's constants.
    first_report_min: float = 15.0
    setup_min: float = 30.0  # whole setup stage, once the worker has reported
    paramfetch_min: float = 90.0
    benchmark_min: float = 45.0
    loading_min: float = 30.0
    exited_grace_min: float = 5.0


@dataclass
class SshSection:
    key_path: str = ""  # empty: vastui's own ed25519 key in its state directory
    lotus_api: str = "127.0.0.1:1234"  # controller-side address the worker's :1234 forwards to
    # curio's cluster database on the controller side: YSQL (the worker's 127.0.0.1:5433) and
    # YCQL (127.0.0.1:9042); empty: not forwarded (the worker cannot run curio then)
    curio_db: str = "127.0.0.1:5433"
    curio_db_cql: str = "127.0.0.1:9042"
    connect_timeout_s: float = 10.0


@dataclass
class CurioSection:
    """How the prove stage runs curio (worker-image/entrypoint.sh). The database password is not
    here: $VASTUI_CURIO_DB_PASSWORD or the file curio-db-password next to this config."""

    layers: str = ""  # the operator's layers, applied before vastui's own (comma-separated)
    proofshare: bool = True  # vastui's layer sets [Subsystems] EnableProofShare
    max_pending: int = 10  # [Cuzk] MaxPending: proofs in flight; the benchmark measures at this
    prove_timeout: str = "30m"  # [Cuzk] ProveTimeout
    db_name: str = "yugabyte"
    db_user: str = "yugabyte"


@dataclass
class ProvingSection:
    """Production is measured, not assumed: cuzk's counters are read over SSH."""

    poll_s: float = 60.0  # seconds (engine clock) between reads of a worker's counters
    window_min: float = 60.0  # a measured rate below min_rate over this long destroys it
    max_failures: int = 3  # failed proofs in the window that destroy it
    unresponsive_min: float = 5.0  # no answer from the daemon for this long destroys it
    strikes_to_ban: int = 2  # strikes (within fleet.auto_ban_days) that ban the machine


@dataclass
class UiSection:
    theme: str = "textual-dark"
    keymap: dict[str, str] = field(default_factory=dict)


@dataclass
class Config:
    vast: VastSection = field(default_factory=VastSection)
    offers: OffersSection = field(default_factory=OffersSection)
    fleet: FleetSection = field(default_factory=FleetSection)
    deadlines: DeadlinesSection = field(default_factory=DeadlinesSection)
    ssh: SshSection = field(default_factory=SshSection)
    curio: CurioSection = field(default_factory=CurioSection)
    proving: ProvingSection = field(default_factory=ProvingSection)
    ui: UiSection = field(default_factory=UiSection)
    path: Path | None = None  # where it was read from (None: defaults only)

    def min_rate_for(self, dph_total: float) -> float:
        """Proofs/hour a machine must reach for its price: ceil($/h ÷ max $/proof)."""
        return required_rate(dph_total, self.fleet.max_cost_per_proof)


_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true or false"}


def _check_value(path: Path, key: str, expected: Any, value: Any) -> Any:
    origin = typing.get_origin(expected)
    if origin is dict:
        _, value_type = typing.get_args(expected)
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: key '{key}': expected a table, got {describe_value(value)}")
        return {k: _check_value(path, f"{key}.{k}", value_type, v) for k, v in value.items()}
    if origin in (typing.Union, types.UnionType):
        raise AssertionError("unions are not used in config sections")
    if expected is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            if not math.isfinite(value):
                raise ConfigError(f"{path}: key '{key}': expected a finite number")
            return float(value)
    elif expected is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif isinstance(value, expected):
        return value
    raise ConfigError(
        f"{path}: key '{key}': expected {_TYPE_NAMES[expected]}, got {describe_value(value)}"
    )


def describe_value(value: Any) -> str:
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, str):
        return f"string {value[:40]!r}"
    if isinstance(value, int | float):
        return f"number {value}"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    return type(value).__name__


def _build_section(path: Path, name: str, cls: type, data: Any) -> Any:
    if not isinstance(data, dict):
        raise ConfigError(
            f"{path}: key '{name}': expected a table [{name}], got {describe_value(data)}"
        )
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in data.items():
        if key not in known:
            raise ConfigError(
                f"{path}: unknown key '{name}.{key}' (known: {', '.join(sorted(known))})"
            )
        kwargs[key] = _check_value(path, f"{name}.{key}", hints[key], value)
    return cls(**kwargs)


_VALIDATORS: list[tuple[str, typing.Callable[[Config], bool], str]] = [
    ("fleet.max_cost_per_proof", lambda c: c.fleet.max_cost_per_proof > 0, "a number > 0"),
    ("fleet.disk_gb", lambda c: c.fleet.disk_gb >= 10, "a number >= 10"),
    ("fleet.target_workers", lambda c: c.fleet.target_workers >= 0, "an integer >= 0"),
    ("fleet.max_total_dph", lambda c: c.fleet.max_total_dph >= 0, "a number >= 0"),
    ("fleet.max_concurrent_benchmarks", lambda c: c.fleet.max_concurrent_benchmarks >= 1, ">= 1"),
    ("fleet.auto_ban_days", lambda c: c.fleet.auto_ban_days >= 0, "a number >= 0"),
    ("fleet.bench_proofs", lambda c: c.fleet.bench_proofs >= 1, "an integer >= 1"),
    ("fleet.name", lambda c: c.fleet.name.replace("-", "").isalnum(), "letters, digits and -"),
    (
        "vast.api_url",
        lambda c: c.vast.api_url.startswith(("http://", "https://")),
        "an http(s) URL",
    ),
    ("vast.max_attempts", lambda c: 1 <= c.vast.max_attempts <= 20, "an integer from 1 to 20"),
    ("offers.limit", lambda c: 1 <= c.offers.limit <= 10_000, "an integer from 1 to 10000"),
    ("offers.refresh_s", lambda c: c.offers.refresh_s >= 5, "a number >= 5 (seconds)"),
    ("vast.timeout_s", lambda c: 1 <= c.vast.timeout_s <= 600, "a number from 1 to 600"),
    ("ssh.connect_timeout_s", lambda c: 1 <= c.ssh.connect_timeout_s <= 120, "1 to 120"),
    # A deadline of 0 would destroy (and ban) every new worker at once.
    ("deadlines.loading_min", lambda c: c.deadlines.loading_min >= 1, "a number >= 1 (minutes)"),
    ("deadlines.first_report_min", lambda c: c.deadlines.first_report_min >= 1, "a number >= 1"),
    ("deadlines.setup_min", lambda c: c.deadlines.setup_min >= 1, "a number >= 1 (minutes)"),
    ("deadlines.paramfetch_min", lambda c: c.deadlines.paramfetch_min >= 1, "a number >= 1"),
    ("deadlines.benchmark_min", lambda c: c.deadlines.benchmark_min >= 1, "a number >= 1"),
    ("deadlines.exited_grace_min", lambda c: c.deadlines.exited_grace_min >= 0, "a number >= 0"),
    ("curio.max_pending", lambda c: 1 <= c.curio.max_pending <= 1000, "an integer from 1 to 1000"),
    ("curio.prove_timeout", lambda c: _is_duration(c.curio.prove_timeout), "a duration like 30m"),
    ("curio.layers", lambda c: _is_layer_list(c.curio.layers), "layer names, comma-separated"),
    ("curio.db_name", lambda c: _is_word(c.curio.db_name), "letters, digits, _ and -"),
    ("curio.db_user", lambda c: _is_word(c.curio.db_user), "letters, digits, _ and -"),
    ("ssh.curio_db", lambda c: _is_addr(c.ssh.curio_db, empty=True), "host:port or empty"),
    ("ssh.curio_db_cql", lambda c: _is_addr(c.ssh.curio_db_cql, empty=True), "host:port or empty"),
    ("ssh.lotus_api", lambda c: _is_addr(c.ssh.lotus_api), "host:port"),
    ("proving.poll_s", lambda c: 5 <= c.proving.poll_s <= 3600, "a number from 5 to 3600"),
    ("proving.window_min", lambda c: c.proving.window_min >= 5, "a number >= 5 (minutes)"),
    ("proving.max_failures", lambda c: c.proving.max_failures >= 1, "an integer >= 1"),
    ("proving.unresponsive_min", lambda c: c.proving.unresponsive_min >= 1, "a number >= 1"),
    ("proving.strikes_to_ban", lambda c: c.proving.strikes_to_ban >= 1, "an integer >= 1"),
]


def _is_duration(text: str) -> bool:
    return re.fullmatch(r"(\d+h)?(\d+m)?(\d+s)?", text) is not None and text != ""


def _is_word(text: str) -> bool:
    return re.fullmatch(r"[A-Za-z0-9_-]{1,63}", text) is not None


def _is_layer_list(text: str) -> bool:
    return text == "" or all(_is_word(part.strip()) for part in text.split(","))


def _is_addr(text: str, empty: bool = False) -> bool:
    if text == "":
        return empty
    host, _, port = text.rpartition(":")
    return bool(re.fullmatch(r"[A-Za-z0-9.\-]+", host)) and port.isdigit() and 0 < int(port) < 65536


def default_config_path() -> Path:
    override = os.environ.get("VASTUI_CONFIG")
    if override:
        return Path(override).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "vastui" / "config.toml"


def load_config(path: Path | None = None) -> Config:
    """Read and validate; a missing default file is fine, a missing explicit file is not."""
    explicit = path is not None or bool(os.environ.get("VASTUI_CONFIG"))
    path = path or default_config_path()
    if not path.exists():
        if explicit:
            raise ConfigError(f"{path}: config file not found")
        return Config()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from None
    sections = {f.name: f for f in dataclasses.fields(Config) if f.name != "path"}
    hints = typing.get_type_hints(Config)
    kwargs: dict[str, Any] = {}
    for name, value in data.items():
        if name == "api_key" or (isinstance(value, dict) and "api_key" in value):
            raise ConfigError(
                f"{path}: key 'api_key' is not read from the config file; "
                "set VAST_API_KEY or ~/.config/vastai/vast_api_key"
            )
        if name not in sections:
            raise ConfigError(
                f"{path}: unknown key '{name}' (known sections: {', '.join(sorted(sections))})"
            )
        kwargs[name] = _build_section(path, name, hints[name], value)
    config = Config(**kwargs, path=path)
    for key, ok, expected in _VALIDATORS:
        if not ok(config):
            raise ConfigError(f"{path}: key '{key}': expected {expected}")
    return config


class ApiKeyError(Exception):
    pass


def vast_api_key_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "vastai" / "vast_api_key"


def load_api_key() -> tuple[str, str]:
    """(key, where it came from). Order: $VAST_API_KEY, the vastai CLI's key file, ~/.vast_api_key.

    The key itself is never logged or printed; only its source is.
    """
    env = os.environ.get("VAST_API_KEY", "").strip()
    if env:
        return _checked_key(env, "$VAST_API_KEY"), "$VAST_API_KEY"
    for candidate in (vast_api_key_path(), Path.home() / ".vast_api_key"):
        try:
            text = candidate.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            continue
        except (OSError, UnicodeDecodeError) as exc:
            raise ApiKeyError(f"cannot read Vast API key file {candidate}: {exc}") from None
        if text:
            return _checked_key(text, str(candidate)), str(candidate)
    raise ApiKeyError(
        f"no Vast API key: set VAST_API_KEY or write it to {vast_api_key_path()} "
        "(or use --demo for the simulated cloud)"
    )


def _checked_key(key: str, source: str) -> str:
    """A key that can go in an HTTP header; a bad one is named by source, never echoed."""
    if not key.isascii() or any(ch.isspace() or not ch.isprintable() for ch in key):
        raise ApiKeyError(f"Vast API key from {source} is malformed (spaces or odd characters)")
    return key


def curio_db_password_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "vastui" / "curio-db-password"


def load_curio_db_password() -> str | None:
    """The password of curio's database for the workers: $VASTUI_CURIO_DB_PASSWORD, else the
    file curio-db-password; None means curio's own default. Never printed or stored."""
    env = os.environ.get("VASTUI_CURIO_DB_PASSWORD")
    if env:
        return env
    path = curio_db_password_path()
    try:
        text = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the curio database password: {exc}") from None
    return text or None


def state_dir() -> Path:
    """Where vastui keeps its database, logs and own SSH key."""
    override = os.environ.get("VASTUI_STATE_DIR")
    if override:
        return Path(override).expanduser()
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "vastui"


def default_db_path(demo: bool = False) -> Path:
    return state_dir() / ("demo.db" if demo else "vastui.db")
