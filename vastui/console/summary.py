"""The summary strip: the fleet against its target and why it is not there, what it costs and
proves (measured, or labelled as the benchmarks' estimate), what it has spent, and the
console's mode. Two lines: the numbers, then the engine's reason when below target."""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual.widgets import Static

from vastui.console.cells import age, money
from vastui.console.snapshot import Snapshot
from vastui.domain.delivery import CUZK, Delivery
from vastui.domain.engine_state import EngineStatus
from vastui.domain.timefmt import iso_utc
from vastui.engine.spend import SPENT_MEANS
from vastui.sanitize import sanitize_line

# What each part of the strip means (help shows this).
STRIP_HELP = (
    ("SIM ATTACHED DETACHED …", "simulated cloud; console attached to a headless engine; "
     "that engine is gone (commands refused); DRY-RUN; READ-ONLY; NO ENGINE"),
    ("workers 2/3", "live workers (with rents in flight) / the engine's target"),
    ("prove 2 bench 1 …", "workers per stage (stages with none are left out): proving, "
     "benchmark, fetch (setup and paramfetch), load (Vast still starting it); pool and outbid "
     "are stopped workers (the warm pool, a bid a higher one stopped): they prove nothing and "
     "bill their disk only; ✗ destroyed"),
    ("$1.70/h of $5", "what the running fleet costs per hour (rents in flight included, stopped "
     "workers not), of its cap (fleet.max_total_dph)"),
    ("52 p/h $0.0150/paid (60m)", "the headline: proofs the fleet delivered over the last 60 "
     "min (curio's record of its PSProve tasks) per hour, and every dollar the fleet was billed "
     "over those 60 min (GPU, disks, bandwidth) per paid proof; '/p cuzk' when no curio cluster "
     "is read (cuzk's counters, no payments known). The same figures as `vastui status`, the "
     "metrics and the instance detail; they move only when the engine counts again"),
    ("cap 146", "capacity: proofs/h the proving workers could prove kept full (each one's rate "
     "measured at full feed in production, else its benchmark's)"),
    ("stopped 1 $0.01/h", "workers stopped in the warm pool or outbid: the storage they bill"),
    ("spent $4.10 today", f"{SPENT_MEANS}: today (UTC); all time; on rejected workers "
     "(destroyed before they proved)"),
    ("spent $4.10/$50 today", "with a daily budget (fleet.max_daily_spend): yellow from 80 %, "
     "red once reached (nothing more is rented until midnight UTC)"),
    ("credit $87.20", "the Vast account's credit as the engine last read it; red when out"),
    ("below target: …", "why the engine is not renting: no viable offer (the best one and its "
     "expected $/proof against the maximum), the $/h cap, the benchmark concurrency cap, "
     "dry-run, an API error"),
    ("cluster 3 waiting 5 claimed …", "curio's cluster as the engine last read it: PSProve tasks "
     "waiting and claimed, workers draining (⤓); red when it cannot be read"),
    ("auto 1–10 60 req/h 62% busy", "fleet.target_workers = \"auto\": the target's bounds, "
     "the market's demand for the cluster (requests per hour its request task asked), the "
     "share of the proving workers' measured capacity the cluster's work used over the window, and "
     "requests no worker has claimed (yellow: every worker is full; the target rises if it "
     "lasts)"),
    ("CUT OFF 12m", "the controller is cut off from its workers (their tunnel to the Lotus API "
     "and curio's database is down) for 12 min: they wait to prove, no machine is blamed"),
    ("vast 12s / engine ♥ 2s", "time since the engine last listed instances on Vast / "
     "since the attached engine's last heartbeat"),
)  # fmt: skip


@dataclass(frozen=True)
class SpendView:
    today: float
    total: float
    rejected: float


@dataclass(frozen=True)
class StripState:
    snapshot: Snapshot
    status: EngineStatus | None
    spend: SpendView | None
    badges: tuple[tuple[str, str], ...]
    freshness: tuple[str, float, float] | None  # (label, seconds, warn above)
    # the engine this console attached to is gone, and why (its status is then only history)
    detached: str | None = None


