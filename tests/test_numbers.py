"""The one parser of outside numbers (vastui/numbers.py): what it takes and what it refuses."""

from __future__ import annotations

import math

import pytest

from vastui.engine.engine import _float, _seconds
from vastui.numbers import parse_count, parse_int, parse_number


@pytest.mark.parametrize(
    ("raw", "number"),
    [
        (1, 1.0), (2.5, 2.5), ("29.0", 29.0), (" 12 ", 12.0), ("1e3", 1000.0), (".5", 0.5),
        ("-3", -3.0), ("+4.", 4.0),
        # never numbers, though float() takes some of them
        ("inf", None), ("nan", None), ("-Infinity", None), ("1_000", None), ("0x10", None),
        ("١٢", None), ("", None), ("1" * 65, None), (True, None), (None, None), ([1], None),
        (math.inf, None), (math.nan, None), (2**60, None), ("1e400", None),
    ],
)  # fmt: skip
def test_parse_number(raw, number):
    assert parse_number(raw) == number


@pytest.mark.parametrize(
    ("raw", "number"),
    [(7, 7), ("42", 42), ("12.0", 12), (12.0, 12), (12.5, None), ("1e3", 1000), (False, None),
     ("٣", None), (2**80, 2**80)],
)  # fmt: skip
def test_parse_int(raw, number):
    assert parse_int(raw) == number


@pytest.mark.parametrize(
    ("raw", "count"),
    [(3, 3), (3.9, 3), (0, 0), (-1, None), ("3", None), (True, None), (math.nan, None),
     (2**53, None)],
)  # fmt: skip
def test_parse_count(raw, count):
    assert parse_count(raw) == count


def test_an_adopted_instances_environment_never_gives_inf_or_nan():
    # engine._float read MIN_RATE with a bare float(): "inf" made a worker no rate could pass
    assert _float("inf") is None and _float("nan") is None and _float("29.0") == 29.0
    assert _seconds("3600") == 3600 and _seconds("1e400") is None and _seconds("-5") is None
