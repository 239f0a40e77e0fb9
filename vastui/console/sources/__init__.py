"""The console's sources of fleet data: one per way a console stands to a fleet (protocol.py)."""

from vastui.console.sources.attached import AttachedSource
from vastui.console.sources.choose import choose_source
from vastui.console.sources.own import OwnEngineSource
from vastui.console.sources.protocol import Badge, FleetSource, Freshness
from vastui.console.sources.readonly import ReadOnlySource

__all__ = [
    "AttachedSource",
    "Badge",
    "FleetSource",
    "Freshness",
    "OwnEngineSource",
    "ReadOnlySource",
    "choose_source",
]
