"""The logs pane: one instance's logs over SSH (one source, or all merged in time order), or the
engine's own log.

It owns its streams: switching the source or the instance cancels the old streams' workers,
which closes their SSH channels (and the `tail -F` behind each) at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import re
from datetime import datetime
from typing import Any, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.widgets import Static

from vastui.console.logview import LogView
from vastui.console.messages import LogLines
from vastui.console.panes.base import ConsoleHost
from vastui.domain.worker import InstanceRecord
from vastui.sanitize import sanitize_line
from vastui.ssh import LOG_SOURCES

LOG_CHOICES = ("all", *LOG_SOURCES, "engine")
MERGE_LIMIT = 20_000  # lines kept for the time-ordered merge of "all"
# Lines waiting for the pane's next turn beyond this are dropped, oldest first (and said so):
# a stream faster than the screen must not grow memory without bound. The view keeps 20,000.
PENDING_LIMIT = 50_000
# A stream read ahead (a LogBatch with `ahead`: the sources' log streams ask for it) hands the
# pane at most a batch per FRAME_S; meanwhile its SSH reader keeps the newest lines: a log
# faster than that is skipped through (and said so), never lagged behind. Each batch costs a
# frame (15-20 ms of the event loop that also reads SSH, for a screen of new rows): at 15 a
# second instead of 30 a firehose runs through about 1.4x faster (bench/logstream.py), and a
# log slower than 15 reads a second (5,000 lines/s in its paced run) is shown whole as before.
FRAME_S = 1 / 15
RESORT_S = 1.0  # the merged log put back in time order at most this often
_STAMP = re.compile(r"^\[?(\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?)(Z|[+-]\d\d:?\d\d)?")


def line_time(line: str) -> float | None:
    """The timestamp a log line starts with (ISO 8601, UTC unless it says otherwise)."""
    m = _STAMP.match(line)
    if m is None:
        return None
    text = m.group(1).replace(",", ".").replace(" ", "T")
    if "." in text:  # fromisoformat takes at most microseconds
        head, frac = text.split(".")
        text = f"{head}.{frac[:6].ljust(6, '0')}"
    zone = m.group(2) or "+00:00"
    with contextlib.suppress(ValueError):
        return datetime.fromisoformat(text + ("+00:00" if zone == "Z" else zone)).timestamp()
    return None


class MergedLog:
    """Lines of several sources kept in time order. A line without a timestamp keeps the time
    of the line before it in its source (a traceback stays with its error line); a source that
    has shown no timestamp yet is placed where it arrives (after everything so far)."""

    def __init__(self, limit: int = MERGE_LIMIT) -> None:
        self.limit = limit
        self.entries: list[tuple[float, int, str, str]] = []
        self._last: dict[str, float] = {}
        self._seq = 0

    def add(self, source: str, lines: list[str]) -> bool:
        """Add lines; True when they simply follow what is there (else the order changed)."""
        fresh = []
        for line in lines:
            ts = line_time(line)
            if ts is None:
                ts = self._last.get(source, self.entries[-1][0] if self.entries else 0.0)
            self._last[source] = ts
            self._seq += 1
            fresh.append((ts, self._seq, source, line))
        in_order = all(a[0] <= b[0] for a, b in itertools.pairwise(fresh))
        appends = in_order and (not self.entries or not fresh or fresh[0][0] >= self.entries[-1][0])
        self.entries.extend(fresh)
        if not appends:
            self.entries.sort()
        del self.entries[: max(0, len(self.entries) - self.limit)]
        return appends

    def lines(self) -> list[tuple[str, str]]:
        return [(source, text) for _, _, source, text in self.entries]


def _skipped_note(count: int) -> str:
    noun = "line" if count == 1 else "lines"
    return f"[{count:,} {noun} skipped: the log came faster than the screen can show]"


class LogsPane(Vertical):
    PANE = "logs"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("left_square_bracket", "log_source(-1)", "Prev source", id="logs-prev-source",
                key_display="[", tooltip="Show the previous log source"),
        Binding("right_square_bracket", "log_source(1)", "Next source", id="logs-next-source",
                key_display="]", tooltip="Show the next log source"),
    ]  # fmt: skip

    def __init__(self, host: ConsoleHost, **kw: Any) -> None:
        super().__init__(**kw)
        self.host = host
        self.instance: int | None = None
        self.source = "all"
        self.token = 0
        self.streams = 0  # SSH log streams open now (each one a channel)
        self.merged = MergedLog()
        # Batches waiting for the pane's next turn: (token, source, lines), arrival order.
        self._pending: list[tuple[int, str, list[str]]] = []
        self._pending_lines = 0
        self._skipped = 0  # lines dropped from a backlog the pane could not keep up with
        self.skipped_total = 0  # lines skipped unshown since the pane opened (each said so)
        self._header: Text | None = None  # the header as last drawn
        self._flush_posted = False
        self._resort_due = False  # the merged log waits to be put back in time order

    def compose(self) -> ComposeResult:
        yield Static(id="logs-header")
        yield LogView(id="logview")

    def on_mount(self) -> None:
        self.render_header()

    @property
    def view(self) -> LogView:
        return self.query_one(LogView)

    def focus_table(self) -> None:
        self.view.focus()

    def render_header(self) -> None:
        text = Text()
        if self.instance is None and self.source != "engine":
            text.append("select an instance (2, then l) — or ] for the engine log", style="dim")
        else:
            target = "engine" if self.source == "engine" else f"instance {self.instance}"
            text.append(f"{target}  ", style="bold")
            received, kept = self.view.total_received, self.view.buffered
            if received:  # the pane's count, as the tables' tabs have theirs
                count = f"{received:,} lines" + (
                    f", the last {kept:,} kept" if kept < received else ""
                )
                text.append(f"{count}  ", style="dim")
        for choice in LOG_CHOICES:
            style = "reverse bold" if choice == self.source else "dim"
            text.append(f" {choice} ", style=style)
        if text == self._header:
            return
        self._header = text
        # One line high whatever it says (vastui.tcss): no layout. With one, every batch of a
        # fast stream laid the whole screen out again, whichever pane showed (issue 32: a row
        # move in the offers took 19 ms against the minimal app's 7 while a log streamed).
        self.query_one("#logs-header", Static).update(text, layout=False)

    # -- choosing what to show --------------------------------------------------------------

    def show_instance(self, rec: InstanceRecord) -> None:
        self.instance = rec.vast_id
        if self.source == "engine":
            self.source = "all"
        self.restart()

    def action_log_source(self, step: int) -> None:
        index = LOG_CHOICES.index(self.source)
        self.source = LOG_CHOICES[(index + step) % len(LOG_CHOICES)]
        self.restart()

    def restart(self) -> None:
        """Stop the old streams (their SSH channels close) and start the new ones."""
        self.token += 1
        self.workers.cancel_group(self, "logs")
        self._drop_pending()
        self.merged = MergedLog()
        self._resort_due = False
        self.view.clear()
        self.render_header()
        if self.source == "engine":
            self._show_engine_log(self.host.engine_log_lines(rewind=True))
            return
        rec = next((r for r in self.host.snapshot.instances if r.vast_id == self.instance), None)
        if rec is None:
            return
        for source in LOG_SOURCES if self.source == "all" else (self.source,):
            self.stream(self.token, rec, source)

    def stop(self) -> None:
        self.token += 1
        self.workers.cancel_group(self, "logs")
        self._drop_pending()

    def _drop_pending(self) -> None:
        """Lines of streams now stopped are never shown."""
        self._pending, self._pending_lines, self._skipped = [], 0, 0

    @work(exit_on_error=False, group="logs")
    async def stream(self, token: int, rec: InstanceRecord, source: str) -> None:
        self.streams += 1
        try:
            async for batch in self.host.log_stream(rec, source):
                if token != self.token:
                    return
                self.queue_lines(token, source, batch)
                if getattr(batch, "ahead", False):  # read ahead meanwhile: a batch a frame
                    await asyncio.sleep(FRAME_S)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if token == self.token:
                self.queue_lines(token, source, [sanitize_line(f"[log stream ended: {exc}]")])
        finally:
            self.streams -= 1

    def queue_lines(self, token: int, source: str, lines: list[str]) -> None:
        """Lines wait for the pane's next turn: however many batches arrive meanwhile, the view
        takes them in one append per source and run (a stream at thousands of lines a second
        costs the screen a few appends a frame, not one per read off the channel)."""
        skipped = getattr(lines, "skipped", 0)  # the SSH reader kept only the newest
        if skipped and token == self.token:
            self.skipped_total += skipped
            lines = [_skipped_note(skipped), *lines]
        pending = self._pending
        if pending and pending[-1][:2] == (token, source):
            pending[-1][2].extend(lines)
        else:
            pending.append((token, source, list(lines)))
        self._pending_lines += len(lines)
        if self._pending_lines > PENDING_LIMIT:
            self._trim_pending(self._pending_lines - PENDING_LIMIT)
        if not self._flush_posted:
            self._flush_posted = True
            self.post_message(LogLines(token, source, []))

    def _trim_pending(self, excess: int) -> None:
        pending = self._pending
        while excess > 0 and pending:
            token, _source, lines = pending[0]
            cut = min(excess, len(lines))
            del lines[:cut]
            self._pending_lines -= cut
            excess -= cut
            if token == self.token:
                self._skipped += cut
                self.skipped_total += cut
            if not lines:
                pending.pop(0)

    @on(LogLines)
    def _lines(self, message: LogLines) -> None:
        message.stop()
        self._flush_posted = False
        batches, self._pending, self._pending_lines = self._pending, [], 0
        if message.lines:  # lines posted directly, not queued
            batches.append((message.token, message.source, message.lines))
        if self._skipped:
            skipped, self._skipped = self._skipped, 0
            source = batches[0][1] if batches else "all"
            batches.insert(0, (self.token, source, [_skipped_note(skipped)]))
        for token, source, lines in batches:
            if token == self.token:
                self._show(source, lines)
        self.render_header()

    def _show(self, source: str, lines: list[str]) -> None:
        if self.source != "all" or self.merged.add(source, lines):
            self.view.append(source, lines)
            return
        # An older backlog arrived after newer lines: shown at once where it arrives, and the
        # merge put back in time order at most once per RESORT_S (a re-sort rebuilds the view,
        # ~150 ms for 20,000 lines: one per batch of several streams starved the keys)
        self.view.append(source, lines)
        if not self._resort_due:
            self._resort_due = True
            self.set_timer(RESORT_S, self._resort)

    def _resort(self) -> None:
        if self._resort_due and self.source == "all":
            self.view.reset(self.merged.lines())
        self._resort_due = False

    def pump_engine_log(self) -> None:
        if self.source == "engine":
            self._show_engine_log(self.host.engine_log_lines())

    def _show_engine_log(self, fresh: list[str]) -> None:
        if fresh:
            self.view.append("engine", fresh)
            self.render_header()
