"""vastui's policy on the simulated market: the engine's loop (vastui/engine/engine.py) played
on a discrete-event clock, every decision taken by the real pure functions.

What is real here: the ranking (``ranking.rank_offers`` over the performance record it learns),
provisioning (``provision.gate``/``decide``, one rent per step, the benchmark concurrency and
$/h caps), the reconcile kills (``policy.reconcile_kill``: deadlines, offline/exited grace), the
benchmark gate (``policy.benchmark_kill``, ``benchmark_strike``), worker failures
(``policy.failure_kill``), strikes and bans (``policy.strike_ban``), production measured from
cuzk's counters (``production.fold``/``measure``/``verdict``), the min_rate
(``pricing.min_rate``) and the spend (``spend``). What a worker's event, benchmark result
or counters reading does to it is the engine's own transition (``transitions.on_event``,
``on_counters``); this module only carries the effects out on its in-memory fleet, as
``acts.carry_out`` does on the store (``_carry_out``), and plays ``acts.kill``/``strike``/
``ban``/``record_rate`` without I/O. The strike window is ``policy.strike_window_start``.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace
from typing import Any

from bench.economics_fleet import Clock, Fleet, Outcome, Worker
from bench.economics_worker import (
    DAEMON_READY_S,
    PCE_EXTRACT_CORE_S,
    PROVE_START_S,
    SETUP_S,
    SRS_LOAD_S,
    Production,
    vastui_bench,
)
from bench.economics_world import Market
from vastui.config import Config
from vastui.domain.machines import PerfRecord
from vastui.domain.reports import BenchResult, parse_event, parse_stored_result
from vastui.domain.worker import bid_history
from vastui.engine import bidding, policy, production, provision, transitions
from vastui.engine.ranking import Levers, RankedOffer, rank_offers
from vastui.pricing import min_rate

ENGINE_STEP_S = 30.0  # EngineSettings.poll_interval
EVENT_DELAY_S = 1.0  # a worker's event reaches the engine over SSH (follow.py)
DAEMON_PID = 4242
# With bids on, the market is ranked again this often (the going bids move; the engine's
# offers_refresh is of this order).
BID_RERANK_S = 300.0
# vastsim/cloud.py _boot: a resumed container loads in U(2, 10) s and runs U(10, 40) s later.
RESUME_BOOT_S = (12.0, 50.0)
# A resumed worker's paramfetch finds every file on its disk (ASSUMPTION: a check, no download).
PARAMS_PRESENT_S = 20.0


class VastuiPolicy:
    def __init__(self, market: Market, config: Config) -> None:
        self.config = config
        self.clock = Clock()
        self.fleet = Fleet(market, config, self.clock)
        self.perf: dict[tuple[int, str, int], PerfRecord] = {}
        self.bad: dict[int, str] = {}
        self.strikes: dict[int, list[tuple[float, int, str]]] = {}
        self.buffered: dict[int, list[dict[str, Any]]] = {}
        self.prod: dict[int, production.ProdState] = {}  # the record's prod_state, parsed
        self.bench_results: dict[int, BenchResult | None] = {}  # its bench_result, parsed once
        self._ranked: list[RankedOffer] = []
        self._ranked_key: tuple[Any, ...] | None = None
        self._version = 0  # bumped when the performance record or the bad list changes

    # -- the loop ----------------------------------------------------------------------------

    def run(self, hours: float) -> Outcome:
        self.clock.every(0.0, ENGINE_STEP_S, self.step)
        self.clock.run_until(hours * 3600.0)
        return self.fleet.figures(self.clock.now).with_bans(len(self.bad))

    def step(self) -> None:
        """Engine.step: reconcile every live instance, then provision."""
        for w in self.fleet.live:
            self._reconcile(w)
        self._provision()

    def _reconcile(self, w: Worker) -> None:
        now = self.clock.now
        outbid = self._outbid_now(w, now)
        status = "stopped" if outbid else self._vast_status(w, now)
        unhealthy = status in policy.UNHEALTHY and not outbid
        since = (w.rec.unhealthy_since or now) if unhealthy else None
        if (status, since) != (w.rec.vast_status, w.rec.unhealthy_since):  # replace() is dear
            w.rec = replace(w.rec, vast_status=status, unhealthy_since=since)
        if w.rec.is_bid and self._bids(w, outbid, status, now):
            return
        if w.rec.state == "loading" and status == "running":
            self.fleet.set_stage(w, "setup")
        kill = policy.reconcile_kill(w.rec, now, self.config, self.bad.get(w.offer.machine_id))
        if kill is not None:
            self._kill(w, kill)
            return
        for event in self.buffered.pop(w.rec.vast_id, []):  # follow.ensure: events stream
            if w.live:
                self.on_event(w, event)

    def _outbid_now(self, w: Worker, now: float) -> bool:
        """A higher bid holds the machine (the sim's _settle_bids)."""
        price = w.rec.bid_price
        if not w.rec.is_bid or price is None:
            return False
        return not self.fleet.market.bids.wins(w.offer.machine_id, w.floor, price, now)

    def _bids(self, w: Worker, outbid: bool, status: str, now: float) -> bool:
        """Engine._refresh and Engine._outbid: the outbid noted (the worker's run stops), a
        resume restarts the worker; while outbid, the outbid policy. True: nothing else to
        judge now."""
        change = bidding.observe(w.rec, outbid, status, now)
        if change is not None:
            w.rec = replace(w.rec, **change.fields)
            if change.stage is None:
                self._pause(w, now)
            else:
                self.prod.pop(w.rec.vast_id, None)  # prod_state None: measured afresh
                self.fleet.set_stage(w, change.stage)
                self._resume(w, now)
        going = self.fleet.market.bids.going_price(w.offer.machine_id, w.floor, now)
        if w.rec.outbid_since is None:
            act = bidding.lower(w.rec, going, self.config.bids)
            if act is not None and status == "running":
                w.rec = replace(
                    w.rec, bid_price=act.price, dph_total=act.price + (w.rec.storage_dph or 0.0)
                )
            return False
        act = bidding.on_outbid(w.rec, going, now, self.config.bids)
        if isinstance(act, bidding.RaiseBid):
            storage = w.rec.storage_dph or 0.0
            w.rec = replace(w.rec, bid_price=act.price, dph_total=act.price + storage)
        elif isinstance(act, policy.Kill):
            self._kill(w, act)
        return True

    def _pause(self, w: Worker, now: float) -> None:
        """The container is stopped: the proofs in flight are lost, the run's events too."""
        w.run += 1
        self.buffered.pop(w.rec.vast_id, None)
        if w.production is not None:
            w.banked += w.production.counts(now)[0]
            w.production = None
        self._version += 1  # the interruption is learned (bid_history)

    def _resume(self, w: Worker, now: float) -> None:
        """The container starts again: onstart runs entrypoint.sh from the top. A worker
        whose benchmark passed skips it on the same machine (worker-image/README.md) and its
        daemon starts afresh (SRS load, PCE extraction); else it benchmarks again."""
        seed = self.fleet.market.seed
        rng = random.Random(f"resume:{seed}:{w.rec.vast_id}:{w.rec.interruptions}")
        boot = now + rng.uniform(*RESUME_BOOT_S)
        start = boot + rng.uniform(*SETUP_S)
        fetched = None if w.rental.paramfetch_end is None else start + PARAMS_PRESENT_S
        w.rental = replace(w.rental, running=boot, paramfetch_start=start, paramfetch_end=fetched)
        if w.rec.bench_outcome != "pass" or fetched is None:
            self._schedule(w)
            return
        r = w.rental
        self._event_at(w, r.running + 2.0, {"event": "start", "stage": "setup"})
        self._event_at(w, start, {"event": "start", "stage": "paramfetch"})
        self._event_at(w, fetched, {"event": "start", "stage": "benchmark"})
        self._event_at(w, fetched + 1.0, {"event": "start", "stage": "prove"})
        restart = DAEMON_READY_S + SRS_LOAD_S + PCE_EXTRACT_CORE_S / r.cores + PROVE_START_S
        w.production = Production(fetched + restart, r.interval, r.fill, r.hidden, r.offline)
        self._schedule_death(w)

    @staticmethod
    def _vast_status(w: Worker, now: float) -> str:
        r = w.rental
        if now < r.running:
            return "loading"
        return "running" if r.alive_at(now) else "offline"

    # -- provisioning ------------------------------------------------------------------------

    def _view(self) -> provision.FleetView:
        live = self.fleet.live
        fleet = self.config.fleet
        stages = Counter(w.rec.state for w in live)
        return provision.FleetView(
            target=fleet.target_workers,
            max_concurrent_benchmarks=fleet.max_concurrent_benchmarks,
            max_cost_per_proof=fleet.max_cost_per_proof,
            by_stage={st: n for st in policy.LIVE_STAGES if (n := stages[st])},
            busy_machines=frozenset(w.offer.machine_id for w in live),
            bad_machines=frozenset(self.bad),
            dph_in_use=sum(w.rec.dph_total or 0.0 for w in live),
            max_total_dph=fleet.max_total_dph,
        )

    def _provision(self) -> None:
        view = self._view()
        decision = provision.gate(view)
        if decision is None:
            decision = provision.decide(view, self._offers())
        if decision.rent is not None:
            offer, bid = decision.rent.offer, decision.rent.rent_bid
            price = offer.dph_total if bid is None else bid.total
            rate = min_rate(price, self.config.fleet.max_cost_per_proof)
            self._schedule(self.fleet.rent(offer, rate, bid))

    def _offers(self) -> list[RankedOffer]:
        """Engine.refresh_offers: the search ranked with the record (re-ranked when a
        measurement, a ban or the market changed)."""
        now = self.clock.now
        offers = self.fleet.available(now)
        bidding_on = self.config.bids.mode != "off"
        epoch = int(now // BID_RERANK_S) if bidding_on else 0
        key = (self._version, tuple(o.id for o in offers), epoch)
        if key != self._ranked_key:
            bids = None
            if bidding_on:  # Engine.refresh_offers: the going bids, the learned risk
                offers = self.fleet.market.with_going_bids(offers, now)
                records = (w.rec for w in self.fleet.workers.values())
                model = bidding.RiskModel(bid_history(records, now), self.config)
                bids = (self.config, model)
            self._ranked = rank_offers(
                offers, self.perf.values(), self.bad, self.config.fleet.max_cost_per_proof, bids,
                Levers.of(self.config),
            )  # fmt: skip
            self._ranked_key = key
        return self._ranked

    # -- the worker's events -----------------------------------------------------------------

    def _schedule(self, w: Worker) -> None:
        """The worker's own progress (worker-image/entrypoint.sh), event by event."""
        r = w.rental
        self._event_at(w, r.running + 2.0, {"event": "start", "stage": "setup"})
        self._event_at(w, r.paramfetch_start, {"event": "start", "stage": "paramfetch"})
        if r.paramfetch_end is None:
            return
        self._event_at(w, r.paramfetch_end, {"event": "start", "stage": "benchmark"})
        w.bench = vastui_bench(r, w.rec.min_rate or 0.0, self.config.fleet.bench_proofs)
        done = r.paramfetch_end + w.bench.duration
        self._event_at(w, done, {"event": "result", "stage": "benchmark", "result": w.bench.result})
        if w.bench.passed:
            self._event_at(w, done + 1.0, {"event": "start", "stage": "prove"})
            w.production = Production(done + PROVE_START_S, r.interval, r.fill, r.hidden, r.offline)
            self._schedule_death(w)

    def _schedule_death(self, w: Worker) -> None:
        death = None if w.production is None else w.production.death()
        if death is not None:
            at, reason, tail = death
            fail = {"event": "fail", "stage": "prove", "reason": reason, "error_tail": tail}
            self._event_at(w, at, fail)

    def _event_at(self, w: Worker, t: float, event: dict[str, Any]) -> None:
        if w.rental.alive_at(t):  # a host offline says nothing more
            self.clock.at(t + EVENT_DELAY_S, self._deliver, w, event, w.run)

    def _deliver(self, w: Worker, event: dict[str, Any], run: int = 0) -> None:
        if not w.live or run != w.run:  # a stopped container's run says nothing more
            return
        if w.rec.state == "loading":  # not followed yet: the next step sees it running
            self.buffered.setdefault(w.rec.vast_id, []).append(event)
            return
        self.on_event(w, event)

    def on_event(self, w: Worker, event: dict[str, Any]) -> None:
        """Engine._on_event: the engine's transition, carried out here."""
        now = self.clock.now
        self._carry_out(w, transitions.on_event(w.rec, parse_event(event), now, self.config), now)

    def _carry_out(self, w: Worker, effects: list[transitions.Effect], now: float) -> None:
        """acts.carry_out on the in-memory fleet (the operator's event log is not kept, and a
        pass has no fleet-wide pause to clear: the market model has no fleet-wide failure)."""
        for effect in effects:
            match effect:
                case transitions.Update(fields):
                    w.rec = replace(w.rec, **fields)
                    if "bench_result" in fields:
                        self.bench_results[w.rec.vast_id] = parse_stored_result(
                            fields["bench_result"]
                        )
                case transitions.EnterStage(stage):
                    self.fleet.set_stage(w, stage)
                    if stage == "proving":  # a follower starts reading its counters
                        self.clock.at(now + self.config.proving.poll_s, self._poll, w, w.run)
                case transitions.Production(state):
                    self.prod[w.rec.vast_id] = state  # the record's other prod_* go unread
                case transitions.RecordRate(rate, partial):
                    self._record_rate(w, rate, partial)
                case transitions.Strike(kind, reason):
                    self._strike(w, kind, reason)
                case transitions.KillWorker(kill):
                    self._kill(w, kill)
                    return
                case transitions.Note() | transitions.Passed():
                    pass

    # -- production --------------------------------------------------------------------------

    def _poll(self, w: Worker, run: int = 0) -> None:
        """Followers' counters read every proving.poll_s, then Engine.handle_counters."""
        if not w.live or w.rec.state != "proving" or run != w.run:
            return
        now = self.clock.now
        reachable = w.rental.alive_at(now)  # an offline host: no SSH connection at all
        self.on_counters(w, self._reading(w, now), not reachable, self._others_reachable(w, now))
        if w.live:
            self.clock.at(now + self.config.proving.poll_s, self._poll, w, run)

    def on_counters(
        self,
        w: Worker,
        reading: production.Reading | None,
        unreachable: bool,
        others_reachable: bool,
    ) -> None:
        """Engine.handle_counters: the engine's transition, carried out here."""
        now = self.clock.now
        state = self.prod.get(w.rec.vast_id) or production.ProdState()
        bench = self.bench_results.get(w.rec.vast_id)  # the record's bench_result, as the engine
        seen = transitions.Counters(reading, unreachable, others_reachable)
        self._carry_out(
            w, transitions.on_counters(w.rec, state, bench, seen, now, self.config), now
        )

    def _others_reachable(self, w: Worker, now: float) -> bool:
        """Engine._others_reachable: another proving worker answers over SSH."""
        return any(
            o is not w and o.rec.state == "proving" and o.rental.alive_at(now)
            for o in self.fleet.live
        )

    def _reading(self, w: Worker, now: float) -> production.Reading | None:
        """What `workerctl cuzk-counters` answers: None when the host is unreachable."""
        p = w.production
        if p is None or not w.rental.alive_at(now):
            return None
        result = w.bench.result if w.bench else {}
        done, failed = p.counts(now)
        death = p.death()
        dead = death is not None and now >= death[0]
        # A resumed container runs a new daemon: its counters start from nothing.
        first = w.run == 0
        return production.Reading(
            pid=DAEMON_PID + w.run,
            alive=not dead,
            exit_status=(134 if w.rental.hidden.fault == "cuda_abort" else 137) if dead else None,
            signal=None,
            completed=(int(result.get("daemon_completed", 0)) if first else 0) + done,
            failed=(int(result.get("daemon_failed", 0)) if first else 0) + failed,
            uptime=now - (w.rental.created if first else w.rental.running),
            busy=True,  # the Snark market never runs dry (an assumption, both policies)
            error_tail=death[2] if dead and death else (),
        )

    # -- acts: kill, strike, ban, record ---------------------------------------------------

    def _kill(self, w: Worker, kill: policy.Kill) -> None:
        """acts.kill + complete_destroy: the strike it carries, the kill, the ban."""
        if not w.live:
            return
        if kill.strike and not kill.ban:
            self._strike(w, kill.kind, kill.reason, skip=w)
        if not w.live:
            return
        stage = kill.stage if kill.stage in policy.LIVE_STAGES else None
        self.fleet.mark_killed(w, kill.kind, kill.reason, stage)
        if kill.ban:
            self._ban(w.offer.machine_id, kill.ban, skip=w)

    def _strike(self, w: Worker, kind: str, reason: str, skip: Worker | None = None) -> None:
        """acts.strike: once per instance and kind; enough within auto_ban_days ban."""
        now = self.clock.now
        mid = w.offer.machine_id
        marks = self.strikes.setdefault(mid, [])
        if not any(iid == w.rec.vast_id and k == kind for _, iid, k in marks):
            marks.append((now, w.rec.vast_id, kind))
        since = policy.strike_window_start(now, self.config.fleet.auto_ban_days)
        count = sum(1 for ts, _, _ in marks if since is None or ts >= since)
        ban = policy.strike_ban(count, self.config.proving.strikes_to_ban, reason)
        if ban is not None and mid not in self.bad:
            self._ban(mid, ban, skip=skip)

    def _ban(self, machine_id: int, reason: str, skip: Worker | None = None) -> None:
        """acts.ban: on the bad list (auto_ban_days outlast the run); its live workers go."""
        self.bad[machine_id] = reason
        self._version += 1
        for other in self.fleet.live:
            if other.offer.machine_id == machine_id and other is not skip:
                self._kill(other, policy.Kill("bad_machine", f"machine {machine_id}: {reason}"))

    def _record_rate(self, w: Worker, rate: float, partial: bool = False) -> None:
        """store.perf.record_rate: best = max (a partial one never raises it), last = this
        one, samples + 1."""
        key = (w.offer.machine_id, w.offer.gpu_name, w.offer.num_gpus)
        old = self.perf.get(key)
        best = rate if old is None else old.best_rate if partial else max(old.best_rate, rate)
        self.perf[key] = PerfRecord(
            machine_id=key[0],
            gpu_name=key[1],
            num_gpus=key[2],
            best_rate=best,
            last_rate=rate,
            last_partial=partial,
            samples=1 if old is None else old.samples + 1,
            measured_at=self.clock.now,
            cpu_ram_gb=w.offer.cpu_ram_gb,
            host_id=w.offer.host_id,
        )
        self._version += 1
