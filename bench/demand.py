"""The fleet against the market's work (issue 30, item 5): vastui's automatic target against the
best fixed target chosen in hindsight for each demand curve (the operator at their best).

The market is the simulator's own (vastsim/proofsvc.py ``Market`` with vastsim/demand.py
``FiniteDemand``: the curve, work slots from challenge proofs, the 45-minute deadline and its
penalty), called as curio calls it. curio's cluster is modelled as curio runs it:

* the request task (tasks/proofshare/task_request.go): when the requests no node has claimed
  number ``RequestQueueLowWaterMark`` (5) or fewer, it asks for up to the high water mark (8),
  polls and creates asks until they are matched, stopping at a 429;
* each proving worker claims what is unclaimed up to its MaxPending (10), downloads each request
  (~51 MB at its ``inet_down``) and proves it; with k proofs in flight a worker proves k/L per
  hour (L: a proof's latency at MaxPending, MaxPending ÷ its rate): half fed is half as
  productive, which is what a pipelined GPU does;
* a completion is submitted at once; the market pays it, counts it as a challenge, or answers
  410 for a request taken back at its deadline.

The fleet: every engine step (60 s) the target (``autoscale.decide`` on what the engine reads of
the cluster, or a fixed number); at most one rent per step; a rental downloads the ~135 GiB of
parameters at its ``inet_down``, loads and benchmarks (20 min), and fails its benchmark with
``BENCH_FAIL``; the surplus goes not-proving first, then the worst $/proof, drained (no new
claims) until it holds nothing or 40 minutes. Money: $/h × rented time, plus bandwidth at the
offer's $/GB (the parameters once, each request's download). Each rental's machine is drawn from
the world seed and its index, the same for every policy (common random numbers), from ranges of
their own, not from vastui's priors.

The warm pool (vastui/engine/pool.py, the engine's own ``pool.keep``): a drained surplus worker
is stopped, billing its storage, when the pool keeps it; a scale-up starts a pooled worker
(the cheapest per proof) before it rents, proving again ``RESTART_S`` later (its parameters and
benchmark on its disk); kept past ``warm_pool_max_h`` it is destroyed. ``scale_up_minutes.warm``
is the median over starts from the pool of the minutes from the target's rise to the worker
proving again; ``.cold`` a step up in demand to the first new rental proving.

A volume-aware figure beside $/paid proof: the margin (paid proofs × ``USD_PER_PAID``, an
ASSUMPTION, less the spend), auto's against the fixed target that earned the most in hindsight.

Machines that fail in production (ASSUMPTION: ``DIE_SHARE`` of rentals, drawn per rental for
every policy alike, die ``DIE_AFTER_H`` after they start proving): the dead node's curio fails
its tasks back to the cluster at once (harmony retries them elsewhere), and the instance bills
until someone destroys it. vastui's engine does within its step (the daemon's death is a
strike); the fair original (vast-manager has no production check, original-system.md §1.6)
only when its operator next looks, every 60 or 15 minutes, and rents replacements then (Bulk
Deploy, all at once), as it does for a failed benchmark. It runs at the best fixed target
chosen for vastui's fixed runs.

A start from the pool Vast queues (``START_QUEUED``, ASSUMPTION): the worker counts as on its
way until the engine's ``pool.expired`` destroys it (``warm_pool_start_min``), then the fleet
rents.

One file: the market, curio's cluster and the fleet are one world stepped together on one
clock (a tick moves work between all three), and its figures are read off that world.

Run as part of ``python -m bench --only economics [--quick]`` (its figures are
``economics.demand.*``).
"""

from __future__ import annotations

import math
import random
import statistics
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from bench.common import Goal, progress
from vastsim.demand import ESTABLISHED_BALANCE, FiniteDemand, parse_curve, rivals_for
from vastsim.proofsvc import Market
from vastui.config import Config
from vastui.domain.worker import InstanceRecord
from vastui.engine import autoscale, demandshift, pool
from vastui.engine.engine import autoscale_settings

PREFIX = "economics.demand"
WALLET = "f1benchdemandwallet"
PRICE = 5 * 10**15  # 0.005 FIL, curio's suggested ask (Snark-Market.md "Pricing")
# What a FIL is worth in dollars (ASSUMPTION: no FIL price is a fact of this world; the margin's
# sign turns on it): the operator's [fleet] fil_usd. A paid proof at the ask above earns $0.015.
FIL_USD = 3.0
USD_PER_PAID = PRICE / 10**18 * FIL_USD
TICK_S = 20.0  # the workers' claims and completions
POLL_S = 3.0  # the request task's polls (ProofRequestPollInterval, task_request.go)
STEP_S = 60.0  # the engine's step
MAX_PENDING = 10  # [Cuzk] MaxPending (vastui's default)
LOW_WATER, HIGH_WATER = 5, 8  # task_request.go:27-28
PARAMS_GB = 135 * 1.073741824  # 135 GiB of parameters per rental (cuzk-verified.md)
REQUEST_GB = 0.051  # one request's download (cuzk-verified.md, "Where a proofshare worker ...")
LOAD_S = 10 * 60.0  # the image pulled and started
BENCH_S = 20 * 60.0
# A pooled worker's start to proving again: Vast's start, the set-up, the parameters checked on
# its disk (the .params trusted, TRUST_PARAMS=1: SnapDeals' 33 GiB hashed), the benchmark skipped,
# the daemon and curio started, the engine's steps seeing it. 4 min is the simulated world's,
# measured end to end (tests/test_e2e_autoscale.py's cycle, the pool start to proving_at) at two
# speeds and extrapolated to no speed: a run's simulated seconds are the world's own plus the
# test machine's real overhead × the speed (60x: 319 s, 200x: 503 s → 240 s; 100x: 340 s, 300x:
# 604 s → 208 s). The larger is taken. Before TRUST_PARAMS, one run at 300x read 505 s to the
# start, overhead included (8.5 min, this constant's value until 2026-12-05).
RESTART_S = pool.RESTART_H * 3600.0  # the engine's own figure (vastui/engine/pool.py)
BENCH_FAIL = 0.15
SNAP_WORK = 1.6  # a Snap's work in PoRep-equivalents (_work)
# cuzk's pipeline (original-system.md §4, RTX 5070 Ti): one proof alone 88.9 s, pipelined 37.7 s
# a proof: with k proofs in flight a worker proves at pipeline(k) of its full rate,
# k (K + c) / (K (k + c)), K = MaxPending, c chosen so that pipeline(1) = 37.7 / 88.9
# (ASSUMPTION: the curve between one and MaxPending is not measured; this one is concave)
PIPE_ALONE = 37.7 / 88.9
PIPE_C = MAX_PENDING * (1 - PIPE_ALONE) / (MAX_PENDING * PIPE_ALONE - 1)
# ASSUMPTION: a start from the warm pool that Vast queues (resources_unavailable: the machine's
# GPUs were rented while it was stopped); no figure is published
START_QUEUED = 0.1
# ASSUMPTION: a share of rentals dies in production (a sticky CUDA error, a lost host), some
# hours into proving: the range of the neutral world's intermittent faults (economics_world.py)
DIE_SHARE = 0.15
DIE_AFTER_H = (1.0, 24.0)
ORIGINAL_LOOKS_MIN = (60, 15)  # the fair operator's look interval (economics_original.py)
DRAIN_MAX_S = 40 * 60.0  # the market's deadline less the drain margin
MAX_WORKERS = 10
HOURS_FULL, HOURS_QUICK = 48.0, 24.0
SEEDS_FULL, SEEDS_QUICK = (1, 2, 3), (1,)

