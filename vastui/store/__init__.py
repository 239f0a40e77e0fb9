"""vastui persistent state: an aiosqlite-backed SQLite store (no UI imports here, ever).

``Store`` (``store.py``) is the facade callers use; ``database.py`` holds the connection and
its transactions; one repository per table group holds its rows and records (``instances.py``,
``badlist.py``, ``perf.py``, ``events.py``, ``intents.py``, ``commands.py``, ``lease.py``,
``hostkeys.py``, ``status.py``, ``meta.py``, ``foreign.py``).
"""

from .badlist import BAD_SOURCES, BadEntry, BanSpec, LegacyReviewEntry, Strike
from .bids import BidHistory
from .commands import Command
from .common import iso_utc
from .errors import StoreError, StoreFatal, StoreNotCurrent
from .events import EVENT_KINDS, Event
from .foreign import ForeignInstance
from .hostkeys import HostKeyRecord
from .instances import InstanceRecord
from .intents import Intent
from .lease import Lease, LeaseHeld
from .legacy import ImportReport, import_legacy
from .migrations import SCHEMA_VERSION
from .perf import PerfRecord
from .status import EngineStatus
from .store import Store

__all__ = [
    "BAD_SOURCES",
    "EVENT_KINDS",
    "SCHEMA_VERSION",
    "BadEntry",
    "BanSpec",
    "BidHistory",
    "Command",
    "EngineStatus",
    "Event",
    "ForeignInstance",
    "HostKeyRecord",
    "ImportReport",
    "InstanceRecord",
    "Intent",
    "Lease",
    "LeaseHeld",
    "LegacyReviewEntry",
    "PerfRecord",
    "Store",
    "StoreError",
    "StoreFatal",
    "StoreNotCurrent",
    "Strike",
    "import_legacy",
    "iso_utc",
]
