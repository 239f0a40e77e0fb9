"""Issue 10 at the Vast boundary: impossible numbers and prices, hostile JSON, unbounded answers
and retries, cancellation, and the API key in echoed error bodies."""

from __future__ import annotations

import asyncio
import json
import logging
import traceback
from collections.abc import AsyncIterator, Callable

import httpx
import pytest

from vastui.pricing import MAX_MIN_RATE, min_rate
from vastui.redact import SecretFilter, redact
from vastui.vast.client import RetryPolicy, VastClient
from vastui.vast.errors import (
    CreateAnswerInvalid,
    CreateOutcomeUnknown,
    VastError,
    VastHTTPError,
    VastMalformedResponse,
    VastProtocolError,
    VastRateLimited,
    VastResponseTooLarge,
    VastUnreachable,
)
from vastui.vast.models import (
    INT64_MAX,
    CreateResult,
    Instance,
    ModelError,
    Offer,
    parse_int,
    parse_json,
    parse_number,
    valid_price,
)

KEY = "sk-vast/0123456789+abcdef="  # '/', '+', '=' so its URL and JSON spellings differ
OFFER = {"id": 1, "machine_id": 10, "host_id": 99, "gpu_name": "RTX 4090", "dph_total": 0.3}
Handler = Callable[[httpx.Request], httpx.Response]


