"""The table panes on RowTable: rows are kept per offers list and sort, a find only filters, the
cursor stays on its row, rows made lazily follow the clock, and the heap is settled when a new
offers list arrives (bench/keys.py measures why)."""

from __future__ import annotations

import gc
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Static

from tests.helpers import settle
from vastsim.console_fixtures import FixedSource, fixed_app
from vastui.console.app import VastuiApp
from vastui.console.heap import GC_THRESHOLDS, settle_heap
from vastui.console.messages import OffersLoaded, SnapshotLoaded
from vastui.console.panes.base import FindInput, column_widths
from vastui.console.panes.offers import _haystack
from vastui.console.rowtable import RowTable


def shown(app: VastuiApp, pane: str) -> list[str]:
    table = app.query_one(f"#{pane}-table", RowTable)
    return [str(table.key_at(i)) for i in range(table.row_count)]


def expected_offers(app: VastuiApp, needle: str = "", column: str = "cpp") -> list[str]:
    """The offers pane's rows, computed the plain way: bad hidden, found, sorted, unknown last."""
    getter = app.pane("offers").SORT_VALUES[column]
    rows = [r for r in app.offers if not r.bad and needle in _haystack(r)]
    known = sorted((r for r in rows if getter(r) is not None), key=getter)
    return [str(r.offer.id) for r in known + [r for r in rows if getter(r) is None]]


async def loaded(pilot: Any) -> None:
    app = pilot.app
    await settle(pilot, app, lambda: app.query_one("#offers-table", RowTable).row_count > 0)


async def test_find_filters_the_sorted_rows_and_keeps_the_cursors_row(tmp_path: Path) -> None:
    app = fixed_app(tmp_path)
    async with app.run_test(size=(200, 50)) as pilot:
        await loaded(pilot)
        assert shown(app, "offers") == expected_offers(app)
        table = app.query_one("#offers-table", RowTable)
        target = next(r for r in app.offers if not r.bad and "rtx" in _haystack(r))
        keep = str(target.offer.id)
        table.move_cursor(row=table.get_row_index(keep))
        await pilot.press("slash", "r", "t", "x")
        await pilot.pause()
        assert shown(app, "offers") == expected_offers(app, "rtx")
        assert app.pane("offers").cursor_key() == keep  # still on its row
        await pilot.press("enter", "s")  # back to the table, sort: the found rows, re-sorted
        await pilot.pause()
        assert app.pane("offers").sort_key == "min"
        assert shown(app, "offers") == expected_offers(app, "rtx", "min")
        await pilot.press("slash", "escape")  # esc in the find input clears it
        await pilot.pause()
        assert shown(app, "offers") == expected_offers(app, "", "min")


async def test_a_sort_shows_the_new_order_from_its_top(tmp_path: Path) -> None:
    """After a sort the cursor is on the first row, not on the row it was on (issue 31 item 5);
    new data still keeps the cursor on its row."""
    app = fixed_app(tmp_path)
    async with app.run_test(size=(200, 50)) as pilot:
        await loaded(pilot)
        table = app.query_one("#offers-table", RowTable)
        table.move_cursor(row=7)
        await pilot.press("s")
        await pilot.pause()
        assert table.cursor_row == 0 and table.scroll_y == 0
        assert app.pane("offers").cursor_key() == expected_offers(app, "", "min")[0]
        table.move_cursor(row=4)
        keep = app.pane("offers").cursor_key()
        app.pane("offers").refill()
        assert app.pane("offers").cursor_key() == keep


async def test_a_find_that_hides_the_cursors_row_goes_to_the_top(tmp_path: Path) -> None:
    app = fixed_app(tmp_path)
    async with app.run_test(size=(200, 50)) as pilot:
        await loaded(pilot)
        table = app.query_one("#offers-table", RowTable)
        table.move_cursor(row=5)
        hidden = app.pane("offers").cursor_key()
        needle = next(
            c for c in "abcdefghijklmnopqrstuvwxyz"
            if expected_offers(app, c) and hidden not in expected_offers(app, c)
        )  # fmt: skip
        await pilot.press("slash", needle)
        await pilot.pause()
        assert table.cursor_row == 0
        assert app.pane("offers").cursor_key() == expected_offers(app, needle)[0]


