"""The instance detail view opening, in a real terminal: time from enter to the view drawn and
to the screen settled (cuzk's live status filled in), against a minimal Textual app pushing a
ModalScreen with the same text, all of it static.

    .venv/bin/python -m bench.detail [--quick]

The console runs on its fixed data (vastsim.console_fixtures: the snapshot tests' app) with
the cursor on a proving worker, whose cuzk status the fixture's source answers at once: what
is timed is the console's own work, not a worker's network. The yardsticks are two minimal
apps whose enter pushes a ModalScreen of the same size with the same title, metadata,
diagnosis and cuzk status lines (made beforehand by the detail view's own functions) in Labels
and Statics: `minimal` over a bare screen (one line of text), `tables` over bench/keys.py's
minimal app (bench/minimal_app.py: the fixture's offers and instances in plain DataTables, as
the console has its tables beneath). All run under their own pty at keys.py's size, driven by
its terminal (synchronized frames, a screen model), taking turns in blocks (the others stopped
with SIGSTOP). Per open:

- drawn: the first frame that shows "Diagnosis";
- settled: the first frame that shows cuzk's status ("synthesis 10/25 active"); the minimal
  apps draw it in their first frame, so their settled time is their drawn time.

Closing (q) is not timed. Ratios are of medians within this run: `ratio` against the bare
minimal app (the goal), `ratio_vs_tables` against the one with tables. With
BENCH_DETAIL_FETCH_MS=N the console's cuzk read takes N ms (as a worker's would): drawn should
not move, and settled should come N ms later, one small repaint after the answer.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.common import Goal, Stats, progress, ratio
from bench.keys import Term, _child_env

if TYPE_CHECKING:
    from textual.app import App

DRAWN = "Diagnosis"
SETTLED = "synthesis 10/25 active"  # the fixture's cuzk status, as render_cuzk shows it
ENTER = "\r"
FIGURES = ("drawn", "settled")
# Milliseconds the console's cuzk read takes (a worker over SSH: tens to hundreds); the goal's
# figures are at 0, the console's own work. Read by the console's child.
FETCH_ENV = "BENCH_DETAIL_FETCH_MS"

GOALS = [
    Goal("detail.settled.ratio", "<=", 1.2, "detail view settled vs a minimal app's modal"),
    Goal("detail.drawn.ratio", "<=", 1.2, "detail view drawn vs a minimal app's modal"),
]


# -- the apps (children, each under its own pty) ----------------------------------------


def serve_vastui(state: Path) -> None:
    """The console on the fixture; cuzk's status answered after FETCH_MS (0: at once)."""
    import asyncio

    from vastsim.console_fixtures import fixed_app

    app = fixed_app(state)
    answer = app.source.cuzk_status
    delay = float(os.environ.get(FETCH_ENV, "0")) / 1000

    async def slower(rec: Any) -> dict[str, Any]:
        await asyncio.sleep(delay)
        return await answer(rec)

    if delay:
        app.source.cuzk_status = slower  # type: ignore[method-assign]
    app.run()


