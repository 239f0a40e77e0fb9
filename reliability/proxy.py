"""A TCP proxy between the engine and the served cloud's HTTP API: the Vast API made
unreachable for the engine alone (the observer, the vastai CLI, talks to the cloud directly).

Modes:

* ``pass``: bytes go through both ways;
* ``refuse``: the listening socket is closed and its port held bound, not listening, so a
  connect is refused at once (``ECONNREFUSED``, as with a network or DNS failure), and every
  live connection is reset;
* ``blackhole``: connects are accepted and nothing is ever answered (a client waits for its
  timeout, as behind a dead load balancer); live connections are reset.

The proxy also reads the HTTP/1.1 request lines and status lines going through (plain HTTP
on a local port), so a trial knows when the engine's first instance list after an outage was
answered, and which instances an engine asked to destroy (second-controller: one proxy per
engine), without asking the engine.
"""

from __future__ import annotations

import contextlib
import re
import socket
import struct
import threading
import time
from collections import deque
from dataclasses import dataclass

REQUEST_LINE = re.compile(rb"(GET|POST|PUT|DELETE|PATCH|HEAD) (/\S*) HTTP/1\.[01]\r\n")
STATUS_LINE = re.compile(rb"HTTP/1\.[01] (\d{3}) ")
MODES = ("pass", "refuse", "blackhole")


@dataclass(frozen=True)
class Answer:
    at: float  # wall time the status line went back to the client
    method: str
    path: str
    status: int


class _Conn:
    def __init__(self, client: socket.socket, upstream: socket.socket | None) -> None:
        self.client = client
        self.upstream = upstream
        self.asked: deque[tuple[str, str]] = deque(maxlen=64)

    def reset(self) -> None:
        for sock in (self.client, self.upstream):
            if sock is None:
                continue
            with contextlib.suppress(OSError):
                # SO_LINGER 0: close() sends a RST, the peer sees "connection reset"
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            with contextlib.suppress(OSError):
                sock.close()


class TcpProxy:
    def __init__(self, target_host: str, target_port: int, host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self.host = host
        self.mode = "pass"
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._held: socket.socket | None = None
        self._conns: set[_Conn] = set()
        self._stop = threading.Event()
        self._answers: deque[Answer] = deque(maxlen=200_000)
        # (wall time, method, path) of every request as it went up, answered or not
        self._requests: deque[tuple[float, str, str]] = deque(maxlen=200_000)
        self._counts = {"connections": 0, "refused_periods": 0, "blackhole_periods": 0,
                        "bytes_up": 0, "bytes_down": 0, "held": 0}  # fmt: skip
        self.port = 0

    # -- control ---------------------------------------------------------------------------

    def start(self) -> None:
        self._listener = self._listen(0)
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept_loop, name="proxy-accept", daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def set_mode(self, mode: str) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown proxy mode {mode!r}")
        with self._lock:
            if mode == self.mode:
                return
            self._reset_all()
            if mode == "refuse":
                self._close_listener()
                held = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                held.bind((self.host, self.port))  # bound, not listening: connects refused
                self._held = held
                self._counts["refused_periods"] += 1
            else:
                if self._held is not None:
                    self._held.close()
                    self._held = None
                if self._listener is None:
                    self._listener = self._listen(self.port)
                if mode == "blackhole":
                    self._counts["blackhole_periods"] += 1
            self.mode = mode

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            self._reset_all()
            self._close_listener()
            if self._held is not None:
                self._held.close()
                self._held = None

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {**self._counts, "live": len(self._conns)}

    def answers(self, since: float = 0.0) -> list[Answer]:
        with self._lock:
            return [a for a in self._answers if a.at >= since]

    def requests(self, since: float = 0.0) -> list[tuple[float, str, str]]:
        """Every request that went up (wall time, method, path), whatever its answer: a DELETE
        whose answer is lost has been asked all the same."""
        with self._lock:
            return [r for r in self._requests if r[0] >= since]

    # -- inside ----------------------------------------------------------------------------

    def _listen(self, port: int) -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, port))
        sock.listen(128)
        sock.settimeout(0.2)
        return sock

    def _close_listener(self) -> None:
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)  # wakes a blocked accept()
            self._listener.close()
            self._listener = None

    def _reset_all(self) -> None:
        for conn in list(self._conns):
            conn.reset()
        self._conns.clear()

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                listener = self._listener
            if listener is None:
                self._stop.wait(0.05)  # refusing: the kernel refuses, nothing to accept
                continue
            try:
                client, _ = listener.accept()
            except (TimeoutError, OSError):
                continue
            client.settimeout(None)
            with self._lock:
                mode = self.mode
                self._counts["connections"] += 1
            if mode == "blackhole":
                with self._lock:
                    self._conns.add(_Conn(client, None))  # held, never read or answered
                    self._counts["held"] += 1
                continue
            if mode != "pass":
                _Conn(client, None).reset()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=10)
                upstream.settimeout(None)
            except OSError:
                _Conn(client, None).reset()
                continue
            conn = _Conn(client, upstream)
            with self._lock:
                self._conns.add(conn)
            threading.Thread(target=self._pump, args=(conn, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(conn, False), daemon=True).start()

    def _pump(self, conn: _Conn, up: bool) -> None:
        assert conn.upstream is not None
        src, dst = (conn.client, conn.upstream) if up else (conn.upstream, conn.client)
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    with contextlib.suppress(OSError):
                        dst.shutdown(socket.SHUT_WR)
                    break
                self._sniff(conn, data, up)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            if not up:  # the answer side ended: the exchange is over
                with self._lock:
                    self._conns.discard(conn)
                for sock in (conn.client, conn.upstream):
                    with contextlib.suppress(OSError):
                        sock.close()

    def _sniff(self, conn: _Conn, data: bytes, up: bool) -> None:
        now = time.time()
        with self._lock:
            self._counts["bytes_up" if up else "bytes_down"] += len(data)
            if up:
                for m in REQUEST_LINE.finditer(data):
                    asked = (m.group(1).decode(), m.group(2).decode(errors="replace"))
                    conn.asked.append(asked)
                    self._requests.append((now, *asked))
                return
            for m in STATUS_LINE.finditer(data):
                if not conn.asked:  # no answer without a question (a body's text)
                    break
                method, path = conn.asked.popleft()
                self._answers.append(Answer(now, method, path, int(m.group(1))))
