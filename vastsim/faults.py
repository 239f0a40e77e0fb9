"""Fault injection for the simulated Vast.ai API.

Profiles ``none``/``light``/``heavy`` draw faults from a seeded RNG (deterministic for a
given seed and request order). Tests can queue exact faults with :meth:`Faults.script`.

Fault kinds (strings):

* ``"429"`` - a random one of the three 429 bodies below
* ``"429-text"``  plain text ``API requests too frequent: endpoint threshold=N``
* ``"429-detail"`` JSON ``{"detail": "API requests too frequent: ..."}``
* ``"429-json"``  JSON ``{"success": false, "error": "rate_limit_exceeded", "msg": ...}``
* ``"429-retry"`` plain text 429 with ``Retry-After: 1`` (any 429 kind may add ``+retry``,
  e.g. ``"429-json+retry"``)
* ``"502"``, ``"503"``, ``"504"`` - gateway errors; the request is NOT performed
* ``"slow"`` - the answer is delayed by :attr:`Faults.slow_delay` seconds (real time)
* ``"lost"``/``"lost-502"``/``"lost-504"`` - the request IS performed, the answer is a
  502/504 (``"lost"`` = 504)
* ``"lost-timeout"`` - the request IS performed, the answer is delayed by
  :attr:`Faults.lost_delay` seconds (past a client's timeout)
* ``"instance-exited"``/``"instance-offline"`` - only for create: the new instance turns
  exited/offline some time after it starts running
"""

from __future__ import annotations

import json
import random
import re
from collections import deque
from dataclasses import dataclass, field

PROFILES: dict[str, dict[str, float]] = {
    "none": {"429": 0.0, "5xx": 0.0, "slow": 0.0, "instance": 0.0, "lost_timeout": 0.0},
    "light": {"429": 0.05, "5xx": 0.02, "slow": 0.02, "instance": 0.05, "lost_timeout": 0.0},
    "heavy": {"429": 0.25, "5xx": 0.10, "slow": 0.05, "instance": 0.20, "lost_timeout": 0.01},
}

# x-rateLimit thresholds (vast-api.md §2), used in the 429 text.
THRESHOLDS = {
    "search": "2",
    "create": "4.5",
    "show": "2",
    "manage": "1",
    "destroy": "3",
    "list": "20",
    "ssh": "1",
    "instance_ssh": "2",
    "logs": "2",
    "user": "2",
    "reboot": "1.0",  # OAS reboot instance: "API requests too frequent endpoint threshold=1.0"
}

ENDPOINTS = frozenset(
    {
        "search",
        "create",
        "list",
        "show",
        "manage",
        "destroy",
        "reboot",
        "logs",
        "ssh",
        "instance_ssh",
        "user",
    }
)

KINDS = frozenset(
    {
        "429",
        "429-text",
        "429-detail",
        "429-json",
        "429-retry",
        "502",
        "503",
        "504",
        "slow",
        "lost",
        "lost-502",
        "lost-504",
        "lost-timeout",
        "instance-exited",
        "instance-offline",
    }
)


@dataclass
class _Script:
    pattern: str
    regex: re.Pattern[str] | None
    kinds: deque[str] = field(default_factory=deque)

    def matches(self, endpoint: str, method: str, path: str) -> bool:
        if self.regex is None:
            return self.pattern == endpoint
        return bool(self.regex.search(f"{method} {path}") or self.regex.search(path))


@dataclass(frozen=True)
class FaultResponse:
    """A canned HTTP answer replacing the real one."""

    status: int
    body: bytes
    content_type: str
    headers: tuple[tuple[str, str], ...] = ()