# name → (curve spec with H for the run's hours, a new wallet). With the priced market (issue
# 43) a curve is every buyer's demand; the rivals take their share of it (``rivals_for``).
CURVES: dict[str, tuple[Callable[[float], str], bool]] = {
    "steady": (lambda h: "steady:60", False),
    "daily": (lambda h: "daily:70:0.8", False),
    "step_up": (lambda h: f"step:25:150:{h / 3:g}", False),
    "step_down": (lambda h: f"step:150:25:{h / 3:g}", False),
    "pulse": (lambda h: f"pulse:20:160:{h / 3:g}:{2 * h / 3:g}", False),
    # 6 h at 20/h, 6 h at 150/h, over and over: work that comes and goes within a day
    "bursts": (lambda h: "bursts:20:150:12", False),
    "new_wallet": (lambda h: "steady:100", True),
    # at fleet scale (tens of workers): a steady base with bursts, a daily cycle, a market that
    # dries up for a day (ASSUMPTION: shapes an operator of tens of workers meets; no market
    # history is published)
    "fleet_bursts": (lambda h: "bursts:900:2700:12", False),
    "fleet_daily": (lambda h: "daily:1800:0.6", False),
    "fleet_dry": (lambda h: f"pulse:1800:120:{h / 3:g}:{h / 3 + min(24.0, h / 2):g}", False),
}
FLEET_MAX_WORKERS = 60
# An operator who runs tens of workers holds the slots for them (ASSUMPTION: 1,000 slots,
# 50,000 challenge proofs; a slot holds one ask or one assigned proof, Snark-Market.md:163)
FLEET_BALANCE = 50 * 1000


def is_fleet(curve: str) -> bool:
    return curve.startswith("fleet_")


MARGIN = "economics.margin"
STEADY_CURVES = ("steady", "new_wallet")

GOALS = [
    Goal(f"{MARGIN}.summary.auto_vs_best_fixed.median", ">=", 1.1,
         "auto's margin ÷ the best-earning fixed target's in hindsight, median over runs"),
    Goal(f"{MARGIN}.summary.auto_vs_best_fixed.worst", ">=", 0.9, "the worst of them"),
    Goal(f"{MARGIN}.summary.runs_auto_loses_where_fixed_earns", "<=", 0,
         "runs where auto loses money while the best fixed target earns"),
    Goal(f"{MARGIN}.summary.detect_minutes.median", "<=", 10,
         "a demand step up (2x or more) to the target's first move"),
    Goal(f"{MARGIN}.summary.false_raises_per_week", "<=", 1,
         "raises of the target on steady curves after their first 6 h, per week"),
    Goal(f"{PREFIX}.summary.auto_vs_best_fixed_cost_ratio.median", "<=", 0.85,
         "auto ÷ the best fixed target in hindsight, $/paid proof, median over curves and seeds"),
    Goal(f"{PREFIX}.summary.auto_vs_best_fixed_cost_ratio.worst", "<=", 1.0, "the worst of them"),
    Goal(f"{PREFIX}.summary.missed_deadlines.auto_minus_best_fixed", "<=", 0,
         "missed deadlines, auto less the best fixed target (totals over the runs)"),
    Goal(f"{PREFIX}.summary.idle_share.auto.median", "<=", 0.15,
         "the idle share of proving GPU hours with auto"),
    Goal(f"{PREFIX}.summary.scale_up_minutes.warm.median", "<=", 5,
         "a step up to added capacity proving, from the warm pool"),
]  # fmt: skip


def pipeline(k: int) -> float:
    """The share of a worker's full rate it proves at with ``k`` proofs in flight."""
    if k <= 0:
        return 0.0
    k = min(k, MAX_PENDING)
    return k * (MAX_PENDING + PIPE_C) / (MAX_PENDING * (k + PIPE_C))


