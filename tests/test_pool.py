"""The warm pool's decisions (vastui/engine/pool.py), as tables: which surplus worker is kept
warm, which pooled worker is destroyed, which starts first."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from vastui.config import Config
from vastui.domain.worker import InstanceRecord
from vastui.engine import pool

H = 3600.0
NOW = 1_790_000_000.0


def cfg(**fleet: Any) -> Config:
    base = Config()
    return replace(base, fleet=replace(base.fleet, auto_target=True, **fleet))


def worker(vid: int = 1, **kw: Any) -> InstanceRecord:
    base: dict[str, Any] = dict(
        label=f"vastui-main-{vid:012x}", state="proving", dph_total=0.5, storage_dph=0.03,
        prod_rate=90.0, min_rate=63.0, inet_down=1000.0, inet_down_cost=0.01,
        proving_at=NOW - 5 * H,
    )  # fmt: skip
    base.update(kw)
    return InstanceRecord(vast_id=vid, **base)


KEEP_CASES = [
    # (case, record, pooled now, config, kept)
    ("a good worker, the pool empty", worker(), 0, cfg(), True),
    ("the pool full", worker(), 2, cfg(), False),
    ("no pool", worker(), 0, cfg(warm_pool_max=0), False),
    ("a fixed target", worker(), 0, replace(cfg(), fleet=replace(cfg().fleet, auto_target=False)),
     False),
    ("not proving yet", worker(state="benchmark"), 0, cfg(), False),
    ("a bid: Vast decides its stops", worker(is_bid=True), 0, cfg(), False),
    ("below its min_rate", worker(prod_rate=40.0, bench_rate=70.0), 0, cfg(), False),
    ("rate unknown", worker(prod_rate=None), 0, cfg(), False),
    ("its benchmark's rate stands in", worker(prod_rate=None, bench_rate=80.0), 0, cfg(), True),
    ("storage price unknown", worker(storage_dph=None), 0, cfg(), False),
    ("storage over the idle time dearer than a new set-up",
     worker(storage_dph=0.5, inet_down_cost=0.0), 0, cfg(warm_pool_idle_h=48.0), False),
]  # fmt: skip


@pytest.mark.parametrize(("case", "rec", "pooled", "config", "kept"), KEEP_CASES,
                         ids=[c[0] for c in KEEP_CASES])  # fmt: skip
def test_keep(case: str, rec: InstanceRecord, pooled: int, config: Config, kept: bool) -> None:
    verdict = pool.keep(rec, pooled, config)
    assert verdict.pooled is kept, verdict.why
    assert verdict.why and "\n" not in verdict.why


def test_the_set_up_saved_is_the_parameters_bandwidth_and_the_hours_before_proving() -> None:
    from vastui.domain.plan import PARAMS_GB
    from vastui.engine.ranking import setup_hours

    rec = worker()
    saved = pool.setup_saved(rec, 12)
    assert saved == pytest.approx(PARAMS_GB * 0.01 + setup_hours(1000.0, 90.0, 12) * 0.5)
    assert pool.setup_saved(worker(prod_rate=None), 12) is None


EXPIRE_CASES = [
    # (case, record, rank, kind or None)
    ("fresh in the pool", worker(pooled_since=NOW - H), 0, None),
    ("kept past warm_pool_max_h", worker(pooled_since=NOW - 48 * H), 0, pool.EXPIRED_KIND),
    ("the pool over its size", worker(pooled_since=NOW - H), 2, pool.EXPIRED_KIND),
    ("a queued start within its deadline",
     worker(pooled_since=NOW - H, pool_start_at=NOW - 5 * 60), 0, None),
    ("a queued start past its deadline",
     worker(pooled_since=NOW - H, pool_start_at=NOW - 10 * 60), 0, pool.UNAVAILABLE_KIND),
    ("not pooled", worker(), 5, None),
]  # fmt: skip


@pytest.mark.parametrize(("case", "rec", "rank", "kind"), EXPIRE_CASES,
                         ids=[c[0] for c in EXPIRE_CASES])  # fmt: skip
def test_expired(case: str, rec: InstanceRecord, rank: int, kind: str | None) -> None:
    kill = pool.expired(rec, NOW, rank, cfg())
    assert (kill.kind if kill else None) == kind
    if kill is not None:
        assert not kill.strike and kill.ban is None, "the machine did nothing wrong"


def test_pick_starts_the_cheapest_per_proof_not_one_already_asked() -> None:
    slow = worker(1, pooled_since=NOW, prod_rate=70.0)
    fast = worker(2, pooled_since=NOW, prod_rate=120.0)
    asked = worker(3, pooled_since=NOW, prod_rate=500.0, pool_start_at=NOW)
    live = worker(4, prod_rate=900.0)
    assert pool.pick([slow, fast, asked, live]) is fast
    assert pool.pick([asked, live]) is None
    assert [r.vast_id for r in pool.ranked([worker(1, pooled_since=NOW - H),
                                            worker(2, pooled_since=NOW)])] == [2, 1]  # fmt: skip


def test_the_instances_pane_says_a_worker_is_in_the_warm_pool() -> None:
    from vastui.console.panes.instances import stage_text

    pooled = stage_text(worker(pooled_since=NOW - 2 * H), now=NOW).plain
    assert "proving" in pooled and "⏸ warm pool 2.0h" in pooled and "queued" not in pooled
    queued = stage_text(worker(pooled_since=NOW - H, pool_start_at=NOW), now=NOW).plain
    assert "warm pool" in queued and "start queued" in queued
    assert "warm pool" not in stage_text(worker(), now=NOW).plain


@pytest.mark.parametrize(
    ("case", "idle_h", "kept", "said"),
    [
        # storage $0.03/h; a new rental's set-up ~$2.5: a short rest between rises keeps it
        ("rises 6 h apart", 6.0, True, "the demand's rests between rises"),
        # ... one 100 h long costs more in storage than the set-up saved
        ("rises 100 h apart: past the pool's 48 h", 100.0, False, "past fleet.warm_pool_max_h"),
        ("rises 40 h apart, dear storage", 40.0, False, "costs more than a new rental"),
        ("not known: the configured idle time", None, True, "fleet.warm_pool_idle_h"),
    ],
)  # fmt: skip
def test_the_wait_a_kept_worker_is_sized_for_is_learned_from_the_rises(
    case: str, idle_h: float | None, kept: bool, said: str
) -> None:
    rec = worker(storage_dph=0.1) if "dear" in case else worker()
    verdict = pool.keep(rec, 0, cfg(), idle_h=idle_h)
    assert verdict.pooled is kept, (case, verdict.why)
    assert said in verdict.why, verdict.why
