"""A stand-in for the controller's Lotus API (JSON-RPC over HTTP on :1234).

Workers check the tunnel by calling `Filecoin.Version` through it, curio asks
`Filecoin.StateNetworkName` with its token (deps/apiinfo.go) before it starts, its proofshare
submit task `Filecoin.StateLookupID` (tasks/proofshare/task_submit.go:141), and every ask and
completion is signed through `Filecoin.StateAccountKey` and `Filecoin.WalletSign`
(lib/proofsvc/sigs.go:211-242); the demo and the tests have no Lotus node, so this answers just
enough for them.

Tokens carry their permissions as lotus's do (a JWT whose payload is ``{"Allow": [...]}``), and
each method needs its own (lotus api tags: read for the state calls, sign for WalletSign); a
token without it gets go-jsonrpc's refusal, ``missing permission to invoke 'WalletSign' (need
'sign')`` (go-jsonrpc auth/auth.go). A read-only token thus lets curio start and prove, and
never ask for work or be paid.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import socket

from vastsim.fleet import hold_port

VERSION = {"Version": "1.34.0+mainnet+sim", "APIVersion": 131840, "BlockDelay": 30}
# The permission each method needs (lotus api/api_full.go perm tags); Version needs none here
# (the workers' tunnel check sends no token).
PERMS = {
    "Filecoin.StateNetworkName": "read",
    "Filecoin.StateLookupID": "read",
    "Filecoin.StateAccountKey": "read",
    "Filecoin.ChainHead": "read",
    "Filecoin.WalletSign": "sign",
}
ALL_PERMS = ("read", "write", "sign", "admin")


def _b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def make_token(allow: tuple[str, ...]) -> str:
    """A JWT-shaped API token with lotus's payload (``lotus auth create-token --perm``); lotus
    only takes the "TOKEN:" prefix of an API info for one (deps/apiinfo_parse_curio.go)."""
    header = _b64url(json.dumps({"alg": "HS256", "typ": "JWT"}, separators=(",", ":")).encode())
    payload = _b64url(json.dumps({"Allow": list(allow)}, separators=(",", ":")).encode())
    return f"{header}.{payload}.{_b64url(b'sim-signature')}"


def token_perms(token: str) -> tuple[str, ...]:
    """The permissions a token's payload allows (none if it is not one of ours)."""
    try:
        payload = token.split(".")[1]
        allow = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))["Allow"]
    except (IndexError, ValueError, KeyError, TypeError):
        return ()
    return tuple(p for p in allow if isinstance(p, str)) if isinstance(allow, list) else ()


def account_key(addr: str) -> str:
    """The account key (f1/f3) behind an address: an f1/f3 is its own; an ID address gets one
    derived from it."""
    if addr[:2] in ("f1", "f3", "t1", "t3"):
        return addr
    return "f3" + hashlib.sha256(addr.encode()).hexdigest()[:40]


def lookup_id(addr: str) -> str:
    """The ID address the simulated chain gives an account: f0 and a number from the address
    (an ID address is its own)."""
    if addr[:2] in ("f0", "t0"):
        return addr
    digest = hashlib.sha256(addr.encode()).digest()
    return f"f0{100000 + int.from_bytes(digest[:4], 'big') % 900000}"


