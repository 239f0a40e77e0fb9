"""vastui persistent state: an aiosqlite-backed SQLite store (no UI imports here, ever).

``Store`` (``store.py``) holds the repositories, one per table group (``store.instances``,
``store.badlist``, ``store.perf``, ``store.events``, ``store.intents``, ``store.commands``,
``store.lease``, ``store.host_keys``, ``store.status``, ``store.meta``, ``store.foreign``), and the
units of work that span tables; ``database.py`` holds the connection and its transactions. The
records they read and write are the domain's (``vastui/domain/``): the store maps them to rows.
"""

from .errors import StoreBusy, StoreError, StoreFatal, StoreNotCurrent
from .lease import LeaseHeld
from .legacy import ImportReport, import_legacy
from .migrations import SCHEMA_VERSION
from .store import Store

__all__ = [
    "SCHEMA_VERSION",
    "ImportReport",
    "LeaseHeld",
    "Store",
    "StoreBusy",
    "StoreError",
    "StoreFatal",
    "StoreNotCurrent",
    "import_legacy",
]
