"""A worker's stages and the kinds of its destroy: the words every layer uses (the store keeps
them in ``instances.state`` and ``instances.kill_kind``; the decisions name them)."""

from __future__ import annotations

# Pipeline stages in order. ``killed`` is terminal; ``legacy`` marks imported rows whose original
# state could not be mapped.
STAGES: tuple[str, ...] = ("loading", "setup", "paramfetch", "benchmark", "proving")
STATES: tuple[str, ...] = (*STAGES, "killed", "legacy")

# What a live worker is doing now, as the operator reads it everywhere (the strip, `vastui
# status`, the listings, the metrics): its stage, unless it is stopped and bills only its disk
# (``pooled``: kept in the warm pool; ``outbid``: an interruptible rental a higher bid stopped).
# A stopped worker proves nothing and is never counted as proving or in the fleet's $/h.
STOPPED_PHASES: tuple[str, ...] = ("pooled", "outbid")
PHASES: tuple[str, ...] = (*STAGES, *STOPPED_PHASES, "killed", "legacy")

# Known kill reason codes (``instances.kill_kind``). Free text is accepted; these are the ones
# vastui writes itself.
KILL_KINDS: tuple[str, ...] = (
    "bench_below_min",  # benchmark finished below min_rate
    "bench_implausible",  # a benchmark rate beyond physics or its own proofs and time
    "prove_implausible",  # cuzk's counters refused again and again (went back, grew too fast)
    "prove_below_min",  # measured production rate below min_rate over the window
    "prove_failing",  # failed proofs in production
    "prove_unresponsive",  # cuzk-daemon stopped answering while proving
    "prove_unreachable",  # no SSH to the worker for long while its fellows answered
    "prove_daemon_died",  # cuzk-daemon exited while proving
    "prove_overdue",  # proofs outlived curio's ProveTimeout: the daemon proves unwanted work
    "bench_deadline",  # too slow for curio's ProveTimeout at any MaxPending that keeps min_rate
    "tunnel_down",  # waited too long for the controller's tunnel: the controller's fault
    "setup_machine",  # the machine is not what it was listed as (memory, CPU, driver)
    "setup_identity",  # no curio identity for the worker (the controller's configuration)
    "deadline_setup",  # a stage exceeded its deadline (deadline_<stage>)
    "deadline_paramfetch",
    "deadline_benchmark",
    "manual",  # operator killed it
    "bad_machine",  # the machine is on the bad list
    "vanished",  # instance disappeared from Vast
    "exited",  # the worker / container exited
    "unregistered",  # never reported in within the grace period
    "legacy",  # imported from the original tool, cause unknown
    "prove_curio_failing",  # curio's PSProve tasks fail on it (its own record), cuzk or not
    "identity_collision",  # its curio identity is another live machine's: the fleet's fault
    "pool_expired",  # stopped in the warm pool too long, or the pool over its size
    "pool_unavailable",  # its start from the warm pool was queued by Vast past its deadline
)
