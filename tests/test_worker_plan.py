"""The worker's plan and identity, where the worker (bash) and the engine (Python) must agree:
the memory and disk plan, the MaxPending that fits curio's ProveTimeout, the curio listen
address of a runner id. Each bash function is run as the worker runs it (vastui-lib.sh sourced
in a sandbox root) and compared with vastui/domain/plan.py and identity.py on a table."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from vastui.config import DISK_NEED_GB
from vastui.domain import plan
from vastui.engine import identity

REPO = Path(__file__).resolve().parents[1]
LIB = REPO / "worker-image" / "vastui-lib.sh"


def bash(script: str, root: Path | None = None, env: dict[str, str] | None = None) -> str:
    """Run ``script`` with vastui-lib.sh sourced (R = ``root``, or a real worker's "")."""
    prelude = f'R="{root or ""}"; RUN_DIR="$R/run"; . "{LIB}"\n'
    out = subprocess.run(
        ["bash", "-c", prelude + script],
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": "/usr/bin:/bin", **(env or {})},
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def lib_value(name: str) -> int:
    match = re.search(rf"^{name}=([0-9]+)$", LIB.read_text(), re.MULTILINE)
    assert match, name
    return int(match.group(1))


def test_the_worker_and_the_engine_hold_the_same_plan() -> None:
    assert lib_value("PLAN_POREP_SRS_GIB") == plan.POREP_SRS_GIB
    assert lib_value("PLAN_POREP_PCE_GIB") == plan.POREP_PCE_GIB
    assert lib_value("PLAN_SNAP_SRS_GIB") == plan.SNAP_SRS_GIB
    assert lib_value("PLAN_SNAP_PCE_GIB") == plan.SNAP_PCE_GIB
    assert lib_value("PLAN_PCE_BUILD_GIB") == plan.PCE_BUILD_GIB
    assert lib_value("PLAN_PARTITION_GIB") == plan.PARTITION_GIB
    assert lib_value("PLAN_MIN_PARTITIONS") == plan.MIN_PARTITIONS
    assert lib_value("PLAN_PARAMS_DISK_GIB") == plan.PARAMS_DISK_GIB
    assert lib_value("PLAN_PCE_DISK_GIB") == plan.PCE_DISK_GIB
    assert plan.memory_need_gib() == 163
    assert plan.disk_need_gb() == DISK_NEED_GB == 205


SIZING_CASES = [
    # rate p/h, service s, configured MaxPending, ProveTimeout s, margin
    (32.0, 300.0, 10, 1800, 0.2),  # fast: all 10 fit (latency 18.75 min of 25)
    (24.0, 300.0, 10, 1800, 0.2),  # exactly at the edge: 10 / 24 h = 25 min
    (23.9, 300.0, 10, 1800, 0.2),  # just under: 9 fit
    (13.0, 700.0, 10, 1800, 0.2),  # slow and cheap: 5 in flight keep 13/h
    (13.0, 1400.0, 10, 1800, 0.2),  # a slow single proof: 5 in flight keep 12.8/h
    (3.0, 1600.0, 10, 1800, 0.2),  # a proof alone outlasts the deadline: none fits
    (2.0, 900.0, 10, 1800, 0.2),  # under one proof per deadline
    (40.0, 250.0, 4, 1800, 0.2),  # the configured MaxPending caps it
    (32.0, 300.0, 10, 3600, 0.0),  # ProveTimeout 1h, no margin
    (31.412, 287.125, 10, 1800, 0.25),  # thousandths as the worker writes them
    (0.0, 300.0, 10, 1800, 0.2),  # no rate
]


@pytest.mark.parametrize("case", SIZING_CASES, ids=[str(c) for c in SIZING_CASES])
def test_deadline_sizing_is_the_same_on_the_worker(case: tuple) -> None:
    rate, service, maxp, timeout, margin = case
    expected = plan.deadline_sizing(rate, service, maxp, timeout, margin)
    out = bash(
        f"deadline_size {round(rate * 1000)} {round(service * 1000)} {maxp} "
        f"{timeout * 1000} {round(margin * 1000)}\n"
        'printf "%s %s %s %s" "$SIZED_MAX_PENDING" "$SIZED_RATE_M" "$SIZED_LATENCY_MS" '
        '"$SIZED_LIMIT_MS"'
    )
    got = [int(x) for x in out.split()]
    assert got == [
        expected.max_pending,
        round(expected.rate * 1000),
        round(expected.latency_s * 1000),
        round(expected.limit_s * 1000),
    ]


def test_deadline_sizing_sizes_rather_than_rejects() -> None:
    # a cheap slow machine that pays: fewer proofs in flight, its rate kept
    slow = plan.deadline_sizing(13.0, 700.0, 10, 1800, 0.2)
    assert (slow.max_pending, slow.rate) == (3, 13.0)
    # the worst wait: three sent at once, the last done 700 s + 2 intervals later
    assert slow.latency_s == pytest.approx(700 + 2 * 3600 / 13, abs=0.01)
    assert slow.latency_s <= slow.limit_s == 1500.0
    # a machine whose single proof outlasts ProveTimeout / 1.2 fits no MaxPending
    assert plan.deadline_sizing(3.0, 1600.0, 10, 1800, 0.2).max_pending == 0
    # at 10 in flight a proof of a 32 p/h machine waits at worst 9/32 h + 300 s: all 10 fit
    fast = plan.deadline_sizing(32.0, 300.0, 10, 1800, 0.2)
    assert (fast.max_pending, fast.rate, fast.latency_s) == (10, 32.0, 1312.5)
    # a single proof that takes most of the deadline leaves room for few in flight
    tight = plan.deadline_sizing(13.5, 1400.0, 10, 1800, 0.2)
    assert (tight.max_pending, round(tight.rate, 3)) == (1, 2.571)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30m", 1800), ("1h30m", 5400), ("90s", 90), ("1h", 3600), ("", 1800), ("x", 1800),
     ("30", 1800), ("5m30s", 330)],
)  # fmt: skip
def test_prove_timeout_is_read_alike(text: str, seconds: int) -> None:
    assert plan.duration_s(text) == seconds
    assert int(bash(f'duration_ms "{text}"')) == seconds * 1000


