"""The instance detail view: the record is drawn at once, cuzk's status fills its reserved
place without moving anything drawn (an answer already there is in the first frame), and no
value, however missing, shows as Python's None."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from rich.text import Text
from textual.geometry import Region
from textual.widgets import Static

from tests.helpers import settle
from vastsim.console_fixtures import CUZK_STATUS, T0, FixedSource, fixed_app
from vastui.console import detail
from vastui.console.detail import DetailScreen, render_cuzk
from vastui.console.rowtable import RowTable
from vastui.domain.worker import InstanceRecord


async def _on_the_proving_worker(pilot: Any) -> None:
    app = pilot.app
    await settle(pilot, app, lambda: app.query_one("#offers-table", RowTable).row_count > 0)
    await pilot.press("2")
    table = app.query_one("#instances-table", RowTable)
    await settle(pilot, app, lambda: table.row_count > 0)
    table.move_cursor(row=table.get_row_index("3000001"))  # proving: cuzk is read


def _regions(screen: DetailScreen) -> list[Region]:
    return [w.region for w in screen.query_one("#detail").children]


def _cuzk(screen: DetailScreen) -> str:
    return str(screen.query_one("#detail-cuzk", Static).render())


async def test_the_record_is_drawn_first_and_cuzks_answer_moves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(detail, "CUZK_EVERY", 3600.0)  # the first read only
    app = fixed_app(tmp_path)
    source = app.source
    assert isinstance(source, FixedSource)
    answer = asyncio.Event()
    reads = 0

    async def slow(rec: InstanceRecord) -> dict[str, Any]:
        nonlocal reads
        reads += 1
        await answer.wait()
        return CUZK_STATUS

    source.cuzk_status = slow  # type: ignore[method-assign]
    async with app.run_test(size=(160, 50)) as pilot:
        await _on_the_proving_worker(pilot)
        await pilot.press("enter")
        await settle(pilot, app, lambda: isinstance(app.screen, DetailScreen))
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, DetailScreen)
        assert screen.shown is not None and "proving / proving" in screen.shown[0]
        assert "reading cuzk's status" in _cuzk(screen)
        before = _regions(screen)
        answer.set()
        await settle(pilot, app, lambda: screen.cuzk_reads == 1)
        await pilot.pause()
        assert "synthesis 10/25 active" in _cuzk(screen)
        assert _regions(screen) == before  # its place was kept: nothing moved, nor grew
        assert reads == 1


async def test_an_answer_already_there_is_in_the_first_frame(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fixture's source answers at once: the view is composed with the status in it, and
    never fills it in afterwards."""
    monkeypatch.setattr(detail, "CUZK_EVERY", 3600.0)
    filled: list[str] = []
    show = DetailScreen._show_cuzk

    def shown(self: DetailScreen, text: Text) -> None:
        filled.append(text.plain)
        show(self, text)

    monkeypatch.setattr(DetailScreen, "_show_cuzk", shown)
    app = fixed_app(tmp_path)
    async with app.run_test(size=(160, 50)) as pilot:
        await _on_the_proving_worker(pilot)
        await pilot.press("enter")
        await settle(pilot, app, lambda: isinstance(app.screen, DetailScreen))
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, DetailScreen)
        assert "synthesis 10/25 active" in _cuzk(screen) and screen.cuzk_reads == 1
        assert filled == []


NULLS = InstanceRecord(vast_id=7)  # every optional field missing


@pytest.mark.parametrize(
    "rec",
    [
        NULLS,
        InstanceRecord(vast_id=7, state="proving", runner_id=1, tunnel_down_since=T0,
                       curio_info=json.dumps({"machine_id": None, "host_and_port": None,
                                              "name": None, "max_pending": None}),
                       cluster_state=json.dumps(
                           {"machine_id": None, "host_and_port": None, "last_contact": None,
                            "cordoned": None, "held": None, "held_by_name": {None: None},
                            "done_total": None, "failed_total": None, "last_error": None,
                            "last_error_at": None, "foreign": None}),
                       drain_started_at=T0, drain_deadline=None, prod_completed=3),
        InstanceRecord(vast_id=7, state="proving", cluster_state=json.dumps(
            {"machine_id": 4, "host_and_port": None, "held_by_name": None, "foreign": "x"})),
        InstanceRecord(vast_id=7, state="killed", bench_result=json.dumps(
            {"outcome": None, "stage": None, "proofs_completed": None, "proofs_failed": None,
             "exit_code": None, "rate_per_hour": None})),
        InstanceRecord(vast_id=7, state="killed", bench_result="[1, 2]", error_lines=("x",)),
    ],
    ids=["nothing", "proving", "proving-odd", "killed-nulls", "killed-damaged"],
)  # fmt: skip
def test_the_record_never_shows_none(rec: InstanceRecord) -> None:
    screen = DetailScreen(
        rec, current_image="img", now=lambda: T0, spend=lambda _r: None,
        ssh_command=lambda _r: None,
    )  # fmt: skip
    shown = _text(detail._kv(screen._meta()), screen._diagnosis())
    assert "None" not in shown and "state / stage" in shown


STATUSES: list[Any] = [
    {
        "memory": {"total_bytes": None, "used_bytes": None},
        "synthesis": {"active": None, "max_concurrent": None},
        "counters": {"total_completed": None, "total_failed": None, "queue_depth": None},
        "pipelines": [{"job_id": None, "partitions_done": None, "total_partitions": None,
                       "partitions": [{"state": None}, None]}, None],
        "gpu_workers": [
            {"worker_id": 1, "gpu_ordinal": 0, "state": "idle", "current_job": None},
            {"worker_id": None, "gpu_ordinal": None, "state": None, "current_job": None},
            None,
        ],
    },
    {"memory": [], "synthesis": "x", "counters": None, "pipelines": {}, "gpu_workers": "y"},
    {},
    None,
    [CUZK_STATUS],
]  # fmt: skip


@pytest.mark.parametrize("status", STATUSES)
def test_cuzks_status_never_shows_none(status: Any) -> None:
    shown = _text(render_cuzk(status))
    assert "None" not in shown and "synthesis" in shown
    assert "gpu0 worker 1: idle\n" in _text(render_cuzk(STATUSES[0]))


def _text(*renderables: Any) -> str:
    console = Console(width=200, record=True, file=io.StringIO())
    for renderable in renderables:
        console.print(renderable)
    return console.export_text()
