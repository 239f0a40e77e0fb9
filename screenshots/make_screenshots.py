"""Regenerate screenshots/*.svg from the app itself, on the fixed demo data.

.venv/bin/python screenshots/make_screenshots.py
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from vastsim.console_fixtures import LOGS, fixed_app
from vastui.console.logview import LogView
from vastui.console.rowtable import RowTable

OUT = Path(__file__).resolve().parent


async def shoot(name: str, keys: list[str], size: tuple[int, int], row: str | None = None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        app = fixed_app(Path(tmp), LOGS)
        async with app.run_test(size=size) as pilot:
            for _ in range(50):
                await pilot.pause()
                if app.query_one("#offers-table", RowTable).row_count and app.snapshot.instances:
                    break
            for key in keys:
                if key == "@row" and row is not None:
                    table = app.query_one("#instances-table", RowTable)
                    table.move_cursor(row=table.get_row_index(row))
                    continue
                await pilot.press(key)
                await pilot.pause()
            for _ in range(20):
                await pilot.pause()
                if name != "logs" or app.query_one(LogView).line_count >= len(LOGS):
                    break
            svg = app.export_screenshot(title=f"vastui — {name}")
    (OUT / f"{name}.svg").write_text(svg)
    print(f"wrote screenshots/{name}.svg")


async def main() -> None:
    await shoot("offers", [], (160, 40))
    await shoot("offers-80x24", [], (80, 24))
    await shoot("instances", ["2"], (160, 30))
    await shoot("detail", ["2", "@row", "enter"], (160, 45), row="3000005")
    await shoot("detail-proving", ["2", "@row", "enter"], (160, 45), row="3000001")
    await shoot("logs", ["2", "@row", "l"], (160, 30), row="3000001")
    await shoot("bad-list", ["4"], (160, 24))
    await shoot("cluster", ["5"], (160, 24))
    await shoot("deploy-confirm", ["d"], (120, 30))
    await shoot("help", ["question_mark"], (120, 30))


if __name__ == "__main__":
    asyncio.run(main())
