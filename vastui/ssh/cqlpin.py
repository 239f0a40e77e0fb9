"""CqlPinProxy: the controller end of a worker's YCQL tunnel, pinning the cluster to the tunnel.

A worker reaches the controller's YugabyteDB YCQL only through an SSH remote forward (its
127.0.0.1:9042). curio opens its index store with gocql's defaults (curio
market/indexstore/indexstore.go:57 ``gocql.NewCluster(hosts...)``; the fork it pins is
yugabyte/gocql v1.6.0-yb-1), so gocql looks the cluster up and pools connections to each host's
*advertised* address (host_source.go GetHosts/getLocalHostInfo/getClusterPeerInfo,
session.go init). A production multi-node cluster advertises private addresses (10.x) that a
Vast box cannot reach:

* peers (system.peers ``rpc_address``) are dialled directly: every such pool fails and its host is
  marked down (connectionpool.go fill/fillingStopped);
* the node behind the tunnel keeps the address gocql dialled only until the first ring refresh
  (a control-connection reconnect, controlConn.reconnect -> refreshRing, or a TOPOLOGY_CHANGE /
  STATUS_CHANGE event for an address it does not know, events.go handleNodeEvent/handleNodeUp):
  refreshRing (host_source.go) sees system.local's ``rpc_address`` differ from the dialled
  address, drops the working pool and dials the advertised one. From then on every query fails
  with ``gocql: no hosts available in the pool`` (session.go ErrNoConnections).

curio has no flag for DisableInitialHostLookup or an AddressTranslator, so the fix is here: per
client connection this relay opens one upstream connection and passes CQL native protocol frames
(v3/v4: 9-byte header version/flags/stream/opcode/length, big-endian) through unchanged, except:

* RESULT Rows answering a SELECT on ``system.local`` (a QUERY, or an EXECUTE of a statement
  PREPAREd from one): every inet address column gocql reads (host_source.go hostInfoFromMap:
  rpc_address, native_address, broadcast_address, listen_address, preferred_ip, peer; its
  connect address comes from rpc_address first, connectAddressLocked) is set to the pinned
  address, so the node is the tunnel both at start and at every refresh;
* RESULT Rows of ``system.peers`` / ``system.peers_v2``: zero rows, same metadata; the tunnel is
  the only host (schema agreement, conn.go awaitSchemaAgreement, then compares local alone);
* EVENT TOPOLOGY_CHANGE and STATUS_CHANGE: dropped (they name advertised addresses and trigger
  the ring refresh above); SCHEMA_CHANGE passes;
* COMPRESSION: removed from SUPPORTED and from STARTUP, so no body is ever compressed and every
  frame above stays readable (lz4/snappy are not in the standard library);
* a request with a protocol version above 4 is answered by the proxy itself, as Cassandra does,
  so the client settles on v4 (the only framing the proxy parses) whatever the upstream supports.

``system.partitions`` (YugabyteDB's tablet map) passes unchanged: gocql's YB fork resolves its
replica addresses only against hosts already found in system.local/system.peers
(refreshPartitionMap.go getClusterPartitionInfo -> host_source.go getHostInfoFromIp over
currYbHosts) and never dials them; unknown addresses are skipped and routing falls back to the
pinned host (policies.go ybPartitionAwareHostPolicy.Pick). Emptying it would cost more: Pick
re-queries system.partitions on every routed query of a table with no partition map.

Frames from upstream are untrusted: lengths over 256 MiB close the connection, everything is
parsed with bounds checks, and a result the proxy cannot parse is relayed unchanged (and
counted), never crashing the proxy. Frames it does not rewrite are streamed, not buffered.

One file: the proxy and the CQL frames it must parse to rewrite addresses are one protocol
boundary, kept apart from the server it fronts (vastsim/ycql.py) on purpose.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import re
import struct
from collections import OrderedDict
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

LOG = logging.getLogger("vastui.ssh.cqlpin")

MAX_FRAME = 256 * 1024 * 1024  # a longer frame closes the connection
PEEK = 64 * 1024  # request bytes read to classify a QUERY/PREPARE/EXECUTE; the rest is streamed
CHUNK = 64 * 1024
MAX_PREPARED = 1024  # statement ids remembered (only those of system.local/peers selects)
UPSTREAM_CONNECT_TIMEOUT = 10.0

_HEADER = struct.Struct(">BBhBi")  # version, flags, stream, opcode, length
_INT = struct.Struct(">i")

# Opcodes (native_protocol_v4.spec section 2.4).
OP_ERROR, OP_STARTUP, OP_OPTIONS, OP_SUPPORTED = 0x00, 0x01, 0x05, 0x06
OP_QUERY, OP_RESULT, OP_PREPARE, OP_EXECUTE, OP_EVENT = 0x07, 0x08, 0x09, 0x0A, 0x0C

FLAG_COMPRESSION, FLAG_TRACING, FLAG_CUSTOM_PAYLOAD, FLAG_WARNING = 0x01, 0x02, 0x04, 0x08
RESULT_ROWS, RESULT_PREPARED = 0x0002, 0x0004
META_GLOBAL, META_MORE_PAGES, META_NO_METADATA = 0x0001, 0x0002, 0x0004
TYPE_INET = 0x0010
ERR_PROTOCOL = 0x000A

# The columns gocql turns into addresses (host_source.go hostInfoFromMap).
ADDRESS_COLUMNS = frozenset(
    {"rpc_address", "native_address", "broadcast_address", "listen_address", "preferred_ip", "peer"}
)
# Only a schema change is free of node addresses; any other event is dropped.
PASSED_EVENTS = frozenset({"SCHEMA_CHANGE"})

# Cassandra's answer to a version it does not speak, on stream 0, in a v4 header: gocql's
# discoverProtocol reads the greatest version from this text (control.go protocolSupportRe) or,
# failing that, from the header of an error on stream <= 0 (conn.go recv -> protocolError,
# control.go parseProtocolFromError); the Python driver downgrades on "unsupported protocol
# version" in the message (cassandra/connection.py process_msg). YB's own text ("... Supported
# versions are between 3 and 4.", cql_message.cc) matches neither gocql pattern.
UNSUPPORTED_VERSION = (
    "Invalid or unsupported protocol version ({}); "
    "the lowest supported version is 3 and the greatest is 4"
)

_SYSTEM_TABLE = re.compile(
    r"\bFROM\s+\"?system\"?\s*\.\s*\"?(local|peers_v2|peers)\"?(?![\w\"])", re.IGNORECASE
)

LOCAL, PEERS = "local", "peers"


class _Malformed(Exception):
    """Bytes from the wire that do not parse; the frame is relayed unchanged."""


@dataclass
class CqlPinStats:
    """Counters for tests and logs."""

    connections: int = 0  # client connections accepted
    active: int = 0  # open now
    upstream_failures: int = 0  # upstream connect failed: the client was closed
    local_rewritten: int = 0  # system.local results whose addresses were pinned
    peers_emptied: int = 0  # system.peers(_v2) results answered with zero rows
    prepared_tracked: int = 0  # PREPAREd system.local/peers selects remembered
    events_dropped: int = 0  # TOPOLOGY_CHANGE / STATUS_CHANGE (or unreadable) events
    events_passed: int = 0  # SCHEMA_CHANGE events
    compression_stripped: int = 0  # SUPPORTED / STARTUP frames that lost COMPRESSION
    versions_refused: int = 0  # requests above v4 answered by the proxy
    malformed: int = 0  # results that should have been rewritten but could not be parsed
    oversized: int = 0  # connections closed for a frame length over MAX_FRAME

    @property
    def rewritten(self) -> int:
        return self.local_rewritten + self.peers_emptied


@dataclass(frozen=True)
class Column:
    name: str
    type_id: int


@dataclass(frozen=True)
class _Prepared:
    kind: str
    columns: tuple[Column, ...] | None  # result metadata, for EXECUTEs that skip it


@dataclass(frozen=True)
class _Expect:
    """What the answer on a stream needs: a rewrite (LOCAL/PEERS) or a statement id to record."""

    kind: str
    prepare: bool = False
    columns: tuple[Column, ...] | None = None


# ---------------------------------------------------------------- bounded parsing


class _Reader:
    """Reads CQL notation (section 3) from ``buf[pos:end]``; any overrun raises _Malformed."""

    __slots__ = ("buf", "end", "pos")

    def __init__(self, buf: bytes, pos: int = 0, end: int | None = None) -> None:
        self.buf = buf
        self.pos = pos
        self.end = len(buf) if end is None else end

    @property
    def remaining(self) -> int:
        return self.end - self.pos

    def take(self, n: int) -> int:
        if n < 0 or n > self.end - self.pos:
            raise _Malformed(f"needs {n} bytes at {self.pos}, {self.end - self.pos} left")
        start = self.pos
        self.pos += n
        return start

    def u16(self) -> int:
        start = self.take(2)
        return int.from_bytes(self.buf[start : start + 2], "big")

    def i32(self) -> int:
        start = self.take(4)
        return int(_INT.unpack_from(self.buf, start)[0])

    def string(self) -> str:
        n = self.u16()
        start = self.take(n)
        return self.buf[start : start + n].decode("utf-8", "replace")

    def skip_string(self) -> None:
        self.take(self.u16())

    def skip_string_list(self) -> None:
        for _ in range(self.u16()):
            self.skip_string()

    def skip_bytes(self) -> None:
        n = self.i32()
        if n >= 0:
            self.take(n)
        elif n < -2:  # -1 null, -2 "not set" (v4)
            raise _Malformed(f"bad [bytes] length {n}")

    def skip_short_bytes(self) -> None:
        self.take(self.u16())

    def skip_bytes_map(self) -> None:
        for _ in range(self.u16()):
            self.skip_string()
            self.skip_bytes()


def _skip_type(r: _Reader, depth: int = 0) -> int:
    """Reads an [option] column type (section 4.2.5.2); returns its id."""
    if depth > 32:
        raise _Malformed("type nesting too deep")
    type_id = r.u16()
    if type_id == 0x0000:  # custom: a Java class name
        r.skip_string()
    elif type_id in (0x0020, 0x0022):  # list, set
        _skip_type(r, depth + 1)
    elif type_id == 0x0021:  # map
        _skip_type(r, depth + 1)
        _skip_type(r, depth + 1)
    elif type_id == 0x0030:  # UDT: keyspace, name, fields
        r.skip_string()
        r.skip_string()
        for _ in range(r.u16()):
            r.skip_string()
            _skip_type(r, depth + 1)
    elif type_id == 0x0031:  # tuple
        for _ in range(r.u16()):
            _skip_type(r, depth + 1)
    elif not 0x0001 <= type_id <= 0x0015:
        raise _Malformed(f"unknown type id {type_id:#06x}")
    return type_id


def _response_start(flags: int, body: bytes) -> int:
    """Where the message proper starts, past a tracing id, warnings and custom payload."""
    r = _Reader(body)
    if flags & FLAG_TRACING:
        r.take(16)
    if flags & FLAG_WARNING:
        r.skip_string_list()
    if flags & FLAG_CUSTOM_PAYLOAD:
        r.skip_bytes_map()
    return r.pos


def _read_metadata(r: _Reader) -> tuple[int, tuple[Column, ...] | None]:
    """Rows metadata (section 4.2.5.2): (column count, columns or None without metadata)."""
    flags = r.i32()
    count = r.i32()
    if count < 0 or count > r.remaining:
        raise _Malformed(f"bad column count {count}")
    if flags & META_MORE_PAGES:
        r.skip_bytes()
    if flags & META_NO_METADATA:
        return count, None
    is_global = bool(flags & META_GLOBAL)
    if is_global:
        r.skip_string()
        r.skip_string()
    columns = []
    for _ in range(count):
        if not is_global:
            r.skip_string()
            r.skip_string()
        name = r.string()
        columns.append(Column(name, _skip_type(r)))
    return count, tuple(columns)


def _rows_section(
    body: bytes, flags: int, known: tuple[Column, ...] | None
) -> tuple[_Reader, int, tuple[Column, ...] | None] | None:
    """For a Rows result: a reader at its row count, the column count and the columns.
    None for any other result kind."""
    r = _Reader(body, _response_start(flags, body))
    if r.i32() != RESULT_ROWS:
        return None
    count, columns = _read_metadata(r)
    if columns is None and known is not None:
        if len(known) != count:
            raise _Malformed(f"{count} columns, the prepared statement had {len(known)}")
        columns = known
    return r, count, columns


def pin_local(
    body: bytes, flags: int, pinned: bytes, known: tuple[Column, ...] | None = None
) -> bytes | None:
    """The Rows body with every address column (inet) set to ``pinned``; None if nothing changed.
    ``known``: the prepared statement's result columns, for rows sent without metadata."""
    section = _rows_section(body, flags, known)
    if section is None:
        return None
    r, count, columns = section
    if columns is None:
        raise _Malformed("rows without metadata from an unknown statement")
    targets = {
        i for i, c in enumerate(columns) if c.name in ADDRESS_COLUMNS and c.type_id == TYPE_INET
    }
    rows_at = r.pos
    n_rows = r.i32()
    if n_rows < 0 or n_rows * count * 4 > r.remaining:
        raise _Malformed(f"bad row count {n_rows}")
    value = _INT.pack(len(pinned)) + pinned
    out = bytearray(body[: rows_at + 4])
    changed = False
    for _ in range(n_rows):
        for i in range(count):
            start = r.pos
            r.skip_bytes()
            if i in targets:
                changed = changed or body[start : r.pos] != value
                out += value
            else:
                out += body[start : r.pos]
    if r.remaining:
        raise _Malformed(f"{r.remaining} bytes after the rows")
    return bytes(out) if changed else None


