"""Prometheus metrics (vastui/metrics.py): prometheus-client's own parser reads what the
engine's registry serves; per-worker series go with the worker; loopback unless asked."""

from __future__ import annotations

from dataclasses import replace

import httpx
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from vastui.domain.delivery import CLUSTER as CLUSTER_SOURCE
from vastui.domain.delivery import Delivery
from vastui.metrics import (
    FleetCollector,
    FleetSample,
    MetricsError,
    MetricsServer,
    WorkerSample,
    is_loopback,
    parse_listen,
    quantiles,
)

DELIVERY = Delivery(
    at=1_800_000_000.0, window_s=3600.0, source=CLUSTER_SOURCE, computed=17, paid=12.0, cost=0.24,
    capacity=40.5, capacity_measured=1, proving=1, dph=0.9, stopped=1, stopped_dph=0.02,
)  # fmt: skip


def sample(workers: tuple[WorkerSample, ...] = ()) -> FleetSample:
    return FleetSample(
        heartbeat=1_800_000_000.0, target=2, by_stage={"proving": 1, "benchmark": 1},
        workers=workers, fleet_dollars_per_hour=0.9, spend_all=12.5, spend_rejected=1.5,
        spend_bandwidth=0.75,
        spend_today=3.0, delivery=DELIVERY, kills={"bench_below_min": 2, "surplus": 1},
        bans=1, rents=5, api_errors={"429": 3}, blocked_reason="at_target",
        reason_kinds=("at_target", "daily_budget", "no_credit"),
        market={"RTX 4090": [0.3, 0.35, 0.4, 0.5], "RTX 5090": [0.7]}, credit=42.0,
        max_daily_spend=50.0, max_total_dph=5.0, cluster=CLUSTER,
    )  # fmt: skip


CLUSTER = {
    "state": "ok", "psprove_waiting": 4, "psprove_claimed": 9, "taken": 20, "computed": 17,
    "submitted": 15, "challenges": 3, "paid": 12, "draining": 1,
}  # fmt: skip
W1 = WorkerSample(
    "vastui-main.f-aa", 10001, "RTX 4090", "proving", 40, 1, 30.5, 0.42, tasks_held=3,
    draining=True,
)  # fmt: skip
W2 = WorkerSample("vastui-main.f-bb", 10002, "RTX 5090", "benchmark", 0, 0, None, 0.48)


def scrape(collector: FleetCollector) -> dict[str, list[tuple[dict[str, str], float]]]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    text = generate_latest(registry).decode()
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def test_the_series_are_there_and_parse() -> None:
    c = FleetCollector()
    assert set(scrape(c)) == {"vastui_up"}  # before the first step
    c.update(sample((W1, W2)))
    got = scrape(c)
    assert got["vastui_up"] == [({}, 1.0)]
    assert got["vastui_target_workers"] == [({}, 2.0)]
    assert dict((d["stage"], v) for d, v in got["vastui_workers"]) == {
        "benchmark": 1.0, "proving": 1.0,
    }  # fmt: skip
    key = {"label": W1.label, "machine_id": "10001", "gpu_name": "RTX 4090"}
    assert got["vastui_proofs_total"] == [(key, 40.0)]
    assert got["vastui_proof_failures_total"] == [(key, 1.0)]
    assert got["vastui_worker_proofs_per_hour"] == [(key, 30.5)]
    assert len(got["vastui_worker_dollars_per_hour"]) == 2  # a benchmarking worker costs too
    assert dict((d["kind"], v) for d, v in got["vastui_spend_dollars_total"]) == {
        "all": 12.5, "rejected": 1.5, "bandwidth": 0.75,
    }  # fmt: skip
    # the headline, the same record the strip and `vastui status` show
    assert dict((d["kind"], v) for d, v in got["vastui_delivered_proofs"]) == {
        "computed": 17.0, "paid": 12.0,
    }  # fmt: skip
    assert got["vastui_delivered_proofs_per_hour"] == [({}, 17.0)]
    assert got["vastui_cost_per_paid_proof_dollars"] == [({}, 0.02)]
    assert got["vastui_cost_per_computed_proof_dollars"] == [({}, pytest.approx(0.24 / 17))]
    assert got["vastui_capacity_proofs_per_hour"] == [({}, 40.5)]
    assert got["vastui_stopped_workers"] == [({}, 1.0)]
    assert got["vastui_window_cost_dollars"] == [({}, 0.24)]
    assert dict((d["kind"], v) for d, v in got["vastui_kills_total"]) == {
        "bench_below_min": 2.0, "surplus": 1.0,
    }  # fmt: skip
    assert got["vastui_bans_total"] == [({}, 1.0)] and got["vastui_rents_total"] == [({}, 5.0)]
    assert got["vastui_vast_api_errors_total"] == [({"status": "429"}, 3.0)]
    blocked = {d["reason"]: v for d, v in got["vastui_provision_blocked"]}
    assert blocked == {"at_target": 1.0, "daily_budget": 0.0, "no_credit": 0.0}
    assert dict((d["gpu_name"], v) for d, v in got["vastui_market_offers"]) == {
        "RTX 4090": 4.0, "RTX 5090": 1.0,
    }  # fmt: skip
    bands = {(d["gpu_name"], d["percentile"]): v for d, v in got["vastui_market_dollars_per_hour"]}
    assert bands[("RTX 5090", "50")] == 0.7 and bands[("RTX 4090", "50")] == 0.375
    assert got["vastui_account_credit_dollars"] == [({}, 42.0)]
    assert got["vastui_daily_budget_dollars"] == [({}, 50.0)]