class Faults:
    def __init__(self, profile: str = "none", seed: int = 0) -> None:
        if profile not in PROFILES:
            raise ValueError(f"unknown fault profile {profile!r} (choose {sorted(PROFILES)})")
        self.profile = profile
        self.rates = dict(PROFILES[profile])
        self.rng = random.Random(seed * 7919 + 17)
        self.slow_delay = 3.0  # seconds (real time) for "slow"
        self.lost_delay = 125.0  # seconds (real time) for "lost-timeout", > PKG's 120 s timeout
        self.instance_fail_after = (300.0, 3600.0)  # simulated seconds after running
        self._scripts: list[_Script] = []
        self.injected: list[tuple[str, str]] = []  # (endpoint, kind) log, for tests/debugging

    # ---- scripting -------------------------------------------------------------------
    def script(self, target: str, kinds: list[str] | tuple[str, ...]) -> None:
        """Queue ``kinds`` for the next requests matching ``target``.

        ``target`` is an endpoint name (one of :data:`ENDPOINTS`: search, create, list,
        show, manage, destroy, reboot, logs, ssh, instance_ssh, user) or a regex searched in
        ``"METHOD /path"``. Each matching request consumes one kind; ``None``/``"ok"``
        entries let a request through untouched.
        """
        for k in kinds:
            base = k.split("+", 1)[0] if k else k
            if k not in (None, "ok") and base not in KINDS:
                raise ValueError(f"unknown fault kind {k!r}")
        regex = None if target in ENDPOINTS else re.compile(target)
        self._scripts.append(_Script(target, regex, deque(kinds)))

    def clear(self) -> None:
        self._scripts.clear()

    def pending(self) -> int:
        return sum(len(s.kinds) for s in self._scripts)

    # ---- decisions -------------------------------------------------------------------
    def decide(self, endpoint: str, method: str, path: str) -> str | None:
        """Fault kind for this request (or ``None``). Consumes scripted faults first."""
        for s in self._scripts:
            if s.kinds and s.matches(endpoint, method, path):
                kind = s.kinds.popleft()
                if not s.kinds:
                    self._scripts.remove(s)
                if kind in (None, "ok"):
                    return None
                self.injected.append((endpoint, kind))
                return kind
        if self.profile == "none":
            return None
        drawn = self._random_kind(endpoint)
        if drawn is not None:
            self.injected.append((endpoint, drawn))
        return drawn

    def _random_kind(self, endpoint: str) -> str | None:
        r = self.rng.random()
        p429, p5xx, pslow = self.rates["429"], self.rates["5xx"], self.rates["slow"]
        if r < p429:
            kind = self.rng.choice(("429-text", "429-detail", "429-json"))
            return kind + "+retry" if self.rng.random() < 0.5 else kind
        r -= p429
        if r < p5xx:
            if endpoint == "create" and self.rng.random() < 0.6:
                return self.rng.choice(("lost-502", "lost-504"))
            return self.rng.choice(("502", "503", "504"))
        r -= p5xx
        if r < pslow:
            return "slow"
        r -= pslow
        if endpoint == "create" and r < self.rates["lost_timeout"]:
            return "lost-timeout"
        return None

    def instance_failure(self, kind_hint: str | None = None) -> tuple[str, float] | None:
        """For a new instance: ``(status, seconds_after_running)`` or ``None``."""
        if kind_hint in ("instance-exited", "instance-offline"):
            status = kind_hint.split("-", 1)[1]
            return status, self.rng.uniform(*self.instance_fail_after)
        if self.rates["instance"] <= 0 or self.rng.random() >= self.rates["instance"]:
            return None
        status = self.rng.choice(("exited", "offline"))
        return status, self.rng.uniform(*self.instance_fail_after)

    # ---- canned answers --------------------------------------------------------------
    def response_for(self, kind: str, endpoint: str) -> FaultResponse | None:
        """The canned answer of an answer-replacing kind (429/5xx/lost-5xx)."""
        base, _, extra = kind.partition("+")
        threshold = THRESHOLDS.get(endpoint, "2")
        text = f"API requests too frequent: endpoint threshold={threshold}"
        headers: tuple[tuple[str, str], ...] = ()
        if extra == "retry" or base == "429-retry":
            headers = (("retry-after", "1"),)
        if base == "429":
            base = self.rng.choice(("429-text", "429-detail", "429-json"))
        if base in ("429-text", "429-retry"):
            return FaultResponse(429, text.encode(), "text/plain; charset=utf-8", headers)
        if base == "429-detail":
            return FaultResponse(429, _json({"detail": text}), "application/json", headers)
        if base == "429-json":
            body = {"success": False, "error": "rate_limit_exceeded", "msg": text}
            return FaultResponse(429, _json(body), "application/json", headers)
        if base in ("502", "503", "504", "lost", "lost-502", "lost-504"):
            status = {"lost": 504, "lost-502": 502, "lost-504": 504}.get(base) or int(base)
            return _gateway(status)
        return None


def _json(obj: object) -> bytes:
    return json.dumps(obj).encode()


_GATEWAY_TEXT = {
    502: "Bad Gateway",
    503: "Service Temporarily Unavailable",
    504: "Gateway Time-out",
}


def _gateway(status: int) -> FaultResponse:
    title = f"{status} {_GATEWAY_TEXT[status]}"
    html = (
        f"<html>\r\n<head><title>{title}</title></head>\r\n<body>\r\n"
        f"<center><h1>{title}</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n"
    )
    return FaultResponse(status, html.encode(), "text/html")
