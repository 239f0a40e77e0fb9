"""Engine, store, Vast client, SSH and simulator code never import Textual."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "vastui"
SIMULATOR = ROOT.parent / "vastsim"
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
        "import sys, vastui.backend, vastui.store, vastui.vast.client, vastsim;"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'textual'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# -- the import graph (issue 29): no circle, no private name taken from another module ---------
# Every import counts, those under TYPE_CHECKING and inside functions too: a circle that only
# a lazy import keeps from failing is a circle in the design.


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in ROOT.rglob("*.py")}


def vastui_imports(path: Path) -> list[tuple[str, str]]:
    """(module, name) for each ``from vastui... import name`` and ``import vastui...`` in the file,
    those under ``if TYPE_CHECKING:`` included; relative imports resolved."""
    here = module_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    out: list[tuple[str, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if module.split(".")[0] == "vastui":
                out.extend((module, alias.name) for alias in node.names)
        elif isinstance(node, ast.Import):
            out.extend((a.name, "") for a in node.names if a.name.split(".")[0] == "vastui")
    return out


def import_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {name: set() for name in MODULES}
    for name, path in MODULES.items():
        for module, imported in vastui_imports(path):
            target = f"{module}.{imported}" if f"{module}.{imported}" in MODULES else module
            if target in MODULES and target != name:
                graph[name].add(target)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_graph_sees_the_imports_it_must() -> None:
    """The walk itself: relative and absolute imports, a package's own submodules, imports
    under TYPE_CHECKING and inside functions."""
    graph = import_graph()
    assert "vastui.store.store" in graph["vastui.store"]  # `from .store import Store`
    assert "vastui.store.database" in graph["vastui.store.instances"]
    assert "vastui.store" in graph["vastui.ssh.pins"]  # `from vastui.store import ...`
    assert "vastui.metrics" in graph["vastui.config.schema"]  # inside is_listen


def test_the_circle_finder_finds_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle_in_vastui() -> None:
    """Type-only imports count: a circle under TYPE_CHECKING is a circle in the design."""
    assert circles(import_graph()) == []


def test_no_module_imports_a_private_name_from_another() -> None:
    taken = [
        f"{module_name(path)} takes {module}.{name}"
        for path in MODULES.values()
        for module, name in vastui_imports(path)
        if name.startswith("_") and not name.startswith("__")
        and f"{module}.{name}" not in MODULES
    ]  # fmt: skip
    assert taken == []


# -- the domain above the store (issue 29): the store maps records to rows, it owns none -------

# The decisions, pure: they take records and facts and return verdicts, never a store.
DECISIONS = [
    "vastui.engine.policy", "vastui.engine.transitions", "vastui.engine.provision",
    "vastui.engine.bidding", "vastui.engine.spend", "vastui.engine.drain",
    "vastui.engine.ranking", "vastui.engine.physics", "vastui.engine.production",
    "vastui.pricing", "vastui.domain.plan", "vastui.domain.stages", "vastui.domain.worker",
    "vastui.domain.machines", "vastui.domain.journal", "vastui.domain.engine_state",
    "vastui.domain.reports",
]  # fmt: skip


def _in_store(module: str) -> bool:
    return module == "vastui.store" or module.startswith("vastui.store.")


@pytest.mark.parametrize("name", DECISIONS)
def test_a_decision_imports_nothing_of_the_store(name: str) -> None:
    assert name in MODULES, f"{name} is gone: update DECISIONS"
    taken = [f"{m}.{n}" for m, n in vastui_imports(MODULES[name]) if _in_store(m)]
    assert taken == []


def test_nothing_above_the_store_takes_a_record_type_from_it() -> None:
    """A record (a dataclass) is the domain's: above the store, a module takes from the store the
    store itself, its errors and its operations, never a type to hold data in."""
    import dataclasses
    import importlib

    taken = []
    for name, path in MODULES.items():
        if _in_store(name):
            continue
        for module, imported in vastui_imports(path):
            if not _in_store(module) or not imported:
                continue
            value = getattr(importlib.import_module(module), imported, None)
            if isinstance(value, type) and dataclasses.is_dataclass(value):
                taken.append(f"{name} takes {module}.{imported}")
    assert taken == []


# Leaves the domain may use: pure, importing nothing of vastui's (a test below holds that).
DOMAIN_LEAVES = ("vastui.numbers", "vastui.sanitize")


def test_the_domain_imports_only_the_domain_and_pure_leaves() -> None:
    taken = [
        f"{name} takes {module}"
        for name, path in MODULES.items()
        if name.startswith("vastui.domain")
        for module, _ in vastui_imports(path)
        if not module.startswith("vastui.domain") and module not in DOMAIN_LEAVES
    ]
    assert taken == []


@pytest.mark.parametrize("leaf", DOMAIN_LEAVES)
def test_a_domain_leaf_imports_nothing_of_vastui(leaf: str) -> None:
    assert vastui_imports(MODULES[leaf]) == []


# -- the simulator beside the product (issue 29): vastsim imports vastui, never the reverse ---


def test_vastui_never_imports_the_simulator() -> None:
    """Under TYPE_CHECKING and inside functions too: vastui finds its simulated world through
    an entry point (vastui/worlds.py)."""
    taken = [
        f"{name} imports {module}"
        for name, path in MODULES.items()
        for module in imported_modules(path)
        if module.split(".")[0] == "vastsim"
    ]
    assert taken == []


def test_the_simulator_takes_only_public_names_from_vastui() -> None:
    taken = []
    for path in SIMULATOR.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("vastui"):
                taken += [
                    f"{path.name} takes {node.module}.{a.name}"
                    for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")
                ]
    assert taken == []


@pytest.mark.parametrize(
    "path",
    [p for p in SIMULATOR.rglob("*.py") if p.name != "console_fixtures.py"],
    ids=lambda p: str(p.relative_to(SIMULATOR)),
)
def test_the_simulator_imports_no_textual(path: Path) -> None:
    """Only the console's fixed demo data (console_fixtures.py) builds on the console."""
    bad = {m for m in imported_modules(path) if m.split(".")[0] in ("textual", "rich")}
    bad |= {m for m in imported_modules(path) if m.startswith("vastui.console")}
    assert not bad, f"{path} imports {bad}"


