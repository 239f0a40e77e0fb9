"""The instances pane: every worker vastui rented, its stage, rates, cost and spend.

Its keys: details (enter), destroy, copy the ssh command, ignore the machine, logs, sort.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from rich.text import Text
from textual import on
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.widgets import DataTable

from vastui.console.cells import age, fmt, money, t
from vastui.console.dialogs import ConfirmScreen
from vastui.console.messages import CopyText, SendCommand
from vastui.console.panes.base import FIND_BINDING, SORT_BINDINGS, Column, Row, TablePane
from vastui.console.panes.offers import ask_ignore
from vastui.domain.worker import ForeignInstance, InstanceRecord
from vastui.engine.cluster import cluster_held
from vastui.engine.policy import LIVE_STAGES
from vastui.engine.spend import SPENT_MEANS, worker_cost_per_proof
from vastui.sanitize import sanitize_line

STATE_STYLE = {
    "proving": "bold green",
    "benchmark": "yellow",
    "paramfetch": "cyan",
    "setup": "cyan",
    "loading": "blue",
    "killed": "red",
    "legacy": "dim",
}
STAGES = LIVE_STAGES
MAX_ROWS = 500


class InstancesPane(TablePane):
    PANE = "instances"
    DEFAULT_SORT = None  # live first, newest first
    COLUMNS: ClassVar[tuple[Column, ...]] = (
        Column("id", "Id", 8, "Vast instance id"),
        Column("stage", "State / progress", 32,
               "stage, with loading → setup → paramfetch → benchmark → proving as ■ (⚠ tunnel "
               "down: it waits for the controller's tunnel); for a destroyed worker ✗ the kill "
               "kind and stage", grow=16),
        Column("gpu", "GPU", 16, "GPU model and count"),
        Column("bench", "Bench", 5, "proofs/h its benchmark measured"),
        Column("meas", "Meas", 5, "proofs/h measured in production from cuzk's counters "
               "(red: under its min_rate)"),
        Column("proofs", "Proofs", 7, "proofs completed in production (/n✗ failed)"),
        Column("tasks", "Tasks", 5, "curio's tasks its machine holds in the cluster, as the "
               "engine last read it (- not read); ⤓ marks a drain; once destroyed, ↩n: n freed "
               "(red: still held, the release owed)"),
        Column("dph", "$/h", 6, "price per hour"),
        Column("cpp", "$/proof", 8, "$/h ÷ measured proofs/h; ~ marks the benchmark's estimate"),
        Column("spent", "Spent", 7, f"dollars spent so far: {SPENT_MEANS}"),
        Column("up", "Uptime", 6, "time since it was rented (to its destroy, once destroyed)"),
        Column("machine", "Machine", 7, "machine_id: the physical machine (what a ban is of)"),
        Column("label", "Label", 24, "vastui-<fleet>-<id>: how vastui knows its own instances",
               grow=10),
        Column("image", "Image", 24, "the image it runs; 'old' if not the configured one",
               grow=24),
    )  # fmt: skip
    GROW = ("label", "stage", "image")  # the label whole first: it is how vastui knows its own
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("x", "destroy", "Destroy", id="instances-destroy",
                tooltip="Destroy the selected instance"),
        Binding("c", "copy_ssh", "Copy ssh", id="instances-ssh",
                tooltip="Copy the ssh command (with vastui's key)"),
        Binding("i", "ignore", "Ignore", id="ignore",
                tooltip="Put the instance's machine on the bad list"),
        Binding("l", "logs", "Logs", id="instances-logs", tooltip="Stream the instance's logs"),
        FIND_BINDING,
        *SORT_BINDINGS,
    ]  # fmt: skip

    class DetailAsked(Message):
        """The operator opened an instance's details."""

        def __init__(self, record: InstanceRecord) -> None:
            super().__init__()
            self.record = record

    class LogsAsked(Message):
        """The operator asked for an instance's logs."""

        def __init__(self, record: InstanceRecord) -> None:
            super().__init__()
            self.record = record

    SORT_VALUES: ClassVar[dict[str, Callable[[Any], Any]]] = {
        "id": lambda r: r.vast_id,
        "stage": lambda r: (r.killed, STAGES.index(r.state) if r.state in STAGES else -1),
        "gpu": lambda r: r.gpu_name,
        "bench": lambda r: r.bench_rate,
        "meas": lambda r: r.prod_rate,
        "proofs": lambda r: r.prod_completed,
        "tasks": lambda r: cluster_held(r),
        "dph": lambda r: r.dph_total,
        "cpp": lambda r: worker_cost_per_proof(r)[0],
        "up": lambda r: r.created_at,
        "machine": lambda r: r.machine_id,
        "label": lambda r: r.label,
        "image": lambda r: r.image,
    }

    def sort_getter(self, column: str) -> Callable[[Any], Any]:
        if column == "spent":
            spent = self.host.spent  # needs the clock
            return lambda rec: spent(rec) if isinstance(rec, InstanceRecord) else None
        ours = super().sort_getter(column)
        theirs = FOREIGN_SORT.get(column, lambda _f: None)
        return lambda rec: theirs(rec) if isinstance(rec, ForeignInstance) else ours(rec)

    def build_rows(self) -> list[Row]:
        recs = sorted(self.host.snapshot.instances, key=lambda r: (r.killed, -(r.created_at or 0)))
        rows: list[Row] = [(str(rec.vast_id), None, rec) for rec in recs[:MAX_ROWS]]
        # Another controller's, apart at the end: shown so that nobody wonders whose they are.
        rows += [(f"foreign-{f.vast_id}", None, f) for f in self.host.snapshot.foreign[:MAX_ROWS]]
        return rows

    def rows_version(self) -> Any:
        return self.host.clock()  # uptime and spend move with it

    def title(self) -> str:
        """The tab's label: its rows, as every table's, and how many of them are live (not
        destroyed, ours); short enough for the tab bar at 80 columns."""
        snap = self.host.snapshot
        rows = min(len(snap.instances), MAX_ROWS) + min(len(snap.foreign), MAX_ROWS)
        live = sum(1 for r in snap.instances if not r.killed)
        return f"2 Instances ({rows}{f', {live} live' if live != rows else ''})"

    def row_cells(self, record: Any) -> list[Text]:
        if isinstance(record, ForeignInstance):
            return foreign_cells(record, self.host.clock())
        rec: InstanceRecord = record
        host = self.host
        image = Text(sanitize_line(_short_image(rec.image), 60))
        if rec.image and rec.image != host.config.fleet.image:
            image.append(" old", style="bold yellow")
        cpp, estimated = worker_cost_per_proof(rec)
        return [
            t(rec.vast_id),
            stage_text(rec, host.clock(), history=host.snapshot.history is not None),
            t(f"{rec.gpu_name or '?'} x{rec.num_gpus or 1}"),
            t(fmt(rec.bench_rate, ".1f")),
            _measured_rate(rec),
            _proofs(rec),
            _tasks(rec),
            t(fmt(rec.dph_total, ".3f")),
            t("-", "dim") if cpp is None else
            t(f"~{cpp:.4f}", "dim") if estimated else t(f"{cpp:.4f}", "bold"),
            t(money(host.spent(rec))),
            t(_uptime(rec, host.clock())),
            t(rec.machine_id, "dim"),
            t(rec.label),
            image,
        ]  # fmt: skip

    def selected_instance(self) -> InstanceRecord | None:
        rec = self.selected()
        return rec if isinstance(rec, InstanceRecord) else None

    # -- actions ---------------------------------------------------------------------------

    @on(DataTable.RowSelected)
    def _row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        rec = self.selected_instance()
        if rec is None:
            self._not_ours()
        else:
            self.post_message(self.DetailAsked(rec))

    def _not_ours(self) -> bool:
        """Say so when the selection is another controller's: no action of ours touches it."""
        other = self.selected()
        if isinstance(other, ForeignInstance):
            self.notify(
                f"instance {other.vast_id} is another controller's (fleet "
                f"{sanitize_line(other.owner, 60)}): this database never rented it, so vastui "
                "neither destroys nor follows it",
                severity="warning",
                timeout=6,
            )
            return True
        return False

    def action_destroy(self) -> None:
        host = self.host
        rec = self.selected_instance()
        if rec is None:
            self._not_ours()
            return
        if rec.killed:
            # Say why nothing happens rather than doing nothing silently.
            self.notify(
                f"instance {rec.vast_id} is already destroyed "
                f"({rec.kill_kind or 'gone'}: {rec.kill_reason or 'no reason recorded'})",
                severity="warning",
                timeout=5,
            )
            return
        if not host.guard():
            return
        body = Text(
            f"{rec.label}\n{rec.gpu_name} x{rec.num_gpus} on machine {rec.machine_id}, "
            f"${rec.dph_total or 0:.3f}/h, state {rec.state}"
        )

        def done(ok: bool | None) -> None:
            if ok:
                args: dict[str, int | str] = {
                    "instance_id": rec.vast_id, "reason": "manually destroyed from the console",
                }  # fmt: skip
                self.post_message(SendCommand("destroy", f"destroy {rec.vast_id}", args))

        host.ask(ConfirmScreen(f"Destroy instance {rec.vast_id}?", body, "Destroy"), done)

    def action_copy_ssh(self) -> None:
        rec = self.selected_instance()
        command = None if rec is None else self.host.ssh_command(rec)
        if command is None:
            self.notify("no ssh endpoint for this instance (yet)", severity="warning")
            return
        self.post_message(CopyText(command))

    def action_ignore(self) -> None:
        rec = self.selected_instance()
        if rec is None and self._not_ours():
            return
        if rec is None or rec.machine_id is None or not self.host.guard():
            return
        ask_ignore(self, rec.machine_id, rec.gpu_name, rec.geolocation)

    def action_logs(self) -> None:
        rec = self.selected_instance()
        if rec is None:
            self._not_ours()
        else:
            self.post_message(self.LogsAsked(rec))


