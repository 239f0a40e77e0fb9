"""Cells: remote values as plain Text (never markup, never escapes), and small formatters."""

from __future__ import annotations

from typing import Any

from rich.text import Text

from vastui.sanitize import sanitize_line


def t(value: Any, style: str = "") -> Text:
    """Remote values as plain Text: never markup, never escapes."""
    if value is None:
        return Text("-", style="dim")
    return Text(sanitize_line(str(value), 500), style=style)


def fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def money(value: float | None) -> str:
    """Dollars for people: cents under $100, whole dollars above."""
    if value is None:
        return "-"
    return f"${value:,.2f}" if abs(value) < 100 else f"${value:,.0f}"


def age(seconds: float | None) -> str:
    """A duration in the largest unit that keeps it short: 45s, 12m, 3.5h, 2.1d. Never negative:
    a timestamp ahead of the clock reads as 0s."""
    if seconds is None:
        return "-"
    s = max(0.0, seconds)
    if s < 90:
        return f"{s:.0f}s"
    if s < 3600:
        return f"{s / 60:.0f}m"
    if s < 86400 * 2:
        return f"{s / 3600:.1f}h"
    return f"{s / 86400:.1f}d"
