"""The vastui console: the composition of its panes, the summary strip, and message routing.

Workers (async tasks) read the fleet's source (`sources/`: the console's own engine, a headless
engine it attaches to, the store read-only, or fixed data) and post messages; the app routes
them to the panes, which own their tables, bindings and actions (`panes/`). Panes reach the
app through `ConsoleHost` (reads) and the messages they post (requests); actions go to the
engine as store commands.

One file: the hub every message and every pane's read passes through (the palette, the heap
settings and the remembered sort live beside it: palette.py, heap.py, uistate.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from typing import ClassVar, Literal, TypeVar, overload

from rich.text import Text
from textual import on, work
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.css.query import NoMatches
from textual.dom import DOMNode
from textual.notifications import SeverityLevel
from textual.screen import ModalScreen
from textual.widgets import TabbedContent, TabPane

from vastui.backend import Options
from vastui.config import Config, state_dir
from vastui.console.detail import DetailScreen
from vastui.console.dialogs import ConfirmScreen, PromptScreen, QuitScreen
from vastui.console.footer import KeyFooter
from vastui.console.heap import settle_heap
from vastui.console.help import HelpScreen, all_binding_ids, live_bindings
from vastui.console.logview import LogView
from vastui.console.logviewport import LogViewport
from vastui.console.messages import (
    CopyText,
    OffersLoaded,
    Problem,
    SendCommand,
    SnapshotLoaded,
    TitleChanged,
)
from vastui.console.outbox import Outbox
from vastui.console.palette import VastuiCommands
from vastui.console.panes import (
    BadListPane,
    ClusterPane,
    InstancesPane,
    LogsPane,
    OffersPane,
    TablePane,
)
from vastui.console.panes.base import UiState
from vastui.console.snapshot import Snapshot
from vastui.console.sources import FleetSource, choose_source
from vastui.console.sources.storeside import NO_ANSWER_YET
from vastui.console.summary import STRIP_HELP, SpendView, StripState, SummaryStrip
from vastui.console.terminal import TerminalGuard, guarded_terminal
from vastui.console.themes import load_theme_dirs, register_themes, resolve_theme_name, theme_dirs
from vastui.console.uistate import load_ui_state, save_ui_state
from vastui.domain.delivery import Delivery
from vastui.domain.worker import InstanceRecord
from vastui.engine.ranking import RankedOffer
from vastui.engine.runtime import RunOptions
from vastui.engine.spend import worker_spent
from vastui.pricing import min_rate
from vastui.sanitize import sanitize_line
from vastui.store import StoreError

log = logging.getLogger("vastui.console")

PANE_IDS = ("offers", "instances", "logs", "bad", "cluster")
WAIT_NOTICE_S = 10.0  # a command waiting for the database is said again this often
FRAME_SWITCH_INTERVAL = 0.001  # seconds: see on_mount
Pane = OffersPane | InstancesPane | LogsPane | BadListPane | ClusterPane
PANE_CLASSES: dict[str, type[Pane]] = {
    "offers": OffersPane, "instances": InstancesPane, "logs": LogsPane, "bad": BadListPane,
    "cluster": ClusterPane,
}  # fmt: skip
T = TypeVar("T")


class VastuiApp(App[int]):
    TITLE = "vastui"
    COMMANDS: ClassVar = App.COMMANDS | {VastuiCommands}
    CSS_PATH = "vastui.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("1", "show_pane('offers')", "Offers", id="pane-offers", show=False),
        Binding("2", "show_pane('instances')", "Instances", id="pane-instances", show=False),
        Binding("3", "show_pane('logs')", "Logs", id="pane-logs", show=False),
        Binding("4", "show_pane('bad')", "Bad list", id="pane-bad", show=False),
        Binding("5", "show_pane('cluster')", "Cluster", id="pane-cluster", show=False),
        Binding("question_mark", "help", "Help", id="help", key_display="?",
                tooltip="Keys, columns and the summary strip explained"),
        Binding("r", "refresh", "Refresh", id="refresh", tooltip="Reload offers and the fleet"),
        Binding("ctrl+q", "quit", "Quit", id="quit", priority=True,
                tooltip="Quit (asks first while this console's engine has live instances)"),
    ]  # fmt: skip

    def __init__(
        self,
        opts: Options,
        source: FleetSource,
        *,
        read_only: bool = False,
        theme: str | None = None,
    ) -> None:
        super().__init__()
        self.opts = opts
        self.source = source
        self.read_only = read_only
        self.theme_choice = theme or opts.config.ui.theme
        # Loaded before the app starts so a bad theme file is a one-line error, not a crash.
        self.themes = load_theme_dirs(theme_dirs())
        self.snapshot = Snapshot()
        self.offers: list[RankedOffer] = []
        self.ui_state: UiState = load_ui_state()
        self.handover = False  # set when the operator chose to hand the fleet to a headless engine
        # The terminal's writer, when run_console wraps it: its loss stops the console.
        self.terminal_guard: TerminalGuard | None = None
        self._offers_seen: int | None = None
        self._detached_told = False
        self._switch_interval = sys.getswitchinterval()
        self._gc_thresholds = gc.get_threshold()
        self.outbox = Outbox(source.submit)  # commands kept while the database is busy

    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: SeverityLevel = "information",
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
        yield SummaryStrip(id="summary")
        with TabbedContent(initial="offers", id="panes"):
            with TabPane("1 Offers", id="offers"):
                yield OffersPane(self, id="offers-pane")
            with TabPane("2 Instances", id="instances"):
                yield InstancesPane(self, id="instances-pane")
            with TabPane("3 Logs", id="logs"):
                yield LogsPane(self, id="logs-pane")
            with TabPane("4 Bad list", id="bad"):
                yield BadListPane(self, id="bad-pane")
            with TabPane("5 Cluster", id="cluster"):
                yield ClusterPane(self, id="cluster-pane")
        yield KeyFooter()

    def pane_classes(self) -> list[tuple[str, type[DOMNode]]]:
        return list(PANE_CLASSES.items())

    @overload
    def pane(self, name: Literal["offers"]) -> OffersPane: ...
    @overload
    def pane(self, name: Literal["instances"]) -> InstancesPane: ...
    @overload
    def pane(self, name: Literal["logs"]) -> LogsPane: ...
    @overload
    def pane(self, name: Literal["bad"]) -> BadListPane: ...
    @overload
    def pane(self, name: Literal["cluster"]) -> ClusterPane: ...
    @overload
    def pane(self, name: str) -> Pane: ...
    def pane(self, name: str) -> Pane:
        return self.query_one(f"#{name}-pane", PANE_CLASSES[name])

    async def on_mount(self) -> None:
        # Textual writes each frame from a writer thread, which must take the GIL from the
        # busy event loop: at Python's 5 ms switch interval a finished frame waited 10-20 ms
        # to reach the terminal (bench/keys.py); at 1 ms, about 2.
        self._switch_interval = sys.getswitchinterval()
        sys.setswitchinterval(FRAME_SWITCH_INTERVAL)
        register_themes(self, self.themes)
        self.theme = resolve_theme_name(self, self.theme_choice)
        if self.opts.config.ui.keymap:
            self.set_keymap(self.opts.config.ui.keymap)
        # A closed terminal or a kill should still stop the engine and its workers cleanly.
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGHUP, signal.SIGTERM):
                loop.add_signal_handler(sig, self.exit)
        # ... and so should a terminal that went away without a SIGHUP (vastui/console/terminal.py)
        if self.terminal_guard is not None:
            loop = asyncio.get_running_loop()

            def lost() -> None:  # from the guard's thread
                loop.call_soon_threadsafe(self._terminal_lost)

            self.terminal_guard.on_lost(lost)
        self.render_summary()
        self.pane("offers").focus_table()
        self.start_source()

    def _terminal_lost(self) -> None:
        log.warning("the terminal went away: stopping")
        self.exit()

    @work(exit_on_error=False, group="source")
    async def start_source(self) -> None:
        try:
            await self.source.start()
        except Exception as exc:
            self.post_message(Problem(str(exc), "Could not start"))
            return
        notice = self.source.started_notice()
        if notice is not None:
            title, text = notice
            self.notify(text, title=title, markup=False)
        self.set_interval(1.0, self.refresh_snapshot)
        self.set_interval(5.0, self.refresh_offers)
        self.set_interval(1.0, self._pump_engine_log)
        self.refresh_snapshot()
        self.refresh_offers()

    async def on_unmount(self) -> None:
        sys.setswitchinterval(self._switch_interval)
        gc.unfreeze()  # what settle_heap froze is the garbage collector's again
        gc.set_threshold(*self._gc_thresholds)
        with contextlib.suppress(NoMatches):
            self.pane("logs").stop()
        with contextlib.suppress(Exception):
            await self.source.close()

    # -- data loading (workers post, handlers route) -----------------------------------

    @work(exclusive=True, exit_on_error=False, group="snapshot")
    async def refresh_snapshot(self) -> None:
        try:
            self.post_message(SnapshotLoaded(await self.source.snapshot()))
        except Exception as exc:
            self.post_message(Problem(str(exc), "Store"))

    @work(exclusive=True, exit_on_error=False, group="offers")
    async def refresh_offers(self, force: bool = False) -> None:
        try:
            offers = await self.source.offers(force=force)
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
        if self.source.detached_reason is not None and not self._detached_told:
            self._detached_told = True
            self.notify(
                detached_text(self.source.detached_reason),
                title="Detached",
                severity="error",
                timeout=15,
            )
        # A message can still arrive while the app shuts down and its widgets are gone.
        with contextlib.suppress(NoMatches), self.batch_update():
            self.render_summary()
            self.pane("instances").refill()
            self.pane("bad").refill()
            self.pane("cluster").refill()
            self.refresh_titles()

    @on(OffersLoaded)
    def _offers_loaded(self, message: OffersLoaded) -> None:
        self.offers = message.offers
        with contextlib.suppress(NoMatches):
            self.pane("offers").refill()
            self.refresh_titles()
        self.call_after_refresh(settle_heap)

    def refresh_titles(self) -> None:
        tabs = self.query_one("#panes", TabbedContent)
        panes = (
            self.pane("offers"),
            self.pane("instances"),
            self.pane("bad"),
            self.pane("cluster"),
        )
        for pane in panes:
            tab, title = tabs.get_tab(pane.PANE), pane.title()
            if str(tab.label) != title:  # a new label lays the tab bar out again
                tab.label = title

    def _pump_engine_log(self) -> None:
        with contextlib.suppress(NoMatches):
            self.pane("logs").pump_engine_log()

    # -- what panes ask for (their messages) ---------------------------------------------

    @on(SendCommand)
    async def _send_command(self, message: SendCommand) -> None:
        await self.command(message.kind, message.what, **message.args)

    @on(TitleChanged)
    def _title_changed(self) -> None:
        with contextlib.suppress(NoMatches):
            self.refresh_titles()

    @on(CopyText)
    def _copy(self, message: CopyText) -> None:
        self.copy_text(message.text)

    @on(OffersPane.FilterChosen)
    def _filter_chosen(self, message: OffersPane.FilterChosen) -> None:
        self.source.set_filter(message.text)
        self.notify(
            "this view searches with the new filter; the engine keeps renting with the "
            "configured one",
            timeout=4,
        )
        self.refresh_offers(force=True)

    @on(InstancesPane.DetailAsked)
    def _detail_asked(self, message: InstancesPane.DetailAsked) -> None:
        self.open_detail(message.record)

    @on(InstancesPane.LogsAsked)
    def _logs_asked(self, message: InstancesPane.LogsAsked) -> None:
        self.open_logs(message.record)

    # -- the strip -------------------------------------------------------------------------

    def render_summary(self) -> None:
        snap = self.snapshot
        badges: list[tuple[str, str]] = []
        if self.opts.demo:
            badges.append(("SIM", "black on cyan"))
        status = snap.engine_status
        if status is not None and status.dry_run:
            badges.append(("DRY-RUN", "black on yellow"))
        if self.read_only:
            badges.append(("READ-ONLY", "black on magenta"))
        badge = self.source.badge()
        if badge is not None:
            badges.append((badge.text, badge.style))
        fresh = self.source.freshness(snap)
        spend = snap.spend
        state = StripState(
            snapshot=snap,
            status=status,
            spend=None if spend is None else SpendView(spend.today, spend.total, spend.rejected),
            badges=tuple(badges),
            freshness=None if fresh is None else (fresh.label, fresh.age_s, fresh.warn_s),
            detached=self.source.detached_reason,
        )
        self.query_one(SummaryStrip).show(state)

    # -- what panes read of the app (ConsoleHost) -------------------------------------

    @property
    def config(self) -> Config:
        return self.opts.config

    def clock(self) -> float:
        """The fleet's one clock (simulated time in the demo): every age is measured on it."""
        return self.source.now()

    def spent(self, rec: InstanceRecord) -> float | None:
        return worker_spent(rec, self.source.now())

    def delivery(self) -> Delivery | None:
        """The fleet's headline as the engine last published it (the strip's)."""
        status = self.snapshot.engine_status
        return status.delivery if status is not None else None

    def min_rate_for(self, dph_total: float) -> float:
        return min_rate(dph_total, self.opts.config.fleet.max_cost_per_proof)

    @property
    def view_filter(self) -> str:
        return self.source.view_filter

    def ssh_command(self, rec: InstanceRecord) -> str | None:
        return self.source.ssh_command(rec)

    def log_stream(self, rec: InstanceRecord, source: str) -> AsyncIterator[list[str]]:
        return self.source.stream_logs(rec, source)

    def engine_log_lines(self, *, rewind: bool = False) -> list[str]:
        if rewind:
            self.source.rewind_engine_log()
        return self.source.new_engine_log_lines()

    def ask(self, screen: ModalScreen[T], done: Callable[[T | None], None]) -> None:
        self.push_screen(screen, done)

    def guard(self) -> bool:
        if self.read_only:
            self.notify("read-only console: this action is disabled", severity="warning")
            return False
        if self.source.detached_reason is not None:
            self.notify(
                "no engine: the headless engine is gone, so nothing would carry this out. "
                "Start `vastui --engine-only` (or restart the console to run one).",
                title="Refused",
                severity="error",
            )
            return False
        return True

    def save_ui_state(self) -> None:
        save_ui_state(self.ui_state)

    # -- what the app does for them ------------------------------------------------------

    def show_pane(self, pane: str) -> None:
        self.query_one("#panes", TabbedContent).active = pane
        self.pane(pane).focus_table()

    def open_logs(self, rec: InstanceRecord) -> None:
        self.show_pane("logs")
        self.pane("logs").show_instance(rec)

    def open_detail(self, rec: InstanceRecord) -> None:
        def latest(vast_id: int) -> InstanceRecord | None:
            return next((r for r in self.snapshot.instances if r.vast_id == vast_id), None)

        self.push_screen(
            DetailScreen(
                rec,
                current_image=self.opts.config.fleet.image,
                latest=latest,
                cuzk=self.source.cuzk_status,
                now=self.clock,
                spend=self.spent,
                ssh_command=self.source.ssh_command,
                listen_port_base=self.opts.config.curio.listen_port_base,
                fleet=self.delivery,
            )
        )

    def copy_text(self, text: str) -> None:
        """Copy to the clipboard and say truthfully where it went: the terminal's clipboard
        (OSC 52, which a terminal may ignore) and, under tmux, tmux's paste buffer."""
        self.copy_to_clipboard(text)
        where = ["the terminal clipboard (OSC 52)"]
        if os.environ.get("TMUX") and shutil.which("tmux"):
            try:
                subprocess.run(
                    ["tmux", "load-buffer", "-"], input=text.encode(), timeout=2, check=True,
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                )  # fmt: skip
                where.insert(0, "the tmux buffer (prefix ] pastes)")
            except (OSError, subprocess.SubprocessError):
                where.append("not tmux's buffer (tmux load-buffer failed)")
        self.notify(f"{text}\nsent to {' and '.join(where)}", title="Copied", timeout=6)

    async def command(self, kind: str, what: str, **args: int | str) -> None:
        """Send an operator's command in the background: a busy database keeps it waiting
        (said on screen until it is stored), never dropped, and never holds the keys up."""
        self._send_command_through(kind, what, dict(args))

    @work(exit_on_error=False, group="commands")
    async def _send_command_through(self, kind: str, what: str, args: dict[str, int | str]) -> None:
        told_at: float | None = None  # when the last notice was given, and what for
        told_for = ""

        def waiting(waited: float, on: str) -> None:
            nonlocal told_at, told_for
            if told_at is None or waited - told_at >= WAIT_NOTICE_S or on != told_for:
                told_at, told_for = waited, on  # one notice on screen at a time
                self.notify(
                    f"{what}: waiting for {on} (retrying); kept until it is sent",
                    title=what, severity="warning", timeout=WAIT_NOTICE_S + 1,
                )  # fmt: skip

        try:
            command_id = await self.outbox.send(what, kind, args, waiting)
        except Exception as exc:
            self.notify(sanitize_line(str(exc), 300), title=what, severity="error")
            return
        if told_at is None:
            self.notify(f"{what}: sent", timeout=3)
        else:
            self.notify(f"{what}: sent after waiting for {told_for}", title=what, timeout=6)
        await self._await_command(command_id, what)

    async def _await_command(self, command_id: int, what: str) -> None:
        """Its answer, said when it comes: an engine that holds a command while the database
        is busy answers late, and the operator hears it then."""
        ok, result = await self.source.wait_command(command_id)
        while not ok and result == NO_ANSWER_YET:
            self.notify(f"{what}: {NO_ANSWER_YET}", title=what, severity="warning")
            ok, result = await self.source.wait_command(command_id)
        self.notify(
            sanitize_line(result, 300) or what,
            title=what,
            severity="information" if ok else "error",
        )
        self.refresh_snapshot()
        self.refresh_offers(force=True)

    # -- app actions -----------------------------------------------------------------------

    def action_show_pane(self, pane: str) -> None:
        self.show_pane(pane)

    def action_help(self) -> None:
        self.push_screen(
            HelpScreen(
                type(self),
                [
                    ("Offers", OffersPane, OffersPane.COLUMNS),
                    ("Instances", InstancesPane, InstancesPane.COLUMNS),
                    ("Logs", LogsPane, ()),
                    ("Bad list", BadListPane, BadListPane.COLUMNS),
                    ("Cluster", ClusterPane, ClusterPane.COLUMNS),
                ],
                [("Log view", LogView), ("Instance details", DetailScreen)],
                STRIP_HELP,
            )
        )

    def action_refresh(self) -> None:
        self.refresh_snapshot()
        self.refresh_offers(force=True)
        self.source.wake()

    def action_help_quit(self) -> None:
        """ctrl+c: say how to quit, in plain text (the default carries markup we never parse)."""
        keys = [k for k, b in live_bindings(self, type(self)) if b.action == "quit"]
        self.notify(f"press {keys[0] if keys else 'ctrl+q'} to quit", timeout=3)

    async def action_quit(self) -> None:
        waiting = self.outbox.waiting
        if not waiting:
            self._quit()
            return
        body = Text(
            f"{len(waiting)} command(s) still wait for the database, not sent: "
            f"{'; '.join(waiting)}. Quitting drops them."
        )

        def done(quit_anyway: bool | None) -> None:
            if quit_anyway:
                self._quit()

        self.push_screen(ConfirmScreen("Quit vastui?", body, "Quit, dropping them"), done)

    def _quit(self) -> None:
        """Quit, asking first while this console's engine has live instances."""
        live = self.source.own_live_instances(self.snapshot)
        if not live:
            self.exit()
            return
        dph = sum(r.dph_total or 0.0 for r in live)
        body = Text()
        body.append(f"This console's engine supervises {len(live)} live instance(s) ")
        body.append(f"(${dph:.2f}/h).\n", style="bold")
        body.append("They keep billing on Vast after you quit, with nothing to destroy them at ")
        body.append("their deadlines or when they fail.\n")
        can = self.source.can_hand_over()
        if can:
            body.append("Hand over: this engine stops and a headless one (`vastui --engine-only`) ")
            body.append("takes the fleet on; later consoles attach to it.")
        else:
            body.append("The simulated cloud lives in this process: quitting ends it.", style="dim")

        def done(choice: str | None) -> None:
            if choice == "handover":
                self.handover = True
                self.exit()
            elif choice == "quit":
                self.exit()

        self.push_screen(QuitScreen(body, can_hand_over=can), done)


