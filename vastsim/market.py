"""Deterministic generation of a simulated Vast.ai offer market.

Two layers, as on Vast: the *world* (hosts, their machines and the offers each machine publishes,
with hidden per-machine performance) is fixed by the world seed, so machine and offer ids stay the
same from run to run and the per-machine record keeps learning; the *market* of one moment
(:func:`market_moment`: which machines are listed, at what price) is drawn from a run's seed.
A world on its own (no market drawn) lists every machine at the generator's own prices.

Identifier ranges never overlap, so ids can not be confused:

* ``host_id``     6 digits  (100000-999999)  - the host's account id
* ``machine_id``  5 digits  (10000-99999)    - one physical machine
* offer ``id``    8 digits  (20000000-69999999), == ``ask_contract_id``
* ``bundle_id``   10 digits
* instance ids (``new_contract``) start at 7 digits and only grow: :mod:`vastsim.cloud`.

One file: one seeded generator, world then market, whose order of draws fixes every id and
price; outages are outages.py, hosting behaviour hosting.py.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")

HOST_ID_RANGE = (100_000, 999_999)
MACHINE_ID_RANGE = (10_000, 99_999)
OFFER_ID_RANGE = (20_000_000, 69_999_999)
BUNDLE_ID_RANGE = (1_000_000_000, 1_999_999_999)


@dataclass(frozen=True)
class GpuModel:
    name: str
    vram_mb: int
    compute_cap: int
    dph_lo: float  # $/h per GPU, on-demand: the range a moment's price is drawn in
    dph_hi: float
    tflops: float  # per GPU
    dlperf: float  # per GPU
    mem_bw: float  # GB/s
    max_power: float  # W
    # proofs/hour per GPU, ample RAM and CPU: the reference figure (see GPU_MODELS). The world's
    # hidden mean is this × a factor of the world seed (world_rate_mean), not this itself.
    rate_mean: float
    weight: float
    counts: tuple[tuple[int, float], ...]  # (gpus per machine, weight)
    blackwell: bool = False
    datacenter: bool = False


# Where the figures come from (../shared/reference/original-system.md §4, "Timings", and
# vast-api.md §3.3, §14):
#
# * rate_mean: no source measures cuzk PoRep C2 on any of these GPUs. original-system.md §4
#   (around its line 295) proposes, as an ASSUMPTION for a simulator, "a per-machine rate from
#   ~N(mean, 15%): PRO 4000 (24 GB) ~22; RTX 4090 ~32; RTX 5090 ~42; H100 ~40; PRO 6000
#   Blackwell ~48"; those five are its figures. RTX 5070 Ti 30: within the "~24-36 proofs/h"
#   that a vast-manager comment reports for rented boxes (the same section; the cuzk
#   measurements on a 5070 Ti are of an owned 512-754 GiB box). RTX 3090 18 and A100 26:
#   ASSUMPTION (no figure anywhere), below the 4090 and H100 as their generations are.
#   vastui's priors (vastui/engine/ranking.py DEFAULT_GPU_RATES) hold the same figures: the
#   world is made to differ from them per world seed (world_rate_mean).
# * dph_lo / dph_hi (on-demand $/h per GPU): the only sourced market price is the RTX 4090's,
#   $0.24/h on-demand ($0.12/h min_bid) in dstack issue #4026 (vast-api.md §14); vast-api.md
#   §3.3's example answer lists a 4090 at dph_base $0.32 (min_bid $0.18) and an 8× RTX PRO 4000
#   at $1.44 ($0.18 a GPU; "plausible placeholders, not captured data"). Both 4090 figures lie
#   in its range and the PRO 4000's in its own. Every other range is an ASSUMPTION.
GPU_MODELS: tuple[GpuModel, ...] = (
    GpuModel(
        "RTX 3090",
        24576,
        860,
        0.08,  # $/h range: ASSUMPTION
        0.18,
        35.6,
        21.0,
        936.0,
        350.0,
        18.0,  # proofs/h: ASSUMPTION
        1.0,
        ((1, 3), (2, 3), (4, 3), (8, 2)),
    ),
    GpuModel(
        "RTX 4090",
        24564,
        890,
        0.14,  # $/h range: ASSUMPTION; holds dstack #4026's $0.24 and vast-api.md §3.3's $0.32
        0.34,
        82.6,
        41.0,
        1008.0,
        450.0,
        32.0,  # proofs/h: original-system.md §4: ~32
        2.2,
        ((1, 3), (2, 3), (4, 3), (8, 3)),
    ),
    GpuModel(
        "RTX 5090",
        32607,
        1200,
        0.2,  # $/h range: ASSUMPTION
        0.48,
        104.8,
        55.0,
        1792.0,
        575.0,
        42.0,  # proofs/h: original-system.md §4: ~42
        1.6,
        ((1, 3), (2, 3), (4, 2), (8, 2)),
        blackwell=True,
    ),
    GpuModel(
        "RTX 5070 Ti",
        16303,
        1200,
        0.08,  # $/h range: ASSUMPTION
        0.18,
        43.9,
        24.0,
        896.0,
        300.0,
        30.0,  # proofs/h: in original-system.md §4's 24-36 on rented boxes
        0.9,
        ((1, 4), (2, 3), (4, 2)),
        blackwell=True,
    ),
    GpuModel(
        "RTX PRO 4000",
        24467,
        1200,
        0.1,  # $/h range: ASSUMPTION; holds vast-api.md §3.3's placeholder $0.18
        0.22,
        46.9,
        25.0,
        672.0,
        140.0,
        22.0,  # proofs/h: original-system.md §4: ~22
        0.8,
        ((1, 2), (2, 2), (4, 3), (8, 3)),
        blackwell=True,
    ),
    GpuModel(
        "RTX PRO 6000 WS",
        97887,
        1200,
        0.45,  # $/h range: ASSUMPTION
        1.0,
        126.0,
        68.0,
        1792.0,
        600.0,
        48.0,  # proofs/h: original-system.md §4: ~48
        0.8,
        ((1, 3), (2, 3), (4, 2), (8, 2)),
        blackwell=True,
    ),
    GpuModel(
        "H100 SXM",
        81559,
        900,
        1.55,  # $/h range: ASSUMPTION
        2.60,
        267.6,
        98.0,
        3352.0,
        700.0,
        40.0,  # proofs/h: original-system.md §4: ~40
        0.7,
        ((1, 1), (2, 1), (8, 6)),
        datacenter=True,
    ),
    GpuModel(
        "A100 SXM4",
        81920,
        800,
        0.65,  # $/h range: ASSUMPTION
        1.30,
        155.9,
        62.0,
        2039.0,
        400.0,
        26.0,  # proofs/h: ASSUMPTION
        0.5,
        ((1, 1), (2, 1), (4, 2), (8, 4)),
        datacenter=True,
    ),
)
GPU_BY_NAME = {m.name: m for m in GPU_MODELS}

RAM_CLASSES_GIB = (128, 256, 384, 512, 768, 1024)
# RAM class weights by GPUs per machine.
_RAM_WEIGHTS = {
    1: (5, 4, 1, 1, 0, 0),
    2: (3, 4, 2, 2, 1, 0),
    4: (1, 3, 3, 3, 2, 1),
    8: (0, 1, 2, 4, 3, 3),
}

# (name, vCPUs, GHz)
CPUS: tuple[tuple[str, int, float], ...] = (
    ("AMD Ryzen 7 5800X 8-Core Processor", 16, 3.8),
    ("AMD Ryzen 9 5950X 16-Core Processor", 32, 3.4),
    ("AMD Ryzen 9 7950X 16-Core Processor", 32, 4.5),
    ("Intel Core i9-13900K", 32, 3.0),
    ("AMD EPYC 7443P 24-Core Processor", 48, 2.85),
    ("AMD EPYC 7543 32-Core Processor", 64, 2.8),
    ("AMD EPYC 7543 32-Core Processor", 128, 2.8),
    ("AMD EPYC 9354 32-Core Processor", 128, 3.25),
    ("AMD EPYC 7B13 64-Core Processor", 128, 2.45),
    ("AMD EPYC 9654 96-Core Processor", 192, 2.4),
    ("AMD Ryzen Threadripper PRO 7995WX 96-Cores", 192, 2.5),
    ("Intel Xeon Platinum 8480+", 224, 2.0),
    ("AMD EPYC 7763 64-Core Processor", 256, 2.45),
)
_CPU_WEIGHTS = {
    1: (3, 4, 3, 2, 1, 1, 0, 0, 0, 0, 0, 0, 0),
    2: (1, 3, 3, 2, 2, 2, 1, 0, 0, 0, 0, 0, 0),
    4: (0, 1, 1, 0, 2, 3, 3, 2, 2, 1, 1, 0, 0),
    8: (0, 0, 0, 0, 0, 1, 3, 3, 3, 3, 2, 2, 2),
}

# (geolocation, geolocode)
LOCATIONS: tuple[tuple[str, int], ...] = (
    ("Texas, US", 840048),
    ("Oregon, US", 840041),
    ("California, US", 840006),
    ("Virginia, US", 840051),
    ("Utah, US", 840049),
    ("New York, US", 840036),
    ("Quebec, CA", 124024),
    ("Ontario, CA", 124035),
    ("Bavaria, DE", 276009),
    ("Hesse, DE", 276006),
    ("Poland, PL", 616000),
    ("Taiwan, TW", 158000),
    ("North Holland, NL", 528007),
    ("Sweden, SE", 752000),
    ("Czechia, CZ", 203000),
    ("Tokyo, JP", 392013),
    ("Norway, NO", 578000),
    ("Romania, RO", 642000),
    ("Spain, ES", 724000),
    ("Finland, FI", 246000),
    ("Iceland, IS", 352000),
    ("Bulgaria, BG", 100000),
    ("South Korea, KR", 410000),
    ("England, GB", 826001),
)
_LOCATION_WEIGHTS = (8, 5, 5, 3, 2, 2, 3, 2, 3, 2, 3, 2, 2, 2, 2, 1, 1, 2, 1, 1, 1, 1, 1, 2)

CUDA_DRIVERS = {
    12.4: "550.127.05",
    12.8: "570.124.06",
    13.0: "580.82.07",
    13.1: "590.44.01",
}


def driver_vers_int(version: str) -> int:
    parts = [int(p) for p in version.split(".")]
    while len(parts) < 3:
        parts.append(0)
    return parts[0] * 1_000_000 + parts[1] * 1_000 + parts[2]


# Per-GPU RAM (GiB) → share of the full rate: cuzk pipelines as many partitions as memory
# allows (original-system.md §4 table: 128 GiB 152 s/proof, 256 GiB 53 s, 384 GiB 43 s, 512+ 38 s).
# Calibrated so that the typical machine of each RAM class of the ranking's prior
# (vastui/engine/ranking.py), with its typical CPU share (cpu_factor), does the share of its
# model's rate that the prior's RAM factor expects: the prior's RAM shape is honest and each
# machine's error is its own, so what the ranking learns from measured peers does not drift
# below the truth. The model's level is another matter: the world's mean per model is off the
# prior's by the world's own factor (world_rate_mean).
RAM_CURVE: tuple[tuple[float, float], ...] = (
    (0.0, 0.0), (64.0, 0.1), (128.0, 0.32), (192.0, 0.72), (256.0, 0.82), (384.0, 0.97),
    (512.0, 1.0),
)  # fmt: skip


def ram_factor(ram_gib_per_gpu: float) -> float:
    """Share of the full rate that this much RAM per GPU allows (piecewise linear)."""
    if ram_gib_per_gpu >= RAM_CURVE[-1][0]:
        return 1.0
    for (x0, y0), (x1, y1) in itertools.pairwise(RAM_CURVE):
        if x0 <= ram_gib_per_gpu <= x1:
            return y0 + (y1 - y0) * (ram_gib_per_gpu - x0) / (x1 - x0)
    return 0.0


def cpu_factor(cores_per_gpu: float) -> float:
    """Synthesis is CPU work: below 32 vCPUs per GPU the GPU waits (16 → 0.8, 8 → 0.7).

    The ranking does not model it: CPU-starved slices are the market's slow surprises."""
    return min(1.0, 0.6 + 0.4 * cores_per_gpu / 32.0)


