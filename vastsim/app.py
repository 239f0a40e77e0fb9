"""The simulated Vast.ai HTTP API as a plain ASGI application (hand-rolled routing)."""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import parse_qs

from vastsim.cloud import ApiError, SimCloud
from vastsim.faults import FaultResponse
from vastsim.fleet import FleetFaultError

# httpx's and uvicorn's ASGI types: mappings, not dicts
Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

_LOG_RE = re.compile(r"^/_sim/logs/([0-9A-Za-z_-]+)\.log$")
_FLEET_RE = re.compile(r"^/_sim/faults(?:/([0-9A-Za-z_-]+))?$")


class _Resp:
    __slots__ = ("body", "content_type", "headers", "status")

    def __init__(
        self,
        status: int,
        body: bytes,
        content_type: str = "application/json",
        headers: tuple[tuple[str, str], ...] = (),
    ) -> None:
        self.status = status
        self.body = body
        self.content_type = content_type
        self.headers = headers


def _json(status: int, obj: Any) -> _Resp:
    return _Resp(status, json.dumps(obj).encode())


def _error(status: int, error: str, msg: str) -> _Resp:
    return _json(status, {"success": False, "error": error, "msg": msg})


class _Request:
    def __init__(self, scope: Scope, body: bytes) -> None:
        self.method: str = scope["method"].upper()
        self.path: str = scope["path"]
        self.raw_body = body
        qs = scope.get("query_string", b"").decode("latin-1")
        self.params: dict[str, str] = {
            k: v[-1] for k, v in parse_qs(qs, keep_blank_values=True).items()
        }
        self.headers = {
            k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]
        }
        scheme = scope.get("scheme", "http")
        host = self.headers.get("host")
        if not host:
            server = scope.get("server") or ("127.0.0.1", 80)
            host = f"{server[0]}:{server[1]}"
        self.base_url = f"{scheme}://{host}"
        self.fault_hint: str | None = None

    def json_body(self) -> Any:
        if not self.raw_body.strip():
            return {}
        try:
            return json.loads(self.raw_body)
        except ValueError:
            raise ApiError(
                400, {"success": False, "error": "invalid_request", "msg": "Invalid json body"}
            ) from None

    def api_key(self) -> str | None:
        auth = self.headers.get("authorization", "")
        if auth[:7].lower() == "bearer ":
            return str(auth[7:].strip())
        return self.params.get("api_key")


def _int_id(raw: str) -> int:
    try:
        if not raw.isdigit():
            raise ValueError
        return int(raw)
    except ValueError:
        raise ApiError(
            400, {"success": False, "error": "invalid_args", "msg": f"Invalid id: {raw!r}"}
        ) from None


# (endpoint name, needs auth, handler) chosen by _route.
Handler = Callable[[SimCloud, _Request, list[str]], Any]


def _route(method: str, parts: list[str]) -> tuple[str, bool, Handler] | _Resp:
    """Map ``/api/vN/...`` path segments to an endpoint, or an error answer."""
    n = len(parts)
    table: dict[str, tuple[str, bool, Handler]] = {}
    if parts[:2] == ["v0", "bundles"] and n == 2:
        table = {"GET": ("search", False, _h_search_get), "POST": ("search", False, _h_search_post)}
    elif parts[:3] == ["v0", "search", "asks"] and n == 3:
        table = {"PUT": ("search", False, _h_search_new), "POST": ("search", False, _h_search_new)}
    elif parts[:2] == ["v0", "asks"] and n == 3:
        table = {"PUT": ("create", True, _h_create)}
    elif parts == ["v1", "instances"]:
        table = {"GET": ("list", True, _h_list_v1)}
    elif parts == ["v0", "instances"]:
        table = {
            "GET": ("list", True, _h_list_v0),
            "PUT": ("manage", True, _h_manage_bulk),
            "DELETE": ("destroy", True, _h_destroy_bulk),
        }
    elif parts[:3] == ["v0", "instances", "request_logs"] and n == 4:
        table = {"PUT": ("logs", True, _h_logs), "POST": ("logs", True, _h_logs)}
    elif parts[:3] == ["v0", "instances", "reboot"] and n == 4:
        table = {"PUT": ("reboot", True, _h_reboot)}
    elif parts[:3] == ["v0", "instances", "bid_price"] and n == 4:
        table = {"PUT": ("bid", True, _h_bid_price)}
    elif parts[:2] == ["v0", "instances"] and n == 3:
        table = {
            "GET": ("show", True, _h_show),
            "PUT": ("manage", True, _h_manage),
            "DELETE": ("destroy", True, _h_destroy),
        }
    elif parts[:2] == ["v0", "instances"] and n == 4 and parts[3] == "ssh":
        table = {
            "GET": ("instance_ssh", True, _h_inst_ssh_list),
            "POST": ("instance_ssh", True, _h_inst_ssh_add),
        }
    elif parts[:2] == ["v0", "instances"] and n == 5 and parts[3] == "ssh":
        table = {"DELETE": ("instance_ssh", True, _h_inst_ssh_delete)}
    elif parts == ["v0", "ssh"]:
        table = {"GET": ("ssh", True, _h_ssh_list), "POST": ("ssh", True, _h_ssh_add)}
    elif parts[:2] == ["v0", "ssh"] and n == 3:
        table = {"PUT": ("ssh", True, _h_ssh_update), "DELETE": ("ssh", True, _h_ssh_delete)}
    elif parts == ["v0", "users", "current"]:
        table = {"GET": ("user", True, _h_user)}
    elif parts == ["v0", "charges"]:
        table = {"GET": ("charges", True, _h_charges)}
    else:
        return _error(404, "not_found", "Unknown API endpoint.")
    if method in table:
        return table[method]
    allowed = tuple(table)
    return _Resp(
        405,
        json.dumps(
            {
                "success": False,
                "error": "method_not_allowed",
                "msg": f"Method {method} not allowed.",
            }
        ).encode(),
        headers=(("allow", ", ".join(allowed)),),
    )


