"""One :class:`WorkerConnection` per instance id, created on demand and closed on request."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import asyncssh

from .connection import WorkerConnection
from .pins import HostKeyPins
from .worker import Worker

log = logging.getLogger("vastui.ssh")


class _HasId(Protocol):
    @property
    def id(self) -> int: ...


class SshPool:
    """Keeps one connection per instance; every connection shares key, pins and options.

    ``conn_options`` are passed to :class:`WorkerConnection` (``username``, ``connect_timeout``,
    ``sleep``, ``backoff``, ``max_attempts``, ``forwards``, ``on_state``, ...).
    """

    def __init__(
        self,
        *,
        client_key: asyncssh.SSHKey | str | Path,
        pins: HostKeyPins,
        **conn_options: Any,
    ) -> None:
        self._client_key = client_key
        self._pins = pins
        self._options = conn_options
        self._conns: dict[int, WorkerConnection] = {}

    @staticmethod
    def _id(instance: int | _HasId) -> int:
        return instance if isinstance(instance, int) else int(instance.id)

    def get_or_create(
        self, instance: int | _HasId, endpoint: tuple[str, int], **overrides: Any
    ) -> WorkerConnection:
        """The instance's connection (created lazily, nothing is dialled here).

        If the instance's endpoint moved, the existing connection is re-pointed (its pin and a
        blocked state are kept). ``overrides`` apply only when the connection is created.
        """
        instance_id = self._id(instance)
        host, port = endpoint
        conn = self._conns.get(instance_id)
        if conn is not None and not conn.closed:
            conn.set_endpoint(host, port)
            return conn
        conn = WorkerConnection(
            instance_id,
            host,
            port,
            client_key=self._client_key,
            pins=self._pins,
            **{**self._options, **overrides},
        )
        self._conns[instance_id] = conn
        return conn

    def worker(self, instance: int | _HasId, endpoint: tuple[str, int]) -> Worker:
        return Worker(self.get_or_create(instance, endpoint))

    def get(self, instance_id: int) -> WorkerConnection | None:
        return self._conns.get(instance_id)

    def __contains__(self, instance_id: object) -> bool:
        return instance_id in self._conns

    def __iter__(self) -> Iterator[WorkerConnection]:
        return iter(list(self._conns.values()))

    def __len__(self) -> int:
        return len(self._conns)

    async def close_instance(self, instance_id: int) -> bool:
        conn = self._conns.pop(instance_id, None)
        if conn is None:
            return False
        await conn.close()
        return True

    async def close_all(self) -> None:
        conns, self._conns = list(self._conns.values()), {}
        results = await asyncio.gather(*(c.close() for c in conns), return_exceptions=True)
        for conn, result in zip(conns, results, strict=True):
            if isinstance(result, BaseException):
                log.warning("instance %s: close failed: %s", conn.instance_id, result)
