"""Host-key pins: the store's ``host_keys`` table (migration 2) and the pin implementations."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import asyncssh
import pytest

from vastui.ssh import MemoryPins, PinConflict, StorePins
from vastui.ssh.pins import fingerprint, key_body, ssh_key
from vastui.store import SCHEMA_VERSION, Store, StoreError
from vastui.store.migrations import MIGRATIONS

T0 = 1_796_033_100.0


def _key() -> str:
    key = asyncssh.generate_private_key("ssh-ed25519")
    return key.export_public_key("openssh").decode().strip()


@pytest.fixture
async def store(tmp_path: Path):
    s = await Store.open(tmp_path / "vastui.db")
    try:
        yield s
    finally:
        await s.close()


async def test_migration_from_v1_upgrades_in_place(tmp_path: Path) -> None:
    path = tmp_path / "v1.db"
    with sqlite3.connect(path) as raw:
        raw.executescript(MIGRATIONS[0])
        raw.execute("PRAGMA user_version = 1")
        raw.execute(
            "INSERT INTO instances (vast_id, label, created_at) VALUES (77, 'w-77', ?)", (T0,)
        )
        raw.execute(
            "INSERT INTO bad_machines (machine_id, reason, source, created_at, updated_at)"
            " VALUES (5, 'flaky', 'manual', ?, ?)",
            (T0, T0),
        )
    raw.close()

    async with await Store.open(path) as s:
        assert await s.schema_version() == SCHEMA_VERSION
        assert (await s.instances.get(77)).label == "w-77"
        assert await s.badlist.machine_ids(now=T0) == {5}
        assert await s.host_keys.get(77) is None
        key = _key()
        rec = await s.host_keys.pin(77, "1.2.3.4", 2222, key, fingerprint(key), now=T0)
        assert rec.instance_id == 77 and rec.pinned_at == T0

    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        cols = [r[1] for r in raw.execute("PRAGMA table_info(host_keys)")]
        assert cols == ["instance_id", "host", "port", "public_key", "fingerprint", "pinned_at"]
        assert raw.execute("SELECT COUNT(*) FROM host_keys").fetchone()[0] == 1
    raw.close()

    # Reopening does not re-run anything.
    async with await Store.open(path) as s:
        assert (await s.host_keys.get(77)).pinned_at == T0


async def test_pin_get_forget(store: Store) -> None:
    key = _key()
    fp = fingerprint(key)
    assert fp.startswith("SHA256:")
    assert await store.host_keys.get(1) is None
    rec = await store.host_keys.pin(1, "ssh4.vast.ai", 30001, key + " root@worker", fp, now=T0)
    assert rec.public_key == key_body(key)  # comment dropped
    assert (rec.host, rec.port, rec.fingerprint) == ("ssh4.vast.ai", 30001, fp)

    # Same key again: endpoint refreshed, pin time kept.
    again = await store.host_keys.pin(1, "1.2.3.4", 40022, key, fp, now=T0 + 60)
    assert (again.host, again.port, again.pinned_at) == ("1.2.3.4", 40022, T0)

    # A different key is refused until the old pin is forgotten.
    other = _key()
    with pytest.raises(StoreError, match="different pinned host key"):
        await store.host_keys.pin(1, "1.2.3.4", 40022, other, fingerprint(other))
    assert (await store.host_keys.get(1)).fingerprint == fp
    assert await store.host_keys.forget(1) is True
    assert await store.host_keys.forget(1) is False
    assert await store.host_keys.get(1) is None
    rec = await store.host_keys.pin(1, "1.2.3.4", 40022, other, fingerprint(other), now=T0 + 99)
    assert rec.fingerprint == fingerprint(other) and rec.pinned_at == T0 + 99


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((0, "h", 22, "ssh-ed25519 AAAA", "fp"), "instance_id"),
        ((1, "", 22, "ssh-ed25519 AAAA", "fp"), "host"),
        ((1, "h", 0, "ssh-ed25519 AAAA", "fp"), "port"),
        ((1, "h", 70000, "ssh-ed25519 AAAA", "fp"), "port"),
        ((1, "h", 22, "garbage", "fp"), "public_key"),
        ((1, "h", 22, "ssh-ed25519 AAAA", " "), "fingerprint"),
    ],
)
async def test_pin_validation(store: Store, args: tuple, match: str) -> None:
    with pytest.raises(StoreError, match=match):
        await store.host_keys.pin(*args)


async def test_store_pins(store: Store) -> None:
    pins = StorePins(store)
    key = _key()
    assert await pins.get(9) is None
    await pins.pin(9, "h", 22, key)
    got = await pins.get(9)
    assert got is not None and got.fingerprint == fingerprint(key)
    assert ssh_key(got).public_data == asyncssh.import_public_key(key).public_data
    with pytest.raises(StoreError):
        await pins.pin(9, "h", 22, _key())
    assert await pins.forget(9) is True


async def test_memory_pins() -> None:
    pins = MemoryPins()
    key = _key()
    await pins.pin(3, "h", 22, key)
    await pins.pin(3, "h2", 23, key)
    got = await pins.get(3)
    assert (got.host, got.port, got.public_key) == ("h2", 23, key_body(key))
    with pytest.raises(PinConflict):
        await pins.pin(3, "h", 22, _key())
    assert pins.forget(3) and await pins.get(3) is None
