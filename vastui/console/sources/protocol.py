"""`FleetSource`: everything the console reads from a fleet and asks of it, whatever runs it.

One implementation per way a console can stand to a fleet (harlequin's adapter shape: the
console holds one and never asks which it is):

- `OwnEngineSource` (own.py): no engine holds the database's lease, so the console runs one
  in-process (the same `engine_runtime` the headless mode uses);
- `AttachedSource` (attached.py): a headless engine (`vastui --engine-only`) holds the lease;
  the console reads its state from the store and sends commands through the store's table;
- `ReadOnlySource` (readonly.py): `--read-only` and no engine: the store as it is, no actions;
- `FixedSource` (vastsim/console_fixtures.py): fixed data for snapshots and screenshots.

`choose_source` (choose.py) picks the first three by the database's lease.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Protocol

from vastui.console.snapshot import Snapshot
from vastui.domain.worker import InstanceRecord
from vastui.engine.ranking import RankedOffer


@dataclass(frozen=True)
class Badge:
    """How the summary strip names the console's stand to the fleet."""

    text: str
    style: str


@dataclass(frozen=True)
class Freshness:
    """How old the source's news of the fleet is, for the strip (warned above `warn_s`)."""

    label: str
    age_s: float
    warn_s: float


class FleetSource(Protocol):
    """What the console reads from the fleet and asks of it."""

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        """Open what it needs (the store, an engine, SSH); raises with a reason it cannot."""

    async def close(self) -> None:
        """Stop what `start` started; safe after a failed or no start."""

    # -- what the console says about it ---------------------------------------------------

    def badge(self) -> Badge | None:
        """The strip's badge for this source now (None: nothing to say)."""

    def started_notice(self) -> tuple[str, str] | None:
        """What to tell the operator once it has started, as (title, text); None: nothing.
        Shown as plain text, never markup."""

    @property
    def detached_reason(self) -> str | None:
        """Why nothing would carry out a command now (its engine is gone), else None."""

    def freshness(self, snapshot: Snapshot) -> Freshness | None:
        """How old its news of the fleet is (None: unknown)."""

    # -- reads ----------------------------------------------------------------------------

    async def snapshot(self) -> Snapshot:
        """Everything the panes show, read in one go."""

    async def offers(self, force: bool = False) -> list[RankedOffer]:
        """Ranked offers; the same list object while nothing changed (no re-render)."""

    @property
    def view_filter(self) -> str:
        """The Vast filter the offers shown are searched with."""

    def set_filter(self, text: str) -> None:
        """This view's Vast filter (validated by the caller): it never changes what the
        engine rents."""

    def now(self) -> float:
        """The fleet's one clock (simulated time in the demo): every age is measured on it."""

    def ssh_command(self, rec: InstanceRecord) -> str | None:
        """What an operator types to reach the worker (None: no endpoint)."""

    async def cuzk_status(self, rec: InstanceRecord) -> dict[str, Any]:
        """The worker's cuzk daemon status (raises when it is not reachable)."""

    def stream_logs(
        self, rec: InstanceRecord, source: str, tail: int = 500
    ) -> AsyncIterator[list[str]]:
        """Batches of sanitised lines of one worker log source, following."""

    def new_engine_log_lines(self) -> list[str]:
        """The engine's log lines since the last call (sanitised)."""

    def rewind_engine_log(self) -> None:
        """The next `new_engine_log_lines` starts from what is still kept."""

    # -- actions --------------------------------------------------------------------------

    async def submit(self, kind: str, **args: Any) -> int:
        """Queue a command for the engine; its id. Raises when nothing would carry it out."""

    async def wait_command(self, command_id: int, timeout: float = 60.0) -> tuple[bool, str]:
        """(ok, result) once the engine has run it; (False, why) after the timeout."""

    def wake(self) -> None:
        """Ask the engine for a step now (where the console runs it)."""

    # -- quitting -------------------------------------------------------------------------

    def own_live_instances(self, snapshot: Snapshot) -> list[InstanceRecord]:
        """Live instances only this console's engine supervises (quitting leaves them)."""

    def can_hand_over(self) -> bool:
        """Whether a headless engine can take this console's fleet on when it quits."""
