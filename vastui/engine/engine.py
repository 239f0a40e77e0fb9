"""The reconcile loop: observe (Vast, workers over SSH, the store), decide, act.

The loop only observes, asks the pure decisions (``provision``: what to rent and what is
surplus; ``policy``: kills, bans, strikes; ``production``: the proving verdict) and acts through
``acts.Acts``, which writes every act as an intent before it goes out, so a crash at any point
is recovered on the next start. Worker events and counters arrive from ``follow.Followers``
over SSH and are decided as they arrive, not at the next poll.

The engine stops itself (``fatal``) when it cannot do its job: its store unwritable, deleted or
replaced, its lease lost. It never limps on: headless, that is one line and a non-zero exit,
and systemd restarts it.

One file: the loop's order (commands, observe, reconcile, provision, status) and the lock it
holds read as one; the decisions are provision/policy/production/transitions, the acts
acts.py, the operator's commands commands.py, the followers follow.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import statistics
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field, replace
from datetime import UTC
from typing import Any

from vastui.config import Config
from vastui.domain.delivery import Delivery
from vastui.domain.engine_state import EngineStatus
from vastui.domain.journal import Intent
from vastui.domain.plan import PARAMS_GB
from vastui.domain.reports import WorkerEvent, parse_stored_result
from vastui.domain.worker import ForeignInstance, InstanceRecord, Progress
from vastui.engine import (
    autoscale,
    bidding,
    delivery,
    demandshift,
    drain,
    identity,
    payment,
    policy,
    pool,
    production,
    provision,
    ranking,
    spend,
    transitions,
)
from vastui.engine.acts import (
    ONSTART,
    Acts,
    ActSettings,
    EngineError,
    IdentityCollision,
    NoCredit,
    worker_curio_env,
)
from vastui.engine.clock import SteadyClock
from vastui.engine.cluster import (
    ClusterAbsent,
    ClusterError,
    ClusterReader,
    ClusterView,
    Totals,
    orphans,
)
from vastui.engine.cluster import Row as ClusterRow
from vastui.engine.commands import Commands
from vastui.engine.crashpoints import crash_point
from vastui.engine.follow import Followers
from vastui.engine.labels import is_vastui_label, owner_of
from vastui.engine.monitor import Monitor, StepFacts
from vastui.engine.ranking import Levers, RankedOffer, rank_offers, to_record
from vastui.engine.spend import SURPLUS_KIND, fleet_spend, local_midnight, worker_cost_per_proof
from vastui.numbers import parse_number
from vastui.sanitize import sanitize_line
from vastui.ssh import SshError, SshPool
from vastui.store import Store, StoreError
from vastui.store.errors import StoreFatal
from vastui.vast.client import VastClient
from vastui.vast.errors import VastError
from vastui.vast.models import Instance

log = logging.getLogger("vastui.engine")

__all__ = ["ONSTART", "Engine", "EngineError", "EngineSettings", "worker_curio_env"]
# A rent intent whose create answer was lost is resolved by label; give Vast this long
# (engine clock seconds) to show the instance before calling the intent failed.
RENT_RECOVERY_GRACE = 600.0
# ... but a label missing from this many good instance lists, that long (engine clock) after the
# request went out, is a rent that did not happen: Vast lists an instance once it exists.
RENT_MISSES = 3
RENT_MISS_MIN_AGE = 60.0
# A recorded instance missing from Vast's answers is "unseen", not gone: Vast's lists lag
# (vast-api.md; SkyPilot and dstack both learned it). Gone only once this many steps in a row,
# this long (engine clock) from the first, found it neither in the list nor by its own GET;
# until then its slot stays taken. An instance costs nothing once it is really gone.
VANISH_MISSES = 3
VANISH_MIN_AGE = 300.0
PUBLISHED_OFFERS = 500  # ranked offers published for attached consoles
MAX_ORPHANS_SHOWN = 100  # orphan rows of curio's cluster published (their count is whole)
# A stop waits this long (real seconds) at most for the acts in flight (a rent, a destroy and
# its release, a stop into the warm pool: Acts.act) to be recorded before it cuts them short
# (their intents are finished by the next start): within the console's ENGINE_STOP_S (15 s)
# and systemd's TimeoutStopSec (30 s, deploy/vastui-engine.service).
ACTS_STOP_S = 10.0


@dataclass
class EngineSettings:
    poll_interval: float = 30.0  # real seconds between reconcile steps
    offers_refresh: float = 120.0  # real seconds between offer searches
    command_poll: float = 1.0  # real seconds between checks for console commands
    dry_run: bool = False
    worker_env: dict[str, str] = field(default_factory=dict)  # extra env for every worker
    prove_poll: float | None = None  # real seconds between counter reads (None: proving.poll_s)
    # curio's database password for the workers (a secret: not in repr); None: the file's
    curio_db_password: str | None = field(default=None, repr=False)


class Engine:
    def __init__(
        self,
        config: Config,
        store: Store,
        client: VastClient,
        *,
        ssh: SshPool | None,
        public_key: str | None,
        clock: Callable[[], float] | None = None,
        settings: EngineSettings | None = None,
        on_change: Callable[[str], Awaitable[None] | None] | None = None,
        monitor: Monitor | None = None,
        cluster: ClusterReader | None = None,
    ) -> None:
        self._config = config
        self.store = store
        self.client = client
        self.ssh = ssh
        self.public_key = public_key
        # the wall clock steps; deadlines must not (vastui/engine/clock.py)
        self.clock = clock if clock is not None else SteadyClock()
        self.settings = settings or EngineSettings()
        self.on_change = on_change
        self._lock = asyncio.Lock()  # one decision at a time: steps, events, commands
        # What decisions since a reconcile read the store changed (issue 32: the reconcile holds
        # the lock one worker at a time, so events are decided between): the workers a
        # follower's decision touched, and a count of decisions that may have touched any.
        self._touched: set[int] = set()
        self._epoch = 0
        self._offers: list[RankedOffer] = []
        self._foreign_seen: list[tuple[int, str, float]] | None = None  # as last written
        self._ssh_reached: dict[int, float] = {}  # proving worker -> last counters read (clock)
        # recorded instances missing from Vast's answers: vast id -> (first miss, misses)
        self._unseen: dict[int, tuple[float, int]] = {}
        self._offers_at: float | None = None  # monotonic
        self._offers_gen = 0  # bumped when the ranking goes stale (a measurement, a ban)
        self._stopping = False  # a stop was asked: nothing new is decided or sent
        self._stop_deadline: float | None = None  # monotonic: the acts in flight waited until
        self._rent_misses: dict[int, int] = {}  # sent rent intent → lists without its label
        self.halted = False  # stopped deciding: see `fatal`
        self.fatal: str | None = None  # why the engine stopped itself (store, lease), one line
        self.follow = Followers(
            ssh, store, on_event=self.handle_worker_event, on_counters=self.handle_counters,
            on_status=self.handle_worker_status,
            prove_poll=lambda: self.settings.prove_poll or self.config.proving.poll_s,
            on_crash=self._task_failed, clock=self.clock,
        )  # fmt: skip
        self.acts = Acts(
            config, store, client, clock=self.clock,
            settings=ActSettings(
                self.settings.dry_run, self.settings.worker_env, self.settings.curio_db_password
            ),
            public_key=public_key, stopping=lambda: self._stopping or self.halted,
            forget_worker=self.follow.stop, offers_changed=self._offers_changed,
        )  # fmt: skip
        # the operator's: carried out on the step, under the lock
        self.commands = Commands(
            store=store, acts=self.acts, client=client, clock=self.clock, fleet=self
        )
        self._wake = asyncio.Event()
        self.vast_seen_at: float | None = None  # wall time of the last good Vast list
        self.last_error: str | None = None
        self._cycle_error: str | None = None  # this step's Vast error, for the status
        self.status: EngineStatus | None = None  # what the last step published
        self.credit: float | None = None  # the account's, as last read (current user)
        self._credit_at: float | None = None  # engine clock of that read
        self.no_credit: str | None = None  # Vast's billing refusal of a rent, until credit
        self.monitor = monitor or Monitor(config)  # metrics and alerts: off unless asked
        # curio's cluster database (vastui/engine/cluster.py): None or disabled, not read
        self.cluster = cluster
        self.acts.cluster = cluster
        self.cluster_view: ClusterView | None = None  # its last good reading
        # the rows with this fleet's node name no record matches, at that reading (published)
        self.cluster_orphans: list[ClusterRow] = []
        self.cluster_error: str | None = None  # why it cannot be read now, one line
        self.cluster_error_since: float | None = None  # engine clock
        # the controller cut off from its workers (their tunnel to it down): one episode, an
        # event at its start and its end (the line and since when, engine clock)
        self.cut_off: str | None = None
        self.cut_off_since: float | None = None
        # every curio address of a band of runner ids taken (acts.RUNNER_ID_BAND), one line:
        # said once per episode; the next step's rent looks past them
        self.identity_collision: str | None = None
        # what curio's cluster counted over the window at its last good reading (the
        # headline's proofs, vastui/engine/delivery.py), and the headline last published
        self._cluster_count: delivery.ClusterCount | None = None
        self.delivery: Delivery | None = None
        self._cluster_probed = False
        self._cluster_fresh = False  # this step read curio's cluster
        # the automatic target's state (fleet.target_workers = "auto"), None until decided
        self.auto: autoscale.State | None = None
        self._auto_observed: autoscale.Observed | None = None
        # the market's demand as levels (issue 43): fed from curio's request task's runs at
        # each cluster read, rebuilt from DEMAND_HISTORY_S of them after a restart
        self.demand = demandshift.Watch()
        self._fleet_dph = 0.0
        # when a verdict of curio's failures waiting for a reading of cuzk was first seen
        # (production.waits_for_cuzk), per instance, engine clock
        self._curio_waits: dict[int, float] = {}

    @property
    def config(self) -> Config:
        return self._config

    @config.setter
    def config(self, config: Config) -> None:
        """One configuration for the engine and what acts for it (a reload, a test's change)."""
        self._config = config
        self.acts.config = config

    # -- lifecycle -------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Step until ``stop`` is set or the engine halts. A stop ends the step in progress: it
        stops deciding at once (nothing new is rented, destroyed or released after it was
        asked), waits at most ACTS_STOP_S for the acts in flight to be recorded, then cancels
        what is left of the step (a Retry-After wait, a slow answer). An act cut short is an
        intent the next start finishes."""
        await self._guard(self.store.check_health())
        if not self.halted:
            await self._guard(self.store.commands.requeue_running())
        commands = asyncio.create_task(self._command_poller(stop), name="engine-commands")
        stopped = asyncio.ensure_future(stop.wait())
        step: asyncio.Future[None] | None = None
        try:
            while not stop.is_set() and not self.halted:
                self._wake.clear()
                step = asyncio.ensure_future(self.step())
                await asyncio.wait([step, stopped], return_when=asyncio.FIRST_COMPLETED)
                if not step.done():
                    self._stopping = True
                    await self.finish_acts()
                    break
                step.result()
                waits = [stopped, asyncio.ensure_future(self._wake.wait())]
                await asyncio.wait(
                    waits, timeout=self.settings.poll_interval, return_when=asyncio.FIRST_COMPLETED
                )
                waits[1].cancel()
        finally:
            self._stopping = True
            if step is not None and not step.done():
                step.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await step
            stopped.cancel()
            commands.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await commands

    async def finish_acts(self) -> None:
        """A stop: let the acts in flight (the step's, a follower's) be recorded, within
        ACTS_STOP_S in all from the first call; say what was waited for and what was cut."""
        self._stopping = True
        waiting = self.acts.in_flight()
        if not waiting:
            return
        if self._stop_deadline is None:
            self._stop_deadline = time.monotonic() + ACTS_STOP_S
        log.info("stopping: waiting for %d act(s) in flight to be recorded: %s",
                 len(waiting), "; ".join(waiting))  # fmt: skip
        left = await self.acts.settle(self._stop_deadline - time.monotonic())
        if left:
            log.warning(
                "stopping: %d act(s) still in flight after %.0f s, cut short (their intents are "
                "finished by the next start): %s", len(left), ACTS_STOP_S, "; ".join(left),
            )  # fmt: skip
        else:
            log.info("stopping: the act(s) in flight are recorded")

    @contextlib.asynccontextmanager
    async def _deciding(self, vast_id: int | None = None) -> AsyncIterator[None]:
        """The engine's lock for one decision, noting what it may have changed for a reconcile
        in progress: one worker (a follower's event, reading, status) or any (``None``)."""
        async with self._lock:
            try:
                yield
            finally:
                if vast_id is None:
                    self._epoch += 1
                else:
                    self._touched.add(vast_id)

    async def _guard(self, work: Awaitable[Any]) -> None:
        """Run store work outside a step: a fatal store error stops the engine."""
        try:
            await work
        except StoreFatal as exc:
            self.stop_fatal(str(exc))

    def wake(self) -> None:
        """Run the next step now (a command arrived, the operator pressed refresh)."""
        self._wake.set()

    async def _command_poller(self, stop: asyncio.Event) -> None:
        """Console commands reach a headless engine within a second, not a poll interval."""
        while not stop.is_set():
            await asyncio.sleep(self.settings.command_poll)
            try:
                if await self.store.commands.has_pending():
                    self.wake()
            except StoreFatal as exc:
                self.stop_fatal(str(exc))
                return
            except StoreError as exc:
                log.warning("command poll: %s", exc)

    async def close(self) -> None:
        """The engine's end, before its store closes: it stops deciding, the acts in flight
        (a follower's too) are recorded (bounded, ``finish_acts``), then every follower ends;
        nothing of the engine writes after this returns."""
        self._stopping = True
        await self.finish_acts()
        await self.follow.close()

    def stop_fatal(self, why: str) -> None:
        """The engine cannot do its job: stop deciding at once and say why, once."""
        if not self.halted:
            log.error("engine stopped: %s", why)
            self.fatal = why
            self.monitor.stopped(why, self.clock())
        self.halted = True
        self.last_error = self.fatal or why
        self.wake()

    def _task_failed(self, exc: BaseException) -> None:
        """A follower's unexpected error: a dead store stops the engine, anything else is a
        bug that must not leave the fleet unmanaged (logged; the next step re-follows)."""
        if isinstance(exc, StoreFatal):
            self.stop_fatal(str(exc))
        else:
            log.error("worker follower failed", exc_info=exc)

    def _offers_changed(self, dropped: int | None) -> None:
        """Re-rank before the next rent (a measurement, a ban); or drop an offer that failed."""
        if dropped is None:
            self._offers_at = None
            self._offers_gen += 1
        else:
            self._offers = [r for r in self._offers if r.offer.id != dropped]

    async def step(self) -> None:
        """One observe → decide → act pass, then the status. Errors are logged, never fatal."""
        if self.halted:
            return
        self._cycle_error = None
        try:
            await self.store.check_health()  # deleted or replaced under us: stop, not limp
            await self.run_commands()
            # Vast's list (paced pages: seconds for a big fleet) is read without the lock, so
            # worker events are decided meanwhile; the reconcile then reads the store afresh.
            await self.acts.load_identity()
            await self._read_credit()
            observed_at = self.clock()
            vast = await self._observe_vast()
            if vast is not None:
                await self._reconcile(vast, observed_at)
        except Exception as exc:
            self._step_failed(exc)
        # curio's cluster after Vast: drains end, destroyed workers' tasks are freed, curio's
        # count of each worker's proofs is judged (a failure here holds up nothing else).
        if not self.halted:
            try:
                await self._observe_cluster()
            except Exception as exc:
                self._step_failed(exc)
        # Even after a failed observation: the status must say why nothing is rented.
        if not self.halted:
            try:
                await self._provision()
            except Exception as exc:
                self._step_failed(exc)
        if not self.halted:  # a halt's reason outlives the step it interrupted
            self.last_error = self._cycle_error or self.acts.last_error
            self.acts.last_error = None
            try:
                if self.status is not None:
                    await self.monitor.after_step(self.store, self._step_facts(self.status))
            except Exception as exc:  # metrics and alerts only observe: never the fleet's end
                if isinstance(exc, StoreFatal):
                    self.stop_fatal(str(exc))
                else:
                    log.warning("metrics/alerts: %s", sanitize_line(str(exc), 300))
        crash_point("step.end")
        await self._notify("step")

    def _step_failed(self, exc: Exception) -> None:
        if isinstance(exc, StoreFatal):
            self.stop_fatal(str(exc))
        elif isinstance(exc, VastError | StoreError | SshError):
            self._cycle_error = sanitize_line(str(exc), 300)
            log.warning("engine step: %s", self._cycle_error)
        else:  # a bug must not leave the fleet unmanaged: log, go on
            self._cycle_error = sanitize_line(f"{type(exc).__name__}: {exc}", 300)
            log.exception("engine step failed")

    async def _notify(self, what: str) -> None:
        if self.on_change is not None:
            result = self.on_change(what)
            if asyncio.iscoroutine(result):
                await result

    # -- commands (console, CLI) ----------------------------------------------------------

    async def run_commands(self) -> None:
        """The operator's commands waiting in the store, carried out under the lock: the
        console's and the CLI's only way in (each step starts with it)."""
        async with self._deciding():
            await self.commands.run_pending()

    # -- observe ------------------------------------------------------------------------

    async def _read_credit(self) -> None:
        """The account's credit, every ``vast.credit_poll_s`` (and at once while a billing
        refusal holds rents back, so credit added ends it within one step)."""
        now = self.clock()
        due = self._credit_at is None or now - self._credit_at >= self.config.vast.credit_poll_s
        if not (due or self.no_credit):
            return
        try:
            user = await self.client.current_user()
        except VastError as exc:  # the credit is information: a failed read decides nothing
            log.info("credit not read: %s", exc)
            return
        self._credit_at = now
        self.credit = user.credit
        if self.no_credit and user.credit is not None and user.credit > 0:
            log.info("account credit $%.2f: renting again", user.credit)
            self.no_credit = None

    async def _observe_vast(self) -> dict[int, Instance] | None:
        try:
            listed = await self.client.list_instances()
        except VastError as exc:
            self.last_error = self._cycle_error = sanitize_line(str(exc), 300)
            log.warning("cannot list instances: %s", self.last_error)
            return None
        self.vast_seen_at = time.time()
        return {inst.id: inst for inst in listed}

    async def _reconcile(self, vast: dict[int, Instance], observed_at: float) -> None:
        """Reconcile the store with Vast's list, read at ``observed_at`` (engine clock): what
        the engine did after that (a kill on an event, a rent by hand) the list cannot show.

        The engine's lock is held for the fleet-wide part, then for one worker at a time: a
        worker's event waits for one worker's reconcile, not a thousand (issue 32). A worker a
        decision touched meanwhile is read again before it is judged. What the list changed
        on workers that need nothing else is written at the end, in one transaction."""
        async with self._lock:
            now = self.clock()
            known, bad = await self._reconcile_fleet(vast, observed_at, now)
            self._touched.clear()
            epoch = self._epoch
        observed: dict[int, Progress] = {}
        try:
            for rec in known:
                async with self._lock:
                    if self._epoch != epoch or rec.vast_id in self._touched:
                        fresh = await self.store.instances.get(rec.vast_id)
                        if fresh is None or fresh.killed:
                            continue
                        rec = fresh
                    await self._isolated(
                        rec.vast_id, self._reconcile_one(rec, vast, bad, now, observed)
                    )
        finally:
            if observed:
                async with self._lock:
                    await self.store.instances.update_observed(observed.items())

    async def _reconcile_fleet(
        self, vast: dict[int, Instance], observed_at: float, now: float
    ) -> tuple[list[InstanceRecord], dict[int, str]]:
        """The fleet-wide part, under the lock: intents, adoptions, destroys that did not take,
        other controllers' instances. Returns the live workers to reconcile and the bad list."""
        by_label = {inst.label: inst for inst in vast.values() if inst.label}
        # A rent by hand while the list was read is done (or, its answer lost, one miss of the
        # RENT_MISSES it takes to give up on it) by now: intents need no guard.
        await self._recover_intents(by_label, now)
        known = {rec.vast_id: rec for rec in await self.store.instances.all()}
        foreign: list[ForeignInstance] = []
        for inst in vast.values():
            if not is_vastui_label(inst.label) or inst.label in self.acts.inflight_labels:
                continue
            rec = known.get(inst.id)
            if rec is None:
                # Adopted only if this database intended it (a crash lost the row, or a rent
                # given up on came up late). A vastui label alone is another controller's
                # instance on the same account: destroying it as surplus starts a war.
                if self.acts.ours(inst.label) and await self.store.intents.intended(
                    inst.label or ""
                ):
                    adopted = await self._isolated(inst.id, self._adopt(inst, now))
                    if adopted is not None:
                        known[inst.id] = adopted
                else:
                    foreign.append(_foreign(inst))
            elif rec.killed and rec.source == "vastui" and (rec.killed_at or 0.0) <= observed_at:
                if rec.kill_kind == "vanished":  # never destroyed: Vast's answers lagged
                    revived = await self._isolated(inst.id, self.store.revive_vanished(
                        inst.id, now=now))  # fmt: skip
                    if revived is not None:
                        log.warning("instance %s is listed again after it was recorded "
                                    "vanished: adopted back", inst.id)  # fmt: skip
                        known[inst.id] = revived
                else:
                    await self.acts.destroy_again(rec)  # (not one killed since the list was read)
        await self._note_foreign(foreign, now)
        bad = {e.machine_id: e.reason or "" for e in await self.store.badlist.all(now=now)}
        # misses of instances no longer live (destroyed meanwhile) are forgotten
        live = {r.vast_id for r in known.values() if not r.killed}
        self._unseen = {k: v for k, v in self._unseen.items() if k in live}
        return [r for r in known.values() if not r.killed and r.source == "vastui"], bad

    async def _note_foreign(self, foreign: list[ForeignInstance], now: float) -> None:
        """Keep the other controllers' instances as last listed, and warn once per fleet. Written
        only when the list changed: not a transaction at every step for the same rows."""
        seen = sorted((f.vast_id, f.vast_status or "", f.dph_total or 0.0) for f in foreign)
        if seen == self._foreign_seen:
            return
        new_owners = await self.store.put_foreign(foreign, now=now)
        self._foreign_seen = seen  # (only once written: a failed write is tried again)
        for owner in new_owners:
            theirs = sorted(f.vast_id for f in foreign if f.owner == owner)
            text = (
                f"{len(theirs)} instance(s) of another controller on this account (fleet "
                f"{owner}: {', '.join(map(str, theirs[:5]))}{' ...' if len(theirs) > 5 else ''}):"
                " this database never rented them; they are not adopted, counted or destroyed"
            )
            if owner.split(".")[0] == self.config.fleet.name:
                # runner ids are counted per database: the same curio identities on both sides
                text += (
                    "; it has this fleet's name: if both fleets' workers join one curio cluster,"
                    " give them different curio.listen_port_base ranges"
                )
            log.warning("%s", text)
            await self.store.events.add("foreign", text, now=now)

    async def _isolated(self, vast_id: int, work: Awaitable[Any]) -> Any:
        """One instance's trouble (a row the store refuses, a Vast error on its show) must not
        keep the others from their deadlines: log it and go on. A dead store still stops all."""
        try:
            return await work
        except StoreFatal:
            raise
        except (StoreError, VastError, ValueError) as exc:
            self._cycle_error = sanitize_line(f"instance {vast_id}: {exc}", 300)
            log.warning("%s", self._cycle_error)
            return None

    async def _reconcile_one(
        self,
        rec: InstanceRecord,
        vast: dict[int, Instance],
        bad: dict[int, str],
        now: float,
        observed: dict[int, Progress],
    ) -> None:
        """One worker against its listing. What the listing changed of it alone (its status,
        price, endpoint, when it was seen) goes into ``observed``, written after the whole
        reconcile; it is written first, here, if the worker is acted on."""
        inst = vast.get(rec.vast_id)
        if inst is None:
            # One list that misses a row is not proof: ask for the instance itself, and even
            # a null from that is evidence, not the truth, until the misses add up.
            if await self.client.show_instance(rec.vast_id) is None:
                await self._unseen_once(rec, now)
            else:
                self._seen(rec.vast_id)
            return
        self._seen(rec.vast_id)
        rec = await self._refresh(rec, inst, now, observed)
        if rec.pooled_since is not None:
            await self._write_observed(rec.vast_id, observed)
            await self._pooled(rec, inst, now)
            return
        if rec.outbid_since is not None:
            await self._write_observed(rec.vast_id, observed)
            if await self._outbid(rec, inst, now):
                return
        if rec.is_bid and inst.is_running:
            lower = bidding.lower(rec, inst.min_bid, self.config.bids)
            if lower is not None:
                await self._write_observed(rec.vast_id, observed)
                await self._rebid(rec, lower, inst, now)
        bad_reason = bad.get(rec.machine_id) if rec.machine_id is not None else None
        kill = policy.reconcile_kill(rec, now, self.config, bad_reason)
        if kill is not None:
            await self._write_observed(rec.vast_id, observed)
            await self.acts.kill(rec, kill)
            return
        self.follow.ensure(rec)

    async def _write_observed(self, vast_id: int, observed: dict[int, Progress]) -> None:
        """Write what the listing changed of a worker now, before it is acted on."""
        fields = observed.pop(vast_id, None)
        if fields:
            await self.store.instances.update(vast_id, **fields)

    async def _pooled(self, rec: InstanceRecord, inst: Instance, now: float) -> None:
        """A worker in the warm pool: its queued start went ahead (Vast runs it), or it is
        destroyed (kept too long, its start queued too long, the pool over its size). Only a
        start asked for is one: a list read before the stop still shows it running."""
        if (
            rec.pool_start_at is not None
            and inst.intended_status == "running"
            and inst.actual_status in ("loading", "running")
        ):
            await self.acts.resume_pooled(rec, now)
            return
        pooled = pool.ranked(
            [r for r in await self.store.instances.all(include_killed=False) if r.pooled_since]
        )
        rank = next((i for i, r in enumerate(pooled) if r.vast_id == rec.vast_id), 0)
        kill = pool.expired(rec, now, rank, self.config)
        if kill is not None:
            await self.acts.kill(rec, kill)

    async def _start_from_pool(self, view: provision.FleetView) -> bool:
        """Below the target, with renting allowed: start a pooled worker before renting (one
        per step). True when one was started or its start queued."""
        if self.settings.dry_run or self._stopping or self.halted:
            return False
        if provision.gate(view) is not None:
            return False
        live = await self.store.instances.all(include_killed=False)
        rec = pool.pick([r for r in live if r.source == "vastui"])
        if rec is None or view.dph_in_use + (rec.dph_total or 0.0) > view.max_total_dph:
            return False
        await self.acts.start_pooled(rec)
        return True

    async def _outbid(self, rec: InstanceRecord, inst: Instance, now: float) -> bool:
        """A worker stopped by a higher bid: raise the bid, wait, or let it go (the outbid
        policy, vastui/engine/bidding.py). True when nothing else is to be judged now."""
        act = bidding.on_outbid(rec, inst.min_bid, now, self.config.bids)
        if isinstance(act, bidding.RaiseBid):
            await self._rebid(rec, act, inst, now)
        elif isinstance(act, policy.Kill):  # the market's doing: no strike, no ban
            await self.acts.kill(rec, act)
        return True

    async def _rebid(
        self, rec: InstanceRecord, act: bidding.RaiseBid | None, inst: Instance, now: float
    ) -> None:
        """Change the instance's bid on Vast, then in the record (a refused change is
        logged: the next look tries again)."""
        if act is None or self._stopping or self.halted:
            return
        with self.acts.act(f"bid change of instance {rec.vast_id}"):
            try:
                await self.client.change_bid(rec.vast_id, act.price)
            except VastError as exc:
                log.warning("instance %s: changing its bid failed: %s", rec.vast_id, exc)
                return
            storage = rec.storage_dph or 0.0
            await self.store.instances.update(
                rec.vast_id, bid_price=act.price, dph_total=round(act.price + storage, 6)
            )
            what = "raised" if act.price > (rec.bid_price or 0.0) else "lowered"
            await self.store.events.add(
                "bid",
                f"bid {what} ${rec.bid_price or 0:.4f} -> ${act.price:.4f}/h (going "
                f"${inst.min_bid or 0:.4f}/h, cap ${rec.bid_cap or 0:.4f}/h)",
                instance_id=rec.vast_id, machine_id=rec.machine_id, now=now,
            )  # fmt: skip

    async def _refresh(
        self, rec: InstanceRecord, inst: Instance, now: float, observed: dict[int, Progress]
    ) -> InstanceRecord:
        """The record with what Vast's listing says of the instance. A change of the listing's
        own fields alone is put in ``observed`` (the record returned has it); one that moves
        the worker (a stage, its running or unhealthy time, a bid's state) is written now."""
        status = inst.actual_status
        endpoint = inst.ssh_endpoint()
        fields: Progress = {
            "vast_status": status,
            # What Vast bills, storage included: the offer's search price may differ.
            "dph_total": inst.dph_total if inst.dph_total is not None else rec.dph_total,
            "status_msg": sanitize_line(inst.status_msg, 300) if inst.status_msg else None,
            "last_seen_at": now,
        }
        if endpoint is not None:
            fields["ssh_host"], fields["ssh_port"] = endpoint
        if rec.running_at is None and inst.is_running:
            fields["running_at"] = spend.running_since(rec, inst.uptime_mins, now)
        # A bid stopped by a higher one is not unhealthy: the outbid policy decides on it.
        outbid = rec.is_bid and inst.outbid
        if status in policy.UNHEALTHY and not outbid and rec.pooled_since is None:
            fields["unhealthy_since"] = rec.unhealthy_since or now
        elif rec.unhealthy_since is not None:
            fields["unhealthy_since"] = None
        change = bidding.observe(rec, outbid, status, now)
        if change is not None:
            fields.update(change.fields)
        if change is not None and change.stage is not None:
            # the stage with the fields that call for it: never resumed yet still proving; its
            # work so far carried (curio's count starts again with its next proving stage)
            fields.update(spend.carried_work(rec))
            rec = await self.store.instances.set_stage(rec.vast_id, change.stage, now, **fields)
        elif _only_seen(rec, fields, now):
            pass
        elif _observed_only(rec, fields) and not _starts_setup(rec, status, endpoint):
            observed[rec.vast_id] = fields
            rec = replace(rec, **fields)
        else:
            rec = await self.store.instances.update(rec.vast_id, **fields)
        if change is not None:
            await self.store.events.add(
                "bid", change.note, instance_id=rec.vast_id, machine_id=rec.machine_id, now=now
            )
            log.info("instance %s: %s", rec.vast_id, change.note)
        if _starts_setup(rec, status, endpoint):
            rec = await self.store.instances.set_stage(rec.vast_id, "setup", now=now)
            log.info("instance %s running on machine %s: setup", rec.vast_id, rec.machine_id)
        return rec

    async def _adopt(self, inst: Instance, now: float) -> InstanceRecord:
        # Its identity in curio's cluster was fixed at its create (its environment): recorded as
        # it is, unless another instance holds it (then it is one curio machine with that one).
        env = inst.env  # decoded once, here (vast/models.py Instance.env)
        runner_id = identity.parse_runner_id(env.get("VASTUI_RUNNER_ID"))
        if runner_id is not None:
            holders = [r for r in await self.store.instances.all() if r.runner_id == runner_id]
            if holders:
                log.warning(
                    "instance %s carries runner id %s, which instance %s holds: its curio is the "
                    "same machine as that one's", inst.id, runner_id, holders[0].vast_id,
                )  # fmt: skip
                runner_id = None
            else:
                await self.store.instances.note_runner_id(runner_id)
        rec = InstanceRecord(
            vast_id=inst.id,
            label=inst.label,
            machine_id=inst.machine_id,
            host_id=inst.host_id,
            gpu_name=inst.gpu_name,
            num_gpus=inst.num_gpus,
            dph_total=inst.dph_total,
            cpu_ram_gb=inst.cpu_ram_gb,
            geolocation=inst.geolocation,
            image=inst.image,
            state="loading",
            min_rate=_float(env.get("MIN_RATE")),
            created_at=inst.start_date or now,
            loading_at=now,
            runner_id=runner_id,
            paramfetch_timeout=_seconds(env.get("PARAMFETCH_TIMEOUT")),
        )
        rec = await self.store.instances.upsert(rec, now=now)
        await self.store.events.add(
            "adopt",
            f"adopted labelled instance {inst.label} found on Vast",
            instance_id=inst.id,
            machine_id=inst.machine_id,
            now=now,
        )
        log.info("adopted instance %s (%s)", inst.id, inst.label)
        return rec

    async def _unseen_once(self, rec: InstanceRecord, now: float) -> None:
        """One more step that found the instance neither listed nor by its GET: gone once the
        misses are VANISH_MISSES in a row over VANISH_MIN_AGE (engine clock)."""
        first, misses = self._unseen.get(rec.vast_id, (now, 0))
        misses += 1
        self._unseen[rec.vast_id] = (first, misses)
        if misses >= VANISH_MISSES and now - first >= VANISH_MIN_AGE:
            self._unseen.pop(rec.vast_id, None)
            await self._vanished(rec, now)
        elif misses == 1:
            log.info("instance %s not in Vast's answers; gone only if it stays unseen for %d "
                     "steps and %.0f s", rec.vast_id, VANISH_MISSES, VANISH_MIN_AGE)  # fmt: skip

    def _seen(self, vast_id: int) -> None:
        if self._unseen.pop(vast_id, None) is not None:
            log.info("instance %s is listed again", vast_id)

    async def _vanished(self, rec: InstanceRecord, now: float) -> None:
        await self.follow.stop(rec.vast_id)
        await self.store.mark_killed(
            rec.vast_id, "vanished", "instance disappeared from vast", event="kill", now=now
        )

    async def _recover_intents(self, by_label: dict[str, Instance], now: float) -> None:
        for intent in await self.store.intents.all(status="pending"):
            if intent.kind == "destroy" and intent.instance_id is not None:
                rec = await self.store.instances.get(intent.instance_id)
                kill = policy.Kill.from_detail(intent.reason, intent.detail)
                if rec is None or rec.killed:  # destroyed before a crash: complete it
                    await self.acts.finish_recovered_destroy(rec, kill, intent)
                else:
                    await self.acts.kill(rec, kill, intent=intent)
            elif intent.kind == "rent" and intent.label:
                if intent.label in self.acts.inflight_labels:
                    continue
                inst = by_label.get(intent.label)
                if inst is not None:
                    if await self.store.instances.get(inst.id) is None:
                        rec = await self.acts.record_rent(intent.detail, inst.id, intent.label, now)
                        log.info("rent intent %s resolved by label: %s", intent.id, rec.vast_id)
                    await self.store.intents.finish(intent.id, "done", instance_id=inst.id, now=now)
                elif not intent.sent:  # its engine died before the request went out
                    await self.store.intents.finish(
                        intent.id, "failed", note="never sent: the engine stopped first", now=now
                    )
                    log.info("rent intent %s was never sent; its slot is free", intent.id)
                else:
                    await self._rent_not_listed(intent, now)

    async def _rent_not_listed(self, intent: Intent, now: float) -> None:
        """A sent rent whose label the instance list does not show. Vast lists an instance as
        soon as it is created, so after RENT_MISSES good lists (and RENT_MISS_MIN_AGE) the rent
        did not happen (a 5xx that did nothing): its slot is freed. Should it appear after all,
        it is adopted by its label (and, above the target, destroyed as surplus)."""
        misses = self._rent_misses.get(intent.id, 0) + 1
        self._rent_misses[intent.id] = misses
        age = now - intent.updated_at
        if (misses >= RENT_MISSES and age >= RENT_MISS_MIN_AGE) or (
            now - intent.created_at > RENT_RECOVERY_GRACE
        ):
            self._rent_misses.pop(intent.id, None)
            await self.store.intents.finish(
                intent.id, "failed",
                note=f"no instance with its label in {misses} instance lists", now=now,
            )  # fmt: skip
            log.info("rent intent %s: no instance with its label appeared; its slot is free",
                     intent.id)  # fmt: skip

    # -- curio's cluster -------------------------------------------------------------------

    async def _observe_cluster(self) -> None:
        """Read curio's cluster for the fleet's proving workers (outside the lock: a network
        read), then, under it, record each worker's reading, judge curio's count of its proofs
        (``production.curio_verdict``), end the drains that are over and free the tasks of the
        workers destroyed (or outbid) whose release is due."""
        reader = self.cluster
        self._cluster_fresh = False
        if reader is None or not await self._probe_cluster(reader):
            return
        now = self.clock()
        records = [
            r for r in await self.store.instances.all(include_killed=False)
            if r.source == "vastui"
        ]  # fmt: skip
        window = self.config.proving.window_min * 60.0
        workers = [
            w for r in records
            if r.state == "proving" and (w := self.acts.cluster_worker(r, now)) is not None
        ]  # fmt: skip
        # workers destroyed within the window count in the fleet's proofs (not judged again)
        every = await self.store.instances.all(include_killed=True)
        killed = [
            r for r in every
            if r.killed and r.source == "vastui" and r.proving_at is not None
            and (r.killed_at or 0.0) >= now - window
        ]  # fmt: skip
        gone = [w for r in killed if (w := self.acts.cluster_worker(r, now)) is not None]
        # ... and those not read (alive but not proving; destroyed earlier, their release owed)
        # may still have a row: theirs, not an orphan (cluster.orphans)
        read_ids = {r.vast_id for r in killed}
        unread = [
            w for r in every
            if r.source == "vastui" and r.vast_id not in read_ids
            and ((not r.killed and r.state != "proving") or (r.killed and drain.release_owed(r)))
            and (w := self.acts.cluster_worker(r, now)) is not None
        ]  # fmt: skip
        view: ClusterView | None = None
        try:
            deadline = self.config.proving.market_deadline_min * 60.0
            read = await reader.read([*workers, *gone], now, window, deadline)
            last = self.demand.last_end
            since = now - DEMAND_HISTORY_S if last is None else max(last, now - DEMAND_HISTORY_S)
            self.demand.feed(await reader.request_runs(since, now))
            fleet = identity.node_prefixes(self.config.fleet.name, await self.acts.load_identity())
            named = await reader.named_rows(*fleet)
        except ClusterError as exc:
            await self._cluster_unreadable(str(exc), now)
        else:
            await self._cluster_readable(now)
            self.cluster_view = view = read
            self.cluster_orphans = orphans(named, read, unread)
            self._cluster_fresh = True
            self._cluster_count = delivery.ClusterCount(
                fleet_done=sum(state.done for state in read.workers.values()),
                cluster_done=read.totals.cluster_done, paid=read.totals.paid_recent,
                challenges=read.totals.challenges,
            )  # fmt: skip
        async with self._deciding():
            if view is not None:
                for vast_id, state in view.workers.items():
                    await self._isolated(vast_id, self._note_cluster(vast_id, state, now))
                await self._payment_path(view.totals, now)
            await self._end_drains()
            await self._release_due()

    async def _payment_path(self, totals: Totals, now: float) -> None:
        """Pause provisioning while curio's signatures are refused (vastui/engine/payment.py),
        lift the pause once one goes through again. No machine is struck for it."""
        signing = payment.Signing(
            totals.sign_refused, totals.sign_error, totals.sign_refused_at, totals.signed_at
        )
        active = await self.store.meta.fleet_failure()
        if active is not None:
            since = active.get("since")
            ours = active.get("signature") == payment.SIGNATURE
            if ours and isinstance(since, int | float) and payment.mended(signing, float(since)):
                why = "curio's signatures go through the Lotus API again"
                if await self.store.clear_fleet_failure(why, now=now):
                    log.info("payment path mended: %s; provisioning resumes", why)
            return
        line = payment.broken(signing)
        if line is None:
            return
        value = {
            "signature": payment.SIGNATURE, "text": line, "since": now, "machines": [],
            "instances": [], "until": "until curio's signatures go through or `vastui resume`",
        }  # fmt: skip
        await self.store.declare_fleet_failure(
            value, forgive_machines=[], forgive_instances=[], since=now, now=now
        )
        log.error("provisioning paused: %s", line)

    async def _probe_cluster(self, reader: ClusterReader) -> bool:
        """Whether curio's cluster is read this step. Off is only for a fleet with no cluster:
        none configured (``ClusterReader.configured``) and none its workers joined; then the
        first step's look finding nothing at the default address turns the reader off with one
        line. A configured cluster that refuses or cannot be reached is an outage, at start as
        mid-run: the step's reading says so (the error state, its event and its alert) and the
        next step tries again, so whatever it owes (releases, drains) is done once it answers."""
        if not reader.enabled:
            if not await self._cluster_used():
                return False
            reader.enabled = True  # a worker joined a cluster there since the first look
            log.info("a worker joined curio's cluster at %s: the cluster reader is on",
                     reader.address)  # fmt: skip
            return True
        if self._cluster_probed:
            return True
        self._cluster_probed = True
        if reader.configured or await self._cluster_used():
            log.info("reading curio's cluster at %s", reader.address)
            return True
        try:
            await reader.probe()
        except ClusterAbsent as exc:
            reader.enabled = False
            log.warning(
                "%s: the cluster reader is off (no curio cluster configured; workers are judged "
                "by cuzk alone; no drain before a destroy, no release after; name it in the "
                "config ([ssh] curio_db) to read it)", exc,
            )  # fmt: skip
            return False
        except ClusterError as exc:
            log.warning("%s: shown, alerted and tried again", exc)
            return True
        log.info("reading curio's cluster at %s", reader.address)
        return True

    async def _cluster_used(self) -> bool:
        """This database's workers joined curio's cluster (one reported its curio machine, or
        was read there): the cluster exists, whatever the config says, and what it owes them
        (their releases) is owed across restarts."""
        return any(
            r.runner_id is not None and (r.curio_info is not None or r.cluster_checked_at)
            for r in await self.store.instances.all(include_killed=True)
        )

    async def _note_cluster(self, vast_id: int, state: Any, now: float) -> None:
        rec = await self.store.instances.get(vast_id)
        if rec is None or rec.killed:
            self._curio_waits.pop(vast_id, None)
            return
        rec = await self.store.instances.update(
            vast_id, cluster_state=json.dumps(state.to_json()), cluster_checked_at=now
        )
        if rec.state != "proving" or rec.stopped_since is not None or rec.drain_started_at:
            return
        window = self.config.proving.window_min * 60.0
        prod = production.ProdState.from_json(rec.prod_state)
        cuzk = production.measure(prod, now, window)
        kill = production.curio_verdict(state.to_json(), cuzk.completed, self.config)
        if kill is None:
            self._curio_waits.pop(vast_id, None)
            return
        seen = self._curio_waits.setdefault(vast_id, now)
        if production.waits_for_cuzk(kill, prod, seen):
            return
        self._curio_waits.pop(vast_id, None)
        log.warning("instance %s: %s", vast_id, kill.reason)
        await self.acts.kill(rec, kill)

    async def _end_drains(self) -> None:
        """Each drain's destroy intent, carried on: destroyed once it is over (drain.py)."""
        for intent in await self.store.intents.all(status="pending", kind="destroy"):
            if intent.instance_id is None or not isinstance(intent.detail.get("drain"), dict):
                continue
            rec = await self.store.instances.get(intent.instance_id)
            if rec is None or rec.killed:
                continue
            kill = policy.Kill.from_detail(intent.reason, intent.detail)
            await self._isolated(rec.vast_id, self.acts.kill(rec, kill, intent=intent))

    async def _release_due(self) -> None:
        """Free the tasks of destroyed workers not freed yet (the cluster could not be read at
        their destroy, or the instance vanished), and of workers outbid since their last
        release."""
        for rec in await self.store.instances.all(include_killed=True):
            if self._stopping or self.halted:
                return  # owed still: the next start releases them
            if rec.source != "vastui" or rec.proving_at is None or rec.runner_id is None:
                continue
            if rec.killed and drain.release_owed(rec):
                await self._isolated(rec.vast_id, self.acts.release(rec))
            elif (
                not rec.killed
                and rec.outbid_since is not None
                and (rec.released_at is None or rec.released_at < rec.outbid_since)
            ):
                await self._isolated(rec.vast_id, self.acts.release(rec, outbid=True))
            elif (
                not rec.killed
                and rec.pooled_since is not None
                and (rec.released_at is None or rec.released_at < rec.pooled_since)
            ):
                await self._isolated(
                    rec.vast_id, self.acts.release(rec, why="stopped into the warm pool")
                )

    async def _cluster_unreadable(self, why: str, now: float) -> None:
        if self.cluster_error is None:
            self.cluster_error_since = now
            log.warning("curio's cluster cannot be read: %s (no worker is destroyed for it)", why)
            await self.store.events.add(
                "cluster", f"curio's cluster cannot be read: {why}", now=now
            )
        self.cluster_error = why

    async def _cluster_readable(self, now: float) -> None:
        if self.cluster_error is not None:
            log.info("curio's cluster is readable again")
            await self.store.events.add("cluster", "curio's cluster is readable again", now=now)
        self.cluster_error = None
        self.cluster_error_since = None

    async def _check_prove_identity(self, rec: InstanceRecord, now: float) -> None:
        """A worker that passed its benchmark is about to start curio: its identity must not be
        another live machine's (another fleet or node took the address since its rent). Then
        it goes before curio joins as that machine, with no strike: the fleet's fault. Renting
        goes on: the next rent skips the taken address (Acts._new_runner_id)."""
        worker = self.acts.cluster_worker(rec, now)
        reader = self.cluster
        if worker is None or reader is None or not reader.enabled:
            return
        try:
            line = await reader.identity_in_use(worker, now)
        except ClusterError as exc:
            log.info("instance %s: curio identity not checked: %s", rec.vast_id, exc)
            return
        if line is None:
            return
        log.error("instance %s: %s", rec.vast_id, line)
        await self.store.events.add("cluster", line, instance_id=rec.vast_id, now=now)
        await self.acts.kill(rec, policy.Kill("identity_collision", line, "proving"))

    def _cluster_status(self, view: provision.FleetView) -> dict[str, Any] | None:
        summary = self.cluster_summary()
        if summary is not None:
            summary["draining"] = view.draining
            auto = self.auto_summary()
            if auto is not None:
                auto["pooled"] = view.pooled
                auto["pool_max"] = self.config.fleet.warm_pool_max
                summary["autoscale"] = auto
        return summary

    def cluster_summary(self) -> dict[str, Any] | None:
        """The reader's state and the totals of its last reading, for the status row."""
        reader = self.cluster
        if reader is None:
            return None
        if not reader.enabled:
            return {"state": "off", "address": reader.address}
        out: dict[str, Any] = {
            "state": "error" if self.cluster_error else "ok",
            "address": reader.address,
            "error": self.cluster_error,
            "error_since": self.cluster_error_since,
        }
        view = self.cluster_view
        if view is not None:
            out.update(view.totals.to_json())
            out["read_at"] = view.read_at
            out["window_s"] = view.window_s
            out["fleet_done"] = sum(s.done for s in view.workers.values())
            out["fleet_failed"] = sum(s.failed for s in view.workers.values())
            out["fleet_held"] = sum(s.held for s in view.workers.values())
            # what `vastui cluster` lists as orphans, for the readers of the status (the
            # console's cluster pane); bounded: a cluster full of leaked rows says how many
            out["orphans"] = [r.to_json() for r in self.cluster_orphans[:MAX_ORPHANS_SHOWN]]
            out["orphans_total"] = len(self.cluster_orphans)
        return out

    async def _delivery(self) -> Delivery | None:
        """The headline of this step (vastui/engine/delivery.py): curio's count at its last
        good reading while the cluster is read; cuzk's counters where no cluster is. While a
        configured cluster cannot be read, the last headline stands (its ``at`` says how old),
        rather than a figure counted another way."""
        reader = self.cluster
        reading = reader is not None and reader.enabled
        if reading and self._cluster_count is None:
            return self.delivery  # not read yet: nothing rather than cuzk's figure for a step
        if reading and not self._cluster_fresh:
            return self.delivery
        now = self.clock()
        records = await self.store.instances.all(include_killed=True)
        window = self.config.proving.window_min * 60.0
        count = self._cluster_count if reading else None
        self.delivery = delivery.compute(records, now, window, count)
        return self.delivery

    # -- worker events and counters (from the followers) -----------------------------------

    async def handle_counters(
        self,
        vast_id: int,
        reading: production.Reading | None,
        unreachable: bool = False,
        read_at: float | None = None,
    ) -> bool:
        """Fold one counters reading (None: unreadable; ``unreachable``: no SSH connection at
        all; ``read_at``: when it was read, default now) and decide. False once not proving."""
        async with self._deciding(vast_id):
            if self._stopping or self.halted:
                return False  # stopped deciding: the next start reads it again
            rec = await self.store.instances.get(vast_id)
            if rec is None or rec.killed or rec.state != "proving":
                return False
            if rec.stopped_since is not None:
                return True  # stopped (outbid, or in the warm pool): nothing to read or judge
            now = self.clock() if read_at is None else min(read_at, self.clock())
            if unreachable:
                self._ssh_reached.pop(vast_id, None)
            else:
                self._ssh_reached[vast_id] = now
            seen = transitions.Counters(
                reading, unreachable, others_reachable=self._others_reachable(vast_id, now)
            )
            state = production.ProdState.from_json(rec.prod_state)
            bench = parse_stored_result(rec.bench_result)
            effects = transitions.on_counters(rec, state, bench, seen, now, self.config)
            await self.acts.carry_out(rec, effects, now)
            rec = await self.store.instances.get(vast_id)
        await self._notify("counters")
        return rec is not None and not rec.killed

    async def handle_worker_status(self, vast_id: int, status: dict[str, Any]) -> None:
        """What a worker says of itself (`workerctl status`, untrusted): the image digest it
        runs, recorded under the engine's lock like every other write."""
        image = status.get("image") if isinstance(status, dict) else None
        digest = image.get("digest") if isinstance(image, dict) else None
        if not isinstance(digest, str) or not digest:
            return
        async with self._deciding(vast_id):
            if self._stopping or self.halted:
                return
            rec = await self.store.instances.get(vast_id)
            if rec is not None and not rec.killed:
                await self.store.instances.update(vast_id, image_digest=sanitize_line(digest, 200))

    def _others_reachable(self, vast_id: int, now: float) -> bool:
        """Whether the engine reached another proving worker over SSH lately (within half of
        ``proving.unreachable_min``, so that a cut has outlasted it before any kill is due):
        evidence that the controller's side works, and one worker's silence is its own."""
        recent = now - self.config.proving.unreachable_min * 30.0
        return any(t >= recent for vid, t in self._ssh_reached.items() if vid != vast_id)

    async def handle_worker_event(
        self, vast_id: int, event: WorkerEvent, *, position: int | None = None
    ) -> bool:
        """Decide on one worker event now. False once the instance is no longer live.

        `position` is the event's line number in the worker's log (what `--after` counts).
        """
        async with self._deciding(vast_id):
            if self._stopping or self.halted:
                return False  # stopped deciding: the event is read again at the next start
            rec = await self.store.instances.get(vast_id)
            if rec is None or rec.killed:
                return False
            await self._on_event(rec, event, position)
            rec = await self.store.instances.get(vast_id)
        await self._notify("event")
        return rec is not None and not rec.killed

    async def _on_event(
        self, rec: InstanceRecord, event: WorkerEvent, position: int | None = None
    ) -> None:
        now = self.clock()
        effects = transitions.on_event(rec, event, now, self.config, position)
        await self.acts.carry_out(rec, effects, now)
        if any(isinstance(e, transitions.EnterStage) and e.stage == "proving" for e in effects):
            after = await self.store.instances.get(rec.vast_id)
            if after is not None and after.state == "proving":
                await self._check_prove_identity(after, now)

    # -- offers and provisioning ---------------------------------------------------------

    def ranked_offers(self) -> list[RankedOffer]:
        """The market as the last search ranked it (the engine's filter, bad list flagged)."""
        return list(self._offers)

    async def refresh_offers(self, force: bool = False) -> list[RankedOffer]:
        fresh = self._offers_at is not None and (
            time.monotonic() - self._offers_at < self.settings.offers_refresh
        )
        if fresh and not force:
            return self._offers
        cfg = self.config.offers
        generation = self._offers_gen
        result = await self.client.search_offers(
            cfg.filter, order=cfg.order, limit=cfg.limit,
            allocated_storage=self.config.fleet.disk_gb,  # price the disk we will rent
        )  # fmt: skip
        bad = {e.machine_id: e.reason for e in await self.store.badlist.all(now=self.clock())}
        bids = None
        if self.config.bids.mode != "off":
            history = await self.store.bid_history(now=self.clock())
            bids = (self.config, bidding.RiskModel(history, self.config))
        self._offers = rank_offers(
            result.offers, await self.store.perf.all(), bad, self.config.fleet.max_cost_per_proof,
            bids, Levers.of(self.config),
        )  # fmt: skip
        # A ban or a measurement while this search ran: ranked on stale records, re-rank soon.
        self._offers_at = time.monotonic() if generation == self._offers_gen else None
        # Attached consoles show these: what this engine would rent, not a search of their own.
        rows = [to_record(r) for r in self._offers[:PUBLISHED_OFFERS]]
        await self.store.status.put_offers(cfg.filter, rows, self.clock())
        return self._offers

    async def fleet_view(self) -> provision.FleetView:
        """What the provisioning decision needs, read from the store (the source of truth) and
        built in provision (``build_view``)."""
        fleet = self.config.fleet
        live = await self.store.instances.all(include_killed=False)
        workers = [
            provision.LiveWorker(
                stage=r.state, machine_id=r.machine_id, dph=r.dph_total or 0.0,
                draining=r.drain_started_at is not None,
                tunnel_down=None if r.tunnel_down_since is None
                else f"instance {r.vast_id}: {r.tunnel_detail or 'down'}",
            )
            for r in live
            if r.source == "vastui" and r.pooled_since is None
        ]  # fmt: skip
        pause = await self.store.meta.fleet_failure() or {}
        rents = [
            provision.RentInFlight(
                offer_id=i.offer_id, machine_id=i.machine_id,
                dph=float((i.detail.get("offer") or {}).get("dph_total") or 0.0),
            )
            for i in await self.store.intents.all(status="pending", kind="rent")
        ] + [
            # a start from the warm pool that Vast queued: a worker on its way, until its end
            provision.RentInFlight(offer_id=None, machine_id=r.machine_id, dph=r.dph_total or 0.0)
            for r in live
            if r.source == "vastui" and r.pool_start_at is not None
        ]  # fmt: skip
        return provision.build_view(
            fleet, workers, rents,
            dry_run=self.settings.dry_run,
            dry_offers=self.acts.dry_offers,
            bad_machines=frozenset(await self.store.badlist.machine_ids(now=self.clock())),
            api_error=self._cycle_error,
            fleet_failure=pause.get("text"),
            fleet_failure_until=until if isinstance(until := pause.get("until"), str) else None,
            no_credit=self.no_credit,
            # urgent work: offers ranked by when they would prove (ranking.urgency_of)
            urgency=ranking.urgency_of(self._auto_observed, fleet.bench_proofs),
            spent_today=await self._spent_today() if fleet.max_daily_spend > 0 else 0.0,
            rents_last_hour=await self.store.intents.rents_since(self.clock() - 3600.0),
            target=self._target(),
            pooled=[r.machine_id for r in live if r.source == "vastui" and r.pooled_since],
        )  # fmt: skip

    def _target(self) -> int | None:
        """The automatic target (min_workers until first decided); None: the configured one."""
        fleet = self.config.fleet
        if not fleet.auto_target:
            return None
        return self.auto.target if self.auto is not None else fleet.min_workers

    async def _spent_today(self) -> float:
        """Dollars since midnight UTC, as `vastui status` counts today."""
        now = self.clock()
        records = await self.store.instances.all(include_killed=True)
        return fleet_spend(records, now, local_midnight(now, UTC)).today

    async def _autoscale(self) -> None:
        """With ``fleet.target_workers = "auto"``: this step's target from the cluster's work
        (vastui/engine/autoscale.py); a change is an event with its reason."""
        fleet = self.config.fleet
        if not fleet.auto_target:
            self.auto = self._auto_observed = None
            return
        now = self.clock()
        settings = autoscale_settings(self.config)
        before = self.auto
        if before is None:
            stored = await self.store.meta.autoscale()
            before = (
                autoscale.State.from_json(stored, settings)
                if stored is not None
                else autoscale.initial(settings)
            )
        records = await self.store.instances.all(include_killed=False)
        observed = self._observed(records, now)
        decision = autoscale.decide(settings, before, observed, now)
        after, change = decision.state, decision.change
        if change is not None or replace(after, reason="") != replace(before, reason=""):
            detail = {
                "before": change.before, "after": change.after, "direction": change.direction,
                "unclaimed": observed.unclaimed, "done_per_h": round(observed.done_per_h, 2),
                "capacity_per_h": round(observed.capacity_per_h, 2),
            } if change is not None else {}  # fmt: skip
            await self.store.put_autoscale(
                after.to_json(), change.text if change else None, now=now, detail=detail
            )
        if change is not None:
            log.info("%s", change.text)
        self.auto, self._auto_observed = after, observed
        self.acts.pool_idle_h = self.demand.rise_gap_hours()

    def _observed(self, records: list[InstanceRecord], now: float) -> autoscale.Observed:
        """This step's reading for the automatic target: none without a fresh cluster read."""
        view = self.cluster_view
        if not self._cluster_fresh or view is None or view.window_s <= 0:
            return autoscale.Observed(read=False)
        live = [
            r for r in records
            if r.source == "vastui" and r.drain_started_at is None and r.stopped_since is None
        ]  # fmt: skip
        proving = [r for r in live if r.state == "proving"]
        # each worker's measured rate while busy (else its benchmark's): its capacity
        rated = [(rate, r) for r in proving if (rate := drain.worker_rate(r))]
        rates = [rate for rate, _r in rated]
        # the worker a raise brings first (the warm pool's pick); the one a cut gives up first,
        # the worst $/proof as the shrink orders them (provision.surplus; unknown is worst)
        pick = pool.pick(
            [r for r in records if r.source == "vastui" and r.pooled_since is not None]
        )
        next_dph = (pick.dph_total or 0.0) if pick is not None and drain.worker_rate(pick) else 0.0
        worst = max(rated, key=lambda x: worker_cost_per_proof(x[1])[0] or math.inf, default=None)
        t = view.totals
        oldest = t.oldest_unclaimed_at
        obtained, asked_s = t.request_obtained, t.request_runs_s
        demand = self.demand.with_open_run(t.request_asking_since, now)
        level = demand.level
        if level is not None and level.obtained >= demand.params.min_count:
            # the demand's current level (demandshift): a change is seen in minutes, where
            # the window's count would blend it with the hour before
            obtained, asked_s = level.obtained, level.asked_s
        money = self._money_outlook(records, pick, now, demand)
        # what the fleet bills per hour now: running workers' $/h, stopped ones' storage
        # (bandwidth is billed per GB, not per hour: in `vastui status`'s spend, not here)
        ours = [r for r in records if r.source == "vastui"]
        self._fleet_dph = sum(
            (r.storage_dph or 0.0) if r.pooled_since is not None or r.stopped_since is not None
            else (r.dph_total or 0.0)
            for r in ours
        )  # fmt: skip
        return autoscale.Observed(
            read=True, unclaimed=t.unclaimed,
            oldest_unclaimed_s=None if oldest is None else max(0.0, now - oldest),
            done_per_h=t.cluster_done * 3600.0 / view.window_s, capacity_per_h=sum(rates),
            proving=len(rates), workers=len(live), window_s=view.window_s,
            requested_per_h=autoscale.requested_per_h(obtained, asked_s),
            dph_per_h=sum(r.dph_total or 0.0 for _rate, r in rated),
            requested_err_per_h=autoscale.requested_err_per_h(obtained, asked_s),
            next_dph=next_dph,
            worst_dph=(worst[1].dph_total or 0.0) if worst else 0.0,
            worst_rate=worst[0] if worst else 0.0,
            usd_per_proof=self.usd_per_proof(), **money,
        )  # fmt: skip

    def usd_per_proof(self) -> float | None:
        """Dollars the market paid per proof the cluster proved over the window (its payments
        at ``fleet.fil_usd``): None without a FIL price, a fresh reading or a proof."""
        view, fil_usd = self.cluster_view, self.config.fleet.fil_usd
        if fil_usd <= 0 or view is None or not self._cluster_fresh:
            return None
        done = view.totals.cluster_done
        return view.totals.paid_fil * fil_usd / done if done > 0 else None

    def _money_outlook(
        self,
        records: list[InstanceRecord],
        pick: InstanceRecord | None,
        now: float,
        demand: demandshift.Watch,
    ) -> dict[str, Any]:
        """What the next worker up would cost before it proves, and how long the demand's
        level is expected to last (now and, for a rise that comes back, later)."""
        fleet = self.config.fleet
        ours = [r for r in records if r.source == "vastui"]
        rate = drain.worker_rate(pick) if pick is not None else None
        if pick is not None and rate:
            setup_h, setup_usd = pool.RESTART_H, 0.0
            storage = pick.storage_dph or 0.0
        else:
            rate = 0.0
            speeds = [r.inet_down for r in ours if r.inet_down]
            inet = statistics.median(speeds) if speeds else None
            costs = [r.inet_down_cost for r in ours if r.inet_down_cost is not None]
            # the benchmark's length at the rate the fleet's workers measured (a new rental
            # like them; 30/h, a slow card's, before any)
            rates = [x for r in ours if (x := drain.worker_rate(r))]
            rate_h = statistics.median(rates) if rates else 30.0
            setup_h = ranking.setup_hours(inet, rate_h, fleet.bench_proofs)
            setup_usd = PARAMS_GB * (statistics.median(costs) if costs else 0.0)
            stored = [r.storage_dph for r in ours if r.storage_dph]
            storage = statistics.median(stored) if stored else 0.0
        pool_h = fleet.warm_pool_max_h if fleet.warm_pool_max > 0 else 0.0
        later = demand.recurring_hours(now, pool_h)
        return {
            "expected_h": demand.expected_hours(now),
            "saturated": demand.saturated(),
            "next_rate": rate,
            "next_setup_h": setup_h,
            "next_setup_usd": setup_usd,
            "later_h": later,
            "later_idle_h": max(0.0, pool_h - later),
            "next_storage_dph": storage,
        }

    def auto_summary(self) -> dict[str, Any] | None:
        """The automatic target for the status: its state, reason and last reading."""
        if self.auto is None:
            return None
        obs = self._auto_observed
        out: dict[str, Any] = {
            "target": self.auto.target, "reason": self.auto.reason,
            "changed_at": self.auto.changed_at,
            "min_workers": self.config.fleet.min_workers,
            "max_workers": self.config.fleet.max_workers,
        }  # fmt: skip
        if obs is not None and obs.read:
            out.update(
                unclaimed=obs.unclaimed, oldest_unclaimed_s=obs.oldest_unclaimed_s,
                done_per_h=round(obs.done_per_h, 2), capacity_per_h=round(obs.capacity_per_h, 2),
                utilisation=None if obs.utilisation is None else round(obs.utilisation, 3),
                demand_per_h=None if obs.requested_per_h is None
                else round(obs.requested_per_h, 1),
            )  # fmt: skip
            out.update(self._money_summary(obs))
        return out

    def _money_summary(self, obs: autoscale.Observed) -> dict[str, Any]:
        """Margin and the market for the status: what the market paid over the window less
        what the fleet bills now, per hour and per day; the share of what the fleet could prove
        that it obtained; the price paid and the ask set in curio; a lower ask suggested where
        the fleet wins little of the work at a price that would still pay its $/proof."""
        view = self.cluster_view
        if view is None or view.window_s <= 0:
            return {}
        t, hours = view.totals, view.window_s / 3600.0
        out: dict[str, Any] = {"fleet_usd_per_h": round(self._fleet_dph, 4)}
        obtained_per_h = t.taken / hours
        if obs.capacity_per_h > 0:
            out["won_share"] = round(min(1.0, obtained_per_h / obs.capacity_per_h), 3)
            out["obtained_per_h"] = round(obtained_per_h, 1)
        paid_per_proof = t.paid_fil / t.paid_recent if t.paid_recent else None
        if paid_per_proof is not None:
            out["paid_fil_per_proof"] = round(paid_per_proof, 9)
        if t.ask_fil is not None:
            out["ask_fil"] = t.ask_fil
        fil_usd = self.config.fleet.fil_usd
        if fil_usd > 0:
            earned = t.paid_fil * fil_usd / hours
            out.update(
                earned_usd_per_h=round(earned, 4),
                margin_usd_per_h=round(earned - self._fleet_dph, 4),
                margin_usd_per_day=round((earned - self._fleet_dph) * 24, 2),
            )  # fmt: skip
            # the fleet's own $/proof at full use, in FIL: an ask above it that wins little
            # of the work leaves money on the table (the market pays its price, not the ask:
            # Snark-Market.md "Notes", retries "still higher than your minimum price")
            won = out.get("won_share")
            if obs.capacity_per_h > 0 and obs.dph_per_h > 0 and won is not None and won < 0.5:
                cost_fil = obs.dph_per_h / obs.capacity_per_h / fil_usd
                if t.ask_fil is not None and t.ask_fil > cost_fil * 1.2:
                    out["suggested_ask_fil"] = round(cost_fil * 1.2, 6)
        return out

    async def _provision(self) -> None:
        """Rent at most one worker towards the target, then publish the status and its reason."""
        async with self._deciding():
            await self._autoscale()
            view = await self.fleet_view()
            if view.workers > view.target > 0 and not view.api_error:
                view = await self._shrink(view)
            wants_market = provision.gate(view) is None
        # The search (seconds for a big market, paced) and the ranking are not under the lock:
        # worker events are decided meanwhile. The decision then takes a fresh view.
        search_error = None
        if wants_market:
            try:
                await self.refresh_offers()
            except VastError as exc:
                search_error = self._cycle_error = sanitize_line(f"offer search: {exc}", 300)
                log.warning("%s", self._cycle_error)
        async with self._deciding():
            view = await self.fleet_view()
            if search_error is not None:
                view = replace(view, api_error=search_error)
            # The market as this step saw it; none if it did not look (the view changed since
            # the gate said no search was needed): the next step looks.
            offers = self._offers if wants_market and search_error is None else []
            if await self._start_from_pool(view):
                view = await self.fleet_view()
            decision = provision.decide(view, offers)
            if decision.rent is not None and not (self._stopping or self.halted):
                view, decision = await self._rent_one(view, decision, offers)
            await self._publish(view, decision)

    async def _shrink(self, view: provision.FleetView) -> provision.FleetView:
        """Destroy the surplus above a lowered target (provision.surplus says which)."""
        live = {
            r.vast_id: r
            for r in await self.store.instances.all(include_killed=False)
            # draining: already going; pooled: not workers of the target
            if r.source == "vastui" and r.drain_started_at is None and r.pooled_since is None
        }
        workers = [
            provision.Worker(r.vast_id, r.state, r.created_at or 0.0, worker_cost_per_proof(r)[0])
            for r in live.values()
        ]
        for w in provision.surplus(workers, view.target, view.pending_rents):
            reason = provision.surplus_reason(view.workers, view.target, w)
            log.info("instance %s is surplus: %s", w.vast_id, reason)
            await self.acts.kill(live[w.vast_id], policy.Kill(SURPLUS_KIND, reason))
        return await self.fleet_view()

    async def _rent_one(
        self, view: provision.FleetView, decision: provision.Decision, offers: list[RankedOffer]
    ) -> tuple[provision.FleetView, provision.Decision]:
        """Rent the decided offer (one that fails gives way to the next); return the view and
        the decision that hold afterwards: the status says where the next step starts from."""
        for _ in range(5):
            if decision.rent is None:
                break
            offer = decision.rent.offer
            try:
                await self.acts.rent(
                    offer, provision.rent_reason(view, decision.rent), decision.rent.rent_bid
                )
            except IdentityCollision as exc:  # the fleet's: no other offer would fare better
                if self.identity_collision is None:
                    log.error("%s", exc.line)
                    await self.store.events.add("cluster", exc.line, now=self.clock())
                self.identity_collision = exc.line  # this step's: the next rent looks past it
                view = replace(view, identity_collision=exc.line)
                return view, provision.decide(view, offers)
            except NoCredit as exc:  # the account's: no other offer would fare better
                if self.no_credit is None:
                    log.warning("rent refused for billing: %s", exc.line)
                self.no_credit = exc.line
                view = replace(view, no_credit=exc.line)
                return view, provision.decide(view, offers)
            except EngineError as exc:
                log.warning("%s", exc)
                view = replace(view, blocked_offers=view.blocked_offers | {offer.id})
                decision = provision.decide(view, offers)
                continue
            except VastError as exc:  # before any create: e.g. putting the key on the account
                self._cycle_error = sanitize_line(f"rent: {exc}", 300)
                log.warning("%s", self._cycle_error)
                view = replace(view, api_error=self._cycle_error)
                return view, provision.decide(view, offers)
            self.identity_collision = None
            view = await self.fleet_view()
            return view, provision.decide(view, offers)
        return view, decision

    def _step_facts(self, status: EngineStatus) -> StepFacts:
        return StepFacts(
            now=self.clock(), status=status, credit=self.credit,
            cluster_error=self.cluster_error, cluster_error_since=self.cluster_error_since,
            cut_off=self.cut_off, cut_off_since=self.cut_off_since,
            offers=self._offers, api_errors=self.client.error_counts,
        )  # fmt: skip

    async def _note_cut_off(self, tunnel_down: str | None) -> None:
        """The controller cut off from its workers is one episode: an event (and, through the
        monitor, an alert) when it starts and when it ends, whatever each step repeats."""
        now = self.clock()
        if tunnel_down is not None and self.cut_off is None:
            self.cut_off, self.cut_off_since = tunnel_down, now
            text = f"the controller is cut off from its workers: {tunnel_down}"
            log.warning("%s", text)
            await self.store.events.add("cut_off", text, now=now)
        elif tunnel_down is None and self.cut_off is not None:
            lasted = now - (self.cut_off_since or now)
            self.cut_off = self.cut_off_since = None
            text = f"the controller reaches its workers again (cut off for {lasted / 60:.0f} min)"
            log.info("%s", text)
            await self.store.events.add("cut_off", text, now=now)
        elif tunnel_down is not None:
            self.cut_off = tunnel_down  # the newest line; the episode's start stands

    async def _publish(self, view: provision.FleetView, decision: provision.Decision) -> None:
        reason = decision.reason
        await self._note_cut_off(view.tunnel_down)
        status = await self.store.status.put(
            EngineStatus(
                target=view.target,
                workers=view.workers,
                by_stage=dict(view.by_stage),
                reason_kind=reason.kind if reason else None,
                reason=reason.text if reason else None,
                best=reason.best.to_json() if reason and reason.best else None,
                dry_run=view.dry_run,
                updated_at=self.clock(),
                wall_at=time.time(),
                simulated=not isinstance(self.clock, SteadyClock),  # a demo's, a sim's, a test's
                credit=self.credit,
                spent_today=view.spent_today if view.max_daily_spend > 0 else None,
                daily_budget=view.max_daily_spend or None,
                dph=view.dph_in_use,
                dph_cap=view.max_total_dph if math.isfinite(view.max_total_dph) else None,
                cluster=self._cluster_status(view),
                cut_off=self.cut_off,
                cut_off_since=self.cut_off_since,
                delivery=await self._delivery(),
            )
        )
        previous = self.status
        if previous is None or (previous.reason_kind, previous.reason) != (
            status.reason_kind,
            status.reason,
        ):
            log.info(
                "fleet %d/%d workers: %s", status.workers, status.target, status.reason or "renting"
            )
        self.status = status


DEMAND_HISTORY_S = 48 * 3600.0  # the request task's runs read after a restart


def autoscale_settings(config: Config) -> autoscale.Settings:
    fleet = config.fleet
    return autoscale.Settings(
        min_workers=fleet.min_workers, max_workers=fleet.max_workers,
        utilisation=fleet.target_utilisation, down_after_s=fleet.scale_down_after_min * 60.0,
        deadline_s=config.proving.market_deadline_min * 60.0,
        max_cost_per_proof=fleet.max_cost_per_proof, max_pending=config.curio.max_pending,
    )  # fmt: skip


def _seconds(value: str | None) -> int | None:
    """Whole seconds from an instance's environment (untrusted), as the worker reads them."""
    n = parse_number(value)
    return int(n) if n is not None and n == int(n) and 0 < n < 2**31 else None


LAST_SEEN_EVERY_S = 60.0  # an unchanged row's last_seen_at is rewritten at most this often


def _only_seen(rec: InstanceRecord, fields: Progress, now: float) -> bool:
    """Nothing but the time it was listed changed, and that was written within the last
    minute: no row to rewrite (issue 32: each worker's row was written every step). Only
    spend reads last_seen_at, and only for a destroyed worker with no kill time."""
    if rec.last_seen_at is None or now - rec.last_seen_at >= LAST_SEEN_EVERY_S:
        return False
    return all(getattr(rec, key) == value for key, value in fields.items() if key != "last_seen_at")


# The listing's own fields: a change of these alone moves nothing (its stage, its clocks)
OBSERVED_FIELDS = frozenset(
    ("vast_status", "dph_total", "status_msg", "last_seen_at", "ssh_host", "ssh_port")
)


def _observed_only(rec: InstanceRecord, fields: Progress) -> bool:
    """Only the listing's own fields changed: the write can wait for the reconcile's end."""
    return all(
        key in OBSERVED_FIELDS or getattr(rec, key) == value for key, value in fields.items()
    )


def _starts_setup(rec: InstanceRecord, status: str | None, endpoint: object) -> bool:
    """A loading instance Vast now runs, reachable: its setup starts."""
    return rec.state == "loading" and status == "running" and endpoint is not None


def _float(value: str | None) -> float | None:
    """A number from an adopted instance's environment (untrusted: never "inf" or "nan")."""
    return parse_number(value)


def _foreign(inst: Instance) -> ForeignInstance:
    return ForeignInstance(
        vast_id=inst.id,
        label=inst.label or "",
        owner=owner_of(inst.label) or "?",
        machine_id=inst.machine_id,
        gpu_name=sanitize_line(inst.gpu_name, 40) if inst.gpu_name else None,
        num_gpus=inst.num_gpus,
        dph_total=inst.dph_total,
        vast_status=inst.actual_status,
    )
