"""A minimal CQL v4 client that models how gocql creates curio's index store session.

curio opens YCQL with ``gocql.NewCluster(hosts...)`` and default settings (curio
market/indexstore/indexstore.go:57) against the fork it pins, yugabyte/gocql v1.6.0-yb-1. What
``CreateSession`` does there, and what this module does in the same order:

1. ``addrsToHosts`` (session.go): the contact points, port from ``--db-cassandra-port``.
2. ``discoverProtocol`` (control.go): dial each contact (gocql shuffles them; here they are
   tried in the order given) and start a v4 connection (OPTIONS -> SUPPORTED, STARTUP -> READY).
3. ``controlConn.connect`` / ``setupConn`` (control.go): the control connection; its host is read
   from ``system.local`` but keeps the address gocql dialled (host_source.go hostInfoFromIter
   with ``conn.host.connectAddress``) and goes into the ring (ring.go addOrUpdate); REGISTER.
4. ``ringDescriber.GetHosts`` (host_source.go): ``system.local`` again, this time without a
   dialled address (getLocalHostInfo passes nil), so its connect address is ``rpc_address``;
   ``system.peers``, each row filtered by ``isValidPeer``; ``system.partitions`` (the YB fork's
   getClusterPartitionInfo, refreshPartitionMap.go; errors ignored).
5. ``session.init`` (session.go): every host through ``ring.addOrUpdate``. The ring already holds
   the control host under the same host_id and ``HostInfo.update`` only fills fields that are
   unset, so the node behind the contact point keeps the dialled address. Then one pool
   connection per host at its connect address (gocql opens NumConns; the first one decides,
   connectionpool.go fill); a host whose dial fails is marked down. No pool connection at all:
   ``no connections were made when creating the session`` (cluster.go ErrNoConnectionsStarted,
   returned unwrapped by NewSession).

So through a tunnel to one node of a cluster that advertises private addresses, the session is
created (the tunnelled node works, its peers are down) and breaks at the first ring refresh
(:meth:`Session.refresh_ring`, host_source.go refreshRing: what a control-connection reconnect
or a topology/status event triggers): system.local's ``rpc_address`` differs from the dialled
address, so the working pool is dropped and the advertised address dialled; every query then
fails with ``gocql: no hosts available in the pool`` (session.go ErrNoConnections).

Error texts are gocql's; ``NewSession`` wraps all but ErrNoConnectionsStarted in
``gocql: unable to create session: %v`` (session.go). Standard library only: the stand-in
``curio`` script imports this with its own directory on sys.path.

One file: one client's session set-up, in gocql's order.
"""

from __future__ import annotations

import contextlib
import ipaddress
import re
import socket
import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Dial = Callable[[str, int, float], socket.socket]

PROTO_VERSION = 4  # discoverProtocol starts at 4 (control.go)
MAX_FRAME = 256 * 1024 * 1024
_HEADER = struct.Struct(">BBhBi")
OPTIONS, STARTUP, READY, SUPPORTED, QUERY, RESULT, REGISTER, EVENT, ERROR = (
    0x05,
    0x01,
    0x02,
    0x06,
    0x07,
    0x08,
    0x0B,
    0x0C,
    0x00,
)
ROWS, PREPARED_KIND = 0x0002, 0x0004
ERR_INVALID = 0x2200
CQL_VERSION = "3.0.0"  # NewCluster's CQLVersion (cluster.go)
DRIVER_NAME, DRIVER_VERSION = "github.com/yugabyte/gocql", "v1.6.0-yb-1"

ERR_NO_HOSTS = "no hosts provided"  # cluster.go ErrNoHosts
ERR_NO_CONNECTIONS_STARTED = "no connections were made when creating the session"  # cluster.go
ERR_NO_CONNECTIONS = "gocql: no hosts available in the pool"  # session.go ErrNoConnections
WRAP = "gocql: unable to create session: {}"  # session.go NewSession
# control.go protocolSupportRe: how gocql reads the greatest version out of a protocol error.
_PROTOCOL_SUPPORT = re.compile(r"the lowest supported version is \d+ and the greatest is (\d+)$")


class CqlError(Exception):
    """An error with gocql's text."""