@pytest.mark.parametrize(
    ("runner", "base"),
    [(1, 12400), (7, 12400), (53135, 12400), (53136, 12400), (99999, 12400), (3, 20000)],
)
def test_a_runner_listens_where_the_controller_says(runner: int, base: int) -> None:
    assert bash(f"runner_listen {runner} {base}") == identity.curio_listen(runner, base)


def test_identities_are_unique_loopback_ports_away_from_curios_own() -> None:
    ports = {identity.listen_port(n) for n in range(1, 53136)}
    assert len(ports) == 53135, "every runner id below the wrap has its own port"
    assert min(ports) == 12401 and max(ports) == 65535
    assert identity.listen_port(53136) == 12401, "wraps past 65535"
    assert 12300 not in ports and 4701 not in ports  # curio's API and GUI
    assert identity.curio_listen(7) == "127.0.0.1:12407"
    assert identity.node_name("main", 7) == "vastui-main-r7"  # a label without a fleet id
    assert identity.node_name("main", 7, "2b63c98f") == "vastui-main.2b63c98f-r7"
    assert identity.runner_env("main", 7) == {
        "VASTUI_RUNNER_ID": "7",
        "CURIO_LISTEN": "127.0.0.1:12407",
        "CURIO_NODE_NAME": "vastui-main-r7",
    }
    with pytest.raises(ValueError, match="runner id must be >= 1"):
        identity.listen_port(0)


@pytest.mark.parametrize(
    ("value", "parsed"),
    [("7", 7), ("0", None), ("-1", None), ("1_0", None), ("٣", None), (" 7", None), (7, None),
     ("99999999999", None), ("2147483647", 2147483647), (None, None)],
)  # fmt: skip
def test_a_runner_id_from_an_instance_environment_is_checked(value, parsed) -> None:
    assert identity.parse_runner_id(value) == parsed


def sandbox(tmp_path: Path, *, cores: str | None, quota: str | None, limit_gb: float,
            host_gb: float, flags: str | None = None) -> Path:  # fmt: skip
    root = tmp_path / "root"
    cgroup = root / "sys" / "fs" / "cgroup"
    cgroup.mkdir(parents=True)
    (root / "proc").mkdir()
    if cores is not None:
        (cgroup / "cpuset.cpus.effective").write_text(cores + "\n")
    if quota is not None:
        (cgroup / "cpu.max").write_text(quota + "\n")
    (cgroup / "memory.max").write_text(f"{int(limit_gb * 2**30)}\n")
    (root / "proc" / "meminfo").write_text(f"MemTotal:       {int(host_gb * 2**20)} kB\n")
    if flags is not None:
        (root / "proc" / "cpuinfo").write_text(f"processor\t: 0\nflags\t\t: {flags}\n\n")
    return root


PLAN_OUT = 'cuzk_plan 5; printf "%s|%s|%s|%s|%s|%s" "$CPUS" "$MAX_PARALLEL_SYNTH" ' \
    '"$GPU_THREADS" "$SYNTH_THREADS" "$MEM_BUDGET_GIB" "$PLAN_SHORT"'  # fmt: skip


