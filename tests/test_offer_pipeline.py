"""Issue 11, the offer pipeline's fast paths: each gives exactly what the careful path gives.

parse_json reads with orjson and falls back to the stdlib (with its hooks) for what orjson
refuses, and both read alike; the nesting walk goes in bulk, and skips the records of a search
answer; Offer.from_api checks each field's usual exact type inline, else its careful reader,
and builds without re-validating; rank_offers works each prior out once, validates the budget
once and sorts by precomputed keys. None of that may change a result (bench/offers.py
measures what it saves).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vastui.domain.machines import PerfRecord
from vastui.engine.ranking import RankedOffer, RateModel, rank_offers
from vastui.pricing import MAX_MIN_RATE, min_rate, min_rate_at
from vastui.sanitize import sanitize_line
from vastui.vast.errors import VastMalformedResponse
from vastui.vast.models import (
    INT64_MAX,
    MAX_DPH,
    MAX_JSON_DEPTH,
    MIN_DPH,
    ModelError,
    Offer,
    _bool,
    _gb,
    _json_constant,
    _json_int,
    _opt_id,
    _qty,
    _req_id,
    _str,
    _text,
    depth_exceeds,
    describe,
    parse_int,
    parse_json,
    unchecked_constructor,
    valid_id,
    valid_price,
)


def careful(data: bytes | str) -> Any:
    """The stdlib's reading, with the hook on every integer: what parse_json falls back to."""
    return json.loads(data, parse_int=_json_int, parse_constant=_json_constant)


# -- parse_json ------------------------------------------------------------------------------

JSON_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**400), 10**400),  # both sides of 64 bits and of the float range
    st.integers(-(2**64), 2**65),
    st.floats(allow_nan=True, allow_infinity=True),  # dumped as NaN / Infinity tokens
    st.text(alphabet='0123456789[]{}"\\ a\u00e9', max_size=80),  # digit runs in strings
)
JSONISH = st.recursive(
    JSON_LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=30,
)