def stage_text(rec: InstanceRecord, now: float | None = None, *, history: bool = False) -> Text:
    """The state with a five-step progress bar; for the dead, what killed them; stopped in the
    warm pool (how long, a start queued); for a bid, whether a higher bid has it stopped (and
    how long) and how often that happened. ``history``: the fleet is a finished run's, and a
    live-looking state is only what its engine last saw."""
    if rec.killed:
        return Text(sanitize_line(f"✗ {rec.kill_kind} in {rec.failed_stage}", 60), style="red")
    if history:
        return Text(f"{rec.phase} when its run ended", style="dim")
    done = STAGES.index(rec.state) if rec.state in STAGES else 0
    text = Text()
    for i, _stage in enumerate(STAGES):
        text.append("■" if i <= done else "□", style="green" if i < done else "yellow")
    text.append(f" {rec.state}", style=STATE_STYLE.get(rec.state, ""))
    if rec.tunnel_down_since is not None:  # waiting for the controller's tunnel to prove
        text.append(" ⚠ tunnel down", style="bold yellow")
    if rec.drain_started_at is not None:  # cordoned in curio's cluster: destroyed once drained
        since = "" if now is None else f" {age(max(0.0, now - rec.drain_started_at))}"
        text.append(f" ⤓ draining{since}", style="bold magenta")
    if rec.pooled_since is not None:  # stopped on purpose, kept warm for the next scale-up
        since = "" if now is None else f" {age(max(0.0, now - rec.pooled_since))}"
        starting = ", start queued" if rec.pool_start_at is not None else ""
        text.append(f" ⏸ warm pool{since}{starting}", style="bold cyan")
    elif rec.outbid_since is not None:
        since = "" if now is None else f" {age(max(0.0, now - rec.outbid_since))}"
        text.append(f" ⏸ stopped: outbid{since}", style="bold yellow")
    elif rec.is_bid:
        text.append(f" bid ⇅{rec.interruptions}" if rec.interruptions else " bid", style="dim")
    return text


