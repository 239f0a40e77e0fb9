"""Log streaming: lines per second from a simulated instance over SSH into the console's log
pane, as a ratio to a bare asyncssh reader of the same stream.

    .venv/bin/python -m bench.logstream [--quick] [--lines N] [--profile]

One simulated instance (a `vastsim.cheap` worker in a cloud process of its own) answers
`workerctl logs cuzk --tail 500 --follow` with N ANSI-coloured cuzk lines as fast as SSH takes
them, then ends. Both readers run in this process, in turns, on the same command:

- bare: `asyncssh.connect` + `create_process`, stdout read in 64 KiB chunks, newlines counted;
- console: the console's own path: `SshPool` → `Worker.log_batches` (read ahead, split,
  sanitised a read at a time) → the sources' `stream_logs` (batches) → `LogsPane` (its
  `LogLines` messages) → `LogView` in a Textual app under `App.run_test()` (headless: the
  compositor still renders each frame), with the console's collector settings (settle_heap).

Both are timed from the command's start (their connections are made first, untimed) to the
stream's last line: for the console, the frame that shows it. A log faster than the screen is
skipped through (the newest lines a frame, and a note of how many were skipped): lines count
as into the pane when shown or skipped and said so; `shown_share` says how many were shown.
An untimed round first, then `rounds` rounds (the order alternates); the figure is the median
of the rounds' ratios. A million lines a round: a shorter stream is over in a few frames.

Also: the resident set before and after the console's million lines (the view keeps 20,000),
its highest sample at each append, and the frames the app rendered while streaming (lines are
appended per batch, not per line: a frame must not be owed to every line).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import statistics
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import asyncssh

from bench.common import Goal, progress, rss_mb
from bench.fleet import API_KEY, Cloud
from vastui.console.heap import settle_heap
from vastui.console.logview import LogView
from vastui.console.logviewport import LogViewport
from vastui.console.panes.logs import LogsPane
from vastui.console.sources.workers import stream_worker_logs, worker_of
from vastui.domain.worker import InstanceRecord
from vastui.ssh import MemoryPins, SshPool, workerctl
from vastui.vast.client import VastClient

GOALS = [
    Goal("logstream.ratio_vs_asyncssh", ">=", 0.5, "console lines/s over bare asyncssh lines/s"),
    Goal("logstream.rss_growth_mb", "<=", 50.0, "memory bounded over the stream"),
]

SOURCE = "cuzk"
TAIL = 500  # what the console asks for (the sources' stream_logs)


class _Snapshot:
    def __init__(self, rec: InstanceRecord) -> None:
        self.instances = [rec]


def _app(pool: SshPool, rec: InstanceRecord) -> Any:
    from textual.app import App, ComposeResult

    class StreamApp(App[None]):
        """What `LogsPane` reads of its host; the stream is the console's own code."""

        def __init__(self) -> None:
            super().__init__()
            self.snapshot = _Snapshot(rec)
            self.animation_level = "none"

        def log_stream(self, rec: InstanceRecord, source: str) -> AsyncIterator[list[str]]:
            return stream_worker_logs(worker_of(pool, rec), rec, source, TAIL)

        def engine_log_lines(self, *, rewind: bool = False) -> list[str]:
            return []

        def compose(self) -> ComposeResult:
            yield LogsPane(self, id="logs")  # type: ignore[arg-type]  # the host's part it reads

        def on_mount(self) -> None:
            # The console's own collector settings (VastuiApp settles its heap once its rows
            # are in): Python's defaults would charge the stream collections it does not pay.
            self.gc_thresholds = gc.get_threshold()
            settle_heap()

        def on_unmount(self) -> None:
            gc.unfreeze()
            gc.set_threshold(*self.gc_thresholds)

    return StreamApp()


async def _instance(url: str, key: asyncssh.SSHKey) -> InstanceRecord:
    """One running instance of the simulated cloud, with our key on it."""
    client = VastClient(API_KEY, url, pacing={})
    try:
        await client.add_ssh_key(key.export_public_key().decode().strip())
        offer = (await client.search_offers("verified=any external=any", limit=5)).offers[0]
        label = "vastui-bench-0123456789ab"
        iid = (
            await client.create_instance(offer.id, label=label, image="img", disk_gb=10)
        ).instance_id
        for _ in range(200):
            inst = await client.show_instance(iid)
            endpoint = inst.ssh_endpoint() if inst is not None else None
            if inst is not None and inst.actual_status == "running" and endpoint:
                await asyncio.sleep(0.5)  # its SSH server starts on the cloud's next tick
                return InstanceRecord(
                    vast_id=iid, label=label, state="proving", ssh_host=endpoint[0],
                    ssh_port=endpoint[1],
                )  # fmt: skip
            await asyncio.sleep(0.1)
        raise RuntimeError(f"instance {iid} did not run")
    finally:
        await client.aclose()


