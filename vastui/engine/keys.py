"""vastui's SSH identity: the configured key, else its own ed25519 key (mode 0600)."""

from __future__ import annotations

import os
from pathlib import Path

import asyncssh

from vastui.config import Config, state_dir


class SshKeyError(Exception):
    pass


def ensure_ssh_key(config: Config) -> tuple[Path, str]:
    """(private key path, public key line). Generates vastui's own key on first use."""
    if config.ssh.key_path:
        path = Path(config.ssh.key_path).expanduser()
        try:
            key = asyncssh.read_private_key(path)
        except (OSError, asyncssh.KeyImportError) as exc:
            raise SshKeyError(f"ssh.key_path {path}: cannot read private key: {exc}") from None
        return path, key.export_public_key().decode().strip()
    path = state_dir() / "id_ed25519"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        key = asyncssh.generate_private_key("ssh-ed25519", comment="vastui")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(key.export_private_key())
        path.with_suffix(".pub").write_bytes(key.export_public_key())
    key = asyncssh.read_private_key(path)
    return path, key.export_public_key().decode().strip()