@dataclass
class Rental:
    """One rented worker: its machine (drawn) and what became of it."""

    k: int
    mu: float  # proofs/h at MaxPending in flight
    dph: float
    inet_down: float  # Mbps
    inet_cost: float  # $/GB
    rented_at: float
    ready_at: float  # setup and benchmark done
    passes: bool
    proving_since: float | None = None
    gone_at: float | None = None
    drain_deadline: float | None = None
    # each claimed request: [work left (PoRep-equivalents), cid, obtained_at, downloaded at]
    in_flight: list[list[Any]] = field(default_factory=list)
    requests: int = 0
    busy_s: float = 0.0  # ∫ pipeline(in flight) over proving time: its throughput used
    proving_s: float = 0.0
    storage_dph: float = 0.0  # what it bills stopped
    pooled_since: float | None = None  # stopped in the warm pool since
    pooled_s: float = 0.0  # closed episodes
    restarted_at: list[float] = field(default_factory=list)  # starts from the pool
    reproved_at: list[float] = field(default_factory=list)  # ... and proving again
    start_queued_at: float | None = None  # a start from the pool Vast queued, since
    dies_after_s: float | None = None  # proving time until it dies (None: it does not)
    dead_at: float | None = None

    @property
    def latency_s(self) -> float:
        return MAX_PENDING / self.mu * 3600.0

    def cost(self, end: float) -> float:
        until = self.gone_at if self.gone_at is not None else end
        stopped = self.pooled_s + (until - self.pooled_since if self.pooled_since else 0.0)
        hours = (until - self.rented_at - stopped) / 3600.0
        data = self.inet_cost * (PARAMS_GB + REQUEST_GB * self.requests)
        return self.dph * hours + self.storage_dph * stopped / 3600.0 + data

    def record(self, max_cost_per_proof: float) -> InstanceRecord:
        """The worker as the engine's store would hold it, for the engine's pool decision."""
        return InstanceRecord(
            vast_id=self.k + 1, state="proving", dph_total=self.dph,
            storage_dph=self.storage_dph, prod_rate=self.mu, inet_down=self.inet_down,
            inet_down_cost=self.inet_cost, min_rate=math.ceil(self.dph / max_cost_per_proof),
            pooled_since=self.pooled_since, pool_start_at=self.start_queued_at,
        )  # fmt: skip


def draw(world_seed: int, k: int, now: float) -> Rental:
    """Rental ``k`` of a world: the same machine whatever the policy that rents it."""
    rng = random.Random(world_seed * 1_000_003 + k * 7_919 + 11)
    mu = rng.uniform(25.0, 70.0)
    inet_down = rng.uniform(200.0, 2000.0)
    fetch_s = PARAMS_GB * 8000.0 / inet_down
    rental = Rental(
        k=k, mu=mu, dph=mu * rng.uniform(0.004, 0.0075), inet_down=inet_down,
        inet_cost=rng.uniform(0.0, 0.02), rented_at=now,
        ready_at=now + LOAD_S + fetch_s + BENCH_S, passes=rng.random() >= BENCH_FAIL,
    )  # fmt: skip
    # drawn after the rest, so the machines stay those of the runs before the pool: ~250 GB
    # at $0.05-0.30/GB/month (the simulated market's storage_cost range)
    rental.storage_dph = 250.0 * rng.uniform(0.05, 0.30) / 730.0
    dies, after_h = rng.random() < DIE_SHARE, rng.uniform(*DIE_AFTER_H)
    rental.dies_after_s = after_h * 3600.0 if dies else None
    return rental


@dataclass
class Run:
    cost: float
    paid: int
    computed: int
    challenges: int
    missed: int
    idle_share: float | None
    scale_up_min: float | None  # a step up to the first worker rented after it proving
    targets: list[tuple[float, int]]
    warm_up_min: float | None = None  # a step up to the first pooled worker started proving
    pool_starts: int = 0
    earned_usd: float = 0.0

    @property
    def cost_per_paid(self) -> float:
        return self.cost / self.paid if self.paid else math.inf

    @property
    def margin(self) -> float:
        """Dollars earned (the market's payments at FIL_USD) less spent: counts the volume
        that $/paid proof does not (a request this cluster does not take goes elsewhere)."""
        return self.earned_usd - self.cost


