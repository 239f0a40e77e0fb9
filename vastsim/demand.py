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

One file: one policy of the market stand-in, its curve, slots, deadline and priced matching
working on the same waiting requests under the market's lock, in one event order.

A priced market (``FiniteDemand.rivals``, off by default): with a ``Rivals``, the curve is every
buyer's demand and the market has other providers, each with a minimum ask and a capacity, and a
market price P (attoFIL per PoRep-equivalent) that moves with supply and demand. An arriving
request goes to the cheapest ask at or under P that can take it (a rival with a token, or this
provider's open paid ask at its next poll within ``patience_s``); nobody: it lapses. A completion
pays P at the match × the proof's cost ÷ 10, not the ask. What curio @ e0294b0f says:
``ProofData.DeciCost`` (lib/proofsvc/common/types.go:114-124) costs a PoRep 10 and a Snap 16; the
client pays ``PriceNfilBase × cost ÷ 10`` (tasks/proofshare/task_client_send.go:397-420); an ask
is a minimum price per proof, 0.005 FIL suggested, and "the snark marketplace automatically
adjusts the market price to match supply to demand" (Snark-Market.md:120-121, 154-155, 163,
171); the price is in nFIL (``PriceResponse``, lib/proofsvc/clientctl.go:102-109). The market's
matcher and pricer are not public (lib/proofsvc is the client side only), so these are
ASSUMPTIONs, each read from nowhere:

* the other providers: ``RIVALS_COUNT`` (6-12), each ask log-uniform in ``RIVAL_ASK_FIL``
  (0.003-0.008 FIL, around the suggested 0.005), each capacity uniform in ``RIVAL_RATE_PER_H``
  (20-80 PoRep-equivalents per hour: a Snap takes 1.6 tokens, by its cost), a token bucket of
  ``RIVAL_BURST`` (2) so a rival can be busy;
