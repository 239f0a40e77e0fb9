"""Help, generated: every pane's keys from its live bindings (after the user's [ui.keymap]), what
every column means, and what the summary strip says. Nothing here is written by hand twice."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar

from rich.table import Table
from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingsMap, BindingType
from textual.containers import VerticalScroll
from textual.dom import DOMNode
from textual.widgets import Label, Static

from vastui.console.backdrop import Dialog
from vastui.console.panes.base import Column

Section = tuple[str, type[DOMNode], tuple[Column, ...]]


def live_bindings(app: App[Any], cls: type[DOMNode]) -> list[tuple[str, Binding]]:
    """(keys shown, binding) of a class's bindings with the app's keymap applied, in the order
    they are declared; keys bound to one action are joined ("n/escape")."""
    merged = cls._merged_bindings
    bindings = (merged if merged is not None else cls._merge_bindings()).copy()
    keymap = getattr(app, "_keymap", {})
    if keymap:
        bindings.apply_keymap(keymap)
    by_action: dict[tuple[str, str | None], list[Binding]] = {}
    for _key, items in bindings.key_to_bindings.items():
        for binding in items:
            if binding.system:
                continue
            by_action.setdefault((binding.action, binding.id), []).append(binding)
    return [
        ("/".join(dict.fromkeys(app.get_key_display(b) for b in group)), group[0])
        for group in by_action.values()
    ]


def keys_table(app: App[Any], cls: type[DOMNode]) -> Table:
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold cyan", no_wrap=True, min_width=8)
    table.add_column(no_wrap=True)
    table.add_column(style="dim")
    for keys, binding in live_bindings(app, cls):
        # Text, not str: a description is plain words ("[bids]" is a config section, not markup)
        table.add_row(
            Text(keys), Text(binding.description or binding.action), Text(binding.tooltip or "")
        )
    return table


def columns_table(columns: Iterable[Column]) -> Table:
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold", no_wrap=True, min_width=8)
    table.add_column()
    for col in columns:
        table.add_row(col.label, Text(col.doc))
    return table


def strip_table(rows: Iterable[tuple[str, str]]) -> Table:
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold", no_wrap=True, min_width=8)
    table.add_column()
    for example, meaning in rows:
        table.add_row(example, meaning)
    return table


class HelpScreen(Dialog[None]):
    """Keys per pane (as remapped), columns, the strip. Built when opened."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q,question_mark", "close", "Close", id="help-close")
    ]

    def __init__(
        self,
        global_cls: type[DOMNode],
        sections: list[Section],
        extra: list[tuple[str, type[DOMNode]]],
        strip: Iterable[tuple[str, str]],
    ) -> None:
        super().__init__(classes="dialog-screen")
        self.global_cls = global_cls
        self.sections = sections
        self.extra = extra
        self.strip = tuple(strip)
        self.rows: list[tuple[str, str, str]] = []  # (section, keys, description) as shown

    def _keys(self, section: str, cls: type[DOMNode]) -> Table:
        for keys, binding in live_bindings(self.app, cls):
            self.rows.append((section, keys, binding.description or binding.action))
        return keys_table(self.app, cls)

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="dialog detail", id="help"):
            yield Label(Text("vastui keys", style="bold"), classes="dialog-title")
            yield Static(
                Text(
                    "Keys as bound now (remap any binding id in [ui.keymap] of the config); "
                    "ctrl+p finds every action by name.",
                    style="dim",
                )
            )
            yield Label(Text("Everywhere", style="bold"), classes="section")
            yield Static(self._keys("Everywhere", self.global_cls))
            for title, cls, columns in self.sections:
                yield Label(Text(title, style="bold"), classes="section")
                yield Static(self._keys(title, cls))
                if columns:
                    yield Static(columns_table(columns), classes="help-columns")
            for title, cls in self.extra:
                yield Label(Text(title, style="bold"), classes="section")
                yield Static(self._keys(title, cls))
            yield Label(Text("The summary strip", style="bold"), classes="section")
            yield Static(strip_table(self.strip))

    def on_mount(self) -> None:
        self.query_one("#help").focus()  # arrows and page keys scroll

    def action_close(self) -> None:
        self.dismiss(None)


def all_binding_ids(classes: Iterable[type[DOMNode]]) -> set[str]:
    ids: set[str] = set()
    for cls in classes:
        merged = cls._merged_bindings or cls._merge_bindings()
        ids.update(
            b.id for items in BindingsMap.merge([merged]).key_to_bindings.values() for b in items
            if b.id
        )  # fmt: skip
    return ids
