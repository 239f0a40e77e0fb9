"""The instance detail view: metadata, spend, the failure diagnosis and live cuzk status.

It is live, as the original's panel was: the record is re-read from the app's latest snapshot
every second (stage, timestamps, diagnosis), and a proving worker's cuzk status is polled every
1.5 s while the view is open.

It opens fast (bench/detail.py): its first frame draws the record (in memory) at once, laid out
once; cuzk's status (a worker's answer) is asked for when the view is made and fills its
reserved place when it comes, drawn without a new layout when it fits, so nothing drawn moves.
An answer already there when the view is composed is in the first frame.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.segment import Segment
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.widgets import Label, Static

from vastui.console.backdrop import Dialog
from vastui.console.cells import age, money, t
from vastui.console.detailtext import (
    BEFORE_END,
    num_text,
    production_text,
    render_cuzk,
    shown,
    vast_status_text,
)
from vastui.console.footer import KeyFooter
from vastui.console.summary import headline_text
from vastui.domain.delivery import Delivery
from vastui.domain.reports import parse_stored_result
from vastui.domain.timefmt import iso_utc
from vastui.domain.worker import InstanceRecord
from vastui.engine import identity, policy, production
from vastui.engine.delivery import worker_share
from vastui.sanitize import sanitize_line
from vastui.store.common import json_dict

RECORD_EVERY = 1.0  # seconds between re-reads of the record
CUZK_EVERY = 1.5  # seconds between cuzk status polls (the original panel's cadence)
# Lines kept for cuzk's status until it comes: memory, synthesis, proofs, two pipelines, two GPU
# workers (a one-GPU worker's usual status); a longer one grows the view downwards.
CUZK_RESERVED = 7
NOT_PROVING = Text("live cuzk status is shown for proving instances", style="dim")


def _started(
    loop: asyncio.AbstractEventLoop, read: Awaitable[dict[str, Any]]
) -> asyncio.Task[dict[str, Any]]:
    """The read as a task now (its failure kept for whoever awaits it, never logged as
    unretrieved when nobody does: a view closed before the answer)."""
    # `read` is an awaitable coroutine typed as Awaitable by its callers: create_task wants a
    # Coroutine
    task: asyncio.Task[dict[str, Any]] = loop.create_task(read)  # type: ignore[arg-type]
    task.add_done_callback(lambda t: t.cancelled() or t.exception())
    return task


def _lines_of(text: Text, reserved: int) -> int:
    """The cuzk section's height for `text` in a place of `reserved` lines (its lines are
    short: none wraps)."""
    return max(reserved, len(text.plain.rstrip("\n").split("\n")))


def _kv(rows: list[tuple[str, Any]]) -> _DrawnOnce:
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold", no_wrap=True)
    table.add_column()
    for key, value in rows:
        table.add_row(key, value if isinstance(value, Text) else t(value))
    return _DrawnOnce(table)


class _DrawnOnce:
    """A Table drawn once per width. Textual draws a Static's content to learn its height,
    then again to show it, and a Table measures every cell each time it is drawn: the
    metadata table was the largest part of the view's first frame. Its segments are the
    Table's own, so it looks the same."""

    def __init__(self, table: Table) -> None:
        self.table = table
        self._drawn: dict[tuple[int, bool | None, bool], list[Segment]] = {}

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        # All the table's drawing depends on here: it sets each cell's justify, overflow,
        # wrap and highlight itself, and ignores the height.
        key = (options.max_width, options.markup, options.ascii_only)
        drawn = self._drawn.get(key)
        if drawn is None:
            drawn = self._drawn[key] = list(console.render(self.table, options))
        return drawn

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement.get(console, options, self.table)