# ---------------------------------------------------------------- handlers
def _h_charges(cloud: SimCloud, req: _Request, parts: list[str]) -> Any:
    return cloud.charges_list()


def _h_search_post(cloud: SimCloud, req: _Request, parts: list[str]) -> Any:
    return cloud.search(req.json_body(), None)


def _h_search_get(cloud: SimCloud, req: _Request, parts: list[str]) -> Any:
    def param(name: str, default: Any) -> Any:
        if name not in req.params:
            return default
        try:
            return json.loads(req.params[name])
        except ValueError:
            raise ApiError(
                400,
                {"success": False, "error": "invalid_request", "msg": f"Invalid json in {name}"},
            ) from None

    return cloud.search(param("q", {}), param("select_cols", None))


def _h_search_new(cloud: SimCloud, req: _Request, parts: list[str]) -> Any:
    body = req.json_body()
    if not isinstance(body, dict):
        raise ApiError(
            400,
            {
                "success": False,
                "error": "invalid_request",
                "msg": "Invalid query: must be dict of conditions",
            },
        )
    return cloud.search(body.get("q", {}), body.get("select_cols"))


def _h_create(cloud: SimCloud, req: _Request, parts: list[str]) -> Any:
    return cloud.create(_int_id(parts[2]), req.json_body(), fault_hint=req.fault_hint)


def _h_list_v1(cloud: SimCloud, req: _Request, parts: list[str]) -> Any:
    return cloud.list_v1(req.params)


def _h_list_v0(cloud: SimCloud, req: _Request, parts: list[str]) -> Any:
    return cloud.list_v0()


def _h_logs(cloud: SimCloud, req: _Request, parts: list[str]) -> Any:
    raw = parts[3]
    if not raw.isdigit():
        raise ApiError(404, {"error": "invalid_id", "msg": "Invalid instance id."})
    return cloud.request_logs(int(raw), req.json_body(), req.base_url)


def _h_show(cloud: SimCloud, req: _Request, parts: list[str]) -> Any:
    return cloud.show(_int_id(parts[2]))


def _h_manage(cloud: SimCloud, req: _Request, parts: list[str]) -> Any:
    iid = _int_id(parts[2])
    return cloud.manage(iid, req.json_body())


def _h_destroy(cloud: SimCloud, req: _Request, parts: list[str]) -> Any:
    iid = _int_id(parts[2])
    req.json_body()  # validate
    return cloud.destroy(iid)


def _h_destroy_bulk(cloud: SimCloud, req: _Request, parts: list[str]) -> Any:
    try:
        body = json.loads(req.raw_body or b"{}")
    except ValueError:
        raise ApiError(
            400, {"success": False, "error": "invalid_args", "msg": "invalid request format"}
        ) from None
    return cloud.destroy_many(body)


def _h_manage_bulk(cloud: SimCloud, req: _Request, parts: list[str]) -> Any:
    return cloud.manage_many(req.json_body())


