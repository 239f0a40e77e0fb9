"""What every table pane shares: its columns (with what each means, for help), a table it owns,
sorting by any column with the sorted header marked ▲/▼ (a new order shown from its top), a
find (`/`: only the rows with a text, the same keys and look in every pane), and a cursor that
stays on its row across refreshes.

A pane owns its bindings and actions; the app only composes panes and routes messages to them.
Panes reach the rest of the console only through the `ConsoleHost` they are given (what they
read) and the messages they post (what they ask for: console/messages.py and their own).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.events import Key
from textual.widgets import Input, Static

from vastui.console.messages import TitleChanged
from vastui.console.rowtable import RowDoesNotExist, RowTable

if TYPE_CHECKING:
    from textual.screen import ModalScreen

    from vastui.config import Config
    from vastui.console.snapshot import Snapshot
    from vastui.domain.worker import InstanceRecord
    from vastui.engine.ranking import RankedOffer

UiState = dict[str, str | bool]
"""What the console remembers across runs: each pane's sort column and direction."""


@dataclass(frozen=True)
class Column:
    key: str
    label: str
    width: int
    doc: str  # what the column means: help lists it
    grow: int = 0  # cells more it takes when the terminal has room (GROW says in what order)


def column_widths(
    columns: Sequence[tuple[str, int, int]], room: int, pad: int, order: Sequence[str]
) -> dict[str, int]:
    """Each column's width: its own, then the room left over (``room`` cells, each column
    taking ``2 * pad`` more) given to the columns that grow, in ``order`` (what matters most is
    cut least), each up to its ``grow``. ``columns``: (key, width, grow)."""
    widths = {key: width for key, width, _grow in columns}
    spare = room - sum(w + 2 * pad for w in widths.values())
    grows = {key: grow for key, _width, grow in columns}
    for key in order:
        if spare <= 0:
            break
        extra = min(spare, grows.get(key, 0))
        widths[key] += extra
        spare -= extra
    return widths


_R = TypeVar("_R")


class ConsoleHost(Protocol):
    """What a pane may read of the app, and the dialogs it may open; what it asks the app to
    do, it posts as a message."""

    @property
    def config(self) -> Config: ...
    @property
    def snapshot(self) -> Snapshot: ...
    @property
    def offers(self) -> list[RankedOffer]: ...
    @property
    def ui_state(self) -> UiState: ...
    @property
    def view_filter(self) -> str: ...

    def save_ui_state(self) -> None: ...
    def guard(self) -> bool:
        """Whether an action may go ahead (else the operator is told why not)."""
        ...

    def clock(self) -> float: ...
    def spent(self, rec: InstanceRecord) -> float | None: ...
    def min_rate_for(self, dph_total: float) -> float: ...
    def ssh_command(self, rec: InstanceRecord) -> str | None: ...
    def log_stream(self, rec: InstanceRecord, source: str) -> AsyncIterator[list[str]]: ...
    def engine_log_lines(self, *, rewind: bool = False) -> list[str]: ...
    def ask(self, screen: ModalScreen[_R], done: Callable[[_R | None], None]) -> None:
        """Open a dialog; `done` gets its answer (None: dismissed)."""
        ...


# Every table pane lists these after its own keys (so the footer shows its own first).
SORT_BINDINGS = [
    Binding("s", "sort", "Sort", id="sort", tooltip="Sort by the next column"),
    Binding("S", "sort_reverse", "Reverse", id="sort-reverse", tooltip="Reverse the sort order"),
]

# Every table pane's find: the same key, id (one keymap entry remaps it everywhere) and look.
FIND_BINDING = Binding(
    "slash", "filter_rows", "Find", id="filter-rows",
    tooltip="Show only the rows containing a text (esc clears)",
)  # fmt: skip

# key, cells (None: made when the row is drawn, by `row_cells`), the record behind them
Row = tuple[str, Sequence[Text] | None, Any]
T = TypeVar("T")


