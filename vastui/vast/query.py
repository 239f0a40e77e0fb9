"""Offer filter text in the ``vastai search offers`` syntax -> the JSON query for ``/bundles/``.

The output matches what the vastai 1.9.1 CLI sends, quirks included: numbers go out as the
strings the user typed (``num_gpus=1`` -> ``{"num_gpus": {"eq": "1"}}``), GB fields become MB
floats, ``duration`` days become seconds, ``_`` in values becomes a space, dotted driver versions
become ints, and ``field=any`` drops the field.  Where the CLI would crash, print an error, or
send something the server cannot use, :class:`QueryError` is raised instead.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Mapping
from types import MappingProxyType

from vastui.numbers import parse_number

__all__ = [
    "DEFAULT_FILTERS",
    "DEFAULT_ORDER",
    "FIELD_ALIASES",
    "KNOWN_FIELDS",
    "MAX_FILTER_CHARS",
    "MAX_ORDER_CHARS",
    "OFFER_TYPES",
    "QueryError",
    "build_search_body",
    "parse_order",
    "parse_query",
]


# The longest filter (and order) text accepted, from the config, `--filter` or the console.
# A real query is a line a person writes: vastui's default is 150 characters, and one that
# names thirty GPU models in a list with a dozen numeric terms beside it is about 1,500. The
# parse is linear, about 0.4 µs a character (1.5 ms at this bound); without a bound a 10 MB
# filter took the engine's event loop 6-12 s at every search, and a stop with it.
MAX_FILTER_CHARS = 4096
MAX_ORDER_CHARS = 256  # a few field names, comma-separated
_SHOWN_CHARS = 80  # of a term quoted in an error: one line, whatever the term


class QueryError(ValueError):
    """A filter term (or order/type value) the parser cannot turn into a query."""

    term: str
    problem: str

    def __init__(self, term: str, problem: str, *, what: str = "filter term") -> None:
        self.term = term
        self.problem = problem
        shown = term if len(term) <= _SHOWN_CHARS else term[: _SHOWN_CHARS - 1] + "…"
        shown = shown if shown.isprintable() else repr(shown)[1:-1]
        super().__init__(f"bad {what} '{shown}': {problem}")


def _check_length(text: str, bound: int, what: str) -> None:
    """Refuse text over its bound before any of it is parsed."""
    if len(text) > bound:
        raise QueryError(text, f"{len(text)} characters, at most {bound}", what=what)


# --- field tables (vastai api/query.py offers_fields, typed from the CLI help) -------------

_NUMERIC_FIELDS = frozenset(
    {
        "bw_nvlink",
        "cluster_id",
        "compute_cap",
        "cpu_cores",
        "cpu_cores_effective",
        "cpu_ghz",
        "cpu_ram",
        "cuda_max_good",
        "direct_port_count",
        "disk_bw",
        "disk_space",
        "dlperf",
        "dlperf_per_dphtotal",
        "dph_total",
        "duration",
        "flops_per_dphtotal",
        "gpu_frac",
        "gpu_max_power",
        "gpu_max_temp",
        "gpu_mem_bw",
        "gpu_ram",
        "gpu_total_ram",
        "host_id",
        "id",
        "inet_down",
        "inet_down_cost",
        "inet_up",
        "inet_up_cost",
        "machine_id",
        "min_bid",
        "num_gpus",
        "pci_gen",
        "pcie_bw",
        "reliability",
        "storage_cost",
        "total_flops",
    }
)
_BOOL_FIELDS = frozenset(
    {
        "datacenter",
        "external",
        "gpu_display_active",
        "has_avx",
        "rentable",
        "rented",
        "static_ip",
        "verified",
        "vms_enabled",
    }
)
_STRING_FIELDS = frozenset(
    {
        "cpu_arch",
        "driver_version",
        "geolocation",
        "gpu_arch",
        "gpu_name",
        "mobo_name",
        "ubuntu_version",
        "verification",
    }
)

KNOWN_FIELDS: frozenset[str] = _NUMERIC_FIELDS | _BOOL_FIELDS | _STRING_FIELDS
"""Offer fields the CLI knows for a query (canonical names, after alias resolution)."""

FIELD_ALIASES: Mapping[str, str] = MappingProxyType(
    {
        "cuda_vers": "cuda_max_good",
        "display_active": "gpu_display_active",
        "dlperf_usd": "dlperf_per_dphtotal",
        "dph": "dph_total",
        "flops_usd": "flops_per_dphtotal",
    }
)
"""CLI spelling -> API field name (used for filters and for ``order``)."""

_MULTIPLIERS: Mapping[str, float] = MappingProxyType(
    {"cpu_ram": 1000, "gpu_ram": 1000, "gpu_total_ram": 1000, "duration": 24.0 * 60.0 * 60.0}
)

DEFAULT_FILTERS: Mapping[str, Mapping[str, object]] = MappingProxyType(
    {
        "verified": MappingProxyType({"eq": True}),
        "external": MappingProxyType({"eq": False}),
        "rentable": MappingProxyType({"eq": True}),
    }
)
"""Filters the CLI adds unless ``--no-default`` is given."""

DEFAULT_ORDER = "score-"
"""The CLI's default ``-o`` value, i.e. ``[["score", "desc"]]``."""

