"""Finite work for a proofshare provider: a demand curve, work slots earned with challenge
proofs, and the 45-minute deadline with its penalty. A ``DemandPolicy`` of the market stand-in
(vastsim/proofsvc.py).

What the market documents (curio @ e0294b0f, documentation/en/experimental-features/
Snark-Market.md:162-172, "Notes"):

* work slots = completed challenge proofs ÷ 50; a slot holds one work ask or one assigned proof;
* challenge proofs are earned only with unpaid challenge proofs, "assigned when attempting to
  create a work ask while the challenge balance is too low";
* assigned work is due within 45 minutes; a miss costs 50 challenge proofs (the slot it held).

What it does not say, and this stand-in assumes (ASSUMPTION, marked where used):

* how many challenges a provider may hold at once: ``challenges_at_once`` (2);
* how long the market holds a buyer's request for this provider before it routes it to another
  provider: ``patience_s`` (60 s; the market has other providers, so work that finds no open
  ask here is lost to this provider, never queued for it);
* an ask refused for want of a slot is answered 429, the one refusal curio's ``CreateWorkAsk``
  handles by waiting (lib/proofsvc/provictl.go:111-115, tasks/proofshare/task_request.go:313-321).

Requests arrive as a non-homogeneous Poisson process (thinning) with the curve's rate, seeded:
two markets with the same seed and the same calls match the same requests.
"""

from __future__ import annotations

import math
import random
import re
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vastsim.proofsvc import Admit, Ask, Market, Request

HOUR = 3600.0
DAY = 24 * HOUR
CHALLENGES_PER_SLOT = 50  # Snark-Market.md:164-166
DEADLINE_S = 45 * 60.0  # Snark-Market.md:169
MISS_PENALTY = 50  # Snark-Market.md:167
ESTABLISHED_BALANCE = 50 * 64  # a wallet with 64 slots: more than a fleet of 8 can hold
MAX_RATE_PER_H = 100_000.0  # a bound on any curve (a typo must not make a busy loop)


class DemandError(ValueError):
    """A demand spec that does not parse: one line."""


@dataclass(frozen=True)
class Curve:
    """Requests per hour routed to this provider, as a function of hours since the start.

    ``steady``: ``rate``; ``daily``: ``rate`` × (1 + ``amplitude`` × sin(2π h / 24)), a day's
    cycle starting at its mean, rising; ``step``: ``rate`` until ``at_h``, then ``after``;
    ``pulse``: ``after`` from ``at_h`` until ``until_h``, ``rate`` before and after;
    ``bursts``: ``rate`` for the first half of every ``at_h`` hours, ``after`` for the second
    (work that comes and goes within a day: what a warm pool is for).
    """

    kind: str
    rate: float
    after: float = 0.0
    at_h: float = 0.0
    amplitude: float = 0.0
    until_h: float = math.inf

    def at(self, hours: float) -> float:
        if self.kind == "daily":
            return max(0.0, self.rate * (1.0 + self.amplitude * math.sin(2 * math.pi * hours / 24)))
        if self.kind in ("step", "pulse"):
            return self.after if self.at_h <= hours < self.until_h else self.rate
        if self.kind == "bursts":
            return self.after if (hours % self.at_h) >= self.at_h / 2 else self.rate
        return self.rate

    @property
    def peak(self) -> float:
        """The highest rate the curve reaches (the thinning's envelope)."""
        if self.kind == "daily":
            return self.rate * (1.0 + self.amplitude)
        if self.kind in ("step", "pulse", "bursts"):
            return max(self.rate, self.after)
        return self.rate

    def spec(self) -> str:
        if self.kind == "daily":
            return f"daily:{self.rate:g}:{self.amplitude:g}"
        if self.kind == "step":
            return f"step:{self.rate:g}:{self.after:g}:{self.at_h:g}"
        if self.kind == "pulse":
            return f"pulse:{self.rate:g}:{self.after:g}:{self.at_h:g}:{self.until_h:g}"
        if self.kind == "bursts":
            return f"bursts:{self.rate:g}:{self.after:g}:{self.at_h:g}"
        return f"steady:{self.rate:g}"


