"""Hostile config files: any text, any value for any key → a Config or one clear ConfigError.

Never another exception, never a multi-line message, never a raw control character from the
file on the operator's terminal; and a Config that loads is one the engine can use.
"""

from __future__ import annotations

import dataclasses
import math
import re
import typing
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.fuzz_strategies import (
    Raw,
    file_text,
    hostile_file_text,
    toml_document,
    toml_scalar,
    toml_string,
    toml_value,
)
from vastui.config import Config, ConfigError, load_config
from vastui.engine.labels import fleet_of, is_vastui_label, new_label

SECTIONS: dict[str, type] = {
    f.name: typing.get_type_hints(Config)[f.name]
    for f in dataclasses.fields(Config)
    if f.name != "path"
}
FIELDS: dict[str, dict[str, Any]] = {
    name: typing.get_type_hints(cls) for name, cls in SECTIONS.items()
}
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")

KEYMAPS = st.dictionaries(hostile_file_text, st.sampled_from(["q", "ctrl+d"]), max_size=2)
# Plausible values per type, so that many documents load and the Config side is exercised too.
PLAUSIBLE: dict[Any, st.SearchStrategy[Any]] = {
    int: st.integers(min_value=-2, max_value=2000),
    float: st.one_of(st.floats(min_value=0, max_value=2000), st.sampled_from([1e-9, 0.008])),
    bool: st.booleans(),
    str: st.sampled_from(
        ["main", "a-b", "127.0.0.1:1234", "", "30m", "dph", "ü", "127.0.0.1:²", "x:٣", "layer1"]
    ),
    dict[str, str]: st.dictionaries(
        hostile_file_text, st.sampled_from(["q", "ctrl+d"]), max_size=2
    ),
    list[str]: st.lists(st.sampled_from(["notify-send", "vastui", "", "ü", "x\x00"]), max_size=3),
}


@st.composite
def config_documents(draw: st.DrawFn) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    for name in draw(st.lists(st.sampled_from(sorted(SECTIONS)), max_size=4, unique=True)):
        table: dict[str, Any] = {}
        for key in draw(st.lists(st.sampled_from(sorted(FIELDS[name])), max_size=4, unique=True)):
            plausible = PLAUSIBLE[FIELDS[name][key]]
            table[key] = draw(st.one_of(plausible, plausible, toml_value))
        if draw(st.integers(0, 9)) == 0:  # now and then a key the section does not have
            table[draw(hostile_file_text)] = draw(toml_scalar)
        doc[name] = table if draw(st.integers(0, 19)) else draw(toml_value)
    if draw(st.integers(0, 9)) == 0:
        doc[draw(hostile_file_text)] = draw(toml_value)
    return doc


# The document tests need more tries than the default profile's to reach the rarer keys.
WIDER = settings(max_examples=4 * settings.default.max_examples)


@pytest.fixture(scope="module")
def config_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz-config") / "config.toml"


def load(path: Path, text: str) -> Config | ConfigError:
    path.write_text(text, encoding="utf-8")
    try:
        return load_config(path)
    except ConfigError as exc:  # anything else propagates and fails the test
        return exc


def assert_clear_error(error: ConfigError, path: Path) -> None:
    message = str(error)
    assert message.startswith(f"{path}: "), message
    assert "\n" not in message and message.isprintable(), message
    assert len(message) < 1000, message
    if "not valid TOML" not in message and "cannot read" not in message:
        assert "key " in message, message  # which key, in every error about one


def assert_usable(config: Config) -> None:
    """What the engine relies on once a config has loaded."""
    for name in SECTIONS:
        section = getattr(config, name)
        for key, value in dataclasses.asdict(section).items():
            values = value.items() if isinstance(value, dict) else [(None, value)]
            for sub, item in values:
                if isinstance(item, str):
                    allowed = item.replace("\n", "").replace("\t", "").replace("\r", "")
                    assert not _CONTROL.search(allowed if key == "filter" else item), (key, item)
                if sub is not None:
                    assert not _CONTROL.search(sub), (key, sub)
                if isinstance(item, int):
                    assert -(2**63) <= item < 2**63, (key, item)
                if isinstance(item, float):
                    assert math.isfinite(item), (key, item)
    label = new_label(config.fleet.name, "0123abcd")
    assert is_vastui_label(label) and fleet_of(label) == config.fleet.name
    for dph in (0.001, 0.9, 50.0):
        assert math.isfinite(config.min_rate_for(dph))
    for addr in (config.ssh.lotus_api, config.ssh.curio_db, config.ssh.curio_db_cql):
        if addr:
            assert 0 < int(addr.rpartition(":")[2]) < 65536


