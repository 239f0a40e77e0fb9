"""The economics in one place: what rate a price requires."""

from __future__ import annotations

import math


def required_rate(dph_total: float, max_cost_per_proof: float) -> float:
    """Proofs/hour a machine must reach for its price: ceil($/h ÷ max $/proof).

    $0.232/h at $0.008/proof → 29.0. Rounded first so 0.24/0.008 is 30, not 31.
    """
    return float(math.ceil(round(dph_total / max_cost_per_proof, 9)))
