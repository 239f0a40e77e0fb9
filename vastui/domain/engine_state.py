"""What an engine says of itself: the status it publishes for its readers, and the lease that
lets one engine at a time hold a database."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .delivery import Delivery
from .timefmt import iso_utc


@dataclass(frozen=True, slots=True)
class EngineStatus:
    """What the engine last said about its fleet (table ``engine_status``, one row).

    Written every reconcile cycle; ``updated_at`` is the engine's clock. ``reason_kind`` is one
    of ``vastui.engine.provision.REASON_KINDS`` (None while the engine is renting towards its
    target); ``reason_since`` is when the current reason kind began (kept while it lasts).
    """

    target: int
    workers: int  # live vastui instances + pending rents
    by_stage: dict[str, int]  # live vastui instances per stage
    reason_kind: str | None
    reason: str | None  # one line for the operator
    best: dict[str, Any] | None  # the best candidate offer, when it explains the reason
    dry_run: bool
    updated_at: float
    reason_since: float | None = None
    wall_at: float | None = None  # the wall clock when written (updated_at is the engine's)
    simulated: bool = False  # the engine's clock is a simulator's (the demo), not the wall
    # the money limits (None: unknown, or no cap)
    credit: float | None = None  # the account's, as last read
    spent_today: float | None = None  # dollars since midnight UTC
    daily_budget: float | None = None  # fleet.max_daily_spend
    dph: float | None = None  # the live fleet's $/h with rents in flight
    dph_cap: float | None = None  # fleet.max_total_dph
    # curio's cluster (migration 12): the reader's state and the totals of its last reading
    # (vastui/engine/engine.py _cluster_summary), None when it is off
    cluster: dict[str, Any] | None = None
    # the controller cut off from its workers (migration 13): the episode's newest line and
    # when it began (the engine's clock); None while they reach it
    cut_off: str | None = None
    cut_off_since: float | None = None
    # the fleet's headline (migration 15): delivered proofs and their cost over the window,
    # capacity apart (vastui/domain/delivery.py); None before the engine first counted it
    delivery: Delivery | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "workers": self.workers,
            "by_stage": dict(self.by_stage),
            "reason_kind": self.reason_kind,
            "reason": self.reason,
            "best": self.best,
            "dry_run": self.dry_run,
            "updated_at": iso_utc(self.updated_at),
            "reason_since": iso_utc(self.reason_since),
            "simulated_clock": self.simulated,
            "credit": self.credit,
            "spent_today": self.spent_today,
            "daily_budget": self.daily_budget,
            "dph": self.dph,
            "dph_cap": self.dph_cap,
            "cluster": self.cluster,
            "cut_off": self.cut_off,
            "cut_off_since": iso_utc(self.cut_off_since),
            "delivery": None if self.delivery is None else self.delivery.to_json(),
        }


@dataclass(frozen=True, slots=True)
class Lease:
    name: str
    owner: str
    pid: int
    hostname: str
    mode: str
    acquired_at: float
    heartbeat_at: float
    expires_at: float
