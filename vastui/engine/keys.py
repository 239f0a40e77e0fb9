"""vastui's SSH identity: the configured key, else its own ed25519 key (0600, and its .pub too,
in the 0700 state directory)."""

from __future__ import annotations

from pathlib import Path

import asyncssh

from vastui.config import Config, ensure_state_dir, tighten_private, write_private


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
    path = ensure_state_dir() / "id_ed25519"
    if not path.exists():
        key = asyncssh.generate_private_key("ssh-ed25519", comment="vastui")
        write_private(path, key.export_private_key())  # atomic: never a half-written key
        write_private(path.with_suffix(".pub"), key.export_public_key())
    else:
        tighten_private(path)  # an older vastui's key, or one copied in loosely
    key = asyncssh.read_private_key(path)
    return path, key.export_public_key().decode().strip()
