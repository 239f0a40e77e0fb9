"""The vastui console: offers, instances, logs, bad list; a summary strip always on top.

Workers (async tasks) read the store, the engine and SSH and post messages; message handlers
own every widget. Actions go to the engine as store commands (see `bridge.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import time
from collections.abc import Iterable
from typing import Any, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.containers import Horizontal, Vertical
from textual.css.query import NoMatches
from textual.message import Message
from textual.widgets import DataTable, Footer, Input, Static, TabbedContent, TabPane

from vastui.backend import Options
from vastui.config import state_dir
from vastui.console.bridge import FleetBridge, Snapshot
from vastui.console.logview import LogView
from vastui.console.screens import (
    ConfirmScreen,
    DetailScreen,
    HelpScreen,
    PromptScreen,
    t,
)
from vastui.console.themes import load_theme_dirs, register_themes, resolve_theme_name, theme_dirs
from vastui.engine.ranking import RankedOffer
from vastui.engine.runtime import RunOptions
from vastui.sanitize import sanitize_line
from vastui.ssh import LOG_SOURCES
from vastui.store import InstanceRecord
from vastui.store.records import iso_utc
from vastui.vast.query import QueryError, build_search_body

LOG_CHOICES = ("all", *LOG_SOURCES, "engine")
STATE_STYLE = {
    "proving": "bold green",
    "benchmark": "yellow",
    "paramfetch": "cyan",
    "setup": "cyan",
    "loading": "blue",
    "killed": "red",
    "legacy": "dim",
}
OFFER_COLUMNS: tuple[tuple[str, str, int], ...] = (
    # Most telling first: at 80 columns the price, the expected $/proof and the rates show.
    ("gpu", "GPU", 16),
    ("n", "#", 2),
    ("dph", "$/h", 6),
    ("cpp", "Exp $/p", 7),
    ("req", "Req", 4),
    ("known", "Known", 5),
    ("ram", "RAM GB", 6),
    ("bad", "Bad", 3),
    ("vram", "VRAM", 4),
    ("cores", "Cores", 5),
    ("cpu", "CPU", 14),
    ("pcie", "PCIe", 5),
    ("dl", "DL Mb/s", 7),
    ("rel", "Rel%", 5),
    ("loc", "Location", 16),
)
INSTANCE_COLUMNS: tuple[tuple[str, str, int], ...] = (
    ("id", "Id", 8),
    ("stage", "State / progress", 32),
    ("gpu", "GPU", 16),
    ("bench", "Bench", 5),
    ("meas", "Meas", 5),
    ("proofs", "Proofs", 7),
    ("dph", "$/h", 6),
    ("cpp", "$/proof", 8),
    ("up", "Uptime", 6),
    ("label", "Label", 24),
    ("image", "Image", 24),
)
BAD_COLUMNS: tuple[tuple[str, str, int], ...] = (
    ("machine", "Machine", 8),
    ("host", "Host (acct)", 11),
    ("gpu", "GPU", 14),
    ("reason", "Reason", 36),
    ("source", "Source", 9),
    ("when", "When", 20),
    ("strikes", "Str", 3),
    ("expires", "Expires", 20),
)


class SnapshotLoaded(Message):
    def __init__(self, snapshot: Snapshot) -> None:
        super().__init__()
        self.snapshot = snapshot


class OffersLoaded(Message):
    def __init__(self, offers: list[RankedOffer]) -> None:
        super().__init__()
        self.offers = offers


class LogLines(Message):
    def __init__(self, token: int, source: str, lines: list[str]) -> None:
        super().__init__()
        self.token = token
        self.source = source
        self.lines = lines


class Problem(Message):
    """An error from a worker: a notification, never a crash."""

    def __init__(self, text: str, title: str = "Error") -> None:
        super().__init__()
        self.text = sanitize_line(text, 400)
        self.title = title


class VastuiCommands(Provider):
    """The palette: every action of the console, by name."""

    def _commands(self) -> list[tuple[str, str, str]]:
        app = self.app
        assert isinstance(app, VastuiApp)
        return [(b.description or b.action, b.action, b.tooltip or "") for b in app.all_bindings()]

    async def discover(self) -> Hits:
        for name, action, help_text in self._commands():
            yield DiscoveryHit(name, self._runner(action), help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for name, action, help_text in self._commands():
            score = matcher.match(name)
            if score > 0:
                yield Hit(score, matcher.highlight(name), self._runner(action), help=help_text)

    def _runner(self, action: str):  # type: ignore[no-untyped-def]
        async def run() -> None:
            await self.app.run_action(action)

        return run


def fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


class VastuiApp(App[int]):
    TITLE = "vastui"
    COMMANDS: ClassVar = App.COMMANDS | {VastuiCommands}
    CSS_PATH = "vastui.tcss"
    BINDINGS: ClassVar[list[Binding]] = [
        Binding("1", "pane('offers')", "Offers", id="pane-offers"),
        Binding("2", "pane('instances')", "Instances", id="pane-instances"),
        Binding("3", "pane('logs')", "Logs", id="pane-logs"),
        Binding("4", "pane('bad')", "Bad list", id="pane-bad"),
        Binding("question_mark", "help", "Help", id="help"),
        Binding("r", "refresh", "Refresh", id="refresh", show=False),
        Binding("d", "deploy", "Deploy", id="offers-deploy", show=False),
        Binding("i", "ignore", "Ignore machine", id="ignore", show=False),
        Binding("e", "edit_filter", "Edit Vast filter", id="offers-filter", show=False),
        Binding("slash", "filter_rows", "Filter rows", id="filter-rows", show=False),
        Binding("s", "sort", "Sort by column", id="sort", show=False),
        Binding("S", "sort_reverse", "Reverse sort", id="sort-reverse", show=False),
        Binding("b", "toggle_bad", "Show/hide bad machines", id="offers-bad", show=False),
        Binding("x", "destroy", "Destroy instance", id="instances-destroy", show=False),
        Binding("c", "copy_ssh", "Copy ssh command", id="instances-ssh", show=False),
        Binding("l", "logs_for_selected", "Logs of instance", id="instances-logs", show=False),
        Binding("left_square_bracket", "log_source(-1)", "Prev log source", id="logs-prev-source",
                show=False),
        Binding("right_square_bracket", "log_source(1)", "Next log source", id="logs-next-source",
                show=False),
        Binding("u", "unignore", "Unignore machine", id="bad-unignore", show=False),
        Binding("a", "add_bad", "Add bad machine", id="bad-add", show=False),
    ]  # fmt: skip

    def __init__(
        self,
        opts: Options,
        *,
        read_only: bool = False,
        theme: str | None = None,
        bridge: FleetBridge | None = None,
    ) -> None:
        super().__init__()
        self.opts = opts
        self.bridge: FleetBridge = bridge or FleetBridge(opts, read_only=read_only)
        self.read_only = read_only
        self.theme_choice = theme or opts.config.ui.theme
        # Loaded before the app starts so a bad theme file is a one-line error, not a crash.
        self.themes = load_theme_dirs(theme_dirs())
        self.snapshot = Snapshot()
        self.offers: list[RankedOffer] = []
        self.show_bad = False
        self.row_filter = ""
        self.ui_state = self._load_ui_state()
        self.log_instance: int | None = None
        self.log_source = "all"
        self._log_token = 0
        self._offers_seen: int | None = None

    def notify(  # type: ignore[override]
        self,
        message: str,
        *,
        title: str = "",
        severity: Any = "information",
        timeout: float | None = None,
        markup: bool = False,
    ) -> None:
        """Notifications carry remote text (server messages, hosts): never parse it as markup."""
        super().notify(
            sanitize_line(message, 500),
            title=sanitize_line(title, 100),
            severity=severity,
            timeout=timeout,
            markup=False,
        )

    # -- layout ----------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Static(id="summary")
        with TabbedContent(initial="offers", id="panes"):
            with TabPane("1 Offers", id="offers"):
                yield DataTable(id="offers-table", cursor_type="row", zebra_stripes=True)
            with TabPane("2 Instances", id="instances"):
                yield DataTable(id="instances-table", cursor_type="row", zebra_stripes=True)
            with TabPane("3 Logs", id="logs"), Vertical():
                yield Static(id="logs-header")
                yield LogView(id="logview")
            with TabPane("4 Bad list", id="bad"):
                yield DataTable(id="bad-table", cursor_type="row", zebra_stripes=True)
        with Horizontal(id="row-filter-bar"):
            yield Static("filter rows:", id="row-filter-label")
            yield Input(placeholder="text in any column; esc clears", id="row-filter")
        yield Footer()

    async def on_mount(self) -> None:
        register_themes(self, self.themes)
        self.theme = resolve_theme_name(self, self.theme_choice)
        if self.opts.config.ui.keymap:
            self.set_keymap(self.opts.config.ui.keymap)
        for table_id, columns in (
            ("#offers-table", OFFER_COLUMNS),
            ("#instances-table", INSTANCE_COLUMNS),
            ("#bad-table", BAD_COLUMNS),
        ):
            table = self.query_one(table_id, DataTable)
            for key, label, width in columns:
                table.add_column(label, width=width, key=key)
        self.query_one("#row-filter-bar").display = False
        # A closed terminal or a kill should still stop the engine and its workers cleanly.
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGHUP, signal.SIGTERM):
                loop.add_signal_handler(sig, self.exit)
        self._render_summary()
        self._render_logs_header()
        self.start_bridge()

    @work(exit_on_error=False, group="bridge")
    async def start_bridge(self) -> None:
        try:
            await self.bridge.start()
        except Exception as exc:
            self.post_message(Problem(str(exc), "Could not start"))
            return
        if self.bridge.mode == "attached" and self.bridge.attached_to is not None:
            holder = self.bridge.attached_to
            self.notify(
                f"attached to the headless engine (pid {holder.pid} on "
                f"{sanitize_line(holder.hostname, 60)}); commands go through the store",
                title="Attached",
            )
        self.set_interval(1.0, self.refresh_snapshot)
        self.set_interval(5.0, self.refresh_offers)
        self.set_interval(1.0, self.pump_engine_log)
        self.refresh_snapshot()
        self.refresh_offers()

    async def on_unmount(self) -> None:
        self._log_token += 1
        with contextlib.suppress(Exception):
            await self.bridge.close()

    # -- data loading (workers post, handlers render) ---------------------------------

    @work(exclusive=True, exit_on_error=False, group="snapshot")
    async def refresh_snapshot(self) -> None:
        try:
            self.post_message(SnapshotLoaded(await self.bridge.snapshot()))
        except Exception as exc:
            self.post_message(Problem(str(exc), "Store"))

    @work(exclusive=True, exit_on_error=False, group="offers")
    async def refresh_offers(self, force: bool = False) -> None:
        try:
            offers = await self.bridge.offers(force=force)
        except Exception as exc:
            self.post_message(Problem(str(exc), "Offers"))
            return
        if force or id(offers) != self._offers_seen:
            self._offers_seen = id(offers)
            self.post_message(OffersLoaded(offers))

    @on(Problem)
    def _problem(self, message: Problem) -> None:
        self.notify(message.text, title=message.title, severity="error", timeout=8)

    @on(SnapshotLoaded)
    def _snapshot(self, message: SnapshotLoaded) -> None:
        self.snapshot = message.snapshot
        # A message can still arrive while the app shuts down and its widgets are gone.
        with contextlib.suppress(NoMatches), self.batch_update():
            self._render_summary()
            self._render_instances()
            self._render_bad()

    @on(OffersLoaded)
    def _offers_loaded(self, message: OffersLoaded) -> None:
        self.offers = message.offers
        with contextlib.suppress(NoMatches):
            self._render_offers()
            self._render_summary()

    # -- rendering ------------------------------------------------------------------------

    def _render_summary(self) -> None:
        snap = self.snapshot
        counts = snap.counts()
        eco = snap.fleet_economics()
        line = Text()
        parts = [
            ("run", counts["running"], "green"),
            ("bench", counts["benchmarking"], "yellow"),
            ("fetch", counts["fetching"], "cyan"),
            ("load", counts["loading"], "blue"),
            ("killed", counts["killed"], "red"),
        ]
        for name, value, style in parts:
            line.append(f"{value}", style=f"bold {style}")
            line.append(f" {name} ")
        line.append(f" ${eco.dph:.2f}/h ", style="bold")
        # Measured: cuzk's counters on the proving workers; estimates are labelled "est".
        if eco.measured_rate is not None:
            line.append(f"{eco.measured_rate:.0f} p/h ", style="bold")
            line.append(f"{'-' if eco.measured_cpp is None else f'${eco.measured_cpp:.4f}'}/proof ")
            if eco.measured_workers < eco.proving_workers:
                line.append(
                    f"({eco.measured_workers}/{eco.proving_workers} measured) ", style="dim"
                )
        elif eco.proving_workers:
            line.append(f"est {eco.est_rate:.0f} p/h ", style="dim")
            line.append(
                f"{'-' if eco.est_cpp is None else f'${eco.est_cpp:.4f}'}/proof ", style="dim"
            )
        else:
            line.append("0 p/h ", style="dim")
        age = self.bridge.vast_age
        if age is not None:
            line.append(f"vast {age:.0f}s ", style="yellow" if age > 120 else "dim")
        elif self.bridge.mode == "attached" and snap.lease is not None:
            beat = time.time() - snap.lease.heartbeat_at
            line.append(f"engine ♥ {beat:.0f}s ", style="yellow" if beat > 30 else "dim")
        badges = []
        if self.opts.demo:
            badges.append(("SIM", "black on cyan"))
        if self.bridge.engine is not None and self.bridge.engine.settings.dry_run:
            badges.append(("DRY-RUN", "black on yellow"))
        if self.read_only:
            badges.append(("READ-ONLY", "black on magenta"))
        if self.bridge.mode == "attached":
            badges.append(("ATTACHED", "black on green"))
        elif self.bridge.mode == "watching":
            badges.append(("NO ENGINE", "black on red"))
        for badge, style in badges:
            line.append(f" {badge} ", style=style)
            line.append(" ")
        self.query_one("#summary", Static).update(line)

    def _visible_offers(self) -> list[RankedOffer]:
        offers = [o for o in self.offers if self.show_bad or not o.bad]
        sort_key = self.ui_state.get("offers_sort", "cpp")
        reverse = bool(self.ui_state.get("offers_sort_reverse", False))
        keyers = {
            "gpu": lambda r: r.offer.gpu_name,
            "n": lambda r: r.offer.num_gpus,
            "vram": lambda r: r.offer.gpu_ram_gb or 0,
            "cpu": lambda r: r.offer.cpu_name or "",
            "cores": lambda r: r.offer.cpu_cores or 0,
            "ram": lambda r: r.offer.cpu_ram_gb or 0,
            "pcie": lambda r: r.offer.pcie_bw or 0,
            "dph": lambda r: r.offer.dph_total,
            "dl": lambda r: r.offer.inet_down or 0,
            "rel": lambda r: r.offer.reliability or 0,
            "loc": lambda r: r.offer.geolocation or "",
            "known": lambda r: r.known_rate or 0,
            "req": lambda r: r.required_rate,
            "bad": lambda r: r.bad,
        }
        if sort_key in keyers:
            offers.sort(key=keyers[sort_key], reverse=reverse)
        elif reverse:
            offers.reverse()  # already ranked by expected $/proof
        if self.row_filter:
            needle = self.row_filter.lower()
            offers = [o for o in offers if needle in _offer_haystack(o)]
        return offers

    def _render_offers(self) -> None:
        table = self.query_one("#offers-table", DataTable)
        rows = []
        keys = []
        for ranked in self._visible_offers():
            o = ranked.offer
            known = ranked.known_rate
            cpp = ranked.expected_cost_per_proof
            cpp_style = "green" if ranked.viable else ("yellow" if cpp is not None else "dim")
            rows.append(
                (
                    t(o.gpu_name, _gpu_style(o.gpu_name)),
                    t(o.num_gpus),
                    t(f"{o.dph_total:.3f}"),
                    t(fmt(cpp, ".4f"), cpp_style),
                    t(f"{ranked.required_rate:.0f}"),
                    t(fmt(known, ".0f"), "bold" if known else "dim"),
                    t(fmt(o.cpu_ram_gb, ".0f"), _ram_style(o.cpu_ram_gb, o.num_gpus)),
                    t("BAD" if ranked.bad else "", "bold red"),
                    t(fmt(o.gpu_ram_gb, ".0f")),
                    t(fmt(o.cpu_cores, ".0f")),
                    t(_short_cpu(o.cpu_name)),
                    t(fmt(o.pcie_bw, ".1f")),
                    t(fmt(o.inet_down, ".0f")),
                    t(fmt(None if o.reliability is None else o.reliability * 100, ".1f")),
                    t(o.geolocation),
                )
            )
            keys.append(str(o.id))
        _fill(table, list(zip(keys, rows, strict=True)))
        hidden = sum(o.bad for o in self.offers) if not self.show_bad else 0
        self.query_one("#panes", TabbedContent).get_tab(
            "offers"
        ).label = f"1 Offers ({len(rows)}{f', {hidden} bad hidden' if hidden else ''})"

    def _render_instances(self) -> None:
        table = self.query_one("#instances-table", DataTable)
        rows: list[tuple[str, tuple[Text, ...]]] = []
        now_wall = time.time()
        current_image = self.opts.config.fleet.image
        live = sorted(self.snapshot.instances, key=lambda r: (r.killed, -(r.created_at or 0)))
        for rec in live[:500]:
            image = Text(sanitize_line(_short_image(rec.image), 60))
            if rec.image and rec.image != current_image:
                image.append(" old", style="bold yellow")
            rows.append((str(rec.vast_id), (
                t(rec.vast_id),
                _stage_text(rec),
                t(f"{rec.gpu_name or '?'} x{rec.num_gpus or 1}"),
                t(fmt(rec.bench_rate, ".1f")),
                _measured_rate(rec),
                _proofs(rec),
                t(fmt(rec.dph_total, ".3f")),
                _cost_per_proof(rec),
                t(_uptime(rec, now_wall, self.snapshot)),
                t(rec.label),
                image,
            )))  # fmt: skip
        _fill(table, rows)

    def _render_bad(self) -> None:
        table = self.query_one("#bad-table", DataTable)
        rows: list[tuple[str, tuple[Text, ...]]] = []
        for entry in self.snapshot.bad:
            rows.append((f"m{entry.machine_id}", (
                t(entry.machine_id),
                t(entry.host_id),
                t(entry.gpu_name),
                t(entry.reason),
                t(entry.source, "yellow" if entry.source == "automatic" else ""),
                t(iso_utc(entry.created_at)),
                t(entry.strikes),
                t(iso_utc(entry.expires_at) if entry.expires_at else "never"),
            )))  # fmt: skip
        for item in self.snapshot.legacy:
            rows.append((f"r{item.id}", (
                t("review", "bold yellow"),
                t(item.host_id),
                t(item.gpu_name),
                t(f"legacy host-level {item.kind}: {item.reason or ''}"),
                t("legacy", "dim"),
                t(iso_utc(item.legacy_added_at) if item.legacy_added_at else None),
                t(""),
                t(""),
            )))  # fmt: skip
        _fill(table, rows)
        review = len(self.snapshot.legacy)
        self.query_one("#panes", TabbedContent).get_tab(
            "bad"
        ).label = (
            f"4 Bad list ({len(self.snapshot.bad)}{f' + {review} to review' if review else ''})"
        )

    def _render_logs_header(self) -> None:
        text = Text()
        if self.log_instance is None and self.log_source != "engine":
            text.append("select an instance (2, then l or enter) — or ] for the engine log",
                        style="dim")  # fmt: skip
        else:
            target = "engine" if self.log_source == "engine" else f"instance {self.log_instance}"
            text.append(f"{target}  ", style="bold")
        for choice in LOG_CHOICES:
            style = "reverse bold" if choice == self.log_source else "dim"
            text.append(f" {choice} ", style=style)
        self.query_one("#logs-header", Static).update(text)

    # -- selection helpers ---------------------------------------------------------------

    def _pane(self) -> str:
        return self.query_one("#panes", TabbedContent).active

    def _selected_offer(self) -> RankedOffer | None:
        table = self.query_one("#offers-table", DataTable)
        key = _cursor_key(table)
        return next((o for o in self.offers if str(o.offer.id) == key), None)

    def _selected_instance(self) -> InstanceRecord | None:
        table = self.query_one("#instances-table", DataTable)
        key = _cursor_key(table)
        return next((r for r in self.snapshot.instances if str(r.vast_id) == key), None)

    def _selected_bad(self) -> int | None:
        key = _cursor_key(self.query_one("#bad-table", DataTable))
        return int(key[1:]) if key and key.startswith("m") else None

    def _guard(self) -> bool:
        if self.read_only:
            self.notify("read-only console: this action is disabled", severity="warning")
            return False
        return True

    # -- actions ---------------------------------------------------------------------------

    def all_bindings(self) -> Iterable[Binding]:
        return [b for b in self.BINDINGS if isinstance(b, Binding)]

    def action_pane(self, pane: str) -> None:
        self.query_one("#panes", TabbedContent).active = pane
        table = {"offers": "#offers-table", "instances": "#instances-table", "bad": "#bad-table"}
        if pane in table:
            self.query_one(table[pane], DataTable).focus()
        else:
            self.query_one(LogView).focus()

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def action_refresh(self) -> None:
        self.refresh_snapshot()
        self.refresh_offers(force=True)
        if self.bridge.engine is not None:
            self.bridge.engine.wake()

    def action_deploy(self) -> None:
        if self._pane() != "offers" or not self._guard():
            return
        ranked = self._selected_offer()
        if ranked is None:
            return
        o = ranked.offer
        min_rate = self.bridge.min_rate_for(o.dph_total)
        body = Text()
        body.append(f"{o.gpu_name} x{o.num_gpus} on machine {o.machine_id} ")
        body.append(f"({sanitize_line(o.geolocation or '?', 60)})\n")
        body.append(f"price ${o.dph_total:.4f}/h", style="bold")
        body.append(f"  → min_rate {min_rate:.0f} proofs/h", style="bold")
        body.append(f" (max ${self.opts.config.fleet.max_cost_per_proof}/proof)\n")
        expected = fmt(ranked.expected_rate, ".0f")
        body.append(f"expected {expected} proofs/h ({ranked.rate_source})")
        if ranked.bad:
            body.append("\nthis machine is on the bad list", style="bold red")

        async def done(ok: bool | None) -> None:
            if ok:
                await self._command("deploy", f"deploy offer {o.id}", offer_id=o.id)

        self.push_screen(ConfirmScreen(f"Rent offer {o.id}?", body, "Rent"), done)

    def action_ignore(self) -> None:
        if not self._guard():
            return
        pane = self._pane()
        if pane == "offers":
            ranked = self._selected_offer()
            if ranked is None:
                return
            machine, gpu, where = (ranked.offer.machine_id, ranked.offer.gpu_name,
                                   ranked.offer.geolocation)  # fmt: skip
        elif pane == "instances":
            rec = self._selected_instance()
            if rec is None or rec.machine_id is None:
                return
            machine, gpu, where = rec.machine_id, rec.gpu_name, rec.geolocation
        else:
            return
        default = f"Not good enough ({gpu}, {sanitize_line(where or '?', 60)})"

        async def done(reason: str | None) -> None:
            if reason:
                await self._command(
                    "ignore", f"ignore machine {machine}", machine_id=machine, reason=reason
                )

        self.push_screen(
            PromptScreen(
                f"Ignore machine {machine}?",
                Text(
                    "The machine (not the host account) goes on the bad list; its live "
                    "instances are destroyed. Reason:"
                ),
                value=default,
                button="Ignore",
            ),
            done,
        )

    def action_destroy(self) -> None:
        if self._pane() != "instances" or not self._guard():
            return
        rec = self._selected_instance()
        if rec is None or rec.killed:
            return
        body = Text(
            f"{rec.label}\n{rec.gpu_name} x{rec.num_gpus} on machine {rec.machine_id}, "
            f"${rec.dph_total or 0:.3f}/h, state {rec.state}"
        )

        async def done(ok: bool | None) -> None:
            if ok:
                await self._command(
                    "destroy", f"destroy {rec.vast_id}", instance_id=rec.vast_id,
                    reason="manually destroyed from the console",
                )  # fmt: skip

        self.push_screen(ConfirmScreen(f"Destroy instance {rec.vast_id}?", body, "Destroy"), done)

    def action_unignore(self) -> None:
        if self._pane() != "bad" or not self._guard():
            return
        machine = self._selected_bad()
        if machine is None:
            return

        async def done(ok: bool | None) -> None:
            if ok:
                await self._command("unignore", f"unignore {machine}", machine_id=machine)

        self.push_screen(
            ConfirmScreen(f"Unignore machine {machine}?", Text("It may be rented again."),
                          "Unignore"),
            done,
        )  # fmt: skip

    def action_add_bad(self) -> None:
        if self._pane() != "bad" or not self._guard():
            return

        def valid(text: str) -> str | None:
            head, _, reason = text.partition(" ")
            if not head.isdigit() or not 0 < int(head) < 2**63:
                return "start with the machine id (a positive number), then the reason"
            return None if reason.strip() else "give a reason after the machine id"

        async def done(text: str | None) -> None:
            if text:
                head, _, reason = text.partition(" ")
                await self._command(
                    "ignore", f"ignore machine {head}", machine_id=int(head), reason=reason.strip()
                )

        self.push_screen(
            PromptScreen("Add a bad machine", Text("machine_id reason (machine, not host id)"),
                         placeholder="31244 GPU errors under load", validate=valid, button="Add"),
            done,
        )  # fmt: skip

    async def _command(self, kind: str, what: str, **args: Any) -> None:
        try:
            command_id = await self.bridge.submit(kind, **args)
        except Exception as exc:
            self.notify(sanitize_line(str(exc), 300), title=what, severity="error")
            return
        self.notify(f"{what}: sent", timeout=3)
        self._await_command(command_id, what)

    @work(exit_on_error=False, group="commands")
    async def _await_command(self, command_id: int, what: str) -> None:
        ok, result = await self.bridge.wait_command(command_id)
        self.notify(
            sanitize_line(result, 300) or what,
            title=what,
            severity="information" if ok else "error",
        )
        self.refresh_snapshot()
        self.refresh_offers(force=True)

    def action_copy_ssh(self) -> None:
        if self._pane() != "instances":
            return
        rec = self._selected_instance()
        if rec is None or not rec.ssh_host:
            self.notify("no ssh endpoint for this instance (yet)", severity="warning")
            return
        command = f"ssh -p {rec.ssh_port} root@{rec.ssh_host}"
        self.copy_to_clipboard(command)
        self.notify(command, title="Copied")

    def action_edit_filter(self) -> None:
        if self._pane() != "offers":
            return

        def valid(text: str) -> str | None:
            try:
                build_search_body(text)
            except QueryError as exc:
                return str(exc)
            return None

        def done(text: str | None) -> None:
            if text is not None:
                self.bridge.set_filter(text)
                self.notify("searching with the new filter", timeout=3)
                self.refresh_offers(force=True)

        self.push_screen(
            PromptScreen("Vast offer filter", Text("vastai query syntax, e.g. gpu_name=RTX_4090"),
                         value=self.opts.config.offers.filter, validate=valid, button="Search"),
            done,
        )  # fmt: skip

    def action_filter_rows(self) -> None:
        if self._pane() != "offers":
            return  # the log view has its own search on /; the other tables are short
        bar = self.query_one("#row-filter-bar")
        bar.display = True
        self.query_one("#row-filter", Input).focus()

    @on(Input.Changed, "#row-filter")
    def _row_filter_changed(self, event: Input.Changed) -> None:
        self.row_filter = event.value.strip()
        self._render_offers()

    @on(Input.Submitted, "#row-filter")
    def _row_filter_done(self) -> None:
        self.action_pane(self._pane())

    def on_key(self, event: Any) -> None:
        if event.key == "escape" and self.query_one("#row-filter", Input).has_focus:
            self.query_one("#row-filter", Input).value = ""
            self.query_one("#row-filter-bar").display = False
            self.action_pane(self._pane())

    def action_sort(self) -> None:
        if self._pane() != "offers":
            return
        keys = ["cpp"] + [key for key, _, _ in OFFER_COLUMNS if key != "cpp"]
        current = self.ui_state.get("offers_sort", "cpp")
        nxt = keys[(keys.index(current) + 1) % len(keys)] if current in keys else "cpp"
        self.ui_state["offers_sort"] = nxt
        self._save_ui_state()
        label = dict((k, lbl) for k, lbl, _ in OFFER_COLUMNS).get(nxt, nxt)
        self.notify(f"offers sorted by {label}", timeout=2)
        self._render_offers()

    def action_sort_reverse(self) -> None:
        if self._pane() != "offers":
            return
        self.ui_state["offers_sort_reverse"] = not self.ui_state.get("offers_sort_reverse")
        self._save_ui_state()
        self._render_offers()

    def action_toggle_bad(self) -> None:
        if self._pane() != "offers":
            return
        self.show_bad = not self.show_bad
        self._render_offers()

    @on(DataTable.RowSelected, "#instances-table")
    def _instance_selected(self) -> None:
        rec = self._selected_instance()
        if rec is None:
            return
        cuzk = (lambda: self.bridge.cuzk_status(rec)) if rec.state == "proving" else None
        self.push_screen(DetailScreen(rec, current_image=self.opts.config.fleet.image, cuzk=cuzk))

    # -- logs -------------------------------------------------------------------------------

    def action_logs_for_selected(self) -> None:
        if self._pane() != "instances":
            return
        rec = self._selected_instance()
        if rec is None:
            return
        self.log_instance = rec.vast_id
        if self.log_source == "engine":
            self.log_source = "all"
        self._restart_logs()
        self.action_pane("logs")

    def action_log_source(self, step: int) -> None:
        if self._pane() != "logs":
            return
        index = LOG_CHOICES.index(self.log_source)
        self.log_source = LOG_CHOICES[(index + step) % len(LOG_CHOICES)]
        self._restart_logs()

    def _restart_logs(self) -> None:
        self._log_token += 1
        view = self.query_one(LogView)
        view.clear()
        self._render_logs_header()
        if self.log_source == "engine":
            self.bridge.rewind_engine_log()
            self.pump_engine_log()
            return
        rec = next((r for r in self.snapshot.instances if r.vast_id == self.log_instance), None)
        if rec is None:
            return
        sources = LOG_SOURCES if self.log_source == "all" else (self.log_source,)
        for source in sources:
            self.stream_log(self._log_token, rec, source)

    @work(exit_on_error=False, group="logs")
    async def stream_log(self, token: int, rec: InstanceRecord, source: str) -> None:
        try:
            async for batch in self.bridge.stream_logs(rec, source):
                if token != self._log_token:
                    return
                self.post_message(LogLines(token, source, batch))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if token == self._log_token:
                self.post_message(LogLines(token, source, [f"[log stream ended: {exc}]"]))

    @on(LogLines)
    def _log_lines(self, message: LogLines) -> None:
        if message.token == self._log_token:
            with contextlib.suppress(NoMatches):
                self.query_one(LogView).append(message.source, message.lines)

    def pump_engine_log(self) -> None:
        if self.log_source != "engine":
            return
        fresh = self.bridge.new_engine_log_lines()
        if fresh:
            with contextlib.suppress(NoMatches):
                self.query_one(LogView).append("engine", fresh)

    # -- remembered UI state -------------------------------------------------------------

    def _load_ui_state(self) -> dict[str, Any]:
        try:
            data = json.loads((state_dir() / "ui.json").read_text())
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict):
            return {}
        known = {key for key, _, _ in OFFER_COLUMNS}
        state: dict[str, Any] = {}
        if data.get("offers_sort") in known:  # a hand-edited file must not crash the console
            state["offers_sort"] = data["offers_sort"]
        if isinstance(data.get("offers_sort_reverse"), bool):
            state["offers_sort_reverse"] = data["offers_sort_reverse"]
        return state

    def _save_ui_state(self) -> None:
        with contextlib.suppress(OSError):
            path = state_dir() / "ui.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(self.ui_state))


# -- small formatting helpers ------------------------------------------------------------


def _fill(table: DataTable, rows: list[tuple[str, tuple[Text, ...]]]) -> None:
    """Replace a table's rows, keeping the cursor on the same key; skip if nothing changed.

    Skipping matters: refilling a table throws away its render cache, and the snapshot
    arrives every second.
    """
    signature = hash(tuple((key, tuple(str(c) for c in cells)) for key, cells in rows))
    if getattr(table, "_vastui_signature", None) == signature:
        return
    table._vastui_signature = signature  # type: ignore[attr-defined]
    keep = _cursor_key(table)
    table.clear()
    for key, cells in rows:
        table.add_row(*cells, key=key)
    _restore_cursor(table, keep)


def _cursor_key(table: DataTable) -> str | None:
    if table.row_count == 0:
        return None
    with contextlib.suppress(Exception):
        row_key, _ = table.coordinate_to_cell_key(table.cursor_coordinate)
        return str(row_key.value)
    return None


def _restore_cursor(table: DataTable, key: str | None) -> None:
    if key is None:
        return
    with contextlib.suppress(Exception):
        table.move_cursor(row=table.get_row_index(key), animate=False)


def _offer_haystack(ranked: RankedOffer) -> str:
    o = ranked.offer
    return " ".join(
        str(x).lower()
        for x in (o.gpu_name, o.geolocation, o.cpu_name, o.machine_id, o.id, o.num_gpus)
    )


def _gpu_style(name: str) -> str:
    if any(k in name for k in ("5090", "4090", "PRO 6000", "H100", "H200", "B200", "5070")):
        return "green"
    if any(k in name for k in ("A100", "4080", "4070", "A6000", "PRO 4000")):
        return "yellow"
    if "3090" in name:
        return "dark_orange"
    return "red"


def _ram_style(ram_gb: float | None, n: int) -> str:
    if not ram_gb:
        return "dim"
    per = ram_gb / max(1, n)
    return (
        "green"
        if per >= 300
        else "yellow"
        if per >= 240
        else "dark_orange"
        if per >= 128
        else "red"
    )


def _short_cpu(name: str | None) -> str:
    if not name:
        return "-"
    for word in ("Processor", "CPU", "(R)", "(TM)", "Core"):
        name = name.replace(word, "")
    return " ".join(name.split())[:14]


def _short_image(image: str | None) -> str:
    if not image:
        return "-"
    return image.rsplit("/", 1)[-1]


def _stage_text(rec: InstanceRecord) -> Text:
    """The state with a five-step progress bar; for the dead, what killed them."""
    if rec.killed:
        return Text(sanitize_line(f"✗ {rec.kill_kind} in {rec.failed_stage}", 60), style="red")
    order = ("loading", "setup", "paramfetch", "benchmark", "proving")
    done = order.index(rec.state) if rec.state in order else 0
    text = Text()
    for i, _stage in enumerate(order):
        text.append("■" if i <= done else "□", style="green" if i < done else "yellow")
    text.append(f" {rec.state}", style=STATE_STYLE.get(rec.state, ""))
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


def _cost_per_proof(rec: InstanceRecord) -> Text:
    """$/proof: measured when production has been measured, else the benchmark's estimate."""
    if rec.dph_total and rec.prod_rate:
        return t(f"{rec.dph_total / rec.prod_rate:.4f}", "bold")
    if rec.dph_total and rec.bench_rate:
        return t(f"~{rec.dph_total / rec.bench_rate:.4f}", "dim")
    return t("-", "dim")


