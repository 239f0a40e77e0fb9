"""How the console copes with 10,000 offers and a fast log stream.

    .venv/bin/python bench/console_bench.py

Prints: time to fill the offers table with N offers; key-press round-trip latency (pane
switches) while the log view receives L lines per second. Numbers, not assertions: the tests
stay free of wall-clock checks.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TEXTUAL_ANIMATIONS", "none")  # measure the app, not tab animations

from vastsim import ManualClock, SimCloud
from vastsim.console_fixtures import FixedSource, fixed_data
from vastui.backend import Options
from vastui.config import Config
from vastui.console.app import VastuiApp
from vastui.console.logview import LogView
from vastui.console.rowtable import RowTable
from vastui.engine.ranking import rank_offers
from vastui.vast.models import Offer


async def main(n_offers: int = 10_000, lines_per_tick: int = 500, tick: float = 0.05) -> None:
    snap, _ = fixed_data()
    cloud = SimCloud(seed=1, clock=ManualClock(), hosts=1800)
    offers = [Offer.from_api(o) for o in cloud.offers.values()][:n_offers]
    ranked = rank_offers(offers, [], set(), 0.008)
    with tempfile.TemporaryDirectory() as tmp:
        opts = Options(config=Config(), db=Path(tmp) / "b.db", demo=True)
        app = VastuiApp(opts, FixedSource(opts, snap, ranked))
        async with app.run_test(size=(200, 50)) as pilot:
            t0 = time.perf_counter()
            table = app.query_one("#offers-table", RowTable)
            while table.row_count < len(ranked):
                await pilot.pause()
            fill = time.perf_counter() - t0
            view = app.query_one(LogView)
            stop = asyncio.Event()
            sent = 0

            async def flood() -> None:
                nonlocal sent
                n = 0
                while not stop.is_set():
                    batch = [f"2026-03-13T17:19:{n % 60:02d}Z INFO cuzk_core::engine: line {n + i}"
                             for i in range(lines_per_tick)]  # fmt: skip
                    view.append("cuzk", batch)
                    n += lines_per_tick
                    sent += lines_per_tick
                    await asyncio.sleep(tick)

            flooder = asyncio.create_task(flood())
            await pilot.press("3")
            latencies = []
            start = time.perf_counter()
            for i in range(20):
                t1 = time.perf_counter()
                await pilot.press("1" if i % 2 else os.environ.get("PANE", "3"))
                await pilot.pause()
                latencies.append(time.perf_counter() - t1)
            elapsed = time.perf_counter() - start
            stop.set()
            await flooder
    print(f"offers table: {len(ranked)} rows filled in {fill:.2f}s")
    print(f"log stream: {sent / elapsed:,.0f} lines/s appended during the key test "
          f"(buffer bound {view.max_lines:,})")  # fmt: skip
    print(
        f"key round-trip: median {statistics.median(latencies) * 1000:.0f} ms, "
        f"max {max(latencies) * 1000:.0f} ms over {len(latencies)} pane switches"
    )


if __name__ == "__main__":
    asyncio.run(main())
