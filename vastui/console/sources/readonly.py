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


class ReadOnlySource(Bystander):
    async def start(self) -> None:
        try:
            store = await Store.open(self.opts.db_path, migrate=False)
        except StoreNotCurrent as exc:
            if not exc.absent:
                raise  # older than this code: one line, nothing migrated
            store = await Store.empty(self.opts.db_path)
        await self._open_links(store)

    def badge(self) -> Badge | None:
        return Badge("NO ENGINE", "black on red")

    def started_notice(self) -> tuple[str, str] | None:
        return None

    @property
    def detached_reason(self) -> str | None:
        return None  # nothing was ever attached

    def freshness(self, snapshot: Snapshot) -> Freshness | None:
        return None

    async def offers(self, force: bool = False) -> list[RankedOffer]:
        return await self._search_offers(force)

    async def submit(self, kind: str, **args: Any) -> int:
        raise PermissionError("read-only console: actions are disabled")

    async def wait_command(self, command_id: int, timeout: float = 60.0) -> tuple[bool, str]:
        return False, "read-only console: nothing was sent"
