"""Unit tests of the simulated Vast.ai cloud (market, query evaluation, state)."""

from __future__ import annotations

from collections import Counter

import pytest

from vastsim import ManualClock, SimCloud, generate_market
from vastsim.cloud import ApiError
from vastsim.market import RAM_CLASSES_GIB
from vastsim.query_eval import QueryError, search_offers

NOW = 1_790_000_000.0

# Every offer field of vast-api.md §3.3 (units/types checked below for the important ones).
OFFER_FIELDS = [
    "id",
    "ask_contract_id",
    "bundle_id",
    "bundled_results",
    "machine_id",
    "host_id",
    "gpu_name",
    "num_gpus",
    "gpu_ram",
    "gpu_total_ram",
    "gpu_frac",
    "gpu_arch",
    "compute_cap",
    "cuda_max_good",
    "driver_version",
    "driver_vers",
    "cpu_name",
    "cpu_arch",
    "cpu_cores",
    "cpu_cores_effective",
    "cpu_ghz",
    "cpu_ram",
    "disk_space",
    "disk_bw",
    "disk_name",
    "inet_up",
    "inet_down",
    "inet_up_cost",
    "inet_down_cost",
    "direct_port_count",
    "static_ip",
    "public_ipaddr",
    "pci_gen",
    "pcie_bw",
    "gpu_lanes",
    "gpu_mem_bw",
    "bw_nvlink",
    "dph_base",
    "storage_cost",
    "storage_total_cost",
    "dph_total",
    "min_bid",
    "discounted_dph_total",
    "discount_rate",
    "dlperf",
    "dlperf_per_dphtotal",
    "total_flops",
    "flops_per_dphtotal",
    "score",
    "reliability",
    "reliability2",
    "verification",
    "vericode",
    "rentable",
    "rented",
    "is_bid",
    "external",
    "hosting_type",
    "geolocation",
    "geolocode",
    "duration",
    "start_date",
    "end_date",
    "os_version",
    "mobo_name",
    "has_avx",
    "vms_enabled",
    "gpu_display_active",
    "gpu_max_power",
    "gpu_max_temp",
    "cluster_id",
    "avail_vol_ask_id",
    "avail_vol_dph",
    "avail_vol_size",
    "nw_disk_min_bw",
    "nw_disk_max_bw",
    "nw_disk_avg_bw",
    "resource_type",
    "search",
    "instance",
    "rn",
    "dph_total_adj",
    "internet_up_cost_per_tb",
    "internet_down_cost_per_tb",
    "time_remaining",
    "time_remaining_isbid",
]


def all_offers(machines):
    return [o for m in machines for o in m.offers]


def test_market_deterministic_per_seed():
    a = generate_market(7, clock_now=NOW)
    b = generate_market(7, clock_now=NOW)
    c = generate_market(8, clock_now=NOW)
    assert all_offers(a) == all_offers(b)
    assert [m.base_rate for m in a] == [m.base_rate for m in b]
    assert all_offers(a) != all_offers(c)


def test_market_variety_and_ids():
    machines = generate_market(0, clock_now=NOW)
    offers = all_offers(machines)
    assert 150 <= len(offers) <= 400
    assert len({o["gpu_name"] for o in offers}) >= 5
    assert len({m.ram_gib for m in machines}) >= 4
    assert {m.ram_gib for m in machines} <= set(RAM_CLASSES_GIB)
    per_host: dict[int, set[int]] = {}
    for m in machines:
        per_host.setdefault(m.host_id, set()).add(m.machine_id)
    assert any(len(v) >= 2 for v in per_host.values())
    assert any(len(m.offers) >= 3 for m in machines)
    host_ids = {m.host_id for m in machines}
    machine_ids = {m.machine_id for m in machines}
    offer_ids = {o["id"] for o in offers}
    assert len(machine_ids) == len(machines)
    assert len(offer_ids) == len(offers)
    assert not host_ids & machine_ids
    assert not offer_ids & (host_ids | machine_ids)
    assert all(10_000 <= i <= 99_999 for i in machine_ids)
    assert all(100_000 <= i <= 999_999 for i in host_ids)
    for m in machines:
        assert m.base_rate > 0
        assert "base_rate" in m.perf
        assert 0 < m.rate_for(1) <= m.rate_for()