OFFER_TYPES = frozenset({"on-demand", "reserved", "bid", "interruptible"})

_OPERATORS: Mapping[str, str] = MappingProxyType(
    {
        "=": "eq",
        "==": "eq",
        "eq": "eq",
        "!=": "neq",
        "neq": "neq",
        "noteq": "neq",
        ">": "gt",
        "gt": "gt",
        ">=": "gte",
        "gte": "gte",
        "<": "lt",
        "lt": "lt",
        "<=": "lte",
        "lte": "lte",
        "in": "in",
        "notin": "notin",
        "nin": "notin",
    }
)
_LIST_OPS = frozenset({"in", "notin"})
_WILDCARDS = frozenset({"?", "*", "any"})
_QUOTES = "\"'"

# One term: field, optional operator, optional value.  Mirrors the CLI's regex, but any
# whitespace separates terms and word operators may end the text (so "x in" -> missing value).
_TERM_RE = re.compile(
    r"""
    (?P<field>[A-Za-z0-9_]+)
    (?P<op>\s*[=<>!]+|\s+(?:[lg]te?|nin|neq|eq|not\s?eq|not\s?in|in)(?=\s|$))?
    \s*
    (?P<value>\[[^\]]*\]|"[^"]*"|'[^']*'|\S+)?
    """,
    re.VERBOSE,
)
_LOOKS_LIKE_TERM_RE = re.compile(r"([A-Za-z0-9_]+)\s*[=<>!]")
# Each part at most 3 digits: the CLI packs them zero-padded to 3 (535.86.05 -> 535086005).
_VERSION_RE = re.compile(r"([0-9]{1,3})\.([0-9]{1,3})\.([0-9]{1,3})")
_ORDER_FIELD_RE = re.compile(r"[A-Za-z0-9_]+")


# --- helpers ---------------------------------------------------------------------------------


def _is_number(text: str) -> bool:
    # Plain ASCII decimal/exponent notation only (models.parse_number): float() would also take
    # "١٢" or "1_0", which the server cannot use.
    return parse_number(text) is not None


def _unquote(text: str) -> str:
    # The CLI strips '"' only; single quotes are stripped too (its own help uses ['XV','XZ']).
    return text.replace("_", " ").strip(_QUOTES)


