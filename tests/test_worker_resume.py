"""A worker whose container is stopped and started again (worker-image/entrypoint.sh).

Vast stops an interruptible instance that was outbid: every process of the container is killed,
its filesystem is kept, and a later start runs the onstart command, entrypoint.sh, from the top.
The worker sets up and fetches again (the parameters on disk are not downloaded again), skips a
benchmark that passed on this same machine with this image and MIN_RATE
(var/lib/vastui/benchmark-passed.json), and proves again as the same curio machine; a machine
that changed is benchmarked again. events.jsonl keeps the earlier run's lines.

The sandbox, the stand-ins and the controller are those of tests/test_worker_scripts.py; tests
wait on conditions, never on durations.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import Controller, wait_for
from tests.test_worker_scripts import Sandbox, _alive, stages_and_events, start_entrypoint

MARKER = "var/lib/vastui/benchmark-passed.json"
EVENTS = "var/lib/vastui/events.jsonl"
FIRST_RUN = [
    ("setup", "start"), ("setup", "ok"), ("paramfetch", "start"), ("paramfetch", "ok"),
    ("benchmark", "start"), ("benchmark", "result"), ("benchmark", "ok"), ("prove", "start"),
]  # fmt: skip
ENV = {"BENCH_PROOFS": "2", "PARAMFETCH_PROGRESS_INTERVAL": "0"}


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[Sandbox]:
    box = Sandbox(tmp_path)
    try:
        yield box
    finally:
        box.kill_all()


@pytest.fixture
def controller() -> Iterator[Controller]:
    c = Controller()  # the sandbox learns its database from c.env() (start_entrypoint)
    try:
        yield c
    finally:
        c.close()


def _marked(box: Sandbox) -> list[int]:
    """The live processes of the sandbox's container (those that carry its WORKER_ROOT)."""
    marker = f"WORKER_ROOT={box.root}".encode()
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                if marker in fh.read().split(b"\0") and _alive(int(entry)):
                    pids.append(int(entry))
        except OSError:
            continue
    return pids


def stop_container(box: Sandbox, proc: subprocess.Popen) -> None:
    """What Vast's stop does to the container: SIGKILL to every process (the entrypoint's
    process group, then anything that left it), no handler runs; the files stay."""
    os.killpg(proc.pid, signal.SIGKILL)
    box.kill_all()
    wait_for(lambda: not _marked(box), what="every process of the container gone")


def events(box: Sandbox) -> list[dict[str, Any]]:
    """The worker's events; a line that is not one (cut short by a kill) is skipped, as the
    controller skips it (vastui/ssh/worker.py positioned_events)."""
    found = []
    path = box.path(EVENTS)
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            found.append(json.loads(line))
        except ValueError:
            continue
    return found


def running(box: Sandbox, proc: subprocess.Popen, times: int) -> bool:
    seen = events(box)
    failed = [e for e in seen if e["event"] == "fail"]
    assert not failed, failed
    assert proc.poll() is None, f"entrypoint.sh exited ({proc.returncode}) instead of proving"
    return sum(e.get("detail") == "running" for e in seen) >= times


def first_run(box: Sandbox, c: Controller, **env: str) -> tuple[subprocess.Popen, str]:
    proc = start_entrypoint(box, c, **dict(ENV, **env))
    wait_for(lambda: running(box, proc, 1), what="the first run proving")
    text = box.path(EVENTS).read_text()
    assert stages_and_events(box.events()) == FIRST_RUN
    return proc, text