_SPEC = re.compile(r"(steady|daily|step|pulse|bursts)((?::[0-9.eE+-]+)+)")
_WANT = (
    "want steady:R, daily:R[:A], step:R1:R2[:H], pulse:R1:R2:H1:H2 or bursts:R1:R2:P "
    "(requests per hour)"
)


def parse_curve(spec: str) -> Curve:
    """``steady:R``, ``daily:R[:A]`` (A in [0, 1], default 0.5), ``step:R1:R2[:H]`` (R1/h until
    hour H, default 1, then R2/h), ``pulse:R1:R2:H1:H2`` (R2/h from hour H1 until H2, R1/h
    otherwise), ``bursts:R1:R2:P`` (R1/h for the first half of every P hours, R2/h for the
    second); rates in requests per hour."""
    m = _SPEC.fullmatch(spec.strip())
    if not m:
        raise DemandError(f"demand {spec!r}: {_WANT}")
    kind = m.group(1)
    try:
        nums = [float(x) for x in m.group(2)[1:].split(":")]
    except ValueError:
        raise DemandError(f"demand {spec!r}: a number does not parse") from None
    arity = {"steady": (1, 1), "daily": (1, 2), "step": (2, 3), "pulse": (4, 4),
             "bursts": (3, 3)}[kind]  # fmt: skip
    if not arity[0] <= len(nums) <= arity[1]:
        raise DemandError(f"demand {spec!r}: {kind} takes {arity[0]} to {arity[1]} numbers")
    if not all(math.isfinite(x) and x >= 0 for x in nums):
        raise DemandError(f"demand {spec!r}: numbers must be finite and not negative")
    if kind == "daily":
        curve = Curve("daily", nums[0], amplitude=nums[1] if len(nums) > 1 else 0.5)
        if curve.amplitude > 1:
            raise DemandError(f"demand {spec!r}: the amplitude is at most 1")
    elif kind == "step":
        curve = Curve("step", nums[0], after=nums[1], at_h=nums[2] if len(nums) > 2 else 1.0)
    elif kind == "pulse":
        if nums[3] <= nums[2]:
            raise DemandError(f"demand {spec!r}: the pulse must end after it begins")
        curve = Curve("pulse", nums[0], after=nums[1], at_h=nums[2], until_h=nums[3])
    elif kind == "bursts":
        if nums[2] <= 0:
            raise DemandError(f"demand {spec!r}: the period must be more than 0 hours")
        curve = Curve("bursts", nums[0], after=nums[1], at_h=nums[2])
    else:
        curve = Curve("steady", nums[0])
    if curve.peak > MAX_RATE_PER_H:
        raise DemandError(f"demand {spec!r}: at most {MAX_RATE_PER_H:g} requests per hour")
    return curve


@dataclass
class Account:
    """What the market keeps of a provider's trust and its work."""

    balance: int  # completed challenge proofs, less penalties
    missed: int = 0  # assigned requests past their deadline
    challenges_done: int = 0

    @property
    def slots(self) -> int:
        return self.balance // CHALLENGES_PER_SLOT