async def _bare(rec: InstanceRecord, key: asyncssh.SSHKey) -> tuple[int, float, float]:
    """A bare asyncssh reader: lines, seconds and CPU seconds."""
    command = workerctl("logs", SOURCE, "--tail", TAIL, "--follow")
    async with asyncssh.connect(
        rec.ssh_host, rec.ssh_port, username="root", client_keys=[key], known_hosts=None,
        config=None, agent_path=None,
    ) as conn:  # fmt: skip
        started, cpu0 = time.perf_counter(), time.process_time()
        process = await conn.create_process(command, encoding=None)
        lines = 0
        while chunk := await process.stdout.read(65536):
            lines += chunk.count(b"\n")
        elapsed = time.perf_counter() - started
        cpu = time.process_time() - cpu0
        process.close()
    return lines, elapsed, cpu


async def _console(
    pool: SshPool, rec: InstanceRecord, expected: int, profile: bool
) -> dict[str, Any]:
    """The console's path into a LogsPane under run_test: lines/s, frames, RSS.

    Timed like the bare reader: from the command's start (the pool's connection is made
    first, untimed, as the bare reader's is) to the frame that shows the stream's last line
    (a callback after the screen's refresh), not to a poll that notices it later."""
    app = _app(pool, rec)
    frames = 0
    render_line = LogViewport.render_line

    def counting(self: LogViewport, y: int) -> Any:
        nonlocal frames
        frames += y == 0
        return render_line(self, y)

    LogViewport.render_line = counting  # type: ignore[method-assign]
    try:
        async with app.run_test(size=(200, 50)) as pilot:
            pane = app.query_one(LogsPane)
            view = pane.query_one(LogView)
            await pool.worker(
                rec.vast_id, (rec.ssh_host or "", int(rec.ssh_port or 22))
            ).conn.connect()
            await pilot.pause()
            gc.collect()
            rss_before = rss_peak = rss_mb()
            profiler = _profiler(profile)
            frames = 0
            arrived = 0  # lines that reached the pane: shown, or skipped through (and said so)
            finished: list[float] = []
            shown = asyncio.Event()
            queue_lines, append = pane.queue_lines, view.append

            def counting_queue(token: int, source: str, lines: list[str]) -> None:
                nonlocal arrived
                arrived += len(lines) + getattr(lines, "skipped", 0)
                queue_lines(token, source, lines)

            def on_screen() -> None:
                finished.append(time.perf_counter())
                shown.set()

            def appending(source: str, lines: list[str]) -> None:
                nonlocal rss_peak
                append(source, lines)
                rss_peak = max(rss_peak, rss_mb())
                if arrived >= expected and not pane._pending and not finished:
                    finished.append(0.0)  # asked once
                    view.call_after_refresh(on_screen)

            pane.queue_lines = counting_queue  # type: ignore[method-assign]
            view.append = appending  # type: ignore[method-assign]
            started, cpu0 = time.perf_counter(), time.process_time()
            pane.source = SOURCE
            pane.show_instance(rec)
            while not shown.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(shown.wait(), 0.5)
                ended = not (pane.streams or pane._pending or pane._flush_posted)
                if (ended and not finished) or time.perf_counter() - started > 600:
                    raise RuntimeError(f"only {arrived:,} of {expected:,} lines reached the pane")
            elapsed = finished[-1] - started
            cpu = time.process_time() - cpu0
            _profile_report(profiler)
            await pilot.pause()
            gc.collect()
            return {
                "console_lines": arrived,
                "skipped": pane.skipped_total,
                "console_s": elapsed,
                "cpu_s": cpu,
                "frames": frames,
                "buffered": view.buffered,
                "rss_before": rss_before,
                "rss_peak": rss_peak,
                "rss_after": rss_mb(),
            }
    finally:
        LogViewport.render_line = render_line  # type: ignore[method-assign]


def _profiler(enabled: bool) -> Any:
    if not enabled:
        return None
    from pyinstrument import Profiler

    profiler = Profiler(async_mode="disabled")
    profiler.start()
    return profiler


def _profile_report(profiler: Any) -> None:
    if profiler is not None:
        profiler.stop()
        print(profiler.output_text(unicode=True, color=False), file=sys.stderr)


