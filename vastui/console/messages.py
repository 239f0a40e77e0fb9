"""The messages workers post; handlers in the app route them to the panes that own the widgets."""

from __future__ import annotations

from textual.message import Message

from vastui.console.bridge import Snapshot
from vastui.engine.ranking import RankedOffer
from vastui.sanitize import sanitize_line


class SnapshotLoaded(Message):
    def __init__(self, snapshot: Snapshot) -> None:
        super().__init__()
        self.snapshot = snapshot


class OffersLoaded(Message):
    def __init__(self, offers: list[RankedOffer]) -> None:
        super().__init__()
        self.offers = offers


class LogLines(Message):
    def __init__(self, token: int, source: str, lines: list[str]) -> None:
        super().__init__()
        self.token = token
        self.source = source
        self.lines = lines


class Problem(Message):
    """An error from a worker: a notification, never a crash."""

    def __init__(self, text: str, title: str = "Error") -> None:
        super().__init__()
        self.text = sanitize_line(text, 400)
        self.title = title
