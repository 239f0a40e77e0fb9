"""The config file's schema: TOML with strict validation, defaults from the original vast-manager.

Location: `$VASTUI_CONFIG`, else `$XDG_CONFIG_HOME/vastui/config.toml` (`~/.config/...`;
paths.py). A missing file means defaults. An unknown key or a wrong type is a `ConfigError` whose
one-line message names the file, the key and what was expected. The Vast API key and curio's
database password never come from here (secrets.py).

One file: the schema, defaults and validation of one TOML file, so a key's type, default and
error message are found together.
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

from vastui.config.paths import default_config_path
from vastui.domain.plan import disk_need_gb
from vastui.pricing import min_rate
from vastui.vast.query import MAX_FILTER_CHARS, MAX_ORDER_CHARS

# The original vast-manager's filter, plus what the worker image needs of the host: a driver
# for CUDA 13 (>= 580; cuda_vers>=13.0 implies it, driver_version says it) and AVX (curio is built
# with GOAMD64=v3, which needs AVX2: Vast exposes only has_avx, so the worker checks the rest).
DEFAULT_FILTER = (
    "disk_space>=250 dph<=0.9 gpu_ram>12.5 cpu_ram>=240 cpu_cores>25 inet_down>100 cuda_vers>=13.0"
    " driver_version>=580.0.0 has_avx=true"
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
    # The account's credit is read this often (seconds; the current-user endpoint): metrics,
    # the status, [alerts] min_credit.
    credit_poll_s: float = 300.0


@dataclass
class OffersSection:
    filter: str = DEFAULT_FILTER
    order: str = "dph"
    limit: int = 500
    refresh_s: float = 120.0
    # Levers of the ranking, each kept off unless the economics bench shows it pays
    # (bench/README.md): the set-up a rental bills before it proves (parameter download at the
    # offer's inet_down, the benchmark) spread over this many hours of its life (0: ignored);
    # a GPU model's measured median blended with the built-in prior by n/(n+2).
    setup_lifetime_h: float = 0.0
    prior_blend: bool = False


@dataclass
class FleetSection:
    name: str = "main"
    image: str = DEFAULT_IMAGE
    disk_gb: float = 250.0
    max_cost_per_proof: float = 0.008  # $/proof; min_rate = ceil(dph_total / this)
    # What a FIL is worth to the operator, in dollars: the market pays in FIL, Vast bills in
    # dollars. With it the automatic target decides by margin and the status shows it; 0: not
    # known (the target is bounded by max_cost_per_proof alone). No price is fetched.
    fil_usd: float = 0.0
    # A number of workers to keep, or "auto" in the file: the fleet follows the cluster's work
    # (vastui/engine/autoscale.py) between min_workers and max_workers, aiming at
    # target_utilisation, shrinking after scale_down_after_min of idle workers (auto_target
    # says so; target_workers stays 0).
    target_workers: int = 0
    auto_target: bool = field(default=False, metadata={"derived": True})
    min_workers: int = 1
    max_workers: int = 10
    # 0.9: the economics bench's (bench/demand.py) better of 0.75 and 0.9 in $/paid proof
    target_utilisation: float = 0.9
    scale_down_after_min: float = 30.0
    # The warm pool (vastui/engine/pool.py): a good worker the fleet gives up is stopped, not
    # destroyed (Vast keeps its disk and bills storage), when its storage over the expected
    # idle time costs less than a new rental's set-up; a scale-up starts it before renting.
    # At most warm_pool_max stopped at once (0: none), each destroyed after warm_pool_max_h;
    # a start Vast queues (resources_unavailable) is given warm_pool_start_min.
    warm_pool_max: int = 2
    warm_pool_idle_h: float = 6.0
    warm_pool_max_h: float = 48.0
    warm_pool_start_min: float = 10.0
    max_total_dph: float = 5.0
    max_concurrent_benchmarks: int = 2
    bench_proofs: int = 12
    # SnapDeals proofs among them: a proofshare provider cannot refuse Snap requests
    # (lib/proofsvc/provictl.go:78-90, tasks/proofshare/task_prove.go:271-289)
    bench_snap_proofs: int = 2
    auto_ban_days: float = 30.0  # automatic bans expire; 0 keeps them forever
    # The same failure (stage, kind, first error line without ids and numbers) on this many
    # different machines within the window is the fleet's (image, configuration, controller),
    # not theirs: no strikes or bans, provisioning paused. 0 turns the check off.
    fleet_failure_machines: int = 3
    fleet_failure_window_min: float = 60.0
    # Dollars a UTC day may spend (as `vastui status` counts today: what Vast bills every
    # worker since midnight UTC, storage, GPU time and bandwidth). At the cap nothing more is
    # rented that day; nothing is destroyed for it. 0: no daily cap (max_total_dph still caps
    # the hourly rate).
    max_daily_spend: float = 0.0
    # A breaker on renting: more rents than this per target slot within an hour (the account's
    # lists lagging, a market that refuses every image) stops renting with a reason and an
    # alert until the hour's count falls. 0 turns it off.
    max_rents_per_slot_hour: int = 4


@dataclass
class DeadlinesSection:
    # Minutes; the first three are the original vast-manager's constants.
    first_report_min: float = 15.0
    setup_min: float = 30.0  # whole setup stage, once the worker has reported
    paramfetch_min: float = 90.0
    benchmark_min: float = 45.0
    loading_min: float = 30.0
    exited_grace_min: float = 5.0
    # A worker waiting this long for the controller's tunnel (Lotus API, curio's database) to
    # prove is destroyed: the controller's fault, never a strike on the machine.
    tunnel_min: float = 60.0


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
    # Workers listen on 127.0.0.1:<base + runner id>: their identity in curio's cluster
    # (vastui/engine/identity.py)
    listen_port_base: int = 12400
    db_name: str = "yugabyte"
    db_user: str = "yugabyte"
    # The engine reads curio's cluster database at [ssh] curio_db (vastui/engine/cluster.py):
    # the work waiting and claimed, each worker's tasks and PSProve results; it cordons a
    # worker before a planned destroy and frees a destroyed worker's tasks. false: never.
    read_cluster: bool = True
    # The file names curio's cluster ([ssh] curio_db or curio_db_cql, [curio] read_cluster,
    # db_user or db_name): nothing answering there is an outage, never "no cluster"
    # (vastui/engine/runtime.py cluster_configured).
    cluster_named: bool = field(default=False, metadata={"derived": True})


@dataclass
class ProvingSection:
    """Production is measured, not assumed: cuzk's counters are read over SSH."""

    poll_s: float = 60.0  # seconds (engine clock) between reads of a worker's counters
    window_min: float = 60.0  # a measured rate below min_rate over this long destroys it
    max_failures: int = 3  # failed proofs in the window that destroy it
    unresponsive_min: float = 5.0  # no answer from the daemon for this long destroys it
    # No SSH connection to a proving worker for this long, while its fellows answer: destroyed
    # (a strike). When none answers, the controller is cut off: nobody is destroyed for it.
    unreachable_min: float = 30.0
    strikes_to_ban: int = 2  # strikes (within fleet.auto_ban_days) that ban the machine
    # A proof at MaxPending in flight must finish within ProveTimeout / (1 + this): curio's
    # deadline counts the daemon's queue (lib/cuzk/client.go:116-122)
    deadline_margin: float = 0.2
    max_overdue: int = 2  # proofs past curio's ProveTimeout in the window that destroy it
    # A planned destroy of a healthy proving worker (surplus, below its min_rate) cordons its
    # curio machine first and destroys it once it holds no task, or after this many minutes;
    # 0: the time its held proofs need at its rate, at most the market's deadline less the
    # margin (vastui/engine/drain.py)
    drain_min: float = 0.0
    market_deadline_min: float = 45.0  # the proofshare market's (Snark-Market.md:169)
    drain_margin_min: float = 5.0


