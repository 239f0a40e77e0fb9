"""After every step: the fleet as Prometheus sees it (vastui/metrics.py) and the alerts a small
operator gets without Prometheus (vastui/alerts.py). It only observes: it reads the store and
the engine's last status and hands the result on; it never decides or acts on the fleet.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC

from vastui.alerts import Alert, AlertBook, Conditions, FleetFacts, Notifier
from vastui.config import Config
from vastui.domain.engine_state import EngineStatus
from vastui.domain.worker import InstanceRecord
from vastui.engine.cluster import cluster_held
from vastui.engine.provision import REASON_KINDS
from vastui.engine.ranking import RankedOffer
from vastui.engine.spend import counted, fleet_spend, local_midnight
from vastui.metrics import FleetCollector, FleetSample, MetricsServer, WorkerSample
from vastui.sanitize import sanitize_line
from vastui.store import Store

log = logging.getLogger("vastui.engine")
HOUR = 3600.0


@dataclass(frozen=True)
class StepFacts:
    """What the engine knows after a step, beyond its store: for the metrics and the alerts."""

    now: float  # the engine's clock
    status: EngineStatus  # what the step published
    credit: float | None = None  # the account's, as last read
    cluster_error: str | None = None  # why curio's cluster cannot be read now, one line
    cluster_error_since: float | None = None
    cut_off: str | None = None  # the controller cut off from its workers, one line
    cut_off_since: float | None = None
    offers: Sequence[RankedOffer] = ()  # the market as the last search ranked it
    api_errors: Mapping[str, int] | None = None  # failed Vast calls by HTTP status


class Monitor:
    """Metrics and alerts from the engine's state; off (nothing read) when neither is asked."""

    def __init__(
        self,
        config: Config,
        *,
        collector: FleetCollector | None = None,
        notifier: Notifier | None = None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        a = config.alerts
        self.collector = collector
        self.notifier = notifier if notifier is not None and notifier.enabled else None
        self.book = AlertBook(max_per_hour=a.max_per_hour, fleet=config.fleet.name)
        self.conditions = Conditions(
            below_target_min=a.below_target_min,
            min_credit=a.min_credit,
            storm_bans=a.storm_bans,
            storm_kills=a.storm_kills,
        )
        self.config = config
        self.server: MetricsServer | None = None  # serving the collector (the runtime's)
        self._wall = wall

    @property
    def enabled(self) -> bool:
        return self.collector is not None or self.notifier is not None

    async def after_step(self, store: Store, facts: StepFacts) -> None:
        if not self.enabled:
            return
        now = facts.now
        mine = counted(await store.instances.all(include_killed=True))
        bans = await store.events.all(kind="ban")
        if self.collector is not None:
            self.collector.update(self._sample(facts, mine, len(bans)))
        if self.notifier is not None:
            status = facts.status
            conditions = FleetFacts(
                target=status.target,
                workers=status.workers,
                reason_kind=status.reason_kind,
                reason=status.reason,
                credit=facts.credit,
                bans_last_hour=sum(1 for e in bans if e.ts >= now - HOUR),
                kills_last_hour=sum(
                    1 for r in mine if r.killed and (r.killed_at or 0.0) >= now - HOUR
                ),
                cluster_error=facts.cluster_error,
                cluster_error_since=facts.cluster_error_since,
                cut_off=facts.cut_off,
            )
            for alert in self.book.observe(self.conditions.holding(conditions, now), now):
                log.info("alert %s %s: %s", alert.key, alert.state, alert.summary)
                self.notifier.submit(alert)

    async def flush(self, timeout: float) -> None:
        """Wait (at most ``timeout`` seconds) for the alerts queued to be sent."""
        if self.notifier is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self.notifier.drain()

    def stopped(self, line: str, now: float) -> None:
        """The engine stopped itself: its one line, sent whatever the rate limit."""
        if self.notifier is not None:
            summary = sanitize_line(line, 300)
            self.notifier.submit(Alert("engine_stopped", "firing", summary, now, self.book.fleet))

    def _sample(self, facts: StepFacts, mine: list[InstanceRecord], bans: int) -> FleetSample:
        status, now = facts.status, facts.now
        live = [r for r in mine if not r.killed]
        spend = fleet_spend(mine, now, local_midnight(now, UTC))
        market: dict[str, list[float]] = {}
        for ranked in facts.offers:
            if not ranked.bad:
                gpu = sanitize_line(ranked.offer.gpu_name or "?", 40)
                market.setdefault(gpu, []).append(ranked.offer.dph_total)
        fleet = self.config.fleet
        return FleetSample(
            heartbeat=self._wall(),
            target=status.target,
            by_stage=dict(status.by_stage),
            workers=[_worker(r) for r in live],
            fleet_dollars_per_hour=sum(r.dph_total or 0.0 for r in live if r.stopped_since is None),
            spend_all=spend.total,
            spend_rejected=spend.rejected,
            spend_bandwidth=spend.bandwidth,
            spend_today=spend.today,
            delivery=status.delivery,  # the headline (vastui/domain/delivery.py)
            kills=Counter(r.kill_kind or "unknown" for r in mine if r.killed),
            bans=bans,
            rents=len(mine),
            api_errors=dict(facts.api_errors or {}),
            blocked_reason=status.reason_kind,
            reason_kinds=REASON_KINDS,
            market=market,
            credit=facts.credit,
            max_daily_spend=fleet.max_daily_spend or None,
            max_total_dph=fleet.max_total_dph,
            cluster=status.cluster,
            cut_off_seconds=None
            if facts.cut_off_since is None
            else max(0.0, now - facts.cut_off_since),
        )


def _worker(r: InstanceRecord) -> WorkerSample:
    held = cluster_held(r)
    return WorkerSample(
        label=r.label or str(r.vast_id),
        machine_id=r.machine_id,
        gpu_name=sanitize_line(r.gpu_name or "?", 40),
        stage=r.phase,
        proofs=r.prod_completed or 0,
        failures=r.prod_failed or 0,
        proofs_per_hour=r.prod_rate,
        # a stopped worker (warm pool, outbid) bills its disk only
        dollars_per_hour=(r.dph_total or 0.0)
        if r.stopped_since is None
        else min(r.storage_dph or 0.0, r.dph_total or 0.0),
        tasks_held=held,
        draining=r.drain_started_at is not None,
    )
