"""Item 5, start-up: `vastui offers --json` as a whole process against a served simulator, as
a ratio to the official `vastai search offers --raw` asking the same server the same query
(vastui's default filter, order, limit and disk); `vastui --help` and `--version` times.

Both programs run as installed, with their bytecode cached: PYTHONDONTWRITEBYTECODE (set in
some sandboxes) is removed from their environment and one untimed run of each writes the
cache. HOME is a fresh folder (no user config or key file of either tool is read) and the key
goes in VAST_API_KEY / --api-key. The two run alternately, so load hits both alike.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.common import Goal, interleave, ms, progress, ratio, run_process

GOALS = [
    Goal("startup.offers_ratio_vs_vastai", "<=", 0.5, "vastui offers --json / vastai search"),
]
API_KEY = "bench-key"
BIN = Path(sys.executable).parent


@contextmanager
def served_simulator(env: dict[str, str]) -> Iterator[str]:
    """`vastui sim serve --no-workers --port 0`: yields its API URL, stops it after."""
    argv = [str(BIN / "vastui"), "sim", "serve", "--no-workers", "--port", "0"]
    argv += ["--api-key", API_KEY]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()  # "vastui sim: serving ... on http://... (...)"
        found = re.search(r"https?://\S+", line)
        if not found:
            raise RuntimeError(f"sim serve printed no URL: {line!r}")
        yield found.group(0)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def clean_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "VAST"))}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.update(HOME=str(home), VAST_API_KEY=API_KEY)
    return env


def commands(url: str, home: Path) -> dict[str, list[str]]:
    from vastui.config import DEFAULT_FILTER, Config

    config = Config()
    vastui = [str(BIN / "vastui"), "offers", "--json", "--api-url", url]
    vastui += ["--db", str(home / "bench.db")]
    vastai = [str(BIN / "vastai"), "search", "offers", DEFAULT_FILTER, "--raw"]
    vastai += ["-o", "dph_total" if config.offers.order == "dph" else config.offers.order]
    vastai += ["--limit", str(config.offers.limit), "--storage", str(config.fleet.disk_gb)]
    vastai += ["--url", url, "--api-key", API_KEY]
    return {"vastui": vastui, "vastai": vastai}


def same_answer(argv: dict[str, list[str]], env: dict[str, str]) -> int:
    """Both list the same offers (the query is the same): their count. Warms both caches."""
    out = {name: run_process(a, env) for name, a in argv.items()}
    ours = {json.loads(line)["id"] for line in out["vastui"].splitlines() if line.strip()}
    theirs = {o["id"] for o in json.loads(out["vastai"])}
    if ours != theirs:
        raise RuntimeError(f"different offers: vastui {len(ours)}, vastai {len(theirs)}")
    return len(ours)


def run(quick: bool) -> dict[str, Any]:
    repeat = 5 if quick else 15
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        env = clean_env(home)
        with served_simulator(env) as url:
            argv = commands(url, home)
            figures["startup.offers_count"] = same_answer(argv, env)  # also warms the caches
            progress(f"timing {repeat} rounds: vastui offers --json, vastai search offers --raw")
            stats = interleave(
                {name: lambda a=a: run_process(a, env) for name, a in argv.items()},
                repeat=repeat,
                warmup=0,
            )
        progress("timing --help, --version, and a bare interpreter")
        vastui = str(BIN / "vastui")
        small = interleave(
            {
                "help": lambda: run_process([vastui, "--help"], env),
                "version": lambda: run_process([vastui, "--version"], env),
                "python": lambda: run_process([sys.executable, "-c", "pass"], env),
            },
            repeat=repeat,
        )
    figures.update(
        {
            "startup.offers_ratio_vs_vastai": ratio(stats["vastui"].median, stats["vastai"].median),
            "startup.vastui_offers_ms": ms(stats["vastui"].median, 1),
            "startup.vastui_offers_p95_ms": ms(stats["vastui"].p95, 1),
            "startup.vastai_search_ms": ms(stats["vastai"].median, 1),
            "startup.help_ms": ms(small["help"].median, 1),
            "startup.version_ms": ms(small["version"].median, 1),
            "startup.python_bare_ms": ms(small["python"].median, 1),
        }
    )
    return figures