def test_offer_fields_and_units():
    offers = all_offers(generate_market(3, clock_now=NOW))
    for o in offers:
        missing = [f for f in OFFER_FIELDS if f not in o]
        assert not missing, missing
        assert o["id"] == o["ask_contract_id"]
        assert isinstance(o["gpu_ram"], int) and isinstance(o["cpu_ram"], int)
        assert o["gpu_total_ram"] == o["gpu_ram"] * o["num_gpus"]
        assert isinstance(o["disk_space"], float)
        assert o["storage_total_cost"] == pytest.approx(5.0 * o["storage_cost"] / 720, abs=1e-6)
        assert o["dph_total"] == pytest.approx(o["dph_base"] + o["storage_total_cost"], abs=1e-6)
        assert o["cuda_max_good"] in (12.4, 12.8, 13.0, 13.1)
        assert 0.90 <= o["reliability"] <= 0.9995
        assert o["geolocation"].rsplit(", ", 1)[1].isupper()
        assert 50 <= o["inet_down"] <= 10000
        assert o["end_date"] > NOW > o["start_date"]
        assert o["cpu_cores_effective"] == pytest.approx(o["cpu_cores"] * o["gpu_frac"], abs=0.1)
    vram = {o["gpu_name"]: o["gpu_ram"] for o in offers}
    assert vram.get("RTX 4090", 24564) == 24564
    assert vram.get("RTX PRO 6000 WS", 97887) == 97887
    verified = sum(o["verification"] == "verified" for o in offers)
    assert verified > len(offers) * 0.7


def test_market_scales():
    # A market of thousands of hosts keeps every id unique within its range (no collisions, no
    # exhausted range) and 1-5 machines per host, 1-4 offers per machine.
    machines = generate_market(1, hosts=2000, clock_now=NOW)
    offers = all_offers(machines)
    assert len(offers) >= 10_000
    assert len({m.host_id for m in machines}) == 2000
    assert len({m.machine_id for m in machines}) == len(machines)
    assert len({o["id"] for o in offers}) == len({o["bundle_id"] for o in offers}) == len(offers)
    per_host = Counter(m.host_id for m in machines)
    assert set(per_host.values()) <= {1, 2, 3, 4, 5}
    assert all(1 <= len(m.offers) <= 4 for m in machines)
    assert all(o["machine_id"] == m.machine_id for m in machines for o in m.offers)


OFFERS = all_offers(generate_market(0, clock_now=NOW))


def ids(rows):
    return {o["id"] for o in rows}


def test_search_numeric_strings_and_operators():
    one = search_offers({"num_gpus": {"eq": "1"}}, OFFERS)
    assert one and all(o["num_gpus"] == 1 for o in one)
    assert ids(search_offers({"num_gpus": {"neq": "1"}}, OFFERS)) == ids(OFFERS) - ids(one)
    gt = search_offers({"reliability": {"gt": "0.98"}}, OFFERS)
    assert all(o["reliability"] > 0.98 for o in gt)
    gte = search_offers({"cuda_max_good": {"gte": "12.8"}}, OFFERS)
    assert gte and all(o["cuda_max_good"] >= 12.8 for o in gte)
    lt = search_offers({"gpu_ram": {"lt": 24000.0}}, OFFERS)
    assert all(o["gpu_ram"] < 24000 for o in lt)
    lte = search_offers({"cpu_ram": {"lte": "131072"}}, OFFERS)
    assert all(o["cpu_ram"] <= 131072 for o in lte)
    inn = search_offers({"gpu_name": {"in": ["RTX 4090", "RTX 5090"]}}, OFFERS)
    assert inn and {o["gpu_name"] for o in inn} <= {"RTX 4090", "RTX 5090"}
    notin = search_offers({"num_gpus": {"notin": ["1", "2"]}}, OFFERS)
    assert notin and all(o["num_gpus"] not in (1, 2) for o in notin)
    both = search_offers({"num_gpus": {"gte": 2, "lte": "4"}}, OFFERS)
    assert both and all(2 <= o["num_gpus"] <= 4 for o in both)


def test_search_bool_fields_alias_and_unknown():
    q = {
        "verified": {"eq": True},
        "external": {"eq": False},
        "rentable": {"eq": True},
        "rented": {"eq": False},
        "no_such_field": {"eq": 3},
        "has_avx": True,
    }
    rows = search_offers(q, OFFERS)
    assert rows and all(o["verification"] == "verified" and not o["external"] for o in rows)
    unverified = search_offers({"verified": {"eq": "false"}}, OFFERS)
    assert unverified and all(o["verification"] != "verified" for o in unverified)
    cheap = search_offers({"dph": {"lt": "0.3"}}, OFFERS)
    assert cheap and all(o["dph_total"] < 0.3 for o in cheap)


