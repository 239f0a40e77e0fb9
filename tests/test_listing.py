"""A listing answer read a piece at a time gives exactly what the whole parse gives
(vastui/vast/listing.py), whatever the text inside the records."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vastui.vast import listing
from vastui.vast.errors import VastProtocolError
from vastui.vast.listing import convert_records, decode_listing
from vastui.vast.models import ModelError, Offer, parse_json

WHERE = "POST /bundles/"


def record(item: Any) -> Any:
    if not isinstance(item, dict):
        raise ModelError(f"not an object: {type(item).__name__}")
    return item


def key_of(item: Any) -> str:
    return repr(item.get("id")) if isinstance(item, dict) else type(item).__name__


def whole(data: bytes) -> Any:
    """The reference: the answer parsed whole, then converted."""
    value = parse_json(data, WHERE, scalar_records=True)
    items = value.get("offers") if isinstance(value, dict) else None
    if not isinstance(items, list):
        raise VastProtocolError(f"{WHERE}: answer has no 'offers' list")
    return convert_records(items, record, key_of)


def outcome(fn: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return ("ok", fn(*args, **kwargs))
    except VastProtocolError as exc:  # VastMalformedResponse is one
        return ("error", type(exc))


# Text that looks like a cut or the answer's end: the splitter must never be fooled by it.
TRICKY = st.sampled_from(['}, {"', '},{"', "]}", "[", "]", "{", "}", '\\"', '"', ", ", "\\"])
TEXT = st.lists(st.one_of(TRICKY, st.text(max_size=4)), max_size=6).map("".join)
SCALAR = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False), TEXT
)
VALUE = st.recursive(
    SCALAR,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(TEXT, inner, max_size=3)),
    max_leaves=8,
)
RECORD = st.dictionaries(st.one_of(st.just("id"), TEXT), VALUE, max_size=5)
ITEM = st.one_of(RECORD, RECORD, RECORD, VALUE)  # mostly objects, sometimes not


@given(
    items=st.lists(ITEM, max_size=12),
    compact=st.booleans(),
    piece_bytes=st.integers(1, 200),
)
def test_pieces_give_what_the_whole_answer_gives(items, compact, piece_bytes):
    separators = (",", ":") if compact else (", ", ": ")
    data = json.dumps({"offers": items}, separators=separators).encode()
    expected = outcome(whole, data)
    got = outcome(decode_listing, data, WHERE, "offers", record, key_of, piece_bytes=piece_bytes)
    assert got == expected


@given(body=st.binary(max_size=80), piece_bytes=st.integers(1, 16))
def test_any_bytes_after_the_head_give_what_the_whole_answer_gives(body, piece_bytes):
    data = b'{"offers": [' + body
    expected = outcome(whole, data)
    got = outcome(decode_listing, data, WHERE, "offers", record, key_of, piece_bytes=piece_bytes)
    assert got == expected


@pytest.mark.parametrize(
    "data",
    [
        b'{"offers": []}',
        b'{"offers":[]}\n',
        b'{"offers": [ ]}',
        b'{"offers": [{"id": 1}, {"id": 2}], "offers": [{"id": 3}]}',  # the last one counts
        b'{"offers": [{"id": 1}, {"id": 2}], "more": [{"id": 3}]}',
        b'{"more": 1, "offers": [{"id": 1}, {"id": 2}]}',
        b'{"offers": [{"id": 1}, {"id": NaN}]}',  # the stdlib path: NaN reads as null
        b'\xef\xbb\xbf{"offers": [{"id": 1}, {"id": 2}]}',  # a BOM
        b'{"offers": [{"id": 1}, {"id": 2}]} x',
        b'{"offers": [{"id": 1}, {"id": 2}]',
        b'{"offers": {"id": 1}}',
        b'{"offers": [{"id": "a}, {\\"b"}, {"id": 2}]}',
        b'{"offers": [{"id": "a}, {"}, {"id": 2}]}',  # a cut at the end of a string
        b'{"offers": [1, [2], {"id": 3}]}',
        b'{"offers": [' + b"[" * 100 + b"]" * 100 + b"]}",  # too deep outside the records
        b'{"offers": [{"a": ' + b"[" * 100 + b"]" * 100 + b"}]}",  # inside a record: bounded
        b"[]",
        b"",
    ],
)
@pytest.mark.parametrize("piece_bytes", [1, 5, 1 << 20])
def test_odd_answers_give_what_the_whole_answer_gives(data, piece_bytes):
    expected = outcome(whole, data)
    got = outcome(decode_listing, data, WHERE, "offers", record, key_of, piece_bytes=piece_bytes)
    assert got == expected


def test_a_clean_answer_is_read_in_pieces_never_whole(monkeypatch):
    items = [{"id": n, "gpu_name": f"RTX {n}", "search": {"n": n}} for n in range(1, 301)]
    data = json.dumps({"offers": items}).encode()
    pieces = listing._pieces(data, "offers", 1000)
    assert pieces is not None and len(pieces) > 10

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the whole answer was parsed")

    monkeypatch.setattr(listing, "parse_json", refuse)
    got, rejected = decode_listing(data, WHERE, "offers", record, key_of, piece_bytes=1000)
    assert got == items and rejected == {}


def test_a_cut_inside_a_string_falls_back_to_the_whole_answer(monkeypatch):
    # The string's closing quote makes the cut's bytes: '"xx}, {"' ends a string.
    items = [{"id": 1, "note": "x" * 20 + "}, {"}, {"id": 2}]
    data = json.dumps({"offers": items}).encode()
    calls = []
    real = listing.parse_json

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(listing, "parse_json", counting)
    got, _ = decode_listing(data, WHERE, "offers", record, key_of, piece_bytes=5)
    assert got == items and calls == [1]


def test_refused_records_are_reported_once_per_key_with_the_first_reason():
    data = b'{"offers": [{"id": 1, "machine_id": 2}, 7, 8, {"id": 1}]}'
    offers, rejected = decode_listing(data, WHERE, "offers", Offer.from_api, key_of, piece_bytes=10)
    assert offers == []
    assert set(rejected) == {"1", "int"}
    assert "dph_total" in rejected["1"]  # the first of the two offers 1: no price


@pytest.mark.parametrize("at", [0, 1, (1 << 16) - 3, (1 << 16) - 1, 1 << 16, 200_000, 599_995])
@pytest.mark.parametrize("cut", [b'}, {"', b'},{"'])
def test_the_next_cut_is_found_across_the_growing_windows(at, cut):
    data = bytearray(b"x" * 600_000)
    data[at : at + len(cut)] = cut
    data = bytes(data[:600_000])
    expected = at if at + len(cut) <= len(data) else -1
    assert listing._next_cut(data, 0, len(data)) == expected
    assert listing._next_cut(data, at + 1, len(data)) == -1
    # Both styles present: the first one wins, whichever it is.
    other = b'},{"' if cut == b'}, {"' else b'}, {"'
    both = data[: at + 10] + other + data[at + 10 + len(other) :]
    assert listing._next_cut(both, 0, len(both)) == expected