def _h_reboot(cloud: SimCloud, req: _Request, parts: list[str]) -> Any:
    if not parts[3].isdigit():
        # OAS reboot instance: 400 {"error": "invalid_args", "msg": "invalid instance_id"}
        raise ApiError(
            400, {"success": False, "error": "invalid_args", "msg": "invalid instance_id"}
        )
    req.json_body()  # validate
    return cloud.reboot(int(parts[3]))


def _h_bid_price(cloud: SimCloud, req: _Request, parts: list[str]) -> Any:
    return cloud.change_bid(_int_id(parts[3]), req.json_body())


def _h_inst_ssh_list(cloud: SimCloud, req: _Request, parts: list[str]) -> Any:
    return cloud.instance_ssh_list(_int_id(parts[2]))


def _h_inst_ssh_add(cloud: SimCloud, req: _Request, parts: list[str]) -> Any:
    iid = _int_id(parts[2])
    return cloud.instance_ssh_add(iid, req.json_body())


def _h_inst_ssh_delete(cloud: SimCloud, req: _Request, parts: list[str]) -> Any:
    return cloud.instance_ssh_delete(_int_id(parts[2]), _int_id(parts[4]))


def _h_ssh_list(cloud: SimCloud, req: _Request, parts: list[str]) -> Any:
    return cloud.ssh_list()


def _h_ssh_add(cloud: SimCloud, req: _Request, parts: list[str]) -> Any:
    return cloud.ssh_add(req.json_body())


def _h_ssh_update(cloud: SimCloud, req: _Request, parts: list[str]) -> Any:
    kid = _int_id(parts[2])
    return cloud.ssh_update(kid, req.json_body())


def _h_ssh_delete(cloud: SimCloud, req: _Request, parts: list[str]) -> Any:
    kid = _int_id(parts[2])
    req.json_body()
    return cloud.ssh_delete(kid)


def _h_user(cloud: SimCloud, req: _Request, parts: list[str]) -> Any:
    return cloud.current_user()


