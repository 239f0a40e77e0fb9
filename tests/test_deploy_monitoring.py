"""deploy/: the Grafana dashboard and the Prometheus rules are well-formed, and every metric
they name is one the engine exports (tests/test_metrics.py builds the same sample)."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from tests.test_metrics import W1, W2, sample
from vastui.metrics import FleetCollector

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
NAME = re.compile(r"\bvastui_[a-z_]+\b")
DURATION = re.compile(r"^\d+[smhd]$")


def exported() -> set[str]:
    collector = FleetCollector()
    collector.update(sample((W1, W2)))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    text = generate_latest(registry).decode()
    return {s.name for f in text_string_to_metric_families(text) for s in f.samples}


def test_the_dashboard_is_provisioning_ready_and_names_only_exported_metrics() -> None:
    dash = json.loads((DEPLOY / "grafana" / "vastui-dashboard.json").read_text())
    assert dash["uid"] == "vastui-fleet" and "id" not in dash  # provisioning sets the id
    names = {v["name"] for v in dash["templating"]["list"]}
    assert {"datasource", "job", "instance"} <= names
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)) >= 10
    used: set[str] = set()
    for p in dash["panels"]:
        assert {"x", "y", "w", "h"} <= set(p["gridPos"]) and p["targets"], p["title"]
        for t in p["targets"]:
            assert t["expr"].count("(") == t["expr"].count(")"), t["expr"]
            used |= set(NAME.findall(t["expr"]))
    missing = used - exported()
    assert not missing, f"the dashboard names metrics vastui does not export: {missing}"
    # what the issue asks to see
    for wanted in ("vastui_target_workers", "vastui_workers", "vastui_worker_proofs_per_hour",
                   "vastui_fleet_dollars_per_hour", "vastui_cost_per_paid_proof_dollars",
                   "vastui_delivered_proofs_per_hour", "vastui_capacity_proofs_per_hour",
                   "vastui_daily_spend_dollars", "vastui_kills_total", "vastui_bans_total",
                   "vastui_market_dollars_per_hour"):  # fmt: skip
        assert wanted in used, wanted


def test_the_rules_are_prometheus_rules_naming_only_exported_metrics() -> None:
    doc = yaml.safe_load((DEPLOY / "prometheus" / "vastui-rules.yml").read_text())
    rules = [r for g in doc["groups"] for r in g["rules"]]
    alerts = {r["alert"] for r in rules}
    assert len(alerts) == len(rules)
    used: set[str] = set()
    for r in rules:
        assert set(r) <= {"alert", "expr", "for", "labels", "annotations"}, r["alert"]
        assert r["labels"]["severity"] in ("warning", "critical")
        assert r["annotations"]["summary"]
        assert "for" not in r or DURATION.match(r["for"]), r["alert"]
        expr = str(r["expr"])
        assert expr.count("(") == expr.count(")"), r["alert"]
        used |= set(NAME.findall(expr))
    assert not used - exported(), used - exported()
    # below target 15 min, engine down or stale, over budget, rejected share, credit, no offer
    for wanted in ("VastuiBelowTarget", "VastuiEngineDown", "VastuiHeartbeatStale",
                   "VastuiSpendRateOverBudget", "VastuiRejectedSpendHigh", "VastuiCreditLow",
                   "VastuiNoViableOffer"):  # fmt: skip
        assert wanted in alerts, wanted
    below = next(r for r in rules if r["alert"] == "VastuiBelowTarget")
    no_offer = next(r for r in rules if r["alert"] == "VastuiNoViableOffer")
    assert below["for"] == "15m" and no_offer["for"] == "30m"


def test_the_scrape_job_loads_the_rules() -> None:
    doc = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    assert "vastui-rules.yml" in doc["rule_files"]
    job = next(j for j in doc["scrape_configs"] if j["job_name"] == "vastui")
    assert job["static_configs"][0]["targets"] == ["127.0.0.1:9464"]


def test_every_panel_shows_a_series_with_the_optional_settings_off() -> None:
    """No daily budget, no $/h cap, curio's cluster not read: each panel still has a series to
    draw (issue 31 item 7: the daily budget's panel was empty without a budget). The cluster's
    panels are the exception, and say so in their title."""
    collector = FleetCollector()
    bare = replace(
        sample((W1, W2)), max_daily_spend=None, max_total_dph=None, cluster={"state": "off"}
    )
    collector.update(bare)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    text = generate_latest(registry).decode()
    there = {s.name for f in text_string_to_metric_families(text) for s in f.samples}
    assert "vastui_daily_budget_dollars" not in there  # the setting is off
    dash = json.loads((DEPLOY / "grafana" / "vastui-dashboard.json").read_text())
    empty = []
    for p in dash["panels"]:
        names = {n for t in p["targets"] for n in NAME.findall(t["expr"])}
        if names <= CLUSTER_ONLY:
            assert p["title"].startswith("curio's cluster: "), p["title"]
            continue
        if not names & there:
            empty.append(p["title"])
    assert empty == []


# what only a read of curio's cluster exports
CLUSTER_ONLY = {
    "vastui_cluster_psprove_tasks", "vastui_workers_draining", "vastui_cluster_requests",
}  # fmt: skip
