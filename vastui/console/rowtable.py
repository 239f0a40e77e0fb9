"""RowTable: Textual's DataTable with its rows set whole and their cells made only when drawn.

Textual's DataTable keeps a dict of cells, a Row and a RowKey for every row it is given, and
measures every new cell when idle: 10,000 offers cost about a second per refill, so a sort or
a keystroke in the find input took seconds (bench/keys.py). Here the rows are one list of
records, set at once (`set_rows`); a row's cells are made by the pane's function when the row
is drawn, rows are one line high and columns have fixed widths, so nothing is measured.

Everything else is DataTable's own (textual==8.2.8, pinned): drawing, styles, cursor, keys,
scrolling, mouse, messages. Its storage (`_data`, `rows`, `_row_locations`, `_y_offsets`,
`ordered_rows`) is replaced by read-only views over the list, and the few methods that walk
every row (regions, paging, the whole-row getters) are replaced by arithmetic on one-line rows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from operator import itemgetter
from typing import Any, overload

from rich.console import Console
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.cache import LRUCache
from textual.color import Color
from textual.coordinate import Coordinate
from textual.geometry import Region, Size
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import DataTable
from textual.widgets._data_table import (
    CellDoesNotExist,
    ColumnKey,
    DuplicateKey,
    Row,
    RowDoesNotExist,
    RowKey,
    StringKey,
)

CellsOf = Callable[[Any], Sequence[Any]]
ROW_MEMO = 256  # drawn lines (and rows' cells) kept: a few screens' worth, both focus states
__all__ = ["CellsOf", "RowDoesNotExist", "RowTable"]


def _identity(record: Any) -> Sequence[Any]:
    return record  # type: ignore[no-any-return]


def _plain(key: object) -> object:
    return key.value if isinstance(key, StringKey) else key


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

    def index(self) -> dict[str, int]:
        if self._index is None:
            self._index = dict(zip(self.keys, range(len(self.keys)), strict=True))
            if len(self._index) != len(self.keys):
                self._index = None
                raise DuplicateKey("RowTable: two rows share a key")
        return self._index

    def find(self, key: object) -> int | None:
        return self.index().get(_plain(key))  # type: ignore[arg-type]

    def __len__(self) -> int:
        return len(self.keys)


class _Locations:
    """Stands in for DataTable._row_locations (a TwoWayDict of RowKey ↔ index)."""

    def __init__(self, store: _Store) -> None:
        self._store = store

    def get(self, key: object) -> int | None:
        return self._store.find(key)

    def get_key(self, index: int) -> RowKey | None:
        keys = self._store.keys
        return RowKey(keys[index]) if 0 <= index < len(keys) else None

    def contains_value(self, index: int) -> bool:
        return 0 <= index < len(self._store)

    def __contains__(self, key: object) -> bool:
        return self._store.find(key) is not None

    def __iter__(self) -> Iterator[RowKey]:
        return (RowKey(k) for k in self._store.keys)

    def __len__(self) -> int:
        return len(self._store)


class _RowsView(Mapping[RowKey, Row]):
    """Stands in for DataTable.rows: every row is one line high, without a label."""

    def __init__(self, store: _Store) -> None:
        self._store = store

    def __getitem__(self, key: object) -> Row:
        if self._store.find(key) is None:
            raise KeyError(key)
        return Row(RowKey(str(_plain(key))), 1)

    def __iter__(self) -> Iterator[RowKey]:
        return (RowKey(k) for k in self._store.keys)

    def __len__(self) -> int:
        return len(self._store)


class _DataView(Mapping[RowKey, dict[ColumnKey, Any]]):
    """Stands in for DataTable._data: a row's cells by column key, made when asked."""

    def __init__(self, table: RowTable) -> None:
        self._table = table

    def __getitem__(self, key: object) -> dict[ColumnKey, Any]:
        index = self._table._store.find(key)
        if index is None:
            raise KeyError(key)
        cells = self._table._cells_at(index)
        return dict(zip(self._table.columns, cells, strict=False))

    def __iter__(self) -> Iterator[RowKey]:
        return (RowKey(k) for k in self._table._store.keys)

    def __len__(self) -> int:
        return len(self._table._store)