@dataclass
class BidsSection:
    """Interruptible (bid) rentals: vastui/engine/bidding.py. ``mode``: "off" rents on
    demand only; "auto" rents each offer on demand or as a bid, whichever has the lower
    expected $/proof with the interruptions it risks."""

    mode: str = "off"
    # A bid is rented only when its expected $/proof is this share below on demand's: what
    # the model leaves out (an outbid past the cap ends in a new rental and benchmark) and
    # what it cannot know (other bidders) are paid from this margin.
    min_saving: float = 0.2
    margin: float = 0.15  # the first bid: the going min_bid plus this share
    raise_step: float = 0.15  # outbid: bid the going price plus this share (up to the cap)
    # An outbid worker waits this long for its bid to win again (a new rental costs a
    # benchmark; bench/README.md, the bid sweep)
    keep_outbid_min: float = 120.0
    # Until a machine and its GPU model have a record: interruptions per running hour, and how
    # long one lasts.
    prior_interruptions_per_h: float = 0.1
    prior_outbid_h: float = 1.0
    # Proving time a resumed worker loses: setup, its daemon's restart (SRS load, PCE
    # re-extraction: a restarted daemon does not reload its PCE), and the proofs in flight.
    restart_loss_min: float = 20.0


BID_MODES = ("off", "auto")