@dataclass
class Machine:
    """One physical machine. ``perf``/``base_rate`` are hidden (never sent over the API)."""

    machine_id: int
    host_id: int
    gpu_name: str
    num_gpus: int
    gpu_ram: int
    ram_gib: int
    cpu_cores: int
    cpu_name: str
    geolocation: str
    reliability: float
    base_rate: float  # proofs/hour per GPU with ample RAM and CPU
    perf: dict[str, float] = field(default_factory=dict)
    offers: list[dict[str, Any]] = field(default_factory=list)

    def rate_for(self, num_gpus: int | None = None) -> float:
        """Expected proofs/hour of a slice of ``num_gpus`` GPUs of this machine.

        RAM and CPU cores are allocated in proportion to the GPU share, so the per-GPU
        RAM and cores are the machine's per-GPU amounts.
        """
        n = self.num_gpus if num_gpus is None else num_gpus
        per_gpu_ram = self.ram_gib / self.num_gpus
        per_gpu_cores = self.cpu_cores / self.num_gpus
        return n * self.base_rate * ram_factor(per_gpu_ram) * cpu_factor(per_gpu_cores)


# The world's hidden mean rate of a GPU model is the reference figure (GpuModel.rate_mean, the
# same as vastui's prior) times a factor drawn per (world seed, model) in this range: a neutral
# world, in which vastui's priors are wrong by up to ±25 %, differently on each world seed.
RATE_FACTOR_RANGE = (0.75, 1.25)


