"""VastClient against scripted transports: retries, typed errors, the create rule."""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx
import pytest

from vastui.vast.client import RetryPolicy, VastClient
from vastui.vast.errors import (
    CreateOutcomeUnknown,
    VastAuthError,
    VastHTTPError,
    VastNotFound,
    VastProtocolError,
    VastRateLimited,
    VastServerError,
    VastUnreachable,
)

Handler = Callable[[httpx.Request], httpx.Response]


class Script:
    """A transport answering from a list of responses (or exceptions), recording requests."""

    def __init__(self, *answers: httpx.Response | Exception | Handler) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        if callable(answer):
            return answer(request)
        return answer


def jsonr(status: int, body: object, **headers: str) -> httpx.Response:
    return httpx.Response(status, json=body, headers=headers)


@pytest.fixture
def sleeps() -> list[float]:
    return []


def make(script: Script, sleeps: list[float], attempts: int = 4) -> VastClient:
    async def fake_sleep(seconds: float) -> None:
        sleeps.append(seconds)

    return VastClient(
        "secret-key",
        "http://vast.test",
        transport=httpx.MockTransport(script),
        retry=RetryPolicy(max_attempts=attempts, create_lookups=2),
        pacing={},
        sleep=fake_sleep,
        rand=lambda: 0.5,
    )


OFFER = {"id": 1, "machine_id": 10, "host_id": 99, "gpu_name": "RTX 4090", "dph_total": 0.3}


async def test_search_sends_cli_body_with_bearer(sleeps):
    script = Script(jsonr(200, {"offers": [OFFER]}))
    async with make(script, sleeps) as client:
        result = await client.search_offers("gpu_name=RTX_4090 num_gpus=1", limit=3)
    request = script.requests[0]
    assert request.method == "POST" and request.url.path == "/api/v0/bundles/"
    assert request.headers["Authorization"] == "Bearer secret-key"
    body = json.loads(request.content)
    assert body["gpu_name"] == {"eq": "RTX 4090"}
    assert body["num_gpus"] == {"eq": "1"}
    assert body["verified"] == {"eq": True} and body["limit"] == 3
    assert [o.id for o in result.offers] == [1]


@pytest.mark.parametrize(
    "first",
    [
        httpx.Response(429, text="API requests too frequent: endpoint threshold=2"),
        jsonr(429, {"detail": "API requests too frequent"}),
        jsonr(429, {"success": False, "error": "rate_limit_exceeded", "msg": "slow down"}),
        jsonr(502, {"msg": "bad gateway"}),
        jsonr(503, {}),
        jsonr(504, {}),
        httpx.ConnectError("refused"),
        httpx.ReadTimeout("slow"),
    ],
)
async def test_transient_failures_are_retried(first, sleeps):
    script = Script(first, jsonr(200, {"offers": [OFFER]}))
    async with make(script, sleeps) as client:
        result = await client.search_offers("num_gpus=1")
    assert len(script.requests) == 2
    assert len(sleeps) == 1 and sleeps[0] > 0
    assert result.offers[0].machine_id == 10


async def test_failed_attempts_are_counted_by_status_for_the_metrics(sleeps):
    script = Script(
        jsonr(429, {}), httpx.ConnectError("refused"), jsonr(503, {}),
        jsonr(200, {"offers": [OFFER]}),
    )  # fmt: skip
    async with make(script, sleeps) as client:
        await client.search_offers("num_gpus=1")
        assert dict(client.error_counts) == {"429": 1, "network": 1, "503": 1}
        script.answers = [jsonr(404, {"msg": "no such thing"})]
        with pytest.raises(VastNotFound):
            await client.current_user()
        assert client.error_counts["404"] == 1


async def test_retry_after_is_honoured(sleeps):
    script = Script(
        httpx.Response(429, text="API requests too frequent", headers={"Retry-After": "7"}),
        jsonr(200, {"offers": []}),
    )
    async with make(script, sleeps) as client:
        await client.search_offers("")
    assert sleeps == [7.0]