@dataclass
class MetricsSection:
    """Prometheus metrics (vastui/metrics.py): off unless an address is given here or by
    ``--metrics``; anything but loopback must be given explicitly."""

    listen: str = ""  # e.g. "127.0.0.1:9464"


@dataclass
class AlertsSection:
    """Alerts without Prometheus (vastui/alerts.py): a JSON POST and/or a command (no shell,
    the alert as JSON on stdin), each at most once per episode and once when it clears."""

    webhook: str = ""
    command: list[str] = field(default_factory=list)
    min_credit: float = 0.0  # dollars; 0: no low-credit alert
    below_target_min: float = 15.0
    storm_bans: int = 5  # machines banned within an hour; 0: off
    storm_kills: int = 10  # workers destroyed within an hour; 0: off
    max_per_hour: int = 20
    timeout_s: float = 10.0  # per hook call


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
    bids: BidsSection = field(default_factory=BidsSection)
    metrics: MetricsSection = field(default_factory=MetricsSection)
    alerts: AlertsSection = field(default_factory=AlertsSection)
    ui: UiSection = field(default_factory=UiSection)
    path: Path | None = None  # where it was read from (None: defaults only)

    def min_rate_for(self, dph_total: float) -> float:
        """Proofs/hour a machine must reach for its price: ceil($/h ÷ max $/proof)."""
        return min_rate(dph_total, self.fleet.max_cost_per_proof)


_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true or false"}
# Integers end up in SQLite and in the workers' environment: 64-bit signed at most.
_INT_LIMIT = 2**63
# Control characters (C0, DEL, C1) have no place in a name, address or path; the offers filter
# may span lines (a TOML multi-line string), so it keeps tab, newline and carriage return.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_CONTROL_BUT_SPACE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_MULTILINE_KEYS = frozenset({"offers.filter"})
# The longest text each string key takes (an array's items and a table's values by the key
# itself): every text in the file is bounded, so none can cost a parse or a screen more than
# its use needs. The filter's bound is the query parser's (vastui/vast/query.py says why);
# paths are PATH_MAX; URLs the 2,000 characters browsers and proxies agree on; an image
# reference a registry's 255-character name, its 128-character tag and a sha256 digest;
# a command's argument a long line (Linux allows 128 KiB: not needed here).
_STRING_BOUND = 256  # a name, an address, a word: anything not listed below
_STRING_BOUNDS = {
    "offers.filter": MAX_FILTER_CHARS,
    "offers.order": MAX_ORDER_CHARS,
    "vast.api_url": 2048,
    "alerts.webhook": 2048,
    "fleet.image": 512,
    "ssh.key_path": 4096,
    "curio.layers": 1024,
    "alerts.command": 4096,
}


def _quote(key: str) -> str:
    """A key from the file as it goes in a one-line message: quoted, never raw controls."""
    short = key if len(key) <= 80 else key[:79] + "…"
    return f"'{short}'" if short.isprintable() else ascii(short)


