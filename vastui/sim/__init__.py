"""A simulated Vast.ai cloud (plain ASGI app) for tests and demos."""

from vastui.sim.app import make_app
from vastui.sim.clock import ManualClock, ScaledClock, SimClock
from vastui.sim.cloud import ApiError, SimCloud
from vastui.sim.market import Machine, generate_market
from vastui.sim.server import run_server, serve

__all__ = [
    "ApiError",
    "Machine",
    "ManualClock",
    "ScaledClock",
    "SimClock",
    "SimCloud",
    "generate_market",
    "make_app",
    "run_server",
    "serve",
]
