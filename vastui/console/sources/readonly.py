"""`ReadOnlySource`: `--read-only` and no engine holds the database. The console shows the store
as it is (an empty one when there is no database yet: it never makes a file behind an
engine's back) and searches offers itself; it runs no engine and carries out nothing."""

from __future__ import annotations

from typing import Any

from vastui.console.snapshot import Snapshot
from vastui.console.sources.bystander import Bystander
from vastui.console.sources.protocol import Badge, Freshness
from vastui.engine.ranking import RankedOffer
from vastui.store import Store, StoreNotCurrent

HISTORY = (
    "a finished demo run: its simulated cloud ended with it; its workers as its engine last "
    "saw them, its offers as it last ranked them"
)


class ReadOnlySource(Bystander):
    """``history``: a demo database that an engine ran and none holds now is a finished run
    (the demo's cloud lives and dies in its engine's process): nothing of it runs now, and a
    search would show another market (a new world's), so the offers are the ones its engine
    last published."""

    history: str | None = None

    async def snapshot(self) -> Snapshot:
        snap = await super().snapshot()
        snap.history = self.history
        return snap

    async def start(self) -> None:
        try:
            store = await Store.open(self.opts.db_path, migrate=False)
        except StoreNotCurrent as exc:
            if not exc.absent:
                raise  # older than this code: one line, nothing migrated
            store = await Store.empty(self.opts.db_path)
        if self.opts.demo and await store.status.get() is not None:
            self.history = HISTORY
        await self._open_links(store)

    def badge(self) -> Badge | None:
        if self.history is not None:
            return Badge("HISTORY", "black on magenta")
        return Badge("NO ENGINE", "black on red")

    def started_notice(self) -> tuple[str, str] | None:
        return None

    @property
    def detached_reason(self) -> str | None:
        return None  # nothing was ever attached

    def freshness(self, snapshot: Snapshot) -> Freshness | None:
        return None

    async def offers(self, force: bool = False) -> list[RankedOffer]:
        if self.history is not None:  # a search now would show another world's market
            assert self.store is not None
            return await self._search.published(self.store) or []
        return await self._search_offers(force)

    async def submit(self, kind: str, **args: Any) -> int:
        raise PermissionError("read-only console: actions are disabled")

    async def wait_command(self, command_id: int, timeout: float = 60.0) -> tuple[bool, str]:
        return False, "read-only console: nothing was sent"