def _uptime(rec: InstanceRecord, now_wall: float, snap: Snapshot) -> str:
    if rec.created_at is None:
        return "-"
    end = rec.killed_at if rec.killed and rec.killed_at else None
    # Stage timestamps follow the engine's clock (simulated time in the demo): measure
    # against the newest timestamp the store has rather than the wall clock.
    newest = max((r.last_seen_at or 0.0) for r in snap.instances) if snap.instances else 0.0
    now = end or max(newest, rec.created_at)
    seconds = max(0.0, now - rec.created_at)
    if seconds < 3600:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def binding_ids() -> set[str]:
    """Every remappable binding id of the console."""
    ids: set[str] = set()
    for cls in (VastuiApp, LogView, DetailScreen):
        ids.update(b.id for b in cls.BINDINGS if isinstance(b, Binding) and b.id)
    return ids


def check_keymap(opts: Options) -> None:
    """An unknown id in [ui.keymap] is a typo: say so instead of ignoring it."""
    known = binding_ids()
    for binding_id in opts.config.ui.keymap:
        if binding_id not in known:
            where = opts.config.path or "config"
            raise ValueError(
                f"{where}: key 'ui.keymap.{binding_id}': unknown binding id "
                f"(known: {', '.join(sorted(known))})"
            )


def run_console(
    opts: Options,
    *,
    read_only: bool = False,
    theme: str | None = None,
    run: RunOptions | None = None,
) -> int:
    check_keymap(opts)
    bridge = FleetBridge(opts, read_only=read_only, run=run)
    app = VastuiApp(opts, read_only=read_only, theme=theme, bridge=bridge)
    # Fail before the screen switches: an unknown theme name is a one-line error.
    probe: App[None] = App()
    register_themes(probe, app.themes)
    source = "--theme" if theme else str(opts.config.path or "config")
    resolve_theme_name(probe, app.theme_choice, source=source)
    return app.run() or 0
