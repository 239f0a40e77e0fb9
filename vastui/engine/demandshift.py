"""The market's demand for this cluster as levels that change: a sequential change test on the
request stream as curio sees it (issue 43, item 2).

What it reads is curio's request task (tasks/proofshare/task_request.go:162-380): a run asks the
market until the queue is refilled, and each run is recorded in ``harmony_task_history`` with the
rows it added to ``proofshare_queue`` (vastui/engine/cluster.py ``_REQUEST_RUNS`` counts them the
same way: from the run's first poll's batch on, that batch left out). Requests come to an open
ask as a Poisson process of the market's rate, so a run is an exposure (seconds asked) and a
count (requests obtained): a full fleet's runs are short and fill at once, an idle fleet's are
long; either way count ÷ exposure is the rate.

The test is a two-sided CUSUM for a Poisson rate with exposure (Page 1954; Lucas 1985 for counts):
against the current level's rate λ0, the evidence for a rate ``ratio`` times higher grows by
``n·ln(ratio) − (ratio − 1)·λ0·e`` a run, for one ``ratio`` times lower by ``−n·ln(ratio) +
(1 − 1/ratio)·λ0·e``, each floored at 0. Past ``threshold`` the level changes, and the new one
begins where its statistic last left 0 (the change point's estimate): its rate is what came
since. A level is held only while its evidence holds: the next alarm ends it. λ0 is the level's
rate from its start to where the statistic under test last was 0, so the data that raises the
alarm does not also raise the baseline it is tested against.

With ``ratio`` 2, ``threshold`` 8 and ``glr_threshold`` 10 (``DEFAULTS``; the generalised test
on the same stretch sees a large step in fewer runs), a seeded week of steady demand with curio's
request task in front of a fleet 30 % larger than the demand raised no false alarm at 10 to 60
requests/h, 0.75 a week at 150/h and 2.25 at 300/h (more runs a week, more chances; measured
over 4 seeds by tests/test_demandshift.py's stream). A step of 6x from 25/h is seen after 11 to
24 minutes when the fleet is full (the task then asks only as often as the fleet drains its
queue: that, not the test, is what bounds it), a step of 2x after 20 to 60.

It is a fold: ``feed`` takes the runs that ended since the last call (the engine keeps the
``Watch`` in memory and rebuilds it from the history window after a restart). It learns how long
a rise lasts from the stream's own history (``rise_hours``): the rises that ended.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

HOUR = 3600.0
SATURATION_RUNS = 12
SATURATED_SHARE = 0.75


@dataclass(frozen=True, slots=True)
class Run:
    """One request-task run: when it ended, the seconds it asked, the requests obtained."""

    end: float
    asked_s: float
    obtained: int
    first: int = 0  # the first poll's batch (left out of ``obtained``: a backlog, not a rate)


@dataclass(frozen=True, slots=True)
class Level:
    """A stretch of demand at one rate. ``obtained`` ÷ ``asked_s`` is its rate."""

    start: float  # the change point's estimate (the first run of the level began about then)
    obtained: int = 0
    asked_s: float = 0.0
    seen_at: float | None = None  # when the test raised the alarm (None: the first level)
    end: float | None = None  # when the next level began (None: the current one)

    @property
    def rate_per_h(self) -> float | None:
        return self.obtained * HOUR / self.asked_s if self.asked_s > 0 else None

    @property
    def err_per_h(self) -> float:
        """The rate's standard error (a count's: √n, one at least, over the exposure)."""
        return math.sqrt(max(1, self.obtained)) * HOUR / self.asked_s if self.asked_s > 0 else 0.0


@dataclass(frozen=True, slots=True)
class Params:
    ratio: float = 2.0  # the smallest rise the test is tuned for
    down_ratio: float = 2.0  # ... and fall
    glr_threshold: float = 10.0
    threshold: float = 8.0  # the statistic's alarm: higher, fewer false alarms, slower
    # a level's rate is tested against only once it rests on this many requests (fewer: a
    # baseline of two or three would make any run look like a change)
    min_count: int = 8
    # ... or once it was asked this long (a market that dried up brings no request to count)
    quiet_s: float = 3600.0
    # a rise: a level at least this many times the one before it
    rise: float = 1.5
    # the baseline's uncertainty: tested this many standard errors toward the alarm's side
    margin: float = 2.0
    keep_levels: int = 64  # the history kept (each level a few numbers)


DEFAULTS = Params()


@dataclass(slots=True)
class _Side:
    stat: float = 0.0
    # the runs since the statistic last was 0 (a new level's, if it raises the alarm)
    obtained: int = 0
    asked_s: float = 0.0
    start: float | None = None


@dataclass(slots=True)
class Watch:
    """The test's state: the levels so far (the current last) and each side's statistic."""

    params: Params = field(default_factory=Params)
    levels: list[Level] = field(default_factory=list)
    up: _Side = field(default_factory=_Side)
    down: _Side = field(default_factory=_Side)
    last_end: float | None = None  # the last run fed (runs ending at or before it are old)
    changes: int = 0  # alarms so far
    # the last runs: whether each was filled by its first poll alone (see ``saturated``)
    recent: deque[bool] = field(default_factory=lambda: deque(maxlen=SATURATION_RUNS))

    @property
    def level(self) -> Level | None:
        return self.levels[-1] if self.levels else None

    def feed(self, runs: Iterable[Run]) -> list[Level]:
        """Take the runs that ended since the last call, in the order they ended; returns the
        levels that began (an alarm each)."""
        began: list[Level] = []
        for run in sorted(runs, key=lambda r: r.end):
            if self.last_end is not None and run.end <= self.last_end:
                continue  # fed already (the reading overlaps the last one)
            if run.obtained < 0 or run.first < 0 or not math.isfinite(run.asked_s):
                continue
            if run.asked_s <= 0:
                if run.first > 0:  # filled at its first poll: no rate, but a sign of one
                    self.last_end = run.end
                    self.recent.append(True)
                continue
            self.last_end = run.end
            self.recent.append(run.first > 0 and run.obtained == 0)
            new = self._one(run)
            if new is not None:
                began.append(new)
        return began

    def _one(self, run: Run) -> Level | None:
        start = run.end - run.asked_s
        if not self.levels:
            self.levels.append(Level(start=start))
        level = self.levels[-1]
        base_n, base_s = level.obtained, level.asked_s
        self.levels[-1] = replace(level, obtained=base_n + run.obtained,
                                  asked_s=base_s + run.asked_s)  # fmt: skip
        quiet = base_s >= self.params.quiet_s  # long asked, few requests: a rate near nothing
        if base_n < self.params.min_count and not quiet:
            return None  # the level's rate is not known well enough to test against yet
        alarm = None
        for side, sign in ((self.up, 1), (self.down, -1)):
            if sign < 0 and base_n < self.params.min_count:
                continue  # a level of next to nothing cannot fall
            # the baseline: the level's rate before this side's statistic left 0
            n0, s0 = base_n - side.obtained, base_s - side.asked_s
            if n0 < self.params.min_count or s0 <= 0:
                n0, s0 = base_n, base_s
            # the baseline taken ``margin`` standard errors toward the side's alarm: a rate
            # known from a few requests is uncertain, and tested as if exact it raises false
            # alarms (a baseline 20 % low makes a rise of 2x look certain); a quiet level's
            # counts as one request at least
            n0 = max(n0, 1)
            lam0 = n0 / s0 * (1.0 + sign * self.params.margin / math.sqrt(n0))
            r = self.params.ratio if sign > 0 else self.params.down_ratio
            if sign > 0:
                step = run.obtained * math.log(r) - (r - 1.0) * lam0 * run.asked_s
            else:
                step = -run.obtained * math.log(r) + (1.0 - 1.0 / r) * lam0 * run.asked_s
            if side.stat + step <= 0:
                side.stat, side.obtained, side.asked_s, side.start = 0.0, 0, 0.0, None
                continue
            if side.stat == 0.0:
                side.start = start
            side.stat += step
            side.obtained += run.obtained
            side.asked_s += run.asked_s
            if alarm is None and (side.stat > self.params.threshold or self._glr(side, lam0)):
                alarm = side
        if alarm is None:
            return None
        return self._change(alarm, run.end)

    def _glr(self, side: _Side, lam0: float) -> bool:
        """The generalised test on the same stretch: the likelihood of the rate it shows
        against the baseline's, past ``glr_threshold``. A large step (a burst of 6x) is seen
        in fewer runs than by the CUSUM tuned for 2x."""
        if side.obtained <= 0 or side.asked_s <= 0 or lam0 <= 0:
            return False
        lam1 = side.obtained / side.asked_s
        llr = side.obtained * math.log(lam1 / lam0) - (lam1 - lam0) * side.asked_s
        return llr > self.params.glr_threshold

    def _change(self, side: _Side, now: float) -> Level:
        old = self.levels[-1]
        begin = side.start if side.start is not None else now
        self.levels[-1] = replace(old, obtained=old.obtained - side.obtained,
                                  asked_s=old.asked_s - side.asked_s, end=begin)  # fmt: skip
        new = Level(start=begin, obtained=side.obtained, asked_s=side.asked_s, seen_at=now)
        self.levels.append(new)
        del self.levels[: -self.params.keep_levels]
        self.up, self.down = _Side(), _Side()
        self.changes += 1
        return new

    # -- what the decision reads ---------------------------------------------------------

    def with_open_run(self, asking_since: float | None, now: float) -> Watch:
        """The test as it would stand if the run asking now ended now with nothing after its
        first poll: a run that has waited long for a request says the rate is low before it
        ends (at a rate fallen to nothing it never ends). A copy: the run is fed when it ends."""
        if asking_since is None:
            return self
        start = max(asking_since, self.last_end or asking_since)
        if now - start <= 0:
            return self
        copy = Watch(
            self.params,
            list(self.levels),
            replace(self.up),
            replace(self.down),
            self.last_end,
            self.changes,
            deque(self.recent, maxlen=SATURATION_RUNS),
        )
        level = copy.level
        if level is None:
            return copy
        # only the evidence that it is lower: the up side could not gain from no arrival
        copy._one(Run(now, now - start, 0))
        return copy

    def saturated(self) -> bool:
        """Whether the market gives this cluster more than it asks for: most of the last runs
        were filled by their first poll alone. Such a run says nothing of the rate but that it
        is high (its first batch is left out as a backlog), so a fleet the market keeps full
        reads its demand low: the decision takes it as a floor (autoscale.raise_worth)."""
        full = sum(self.recent)
        return len(self.recent) >= SATURATION_RUNS // 2 and full >= SATURATED_SHARE * len(
            self.recent
        )

    def rising(self) -> bool:
        """Whether the current level is a rise over the one before it."""
        return _is_rise(self.levels, len(self.levels) - 1, self.params.rise)

    def rise_hours(self) -> list[float]:
        """How long the rises that ended lasted, hours (the stream's own history)."""
        out = []
        for i, lv in enumerate(self.levels):
            if lv.end is not None and _is_rise(self.levels, i, self.params.rise):
                out.append((lv.end - lv.start) / HOUR)
        return out

    def expected_hours(self, now: float) -> float | None:
        """How much longer the current level is expected to last, hours: the median of what the
        levels that ended and lasted longer than this one has so far still had left (for a
        rise, the rises that ended, if any did: a burst lasts as bursts do); without such a
        history, as long again as it has lasted (Gott's rule). None: no level yet."""
        level = self.level
        if level is None:
            return None
        elapsed = max(0.0, (now - level.start) / HOUR)
        past = self.rise_hours() if self.rising() else []
        if not past:
            past = [(lv.end - lv.start) / HOUR for lv in self.levels if lv.end is not None]
        longer = [d - elapsed for d in past if d > elapsed]
        return statistics.median(longer) if longer else elapsed

    def rise_gap_hours(self) -> float | None:
        """How long the demand rested between rises (the end of one rise to the start of the
        next, median; None before two rises): how long a worker kept for the next one waits."""
        rises = [
            lv for i, lv in enumerate(self.levels) if _is_rise(self.levels, i, self.params.rise)
        ]
        gaps = [
            (b.start - a.end) / HOUR
            for a, b in itertools.pairwise(rises)
            if a.end is not None and b.start >= a.end
        ]
        return statistics.median(gaps) if gaps else None

    def recurring_hours(self, now: float, horizon_h: float) -> float:
        """The hours of rises expected within the next ``horizon_h`` after the current one:
        the share of the history spent in rises that ended, times the horizon. 0 without a
        rise that ended (one burst is not a pattern)."""
        done = self.rise_hours()
        if not done or not self.levels:
            return 0.0
        span_h = (now - self.levels[0].start) / HOUR
        if span_h <= 0:
            return 0.0
        return min(1.0, sum(done) / span_h) * horizon_h


def _is_rise(levels: list[Level], i: int, factor: float) -> bool:
    if i <= 0 or i >= len(levels):
        return False
    now, before = levels[i].rate_per_h, levels[i - 1].rate_per_h
    return now is not None and before is not None and now >= factor * max(before, 1e-9)


__all__ = ["DEFAULTS", "Level", "Params", "Run", "Watch"]
