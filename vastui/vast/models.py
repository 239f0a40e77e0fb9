"""Typed views of Vast.ai offers and instances.

All unit conversion happens here and nowhere else:
- RAM/VRAM arrive in MB; we expose GB as MB / 1000, the same factor the vastai CLI uses for its
  filters (`cpu_ram>=240` means `cpu_ram >= 240000`), so a displayed value and a filter agree.
- Times arrive as epoch seconds (float); we keep epoch seconds.
- Ports arrive as Docker binding maps whose `HostPort` is a string; we expose ints.
Vast sends numbers as strings, nulls and missing keys freely: coercion is lenient where the
value is optional and strict (a one-line `ModelError`) where we cannot work without it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from vastui.sanitize import sanitize_line
from vastui.vast.errors import VastProtocolError

MB_PER_GB = 1000.0


class ModelError(VastProtocolError):
    """A record from the API is unusable; the message names the record and the field."""


def _num(raw: Mapping[str, Any], key: str) -> float | None:
    value = raw.get(key)
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, str):
        try:
            parsed = float(value.strip())
        except ValueError:
            return None
        return parsed if math.isfinite(parsed) else None
    return None


def _int(raw: Mapping[str, Any], key: str) -> int | None:
    value = _num(raw, key)
    if value is None or value != int(value):
        return None
    return int(value)


def _req_int(raw: Mapping[str, Any], key: str, what: str) -> int:
    value = _int(raw, key)
    if value is None:
        ident = raw.get("id")
        raise ModelError(f"{what} {ident!r}: field '{key}' is missing or not an integer")
    return value


def _str(raw: Mapping[str, Any], key: str) -> str | None:
    """Remote text, made display-safe here, once, for every consumer (CLI, console, logs)."""
    value = raw.get(key)
    if value is None:
        return None
    if isinstance(value, str):
        return sanitize_line(value, 1024)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return None


def _bool(raw: Mapping[str, Any], key: str) -> bool | None:
    value = raw.get(key)
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    return None


def _gb(raw: Mapping[str, Any], key: str) -> float | None:
    mb = _num(raw, key)
    return None if mb is None else mb / MB_PER_GB


def country_code(geolocation: str | None) -> str | None:
    """`"Texas, US"` → `"US"`: Vast filters geolocation by this 2-letter suffix."""
    if not geolocation:
        return None
    tail = geolocation.rsplit(",", 1)[-1].strip()
    return tail if len(tail) == 2 and tail.isalpha() else None


@dataclass(frozen=True, slots=True)
class Offer:
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
    raw: Mapping[str, Any] = field(repr=False, compare=False, hash=False)

    @classmethod
    def from_api(cls, raw: Mapping[str, Any]) -> Offer:
        if not isinstance(raw, Mapping):
            raise ModelError(f"offer is not a JSON object: {type(raw).__name__}")
        dph = _num(raw, "dph_total")
        if dph is None or dph < 0:
            raise ModelError(f"offer {raw.get('id')!r}: field 'dph_total' is missing or invalid")
        cores = _num(raw, "cpu_cores_effective")
        if cores is None:
            cores = _num(raw, "cpu_cores")
        reliability = _num(raw, "reliability2")
        if reliability is None:
            reliability = _num(raw, "reliability")
        verification = _str(raw, "verification")
        return cls(
            id=_req_int(raw, "id", "offer"),
            machine_id=_req_int(raw, "machine_id", "offer"),
            host_id=_int(raw, "host_id"),
            gpu_name=_str(raw, "gpu_name") or "unknown",
            num_gpus=_int(raw, "num_gpus") or 1,
            gpu_ram_gb=_gb(raw, "gpu_ram"),
            cpu_ram_gb=_gb(raw, "cpu_ram"),
            cpu_cores=cores,
            cpu_name=_str(raw, "cpu_name"),
            dph_total=dph,
            disk_space_gb=_num(raw, "disk_space"),
            inet_down=_num(raw, "inet_down"),
            inet_up=_num(raw, "inet_up"),
            pcie_bw=_num(raw, "pcie_bw"),
            reliability=reliability,
            geolocation=_str(raw, "geolocation"),
            cuda_max_good=_num(raw, "cuda_max_good"),
            verified=None if verification is None else verification == "verified",
            rentable=_bool(raw, "rentable"),
            raw=raw,
        )

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
        }


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
        try:
            container_port = int(key.split("/", 1)[0])
        except ValueError:
            continue
        if not isinstance(bindings, list):
            continue
        for binding in bindings:
            if not isinstance(binding, Mapping):
                continue
            host_port = _int(binding, "HostPort")
            if host_port is not None and 0 < host_port < 65536:
                result[container_port] = host_port
                break
    return result


def _env_dict(raw_env: Any) -> dict[str, str]:
    """`extra_env` arrives as [[k, v], ...] (or sometimes already a dict)."""
    if isinstance(raw_env, Mapping):
        return {str(k): str(v) for k, v in raw_env.items()}
    env: dict[str, str] = {}
    if isinstance(raw_env, list):
        for pair in raw_env:
            if isinstance(pair, list | tuple) and len(pair) == 2:
                env[str(pair[0])] = str(pair[1])
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
    env: Mapping[str, str]
    raw: Mapping[str, Any] = field(repr=False, compare=False, hash=False)

    @classmethod
    def from_api(cls, raw: Mapping[str, Any]) -> Instance:
        if not isinstance(raw, Mapping):
            raise ModelError(f"instance is not a JSON object: {type(raw).__name__}")
        public_ip = _str(raw, "public_ipaddr")
        return cls(
            id=_req_int(raw, "id", "instance"),
            label=_str(raw, "label"),
            machine_id=_int(raw, "machine_id"),
            host_id=_int(raw, "host_id"),
            gpu_name=_str(raw, "gpu_name"),
            num_gpus=_int(raw, "num_gpus"),
            actual_status=_str(raw, "actual_status"),
            intended_status=_str(raw, "intended_status"),
            cur_state=_str(raw, "cur_state"),
            status_msg=_str(raw, "status_msg"),
            image=_str(raw, "image_uuid"),
            dph_total=_num(raw, "dph_total"),
            cpu_ram_gb=_gb(raw, "cpu_ram"),
            gpu_ram_gb=_gb(raw, "gpu_ram"),
            geolocation=_str(raw, "geolocation"),
            public_ipaddr=public_ip.strip() if public_ip else None,
            ssh_host=_str(raw, "ssh_host"),
            ssh_port=_int(raw, "ssh_port"),
            ports=parse_host_ports(raw.get("ports")),
            start_date=_num(raw, "start_date"),
            env=_env_dict(raw.get("extra_env")),
            raw=raw,
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
        return cls(id=_req_int(raw, "id", "ssh key"), public_key=text.strip())

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
            id=_int(raw, "id"),
            username=_str(raw, "username"),
            email=_str(raw, "email"),
            credit=_num(raw, "credit"),
            balance=_num(raw, "balance"),
        )


@dataclass(frozen=True, slots=True)
class CreateResult:
    instance_id: int
    # True when the create answer was lost and the instance was found by its label instead.
    recovered_by_label: bool = False
    # Vast answers success=false (still with new_contract) when it created a stopped instance.
    started: bool = True


@dataclass(frozen=True, slots=True)
class SearchResult:
    offers: list[Offer]
    rejected: list[str]  # one line per offer we could not parse