def detached_text(reason: str) -> str:
    """What the console says once the engine it attached to is gone, and why."""
    return (
        f"the headless engine is gone: {reason}. Nothing supervises the fleet, and commands "
        "are refused until an engine runs again."
    )


def binding_classes() -> tuple[type[DOMNode], ...]:
    """Every class of the console that declares bindings: each binding has an id."""
    return (
        VastuiApp, OffersPane, InstancesPane, LogsPane, BadListPane, ClusterPane, TablePane,
        LogView,
        LogViewport, DetailScreen, HelpScreen, ConfirmScreen, PromptScreen, QuitScreen,
    )  # fmt: skip


def binding_ids() -> set[str]:
    """Every remappable binding id of the console."""
    return all_binding_ids(binding_classes())


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


def hand_over(opts: Options) -> int | None:
    """Start a headless engine on the same config and database, detached from this terminal
    (after this console's engine has stopped and released the lease). Its pid, or None."""
    argv = [sys.executable, "-m", "vastui", "--engine-only", "--db", str(opts.db_path)]
    if opts.config.path is not None:
        argv[3:3] = ["--config", str(opts.config.path)]
    if opts.api_url:
        argv[3:3] = ["--api-url", opts.api_url]
    # It writes its own log file (vastui/engine/headless.py); this terminal is going away.
    proc = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    return proc.pid


def run_console(
    opts: Options,
    *,
    read_only: bool = False,
    theme: str | None = None,
    run: RunOptions | None = None,
) -> int:
    check_keymap(opts)
    try:  # which source, by the database's lease: an unreadable database is one line
        source = asyncio.run(choose_source(opts, read_only=read_only, run=run))
    except StoreError as exc:
        raise ValueError(str(exc)) from None
    app = VastuiApp(opts, source, read_only=read_only, theme=theme)
    # Fail before the screen switches: an unknown theme name is a one-line error.
    probe: App[None] = App()
    register_themes(probe, app.themes)
    where = "--theme" if theme else str(opts.config.path or "config")
    resolve_theme_name(probe, app.theme_choice, source=where)
    with guarded_terminal() as guard:
        app.terminal_guard = guard
        code = app.run() or 0
    if app.handover:
        pid = hand_over(opts)
        print(f"vastui: handed the fleet over to a headless engine (pid {pid}); "
              f"`vastui` attaches to it, its log is {state_dir() / 'engine.log'}")  # fmt: skip
    return code