async def _firehose(lines: int, rounds: int, profile: bool) -> dict[str, Any]:
    """Bare reader and console in turns, a round each (a burst of load hits both alike): the
    median of the rounds' ratios. An untimed round first (the first app and the first reads
    pay for imports and caches); the order within a round alternates. With `profile`, the
    first timed round is profiled, and left out."""
    cloud = Cloud(20, progress_every=0, log_total=lines, log_rate=0)
    pool: SshPool | None = None
    try:
        key = asyncssh.generate_private_key("ssh-ed25519")
        rec = await _instance(cloud.url, key)
        pool = SshPool(client_key=key, pins=MemoryPins())
        bare_rates, console_rates, ratios, runs = [], [], [], []
        untimed = {0, 1} if profile else {0}  # the warm-up; the profiled round (slowed)
        for n in range(rounds + len(untimed)):
            if n % 2:
                bare_lines, bare_s, bare_cpu = await _bare(rec, key)
                console = await _console(pool, rec, bare_lines, profile and n == 1)
            else:
                console = await _console(pool, rec, lines, profile and n == 1)
                bare_lines, bare_s, bare_cpu = await _bare(rec, key)
            bare_rate, console_rate = (
                bare_lines / bare_s,
                console["console_lines"] / console["console_s"],
            )
            warm = "untimed: " if n in untimed else ""
            cpu = console["cpu_s"] / console["console_s"]
            bare_share = bare_cpu / bare_s
            progress(f"logstream: {warm}bare {bare_rate:,.0f} lines/s (CPU {bare_share:.0%}),"
                     f" console {console_rate:,.0f} lines/s (CPU {cpu:.0%}, {console['frames']}"
                     " frames)")  # fmt: skip
            if n in untimed:
                continue
            bare_rates.append(bare_rate)
            console_rates.append(console_rate)
            ratios.append(console_rate / bare_rate)
            runs.append(console)
        last = runs[-1]
        return {
            "logstream.lines": lines,
            "logstream.rounds": rounds,
            "logstream.bare_lines_per_s": round(statistics.median(bare_rates)),
            "logstream.console_lines_per_s": round(statistics.median(console_rates)),
            "logstream.ratio_vs_asyncssh": round(statistics.median(ratios), 3),
            "logstream.ratio_min": round(min(ratios), 3),
            "logstream.ratio_max": round(max(ratios), 3),
            "logstream.frames_per_s": round(last["frames"] / last["console_s"], 1),
            "logstream.shown_share": round(1 - last["skipped"] / last["console_lines"], 3),
            "logstream.lines_kept": last["buffered"],
            "logstream.rss_before_mb": last["rss_before"],
            "logstream.rss_after_mb": last["rss_after"],
            "logstream.rss_growth_mb": round(last["rss_after"] - last["rss_before"], 1),
            "logstream.rss_peak_growth_mb": max(
                round(run["rss_peak"] - run["rss_before"], 1) for run in runs
            ),
        }
    finally:
        if pool is not None:
            with contextlib.suppress(Exception):
                await pool.close_all()
        cloud.stop()


async def _paced(rate: int, seconds: float) -> dict[str, Any]:
    """A log at `rate` lines/s (the issue's key test streams 5,000): what the console spends."""
    lines = int(rate * seconds)
    cloud = Cloud(20, progress_every=0, log_total=lines, log_rate=rate)
    pool: SshPool | None = None
    try:
        key = asyncssh.generate_private_key("ssh-ed25519")
        rec = await _instance(cloud.url, key)
        pool = SshPool(client_key=key, pins=MemoryPins())
        console = await _console(pool, rec, lines, False)
        return {
            "logstream.paced_lines_per_s": rate,
            "logstream.paced_cpu_share": round(console["cpu_s"] / console["console_s"], 3),
            "logstream.paced_frames_per_s": round(console["frames"] / console["console_s"], 1),
            "logstream.paced_shown_share": round(
                1 - console["skipped"] / max(1, console["console_lines"]), 3
            ),
        }
    finally:
        if pool is not None:
            with contextlib.suppress(Exception):
                await pool.close_all()
        cloud.stop()


async def _measure(lines: int, rounds: int, paced_s: float, profile: bool) -> dict[str, Any]:
    figures = await _firehose(lines, rounds, profile)
    if paced_s > 0:
        figures |= await _paced(5_000, paced_s)
    return figures


def run(quick: bool) -> dict[str, Any]:
    # A million lines a round even when quick: at ~2M lines/s a shorter stream is over in a
    # few frames, and the ratio is then mostly how the last frame falls.
    if quick:
        return asyncio.run(_measure(1_000_000, rounds=3, paced_s=3.0, profile=False))
    return asyncio.run(_measure(1_000_000, rounds=5, paced_s=8.0, profile=False))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--lines", type=int)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    lines = args.lines or 1_000_000
    rounds, paced = (3, 3.0) if args.quick else (5, 8.0)
    for key, value in asyncio.run(_measure(lines, rounds, paced, args.profile)).items():
        print(f"{key:36} {value}")


if __name__ == "__main__":
    main()
