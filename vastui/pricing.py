"""The economics in one place: what rate a price requires."""

from __future__ import annotations

import math
from collections.abc import Callable

# Proofs/hour no machine reaches: the answer when the price / budget ratio is beyond any real
# rate (or overflows), so such an offer is simply never viable instead of an error every step.
MAX_MIN_RATE = 1e9


def _positive_finite(value: float) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(value) and value > 0
    except OverflowError:  # an int past the float range
        return False


def _show(value: object) -> str:
    if isinstance(value, int) and value.bit_length() > 64:
        return f"<integer of {value.bit_length()} bits>"  # repr() refuses 4300+ digits
    return repr(value)[:40]


def min_rate(dph_total: float, max_cost_per_proof: float) -> float:
    """Proofs/hour a machine must reach for its price: ceil($/h ÷ max $/proof), at least 1.

    $0.232/h at $0.008/proof → 29.0. Rounded first so 0.24/0.008 is 30, not 31. Never below 1,
    so a price that rounds to nothing cannot switch the benchmark gate off; never overflows:
    capped at MAX_MIN_RATE. Raises ValueError for a price or budget that is not a positive
    finite number (offers are validated in vastui/vast/models.py, so callers see one only by bug).
    """
    if not _positive_finite(dph_total):
        raise ValueError(f"price must be a positive finite $/h, got {_show(dph_total)}")
    return min_rate_at(max_cost_per_proof)(dph_total)


def min_rate_at(max_cost_per_proof: float) -> Callable[[float], float]:
    """`min_rate` at one budget, validated once, for many prices that are already valid
    (an Offer's: positive, finite, at most models.MAX_DPH): rank_offers prices 10,000 offers."""
    if not _positive_finite(max_cost_per_proof):
        raise ValueError(
            f"max $/proof must be a positive finite number, got {_show(max_cost_per_proof)}"
        )

    def rate(dph_total: float) -> float:
        try:
            ratio = dph_total / max_cost_per_proof
        except OverflowError:  # int / float past the float range
            return MAX_MIN_RATE
        if not ratio < MAX_MIN_RATE:  # inf too (NaN cannot come from valid numbers)
            return MAX_MIN_RATE
        whole = math.floor(ratio)
        if ratio - whole > 1e-9:  # exact; then round(ratio, 9) is above whole: ceil is whole + 1
            return max(1.0, float(whole + 1))
        return max(1.0, float(math.ceil(round(ratio, 9))))  # round() is slow: only near whole

    return rate
