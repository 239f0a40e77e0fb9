"""`vastui --engine-only`: the engine without Textual, for systemd.

Logs to stderr and to a file in the state directory; stops cleanly on SIGTERM/SIGINT (or after
`--for`); refuses to start when another engine holds this database's lease.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
import time
from collections import Counter
from pathlib import Path

from vastui.backend import Options
from vastui.config import ensure_parent_dir, load_api_key, state_dir
from vastui.engine import sigbus
from vastui.engine.runtime import RunOptions, engine_runtime, target_words
from vastui.logfmt import ClockFormatter, PrivateFileHandler, RepeatLimiter
from vastui.redact import SecretFilter
from vastui.sanitize import sanitize_line
from vastui.store import Store

log = logging.getLogger("vastui.engine")
ALERT_FLUSH_S = 15.0  # a stopping engine waits this long at most for its last alert to go


class _SafeText(logging.Filter):
    """Log messages carry remote text (server msgs, labels): one safe line each."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = sanitize_line(record.getMessage(), 4000)
        record.args = ()
        return True


_INSTALLED: list[logging.Handler] = []  # this module's handlers: a second setup replaces them


def _api_key() -> str:
    try:
        return load_api_key()[0] or ""
    except Exception:  # no key (the demo), or a bad key file: the client says so itself
        return ""


def setup_logging(path: Path, level: int = logging.INFO) -> ClockFormatter:
    """Log to stderr and `path` (0600 in a 0700 directory); the formatter returned takes the
    engine's clock once built."""
    ensure_parent_dir(path)
    fmt = ClockFormatter()
    root = logging.getLogger()
    root.setLevel(level)
    for old in [h for h in root.handlers if h in _INSTALLED]:
        root.removeHandler(old)
        old.close()
    _INSTALLED.clear()
    secrets = SecretFilter([_api_key()])  # in any message, from any library: never the key
    repeats = RepeatLimiter()  # one filter for both: a line held back is held in both
    for handler in (logging.StreamHandler(sys.stderr), PrivateFileHandler(path)):
        handler.setFormatter(fmt)
        handler.addFilter(repeats)
        handler.addFilter(secrets)
        handler.addFilter(_SafeText())
        _INSTALLED.append(handler)
        root.addHandler(handler)
    # The HTTP libraries log every request at INFO; keep the engine's log about the fleet.
    for noisy in ("httpx", "httpcore", "asyncssh", "uvicorn"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    return fmt


async def run_engine(
    opts: Options, run: RunOptions, duration: float | None, fmt: ClockFormatter | None = None
) -> tuple[dict[str, int], str | None]:
    """Run until stopped (SIGTERM/SIGINT, ``duration``) or until the engine stops itself; the
    fleet's counts and, when it stopped itself, why (one line)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if duration is not None:
        loop.call_later(duration, stop.set)
    started = time.monotonic()
    async with engine_runtime(opts, run) as rt:
        if fmt is not None:
            fmt.clock = rt.engine.clock  # one clock: the engine's (simulated in the demo)
        log.info(
            "engine started on %s (%s, target %s%s)",
            opts.db_path,
            "simulated cloud" if opts.demo else rt.engine.client.base_url,
            target_words(rt.engine.config.fleet),
            ", dry-run" if run.dry_run else "",
        )
        await rt.engine.run(stop)
        fatal = rt.engine.fatal
        if fatal is not None:  # its one line to the operator's hooks before the exit
            await rt.engine.monitor.flush(ALERT_FLUSH_S)
        log.info("stopping after %.0fs", time.monotonic() - started)
    if fatal is not None:
        return {}, fatal  # the store may be the cause: no summary from it
    return await summarize(opts.db_path), None


async def summarize(db_path: Path) -> dict[str, int]:
    store = await Store.open(db_path)
    try:
        instances = await store.instances.all()
        counts: Counter[str] = Counter(r.state for r in instances)
        counts.update(f"killed:{r.kill_kind}" for r in instances if r.killed)
        counts["bad_list"] = len(await store.badlist.all())
        counts["perf_records"] = len(await store.perf.all())
        counts["destroy_events"] = len(await store.events.all(kind="destroy"))
    finally:
        await store.close()
    return dict(sorted(counts.items()))


def run_headless(opts: Options, run: RunOptions, duration: float | None) -> int:
    """0 after a clean stop; 1 when the engine stopped itself (its store dead, its lease lost):
    one line on stderr, and systemd's Restart=on-failure starts it again."""
    name = "engine-demo.log" if opts.demo else "engine.log"
    fmt = setup_logging(state_dir() / name)
    sigbus.install(str(opts.db_path))  # a -shm gone under SQLite: one line and status 1
    counts, fatal = asyncio.run(run_engine(opts, run, duration, fmt))
    if fatal is not None:
        print(f"vastui: engine stopped: {sanitize_line(fatal, 300)}", file=sys.stderr)
        return 1
    log.info("fleet: %s", ", ".join(f"{k}={v}" for k, v in counts.items()))
    return 0