* the market price: starts at the suggested 0.005 FIL, moves every ``REPRICE_S`` (600 s) by
  ``PRICE_STEP`` (5 %): up when more requests lapsed unserved in the period than there was idle
  supply at or under P, down when more supply sat idle (a rival's capacity overflowing its bucket,
  an open ask of this provider at the reprice with nothing waiting for it), within
  ``PRICE_FLOOR``-``PRICE_CEILING`` (0.001-0.05 FIL); a fall stops at the dearest ask that took
  work in the period (below it, that work would lapse) or, none having taken any, at the cheapest
  idle ask (a plain ±5 % swings P under the marginal ask every other period and loses that
  period's work);
* an ask is compared with P as a price per PoRep-equivalent (the unit the client pays by) though
  the guide says "per ~130M proof constraints" (Snark-Market.md:154), a tenth of it;
* ties between equal asks: a seeded order drawn per rival (``Rival.tiebreak``; ours counts 0.5);
* a share ``snap_share`` (0.25) of requests are Snap, and Snap is matched first when several wait;
* this provider is paid the base price only (the service fee is the service's);
* a buyer sends only while P is at most its own most per proof, drawn log-uniform in
  ``BUYER_MAX_FIL`` (0.004-0.02 FIL): curio's client does refuse above its max per-proof price
  (task_client_send.go:397-415), but no buyer's setting is published (``Rivals.priced_out``);
* the lazy routing: requests are offered, at their arrival, to the rivals cheaper than this
  provider's cheapest ask (its last known one), and those left wait for it; what it does not take
  within ``patience_s`` goes, then, to the rivals dearer than it, at or under P.
"""

from __future__ import annotations

import math
import random
import re
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from vastsim.proofsvc import Terms

if TYPE_CHECKING:
    from vastsim.proofsvc import Admit, Ask, Market, Request

HOUR = 3600.0
DAY = 24 * HOUR
CHALLENGES_PER_SLOT = 50  # Snark-Market.md:164-166
DEADLINE_S = 45 * 60.0  # Snark-Market.md:169
MISS_PENALTY = 50  # Snark-Market.md:167
ESTABLISHED_BALANCE = 50 * 64  # a wallet with 64 slots: more than a fleet of 8 can hold
MAX_RATE_PER_H = 100_000.0  # a bound on any curve (a typo must not make a busy loop)

# The priced market (module doc). Amounts in attoFIL; the market's prices are whole nFIL
# (PriceResponse, lib/proofsvc/clientctl.go:102-109).
NANO = 10**9
ATTO_PER_FIL = 10**18
MILLI_FIL = 10**15
SUGGESTED_PRICE = 5 * MILLI_FIL  # Snark-Market.md:155
DECI_COST = {"porep": 10, "snap": 16}  # ProofData.DeciCost, common/types.go:114-124
RIVALS_COUNT = (6, 12)  # ASSUMPTION (module doc)
RIVAL_ASK_FIL = (0.003, 0.008)  # ASSUMPTION: log-uniform around the suggested 0.005
RIVAL_RATE_PER_H = (20.0, 80.0)  # ASSUMPTION: PoRep-equivalents per hour
RIVAL_BURST = 2.0  # ASSUMPTION: a rival holds at most two proofs' worth of idle capacity
REPRICE_S = 600.0  # ASSUMPTION
PRICE_STEP = 0.05  # ASSUMPTION
PRICE_FLOOR = 1 * MILLI_FIL  # ASSUMPTION: 0.001 FIL
PRICE_CEILING = 50 * MILLI_FIL  # ASSUMPTION: 0.05 FIL
SNAP_SHARE = 0.25  # ASSUMPTION: as the market stand-in's own mix
# A buyer's most per proof (the client's max per-proof price: curio's client refuses to send when
# the market's price and fee pass it, tasks/proofshare/task_client_send.go:397-415). ASSUMPTION:
# log-uniform over this range (no buyers' settings are published): demand falls as P rises.
BUYER_MAX_FIL = (0.004, 0.02)


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


def market_pay(price: int, kind: str) -> int:
    """What a ``kind`` proof pays at ``price`` (attoFIL per PoRep-equivalent): the client's sum,
    in whole nFIL (task_client_send.go:417: ``PriceNfilBase * RequestPartitionCost / 10``)."""
    return (price // NANO) * DECI_COST[kind] // 10 * NANO


@dataclass
class Rival:
    """Another provider: its minimum ask and its capacity as a token bucket (a token is a
    PoRep-equivalent; it refills at ``rate_per_h`` up to ``burst``)."""

    ask: int  # attoFIL per PoRep-equivalent: the least it takes
    rate_per_h: float
    burst: float = RIVAL_BURST
    tiebreak: float = 0.5  # order among equal asks; under 0.5: ahead of ours at the same price
    tokens: float = field(init=False)
    at: float | None = field(init=False, default=None)  # when ``tokens`` was brought up to date
    wasted: float = field(init=False, default=0.0)  # capacity overflowed since the last reprice
    taken: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.tokens = self.burst

    def refill(self, t: float) -> None:
        if self.at is None:
            self.at = t
        if t <= self.at:
            return
        full = self.tokens + self.rate_per_h * (t - self.at) / HOUR
        self.wasted += max(0.0, full - self.burst)  # idle: capacity with no work to take it
        self.tokens, self.at = min(full, self.burst), t

    def take(self, t: float, kind: str) -> bool:
        self.refill(t)
        cost = DECI_COST[kind] / 10
        if self.tokens < cost:
            return False
        self.tokens -= cost
        self.taken += 1
        return True


@dataclass
class Rivals:
    """The rest of the market (module doc): the other providers, drawn from ``seed`` unless
    ``members`` are given, and the market price ``price`` (P) with its ``history``, one
    (time, P) entry at the start and per reprice."""

    seed: int = 0
    count: int | None = None  # how many rivals to draw (None: in RIVALS_COUNT)
    # given: used as they are (their tiebreak 0.5 by default: behind ours at an equal ask);
    # empty: ``count`` drawn from the seed (count 0: no rivals)
    members: list[Rival] = field(default_factory=list)
    price: int = SUGGESTED_PRICE
    reprice_s: float = REPRICE_S
    step: float = PRICE_STEP  # 0: a fixed price
    floor: int = PRICE_FLOOR
    ceiling: int = PRICE_CEILING
    snap_share: float = SNAP_SHARE
    history: list[tuple[float, int]] = field(default_factory=list)
    next_reprice: float | None = None  # set by ``begin``
    unserved: int = 0  # requests nobody took since the last reprice
    priced_out: int = 0  # requests not sent: P above the buyer's most (BUYER_MAX_FIL)
    marginal: int | None = None  # the dearest ask that took a request since the last reprice
    _rng: random.Random = field(init=False)
    _buyers: random.Random = field(init=False)
    _order: list[Rival] = field(init=False)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed * 104_729 + 71)
        self._buyers = random.Random(self.seed * 104_729 + 73)
        if not self.members:
            n = self.count if self.count is not None else self._rng.randint(*RIVALS_COUNT)
            self.members = [self._draw() for _ in range(n)]
        self._order = sorted(self.members, key=lambda r: (r.ask, r.tiebreak))

    def _draw(self) -> Rival:
        low, high = (math.log(x) for x in RIVAL_ASK_FIL)
        fil = math.exp(self._rng.uniform(low, high))
        rate = self._rng.uniform(*RIVAL_RATE_PER_H)
        return Rival(round(fil * 1e9) * NANO, rate, tiebreak=self._rng.random())

    def begin(self, t: float) -> None:
        """The market opens at ``t``: buckets full, the first reprice one period on."""
        self.next_reprice = t + self.reprice_s
        self.history.append((t, self.price))
        for rival in self.members:
            rival.refill(t)

    def kind(self) -> str:
        return "snap" if self._rng.random() < self.snap_share else "porep"

    def sends(self) -> bool:
        """Whether a buyer sends at today's P: its most per proof drawn (BUYER_MAX_FIL)."""
        low, high = (math.log(x) for x in BUYER_MAX_FIL)
        most = math.exp(self._buyers.uniform(low, high)) * ATTO_PER_FIL
        if self.price > most:
            self.priced_out += 1
            return False
        return True

    def split(self, ours: int | None) -> tuple[list[Rival], list[Rival]]:
        """The rivals at or under P, cheapest first: those ahead of an ask at ``ours`` and those
        behind it (None: this provider has no price yet, so all are ahead)."""
        able = [r for r in self._order if r.ask <= self.price]
        if ours is None:
            return able, []
        ahead = [r for r in able if (r.ask, r.tiebreak) < (ours, 0.5)]
        return ahead, able[len(ahead) :]

    def offer(self, rivals: list[Rival], t: float, kind: str) -> bool:
        """The first of ``rivals`` with the capacity takes a request arriving at ``t``."""
        taker = next((r for r in rivals if r.take(t, kind)), None)
        if taker is not None:
            self.served(taker.ask)
        return taker is not None

    def served(self, ask: int) -> None:
        """An ask at ``ask`` took a request this period (the dearest one is the marginal)."""
        self.marginal = max(self.marginal or 0, ask)

    def reprice(self, t: float, our_idle: int, ours: int | None) -> None:
        """P moves one step towards balance: lapsed demand against idle supply at or under P
        (``our_idle`` of this provider's asks at ``ours``)."""
        for rival in self.members:
            rival.refill(t)
        idle_rivals = [r for r in self.members if r.ask <= self.price and r.wasted > 0]
        idle = our_idle + sum(r.wasted for r in idle_rivals)
        idle_asks = [r.ask for r in idle_rivals] + ([ours] if our_idle and ours is not None else [])
        for rival in self.members:
            rival.wasted = 0.0
        excess = self.unserved - idle
        if excess > 0:
            self.price = self._bounded(self.price * (1.0 + self.step))
        elif excess < 0:
            # ASSUMPTION (module doc): not below the dearest ask that took work this period
            # (its work would lapse), nor, none having taken any, below the cheapest idle one
            least = self.marginal if self.marginal is not None else min(idle_asks, default=0)
            self.price = self._bounded(max(self.price * (1.0 - self.step), least))
        self.history.append((t, self.price))
        self.unserved, self.marginal = 0, None
        self.next_reprice = t + self.reprice_s

    def _bounded(self, price: float) -> int:
        """Whole nFIL within the floor and the ceiling."""
        return min(self.ceiling, max(self.floor, round(price / NANO) * NANO))


# The rivals' capacity against the curve's mean (ASSUMPTION: half of the work would find a
# rival's ask; the rest waits for this provider's or lapses), at RIVAL_RATE_PER_H's mean each
RIVAL_SHARE = 0.5


def rivals_for(curve: Curve, seed: int) -> Rivals:
    """The other providers of a curve's market: their capacity RIVAL_SHARE of its mean (none
    for a trickle of work)."""
    mean = (curve.rate + curve.after) / 2 if curve.kind == "bursts" else curve.rate
    each = sum(RIVAL_RATE_PER_H) / 2
    return Rivals(seed=seed, count=round(RIVAL_SHARE * mean / each))


@dataclass(eq=False)
class Pending:
    """A buyer's request waiting for this provider's ask (the priced market)."""

    t: float  # arrival
    kind: str


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
    lapsed: int = 0  # routed to another provider (priced: taken by nobody)
    matched_paid: int = 0
    rivals: Rivals | None = None  # the priced market (module doc); None: demand ignores price
    # the priced market's counters (they stay 0 without rivals)
    taken_by_rivals: int = 0
    taken_by_us: dict[str, int] = field(default_factory=lambda: {"porep": 0, "snap": 0})
    arrived_by_kind: dict[str, int] = field(default_factory=lambda: {"porep": 0, "snap": 0})
    pending: list[Pending] = field(default_factory=list)  # priced: waiting for our asks
    _rng: random.Random = field(init=False)
    _next_arrival: float | None = field(init=False, default=None)
    _terms: dict[int, Terms] = field(init=False, default_factory=dict)  # by ask id, till taken
    _our_price: dict[str, int] = field(init=False, default_factory=dict)  # cheapest paid ask
    _our_open: dict[str, list[Ask]] = field(init=False, default_factory=dict)  # paid, open

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
        if self.rivals is not None:
            return self._match_priced(self.rivals, provider, asks, now)
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
        # ``market.live`` holds requests in the order they were matched (a dict keeps its
        # insertion order, the clock does not go back): past the first one still in time,
        # none is due
        due = []
        for req in market.live.values():
            if now - req.matched_at <= self.deadline_s:
                break
            if req.ask.provider == provider and not req.done and not req.expired:
                due.append(req)
        for req in due:
            req.expired = True
            market.live.pop(req.cid, None)
            account.missed += 1
            account.balance = max(0, account.balance - MISS_PENALTY)

    def completed(self, market: Market, req: Request, now: float) -> None:
        if req.pow:
            account = self._account(req.ask.provider)
            account.balance += 1
            account.challenges_done += 1

    def terms_for(self, ask: Ask) -> Terms | None:
        """The kind and pay fixed when the priced market matched ``ask`` (None otherwise)."""
        return self._terms.pop(ask.id, None)

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
        if self.rivals is not None:
            self._advance(self.rivals, now)
            return
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

    # -- the priced market ---------------------------------------------------------------

    def _match_priced(
        self, rivals: Rivals, provider: str, asks: list[Ask], now: float
    ) -> list[Ask]:
        """Challenges as ever; paid asks at or under P, cheapest first, take what waits for this
        provider, Snap first, at P now."""
        paid = [a for a in asks if not a.challenge]
        if paid:
            self._our_price[provider] = min(a.price for a in paid)
        self._our_open[provider] = paid
        self._advance(rivals, now)
        able = sorted((a for a in paid if a.price <= rivals.price), key=lambda a: (a.price, a.id))
        queue = sorted(self.pending, key=lambda p: (p.kind != "snap", p.t))
        taken = list(zip(able, queue, strict=False))
        for ask, req in taken:
            self._terms[ask.id] = Terms(req.kind, rivals.price, market_pay(rivals.price, req.kind))
            self.taken_by_us[req.kind] += 1
            self.matched_paid += 1
            rivals.served(ask.price)
        served = {id(req) for _, req in taken}
        filled = {ask.id for ask, _ in taken}
        self.pending = [p for p in self.pending if id(p) not in served]
        self._our_open[provider] = [a for a in paid if a.id not in filled]
        return [a for a in asks if a.challenge or a.id in filled]

    def _advance(self, rivals: Rivals, now: float) -> None:
        """The market's events up to ``now`` in time order: lapses of what waited for this
        provider past the patience, arrivals, reprices."""
        if self.start is None:
            self.start = now
        if rivals.next_reprice is None:
            rivals.begin(self.start)
        peak = self.curve.peak
        if peak > 0 and self._next_arrival is None:
            self._next_arrival = self.start + self._rng.expovariate(peak / HOUR)
        while True:
            lapse = self.pending[0].t + self.patience_s if self.pending else math.inf
            arrive = self._next_arrival if peak > 0 and self._next_arrival is not None else math.inf
            reprice = rivals.next_reprice if rivals.next_reprice is not None else math.inf
            due = [(lapse, 0)] if lapse < now else []  # waited longer than the patience
            due += [(t, i) for t, i in ((arrive, 1), (reprice, 2)) if t <= now]
            if not due:
                return
            t, event = min(due)
            if event == 0:
                self._lapse(rivals, t)
            elif event == 1:
                self._arrival(rivals, t, peak)
            else:
                rivals.reprice(t, self._our_idle(rivals, t), self._ours())

    def _arrival(self, rivals: Rivals, t: float, peak: float) -> None:
        """A candidate arrival at ``t`` (thinning: the same draws as without rivals): the rivals
        cheaper than this provider get it first; if none has the capacity, it waits for us."""
        start = t if self.start is None else self.start  # set by ``_advance`` before this
        accepted = self._rng.random() * peak < self.curve.at((t - start) / HOUR)
        self._next_arrival = t + self._rng.expovariate(peak / HOUR)
        if not accepted:
            return
        kind = rivals.kind()
        if not rivals.sends():
            return
        self.arrived += 1
        self.arrived_by_kind[kind] += 1
        ahead, _behind = rivals.split(self._ours())
        if rivals.offer(ahead, t, kind):
            self.taken_by_rivals += 1
        else:
            self.pending.append(Pending(t, kind))

    def _lapse(self, rivals: Rivals, t: float) -> None:
        """The oldest waiting request, untaken here within the patience: the rivals dearer than
        this provider (at or under P) may take it; else nobody does."""
        req = self.pending.pop(0)
        _ahead, behind = rivals.split(self._ours())
        if rivals.offer(behind, t, req.kind):
            self.taken_by_rivals += 1
        else:
            self.lapsed += 1
            rivals.unserved += 1

    def _ours(self) -> int | None:
        """This provider's price: its cheapest paid ask, the last it showed (None: never)."""
        return min(self._our_price.values(), default=None)

    def _our_idle(self, rivals: Rivals, t: float) -> int:
        """Our paid asks at or under P open at ``t`` that nothing waits for."""
        open_ = sum(
            1 for asks in self._our_open.values() for a in asks
            if a.price <= rivals.price and a.created_at <= t
        )  # fmt: skip
        return max(0, open_ - len(self.pending))


__all__ = [
    "CHALLENGES_PER_SLOT",
    "DEADLINE_S",
    "ESTABLISHED_BALANCE",
    "MISS_PENALTY",
    "SUGGESTED_PRICE",
    "Curve",
    "DemandError",
    "FiniteDemand",
    "Pending",
    "Rival",
    "Rivals",
    "market_pay",
    "parse_curve",
    "rivals_for",
]
