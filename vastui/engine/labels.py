"""Instance labels: how vastui recognises its own instances on a shared Vast account.

`vastui-<fleet>-<12 hex>`: a fixed prefix, the fleet name, and a unique id per rent intent.
The label is written at create time and is the key for recovering a create whose answer was
lost, for adoption after a restart, and for the rule that nothing else is ever destroyed.
"""

from __future__ import annotations

import re
import secrets

from vastui.config import LABEL_PREFIX

_LABEL = re.compile(rf"^{LABEL_PREFIX}-(?P<fleet>[A-Za-z0-9-]+)-(?P<uid>[0-9a-f]{{12}})$")


def new_label(fleet: str) -> str:
    return f"{LABEL_PREFIX}-{fleet}-{secrets.token_hex(6)}"


def is_vastui_label(label: str | None) -> bool:
    """Carries vastui's prefix and shape (any fleet): the only instances we may destroy."""
    return bool(label) and _LABEL.match(label or "") is not None


def fleet_of(label: str | None) -> str | None:
    match = _LABEL.match(label or "")
    return match.group("fleet") if match else None
