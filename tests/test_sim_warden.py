"""Every process a simulated instance starts dies with the cloud that started it, even when
that cloud is SIGKILLed (vastsim/warden.py): a cloud process starts its warden and sandbox
processes (one backgrounded by a shell, as the worker scripts do), and is killed -9."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.helpers import wait_for
from vastsim.warden import MARKER

CLOUD = textwrap.dedent(
    """
    import os, subprocess, sys, time
    from pathlib import Path
    from vastsim.warden import MARKER, start_warden
    root = Path(sys.argv[1])
    warden = start_warden(root)
    env = {**os.environ, MARKER: str(root / "instance-1")}
    # a shell that backgrounds a daemon and exits, as entrypoint.sh does
    subprocess.run(["/bin/bash", "-c", "sleep 1000 & echo $! > " + sys.argv[2]], env=env,
                   start_new_session=True, check=True)
    direct = subprocess.Popen(["sleep", "1000"], env=env, start_new_session=True)
    print(warden.pid, direct.pid, flush=True)
    time.sleep(1000)
    """
)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    return state != "Z"


def test_a_sigkilled_cloud_takes_its_sandboxes_with_it_and_nothing_else(tmp_path) -> None:
    root, pidfile = tmp_path / "sim", tmp_path / "daemon.pid"
    other = subprocess.Popen(  # another cloud's sandbox process: not this warden's
        ["sleep", "1000"], env={**os.environ, MARKER: str(tmp_path / "simulation" / "x")}
    )
    cloud = subprocess.Popen(
        [sys.executable, "-c", CLOUD, str(root), str(pidfile)],
        stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parent.parent,
    )  # fmt: skip
    try:
        warden, direct = (int(x) for x in cloud.stdout.readline().split())
        daemon = int(wait_for(lambda: pidfile.exists() and pidfile.read_text().strip()))
        assert alive(warden) and alive(direct) and alive(daemon)
        cloud.send_signal(signal.SIGKILL)
        cloud.wait(30)
        wait_for(lambda: not alive(direct) and not alive(daemon), what="the sandbox's end")
        wait_for(lambda: not alive(warden), what="the warden's own end")
        assert alive(other.pid), "a process of another root is not touched"
    finally:
        for p in (cloud, other):
            p.kill()
            p.wait(30)
        for pid in (locals().get("direct"), locals().get("daemon")):
            if isinstance(pid, int) and alive(pid):
                os.kill(pid, signal.SIGKILL)


async def test_a_worker_host_keeps_a_warden_over_its_sandboxes_while_attached(tmp_path) -> None:
    """The simulator's worker host (the demo's, sim serve's, the tests') arms a warden over
    its root when it attaches, and lets it go when it closes cleanly."""
    from vastsim import ManualClock, SimCloud
    from vastsim.workers import SimWorkerHost

    host = SimWorkerHost(SimCloud(seed=1, clock=ManualClock()), tmp_path / "sim", speed=1.0)
    host.attach()
    try:
        warden = host._warden
        assert warden is not None and alive(warden.pid)
        argv = Path(f"/proc/{warden.pid}/cmdline").read_bytes().split(b"\0")
        assert str(tmp_path / "sim").encode() in argv and b"warden.py" in argv[3]
    finally:
        await host.close()
    assert host._warden is None and not alive(warden.pid)
