"""The engine's metrics end to end (issue 20): the demo engine with ``--metrics`` serves, on
loopback, what prometheus-client's own parser reads, with the fleet's and the market's series;
without it nothing listens."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import httpx
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from tests.helpers import e2e_config
from tests.test_metrics import W1, W2, sample, with_auto
from vastui.backend import Options
from vastui.engine.runtime import RunOptions, engine_runtime
from vastui.metrics import FleetCollector


async def test_the_demo_engine_serves_its_metrics_on_loopback(demo_state: Path) -> None:
    opts = Options(config=e2e_config(), db=demo_state / "fleet.db", demo=True, seed=8)
    run = RunOptions(seed=8, target_workers=2, dry_run=True, metrics="127.0.0.1:0")
    async with engine_runtime(opts, run) as rt:
        server = rt.engine.monitor.server
        assert server is not None and server.address is not None
        host, port = server.address
        assert host == "127.0.0.1"
        await rt.engine.step()
        async with httpx.AsyncClient() as http:
            answer = await http.get(f"http://127.0.0.1:{port}/metrics", timeout=60)
        assert answer.status_code == 200
        families = {f.name: f for f in text_string_to_metric_families(answer.text)}
        for name in ("vastui_up", "vastui_engine_heartbeat_timestamp_seconds",
                     "vastui_target_workers", "vastui_workers", "vastui_proofs",
                     "vastui_fleet_dollars_per_hour", "vastui_spend_dollars", "vastui_kills",
                     "vastui_bans", "vastui_rents", "vastui_vast_api_errors",
                     "vastui_provision_blocked", "vastui_market_offers",
                     "vastui_market_dollars_per_hour"):  # fmt: skip
            assert name in families, name
        target = families["vastui_target_workers"].samples[0].value
        assert target == 2
        blocked = {
            s.labels["reason"]: s.value for s in families["vastui_provision_blocked"].samples
        }
        assert blocked["dry_run"] == 1 and sum(blocked.values()) == 1
        offers = families["vastui_market_offers"].samples
        assert offers and all(s.value >= 1 for s in offers)
        bands = families["vastui_market_dollars_per_hour"].samples
        assert {s.labels["percentile"] for s in bands} == {"10", "50", "90"}
        # the demo's credit, read from the simulated account
        assert families["vastui_account_credit_dollars"].samples[0].value > 0
        if PROMTOOL:
            assert promtool_check(answer.text) == ""


# Prometheus's own linter (promtool check metrics, client_golang's promlint) holds an exposition
# to its rules; .ci/run installs it (Debian's prometheus package), elsewhere its checks skip.
PROMTOOL = shutil.which("promtool")


def promtool_check(exposition: str) -> str:
    """What promtool says of an exposition: "" when it passes (status 0); its lines otherwise."""
    assert PROMTOOL is not None
    done = subprocess.run(
        [PROMTOOL, "check", "metrics"], input=exposition, capture_output=True, text=True,
        timeout=60, check=False,
    )  # fmt: skip
    said = (done.stdout + done.stderr).strip()
    return "" if done.returncode == 0 else f"status {done.returncode}: {said}"


@pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed (.ci/run installs it)")
def test_promtool_passes_every_series_the_engine_can_export() -> None:
    """Every series of the fixture fleet (the cluster's and the automatic target's too, which a
    dry-run demo does not export) passes promtool; a gauge with a quantile label does not."""
    c = FleetCollector()
    c.update(with_auto(sample((W1, W2))))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(c)
    text = generate_latest(registry).decode()
    assert "vastui_fleet_utilisation_ratio" in text and "vastui_cluster_requests" in text
    assert promtool_check(text) == ""
    # the check can fail: issue 31 item 7's exposition, a gauge labelled quantile
    wrong = '# HELP x_dollars a band\n# TYPE x_dollars gauge\nx_dollars{quantile="0.5"} 1.0\n'
    assert promtool_check(wrong).startswith("status ")


async def test_without_metrics_nothing_listens(demo_state: Path) -> None:
    opts = Options(config=e2e_config(), db=demo_state / "fleet.db", demo=True, seed=8)
    async with engine_runtime(opts, RunOptions(seed=8, target_workers=0)) as rt:
        assert rt.engine.monitor.server is None and rt.engine.monitor.collector is None