class FakeTime:
    """A clock that only moves when the client sleeps: waits cost nothing, budgets are exact."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def client_for(
    handler: Handler,
    time_: FakeTime | None = None,
    *,
    attempts: int = 5,
    sleep: Callable[[float], object] | None = None,
    body_limits: dict[str, int] | None = None,
    max_pages: int = 100,
) -> VastClient:
    time_ = time_ or FakeTime()
    return VastClient(
        KEY,
        "http://vast.test",
        transport=httpx.MockTransport(handler),
        retry=RetryPolicy(max_attempts=attempts, create_lookups=2, max_pages=max_pages),
        pacing={},
        body_limits=body_limits,
        sleep=sleep or time_.sleep,  # type: ignore[arg-type]
        rand=lambda: 0.5,
        clock=time_.clock,
    )


def jsonr(status: int, body: object, **headers: str) -> httpx.Response:
    return httpx.Response(status, json=body, headers=headers)


def rows(*items: dict) -> httpx.Response:
    return jsonr(200, {"instances": list(items), "next_token": None})


# -- 1. integers at the model boundary -------------------------------------------------------


@pytest.mark.parametrize("field", ["id", "machine_id"])
@pytest.mark.parametrize(
    "value", [2**63, 2**64, 10**30, -1, 0, "9223372036854775808", "1_0", "١٢", 1.5, [1], {"a": 1}]
)
def test_offer_with_an_impossible_id_is_invalid(field, value):
    with pytest.raises(ModelError) as info:
        Offer.from_api(dict(OFFER, **{field: value}))
    assert f"'{field}'" in str(info.value) and "\n" not in str(info.value)


def test_largest_sqlite_integer_is_a_valid_id():
    offer = Offer.from_api(dict(OFFER, id=INT64_MAX, machine_id=str(INT64_MAX)))
    assert offer.id == INT64_MAX and offer.machine_id == INT64_MAX


HUGE = pytest.param(10**5000, id="5000-digits")  # str() of it raises: the id is named


@pytest.mark.parametrize("value", [2**63, -5, 0, "1_0", "x", HUGE])
def test_optional_ints_out_of_range_are_unknown(value):
    offer = Offer.from_api(dict(OFFER, host_id=value))
    assert offer.host_id is None
    inst = Instance.from_api(
        {"id": 7, "machine_id": value, "host_id": value, "num_gpus": value, "ssh_port": value}
    )
    assert (inst.machine_id, inst.host_id, inst.num_gpus, inst.ssh_port) == (None,) * 4


@pytest.mark.parametrize("value", [0, -1, 2**64, "2_0", "many", 1.5])
def test_offer_with_an_impossible_gpu_count_is_invalid(value):
    with pytest.raises(ModelError, match="'num_gpus'"):
        Offer.from_api(dict(OFFER, num_gpus=value))


def test_instance_with_an_impossible_id_is_invalid_but_its_bad_fields_are_only_unknown():
    with pytest.raises(ModelError, match="'id'"):
        Instance.from_api({"id": 2**63, "label": "vastui-x"})
    inst = Instance.from_api(
        {"id": 3, "dph_total": 1e308, "start_date": 1e300, "cpu_ram": -5, "ports": {"2_2/tcp": []}}
    )
    assert (inst.dph_total, inst.start_date, inst.cpu_ram_gb, dict(inst.ports)) == (
        None,
        None,
        None,
        {},
    )


def test_an_offer_cannot_be_built_with_impossible_values_even_directly():
    good = Offer.from_api(OFFER)
    fields = {f: getattr(good, f) for f in Offer.__dataclass_fields__}
    for patch in ({"id": 2**63}, {"machine_id": 0}, {"dph_total": 0.0}, {"num_gpus": 0}):
        with pytest.raises(ModelError):
            Offer(**{**fields, **patch})
    with pytest.raises(ModelError):
        CreateResult(2**64)


async def test_list_skips_invalid_rows_with_one_warning(caplog):
    caplog.set_level(logging.DEBUG, "vastui.vast")
    bad = {"id": 2**64, "label": "vastui-main-1"}
    listing = rows({"id": 1, "label": "a"}, bad, {"id": -3}, {"id": 2, "label": "b"})
    async with client_for(lambda r: listing) as client:
        first = await client.list_instances()
        await client.list_instances()  # the same bad rows on the next step: no new warning
    assert [i.id for i in first] == [1, 2]
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "2 invalid" in warnings[0].getMessage()


@pytest.mark.parametrize("new_contract", [2**63, 2**64, -5, 0, "abc", 1.5, [1], True])
async def test_create_answer_with_invalid_id_is_resolved_by_label_never_resent(new_contract):
    answers = [jsonr(200, {"success": True, "new_contract": new_contract}), rows()]

    def handler(request: httpx.Request) -> httpx.Response:
        return answers[0] if request.method == "PUT" else answers[1]

    async with client_for(handler) as client:
        with pytest.raises(CreateAnswerInvalid, match="vastui-main-1") as info:
            await client.create_instance(42, label="vastui-main-1", image="i", disk_gb=50)
        assert isinstance(info.value, CreateOutcomeUnknown)  # the engine's "resolve by label"
        answers[1] = rows({"id": 777, "label": "vastui-main-1"})
        found = await client.create_instance(42, label="vastui-main-1", image="i", disk_gb=50)
    assert found.instance_id == 777 and found.recovered_by_label


# -- 2. prices and numbers -------------------------------------------------------------------

BAD_PRICES = [
    0, 0.0, -0.0, "0", "-0", "0.0", -0.3, "-0.3", float("nan"), "NaN", float("inf"), "inf",
    "Infinity", 1e308, "1e308", 2**64, "1_0", "0_5", "0x10", "١", True, None, "", " ", [0.3],
    {"v": 0.3}, HUGE,
]  # fmt: skip


@pytest.mark.parametrize("price", BAD_PRICES)
def test_offer_with_an_impossible_price_is_invalid(price):
    with pytest.raises(ModelError, match="'dph_total'"):
        Offer.from_api(dict(OFFER, dph_total=price))


@pytest.mark.parametrize(
    ("text", "value"), [("0.3", 0.3), (" 0.3\n", 0.3), ("3e-1", 0.3), (2, 2.0)]
)
def test_plain_prices_are_read(text, value):
    assert Offer.from_api(dict(OFFER, dph_total=text)).dph_total == pytest.approx(value)


@pytest.mark.parametrize(
    ("text", "number", "integer"),
    [
        ("10", 10.0, 10),
        ("1_0", None, None),
        (" 12 ", 12.0, 12),
        ("12.0", 12.0, 12),
        ("1e3", 1000.0, 1000),
        ("+7", 7.0, 7),
        (".5", 0.5, None),
        ("nan", None, None),
        ("inf", None, None),
        ("0x1A", None, None),
        ("١٢", None, None),
        ("１２", None, None),
        ("1e400", None, None),
        ("9" * 65, None, None),
        (True, None, None),
    ],
)
def test_strict_number_parsing(text, number, integer):
    assert parse_number(text) == number
    assert parse_int(text) == integer


def test_a_zero_price_offer_is_skipped_not_ranked_first():
    assert valid_price("0") is None and valid_price("-0") is None and valid_price(0.3) == 0.3


@pytest.mark.parametrize(
    ("dph", "max_cost", "rate"),
    [
        (0.232, 0.008, 29.0),
        (0.24, 0.008, 30.0),
        (1e-6, 0.008, 1.0),  # never below 1: the benchmark gate stays on
        (0.0001, 1.0, 1.0),
        (1e308, 1e-10, MAX_MIN_RATE),  # overflows to inf: capped, no OverflowError
        (5e9, 1.0, MAX_MIN_RATE),
    ],
)
def test_min_rate_is_at_least_one_and_never_overflows(dph, max_cost, rate):
    assert min_rate(dph, max_cost) == rate


@pytest.mark.parametrize(
    ("dph", "max_cost"),
    [(0, 0.008), (-0.0, 0.008), (-1, 0.008), (float("nan"), 0.008), (float("inf"), 0.008),
     (0.3, 0), (0.3, float("nan")), (0.3, float("inf")), (0.3, -1), (True, 0.008),
     (10**400, 0.008), (0.3, 10**400)],
)  # fmt: skip
def test_min_rate_refuses_a_price_or_budget_that_is_not_positive_finite(dph, max_cost):
    with pytest.raises(ValueError, match="positive finite"):
        min_rate(dph, max_cost)


async def test_search_skips_impossible_offers_and_warns_once_per_offer(caplog):
    caplog.set_level(logging.DEBUG, "vastui.vast")
    offers = [
        OFFER,
        dict(OFFER, id=2, dph_total=0),
        dict(OFFER, id=2, dph_total="0"),  # the same offer twice in one list: one entry
        dict(OFFER, id=3, dph_total="1e308"),
        dict(OFFER, id=2**64),
        dict(OFFER, id=5, dph_total="1_0"),
    ]
    answer = jsonr(200, {"offers": offers})
    async with client_for(lambda r: answer) as client:
        result = await client.search_offers("")
        again = await client.search_offers("")
    assert [o.id for o in result.offers] == [1] and [o.id for o in again.offers] == [1]
    assert len(result.rejected) == 4
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "4 invalid" in warnings[0].getMessage()


# -- 3. hostile JSON -------------------------------------------------------------------------


@pytest.mark.parametrize("depth", [100, 100_000])
async def test_deeply_nested_json_is_a_one_line_typed_error(depth):
    body = b'{"offers": ' + b"[" * depth + b"]" * depth + b"}"
    async with client_for(lambda r: httpx.Response(200, content=body)) as client:
        with pytest.raises(VastMalformedResponse) as info:
            await client.search_offers("")
    text = str(info.value)
    assert text.startswith("malformed response from Vast") and "POST /bundles/" in text
    assert "\n" not in text


def test_bounded_json_reads_absurd_numbers_as_unknown():
    assert parse_json(b'{"a": NaN, "b": -Infinity, "c": 1' + b"0" * 5000 + b"}") == {
        "a": None,
        "b": None,
        "c": None,
    }
    with pytest.raises(VastMalformedResponse, match="not JSON"):
        parse_json(b"\xff\xfe{")


async def test_deeply_nested_error_body_is_still_the_typed_http_error():
    body = b"[" * 100_000
    async with client_for(lambda r: httpx.Response(400, content=body)) as client:
        with pytest.raises(VastHTTPError) as info:
            await client.current_user()
    assert info.value.status == 400 and len(str(info.value)) < 400


# -- 4. bounded answers, pages, retries, cancellation ----------------------------------------


class Endless:
    """A body that never ends, counting what was pulled from it."""

    def __init__(self, chunk: bytes = b"[" + b" " * 65535) -> None:
        self.chunk = chunk
        self.pulled = 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while True:
            self.pulled += len(self.chunk)
            yield self.chunk


async def test_an_endless_answer_stops_at_the_endpoint_limit():
    body = Endless()
    limit = 1 << 20
    async with client_for(
        lambda r: httpx.Response(200, content=body), body_limits={"search": limit}
    ) as client:
        with pytest.raises(VastResponseTooLarge) as info:
            await client.search_offers("")
    assert "POST /bundles/" in str(info.value) and "1 MiB" in str(info.value)
    assert body.pulled <= limit + len(body.chunk)


async def test_a_declared_oversized_answer_is_not_read():
    body = Endless()
    response = httpx.Response(200, content=body, headers={"Content-Length": str(10**12)})
    async with client_for(lambda r: response) as client:
        with pytest.raises(VastResponseTooLarge, match="GET /users/current/"):
            await client.current_user()
    assert body.pulled == 0


async def test_an_endless_error_body_is_cut_not_read_forever():
    body = Endless(b"x" * 65536)
    async with client_for(lambda r: httpx.Response(400, content=body)) as client:
        with pytest.raises(VastHTTPError) as info:
            await client.set_label(1, "x")
    assert info.value.status == 400 and body.pulled <= 2 * 65536


async def test_an_endless_create_answer_is_resolved_by_label_not_resent():
    puts = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "PUT":
            puts.append(request)
            return httpx.Response(200, content=Endless())
        return rows({"id": 5, "label": "vastui-main-2"})

    async with client_for(handler, body_limits={"create": 1 << 16}) as client:
        result = await client.create_instance(42, label="vastui-main-2", image="i", disk_gb=50)
    assert result.instance_id == 5 and result.recovered_by_label and len(puts) == 1


async def test_endless_logs_stop_at_their_limit():
    body = Endless(b"log line\n" * 8192)

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.startswith("/api/"):
            assert request.headers.get("authorization")
            return jsonr(200, {"result_url": "http://bucket.test/logs/1"})
        assert "authorization" not in request.headers  # the key never goes to a storage URL
        return httpx.Response(200, content=body)

    async with client_for(handler, body_limits={"logs": 1 << 18}) as client:
        with pytest.raises(VastResponseTooLarge, match="larger than 256 KiB"):
            await client.request_logs(1, polls=2, poll_interval=0)
    assert body.pulled <= (1 << 18) + len(body.chunk)


async def test_endless_pagination_stops_at_the_page_limit():
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.params.get("after_token"))
        row = {"id": len(seen), "label": "x"}
        return jsonr(200, {"instances": [row], "next_token": f"t{len(seen)}"})

    async with client_for(handler, max_pages=7) as client:
        with pytest.raises(VastProtocolError, match="more than 7 pages"):
            await client.list_instances()
    assert len(seen) == 7


@pytest.mark.parametrize("tokens", [["a", "a"], ["a", "b", "a"]])
async def test_a_repeated_page_token_is_a_loop(tokens):
    served = []

    def handler(request: httpx.Request) -> httpx.Response:
        token = tokens[min(len(served), len(tokens) - 1)]
        served.append(token)
        return jsonr(200, {"instances": [{"id": len(served)}], "next_token": token})

    async with client_for(handler) as client:
        with pytest.raises(VastProtocolError, match="repeats an earlier next_token"):
            await client.list_instances()
    assert len(served) == len(tokens)


async def test_a_non_text_page_token_is_refused():
    answer = jsonr(200, {"instances": [{"id": 1}], "next_token": {"x": [1]}})
    async with client_for(lambda r: answer) as client:
        with pytest.raises(VastProtocolError, match="not text"):
            await client.list_instances()


@pytest.mark.parametrize("call", ["search", "create"])
async def test_retry_after_over_the_cap_is_not_waited(call):
    t = FakeTime()
    answer = httpx.Response(429, text="too frequent", headers={"Retry-After": "60"})
    async with client_for(lambda r: answer, t) as client:
        with pytest.raises(VastRateLimited, match="over the 30s cap"):
            if call == "search":
                await client.search_offers("")
            else:
                await client.create_instance(1, label="l", image="i", disk_gb=50)
    assert t.sleeps == []


@pytest.mark.parametrize("call", ["search", "create"])
async def test_a_429_storm_ends_when_the_retry_budget_is_spent(call):
    t = FakeTime()
    requests = []

    def handler(request: httpx.Request) -> httpx.Response:
        requests.append(request)
        return httpx.Response(429, text="too frequent", headers={"Retry-After": "25"})

    async with client_for(handler, t, attempts=20) as client:
        with pytest.raises(VastRateLimited, match="retry budget 60s"):
            if call == "search":
                await client.search_offers("")
            else:
                await client.create_instance(1, label="l", image="i", disk_gb=50)
    assert t.sleeps == [25.0, 25.0] and len(requests) == 3
    assert t.now - 1000.0 <= 60.0


async def test_connection_failures_end_when_the_retry_budget_is_spent():
    t = FakeTime()
    policy_delay = RetryPolicy(max_delay=20.0).backoff(10, lambda: 0.5)  # 20 s per wait
    assert policy_delay == 20.0

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused")

    async with client_for(refuse, t, attempts=50) as client:
        with pytest.raises(VastUnreachable, match="retry budget"):
            await client.current_user()
    assert sum(t.sleeps) <= 60.0


@pytest.mark.parametrize("call", ["search", "create"])
async def test_cancelling_during_a_retry_after_wait_ends_the_call_at_once(call):
    waiting = asyncio.Event()
    never = asyncio.Event()
    requests = []

    async def blocking_sleep(seconds: float) -> None:
        waiting.set()
        await never.wait()  # a Retry-After wait that would outlast the test

    def handler(request: httpx.Request) -> httpx.Response:
        requests.append(request)
        return httpx.Response(429, text="slow down", headers={"Retry-After": "20"})

    async with client_for(handler, sleep=blocking_sleep) as client:
        if call == "search":
            task = asyncio.create_task(client.search_offers(""))
        else:
            task = asyncio.create_task(client.create_instance(1, label="l", image="i", disk_gb=9))
        await waiting.wait()
        task.cancel()
        for _ in range(5):  # a few loop turns, no wall clock
            await asyncio.sleep(0)
        assert task.done() and task.cancelled()
    assert len(requests) == 1  # nothing sent after the stop


# -- 5. secrets ------------------------------------------------------------------------------


def echo(status: int, **headers: str) -> Handler:
    """A server that echoes everything it was sent, as a sloppy proxy or debug page would."""

    def handler(request: httpx.Request) -> httpx.Response:
        sent = dict(request.headers)
        return httpx.Response(
            status,
            headers=headers,
            json={
                "msg": f"bad request {request.url}?api_key={KEY} headers={sent} key={KEY}",
                "error": f"auth {request.headers.get('authorization')}",
                "echo": sent,
            },
        )

    return handler


def assert_no_key(*texts: str) -> None:
    for text in texts:
        assert KEY not in text
        assert "0123456789" not in text  # no fragment in any spelling (URL, JSON, cut)


@pytest.mark.parametrize("status", [400, 401, 403, 404, 410, 429, 500, 502, 503])
async def test_an_echoed_key_never_reaches_an_error_or_a_log(status, caplog):
    caplog.set_level(logging.DEBUG)
    async with client_for(echo(status), attempts=2) as client:
        with pytest.raises(VastError) as info:
            await client.search_offers("")
        with pytest.raises(VastError) as create_info:
            await client.create_instance(1, label="vastui-k-1", image="i", disk_gb=9)
    for exc in (info.value, create_info.value):
        assert_no_key(str(exc), repr(exc), "".join(traceback.format_exception(exc)))
        msg = getattr(exc, "msg", "")
        assert_no_key(msg)
    assert_no_key(caplog.text)
    assert "Bearer ***" in str(info.value) or "***" in str(info.value)


async def test_a_key_in_an_exception_text_or_url_is_redacted(caplog):
    caplog.set_level(logging.DEBUG)

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError(f"cannot reach {request.url}?api_key={KEY} (Bearer {KEY})")

    async with client_for(refuse, attempts=3) as client:
        with pytest.raises(VastUnreachable) as info:
            await client.current_user()
    exc = info.value
    assert_no_key(str(exc), repr(exc), "".join(traceback.format_exception(exc)), caplog.text)
    assert "api_key=***" in str(exc)


@pytest.mark.parametrize(
    "text",
    [
        f"key {KEY} here",
        f"url ?api_key={httpx.QueryParams({'k': KEY})['k']}&x=1",
        f"quoted {json.dumps(KEY)}",
        "url ?api_key=" + str(httpx.URL("http://h", params={"api_key": KEY}).query, "ascii"),
        f"Authorization: Bearer {KEY}",
        f'{{"authorization": "bearer {KEY}"}}',
        f"api_key: {KEY}",
    ],
)
def test_redact_masks_every_spelling_of_the_key(text):
    assert_no_key(redact(text, [KEY]))


def test_redact_masks_any_bearer_token_and_api_key_parameter():
    assert redact("Authorization: Bearer abc.DEF-123", []) == "Authorization: Bearer ***"
    assert redact("GET /x?a=1&api_key=zzz&b=2", []) == "GET /x?a=1&api_key=***&b=2"
    assert redact("nothing secret", [None, "", "  "]) == "nothing secret"


def test_a_key_too_short_to_be_a_secret_is_not_masked_and_is_refused(monkeypatch):
    """A one-character key masked every "k" of a log ("wor***ers") and corrupted fingerprints
    (issue 31 item 6): such a key is refused where it is loaded, with one line, and the
    redactor leaves text alone for it."""
    from vastui.config import ApiKeyError, load_api_key

    line = "worker k: SHA256:kkAB fingerprint"
    assert redact(line, ["k"]) == line
    log = SecretFilter(["k"])
    log.add("kk")
    record = logging.LogRecord("x", logging.INFO, __file__, 1, line, None, None)
    assert log.filter(record) and record.msg == line
    assert redact("the key sim-key here", ["sim-key"]) == "the key *** here"  # long enough
    monkeypatch.setenv("VAST_API_KEY", "k")
    with pytest.raises(ApiKeyError, match=r"from \$VAST_API_KEY is 1 characters: too short"):
        load_api_key()


def test_secret_filter_redacts_arguments_and_exception_text(caplog):
    logger = logging.getLogger("tests.vast_bounds.filter")
    logger.addFilter(SecretFilter([KEY]))
    caplog.set_level(logging.INFO, logger.name)
    try:
        raise RuntimeError(f"boom {KEY}")
    except RuntimeError:
        logger.exception("call with %s failed", KEY)
    assert_no_key(caplog.text)
    assert "boom ***" in caplog.text


def test_tls_is_verified_for_https_and_impossible_for_a_plain_http_api():
    import ssl

    from vastui.vast.client import tls_trust

    assert tls_trust("https://console.vast.ai") is True  # httpx's default: certifi's roots
    assert tls_trust("HTTPS://console.vast.ai") is True
    for url in ("http://127.0.0.1:8000", "http://sim.invalid"):
        context = tls_trust(url)
        assert isinstance(context, ssl.SSLContext)
        assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
        assert context.cert_store_stats()["x509_ca"] == 0, "no root trusted: TLS cannot pass"
