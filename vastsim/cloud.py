"""State of the simulated Vast.ai cloud: market, instances, account and faults.

The HTTP layer (:mod:`vastsim.app`) calls the plain methods here; errors are raised as
:class:`ApiError` carrying the exact HTTP status and JSON body of vast-api.md.
Instance state is derived lazily from the clock: no background task is needed.

One file: the cloud's state is one object under one clock (every endpoint reads and changes the
same instances, machines, bids and credit); the market, bids, outages, faults, the worker
fleet and HTTP are their own modules.
"""

from __future__ import annotations

import base64
import hashlib
import inspect
import itertools
import json
import logging
import math
import random
import re
import shlex
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from vastsim.bids import BidMarket
from vastsim.clock import ManualClock, ScaledClock, SimClock
from vastsim.faults import Faults
from vastsim.fleet import FleetFaults, familiar, pull_error_text
from vastsim.market import Machine, generate_market, market_moment, price_fields, reprice
from vastsim.query_eval import (
    QueryError,
    check_condition,
    search_offers,
    sort_rows,
    validate_conditions,
)

log = logging.getLogger(__name__)

MAX_LABEL = 1024
PAGE_MAX = 25
# A reboot (docker stop, then start) takes this long, simulated seconds: stopping ...
REBOOT_STOP = (5.0, 15.0)
# ... then starting the container again (no image pull).
REBOOT_START = (5.0, 20.0)
QUEUED_MSG = "Required resources are currently unavailable, state change queued."
# The sim's text for an instance paused by a higher bid (Vast's own text is not documented).
OUTBID_MSG = "Outbid: stopped until its bid wins again."
BULK_MAX = 64  # ids per bulk start/stop (vast-api.md §7: "chunk length of N > 64")
FORCEABLE = frozenset({"exited", "offline", "unknown", "running", "loading"})

# Columns of the instance table that v1 `select_filters`/`order_by` accept; everything
# else (dph_total, uptime_mins, reliability2, ...) is computed -> 400.
STORED_COLUMNS = frozenset(
    {
        "id",
        "machine_id",
        "host_id",
        "bundle_id",
        "actual_status",
        "intended_status",
        "cur_state",
        "next_state",
        "status_msg",
        "label",
        "image_uuid",
        "image_runtype",
        "gpu_name",
        "num_gpus",
        "gpu_ram",
        "cpu_ram",
        "cpu_cores_effective",
        "disk_space",
        "geolocation",
        "verification",
        "start_date",
        "end_date",
        "is_bid",
        "template_id",
        "template_hash_id",
        "ssh_port",
        "public_ipaddr",
    }
)


class ApiError(Exception):
    """An error answer: HTTP ``status`` with JSON ``body``."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        super().__init__(body.get("msg") or body.get("error") or str(status))
        self.status = status
        self.body = body


def _err(status: int, error: str, msg: str, **extra: Any) -> ApiError:
    return ApiError(status, {"success": False, "error": error, "msg": msg, **extra})


def no_such_instance(instance_id: int) -> ApiError:
    return _err(404, "no_such_instance", f"Instance {instance_id} not found.")


@dataclass
class Charge:
    """What one instance was billed, kept after its destroy (``GET /api/v0/charges/``, vastai
    api/billing.py show_invoices_v1): GPU time while running, storage otherwise, and the bytes
    its container sent and received at the offer's $/GB (``inet_up_cost``/``inet_down_cost``,
    vast-api.md §3), metered at its network interface."""

    instance_id: int
    start: float
    end: float
    gpu: float = 0.0
    storage: float = 0.0
    bw_down: float = 0.0
    bw_up: float = 0.0
    rx_bytes: int = 0
    tx_bytes: int = 0
    # the container's interface counters at the last bill (a new container starts at 0)
    seen_rx: int = 0
    seen_tx: int = 0

    @property
    def amount(self) -> float:
        return self.gpu + self.storage + self.bw_down + self.bw_up

    def to_api(self) -> dict[str, Any]:
        def item(kind: str, amount: float, description: str) -> dict[str, Any]:
            return {
                "type": kind, "source": None, "amount": round(amount, 6),
                "start": round(self.start, 2), "end": round(self.end, 2),
                "description": description, "items": [],
            }  # fmt: skip

        return {
            "type": "instance",
            "source": f"instance-{self.instance_id}",
            "amount": round(self.amount, 6),
            "start": round(self.start, 2),
            "end": round(self.end, 2),
            "description": f"Instance {self.instance_id}",
            "items": [
                item("gpu", self.gpu, "GPU time"),
                item("storage", self.storage, "Storage"),
                item("bandwidth", self.bw_down, f"Download {self.rx_bytes / 1e9:.3f} GB"),
                item("bandwidth", self.bw_up, f"Upload {self.tx_bytes / 1e9:.3f} GB"),
            ],
        }


@dataclass
class SimInstance:
    id: int
    offer_id: int
    machine: Machine
    offer: dict[str, Any]  # priced copy of the offer at create time
    created_at: float
    t_loading: float
    t_running: float
    image: str | None
    template_hash_id: str | None
    env: dict[str, str]
    onstart: str | None
    runtype: str
    args: list[str]
    disk: float
    label: str | None
    api_key: str
    jupyter_token: str
    ssh_port: int
    intended: str = "running"
    cur_state: str = "running"
    next_state: str = "running"
    forced_status: str | None = None
    fail: tuple[str, float] | None = None  # (status, seconds after running)
    notified_running: bool = False
    last_billed: float = 0.0
    ssh_keys: list[dict[str, Any]] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)
    extra_log: list[tuple[float, str]] = field(default_factory=list)
    start_unavailable: bool = False
    stopped_at: float | None = None
    # The offer's GPUs are this instance's (False: created stopped while another tenant held
    # them; destroying it then gives nothing back to the market).
    holds_offer: bool = True
    queued: bool = False  # created stopped, its start queued until the offer's GPUs are free
    rebooting_until: float | None = None  # a reboot: "rebooting" until then, then loading
    rebooted: bool = False
    # Proxy first, direct later (SimCloud direct_ssh_after): the direct port, reported this
    # many simulated seconds after running; None: no direct port (proxy only).
    split_ssh: bool = False
    direct_port: int | None = None
    direct_after: float = 0.0
    # Fleet faults (vastsim/fleet.py), decided when the image is pulled: the registry's
    # error (the instance stays loading with it), an image whose benchmark input is broken.
    pull_error: str | None = None
    broken_bench_input: bool = False
    # Interruptible (bid) instances: the bid ($/h for the slice), the offer's floor
    # (min_bid with no other bidder: vastsim/bids.py), since when a higher bid has it
    # paused (None: running or not a bid) and how often that happened after it first ran.
    bid_price: float | None = None
    bid_floor: float = 0.0
    outbid_since: float | None = None
    interruptions: int = 0


def _bill_bid(offer: dict[str, Any], price: float) -> None:
    """Pay-as-bid: the bid replaces the GPU part of the price; storage is the offer's."""
    offer["is_bid"] = True
    offer["dph_base"] = round(price, 7)
    offer["dph_total"] = round(price + offer["storage_total_cost"], 7)


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_env(env: Any) -> dict[str, str]:
    """Accept the object form (PKG) or a docker-flag string (OAS) of ``env``."""
    if env is None:
        return {}
    if isinstance(env, dict):
        return {str(k): "" if v is None else str(v) for k, v in env.items()}
    if isinstance(env, list):
        out: dict[str, str] = {}
        for item in env:
            if isinstance(item, (list, tuple)) and len(item) == 2:
                out[str(item[0])] = str(item[1])
        return out
    if isinstance(env, str):
        out = {}
        try:
            toks = shlex.split(env)
        except ValueError:
            toks = env.split()
        i = 0
        while i < len(toks):
            tok = toks[i]
            nxt = toks[i + 1] if i + 1 < len(toks) else ""
            if tok == "-e" and nxt:
                k, _, v = nxt.partition("=")
                out[k] = v
                i += 2
            elif tok in ("-p", "-v") and nxt:
                out[f"{tok} {nxt}"] = "1"
                i += 2
            elif tok == "-h" and nxt:
                out["-h"] = nxt
                i += 2
            else:
                i += 1
        return out
    raise _err(400, "invalid_args", "env must be an object")


