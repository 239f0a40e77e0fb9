"""The CPU one coroutine costs, not its neighbours' (issue 32: the fleet bench timed a step by
the process's CPU, which counted every follower's work done meanwhile).

`measured(coro, meter)` drives ``coro`` and adds to ``meter.main`` the CPU of this thread while
``coro`` itself runs (each resume, from its `send` to its next suspension: the event loop's
other tasks run between resumes, not within), and to ``meter.sql`` the CPU aiosqlite's worker
thread spends on the queries ``coro`` sent (`install_sql_meter` wraps the function each query
queues, when the task queueing it is the one measured). HTTP parsing, offer decoding, ranking
and the reconcile's Python run inside the resumes; socket reads the event loop does for it
between resumes are not counted (small beside what the step does with the bytes).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import time
import types
from collections.abc import Callable, Coroutine, Generator
from dataclasses import dataclass, field
from typing import Any

Clock = Callable[[], float]


@dataclass
class Meter:
    """CPU seconds of one measured coroutine: its own resumes, and its queries' SQL."""

    clock: Clock = time.thread_time
    main: float = 0.0
    sql: float = 0.0
    queries: int = 0  # the queries it sent, timed
    task: asyncio.Task[Any] | None = field(default=None, repr=False)

    @property
    def total(self) -> float:
        return self.main + self.sql


_METER: contextvars.ContextVar[Meter | None] = contextvars.ContextVar("owncpu", default=None)


@types.coroutine
def _driven(coro: Coroutine[Any, Any, Any], meter: Meter) -> Generator[Any, Any, Any]:
    """Drive ``coro`` as the task would, timing each resume with ``meter.clock``."""
    inner = coro.__await__()
    sent: Any = None
    thrown: BaseException | None = None
    while True:
        started = meter.clock()
        try:
            yielded = inner.send(sent) if thrown is None else inner.throw(thrown)
        except StopIteration as done:
            meter.main += meter.clock() - started
            return done.value
        except BaseException:
            meter.main += meter.clock() - started
            raise
        meter.main += meter.clock() - started
        sent, thrown = None, None
        try:
            sent = yield yielded
        except BaseException as exc:  # a cancellation, passed on as the task would
            thrown = exc


async def measured(coro: Coroutine[Any, Any, Any], meter: Meter) -> Any:
    """Await ``coro``, its own CPU added to ``meter`` (queries too, once `install_sql_meter`
    ran)."""
    meter.task = asyncio.current_task()
    token = _METER.set(meter)
    try:
        return await _driven(coro, meter)
    finally:
        _METER.reset(token)
        meter.task = None


def install_sql_meter() -> None:
    """Count aiosqlite's thread time for the queries a measured task queues. Idempotent."""
    from aiosqlite import core

    original = core.Connection._execute
    if getattr(original, "_owncpu", False):
        return

    @functools.wraps(original)
    async def _execute(self: Any, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        meter = _METER.get()
        # A task the measured one started inherits its context: only the measured task counts.
        if meter is None or meter.task is not asyncio.current_task():
            return await original(self, fn, *args, **kwargs)

        meter.queries += 1

        def timed(*a: Any, **k: Any) -> Any:
            started = time.thread_time()  # in aiosqlite's thread: its own CPU clock
            try:
                return fn(*a, **k)
            finally:
                meter.sql += time.thread_time() - started

        return await original(self, timed, *args, **kwargs)

    _execute._owncpu = True  # type: ignore[attr-defined]
    core.Connection._execute = _execute  # type: ignore[method-assign]