@pytest.mark.parametrize(
    ("cores", "quota", "expected_cpus"),
    [("0-63", None, 64), ("0-31", "1600000 100000", 16), ("0-3,8-11", None, 8),
     (None, "850000 100000", 9), ("0-7", "max 100000", 8)],
)  # fmt: skip
def test_cuzk_is_tuned_from_the_containers_cpus(tmp_path, cores, quota, expected_cpus) -> None:
    root = sandbox(tmp_path, cores=cores, quota=quota, limit_gb=256, host_gb=1024)
    cpus, synth, gpu, threads, budget, short = bash(PLAN_OUT, root).split("|")
    assert int(cpus) == expected_cpus
    # cuzk's 18 syntheses are for 64 cores (config.rs:358): the same share of these
    assert int(synth) == max(1, expected_cpus * 18 // 64)
    assert int(gpu) == max(1, expected_cpus // 3) and int(threads) == expected_cpus
    assert int(budget) == 251 and short == "", "the cgroup limit, not the host's MemTotal"


def test_a_machine_too_small_for_the_plan_is_named_in_numbers(tmp_path) -> None:
    root = sandbox(tmp_path, cores="0-31", quota=None, limit_gb=150, host_gb=1024)
    *_, budget, short = bash(PLAN_OUT, root).split("|")
    assert int(budget) == 145
    assert short == (
        "memory plan needs 163 GiB (PoRep SRS 45 + PCE 26, Snap SRS 33 + PCE 17, PCE build 14, "
        "2 partitions x 14); the budget is 145 GiB (container limit 150 GiB - margin 5 GiB)"
    )
    assert plan.ram_short(160) == "160 GB of RAM: a budget of 144 GiB, the plan needs 163 GiB"
    assert plan.ram_short(240) is None


def test_the_cuzk_config_is_one_for_benchmark_and_production(tmp_path) -> None:
    root = sandbox(tmp_path, cores="0-15", quota=None, limit_gb=256, host_gb=512)
    bash(
        "CUZK_LISTEN=127.0.0.1:9820 CUZK_STATUS_ADDR=127.0.0.1:9821 "
        'write_cuzk_config "$R/cuzk.toml" 9',
        root,
    )
    import tomllib

    cfg = tomllib.loads((root / "cuzk.toml").read_text())
    # the plan's SRS and PCEs stay resident: nothing is evicted for being idle
    assert cfg["memory"] == {
        "total_budget": "247GiB",
        "safety_margin": "9GiB",
        "eviction_min_idle": "1000000m",
    }
    assert cfg["pipeline"] == {"max_parallel_synthesis": 4}
    assert cfg["gpus"] == {"gpu_threads": 5}
    assert cfg["synthesis"] == {"threads": 16}
    assert cfg["daemon"]["listen"] == "127.0.0.1:9820"
    # both scripts call this writer, with the same margin (no hard-coded 5 left in either)
    for script in ("entrypoint.sh", "benchmark.sh"):
        text = (REPO / "worker-image" / script).read_text()
        assert 'write_cuzk_config "$CUZK_CONFIG" "$CUZK_SAFETY_MARGIN_GIB"' in text
        assert "memory_budget 5" not in text


@pytest.mark.parametrize(
    ("flags", "missing"),
    [("fpu cx16 lahf_lm popcnt pni ssse3 sse4_1 sse4_2 avx avx2 bmi1 bmi2 f16c fma abm movbe "
      "xsave", ""),
     ("fpu cx16 lahf_lm popcnt pni ssse3 sse4_1 sse4_2 avx bmi1 f16c fma abm movbe xsave",
      "avx2 bmi2"),
     ("fpu cx16 lahf_lm popcnt pni ssse3 sse4_1 sse4_2",
      "avx avx2 bmi1 bmi2 f16c fma abm movbe xsave")],
)  # fmt: skip
def test_an_old_cpu_is_named_by_what_it_lacks(tmp_path, flags: str, missing: str) -> None:
    root = sandbox(tmp_path, cores="0-7", quota=None, limit_gb=256, host_gb=256, flags=flags)
    assert bash("missing_cpu_flags", root) == missing


def test_the_disk_plan_reads_the_simulators_stand_in_for_df(tmp_path) -> None:
    assert bash("disk_free_gib /", env={"WORKER_DISK_FREE_GIB": "220"}) == "220"
    real = bash("disk_free_gib /")
    assert real.isdigit(), "a real worker reads df"