def minimal_app(tables: bool) -> App[None]:
    """A minimal App whose enter pushes a ModalScreen with the detail view's text for the
    first instance (made beforehand, static): on a bare screen (one line of text), or
    (`tables`) on bench/minimal_app.py, the keys benchmark's yardstick, with the fixture's
    offers and instances in plain DataTables beneath."""
    from rich.text import Text
    from textual.app import App, ComposeResult
    from textual.binding import Binding
    from textual.containers import VerticalScroll
    from textual.screen import ModalScreen
    from textual.widgets import Label, Static

    from bench.keys import SORT_CYCLE, shown_offers
    from bench.minimal_app import MinimalApp, Rows
    from vastsim.console_fixtures import CUZK_STATUS, fixed_data
    from vastui.config import Config
    from vastui.console.detail import DetailScreen, render_cuzk
    from vastui.console.panes.instances import InstancesPane
    from vastui.console.panes.offers import OffersPane, _haystack, offer_cells

    snap, offers = fixed_data()
    live_first = sorted(snap.instances, key=lambda r: (r.killed, -(r.created_at or 0)))

    def texts(i: int) -> tuple[Text, ...]:
        """Row i's title, metadata (key, value lines), diagnosis and cuzk status."""
        rec = live_first[i]
        made = DetailScreen(rec, current_image=Config().fleet.image)  # its text, not its screen
        width = max(len(k) for k, _ in made._meta())
        meta = Text()
        for key, value in made._meta():
            meta.append(f"{key:<{width}}  ", style="bold")
            meta.append(value if isinstance(value, Text) else Text(str(value or "-")))
            meta.append("\n")
        title = Text(f"Instance {rec.vast_id}", style="bold")
        return title, meta, made._diagnosis(), render_cuzk(CUZK_STATUS)

    class Detail(ModalScreen[None]):
        BINDINGS = [Binding("escape,q", "dismiss", "Close")]  # noqa: RUF012
        DEFAULT_CSS = """
        Detail { align: center middle; background: $background 60%; }
        #detail { width: 110; height: 90%; padding: 1 2; border: thick $primary;
                  background: $surface; }
        .section { padding-top: 1; }
        """

        def __init__(self, shown: tuple[Text, ...]) -> None:
            super().__init__()
            self.shown = shown

        def compose(self) -> ComposeResult:
            title, meta, diagnosis, cuzk = self.shown
            with VerticalScroll(id="detail"):
                yield Label(title)
                yield Static(meta)
                yield Label(Text("Diagnosis", style="bold"), classes="section")
                yield Static(diagnosis)
                yield Label(Text("cuzk status", style="bold"), classes="section")
                yield Static(cuzk)

    made = [texts(i) for i in range(len(live_first))]
    if not tables:

        class Bare(App[None]):
            BINDINGS = [Binding("enter", "open", "Open")]  # noqa: RUF012

            def compose(self) -> ComposeResult:
                yield Static(f"State / progress: enter opens {live_first[0].vast_id}")

            def action_open(self) -> None:
                self.push_screen(Detail(made[0]))

        return Bare()
    rows = shown_offers(offers)
    offer_rows = Rows(
        columns=[(c.key, c.label, c.width) for c in OffersPane.COLUMNS],
        keys=[str(r.offer.id) for r in rows],
        cells=[offer_cells(r) for r in rows],
        sort_values=[{k: f(r) for k, f in OffersPane.SORT_VALUES.items()} for r in rows],
        haystacks=[_haystack(r) for r in rows],
    )
    fields = ("vast_id", "state", "gpu_name", "bench_rate", "prod_rate", "prod_completed",
              "dph_total", "min_rate", "created_at", "killed_at", "label", "image")  # fmt: skip
    inst_rows = Rows(
        columns=[(c.key, c.label, c.width) for c in InstancesPane.COLUMNS],
        keys=[str(r.vast_id) for r in live_first],
        cells=[[Text(str(getattr(r, f))) for f in fields] for r in live_first],
        sort_values=[{} for _ in live_first],
        haystacks=["" for _ in live_first],
    )
    return MinimalApp(offer_rows, inst_rows, SORT_CYCLE, "cpp", detail=lambda i: Detail(made[i]))


# -- the measurement ----------------------------------------------------------------------


APPS = ("vastui", "minimal", "tables")  # the console; a bare minimal app; one with tables


def _spawn(name: str, state: Path) -> Term:
    argv = [sys.executable, "-m", "bench.detail", "--serve", name]
    return Term(argv, _child_env(state, None, name), name)


def _ready(term: Term) -> None:
    """Each app on its instances, the cursor on the first (3000001, proving)."""
    if term.name == "minimal":
        term.wait(lambda s: s.has("State / progress") and s.has("3000001"), timeout=120)
    else:
        term.wait(lambda s: s.has("Exp $/p") and s.has("RTX"), timeout=120)
        term.settle(0.3, 5.0)
        term.press("2", lambda s: s.has("State / progress") and s.has("3000001"))
    term.settle(0.3, 5.0)


