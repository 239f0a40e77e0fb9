"""The console: actions through a real engine (Pilot), and snapshots of every pane on fixed data."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from textual.widgets import Static, TabbedContent, Tabs
from textual.widgets._tabs import Underline

from tests.helpers import settle
from vastsim import ManualClock, SimCloud
from vastsim.console_fixtures import LOGS, fixed_app
from vastsim.demo import client_for_cloud
from vastui.backend import Options
from vastui.config import Config
from vastui.console.app import VastuiApp
from vastui.console.dialogs import ConfirmScreen
from vastui.console.logview import LogView
from vastui.console.logviewport import LogViewport
from vastui.console.rowtable import RowTable
from vastui.console.sources import OwnEngineSource, ReadOnlySource
from vastui.console.sources.own import RuntimeFactory
from vastui.engine.engine import Engine, EngineSettings
from vastui.engine.runtime import EngineRuntime, RunOptions
from vastui.store import Store
from vastui.vast.client import RetryPolicy

PUBKEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIConsoleTestKeyMaterial00000000000000 t"


async def _no_sleep(_s: float) -> None:
    return None


@dataclass
class Sim:
    """The console's own engine (OwnEngineSource) on a simulated cloud with a manual clock."""

    source: OwnEngineSource
    cloud: SimCloud

    @property
    def store(self) -> Store:
        assert self.source.store is not None, "the source has not started"
        return self.source.store


def sim_runtime(cloud: SimCloud) -> RuntimeFactory:
    """A real engine and store on `cloud`, no SSH and no lease: what `engine_runtime` gives
    the console, without the demo's worker hosts."""

    @contextlib.asynccontextmanager
    async def runtime(opts: Options, _run: RunOptions) -> AsyncIterator[EngineRuntime]:
        store = await Store.open(opts.db_path)
        client = client_for_cloud(
            cloud, pacing={}, sleep=_no_sleep, retry=RetryPolicy(create_lookups=1)
        )
        engine = Engine(
            opts.config, store, client, ssh=None, public_key=PUBKEY, clock=cloud.clock.now,
            settings=EngineSettings(poll_interval=0.05),
        )  # fmt: skip
        try:
            yield EngineRuntime(engine, store, demo=None)
        finally:
            await engine.close()
            await client.aclose()
            await store.close()

    return runtime


def make_app(tmp_path: Path) -> tuple[VastuiApp, Sim]:
    config = Config()
    opts = Options(config=config, db=tmp_path / "c.db", demo=True)
    cloud = SimCloud(seed=5, clock=ManualClock(), hosts=120)
    source = OwnEngineSource(opts, runtime=sim_runtime(cloud))
    return VastuiApp(opts, source), Sim(source, cloud)


async def test_deploy_from_offers_pane_rents_and_records(tmp_path: Path):
    app, sim = make_app(tmp_path)
    async with app.run_test(size=(160, 40)) as pilot:
        await settle(pilot, app, lambda: app.query_one("#offers-table", RowTable).row_count > 0)
        offer_id = int(app.pane("offers").selected_offer().offer.id)
        await pilot.press("d")
        await pilot.pause()
        assert "Rent offer" in str(app.screen.query_one(".dialog-title").render())
        await pilot.press("y")

        async def rented() -> bool:
            return bool(await sim.store.instances.all())

        await settle(pilot, app, rented)
        [rec] = await sim.store.instances.all()
        assert rec.offer_id == offer_id and rec.label.startswith("vastui-main.")
        assert [e.kind for e in await sim.store.events.all(kind="rent")] == ["rent"]
        assert list(sim.cloud.instances) == [rec.vast_id]


async def test_deploy_cancel_does_nothing(tmp_path: Path):
    app, sim = make_app(tmp_path)
    async with app.run_test(size=(160, 40)) as pilot:
        await settle(pilot, app, lambda: app.query_one("#offers-table", RowTable).row_count > 0)
        await pilot.press("d", "n")
        await pilot.pause()
        assert await sim.store.instances.all() == []
        assert sim.cloud.instances == {}


