"""RowTable: a DataTable whose rows are set whole and drawn lazily must look and behave as
Textual's DataTable with the same rows (the panes' keys, messages and snapshots rely on it)."""

from __future__ import annotations

from typing import Any

import pytest
from rich.console import Console
from rich.padding import Padding
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.app import App, ComposeResult
from textual.containers import Horizontal
from textual.renderables.styled import Styled
from textual.widgets import DataTable

from vastui.console.rowtable import RowDoesNotExist, RowTable, cell_segments

COLUMNS = [("name", "Name", 12), ("n", "#", 3), ("where", "Location ▲", 10)]


def _cells(i: int) -> list[Text]:
    name = Text(f"RTX {4000 + i}", style="green" if i % 2 else "")
    if i % 3 == 0:
        name.stylize("bold", 0, 3)
    return [name, Text(str(i % 7)), Text(f"place number {i} far away", style="dim")]


class Pair(App[None]):
    """The same rows in a DataTable and in a RowTable, side by side, same width."""

    CSS = "DataTable { width: 60; height: 1fr; }"

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n
        self.selected: list[tuple[str, Any]] = []

    def compose(self) -> ComposeResult:
        with Horizontal():
            yield DataTable(id="plain", cursor_type="row", zebra_stripes=True)
            yield RowTable(id="rows", cursor_type="row", zebra_stripes=True, cells=_cells)

    def on_mount(self) -> None:
        plain = self.query_one("#plain", DataTable)
        rows = self.query_one("#rows", RowTable)
        for key, label, width in COLUMNS:
            plain.add_column(label, width=width, key=key)
        rows.set_columns(COLUMNS)
        for i in range(self.n):
            plain.add_row(*_cells(i), key=f"k{i}")
        rows.set_rows([f"k{i}" for i in range(self.n)], list(range(self.n)))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self.selected.append((event.data_table.id or "", event.row_key.value))


def _lines(table: DataTable) -> list[list[tuple[str, Style | None]]]:
    return [
        [(s.text, s.style) for s in table.render_line(y) if s.text]
        for y in range(table.size.height)
    ]


async def test_draws_exactly_as_datatable_through_the_keys() -> None:
    app = Pair(300)
    async with app.run_test(size=(130, 20)) as pilot:
        plain, rows = app.query_one("#plain", DataTable), app.query_one("#rows", RowTable)
        for keys in ([], ["down"] * 3, ["pagedown"], ["pagedown", "up"], ["ctrl+end"],
                     ["pageup"], ["ctrl+home"], ["end"], ["home"]):  # fmt: skip
            drawn = []
            for table in (plain, rows):
                table.focus()
                await pilot.press(*keys)
                await pilot.pause()
                drawn.append((table.cursor_coordinate, table.scroll_offset, _lines(table)))
            assert drawn[1] == drawn[0], keys
        for table in (plain, rows):
            table.focus()
            await pilot.press("enter")
        await pilot.pause()
        assert app.selected == [("plain", "k0"), ("rows", "k0")]


async def test_storage_api_answers_like_datatable() -> None:
    app = Pair(50)
    async with app.run_test(size=(130, 20)) as pilot:
        await pilot.pause()
        plain, rows = app.query_one("#plain", DataTable), app.query_one("#rows", RowTable)
        assert rows.row_count == plain.row_count == 50
        assert rows.get_row_index("k7") == plain.get_row_index("k7") == 7
        assert rows.get_row_at(7) == plain.get_row_at(7)
        assert rows.get_row("k9") == plain.get_row("k9")
        assert rows.get_cell("k3", "n") == plain.get_cell("k3", "n")
        assert rows.coordinate_to_cell_key(rows.cursor_coordinate).row_key.value == "k0"
        with pytest.raises(RowDoesNotExist):
            rows.get_row_index("nope")
        rows.move_cursor(row=40)
        rows.set_rows(["a", "b"], [1, 2])  # fewer rows: the cursor is clamped
        assert rows.cursor_row == 1 and rows.key_at(1) == "b" and rows.record_at(0) == 1
        assert rows.virtual_size.height == 3  # two rows and the header
        rows.remove_row("a")
        assert rows.row_count == 1 and rows.get_row_index("b") == 0
        with pytest.raises(NotImplementedError):
            rows.update_cell("b", "n", Text("x"))
        rows.clear()
        assert rows.row_count == 0 and rows.cursor_row == 0


async def test_sort_and_add_row_of_a_table_without_a_cell_maker() -> None:
    class One(App[None]):
        def compose(self) -> ComposeResult:
            yield RowTable(id="t")

    app = One()
    async with app.run_test(size=(80, 10)):
        table = app.query_one(RowTable)
        table.add_column("n", width=4, key="n")
        for value in (3, 1, 2):
            table.add_row(Text(str(value)), key=f"r{value}")
        table.sort("n", key=lambda cell: int(cell.plain))
        assert [table.key_at(i) for i in range(3)] == ["r1", "r2", "r3"]
        with pytest.raises(ValueError, match="need a width"):
            table.add_column("auto")


CONSOLE = Console(width=80, color_system="truecolor", force_terminal=True)
PRE = Style(bgcolor="grey23") + Style.from_meta({"row": 4, "column": 2})
POST = Style(color="yellow")


def _by_rich(cell: Text, width: int, pre: Style, post: Style) -> list[tuple[str, Style | None]]:
    """What DataTable._render_cell gives for a one-line cell."""
    options = CONSOLE.options.update_dimensions(width, 1).update(no_wrap=True)
    [line] = CONSOLE.render_lines(
        Styled(Padding(cell, (0, 1)), pre_style=pre, post_style=post), options
    )
    return [(s.text, s.style) for s in Segment.simplify(line) if s.text]


def _ours(cell: Text, width: int, pre: Style, post: Style) -> list[tuple[str, Style | None]]:
    segments = cell_segments(cell, width, 1, pre, post, CONSOLE)
    return [(s.text, s.style) for s in Segment.simplify(segments) if s.text]


def _spans() -> Text:
    text = Text("1234/5✗ tail", style="bold")
    text.stylize("red", 4, 7)
    text.stylize("underline", 2, 9)
    return text


@pytest.mark.parametrize(
    "cell",
    [
        Text("plain"),
        Text("green", style="green"),
        Text("", style="dim"),
        Text("exactly-ten"),
        Text("much longer than the column", style="italic"),
        Text("数据中心 wide", style="cyan"),
        Text("trailing   "),
        _spans(),
        Text.from_markup("Exp $/p ▲"),
        Text("■■□□□ setup", style=Style(color="green")),
    ],
    ids=lambda c: repr(c.plain),
)
@pytest.mark.parametrize("pre,post", [(PRE, POST), (PRE, Style()), (Style(), POST),
                                      (Style(), Style())])  # fmt: skip
@pytest.mark.parametrize("width", [2, 7, 13, 30])
def test_cell_segments_are_richs(cell: Text, pre: Style, post: Style, width: int) -> None:
    assert _ours(cell, width, pre, post) == _by_rich(cell, width, pre, post)