def empty_rows(body: bytes, flags: int) -> bytes | None:
    """The Rows body with zero rows and the same metadata; None if it had none already."""
    section = _rows_section(body, flags, None)
    if section is None:
        return None
    r, _count, _columns = section
    rows_at = r.pos
    n_rows = r.i32()
    if n_rows < 0:
        raise _Malformed(f"bad row count {n_rows}")
    if n_rows == 0:
        return None
    return body[:rows_at] + _INT.pack(0)


def read_prepared(
    body: bytes, flags: int, version: int
) -> tuple[bytes, tuple[Column, ...] | None] | None:
    """(statement id, result columns) of a Prepared result (section 4.2.5.4); None otherwise."""
    r = _Reader(body, _response_start(flags, body))
    if r.i32() != RESULT_PREPARED:
        return None
    n = r.u16()
    start = r.take(n)
    statement_id = body[start : start + n]
    meta_flags = r.i32()  # bind-variable metadata
    count = r.i32()
    if count < 0 or count > r.remaining:
        raise _Malformed(f"bad bind count {count}")
    if version >= 4:
        pk_count = r.i32()
        if pk_count < 0:
            raise _Malformed(f"bad pk count {pk_count}")
        r.take(2 * pk_count)
    is_global = bool(meta_flags & META_GLOBAL)
    if is_global:
        r.skip_string()
        r.skip_string()
    for _ in range(count):
        if not is_global:
            r.skip_string()
            r.skip_string()
        r.skip_string()
        _skip_type(r)
    _count, columns = _read_metadata(r)
    return statement_id, columns