class World:
    """One run: the market, curio's cluster and the fleet under one policy."""

    def __init__(
        self,
        spec: str,
        new_wallet: bool,
        world_seed: int,
        hours: float,
        tick_s: float = TICK_S,
        pool_config: Config | None = None,
        look_s: float | None = None,
        priced: bool = True,
        balance: int | None = None,
    ) -> None:
        self.pool_config = pool_config  # the engine's warm pool (None: surplus destroyed)
        # the fair original's operator: acts only every look_s (None: vastui's engine, each step)
        self.look_s = look_s
        self.tick_s = tick_s
        self.t0 = 1_800_000_000.0
        self.t = self.t0
        self.end = self.t0 + hours * 3600.0
        self.world_seed = world_seed
        self.curve = parse_curve(spec)
        self.step_at = self.t0 + self.curve.at_h * 3600.0 if self.curve.kind != "steady" else None
        if self.curve.kind == "bursts":  # the first burst: half a period in
            self.step_at = self.t0 + self.curve.at_h * 1800.0
        if balance is None:
            balance = 0 if new_wallet else ESTABLISHED_BALANCE
        # the priced market (vastsim/demand.py Rivals): rivals' asks and capacity, a market
        # price that moves; off: every open ask takes the next request (the market until 43)
        self.demand = FiniteDemand(
            self.curve,
            seed=world_seed,
            balance=balance,
            start=self.t0,
            rivals=rivals_for(self.curve, world_seed) if priced else None,
        )
        self.market = Market(clock=lambda: self.t, seed=world_seed, pow_share=0.0,
                             policy=self.demand, lazy_data=True)  # fmt: skip
        self.queue: deque[tuple[str, float]] = deque()  # unclaimed: cid, obtained_at
        self.known: set[str] = set()
        self.requesting = False
        self.to_request = 0
        # the request task's runs: (start, end, when each request was obtained), as
        # harmony_task_history records bg:PShareRequest (its work_start, work_end) and
        # proofshare_queue its rows' obtained_at
        self.request_runs: deque[tuple[float, float, tuple[float, ...]]] = deque()
        self.run_start = 0.0
        self.run_times: list[float] = []  # when the run's requests were obtained
        self.rentals: list[Rental] = []
        self.done_times: deque[float] = deque()
        self.paid = self.computed = self.challenges = 0
        self.earned_usd = 0.0  # the market's payments, at FIL_USD
        # each completion's time and dollars (0 for a challenge), for the engine's window
        self.paid_times: deque[tuple[float, float]] = deque()
        # the request task's runs as vastui reads them (cluster.py _REQUEST_RUNS), for the
        # demand's change test; and the test itself, fed as the engine feeds it
        self.run_feed: list[demandshift.Run] = []
        self.watch = demandshift.Watch()
        self.pool_kills: list[str] = []  # pool.expired's kinds

    # -- curio's cluster -----------------------------------------------------------------

    def proving(self) -> list[Rental]:
        return [
            w for w in self.rentals
            if w.proving_since is not None and w.gone_at is None and w.pooled_since is None
            and w.dead_at is None
        ]  # fmt: skip

    def _deaths(self) -> None:
        """A worker dies after its drawn proving time (counted over its proving episodes): its
        node's curio fails its tasks back to the cluster, the instance bills on."""
        for w in self.proving():
            if w.dies_after_s is not None and w.proving_s >= w.dies_after_s:
                w.dead_at = self.t
                self._free(w)

    def _request_task(self) -> None:
        """The request task's polls within this tick, ProofRequestPollInterval apart (3 s,
        task_request.go: a tick's quantum would add up to a tick to each short run, and make
        a high demand read low)."""
        tick_t = self.t
        try:
            self._request_poll()
            while self.requesting and self.t + POLL_S < tick_t + self.tick_s:
                self.t += POLL_S
                self._request_poll()
        finally:
            self.t = tick_t

    def _request_poll(self) -> None:
        # curio runs on the workers: no node proving, nobody asks (and PShareRequest's
        # CanAccept wants the parameters on the node, task_request.go:124-135)
        if not self.proving():
            return
        if not self.requesting and len(self.queue) <= LOW_WATER:
            self.requesting, self.to_request = True, HIGH_WATER - len(self.queue)
            self.run_start, self.run_times = self.t, []
        if not self.requesting:
            return
        work = self.market.poll(WALLET)
        new = [r["request_cid"] for r in work["requests"] if r["request_cid"] not in self.known]
        for cid in new:
            self.known.add(cid)
            self.queue.append((cid, self.t))
        self.to_request -= len(new)
        self.run_times.extend([self.t] * len(new))
        asks = len(work["active_asks"])
        for _ in range(self.to_request - asks):
            if self.market.create_ask(WALLET, PRICE) is None:
                break  # 429: wait for the next poll
            asks += 1
        if self.to_request <= 0 and not work["active_asks"]:
            self.requesting = False
            # one poll at least: curio's loop sleeps ProofRequestPollInterval (3 s) between
            # one poll at least: curio's loop sleeps ProofRequestPollInterval (3 s) between
            end = max(self.t, self.run_start + 3.0)
            self.request_runs.append((self.run_start, end, tuple(self.run_times)))
            first = min(self.run_times, default=self.run_start)
            got = sum(1 for t in self.run_times if t >= first + 1.0)
            batch = sum(1 for t in self.run_times if t < first + 1.0)
            self.run_feed.append(demandshift.Run(end, max(0.0, end - first), got, batch))

    def _tick(self) -> None:
        self._deaths()
        for w in self.proving():
            keep = []
            for item in self._serve(w):
                cid = item[1]
                if item[0] > 0:
                    keep.append(item)
                    continue
                self.computed += 1
                self.done_times.append(self.t)
                reward = self.market.complete(WALLET, cid, b"proof")
                usd = 0.0
                if reward is not None:
                    usd = int(reward.get("amount") or 0) / 10**18 * FIL_USD
                    self.earned_usd += usd
                self.paid_times.append((self.t, usd))
                if reward is not None:
                    if reward.get("pow"):
                        self.challenges += 1
                    else:
                        self.paid += 1
            w.in_flight = keep
        self._request_task()
        for w in self.proving():
            if w.drain_deadline is None:
                while self.queue and len(w.in_flight) < MAX_PENDING:
                    cid, obtained = self.queue.popleft()
                    download = REQUEST_GB * 8000.0 / w.inet_down
                    w.in_flight.append([self._work(cid), cid, obtained, self.t + download])
                    w.requests += 1
            w.proving_s += self.tick_s

    def _work(self, cid: str) -> float:
        """A request's work in PoRep-equivalents: a Snap is 16 units of ~130M constraints
        against PoRep's 10 (lib/proofsvc/common/types.go:114-124 DeciCost). ASSUMPTION: its
        proving time scales with its constraints (no published Snap timing on the same GPU)."""
        req = self.market.requests.get(cid)
        return SNAP_WORK if req is not None and req.kind == "snap" else 1.0

    def _serve(self, w: Rental) -> list[list[Any]]:
        """One tick of cuzk's pipeline: the proofs downloaded share the worker's throughput,
        which is its full rate only with enough of them in flight (``pipeline``: one proof
        alone ~89 s against ~37.7 s each pipelined, original-system.md §4)."""
        ready = [item for item in w.in_flight if item[3] <= self.t]
        if ready:
            share = w.mu * pipeline(len(ready)) * self.tick_s / 3600.0 / len(ready)
            for item in ready:
                item[0] -= share
            w.busy_s += pipeline(len(ready)) * self.tick_s
        return w.in_flight

    # -- the fleet -----------------------------------------------------------------------

    def observed(self) -> autoscale.Observed:
        while self.done_times and self.done_times[0] < self.t - 3600.0:
            self.done_times.popleft()
        while self.request_runs and self.request_runs[0][1] < self.t - 3600.0:
            self.request_runs.popleft()
        # completed runs only: harmony_task_history has them, a running task has no start;
        # counted as vastui's reading counts them (cluster.py _REQUEST_RUNS): within the
        # window, from each run's first poll's batch on, that batch left out
        since = self.t - 3600.0
        open_s, obtained = 0.0, 0
        for start, end, times in self.request_runs:
            s = max(start, since)
            rows = [t for t in times if s <= t <= end]
            first = min(rows, default=s)
            open_s += end - first
            obtained += sum(1 for t in rows if t >= first + 1.0)
        while self.paid_times and self.paid_times[0][0] < self.t - 3600.0:
            self.paid_times.popleft()
        self.watch.feed(self.run_feed)
        self.run_feed = []
        # the run asking now, as the engine reads it (harmony_task's update_time: when posted)
        watch = self.watch.with_open_run(self.run_start if self.requesting else None, self.t)
        level = watch.level
        if level is not None and level.obtained >= watch.params.min_count:
            # the demand's current level, not the hour's: a change is seen in minutes
            obtained, open_s = level.obtained, level.asked_s
        serving = [w for w in self.proving() if w.drain_deadline is None]
        live = self._live()
        # the worker a raise brings first (the engine's pool.pick), the one a cut gives up first
        pick = self._pool_pick()
        worst = max(serving, key=lambda w: w.dph / w.mu, default=None)
        return autoscale.Observed(
            read=True, unclaimed=len(self.queue),
            oldest_unclaimed_s=self.t - self.queue[0][1] if self.queue else None,
            done_per_h=float(len(self.done_times)), capacity_per_h=sum(w.mu for w in serving),
            proving=len(serving), workers=len(live), window_s=3600.0,
            requested_per_h=autoscale.requested_per_h(obtained, open_s),
            dph_per_h=sum(w.dph for w in serving),
            requested_err_per_h=autoscale.requested_err_per_h(obtained, open_s),
            next_dph=pick.dph if pick else 0.0,
            worst_dph=worst.dph if worst else 0.0, worst_rate=worst.mu if worst else 0.0,
            usd_per_proof=(
                sum(u for _t, u in self.paid_times) / len(self.paid_times)
                if self.paid_times else None
            ),
            expected_h=watch.expected_hours(self.t), saturated=watch.saturated(),
            later_h=(later := watch.recurring_hours(self.t, self._pool_h())),
            later_idle_h=max(0.0, self._pool_h() - later),
            next_storage_dph=pick.storage_dph if pick else self._storage_dph(),
            next_rate=pick.mu if pick else 0.0,
            next_setup_h=RESTART_S / 3600.0 if pick else self._setup_h(),
            next_setup_usd=0.0 if pick else PARAMS_GB * self._inet_cost(),
        )  # fmt: skip

    def _pool_h(self) -> float:
        """How long a worker given up waits in the warm pool at most (0: no pool)."""
        cfg = self.pool_config
        return 0.0 if cfg is None or cfg.fleet.warm_pool_max <= 0 else cfg.fleet.warm_pool_max_h

    def _storage_dph(self) -> float:
        """A new rental's storage $/h: the mean of the rentals so far."""
        return statistics.fmean(w.storage_dph for w in self.rentals) if self.rentals else 0.0

    def _setup_h(self) -> float:
        """A new rental's hours to proving, as the engine's store knows them: the median of
        the rentals so far (2 h before any)."""
        done = [(w.proving_since - w.rented_at) / 3600.0 for w in self.rentals
                if w.proving_since is not None and not w.restarted_at]  # fmt: skip
        return statistics.median(done) if done else 2.0

    def _inet_cost(self) -> float:
        """A new rental's $/GB: the mean of the rentals so far (1 cent before any)."""
        return statistics.fmean(w.inet_cost for w in self.rentals) if self.rentals else 0.01

    def _live(self) -> list[Rental]:
        """The workers of the target: setting up or proving, or a queued start from the pool
        (on its way, as the engine counts it)."""
        return [
            w for w in self.rentals
            if w.gone_at is None and w.drain_deadline is None
            and (w.pooled_since is None or w.start_queued_at is not None)
        ]  # fmt: skip

    def _free(self, w: Rental) -> None:
        for _left, cid, obtained, _ready in w.in_flight:  # vastui frees a stopped worker's tasks
            self.queue.appendleft((cid, obtained))
        w.in_flight = []

    def _gone(self, w: Rental) -> None:
        w.gone_at = self.t
        self._free(w)

    def _drained(self, w: Rental) -> None:
        """A drain's end: stopped into the warm pool when the engine's pool keeps it, else
        destroyed."""
        w.drain_deadline = None
        cfg = self.pool_config
        if cfg is not None:
            pooled = sum(1 for r in self.rentals if r.pooled_since is not None and not r.gone_at)
            idle_h = self.watch.rise_gap_hours()
            if pool.keep(w.record(cfg.fleet.max_cost_per_proof), pooled, cfg, idle_h).pooled:
                w.pooled_since = self.t
                self._free(w)
                return
        self._gone(w)

    def _start_pooled(self) -> bool:
        """Ask the engine's pick (pool.pick) to start. Vast may queue the start
        (``START_QUEUED``, resources_unavailable: its GPUs were rented meanwhile): it then
        stays stopped, counted as a worker on its way, until pool.expired destroys it
        (``warm_pool_start_min``) and the fleet rents elsewhere."""
        cfg = self.pool_config
        if cfg is None:
            return False
        w = self._pool_pick()
        if w is None:
            return False
        rng = random.Random(self.world_seed * 1_000_003 + w.k * 7_919 + len(w.restarted_at) + 29)
        if rng.random() < START_QUEUED:
            w.start_queued_at = self.t
            return True
        w.pooled_s += self.t - (w.pooled_since or self.t)
        w.pooled_since = None
        w.proving_since = None
        w.ready_at = self.t + RESTART_S
        w.restarted_at.append(self.t)
        return True

    def _pool_pick(self) -> Rental | None:
        cfg = self.pool_config
        if cfg is None:
            return None
        pooled = [w for w in self.rentals if w.pooled_since is not None and w.gone_at is None]
        records = {w.k + 1: w for w in pooled}
        pick = pool.pick([w.record(cfg.fleet.max_cost_per_proof) for w in pooled])
        return None if pick is None else records[pick.vast_id]

    def _expire_pool(self) -> None:
        """The engine's pool.expired: kept too long, a queued start not come, the pool over
        its size."""
        cfg = self.pool_config
        if cfg is None:
            return
        pooled = [w for w in self.rentals if w.pooled_since is not None and w.gone_at is None]
        records = {w.k + 1: w for w in pooled}
        ranked = pool.ranked([w.record(cfg.fleet.max_cost_per_proof) for w in pooled])
        for rank, rec in enumerate(ranked):
            kill = pool.expired(rec, self.t, rank, cfg)
            if kill is not None:
                w = records[rec.vast_id]
                self.pool_kills.append(kill.kind)
                self._gone(w)

    def _looks(self) -> bool:
        """Whether the fleet's keeper acts now: vastui's engine every step, the fair original's
        operator every look_s."""
        if self.look_s is None:
            return True
        return (self.t - self.t0) % self.look_s < STEP_S

    def _step(self, target: int) -> None:
        acting = self._looks()
        for w in self.rentals:
            if w.dead_at is not None and w.gone_at is None and acting:
                self._gone(w)  # vastui: the daemon's death seen; the original: at a look
                continue
            if w.pooled_since is not None:
                continue
            if w.gone_at is None and w.proving_since is None and w.ready_at <= self.t:
                if w.passes:
                    w.proving_since = self.t
                    if w.restarted_at:
                        w.reproved_at.append(self.t)
                else:
                    self._gone(w)  # rejected at its benchmark
            draining = w.gone_at is None and w.drain_deadline is not None
            if draining and (not w.in_flight or self.t >= (w.drain_deadline or 0.0)):
                self._drained(w)
        self._expire_pool()
        if not acting:
            return
        live = self._live()
        if len(live) < target and self._start_pooled():
            return
        if len(live) < target and self.look_s is not None:
            for _ in range(target - len(live)):  # Bulk Deploy: the operator rents them at once
                self.rentals.append(draw(self.world_seed, len(self.rentals), self.t))
        elif len(live) < target:
            self.rentals.append(draw(self.world_seed, len(self.rentals), self.t))
        elif len(live) > target:
            # a queued start from the pool first (it stays stopped), then one setting up,
            # then the worst $/proof
            queued = [w for w in live if w.pooled_since is not None]
            setting_up = sorted((w for w in live if w.proving_since is None and w not in queued),
                                key=lambda w: -w.rented_at)  # fmt: skip
            proving = sorted((w for w in live if w.proving_since is not None and w not in queued),
                             key=lambda w: -w.dph / w.mu)  # fmt: skip
            for w in (queued + setting_up + proving)[: len(live) - target]:
                if w.pooled_since is not None:
                    w.start_queued_at = None
                elif w.proving_since is None:
                    self._gone(w)
                else:
                    w.drain_deadline = self.t + DRAIN_MAX_S

    def run(self, target_of: Callable[[World], int]) -> Run:
        targets: list[tuple[float, int]] = []
        next_step = self.t
        while self.t < self.end:
            if self.t >= next_step:
                target = target_of(self)
                if not targets or targets[-1][1] != target:
                    targets.append((self.t, target))
                self._step(target)
                next_step += STEP_S
            self._tick()
            self.t += self.tick_s
        busy = sum(w.busy_s for w in self.rentals)
        proving_s = sum(w.proving_s for w in self.rentals)
        return Run(
            cost=sum(w.cost(self.end) for w in self.rentals), paid=self.paid,
            computed=self.computed, challenges=self.challenges,
            missed=sum(a.missed for a in self.demand.accounts.values()),
            idle_share=1.0 - busy / proving_s if proving_s else None,
            scale_up_min=self._scale_up_min(), targets=targets,
            warm_up_min=self._warm_up_min(targets),
            pool_starts=sum(len(w.restarted_at) for w in self.rentals),
            earned_usd=self.earned_usd,
        )  # fmt: skip

    def _warm_up_min(self, targets: list[tuple[float, int]]) -> float | None:
        """The median, over the starts from the warm pool, of the minutes from the target's
        rise that called for it to the worker proving again."""
        rises = [t for (t, n), (_t0, n0) in zip(targets[1:], targets, strict=False) if n > n0]
        waits = []
        for w in self.rentals:
            for started, proved in zip(w.restarted_at, w.reproved_at, strict=False):
                rise = max((t for t in rises if t <= started), default=None)
                if rise is not None:
                    waits.append((proved - rise) / 60.0)
        return statistics.median(waits) if waits else None

    def _scale_up_min(self) -> float | None:
        if self.step_at is None or self.curve.after <= self.curve.rate:
            return None
        after = [w.proving_since for w in self.rentals
                 if w.rented_at >= self.step_at and w.proving_since is not None]  # fmt: skip
        return (min(after) - self.step_at) / 60.0 if after else None


