"""The SSH layer's errors: each message is one line, safe to show (remote text in it is
sanitized)."""

from __future__ import annotations

from collections.abc import Sequence

from vastui.sanitize import sanitize_line


def safe_text(text: object, max_len: int = 300) -> str:
    return sanitize_line(str(text), max_len)


class SshError(Exception):
    """Base of every error raised by :mod:`vastui.ssh`."""

    def __init__(self, instance_id: int, message: str) -> None:
        super().__init__(f"instance {instance_id}: {safe_text(message, 600)}")
        self.instance_id = instance_id


class HostKeyChanged(SshError):
    """The worker presented a host key other than the pinned one. Never retried."""

    def __init__(self, instance_id: int, expected_fp: str, got_fp: str) -> None:
        super().__init__(
            instance_id,
            f"SSH host key changed: pinned {expected_fp}, got {got_fp}; connection blocked "
            "until the operator verifies the new key and forgets the pin",
        )
        self.expected_fp = expected_fp
        self.got_fp = got_fp


class SshAuthFailed(SshError):
    """The worker refused our client key (or the key could not be loaded). Never retried."""


class SshUnreachable(SshError):
    """No connection could be established within the allowed attempts."""

    def __init__(self, instance_id: int, message: str, attempts: int = 0) -> None:
        super().__init__(instance_id, message)
        self.attempts = attempts


class SshConnectionLost(SshUnreachable):
    """An established connection dropped while a command was running."""


class SshTimeout(SshError):
    """A command did not finish in time; its channel was closed."""

    def __init__(self, instance_id: int, command: str, timeout: float) -> None:
        super().__init__(instance_id, f"command timed out after {timeout:g}s: {command}")
        self.command = command
        self.timeout = timeout


class SshClosed(SshError):
    """The :class:`WorkerConnection` was closed by its owner."""


class WorkerProtocolError(SshError):
    """The worker answered something that is not what the protocol says (e.g. bad JSON)."""


class WorkerCommandFailed(SshError):
    """A worker command exited non-zero (or was killed by a signal)."""

    def __init__(
        self,
        instance_id: int,
        command: str,
        exit_status: int | None,
        stderr_tail: Sequence[str] = (),
        signal: str | None = None,
    ) -> None:
        how = f"signal {signal}" if signal else f"status {exit_status}"
        last = stderr_tail[-1] if stderr_tail else ""
        super().__init__(
            instance_id, f"command failed ({how}): {command}" + (f": {last}" if last else "")
        )
        self.command = command
        self.exit_status = exit_status
        self.signal = signal
        self.stderr_tail = list(stderr_tail)
