"""Numbers from a worker, bounded by physics: a rented host is not trusted to report what it
did. Pure functions; a refused number never reaches the performance record, the ranking, the
metrics or a verdict (vastui/engine/transitions.py).

The ceiling. No GPU proves PoRep C2 faster than the fastest figures known for its model
(``ranking.DEFAULT_GPU_RATES``: original-system.md §4's per-GPU rates with ample RAM and CPU,
the same figures the simulated world draws its machines around, ±25 % per world and N(1, 15 %)
per machine) by more than ``CEILING_MARGIN``; a model without a figure gets the fastest one
known. Three times the fastest is far above any machine we know (the simulator's fastest draw
is about 2x) and far below what a lie needs to top the ranking by much.
"""

from __future__ import annotations

from vastui.domain.reports import BenchResult
from vastui.engine.ranking import DEFAULT_GPU_RATES

CEILING_MARGIN = 3.0
# A benchmark's rate is the slope through its finishes after the pipeline filled; the proofs
# it reports over its whole window are a lower bound of that: the fill is at most a proof's
# latency, so the slope is never many times the plain average (model: 12 proofs, 10 in flight,
# about 2x). Beyond this factor the two numbers cannot both be true.
AGREEMENT_FACTOR = 4.0
COUNTER_SLACK = 2  # proofs that may land between two readings' clocks (a read's own latency)
REFUSALS_TO_KILL = 3  # refused counter readings within the window that end the worker


def rate_ceiling(gpu_name: str | None, num_gpus: int | None) -> float:
    """The most proofs/hour a machine of ``num_gpus`` x ``gpu_name`` could prove."""
    per_gpu = DEFAULT_GPU_RATES.get(gpu_name or "", max(DEFAULT_GPU_RATES.values()))
    return CEILING_MARGIN * per_gpu * max(1, num_gpus or 1)


def bench_refusal(result: BenchResult, gpu_name: str | None, num_gpus: int | None) -> str | None:
    """Why a benchmark's rate cannot be true (one line), or None."""
    rate = result.rate_per_hour
    if rate is None:
        return None
    ceiling = rate_ceiling(gpu_name, num_gpus)
    gpus = f"{num_gpus or 1}x {gpu_name or 'unknown GPU'}"
    if rate > ceiling:
        return (
            f"a rate of {rate:.4g} proofs/h is above what {gpus} can prove (ceiling "
            f"{ceiling:.0f}: {CEILING_MARGIN:g}x the fastest known per GPU)"
        )
    done = result.proofs_completed
    window = result.window_seconds
    if done is not None and window is not None and window > 0:
        plain = done * 3600.0 / window
        if rate > AGREEMENT_FACTOR * plain + 1.0:
            return (
                f"a rate of {rate:.4g} proofs/h disagrees with its own {done} proofs in "
                f"{window:.0f} s ({plain:.1f} proofs/h)"
            )
    return None


def counters_refusal(
    last_pid: int | None,
    last_completed: int,
    last_failed: int,
    last_uptime: float,
    last_at: float | None,
    pid: int | None,
    completed: int,
    failed: int,
    uptime: float | None,
    now: float,
    ceiling: float,
) -> str | None:
    """Why a counters reading cannot be true against the last good one (one line), or None.
    A new pid or a smaller uptime is a restarted daemon (its counters start at zero): not
    judged here. With the same daemon, counters only grow, and by no more than its GPUs could
    prove since the last reading."""
    if last_at is None or pid != last_pid or (uptime is not None and uptime + 1e-6 < last_uptime):
        return None
    if completed < last_completed or failed < last_failed:
        return (
            f"cuzk's counters went back ({last_completed} -> {completed} completed, "
            f"{last_failed} -> {failed} failed) with the same daemon (pid {pid}) running on"
        )
    elapsed = max(0.0, now - last_at)  # the engine's clock: the daemon's uptime is its word
    most = ceiling * elapsed / 3600.0 + COUNTER_SLACK
    grew = (completed - last_completed) + (failed - last_failed)
    if grew > most:
        return (
            f"cuzk's counters grew by {grew} proofs in {elapsed:.0f} s: more than its GPUs "
            f"could prove ({most:.0f} at {ceiling:.0f} proofs/h)"
        )
    return None
