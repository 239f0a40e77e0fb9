"""Crash points: named places where a reliability trial may SIGKILL the engine.

The engine calls ``crash_point("rent.answered")`` (and the other names below) at the moments a
crash is most telling: between recording an intent and sending its request, between Vast's
answer and storing it, between a destroy and its ban. Nothing happens unless the environment
arms them (the trials in ``reliability/`` do):

    VASTUI_CRASH_POINTS="rent.answered:0.3,destroy.answered:0.5,*:0.01"
    VASTUI_CRASH_SEED=42

Each entry is ``name:probability``; ``*`` is the chance for any name not listed. A point that
hits writes one line to stderr (``crash point NAME: SIGKILL``) and kills its own process with
SIGKILL: no cleanup, no flush, exactly what a power cut or the OOM killer leaves behind. The
draws are seeded per name, so a trial replays given the same seed and the same calls.

Unarmed (the variable unset or empty, as in production), a call costs one dict lookup.
"""

from __future__ import annotations

import math
import os
import random
import signal

ENV_POINTS = "VASTUI_CRASH_POINTS"
ENV_SEED = "VASTUI_CRASH_SEED"
ANY = "*"

# The points the engine calls (engine.py); others may be added, and `*` covers them too.
NAMES = (
    "rent.before_send",  # rent intent recorded, create request not sent yet
    "rent.answered",  # Vast answered the create, the instance not stored yet
    "destroy.before_send",  # destroy intent recorded, DELETE not sent yet
    "destroy.answered",  # Vast answered the DELETE, kill and ban not recorded yet
    "drain.cordoned",  # a worker cordoned in curio's cluster, its drain recorded, not destroyed
    "step.end",  # a reconcile step finished
)


class CrashSpecError(ValueError):
    """VASTUI_CRASH_POINTS or VASTUI_CRASH_SEED cannot be read."""


def parse_points(text: str) -> dict[str, float]:
    """``"a:0.3,*:0.01"`` → ``{"a": 0.3, "*": 0.01}``; :class:`CrashSpecError` names a bad entry."""
    points: dict[str, float] = {}
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            continue
        name, sep, prob_text = entry.rpartition(":")
        name = name.strip()
        if not sep or not name:
            raise CrashSpecError(f"{ENV_POINTS}: entry {entry!r} is not NAME:PROBABILITY")
        try:
            prob = float(prob_text)
        except ValueError:
            raise CrashSpecError(f"{ENV_POINTS}: entry {entry!r}: not a number") from None
        if not (math.isfinite(prob) and 0.0 <= prob <= 1.0):
            raise CrashSpecError(f"{ENV_POINTS}: entry {entry!r}: probability must be 0 to 1")
        points[name] = prob  # 0 kept: "step.end:0,*:0.1" spares step.end
    return points


def parse_seed(text: str | None) -> int:
    if text is None or not text.strip():
        return 0
    try:
        return int(text)
    except ValueError:
        raise CrashSpecError(f"{ENV_SEED}: {text!r} is not an integer") from None


class Arming:
    """Which points are armed, and one seeded random stream per name."""

    def __init__(self, points: dict[str, float], seed: int = 0) -> None:
        self.points = points
        self.seed = seed
        self.armed = any(prob > 0.0 for prob in points.values())
        self._streams: dict[str, random.Random] = {}

    def hits(self, name: str) -> bool:
        """Whether this call of ``name`` crashes (draws from ``name``'s own stream)."""
        prob = self.points.get(name, self.points.get(ANY, 0.0))
        if prob <= 0.0:
            return False
        stream = self._streams.get(name)
        if stream is None:
            # A string seed is hashed the same way in every process (unlike hash()).
            stream = self._streams[name] = random.Random(f"{self.seed}:{name}")
        return stream.random() < prob


_arming: Arming | None = None  # parsed from the environment at the first call


def _load() -> Arming:
    global _arming
    try:
        points = parse_points(os.environ.get(ENV_POINTS, ""))
        seed = parse_seed(os.environ.get(ENV_SEED))
    except CrashSpecError as exc:
        # A trial's typo must not become a crash of its own: say so, arm nothing.
        os.write(2, f"{exc}; crash points disarmed\n".encode())
        points, seed = {}, 0
    _arming = Arming(points, seed)
    return _arming


def crash_point(name: str) -> None:
    """SIGKILL this process here if the environment armed ``name`` and its draw hits."""
    arming = _arming if _arming is not None else _load()
    if not arming.armed:
        return
    if arming.hits(name):
        _die(name)


def _die(name: str) -> None:
    # os.write: unbuffered, the line is out before the kill (sys.stderr may buffer).
    os.write(2, f"crash point {name}: SIGKILL\n".encode())
    os.kill(os.getpid(), signal.SIGKILL)


def reset() -> None:
    """Read the environment again at the next call (tests)."""
    global _arming
    _arming = None