def _encode_token(offset: int, sig: str) -> str:
    raw = json.dumps({"o": offset, "s": sig}).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_token(token: str, sig: str) -> int:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        data = json.loads(raw)
        offset = int(data["o"])
        if data["s"] != sig or offset < 0:
            raise ValueError
        return offset
    except Exception as exc:
        raise _err(400, "invalid_token", "Invalid after_token") from exc


def _json_param(params: dict[str, str], name: str, default: Any) -> Any:
    if name not in params or params[name] == "":
        return default
    raw = params[name]
    try:
        return json.loads(raw)
    except ValueError:
        return raw  # plain strings (e.g. after_token, limit=25) are allowed unencoded


class SimCloud:
    """The simulated cloud.

    Hooks: ``on_running`` (called once per instance, with its JSON, when first observed
    running; may be async), :meth:`fleet_fault` (vastsim/fleet.py), :meth:`force_status`,
    :meth:`force_resources_unavailable`, :meth:`set_metrics`, :meth:`append_log`,
    :meth:`authorized_keys`, :meth:`instances_snapshot`, :meth:`tick`.
    """

    def __init__(
        self,
        seed: int = 0,
        speed: float = 1.0,
        *,
        clock: SimClock | None = None,
        api_key: str = "sim-key",
        faults: str = "none",
        hosts: int = 40,
        ssh_port_allocator: Callable[[], int] | None = None,
        on_running: Callable[[dict[str, Any]], Awaitable[Any] | None] | None = None,
        credit: float = 100.0,
        world_seed: int | None = None,
        instance_ids_after: int | None = None,
        host_maintenance: float = 0.0,
        direct_ssh_after: tuple[float, float] | None = None,
        bid_pressure: float = 1.0,
    ) -> None:
        """``seed`` alone: the whole world of that seed is on the market at its own prices.
        With ``world_seed``: the machines (ids, hardware, hidden speed and faults) are that
        world's, and ``seed`` draws this run's market from it (which machines are listed, at
        what price; :func:`vastsim.market.market_moment`).

        ``instance_ids_after``: every instance id is above it (real ids only grow: a demo
        passes the highest id its database already holds). ``host_maintenance``: the scale of
        host outages (0: none; 1: the hazard each machine's listed reliability implies,
        vastsim/outages.py).

        ``direct_ssh_after``: as Vast does, a running instance shows its SSH proxy endpoint
        (``ssh_host``:``ssh_port``) at once and its direct port (``public_ipaddr`` +
        ``ports["22/tcp"]``) only this many simulated seconds later (a range to draw from), on
        a port of its own. None: one port, reported both ways as soon as it runs.

        ``bid_pressure`` scales how often other bidders come to a machine (vastsim/bids.py;
        0: nobody ever outbids an interruptible instance)."""
        self.seed = seed
        self.world_seed = seed if world_seed is None else world_seed
        # Vast's lists lag (vast-api.md): a new instance is missing from every list and its own
        # GET answers null for this many simulated seconds after its create. 0: none.
        self.list_lag_s = 0.0
        self.clock: SimClock = clock if clock is not None else ScaledClock(speed)
        self.speed = speed
        self.api_key = api_key
        self.faults = Faults(faults, seed)
        self.on_running = on_running
        self.rng = random.Random(seed * 31 + 5)
        self.host_maintenance = host_maintenance
        self.direct_ssh_after = direct_ssh_after
        self.machines: list[Machine] = generate_market(
            self.world_seed, hosts=hosts, clock_now=self.clock.now()
        )
        self.machines_by_id: dict[int, Machine] = {m.machine_id: m for m in self.machines}
        self.offers: dict[int, dict[str, Any]] = {}
        self.offer_machine: dict[int, Machine] = {}
        for m in self.machines:
            for o in m.offers:
                self.offers[o["id"]] = o
                self.offer_machine[o["id"]] = m
        self.available: set[int] = set(self.offers)
        self.bids = BidMarket(seed, self.clock.now(), bid_pressure)
        if world_seed is not None:
            self._open_market(seed)
        self.instances: dict[int, SimInstance] = {}
        if ssh_port_allocator is None:
            ports = itertools.count(42000)
            ssh_port_allocator = lambda: next(ports)  # noqa: E731
        self.alloc_port: Callable[[], int] = ssh_port_allocator
        self._next_instance_id = self.rng.randint(3_000_000, 3_400_000)
        if instance_ids_after is not None:
            self._next_instance_id = max(self._next_instance_id, instance_ids_after)
        self.user: dict[str, Any] = {
            "id": self.rng.randint(100_000, 999_999),
            "username": "sim-user",
            "email": "sim-user@example.invalid",
            "fullname": "Simulated User",
            "credit": float(credit),
            "balance": 0.0,
            "balance_threshold": 10.0,
            "balance_threshold_enabled": False,
            "can_pay": True,
            "has_billing": True,
            "email_verified": True,
            "billing_creditonly": False,
            "got_signup_credit": True,
        }
        self.ssh_keys: list[dict[str, Any]] = []
        self._next_key_id = self.rng.randint(40_000, 49_000)
        self._logs: dict[str, dict[str, Any]] = {}
        self._log_counter = 0
        # What happened, for /_sim/stats: a trial checks "one instance per label" exactly here
        # (polling the list misses an instance created and destroyed between two looks).
        self.instances_created = 0
        self.instances_destroyed = 0
        self.labels_created: Counter[str] = Counter()
        self.instance_faults_planned: Counter[str] = Counter()  # "exited"/"offline" drawn
        self.fleet = FleetFaults()  # fleet-wide faults: vastsim/fleet.py
        # What each instance was billed (kept after its destroy), and the meter of its
        # container's interface counters (set by the worker host: vastsim/workers.py).
        self.charges: dict[int, Charge] = {}
        self.net_meter: Callable[[int], tuple[int, int] | None] | None = None

    def _open_market(self, seed: int) -> None:
        """This run's market: the listed machines' offers, at this run's prices."""
        for machine_id, price in market_moment(self.machines, seed, self.world_seed).items():
            machine = self.machines_by_id[machine_id]
            if price is None:
                self.available.difference_update(o["id"] for o in machine.offers)
            else:
                reprice(machine, price)

    # ------------------------------------------------------------------ helpers
    def now(self) -> float:
        return self.clock.now()

    def _hex(self, nbits: int = 256) -> str:
        return f"{self.rng.getrandbits(nbits):0{nbits // 4}x}"

    def _get(self, instance_id: int) -> SimInstance:
        inst = self.instances.get(instance_id)
        if inst is None:
            raise no_such_instance(instance_id)
        return inst

    @property
    def available_offers(self) -> list[dict[str, Any]]:
        return [self.offers[i] for i in sorted(self.available)]

    # ------------------------------------------------------------------ lifecycle
    def status_of(
        self, inst: SimInstance, now: float | None = None
    ) -> tuple[str | None, str | None]:
        """``(actual_status, status_msg)`` at ``now``."""
        now = self.now() if now is None else now
        if inst.forced_status == "running":
            return "running", f"success, running {_runmsg(inst)}"
        if inst.forced_status is not None:
            return inst.forced_status, _forced_msg(inst.forced_status)
        if inst.queued:
            return "stopped", QUEUED_MSG
        if inst.outbid_since is not None:
            return "stopped", OUTBID_MSG
        if inst.intended == "stopped" or inst.cur_state == "stopped":
            return "exited", "Instance stopped."
        if inst.fail is not None and now >= inst.t_running + inst.fail[1]:
            return inst.fail[0], _forced_msg(inst.fail[0])
        if inst.rebooting_until is not None and now < inst.rebooting_until:
            return "rebooting", "Rebooting: stopping container"
        if now < inst.t_loading:
            return None, None
        if inst.pull_error is not None:
            # The pull failed: Vast shows the daemon's error and the instance stays loading.
            return "loading", inst.pull_error
        if now < inst.t_running and inst.rebooted:
            return "loading", "Starting container"
        if now < inst.t_running:
            frac = (now - inst.t_loading) / max(1e-9, inst.t_running - inst.t_loading)
            image = inst.image or "template image"
            if frac < 0.75:
                n = 9
                done = int(n * frac / 0.75)
                return "loading", f"Pulling {image}: {int(100 * frac / 0.75)}% ({done}/{n} layers)"
            if frac < 0.9:
                return "loading", f"Extracting {image}"
            return "loading", "Creating container"
        return "running", f"success, running {_runmsg(inst)}"

    async def fleet_fault(self, name: str, on: bool = True, **params: Any) -> dict[str, Any]:
        """Switch a fleet-wide fault on (with its parameters) or off, for every machine
        (vastsim/fleet.py: ``image_missing``, ``bench_input_broken``, ``controller_down``);
        returns every fleet fault's state. Raises :class:`vastsim.fleet.FleetFaultError`."""
        state = await self.fleet.switch(name, on, self.now(), **params)
        log.info("fleet fault %s %s", name, "on" if on else "off")
        return state

    def pull_error(self, image: str | None) -> str | None:
        """The registry's error for a pull of ``image`` now (None: it pulls). Open registry:
        only ``image_missing`` makes an image missing."""
        params = self.fleet.params("image_missing")
        if image is None or params is None:
            return None  # a template's image, or every image there
        images = params.get("images")
        if images is not None and familiar(image)[1] not in images:
            return None
        return pull_error_text(image, params.get("error", "manifest_unknown"))

    async def tick(self) -> None:
        """Evaluate lifecycles: bill usage and fire ``on_running`` for new runners."""
        now = self.now()
        self._start_queued(now)
        self._settle_bids(now)
        for inst in list(self.instances.values()):
            status, _ = self.status_of(inst, now)
            self._bill(inst, status, now)
            if status == "running" and not inst.notified_running:
                inst.notified_running = True
                if self.on_running is not None:
                    try:
                        res = self.on_running(self.render(inst, now))
                        if inspect.isawaitable(res):
                            await res
                    except Exception:  # a hook must never break the API
                        log.exception("on_running hook failed for instance %s", inst.id)

    def _bill(self, inst: SimInstance, status: str | None, now: float) -> None:
        since = inst.last_billed
        inst.last_billed = now
        charge = self.charges.setdefault(inst.id, Charge(inst.id, inst.created_at, now))
        charge.end = max(charge.end, now)
        # storage until the container runs, the GPU from then on (split where it began)
        ran = max(since, min(now, inst.t_running)) if status == "running" else now
        storage = inst.offer["storage_total_cost"] * max(0.0, ran - since) / 3600.0
        gpu = inst.offer["dph_total"] * max(0.0, now - ran) / 3600.0
        charge.storage += storage
        charge.gpu += gpu
        amount = storage + gpu + self._bill_network(inst, charge)
        self.user["credit"] = round(self.user["credit"] - amount, 6)

    def _bill_network(self, inst: SimInstance, charge: Charge) -> float:
        """The bytes the container moved since the last bill, at the offer's $/GB."""
        counters = self.net_meter(inst.id) if self.net_meter is not None else None
        if counters is None:
            return 0.0
        rx, tx = counters
        # a counter below the last one is a new container's (a restart): all of it is new
        d_rx = rx - charge.seen_rx if rx >= charge.seen_rx else rx
        d_tx = tx - charge.seen_tx if tx >= charge.seen_tx else tx
        charge.seen_rx, charge.seen_tx = rx, tx
        down = d_rx / 1e9 * float(inst.offer.get("inet_down_cost") or 0.0)
        up = d_tx / 1e9 * float(inst.offer.get("inet_up_cost") or 0.0)
        charge.rx_bytes += d_rx
        charge.tx_bytes += d_tx
        charge.bw_down += down
        charge.bw_up += up
        return down + up

    def charges_list(self) -> dict[str, Any]:
        """``GET /api/v0/charges/``: one row per instance, newest last (the sim keeps every
        row; Vast pages them, 100 at most)."""
        rows = [c.to_api() for c in sorted(self.charges.values(), key=lambda c: c.start)]
        return {"results": rows, "count": len(rows), "total": len(rows), "next_token": None}

    # ------------------------------------------------------------------ search
    def search(self, query: Any, select_cols: Any = None) -> dict[str, Any]:
        now = self.now()
        try:
            views = (self._bid_view(self.offers[i], now) for i in self.available)
            # A bidder above the on-demand price stands for an on-demand renter (bids.py):
            # the machine is rented, not listed.
            offers = search_offers(query, (o for o in views if o["min_bid"] < o["dph_base"]))
        except QueryError as e:
            raise ApiError(e.status, e.body) from e
        if isinstance(select_cols, list) and select_cols and "*" not in select_cols:
            offers = [{c: o.get(c) for c in select_cols} for o in offers]
        return {"offers": offers}

    # ------------------------------------------------------------------ create
    def create(self, offer_id: int, body: Any, *, fault_hint: str | None = None) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise _err(400, "invalid_args", "Invalid request body", ask_id=offer_id)
        if offer_id not in self.offers:
            raise _err(
                404, "no_such_ask", f"No ask by id {offer_id} is available.", ask_id=offer_id
            )
        # The offer's GPUs rented by another (here: by another instance of this account): with
        # cancel_unavail false Vast creates the instance stopped, its start queued (vast-api.md
        # §4, AUTO); absent, the ask is simply gone (404), true asks for the 410.
        queued = False
        if offer_id not in self.available:
            if self.offers[offer_id].get("rented") and body.get("cancel_unavail") is False:
                queued = True
            elif body.get("cancel_unavail"):
                raise _err(
                    410,
                    "no_such_ask",
                    f"Instance type {offer_id} is no longer available.",
                    ask_id=offer_id,
                )
            else:
                raise _err(
                    404, "no_such_ask", f"No ask by id {offer_id} is available.", ask_id=offer_id
                )
        image = body.get("image")
        template = body.get("template_hash_id")
        if not image and not template:
            raise _err(
                400, "invalid_args", "'image' or 'template_hash_id' is required", ask_id=offer_id
            )
        if image is not None and not isinstance(image, str):
            raise _err(400, "invalid_args", "'image' must be a string", ask_id=offer_id)
        label = body.get("label")
        if label is not None and not isinstance(label, str):
            label = str(label)
        if label is not None and len(label) > MAX_LABEL:
            raise _err(400, "invalid_args", "label_too_long", ask_id=offer_id)
        if self.user["credit"] <= 0:
            raise _err(
                400, "missing_billing", "You lack credit, see the billing page.", ask_id=offer_id
            )
        offer = self.offers[offer_id]
        price = body.get("price")
        if price is not None:
            try:
                price = float(price)
            except (TypeError, ValueError):
                raise _err(400, "invalid_price", "Invalid bid price.", ask_id=offer_id) from None
            if not 0.001 <= price <= 128:
                raise _err(
                    400,
                    "invalid_price",
                    "Bid price must be between 0.001 and 128.",
                    ask_id=offer_id,
                )
        now = self.now()
        # A bid below the going price still creates the contract, stopped (it bills storage
        # until destroyed) and answers success false with new_contract (vast-api.md §14, dstack
        # api_client.py); with cancel_unavail the create is refused instead.
        losing = price is not None and not self.bids.wins(
            offer["machine_id"], offer["min_bid"], price, now
        )
        if losing and body.get("cancel_unavail"):
            raise _err(
                410, "no_such_ask", f"Instance type {offer_id} is no longer available.",
                ask_id=offer_id,
            )  # fmt: skip
        disk = body.get("disk")
        try:
            disk = 8.0 if disk is None else float(disk)
        except (TypeError, ValueError):
            raise _err(400, "invalid_args", "'disk' must be a number", ask_id=offer_id) from None
        env = parse_env(body.get("env"))
        args = body.get("args") or []
        if isinstance(args, str):
            args = shlex.split(args)
        runtype = body.get("runtype") or ("args" if args or body.get("args_str") else "ssh")
        onstart = body.get("onstart")

        priced = dict(offer)
        price_fields(priced, disk, "on-demand")
        if price is not None:
            _bill_bid(priced, price)

        self._next_instance_id += self.rng.randint(1, 40)
        iid = self._next_instance_id
        t_loading = now + self.rng.uniform(20, 60)
        t_running = t_loading + self.rng.uniform(60, 180)
        inst = SimInstance(
            id=iid,
            offer_id=offer_id,
            machine=self.offer_machine[offer_id],
            offer=priced,
            created_at=now,
            t_loading=t_loading,
            t_running=t_running,
            image=image,
            template_hash_id=template,
            env=env,
            onstart=onstart,
            runtype=str(runtype),
            args=[str(a) for a in args],
            disk=disk,
            label=label,
            api_key=self._hex(),
            jupyter_token=self._hex(),
            ssh_port=int(self.alloc_port()),
            last_billed=now,
            ssh_keys=[dict(k) for k in self.ssh_keys],
        )
        if body.get("target_state") == "stopped":
            inst.intended = inst.cur_state = inst.next_state = "stopped"
            inst.stopped_at = now
        inst.fail = self.faults.instance_failure(fault_hint) or self._maintenance(
            float(offer["reliability"])
        )
        inst.pull_error = self.pull_error(image)
        if inst.pull_error is not None:
            inst.fail = None  # nothing runs: no container to exit, no host to lose it on
        inst.broken_bench_input = image is not None and self.fleet.on("bench_input_broken")
        self._plan_ssh(inst, offer)
        if price is not None:
            inst.bid_price = price
            inst.bid_floor = offer["min_bid"]
        self.instances[iid] = inst
        self._count_created(inst)
        if losing:
            inst.outbid_since = now
            inst.intended = inst.cur_state = inst.next_state = "stopped"
            inst.stopped_at = now
            self._claim_offer(inst)
            return {
                "success": False,
                "new_contract": iid,
                "error": "bid_too_low",
                "msg": f"Your bid is below the going price {self._going(inst, now)}: "
                "the instance was created stopped.",
            }
        if not queued:
            self._claim_offer(inst)
            return {"success": True, "new_contract": iid, "instance_api_key": inst.api_key}
        inst.holds_offer = False
        if inst.intended == "running":
            inst.queued = True
            inst.cur_state = "stopped"
        # AUTO: HTTP 200 with the new contract and success false when it was left stopped.
        return {
            "success": False,
            "new_contract": iid,
            "instance_api_key": inst.api_key,
            "error": "resources_unavailable",
            "msg": QUEUED_MSG,
        }

    def _count_created(self, inst: SimInstance) -> None:
        self.instances_created += 1
        if inst.label is not None:
            self.labels_created[inst.label] += 1
        if inst.fail is not None:
            self.instance_faults_planned[inst.fail[0]] += 1

    def stats(self) -> dict[str, Any]:
        """``GET /_sim/stats``: the faults injected so far (by ``endpoint:kind``) and the
        instances created and destroyed, creates counted per label; the fleet faults on, and
        every switch of one (cloud time, name, on)."""
        faults = Counter(f"{endpoint}:{kind}" for endpoint, kind in self.faults.injected)
        return {
            "faults": dict(sorted(faults.items())),
            "faults_total": len(self.faults.injected),
            "instances_created": self.instances_created,
            "instances_destroyed": self.instances_destroyed,
            "labels_created": dict(sorted(self.labels_created.items())),
            "instance_faults_planned": dict(sorted(self.instance_faults_planned.items())),
            "fleet_faults": {name: dict(p) for name, p in sorted(self.fleet.active.items())},
            "fleet_switches": [[t, name, on] for t, name, on in self.fleet.switched],
        }

    def _plan_ssh(self, inst: SimInstance, offer: dict[str, Any]) -> None:
        """Proxy first, direct later: a direct port of its own when the runtype asks for one
        ("ssh_direc") and the machine has direct ports."""
        if self.direct_ssh_after is None:
            return
        inst.split_ssh = True
        if "direc" in inst.runtype and int(offer.get("direct_port_count") or 0) > 0:
            inst.direct_port = int(self.alloc_port())
            inst.direct_after = self.rng.uniform(*self.direct_ssh_after)

    def _claim_offer(self, inst: SimInstance) -> None:
        offer = self.offers[inst.offer_id]
        self.available.discard(inst.offer_id)
        offer["rentable"] = False
        offer["rented"] = True
        inst.holds_offer = True

    def _release_offer(self, inst: SimInstance) -> None:
        if not inst.holds_offer:
            return
        offer = self.offers[inst.offer_id]
        offer["rentable"] = True
        offer["rented"] = False
        self.available.add(inst.offer_id)
        inst.holds_offer = False

    def _boot(self, inst: SimInstance, now: float) -> None:
        """Start the container from stopped: loading, then running (``on_running`` again)."""
        inst.intended = inst.cur_state = inst.next_state = "running"
        inst.queued = False
        inst.forced_status = None
        inst.fail = None
        inst.stopped_at = None
        inst.rebooting_until = None
        inst.rebooted = False
        inst.notified_running = False
        inst.t_loading = now + self.rng.uniform(2, 10)
        inst.t_running = inst.t_loading + self.rng.uniform(10, 40)
        if inst.pull_error is not None:  # no container yet: the start pulls again
            inst.pull_error = self.pull_error(inst.image)

    # ------------------------------------------------------------------ bids
    def _going(self, inst: SimInstance, now: float) -> float:
        return self.bids.going_price(inst.machine.machine_id, inst.bid_floor, now)

    def _bid_view(self, offer: dict[str, Any], now: float) -> dict[str, Any]:
        """The offer with this moment's going interruptible price as its ``min_bid``."""
        going = self.bids.going_price(offer["machine_id"], offer["min_bid"], now)
        if going == offer["min_bid"]:
            return offer
        return {**offer, "min_bid": going}

    def _settle_bids(self, now: float) -> None:
        """Pause every bid that a higher bid beats now; resume every paused one that wins
        again (a fresh container start: its onstart runs again)."""
        for inst in self.instances.values():
            if inst.bid_price is None or inst.queued:
                continue
            wins = self.bids.wins(inst.machine.machine_id, inst.bid_floor, inst.bid_price, now)
            if inst.outbid_since is None and not wins and inst.intended == "running":
                status, _ = self.status_of(inst, now)
                self._bill(inst, status, now)
                inst.outbid_since = now
                inst.interruptions += 1
                inst.intended = inst.cur_state = inst.next_state = "stopped"
                inst.stopped_at = now
                inst.notified_running = False
            elif inst.outbid_since is not None and wins:
                self._bill(inst, "stopped", now)
                inst.outbid_since = None
                self._boot(inst, now)

    def change_bid(self, instance_id: int, body: Any) -> dict[str, Any]:
        """``PUT /api/v0/instances/bid_price/{id}/`` ``{"client_id": "me", "price": p}``
        (vastai api/instances.py change_bid): the bid of an interruptible instance, $/h for
        its machine; no price: the going price (the CLI's "a winning bid price is used")."""
        if not isinstance(body, dict):
            raise _err(400, "invalid_args", "Invalid request body")
        inst = self._get(instance_id)
        if inst.bid_price is None:
            raise _err(400, "invalid_args", "Can't change price of on-demand contract.")
        now = self.now()
        raw = body.get("price")
        if raw is None:
            price = self._going(inst, now)
        else:
            try:
                price = float(raw)
            except (TypeError, ValueError):
                raise _err(400, "invalid_price", "Invalid bid price.") from None
        top = 32.0 * max(1, int(inst.offer["num_gpus"]))
        if not (math.isfinite(price) and 0.001 <= price <= top):
            raise _err(400, "invalid_price", f"Bid price must be between 0.001 and {top:g}.")
        status, _ = self.status_of(inst, now)
        self._bill(inst, status, now)
        inst.bid_price = price
        _bill_bid(inst.offer, price)
        self._settle_bids(now)
        return {"success": True}

    def _rented_by_others(self, inst: SimInstance, now: float) -> bool:
        """Another tenant holds the offer's machine now: a bidder above its on-demand price
        stands for an on-demand renter (vastsim/bids.py, as the search hides it)."""
        offer = self.offers[inst.offer_id]
        return bool(self._bid_view(offer, now)["min_bid"] >= offer["dph_base"])

    def _start_queued(self, now: float) -> None:
        """A queued start goes ahead once its offer's GPUs are free again (oldest first)."""
        for inst in sorted(self.instances.values(), key=lambda i: i.id):
            if (
                inst.queued
                and inst.offer_id in self.available
                and not self._rented_by_others(inst, now)
            ):
                self._bill(inst, "stopped", now)
                self._claim_offer(inst)
                self._boot(inst, now)

    def _maintenance(self, reliability: float) -> tuple[str, float] | None:
        """Now and then a host goes offline while it works for us; the engine sees it offline
        and lets it go. How often follows the machine's listed ``reliability``: the time from
        running to the outage is exponential with the hazard it implies, scaled by
        ``host_maintenance`` (the fault-rate scale, 0: never; vastsim.outages: the
        ASSUMPTION, and no outage past its horizon)."""
        if self.host_maintenance <= 0:
            return None
        from vastsim.outages import outage_after

        after = outage_after(self.rng, reliability, self.host_maintenance)
        return None if after is None else ("offline", after)

    # ------------------------------------------------------------------ render
    def render(self, inst: SimInstance, now: float | None = None) -> dict[str, Any]:
        """The instance JSON object (vast-api.md §6)."""
        now = self.now() if now is None else now
        status, msg = self.status_of(inst, now)
        o = inst.offer
        running = status == "running"
        port = inst.ssh_port if running else None
        ports, direct = self._ports(inst, running, now)
        d: dict[str, Any] = {
            "id": inst.id,
            "machine_id": o["machine_id"],
            "host_id": o["host_id"],
            "bundle_id": o["bundle_id"],
            "actual_status": status,
            "intended_status": inst.intended,
            "cur_state": inst.cur_state,
            "next_state": inst.next_state,
            "status_msg": msg,
            "label": inst.label,
            "image_uuid": inst.image,
            "image_runtype": inst.runtype,
            "image_args": list(inst.args),
            "extra_env": [[k, v] for k, v in inst.env.items()],
            "onstart": inst.onstart,
            "template_id": None,
            "template_hash_id": inst.template_hash_id,
            "template_name": None,
            "jupyter_token": inst.jupyter_token,
            "ssh_host": "127.0.0.1" if running else None,
            "ssh_port": port,
            "ssh_idx": None,
            "machine_dir_ssh_port": port,
            "public_ipaddr": "127.0.0.1" if running else None,
            "local_ipaddrs": f"10.{inst.id % 250}.0.2 172.17.0.1 \n",
            "ports": ports,
            "direct_port_start": direct or -1,
            "direct_port_end": direct or -1,
            "direct_port_count": o["direct_port_count"],
            "static_ip": o["static_ip"],
            "num_gpus": o["num_gpus"],
            "gpu_name": o["gpu_name"],
            "gpu_ram": o["gpu_ram"],
            "gpu_totalram": o["gpu_total_ram"],
            "gpu_frac": o["gpu_frac"],
            "gpu_arch": o["gpu_arch"],
            "compute_cap": o["compute_cap"],
            "cuda_max_good": o["cuda_max_good"],
            "driver_version": o["driver_version"],
            "gpu_util": 0.0 if running else None,
            "gpu_temp": 38.0 if running else None,
            "cpu_name": o["cpu_name"],
            "cpu_cores": o["cpu_cores"],
            "cpu_cores_effective": o["cpu_cores_effective"],
            "cpu_ram": o["cpu_ram"],
            "cpu_util": 0.01 if running else 0.0,
            "mem_usage": 0.4 if running else 0.0,
            "mem_limit": round(o["cpu_ram"] / 1024, 1),
            "disk_space": inst.disk,
            "disk_usage": 2.1 if running else -1,
            "disk_util": round(2.1 / inst.disk, 3) if running and inst.disk else -1,
            "disk_bw": o["disk_bw"],
            "inet_up": o["inet_up"],
            "inet_down": o["inet_down"],
            "inet_up_cost": o["inet_up_cost"],
            "inet_down_cost": o["inet_down_cost"],
            "pci_gen": o["pci_gen"],
            "dph_base": o["dph_base"],
            "storage_cost": o["storage_cost"],
            "storage_total_cost": o["storage_total_cost"],
            "dph_total": o["dph_total"],
            "is_bid": o["is_bid"],
            "min_bid": self._going(inst, now) if inst.bid_price is not None else o["min_bid"],
            "reliability2": o["reliability2"],
            "verification": o["verification"],
            "geolocation": o["geolocation"],
            "geolocode": o["geolocode"],
            "hosting_type": o["hosting_type"],
            "os_version": o["os_version"],
            "start_date": round(inst.created_at, 2),
            "end_date": o["end_date"],
            "uptime_mins": round((now - inst.t_running) / 60.0, 2) if running else 0.0,
            "duration": round(now - inst.created_at, 2),
            "volume_info": [],
        }
        d.update(inst.metrics)
        return d

    @staticmethod
    def _ports(
        inst: SimInstance, running: bool, now: float
    ) -> tuple[dict[str, Any] | None, int | None]:
        """``ports`` and the direct port reported: none until running; then, with split SSH,
        the direct port only once its delay has passed (a map without 22/tcp before)."""
        if not running:
            return None, None
        if not inst.split_ssh:
            return {"22/tcp": [{"HostIp": "0.0.0.0", "HostPort": str(inst.ssh_port)}]}, None
        if inst.direct_port is None or now < inst.t_running + inst.direct_after:
            return {}, None
        return {"22/tcp": [{"HostIp": "0.0.0.0", "HostPort": str(inst.direct_port)}]}, (
            inst.direct_port
        )

    def instances_snapshot(self) -> list[dict[str, Any]]:
        now = self.now()
        return [
            self.render(i, now)
            for i in sorted(self.instances.values(), key=lambda i: i.id)
            if self._listed(i, now)
        ]

    def _listed(self, inst: SimInstance, now: float) -> bool:
        """Whether Vast's answers show the instance yet (``list_lag_s``)."""
        return now - inst.created_at >= self.list_lag_s

    # ------------------------------------------------------------------ list / show
    def list_v0(self) -> dict[str, Any]:
        rows = self.instances_snapshot()
        return {"instances_found": len(rows), "instances": rows}

    def list_v1(self, params: dict[str, str]) -> dict[str, Any]:
        limit_raw = _json_param(params, "limit", PAGE_MAX)
        try:
            limit = int(limit_raw)
        except (TypeError, ValueError):
            raise _err(400, "invalid_request", "Error in query parameters: invalid limit") from None
        limit = 5 if limit <= 0 else min(limit, PAGE_MAX)

        filters = _json_param(params, "select_filters", {})
        if not isinstance(filters, dict):
            raise _err(
                400,
                "invalid_request",
                "Error in query parameters: select_filters must be an object",
            )
        conds: list[tuple[str, dict[str, Any]]] = []
        for col, cond in filters.items():
            if col not in STORED_COLUMNS:
                raise _err(
                    400,
                    "invalid_request",
                    f"Error in query parameters: {col} is not a valid search key",
                )
            if not isinstance(cond, dict):
                cond = {"eq": cond}
            try:
                validate_conditions(col, cond)
            except QueryError as e:
                raise _err(400, "invalid_request", f"Error in query parameters: {e}") from None
            conds.append((col, cond))

        order_raw = _json_param(params, "order_by", [])
        order: list[tuple[str, str]] = []
        if isinstance(order_raw, dict):
            order_raw = [order_raw]
        if not isinstance(order_raw, list):
            raise _err(400, "invalid_request", "Error in query parameters: invalid order_by")
        for item in order_raw:
            if isinstance(item, dict):
                col, direction = item.get("col"), item.get("dir", "asc")
            elif isinstance(item, (list, tuple)) and item:
                col, direction = item[0], (item[1] if len(item) > 1 else "asc")
            else:
                raise _err(400, "invalid_request", "Error in query parameters: invalid order_by")
            if col not in STORED_COLUMNS:
                raise _err(
                    400,
                    "invalid_request",
                    f"Error in query parameters: {col} is not a valid sort key",
                )
            if direction not in ("asc", "desc"):
                raise _err(
                    400, "invalid_request", "Error in query parameters: dir must be asc or desc"
                )
            order.append((col, direction))
        if not any(c == "id" for c, _ in order):
            order.append(("id", "asc"))

        cols = _json_param(params, "select_cols", ["*"])
        if isinstance(cols, str):
            cols = [cols]
        if not isinstance(cols, list):
            raise _err(400, "invalid_request", "Error in query parameters: invalid select_cols")

        all_rows = self.instances_snapshot()
        rows = [r for r in all_rows if all(check_condition(r, c, cd) for c, cd in conds)]
        rows = sort_rows(rows, order)

        sig = hashlib.sha256(
            json.dumps([filters, order], sort_keys=True, default=str).encode()
        ).hexdigest()[:16]
        token = params.get("after_token")
        offset = _decode_token(token, sig) if token else 0
        page = rows[offset : offset + limit]
        nxt = offset + limit
        next_token = _encode_token(nxt, sig) if nxt < len(rows) else None
        if "*" not in cols:
            page = [{c: r.get(c) for c in cols} for r in page]
        label_counts: dict[str, int] = {}
        for r in all_rows:
            if r.get("label"):
                label_counts[r["label"]] = label_counts.get(r["label"], 0) + 1
        return {
            "success": True,
            "instances_found": len(rows),
            "total_instances": len(all_rows),
            "label_counts": label_counts,
            "next_token": next_token,
            "instances": page,
        }

    def show(self, instance_id: int) -> dict[str, Any]:
        inst = self.instances.get(instance_id)
        now = self.now()
        if inst is None or not self._listed(inst, now):
            return {"instances": None}
        return {"instances": self.render(inst, now)}

    # ------------------------------------------------------------------ manage
    def destroy(self, instance_id: int) -> dict[str, Any]:
        inst = self._get(instance_id)
        status, _ = self.status_of(inst)
        self._bill(inst, status, self.now())
        del self.instances[instance_id]
        self.instances_destroyed += 1
        self._release_offer(inst)
        return {"success": True}

    def destroy_many(self, body: Any) -> dict[str, Any]:
        """Bulk destroy, ``DELETE /api/v0/instances/`` ``{"instance_ids": [...]}`` (vastai
        api/instances.py destroy_instance with a list; answers from AUTO
        auto_delete_api_v0_instances_b2998f.yaml): the account's instances among the ids are
        destroyed; 404 only when none is."""
        ids = body.get("instance_ids") if isinstance(body, dict) else None
        if not isinstance(ids, list) or not ids:
            raise _err(400, "invalid_args", "instance_ids array is required")
        if not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
            raise _err(400, "invalid_args", "invalid request format")
        found = [i for i in dict.fromkeys(ids) if i in self.instances]
        if not found:
            raise _err(404, "instances_not_found", f"Instances {ids} not found.")
        for iid in found:
            self.destroy(iid)
        return {"success": True}

    def manage_many(self, body: Any) -> dict[str, Any]:
        """Bulk start/stop, ``PUT /api/v0/instances/`` ``{"ids": [...], "state": ...}``
        (vastai api/instances.py start_instance/stop_instance with a list)."""
        ids = body.get("ids") if isinstance(body, dict) else None
        if not isinstance(ids, list) or not ids:
            raise _err(400, "invalid_args", "ids list required")
        if len(ids) > BULK_MAX:
            raise _err(400, "invalid_args", f"chunk length of {len(ids)} > {BULK_MAX}")
        if body.get("state") not in ("running", "stopped"):
            raise _err(400, "invalid_args", "Invalid target state")
        for iid in ids:
            if isinstance(iid, int) and not isinstance(iid, bool) and iid in self.instances:
                self.manage(iid, {"state": body["state"]})
        return {"success": True}

    def reboot(self, instance_id: int) -> dict[str, Any]:
        """``PUT /api/v0/instances/reboot/{id}/`` (vastai api/instances.py reboot_instance): a
        docker stop and start on the same machine, GPUs kept. The instance shows "rebooting",
        then "loading" ("Starting container", no pull), then "running" again; the container
        starts afresh, so its onstart runs again (the sandbox is restarted by ``on_running``).
        A host that is offline or silent cannot act on it: accepted, nothing changes. A
        stopped instance is refused (the sim's choice; Vast's answer is not documented)."""
        inst = self._get(instance_id)
        now = self.now()
        status, _ = self.status_of(inst, now)
        if inst.queued or inst.intended == "stopped" or inst.cur_state == "stopped":
            raise _err(400, "invalid_args", f"Instance {instance_id} is stopped: start it instead.")
        if status in ("offline", "unknown"):
            return {"success": True}
        self._bill(inst, status, now)
        inst.forced_status = None
        if status == "exited":
            inst.fail = None  # the container that exited starts again
        inst.rebooting_until = now + self.rng.uniform(*REBOOT_STOP)
        inst.t_loading = inst.rebooting_until
        inst.t_running = inst.t_loading + self.rng.uniform(*REBOOT_START)
        inst.rebooted = True
        if inst.pull_error is not None:  # no container yet: the start pulls again
            inst.pull_error = self.pull_error(inst.image)
        inst.notified_running = False
        return {"success": True}

    def manage(self, instance_id: int, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise _err(400, "invalid_args", "Invalid request body")
        inst = self._get(instance_id)
        if "label" in body:
            label = body["label"]
            if label is not None and not isinstance(label, str):
                label = str(label)
            if label is not None and len(label) > MAX_LABEL:
                raise _err(400, "invalid_args", "label_too_long")
            inst.label = label
        if "state" in body:
            state = body["state"]
            if state not in ("running", "stopped"):
                raise _err(400, "invalid_args", "Invalid target state")
            now = self.now()
            if state == "stopped":
                if inst.intended != "stopped":
                    status, _ = self.status_of(inst, now)
                    self._bill(inst, status, now)
                inst.intended = inst.cur_state = inst.next_state = "stopped"
                inst.queued = False
                inst.stopped_at = now
                # a stopped instance holds its disk, not its GPUs: another renter may take
                # them (vast-api.md §7: a start may then be queued, resources_unavailable)
                if inst.bid_price is None:
                    self._release_offer(inst)
            elif inst.intended == "stopped" or inst.cur_state == "stopped":
                if self.user["credit"] <= 0:
                    raise _err(400, "missing_billing", "You lack credit, see the billing page.")
                gpus_taken = not inst.holds_offer and (
                    inst.offer_id not in self.available or self._rented_by_others(inst, now)
                )
                if inst.start_unavailable or gpus_taken:
                    inst.intended = "running"
                    inst.next_state = "running"
                    inst.queued = gpus_taken
                    return {"success": False, "error": "resources_unavailable", "msg": QUEUED_MSG}
                status, _ = self.status_of(inst, now)
                self._bill(inst, status, now)
                if not inst.holds_offer:
                    self._claim_offer(inst)
                self._boot(inst, now)
        return {"success": True}

    # ------------------------------------------------------------------ hooks
    def force_status(self, instance_id: int, status: str | None) -> None:
        """Force ``actual_status`` ("exited", "offline", "unknown", ...); ``None`` clears."""
        if status is not None and status not in FORCEABLE:
            raise ValueError(f"cannot force status {status!r}")
        self._get(instance_id).forced_status = status

    def force_resources_unavailable(self, instance_id: int, flag: bool = True) -> None:
        """Make the next starts of this instance answer ``resources_unavailable``."""
        self._get(instance_id).start_unavailable = flag

    def set_metrics(self, instance_id: int, **fields: Any) -> None:
        """Override/add fields of the instance JSON (gpu_util, mem_usage, ...)."""
        self._get(instance_id).metrics.update(fields)

    def append_log(self, instance_id: int, line: str) -> None:
        """Append a container log line (shown by request_logs)."""
        self._get(instance_id).extra_log.append((self.now(), line))

    def authorized_keys(self, instance_id: int) -> list[str]:
        return [k["public_key"] for k in self._get(instance_id).ssh_keys]

    def instance(self, instance_id: int) -> SimInstance | None:
        return self.instances.get(instance_id)

    # ------------------------------------------------------------------ logs
    def request_logs(self, instance_id: int, body: Any, base_url: str) -> dict[str, Any]:
        inst = self.instances.get(instance_id)
        if inst is None:
            raise ApiError(404, {"error": "invalid_id", "msg": "Invalid instance id."})
        body = body if isinstance(body, dict) else {}
        tail_raw = body.get("tail")
        try:
            tail = int(tail_raw) if tail_raw not in (None, "") else 1000
        except (TypeError, ValueError):
            raise _err(400, "invalid_args", "tail must be an integer") from None
        daemon = str(body.get("daemon_logs", "")).lower() == "true"
        lines = self._daemon_lines(inst) if daemon else self._container_lines(inst)
        if tail >= 0:
            lines = lines[-tail:] if tail else []
        pattern = body.get("filter")
        if pattern:
            try:
                rx = re.compile(str(pattern))
                lines = [ln for ln in lines if rx.search(ln)]
            except re.error:
                lines = [ln for ln in lines if str(pattern) in ln]
        self._log_counter += 1
        token = hashlib.sha256(
            f"{self.seed}:{instance_id}:{self._log_counter}".encode()
        ).hexdigest()[:32]
        self._logs[token] = {"text": "".join(ln + "\n" for ln in lines), "polls": 0}
        return {
            "success": True,
            "result_url": f"{base_url.rstrip('/')}/_sim/logs/{token}.log",
            "msg": "Logs will be uploaded to result_url shortly.",
        }

    def fetch_log(self, token: str) -> tuple[int, str]:
        """``(status, text)`` of a log blob; 404 for the first two polls."""
        entry = self._logs.get(token)
        if entry is None:
            return 404, "NoSuchKey"
        entry["polls"] += 1
        if entry["polls"] <= 2:
            return 404, "NoSuchKey"
        return 200, entry["text"]

    def _container_lines(self, inst: SimInstance) -> list[str]:
        now = self.now()
        status, _ = self.status_of(inst, now)
        out: list[tuple[float, str]] = []
        started = now >= inst.t_running and inst.intended != "stopped"
        pulled = inst.pull_error is None  # no image, no container: no container log
        if pulled and (started or status in ("exited", "offline", "unknown")):
            t = inst.t_running
            out += [
                (t, "==> Vast.ai container starting"),
                (t, f"Environment: {len(inst.env)} variables"),
                (t, "Setting up SSH: adding authorized keys"),
                (t, "Server listening on 0.0.0.0 port 22."),
                (t, "Server listening on :: port 22."),
            ]
            if inst.onstart:
                out.append((t, "Running onstart script: /root/onstart.sh"))
            names = sorted(k for k in inst.env if not k.startswith("-"))
            if names:
                out.append((t, "Environment variables set: " + ", ".join(names)))
        out += inst.extra_log
        if (
            inst.fail is not None
            and now >= inst.t_running + inst.fail[1]
            and inst.fail[0] == "exited"
        ):
            out.append((inst.t_running + inst.fail[1], "Killed"))
        out.sort(key=lambda x: x[0])
        return [line for _, line in out]

    def _daemon_lines(self, inst: SimInstance) -> list[str]:
        now = self.now()
        image = inst.image or "template"
        if inst.pull_error is not None:
            events = [
                (inst.created_at, f"contract {inst.id} accepted on machine "
                                  f"{inst.offer['machine_id']}"),
                (inst.t_loading, f"docker pull {image}"),
                (inst.t_loading + 1, inst.pull_error),
            ]  # fmt: skip
            return [f"{_iso(t)} vast-daemon: {msg}" for t, msg in events if t <= now]
        events = [
            (inst.created_at, f"contract {inst.id} accepted on machine {inst.offer['machine_id']}"),
            (inst.t_loading, f"docker pull {image}"),
            (inst.t_loading + 1, f"{image}: Pulling fs layer"),
            (inst.t_running - 5, f"Status: Downloaded newer image for {image}"),
            (inst.t_running - 1, f"container C.{inst.id} created"),
            (inst.t_running, f"container C.{inst.id} started"),
        ]
        return [f"{_iso(t)} vast-daemon: {msg}" for t, msg in events if t <= now]

    # ------------------------------------------------------------------ ssh keys
    def _new_key(self, public_key: str) -> dict[str, Any]:
        self._next_key_id += self.rng.randint(1, 9)
        return {
            "id": self._next_key_id,
            "user_id": self.user["id"],
            "public_key": public_key,
            "created_at": _iso(self.now()),
            "deleted_at": None,
        }

    @staticmethod
    def _key_text(body: Any) -> str:
        key = body.get("ssh_key") if isinstance(body, dict) else None
        if not isinstance(key, str) or not key.strip():
            raise _err(400, "no_ssh_key", "No ssh key provided")
        return key.strip()

    def ssh_list(self) -> list[dict[str, Any]]:
        return [dict(k) for k in self.ssh_keys]

    def ssh_add(self, body: Any) -> dict[str, Any]:
        key = self._new_key(self._key_text(body))
        self.ssh_keys.append(key)
        return {"success": True, "key": dict(key)}

    def _account_key(self, key_id: int) -> dict[str, Any]:
        for k in self.ssh_keys:
            if k["id"] == key_id:
                return k
        raise _err(404, "no_such_ssh_key", f"SSH key {key_id} not found.")

    def ssh_update(self, key_id: int, body: Any) -> dict[str, Any]:
        key = self._account_key(key_id)
        key["public_key"] = self._key_text(body)
        return {"success": True, "key": dict(key)}

    def ssh_delete(self, key_id: int) -> dict[str, Any]:
        key = self._account_key(key_id)
        self.ssh_keys.remove(key)
        return {"success": True}

    def instance_ssh_list(self, instance_id: int) -> dict[str, Any]:
        inst = self._get(instance_id)
        return {"success": True, "ssh_keys": json.dumps(inst.ssh_keys)}

    def instance_ssh_add(self, instance_id: int, body: Any) -> dict[str, Any]:
        inst = self._get(instance_id)
        text = self._key_text(body)
        if any(k["public_key"] == text for k in inst.ssh_keys):
            return {"success": False, "msg": "SSH key already associated with instance."}
        key = next((dict(k) for k in self.ssh_keys if k["public_key"] == text), None)
        if key is None:
            key = self._new_key(text)
        inst.ssh_keys.append(key)
        return {"success": True, "msg": "SSH key added to instance.", "key": json.dumps(key)}

    def instance_ssh_delete(self, instance_id: int, key_id: int) -> dict[str, Any]:
        inst = self._get(instance_id)
        for k in inst.ssh_keys:
            if k["id"] == key_id:
                inst.ssh_keys.remove(k)
                return {"success": True, "msg": "SSH key removed from instance."}
        raise _err(404, "no_such_ssh_key", f"SSH key {key_id} not found.")

    # ------------------------------------------------------------------ user
    def current_user(self) -> dict[str, Any]:
        """The account (never includes ``api_key``)."""
        u = dict(self.user)
        u["credit"] = round(u["credit"], 4)
        u["ssh_key"] = self.ssh_keys[0]["public_key"] if self.ssh_keys else None
        return u


def _forced_msg(status: str) -> str | None:
    return {
        "exited": "Error response from daemon: container exited with code 137",
        "offline": "Host machine is offline: no contact with the host daemon.",
        "unknown": "No recent heartbeat from the host.",
    }.get(status)


def _runmsg(inst: SimInstance) -> str:
    image = (inst.image or "template").replace(":", "_")
    rt = inst.runtype
    kind = "jupyter" if "jupyter" in rt else "args" if rt.startswith("args") else "ssh"
    return f"{image}/{kind}"


__all__ = ["ApiError", "ManualClock", "ScaledClock", "SimCloud", "SimInstance"]