def _check_value(path: Path, key: str, expected: Any, value: Any, base: str = "") -> Any:
    """`value` as `expected` (`base`: the schema's key of an array item or a table value)."""
    base = base or key
    origin = typing.get_origin(expected)
    if origin is list:
        (item_type,) = typing.get_args(expected)
        if not isinstance(value, list):
            raise ConfigError(
                f"{path}: key {_quote(key)}: expected an array, got {describe_value(value)}"
            )
        return [_check_value(path, f"{key}[{i}]", item_type, v, base) for i, v in enumerate(value)]
    if origin is dict:
        _, value_type = typing.get_args(expected)
        if not isinstance(value, dict):
            raise ConfigError(
                f"{path}: key {_quote(key)}: expected a table, got {describe_value(value)}"
            )
        for k in value:
            _check_length(path, f"{key}.{k}", k, _STRING_BOUND, "a name")
        return {k: _check_value(path, f"{key}.{k}", value_type, v, base) for k, v in value.items()}
    if origin in (typing.Union, types.UnionType):
        raise AssertionError("unions are not used in config sections")
    if expected is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            if not math.isfinite(value):
                raise ConfigError(f"{path}: key {_quote(key)}: expected a finite number")
            return float(value)
    elif expected is int:
        if isinstance(value, int) and not isinstance(value, bool):
            if not -_INT_LIMIT <= value < _INT_LIMIT:
                raise ConfigError(f"{path}: key {_quote(key)}: expected a 64-bit integer")
            return value
    elif isinstance(value, expected):
        if isinstance(value, str):
            _check_length(path, key, value, _STRING_BOUNDS.get(base, _STRING_BOUND), "a string")
            controls = _CONTROL_BUT_SPACE if key in _MULTILINE_KEYS else _CONTROL
            if controls.search(value) or _CONTROL.search(key):
                raise ConfigError(
                    f"{path}: key {_quote(key)}: expected a string without control characters"
                )
        return value
    raise ConfigError(
        f"{path}: key {_quote(key)}: expected {_TYPE_NAMES[expected]}, got {describe_value(value)}"
    )


def _check_length(path: Path, key: str, text: str, bound: int, what: str) -> None:
    if len(text) > bound:
        raise ConfigError(
            f"{path}: key {_quote(key)}: expected {what} of at most {bound} characters, "
            f"got {len(text)}"
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
            f"{path}: key {_quote(name)}: expected a table [{name}], got {describe_value(data)}"
        )
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls) if not f.metadata.get("derived")}
    kwargs = {}
    for key, value in data.items():
        if (name, key) == ("fleet", "target_workers") and isinstance(value, str):
            if value != "auto":  # the one string a number's key takes
                raise ConfigError(
                    f"{path}: key 'fleet.target_workers': expected an integer or \"auto\", "
                    f"got {describe_value(value)}"
                )
            kwargs["auto_target"] = True
            continue
        if key not in known:
            raise ConfigError(
                f"{path}: unknown key {_quote(f'{name}.{key}')} (known: {', '.join(sorted(known))})"
            )
        kwargs[key] = _check_value(path, f"{name}.{key}", hints[key], value)
    return cls(**kwargs)


def is_listen(value: str) -> bool:
    from vastui.metrics import MetricsError, parse_listen

    try:
        parse_listen(value)
    except MetricsError:
        return False
    return True


DISK_NEED_GB = disk_need_gb()  # vastui/domain/plan.py: the image, the parameters, the PCE files