class TablePane(Vertical):
    """A pane around one RowTable. Subclasses set COLUMNS and build rows; a row's cells may be
    left to `row_cells`, made only when the row is drawn (10,000 offers, ~45 on screen)."""

    COLUMNS: ClassVar[tuple[Column, ...]] = ()
    PANE: ClassVar[str] = ""
    DEFAULT_SORT: ClassVar[str | None] = None  # None: the order rows are built in
    FINDS_ITSELF: ClassVar[bool] = False  # its build_rows applies `row_filter` (10,000 offers)
    GROW: ClassVar[tuple[str, ...]] = ()  # the columns given spare width, the first first

    def __init__(self, host: ConsoleHost, **kw: Any) -> None:
        super().__init__(**kw)
        self.host = host
        self.table = RowTable(
            id=f"{self.PANE}-table", cursor_type="row", zebra_stripes=True, cells=self._cells
        )
        self._rows: list[Row] = []
        self._shown: list[Row] = []
        self._shown_version: Any = None
        self._headers: tuple[str | None, bool, int] | None = None
        self.row_filter = ""  # the find's text, lower case ("" shows every row)
        self._found_text = "find:"  # what the find bar's label says

    def compose(self) -> ComposeResult:
        yield self.table
        with Horizontal(id="row-filter-bar"):
            yield Static("find:", id="row-filter-label")
            yield FindInput(
                self._find, placeholder="text in any column; esc clears", id="row-filter"
            )

    def on_mount(self) -> None:
        self._set_headers()
        self.query_one("#row-filter-bar").display = False

    # -- find ------------------------------------------------------------------------------

    def action_filter_rows(self) -> None:
        self.query_one("#row-filter-bar").display = True
        self.query_one("#row-filter", Input).focus()

    def _find(self, value: str) -> None:
        """The find input changed: show the rows that contain its text."""
        needle = value.strip().lower()
        if needle == self.row_filter:
            return
        self.row_filter = needle
        self.refill()
        self.post_message(TitleChanged())

    @on(Input.Submitted, "#row-filter")
    def _row_filter_done(self) -> None:
        self.focus_table()

    def on_key(self, event: Key) -> None:
        if event.key == "escape" and self.query_one("#row-filter", Input).has_focus:
            event.stop()
            self.query_one("#row-filter", Input).value = ""
            self.query_one("#row-filter-bar").display = False
            self.focus_table()

    def found(self, rows: list[Row]) -> list[Row]:
        """The rows whose cells contain the find's text (as shown, in any column)."""
        needle = self.row_filter
        if not needle or self.FINDS_ITSELF:
            return rows
        return [r for r in rows if needle in " ".join(c.plain for c in self._cells(r)).lower()]

    def _show_found(self, built: list[Row]) -> None:
        """The find bar says how many rows its text kept (counted only while it finds; the
        label redrawn only when its text changes: rows refill every second)."""
        text = "find:"
        if self.row_filter:
            text = f"find ({len(self._rows)} of {self.total_rows(built)}):"
        if text != self._found_text:
            self._found_text = text
            self.query_one("#row-filter-label", Static).update(text)

    # -- sorting ---------------------------------------------------------------------------

    @property
    def sort_key(self) -> str | None:
        key = self.host.ui_state.get(f"{self.PANE}_sort", self.DEFAULT_SORT)
        known = isinstance(key, str) and any(c.key == key for c in self.COLUMNS)
        return key if known and isinstance(key, str) else self.DEFAULT_SORT

    @property
    def sort_reverse(self) -> bool:
        return bool(self.host.ui_state.get(f"{self.PANE}_sort_reverse", False))

    SORT_VALUES: ClassVar[dict[str, Callable[[Any], Any]]] = {}  # column → the value it sorts by

    def sort_getter(self, column: str) -> Callable[[Any], Any]:
        """record → the value a column sorts by (None sorts last)."""
        getter = self.SORT_VALUES.get(column)
        if getter is None:
            return lambda _record: None
        return lambda record: None if record is None else getter(record)

    def sort_value(self, record: Any, column: str) -> Any:
        """The value a column sorts by; None sorts last."""
        return self.sort_getter(column)(record)

    def action_sort(self) -> None:
        keys = [c.key for c in self.COLUMNS]
        current = self.sort_key
        nxt = keys[(keys.index(current) + 1) % len(keys)] if current in keys else keys[0]
        self.host.ui_state[f"{self.PANE}_sort"] = nxt
        self.host.save_ui_state()
        self._resorted()

    def action_sort_reverse(self) -> None:
        self.host.ui_state[f"{self.PANE}_sort_reverse"] = not self.sort_reverse
        self.host.save_ui_state()
        self._resorted()

    def _resorted(self) -> None:
        """A new order is read from its top (k9s, lazygit): the cursor goes to the first row.
        New data keeps the cursor on its row (refill)."""
        self.refill()
        if self.table.row_count:
            self.table.move_cursor(row=0, animate=False)

    def _sorted(self, rows: list[Row]) -> list[Row]:
        return self.sort_items(rows, itemgetter(2))

    def sort_items(self, items: list[T], record_of: Callable[[T], Any]) -> list[T]:
        """Items in the pane's sort order (by their record's value; the unknown last either
        way), each value made once."""
        key = self.sort_key
        if key is None:
            return list(reversed(items)) if self.sort_reverse else items
        getter = self.sort_getter(key)
        valued = [(getter(record_of(item)), item) for item in items]
        present = [pair for pair in valued if pair[0] is not None]
        present.sort(key=itemgetter(0), reverse=self.sort_reverse)
        return [item for _, item in present] + [item for v, item in valued if v is None]

    def on_resize(self) -> None:
        self._set_headers()  # the room for the columns that grow

    def _set_headers(self) -> None:
        """Columns with the sorted one marked ▲ (ascending) or ▼ (descending), as wide as the
        table's room lets the growing ones be."""
        room = self.table.scrollable_content_region.width
        state = (self.sort_key, self.sort_reverse, room)
        if state == self._headers:
            return
        self._headers = state
        labels = []
        for col in self.COLUMNS:
            label = col.label
            if col.key == self.sort_key:
                label += " ▼" if self.sort_reverse else " ▲"
            labels.append((col.key, label, max(col.width, len(label)), col.grow))
        widths = column_widths(
            [(key, width, grow) for key, _label, width, grow in labels], room,
            self.table.cell_padding, self.GROW,
        )  # fmt: skip
        self.table.set_columns([(key, label, widths[key]) for key, label, _w, _g in labels])

    # -- rows ------------------------------------------------------------------------------

    def build_rows(self) -> list[Row]:
        raise NotImplementedError

    def row_cells(self, record: Any) -> Sequence[Text]:
        """A row's cells, for rows built without them."""
        raise NotImplementedError

    def rows_version(self) -> Any:
        """Changes when rows built lazily would show something else for the same records
        (the instances' uptime moves with the clock)."""
        return None

    def _cells(self, row: Row) -> Sequence[Text]:
        return row[1] if row[1] is not None else self.row_cells(row[2])

    def refill(self) -> None:
        """Rebuild the rows from the app's data and show them (those the find keeps)."""
        built = self.build_rows()
        self._rows = self.found(built)
        if self.is_mounted:
            self._show_found(built)
        self._set_headers()
        self._fill(self._rows, self.cursor_key())

    def total_rows(self, built: list[Row]) -> int:
        """What the find searched (the offers pane's build_rows has already found)."""
        return len(built)

    def _fill(self, rows: list[Row], keep: str | None) -> None:
        """Show the rows sorted, keeping the cursor on the same key; skip if nothing changed
        (showing new rows throws away the table's render cache, and data arrives every
        second)."""
        shown = self._sorted(rows)
        version = self.rows_version()
        if version == self._shown_version and _same_rows(shown, self._shown):
            return
        self._shown, self._shown_version = shown, version
        self.table.set_rows([r[0] for r in shown], shown)
        if keep is None or keep == self.table.key_at(self.table.cursor_row):
            return
        try:
            index = self.table.get_row_index(keep)
        except RowDoesNotExist:
            index = 0  # its row is gone (filtered out): back to the top
        self.table.move_cursor(row=index, animate=False)

    def cursor_key(self) -> str | None:
        return self.table.key_at(self.table.cursor_row)

    def selected(self) -> Any:
        """The record under the cursor, or None."""
        try:
            return self.table.record_at(self.table.cursor_row)[2]
        except IndexError:
            return None

    def focus_table(self) -> None:
        self.table.focus()


def _same_rows(a: list[Row], b: list[Row]) -> bool:
    """The same keys, records (the same objects) and cells, in the same order."""
    return len(a) == len(b) and all(
        x[0] == y[0] and x[2] is y[2] and x[1] == y[1] for x, y in zip(a, b, strict=True)
    )


class FindInput(Input):
    """The find input, which filters the rows in the keystroke's own step: its Changed
    message would hop three message queues (input, bar, pane) first, and a frame drawn in
    between (the typed character, the old rows) made the new rows wait for the next one."""

    def __init__(self, on_change: Callable[[str], None], **kw: Any) -> None:
        super().__init__(**kw)
        self._on_change = on_change

    def watch_value(self, value: str) -> None:
        self._on_change(value)
