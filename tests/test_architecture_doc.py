"""ARCHITECTURE.md stays true to the code: every module it names exists (a file renamed or
removed must take its description with it)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NAMED = re.compile(r"`([\w./-]+\.py)`")


def test_every_module_architecture_names_exists() -> None:
    text = (ROOT / "ARCHITECTURE.md").read_text()
    files = {p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*.py") if ".venv" not in p.parts}
    names = set(NAMED.findall(text))
    assert len(names) > 40  # the tables are read, not skipped
    missing = sorted(n for n in names if not any(f == n or f.endswith("/" + n) for f in files))
    assert not missing, f"ARCHITECTURE.md names modules that do not exist: {missing}"
