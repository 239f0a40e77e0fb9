"""The network a simulated worker sees, for the stand-ins that dial out (``curio``).

A real worker is a container on a Vast host. Its loopback is its own: the controller's services
are there only where the controller's SSH remote forwards put them (127.0.0.1:1234 the Lotus
API, 127.0.0.1:5433 YSQL, 127.0.0.1:9042 YCQL), and the controller's private network (the
addresses a production YugabyteDB cluster advertises, 10.x) cannot be reached at all.

The simulator's workers share this machine's loopback, so each forward listens on a free port
and the sandbox's SSH server writes where (``run/forwards/<port>``, ``run/lotus-api-addr`` for
1234: vastsim/sshd.py); the worker scripts read the same files (worker-image/vastui-lib.sh
``forward_addr``). :func:`worker_dial` applies that map, and refuses what a container could not
reach. A refusal is immediate here where a real SYN to an unroutable address waits for the dial
timeout: only the outcome and the error text are modelled, not the wait.
"""

from __future__ import annotations

import ipaddress
import os
import socket

FORWARDED = (1234, 5433, 9042)  # the ports the controller forwards (vastui/engine/runtime.py)


def _root() -> str:
    return os.environ.get("WORKER_ROOT", "/").rstrip("/") or ""


def forwarded(port: int) -> str | None:
    """Where the worker's 127.0.0.1:``port`` really is, when the controller forwards it."""
    candidates = [os.path.join(_root(), "run", "forwards", str(port))]
    if port == 1234:
        candidates.append(os.path.join(_root(), "run", "lotus-api-addr"))
    for path in candidates:
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read().strip()
        except OSError:
            continue
        if text:
            return text
    return None


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def resolve(host: str, port: int) -> tuple[str, int]:
    """The real address behind the worker's ``host:port``; OSError with Go's dial error when the
    worker cannot reach it."""
    if is_loopback(host):
        if host in ("127.0.0.1", "localhost") and port in FORWARDED:
            mapped = forwarded(port)
            if mapped is None:  # the controller's forward is not up: nothing listens there
                raise ConnectionRefusedError(f"dial tcp {host}:{port}: connect: connection refused")
            real_host, _, real_port = mapped.rpartition(":")
            return real_host or "127.0.0.1", int(real_port)
        return host, port  # the worker's own services (the daemon on its real port)
    # The controller's private network, another worker's address: not routable from a Vast box.
    raise TimeoutError(f"dial tcp {host}:{port}: connect: connection timed out")


def worker_dial(host: str, port: int, timeout: float = 5.0) -> socket.socket:
    """A TCP connection from the worker to ``host:port``; errors read as Go's net.Dial's."""
    real_host, real_port = resolve(host, port)
    try:
        return socket.create_connection((real_host, real_port), timeout=timeout)
    except ConnectionRefusedError:
        raise ConnectionRefusedError(
            f"dial tcp {host}:{port}: connect: connection refused"
        ) from None
    except TimeoutError:
        raise TimeoutError(f"dial tcp {host}:{port}: i/o timeout") from None
    except OSError as exc:
        raise OSError(f"dial tcp {host}:{port}: connect: {exc.strerror or exc}") from None