class _Offsets(Sequence[tuple[RowKey, int]]):
    """Stands in for DataTable._y_offsets: line y is row y, line 0 of it."""

    def __init__(self, store: _Store) -> None:
        self._store = store

    @overload
    def __getitem__(self, y: int) -> tuple[RowKey, int]: ...
    @overload
    def __getitem__(self, y: slice) -> list[tuple[RowKey, int]]: ...
    def __getitem__(self, y: int | slice) -> Any:
        keys = self._store.keys
        if isinstance(y, slice):
            return [(RowKey(k), 0) for k in keys[y]]
        if not 0 <= y < len(keys):
            raise IndexError(y)
        return RowKey(keys[y]), 0

    def __len__(self) -> int:
        return len(self._store)

    def clear(self) -> None:
        """DataTable.clear() clears the list it built; there is none here."""


class _OrderedRows(Sequence[Row]):
    """Stands in for DataTable.ordered_rows."""

    def __init__(self, store: _Store) -> None:
        self._store = store

    @overload
    def __getitem__(self, i: int) -> Row: ...
    @overload
    def __getitem__(self, i: slice) -> list[Row]: ...
    def __getitem__(self, i: int | slice) -> Any:
        keys = self._store.keys
        if isinstance(i, slice):
            return [Row(RowKey(k), 1) for k in keys[i]]
        return Row(RowKey(keys[i]), 1)

    def __len__(self) -> int:
        return len(self._store)


