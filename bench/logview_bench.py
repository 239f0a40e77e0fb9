"""Throughput of `LogView.append` in a headless app: lines/second, following and paused.

    .venv/bin/python bench/logview_bench.py [--lines 200000] [--batch 1000]

Each batch is appended and then the app is allowed to process the refresh and render
(`pilot.pause()`), as the console does once per coalesced batch; with small batches the
pilot's own per-pause wait dominates, so also compare `--batch 10000`. The frame line is the
cost of rendering a full viewport through `render_line`. Numbers are printed, not asserted:
they depend on the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import time

from textual.app import App, ComposeResult

from vastui.console.logview import LogView

SOURCES = ("cuzk-daemon", "benchmark", "paramfetch", "curio", "engine")


class BenchApp(App[None]):
    def compose(self) -> ComposeResult:
        yield LogView(id="log")


async def run(total: int, batch: int, *, paused: bool, search: str) -> float:
    app = BenchApp()
    async with app.run_test(size=(160, 50)) as pilot:
        view = app.query_one(LogView)
        view.focus()
        if search:
            view.search(search)
        if paused:
            view.append("engine", ["start"] * 100)
            await pilot.press("pageup")
        started = time.perf_counter()
        for n in range(total // batch):
            source = SOURCES[n % len(SOURCES)]
            view.append(
                source,
                [
                    f"2026-01-01T00:00:00Z INFO proof {n}:{i} took 41.2s gpu0 sector 123"
                    for i in range(batch)
                ],
            )
            await pilot.pause()
        elapsed = time.perf_counter() - started
        assert view.buffered <= view.max_lines
    return total / elapsed


async def frame_cost(frames: int = 200) -> tuple[float, float]:
    """Milliseconds to render one full 160x50 viewport: cold (cache cleared) and warm."""
    app = BenchApp()
    async with app.run_test(size=(160, 50)) as pilot:
        view = app.query_one(LogView)
        for source in SOURCES:
            view.append(source, [f"{source} ERROR gpu0 line {i} " * 3 for i in range(4000)])
        view.search("gpu0")
        await pilot.pause()
        lines = view.viewport
        height = lines.scrollable_content_region.height
        cold = warm = 0.0
        for _ in range(frames):
            view.viewport.invalidate()
            started = time.perf_counter()
            for y in range(height):
                lines.render_line(y)
            cold += time.perf_counter() - started
            started = time.perf_counter()
            for y in range(height):
                lines.render_line(y)
            warm += time.perf_counter() - started
    return cold / frames * 1000, warm / frames * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=1000)
    args = parser.parse_args()
    for label, paused, search in (
        ("following", False, ""),
        ("paused", True, ""),
        ("following + search", False, "gpu0"),
    ):
        rate = asyncio.run(run(args.lines, args.batch, paused=paused, search=search))
        print(f"{label:>20}: {rate:>10,.0f} lines/s  (batches of {args.batch:,})")
    cold, warm = asyncio.run(frame_cost())
    print(f"{'frame render':>20}: {cold:.2f} ms cold, {warm:.2f} ms cached (160x50, search on)")


if __name__ == "__main__":
    main()