@dataclass
class FiniteDemand:
    """A ``DemandPolicy``: requests arrive along ``curve``; a provider asks within its slots,
    or for a challenge when it has none free; what is not done within the deadline is taken back
    with its penalty."""

    curve: Curve
    seed: int = 0
    balance: int = ESTABLISHED_BALANCE  # a provider's starting balance (0: a new wallet)
    challenges_at_once: int = 2  # ASSUMPTION (module doc)
    patience_s: float = 60.0  # ASSUMPTION (module doc)
    deadline_s: float = DEADLINE_S
    start: float | None = None  # the curve's hour 0 (the first call's time if None)
    accounts: dict[str, Account] = field(default_factory=dict)
    waiting: deque[float] = field(default_factory=deque)  # buyers' requests: arrival times
    arrived: int = 0
    lapsed: int = 0  # routed to another provider: no open ask here within patience
    matched_paid: int = 0
    _rng: random.Random = field(init=False)
    _next_arrival: float | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed * 7919 + 17)

    # -- the policy's hooks ------------------------------------------------------------

    def admit(self, market: Market, provider: str, now: float) -> Admit:
        """A slot free: a paid ask. None free: a challenge while the provider holds fewer than
        ``challenges_at_once``. Otherwise refused."""
        account = self._account(provider)
        paid_asks, challenge_asks = self._asks(market, provider)
        held_paid, held_challenges = self._assigned(market, provider)
        if paid_asks + held_paid < account.slots:
            return "ask"
        if challenge_asks + held_challenges < self.challenges_at_once:
            return "challenge"
        return "refuse"

    def match(self, market: Market, provider: str, asks: list[Ask], now: float) -> list[Ask]:
        self._arrive(now)
        out: list[Ask] = []
        for ask in asks:
            if ask.challenge:
                out.append(ask)  # the market's own test: always there
            elif self.waiting:
                self.waiting.popleft()
                self.matched_paid += 1
                out.append(ask)
        return out

    def expire(self, market: Market, provider: str, now: float) -> None:
        account = self._account(provider)
        for req in list(market.live.values()):
            if req.ask.provider != provider or req.done or req.expired:
                continue
            if now - req.matched_at > self.deadline_s:
                req.expired = True
                market.live.pop(req.cid, None)
                account.missed += 1
                account.balance = max(0, account.balance - MISS_PENALTY)

    def completed(self, market: Market, req: Request, now: float) -> None:
        if req.pow:
            account = self._account(req.ask.provider)
            account.balance += 1
            account.challenges_done += 1

    def set_curve(self, curve: Curve, now: float) -> None:
        """Demand follows ``curve`` from ``now`` on (its hour 0): what the old one brought until
        now stays. Call under the market's lock (its HTTP threads call the hooks)."""
        self._arrive(now)
        self.curve, self.start, self._next_arrival = curve, now, None

    # -- state -------------------------------------------------------------------------

    def _account(self, provider: str) -> Account:
        return self.accounts.setdefault(provider, Account(self.balance))

    def _asks(self, market: Market, provider: str) -> tuple[int, int]:
        mine = [a for a in market.asks.values() if a.provider == provider]
        challenges = sum(1 for a in mine if a.challenge)
        return len(mine) - challenges, challenges

    def _assigned(self, market: Market, provider: str) -> tuple[int, int]:
        live = [
            r for r in market.live.values()
            if r.ask.provider == provider and not r.done and not r.expired
        ]  # fmt: skip
        challenges = sum(1 for r in live if r.pow)
        return len(live) - challenges, challenges

    def _arrive(self, now: float) -> None:
        """Buyers' requests up to ``now`` (thinning against the curve's peak); those older than
        the patience went to another provider."""
        if self.start is None:
            self.start = now
        peak = self.curve.peak
        if peak <= 0:
            self.waiting.clear()
            return
        if self._next_arrival is None:
            self._next_arrival = self.start + self._rng.expovariate(peak / HOUR)
        while self._next_arrival <= now:
            t = self._next_arrival
            if self._rng.random() * peak < self.curve.at((t - self.start) / HOUR):
                self.waiting.append(t)
                self.arrived += 1
            self._next_arrival = t + self._rng.expovariate(peak / HOUR)
        while self.waiting and now - self.waiting[0] > self.patience_s:
            self.waiting.popleft()
            self.lapsed += 1


__all__ = [
    "CHALLENGES_PER_SLOT",
    "DEADLINE_S",
    "ESTABLISHED_BALANCE",
    "MISS_PENALTY",
    "Curve",
    "DemandError",
    "FiniteDemand",
    "parse_curve",
]