class RowTable(DataTable):  # type: ignore[type-arg]
    """A DataTable of one-line rows, set whole with `set_rows(keys, records)`; `cells(record)`
    makes a row's cells when it is drawn. Columns need a width."""

    def __init__(self, *, cells: CellsOf = _identity, **kw: Any) -> None:
        self._store = _Store(cells)  # first: DataTable's __init__ runs watchers that read it
        self._style_memo: dict[tuple[str, Any], Style] = {}
        self._drawn_width = -1
        self._style_epoch: tuple[Any, ...] | None = None
        self._columns_epoch = 0  # bumped when columns change: drawn lines depend on them
        self._row_memo: LRUCache[tuple[Any, ...], Any] = LRUCache(ROW_MEMO)
        self._frame_style: Style | None = None  # the widget's style while a frame is drawn
        super().__init__(**kw)
        # Smaller than DataTable's (1,000 to 10,000 entries): a screen holds ~50 rows, and
        # every cached segment is an object the garbage collector walks on each full pass.
        self._row_renderable_cache = LRUCache(ROW_MEMO)
        self._line_cache = LRUCache(ROW_MEMO)
        self._cell_render_cache = LRUCache(ROW_MEMO)
        self._data = _DataView(self)  # type: ignore[assignment]
        self.rows = _RowsView(self._store)  # type: ignore[assignment]
        self._row_locations = _Locations(self._store)  # type: ignore[assignment]

    # -- the rows --------------------------------------------------------------------------

    def set_rows(self, keys: Sequence[str], records: Sequence[Any]) -> None:
        """Show these rows (keys unique) in this order. The cursor keeps its index (clamped);
        the scroll position stays."""
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

    def _cells_at(self, index: int) -> Sequence[Any]:
        return self._store.cells_of(self._store.records[index])

    def _rows_changed(self) -> None:
        self._update_count += 1
        self._clear_caches()
        self._set_virtual_size()
        self.cursor_coordinate = self.cursor_coordinate  # clamp to the new rows
        if len(self._store) and self.show_cursor and self.cursor_type != "none":
            self._highlight_cursor()
        self.refresh()

    def _set_virtual_size(self) -> None:
        width = sum(c.get_render_width(self) for c in self.columns.values())
        header = self.header_height if self.show_header else 0
        self.virtual_size = Size(width + self._row_label_column_width, len(self._store) + header)

    def set_columns(self, columns: Iterable[tuple[str, str | Text, int]]) -> None:
        """Add the columns (key, label, width), or relabel and resize the ones there."""
        for key, label, width in columns:
            column = self.columns.get(ColumnKey(key))
            if column is None:
                self.add_column(label, width=width, key=key)
                continue
            column.label = Text.from_markup(label) if isinstance(label, str) else label
            column.width = width
        self._columns_epoch += 1
        self._update_count += 1
        self._clear_caches()
        self._set_virtual_size()
        self.refresh()

    # -- DataTable's storage API, on the list ------------------------------------------------

    @property
    def row_count(self) -> int:
        return len(self._store)

    @property
    def _y_offsets(self) -> _Offsets:  # type: ignore[override]
        return _Offsets(self._store)

    @property
    def ordered_rows(self) -> _OrderedRows:  # type: ignore[override]
        return _OrderedRows(self._store)

    def get_row(self, row_key: RowKey | str) -> list[Any]:
        index = self._store.find(row_key)
        if index is None:
            raise RowDoesNotExist(f"Row key {row_key!r} is not valid.")
        return list(self._cells_at(index))

    def get_row_at(self, row_index: int) -> list[Any]:
        if not self.is_valid_row_index(row_index):
            raise RowDoesNotExist(f"Row index {row_index!r} is not valid.")
        return list(self._cells_at(row_index))

    def get_row_index(self, row_key: RowKey | str) -> int:
        index = self._store.find(row_key)
        if index is None:
            raise RowDoesNotExist(f"No row exists for row_key={row_key!r}")
        return index

    def get_cell_at(self, coordinate: Coordinate) -> Any:
        row, column = coordinate
        if not (self.is_valid_row_index(row) and self.is_valid_column_index(column)):
            raise CellDoesNotExist(f"No cell exists at coordinate {coordinate!r}.")
        cells = self._cells_at(row)
        return cells[column] if column < len(cells) else None

    def clear(self, columns: bool = False) -> RowTable:
        self._store.set([], [])
        if columns:
            self.columns.clear()
            self._column_locations = type(self._column_locations)({})
            self._columns_epoch += 1
        self._update_count += 1
        self._clear_caches()
        self._set_virtual_size()
        self.cursor_coordinate = Coordinate(0, 0)
        self.hover_coordinate = Coordinate(0, 0)
        self.refresh()
        self.scroll_x = self.scroll_y = 0
        self.scroll_target_x = self.scroll_target_y = 0
        return self

    def add_column(
        self, label: Any, *, width: int | None = None, key: str | None = None, default: Any = None
    ) -> ColumnKey:
        if width is None:
            raise ValueError("RowTable columns need a width (cells are never measured)")
        column_key = super().add_column(label, width=width, key=key, default=default)
        self._columns_epoch += 1
        self._set_virtual_size()
        return column_key

    def add_row(
        self, *cells: Any, height: int | None = 1, key: str | None = None, label: Any = None
    ) -> RowKey:
        """One row at the bottom (cells as given: only for a table without a `cells` maker)."""
        if height != 1 or label is not None:
            raise ValueError("RowTable rows are one line high, without a label")
        if self._store.cells_of is not _identity:
            raise TypeError("this RowTable makes its cells from records: use set_rows")
        row_key = RowKey(key)
        name = key if key is not None else f"row-{id(row_key)}"
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

    def update_cell(self, *args: Any, **kw: Any) -> None:
        raise NotImplementedError("RowTable rows are replaced whole: set_rows")

    def update_cell_at(self, *args: Any, **kw: Any) -> None:
        raise NotImplementedError("RowTable rows are replaced whole: set_rows")

    def remove_column(self, column_key: ColumnKey | str) -> None:
        raise NotImplementedError("RowTable columns are set whole: clear(columns=True)")

    def sort(
        self, *columns: ColumnKey | str, key: Callable[[Any], Any] | None = None,
        reverse: bool = False,
    ) -> RowTable:  # fmt: skip
        """DataTable's sort, on the cells (the panes sort their records themselves)."""
        picks = [self.get_column_index(c) for c in columns]

        def value(i: int) -> Any:
            cells = self._cells_at(i)
            data = itemgetter(*picks)(cells) if picks else tuple(cells)
            return key(data) if key is not None else data

        order = sorted(range(len(self._store)), key=value, reverse=reverse)
        self._store.set([self._store.keys[i] for i in order],
                        [self._store.records[i] for i in order])  # fmt: skip
        self._rows_changed()
        return self

    # -- drawing a line: DataTable's, with its per-row style lookups made once per frame ---

    def notify_style_update(self) -> None:
        """DataTable drops every cached line on any style update, and focus is one (each pane
        switch). Its caches and ours are keyed by the pseudo-class state (focus, hover), so
        unless the CSS itself changed (theme, stylesheet) or our classes did, they stay."""
        epoch = (self.app._css_update_count, frozenset(self.classes))
        if epoch != self._style_epoch:
            self._style_epoch = epoch
            self._style_memo.clear()
            self._row_memo.clear()
            super().notify_style_update()
            return
        Widget.notify_style_update(self)
        self._styles_cache.clear()
        self._get_styles_to_render_cell.cache_clear()  # not keyed by focus
        self.refresh()

    def render_lines(self, crop: Region) -> list[Strip]:
        # DataTable asks for its `rich_style` on every line, which blends colours up the DOM:
        # once per frame is enough.
        self._frame_style = self.rich_style
        try:
            return super().render_lines(crop)  # type: ignore[no-any-return]
        finally:
            self._frame_style = None

    def render_line(self, y: int) -> Strip:
        """DataTable's, with the widget's style made once per frame (`render_lines`)."""
        if self.fixed_rows or self._frame_style is None:
            return super().render_line(y)  # type: ignore[no-any-return]
        scroll_x, scroll_y = self.scroll_offset
        if y >= (self.header_height if self.show_header else 0):
            y += scroll_y
        strip: Strip = self._render_line(y, scroll_x, scroll_x + self.size.width, self._frame_style)
        return strip

    def _clear_caches(self) -> None:
        super()._clear_caches()
        self._style_memo.clear()

    def _component_rich_style(self, name: str) -> Style:
        """A component class's rich style, computed once per pseudo-class state (focus):
        DataTable asks for it on every line, and each answer blends colours up the DOM."""
        key = (name, self._pseudo_class_state)
        style = self._style_memo.get(key)
        if style is None:
            style = self._style_memo[key] = self.get_component_styles(name).rich_style
        return style

    def _get_row_style(self, row_index: int, base_style: Style) -> Style:
        if row_index == -1:
            return self._component_rich_style("datatable--header")
        if row_index < self.fixed_rows:
            return self._component_rich_style("datatable--fixed")
        if self.zebra_stripes:
            odd = row_index % 2
            return self._component_rich_style(
                "datatable--odd-row" if odd else "datatable--even-row"
            )
        return base_style

    def _render_line_in_row(
        self, row_key: RowKey, line_no: int, base_style: Style, cursor_location: Coordinate,
        hover_location: Coordinate,
    ) -> tuple[list[list[Segment]], list[list[Segment]]]:  # fmt: skip
        """DataTable's, for tables without fixed columns or row labels (the panes')."""
        if self.fixed_columns or (self._labelled_row_exists and self.show_row_labels):
            return super()._render_line_in_row(  # type: ignore[no-any-return]
                row_key, line_no, base_style, cursor_location, hover_location
            )
        cursor_type = self.cursor_type
        found = self._store.find(row_key)
        row_index = -1 if found is None else found
        key = self._line_key(row_index, base_style, cursor_location, hover_location)
        cached = self._row_memo.get(key) if key is not None else None
        if cached is not None:
            return cached  # type: ignore[no-any-return]
        row_style = self._get_row_style(row_index, base_style)
        should_highlight = self._should_highlight
        render_cell = self._render_cell
        scrollable: list[list[Segment]] = []
        table_width = self._row_label_column_width
        for column_index, column in enumerate(self.ordered_columns):
            width = column.get_render_width(self)
            table_width += width
            at = Coordinate(row_index, column_index)
            cell = render_cell(
                row_index, column_index, row_style, width,
                cursor=should_highlight(cursor_location, at, cursor_type),
                hover=should_highlight(hover_location, at, cursor_type),
            )  # fmt: skip
            scrollable.append(cell[line_no])
        # the row's style carried to the widget's right edge, as DataTable does
        remaining = max(0, self.size.width - table_width)
        if cursor_type == "row":
            extend, _ = self._get_styles_to_render_cell(
                row_index == -1, False, False,
                should_highlight(hover_location, Coordinate(row_index or 0, 0), cursor_type),
                row_index == cursor_location.row, self.show_cursor, self._show_hover_cursor,
                False, False,
            )  # fmt: skip
            extend = row_style + extend
        elif row_style.bgcolor is not None:
            faded = Color.from_rich_color(row_style.bgcolor).blend(
                self.background_colors[1], factor=0.25
            )
            extend = Style.from_color(color=row_style.color, bgcolor=faded.rich_color)
        else:
            extend = Style.from_color(row_style.color, row_style.bgcolor)
        extend += Style.from_meta({"row": row_index, "column": 0, "out_of_bounds": True})
        scrollable.append([Segment(" " * remaining, extend)])
        pair: tuple[list[list[Segment]], list[list[Segment]]] = ([], scrollable)
        if key is not None:
            self._row_memo[key] = pair
        return pair

    def _line_key(
        self, row_index: int, base_style: Style, cursor: Coordinate, hover: Coordinate
    ) -> tuple[Any, ...] | None:
        """What a drawn line depends on, its cells' content included: rows shown again with
        the same content (a refill each second, a find undone, a pane shown again) are not
        drawn again. None when a cell is not a one-line Text (then nothing is kept)."""
        _label, cells = self._get_row_renderables(row_index)
        content = []
        for cell in cells:
            if not _simple_text(cell):
                return None
            content.append((cell.plain, cell.style, tuple(cell.spans)))
        if self.cursor_type == "row":
            where: tuple[Any, ...] = (row_index == cursor.row, row_index == hover.row)
        else:
            where = (cursor, hover)
        return (
            row_index, tuple(content), base_style, self.cursor_type, where, self.show_cursor,
            self._show_hover_cursor, self._pseudo_class_state, self.size.width,
            self._columns_epoch, self.cell_padding, self.zebra_stripes, self.fixed_rows,
        )  # fmt: skip

    # -- drawing a cell: DataTable's look, without its general renderable machinery ----------

    def _render_cell(
        self, row_index: int, column_index: int, base_style: Style, width: int,
        cursor: bool = False, hover: bool = False,
    ) -> list[list[Segment]]:  # fmt: skip
        """DataTable renders every cell through Styled(Padding(cell)) and two passes of
        Console.render_lines: most of a repaint. A one-line Text cell gives the same segments
        directly (`cell_segments`, tested against DataTable's own)."""
        if column_index < 0 or self.fixed_rows or self.fixed_columns:
            return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        header = row_index == -1
        _label, cells = self._get_row_renderables(row_index)
        cell = cells[column_index] if column_index < len(cells) else None
        if not _simple_text(cell):
            return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        component, post = self._get_styles_to_render_cell(
            header, False, False, hover, cursor, self.show_cursor, self._show_hover_cursor,
            self.cursor_foreground_priority == "css", self.cursor_background_priority == "css",
        )  # fmt: skip
        pre = base_style + Style.from_meta({"row": row_index, "column": column_index}) + component
        assert isinstance(cell, Text)
        # Not cached per cell: drawn lines are kept whole (`_row_memo`).
        return [cell_segments(cell, width, self.cell_padding, pre, post, self.app.console)]

    # -- what DataTable computes by walking every row: one-line rows make it arithmetic -----

    def _on_resize(self, event: events.Resize) -> None:
        """DataTable drops every cached line on any resize, including a hidden pane shown
        again at the same size (each pane switch); only a new width changes our lines."""
        if event.size.width != self._drawn_width:
            self._drawn_width = event.size.width
            self._update_count += 1

    def _update_dimensions(self, new_rows: Iterable[RowKey]) -> None:
        self._set_virtual_size()

    def _update_column_widths(self, updated_cells: set[Any]) -> None:
        """Columns have fixed widths: nothing to measure."""

    def _row_y(self, row_index: int) -> int:
        return row_index + (self.header_height if self.show_header else 0)

    def _get_row_region(self, row_index: int) -> Region:
        if not self.is_valid_row_index(row_index):
            return Region(0, 0, 0, 0)
        width = sum(c.get_render_width(self) for c in self.columns.values())
        width += self._row_label_column_width
        return Region(0, self._row_y(row_index), max(self.size.width, width), 1)

    def _get_cell_region(self, coordinate: Coordinate) -> Region:
        if not self.is_valid_coordinate(coordinate):
            return Region(0, 0, 0, 0)
        row_index, column_index = coordinate
        ordered = self.ordered_columns
        x = sum(c.get_render_width(self) for c in ordered[:column_index])
        x += self._row_label_column_width
        width = ordered[column_index].get_render_width(self)
        return Region(x, self._row_y(row_index), width, 1)

    def _page_height(self) -> int:
        header = self.header_height if self.show_header else 0
        return self.scrollable_content_region.height - header

    def action_page_down(self) -> None:
        if not (self.show_cursor and self.cursor_type in ("cell", "row")):
            super().action_page_down()
            return
        self._set_hover_cursor(False)
        height = self._page_height()
        row = self.cursor_row
        target = row + min(height + 1, max(1, self.row_count - row)) - 1
        self.scroll_relative(y=height, animate=False, force=True)
        self.move_cursor(row=target, scroll=False)

    def action_page_up(self) -> None:
        if not (self.show_cursor and self.cursor_type in ("cell", "row")):
            super().action_page_up()
            return
        self._set_hover_cursor(False)
        height = self._page_height()
        row = self.cursor_row
        target = row - min(height + 1, row + 1) + 1
        self.scroll_relative(y=-height, animate=False)
        self.move_cursor(row=target, scroll=False)


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
    if not text._spans:
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
