"""The one parser of numbers that come from outside: Vast's answers, a worker's JSON and
environment, an adopted instance's settings. Every number that enters vastui goes through here.

A number is finite, in plain decimal or exponent notation, and short. Python's float() and int()
would also take "inf", "nan", "1_0", non-ASCII digits and thousands of digits, and a JSON `true`
is an int to Python; none of those is a number here. Integers are kept exact.
"""

from __future__ import annotations

import math
import re
from typing import Any

MAX_NUMBER_TEXT = 64  # characters; a longer "number" is not one
FLOAT_INT_MAX = 2**53  # beyond this a float no longer holds every integer exactly

_NUMBER_RE = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_INT_RE = re.compile(r"[+-]?[0-9]+")


def parse_number(value: Any) -> float | None:
    """A finite float from a JSON number or a plain numeric string; None for anything else."""
    kind = type(value)  # exact types first: what json.loads makes (bench/offers.py: hot path)
    if kind is float:
        return value if math.isfinite(value) else None
    if kind is int:
        return float(value) if -FLOAT_INT_MAX <= value <= FLOAT_INT_MAX else None
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        # float() of a huge int raises; anything this large is no quantity we accept.
        return float(value) if -FLOAT_INT_MAX <= value <= FLOAT_INT_MAX else None
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        text = value.strip()
        if len(text) > MAX_NUMBER_TEXT or not _NUMBER_RE.fullmatch(text):
            return None
        parsed = float(text)
        return parsed if math.isfinite(parsed) else None
    return None


def parse_int(value: Any) -> int | None:
    """An exact integer from a JSON number or a plain numeric string; None for anything else.

    Integers are kept exact (no float round trip); a float or "12.0" counts only when integral
    and small enough to be exact."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        text = value.strip()
        if len(text) <= MAX_NUMBER_TEXT and _INT_RE.fullmatch(text):
            return int(text)
    number = parse_number(value)
    if number is None or not number.is_integer() or abs(number) > FLOAT_INT_MAX:
        return None
    return int(number)


def parse_count(value: Any) -> int | None:
    """A count from a JSON number (cuzk's counters, a daemon's pid): a non-negative integer
    below 2^53, a float truncated; None for text, bools and anything else."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if value != value or value < 0 or value >= FLOAT_INT_MAX:  # NaN, negative, absurd
        return None
    return int(value)


__all__ = ["FLOAT_INT_MAX", "MAX_NUMBER_TEXT", "parse_count", "parse_int", "parse_number"]
