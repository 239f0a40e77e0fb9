"""The operator's commands on their way into the store, whatever the console's source.

A command the database refuses for now (StoreBusy: another connection held the write lock past
the busy timeout, and nothing was written) is kept here and sent again until the store has
it: never dropped, never stored twice (a refused write wrote nothing; the submit is one
statement: store/commands.py). Once kept, it also waits through "no engine to carry it out"
(ConnectionError): the lock that held it back holds the engine's heartbeat back too, and an
attached console takes the engine for gone meanwhile. A new command's refusals (no engine, a
read-only console, bad text) are final and said as they are. What waits is said while it
waits, and listed for the quit dialog. No Textual here: the app shows what it is told.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable
from typing import Any

from vastui.store import StoreBusy

RETRY_S = 1.0  # between tries; each try itself waits the store's busy timeout for the lock

Submit = Callable[..., Awaitable[int]]


class Outbox:
    """Commands sent through `submit` (a source's), each kept until stored."""

    def __init__(
        self,
        submit: Submit,
        *,
        retry_s: float = RETRY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._submit = submit
        self.retry_s = retry_s
        self._clock = clock
        self._ids = itertools.count()
        self._waiting: dict[int, str] = {}

    @property
    def waiting(self) -> list[str]:
        """What is kept, waiting for the database, in the order it was sent."""
        return list(self._waiting.values())

    async def send(
        self,
        what: str,
        kind: str,
        args: dict[str, Any],
        on_wait: Callable[[float, str], None],
    ) -> int:
        """The command's id once the store has it. `on_wait(seconds waited so far, for what)`
        after every try that kept it; any other failure is raised, the command not sent."""
        key = next(self._ids)
        started = self._clock()
        try:
            while True:
                try:
                    return await self._submit(kind, **args)
                except StoreBusy:
                    self._waiting[key] = what
                    on_wait(self._clock() - started, "the database")
                except ConnectionError as exc:
                    if key not in self._waiting:
                        raise
                    on_wait(self._clock() - started, f"the engine ({exc})")
                await asyncio.sleep(self.retry_s)
        finally:
            self._waiting.pop(key, None)
