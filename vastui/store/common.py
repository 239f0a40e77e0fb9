"""Small helpers every repository shares: the write clock, ISO rendering, JSON columns."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from typing import Any

from .errors import StoreError


def stamp(now: float | None) -> float:
    """The time a row is written at: the caller's clock (the engine's), else the wall's."""
    return time.time() if now is None else float(now)


def json_dict(text: str | None) -> dict[str, Any]:
    """A JSON object column for a reader that only shows or folds it: empty, damaged or not an
    object reads as {} (the record itself is never rewritten from here)."""
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def json_list(text: str | None) -> tuple[str, ...] | None:
    """A column of lines written by :func:`lines_json`; anything but a list is damage."""
    if text is None:
        return None
    value = json.loads(text)
    if not isinstance(value, list):
        raise ValueError(f"expected a JSON list of lines, got {type(value).__name__}")
    return tuple(str(v) for v in value)


def json_obj(text: str | None) -> dict[str, Any] | None:
    """A JSON column read back as an object (a bare value is wrapped as ``{"value": ...}``)."""
    if text is None:
        return None
    value = json.loads(text)
    return value if isinstance(value, dict) else {"value": value}


def lines_json(lines: Iterable[str] | None) -> str | None:
    """Lines (or one string) as the JSON list :func:`json_list` reads."""
    if lines is None:
        return None
    if isinstance(lines, str):
        lines = [lines]
    return json.dumps([str(line) for line in lines], ensure_ascii=False)


def detail_json(detail: Mapping[str, Any] | None) -> str | None:
    """An event's detail as JSON text, or StoreError when it is no mapping or not serializable."""
    if detail is None:
        return None
    if not isinstance(detail, Mapping):
        raise StoreError(f"event detail must be a mapping, got {type(detail).__name__}")
    try:
        return json.dumps(dict(detail), ensure_ascii=False, sort_keys=True, default=str)
    except (TypeError, ValueError) as e:
        raise StoreError(f"event detail is not JSON-serializable: {e}") from e
