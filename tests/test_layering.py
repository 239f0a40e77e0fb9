"""Engine, store, Vast client, SSH and simulator code never import Textual."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "vastui"
UI_FREE = [p for p in ROOT.iterdir() if p.is_dir() and p.name not in ("console", "__pycache__")]
UI_FREE_MODULES = [p for p in ROOT.glob("*.py") if p.name not in ("cli.py", "__main__.py")]


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def ui_free_files() -> list[Path]:
    files = list(UI_FREE_MODULES)
    for package in UI_FREE:
        files.extend(package.rglob("*.py"))
    return files


@pytest.mark.parametrize("path", ui_free_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_textual_below_the_console(path: Path):
    bad = {m for m in imported_modules(path) if m.split(".")[0] in ("textual", "rich")}
    bad |= {m for m in imported_modules(path) if m.startswith("vastui.console")}
    assert not bad, f"{path} imports {bad}"


def test_importing_the_backend_loads_no_textual():
    code = (
        "import sys, vastui.backend, vastui.store, vastui.vast.client, vastui.sim;"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'textual'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