def test_the_demo_finds_the_simulator_by_its_entry_point() -> None:
    from vastui.worlds import load_world

    world = load_world()
    assert type(world).__module__ == "vastsim.world"
    assert callable(world.demo) and callable(world.serve) and callable(world.client)


def test_a_missing_world_is_one_line() -> None:
    from vastui.worlds import WorldMissing, load_world

    with pytest.raises(WorldMissing, match="no simulated world 'nowhere' is installed"):
        load_world("nowhere")


# -- the bench and the trials stay importable ----------------------------------------------------
# They run outside the suite (bench/, reliability/); a rename in vastui broke `python -m bench`'s
# logstream module once without a test failing (issue 29).

BENCH_AND_TRIALS = sorted(
    f"{p.parent.name}.{p.stem}"
    for folder in ("bench", "reliability")
    for p in (ROOT.parent / folder).glob("*.py")
    if p.stem != "__main__"
)


@pytest.mark.parametrize("name", BENCH_AND_TRIALS)
def test_every_bench_and_trial_module_imports(name: str) -> None:
    import importlib

    assert importlib.import_module(name) is not None


def test_the_keys_bench_sorts_by_the_consoles_own_columns() -> None:
    """bench/keys.py sorts both apps through the offers pane's columns by key: a renamed column
    (required_rate's "req" became min_rate's "min") must be renamed there too."""
    from bench.keys import SORT_CYCLE
    from vastui.console.panes.offers import OffersPane

    keys = [c.key for c in OffersPane.COLUMNS]
    assert [k for k in keys if k in SORT_CYCLE] == list(SORT_CYCLE)


def test_no_asyncio_wait_for() -> None:
    """asyncio.wait_for in Python 3.11 can swallow a cancellation that meets the inner await's
    end (gh-86296): a task cancelled then waits on for ever (the end-of-run stall of the
    simulated worker host's monitor). ``async with asyncio.timeout(...)`` does not."""
    repo = ROOT.parent
    sources = [*repo.glob("vastui/**/*.py"), *repo.glob("vastsim/**/*.py")]
    assert len(sources) > 100, "the glob is wrong"
    offenders = [
        f"{p.relative_to(repo)}:{n}"
        for p in sources
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if "asyncio.wait_for(" in line
    ]
    assert offenders == []
