"""The invariants of two controllers on one account and of a fleet-wide failure
(reliability/invariants.py, reliability/controllers.py, reliability/storm.py): given
snapshots, the violations; and the observer's read of what a database knows of ownership."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from reliability import invariants as inv
from reliability.invariants import (
    Episode,
    OrphanWatch,
    StoreBan,
    StoreEvent,
    StoreForeign,
    StoreInstance,
    StoreIntent,
    StoreStrike,
    StoreView,
    VastRow,
)

FLEET = "trial"
FA, FB, FC = "aaaaaaaa", "bbbbbbbb", "cccccccc"  # two databases' fleet ids, and nobody's


def label(fid: str | None, n: int) -> str:
    return f"vastui-{FLEET}{'.' + fid if fid else ''}-{n:012x}"


A1, A2, B1, B2, C1 = label(FA, 1), label(FA, 2), label(FB, 1), label(FB, 2), label(FC, 1)
LEGACY = label(None, 9)


def row(iid: int, lab: str | None) -> VastRow:
    return VastRow(iid, lab, "running", machine_id=iid // 10)


def live(iid: int, lab: str) -> StoreInstance:
    return StoreInstance(iid, lab, "proving", machine_id=iid // 10)


def dead(iid: int, lab: str, kind: str = "bench_error") -> StoreInstance:
    return StoreInstance(iid, lab, "killed", iid // 10, kind, "why", "error")


def subjects(violations: list[inv.Violation]) -> list[tuple[str, str]]:
    return [v.key for v in violations]


# -- whose is an instance ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("lab", "fid", "expected"),
    [
        (A1, FA, True),
        (B1, FA, False),  # the same fleet name, another database
        (B1, None, True),  # the database's identity not known yet: by the fleet name, as before
        (LEGACY, FA, True),  # a label older than identities stays the fleet's
        ("vastui-other.aaaaaaaa-000000000001", FA, False),
        ("reliability-foreign", FA, False),
        (None, FA, False),
    ],
)
def test_owned_by_the_database_whose_fleet_id_the_label_carries(
    lab: str | None, fid: str | None, expected: bool
) -> None:
    assert inv.owned(lab, FLEET, fid) is expected


def test_untracked_is_per_database_and_a_label_of_no_database_is_nobodys() -> None:
    rows = [row(1, A1), row(2, B1), row(3, C1), row(4, A2)]
    store = StoreView(instances=(live(1, A1),), fleet_id=FA)
    assert inv.untracked(rows, store, FLEET) == {4: "not in the store"}  # B's are not A's orphans
    got = inv.untracked(rows, store, FLEET, known={FA, FB})
    assert set(got) == {3, 4} and "no database here has" in got[3]


def test_a_single_database_loses_no_orphan_to_the_fleet_ids() -> None:
    """One engine (known = its own id): every row of the fleet's name it does not track is an
    orphan, as when "ours" was the fleet's name alone."""
    rows = [row(1, A1), row(2, B1), row(3, LEGACY)]
    store = StoreView(instances=(live(1, A1),), fleet_id=FA)
    before = inv.untracked(rows, StoreView(instances=store.instances), FLEET)
    assert set(inv.untracked(rows, store, FLEET, known={FA})) == set(before) == {2, 3}


def test_the_orphan_watch_counts_strays() -> None:
    store = StoreView(fleet_id=FA)
    start = OrphanWatch({3: 0.0, 2: 0.0})
    rows = [row(3, C1), row(2, B1)]
    _, found = inv.orphans(start, 20.0, rows, store, FLEET, 0.0, 10, known={FA})
    assert subjects(found) == [("orphan", "instance 2"), ("orphan", "instance 3")]  # one engine
    _, found = inv.orphans(start, 20.0, rows, store, FLEET, 0.0, 10, known={FA, FB})
    assert subjects(found) == [("orphan", "instance 3")]  # B's is the second database's
    _, found = inv.orphans(start, 20.0, rows, store, FLEET, 0.0, 10)
    assert found == []  # a peer: the parent checks the account


def test_over_target_counts_this_databases_instances() -> None:
    rows = [row(1, A1), row(2, A2), row(3, B1)]
    timeline = [(0.0, 2)]
    assert inv.over_target(50.0, rows, FLEET, timeline, 10.0, fleet_id=FA) == []
    assert subjects(inv.over_target(50.0, rows, FLEET, timeline, 10.0)) == [("over_target", "t=50")]
    assert subjects(inv.over_target(50.0, rows[2:], FLEET, [(0.0, 0)], 10.0, fleet_id=FB)) == [
        ("over_target", "t=50")
    ]


