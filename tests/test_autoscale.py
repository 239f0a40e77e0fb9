"""The automatic target (vastui/engine/autoscale.py): table tests of the pure decision, then a
run of it against a queue of work that steps up and down."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from vastui.engine.autoscale import Observed, Settings, State, decide, initial

S = Settings(min_workers=1, max_workers=10, utilisation=0.75)
MIN = 60.0


def busy(
    unclaimed: int = 6, proving: int = 3, oldest: float = 60.0, workers: int | None = None
) -> Observed:
    return Observed(
        read=True, unclaimed=unclaimed, oldest_unclaimed_s=oldest, done_per_h=20.0 * proving,
        capacity_per_h=20.0 * proving, proving=proving,
        workers=proving if workers is None else workers,
    )  # fmt: skip


def idle(done: float, proving: int = 4) -> Observed:
    return Observed(
        read=True, unclaimed=0, done_per_h=done, capacity_per_h=20.0 * proving, proving=proving,
        workers=proving,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("case", "state", "steps", "after", "direction"),
    [
        # work waits: up only once it has waited up_after_s (5 min)
        ("one busy minute", State(3), [(0, busy()), (60, busy())], 3, None),
        ("five busy minutes", State(3), [(0, busy()), (300, busy())], 5, "up"),
        ("busy then clear", State(3), [(0, busy()), (200, idle(55, 3)), (400, busy())], 3, None),
        # work waiting a third of the deadline raises at once
        ("urgent", State(3), [(0, busy(oldest=16 * MIN))], 5, "up"),
        # at least one more, half again more
        ("from one", State(1), [(0, busy(proving=1)), (300, busy(proving=1))], 2, "up"),
        ("capped", State(9), [(0, busy(proving=9)), (300, busy(proving=9))], 10, "up"),
        ("at max", State(10), [(0, busy(proving=10)), (900, busy(proving=10))], 10, None),
        # a rental still setting up: wait for it to prove (at most settle_s, 3 h)
        (
            "unsettled",
            State(5, changed_at=-600),
            [(0, busy(workers=5)), (300, busy(workers=5))],
            5,
            None,
        ),
        (
            "settled",
            State(5, changed_at=-600),
            [(0, busy(proving=5)), (300, busy(proving=5))],
            8,
            "up",
        ),
        (
            "settled by time",
            State(5, changed_at=-11000),
            [(0, busy(workers=5)), (300, busy(workers=5))],
            8,
            "up",
        ),
        # idle: down only after 30 min of it, to what the work needs at 75 %
        ("idle 10 min", State(4), [(0, idle(20)), (600, idle(20))], 4, None),
        ("idle 30 min", State(4), [(0, idle(20)), (1800, idle(20))], 2, "down"),
        ("never below min", State(4), [(0, idle(1)), (1800, idle(1))], 1, "down"),
        ("busy enough", State(4), [(0, idle(50)), (1800, idle(50))], 4, None),
        # the window must lie after the last change (another fleet did its work)
        ("just changed", State(4, changed_at=-1000), [(0, idle(20)), (1800, idle(20))], 4, None),
        # nothing read: hold, whatever came before
        ("unread", State(4), [(0, idle(1)), (1800, Observed(read=False))], 4, None),
        ("unread busy", State(2), [(0, busy()), (300, Observed(read=False))], 2, None),
        # bounds changed under a stored target: moved, with a reason
        ("above max", State(14), [(0, idle(50))], 10, "down"),
        ("below min", State(0), [(0, Observed(read=False))], 1, "up"),
    ],
)
def test_the_target_moves_when_its_condition_holds(case, state, steps, after, direction) -> None:
    changes = []
    for now, obs in steps:
        d = decide(S, state, obs, float(now))
        state = d.state
        if d.change is not None:
            changes.append(d.change)
    assert state.target == after, case
    assert [c.direction for c in changes] == ([direction] if direction else []), case
    for c in changes:
        assert c.after == after and c.text.endswith(f"→ {after}") and "\n" not in c.text


def test_a_reason_says_what_was_seen() -> None:
    d = decide(S, State(3, pressure_since=0.0), busy(unclaimed=7, oldest=420.0), 400.0)
    assert d.change is not None
    assert d.change.text == (
        "work waits: 7 requests unclaimed for 7 min (3 workers proving, 60 proofs/h over the "
        "last 60 min): target 3 → 5"
    )
    d = decide(S, State(4, slack_since=0.0), idle(20), 1800.0)
    assert d.change is not None
    assert d.change.text == (
        "workers idle: the fleet proved 20/h of its 80/h (25%) for 30 min: target 4 → 2"
    )
    held = decide(S, State(4), Observed(read=False), 0.0)
    assert held.state.reason == "holding 4: curio's cluster not read"


def test_state_survives_a_round_trip_and_bad_numbers_do_not() -> None:
    state = State(5, pressure_since=10.0, slack_since=None, changed_at=3.0, reason="x")
    assert State.from_json(state.to_json(), S) == state
    junk = {"target": "9", "pressure_since": float("nan"), "changed_at": True, "reason": 3}
    assert State.from_json(junk, S) == State(S.min_workers)
    assert initial(S).target == S.min_workers


def test_a_fleet_follows_a_step_up_and_back_down() -> None:
    """A queue model: requests arrive at the demand's rate, each worker proves 20/h; curio
    holds at most 8 unclaimed and each worker claims up to 10. New workers prove 40 minutes
    after the target rises. The target follows demand up (work waiting) and down (idle)."""
    demand = [(0, 30.0), (4 * 3600, 150.0), (8 * 3600, 30.0)]  # requests per hour
    rate, step = 20.0, 60.0
    state = replace(initial(S), target=2)
    workers: list[float] = [0.0, 0.0]  # when each began proving
    held = unclaimed = 0.0
    history: list[tuple[float, int]] = []
    done_log: list[tuple[float, float]] = []
    t = 0.0
    while t < 12 * 3600:
        lam = next(r for at, r in reversed(demand) if t >= at)
        proving = [w for w in workers if w <= t]
        cap = rate * len(proving)
        # arrivals fill curio's queue up to 8 unclaimed; workers claim up to 10 each
        unclaimed = min(8.0, unclaimed + lam * step / 3600)
        take = min(unclaimed, 10 * len(proving) - held)
        held, unclaimed = held + take, unclaimed - take
        done = min(held, cap * step / 3600)
        held -= done
        done_log.append((t, done))
        window = [d for at, d in done_log if at > t - 3600]
        obs = Observed(
            read=True, unclaimed=math.floor(unclaimed), oldest_unclaimed_s=None,
            done_per_h=sum(window), capacity_per_h=cap, proving=len(proving),
            workers=len(workers),
        )  # fmt: skip
        d = decide(S, state, obs, t)
        state = d.state
        if d.change is not None:
            if d.change.after > len(workers):
                workers += [t + 40 * 60] * (d.change.after - len(workers))
            else:
                workers = workers[: d.change.after]
            history.append((t, d.change.after))
        t += step
    peak = max(n for _t, n in history)
    assert 150 / rate <= peak <= 10, "grew to carry the step up"
    assert state.target <= 3, "gave the surplus back after the step down"
    ups = [at for at, n in history if at < 8 * 3600]
    assert ups and min(ups) >= 4 * 3600, "no growth before the step"


def fed(demand: float, proving: int = 2, workers: int | None = None, **kw) -> Observed:
    """Workers of 20/h each; the market sends ``demand`` requests per hour: what they cannot
    take waits unclaimed (3 requests), what they take is their utilisation."""
    full = demand > 20.0 * proving
    kw.setdefault("unclaimed", 3 if full else 0)
    return Observed(
        read=True, done_per_h=min(demand, 20.0 * proving), capacity_per_h=20.0 * proving,
        proving=proving, workers=proving if workers is None else workers,
        requested_per_h=demand, **kw,
    )  # fmt: skip


F = Settings(min_workers=1, max_workers=10)  # utilisation 0.9: a worker of 20/h carries 18/h


@pytest.mark.parametrize(
    ("case", "state", "steps", "after", "direction"),
    [
        # need = demand / 18: up to floor(need + 0.3), down to floor(need + 0.8)
        ("carried", State(2), [(0, fed(36)), (3600, fed(36))], 2, None),
        ("more sent", State(2), [(0, fed(80)), (300, fed(80))], 4, "up"),
        ("far more sent: at most double", State(2), [(0, fed(300)), (300, fed(300))], 4, "up"),
        ("one minute of more", State(2), [(0, fed(80)), (60, fed(80))], 2, None),
        ("more, a rental still setting up", State(2, changed_at=-60),
         [(0, fed(80, workers=3)), (600, fed(80, workers=3))], 2, None),
        ("less sent", State(4), [(0, fed(20, proving=4)), (1800, fed(20, proving=4))], 1, "down"),
        ("a little less: kept", State(3), [(0, fed(40, proving=3)), (1800, fed(40, proving=3))],
         3, None),
        ("less, too soon after a change", State(4, changed_at=-600),
         [(0, fed(20, proving=4)), (1800, fed(20, proving=4))], 4, None),
        ("work waits past a third of the deadline", State(2),
         [(0, fed(36, unclaimed=5, oldest_unclaimed_s=16 * 60.0))], 3, "up"),
        ("no rate yet: the old signals", State(2),
         [(0, replace(fed(80), requested_per_h=None)),
          (300, replace(fed(80), requested_per_h=None))], 3, "up"),
        ("more wanted, nothing unclaimed: kept", State(2),
         [(0, fed(80, unclaimed=0)), (600, fed(80, unclaimed=0))], 2, None),
        ("fewer wanted, the fleet busy: kept", State(4),
         [(0, replace(fed(20, proving=4), done_per_h=70.0)),
          (1800, replace(fed(20, proving=4), done_per_h=70.0))], 4, None),
    ],
)  # fmt: skip
def test_the_target_follows_the_measured_demand(case, state, steps, after, direction) -> None:
    changes = []
    for now, obs in steps:
        d = decide(F, state, obs, float(now))
        state = d.state
        changes += [d.change] if d.change is not None else []
    assert state.target == after, case
    assert [c.direction for c in changes] == ([direction] if direction else []), case


def test_a_fleet_just_shrunk_does_not_grow_back_on_the_same_demand() -> None:
    """Down to floor(need + 0.8), up only past floor(need + 0.3): for any demand, the target
    the fleet shrank to is one the same demand does not raise."""
    for demand in [x * 2.5 for x in range(1, 80)]:
        state = State(10)
        for now in (0.0, 1800.0):
            state = decide(F, state, fed(demand, proving=10), now).state
        shrunk = state.target
        for now in (1800.0 + 60 * k for k in range(1, 200)):
            state = decide(F, state, fed(demand, proving=shrunk), now).state
        assert state.target == shrunk, demand


def test_a_followed_change_says_the_demand_and_the_rate_it_was_made_on() -> None:
    state = decide(F, State(2), fed(80), 0.0).state
    up = decide(F, state, fed(80), 300.0).change
    assert up is not None and up.text == (
        "work waits: the market sends 80 requests/h, 2 workers prove up to 20/h each: "
        "4 needed: target 2 → 4"
    )
    one = decide(F, State(3), fed(5, proving=1), 0.0).state.reason
    assert one == "3: the market sends 5 requests/h, 1 worker proves up to 20/h (1 needed)"


# Workers of 20/h at $0.10/h each: with max_cost_per_proof $0.01 a worker's min_rate is 10/h.
M = Settings(min_workers=1, max_workers=10, max_cost_per_proof=0.01)


def paid(demand: float, proving: int = 2, err: float = 0.0, **kw) -> Observed:
    return replace(
        fed(demand, proving, **kw), dph_per_h=0.10 * proving, requested_err_per_h=err,
        worst_dph=0.10, worst_rate=20.0,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("case", "state", "steps", "after", "direction"),
    [
        # the demand beyond the fleet's 40/h keeps one worker more at its 10/h, not two
        ("a worker more pays", State(2), [(0, paid(55)), (300, paid(55))], 3, "up"),
        ("two more would not", State(2), [(0, paid(62)), (300, paid(62))], 3, "up"),
        ("two more do", State(2), [(0, paid(80)), (300, paid(80))], 4, "up"),
        # the need (utilisation 0.9) wants a third worker, but it would prove 9/h of the work:
        # $0.011/proof, above the operator's $0.01
        ("a worker more would not pay", State(2), [(0, paid(49)), (300, paid(49))], 2, None),
        # a count's error: the demand taken a standard error low for a raise...
        ("noisy: not enough evidence", State(2), [(0, paid(55, err=8)), (300, paid(55, err=8))],
         2, None),
        # a start from the warm pool (its $/h known: next_dph) asks one standard error
        ("noisy, a pooled worker starts", State(2),
         [(0, replace(paid(62, err=8), next_dph=0.10)),
          (300, replace(paid(62, err=8), next_dph=0.10))], 3, "up"),
        ("noisy, a new rental waits", State(2), [(0, paid(62, err=8)), (300, paid(62, err=8))],
         2, None),
        # ... and high for a cut: the last of 3 workers gets what 2 leave of 42 ± 2: 4/h
        # (the need alone keeps 3: floor(42 / 18 + 0.8))
        ("the last worker unpaid", State(3),
         [(0, paid(42, proving=3, err=2)), (1800, paid(42, proving=3, err=2))], 2, "down"),
        ("the last worker, no $/h known", State(3),
         [(0, replace(paid(42, proving=3), dph_per_h=0.0, worst_dph=0.0)),
          (1800, replace(paid(42, proving=3), dph_per_h=0.0, worst_dph=0.0))], 3, None),
        # work waiting past a third of the deadline is served whatever it costs
        ("urgent pays no heed", State(2),
         [(0, paid(49, unclaimed=5, oldest_unclaimed_s=16 * 60.0))], 3, "up"),
        # without the fleet's $/h the gate does not apply (the need alone)
        ("no $/h known", State(2),
         [(0, replace(paid(49), dph_per_h=0.0)), (300, replace(paid(49), dph_per_h=0.0))],
         3, "up"),
    ],
)  # fmt: skip
def test_a_worker_is_added_or_kept_only_where_the_work_pays_its_min_rate(
    case, state, steps, after, direction
) -> None:
    changes = []
    for now, obs in steps:
        d = decide(M, state, obs, float(now))
        state = d.state
        changes += [d.change] if d.change is not None else []
    assert state.target == after, (case, state.reason)
    assert [c.direction for c in changes] == ([direction] if direction else []), case


def test_a_raise_held_back_by_money_says_so() -> None:
    state = decide(M, State(2), paid(49), 0.0).state
    held = decide(M, state, paid(49), 300.0)
    assert held.change is None and held.state.reason == (
        "2: the market sends 49 requests/h, 2 workers prove up to 20/h each: a worker more "
        "would prove 9/h of it (of 49/h at the least), under the 10/h that keeps it within "
        "$0.01/proof"
    )


# Margin (issue 43): the market pays $0.02 a proof; workers of 20/h at $0.10/h each. A new
# rental sets up for 2 h and pays $1.50 of parameters' bandwidth.
def priced(demand: float, expected_h: float, proving: int = 2, **kw) -> Observed:
    base = dict(usd_per_proof=0.02, expected_h=expected_h, next_setup_h=2.0, next_setup_usd=1.5)
    base.update(kw)
    return replace(paid(demand, proving), **base)


@pytest.mark.parametrize(
    ("case", "obs", "after", "direction"),
    [
        # a worker more proves 20/h of the 40/h beyond the fleet: $0.40 − $0.10 = $0.30/h; over
        # 12 h less 2 h of set-up $3.00, less $1.70 of set-up: it earns
        ("a long rise pays a rental", priced(80, 12.0), 4, "up"),
        # ... the second fed what the first leaves: 20/h too, both pay
        # over 4 h: $0.60 − $1.70 < 0: held
        ("a short rise does not", priced(80, 4.0), 2, None),
        # a pooled worker (4 min, no parameters) pays over the same short rise
        ("a short rise pays a pooled start",
         priced(80, 4.0, next_setup_h=0.07, next_setup_usd=0.0, next_dph=0.10), 3, "up"),
        # the rise came back before: its later hours count, the pool's storage less
        ("a rise that recurs pays",
         priced(80, 4.0, later_h=12.0, later_idle_h=36.0, next_storage_dph=0.01), 4, "up"),
        ("... not when the wait costs more",
         priced(80, 4.0, later_h=12.0, later_idle_h=36.0, next_storage_dph=0.2), 2, None),
        # a worker that would prove 5/h of the work: $0.10 − $0.10 = 0/h: never pays
        ("a worker barely fed", priced(45, 100.0), 2, None),
    ],
)  # fmt: skip
def test_a_raise_is_decided_by_the_margin_over_the_time_the_demand_lasts(
    case: str, obs: Observed, after: int, direction: str | None
) -> None:
    state = decide(M, State(2), obs, 0.0).state
    d = decide(M, state, obs, 300.0)
    assert d.state.target == after, (case, d.state.reason)
    assert (d.change.direction if d.change else None) == direction, case


def test_a_margin_decision_says_its_numbers() -> None:
    obs = priced(80, 4.0)
    state = decide(M, State(2), obs, 0.0).state
    held = decide(M, state, obs, 300.0)
    assert held.state.reason == (
        "2: the market sends 80 requests/h, 2 workers prove up to 20/h each: a worker more "
        "earns $0.30/h for the ~4.0 h the demand is expected to last; its set-up costs $1.70 "
        "(120 min): held"
    )
    long = priced(80, 12.0)
    raised = decide(M, decide(M, State(2), long, 0.0).state, long, 300.0)
    assert raised.change is not None and "earns $0.30/h for the ~12.0 h" in raised.change.text


def test_the_worst_worker_goes_when_it_earns_less_than_it_costs() -> None:
    # max_cost_per_proof $1: the min_rate rule keeps any worker; margin alone decides. 3
    # workers of 20/h, demand 44 ± 1: the worst gets 5/h, at $0.01 a proof $0.05/h < $0.10/h
    lax = replace(M, max_cost_per_proof=1.0)
    low = replace(priced(44, 10.0, proving=3, requested_err_per_h=1.0), usd_per_proof=0.01)
    d = decide(lax, decide(lax, State(3), low, 0.0).state, low, 1800.0)
    assert d.state.target == 2 and d.change is not None and d.change.direction == "down"
    # at $0.03 a proof it earns $0.15/h: kept
    high = replace(low, usd_per_proof=0.03)
    kept = decide(lax, decide(lax, State(3), high, 0.0).state, high, 1800.0)
    assert kept.state.target == 3, kept.state.reason


def test_a_market_that_fills_every_run_at_once_grows_the_fleet_one_by_one() -> None:
    """Saturated (the request task's runs filled by their first poll): the measured demand is
    only a floor. One worker more when nothing is on its way; none while one is."""
    # measured 42/h against 2 workers of 20/h: the need alone says 2
    full = priced(42, 10.0, unclaimed=6, saturated=True, next_setup_h=0.5, next_setup_usd=0.2)
    state = decide(M, State(2), full, 0.0).state
    d = decide(M, state, full, 300.0)
    assert d.state.target == 3 and d.change is not None, d.state.reason
    coming = replace(full, workers=3)  # the one rented is setting up
    state = decide(M, State(3), coming, 0.0).state
    held = decide(M, state, coming, 300.0)
    assert held.state.target == 3 and held.change is None, held.state.reason
    # not saturated: the same reading holds at 2
    plain = replace(full, saturated=False)
    state = decide(M, State(2), plain, 0.0).state
    assert decide(M, state, plain, 300.0).state.target == 2
