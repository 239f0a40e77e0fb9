"""Instance labels: how vastui recognises its own instances on a shared Vast account.

``vastui-<fleet>.<fleet id>-<12 hex>``: a fixed prefix, the fleet name, the database's fleet
identity (store ``meta.fleet_id``, random, made once) and a unique id per rent intent. Two
controllers on one account (same fleet name, own databases) never make the same label. Labels
of releases before the fleet identity (``vastui-<fleet>-<12 hex>``) are still recognised.

The label is written with the rent intent before the create and is the key for recovering a
create whose answer was lost. Whether an instance is *this* database's is not the label's to
say: only an intent with that label makes it so (``store.intents.intended``).
"""

from __future__ import annotations

import re
import secrets

from vastui.config import LABEL_PREFIX

_LABEL = re.compile(
    rf"^{LABEL_PREFIX}-(?P<fleet>[A-Za-z0-9-]+?)(?:\.(?P<fid>[0-9a-f]{{8}}))?-(?P<uid>[0-9a-f]{{12}})$"
)


def new_label(fleet: str, fleet_id: str) -> str:
    return f"{LABEL_PREFIX}-{fleet}.{fleet_id}-{secrets.token_hex(6)}"


def is_vastui_label(label: str | None) -> bool:
    """Carries vastui's prefix and shape (any fleet, any database)."""
    return bool(label) and _LABEL.match(label or "") is not None


def fleet_of(label: str | None) -> str | None:
    match = _LABEL.match(label or "")
    return match.group("fleet") if match else None


def fleet_id_of(label: str | None) -> str | None:
    """The fleet identity a label carries (None: not vastui's, or an older label)."""
    match = _LABEL.match(label or "")
    return match.group("fid") if match else None


def owner_of(label: str | None) -> str | None:
    """The controller a label names, for people: ``<fleet>.<fleet id>`` (or ``<fleet>``)."""
    match = _LABEL.match(label or "")
    if match is None:
        return None
    fid = match.group("fid")
    return f"{match.group('fleet')}.{fid}" if fid else match.group("fleet")