def same(a: Any, b: Any) -> bool:
    """Equality that counts NaN equal to NaN (careful reads NaN as None too, so rare)."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


@settings(max_examples=300)
@given(JSONISH, st.sampled_from(["utf-8", "utf-16", "utf-32", "utf-8-sig"]))
def test_parse_json_gives_what_the_careful_parse_gives(value, encoding):
    data = json.dumps(value).encode(encoding)
    assert same(parse_json(data), careful(data))


INTEGERS = [
    (str(2**63 - 1), 2**63 - 1),
    (str(2**64 - 1), 2**64 - 1),  # orjson keeps unsigned 64-bit integers exact
    (str(2**64), float(2**64)),
    (str(-(2**63)), -(2**63)),
    (str(-(2**63) - 1), float(-(2**63) - 1)),
    ("1" + "0" * 63, 1e63),
    ("1" + "0" * 308, 1e308),
    ("1" + "0" * 309, None),  # past the float range
    ("1" + "0" * 4999, None),  # int() would refuse it: never made
]


@pytest.mark.parametrize(("text", "expected"), INTEGERS)
@pytest.mark.parametrize("encoding", ["utf-8", "utf-16-le", "utf-16", "utf-32"])
@pytest.mark.parametrize("nan", [False, True], ids=["orjson", "stdlib"])
def test_integers_are_exact_within_64_bits_else_floats_by_either_parser(
    text, expected, encoding, nan
):
    # A NaN anywhere (or UTF-16/32) sends the whole answer the stdlib's way: the same reading.
    data = ('{"a": ' + text + ', "b": 2' + (', "c": NaN' if nan else "") + "}").encode(encoding)
    value = parse_json(data)
    assert value["a"] == expected and type(value["a"]) is type(expected) and value["b"] == 2


def test_what_orjson_refuses_is_read_by_the_stdlib_as_before():
    data = b'{"a": NaN, "b": -Infinity, "c": 1e400, "d": "\\ud800", "e": [1]}'
    assert parse_json(data) == {"a": None, "b": None, "c": math.inf, "d": "\ud800", "e": [1]}
    assert parse_json(b"\xef\xbb\xbf[1]") == [1]  # a BOM
    for bad in (b"", b"[1,]", b"\xff", b"{'a': 1}", b"[1] x"):
        with pytest.raises(VastMalformedResponse, match="not JSON"):
            parse_json(bad)


def test_a_long_digit_run_in_text_is_only_text():
    text = "9" * 100
    assert parse_json(json.dumps({"a": text, "b": 7}).encode()) == {"a": text, "b": 7}


@pytest.mark.parametrize("kind", ["lists", "dicts", "mixed"])
def test_nesting_is_bounded_at_exactly_the_limit(kind):
    def nest(depth: int) -> bytes:
        value: Any = 1
        for level in range(depth):
            use_list = kind == "lists" or (kind == "mixed" and level % 2)
            value = [value, 2, "x"] if use_list else {"k": value, "n": 3}
        return json.dumps({"offers": [value]}).encode()

    # {"offers": [ ... ]} adds two levels around the nested value.
    assert parse_json(nest(MAX_JSON_DEPTH - 2)) is not None
    with pytest.raises(VastMalformedResponse, match="deeper than 64"):
        parse_json(nest(MAX_JSON_DEPTH - 1))


@given(JSONISH, st.integers(0, 8))
def test_depth_walk_agrees_with_a_recursive_count(value, limit):
    def depth(node: Any, records: bool, in_list: bool = False) -> int:
        if isinstance(node, dict) and (records or not in_list):
            return 1 + max((depth(v, records) for v in node.values()), default=0)
        if isinstance(node, list):
            return 1 + max((depth(v, records, True) for v in node), default=0)
        return 0

    assert depth_exceeds(value, limit) == (depth(value, True) > limit)
    # records=False: an object inside a list is a record, not entered (it counts no level).
    assert depth_exceeds(value, limit, records=False) == (depth(value, False) > limit)


def deep(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"k": [value]}
    return value


def test_a_search_answer_bounds_its_skeleton_and_leaves_its_records_to_the_parser():
    row = {"id": 1, "machine_id": 2, "dph_total": 0.5, "deep": deep(200)}  # 401 levels
    data = json.dumps({"offers": [row]}).encode()
    with pytest.raises(VastMalformedResponse, match="deeper than 64"):
        parse_json(data, "search")  # any other endpoint: the whole answer is walked
    [offer] = parse_json(data, "search", scalar_records=True)["offers"]
    assert Offer.from_api(offer).id == 1  # what is read of a record is scalars only
    # Past orjson's 1024 levels the stdlib's recursion limit refuses it: still one typed line.
    data = b'{"offers": [{"id": 1, "deep": ' + b"[" * 2000 + b"]" * 2000 + b"}]}"
    with pytest.raises(VastMalformedResponse, match="nested too deeply"):
        parse_json(data, "search", scalar_records=True)
    # The skeleton (lists in lists, objects that are not records) keeps the 64-level bound.
    lists = b"[" * 70 + b"]" * 70
    for data in (b'{"offers": [' + lists + b"]}", b'{"offers": [], "x": {"y": ' + lists + b"}}"):
        with pytest.raises(VastMalformedResponse, match="deeper than 64"):
            parse_json(data, "search", scalar_records=True)


# -- the models' readers ---------------------------------------------------------------------

NUMBERS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(2**70), 2**70),
    st.booleans(),
    st.none(),
    st.sampled_from(["1_0", "inf", "nan", "-0", "0.5", " 7 ", "1e3", "\u0661"]),
)


def plain_number(value: Any) -> float | None:
    """The strict reading, written out: finite JSON numbers, no bools, ints exact in a float."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, int):
        return float(value) if abs(value) <= 2**53 else None
    return value if math.isfinite(value) else None


@given(NUMBERS)
def test_quantity_price_and_id_fast_paths_keep_the_strict_rules(value):
    number = plain_number(value)
    if not isinstance(value, str):
        in_range = number is not None and 0 <= number <= 1e12
        assert _qty({"k": value}, "k") == (number if in_range else None)
        priced = number is not None and MIN_DPH <= number <= MAX_DPH
        assert valid_price(value) == (number if priced else None)
    if type(value) is int:  # exact ids; floats and text go the careful way (parse_int)
        assert valid_id(value) == (value if 1 <= value <= INT64_MAX else None)


@pytest.mark.parametrize("text", ["1_0", "inf", "nan", "-0", "1e999", "0x10"])
def test_strict_text_numbers_stay_refused(text):
    assert valid_price(text) is None and _qty({"k": text}, "k") in (None, 0.0)


@given(st.text(max_size=40), st.integers(0, 50))
def test_plain_text_shortcut_is_sanitize_line(text, limit):
    assert _text(text, limit) == sanitize_line(text, limit)