def auto_policy(config: Config) -> Callable[[World], int]:
    settings = autoscale_settings(config)
    state = [autoscale.initial(settings)]

    def target(world: World) -> int:
        decision = autoscale.decide(settings, state[0], world.observed(), world.t)
        state[0] = decision.state
        return decision.state.target

    return target


def auto_config(**fleet: Any) -> Config:
    base = Config()
    return replace(base, fleet=replace(base.fleet, auto_target=True, min_workers=1,
                                       max_workers=MAX_WORKERS, **fleet))  # fmt: skip


def compare(curve: str, seed: int, hours: float, config: Config) -> dict[str, Any]:
    make_spec, new_wallet = CURVES[curve]
    spec = make_spec(hours)
    fleet = is_fleet(curve)
    balance = FLEET_BALANCE if fleet else None
    if fleet:
        config = replace(config, fleet=replace(config.fleet, max_workers=FLEET_MAX_WORKERS))

    def world(**kw: Any) -> World:
        return World(spec, new_wallet, seed, hours, balance=balance, **kw)

    auto_world = world(pool_config=config)
    auto = auto_world.run(auto_policy(config))
    fixed = _fixed_targets(world, FLEET_MAX_WORKERS if fleet else MAX_WORKERS)
    best_n = min(fixed, key=lambda n: (fixed[n].cost_per_paid, n))
    best = fixed[best_n]
    # the operator at their best by the other measure: the fixed target that earned the most
    margin_n = max(fixed, key=lambda n: (fixed[n].margin, -n))
    # the fair original at that target: its operator looks every 60 or 15 minutes
    original = {m: world(look_s=m * 60.0).run(lambda _w: best_n) for m in ORIGINAL_LOOKS_MIN}
    return {
        "auto": auto, "best": best, "best_n": best_n, "spec": spec,
        "best_margin": fixed[margin_n], "best_margin_n": margin_n, "original": original,
        "curve": auto_world.curve, "t0": auto_world.t0, "levels": list(auto_world.watch.levels),
    }  # fmt: skip