def _measured_rate(rec: InstanceRecord) -> Text:
    """Proofs/h measured in production (cuzk's counters), once there is a measurement."""
    if rec.prod_rate is None:
        return t("-", "dim")
    low = rec.min_rate is not None and rec.prod_rate < rec.min_rate
    return t(f"{rec.prod_rate:.1f}", "bold red" if low else "bold")


def _proofs(rec: InstanceRecord) -> Text:
    """Proofs completed (and failed) in production since the benchmark."""
    if rec.prod_completed is None:
        return t("-", "dim")
    text = Text(str(rec.prod_completed))
    if rec.prod_failed:
        text.append(f"/{rec.prod_failed}✗", style="red")
    return text


def _tasks(rec: InstanceRecord) -> Text:
    """The tasks its curio machine holds (the engine's last reading of the cluster); once
    destroyed, what became of them: freed (↩ and how many), or still held (red: the release
    is owed)."""
    held = cluster_held(rec)
    if rec.killed and rec.released_at is not None:
        return t(f"↩{rec.released_tasks or 0}", "dim")
    if held is None:
        return t("-", "dim")
    if rec.killed:
        return Text(str(held), style="bold red" if held else "dim")
    text = Text(str(held), style="bold" if held else "")
    if rec.drain_started_at is not None:
        text.append(" ⤓", style="bold magenta")
    return text


def _uptime(rec: InstanceRecord, now: float) -> str:
    if rec.created_at is None:
        return "-"
    end = rec.killed_at if rec.killed and rec.killed_at else now
    return age(end - rec.created_at)


def _short_image(image: str | None) -> str:
    return "-" if not image else image.rsplit("/", 1)[-1]


FOREIGN_SORT: dict[str, Callable[[ForeignInstance], Any]] = {
    "id": lambda f: f.vast_id,
    "stage": lambda f: (True, -2),  # after every live one of ours
    "gpu": lambda f: f.gpu_name,
    "dph": lambda f: f.dph_total,
    "up": lambda f: f.first_seen_at,
    "label": lambda f: f.label,
}


def foreign_cells(f: ForeignInstance, now: float) -> list[Text]:
    """Another controller's instance: whose, what, and nothing vastui would act on."""
    return [
        t(f.vast_id),
        t(f"⊘ other controller {sanitize_line(f.owner, 40)}", "magenta"),
        t(f"{sanitize_line(f.gpu_name or '?', 30)} x{f.num_gpus or 1}"),
        t("-", "dim"),
        t("-", "dim"),
        t("-", "dim"),
        t("-", "dim"),
        t(fmt(f.dph_total, ".3f")),
        t("-", "dim"),
        t("-", "dim"),
        t(age(max(0.0, now - f.first_seen_at)) if f.first_seen_at else "-", "dim"),
        t(f.machine_id, "dim"),
        t(sanitize_line(f.label, 60), "dim"),
        t("-", "dim"),
    ]
