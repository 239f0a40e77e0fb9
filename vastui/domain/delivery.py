"""The fleet's one headline: what it delivered over a stated window and what that cost, with what
it could prove (its capacity) beside it, named apart. The engine computes it once per step
(``vastui/engine/delivery.py``) and publishes it in its status; the strip, ``vastui status``,
the metrics and the instance detail all read that one record, so a figure means the same
everywhere and moves only when the engine has looked at the fleet again.

* **Delivered** proofs are curio's own record of the PSProve tasks this fleet's machines finished
  in the window (``harmony_task_history``, by the time they finished), so a proof counts once,
  whichever worker proved it and whether or not that worker is still alive. Without curio's
  cluster (none configured, or not read yet) they are cuzk's counters, and say so.
* **Paid** proofs are the cluster's payments recorded in the window (one wallet for the cluster,
  ``proofshare_provider_payments.created_at``), credited to the fleet in its share of the
  cluster's finished PSProve tasks. Challenge proofs are never paid.
* **Cost** is every dollar Vast billed for the fleet over the window, whatever its workers were
  doing: the GPU while running, the disk while loading or stopped (the warm pool, an outbid
  bid), the bandwidth (``vastui/engine/spend.py``).
* **Capacity** is what the proving workers could prove if the market kept them full: each one's
  rate measured in production at full feed, else its benchmark's (measured at production
  concurrency).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

CLUSTER = "cluster"  # counted by curio's cluster (harmony_task_history)
CUZK = "cuzk"  # counted by cuzk's counters: no cluster to ask


@dataclass(frozen=True, slots=True)
class Delivery:
    at: float  # engine clock of the reading it rests on
    window_s: float
    source: str  # CLUSTER or CUZK: who counted the proofs
    computed: int  # proofs the fleet finished in the window
    paid: float | None  # paid proofs credited to the fleet in the window (None: unknown)
    cost: float  # dollars billed for the fleet over the window
    capacity: float  # proofs/h the proving workers could prove, fully fed
    capacity_measured: int  # proving workers whose capacity production measured
    proving: int  # workers proving now (not stopped, not draining)
    dph: float  # $/h of the fleet's running workers (stopped ones apart)
    stopped: int = 0  # workers stopped (warm pool, outbid): their disk only
    stopped_dph: float = 0.0  # $/h of their storage
    # what the other side counted over the same window, to reconcile with ``computed``
    cuzk_computed: int | None = None  # cuzk's counters, summed over the fleet's workers
    challenges: int | None = None  # unpaid challenge proofs submitted (the cluster's)

    @property
    def proofs_per_hour(self) -> float:
        return self.computed * 3600.0 / self.window_s if self.window_s > 0 else 0.0

    @property
    def cost_per_paid(self) -> float | None:
        return self.cost / self.paid if self.paid else None

    @property
    def cost_per_computed(self) -> float | None:
        return self.cost / self.computed if self.computed > 0 else None

    @property
    def window_min(self) -> float:
        return self.window_s / 60.0

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["proofs_per_hour"] = round(self.proofs_per_hour, 3)
        out["cost_per_paid"] = _round(self.cost_per_paid)
        out["cost_per_computed"] = _round(self.cost_per_computed)
        return out

    @classmethod
    def from_json(cls, data: Any) -> Delivery | None:
        """The stored record, or None for anything that is not one (an older engine's status,
        an edited file): a reader shows nothing rather than a wrong figure."""
        if not isinstance(data, dict):
            return None
        try:
            fields = {name: data[name] for name in _REQUIRED}
        except KeyError:
            return None
        for name in _OPTIONAL:
            if name in data:
                fields[name] = data[name]
        if fields["source"] not in (CLUSTER, CUZK):
            return None
        for name, value in fields.items():
            if name == "source":
                continue
            if value is None and name in _MAY_BE_NONE:
                continue
            if not _number(value):
                return None
        return cls(**fields)


_REQUIRED = ("at", "window_s", "source", "computed", "paid", "cost", "capacity",
             "capacity_measured", "proving", "dph")  # fmt: skip
_OPTIONAL = ("stopped", "stopped_dph", "cuzk_computed", "challenges")
_MAY_BE_NONE = ("paid", "cuzk_computed", "challenges")


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 6)
