"""Modal screens: confirmations, reason prompts, the filter editor, instance details, help."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, ClassVar

from rich.table import Table
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from vastui.sanitize import sanitize_line
from vastui.store import InstanceRecord
from vastui.store.records import iso_utc


def t(value: Any, style: str = "") -> Text:
    """Remote values as plain Text: never markup, never escapes."""
    if value is None:
        return Text("-", style="dim")
    return Text(sanitize_line(str(value), 500), style=style)


class ConfirmScreen(ModalScreen[bool]):
    """Yes/no for destructive actions. `y`/enter confirms, `n`/escape cancels."""

    BINDINGS: ClassVar[list[Binding]] = [
        Binding("y", "answer(True)", "Yes", show=False),
        Binding("n,escape", "answer(False)", "No", show=False),
    ]

    def __init__(self, title: str, body: Text | str, confirm_label: str = "Yes") -> None:
        super().__init__(classes="dialog-screen")
        self.title_text = title
        self.body = body
        self.confirm_label = confirm_label

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(Text(self.title_text, style="bold"), classes="dialog-title")
            yield Static(self.body, classes="dialog-body")
            with Horizontal(classes="dialog-buttons"):
                yield Button(f"{self.confirm_label} (y)", id="yes", variant="error")
                yield Button("Cancel (n)", id="no")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, value: bool) -> None:
        self.dismiss(value)


class PromptScreen(ModalScreen[str | None]):
    """One line of input (a reason, a machine id, a filter). Escape cancels."""

    BINDINGS: ClassVar[list[Binding]] = [Binding("escape", "cancel", "Cancel", show=False)]

    def __init__(
        self,
        title: str,
        body: Text | str,
        *,
        value: str = "",
        placeholder: str = "",
        validate: Callable[[str], str | None] | None = None,
        button: str = "OK",
    ) -> None:
        super().__init__(classes="dialog-screen")
        self.title_text = title
        self.body = body
        self.value = value
        self.placeholder = placeholder
        self.validate = validate
        self.button = button

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(Text(self.title_text, style="bold"), classes="dialog-title")
            yield Static(self.body, classes="dialog-body")
            yield Input(value=self.value, placeholder=self.placeholder, id="prompt-input")
            yield Static("", id="prompt-error", classes="dialog-error")
            with Horizontal(classes="dialog-buttons"):
                yield Button(f"{self.button} (enter)", id="ok", variant="primary")
                yield Button("Cancel (esc)", id="cancel")

    def on_mount(self) -> None:
        self.query_one(Input).focus()

    def _submit(self) -> None:
        text = self.query_one(Input).value.strip()
        problem = self.validate(text) if self.validate else (None if text else "required")
        if problem:
            self.query_one("#prompt-error", Static).update(Text(problem, style="bold red"))
            return
        self.dismiss(text)

    @on(Input.Submitted)
    def _submitted(self) -> None:
        self._submit()

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "ok":
            self._submit()
        else:
            self.dismiss(None)

    def action_cancel(self) -> None:
        self.dismiss(None)


def _kv(rows: list[tuple[str, Any]]) -> Table:
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold", no_wrap=True)
    table.add_column()
    for key, value in rows:
        table.add_row(key, value if isinstance(value, Text) else t(value))
    return table


class DetailScreen(ModalScreen[None]):
    """Everything about one instance: metadata, the failure diagnosis, live cuzk status."""

    BINDINGS: ClassVar[list[Binding]] = [
        Binding("escape,q,enter", "close", "Close", id="detail-close"),
        Binding("r", "refresh_cuzk", "Refresh cuzk", id="detail-cuzk"),
    ]

    def __init__(
        self,
        rec: InstanceRecord,
        *,
        current_image: str,
        cuzk: Callable[[], Any] | None = None,
    ) -> None:
        super().__init__(classes="dialog-screen")
        self.rec = rec
        self.current_image = current_image
        self.cuzk = cuzk

    def compose(self) -> ComposeResult:
        rec = self.rec
        with VerticalScroll(classes="dialog detail"):
            yield Label(Text(f"Instance {rec.vast_id}", style="bold"), classes="dialog-title")
            yield Static(_kv(self._meta()), id="detail-meta")
            yield Label(Text("Diagnosis", style="bold"), classes="section")
            yield Static(self._diagnosis(), id="detail-diagnosis")
            yield Label(Text("cuzk status", style="bold"), classes="section")
            yield Static(Text("—", style="dim"), id="detail-cuzk")

    def on_mount(self) -> None:
        self.action_refresh_cuzk()

    def _meta(self) -> list[tuple[str, Any]]:
        rec = self.rec
        image = Text(sanitize_line(rec.image or "-", 200))
        if rec.image and rec.image != self.current_image:
            image.append("  (not the configured image)", style="bold yellow")
        return [
            ("label", rec.label),
            ("state / stage", f"{rec.state} / {rec.stage}"),
            ("machine / host", f"{rec.machine_id} / {rec.host_id} (host = operator account)"),
            ("GPU", f"{rec.gpu_name} x{rec.num_gpus}"),
            ("RAM", None if rec.cpu_ram_gb is None else f"{rec.cpu_ram_gb:.0f} GB"),
            ("location", rec.geolocation),
            ("$/h", None if rec.dph_total is None else f"{rec.dph_total:.4f}"),
            (
                "bench / min",
                f"{_num(rec.bench_rate)} / {_num(rec.min_rate)} proofs/h"
                + ("" if rec.bench_failed is None else f", {rec.bench_failed} proofs failed"),
            ),
            ("production", _production(rec)),
            ("image", image),
            ("image digest", rec.image_digest),
            ("Vast status", f"{rec.vast_status or '-'}: {rec.status_msg or ''}"),
            ("ssh", f"ssh -p {rec.ssh_port} root@{rec.ssh_host}" if rec.ssh_host else None),
            ("created", _ts(rec.created_at)),
            ("stage since", _ts(rec.stage_started_at)),
            ("killed", _ts(rec.killed_at)),
        ]

    def _diagnosis(self) -> Text:
        rec = self.rec
        text = Text()
        if not rec.killed and rec.bench_outcome is None:
            return Text("alive; no failure", style="green")
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
            text.append(
                f"benchmark: {sanitize_line(str(result.get('outcome')), 40)} ({kind}) at stage "
                f"{sanitize_line(str(result.get('stage')), 40)}, "
                f"{_num(result.get('rate_per_hour'))} proofs/h, "
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
        if self.cuzk is None or self.rec.state != "proving":
            self.query_one("#detail-cuzk", Static).update(
                Text("live cuzk status is shown for proving instances", style="dim")
            )
            return
        self.run_worker(self._load_cuzk(), exclusive=True, exit_on_error=False)

    async def _load_cuzk(self) -> None:
        assert self.cuzk is not None
        widget = self.query_one("#detail-cuzk", Static)
        try:
            status = await self.cuzk()
        except Exception as exc:  # shown, never fatal
            widget.update(Text(f"unavailable: {sanitize_line(str(exc), 200)}", style="yellow"))
            return
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
            f"job {sanitize_line(str(pipe.get('job_id')), 12)} "
            f"{pipe.get('partitions_done', 0)}/{pipe.get('total_partitions', 0)} "
        )
        for part in (pipe.get("partitions") or [])[:16]:
            state = str(part.get("state"))
            out.append("■", style=styles.get(state, "dim"))
        out.append("\n")
    for worker in (status.get("gpu_workers") or [])[:8]:
        out.append(
            f"gpu{worker.get('gpu_ordinal')} worker {worker.get('worker_id')}: "
            f"{sanitize_line(str(worker.get('state')), 20)} "
            f"job {sanitize_line(str(worker.get('current_job')), 12)}\n"
        )
    return out


def _production(rec: InstanceRecord) -> Text | None:
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
        text.append(f" (read {_ts(rec.prod_checked_at)})", style="dim")
    return text


def _f(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def _num(value: Any) -> str:
    return f"{value:.1f}" if isinstance(value, int | float) and not isinstance(value, bool) else "-"


def _ts(value: float | None) -> str | None:
    return iso_utc(value) if value is not None else None


HELP = """\
Panes      1 offers · 2 instances · 3 logs · 4 bad list · ? this help · ctrl+p all commands
Offers     d deploy · i ignore machine · e edit Vast filter · / filter rows · s sort column
           S reverse · b show/hide bad machines · r refresh
Instances  enter details · x destroy · c copy ssh command · i ignore machine · l logs
Logs       [ ] previous/next source · / search · n N next/previous match · w wrap
           end follow
Bad list   u unignore · a add a machine
Quit       ctrl+q
Every binding can be remapped: [ui.keymap] binding-id = "keys" in the config.
"""


class HelpScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[Binding]] = [Binding("escape,q,question_mark", "close", "Close")]

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(Text("vastui keys", style="bold"), classes="dialog-title")
            yield Static(HELP, markup=False)

    def action_close(self) -> None:
        self.dismiss(None)
