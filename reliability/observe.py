"""The observer: the cloud through the official vastai CLI, the store read read-only.

Neither view goes through vastui's own client or store code: a bug there must not hide itself.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from reliability.invariants import (
    StoreBan,
    StoreEvent,
    StoreForeign,
    StoreInstance,
    StoreIntent,
    StoreStrike,
    StoreView,
    VastRow,
    json_detail,
    vast_rows,
)

CLI_TIMEOUT = 30.0  # seconds for one vastai CLI call


@dataclass(frozen=True)
class Cli:
    """The official vastai CLI against the served cloud (vastai/cli/main.py: --url, --api-key,
    --raw, --retry are global options, given before the verb)."""

    vastai: Path
    url: str
    api_key: str
    env: dict[str, str]

    def run(self, *args: str, timeout: float = CLI_TIMEOUT) -> Any | None:
        """One verb with ``--raw``; its JSON, or None if it failed (an error, a fault, junk)."""
        cmd = [str(self.vastai), "--url", self.url, "--api-key", self.api_key, "--retry", "2"]
        cmd += ["--raw", *args]
        try:
            done = subprocess.run(
                cmd, capture_output=True, text=True, timeout=timeout, env=self.env, check=False
            )
        except subprocess.TimeoutExpired:
            return None
        if done.returncode != 0:
            return None
        try:
            return json.loads(done.stdout)
        except ValueError:
            return None

    def instances(self) -> list[VastRow] | None:
        raw = self.run("show", "instances")
        if raw is None:
            return None
        try:
            return vast_rows(raw)
        except ValueError:
            return None

    def offers(self, query: str) -> list[dict[str, Any]] | None:
        raw = self.run("search", "offers", query)
        if isinstance(raw, dict):
            raw = raw.get("offers")
        return [o for o in raw if isinstance(o, dict)] if isinstance(raw, list) else None

    def credit(self) -> float | None:
        """The account's credit (`vastai show user --raw`): a fleet below target with no
        credit left is the account's state, not the engine's doing."""
        raw = self.run("show", "user")
        value = raw.get("credit") if isinstance(raw, dict) else None
        return float(value) if isinstance(value, int | float) else None

    def create(self, offer_id: int, label: str) -> int | None:
        raw = self.run(
            "create", "instance", str(offer_id), "--image", "ubuntu:22.04", "--disk", "10",
            "--label", label, "--cancel-unavail",
        )  # fmt: skip
        if isinstance(raw, dict) and isinstance(raw.get("new_contract"), int):
            return int(raw["new_contract"])
        return None


def _read_only(db: Path) -> sqlite3.Connection | None:
    """The store opened read-only by SQLite (never by a descriptor of ours: see config.py's
    tighten_private), or None when it is not there yet or busy."""
    if not db.exists():
        return None
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5.0)
    except sqlite3.Error:
        return None
    conn.row_factory = sqlite3.Row
    return conn


def create_foreign(cli: Cli, label: str, attempts: int = 12) -> frozenset[int]:
    """An instance that is not vastui's, rented with the official CLI; the ids under ``label``.

    Under faults a create may be performed while its answer is lost: the label is looked up
    before each new attempt, and every instance under it counts as foreign.
    """
    for _ in range(attempts):
        rows = cli.instances()
        if rows is not None:
            found = frozenset(r.id for r in rows if r.label == label)
            if found:
                return found
        offers = cli.offers("rentable=true") or []
        # The cheapest offer: it pays rent all along from the account the engine rents with,
        # and the served cloud's account holds $100 of credit (vastsim/cloud.py); the dearest
        # ran it dry in 5 simulated hours. The engine loses one machine of its market.
        offers.sort(key=lambda o: float(o.get("dph_total") or 0))
        if offers and isinstance(offers[0].get("id"), int):
            cli.create(int(offers[0]["id"]), label)
    rows = cli.instances() or []
    return frozenset(r.id for r in rows if r.label == label)


# -- the store ------------------------------------------------------------------------------

STORE_EVENT_KINDS = (
    "destroy", "kill", "ban", "unban", "adopt", "rent", "foreign", "fleet_failure",
)  # fmt: skip


class StoreUnreadable(Exception):
    """The database cannot be read at all (not merely busy): an integrity finding."""


def read_store(db: Path, foreign: Sequence[int] = (), *, check: bool = False) -> StoreView | None:
    """One consistent read of the engine's database (read-only, one transaction).

    None: not there yet, or busy. ``check`` adds ``PRAGMA integrity_check``.
    """
    conn = _read_only(db)
    if conn is None:
        return None
    try:
        conn.execute("BEGIN")
        view = _read(conn, foreign, check)
        conn.execute("COMMIT")
        return view
    except sqlite3.OperationalError as exc:
        text = str(exc)
        if "no such table" in text or "locked" in text or "busy" in text:
            return None
        raise StoreUnreadable(text) from exc
    except sqlite3.DatabaseError as exc:
        raise StoreUnreadable(str(exc)) from exc
    finally:
        conn.close()


def _read(conn: sqlite3.Connection, foreign: Sequence[int], check: bool) -> StoreView:
    instances = tuple(_instance(r) for r in conn.execute("SELECT * FROM instances"))
    marks = ",".join("?" * len(STORE_EVENT_KINDS))
    query = f"SELECT * FROM events WHERE kind IN ({marks})"
    params: list[Any] = list(STORE_EVENT_KINDS)
    if foreign:
        query += f" OR instance_id IN ({','.join('?' * len(foreign))})"
        params += list(foreign)
    query += " ORDER BY id"  # the order the engine wrote them (``vastui resume`` stamps wall time)
    events = tuple(
        StoreEvent(
            r["kind"],
            r["instance_id"],
            r["machine_id"],
            r["reason"] or "",
            json_detail(r["detail"]),
            _col(r, "ts"),
        )
        for r in conn.execute(query, params)
    )
    intents = tuple(
        StoreIntent(
            r["id"],
            r["kind"],
            r["status"],
            r["label"],
            r["instance_id"],
            r["machine_id"],
            json_detail(r["detail"]),
            _col(r, "created_at"),
            r["reason"] or "",
        )
        for r in conn.execute("SELECT * FROM intents")
    )
    bans = tuple(
        StoreBan(r["machine_id"], r["reason"] or "", r["source"], float(r["created_at"]))
        for r in conn.execute("SELECT * FROM bad_machines")
    )
    banned = frozenset(b.machine_id for b in bans)
    strike_rows = tuple(
        StoreStrike(r["machine_id"], r["instance_id"], r["kind"], r["reason"] or "", float(r["ts"]))
        for r in conn.execute("SELECT * FROM strikes")
    )
    strikes: dict[int, int] = {}
    for strike in strike_rows:
        strikes[strike.machine_id] = strikes.get(strike.machine_id, 0) + 1
    result = ("ok",)
    if check:
        result = tuple(str(r[0]) for r in conn.execute("PRAGMA integrity_check"))
    fleet_id, pause, foreign_rows = _ownership(conn)
    return StoreView(
        instances, events, intents, banned, strikes, result, strike_rows, bans,
        fleet_id=fleet_id, foreign_rows=foreign_rows, pause=pause,
    )  # fmt: skip


def _ownership(
    conn: sqlite3.Connection,
) -> tuple[str | None, dict[str, Any] | None, tuple[StoreForeign, ...]]:
    """The database's fleet identity, its provisioning pause (``meta``) and the other
    controllers' instances it last listed (``foreign_instances``): none in a schema before 8."""
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    fleet_id = pause = None
    if "meta" in tables:
        meta = {str(r[0]): str(r[1]) for r in conn.execute("SELECT key, value FROM meta")}
        fleet_id = meta.get("fleet_id")
        pause = json_detail(meta["fleet_failure"]) if "fleet_failure" in meta else None
    rows: tuple[StoreForeign, ...] = ()
    if "foreign_instances" in tables:
        rows = tuple(
            StoreForeign(
                r["vast_id"], r["label"], r["owner"], r["first_seen_at"], r["last_seen_at"]
            )
            for r in conn.execute("SELECT * FROM foreign_instances ORDER BY vast_id")
        )
    return fleet_id, pause, rows