async def test_ignore_then_unignore_machine(tmp_path: Path):
    app, sim = make_app(tmp_path)
    async with app.run_test(size=(160, 40)) as pilot:
        await settle(pilot, app, lambda: app.query_one("#offers-table", RowTable).row_count > 0)
        machine = app.pane("offers").selected_offer().offer.machine_id
        await pilot.press("i")
        await pilot.pause()
        app.screen.query_one("Input").value = "GPU errors under load"
        await pilot.press("enter")

        async def banned() -> bool:
            return machine in await sim.store.badlist.machine_ids()

        await settle(pilot, app, banned)
        [entry] = await sim.store.badlist.all()
        assert entry.reason == "GPU errors under load" and entry.source == "manual"
        await pilot.press("4")

        async def listed() -> bool:
            return app.query_one("#bad-table", RowTable).row_count == 1

        await settle(pilot, app, listed)
        # the same keys as the ignore's prompt: escape cancels, enter confirms
        await pilot.press("u")
        await pilot.pause()
        assert "Unignore machine" in str(app.screen.query_one(".dialog-title").render())
        await pilot.press("escape")
        await pilot.pause()
        assert await sim.store.badlist.machine_ids() == {machine}
        await pilot.press("u", "enter")

        async def unbanned() -> bool:
            return await sim.store.badlist.machine_ids() == set()

        await settle(pilot, app, unbanned)
        kinds = [e.kind for e in await sim.store.events.all()]
        assert kinds == ["ban", "unban"]


async def test_destroy_from_instances_pane(tmp_path: Path):
    app, sim = make_app(tmp_path)
    async with app.run_test(size=(160, 40)) as pilot:
        await settle(pilot, app, lambda: app.query_one("#offers-table", RowTable).row_count > 0)
        await pilot.press("d", "y")

        async def rented() -> bool:
            return app.query_one("#instances-table", RowTable).row_count == 1

        await settle(pilot, app, rented)
        [rec] = await sim.store.instances.all()
        await pilot.press("2")
        # the pane's rows come with its next refill: x acts on the selected row once it is there
        await settle(pilot, app, lambda: app.pane("instances").selected_instance() is not None)
        await pilot.press("x")
        await settle(pilot, app, lambda: isinstance(app.screen, ConfirmScreen))
        assert "Destroy instance" in str(app.screen.query_one(".dialog-title").render())
        await pilot.press("y")

        async def destroyed() -> bool:
            got = await sim.store.instances.get(rec.vast_id)
            return got is not None and got.killed

        await settle(pilot, app, destroyed)
        rec = await sim.store.instances.get(rec.vast_id)
        assert rec.kill_kind == "manual"
        [event] = await sim.store.events.all(kind="destroy")
        assert event.instance_id == rec.vast_id
        assert sim.cloud.instances == {}


async def test_read_only_disables_actions(tmp_path: Path):
    opts = Options(config=Config(), db=tmp_path / "r.db", demo=True)
    source = ReadOnlySource(opts)
    app = VastuiApp(opts, source, read_only=True)
    async with app.run_test(size=(160, 40)) as pilot:
        await settle(pilot, app, lambda: app.query_one("#offers-table", RowTable).row_count > 0)
        await pilot.press("d", "i")
        await pilot.pause()
        assert len(app.screen_stack) == 1, "no dialog opens in read-only mode"
        assert "READ-ONLY" in str(app.query_one("#summary", Static).render())
        with pytest.raises(PermissionError):
            await source.submit("ignore", machine_id=1, reason="x")


async def test_bad_filter_is_shown_inline_not_applied(tmp_path: Path):
    app, _sim = make_app(tmp_path)
    async with app.run_test(size=(160, 40)) as pilot:
        await settle(pilot, app, lambda: app.query_one("#offers-table", RowTable).row_count > 0)
        await pilot.press("e")
        await pilot.pause()
        app.screen.query_one("Input").value = "gpu_ram>>12"
        await pilot.press("enter")
        await pilot.pause()
        error = str(app.screen.query_one("#prompt-error", Static).render())
        assert "gpu_ram>>12" in error
        await pilot.press("escape")
        assert app.opts.config.offers.filter == Config().offers.filter


