from __future__ import annotations

from pathlib import Path

import pytest

from vastui.config import (
    DEFAULT_FILTER,
    ApiKeyError,
    Config,
    ConfigError,
    default_config_path,
    load_api_key,
    load_config,
)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


def test_defaults_come_from_the_original_system():
    cfg = Config()
    assert cfg.offers.filter == DEFAULT_FILTER
    assert cfg.fleet.max_cost_per_proof == 0.008
    assert cfg.fleet.disk_gb == 250
    assert (cfg.deadlines.first_report_min, cfg.deadlines.paramfetch_min) == (15, 90)
    assert cfg.deadlines.benchmark_min == 45


@pytest.mark.parametrize(
    ("dph", "expected"), [(0.232, 29.0), (0.24, 30.0), (0.2401, 31.0), (0.9, 113.0), (0.008, 1.0)]
)
def test_min_rate_is_ceil_of_price_over_max_cost(dph: float, expected: float):
    assert Config().min_rate_for(dph) == expected


def test_missing_default_file_means_defaults():
    assert load_config() == Config()


def test_explicit_missing_file_is_an_error(tmp_path: Path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "nope.toml")


def test_valid_file_overrides(tmp_path: Path):
    cfg = load_config(
        write(tmp_path, '[fleet]\ntarget_workers = 3\ndisk_gb = 300\n[ui.keymap]\nquit = "q"\n')
    )
    assert cfg.fleet.target_workers == 3
    assert cfg.fleet.disk_gb == 300.0
    assert cfg.ui.keymap == {"quit": "q"}


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("[fleet]\ntarget_workrs = 3\n", "unknown key 'fleet.target_workrs'"),
        ("[flet]\n", "unknown key 'flet'"),
        ('[fleet]\ntarget_workers = "3"\n', "key 'fleet.target_workers': expected an integer"),
        ("[fleet]\ndisk_gb = true\n", "key 'fleet.disk_gb': expected a number, got boolean"),
        ("[offers]\nfilter = 5\n", "key 'offers.filter': expected a string"),
        ("fleet = 3\n", "key 'fleet': expected a table"),
        (
            "[fleet]\nmax_cost_per_proof = 0\n",
            "key 'fleet.max_cost_per_proof': expected a number > 0",
        ),
        ("[fleet]\nauto_ban_days = 1e308\n", "key 'fleet.auto_ban_days'"),
        ("[fleet]\nauto_ban_days = nan\n", "key 'fleet.auto_ban_days'"),
        ("[fleet]\nmax_rents_per_slot_hour = 61\n", "key 'fleet.max_rents_per_slot_hour'"),
        ("[fleet]\nmax_rents_per_slot_hour = -1\n", "key 'fleet.max_rents_per_slot_hour'"),
        ("[ui.keymap]\nquit = 1\n", "key 'ui.keymap.quit': expected a string"),
        ("[fleet\n", "not valid TOML"),
        ('[fleet]\ntarget_workers = "Auto"\n', 'expected an integer or "auto", got string'),
        ("[fleet]\nauto_target = true\n", "unknown key 'fleet.auto_target'"),
        ("[fleet]\nmin_workers = 0\n", "key 'fleet.min_workers': expected 1 to fleet.max"),
        ("[fleet]\nmin_workers = 4\nmax_workers = 3\n", "key 'fleet.min_workers'"),
        ("[fleet]\ntarget_utilisation = 1.0\n", "key 'fleet.target_utilisation'"),
        ("[fleet]\nscale_down_after_min = 1\n", "key 'fleet.scale_down_after_min'"),
        ('[vast]\napi_key = "x"\n', "'api_key' is not read from the config file"),
    ],
)
def test_bad_config_is_one_line_naming_file_and_key(tmp_path: Path, text: str, fragment: str):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert fragment in message
    assert str(path) in message
    assert "\n" not in message


def test_config_path_env_override(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setenv("VASTUI_CONFIG", str(tmp_path / "x.toml"))
    assert default_config_path() == tmp_path / "x.toml"
    with pytest.raises(ConfigError, match="not found"):
        load_config()


def test_api_key_order(monkeypatch: pytest.MonkeyPatch, _isolated_env: Path):
    with pytest.raises(ApiKeyError, match="no Vast API key"):
        load_api_key()
    key_file = _isolated_env / ".config" / "vastai" / "vast_api_key"
    key_file.parent.mkdir(parents=True)
    key_file.write_text("filekey\n")
    assert load_api_key() == ("filekey", str(key_file))
    monkeypatch.setenv("VAST_API_KEY", "envkey")
    assert load_api_key() == ("envkey", "$VAST_API_KEY")


def _numeric_keys() -> list[tuple[str, str, type]]:
    """Every number the config file may set: (section, key, int or float)."""
    import dataclasses

    out = []
    for section in dataclasses.fields(Config):
        default = getattr(Config(), section.name)
        if not dataclasses.is_dataclass(default):
            continue
        for f in dataclasses.fields(default):
            value = getattr(default, f.name)
            if isinstance(value, int | float) and not isinstance(value, bool):
                out.append((section.name, f.name, type(value)))
    return out


NUMERIC = _numeric_keys()


@pytest.mark.parametrize(
    ("section", "key", "kind"), NUMERIC, ids=[f"{s}.{k}" for s, k, _ in NUMERIC]
)
def test_every_number_has_a_range_an_operator_could_mean(tmp_path, section, key, kind) -> None:
    """Absurd values (a float the store cannot hold a day count of, NaN, an integer past any
    fleet) are one line naming the key, before anything starts."""
    absurd = ["1e308", "nan", "-1e308"] if kind is float else ["1000000000000", "-1000000000000"]
    for value in absurd:
        path = write(tmp_path, f"[{section}]\n{key} = {value}\n")
        with pytest.raises(ConfigError, match=f"key '{section}.{key}'"):
            load_config(path)


def test_an_automatic_target_is_the_one_string_target_workers_takes(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, '[fleet]\ntarget_workers = "auto"\nmax_workers = 4\n'))
    assert cfg.fleet.auto_target and cfg.fleet.target_workers == 0
    assert (cfg.fleet.min_workers, cfg.fleet.max_workers) == (1, 4)
    fixed = load_config(write(tmp_path, "[fleet]\ntarget_workers = 3\n"))
    assert not fixed.fleet.auto_target and fixed.fleet.target_workers == 3


