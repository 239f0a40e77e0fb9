"""`OwnEngineSource`: no engine holds the database's lease, so the console runs one in-process
(the same `engine_runtime` the headless mode uses) and reads the store beside it."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from vastui.backend import Options
from vastui.config import load_api_key
from vastui.console.snapshot import Snapshot
from vastui.console.sources.enginelog import RingLog
from vastui.console.sources.protocol import Badge, Freshness
from vastui.console.sources.storeside import OfferSearch, read_snapshot, wait_command
from vastui.console.sources.workers import (
    cuzk_status_of,
    key_path,
    ssh_command,
    stream_worker_logs,
    worker_of,
)
from vastui.domain.worker import InstanceRecord
from vastui.engine.engine import Engine
from vastui.engine.ranking import RankedOffer
from vastui.engine.runtime import EngineRuntime, RunOptions, engine_runtime
from vastui.store import Store

RuntimeFactory = Callable[[Options, RunOptions], AbstractAsyncContextManager[EngineRuntime]]
ENGINE_STOP_S = 15.0  # a stopping engine finishes its step at most this long
VAST_STALE_S = 120.0  # the strip warns when Vast was last listed longer ago


class OwnEngineSource:
    """The console's own engine: it rents, follows and destroys; the console reads the store
    beside it (a reader connection of its own) and its commands go through the store too."""

    def __init__(
        self,
        opts: Options,
        run: RunOptions | None = None,
        *,
        runtime: RuntimeFactory = engine_runtime,
    ) -> None:
        self.opts = opts
        self.run_options = run or RunOptions(mode="console")
        self._runtime_factory = runtime
        self.runtime: EngineRuntime | None = None
        self.store: Store | None = None
        self._search = OfferSearch(opts)
        self._log = RingLog(self.now, [_api_key()])
        self._stack = contextlib.AsyncExitStack()
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def engine(self) -> Engine:
        if self.runtime is None:
            raise RuntimeError("the console's engine has not started")
        return self.runtime.engine

    async def start(self) -> None:
        self._log.install()
        self._stack.callback(self._log.uninstall)
        self.runtime = await self._stack.enter_async_context(
            self._runtime_factory(self.opts, self.run_options)
        )
        # The engine has created or migrated the database: the console reads it as a reader.
        self.store = await Store.open(self.opts.db_path, migrate=False)
        self._stack.push_async_callback(self.store.close)
        self._task = asyncio.create_task(self.runtime.engine.run(self._stop))

    async def close(self) -> None:
        self._stop.set()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                async with asyncio.timeout(ENGINE_STOP_S):
                    await self._task
        await self._stack.aclose()

    # -- what the console says about it ---------------------------------------------------

    def badge(self) -> Badge | None:
        if self.detached_reason is not None:
            return Badge("DETACHED", "bold white on red")
        return None

    def started_notice(self) -> tuple[str, str] | None:
        archived = self.runtime.archived if self.runtime is not None else None
        if archived is None:
            return None
        return "A new demo", (
            "this run starts from a clean fleet; the last run's database is kept: "
            f"vastui --demo --read-only --db {archived}"
        )

    @property
    def detached_reason(self) -> str | None:
        """Our engine stopped itself (its store dead, its lease lost)."""
        runtime = self.runtime
        if runtime is None or runtime.engine.fatal is None:
            return None
        return f"this console's engine stopped: {runtime.engine.fatal}"

    def freshness(self, snapshot: Snapshot) -> Freshness | None:
        seen = self.runtime.engine.vast_seen_at if self.runtime is not None else None
        return None if seen is None else Freshness("vast", time.time() - seen, VAST_STALE_S)

    # -- reads ----------------------------------------------------------------------------

    async def snapshot(self) -> Snapshot:
        assert self.store is not None
        return await read_snapshot(self.store, lambda _status: self.now())

    async def offers(self, force: bool = False) -> list[RankedOffer]:
        """The engine's own list, or (with this view's own filter) our own search."""
        if not self._search.own_filter:
            return await self.engine.refresh_offers(force=force)
        assert self.store is not None
        return await self._search.search(self.engine.client, self.store, self.now(), force)

    @property
    def view_filter(self) -> str:
        return self._search.view_filter

    def set_filter(self, text: str) -> None:
        self._search.set_filter(text)

    def now(self) -> float:
        return float(self.runtime.engine.clock()) if self.runtime is not None else time.time()

    def ssh_command(self, rec: InstanceRecord) -> str | None:
        return ssh_command(key_path(self.opts), rec)

    async def cuzk_status(self, rec: InstanceRecord) -> dict[str, Any]:
        return await cuzk_status_of(worker_of(self.engine.ssh, rec), rec)

    def stream_logs(
        self, rec: InstanceRecord, source: str, tail: int = 500
    ) -> AsyncIterator[list[str]]:
        return stream_worker_logs(worker_of(self.engine.ssh, rec), rec, source, tail)

    def new_engine_log_lines(self) -> list[str]:
        return self._log.new_lines()

    def rewind_engine_log(self) -> None:
        self._log.rewind()

    # -- actions --------------------------------------------------------------------------

    async def submit(self, kind: str, **args: Any) -> int:
        reason = self.detached_reason
        if reason is not None:
            raise ConnectionError(
                f"no engine to carry this out ({reason}): start `vastui --engine-only`, or "
                "restart the console to run one"
            )
        assert self.store is not None
        command_id = await self.store.commands.submit(kind, args)
        self.engine.wake()
        return command_id

    async def wait_command(self, command_id: int, timeout: float = 60.0) -> tuple[bool, str]:
        assert self.store is not None
        return await wait_command(self.store, command_id, timeout, lambda: self.detached_reason)

    def wake(self) -> None:
        if self.runtime is not None:
            self.runtime.engine.wake()

    # -- quitting -------------------------------------------------------------------------

    def own_live_instances(self, snapshot: Snapshot) -> list[InstanceRecord]:
        if self.runtime is None:
            return []
        return [r for r in snapshot.instances if not r.killed and r.source == "vastui"]

    def can_hand_over(self) -> bool:
        """Not in the demo, whose cloud lives in this process."""
        return self.runtime is not None and not self.opts.demo


def _api_key() -> str:
    """The account's key, to keep out of the Logs pane ("" when there is none: the demo)."""
    try:
        return load_api_key()[0] or ""
    except Exception:  # a bad key file: the client says so itself
        return ""
