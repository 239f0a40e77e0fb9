"""The instance detail view: metadata, spend, the failure diagnosis and live cuzk status.

It is live, as the original's panel was: the record is re-read from the app's latest snapshot
every second (stage, timestamps, diagnosis), and a proving worker's cuzk status is polled every
1.5 s while the view is open.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Label, Static

from vastui.console.cells import age, money, t
from vastui.engine import identity, policy
from vastui.sanitize import sanitize_line
from vastui.store import InstanceRecord, iso_utc
from vastui.store.common import json_dict

RECORD_EVERY = 1.0  # seconds between re-reads of the record
CUZK_EVERY = 1.5  # seconds between cuzk status polls (the original panel's cadence)


def _kv(rows: list[tuple[str, Any]]) -> Table:
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold", no_wrap=True)
    table.add_column()
    for key, value in rows:
        table.add_row(key, value if isinstance(value, Text) else t(value))
    return table


class DetailScreen(ModalScreen[None]):
    """Everything about one instance, kept current while open."""

    BINDINGS: ClassVar[list[Binding]] = [
        Binding("escape,q,enter", "close", "Close", id="detail-close"),
        Binding("r", "refresh_cuzk", "Refresh cuzk now", id="detail-cuzk"),
    ]

    def __init__(
        self,
        rec: InstanceRecord,
        *,
        current_image: str,
        latest: Callable[[int], InstanceRecord | None] | None = None,
        cuzk: Callable[[InstanceRecord], Awaitable[dict[str, Any]]] | None = None,
        now: Callable[[], float] | None = None,
        spend: Callable[[InstanceRecord], float | None] | None = None,
        ssh_command: Callable[[InstanceRecord], str | None] | None = None,
        cluster: Callable[[InstanceRecord], dict[str, Any] | None] | None = None,
        listen_port_base: int = identity.DEFAULT_PORT_BASE,
    ) -> None:
        super().__init__(classes="dialog-screen")
        self.rec = rec
        self.current_image = current_image
        self.latest = latest
        self.cuzk = cuzk
        self.now = now
        self.spend = spend
        self.ssh_command = ssh_command
        self.cluster = cluster
        self.listen_port_base = listen_port_base
        self.cuzk_reads = 0  # polls answered, for tests and the status line
        self.shown: tuple[str, str] | None = None

    def compose(self) -> ComposeResult:
        rec = self.rec
        with VerticalScroll(classes="dialog detail", id="detail"):
            yield Label(Text(f"Instance {rec.vast_id}", style="bold"), classes="dialog-title")
            yield Static(id="detail-meta")
            yield Label(Text("Diagnosis", style="bold"), classes="section")
            yield Static(id="detail-diagnosis")
            yield Label(Text("cuzk status", style="bold"), classes="section")
            yield Static(Text("—", style="dim"), id="detail-cuzk")

    def on_mount(self) -> None:
        self.query_one("#detail").focus()  # arrows and page keys scroll
        self._render_record()
        self.set_interval(RECORD_EVERY, self.reload)
        self.set_interval(CUZK_EVERY, self.action_refresh_cuzk)
        self.action_refresh_cuzk()

    def reload(self) -> None:
        """Take the newest record the app holds (the store's, read every second)."""
        if self.latest is not None:
            fresh = self.latest(self.rec.vast_id)
            if fresh is not None:
                self.rec = fresh
        self._render_record()

    def _render_record(self) -> None:
        meta, diagnosis = _kv(self._meta()), self._diagnosis()
        key = (repr(self._meta()), diagnosis.plain)
        if key == self.shown:
            return
        self.shown = key
        self.query_one("#detail-meta", Static).update(meta)
        self.query_one("#detail-diagnosis", Static).update(diagnosis)

    def _when(self, value: float | None) -> str | None:
        if value is None:
            return None
        if self.now is None:
            return iso_utc(value)
        return f"{iso_utc(value)} ({age(self.now() - value)} ago)"

    def _meta(self) -> list[tuple[str, Any]]:
        rec = self.rec
        image = Text(sanitize_line(rec.image or "-", 200))
        if rec.image and rec.image != self.current_image:
            image.append("  (not the configured image)", style="bold yellow")
        spent = self.spend(rec) if self.spend is not None else None
        ssh = self.ssh_command(rec) if self.ssh_command is not None else None
        return [
            ("label", rec.label),
            ("state / stage", f"{rec.state} / {rec.stage}"),
            ("machine / host", f"{rec.machine_id} / {rec.host_id} (host = operator account)"),
            ("GPU", f"{rec.gpu_name} x{rec.num_gpus}"),
            ("RAM", None if rec.cpu_ram_gb is None else f"{rec.cpu_ram_gb:.0f} GB"),
            ("location", rec.geolocation),
            ("$/h", None if rec.dph_total is None else f"{rec.dph_total:.4f}"),
            ("spent", None if spent is None else money(spent)),
            (
                "bench / min",
                f"{_num(rec.bench_rate)} / {_num(rec.min_rate)} proofs/h"
                + ("" if rec.bench_failed is None else f", {rec.bench_failed} proofs failed"),
            ),
            ("production", _production(rec, self._when)),
            ("image", image),
            ("image digest", rec.image_digest),
            ("Vast status", f"{rec.vast_status or '-'}: {rec.status_msg or ''}"),
            ("ssh", ssh),
            *self._curio(),
            ("created", self._when(rec.created_at)),
            ("stage since", self._when(rec.stage_started_at)),
            ("killed", self._when(rec.killed_at)),
        ]

    def _curio(self) -> list[tuple[str, Any]]:
        """The worker in curio's cluster: its identity (runner id → listen address and name),
        the machine the cluster knows it as, its MaxPending, the controller's tunnel; in the
        demo, the simulated cluster's own row and the tasks it holds."""
        rec = self.rec
        info = json_dict(rec.curio_info)
        rows: list[tuple[str, Any]] = []
        if rec.runner_id is not None:
            listen = identity.curio_listen(rec.runner_id, self.listen_port_base)
            rows.append(("curio identity", f"runner {rec.runner_id}: {listen}"))
        if info:
            node = Text(f"machine {info.get('machine_id')} at {info.get('host_and_port', '?')}")
            if info.get("name"):
                node.append(f" ({sanitize_line(str(info['name']), 80)})")
            rows.append(("curio machine", node))
        pending = rec.max_pending if rec.max_pending is not None else info.get("max_pending")
        if pending is not None:
            rows.append(("MaxPending", f"{pending} (sized to curio's ProveTimeout)"))
        if rec.tunnel_down_since is not None:
            down = Text(f"DOWN {self._when(rec.tunnel_down_since)}: ", style="bold yellow")
            down.append(sanitize_line(rec.tunnel_detail or "", 300))
            down.append("  (the controller's; not the machine's)", style="dim")
            rows.append(("tunnel", down))
        machine = self.cluster(rec) if self.cluster is not None else None
        if machine is not None:
            claims = machine.get("claims") or []
            shown = ", ".join(str(c) for c in claims[:12]) + (" …" if len(claims) > 12 else "")
            contact = machine.get("last_contact")
            when = f", last contact {self._when(contact)}" if isinstance(contact, float) else ""
            rows.append(
                ("cluster (sim)", f"machine {machine.get('id')} "
                 f"{sanitize_line(str(machine.get('host_and_port')), 60)}{when}; "
                 f"tasks held: {shown or 'none'}")
            )  # fmt: skip
        return rows

    def _diagnosis(self) -> Text:
        rec = self.rec
        text = Text()
        if not rec.killed:
            text.append(f"alive, {rec.state}; no failure\n", style="green")
        if rec.killed:
            text.append(f"killed in stage {rec.failed_stage}: ", style="bold")
            text.append(f"{rec.kill_kind}\n", style="bold red")
            text.append(sanitize_line(rec.kill_reason or "", 500) + "\n")
        if rec.bench_result:
            try:
                result = json.loads(rec.bench_result)
            except json.JSONDecodeError:
                result = {}
            kind = {"pass": "passed", "timeout": "timeout", "error": "error exit"}.get(
                str(result.get("outcome")), "too slow"
            )
            # A rate only from a run that reached its verdict; what a run that ended otherwise
            # measured is named partial (policy.bench_rate, issue 17 item 5).
            rate = policy.bench_rate(result)
            partial = policy.bench_partial_rate(result)
            measured = (
                f"{_num(rate)} proofs/h"
                if rate is not None or partial is None
                else f"no rate (partial {_num(partial)} proofs/h before it ended)"
            )
            text.append(
                f"benchmark: {sanitize_line(str(result.get('outcome')), 40)} ({kind}) at stage "
                f"{sanitize_line(str(result.get('stage')), 40)}, {measured}, "
                f"{result.get('proofs_completed', 0)} done / {result.get('proofs_failed', 0)} "
                f"failed, exit {result.get('exit_code')}\n"
            )
        image = rec.image or "?"
        text.append(f"image: {sanitize_line(image, 200)}", style="dim")
        if rec.image and rec.image != self.current_image:
            text.append("  ← an older image than the one configured now", style="bold yellow")
        text.append("\n")
        for line in rec.error_lines or ():
            text.append(sanitize_line(line, 500) + "\n", style="red")
        return text

    def action_close(self) -> None:
        self.dismiss(None)

    def action_refresh_cuzk(self) -> None:
        if self.cuzk is None or self.rec.state != "proving" or self.rec.killed:
            self.query_one("#detail-cuzk", Static).update(
                Text("live cuzk status is shown for proving instances", style="dim")
            )
            return
        self.run_worker(self._load_cuzk(), exclusive=True, exit_on_error=False, group="cuzk")

    async def _load_cuzk(self) -> None:
        assert self.cuzk is not None
        widget = self.query_one("#detail-cuzk", Static)
        try:
            status = await self.cuzk(self.rec)
        except Exception as exc:  # shown, never fatal
            widget.update(Text(f"unavailable: {sanitize_line(str(exc), 200)}", style="yellow"))
            return
        self.cuzk_reads += 1
        widget.update(render_cuzk(status))


def render_cuzk(status: dict[str, Any]) -> Text:
    """Memory budget, pipelines and partitions, GPU workers (original-system.md §4)."""
    out = Text()
    mem = status.get("memory") or {}
    total, used = _f(mem.get("total_bytes")), _f(mem.get("used_bytes"))
    if total:
        frac = min(1.0, used / total)
        bar = "█" * int(frac * 30) + "░" * (30 - int(frac * 30))
        out.append(f"memory  {bar} {used / 2**30:.0f}/{total / 2**30:.0f} GiB\n")
    synth = status.get("synthesis") or {}
    out.append(f"synthesis {synth.get('active', '?')}/{synth.get('max_concurrent', '?')} active\n")
    counters = status.get("counters") or {}
    out.append(
        f"proofs done {counters.get('total_completed', '?')}, failed "
        f"{counters.get('total_failed', '?')}, queue {counters.get('queue_depth', '?')}\n"
    )
    styles = {"done": "green", "gpu": "bold magenta", "synthesizing": "cyan", "failed": "red"}
    for pipe in (status.get("pipelines") or [])[:6]:
        out.append(
            f"job {_shown(pipe.get('job_id'), 12)} "
            f"{_shown(pipe.get('partitions_done', 0), 6)}/"
            f"{_shown(pipe.get('total_partitions', 0), 6)} "
        )
        for part in (pipe.get("partitions") or [])[:16]:
            state = str(part.get("state"))
            out.append("■", style=styles.get(state, "dim"))
        out.append("\n")
    for worker in (status.get("gpu_workers") or [])[:8]:
        job = worker.get("current_job")
        out.append(
            f"gpu{_shown(worker.get('gpu_ordinal'), 4)} worker "
            f"{_shown(worker.get('worker_id'), 6)}: {_shown(worker.get('state'), 20)}"
            + ("" if job is None else f" job {_shown(job, 12)}")
            + "\n"
        )
    return out


def _shown(value: object, width: int) -> str:
    """A value from cuzk's status (untrusted): "-" for none, else one sanitized short line."""
    return "-" if value is None else sanitize_line(str(value), width)


def _production(rec: InstanceRecord, when: Callable[[float | None], str | None]) -> Text | None:
    """Measured, not assumed: cuzk's counters since the benchmark."""
    if rec.prod_completed is None:
        return None if rec.state != "proving" else Text("not measured yet", style="dim")
    text = Text(f"{rec.prod_completed} proofs, {rec.prod_failed or 0} failed")
    if rec.prod_rate is None:
        text.append(", measuring the rate (10 min of proving)", style="dim")
    else:
        low = rec.min_rate is not None and rec.prod_rate < rec.min_rate
        text.append(f", measured {rec.prod_rate:.1f} proofs/h", style="bold red" if low else "bold")
    if rec.prod_checked_at is not None:
        text.append(f" (read {when(rec.prod_checked_at)})", style="dim")
    return text


def _f(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def _num(value: Any) -> str:
    return f"{value:.1f}" if isinstance(value, int | float) and not isinstance(value, bool) else "-"
