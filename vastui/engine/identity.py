"""A worker's identity in curio's cluster, derived from its runner id (pure).

curio names a node by the host:port it listens on: ``curio run --listen`` (``CURIO_LISTEN``,
default ``0.0.0.0:12300``, cmd/curio/run.go:34-38). An unspecified ``0.0.0.0`` is replaced by the
local address of its database connection (deps/deps.go:291-305, harmonyquery ``GetRoutableIP``),
which through the SSH tunnel is ``127.0.0.1``; that host:port is the machine's key in
``harmony_machines`` (harmony/resources/resources.go:81-99, upserted by ``host_and_port``, which
is not unique). Left at the default, every worker is the same curio machine: a restarting worker
takes back the tasks another worker is running (harmony/harmonytask/harmonytask.go:351-389).
A host that is not an IP literal leaves the address empty (deps.go:294-306): the same collision.

So each worker listens on the worker's loopback at a port of its own, ``127.0.0.1:<base + n>``
for runner id ``n`` (the original vast-manager's monotonic ``runner_id``, cmd/vast-manager/
main.go). A port, not another loopback IP: a controller-side curio listening on 0.0.0.0:12300
answers every 127.x address at port 12300, so an identity such as 127.1.0.7:12300 would make
that node peer with itself (harmony/harmonytask/peering.go:104-140 dials every host_and_port).
The base (``[curio] listen_port_base``, 12400) keeps clear of curio's own ports (12300 the API,
4701 the GUI). Other nodes cannot dial a worker's identity (it is the worker's own loopback):
they fall back to polling the database every 3 s (harmonytask.go:32-36), as curio does whenever
a peer cannot be reached.
"""

from __future__ import annotations

CURIO_LISTEN_HOST = "127.0.0.1"
DEFAULT_PORT_BASE = 12400
MAX_PORT = 65535


def listen_port(runner_id: int, base: int = DEFAULT_PORT_BASE) -> int:
    """The port of runner ``runner_id``: ``base + runner_id``, wrapping past 65535 (after 53,135
    rentals with the default base; the engine skips a port a live worker holds)."""
    if runner_id < 1:
        raise ValueError(f"runner id must be >= 1, got {runner_id}")
    if not 1024 <= base < MAX_PORT - 1:
        raise ValueError(f"listen port base must be 1024..{MAX_PORT - 2}, got {base}")
    return base + 1 + (runner_id - 1) % (MAX_PORT - base)


def curio_listen(runner_id: int, base: int = DEFAULT_PORT_BASE) -> str:
    """``curio run --listen`` for this runner: an IP literal, never 0.0.0.0 (deps.go:291-305)."""
    return f"{CURIO_LISTEN_HOST}:{listen_port(runner_id, base)}"


def node_name(fleet: str, runner_id: int, fleet_id: str | None = None) -> str:
    """``curio run --name`` (``CURIO_NODE_NAME``, cmd/curio/run.go:65-70), written to
    ``harmony_machine_details.machine_name`` (cmd/curio/tasks/tasks.go:731-748): the fleet, the
    database's fleet id (the one in its labels: two databases of one fleet name give the same
    runner ids, and the cluster must tell their machines apart) and the runner.
    ``vastui-<fleet>-r<id>`` without a fleet id: workers rented before it was in the name."""
    if fleet_id:
        return f"vastui-{fleet}.{fleet_id}-r{runner_id}"
    return f"vastui-{fleet}-r{runner_id}"


def node_prefixes(fleet: str, fleet_id: str | None) -> tuple[str, ...]:
    """What every node name of this fleet and database starts with (``node_name`` without its
    runner id), the older name without a fleet id too: how the cluster's rows of this fleet
    are found whatever record they were."""
    old = f"vastui-{fleet}-r"
    return (f"vastui-{fleet}.{fleet_id}-r", old) if fleet_id else (old,)


def runner_env(
    fleet: str, runner_id: int, base: int = DEFAULT_PORT_BASE, fleet_id: str | None = None
) -> dict[str, str]:
    """What a worker is told of its identity (worker-image/entrypoint.sh reads them)."""
    return {
        "VASTUI_RUNNER_ID": str(runner_id),
        "CURIO_LISTEN": curio_listen(runner_id, base),
        "CURIO_NODE_NAME": node_name(fleet, runner_id, fleet_id),
    }


def parse_runner_id(value: object) -> int | None:
    """A runner id from an instance's environment (untrusted): plain ASCII digits, 1..2^31-1."""
    if not isinstance(value, str) or not value.isascii() or not value.isdigit():
        return None
    if len(value) > 10:
        return None
    n = int(value)
    return n if 1 <= n < 2**31 else None


__all__ = [
    "CURIO_LISTEN_HOST",
    "DEFAULT_PORT_BASE",
    "curio_listen",
    "listen_port",
    "node_name",
    "node_prefixes",
    "parse_runner_id",
    "runner_env",
]
