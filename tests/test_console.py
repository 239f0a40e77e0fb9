"""The first console: loads the simulated cloud's offers and the store, hides bad machines."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import DataTable, Static

from vastui.backend import Options
from vastui.config import Config
from vastui.console.app import VastuiApp
from vastui.store import Store


async def test_console_loads_offers_and_hides_bad_machines(tmp_path: Path):
    db = tmp_path / "s.db"
    app = VastuiApp(Options(config=Config(), db=db, demo=True))
    async with app.run_test(size=(100, 30)) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause()
        table = app.query_one("#offers-table", DataTable)
        assert table.row_count > 0
        first = table.get_row_at(0)
        summary = app.query_one("#summary", Static)
        assert summary.region.y == 1, "the summary strip must stay visible"
        assert f"{table.row_count} offers" in str(summary.render())

    store = await Store.open(db)
    # Ban the machine behind the cheapest offer, then reload: all its offers disappear.
    offers = await _offers(app)
    offer = min(offers, key=lambda o: o.dph_total)
    on_machine = sum(o.machine_id == offer.machine_id for o in offers)
    await store.add_bad(offer.machine_id, "test", now=1.0)
    await store.close()
    app2 = VastuiApp(Options(config=Config(), db=db, demo=True))
    async with app2.run_test(size=(100, 30)) as pilot:
        await app2.workers.wait_for_complete()
        await pilot.pause()
        table = app2.query_one("#offers-table", DataTable)
        machines = {str(table.get_row_at(i)[10]) for i in range(table.row_count)}
        assert str(offer.machine_id) not in machines
        assert table.row_count == len(offers) - on_machine
        assert f"{on_machine} on bad machines hidden" in str(
            app2.query_one("#summary", Static).render()
        )
        await pilot.press("3")
        bad = app2.query_one("#bad-table", DataTable)
        assert bad.row_count == 1 and str(bad.get_row_at(0)[0]) == str(offer.machine_id)
    assert first


async def _offers(app: VastuiApp):
    from vastui.backend import client_for_cloud, make_demo_cloud

    cloud = make_demo_cloud(app.opts.seed, app.opts.speed)
    async with client_for_cloud(cloud, pacing={}) as client:
        return (await client.search_offers(app.opts.config.offers.filter)).offers
