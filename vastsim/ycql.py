"""The simulated cluster's YCQL: real CQL native protocol v3/v4 frames, for the subset that
gocql (yugabyte/gocql v1.6.0-yb-1) uses to create a session and curio's index store uses at start.

What a YugabyteDB tserver answers, after its source (yugabyte/yugabyte-db):

* OPTIONS -> SUPPORTED (CQL_VERSION, COMPRESSION); STARTUP -> READY; REGISTER -> READY.
* ``system.local`` (src/yb/master/yql_local_vtable.cc): one row, the node the client is connected
  to; ``rpc_address`` and ``broadcast_address`` are its advertised (public) address.
* ``system.peers`` (yql_peers_vtable.cc): every other live node, ``peer``/``rpc_address`` its
  advertised address, ``preferred_ip`` its private one; release_version ``3.9-SNAPSHOT``, so gocql
  never asks for ``system.peers_v2`` (conn.go querySystemPeers), which YCQL does not have.
* ``system.partitions`` (yql_partitions_vtable.cc): one row per tablet, ``replica_addresses``
  map<inet, text> of advertised address -> raft role.
* ``system_schema.*`` and any other SELECT: no rows. ``CREATE``/``ALTER``/``DROP`` ->
  Schema_change (and a SCHEMA_CHANGE event to registered connections), ``USE`` -> Set_keyspace,
  anything else -> Void.
* A request whose protocol version is not 3 or 4: the protocol error YB sends
  (src/yb/yql/cql/cqlserver/cql_message.cc CQLRequest::ParseRequest), on the request's stream.

A single-node cluster as curio's docs set one up (``yugabyted start --advertise_address
127.0.0.1``, documentation/en/experimental-features/Enable-PDP.md:307 in curio) is
``FakeYcql(rpc_address="127.0.0.1")``; a production multi-node cluster advertises its private
addresses: ``FakeYcql(rpc_address="10.0.0.5", peers=("10.0.0.6", "10.0.0.7"))``.

This module writes its own frames and does not share code with the proxy in front of it
(vastui/ssh/cqlpin.py): each is checked against the other and against an independent driver.

One file: the protocol subset one server answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import ipaddress
import logging
import re
import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

LOG = logging.getLogger("vastsim.ycql")

MAX_FRAME = 256 * 1024 * 1024  # YB's default max message size is far below this
HEADER = struct.Struct(">BBhBi")  # version, flags, stream, opcode, length (v3/v4)

# Opcodes (native_protocol_v4.spec section 2.4)
ERROR, STARTUP, READY, AUTHENTICATE = 0x00, 0x01, 0x02, 0x03
OPTIONS, SUPPORTED, QUERY, RESULT = 0x05, 0x06, 0x07, 0x08
PREPARE, EXECUTE, REGISTER, EVENT, BATCH = 0x09, 0x0A, 0x0B, 0x0C, 0x0D

# Error codes and RESULT kinds (sections 9 and 4.2.5)
ERR_PROTOCOL, ERR_INVALID, ERR_UNPREPARED = 0x000A, 0x2200, 0x2500
VOID, ROWS, SET_KEYSPACE, PREPARED, SCHEMA_CHANGE = 0x0001, 0x0002, 0x0003, 0x0004, 0x0005

RELEASE_VERSION = "3.9-SNAPSHOT"  # yb::master::kSystemTablesReleaseVersion
PARTITIONER = "org.apache.cassandra.dht.Murmur3Partitioner"
SCHEMA_VERSION = uuid.UUID("00000000-0000-0000-0000-000000000000")  # fixed, as one YB master
SUPPORTED_OPTIONS = {"CQL_VERSION": ["3.0.0", "3.4.2"], "COMPRESSION": ["lz4", "snappy"]}

# Column types as CQL option ids (section 4.2.5.2).
_TYPE_IDS = {
    "blob": 0x0003,
    "bigint": 0x0002,
    "int": 0x0009,
    "uuid": 0x000C,
    "varchar": 0x000D,
    "inet": 0x0010,
}

LOCAL_COLUMNS: tuple[tuple[str, str], ...] = (  # yql_local_vtable.cc CreateSchema
    ("key", "varchar"),
    ("bootstrapped", "varchar"),
    ("broadcast_address", "inet"),
    ("cluster_name", "varchar"),
    ("cql_version", "varchar"),
    ("data_center", "varchar"),
    ("gossip_generation", "int"),
    ("host_id", "uuid"),
    ("listen_address", "inet"),
    ("native_protocol_version", "varchar"),
    ("partitioner", "varchar"),
    ("rack", "varchar"),
    ("release_version", "varchar"),
    ("rpc_address", "inet"),
    ("schema_version", "uuid"),
    ("thrift_version", "varchar"),
    ("tokens", "set<varchar>"),
    ("truncated_at", "map<uuid,blob>"),
)
PEERS_COLUMNS: tuple[tuple[str, str], ...] = (  # yql_peers_vtable.cc CreateSchema
    ("peer", "inet"),
    ("data_center", "varchar"),
    ("host_id", "uuid"),
    ("preferred_ip", "inet"),
    ("rack", "varchar"),
    ("release_version", "varchar"),
    ("rpc_address", "inet"),
    ("schema_version", "uuid"),
    ("tokens", "set<varchar>"),
)
PARTITIONS_COLUMNS: tuple[tuple[str, str], ...] = (  # yql_partitions_vtable.cc CreateSchema
    ("keyspace_name", "varchar"),
    ("table_name", "varchar"),
    ("start_key", "blob"),
    ("end_key", "blob"),
    ("id", "uuid"),
    ("replica_addresses", "map<inet,varchar>"),
)


class _Malformed(Exception):
    """A request the fake cannot read: answered with a protocol error."""


# ---------------------------------------------------------------- encoding


def _short(n: int) -> bytes:
    return struct.pack(">H", n)


def _int(n: int) -> bytes:
    return struct.pack(">i", n)


def _string(s: str) -> bytes:
    raw = s.encode()
    return _short(len(raw)) + raw


def _bytes(raw: bytes | None) -> bytes:
    return _int(-1) if raw is None else _int(len(raw)) + raw


def _type_option(type_name: str) -> bytes:
    if type_name.startswith("set<"):
        return _short(0x0022) + _type_option(type_name[4:-1])
    if type_name.startswith("map<"):
        key, value = type_name[4:-1].split(",")
        return _short(0x0021) + _type_option(key) + _type_option(value)
    return _short(_TYPE_IDS[type_name])


def _value(type_name: str, value: Any) -> bytes | None:
    if value is None:
        return None
    if type_name == "varchar":
        return str(value).encode()
    if type_name == "inet":
        return ipaddress.ip_address(value).packed
    if type_name == "uuid":
        return bytes(value.bytes)
    if type_name == "int":
        return struct.pack(">i", value)
    if type_name == "bigint":
        return struct.pack(">q", value)
    if type_name == "blob":
        return bytes(value)
    if type_name.startswith("set<"):
        inner = type_name[4:-1]
        return _int(len(value)) + b"".join(_bytes(_value(inner, v)) for v in value)
    if type_name.startswith("map<"):
        key_type, value_type = type_name[4:-1].split(",")
        items = list(value.items())
        return _int(len(items)) + b"".join(
            _bytes(_value(key_type, k)) + _bytes(_value(value_type, v)) for k, v in items
        )
    raise ValueError(f"no encoder for {type_name}")


def _metadata(
    keyspace: str, table: str, columns: Sequence[tuple[str, str]], *, no_metadata: bool = False
) -> bytes:
    """Rows metadata (section 4.2.5.2) with a global table spec, or only the column count."""
    if no_metadata:
        return _int(0x0004) + _int(len(columns))
    body = _int(0x0001) + _int(len(columns)) + _string(keyspace) + _string(table)
    for name, type_name in columns:
        body += _string(name) + _type_option(type_name)
    return body


def _rows(
    keyspace: str,
    table: str,
    columns: Sequence[tuple[str, str]],
    rows: Sequence[dict[str, Any]],
    *,
    no_metadata: bool = False,
) -> bytes:
    body = _int(ROWS) + _metadata(keyspace, table, columns, no_metadata=no_metadata)
    body += _int(len(rows))
    for row in rows:
        for name, type_name in columns:
            body += _bytes(_value(type_name, row.get(name)))
    return body


def _error(code: int, message: str) -> bytes:
    return _int(code) + _string(message)


def tokens_for(index: int, count: int) -> set[str]:
    """One Murmur3 token per node, spread evenly over the ring (as YB's GetTokensValue)."""
    return {str(-(2**63) + index * ((2**64) // max(count, 1)))}


def host_id_for(address: str) -> uuid.UUID:
    return uuid.uuid5(uuid.NAMESPACE_URL, f"yb-tserver://{address}")


# ---------------------------------------------------------------- request parsing


class _Body:
    """Bounds-checked reads over a request body."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise _Malformed("Truncated CQL message")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def short(self) -> int:
        return int(struct.unpack(">H", self.take(2))[0])

    def int32(self) -> int:
        return int(struct.unpack(">i", self.take(4))[0])

    def byte(self) -> int:
        return self.take(1)[0]

    def string(self) -> str:
        return self.take(self.short()).decode("utf-8", "replace")

    def long_string(self) -> str:
        return self.take(self.int32()).decode("utf-8", "replace")

    def short_bytes(self) -> bytes:
        return self.take(self.short())

    def string_map(self) -> dict[str, str]:
        return {self.string(): self.string() for _ in range(self.short())}

    def string_list(self) -> list[str]:
        return [self.string() for _ in range(self.short())]


_SELECT = re.compile(
    r"^SELECT\s+(?:JSON\s+)?(?P<cols>.+?)\s+FROM\s+(?P<ks>\"?\w+\"?)\s*\.\s*(?P<tbl>\"?\w+\"?)"
    r"(?:\s+WHERE\b.*)?$",
    re.IGNORECASE | re.DOTALL,
)
_SELECT_UNQUALIFIED = re.compile(
    r"^SELECT\s+(?P<cols>.+?)\s+FROM\s+(?P<tbl>\"?\w+\"?)", re.I | re.S
)
_DDL = re.compile(
    r"^(?P<verb>CREATE|ALTER|DROP)\s+(?P<what>KEYSPACE|SCHEMA|TABLE|COLUMNFAMILY|INDEX|TYPE)\s+"
    r"(?:IF\s+(?:NOT\s+)?EXISTS\s+)?(?P<name>[\"\w.]+)",
    re.IGNORECASE,
)
_CREATE_INDEX_ON = re.compile(r"\bON\s+(?P<name>[\"\w.]+)", re.IGNORECASE)
_USE = re.compile(r"^USE\s+(?P<ks>\"?\w+\"?)\s*$", re.IGNORECASE)


def _ident(name: str) -> str:
    return name[1:-1] if name.startswith('"') and name.endswith('"') else name.lower()


def _normalise(query: str) -> str:
    return query.strip().rstrip(";").strip()


@dataclass(eq=False)  # hashed by identity: kept in a set
class _Conn:
    writer: asyncio.StreamWriter
    version: int = 4
    keyspace: str = ""
    events: set[str] = field(default_factory=set)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class FakeYcql:
    """A YCQL endpoint of a simulated YugabyteDB cluster (see the module doc)."""

    def __init__(
        self,
        *,
        rpc_address: str,
        peers: Sequence[str] = (),
        data_center: str = "datacenter1",
        rack: str = "rack1",
    ) -> None:
        self.rpc_address = str(ipaddress.ip_address(rpc_address))
        self.peers = tuple(str(ipaddress.ip_address(p)) for p in peers)
        self.data_center = data_center
        self.rack = rack
        self.keyspaces: set[str] = {"system", "system_schema", "system_auth"}
        # YB lists every YCQL table's tablets, its own system_auth tables included.
        self.tables: list[tuple[str, str]] = [("system_auth", "roles")]
        self.queries: list[str] = []  # every QUERY/PREPARE text, for tests
        self.connections = 0
        self._prepared: dict[bytes, str] = {}
        self._conns: set[_Conn] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.base_events.Server | None = None

    # -------------------------------------------------------------- lifecycle

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        self._server = await asyncio.start_server(self._serve, host, port)
        return int(self._server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        self.drop_connections()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    def drop_connections(self) -> int:
        """Resets every client connection (a tserver restart, a tunnel blip); returns how many."""
        conns = list(self._conns)
        for conn in conns:
            conn.writer.transport.abort()
        return len(conns)

    # -------------------------------------------------------------- the tables

    @property
    def nodes(self) -> tuple[str, ...]:
        return (self.rpc_address, *self.peers)

    def local_row(self) -> dict[str, Any]:
        return {
            "key": "local",
            "bootstrapped": "COMPLETED",
            "broadcast_address": self.rpc_address,
            "cluster_name": "local cluster",
            "cql_version": "3.4.2",
            "data_center": self.data_center,
            "gossip_generation": 0,
            "host_id": host_id_for(self.rpc_address),
            "listen_address": self.rpc_address,
            "native_protocol_version": "4",
            "partitioner": PARTITIONER,
            "rack": self.rack,
            "release_version": RELEASE_VERSION,
            "rpc_address": self.rpc_address,
            "schema_version": SCHEMA_VERSION,
            "thrift_version": "20.1.0",
            "tokens": tokens_for(0, len(self.nodes)),
            "truncated_at": None,
        }

    def peer_rows(self) -> list[dict[str, Any]]:
        return [
            {
                "peer": peer,
                "data_center": self.data_center,
                "host_id": host_id_for(peer),
                "preferred_ip": peer,
                "rack": self.rack,
                "release_version": RELEASE_VERSION,
                "rpc_address": peer,
                "schema_version": SCHEMA_VERSION,
                "tokens": tokens_for(i + 1, len(self.nodes)),
            }
            for i, peer in enumerate(self.peers)
        ]

    def partition_rows(self) -> list[dict[str, Any]]:
        replicas = {self.rpc_address: "LEADER", **dict.fromkeys(self.peers, "FOLLOWER")}
        return [
            {
                "keyspace_name": ks,
                "table_name": table,
                "start_key": b"",
                "end_key": b"",
                "id": uuid.uuid5(uuid.NAMESPACE_URL, f"yb-tablet://{ks}.{table}"),
                "replica_addresses": replicas,
            }
            for ks, table in self.tables
        ]

    # -------------------------------------------------------------- events

    async def push_event(self, event_type: str, payload: bytes) -> int:
        """An EVENT frame (stream -1) to every connection registered for ``event_type``."""
        body = _string(event_type) + payload
        sent = 0
        for conn in list(self._conns):
            if event_type in conn.events:
                await self._send(conn, -1, EVENT, body)
                sent += 1
        return sent

    async def push_topology_change(self, change: str, address: str, port: int = 9042) -> int:
        return await self.push_event("TOPOLOGY_CHANGE", _string(change) + _inet(address, port))

    async def push_status_change(self, change: str, address: str, port: int = 9042) -> int:
        return await self.push_event("STATUS_CHANGE", _string(change) + _inet(address, port))

    async def push_schema_change(self, change: str, target: str, keyspace: str, name: str) -> int:
        return await self.push_event(
            "SCHEMA_CHANGE", _schema_change(change, target, keyspace, name)
        )

    # -------------------------------------------------------------- serving

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        conn = _Conn(writer)
        self._conns.add(conn)
        self.connections += 1
        try:
            while True:
                try:
                    head = await reader.readexactly(HEADER.size)
                except asyncio.IncompleteReadError:
                    return
                version, _flags, stream, opcode, length = HEADER.unpack(head)
                if length < 0 or length > MAX_FRAME:
                    LOG.warning("ycql: frame length %d out of bounds; closing", length)
                    return
                body = await reader.readexactly(length)
                await self._handle(conn, version, stream, opcode, body)
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        except asyncio.CancelledError:
            # stop(): this is asyncio's own task for the connection; a cancelled one makes its
            # done-callback log an error (asyncio/streams.py, 3.11), so it ends normally.
            return
        finally:
            self._conns.discard(conn)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            if task is not None:
                self._tasks.discard(task)

    async def _send(self, conn: _Conn, stream: int, opcode: int, body: bytes) -> None:
        # YB answers in the request's version with the response bit (CQLResponse(request, ...)).
        head = HEADER.pack(0x80 | conn.version, 0, stream, opcode, len(body))
        async with conn.lock:
            conn.writer.write(head + body)
            await conn.writer.drain()

    async def _handle(
        self, conn: _Conn, version: int, stream: int, opcode: int, body: bytes
    ) -> None:
        if version & 0x80:
            await self._send(conn, stream, ERROR, _error(ERR_PROTOCOL, "Not a request"))
            return
        if version < 3 or version > 4:
            # cql_message.cc CQLRequest::ParseRequest; the response header carries
            # kCurrentVersion | kResponseVersion (CQLResponse(stream_id, opcode)).
            message = (
                f"Invalid or unsupported protocol version {version}. "
                "Supported versions are between 3 and 4."
            )
            payload = _error(ERR_PROTOCOL, message)
            async with conn.lock:
                conn.writer.write(HEADER.pack(0x84, 0, stream, ERROR, len(payload)) + payload)
                await conn.writer.drain()
            return
        conn.version = version
        try:
            answer = self._answer(conn, opcode, _Body(body))
        except _Malformed as exc:
            answer = (ERROR, _error(ERR_PROTOCOL, str(exc)))
        if answer is None:
            return
        reply_opcode, reply = answer
        await self._send(conn, stream, reply_opcode, reply)
        if reply_opcode == RESULT and reply[:4] == _int(SCHEMA_CHANGE):
            # Registered connections hear of every schema change, the requester's included.
            await self.push_event("SCHEMA_CHANGE", reply[4:])

    def _answer(self, conn: _Conn, opcode: int, body: _Body) -> tuple[int, bytes] | None:
        if opcode == OPTIONS:
            multimap = _short(len(SUPPORTED_OPTIONS)) + b"".join(
                _string(k) + _short(len(v)) + b"".join(_string(x) for x in v)
                for k, v in SUPPORTED_OPTIONS.items()
            )
            return SUPPORTED, multimap
        if opcode == STARTUP:
            options = body.string_map()
            compression = options.get("COMPRESSION", "")
            if compression:
                # The simulator has no lz4/snappy; a real YB would compress from here on.
                return ERROR, _error(ERR_PROTOCOL, f"Unsupported compression: {compression}")
            return READY, b""
        if opcode == REGISTER:
            conn.events.update(body.string_list())
            return READY, b""
        if opcode == QUERY:
            query = body.long_string()
            self.queries.append(query)
            return self._run(conn, query, no_metadata=False)
        if opcode == PREPARE:
            query = body.long_string()
            self.queries.append(query)
            return self._prepare(conn, query)
        if opcode == EXECUTE:
            statement_id = body.short_bytes()
            body.short()  # consistency
            flags = body.byte()
            prepared = self._prepared.get(statement_id)
            if prepared is None:
                return ERROR, _error(ERR_UNPREPARED, "Unprepared query") + _short(
                    len(statement_id)
                ) + statement_id
            return self._run(conn, prepared, no_metadata=bool(flags & 0x02))
        if opcode == BATCH:
            return RESULT, _int(VOID)
        return ERROR, _error(ERR_PROTOCOL, "Unknown opcode")

    # -------------------------------------------------------------- statements

    def _select_target(
        self, conn: _Conn, query: str
    ) -> tuple[str, str, list[tuple[str, str]], list[dict[str, Any]]] | bytes | None:
        """(keyspace, table, columns, rows) for a SELECT, an error body, or None if not one."""
        text = _normalise(query)
        match = _SELECT.match(text)
        if match:
            keyspace, table = _ident(match["ks"]), _ident(match["tbl"])
        else:
            match = _SELECT_UNQUALIFIED.match(text)
            if not match:
                return None
            keyspace, table = conn.keyspace, _ident(match["tbl"])
        schema: Sequence[tuple[str, str]]
        rows: list[dict[str, Any]]
        if (keyspace, table) == ("system", "local"):
            schema, rows = LOCAL_COLUMNS, [self.local_row()]
        elif (keyspace, table) == ("system", "peers"):
            schema, rows = PEERS_COLUMNS, self.peer_rows()
        elif (keyspace, table) == ("system", "partitions"):
            schema, rows = PARTITIONS_COLUMNS, self.partition_rows()
        elif keyspace == "system":
            # YCQL has no system.peers_v2 (nor most of Cassandra's system tables).
            return _error(ERR_INVALID, f"Object Not Found: {keyspace}.{table}")
        else:
            cols = match["cols"].strip()
            names = [] if cols == "*" else [c.strip() for c in cols.split(",")]
            return keyspace, table, [(n, "varchar") for n in names], []
        cols = match["cols"].strip()
        if cols == "*":
            return keyspace, table, list(schema), rows
        known = dict(schema)
        wanted: list[tuple[str, str]] = []
        for raw in cols.split(","):
            name = _ident(raw.strip())
            if name not in known:
                return _error(ERR_INVALID, f"Undefined Column. Column doesn't exist: {name}")
            wanted.append((name, known[name]))
        return keyspace, table, wanted, rows

    def _run(self, conn: _Conn, query: str, *, no_metadata: bool) -> tuple[int, bytes]:
        selected = self._select_target(conn, query)
        if isinstance(selected, bytes):
            return ERROR, selected
        if selected is not None:
            keyspace, table, columns, rows = selected
            return RESULT, _rows(keyspace, table, columns, rows, no_metadata=no_metadata)
        text = _normalise(query)
        use = _USE.match(text)
        if use:
            conn.keyspace = _ident(use["ks"])
            return RESULT, _int(SET_KEYSPACE) + _string(conn.keyspace)
        ddl = _DDL.match(text)
        if ddl:
            return RESULT, self._ddl(conn, ddl, text)
        return RESULT, _int(VOID)

    def _ddl(self, conn: _Conn, ddl: re.Match[str], text: str) -> bytes:
        verb, what = ddl["verb"].upper(), ddl["what"].upper()
        change = {"CREATE": "CREATED", "ALTER": "UPDATED", "DROP": "DROPPED"}[verb]
        if what in ("KEYSPACE", "SCHEMA"):
            keyspace = _ident(ddl["name"])
            if verb == "CREATE":
                self.keyspaces.add(keyspace)
            elif verb == "DROP":
                self.keyspaces.discard(keyspace)
            return _int(SCHEMA_CHANGE) + _schema_change(change, "KEYSPACE", keyspace, "")
        name = ddl["name"]
        if what == "INDEX":  # an index changes its table
            on = _CREATE_INDEX_ON.search(text)
            name, change = (on["name"] if on else name), "UPDATED"
        keyspace, _, table = name.rpartition(".")
        keyspace, table = (_ident(keyspace) if keyspace else conn.keyspace), _ident(table)
        target = "TYPE" if what == "TYPE" else "TABLE"
        created = target == "TABLE" and verb == "CREATE" and what != "INDEX"
        if created and (keyspace, table) not in self.tables:
            self.tables.append((keyspace, table))
        return _int(SCHEMA_CHANGE) + _schema_change(change, target, keyspace, table)

    def _prepare(self, conn: _Conn, query: str) -> tuple[int, bytes]:
        selected = self._select_target(conn, query)
        if isinstance(selected, bytes):
            return ERROR, selected
        statement_id = hashlib.md5(query.encode(), usedforsecurity=False).digest()
        self._prepared[statement_id] = query
        # Bind markers, typed blob: gocql marshals []byte and string into a blob alike.
        markers = _count_markers(query)
        bind = _int(0x0001) + _int(markers) + _int(0) + _string(conn.keyspace) + _string("")
        bind += b"".join(_string(f"arg{i}") + _type_option("blob") for i in range(markers))
        if selected is not None:
            keyspace, table, columns, _rows_unused = selected
            result = _metadata(keyspace, table, columns)
        else:
            result = _int(0x0004) + _int(0)  # no result metadata: not a SELECT
        return RESULT, _int(PREPARED) + _short(len(statement_id)) + statement_id + bind + result


def _count_markers(query: str) -> int:
    count, quoted = 0, False
    for ch in query:
        if ch == "'":
            quoted = not quoted
        elif ch == "?" and not quoted:
            count += 1
    return count


def _inet(address: str, port: int) -> bytes:
    """[inet]: one byte of address length, the address, an int port (section 3)."""
    raw = ipaddress.ip_address(address).packed
    return bytes([len(raw)]) + raw + _int(port)


def _schema_change(change: str, target: str, keyspace: str, name: str) -> bytes:
    body = _string(change) + _string(target) + _string(keyspace)
    if target != "KEYSPACE":
        body += _string(name)
    return body