async def test_a_new_offers_list_is_found_and_sorted_afresh(tmp_path: Path) -> None:
    app = fixed_app(tmp_path)
    async with app.run_test(size=(200, 50)) as pilot:
        await loaded(pilot)
        await pilot.press("slash", "u", "s")
        await pilot.pause()
        before = shown(app, "offers")
        fewer = [r for r in app.offers if r.offer.id % 2 == 0]
        app.post_message(OffersLoaded(fewer))
        await pilot.pause()
        assert shown(app, "offers") == expected_offers(app, "us")
        assert set(shown(app, "offers")) < set(before)


async def test_instance_rows_follow_the_clock_with_the_same_records(tmp_path: Path) -> None:
    app = fixed_app(tmp_path)
    async with app.run_test(size=(200, 50)) as pilot:
        await loaded(pilot)
        await pilot.press("2")
        table = app.query_one("#instances-table", RowTable)
        await settle(pilot, app, lambda: table.row_count > 0)
        uptime = list(dict(table.columns)).index("up")
        first = str(table.get_row_at(0)[uptime])
        source = app.source
        assert isinstance(source, FixedSource)
        source.clock_at += 7200
        app.post_message(SnapshotLoaded(replace(app.snapshot)))  # the very same records
        await pilot.pause()
        assert str(table.get_row_at(0)[uptime]) != first


def test_settle_heap_freezes_what_lives_and_keeps_full_collections_rare() -> None:
    before = gc.get_threshold()
    try:
        settle_heap()
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold() == GC_THRESHOLDS
        settle_heap()  # again: the first freeze is undone before the collection
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


async def test_a_find_narrows_and_widens_like_a_fresh_one(tmp_path: Path) -> None:
    """Typing on narrows the last rows found; a deleted character, another character or the
    bad machines shown start afresh: each step shows what a fresh find would."""
    app = fixed_app(tmp_path)
    async with app.run_test(size=(200, 50)) as pilot:
        await loaded(pilot)
        pane = app.pane("offers")
        find = pane.query_one("#row-filter", FindInput)
        for text in ("r", "rt", "rtx", "rt", "u", "us", ""):
            find.value = text
            assert shown(app, "offers") == expected_offers(app, text), text
        find.value = "a"
        pane.action_toggle_bad()  # the bad machines too
        with_bad = [r for r in app.offers if "a" in _haystack(r)]
        assert sorted(shown(app, "offers")) == sorted(str(r.offer.id) for r in with_bad)
        assert any(r.bad for r in with_bad)
        pane.action_toggle_bad()
        find.value = "ab"
        assert shown(app, "offers") == expected_offers(app, "ab")


async def test_the_find_input_filters_in_its_own_step(tmp_path: Path) -> None:
    """No message in between: the typed character and the rows it leaves share a frame."""
    app = fixed_app(tmp_path)
    async with app.run_test(size=(200, 50)) as pilot:
        await loaded(pilot)
        app.pane("offers").query_one("#row-filter", FindInput).value = "rtx"
        assert shown(app, "offers") == expected_offers(app, "rtx")  # before any await


async def test_scrollbars_follow_the_row_count(tmp_path: Path) -> None:
    app = fixed_app(tmp_path)
    async with app.run_test(size=(200, 50)) as pilot:
        await loaded(pilot)
        table = app.query_one("#offers-table", RowTable)
        assert table.show_vertical_scrollbar
        rows = table.row_count
        find = app.pane("offers").query_one("#row-filter", FindInput)
        needle = next(c for c in "abcdefghijklmnopqrstuvwxyz" if 0 < len(expected_offers(app, c))
                      < table.size.height - 2)  # fmt: skip
        find.value = needle
        await pilot.pause()
        few = len(expected_offers(app, needle))
        assert table.virtual_size.height == few + 1  # the rows and the header
        assert not table.show_vertical_scrollbar  # they fit: the scrollbar goes
        find.value = ""
        await pilot.pause()
        assert table.row_count == rows and table.show_vertical_scrollbar
        assert table.vertical_scrollbar.window_virtual_size == rows + 1


