"""The operator's commands (the console, `vastui` subcommands through the store): deploy an
offer, destroy an instance, ignore or unignore a machine. The engine carries them out on its
step, under its lock, and answers each in the store; a command older than COMMAND_TTL (sent
while no engine ran) is answered as expired, not done.

A command is never dropped for a busy database (StoreBusy: another connection held the write
lock past the busy timeout, and the write that met it did nothing). One that met it before
anything of it was recorded (the journal's mark unchanged: vastui/store/store.py) is carried
out again at the next step; one that met it after is answered as interrupted, never done
twice; an answer the store refused is kept and written at the next step.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Protocol

from vastui.domain.journal import Command
from vastui.engine import policy, provision
from vastui.engine.acts import Acts, EngineError
from vastui.engine.ranking import RankedOffer
from vastui.sanitize import sanitize_line
from vastui.store import Store, StoreBusy, StoreError
from vastui.vast.client import VastClient
from vastui.vast.errors import VastError
from vastui.vast.models import Offer

log = logging.getLogger("vastui.engine")

# A console command not picked up within this many (wall) seconds was sent while no engine ran:
# the operator has long been told it failed, so a later engine must not carry it out.
COMMAND_TTL = 60.0


class FleetReader(Protocol):
    """What a command reads of the engine: its fleet as provisioning sees it, and the market as
    its last search ranked it."""

    async def fleet_view(self) -> provision.FleetView: ...

    def ranked_offers(self) -> list[RankedOffer]: ...


class Commands:
    """What the engine does for the operator: through its acts, on its store, reading its fleet."""

    def __init__(
        self,
        *,
        store: Store,
        acts: Acts,
        client: VastClient,
        clock: Callable[[], float],
        fleet: FleetReader,
    ) -> None:
        self.store, self.acts, self.client = store, acts, client
        self.clock, self.fleet = clock, fleet
        # Claimed, met a busy database before anything of it was recorded: run again.
        self._again: list[Command] = []
        # Carried out (or refused), the answer not yet stored: id -> (ok, text).
        self._answers: dict[int, tuple[bool, str]] = {}

    async def run_pending(self) -> None:
        """Carry out the commands waiting in the store (the engine's lock held), each
        answered in the store: done, refused with one line, or expired. A busy database
        holds a command (or its answer) for the next step, never drops it."""
        if not await self._store_answers():
            return  # still busy: the rest waits behind the answers
        try:
            claimed = await self.store.commands.claim()
        except StoreBusy as exc:  # nothing claimed: they stay pending for the next step
            log.warning("commands: %s; claimed at the next step", exc)
            claimed = []
        again, self._again = self._again, []
        for cmd in again + claimed:
            await self._run(cmd, retried=cmd in again)

    async def _run(self, cmd: Command, *, retried: bool) -> None:
        waited = time.time() - cmd.created_at
        if waited > COMMAND_TTL and not retried:
            log.warning("command %s (%s) expired after %.0f s unclaimed", cmd.id, cmd.kind, waited)
            await self._answer(
                cmd, False, f"expired: sent {waited:.0f} s ago while no engine ran; not done"
            )
            return
        try:
            mark = await self.store.journal_mark()
        except StoreError as exc:  # not begun: it waits for the next step
            log.warning("command %s (%s): %s; carried out at the next step", cmd.id, cmd.kind, exc)
            self._again.append(cmd)
            return
        try:
            ok, result = True, await self._execute(cmd)
        except StoreBusy as exc:
            if await self._unchanged(mark):  # nothing of it was recorded
                log.warning("command %s (%s): %s; carried out at the next step",
                            cmd.id, cmd.kind, exc)  # fmt: skip
                self._again.append(cmd)
                return
            ok, result = False, sanitize_line(
                f"interrupted: {exc}; part of it was recorded (see the events), so it is not "
                "repeated: check, then send it again if needed", 300,
            )  # fmt: skip
        except (EngineError, VastError, StoreError, ValueError, KeyError) as exc:
            ok, result = False, sanitize_line(str(exc), 300)
        except Exception as exc:  # a bad command must fail, not take the engine down
            log.exception("command %s (%s) failed", cmd.id, cmd.kind)
            ok, result = False, sanitize_line(f"{type(exc).__name__}: {exc}", 300)
        await self._answer(cmd, ok, result)

    async def _unchanged(self, mark: tuple[int, int]) -> bool:
        """Nothing was recorded since `mark` (unknown: not unchanged, so never done twice)."""
        try:
            return await self.store.journal_mark() == mark
        except StoreError:
            return False

    async def _answer(self, cmd: Command, ok: bool, result: str) -> None:
        try:
            await self.store.commands.finish(cmd.id, ok, result)
        except StoreBusy as exc:
            log.warning("command %s (%s): its answer waits for the database: %s",
                        cmd.id, cmd.kind, exc)  # fmt: skip
            self._answers[cmd.id] = (ok, result)

    async def _store_answers(self) -> bool:
        """The answers a busy database refused before; True once none is left."""
        for command_id, (ok, result) in list(self._answers.items()):
            try:
                await self.store.commands.finish(command_id, ok, result)
            except StoreBusy as exc:
                log.warning("command answers: %s; written at the next step", exc)
                return False
            del self._answers[command_id]
        return True

    async def _execute(self, cmd: Command) -> str:
        args = cmd.args
        if cmd.kind == "deploy":
            iid = await self.deploy(int(args["offer_id"]), reason="manual deploy")
            if iid:
                return f"rented instance {iid}"
            if self.acts.settings.dry_run:
                return "dry-run: not rented"
            return "create outcome unknown: resolving by label (do not deploy again)"
        if cmd.kind == "destroy":
            await self.destroy(
                int(args["instance_id"]), "manual", str(args.get("reason") or "manually destroyed")
            )
            return f"destroyed instance {args['instance_id']}"
        if cmd.kind == "ignore":
            machine = int(args["machine_id"])
            host_id, gpu_name = self._offered(machine)
            await self.acts.ban(
                machine, str(args["reason"]), "manual", host_id=host_id, gpu_name=gpu_name
            )
            return f"machine {args['machine_id']} ignored"
        if cmd.kind == "unignore":
            if not await self.store.badlist.remove(int(args["machine_id"]), now=self.clock()):
                raise EngineError(f"machine {args['machine_id']} is not on the bad list")
            return f"machine {args['machine_id']} unignored"
        raise EngineError(f"unknown command {cmd.kind}")

    def _offered(self, machine_id: int) -> tuple[int | None, str | None]:
        """The host and GPU of a machine as the market lists it: an ignore from the offers
        pane names a machine never rented, whose bad-list entry would say neither (the
        machine's instances fill them in otherwise: acts.ban)."""
        for ranked in self.fleet.ranked_offers():
            if ranked.offer.machine_id == machine_id:
                return ranked.offer.host_id, ranked.offer.gpu_name
        return None, None

    async def destroy(self, instance_id: int, kind: str, reason: str) -> None:
        rec = await self.store.instances.get(instance_id)
        if rec is None:
            raise EngineError(f"instance {instance_id} is not one of vastui's")
        if rec.killed:
            raise EngineError(f"instance {instance_id} is already destroyed")
        if not self.acts.ours(rec.label):
            raise EngineError(f"instance {instance_id} has no label of this fleet; not destroying")
        if not await self.acts.kill(rec, policy.Kill(kind, reason)):
            why = self.acts.last_error or "retrying"
            raise EngineError(
                f"destroy of {instance_id} did not go through yet ({why}); it is retried"
            )

    async def deploy(self, offer_id: int, reason: str) -> int | None:
        view = await self.fleet.fleet_view()
        full = provision.manual_rent_refusal(view)
        if full is not None:
            raise EngineError(full)
        offer = await self._find_offer(offer_id)
        if offer is None:
            raise EngineError(f"offer {offer_id} is not on the market (any more)")
        return await self.acts.rent(offer, reason)

    async def _find_offer(self, offer_id: int) -> Offer | None:
        for ranked in self.fleet.ranked_offers():
            if ranked.offer.id == offer_id:
                return ranked.offer
        result = await self.client.search_offers(
            f"id={offer_id} rentable=any verified=any",
            limit=5,
            allocated_storage=self.acts.config.fleet.disk_gb,
        )
        return next((o for o in result.offers if o.id == offer_id), None)