class CqlServerError(CqlError):
    """An ERROR frame; str() is the server's message, as gocql's errorFrame.Error()."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class _ProtocolError(CqlError):
    """An error on stream <= 0 (conn.go recv -> protocolError)."""

    def __init__(self, message: str, version: int) -> None:
        super().__init__(message)
        self.version = version


# ---------------------------------------------------------------- wire format


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise CqlError("gocql: malformed frame from the server")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def short(self) -> int:
        return int.from_bytes(self.take(2), "big")

    def int(self) -> int:
        return int(struct.unpack(">i", self.take(4))[0])

    def string(self) -> str:
        return self.take(self.short()).decode("utf-8", "replace")

    def bytes(self) -> bytes | None:
        n = self.int()
        return None if n < 0 else self.take(n)


def _string(s: str) -> bytes:
    raw = s.encode()
    return len(raw).to_bytes(2, "big") + raw


def _string_map(m: dict[str, str]) -> bytes:
    return len(m).to_bytes(2, "big") + b"".join(_string(k) + _string(v) for k, v in m.items())


def _query_body(statement: str) -> bytes:
    raw = statement.encode()
    # consistency ONE (control.go query), flags: page size 5000 (NewCluster's PageSize)
    return struct.pack(">i", len(raw)) + raw + struct.pack(">HBi", 0x0001, 0x04, 5000)


def _read_type(r: _Reader, depth: int = 0) -> tuple[Any, ...]:
    if depth > 16:
        raise CqlError("gocql: type nesting too deep")
    type_id = r.short()
    if type_id == 0x0000:
        return (type_id, r.string())
    if type_id in (0x0020, 0x0022):
        return (type_id, _read_type(r, depth + 1))
    if type_id == 0x0021:
        return (type_id, _read_type(r, depth + 1), _read_type(r, depth + 1))
    if type_id == 0x0030:
        r.string(), r.string()
        return (type_id, *[(r.string(), _read_type(r, depth + 1)) for _ in range(r.short())])
    if type_id == 0x0031:
        return (type_id, *[_read_type(r, depth + 1) for _ in range(r.short())])
    return (type_id,)


def _decode(cql_type: tuple[Any, ...], raw: bytes | None) -> Any:
    """Values as gocql's goType gives them (helpers.go): inet and text as strings, uuid as its
    string, sets and lists as lists, maps as dicts."""
    if raw is None:
        return None
    type_id = cql_type[0]
    if type_id in (0x0001, 0x000D):  # ascii, varchar
        return raw.decode("utf-8", "replace")
    if type_id == 0x0010:  # inet
        return str(ipaddress.ip_address(raw)) if len(raw) in (4, 16) else None
    if type_id in (0x000C, 0x000F):  # uuid, timeuuid
        return str(uuid.UUID(bytes=raw)) if len(raw) == 16 else None
    if type_id in (0x0002, 0x0009, 0x0013, 0x0014):  # bigint, int, smallint, tinyint
        return int.from_bytes(raw, "big", signed=True)
    if type_id == 0x0004:
        return raw != b"\x00"
    if type_id in (0x0020, 0x0022, 0x0021):
        r = _Reader(raw)
        n = r.int()
        if type_id == 0x0021:
            return {
                _decode(cql_type[1], r.bytes()): _decode(cql_type[2], r.bytes()) for _ in range(n)
            }
        return [_decode(cql_type[1], r.bytes()) for _ in range(n)]
    return raw


def _rows(body: bytes) -> list[dict[str, Any]] | None:
    """The rows of a RESULT body, None if it is not a Rows result."""
    r = _Reader(body)
    if r.int() != ROWS:
        return None
    flags, count = r.int(), r.int()
    if flags & 0x0002:
        r.bytes()
    if flags & 0x0004:
        raise CqlError("gocql: rows without metadata")
    if flags & 0x0001:
        r.string(), r.string()
    columns = []
    for _ in range(count):
        if not flags & 0x0001:
            r.string(), r.string()
        columns.append((r.string(), _read_type(r)))
    rows = []
    for _ in range(r.int()):
        rows.append({name: _decode(cql_type, r.bytes()) for name, cql_type in columns})
    return rows


class _Conn:
    """One connection, one request at a time (stream 1)."""

    def __init__(self, sock: socket.socket, address: str, port: int) -> None:
        self.sock, self.address, self.port = sock, address, port
        self.events: list[str] = []

    @classmethod
    def open(cls, dial: Dial, address: str, port: int, timeout: float) -> _Conn:
        conn = cls(dial(address, port, timeout), address, port)
        conn.sock.settimeout(timeout)
        try:
            conn.startup()
        except BaseException:
            conn.close()
            raise
        return conn

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def _recv(self, n: int) -> bytes:
        chunks, got = [], 0
        while got < n:
            chunk = self.sock.recv(min(n - got, 65536))
            if not chunk:
                raise CqlError("EOF")
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    def request(self, opcode: int, body: bytes) -> tuple[int, bytes]:
        try:
            self.sock.sendall(_HEADER.pack(PROTO_VERSION, 0, 1, opcode, len(body)) + body)
            while True:
                version, flags, stream, op, length = _HEADER.unpack(self._recv(_HEADER.size))
                if not 0 <= length <= MAX_FRAME:
                    raise CqlError(f"gocql: frame length {length} out of bounds")
                reply = self._recv(length)
                if flags & 0x01:
                    raise CqlError("gocql: compressed frame without a compressor")
                if stream == -1 and op == EVENT:
                    self.events.append(_Reader(reply).string())
                    continue
                if stream <= 0:
                    r = _Reader(reply)
                    r.int()
                    raise _ProtocolError(r.string(), version & 0x7F)
                if stream != 1:
                    continue
                if op == ERROR:
                    r = _Reader(reply)
                    code = r.int()
                    raise CqlServerError(code, r.string())
                return op, reply
        except TimeoutError:
            raise CqlError(
                "gocql: no response received from cassandra within timeout period"
            ) from None
        except OSError as exc:
            raise CqlError(str(exc)) from None

    def startup(self) -> None:
        op, _ = self.request(OPTIONS, b"")
        if op != SUPPORTED:
            raise CqlError(f"gocql: Unknown type of response to startup frame: {op:#x}")
        # No Compressor in curio's ClusterConfig: COMPRESSION is never asked for.
        options = {
            "CQL_VERSION": CQL_VERSION,
            "DRIVER_NAME": DRIVER_NAME,
            "DRIVER_VERSION": DRIVER_VERSION,
        }
        op, _ = self.request(STARTUP, _string_map(options))
        if op != READY:
            raise CqlError(f"gocql: Unknown type of response to startup frame: {op:#x}")

    def query(self, statement: str) -> list[dict[str, Any]] | None:
        op, body = self.request(QUERY, _query_body(statement))
        return _rows(body) if op == RESULT else None


# ---------------------------------------------------------------- hosts


def _valid_ip(value: str | None) -> bool:
    if not value:
        return False
    try:
        return not ipaddress.ip_address(value).is_unspecified
    except ValueError:
        return False


@dataclass
class Host:
    """gocql's HostInfo, the fields that decide where it connects."""

    host_id: str = ""
    connect_address: str | None = None
    port: int = 9042
    rpc_address: str | None = None
    broadcast_address: str | None = None
    preferred_ip: str | None = None
    peer: str | None = None
    data_center: str = ""
    rack: str = ""
    tokens: list[str] = field(default_factory=list)
    release_version: str = ""
    partitioner: str = ""
    up: bool = True  # gocql's zero nodeState is NodeUp
    error: str | None = None  # the last pool dial error
    pool: _Conn | None = field(default=None, repr=False)

    @property
    def address(self) -> str:
        """host_source.go connectAddressLocked: the first valid of these."""
        for value in (
            self.connect_address,
            self.rpc_address,
            self.preferred_ip,
            self.broadcast_address,
            self.peer,
        ):
            if _valid_ip(value):
                return str(value)
        return "0.0.0.0"

    @property
    def node_to_node(self) -> str | None:
        return self.broadcast_address if _valid_ip(self.broadcast_address) else self.peer

    def update(self, other: Host) -> None:
        """HostInfo.update: only fields still unset are taken."""
        for name in ("connect_address", "rpc_address", "broadcast_address", "preferred_ip", "peer"):
            if getattr(self, name) is None:
                setattr(self, name, getattr(other, name))
        for name in ("data_center", "rack", "host_id", "release_version", "partitioner"):
            if not getattr(self, name):
                setattr(self, name, getattr(other, name))
        if not self.tokens:
            self.tokens = other.tokens