@pytest.mark.parametrize(
    ("store", "expected"),
    [
        (StoreView(instances=(live(1, A1),), fleet_id=FA), []),
        (StoreView(instances=(live(2, B1),), fleet_id=FA), [("foreign_touched", "instance 2")]),
        (
            StoreView(events=(StoreEvent("adopt", 2, 1, "adopted"),), fleet_id=FA),
            [("foreign_touched", "instance 2")],
        ),
        (
            StoreView(intents=(StoreIntent(7, "destroy", "done", instance_id=2),), fleet_id=FA),
            [("foreign_touched", "instance 2")],
        ),
        # the other's instance gone from the cloud is no finding (its controller destroyed it)
        (StoreView(fleet_id=FA), []),
    ],
)
def test_foreign_touched_covers_the_other_databases_instances(
    store: StoreView, expected: list[tuple[str, str]]
) -> None:
    rows = [row(50, "reliability-foreign"), row(1, A1)]
    found = inv.foreign_touched(frozenset({50}), rows, store, FLEET, others=frozenset({2}))
    assert subjects(found) == expected


def test_an_instance_is_a_databases_only_by_its_own_rent_intent() -> None:
    intents = (
        StoreIntent(1, "rent", "done", A1),
        StoreIntent(2, "rent", "dry_run", A2),
        StoreIntent(3, "destroy", "done", A2, instance_id=2),
    )
    store = StoreView(instances=(live(1, A1), live(2, A2), live(3, B1)), intents=intents)
    assert subjects(inv.unintended(store)) == [
        ("foreign_touched", "instance 2"),  # a dry run's label never went out
        ("foreign_touched", "instance 3"),
    ]


# -- the other's instances, seen ----------------------------------------------------------------


def test_foreign_seen_within_the_bound_with_the_engine_up() -> None:
    theirs = [row(2, B1)]
    empty = StoreView(fleet_id=FA)
    listed = {2: 100.0}
    assert inv.foreign_seen(105.0, theirs, empty, listed, 0.0, 10.0) == []  # not yet
    late = inv.foreign_seen(111.0, theirs, empty, listed, 0.0, 10.0)
    assert subjects(late) == [("foreign_unseen", "instance 2")]
    assert inv.foreign_seen(111.0, theirs, empty, listed, None, 10.0) == []  # engine down
    assert inv.foreign_seen(111.0, theirs, empty, listed, 105.0, 10.0) == []  # up since 105
    seen = StoreView(fleet_id=FA, foreign_rows=(StoreForeign(2, B1, f"{FLEET}.{FB}"),))
    assert inv.foreign_seen(111.0, theirs, seen, listed, 0.0, 10.0) == []


def test_its_own_instance_listed_as_foreign() -> None:
    store = StoreView(fleet_id=FA, foreign_rows=(StoreForeign(1, A1, f"{FLEET}.{FA}"),))
    assert subjects(inv.foreign_seen(0.0, [], store, {}, 0.0, 10.0)) == [
        ("foreign_unseen", "instance 1")
    ]


def warning(owner: str) -> StoreEvent:
    return StoreEvent(
        "foreign", None, None, f"1 instance(s) of another controller on this account (fleet "
        f"{owner}: 2): this database never rented them; they are not adopted, counted or destroyed",
    )  # fmt: skip


@pytest.mark.parametrize(
    ("events", "final", "expected"),
    [
        ((warning("trial.bbbbbbbb"),), True, []),
        ((), False, []),  # not yet: only the end asks for it
        ((), True, [("foreign_unseen", "warning trial.bbbbbbbb")]),
        ((warning("trial.bbbbbbbb"),) * 2, False, [("foreign_unseen", "warning trial.bbbbbbbb")]),
        ((warning("trial.bbbbbbbb"), warning("trial.aaaaaaaa")), False,
         [("foreign_unseen", "warning trial.aaaaaaaa")]),
    ],
)  # fmt: skip
def test_one_foreign_event_per_foreign_fleet(
    events: tuple[StoreEvent, ...], final: bool, expected: list[tuple[str, str]]
) -> None:
    store = StoreView(events=events, fleet_id=FA)
    found = inv.foreign_warnings(store, "trial.aaaaaaaa", ["trial.bbbbbbbb"], final=final)
    assert subjects(found) == expected