def test_a_destroyed_workers_series_disappear() -> None:
    c = FleetCollector()
    c.update(sample((W1,)))
    assert "vastui_proofs_total" in scrape(c)
    c.update(sample(()))
    got = scrape(c)
    assert "vastui_proofs_total" not in got and "vastui_worker_dollars_per_hour" not in got


def test_unknown_numbers_are_left_out_not_invented() -> None:
    c = FleetCollector()
    c.update(FleetSample(heartbeat=1.0, target=0, by_stage={}, delivery=None,
                         credit=None, max_daily_spend=float("inf")))  # fmt: skip
    got = scrape(c)
    for name in ("vastui_cost_per_paid_proof_dollars", "vastui_account_credit_dollars",
                 "vastui_daily_budget_dollars"):  # fmt: skip
        assert name not in got


def test_a_cut_off_controller_is_a_gauge_and_its_length() -> None:
    c = FleetCollector()
    c.update(sample())
    got = scrape(c)
    assert got["vastui_controller_cut_off"] == [({}, 0.0)]
    assert "vastui_controller_cut_off_seconds" not in got
    c.update(replace(sample(), cut_off_seconds=600.0))
    got = scrape(c)
    assert got["vastui_controller_cut_off"] == [({}, 1.0)]
    assert got["vastui_controller_cut_off_seconds"] == [({}, 600.0)]


@pytest.mark.parametrize(
    ("text", "want"),
    [("127.0.0.1:9464", ("127.0.0.1", 9464)), (":9000", ("127.0.0.1", 9000)),
     ("9464", ("127.0.0.1", 9464)), ("[::1]:9464", ("::1", 9464)),
     ("0.0.0.0:80", ("0.0.0.0", 80))],
)  # fmt: skip
def test_parse_listen(text: str, want: tuple[str, int]) -> None:
    assert parse_listen(text) == want


@pytest.mark.parametrize("text", ["host:port", "127.0.0.1:70000", "127.0.0.1:"])
def test_a_bad_address_is_one_line(text: str) -> None:
    with pytest.raises(MetricsError, match="metrics address"):
        parse_listen(text)


def test_loopback() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.0.0.5")


def test_quantiles() -> None:
    assert quantiles([5.0]) == (5.0, 5.0, 5.0)
    lo, mid, hi = quantiles([float(x) for x in range(1, 12)])
    assert (lo, mid, hi) == (2.0, 6.0, 10.0)


