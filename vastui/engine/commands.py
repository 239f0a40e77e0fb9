"""The operator's commands (the console, `vastui` subcommands through the store): deploy an
offer, destroy an instance, ignore or unignore a machine. The engine carries them out on its
step, under its lock, and answers each in the store; a command older than COMMAND_TTL (sent
while no engine ran) is answered as expired, not done.
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
from vastui.store import Store, StoreError
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

    async def run_pending(self) -> None:
        """Carry out the commands waiting in the store (the engine's lock held), each
        answered in the store: done, refused with one line, or expired."""
        for cmd in await self.store.commands.claim():
            waited = time.time() - cmd.created_at
            if waited > COMMAND_TTL:
                await self.store.commands.finish(
                    cmd.id, False, f"expired: sent {waited:.0f} s ago while no engine ran; not done"
                )
                log.warning(
                    "command %s (%s) expired after %.0f s unclaimed", cmd.id, cmd.kind, waited
                )
                continue
            try:
                result = await self._execute(cmd)
                await self.store.commands.finish(cmd.id, True, result)
            except (EngineError, VastError, StoreError, ValueError, KeyError) as exc:
                await self.store.commands.finish(cmd.id, False, sanitize_line(str(exc), 300))
            except Exception as exc:  # a bad command must fail, not take the engine down
                log.exception("command %s (%s) failed", cmd.id, cmd.kind)
                await self.store.commands.finish(
                    cmd.id, False, sanitize_line(f"{type(exc).__name__}: {exc}", 300)
                )

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
