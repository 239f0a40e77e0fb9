"""The cluster pane: this fleet's machines in curio's cluster, as the engine last read it.

One row per curio machine of this fleet (each worker with a row of its own, then the rows of
this fleet's node name that no record matches: orphans, a release never done) and the
cluster's totals above them: what `vastui cluster` prints, made from the engine's published
reading (the snapshot's ``cluster``, vastui/cluster_report.py ``published``), so it is the same
whether this console runs the engine, attaches to a headless one, or only reads the store.
Text from curio (node names, its errors) is untrusted: plain Text, never markup.

Its keys: details of the worker (enter), find, sort.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.widgets import DataTable, Static

from vastui.console.cells import age, t
from vastui.console.panes.base import FIND_BINDING, SORT_BINDINGS, Column, Row, TablePane
from vastui.console.panes.instances import InstancesPane
from vastui.sanitize import sanitize_line

if TYPE_CHECKING:
    from vastui.console.snapshot import Snapshot

STATE_STYLE = {
    "proving": "bold green",
    "draining": "bold magenta",
    "orphan": "bold yellow",
    "outbid": "yellow",
    "destroyed, release owed": "bold red",
}


def held_text(by_name: Mapping[str, Any]) -> str:
    """The tasks a machine holds, by name, most first: ``PSProve 2, bg:PShareRequest 1``."""
    items = sorted(by_name.items(), key=lambda kv: (-kv[1], kv[0]))
    return ", ".join(f"{name} {n}" for name, n in items if n)


class ClusterPane(TablePane):
    PANE = "cluster"
    DEFAULT_SORT = None  # this fleet's workers by instance, then the orphans
    GROW = ("held", "error", "name")
    COLUMNS: ClassVar[tuple[Column, ...]] = (
        Column("machine", "Curio id", 8, "the machine's id in curio's cluster (harmony_machines)"),
        Column("addr", "Host:port", 15, "its curio identity: the address it listens on, from "
               "its runner id (127.0.0.1:<listen_port_base + id> on the worker)"),
        Column("name", "Node", 24, "its node name (curio run --name): vastui-<fleet>.<fleet "
               "id>-r<runner id>", grow=8),
        Column("instance", "Instance", 8, "the Vast instance it runs on (- for an orphan)"),
        Column("state", "State", 10, "the worker's stage; draining (cordoned before a planned "
               "destroy), outbid (stopped by Vast), pooled (stopped in the warm pool), "
               "destroyed with its release owed; orphan: a row of this fleet's node name that "
               "no record matches (a release never done)", grow=12),
        Column("contact", "Contact", 7, "how old its last heartbeat in the cluster was at the "
               "reading (red: over curio's 10 minutes, when the cluster takes it for dead); "
               "the header says how old the reading is"),
        Column("cordoned", "Cordon", 6, "cordoned: it claims no new work (a drain)"),
        Column("held", "Tasks held", 12, "the tasks it holds now, by name", grow=20),
        Column("done", "Done", 4, "PSProve tasks it finished in the production window"),
        Column("failed", "Failed", 6, "PSProve tasks that failed on it in the window, as curio "
               "counts them"),
        Column("error", "Curio's last error", 20, "its latest failed PSProve's error, as curio "
               "recorded it", grow=60),
    )  # fmt: skip
    BINDINGS: ClassVar[list[BindingType]] = [FIND_BINDING, *SORT_BINDINGS]
    SORT_VALUES: ClassVar[dict[str, Callable[[Any], Any]]] = {
        "machine": lambda r: r.get("curio_machine_id"),
        "addr": lambda r: r.get("host_and_port"),
        "name": lambda r: r.get("name"),
        "instance": lambda r: r.get("instance"),
        "state": lambda r: r.get("state"),
        "contact": lambda r: r.get("last_contact_age_s"),
        "cordoned": lambda r: r.get("cordoned"),
        "held": lambda r: r.get("tasks_held"),
        "done": lambda r: r.get("psprove_done"),
        "failed": lambda r: r.get("psprove_failed"),
        "error": lambda r: r.get("last_error"),
    }

    def compose(self) -> ComposeResult:
        yield Static(id="cluster-header")
        yield from super().compose()

    def build_rows(self) -> list[Row]:
        rows: list[Row] = []
        for row in self.host.snapshot.cluster["machines"]:
            key = f"{row.get('instance') or 'orphan'}-{row.get('curio_machine_id')}"
            rows.append((key, row_cells(row), row))
        return rows

    def refill(self) -> None:
        super().refill()
        if self.is_mounted:
            self.query_one("#cluster-header", Static).update(header(self.host.snapshot))

    def title(self) -> str:
        return f"5 Cluster ({len(self.host.snapshot.cluster['machines'])})"

    @on(DataTable.RowSelected)
    def _row_selected(self, event: DataTable.RowSelected) -> None:
        """A worker's row opens its instance's details (an orphan's has none: says so)."""
        event.stop()
        row = self.selected()
        if not isinstance(row, dict):
            return
        vast_id = row.get("instance")
        rec = next((r for r in self.host.snapshot.instances if r.vast_id == vast_id), None)
        if rec is None:
            self.notify(
                f"curio machine {row.get('curio_machine_id')} is an orphan: a row of this "
                "fleet's name that no record matches, so no instance to show",
                timeout=5,
            )
            return
        self.post_message(InstancesPane.DetailAsked(rec))


def header(snap: Snapshot) -> Text:
    """Whether and how curio's cluster is read, then its totals (as `vastui cluster` says
    them); why not, when it is not."""
    report = snap.cluster
    reader = report["reader"]
    state = reader.get("state")
    text = Text()
    if snap.engine_status is None:
        text.append("curio's cluster: no engine has published a reading yet", style="dim")
        return text
    if state == "none":
        text.append(
            "curio's cluster is not read ([curio] read_cluster = false, or no [ssh] "
            "curio_db): no drain before a destroy, no release after",
            style="dim",
        )
        return text
    where = f" at {reader['address']}" if reader.get("address") else ""
    if state == "off":
        text.append(
            f"curio's cluster is not read: nothing answered{where} when the engine started "
            "(workers are judged by cuzk alone)",
            style="yellow",
        )
        return text
    if state == "error":
        since = f" since {reader['error_since']}" if reader.get("error_since") else ""
        text.append(f"curio's cluster cannot be read{since}: ", style="bold red")
        text.append(sanitize_line(str(reader.get("error") or "?"), 300))
        if report.get("read_at") is None:
            return text
        text.append(f"; as last read {age(report.get('read_age_s'))} ago\n", style="dim")
    elif report.get("read_at") is None:
        text.append(f"curio's cluster{where}: not read yet", style="dim")
        return text
    else:
        text.append(f"curio's cluster{where}, read {age(report.get('read_age_s'))} ago: ")
    machines = report["machines"]
    mine = sum(1 for r in machines if r.get("state") != "orphan")
    text.append(f"{mine} machine{'s' * (mine != 1)} of this fleet", style="bold")
    orphans = report.get("orphans_total") or 0
    if orphans:
        listed = len(machines) - mine
        more = f" (the first {listed} listed)" if listed < orphans else ""
        text.append(f", {orphans} orphan{'s' * (orphans != 1)}{more}", style="bold yellow")
    totals = snap.cluster_totals
    if totals is not None:
        text.append("\n" + totals)
    return text


def row_cells(row: Mapping[str, Any]) -> list[Text]:
    state = str(row.get("state") or "?")
    return [
        t(row.get("curio_machine_id")),
        t(row.get("host_and_port")),
        t(row.get("name"), "dim"),
        t(row.get("instance")),
        t(state, STATE_STYLE.get(state, "")),
        t(age(row.get("last_contact_age_s")), "bold red" if row.get("looks_dead") else ""),
        t("yes", "bold magenta") if row.get("cordoned") else t("-", "dim"),
        _held(row),
        t(row.get("psprove_done")),
        t(row.get("psprove_failed"), "bold red" if row.get("psprove_failed") else ""),
        t(row.get("last_error"), "red"),
    ]


def _held(row: Mapping[str, Any]) -> Text:
    """The tasks it holds by name; ``0`` when none, ``-`` when not read (an orphan)."""
    tasks = row.get("tasks_held")
    by_name = row.get("held_by_name")
    if tasks is None:
        return t(None)
    if not tasks or not isinstance(by_name, dict):
        return t(tasks, "dim" if not tasks else "")
    return t(held_text(by_name))
