"""The fleet's size from the work (``[fleet] target_workers = "auto"``): a pure decision.

What it reads each step (vastui/engine/cluster.py, from curio's cluster database):

* **the market's demand**: the requests curio's request task obtained per hour it was asking
  (its runs in ``harmony_task_history``, the rows it added to ``proofshare_queue``;
  tasks/proofshare/task_request.go asks whenever 5 or fewer wait, up to 8). A full fleet's task
  is filled at once, an idle one's waits: either way obtained ÷ asking time is what the market
  sends this cluster. ÷ (a proving worker's measured rate × the target utilisation) is the
  workers it needs (``_need``);
* **unclaimed work**: the requests no node has claimed, counted as curio counts them
  (task_request.go:85-90), and the oldest one's wait: work that stays unclaimed means every
  worker is full;
* **utilisation**: PSProve successes over the production window ÷ the proving workers' measured
  rates.

With the demand measured (``_follow``), the target moves toward what it needs when two signals
agree: more wanted and work left unclaimed for ``up_after_s`` (at most doubling, only once the
last rental proves: capacity on its way is waited for), or fewer wanted and utilisation below
the aim less ``band`` for ``down_after_s`` and a window after the last change. Up goes to
floor(need + round_up), down to floor(need + round_up + 0.5): a fleet just shrunk does not want
to grow back on the same demand. Money bounds both: a raise brings only as many workers as the
demand beyond the fleet's capacity (two standard errors low for a new rental, one for a start
from the warm pool) keeps at their min_rate ($/h of the worker it brings, the warm pool's pick
or one like those proving, ÷ ``max_cost_per_proof``: a worker fed less costs more per proof
than the operator pays at most), and the worst worker is wanted no longer when what the others
leave it of the demand (a standard error high) is below its min_rate. Work at risk of the
market's deadline (Snark-Market.md:169, 45 min: the oldest unclaimed request's wait plus a
proof's latency past 90 % of it) adds a worker at once, whatever it costs. Before the demand
is measured, unclaimed work raises the target by half (at least one) and a fleet using too
little lowers it to what its work needs.
Without a fresh reading of the cluster the target holds: no number is invented.

One file: one pure decision read top to bottom (the reading, the state kept between steps, the
rules up and down, money's bounds on both and the margin of a raise share ``Settings`` and
``Observed``); split, each rule would need the others' helpers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Literal

Direction = Literal["up", "down"]


@dataclass(frozen=True, slots=True)
class Settings:
    min_workers: int
    max_workers: int
    utilisation: float = 0.9  # the target share of a proving worker's capacity used
    band: float = 0.15  # below utilisation - band is slack
    up_after_s: float = 300.0
    down_after_s: float = 1800.0
    # a rental still setting up this long after the last change no longer holds a raise back
    # (its stage deadlines end it: paramfetch 90 min, the benchmark 45)
    settle_s: float = 3 * 3600.0
    deadline_s: float = 2700.0  # the market's (Snark-Market.md:169)
    max_pending: int = 10  # [Cuzk] MaxPending: a proof's latency is max_pending ÷ a rate
    # work is at risk when its wait and a proof's latency pass this share of the deadline
    risk_share: float = 0.9
    # a raise for money's sake wants the demand this many standard errors above what pays a
    # worker more: a new rental costs its set-up (stronger evidence than a cut, at one); a
    # start from the warm pool costs a few minutes of its $/h (as much as a cut)
    raise_errors: float = 2.0
    pool_errors: float = 1.0
    growth: float = 1.5
    # workers the demand needs: floor(demand ÷ (a worker's rate × utilisation) + round_up)
    round_up: float = 0.3
    # $/proof a worker must keep to (the fleet's max_cost_per_proof): a worker more is rented
    # for measured demand only when the work beyond the fleet's would give it its min_rate
    max_cost_per_proof: float | None = None


@dataclass(frozen=True, slots=True)
class Observed:
    """One step's reading of the cluster and the fleet. ``read`` False: no fresh reading."""

    read: bool
    unclaimed: int = 0
    oldest_unclaimed_s: float | None = None
    done_per_h: float = 0.0  # PSProve successes per hour over the window, whoever did them
    capacity_per_h: float = 0.0  # the proving workers' measured rates, summed
    proving: int = 0  # workers proving
    workers: int = 0  # live workers, setting up or proving (draining ones not)
    window_s: float = 3600.0  # what done_per_h is measured over
    # requests the market gave per hour the cluster's request task was asking (its runs in
    # harmony_task_history, the rows it added): the demand sent to this cluster, seen even
    # when the fleet is full (its asks are then filled at once). None: it asked too little.
    requested_per_h: float | None = None
    dph_per_h: float = 0.0  # the proving workers' $/h, summed (those of capacity_per_h)
    # requested_per_h's standard error (a count's: √n over the time asked)
    requested_err_per_h: float = 0.0
    # the $/h of the worker a raise would bring first: the warm pool's pick; 0: a new rental,
    # one like those proving (their mean)
    next_dph: float = 0.0
    # the proving worker a cut would give up first (the worst $/proof): $/h, proofs/h
    worst_dph: float = 0.0
    worst_rate: float = 0.0
    # Money (issue 43): dollars the market paid per proof the fleet proved over the window
    # (curio's payments at the operator's FIL price; None: not known, and money bounds the
    # target by max_cost_per_proof alone); how much longer the demand's current level is
    # expected to last (vastui/engine/demandshift.py; None: no level); the worker a raise
    # brings first: its proofs/h (0: one like those proving), the hours before it proves and
    # the dollars its set-up costs besides its $/h (parameters at its offer's $/GB)
    usd_per_proof: float | None = None
    expected_h: float | None = None
    next_rate: float = 0.0
    next_setup_h: float = 0.0
    next_setup_usd: float = 0.0
    # rises expected to come back within the warm pool's horizon (hours of them, the stream's
    # history says; 0: none learned), and what the worker bills stopped between them ($/h)
    later_h: float = 0.0
    later_idle_h: float = 0.0
    next_storage_dph: float = 0.0
    # the request task's runs are filled by their first poll: the demand reads low, and is
    # at least what one worker more would take (demandshift.Watch.saturated)
    saturated: bool = False

    @property
    def utilisation(self) -> float | None:
        if self.capacity_per_h <= 0:
            return None
        return min(1.0, self.done_per_h / self.capacity_per_h)