# ---------------------------------------------------------------- the app
class SimApp:
    """ASGI callable serving a :class:`SimCloud`."""

    def __init__(self, cloud: SimCloud) -> None:
        self.cloud = cloud
        # Faults injected per client (the User-Agent's product): a trial tells the faults its
        # engine met from those its observer (the vastai CLI) met on the same cloud.
        self.faults_by_agent: Counter[str] = Counter()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        body = b""
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return
            body += msg.get("body", b"")
            if not msg.get("more_body"):
                break
        req = _Request(scope, body)
        resp = await self._handle(req)
        headers = [
            (b"content-type", resp.content_type.encode()),
            (b"content-length", str(len(resp.body)).encode()),
        ]
        headers += [(k.encode(), v.encode()) for k, v in resp.headers]
        await send({"type": "http.response.start", "status": resp.status, "headers": headers})
        await send(
            {"type": "http.response.body", "body": resp.body if req.method != "HEAD" else b""}
        )

    @staticmethod
    async def _lifespan(receive: Receive, send: Send) -> None:
        while True:
            msg = await receive()
            if msg["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif msg["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _handle(self, req: _Request) -> _Resp:
        path = req.path.rstrip("/") or "/"
        method = "GET" if req.method == "HEAD" else req.method
        fleet = _FLEET_RE.match(path)
        if fleet:
            return await _sim_faults(self.cloud, req, method, fleet.group(1))
        m = _LOG_RE.match(path)
        if m:
            if method != "GET":
                return _error(405, "method_not_allowed", f"Method {method} not allowed.")
            await self.cloud.tick()
            status, text = self.cloud.fetch_log(m.group(1))
            if status != 200:
                xml = (
                    '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>NoSuchKey</Code>'
                    "<Message>The specified key does not exist.</Message></Error>"
                )
                return _Resp(404, xml.encode(), "application/xml")
            return _Resp(200, text.encode(), "text/plain")
        if path == "/_sim/health":
            return _json(200, {"ok": True})
        if path == "/_sim/stats":
            stats = self.cloud.stats()
            stats["faults_by_agent"] = dict(sorted(self.faults_by_agent.items()))
            stats["ssh"] = _ssh_census()
            return _json(200, stats)
        if path == "/_sim/ssh":
            return await _sim_ssh(self.cloud, req, method)
        if not path.startswith("/api/"):
            return _error(404, "not_found", "Unknown API endpoint.")
        parts = [p for p in path[len("/api/") :].split("/") if p]
        routed = _route(method, parts)
        if isinstance(routed, _Resp):
            return routed
        endpoint, needs_auth, handler = routed
        key = req.api_key()
        if (needs_auth or key is not None) and key != self.cloud.api_key:
            return _error(401, "auth_error", "Invalid user key")

        kind = self.cloud.faults.decide(endpoint, method, path)
        lost = False
        if kind is not None:
            self.faults_by_agent[_agent(req.headers.get("user-agent", ""))] += 1
            base = kind.split("+", 1)[0]
            if base == "slow":
                await asyncio.sleep(self.cloud.faults.slow_delay)
            elif base.startswith("instance-"):
                req.fault_hint = base
            elif base.startswith("lost"):
                lost = True
            else:
                canned = self.cloud.faults.response_for(kind, endpoint)
                if canned is not None:
                    return _from_fault(canned)

        await self.cloud.tick()
        try:
            result = handler(self.cloud, req, parts)
            resp = _json(200, result)
        except ApiError as e:
            resp = _json(e.status, e.body)

        if lost and kind is not None:
            if kind == "lost-timeout":
                await asyncio.sleep(self.cloud.faults.lost_delay)
                return resp
            canned = self.cloud.faults.response_for(kind, endpoint)
            if canned is not None:
                return _from_fault(canned)
        return resp


def _ssh_census() -> dict[str, Any]:
    from vastsim import sshd

    return {**sshd.census(), "refusing": sshd.refusing()}


async def _sim_ssh(cloud: SimCloud, req: _Request, method: str) -> _Resp:
    """``/_sim/ssh`` (the reliability trials' switch, with the API key): ``POST {"refuse":
    true}`` makes every sandbox's sshd refuse connections, dropping the live ones (the
    controller cut off from its workers); ``{"refuse": false}`` listens again. GET: the count."""
    from vastsim import sshd

    if req.api_key() != cloud.api_key:
        return _error(401, "auth_error", "Invalid user key")
    if method == "POST":
        try:
            body = req.json_body()
        except ApiError as e:
            return _json(e.status, e.body)
        refuse = body.get("refuse") if isinstance(body, dict) else None
        if not isinstance(refuse, bool):
            return _error(400, "invalid_args", 'expected {"refuse": true|false}')
        await sshd.refuse_connections(refuse)
    elif method != "GET":
        return _error(405, "method_not_allowed", f"Method {method} not allowed.")
    return _json(200, _ssh_census())


def _agent(header: str) -> str:
    """A User-Agent's product name ("vastui/0.1" → "vastui"), short and printable."""
    name = header.split("/", 1)[0].strip()[:40]
    return name if name.isprintable() and name else "unknown"


def _from_fault(f: FaultResponse) -> _Resp:
    return _Resp(f.status, f.body, f.content_type, f.headers)


async def _sim_faults(cloud: SimCloud, req: _Request, method: str, name: str | None) -> _Resp:
    """The fleet faults (vastsim/fleet.py), for trials that start a storm and end it: ``GET
    /_sim/faults`` (no key) answers every fault's state; with the API key, ``PUT`` (or ``POST``)
    ``/_sim/faults/<name>`` ``{"on": true, ...parameters}`` switches one on (``"on"``: true by
    default; false switches it off) and ``DELETE /_sim/faults/<name>`` off."""
    if name is None:
        if method != "GET":
            return _error(405, "method_not_allowed", f"Method {method} not allowed.")
        return _json(200, {"faults": cloud.fleet.state()})
    if method not in ("PUT", "POST", "DELETE"):
        return _error(405, "method_not_allowed", f"Method {method} not allowed.")
    if req.api_key() != cloud.api_key:
        return _error(401, "auth_error", "Invalid user key")
    try:
        body = req.json_body()
    except ApiError as e:
        return _json(e.status, e.body)
    if not isinstance(body, dict):
        return _error(400, "invalid_args", "expected a JSON object")
    params = dict(body)
    on = params.pop("on", True) if method != "DELETE" else False
    if not isinstance(on, bool):
        return _error(400, "invalid_args", '"on" must be true or false')
    try:
        state = await cloud.fleet_fault(name, on, **params)
    except FleetFaultError as e:
        if e.unknown:
            return _error(404, "no_such_fault", str(e))
        return _error(400, "invalid_args", str(e))
    return _json(200, {"success": True, "faults": state})


def make_app(cloud: SimCloud) -> SimApp:
    """The ASGI app serving ``cloud``."""
    return SimApp(cloud)
