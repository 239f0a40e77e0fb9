"""The worker scripts' signal guard (worker-image/vastui-lib.sh signal_guard).

bash 5.2 loses a trapped signal that lands while it expands a command substitution: the trap
fails to parse and the script goes on with its next top-level command. CI saw a SIGTERMed
benchmark.sh reach a verdict this way. Unguarded, about one signal in ten sent to the loop below
is lost (the script then ends with status 1, its handler never run), so twenty in a row all
handled fails without the guard far more often than not; with it, every one must be handled.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests.helpers import WAIT

LIB = Path(__file__).resolve().parent.parent / "worker-image" / "vastui-lib.sh"

SCRIPT = f"""#!/usr/bin/env bash
set -uo pipefail
R="" RUN_DIR="${{0%/*}}"
. {LIB}
signal_guard "$@"
handled=""
on_signal() {{
  trap '' TERM INT HUP USR1
  handled=$1
  exit 12
}}
# the contract of a guarded script: its EXIT trap asks the guard (a trap bash lost)
on_exit() {{
  trap '' TERM INT HUP USR1
  [[ -n $handled ]] || {{ guard_signalled && handled=$GUARD_SIG; }}
  [[ -n $handled ]] || exit 1
  printf 'handled %s in %s\\n' "$handled" "$BASHPID"
  exit 12
}}
trap on_exit EXIT
trap 'on_signal TERM' TERM
trap 'on_signal INT' INT USR1
trap 'on_signal HUP' HUP
f() {{ printf '%s-%04d' "$1" "$2"; }}
g() {{ :; }}
printf 'ready %s\\n' "$BASHPID"
for ((i = 0; ; i++)); do
  g "$(f a "$i")" "$(f b "$i")"
done
"""


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "looper.sh"
    path.write_text(SCRIPT)
    path.chmod(0o755)
    return path


def _run_once(script: Path, sig: signal.Signals) -> tuple[int, list[str]]:
    # a session of its own: a failure kills the guard, the script and its resender together
    proc = subprocess.Popen(
        [str(script)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith("ready "), first
        proc.send_signal(sig)
        rc = proc.wait(timeout=WAIT)
        rest = proc.stdout.read().splitlines()
        return rc, [first.strip(), *rest]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_every_sigterm_reaches_a_script_busy_in_command_substitutions(script: Path) -> None:
    for _ in range(20):
        rc, lines = _run_once(script, signal.SIGTERM)
        assert rc == 12, lines
        # handled once, by the script (not the guard), even when bash lost the trap on the way
        assert [ln for ln in lines if ln.startswith("handled")] == [
            f"handled TERM in {lines[0].split()[1]}"
        ], lines
    assert not list(script.parent.glob("signal-guard.*"))  # the guard cleans up


@pytest.mark.parametrize(("sig", "name"), [(signal.SIGINT, "INT"), (signal.SIGHUP, "HUP")])
def test_sigint_and_sighup_reach_the_script_by_name(
    script: Path, sig: signal.Signals, name: str
) -> None:
    rc, lines = _run_once(script, sig)
    assert rc == 12, lines
    assert lines[-1].startswith(f"handled {name} in "), lines


def test_the_guard_passes_the_exit_status_and_arguments(tmp_path: Path) -> None:
    path = tmp_path / "echo.sh"
    path.write_text(
        f'#!/usr/bin/env bash\nR="" RUN_DIR=""\n. {LIB}\nsignal_guard "$@"\n'
        'printf "%s|" "$@"; read -r line; printf "%s\\n" "$line"; exit 7\n'
    )
    path.chmod(0o755)
    done = subprocess.run(
        [str(path), "a b", "", "c"],
        input="from stdin\n",
        capture_output=True,
        text=True,
        timeout=WAIT,
    )
    assert (done.returncode, done.stdout) == (7, "a b||c|from stdin\n")
