"""Small helpers shared by the tests that drive real processes."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
import re
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from vastsim.workers import free_port

WAIT = 60.0  # generous upper bound for any condition

__all__ = [
    "WAIT", "Controller", "eventually", "free_port", "quiet_port", "settle", "until_instance",
    "wait_for",
]  # fmt: skip


def quiet_port() -> int:
    """A free port below the kernel's ephemeral range (ip_local_port_range starts at 32768 by
    default), for a server started later: a port from free_port() is released at once, and any
    bind to port 0 meanwhile (the market, a stand-in's server, PostgreSQL) may be handed it (seen
    under load: the daemon's 'Address already in use'). Nothing binds port 0 into this range."""
    import random
    import socket
    from pathlib import Path

    text = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text()
    low = int(text.split()[0])
    for _ in range(200):
        port = random.randrange(20_000, max(20_001, min(low, 32_768)))
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    return free_port()


def wait_for(cond: Callable[[], Any], timeout: float = WAIT, what: str = "condition") -> Any:
    """Poll until `cond()` is truthy (an upper bound, not a timing assertion)."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


async def eventually(
    check: Callable[[], Any], timeout: float = WAIT, what: str = "condition"
) -> Any:
    """Poll `check()` (awaited when it gives an awaitable) until it is truthy; its value.
    `timeout` is an upper bound, never a timing assumption."""
    try:
        async with asyncio.timeout(timeout):
            while True:
                value = check()
                if inspect.isawaitable(value):
                    value = await value
                if value:
                    return value
                await asyncio.sleep(0.05)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


async def until_instance(
    engine: Any, iid: int, predicate: Callable[[Any], bool], what: str, timeout: float = 180.0
) -> Any:
    """The engine's record of instance `iid` once `predicate` holds for it (the record is
    named in the failure)."""

    async def check() -> Any:
        rec = await engine.store.instances.get(iid)
        return rec if rec is not None and predicate(rec) else None

    try:
        return await eventually(check, timeout, what)
    except AssertionError:
        rec = await engine.store.instances.get(iid)
        raise AssertionError(f"timed out waiting for {what}; instance: {rec}") from None


async def settle(pilot: Any, app: Any, until: Callable[[], Any], tries: int = 400) -> None:
    """Let a Textual app's workers and engine run until `until()` holds (awaited when it
    gives an awaitable), a bounded number of pauses; no fixed sleeps."""
    for _ in range(tries):
        await pilot.pause()
        result = until()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return
        await asyncio.sleep(0.02)
    raise AssertionError("condition not reached")


async def operate(engine: Any, kind: str, **args: Any) -> Any:
    """An operator's command as the console and the CLI send it: into the store's command
    table, carried out by the engine's command step (``Engine.run_commands``, which every step
    starts with). A running loop may claim it first: it finishes it under the lock the call
    here waits for, so the command is answered when this returns."""
    cid = await engine.store.commands.submit(kind, args, source="test")
    await engine.run_commands()
    cmd = await engine.store.commands.get(cid)
    assert cmd is not None and cmd.status in ("done", "failed"), cmd
    return cmd


async def deploy(engine: Any, offer_id: int) -> int | None:
    """Rent ``offer_id`` by the operator's command; the engine's refusal raises EngineError."""
    from vastui.engine.acts import EngineError

    cmd = await operate(engine, "deploy", offer_id=offer_id)
    if cmd.status == "failed":
        raise EngineError(cmd.result)
    found = re.fullmatch(r"rented instance (\d+)", cmd.result or "")
    return int(found.group(1)) if found else None


async def destroy(engine: Any, instance_id: int, reason: str = "manually destroyed") -> None:
    """Destroy ``instance_id`` by the operator's command; a refusal raises EngineError."""
    from vastui.engine.acts import EngineError

    cmd = await operate(engine, "destroy", instance_id=instance_id, reason=reason)
    if cmd.status == "failed":
        raise EngineError(cmd.result)


# The worker's own waits for an end-to-end run at 300x, as e2e_config's are the engine's: the
# benchmark's limit, and the prove stage's waits for a (re)started daemon and for curio to
# enable cuzk (600 s each: 2 real seconds, which a loaded machine's Python start-up alone can
# pass). What these runs test is the path, not the timing: the benchmark runs whole, its rate
# the slope through every finish, without the early abort's bet on its first four (a loaded
# host slows the simulated world in bursts: RELIABILITY.md finding 19; the abort itself is
# tests/test_worker_scripts.py's and tests/test_bench_economics.py's).
E2E_WORKER_ENV = {
    "BENCH_TIMEOUT": str(24 * 3600),
    "CUZK_READY_TIMEOUT": str(24 * 3600),
    "CURIO_READY_TIMEOUT": str(24 * 3600),
    "BENCH_EARLY_ABORT": "0",
}


