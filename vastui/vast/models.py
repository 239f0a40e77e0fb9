"""Typed views of Vast.ai offers and instances.

All unit conversion happens here and nowhere else:
- RAM/VRAM arrive in MB; we expose GB as MB / 1000, the same factor the vastai CLI uses for its
  filters (`cpu_ram>=240` means `cpu_ram >= 240000`), so a displayed value and a filter agree.
- Times arrive as epoch seconds (float); we keep epoch seconds.
- Ports arrive as Docker binding maps whose `HostPort` is a string; we expose ints.
Vast sends numbers as strings, nulls and missing keys freely: coercion is lenient where the
value is optional and strict (a one-line `ModelError`) where we cannot work without it.

Validation lives here too, so nothing past this boundary sees an impossible value: numbers are
read strictly (`parse_number`: plain decimal notation; `"1_0"`, `"inf"`, `"nan"` are not numbers),
ids fit SQLite's signed 64-bit INTEGER, a price is positive, finite and plausible; an optional
value out of range is unknown (None); a required one makes the record a `ModelError`.

One file: the trust boundary for Vast's answers is one place, by the rule above.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from itertools import chain, compress
from operator import itemgetter
from typing import Any, TypeVar, cast

import orjson

from vastui.numbers import parse_int, parse_number
from vastui.sanitize import sanitize_line
from vastui.vast.errors import VastMalformedResponse, VastProtocolError

MB_PER_GB = 1000.0

# Ids are stored in SQLite INTEGER columns: signed 64-bit. Vast's ids are positive.
INT64_MAX = 2**63 - 1
# Prices in $/h. No real Vast offer costs $10,000/h (the API caps a bid at $128); anything above
# cannot be valid, and keeping prices here keeps dph x hours and dph / $-per-proof finite.
MAX_DPH = 10_000.0
MIN_DPH = 1e-4  # below any real price (storage alone costs more): a "free" offer is an error
# Other quantities (MB, Mbit/s, cores, GB/s): finite and non-negative, bounded far above reality.
MAX_QUANTITY = 1e12
MAX_GPUS = 1024
# Bandwidth in $/GB: real offers ask cents (the simulated market up to $0.02); a dollar per GB
# would make a day's proving cost more than its GPU, so anything above is not a price.
MAX_GB_PRICE = 1.0
MAX_EPOCH = 1e11  # year ~5100: a start date beyond is not a date
MAX_UPTIME_MINS = 5e6  # ~10 years: an uptime beyond is not one
# JSON nesting deeper than this is not a Vast answer (offers are 2-3 levels deep).
MAX_JSON_DEPTH = 64
# JSON integers are exact within 64 bits (signed or not), as orjson reads them; beyond, they
# read as the nearest float (null past the float range), so no integer is ever thousands of
# digits long (int() of those is slow, and refused past 4300 digits).
_JSON_INT_MIN = -(2**63)
_JSON_INT_MAX = 2**64 - 1

# Numbers: vastui/numbers.py (plain decimal or exponent notation, finite, exact integers).


class ModelError(VastProtocolError):
    """A record from the API is unusable; the message names the record and the field."""


# -- strict scalars -------------------------------------------------------------------------


def valid_id(value: Any) -> int | None:
    """A Vast id: an integer from 1 to 2^63-1 (it must fit SQLite's INTEGER)."""
    if type(value) is int:  # the usual case, without parse_int's checks for text
        return value if 1 <= value <= INT64_MAX else None
    number = parse_int(value)
    return number if number is not None and 1 <= number <= INT64_MAX else None


def valid_price(value: Any) -> float | None:
    """A $/h price: finite, MIN_DPH..MAX_DPH. 0, "-0", negative, NaN, inf and 1e308 are not."""
    if type(value) is float:  # NaN fails both comparisons, inf the upper one
        return value if MIN_DPH <= value <= MAX_DPH else None
    number = parse_number(value)
    return number if number is not None and MIN_DPH <= number <= MAX_DPH else None


def describe(value: Any) -> str:
    """A short, safe rendering of a bad remote value for an error message."""
    if value is None or isinstance(value, bool | float):
        return repr(value)
    if isinstance(value, int):
        # str() of a huge int is slow or refused (4300 digits): say how big it is instead.
        return str(value) if value.bit_length() <= 80 else f"<integer of {value.bit_length()} bits>"
    if isinstance(value, str):
        return repr(sanitize_line(value, 40))
    return f"<{type(value).__name__}>"


def _num(raw: Mapping[str, Any], key: str) -> float | None:
    return parse_number(raw.get(key))


def _qty(raw: Mapping[str, Any], key: str, upper: float = MAX_QUANTITY) -> float | None:
    """An optional non-negative quantity; out of range is unknown, not an error."""
    return _quantity(raw.get(key), upper)


def _quantity(value: Any, upper: float = MAX_QUANTITY) -> float | None:
    kind = type(value)  # exact types first: the usual cases, without parse_number's checks
    if kind is float:  # NaN fails the comparison, inf the upper bound
        return value if 0.0 <= value <= upper else None
    if kind is int:  # upper is far below 2^53: the float is exact
        return float(value) if 0 <= value <= upper else None
    number = parse_number(value)
    return number if number is not None and 0 <= number <= upper else None


def _int(raw: Mapping[str, Any], key: str, lo: int, hi: int) -> int | None:
    """An optional integer in lo..hi; out of range is unknown (None)."""
    value = parse_int(raw.get(key))
    return value if value is not None and lo <= value <= hi else None


def _opt_id(raw: Mapping[str, Any], key: str) -> int | None:
    return valid_id(raw.get(key))


def _req_id(raw: Mapping[str, Any], key: str, what: str) -> int:
    value = raw.get(key)
    if type(value) is int and 1 <= value <= INT64_MAX:  # the usual case, in one step
        return value
    value = valid_id(value)
    if value is None:
        raise ModelError(
            f"{what} {describe(raw.get('id'))}: field '{key}' is missing or not an id "
            f"(an integer from 1 to 2^63-1): {describe(raw.get(key))}"
        )
    return value


def _str(raw: Mapping[str, Any], key: str) -> str | None:
    """Remote text, made display-safe here, once, for every consumer (CLI, console, logs).
    Short printable ASCII, the usual value, is taken as it is without a call more (a list of
    1,000 instances reads 10 such fields each: issue 32)."""
    value = raw.get(key)
    if type(value) is str and len(value) <= 1024 and value.isascii() and value.isprintable():
        return value
    return _text_value(value)


def _text_value(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return _text(value, 1024)
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = parse_number(value)
        return None if number is None else str(value)
    return None


def _text(value: str, max_len: int) -> str:
    """`sanitize_line`, skipped for short printable ASCII: nothing in it to remove (no ESC, no
    control, no C1, bidi or separator character), so the answer would be the text itself."""
    if len(value) <= max_len and value.isascii() and value.isprintable():
        return value
    return sanitize_line(value, max_len)


def _bool(raw: Mapping[str, Any], key: str) -> bool | None:
    return _bool_value(raw.get(key))


def _bool_value(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    return None


def _gb(raw: Mapping[str, Any], key: str) -> float | None:
    return _gb_value(raw.get(key))


def _gb_value(value: Any) -> float | None:
    mb = _quantity(value)
    return None if mb is None else mb / MB_PER_GB


def _verified(verification: Any) -> bool | None:
    if _plain_text(verification):  # "unverified", "deverified": nothing to sanitize
        return bool(verification == "verified")
    text = _text_value(verification)
    return None if text is None else text == "verified"


def country_code(geolocation: str | None) -> str | None:
    """`"Texas, US"` → `"US"`: Vast filters geolocation by this 2-letter suffix."""
    if not geolocation:
        return None
    tail = geolocation.rsplit(",", 1)[-1].strip()
    return tail if len(tail) == 2 and tail.isalpha() else None


@dataclass(frozen=True, slots=True)
class Offer:
    """A validated offer. Only these fields are kept, never Vast's row: nothing nested from a
    search answer outlives its parse (parse_json's `scalar_records`), and 10,000 rows of ~90
    fields would cost the engine ~70 MB."""

    id: int
    machine_id: int
    host_id: int | None
    gpu_name: str
    num_gpus: int
    gpu_ram_gb: float | None
    cpu_ram_gb: float | None
    cpu_cores: float | None  # effective vCPUs of this slice when known, else the machine's
    cpu_name: str | None
    dph_total: float
    disk_space_gb: float | None
    inet_down: float | None  # Mbit/s
    inet_up: float | None
    pcie_bw: float | None  # GB/s
    reliability: float | None  # 0..1
    geolocation: str | None
    cuda_max_good: float | None
    verified: bool | None
    rentable: bool | None
    # Interruptible pricing: the going minimum bid for the slice ($/h, the GPU part) and the
    # storage part of dph_total ($/h): a bid of b costs b + storage_total_cost.
    min_bid: float | None = None
    storage_total_cost: float | None = None
    # bandwidth, $/GB (vast-api.md §4): the parameters, each request and proof go over it
    inet_down_cost: float | None = None
    inet_up_cost: float | None = None
    # MB/s (vast-api.md:142; the CLI's help says "disk read bandwidth, in MB/s",
    # vastai/cli/commands/offers.py:86): with inet_down it bounds the parameters' download
    # (vastui/engine/ranking.py time_to_prove_h)
    disk_bw: float | None = None

    def __post_init__(self) -> None:
        # However an Offer is made, it can be rented and priced: valid ids, a real price.
        # (from_api validates as it reads, and builds without coming here: `_build_offer`.)
        if valid_id(self.id) != self.id or valid_id(self.machine_id) != self.machine_id:
            raise ModelError(f"offer {describe(self.id)}: id or machine_id out of range")
        if valid_price(self.dph_total) != self.dph_total:
            raise ModelError(f"offer {self.id}: price {describe(self.dph_total)} is not valid")
        if not 1 <= self.num_gpus <= MAX_GPUS:
            raise ModelError(f"offer {self.id}: num_gpus {self.num_gpus} out of range")

    @classmethod
    def from_api(cls, raw: Mapping[str, Any]) -> Offer:
        """Read one offer row strictly. Each field's usual exact JSON type is checked inline
        (a Python call per field cost more than the check); anything else goes through its
        careful reader, which gives the same for the usual case (tests/test_offer_pipeline.py)."""
        if type(raw) is dict:
            try:
                values = _offer_values(raw)
            except KeyError:  # a field missing reads as null, as raw.get gives
                values = tuple(map(raw.get, _OFFER_KEYS))
        elif isinstance(raw, Mapping):
            values = tuple(map(raw.get, _OFFER_KEYS))
        else:
            raise ModelError(f"offer is not a JSON object: {type(raw).__name__}")
        (offer_id, machine, host, gpu, gpus, gpu_ram, cpu_ram, cores, cores_all, cpu, dph, disk,
         down, up, pcie, rel, rel_old, geo, cuda, verification, rentable, min_bid,
         storage, down_cost, up_cost, disk_bw) = values  # fmt: skip
        if not (type(offer_id) is int and 1 <= offer_id <= INT64_MAX):
            offer_id = _req_id(raw, "id", "offer")
        if not (type(dph) is float and MIN_DPH <= dph <= MAX_DPH):
            dph = _offer_price(dph, offer_id)
        if not (type(machine) is int and 1 <= machine <= INT64_MAX):
            machine = _req_id(raw, "machine_id", "offer")
        if not (type(host) is int and 1 <= host <= INT64_MAX):
            host = valid_id(host)
        if not (type(gpus) is int and 1 <= gpus <= MAX_GPUS):
            gpus = _offer_gpus(gpus, offer_id)
        if not (type(cores) is float and 0.0 <= cores <= MAX_QUANTITY):
            cores = _quantity(cores)
            if cores is None:
                cores = _quantity(cores_all)
        if not (type(rel) is float and 0.0 <= rel <= 1.0):
            rel = _quantity(rel, 1.0)
            if rel is None:
                rel = _quantity(rel_old, 1.0)
        return _build_offer(
            offer_id,
            machine,
            host,
            gpu if _plain_text(gpu) and gpu else (_text_value(gpu) or "unknown"),
            gpus,
            gpu_ram / MB_PER_GB if _plain_mb(gpu_ram) else _gb_value(gpu_ram),
            cpu_ram / MB_PER_GB if _plain_mb(cpu_ram) else _gb_value(cpu_ram),
            cores,
            cpu if _plain_text(cpu) else _text_value(cpu),
            dph,
            disk if type(disk) is float and 0.0 <= disk <= MAX_QUANTITY else _quantity(disk),
            down if type(down) is float and 0.0 <= down <= MAX_QUANTITY else _quantity(down),
            up if type(up) is float and 0.0 <= up <= MAX_QUANTITY else _quantity(up),
            pcie if type(pcie) is float and 0.0 <= pcie <= MAX_QUANTITY else _quantity(pcie),
            rel,
            geo if _plain_text(geo) else _text_value(geo),
            cuda if type(cuda) is float and 0.0 <= cuda <= 1000.0 else _quantity(cuda, 1000.0),
            True if verification == "verified" else _verified(verification),
            rentable if type(rentable) is bool else _bool_value(rentable),
            # the usual exact types inline, as for the fields above (bench/offers.py: hot path)
            min_bid
            if type(min_bid) is float and MIN_DPH <= min_bid <= MAX_DPH
            else valid_price(min_bid),
            storage
            if type(storage) is float and 0.0 <= storage <= MAX_DPH
            else _quantity(storage, MAX_DPH),
            down_cost
            if type(down_cost) is float and 0.0 <= down_cost <= MAX_GB_PRICE
            else _quantity(down_cost, MAX_GB_PRICE),
            up_cost
            if type(up_cost) is float and 0.0 <= up_cost <= MAX_GB_PRICE
            else _quantity(up_cost, MAX_GB_PRICE),
            disk_bw
            if type(disk_bw) is float and 0.0 <= disk_bw <= MAX_QUANTITY
            else _quantity(disk_bw),
        )

    def to_api(self) -> dict[str, Any]:
        """This offer as a Vast row that `from_api` reads back exactly (the engine publishes
        its ranked offers so; tests/test_offer_record.py). GB go back to MB: (gb x 1000) / 1000
        is gb again for every gb that is some MB / 1000."""
        return {
            "id": self.id,
            "machine_id": self.machine_id,
            "host_id": self.host_id,
            "gpu_name": self.gpu_name,
            "num_gpus": self.num_gpus,
            "gpu_ram": None if self.gpu_ram_gb is None else self.gpu_ram_gb * MB_PER_GB,
            "cpu_ram": None if self.cpu_ram_gb is None else self.cpu_ram_gb * MB_PER_GB,
            "cpu_cores_effective": self.cpu_cores,
            "cpu_name": self.cpu_name,
            "dph_total": self.dph_total,
            "disk_space": self.disk_space_gb,
            "inet_down": self.inet_down,
            "inet_up": self.inet_up,
            "pcie_bw": self.pcie_bw,
            "reliability2": self.reliability,
            "geolocation": self.geolocation,
            "cuda_max_good": self.cuda_max_good,
            "verification": _VERIFICATION[self.verified],
            "rentable": self.rentable,
            "min_bid": self.min_bid,
            "storage_total_cost": self.storage_total_cost,
            "inet_down_cost": self.inet_down_cost,
            "inet_up_cost": self.inet_up_cost,
            "disk_bw": self.disk_bw,
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "machine_id": self.machine_id,
            "host_id": self.host_id,
            "gpu_name": self.gpu_name,
            "num_gpus": self.num_gpus,
            "gpu_ram_gb": _round(self.gpu_ram_gb, 1),
            "cpu_ram_gb": _round(self.cpu_ram_gb, 1),
            "cpu_cores": self.cpu_cores,
            "dph_total": _round(self.dph_total, 4),
            "inet_down": _round(self.inet_down, 1),
            "reliability": _round(self.reliability, 4),
            "geolocation": self.geolocation,
            "min_bid": _round(self.min_bid, 4),
            "inet_down_cost": _round(self.inet_down_cost, 4),
            "inet_up_cost": _round(self.inet_up_cost, 4),
        }


# What from_api reads, in one C call per row (in the order it unpacks them).
_OFFER_KEYS = (
    "id", "machine_id", "host_id", "gpu_name", "num_gpus", "gpu_ram", "cpu_ram",
    "cpu_cores_effective", "cpu_cores", "cpu_name", "dph_total", "disk_space", "inet_down",
    "inet_up", "pcie_bw", "reliability2", "reliability", "geolocation", "cuda_max_good",
    "verification", "rentable", "min_bid", "storage_total_cost", "inet_down_cost",
    "inet_up_cost", "disk_bw",
)  # fmt: skip
_offer_values = itemgetter(*_OFFER_KEYS)
_VERIFICATION = {None: None, True: "verified", False: "unverified"}


def _plain_text(value: Any) -> bool:
    """Text that `_text_value` would return unchanged (see `_text`)."""
    return type(value) is str and len(value) <= 1024 and value.isascii() and value.isprintable()


def _plain_mb(value: Any) -> bool:
    """An integer MB count in range: `_gb_value` would give value / 1000 (exact: < 2^53)."""
    return type(value) is int and 0 <= value <= MAX_QUANTITY


def _offer_price(value: Any, offer_id: int) -> float:
    price = valid_price(value)
    if price is None:
        raise ModelError(
            f"offer {offer_id}: field 'dph_total' is missing or not a price "
            f"(a number from {MIN_DPH:g} to {MAX_DPH:g} $/h): {describe(value)}"
        )
    return price


def _offer_gpus(value: Any, offer_id: int) -> int:
    """Missing means one GPU (as before); a present but impossible count voids the offer: the
    rate, the price per GPU and the slot it would take all depend on it."""
    if value is None:
        return 1
    count = parse_int(value)
    if count is None or not 1 <= count <= MAX_GPUS:
        raise ModelError(
            f"offer {offer_id}: field 'num_gpus' is not a GPU count (1 to {MAX_GPUS}): "
            f"{describe(value)}"
        )
    return count


_T = TypeVar("_T")


def unchecked_constructor(cls: type[_T]) -> Callable[..., _T]:
    """A positional constructor for the frozen, slotted dataclass `cls`, for values already
    validated: it skips `__post_init__` and the frozen `__init__`'s object.__setattr__ per
    field (together 1.2 µs of an Offer's ~3 µs; bench/offers.py). It fills a mutable twin
    with the same slots, then gives the object its class (Python allows that between
    classes of one layout; the twin's slots are checked to be cls's)."""
    spec: Any = cls  # a dataclass, checked by fields() at run time
    twin = dataclasses.make_dataclass(
        f"_Unchecked{cls.__name__}",
        [(f.name, f.type) for f in dataclasses.fields(spec)],
        slots=True,
        eq=False,
        repr=False,
        match_args=False,
    )
    if getattr(twin, "__slots__", None) != getattr(cls, "__slots__", ()):
        raise TypeError(f"{cls.__name__}: not a slotted dataclass of plain fields")

    def build(*values: Any) -> _T:
        obj = twin(*values)
        obj.__class__ = cls
        return cast(_T, obj)

    return build


_build_offer = unchecked_constructor(Offer)


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def parse_host_ports(raw_ports: Any) -> dict[int, int]:
    """Docker binding map `{"22/tcp": [{"HostPort": "41022", ...}]}` → `{22: 41022}`."""
    result: dict[int, int] = {}
    if not isinstance(raw_ports, Mapping):
        return result
    for key, bindings in raw_ports.items():
        if not isinstance(key, str) or not key.endswith("/tcp"):
            continue
        container_port = _port(key.split("/", 1)[0])
        if container_port is None or not isinstance(bindings, list):
            continue
        for binding in bindings:
            if not isinstance(binding, Mapping):
                continue
            host_port = _port(binding.get("HostPort"))
            if host_port is not None:
                result[container_port] = host_port
                break
    return result


def _port(value: Any) -> int | None:
    number = parse_int(value)
    return number if number is not None and 0 < number < 65536 else None


def _env_text(value: Any) -> str | None:
    """An env name or value: text or a plain number; nested structures are not env."""
    if isinstance(value, str):
        return sanitize_line(value, 1024)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return None if parse_number(value) is None else str(value)
    return None


def _env_dict(raw_env: Any) -> dict[str, str]:
    """`extra_env` arrives as [[k, v], ...] (or sometimes already a dict)."""
    pairs: list[Any] = []
    if isinstance(raw_env, Mapping):
        pairs = list(raw_env.items())
    elif isinstance(raw_env, list):
        pairs = [p for p in raw_env if isinstance(p, list | tuple) and len(p) == 2]
    env: dict[str, str] = {}
    for name, value in pairs:
        key, text = _env_text(name), _env_text(value)
        if key is not None and text is not None:
            env[key] = text
    return env


@dataclass(frozen=True, slots=True)
class Instance:
    id: int
    label: str | None
    machine_id: int | None
    host_id: int | None
    gpu_name: str | None
    num_gpus: int | None
    actual_status: str | None  # None while provisioning, then loading, running, exited, offline...
    intended_status: str | None
    cur_state: str | None
    status_msg: str | None
    image: str | None
    dph_total: float | None
    cpu_ram_gb: float | None
    gpu_ram_gb: float | None
    geolocation: str | None
    public_ipaddr: str | None
    ssh_host: str | None
    ssh_port: int | None
    ports: Mapping[int, int]
    start_date: float | None
    raw: Mapping[str, Any] = field(repr=False, compare=False, hash=False)
    # Interruptible: created by bidding; the bid (dph_base, $/h), the going minimum bid and
    # the storage part of dph_total (what a stopped instance still bills).
    is_bid: bool = False
    bid_price: float | None = None
    min_bid: float | None = None
    storage_total_cost: float | None = None
    uptime_mins: float | None = None  # minutes up (since it ran, or since created: spend.py)

    @classmethod
    def from_api(cls, raw: Mapping[str, Any]) -> Instance:
        if not isinstance(raw, Mapping):
            raise ModelError(f"instance is not a JSON object: {type(raw).__name__}")
        public_ip = _str(raw, "public_ipaddr")
        return cls(
            id=_req_id(raw, "id", "instance"),
            label=_str(raw, "label"),
            machine_id=_opt_id(raw, "machine_id"),
            host_id=_opt_id(raw, "host_id"),
            gpu_name=_str(raw, "gpu_name"),
            num_gpus=_int(raw, "num_gpus", 1, MAX_GPUS),
            actual_status=_str(raw, "actual_status"),
            intended_status=_str(raw, "intended_status"),
            cur_state=_str(raw, "cur_state"),
            status_msg=_str(raw, "status_msg"),
            image=_str(raw, "image_uuid"),
            dph_total=valid_price(raw.get("dph_total")),
            cpu_ram_gb=_gb(raw, "cpu_ram"),
            gpu_ram_gb=_gb(raw, "gpu_ram"),
            geolocation=_str(raw, "geolocation"),
            public_ipaddr=public_ip.strip() if public_ip else None,
            ssh_host=_str(raw, "ssh_host"),
            ssh_port=_port(raw.get("ssh_port")),
            ports=parse_host_ports(raw.get("ports")),
            start_date=_qty(raw, "start_date", upper=MAX_EPOCH),
            raw=raw,
            is_bid=_bool(raw, "is_bid") is True,
            bid_price=valid_price(raw.get("dph_base")) if _bool(raw, "is_bid") else None,
            min_bid=valid_price(raw.get("min_bid")),
            storage_total_cost=_qty(raw, "storage_total_cost", upper=MAX_DPH),
            uptime_mins=_qty(raw, "uptime_mins", upper=MAX_UPTIME_MINS),
        )

    @property
    def env(self) -> dict[str, str]:
        """The instance's environment, decoded when asked: only an instance being adopted
        needs it, and decoding every instance's on every list was three quarters of reading
        the list (1,000 instances of ~20 variables: 48 of 62 ms)."""
        return _env_dict(self.raw.get("extra_env"))

    @property
    def outbid(self) -> bool:
        """A bid paused by a higher one: stopped, and stopped is what Vast intends for it
        (dstack reads cur_state == intended_status == "stopped" as outbid; vast-api.md §14).
        vastui never stops its own instances, so a stopped bid of ours was outbid."""
        return (
            self.is_bid
            and self.actual_status in ("stopped", "exited", None)
            and (self.intended_status == "stopped" or self.cur_state == "stopped")
        )

    @property
    def is_running(self) -> bool:
        return self.actual_status == "running"

    def ssh_endpoint(self) -> tuple[str, int] | None:
        """Direct (public IP + mapped 22/tcp) when available, else Vast's SSH proxy."""
        if self.public_ipaddr and 22 in self.ports:
            return self.public_ipaddr, self.ports[22]
        if self.ssh_host and self.ssh_port:
            return self.ssh_host, self.ssh_port
        return None

    def ssh_command(self) -> str | None:
        endpoint = self.ssh_endpoint()
        if endpoint is None:
            return None
        host, port = endpoint
        return f"ssh -p {port} root@{host}"


@dataclass(frozen=True, slots=True)
class SshKey:
    id: int
    public_key: str

    @classmethod
    def from_api(cls, raw: Mapping[str, Any]) -> SshKey:
        if not isinstance(raw, Mapping):
            raise ModelError("ssh key record is not a JSON object")
        # OAS names the text `key`; the live API and POST answer use `public_key`.
        text = _str(raw, "public_key") or _str(raw, "key") or _str(raw, "ssh_key") or ""
        return cls(id=_req_id(raw, "id", "ssh key"), public_key=text.strip())

    def material(self) -> tuple[str, str]:
        return key_material(self.public_key)


def key_material(public_key: str) -> tuple[str, str]:
    """(type, base64) of an OpenSSH public key line, ignoring its comment."""
    parts = public_key.split()
    return (parts[0], parts[1]) if len(parts) >= 2 else ("", public_key.strip())


@dataclass(frozen=True, slots=True)
class User:
    id: int | None
    username: str | None
    email: str | None
    credit: float | None
    balance: float | None

    @classmethod
    def from_api(cls, raw: Mapping[str, Any]) -> User:
        if not isinstance(raw, Mapping):
            raise ModelError("current user is not a JSON object")
        return cls(
            id=_opt_id(raw, "id"),
            username=_str(raw, "username"),
            email=_str(raw, "email"),
            credit=_money(raw, "credit"),
            balance=_money(raw, "balance"),
        )


def _money(raw: Mapping[str, Any], key: str) -> float | None:
    """An account amount in $: may be negative, never absurd."""
    value = _num(raw, key)
    return value if value is not None and abs(value) <= MAX_QUANTITY else None


@dataclass(frozen=True, slots=True)
class CreateResult:
    instance_id: int
    # True when the create answer was lost and the instance was found by its label instead.
    recovered_by_label: bool = False
    # Vast answers success=false (still with new_contract) when it created a stopped instance.
    started: bool = True

    def __post_init__(self) -> None:
        if valid_id(self.instance_id) != self.instance_id:
            raise ModelError(f"created instance id {describe(self.instance_id)} is out of range")


@dataclass(frozen=True, slots=True)
class SearchResult:
    offers: list[Offer]
    rejected: list[str]  # one line per offer we could not parse


# -- bounded JSON ---------------------------------------------------------------------------


def _json_int(text: str) -> int | float | None:
    """An integer as orjson reads it: exact within 64 bits, else the nearest float, null past
    the float range. int() of thousands of digits is slow, and refused past 4300."""
    if len(text) <= 20:  # "-9223372036854775808", "18446744073709551615"
        number = int(text)
        if _JSON_INT_MIN <= number <= _JSON_INT_MAX:
            return number
    approx = float(text)  # linear in the digits, never refused
    return approx if math.isfinite(approx) else None


def _json_constant(_name: str) -> None:
    return None  # NaN / Infinity are not JSON; read them as null so the field is unknown


def parse_json(data: bytes | str, endpoint: str = "", *, scalar_records: bool = False) -> Any:
    """Decode an answer's JSON with bounds: nesting at most MAX_JSON_DEPTH, integers exact
    within 64 bits (beyond: the nearest float, or null past the float range), NaN/Infinity
    as null. Any failure is one typed line (`VastMalformedResponse`), never a RecursionError
    or a ValueError traceback.

    `scalar_records`: the caller reads only scalars from the objects inside the answer's lists
    and keeps nothing else of them (offers: `Offer.from_api`), so nesting inside those records
    harms nothing; it is then bounded by the parsers alone (orjson: 1024 levels, the stdlib:
    its recursion limit), and the walk skips the records (a million values in an offers
    answer: it cost a quarter of json.loads)."""
    try:
        # orjson reads what json.loads reads, alike (tests/test_offer_pipeline.py), in ~0.7 of
        # its time; it refuses NaN/Infinity, numbers past the float range, lone surrogates, a
        # BOM, UTF-16/32 and nesting past 1024: those take the stdlib's way.
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        value = _stdlib_json(data, endpoint)
    if depth_exceeds(value, MAX_JSON_DEPTH, records=not scalar_records):
        raise VastMalformedResponse(endpoint, f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
    return value


def _stdlib_json(data: bytes | str, endpoint: str) -> Any:
    try:
        return json.loads(data, parse_int=_json_int, parse_constant=_json_constant)
    except RecursionError:
        raise VastMalformedResponse(endpoint, "JSON nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise VastMalformedResponse(endpoint, f"not JSON ({_first_line(exc)})") from None


_CONTAINERS = frozenset((dict, list))
_LISTS = frozenset((list,))


def _first_line(exc: Exception) -> str:
    return sanitize_line(str(exc).splitlines()[0] if str(exc) else type(exc).__name__, 120)


def depth_exceeds(value: Any, limit: int, records: bool = True) -> bool:
    """True when containers nest deeper than `limit`. Level by level (no recursion to exhaust),
    each level's values typed in bulk by C iterators (exact types: the parsers make only dict
    and list). records=False: objects inside lists are not entered (see parse_json)."""
    level = [value] if type(value) in _CONTAINERS else []
    depth = 0
    while level:
        depth += 1
        if depth > limit:
            return True
        if records:
            values = list(chain.from_iterable(n.values() if type(n) is dict else n for n in level))
            level = list(compress(values, map(_CONTAINERS.__contains__, map(type, values))))
        else:
            in_dicts = list(chain.from_iterable(n.values() for n in level if type(n) is dict))
            in_lists = list(chain.from_iterable(n for n in level if type(n) is list))
            level = list(compress(in_dicts, map(_CONTAINERS.__contains__, map(type, in_dicts))))
            level += compress(in_lists, map(_LISTS.__contains__, map(type, in_lists)))
    return False
