"""A stand-in for the controller's Lotus API (JSON-RPC over HTTP on :1234).

Workers check the tunnel by calling `Filecoin.Version` through it, curio asks
`Filecoin.StateNetworkName` with its token (deps/apiinfo.go) before it starts and its proofshare
submit task `Filecoin.StateLookupID`; the demo and the tests have no Lotus node, so this answers
just enough for them.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import socket

from vastsim.fleet import hold_port

VERSION = {"Version": "1.34.0+mainnet+sim", "APIVersion": 131840, "BlockDelay": 30}


def lookup_id(addr: str) -> str:
    """The ID address the simulated chain gives an account: f0 and a number from the address
    (an ID address is its own)."""
    if addr[:2] in ("f0", "t0"):
        return addr
    digest = hashlib.sha256(addr.encode()).digest()
    return f"f0{100000 + int.from_bytes(digest[:4], 'big') % 900000}"


class FakeLotus:
    def __init__(self, token: str | None = None) -> None:
        self.server: asyncio.Server | None = None
        self.port = 0
        self.calls = 0
        self.token = token  # when set, methods other than Version need "Bearer <token>"
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
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            length = 0
            auth = ""
            for line in head.decode("latin-1").split("\r\n")[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value.strip() or 0)
                elif name.strip().lower() == "authorization":
                    auth = value.strip()
            body = await asyncio.wait_for(reader.readexactly(length), 10) if length else b""
            try:
                request = json.loads(body or b"{}")
            except json.JSONDecodeError:
                request = {}
            self.calls += 1
            rid = request.get("id", 1) if isinstance(request, dict) else 1
            method = request.get("method") if isinstance(request, dict) else None
            status = b"200 OK"
            if method == "Filecoin.Version":
                answer = {"jsonrpc": "2.0", "result": VERSION, "id": rid}
            elif self.token is not None and auth != f"Bearer {self.token}":
                status = b"401 Unauthorized"
                answer = {"jsonrpc": "2.0", "error": {"code": 401, "message": "unauthorized"}}
            elif method == "Filecoin.StateNetworkName":
                answer = {"jsonrpc": "2.0", "result": "mainnet", "id": rid}
            elif method == "Filecoin.StateLookupID":
                # curio's PShareSubmit turns the provider's wallet into its actor id
                # (tasks/proofshare/task_submit.go:141): a stable one per address
                params = request.get("params") if isinstance(request, dict) else None
                addr = str(params[0]) if isinstance(params, list) and params else ""
                answer = {"jsonrpc": "2.0", "result": lookup_id(addr), "id": rid}
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
