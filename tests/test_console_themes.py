"""Theme files: bundled themes load and apply; bad files give one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.app import App, ComposeResult
from textual.color import Color
from textual.theme import Theme
from textual.widgets import Static

from vastui.console.themes import (
    ThemeError,
    bundled_themes_dir,
    load_theme_dirs,
    load_theme_file,
    register_themes,
    resolve_theme_name,
    theme_dirs,
    user_themes_dir,
)

BUNDLED = ("vastui-night", "vastui-paper")


class ThemeApp(App[None]):
    def compose(self) -> ComposeResult:
        yield Static("hello")


def write(directory: Path, filename: str, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / filename
    path.write_text(text, encoding="utf-8")
    return path


def error_for(path: Path) -> str:
    with pytest.raises(ThemeError) as info:
        load_theme_file(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: ")
    return message


# --- bundled themes ------------------------------------------------------------------------


def test_bundled_dir_is_the_repository_themes_folder():
    assert bundled_themes_dir() == Path(__file__).resolve().parent.parent / "themes"
    assert theme_dirs() == [bundled_themes_dir()]  # no user dir in the isolated HOME


@pytest.mark.parametrize("name", BUNDLED)
def test_bundled_theme_loads_and_generates(name: str):
    theme = load_theme_file(bundled_themes_dir() / f"{name}.toml")
    assert theme.name == name
    assert theme.dark is (name == "vastui-night")
    colours = theme.to_color_system().generate()
    assert Color.parse(colours["primary"]) == Color.parse(theme.primary)
    assert colours["footer-key-foreground"] == theme.primary


def test_bundled_themes_are_all_found():
    names = [t.name for t in load_theme_dirs(theme_dirs())]
    assert set(BUNDLED) <= set(names)


async def test_bundled_themes_register_and_apply():
    app = ThemeApp()
    async with app.run_test(size=(40, 5)) as pilot:
        register_themes(app, load_theme_dirs(theme_dirs()))
        for name in BUNDLED:
            assert name in app.available_themes
            app.theme = resolve_theme_name(app, name)
            await pilot.pause()
            assert app.current_theme.name == name
            assert app.screen.styles.background == Color.parse(app.current_theme.background)
        assert app.theme == "vastui-paper"
        app.theme = "vastui-night"
        await pilot.pause()
        assert app.current_theme.dark


# --- bad files -----------------------------------------------------------------------------

GOOD = 'name = "t"\nprimary = "#5fafd7"\n'


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (GOOD + 'warning = "blu"\n', "field 'warning': not a colour: 'blu'"),
        ('name = "t"\nprimary = "blu"\n', "field 'primary': not a colour: 'blu'"),
        (GOOD + "error = 12\n", "field 'error': expected a colour string, got number 12"),
        (GOOD + 'primay = "#fff"\n', "unknown field 'primay'"),
        ('name = "t"\n', "field 'primary': required but missing"),
        ('primary = "#fff"\n', "field 'name': required but missing"),
        ('name = "Night Mode"\nprimary = "#fff"\n', "field 'name': expected lowercase"),
        ("name = 3\nprimary = '#fff'\n", "field 'name': expected a string, got number 3"),
        (GOOD + 'dark = "yes"\n', "field 'dark': expected true or false, got string 'yes'"),
        (GOOD + "variables = 1\n", "field 'variables': expected a table, got number 1"),
        (GOOD + "[variables]\nborder = 1\n", "field 'variables.border': expected a string"),
        (GOOD + '[variables]\n"Bad Name" = "x"\n', "field 'variables.Bad Name': expected a name"),
        ('name = "t"\nprimary = \n', "not valid TOML: "),
    ],
    ids=[
        "bad-colour",
        "bad-primary",
        "colour-not-string",
        "unknown-field",
        "missing-primary",
        "missing-name",
        "bad-name",
        "name-not-string",
        "dark-wrong-type",
        "variables-not-table",
        "variable-not-string",
        "variable-bad-name",
        "not-toml",
    ],
)
def test_bad_file_gives_one_line_error(tmp_path: Path, text: str, expected: str):
    path = write(tmp_path, "x.toml", text)
    assert expected in error_for(path)


def test_unreadable_file(tmp_path: Path):
    path = write(tmp_path, "x.toml", "")
    path.write_bytes(b'name = "\xff"\n')
    assert "cannot read" in error_for(path)


def test_minimal_file_uses_defaults(tmp_path: Path):
    theme = load_theme_file(write(tmp_path, "x.toml", GOOD))
    assert theme == Theme(name="t", primary="#5fafd7")


def test_first_bad_file_in_a_directory_raises(tmp_path: Path):
    write(tmp_path, "a.toml", GOOD)
    bad = write(tmp_path, "b.toml", 'name = "b"\nprimary = "nope"\n')
    write(tmp_path, "c.toml", "not toml at all")
    with pytest.raises(ThemeError, match=r"b\.toml: field 'primary'") as info:
        load_theme_dirs([tmp_path])
    assert str(info.value).startswith(str(bad))


def test_duplicate_name_in_one_directory(tmp_path: Path):
    write(tmp_path, "a.toml", GOOD)
    write(tmp_path, "b.toml", GOOD)
    with pytest.raises(ThemeError, match=r"b\.toml: field 'name': theme 't' is already defined"):
        load_theme_dirs([tmp_path])


# --- directories ---------------------------------------------------------------------------


def test_sorted_and_missing_dirs_skipped(tmp_path: Path):
    write(tmp_path, "b.toml", 'name = "bee"\nprimary = "red"\n')
    write(tmp_path, "a.toml", 'name = "zed"\nprimary = "blue"\n')
    write(tmp_path, "ignored.txt", "name = nonsense")
    themes = load_theme_dirs([tmp_path / "missing", tmp_path])
    assert [t.name for t in themes] == ["zed", "bee"]


def test_user_dir_overrides_and_extends(isolated_user_dir: Path):
    write(isolated_user_dir, "night.toml", 'name = "vastui-night"\nprimary = "#ff0000"\n')
    write(isolated_user_dir, "mine.toml", 'name = "mine"\nprimary = "green"\ndark = false\n')
    assert theme_dirs() == [bundled_themes_dir(), isolated_user_dir]
    themes = {t.name: t for t in load_theme_dirs(theme_dirs())}
    assert themes["vastui-night"].primary == "#ff0000"
    assert themes["vastui-paper"].primary == "#005f87"
    assert themes["mine"].dark is False


def test_user_dir_follows_xdg_config_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    assert user_themes_dir() == tmp_path / "cfg" / "vastui" / "themes"
    monkeypatch.delenv("XDG_CONFIG_HOME")
    assert user_themes_dir() == Path.home() / ".config" / "vastui" / "themes"


@pytest.fixture
def isolated_user_dir() -> Path:
    path = user_themes_dir()
    path.mkdir(parents=True)
    return path


# --- resolving the configured name ---------------------------------------------------------


async def test_resolve_unknown_theme_lists_available():
    app = ThemeApp()
    async with app.run_test(size=(40, 5)):
        register_themes(app, load_theme_dirs(theme_dirs()))
        assert resolve_theme_name(app, "textual-dark") == "textual-dark"
        with pytest.raises(ThemeError) as info:
            resolve_theme_name(app, "vastui-nite")
        message = str(info.value)
        assert message.startswith("unknown theme 'vastui-nite' (available: ")
        assert "vastui-night" in message and "vastui-paper" in message
        assert "textual-dark" in message and "\n" not in message
        with pytest.raises(ThemeError, match=r"^/etc/c\.toml: key 'ui\.theme': unknown theme"):
            resolve_theme_name(app, "x", source="/etc/c.toml")


def test_resolve_without_running_app():
    app = ThemeApp()
    register_themes(app, [Theme(name="solo", primary="#123456")])
    assert resolve_theme_name(app, "solo") == "solo"
    with pytest.raises(ThemeError, match=r"available: .*solo"):
        resolve_theme_name(app, "nope")
