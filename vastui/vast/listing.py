"""Reading a large listing answer (`{"offers": [...]}`) a piece at a time.

An offer search can answer 10,000 offers, ~23 MB of JSON. Parsed whole it is a tree of
~100 MB of dicts that lives only until each offer's dozen scalars are read (models.Offer):
the engine's peak RSS was that tree. Here the list is cut at record boundaries into pieces of
~2 MB, each piece is parsed and converted, and its dicts die before the next is parsed: the
peak is one piece's tree, and the parse takes about half as long (small young trees: fewer
and cheaper GC passes, warm caches; bench/offers.py).

Cutting is sound without a tokenizer: a piece is cut after a `}` that is followed by `, {"`
(or `,{"`). That byte run can also end a string (`"a}, {"`), but then the piece before the
cut ends inside a string and does not parse; a piece that parses was read from a true record
boundary by the same parser as the whole answer, so it ends at one too. Any piece that does
not parse (a cut inside a string, NaN, a BOM, another key after the list, ...) sends the whole
answer through `parse_json`, and what was converted is dropped: the result is always what
`convert_records(parse_json(data)[key])` gives (tests/test_listing.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import orjson

from vastui.vast.errors import VastMalformedResponse, VastProtocolError
from vastui.vast.models import MAX_JSON_DEPTH, ModelError, depth_exceeds, parse_json

_T = TypeVar("_T")

PIECE_BYTES = 2 << 20  # ~850 offers: a piece's tree is ~4 MB
_CUTS = (b'}, {"', b'},{"')  # json.dumps' default separators, and compact ones
_WHITESPACE = b" \t\r\n"


def convert_records(
    items: list[Any], record: Callable[[Any], _T], record_key: Callable[[Any], str]
) -> tuple[list[_T], dict[str, str]]:
    """Each item through `record`; the ones it refuses (ModelError) by key, first reason."""
    out: list[_T] = []
    append = out.append
    rejected: dict[str, str] = {}
    for item in items:
        try:
            append(record(item))
        except ModelError as exc:
            rejected.setdefault(record_key(item), str(exc))
    return out, rejected


def decode_listing(
    data: bytes,
    where: str,
    key: str,
    record: Callable[[Any], _T],
    record_key: Callable[[Any], str],
    *,
    piece_bytes: int = PIECE_BYTES,
) -> tuple[list[_T], dict[str, str]]:
    """`convert_records` over the list under `key` of the answer `data`, which must be a JSON
    object holding that list (else `VastProtocolError`, or `VastMalformedResponse` when it is
    not JSON), without ever holding the whole parsed answer."""
    spans = _pieces(data, key, piece_bytes)
    if spans is not None:
        converted = _convert_pieces(data, where, spans, record, record_key)
        if converted is not None:
            return converted
    value = parse_json(data, where, scalar_records=True)
    items = value.get(key) if isinstance(value, dict) else None
    if not isinstance(items, list):
        raise VastProtocolError(f"{where}: answer has no '{key}' list")
    return convert_records(items, record, record_key)


def _convert_pieces(
    data: bytes,
    where: str,
    spans: list[tuple[int, int]],
    record: Callable[[Any], _T],
    record_key: Callable[[Any], str],
) -> tuple[list[_T], dict[str, str]] | None:
    """Every piece parsed and converted; None as soon as one does not parse. Nesting is bounded
    as `parse_json(scalar_records=True)` bounds it: objects in the list by orjson (1024
    levels), anything else at MAX_JSON_DEPTH (the piece's list is the answer's second level)."""
    view = memoryview(data)
    out: list[_T] = []
    rejected: dict[str, str] = {}
    for start, end in spans:
        piece = bytearray(end - start + 2)  # "[" + the records + "]": one copy
        piece[0] = 0x5B
        piece[1:-1] = view[start:end]
        piece[-1] = 0x5D
        try:
            items = orjson.loads(piece)
        except orjson.JSONDecodeError:
            return None
        del piece
        if depth_exceeds(items, MAX_JSON_DEPTH - 1, records=False):
            raise VastMalformedResponse(where, f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
        records, refused = convert_records(items, record, record_key)
        del items  # this piece's dicts go now, before the next piece is parsed
        out += records
        for item_key, reason in refused.items():
            rejected.setdefault(item_key, reason)
    return out, rejected


def _pieces(data: bytes, key: str, piece_bytes: int) -> list[tuple[int, int]] | None:
    """Byte spans of the records, cut every ~piece_bytes at a likely boundary; None when the
    answer is not plainly `{"<key>": [ ... ]}` (then it is parsed whole)."""
    if not isinstance(data, bytes):
        return None
    head = f'{{"{key}":'.encode()
    if not data.startswith(head):
        return None
    start = len(head)
    while start < len(data) and data[start] in _WHITESPACE:
        start += 1
    if not data.startswith(b"[", start):
        return None
    end = len(data.rstrip(_WHITESPACE))
    if not data.endswith(b"]}", 0, end):
        return None
    start, end = start + 1, end - 2
    if not data[start:end].strip(_WHITESPACE):
        return []
    spans: list[tuple[int, int]] = []
    step = max(1, piece_bytes)
    while end - start > step:
        cut = _next_cut(data, start + step, end)
        if cut < 0:
            break
        spans.append((start, cut + 1))  # through the "}"
        start = data.index(b"{", cut + 2)  # the next record's "{"
    spans.append((start, end))
    return spans


def _next_cut(data: bytes, start: int, end: int) -> int:
    """Position of the "}" of the first cut at or after `start`, or -1. Looked for in a
    window that grows: a cut style the answer does not use would otherwise be searched for
    to the end of the answer at every cut (records are ~2 KB apart)."""
    window = 1 << 16
    while start < end:
        stop = min(end, start + window)
        reach = min(end, stop + len(_CUTS[0]))  # a cut may straddle the window's end
        found = [at for at in (data.find(cut, start, reach) for cut in _CUTS) if 0 <= at < stop]
        if found:
            return min(found)
        start, window = stop, window * 2
    return -1