# -- snapshots on fixed data ---------------------------------------------------------------


async def _wait_loaded(pilot) -> None:
    """Until the fixed data is shown and the tab bar has settled: each tab's label says its
    count, and the underline sits under the active tab as that label lays it out (a label set
    after the tabs were laid out moves the tab bar; the underline follows a refresh later: a
    snapshot taken between the two caught it half-way, under load)."""
    app = pilot.app
    for _ in range(50):
        await pilot.pause()
        if (
            app.query_one("#offers-table", RowTable).row_count
            and app.snapshot.instances
            and _titles_shown(app)
            and _underline_settled(app)
        ):
            return
    raise AssertionError("fixed data never loaded")


def _scrollbar_follows(view: LogViewport) -> bool:
    """The horizontal scrollbar is sized for the lines' width as last laid out."""
    bar = view.horizontal_scrollbar
    return bar.window_virtual_size == view.virtual_size.width


def _titles_shown(app) -> bool:
    tabs = app.query_one("#panes", TabbedContent)
    return all(
        str(tabs.get_tab(app.pane(name).PANE).label) == app.pane(name).title()
        for name in ("offers", "instances", "bad", "cluster")
    )


def _underline_settled(app) -> bool:
    for tabs in app.query(Tabs):
        active = tabs.active_tab
        if active is None:
            continue
        start, end = active.virtual_region.shrink(active.styles.gutter).column_span
        underline = tabs.query_one(Underline)
        if (underline.highlight_start, underline.highlight_end) != (start, end):
            return False
    return True


SIZES = [(80, 24), (200, 50)]  # the smallest terminal we support, and a roomy one


@pytest.mark.parametrize("size", SIZES)
def test_snapshot_offers(snap_compare, tmp_path: Path, size):
    assert snap_compare(fixed_app(tmp_path), terminal_size=size, run_before=_wait_loaded)


@pytest.mark.parametrize("size", SIZES)
def test_snapshot_instances(snap_compare, tmp_path: Path, size):
    async def before(pilot) -> None:
        await _wait_loaded(pilot)
        await pilot.press("2")

    assert snap_compare(fixed_app(tmp_path), terminal_size=size, run_before=before)


@pytest.mark.parametrize("size", SIZES)
def test_snapshot_detail_of_a_failed_instance(snap_compare, tmp_path: Path, size):
    async def before(pilot) -> None:
        await _wait_loaded(pilot)
        await pilot.press("2")
        table = pilot.app.query_one("#instances-table", RowTable)
        table.move_cursor(row=table.get_row_index("3000005"))
        await pilot.press("enter")

    assert snap_compare(fixed_app(tmp_path), terminal_size=size, run_before=before)


def test_snapshot_detail_of_a_worker_in_curios_cluster(snap_compare, tmp_path: Path):
    """Its runner identity, the curio machine the cluster knows it as, the MaxPending it runs
    with, and the engine's last reading of the cluster: cordoned (draining), the tasks it holds,
    curio's count of its proofs beside cuzk's, curio's last error."""

    async def before(pilot) -> None:
        await _wait_loaded(pilot)
        await pilot.press("2")
        table = pilot.app.query_one("#instances-table", RowTable)
        table.move_cursor(row=table.get_row_index("3000001"))
        await pilot.press("enter")

    assert snap_compare(fixed_app(tmp_path), terminal_size=(160, 50), run_before=before)


async def test_the_detail_says_the_tunnel_is_down_and_whose_fault_it_is(tmp_path: Path):
    app = fixed_app(tmp_path)
    async with app.run_test(size=(160, 50)) as pilot:
        await _wait_loaded(pilot)
        await pilot.press("2")
        table = pilot.app.query_one("#instances-table", RowTable)
        table.move_cursor(row=table.get_row_index("3000006"))
        await pilot.press("enter")
        await pilot.pause()
        screen = pilot.app.screen
        meta = "\n".join(
            f"{k}: {getattr(v, 'plain', v)}"
            for k, v in screen._meta()  # type: ignore[attr-defined]
        )
    assert "curio identity" in meta and "runner 6: 127.0.0.1:12406" in meta
    assert "MaxPending" in meta and "6 (sized to curio's ProveTimeout)" in meta
    assert "DOWN 2026" in meta and "lotus api 127.0.0.1:1234: curl: (7)" in meta
    assert "(the controller's; not the machine's)" in meta
    assert "cluster (sim)" not in meta, "no cluster row outside the demo's engine"


