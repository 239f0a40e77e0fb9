"""CqlPinProxy (vastui/ssh/cqlpin.py) pins a YugabyteDB cluster to a worker's YCQL tunnel.

The cluster is the simulator's YCQL (vastsim/ycql.py), the client the stand-in model of gocql's
session creation (vastsim/standins/_cql.py) and, independently, the DataStax Python driver
(cassandra-driver), which discovers peers as gocql does. A worker's network is modelled by a dial
that refuses anything off 127.0.0.0/8 before a packet leaves: a Vast box cannot reach the
controller's private network, and no test sends traffic there.
"""

from __future__ import annotations

import asyncio
import errno
import importlib.util
import ipaddress
import socket
import struct
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.helpers import WAIT, wait_for
from vastsim import ycql
from vastsim.ycql import FakeYcql
from vastui.ssh import cqlpin
from vastui.ssh.cqlpin import MAX_FRAME, CqlPinProxy

STANDINS = Path(__file__).resolve().parents[1] / "vastsim" / "standins"
ADVERTISED, PEERS = "10.0.0.5", ("10.0.0.6", "10.0.0.7")
LOCAL_QUERY = "SELECT * FROM system.local WHERE key='local'"
PEERS_QUERY = "SELECT * FROM system.peers"
ADDRESS_COLUMNS = ("broadcast_address", "listen_address", "rpc_address")  # YB's system.local


def load_cql() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_cql_under_test", STANDINS / "_cql.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


CQL = load_cql()


class WorkerNet:
    """A Vast box's view: loopback (its tunnels) is reachable, the 10.x network is not."""

    def __init__(self) -> None:
        self.refused: list[str] = []

    def __call__(self, host: str, port: int, timeout: float) -> socket.socket:
        if not ipaddress.ip_address(host).is_loopback:
            self.refused.append(host)
            raise OSError(f"dial tcp {host}:{port}: connect: network is unreachable")
        return socket.create_connection((host, port), timeout)


async def session_for(port: int, dial: Callable[..., socket.socket] | None = None) -> Any:
    """gocql's CreateSession against 127.0.0.1:port (a worker's tunnel), off the event loop."""
    return await asyncio.to_thread(CQL.create_session, ["127.0.0.1"], port, dial or WorkerNet())


@pytest.fixture
async def single() -> AsyncIterator[tuple[FakeYcql, int]]:
    fake = FakeYcql(rpc_address="127.0.0.1")  # yugabyted start --advertise_address 127.0.0.1
    port = await fake.start()
    yield fake, port
    await fake.stop()


@pytest.fixture
async def multi() -> AsyncIterator[tuple[FakeYcql, int]]:
    fake = FakeYcql(rpc_address=ADVERTISED, peers=PEERS)
    port = await fake.start()
    yield fake, port
    await fake.stop()


@pytest.fixture
async def pinned(multi: tuple[FakeYcql, int]) -> AsyncIterator[tuple[FakeYcql, CqlPinProxy, int]]:
    fake, port = multi
    proxy = CqlPinProxy("127.0.0.1", port)
    proxy_port = await proxy.start()
    yield fake, proxy, proxy_port
    await proxy.stop()


# ---------------------------------------------------------------- raw frames


@dataclass
class Frame:
    version: int
    flags: int
    stream: int
    opcode: int
    body: bytes

    def raw(self) -> bytes:
        head = struct.pack(">BBhBi", self.version, self.flags, self.stream, self.opcode, 0)
        return head[:5] + struct.pack(">i", len(self.body)) + self.body

    def error(self) -> tuple[int, str]:
        code, n = struct.unpack(">iH", self.body[:6])
        return code, self.body[6 : 6 + n].decode()


def long_string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack(">i", len(raw)) + raw


def short_string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack(">H", len(raw)) + raw


def query(text: str) -> bytes:
    return long_string(text) + struct.pack(">HB", 0x0001, 0)


