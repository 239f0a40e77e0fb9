"""The simulated cloud bills as Vast does (vast-api.md §6, §7, §11): storage while an instance
loads or is stopped, the GPU while it runs, and the bytes its container moves at the offer's
$/GB, metered at its interface counters (the stand-ins count into them: _simlib.net_count). A
charge outlives its instance, and ``GET /api/v0/charges/`` lists it (vastai api/billing.py
show_invoices_v1)."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
import pytest

from vastsim import ManualClock, SimCloud
from vastsim.app import make_app
from vastsim.standins import _simlib

NOW = 1_790_000_000.0


def test_the_interface_counters_add_up_across_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WORKER_ROOT", str(tmp_path))

    def count() -> None:
        for _ in range(50):
            _simlib.net_count(rx=1000, tx=3)

    threads = [threading.Thread(target=count) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stats = tmp_path / _simlib.NET_STATS
    assert int((stats / "rx_bytes").read_text()) == 6 * 50 * 1000
    assert int((stats / "tx_bytes").read_text()) == 6 * 50 * 3
    _simlib.net_count(rx=0, tx=-5)  # nothing counted, nothing broken
    assert int((stats / "tx_bytes").read_text()) == 900


class Meter:
    """An instance's interface counters, as the worker host reads them."""

    def __init__(self) -> None:
        self.counters: dict[int, tuple[int, int]] = {}

    def __call__(self, iid: int) -> tuple[int, int] | None:
        return self.counters.get(iid)


def priced_cloud() -> tuple[SimCloud, ManualClock, Meter, int, dict]:
    clock = ManualClock(NOW)
    cloud = SimCloud(seed=5, clock=clock)
    meter = Meter()
    cloud.net_meter = meter
    offer = next(o for o in cloud.search({})["offers"] if o["inet_down_cost"] > 0.005)
    iid = cloud.create(offer["id"], {"image": "img:1"})["new_contract"]
    return cloud, clock, meter, iid, cloud.instances[iid].offer


async def test_storage_while_loading_gpu_while_running_bytes_at_the_offers_price() -> None:
    cloud, clock, meter, iid, offer = priced_cloud()
    inst = cloud.instances[iid]
    loading = inst.t_running - inst.created_at
    clock.advance(loading)
    await cloud.tick()
    charge = cloud.charges[iid]
    assert charge.gpu == 0.0
    assert charge.storage == pytest.approx(offer["storage_total_cost"] * loading / 3600)
    meter.counters[iid] = (10 * 10**9, 10**6)
    clock.advance(3600)
    await cloud.tick()
    assert charge.gpu == pytest.approx(offer["dph_total"])
    assert charge.bw_down == pytest.approx(10 * offer["inet_down_cost"])
    assert charge.bw_up == pytest.approx(0.001 * offer["inet_up_cost"])
    # a restarted container's counters start again from 0: all of it is new
    meter.counters[iid] = (2 * 10**9, 0)
    await cloud.tick()
    assert charge.rx_bytes == 12 * 10**9
    credit_before = cloud.user["credit"]
    amount_before = charge.amount
    clock.advance(60)
    cloud.destroy(iid)
    # the destroy bills up to its moment, and the charge outlives the instance
    # (the credit is kept to 6 decimals)
    assert charge.amount - amount_before == pytest.approx(
        credit_before - cloud.user["credit"], abs=2e-6
    )
    assert iid not in cloud.instances and cloud.charges[iid] is charge
    assert charge.end == pytest.approx(clock.now())


async def test_the_charges_endpoint_lists_each_instance_with_its_items() -> None:
    cloud, clock, meter, iid, offer = priced_cloud()
    meter.counters[iid] = (5 * 10**9, 0)
    clock.advance(900)
    await cloud.tick()
    transport = httpx.ASGITransport(app=make_app(cloud))
    async with httpx.AsyncClient(transport=transport, base_url="http://sim") as api:
        r = await api.get("/api/v0/charges/", headers={"Authorization": f"Bearer {cloud.api_key}"})
        assert r.status_code == 200, r.text
        [row] = r.json()["results"]
        assert row["type"] == "instance" and row["source"] == f"instance-{iid}"
        assert row["amount"] == pytest.approx(cloud.charges[iid].amount, abs=1e-6)
        items = {i["description"].split()[0]: i["amount"] for i in row["items"]}
        assert items["Download"] == pytest.approx(5 * offer["inet_down_cost"], abs=1e-6)
        assert sum(i["amount"] for i in row["items"]) == pytest.approx(row["amount"], abs=1e-5)
        assert (await api.get("/api/v0/charges/")).status_code == 401  # the key is required
