from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    """No test may read the developer's config, key files or state."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(home / ".local" / "state"))
    monkeypatch.delenv("VASTUI_CONFIG", raising=False)
    monkeypatch.delenv("VASTUI_STATE_DIR", raising=False)
    monkeypatch.delenv("VAST_API_KEY", raising=False)
    monkeypatch.setenv("TEXTUAL_ANIMATIONS", "none")
    yield home
