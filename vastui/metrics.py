"""The fleet in Prometheus: ``vastui --engine-only --metrics 127.0.0.1:9464``.

prometheus-client writes the exposition format and serves it (a kept library, not a
hand-written one). The engine builds a :class:`FleetSample` after every step, from the store
and its own counters, and hands it to a :class:`FleetCollector` in the engine's **own
registry** (never the process-global default, so tests run several engines). A scrape reads
the last sample only: the HTTP thread never touches the store. Per-worker series exist only in
the sample of live workers, so they disappear with the worker (bounded cardinality: one set of
series per live worker, per GPU model of the market, per kill kind).

Listening is off unless asked; the address defaults to loopback, and any other must be given
explicitly (it is logged at start).
"""

from __future__ import annotations

import ipaddress
import logging
import math
import statistics
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from wsgiref.simple_server import WSGIServer

from prometheus_client import start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from vastui.domain.delivery import Delivery

log = logging.getLogger("vastui.metrics")

DEFAULT_PORT = 9464
QUANTILES = (0.1, 0.5, 0.9)
WORKER_LABELS = ("label", "machine_id", "gpu_name")


class MetricsError(ValueError):
    """A bad ``--metrics`` / ``[metrics] listen`` address, one line."""


@dataclass(frozen=True, slots=True)
class WorkerSample:
    label: str
    machine_id: int | None
    gpu_name: str
    stage: str
    proofs: int  # cuzk's counters since the benchmark (production)
    failures: int
    proofs_per_hour: float | None  # measured in production
    dollars_per_hour: float
    tasks_held: int | None = None  # curio's tasks its machine holds (the cluster's last reading)
    draining: bool = False  # cordoned before a planned destroy


@dataclass(frozen=True, slots=True)
class FleetSample:
    """What one scrape shows; built by the engine after each step."""

    heartbeat: float  # wall clock of the step (seconds since the epoch)
    target: int
    by_stage: Mapping[str, int]
    workers: Sequence[WorkerSample] = ()
    fleet_dollars_per_hour: float = 0.0
    spend_all: float = 0.0  # dollars, since the database began
    spend_rejected: float = 0.0
    spend_bandwidth: float = 0.0  # of spend_all: bytes at the offers' $/GB
    spend_today: float = 0.0  # the UTC day
    # the headline (vastui/domain/delivery.py), as the engine published it; None: not counted
    delivery: Delivery | None = None
    kills: Mapping[str, int] = field(default_factory=dict)  # by kind, since the database began
    bans: int = 0
    rents: int = 0
    api_errors: Mapping[str, int] = field(default_factory=dict)  # by HTTP status (or "network")
    blocked_reason: str | None = None  # the provisioning reason now (None: renting)
    reason_kinds: Sequence[str] = ()  # every reason there is, so each has a 0 or a 1
    market: Mapping[str, Sequence[float]] = field(default_factory=dict)  # GPU → $/h of offers
    credit: float | None = None
    max_daily_spend: float | None = None
    max_total_dph: float | None = None
    # curio's cluster, as the engine's status carries it (vastui/engine/engine.py
    # cluster_summary); None: not read
    cluster: Mapping[str, Any] | None = None
    # the controller cut off from its workers: for how long (seconds); None while they reach it
    cut_off_seconds: float | None = None