class DetailScreen(Dialog[None]):
    """Everything about one instance, kept current while open."""

    BINDINGS: ClassVar[list[BindingType]] = [
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
        listen_port_base: int = identity.DEFAULT_PORT_BASE,
        fleet: Callable[[], Delivery | None] | None = None,
    ) -> None:
        super().__init__(classes="dialog-screen")
        self.rec = rec
        self.current_image = current_image
        self.latest = latest
        self.cuzk = cuzk
        self.now = now
        self.spend = spend
        self.ssh_command = ssh_command
        self.listen_port_base = listen_port_base
        self.fleet = fleet  # the fleet's headline as the engine last published it
        self.cuzk_reads = 0  # polls answered, for tests and the status line
        self.shown: tuple[str, str] | None = None
        self._answered = False  # cuzk's status (or its failure) shown
        self._cuzk_reserved = 0  # lines kept for it (CSS min-height, set when composed)
        self._cuzk_lines = 0  # its height as laid out
        # cuzk's status is asked for now: an answer that comes before the view is composed is
        # drawn in its first frame (made outside the app's loop, it is asked for on mount)
        self._first_read: asyncio.Task[dict[str, Any]] | None = None
        if self.cuzk is not None and self._reads_cuzk():
            with contextlib.suppress(RuntimeError):  # no running loop
                self._first_read = _started(asyncio.get_running_loop(), self.cuzk(rec))

    def compose(self) -> ComposeResult:
        rec = self.rec
        meta, diagnosis = self._record()
        assert meta is not None  # nothing shown yet
        cuzk = self._first_cuzk()
        with VerticalScroll(classes="dialog detail", id="detail"):
            yield Label(Text(f"Instance {rec.vast_id}", style="bold"), classes="dialog-title")
            yield Static(meta, id="detail-meta")
            yield Label(Text("Diagnosis", style="bold"), classes="section")
            yield Static(diagnosis, id="detail-diagnosis")
            yield Label(Text("cuzk status", style="bold"), classes="section")
            status = Static(cuzk, id="detail-cuzk")
            if self._reads_cuzk():  # its place kept, so that its answer moves nothing
                self._cuzk_reserved = CUZK_RESERVED
                status.styles.min_height = CUZK_RESERVED
            self._cuzk_lines = _lines_of(cuzk, self._cuzk_reserved)
            yield status
        # its own keys, over the instances pane's footer beneath (issue 31 item 6)
        yield KeyFooter()

    def on_mount(self) -> None:
        self.query_one("#detail").focus()  # arrows and page keys scroll
        self.set_interval(RECORD_EVERY, self.reload)
        self.set_interval(CUZK_EVERY, self.action_refresh_cuzk)
        if self._reads_cuzk() and not self._answered:  # not in the first frame: when it comes
            self.action_refresh_cuzk()

    def reload(self) -> None:
        """Take the newest record the app holds (the store's, read every second)."""
        if self.latest is not None:
            fresh = self.latest(self.rec.vast_id)
            if fresh is not None:
                self.rec = fresh
        meta, diagnosis = self._record()
        if meta is not None:
            self.query_one("#detail-meta", Static).update(meta)
            self.query_one("#detail-diagnosis", Static).update(diagnosis)

    def _record(self) -> tuple[_DrawnOnce | None, Text]:
        """The metadata table and the diagnosis; the table None when neither changed since
        they were last shown."""
        rows, diagnosis = self._meta(), self._diagnosis()
        key = (repr(rows), diagnosis.plain)
        if key == self.shown:
            return None, diagnosis
        self.shown = key
        return _kv(rows), diagnosis

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
        delivered = self.fleet() if self.fleet is not None else None
        return [
            ("label", rec.label),
            ("state / stage", f"{shown(rec.phase, 40)} / {shown(rec.stage, 40)}"),
            (
                "machine / host",
                f"{shown(rec.machine_id, 20)} / {shown(rec.host_id, 20)} (host = operator account)",
            ),
            ("GPU", f"{shown(rec.gpu_name, 60)} x{shown(rec.num_gpus, 4)}"),
            ("RAM", None if rec.cpu_ram_gb is None else f"{rec.cpu_ram_gb:.0f} GB"),
            ("location", rec.geolocation),
            ("$/h", self._dph()),
            ("spent", None if spent is None else money(spent)),
            (
                "bench / min",
                f"{num_text(rec.bench_rate)} / {num_text(rec.min_rate)} proofs/h"
                + ("" if rec.bench_failed is None else f", {rec.bench_failed} proofs failed"),
            ),
            ("production", self._production()),
            ("fleet", None if delivered is None else headline_text(delivered)),
            ("image", image),
            ("image digest", rec.image_digest),
            ("Vast status", vast_status_text(rec)),
            ("ssh", ssh),
            *self._curio(),
            ("created", self._when(rec.created_at)),
            ("stage since", self._when(rec.stage_started_at)),
            ("killed", self._when(rec.killed_at)),
        ]

    def _dph(self) -> str | None:
        rec = self.rec
        if rec.dph_total is None:
            return None
        if rec.stopped_since is not None and not rec.killed:
            storage = min(rec.storage_dph or 0.0, rec.dph_total)
            return f"{storage:.4f} while stopped (its disk; {rec.dph_total:.4f} running)"
        return f"{rec.dph_total:.4f}"

    def _production(self) -> Text | None:
        """cuzk's counters, its part of the fleet's headline and its rate kept full."""
        rec = self.rec
        delivered = self.fleet() if self.fleet is not None else None
        share = measured = None
        window = delivered.window_s if delivered is not None else None
        if delivered is not None:
            state = json_dict(rec.cluster_state)
            done = state.get("done")
            window_done = done if isinstance(done, int) and not isinstance(done, bool) else None
            share = worker_share(rec, delivered, window_done)
            if self.now is not None and rec.prod_state:
                prod = production.ProdState.from_json(rec.prod_state)
                measured = production.measure(prod, self.now(), delivered.window_s)
        return production_text(rec, self._when, share, measured, window)

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
            node = Text(
                f"machine {shown(info.get('machine_id'), 20)} at "
                f"{shown(info.get('host_and_port', '?'), 60)}"
            )
            if info.get("name"):
                node.append(f" ({sanitize_line(str(info['name']), 80)})")
            rows.append(("curio machine", node))
        pending = rec.max_pending if rec.max_pending is not None else info.get("max_pending")
        if pending is not None:
            rows.append(("MaxPending", f"{shown(pending, 12)} (sized to curio's ProveTimeout)"))
        if rec.tunnel_down_since is not None:
            down = Text(f"DOWN {self._when(rec.tunnel_down_since)}: ", style="bold yellow")
            down.append(sanitize_line(rec.tunnel_detail or "", 300))
            down.append("  (the controller's; not the machine's)", style="dim")
            rows.append(("tunnel", down))
        rows.extend(self._cluster_rows())
        return rows

    def _cluster_rows(self) -> list[tuple[str, Any]]:
        """The worker as the engine last read it in curio's cluster (any mode: the reading is
        in the store): its machine, whether it is cordoned (draining), the tasks it holds,
        curio's count of its PSProve tasks beside cuzk's, curio's last error line."""
        rec = self.rec
        rows: list[tuple[str, Any]] = []
        state = json_dict(rec.cluster_state)
        if rec.drain_started_at is not None:
            drain = Text(f"cordoned {self._when(rec.drain_started_at)}", style="bold yellow")
            by = "its deadline"
            if rec.drain_deadline is not None:
                by = iso_utc(rec.drain_deadline) or by
                if self.now is not None:
                    left = rec.drain_deadline - self.now()
                    by += f" (in {age(left)})" if left > 0 else " (passed)"
            drain.append(f"; destroyed once it holds no task, by {by}")
            rows.append(("drain", drain))
        if state:
            checked = self._when(rec.cluster_checked_at) or "-"
            if state.get("machine_id") is None:
                where = Text("no machine of its own in the cluster", style="dim")
            else:
                where = Text(
                    f"machine {shown(state.get('machine_id'), 20)} "
                    f"{shown(state.get('host_and_port'), 60)}"
                )
                contact = state.get("last_contact")
                if isinstance(contact, int | float):
                    where.append(f", last contact {self._when(float(contact))}")
                if state.get("cordoned"):
                    where.append(" cordoned", style="bold yellow")
            if state.get("foreign"):
                where.append(
                    f"; its address is also {shown(state['foreign'], 80)}'s", style="bold red"
                )
            where.append(f"  (read {checked}{BEFORE_END if rec.killed else ''})", style="dim")
            rows.append(("cluster", where))
            raw = state.get("held_by_name")
            held: dict[str, Any] = raw if isinstance(raw, dict) else {}
            names = ", ".join(f"{shown(k, 24)} {shown(v, 8)}" for k, v in sorted(held.items()))
            count = shown(state.get("held", 0), 8)
            rows.append(("tasks held", f"{count} ({names})" if names else count))
            rows.append(("proofs", self._both_counts(state)))
            error = state.get("last_error")
            if isinstance(error, str) and error:
                line = Text(sanitize_line(error, 300), style="red")
                when = state.get("last_error_at")
                if isinstance(when, int | float):
                    line.append(f"  ({self._when(float(when))})", style="dim")
                rows.append(("curio's last error", line))
        if rec.released_at is not None:
            rows.append(
                ("tasks released", f"{shown(rec.released_tasks, 8)} {self._when(rec.released_at)}")
            )
        return rows

    def _both_counts(self, state: dict[str, Any]) -> Text:
        """cuzk's count of proofs since the benchmark beside curio's PSProve results since it
        proved: they differ when curio fails a proof cuzk finished (or the other way round)."""
        rec = self.rec
        done, failed = state.get("done_total"), state.get("failed_total")
        text = Text(f"curio {shown(done, 8)} done, {shown(failed, 8)} failed")
        theirs = state.get("failed_controller")
        if isinstance(theirs, int) and theirs > 0:
            text.append(f" (+{theirs} on the controller's tunnel, not counted)", style="dim")
        if rec.prod_completed is not None:
            text.append(f"; cuzk {rec.prod_completed} done, {rec.prod_failed or 0} failed")
            if isinstance(done, int) and done != rec.prod_completed:
                text.append("  ≠ the two disagree", style="bold yellow")
        return text

    def _diagnosis(self) -> Text:
        rec = self.rec
        text = Text()
        if not rec.killed and rec.drain_started_at is not None:
            text.append(
                f"alive, {shown(rec.state, 40)}; draining: cordoned in curio's cluster, "
                "destroyed once it holds no task\n", style="magenta",
            )  # fmt: skip
        elif not rec.killed:
            text.append(f"alive, {shown(rec.state, 40)}; no failure\n", style="green")
        if rec.killed:
            text.append(f"killed in stage {shown(rec.failed_stage, 40)}: ", style="bold")
            text.append(f"{shown(rec.kill_kind, 40)}\n", style="bold red")
            text.append(sanitize_line(rec.kill_reason or "", 500) + "\n")
        result = parse_stored_result(rec.bench_result)  # damaged: None
        if result is not None:
            kind = {"pass": "passed", "timeout": "timeout", "error": "error exit"}.get(
                str(result.outcome), "too slow"
            )
            # A rate only from a run that reached its verdict; what a run that ended otherwise
            # measured is named partial (policy.bench_rate, issue 17 item 5).
            rate = policy.bench_rate(result)
            partial = policy.bench_partial_rate(result)
            measured = (
                f"{num_text(rate)} proofs/h"
                if rate is not None or partial is None
                else f"no rate (partial {num_text(partial)} proofs/h before it ended)"
            )
            text.append(
                f"benchmark: {shown(result.outcome, 40)} ({kind}) at stage "
                f"{shown(result.stage, 40)}, {measured}, "
                f"{shown(result.proofs_completed or 0, 12)} done / "
                f"{shown(result.proofs_failed or 0, 12)} failed, "
                f"exit {shown(result.exit_code, 12)}\n"
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

    def _reads_cuzk(self) -> bool:
        return self.cuzk is not None and self.rec.state == "proving" and not self.rec.killed

    def _first_cuzk(self) -> Text:
        """What the cuzk section shows in the first frame: the answer if it came already."""
        if not self._reads_cuzk():
            return NOT_PROVING
        first = self._first_read
        if first is None or not first.done():
            return Text("reading cuzk's status…", style="dim")
        self._first_read = None
        return self._cuzk_text(first)

    def _cuzk_text(self, read: asyncio.Task[dict[str, Any]]) -> Text:
        self._answered = True
        try:
            status = read.result()
        except Exception as exc:  # shown, never fatal
            return Text(f"unavailable: {sanitize_line(str(exc), 200)}", style="yellow")
        self.cuzk_reads += 1
        return render_cuzk(status)

    def _show_cuzk(self, text: Text) -> None:
        """Into its place; laid out again only when its height changes (a new layout moves
        the view's content a frame later)."""
        lines = _lines_of(text, self._cuzk_reserved)
        self.query_one("#detail-cuzk", Static).update(text, layout=lines != self._cuzk_lines)
        self._cuzk_lines = lines

    def action_refresh_cuzk(self) -> None:
        if not self._reads_cuzk():
            self._show_cuzk(NOT_PROVING)
            return
        self.run_worker(self._load_cuzk(), exclusive=True, exit_on_error=False, group="cuzk")

    async def _load_cuzk(self) -> None:
        assert self.cuzk is not None
        first, self._first_read = self._first_read, None
        read = first or _started(asyncio.get_running_loop(), self.cuzk(self.rec))
        with contextlib.suppress(Exception):  # its failure is shown by _cuzk_text
            await read
        self._show_cuzk(self._cuzk_text(read))
