"""The original's policy on the same market, as issue 11 defines it (original-system.md §1.6,
§1.7, §3): an operator deploys the cheapest $/h offers that pass the default filter, with
min_rate = ceil($/h ÷ max $/proof) (the deploy dialog's formula: ``pricing.min_rate``);
every worker runs the full benchmark and posts its rate to /bench-done, which destroys it below
min_rate; a monitor every 60 s destroys instances past the param fetch (90 min) and benchmark
(45 min) timeouts. No performance memory, no automatic bans: a machine that failed is as
rentable as any other.

The operator (ASSUMPTION, generous): every ``check_s`` they look at the dashboard, destroy the
workers that visibly stopped (host offline on Vast, cuzk dead or hung: GPU at 0%) and deploy the
cheapest offers again up to the target (Bulk Deploy). Between looks, nothing replaces a worker.
With ``ignore_failed`` they also press Ignore on every machine whose worker failed its benchmark
or a timeout (the bad-hosts list by hand): the original with a human's memory, for comparison.

``fair`` is the original at its best, as the seed and original-system.md describe it (issue 18),
and the opponent the headline compares with: Ignore pressed on every machine that failed its
benchmark, a timeout or production (its GPU idle), "Hide bad hosts" on (the default: ignored
machines are never offered again), the Known Perf column read (host_perf: the best rate a
machine ever posted; an offer whose known rate is below its min_rate is passed over, and the
machines known to pay are deployed first, cheapest per proof), and a crashed benchmark that
posts 0 proofs/h at once and is destroyed by /bench-done instead of waiting out the timeout.
The fair original also rents through vastui's filter with vastui's worker timings: generous.

``literal`` is the original as its source runs (issue 43 item 5): its own offer filter and disk
(original-system.md:141, 148; economics_world.ORIGINAL_FILTER), its own benchmark
(economics_worker.literal_bench: 12 sequential proofs after a daemon restart, the rate over the
batch's time, a crash posting nothing), a new daemon for production, and its operator's Ignore
as the UI offers it: the Ignore button sits on each offers-table row beside the Known Perf badge,
which is red ("bad") below 25 proofs/h (ui.html:1138-1141 @ misc/cuzk-rseal-merge), and Ignore
writes "Not good enough (<gpu>, <location>)" (ui.html:1318; original-system.md:156, 160).
ASSUMPTION (INFERRED from that reason and that badge): at each look the operator presses
Ignore on the rows whose badge is red, and on no other; a machine that crashed posted no rate
and shows no badge. "Hide bad hosts" is on (its default), Bulk Deploy takes the cheapest $/h.
"""

from __future__ import annotations

from collections.abc import Callable

from bench.economics_fleet import Clock, Fleet, Outcome, Worker
from bench.economics_worker import (
    ORIGINAL_PROD_RESTART_S,
    PROVE_START_S,
    Production,
    literal_bench,
    original_bench,
)
from bench.economics_world import ORIGINAL_DISK_GB, ORIGINAL_FILTER, Market
from vastui.config import Config
from vastui.pricing import min_rate
from vastui.vast.models import Offer

MONITOR_FIRST_S = 10.0  # runMonitor: first cycle after 10 s, then every 60 s
MONITOR_S = 60.0
PARAM_TIMEOUT_S = 90 * 60.0
BENCH_TIMEOUT_S = 45 * 60.0
OPERATOR_CHECK_S = 3600.0
KNOWN_PERF_BAD_BELOW = 25.0  # the offers table's red badge (ui.html:1140)


