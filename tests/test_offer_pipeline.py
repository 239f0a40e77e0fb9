"""Issue 11, the offer pipeline's fast paths: each gives exactly what the careful path gives.

parse_json skips the per-integer hook when the bytes cannot hold a too-long integer, and walks
the nesting in bulk; the models read exact JSON types first and skip sanitizing plain ASCII;
rank_offers works each prior out once and sorts by precomputed keys. None of that may change
a result (bench/offers.py measures what it saves).
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

from vastui.engine.ranking import RankedOffer, RateModel, rank_offers
from vastui.sanitize import sanitize_line
from vastui.store.records import PerfRecord
from vastui.vast.errors import VastMalformedResponse
from vastui.vast.models import (
    INT64_MAX,
    MAX_DPH,
    MAX_JSON_DEPTH,
    MIN_DPH,
    Offer,
    _depth_exceeds,
    _json_constant,
    _json_int,
    _qty,
    _text,
    parse_json,
    valid_id,
    valid_price,
)


def careful(data: bytes | str) -> Any:
    """What parse_json gave before its fast path: the hook on every integer."""
    return json.loads(data, parse_int=_json_int, parse_constant=_json_constant)


# -- parse_json ------------------------------------------------------------------------------

JSON_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**80), 10**80),  # both sides of the 64-digit bound
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


@pytest.mark.parametrize(
    ("digits", "expected"),
    [(64, 10**63), (65, None), (400, None), (5000, None)],
)
@pytest.mark.parametrize("encoding", ["utf-8", "utf-16-le", "utf-16", "utf-32"])
def test_integers_past_64_digits_read_as_null_in_any_encoding(digits, expected, encoding):
    data = ('{"a": 1' + "0" * (digits - 1) + ', "b": 2}').encode(encoding)
    assert parse_json(data) == {"a": expected, "b": 2}


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
    def depth(node: Any) -> int:
        if isinstance(node, dict):
            return 1 + max((depth(v) for v in node.values()), default=0)
        if isinstance(node, list):
            return 1 + max((depth(v) for v in node), default=0)
        return 0

    assert _depth_exceeds(value, limit) == (depth(value) > limit)


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
    from vastui.store import EVENT_KINDS

    with pytest.raises(SystemExit):
        main(["events", "--help"])
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps the line
    assert ", ".join(EVENT_KINDS) in out and "<event kinds>" not in out
