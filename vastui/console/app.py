"""First cut of the console: offers, instances, bad list and events, read from the Vast API
and the store. The full console (actions, logs, themes, keymap) builds on this layout."""

from __future__ import annotations

import time
from typing import Any, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.widgets import DataTable, Footer, Header, Static, TabbedContent, TabPane

from vastui.backend import Options, make_client, make_demo_cloud
from vastui.sanitize import sanitize_line
from vastui.store import Store
from vastui.vast.models import Offer


def _t(value: Any, fmt: str = "{}") -> Text:
    """Cells are Text, never markup: offer fields are remote, untrusted text."""
    if value is None:
        return Text("-", style="dim")
    return Text(sanitize_line(fmt.format(value), 80))


class DataLoaded(Message):
    def __init__(self, offers: list[Offer], bad: set[int], snapshot: dict[str, list]) -> None:
        super().__init__()
        self.offers = offers
        self.bad = bad
        self.snapshot = snapshot


class LoadFailed(Message):
    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


class VastuiApp(App[int]):
    TITLE = "vastui"
    CSS = """
    #summary { height: 1; padding: 0 1; background: $boost; }
    TabbedContent, TabPane, DataTable { height: 1fr; }
    """
    BINDINGS: ClassVar[list[Binding]] = [
        Binding("1", "show_tab('offers')", "Offers", id="pane-offers"),
        Binding("2", "show_tab('instances')", "Instances", id="pane-instances"),
        Binding("3", "show_tab('bad')", "Bad list", id="pane-bad"),
        Binding("4", "show_tab('events')", "Events", id="pane-events"),
        Binding("r", "refresh", "Refresh", id="refresh"),
    ]

    def __init__(self, opts: Options) -> None:
        super().__init__()
        self.opts = opts
        self.sub_title = "simulated cloud" if opts.demo else opts.config.vast.api_url
        self.cloud = make_demo_cloud(opts.seed, opts.speed) if opts.demo else None
        self.client = make_client(opts, self.cloud)
        self.loaded_at: float | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("loading…", id="summary")
        with TabbedContent(initial="offers"):
            with TabPane("Offers [1]", id="offers"):
                yield DataTable(id="offers-table", cursor_type="row", zebra_stripes=True)
            with TabPane("Instances [2]", id="instances"):
                yield DataTable(id="instances-table", cursor_type="row")
            with TabPane("Bad list [3]", id="bad"):
                yield DataTable(id="bad-table", cursor_type="row")
            with TabPane("Events [4]", id="events"):
                yield DataTable(id="events-table", cursor_type="row")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#offers-table", DataTable).add_columns(
            "GPU", "#", "VRAM", "RAM GB", "Cores", "$/h", "min p/h", "DL Mb/s", "Rel%", "Location",
            "Machine", "Bad",
        )  # fmt: skip
        self.query_one("#instances-table", DataTable).add_columns(
            "Id", "Label", "State", "Stage", "GPU", "Machine", "$/h", "Rate", "Min", "Reason"
        )
        self.query_one("#bad-table", DataTable).add_columns(
            "Machine", "Host", "GPU", "Reason", "Source", "Created", "Expires"
        )
        self.query_one("#events-table", DataTable).add_columns(
            "Time", "Kind", "Instance", "Machine", "Reason"
        )
        self.action_refresh()

    def action_show_tab(self, tab: str) -> None:
        self.query_one(TabbedContent).active = tab

    def action_refresh(self) -> None:
        self.query_one("#summary", Static).update("refreshing…")
        self.load()

    @work(exclusive=True, exit_on_error=False, group="load")
    async def load(self) -> None:
        cfg = self.opts.config
        try:
            result = await self.client.search_offers(
                cfg.offers.filter, order=cfg.offers.order, limit=cfg.offers.limit
            )
            store = await Store.open(self.opts.db_path)
            try:
                bad = await store.bad_machine_ids()
                snapshot = {
                    "instances": [r.to_json() for r in await store.list_instances()],
                    "bad": [e.to_json() for e in await store.list_bad()]
                    + [e.to_json() for e in await store.list_legacy_review()],
                    "events": [e.to_json() for e in await store.list_events()][-500:],
                }
            finally:
                await store.close()
        except Exception as exc:  # shown, never fatal: the console must survive the API
            self.post_message(LoadFailed(sanitize_line(str(exc), 300)))
            return
        self.post_message(DataLoaded(result.offers, bad, snapshot))

    @on(LoadFailed)
    def _load_failed(self, message: LoadFailed) -> None:
        self.query_one("#summary", Static).update(Text(f"error: {message.error}", style="bold red"))
        self.notify(message.error, title="Refresh failed", severity="error")

    @on(DataLoaded)
    def _data_loaded(self, message: DataLoaded) -> None:
        cfg = self.opts.config
        self.loaded_at = time.time()
        offers = sorted(message.offers, key=lambda o: o.dph_total)
        visible = [o for o in offers if o.machine_id not in message.bad]
        table = self.query_one("#offers-table", DataTable)
        table.clear()
        for o in visible:
            table.add_row(
                _t(o.gpu_name), _t(o.num_gpus), _t(o.gpu_ram_gb, "{:.0f}"),
                _t(o.cpu_ram_gb, "{:.0f}"), _t(o.cpu_cores, "{:.0f}"), _t(o.dph_total, "{:.3f}"),
                _t(cfg.min_rate_for(o.dph_total), "{:.0f}"), _t(o.inet_down, "{:.0f}"),
                _t(None if o.reliability is None else o.reliability * 100, "{:.1f}"),
                _t(o.geolocation), _t(o.machine_id), _t(""),
                key=str(o.id),
            )  # fmt: skip
        table = self.query_one("#instances-table", DataTable)
        table.clear()
        for r in message.snapshot["instances"]:
            table.add_row(*(_t(r[k]) for k in (
                "id", "label", "state", "stage", "gpu_name", "machine_id", "dph_total",
                "bench_rate", "min_rate", "kill_reason")))  # fmt: skip
        table = self.query_one("#bad-table", DataTable)
        table.clear()
        for r in message.snapshot["bad"]:
            table.add_row(*(_t(r[k]) for k in (
                "machine_id", "host_id", "gpu_name", "reason", "source", "created_at",
                "expires_at")))  # fmt: skip
        table = self.query_one("#events-table", DataTable)
        table.clear()
        for r in reversed(message.snapshot["events"]):
            table.add_row(
                *(_t(r[k]) for k in ("ts", "kind", "instance_id", "machine_id", "reason"))
            )
        hidden = len(offers) - len(visible)
        self.query_one("#summary", Static).update(
            Text(
                f"{len(visible)} offers ({hidden} on bad machines hidden) · "
                f"{len(message.snapshot['instances'])} instances · "
                f"{len(message.snapshot['bad'])} bad-list entries · "
                f"{'SIM' if self.opts.demo else 'VAST'}"
            )
        )

    async def on_unmount(self) -> None:
        await self.client.aclose()


def run_console(opts: Options) -> int:
    return VastuiApp(opts).run() or 0
