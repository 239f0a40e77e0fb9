"""When a rented host goes offline: a hazard per machine from the reliability its offers list.

Shared by the simulated cloud (vastsim.cloud ``SimCloud._maintenance``) and the economics
bench (bench/economics_worker.py ``plan``), so that both worlds lose hosts alike. No imports from
the rest of the simulator: the cloud imports this lazily, and it imports nothing back.

ASSUMPTION (no source defines Vast's ``reliability``; vast-api.md §3.3 gives it as a float
0..1): an offer's ``reliability`` is the probability that the machine stays up over one day.
With a constant hazard λ per hour, P(up for 24 h) = exp(-24 λ), so

    λ = -ln(reliability) / 24 per hour,

scaled by a scenario's fault rate (1: the demo's world, 0: no outages). The listed
reliabilities of the simulated market (0.90-0.9995) then mean one outage in ~10 to ~2,000 days
of rental; the time from running to an outage is exponential with that hazard.
"""

from __future__ import annotations

import math
import random

HOURS_PER_DAY = 24.0
# An outage drawn further than this after the instance runs is none: the economics bench's
# week, far past any demo's run (and the cloud's planned-fault counts stay meaningful).
OUTAGE_HORIZON_S = 7 * 86400.0


def offline_hazard_per_hour(reliability: float, fault_rate: float = 1.0) -> float:
    """Outages per hour of rental for a machine listing ``reliability`` (the module's
    ASSUMPTION: the chance it stays up a day), scaled by ``fault_rate``.

    ``reliability`` is clamped to [0, 1]: 1 never fails, 0 fails at once (``math.inf``). A
    fault rate of 0 means no outages whatever the reliability."""
    if math.isnan(reliability) or math.isnan(fault_rate) or fault_rate < 0:
        raise ValueError(f"reliability {reliability!r}, fault rate {fault_rate!r}")
    if fault_rate == 0:
        return 0.0
    r = min(1.0, max(0.0, reliability))
    if r == 0.0:
        return math.inf
    return -math.log(r) / HOURS_PER_DAY * fault_rate


def outage_after(
    rng: random.Random,
    reliability: float,
    fault_rate: float = 1.0,
    horizon_s: float = OUTAGE_HORIZON_S,
) -> float | None:
    """Seconds from the instance running to its host going offline, or None (no outage within
    ``horizon_s``): exponential with :func:`offline_hazard_per_hour`.

    Takes exactly one draw from ``rng`` whatever the hazard, so the draws after it are the
    same ones for every reliability and fault rate."""
    u = rng.random()
    hazard_h = offline_hazard_per_hour(reliability, fault_rate)
    if hazard_h == 0.0:
        return None
    if math.isinf(hazard_h):
        return 0.0
    after = -math.log1p(-u) / hazard_h * 3600.0
    return after if after <= horizon_s else None