def e2e_config(**sections: Any) -> Any:
    """vastui's defaults for an end-to-end run at 300x: a loaded test machine stretches every
    step by as much, so the worker's and the engine's deadlines are generous, and so is curio's
    ProveTimeout (its 30 min are 6 real seconds, which a loaded machine's stall alone can pass;
    proofs past it are tests/test_policy_cluster.py's). What is tested is the path, not the
    timing. ``sections``: whole config sections to use instead."""
    from dataclasses import replace

    from vastui.config import Config

    base = Config()
    config = replace(
        base,
        deadlines=replace(
            base.deadlines, paramfetch_min=24 * 60.0, benchmark_min=24 * 60.0, setup_min=600.0
        ),
        curio=replace(base.curio, prove_timeout="4h"),
    )
    return replace(config, **sections)


@contextlib.asynccontextmanager
async def sim_api(cloud: Any, headers: dict[str, str]) -> AsyncIterator[Any]:
    """An httpx client on a simulated cloud's API, in process (ASGI)."""
    import httpx

    from vastsim import make_app

    transport = httpx.ASGITransport(app=make_app(cloud))
    async with httpx.AsyncClient(
        transport=transport, base_url="http://vast.sim", headers=headers
    ) as client:
        yield client


_CLUSTERS = itertools.count(1)


class Controller:
    """The controller-side services a worker reaches through its tunnels, for tests that drive
    the worker scripts without SSH: the stand-in Lotus API (with its token) and curio's cluster
    database (a real PostgreSQL, YCQL: a production cluster of three nodes, whose YCQL the
    engine's tunnel end pins, vastui/ssh/cqlpin.py) with the proofshare market beside it, on
    their own event loop in a thread. Without ``db_password`` the cluster is a database of its
    own on the session's server (tests/conftest.py); with one, a server of its own."""

    def __init__(
        self, *, db_password: str | None = None, speed: float = 5000.0, **cluster: Any
    ) -> None:
        import asyncio
        import threading

        from vastsim.clock import ScaledClock
        from vastsim.harmonydb import CURIO_DEFAULT_PASSWORD, SIM_CHAIN_TOKEN, ClusterDatabase
        from vastsim.lotus import FakeLotus

        # One simulated clock for the cluster and every node of it (env(): WORKER_CLOCK_*):
        # curio's nodes judge each other's heartbeats by it. ``speed`` is the nodes' SIM_SPEED.
        self.clock = ScaledClock(speed)

        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.token = SIM_CHAIN_TOKEN
        self.lotus = FakeLotus(token=SIM_CHAIN_TOKEN)
        self._call(self.lotus.start())
        cluster.setdefault("database", f"cluster{next(_CLUSTERS)}")
        cluster.setdefault("clock", self.clock.now)
        self.db = ClusterDatabase(
            chain_addr=self.lotus_addr, password=db_password or CURIO_DEFAULT_PASSWORD, **cluster
        )
        self._call(self.db.start())
        from vastui.ssh.cqlpin import CqlPinProxy

        self.cql_pin = CqlPinProxy("127.0.0.1", self.db.cql_port)
        self.cql_pin_port = self._call(self.cql_pin.start())

    def _call(self, coro: Any) -> Any:
        import asyncio

        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(WAIT)

    @property
    def lotus_addr(self) -> str:
        return f"127.0.0.1:{self.lotus.port}"

    @property
    def db_addr(self) -> str:
        return f"127.0.0.1:{self.db.port}"

    @property
    def cql_addr(self) -> str:
        """Where the worker's YCQL forward goes: the engine's pinning proxy, as in production."""
        return f"127.0.0.1:{self.cql_pin_port}"

    @property
    def password(self) -> str:
        return self.db.password

    def env(self) -> dict[str, str]:
        """What a worker's environment says of this cluster: the simulated clock, its database's
        name and password (the engine sends them, vastui/engine/acts.py worker_curio_env) and
        where the market is (the simulator's, vastsim/workers.py)."""
        from vastsim.proofsvc import URL_ENV

        return {
            "WORKER_CLOCK_WALL0": f"{self.clock.wall0:.6f}",
            "WORKER_CLOCK_SIM0": f"{self.clock.start:.6f}",
            "CURIO_DB_NAME": self.db.database,
            "CURIO_DB_USER": self.db.user,
            "CURIO_DB_PASSWORD": self.db.password,
            URL_ENV: self.db.proofsvc_url,
        }

    def tunnel_files(self, run_dir: Any) -> None:
        """What the simulator's SSH server writes for the worker's forwarded ports."""
        from pathlib import Path

        run = Path(run_dir)
        (run / "forwards").mkdir(parents=True, exist_ok=True)
        (run / "lotus-api-addr").write_text(self.lotus_addr + "\n")
        (run / "forwards" / "5433").write_text(self.db_addr + "\n")
        (run / "forwards" / "9042").write_text(self.cql_addr + "\n")

    def view(self) -> dict[str, Any]:
        """The simulated cluster's tables (machines, claims, history, queue, payments)."""
        return self.db.view()

    def lotus_lookup(self, address: str) -> str:
        """The ID address the stand-in Lotus gives an account (Filecoin.StateLookupID)."""
        from vastsim.lotus import lookup_id

        return lookup_id(address)

    def sql(self, query: str, params: Any = ()) -> list[tuple[Any, ...]]:
        """One statement on the cluster's database, as an operator (or the engine) sends it:
        tried again on a serialization conflict (SQLSTATE 40001, a node's heartbeat updating the
        same row), as curio's harmonydb and the engine's reader do (vastui/engine/cluster.py)."""
        import psycopg

        for attempt in range(10):
            try:
                with self.db.connect() as conn:
                    cur = conn.execute(query, params)
                    return list(cur.fetchall()) if cur.description is not None else []
            except psycopg.errors.SerializationFailure:
                if attempt == 9:
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        self._call(self.cql_pin.stop())
        self._call(self.lotus.stop())
        self._call(self.db.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def world_rate(cuzk_log: str, skip: int = 1) -> float:
    """What the simulated machine really did, from the daemon's own timeline (engine.rs:349:
    TIMELINE,<ms since start>,GPU_END,...): a proof's finish is its last partition's GPU end,
    the first ``skip`` proofs left out (the warmup; in production the benchmark's), the rate
    the least-squares slope through the finishes, as benchmark.sh computes its own from what it
    observed. On a loaded test machine the world
    itself runs slower or in bursts (its clock is the wall's, scaled): the benchmark is judged
    against it, not against the profile's nominal rate."""
    first, ends = _timeline(cuzk_log)
    timed = sorted(ends[j] for j in sorted(first, key=first.__getitem__)[skip:] if j in ends)
    n = len(timed)
    assert n >= 3, f"only {n} timed finishes in the daemon's timeline"
    xs = [t - timed[0] for t in timed]
    ys = list(range(1, n + 1))
    mx, my = sum(xs) / n, sum(ys) / n
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )
    return slope * 3_600_000  # per ms → per hour


