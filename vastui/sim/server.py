"""Serving a :class:`SimCloud` over real HTTP with uvicorn."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import uvicorn

from vastui.sim.app import make_app
from vastui.sim.cloud import SimCloud


async def serve(
    cloud: SimCloud,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    ready: Callable[[int], None] | None = None,
) -> None:
    """Serve ``cloud`` until cancelled. ``ready(port)`` is called once listening."""
    config = uvicorn.Config(
        make_app(cloud),
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        lifespan="on",
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            if task.done():
                task.result()  # re-raise a startup failure
                raise RuntimeError("uvicorn stopped before it started")
            await asyncio.sleep(0.01)
        bound = port
        for srv in server.servers:
            for sock in srv.sockets:
                bound = sock.getsockname()[1]
                break
        if ready is not None:
            ready(bound)
        await asyncio.shield(task)
    except asyncio.CancelledError:
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await asyncio.wait_for(task, timeout=5)
        raise


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