def _opens(term: Term, n: int) -> dict[str, list[float]]:
    """n opens: seconds from enter to the view drawn and to it settled; each closed after."""
    out: dict[str, list[float]] = {k: [] for k in FIGURES}
    for _ in range(n):
        sent = term.write(ENTER)
        drawn = term.wait(lambda s: s.has(DRAWN), timeout=30)
        settled = drawn if term.screen.has(SETTLED) else term.wait(lambda s: s.has(SETTLED))
        out["drawn"].append(drawn - sent)
        out["settled"].append(settled - sent)
        term.settle(0.05, 0.5)
        term.press("q", lambda s: not s.has(DRAWN))
        term.settle(0.1, 1.0)
    return out


PRESSES = {True: (8, 1), False: (30, 2)}  # quick?: (opens in each app, rounds)


def measure(quick: bool) -> dict[str, Any]:
    n, rounds = PRESSES[quick]
    per = n // rounds
    samples: dict[str, dict[str, list[float]]] = {name: {} for name in APPS}
    with tempfile.TemporaryDirectory() as tmp:
        terms: dict[str, Term] = {}
        try:
            progress("detail: starting the console and the minimal apps")
            for name in APPS:
                terms[name] = _spawn(name, Path(tmp))
            for term in terms.values():
                _ready(term)
                term.pause()
            for r in range(rounds):
                for name in APPS if r % 2 == 0 else APPS[::-1]:
                    term = terms[name]
                    term.resume()
                    for key, values in _opens(term, per).items():
                        samples[name].setdefault(key, []).extend(values)
                        shown = ", ".join(f"{v * 1000:.0f}" for v in values)
                        progress(f"detail: {name} {key}: {shown} ms")
                    term.pause()
        finally:
            for term in terms.values():
                term.close()
    return figures(samples)


def figures(samples: dict[str, dict[str, list[float]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    yardsticks = {}
    for name in APPS[1:]:  # static modals: drawn is settled
        yardsticks[name] = Stats(tuple(samples[name]["drawn"]))
        out.update(yardsticks[name].ms(f"detail.{name}"))
    for key in FIGURES:
        v = Stats(tuple(samples["vastui"][key]))
        out.update(v.ms(f"detail.{key}"))
        out[f"detail.{key}.opens"] = v.n
        for name, m in yardsticks.items():
            suffix = "" if name == "minimal" else f"_vs_{name}"
            out[f"detail.{key}.ratio{suffix}"] = ratio(v.median, m.median)
            out[f"detail.{key}.p95_ratio{suffix}"] = ratio(v.p95, m.p95)
    return out


def run(quick: bool) -> dict[str, Any]:
    return measure(quick)


def _print(figs: dict[str, Any]) -> None:
    print(f"{'':8} {'vastui med/p95 ms':>18} {'ratio':>6} {'ratio vs tables':>16}")
    for key in FIGURES:
        v = f"{figs[f'detail.{key}.median_ms']:.0f} / {figs[f'detail.{key}.p95_ms']:.0f}"
        print(f"{key:8} {v:>18} {figs[f'detail.{key}.ratio']!s:>6} "
              f"{figs[f'detail.{key}.ratio_vs_tables']!s:>16}")  # fmt: skip
    for name in APPS[1:]:
        print(f"{name:8} {figs[f'detail.{name}.median_ms']:.0f} / "
              f"{figs[f'detail.{name}.p95_ms']:.0f} ms")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--serve", choices=APPS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve == "vastui":
        serve_vastui(Path(os.environ["VASTUI_STATE_DIR"]))
    elif args.serve is not None:
        minimal_app(tables=args.serve == "tables").run()
    else:
        _print(measure(args.quick))


if __name__ == "__main__":
    main()
