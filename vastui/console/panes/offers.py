"""The offers pane: Vast's offers for the filter, ranked by expected $/proof, bad machines hidden.

Its keys: deploy, ignore the machine, edit the Vast filter (this view's only: the engine rents
with the configured filter), find rows, show bad machines, sort.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, ClassVar

from rich.text import Text
from textual.binding import Binding, BindingType
from textual.message import Message

from vastui.console.cells import fmt, t
from vastui.console.dialogs import ConfirmScreen, PromptScreen
from vastui.console.messages import SendCommand, TitleChanged
from vastui.console.panes.base import (
    FIND_BINDING,
    SORT_BINDINGS,
    Column,
    ConsoleHost,
    Row,
    TablePane,
)
from vastui.domain.machines import REASON_MAX_CHARS
from vastui.domain.plan import PARAMS_GB
from vastui.engine.ranking import RANKED_BY_TIME, RankedOffer
from vastui.sanitize import sanitize_line
from vastui.vast.query import MAX_FILTER_CHARS, QueryError, build_search_body

CELL_CACHE = 2_000  # offers whose cells are kept (made when drawn; 10,000 offers, ~45 shown)


class OffersPane(TablePane):
    PANE = "offers"
    DEFAULT_SORT = "cpp"
    FINDS_ITSELF = True  # build_rows narrows the last find's rows as a find grows
    COLUMNS: ClassVar[tuple[Column, ...]] = (
        # Most telling first: at 80 columns the price, the expected $/proof and the rates show.
        Column("gpu", "GPU", 16, "GPU model (green: fast for PoRep C2, red: slow)"),
        Column("n", "#", 2, "GPUs in the offer"),
        Column("dph", "$/h", 6, "price per hour, Vast's dph_total with the disk we rent"),
        Column("cpp", "Exp $/p", 7, "expected $/proof on demand = $/h ÷ expected proofs/h; "
               "green when under fleet.max_cost_per_proof (the engine may rent it)"),
        Column("min", "Min", 4, "min_rate: the proofs/h this price needs, ceil($/h ÷ max "
               "$/proof); its benchmark must reach it or the worker is destroyed"),
        Column("known", "Known", 5, "proofs/h this machine last measured, blank if vastui "
               "never ran it; * marks an aborted benchmark's pace over the proofs it finished "
               "(partial, below its min_rate then); unknown machines are expected at the "
               "median of measured peers with the same GPU"),
        Column("bid", "Bid $/p", 7, "expected $/proof as an interruptible bid, its interruptions "
               "priced in ([bids] mode = auto); green: the engine would rent it as this bid"),
        Column("ram", "RAM GB", 6, "host RAM (green ≥ 300 GB per GPU; PoRep C2 needs a lot)"),
        Column("bad", "Bad", 3, "BAD: the machine is on the bad list (shown with b)"),
        Column("vram", "VRAM", 4, "GPU memory, GB"),
        Column("cores", "Cores", 5, "CPU cores of the offer"),
        Column("cpu", "CPU", 14, "CPU model", grow=16),
        Column("pcie", "PCIe", 5, "PCIe bandwidth, GB/s"),
        Column("dl", "DL Mb/s", 7, f"download speed (the parameters are ~{PARAMS_GB:.0f} GB)"),
        Column("rel", "Rel%", 5, "Vast's reliability score"),
        Column("loc", "Location", 16, "where the machine is", grow=14),
        Column("machine", "Machine", 7, "machine_id: the physical machine (what a ban is of)"),
        Column("offer", "Offer", 9, "the offer's id (vastai create instance takes it)"),
    )  # fmt: skip
    GROW = ("cpu", "loc")
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("d", "deploy", "Deploy", id="offers-deploy", tooltip="Rent the selected offer"),
        Binding("i", "ignore", "Ignore", id="ignore",
                tooltip="Put the offer's machine on the bad list"),
        Binding("e", "edit_filter", "Vast filter", id="offers-filter",
                tooltip="Edit this view's Vast filter (vastai query syntax)"),
        FIND_BINDING,
        Binding("b", "toggle_bad", "Bad", id="offers-bad", tooltip="Show/hide bad machines"),
        *SORT_BINDINGS,
    ]  # fmt: skip

    SORT_VALUES: ClassVar[dict[str, Callable[[Any], Any]]] = {
        "gpu": lambda r: r.offer.gpu_name,
        "n": lambda r: r.offer.num_gpus,
        "dph": lambda r: r.offer.dph_total,
        "cpp": lambda r: r.on_demand_cost_per_proof,
        "bid": lambda r: None if r.bid is None else r.bid.cost_per_proof,
        "min": lambda r: r.min_rate,
        "known": lambda r: r.known_rate,
        "ram": lambda r: r.offer.cpu_ram_gb,
        "bad": lambda r: r.bad,
        "vram": lambda r: r.offer.gpu_ram_gb,
        "cores": lambda r: r.offer.cpu_cores,
        "cpu": lambda r: r.offer.cpu_name,
        "pcie": lambda r: r.offer.pcie_bw,
        "dl": lambda r: r.offer.inet_down,
        "rel": lambda r: r.offer.reliability,
        "loc": lambda r: r.offer.geolocation,
        "machine": lambda r: r.offer.machine_id,
        "offer": lambda r: r.offer.id,
    }

    class FilterChosen(Message):
        """The operator chose a Vast filter for this view (validated)."""

        def __init__(self, text: str) -> None:
            super().__init__()
            self.text = text

    def __init__(self, host: ConsoleHost, **kw: Any) -> None:
        super().__init__(host, **kw)
        self.show_bad = False
        # Made once per offers list, not per keystroke: each offer's row and the text a find
        # searches, the rows in the sort order, each row's cells (only for rows drawn).
        self._base_of: list[RankedOffer] | None = None
        self._base: list[tuple[Row, str]] = []
        self._bad = 0
        self._order_state: tuple[Any, ...] | None = None
        self._order: list[tuple[Row, str]] = []
        # The last find: (the order it searched, show_bad, its text, the pairs it kept).
        self._found: tuple[list[tuple[Row, str]], bool, str, list[tuple[Row, str]]] | None = None
        self._cells_of: list[RankedOffer] | None = None
        self._cell_cache: dict[int, tuple[RankedOffer, list[Text]]] = {}

    # -- rows ------------------------------------------------------------------------------

    def build_rows(self) -> list[Row]:
        """The offers shown, already in the sort order (`_sorted` keeps it)."""
        ordered = self._ordered()
        show_bad = self.show_bad
        needle = self.row_filter.lower()
        last = self._found
        if last is not None and last[0] is ordered and last[1] == show_bad and last[2] in needle:
            pool = last[3]  # a longer find keeps a subset of the rows it kept: narrow those
        else:
            pool = [pair for pair in ordered if show_bad or not pair[0][2].bad]
        found = [pair for pair in pool if needle in pair[1]] if needle else pool
        self._found = (ordered, show_bad, needle, found)
        return [row for row, _hay in found]

    def _ordered(self) -> list[tuple[Row, str]]:
        """Every offer's row with its haystack, sorted: once per offers list and sort, so a
        keystroke in the find input only filters."""
        offers = self.host.offers
        if self._base_of is not offers:
            self._base_of = offers
            self._base = [((str(r.offer.id), None, r), _haystack(r)) for r in offers]
            self._bad = sum(r.bad for r in offers)
            self._order_state = None
        state = (self.sort_key, self.sort_reverse)
        if self._order_state != state:
            self._order_state = state
            self._order = self.sort_items(self._base, lambda pair: pair[0][2])
        return self._order

    def _sorted(self, rows: list[Row]) -> list[Row]:
        return rows  # build_rows made them in order

    def total_rows(self, built: list[Row]) -> int:
        show_bad = self.show_bad
        return sum(1 for pair in self._ordered() if show_bad or not pair[0][2].bad)

    def row_cells(self, record: Any) -> list[Text]:
        offers = self.host.offers
        if self._cells_of is not offers:  # a new list: its offers are new objects
            self._cells_of, self._cell_cache = offers, {}
        hit = self._cell_cache.get(id(record))
        if hit is not None and hit[0] is record:
            return hit[1]
        cells = offer_cells(record)
        if len(self._cell_cache) >= CELL_CACHE:  # the oldest out: rows drawn long ago
            del self._cell_cache[next(iter(self._cell_cache))]
        self._cell_cache[id(record)] = (record, cells)
        return cells

    def title(self) -> str:
        self._ordered()  # counts the bad ones of this offers list
        hidden = 0 if self.show_bad else self._bad
        shown = len(self._rows)
        mode = rank_mode(self.host.offers)
        return f"1 Offers ({shown}{f', {hidden} bad hidden' if hidden else ''}{mode})"

    def selected_offer(self) -> RankedOffer | None:
        rec = self.selected()
        return rec if isinstance(rec, RankedOffer) else None

    # -- actions ---------------------------------------------------------------------------

    def action_deploy(self) -> None:
        host = self.host
        ranked = self.selected_offer()
        if ranked is None or not host.guard():
            return
        o = ranked.offer
        min_rate = host.min_rate_for(o.dph_total)
        body = Text()
        body.append(f"{o.gpu_name} x{o.num_gpus} on machine {o.machine_id} ")
        body.append(f"({sanitize_line(o.geolocation or '?', 60)})\n")
        body.append(f"price ${o.dph_total:.4f}/h", style="bold")
        body.append(f"  → min_rate {min_rate:.0f} proofs/h", style="bold")
        body.append(f" (max ${host.config.fleet.max_cost_per_proof}/proof)\n")
        body.append(f"expected {fmt(ranked.expected_rate, '.0f')} proofs/h ({ranked.rate_source})")
        if ranked.ranked_by == RANKED_BY_TIME:
            body.append(f"\n{ranked.rank_note}", style="bold yellow")
        if ranked.bad:
            body.append("\nthis machine is on the bad list", style="bold red")

        def done(ok: bool | None) -> None:
            if ok:
                self.post_message(SendCommand("deploy", f"deploy offer {o.id}", {"offer_id": o.id}))

        host.ask(ConfirmScreen(f"Rent offer {o.id}?", body, "Rent"), done)

    def action_ignore(self) -> None:
        ranked = self.selected_offer()
        if ranked is None or not self.host.guard():
            return
        o = ranked.offer
        ask_ignore(self, o.machine_id, o.gpu_name, o.geolocation)

    def action_edit_filter(self) -> None:
        host = self.host

        def valid(text: str) -> str | None:
            try:
                build_search_body(text)
            except QueryError as exc:
                return str(exc)
            return None

        def done(text: str | None) -> None:
            if text is not None:
                self.post_message(self.FilterChosen(text))

        host.ask(
            PromptScreen("Vast offer filter (this view)",
                         Text("vastai query syntax, e.g. gpu_name=RTX_4090"),
                         value=host.view_filter, validate=valid, button="Search",
                         max_chars=MAX_FILTER_CHARS),
            done,
        )  # fmt: skip

    def action_toggle_bad(self) -> None:
        self.show_bad = not self.show_bad
        self.refill()
        self.post_message(TitleChanged())


def ask_ignore(pane: TablePane, machine: int, gpu: str | None, where: str | None) -> None:
    """The ignore prompt, shared by the offers and instances panes."""
    host = pane.host
    default = f"Not good enough ({gpu}, {sanitize_line(where or '?', 60)})"

    def done(reason: str | None) -> None:
        if reason:
            pane.post_message(
                SendCommand(
                    "ignore", f"ignore machine {machine}", {"machine_id": machine, "reason": reason}
                )
            )

    host.ask(
        PromptScreen(
            f"Ignore machine {machine}?",
            Text(
                "The machine (not the host account) goes on the bad list; its live "
                "instances are destroyed. Reason:"
            ),
            value=default,
            button="Ignore",
            max_chars=REASON_MAX_CHARS,
        ),
        done,
    )


def rank_mode(offers: list[RankedOffer]) -> str:
    """The tab's word on the order (issue 43): nothing while offers are ranked by $/proof, as
    always; said when urgent work ranked them by when they prove (the rank is the list's:
    every offer of it is marked alike)."""
    if offers and offers[0].ranked_by == RANKED_BY_TIME:
        return ", by when it proves: work is urgent"
    return ""


def known_cell(ranked: RankedOffer) -> Text:
    """The machine's own last rate; an aborted benchmark's partial pace marked * (yellow)."""
    known = ranked.known_rate
    if known is not None and ranked.rate_source == "partial":
        return t(f"{known:.0f}*", "bold yellow")
    return t(fmt(known, ".0f"), "bold" if known else "dim")


def offer_cells(ranked: RankedOffer) -> list[Text]:
    o = ranked.offer
    cpp = ranked.on_demand_cost_per_proof
    bid = None if ranked.bid is None else ranked.bid.cost_per_proof
    chosen = "green" if ranked.viable else ("yellow" if cpp is not None else "dim")
    return [
        t(o.gpu_name, gpu_style(o.gpu_name)),
        t(o.num_gpus),
        t(f"{o.dph_total:.3f}"),
        t(fmt(cpp, ".4f"), "dim" if ranked.as_bid else chosen),
        t(f"{ranked.min_rate:.0f}"),
        known_cell(ranked),
        t(fmt(bid, ".4f"), chosen if ranked.as_bid else "dim"),
        t(fmt(o.cpu_ram_gb, ".0f"), ram_style(o.cpu_ram_gb, o.num_gpus)),
        t("BAD" if ranked.bad else "", "bold red"),
        t(fmt(o.gpu_ram_gb, ".0f")),
        t(fmt(o.cpu_cores, ".0f")),
        t(short_cpu(o.cpu_name)),
        t(fmt(o.pcie_bw, ".1f")),
        t(fmt(o.inet_down, ".0f")),
        t(fmt(None if o.reliability is None else o.reliability * 100, ".1f")),
        t(o.geolocation),
        t(o.machine_id, "dim"),
        t(o.id, "dim"),
    ]


def _haystack(ranked: RankedOffer) -> str:
    o = ranked.offer
    return " ".join(
        str(x).lower()
        for x in (o.gpu_name, o.geolocation, o.cpu_name, o.machine_id, o.id, o.num_gpus)
    )


def gpu_style(name: str) -> str:
    if any(k in name for k in ("5090", "4090", "PRO 6000", "H100", "H200", "B200", "5070")):
        return "green"
    if any(k in name for k in ("A100", "4080", "4070", "A6000", "PRO 4000")):
        return "yellow"
    if "3090" in name:
        return "dark_orange"
    return "red"


def ram_style(ram_gb: float | None, n: int) -> str:
    if not ram_gb:
        return "dim"
    per = ram_gb / max(1, n)
    if per >= 300:
        return "green"
    if per >= 240:
        return "yellow"
    return "dark_orange" if per >= 128 else "red"


def short_cpu(name: str | None) -> str:
    if not name:
        return "-"
    name = re.sub(r"\b\d+-Core\b", "", name)  # the Cores column says how many
    for word in ("Processor", "CPU", "(R)", "(TM)", "Core"):
        name = name.replace(word, "")
    return " ".join(name.split())  # the column cuts it, as wide as the terminal lets it be