def _strip_option(body: bytes, multimap: bool) -> bytes | None:
    """STARTUP's [string map] without COMPRESSION, or SUPPORTED's [string multimap] with an empty
    COMPRESSION list; None if there was no compression to remove. SUPPORTED keeps the key: the
    Python driver indexes it unconditionally (connection.py _handle_options_response), and an
    empty list leaves gocql nothing to choose (conn.go startupCoordinator.startup)."""
    r = _Reader(body)
    out: list[bytes] = []
    changed = False
    n = r.u16()
    for _ in range(n):
        start = r.pos
        key = r.string()
        key_end = r.pos
        if multimap:
            values = r.u16()
            for _ in range(values):
                r.skip_string()
        else:
            values = 1
            r.skip_string()
        if key.upper() != "COMPRESSION" or values == 0:
            out.append(body[start : r.pos])
        elif multimap:
            out.append(body[start:key_end] + b"\x00\x00")
            changed = True
        else:
            changed = True
    if r.remaining:
        raise _Malformed("bytes after the option map")
    if not changed:
        return None
    return len(out).to_bytes(2, "big") + b"".join(out)


def classify(query: str) -> str | None:
    """LOCAL or PEERS for a SELECT on system.local / system.peers(_v2), else None."""
    text = query.lstrip()
    if text[:6].upper() != "SELECT":
        return None
    match = _SYSTEM_TABLE.search(text)
    if match is None:
        return None
    return LOCAL if match.group(1).lower() == "local" else PEERS