def world_rate_factor(world_seed: int, gpu_name: str) -> float:
    """The factor between a GPU model's reference rate and this world's hidden mean for it:
    uniform in RATE_FACTOR_RANGE, from dice of its own (the rest of the world, drawn from the
    world seed's main stream, does not move with it)."""
    return random.Random(f"rate:{world_seed}:{gpu_name}").uniform(*RATE_FACTOR_RANGE)


def world_rate_mean(world_seed: int, model: GpuModel) -> float:
    """The world's hidden mean proofs/hour per GPU of ``model`` (ample RAM and CPU); each
    machine's ``base_rate`` is drawn around it, N(mean, 15 %) (original-system.md §4)."""
    return model.rate_mean * world_rate_factor(world_seed, model.name)


def _unique(rng: random.Random, used: set[int], lo: int, hi: int) -> int:
    while True:
        v = rng.randint(lo, hi)
        if v not in used:
            used.add(v)
            return v


def _weighted(rng: random.Random, items: Sequence[T], weights: Sequence[float]) -> T:
    return rng.choices(items, weights=weights, k=1)[0]


def _count_bucket(n: int) -> int:
    return 1 if n <= 1 else 2 if n <= 2 else 4 if n <= 4 else 8


def price_fields(offer: dict[str, Any], allocated_storage: float, mode: str = "on-demand") -> None:
    """(Re)compute the price-derived fields of ``offer`` in place.

    ``storage_total_cost = allocated_storage * storage_cost / 720`` and
    ``dph_total = dph_base + storage_total_cost`` (``min_bid`` replaces ``dph_base`` for bids).
    """
    storage_total = allocated_storage * offer["storage_cost"] / 720.0
    gpu_part = offer["min_bid"] if mode == "bid" else offer["dph_base"]
    dph_total = gpu_part + storage_total
    discounted = dph_total * (1.0 - offer["discount_rate"])
    offer["storage_total_cost"] = round(storage_total, 7)
    offer["dph_total"] = round(dph_total, 7)
    offer["dph_total_adj"] = offer["dph_total"]
    offer["discounted_dph_total"] = round(discounted, 7)
    offer["is_bid"] = mode == "bid"
    offer["dlperf_per_dphtotal"] = round(offer["dlperf"] / dph_total, 3) if dph_total else 0.0
    offer["flops_per_dphtotal"] = round(offer["total_flops"] / dph_total, 3) if dph_total else 0.0
    offer["score"] = round(offer["dlperf_per_dphtotal"] * offer["reliability"] ** 4, 3)
    breakdown = {
        "gpuCostPerHour": round(gpu_part, 7),
        "diskHour": offer["storage_total_cost"],
        "totalHour": offer["dph_total"],
        "discountTotalHour": round(dph_total - discounted, 7),
        "discountedTotalPerHour": offer["discounted_dph_total"],
    }
    offer["search"] = dict(breakdown)
    offer["instance"] = dict(breakdown)