def _string_keys() -> list[tuple[str, str, str]]:
    """Every text the config file may set: (section, key, how it is written: str, list, table)."""
    import dataclasses
    import typing

    out = []
    for section in dataclasses.fields(Config):
        default = getattr(Config(), section.name)
        if not dataclasses.is_dataclass(default):
            continue
        hints = typing.get_type_hints(type(default))
        for f in dataclasses.fields(default):
            hint = hints[f.name]
            if hint is str:
                out.append((section.name, f.name, "str"))
            elif hint == list[str]:
                out.append((section.name, f.name, "list"))
            elif hint == dict[str, str]:
                out.append((section.name, f.name, "table"))
    return out


STRINGS = _string_keys()


@pytest.mark.parametrize(
    ("section", "key", "kind"), STRINGS, ids=[f"{s}.{k}" for s, k, _ in STRINGS]
)
def test_every_string_has_a_length_bound(tmp_path: Path, section: str, key: str, kind: str) -> None:
    """A text past its bound is one line naming the file, the key and the bound, before
    anything reads it (a 10 MB offers.filter cost the engine's loop seconds at every search)."""
    huge = "a" * 200_000
    value = {"str": f'"{huge}"', "list": f'["{huge}"]', "table": f'{{ x = "{huge}" }}'}[kind]
    path = write(tmp_path, f"[{section}]\n{key} = {value}\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert str(path) in message and f"'{section}.{key}" in message, message
    assert "at most" in message and "characters, got 200000" in message, message
    assert "\n" not in message and len(message) < 300 + len(str(path))


def test_the_filter_takes_a_real_query_and_refuses_one_over_its_bound(tmp_path: Path) -> None:
    from vastui.vast.query import MAX_FILTER_CHARS, build_search_body

    # thirty GPU models in a list beside the default filter: a long real query, well inside
    models = ",".join(f"RTX_{n}" for n in range(3000, 3030))
    real = f"{DEFAULT_FILTER} gpu_name in [{models}]"
    assert len(real) < MAX_FILTER_CHARS // 2
    assert load_config(write(tmp_path, f'[offers]\nfilter = "{real}"\n')).offers.filter == real
    longest = (DEFAULT_FILTER + " ") * (MAX_FILTER_CHARS // (len(DEFAULT_FILTER) + 1))
    longest += "num_gpus>=1 " * ((MAX_FILTER_CHARS - len(longest)) // 12)
    assert MAX_FILTER_CHARS - 12 < len(longest) <= MAX_FILTER_CHARS
    assert load_config(write(tmp_path, f'[offers]\nfilter = "{longest}"\n'))
    build_search_body(longest)  # and it parses
    over = longest + "x" * (MAX_FILTER_CHARS + 1 - len(longest))
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, f'[offers]\nfilter = "{over}"\n'))
    assert str(info.value).endswith(
        f"key 'offers.filter': expected a string of at most {MAX_FILTER_CHARS} characters, "
        f"got {MAX_FILTER_CHARS + 1}"
    )


def test_a_config_file_of_megabytes_is_refused_unparsed(tmp_path: Path) -> None:
    path = write(tmp_path, '[offers]\nfilter = "' + "num_gpus>=1 " * (10 * 2**20 // 12) + '"\n')
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert (
        str(info.value) == f"{path}: expected a config file of at most 1048576 bytes, it is longer"
    )


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("", False),
        ('[fleet]\ntarget_workers = 3\n[ssh]\nlotus_api = "10.0.0.2:1234"\n', False),
        ('[ssh]\ncurio_db = "10.0.0.5:5433"\n', True),
        ('[ssh]\ncurio_db = "127.0.0.1:5433"\n', True),  # the default, written: named
        ('[ssh]\ncurio_db_cql = "10.0.0.5:9042"\n', True),
        ('[curio]\ndb_name = "curio"\n', True),
        ("[curio]\nread_cluster = true\n", True),
        ("[curio]\nmax_pending = 8\n", False),
    ],
)
def test_a_file_that_names_curios_cluster_configures_it(
    tmp_path: Path, text: str, named: bool
) -> None:
    """A cluster the operator named is read through an outage (vastui/engine/runtime.py
    cluster_configured); the defaults alone only look for one."""
    from vastui.engine.runtime import cluster_configured

    cfg = load_config(write(tmp_path, text))
    assert cfg.curio.cluster_named is named
    assert cluster_configured(cfg, None) is named
    assert cluster_configured(cfg, "a password") is True  # the database's password given
    assert Config().curio.cluster_named is False
