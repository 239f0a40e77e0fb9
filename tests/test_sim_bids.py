"""The simulated cloud's interruptible (bid) market, as the vastai CLI and vastui use it.

vast-api.md §14: `type: "bid"` search prices offers from `min_bid`; a create with `price` is a
bid; a higher bid pauses the instance (stopped, not destroyed, storage billed) and it resumes
when its bid wins again; `PUT /instances/bid_price/{id}/` changes a bid. The clock is a
ManualClock moved to the exact moments other bidders come and go (`BidMarket.next_change`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.helpers import sim_api
from vastsim import ManualClock, SimCloud, make_app
from vastsim.bids import SPREAD, BidMarket

KEY = "bid-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
HOUR = 3600.0


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


def make_cloud(clock: ManualClock, pressure: float) -> SimCloud:
    ports = iter(range(52_000, 53_000))
    return SimCloud(
        seed=5, clock=clock, hosts=40, api_key=KEY, ssh_port_allocator=lambda: next(ports),
        bid_pressure=pressure,
    )  # fmt: skip


@pytest.fixture
def cloud(clock: ManualClock) -> SimCloud:
    return make_cloud(clock, 3.0)


@pytest.fixture
async def api(cloud: SimCloud) -> AsyncIterator[httpx.AsyncClient]:
    async with sim_api(cloud, AUTH) as client:
        yield client


async def bid_offers(api: httpx.AsyncClient, **extra: Any) -> list[dict[str, Any]]:
    query = {"type": "bid", "allocated_storage": 20, "limit": 500, **extra}
    r = await api.post("/api/v0/bundles/", json=query)
    assert r.status_code == 200, r.text
    return list(r.json()["offers"])


async def show(api: httpx.AsyncClient, iid: int) -> dict[str, Any]:
    r = await api.get(f"/api/v0/instances/{iid}/")
    assert r.status_code == 200, r.text
    return dict(r.json()["instances"])


async def create(
    api: httpx.AsyncClient, offer_id: int, price: float, **body: Any
) -> httpx.Response:
    return await api.put(
        f"/api/v0/asks/{offer_id}/", json={"image": "img:1", "disk": 20, "price": price, **body}
    )


def jump_to_next_change(cloud: SimCloud, clock: ManualClock, machine_id: int) -> None:
    edge = cloud.bids.next_change(machine_id, clock.now(), clock.now() + 2000 * HOUR)
    assert edge is not None, "no other bidder in 2000 h"
    clock.set(edge + 1.0)


# -- the market itself --------------------------------------------------------------------------


def test_the_going_price_is_the_floor_times_the_highest_other_bid_and_the_seed_decides_it():
    a, b = BidMarket(9, 0.0, 2.0), BidMarket(9, 0.0, 2.0)
    times = [h * HOUR for h in range(0, 400, 7)]
    multiples = [a.multiple(123, t) for t in times]
    assert multiples == [b.multiple(123, t) for t in reversed(times)][::-1], "order-free"
    assert all(SPREAD[0] <= m <= SPREAD[1] for m in multiples)
    assert any(m > 1.0 for m in multiples) and any(m == 1.0 for m in multiples)
    assert BidMarket(10, 0.0, 2.0).multiple(123, 50 * HOUR) is not None
    going = a.going_price(123, 0.2, 5 * HOUR)
    assert a.wins(123, 0.2, going, 5 * HOUR) and not a.wins(123, 0.2, going - 0.0002, 5 * HOUR)
    nobody = BidMarket(9, 0.0, 0.0)
    assert {nobody.multiple(123, t) for t in times} == {1.0}
    assert nobody.next_change(123, 0.0, 1000 * HOUR) is None
    with pytest.raises(ValueError, match="bid pressure"):
        BidMarket(9, 0.0, float("nan"))


def test_more_pressure_means_more_time_outbid():
    def outbid_share(pressure: float) -> float:
        market = BidMarket(4, 0.0, pressure)
        samples = [(m, h * HOUR) for m in range(100, 140) for h in range(0, 300, 3)]
        return sum(market.multiple(m, t) > 1.0 for m, t in samples) / len(samples)

    low, high = outbid_share(0.5), outbid_share(4.0)
    assert 0.0 < low < high < 1.0


# -- search and create ---------------------------------------------------------------------------


async def test_a_bid_search_prices_offers_from_the_going_minimum_bid(api: httpx.AsyncClient):
    on_demand = {o["id"]: o for o in (await api.post("/api/v0/bundles/", json={"limit": 500,
                 "allocated_storage": 20})).json()["offers"]}  # fmt: skip
    offers = await bid_offers(api)
    assert offers and all(o["is_bid"] for o in offers)
    for o in offers:
        assert o["dph_total"] == pytest.approx(o["min_bid"] + o["storage_total_cost"], abs=1e-6)
        assert o["min_bid"] >= on_demand[o["id"]]["min_bid"]  # never below the host's floor
    # the interruptible alias, as vastai api/offers.py sends it before mapping
    assert {o["id"] for o in await bid_offers(api, type="interruptible")} == {
        o["id"] for o in offers
    }


async def test_a_winning_bid_runs_and_pays_its_bid(api: httpx.AsyncClient, cloud: SimCloud):
    offer = (await bid_offers(api))[0]
    price = round(offer["min_bid"] * 1.1, 4)
    r = await create(api, offer["id"], price)
    assert r.status_code == 200 and r.json()["success"] is True
    inst = await show(api, int(r.json()["new_contract"]))
    assert inst["is_bid"] is True and inst["dph_base"] == price
    assert inst["dph_total"] == pytest.approx(price + inst["storage_total_cost"], abs=1e-6)


async def test_a_losing_bid_leaves_a_stopped_contract_or_a_410_when_asked(
    api: httpx.AsyncClient, cloud: SimCloud
):
    offer = (await bid_offers(api))[0]
    low = round(offer["min_bid"] * 0.5, 4)
    r = await create(api, offer["id"], low, cancel_unavail=True)
    assert r.status_code == 410 and r.json()["error"] == "no_such_ask"
    assert not cloud.instances, "a refused bid creates nothing"
    r = await create(api, offer["id"], low)
    body = r.json()
    assert r.status_code == 200 and body["success"] is False and body["new_contract"]
    inst = await show(api, int(body["new_contract"]))
    assert inst["actual_status"] == "stopped" and inst["intended_status"] == "stopped"
    assert inst["cur_state"] == "stopped" and inst["ssh_port"] is None
    # It bills storage while it waits: the only charge.
    credit = cloud.user["credit"]
    cloud.clock.advance(HOUR)  # type: ignore[attr-defined]
    await show(api, int(body["new_contract"]))
    assert credit - cloud.user["credit"] == pytest.approx(inst["storage_total_cost"], rel=1e-3)


@pytest.mark.parametrize("price", ["x", 0.0, 200.0, "nan"])
async def test_a_bid_price_out_of_range_is_refused(api: httpx.AsyncClient, price: Any):
    offer = (await bid_offers(api))[0]
    r = await create(api, offer["id"], price)
    assert r.status_code == 400 and r.json()["error"] == "invalid_price"


# -- outbid, resume, change bid ------------------------------------------------------------------


async def test_outbid_stops_the_instance_bills_storage_and_a_win_resumes_it(
    api: httpx.AsyncClient, cloud: SimCloud, clock: ManualClock
):
    offer = min(await bid_offers(api), key=lambda o: o["min_bid"] / o["dph_base"])
    floor = cloud.offers[offer["id"]]["min_bid"]
    # At the floor: any other bidder outbids it, and it runs again only when all have left.
    while cloud.bids.multiple(offer["machine_id"], clock.now()) > 1.0:
        jump_to_next_change(cloud, clock, offer["machine_id"])
        offer = next(o for o in await bid_offers(api) if o["id"] == offer["id"])
    r = await create(api, offer["id"], floor)
    iid = int(r.json()["new_contract"])
    assert r.json()["success"] is True
    clock.advance(600)
    assert (await show(api, iid))["actual_status"] == "running"

    while cloud.bids.multiple(offer["machine_id"], clock.now()) == 1.0:
        jump_to_next_change(cloud, clock, offer["machine_id"])
    inst = await show(api, iid)
    assert (inst["actual_status"], inst["intended_status"], inst["cur_state"]) == (
        "stopped", "stopped", "stopped",
    )  # fmt: skip
    assert inst["min_bid"] > floor, "the going price is above its bid"
    assert cloud.instances[iid].interruptions == 1
    credit = cloud.user["credit"]
    clock.advance(60)
    await show(api, iid)
    stopped_rate = (credit - cloud.user["credit"]) * 60
    assert stopped_rate == pytest.approx(inst["storage_total_cost"], rel=1e-2)

    while cloud.bids.multiple(offer["machine_id"], clock.now()) > 1.0:
        jump_to_next_change(cloud, clock, offer["machine_id"])
    clock.advance(1.0)
    assert (await show(api, iid))["intended_status"] == "running"
    clock.advance(120)
    inst = await show(api, iid)
    assert inst["actual_status"] == "running" and cloud.instances[iid].interruptions == 1


async def test_raising_the_bid_over_the_going_price_resumes_at_once(
    api: httpx.AsyncClient, cloud: SimCloud, clock: ManualClock
):
    offer = (await bid_offers(api))[0]
    iid = int(
        (await create(api, offer["id"], round(offer["min_bid"] * 0.5, 4))).json()["new_contract"]
    )
    going = (await show(api, iid))["min_bid"]
    r = await api.put(
        f"/api/v0/instances/bid_price/{iid}/", json={"client_id": "me", "price": going}
    )
    assert r.json() == {"success": True}
    inst = await show(api, iid)
    assert inst["intended_status"] == "running" and inst["dph_base"] == going
    # No price: the going (winning) price, as the CLI's help says.
    r = await api.put(f"/api/v0/instances/bid_price/{iid}/", json={"client_id": "me"})
    assert r.json() == {"success": True}


async def test_change_bid_refuses_an_on_demand_contract_and_a_bad_price(api: httpx.AsyncClient):
    offer = (await bid_offers(api))[0]
    r = await api.put(f"/api/v0/asks/{offer['id']}/", json={"image": "img:1"})
    iid = int(r.json()["new_contract"])
    r = await api.put(f"/api/v0/instances/bid_price/{iid}/", json={"price": 0.2})
    assert r.status_code == 400 and "on-demand" in r.json()["msg"]
    other = (await bid_offers(api))[0]
    bid = int((await create(api, other["id"], other["min_bid"])).json()["new_contract"])
    r = await api.put(f"/api/v0/instances/bid_price/{bid}/", json={"price": 10_000})
    assert r.status_code == 400 and r.json()["error"] == "invalid_price"
    r = await api.put("/api/v0/instances/bid_price/999/", json={"price": 0.2})
    assert r.status_code == 404 and r.json()["error"] == "no_such_instance"


async def test_without_pressure_a_bid_is_never_interrupted(clock: ManualClock):
    cloud = make_cloud(clock, 0.0)
    transport = httpx.ASGITransport(app=make_app(cloud))
    async with httpx.AsyncClient(transport=transport, base_url="http://s", headers=AUTH) as api:
        offer = (await bid_offers(api))[0]
        iid = int((await create(api, offer["id"], offer["min_bid"])).json()["new_contract"])
        for _ in range(50):
            clock.advance(HOUR)
            assert (await show(api, iid))["actual_status"] == "running"
        assert cloud.instances[iid].interruptions == 0