def test_the_server_serves_the_engines_own_registry_on_loopback() -> None:
    a, b = FleetCollector(), FleetCollector()
    a.update(sample((W1,)))
    b.update(sample(()))
    sa, sb = MetricsServer(a), MetricsServer(b)  # two engines in one process
    try:
        host, port_a = sa.start("127.0.0.1:0")
        _, port_b = sb.start(":0")
        assert host == "127.0.0.1" and port_a != port_b
        text_a = httpx.get(f"http://127.0.0.1:{port_a}/metrics", timeout=30).text
        text_b = httpx.get(f"http://127.0.0.1:{port_b}/metrics", timeout=30).text
        assert "vastui_proofs_total{" in text_a and "vastui_proofs_total{" not in text_b
        assert "python_gc" not in text_a  # not the process-global default registry
    finally:
        sa.stop()
        sb.stop()


def test_curios_cluster_in_the_scrape() -> None:
    c = FleetCollector()
    c.update(sample((W1, W2)))
    got = scrape(c)
    assert got["vastui_cluster_readable"] == [({}, 1.0)]
    assert dict((d["state"], v) for d, v in got["vastui_cluster_psprove_tasks"]) == {
        "waiting": 4.0, "claimed": 9.0,
    }  # fmt: skip
    assert dict((d["stage"], v) for d, v in got["vastui_cluster_requests"]) == {
        "taken": 20.0, "computed": 17.0, "submitted": 15.0, "challenges": 3.0, "paid": 12.0,
    }  # fmt: skip
    assert got["vastui_workers_draining"] == [({}, 1.0)]
    key = {"label": W1.label, "machine_id": "10001", "gpu_name": "RTX 4090", "draining": "1"}
    assert got["vastui_worker_cluster_tasks"] == [(key, 3.0)]  # W2 was never read: no series
    # unreadable: the one series that says so, no stale numbers
    c.update(replace(sample((W1,)), cluster={"state": "error", "error": "refused"}))
    got = scrape(c)
    assert got["vastui_cluster_readable"] == [({}, 0.0)]
    assert "vastui_cluster_psprove_tasks" not in got
    # not read at all: nothing of the cluster
    c.update(replace(sample((W1,)), cluster={"state": "off"}))
    assert not {n for n in scrape(c) if n.startswith("vastui_cluster")}


def test_no_series_uses_a_label_prometheus_reserves() -> None:
    """What `promtool check metrics` holds an exposition to: `quantile` belongs to summaries,
    `le` to histograms, and names are snake case without a `__` prefix (issue 31 item 7: the
    market's price bands were a gauge with a `quantile` label)."""
    c = FleetCollector()
    c.update(sample((W1, W2)))
    registry = CollectorRegistry()
    registry.register(c)
    wrong = []
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            for label in s.labels:
                if label == "quantile" and family.type != "summary":
                    wrong.append(f"{s.name}: quantile on a {family.type}")
                if label == "le" and family.type != "histogram":
                    wrong.append(f"{s.name}: le on a {family.type}")
                if label.startswith("__"):
                    wrong.append(f"{s.name}: reserved label {label}")
    assert "vastui_market_dollars_per_hour" in generate_latest(registry).decode()
    assert wrong == []


AUTO = {
    "target": 3, "min_workers": 1, "max_workers": 8, "unclaimed": 5,
    "oldest_unclaimed_s": 420.0, "utilisation": 0.62, "done_per_h": 37.2,
    "capacity_per_h": 60.0, "changed_at": 1_700_000_000.0, "reason": "x",
}  # fmt: skip


def with_auto(base: FleetSample) -> FleetSample:
    """The sample with an automatic target and overdue requests in its cluster reading."""
    return replace(base, cluster={**(base.cluster or {}), "autoscale": AUTO, "overdue": 3})


def test_the_automatic_target_in_the_scrape() -> None:
    c = FleetCollector()
    base = sample((W1,))
    c.update(with_auto(base))
    got = scrape(c)
    assert got["vastui_cluster_requests_overdue"] == [({}, 3.0)]
    assert got["vastui_cluster_unclaimed_requests"] == [({}, 5.0)]
    assert got["vastui_cluster_oldest_unclaimed_seconds"] == [({}, 420.0)]
    assert got["vastui_fleet_utilisation_ratio"] == [({}, 0.62)]
    assert got["vastui_fleet_demand_proofs_per_hour"] == [({}, 37.2)]
    assert got["vastui_auto_target_changed_timestamp_seconds"] == [({}, 1_700_000_000.0)]
    # a fixed target: none of them
    c.update(base)
    assert "vastui_fleet_utilisation_ratio" not in scrape(c)