def test_search_geolocation_by_country():
    us = search_offers({"geolocation": {"eq": "US"}}, OFFERS)
    assert us and all(o["geolocation"].endswith(", US") for o in us)
    na = search_offers({"geolocation": {"in": ["US", "CA"]}}, OFFERS)
    assert ids(us) < ids(na)
    rest = search_offers({"geolocation": {"notin": ["US", "CA"]}}, OFFERS)
    assert ids(rest) == ids(OFFERS) - ids(na)
    assert all(not o["geolocation"].endswith((", US", ", CA")) for o in rest)
    exact = search_offers({"geolocation": {"eq": "Texas, US"}}, OFFERS)
    assert all(o["geolocation"] == "Texas, US" for o in exact)


def test_search_allocated_storage_reprices_before_filtering():
    o = OFFERS[0]
    big = search_offers({"id": {"eq": o["id"]}, "allocated_storage": 200}, OFFERS)[0]
    expected_storage = 200 * o["storage_cost"] / 720
    assert big["storage_total_cost"] == pytest.approx(expected_storage, abs=1e-6)
    assert big["dph_total"] == pytest.approx(o["dph_base"] + expected_storage, abs=1e-6)
    # A dph_total filter between the 5 GB and the 200 GB price only matches at 5 GB.
    limit = (o["dph_total"] + big["dph_total"]) / 2
    q = {"id": {"eq": o["id"]}, "dph_total": {"lt": limit}}
    assert search_offers({**q, "allocated_storage": 5.0}, OFFERS)
    assert not search_offers({**q, "allocated_storage": 200}, OFFERS)
    assert OFFERS[0]["storage_total_cost"] == pytest.approx(
        5 * OFFERS[0]["storage_cost"] / 720, abs=1e-6
    )


def test_search_order_limit_type():
    rows = search_offers({"order": [["dph_total", "asc"]], "limit": 5}, OFFERS)
    assert len(rows) == 5
    prices = [r["dph_total"] for r in rows]
    assert prices == sorted(prices)
    assert prices[0] == min(o["dph_total"] for o in OFFERS)
    rows = search_offers({"order": [["num_gpus", "desc"], ["dph_total", "asc"]]}, OFFERS)
    keys = [(-r["num_gpus"], r["dph_total"]) for r in rows]
    assert keys == sorted(keys)
    default = search_offers({"limit": "3"}, OFFERS)
    assert [r["score"] for r in default] == sorted((r["score"] for r in default), reverse=True)
    bid = search_offers({"type": "bid", "id": {"eq": OFFERS[0]["id"]}}, OFFERS)[0]
    assert bid["dph_total"] == pytest.approx(OFFERS[0]["min_bid"] + bid["storage_total_cost"])
    assert bid["is_bid"] is True


@pytest.mark.parametrize(
    "query",
    [[], "x", {"num_gpus": {"like": 1}}, {"num_gpus": 3, "gpu_ram": "x", "type": "spot"}],
)
def test_search_malformed(query):
    with pytest.raises(QueryError) as ei:
        search_offers(query, OFFERS)
    assert ei.value.status == 400
    assert ei.value.body["success"] is False
    assert ei.value.body["msg"].startswith("Invalid query")


def make_cloud(**kw):
    clock = ManualClock(NOW)
    return SimCloud(seed=5, clock=clock, **kw), clock


def test_create_takes_offer_off_market():
    cloud, _ = make_cloud()
    offer = cloud.search({"limit": 1})["offers"][0]
    res = cloud.create(offer["id"], {"image": "img:1"})
    assert res["success"] is True and res["new_contract"] not in cloud.offers
    assert res["new_contract"] != offer["id"] and res["instance_api_key"]
    assert cloud.offers[offer["id"]]["rentable"] is False
    assert offer["id"] not in ids(cloud.search({})["offers"])
    with pytest.raises(ApiError) as ei:
        cloud.create(offer["id"], {"image": "img:1"})
    assert ei.value.status == 404
    assert ei.value.body == {
        "success": False,
        "error": "no_such_ask",
        "msg": f"No ask by id {offer['id']} is available.",
        "ask_id": offer["id"],
    }
    with pytest.raises(ApiError) as ei:
        cloud.create(offer["id"], {"image": "img:1", "cancel_unavail": True})
    assert ei.value.status == 410 and ei.value.body["error"] == "no_such_ask"
    cloud.destroy(res["new_contract"])
    assert offer["id"] in ids(cloud.search({})["offers"])