def strip_text(s: StripState) -> Text:
    snap, status = s.snapshot, s.status
    counts = snap.counts()
    line = Text()
    # The mode first: at 80 columns a DETACHED console must still say so.
    for badge, style in s.badges:
        line.append(f" {badge} ", style=style)
        line.append(" ")
    workers = sum(counts[k] for k in ("running", "benchmarking", "fetching", "loading"))
    if status is not None:
        short = status.workers < status.target
        line.append("workers ", style="bold")
        line.append(f"{status.workers}/{status.target}", style="bold yellow" if short else "bold")
    else:
        line.append(f"workers {workers}", style="bold")
    for name, key, style in (
        ("prove", "running", "green"),
        ("bench", "benchmarking", "yellow"),
        ("fetch", "fetching", "cyan"),
        ("load", "loading", "blue"),
        ("pool", "pooled", "dim"),
        ("outbid", "outbid", "magenta"),
    ):
        if counts[key]:
            line.append(f" {name} ")
            line.append(f"{counts[key]}", style=f"bold {style}")
    if counts["killed"]:
        line.append(f" ✗{counts['killed']}", style="red")
    if status is not None and status.cut_off is not None:
        lasted = max(0.0, status.updated_at - (status.cut_off_since or status.updated_at))
        line.append(" │ ", style="dim")
        line.append(f"CUT OFF {age(lasted)}", style="bold red")
    line.append(" │ ", style="dim")
    delivered = status.delivery if status is not None else None
    if status is not None and status.dph is not None:
        dph = status.dph
    else:  # no engine status: the running workers of the snapshot
        dph = sum(r.dph_total or 0.0 for r in snap.instances
                  if not r.killed and r.stopped_since is None)  # fmt: skip
    line.append(f"${dph:.2f}/h ", style="bold")
    if status is not None and status.dph_cap is not None:
        line.append(f"of ${status.dph_cap:g} ", style="dim")
    line.append_text(headline_text(delivered))
    # before the spend: at 160 columns the spend's tail is what is cut
    if status is not None and status.credit is not None:
        out = status.credit <= 0 or status.reason_kind == "no_credit"
        line.append("│ ", style="dim")
        line.append(f"credit {money(status.credit)} ", style="bold red" if out else "")
    if s.spend is not None:
        line.append("│ ", style="dim")
        budget = status.daily_budget if status is not None else None
        if budget:
            share = s.spend.today / budget
            style = "bold red" if share >= 1 else "yellow" if share >= 0.8 else ""
            line.append(f"spent {money(s.spend.today)}/{money(budget)} today, ", style=style)
        else:
            line.append(f"spent {money(s.spend.today)} today, ")
        line.append(f"{money(s.spend.total)} all, ", style="dim")
        line.append(
            f"{money(s.spend.rejected)} rejected ", style="yellow" if s.spend.rejected else "dim"
        )
    if s.freshness is not None:
        label, seconds, warn = s.freshness
        line.append(f"│ {label} {age(seconds)}", style="yellow" if seconds > warn else "dim")
    line.append("\n")
    if snap.history is not None:
        line.append(f"history: {snap.history}", style="bold magenta")
        if status is not None:
            line.append(f" (its engine's last cycle {iso_utc(status.updated_at)})", style="dim")
        line.no_wrap = True
        line.overflow = "ellipsis"
        return line
    if s.detached is not None:
        # what the gone engine last published is history, not the fleet's state
        line.append(f"no engine ({sanitize_line(s.detached, 120)}): nothing supervises the fleet",
                    style="bold red")  # fmt: skip
        if status is not None and status.reason:
            line.append(f" · it last said: {sanitize_line(status.reason, 200)}", style="dim")
        line.no_wrap = True
        line.overflow = "ellipsis"
        return line
    line.append_text(reason_text(status))
    cluster = cluster_text(status)
    if cluster is not None:
        line.append(" │ ", style="dim")
        line.append_text(cluster)
    # Two lines whatever the width: cut, never wrapped (the reason must stay in view).
    line.no_wrap = True
    line.overflow = "ellipsis"
    return line