def slice_price(dph_per_gpu: float, num_gpus: int) -> float:
    """$/h of a slice: a small discount per doubling of GPUs."""
    return round(dph_per_gpu * num_gpus * (1.0 - 0.01 * math.log2(num_gpus)), 4)


def _make_machine(
    rng: random.Random,
    host_id: int,
    host_loc: tuple[str, int],
    host_ip: str,
    used_machine: set[int],
    used_offer: set[int],
    used_bundle: set[int],
    clock_now: float,
    rate_means: dict[str, float],
) -> Machine:
    model = _weighted(rng, GPU_MODELS, [m.weight for m in GPU_MODELS])
    counts, cweights = zip(*model.counts, strict=True)
    n_gpus = _weighted(rng, counts, cweights)
    bucket = _count_bucket(n_gpus)
    ram_gib = _weighted(rng, RAM_CLASSES_GIB, _RAM_WEIGHTS[bucket])
    cpu_name, cpu_cores, cpu_ghz = _weighted(rng, CPUS, _CPU_WEIGHTS[bucket])
    machine_id = _unique(rng, used_machine, *MACHINE_ID_RANGE)

    if model.blackwell:
        cuda = rng.choice((12.8, 12.8, 13.0, 13.1))
    else:
        cuda = rng.choice((12.4, 12.8, 12.8, 13.0, 13.1))
    driver = CUDA_DRIVERS[cuda]
    reliability = round(1.0 - 10 ** rng.uniform(math.log10(0.0005), math.log10(0.10)), 4)
    verification = _weighted(rng, ("verified", "unverified", "deverified"), (86, 10, 4))
    vericode = {"verified": 1, "unverified": 0, "deverified": -1}[verification]
    inet_down = round(10 ** rng.uniform(math.log10(50), math.log10(10000)), 1)
    inet_up = round(inet_down * rng.uniform(0.3, 1.0), 1)
    dph_per_gpu = rng.uniform(model.dph_lo, model.dph_hi)
    storage_cost = round(rng.uniform(0.05, 0.30), 3)
    disk_total = round(rng.uniform(400, 1200) * max(1, n_gpus) ** 0.8, 1)
    disk_bw = round(rng.uniform(800, 7000), 1)
    inet_cost = round(rng.uniform(0.0, 0.02), 4)
    direct_ports = rng.choice((0, 20, 50, 100, 199, 500, 1000))
    static_ip = rng.random() < 0.7
    pci_gen = float(rng.choice((3, 4, 4, 5)))
    lanes = rng.choice((8, 16, 16))
    start_date = round(clock_now - rng.uniform(1, 200) * 86400, 2)
    end_date = round(clock_now + rng.uniform(3, 120) * 86400, 2)
    external = rng.random() < 0.03
    hosting_type = 1 if (model.datacenter or rng.random() < 0.2) else 0
    discount_rate = round(rng.uniform(0.1, 0.4), 3)
    bid_factor = rng.uniform(0.4, 0.75)
    vms_enabled = rng.random() < 0.3
    os_version = rng.choice(("20.04", "22.04", "22.04", "24.04"))

    draw = max(0.3, rng.gauss(1.0, 0.15))
    mean = rate_means[model.name]
    base_rate = mean * draw
    per_gpu_ram = ram_gib / n_gpus
    per_gpu_cores = cpu_cores / n_gpus
    perf = {
        "base_rate": base_rate,
        "model_mean": mean,
        "reference_mean": model.rate_mean,
        "draw": draw,
        "ram_factor": ram_factor(per_gpu_ram),
        "cpu_factor": cpu_factor(per_gpu_cores),
    }

    machine = Machine(
        machine_id=machine_id,
        host_id=host_id,
        gpu_name=model.name,
        num_gpus=n_gpus,
        gpu_ram=model.vram_mb,
        ram_gib=ram_gib,
        cpu_cores=cpu_cores,
        cpu_name=cpu_name,
        geolocation=host_loc[0],
        reliability=reliability,
        base_rate=base_rate,
        perf=perf,
    )

    slices = [s for s in (1, 2, 4, 8) if s < n_gpus]
    chosen = [s for s in slices if rng.random() < 0.8] + [n_gpus]
    ram_mb = int(ram_gib * 1024 * 0.984)
    for s in chosen:
        frac = s / n_gpus
        offer_id = _unique(rng, used_offer, *OFFER_ID_RANGE)
        dph_base = slice_price(dph_per_gpu, s)
        offer: dict[str, Any] = {
            "id": offer_id,
            "ask_contract_id": offer_id,
            "bundle_id": _unique(rng, used_bundle, *BUNDLE_ID_RANGE),
            "bundled_results": None,
            "machine_id": machine_id,
            "host_id": host_id,
            "gpu_name": model.name,
            "num_gpus": s,
            "gpu_ram": model.vram_mb,
            "gpu_total_ram": model.vram_mb * s,
            "gpu_frac": round(frac, 4),
            "gpu_arch": "nvidia",
            "compute_cap": model.compute_cap,
            "cuda_max_good": cuda,
            "driver_version": driver,
            "driver_vers": driver_vers_int(driver),
            "cpu_name": cpu_name,
            "cpu_arch": "amd64",
            "cpu_cores": cpu_cores,
            "cpu_cores_effective": round(cpu_cores * frac, 1),
            "cpu_ghz": cpu_ghz,
            "cpu_ram": int(ram_mb * frac),
            "disk_space": round(disk_total * frac, 1),
            "disk_bw": disk_bw,
            "disk_name": rng.choice(
                ("Samsung SSD 990 PRO 4TB", "SAMSUNG MZQL27T6HBLA", "WD_BLACK SN850X")
            ),
            "inet_up": inet_up,
            "inet_down": inet_down,
            "inet_up_cost": inet_cost,
            "inet_down_cost": inet_cost,
            "internet_up_cost_per_tb": round(inet_cost * 1000, 2),
            "internet_down_cost_per_tb": round(inet_cost * 1000, 2),
            "direct_port_count": direct_ports,
            "static_ip": static_ip,
            "public_ipaddr": host_ip,
            "pci_gen": pci_gen,
            "pcie_bw": round({3.0: 11.5, 4.0: 23.4, 5.0: 47.1}[pci_gen] * lanes / 16, 1),
            "gpu_lanes": lanes,
            "gpu_mem_bw": model.mem_bw,
            "bw_nvlink": 900.0 if model.name == "H100 SXM" else 0.0,
            "dph_base": dph_base,
            "storage_cost": storage_cost,
            "storage_total_cost": 0.0,
            "dph_total": 0.0,
            "dph_total_adj": 0.0,
            "min_bid": round(dph_base * bid_factor, 4),
            "discounted_dph_total": 0.0,
            "discount_rate": discount_rate,
            "dlperf": round(model.dlperf * s * rng.uniform(0.9, 1.05), 2),
            "dlperf_per_dphtotal": 0.0,
            "total_flops": round(model.tflops * s, 1),
            "flops_per_dphtotal": 0.0,
            "score": 0.0,
            "reliability": reliability,
            "reliability2": reliability,
            "verification": verification,
            "vericode": vericode,
            "rentable": True,
            "rented": False,
            "is_bid": False,
            "external": external,
            "hosting_type": hosting_type,
            "geolocation": host_loc[0],
            "geolocode": host_loc[1],
            "duration": round(end_date - clock_now, 1),
            "start_date": start_date,
            "end_date": end_date,
            "time_remaining": None,
            "time_remaining_isbid": None,
            "os_version": os_version,
            "mobo_name": rng.choice(("H12SSL-i", "ROMED8-2T", "MZ73-LM0", "PRO WS WRX90E-SAGE SE")),
            "has_avx": 1,
            "vms_enabled": vms_enabled,
            "gpu_display_active": False,
            "gpu_max_power": model.max_power,
            "gpu_max_temp": float(rng.choice((83, 85, 87, 90))),
            "cluster_id": None,
            "avail_vol_ask_id": None,
            "avail_vol_dph": None,
            "avail_vol_size": None,
            "nw_disk_min_bw": None,
            "nw_disk_max_bw": None,
            "nw_disk_avg_bw": None,
            "resource_type": "gpu",
            "rn": None,
            "search": {},
            "instance": {},
        }
        price_fields(offer, 5.0)
        machine.offers.append(offer)
    return machine