def _fixed_targets(world: Callable[..., World], most: int) -> dict[int, Run]:
    """Every fixed target up to ``most`` (10: each one); past 10, a grid of fives and then
    each target within four of the grid's best earner (the operator at their best, found as
    they would: the margin is unimodal enough in the target for a grid to find its top)."""

    def one(n: int) -> Run:
        return world().run(lambda _w: n)

    if most <= 10:
        return {n: one(n) for n in range(1, most + 1)}
    runs = {n: one(n) for n in range(5, most + 1, 5)}
    top = max(runs, key=lambda n: (runs[n].margin, -n))
    for n in range(max(1, top - 4), min(most, top + 4) + 1):
        if n not in runs:
            runs[n] = one(n)
    return runs


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def run(quick: bool) -> dict[str, Any]:
    hours = HOURS_QUICK if quick else HOURS_FULL
    seeds = SEEDS_QUICK if quick else SEEDS_FULL
    config = auto_config()
    figures: dict[str, Any] = {f"{PREFIX}.hours": hours, f"{PREFIX}.seeds": len(seeds)}
    ratios: list[float] = []
    idle: list[float] = []
    cold: list[float] = []
    warm: list[float] = []
    missed_auto = missed_best = 0
    margin_ratios: list[float] = []  # auto's margin ÷ the best fixed target's by margin
    loses = 0
    detect: list[float] = []
    seen: list[float] = []
    held_rises = 0
    false_raises = 0
    steady_hours = 0.0
    vs_original: dict[int, list[float]] = {m: [] for m in ORIGINAL_LOOKS_MIN}
    missed_original: dict[int, int] = dict.fromkeys(ORIGINAL_LOOKS_MIN, 0)
    for curve in CURVES:
        for seed in seeds:
            progress(f"demand: {curve}, seed {seed}, {hours:g} h")
            got = compare(curve, seed, hours, config)
            auto, best, by_margin = got["auto"], got["best"], got["best_margin"]
            key = f"{PREFIX}.{curve}.seed{seed}"
            ratio = auto.cost_per_paid / best.cost_per_paid if best.paid and auto.paid else None
            figures.update({
                f"{key}.curve": got["spec"],
                f"{key}.best_fixed_target": got["best_n"],
                f"{key}.auto.usd_per_paid_proof": _round(auto.cost_per_paid),
                f"{key}.best_fixed.usd_per_paid_proof": _round(best.cost_per_paid),
                f"{key}.auto_vs_best_fixed_cost_ratio": _round(ratio),
                f"{key}.auto.paid": auto.paid, f"{key}.best_fixed.paid": best.paid,
                f"{key}.auto.missed_deadlines": auto.missed,
                f"{key}.best_fixed.missed_deadlines": best.missed,
                f"{key}.auto.idle_share": _round(auto.idle_share),
                f"{key}.best_fixed.idle_share": _round(best.idle_share),
                f"{key}.auto.peak_target": max(n for _t, n in auto.targets),
                f"{key}.auto.target_changes": len(auto.targets) - 1,
                f"{key}.auto.scale_up_minutes": _round(auto.scale_up_min),
                f"{key}.auto.warm_scale_up_minutes": _round(auto.warm_up_min),
                f"{key}.auto.pool_starts": auto.pool_starts,
                f"{key}.auto.margin_usd": round(auto.margin, 2),
                f"{key}.best_fixed.margin_usd": round(best.margin, 2),
                f"{key}.best_margin_fixed_target": got["best_margin_n"],
                f"{key}.best_margin_fixed.margin_usd": round(by_margin.margin, 2),
            })  # fmt: skip
            for m, orig in got["original"].items():
                o_key = f"{key}.fair_original_{m}min"
                o_ratio = (
                    auto.cost_per_paid / orig.cost_per_paid if orig.paid and auto.paid else None
                )
                figures.update({
                    f"{o_key}.usd_per_paid_proof": _round(orig.cost_per_paid),
                    f"{o_key}.paid": orig.paid, f"{o_key}.missed_deadlines": orig.missed,
                    f"{o_key}.idle_share": _round(orig.idle_share),
                    f"{o_key}.margin_usd": round(orig.margin, 2),
                    f"{key}.auto_vs_fair_original_{m}min_cost_ratio": _round(o_ratio),
                })  # fmt: skip
                if o_ratio is not None:
                    vs_original[m].append(o_ratio)
                missed_original[m] += orig.missed
            if by_margin.margin > 0:
                margin_ratios.append(auto.margin / by_margin.margin)
                loses += auto.margin < 0
            moves, alarms = _rise_moves(got, hours)
            detect += [m for m in moves if m is not None]
            held_rises += sum(1 for m in moves if m is None)
            seen += alarms
            if curve in STEADY_CURVES:
                false_raises += sum(1 for (t, n), (_t, n0) in zip(auto.targets[1:], auto.targets,
                                                                   strict=False)
                                    if n > n0 and t >= got["t0"] + 6 * 3600.0)  # fmt: skip
                steady_hours += hours - 6.0
            figures.update({
                f"{MARGIN}.{curve}.seed{seed}.auto_usd": round(auto.margin, 2),
                f"{MARGIN}.{curve}.seed{seed}.best_fixed_usd": round(by_margin.margin, 2),
                f"{MARGIN}.{curve}.seed{seed}.earned_usd": round(auto.earned_usd, 2),
                f"{MARGIN}.{curve}.seed{seed}.spent_usd": round(auto.cost, 2),
                f"{MARGIN}.{curve}.seed{seed}.target_moves_min": " ".join(
                    "held" if m is None else f"{m:g}" for m in moves
                ),
            })  # fmt: skip
            if ratio is not None:
                ratios.append(ratio)
            if auto.idle_share is not None:
                idle.append(auto.idle_share)
            if auto.scale_up_min is not None:
                cold.append(auto.scale_up_min)
            if auto.warm_up_min is not None:
                warm.append(auto.warm_up_min)
            missed_auto += auto.missed
            missed_best += best.missed
    figures.update({
        f"{PREFIX}.summary.auto_vs_best_fixed_cost_ratio.median": _median(ratios),
        f"{PREFIX}.summary.auto_vs_best_fixed_cost_ratio.worst": _round(max(ratios, default=None)),
        f"{PREFIX}.summary.missed_deadlines.auto": missed_auto,
        f"{PREFIX}.summary.missed_deadlines.best_fixed": missed_best,
        f"{PREFIX}.summary.missed_deadlines.auto_minus_best_fixed": missed_auto - missed_best,
        f"{PREFIX}.summary.idle_share.auto.median": _median(idle),
        f"{PREFIX}.summary.scale_up_minutes.cold.median": _median(cold),
        f"{PREFIX}.summary.scale_up_minutes.warm.median": _median(warm),
        f"{PREFIX}.summary.usd_per_paid_proof_assumed": USD_PER_PAID,
    })  # fmt: skip
    figures.update({
        f"{MARGIN}.summary.auto_vs_best_fixed.median": _median(margin_ratios),
        f"{MARGIN}.summary.auto_vs_best_fixed.worst": _round(min(margin_ratios, default=None)),
        f"{MARGIN}.summary.runs_auto_loses_where_fixed_earns": loses,
        f"{MARGIN}.summary.detect_minutes.median": _median(detect),
        f"{MARGIN}.summary.detect_minutes.rises_held": held_rises,
        f"{MARGIN}.summary.seen_minutes.median": _median(seen),
        f"{MARGIN}.summary.false_raises_per_week": (
            round(false_raises * 168.0 / steady_hours, 2) if steady_hours else None
        ),
        f"{MARGIN}.summary.fil_usd_assumed": FIL_USD,
    })  # fmt: skip
    for m in ORIGINAL_LOOKS_MIN:
        o_key = f"{PREFIX}.summary.auto_vs_fair_original_{m}min_cost_ratio"
        figures.update({
            f"{o_key}.median": _median(vs_original[m]),
            f"{o_key}.worst": _round(max(vs_original[m], default=None)),
            f"{PREFIX}.summary.missed_deadlines.fair_original_{m}min": missed_original[m],
        })  # fmt: skip
    return figures