def _unknown_field(term: str, name: str) -> QueryError:
    candidates = sorted(KNOWN_FIELDS | FIELD_ALIASES.keys())
    close = difflib.get_close_matches(name, candidates, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return QueryError(term, f"unknown field '{name}'{hint}")


def _check_unquoted(term: str, head: str, text: str) -> None:
    """Reject an unquoted value that is really the next term, or holds comparison chars."""
    if text[:1] in _QUOTES:
        return
    m = _LOOKS_LIKE_TERM_RE.match(text)
    if m and (m[1] in KNOWN_FIELDS or m[1] in FIELD_ALIASES):
        raise QueryError(head, "missing value")  # the value slot holds the next term
    bad = next((c for c in text if c in "=<>"), None)
    if bad is not None:
        raise QueryError(term, f"unexpected '{bad}' in value")


def _driver_version(term: str, value: str) -> int:
    m = _VERSION_RE.fullmatch(value.strip(_QUOTES))
    if m is None:
        raise QueryError(term, "driver_version must look like 535.86.05")
    return int("".join(part.zfill(3) for part in m.groups()))


def _list_value(term: str, field: str, inner: str) -> list[str]:
    items = [item.strip() for item in inner.split(",") if item.strip()]
    if not items:
        raise QueryError(term, "empty list")
    if field in _MULTIPLIERS:
        raise QueryError(term, f"'in'/'notin' lists are not supported for {field}")
    if field == "driver_version" and "." in inner:
        raise QueryError(term, "dotted driver versions cannot be used in a list")
    out = []
    for item in items:
        _check_unquoted(term, term, item)
        value = _unquote(item)
        if not value:
            raise QueryError(term, "empty value in list")
        if field in _NUMERIC_FIELDS and not _is_number(value):
            raise QueryError(term, f"expected a number, got '{value}'")
        if field in _BOOL_FIELDS and value.lower() not in ("true", "false"):
            raise QueryError(term, f"expected true or false, got '{value}'")
        out.append(value)  # list items stay strings, as the CLI sends them
    return out


def _scalar_value(term: str, field: str, raw: str) -> object:
    if field == "driver_version" and "." in raw:
        return _driver_version(term, raw)
    value = _unquote(raw)
    if not value:
        raise QueryError(term, "missing value")
    if field in _MULTIPLIERS:
        if not _is_number(value):
            raise QueryError(term, f"expected a number, got '{value}'")
        scaled = float(value) * _MULTIPLIERS[field]
        if not math.isfinite(scaled):  # 1e307 GB is a number, 1e310 MB is not JSON
            raise QueryError(term, f"number out of range: '{value}'")
        return scaled
    converted: object = {
        "true": True,
        "True": True,
        "false": False,
        "False": False,
        "None": None,
        "null": None,
    }.get(value, value)
    if field in _NUMERIC_FIELDS and converted is not None and not _is_number(value):
        raise QueryError(term, f"expected a number, got '{value}'")
    if field in _BOOL_FIELDS and isinstance(converted, str):
        raise QueryError(term, f"expected true or false, got '{value}'")
    return converted


def _parse_into(text: str, res: dict[str, dict[str, object]]) -> dict[str, dict[str, object]]:
    pos, end = 0, len(text)
    while True:
        while pos < end and text[pos].isspace():
            pos += 1
        if pos >= end:
            return res
        m = _TERM_RE.match(text, pos)
        if m is None:
            chunk = text[pos:].split(None, 1)[0]
            raise QueryError(chunk, "expected a field name")
        start, pos = pos, m.end()
        term = text[start:pos]
        if pos < end and not text[pos].isspace():
            junk_end = pos
            while junk_end < end and not text[junk_end].isspace():
                junk_end += 1
            raise QueryError(text[start:junk_end], "unexpected text after value")

        name, raw = m["field"], m["value"] or ""
        op_text = re.sub(r"\s+", "", m["op"] or "")
        head = text[start : m.end("op")] if m["op"] else name
        if not op_text:
            raise QueryError(term, "missing operator")
        op = _OPERATORS.get(op_text)
        if op is None:
            raise QueryError(term, f"unknown operator '{op_text}'")
        if not raw:
            raise QueryError(term, "missing value")
        field = FIELD_ALIASES.get(name, name)
        if field not in KNOWN_FIELDS:
            raise _unknown_field(term, name)

        if raw[:1] in _QUOTES:
            if len(raw) < 2 or raw[-1] != raw[0]:
                raise QueryError(term, "unbalanced quote")
        elif raw.startswith("["):
            if not raw.endswith("]") or "[" in raw[1:-1]:
                raise QueryError(term, "unbalanced '['")
        elif "]" in raw:
            raise QueryError(term, "unbalanced ']'")
        bracketed = raw.startswith("[")
        inner = raw.strip(",[]")  # the CLI strips brackets/commas off the ends of any value

        value: object
        if op in _LIST_OPS:
            value = _list_value(term, field, inner)
        else:
            if bracketed and "," in inner:
                raise QueryError(term, "a list value needs 'in' or 'notin'")
            if not inner.strip():
                raise QueryError(term, "missing value")
            _check_unquoted(term, head, inner)
            if inner in _WILDCARDS:
                if op != "eq":
                    raise QueryError(term, f"'{inner}' only works with '='")
                res.pop(field, None)
                continue
            value = _scalar_value(term, field, inner)
        res.setdefault(field, {})[op] = value


# --- public API ------------------------------------------------------------------------------


def parse_query(text: str) -> dict[str, dict[str, object]]:
    """Parse filter text into ``{field: {op: value}}`` exactly as the CLI does (no defaults);
    text over MAX_FILTER_CHARS is refused unread."""
    _check_length(text, MAX_FILTER_CHARS, "filter")
    return _parse_into(text, {})


def parse_order(order: str) -> list[list[str]]:
    """Parse a CLI ``-o`` string (``"dph,score-"``) into ``[[field, "asc"|"desc"], ...]``."""
    _check_length(order, MAX_ORDER_CHARS, "order")
    parsed: list[list[str]] = []
    for item in order.split(","):
        item = item.strip()
        if not item:
            continue
        field = item.strip("+-")
        has_minus, has_plus = "-" in item, "+" in item
        if has_minus and has_plus:
            raise QueryError(item, "use either '+' or '-', not both", what="order")
        if not _ORDER_FIELD_RE.fullmatch(field):
            raise QueryError(item, "expected a field name with optional +/- suffix", what="order")
        parsed.append([FIELD_ALIASES.get(field, field), "desc" if has_minus else "asc"])
    return parsed


def build_search_body(
    text: str,
    *,
    order: str | None = None,
    limit: int | None = None,
    offer_type: str = "on-demand",
    allocated_storage: float = 5.0,
    default_filters: bool = True,
) -> dict[str, object]:
    """Build the full ``POST /api/v0/bundles/`` body the CLI sends for ``search offers``."""
    if offer_type not in OFFER_TYPES:
        raise QueryError(
            offer_type,
            "expected on-demand, reserved, bid or interruptible",
            what="offer type",
        )
    _check_length(text, MAX_FILTER_CHARS, "filter")
    res: dict[str, dict[str, object]] = {}
    if default_filters:
        res = {name: dict(ops) for name, ops in DEFAULT_FILTERS.items()}
    body: dict[str, object] = dict(_parse_into(text, res))
    body["order"] = parse_order(DEFAULT_ORDER if order is None else order)
    body["type"] = "bid" if offer_type == "interruptible" else offer_type
    if limit:
        body["limit"] = int(limit)
    body["allocated_storage"] = float(allocated_storage)
    return body
