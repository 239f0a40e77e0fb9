"""The real VastClient against the simulated cloud: in-process (ASGI) and over real HTTP."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from vastsim import ManualClock, SimCloud, serve
from vastsim.demo import client_for_cloud
from vastui.vast.client import RetryPolicy, VastClient
from vastui.vast.errors import VastAuthError, VastNotFound, VastUnreachable

FILTER = "gpu_ram>12.5 cpu_ram>=128 num_gpus=1"


async def no_sleep(_seconds: float) -> None:
    return None


def fast(**kwargs) -> dict:
    return {
        "pacing": {},
        "sleep": no_sleep,
        "retry": RetryPolicy(max_attempts=kwargs.pop("attempts", 5), create_lookups=3),
        **kwargs,
    }


async def run_until_status(cloud: SimCloud, client: VastClient, iid: int, status: str) -> None:
    for _ in range(100):
        inst = await client.show_instance(iid)
        if inst is not None and inst.actual_status == status:
            return
        cloud.clock.advance(15)
    raise AssertionError(f"instance {iid} never reached {status}")


async def roundtrip(cloud: SimCloud, client: VastClient) -> None:
    result = await client.search_offers(FILTER, order="dph", limit=20)
    assert result.offers and not result.rejected
    assert all(o.num_gpus == 1 and o.cpu_ram_gb >= 128 for o in result.offers)
    prices = [o.dph_total for o in result.offers]
    assert prices == sorted(prices)
    offer = result.offers[0]

    created = await client.create_instance(
        offer.id, label="vastui-main-t1", image="img:1", disk_gb=250, env={"MIN_RATE": "29.0"}
    )
    assert created.instance_id != offer.id and not created.recovered_by_label
    again = await client.search_offers(FILTER, order="dph", limit=20)
    assert offer.id not in {o.id for o in again.offers}, "a rented offer leaves the market"
    with pytest.raises(VastNotFound):
        await client.create_instance(offer.id, label="vastui-main-t2", image="i", disk_gb=250)

    listed = await client.list_instances()
    assert [(i.id, i.label) for i in listed] == [(created.instance_id, "vastui-main-t1")]
    inst = listed[0]
    assert inst.machine_id == offer.machine_id and inst.ssh_endpoint() is None
    assert inst.env["MIN_RATE"] == "29.0" and inst.image == "img:1"

    await run_until_status(cloud, client, created.instance_id, "running")
    inst = await client.show_instance(created.instance_id)
    assert inst is not None and inst.ssh_endpoint() is not None
    assert inst.ssh_endpoint()[0] == "127.0.0.1"

    await client.set_label(created.instance_id, "vastui-main-t1b")
    assert (await client.find_by_label("vastui-main-t1b"))[0].id == created.instance_id

    logs = await client.request_logs(created.instance_id, tail=50)
    assert isinstance(logs, str) and logs.strip()

    key = await client.ensure_ssh_key("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFake vastui@test")
    same = await client.ensure_ssh_key("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFake other-comment")
    assert key.id == same.id and len(await client.list_ssh_keys()) == 1

    user = await client.current_user()
    assert user.credit is not None

    assert await client.destroy_instance(created.instance_id) is True
    assert await client.destroy_instance(created.instance_id) is False
    assert await client.show_instance(created.instance_id) is None
    assert await client.list_instances() == []


@pytest.fixture
def cloud() -> SimCloud:
    return SimCloud(seed=3, clock=ManualClock())


async def test_roundtrip_in_process(cloud: SimCloud):
    async with client_for_cloud(cloud, **fast()) as client:
        await roundtrip(cloud, client)


@pytest.fixture
async def served(cloud: SimCloud) -> AsyncIterator[str]:
    port: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(serve(cloud, port=0, ready=port.set_result))
    try:
        yield f"http://127.0.0.1:{await asyncio.wait_for(port, 10)}"
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_roundtrip_over_real_http(cloud: SimCloud, served: str):
    async with VastClient(cloud.api_key, served, **fast()) as client:
        await roundtrip(cloud, client)


async def test_bad_key_over_http(served: str):
    async with VastClient("wrong-key", served, **fast()) as client:
        with pytest.raises(VastAuthError) as info:
            await client.list_instances()
    assert info.value.status == 401 and info.value.msg == "Invalid user key"


async def test_scripted_throttling_and_5xx_are_survived(cloud: SimCloud):
    cloud.faults.script("search", ["429-text", "429-json+retry", "503", "502"])
    async with client_for_cloud(cloud, **fast(attempts=5)) as client:
        result = await client.search_offers(FILTER)
    assert result.offers
    assert [k for _, k in cloud.faults.injected][:4] == ["429-text", "429-json+retry", "503", "502"]


@pytest.mark.parametrize("kind", ["lost", "lost-502", "lost-504"])
async def test_lost_create_answer_yields_exactly_one_instance(cloud: SimCloud, kind: str):
    cloud.faults.script("create", [kind])
    async with client_for_cloud(cloud, **fast()) as client:
        offer = (await client.search_offers(FILTER, order="dph")).offers[0]
        result = await client.create_instance(offer.id, label="vastui-main-x", image="i", disk_gb=1)
        instances = await client.list_instances()
    assert result.recovered_by_label
    assert [i.id for i in instances] == [result.instance_id]


async def test_create_answer_lost_to_timeout_yields_exactly_one_instance(cloud: SimCloud):
    cloud.faults.script("create", ["lost-timeout"])
    cloud.faults.lost_delay = 30.0  # the client gives up long before
    async with client_for_cloud(cloud, **fast(timeout=0.2)) as client:
        offer = (await client.search_offers(FILTER, order="dph")).offers[0]
        result = await client.create_instance(offer.id, label="vastui-main-y", image="i", disk_gb=1)
        instances = await client.list_instances()
    assert result.recovered_by_label
    assert [i.label for i in instances] == ["vastui-main-y"]


async def test_heavy_fault_profile_is_survived_with_bounded_retries():
    cloud = SimCloud(seed=11, clock=ManualClock(), faults="heavy")
    cloud.faults.slow_delay = 0.0
    async with client_for_cloud(cloud, **fast(attempts=8)) as client:
        rented = []
        for n in range(6):
            offers = (await client.search_offers(FILTER, order="dph")).offers
            result = await client.create_instance(
                offers[0].id, label=f"vastui-main-h{n}", image="i", disk_gb=1
            )
            rented.append(result.instance_id)
        listed = await client.list_instances()
        labels = sorted(i.label for i in listed)
        for iid in rented:
            await client.destroy_instance(iid)
        remaining = await client.list_instances()
    assert labels == [f"vastui-main-h{n}" for n in range(6)], "exactly one instance per intent"
    assert remaining == []
    kinds = {k for _, k in cloud.faults.injected}
    assert any(k.startswith("429") for k in kinds) and kinds & {"502", "503", "504", "lost"}


async def test_unreachable_server_is_one_line_error():
    async with VastClient("k", "http://127.0.0.1:9", **fast(attempts=2)) as client:
        with pytest.raises(
            VastUnreachable, match=r"^Vast API unreachable at http://127\.0\.0\.1:9: "
        ) as info:
            await client.current_user()
    assert "\n" not in str(info.value)