async def test_another_controllers_instances_are_shown_apart_and_never_acted_on(
    tmp_path: Path,
) -> None:
    """Issue 17: instances with vastui's label that this database never intended are listed
    after ours as another controller's; destroy, ignore and logs on one do nothing but say so."""
    from vastui.domain.worker import ForeignInstance

    app = fixed_app(tmp_path)
    source = app.source
    assert isinstance(source, FixedSource)
    theirs = ForeignInstance(
        vast_id=9191, label="vastui-main.0badc0de-0123456789ab", owner="main.0badc0de",
        machine_id=77, gpu_name="RTX 4090", num_gpus=1, dph_total=0.41,
        vast_status="running", first_seen_at=source.now() - 600, last_seen_at=source.now(),
    )  # fmt: skip
    source.fixed_snapshot = replace(source.fixed_snapshot, foreign=[theirs])

    async with app.run_test(size=(200, 50), notifications=True) as pilot:
        await loaded(pilot)
        await pilot.press("2")
        table = app.query_one("#instances-table", RowTable)
        await settle(pilot, app, lambda: "foreign-9191" in shown(app, "instances"))
        assert shown(app, "instances")[-1] == "foreign-9191", "after every one of ours"
        stage = list(dict(table.columns)).index("stage")
        assert "other controller main.0badc0de" in str(table.get_row_at(table.row_count - 1)[stage])
        table.move_cursor(row=table.row_count - 1)
        for key in ("x", "i", "l", "enter"):
            await pilot.press(key)
            await pilot.pause()
        messages = [n.message for n in app._notifications]
        assert sum("another controller's (fleet main.0badc0de)" in m for m in messages) == 4
        assert source.submitted == [] and len(app.screen_stack) == 1, "no dialog, no command"


def test_the_tasks_cell_says_what_became_of_a_destroyed_workers_tasks() -> None:
    """Held while it lives (⤓ while it drains); once destroyed, freed (↩n) or still held in red
    (the release is owed): a destroyed row never reads as holding work it gave back."""
    from vastui.console.panes.instances import _tasks
    from vastui.domain.worker import InstanceRecord

    state = '{"held": 3}'
    cases = [
        (InstanceRecord(1), "-", "dim"),
        (InstanceRecord(1, cluster_state=state), "3", "bold"),
        (InstanceRecord(1, cluster_state=state, drain_started_at=5.0), "3 ⤓", "bold"),
        (InstanceRecord(1, cluster_state=state, state="killed"), "3", "bold red"),
        (InstanceRecord(1, cluster_state='{"held": 0}', state="killed"), "0", "dim"),
        (
            InstanceRecord(
                1, cluster_state=state, state="killed", released_at=9.0, released_tasks=3
            ),
            "↩3",
            "dim",
        ),
        (InstanceRecord(1, state="killed", released_at=9.0, released_tasks=0), "↩0", "dim"),
        # freed at an outbid, alive: what its curio holds now
        (InstanceRecord(1, cluster_state=state, released_at=9.0, released_tasks=2), "3", "bold"),
    ]
    for rec, text, style in cases:
        cell = _tasks(rec)
        assert (cell.plain, str(cell.style)) == (text, style), rec


async def test_the_instances_tab_counts_its_rows_and_the_live_ones(tmp_path: Path) -> None:
    """The tab said 'Instances (3)' over 4 rows: it counts its rows as every table does, and
    says how many of them are live."""
    from textual.widgets import TabbedContent

    app = fixed_app(tmp_path)
    async with app.run_test(size=(200, 50)) as pilot:
        await loaded(pilot)
        live = sum(1 for r in app.snapshot.instances if not r.killed)
        assert 0 < live < len(app.snapshot.instances)  # the fixture has ended ones too
        await pilot.press("2")
        rows = len(shown(app, "instances"))
        assert rows == len(app.snapshot.instances) + len(app.snapshot.foreign)
        tab = app.query_one("#panes", TabbedContent).get_tab("instances")
        assert str(tab.label) == f"2 Instances ({rows}, {live} live)"