def generate_market(seed: int, *, hosts: int = 40, clock_now: float) -> list[Machine]:
    """Generate ``hosts`` hosts with 1-5 machines each, 1-4 offers per machine.

    Deterministic for a given ``seed`` (and ``clock_now``, which only shifts dates). The seed
    is the world seed: it also sets each GPU model's hidden mean rate (world_rate_mean).
    """
    rng = random.Random(seed)
    rate_means = {m.name: world_rate_mean(seed, m) for m in GPU_MODELS}
    used_host: set[int] = set()
    used_machine: set[int] = set()
    used_offer: set[int] = set()
    used_bundle: set[int] = set()
    max_machines = MACHINE_ID_RANGE[1] - MACHINE_ID_RANGE[0] + 1
    machines: list[Machine] = []
    for _ in range(hosts):
        host_id = _unique(rng, used_host, *HOST_ID_RANGE)
        loc = _weighted(rng, LOCATIONS, _LOCATION_WEIGHTS)
        ip = ".".join(
            str(x)
            for x in (
                rng.choice((198, 203)),
                rng.choice((51, 0)),
                rng.randint(0, 255),
                rng.randint(1, 254),
            )
        )
        n_machines = _weighted(rng, (1, 2, 3, 4, 5), (2, 3, 3, 2, 1))
        for _m in range(n_machines):
            if len(used_machine) >= max_machines * 0.9:
                break
            machines.append(
                _make_machine(
                    rng,
                    host_id,
                    loc,
                    ip,
                    used_machine,
                    used_offer,
                    used_bundle,
                    clock_now,
                    rate_means,
                )
            )
    return machines