def _host_from_row(row: dict[str, Any], connect_address: str | None, port: int) -> Host:
    """host_source.go hostInfoFromMap."""
    host = Host(connect_address=connect_address, port=port)
    for key, value in row.items():
        if value is None:
            continue
        if key in ("rpc_address", "native_address"):
            host.rpc_address = value
        elif key in ("broadcast_address", "preferred_ip", "peer", "data_center", "rack"):
            setattr(host, key, value)
        elif key == "host_id":
            host.host_id = str(value)
        elif key == "tokens":
            host.tokens = list(value)
        elif key in ("release_version", "partitioner"):
            setattr(host, key, value)
    host.connect_address = host.address
    return host


def _is_valid_peer(host: Host) -> bool:
    """host_source.go isValidPeer."""
    return bool(
        host.rpc_address and host.host_id and host.data_center and host.rack and host.tokens
    )


def _version_at_least_4(version: str) -> bool:
    try:
        return int(version.lstrip("v").split(".")[0]) >= 4
    except ValueError:
        return False


# ---------------------------------------------------------------- the session


class Session:
    def __init__(self, dial: Dial, port: int, timeout: float, keyspace: str) -> None:
        self.dial, self.port, self.timeout, self.keyspace = dial, port, timeout, keyspace
        self.protocol_version = 0
        self.control: _Conn | None = None
        self.ring: dict[str, Host] = {}  # host_id -> host, in discovery order
        self.partitions = 0  # rows of system.partitions at the last lookup
        self.log: list[str] = []  # what gocql would log
        self.contacts: list[tuple[str, int]] = []  # the contact points it was created with

    @property
    def hosts(self) -> list[Host]:
        """Every host found (the ring)."""
        return list(self.ring.values())

    @property
    def connected(self) -> list[str]:
        """The connect addresses of the hosts with a pool connection."""
        return [h.address for h in self.ring.values() if h.pool is not None]

    def _fill(self, host: Host) -> None:
        """connectionpool.go fill: the first connection, synchronously."""
        try:
            conn = _Conn.open(self.dial, host.address, host.port, self.timeout)
            if self.keyspace:
                conn.query(f'USE "{self.keyspace}"')
        except (OSError, CqlError) as exc:
            host.up, host.error = False, str(exc)
            self.log.append(f'error: failed to connect to "{host.address}" due to error: {exc}')
            return
        host.pool, host.up, host.error = conn, True, None

    def _drop(self, host: Host) -> None:
        if host.pool is not None:
            host.pool.close()
            host.pool = None

    def _get_hosts(self) -> list[Host]:
        """host_source.go GetHosts."""
        control = self.control
        assert control is not None
        try:
            rows = control.query("SELECT * FROM system.local WHERE key='local'")
            if not rows:
                raise CqlError("query returned 0 rows")
        except CqlError as exc:
            raise CqlError(f"could not retrieve local host info: {exc}") from None
        local = _host_from_row(rows[0], None, self.port)
        try:
            if _version_at_least_4(local.release_version):
                try:
                    peer_rows = control.query("SELECT * FROM system.peers_v2")
                except CqlServerError as exc:
                    if exc.code != ERR_INVALID:
                        raise
                    peer_rows = control.query("SELECT * FROM system.peers")
            else:
                peer_rows = control.query("SELECT * FROM system.peers")
        except CqlError as exc:
            raise CqlError(f"unable to fetch peer host info: {exc}") from None
        hosts = [local]
        for row in peer_rows or []:
            peer = _host_from_row(row, None, self.port)
            if not _is_valid_peer(peer):
                self.log.append(
                    f"Found invalid peer '{peer}' Likely due to a gossip or snitch issue"
                )
                continue
            hosts.append(peer)
        # refreshPartitionMap.go getClusterPartitionInfo: its error is ignored
        with contextlib.suppress(CqlError):
            self.partitions = len(control.query("SELECT * FROM system.partitions;") or [])
        return hosts

    def _add_or_update(self, host: Host) -> Host:
        """ring.go addOrUpdate: a known host_id keeps what it had."""
        existing = self.ring.get(host.host_id)
        if existing is None:
            self.ring[host.host_id] = host
            return host
        existing.update(host)
        return existing

    def refresh_ring(self) -> None:
        """host_source.go refreshRing: what gocql runs after a control-connection reconnect and
        on TOPOLOGY_CHANGE / unknown-host STATUS_CHANGE events."""
        previous = dict(self.ring)
        for host in self._get_hosts():
            existing = self.ring.get(host.host_id)
            if existing is None:
                self.ring[host.host_id] = host
                self._fill(host)
            elif (host.address, host.node_to_node) == (existing.address, existing.node_to_node):
                existing.update(host)
            else:  # "host IP has changed": the old pool goes, the new address is dialled
                self._drop(existing)
                self.ring[host.host_id] = host
                self._fill(host)
            previous.pop(host.host_id, None)
        for host in previous.values():
            self._drop(host)
            self.ring.pop(host.host_id, None)

    def execute(self, statement: str) -> list[dict[str, Any]] | None:
        """A query through the pools (query_executor.go do): the first host that is up and has
        a connection; none: ErrNoConnections."""
        for host in self.ring.values():
            if not host.up or host.pool is None:
                continue
            try:
                return host.pool.query(statement)
            except CqlServerError:
                raise
            except CqlError as exc:
                self._drop(host)
                host.up, host.error = False, str(exc)
        raise CqlError(ERR_NO_CONNECTIONS)

    def close(self) -> None:
        for host in self.ring.values():
            self._drop(host)
        if self.control is not None:
            self.control.close()
            self.control = None


