"""Hypothesis strategies shared by the fuzz tests: hostile text and a small TOML writer."""

from __future__ import annotations

import math
import unicodedata
from typing import Any

from hypothesis import strategies as st

# What remote machines and careless files send: terminal escapes (CSI, OSC 52 to the clipboard,
# OSC 8 links, DCS), 8-bit C1 controls, bidi overrides, line separators, Rich/Textual markup
# and actions, and ordinary text around them.
HOSTILE_PIECES = [
    "\x1b[31m",
    "\x1b[2J",
    "\x1b[?1049h",
    "\x1b]52;c;cHduZWQ=\x07",
    "\x1b]0;title\x1b\\",
    "\x1b]8;;http://evil\x1b\\",
    "\x1bP+q\x1b\\",
    "\x1b",
    "\x9b31m",
    "\x9d0;x\x9c",
    "\x85",
    "\x00",
    "\r",
    "\n",
    "\t",
    "\x7f",
    "\u202e",
    "\u2066",
    "\u2028",
    "[bold red]",
    "[/]",
    "[@click=app.quit]",
    "[link=http://e]",
    "[$accent]",
    ":smile:",
    "\\[",
    "${x}",
    "$(reboot)",
    "'",
    '"',
    "\ufffd",
    "é",
    "界",
    "🙂",
    "\u0301",
]

hostile_text = st.lists(
    st.one_of(st.sampled_from(HOSTILE_PIECES), st.text(max_size=8)), max_size=12
).map("".join)

# Text without lone surrogates (those cannot be written to a UTF-8 file).
file_text = st.text(st.characters(exclude_categories=("Cs",)), max_size=40)
hostile_file_text = st.one_of(
    hostile_text.map(lambda s: "".join(c for c in s if unicodedata.category(c) != "Cs")),
    file_text,
)


def hostile_bytes() -> st.SearchStrategy[bytes]:
    """Bytes as they come off a channel: hostile text encoded, invalid UTF-8, raw bytes."""
    encoded = hostile_text.map(lambda s: s.encode("utf-8", "surrogatepass"))
    invalid = st.sampled_from(
        [b"\xff", b"\xc3", b"\xe2\x82", b"\xed\xa0\x80", b"\xc2\x9b", b"\x80"]
    )
    return st.lists(st.one_of(encoded, invalid, st.binary(max_size=16)), max_size=10).map(b"".join)


class Raw(str):
    """A TOML literal written as is (a date, a time)."""


TOML_RAW = st.sampled_from(
    [Raw("1979-05-27T07:32:00Z"), Raw("1979-05-27"), Raw("07:32:00"), Raw("1979-05-27 07:32:00")]
)

toml_scalar = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.integers(min_value=-5, max_value=200),
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(min_value=-10, max_value=1000),
    hostile_file_text,
    TOML_RAW,
)
toml_value = st.recursive(
    toml_scalar,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(hostile_file_text, inner, max_size=3)
    ),
    max_leaves=6,
)


def toml_string(text: str) -> str:
    """A TOML basic string: quotes, backslashes and control characters escaped."""
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ch == "\x7f":
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def toml_literal(value: Any) -> str:
    if isinstance(value, Raw):
        return str(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_literal(v) for v in value) + "]"
    return "{" + ", ".join(f"{toml_string(k)} = {toml_literal(v)}" for k, v in value.items()) + "}"


def toml_document(doc: dict[str, Any]) -> str:
    """Top-level keys, each on its own line (tables written inline)."""
    return "".join(f"{toml_string(key)} = {toml_literal(value)}\n" for key, value in doc.items())
