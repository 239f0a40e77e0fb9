"""Draining a worker before a planned destroy, and releasing a destroyed worker's tasks: the
decisions, pure (the engine and ``acts`` carry them out on curio's cluster, cluster.py).

curio gives a task back only on a clean shutdown (harmony/harmonytask/harmonytask.go:414-432);
a destroyed node keeps what it held until the dead machine is cleaned up after 10 minutes
without a heartbeat (harmony/resources/resources.go:22), and the proofshare market's deadline
is 45 minutes, with a penalty per miss (documentation/en/experimental-features/
Snark-Market.md:169). So a destroy vastui chooses while the worker is healthy enough to finish
its work (a lowered target, a rate below its min_rate) cordons its curio machine first: it
claims no new work and finishes what it holds (harmonytask.go:647-663); it is destroyed once it
holds no work, or at the drain's deadline. A dead or broken worker (unreachable, its daemon
gone, failing its proofs) is destroyed at once: it would finish nothing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vastui.config import Config
from vastui.domain.worker import InstanceRecord
from vastui.engine.policy import Kill

# The destroys of a healthy worker: it can finish what it holds.
DRAIN_KINDS = frozenset({"surplus", "prove_below_min"})
DRAIN_FLOOR_S = 120.0  # the least a drain is given (a proof's submit, the next poll)
DRAIN_SLACK = 1.5  # over the held proofs' time at the worker's rate
BACKGROUND = "bg:"  # curio's background tasks (bg:PShareRequest): yielded when cordoned,
# never work in flight (harmonytask.go:230-233); freed by the release after the destroy


def drains(kill: Kill, rec: InstanceRecord) -> bool:
    """Whether this destroy waits for a drain: a planned one, of a worker that proves (and so
    may hold curio's tasks), not stopped by a higher bid (its curio is down already)."""
    return (
        kill.kind in DRAIN_KINDS
        and rec.state == "proving"
        and rec.runner_id is not None
        and rec.stopped_since is None
    )


def worker_rate(rec: InstanceRecord) -> float | None:
    """Proofs/hour it proves at: measured in production, else its benchmark's."""
    for rate in (rec.prod_rate, rec.bench_rate):
        if rate is not None and math.isfinite(rate) and rate > 0:
            return rate
    return None


def drain_seconds(held: int, rate: float | None, config: Config) -> float:
    """How long a drain may last: ``[proving] drain_min`` when set; else the held proofs' time
    at the worker's rate (with slack), at least DRAIN_FLOOR_S, at most the market's deadline
    less the margin (a proof held longer is a miss anyway)."""
    p = config.proving
    if p.drain_min > 0:
        return p.drain_min * 60.0
    cap = max(DRAIN_FLOOR_S, (p.market_deadline_min - p.drain_margin_min) * 60.0)
    if rate is None or rate <= 0:
        return cap
    need = DRAIN_SLACK * max(0, held) * 3600.0 / rate
    return min(cap, max(DRAIN_FLOOR_S, need))


def work_held(held_by_name: Mapping[str, Any]) -> int:
    """Tasks in flight: every held task but curio's background ones."""
    total = 0
    for name, n in held_by_name.items():
        if isinstance(n, int) and not isinstance(n, bool) and not str(name).startswith(BACKGROUND):
            total += max(0, n)
    return total


@dataclass(frozen=True, slots=True)
class DrainEnd:
    """Why a drain ends now: ``drained`` (it holds no work) or ``deadline``."""

    why: str
    text: str


def drain_end(
    drain: Mapping[str, Any],
    cluster: Mapping[str, Any] | None,
    checked_at: float | None,
    now: float,
) -> DrainEnd | None:
    """Whether a drain is over: the cluster read after the cordon shows the worker holding no
    work (or no row of its own: nothing to finish), or its deadline passed. None: wait. A
    cluster that cannot be read only makes the deadline the end."""
    started = _num(drain.get("started"))
    deadline = _num(drain.get("deadline"))
    fresh = (
        cluster is not None
        and checked_at is not None
        and started is not None
        and checked_at >= started
    )
    if fresh and cluster is not None:
        if cluster.get("machine_id") is None:
            return DrainEnd("drained", "drained: its curio machine is gone from the cluster")
        held = work_held(cluster.get("held_by_name") or {})
        if held == 0:
            return DrainEnd("drained", "drained: its curio machine holds no task")
    if deadline is not None and now >= deadline:
        held_text = ""
        if fresh and cluster is not None:
            held_text = f" with {work_held(cluster.get('held_by_name') or {})} task(s) held"
        return DrainEnd("deadline", f"drain deadline passed{held_text}")
    return None


def release_owed(rec: InstanceRecord) -> bool:
    """A destroyed worker that proved owes the release of its tasks until one after its
    destroy (an outbid worker's earlier release freed only what it held then)."""
    return rec.proving_at is not None and (
        rec.released_at is None or rec.released_at < (rec.killed_at or 0.0)
    )


def _num(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


__all__ = [
    "DRAIN_KINDS",
    "DrainEnd",
    "drain_end",
    "drain_seconds",
    "drains",
    "release_owed",
    "work_held",
    "worker_rate",
]
