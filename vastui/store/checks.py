"""Input checks for the repositories' writes: a value that is not fit to store is a one-line
:class:`StoreError` before any lock is taken."""

from __future__ import annotations

import math

from .errors import StoreError


def check_positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise StoreError(f"{name} must be a positive integer, got {value!r}")
    return value


def check_optional_positive_int(name: str, value: object) -> int | None:
    return None if value is None else check_positive_int(name, value)


def check_text(name: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise StoreError(f"{name} must be a non-empty string, got {value!r}")
    return value.strip()


def check_rate(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise StoreError(f"{name} must be a number, got {value!r}")
    rate = float(value)
    if not math.isfinite(rate) or rate < 0:
        raise StoreError(f"{name} must be a finite number >= 0, got {value!r}")
    return rate


def check_optional_time(name: str, value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise StoreError(f"{name} must be epoch seconds or None, got {value!r}")
    return float(value)