class OriginalPolicy:
    def __init__(
        self,
        market: Market,
        config: Config,
        *,
        check_s: float = OPERATOR_CHECK_S,
        ignore_failed: bool = False,
        fair: bool = False,
        known_by_slice: bool = False,
        literal: bool = False,
        sequential_bench: bool = True,
    ) -> None:
        self.config = config
        self.check_s = check_s
        self.fair = fair
        self.literal = literal
        self.sequential_bench = sequential_bench  # literal: its batch run one proof at a time
        self.ignore_failed = ignore_failed or fair
        self.ignored: set[int] = set()
        # host_perf: the best rate posted per (machine, GPU model, number of GPUs), its primary
        # key (cmd/vast-manager/main.go:153-161 @ misc/cuzk-rseal-merge). The offers table
        # shows one row per machine: getHostPerfs scans the table with no ORDER BY into a map
        # by machine_id, so the last row wins (SQLite's primary-key order: the largest
        # (gpu_name, num_gpus)) (main.go:1237-1251, 1291). ``known_by_slice``: that row, its
        # rate per GPU times the offer's GPUs (the operator at best reads the GPU count beside
        # it); otherwise the bench's first model, the best rate of the machine as it is.
        self.known: dict[int, dict[tuple[str, int], float]] = {}
        self.known_by_slice = known_by_slice
        self.idle: set[int] = set()  # machines whose worker the operator found stopped
        self.clock = Clock()
        if literal:
            self.fleet = Fleet(market, config, self.clock, ORIGINAL_FILTER, ORIGINAL_DISK_GB)
        else:
            self.fleet = Fleet(market, config, self.clock)

    def run(self, hours: float) -> Outcome:
        self.clock.every(MONITOR_FIRST_S, MONITOR_S, self.monitor)
        self.clock.every(0.0, self.check_s, self.operator)
        self.clock.run_until(hours * 3600.0)
        return self.fleet.figures(self.clock.now).with_bans(len(self.ignored))

    # -- the operator ------------------------------------------------------------------------

    def operator(self) -> None:
        now = self.clock.now
        for w in self.fleet.live:
            if self._visibly_stopped(w, now):
                if w.rental.alive_at(now):  # its host is up: the GPU went idle, its fault
                    self.idle.add(w.offer.machine_id)
                self.fleet.mark_killed(
                    w, "manual", "operator: worker stopped (offline or idle GPU)"
                )
        if self.ignore_failed:
            self.ignored |= {
                w.offer.machine_id
                for w in self.fleet.workers.values()
                if w.rec.kill_kind
                in ("bench_below_min", "deadline_paramfetch", "deadline_benchmark")
            }
        if self.fair:
            self.ignored |= self.idle
        if self.literal:
            self.ignored |= {
                mid
                for mid in self.known
                if (rate := self._shown_perf(mid)) is not None and rate < KNOWN_PERF_BAD_BELOW
            }
        self._deploy(now)

    def _visibly_stopped(self, w: Worker, now: float) -> bool:
        if now >= w.rental.running and not w.rental.alive_at(now):
            return True  # Vast shows the host offline
        p = w.production
        return w.rec.state == "proving" and p is not None and now >= p.stopped_at()

    def _deploy(self, now: float) -> None:
        """Bulk Deploy of the cheapest offers (the offers table sorts by $/h), up to target."""
        missing = self.config.fleet.target_workers - len(self.fleet.live)
        if missing <= 0:
            return
        offers = [o for o in self.fleet.available(now) if o.machine_id not in self.ignored]
        cheapest = sorted(offers, key=lambda o: (o.dph_total, o.id))
        if self.fair:
            cheapest = self._by_known_perf(cheapest)
        for offer in cheapest[:missing]:
            rate = min_rate(offer.dph_total, self.config.fleet.max_cost_per_proof)
            self._schedule(self.fleet.rent(offer, rate))

    def _by_known_perf(self, offers: list[Offer]) -> list[Offer]:
        """The offers table read with its Known Perf column: machines known to pay first (by
        $/proof at their known rate), then the unknown by $/h; known too slow, passed over."""
        cap = self.config.fleet.max_cost_per_proof
        good: list[tuple[float, int, Offer]] = []
        unknown: list[Offer] = []
        for o in offers:
            rate = self._known_rate(o)
            if rate is None:
                unknown.append(o)
            elif rate >= min_rate(o.dph_total, cap):
                good.append((o.dph_total / rate, o.id, o))
        return [o for _, _, o in sorted(good)] + unknown

    def _shown_perf(self, machine_id: int) -> float | None:
        """The bench_rate the offers table's Known Perf badge shows for the machine: its last
        scanned host_perf row (see ``known``), as posted."""
        rows = self.known.get(machine_id)
        return max(rows.items())[1] if rows else None

    def _known_rate(self, o: Offer) -> float | None:
        rows = self.known.get(o.machine_id)
        if not rows:
            return None
        if not self.known_by_slice:
            return max(rows.values())
        (_, n), rate = max(rows.items())  # the row the table shows
        return rate / max(1, n) * o.num_gpus

    # -- the worker and the controller's API ---------------------------------------------

    def _schedule(self, w: Worker) -> None:
        r = w.rental
        self._at(w, r.paramfetch_start, self._register)  # /register, then paramfetch
        if r.paramfetch_end is None:
            return
        self._at(w, r.paramfetch_end, self._param_done)
        proofs = self.config.fleet.bench_proofs
        if self.literal:
            w.bench = literal_bench(r, proofs, self.sequential_bench)
        else:
            w.bench = original_bench(r, proofs, crash_posts_zero=self.fair)
        self._at(w, r.paramfetch_end + w.bench.duration, self._bench_done)

    def _at(self, w: Worker, t: float, fn: Callable[[Worker], None]) -> None:
        if w.rental.alive_at(t):
            self.clock.at(t, fn, w)

    def _register(self, w: Worker) -> None:
        if w.live:
            self.fleet.set_stage(w, "paramfetch")  # state registered: fetching params

    def _param_done(self, w: Worker) -> None:
        if w.live:
            self.fleet.set_stage(w, "benchmark")  # state params_done: benchmarking

    def _bench_done(self, w: Worker) -> None:
        """/bench-done: passed = rate >= min_rate; a failure is destroyed at once."""
        if not w.live or w.bench is None or w.bench.rate is None:
            return
        rate, min_rate = w.bench.rate, w.rec.min_rate or 0.0
        if rate > 0:  # host_perf upserted on pass and fail, MAX(old, new)
            rows = self.known.setdefault(w.offer.machine_id, {})
            key = (w.offer.gpu_name, w.offer.num_gpus)
            rows[key] = max(rate, rows.get(key, 0.0))
        if rate < min_rate:
            reason = f"bench_rate {rate:.1f} below min_rate {min_rate:.1f}"
            self.fleet.mark_killed(w, "bench_below_min", reason)
            return
        self.fleet.set_stage(w, "proving")
        r = w.rental
        start = self.clock.now + PROVE_START_S
        if self.literal:
            start += ORIGINAL_PROD_RESTART_S
        w.production = Production(start, r.interval, r.fill, r.hidden, r.offline)

    # -- the monitor ---------------------------------------------------------------------

    def monitor(self) -> None:
        """runMonitor steps 2 and 3: the param fetch and benchmark timeouts."""
        now = self.clock.now
        for w in self.fleet.live:
            rec = w.rec
            if rec.state == "paramfetch" and now - (rec.paramfetch_at or now) > PARAM_TIMEOUT_S:
                self.fleet.mark_killed(w, "deadline_paramfetch", "param fetch timeout (90min)")
            elif rec.state == "benchmark" and now - (rec.benchmark_at or now) > BENCH_TIMEOUT_S:
                self.fleet.mark_killed(w, "deadline_benchmark", "benchmark timeout (45min)")