async def test_lifecycle_and_on_running_hook():
    seen = []

    async def hook(inst):
        seen.append(inst)

    cloud, clock = make_cloud(on_running=hook)
    oid = cloud.search({"limit": 1})["offers"][0]["id"]
    iid = cloud.create(oid, {"image": "repo/img:tag", "runtype": "ssh_direc ssh_proxy"})[
        "new_contract"
    ]
    statuses = []
    for _ in range(30):
        await cloud.tick()
        inst = cloud.show(iid)["instances"]
        statuses.append(inst["actual_status"])
        if inst["actual_status"] != "running":
            assert inst["ssh_port"] is None and inst["ports"] is None
        clock.advance(10)
    assert statuses[0] is None and "loading" in statuses and statuses[-1] == "running"
    first_loading = statuses.index("loading")
    assert set(statuses[:first_loading]) == {None}
    assert statuses.index("running") > first_loading
    assert len(seen) == 1 and seen[0]["id"] == iid
    run = cloud.show(iid)["instances"]
    assert run["status_msg"] == "success, running repo/img_tag/ssh"
    assert run["ports"] == {"22/tcp": [{"HostIp": "0.0.0.0", "HostPort": str(run["ssh_port"])}]}
    cloud.force_status(iid, "offline")
    assert cloud.show(iid)["instances"]["actual_status"] == "offline"
    assert cloud.show(iid)["instances"]["ports"] is None
    cloud.force_status(iid, None)
    assert cloud.show(iid)["instances"]["actual_status"] == "running"


def test_ssh_port_allocator_and_stop_start():
    ports = iter([50001, 50002])
    cloud, clock = make_cloud(ssh_port_allocator=lambda: next(ports))
    o1, o2 = cloud.search({"limit": 2})["offers"]
    a = cloud.create(o1["id"], {"image": "x"})["new_contract"]
    b = cloud.create(o2["id"], {"image": "x"})["new_contract"]
    clock.advance(600)
    assert [cloud.show(i)["instances"]["ssh_port"] for i in (a, b)] == [50001, 50002]
    assert cloud.manage(a, {"state": "stopped"}) == {"success": True}
    inst = cloud.show(a)["instances"]
    assert (inst["actual_status"], inst["intended_status"], inst["cur_state"]) == (
        "exited",
        "stopped",
        "stopped",
    )
    cloud.force_resources_unavailable(a)
    assert cloud.manage(a, {"state": "running"})["error"] == "resources_unavailable"
    cloud.force_resources_unavailable(a, False)
    assert cloud.manage(a, {"state": "running"}) == {"success": True}
    clock.advance(120)
    assert cloud.show(a)["instances"]["actual_status"] == "running"


def test_heavy_profile_fails_some_instances():
    cloud, clock = make_cloud(faults="heavy", hosts=80)
    offers = cloud.search({"limit": 60})["offers"]
    made = [cloud.create(o["id"], {"image": "x"})["new_contract"] for o in offers]
    clock.advance(400)
    assert all(cloud.show(i)["instances"]["actual_status"] == "running" for i in made)
    clock.advance(4000)
    final = [cloud.show(i)["instances"]["actual_status"] for i in made]
    assert {"exited", "offline"} & set(final)
    assert final.count("running") > len(made) // 2


async def test_a_stopped_instance_gives_its_gpus_back_and_its_start_waits_for_them():
    # vast-api.md §7: a stop keeps the disk, not the GPUs; a start then may be queued
    cloud, clock = make_cloud()
    offer = cloud.search({"limit": 1})["offers"][0]
    a = cloud.create(offer["id"], {"image": "x"})["new_contract"]
    clock.advance(600)
    assert cloud.manage(a, {"state": "stopped"}) == {"success": True}
    assert offer["id"] in ids(cloud.search({})["offers"]), "its GPUs are on the market again"
    b = cloud.create(offer["id"], {"image": "x"})["new_contract"]  # another renter takes them
    answer = cloud.manage(a, {"state": "running"})
    assert answer["success"] is False and answer["error"] == "resources_unavailable"
    await cloud.tick()
    assert cloud.show(a)["instances"]["actual_status"] != "running"
    cloud.destroy(b)
    await cloud.tick()  # the queued start goes ahead once the GPUs are free
    clock.advance(120)
    await cloud.tick()
    assert cloud.show(a)["instances"]["actual_status"] == "running"
    assert offer["id"] not in ids(cloud.search({})["offers"])
