"""A simulated Vast.ai cloud (plain ASGI app) for tests and demos."""

from vastsim.app import make_app
from vastsim.clock import ManualClock, ScaledClock, SimClock
from vastsim.cloud import ApiError, SimCloud
from vastsim.market import Machine, generate_market
from vastsim.server import run_server, serve

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
