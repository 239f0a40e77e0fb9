"""A machine's record as a bid, summed from its bid rentals (no table of its own: the
``instances`` rows of bids are its source)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .instances import InstanceRecord


@dataclass(frozen=True, slots=True)
class BidHistory:
    """A machine's record as a bid (Store.bid_history): how often it was outbid, the hours it
    ran and the hours it was stopped."""

    machine_id: int
    gpu_name: str
    interruptions: int
    running_h: float
    stopped_h: float


def bid_history(records: Iterable[InstanceRecord], now: float) -> list[BidHistory]:
    """Each machine's record as a bid, summed over its bid rentals: the store's view
    (Store.bid_history) and the economics bench's alike. Running time is from its setup (or
    create) to its end (or ``now``) less the time stopped, the open episode included."""
    sums: dict[tuple[int, str], list[float]] = {}
    for r in records:
        if not r.is_bid or r.machine_id is None or r.gpu_name is None:
            continue
        end = r.killed_at if r.killed_at is not None else now
        start = r.setup_at if r.setup_at is not None else r.created_at
        stopped = r.stopped_s
        if r.outbid_since is not None:  # stopped still, or when it was let go
            stopped += max(0.0, end - r.outbid_since)
        running = max(0.0, end - (start if start is not None else end) - stopped)
        acc = sums.setdefault((r.machine_id, r.gpu_name), [0.0, 0.0, 0.0])
        acc[0] += r.interruptions
        acc[1] += running / 3600.0
        acc[2] += stopped / 3600.0
    return [
        BidHistory(machine, gpu, int(n), hours, stopped)
        for (machine, gpu), (n, hours, stopped) in sorted(sums.items())
    ]
