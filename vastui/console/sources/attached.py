"""`AttachedSource`: a headless engine (`vastui --engine-only`) holds the database's lease. The
console starts no engine: it reads that engine's state from the store, shows the offers it
published, and sends its commands (deploy, destroy, ignore, unignore) through the store's
command table. It notices within seconds that the engine is gone (its lease released or
taken over, its process dead on this host, its heartbeat stale) and then refuses commands."""

from __future__ import annotations

import logging
import time
from typing import Any

from vastui.backend import Options
from vastui.console.snapshot import Snapshot
from vastui.console.sources.bystander import Bystander
from vastui.console.sources.protocol import Badge, Freshness
from vastui.console.sources.storeside import wait_command
from vastui.domain.engine_state import Lease
from vastui.engine.ranking import RankedOffer
from vastui.sanitize import sanitize_line
from vastui.store import Store
from vastui.store.lease import holder_is_dead

log = logging.getLogger("vastui.console")

HEARTBEAT_STALE = 4.0  # seconds without a lease heartbeat before the engine counts as gone
HEARTBEAT_WARN = 10.0  # the strip warns when the last heartbeat is older


class AttachedSource(Bystander):
    """The console beside a headless engine. `holder`: the lease it attaches to (None: the
    one found when it starts)."""

    def __init__(self, opts: Options, holder: Lease | None = None, *, read_only: bool = False):
        super().__init__(opts)
        self.attached_to = holder
        self.read_only = read_only
        self._gone: str | None = None

    async def start(self) -> None:
        # Opened as a reader: a console that attaches never migrates the database under it.
        store = await Store.open(self.opts.db_path, migrate=False)
        await self._open_links(store)
        if self.attached_to is None:
            self.attached_to = await store.lease.holder()
        self._observe(self.attached_to)

    # -- what the console says about it ---------------------------------------------------

    def badge(self) -> Badge | None:
        if self._gone is not None:
            return Badge("DETACHED", "bold white on red")
        return Badge("ATTACHED", "black on green")

    def started_notice(self) -> tuple[str, str] | None:
        holder = self.attached_to
        if holder is None:
            return None
        return "Attached", (
            f"attached to the headless engine (pid {holder.pid} on "
            f"{sanitize_line(holder.hostname, 60)}); commands go through the store"
        )

    @property
    def detached_reason(self) -> str | None:
        return self._gone

    def freshness(self, snapshot: Snapshot) -> Freshness | None:
        if snapshot.lease is None:
            return None
        return Freshness("engine ♥", time.time() - snapshot.lease.heartbeat_at, HEARTBEAT_WARN)

    # -- reads ----------------------------------------------------------------------------

    async def snapshot(self) -> Snapshot:
        snap = await super().snapshot()
        released = False
        if snap.lease is None and self.store is not None:
            released = await self.store.lease.recorded() is None
        self._observe(snap.lease, released=released)
        return snap

    def _observe(self, lease: Lease | None, *, released: bool = False) -> None:
        """The engine we attach to: gone within seconds, not after its lease lapses."""
        if lease is None:
            # a clean stop deletes its lease row; a lapsed one stays until another takes it
            self._detach("it stopped and released its lease" if released else "its lease lapsed")
            return
        if self.attached_to is not None and lease.owner != self.attached_to.owner:
            self.attached_to = lease  # a new engine took over: follow it
        if holder_is_dead(lease):
            self._detach(f"its process (pid {lease.pid}) is not running")
            return
        beat = time.time() - lease.heartbeat_at
        if beat > HEARTBEAT_STALE:
            self._detach(f"no heartbeat for {beat:.0f} s")
            return
        self._gone = None

    def _detach(self, why: str) -> None:
        if self._gone is None:
            log.warning("the attached engine is gone: %s", why)
        self._gone = why

    async def offers(self, force: bool = False) -> list[RankedOffer]:
        """The engine's published list, or our own search (this view's own filter, or
        nothing published yet)."""
        if not self._search.own_filter:
            assert self.store is not None
            published = await self._search.published(self.store)
            if published is not None:
                return published
        return await self._search_offers(force)

    # -- actions --------------------------------------------------------------------------

    async def submit(self, kind: str, **args: Any) -> int:
        if self.read_only:
            raise PermissionError("read-only console: actions are disabled")
        if self._gone is not None:
            raise ConnectionError(
                f"no engine to carry this out ({self._gone}): start "
                "`vastui --engine-only`, or restart the console to run one"
            )
        assert self.store is not None
        return await self.store.commands.submit(kind, args)

    async def wait_command(self, command_id: int, timeout: float = 60.0) -> tuple[bool, str]:
        assert self.store is not None
        return await wait_command(self.store, command_id, timeout, lambda: self._gone)
