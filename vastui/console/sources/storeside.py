"""The store's side of a fleet, the same whoever runs its engine: the snapshot the panes show,
commands through the store's command table, and the offers the console searches itself (with
this view's own filter, or with no engine of its own) or reads as an engine published them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import UTC

from vastui.backend import Options
from vastui.console.snapshot import Snapshot
from vastui.domain.engine_state import EngineStatus
from vastui.engine.bidding import RiskModel
from vastui.engine.ranking import Levers, RankedOffer, from_record, rank_offers
from vastui.engine.spend import fleet_spend, local_midnight
from vastui.store import Store
from vastui.vast.client import VastClient

OFFERS_FRESH_S = 60.0  # a search of our own is repeated after this long (or when forced)
COMMAND_POLL_S = 0.2
# wait_command's answer when the engine has not answered within the timeout (it still will:
# a command is kept while the database is busy, engine/commands.py)
NO_ANSWER_YET = "no answer from the engine yet (it will still run the command)"


async def read_snapshot(store: Store, now: Callable[[EngineStatus | None], float]) -> Snapshot:
    """Everything the panes show; `now` is the fleet's clock given the engine's last status
    (an attached demo engine's clock is the time of its last published cycle)."""
    instances = await store.instances.all()
    status = await store.status.get()
    lease = await store.lease.holder()
    taken_at = now(status)
    return Snapshot(
        instances=instances,
        foreign=await store.foreign.all(),
        bad=await store.badlist.all(),
        legacy=await store.badlist.legacy_review(),
        perf=await store.perf.all(),
        events=await store.events.all(limit=500),
        lease=lease,
        taken_at=taken_at,
        engine_status=status,
        spend=fleet_spend(instances, taken_at, local_midnight(taken_at, UTC)),
    )


async def wait_command(
    store: Store, command_id: int, timeout: float, gone: Callable[[], str | None]
) -> tuple[bool, str]:
    """(ok, result) once the engine has run it; (False, why) once the engine is gone (`gone`
    says why) or after the timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        cmd = await store.commands.get(command_id)
        if cmd is not None and cmd.status in ("done", "failed"):
            return cmd.status == "done", cmd.result or ""
        reason = gone()
        if reason is not None:
            return False, f"the engine is gone ({reason}): not carried out"
        await asyncio.sleep(COMMAND_POLL_S)
    return False, NO_ANSWER_YET


class OfferSearch:
    """Offers found by the console itself, ranked as the engine ranks them
    (engine.refresh_offers): with this view's filter, or the configured one."""

    def __init__(self, opts: Options) -> None:
        self.opts = opts
        self._view_filter: str | None = None  # this view's Vast filter, when edited
        self._offers: list[RankedOffer] = []
        self._offers_at: float | None = None
        self._published_at: float | None = None

    @property
    def view_filter(self) -> str:
        return self._view_filter or self.opts.config.offers.filter

    @property
    def own_filter(self) -> bool:
        """This view searches with a filter of its own (not the engine's)."""
        return self._view_filter is not None

    def set_filter(self, text: str) -> None:
        self._view_filter = None if text == self.opts.config.offers.filter else text
        self._offers_at = None
        self._published_at = None

    async def search(
        self, client: VastClient, store: Store, now: float, force: bool = False
    ) -> list[RankedOffer]:
        """Our own search (at most once a minute unless forced); offers on machines that run
        a worker of ours are not offered."""
        cfg = self.opts.config
        fresh = self._offers_at is not None and time.monotonic() - self._offers_at < OFFERS_FRESH_S
        if fresh and not force:
            return self._offers
        result = await client.search_offers(
            self.view_filter,
            order=cfg.offers.order,
            limit=cfg.offers.limit,
            allocated_storage=cfg.fleet.disk_gb,
        )
        bad = {e.machine_id: e.reason for e in await store.badlist.all()}
        busy = {r.machine_id for r in await store.instances.all(include_killed=False)}
        offers = [o for o in result.offers if o.machine_id not in busy]
        bids = None
        if cfg.bids.mode != "off":
            history = await store.bid_history(now=now)
            bids = (cfg, RiskModel(history, cfg))
        self._offers = rank_offers(
            offers, await store.perf.all(), bad, cfg.fleet.max_cost_per_proof, bids,
            Levers.of(cfg),
        )  # fmt: skip
        self._offers_at = time.monotonic()
        return self._offers

    async def published(self, store: Store) -> list[RankedOffer] | None:
        """A headless engine's own ranked offers (None: it has published none yet)."""
        published = await store.status.get_offers()
        if published is None:
            return None
        _filter, rows, updated_at = published
        if updated_at != self._published_at:  # same list object while unchanged: no re-render
            busy = {r.machine_id for r in await store.instances.all(include_killed=False)}
            ranked = [from_record(row) for row in rows]
            self._offers = [r for r in ranked if r is not None and r.offer.machine_id not in busy]
            self._published_at = updated_at
        return self._offers