@given(text=file_text)
def test_any_text_is_a_config_or_one_clear_error(config_file: Path, text: str) -> None:
    result = load(config_file, text)
    if isinstance(result, ConfigError):
        assert_clear_error(result, config_file)
    else:
        assert_usable(result)


@WIDER
@given(doc=config_documents())
def test_any_value_for_any_key_is_a_config_or_one_clear_error(
    config_file: Path, doc: dict[str, Any]
) -> None:
    result = load(config_file, toml_document(doc))
    if isinstance(result, ConfigError):
        assert_clear_error(result, config_file)
    else:
        assert_usable(result)


@WIDER
@given(doc=config_documents())
def test_section_syntax_reads_like_inline_tables(config_file: Path, doc: dict[str, Any]) -> None:
    """The same document written with [section] headers loads to the same answer."""
    inline = load(config_file, toml_document(doc))
    lines = []
    for name, table in doc.items():
        if isinstance(table, dict):
            lines.append(f"[{toml_string(name)}]\n{toml_document(table)}")
        else:
            lines.insert(0, toml_document({name: table}))
    headed = load(config_file, "".join(lines))
    if isinstance(inline, ConfigError):
        assert isinstance(headed, ConfigError)
        assert_clear_error(headed, config_file)
    else:
        assert headed == inline


# --- each hole the fuzzing found, as a plain regression ------------------------------------


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        # tomllib recurses per nesting level: a RecursionError escaped as a traceback.
        ("a = " + "[" * 3000 + "]" * 3000 + "\n", "not valid TOML: nested too deeply"),
        ("a = " + "{b = " * 3000 + "1" + "}" * 3000 + "\n", "not valid TOML: nested too deeply"),
        # str.isdigit() takes "²", which int() refuses: a ValueError escaped.
        ('[ssh]\nlotus_api = "127.0.0.1:²"\n', "key 'ssh.lotus_api': expected host:port"),
        # Other scripts' digits passed as a port and as curio's ProveTimeout.
        ('[ssh]\ncurio_db = "localhost:٥٤٣٣"\n', "key 'ssh.curio_db'"),
        ('[curio]\nprove_timeout = "٣٠m"\n', "key 'curio.prove_timeout'"),
        # A fleet name the label pattern cannot match: rented instances never recognised.
        ('[fleet]\nname = "flotte-ü"\n', "key 'fleet.name'"),
        ('[fleet]\nname = "-main"\n', "key 'fleet.name'"),
        # min_rate = ceil($/h ÷ 5e-324) is ceil(inf): OverflowError on every offer.
        ("[fleet]\nmax_cost_per_proof = 5e-324\n", "key 'fleet.max_cost_per_proof'"),
        # Beyond SQLite's INTEGER: the engine could not store its own target.
        ("[fleet]\ntarget_workers = 9223372036854775808\n", "key 'fleet.target_workers'"),
        # A NUL in a path, an escape in an image name.
        ('[ssh]\nkey_path = "/k\\u0000ey"\n', "key 'ssh.key_path': expected a string without"),
        ('[fleet]\nimage = "img\\u001b]52;c;eA==\\u0007"\n', "key 'fleet.image'"),
        # A key from the file reached the terminal raw: escapes and a line break.
        ('[fleet]\n"x\\u001b[2J\\ny" = 1\n', r"unknown key 'fleet.x\x1b[2J\ny'"),
        ('"\\u009b2J" = 1\n', r"unknown key '\x9b2J'"),
        ('[ui.keymap]\n"quit\\u001b" = "q"\n', r"key 'ui.keymap.quit\x1b'"),
    ],
    ids=[
        "deep-array",
        "deep-table",
        "superscript-port",
        "arabic-port",
        "arabic-duration",
        "non-ascii-fleet",
        "dash-fleet",
        "tiny-max-cost",
        "int-over-64-bits",
        "nul-in-path",
        "osc52-in-image",
        "escape-in-key",
        "c1-in-section",
        "escape-in-keymap-id",
    ],
)
def test_each_found_hole_is_one_clear_error(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "config.toml"
    result = load(path, text)
    assert isinstance(result, ConfigError), result
    assert fragment in str(result)
    assert_clear_error(result, path)


def test_a_multi_line_filter_still_loads(tmp_path: Path) -> None:
    text = '[offers]\nfilter = """\ndph<=0.9\n\tgpu_ram>12.5\r\n"""\n'
    config = load(tmp_path / "config.toml", text)
    assert isinstance(config, Config) and config.offers.filter == "dph<=0.9\n\tgpu_ram>12.5\n"


def test_raw_literals_are_refused_by_type(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    result = load(path, toml_document({"fleet": {"name": Raw("1979-05-27")}}))
    assert isinstance(result, ConfigError)
    assert "key 'fleet.name': expected a string, got date" in str(result)