async def test_retry_after_over_a_minute_is_not_waited(sleeps):
    script = Script(httpx.Response(429, text="too frequent", headers={"Retry-After": "3600"}))
    async with make(script, sleeps) as client:
        with pytest.raises(VastRateLimited):
            await client.search_offers("")
    assert len(script.requests) == 1 and sleeps == []


async def test_search_quota_is_never_retried(sleeps):
    script = Script(jsonr(429, {"error": "search_quota_exceeded", "msg": "daily quota"}))
    async with make(script, sleeps) as client:
        with pytest.raises(VastRateLimited, match="daily quota"):
            await client.search_offers("")
    assert len(script.requests) == 1


async def test_retries_are_bounded_with_growing_jittered_backoff(sleeps):
    script = Script(jsonr(503, {"msg": "maintenance"}))
    async with make(script, sleeps, attempts=4) as client:
        with pytest.raises(VastServerError, match="maintenance"):
            await client.search_offers("")
    assert len(script.requests) == 4
    assert len(sleeps) == 3 and sleeps == sorted(sleeps) and sleeps[0] < sleeps[-1]


async def test_unreachable_is_typed_and_one_line(sleeps):
    script = Script(httpx.ConnectError("connection refused"))
    async with make(script, sleeps, attempts=3) as client:
        with pytest.raises(VastUnreachable) as info:
            await client.current_user()
    assert "http://vast.test" in str(info.value) and "\n" not in str(info.value)
    assert len(script.requests) == 3


async def test_bad_key_is_an_auth_error_with_server_msg(sleeps):
    script = Script(
        jsonr(401, {"success": False, "error": "auth_error", "msg": "Invalid user key"})
    )
    async with make(script, sleeps) as client:
        with pytest.raises(VastAuthError) as info:
            await client.list_ssh_keys()
    assert info.value.msg == "Invalid user key" and info.value.code == "auth_error"
    assert "secret-key" not in str(info.value) and "secret-key" not in repr(client)
    assert len(script.requests) == 1


async def test_non_json_success_is_a_protocol_error(sleeps):
    script = Script(httpx.Response(200, text="<html>maintenance</html>"))
    async with make(script, sleeps) as client:
        with pytest.raises(VastProtocolError, match="not JSON"):
            await client.search_offers("")


async def test_malformed_offers_are_skipped_not_fatal(sleeps):
    offers = [
        OFFER,
        {"id": "2", "machine_id": "20", "dph_total": "0.5", "num_gpus": "2", "gpu_ram": "24000"},
        {"id": None, "machine_id": 30, "dph_total": 0.1},
        {"id": 4, "machine_id": 40},
        "not an object",
    ]
    script = Script(jsonr(200, {"offers": offers}))
    async with make(script, sleeps) as client:
        result = await client.search_offers("")
    assert [o.id for o in result.offers] == [1, 2]
    assert result.offers[1].num_gpus == 2 and result.offers[1].gpu_ram_gb == 24.0
    assert len(result.rejected) == 3
    assert any("'id'" in r for r in result.rejected)
    assert any("'dph_total'" in r for r in result.rejected)


async def test_answer_without_offers_list_is_a_protocol_error(sleeps):
    script = Script(jsonr(200, {"offers": None}))
    async with make(script, sleeps) as client:
        with pytest.raises(VastProtocolError, match="offers"):
            await client.search_offers("")


def instance_row(iid: int, label: str | None) -> dict:
    return {"id": iid, "label": label, "machine_id": 10, "actual_status": None}


def listing(*rows: dict) -> httpx.Response:
    return jsonr(200, {"success": True, "instances": list(rows), "next_token": None})


async def test_create_success(sleeps):
    script = Script(jsonr(200, {"success": True, "new_contract": 555, "instance_api_key": "k"}))
    async with make(script, sleeps) as client:
        result = await client.create_instance(
            42, label="vastui-main-1", image="img:1", disk_gb=250, env={"MIN_RATE": "29.0"}
        )
    assert result.instance_id == 555 and not result.recovered_by_label
    body = json.loads(script.requests[0].content)
    assert script.requests[0].method == "PUT" and script.requests[0].url.path == "/api/v0/asks/42/"
    assert body["label"] == "vastui-main-1" and body["env"] == {"MIN_RATE": "29.0"}
    assert body["client_id"] == "me" and body["disk"] == 250


