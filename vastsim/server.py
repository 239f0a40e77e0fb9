"""Serving a :class:`SimCloud` over real HTTP with uvicorn."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import secrets
import signal
import socket
from collections.abc import Callable, Generator
from dataclasses import dataclass
from pathlib import Path

import uvicorn

from vastsim.app import make_app
from vastsim.cloud import SimCloud
from vastsim.demand import CHALLENGES_PER_SLOT, FiniteDemand
from vastui.config import ensure_parent_dir, write_private


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


class _Uvicorn(uvicorn.Server):
    """uvicorn without its own SIGINT/SIGTERM capture (uvicorn/server.py ``capture_signals``,
    which re-raises a caught signal after serving): stopping is the caller's business, e.g.
    :func:`run_server`, which must finish its clean-up undisturbed."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


async def serve(
    cloud: SimCloud,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    ready: Callable[[int], None] | None = None,
    sock: socket.socket | None = None,
) -> None:
    """Serve ``cloud`` until cancelled. ``ready(port)`` is called once listening.

    Raises :class:`ListenError` if ``host:port`` cannot be bound. ``sock``: already bound (by
    :func:`listen_socket`); it is closed on return either way.
    """
    sock = sock or listen_socket(host, port)
    bound = sock.getsockname()[1]
    config = uvicorn.Config(
        make_app(cloud),
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        lifespan="on",
    )
    server = _Uvicorn(config)
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
            async with asyncio.timeout(5):
                await task
        raise
    finally:
        sock.close()


@dataclass
class ServeOptions:
    """`vastui sim serve`: where, and the worker side."""

    host: str = "127.0.0.1"
    port: int = 0
    workers: bool = True  # sandboxes, SSH servers and the controller's stand-ins
    machine_fault_rate: float = 1.0
    write_config: Path | None = None  # a vastui config for an engine against this cloud
    demand: FiniteDemand | None = None  # the market's rules (None: every ask filled)
    lotus_token: str = "sign"  # the token curio gets for the chain node ("read": no signing)


PASSWORD_FILE = "curio-db-password"  # beside the written config (0600)


def engine_config(api_url: str, addrs: dict[str, str], curio: dict[str, str] | None = None) -> str:
    """A vastui config (TOML) pointing an engine at a served cloud and its stand-ins. The API
    key is never in it: vastui reads $VAST_API_KEY (or the vastai key file); nor is curio's
    database password (a file of its own beside the config, PASSWORD_FILE)."""
    lines = [
        "# Written by `vastui sim serve`: an engine against the served simulated cloud.",
        "# Run it with VAST_API_KEY set to the --api-key the cloud was served with.",
        "[vast]",
        f"api_url = {json.dumps(api_url)}",
    ]
    if addrs:
        lines.append("")
        lines.append("[ssh]")
        lines += [f"{key} = {json.dumps(value)}" for key, value in sorted(addrs.items())]
    if curio:
        lines.append("")
        lines.append("[curio]")
        lines += [f"{key} = {json.dumps(value)}" for key, value in sorted(curio.items())]
    return "\n".join(lines) + "\n"


def sim_clock_env(cloud: SimCloud) -> str | None:
    """What an engine needs to read this cloud's simulated clock (``VASTUI_SIM_CLOCK``):
    deadlines then run on the same time as the instances; None on a clock that is not scaled."""
    clock = cloud.clock
    wall0, start, speed = (getattr(clock, k, None) for k in ("wall0", "start", "speed"))
    if wall0 is None or start is None or speed is None:
        return None
    return f"{wall0!r},{start!r},{speed!r}"


async def serve_cloud(
    cloud: SimCloud, opts: ServeOptions, say: Callable[[str], None] = print
) -> None:
    """Serve ``cloud`` over HTTP with its worker hosts until cancelled; then stop every
    sandbox and remove it. Says (one line each, never the API key) the API URL and the
    addresses an engine's `[ssh]` needs."""
    sock = listen_socket(opts.host, opts.port)  # a taken port fails before anything starts
    async with contextlib.AsyncExitStack() as stack:
        stack.callback(sock.close)
        addrs: dict[str, str] = {}
        curio: dict[str, str] = {}
        password = ""
        if opts.workers:
            from vastsim.hosting import worker_hosts

            # curio's database gets a password of its own, never printed: an engine reads it
            # from the file --write-config puts beside its config
            password = secrets.token_urlsafe(24)
            hosts = await stack.enter_async_context(
                worker_hosts(
                    cloud, speed=cloud.speed, machine_fault_rate=opts.machine_fault_rate,
                    db_password=password, demand=opts.demand, lotus_token=opts.lotus_token,
                )
            )  # fmt: skip
            addrs = hosts.controller_addrs()
            curio = {"db_user": hosts.curio_db_user, "db_name": hosts.curio_db_name}

        def ready(bound: int) -> None:
            where = f"[{opts.host}]" if ":" in opts.host else opts.host
            api_url = f"http://{where}:{bound}"
            say(
                f"vastui sim: serving simulated Vast API on {api_url} (seed {cloud.seed}, "
                f"speed {cloud.speed:g}, faults {cloud.faults.profile})"
            )
            for key, value in sorted(addrs.items()):
                say(f"vastui sim: ssh.{key} = {value}")
            if opts.workers:
                say(f"vastui sim: the proofshare market's demand: {describe(opts.demand)}")
            clock = sim_clock_env(cloud)
            if clock is not None:
                say(f"vastui sim: VASTUI_SIM_CLOCK={clock}")
            if opts.write_config is not None:
                ensure_parent_dir(opts.write_config)  # every directory made 0700
                write_private(opts.write_config, engine_config(api_url, addrs, curio))
                env = f"VASTUI_SIM_CLOCK={clock} " if clock is not None else ""
                say(
                    f"vastui sim: wrote {opts.write_config}; an engine: {env}"
                    f"VAST_API_KEY=<the --api-key> vastui --config {opts.write_config} "
                    "--engine-only"
                )
                if password:
                    secret = opts.write_config.parent / PASSWORD_FILE
                    write_private(secret, password + "\n")
                    port = addrs["curio_db"].rpartition(":")[2]
                    say(
                        f"vastui sim: curio's database: PGPASSWORD=$(cat {secret}) psql "
                        f"-h 127.0.0.1 -p {port} -U {curio['db_user']} {curio['db_name']}"
                    )

        await serve(cloud, opts.host, opts.port, ready=ready, sock=sock)


def describe(demand: FiniteDemand | None) -> str:
    if demand is None:
        return "unlimited (every ask filled)"
    slots = demand.balance // CHALLENGES_PER_SLOT
    wallet = "a new wallet, no slots" if slots == 0 else f"{slots} slots"
    return f"{demand.curve.spec()} requests per hour, {wallet}"


def run_server(cloud: SimCloud, opts: ServeOptions) -> None:
    """Blocking entry point of ``vastui sim serve``: SIGTERM and SIGINT end it cleanly (every
    sandbox's processes killed, the sandboxes removed)."""

    def say(line: str) -> None:
        print(line, flush=True)

    async def main() -> None:
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        stopping: list[int] = []

        def stop(signum: int) -> None:
            if not stopping:  # a second signal must not cut the clean-up short
                stopping.append(signum)
                task.cancel()

        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop, signum)
        try:
            await serve_cloud(cloud, opts, say)
        except asyncio.CancelledError:
            if not stopping:
                raise

    asyncio.run(main())
