"""The engine's hands: the only code that rents, destroys, bans and strikes.

Every act is an intent first, written before the request goes out, and completes only when
everything it decided is recorded: a rent is done once its instance is stored; a destroy once
the kill, its event and the ban or strike it carries are stored. A crash at any point leaves a
pending intent the next start finishes (a rent resolved by its label, a destroy carried out or
completed again: destroys, bans and strikes are idempotent). Crash points (``crash_point``)
mark the moments the crash trials kill the engine at.

One file: every act follows one intent protocol (write the intent, act, complete), shared by
rent, destroy, ban and strike.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import math
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from vastui.config import Config, load_curio_db_password
from vastui.domain.journal import BAN_KEY, Intent
from vastui.domain.machines import BanSpec
from vastui.domain.worker import InstanceRecord, Progress
from vastui.engine import drain, fleetwide, identity, payment, policy, pool
from vastui.engine.bidding import BidQuote
from vastui.engine.cluster import ClusterError, ClusterReader, Worker, worker_of
from vastui.engine.crashpoints import crash_point
from vastui.engine.labels import fleet_id_of, fleet_of, new_label
from vastui.engine.spend import SURPLUS_KIND, carried_work, closed_stop
from vastui.engine.transitions import (
    Effect,
    EnterStage,
    KillWorker,
    Note,
    Passed,
    Production,
    RecordRate,
    Strike,
    Update,
)
from vastui.sanitize import sanitize_line
from vastui.store import Store
from vastui.store.errors import StoreError, StoreFatal
from vastui.vast.client import VastClient
from vastui.vast.errors import CreateOutcomeUnknown, VastError, VastHTTPError, VastNotFound
from vastui.vast.models import Offer

log = logging.getLogger("vastui.engine")

ONSTART = 'nohup entrypoint.sh > "${WORKER_ROOT:-}/var/log/entrypoint.log" 2>&1 &'


class EngineError(Exception):
    """A command could not be carried out; one line for the operator."""


class IdentityCollision(EngineError):
    """The curio identity a new worker would take is another live machine's in the cluster:
    another fleet or node uses the address. The fleet's configuration, never a machine's."""

    def __init__(self, line: str, runner_id: int) -> None:
        super().__init__(line)
        self.line = line
        self.runner_id = runner_id


class NoCredit(EngineError):
    """Vast refused a rent for billing (``missing_billing``: the account is out of credit).
    The account's, never the machine's: no strike, no ban, the offer stays rentable."""

    def __init__(self, line: str) -> None:
        super().__init__(line)
        self.line = line


# Runner ids looked at per rent, beyond the ports this fleet's live workers hold: one reading
# of the cluster says which of their addresses other live machines hold.
RUNNER_ID_BAND = 64
BILLING_CODES = frozenset({"missing_billing"})  # vast-api.md § errors; the CLI's api/billing.py


@dataclass
class ActSettings:
    dry_run: bool
    worker_env: dict[str, str]
    # curio's database password for the workers (a secret: not in repr); None: the file's
    curio_db_password: str | None = field(default=None, repr=False)


class Acts:
    def __init__(
        self,
        config: Config,
        store: Store,
        client: VastClient,
        *,
        clock: Callable[[], float],
        settings: ActSettings,
        public_key: str | None,
        stopping: Callable[[], bool],
        forget_worker: Callable[[int], Awaitable[None]],
        offers_changed: Callable[[int | None], None],
    ) -> None:
        self.config = config
        # how long the demand rests between its rises, as the engine last learned it (pool.keep
        # sizes a kept worker's wait by it); None: not known yet
        self.pool_idle_h: float | None = None
        self.store = store
        self.client = client
        self.clock = clock
        self.settings = settings
        self.public_key = public_key
        self.stopping = stopping  # a stop was asked: nothing new goes out
        self.forget_worker = forget_worker  # stop following a worker that is being destroyed
        self.offers_changed = offers_changed  # re-rank (None), or drop one offer id
        self.inflight_labels: set[str] = set()
        self.fleet_id: str | None = None  # this database's (store meta), read at the first step
        self.dry_offers: dict[int, float] = {}  # offers this dry run would rent → $/h
        self._dry_decided: set[tuple[str, int]] = set()
        self._destroy_retry: dict[int, tuple[int, float]] = {}  # vast_id → (failures, not before)
        self._key_on_account = False
        self.last_error: str | None = None
        self.cluster: ClusterReader | None = None  # curio's cluster (cordon, release), if read
        # acts in flight (their request out, their record not yet written): what each is; a
        # stop waits for them (``settle``) instead of cutting them short
        self._in_flight: dict[int, str] = {}
        self._act_ids = itertools.count(1)
        self._settled = asyncio.Event()
        self._settled.set()

    # -- acts in flight -----------------------------------------------------------------

    @contextlib.contextmanager
    def act(self, what: str) -> Iterator[None]:
        """One act in flight, from its request to its record (an act within another counts
        once more): a stop waits for it (``settle``)."""
        key = next(self._act_ids)
        self._in_flight[key] = what
        self._settled.clear()
        try:
            yield
        finally:
            del self._in_flight[key]
            if not self._in_flight:
                self._settled.set()

    def in_flight(self) -> list[str]:
        """What is in flight now, outermost first."""
        return list(self._in_flight.values())

    async def settle(self, timeout: float) -> list[str]:
        """Wait at most ``timeout`` seconds for every act in flight to end (each refuses to
        begin once a stop is asked, so none starts meanwhile); what is still in flight."""
        if self._in_flight and timeout > 0:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._settled.wait()
        return self.in_flight()

    async def load_identity(self) -> str:
        if self.fleet_id is None:
            self.fleet_id = await self.store.meta.fleet_id()
        return self.fleet_id

    def ours(self, label: str | None) -> bool:
        """Carries this fleet's name and this database's identity (or a label older than
        identities): a guard on every destroy. Ownership itself is an intent
        (``store.intents.intended``): a label alone never makes an instance ours."""
        if fleet_of(label) != self.config.fleet.name:
            return False
        fid = fleet_id_of(label)
        return fid is None or fid == self.fleet_id

    # -- rent ---------------------------------------------------------------------------

    async def rent(self, offer: Offer, reason: str, bid: BidQuote | None = None) -> int | None:
        """Rent one offer, on demand or as ``bid``: the instance id, or None (a dry run, or an
        outcome not known yet)."""
        await self.check_rentable(offer)
        now = self.clock()
        price = offer.dph_total if bid is None else bid.total
        min_rate = self.config.min_rate_for(price)
        label = new_label(self.config.fleet.name, await self.load_identity())
        # What it will bill running: the bid and the offer's storage, when a bid.
        detail = {
            "offer": {**offer.to_json(), "dph_total": round(price, 5)},
            "min_rate": min_rate,
            "image": self.config.fleet.image,
        }
        # what it bills before it runs, or stopped (a bid outbid)
        detail["storage_dph"] = offer.storage_total_cost
        if bid is not None:
            detail["bid"] = bid.to_json()
        if self.settings.dry_run:
            await self._dry_rent(offer, label, min_rate, detail, reason, now)
            return None
        if self.stopping():
            raise EngineError(f"not renting offer {offer.id}: the engine is stopping")
        with self.act(f"rent of offer {offer.id}"):
            return await self._send_rent(offer, reason, bid, label, min_rate, detail, now)

    async def _send_rent(
        self, offer: Offer, reason: str, bid: BidQuote | None, label: str, min_rate: float,
        detail: dict[str, Any], now: float,
    ) -> int | None:  # fmt: skip
        """The rent's intent, its request and its record: one act (``rent``)."""
        await self._ensure_key_on_account()
        # The worker's identity in curio's cluster, kept with the intent: a rent resolved by its
        # label after a crash records the same one (the original's runner_id, kept on
        # re-register of the same label).
        runner_id = await self._new_runner_id(now)
        detail["runner_id"] = runner_id
        detail["paramfetch_timeout"] = policy.paramfetch_timeout_s(offer.inet_down)
        intent = await self.store.intents.create(
            "rent", reason, label=label, offer_id=offer.id, machine_id=offer.machine_id,
            detail=detail, now=now,
        )  # fmt: skip
        crash_point("rent.before_send")
        if self.stopping():  # asked while the intent was written: it never goes out
            await self.store.intents.finish(intent.id, "failed", note="engine stopping", now=now)
            raise EngineError(f"not renting offer {offer.id}: the engine is stopping")
        env = {
            # min_rate under the name the worker's scripts read (worker-image/README.md)
            "MIN_RATE": f"{min_rate:.1f}",
            "BENCH_PROOFS": str(self.config.fleet.bench_proofs),
            "BENCH_SNAP_PROOFS": str(self.config.fleet.bench_snap_proofs),
            "BENCH_TIMEOUT": str(policy.bench_timeout_s(min_rate, self.config.fleet.bench_proofs)),
            "PARAMFETCH_TIMEOUT": str(detail["paramfetch_timeout"]),
            "VASTUI_IMAGE": self.config.fleet.image,
            **identity.runner_env(
                self.config.fleet.name,
                runner_id,
                self.config.curio.listen_port_base,
                fleet_id_of(label),
            ),
            **worker_curio_env(self.config, self.settings.curio_db_password),
            **self.settings.worker_env,
        }
        self.inflight_labels.add(label)
        try:
            await self.store.intents.mark_sent(intent.id, now=now)
            result = await self.client.create_instance(
                offer.id, label=label, image=self.config.fleet.image,
                disk_gb=self.config.fleet.disk_gb, env=env, onstart=ONSTART,
                bid_price=None if bid is None else bid.price,
            )  # fmt: skip
        except CreateOutcomeUnknown as exc:
            log.warning("%s", exc)  # stays pending: resolved by label on later steps
            return None
        except VastError as exc:
            await self.store.intents.finish(intent.id, "failed", note=str(exc)[:300], now=now)
            if isinstance(exc, VastHTTPError) and exc.code in BILLING_CODES:
                raise NoCredit(sanitize_line(exc.msg or str(exc), 200)) from exc
            self.offers_changed(offer.id)
            raise EngineError(f"rent of offer {offer.id} failed: {exc}") from exc
        finally:
            self.inflight_labels.discard(label)
        crash_point("rent.answered")
        await self.record_rent(detail, result.instance_id, label, now)
        await self.store.intents.finish(intent.id, "done", instance_id=result.instance_id, now=now)
        return result.instance_id

    async def _dry_rent(
        self, offer: Offer, label: str, min_rate: float, detail: dict[str, Any], reason: str,
        now: float,
    ) -> None:  # fmt: skip
        self.dry_offers[offer.id] = offer.dph_total
        await self.store.intents.create(
            "rent", reason, label=label, offer_id=offer.id, machine_id=offer.machine_id,
            detail=detail, status="dry_run", now=now,
        )  # fmt: skip
        what = (
            f"offer {offer.id} ({offer.gpu_name} x{offer.num_gpus}, "
            f"${offer.dph_total:.3f}/h, min_rate {min_rate:.0f})"
        )
        await self.store.events.add(
            "rent",
            f"[dry-run] would rent {what}",
            machine_id=offer.machine_id,
            detail={"dry_run": True, "offer_id": offer.id, "reason": reason},
            now=now,
        )
        log.info("dry-run: would rent %s: %s", what, reason)

    async def _new_runner_id(self, now: float) -> int:
        """The next runner id whose curio address is free: no live worker of this fleet holds
        its listen port (ports wrap after 53,135 rentals: vastui/engine/identity.py) and no
        other live machine of the cluster is there (another fleet whose ports walked up into
        this fleet's, another node). A taken one is skipped, never reused, and said once; a
        cluster that cannot be read does not block (the prove stage checks it again,
        Engine._check_prove_identity). IdentityCollision only when every id of a whole band
        is taken: the next rent looks past it."""
        base = self.config.curio.listen_port_base
        held = {
            identity.listen_port(rec.runner_id, base)
            for rec in await self.store.instances.all(include_killed=False)
            if rec.runner_id is not None
        }
        first = await self.store.instances.next_runner_id()
        band = range(first, first + RUNNER_ID_BAND + len(held))
        ours = [r for r in band if identity.listen_port(r, base) not in held]
        taken = await self._taken_in_cluster(ours, now)
        chosen = next((r for r in ours if identity.curio_listen(r, base) not in taken), None)
        if chosen != first:  # the ids before it are used up: never given again
            await self.store.instances.note_runner_id(band[-1] if chosen is None else chosen)
        skipped = [(r, line) for r in band if (line := taken.get(identity.curio_listen(r, base)))]
        if chosen is None:
            raise IdentityCollision(
                f"runner ids {band[0]}-{band[-1]} skipped: no curio address of theirs is free; "
                f"{skipped[0][1] if skipped else 'no free listen port'}",
                band[-1],
            )
        skipped = [(r, line) for r, line in skipped if r < chosen]
        if skipped:
            text = sanitize_line(
                f"runner id(s) {_spans([r for r, _ in skipped])} skipped, runner id {chosen} taken "
                f"({identity.curio_listen(chosen, base)}): {skipped[0][1]}",
                500,
            )
            log.warning("%s", text)
            await self.store.events.add("cluster", text, now=now)
        return chosen

    async def _taken_in_cluster(self, runner_ids: list[int], now: float) -> dict[str, str]:
        """The curio addresses among these runner ids' that another live machine holds
        (address -> one line saying which); none when the cluster is not read or cannot be."""
        cluster = self._reading_cluster()
        if cluster is None or not runner_ids:
            return {}
        base = self.config.curio.listen_port_base
        workers = [
            Worker(
                0, identity.curio_listen(r, base),
                identity.node_name(self.config.fleet.name, r, self.fleet_id), None, now, now,
            )
            for r in runner_ids
        ]  # fmt: skip
        try:
            return await cluster.live_holders(workers, now)
        except ClusterError as exc:
            log.info("curio identities from %s not checked: %s", workers[0].host_and_port, exc)
            return {}

    async def check_rentable(self, offer: Offer) -> None:
        """Only a rent in flight blocks an offer, and a live worker keeps its machine busy. An
        offer rented before may be rented again: a machine that failed is kept off by the bad
        list (and its strikes), a slow one by its measured rate, never by its offer id."""
        if offer.machine_id in await self.store.badlist.machine_ids(now=self.clock()):
            raise EngineError(f"machine {offer.machine_id} is on the bad list")
        for intent in await self.store.intents.all(status="pending", kind="rent"):
            if intent.offer_id == offer.id or intent.machine_id == offer.machine_id:
                raise EngineError(
                    f"offer {offer.id}: a rent on machine {intent.machine_id} is in flight "
                    f"(intent {intent.id}); not renting twice"
                )
        for rec in await self.store.instances.all(include_killed=False):
            if rec.source == "vastui" and rec.machine_id == offer.machine_id:
                raise EngineError(
                    f"offer {offer.id}: machine {offer.machine_id} already has live instance "
                    f"{rec.vast_id}"
                )
        if self.settings.dry_run and offer.id in self.dry_offers:
            raise EngineError(f"dry-run: offer {offer.id} was already chosen in this run")

    async def record_rent(
        self, detail: dict[str, Any], instance_id: int, label: str, now: float
    ) -> InstanceRecord:
        offer = detail.get("offer") or {}
        rec = InstanceRecord(
            vast_id=instance_id,
            label=label,
            offer_id=offer.get("id"),
            machine_id=offer.get("machine_id"),
            host_id=offer.get("host_id"),
            gpu_name=offer.get("gpu_name"),
            num_gpus=offer.get("num_gpus"),
            dph_total=offer.get("dph_total"),
            cpu_ram_gb=offer.get("cpu_ram_gb"),
            geolocation=offer.get("geolocation"),
            image=detail.get("image"),
            state="loading",
            min_rate=detail.get("min_rate"),
            created_at=now,
            loading_at=now,
            runner_id=detail.get("runner_id") if isinstance(detail.get("runner_id"), int) else None,
            paramfetch_timeout=_int_or_none(detail.get("paramfetch_timeout")),
            storage_dph=_float_or_none(detail.get("storage_dph")),
            inet_down=_float_or_none(offer.get("inet_down")),
            inet_down_cost=_float_or_none(offer.get("inet_down_cost")),
            inet_up_cost=_float_or_none(offer.get("inet_up_cost")),
            **_bid_fields(detail),
        )
        rec = await self.store.instances.upsert(rec, now=now)
        await self.store.events.add(
            "rent",
            f"rented offer {offer.get('id')} ({offer.get('gpu_name')} x{offer.get('num_gpus')}, "
            f"${offer.get('dph_total')}/h, min_rate {detail.get('min_rate')})",
            instance_id=instance_id,
            machine_id=offer.get("machine_id"),
            detail={"label": label},
            now=now,
        )
        log.info("rented %s on machine %s (%s)", instance_id, rec.machine_id, label)
        return rec

    async def _ensure_key_on_account(self) -> None:
        if self._key_on_account or not self.public_key:
            return
        await self.client.ensure_ssh_key(self.public_key)
        self._key_on_account = True

    # -- destroy --------------------------------------------------------------------------

    async def kill(
        self, rec: InstanceRecord, kill: policy.Kill, *, intent: Intent | None = None
    ) -> bool:
        """Destroy with a typed reason (and ban the machine when the fault is the machine's).

        A planned destroy of a healthy proving worker drains first (vastui/engine/drain.py):
        its curio machine is cordoned and the destroy waits, as a recorded intent, until it
        holds no work or the drain's deadline; a later call (each step, or a kill that will not
        wait: the worker broke meanwhile) ends it. True once destroyed and recorded; False if
        refused, dry-run, draining, or to be retried (once a stop is asked nothing is sent: a
        destroy decided then is its intent, carried out at the next start).
        """
        if not self.ours(rec.label):
            log.error("refusing to destroy instance %s: label %r is not this fleet's",
                      rec.vast_id, sanitize_line(rec.label, 80))  # fmt: skip
            return False
        now = self.clock()
        if self.settings.dry_run:
            await self._dry_kill(rec, kill, now)
            return False
        if intent is None:
            pending = [
                i
                for i in await self.store.intents.all(status="pending", kind="destroy")
                if i.instance_id == rec.vast_id
            ]
            if pending:  # a destroy already decided is being retried, or drains
                intent = pending[0]
            else:
                kill = await self._fleet_check(rec, kill, now)
                intent = await self._destroy_intent(rec, kill, now)
                begun = None
                if drain.drains(kill, rec):
                    begun = await self._begin_drain(rec, kill, intent, now)
                if begun is None:
                    return await self._destroy(rec, kill, intent.id)
                return await self._drained_at_once(rec, kill, begun, intent.id, now)
        decided = policy.Kill.from_detail(intent.reason, intent.detail)
        plan = intent.detail.get("drain")
        if isinstance(plan, dict):
            if kill.kind != decided.kind and not drain.drains(kill, rec):
                # it broke while draining: it would finish nothing more
                decided = _noted(decided, f"drain cut short: {kill.reason}")
            else:
                end = drain.drain_end(plan, _cluster_state(rec), rec.cluster_checked_at, now)
                if end is None:
                    return False
                decided = _noted(decided, end.text, drain_end=end.why)
        elif drain.drains(decided, rec):  # decided before a crash, its drain not begun
            begun = await self._begin_drain(rec, decided, intent, now)
            if begun is not None:
                return await self._drained_at_once(rec, decided, begun, intent.id, now)
        pooled = await self._to_pool(rec, decided, intent.id)
        if pooled is not None:
            return pooled
        return await self._destroy(rec, decided, intent.id)

    # -- the warm pool (vastui/engine/pool.py) ---------------------------------------------

    async def _to_pool(self, rec: InstanceRecord, kill: policy.Kill, intent_id: int) -> bool | None:
        """A surplus worker stopped into the warm pool instead of destroyed, when the pool
        keeps it: True once stopped and recorded, False to retry, None: destroy it."""
        if kill.kind != SURPLUS_KIND or rec.pooled_since is not None:
            return None
        live = await self.store.instances.all(include_killed=False)
        pooled = sum(1 for r in live if r.pooled_since is not None)
        verdict = pool.keep(rec, pooled, self.config, idle_h=self.pool_idle_h)
        if not verdict.pooled:
            log.info("instance %s is not kept warm: %s", rec.vast_id, verdict.why)
            return None
        if not self._retry_due(rec.vast_id) or self.stopping():
            return False
        with self.act(f"stop of instance {rec.vast_id} into the warm pool"):
            try:
                await self.client.stop_instance(rec.vast_id)
            except VastNotFound:
                return None  # gone already: the destroy records it
            except VastError as exc:
                self._note_destroy_failure(rec.vast_id, exc)
                self.last_error = sanitize_line(f"stop {rec.vast_id}: {exc}", 300)
                return False
            self._destroy_retry.pop(rec.vast_id, None)
            await self.forget_worker(rec.vast_id)
            text = sanitize_line(f"{kill.reason}; {verdict.why}", 300)
            rec = await self.store.pool_stop(intent_id, rec.vast_id, text, now=self.clock())
            log.info("instance %s: %s", rec.vast_id, text)
            await self.release(rec, why="stopped into the warm pool")
            return True

    async def start_pooled(self, rec: InstanceRecord) -> bool:
        """Start a pooled worker (its parameters and benchmark are on its disk): True once
        started; False when Vast queued the start (resources_unavailable) or refused it."""
        if self.stopping():
            return False
        with self.act(f"start of instance {rec.vast_id} from the warm pool"):
            return await self._start_pooled(rec)

    async def _start_pooled(self, rec: InstanceRecord) -> bool:
        now = self.clock()
        try:
            started = await self.client.start_instance(rec.vast_id)
        except VastError as exc:
            self.last_error = sanitize_line(f"start {rec.vast_id}: {exc}", 300)
            log.warning("%s", self.last_error)
            return False
        if not started:
            minutes = self.config.fleet.warm_pool_start_min
            await self.store.instances.update(rec.vast_id, pool_start_at=now)
            await self.store.events.add(
                "pool",
                f"start from the warm pool queued by Vast (resources_unavailable: its GPUs are "
                f"taken); destroyed if it has not started within {minutes:g} min",
                instance_id=rec.vast_id, machine_id=rec.machine_id, now=now,
            )  # fmt: skip
            return False
        await self.resume_pooled(rec, now)
        return True

    async def resume_pooled(self, rec: InstanceRecord, now: float) -> InstanceRecord:
        """A pooled worker runs again: it starts its stages afresh (a new container: loading,
        set-up, the parameters and the benchmark found on its disk), its production measured
        from a new daemon."""
        since = rec.pooled_since if rec.pooled_since is not None else now
        stopped = max(0.0, now - since)
        fields: Progress = {
            "pooled_since": None, "pool_start_at": None, "pooled_s": rec.pooled_s + stopped,
            "prod_state": None, "unhealthy_since": None, **closed_stop(rec, since, now),
        }  # fmt: skip
        fields.update(carried_work(rec))
        rec = await self.store.instances.set_stage(rec.vast_id, "loading", now, **fields)
        text = f"started from the warm pool after {stopped / 60:.0f} min stopped"
        await self.store.events.add(
            "pool", text, instance_id=rec.vast_id, machine_id=rec.machine_id, now=now
        )
        log.info("instance %s: %s", rec.vast_id, text)
        return rec

    async def _destroy_intent(self, rec: InstanceRecord, kill: policy.Kill, now: float) -> Intent:
        """The destroy's intent, with its ban. A ban the store refuses never holds up the
        destroy that carries it: the intent is written without it (the refusal logged and
        recorded as an event) and the DELETE goes out."""
        ban = self._ban_spec(rec, kill, now)
        try:
            return await self.store.create_destroy_intent(
                rec.vast_id, kill.reason, machine_id=rec.machine_id, detail=kill.to_detail(),
                ban=ban, now=now,
            )  # fmt: skip
        except StoreFatal:
            raise
        except StoreError as exc:
            if ban is None:
                raise
            line = sanitize_line(
                f"ban of machine {rec.machine_id} not recorded ({exc}); instance {rec.vast_id} "
                "is destroyed without it",
                300,
            )
            log.error("%s", line)
        intent = await self.store.create_destroy_intent(
            rec.vast_id, kill.reason, machine_id=rec.machine_id, detail=kill.to_detail(), now=now
        )
        with contextlib.suppress(StoreError):
            await self.store.events.add(
                "ban", line, instance_id=rec.vast_id, machine_id=rec.machine_id, now=now
            )
        return intent

    async def _destroy(self, rec: InstanceRecord, kill: policy.Kill, intent_id: int) -> bool:
        """The DELETE of a decided destroy, its record, then its tasks released in curio's
        cluster: one act, which a stop waits for once it began (``settle``); one not begun when
        the stop came stays a pending intent, for the next start."""
        if not self._retry_due(rec.vast_id):
            return False
        if self.stopping():  # decided, not sent: its intent is carried out at the next start
            self.last_error = "the engine is stopping: destroyed at its next start"
            return False
        with self.act(f"destroy of instance {rec.vast_id}"):
            return await self._send_destroy(rec, kill, intent_id)

    async def _send_destroy(self, rec: InstanceRecord, kill: policy.Kill, intent_id: int) -> bool:
        crash_point("destroy.before_send")
        try:
            existed = await self.client.destroy_instance(rec.vast_id)
        except VastError as exc:
            self._note_destroy_failure(rec.vast_id, exc)
            self.last_error = sanitize_line(f"destroy {rec.vast_id}: {exc}", 300)
            return False
        crash_point("destroy.answered")
        self._destroy_retry.pop(rec.vast_id, None)
        await self.forget_worker(rec.vast_id)
        await self.complete_destroy(rec, kill, intent_id, already_gone=not existed)
        log.info("destroyed %s (%s): %s", rec.vast_id, kill.kind, kill.reason)
        await self.release(rec)
        return True

    # -- curio's cluster: drain, release, identity ---------------------------------------

    def cluster_worker(self, rec: InstanceRecord, now: float | None = None) -> Worker | None:
        """The worker as curio's cluster should know it (cluster.worker_of)."""
        return worker_of(rec, self.config, self.clock() if now is None else now)

    def _reading_cluster(self) -> ClusterReader | None:
        return self.cluster if self.cluster is not None and self.cluster.enabled else None

    async def _begin_drain(
        self, rec: InstanceRecord, kill: policy.Kill, intent: Intent, now: float
    ) -> dict[str, Any] | None:
        """Cordon the worker's curio machine, record the drain in its destroy intent (its plan
        returned) and read the worker in the cluster again. None when there is nothing to drain
        (no cluster read, no row of its own in it), the cordon failed or a stop was asked:
        then it is destroyed at once, as before curio's cluster was read."""
        cluster = self._reading_cluster()
        worker = self.cluster_worker(rec, now)
        if cluster is None or worker is None or self.stopping():
            return None
        with self.act(f"cordon of instance {rec.vast_id}'s curio machine"):
            try:
                machine = await cluster.cordon(worker)
            except ClusterError as exc:
                log.warning("instance %s: cannot cordon its curio machine, destroyed without a "
                            "drain: %s", rec.vast_id, exc)  # fmt: skip
                return None
            if machine is None:
                return None
            state = _cluster_state(rec)
            held = (
                drain.work_held(state.get("held_by_name") or {})
                if state is not None
                else self.config.curio.max_pending
            )
            deadline = now + drain.drain_seconds(held, drain.worker_rate(rec), self.config)
            plan = {
                "started": now, "deadline": deadline, "curio_machine": machine,
                "host_and_port": worker.host_and_port, "held": held,
            }  # fmt: skip
            text = (
                f"curio machine {machine} ({worker.host_and_port}) cordoned before its destroy "
                f"({kill.kind}): it finishes the {held} task(s) it holds, destroyed within "
                f"{(deadline - now) / 60:.0f} min"
            )
            if await self.store.start_drain(intent.id, plan, text, now=now):
                log.info("instance %s: %s", rec.vast_id, text)
            crash_point("drain.cordoned")
            await self._read_after_cordon(cluster, rec, now)
            return plan

    async def _read_after_cordon(
        self, cluster: ClusterReader, rec: InstanceRecord, now: float
    ) -> None:
        """The worker's reading in the cluster taken once its cordon is in (the reading after
        the cordon that ends a drain, drain.drain_end): a worker that holds no work is drained
        at once, not a step later. A task claimed in the instant of the cordon is freed by the
        release that follows its stop or destroy. Not read: the next step's reading ends it."""
        worker = self.cluster_worker(rec, now)
        if worker is None:
            return
        at = self.clock()  # after the cordon: the reading counts for the drain (>= its start)
        p = self.config.proving
        try:
            view = await cluster.read(
                [worker], at, p.window_min * 60.0, p.market_deadline_min * 60.0
            )
        except ClusterError as exc:
            log.info("instance %s: not read after its cordon (%s); the next step's reading "
                     "ends its drain", rec.vast_id, exc)  # fmt: skip
            return
        state = view.workers.get(rec.vast_id)
        if state is not None:
            await self.store.instances.update(
                rec.vast_id, cluster_state=json.dumps(state.to_json()), cluster_checked_at=at
            )

    async def _drained_at_once(
        self, rec: InstanceRecord, kill: policy.Kill, plan: dict[str, Any], intent_id: int,
        now: float,
    ) -> bool:  # fmt: skip
        """A drain just begun whose reading after the cordon shows no work held ends now:
        stopped into the warm pool or destroyed in this step. False: it drains."""
        rec = await self.store.instances.get(rec.vast_id) or rec
        end = drain.drain_end(plan, _cluster_state(rec), rec.cluster_checked_at, now)
        if end is None or end.why != "drained":
            return False
        decided = _noted(kill, end.text, drain_end=end.why)
        pooled = await self._to_pool(rec, decided, intent_id)
        if pooled is not None:
            return pooled
        return await self._destroy(rec, decided, intent_id)

    async def release(
        self, rec: InstanceRecord, *, outbid: bool = False, why: str | None = None
    ) -> bool:
        """Free the tasks of a destroyed worker's curio machine and delete its row (an outbid
        worker's tasks only: it may resume as the same machine), with a ``tasks_released``
        event; once, when it had joined the cluster (it reached the prove stage). False while
        the cluster cannot be read: it stays due and the next step tries again."""
        cluster = self._reading_cluster()
        worker = self.cluster_worker(rec)
        if cluster is None or worker is None or rec.proving_at is None:
            return False
        # A vanish is the engine's conclusion, not a destroy Vast confirmed: an instance listed
        # again is adopted back, and its curio must still find its machine row (harmony_task's
        # owner_id references it); curio's own cleanup removes the row if it is really gone.
        keep_row = outbid or rec.kill_kind == "vanished"
        with self.act(f"release of instance {rec.vast_id}'s tasks"):
            try:
                freed, machine = await cluster.release(worker, keep_row=keep_row)
            except ClusterError as exc:
                log.warning("instance %s: its tasks in curio's cluster are not freed yet: %s",
                            rec.vast_id, exc)  # fmt: skip
                return False
            why = why or ("outbid (stopped by Vast)" if outbid else "destroyed")
            if machine is None:
                text = f"{why}: no curio machine of its own in the cluster, nothing to free"
            else:
                kept = "; its row kept (it may resume)" if keep_row else "; its row deleted"
                text = f"{why}: {freed} task(s) of curio machine {machine} freed{kept}"
            await self.store.note_released(
                rec.vast_id, freed, text, now=self.clock(),
                detail={"curio_machine": machine, "host_and_port": worker.host_and_port,
                        "outbid": outbid},
            )  # fmt: skip
            log.info("instance %s: %s", rec.vast_id, text)
            return True

    async def complete_destroy(
        self, rec: InstanceRecord, kill: policy.Kill, intent_id: int, *, already_gone: bool
    ) -> None:
        """Record a destroy Vast confirmed: the strike it carries (idempotent: once per instance
        and kind), then in one transaction the kill, its event, the ban it carries and the
        intent's close. Run again by recovery after a crash anywhere in between."""
        if kill.strike and not kill.ban:
            await self.strike(rec, kill.kind, kill.reason, skip_destroy=rec.vast_id)
        _, bad = await self.store.complete_destroy(
            intent_id,
            kill.kind,
            kill.reason,
            failed_stage=kill.stage if kill.stage in policy.LIVE_STAGES else None,
            bench_outcome=kill.bench_outcome,
            error_lines=[sanitize_line(x, 500) for x in kill.error_lines] or None,
            detail={**kill.detail, "already_gone": already_gone},
            now=self.clock(),
        )
        if bad is not None:
            self.offers_changed(None)  # re-rank: the bad flag changed
            await self._kill_machine(bad.machine_id, bad.reason, skip=rec.vast_id)

    async def finish_recovered_destroy(
        self, rec: InstanceRecord | None, kill: policy.Kill, intent: Intent
    ) -> None:
        """A pending destroy whose instance is already recorded as killed (or has no row): the
        engine died between Vast's answer and the record. Complete it now."""
        legacy_ban = kill.ban and BAN_KEY not in intent.detail  # from before bans rode in it
        if (
            legacy_ban
            and rec is not None
            and rec.machine_id
            and rec.machine_id not in await self.store.badlist.machine_ids(now=self.clock())
        ):
            await self.ban(
                rec.machine_id, str(kill.ban), "automatic", host_id=rec.host_id,
                gpu_name=rec.gpu_name, evidence=list(kill.error_lines)[-10:],
                skip_destroy=rec.vast_id,
            )  # fmt: skip
        if rec is None:
            await self.store.complete_destroy(intent.id, kill.kind, intent.reason, now=self.clock())
            return
        await self.complete_destroy(rec, kill, intent.id, already_gone=True)

    # -- failures that are the fleet's, not the machines' ----------------------------------

    async def _fleet_check(self, rec: InstanceRecord, kill: policy.Kill, now: float) -> policy.Kill:
        """A kill that would charge the machine (a strike, a ban) carries its failure's
        signature; if that signature is already on enough other machines (fleetwide.detect),
        the failure is the fleet's: provisioning pauses and no machine is charged for it."""
        if not (kill.ban or kill.strike) or not rec.machine_id:
            return kill
        if kill.kind in fleetwide.MEASURED_KINDS:  # a pace is its machine's own
            return kill
        sig = fleetwide.signature(kill.stage, kill.kind, kill.error_lines)
        kill = replace(kill, detail={**kill.detail, "signature": sig})
        fleet = self.config.fleet
        if fleet.fleet_failure_machines <= 0:
            return kill
        active = await self.store.meta.fleet_failure()
        if active is not None and active.get("signature") == sig:
            return _uncharged(kill)
        # Declared the fleet's lately: a worker rented into the failure before the pause ended
        # fails the same way after it (RELIABILITY.md, storm): still not its machine's.
        declared = await self.store.meta.fleet_signature_since(sig)
        if declared is not None and now - declared <= fleetwide.REMEMBER_S:
            return _uncharged(kill)
        window = fleet.fleet_failure_window_min * 60.0
        since = now - window
        seen = [
            fleetwide.Failure(mid, s, ts, iid)
            for mid, s, ts, iid in await self.store.events.recent_failures(since)
        ]
        seen.append(fleetwide.Failure(rec.machine_id, sig, now, rec.vast_id))
        found = fleetwide.detect(seen, now, window_s=window, machines=fleet.fleet_failure_machines)
        ff = next((f for f in found if f.signature == sig), None)
        if ff is None:
            return kill
        others = [m for m in ff.machines if m != rec.machine_id]
        value = {
            "signature": sig, "text": ff.text(), "machines": list(ff.machines),
            "instances": list(ff.instances), "since": now, "first_at": ff.first_at,
            "example": kill.reason[:300],
        }  # fmt: skip
        unbanned = await self.store.declare_fleet_failure(
            value, forgive_machines=others,
            forgive_instances=[i for i in ff.instances if i != rec.vast_id], since=since, now=now,
        )  # fmt: skip
        log.error(
            "fleet-wide failure: %s. Provisioning is paused and no machine is blamed (%d "
            "ban(s) taken back) until a worker passes its benchmark or `vastui resume`",
            ff.text(), len(unbanned),
        )  # fmt: skip
        if unbanned:
            self.offers_changed(None)
        return _uncharged(kill)

    async def carry_out(self, rec: InstanceRecord, effects: list[Effect], now: float) -> None:
        """A transition's effects (transitions.py), in order; a kill is the last."""
        for effect in effects:
            match effect:
                case Update(fields):
                    rec = await self.store.instances.update(rec.vast_id, **fields)
                case EnterStage(stage):
                    rec = await self.store.instances.set_stage(rec.vast_id, stage, now=now)
                    await self.store.events.add(
                        "stage", stage, instance_id=rec.vast_id, machine_id=rec.machine_id,
                        now=now,
                    )  # fmt: skip
                case Note(kind, text, detail, warn):
                    if warn:
                        log.warning("instance %s: %s", rec.vast_id, text)
                    await self.store.events.add(
                        kind, text, instance_id=rec.vast_id, machine_id=rec.machine_id,
                        detail=dict(detail) if detail is not None else None, now=now,
                    )  # fmt: skip
                case Production(state, measured, rate, checked_at, curio_info):
                    prod: Progress = {"prod_state": state.to_json()}
                    if measured:
                        prod.update(
                            {"prod_completed": state.completed, "prod_failed": state.failed,
                             "prod_rate": rate, "prod_checked_at": checked_at,
                             "curio_info": curio_info}
                        )  # fmt: skip
                    rec = await self.store.instances.update(rec.vast_id, **prod)
                case RecordRate(rate, partial):
                    await self.record_rate(rec, rate, now, partial=partial)
                case Strike(kind, reason):
                    await self.strike(rec, kind, reason)
                case Passed():
                    await self.worker_passed(rec, now)
                case KillWorker(kill):
                    await self.kill(rec, kill)
                    return

    async def worker_passed(self, rec: InstanceRecord, now: float) -> None:
        """A worker passed its benchmark: whatever broke the fleet works again."""
        why = f"instance {rec.vast_id} on machine {rec.machine_id} passed its benchmark"
        active = await self.store.meta.fleet_failure()
        if active is not None and active.get("signature") == payment.SIGNATURE:
            return  # a benchmark signs nothing: the payment path is mended by a signature
        if await self.store.clear_fleet_failure(why, now=now):
            log.info("fleet-wide failure over: %s; provisioning resumes", why)

    def _ban_spec(self, rec: InstanceRecord, kill: policy.Kill, now: float) -> BanSpec | None:
        if not kill.ban or not rec.machine_id:
            return None
        return BanSpec(
            rec.machine_id, kill.ban, "automatic", host_id=rec.host_id, gpu_name=rec.gpu_name,
            expires_at=policy.ban_expiry(now, self.config.fleet.auto_ban_days),
            evidence=tuple(kill.error_lines[-10:]),
        )  # fmt: skip

    async def _dry_kill(self, rec: InstanceRecord, kill: policy.Kill, now: float) -> None:
        key = (kill.kind, rec.vast_id)
        if key in self._dry_decided:
            return
        self._dry_decided.add(key)
        await self.store.events.add(
            "destroy",
            f"[dry-run] {kill.reason}",
            instance_id=rec.vast_id,
            machine_id=rec.machine_id,
            detail={"kind": kill.kind, "dry_run": True},
            now=now,
        )

    async def destroy_again(self, rec: InstanceRecord) -> None:
        """Recorded as destroyed, yet still listed: destroy again (idempotent, no new record)."""
        if self.settings.dry_run or not self._retry_due(rec.vast_id) or self.stopping():
            return
        try:
            with self.act(f"destroy of instance {rec.vast_id}, again"):
                await self.client.destroy_instance(rec.vast_id)
            self._destroy_retry.pop(rec.vast_id, None)
            log.warning("instance %s was still listed after its destroy; destroyed again",
                        rec.vast_id)  # fmt: skip
        except VastError as exc:
            self._note_destroy_failure(rec.vast_id, exc)

    def _retry_due(self, vast_id: int) -> bool:
        failures = self._destroy_retry.get(vast_id)
        return failures is None or self.clock() >= failures[1]

    def _note_destroy_failure(self, vast_id: int, exc: Exception) -> None:
        count = self._destroy_retry.get(vast_id, (0, 0.0))[0] + 1
        delay = min(300.0, 5.0 * 2 ** (count - 1))
        self._destroy_retry[vast_id] = (count, self.clock() + delay)  # the engine's clock
        log.warning("destroy %s failed (%d), retry in %.0fs: %s", vast_id, count, delay, exc)

    # -- bans and strikes -----------------------------------------------------------------

    async def ban(
        self,
        machine_id: int,
        reason: str,
        source: str,
        *,
        host_id: int | None = None,
        gpu_name: str | None = None,
        evidence: list[str] | None = None,
        skip_destroy: int | None = None,
    ) -> None:
        """Put a machine on the bad list; its live instances are destroyed."""
        if host_id is None or gpu_name is None:
            for rec in await self.store.instances.all():
                if rec.machine_id == machine_id:
                    host_id = host_id or rec.host_id
                    gpu_name = gpu_name or rec.gpu_name
        now = self.clock()  # the engine's clock, like every other decision it records
        expires = None
        if source == "automatic":
            expires = policy.ban_expiry(now, self.config.fleet.auto_ban_days)
        await self.store.badlist.add(
            machine_id, reason, source=source, host_id=host_id, gpu_name=gpu_name,
            expires_at=expires, evidence=evidence, now=now,
        )  # fmt: skip
        self.offers_changed(None)  # re-rank: the bad flag changed
        await self._kill_machine(machine_id, reason, skip=skip_destroy)

    async def _kill_machine(self, machine_id: int, reason: str, *, skip: int | None) -> None:
        """A banned machine loses its live instances."""
        for rec in await self.store.instances.all(include_killed=False):
            if rec.machine_id == machine_id and rec.vast_id != skip:
                await self.kill(
                    rec, policy.Kill("bad_machine", f"machine {machine_id} ignored: {reason}")
                )

    async def strike(
        self, rec: InstanceRecord, kind: str, reason: str, *, skip_destroy: int | None = None
    ) -> None:
        """A mark against the machine (once per instance and kind); enough of them within
        auto_ban_days ban it (policy.strike_ban)."""
        if not rec.machine_id:
            return
        now = self.clock()
        since = policy.strike_window_start(now, self.config.fleet.auto_ban_days)
        strikes = await self.store.badlist.strikes(rec.machine_id)
        if any(s.instance_id == rec.vast_id and s.kind == kind for s in strikes):
            count = sum(1 for s in strikes if since is None or s.ts >= since)
        else:
            count = await self.store.badlist.add_strike(
                rec.machine_id, kind, reason, instance_id=rec.vast_id, since=since, now=now
            )
            log.info("strike %d on machine %s (%s): %s", count, rec.machine_id, kind, reason)
        ban = policy.strike_ban(count, self.config.proving.strikes_to_ban, reason)
        if ban is not None and rec.machine_id not in await self.store.badlist.machine_ids(now=now):
            await self.ban(
                rec.machine_id, ban, "automatic", host_id=rec.host_id, gpu_name=rec.gpu_name,
                skip_destroy=skip_destroy,
            )  # fmt: skip

    async def record_rate(
        self, rec: InstanceRecord, rate: float, now: float, *, partial: bool = False
    ) -> None:
        """A measured rate into the machine's performance record (ranking reads last_rate)."""
        if rec.machine_id and rec.gpu_name:
            await self.store.perf.record_rate(
                rec.machine_id, rec.gpu_name, rec.num_gpus or 1, rate,
                cpu_ram_gb=rec.cpu_ram_gb, host_id=rec.host_id, now=now, partial=partial,
            )  # fmt: skip
        self.offers_changed(None)  # the ranking must see this measurement before the next rent


