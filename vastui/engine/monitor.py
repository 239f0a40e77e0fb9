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
from collections.abc import Callable
from datetime import UTC
from typing import TYPE_CHECKING

from vastui.alerts import Alert, AlertBook, Conditions, FleetFacts, Notifier
from vastui.config import Config
from vastui.engine.cluster import cluster_held
from vastui.engine.provision import REASON_KINDS
from vastui.engine.spend import counted, fleet_spend, instance_cost, local_midnight
from vastui.metrics import FleetCollector, FleetSample, MetricsServer, WorkerSample
from vastui.sanitize import sanitize_line
from vastui.store import InstanceRecord

if TYPE_CHECKING:
    from vastui.engine.engine import Engine

log = logging.getLogger("vastui.engine")
HOUR = 3600.0


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

    async def after_step(self, engine: Engine) -> None:
        if not self.enabled or engine.status is None:
            return
        now = engine.clock()
        mine = counted(await engine.store.list_instances(include_killed=True))
        bans = await engine.store.list_events(kind="ban")
        if self.collector is not None:
            self.collector.update(self._sample(engine, mine, len(bans), now))
        if self.notifier is not None:
            status = engine.status
            facts = FleetFacts(
                target=status.target,
                workers=status.workers,
                reason_kind=status.reason_kind,
                reason=status.reason,
                credit=engine.credit,
                bans_last_hour=sum(1 for e in bans if e.ts >= now - HOUR),
                kills_last_hour=sum(
                    1 for r in mine if r.killed and (r.killed_at or 0.0) >= now - HOUR
                ),
                cluster_error=engine.cluster_error,
                cluster_error_since=engine.cluster_error_since,
                cut_off=engine.cut_off,
            )
            for alert in self.book.observe(self.conditions.holding(facts, now), now):
                log.info("alert %s %s: %s", alert.key, alert.state, alert.summary)
                self.notifier.submit(alert)

    async def flush(self, timeout: float) -> None:
        """Wait (at most ``timeout`` seconds) for the alerts queued to be sent."""
        if self.notifier is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.notifier.drain(), timeout)

    def stopped(self, line: str, now: float) -> None:
        """The engine stopped itself: its one line, sent whatever the rate limit."""
        if self.notifier is not None:
            summary = sanitize_line(line, 300)
            self.notifier.submit(Alert("engine_stopped", "firing", summary, now, self.book.fleet))

    def _sample(
        self, engine: Engine, mine: list[InstanceRecord], bans: int, now: float
    ) -> FleetSample:
        status = engine.status
        assert status is not None
        live = [r for r in mine if not r.killed]
        spend = fleet_spend(mine, now, local_midnight(now, UTC))
        proved = [r for r in mine if r.proving_at is not None and (r.prod_completed or 0) > 0]
        proofs = sum(r.prod_completed or 0 for r in proved)
        cost = sum(instance_cost(r, now, since=r.proving_at) for r in proved)
        market: dict[str, list[float]] = {}
        for ranked in engine.ranked_offers():
            if not ranked.bad:
                gpu = sanitize_line(ranked.offer.gpu_name or "?", 40)
                market.setdefault(gpu, []).append(ranked.offer.dph_total)
        fleet = self.config.fleet
        return FleetSample(
            heartbeat=self._wall(),
            target=status.target,
            by_stage=dict(status.by_stage),
            workers=[_worker(r) for r in live],
            fleet_dollars_per_hour=sum(r.dph_total or 0.0 for r in live),
            spend_all=spend.total,
            spend_rejected=spend.rejected,
            spend_today=spend.today,
            cost_per_proof=cost / proofs if proofs else None,
            kills=Counter(r.kill_kind or "unknown" for r in mine if r.killed),
            bans=bans,
            rents=len(mine),
            api_errors=dict(engine.client.error_counts),
            blocked_reason=status.reason_kind,
            reason_kinds=REASON_KINDS,
            market=market,
            credit=engine.credit,
            max_daily_spend=fleet.max_daily_spend or None,
            max_total_dph=fleet.max_total_dph,
            cluster=status.cluster,
            cut_off_seconds=None
            if engine.cut_off_since is None
            else max(0.0, now - engine.cut_off_since),
        )


def _worker(r: InstanceRecord) -> WorkerSample:
    held = cluster_held(r)
    return WorkerSample(
        label=r.label or str(r.vast_id),
        machine_id=r.machine_id,
        gpu_name=sanitize_line(r.gpu_name or "?", 40),
        stage=r.state,
        proofs=r.prod_completed or 0,
        failures=r.prod_failed or 0,
        proofs_per_hour=r.prod_rate,
        dollars_per_hour=r.dph_total or 0.0,
        tasks_held=held,
        draining=r.drain_started_at is not None,
    )
