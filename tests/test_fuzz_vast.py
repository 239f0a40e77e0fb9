"""Hostile Vast answers and filter texts (hypothesis).

Any JSON-ish offer, instance or answer body goes through the model boundary (and the client)
into either typed records that are safe to rent, price, store and show, or one of the typed
errors: never another exception. Any filter text is a query or a `QueryError`. Example counts
come from the profile registered in tests/conftest.py (HYPOTHESIS_PROFILE=long for a wide run).
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from typing import Any

import httpx
from hypothesis import given
from hypothesis import strategies as st

from vastui.pricing import MAX_MIN_RATE, min_rate
from vastui.vast.client import RetryPolicy, VastClient
from vastui.vast.errors import VastError, VastMalformedResponse
from vastui.vast.models import (
    INT64_MAX,
    MAX_DPH,
    MAX_GPUS,
    Instance,
    ModelError,
    Offer,
    parse_json,
)
from vastui.vast.query import KNOWN_FIELDS, QueryError, build_search_body, parse_order

_UNSAFE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")  # escapes and controls (tab allowed)

HOSTILE_TEXT = st.sampled_from(
    [
        "", " ", "0", "-0", "0.0", "1_0", "1e308", "-1e308", "1e-400", "nan", "NaN", "inf",
        "-Infinity", "0x10", "١٢", "１２", "9" * 30, "9223372036854775808", "12.5", " 7 ",
        "[bold]x[/bold]", "[link=http://evil]y", "\x1b[31mred\x1b[0m", "\x1b]0;title\x07",
        "\x9b2J", "a\nb\rc", "\u202eevil", "\x00", "\ud800", "RTX 4090", "Texas, US", "true",
    ]
)  # fmt: skip
HUGE_INTS = st.sampled_from([2**63 - 1, 2**63, 2**64, -(2**63) - 1, 10**30, 10**400, -1, 0])
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    HUGE_INTS,
    st.floats(),
    st.sampled_from([0.0, -0.0, 1e308, -1e308, 5e-324, float("nan"), float("inf")]),
    HOSTILE_TEXT,
    st.text(max_size=12),
    st.from_regex(r"\A[+-]?[0-9_]{0,6}(\.[0-9]{0,3})?([eE][+-]?[0-9]{1,3})?\Z"),
)
JSONISH = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
# Values that often pass, so valid records are built and their invariants checked too.
PLAUSIBLE_ID = st.one_of(
    st.integers(min_value=1, max_value=10**6), HUGE_INTS, st.integers(min_value=-3, max_value=2**64)
)
PLAUSIBLE_PRICE = st.one_of(
    st.floats(min_value=0.01, max_value=20),
    st.sampled_from([0, 0.0, -0.0, "0", "-0", -0.3, 1e308, "1e308", "1_0", 5e-324, 0.3, "0.25"]),
    st.floats(),
)

OFFER_FIELDS = {
    "id": PLAUSIBLE_ID, "machine_id": PLAUSIBLE_ID, "host_id": PLAUSIBLE_ID,
    "dph_total": PLAUSIBLE_PRICE, "num_gpus": st.integers(-2, 2000),
    "gpu_name": HOSTILE_TEXT, "cpu_name": HOSTILE_TEXT, "geolocation": HOSTILE_TEXT,
    "gpu_ram": SCALARS, "cpu_ram": SCALARS, "cpu_cores": SCALARS, "cpu_cores_effective": SCALARS,
    "disk_space": SCALARS, "inet_down": SCALARS, "inet_up": SCALARS, "pcie_bw": SCALARS,
    "reliability2": SCALARS, "reliability": SCALARS, "cuda_max_good": SCALARS,
    "verification": HOSTILE_TEXT, "rentable": SCALARS,
}  # fmt: skip
INSTANCE_FIELDS = {
    "id": PLAUSIBLE_ID, "machine_id": PLAUSIBLE_ID, "host_id": PLAUSIBLE_ID,
    "num_gpus": SCALARS, "dph_total": PLAUSIBLE_PRICE, "label": HOSTILE_TEXT,
    "actual_status": HOSTILE_TEXT, "status_msg": HOSTILE_TEXT, "image_uuid": HOSTILE_TEXT,
    "public_ipaddr": HOSTILE_TEXT, "ssh_host": HOSTILE_TEXT, "ssh_port": SCALARS,
    "start_date": SCALARS, "cpu_ram": SCALARS, "gpu_ram": SCALARS,
    "ports": st.one_of(
        JSONISH,
        st.dictionaries(
            st.sampled_from(["22/tcp", "2_2/tcp", "99999/tcp", "٢٢/tcp", "8080/udp"]),
            st.lists(st.fixed_dictionaries({"HostPort": SCALARS}), max_size=2),
            max_size=3,
        ),
    ),
    "extra_env": st.one_of(JSONISH, st.lists(st.tuples(SCALARS, JSONISH).map(list), max_size=3)),
}  # fmt: skip


def records(
    fields: dict[str, st.SearchStrategy[Any]], required: tuple[str, ...]
) -> st.SearchStrategy[Any]:
    """Records with the fields a record needs (often valid), or any subset of the known fields,
    with junk keys added; or not a record at all."""
    rest = {k: v for k, v in fields.items() if k not in required}
    full = st.fixed_dictionaries({k: fields[k] for k in required}, optional=rest)
    partial = st.fixed_dictionaries({}, optional=fields)
    junk = st.dictionaries(st.text(max_size=8), JSONISH, max_size=3)
    merged = st.tuples(st.one_of(full, full, partial), junk).map(lambda kj: {**kj[1], **kj[0]})
    return st.one_of(merged, merged, merged, JSONISH)


OFFERS = records(OFFER_FIELDS, ("id", "machine_id", "dph_total"))
INSTANCES = records(INSTANCE_FIELDS, ("id",))


def _safe(text: str | None) -> bool:
    return text is None or not _UNSAFE.search(text)


def _id_ok(value: int | None, *, optional: bool = False) -> bool:
    if value is None:
        return optional
    return type(value) is int and 1 <= value <= INT64_MAX


def check_offer(offer: Offer) -> None:
    assert _id_ok(offer.id) and _id_ok(offer.machine_id) and _id_ok(offer.host_id, optional=True)
    assert math.isfinite(offer.dph_total) and 0 < offer.dph_total <= MAX_DPH
    assert 1 <= offer.num_gpus <= MAX_GPUS
    # Priced and costed without overflow; the benchmark gate is never switched off.
    assert 1 <= min_rate(offer.dph_total, 0.008) <= MAX_MIN_RATE
    assert math.isfinite(offer.dph_total * 24 * 3650)
    for value in (offer.gpu_ram_gb, offer.cpu_ram_gb, offer.cpu_cores, offer.inet_down):
        assert value is None or (math.isfinite(value) and value >= 0)
    assert offer.reliability is None or 0 <= offer.reliability <= 1
    for text in (offer.gpu_name, offer.cpu_name, offer.geolocation):
        assert _safe(text)
    json.dumps(offer.to_json(), allow_nan=False)  # storable and printable as --json


def check_instance(inst: Instance) -> None:
    assert _id_ok(inst.id)
    assert _id_ok(inst.machine_id, optional=True) and _id_ok(inst.host_id, optional=True)
    assert inst.dph_total is None or 0 < inst.dph_total <= MAX_DPH
    assert inst.ssh_port is None or 0 < inst.ssh_port < 65536
    assert all(0 < k < 65536 and 0 < v < 65536 for k, v in inst.ports.items())
    for text in (inst.label, inst.status_msg, inst.ssh_command(), *inst.env, *inst.env.values()):
        assert _safe(text)


@given(OFFERS)
def test_any_offer_payload_is_a_safe_offer_or_a_model_error(raw):
    try:
        offer = Offer.from_api(raw)
    except ModelError as exc:
        assert "\n" not in str(exc) and _safe(str(exc))
        return
    check_offer(offer)


@given(INSTANCES)
def test_any_instance_payload_is_a_safe_instance_or_a_model_error(raw):
    try:
        inst = Instance.from_api(raw)
    except ModelError as exc:
        assert "\n" not in str(exc) and _safe(str(exc))
        return
    check_instance(inst)


def _serve(body: bytes) -> VastClient:
    async def no_sleep(_: float) -> None:
        return None

    return VastClient(
        "k3y-fuzz",
        "http://vast.test",
        transport=httpx.MockTransport(lambda r: httpx.Response(200, content=body)),
        retry=RetryPolicy(max_attempts=1, create_lookups=1, max_pages=3),
        pacing={},
        sleep=no_sleep,
    )


async def _search_and_list(body: bytes) -> None:
    async with _serve(body) as client:
        for call in (client.search_offers(""), client.list_instances()):
            try:
                result = await call
            except VastError as exc:
                assert "\n" not in str(exc)
                continue
            items = result.offers if hasattr(result, "offers") else result
            for item in items:
                (check_offer if isinstance(item, Offer) else check_instance)(item)


@given(
    st.one_of(
        st.fixed_dictionaries(
            {"offers": st.lists(OFFERS, max_size=4)},
            optional={"instances": st.lists(INSTANCES, max_size=4)},
        ),
        JSONISH,
    )
)
def test_any_answer_through_the_client_is_records_or_a_typed_error(data):
    body = json.dumps(data).encode()  # may hold NaN/Infinity tokens and 400-digit integers
    asyncio.run(_search_and_list(body))


@given(
    st.one_of(
        st.binary(max_size=64),
        st.text(alphabet='[]{}",:0123456789-eE.tnulfasrNIiy \\', max_size=64).map(str.encode),
        st.integers(1, 5000).map(lambda n: b"[" * n + b"]" * n),
    )
)
def test_any_bytes_are_json_or_one_malformed_line(body):
    try:
        parse_json(body, "GET /x/")
    except VastMalformedResponse as exc:
        assert str(exc).startswith("malformed response from Vast") and "\n" not in str(exc)


FIELD_WORDS = [*sorted(KNOWN_FIELDS), "dph", "cuda_vers", "bogus", "gpu_ram", "driver_version"]
QUERY_TOKENS = st.one_of(
    st.sampled_from(FIELD_WORDS),
    st.sampled_from(["=", "==", "!=", ">", ">=", "<", "<=", " in ", " notin ", " eq ", "=>"]),
    st.sampled_from(["1", "1_0", "1e308", "1e400", "-0", "nan", "inf", "١٢", "535.86.05", "true"]),
    st.sampled_from(["[1,2]", "[", "]", '"', "'", "'a b'", "any", "*", "?", "RTX_4090", ","]),
    st.sampled_from(["999.999.9999", "9" * 400 + ".1.1", "[bold]", "\x1b[31m", "\n", " ", "\t"]),
    st.text(max_size=4),
)


@given(st.lists(QUERY_TOKENS, max_size=10).map("".join), st.sampled_from([None, "dph,score-"]))
def test_any_filter_text_is_a_query_or_a_query_error(text, order):
    try:
        body = build_search_body(text, order=order, limit=5)
    except QueryError as exc:
        assert "\n" not in str(exc)  # the term is shown escaped when not printable
        return
    json.dumps(body, allow_nan=False)  # what the server receives is real JSON


@given(st.text(max_size=20))
def test_any_order_text_is_an_order_or_a_query_error(text):
    try:
        parsed = parse_order(text)
    except QueryError:
        return
    assert all(direction in ("asc", "desc") for _, direction in parsed)
