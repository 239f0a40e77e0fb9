"""Theme files: `themes/*.toml` (bundled) and `$XDG_CONFIG_HOME/vastui/themes/*.toml` (user).

Textual has no theme-file loader, so this reads TOML with `tomllib`, validates every field
strictly and builds `textual.theme.Theme` objects. File format::

    name = "vastui-night"        # required, [a-z0-9-]+
    dark = true                  # optional, default true
    primary = "#5fafd7"          # required colour
    secondary = "#5fafaf"        # optional colours: secondary accent warning error success
                                 #   foreground background surface panel boost
    [variables]                  # optional Textual theme variables, string -> string
    "footer-key-foreground" = "#5fafd7"

Every problem is a `ThemeError` with a one-line message naming the file and the field, in
the style of `ConfigError`: `themes/x.toml: field 'primary': not a colour: 'blu'`.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from textual.app import App
from textual.color import Color, ColorParseError
from textual.css.tokenize import tokenize_values
from textual.css.tokenizer import TokenError
from textual.theme import Theme

from vastui.config import describe_value
from vastui.resources import bundled_dir

NAME_RE = re.compile(r"[a-z0-9-]+")
VARIABLE_RE = re.compile(r"[a-z0-9-]+")
COLOUR_FIELDS = (
    "primary",
    "secondary",
    "accent",
    "warning",
    "error",
    "success",
    "foreground",
    "background",
    "surface",
    "panel",
    "boost",
)
KNOWN_FIELDS = ("name", "dark", *COLOUR_FIELDS, "variables")


class ThemeError(Exception):
    """One line: the theme file (or config key), the field, what was wrong."""


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def _quote(key: str) -> str:
    """A field name from the file for a one-line message: quoted, never raw controls."""
    short = key if len(key) <= 80 else key[:79] + "…"
    return f"'{short}'" if short.isprintable() else ascii(short)


def _colour(path: Path, key: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ThemeError(
            f"{path}: field '{key}': expected a colour string, got {describe_value(value)}"
        )
    try:
        Color.parse(value)
    except ColorParseError:
        raise ThemeError(f"{path}: field '{key}': not a colour: {value[:40]!r}") from None
    return value


def _css_value(path: Path, key: str, value: str) -> None:
    """Textual tokenizes every theme variable into its stylesheet when the theme is applied: a
    value it cannot read ("}", "red; x: y", an escape) would stop the console mid-start."""
    try:
        tokenize_values({key: value})
    except TokenError:
        raise ThemeError(
            f"{path}: field 'variables.{key}': not a CSS value: {value[:40]!r}"
        ) from None


def load_theme_file(path: Path) -> Theme:
    """Read and validate one theme file; any problem is a one-line `ThemeError`."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ThemeError(f"{path}: not valid TOML: {_one_line(exc)}") from None
    except RecursionError:  # tomllib recurses per nesting level of arrays and inline tables
        raise ThemeError(f"{path}: not valid TOML: nested too deeply") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ThemeError(f"{path}: cannot read: {_one_line(exc)}") from None

    for key in data:
        if key not in KNOWN_FIELDS:
            raise ThemeError(
                f"{path}: unknown field {key!r} (known: {', '.join(sorted(KNOWN_FIELDS))})"
            )
    for key in ("name", "primary"):
        if key not in data:
            raise ThemeError(f"{path}: field '{key}': required but missing")

    name = data["name"]
    if not isinstance(name, str):
        raise ThemeError(f"{path}: field 'name': expected a string, got {describe_value(name)}")
    if not NAME_RE.fullmatch(name):
        raise ThemeError(
            f"{path}: field 'name': expected lowercase letters, digits and '-', got {name[:40]!r}"
        )

    dark = data.get("dark", True)
    if not isinstance(dark, bool):
        raise ThemeError(
            f"{path}: field 'dark': expected true or false, got {describe_value(dark)}"
        )

    colours: dict[str, Any] = {
        key: _colour(path, key, data[key]) for key in COLOUR_FIELDS if key in data
    }

    variables = data.get("variables", {})
    if not isinstance(variables, dict):
        raise ThemeError(
            f"{path}: field 'variables': expected a table, got {describe_value(variables)}"
        )
    for key, value in variables.items():
        if not VARIABLE_RE.fullmatch(key):
            raise ThemeError(
                f"{path}: field {_quote(f'variables.{key}')}: "
                "expected a name of lowercase letters, digits and '-'"
            )
        if not isinstance(value, str):
            raise ThemeError(
                f"{path}: field 'variables.{key}': expected a string, got {describe_value(value)}"
            )
        _css_value(path, key, value)

    return Theme(name=name, dark=dark, variables=dict(variables), **colours)


def load_theme_dirs(dirs: Iterable[Path]) -> list[Theme]:
    """Every `*.toml` in each directory (sorted by file name), in directory order.

    Missing directories are skipped. A theme in a later directory replaces an earlier one of
    the same name (the user directory overrides the bundled one); two files in one directory
    declaring the same name is an error. The first bad file raises `ThemeError`.
    """
    themes: dict[str, Theme] = {}
    for directory in dirs:
        if not directory.is_dir():
            continue
        seen: dict[str, Path] = {}
        for path in sorted(directory.glob("*.toml")):
            theme = load_theme_file(path)
            if theme.name in seen:
                raise ThemeError(
                    f"{path}: field 'name': theme {theme.name!r} is already defined "
                    f"in {seen[theme.name]}"
                )
            seen[theme.name] = path
            themes.pop(theme.name, None)  # an override moves to its directory's position
            themes[theme.name] = theme
    return list(themes.values())


def bundled_themes_dir() -> Path:
    """The bundled themes: the repository's `themes/`, or the installed package's copy."""
    return bundled_dir("themes")


def user_themes_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "vastui" / "themes"


def theme_dirs() -> list[Path]:
    """Bundled themes first, then the user's directory if it exists (it wins on a clash)."""
    dirs = [bundled_themes_dir()]
    user = user_themes_dir()
    if user.is_dir():
        dirs.append(user)
    return dirs


def register_themes(app: App, themes: Iterable[Theme]) -> None:
    """Register each theme with the app (a same-named theme, even a built-in, is replaced)."""
    for theme in themes:
        app.register_theme(theme)


def resolve_theme_name(app: App, name: str, source: str | Path | None = None) -> str:
    """`name` if the app knows it, else a `ThemeError` listing the available names.

    `source` (e.g. the config file) prefixes the message as `<source>: key 'ui.theme': ...`.
    """
    available = app.available_themes
    if name in available:
        return name
    prefix = f"{source}: key 'ui.theme': " if source is not None else ""
    raise ThemeError(f"{prefix}unknown theme {name!r} (available: {', '.join(sorted(available))})")