_VALIDATORS: list[tuple[str, typing.Callable[[Config], bool], str]] = [
    # min_rate = ceil($/h ÷ this): a tiny divisor overflows it (vastui/pricing.py).
    (
        "fleet.max_cost_per_proof",
        lambda c: 1e-6 <= c.fleet.max_cost_per_proof <= 100,
        "a number > 0 (from 0.000001 to 100 $/proof)",
    ),
    ("fleet.fil_usd", lambda c: 0 <= c.fleet.fil_usd <= 1_000_000, "0 to 1000000 (dollars)"),
    # The image, every parameter file curio fetches with EnableProofShare and the PCE files
    # (vastui/domain/plan.py): a smaller disk fails every worker's setup.
    (
        "fleet.disk_gb",
        lambda c: DISK_NEED_GB <= c.fleet.disk_gb <= 100_000,
        f"a number of GB from {DISK_NEED_GB:g} to 100000",
    ),
    ("fleet.target_workers", lambda c: 0 <= c.fleet.target_workers <= 1000, '0 to 1000, or "auto"'),
    ("fleet.max_workers", lambda c: 1 <= c.fleet.max_workers <= 1000, "1 to 1000"),
    (
        "fleet.min_workers",
        lambda c: 1 <= c.fleet.min_workers <= c.fleet.max_workers,
        "1 to fleet.max_workers (curio runs on the workers: with none, no work is seen)",
    ),
    (
        "fleet.target_utilisation",
        lambda c: 0.3 <= c.fleet.target_utilisation <= 0.95,
        "a share from 0.3 to 0.95",
    ),
    (
        "fleet.scale_down_after_min",
        lambda c: 5 <= c.fleet.scale_down_after_min <= 1440,
        "5 to 1440 (minutes)",
    ),
    ("fleet.warm_pool_max", lambda c: 0 <= c.fleet.warm_pool_max <= 1000, "0 to 1000"),
    ("fleet.warm_pool_max_h", lambda c: 0 < c.fleet.warm_pool_max_h <= 720, "0 to 720 (hours)"),
    (
        "fleet.warm_pool_idle_h",
        lambda c: 0 < c.fleet.warm_pool_idle_h <= c.fleet.warm_pool_max_h,
        "hours above 0, at most fleet.warm_pool_max_h",
    ),
    (
        "fleet.warm_pool_start_min",
        lambda c: 1 <= c.fleet.warm_pool_start_min <= 1440,
        "1 to 1440 (minutes)",
    ),
    ("fleet.max_total_dph", lambda c: 0 <= c.fleet.max_total_dph <= 10_000, "0 to 10000 $/h"),
    (
        "fleet.max_concurrent_benchmarks",
        lambda c: 1 <= c.fleet.max_concurrent_benchmarks <= 1000,
        "an integer from 1 to 1000",
    ),
    (
        "fleet.auto_ban_days",
        lambda c: 0 <= c.fleet.auto_ban_days <= 3650,
        "a number of days from 0 (bans never expire) to 3650",
    ),
    (
        "fleet.max_rents_per_slot_hour",
        lambda c: 0 <= c.fleet.max_rents_per_slot_hour <= 60,
        "0 (off) or an integer of rents per target slot per hour, at most 60",
    ),
    (
        "fleet.fleet_failure_machines",
        lambda c: (
            c.fleet.fleet_failure_machines == 0 or 2 <= c.fleet.fleet_failure_machines <= 1000
        ),
        "0 (off) or an integer from 2 to 1000",
    ),
    (
        "fleet.fleet_failure_window_min",
        lambda c: 0 < c.fleet.fleet_failure_window_min <= 7 * 24 * 60,
        "a number of minutes > 0 (at most a week)",
    ),
    ("fleet.bench_proofs", lambda c: 1 <= c.fleet.bench_proofs <= 1000, "1 to 1000"),
    (
        "fleet.max_daily_spend",
        lambda c: 0 <= c.fleet.max_daily_spend <= 1_000_000,
        "dollars from 0 (off) to 1000000",
    ),
    ("vast.credit_poll_s", lambda c: 30 <= c.vast.credit_poll_s <= 86400, "30 to 86400 seconds"),
    (
        "metrics.listen",
        lambda c: not c.metrics.listen or is_listen(c.metrics.listen),
        "host:port (e.g. 127.0.0.1:9464), or empty for off",
    ),
    (
        "alerts.webhook",
        lambda c: not c.alerts.webhook or c.alerts.webhook.startswith(("http://", "https://")),
        "an http(s) URL, or empty for none",
    ),
    (
        "alerts.command",
        lambda c: all(c.alerts.command) and len(c.alerts.command) <= 64,
        "an array of non-empty strings (the program first)",
    ),
    ("alerts.min_credit", lambda c: 0 <= c.alerts.min_credit <= 1e6, "0 (off) to 1000000 $"),
    ("alerts.below_target_min", lambda c: 0 < c.alerts.below_target_min <= 10_080, "0 to 10080"),
    ("alerts.storm_bans", lambda c: 0 <= c.alerts.storm_bans <= 10_000, "0 (off) to 10000"),
    ("alerts.storm_kills", lambda c: 0 <= c.alerts.storm_kills <= 10_000, "0 (off) to 10000"),
    ("alerts.max_per_hour", lambda c: 1 <= c.alerts.max_per_hour <= 1000, "1 to 1000"),
    ("alerts.timeout_s", lambda c: 1 <= c.alerts.timeout_s <= 300, "1 to 300 seconds"),
    (
        "fleet.bench_snap_proofs",
        lambda c: 0 <= c.fleet.bench_snap_proofs < c.fleet.bench_proofs,
        "an integer from 0 to fleet.bench_proofs - 1",
    ),
    # The name is part of every label (vastui/engine/labels.py matches [A-Za-z0-9-]): a name the
    # label pattern does not match would leave rented instances unrecognised as vastui's own.
    ("fleet.name", lambda c: _is_fleet_name(c.fleet.name), "letters, digits and - (1-32)"),
    (
        "vast.api_url",
        lambda c: c.vast.api_url.startswith(("http://", "https://")),
        "an http(s) URL",
    ),
    ("vast.max_attempts", lambda c: 1 <= c.vast.max_attempts <= 20, "an integer from 1 to 20"),
    ("offers.limit", lambda c: 1 <= c.offers.limit <= 10_000, "an integer from 1 to 10000"),
    ("offers.refresh_s", lambda c: 5 <= c.offers.refresh_s <= 86_400, "5 to 86400 seconds"),
    ("vast.timeout_s", lambda c: 1 <= c.vast.timeout_s <= 600, "a number from 1 to 600"),
    ("ssh.connect_timeout_s", lambda c: 1 <= c.ssh.connect_timeout_s <= 120, "1 to 120"),
    # A deadline of 0 would destroy (and ban) every new worker at once.
    (
        "deadlines.loading_min",
        lambda c: 1 <= c.deadlines.loading_min <= 10_080,
        "1 to 10080 minutes (a week)",
    ),
    (
        "deadlines.first_report_min",
        lambda c: 1 <= c.deadlines.first_report_min <= 10_080,
        "1 to 10080 minutes (a week)",
    ),
    (
        "deadlines.setup_min",
        lambda c: 1 <= c.deadlines.setup_min <= 10_080,
        "1 to 10080 minutes (a week)",
    ),
    (
        "deadlines.paramfetch_min",
        lambda c: 1 <= c.deadlines.paramfetch_min <= 10_080,
        "1 to 10080 minutes (a week)",
    ),
    (
        "deadlines.benchmark_min",
        lambda c: 1 <= c.deadlines.benchmark_min <= 10_080,
        "1 to 10080 minutes (a week)",
    ),
    ("deadlines.exited_grace_min", lambda c: 0 <= c.deadlines.exited_grace_min <= 1440, "0-1440"),
    (
        "deadlines.tunnel_min",
        lambda c: 1 <= c.deadlines.tunnel_min <= 10_080,
        "1 to 10080 minutes (a week)",
    ),
    (
        "curio.listen_port_base",
        lambda c: 1024 <= c.curio.listen_port_base <= 65000,
        "an integer from 1024 to 65000",
    ),
    ("curio.max_pending", lambda c: 1 <= c.curio.max_pending <= 1000, "an integer from 1 to 1000"),
    ("curio.prove_timeout", lambda c: _is_duration(c.curio.prove_timeout), "a duration like 30m"),
    ("curio.layers", lambda c: _is_layer_list(c.curio.layers), "layer names, comma-separated"),
    ("curio.db_name", lambda c: _is_word(c.curio.db_name), "letters, digits, _ and -"),
    ("curio.db_user", lambda c: _is_word(c.curio.db_user), "letters, digits, _ and -"),
    ("ssh.curio_db", lambda c: _is_addr(c.ssh.curio_db, empty=True), "host:port or empty"),
    ("ssh.curio_db_cql", lambda c: _is_addr(c.ssh.curio_db_cql, empty=True), "host:port or empty"),
    ("ssh.lotus_api", lambda c: _is_addr(c.ssh.lotus_api), "host:port"),
    ("proving.poll_s", lambda c: 5 <= c.proving.poll_s <= 3600, "a number from 5 to 3600"),
    ("proving.window_min", lambda c: 5 <= c.proving.window_min <= 1440, "5 to 1440 minutes"),
    ("proving.max_failures", lambda c: 1 <= c.proving.max_failures <= 10_000, "1 to 10000"),
    ("proving.unresponsive_min", lambda c: 1 <= c.proving.unresponsive_min <= 1440, "1 to 1440"),
    ("proving.unreachable_min", lambda c: 1 <= c.proving.unreachable_min <= 1440, "1 to 1440"),
    ("proving.strikes_to_ban", lambda c: 1 <= c.proving.strikes_to_ban <= 100, "1 to 100"),
    ("proving.deadline_margin", lambda c: 0 <= c.proving.deadline_margin <= 2, "0 to 2"),
    ("proving.max_overdue", lambda c: 1 <= c.proving.max_overdue <= 10_000, "1 to 10000"),
    ("proving.drain_min", lambda c: 0 <= c.proving.drain_min <= 1440, "0 to 1440 (minutes)"),
    (
        "proving.market_deadline_min",
        lambda c: 1 <= c.proving.market_deadline_min <= 1440,
        "1 to 1440 (minutes)",
    ),
    (
        "proving.drain_margin_min",
        lambda c: 0 <= c.proving.drain_margin_min < c.proving.market_deadline_min,
        "0 to less than proving.market_deadline_min (minutes)",
    ),
    ("bids.mode", lambda c: c.bids.mode in BID_MODES, "off or auto"),
    ("offers.setup_lifetime_h", lambda c: 0 <= c.offers.setup_lifetime_h <= 10_000, "0 to 10000"),
    ("bids.min_saving", lambda c: 0 <= c.bids.min_saving < 1, "a number from 0 to 0.99"),
    ("bids.margin", lambda c: 0 <= c.bids.margin <= 2, "a number from 0 to 2"),
    ("bids.raise_step", lambda c: 0 <= c.bids.raise_step <= 2, "a number from 0 to 2"),
    ("bids.keep_outbid_min", lambda c: 0 <= c.bids.keep_outbid_min <= 1440, "0 to 1440 (min)"),
    (
        "bids.prior_interruptions_per_h",
        lambda c: 0 <= c.bids.prior_interruptions_per_h <= 10,
        "a number from 0 to 10",
    ),
    ("bids.prior_outbid_h", lambda c: 0 <= c.bids.prior_outbid_h <= 48, "0 to 48 (hours)"),
    ("bids.restart_loss_min", lambda c: 0 <= c.bids.restart_loss_min <= 240, "0 to 240 (min)"),
]