class FakeLotus:
    def __init__(self, token: str | None = None, *, tokens: tuple[str, ...] = ()) -> None:
        self.server: asyncio.Server | None = None
        self.port = 0
        self.calls = 0
        # when set, methods other than Version need "Bearer <one of them>" with the method's
        # permission (the first is the one the cluster's layer names)
        self.tokens = tuple(t for t in (token, *tokens) if t)
        self.token = self.tokens[0] if self.tokens else None
        self.refused: list[str] = []  # methods refused for a missing permission
        self.host = "127.0.0.1"
        self._held: socket.socket | None = None  # down: the port, bound, not listening

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        self.host = host
        self.server = await asyncio.start_server(self._handle, host, port)
        self.port = self.server.sockets[0].getsockname()[1]
        return self.port

    @property
    def down(self) -> bool:
        return self._held is not None

    async def go_down(self) -> None:
        """The node is down (the fleet fault ``controller_down``): its port refuses connections
        and no other server takes it (vastsim/fleet.py ``hold_port``)."""
        if self.server is None or self._held is not None:
            return
        await self.stop()
        self._held = hold_port(self.host, self.port)

    async def come_back(self) -> None:
        """Listen again on the same port."""
        held, self._held = self._held, None
        if held is None:
            return
        try:
            await self.start(self.host, self.port)
        finally:
            held.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(10):
                head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            auth = ""
            for line in head.decode("latin-1").split("\r\n")[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value.strip() or 0)
                elif name.strip().lower() == "authorization":
                    auth = value.strip()
            body = b""
            if length:
                async with asyncio.timeout(10):
                    body = await reader.readexactly(length)
            try:
                request = json.loads(body or b"{}")
            except json.JSONDecodeError:
                request = {}
            self.calls += 1
            rid = request.get("id", 1) if isinstance(request, dict) else 1
            method = request.get("method") if isinstance(request, dict) else None
            status = b"200 OK"
            given = auth.removeprefix("Bearer ").strip()
            need = PERMS.get(str(method))
            if method == "Filecoin.Version":
                answer = {"jsonrpc": "2.0", "result": VERSION, "id": rid}
            elif self.tokens and given not in self.tokens:
                status = b"401 Unauthorized"
                answer = {"jsonrpc": "2.0", "error": {"code": 401, "message": "unauthorized"}}
            elif self.tokens and need is not None and need not in token_perms(given):
                name = str(method).removeprefix("Filecoin.")
                self.refused.append(name)
                answer = {
                    "jsonrpc": "2.0", "id": rid,
                    "error": {"code": 1,
                              "message": f"missing permission to invoke '{name}' (need '{need}')"},
                }  # fmt: skip
            elif method == "Filecoin.StateNetworkName":
                answer = {"jsonrpc": "2.0", "result": "mainnet", "id": rid}
            elif method == "Filecoin.StateLookupID":
                # curio's PShareSubmit turns the provider's wallet into its actor id
                # (tasks/proofshare/task_submit.go:141): a stable one per address
                params = request.get("params") if isinstance(request, dict) else None
                addr = str(params[0]) if isinstance(params, list) and params else ""
                answer = {"jsonrpc": "2.0", "result": lookup_id(addr), "id": rid}
            elif method == "Filecoin.StateAccountKey":
                params = request.get("params") if isinstance(request, dict) else None
                addr = str(params[0]) if isinstance(params, list) and params else ""
                answer = {"jsonrpc": "2.0", "result": account_key(addr), "id": rid}
            elif method == "Filecoin.WalletSign":
                params = request.get("params") if isinstance(request, dict) else None
                data = json.dumps(params).encode()
                sig = base64.b64encode(b"\x02" + hashlib.sha256(data).digest() * 3).decode()
                answer = {"jsonrpc": "2.0", "result": {"Type": 2, "Data": sig}, "id": rid}
            elif method == "Filecoin.ChainHead":
                answer = {"jsonrpc": "2.0", "result": {"Height": 1, "Cids": []}, "id": rid}
            else:
                answer = {
                    "jsonrpc": "2.0",
                    "error": {"code": -32601, "message": "method not found"},
                    "id": rid,
                }
            payload = json.dumps(answer).encode()
            writer.write(
                b"HTTP/1.1 "
                + status
                + b"\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n".encode()
                + payload
            )
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ValueError):
            pass
        except ConnectionError:
            pass
        except asyncio.CancelledError:
            # the loop's end: this is asyncio's own task for the connection; a cancelled one
            # makes its done-callback print a traceback (asyncio/streams.py, 3.11), so it ends
            # normally (as vastsim/ycql.py's does)
            return
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def stop(self) -> None:
        if self._held is not None:
            self._held.close()
            self._held = None
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()
            self.server = None
