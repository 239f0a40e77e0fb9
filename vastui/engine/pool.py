"""The warm pool: stopped workers kept for the next scale-up, as pure decisions.

Vast stops an instance on request and keeps its disk, billing storage only (vast-api.md §7:
``PUT /api/v0/instances/{id}/ {"state": "stopped"}``, "data kept, storage still billed"). A
worker the fleet gives up (a surplus, drained first) keeps on that disk its parameters (~135 GiB
downloaded at the offer's $/GB) and its passed benchmark (worker-image/entrypoint.sh: a
restarted container skips the benchmark), so starting it again costs a container start where a
new rental costs the download, the set-up and a benchmark. So a surplus worker is stopped into
the pool, not destroyed, when:

* the fleet follows the work (``target_workers = "auto"``: its scale-downs are undone by its
  scale-ups; a fixed target lowered is the operator's shrink, and destroys),
* the pool has room (``fleet.warm_pool_max``),
* it is a good worker: proving, on demand (a bid's stop is Vast's to decide), its rate known and
  at least its min_rate,
* its storage over the expected idle time (``fleet.warm_pool_idle_h``) costs less than what a
  new rental's set-up would: the parameters' bandwidth and the hours billed before it proves
  (ranking.setup_hours).

A scale-up starts a pooled worker before it rents (the cheapest per proof first). Vast may
answer ``resources_unavailable`` (its GPUs were rented meanwhile; the start is queued, vast-api.md
§7): the pooled worker then counts as a worker on its way for ``fleet.warm_pool_start_min``, and
is destroyed after (the next scale-up rents elsewhere). A pooled worker is destroyed after
``fleet.warm_pool_max_h``, or when the pool is over its size. None of these is a strike: the
machine did nothing wrong.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from vastui.config import Config
from vastui.domain.plan import PARAMS_GB
from vastui.domain.worker import InstanceRecord
from vastui.engine import ranking
from vastui.engine.drain import worker_rate
from vastui.engine.policy import Kill

# A pooled worker's start to proving again: Vast's start, the set-up, the parameters checked
# on its disk, the daemon and curio started (measured end to end in the simulated world:
# bench/demand.py RESTART_S)
RESTART_H = 4.0 / 60.0
EXPIRED_KIND = "pool_expired"  # vastui/domain/stages.py KILL_KINDS
UNAVAILABLE_KIND = "pool_unavailable"


@dataclass(frozen=True, slots=True)
class Keep:
    """Whether a surplus worker goes into the pool, and why (one line either way)."""

    pooled: bool
    why: str


def setup_saved(rec: InstanceRecord, bench_proofs: int) -> float | None:
    """Dollars a new rental like this one would spend before proving: its parameters' download
    at the offer's $/GB and the hours billed for the download, the set-up and the benchmark."""
    rate = worker_rate(rec)
    if rate is None or not rec.dph_total or rec.dph_total <= 0:
        return None
    hours = ranking.setup_hours(rec.inet_down, rate, bench_proofs)
    return PARAMS_GB * (rec.inet_down_cost or 0.0) + hours * rec.dph_total


def keep(rec: InstanceRecord, pooled: int, config: Config, idle_h: float | None = None) -> Keep:
    """The warm pool's side of a surplus worker's end (the module's rules). ``idle_h``: how
    long the demand has rested between its rises (demandshift.Watch.rise_gap_hours), the wait
    a kept worker is sized for in place of ``fleet.warm_pool_idle_h`` once it is known; a wait
    past ``fleet.warm_pool_max_h`` keeps nobody (it would be destroyed before the rise)."""
    fleet = config.fleet
    if not fleet.auto_target:
        return Keep(False, "a fixed target: lowering it is the operator's shrink")
    if pooled >= fleet.warm_pool_max:
        return Keep(False, f"the warm pool is full ({pooled}/{fleet.warm_pool_max})")
    if rec.state != "proving" or rec.is_bid:
        return Keep(False, "only an on-demand worker that proves is kept warm")
    rate = worker_rate(rec)
    if rate is None or (rec.min_rate is not None and rate < rec.min_rate):
        return Keep(False, "its rate is not known to pay")
    saved = setup_saved(rec, fleet.bench_proofs)
    if saved is None or rec.storage_dph is None:
        return Keep(False, "its storage price or set-up cost is not known")
    wait = fleet.warm_pool_idle_h if idle_h is None else idle_h
    why = "the demand's rests between rises" if idle_h is not None else "fleet.warm_pool_idle_h"
    if wait >= fleet.warm_pool_max_h:
        return Keep(
            False,
            f"the next rise is {wait:.1f} h away ({why}), past fleet.warm_pool_max_h "
            f"({fleet.warm_pool_max_h:g} h)",
        )
    storage = rec.storage_dph * wait
    if storage >= saved:
        return Keep(
            False,
            f"its storage for {wait:.3g} h ({why}: ${storage:.2f}) costs more than a new "
            f"rental's set-up (${saved:.2f})",
        )
    return Keep(
        True,
        f"stopped into the warm pool: ${rec.storage_dph:.3f}/h of storage for {wait:.3g} h "
        f"({why}: ${storage:.2f}) against a new rental's set-up (${saved:.2f})",
    )


def expired(rec: InstanceRecord, now: float, pooled_rank: int, config: Config) -> Kill | None:
    """A pooled worker to destroy: kept too long, its queued start not come, or the pool over
    its size (``pooled_rank``: its place among the pooled, newest first)."""
    fleet = config.fleet
    if rec.pooled_since is None:
        return None
    if rec.pool_start_at is not None and now - rec.pool_start_at >= fleet.warm_pool_start_min * 60:
        return Kill(
            UNAVAILABLE_KIND,
            f"its start was queued by Vast (resources_unavailable) for "
            f"{(now - rec.pool_start_at) / 60:.0f} min: destroyed, the fleet rents elsewhere",
        )
    if now - rec.pooled_since >= fleet.warm_pool_max_h * 3600:
        return Kill(
            EXPIRED_KIND,
            f"in the warm pool for {(now - rec.pooled_since) / 3600:.1f} h "
            f"(fleet.warm_pool_max_h = {fleet.warm_pool_max_h:g})",
        )
    if pooled_rank >= fleet.warm_pool_max:
        return Kill(
            EXPIRED_KIND,
            f"the warm pool is over its size (fleet.warm_pool_max = {fleet.warm_pool_max})",
        )
    return None


def pick(pool: Sequence[InstanceRecord]) -> InstanceRecord | None:
    """The pooled worker to start: not already asked to start, the cheapest per proof."""

    def cost(rec: InstanceRecord) -> tuple[float, int]:
        rate = worker_rate(rec)
        per_proof = (rec.dph_total or 0.0) / rate if rate else float("inf")
        return per_proof, rec.vast_id

    startable = [r for r in pool if r.pooled_since is not None and r.pool_start_at is None]
    return min(startable, key=cost, default=None)


def ranked(pool: Sequence[InstanceRecord]) -> list[InstanceRecord]:
    """The pooled, newest first (the oldest go first when the pool is over its size)."""
    return sorted(pool, key=lambda r: (-(r.pooled_since or 0.0), r.vast_id))
