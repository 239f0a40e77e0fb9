"""The messages of the console: workers post what they loaded, and panes post what they ask of
the app (a pane's own requests are declared on the pane, e.g. `OffersPane.FilterChosen`); the
app's handlers route them."""

from __future__ import annotations

from textual.message import Message

from vastui.console.snapshot import Snapshot
from vastui.engine.ranking import RankedOffer
from vastui.sanitize import sanitize_line

CommandArgs = dict[str, int | str]


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


class SendCommand(Message):
    """A command the operator confirmed in a pane (deploy, destroy, ignore, unignore): the app
    sends it to the engine and says how it went. `what` names it in notifications."""

    def __init__(self, kind: str, what: str, args: CommandArgs) -> None:
        super().__init__()
        self.kind = kind
        self.what = what
        self.args = args


class TitleChanged(Message):
    """A pane's tab title (its counts) changed with something other than new data."""


class CopyText(Message):
    """Text for the operator's clipboard (an ssh command)."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text