def _rise_moves(got: dict[str, Any], hours: float) -> tuple[list[float | None], list[float]]:
    """For each step up of the curve by 2x or more: the minutes to the target's first rise
    within it (None: held through it), and the minutes to the demand test's alarm."""
    curve, t0 = got["curve"], got["t0"]
    starts = []
    h = 0.0
    while h < hours:  # the curve's rises, sampled each minute
        before, now = curve.at(h), curve.at(h + 1 / 60)
        if now >= 2 * max(before, 1e-9) and now > before:
            starts.append(t0 + (h + 1 / 60) * 3600.0)
        h += 1 / 60
    auto = got["auto"]
    moves: list[float | None] = []
    alarms: list[float] = []
    for start in starts:
        end = start + _rise_length(curve) * 3600.0
        ups = [t for (t, n), (_t, n0) in zip(auto.targets[1:], auto.targets, strict=False)
               if n > n0 and start <= t < end]  # fmt: skip
        moves.append((min(ups) - start) / 60.0 if ups else None)
        seen = [lv.seen_at for lv in got["levels"]
                if lv.seen_at is not None and start <= lv.seen_at < end]  # fmt: skip
        if seen:
            alarms.append((min(seen) - start) / 60.0)
    return moves, alarms


def _rise_length(curve: Any) -> float:
    if curve.kind == "pulse":
        return curve.until_h - curve.at_h
    if curve.kind == "bursts":
        return curve.at_h / 2
    return math.inf


def _round(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else round(x, 4)
