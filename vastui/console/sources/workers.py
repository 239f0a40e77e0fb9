"""Reaching a worker from the console: its SSH worker in a pool (the engine's or the console's
own), its log streams, its cuzk status, the command an operator types, and its machine in the
simulated curio cluster."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from vastui.backend import Options
from vastui.config import state_dir
from vastui.domain.worker import InstanceRecord
from vastui.ssh import LOG_SOURCES, SshPool, Worker

LOG_KEEP = 5_000  # lines a log stream hands the pane per batch at most (the newest)


def worker_of(pool: SshPool | None, rec: InstanceRecord) -> Worker | None:
    if pool is None or rec.ssh_host is None or rec.killed:
        return None
    return pool.worker(rec.vast_id, (rec.ssh_host, int(rec.ssh_port or 22)))


async def stream_worker_logs(
    worker: Worker | None, rec: InstanceRecord, source: str, tail: int = 500
) -> AsyncIterator[list[str]]:
    """Batches of sanitised lines from one worker log source, following."""
    if source not in LOG_SOURCES:
        raise ValueError(f"unknown log source {source!r}")
    if worker is None:
        raise ConnectionError(f"instance {rec.vast_id} has no SSH endpoint (yet)")
    # Batches read ahead of the pane, sanitised a read at a time (Worker.log_batches); a
    # pane slower than the log gets the newest LOG_KEEP lines of what came since its last
    # batch (batch.skipped counts the rest): it skips through a firehose, never lags.
    lines = worker.log_batches(source, follow=True, tail=tail, keep=LOG_KEEP)
    async with contextlib.aclosing(lines) as batches:
        async for batch in batches:
            yield batch


async def cuzk_status_of(worker: Worker | None, rec: InstanceRecord) -> dict[str, Any]:
    if worker is None:
        raise ConnectionError(f"instance {rec.vast_id} is not reachable over SSH")
    return await worker.cuzk_status()


def key_path(opts: Options) -> Path:
    configured = opts.config.ssh.key_path
    return Path(configured).expanduser() if configured else state_dir() / "id_ed25519"


def ssh_command(key: Path, rec: InstanceRecord) -> str | None:
    """What an operator types to reach the worker: with vastui's key (its account key)."""
    if not rec.ssh_host or rec.killed:
        return None
    return f"ssh -i {_home(key)} -p {rec.ssh_port or 22} root@{rec.ssh_host}"


def _home(path: Path) -> str:
    """~ for the home directory: shorter, and the same on every screen of one operator."""
    home = str(Path.home())
    text = str(path)
    return "~" + text[len(home) :] if home != "/" and text.startswith(home + "/") else text
