"""HTTP-level tests of the simulated Vast.ai API (in-process ASGI + one real uvicorn run)."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from vastsim import ManualClock, SimCloud, make_app, serve

KEY = "sim-key"
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture
def clock():
    return ManualClock()


@pytest.fixture
def cloud(clock):
    return SimCloud(seed=11, clock=clock, hosts=60)


@pytest.fixture
async def client(cloud):
    transport = httpx.ASGITransport(app=make_app(cloud))
    async with httpx.AsyncClient(
        transport=transport, base_url="http://vast.sim", headers=AUTH
    ) as c:
        yield c


async def offers(client, query=None):
    r = await client.post("/api/v0/bundles/", json=query or {})
    assert r.status_code == 200
    return r.json()["offers"]


async def create(client, offer_id, **body):
    r = await client.put(f"/api/v0/asks/{offer_id}/", json={"image": "img:1", **body})
    assert r.status_code == 200, r.text
    return r.json()["new_contract"]


async def test_search_endpoints_content_type_and_no_auth(client):
    q = {
        "verified": {"eq": True},
        "external": {"eq": False},
        "rentable": {"eq": True},
        "num_gpus": {"eq": "1"},
        "order": [["dph_total", "asc"]],
        "type": "on-demand",
        "limit": 3,
        "allocated_storage": 5.0,
    }
    r = await client.post("/api/v0/bundles/", json=q)
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/json"
    rows = r.json()["offers"]
    assert len(rows) == 3 and all(o["num_gpus"] == 1 for o in rows)
    r2 = await client.get("/api/v0/bundles", params={"q": json.dumps(q)})
    assert r2.json()["offers"] == rows
    r3 = await client.put("/api/v0/search/asks/", json={"select_cols": ["*"], "q": q})
    assert r3.json()["offers"] == rows
    r4 = await client.get(
        "/api/v0/bundles/", params={"q": json.dumps(q), "select_cols": '["id","gpu_name"]'}
    )
    assert set(r4.json()["offers"][0]) == {"id", "gpu_name"}
    r5 = await client.post("/api/v0/bundles/", json=q, headers={"Authorization": ""})
    assert r5.status_code == 200  # search is allowed without a key


async def test_bad_bodies(client):
    r = await client.post("/api/v0/bundles/", json=[1, 2])
    assert r.status_code == 400
    assert r.json()["msg"] == "Invalid query: must be dict of conditions"
    r = await client.post(
        "/api/v0/bundles/", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert r.status_code == 400
    assert r.json() == {"success": False, "error": "invalid_request", "msg": "Invalid json body"}
    r = await client.get("/api/v0/instances/abc/")
    assert r.status_code == 400 and r.json()["error"] == "invalid_args"
    r = await client.get("/api/v0/nope/")
    assert r.status_code == 404 and r.headers["content-type"] == "application/json"


@pytest.mark.parametrize("auth", [{"Authorization": "Bearer wrong"}, {"Authorization": ""}])
async def test_auth_error(client, auth):
    r = await client.get("/api/v1/instances/", headers=auth)
    assert r.status_code == 401
    assert r.headers["content-type"] == "application/json"
    assert r.json() == {"success": False, "error": "auth_error", "msg": "Invalid user key"}


async def test_api_key_query_param(client):
    r = await client.get(
        "/api/v0/users/current", params={"api_key": KEY}, headers={"Authorization": ""}
    )
    assert r.status_code == 200


async def test_create_and_second_create(client):
    offer = (await offers(client, {"limit": 1}))[0]
    r = await client.put(
        f"/api/v0/asks/{offer['id']}/",
        json={
            "client_id": "me",
            "image": "pytorch/pytorch:2.4.0",
            "env": {"TZ": "UTC", "-p 8080:8080": "1"},
            "price": None,
            "disk": 40,
            "label": "train-1",
            "onstart": "env >> /etc/environment",
            "runtype": "ssh_direc ssh_proxy",
            "cancel_unavail": False,
            "template_hash_id": None,
        },
    )
    assert r.status_code == 200
    body = r.json()
    assert body["success"] is True and body["new_contract"] != offer["id"]
    iid = body["new_contract"]
    assert offer["id"] not in {o["id"] for o in await offers(client)}
    r = await client.put(f"/api/v0/asks/{offer['id']}", json={"image": "x"})
    assert r.status_code == 404
    assert r.json()["error"] == "no_such_ask" and r.json()["ask_id"] == offer["id"]
    inst = (await client.get(f"/api/v0/instances/{iid}/", params={"owner": "me"})).json()[
        "instances"
    ]
    assert inst["label"] == "train-1"
    assert inst["image_uuid"] == "pytorch/pytorch:2.4.0"
    assert inst["image_runtype"] == "ssh_direc ssh_proxy"
    assert inst["extra_env"] == [["TZ", "UTC"], ["-p 8080:8080", "1"]]
    assert inst["onstart"] == "env >> /etc/environment"
    assert inst["disk_space"] == 40.0
    assert inst["dph_total"] == pytest.approx(offer["dph_base"] + 40 * offer["storage_cost"] / 720)
    assert inst["machine_id"] == offer["machine_id"] and inst["host_id"] == offer["host_id"]


async def test_lifecycle_over_http(client, clock):
    offer = (await offers(client, {"limit": 1}))[0]
    iid = await create(client, offer["id"], runtype="ssh")
    seen = []
    for _ in range(40):
        inst = (await client.get(f"/api/v0/instances/{iid}")).json()["instances"]
        seen.append(inst["actual_status"])
        if inst["actual_status"] == "loading":
            assert inst["status_msg"]
        if inst["actual_status"] != "running":
            assert inst["ssh_host"] is None and inst["ports"] is None
        clock.advance(7)
    assert seen[0] is None and "loading" in seen and seen[-1] == "running"
    assert inst["status_msg"] == "success, running img_1/ssh"
    assert inst["ssh_host"] == "127.0.0.1" and inst["public_ipaddr"] == "127.0.0.1"
    assert inst["ports"]["22/tcp"][0]["HostPort"] == str(inst["ssh_port"])
    assert inst["uptime_mins"] > 0 and inst["cur_state"] == "running"


async def test_destroy_show_null_and_unknown(client):
    offer = (await offers(client, {"limit": 1}))[0]
    iid = await create(client, offer["id"])
    r = await client.request("DELETE", f"/api/v0/instances/{iid}/", json={})
    assert r.json() == {"success": True}
    r = await client.get(f"/api/v0/instances/{iid}/")
    assert r.status_code == 200 and r.json() == {"instances": None}
    r = await client.request("DELETE", "/api/v0/instances/24681357", json={})
    assert r.status_code == 404
    assert r.json() == {
        "success": False,
        "error": "no_such_instance",
        "msg": "Instance 24681357 not found.",
    }
    assert offer["id"] in {o["id"] for o in await offers(client)}


async def test_v1_paging_filters_and_legacy(client, clock):
    rows = await offers(client, {"limit": 30})
    made = [await create(client, o["id"], label=f"w{i % 3}") for i, o in enumerate(rows)]
    clock.advance(1000)
    got, token, pages = [], None, 0
    while True:
        params = {"limit": "25"} if token is None else {"limit": "25", "after_token": token}
        r = await client.get("/api/v1/instances/", params=params)
        body = r.json()
        assert body["success"] is True and len(body["instances"]) <= 25
        got += [i["id"] for i in body["instances"]]
        pages += 1
        token = body["next_token"]
        if token is None:
            break
    assert pages == 2 and got == sorted(made)
    assert body["total_instances"] == 30
    assert body["label_counts"] == {"w0": 10, "w1": 10, "w2": 10}
    r = await client.get("/api/v1/instances", params={"limit": "0"})
    assert len(r.json()["instances"]) == 5
    r = await client.get(
        "/api/v1/instances/",
        params={
            "select_filters": json.dumps({"label": {"eq": "w1"}}),
            "order_by": json.dumps([{"col": "id", "dir": "desc"}]),
            "select_cols": json.dumps(["id", "label", "nope"]),
        },
    )
    body = r.json()
    assert [i["id"] for i in body["instances"]] == sorted(made[1::3], reverse=True)
    assert body["instances"][0] == {"id": max(made[1::3]), "label": "w1", "nope": None}
    r = await client.get(
        "/api/v1/instances/", params={"select_filters": json.dumps({"dph_total": {"lt": 1}})}
    )
    assert r.status_code == 400
    assert r.json()["error"] == "invalid_request"
    assert "dph_total is not a valid search key" in r.json()["msg"]
    r = await client.get("/api/v1/instances/", params={"after_token": "garbage"})
    assert r.status_code == 400 and r.json()["error"] == "invalid_token"
    legacy = (await client.get("/api/v0/instances", params={"owner": "me"})).json()
    assert legacy["instances_found"] == 30 and len(legacy["instances"]) == 30


async def test_manage_label_and_state(client, clock):
    iid = await create(client, (await offers(client, {"limit": 1}))[0]["id"])
    r = await client.put(f"/api/v0/instances/{iid}/", json={"label": "x" * 1025})
    assert r.status_code == 400 and r.json()["error"] == "invalid_args"
    assert "label_too_long" in r.json()["msg"]
    assert (await client.put(f"/api/v0/instances/{iid}", json={"label": "ok"})).json() == {
        "success": True
    }
    await client.put(f"/api/v0/instances/{iid}/", json={"state": "stopped"})
    inst = (await client.get(f"/api/v0/instances/{iid}/")).json()["instances"]
    assert inst["label"] == "ok" and inst["intended_status"] == "stopped"
    r = await client.put(f"/api/v0/instances/{iid}/", json={"state": "bogus"})
    assert r.status_code == 400
    r = await client.put("/api/v0/instances/999/", json={"label": "a"})
    assert r.status_code == 404 and r.json()["error"] == "no_such_instance"


async def test_request_logs_two_step(client, cloud, clock):
    iid = await create(client, (await offers(client, {"limit": 1}))[0]["id"])
    clock.advance(600)
    await client.get(f"/api/v0/instances/{iid}/")
    for i in range(5):
        cloud.append_log(iid, f"worker line {i} {'error' if i % 2 else 'ok'}")
    r = await client.put(f"/api/v0/instances/request_logs/{iid}/", json={"tail": "4"})
    url = r.json()["result_url"]
    assert r.json()["success"] is True
    assert url.startswith("http://vast.sim/_sim/logs/") and url.endswith(".log")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=make_app(cloud))) as bare:
        codes = [(await bare.get(url)).status_code for _ in range(2)]
        final = await bare.get(url)
    assert codes == [404, 404] and final.status_code == 200
    assert final.headers["content-type"].startswith("text/plain")
    assert final.text.splitlines() == [
        f"worker line {i} {'error' if i % 2 else 'ok'}" for i in range(1, 5)
    ]
    r = await client.put(
        f"/api/v0/instances/request_logs/{iid}", json={"tail": "1000", "filter": "error"}
    )
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=make_app(cloud))) as bare:
        for _ in range(3):
            final = await bare.get(r.json()["result_url"])
    assert final.text.splitlines() == ["worker line 1 error", "worker line 3 error"]
    r = await client.put("/api/v0/instances/request_logs/42/", json={})
    assert r.status_code == 404 and r.json() == {
        "error": "invalid_id",
        "msg": "Invalid instance id.",
    }


async def test_ssh_keys(client, cloud):
    r = await client.post("/api/v0/ssh/", json={"ssh_key": "ssh-ed25519 AAAAC3Nz me@laptop"})
    key = r.json()["key"]
    assert r.json()["success"] is True and key["public_key"].startswith("ssh-ed25519")
    listed = (await client.get("/api/v0/ssh")).json()
    assert isinstance(listed, list) and listed[0]["id"] == key["id"]
    r = await client.post("/api/v0/ssh/", json={})
    assert r.status_code == 400 and r.json()["error"] == "no_ssh_key"
    iid = await create(client, (await offers(client, {"limit": 1}))[0]["id"])
    r = await client.get(f"/api/v0/instances/{iid}/ssh/")
    assert json.loads(r.json()["ssh_keys"])[0]["public_key"] == key["public_key"]
    r = await client.post(f"/api/v0/instances/{iid}/ssh/", json={"ssh_key": key["public_key"]})
    assert r.json() == {"success": False, "msg": "SSH key already associated with instance."}
    r = await client.post(f"/api/v0/instances/{iid}/ssh", json={"ssh_key": "ssh-rsa BBBB other"})
    added = json.loads(r.json()["key"])
    assert cloud.authorized_keys(iid) == [key["public_key"], "ssh-rsa BBBB other"]
    r = await client.request("DELETE", f"/api/v0/instances/{iid}/ssh/{added['id']}/", json={})
    assert r.json()["success"] is True
    r = await client.put(
        f"/api/v0/ssh/{key['id']}/", json={"id": key["id"], "ssh_key": "ssh-ed25519 NEW"}
    )
    assert r.json()["key"]["public_key"] == "ssh-ed25519 NEW"
    r = await client.request("DELETE", f"/api/v0/ssh/{key['id']}", json={})
    assert r.json() == {"success": True}
    assert (await client.get("/api/v0/ssh/")).json() == []


async def test_users_current(client):
    for path in ("/api/v0/users/current", "/api/v0/users/current/"):
        r = await client.get(path)
        assert r.status_code == 200
        user = r.json()
        assert isinstance(user["credit"], float) and user["credit"] > 0
        assert "api_key" not in user
        assert KEY not in r.text


async def test_scripted_429_bodies_and_headers(client, cloud):
    cloud.faults.script("search", ["429-text", "429-detail", "429-json+retry", "503"])
    threshold = "API requests too frequent: endpoint threshold=2"
    r = await client.post("/api/v0/bundles/", json={})
    assert r.status_code == 429 and r.text == threshold
    assert r.headers["content-type"].startswith("text/plain")
    assert "retry-after" not in r.headers
    r = await client.post("/api/v0/bundles/", json={})
    assert r.status_code == 429 and r.json() == {"detail": threshold}
    r = await client.post("/api/v0/bundles/", json={})
    assert r.status_code == 429 and r.headers["retry-after"] == "1"
    assert r.json() == {"success": False, "error": "rate_limit_exceeded", "msg": threshold}
    r = await client.post("/api/v0/bundles/", json={})
    assert r.status_code == 503
    r = await client.post("/api/v0/bundles/", json={})
    assert r.status_code == 200
    assert cloud.faults.pending() == 0


async def test_scripted_lost_create_and_slow(client, cloud):
    cloud.faults.slow_delay = 0.01
    offer = (await offers(client, {"limit": 1}))[0]
    cloud.faults.script(r"PUT /api/v0/asks/", ["lost", "slow"])
    r = await client.put(f"/api/v0/asks/{offer['id']}/", json={"image": "x"})
    assert r.status_code == 504
    rows = (await client.get("/api/v1/instances/")).json()["instances"]
    assert [i["machine_id"] for i in rows] == [offer["machine_id"]]  # it WAS created
    other = (await offers(client, {"limit": 1}))[0]
    r = await client.put(f"/api/v0/asks/{other['id']}/", json={"image": "x"})
    assert r.status_code == 200
    assert cloud.faults.injected[-2:] == [("create", "lost"), ("create", "slow")]


async def test_force_status_over_http(client, cloud, clock):
    iid = await create(client, (await offers(client, {"limit": 1}))[0]["id"])
    clock.advance(600)
    for status in ("exited", "offline", "unknown"):
        cloud.force_status(iid, status)
        inst = (await client.get(f"/api/v0/instances/{iid}/")).json()["instances"]
        assert inst["actual_status"] == status and inst["ports"] is None
    cloud.force_status(iid, None)
    snap = cloud.instances_snapshot()
    assert snap[0]["id"] == iid and snap[0]["actual_status"] == "running"


async def test_real_uvicorn_server():
    cloud = SimCloud(seed=2, clock=ManualClock())
    ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(serve(cloud, "127.0.0.1", 0, ready=ready.set_result))
    try:
        port = await asyncio.wait_for(ready, timeout=5)
        assert port > 0
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", headers=AUTH) as c:
            r = await c.post("/api/v0/bundles/", json={"limit": 2})
            assert r.status_code == 200 and len(r.json()["offers"]) == 2
            assert r.headers["content-type"] == "application/json"
            r = await c.get("/api/v0/users/current")
            assert r.status_code == 200 and "api_key" not in r.json()
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_sim_stats_counts_faults_creates_and_destroys(client, cloud):
    """GET /_sim/stats (no key): faults injected by endpoint:kind and by client, every create
    counted under its label (a lost answer then a retry shows as two), single and bulk
    destroys; a create refused with a 503 created nothing."""
    first, second, third = (o["id"] for o in await offers(client, {"limit": 3}))
    cloud.faults.script("create", ["lost-502", "503"])
    r = await client.put(f"/api/v0/asks/{first}/", json={"image": "x", "label": "a"})
    assert r.status_code == 502  # performed, its answer lost
    r = await client.put(
        f"/api/v0/asks/{second}/",
        json={"image": "x", "label": "a"},
        headers={"User-Agent": "vastui/0.1"},
    )
    assert r.status_code == 503  # not performed
    kept = await create(client, second, label="a")  # the retry: a second instance under "a"
    gone = await create(client, third, label="b")
    lost = next(i for i in cloud.instances if i not in (kept, gone))
    r = await client.request("DELETE", f"/api/v0/instances/{lost}/", json={})
    assert r.status_code == 200
    r = await client.request("DELETE", "/api/v0/instances/", json={"instance_ids": [gone, 7]})
    assert r.status_code == 200

    r = await client.get("/_sim/stats", headers={"Authorization": ""})
    assert r.status_code == 200
    stats = r.json()
    assert stats["faults"] == {"create:503": 1, "create:lost-502": 1}
    assert stats["faults_total"] == 2
    assert stats["faults_by_agent"] == {"python-httpx": 1, "vastui": 1}
    assert stats["instances_created"] == 3 and stats["instances_destroyed"] == 2
    assert stats["labels_created"] == {"a": 2, "b": 1}
    assert list(cloud.instances) == [kept]
