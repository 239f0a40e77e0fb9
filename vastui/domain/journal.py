"""What the fleet wrote down: the append-only events, the intents recorded before every rent
and destroy goes out, and the commands the console sends the engine."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .machines import BanSpec
from .timefmt import iso_utc

# Event kinds written by vastui (``events.kind`` is free text; these are documented):
#   rent       an instance was created on Vast
#   destroy    an instance was destroyed on Vast
#   ban        a machine was added to (or banned again on) the bad list   [written by add_bad]
#   unban      a machine was removed from the bad list                  [written by remove_bad]
#   adopt      a running Vast instance not created by vastui was taken under management
#   stage      an instance moved to another pipeline stage
#   foreign    instances of another controller (a vastui label this database never intended)
#              were seen on the account, first time for their fleet: never adopted or destroyed
#   fleet_failure  one failure on several machines paused provisioning (or the pause ended)
#   kill       an instance was marked killed
#   import     a legacy state.db was imported                       [written by import_legacy]
#   benchmark  a benchmark result was recorded
#   strike     a mark against a machine (failed proofs, a production kill); enough of them ban
#   tunnel     a worker reported the controller's tunnel down (or up again)
#   error      something failed (detail carries the error)
EVENT_KINDS: tuple[str, ...] = (
    "rent",
    "destroy",
    "ban",
    "unban",
    "adopt",
    "foreign",
    "fleet_failure",
    "stage",
    "kill",
    "import",
    "benchmark",
    "strike",
    "tunnel",
    "error",
    "cordoned",  # a worker's curio machine cordoned before a planned destroy (its drain)
    "cut_off",  # the controller cut off from its workers, and back (one episode, two events)
    "tasks_released",  # a destroyed (or outbid) worker's tasks freed in curio's cluster
    "cluster",  # curio's cluster: unreadable, readable again; an identity collision
    "target",  # the automatic target changed (vastui/engine/autoscale.py), with its reason
    "pool",  # a worker stopped into the warm pool, started from it, or its start queued
)


@dataclass(frozen=True, slots=True)
class Event:
    """One row of the append-only ``events`` log."""

    id: int
    ts: float
    kind: str
    reason: str
    instance_id: int | None = None
    machine_id: int | None = None
    detail: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "ts": iso_utc(self.ts),
            "kind": self.kind,
            "instance_id": self.instance_id,
            "machine_id": self.machine_id,
            "reason": self.reason,
        }


# An intent's note while pending: its request has gone out (see `IntentRepo.mark_sent`).
INTENT_SENT = "sent"

# A destroy intent's detail key for the ban decided with it (see Store.complete_destroy).
BAN_KEY = "ban_record"


@dataclass(frozen=True, slots=True)
class Intent:
    id: int
    kind: str
    status: str
    label: str | None
    offer_id: int | None
    machine_id: int | None
    instance_id: int | None
    reason: str
    detail: dict[str, Any]
    created_at: float
    updated_at: float
    note: str | None

    @property
    def ban(self) -> BanSpec | None:
        """The ban a destroy intent carries (recorded when the destroy completes), if any."""
        detail = self.detail if isinstance(self.detail, dict) else {}
        return BanSpec.from_json(detail.get(BAN_KEY))

    @property
    def sent(self) -> bool:
        return self.note == INTENT_SENT


COMMAND_KINDS = ("deploy", "destroy", "ignore", "unignore")


@dataclass(frozen=True, slots=True)
class Command:
    id: int
    kind: str
    args: dict[str, Any]
    status: str
    source: str
    created_at: float
    done_at: float | None
    result: str | None
