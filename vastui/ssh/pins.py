"""SSH host-key pins: trust on first use, one pinned key per Vast instance.

A worker's host key is unknown until the first connection; that key is pinned and every later
connection must present the same key. A different key blocks the instance until an operator
verifies the re-key and forgets the pin (``store.host_keys.forget``).
"""

from __future__ import annotations

import time
from typing import Protocol, runtime_checkable

import asyncssh

from vastui.domain.worker import HostKeyRecord
from vastui.store import Store


def ssh_key(pin: HostKeyRecord) -> asyncssh.SSHKey:
    """The pinned key as asyncssh compares it with the one a server presents."""
    return asyncssh.import_public_key(pin.public_key)


@runtime_checkable
class HostKeyPins(Protocol):
    async def get(self, instance_id: int) -> HostKeyRecord | None: ...

    async def pin(self, instance_id: int, host: str, port: int, public_key_openssh: str) -> None:
        """Pin a key. Re-pinning the same key may refresh host/port; a different key must raise."""
        ...


class PinConflict(Exception):
    """``pin`` was asked to replace an existing, different key."""


def key_body(public_key_openssh: str) -> str:
    """``"<type> <base64>"`` of an OpenSSH public key line (comment dropped)."""
    parts = public_key_openssh.split()
    if len(parts) < 2:
        raise ValueError("not an OpenSSH public key line")
    return f"{parts[0]} {parts[1]}"


def fingerprint(public_key_openssh: str) -> str:
    """SHA256 fingerprint, as OpenSSH prints it (``SHA256:...``)."""
    return asyncssh.import_public_key(key_body(public_key_openssh)).get_fingerprint("sha256")


class MemoryPins:
    """In-memory pins (tests, throwaway sessions)."""

    def __init__(self) -> None:
        self._pins: dict[int, HostKeyRecord] = {}

    async def get(self, instance_id: int) -> HostKeyRecord | None:
        return self._pins.get(instance_id)

    async def pin(self, instance_id: int, host: str, port: int, public_key_openssh: str) -> None:
        body = key_body(public_key_openssh)
        old = self._pins.get(instance_id)
        if old is not None and old.public_key != body:
            raise PinConflict(
                f"instance {instance_id} already has a different pinned host key "
                f"({old.fingerprint})"
            )
        pinned_at = old.pinned_at if old is not None else time.time()
        self._pins[instance_id] = HostKeyRecord(
            instance_id, host, port, body, fingerprint(body), pinned_at
        )

    def forget(self, instance_id: int) -> bool:
        return self._pins.pop(instance_id, None) is not None


class StorePins:
    """Pins persisted in the vastui store (``host_keys`` table)."""

    def __init__(self, store: Store) -> None:
        self._store = store

    async def get(self, instance_id: int) -> HostKeyRecord | None:
        return await self._store.host_keys.get(instance_id)

    async def pin(self, instance_id: int, host: str, port: int, public_key_openssh: str) -> None:
        body = key_body(public_key_openssh)
        await self._store.host_keys.pin(instance_id, host, port, body, fingerprint(body))

    async def forget(self, instance_id: int) -> bool:
        return await self._store.host_keys.forget(instance_id)
