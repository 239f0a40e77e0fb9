"""Where vastui's files are (the config file, the state directory, the database) and how
they are written: every file vastui writes is 0600, in 0700 directories."""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from pathlib import Path


def config_home() -> Path:
    """``$XDG_CONFIG_HOME``, else ``~/.config``: vastui's and the vastai CLI's configs are there."""
    return Path(os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config"))


def default_config_path() -> Path:
    override = os.environ.get("VASTUI_CONFIG")
    if override:
        return Path(override).expanduser()
    return config_home() / "vastui" / "config.toml"


def state_dir() -> Path:
    """Where vastui keeps its database, logs and own SSH key."""
    override = os.environ.get("VASTUI_STATE_DIR")
    if override:
        return Path(override).expanduser()
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "vastui"


def default_db_path(demo: bool = False) -> Path:
    return state_dir() / ("demo.db" if demo else "vastui.db")


# -- private files: every file vastui writes is 0600, in 0700 directories -------------------

PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600
_files_log = logging.getLogger("vastui.files")
_warned: set[str] = set()


def _warn_once(path: Path, text: str) -> None:
    if str(path) not in _warned:
        _warned.add(str(path))
        _files_log.warning("%s", text)


def make_private_dir(path: Path, existing: str = "keep") -> Path:
    """Create ``path`` and its missing parents with mode 0700, whatever the umask.

    ``existing`` says what to do with a directory that already exists and is open to group or
    others: ``"tighten"`` (vastui's own: chmod 0700 with a one-line warning), ``"warn"`` (one
    line, no chmod: the operator chose it) or ``"keep"`` (someone else's, e.g. /tmp).
    """
    path = Path(path)
    missing: list[Path] = []
    probe = path
    while not probe.exists() and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=PRIVATE_DIR_MODE)
        except FileExistsError:
            continue  # created meanwhile by someone else: theirs
        os.chmod(directory, PRIVATE_DIR_MODE)  # the umask may have taken bits away
    if not missing and existing != "keep":
        mode = path.stat().st_mode & 0o777
        if mode & 0o077 and existing == "tighten" and path.stat().st_uid == os.geteuid():
            os.chmod(path, PRIVATE_DIR_MODE)
            _warn_once(path, f"{path} was open to other users (mode {mode:04o}); now 0700")
        elif mode & 0o077:
            _warn_once(path, f"{path} is open to other users (mode {mode:04o}); chmod 700 it")
    return path


def ensure_state_dir(*parts: str) -> Path:
    """The state directory (and ``parts`` below it) as 0700 directories.

    The default one (under XDG_STATE_HOME) and every subdirectory are vastui's own: a looser
    mode left by an older vastui is tightened. A ``VASTUI_STATE_DIR`` the operator chose is
    only warned about.
    """
    base = state_dir()
    make_private_dir(base, "warn" if os.environ.get("VASTUI_STATE_DIR") else "tighten")
    path = base
    for part in parts:
        path = make_private_dir(path / part, "tighten")
    return path


def ensure_parent_dir(path: Path) -> Path:
    """The directory of a file vastui is about to write: the state directory (tightened, see
    :func:`ensure_state_dir`), or another one created 0700 when missing (an existing one is the
    operator's: left alone)."""
    parent = Path(path).parent
    try:
        in_state = parent.absolute() == state_dir().absolute()
    except OSError:
        in_state = False
    return ensure_state_dir() if in_state else make_private_dir(parent)


def private_fd(fd: int, path: Path, *, created: bool) -> int:
    """Make an open file private. One just created is set to exactly 0600 (the umask may have
    taken owner bits too); an existing one loses its group/other bits with a one-line warning
    (never gains any: a file made read-only stays read-only)."""
    mode = os.fstat(fd).st_mode & 0o777
    if created:
        if mode != PRIVATE_FILE_MODE:
            os.fchmod(fd, PRIVATE_FILE_MODE)
        return fd
    if mode & 0o077:
        try:
            os.fchmod(fd, mode & 0o700)
        except PermissionError:
            _warn_once(path, f"{path} is open to other users (mode {mode:04o}); chmod 600 it")
        else:
            _warn_once(
                path, f"{path} was open to other users (mode {mode:04o}); now {mode & 0o700:04o}"
            )
    return fd


def open_private(path: Path, flags: int) -> int:
    """``os.open`` creating ``path`` with mode 0600 whatever the umask; an existing file with a
    looser mode is tightened. The caller owns the returned descriptor."""
    try:
        fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE)
        created = True
    except FileExistsError:
        fd = os.open(path, flags & ~os.O_CREAT)
        created = False
    try:
        return private_fd(fd, Path(path), created=created)
    except OSError:
        os.close(fd)
        raise


def tighten_private(path: Path) -> None:
    """Take group/other bits off an existing regular file (no-op when absent or a symlink),
    with a one-line warning. By path, never by opening it: closing any descriptor of a file
    drops every POSIX lock this process holds on it, SQLite's included, and a database whose
    -shm lost its lock is truncated under the engine by the next process to connect (SIGBUS)."""
    try:
        st = os.lstat(path)
    except OSError:
        return
    if not stat.S_ISREG(st.st_mode):
        return
    mode = stat.S_IMODE(st.st_mode)
    if not mode & 0o077:
        return
    try:
        os.chmod(path, mode & 0o700)
    except OSError:
        _warn_once(Path(path), f"{path} is open to other users (mode {mode:04o}); chmod 600 it")
    else:
        _warn_once(
            Path(path), f"{path} was open to other users (mode {mode:04o}); now {mode & 0o700:04o}"
        )


def write_private(path: Path, data: bytes | str) -> None:
    """Replace ``path`` atomically with ``data``, mode 0600 (its directory must exist)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = open_private(tmp, os.O_WRONLY | os.O_TRUNC)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data.encode() if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
