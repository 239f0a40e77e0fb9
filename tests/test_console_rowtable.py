"""RowTable: a table on Textual's line API whose rows are set whole and drawn lazily must look
and behave as Textual's DataTable with a row cursor and the same rows (the panes' keys,
messages and snapshots rely on it), and draw again only the lines that change."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from rich.padding import Padding
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import on
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
    # right-justified: not plain one-line Text, so drawn through Rich as DataTable draws it
    count = Text(str(i % 7), justify="right")
    return [name, count, Text(f"place number {i} far away", style="dim")]


class Pair(App[None]):
    """The same rows in a DataTable and in a RowTable, side by side, same width."""

    CSS = "DataTable, RowTable { width: 60; height: 1fr; }"

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n
        self.selected: list[tuple[str, Any]] = []
        self.headers: list[tuple[str, str]] = []

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

    # DataTable's messages: RowTable's are subclasses of them, so one handler takes both
    @on(DataTable.RowSelected)
    def _selected(self, event: DataTable.RowSelected) -> None:
        self.selected.append((event.control.id or "", event.row_key.value))

    @on(DataTable.HeaderSelected)
    def _header(self, event: DataTable.HeaderSelected) -> None:
        self.headers.append((event.control.id or "", str(event.column_key.value)))


def _lines(table: DataTable | RowTable) -> list[list[tuple[str, Style | None]]]:
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
        # neither focused, then another theme: the component classes style both alike
        for theme in ("textual-dark", "textual-light"):
            app.theme = theme
            app.set_focus(None)
            await pilot.pause()
            assert _lines(rows) == _lines(plain), theme


async def test_the_mouse_hovers_moves_and_selects_as_on_datatable() -> None:
    app = Pair(300)
    async with app.run_test(size=(130, 20)) as pilot:
        plain, rows = app.query_one("#plain", DataTable), app.query_one("#rows", RowTable)
        app.set_focus(None)  # both drawn blurred
        for offset in ((5, 4), (30, 7), (59, 2)):  # 59: right of the columns, on the row
            drawn = []
            for table in (plain, rows):
                await pilot.hover(table, offset=offset)
                await pilot.pause()
                drawn.append(_lines(table))
            assert drawn[1] == drawn[0], offset
        for table in (plain, rows):
            await pilot.click(table, offset=(5, 4))  # moves the cursor to row 3
            await pilot.click(table, offset=(5, 4))  # on the cursor's row: selects it
            await pilot.click(table, offset=(16, 0))  # the "#" header
            await pilot.pause()
            assert table.cursor_row == 3
        assert app.selected == [("plain", "k3"), ("rows", "k3")]
        assert app.headers == [("plain", "n"), ("rows", "n")]


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
        assert rows.key_at(rows.cursor_row) == "k0"
        with pytest.raises(RowDoesNotExist):
            rows.get_row_index("nope")
        rows.move_cursor(row=40)
        rows.set_rows(["a", "b"], [1, 2])  # fewer rows: the cursor is clamped
        assert rows.cursor_row == 1 and rows.key_at(1) == "b" and rows.record_at(0) == 1
        assert rows.virtual_size.height == 3  # two rows and the header
        rows.remove_row("a")
        assert rows.row_count == 1 and rows.get_row_index("b") == 0
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


async def test_new_rows_draw_again_only_the_lines_that_changed() -> None:
    """A refill with one row changed draws that line and no other; the cursor's move draws its
    two rows; a refill with nothing changed draws nothing."""
    app = Pair(300)
    async with app.run_test(size=(130, 20)) as pilot:
        rows = app.query_one("#rows", RowTable)
        rows.focus()
        await pilot.pause()
        drawn: list[int] = []
        render_line = rows.render_line

        def spy(y: int) -> Any:
            drawn.append(y)
            return render_line(y)

        rows.render_line = spy  # type: ignore[method-assign]
        records = list(range(300))
        rows.set_rows([f"k{i}" for i in records], records)  # the same rows
        await pilot.pause()
        assert drawn == []
        records[4] = 1004  # row 4, under the header: line 5
        rows.set_rows([f"k{i}" for i in range(300)], records)
        await pilot.pause()
        assert drawn == [5]
        assert "RTX 5004" in "".join(s.text for s in render_line(5))
        drawn.clear()
        await pilot.press("down")
        await pilot.pause()
        assert sorted(drawn) == [1, 2]


@pytest.mark.parametrize(
    "source",
    [
        "from textual.widgets._data_table import RowKey",
        "import textual._segment_tools",
        "import textual.widgets._data_table as dt",
        "from textual.widgets import _data_table",
        "from textual._two_way_dict import TwoWayDict",
        "importlib.import_module('textual.widgets._data_table')",
    ],
)
def test_the_private_textual_scan_finds_private_imports(source: str) -> None:
    assert private_textual_imports(source)


def test_nothing_in_vastui_imports_textuals_private_modules() -> None:
    """Textual's private modules change between releases: vastui uses its public API only."""
    import vastui

    root = Path(vastui.__file__).parent
    found = {
        str(path.relative_to(root)): bad
        for path in sorted(root.rglob("*.py"))
        if (bad := private_textual_imports(path.read_text()))
    }
    assert found == {}
    assert not private_textual_imports("from textual.widgets.data_table import RowKey")


def private_textual_imports(source: str) -> list[str]:
    """The private Textual modules `source` imports (a module path with a part "_...")."""

    def private(module: str) -> bool:
        parts = module.split(".")
        return parts[0] == "textual" and any(p.startswith("_") for p in parts[1:])

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if private(a.name)]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if private(node.module):
                found.append(node.module)
            found += [f"{node.module}.{a.name}" for a in node.names
                      if private(f"{node.module}.{a.name}")]  # fmt: skip
        elif isinstance(node, ast.Call) and node.args:
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and private(arg.value):
                found.append(arg.value)  # importlib.import_module("textual._x")
    return found