def headline_text(d: Delivery | None) -> Text:
    """Delivered proofs/h and $ per paid proof over the stated window, capacity apart, and the
    stopped workers' storage (vastui/domain/delivery.py: the same record everywhere)."""
    if d is None:
        return Text("p/h - ", style="dim")
    text = Text()
    text.append(f"{d.proofs_per_hour:.0f} p/h ", style="bold")
    if d.source == CUZK:
        cpp = d.cost_per_computed
        text.append(f"{'-' if cpp is None else f'${cpp:.4f}'}/p cuzk ")
    else:
        cpp = d.cost_per_paid
        text.append(f"{'-' if cpp is None else f'${cpp:.4f}'}/paid ")
    text.append(f"({d.window_min:.0f}m) ", style="dim")
    text.append(f"cap {d.capacity:.0f} ", style="dim")
    if d.stopped:
        text.append(f"stopped {d.stopped} ${d.stopped_dph:.2f}/h ", style="dim")
    return text


def reason_text(status: EngineStatus | None) -> Text:
    """The engine's one persistent reason, or what it is doing."""
    if status is None:
        return Text("engine status: not published yet", style="dim")
    reason = sanitize_line(status.reason or "", 300)
    if status.reason_kind == "at_target":
        return Text(reason or f"at target ({status.target} workers)", style="green")
    if status.reason_kind is None:  # below target and nothing in the way: renting
        return Text(reason or f"renting towards {status.target} workers", style="cyan")
    if status.reason_kind == "target_zero":
        return Text(reason or "target is 0: the engine rents nothing", style="dim")
    text = Text("below target: ", style="bold yellow")
    text.append(reason or status.reason_kind)
    return text


def cluster_text(status: EngineStatus | None) -> Text | None:
    """curio's cluster in a few words (the engine's status carries its last reading)."""
    c = status.cluster if status is not None else None
    if not c or c.get("state") == "off":
        return None
    if c.get("state") == "error":
        return Text("cluster unreadable", style="bold red")
    text = Text("cluster ", style="bold")
    if c.get("psprove_waiting") is not None:
        text.append(f"{c.get('psprove_waiting')} waiting {c.get('psprove_claimed')} claimed")
    if c.get("draining"):
        text.append(f" ⤓{c.get('draining')} draining", style="bold magenta")
    overdue = c.get("overdue")
    if isinstance(overdue, int) and overdue > 0:
        text.append(f" {overdue} past deadline", style="bold red")
    auto = c.get("autoscale")
    if isinstance(auto, dict):
        text.append(" · ")
        text.append_text(auto_text(auto))
    return text


def auto_text(auto: dict[str, object]) -> Text:
    """The automatic target in a few words: its bounds, the fleet's utilisation, the requests
    nobody has claimed (yellow: the fleet is full)."""
    text = Text(f"auto {auto.get('min_workers')}–{auto.get('max_workers')}", style="bold")
    demand = auto.get("demand_per_h")
    if isinstance(demand, int | float):
        text.append(f" {demand:.0f} req/h")
    util = auto.get("utilisation")
    if isinstance(util, int | float):
        text.append(f" {util:.0%} busy")
    unclaimed = auto.get("unclaimed")
    if isinstance(unclaimed, int) and unclaimed > 0:
        text.append(f" {unclaimed} unclaimed", style="bold yellow")
    margin = auto.get("margin_usd_per_h")
    if isinstance(margin, int | float):
        text.append(f" margin ${margin:+.2f}/h", style="green" if margin >= 0 else "bold red")
    return text


class SummaryStrip(Static):
    """Always on top; the app gives it a new StripState when anything changes."""

    def show(self, state: StripState) -> None:
        self.update(strip_text(state))
