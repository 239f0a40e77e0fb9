"""What a console that runs no engine reads (the attached and the read-only source share it):
the store, its own Vast client for offer searches, its own SSH pool for log streams and cuzk
status, and the headless engine's log file."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

from vastui.backend import Options, make_client
from vastui.config import state_dir
from vastui.console.snapshot import Snapshot
from vastui.console.sources.enginelog import EngineLogFile
from vastui.console.sources.storeside import OfferSearch, read_snapshot
from vastui.console.sources.workers import (
    cuzk_status_of,
    key_path,
    ssh_command,
    stream_worker_logs,
    worker_of,
)
from vastui.domain.engine_state import EngineStatus
from vastui.domain.worker import InstanceRecord
from vastui.engine.keys import ensure_ssh_key
from vastui.engine.ranking import RankedOffer
from vastui.ssh import SshPool, StorePins
from vastui.store import Store
from vastui.vast.client import VastClient


class Bystander:
    """The reads of a console beside an engine it does not run (or none at all)."""

    def __init__(self, opts: Options) -> None:
        self.opts = opts
        self.store: Store | None = None
        self.client: VastClient | None = None  # our own, for offer searches
        self.ssh: SshPool | None = None  # our own, for log streams
        self._search = OfferSearch(opts)
        self._log = EngineLogFile(state_dir() / ("engine-demo.log" if opts.demo else "engine.log"))
        self._status: EngineStatus | None = None
        self._stack = contextlib.AsyncExitStack()

    async def _open_links(self, store: Store) -> None:
        """The store (already open), our own client and SSH pool, closed by `close`."""
        self.store = store
        self._stack.push_async_callback(store.close)
        # With --demo, the headless demo's simulated cloud lives in its process: this searches
        # a copy of its own (vastui/worlds.py).
        self.client = make_client(self.opts)
        self._stack.push_async_callback(self.client.aclose)
        key, _ = ensure_ssh_key(self.opts.config)
        self.ssh = SshPool(client_key=key, pins=StorePins(store))
        self._stack.push_async_callback(self.ssh.close_all)

    async def close(self) -> None:
        await self._stack.aclose()

    async def snapshot(self) -> Snapshot:
        assert self.store is not None
        return await read_snapshot(self.store, self._now_for)

    def _now_for(self, status: EngineStatus | None) -> float:
        self._status = status
        return self.now()

    def now(self) -> float:
        """The wall clock, or, beside a demo engine, the time of its last published cycle."""
        if self.opts.demo and self._status is not None:
            return self._status.updated_at
        return time.time()

    async def _search_offers(self, force: bool) -> list[RankedOffer]:
        assert self.client is not None and self.store is not None
        return await self._search.search(self.client, self.store, self.now(), force)

    @property
    def view_filter(self) -> str:
        return self._search.view_filter

    def set_filter(self, text: str) -> None:
        self._search.set_filter(text)

    def ssh_command(self, rec: InstanceRecord) -> str | None:
        return ssh_command(key_path(self.opts), rec)

    async def cuzk_status(self, rec: InstanceRecord) -> dict[str, Any]:
        return await cuzk_status_of(worker_of(self.ssh, rec), rec)

    def stream_logs(
        self, rec: InstanceRecord, source: str, tail: int = 500
    ) -> AsyncIterator[list[str]]:
        return stream_worker_logs(worker_of(self.ssh, rec), rec, source, tail)

    def new_engine_log_lines(self) -> list[str]:
        return self._log.new_lines()

    def rewind_engine_log(self) -> None:
        self._log.rewind()

    def wake(self) -> None:
        return None  # the engine is another process's: it steps on its own

    def own_live_instances(self, snapshot: Snapshot) -> list[InstanceRecord]:
        return []  # its engine, not this console, supervises them

    def can_hand_over(self) -> bool:
        return False