# -- no war -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("created", "store", "expected"),
    [
        ({A1: 1, A2: 1, B1: 1, B2: 1}, StoreView(fleet_id=FA), []),
        ({A1: 1, A2: 1, label(FA, 3): 1}, StoreView(fleet_id=FA),
         [("rent_war", "fleet trial.aaaaaaaa")]),
        ({A1: 1, A2: 1, label(FA, 3): 1}, StoreView(instances=(dead(1, A1),), fleet_id=FA), []),
        # a killed instance of the other's (recorded here: foreign_touched's) buys no rent
        ({A1: 1, A2: 1, label(FA, 3): 1}, StoreView(instances=(dead(2, B1),), fleet_id=FA),
         [("rent_war", "fleet trial.aaaaaaaa")]),
        ({A1: 5}, StoreView(), []),  # identity unknown: no claim
    ],
)  # fmt: skip
def test_rent_war(
    created: dict[str, int], store: StoreView, expected: list[tuple[str, str]]
) -> None:
    assert subjects(inv.rent_war(created, store, FLEET, target=2)) == expected


# -- who destroyed what -------------------------------------------------------------------------


def test_delete_ids_read_off_the_proxy() -> None:
    asked = [
        ("DELETE", "/api/v0/instances/31/"), ("GET", "/api/v0/instances/32/"),
        ("DELETE", "/api/v1/instances/33?x=1"), ("DELETE", "/api/v0/instances/"),
        ("PUT", "/api/v0/instances/34/"),
    ]  # fmt: skip
    assert inv.delete_ids(asked) == [31, 33]


def test_cross_destroys() -> None:
    found = inv.cross_destroys("the first controller", [1, 1, 2, 3], own={1}, theirs={2})
    assert subjects(found) == [("cross_destroy", "instance 2"), ("cross_destroy", "instance 3")]
    assert "another controller's" in found[0].detail and "never recorded" in found[1].detail


def test_gone_without_a_destroy_of_its_own() -> None:
    whose = {1: "first", 2: "second", 3: "second"}
    rows = [row(3, B2)]
    ok = inv.gone_without_own_destroy(whose, rows, {"first": [1], "second": [2]})
    assert ok == []
    bad = inv.gone_without_own_destroy(whose, rows, {"first": [1, 2], "second": []})
    assert subjects(bad) == [("cross_destroy", "instance 2")]


def test_destroy_ledger() -> None:
    assert inv.destroy_ledger(4, 5) == [] and inv.destroy_ledger(None, 0) == []
    assert subjects(inv.destroy_ledger(6, 5)) == [("cross_destroy", "cloud ledger")]


# -- a fleet-wide failure ------------------------------------------------------------------------

SIG = "benchmark/bench_error: ERROR cuzk: PoRep proof self-check FAILED job_id=<id>"
PAUSED_AT = 1000.0