# ASCII digits only: \d and str.isdigit() take other scripts' digits (and "²", which int()
# refuses), and these values go to curio's config and to socket addresses.
def _is_duration(text: str) -> bool:
    return re.fullmatch(r"([0-9]+h)?([0-9]+m)?([0-9]+s)?", text) is not None and text != ""


def _is_fleet_name(text: str) -> bool:
    return re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9-]{0,31}", text) is not None


def _is_word(text: str) -> bool:
    return re.fullmatch(r"[A-Za-z0-9_-]{1,63}", text) is not None


def _is_layer_list(text: str) -> bool:
    return text == "" or all(_is_word(part.strip()) for part in text.split(","))


def _is_addr(text: str, empty: bool = False) -> bool:
    if text == "":
        return empty
    host, _, port = text.rpartition(":")
    if not re.fullmatch(r"[A-Za-z0-9.\-]+", host) or not re.fullmatch(r"[0-9]{1,5}", port):
        return False
    return 0 < int(port) < 65536


# A config file is a few KB; one over this is not one (and parsing it would cost ~10 ms a MB
# before any key is checked).
MAX_CONFIG_BYTES = 1 << 20


def _read_bounded(path: Path) -> str:
    with path.open("rb") as f:
        data = f.read(MAX_CONFIG_BYTES + 1)
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(
            f"{path}: expected a config file of at most {MAX_CONFIG_BYTES} bytes, it is longer"
        )
    return data.decode("utf-8")


