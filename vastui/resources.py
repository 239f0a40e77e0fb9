"""Files vastui ships beside its code: the bundled themes (`themes/`) and the worker image's
scripts (`worker-image/`).

In a checkout, and an editable install, they are the repository's top-level directories. A
wheel carries copies inside the package, under `vastui/_bundled/` (setup.py's build step), found
through importlib.resources: a `pip install .` runs the demo and the themes from anywhere.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

BUNDLED = "_bundled"
NAMES = ("themes", "worker-image")


def bundled_dir(name: str) -> Path:
    """The directory of bundled files ``name`` ("themes" or "worker-image"): the installed
    package's copy, else the checkout's own."""
    if name not in NAMES:
        raise ValueError(f"no bundled directory {name!r} (known: {', '.join(NAMES)})")
    packaged = resources.files("vastui") / BUNDLED / name
    if isinstance(packaged, Path) and packaged.is_dir():
        return packaged
    return Path(str(resources.files("vastui"))).resolve().parent / name
