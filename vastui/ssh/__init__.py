"""SSH to the workers: TOFU-pinned host keys, persistent self-healing connections, workerctl.

No UI imports here, ever.
"""

from .connection import CommandResult, ConnState, RemoteForward, WorkerConnection
from .errors import (
    HostKeyChanged,
    SshAuthFailed,
    SshClosed,
    SshConnectionLost,
    SshError,
    SshTimeout,
    SshUnreachable,
    WorkerCommandFailed,
    WorkerProtocolError,
)
from .lines import LogBatch
from .lostwrites import install as _skip_lost_sockets
from .pins import HostKeyPins, MemoryPins, PinConflict, StorePins
from .pool import SshPool
from .worker import LOG_SOURCES, Worker, workerctl

# asyncssh stops writing to a socket asyncio has found lost (lostwrites.py): every process that
# speaks SSH through vastui, the engine's and the simulator's sshd, without a log line per write.
_skip_lost_sockets()

__all__ = [
    "LOG_SOURCES",
    "CommandResult",
    "ConnState",
    "HostKeyChanged",
    "HostKeyPins",
    "LogBatch",
    "MemoryPins",
    "PinConflict",
    "RemoteForward",
    "SshAuthFailed",
    "SshClosed",
    "SshConnectionLost",
    "SshError",
    "SshPool",
    "SshTimeout",
    "SshUnreachable",
    "StorePins",
    "Worker",
    "WorkerCommandFailed",
    "WorkerConnection",
    "WorkerProtocolError",
    "workerctl",
]
