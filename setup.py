"""The build's one step beyond pyproject.toml: the top-level `themes/` and `worker-image/` go
into the wheel as package data (`vastui/_bundled/`, found by vastui/resources.py), so that an
installed vastui runs its demo and themes outside the checkout."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

BUNDLED = ("themes", "worker-image")


class BuildPyWithBundled(build_py):
    def run(self) -> None:
        super().run()
        root = Path(__file__).resolve().parent
        for name in BUNDLED:
            target = Path(self.build_lib) / "vastui" / "_bundled" / name
            shutil.copytree(root / name, target, dirs_exist_ok=True)


setup(cmdclass={"build_py": BuildPyWithBundled})
