"""A stand-in's main thread, parked in sleep_forever, runs a signal's handler at once even when
the kernel gave the signal to another of its threads (the usual case for a busy process): the
curio stand-in outlived a SIGTERM by over 60 s under load, its main thread in time.sleep(3600)
(vastsim/standins/_simlib.py sleep_forever)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

STANDINS = Path(__file__).resolve().parent.parent / "vastsim" / "standins"

CHILD = """
import os, signal, sys, threading
sys.path.insert(0, sys.argv[1])
import _simlib as sim

def on_term(signum, frame):
    sys.stdout.write("handled\\n")
    sys.stdout.flush()
    os._exit(0)

signal.signal(signal.SIGTERM, on_term)

def other():
    sys.stdin.readline()  # the test's go
    signal.pthread_kill(threading.get_ident(), signal.SIGTERM)  # to this thread, not main
    while True:
        pass  # busy, as a worker thread is

threading.Thread(target=other, daemon=True).start()
print("ready", flush=True)
sim.sleep_forever()
"""


def test_a_signal_to_another_thread_wakes_the_sleeping_main_thread() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(STANDINS)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stdin is not None
        assert proc.stdout.readline() == "ready\n"
        proc.stdin.write("go\n")
        proc.stdin.flush()
        # before the fix the handler waited for the main thread's hour-long sleep to end
        assert proc.wait(timeout=60) == 0
        assert proc.stdout.read() == "handled\n"
    finally:
        proc.kill()
        proc.wait()


def test_sleep_forever_in_another_thread_still_blocks_it() -> None:
    """cuzk-daemon parks wedged threads in it: only the main thread takes the wakeup fd."""
    code = (
        "import sys, threading; sys.path.insert(0, sys.argv[1]); import _simlib as sim\n"
        "t = threading.Thread(target=sim.sleep_forever, daemon=True); t.start()\n"
        "t.join(0.2); print('alive' if t.is_alive() else 'ended')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(STANDINS)], capture_output=True, text=True, timeout=60,
        check=True,
    ).stdout  # fmt: skip
    assert out == "alive\n"
