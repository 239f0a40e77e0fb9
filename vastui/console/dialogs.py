"""Dialogs: confirmations, one-line prompts (reasons, a machine id, the Vast filter), and the
question asked before quitting a console whose engine still has instances billing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Input, Label, Static

from vastui.console.backdrop import Dialog


class ConfirmScreen(Dialog[bool]):
    """Yes/no for the actions that change the fleet. Enter confirms and escape cancels, as in
    every dialog of the console (a prompt submits with enter too); `y`/`n` also answer."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y,enter", "answer(True)", "Yes", id="confirm-yes", show=False),
        Binding("n,escape", "answer(False)", "No", id="confirm-no", show=False),
    ]

    def __init__(self, title: str, body: Text | str, confirm_label: str = "Yes") -> None:
        super().__init__(classes="dialog-screen")
        self.title_text = title
        self.body = body
        self.confirm_label = confirm_label

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(Text(self.title_text, style="bold"), classes="dialog-title")
            yield Static(self.body, classes="dialog-body")
            with Horizontal(classes="dialog-buttons"):
                yield Button(f"{self.confirm_label} (enter)", id="yes", variant="error")
                yield Button("Cancel (esc)", id="no")

    def on_mount(self) -> None:
        self.query_one("#yes", Button).focus()

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, value: bool) -> None:
        self.dismiss(value)


PROMPT_MAX_CHARS = 1000  # a prompt's text unless it says otherwise


class BoundedInput(Input):
    """An input that holds at most one character more than its bound: a longer paste is kept
    just over it, and the prompt refuses it saying the bound (Textual's `max_length` refuses
    such a paste whole and in silence; none would keep 10 MB in a one-line widget)."""

    def __init__(self, bound: int, **kw: Any) -> None:
        super().__init__(**kw)
        self.bound = bound

    def replace(self, text: str, start: int, end: int) -> None:
        kept = len(self.value) - (min(len(self.value), end) - max(0, start))
        super().replace(text[: max(0, self.bound + 1 - kept)], start, end)


class PromptScreen(Dialog[str | None]):
    """One line of input (a reason, a machine id, a filter). Escape cancels. Its text is
    bounded (`max_chars`): one over the bound is refused saying so, and nothing is sent."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel", id="prompt-cancel", show=False)
    ]

    def __init__(
        self,
        title: str,
        body: Text | str,
        *,
        value: str = "",
        placeholder: str = "",
        validate: Callable[[str], str | None] | None = None,
        button: str = "OK",
        max_chars: int = PROMPT_MAX_CHARS,
    ) -> None:
        super().__init__(classes="dialog-screen")
        self.max_chars = max_chars
        self.title_text = title
        self.body = body
        self.value = value
        self.placeholder = placeholder
        self.validate = validate
        self.button = button

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(Text(self.title_text, style="bold"), classes="dialog-title")
            yield Static(self.body, classes="dialog-body")
            yield BoundedInput(
                self.max_chars, value=self.value, placeholder=self.placeholder, id="prompt-input"
            )
            yield Static("", id="prompt-error", classes="dialog-error")
            with Horizontal(classes="dialog-buttons"):
                yield Button(f"{self.button} (enter)", id="ok", variant="primary")
                yield Button("Cancel (esc)", id="cancel")

    def on_mount(self) -> None:
        self.query_one(Input).focus()

    def _submit(self) -> None:
        text = self.query_one(Input).value.strip()
        if len(text) > self.max_chars:
            problem: str | None = f"too long: at most {self.max_chars} characters"
        elif self.validate:
            problem = self.validate(text)
        else:
            problem = None if text else "required"
        if problem:
            self.query_one("#prompt-error", Static).update(Text(problem, style="bold red"))
            return
        self.dismiss(text)

    @on(Input.Submitted)
    def _submitted(self) -> None:
        self._submit()

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "ok":
            self._submit()
        else:
            self.dismiss(None)

    def action_cancel(self) -> None:
        self.dismiss(None)


class QuitScreen(Dialog[str | None]):
    """Quitting while this console's own engine has live instances: they keep billing, and
    nothing supervises them once the engine stops. `h` hands them over to a headless engine,
    `q` quits anyway, `n`/escape stays."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("h", "answer('handover')", "Hand over", id="quit-handover", show=False),
        Binding("q", "answer('quit')", "Quit anyway", id="quit-anyway", show=False),
        Binding("n,escape", "answer(None)", "Stay", id="quit-stay", show=False),
    ]

    def __init__(self, body: Text, *, can_hand_over: bool) -> None:
        super().__init__(classes="dialog-screen")
        self.body = body
        self.can_hand_over = can_hand_over

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(Text("Quit vastui?", style="bold"), classes="dialog-title")
            yield Static(self.body, classes="dialog-body")
            with Horizontal(classes="dialog-buttons"):
                if self.can_hand_over:
                    yield Button("Hand over to a headless engine (h)", id="handover",
                                 variant="primary")  # fmt: skip
                yield Button("Quit anyway (q)", id="quit", variant="error")
                yield Button("Stay (n)", id="stay")

    def on_mount(self) -> None:
        self.query_one("#stay", Button).focus()

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.dismiss(None if event.button.id == "stay" else event.button.id)

    def action_answer(self, value: str | None) -> None:
        if value == "handover" and not self.can_hand_over:
            return
        self.dismiss(value)