def _col(r: sqlite3.Row, name: str) -> Any:
    """A column that older or newer schemas may lack: None then."""
    return r[name] if name in r.keys() else None  # noqa: SIM118 (Row: `in` tests values)


def _instance(r: sqlite3.Row) -> StoreInstance:
    try:
        lines = json.loads(r["error_lines"]) if r["error_lines"] else []
    except ValueError:
        lines = []
    return StoreInstance(
        vast_id=r["vast_id"],
        label=r["label"],
        state=r["state"],
        machine_id=r["machine_id"],
        kill_kind=r["kill_kind"],
        kill_reason=r["kill_reason"],
        bench_outcome=r["bench_outcome"],
        error_lines=tuple(str(x) for x in lines) if isinstance(lines, list) else (),
        source=r["source"],
        killed_at=_col(r, "killed_at"),
        last_seen_at=_col(r, "last_seen_at"),
        proving_at=_col(r, "proving_at"),
        prod_checked_at=_col(r, "prod_checked_at"),
        drain_deadline=_col(r, "drain_deadline"),
    )


def engine_status(db: Path) -> dict[str, Any] | None:
    """The engine's published status row (reason_kind, workers, target), or None."""
    conn = _read_only(db)
    if conn is None:
        return None
    try:
        row = conn.execute("SELECT * FROM engine_status WHERE id = 1").fetchone()
        return dict(row) if row else None
    except sqlite3.Error:
        return None
    finally:
        conn.close()


def fleet_id(db: Path) -> str | None:
    """The database's fleet identity (``meta.fleet_id``), or None."""
    conn = _read_only(db)
    if conn is None:
        return None
    try:
        row = conn.execute("SELECT value FROM meta WHERE key = 'fleet_id'").fetchone()
        return str(row[0]) if row else None
    except sqlite3.Error:
        return None
    finally:
        conn.close()


def lease_pid(db: Path) -> int | None:
    """The pid holding the engine lease, or None."""
    if not db.exists():
        return None
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5.0)
    except sqlite3.Error:
        return None
    try:
        row = conn.execute("SELECT pid FROM lease").fetchone()
        return int(row[0]) if row else None
    except sqlite3.Error:
        return None
    finally:
        conn.close()


def sim_counters(url: str) -> dict[str, Any] | None:
    """The served cloud's own counters (``GET /_sim/stats``, no key: vastsim/app.py): faults
    injected by ``endpoint:kind`` and by client, instances created and destroyed, creates per
    label. None if it cannot be read."""
    try:
        resp = httpx.get(url.rstrip("/") + "/_sim/stats", timeout=5.0)
    except httpx.HTTPError:
        return None
    if resp.status_code != 200:
        return None
    try:
        data = resp.json()
    except ValueError:
        return None
    return data if isinstance(data, dict) else None