@pytest.mark.parametrize(
    "text", ["RTX 4090", "a\x1b[31mb", "tab\there", "\u202eevil", "x" * 2000, "caf\u00e9", ""]
)
def test_plain_text_shortcut_on_known_cases(text):
    assert _text(text, 1024) == sanitize_line(text, 1024)


def plain_offer(raw: Any) -> Offer:
    """Offer.from_api as it read before its inline checks: a careful reader per field, and the
    dataclass's own validating constructor."""
    if not isinstance(raw, dict):
        raise ModelError(f"offer is not a JSON object: {type(raw).__name__}")
    offer_id = _req_id(raw, "id", "offer")
    dph = valid_price(raw.get("dph_total"))
    if dph is None:
        raise ModelError(
            f"offer {offer_id}: field 'dph_total' is missing or not a price "
            f"(a number from {MIN_DPH:g} to {MAX_DPH:g} $/h): {describe(raw.get('dph_total'))}"
        )
    machine = _req_id(raw, "machine_id", "offer")
    gpus = raw.get("num_gpus")
    if gpus is not None:
        gpus = parse_int(gpus)
        if gpus is None or not 1 <= gpus <= 1024:
            raise ModelError(
                f"offer {offer_id}: field 'num_gpus' is not a GPU count (1 to 1024): "
                f"{describe(raw.get('num_gpus'))}"
            )
    cores = _qty(raw, "cpu_cores_effective")
    reliability = _qty(raw, "reliability2", upper=1.0)
    verification = _str(raw, "verification")
    return Offer(
        id=offer_id,
        machine_id=machine,
        host_id=_opt_id(raw, "host_id"),
        gpu_name=_str(raw, "gpu_name") or "unknown",
        num_gpus=1 if gpus is None else gpus,
        gpu_ram_gb=_gb(raw, "gpu_ram"),
        cpu_ram_gb=_gb(raw, "cpu_ram"),
        cpu_cores=_qty(raw, "cpu_cores") if cores is None else cores,
        cpu_name=_str(raw, "cpu_name"),
        dph_total=dph,
        disk_space_gb=_qty(raw, "disk_space"),
        inet_down=_qty(raw, "inet_down"),
        inet_up=_qty(raw, "inet_up"),
        pcie_bw=_qty(raw, "pcie_bw"),
        reliability=_qty(raw, "reliability", upper=1.0) if reliability is None else reliability,
        geolocation=_str(raw, "geolocation"),
        cuda_max_good=_qty(raw, "cuda_max_good", upper=1000.0),
        verified=None if verification is None else verification == "verified",
        rentable=_bool(raw, "rentable"),
        min_bid=valid_price(raw.get("min_bid")),
        storage_total_cost=_qty(raw, "storage_total_cost", upper=MAX_DPH),
    )


ODD = st.one_of(
    st.none(),
    st.booleans(),
    st.sampled_from([0, 1, -1, 2, 1024, 1025, 2**53 + 1, 2**63, 2**64, 10**30]),
    st.sampled_from([0.0, -0.0, 0.5, 1.0, 1.5, 999.0, 1e12, 1e13, math.inf, math.nan, 1e-5]),
    st.sampled_from(["", "7", "1_0", "inf", " 2 ", "verified", "Verified", "true", "x\x1by"]),
    st.sampled_from(["RTX 4090", "caf\u00e9", "tab\there", "a" * 1030, "\u202eevil"]),
    st.sampled_from([[1], {"a": 1}, (), b"1"]),
    st.integers(),
    st.floats(),
    st.text(max_size=8),
)
TYPICAL = {"id": 17, "machine_id": 5, "host_id": 9, "gpu_name": "RTX 4090", "num_gpus": 2,
           "gpu_ram": 24576, "cpu_ram": 257949, "cpu_cores_effective": 32.0, "cpu_cores": 64,
           "cpu_name": "EPYC", "dph_total": 0.5, "disk_space": 100.5, "inet_down": 900.0,
           "inet_up": 800.0, "pcie_bw": 24.1, "reliability2": 0.99, "reliability": 0.9,
           "geolocation": "Texas, US", "cuda_max_good": 12.4, "verification": "verified",
           "rentable": True}  # fmt: skip


def outcome(read: Any, raw: Any) -> Any:
    try:
        return read(raw)
    except ModelError as exc:
        return ("error", str(exc))


