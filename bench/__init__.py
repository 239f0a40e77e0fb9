"""vastui's benchmarks: `python -m bench [--quick] [--only NAME,...]` (see bench/README.md).

Each module (offers, startup, keys, fleet, logstream, economics) exposes
`run(quick: bool) -> dict[str, number | str]` and `GOALS: list[common.Goal]`. Nothing here runs
in the pytest suite: these are measurements, never assertions.
"""
