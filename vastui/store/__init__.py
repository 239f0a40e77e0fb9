"""vastui persistent state: an aiosqlite-backed SQLite store (no UI imports here, ever)."""

from .db import HostKeyRecord, Store
from .errors import StoreError, StoreFatal, StoreNotCurrent
from .legacy import ImportReport, import_legacy
from .migrations import SCHEMA_VERSION
from .ownership import ForeignInstance
from .records import (
    BAD_SOURCES,
    EVENT_KINDS,
    KILL_KINDS,
    STAGES,
    STATES,
    BadEntry,
    BanSpec,
    EngineStatus,
    Event,
    InstanceRecord,
    LegacyReviewEntry,
    PerfRecord,
    Strike,
    iso_utc,
)

__all__ = [
    "BAD_SOURCES",
    "EVENT_KINDS",
    "KILL_KINDS",
    "SCHEMA_VERSION",
    "STAGES",
    "STATES",
    "BadEntry",
    "BanSpec",
    "EngineStatus",
    "Event",
    "ForeignInstance",
    "HostKeyRecord",
    "ImportReport",
    "InstanceRecord",
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