def parse_listen(value: str) -> tuple[str, int]:
    """``host:port``, ``:port`` (loopback) or ``port``; IPv6 as ``[::1]:9464``."""
    text = value.strip()
    host, sep, port_text = text.rpartition(":")
    if not sep:
        host, port_text = "", text
    host = host.strip("[]") or "127.0.0.1"
    try:
        port = int(port_text)
    except ValueError:
        raise MetricsError(f"metrics address {value!r}: expected host:port") from None
    if not 0 <= port <= 65535:
        raise MetricsError(f"metrics address {value!r}: port {port} is not 0-65535")
    return host, port


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class FleetCollector(Collector):
    """The families of the last sample (none before the first step but ``vastui_up``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sample: FleetSample | None = None

    def update(self, sample: FleetSample) -> None:
        with self._lock:
            self._sample = sample

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            s = self._sample
        yield GaugeMetricFamily("vastui_up", "1 while the engine runs its steps", value=1)
        if s is None:
            return
        yield from _fleet(s)
        yield from _workers(s.workers)
        yield from _money(s)
        yield from _events(s)
        yield from _market(s.market)
        yield from _cluster(s.cluster, s.workers)


def _gauge(name: str, doc: str, value: float | None) -> Iterator[Metric]:
    if value is not None and math.isfinite(value):
        yield GaugeMetricFamily(name, doc, value=value)


def _fleet(s: FleetSample) -> Iterator[Metric]:
    yield GaugeMetricFamily(
        "vastui_engine_heartbeat_timestamp_seconds",
        "Wall clock of the engine's last step",
        value=s.heartbeat,
    )
    yield GaugeMetricFamily("vastui_target_workers", "Target number of workers", value=s.target)
    stages = GaugeMetricFamily("vastui_workers", "Live workers by stage", labels=["stage"])
    for stage, n in sorted(s.by_stage.items()):
        stages.add_metric([stage], n)
    yield stages
    blocked = GaugeMetricFamily(
        "vastui_provision_blocked",
        "1 for the reason the engine is not renting now, 0 for the others",
        labels=["reason"],
    )
    for kind in s.reason_kinds:
        blocked.add_metric([kind], 1.0 if kind == s.blocked_reason else 0.0)
    yield blocked
    yield GaugeMetricFamily(
        "vastui_controller_cut_off",
        "1 while the controller is cut off from its workers (their tunnel to it down)",
        value=0.0 if s.cut_off_seconds is None else 1.0,
    )
    yield from _gauge(
        "vastui_controller_cut_off_seconds",
        "How long the controller has been cut off from its workers",
        s.cut_off_seconds,
    )


def _workers(workers: Iterable[WorkerSample]) -> Iterator[Metric]:
    proofs = CounterMetricFamily(
        "vastui_proofs", "Proofs completed in production (cuzk's counters)", labels=WORKER_LABELS
    )
    failures = CounterMetricFamily(
        "vastui_proof_failures", "Proofs failed in production", labels=WORKER_LABELS
    )
    rate = GaugeMetricFamily(
        "vastui_worker_proofs_per_hour", "Measured production rate", labels=WORKER_LABELS
    )
    dph = GaugeMetricFamily(
        "vastui_worker_dollars_per_hour", "What the worker costs", labels=WORKER_LABELS
    )
    for w in workers:
        key = [w.label, "" if w.machine_id is None else str(w.machine_id), w.gpu_name]
        dph.add_metric(key, w.dollars_per_hour)
        if w.stage != "proving":
            continue
        proofs.add_metric(key, w.proofs)
        failures.add_metric(key, w.failures)
        if w.proofs_per_hour is not None:
            rate.add_metric(key, w.proofs_per_hour)
    yield from (proofs, failures, rate, dph)


def _money(s: FleetSample) -> Iterator[Metric]:
    yield GaugeMetricFamily(
        "vastui_fleet_dollars_per_hour",
        "What the running fleet costs (stopped workers apart: vastui_stopped_dollars_per_hour)",
        value=s.fleet_dollars_per_hour,
    )
    spend = CounterMetricFamily(
        "vastui_spend_dollars",
        "Dollars spent (rejected: on workers that never proved; bandwidth: of all, per GB)",
        labels=["kind"],
    )  # fmt: skip
    spend.add_metric(["all"], s.spend_all)
    spend.add_metric(["rejected"], s.spend_rejected)
    spend.add_metric(["bandwidth"], s.spend_bandwidth)
    yield spend
    yield GaugeMetricFamily(
        "vastui_daily_spend_dollars", "Dollars spent this UTC day", value=s.spend_today
    )
    yield from _delivery(s.delivery)
    yield from _gauge("vastui_daily_budget_dollars", "[fleet] max_daily_spend", s.max_daily_spend)
    yield from _gauge("vastui_fleet_dph_cap_dollars", "[fleet] max_total_dph", s.max_total_dph)
    yield from _gauge("vastui_account_credit_dollars", "The Vast account's credit", s.credit)


def _delivery(d: Delivery | None) -> Iterator[Metric]:
    """The headline, the same record the strip, `vastui status` and the detail show."""
    if d is None:
        return
    yield GaugeMetricFamily(
        "vastui_delivery_window_seconds", "The window the delivered figures are counted over",
        value=d.window_s,
    )  # fmt: skip
    proofs = GaugeMetricFamily(
        "vastui_delivered_proofs",
        "Proofs the fleet delivered over the window (computed: curio's PSProve successes, or "
        "cuzk's counters without a cluster; paid: the cluster's payments at the fleet's share)",
        labels=["kind"],
    )  # fmt: skip
    proofs.add_metric(["computed"], float(d.computed))
    if d.paid is not None:
        proofs.add_metric(["paid"], float(d.paid))
    yield proofs
    yield GaugeMetricFamily(
        "vastui_delivered_proofs_per_hour", "Proofs delivered over the window, per hour",
        value=d.proofs_per_hour,
    )  # fmt: skip
    yield GaugeMetricFamily(
        "vastui_window_cost_dollars",
        "Every dollar billed for the fleet over the window (GPU, disks, bandwidth)",
        value=d.cost,
    )  # fmt: skip
    yield from _gauge(
        "vastui_cost_per_paid_proof_dollars",
        "The fleet's cost over the window / the paid proofs credited to it", d.cost_per_paid,
    )  # fmt: skip
    yield from _gauge(
        "vastui_cost_per_computed_proof_dollars",
        "The fleet's cost over the window / the proofs it delivered", d.cost_per_computed,
    )  # fmt: skip
    yield GaugeMetricFamily(
        "vastui_capacity_proofs_per_hour",
        "What the proving workers could prove kept full (measured at full feed, else benchmark)",
        value=d.capacity,
    )  # fmt: skip
    yield GaugeMetricFamily(
        "vastui_stopped_workers", "Workers stopped (warm pool, outbid): disks only",
        value=float(d.stopped),
    )  # fmt: skip
    yield GaugeMetricFamily(
        "vastui_stopped_dollars_per_hour", "What the stopped workers' disks cost",
        value=d.stopped_dph,
    )  # fmt: skip


def _events(s: FleetSample) -> Iterator[Metric]:
    kills = CounterMetricFamily("vastui_kills", "Workers destroyed, by kind", labels=["kind"])
    for kind, n in sorted(s.kills.items()):
        kills.add_metric([kind], n)
    yield kills
    yield CounterMetricFamily("vastui_bans", "Machines put on the bad list", value=s.bans)
    yield CounterMetricFamily("vastui_rents", "Workers rented", value=s.rents)
    errors = CounterMetricFamily(
        "vastui_vast_api_errors", "Failed Vast API calls, by HTTP status", labels=["status"]
    )
    for status, n in sorted(s.api_errors.items()):
        errors.add_metric([status], n)
    yield errors


def _market(market: Mapping[str, Sequence[float]]) -> Iterator[Metric]:
    count = GaugeMetricFamily(
        "vastui_market_offers", "Offers passing the filter, by GPU model", labels=["gpu_name"]
    )
    price = GaugeMetricFamily(
        "vastui_market_dollars_per_hour",
        "$/h of the offers passing the filter, by GPU model and percentile (10, 50, 90)",
        # not "quantile": Prometheus reserves it for summaries (promtool check metrics)
        labels=["gpu_name", "percentile"],
    )
    for gpu, prices in sorted(market.items()):
        count.add_metric([gpu], len(prices))
        for q, value in zip(QUANTILES, quantiles(prices), strict=True):
            price.add_metric([gpu, f"{q * 100:g}"], value)
    yield count
    yield price


CLUSTER_STAGES = ("taken", "computed", "submitted", "challenges", "paid")


def _cluster(c: Mapping[str, Any] | None, workers: Iterable[WorkerSample]) -> Iterator[Metric]:
    """curio's cluster: whether it is read, its PSProve work waiting and claimed, the market's
    requests over the production window, the fleet's $/proof computed and paid, each worker's
    held tasks and the drains."""
    if c is None or c.get("state") == "off":
        return
    yield GaugeMetricFamily(
        "vastui_cluster_readable", "1 when curio's cluster was read this step",
        value=1.0 if c.get("state") == "ok" else 0.0,
    )  # fmt: skip
    if c.get("psprove_waiting") is not None:
        tasks = GaugeMetricFamily(
            "vastui_cluster_psprove_tasks", "curio's PSProve tasks by state", labels=["state"]
        )
        tasks.add_metric(["waiting"], float(c.get("psprove_waiting") or 0))
        tasks.add_metric(["claimed"], float(c.get("psprove_claimed") or 0))
        yield tasks
        requests = GaugeMetricFamily(
            "vastui_cluster_requests",
            "proofshare requests over the production window, by how far they got "
            "(challenges: submitted unpaid challenge proofs; paid: those paid)",
            labels=["stage"],
        )
        for stage in CLUSTER_STAGES:
            requests.add_metric([stage], float(c.get(stage) or 0))
        yield requests
    yield from _gauge("vastui_workers_draining", "Workers draining", _number(c.get("draining")))
    yield from _gauge(
        "vastui_cluster_requests_overdue",
        "Requests obtained longer ago than the market's deadline and not submitted (missed)",
        _number(c.get("overdue")),
    )
    auto = c.get("autoscale")
    if isinstance(auto, Mapping):
        yield from _gauge(
            "vastui_cluster_unclaimed_requests",
            "Requests curio's cluster holds that no worker has claimed (the automatic target "
            "rises while they stay)",
            _number(auto.get("unclaimed")),
        )
        yield from _gauge(
            "vastui_cluster_oldest_unclaimed_seconds",
            "How long the oldest unclaimed request has waited",
            _number(auto.get("oldest_unclaimed_s")),
        )
        yield from _gauge(
            "vastui_fleet_utilisation_ratio",
            "PSProve successes over the window / the proving workers' measured capacity",
            _number(auto.get("utilisation")),
        )
        yield from _gauge(
            "vastui_fleet_demand_proofs_per_hour",
            "PSProve successes per hour over the window, whoever did them",
            _number(auto.get("done_per_h")),
        )
        yield from _gauge(
            "vastui_market_demand_requests_per_hour",
            "Requests the market gave per hour curio's request task asked (bg:PShareRequest "
            "runs in the window)",
            _number(auto.get("demand_per_h")),
        )
        yield from _gauge(
            "vastui_margin_usd_per_hour",
            "What the market paid over the window per hour (at fleet.fil_usd) less what the "
            "fleet bills per hour now",
            _number(auto.get("margin_usd_per_h")),
        )
        yield from _gauge(
            "vastui_market_won_ratio",
            "Requests obtained over the window / what the proving workers could prove",
            _number(auto.get("won_share")),
        )
        yield from _gauge(
            "vastui_auto_target_changed_timestamp_seconds",
            "When the automatic target last changed (engine clock; vastui events --kind target)",
            _number(auto.get("changed_at")),
        )
    held = GaugeMetricFamily(
        "vastui_worker_cluster_tasks", "curio's tasks a worker's machine holds",
        labels=[*WORKER_LABELS, "draining"],
    )  # fmt: skip
    for w in workers:
        if w.tasks_held is not None:
            key = [w.label, "" if w.machine_id is None else str(w.machine_id), w.gpu_name]
            held.add_metric([*key, "1" if w.draining else "0"], float(w.tasks_held))
    yield held


def _number(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def quantiles(values: Sequence[float]) -> tuple[float, ...]:
    """The 10th, 50th and 90th percentiles (inclusive method; one value is all three)."""
    if len(values) == 1:
        return (values[0],) * len(QUANTILES)
    cuts = statistics.quantiles(sorted(values), n=10, method="inclusive")
    return (cuts[0], cuts[4], cuts[8])


class MetricsServer:
    """The engine's registry served over HTTP (prometheus-client's own server, in a thread)."""

    def __init__(self, collector: FleetCollector) -> None:
        self.collector = collector
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(collector)
        self._server: WSGIServer | None = None
        self.address: tuple[str, int] | None = None

    def start(self, listen: str) -> tuple[str, int]:
        host, port = parse_listen(listen)
        try:
            server, _thread = start_http_server(port, addr=host, registry=self.registry)
        except OSError as exc:
            raise MetricsError(f"metrics address {listen}: {exc.strerror or exc}") from None
        self._server = server
        bound = server.server_address
        self.address = (host, int(bound[1]))
        where = f"{host}:{self.address[1]}"
        if is_loopback(host):
            log.info("metrics on http://%s/metrics", where)
        else:
            log.warning("metrics on http://%s/metrics: beyond loopback, as asked", where)
        return self.address

    def stop(self) -> None:
        server = self._server
        self._server = None
        if server is not None:
            server.shutdown()
            server.server_close()
