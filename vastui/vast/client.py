"""Async Vast.ai REST client (httpx).

Retries 429/502/503/504, connection errors and timeouts with jittered exponential backoff,
honours `Retry-After` up to 60 s, paces calls per endpoint, and turns every failure into a
typed `VastError`. Creating an instance is never retried blindly: after an ambiguous failure
the client looks for the instance by its (unique) label instead.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from vastui.vast.errors import (
    CreateOutcomeUnknown,
    VastError,
    VastHTTPError,
    VastNotFound,
    VastProtocolError,
    VastRateLimited,
    VastUnreachable,
    error_from_response,
)
from vastui.vast.models import (
    CreateResult,
    Instance,
    ModelError,
    Offer,
    SearchResult,
    SshKey,
    User,
    key_material,
)
from vastui.vast.query import build_search_body

log = logging.getLogger("vastui.vast")

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


@dataclass
class RetryPolicy:
    max_attempts: int = 5
    base_delay: float = 0.15
    factor: float = 2.0
    max_delay: float = 20.0
    max_retry_after: float = 60.0
    # Polls of the instance list after an ambiguous create, looking for its label.
    create_lookups: int = 4

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


class _Ambiguous(Exception):
    """The request may or may not have been processed by the server."""


def _api_path(path: str) -> str:
    return path if path.startswith("/api/v") else "/api/v0" + path


def _encode_params(params: Mapping[str, Any]) -> dict[str, str]:
    """Vast GET args: JSON-encode every value that is not already a string."""
    return {k: v if isinstance(v, str) else json.dumps(v) for k, v in params.items()}


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
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rand: Callable[[], float] = random.random,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api_key = api_key
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.retry = retry or RetryPolicy()
        self._sleep = sleep
        self._rand = rand
        self._pacer = _Pacer(DEFAULT_PACING if pacing is None else pacing, clock, sleep)
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            transport=transport,
            timeout=timeout,
            headers={"User-Agent": USER_AGENT},
            follow_redirects=False,
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

    async def _send_once(
        self,
        method: str,
        path: str,
        *,
        endpoint: str,
        json_body: Any = None,
        params: Mapping[str, Any] | None = None,
        auth: bool = True,
    ) -> httpx.Response:
        """One attempt. Raises `_Ambiguous` when the server may have acted, `httpx.ConnectError`
        when the request surely never reached it."""
        await self._pacer.wait(endpoint)
        kwargs: dict[str, Any] = {"headers": self._headers(auth)}
        if params:
            kwargs["params"] = _encode_params(params)
        if method in ("POST", "PUT", "DELETE"):
            kwargs["json"] = {} if json_body is None else json_body
        try:
            async with asyncio.timeout(self.timeout):
                return await self._http.request(method, _api_path(path), **kwargs)
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout):
            raise
        except (TimeoutError, httpx.TimeoutException) as exc:
            raise _Ambiguous(f"no answer within {self.timeout:g}s") from exc
        except httpx.HTTPError as exc:  # transport errors, and bodies that cannot be decoded
            raise _Ambiguous(self._redact(f"{type(exc).__name__}: {exc}")) from exc

    def _redact(self, text: str) -> str:
        """Exception texts can quote request headers; the key never leaves in a message."""
        return text.replace(self._api_key, "***") if self._api_key else text

    def _retry_after(self, response: httpx.Response) -> float | None:
        value = response.headers.get("Retry-After")
        if value is None:
            return None
        try:
            return max(0.0, float(value))
        except ValueError:
            return None

    @staticmethod
    def _body(response: httpx.Response) -> Any:
        try:
            return response.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return None

    async def _request(
        self,
        method: str,
        path: str,
        *,
        endpoint: str,
        json_body: Any = None,
        params: Mapping[str, Any] | None = None,
        auth: bool = True,
    ) -> Any:
        """Send with bounded retries; return the decoded JSON body of a 2xx answer."""
        last_detail = ""
        attempts = self.retry.max_attempts
        for attempt in range(attempts):
            final = attempt == attempts - 1
            try:
                response = await self._send_once(
                    method,
                    path,
                    endpoint=endpoint,
                    json_body=json_body,
                    params=params,
                    auth=auth,
                )
            except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
                last_detail = self._redact(
                    f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                )
            except _Ambiguous as exc:
                last_detail = str(exc)
            else:
                if response.status_code < 400:
                    body = self._body(response)
                    if body is None:
                        raise VastProtocolError(
                            f"{method} {path}: answer is not JSON "
                            f"({response.headers.get('content-type', '?')})"
                        )
                    return body
                error = error_from_response(
                    response.status_code, self._body(response), response.text, f"{method} {path}"
                )
                if response.status_code not in RETRY_STATUSES or final:
                    raise error
                if error.code == "search_quota_exceeded":
                    raise error
                retry_after = self._retry_after(response)
                if retry_after is not None and retry_after > self.retry.max_retry_after:
                    raise error
                delay = (
                    retry_after
                    if retry_after is not None
                    else self.retry.backoff(attempt, self._rand)
                )
                log.info("%s %s: %s; retry in %.2fs", method, path, error.msg, delay)
                await self._sleep(delay)
                continue
            if final:
                break
            delay = self.retry.backoff(attempt, self._rand)
            log.info("%s %s: %s; retry in %.2fs", method, path, last_detail, delay)
            await self._sleep(delay)
        raise VastUnreachable(self.base_url, last_detail or "no answer")

    # -- offers ------------------------------------------------------------------------

    async def search_offers(
        self,
        query: str | Mapping[str, Any],
        *,
        order: str | None = None,
        limit: int | None = None,
        allocated_storage: float = 5.0,
    ) -> SearchResult:
        """Search with a vastai-syntax filter string (or an already built JSON body)."""
        if isinstance(query, str):
            body = build_search_body(
                query, order=order, limit=limit, allocated_storage=allocated_storage
            )
        else:
            body = dict(query)
        data = await self._request("POST", "/bundles/", endpoint="search", json_body=body)
        raw_offers = data.get("offers") if isinstance(data, dict) else None
        if not isinstance(raw_offers, list):
            raise VastProtocolError("search offers: answer has no 'offers' list")
        offers: list[Offer] = []
        rejected: list[str] = []
        for raw in raw_offers:
            try:
                offers.append(Offer.from_api(raw))
            except ModelError as exc:
                rejected.append(str(exc))
        if rejected:
            log.warning(
                "search offers: skipped %d malformed offers: %s", len(rejected), rejected[0]
            )
        return SearchResult(offers, rejected)

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
    ) -> CreateResult:
        """Rent an offer. Never retried blindly: see the module docstring."""
        if not label:
            raise ValueError("create_instance needs a unique label to recover a lost answer")
        body = {
            "client_id": "me",
            "image": image,
            "env": dict(env or {}),
            "price": None,
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
        for attempt in range(self.retry.max_attempts):
            final = attempt == self.retry.max_attempts - 1
            try:
                response = await self._send_once("PUT", path, endpoint="create", json_body=body)
            except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
                # The request never left: safe to try again.
                if final:
                    raise VastUnreachable(self.base_url, f"{type(exc).__name__}") from exc
                await self._sleep(self.retry.backoff(attempt, self._rand))
                continue
            except _Ambiguous as exc:
                return await self._recover_create(offer_id, label, str(exc))
            status = response.status_code
            data = self._body(response)
            if status < 400:
                new_id = data.get("new_contract") if isinstance(data, dict) else None
                if isinstance(new_id, int) and not isinstance(new_id, bool):
                    return CreateResult(new_id, started=data.get("success") is not False)
                return await self._recover_create(offer_id, label, "answer had no new_contract")
            error = error_from_response(status, data, response.text, f"PUT {path}")
            if status == 429 and not final and error.code != "search_quota_exceeded":
                # A throttled request was refused before doing anything.
                retry_after = self._retry_after(response)
                await self._sleep(
                    retry_after
                    if retry_after is not None and retry_after <= self.retry.max_retry_after
                    else self.retry.backoff(attempt, self._rand)
                )
                continue
            if status in (500, 502, 503, 504):
                return await self._recover_create(offer_id, label, error.msg)
            raise error
        raise VastRateLimited(429, "still throttled after retries", endpoint=f"PUT {path}")

    async def _recover_create(self, offer_id: int, label: str, detail: str) -> CreateResult:
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
        raise CreateOutcomeUnknown(offer_id, label, detail)

    async def find_by_label(self, label: str) -> list[Instance]:
        return [inst for inst in await self.list_instances() if inst.label == label]

    async def list_instances(self) -> list[Instance]:
        """All instances of the account: v1 pages, falling back to the legacy v0 list."""
        try:
            raw = await self._list_v1()
        except VastNotFound:
            data = await self._request(
                "GET", "/instances/", endpoint="list", params={"owner": "me"}
            )
            raw = data.get("instances") if isinstance(data, dict) else None
            if not isinstance(raw, list):
                raise VastProtocolError("list instances: answer has no 'instances' list") from None
        instances = []
        for item in raw:
            try:
                instances.append(Instance.from_api(item))
            except ModelError as exc:
                log.warning("list instances: skipped a malformed row: %s", exc)
        return instances

    async def _list_v1(self) -> list[Any]:
        rows: list[Any] = []
        token: str | None = None
        for _ in range(10_000):  # a hard bound on pages, whatever the server says
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
            token = str(next_token)
        raise VastProtocolError("list instances: too many pages")

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
                response = await self._http.get(url, timeout=10.0)
            except httpx.TransportError:
                continue
            if response.status_code == 200:
                return response.text
        raise VastError(f"instance {instance_id} logs not ready after {polls} polls")

    # -- account -----------------------------------------------------------------------

    async def list_ssh_keys(self) -> list[SshKey]:
        data = await self._request("GET", "/ssh/", endpoint="ssh")
        if not isinstance(data, list):
            raise VastProtocolError("list ssh keys: answer is not a JSON array")
        return [SshKey.from_api(item) for item in data if isinstance(item, dict)]

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