@pytest.mark.parametrize(("key", "pane"), [("2", "instances"), ("4", "bad"), ("5", "cluster")])
async def test_every_table_pane_finds_with_the_same_keys(tmp_path: Path, key, pane) -> None:
    """`/` opens the find in Instances, the bad list and the cluster as in Offers: the
    rows whose cells contain the text, in the order shown; its bar counts them; esc shows all."""
    app = fixed_app(tmp_path)
    async with app.run_test(size=(200, 50)) as pilot:
        await loaded(pilot)
        await settle(pilot, app, lambda: bool(app.snapshot.instances and app.snapshot.bad))
        await pilot.press(key)
        target = app.pane(pane)  # type: ignore[call-overload]
        every = shown(app, pane)
        table = app.query_one(f"#{pane}-table", RowTable)
        texts = {
            k: " ".join(c.plain for c in target._cells(table.record_at(i))).lower()
            for i, k in enumerate(every)
        }
        # a word some rows have and some do not
        needle = next(
            w for k in every for w in texts[k].split() if 0 < sum(w in v for v in texts.values())
            < len(every)
        )  # fmt: skip
        await pilot.press("slash", *needle)
        find = target.query_one("#row-filter", FindInput)
        assert find.has_focus and find.value == needle
        assert shown(app, pane) == [k for k in every if needle in texts[k]]
        label = target.query_one("#row-filter-label", Static)
        assert str(label.render()) == f"find ({len(shown(app, pane))} of {len(every)}):"
        await pilot.press("escape")
        assert shown(app, pane) == every and not find.has_focus


@pytest.mark.parametrize(
    ("room", "want"),
    [
        (20, {"a": 10, "b": 6, "c": 8}),  # no room: each its own width (the table cuts)
        (30, {"a": 10, "b": 6, "c": 8}),  # the widths with their padding exactly
        (35, {"a": 10, "b": 6, "c": 13}),  # c first (GROW's order), up to what is spare
        (45, {"a": 10, "b": 10, "c": 18}),  # c to its cap, then b to its
        (100, {"a": 10, "b": 10, "c": 18}),  # never past a cap; a never grows
    ],
)  # fmt: skip
def test_columns_grow_into_the_room_in_order(room: int, want: dict[str, int]) -> None:
    columns = [("a", 10, 0), ("b", 6, 4), ("c", 8, 10)]
    assert column_widths(columns, room, 1, ("c", "b")) == want


def headers(app: VastuiApp, pane: str) -> list[str]:
    table = app.query_one(f"#{pane}-table", RowTable)
    return [str(c.label) for c in table.columns.values()]


async def test_the_cluster_pane_lists_this_fleets_machines_then_the_orphans(tmp_path: Path) -> None:
    """Each worker with a row of its own in curio's cluster (as the engine last read it), then
    the rows of this fleet's node name no record matches; its tab counts them, its header says
    when the cluster was read and its totals; a sort by any column marks it ▲/▼."""
    from textual.widgets import TabbedContent

    from vastui.console.panes.cluster import header

    app = fixed_app(tmp_path)
    async with app.run_test(size=(200, 50)) as pilot:
        await loaded(pilot)
        await settle(pilot, app, lambda: bool(app.snapshot.instances))
        await pilot.press("5")
        await settle(pilot, app, lambda: len(shown(app, "cluster")) == 5)
        assert shown(app, "cluster") == [
            "3000001-4", "3000006-9", "3000007-7", "orphan-3", "orphan-11",
        ]  # fmt: skip
        tab = app.query_one("#panes", TabbedContent).get_tab("cluster")
        assert str(tab.label) == "5 Cluster (5)"
        table = app.query_one("#cluster-table", RowTable)
        first = [c.plain for c in app.pane("cluster")._cells(table.record_at(0))]
        assert first[:8] == [
            "4", "127.0.0.1:12401", "vastui-main-r1", "3000001", "draining", "15s", "yes",
            "PSProve 2, bg:PShareRequest 1",
        ]  # fmt: skip
        assert first[10].startswith("error: failed to compute proof")
        orphan = [c.plain for c in app.pane("cluster")._cells(table.record_at(3))]
        assert orphan[2:5] == ["vastui-main-r12", "-", "orphan"]
        said = header(app.snapshot).plain
        assert "read 5s ago: 3 machines of this fleet, 2 orphans" in said
        assert "cluster: 12 machines; PSProve 3 waiting, 14 claimed" in said
        rendered = str(app.query_one("#cluster-header", Static).render())
        assert rendered.splitlines()[0] == said.splitlines()[0]
        await pilot.press("s")  # the first column: curio's machine id
        await pilot.pause()
        assert headers(app, "cluster")[0] == "Curio id ▲"
        assert shown(app, "cluster") == [
            "orphan-3", "3000001-4", "3000007-7", "3000006-9", "orphan-11",
        ]  # fmt: skip
        await pilot.press("S")
        await pilot.pause()
        assert headers(app, "cluster")[0] == "Curio id ▼"
        assert shown(app, "cluster")[0] == "orphan-11"


