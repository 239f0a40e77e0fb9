"""The secrets vastui reads and never writes, prints or stores: the Vast API key (the vastai
CLI's places) and the password of curio's database."""

from __future__ import annotations

import os
from pathlib import Path

from vastui.config.paths import config_home
from vastui.config.schema import ConfigError
from vastui.redact import MIN_SECRET_LEN


class ApiKeyError(Exception):
    pass


def vast_api_key_path() -> Path:
    return config_home() / "vastai" / "vast_api_key"


def load_api_key() -> tuple[str, str]:
    """(key, where it came from). Order: $VAST_API_KEY, the vastai CLI's key file, ~/.vast_api_key.

    The key itself is never logged or printed; only its source is.
    """
    env = os.environ.get("VAST_API_KEY", "").strip()
    if env:
        return _checked_key(env, "$VAST_API_KEY"), "$VAST_API_KEY"
    for candidate in (vast_api_key_path(), Path.home() / ".vast_api_key"):
        try:
            text = candidate.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            continue
        except (OSError, UnicodeDecodeError) as exc:
            raise ApiKeyError(f"cannot read Vast API key file {candidate}: {exc}") from None
        if text:
            return _checked_key(text, str(candidate)), str(candidate)
    raise ApiKeyError(
        f"no Vast API key: set VAST_API_KEY or write it to {vast_api_key_path()} "
        "(or use --demo for the simulated cloud)"
    )


def _checked_key(key: str, source: str) -> str:
    """A key that can go in an HTTP header; a bad one is named by source, never echoed."""
    if not key.isascii() or any(ch.isspace() or not ch.isprintable() for ch in key):
        raise ApiKeyError(f"Vast API key from {source} is malformed (spaces or odd characters)")
    if len(key) < MIN_SECRET_LEN:
        raise ApiKeyError(
            f"Vast API key from {source} is {len(key)} characters: too short to be a key (Vast's"
            f" are 64) and to be kept out of logs; at least {MIN_SECRET_LEN} are needed"
        )
    return key


def curio_db_password_path(config_path: Path | None = None) -> Path:
    """``curio-db-password`` beside the config file in use (what ``vastui sim serve
    --write-config`` writes), else in vastui's config directory."""
    if config_path is not None:
        beside = config_path.parent / "curio-db-password"
        if beside.exists():
            return beside
    return config_home() / "vastui" / "curio-db-password"


def load_curio_db_password(config_path: Path | None = None) -> str | None:
    """The password of curio's database, for the workers and the engine's cluster reader:
    $VASTUI_CURIO_DB_PASSWORD, else the file curio-db-password (``curio_db_password_path``);
    None means curio's own default. Never printed or stored."""
    env = os.environ.get("VASTUI_CURIO_DB_PASSWORD")
    if env:
        return env
    path = curio_db_password_path(config_path)
    try:
        text = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the curio database password: {exc}") from None
    return text or None