def _bid_fields(detail: dict[str, Any]) -> dict[str, Any]:
    """The record's bid columns from a rent intent's detail (empty: on demand)."""
    bid = detail.get("bid")
    if not isinstance(bid, dict):
        return {}
    return {
        "is_bid": True,
        "bid_price": _float_or_none(bid.get("price")),
        "bid_cap": _float_or_none(bid.get("cap")),
    }


def _float_or_none(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) and value >= 0 else None


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def worker_curio_env(config: Config, password: str | None = None) -> dict[str, str]:
    """How the worker runs curio (worker-image/entrypoint.sh). The database password, when set,
    goes to Vast in the instance's environment and nowhere else: not logged, not stored."""
    c = config.curio
    env = {
        "CUZK_MAX_PENDING": str(c.max_pending),
        "CUZK_PROVE_TIMEOUT": c.prove_timeout,
        "PROVE_DEADLINE_MARGIN": f"{config.proving.deadline_margin:g}",
        "CURIO_LISTEN_PORT_BASE": str(c.listen_port_base),
        "CURIO_EXTRA_LAYERS": c.layers,
        "CURIO_PROOFSHARE": "1" if c.proofshare else "0",
        "CURIO_DB_NAME": c.db_name,
        "CURIO_DB_USER": c.db_user,
    }
    password = password or load_curio_db_password(config.path)
    if password:
        env["CURIO_DB_PASSWORD"] = password
    return env


def _spans(ids: list[int]) -> str:
    """Ascending ids as runs: ``3-7, 9``."""
    runs: list[list[int]] = []
    for n in ids:
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def _json_obj(text: str | None) -> dict[str, Any]:
    try:
        value = json.loads(text) if text else None
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _cluster_state(rec: InstanceRecord) -> dict[str, Any] | None:
    """The worker's last reading in curio's cluster (cluster.MachineState.to_json)."""
    return _json_obj(rec.cluster_state) or None


def _noted(kill: policy.Kill, note: str, **detail: Any) -> policy.Kill:
    """The decided destroy, with how its drain ended in its reason and detail."""
    return replace(
        kill, reason=f"{kill.reason} ({note})", detail={**kill.detail, "drain": note, **detail}
    )


def _uncharged(kill: policy.Kill) -> policy.Kill:
    """The same destroy, charged to nobody: the failure is the fleet's."""
    return replace(
        kill,
        ban=None,
        strike=False,
        reason=f"{kill.reason} (fleet-wide failure: not the machine's)"[:500],
        detail={**kill.detail, "fleet_failure": True},
    )
