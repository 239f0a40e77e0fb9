"""What the console remembers across runs (each table pane's sort), in the state directory's
ui.json: read leniently (a hand-edited file never crashes the console), written privately."""

from __future__ import annotations

import contextlib
import json

from vastui.config import ensure_state_dir, state_dir, write_private
from vastui.console.panes import BadListPane, InstancesPane, OffersPane
from vastui.console.panes.base import UiState


def save_ui_state(state: UiState) -> None:
    with contextlib.suppress(OSError):
        write_private(ensure_state_dir() / "ui.json", json.dumps(state))


def load_ui_state() -> UiState:
    try:
        data = json.loads((state_dir() / "ui.json").read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    state: UiState = {}
    for pane in (OffersPane, InstancesPane, BadListPane):
        known = {c.key for c in pane.COLUMNS}
        key = data.get(f"{pane.PANE}_sort")
        if key in known:  # a hand-edited file must not crash the console
            state[f"{pane.PANE}_sort"] = key
        if isinstance(data.get(f"{pane.PANE}_sort_reverse"), bool):
            state[f"{pane.PANE}_sort_reverse"] = data[f"{pane.PANE}_sort_reverse"]
    return state