# The market of a moment: about a third of the world's machines are rented by someone else or
# offline, and the listed ones ask this moment's price: drawn in the GPU model's range, skewed to
# the cheap end (most hosts compete on price, few ask a premium), so some offers pay off at the
# default $0.008/proof, some are marginal, most do not. A machine's hidden fault does not move
# its price: no source says faulty machines ask less.
LISTED_SHARE = 0.65
PRICE_SKEW = 2.0


def machine_fault_rng(world_seed: int, machine_id: int) -> random.Random:
    """The machine's own fault dice: the first draw decides whether (and which) fault it has
    (vastsim.workers.FAULTS, lowest draws first); a property of the machine, not of a run."""
    return random.Random(world_seed * 1_000_003 + machine_id)


def market_moment(
    machines: list[Machine], seed: int, world_seed: int, *, listed_share: float = LISTED_SHARE
) -> dict[int, float | None]:
    """For each machine id: its $/h per GPU in this market, or ``None`` (not listed now).

    Drawn per machine from ``(seed, machine_id)``: the same seed gives the same market whatever
    the world's order, another seed another market. ``world_seed`` no longer moves a price (a
    machine's hidden fault once discounted it, with no source); kept for the callers.
    """
    moment: dict[int, float | None] = {}
    for m in machines:
        model = GPU_BY_NAME[m.gpu_name]
        rng = random.Random(f"market:{seed}:{m.machine_id}")
        listed = rng.random() < listed_share
        price = model.dph_lo + (model.dph_hi - model.dph_lo) * rng.random() ** PRICE_SKEW
        moment[m.machine_id] = price if listed else None
    return moment


def reprice(machine: Machine, dph_per_gpu: float) -> None:
    """Set the asking price of a machine's offers (storage and bandwidth keep theirs)."""
    for offer in machine.offers:
        ratio = offer["min_bid"] / offer["dph_base"] if offer["dph_base"] else 0.5
        offer["dph_base"] = slice_price(dph_per_gpu, offer["num_gpus"])
        offer["min_bid"] = round(offer["dph_base"] * ratio, 4)
        price_fields(offer, 5.0)