def _request_start(flags: int, body: bytes) -> int:
    """Where a request's message starts: past a custom payload (a request's only prefix)."""
    r = _Reader(body)
    if flags & FLAG_CUSTOM_PAYLOAD:
        r.skip_bytes_map()
    return r.pos


# ---------------------------------------------------------------- the proxy


class CqlPinProxy:
    """Relays CQL between worker tunnels and the cluster's YCQL, pinning the cluster to the
    tunnel (see the module doc)."""

    def __init__(
        self, upstream_host: str, upstream_port: int, *, pinned_address: str = "127.0.0.1"
    ) -> None:
        self.upstream_host = upstream_host
        self.upstream_port = upstream_port
        self.pinned_address = pinned_address
        self.pinned = ipaddress.ip_address(pinned_address).packed  # inet: 4 (or 16) bytes
        self.stats = CqlPinStats()
        self.port: int | None = None
        # Statement ids are cluster-wide (a client may prepare on one connection and execute
        # on another), so they are remembered per proxy, not per connection.
        self._prepared: OrderedDict[bytes, _Prepared] = OrderedDict()
        self._server: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        self._server = await asyncio.start_server(self._on_client, host, port)
        self.port = int(self._server.sockets[0].getsockname()[1])
        LOG.info(
            "cqlpin: listening on %s:%d for %s:%d, pinned to %s",
            host,
            self.port,
            self.upstream_host,
            self.upstream_port,
            self.pinned_address,
        )
        return self.port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.transport.abort()  # each link then ends on its own
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    def remember(self, statement_id: bytes, prepared: _Prepared) -> None:
        self._prepared[statement_id] = prepared
        self._prepared.move_to_end(statement_id)
        while len(self._prepared) > MAX_PREPARED:
            self._prepared.popitem(last=False)

    def lookup(self, statement_id: bytes) -> _Prepared | None:
        prepared = self._prepared.get(statement_id)
        if prepared is not None:
            self._prepared.move_to_end(statement_id)
        return prepared

    async def _on_client(
        self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        self.stats.connections += 1
        self.stats.active += 1
        peer = cwriter.get_extra_info("peername")
        uwriter: asyncio.StreamWriter | None = None
        self._writers.add(cwriter)
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter]
        try:
            try:
                async with asyncio.timeout(UPSTREAM_CONNECT_TIMEOUT):
                    upstream = await asyncio.open_connection(self.upstream_host, self.upstream_port)
            except (OSError, TimeoutError) as exc:
                self.stats.upstream_failures += 1
                LOG.warning(
                    "cqlpin: upstream %s:%d unreachable for %s: %s",
                    self.upstream_host,
                    self.upstream_port,
                    peer,
                    exc,
                )
                return
            ureader, uwriter = upstream
            self._writers.add(uwriter)
            await _Link(self, creader, cwriter, ureader, uwriter).run()
        except asyncio.CancelledError:
            # stop(): asyncio's own task for the connection; a cancelled one makes its
            # done-callback log an error (asyncio/streams.py, 3.11), so it ends normally.
            return
        finally:
            self.stats.active -= 1
            LOG.debug("cqlpin: %s closed (%s)", peer, self.stats)
            for writer in (cwriter, uwriter):
                if writer is not None:
                    self._writers.discard(writer)
                    writer.close()
                    with contextlib.suppress(Exception):
                        await writer.wait_closed()
            if task is not None:
                self._tasks.discard(task)


