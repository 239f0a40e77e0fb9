"""What every table pane shares: its columns (with what each means, for help), a table it owns,
sorting by any column with the sorted header marked ▲/▼, and a cursor that stays on its row
across refreshes.

A pane owns its bindings and actions; the app only composes panes and routes messages to them.
Panes reach the rest of the console through `ConsoleHost` (the app), never through globals.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from rich.text import Text
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import DataTable

if TYPE_CHECKING:
    from vastui.backend import Options
    from vastui.console.bridge import FleetBridge, Snapshot
    from vastui.engine.ranking import RankedOffer
    from vastui.store import InstanceRecord


@dataclass(frozen=True)
class Column:
    key: str
    label: str
    width: int
    doc: str  # what the column means: help lists it


class ConsoleHost(Protocol):
    """What a pane may ask of the app."""

    bridge: FleetBridge
    opts: Options
    snapshot: Snapshot
    offers: list[RankedOffer]
    read_only: bool
    ui_state: dict[str, Any]

    def save_ui_state(self) -> None: ...
    def guard(self) -> bool: ...
    async def command(self, kind: str, what: str, **args: Any) -> None: ...
    def show_pane(self, pane: str) -> None: ...
    def open_logs(self, rec: InstanceRecord) -> None: ...
    def clock(self) -> float: ...
    def spent(self, rec: InstanceRecord) -> float | None: ...


# Every table pane lists these after its own keys (so the footer shows its own first).
SORT_BINDINGS = [
    Binding("s", "sort", "Sort", id="sort", tooltip="Sort by the next column"),
    Binding("S", "sort_reverse", "Reverse", id="sort-reverse", tooltip="Reverse the sort order"),
]

Row = tuple[str, Sequence[Text], Any]  # key, cells, the record behind them (for sorting)


class TablePane(Vertical):
    """A pane around one DataTable. Subclasses set COLUMNS and build rows."""

    COLUMNS: ClassVar[tuple[Column, ...]] = ()
    PANE: ClassVar[str] = ""
    DEFAULT_SORT: ClassVar[str | None] = None  # None: the order rows are built in

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.table: DataTable = DataTable(
            id=f"{self.PANE}-table", cursor_type="row", zebra_stripes=True
        )
        self._rows: list[Row] = []
        self._signature: int | None = None
        self._headers: tuple[str | None, bool] | None = None

    def compose(self):  # type: ignore[no-untyped-def]
        yield self.table

    def on_mount(self) -> None:
        self._set_headers()

    @property
    def host(self) -> ConsoleHost:
        return self.app  # type: ignore[return-value]

    # -- sorting ---------------------------------------------------------------------------

    @property
    def sort_key(self) -> str | None:
        key = self.host.ui_state.get(f"{self.PANE}_sort", self.DEFAULT_SORT)
        return key if any(c.key == key for c in self.COLUMNS) else self.DEFAULT_SORT

    @property
    def sort_reverse(self) -> bool:
        return bool(self.host.ui_state.get(f"{self.PANE}_sort_reverse", False))

    SORT_VALUES: ClassVar[dict[str, Callable[[Any], Any]]] = {}  # column → the value it sorts by

    def sort_value(self, record: Any, column: str) -> Any:
        """The value a column sorts by; None sorts last."""
        getter = self.SORT_VALUES.get(column)
        return None if getter is None or record is None else getter(record)

    def action_sort(self) -> None:
        keys = [c.key for c in self.COLUMNS]
        current = self.sort_key
        nxt = keys[(keys.index(current) + 1) % len(keys)] if current in keys else keys[0]
        self.host.ui_state[f"{self.PANE}_sort"] = nxt
        self.host.save_ui_state()
        self.refill()

    def action_sort_reverse(self) -> None:
        self.host.ui_state[f"{self.PANE}_sort_reverse"] = not self.sort_reverse
        self.host.save_ui_state()
        self.refill()

    def _sorted(self, rows: list[Row]) -> list[Row]:
        key = self.sort_key
        if key is None:
            return list(reversed(rows)) if self.sort_reverse else rows
        present = [r for r in rows if self.sort_value(r[2], key) is not None]
        missing = [r for r in rows if self.sort_value(r[2], key) is None]
        present.sort(key=lambda r: self.sort_value(r[2], key), reverse=self.sort_reverse)
        return present + missing  # the unknown stay at the bottom either way

    def _set_headers(self) -> None:
        """Columns with the sorted one marked ▲ (ascending) or ▼ (descending)."""
        state = (self.sort_key, self.sort_reverse)
        if state == self._headers:
            return
        self._headers = state
        keep = self.cursor_key()
        self.table.clear(columns=True)
        for col in self.COLUMNS:
            label = col.label
            if col.key == self.sort_key:
                label += " ▼" if self.sort_reverse else " ▲"
            self.table.add_column(label, width=max(col.width, len(label)), key=col.key)
        self._signature = None
        self._fill(self._rows, keep)

    # -- rows ------------------------------------------------------------------------------

    def build_rows(self) -> list[Row]:
        raise NotImplementedError

    def refill(self) -> None:
        """Rebuild the rows from the app's data and show them."""
        self._rows = self.build_rows()
        self._set_headers()
        self._fill(self._rows, self.cursor_key())

    def _fill(self, rows: list[Row], keep: str | None) -> None:
        """Replace the rows, keeping the cursor on the same key; skip if nothing changed
        (refilling throws away the table's render cache, and data arrives every second)."""
        shown = self._sorted(rows)
        signature = hash(tuple((key, tuple(str(c) for c in cells)) for key, cells, _ in shown))
        if signature == self._signature:
            return
        self._signature = signature
        self.table.clear()
        for key, cells, _ in shown:
            self.table.add_row(*cells, key=key)
        if keep is not None:
            with contextlib.suppress(Exception):
                self.table.move_cursor(row=self.table.get_row_index(keep), animate=False)

    def cursor_key(self) -> str | None:
        if self.table.row_count == 0:
            return None
        with contextlib.suppress(Exception):
            row_key, _ = self.table.coordinate_to_cell_key(self.table.cursor_coordinate)
            return str(row_key.value)
        return None

    def selected(self) -> Any:
        """The record under the cursor, or None."""
        key = self.cursor_key()
        return next((rec for k, _, rec in self._rows if k == key), None)

    def focus_table(self) -> None:
        self.table.focus()
