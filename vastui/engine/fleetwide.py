"""Failures that are not the machines': one signature on several machines is the fleet's.

When the image, the configuration or the controller is broken (a wrong image tag, a missing
input file, the controller's endpoints down), every machine fails the same way. Charging each
with a strike or a ban only empties the market of good machines while the engine rents the
next one to fail. A failure's *signature* is its stage, its kill kind and its first real
error line with the ids and numbers taken out; the same signature on ``machines`` different
machines within ``window_s`` is a fleet-wide failure: no strikes or bans for it, and
provisioning pauses (reason ``fleet_failure``) until the operator clears it or a worker passes.

Pure functions; the engine records each failure's signature with its destroy (event detail)
and asks :func:`detect` before it strikes or bans.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

# The first line that says what went wrong (a bare "exit 1" trailer is not it).
_REAL = re.compile(
    r"error|fail|panic|fatal|denied|not found|no such|refused|unreachable|timed? ?out|cannot|"
    r"unable|missing|invalid|manifest unknown|killed",
    re.IGNORECASE,
)
_HEX = re.compile(r"\b(?:0x[0-9a-f]+|[0-9a-f]{6,})\b", re.I)


def _hex(match: re.Match[str]) -> str:
    """An id (0x..., or six or more hex digits with a digit among them); words stay."""
    token = match.group(0)
    return "<hex>" if token.lower().startswith("0x") or any(c.isdigit() for c in token) else token


_NOISE: list[tuple[re.Pattern[str], Any]] = [
    (re.compile(r"\x1b\[[0-9;]*[A-Za-z]"), ""),  # terminal colours
    (re.compile(r"^\s*\[?\d{4}-\d\d-\d\d[T ][\d:.,]+Z?\]?\s*"), ""),  # a leading timestamp
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I), "<id>"),
    (re.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}(?::\d+)?\b"), "<addr>"),
    (_HEX, _hex),
    (re.compile(r"\d+(?:\.\d+)?"), "#"),
    (re.compile(r"\s+"), " "),
]
# Verdicts of a measured pace (too slow for min_rate, or for curio's deadline) are each
# machine's own: their reasons read alike across machines ("partial rate # < # proofs/h"), yet
# the machines are independent, and a slow market is learned by the ranking (every such pace is
# recorded), not paused for. A fleet that makes every machine slow (a broken tuning, a loaded
# host) shows as no viable offer left once the paces are learned. Errors, hangs and timeouts
# still count.
MEASURED_KINDS = ("bench_below_min", "bench_aborted_early", "bench_deadline", "prove_below_min")
SIGNATURE_MAX = 160
# A signature once declared the fleet's stays so this long after its pause ends: workers rented
# into the failure may fail the same way hours later (a slow parameter fetch, a long benchmark).
REMEMBER_S = 24 * 3600.0


def first_error_line(lines: Sequence[str]) -> str | None:
    """The first line that names an error, else the last line (or None: no lines)."""
    for line in lines:
        if _REAL.search(line):
            return line
    return lines[-1] if lines else None


def normalize(line: str) -> str:
    """The line without what differs between machines: ids, addresses, numbers, times."""
    out = line
    for pattern, repl in _NOISE:
        out = pattern.sub(repl, out)
    return out.strip()


def signature(stage: str | None, kind: str, error_lines: Sequence[str]) -> str:
    """``<stage>/<kind>: <first real error line, normalized>`` (``<stage>/<kind>`` alone when
    there are no lines: a deadline, a Vast status)."""
    head = f"{stage or '-'}/{kind}"
    line = first_error_line([x for x in error_lines if x.strip()])
    text = f"{head}: {normalize(line)}" if line else head
    return text[:SIGNATURE_MAX]


@dataclass(frozen=True, slots=True)
class Failure:
    """One machine's failure, as the engine recorded it."""

    machine_id: int
    signature: str
    at: float
    instance_id: int | None = None


@dataclass(frozen=True, slots=True)
class FleetFailure:
    signature: str
    machines: tuple[int, ...]  # the distinct machines it struck within the window
    instances: tuple[int, ...]
    first_at: float
    last_at: float

    def text(self) -> str:
        shown = ", ".join(map(str, self.machines[:5])) + (" ..." if len(self.machines) > 5 else "")
        return f"{self.signature} on {len(self.machines)} machines ({shown})"


def detect(
    failures: Iterable[Failure], now: float, *, window_s: float, machines: int
) -> list[FleetFailure]:
    """Every signature seen on at least ``machines`` distinct machines in ``(now - window_s,
    now]``, the most widespread first."""
    by_sig: dict[str, list[Failure]] = {}
    for f in failures:
        if now - window_s < f.at <= now:
            by_sig.setdefault(f.signature, []).append(f)
    found = []
    for sig, group in by_sig.items():
        distinct = sorted({f.machine_id for f in group})
        if len(distinct) >= machines:
            found.append(
                FleetFailure(
                    signature=sig,
                    machines=tuple(distinct),
                    instances=tuple(sorted({f.instance_id for f in group if f.instance_id})),
                    first_at=min(f.at for f in group),
                    last_at=max(f.at for f in group),
                )
            )
    found.sort(key=lambda ff: (-len(ff.machines), ff.signature))
    return found
