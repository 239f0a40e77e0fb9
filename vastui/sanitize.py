"""Make untrusted remote text (offer fields, status messages, worker logs) safe to show.

Removes terminal escape sequences (CSI, OSC, DCS, single-character escapes) and every other
control character except tab, replaces undecodable bytes, and bounds the length. Textual markup
is a separate concern: the console renders remote text as `rich.text.Text`, never as markup.
"""

from __future__ import annotations

import re

MAX_LINE = 4096

# ESC [ ... final byte | ESC ] ... (BEL | ESC \) | ESC P/X/^/_ ... ESC \ | ESC + one char;
# plus the 8-bit C1 forms of CSI (0x9b) and OSC (0x9d).
_ESCAPES = re.compile(
    r"""
      (?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?
    | (?:\x1b\]|\x9d)[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?
    | \x1b[PX^_][^\x1b\x9c]*(?:\x1b\\|\x9c)?
    | \x1b.?
    """,
    re.VERBOSE | re.DOTALL,
)
# C0/C1 controls, bidi overrides and isolates (they reorder what the operator reads), line and
# paragraph separators, and lone surrogates (they cannot even be encoded for the terminal).
_CONTROLS = re.compile(
    "[\x00-\x08\x0a-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e"
    "\u2066-\u2069\ud800-\udfff]"
)


def sanitize_line(text: str | bytes | None, max_len: int = MAX_LINE) -> str:
    """One display-safe line: escapes and controls gone, newlines flattened, length bounded."""
    if text is None:
        return ""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    text = _ESCAPES.sub("", text)
    text = _CONTROLS.sub(" ", text.replace("\r\n", "\n"))
    if len(text) > max_len:  # the ellipsis counts: never longer than max_len, even for 0 or 1
        text = text[: max_len - 1] + "…" if max_len >= 1 else ""
    return text
