"""A stand-in for the curio cluster's database (YugabyteDB: YSQL on 5433, YCQL on 9042) on the
controller, for the demo and the tests. Workers reach it through the SSH tunnel, as they reach
the Lotus API.

It keeps what a proving worker touches: the ``harmony_config`` layers (curio's
``harmony/harmonydb/sql/20230919-config.sql``), with a ``base`` layer whose ``[Apis]`` name the
controller's chain node. The wire protocol is JSON lines, spoken only by the stand-in ``curio``
(``vastui/sim/standins/curio``); the YCQL port only accepts connections.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
from typing import Any

log = logging.getLogger("vastui.sim.harmonydb")

# A JWT-shaped token: lotus only takes the "TOKEN:" prefix of an API info for one
# (deps/apiinfo_parse_curio.go).
SIM_CHAIN_TOKEN = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJBbGxvdyI6WyJyZWFkIl19.c2ltLXNpZ25hdHVyZQ"


def base_layer(chain_addr: str, token: str = SIM_CHAIN_TOKEN) -> str:
    host, _, port = chain_addr.rpartition(":")
    secret = base64.b64encode(b"simulated-storage-rpc-secret-0001").decode()
    return (
        "[Apis]\n"
        f'  ChainApiInfo = ["{token}:/ip4/{host}/tcp/{port}/http"]\n'
        f'  StorageRPCSecret = "{secret}"\n'
    )


class FakeHarmonyDb:
    def __init__(
        self,
        *,
        user: str = "yugabyte",
        password: str = "yugabyte",
        database: str = "yugabyte",
        chain_addr: str = "127.0.0.1:1234",
    ) -> None:
        self.user = user
        self.password = password
        self.database = database
        self.layers: dict[str, str] = {"base": base_layer(chain_addr)}
        self.auth_failures = 0
        self._servers: list[asyncio.Server] = []
        self._handlers: set[asyncio.Task[Any]] = set()
        self.port = 0
        self.cql_port = 0

    async def start(self, host: str = "127.0.0.1") -> tuple[int, int]:
        ysql = await asyncio.start_server(self._handle, host, 0)
        cql = await asyncio.start_server(self._accept_only, host, 0)
        self._servers = [ysql, cql]
        self.port = ysql.sockets[0].getsockname()[1]
        self.cql_port = cql.sockets[0].getsockname()[1]
        return self.port, self.cql_port

    async def stop(self) -> None:
        for server in self._servers:
            server.close()
        for task in list(self._handlers):
            task.cancel()
        for task in list(self._handlers):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for server in self._servers:
            with contextlib.suppress(Exception):
                await server.wait_closed()
        self._servers = []

    def _track(self) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
            task.add_done_callback(self._handlers.discard)

    async def _accept_only(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self._track()
        with contextlib.suppress(Exception, asyncio.CancelledError):  # as in _handle
            if await reader.readline():
                writer.write(b"SUPPORTED\n")
                await writer.drain()
        writer.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._track()
        authed = False
        try:
            while line := await reader.readline():
                try:
                    request = json.loads(line)
                except ValueError:
                    break
                if not isinstance(request, dict):
                    break
                if request.get("op") == "auth":
                    authed = (
                        request.get("user") == self.user
                        and request.get("password") == self.password
                        and request.get("database") == self.database
                    )
                    if not authed:
                        self.auth_failures += 1
                        user = request.get("user")
                        answer: dict[str, Any] = {
                            "error": f'password authentication failed for user "{user}"'
                        }
                    else:
                        answer = {"ok": True}
                elif not authed:
                    answer = {"error": "not authenticated"}
                else:
                    answer = self._query(request)
                writer.write((json.dumps(answer) + "\n").encode())
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        except asyncio.CancelledError:
            # stop() cancels open connections: end quietly, or Python 3.11's stream callback
            # logs the cancelled handler task as an error.
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    def _query(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request.get("op")
        if op == "get_layer":
            return {"config": self.layers.get(str(request.get("title")))}
        if op == "set_layer":
            title = str(request.get("title") or "")
            self.layers[title] = str(request.get("config") or "")
            log.info("layer %s created/updated", title)
            return {"ok": True}
        if op == "list_layers":
            return {"titles": sorted(self.layers)}
        return {"error": f"unknown op {op!r}"}
