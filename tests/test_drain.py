"""The drain's decisions and curio's verdict, pure (vastui/engine/drain.py, production.py)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from vastui.config import Config
from vastui.domain.worker import InstanceRecord
from vastui.engine import drain, production
from vastui.engine.policy import Kill
from vastui.engine.production import ProdState

PROVING = InstanceRecord(vast_id=1, state="proving", runner_id=3, bench_rate=20.0)


@pytest.mark.parametrize(
    ("kind", "rec", "drains"),
    [
        ("surplus", PROVING, True),
        ("prove_below_min", PROVING, True),
        ("prove_failing", PROVING, False),  # broken: it would finish nothing
        ("prove_daemon_died", PROVING, False),
        ("prove_unreachable", PROVING, False),
        ("manual", PROVING, False),  # the operator's: now
        ("surplus", replace(PROVING, state="benchmark"), False),  # holds no curio task yet
        ("surplus", replace(PROVING, runner_id=None), False),  # no curio identity
        ("surplus", replace(PROVING, outbid_since=5.0), False),  # stopped: its curio is down
    ],
)
def test_which_destroys_drain(kind: str, rec: InstanceRecord, drains: bool) -> None:
    assert drain.drains(Kill(kind, "why"), rec) is drains


def cfg(**proving: Any) -> Config:
    c = Config()
    return replace(c, proving=replace(c.proving, **proving))


@pytest.mark.parametrize(
    ("held", "rate", "config", "seconds"),
    [
        (3, 20.0, cfg(), 1.5 * 3 * 180.0),  # 3 proofs at 20/h: 9 min, with slack 13.5 min
        (0, 20.0, cfg(), drain.DRAIN_FLOOR_S),  # nothing held: the floor
        (30, 20.0, cfg(), 40 * 60.0),  # more than the market allows: its deadline less margin
        (3, None, cfg(), 40 * 60.0),  # rate unknown: the cap
        (3, 20.0, cfg(drain_min=7.0), 7 * 60.0),  # the operator's
        (3, 20.0, cfg(market_deadline_min=20.0, drain_margin_min=10.0), 10 * 60.0),
    ],
)
def test_how_long_a_drain_may_last(
    held: int, rate: float | None, config: Config, seconds: float
) -> None:
    assert drain.drain_seconds(held, rate, config) == pytest.approx(seconds)


def test_the_rate_a_drain_is_sized_by() -> None:
    assert drain.worker_rate(replace(PROVING, prod_rate=12.0)) == 12.0
    assert drain.worker_rate(PROVING) == 20.0
    assert drain.worker_rate(replace(PROVING, bench_rate=float("nan"))) is None


PLAN = {"started": 100.0, "deadline": 1000.0}


@pytest.mark.parametrize(
    ("cluster", "checked_at", "now", "why"),
    [
        ({"machine_id": 7, "held_by_name": {"PSProve": 2}}, 200.0, 300.0, None),
        ({"machine_id": 7, "held_by_name": {}}, 200.0, 300.0, "drained"),
        # the singleton is background work: freed by the release, not waited for
        ({"machine_id": 7, "held_by_name": {"bg:PShareRequest": 1}}, 200.0, 300.0, "drained"),
        ({"machine_id": None, "held_by_name": {}}, 200.0, 300.0, "drained"),  # row gone
        # a reading from before the cordon proves nothing
        ({"machine_id": 7, "held_by_name": {}}, 50.0, 300.0, None),
        (None, None, 300.0, None),  # the cluster unreadable: wait ...
        (None, None, 1000.0, "deadline"),  # ... until the deadline
        ({"machine_id": 7, "held_by_name": {"PSProve": 2}}, 900.0, 1000.0, "deadline"),
    ],
)
def test_when_a_drain_ends(
    cluster: dict[str, Any] | None, checked_at: float | None, now: float, why: str | None
) -> None:
    end = drain.drain_end(PLAN, cluster, checked_at, now)
    assert (end.why if end else None) == why


def test_a_deadline_says_what_was_still_held() -> None:
    end = drain.drain_end(PLAN, {"machine_id": 7, "held_by_name": {"PSProve": 2}}, 900.0, 1000.0)
    assert end is not None and end.text == "drain deadline passed with 2 task(s) held"


@pytest.mark.parametrize(
    ("cluster", "kind"),
    [
        (None, None),
        ({"done": 0, "failed": 2, "last_error": "x"}, None),  # under proving.max_failures (3)
        ({"done": 0, "failed": 3, "last_error": "error: proof check failed"}, "kill"),
        ({"done": 3, "failed": 3, "last_error": "x"}, "kill"),  # as many failed as done
        ({"done": 4, "failed": 3, "last_error": "x"}, None),  # mostly succeeding
        ({"done": 0, "failed": 5, "last_error": None}, "kill"),
    ],
)
def test_curio_verdict(cluster: dict[str, Any] | None, kind: str | None) -> None:
    kill = production.curio_verdict(cluster, 12, Config())
    assert (kill is not None) == (kind == "kill")
    if kill is not None and cluster is not None:
        assert kill.kind == "prove_curio_failing" and kill.strike and kill.stage == "proving"
        line = cluster["last_error"] or "no error text"
        assert kill.reason.endswith(f": {line}") and kill.error_lines == (line,)
        assert "cuzk counted 12 done" in kill.reason


UNAVAILABLE = (
    "error: failed to compute proof: cuzk porep prove failed: cuzk Prove RPC: rpc error: code = "
    'Unavailable desc = connection error: desc = "transport: Error while dialing: dial tcp '
    '127.0.0.1:33277: connect: connection refused"'
)


@pytest.mark.parametrize(
    ("line", "state", "waits"),
    [
        # curio's own error: the verdict stands at once
        ("error: proof check failed", ProdState(last_ok=50.0), False),
        # curio could not reach the daemon, and neither could the engine's last reading: the
        # cuzk verdicts judge (died, unresponsive)
        (UNAVAILABLE, ProdState(last_ok=50.0, silent_since=80.0), True),
        # no reading of cuzk since the engine saw the failures (at 100): wait for one
        (UNAVAILABLE, ProdState(last_ok=90.0), True),
        (UNAVAILABLE, ProdState(last_ok=100.0), True),
        (UNAVAILABLE, ProdState(), True),
        # the daemon answered the engine after the failures were seen: curio cannot reach a live
        # daemon, the verdict stands
        (UNAVAILABLE, ProdState(last_ok=130.0), False),
        # another gRPC code is the daemon's own answer, not an unreachable daemon
        (UNAVAILABLE.replace("Unavailable", "DeadlineExceeded"), ProdState(), False),
    ],
)
def test_a_verdict_of_curios_failures_waits_for_a_reading_of_cuzk(
    line: str, state: ProdState, waits: bool
) -> None:
    kill = production.curio_verdict({"done": 0, "failed": 9, "last_error": line}, 12, Config())
    assert kill is not None
    assert production.waits_for_cuzk(kill, state, seen_since=100.0) is waits


@pytest.mark.parametrize(
    ("rec", "owed"),
    [
        (InstanceRecord(vast_id=1, state="killed", killed_at=100.0), False),  # never proved
        (InstanceRecord(vast_id=1, state="killed", proving_at=50.0, killed_at=100.0), True),
        (replace(PROVING, state="killed", proving_at=50.0, killed_at=100.0, released_at=100.0),
         False),
        # released when it was outbid, then resumed and destroyed: owed again
        (replace(PROVING, state="killed", proving_at=50.0, killed_at=100.0, released_at=70.0),
         True),
    ],
)  # fmt: skip
def test_a_release_is_owed_after_each_destroy(rec: InstanceRecord, owed: bool) -> None:
    assert drain.release_owed(rec) is owed
