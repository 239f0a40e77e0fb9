"""Async Vast.ai REST client (httpx).

Retries 429/502/503/504, connection errors and timeouts with jittered exponential backoff,
honours `Retry-After` up to a cap, paces calls per endpoint, and turns every failure into a
typed `VastError`. Creating an instance is never retried blindly: after an ambiguous failure
the client looks for the instance by its (unique) label instead.

Everything a server sends is bounded: each answer's size (per endpoint), each call's total
retry time, the instance list's pages (with loop detection), JSON nesting and numbers (see
models.parse_json). Every wait is a plain asyncio sleep, so cancelling the calling task ends a
call at once. The API key never appears in an error, a log line or an exception's text.

One file: every call shares one retry, pacing, bounds and secrecy policy (``_request``); the
typed views are models.py, the query syntax query.py.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import ssl
import time
from collections import Counter, OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx

from vastui.numbers import parse_int, parse_number
from vastui.redact import SecretFilter, redact
from vastui.sanitize import sanitize_line
from vastui.vast.errors import (
    CreateAnswerInvalid,
    CreateOutcomeUnknown,
    VastError,
    VastHTTPError,
    VastNotFound,
    VastProtocolError,
    VastRateLimited,
    VastResponseTooLarge,
    VastUnreachable,
    error_from_response,
)
from vastui.vast.listing import convert_records, decode_listing
from vastui.vast.models import (
    CreateResult,
    Instance,
    Offer,
    SearchResult,
    SshKey,
    User,
    describe,
    key_material,
    parse_json,
    valid_id,
)
from vastui.vast.query import build_search_body

_T = TypeVar("_T")
log = logging.getLogger("vastui.vast")
# Defence in depth: whatever this module logs is redacted of every client's key.
_LOG_FILTER = SecretFilter()
log.addFilter(_LOG_FILTER)

DEFAULT_BASE_URL = "https://console.vast.ai"
RETRY_STATUSES = frozenset({429, 502, 503, 504})
USER_AGENT = "vastui/0.1"

# Minimum seconds between two calls to the same endpoint. Vast enforces a minimum interval per
# endpoint and identity (vast-api.md §2); the published thresholds have no stated unit, so these
# are deliberately conservative and configurable.
DEFAULT_PACING: dict[str, float] = {
    "search": 0.5,
    "create": 1.0,
    "show": 0.5,
    "manage": 1.0,
    "destroy": 0.35,
    "list": 0.25,
    "ssh": 1.0,
    "logs": 0.5,
    "user": 0.25,
}

MIB = 1 << 20
# The most a successful answer may hold, per endpoint. A search of 10,000 offers is ~30 MiB; a
# page of 25 instances well under 1 MiB (the legacy v0 list holds them all). Past the cap the
# body is not read further and the call fails with one line (VastResponseTooLarge).
DEFAULT_BODY_LIMITS: dict[str, int] = {"search": 64 * MIB, "list": 16 * MIB, "logs": 16 * MIB}
DEFAULT_BODY_LIMIT = 4 * MIB
ERROR_BODY_LIMIT = 64 * 1024  # an error's body is only read for its message
MAX_TOKEN_LEN = 4096  # a pagination token longer than this is not one


@dataclass
class RetryPolicy:
    max_attempts: int = 5
    base_delay: float = 0.15
    factor: float = 2.0
    max_delay: float = 20.0
    # A longer Retry-After is not waited: the call fails at once (the vastai CLI gives up past
    # 60 s, vastai/api/client.py; we are stricter so a step is never held for minutes).
    max_retry_after: float = 30.0
    # Seconds one call may spend in total (requests and waits) before its retries stop.
    retry_budget: float = 60.0
    # Polls of the instance list after an ambiguous create, looking for its label.
    create_lookups: int = 4
    # Pages of the v1 instance list (25 rows each) before the listing is refused.
    max_pages: int = 100

    def backoff(self, attempt: int, rand: Callable[[], float]) -> float:
        """Full-jitter-ish: the nominal delay scaled by a factor in [0.5, 1.5)."""
        nominal = min(self.max_delay, self.base_delay * self.factor**attempt)
        return nominal * (0.5 + rand())


@dataclass
class _Pacer:
    intervals: Mapping[str, float]
    clock: Callable[[], float]
    sleep: Callable[[float], Awaitable[None]]
    _next: dict[str, float] = field(default_factory=dict)
    _locks: dict[str, asyncio.Lock] = field(default_factory=dict)

    async def wait(self, endpoint: str) -> None:
        interval = self.intervals.get(endpoint, 0.0)
        if interval <= 0:
            return
        lock = self._locks.setdefault(endpoint, asyncio.Lock())
        async with lock:
            delay = self._next.get(endpoint, 0.0) - self.clock()
            if delay > 0:
                await self.sleep(delay)
            self._next[endpoint] = self.clock() + interval


@dataclass(frozen=True)
class _Answer:
    """A response read within its size limit (`complete` False: the body was cut)."""

    status_code: int
    headers: httpx.Headers
    content: bytes
    complete: bool

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")


class _Ambiguous(Exception):
    """The request may or may not have been processed by the server."""


_CONNECT_ERRORS = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


def _api_path(path: str) -> str:
    return path if path.startswith("/api/v") else "/api/v0" + path


def _encode_params(params: Mapping[str, Any]) -> dict[str, str]:
    """Vast GET args: JSON-encode every value that is not already a string."""
    return {k: v if isinstance(v, str) else json.dumps(v) for k, v in params.items()}


async def _read_capped(response: httpx.Response, limit: int, *, cut: bool) -> tuple[bytes, bool]:
    """At most `limit` bytes of the (decoded) body and whether that was all of it. `cut`: keep
    the first `limit` bytes of a longer body (error messages) instead of none (answers)."""
    declared = parse_int(response.headers.get("Content-Length"))
    if not cut and declared is not None and declared > limit:
        return b"", False
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        if size + len(chunk) > limit:
            chunks.append(chunk[: limit - size])
            return b"".join(chunks), False
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks), True


def _with_reason(error: VastHTTPError, why: str) -> VastHTTPError:
    """The same typed error, saying why no more retries were made."""
    return type(error)(
        error.status, f"{error.msg}; {why}", code=error.code, endpoint=error.endpoint
    )


def _record_key(raw: Any) -> str:
    return describe(raw.get("id")) if isinstance(raw, Mapping) else f"<{type(raw).__name__}>"


_Decode = Callable[[bytes, str], Any]


def tls_trust(base_url: str) -> ssl.SSLContext | bool:
    """How the client verifies TLS: httpx's own way (certifi's roots) for an https API; for a
    plain-http one (a simulator on loopback) a context that trusts no root at all. The client
    follows no redirect, so TLS is never used then, and certifi's ~30 ms load is skipped at
    start-up (bench/startup.py); were TLS ever attempted, it would fail, never pass unchecked."""
    if base_url.lower().startswith("https://"):
        return True
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # CERT_REQUIRED and check_hostname, no roots


def _decode_offers(content: bytes, where: str) -> tuple[list[Offer], dict[str, str]]:
    """A search answer, a piece at a time: its ~100 MB tree for 10,000 offers is never whole
    (listing.py); each offer keeps only its scalars (models.Offer)."""
    return decode_listing(content, where, "offers", Offer.from_api, _record_key)


class VastClient:
    def __init__(
        self,
        api_key: str | None,
        base_url: str = DEFAULT_BASE_URL,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout: float = 30.0,
        retry: RetryPolicy | None = None,
        pacing: Mapping[str, float] | None = None,
        body_limits: Mapping[str, int] | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rand: Callable[[], float] = random.random,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api_key = api_key
        _LOG_FILTER.add(api_key)
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.retry = retry or RetryPolicy()
        self.body_limits = dict(DEFAULT_BODY_LIMITS if body_limits is None else body_limits)
        self._sleep = sleep
        self._rand = rand
        self._clock = clock
        self._pacer = _Pacer(DEFAULT_PACING if pacing is None else pacing, clock, sleep)
        # Every failed attempt by its HTTP status, or "network"/"timeout" (metrics)
        self.error_counts: Counter[str] = Counter()
        # Bad records already warned about: a bad offer is logged once, not on every refresh.
        self._warned: OrderedDict[str, None] = OrderedDict()
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            transport=transport,
            timeout=timeout,
            headers={"User-Agent": USER_AGENT},
            follow_redirects=False,
            verify=tls_trust(self.base_url),
        )

    def __repr__(self) -> str:  # never show the key
        return f"VastClient({self.base_url!r})"

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> VastClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- transport -----------------------------------------------------------------------

    def _headers(self, auth: bool) -> dict[str, str]:
        if auth and self._api_key:
            return {"Authorization": f"Bearer {self._api_key}"}
        return {}

    def secrets(self) -> tuple[str, ...]:
        """What must never appear in a log or a message: the API key (for other redactors)."""
        return (self._api_key,) if self._api_key else ()

    def _redact(self, text: str) -> str:
        """Servers echo headers and libraries quote URLs: the key never leaves in a message."""
        return redact(text, (self._api_key,))

    def _exc_text(self, exc: BaseException) -> str:
        text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        return self._redact(" ".join(text.split()))[:300]

    def _body_limit(self, endpoint: str) -> int:
        return self.body_limits.get(endpoint, DEFAULT_BODY_LIMIT)

    async def _fetch(
        self, request: httpx.Request, endpoint: str, *, timeout: float | None = None
    ) -> _Answer:
        """Send and read the body within the endpoint's size limit and the call's timeout."""
        limit = self._body_limit(endpoint)
        async with asyncio.timeout(self.timeout if timeout is None else timeout):
            response = await self._http.send(request, stream=True)
            try:
                ok = response.status_code < 400
                content, complete = await _read_capped(
                    response, limit if ok else ERROR_BODY_LIMIT, cut=not ok
                )
            finally:
                await response.aclose()
        return _Answer(response.status_code, response.headers, content, complete)

    async def _send_once(
        self,
        method: str,
        path: str,
        *,
        endpoint: str,
        json_body: Any = None,
        params: Mapping[str, Any] | None = None,
        auth: bool = True,
    ) -> _Answer:
        """One attempt. Raises `_Ambiguous` when the server may have acted, an httpx connect
        error when the request surely never reached it."""
        await self._pacer.wait(endpoint)
        kwargs: dict[str, Any] = {"headers": self._headers(auth)}
        if params:
            kwargs["params"] = _encode_params(params)
        if method in ("POST", "PUT", "DELETE"):
            kwargs["json"] = {} if json_body is None else json_body
        request = self._http.build_request(method, _api_path(path), **kwargs)
        try:
            answer = await self._fetch(request, endpoint)
        except _CONNECT_ERRORS:
            self.error_counts["network"] += 1
            raise
        except (TimeoutError, httpx.TimeoutException) as exc:
            self.error_counts["timeout"] += 1
            raise _Ambiguous(f"no answer within {self.timeout:g}s") from exc
        except httpx.HTTPError as exc:  # transport errors, and bodies that cannot be decoded
            self.error_counts["network"] += 1
            raise _Ambiguous(self._exc_text(exc)) from None
        if answer.status_code >= 400:
            self.error_counts[str(answer.status_code)] += 1
        return answer

    def _retry_after(self, answer: _Answer) -> float | None:
        """Retry-After in seconds (strictly parsed: "1_0", "inf", "nan" are ignored)."""
        value = parse_number(answer.headers.get("Retry-After"))
        return None if value is None else max(0.0, value)

    def _error_body(self, answer: _Answer) -> Any:
        try:
            return parse_json(answer.content)
        except VastProtocolError:
            return None

    def _error(self, answer: _Answer, where: str) -> VastHTTPError:
        body = self._error_body(answer)
        return error_from_response(answer.status_code, body, answer.text, where, self._redact)

    def _success_body(
        self, answer: _Answer, where: str, endpoint: str, decode: _Decode | None = None
    ) -> Any:
        if not answer.complete:
            raise VastResponseTooLarge(where, self._body_limit(endpoint))
        if decode is not None:
            return decode(answer.content, where)
        return parse_json(answer.content, where)

    def _http_retry_delay(
        self, answer: _Answer, error: VastHTTPError, attempt: int, started: float
    ) -> float:
        """How long to wait before retrying a retryable status; raises `error` (saying why)
        when waiting is not worth it: a daily quota, a Retry-After over the cap, or no budget."""
        if error.code == "search_quota_exceeded":
            raise error
        retry_after = self._retry_after(answer)
        cap = self.retry.max_retry_after
        if retry_after is not None and retry_after > cap:
            raise _with_reason(error, f"Retry-After {retry_after:g}s is over the {cap:g}s cap")
        delay = retry_after if retry_after is not None else self.retry.backoff(attempt, self._rand)
        if not self._within_budget(started, delay):
            raise _with_reason(error, self._budget_note(started))
        return delay

    def _within_budget(self, started: float, delay: float) -> bool:
        return self._clock() - started + delay <= self.retry.retry_budget

    def _budget_note(self, started: float) -> str:
        spent = self._clock() - started
        return f"gave up after {spent:.0f}s (retry budget {self.retry.retry_budget:g}s)"

    async def _request(
        self,
        method: str,
        path: str,
        *,
        endpoint: str,
        json_body: Any = None,
        params: Mapping[str, Any] | None = None,
        auth: bool = True,
        decode: _Decode | None = None,
    ) -> Any:
        """Send with bounded retries; return the decoded JSON body of a 2xx answer (`decode`:
        how, when not `parse_json`)."""
        where = f"{method} {path}"
        last_detail = ""
        started = self._clock()
        attempts = self.retry.max_attempts
        for attempt in range(attempts):
            final = attempt == attempts - 1
            try:
                answer = await self._send_once(
                    method,
                    path,
                    endpoint=endpoint,
                    json_body=json_body,
                    params=params,
                    auth=auth,
                )
            except _CONNECT_ERRORS as exc:
                last_detail = self._exc_text(exc)
            except _Ambiguous as exc:
                last_detail = str(exc)
            else:
                if answer.status_code < 400:
                    return self._success_body(answer, where, endpoint, decode)
                error = self._error(answer, where)
                if answer.status_code not in RETRY_STATUSES or final:
                    raise error
                delay = self._http_retry_delay(answer, error, attempt, started)
                log.info("%s: %s; retry in %.2fs", where, error.msg, delay)
                await self._sleep(delay)
                continue
            if final:
                break
            delay = self.retry.backoff(attempt, self._rand)
            if not self._within_budget(started, delay):
                last_detail = f"{last_detail}; {self._budget_note(started)}"
                break
            log.info("%s: %s; retry in %.2fs", where, last_detail, delay)
            await self._sleep(delay)
        raise self._unreachable(last_detail or "no answer")

    def _unreachable(self, detail: str) -> VastUnreachable:
        return VastUnreachable(self._redact(self.base_url), self._redact(detail))

    def _valid(
        self, items: list[Any], parse: Callable[[Any], _T], what: str
    ) -> tuple[list[_T], list[str]]:
        """The records that can be true, and why the others were skipped (one reason per
        record id, logged once: models.py is the boundary)."""
        out, reasons = convert_records(items, parse, _record_key)
        return self._accepted(out, reasons, what)

    def _accepted(
        self, out: list[_T], reasons: Mapping[str, str], what: str
    ) -> tuple[list[_T], list[str]]:
        redacted = {key: self._redact(reason) for key, reason in reasons.items()}
        self._report_skipped(what, redacted)
        return out, list(redacted.values())

    def _report_skipped(self, what: str, reasons: Mapping[str, str]) -> None:
        """One warning line per listing for bad records not seen before (bounded memory); the
        same bad offer on every refresh is a debug line, not a flood."""
        new = [key for key in reasons if f"{what} {key}" not in self._warned]
        for key in new:
            self._warned[f"{what} {key}"] = None
        while len(self._warned) > 4096:
            self._warned.popitem(last=False)
        for reason in reasons.values():
            log.debug("%s: skipped %s", what, reason)
        if new:
            log.warning(
                "%s: skipped %d invalid record(s), %d new; first new: %s",
                what,
                len(reasons),
                len(new),
                reasons[new[0]],
            )

    # -- offers ------------------------------------------------------------------------

    async def search_offers(
        self,
        query: str | Mapping[str, Any],
        *,
        order: str | None = None,
        limit: int | None = None,
        allocated_storage: float = 5.0,
        offer_type: str = "on-demand",
    ) -> SearchResult:
        """Search with a vastai-syntax filter string (or an already built JSON body);
        ``offer_type`` "bid" (or "interruptible") prices offers at their min_bid."""
        if isinstance(query, str):
            body = build_search_body(
                query, order=order, limit=limit, allocated_storage=allocated_storage,
                offer_type=offer_type,
            )  # fmt: skip
        else:
            body = dict(query)
        offers, reasons = await self._request(
            "POST", "/bundles/", endpoint="search", json_body=body, decode=_decode_offers
        )
        return SearchResult(*self._accepted(offers, reasons, "search offers"))

    # -- instances -----------------------------------------------------------------------

    async def create_instance(
        self,
        offer_id: int,
        *,
        label: str,
        image: str,
        disk_gb: float,
        env: Mapping[str, str] | None = None,
        onstart: str | None = None,
        runtype: str = "ssh_direc ssh_proxy",
        bid_price: float | None = None,
    ) -> CreateResult:
        """Rent an offer, on demand or (``bid_price``, $/h for the machine) interruptible.
        Never retried blindly: see the module docstring. ``cancel_unavail`` is always sent
        true: a bid below the going price is then refused (410) instead of leaving a stopped
        contract that bills storage (vast-api.md §14)."""
        if not label:
            raise ValueError("create_instance needs a unique label to recover a lost answer")
        body = {
            "client_id": "me",
            "image": image,
            "env": dict(env or {}),
            "price": None if bid_price is None else round(float(bid_price), 4),
            "disk": disk_gb,
            "label": label,
            "extra": None,
            "onstart": onstart,
            "image_login": None,
            "python_utf8": False,
            "lang_utf8": False,
            "use_jupyter_lab": False,
            "jupyter_dir": None,
            "force": False,
            "cancel_unavail": True,
            "template_hash_id": None,
            "user": None,
            "runtype": runtype,
        }
        path = f"/asks/{int(offer_id)}/"
        where = f"PUT {path}"
        started = self._clock()
        for attempt in range(self.retry.max_attempts):
            final = attempt == self.retry.max_attempts - 1
            try:
                answer = await self._send_once("PUT", path, endpoint="create", json_body=body)
            except _CONNECT_ERRORS as exc:
                # The request never left: safe to try again, within the budget.
                delay = self.retry.backoff(attempt, self._rand)
                if final or not self._within_budget(started, delay):
                    raise self._unreachable(self._exc_text(exc)) from None
                await self._sleep(delay)
                continue
            except _Ambiguous as exc:
                return await self._recover_create(offer_id, label, str(exc))
            if answer.status_code < 400:
                return await self._create_answered(offer_id, label, answer, where)
            error = self._error(answer, where)
            if answer.status_code == 429 and not final:
                # A throttled request was refused before doing anything: safe to send again.
                await self._sleep(self._http_retry_delay(answer, error, attempt, started))
                continue
            if answer.status_code in (500, 502, 503, 504):
                return await self._recover_create(offer_id, label, error.msg)
            raise error
        raise VastRateLimited(429, "still throttled after retries", endpoint=where)

    async def _create_answered(
        self, offer_id: int, label: str, answer: _Answer, where: str
    ) -> CreateResult:
        """A 2xx create answer: the rent happened. Anything unusable in it (cut, not JSON, no
        valid new_contract) is resolved by label, never by sending the create again."""
        try:
            data = self._success_body(answer, where, "create")
        except VastProtocolError as exc:
            return await self._recover_create(offer_id, label, str(exc))
        raw_id = data.get("new_contract") if isinstance(data, dict) else None
        if raw_id is None:
            return await self._recover_create(offer_id, label, "answer had no new_contract")
        new_id = valid_id(raw_id)
        if new_id is None:
            detail = f"answer's new_contract {describe(raw_id)} is not a valid instance id"
            return await self._recover_create(offer_id, label, detail, CreateAnswerInvalid)
        return CreateResult(new_id, started=data.get("success") is not False)

    async def _recover_create(
        self,
        offer_id: int,
        label: str,
        detail: str,
        unknown: type[CreateOutcomeUnknown] = CreateOutcomeUnknown,
    ) -> CreateResult:
        detail = self._redact(detail)
        log.warning("create on offer %s: %s; looking for label %s", offer_id, detail, label)
        for attempt in range(self.retry.create_lookups):
            try:
                found = await self.find_by_label(label)
            except VastError as exc:
                log.warning("label lookup failed: %s", exc)
                found = []
            if len(found) >= 1:
                if len(found) > 1:
                    log.error("label %s matches %d instances", label, len(found))
                return CreateResult(found[0].id, recovered_by_label=True)
            if attempt < self.retry.create_lookups - 1:
                await self._sleep(self.retry.backoff(attempt + 1, self._rand))
        raise unknown(offer_id, label, detail)

    async def find_by_label(self, label: str) -> list[Instance]:
        return [inst for inst in await self.list_instances() if inst.label == label]

    async def list_instances(self) -> list[Instance]:
        """All instances of the account: v1 pages, falling back to the legacy v0 list."""
        raw: Any
        try:
            raw = await self._list_v1()
        except VastNotFound:
            data = await self._request(
                "GET", "/instances/", endpoint="list", params={"owner": "me"}
            )
            raw = data.get("instances") if isinstance(data, dict) else None
            if not isinstance(raw, list):
                raise VastProtocolError("list instances: answer has no 'instances' list") from None
        return self._valid(raw, Instance.from_api, "list instances")[0]

    async def _list_v1(self) -> list[Any]:
        """Pages of 25 as the vastai CLI reads them (vastai/api/instances.py show_instances:
        `after_token` = the previous `next_token` until it is empty), but bounded: at most
        `max_pages` pages, and a token seen before is a loop, not a next page."""
        rows: list[Any] = []
        token: str | None = None
        seen: set[str] = set()
        for page_no in range(1, self.retry.max_pages + 1):
            params: dict[str, Any] = {"limit": 25}
            if token:
                params["after_token"] = token
            data = await self._request("GET", "/api/v1/instances/", endpoint="list", params=params)
            page = data.get("instances") if isinstance(data, dict) else None
            if not isinstance(page, list):
                raise VastProtocolError("list instances: answer has no 'instances' list")
            rows.extend(page)
            next_token = data.get("next_token")
            if not next_token or not page:
                return rows
            token = _page_token(next_token, page_no)
            if token in seen:
                raise VastProtocolError(
                    f"list instances: page {page_no} repeats an earlier next_token (a loop); "
                    "listing stopped"
                )
            seen.add(token)
        raise VastProtocolError(
            f"list instances: more than {self.retry.max_pages} pages "
            f"({25 * self.retry.max_pages} instances); listing stopped"
        )

    async def show_instance(self, instance_id: int) -> Instance | None:
        data = await self._request(
            "GET", f"/instances/{int(instance_id)}/", endpoint="show", params={"owner": "me"}
        )
        raw = data.get("instances") if isinstance(data, dict) else None
        if raw is None:
            return None
        return Instance.from_api(raw)

    async def destroy_instance(self, instance_id: int) -> bool:
        """Destroy; True if destroyed now, False if it was already gone (`no_such_instance`)."""
        try:
            await self._request("DELETE", f"/instances/{int(instance_id)}/", endpoint="destroy")
        except VastNotFound:
            return False
        return True

    async def change_bid(self, instance_id: int, price: float) -> None:
        """An interruptible instance's new bid, $/h for its machine (vastai api/instances.py
        change_bid: PUT /instances/bid_price/{id}/). A refused change raises."""
        await self._request(
            "PUT", f"/instances/bid_price/{int(instance_id)}/", endpoint="manage",
            json_body={"client_id": "me", "price": round(float(price), 4)},
        )  # fmt: skip

    async def stop_instance(self, instance_id: int) -> None:
        """Stop: the container ends, the disk is kept, storage is still billed (vastai
        api/instances.py stop_instance: PUT /instances/{id}/ {"state": "stopped"})."""
        await self._request(
            "PUT", f"/instances/{int(instance_id)}/", endpoint="manage",
            json_body={"state": "stopped"},
        )  # fmt: skip

    async def start_instance(self, instance_id: int) -> bool:
        """Start a stopped instance (vastai api/instances.py start_instance). False when Vast
        queued the start: HTTP 200 with ``success`` false and ``resources_unavailable``
        ("Required resources are currently unavailable, state change queued", vast-api.md
        §7); another refusal raises."""
        data = await self._request(
            "PUT", f"/instances/{int(instance_id)}/", endpoint="manage",
            json_body={"state": "running"},
        )  # fmt: skip
        if isinstance(data, dict) and data.get("success") is False:
            if data.get("error") == "resources_unavailable":
                return False
            raise VastError(
                sanitize_line(f"start of {instance_id} refused: {data.get('error') or data}", 300)
            )
        return True

    async def set_label(self, instance_id: int, label: str) -> None:
        await self._request(
            "PUT", f"/instances/{int(instance_id)}/", endpoint="manage", json_body={"label": label}
        )

    async def request_logs(
        self,
        instance_id: int,
        *,
        tail: int = 1000,
        grep: str | None = None,
        daemon_logs: bool = False,
        polls: int = 30,
        poll_interval: float = 0.3,
    ) -> str:
        """Two-step logs: ask for an upload, then poll the unauthenticated `result_url`."""
        body: dict[str, str] = {"tail": str(int(tail))}
        if grep:
            body["filter"] = grep
        if daemon_logs:
            body["daemon_logs"] = "true"
        data = await self._request(
            "PUT", f"/instances/request_logs/{int(instance_id)}/", endpoint="logs", json_body=body
        )
        url = data.get("result_url") if isinstance(data, dict) else None
        if not isinstance(url, str) or not url:
            msg = data.get("msg") if isinstance(data, dict) else None
            raise VastProtocolError(f"request logs: no result_url ({msg or 'no message'})")
        for _ in range(polls):
            await self._sleep(poll_interval)
            try:
                # No Authorization header: this is an object-storage URL, not the API.
                answer = await self._fetch(
                    self._http.build_request("GET", url), "logs", timeout=10.0
                )
            except (TimeoutError, httpx.HTTPError):
                continue
            if answer.status_code == 200:
                if not answer.complete:
                    raise VastResponseTooLarge("logs of instance", self._body_limit("logs"))
                return answer.text
        raise VastError(f"instance {instance_id} logs not ready after {polls} polls")

    # -- account -----------------------------------------------------------------------

    async def list_ssh_keys(self) -> list[SshKey]:
        data = await self._request("GET", "/ssh/", endpoint="ssh")
        if not isinstance(data, list):
            raise VastProtocolError("list ssh keys: answer is not a JSON array")
        return self._valid(data, SshKey.from_api, "list ssh keys")[0]

    async def add_ssh_key(self, public_key: str) -> SshKey:
        data = await self._request(
            "POST", "/ssh/", endpoint="ssh", json_body={"ssh_key": public_key.strip()}
        )
        key = data.get("key") if isinstance(data, dict) else None
        if not isinstance(key, dict):
            raise VastProtocolError("add ssh key: answer has no 'key' object")
        return SshKey.from_api(key)

    async def ensure_ssh_key(self, public_key: str) -> SshKey:
        """Make sure this key is on the account (compared by key material, not comment)."""
        wanted = key_material(public_key)
        for key in await self.list_ssh_keys():
            if key.material() == wanted:
                return key
        try:
            return await self.add_ssh_key(public_key)
        except (VastUnreachable, VastHTTPError):
            # The add may have landed before the failure: look once more before giving up.
            for key in await self.list_ssh_keys():
                if key.material() == wanted:
                    return key
            raise

    async def current_user(self) -> User:
        data = await self._request("GET", "/users/current/", endpoint="user")
        return User.from_api(data)


def _page_token(value: Any, page_no: int) -> str:
    """The next page's cursor: text (or a number) of sane length, nothing else."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise VastProtocolError(f"list instances: page {page_no} has a next_token that is not text")
    token = value if isinstance(value, str) else describe(value)
    if len(token) > MAX_TOKEN_LEN:
        raise VastProtocolError(f"list instances: page {page_no} has an oversized next_token")
    return token
