"""The reconcile loop: observe (Vast, workers over SSH, the store), decide, act.

Every action is persisted as an intent before it is carried out, so a crash at any point is
recovered on the next start: a pending rent is resolved by its label, a pending destroy is
carried out again (destroy is idempotent). Worker events stream in over SSH and reach a
decision as they arrive, not at the next poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any

from vastui.config import Config, load_curio_db_password
from vastui.engine import policy, production, provision
from vastui.engine.labels import fleet_of, new_label
from vastui.engine.ranking import RankedOffer, rank_offers, to_record
from vastui.sanitize import sanitize_line
from vastui.ssh import SshError, SshPool
from vastui.store import EngineStatus, InstanceRecord, Store, StoreError
from vastui.store.fleet import Command
from vastui.vast.client import VastClient
from vastui.vast.errors import CreateOutcomeUnknown, VastError
from vastui.vast.models import Instance, Offer

log = logging.getLogger("vastui.engine")

ONSTART = 'nohup entrypoint.sh > "${WORKER_ROOT:-}/var/log/entrypoint.log" 2>&1 &'
# A rent intent whose create answer was lost is resolved by label; give Vast this long
# (engine clock seconds) to show the instance before calling the intent failed.
RENT_RECOVERY_GRACE = 600.0
PUBLISHED_OFFERS = 500  # ranked offers published for attached consoles
# A console command not picked up within this many (wall) seconds was sent while no engine ran:
# the operator has long been told it failed, so a later engine must not carry it out.
COMMAND_TTL = 60.0


@dataclass
class EngineSettings:
    poll_interval: float = 30.0  # real seconds between reconcile steps
    offers_refresh: float = 120.0  # real seconds between offer searches
    command_poll: float = 1.0  # real seconds between checks for console commands
    dry_run: bool = False
    worker_env: dict[str, str] = field(default_factory=dict)  # extra env for every worker
    prove_poll: float | None = None  # real seconds between counter reads (None: proving.poll_s)


class EngineError(Exception):
    """A command could not be carried out; one line for the operator."""


class Engine:
    def __init__(
        self,
        config: Config,
        store: Store,
        client: VastClient,
        *,
        ssh: SshPool | None,
        public_key: str | None,
        clock: Callable[[], float] = time.time,
        settings: EngineSettings | None = None,
        on_change: Callable[[str], Awaitable[None] | None] | None = None,
    ) -> None:
        self.config = config
        self.store = store
        self.client = client
        self.ssh = ssh
        self.public_key = public_key
        self.clock = clock
        self.settings = settings or EngineSettings()
        self.on_change = on_change
        self._lock = asyncio.Lock()  # one decision at a time: steps, events, commands
        self._watchers: dict[int, asyncio.Task[None]] = {}
        self._monitors: dict[int, asyncio.Task[None]] = {}  # proving workers' counters
        self._inflight_labels: set[str] = set()
        self._offers: list[RankedOffer] = []
        self._offers_at: float | None = None  # monotonic
        self._key_on_account = False
        self._dry_decided: set[tuple[str, int]] = set()
        self._dry_offers: dict[int, float] = {}  # offers this dry run would rent → $/h
        self._destroy_retry: dict[int, tuple[int, float]] = {}  # vast_id → (failures, not before)
        self.halted = False  # set when the lease is lost: another engine may own the fleet
        self._wake = asyncio.Event()
        self.vast_seen_at: float | None = None  # wall time of the last good Vast list
        self.last_error: str | None = None
        self._cycle_error: str | None = None  # this step's Vast error, for the status
        self.status: EngineStatus | None = None  # what the last step published

    # -- lifecycle -------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        await self.store.requeue_running_commands()
        commands = asyncio.create_task(self._command_poller(stop), name="engine-commands")
        try:
            while not stop.is_set() and not self.halted:
                self._wake.clear()
                await self.step()
                waits = [
                    asyncio.ensure_future(stop.wait()),
                    asyncio.ensure_future(self._wake.wait()),
                ]
                await asyncio.wait(
                    waits, timeout=self.settings.poll_interval, return_when=asyncio.FIRST_COMPLETED
                )
                for waiter in waits:
                    waiter.cancel()
        finally:
            commands.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await commands

    def wake(self) -> None:
        """Run the next step now (a command arrived, the operator pressed refresh)."""
        self._wake.set()

    async def _command_poller(self, stop: asyncio.Event) -> None:
        """Console commands reach a headless engine within a second, not a poll interval."""
        while not stop.is_set():
            await asyncio.sleep(self.settings.command_poll)
            try:
                if await self.store.has_pending_commands():
                    self.wake()
            except StoreError as exc:
                log.warning("command poll: %s", exc)

    async def close(self) -> None:
        tasks = [*self._watchers.values(), *self._monitors.values()]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._watchers.clear()
        self._monitors.clear()
        if self.ssh is not None:
            await self.ssh.close_all()

    def halt(self, why: str) -> None:
        """Stop deciding at once (the lease is gone: another engine may be running)."""
        if not self.halted:
            log.error("engine halted: %s", why)
        self.halted = True
        self.last_error = why
        self.wake()

    async def step(self) -> None:
        """One observe → decide → act pass, then the status. Errors are logged, never fatal."""
        if self.halted:
            return
        self._cycle_error = None
        try:
            async with self._lock:
                await self._run_commands()
                vast = await self._observe_vast()
                if vast is not None:
                    await self._reconcile(vast)
        except Exception as exc:
            self._step_failed(exc)
        # Even after a failed observation: the status must say why nothing is rented.
        try:
            await self._provision()
        except Exception as exc:
            self._step_failed(exc)
        if not self.halted:  # a halt's reason outlives the step it interrupted
            self.last_error = self._cycle_error
        await self._notify("step")

    def _step_failed(self, exc: Exception) -> None:
        if isinstance(exc, VastError | StoreError | SshError):
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

    async def _run_commands(self) -> None:
        for cmd in await self.store.claim_commands():
            waited = time.time() - cmd.created_at
            if waited > COMMAND_TTL:
                await self.store.finish_command(
                    cmd.id, False, f"expired: sent {waited:.0f} s ago while no engine ran; not done"
                )
                log.warning(
                    "command %s (%s) expired after %.0f s unclaimed", cmd.id, cmd.kind, waited
                )
                continue
            try:
                result = await self._execute(cmd)
                await self.store.finish_command(cmd.id, True, result)
            except (EngineError, VastError, StoreError, ValueError, KeyError) as exc:
                await self.store.finish_command(cmd.id, False, sanitize_line(str(exc), 300))
            except Exception as exc:  # a bad command must fail, not take the engine down
                log.exception("command %s (%s) failed", cmd.id, cmd.kind)
                await self.store.finish_command(
                    cmd.id, False, sanitize_line(f"{type(exc).__name__}: {exc}", 300)
                )

    async def _execute(self, cmd: Command) -> str:
        args = cmd.args
        if cmd.kind == "deploy":
            iid = await self._deploy_locked(int(args["offer_id"]), reason="manual deploy")
            if iid:
                return f"rented instance {iid}"
            if self.settings.dry_run:
                return "dry-run: not rented"
            return "create outcome unknown: resolving by label (do not deploy again)"
        if cmd.kind == "destroy":
            await self._destroy_locked(
                int(args["instance_id"]), "manual", str(args.get("reason") or "manually destroyed")
            )
            return f"destroyed instance {args['instance_id']}"
        if cmd.kind == "ignore":
            await self._ignore_locked(int(args["machine_id"]), str(args["reason"]), "manual")
            return f"machine {args['machine_id']} ignored"
        if cmd.kind == "unignore":
            if not await self.store.remove_bad(int(args["machine_id"]), now=self.clock()):
                raise EngineError(f"machine {args['machine_id']} is not on the bad list")
            return f"machine {args['machine_id']} unignored"
        raise EngineError(f"unknown command {cmd.kind}")

    async def deploy(self, offer_id: int, reason: str = "manual deploy") -> int | None:
        async with self._lock:
            return await self._deploy_locked(offer_id, reason)

    async def destroy(self, instance_id: int, reason: str = "manually destroyed") -> None:
        async with self._lock:
            await self._destroy_locked(instance_id, "manual", reason)

    async def ignore(self, machine_id: int, reason: str) -> None:
        async with self._lock:
            await self._ignore_locked(machine_id, reason, "manual")

    # -- observe ------------------------------------------------------------------------

    async def _observe_vast(self) -> dict[int, Instance] | None:
        try:
            listed = await self.client.list_instances()
        except VastError as exc:
            self.last_error = self._cycle_error = sanitize_line(str(exc), 300)
            log.warning("cannot list instances: %s", self.last_error)
            return None
        self.vast_seen_at = time.time()
        return {inst.id: inst for inst in listed}

    async def _reconcile(self, vast: dict[int, Instance]) -> None:
        now = self.clock()
        by_label = {inst.label: inst for inst in vast.values() if inst.label}
        await self._recover_intents(by_label, now)
        known = {rec.vast_id: rec for rec in await self.store.list_instances()}
        # Adopt our own labelled instances that the store does not know (after a crash).
        for inst in vast.values():
            if not self._ours(inst.label) or inst.label in self._inflight_labels:
                continue
            rec = known.get(inst.id)
            if rec is None:
                known[inst.id] = await self._adopt(inst, now)
            elif rec.killed and rec.source == "vastui":
                await self._destroy_again(rec)
        bad = await self.store.bad_machine_ids(now=self.clock())
        for rec in list(known.values()):
            if rec.killed or rec.source != "vastui":
                continue
            inst = vast.get(rec.vast_id)
            if inst is None:
                # One list that misses a row is not proof: ask for the instance itself.
                if await self.client.show_instance(rec.vast_id) is None:
                    await self._vanished(rec, now)
                continue
            rec = await self._refresh(rec, inst, now)
            if rec.machine_id in bad:
                entry = await self.store.get_bad(rec.machine_id)
                await self._kill(
                    rec,
                    policy.Kill(
                        "bad_machine",
                        f"machine {rec.machine_id} is on the bad list"
                        + (f": {entry.reason}" if entry else ""),
                    ),
                )
                continue
            kill = policy.unhealthy_kill(rec, now, self.config) or policy.deadline_kill(
                rec, now, self.config
            )
            if kill is not None:
                await self._kill(rec, kill)
                continue
            self._ensure_watcher(rec)
            self._ensure_monitor(rec)

    def _ours(self, label: str | None) -> bool:
        """Carries this fleet's label: the only instances this engine adopts or destroys."""
        return fleet_of(label) == self.config.fleet.name

    async def _destroy_again(self, rec: InstanceRecord) -> None:
        """Recorded as destroyed, yet still listed: destroy again (idempotent, no new record)."""
        if self.settings.dry_run or not self._retry_due(rec.vast_id):
            return
        try:
            await self.client.destroy_instance(rec.vast_id)
            self._destroy_retry.pop(rec.vast_id, None)
            log.warning("instance %s was still listed after its destroy; destroyed again",
                        rec.vast_id)  # fmt: skip
        except VastError as exc:
            self._note_destroy_failure(rec.vast_id, exc)

    def _retry_due(self, vast_id: int) -> bool:
        failures = self._destroy_retry.get(vast_id)
        return failures is None or time.monotonic() >= failures[1]

    def _note_destroy_failure(self, vast_id: int, exc: Exception) -> None:
        count = self._destroy_retry.get(vast_id, (0, 0.0))[0] + 1
        delay = min(300.0, 5.0 * 2 ** (count - 1))
        self._destroy_retry[vast_id] = (count, time.monotonic() + delay)
        log.warning("destroy %s failed (%d), retry in %.0fs: %s", vast_id, count, delay, exc)

    async def _refresh(self, rec: InstanceRecord, inst: Instance, now: float) -> InstanceRecord:
        status = inst.actual_status
        endpoint = inst.ssh_endpoint()
        fields: dict[str, Any] = {
            "vast_status": status,
            # What Vast bills, storage included: the offer's search price may differ.
            "dph_total": inst.dph_total if inst.dph_total is not None else rec.dph_total,
            "status_msg": sanitize_line(inst.status_msg, 300) if inst.status_msg else None,
            "last_seen_at": now,
        }
        if endpoint is not None:
            fields["ssh_host"], fields["ssh_port"] = endpoint
        if status in policy.UNHEALTHY:
            fields["unhealthy_since"] = rec.unhealthy_since or now
        elif rec.unhealthy_since is not None:
            fields["unhealthy_since"] = None
        rec = await self.store.update_instance(rec.vast_id, **fields)
        if rec.state == "loading" and status == "running" and endpoint is not None:
            rec = await self.store.set_stage(rec.vast_id, "setup", now=now)
            log.info("instance %s running on machine %s: setup", rec.vast_id, rec.machine_id)
        return rec

    async def _adopt(self, inst: Instance, now: float) -> InstanceRecord:
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
            min_rate=_float(inst.env.get("MIN_RATE")),
            created_at=inst.start_date or now,
            loading_at=now,
        )
        rec = await self.store.upsert_instance(rec, now=now)
        await self.store.add_event(
            "adopt",
            f"adopted labelled instance {inst.label} found on Vast",
            instance_id=inst.id,
            machine_id=inst.machine_id,
            now=now,
        )
        log.info("adopted instance %s (%s)", inst.id, inst.label)
        return rec

    async def _vanished(self, rec: InstanceRecord, now: float) -> None:
        await self._stop_watcher(rec.vast_id)
        await self.store.mark_killed(
            rec.vast_id, "vanished", "instance disappeared from vast", event="kill", now=now
        )

    async def _recover_intents(self, by_label: dict[str, Instance], now: float) -> None:
        for intent in await self.store.list_intents(status="pending"):
            if intent.kind == "destroy" and intent.instance_id is not None:
                rec = await self.store.get_instance(intent.instance_id)
                if rec is None or rec.killed:
                    await self.store.finish_intent(intent.id, "done", now=now)
                    continue
                kill = policy.Kill.from_detail(intent.reason, intent.detail)
                await self._kill(rec, kill, intent_id=intent.id)
            elif intent.kind == "rent" and intent.label:
                if intent.label in self._inflight_labels:
                    continue
                inst = by_label.get(intent.label)
                if inst is not None:
                    if await self.store.get_instance(inst.id) is None:
                        rec = await self._record_rent(intent.detail, inst.id, intent.label, now)
                        log.info("rent intent %s resolved by label: %s", intent.id, rec.vast_id)
                    await self.store.finish_intent(intent.id, "done", instance_id=inst.id, now=now)
                elif now - intent.created_at > RENT_RECOVERY_GRACE:
                    await self.store.finish_intent(
                        intent.id, "failed", note="no instance with its label appeared", now=now
                    )

    # -- workers ------------------------------------------------------------------------

    def _ensure_watcher(self, rec: InstanceRecord) -> None:
        if self.ssh is None or rec.state == "loading" or rec.ssh_host is None:
            return
        task = self._watchers.get(rec.vast_id)
        if task is not None and not task.done():
            return
        self._watchers[rec.vast_id] = asyncio.create_task(
            self._watch(rec.vast_id, (rec.ssh_host, int(rec.ssh_port or 22))),
            name=f"watch-{rec.vast_id}",
        )

    async def _stop_watcher(self, vast_id: int) -> None:
        for tasks in (self._watchers, self._monitors):
            task = tasks.pop(vast_id, None)
            if task is not None and task is not asyncio.current_task():
                task.cancel()
        if self.ssh is not None:
            await self.ssh.close_instance(vast_id)

    async def _watch(self, vast_id: int, endpoint: tuple[str, int]) -> None:
        """Follow one worker's events; each is decided as it arrives."""
        assert self.ssh is not None
        worker = self.ssh.worker(vast_id, endpoint)
        try:
            try:
                status = await worker.status()
                image = status.get("image") if isinstance(status.get("image"), dict) else {}
                digest = image.get("digest") if isinstance(image, dict) else None
                if isinstance(digest, str) and digest:
                    await self.store.update_instance(
                        vast_id, image_digest=sanitize_line(digest, 200)
                    )
            except SshError as exc:
                log.info("instance %s: status unavailable yet: %s", vast_id, exc)
            rec = await self.store.get_instance(vast_id)
            if rec is None or rec.killed:
                return
            async for position, event in worker.positioned_events(after=rec.events_seen):
                if not await self.handle_worker_event(vast_id, event, position=position):
                    return
        except asyncio.CancelledError:
            raise
        except SshError as exc:
            log.info("instance %s: worker stream ended: %s", vast_id, exc)
        except Exception:
            log.exception("instance %s: watcher failed", vast_id)
        finally:
            if self._watchers.get(vast_id) is asyncio.current_task():
                self._watchers.pop(vast_id, None)

    # -- production ---------------------------------------------------------------------

    def _ensure_monitor(self, rec: InstanceRecord) -> None:
        if self.ssh is None or rec.state != "proving" or rec.ssh_host is None:
            return
        task = self._monitors.get(rec.vast_id)
        if task is not None and not task.done():
            return
        self._monitors[rec.vast_id] = asyncio.create_task(
            self._monitor(rec.vast_id, (rec.ssh_host, int(rec.ssh_port or 22))),
            name=f"monitor-{rec.vast_id}",
        )

    async def _monitor(self, vast_id: int, endpoint: tuple[str, int]) -> None:
        """Read a proving worker's cuzk counters on a fixed cadence and decide on each."""
        assert self.ssh is not None
        worker = self.ssh.worker(vast_id, endpoint)
        every = self.settings.prove_poll or self.config.proving.poll_s
        try:
            while True:
                try:
                    raw = await worker.cuzk_counters()
                    reading: production.Reading | None = production.Reading.parse(raw)
                except SshError as exc:
                    log.info("instance %s: cuzk counters unavailable: %s", vast_id, exc)
                    reading = None
                if not await self.handle_counters(vast_id, reading):
                    return
                await asyncio.sleep(every)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("instance %s: production monitor failed", vast_id)
        finally:
            if self._monitors.get(vast_id) is asyncio.current_task():
                self._monitors.pop(vast_id, None)

    async def handle_counters(self, vast_id: int, reading: production.Reading | None) -> bool:
        """Fold one counters reading (None: unreadable) and decide. False once not proving."""
        async with self._lock:
            rec = await self.store.get_instance(vast_id)
            if rec is None or rec.killed or rec.state != "proving":
                return False
            now = self.clock()
            window = self.config.proving.window_min * 60.0
            state = production.ProdState.from_json(rec.prod_state)
            if reading is not None and reading.alive and reading.completed is not None:
                bench = production.baseline_from_bench(_json_obj(rec.bench_result))
                state = production.fold(state, reading, now, window, bench)
                m = production.measure(state, now, window)
                rec = await self.store.update_instance(
                    vast_id,
                    prod_state=state.to_json(),
                    prod_completed=state.completed,
                    prod_failed=state.failed,
                    prod_rate=None if m.rate is None else round(m.rate, 3),
                    prod_checked_at=now,
                )
            elif state.silent_since is None:
                state = production.silent(state, now)
                rec = await self.store.update_instance(vast_id, prod_state=state.to_json())
            kill = production.verdict(state, reading, now, rec.min_rate, self.config)
            if kill is not None and kill.kind == "prove_below_min" and rec.prod_rate:
                # What it really does becomes the machine's last rate: the ranking must not
                # rent it again on the strength of its benchmark.
                await self._record_rate(rec, rec.prod_rate, now)
            if kill is not None:
                await self._kill(rec, kill)
            rec = await self.store.get_instance(vast_id)
        await self._notify("counters")
        return rec is not None and not rec.killed

    async def _strike(self, rec: InstanceRecord, kind: str, reason: str) -> None:
        """A mark against the machine; enough of them within auto_ban_days ban it."""
        if not rec.machine_id:
            return
        now = self.clock()
        days = self.config.fleet.auto_ban_days
        count = await self.store.add_strike(
            rec.machine_id, kind, reason, instance_id=rec.vast_id,
            since=now - days * 86400 if days > 0 else None, now=now,
        )  # fmt: skip
        log.info("strike %d on machine %s (%s): %s", count, rec.machine_id, kind, reason)
        if count >= self.config.proving.strikes_to_ban:
            await self._ignore_locked(
                rec.machine_id,
                f"{count} strikes, the last: {reason}"[:300],
                "automatic",
                host_id=rec.host_id,
                gpu_name=rec.gpu_name,
            )

    async def handle_worker_event(
        self, vast_id: int, event: dict[str, Any], *, position: int | None = None
    ) -> bool:
        """Decide on one worker event now. False once the instance is no longer live.

        `position` is the event's line number in the worker's log (what `--after` counts).
        """
        async with self._lock:
            rec = await self.store.get_instance(vast_id)
            if rec is None or rec.killed:
                return False
            await self._on_event(rec, event, position)
            rec = await self.store.get_instance(vast_id)
        await self._notify("event")
        return rec is not None and not rec.killed

    async def _on_event(
        self, rec: InstanceRecord, event: dict[str, Any], position: int | None = None
    ) -> None:
        now = self.clock()
        fields: dict[str, Any] = {
            "events_seen": position if position is not None else rec.events_seen + 1
        }
        if rec.first_report_at is None:
            fields["first_report_at"] = now
        rec = await self.store.update_instance(rec.vast_id, **fields)
        stage = policy.WORKER_STAGE.get(str(event.get("stage")))
        kind = event.get("event")
        if kind == "start" and stage is not None and stage != rec.state:
            rec = await self.store.set_stage(rec.vast_id, stage, now=now)
            await self.store.add_event(
                "stage", f"{stage}", instance_id=rec.vast_id, machine_id=rec.machine_id, now=now
            )
        elif kind == "result" and isinstance(event.get("result"), dict):
            await self._on_benchmark(rec, event["result"], now)
        elif kind == "fail":
            await self._kill(rec, policy.failure_kill(event))

    async def _on_benchmark(self, rec: InstanceRecord, result: dict[str, Any], now: float) -> None:
        rate = policy._num(result.get("rate_per_hour"))
        outcome = sanitize_line(str(result.get("outcome") or "error"), 40)
        failed = result.get("proofs_failed")
        await self.store.update_instance(
            rec.vast_id,
            bench_rate=rate,
            bench_outcome=outcome,
            bench_result=json.dumps(result)[:20_000],
            bench_failed=failed if isinstance(failed, int) and 0 <= failed < 2**31 else None,
        )
        if rate is not None and rate > 0:
            await self._record_rate(rec, rate, now)
        await self.store.add_event(
            "benchmark",
            f"{outcome}: {'n/a' if rate is None else f'{rate:.1f}'} proofs/h "
            f"(min {rec.min_rate if rec.min_rate is not None else '?'})",
            instance_id=rec.vast_id,
            machine_id=rec.machine_id,
            detail={"rate": rate, "outcome": outcome},
            now=now,
        )
        kill = policy.benchmark_kill(result, rec.min_rate)
        if kill is not None:
            rec = await self.store.get_instance(rec.vast_id) or rec
            await self._kill(rec, kill)
            return
        strike = policy.benchmark_strike(result)
        if strike is not None:
            await self._strike(rec, "bench_failed_proofs", sanitize_line(strike, 300))

    # -- act --------------------------------------------------------------------------

    async def _record_rate(self, rec: InstanceRecord, rate: float, now: float) -> None:
        """A measured rate into the machine's performance record (ranking reads last_rate)."""
        if rec.machine_id and rec.gpu_name:
            await self.store.record_benchmark(
                rec.machine_id, rec.gpu_name, rec.num_gpus or 1, rate,
                cpu_ram_gb=rec.cpu_ram_gb, host_id=rec.host_id, now=now,
            )  # fmt: skip
        self._offers_at = None  # the ranking must see this measurement before the next rent

    async def _kill(
        self, rec: InstanceRecord, kill: policy.Kill, *, intent_id: int | None = None
    ) -> bool:
        """Destroy with a typed reason (and ban the machine when the fault is the machine's).

        True once destroyed and recorded; False if refused, dry-run, or to be retried.
        """
        if not self._ours(rec.label):
            log.error("refusing to destroy instance %s: label %r is not this fleet's",
                      rec.vast_id, sanitize_line(rec.label, 80))  # fmt: skip
            return False
        now = self.clock()
        if self.settings.dry_run:
            key = (kill.kind, rec.vast_id)
            if key not in self._dry_decided:
                self._dry_decided.add(key)
                await self.store.add_event(
                    "destroy",
                    f"[dry-run] {kill.reason}",
                    instance_id=rec.vast_id,
                    machine_id=rec.machine_id,
                    detail={"kind": kill.kind, "dry_run": True},
                    now=now,
                )
            return False
        if intent_id is None:
            pending = [
                i
                for i in await self.store.list_intents(status="pending", kind="destroy")
                if i.instance_id == rec.vast_id
            ]
            if pending:  # a destroy already decided is being retried: keep its reason
                intent_id = pending[0].id
                kill = policy.Kill.from_detail(pending[0].reason, pending[0].detail)
            else:
                intent = await self.store.create_intent(
                    "destroy",
                    kill.reason,
                    instance_id=rec.vast_id,
                    machine_id=rec.machine_id,
                    detail=kill.to_detail(),
                    now=now,
                )
                intent_id = intent.id
        if not self._retry_due(rec.vast_id):
            return False
        try:
            existed = await self.client.destroy_instance(rec.vast_id)
        except VastError as exc:
            self._note_destroy_failure(rec.vast_id, exc)
            self.last_error = sanitize_line(f"destroy {rec.vast_id}: {exc}", 300)
            return False
        self._destroy_retry.pop(rec.vast_id, None)
        await self._stop_watcher(rec.vast_id)
        await self.store.mark_killed(
            rec.vast_id,
            kill.kind,
            kill.reason,
            failed_stage=kill.stage if kill.stage in policy.LIVE_STAGES else None,
            bench_outcome=kill.bench_outcome,
            error_lines=[sanitize_line(x, 500) for x in kill.error_lines] or None,
            event="destroy",
            detail={**kill.detail, "already_gone": not existed},
            now=now,
        )
        await self.store.finish_intent(intent_id, "done", now=now)
        log.info("destroyed %s (%s): %s", rec.vast_id, kill.kind, kill.reason)
        if kill.ban and rec.machine_id:
            await self._ignore_locked(
                rec.machine_id,
                kill.ban,
                "automatic",
                host_id=rec.host_id,
                gpu_name=rec.gpu_name,
                evidence=list(kill.error_lines)[-10:],
                skip_destroy=rec.vast_id,
            )
        elif kill.strike:
            await self._strike(rec, kill.kind, kill.reason)
        return True

    async def _destroy_locked(self, instance_id: int, kind: str, reason: str) -> None:
        rec = await self.store.get_instance(instance_id)
        if rec is None:
            raise EngineError(f"instance {instance_id} is not one of vastui's")
        if rec.killed:
            raise EngineError(f"instance {instance_id} is already destroyed")
        if not self._ours(rec.label):
            raise EngineError(f"instance {instance_id} has no label of this fleet; not destroying")
        if not await self._kill(rec, policy.Kill(kind, reason)):
            why = self.last_error or "retrying"
            raise EngineError(
                f"destroy of {instance_id} did not go through yet ({why}); it is retried"
            )

    async def _ignore_locked(
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
        if host_id is None or gpu_name is None:
            for rec in await self.store.list_instances():
                if rec.machine_id == machine_id:
                    host_id = host_id or rec.host_id
                    gpu_name = gpu_name or rec.gpu_name
        now = self.clock()  # the engine's clock, like every other decision it records
        expires = None
        if source == "automatic" and self.config.fleet.auto_ban_days > 0:
            expires = now + self.config.fleet.auto_ban_days * 86400
        await self.store.add_bad(
            machine_id,
            reason,
            source=source,
            host_id=host_id,
            gpu_name=gpu_name,
            expires_at=expires,
            evidence=evidence,
            now=now,
        )
        self._offers_at = None  # re-rank: the bad flag changed
        # Machines added to the bad list lose their live instances.
        for rec in await self.store.list_instances(include_killed=False):
            if rec.machine_id == machine_id and rec.vast_id != skip_destroy:
                await self._kill(
                    rec, policy.Kill("bad_machine", f"machine {machine_id} ignored: {reason}")
                )

    async def _deploy_locked(self, offer_id: int, reason: str) -> int | None:
        offer = await self._find_offer(offer_id)
        if offer is None:
            raise EngineError(f"offer {offer_id} is not on the market (any more)")
        return await self._rent(offer, reason)

    async def _find_offer(self, offer_id: int) -> Offer | None:
        for ranked in self._offers:
            if ranked.offer.id == offer_id:
                return ranked.offer
        result = await self.client.search_offers(
            f"id={offer_id} rentable=any verified=any",
            limit=5,
            allocated_storage=self.config.fleet.disk_gb,
        )
        return next((o for o in result.offers if o.id == offer_id), None)

    async def _rent(self, offer: Offer, reason: str) -> int | None:
        await self._check_rentable(offer)
        now = self.clock()
        min_rate = self.config.min_rate_for(offer.dph_total)
        label = new_label(self.config.fleet.name)
        detail = {
            "offer": offer.to_json(),
            "min_rate": min_rate,
            "image": self.config.fleet.image,
        }
        if self.settings.dry_run:
            self._dry_offers[offer.id] = offer.dph_total
            await self.store.create_intent(
                "rent", reason, label=label, offer_id=offer.id, machine_id=offer.machine_id,
                detail=detail, status="dry_run", now=now,
            )  # fmt: skip
            what = (
                f"offer {offer.id} ({offer.gpu_name} x{offer.num_gpus}, "
                f"${offer.dph_total:.3f}/h, min_rate {min_rate:.0f})"
            )
            await self.store.add_event(
                "rent",
                f"[dry-run] would rent {what}",
                machine_id=offer.machine_id,
                detail={"dry_run": True, "offer_id": offer.id, "reason": reason},
                now=now,
            )
            log.info("dry-run: would rent %s: %s", what, reason)
            return None
        await self._ensure_key_on_account()
        intent = await self.store.create_intent(
            "rent", reason, label=label, offer_id=offer.id, machine_id=offer.machine_id,
            detail=detail, now=now,
        )  # fmt: skip
        env = {
            "MIN_RATE": f"{min_rate:.1f}",
            "BENCH_PROOFS": str(self.config.fleet.bench_proofs),
            "VASTUI_IMAGE": self.config.fleet.image,
            **worker_curio_env(self.config),
            **self.settings.worker_env,
        }
        self._inflight_labels.add(label)
        try:
            result = await self.client.create_instance(
                offer.id,
                label=label,
                image=self.config.fleet.image,
                disk_gb=self.config.fleet.disk_gb,
                env=env,
                onstart=ONSTART,
            )
        except CreateOutcomeUnknown as exc:
            log.warning("%s", exc)  # stays pending: resolved by label on later steps
            return None
        except VastError as exc:
            await self.store.finish_intent(intent.id, "failed", note=str(exc)[:300], now=now)
            self._offers = [r for r in self._offers if r.offer.id != offer.id]
            raise EngineError(f"rent of offer {offer.id} failed: {exc}") from exc
        finally:
            self._inflight_labels.discard(label)
        await self._record_rent(detail, result.instance_id, label, now)
        await self.store.finish_intent(intent.id, "done", instance_id=result.instance_id, now=now)
        return result.instance_id

    async def _check_rentable(self, offer: Offer) -> None:
        """Only a rent in flight blocks an offer, and a live worker keeps its machine busy. An
        offer rented before may be rented again: a machine that failed is kept off by the bad
        list (and its strikes), a slow one by its measured rate, never by its offer id."""
        if offer.machine_id in await self.store.bad_machine_ids(now=self.clock()):
            raise EngineError(f"machine {offer.machine_id} is on the bad list")
        for intent in await self.store.list_intents(status="pending", kind="rent"):
            if intent.offer_id == offer.id or intent.machine_id == offer.machine_id:
                raise EngineError(
                    f"offer {offer.id}: a rent on machine {intent.machine_id} is in flight "
                    f"(intent {intent.id}); not renting twice"
                )
        for rec in await self.store.list_instances(include_killed=False):
            if rec.source == "vastui" and rec.machine_id == offer.machine_id:
                raise EngineError(
                    f"offer {offer.id}: machine {offer.machine_id} already has live instance "
                    f"{rec.vast_id}"
                )
        if self.settings.dry_run and offer.id in self._dry_offers:
            raise EngineError(f"dry-run: offer {offer.id} was already chosen in this run")

    async def _record_rent(
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
        )
        rec = await self.store.upsert_instance(rec, now=now)
        await self.store.add_event(
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

    # -- offers and provisioning ---------------------------------------------------------

    async def refresh_offers(self, force: bool = False) -> list[RankedOffer]:
        fresh = self._offers_at is not None and (
            time.monotonic() - self._offers_at < self.settings.offers_refresh
        )
        if fresh and not force:
            return self._offers
        cfg = self.config.offers
        result = await self.client.search_offers(
            cfg.filter, order=cfg.order, limit=cfg.limit,
            allocated_storage=self.config.fleet.disk_gb,  # price the disk we will rent
        )  # fmt: skip
        bad = {e.machine_id: e.reason for e in await self.store.list_bad(now=self.clock())}
        self._offers = rank_offers(
            result.offers, await self.store.list_perf(), bad, self.config.fleet.max_cost_per_proof
        )
        self._offers_at = time.monotonic()
        # Attached consoles show these: what this engine would rent, not a search of their own.
        rows = [to_record(r) for r in self._offers[:PUBLISHED_OFFERS]]
        await self.store.put_engine_offers(cfg.filter, rows, self.clock())
        return self._offers

    async def _fleet_view(self) -> provision.FleetView:
        """What the provisioning decision needs, read from the store (the source of truth)."""
        fleet = self.config.fleet
        live = [
            r for r in await self.store.list_instances(include_killed=False)
            if r.source == "vastui"
        ]  # fmt: skip
        # Rents whose outcome is still unknown count as workers (and cost); in a dry run the
        # would-be rents of this run stand in for the instances they would make.
        pending = await self.store.list_intents(status="pending", kind="rent")
        dry = self._dry_offers if self.settings.dry_run else {}
        dph = sum(r.dph_total or 0.0 for r in live) + sum(dry.values())
        stages = Counter(r.state for r in live)
        dph += sum(float((i.detail.get("offer") or {}).get("dph_total") or 0.0) for i in pending)
        return provision.FleetView(
            target=fleet.target_workers,
            max_concurrent_benchmarks=fleet.max_concurrent_benchmarks,
            max_cost_per_proof=fleet.max_cost_per_proof,
            by_stage={st: n for st in policy.LIVE_STAGES if (n := stages[st])},
            pending_rents=len(pending),
            blocked_offers=frozenset(
                {i.offer_id for i in pending if i.offer_id is not None} | set(dry)
            ),
            dry_picks=len(dry),
            busy_machines=frozenset(
                {r.machine_id for r in live if r.machine_id is not None}
                | {i.machine_id for i in pending if i.machine_id is not None}
            ),
            bad_machines=frozenset(await self.store.bad_machine_ids(now=self.clock())),
            dph_in_use=dph,
            max_total_dph=fleet.max_total_dph,
            dry_run=self.settings.dry_run,
            api_error=self._cycle_error,
        )

    async def _provision(self) -> None:
        """Rent at most one worker towards the target, then publish the status and its reason."""
        async with self._lock:
            view = await self._fleet_view()
            decision = provision.gate(view)
            offers: list[RankedOffer] = []
            if decision is None:
                try:
                    offers = await self.refresh_offers()
                except VastError as exc:
                    self._cycle_error = sanitize_line(f"offer search: {exc}", 300)
                    log.warning("%s", self._cycle_error)
                    view = replace(view, api_error=self._cycle_error)
                decision = provision.decide(view, offers)
            if decision.rent is not None:
                view, decision = await self._rent_one(view, decision, offers)
            await self._publish(view, decision)

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
                await self._rent(offer, provision.rent_reason(view, decision.rent))
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
            view = await self._fleet_view()
            return view, provision.decide(view, offers)
        return view, decision

    async def _publish(self, view: provision.FleetView, decision: provision.Decision) -> None:
        reason = decision.reason
        status = await self.store.put_engine_status(
            EngineStatus(
                target=view.target,
                workers=view.workers,
                by_stage=dict(view.by_stage),
                reason_kind=reason.kind if reason else None,
                reason=reason.text if reason else None,
                best=reason.best.to_json() if reason and reason.best else None,
                dry_run=view.dry_run,
                updated_at=self.clock(),
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


def worker_curio_env(config: Config) -> dict[str, str]:
    """How the worker runs curio (worker-image/entrypoint.sh). The database password, when set,
    goes to Vast in the instance's environment and nowhere else: not logged, not stored."""
    c = config.curio
    env = {
        "CUZK_MAX_PENDING": str(c.max_pending),
        "CUZK_PROVE_TIMEOUT": c.prove_timeout,
        "CURIO_EXTRA_LAYERS": c.layers,
        "CURIO_PROOFSHARE": "1" if c.proofshare else "0",
        "CURIO_DB_NAME": c.db_name,
        "CURIO_DB_USER": c.db_user,
    }
    password = load_curio_db_password()
    if password:
        env["CURIO_DB_PASSWORD"] = password
    return env


def _json_obj(text: str | None) -> dict[str, Any] | None:
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _float(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None