def _contact_points(hosts: list[str], port: int) -> list[tuple[str, int]]:
    """session.go addrsToHosts / control.go hostInfo: ``host`` or ``host:port``."""
    points = []
    for entry in hosts:
        entry = entry.strip()
        if not entry:
            continue
        host, sep, maybe_port = entry.rpartition(":")
        if sep and maybe_port.isdigit() and host.count(":") in (0, 7):
            points.append((host.strip("[]"), int(maybe_port)))
        else:
            points.append((entry.strip("[]"), port))
    return points


def create_session(
    hosts: list[str], port: int, dial: Dial, *, timeout: float = 5.0, keyspace: str = ""
) -> Session:
    """gocql ClusterConfig.CreateSession for curio's index store. ``dial(host, port, timeout)``
    returns a connected socket or raises OSError whose str() is Go's dial error."""
    if not hosts:
        raise CqlError(ERR_NO_HOSTS)
    contacts = _contact_points(hosts, port)
    if not contacts:
        raise CqlError(WRAP.format("failed to resolve any of the provided hostnames"))
    session = Session(dial, port, timeout, keyspace)
    session.contacts = contacts
    try:
        session.protocol_version = _discover_protocol(session, contacts)
        _connect_control(session, contacts)
        for host in session._get_hosts():
            host = session._add_or_update(host)
            if host.pool is None:
                session._fill(host)
    except CqlError as exc:
        session.close()
        raise CqlError(WRAP.format(exc)) from None
    if not session.connected:
        session.close()
        raise CqlError(ERR_NO_CONNECTIONS_STARTED)
    return session


