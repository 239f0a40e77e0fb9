"""`make`'s set-up of .venv: two makes started together set it up once, the second waits.

The real Makefile runs against a stand-in Python (`PY=`) whose `-m venv` writes a fake venv
python that logs every pip call; the first install blocks on a FIFO until the test opens it,
so the order of events is forced, never timed.
"""

from __future__ import annotations

import os
import queue
import shutil
import signal
import stat
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SAFETY = 30  # seconds: only a hung make (a broken lock) hits it

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")

FAKE_PY = """#!/bin/sh
# stand-in for `python3 -m venv DIR`
[ "$1 $2" = "-m venv" ] || exit 9
mkdir -p "$3/bin"
cp "$FAKE_DIR/venv-python" "$3/bin/python"
echo venv >> "$FAKE_LOG"
"""

VENV_PY = """#!/bin/sh
# stand-in for the venv's python: pip only
case "$*" in
  "-m pip --version") exit 0 ;;
  *" -e "*) echo "install $*" >> "$FAKE_LOG"; cat "$FAKE_GATE" > /dev/null ;;
  *) echo "pip $*" >> "$FAKE_LOG" ;;
esac
"""


def _script(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Path]:
    proj = tmp_path / "proj"
    proj.mkdir()
    shutil.copy(ROOT / "Makefile", proj / "Makefile")
    (proj / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    fake = tmp_path / "fake"
    fake.mkdir()
    _script(fake / "python3", FAKE_PY)
    _script(fake / "venv-python", VENV_PY)
    os.mkfifo(tmp_path / "gate")
    yield proj


class Make:
    """One `make` building the stamp, in its own process group, its output read by a thread."""

    def __init__(self, proj: Path, *extra: str) -> None:
        tmp = proj.parent
        env = {
            **os.environ,
            "FAKE_DIR": str(tmp / "fake"),
            "FAKE_LOG": str(tmp / "log"),
            "FAKE_GATE": str(tmp / "gate"),
            "MAKEFLAGS": "",
        }
        argv = ["make", "-s", f"PY={tmp / 'fake' / 'python3'}", *extra, ".venv/.installed-stamp"]
        self.proc = subprocess.Popen(
            argv, cwd=proj, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, start_new_session=True,
        )  # fmt: skip
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def read_until(self, needle: str) -> None:
        while True:
            try:
                line = self.lines.get(timeout=SAFETY)
            except queue.Empty:
                raise AssertionError(f"make is stuck before {needle!r}: {self.seen}") from None
            if line is None:
                raise AssertionError(f"make ended without printing {needle!r}: {self.seen}")
            self.seen.append(line)
            if needle in line:
                return

    def finish(self) -> str:
        """Wait for the exit status 0; the rest of the output."""
        assert self.proc.wait(SAFETY) == 0, self.seen
        rest: list[str] = []
        while (line := self.lines.get(timeout=SAFETY)) is not None:
            rest.append(line)
        return "\n".join(rest)

    def stop(self) -> None:
        # The whole group: a blocked stand-in install must not outlive the test.
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


def _race(proj: Path, *extra: str) -> tuple[list[str], str]:
    first = Make(proj, *extra)
    second: Make | None = None
    try:
        first.read_until("setting up .venv")  # first holds the lock
        second = Make(proj, *extra)
        second.read_until("waiting for another make")  # second is blocked on it
        with open(proj.parent / "gate", "w"):  # let the first install finish
            pass
        first.finish()
        rest = second.finish()
    finally:
        for make in (first, second):
            if make is not None:
                make.stop()
    return (proj.parent / "log").read_text().splitlines(), rest


@pytest.mark.skipif(shutil.which("flock") is None, reason="needs flock (util-linux)")
def test_two_makes_set_up_the_venv_once_with_flock(project: Path):
    log, rest = _race(project)
    assert [line.split()[0] for line in log] == ["venv", "pip", "install"]
    assert "setting up" not in rest
    assert (project / ".venv" / ".installed-stamp").read_text().strip()


def test_two_makes_set_up_the_venv_once_without_flock(project: Path):
    log, rest = _race(project, "FLOCK=no-such-flock")
    assert [line.split()[0] for line in log] == ["venv", "pip", "install"]
    assert "setting up" not in rest
    assert not (project / ".venv" / ".setup.lock.d").exists(), "the mkdir lock is released"


def test_changed_pyproject_reinstalls_and_unchanged_does_not(project: Path):
    gate = project.parent / "gate"
    gate.unlink()
    gate.write_text("")  # a plain file: installs do not block here
    Make(project).finish()
    (project / "pyproject.toml").touch()  # newer, same content: nothing to do
    Make(project).finish()
    assert sum(line.startswith("install") for line in (project.parent / "log").open()) == 1
    (project / "pyproject.toml").write_text("[project]\nname = 'y'\n")
    Make(project).finish()
    log = (project.parent / "log").read_text().splitlines()
    assert [line.split()[0] for line in log] == ["venv", "pip", "install", "pip", "install"]
