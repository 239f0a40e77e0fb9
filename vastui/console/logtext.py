"""What a log line is to the log view: cleaned of what a terminal would act on (control
characters, tabs: a backstop behind the sanitising every caller does), classified (error,
warning), measured in cells, and wrapped by cells. Pure Python, no Textual."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal

from rich.cells import cell_len, get_character_cell_size

Entry = tuple[int, str, str]
"""A line: (sequence number, source, text)."""
Row = tuple[Entry, int, int]
"""A wrapped row: (entry, start, end) as character offsets into the entry's text."""
Match = tuple[int, int, int]
"""A search match: (entry sequence number, start, end) as character offsets."""

LineKind = Literal["error", "warning"]

ERROR_PATTERN = re.compile(
    r"ERROR|\bpanic|[Ee]rror:|FAILED|CUDA error|[Oo]ut of memory|Traceback|\bFATAL\b"
)
"""Lines worth a red highlight. Case-sensitive on purpose: `ERROR`/`FAILED` are log-level
markers, whereas a lowercase "error" inside a sentence ("0 errors", "error_rate") is not."""
WARNING_PATTERN = re.compile(r"\bWARN(?:ING)?\b|[Ww]arning:")

SOURCE_TAGS: dict[str, str] = {
    "cuzk-daemon": "cuzk",
    "cuzk": "cuzk",
    "benchmark": "bench",
    "paramfetch": "param",
    "curio": "curio",
    "setup": "setup",
    "engine": "engine",
}
"""Short tags shown before each line when several sources are merged."""
TAG_WIDTH = 6
SEPARATOR = " │ "
PREFIX_WIDTH = TAG_WIDTH + len(SEPARATOR)

# Control characters (bar tab) would corrupt the terminal; callers sanitise, this is the backstop.
_CONTROLS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")
_CONTROLS_BUT_NEWLINE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# _CONTROLS_BUT_NEWLINE's ASCII members (tab is one: `clean` expands it), each to a space.
_ASCII_CONTROLS_BUT_NEWLINE = {c: " " for c in (*range(0x00, 0x0A), *range(0x0B, 0x20), 0x7F)}


# Either kind in one search: most lines are neither, and a frame classifies each line it draws.
_KIND = re.compile(f"(?P<error>{ERROR_PATTERN.pattern})|(?P<warning>{WARNING_PATTERN.pattern})")


def classify_line(text: str) -> LineKind | None:
    """`"error"` for lines matching `ERROR_PATTERN`, `"warning"` for warnings, else None."""
    found = _KIND.search(text)
    if found is None:
        return None
    if found.lastgroup == "error" or ERROR_PATTERN.search(text, found.end()):
        return "error"  # an error anywhere outranks a warning before it
    return "warning"


def source_tag(source: str) -> str:
    """The short tag for a source (known names are abbreviated, others truncated)."""
    return SOURCE_TAGS.get(source, source)[:TAG_WIDTH]


def clean(text: str) -> str:
    """One line as it may reach a terminal: tabs expanded, every control character a space."""
    if "\t" in text:
        text = text.expandtabs(8)
    return _CONTROLS.sub(" ", text)


def clean_batch(lines: Sequence[str]) -> tuple[list[str], int]:
    """`clean` of every line and the widest one's width, per batch where it can be: lines that
    arrive sanitised (the usual case) need nothing, which one scan of the batch shows."""
    block = "\n".join(lines)
    ascii_only = block.isascii()
    if (
        "\t" not in block
        and block.count("\n") == len(lines) - 1
        and _no_controls_but_newline(block, ascii_only)
    ):
        texts = list(lines)
    else:
        texts = [clean(text) for text in lines]
    if ascii_only:
        return texts, max(map(len, texts))
    return texts, max(map(text_width, texts))


def _no_controls_but_newline(block: str, ascii_only: bool) -> bool:
    if ascii_only:  # str.translate's ASCII fast path: several times cheaper than the regex
        return block.translate(_ASCII_CONTROLS_BUT_NEWLINE) == block
    return _CONTROLS_BUT_NEWLINE.search(block) is None


def text_width(text: str) -> int:
    return len(text) if text.isascii() else cell_len(text)


def wrap_entry(entry: Entry, width: int) -> list[Row]:
    """Character-wrap one entry into rows of at most `width` cells."""
    text = entry[2]
    length = len(text)
    if length <= width and (text.isascii() or cell_len(text) <= width):
        return [(entry, 0, length)]
    if text.isascii():
        return [(entry, i, min(i + width, length)) for i in range(0, length, width)]
    rows: list[Row] = []
    start = 0
    used = 0
    for index, char in enumerate(text):
        size = get_character_cell_size(char)
        if used + size > width and index > start:
            rows.append((entry, start, index))
            start, used = index, 0
        used += size
    rows.append((entry, start, length))
    return rows
