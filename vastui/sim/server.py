"""Serving a :class:`SimCloud` over real HTTP with uvicorn."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import socket
from collections.abc import Callable

import uvicorn

from vastui.sim.app import make_app
from vastui.sim.cloud import SimCloud


class ListenError(Exception):
    """The simulator cannot listen where asked (the port is taken, not allowed, ...)."""


def listen_socket(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port``; :class:`ListenError` names the address on failure.

    Bound here rather than by uvicorn, whose bind failure is a logged line, ``sys.exit(3)``
    inside the serving task and a long traceback (uvicorn/config.py ``bind_socket``).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        # As uvicorn does: a port in TIME_WAIT may be reused, a listening one may not.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        where = f"[{host}]:{port}" if family == socket.AF_INET6 else f"{host}:{port}"
        why = exc.strerror or str(exc)
        if exc.errno == errno.EADDRINUSE:
            why += " (another server is running there; choose another with --port)"
        raise ListenError(f"cannot serve the simulated Vast API on {where}: {why}") from None
    return sock


async def serve(
    cloud: SimCloud,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    ready: Callable[[int], None] | None = None,
) -> None:
    """Serve ``cloud`` until cancelled. ``ready(port)`` is called once listening.

    Raises :class:`ListenError` if ``host:port`` cannot be bound.
    """
    sock = listen_socket(host, port)
    bound = sock.getsockname()[1]
    config = uvicorn.Config(
        make_app(cloud),
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        lifespan="on",
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if task.done():
                task.result()  # re-raise a startup failure
                raise RuntimeError("uvicorn stopped before it started")
            await asyncio.sleep(0.01)
        if ready is not None:
            ready(bound)
        await asyncio.shield(task)
    except asyncio.CancelledError:
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await asyncio.wait_for(task, timeout=5)
        raise
    finally:
        sock.close()


def run_server(
    port: int,
    seed: int = 0,
    speed: float = 1.0,
    api_key: str = "sim-key",
    faults: str = "none",
    host: str = "127.0.0.1",
) -> None:
    """Blocking entry point of ``vastui sim serve`` (never prints the API key)."""
    cloud = SimCloud(seed=seed, speed=speed, api_key=api_key, faults=faults)

    def announce(bound: int) -> None:
        print(
            f"vastui sim: serving simulated Vast API on http://{host}:{bound} "
            f"(seed {seed}, speed {speed:g}, faults {faults})",
            flush=True,
        )

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(cloud, host, port, ready=announce))