CLUSTER_KEYS = {
    "ssh": ("curio_db", "curio_db_cql"),
    "curio": ("read_cluster", "db_user", "db_name"),
}


def _names_cluster(data: dict[str, Any]) -> bool:
    """Whether the file says where or how to reach curio's cluster (CLUSTER_KEYS)."""
    for section, keys in CLUSTER_KEYS.items():
        table = data.get(section)
        if isinstance(table, dict) and any(key in table for key in keys):
            return True
    return False


def load_config(path: Path | None = None) -> Config:
    """Read and validate; a missing default file is fine, a missing explicit file is not."""
    explicit = path is not None or bool(os.environ.get("VASTUI_CONFIG"))
    path = path or default_config_path()
    if not path.exists():
        if explicit:
            raise ConfigError(f"{path}: config file not found")
        return Config()
    try:
        data = tomllib.loads(_read_bounded(path))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {' '.join(str(exc).split())}") from None
    except RecursionError:  # tomllib recurses per nesting level of arrays and inline tables
        raise ConfigError(f"{path}: not valid TOML: nested too deeply") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read: {' '.join(str(exc).split())}") from None
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
            known = ", ".join(sorted(sections))
            raise ConfigError(f"{path}: unknown key {_quote(name)} (known sections: {known})")
        kwargs[name] = _build_section(path, name, hints[name], value)
    config = Config(**kwargs, path=path)
    if _names_cluster(data):
        config = dataclasses.replace(
            config, curio=dataclasses.replace(config.curio, cluster_named=True)
        )
    for key, ok, expected in _VALIDATORS:
        if not ok(config):
            raise ConfigError(f"{path}: key '{key}': expected {expected}")
    return config
