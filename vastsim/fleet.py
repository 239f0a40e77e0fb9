"""Fleet-wide faults of the simulated cloud: causes that make every machine fail the same way.

A broken image, a broken configuration or a broken controller is no machine's fault: every
machine rented while it lasts fails alike. Each fault here is switched on and off at runtime,
for the in-process cloud by :meth:`vastsim.cloud.SimCloud.fleet_fault` and for a served
cloud by ``PUT``/``DELETE /_sim/faults/<name>`` (vastsim/app.py), so that a trial can start
a storm and end it:

``image_missing``
    The registry does not have the image (``images``: these references; absent, every image).
    A create is accepted, as Vast accepts it, and the instance stays ``loading`` with the
    docker daemon's pull error in ``status_msg``; nothing runs, onstart never starts. The pull
    is tried when the instance is created and again at each reboot or start (vastsim/cloud.py
    ``pull_error``). ``error``: ``manifest_unknown`` (default: the tag is not there) or
    ``access_denied`` (the repository is not there, or is private).
``bench_input_broken``
    The image's benchmark input is broken: its C1 (``/usr/local/share/vastui/c1.json``) was made
    for another miner (t01001) than the benchmark proves for (``BENCH_MINER_ID`` 1000). Every
    PoRep proof then fails cuzk's self-check in the real stand-in daemon, on every machine alike
    (cuzk-core/src/engine.rs Phase 7); the benchmark's warmup fails. Decided, like the image, when
    the instance is created (vastsim/workers.py lays the file out).
``controller_down``
    The controller's Lotus API and curio's cluster database (YSQL and YCQL) refuse connections:
    their ports stay held, not listening, so a connection is refused (RST) and no other server
    takes them; their state (the cluster's tables) is kept for when they come back. Workers see
    it through their tunnel (worker-image/entrypoint.sh ``tunnel_down``). Needs the worker hosts
    (vastsim/hosting.py registers the switch).

The sim's registry is open: every image exists unless ``image_missing`` says otherwise (the sim
cannot know the world's images; tests and the demo create with many).
"""

from __future__ import annotations

import inspect
import socket
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

FLEET_FAULTS: dict[str, str] = {
    "image_missing": "the registry does not have the image: instances stay loading with the "
    "docker daemon's pull error",
    "bench_input_broken": "the image's C1 input was made for another miner: every benchmark "
    "proof fails cuzk's self-check",
    "controller_down": "the controller's Lotus API and curio database refuse connections",
}
PULL_ERRORS = ("manifest_unknown", "access_denied")
# The miner the broken C1 input was made for (the benchmark proves for BENCH_MINER_ID 1000).
BROKEN_C1_MINER = 1001

Hook = Callable[[str, bool, dict[str, Any]], Awaitable[None] | None]


class FleetFaultError(ValueError):
    """An unknown fleet fault or a bad parameter (the admin endpoint answers 404 or 400)."""

    def __init__(self, message: str, *, unknown: bool = False) -> None:
        super().__init__(message)
        self.unknown = unknown


