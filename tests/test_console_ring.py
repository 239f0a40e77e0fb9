"""The Logs pane's engine log (the console's own engine, vastui/console/sources/enginelog.py):
redacted as the headless engine's log is."""

from __future__ import annotations


def test_the_logs_panes_engine_log_never_shows_the_api_key():
    import collections
    import logging

    from vastui.console.sources.enginelog import RingHandler

    ring: collections.deque[str] = collections.deque(maxlen=10)
    handler = RingHandler(ring, lambda: 0.0, ["k3y-0f-the-account"])
    log = logging.getLogger("vastui.test.ring")
    log.addHandler(handler)
    log.propagate = False
    try:
        log.warning("GET /api/v0/instances/?api_key=%s failed", "k3y-0f-the-account")
        log.warning("Authorization: Bearer k3y-0f-the-account")
    finally:
        log.removeHandler(handler)
    assert len(ring) == 2 and not any("k3y-0f-the-account" in line for line in ring)
    assert all("***" in line for line in ring)
