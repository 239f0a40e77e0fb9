"""Following the workers over SSH: one task per live worker reading its events, one per proving
worker reading its cuzk counters. Followers only observe: every event and every reading goes to
the engine's handlers, which decide (under the engine's lock) and act."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from vastui.domain.worker import InstanceRecord
from vastui.engine import production
from vastui.ssh import SshError, SshPool
from vastui.ssh.errors import SshUnreachable
from vastui.store import Store

log = logging.getLogger("vastui.engine")

EventHandler = Callable[..., Awaitable[bool]]  # (vast_id, event, position=) → still live
# (instance, reading or None, unreachable: no SSH connection at all, when it was read)
CountersHandler = Callable[[int, "production.Reading | None", bool, float], Awaitable[bool]]


class Followers:
    def __init__(
        self,
        ssh: SshPool | None,
        store: Store,
        *,
        on_event: EventHandler,
        on_counters: CountersHandler,
        on_status: Callable[[int, dict[str, Any]], Awaitable[None]],
        prove_poll: Callable[[], float],
        on_crash: Callable[[BaseException], None],
        clock: Callable[[], float],
    ) -> None:
        self.ssh = ssh
        self.clock = clock  # the engine's: a reading is dated when it arrives
        self.store = store
        self.on_event = on_event
        self.on_counters = on_counters
        self.on_status = on_status  # what the worker says of itself: the engine records it
        self.prove_poll = prove_poll
        self.on_crash = on_crash  # a follower's unexpected error: the engine judges it
        self._watchers: dict[int, asyncio.Task[None]] = {}
        self._monitors: dict[int, asyncio.Task[None]] = {}
        # every follower task until it ends, those ``stop`` let go of too (a follower that
        # destroys its own worker stops following it and goes on to record the destroy):
        # ``close`` waits for them all, so that none writes after the store is closed
        self._running: set[asyncio.Task[None]] = set()

    def ensure(self, rec: InstanceRecord) -> None:
        """A watcher for every reachable live worker, a monitor for every proving one."""
        if self.ssh is None or rec.ssh_host is None:
            return
        endpoint = (rec.ssh_host, int(rec.ssh_port or 22))
        if rec.state != "loading":
            self._start(self._watchers, rec.vast_id, self._watch(rec.vast_id, endpoint), "watch")
        if rec.state == "proving":
            self._start(
                self._monitors, rec.vast_id, self._monitor(rec.vast_id, endpoint), "monitor"
            )

    def _start(
        self, tasks: dict[int, asyncio.Task[None]], vast_id: int, coro: Any, name: str
    ) -> None:
        task = tasks.get(vast_id)
        if task is not None and not task.done():
            coro.close()
            return
        task = asyncio.create_task(coro, name=f"{name}-{vast_id}")
        tasks[vast_id] = task
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    async def stop(self, vast_id: int) -> None:
        """Stop following one worker and close its SSH connection (it is being destroyed)."""
        for tasks in (self._watchers, self._monitors):
            task = tasks.pop(vast_id, None)
            if task is not None and task is not asyncio.current_task():
                task.cancel()
        if self.ssh is not None:
            await self.ssh.close_instance(vast_id)

    async def close(self) -> None:
        """Every follower ended (cancelled, and waited for: those ``stop`` let go of too), then
        the SSH connections closed."""
        tasks = [t for t in self._running if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._watchers.clear()
        self._monitors.clear()
        if self.ssh is not None:
            await self.ssh.close_all()

    async def _watch(self, vast_id: int, endpoint: tuple[str, int]) -> None:
        """Follow one worker's events; each is decided as it arrives."""
        assert self.ssh is not None
        worker = self.ssh.worker(vast_id, endpoint)
        try:
            try:
                await self.on_status(vast_id, await worker.status())
            except SshError as exc:
                log.info("instance %s: status unavailable yet: %s", vast_id, exc)
            rec = await self.store.instances.get(vast_id)
            if rec is None or rec.killed:
                return
            async for position, event in worker.positioned_events(after=rec.events_seen):
                if not await self.on_event(vast_id, event, position=position):
                    return
        except asyncio.CancelledError:
            raise
        except SshError as exc:
            log.info("instance %s: worker stream ended: %s", vast_id, exc)
        except Exception as exc:
            self.on_crash(exc)
        finally:
            if self._watchers.get(vast_id) is asyncio.current_task():
                self._watchers.pop(vast_id, None)

    async def _monitor(self, vast_id: int, endpoint: tuple[str, int]) -> None:
        """Read a proving worker's cuzk counters on a fixed cadence and decide on each."""
        assert self.ssh is not None
        worker = self.ssh.worker(vast_id, endpoint)
        try:
            while True:
                unreachable = False
                sent = self.clock()
                try:
                    raw = await worker.cuzk_counters()
                    reading: production.Reading | None = replace(
                        production.Reading.parse(raw), latency=self.clock() - sent
                    )
                except SshUnreachable as exc:
                    # No connection at all: says nothing of the daemon (engine decides whose).
                    log.info("instance %s: unreachable over SSH: %s", vast_id, exc)
                    reading, unreachable = None, True
                except SshError as exc:
                    log.info("instance %s: cuzk counters unavailable: %s", vast_id, exc)
                    reading = None
                # Dated now, not when the engine gets to it: a step holding the engine's lock
                # would otherwise stretch the time between readings and bend the rate.
                if not await self.on_counters(vast_id, reading, unreachable, self.clock()):
                    return
                await asyncio.sleep(self.prove_poll())
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.on_crash(exc)
        finally:
            if self._monitors.get(vast_id) is asyncio.current_task():
                self._monitors.pop(vast_id, None)
