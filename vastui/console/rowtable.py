"""RowTable: a table of one-line rows on Textual's line API (`ScrollView` + `render_line`).

The panes show up to 10,000 offers. Textual's DataTable keeps a dict of cells, a Row and a
RowKey for every row and measures every new cell, so a refill took about a second; the table
that replaced it lived on DataTable's private storage and drawing, which pinned the console to
one Textual release. This one is its own widget on public API only:

- rows are one list of records set whole (`set_rows(keys, records)`); a row's cells are made by
  the pane's function (`cells=`) when the row is drawn, rows are one line high and columns have
  fixed widths, so nothing is measured;
- it looks and behaves as DataTable with `cursor_type="row"`: the same component classes (so
  themes style both alike), keys, mouse (hover, click to move, click again to select) and
  messages (its RowHighlighted/RowSelected/HeaderSelected are DataTable's, subclassed: a handler
  written for DataTable's gets them), drawn to the same segments (tests/test_console_rowtable.py
  compares the two through the keys);
- a drawn line is kept under a key of everything it depends on (its row's cells, where the cursor
  and the mouse are, the width and horizontal scroll, the columns, the styles it is drawn with),
  and `set_rows` repaints only the lines on screen whose key changed: a refill each second that
  moves one uptime repaints one line, not the table.

One file: one widget, whose drawing, cursor, mouse, scrolling and line cache share the row
model and must change together to keep drawing what DataTable draws.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, ClassVar, Literal, Self

from rich.console import Console, RenderableType
from rich.padding import Padding
from rich.protocol import is_renderable
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding, BindingType
from textual.cache import LRUCache
from textual.color import Color
from textual.coordinate import Coordinate
from textual.geometry import Region, Size, Spacing, clamp
from textual.reactive import Reactive
from textual.renderables.styled import Styled
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widgets import DataTable
from textual.widgets.data_table import (
    CellDoesNotExist,
    ColumnDoesNotExist,
    ColumnKey,
    DuplicateKey,
    RowDoesNotExist,
    RowKey,
    StringKey,
)

CellsOf = Callable[[Any], Sequence[Any]]
CursorType = Literal["row", "none"]
LINE_MEMO = 256  # drawn lines (and rows' cells) kept: a few screens' worth, both focus states
__all__ = ["CellsOf", "Column", "RowDoesNotExist", "RowTable", "cell_segments"]

_EMPTY = Text(no_wrap=True, end="")


def _identity(record: Any) -> Sequence[Any]:
    return record


def _plain(key: object) -> str | None:
    """A key as the string it stands for (RowKey, ColumnKey or str)."""
    if isinstance(key, StringKey):
        return key.value
    return key if isinstance(key, str) else None


@dataclass
class Column:
    """A column: its key, header label and width (cells, padding excluded)."""

    key: str
    label: Text
    width: int


class _Store:
    """The rows: keys and records in display order, and the key → index map (made when asked)."""

    __slots__ = ("_index", "cells_of", "keys", "records")

    def __init__(self, cells_of: CellsOf) -> None:
        self.keys: list[str] = []
        self.records: list[Any] = []
        self.cells_of = cells_of
        self._index: dict[str, int] | None = None

    def set(self, keys: list[str], records: list[Any]) -> None:
        if len(keys) != len(records):
            raise ValueError(f"{len(keys)} keys for {len(records)} records")
        self.keys, self.records, self._index = keys, records, None

    def find(self, key: object) -> int | None:
        if self._index is None:
            index = dict(zip(self.keys, range(len(self.keys)), strict=True))
            if len(index) != len(self.keys):
                raise DuplicateKey("RowTable: two rows share a key")
            self._index = index
        name = _plain(key)
        return None if name is None else self._index.get(name)

    def __len__(self) -> int:
        return len(self.keys)


class _Styles:
    """The styles lines are drawn with, as read from the CSS, and the cell styles made of
    them. `id` stands for all of them in the line keys: the same styles get the same id."""

    __slots__ = ("_cells", "background", "base", "even", "header", "id", "odd", "parts")

    def __init__(self, table: RowTable) -> None:
        component = table.get_component_styles
        rich = table.get_component_rich_style
        self.base: Style = table.rich_style
        self.header: Style = component("datatable--header").rich_style
        self.odd: Style = component("datatable--odd-row").rich_style
        self.even: Style = component("datatable--even-row").rich_style
        self.background: Color = table.background_colors[1]
        # hover, header hover, cursor, header cursor
        self.parts = tuple(rich(f"datatable--{n}") for n in ("hover", "header-hover", "cursor",
                                                              "header-cursor"))  # fmt: skip
        self.id = table.styles_id((self.base, self.header, self.odd, self.even, self.background,
                                   self.parts))  # fmt: skip
        self._cells: dict[tuple[bool, bool, bool, bool, bool], tuple[Style, Style]] = {}

    def row_style(self, row: int, zebra: bool) -> Style:
        if row == -1:
            return self.header
        if zebra:
            return self.odd if row % 2 else self.even
        return self.base

    def cell_styles(
        self, header: bool, hover: bool, cursor: bool, css_fg: bool, css_bg: bool
    ) -> tuple[Style, Style]:
        """(component, post) styles of a cell, as DataTable's _get_styles_to_render_cell
        makes them (hover and cursor already mean "shown")."""
        key = (header, hover, cursor, css_fg, css_bg)
        found = self._cells.get(key)
        if found is None:
            hover_style, header_hover, cursor_style, header_cursor = self.parts
            style = Style()
            if hover:
                style += hover_style
                if header:
                    style += header_hover
            if cursor:
                style += cursor_style
                if header:
                    style += header_cursor
            post_fg = Style.from_color(color=style.color) if css_fg else Style.null()
            post_bg = Style.from_color(bgcolor=style.bgcolor) if css_bg else Style.null()
            found = self._cells[key] = (style, post_fg + post_bg)
        return found


class RowTable(ScrollView, can_focus=True):
    """A table of one-line rows, set whole with `set_rows(keys, records)`; `cells(record)`
    makes a row's cells when it is drawn. Columns need a width."""

    ALLOW_SELECT = False

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "select_cursor", "Select", show=False),
        Binding("up", "cursor_up", "Cursor up", show=False),
        Binding("down", "cursor_down", "Cursor down", show=False),
        Binding("right", "cursor_right", "Cursor right", show=False),
        Binding("left", "cursor_left", "Cursor left", show=False),
        Binding("pageup", "page_up", "Page up", show=False),
        Binding("pagedown", "page_down", "Page down", show=False),
        Binding("ctrl+home", "scroll_top", "Top", show=False),
        Binding("ctrl+end", "scroll_bottom", "Bottom", show=False),
        Binding("home", "scroll_home", "Home", show=False),
        Binding("end", "scroll_end", "End", show=False),
    ]

    # DataTable's names: a theme or stylesheet written for DataTable styles RowTable alike.
    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "datatable--cursor",
        "datatable--hover",
        "datatable--header",
        "datatable--header-cursor",
        "datatable--header-hover",
        "datatable--odd-row",
        "datatable--even-row",
    }

    # DataTable's (textual 8.2.8), for the same look.
    DEFAULT_CSS = """
    RowTable {
        background: $surface;
        color: $foreground;
        height: auto;
        max-height: 100%;

        &:focus {
            background-tint: $foreground 5%;
            & > .datatable--cursor {
                background: $block-cursor-background;
                color: $block-cursor-foreground;
                text-style: $block-cursor-text-style;
            }
            & > .datatable--header {
                background-tint: $foreground 5%;
            }
        }
        &:dark {
            & > .datatable--even-row {
                background: $surface-darken-1 40%;
            }
        }
        & > .datatable--header {
            text-style: bold;
            background: $panel;
            color: $foreground;
        }
        &:ansi > .datatable--header {
            background: ansi_bright_blue;
            color: ansi_default;
        }
        & > .datatable--odd-row {
        }
        & > .datatable--even-row {
            background: $surface-lighten-1 50%;
        }
        & > .datatable--cursor {
            background: $block-cursor-blurred-background;
            color: $block-cursor-blurred-foreground;
            text-style: $block-cursor-blurred-text-style;
        }
        & > .datatable--header-cursor {
            background: $accent-darken-1;
            color: $foreground;
        }
        & > .datatable--header-hover {
            background: $accent 30%;
        }
        & > .datatable--hover {
            background: $block-hover-background;
        }
    }
    """

    show_header = Reactive(True)
    zebra_stripes = Reactive(False)
    show_cursor = Reactive(True)
    cursor_type: Reactive[CursorType] = Reactive[CursorType]("row")
    cell_padding = Reactive(1)
    cursor_coordinate: Reactive[Coordinate] = Reactive(
        Coordinate(0, 0), repaint=False, always_update=True
    )
    hover_coordinate: Reactive[Coordinate] = Reactive(
        Coordinate(0, 0), repaint=False, always_update=True
    )

    class RowHighlighted(DataTable.RowHighlighted):
        """The cursor is on a row (a DataTable.RowHighlighted too; `data_table` is the
        RowTable)."""

        def __init__(self, table: RowTable, cursor_row: int, row_key: RowKey) -> None:
            # DataTable's messages type their table as DataTable; a RowTable is drop-in
            super().__init__(table, cursor_row, row_key)  # type: ignore[arg-type]

    class RowSelected(DataTable.RowSelected):
        """Enter on a row, or a click on the row under the cursor."""

        def __init__(self, table: RowTable, cursor_row: int, row_key: RowKey) -> None:
            # DataTable's messages type their table as DataTable; a RowTable is drop-in
            super().__init__(table, cursor_row, row_key)  # type: ignore[arg-type]

    class HeaderSelected(DataTable.HeaderSelected):
        """A click on a column's header."""

        def __init__(self, table: RowTable, key: ColumnKey, index: int, label: Text) -> None:
            # DataTable's messages type their table as DataTable; a RowTable is drop-in
            super().__init__(table, key, index, label)  # type: ignore[arg-type]

    def __init__(
        self,
        *,
        cells: CellsOf = _identity,
        show_header: bool = True,
        zebra_stripes: bool = False,
        show_cursor: bool = True,
        cursor_type: CursorType = "row",
        cell_padding: int = 1,
        cursor_foreground_priority: Literal["renderable", "css"] = "css",
        cursor_background_priority: Literal["renderable", "css"] = "renderable",
        name: str | None = None,
        id: str | None = None,
        classes: str | None = None,
        disabled: bool = False,
    ) -> None:
        super().__init__(name=name, id=id, classes=classes, disabled=disabled)
        if cursor_type not in ("row", "none"):
            raise ValueError(f"RowTable has a row cursor or none, not {cursor_type!r}")
        self._store = _Store(cells)
        self.columns: dict[str, Column] = {}
        self.cursor_foreground_priority = cursor_foreground_priority
        self.cursor_background_priority = cursor_background_priority
        self._generation = 0  # bumped when rows or columns change: cells are kept per value
        self._cells: LRUCache[tuple[int, int], tuple[list[RenderableType], Hashable]]
        self._cells = LRUCache(LINE_MEMO)
        self._lines: LRUCache[Hashable, Strip] = LRUCache(LINE_MEMO)
        self._drawn: dict[int, Hashable] = {}  # line on screen → the key of what is drawn there
        self._styles_ids: dict[Hashable, int] = {}
        self._next_styles_id = 0
        self._columns_epoch = 0  # bumped when columns change (widths, labels): lines keyed by it
        self._show_hover_cursor = False  # the mouse's highlight: off while keys are used
        self._announced: tuple[int, str] | None = None  # the row RowHighlighted last named
        self.set_reactive(RowTable.show_header, show_header)
        self.set_reactive(RowTable.zebra_stripes, zebra_stripes)
        self.set_reactive(RowTable.show_cursor, show_cursor)
        self.set_reactive(RowTable.cursor_type, cursor_type)
        self.set_reactive(RowTable.cell_padding, max(0, cell_padding))

    # -- the rows --------------------------------------------------------------------------

    def set_rows(self, keys: Sequence[str], records: Sequence[Any]) -> None:
        """Show these rows (keys unique) in this order. The cursor keeps its index (clamped);
        the scroll position stays; only the lines on screen that change are drawn again."""
        self._store.set(list(keys), list(records))
        self._rows_changed()

    def record_at(self, index: int) -> Any:
        """The record shown at row `index` (IndexError outside the table)."""
        if not 0 <= index < len(self._store):
            raise IndexError(index)
        return self._store.records[index]

    def key_at(self, index: int) -> str | None:
        keys = self._store.keys
        return keys[index] if 0 <= index < len(keys) else None

    @property
    def row_count(self) -> int:
        return len(self._store)

    def is_valid_row_index(self, row_index: int) -> bool:
        return 0 <= row_index < len(self._store)

    def get_row_index(self, row_key: RowKey | str) -> int:
        index = self._store.find(row_key)
        if index is None:
            raise RowDoesNotExist(f"No row exists for row_key={row_key!r}")
        return index

    def get_row(self, row_key: RowKey | str) -> list[Any]:
        """A row's cells, as its maker gives them."""
        return self.get_row_at(self.get_row_index(row_key))

    def get_row_at(self, row_index: int) -> list[Any]:
        if not self.is_valid_row_index(row_index):
            raise RowDoesNotExist(f"Row index {row_index!r} is not valid.")
        return list(self._store.cells_of(self._store.records[row_index]))

    def get_cell(self, row_key: RowKey | str, column_key: ColumnKey | str) -> Any:
        index = self._store.find(row_key)
        column = self._column_index(column_key)
        if index is None or column is None:
            raise CellDoesNotExist(f"No cell for row {row_key!r}, column {column_key!r}.")
        cells = self.get_row_at(index)
        return cells[column] if column < len(cells) else None

    def _rows_changed(self) -> None:
        self._generation += 1
        self._set_virtual_size()
        self.cursor_coordinate = self.cursor_coordinate  # clamped to the new rows
        row = self.cursor_row
        # the row under the cursor is another one (same index, new key): say so, as a move would
        valid = self.show_cursor and self.cursor_type == "row" and self.is_valid_row_index(row)
        if valid and self._announced != (row, self._store.keys[row]):
            self._highlight_row(row)
        self._refresh_changed_lines()

    def add_row(
        self, *cells: Any, height: int | None = 1, key: str | None = None, label: Any = None
    ) -> RowKey:
        """One row at the bottom (cells as given: only for a table without a `cells` maker)."""
        if height != 1 or label is not None:
            raise ValueError("RowTable rows are one line high, without a label")
        if self._store.cells_of is not _identity:
            raise TypeError("this RowTable makes its cells from records: use set_rows")
        name = key if key is not None else f"row-{len(self._store)}-{self._generation}"
        if self._store.find(name) is not None:
            raise DuplicateKey(f"The row key {name!r} already exists.")
        self._store.set([*self._store.keys, name], [*self._store.records, list(cells)])
        self._rows_changed()
        return RowKey(name)

    def add_rows(self, rows: Iterable[Iterable[Any]]) -> list[RowKey]:
        return [self.add_row(*row) for row in rows]

    def remove_row(self, row_key: RowKey | str) -> None:
        index = self.get_row_index(row_key)
        keys, records = list(self._store.keys), list(self._store.records)
        del keys[index], records[index]
        self._store.set(keys, records)
        self._rows_changed()

    def sort(
        self, *columns: ColumnKey | str, key: Callable[[Any], Any] | None = None,
        reverse: bool = False,
    ) -> RowTable:  # fmt: skip
        """Order the rows by their cells in these columns (the panes sort their records
        themselves and set them in order)."""
        picks = [self.get_column_index(c) for c in columns]
        cells_of, records = self._store.cells_of, self._store.records

        def value(i: int) -> Any:
            cells = cells_of(records[i])
            data = itemgetter(*picks)(cells) if picks else tuple(cells)
            return key(data) if key is not None else data

        order = sorted(range(len(self._store)), key=value, reverse=reverse)
        self._store.set([self._store.keys[i] for i in order], [records[i] for i in order])
        self._rows_changed()
        return self

    def clear(self, columns: bool = False) -> RowTable:
        self._store.set([], [])
        if columns:
            self.columns.clear()
        self._generation += 1
        self._set_virtual_size()
        self.cursor_coordinate = Coordinate(0, 0)
        self.hover_coordinate = Coordinate(0, 0)
        self._announced = None
        self.scroll_x = self.scroll_y = 0
        self.scroll_target_x = self.scroll_target_y = 0
        self.refresh()
        return self

    # -- the columns -----------------------------------------------------------------------

    def set_columns(self, columns: Iterable[tuple[str, str | Text, int]]) -> None:
        """Add the columns (key, label, width), or relabel and resize the ones there."""
        for key, label, width in columns:
            text = Text.from_markup(label) if isinstance(label, str) else label
            column = self.columns.get(key)
            if column is None:
                self.columns[key] = Column(key, text, width)
            else:
                column.label, column.width = text, width
        self._columns_changed()

    def add_column(
        self, label: str | Text, *, width: int | None = None, key: str | None = None,
        default: Any = None,
    ) -> ColumnKey:  # fmt: skip
        if width is None:
            raise ValueError("RowTable columns need a width (cells are never measured)")
        name = key if key is not None else f"column-{len(self.columns)}"
        if name in self.columns:
            raise DuplicateKey(f"The column key {name!r} already exists.")
        text = Text.from_markup(label) if isinstance(label, str) else label
        self.columns[name] = Column(name, text, width)
        self._columns_changed()
        return ColumnKey(name)

    @property
    def ordered_columns(self) -> list[Column]:
        return list(self.columns.values())

    def get_column_index(self, column_key: ColumnKey | str) -> int:
        index = self._column_index(column_key)
        if index is None:
            raise ColumnDoesNotExist(f"No column exists for column_key={column_key!r}")
        return index

    def _column_index(self, column_key: object) -> int | None:
        name = _plain(column_key)
        return next((i for i, k in enumerate(self.columns) if k == name), None)

    def _columns_changed(self) -> None:
        self._generation += 1
        self._columns_epoch += 1
        self._set_virtual_size()
        self.refresh()

    def _table_width(self) -> int:
        pad = 2 * self.cell_padding
        return sum(c.width + pad for c in self.columns.values())

    def _set_virtual_size(self) -> None:
        self.virtual_size = Size(self._table_width(), len(self._store) + self._header_lines())

    def _header_lines(self) -> int:
        return 1 if self.show_header else 0

    # -- drawing ---------------------------------------------------------------------------

    # The styles lines are drawn with, read from the CSS when first needed after the last
    # style update or whole repaint (each read blends colours up the DOM: ~0.4 ms).
    _styles_memo: _Styles | None = None

    def notify_style_update(self) -> None:
        """Any style update (a theme, focus) may change every line: draw again. The lines
        kept are keyed by the styles themselves, so a pane shown again in a focus state it
        was drawn in finds its lines."""
        super().notify_style_update()
        self.refresh()

    def refresh(
        self, *regions: Region, repaint: bool = True, layout: bool = False,
        recompose: bool = False,
    ) -> Self:  # fmt: skip
        if repaint and not regions:
            # A whole repaint is what Textual asks for when our component classes' styles
            # change, or a parent's (its background shows through ours): read them again.
            self._styles_memo = None
        return super().refresh(*regions, repaint=repaint, layout=layout, recompose=recompose)

    def _styles(self) -> _Styles:
        styles = self._styles_memo
        if styles is None:
            styles = self._styles_memo = _Styles(self)
        return styles

    def styles_id(self, styles: Hashable) -> int:
        found = self._styles_ids.get(styles)
        if found is None:
            if len(self._styles_ids) > 64:  # themes switched back and forth: start over
                self._styles_ids.clear()
            self._next_styles_id += 1  # never reused: lines kept under an old id stay apart
            found = self._styles_ids[styles] = self._next_styles_id
        return found

    def render_line(self, y: int) -> Strip:
        styles = self._styles()
        key, row = self._line_key(y, styles)
        self._drawn[y] = key
        strip = self._lines.get(key) if key is not None else None
        if strip is None:
            strip = self._draw(row, styles)
            if key is not None:
                self._lines[key] = strip
        return strip

    def _row_cells(self, row: int) -> tuple[list[RenderableType], Hashable]:
        """A row's cells as drawn (-1: the header's labels) and their content as a key (None
        when a cell is not Text: such a line is not kept)."""
        memo = (self._generation, row)
        found = self._cells.get(memo)
        if found is None:
            columns = self.ordered_columns
            if row == -1:
                cells: list[RenderableType] = [c.label for c in columns]
            else:
                made = self._store.cells_of(self._store.records[row])
                cells = [_formatted(c) for c in made[: len(columns)]]
                cells += [_EMPTY] * (len(columns) - len(cells))
            content: list[Hashable] = []
            for cell in cells:
                if not isinstance(cell, Text):  # another renderable: its looks are its own
                    found = (cells, None)
                    break
                content.append((cell.plain, cell.style, tuple(cell.spans), cell.justify,
                                cell.overflow, cell.no_wrap, cell.tab_size))  # fmt: skip
            else:
                found = (cells, tuple(content))
            self._cells[memo] = found
        return found

    def _line_key(self, y: int, styles: _Styles) -> tuple[Hashable, int]:
        """(what line y on screen depends on, or None; the row it shows, -1 for the header)."""
        width = self.size.width
        scroll_x, scroll_y = self.scroll_offset
        top = self._header_lines()
        row = -1 if y < top else y + scroll_y - top
        if row >= len(self._store):
            return ("blank", width, styles.id), row
        _cells, content = self._row_cells(row)
        if content is None:
            return None, row
        on_row = self.cursor_type == "row"
        cursor = on_row and self.show_cursor and row == self.cursor_coordinate.row
        hover = (
            on_row and self.show_cursor and self._show_hover_cursor
            and row == self.hover_coordinate.row
        )  # fmt: skip
        return (
            row, content, cursor, hover, width, scroll_x, styles.id, self.zebra_stripes,
            self.cell_padding, self.cursor_type, self.cursor_foreground_priority,
            self.cursor_background_priority, self._columns_epoch,
        ), row  # fmt: skip

    def _draw(self, row: int, styles: _Styles) -> Strip:
        """Line `row` (-1: the header) as DataTable draws it with a row cursor or none."""
        width = self.size.width
        if row >= len(self._store):
            return Strip.blank(width, styles.base)
        header = row == -1
        row_style = styles.row_style(row, self.zebra_stripes)
        on_row = self.cursor_type == "row"
        cursor = on_row and self.show_cursor and row == self.cursor_coordinate.row
        hover = (
            on_row and self.show_cursor and self._show_hover_cursor
            and row == self.hover_coordinate.row
        )  # fmt: skip
        component, post = styles.cell_styles(
            header, hover, cursor, self.cursor_foreground_priority == "css",
            self.cursor_background_priority == "css",
        )  # fmt: skip
        padding = self.cell_padding
        console = self.app.console
        cells, _content = self._row_cells(row)
        segments: list[Segment] = []
        table_width = 0
        for index, (column, cell) in enumerate(zip(self.ordered_columns, cells, strict=True)):
            cell_width = column.width + 2 * padding
            table_width += cell_width
            pre = row_style + Style.from_meta({"row": row, "column": index}) + component
            if isinstance(cell, Text) and _simple_text(cell):
                segments += cell_segments(cell, cell_width, padding, pre, post, console)
            else:
                segments += self._rich_cell(cell, cell_width, pre, post)
        # the row's style carried to the widget's right edge, as DataTable does
        if on_row:
            extend = row_style + component
        elif row_style.bgcolor is not None:
            faded = Color.from_rich_color(row_style.bgcolor).blend(styles.background, 0.25)
            extend = Style.from_color(color=row_style.color, bgcolor=faded.rich_color)
        else:
            extend = Style.from_color(row_style.color, row_style.bgcolor)
        extend += Style.from_meta({"row": row, "column": 0, "out_of_bounds": True})
        segments.append(Segment(" " * max(0, width - table_width), extend))
        scroll_x = self.scroll_offset.x
        return Strip(segments).crop(scroll_x).adjust_cell_length(width, styles.base).simplify()

    def _rich_cell(
        self, cell: RenderableType, width: int, pre: Style, post: Style
    ) -> list[Segment]:
        """A cell that is not plain one-line Text, through Rich as DataTable renders cells."""
        options = self.app.console_options.update_dimensions(width, 1).update(no_wrap=True)
        padded = Styled(Padding(cell, (0, self.cell_padding)), pre_style=pre, post_style=post)
        lines = self.app.console.render_lines(padded, options)
        return lines[0] if lines else [Segment(" " * width, pre)]

    def _refresh_changed_lines(self) -> None:
        """Mark for drawing the lines on screen whose key changed. All of them, and nothing
        made now, when the table is not on screen (a hidden pane is drawn whole when shown),
        or when unsure (the styles not read since a whole repaint, which is then pending)."""
        styles = self._styles_memo
        if styles is None or not self._drawn or not self.is_on_screen:
            self.refresh()
            return
        width, height = self.size
        dirty: list[Region] = []
        for y in range(self._header_lines(), height):
            key, _row = self._line_key(y, styles)
            if key is None or self._drawn.get(y) != key:
                last = dirty[-1] if dirty else None
                if last is not None and last.bottom == y:
                    dirty[-1] = Region(0, last.y, width, last.height + 1)
                else:
                    dirty.append(Region(0, y, width, 1))
        if dirty:
            self.refresh(*dirty)

    def refresh_row(self, row_index: int) -> None:
        """Draw row `row_index` again (-1: the header) if it is on screen."""
        if row_index == -1:
            if self.show_header:
                self.refresh(Region(0, 0, self.size.width, 1))
            return
        region = self._row_region(row_index)
        if region and self.window_region.overlaps(region):
            self.refresh(region.translate(-self.scroll_offset))

    def _row_region(self, row_index: int) -> Region:
        if not self.is_valid_row_index(row_index):
            return Region(0, 0, 0, 0)
        y = row_index + self._header_lines()
        return Region(0, y, max(self.size.width, self._table_width()), 1)

    # -- the cursor ------------------------------------------------------------------------

    @property
    def cursor_row(self) -> int:
        return self.cursor_coordinate.row

    @property
    def hover_row(self) -> int:
        return self.hover_coordinate.row

    def validate_cursor_coordinate(self, value: Coordinate) -> Coordinate:
        row, column = value
        last_row, last_column = len(self._store) - 1, len(self.columns) - 1
        return Coordinate(clamp(row, 0, last_row), clamp(column, 0, last_column))

    def validate_cell_padding(self, value: int) -> int:
        return max(0, value)

    def watch_cursor_coordinate(self, old: Coordinate, new: Coordinate) -> None:
        if old != new:
            self.refresh_row(old.row)
            self._highlight_row(new.row)
            self._scroll_cursor_into_view()

    def watch_hover_coordinate(self, old: Coordinate, new: Coordinate) -> None:
        if old.row != new.row:
            self.refresh_row(old.row)
            self.refresh_row(new.row)

    def watch_show_cursor(self, show: bool) -> None:
        self.refresh()
        if show and self.cursor_type == "row":
            self._scroll_cursor_into_view()
            self._highlight_row(self.cursor_row)

    def watch_cursor_type(self, old: CursorType, new: CursorType) -> None:
        self._set_hover_cursor(False)
        self.refresh()
        if self.show_cursor and new == "row":
            self._highlight_row(self.cursor_row)
        self._scroll_cursor_into_view()

    def watch_show_header(self) -> None:
        self._set_virtual_size()
        self.refresh()
        self._scroll_cursor_into_view()

    def watch_cell_padding(self) -> None:
        self._set_virtual_size()
        self.refresh()
        self._scroll_cursor_into_view()

    def move_cursor(
        self, *, row: int | None = None, column: int | None = None, animate: bool = False,
        scroll: bool = True,
    ) -> None:  # fmt: skip
        """Put the cursor on row `row` (clamped), scrolling it into view (as DataTable's)."""
        current = self.cursor_coordinate
        destination = Coordinate(
            current.row if row is None else row, current.column if column is None else column
        )
        if scroll:
            self._scroll_cursor_into_view(animate=animate)
        self.cursor_coordinate = destination

    def _highlight_row(self, row: int) -> None:
        self.refresh_row(row)
        if self.is_valid_row_index(row):
            key = self._store.keys[row]
            self._announced = (row, key)
            self.post_message(RowTable.RowHighlighted(self, row, RowKey(key)))

    def _scroll_cursor_into_view(self, animate: bool = False) -> None:
        _x, y, width, height = self._row_region(self.cursor_row)
        region = Region(int(self.scroll_x), y, width, height)
        spacing = Spacing(self._header_lines(), 0, 0, 0)  # the header stays on top
        self.scroll_to_region(region, animate=animate, spacing=spacing, force=True)

    def _set_hover_cursor(self, active: bool) -> None:
        """Show or hide the mouse's highlight (hidden while keys are used)."""
        if active != self._show_hover_cursor:
            self._show_hover_cursor = active
            self.refresh_row(self.hover_row)

    def _post_selected(self) -> None:
        row = self.cursor_row
        if self.cursor_type == "row" and self.is_valid_row_index(row):
            self.post_message(RowTable.RowSelected(self, row, RowKey(self._store.keys[row])))

    def _page_height(self) -> int:
        return self.scrollable_content_region.height - self._header_lines()

    def _moves_cursor(self) -> bool:
        return self.show_cursor and self.cursor_type == "row"

    def action_select_cursor(self) -> None:
        self._set_hover_cursor(False)
        if self._moves_cursor():
            self._post_selected()

    def action_cursor_up(self) -> None:
        self._set_hover_cursor(False)
        if self._moves_cursor():
            self.cursor_coordinate = self.cursor_coordinate.up()
        else:
            super().action_scroll_up()

    def action_cursor_down(self) -> None:
        self._set_hover_cursor(False)
        if self._moves_cursor():
            self.cursor_coordinate = self.cursor_coordinate.down()
        else:
            super().action_scroll_down()

    def action_cursor_right(self) -> None:
        self._set_hover_cursor(False)
        super().action_scroll_right()

    def action_cursor_left(self) -> None:
        self._set_hover_cursor(False)
        super().action_scroll_left()

    def action_page_down(self) -> None:
        """A page down, the cursor with it (as DataTable's)."""
        self._set_hover_cursor(False)
        if not self._moves_cursor():
            super().action_page_down()
            return
        height = self._page_height()
        row = self.cursor_row
        target = row + min(height + 1, len(self._store) - row) - 1
        self.scroll_relative(y=height, animate=False, force=True)
        self.move_cursor(row=target, scroll=False)

    def action_page_up(self) -> None:
        self._set_hover_cursor(False)
        if not self._moves_cursor():
            super().action_page_up()
            return
        height = self._page_height()
        row = self.cursor_row
        target = row - min(height + 1, row + 1) + 1
        self.scroll_relative(y=-height, animate=False)
        self.move_cursor(row=target, scroll=False)

    def action_scroll_top(self) -> None:
        self._set_hover_cursor(False)
        if self._moves_cursor():
            self.cursor_coordinate = Coordinate(0, self.cursor_coordinate.column)
        else:
            super().action_scroll_home()

    def action_scroll_bottom(self) -> None:
        self._set_hover_cursor(False)
        if self._moves_cursor():
            self.cursor_coordinate = Coordinate(len(self._store) - 1, self.cursor_coordinate.column)
        else:
            super().action_scroll_end()

    def action_scroll_home(self) -> None:
        """Home: the leftmost column (the row cursor stays)."""
        self._set_hover_cursor(False)
        self.scroll_x = 0

    def action_scroll_end(self) -> None:
        self._set_hover_cursor(False)
        self.scroll_x = self.max_scroll_x

    # -- the mouse -------------------------------------------------------------------------

    def _on_mouse_move(self, event: events.MouseMove) -> None:
        """The row under the mouse is highlighted (segments carry their row in `meta`)."""
        meta = event.style.meta
        if not meta:
            self._set_hover_cursor(False)
            return
        self._set_hover_cursor(True)
        if self.show_cursor and self.cursor_type != "none" and "row" in meta:
            self.hover_coordinate = Coordinate(meta["row"], meta.get("column", 0))

    def _on_leave(self, _event: events.Leave) -> None:
        self._set_hover_cursor(False)

    async def _on_click(self, event: events.Click) -> None:
        """A click on a header selects its column; on a row it moves the cursor there, and on
        the cursor's row it selects it."""
        self._set_hover_cursor(True)
        meta = event.style.meta
        if "row" not in meta or "column" not in meta:
            return
        row, column = meta["row"], meta["column"]
        if row == -1 and self.show_header:
            if 0 <= column < len(self.columns):
                col = self.ordered_columns[column]
                self.post_message(
                    RowTable.HeaderSelected(self, ColumnKey(col.key), column, col.label)
                )
        elif self._moves_cursor():
            again = row == self.cursor_row
            self.cursor_coordinate = Coordinate(row, self.cursor_coordinate.column)
            if again:
                self._post_selected()
            self._scroll_cursor_into_view(animate=True)
            event.stop()


