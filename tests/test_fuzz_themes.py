"""Hostile theme files: any text, any field value → a Theme Textual can apply, or one ThemeError.

Never another exception, never a multi-line message, never a raw control character; and a
theme that loads is one whose colours and variables Textual's stylesheet accepts (a variable
Textual cannot tokenize used to stop the console while it started).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from textual.css.stylesheet import Stylesheet
from textual.theme import Theme

from tests.fuzz_strategies import file_text, hostile_file_text, toml_document, toml_value
from vastui.console.themes import COLOUR_FIELDS, ThemeError, load_theme_file

COLOURS = st.sampled_from(
    [
        "#5fafd7",
        "#fff",
        "#ffffff80",
        "red",
        "ansi_red",
        "ansi_default",
        "transparent",
        "rgb(1,2,3)",
        "rgba(1,2,3,0.5)",
        "hsl(720,1000%,-20%)",
        "hsla(0,0%,0%,0.5)",
        "blu",
    ]
)
CSS_VALUES = st.one_of(
    st.sampled_from(
        [
            "#5fafd7",
            "bold",
            "red 30%",
            "$primary",
            "$nope",
            "",
            " ",
            "1fr",
            "auto",
            "50%",
            "}",
            "{",
            ";",
            "red; color: blue",
            "a:b",
            "/* x",
            '"unterminated',
            "url(x",
        ]
    ),
    hostile_file_text,
)
VARIABLE_NAMES = st.sampled_from(
    ["footer-key-foreground", "block-cursor-text-style", "border", "x"]
)
JUNK = st.one_of(hostile_file_text, toml_value)
WIDER = settings(max_examples=4 * settings.default.max_examples)


def mostly(draw: st.DrawFn, good: st.SearchStrategy[Any], bad: st.SearchStrategy[Any]) -> Any:
    """Four times in five a good value, so that the documents that load are many too."""
    return draw(good if draw(st.integers(0, 4)) else bad)


@st.composite
def theme_documents(draw: st.DrawFn) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    if draw(st.integers(0, 9)):
        doc["name"] = mostly(draw, st.sampled_from(["t", "night-2"]), JUNK)
    if draw(st.integers(0, 9)):
        doc["primary"] = mostly(draw, COLOURS, JUNK)
    for key in draw(st.lists(st.sampled_from(COLOUR_FIELDS), max_size=3, unique=True)):
        doc[key] = mostly(draw, COLOURS, JUNK)
    if draw(st.booleans()):
        doc["dark"] = mostly(draw, st.booleans(), JUNK)
    if draw(st.booleans()):
        names = VARIABLE_NAMES if draw(st.integers(0, 4)) else hostile_file_text
        variables = st.dictionaries(names, st.one_of(CSS_VALUES, toml_value), max_size=3)
        doc["variables"] = mostly(draw, variables, JUNK)
    if draw(st.integers(0, 9)) == 0:
        doc[draw(hostile_file_text)] = draw(toml_value)
    return doc


@pytest.fixture(scope="module")
def theme_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz-themes") / "x.toml"


def load(path: Path, text: str) -> Theme | ThemeError:
    path.write_text(text, encoding="utf-8")
    try:
        return load_theme_file(path)
    except ThemeError as exc:  # anything else propagates and fails the test
        return exc


def assert_clear_error(error: ThemeError, path: Path) -> None:
    message = str(error)
    assert message.startswith(f"{path}: "), message
    assert "\n" not in message and message.isprintable(), message
    if "not valid TOML" not in message:
        assert "field " in message, message


def assert_applicable(theme: Theme) -> None:
    """What Textual does with a theme when the app switches to it (App.get_css_variables and
    the stylesheet's reparse): every colour is parsed and every variable tokenized."""
    variables = {**theme.to_color_system().generate(), **theme.variables}
    stylesheet = Stylesheet(variables=variables)
    stylesheet.add_source(
        "Screen { background: $background; color: $foreground; border: tall $primary; }",
        read_from=("fuzz", "Screen"),
    )
    stylesheet.parse()


def check(path: Path, text: str) -> None:
    result = load(path, text)
    if isinstance(result, ThemeError):
        assert_clear_error(result, path)
    else:
        assert_applicable(result)


@given(text=file_text)
def test_any_text_is_a_theme_or_one_clear_error(theme_file: Path, text: str) -> None:
    check(theme_file, text)


@WIDER
@given(doc=theme_documents())
def test_any_field_value_is_a_theme_or_one_clear_error(
    theme_file: Path, doc: dict[str, Any]
) -> None:
    check(theme_file, toml_document(doc))


# --- each hole the fuzzing found, as a plain regression ------------------------------------

GOOD = 'name = "t"\nprimary = "#5fafd7"\n'


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        # Textual tokenizes every variable when the theme is applied: the console died on start.
        (GOOD + '[variables]\nfooter-key-foreground = "}"\n', "not a CSS value: '}'"),
        (GOOD + '[variables]\nx = "red; color: blue"\n', "field 'variables.x': not a CSS value"),
        (GOOD + '[variables]\nx = "\\u001b[2J"\n', r"not a CSS value: '\x1b[2J'"),
        # A field name from the file reached the message raw.
        (GOOD + '[variables]\n"a\\u001b[2J\\nb" = "x"\n', r"field 'variables.a\x1b[2J\nb'"),
        # tomllib recurses per nesting level: a RecursionError escaped as a traceback.
        ("a = " + "[" * 3000 + "]" * 3000 + "\n", "not valid TOML: nested too deeply"),
    ],
    ids=["brace", "declaration", "escape", "escape-in-name", "deep"],
)
def test_each_found_hole_is_one_clear_error(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "x.toml"
    result = load(path, text)
    assert isinstance(result, ThemeError), result
    assert fragment in str(result)
    assert_clear_error(result, path)


def test_ordinary_variables_still_load(tmp_path: Path) -> None:
    text = GOOD + '[variables]\nfooter-key-foreground = "#5fafd7"\nborder = "$primary 50%"\n'
    theme = load(tmp_path / "x.toml", text)
    assert isinstance(theme, Theme)
    assert theme.variables == {"footer-key-foreground": "#5fafd7", "border": "$primary 50%"}
    assert_applicable(theme)
