"""A fault that repeats every step for every worker is a line a minute in the engine's log
(vastui/logfmt.py RepeatLimiter), not thousands; the held-back repeats are counted in the next
line let through; news below WARNING is never held back."""

from __future__ import annotations

import io
import logging

from vastui.engine.clock import SteadyClock
from vastui.logfmt import RepeatLimiter


def test_repeats_of_a_warning_are_one_line_a_minute_with_their_count() -> None:
    now = [0.0]
    limiter = RepeatLimiter(60.0, clock=lambda: now[0])
    streams = [io.StringIO(), io.StringIO()]
    log = logging.getLogger("test.repeats")
    log.propagate = False
    log.setLevel(logging.INFO)
    handlers = [logging.StreamHandler(s) for s in streams]
    for h in handlers:
        h.addFilter(limiter)  # one limiter, two handlers: each record decided once
        log.addHandler(h)
    try:
        for step in range(7400):  # 90 s of a cut-off controller, as the issue measured
            now[0] = step * 90.0 / 7400
            log.warning("instance %s: tunnel down: %s", step % 3, "lotus api refused")
            if step % 1000 == 0:
                log.info("fleet 3/3 workers")
        log.warning("another kind of trouble")
    finally:
        for h in handlers:
            log.removeHandler(h)
    for stream in streams:
        lines = stream.getvalue().splitlines()
        tunnel = [x for x in lines if "tunnel down" in x]
        assert len(tunnel) == 2, tunnel  # at 0 s and at 60 s
        assert "more like it in the last 60 s" in tunnel[1]
        assert sum(x == "fleet 3/3 workers" for x in lines) == 8, "INFO is never held back"
        assert lines[-1] == "another kind of trouble"


def test_a_wall_clock_step_back_after_one_forward_is_logged_and_a_flapping_one_held() -> None:
    """Two steps within the minute, forward and back, are two facts under one message
    template (vastui/engine/clock.py): both logged. A clock flapping between the two is
    still one line a minute per direction."""
    wall, mono = [1_790_000_000.0], [100.0]
    limiter = RepeatLimiter(60.0, clock=lambda: mono[0])
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(limiter)
    log = logging.getLogger("vastui.engine.clock")
    log.addHandler(handler)
    try:
        clock = SteadyClock(wall=lambda: wall[0], monotonic=lambda: mono[0])
        clock()
        for step in (2 * 3600.0, -2 * 3600.0):  # forward 2 h, then back 2 h, seconds apart
            wall[0] += step + 2
            mono[0] += 2
            clock()
        lines = stream.getvalue().splitlines()
        assert len(lines) == 2, lines
        assert "stepped +7200 s" in lines[0] and "stepped -7200 s" in lines[1]
        for _ in range(25):  # then it flaps each second within the minute: held back
            wall[0] += 2 * 3600.0 + 1
            mono[0] += 1
            clock()
            wall[0] -= 2 * 3600.0 - 1
            mono[0] += 1
            clock()
        assert len(stream.getvalue().splitlines()) == 2
    finally:
        log.removeHandler(handler)