def test_a_stopped_worker_resumes_without_benchmarking_again(
    sandbox: Sandbox, controller: Controller
) -> None:
    proc, before = first_run(sandbox, controller)
    result = sandbox.result()
    marker = json.loads(sandbox.path(MARKER).read_text())
    assert marker["rate_per_hour"] == result["rate_per_hour"] > 0
    assert (marker["image"], marker["min_rate"]) == ("example/vastui-worker:test", 1.0)
    gpus = marker["machine"]["gpus"]
    assert len(gpus) == 1 and gpus[0].startswith("GPU 0: NVIDIA GeForce RTX 4090 (UUID: GPU-")
    assert marker["machine"]["cpus"] == 32
    assert marker["machine"]["memory_limit_gib"] == int(256e9) // 2**30
    old_daemon = result["daemon_pid"]
    assert sandbox.path("data/zk/params/pce-porep-32g.bin").exists()  # the daemon saved its PCE

    stop_container(sandbox, proc)
    # The container's next life numbers its processes afresh: the pids the killed run wrote
    # down may be anyone's. Here one process holds both, and calls itself entrypoint.sh.
    decoy = sandbox.start(["bash", "-c", "sleep 600; :", "entrypoint.sh"])
    wait_for(lambda: b"entrypoint.sh" in Path(f"/proc/{decoy.pid}/cmdline").read_bytes(),
             what="the decoy started")  # fmt: skip
    pid_file = sandbox.path("run/entrypoint.pid")
    pid_file.write_text(f"{decoy.pid} {pid_file.read_text().split()[1]}\n")
    sandbox.path("run/cuzk-daemon.pid").write_text(f"{decoy.pid}\n")
    # and a line the kill cut short (a long event is more than one write)
    cut = '{"ts":1,"stage":"prove","event":"progress","detail":"cut sh'
    with sandbox.path(EVENTS).open("a") as fh:
        fh.write(cut)

    proc = start_entrypoint(sandbox, controller, **ENV)
    wait_for(lambda: running(sandbox, proc, 2), what="the second run proving")
    text = sandbox.path(EVENTS).read_text()
    assert text.startswith(before + cut + "\n"), "the earlier run's lines are intact"
    again = [json.loads(line) for line in text[len(before + cut) + 1 :].splitlines()]
    assert stages_and_events(again) == [
        ("setup", "start"), ("setup", "ok"), ("paramfetch", "start"), ("paramfetch", "ok"),
        ("benchmark", "start"), ("benchmark", "ok"), ("prove", "start"),
    ]  # fmt: skip
    assert not [e for e in again if e["event"] in ("result", "fail")]
    ok = next(e for e in again if (e["stage"], e["event"]) == ("benchmark", "ok"))
    assert (ok["resumed"], ok["rate"]) == (True, result["rate_per_hour"])
    assert sandbox.result() == result, "production's MaxPending still comes from it"
    bench_log = sandbox.log("benchmark")
    assert bench_log.count("RESULT: ") == 1, "cuzk-bench never ran again"
    assert "resumed: this container passed the benchmark at " in bench_log
    # parameters on disk are checked, not fetched again
    fetch = sandbox.log("paramfetch").split("parameter and key-fetching complete")
    assert len(fetch) == 3 and "Fetching " in fetch[0] and "Fetching " not in fetch[1]
    # ... by their names and sizes against what the first fetch checked: curio trusts the
    # .params (TRUST_PARAMS=1), SnapDeals' and the rest it hashes again
    assert "DO NOT USE IN PRODUCTION" not in fetch[0] and "DO NOT USE IN PRODUCTION" in fetch[1]
    assert "curio trusts the .params files (TRUST_PARAMS=1)" in fetch[1]
    fetched = [e for e in events(sandbox) if (e["stage"], e["event"]) == ("paramfetch", "ok")]
    assert [e["trusted"] for e in fetched] == [False, True]
    # a new daemon (it extracts its PCE again), not the process the old pid file names
    details = [e.get("detail") or "" for e in again if e["event"] == "progress"]
    new_daemon = int(sandbox.path("run/cuzk-daemon.pid").read_text())
    assert new_daemon not in (decoy.pid, old_daemon)
    assert details[0] == f"cuzk-daemon ready (pid {new_daemon})"
    setup_log = sandbox.log("setup")
    assert "restarted: an earlier run left " in setup_log
    assert "removed the PCE files of an earlier run" in setup_log
    # curio again as the same machine
    assert [m["host_and_port"] for m in controller.view()["machines"]] == ["127.0.0.1:12407"]
    assert _alive(decoy.pid)


@pytest.mark.parametrize(
    ("change", "differs"),
    [
        ("gpu", 'gpus (was ["GPU 0: NVIDIA GeForce RTX 4090 (UUID: GPU-'),
        ("min_rate", "min_rate (was 1.000, now 2.000)"),
    ],
)
def test_a_worker_restarted_on_a_changed_machine_benchmarks_again(
    sandbox: Sandbox, controller: Controller, change: str, differs: str
) -> None:
    proc, before = first_run(sandbox, controller)
    stop_container(sandbox, proc)
    env = dict(ENV)
    if change == "gpu":
        sandbox.machine(gpu_name="RTX 5090")
        sandbox.memory(256, 256)
    else:
        env["MIN_RATE"] = "2"
    proc = start_entrypoint(sandbox, controller, **env)
    wait_for(lambda: running(sandbox, proc, 2), what="the second run proving")
    text = sandbox.path(EVENTS).read_text()
    assert text.startswith(before)
    again = [json.loads(line) for line in text[len(before) :].splitlines()]
    assert stages_and_events(again) == FIRST_RUN, "a fresh benchmark, its own result"
    ok = next(e for e in again if (e["stage"], e["event"]) == ("benchmark", "ok"))
    assert "resumed" not in ok
    assert sandbox.log("benchmark").count("RESULT: ") == 2
    assert "an earlier run passed the benchmark, but not on this: " in sandbox.log("benchmark")
    assert differs in sandbox.log("benchmark")
    marker = json.loads(sandbox.path(MARKER).read_text())
    assert marker["rate_per_hour"] == sandbox.result()["rate_per_hour"]
    if change == "gpu":
        assert "RTX 5090" in marker["machine"]["gpus"][0]
    else:
        assert marker["min_rate"] == 2.0


def test_parameter_files_changed_since_their_check_are_checked_again(
    sandbox: Sandbox, controller: Controller
) -> None:
    proc, _before = first_run(sandbox, controller)
    stop_container(sandbox, proc)
    params = sorted(sandbox.path("var/tmp/filecoin-proof-parameters").glob("*.params"))
    assert params
    with params[0].open("a") as fh:  # a file whose size is not the one checked
        fh.write("x")
    proc = start_entrypoint(sandbox, controller, **ENV)
    wait_for(lambda: running(sandbox, proc, 2), what="the second run proving")
    fetched = [e for e in events(sandbox) if (e["stage"], e["event"]) == ("paramfetch", "ok")]
    assert [e["trusted"] for e in fetched] == [False, False]
    log = sandbox.log("paramfetch")
    assert "differ from those an earlier fetch checked: curio checks them all again" in log
    assert "DO NOT USE IN PRODUCTION" not in log
    # checked and passed again: the next restart may trust them
    listing = sandbox.path("var/lib/vastui/params-checked").read_text()
    assert f"{params[0].name} {params[0].stat().st_size}" in listing.splitlines()
