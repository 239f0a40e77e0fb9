"""Tests for vastui.vast.query.

Every expected value in CLI_PARSE_CASES and CLI_BODY_CASES was produced by running the real
vastai 1.9.1 CLI (``vastai.api.query.parse_query`` with the offers tables, and the
``search offers`` command with a fake HTTP client capturing the POST body) and pasting the
output here verbatim.  Comparisons go through ``json.dumps`` so types ("1" vs 1, 24000.0 vs
24000, True vs "true") and key order must match too.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable

import pytest

from vastui.vast.query import (
    FIELD_ALIASES,
    KNOWN_FIELDS,
    MAX_FILTER_CHARS,
    QueryError,
    build_search_body,
    parse_order,
    parse_query,
)


def _same(actual: object, expected: object) -> bool:
    return json.dumps(actual) == json.dumps(expected)


# (text, what the real CLI's parse_query returns)
CLI_PARSE_CASES = [
    # the vastui default filter
    (
        "disk_space>=250 dph<=0.9 gpu_ram>12.5 cpu_ram>=240 cpu_cores>25 inet_down>100 "
        "cuda_vers>=13.0",
        {
            "disk_space": {"gte": "250"},
            "dph_total": {"lte": "0.9"},
            "gpu_ram": {"gt": 12500.0},
            "cpu_ram": {"gte": 240000.0},
            "cpu_cores": {"gt": "25"},
            "inet_down": {"gt": "100"},
            "cuda_max_good": {"gte": "13.0"},
        },
    ),
    (
        "gpu_name=RTX_4090 num_gpus=1 reliability>0.98 direct_port_count>=1",
        {
            "gpu_name": {"eq": "RTX 4090"},
            "num_gpus": {"eq": "1"},
            "reliability": {"gt": "0.98"},
            "direct_port_count": {"gte": "1"},
        },
    ),
    # in / notin lists
    ("gpu_name in [RTX_4090,RTX_3090]", {"gpu_name": {"in": ["RTX 4090", "RTX 3090"]}}),
    (
        'gpu_name in ["RTX 4090", "RTX 3090"] geolocation notin [CN,VN]',
        {"gpu_name": {"in": ["RTX 4090", "RTX 3090"]}, "geolocation": {"notin": ["CN", "VN"]}},
    ),
    ("geolocation in [US,CA]", {"geolocation": {"in": ["US", "CA"]}}),
    ("geolocation in [US, CA]", {"geolocation": {"in": ["US", "CA"]}}),
    ("geolocation in US,CA", {"geolocation": {"in": ["US", "CA"]}}),
    ("geolocation not in [CN]", {"geolocation": {"notin": ["CN"]}}),
    ("geolocation nin [CN]", {"geolocation": {"notin": ["CN"]}}),
    ("gpu_name notin [A_100]", {"gpu_name": {"notin": ["A 100"]}}),
    ("machine_id in [1,2,3]", {"machine_id": {"in": ["1", "2", "3"]}}),
    ("gpu_name in [any]", {"gpu_name": {"in": ["any"]}}),
    # booleans, None
    ("verified=false", {"verified": {"eq": False}}),
    ("verified=True external=False", {"verified": {"eq": True}, "external": {"eq": False}}),
    (
        "has_avx=true vms_enabled=false rented=false",
        {"has_avx": {"eq": True}, "vms_enabled": {"eq": False}, "rented": {"eq": False}},
    ),
    ("external=None", {"external": {"eq": None}}),
    ("external=null", {"external": {"eq": None}}),
    # =any / * / ? remove the field
    ("verified=true rentable=any", {"verified": {"eq": True}}),
    ("rentable=any", {}),
    ("num_gpus=*", {}),
    ("num_gpus=?", {}),
    ("num_gpus>1 num_gpus=any", {}),
    ("num_gpus>1 num_gpus<1 num_gpus=any num_gpus=3", {"num_gpus": {"eq": "3"}}),
    ('gpu_name="any"', {"gpu_name": {"eq": "any"}}),
    # several terms on one field merge; a repeated op keeps the last value
    ("num_gpus>=2 num_gpus<=8", {"num_gpus": {"gte": "2", "lte": "8"}}),
    ("num_gpus>=2 num_gpus<=8 num_gpus>=4", {"num_gpus": {"gte": "4", "lte": "8"}}),
    # operator spellings and spacing
    ("num_gpus = 1", {"num_gpus": {"eq": "1"}}),
    ("num_gpus =1", {"num_gpus": {"eq": "1"}}),
    ("num_gpus= 1", {"num_gpus": {"eq": "1"}}),
    ("num_gpus == 2", {"num_gpus": {"eq": "2"}}),
    ("num_gpus != 2", {"num_gpus": {"neq": "2"}}),
    ("num_gpus gt 1", {"num_gpus": {"gt": "1"}}),
    ("num_gpus gte 1", {"num_gpus": {"gte": "1"}}),
    ("num_gpus lt 1", {"num_gpus": {"lt": "1"}}),
    ("num_gpus lte 1", {"num_gpus": {"lte": "1"}}),
    ("num_gpus eq 1", {"num_gpus": {"eq": "1"}}),
    ("num_gpus neq 1", {"num_gpus": {"neq": "1"}}),
    ("num_gpus noteq 1", {"num_gpus": {"neq": "1"}}),
    ("num_gpus not eq 1", {"num_gpus": {"neq": "1"}}),
    # GB -> MB floats, days -> seconds
    ("gpu_ram>24", {"gpu_ram": {"gt": 24000.0}}),
    ("gpu_total_ram>=80", {"gpu_total_ram": {"gte": 80000.0}}),
    ("gpu_ram>1.1", {"gpu_ram": {"gt": 1100.0}}),
    ("gpu_ram>0.1", {"gpu_ram": {"gt": 100.0}}),
    ("duration>24", {"duration": {"gt": 2073600.0}}),
    ("duration>=0.5", {"duration": {"gte": 43200.0}}),
    # driver_version: dotted -> int, otherwise a string
    ("driver_version>=535.86.05", {"driver_version": {"gte": 535086005}}),
    ("driver_version=550.54.15", {"driver_version": {"eq": 550054015}}),
    ("driver_version=535", {"driver_version": {"eq": "535"}}),
    # aliases
    ("cuda_vers>=12.1", {"cuda_max_good": {"gte": "12.1"}}),
    ("dph<0.5", {"dph_total": {"lt": "0.5"}}),
    ("dlperf_usd>100", {"dlperf_per_dphtotal": {"gt": "100"}}),
    ("flops_usd>10", {"flops_per_dphtotal": {"gt": "10"}}),
    ("display_active=false", {"gpu_display_active": {"eq": False}}),
    # examples from the CLI's help text
    (
        "reliability>0.99 num_gpus=4 geolocation in [TW,SE]",
        {
            "reliability": {"gt": "0.99"},
            "num_gpus": {"eq": "4"},
            "geolocation": {"in": ["TW", "SE"]},
        },
    ),
    (
        "compute_cap > 610 total_flops > 5 datacenter=True",
        {"compute_cap": {"gt": "610"}, "total_flops": {"gt": "5"}, "datacenter": {"eq": True}},
    ),
    (
        "reliability > 0.99  num_gpus>=4 verified=False",
        {"reliability": {"gt": "0.99"}, "num_gpus": {"gte": "4"}, "verified": {"eq": False}},
    ),
    # string values
    ("cpu_arch=arm64", {"cpu_arch": {"eq": "arm64"}}),
    ('gpu_name="RTX 4090"', {"gpu_name": {"eq": "RTX 4090"}}),
    ('gpu_name="RTX_4090"', {"gpu_name": {"eq": "RTX 4090"}}),
    ("gpu_name=[RTX_4090]", {"gpu_name": {"eq": "RTX 4090"}}),
    ("mobo_name=ROMED8_2T", {"mobo_name": {"eq": "ROMED8 2T"}}),
    ("geolocation=US", {"geolocation": {"eq": "US"}}),
    ("ubuntu_version=22.04", {"ubuntu_version": {"eq": "22.04"}}),
    ("verification=verified", {"verification": {"eq": "verified"}}),
    # plain numbers stay the strings the user typed
    ("id=12345", {"id": {"eq": "12345"}}),
    ("num_gpus=1,", {"num_gpus": {"eq": "1"}}),
    ("gpu_frac>=0.5", {"gpu_frac": {"gte": "0.5"}}),
    (
        "inet_up>=100 inet_down_cost<0.01",
        {"inet_up": {"gte": "100"}, "inet_down_cost": {"lt": "0.01"}},
    ),
    # empty
    ("", {}),
]


@pytest.mark.parametrize(("text", "expected"), CLI_PARSE_CASES)
def test_parse_query_matches_cli(text: str, expected: dict) -> None:
    assert _same(parse_query(text), expected)


_DEFAULTS = {"verified": {"eq": True}, "external": {"eq": False}, "rentable": {"eq": True}}
_TAIL = {"order": [["score", "desc"]], "type": "on-demand", "allocated_storage": 5.0}

# (build_search_body kwargs, the body the real `vastai search offers <argv>` POSTs)
CLI_BODY_CASES = [
    # vastai search offers
    ({"text": ""}, {**_DEFAULTS, **_TAIL}),
    # vastai search offers '<vastui default filter>'
    (
        {
            "text": "disk_space>=250 dph<=0.9 gpu_ram>12.5 cpu_ram>=240 cpu_cores>25 "
            "inet_down>100 cuda_vers>=13.0"
        },
        {
            **_DEFAULTS,
            "disk_space": {"gte": "250"},
            "dph_total": {"lte": "0.9"},
            "gpu_ram": {"gt": 12500.0},
            "cpu_ram": {"gte": 240000.0},
            "cpu_cores": {"gt": "25"},
            "inet_down": {"gt": "100"},
            "cuda_max_good": {"gte": "13.0"},
            **_TAIL,
        },
    ),
    # vastai search offers 'verified=any rentable=any'
    ({"text": "verified=any rentable=any"}, {"external": {"eq": False}, **_TAIL}),
    # vastai search offers 'verified=false external!=true'  (ops merge into the defaults)
    (
        {"text": "verified=false external!=true"},
        {
            "verified": {"eq": False},
            "external": {"eq": False, "neq": True},
            "rentable": {"eq": True},
            **_TAIL,
        },
    ),
    # vastai search offers 'reliability > 0.99  num_gpus>=4 verified=False' -o 'num_gpus-'
    (
        {"text": "reliability > 0.99  num_gpus>=4 verified=False", "order": "num_gpus-"},
        {
            "verified": {"eq": False},
            "external": {"eq": False},
            "rentable": {"eq": True},
            "reliability": {"gt": "0.99"},
            "num_gpus": {"gte": "4"},
            "order": [["num_gpus", "desc"]],
            "type": "on-demand",
            "allocated_storage": 5.0,
        },
    ),
    # vastai search offers gpu_name in '[RTX_4090,RTX_3090]' geolocation in '[US,CA]'
    (
        {"text": "gpu_name in [RTX_4090,RTX_3090] geolocation in [US,CA]"},
        {
            **_DEFAULTS,
            "gpu_name": {"in": ["RTX 4090", "RTX 3090"]},
            "geolocation": {"in": ["US", "CA"]},
            **_TAIL,
        },
    ),
    # vastai search offers num_gpus=2 -n
    (
        {"text": "num_gpus=2", "default_filters": False},
        {"num_gpus": {"eq": "2"}, **_TAIL},
    ),
    # vastai search offers num_gpus=2 -i
    (
        {"text": "num_gpus=2", "offer_type": "bid"},
        {**_DEFAULTS, "num_gpus": {"eq": "2"}, **_TAIL, "type": "bid"},
    ),
    # vastai search offers num_gpus=2 -t interruptible
    (
        {"text": "num_gpus=2", "offer_type": "interruptible"},
        {**_DEFAULTS, "num_gpus": {"eq": "2"}, **_TAIL, "type": "bid"},
    ),
    # vastai search offers num_gpus=2 -r --storage 50
    (
        {"text": "num_gpus=2", "offer_type": "reserved", "allocated_storage": 50},
        {
            **_DEFAULTS,
            "num_gpus": {"eq": "2"},
            **_TAIL,
            "type": "reserved",
            "allocated_storage": 50.0,
        },
    ),
    # vastai search offers num_gpus=2 -o 'score-,dph'
    (
        {"text": "num_gpus=2", "order": "score-,dph"},
        {
            **_DEFAULTS,
            "num_gpus": {"eq": "2"},
            **_TAIL,
            "order": [["score", "desc"], ["dph_total", "asc"]],
        },
    ),
    # vastai search offers num_gpus=2 '-o=-dlperf_usd, flops_usd+ ,num_gpus'
    (
        {"text": "num_gpus=2", "order": "-dlperf_usd, flops_usd+ ,num_gpus"},
        {
            **_DEFAULTS,
            "num_gpus": {"eq": "2"},
            **_TAIL,
            "order": [
                ["dlperf_per_dphtotal", "desc"],
                ["flops_per_dphtotal", "asc"],
                ["num_gpus", "asc"],
            ],
        },
    ),
    # vastai search offers num_gpus=2 -o ''
    (
        {"text": "num_gpus=2", "order": ""},
        {**_DEFAULTS, "num_gpus": {"eq": "2"}, **_TAIL, "order": []},
    ),
    # vastai search offers num_gpus=2 --limit 0  (a falsy limit is left out)
    ({"text": "num_gpus=2", "limit": 0}, {**_DEFAULTS, "num_gpus": {"eq": "2"}, **_TAIL}),
]


@pytest.mark.parametrize(("kwargs", "expected"), CLI_BODY_CASES)
def test_build_search_body_matches_cli(kwargs: dict, expected: dict) -> None:
    kwargs = dict(kwargs)
    assert _same(build_search_body(kwargs.pop("text"), **kwargs), expected)


def test_vast_api_md_example_body() -> None:
    # vast-api.md §3.2: vastai search offers '<text>' -o dph --limit 3
    body = build_search_body(
        "gpu_name=RTX_4090 num_gpus=1 reliability>0.98 direct_port_count>=1", order="dph", limit=3
    )
    expected = json.loads(
        '{"verified": {"eq": true}, "external": {"eq": false}, "rentable": {"eq": true},'
        ' "gpu_name": {"eq": "RTX 4090"}, "num_gpus": {"eq": "1"}, "reliability": {"gt": "0.98"},'
        ' "direct_port_count": {"gte": "1"}, "order": [["dph_total", "asc"]], "type": "on-demand",'
        ' "limit": 3, "allocated_storage": 5.0}'
    )
    assert _same(body, expected)


def test_defaults_are_not_shared_between_calls() -> None:
    assert build_search_body("verified=false external=any")["verified"] == {"eq": False}
    assert _same({k: v for k, v in build_search_body("").items() if k in _DEFAULTS}, _DEFAULTS)


def test_parse_query_has_no_defaults_and_whitespace_only_is_empty() -> None:
    assert parse_query("   ") == {}
    assert "verified" not in parse_query("num_gpus=1")


# (text, offending term as typed, fragment of the problem)
ERROR_CASES = [
    ("gpu_ram>>12", "gpu_ram>>12", "unknown operator '>>'"),
    ("num_gpus=>1", "num_gpus=>1", "unknown operator"),
    ("num_gpus=1 gpu_ram", "gpu_ram", "missing operator"),
    ("num_gpus 1", "num_gpus 1", "missing operator"),
    ("num_gpus=", "num_gpus=", "missing value"),
    ("gpu_name in", "gpu_name in", "missing value"),
    ("num_gpus>= gpu_ram>1", "num_gpus>=", "missing value"),  # CLI: num_gpus gte "gpu ram>1"
    ('gpu_name=""', 'gpu_name=""', "missing value"),  # CLI: gpu_name eq ""
    ("foo=1", "foo=1", "unknown field 'foo'"),  # CLI: stderr warning, sends it anyway
    ("gpu_nmae=RTX_4090", "gpu_nmae=RTX_4090", "did you mean 'gpu_name'"),
    ("geolocation in [US,CA", "geolocation in [US,CA", "unbalanced '['"),  # CLI: accepts
    ("geolocation in [US, CA", "geolocation in [US,", "unbalanced '['"),
    ("geolocation in US,CA]", "geolocation in US,CA]", "unbalanced ']'"),  # CLI: accepts
    ('gpu_name="RTX 4090', 'gpu_name="RTX', "unbalanced quote"),
    ("geolocation in []", "geolocation in []", "empty list"),
    ("gpu_ram>abc", "gpu_ram>abc", "expected a number"),
    ("num_gpus=abc", "num_gpus=abc", "expected a number"),  # CLI: sends "abc"
    ("num_gpus=true", "num_gpus=true", "expected a number"),  # CLI: sends true
    ("gpu_ram>nan", "gpu_ram>nan", "expected a number"),  # CLI: sends NaN (invalid JSON)
    ("cpu_ram=None", "cpu_ram=None", "expected a number"),
    ("num_gpus in [1,x]", "num_gpus in [1,x]", "expected a number, got 'x'"),
    ("verified=yes", "verified=yes", "expected true or false"),  # CLI: sends "yes"
    ("gpu_ram in [12,24]", "gpu_ram in [12,24]", "not supported for gpu_ram"),  # CLI: TypeError
    ("duration in [1,2]", "duration in [1,2]", "not supported for duration"),  # CLI: TypeError
    ("driver_version>=535.86", "driver_version>=535.86", "535.86.05"),
    ("driver_version in [535.86.05,550.54.15]", "driver_version in [535.86.05,550.54.15]", "list"),
    ("num_gpus!=any", "num_gpus!=any", "only works with '='"),
    ("gpu_name=[A,B]", "gpu_name=[A,B]", "needs 'in' or 'notin'"),  # CLI: eq "A,B"
    ("num_gpus=1 ,gpu_ram>1", ",gpu_ram>1", "expected a field name"),
    ("-x", "-x", "expected a field name"),
    ('gpu_name="RTX 4090"x', 'gpu_name="RTX 4090"x', "unexpected text"),
    ("gpu_name=RTX>4090", "gpu_name=RTX>4090", "unexpected '>'"),
]


@pytest.mark.parametrize(("text", "term", "problem"), ERROR_CASES)
def test_bad_terms_raise_query_error(text: str, term: str, problem: str) -> None:
    with pytest.raises(QueryError) as info:
        parse_query(text)
    err = info.value
    assert err.term == term
    assert f"'{term}'" in str(err)
    assert problem in str(err)
    assert "\n" not in str(err)


def test_query_error_message_shape() -> None:
    with pytest.raises(QueryError) as info:
        parse_query("num_gpus=1 gpu_ram>>12 cpu_ram>1")
    assert str(info.value) == "bad filter term 'gpu_ram>>12': unknown operator '>>'"
    assert isinstance(info.value, ValueError)


def test_build_search_body_reports_term_errors() -> None:
    with pytest.raises(QueryError, match="'foo=1'"):
        build_search_body("num_gpus=1 foo=1")


@pytest.mark.parametrize("order", ["dph+-", "+dph-", "dph total", "d.ph", "-"])
def test_bad_order_raises(order: str) -> None:
    with pytest.raises(QueryError, match="bad order"):
        parse_order(order)


def test_parse_order_forms() -> None:
    assert parse_order("dph") == [["dph_total", "asc"]]
    assert parse_order("score-") == [["score", "desc"]]
    assert parse_order("-score,+num_gpus,,dph--") == [
        ["score", "desc"],
        ["num_gpus", "asc"],
        ["dph_total", "desc"],
    ]


def test_unknown_offer_type_raises() -> None:
    with pytest.raises(QueryError, match="bad offer type 'spot'"):
        build_search_body("", offer_type="spot")


def test_single_quotes_are_stripped() -> None:
    # Deviation: the CLI's own help suggests ['XV','XZ'] but sends ["'XV'", "'XZ'"].
    assert parse_query("geolocation notin ['XV','XZ']") == {"geolocation": {"notin": ["XV", "XZ"]}}
    assert parse_query("gpu_name='RTX 4090'") == {"gpu_name": {"eq": "RTX 4090"}}


def test_any_whitespace_separates_terms() -> None:
    # Deviation: the CLI only splits on spaces (a tab would end up inside a value).
    assert parse_query("num_gpus=1\tgpu_ram>24\n") == {
        "num_gpus": {"eq": "1"},
        "gpu_ram": {"gt": 24000.0},
    }


def test_quoted_driver_version() -> None:
    # Deviation: the CLI errors on a quoted dotted version; we unquote it.
    assert parse_query('driver_version>="535.86.05"') == {"driver_version": {"gte": 535086005}}


def test_known_fields_match_cli_table() -> None:
    # vastai.api.query.offers_fields (53 names) in 1.9.1
    cli_fields = {
        "bw_nvlink", "cluster_id", "compute_cap", "cpu_arch", "cpu_cores",
        "cpu_cores_effective", "cpu_ghz", "cpu_ram", "cuda_max_good", "datacenter",
        "direct_port_count", "disk_bw", "disk_space", "dlperf", "dlperf_per_dphtotal",
        "dph_total", "driver_version", "duration", "external", "flops_per_dphtotal",
        "geolocation", "gpu_arch", "gpu_display_active", "gpu_frac", "gpu_max_power",
        "gpu_max_temp", "gpu_mem_bw", "gpu_name", "gpu_ram", "gpu_total_ram", "has_avx",
        "host_id", "id", "inet_down", "inet_down_cost", "inet_up", "inet_up_cost",
        "machine_id", "min_bid", "mobo_name", "num_gpus", "pci_gen", "pcie_bw",
        "reliability", "rentable", "rented", "static_ip", "storage_cost", "total_flops",
        "ubuntu_version", "verification", "verified", "vms_enabled",
    }  # fmt: skip
    assert frozenset(cli_fields) == KNOWN_FIELDS
    assert set(FIELD_ALIASES.values()) <= KNOWN_FIELDS
    assert not set(FIELD_ALIASES) & KNOWN_FIELDS


# -- bounded work: the text is bounded, and the parse is linear in it ----------------------------


def _calls(work: Callable[[], object]) -> int:
    """Python and C function calls made by `work`: an operation count, not a clock."""
    count = 0

    def profile(_frame: object, event: str, _arg: object) -> None:
        nonlocal count
        if event in ("call", "c_call"):
            count += 1

    sys.setprofile(profile)
    try:
        work()
    finally:
        sys.setprofile(None)
    return count


def _fill(unit: str, size: int, head: str = "", tail: str = "") -> str:
    return head + unit * ((size - len(head) - len(tail)) // len(unit)) + tail


FILTER_SHAPES = {  # the densest terms, a long list, one long value
    "short terms": lambda size: _fill("id=1 ", size),
    "numeric terms": lambda size: _fill("cpu_ram>=240 ", size),
    "a long list": lambda size: _fill("A,", size, "gpu_name in [", "A]"),
    "a long value": lambda size: _fill("A", size, "gpu_name="),
}


@pytest.mark.parametrize("shape", sorted(FILTER_SHAPES))
def test_the_longest_filter_accepted_parses_in_work_linear_in_its_length(shape: str) -> None:
    make = FILTER_SHAPES[shape]
    full, half = make(MAX_FILTER_CHARS), make(MAX_FILTER_CHARS // 2)
    assert len(full) <= MAX_FILTER_CHARS
    work_full = _calls(lambda: build_search_body(full))
    work_half = _calls(lambda: build_search_body(half))
    assert work_full <= 2.1 * work_half  # linear: twice the text, twice the work
    assert work_full <= 10 * MAX_FILTER_CHARS  # ~30,000 calls at most: milliseconds


def test_a_filter_over_the_bound_is_refused_unread() -> None:
    huge = "num_gpus>=1 " * (10 * 2**20 // 12)  # the 10 MB filter of the report
    with pytest.raises(QueryError) as info:
        build_search_body(huge)
    assert str(info.value).endswith(f"{len(huge)} characters, at most {MAX_FILTER_CHARS}")
    assert len(str(info.value)) < 200  # one short line, not the text
    with pytest.raises(QueryError):
        parse_query(huge)

    def refused() -> None:
        with pytest.raises(QueryError):
            build_search_body(huge)

    assert _calls(refused) < 200
    with pytest.raises(QueryError, match="bad order"):
        build_search_body("", order="dph," * 100)


def test_a_bad_term_is_quoted_short() -> None:
    with pytest.raises(QueryError) as info:
        parse_query("gpu_name" + " " * 100_000 + "x")
    assert len(str(info.value)) < 150