class _Link:
    """One client connection and its upstream connection."""

    def __init__(
        self,
        proxy: CqlPinProxy,
        creader: asyncio.StreamReader,
        cwriter: asyncio.StreamWriter,
        ureader: asyncio.StreamReader,
        uwriter: asyncio.StreamWriter,
    ) -> None:
        self.proxy = proxy
        self.stats = proxy.stats
        self.creader, self.cwriter = creader, cwriter
        self.ureader, self.uwriter = ureader, uwriter
        self.pending: dict[int, _Expect] = {}  # stream -> what its answer needs
        # Both directions can write to the client (the proxy answers bad versions itself):
        # one frame at a time.
        self.client_lock = asyncio.Lock()

    async def run(self) -> None:
        pumps = {
            asyncio.create_task(self._guard(self._client_to_upstream(), "client")),
            asyncio.create_task(self._guard(self._upstream_to_client(), "upstream")),
        }
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in pumps:
                task.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)

    async def _guard(self, pump: Coroutine[Any, Any, None], side: str) -> None:
        try:
            await pump
        except (asyncio.IncompleteReadError, OSError):
            return  # a side closed: the link ends
        except asyncio.CancelledError:
            raise
        except Exception:  # one bad connection never takes the proxy down
            LOG.exception("cqlpin: relay from the %s failed; closing the connection", side)

    # -------------------------------------------------------------- client -> upstream

    async def _client_to_upstream(self) -> None:
        while True:
            head = await self.creader.readexactly(_HEADER.size)
            version, flags, stream, opcode, length = _HEADER.unpack(head)
            if not self._length_ok(length, "client"):
                return
            number = version & 0x7F
            if not version & 0x80 and number > 4:
                await self._skip(self.creader, length)
                await self._refuse_version(number)
                continue
            if number < 3:
                # v1/v2 headers are 8 bytes: this framing cannot follow them.
                LOG.warning("cqlpin: client spoke protocol v%d; closing", number)
                return
            if flags & FLAG_COMPRESSION or opcode not in (
                OP_STARTUP,
                OP_QUERY,
                OP_PREPARE,
                OP_EXECUTE,
            ):
                self.pending.pop(stream, None)
                self.uwriter.write(head)
                await self._copy(self.creader, self.uwriter, length)
                continue
            if opcode == OP_STARTUP:
                body = await self.creader.readexactly(length)
                new = self._rewrite_startup(body)
                if new is not None:
                    body = new
                    head = _HEADER.pack(version, flags, stream, opcode, len(body))
                self.uwriter.write(head + body)
                await self.uwriter.drain()
                continue
            peek = await self.creader.readexactly(min(length, PEEK))
            expect = self._expectation(opcode, flags, peek)
            if expect is None:
                self.pending.pop(stream, None)
            else:
                self.pending[stream] = expect
            self.uwriter.write(head + peek)
            await self._copy(self.creader, self.uwriter, length - len(peek))

    def _expectation(self, opcode: int, flags: int, peek: bytes) -> _Expect | None:
        try:
            r = _Reader(peek, _request_start(flags, peek))
            if opcode == OP_EXECUTE:
                n = r.u16()
                start = r.take(n)
                prepared = self.proxy.lookup(peek[start : start + n])
                if prepared is None:
                    return None
                return _Expect(prepared.kind, columns=prepared.columns)
            n = r.i32()
            if n < 0:
                return None
            start = r.pos
            query = peek[start : start + min(n, r.remaining)].decode("utf-8", "replace")
        except _Malformed:
            return None  # the server will answer it; nothing to rewrite
        kind = classify(query)
        if kind is None:
            return None
        return _Expect(kind, prepare=opcode == OP_PREPARE)

    def _rewrite_startup(self, body: bytes) -> bytes | None:
        try:
            new = _strip_option(body, multimap=False)
        except _Malformed:
            return None
        if new is not None:
            self.stats.compression_stripped += 1
            LOG.info("cqlpin: STARTUP asked for compression; removed")
        return new

    async def _refuse_version(self, number: int) -> None:
        self.stats.versions_refused += 1
        message = UNSUPPORTED_VERSION.format(number).encode()
        body = _INT.pack(ERR_PROTOCOL) + len(message).to_bytes(2, "big") + message
        async with self.client_lock:
            self.cwriter.write(_HEADER.pack(0x84, 0, 0, OP_ERROR, len(body)) + body)
            await self.cwriter.drain()

    # -------------------------------------------------------------- upstream -> client

    async def _upstream_to_client(self) -> None:
        while True:
            head = await self.ureader.readexactly(_HEADER.size)
            version, flags, stream, opcode, length = _HEADER.unpack(head)
            if not self._length_ok(length, "upstream"):
                return
            if version & 0x7F not in (3, 4):
                LOG.warning("cqlpin: upstream answered protocol v%d; closing", version & 0x7F)
                return
            if opcode == OP_EVENT and stream == -1:
                body = await self.ureader.readexactly(length)
                if self._pass_event(flags, body):
                    await self._send_client(head + body)
                continue
            expect = self.pending.pop(stream, None) if stream >= 0 else None
            if opcode == OP_SUPPORTED or (expect is not None and opcode == OP_RESULT):
                body = await self.ureader.readexactly(length)
                new = self._rewrite_response(version & 0x7F, flags, opcode, body, expect)
                if new is not None:
                    body = new
                    head = _HEADER.pack(version, flags, stream, opcode, len(body))
                await self._send_client(head + body)
                continue
            async with self.client_lock:
                self.cwriter.write(head)
                await self._copy(self.ureader, self.cwriter, length)

    def _pass_event(self, flags: int, body: bytes) -> bool:
        event_type: str | None = None
        if not flags & FLAG_COMPRESSION:
            try:
                event_type = _Reader(body, _response_start(flags, body)).string()
            except _Malformed:
                event_type = None
        if event_type in PASSED_EVENTS:
            self.stats.events_passed += 1
            return True
        self.stats.events_dropped += 1
        LOG.debug("cqlpin: dropped a %s event", event_type or "unreadable")
        return False

    def _rewrite_response(
        self, version: int, flags: int, opcode: int, body: bytes, expect: _Expect | None
    ) -> bytes | None:
        if flags & FLAG_COMPRESSION:
            if expect is not None:
                self.stats.malformed += 1
                LOG.warning("cqlpin: a compressed result cannot be rewritten; relayed unchanged")
            return None
        try:
            if opcode == OP_SUPPORTED:
                start = _response_start(flags, body)
                new = _strip_option(body[start:], multimap=True)
                if new is None:
                    return None
                self.stats.compression_stripped += 1
                return body[:start] + new
            if expect is None:
                return None
            if expect.prepare:
                prepared = read_prepared(body, flags, version)
                if prepared is not None:
                    statement_id, columns = prepared
                    self.proxy.remember(statement_id, _Prepared(expect.kind, columns))
                    self.stats.prepared_tracked += 1
                return None
            if expect.kind == LOCAL:
                new = pin_local(body, flags, self.proxy.pinned, expect.columns)
                if new is not None:
                    self.stats.local_rewritten += 1
                return new
            new = empty_rows(body, flags)
            if new is not None:
                self.stats.peers_emptied += 1
            return new
        except _Malformed as exc:
            self.stats.malformed += 1
            what = expect.kind if expect is not None else "SUPPORTED"
            LOG.warning("cqlpin: unreadable %s answer relayed unchanged: %s", what, exc)
            return None

    # -------------------------------------------------------------- plumbing

    def _length_ok(self, length: int, side: str) -> bool:
        if 0 <= length <= MAX_FRAME:
            return True
        self.stats.oversized += 1
        LOG.warning(
            "cqlpin: %s frame length %d out of bounds; closing the connection", side, length
        )
        return False

    async def _send_client(self, frame: bytes) -> None:
        async with self.client_lock:
            self.cwriter.write(frame)
            await self.cwriter.drain()

    @staticmethod
    async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        """Streams ``n`` bytes: a frame that is not rewritten is never held whole."""
        while n > 0:
            chunk = await reader.readexactly(min(n, CHUNK))
            writer.write(chunk)
            await writer.drain()
            n -= len(chunk)
        await writer.drain()

    @staticmethod
    async def _skip(reader: asyncio.StreamReader, n: int) -> None:
        while n > 0:
            n -= len(await reader.readexactly(min(n, CHUNK)))