def execute(statement_id: bytes, *, skip_metadata: bool = True) -> bytes:
    flags = 0x02 if skip_metadata else 0
    return struct.pack(">H", len(statement_id)) + statement_id + struct.pack(">HB", 0x0001, flags)


def string_map(options: dict[str, str]) -> bytes:
    body = struct.pack(">H", len(options))
    return body + b"".join(short_string(k) + short_string(v) for k, v in options.items())


class Raw:
    """A CQL connection driven frame by frame."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.others: list[Frame] = []  # frames read while waiting for another stream

    @classmethod
    async def open(cls, port: int) -> Raw:
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    async def close(self) -> None:
        self.writer.close()
        await self.writer.wait_closed()

    async def send(
        self, opcode: int, body: bytes = b"", *, stream: int = 1, version: int = 4, flags: int = 0
    ) -> None:
        self.writer.write(struct.pack(">BBhBi", version, flags, stream, opcode, len(body)) + body)
        await self.writer.drain()

    async def recv(self) -> Frame:
        head = await asyncio.wait_for(self.reader.readexactly(9), WAIT)
        version, flags, stream, opcode, length = struct.unpack(">BBhBi", head)
        body = await asyncio.wait_for(self.reader.readexactly(length), WAIT)
        return Frame(version, flags, stream, opcode, body)

    async def answer(self, stream: int) -> Frame:
        while True:
            frame = await self.recv()
            if frame.stream == stream:
                return frame
            self.others.append(frame)

    async def request(self, opcode: int, body: bytes = b"", *, stream: int = 1) -> Frame:
        await self.send(opcode, body, stream=stream)
        return await self.answer(stream)

    async def startup(self, options: dict[str, str] | None = None) -> Frame:
        return await self.request(ycql.STARTUP, string_map(options or {"CQL_VERSION": "3.0.0"}))

    async def eof(self) -> bool:
        return await asyncio.wait_for(self.reader.read(1), WAIT) == b""


def rows(frame: Frame) -> list[dict[str, Any]]:
    """Rows with metadata, read by the stand-in client's own decoder (not the proxy's)."""
    assert frame.opcode == ycql.RESULT, frame
    decoded = CQL._rows(frame.body)
    assert decoded is not None
    return decoded


def rows_without_metadata(body: bytes, columns: tuple[tuple[str, str], ...]) -> list[dict]:
    """A Rows result sent with No_metadata, read with the columns the test knows."""
    kind, flags, count = struct.unpack(">iii", body[:12])
    assert (kind, flags & 0x0004, count) == (ycql.ROWS, 0x0004, len(columns))
    n_rows, pos, out = struct.unpack(">i", body[12:16])[0], 16, []
    for _ in range(n_rows):
        row = {}
        for name, type_name in columns:
            (n,) = struct.unpack(">i", body[pos : pos + 4])
            raw = body[pos + 4 : pos + 4 + max(n, 0)]
            pos += 4 + max(n, 0)
            row[name] = str(ipaddress.ip_address(raw)) if type_name == "inet" and n > 0 else raw
        out.append(row)
    assert pos == len(body)
    return out


# ---------------------------------------------------------------- (a) a single-node cluster


async def test_single_node_cluster_works_directly(single: tuple[FakeYcql, int]) -> None:
    _fake, port = single
    session = await session_for(port)
    try:
        assert session.protocol_version == 4
        assert [h.address for h in session.hosts] == ["127.0.0.1"]
        assert session.connected == ["127.0.0.1"]
        await asyncio.to_thread(session.refresh_ring)
        assert session.connected == ["127.0.0.1"]
        rows_ = await asyncio.to_thread(session.execute, LOCAL_QUERY)
        assert rows_[0]["rpc_address"] == "127.0.0.1"
    finally:
        session.close()


# ---------------------------------------------------------------- (b) a multi-node cluster


async def test_multi_node_cluster_through_the_tunnel_breaks(multi: tuple[FakeYcql, int]) -> None:
    """What gocql v1.6.0-yb-1 does: the session is created through the tunnelled node (it keeps
    the dialled address, ring.go addOrUpdate) with its peers down; the first ring refresh moves
    that node to its advertised address and every query fails."""
    _fake, port = multi
    net = WorkerNet()
    session = await session_for(port, net)
    try:
        assert [h.address for h in session.hosts] == ["127.0.0.1", *PEERS]
        assert session.connected == ["127.0.0.1"]
        assert [h.up for h in session.hosts] == [True, False, False]
        assert (
            session.hosts[1].error == f"dial tcp 10.0.0.6:{port}: connect: network is unreachable"
        )
        assert net.refused == list(PEERS)
        assert session.partitions == 1  # system.partitions read, its 10.x replicas never dialled

        await asyncio.to_thread(session.refresh_ring)  # a control reconnect / topology event
        assert [h.address for h in session.hosts] == [ADVERTISED, *PEERS]
        assert session.connected == []
        with pytest.raises(CQL.CqlError) as failure:
            await asyncio.to_thread(session.execute, LOCAL_QUERY)
        assert str(failure.value) == "gocql: no hosts available in the pool"
    finally:
        session.close()


async def test_no_pool_connection_is_err_no_connections_started(
    multi: tuple[FakeYcql, int],
) -> None:
    """The tunnel dies right after the control connection: NewSession returns
    ErrNoConnectionsStarted unwrapped (session.go:181-184, cluster.go:313)."""
    _fake, port = multi
    dials: list[str] = []
    net = WorkerNet()

    def dying_tunnel(host: str, port_: int, timeout: float) -> socket.socket:
        dials.append(host)
        if len(dials) > 2:  # protocol discovery and the control connection got through
            raise ConnectionRefusedError(f"dial tcp {host}:{port_}: connect: connection refused")
        return net(host, port_, timeout)

    with pytest.raises(CQL.CqlError) as failure:
        await session_for(port, dying_tunnel)
    assert str(failure.value) == "no connections were made when creating the session"


async def test_unreachable_tunnel_is_a_wrapped_discovery_error() -> None:
    def nothing_listens(host: str, port: int, timeout: float) -> socket.socket:
        raise ConnectionRefusedError(f"dial tcp {host}:{port}: connect: connection refused")

    with pytest.raises(CQL.CqlError) as failure:
        await session_for(9042, nothing_listens)
    assert str(failure.value) == (
        "gocql: unable to create session: unable to discover protocol version: "
        "dial tcp 127.0.0.1:9042: connect: connection refused"
    )


# ---------------------------------------------------------------- (c) behind the proxy


async def test_the_proxy_pins_the_cluster_to_the_tunnel(
    pinned: tuple[FakeYcql, CqlPinProxy, int],
) -> None:
    fake, proxy, port = pinned
    net = WorkerNet()
    session = await session_for(port, net)
    try:
        assert [h.address for h in session.hosts] == ["127.0.0.1"]
        assert session.connected == ["127.0.0.1"]
        assert net.refused == []
        # control setup and GetHosts each read system.local; GetHosts read system.peers once
        assert (proxy.stats.local_rewritten, proxy.stats.peers_emptied) == (2, 1)
        assert proxy.stats.rewritten == 3
        assert proxy.stats.malformed == 0
        assert PEERS_QUERY in fake.queries  # the cluster did answer with its peers

        await asyncio.to_thread(session.refresh_ring)
        assert [h.address for h in session.hosts] == ["127.0.0.1"]
        assert session.connected == ["127.0.0.1"]
        rows_ = await asyncio.to_thread(session.execute, LOCAL_QUERY)
        assert all(rows_[0][c] == "127.0.0.1" for c in ADDRESS_COLUMNS)
        assert rows_[0]["host_id"] == str(ycql.host_id_for(ADVERTISED))  # the rest untouched
    finally:
        session.close()


async def test_rows_keep_their_metadata_and_other_values(
    pinned: tuple[FakeYcql, CqlPinProxy, int],
) -> None:
    fake, _proxy, port = pinned
    direct = await Raw.open(fake_port(fake))
    client = await Raw.open(port)
    try:
        for conn in (direct, client):
            await conn.startup()
        truth = rows(await direct.request(ycql.QUERY, query(LOCAL_QUERY)))[0]
        seen = rows(await client.request(ycql.QUERY, query(LOCAL_QUERY)))[0]
        assert list(seen) == [name for name, _ in ycql.LOCAL_COLUMNS]
        assert {k: v for k, v in seen.items() if k not in ADDRESS_COLUMNS} == {
            k: v for k, v in truth.items() if k not in ADDRESS_COLUMNS
        }
        assert [truth[c] for c in ADDRESS_COLUMNS] == [ADVERTISED] * 3
        assert [seen[c] for c in ADDRESS_COLUMNS] == ["127.0.0.1"] * 3

        peers = await client.request(ycql.QUERY, query(PEERS_QUERY))
        peers_direct = await direct.request(ycql.QUERY, query(PEERS_QUERY))
        assert rows(peers) == [] and len(rows(peers_direct)) == 2
        # the same metadata, zero rows: the body up to the row count is unchanged
        assert peers.body == peers_direct.body[: len(peers.body) - 4] + struct.pack(">i", 0)

        projected = "SELECT peer, rpc_address, schema_version FROM system.peers"
        assert rows(await client.request(ycql.QUERY, query(projected))) == []
        partitions = rows(
            await client.request(ycql.QUERY, query("SELECT * FROM system.partitions;"))
        )
        assert partitions[0]["replica_addresses"] == {  # passed unchanged (see the module doc)
            ADVERTISED: "LEADER",
            **dict.fromkeys(PEERS, "FOLLOWER"),
        }
    finally:
        await direct.close()
        await client.close()


def fake_port(fake: FakeYcql) -> int:
    assert fake._server is not None
    return int(fake._server.sockets[0].getsockname()[1])


async def test_pipelined_streams_are_answered_each_its_own_way(
    pinned: tuple[FakeYcql, CqlPinProxy, int],
) -> None:
    _fake, proxy, port = pinned
    client = await Raw.open(port)
    try:
        await client.startup()
        await client.send(ycql.QUERY, query(PEERS_QUERY), stream=5)
        await client.send(ycql.QUERY, query(LOCAL_QUERY), stream=6)
        await client.send(ycql.QUERY, query("SELECT * FROM system_schema.keyspaces"), stream=7)
        answers = {f.stream: f for f in [await client.recv() for _ in range(3)]}
        assert rows(answers[5]) == []
        assert rows(answers[6])[0]["rpc_address"] == "127.0.0.1"
        assert rows(answers[7]) == []
        assert (proxy.stats.local_rewritten, proxy.stats.peers_emptied) == (1, 1)
    finally:
        await client.close()


async def test_prepared_statements_are_rewritten_too(
    pinned: tuple[FakeYcql, CqlPinProxy, int],
) -> None:
    """gocql prepares a session's SELECTs and executes them with skip_metadata: the proxy keeps
    the result metadata of the PREPARE to rewrite rows that come without it."""
    _fake, proxy, port = pinned
    preparer, executor = await Raw.open(port), await Raw.open(port)
    try:
        for conn in (preparer, executor):
            await conn.startup()
        ids = {}
        for name, text in (
            ("local", LOCAL_QUERY),
            ("peers", PEERS_QUERY),
            ("other", "SELECT * FROM t"),
        ):
            answer = await preparer.request(ycql.PREPARE, long_string(text))
            assert struct.unpack(">i", answer.body[:4])[0] == ycql.PREPARED
            (n,) = struct.unpack(">H", answer.body[4:6])
            ids[name] = answer.body[6 : 6 + n]
        assert proxy.stats.prepared_tracked == 2

        # statement ids are cluster-wide: executed on another connection
        local = await executor.request(ycql.EXECUTE, execute(ids["local"]))
        row = rows_without_metadata(local.body, ycql.LOCAL_COLUMNS)[0]
        assert all(row[c] == "127.0.0.1" for c in ADDRESS_COLUMNS)
        with_metadata = await executor.request(
            ycql.EXECUTE, execute(ids["local"], skip_metadata=False)
        )
        assert rows(with_metadata)[0]["rpc_address"] == "127.0.0.1"

        peers = await executor.request(ycql.EXECUTE, execute(ids["peers"]))
        assert rows_without_metadata(peers.body, ycql.PEERS_COLUMNS) == []
        other = await executor.request(ycql.EXECUTE, execute(ids["other"]))
        assert struct.unpack(">ii", other.body[:8]) == (ycql.ROWS, 0x0004)
        assert (proxy.stats.local_rewritten, proxy.stats.peers_emptied) == (2, 1)
        assert proxy.stats.malformed == 0
    finally:
        await preparer.close()
        await executor.close()


async def test_topology_events_are_dropped_schema_events_passed(
    pinned: tuple[FakeYcql, CqlPinProxy, int],
) -> None:
    fake, proxy, port = pinned
    client = await Raw.open(port)
    try:
        await client.startup()
        events = ("TOPOLOGY_CHANGE", "STATUS_CHANGE", "SCHEMA_CHANGE")
        body = struct.pack(">H", 3) + b"".join(short_string(e) for e in events)
        assert (await client.request(ycql.REGISTER, body)).opcode == ycql.READY
        assert await fake.push_topology_change("NEW_NODE", "10.0.0.8") == 1
        assert await fake.push_status_change("UP", "10.0.0.6") == 1
        assert await fake.push_schema_change("CREATED", "TABLE", "curio", "piece_by_aggregate") == 1
        # the cluster wrote the events before this answer; the proxy keeps upstream's order
        await client.request(ycql.QUERY, query(LOCAL_QUERY))
        assert [(f.stream, f.opcode) for f in client.others] == [(-1, ycql.EVENT)]
        assert client.others[0].body.startswith(short_string("SCHEMA_CHANGE"))
        assert (proxy.stats.events_dropped, proxy.stats.events_passed) == (2, 1)
    finally:
        await client.close()


async def test_compression_is_never_negotiated(
    pinned: tuple[FakeYcql, CqlPinProxy, int],
) -> None:
    fake, proxy, port = pinned
    direct, client = await Raw.open(fake_port(fake)), await Raw.open(port)
    try:
        offered = (await direct.request(ycql.OPTIONS)).body
        assert short_string("COMPRESSION") in offered and short_string("lz4") in offered
        supported = await client.request(ycql.OPTIONS)
        # the key stays (the Python driver indexes it), with no algorithm left to choose
        assert short_string("COMPRESSION") + b"\x00\x00" in supported.body
        assert short_string("lz4") not in supported.body
        ready = await client.startup({"CQL_VERSION": "3.0.0", "COMPRESSION": "lz4"})
        assert ready.opcode == ycql.READY  # the cluster never saw the request for lz4
        assert proxy.stats.compression_stripped == 2
    finally:
        await direct.close()
        await client.close()


async def test_a_newer_protocol_version_is_answered_by_the_proxy(
    pinned: tuple[FakeYcql, CqlPinProxy, int],
) -> None:
    fake, proxy, port = pinned
    client = await Raw.open(port)
    try:
        await client.send(ycql.OPTIONS, version=5, stream=0)
        refusal = await client.recv()
        assert (refusal.version, refusal.stream, refusal.opcode) == (0x84, 0, ycql.ERROR)
        assert refusal.error() == (
            0x000A,
            "Invalid or unsupported protocol version (5); "
            "the lowest supported version is 3 and the greatest is 4",
        )
        # gocql's discoverProtocol reads the greatest version out of this text
        assert CQL._PROTOCOL_SUPPORT.search(refusal.error()[1]).group(1) == "4"
        assert proxy.stats.versions_refused == 1
        assert fake.queries == []
        assert (await client.request(ycql.OPTIONS)).opcode == ycql.SUPPORTED  # then v4 works
    finally:
        await client.close()


async def test_the_cluster_itself_answers_a_newer_version_as_yugabytedb(
    single: tuple[FakeYcql, int],
) -> None:
    _fake, port = single
    client = await Raw.open(port)
    try:
        await client.send(ycql.OPTIONS, version=5, stream=3)
        refusal = await client.recv()
        assert (refusal.version, refusal.stream) == (0x84, 3)
        assert refusal.error() == (
            0x000A,
            "Invalid or unsupported protocol version 5. Supported versions are between 3 and 4.",
        )
    finally:
        await client.close()


# ---------------------------------------------------------------- hostile upstream


class Scripted:
    """An upstream whose answers the test writes: ``answer(frame)`` returns raw bytes."""

    def __init__(self, answer: Callable[[Frame], Awaitable[bytes] | bytes]) -> None:
        self.answer = answer
        self.received: list[Frame] = []
        self.server: asyncio.base_events.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readexactly(9)
                version, flags, stream, opcode, length = struct.unpack(">BBhBi", head)
                frame = Frame(version, flags, stream, opcode, await reader.readexactly(length))
                self.received.append(frame)
                writer.write(self.answer(frame))  # type: ignore[arg-type]
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def response(stream: int, opcode: int, body: bytes) -> bytes:
    return Frame(0x84, 0, stream, opcode, body).raw()


def supported(stream: int) -> bytes:
    return response(stream, ycql.SUPPORTED, struct.pack(">H", 0))


def local_metadata(count: int = 1) -> bytes:
    return (
        struct.pack(">iii", ycql.ROWS, 0x0001, count)
        + short_string("system")
        + short_string("local")
    )


MALFORMED = {
    "truncated row": local_metadata()
    + short_string("rpc_address")
    + struct.pack(">Hii", 0x0010, 1, 4)
    + b"\x0a\x00",
    "huge column count": struct.pack(">iii", ycql.ROWS, 0x0001, 2**31 - 1),
    "unknown type": local_metadata() + short_string("rpc_address") + struct.pack(">H", 0x7777),
    "nesting": local_metadata() + short_string("x") + struct.pack(">H", 0x0022) * 200,
    "row count overruns": local_metadata()
    + short_string("rpc_address")
    + struct.pack(">Hi", 0x0010, 1000),
    "negative value length": local_metadata()
    + short_string("rpc_address")
    + struct.pack(">Hii", 0x0010, 1, -7),
    "trailing bytes": local_metadata()
    + short_string("rpc_address")
    + struct.pack(">Hii", 0x0010, 1, 4)
    + b"\x0a\x00\x00\x05junk",
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
async def test_a_malformed_result_is_relayed_unchanged(case: str) -> None:
    def answer(frame: Frame) -> bytes:
        if frame.opcode == ycql.QUERY:
            return response(frame.stream, ycql.RESULT, MALFORMED[case])
        return supported(frame.stream)

    upstream = Scripted(answer)
    proxy = CqlPinProxy("127.0.0.1", await upstream.start())
    port = await proxy.start()
    try:
        client = await Raw.open(port)
        await client.send(ycql.QUERY, query(LOCAL_QUERY), stream=2)
        relayed = await client.recv()
        assert relayed.raw() == response(2, ycql.RESULT, MALFORMED[case])
        assert proxy.stats.malformed == 1
        assert (await client.request(ycql.OPTIONS, stream=3)).opcode == ycql.SUPPORTED
        await client.close()
        again = await Raw.open(port)  # the proxy is still up
        assert (await again.request(ycql.OPTIONS)).opcode == ycql.SUPPORTED
        await again.close()
    finally:
        await proxy.stop()
        await upstream.stop()


@pytest.mark.parametrize("length", [MAX_FRAME + 1, 2**31 - 1, -5])
async def test_a_client_frame_over_the_bound_closes_the_connection(length: int) -> None:
    upstream = Scripted(lambda frame: supported(frame.stream))
    proxy = CqlPinProxy("127.0.0.1", await upstream.start())
    port = await proxy.start()
    try:
        client = await Raw.open(port)
        client.writer.write(struct.pack(">BBhBi", 4, 0, 1, ycql.QUERY, length) + b"x" * 64)
        await client.writer.drain()
        assert await client.eof()
        assert proxy.stats.oversized == 1
        assert upstream.received == []  # nothing of it went upstream
        await client.close()
        again = await Raw.open(port)
        assert (await again.request(ycql.OPTIONS)).opcode == ycql.SUPPORTED
        await again.close()
    finally:
        await proxy.stop()
        await upstream.stop()


async def test_an_upstream_frame_over_the_bound_closes_the_connection() -> None:
    def answer(frame: Frame) -> bytes:
        if frame.opcode == ycql.QUERY:
            return struct.pack(">BBhBi", 0x84, 0, frame.stream, ycql.RESULT, MAX_FRAME + 1)
        return supported(frame.stream)

    upstream = Scripted(answer)
    proxy = CqlPinProxy("127.0.0.1", await upstream.start())
    port = await proxy.start()
    try:
        client = await Raw.open(port)
        await client.send(ycql.QUERY, query(LOCAL_QUERY))
        assert await client.eof()
        assert proxy.stats.oversized == 1
        await client.close()
        again = await Raw.open(port)
        assert (await again.request(ycql.OPTIONS)).opcode == ycql.SUPPORTED
        await again.close()
    finally:
        await proxy.stop()
        await upstream.stop()


async def test_an_unreachable_upstream_closes_the_client() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    dead_port = listener.getsockname()[1]
    listener.close()  # nothing listens there now
    proxy = CqlPinProxy("127.0.0.1", dead_port)
    port = await proxy.start()
    try:
        client = await Raw.open(port)
        assert await client.eof()
        assert proxy.stats.upstream_failures == 1
        await client.close()
    finally:
        await proxy.stop()


# ---------------------------------------------------------------- the parsers, property-based


def test_classify() -> None:
    assert cqlpin.classify(LOCAL_QUERY) == "local"
    assert cqlpin.classify("select schema_version from system.local where key='local'") == "local"
    assert cqlpin.classify('SELECT * FROM "system"."peers"') == "peers"
    assert cqlpin.classify("SELECT * FROM system.peers_v2") == "peers"
    assert cqlpin.classify("SELECT * FROM system.partitions;") is None
    assert cqlpin.classify("SELECT * FROM system.localities") is None
    assert cqlpin.classify("INSERT INTO system.local (key) VALUES ('x')") is None
    assert cqlpin.classify("SELECT * FROM mine.local") is None


@given(st.binary(max_size=300), st.integers(0, 15))
def test_parsers_never_fail_but_as_malformed(data: bytes, flags: int) -> None:
    pinned = bytes([127, 0, 0, 1])
    for parse in (
        lambda: cqlpin.pin_local(data, flags, pinned),
        lambda: cqlpin.empty_rows(data, flags),
        lambda: cqlpin.read_prepared(data, flags, 4),
        lambda: cqlpin._strip_option(data, multimap=True),
    ):
        try:
            result = parse()
        except cqlpin._Malformed:
            continue
        assert result is None or isinstance(result, (bytes, tuple))


@given(
    st.lists(
        st.tuples(
            st.ip_addresses(v=4).map(str), st.one_of(st.none(), st.ip_addresses(v=4).map(str))
        ),
        max_size=5,
    )
)
def test_every_address_is_pinned_and_nothing_else_changes(addresses: list) -> None:
    columns = (("peer", "inet"), ("data_center", "varchar"), ("rpc_address", "inet"))
    table = [
        {"peer": a, "data_center": f"dc{i}", "rpc_address": b} for i, (a, b) in enumerate(addresses)
    ]
    body = ycql._rows("system", "local", columns, table)
    new = cqlpin.pin_local(body, 0, bytes([127, 0, 0, 1]))
    decoded = CQL._rows(new if new is not None else body)
    assert decoded == [
        {"peer": "127.0.0.1", "data_center": f"dc{i}", "rpc_address": "127.0.0.1"}
        for i in range(len(table))
    ]


# ---------------------------------------------------------------- (d) an independent driver


def python_driver(port: int) -> dict[str, Any]:
    """cassandra-driver against 127.0.0.1:port with a worker's network: the hosts it found."""
    from cassandra.cluster import (
        EXEC_PROFILE_DEFAULT,
        Cluster,
        DefaultConnection,
        ExecutionProfile,
    )
    from cassandra.policies import ConstantReconnectionPolicy, RoundRobinPolicy

    refused: list[str] = []

    # _initiate_connection is private: pyproject pins cassandra-driver to the version read.
    class WorkerConnection(DefaultConnection):  # type: ignore[misc, valid-type]
        def _initiate_connection(self, sockaddr: tuple[Any, ...]) -> None:
            if not ipaddress.ip_address(sockaddr[0]).is_loopback:  # before any packet is sent
                refused.append(sockaddr[0])
                raise OSError(errno.ENETUNREACH, f"dial tcp {sockaddr[0]}:{sockaddr[1]}")
            super()._initiate_connection(sockaddr)

    cluster = Cluster(
        ["127.0.0.1"],
        port=port,
        connection_class=WorkerConnection,
        execution_profiles={
            EXEC_PROFILE_DEFAULT: ExecutionProfile(load_balancing_policy=RoundRobinPolicy())
        },
        schema_metadata_enabled=False,
        token_metadata_enabled=False,
        reconnection_policy=ConstantReconnectionPolicy(3600.0, max_attempts=1),
    )
    try:
        session = cluster.connect(wait_for_all_pools=True)
        wait_for(
            lambda: all(h.is_up is not None for h in cluster.metadata.all_hosts()),
            what="every host tried",
        )
        hosts = {h.endpoint.address: h.is_up for h in cluster.metadata.all_hosts()}
        statement = session.prepare(LOCAL_QUERY)
        prepared = session.execute(statement).one()
        return {
            "protocol": cluster.protocol_version,
            "hosts": hosts,
            "refused": sorted(set(refused)),
            "rpc_address": prepared.rpc_address,
        }
    finally:
        cluster.shutdown()


async def test_python_driver_sees_the_cluster_directly(multi: tuple[FakeYcql, int]) -> None:
    _fake, port = multi
    seen = await asyncio.to_thread(python_driver, port)
    assert seen["protocol"] == 4  # it began at DSE v2 and went down on YB's refusals
    assert seen["hosts"] == {"127.0.0.1": True, "10.0.0.6": False, "10.0.0.7": False}
    assert seen["refused"] == list(PEERS)
    assert seen["rpc_address"] == ADVERTISED


async def test_python_driver_through_the_proxy_sees_one_host(
    pinned: tuple[FakeYcql, CqlPinProxy, int],
) -> None:
    _fake, proxy, port = pinned
    seen = await asyncio.to_thread(python_driver, port)
    assert seen["protocol"] == 4
    assert seen["hosts"] == {"127.0.0.1": True}
    assert seen["refused"] == []
    assert seen["rpc_address"] == "127.0.0.1"  # a prepared statement, executed
    assert proxy.stats.versions_refused == 3  # DSE v2, DSE v1, v5: answered by the proxy
    assert proxy.stats.local_rewritten >= 1 and proxy.stats.peers_emptied >= 1
    assert proxy.stats.prepared_tracked == 1
    assert proxy.stats.malformed == 0
