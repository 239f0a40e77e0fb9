"""Small helpers shared by the tests that drive real processes."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from vastui.sim.workers import free_port

WAIT = 60.0  # generous upper bound for any condition

__all__ = ["WAIT", "free_port", "wait_for"]


def wait_for(cond: Callable[[], Any], timeout: float = WAIT, what: str = "condition") -> Any:
    """Poll until `cond()` is truthy (an upper bound, not a timing assertion)."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)
