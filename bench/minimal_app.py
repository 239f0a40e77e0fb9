"""The yardstick for bench/keys.py: a minimal Textual app with the console's rows in plain
DataTables, doing what anyone's first Textual app would do for the same keys.

Two tabs (the offers and the instances, as the console's panes 1 and 2), `s` sorts the offers
by the next column (marked ▲ in its header, as the console does), `/` opens a find input that
keeps the rows containing its text, enter on an instance opens a detail screen, `q` closes it.
Cells are built once (the same `Text` cells the console shows); nothing else runs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from rich.text import Text
from textual import on
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.events import Key
from textual.screen import ModalScreen
from textual.widgets import DataTable, Footer, Input, Label, Static, TabbedContent, TabPane


@dataclass(frozen=True)
class Rows:
    """One table's data: column (key, label, width), rows (key, cells, sort values, haystack)."""

    columns: Sequence[tuple[str, str, int]]
    keys: Sequence[str]
    cells: Sequence[Sequence[Text]]
    sort_values: Sequence[dict[str, Any]]
    haystacks: Sequence[str]


class Detail(ModalScreen[None]):
    BINDINGS: ClassVar[list[Binding]] = [Binding("escape,q", "dismiss", "Close")]
    DEFAULT_CSS = """
    Detail { align: center middle; }
    #detail { width: 110; height: 90%; border: thick $primary; background: $surface; }
    """

    def __init__(self, key: str, cells: Sequence[Text]) -> None:
        super().__init__()
        self.key = key
        self.cells = cells

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="detail"):
            yield Label(Text(f"Instance {self.key}", style="bold"))
            yield Static(Text("\n").join(self.cells))
            yield Label(Text("Diagnosis", style="bold"))
            yield Static(Text("alive; no failure"))
            yield Label(Text("cuzk status", style="bold"))
            yield Static(Text("synthesis 10/25 active"))  # bench/keys.py SETTLED


class MinimalApp(App[None]):
    BINDINGS: ClassVar[list[Binding]] = [
        Binding("1", "show('offers')", "Offers"),
        Binding("2", "show('instances')", "Instances"),
        Binding("s", "sort", "Sort"),
        Binding("slash", "find", "Find"),
    ]
    CSS = """
    TabbedContent, TabPane, DataTable { height: 1fr; }
    #find-bar { height: 3; dock: bottom; display: none; }
    #find-label { width: auto; padding: 1 1 0 1; }
    #find { width: 1fr; }
    """

    def __init__(
        self, offers: Rows, instances: Rows, sort_cycle: Sequence[str], first: str,
        detail: Callable[[int], ModalScreen[None]] | None = None,
    ) -> None:  # fmt: skip
        super().__init__()
        self.offers = offers
        self.instances = instances
        self.sort_cycle = list(sort_cycle)
        self.sort_key = first
        self.needle = ""
        # the screen enter opens on instance row i (bench/detail.py shows the console's text)
        self.detail = detail or (lambda i: Detail(instances.keys[i], instances.cells[i]))

    def compose(self) -> ComposeResult:
        with TabbedContent(initial="offers"):
            with TabPane("1 Offers", id="offers"):
                yield DataTable(id="offers-table", cursor_type="row", zebra_stripes=True)
                with Horizontal(id="find-bar"):
                    yield Static("find:", id="find-label")
                    yield Input(id="find")
            with TabPane("2 Instances", id="instances"):
                yield DataTable(id="instances-table", cursor_type="row", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        inst = self.query_one("#instances-table", DataTable)
        for key, label, width in self.instances.columns:
            inst.add_column(label, width=max(width, len(label)), key=key)
        inst.add_rows(self.instances.cells)
        self._fill_offers()
        self.query_one("#offers-table", DataTable).focus()

    def _fill_offers(self) -> None:
        """Columns (the sorted one marked) and the rows that contain the needle, sorted."""
        table = self.query_one("#offers-table", DataTable)
        table.clear(columns=True)
        for key, label, width in self.offers.columns:
            label = f"{label} ▲" if key == self.sort_key else label
            table.add_column(label, width=max(width, len(label)), key=key)
        rows = self.offers
        shown = [i for i, hay in enumerate(rows.haystacks) if not self.needle or self.needle in hay]
        value: Callable[[int], Any] = lambda i: rows.sort_values[i][self.sort_key]  # noqa: E731
        present = sorted((i for i in shown if value(i) is not None), key=value)
        missing = [i for i in shown if value(i) is None]
        table.add_rows(rows.cells[i] for i in present + missing)

    def action_show(self, tab: str) -> None:
        self.query_one(TabbedContent).active = tab
        self.query_one(f"#{tab}-table", DataTable).focus()

    def action_sort(self) -> None:
        cycle = self.sort_cycle
        self.sort_key = cycle[(cycle.index(self.sort_key) + 1) % len(cycle)]
        self._fill_offers()

    def action_find(self) -> None:
        self.query_one("#find-bar").display = True
        self.query_one("#find", Input).focus()

    @on(Input.Changed, "#find")
    def _find(self, event: Input.Changed) -> None:
        self.needle = event.value.strip().lower()
        self._fill_offers()

    def on_key(self, event: Key) -> None:
        if event.key == "escape" and self.query_one("#find", Input).has_focus:
            event.stop()
            self.query_one("#find", Input).value = ""
            self.query_one("#find-bar").display = False
            self.query_one("#offers-table", DataTable).focus()

    @on(DataTable.RowSelected, "#instances-table")
    def _detail(self, event: DataTable.RowSelected) -> None:
        self.push_screen(self.detail(event.cursor_row))