def _formatted(cell: object) -> RenderableType:
    """A cell as DataTable's default formatter makes it for a one-line row."""
    if cell is None:
        return _EMPTY
    if isinstance(cell, str):
        text = Text.from_markup(cell.split("\n", 1)[0], end="")
    elif isinstance(cell, float):
        text = Text(f"{cell:.2f}", end="")
    elif not is_renderable(cell):
        text = Text(str(cell), end="")
    else:
        # a Rich renderable the pane made (is_renderable): drawn as it is
        return cell or _EMPTY  # type: ignore[return-value]
    text.no_wrap = True
    return text or _EMPTY


def _simple_text(cell: object) -> bool:
    """A Text that renders as one line, cut at the cell's width, left-aligned."""
    return (
        isinstance(cell, Text)
        and cell.justify in (None, "default")
        and cell.overflow in (None, "fold", "crop")
        and "\n" not in cell.plain
        and "\t" not in cell.plain
    )


def cell_segments(
    cell: Text, width: int, padding: int, pre: Style, post: Style, console: Console
) -> list[Segment]:
    """One line of a cell as DataTable draws it, `Styled(Padding(cell, (0, padding)),
    pre_style=pre, post_style=post)` at `width` with no wrapping: the text cut to the inner
    width, padded with spaces, each segment styled pre + its own + post (Segment.apply_style).
    """

    def styled(own: Style | None) -> Style | None:
        style = pre + own if pre else own
        if post:
            style = style + post if style else post
        return style

    inner = max(0, width - 2 * padding)
    text = cell
    if text.cell_len > inner:
        text = text.copy()
        text.truncate(inner)
    blank = styled(Style.null())  # Padding pads with a null style, not None
    left = " " * padding
    right = " " * (max(0, inner - text.cell_len) + padding)
    # Runs in one style are one segment (what Segment.simplify would make of them): fewer
    # segments for the line's simplify, the colour filter and the output.
    if not text.spans:
        plain = text.plain
        # Rich joins the wrapped lines, which turns the base style into a span.
        own = console.get_style(text.style, default=Style.null()) if text.style else None
        style = styled(own)
        if style == blank:
            return [Segment(left + plain + right, blank)]
        out = [Segment(left, blank)] if left else []
        if plain:
            out.append(Segment(plain, style))
        if right:
            out.append(Segment(right, blank))
        return out
    out = [Segment(left, blank)] if left else []
    out.extend(Segment(s.text, styled(s.style)) for s in text.render(console) if s.text)
    if right:
        out.append(Segment(right, blank))
    return out