@pytest.mark.parametrize("lost", [jsonr(502, {}), jsonr(504, {}), httpx.ReadTimeout("t")])
async def test_create_lost_answer_finds_instance_by_label(lost, sleeps):
    script = Script(lost, listing(instance_row(1, "other"), instance_row(777, "vastui-main-9")))
    async with make(script, sleeps) as client:
        result = await client.create_instance(42, label="vastui-main-9", image="i", disk_gb=250)
    assert result.instance_id == 777 and result.recovered_by_label
    puts = [r for r in script.requests if r.method == "PUT"]
    assert len(puts) == 1, "an ambiguous create must never be re-sent"


async def test_create_lost_answer_without_instance_is_unknown_not_retried(sleeps):
    script = Script(jsonr(503, {}), listing(instance_row(1, "other")))
    async with make(script, sleeps) as client:
        with pytest.raises(CreateOutcomeUnknown, match="vastui-main-3"):
            await client.create_instance(42, label="vastui-main-3", image="i", disk_gb=250)
    assert sum(r.method == "PUT" for r in script.requests) == 1


async def test_create_throttled_is_retried_because_nothing_happened(sleeps):
    script = Script(
        httpx.Response(429, text="API requests too frequent: endpoint threshold=4.5"),
        jsonr(200, {"success": True, "new_contract": 9}),
    )
    async with make(script, sleeps) as client:
        result = await client.create_instance(42, label="l", image="i", disk_gb=250)
    assert result.instance_id == 9 and sum(r.method == "PUT" for r in script.requests) == 2


async def test_create_gone_offer_raises_not_found(sleeps):
    body = {"success": False, "error": "no_such_ask", "msg": "No ask by id 42 is available."}
    script = Script(jsonr(404, body))
    async with make(script, sleeps) as client:
        with pytest.raises(VastNotFound, match="No ask by id 42"):
            await client.create_instance(42, label="l", image="i", disk_gb=250)
    assert len(script.requests) == 1


async def test_create_requires_label(sleeps):
    async with make(Script(jsonr(200, {})), sleeps) as client:
        with pytest.raises(ValueError, match="label"):
            await client.create_instance(1, label="", image="i", disk_gb=1)


async def test_destroy_missing_counts_as_done(sleeps):
    body = {"success": False, "error": "no_such_instance", "msg": "Instance 5 not found."}
    script = Script(jsonr(404, body))
    async with make(script, sleeps) as client:
        assert await client.destroy_instance(5) is False
    assert script.requests[0].method == "DELETE" and json.loads(script.requests[0].content) == {}


async def test_list_pages_v1_then_falls_back_to_v0(sleeps):
    pages = {
        None: {"instances": [instance_row(1, "a")], "next_token": "t1"},
        "t1": {"instances": [instance_row(2, "b")], "next_token": None},
    }

    def v1(request: httpx.Request) -> httpx.Response:
        return jsonr(200, pages[request.url.params.get("after_token")])

    async with make(Script(v1), sleeps) as client:
        assert [i.id for i in await client.list_instances()] == [1, 2]

    script = Script(
        jsonr(404, {"msg": "not here"}), jsonr(200, {"instances": [instance_row(3, "c")]})
    )
    async with make(script, sleeps) as client:
        assert [i.id for i in await client.list_instances()] == [3]
    assert script.requests[1].url.path == "/api/v0/instances/"


async def test_show_null_is_none(sleeps):
    async with make(Script(jsonr(200, {"instances": None})), sleeps) as client:
        assert await client.show_instance(3) is None


async def test_http_error_keeps_server_msg(sleeps):
    body = {"success": False, "error": "invalid_args", "msg": "label_too_long"}
    async with make(Script(jsonr(400, body)), sleeps) as client:
        with pytest.raises(VastHTTPError) as info:
            await client.set_label(1, "x" * 2000)
    assert info.value.status == 400 and info.value.msg == "label_too_long"