@dataclass(frozen=True, slots=True)
class State:
    """What the decision keeps between steps (the store's meta, so a restart keeps it)."""

    target: int
    pressure_since: float | None = None  # unclaimed work since
    slack_since: float | None = None  # utilisation low, nothing waiting, since
    changed_at: float | None = None
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target, "pressure_since": self.pressure_since,
            "slack_since": self.slack_since, "changed_at": self.changed_at,
            "reason": self.reason,
        }  # fmt: skip

    @classmethod
    def from_json(cls, value: dict[str, Any], settings: Settings) -> State:
        def when(key: str) -> float | None:
            v = value.get(key)
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
                return None
            return float(v)

        raw = value.get("target")
        target = settings.min_workers
        if isinstance(raw, int) and not isinstance(raw, bool) and 0 <= raw <= 100_000:
            target = raw  # outside today's bounds: decide() moves it, with an event
        reason = value.get("reason")
        return cls(
            target=target, pressure_since=when("pressure_since"),
            slack_since=when("slack_since"), changed_at=when("changed_at"),
            reason=reason if isinstance(reason, str) else "",
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class Change:
    before: int
    after: int
    direction: Direction
    text: str


@dataclass(frozen=True, slots=True)
class Decision:
    state: State
    change: Change | None


def clamp(n: int, s: Settings) -> int:
    return max(s.min_workers, min(s.max_workers, n))


def initial(settings: Settings) -> State:
    return State(
        target=settings.min_workers, reason=f"starting at min_workers {settings.min_workers}"
    )


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min"


def decide(s: Settings, state: State, obs: Observed, now: float) -> Decision:
    """The target for this step, and the change of it if any (with its reason)."""
    target = clamp(state.target, s)
    if target != state.target:  # the bounds changed under it
        text = f"within min_workers {s.min_workers} and max_workers {s.max_workers}: "
        text += f"target {state.target} → {target}"
        direction: Direction = "up" if target > state.target else "down"
        return Decision(
            State(target, None, None, now, text), Change(state.target, target, direction, text)
        )
    if not obs.read:
        return Decision(
            replace(state, pressure_since=None, slack_since=None,
                    reason=f"holding {target}: curio's cluster not read"),
            None,
        )  # fmt: skip
    need = _need(s, obs)
    if need is not None:  # the market's demand measured: follow it
        return _follow(s, state, obs, now, target, need)
    # not measured (the request task has not asked long enough): requests left unclaimed
    # raise the target, a fleet using too little of its capacity lowers it
    util = obs.utilisation
    pressure = obs.unclaimed > 0
    slack = not pressure and obs.proving > 0 and util is not None and util < s.utilisation - s.band
    pressure_since = (
        (state.pressure_since if state.pressure_since is not None else now) if pressure else None
    )
    slack_since = (state.slack_since if state.slack_since is not None else now) if slack else None
    waited = obs.oldest_unclaimed_s or 0.0
    state = replace(state, pressure_since=pressure_since, slack_since=slack_since)

    if pressure:
        urgent = _at_risk(s, obs)
        held = 0.0 if pressure_since is None else now - pressure_since
        # capacity already on its way (a rental setting up) is waited for: it takes longer
        # than any hysteresis, and raising again meanwhile rents twice for one shortage
        settled = obs.proving >= obs.workers or (
            state.changed_at is not None and now - state.changed_at >= s.settle_s
        )
        if (urgent or held >= s.up_after_s) and settled and target < s.max_workers:
            after = clamp(max(target + 1, math.ceil(target * s.growth)), s)
            plural = "s" if obs.unclaimed != 1 else ""
            workers = f"{obs.proving} worker{'s' if obs.proving != 1 else ''} proving"
            text = (
                f"work waits: {obs.unclaimed} request{plural} unclaimed for "
                f"{_minutes(max(waited, held))} ({workers}, {obs.done_per_h:.0f} proofs/h over "
                f"the last {_minutes(obs.window_s)}): target {target} → {after}"
            )
            return Decision(State(after, None, None, now, text), Change(target, after, "up", text))
        why = (
            "at max_workers"
            if target >= s.max_workers
            else ("waiting for the last growth to prove" if not settled else "watching it")
        )
        return Decision(replace(state, reason=f"{target}: {obs.unclaimed} unclaimed ({why})"), None)
    # the reading's window must lie after the last change: before it, another fleet did the work
    since_change = math.inf if state.changed_at is None else now - state.changed_at
    idle_s = 0.0 if slack_since is None else now - slack_since
    if slack and util is not None and idle_s >= s.down_after_s and since_change >= obs.window_s:
        mean = obs.capacity_per_h / obs.proving
        needed = clamp(math.ceil(obs.done_per_h / (mean * s.utilisation)), s)
        if needed < target:
            idle_for = _minutes(idle_s)
            text = (
                f"workers idle: the fleet proved {obs.done_per_h:.0f}/h of its "
                f"{obs.capacity_per_h:.0f}/h ({util:.0%}) for {idle_for}: "
                f"target {target} → {needed}"
            )
            return Decision(
                State(needed, None, None, now, text), Change(target, needed, "down", text)
            )
    if util is None:
        text = f"{target}: no measured rate yet"
    else:
        text = f"{target}: utilisation {util:.0%} (aim {s.utilisation:.0%}), nothing waiting"
    return Decision(replace(state, reason=text), None)


def requested_per_h(obtained: int, asked_s: float) -> float | None:
    """The market's demand for this cluster: requests obtained per hour the request task
    asked; None below a minute of asking (too little to be a rate)."""
    return obtained * 3600.0 / asked_s if asked_s >= 60.0 else None


def requested_err_per_h(obtained: int, asked_s: float) -> float:
    """requested_per_h's standard error: arrivals are a count, √n of them (one at least)."""
    return math.sqrt(max(1, obtained)) * 3600.0 / asked_s if asked_s >= 60.0 else 0.0


def _need(s: Settings, obs: Observed) -> float | None:
    """The workers the market's demand needs at the target utilisation, from the request
    task's measured rate and the proving workers' mean rate (None: not measured)."""
    if obs.requested_per_h is None or obs.proving == 0 or obs.capacity_per_h <= 0:
        return None
    return obs.requested_per_h / (obs.capacity_per_h / obs.proving * s.utilisation)


def _min_rate(s: Settings, dph: float) -> float:
    """The proofs/h a worker of ``dph`` $/h must make to keep to max_cost_per_proof."""
    return dph / (s.max_cost_per_proof or math.inf)


def _next_dph(obs: Observed) -> float:
    """The $/h of the worker a raise brings first: the pool's pick, else the fleet's mean."""
    return obs.next_dph if obs.next_dph > 0 else obs.dph_per_h / obs.proving


def _demand_low(s: Settings, obs: Observed, demand: float) -> float:
    """The demand taken ``raise_errors`` standard errors low for a new rental, ``pool_errors``
    for a start from the warm pool (an hour's count is noisy: a worker is rented on evidence,
    as much as its set-up costs)."""
    errors = s.pool_errors if obs.next_dph > 0 else s.raise_errors
    return demand - errors * obs.requested_err_per_h


def _paying(s: Settings, obs: Observed) -> int | None:
    """How many workers more the demand beyond the fleet's capacity (``_demand_low``) keeps
    each at its min_rate ($/h of the worker a raise brings ÷ max_cost_per_proof); None: not
    known. A worker fed less than its min_rate costs more per proof than the operator pays at
    most (an idle share of 1 − u makes $/proof 1/u times its price at full use)."""
    if not s.max_cost_per_proof or not obs.proving or obs.dph_per_h <= 0:
        return None
    floor_rate = _min_rate(s, _next_dph(obs))
    if floor_rate <= 0 or obs.requested_per_h is None:
        return None
    low = _demand_low(s, obs, obs.requested_per_h)
    return math.floor(max(0.0, low - obs.capacity_per_h) / floor_rate)


def _last_unpaid(s: Settings, obs: Observed) -> bool:
    """Whether the proving worker a cut gives up first (the worst $/proof) gets less than its
    min_rate of what the others leave of the demand, taken a standard error high (a worker is
    given up on evidence too)."""
    if not s.max_cost_per_proof or obs.proving < 2 or obs.requested_per_h is None:
        return False
    if obs.worst_dph <= 0 or obs.worst_rate <= 0:
        return False
    high = obs.requested_per_h + obs.requested_err_per_h
    left = high - (obs.capacity_per_h - obs.worst_rate)
    return left < _min_rate(s, obs.worst_dph)


@dataclass(frozen=True, slots=True)
class Worth:
    """What the next worker up would earn over the time the demand is expected to last."""

    earn_per_h: float  # its paid proofs at the market's price, less its $/h
    hours: float  # the demand's level expected to last this much longer
    setup_h: float
    setup_usd: float  # its $/h over the set-up and its parameters' bandwidth
    total: float

    def text(self) -> str:
        return (
            f"a worker more earns ${self.earn_per_h:.2f}/h for the ~{self.hours:.1f} h the "
            f"demand is expected to last; its set-up costs ${self.setup_usd:.2f} "
            f"({self.setup_h * 60:.0f} min)"
        )


def raise_worth(s: Settings, obs: Observed, k: int = 1) -> Worth | None:
    """The margin of the ``k``-th worker up: the paid proofs it would add (the demand beyond
    the fleet's capacity, what is on its way and the k − 1 before it, at most its rate) at the
    market's price, less its $/h, over the demand's expected remaining time less its set-up,
    less the set-up ($/h while it sets up, its parameters' bandwidth); a rise that recurs adds
    its later hours when they pay for the wait in the warm pool. None: the price or the time
    not known."""
    if obs.usd_per_proof is None or obs.expected_h is None or obs.requested_per_h is None:
        return None
    if obs.proving == 0 or obs.capacity_per_h <= 0:
        return None
    rate = obs.next_rate if obs.next_rate > 0 else obs.capacity_per_h / obs.proving
    # the expected demand (its level's rate: the change test already asked for evidence of
    # the level; a margin is an expectation, not a bound)
    demand = obs.requested_per_h
    # workers on their way (setting up, a pooled start) will take their share when they prove:
    # counted as capacity, so a shortage is not rented for twice
    on_way = max(0, obs.workers - obs.proving) * obs.capacity_per_h / obs.proving
    if obs.saturated and on_way <= 0:
        # a floor, not a measure: the market gives more than the fleet asks for, how much more
        # it does not say: one worker more, and once it proves the next growth asks again (in
        # the bench, growing by half at once rented 27-41 workers where the best fixed fleet
        # was 9-26: more supply lowers the market's price for every worker)
        demand = max(demand, obs.capacity_per_h + rate) if k == 1 else demand
    added = min(rate, max(0.0, demand - obs.capacity_per_h - on_way - (k - 1) * rate))
    dph = _next_dph(obs)
    earn = added * obs.usd_per_proof - dph
    setup_usd = dph * obs.next_setup_h + obs.next_setup_usd
    total = earn * max(0.0, obs.expected_h - obs.next_setup_h) - setup_usd
    # a rise that comes back: the worker waits for it in the warm pool (its storage billed)
    # and proves again without a second set-up; counted only when it pays for its wait
    later = earn * obs.later_h - obs.next_storage_dph * obs.later_idle_h
    if later > 0:
        total += later
    return Worth(earn, obs.expected_h + (obs.later_h if later > 0 else 0.0),
                 obs.next_setup_h, setup_usd, total)  # fmt: skip


def _worst_loses(s: Settings, obs: Observed) -> bool:
    """Whether the worker a cut gives up first earns less than its $/h: what the others leave
    it of the demand (a standard error high) at the market's price."""
    if obs.usd_per_proof is None or obs.proving < 2 or obs.requested_per_h is None:
        return False
    if obs.worst_dph <= 0 or obs.worst_rate <= 0:
        return False
    high = obs.requested_per_h + obs.requested_err_per_h
    left = max(0.0, high - (obs.capacity_per_h - obs.worst_rate))
    return min(obs.worst_rate, left) * obs.usd_per_proof < obs.worst_dph


def _at_risk(s: Settings, obs: Observed) -> bool:
    """Work that may miss the market's deadline: the oldest unclaimed request's wait plus a
    proof's latency at the fleet's mean rate (max_pending in flight) past ``risk_share`` of it;
    a third of the deadline waited when no rate is known."""
    waited = obs.oldest_unclaimed_s or 0.0
    if obs.proving == 0 or obs.capacity_per_h <= 0:
        return waited > s.deadline_s / 3
    latency = s.max_pending / (obs.capacity_per_h / obs.proving) * 3600.0
    return waited > 0 and waited + latency > s.risk_share * s.deadline_s


def _follow(
    s: Settings, state: State, obs: Observed, now: float, target: int, need: float
) -> Decision:
    """Toward the workers the measured demand needs: up after ``up_after_s`` of wanting more
    (and once the last growth proves), down after ``down_after_s`` of wanting fewer and a
    window after the last change; work at risk of the deadline adds one at once.
    Up to floor(need + round_up), down to floor(need + round_up + 0.5): a fleet just shrunk
    does not want to grow back at once. Up needs requests left unclaimed too, down a fleet
    using less than its target utilisation less ``band``."""
    up_to = clamp(max(1, math.floor(need + s.round_up)), s)
    down_to = math.floor(need + s.round_up + 0.5)
    if _last_unpaid(s, obs) or _worst_loses(s, obs):
        # the worst worker would not earn its min_rate, or would earn less than it costs
        down_to = min(down_to, obs.proving - 1)
    down_to = clamp(max(1, down_to), s)
    wanted = up_to if up_to > target else down_to if down_to < target else target
    if obs.saturated and obs.unclaimed > 0 and obs.workers <= obs.proving:
        # the market fills every run at once: the measured demand is a floor (raise_worth)
        wanted = clamp(max(wanted, target + 1), s)
    # two signals must agree: more wanted and work left unclaimed (the fleet is full), or
    # fewer wanted and the fleet using too little of what it can do
    util = obs.utilisation
    more = wanted > target and obs.unclaimed > 0
    fewer = (
        wanted < target and obs.unclaimed == 0
        and util is not None and util < s.utilisation - s.band
    )  # fmt: skip
    demand = obs.requested_per_h or 0.0
    mean = obs.capacity_per_h / obs.proving
    seen = (
        f"the market sends {demand:.0f} requests/h, {obs.proving} worker"
        f"{' proves' if obs.proving == 1 else 's prove'} up to {mean:.0f}/h"
        f"{'' if obs.proving == 1 else ' each'}"
    )
    up_since = (state.pressure_since if state.pressure_since is not None else now) if more else None
    down_since = (state.slack_since if state.slack_since is not None else now) if fewer else None
    state = replace(state, pressure_since=up_since, slack_since=down_since)
    settled = obs.proving >= obs.workers or (
        state.changed_at is not None and now - state.changed_at >= s.settle_s
    )
    urgent = _at_risk(s, obs) and target < s.max_workers
    worth = raise_worth(s, obs)
    # with the market's price known, margin decides (below); max_cost_per_proof still caps
    # each worker's own $/proof where offers are ranked (min_rate)
    paying = _paying(s, obs) if worth is None else None
    if not urgent and up_since is not None and paying is not None and paying < 1:
        low = _demand_low(s, obs, demand)
        surplus = max(0.0, low - obs.capacity_per_h)
        text = (
            f"{target}: {seen}: a worker more would prove {surplus:.0f}/h of it (of "
            f"{low:.0f}/h at the least), under the {_min_rate(s, _next_dph(obs)):.0f}/h that "
            f"keeps it within ${s.max_cost_per_proof:g}/proof"
        )
        return Decision(replace(state, pressure_since=None, reason=text), None)
    if not urgent and up_since is not None and worth is not None and worth.total <= 0:
        text = f"{target}: {seen}: {worth.text()}: held"
        return Decision(replace(state, pressure_since=None, reason=text), None)
    # with margin known, capacity on its way is counted in it (raise_worth): no need to wait
    settled = settled or (worth is not None and not urgent)
    if settled and (urgent or (up_since is not None and now - up_since >= s.up_after_s)):
        grow = max(target + 1, min(wanted, 2 * target))
        if not urgent and paying is not None:
            grow = min(grow, target + paying)  # each added worker kept to its min_rate
        if not urgent and worth is not None:
            # as many as each earn more than they cost, the k-th fed what the others leave
            # (a start from the warm pool one at a time: the next one up may be a rental)
            paid = 1
            while (
                obs.next_dph <= 0 and paid < max(1, wanted - target)
                and (w := raise_worth(s, obs, paid + 1)) and w.total > 0
            ):  # fmt: skip
                paid += 1
            grow = target + paid
        after = clamp(grow, s)
        why = (
            f"work waits {_minutes(obs.oldest_unclaimed_s or 0.0)}"
            if urgent and wanted <= target
            else f"{seen}: {wanted} needed"
        )
        if worth is not None and not urgent:
            why += f"; {worth.text()}"
        text = f"work waits: {why}: target {target} → {after}"
        return Decision(State(after, None, None, now, text), Change(target, after, "up", text))
    since_change = math.inf if state.changed_at is None else now - state.changed_at
    if (
        down_since is not None
        and now - down_since >= s.down_after_s
        and since_change >= obs.window_s
    ):
        text = f"workers idle: {seen}: {wanted} needed: target {target} → {wanted}"
        return Decision(State(wanted, None, None, now, text), Change(target, wanted, "down", text))
    return Decision(replace(state, reason=f"{target}: {seen} ({wanted} needed)"), None)


__all__ = [
    "Change", "Decision", "Observed", "Settings", "State", "Worth", "clamp", "decide", "initial",
    "raise_worth",
    "requested_err_per_h", "requested_per_h",
]  # fmt: skip