@settings(max_examples=400)
@given(
    st.dictionaries(st.sampled_from(sorted(TYPICAL)), ODD, max_size=6),
    st.lists(st.sampled_from(sorted(TYPICAL)), max_size=3),
)
def test_from_api_reads_every_value_as_the_careful_readers_do(patch, missing):
    raw = {k: v for k, v in {**TYPICAL, **patch}.items() if k not in missing}
    got, want = outcome(Offer.from_api, raw), outcome(plain_offer, raw)
    assert got == want
    assert type(got) is type(want)  # an Offer is an Offer, however it was built


EDGES = [
    None, True, False, 0, 1, -1, 2, 1024, 1025, INT64_MAX, INT64_MAX + 1, 2**64, 10**30,
    0.0, -0.0, 1e-5, MIN_DPH, MIN_DPH / 2, 0.5, 1.0, math.nextafter(1.0, 2.0), 999.0, 1000.0,
    1000.5, MAX_DPH, math.nextafter(MAX_DPH, math.inf), 1e12, math.nextafter(1e12, math.inf),
    1e308, math.inf, -math.inf, math.nan, 12.0, 2.0**53, "", "3", "0.5", "verified",
    "unverified", "x\x1by", "a" * 1024, "a" * 1025, "\u00e9", [1], {"a": 1},
]  # fmt: skip


@pytest.mark.parametrize("key", sorted(TYPICAL))
def test_from_api_reads_each_field_at_its_edges_as_the_careful_readers_do(key):
    for value in [*EDGES, "missing"]:
        raw = {k: v for k, v in TYPICAL.items() if k != key}
        if value != "missing":
            raw[key] = value
        got, want = outcome(Offer.from_api, raw), outcome(plain_offer, raw)
        assert got == want, (key, value)


def test_from_api_of_a_typical_row_and_of_other_mappings():
    from types import MappingProxyType

    assert Offer.from_api(TYPICAL) == plain_offer(TYPICAL)
    assert Offer.from_api(MappingProxyType(TYPICAL)) == plain_offer(TYPICAL)
    with pytest.raises(ModelError, match="not a JSON object: list"):
        Offer.from_api([TYPICAL])  # type: ignore[arg-type]


def test_an_unchecked_offer_is_a_frozen_offer_like_any_other():
    offer = Offer.from_api(TYPICAL)
    assert type(offer) is Offer and offer == plain_offer(TYPICAL)
    assert hash(offer) == hash(plain_offer(TYPICAL))
    with pytest.raises(AttributeError):  # FrozenInstanceError
        offer.id = 3  # type: ignore[misc]
    # slots: no new attributes either (Python 3.11 says so with a TypeError, as for any Offer)
    with pytest.raises((AttributeError, TypeError)):
        offer.extra = 1  # type: ignore[attr-defined]


def test_an_unchecked_constructor_needs_a_slotted_dataclass():
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class NoSlots:
        a: int

    with pytest.raises((TypeError, AttributeError)):
        unchecked_constructor(NoSlots)


# -- ranking ---------------------------------------------------------------------------------


def _offer(oid: int, machine: int, gpu: str, n: int, ram_gb: float, dph: float) -> Offer:
    raw = {"id": oid, "machine_id": machine, "gpu_name": gpu, "num_gpus": n, "dph_total": dph,
           "cpu_ram": ram_gb * 1000}  # fmt: skip
    return Offer.from_api(raw)


@given(
    st.lists(
        st.tuples(
            st.integers(1, 30),  # machine
            st.sampled_from(["RTX 4090", "RTX 3090", "Mystery GPU"]),
            st.integers(1, 4),
            st.sampled_from([0.0, 100.0, 200.0, 300.0, 600.0, 1200.0]),
            st.sampled_from([0.1, 0.2, 0.3, 0.5]),  # ties in price and in $/proof
        ),
        max_size=25,
    ),
    st.lists(st.tuples(st.integers(1, 30), st.floats(1, 80)), max_size=8),
)
def test_rank_order_and_annotations_match_the_plain_definition(rows, measured):
    offers = [_offer(i + 1, *row) for i, row in enumerate(rows)]
    perf = [PerfRecord(m, "RTX 4090", 1, best_rate=r, last_rate=r, samples=1, measured_at=1.0,
                       cpu_ram_gb=256.0) for m, r in measured]  # fmt: skip
    ranked = rank_offers(offers, perf, {3: "x"}, 0.008)
    # The order is the stable sort by RankedOffer.sort_key of the offers as given.
    by_id = {r.offer.id: r for r in ranked}
    expected = sorted((by_id[o.id] for o in offers), key=RankedOffer.sort_key)
    assert [r.offer.id for r in ranked] == [r.offer.id for r in expected]
    # Each prior is what RateModel.prior says for that very offer (the memo changes nothing).
    model = RateModel(perf)
    for r in ranked:
        prior, source = model.prior(r.offer)
        assert r.prior_rate == prior
        assert r.rate_source == ("measured" if r.known_rate is not None else source)
        assert r.bad == (r.offer.machine_id == 3)


