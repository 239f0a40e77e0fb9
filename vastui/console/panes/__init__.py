"""The console's panes: each owns its widgets, its bindings and its actions."""

from vastui.console.panes.badlist import BadListPane
from vastui.console.panes.base import Column, TablePane
from vastui.console.panes.cluster import ClusterPane
from vastui.console.panes.instances import InstancesPane
from vastui.console.panes.logs import LOG_CHOICES, LogsPane
from vastui.console.panes.offers import OffersPane

PANES: tuple[type[TablePane] | type[LogsPane], ...] = (
    OffersPane,
    InstancesPane,
    LogsPane,
    BadListPane,
    ClusterPane,
)

__all__ = [
    "LOG_CHOICES",
    "PANES",
    "BadListPane",
    "ClusterPane",
    "Column",
    "InstancesPane",
    "LogsPane",
    "OffersPane",
    "TablePane",
]