T1 = 1_790_000_000.0
OK_CLUSTER = {"state": "ok", "address": "127.0.0.1:5433", "read_at": T1 - 60, "window_s": 3600,
              "machines": 2, "psprove_waiting": 0, "psprove_claimed": 1}  # fmt: skip


@pytest.mark.parametrize(
    ("cluster", "published", "said"),
    [
        (None, False, "curio's cluster: no engine has published a reading yet"),
        (None, True, "curio's cluster is not read ([curio] read_cluster = false, or no [ssh]"),
        ({"state": "off", "address": "127.0.0.1:5433"}, True,
         "curio's cluster is not read: nothing answered at 127.0.0.1:5433 when the engine"),
        ({"state": "ok", "address": "127.0.0.1:5433"}, True,
         "curio's cluster at 127.0.0.1:5433: not read yet"),
        ({"state": "error", "error": "connection refused", "error_since": T1 - 60}, True,
         "curio's cluster cannot be read since 2026-09-21T14:12:20Z: connection refused"),
        ({**OK_CLUSTER, "state": "error", "error": "timed out"}, True,
         "curio's cluster cannot be read: timed out; as last read 60s ago\n0 machines of this "
         "fleet\ncluster: 2 machines; PSProve 0 waiting, 1 claimed"),
        ({**OK_CLUSTER, "orphans": [{"machine_id": 5, "host_and_port": "127.0.0.1:12499"}],
          "orphans_total": 3}, True,
         "curio's cluster at 127.0.0.1:5433, read 60s ago: 0 machines of this fleet, 3 orphans "
         "(the first 1 listed)\ncluster: 2 machines"),
    ],
)  # fmt: skip
def test_the_cluster_header_says_whether_and_how_the_cluster_is_read(
    cluster: dict[str, Any] | None, published: bool, said: str
) -> None:
    from vastui.console.panes.cluster import header
    from vastui.console.snapshot import Snapshot
    from vastui.domain.engine_state import EngineStatus

    status = EngineStatus(
        target=1, workers=0, by_stage={}, reason_kind=None, reason=None, best=None,
        dry_run=False, updated_at=T1, cluster=cluster,
    )  # fmt: skip
    snap = Snapshot(taken_at=T1, engine_status=status if published else None)
    assert header(snap).plain.startswith(said)


def test_curios_words_in_the_cluster_pane_are_plain_text() -> None:
    """A node name, a task name and curio's error come from curio's database: shown as they
    are, never as markup, without control characters."""
    import json

    from vastui.console.panes.cluster import row_cells
    from vastui.console.snapshot import Snapshot
    from vastui.domain.engine_state import EngineStatus
    from vastui.domain.worker import InstanceRecord

    rec = InstanceRecord(
        vast_id=41, label="vastui-main-00000000002a", state="proving", runner_id=4,
        created_at=T1 - 600, proving_at=T1 - 300,
        cluster_state=json.dumps({
            "machine_id": 8, "host_and_port": "127.0.0.1:12404", "last_contact": T1 - 30,
            "cordoned": False, "held": 1, "held_by_name": {"[b]PSProve\x1b[31m": 1},
            "done": 1, "failed": 1, "last_error": "[red]boom[/red] \x1b[2J\x07 cleared",
        }),
    )  # fmt: skip
    cluster = {**OK_CLUSTER, "read_at": T1 - 5, "orphans": [
        {"machine_id": 6, "host_and_port": "127.0.0.1:12409", "name": "[i]vastui-main-r9\x1b]8;;"},
    ], "orphans_total": 1}  # fmt: skip
    status = EngineStatus(
        target=1, workers=1, by_stage={}, reason_kind=None, reason=None, best=None,
        dry_run=False, updated_at=T1, cluster=cluster,
    )  # fmt: skip
    snap = Snapshot(instances=[rec], taken_at=T1, engine_status=status)
    mine, orphan = (row_cells(r) for r in snap.cluster["machines"])
    cells = [*mine, *orphan]
    assert not any(any(ord(ch) < 32 or ch == "\x7f" for ch in c.plain) for c in cells)
    assert "[red]boom[/red]" in mine[10].plain and not mine[10].spans
    assert mine[7].plain.startswith("[b]PSProve") and orphan[2].plain.startswith("[i]vastui")
