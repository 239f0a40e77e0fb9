"""Evaluation of the Vast.ai offer-search query object (vast-api.md §3.2)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from vastsim.market import price_fields

OPERATORS = frozenset({"eq", "neq", "gt", "gte", "lt", "lte", "in", "notin"})

ALIASES = {
    "cuda_vers": "cuda_max_good",
    "dph": "dph_total",
    "dlperf_usd": "dlperf_per_dphtotal",
    "flops_usd": "flops_per_dphtotal",
    "display_active": "gpu_display_active",
}

# Top-level keys that are not field conditions.
SPECIAL_KEYS = frozenset(
    {
        "order",
        "limit",
        "type",
        "allocated_storage",
        "disable_bundling",
        "target_reliability",
        "extra_ids",
        "gpu_option",
        "show_incompatible",
        "sort_option",
        "template_id",
    }
)

TYPE_ALIASES = {
    None: "on-demand",
    "on-demand": "on-demand",
    "ondemand": "on-demand",
    "bid": "bid",
    "interruptible": "bid",
    "reserved": "reserved",
}


class QueryError(Exception):
    """A malformed query; ``status``/``body`` are the HTTP answer."""

    def __init__(self, msg: str, status: int = 400, error: str = "invalid_request") -> None:
        super().__init__(msg)
        self.status = status
        self.body = {"success": False, "error": error, "msg": msg}


def _num(v: Any) -> Any:
    """Coerce numeric strings to numbers; leave everything else alone."""
    if isinstance(v, str):
        s = v.strip()
        try:
            return int(s)
        except ValueError:
            pass
        try:
            return float(s)
        except ValueError:
            return v
    return v


def _boolish(v: Any) -> Any:
    if isinstance(v, str):
        low = v.strip().lower()
        if low in ("true", "1", "yes"):
            return True
        if low in ("false", "0", "no"):
            return False
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return bool(v)
    return v


def coerce_like(target: Any, value: Any) -> Any:
    """Coerce a query ``value`` to the type of the stored ``target`` value."""
    if isinstance(target, bool):
        return _boolish(value)
    if isinstance(target, (int, float)):
        v = _num(value)
        return v
    if target is None:
        return _num(value)
    return value


def _compare(op: str, actual: Any, value: Any) -> bool:
    if op in ("in", "notin"):
        items = value if isinstance(value, (list, tuple, set)) else [value]
        hit = any(_eq(actual, coerce_like(actual, x)) for x in items)
        return hit if op == "in" else not hit
    value = coerce_like(actual, value)
    if op == "eq":
        return _eq(actual, value)
    if op == "neq":
        return not _eq(actual, value)
    if actual is None or value is None:
        return False
    try:
        if op == "gt":
            return bool(actual > value)
        if op == "gte":
            return bool(actual >= value)
        if op == "lt":
            return bool(actual < value)
        if op == "lte":
            return bool(actual <= value)
    except TypeError:
        return False
    raise QueryError(f"Invalid query: unknown operator {op!r}")


def _eq(actual: Any, value: Any) -> bool:
    if isinstance(actual, (int, float)) and isinstance(value, (int, float)):
        return float(actual) == float(value)
    return bool(actual == value)


def _country(geo: Any) -> str | None:
    if not isinstance(geo, str) or "," not in geo:
        return None
    return geo.rsplit(",", 1)[1].strip().upper()


def _geo_match(op: str, geo: Any, value: Any) -> bool:
    def one(v: Any) -> bool:
        if not isinstance(v, str):
            return False
        v = v.strip()
        if len(v) == 2:
            return bool(_country(geo) == v.upper())
        return isinstance(geo, str) and geo.lower() == v.lower()

    if op in ("in", "notin"):
        items = value if isinstance(value, (list, tuple, set)) else [value]
        hit = any(one(x) for x in items)
        return hit if op == "in" else not hit
    if op == "eq":
        return one(value)
    if op == "neq":
        return not one(value)
    return _compare(op, geo, value)


def check_condition(row: dict[str, Any], field: str, conds: dict[str, Any]) -> bool:
    """True if ``row`` satisfies every ``{op: value}`` of ``conds`` for ``field``."""
    for op, value in conds.items():
        if field == "verified":
            actual: Any = row.get("verification") == "verified"
            if not _compare(op, actual, value):
                return False
        elif field == "geolocation":
            if not _geo_match(op, row.get("geolocation"), value):
                return False
        elif field == "driver_version" and isinstance(_num(value), int):
            # the CLI sends a dotted driver as one integer, 535.86.05 → 535086005 (vastai
            # api/query.py:349), which the server holds as driver_vers (vast-api.md §3.2)
            if not _compare(op, row.get("driver_vers"), value):
                return False
        elif not _compare(op, row.get(field), value):
            return False
    return True


def validate_conditions(field: str, conds: Any) -> dict[str, Any]:
    if not isinstance(conds, dict):
        raise QueryError(f"Invalid query: condition for {field!r} must be a dict of operators")
    for op in conds:
        if op not in OPERATORS:
            raise QueryError(f"Invalid query: unknown operator {op!r} for {field!r}")
    return conds


def sort_rows(rows: list[dict[str, Any]], order: Iterable[tuple[str, str]]) -> list[dict[str, Any]]:
    """Stable multi-key sort; ``None`` values always sort last."""
    out = list(rows)
    for field, direction in reversed(list(order)):
        desc = direction == "desc"
        present = [r for r in out if r.get(field) is not None]
        missing = [r for r in out if r.get(field) is None]

        def key(r: dict[str, Any], f: str = field) -> Any:
            v = r.get(f)
            return (0, v) if isinstance(v, (int, float)) else (1, str(v))

        present.sort(key=key, reverse=desc)
        out = present + missing
    return out


def parse_order(order: Any) -> list[tuple[str, str]]:
    if order is None:
        return [("score", "desc")]
    if not isinstance(order, list):
        raise QueryError("Invalid query: order must be a list of [field, direction]")
    if len(order) == 2 and all(isinstance(x, str) for x in order) and order[1] in ("asc", "desc"):
        order = [order]
    out: list[tuple[str, str]] = []
    for item in order:
        if isinstance(item, dict):
            field, direction = item.get("col"), item.get("dir", "asc")
        elif isinstance(item, (list, tuple)) and len(item) in (1, 2):
            field = item[0]
            direction = item[1] if len(item) == 2 else "asc"
        else:
            raise QueryError("Invalid query: order must be a list of [field, direction]")
        if not isinstance(field, str) or direction not in ("asc", "desc"):
            raise QueryError("Invalid query: order must be a list of [field, direction]")
        out.append((ALIASES.get(field, field), direction))
    return out


def search_offers(query: Any, offers: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Filter, price, sort and limit ``offers`` (not modified) according to ``query``.

    Returns fresh offer dicts priced for the query's ``allocated_storage`` and ``type``.
    """
    if not isinstance(query, dict):
        raise QueryError("Invalid query: must be dict of conditions")

    raw_storage = query.get("allocated_storage", 5.0)
    storage = _num(raw_storage) if raw_storage is not None else 5.0
    if not isinstance(storage, (int, float)) or isinstance(storage, bool) or storage < 0:
        raise QueryError("Invalid query: allocated_storage must be a non-negative number")

    mode = query.get("type")
    if mode not in TYPE_ALIASES:
        raise QueryError(f"Invalid query: unknown type {mode!r}")
    mode = TYPE_ALIASES[mode]

    limit = query.get("limit")
    if limit is not None:
        limit = _num(limit)
        if not isinstance(limit, (int, float)) or isinstance(limit, bool):
            raise QueryError("Invalid query: limit must be an integer")
        limit = max(0, int(limit))

    order = parse_order(query.get("order"))

    conditions: list[tuple[str, dict[str, Any]]] = []
    for key, conds in query.items():
        if key in SPECIAL_KEYS:
            continue
        field = ALIASES.get(key) or str(key)  # JSON keys are strings
        if not isinstance(conds, dict):
            # Scalar top-level extras (e.g. has_avx sent bare) are ignored, like unknown keys.
            continue
        validate_conditions(field, conds)
        conditions.append((field, conds))

    results: list[dict[str, Any]] = []
    for offer in offers:
        row = dict(offer)
        price_fields(row, float(storage), mode)
        ok = True
        for field, conds in conditions:
            if field not in row and field != "verified":
                continue  # unknown field: ignored
            if not check_condition(row, field, conds):
                ok = False
                break
        if ok:
            results.append(row)

    results = sort_rows(results, order)
    if limit is not None:
        results = results[:limit]
    for i, row in enumerate(results):
        row["rn"] = i + 1
    return results