@pytest.mark.parametrize("size", SIZES)
def test_snapshot_logs(snap_compare, tmp_path: Path, size):
    async def before(pilot) -> None:
        await _wait_loaded(pilot)
        await pilot.press("2")
        table = pilot.app.query_one("#instances-table", RowTable)
        table.move_cursor(row=table.get_row_index("3000001"))
        await pilot.press("l")
        # every line in, whatever the load (a bounded loop of pauses let a loaded run take its
        # snapshot with the longest line still out, and the log's scrollbar sized without it),
        # and the scrollbar laid out for them: the count moves at the append, the geometry a
        # frame later, the scrollbar at the layout after (a loaded run caught it a cell short)
        await settle(
            pilot, pilot.app,
            lambda: pilot.app.query_one(LogView).line_count >= len(LOGS)
            and _scrollbar_follows(pilot.app.query_one(LogViewport)),
        )  # fmt: skip

    assert snap_compare(fixed_app(tmp_path, LOGS), terminal_size=size, run_before=before)


@pytest.mark.parametrize("size", SIZES)
def test_snapshot_bad_list(snap_compare, tmp_path: Path, size):
    async def before(pilot) -> None:
        await _wait_loaded(pilot)
        await pilot.press("4")

    assert snap_compare(fixed_app(tmp_path), terminal_size=size, run_before=before)


@pytest.mark.parametrize("size", SIZES)
def test_snapshot_cluster(snap_compare, tmp_path: Path, size):
    """This fleet's curio machines as the engine last read them (a draining worker's tasks by
    name and curio's last error, one whose tunnel is down, one outbid), the orphans, and the
    cluster's totals above them."""

    async def before(pilot) -> None:
        await _wait_loaded(pilot)
        await pilot.press("5")

    assert snap_compare(fixed_app(tmp_path), terminal_size=size, run_before=before)


@pytest.mark.parametrize(("key", "text"), [("1", "4090"), ("2", "proving"), ("4", "manual")])
def test_snapshot_find(snap_compare, tmp_path: Path, key: str, text: str):
    """Every table pane's find looks the same: its bar under the rows it kept, their count."""

    async def before(pilot) -> None:
        await _wait_loaded(pilot)
        await pilot.press(key, "slash", *text)

    assert snap_compare(fixed_app(tmp_path), terminal_size=(200, 50), run_before=before)


def test_snapshot_deploy_confirm(snap_compare, tmp_path: Path):
    async def before(pilot) -> None:
        await _wait_loaded(pilot)
        await pilot.press("d")

    assert snap_compare(fixed_app(tmp_path), terminal_size=(120, 30), run_before=before)


def test_snapshot_ignore_prompt(snap_compare, tmp_path: Path):
    async def before(pilot) -> None:
        await _wait_loaded(pilot)
        await pilot.press("i")

    assert snap_compare(fixed_app(tmp_path), terminal_size=(120, 30), run_before=before)


@pytest.mark.parametrize("size", SIZES)
def test_snapshot_help(snap_compare, tmp_path: Path, size):
    async def before(pilot) -> None:
        await _wait_loaded(pilot)
        await pilot.press("2", "question_mark")

    assert snap_compare(fixed_app(tmp_path), terminal_size=size, run_before=before)


async def test_untrusted_text_is_never_markup_or_escapes(tmp_path: Path):
    app = fixed_app(tmp_path)
    async with app.run_test(size=(160, 45)) as pilot:
        await _wait_loaded(pilot)
        await pilot.press("2")
        table = app.query_one("#instances-table", RowTable)
        table.move_cursor(row=table.get_row_index("3000005"))
        await pilot.press("enter")
        await pilot.pause()
        diagnosis = str(app.screen.query_one("#detail-diagnosis", Static).render())
        assert "[red]" in diagnosis and "\x1b" not in diagnosis