def reconnect_control(session: Session) -> None:
    """control.go reconnect: a new control connection to a contact point (the caller then
    refreshes the ring, as gocql does)."""
    if session.control is not None:
        session.control.close()
        session.control = None
    _connect_control(session, session.contacts)


def _discover_protocol(session: Session, contacts: list[tuple[str, int]]) -> int:
    """control.go discoverProtocol: v4 works, or a protocol error names the greatest version."""
    error: Exception | None = None
    for address, port in contacts:
        try:
            _Conn.open(session.dial, address, port, session.timeout).close()
            return PROTO_VERSION
        except _ProtocolError as exc:
            match = _PROTOCOL_SUPPORT.search(str(exc))
            return int(match.group(1)) if match else exc.version
        except (OSError, CqlError) as exc:
            error = exc
    raise CqlError(f"unable to discover protocol version: {error}")


def _connect_control(session: Session, contacts: list[tuple[str, int]]) -> None:
    """control.go connect/setupConn: system.local read with the dialled address; REGISTER."""
    error: Exception | None = None
    for address, port in contacts:
        try:
            conn = _Conn.open(session.dial, address, port, session.timeout)
        except (OSError, CqlError) as exc:
            session.log.append(f"gocql: unable to dial control conn {address}:{port}: {exc}")
            error = exc
            continue
        try:
            rows = conn.query("SELECT * FROM system.local WHERE key='local'")
            if not rows:
                raise CqlError("query returned 0 rows")
            session._add_or_update(_host_from_row(rows[0], address, port))
            events = ("TOPOLOGY_CHANGE", "STATUS_CHANGE", "SCHEMA_CHANGE")
            body = len(events).to_bytes(2, "big") + b"".join(_string(e) for e in events)
            if conn.request(REGISTER, body)[0] != READY:
                raise CqlError("register events: unexpected frame in response to register")
        except CqlError as exc:
            session.log.append(f"gocql: unable setup control conn {address}:{port}: {exc}")
            conn.close()
            error = exc
            continue
        session.control = conn
        return
    raise CqlError(f"unable to connect to initial hosts: {error}")
