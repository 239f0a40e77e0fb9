"""`vastui cluster`: this fleet's machines in curio's cluster, and the cluster's work.

One row per curio machine of this fleet: each worker vastui knows (alive, or destroyed with
its tasks not yet released) that has a row of its own in ``harmony_machines``, and any row
whose node name is this database's (``vastui-<fleet>.<fleet id>-r<id>``, or the older
``vastui-<fleet>-r<id>``) but no record of ours matches (an orphan: a release never done).
Then the cluster's totals over the production window. It only reads: the store, and curio's
database (vastui/engine/cluster.py).
"""

from __future__ import annotations

from typing import Any

from vastui.config import Config
from vastui.domain.timefmt import iso_utc
from vastui.domain.worker import InstanceRecord
from vastui.engine.cluster import ClusterReader, ClusterView, worker_of
from vastui.engine.drain import release_owed
from vastui.sanitize import sanitize_line
from vastui.status import window_counts
from vastui.store import Store

COLUMNS = [
    "curio_machine_id", "host_and_port", "instance", "state", "last_contact", "cordoned",
    "tasks_held", "psprove_done", "psprove_failed",
]  # fmt: skip
HEADERS = {
    "curio_machine_id": "CURIO ID",
    "host_and_port": "HOST:PORT",
    "last_contact": "LAST CONTACT",
    "tasks_held": "HELD",
    "psprove_done": "DONE",
    "psprove_failed": "FAILED",
}


def fleet_records(records: list[InstanceRecord]) -> list[InstanceRecord]:
    """The records that may have a curio machine: alive with an identity, or destroyed after
    proving with their release still owed."""
    return [
        r for r in records
        if r.source == "vastui" and r.runner_id is not None
        and (not r.killed or release_owed(r))
    ]  # fmt: skip


async def gather(store: Store, reader: ClusterReader, config: Config, now: float) -> dict[str, Any]:
    records = fleet_records(await store.instances.all(include_killed=True))
    workers = [w for r in records if (w := worker_of(r, config, now)) is not None]
    window = config.proving.window_min * 60.0
    view = await reader.read(workers, now, window, config.proving.market_deadline_min * 60.0)
    fleet_id = await store.meta.fleet_id()
    orphans = [
        *await reader.named_rows(f"vastui-{config.fleet.name}.{fleet_id}-r"),
        *await reader.named_rows(f"vastui-{config.fleet.name}-r"),  # named before fleet ids
    ]
    return report(records, view, orphans, now)


def report(
    records: list[InstanceRecord], view: ClusterView, orphans: list[Any], now: float
) -> dict[str, Any]:
    by_id = {r.vast_id: r for r in records}
    rows: list[dict[str, Any]] = []
    mine: set[int] = set()
    for vast_id, state in sorted(view.workers.items()):
        if state.machine_id is None:
            continue
        mine.add(state.machine_id)
        rec = by_id.get(vast_id)
        rows.append(
            {
                "curio_machine_id": state.machine_id,
                "host_and_port": state.host_and_port,
                "instance": vast_id,
                "state": _state(rec),
                "last_contact": iso_utc(state.last_contact),
                "last_contact_age_s": _age(state.last_contact, now),
                "cordoned": state.cordoned,
                "tasks_held": state.held,
                "held_by_name": dict(state.held_by_name),
                "psprove_done": state.done,
                "psprove_failed": state.failed,
                "last_error": state.last_error,
            }
        )
    for row in orphans:
        if row.machine_id in mine:
            continue
        rows.append(
            {
                "curio_machine_id": row.machine_id,
                "host_and_port": row.host_and_port,
                "instance": None,
                "state": "orphan",
                "last_contact": iso_utc(row.last_contact),
                "last_contact_age_s": _age(row.last_contact, now),
                "cordoned": row.cordoned,
                "tasks_held": None,
                "held_by_name": {},
                "psprove_done": None,
                "psprove_failed": None,
                "last_error": None,
                "name": sanitize_line(row.name, 80) if row.name else None,
            }
        )
    return {
        "read_at": iso_utc(view.read_at),
        "window_min": round(view.window_s / 60.0, 1),
        "machines": rows,
        "totals": view.totals.to_json(),
    }


def _state(rec: InstanceRecord | None) -> str:
    if rec is None:
        return "?"
    if rec.killed:
        return "destroyed, release owed"
    if rec.drain_started_at is not None:
        return "draining"
    return rec.phase  # a stopped worker (the warm pool, outbid) is not proving


def _age(ts: float | None, now: float) -> float | None:
    return None if ts is None else round(max(0.0, now - ts), 1)


def render_totals(report: dict[str, Any]) -> str:
    t = report["totals"]
    owner = t.get("request_owner")
    request = (
        f"bg:PShareRequest held by machine {owner} ({t.get('request_owner_addr') or '?'})"
        if owner is not None
        else (
            "bg:PShareRequest waiting for a machine" if t.get("request_task") else "no request task"
        )
    )
    return (
        f"cluster: {t['machines']} machines; PSProve {t['psprove_waiting']} waiting, "
        f"{t['psprove_claimed']} claimed; {request}\n"
        f"last {report['window_min']:g} min: {window_counts(t)}"
    )


__all__ = ["COLUMNS", "HEADERS", "fleet_records", "gather", "render_totals", "report"]