def victim_event(iid: int, ts: float, *, uncharged: bool = False, sig: str = SIG) -> StoreEvent:
    detail: dict[str, object] = {"signature": sig}
    if uncharged:
        detail["fleet_failure"] = True
    return StoreEvent("destroy", iid, iid // 10, "benchmark error", detail, ts)


def pause_event(ts: float = PAUSED_AT, instances: tuple[int, ...] = (10, 20)) -> StoreEvent:
    detail = {"signature": SIG, "machines": [1, 2, 3], "instances": list(instances)}
    return StoreEvent("fleet_failure", None, None, "provisioning paused: x", detail, ts)


def resumed_event(why: str = "cleared by the operator (vastui resume)") -> StoreEvent:
    return StoreEvent("fleet_failure", None, None, f"provisioning resumed: {why}", {}, 5.0)


def rent(iid: int, at: float) -> StoreIntent:
    return StoreIntent(iid, "rent", "done", label(FA, iid), created_at=at)


def storm_store(
    kills: tuple[tuple[int, float, float], ...], *, extra: tuple[StoreEvent, ...] = ()
) -> StoreView:
    """(instance, rented at, destroy decided at) of each victim; the pause at PAUSED_AT."""
    return StoreView(
        instances=tuple(dead(iid, label(FA, iid)) for iid, _, _ in kills),
        events=(
            *(victim_event(iid, at, uncharged=at > PAUSED_AT) for iid, _, at in kills),
            pause_event(),
            *extra,
        ),
        intents=tuple(rent(iid, at) for iid, at, _ in kills),
        fleet_id=FA,
    )


def test_pause_episodes_in_the_engines_order() -> None:
    store = StoreView(events=(pause_event(), resumed_event(), pause_event(3000.0, ())))
    got = inv.pause_episodes(store)
    assert [(e.paused_at, e.ended) for e in got] == [
        (PAUSED_AT, "cleared by the operator (vastui resume)"),
        (3000.0, None),
    ]
    assert got[0].instances == (10, 20) and got[0].signature == SIG


def test_victims_and_when_they_were_rented() -> None:
    store = storm_store(((10, 0.0, 900.0), (40, 500.0, 1200.0)))
    got = inv.victims(store)
    assert [(v.instance_id, v.charged) for v in got] == [(10, True), (40, False)]
    assert inv.rented_at(store) == {10: 0.0, 40: 500.0}
    assert inv.victims(store, "another") == []


@pytest.mark.parametrize(
    ("kills", "expected"),
    [
        # three machines up to the pause, a fourth in flight (decided after it): fine
        (((10, 0.0, 900.0), (20, 0.0, 950.0), (30, 0.0, 1000.0), (40, 500.0, 1200.0)), []),
        # four before the pause
        (((10, 0, 800.0), (20, 0, 850.0), (30, 0, 900.0), (40, 0, 1000.0)),
         [("storm_overrun", "pause 1")]),
    ],
)  # fmt: skip
def test_storm_overrun(
    kills: tuple[tuple[int, float, float], ...], expected: list[tuple[str, str]]
) -> None:
    store = storm_store(kills)
    episode = Episode(SIG, PAUSED_AT, (1, 2, 3), (10, 20))
    assert subjects(inv.storm_overrun(store, [episode], 3)) == expected


def test_storm_overrun_counts_each_pause_from_the_end_of_the_one_before() -> None:
    """A pass ended the first pause at 1500; the next failure paused again at once (the window
    still holds the first victims): one new machine before the second pause, not four."""
    kills = ((10, 0, 900.0), (20, 0, 950.0), (30, 0, 1000.0), (60, 1600.0, 2000.0))
    store = storm_store(kills)
    first = Episode(SIG, PAUSED_AT, (1, 2, 3), (10, 20), "instance 5 passed", 1500.0)
    again = Episode(SIG, 2000.0, (1, 2, 3, 6), (10, 20, 30))
    assert inv.storm_overrun(store, [first, again], 3) == []
    never_ended = Episode(SIG, PAUSED_AT, (1, 2, 3), (10, 20))
    assert inv.storm_overrun(store, [never_ended, again], 3) == []
    early = storm_store(((10, 0, 900.0), (20, 0, 950.0), (30, 0, 1000.0), (40, 0, 990.0)))
    assert subjects(inv.storm_overrun(early, [first, again], 3)) == [("storm_overrun", "pause 1")]


def test_paused_spans() -> None:
    done = Episode(SIG, 10.0, (), (), "x", 20.0)
    still = Episode(SIG, 30.0, (), ())
    assert inv.paused_spans([done, still], 99.0) == [(10.0, 20.0), (30.0, 99.0)]


def test_storm_blame_at_the_end() -> None:
    store = storm_store(((10, 0, 900.0), (20, 0, 950.0)))
    assert inv.storm_blame(store, SIG) == []
    charged = StoreView(
        instances=store.instances, events=store.events, intents=store.intents,
        strike_rows=(StoreStrike(2, 20, "bench_error", "x", 950.0),),
        ban_rows=(StoreBan(1, "benchmark error", "automatic", 900.0),
                  StoreBan(9, "manual", "manual", 1.0)),
    )  # fmt: skip
    assert subjects(inv.storm_blame(charged, SIG)) == [
        ("storm_blame", "machine 2 strike"),
        ("storm_blame", "machine 1 ban"),
    ]


def test_rents_while_paused() -> None:
    store = StoreView(intents=(rent(1, 900.0), rent(2, 1500.0), rent(3, 2100.0), rent(4, 3500.0)))
    spans = [(PAUSED_AT, 2000.0), (3000.0, 4000.0)]
    assert subjects(inv.rents_while_paused(store, spans)) == [
        ("storm_pause", "rent intent 2"),
        ("storm_pause", "rent intent 4"),
    ]


@pytest.mark.parametrize(
    ("status", "bad"),
    [
        ({"updated_at": 1100.0, "workers": 0, "target": 3, "reason_kind": "fleet_failure",
          "reason": f"fleet-wide failure: {SIG} on 3 machines (1, 2, 3); provisioning paused"},
         False),
        ({"updated_at": 1100.0, "workers": 0, "target": 3, "reason_kind": "no_viable_offer",
          "reason": "x"}, True),
        ({"updated_at": 1100.0, "workers": 0, "target": 3, "reason_kind": "fleet_failure",
          "reason": "fleet-wide failure: another"}, True),
        ({"updated_at": 1100.0, "workers": 3, "target": 3, "reason_kind": "at_target",
          "reason": "at target"}, False),  # at target comes first
        ({"updated_at": 900.0, "workers": 0, "target": 3, "reason_kind": "bench_concurrency_cap",
          "reason": "x"}, False),  # written before the pause
        (None, False),
    ],
)  # fmt: skip
def test_pause_status(status: dict[str, object] | None, bad: bool) -> None:
    pause = {"signature": SIG, "since": PAUSED_AT, "text": "t"}
    assert bool(inv.pause_status(status, pause)) is bad
    assert inv.pause_status(status, None) == []  # not paused: nothing to say


# -- bans: the fleet's victims excused only where fleet faults are on ----------------------------


def test_the_fleets_victims_need_no_ban_in_a_storm_only() -> None:
    store = StoreView(
        instances=(dead(10, A1), dead(20, A2), dead(30, label(FA, 3)), dead(70, label(FA, 7))),
        events=(pause_event(instances=(10, 20)), victim_event(30, 1100.0, uncharged=True)),
        fleet_id=FA,
    )
    assert inv.forgiven_by_fleet_failure(store) == {10, 20, 30}
    storm = inv.snapshot_checks([], store, fleet=FLEET, foreign=frozenset(), strikes_to_ban=2,
                                fleet_faults=True)  # fmt: skip
    bans = [k for k in subjects(storm) if k[0] == "ban_missing"]
    assert bans == [("ban_missing", "machine 7")]  # a machine's own fault still bans
    soak = inv.snapshot_checks([], store, fleet=FLEET, foreign=frozenset(), strikes_to_ban=2)
    bans = [k for k in subjects(soak) if k[0] == "ban_missing"]
    assert bans == [("ban_missing", f"machine {m}") for m in (1, 2, 3, 7)]


def test_a_destroy_intents_ban_is_excused_for_the_fleets_victims_only() -> None:
    ban = {"ban_record": {"machine_id": 1}}
    store = StoreView(
        intents=(StoreIntent(1, "destroy", "done", instance_id=10, detail=ban),
                 StoreIntent(2, "destroy", "done", instance_id=11, detail=ban)),
    )  # fmt: skip
    assert subjects(inv.bans_missing(store, 2, frozenset({10}))) == [("ban_missing", "machine 1")]
    only = StoreView(intents=store.intents[:1])
    assert inv.bans_missing(only, 2, frozenset({10})) == []


# -- the observer reads what a database knows of ownership ---------------------------------------


def test_the_observer_reads_fleet_id_pause_and_foreign_instances(tmp_path: Path) -> None:
    from reliability.observe import fleet_id, read_store
    from vastui.domain.worker import ForeignInstance
    from vastui.store import Store

    db = tmp_path / "vastui.db"

    async def fill() -> str:
        store = await Store.open(db)
        try:
            fid = await store.meta.fleet_id()
            seen = [ForeignInstance(7, B1, f"{FLEET}.{FB}", machine_id=70)]
            await store.put_foreign(seen, now=10.0)
            await store.declare_fleet_failure(
                {"signature": SIG, "text": "t", "machines": [1, 2, 3], "instances": [10, 20]},
                forgive_machines=[], forgive_instances=[], since=0.0, now=20.0,
            )  # fmt: skip
            return fid
        finally:
            await store.close()

    fid = asyncio.run(fill())
    view = read_store(db)
    assert view is not None and view.fleet_id == fid == fleet_id(db)
    assert [(f.vast_id, f.owner) for f in view.foreign_rows] == [(7, f"{FLEET}.{FB}")]
    assert view.pause is not None and view.pause["signature"] == SIG
    got = inv.pause_episodes(view)
    assert [(e.signature, e.paused_at, e.instances) for e in got] == [(SIG, 20.0, (10, 20))]
