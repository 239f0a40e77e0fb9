"""The bad list pane: machines vastui will not rent, why, and since when; legacy rows from the
original tool (keyed by operator account, not machine) shown apart for review.

Its keys: unignore, add a machine by id, sort.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from rich.text import Text
from textual.binding import Binding, BindingType

from vastui.console.cells import t
from vastui.console.dialogs import ConfirmScreen, PromptScreen
from vastui.console.messages import SendCommand
from vastui.console.panes.base import FIND_BINDING, SORT_BINDINGS, Column, Row, TablePane
from vastui.domain.machines import REASON_MAX_CHARS, BadEntry
from vastui.domain.timefmt import iso_utc


class BadListPane(TablePane):
    PANE = "bad"
    DEFAULT_SORT = None  # newest first, as the store lists them
    GROW = ("reason",)
    COLUMNS: ClassVar[tuple[Column, ...]] = (
        Column("machine", "Machine", 8, "machine_id: the physical machine (what is banned)"),
        Column("host", "Host (acct)", 11, "host_id: the operator's account, for information"),
        Column("gpu", "GPU", 14, "GPU model when it was banned"),
        Column("reason", "Reason", 36, "why: the kill or strike that banned it, or yours", grow=80),
        Column("source", "Source", 9, "manual (you), automatic (the engine), legacy (import)"),
        Column("when", "When", 20, "when it was banned (UTC)"),
        Column("bans", "Bans", 4, "times the machine was banned (a repeat ban adds one)"),
        Column("expires", "Expires", 20, "when the ban lapses, or never"),
    )
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("u", "unignore", "Unignore", id="bad-unignore",
                tooltip="Take the machine off the bad list"),
        Binding("a", "add_bad", "Add", id="bad-add", tooltip="Add a machine by its machine_id"),
        FIND_BINDING,
        *SORT_BINDINGS,
    ]  # fmt: skip
    SORT_VALUES: ClassVar[dict[str, Callable[[Any], Any]]] = {
        "machine": lambda e: getattr(e, "machine_id", None),
        "host": lambda e: e.host_id,
        "gpu": lambda e: e.gpu_name,
        "reason": lambda e: getattr(e, "reason", None),
        "source": lambda e: getattr(e, "source", "legacy"),
        "when": lambda e: getattr(e, "created_at", None),
        "bans": lambda e: getattr(e, "bans", None),
        "expires": lambda e: getattr(e, "expires_at", None) or float("inf"),
    }

    def build_rows(self) -> list[Row]:
        snap = self.host.snapshot
        rows: list[Row] = []
        for entry in snap.bad:
            rows.append((f"m{entry.machine_id}", [
                t(entry.machine_id),
                t(entry.host_id),
                t(entry.gpu_name),
                t(entry.reason),
                t(entry.source, "yellow" if entry.source == "automatic" else ""),
                t(iso_utc(entry.created_at)),
                t(entry.bans),
                t(iso_utc(entry.expires_at) if entry.expires_at else "never"),
            ], entry))  # fmt: skip
        for item in snap.legacy:
            rows.append((f"r{item.id}", [
                t("review", "bold yellow"),
                t(item.host_id),
                t(item.gpu_name),
                t(f"legacy host-level {item.kind}: {item.reason or ''}"),
                t("legacy", "dim"),
                t(iso_utc(item.legacy_added_at) if item.legacy_added_at else None),
                t(""),
                t(""),
            ], item))  # fmt: skip
        return rows

    def title(self) -> str:
        snap = self.host.snapshot
        review = len(snap.legacy)
        return f"4 Bad list ({len(snap.bad)}{f' + {review} to review' if review else ''})"

    def action_unignore(self) -> None:
        entry = self.selected()
        if not isinstance(entry, BadEntry) or not self.host.guard():
            return
        machine = entry.machine_id
        host = self.host

        def done(ok: bool | None) -> None:
            if ok:
                what = f"unignore {machine}"
                self.post_message(SendCommand("unignore", what, {"machine_id": machine}))

        host.ask(
            ConfirmScreen(f"Unignore machine {machine}?", Text("It may be rented again."),
                          "Unignore"),
            done,
        )  # fmt: skip

    def action_add_bad(self) -> None:
        if not self.host.guard():
            return
        host = self.host

        def valid(text: str) -> str | None:
            head, _, reason = text.partition(" ")
            if not head.isdigit() or not 0 < int(head) < 2**63:
                return "start with the machine id (a positive number), then the reason"
            if len(reason.strip()) > REASON_MAX_CHARS:
                return f"the reason is too long: at most {REASON_MAX_CHARS} characters"
            return None if reason.strip() else "give a reason after the machine id"

        def done(text: str | None) -> None:
            if text:
                head, _, reason = text.partition(" ")
                args: dict[str, int | str] = {"machine_id": int(head), "reason": reason.strip()}
                self.post_message(SendCommand("ignore", f"ignore machine {head}", args))

        host.ask(
            PromptScreen("Add a bad machine", Text("machine_id reason (machine, not host id)"),
                         placeholder="31244 GPU errors under load", validate=valid, button="Add",
                         max_chars=20 + REASON_MAX_CHARS),
            done,
        )  # fmt: skip
