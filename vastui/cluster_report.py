"""`vastui cluster`: this fleet's machines in curio's cluster, and the cluster's work.

One row per curio machine of this fleet: each worker vastui knows (alive, or destroyed with
its tasks not yet released) that has a row of its own in ``harmony_machines``, and any row
whose node name is this database's (``vastui-<fleet>.<fleet id>-r<id>``, or the older
``vastui-<fleet>-r<id>``) but no record of ours matches (an orphan: a release never done).
Then the cluster's totals over the production window. It only reads: the store, and curio's
database (vastui/engine/cluster.py).

The same report, rows and totals, is made two ways: ``gather`` reads curio's database now (the
command line), ``published`` from what the engine last read and published (each worker's
reading in its record, the totals and the orphans in the engine's status: the console's
cluster pane, in every mode, with no connection of its own to curio's database).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from vastui.config import Config
from vastui.domain.timefmt import iso_utc
from vastui.domain.worker import InstanceRecord
from vastui.engine import identity
from vastui.engine.cluster import (
    LOOKS_DEAD_S,
    ClusterReader,
    ClusterView,
    Totals,
    orphans,
    worker_of,
)
from vastui.engine.drain import release_owed
from vastui.engine.labels import fleet_id_of, fleet_of
from vastui.numbers import parse_count, parse_number
from vastui.sanitize import sanitize_line
from vastui.status import window_counts
from vastui.store import Store

COLUMNS = [
    "curio_machine_id", "host_and_port", "name", "instance", "state", "last_contact", "cordoned",
    "tasks_held", "psprove_done", "psprove_failed",
]  # fmt: skip
HEADERS = {
    "curio_machine_id": "CURIO ID",
    "host_and_port": "HOST:PORT",
    "name": "NODE",
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
    fleet = identity.node_prefixes(config.fleet.name, await store.meta.fleet_id())
    left = orphans(await reader.named_rows(*fleet), view)
    out = report(records, view, [_orphan(r.to_json(), now) for r in left], now)
    out["reader"] = {"state": "ok", "address": reader.address}
    return out


def report(
    records: list[InstanceRecord], view: ClusterView, orphan_rows: list[dict[str, Any]], now: float
) -> dict[str, Any]:
    by_id = {r.vast_id: r for r in records}
    rows: list[dict[str, Any]] = []
    for vast_id, state in sorted(view.workers.items()):
        if state.machine_id is None:
            continue
        rows.append(_worker_row(by_id.get(vast_id), vast_id, state.to_json(), now))
    return {
        "read_at": iso_utc(view.read_at),
        "window_min": round(view.window_s / 60.0, 1),
        "machines": rows + orphan_rows,
        "totals": view.totals.to_json(),
    }


def published(
    records: list[InstanceRecord], cluster: Mapping[str, Any] | None, now: float
) -> dict[str, Any]:
    """The report from what the engine last read and published: each worker's reading as its
    record keeps it (``cluster_state``), the totals and the orphans from the engine's status
    (``cluster``, vastui/engine/engine.py ``cluster_summary``); ages of contact at the reading,
    the reading's own at ``now`` (``read_age_s``). ``reader`` says whether and how
    the cluster is read: ``none`` (no engine has said), ``off`` (not read), ``error`` (the
    rows and totals are the last good reading's), ``ok``."""
    if not cluster:
        reader: dict[str, Any] = {"state": "none"}
    else:
        reader = {
            "state": str(cluster.get("state") or "none"),
            "address": _text(cluster.get("address"), 80),
            "error": _text(cluster.get("error"), 300),
            "error_since": iso_utc(parse_number(cluster.get("error_since"))),
        }
    cluster = cluster or {}
    read_at = parse_number(cluster.get("read_at"))
    window = parse_number(cluster.get("window_s"))
    rows = []
    if read_at is not None:
        # Contact ages as at the reading, as `gather` measures them: what the cluster said
        # then (a demo's engine reads every few simulated minutes; its age is the header's).
        for rec in fleet_records(records):
            state = _reading(rec.cluster_state)
            if state is not None:
                rows.append(_worker_row(rec, rec.vast_id, state, read_at))
        listed = cluster.get("orphans")
        for item in listed if isinstance(listed, list) else []:
            if isinstance(item, dict) and _machine_id(item.get("machine_id")) is not None:
                rows.append(_orphan(item, read_at))
    return {
        "read_at": iso_utc(read_at),
        "read_age_s": _age(read_at, now),
        "window_min": None if window is None else round(window / 60.0, 1),
        "machines": rows,
        "totals": {k: cluster.get(k) for k in Totals().to_json()} if read_at is not None else {},
        "orphans_total": parse_count(cluster.get("orphans_total")),
        "reader": reader,
    }


def _worker_row(
    rec: InstanceRecord | None, vast_id: int, state: Mapping[str, Any], now: float
) -> dict[str, Any]:
    """A worker's row from its reading (``MachineState.to_json``, live or as its record keeps
    it)."""
    last_contact = parse_number(state.get("last_contact"))
    held = state.get("held_by_name")
    by_name = {
        sanitize_line(str(k), 40): n for k, v in (held.items() if isinstance(held, dict) else ())
        if (n := parse_count(v)) is not None
    }  # fmt: skip
    return {
        "curio_machine_id": _machine_id(state.get("machine_id")),
        "host_and_port": _text(state.get("host_and_port"), 60),
        "name": _node_name(rec),
        "instance": vast_id,
        "state": _state(rec),
        "last_contact": iso_utc(last_contact),
        "last_contact_age_s": _age(last_contact, now),
        "looks_dead": _looks_dead(last_contact, now),
        "cordoned": state.get("cordoned") is True,
        "tasks_held": sum(by_name.values()),
        "held_by_name": by_name,
        "psprove_done": parse_count(state.get("done")),
        "psprove_failed": parse_count(state.get("failed")),
        "last_error": _text(state.get("last_error"), 500),
    }


def _orphan(row: Mapping[str, Any], now: float) -> dict[str, Any]:
    """An orphan's row (``cluster.Row.to_json``, live or as the engine published it)."""
    last_contact = parse_number(row.get("last_contact"))
    return {
        "curio_machine_id": _machine_id(row.get("machine_id")),
        "host_and_port": _text(row.get("host_and_port"), 60),
        "name": _text(row.get("name"), 80),
        "instance": None,
        "state": "orphan",
        "last_contact": iso_utc(last_contact),
        "last_contact_age_s": _age(last_contact, now),
        "looks_dead": _looks_dead(last_contact, now),
        "cordoned": row.get("cordoned") is True,
        "tasks_held": None,
        "held_by_name": {},
        "psprove_done": None,
        "psprove_failed": None,
        "last_error": None,
    }


def _reading(text: str | None) -> dict[str, Any] | None:
    """A record's last reading of the cluster, when it names a row of its own."""
    if not text:
        return None
    try:
        state = json.loads(text)
    except ValueError:
        return None
    if not isinstance(state, dict) or _machine_id(state.get("machine_id")) is None:
        return None
    return state


def _machine_id(value: Any) -> int | None:
    """A curio machine id (``harmony_machines.id``): a positive integer, nothing else."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 2**63:
        return value
    return None


def _text(value: Any, limit: int) -> str | None:
    return sanitize_line(value, limit) if isinstance(value, str) and value else None


def _node_name(rec: InstanceRecord | None) -> str | None:
    """The node name the worker runs with (``curio run --name``), from its record."""
    fleet = fleet_of(rec.label) if rec is not None else None
    if rec is None or rec.runner_id is None or fleet is None:
        return None
    return identity.node_name(fleet, rec.runner_id, fleet_id_of(rec.label))


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


def _looks_dead(last_contact: float | None, now: float) -> bool:
    """No heartbeat for curio's own 10 minutes: the cluster takes it for dead (its cleanup
    frees its tasks and deletes its row, harmony/resources/resources.go:22)."""
    return last_contact is None or now - last_contact > LOOKS_DEAD_S


def render_totals(report: Mapping[str, Any]) -> str:
    """The totals in two lines (a figure the reading lacks reads ``?``)."""
    t = report["totals"]

    def v(key: str) -> Any:
        value = t.get(key)
        return "?" if value is None else value

    owner = t.get("request_owner")
    request = (
        f"bg:PShareRequest held by machine {owner} ({t.get('request_owner_addr') or '?'})"
        if owner is not None
        else (
            "bg:PShareRequest waiting for a machine" if t.get("request_task") else "no request task"
        )
    )
    window = report.get("window_min")
    return (
        f"cluster: {v('machines')} machines; PSProve {v('psprove_waiting')} waiting, "
        f"{v('psprove_claimed')} claimed; {request}\n"
        f"last {'?' if window is None else format(window, 'g')} min: {window_counts(t)}"
    )


__all__ = [
    "COLUMNS", "HEADERS", "fleet_records", "gather", "published", "render_totals", "report",
]  # fmt: skip
