from __future__ import annotations

import pytest

from vastui.vast.models import Instance, ModelError, Offer, SshKey, country_code, parse_host_ports

FULL = {
    "id": 21614864, "machine_id": 31244, "host_id": 187302, "gpu_name": "RTX 4090",
    "num_gpus": 1, "gpu_ram": 24564, "cpu_ram": 64412, "cpu_cores": 128,
    "cpu_cores_effective": 16.0, "dph_total": 0.3210417, "inet_down": 1780.6,
    "inet_down_cost": 0.004, "inet_up_cost": 0.004,
    "reliability2": 0.9962, "geolocation": "Texas, US", "verification": "verified",
    "rentable": True, "disk_space": 253.4, "min_bid": 0.18, "storage_total_cost": 0.0010417,
}  # fmt: skip


def test_offer_units_normalised():
    offer = Offer.from_api(FULL)
    assert offer.gpu_ram_gb == pytest.approx(24.564)
    assert offer.cpu_ram_gb == pytest.approx(64.412)
    assert offer.cpu_cores == 16.0
    assert offer.verified is True and offer.rentable is True
    assert offer.min_bid == 0.18 and offer.storage_total_cost == 0.0010417
    assert offer.inet_down_cost == offer.inet_up_cost == 0.004  # vast-api.md §4's example
    assert offer.to_json() == {
        "id": 21614864, "machine_id": 31244, "host_id": 187302, "gpu_name": "RTX 4090",
        "num_gpus": 1, "gpu_ram_gb": 24.6, "cpu_ram_gb": 64.4, "cpu_cores": 16.0,
        "dph_total": 0.321, "inet_down": 1780.6, "reliability": 0.9962,
        "geolocation": "Texas, US", "min_bid": 0.18, "inet_down_cost": 0.004,
        "inet_up_cost": 0.004,
    }  # fmt: skip


def test_offer_numbers_as_strings_and_nulls():
    raw = dict(FULL, id="21614864", dph_total="0.5", num_gpus=None, gpu_ram="x", host_id=None)
    offer = Offer.from_api(raw)
    assert offer.id == 21614864 and offer.dph_total == 0.5
    assert offer.num_gpus == 1 and offer.gpu_ram_gb is None and offer.host_id is None


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"id": None}, "'id'"),
        ({"id": "abc"}, "'id'"),
        ({"id": 1.5}, "'id'"),
        ({"machine_id": None}, "'machine_id'"),
        ({"dph_total": None}, "'dph_total'"),
        ({"dph_total": "NaN"}, "'dph_total'"),
        ({"dph_total": True}, "'dph_total'"),
    ],
)
def test_offer_rejects_unusable_with_field_name(patch, field):
    with pytest.raises(ModelError) as info:
        Offer.from_api(dict(FULL, **patch))
    assert field in str(info.value)


def test_offer_not_an_object():
    with pytest.raises(ModelError, match="not a JSON object"):
        Offer.from_api(["x"])  # type: ignore[arg-type]


def test_instance_ports_and_ssh_endpoint():
    raw = {
        "id": 7, "actual_status": "running", "public_ipaddr": "203.0.113.41\n",
        "ports": {"22/tcp": [{"HostIp": "0.0.0.0", "HostPort": "41022"}], "8080/udp": []},
        "ssh_host": "ssh7.vast.ai", "ssh_port": "34512", "extra_env": [["MIN_RATE", "29.0"]],
        "image_uuid": "img:1", "cpu_ram": 256000,
    }  # fmt: skip
    inst = Instance.from_api(raw)
    assert inst.ports == {22: 41022}
    assert inst.ssh_endpoint() == ("203.0.113.41", 41022)
    assert inst.ssh_command() == "ssh -p 41022 root@203.0.113.41"
    assert inst.env == {"MIN_RATE": "29.0"} and inst.image == "img:1"
    assert inst.cpu_ram_gb == 256.0
    proxy = Instance.from_api(dict(raw, ports=None, public_ipaddr=None))
    assert proxy.ssh_endpoint() == ("ssh7.vast.ai", 34512)
    assert Instance.from_api({"id": 8}).ssh_endpoint() is None


def test_parse_host_ports_tolerates_junk():
    assert parse_host_ports([1, 2]) == {}
    assert parse_host_ports({"22/tcp": [{"HostPort": "99999"}], "x/tcp": []}) == {}


def test_ssh_key_reads_either_field_name():
    assert SshKey.from_api({"id": 1, "key": "ssh-ed25519 AAAA c"}).material() == (
        "ssh-ed25519",
        "AAAA",
    )
    assert SshKey.from_api({"id": "2", "public_key": "ssh-ed25519 BBBB"}).id == 2


def test_country_code():
    assert country_code("Texas, US") == "US"
    assert country_code("Somewhere") is None
    assert country_code(None) is None


@pytest.mark.parametrize("price", [5.0, -0.01, float("nan"), "0.01x", True])
def test_a_bandwidth_price_beyond_reason_is_unknown(price) -> None:
    offer = Offer.from_api(dict(FULL, inet_down_cost=price))
    assert offer.inet_down_cost is None and offer.inet_up_cost == 0.004


@pytest.mark.parametrize(
    ("uptime", "read"),
    [(12.5, 12.5), ("12.5", 12.5), (-3.0, None), (1e9, None), (float("nan"), None), ("x", None),
     (None, None)],
)  # fmt: skip
def test_an_uptime_beyond_reason_is_unknown(uptime: object, read: float | None) -> None:
    # what spend.running_since moves the running start back by: bounded, or not trusted
    assert Instance.from_api({"id": 9, "uptime_mins": uptime}).uptime_mins == read