def test_ranked_offer_still_renders_its_row():
    [r] = rank_offers([_offer(1, 10, "RTX 4090", 1, 516.0, 0.3)], [], set(), 0.008)
    row = r.to_json()
    assert row["id"] == 1 and row["rate_source"] == "model-default" and row["bad"] is False


@given(
    st.one_of(
        st.floats(MIN_DPH, MAX_DPH),
        st.sampled_from([0.24, 0.232, 0.016, 0.008 * 3, 1e-4, MAX_DPH, 0.1 + 0.2]),
    ),
    st.one_of(st.floats(1e-12, 10.0), st.sampled_from([0.008, 0.001, 1e-300, 5e-324, 0.3])),
)
def test_min_rate_at_one_budget_is_the_definition(dph, budget):
    """ceil(round(dph / budget, 9)), at least 1, capped: the fast way skips round() only when
    the ratio is more than 1e-9 above a whole number."""
    ratio = dph / budget
    want = MAX_MIN_RATE if not ratio < MAX_MIN_RATE else max(1.0, float(math.ceil(round(ratio, 9))))
    assert min_rate_at(budget)(dph) == want == min_rate(dph, budget)


@pytest.mark.parametrize("whole", [1, 29, 30, 12345])
@pytest.mark.parametrize("frac", [0.0, 1e-12, 1e-10, 3e-10, 4.9e-10, 5e-10, 6e-10, 1e-9, 2e-9])
def test_min_rate_at_just_above_a_whole_rate(whole, frac):
    budget = 0.008
    dph = (whole + frac) * budget
    want = max(1.0, float(math.ceil(round(dph / budget, 9))))
    assert min_rate_at(budget)(dph) == want


@pytest.mark.parametrize("budget", [0, -1.0, math.nan, math.inf, True, "0.008", 10**400])
def test_min_rate_at_refuses_a_budget_once(budget):
    with pytest.raises(ValueError, match="max \\$/proof"):
        min_rate_at(budget)


# -- start-up: each verb imports what it needs -----------------------------------------------


def loaded_after(code: str) -> set[str]:
    probe = f"import sys\n{code}\nprint(' '.join(sorted({{m.split('.')[0] for m in sys.modules}})))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return set(out.stdout.split())


HEAVY = {"httpx", "aiosqlite", "asyncssh", "textual", "rich", "uvicorn"}


@pytest.mark.parametrize(
    "code",
    [
        "import vastui.cli",
        "from vastui.cli import main\ntry:\n    main(['--version'])\nexcept SystemExit:\n    pass",
        "import vastui.backend",
    ],
    ids=["import", "--version", "backend"],
)
def test_the_cli_loads_no_heavy_library_until_a_verb_needs_it(code):
    assert not loaded_after(code) & HEAVY


def test_errors_still_one_line_by_the_module_that_raised_them():
    from vastui.cli import CliError, _expected_error
    from vastui.engine.keys import SshKeyError
    from vastui.store import StoreError
    from vastui.vast.errors import VastMalformedResponse

    for exc in (SshKeyError("x"), StoreError("x"), VastMalformedResponse("e", "x"), CliError("x"),
                FileNotFoundError("x")):  # fmt: skip
        assert _expected_error(exc), exc
    for exc in (RuntimeError("bug"), ValueError("bug"), KeyError("bug")):
        assert not _expected_error(exc), exc


def test_the_events_help_still_names_every_kind(capsys):
    from vastui.cli import main
    from vastui.domain.journal import EVENT_KINDS

    with pytest.raises(SystemExit):
        main(["events", "--help"])
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps the line
    assert ", ".join(EVENT_KINDS) in out and "<event kinds>" not in out
