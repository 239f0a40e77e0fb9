"""Which source a console started on a database gets: by the database's lease, read once."""

from __future__ import annotations

from vastui.backend import Options
from vastui.console.sources.attached import AttachedSource
from vastui.console.sources.own import OwnEngineSource
from vastui.console.sources.protocol import FleetSource
from vastui.console.sources.readonly import ReadOnlySource
from vastui.domain.engine_state import Lease
from vastui.engine.runtime import RunOptions
from vastui.store import Store, StoreNotCurrent


async def choose_source(
    opts: Options, *, read_only: bool = False, run: RunOptions | None = None
) -> FleetSource:
    """Attached when an engine holds the lease; else read-only (a read-only console never runs
    an engine: engines rent and destroy), else the console's own engine. An engine that takes
    the lease between this read and the own engine's start makes that start fail (the lease
    is held: one line); one that lets it go leaves the attached console DETACHED at once."""
    holder = await _lease_holder(opts, read_only)
    if holder is not None:
        return AttachedSource(opts, holder, read_only=read_only)
    if read_only:
        return ReadOnlySource(opts)
    return OwnEngineSource(opts, run)


async def _lease_holder(opts: Options, read_only: bool) -> Lease | None:
    # Opened as a reader: choosing never migrates the database (an engine of ours would).
    try:
        store = await Store.open(opts.db_path, migrate=False)
    except StoreNotCurrent as exc:
        if read_only and not exc.absent:
            raise  # older than this code: one line, nothing migrated
        return None  # no database yet, or one our own engine will migrate
    async with store:
        return await store.lease.holder()
