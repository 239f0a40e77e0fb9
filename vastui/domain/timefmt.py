"""Times as records show them: epoch seconds rendered as ISO-8601 UTC."""

from __future__ import annotations

from datetime import UTC, datetime


def iso_utc(ts: float | None) -> str | None:
    """Render epoch seconds as ``YYYY-MM-DDTHH:MM:SSZ`` (UTC); ``None`` stays ``None``."""
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
