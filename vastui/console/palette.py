"""The command palette (ctrl+p): every action of the console and of its panes, by name, with
the keys as remapped; choosing a pane's action shows that pane first."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol, runtime_checkable

from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.dom import DOMNode

from vastui.console.help import live_bindings


@runtime_checkable
class PaletteHost(Protocol):
    """What the palette needs of the app."""

    def pane_classes(self) -> list[tuple[str, type[DOMNode]]]: ...
    def show_pane(self, pane: str) -> None: ...
    def pane(self, name: str) -> DOMNode: ...
    async def run_action(self, action: str, default_namespace: DOMNode | None = None) -> bool: ...


class VastuiCommands(Provider):
    """The palette: every action of the console and of its panes, by name."""

    def _commands(self) -> list[tuple[str, str, str, str | None]]:
        app = self.app
        assert isinstance(app, PaletteHost)
        found: list[tuple[str, str, str, str | None]] = []
        for pane, cls in app.pane_classes():
            for _keys, b in live_bindings(app, cls):
                if b.action in ("sort", "sort_reverse"):
                    continue  # per pane; reachable by key
                label = f"{pane.capitalize()}: {b.description or b.action}"
                found.append((label, b.action, b.tooltip or "", pane))
        # Textual lists its own (Quit, Theme, Keys, ...): an app binding of the same name would be
        # listed twice (issue 31 item 6)
        system = {c.title.casefold() for c in self.app.get_system_commands(self.screen)}
        for _keys, b in live_bindings(app, type(app)):
            name = b.description or b.action
            if name.casefold() not in system:
                found.append((name, b.action, b.tooltip or "", None))
        return found

    async def discover(self) -> Hits:
        for name, action, help_text, pane in self._commands():
            yield DiscoveryHit(name, self._runner(action, pane), help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for name, action, help_text, pane in self._commands():
            score = matcher.match(name)
            if score > 0:
                run = self._runner(action, pane)
                yield Hit(score, matcher.highlight(name), run, help=help_text)

    def _runner(self, action: str, pane: str | None) -> Callable[[], Awaitable[None]]:
        async def run() -> None:
            app = self.app
            assert isinstance(app, PaletteHost)
            if pane is None:
                await app.run_action(action)
                return
            app.show_pane(pane)
            await app.run_action(action, app.pane(pane))

        return run
