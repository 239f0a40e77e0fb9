"""Alerts without Prometheus: a webhook (a JSON POST) and/or a local command, for a small
operator who runs no Alertmanager.

Two halves. :class:`AlertBook` is pure: given which conditions hold now (``key → one line``) it
says what to send, each condition once when it starts (``firing``) and once when it ends
(``resolved``), within a rate limit; a fire the limit dropped has no resolve either, so nobody
is told of the end of something they never heard of. :class:`Notifier` sends, in the
background: a hook that hangs or fails is logged and never blocks or stops the engine. Every
text passes through ``redact`` with the secrets the engine knows.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx

from vastui.redact import redact
from vastui.sanitize import sanitize_line

log = logging.getLogger("vastui.alerts")

ALERT_KEYS = (
    "below_target",  # fewer workers than the target for [alerts] below_target_min
    "engine_stopped",  # the engine stopped itself (its one line)
    "daily_budget",  # [fleet] max_daily_spend reached: nothing more is rented today
    "rent_breaker",  # [fleet] max_rents_per_slot_hour reached: renting stopped
    "cluster_unreadable",  # curio's cluster unreadable for [alerts] cluster_unreadable_min
    "cut_off",  # the controller cut off from its workers (their tunnel to it down)
    "low_credit",  # the account's credit under [alerts] min_credit
    "ban_storm",  # [alerts] storm_bans machines banned within an hour
    "kill_storm",  # [alerts] storm_kills workers destroyed within an hour
)
QUEUE_MAX = 100  # alerts waiting for a slow hook; past it the oldest is dropped (and logged)


@dataclass(frozen=True, slots=True)
class Alert:
    key: str  # one of ALERT_KEYS
    state: str  # "firing" or "resolved"
    summary: str  # one line
    at: float  # engine clock
    fleet: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "source": "vastui",
            "fleet": self.fleet,
            "alert": self.key,
            "state": self.state,
            "summary": self.summary,
            "at": self.at,
        }


@dataclass
class AlertBook:
    """Which alerts to send, from the conditions that hold now: once per episode, once when it
    clears, at most ``max_per_hour`` of either in any hour (engine clock)."""

    max_per_hour: int = 20
    fleet: str = ""
    active: dict[str, bool] = field(default_factory=dict)  # key → announced (False: dropped)
    sent_at: deque[float] = field(default_factory=deque)
    dropped: int = 0

    def observe(self, holding: Mapping[str, str], now: float) -> list[Alert]:
        out: list[Alert] = []
        for key, summary in holding.items():
            if key not in self.active:
                announced = self._allow(now)
                self.active[key] = announced
                if announced:
                    out.append(Alert(key, "firing", summary, now, self.fleet))
        for key in [k for k in self.active if k not in holding]:
            announced = self.active.pop(key)
            if announced and self._allow(now):
                out.append(Alert(key, "resolved", f"{key} cleared", now, self.fleet))
        return out

    def _allow(self, now: float) -> bool:
        while self.sent_at and self.sent_at[0] <= now - 3600.0:
            self.sent_at.popleft()
        if len(self.sent_at) >= self.max_per_hour:
            self.dropped += 1
            return False
        self.sent_at.append(now)
        return True


@dataclass(frozen=True, slots=True)
class FleetFacts:
    """What the conditions are judged on, from one engine step."""

    target: int
    workers: int  # live workers + rents in flight, as the status counts them
    reason_kind: str | None
    reason: str | None
    credit: float | None  # the account's, None until read
    bans_last_hour: int
    kills_last_hour: int
    # curio's cluster: why it cannot be read, since when (engine clock); None: readable or off
    cluster_error: str | None = None
    cluster_error_since: float | None = None
    cut_off: str | None = None  # the controller cut off from its workers, one line


@dataclass
class Conditions:
    """Which alert conditions hold (pure; remembers only when the fleet went below target)."""

    below_target_min: float = 15.0
    min_credit: float = 0.0
    storm_bans: int = 5
    storm_kills: int = 10
    cluster_unreadable_min: float = 10.0
    below_since: float | None = None

    def holding(self, facts: FleetFacts, now: float) -> dict[str, str]:
        out: dict[str, str] = {}
        below = facts.target > 0 and facts.workers < facts.target
        if not below:
            self.below_since = None
        elif self.below_since is None:
            self.below_since = now
        if below and self.below_since is not None:
            waited = now - self.below_since
            if waited >= self.below_target_min * 60.0:
                why = facts.reason or "renting"
                out["below_target"] = (
                    f"{facts.workers}/{facts.target} workers for {waited / 60:.0f} min: {why}"
                )
        if facts.reason_kind == "daily_budget":
            out["daily_budget"] = facts.reason or "daily budget reached"
        if facts.reason_kind == "rent_breaker":
            out["rent_breaker"] = facts.reason or "rent breaker: renting stopped"
        if facts.credit is not None and self.min_credit > 0 and facts.credit < self.min_credit:
            out["low_credit"] = (
                f"account credit ${facts.credit:.2f} is under the minimum ${self.min_credit:.2f}"
            )
        if self.storm_bans > 0 and facts.bans_last_hour >= self.storm_bans:
            out["ban_storm"] = f"{facts.bans_last_hour} machines banned in the last hour"
        if self.storm_kills > 0 and facts.kills_last_hour >= self.storm_kills:
            out["kill_storm"] = f"{facts.kills_last_hour} workers destroyed in the last hour"
        if facts.cut_off:
            out["cut_off"] = f"the controller is cut off from its workers: {facts.cut_off}"
        since = facts.cluster_error_since
        if facts.cluster_error and since is not None:
            waited = now - since
            if waited >= self.cluster_unreadable_min * 60.0:
                out["cluster_unreadable"] = (
                    f"curio's cluster cannot be read for {waited / 60:.0f} min: "
                    f"{facts.cluster_error} (no drain, no release, no worker destroyed for it)"
                )
        return out


Sleep = Callable[[float], Awaitable[None]]


class Notifier:
    """Sends alerts to the configured hooks from one background task: a bounded queue, a
    timeout on every hook, bounded retries on the webhook, never an exception out."""

    def __init__(
        self,
        *,
        webhook: str | None = None,
        command: Sequence[str] | None = None,
        timeout_s: float = 10.0,
        retries: int = 3,
        secrets: Sequence[str | None] = (),
        sleep: Sleep = asyncio.sleep,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.webhook = webhook or None
        self.command = list(command) if command else None
        self.timeout_s = timeout_s
        self.retries = max(1, retries)
        self._secrets = [s for s in secrets if s]
        if self.webhook:  # its path and query may hold a token: never in a log line
            self._secrets.append(self.webhook)
        self._sleep = sleep
        self._transport = transport
        self._queue: asyncio.Queue[Alert] = asyncio.Queue(QUEUE_MAX)
        self._task: asyncio.Task[None] | None = None
        self.sent = 0
        self.failed = 0

    @property
    def enabled(self) -> bool:
        return bool(self.webhook or self.command)

    def submit(self, alert: Alert) -> None:
        """Queue ``alert``; never waits (a full queue drops its oldest)."""
        if not self.enabled:
            return
        if self._queue.full():
            with contextlib.suppress(asyncio.QueueEmpty):
                old = self._queue.get_nowait()
                self._queue.task_done()
                log.warning("alert queue full: dropped %s (%s)", old.key, old.state)
        self._queue.put_nowait(self._redacted(alert))
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="vastui-alerts")

    async def drain(self) -> None:
        """Wait until every queued alert was sent or given up on (tests, a clean stop)."""
        await self._queue.join()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def _redacted(self, alert: Alert) -> Alert:
        line = sanitize_line(redact(alert.summary, self._secrets), 500)
        return Alert(alert.key, alert.state, line, alert.at, alert.fleet)

    async def _run(self) -> None:
        while True:
            alert = await self._queue.get()
            try:
                await self._deliver(alert)
            except Exception as exc:  # a hook must never take the engine down
                self.failed += 1
                log.warning("alert %s: %s", alert.key, self._safe(exc))
            finally:
                self._queue.task_done()

    async def _deliver(self, alert: Alert) -> None:
        body = json.dumps(alert.to_json()).encode()
        ok = True
        if self.webhook:
            ok = await self._post(body, alert) and ok
        if self.command:
            ok = await self._exec(body, alert) and ok
        if ok:
            self.sent += 1
        else:
            self.failed += 1

    async def _post(self, body: bytes, alert: Alert) -> bool:
        assert self.webhook is not None
        where = urlsplit(self.webhook).hostname or "webhook"
        async with httpx.AsyncClient(timeout=self.timeout_s, transport=self._transport) as http:
            for attempt in range(self.retries):
                final = attempt == self.retries - 1
                try:
                    r = await http.post(
                        self.webhook, content=body, headers={"Content-Type": "application/json"}
                    )
                    if r.status_code < 300:
                        return True
                    why = f"HTTP {r.status_code}"
                    # a refusal (4xx but 429): asking again will not help
                    final = final or (r.status_code < 500 and r.status_code != 429)
                except httpx.HTTPError as exc:
                    why = type(exc).__name__
                if final:
                    break
                await self._sleep(min(30.0, 2.0**attempt))
        log.warning("alert %s: webhook %s failed: %s", alert.key, where, why)
        return False

    async def _exec(self, body: bytes, alert: Alert) -> bool:
        assert self.command is not None
        name = self.command[0]
        try:  # no shell: the alert reaches the command on stdin only
            proc = await asyncio.create_subprocess_exec(
                *self.command,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
                start_new_session=True,
            )
        except OSError as exc:
            log.warning("alert %s: command %s did not start: %s", alert.key, name, exc.strerror)
            return False
        try:
            async with asyncio.timeout(self.timeout_s):
                await proc.communicate(body)
        except asyncio.CancelledError:  # the engine stops: no hook outlives it
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            raise
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            log.warning(
                "alert %s: command %s timed out after %g s", alert.key, name, self.timeout_s
            )
            return False
        if proc.returncode != 0:
            log.warning("alert %s: command %s exited %s", alert.key, name, proc.returncode)
            return False
        return True

    def _safe(self, exc: BaseException) -> str:
        return sanitize_line(redact(f"{type(exc).__name__}: {exc}", self._secrets), 300)