def check_params(name: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """The fault's parameters, validated; :class:`FleetFaultError` otherwise."""
    if name not in FLEET_FAULTS:
        raise FleetFaultError(
            f"unknown fleet fault {name!r} (choose {', '.join(sorted(FLEET_FAULTS))})",
            unknown=True,
        )
    params = dict(params)
    allowed = {"image_missing": {"images", "error"}}.get(name, set())
    extra = sorted(set(params) - allowed)
    if extra:
        raise FleetFaultError(f"{name} takes no parameter {', '.join(extra)}")
    if name == "image_missing":
        images = params.get("images")
        if images is not None:
            if isinstance(images, str):
                images = [images]
            if not isinstance(images, list) or not all(
                isinstance(i, str) and i.strip() for i in images
            ):
                raise FleetFaultError("images must be a list of image references")
            params["images"] = sorted({familiar(i)[1] for i in images})
        error = params.setdefault("error", "manifest_unknown")
        if error not in PULL_ERRORS:
            raise FleetFaultError(f"error must be one of {', '.join(PULL_ERRORS)}")
    return params


def familiar(image: str) -> tuple[str, str]:
    """``(name, reference)`` of an image as docker shows them (distribution/reference
    ``FamiliarName``, ``FamiliarString``): Docker Hub's ``docker.io/`` and ``library/`` dropped,
    ``:latest`` added when neither a tag nor a digest is given."""
    ref = image.strip()
    first, slash, rest = ref.partition("/")
    if slash and first in ("docker.io", "index.docker.io", "registry-1.docker.io"):
        ref = rest
    elif slash and ("." in first or ":" in first or first == "localhost"):
        first = ""  # another registry: its name stays whole
    if ref.startswith("library/") and ref.count("/") == 1 and first != "":
        ref = ref[len("library/") :]
    name, at, digest = ref.partition("@")
    tag = ""
    if ":" in name.rsplit("/", 1)[-1]:
        name, _, tag = name.rpartition(":")
    if at:
        return name, f"{name}{':' + tag if tag else ''}@{digest}"
    return name, f"{name}:{tag or 'latest'}"


def pull_error_text(image: str, error: str) -> str:
    """The docker daemon's error for a pull the registry refuses, as Vast shows it in an
    instance's ``status_msg`` while it stays ``loading``.

    Vast reports the daemon's answer verbatim: third-party Vast clients match ``status_msg``
    values such as ``"Error response from daemon: pull access denied for foo"`` on an instance
    whose ``actual_status`` stays ``"loading"`` (e.g. vast_autotools' monitor tests, a VastSea
    backend's ``test_create_fails_fast_on_bad_image_pull``); vast-api.md §11 has no example.
    The texts are moby's (distribution/errors.go ``notFoundError``), as docker's integration
    tests and countless reports show them: e.g. cerc-io/stack-orchestrator#337 and
    The-Vibe-Company/quivr#2009 for a repository the registry does not have, kubelet events
    quoting ``Error response from daemon: manifest for nginx:l4t3st not found: manifest
    unknown: manifest unknown`` for a tag it does not have."""
    name, ref = familiar(image)
    if error == "access_denied":
        return (
            f"Error response from daemon: pull access denied for {name}, repository does not "
            "exist or may require 'docker login': denied: requested access to the resource is "
            "denied"
        )
    return (
        f"Error response from daemon: manifest for {ref} not found: manifest unknown: "
        "manifest unknown"
    )


def hold_port(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` that never listens: a connection there is refused, and
    no other server can take the port meanwhile (a server started with SO_REUSEADDR, as asyncio's
    is, may bind it again before the hold is closed)."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


@dataclass
class FleetFaults:
    """The fleet faults switched on (name → parameters), and what reacts to a switch."""

    active: dict[str, dict[str, Any]] = field(default_factory=dict)
    hooks: list[Hook] = field(default_factory=list)
    switched: list[tuple[float, str, bool]] = field(default_factory=list)  # (time, name, on)

    def on(self, name: str) -> bool:
        return name in self.active

    def params(self, name: str) -> dict[str, Any] | None:
        return self.active.get(name)

    async def switch(self, name: str, on: bool, now: float, **params: Any) -> dict[str, Any]:
        checked = check_params(name, params)
        if on:
            self.active[name] = checked
        else:
            self.active.pop(name, None)
        self.switched.append((now, name, on))
        for hook in list(self.hooks):
            result = hook(name, on, checked)
            if inspect.isawaitable(result):
                await result
        return self.state()

    def state(self) -> dict[str, Any]:
        """Every fleet fault: on or off, its parameters, what it does."""
        return {
            name: {"on": name in self.active, "params": self.active.get(name, {}), "about": about}
            for name, about in FLEET_FAULTS.items()
        }


__all__ = [
    "BROKEN_C1_MINER",
    "FLEET_FAULTS",
    "FleetFaultError",
    "FleetFaults",
    "check_params",
    "familiar",
    "hold_port",
    "pull_error_text",
]
