"""Typed helpers over a :class:`WorkerConnection` for the worker's ``workerctl`` commands.

``workerctl status`` → one JSON object; ``workerctl events [--follow] [--after N]`` → JSON lines
(``--after N`` skips the first N lines); ``workerctl logs SOURCE [--follow] [--tail N]``;
``workerctl cuzk-status`` and ``workerctl cuzk-counters`` → one JSON object each. Every argument
is shell-quoted; every string that comes back is sanitised.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shlex
from collections.abc import AsyncGenerator
from typing import Any

from vastui.domain.reports import WorkerEvent, parse_event
from vastui.sanitize import sanitize_line

from .connection import WorkerConnection
from .errors import SshConnectionLost, WorkerProtocolError
from .lines import LogBatch, refuse_json_constant, sanitize_json

log = logging.getLogger("vastui.ssh")

LOG_SOURCES: tuple[str, ...] = ("setup", "paramfetch", "benchmark", "cuzk", "curio")


MAX_EVENT_DEPTH = 32


def _depth(value: Any) -> int:
    """How deeply lists and objects nest in a parsed JSON value (iterative: no recursion)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, level + 1) for child in children)
    return deepest


def workerctl(*args: object) -> str:
    """The shell command line for ``workerctl ARGS...``, every argument quoted."""
    return " ".join(shlex.quote(str(a)) for a in ("workerctl", *args))


class Worker:
    """``workerctl`` over one worker's SSH connection."""

    def __init__(
        self, conn: WorkerConnection, *, timeout: float = 20.0, max_resumes: int | None = None
    ) -> None:
        self.conn = conn
        self.timeout = timeout
        # Consecutive drops without a single new line before events() gives up.
        self.max_resumes = conn.max_attempts if max_resumes is None else max_resumes

    @property
    def instance_id(self) -> int:
        return self.conn.instance_id

    async def _json_object(self, name: str) -> dict[str, Any]:
        """One read, on the worker's session channel (vastui/ssh/session.py)."""
        command = workerctl(name)
        value = await self.conn.reads.ask(name, timeout=self.timeout)
        if not isinstance(value, dict):
            raise WorkerProtocolError(
                self.instance_id,
                f"{command} returned JSON {type(value).__name__}, expected an object",
            )
        return value

    async def status(self) -> dict[str, Any]:
        return await self._json_object("status")

    async def cuzk_status(self) -> dict[str, Any]:
        return await self._json_object("cuzk-status")

    async def cuzk_counters(self) -> dict[str, Any]:
        """The daemon's pid, liveness, /status and gRPC proof counters (see the worker README)."""
        return await self._json_object("cuzk-counters")

    async def events(self, after: int = 0) -> AsyncGenerator[WorkerEvent, None]:
        """The events alone; see :meth:`positioned_events`."""
        async for _position, event in self.positioned_events(after):
            yield event

    async def positioned_events(
        self, after: int = 0
    ) -> AsyncGenerator[tuple[int, WorkerEvent], None]:
        """Follow the worker's event log from line ``after``, across reconnects.

        Each line is one JSON object, parsed here once into a WorkerEvent; other lines are
        skipped with a warning (they still count as lines, so ``--after`` stays aligned). When
        the connection drops the stream resumes with ``--after <lines seen>``: nothing is
        delivered twice and nothing is lost. Gives up
        (re-raising) after ``max_resumes`` consecutive drops without progress, or as soon as
        reconnecting itself fails (:class:`SshUnreachable`, :class:`HostKeyChanged`, ...).
        """
        if isinstance(after, bool) or not isinstance(after, int) or after < 0:
            raise ValueError(f"after must be a non-negative integer, got {after!r}")
        position = after
        drops = 0
        while True:
            command = workerctl("events", "--follow", "--after", position)
            try:
                async with contextlib.aclosing(self.conn.iter_text_lines(command)) as lines:
                    async for text, cut in lines:
                        position += 1
                        drops = 0
                        event = self._parse_event(text, cut, position)
                        if event is not None:
                            # The line number, not a count of events: `--after` counts lines.
                            yield position, event
                return  # the worker ended the stream normally
            except SshConnectionLost as e:
                drops += 1
                if drops > self.max_resumes:
                    raise
                log.info(
                    "instance %s: event stream dropped after line %d (%s); resuming",
                    self.instance_id,
                    position,
                    e,
                )
                await self.conn.backoff_sleep(drops)

    def _parse_event(self, text: str, cut: bool, line_no: int) -> WorkerEvent | None:
        if not text.strip():
            return None
        if cut:
            log.warning("instance %s: skipping over-long event line %d", self.instance_id, line_no)
            return None
        try:
            value = json.loads(text, parse_constant=refuse_json_constant)
            if isinstance(value, dict):
                # json.loads nests ~1000 levels; the sanitiser, and the engine's own walks of an
                # event (json.dumps of a result), recurse too: an event is shallow or nothing.
                if _depth(value) > MAX_EVENT_DEPTH:
                    raise ValueError(f"nested deeper than {MAX_EVENT_DEPTH} levels")
                return parse_event(sanitize_json(value))
        except (ValueError, RecursionError):
            log.warning(
                "instance %s: skipping non-JSON event line %d: %s",
                self.instance_id,
                line_no,
                sanitize_line(text, 120),
            )
            return None
        log.warning(
            "instance %s: skipping event line %d: JSON %s, expected an object",
            self.instance_id,
            line_no,
            type(value).__name__,
        )
        return None

    async def log_batches(
        self, source: str, follow: bool = True, tail: int = 200, *, keep: int | None = None
    ) -> AsyncGenerator[LogBatch, None]:
        """Sanitised lines of one worker log, a list per read (a console appends each list at
        once); with ``follow`` it runs until closed. ``keep``: read ahead, and a batch holds at
        most the newest ``keep`` lines of what came since the last (``batch.skipped`` counts
        the others): a reader slower than the log skips lines instead of falling behind."""
        if source not in LOG_SOURCES:
            raise ValueError(f"unknown log source {source!r}; expected one of {LOG_SOURCES}")
        if isinstance(tail, bool) or not isinstance(tail, int) or tail < 0:
            raise ValueError(f"tail must be a non-negative integer, got {tail!r}")
        args: list[object] = ["logs", source, "--tail", tail]
        if follow:
            args.append("--follow")
        lines = self.conn.follow_batches(workerctl(*args), keep=keep)
        async with contextlib.aclosing(lines) as batches:
            async for batch in batches:
                yield batch

    async def logs(
        self, source: str, follow: bool = True, tail: int = 200
    ) -> AsyncGenerator[str, None]:
        """Sanitised lines of one worker log; with ``follow`` it runs until closed."""
        async with contextlib.aclosing(self.log_batches(source, follow, tail)) as batches:
            async for batch in batches:
                for line in batch:
                    yield line
