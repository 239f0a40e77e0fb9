from __future__ import annotations

import pytest

from vastui.sanitize import sanitize_line


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("plain RTX 4090", "plain RTX 4090"),
        ("\x1b[31mred\x1b[0m", "red"),
        ("\x1b]0;pwned title\x07after", "after"),
        ("\x1b]8;;http://evil\x1b\\link\x1b]8;;\x1b\\", "link"),
        ("a\x1bPq#0;2;0;0;0\x1b\\b", "ab"),
        ("bell\x07 and \x08backspace", "bell  and  backspace"),
        ("c1 csi \x9b2J", "c1 csi "),
        ("line1\nline2\r", "line1 line2 "),
        (b"bad \xff utf8", "bad \ufffd utf8"),
        ("[bold red]markup stays text[/]", "[bold red]markup stays text[/]"),
        (None, ""),
    ],
)
def test_sanitize(raw, clean):
    assert sanitize_line(raw) == clean


def test_length_is_bounded():
    assert len(sanitize_line("x" * 10_000, 100)) == 100