def world_count(
    cuzk_log: str, skip: int, samples: list[list[float]], window: float
) -> tuple[int, float]:
    """What the simulated daemon did, counted as the engine counts production from its own
    readings (``samples``: production.ProdState's, [t, completed, failed, busy, timeouts,
    daemon uptime, latency]): over the readings of the last ``window`` (and the one before it),
    for each interval whose first reading found the daemon busy, the proofs after the first
    ``skip`` that it finished within the interval by its own clock, and the interval's length
    by that clock. (proofs, seconds)."""
    _starts, ends = _timeline(cuzk_log)
    order = sorted(_starts, key=_starts.__getitem__)[skip:]
    finishes = sorted(ends[j] / 1000 for j in order if j in ends)
    start = samples[-1][0] - window
    points = [x for x in samples if x[0] >= start]
    earlier = [x for x in samples if x[0] < start]
    points = earlier[-1:] + points
    done, span = 0, 0.0
    for a, b in itertools.pairwise(points):
        if a[3] and 0 <= a[5] < b[5]:
            done += sum(1 for f in finishes if a[5] < f <= b[5])
            span += b[5] - a[5]
    return done, span


def _timeline(cuzk_log: str) -> tuple[dict[str, int], dict[str, int]]:
    """Each proof's first SYNTH_START and, once every one of its partitions has a GPU_END, the
    last of them, in the daemon's TIMELINE lines (ms). A proof the daemon was stopped in the
    middle of (an early abort, the end of a window) has the GPU_ENDs of some partitions only:
    it did not finish, and is not counted (counted, its partial ends bunched before the stop
    would pull a rate's slope up)."""
    plain = re.sub(r"\x1b\[[0-9;]*m", "", cuzk_log)  # tracing's colours (a daemon on a tty)
    parts = {
        job: int(n)
        for job, n in re.findall(
            r"dispatching per-partition .*?job_id=(\S+) num_partitions=(\d+)", plain
        )
    }
    starts: dict[str, int] = {}
    done: dict[str, dict[int, int]] = {}
    pattern = r"^TIMELINE,(\d+),(SYNTH_START|GPU_END),([^,]+),(?:worker=\d+,)?partition=(\d+)"
    for m in re.finditer(pattern, cuzk_log, re.M):
        t, event, job, p = int(m.group(1)), m.group(2), m.group(3), int(m.group(4))
        if event == "SYNTH_START":
            starts.setdefault(job, t)
        else:
            done.setdefault(job, {})[p] = t
    ends = {
        job: max(gpu.values())
        for job, gpu in done.items()
        if job in parts and len(gpu) >= parts[job]
    }
    return starts, ends


def bandwidth_of(row: dict[str, Any]) -> float:
    """Each proof's bandwidth in an offers --json row, as the ranking counts it
    (vastui/engine/ranking.py bandwidth_per_proof)."""
    from vastui.engine.ranking import PROOF_UP_GB, REQUEST_GB

    down, up = row.get("inet_down_cost") or 0.0, row.get("inet_up_cost") or 0.0
    return float(REQUEST_GB * down + PROOF_UP_GB * up)
