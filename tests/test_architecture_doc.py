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


def test_every_file_over_500_lines_says_why_it_is_one_file() -> None:
    """A long file is one cohesive thing, and says which in its opening comment."""
    import ast

    sources = [*ROOT.glob("vastui/**/*.py"), *ROOT.glob("vastsim/**/*.py"),
               *ROOT.glob("bench/*.py"),
               *(p for p in ROOT.glob("vastsim/standins/*") if p.suffix == "")]  # fmt: skip
    long = [p for p in sources if p.is_file() and len(p.read_text().splitlines()) > 500]
    assert long, "no long files found: the glob is wrong"
    silent = [
        p.relative_to(ROOT).as_posix()
        for p in long
        if "One file:" not in (ast.get_docstring(ast.parse(p.read_text())) or "")
    ]
    assert not silent, f"over 500 lines without saying why they are one file: {silent}"


def _section(text: str, title: str) -> str:
    start = text.index(title)
    end = text.find("\n## ", start + len(title))
    return text[start : end if end != -1 else len(text)]


def test_the_data_flow_names_every_table() -> None:
    """Every table a migration creates is drawn in the data flow (issue 29)."""
    import re as _re

    from vastui.store.migrations import MIGRATIONS

    tables = {m for script in MIGRATIONS for m in _re.findall(r"CREATE TABLE (\w+)", script)}
    assert len(tables) >= 15, tables  # the migrations are read, not skipped
    flow = _section((ROOT / "ARCHITECTURE.md").read_text(), "## Data flow")
    drawn = set(_re.findall(r"\b\w+\b", flow))
    assert sorted(tables - drawn) == []


def test_each_package_table_lists_modules_of_that_package() -> None:
    """A module in a package's table lives in that package (not merely somewhere)."""
    text = (ROOT / "ARCHITECTURE.md").read_text()
    packages = re.findall(r"^### `((?:vastui/)?[\w/]+)/`", text, flags=re.M)
    assert {"vastui/engine", "vastui/store", "vastui/console", "vastsim"} <= set(packages)
    wrong = []
    for package in packages:
        start = text.index(f"### `{package}/`")
        end = text.find("\n#", start + 4)
        rows = [ln for ln in text[start:end].splitlines() if ln.startswith("| `")]
        for row in rows:
            first = row.split("|")[1]
            for name in NAMED.findall(first):
                if not list((ROOT / package).rglob(name.split("/")[-1])):
                    wrong.append(f"{package}: {name}")
    assert wrong == []
