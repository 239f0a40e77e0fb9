"""A stand-in for the proofshare market service that curio's proofshare tasks talk to.

curio reaches the market over HTTP at one constant URL (``lib/proofsvc/provictl.go:30``
``marketUrl = "https://mainnet.snass.fsp.sh/v0/proofs"``); a worker reaches it over its own
internet, not through the controller's tunnel (cuzk-verified.md, "Where a proofshare worker meets
the world"). The simulator serves the same paths under ``/v0/proofs`` on a loopback port and tells
the sandboxes where (``SIM_PROOFSVC_URL``, vastsim/workers.py):

* ``POST /provider/work/ask/{addr}?price=&signature=`` (provictl.go:78-120, ``CreateWorkAsk``):
  a ``WorkAsk`` (``lib/proofsvc/common/types.go:60-67``);
* ``GET /provider/work/poll/{addr}`` (provictl.go:122-153, ``PollWork``): a ``WorkResponse``
  (types.go:55-58) of the provider's requests not yet done (``WorkRequest``, types.go:30-37) and
  its asks not yet matched;
* ``GET /provider/proof/{cid}`` (provictl.go:188-219, ``GetProof``): the request's data, a JSON
  ``ProofData`` (types.go:69-76: ``SectorID`` and ``PoRep`` (``lib/proof`` Commit1OutRaw) or
  ``Snap`` (lib/proof/update_vproof_types.go:5-14));
* ``POST /provider/work/complete/{addr}/{rcid}?signature=`` with the proof as the body
  (provictl.go:221-280, ``RespondWork``): a ``ProofReward`` (types.go:45-53); 410 Gone for a
  request that is no longer this provider's (provictl.go:253-256).

What the market does is the ``Market``: its state (asks, requests, each provider's payment
nonce and cumulative amount) and a demand policy that decides, at each poll, which of a
provider's open asks get work. For now demand is unlimited (every ask is matched at the next
poll); slots, the 45-minute deadline and its penalty (documentation/en/Snark-Market.md:162-169)
are a policy's to add. Requests are PoRep C2 or SnapDeals in a seeded mix (``snap_share``), with
the miner and sector drawn from the seed; a seeded share are challenge proofs (``PoW``: the
market's own test of the provider, unpaid). A paid completion returns the provider's next nonce
and its cumulative amount at the ask's price, or, when the policy prices its work (``terms_for``,
vastsim/demand.py ``Rivals``), at what the policy fixed at the match (``Terms``).

Not modelled yet: signatures are not checked (curio signs asks and completions through the
Lotus API, lib/proofsvc/sigs.go:211-242; a later issue checks them), and proofs are not
verified here (curio's own ``CheckOutput`` runs before it submits, types.go:236-307).

One file: the market's state and the HTTP paths that serve it, each path a thin call into
``Market`` under its lock; the request data it hands out is built here too, by the one seed.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import logging
import random
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal, Protocol

from vastsim.standins import _simlib as simlib

log = logging.getLogger("vastsim.proofsvc")

BASE_PATH = "/v0/proofs"  # provictl.go:30: marketUrl's path
URL_ENV = "SIM_PROOFSVC_URL"  # where a sandbox's curio finds this stand-in
ATTO = 10**18
NANO_IN_ATTO = 10**9  # common.PriceResolution, 1 nFIL (types.go:27)
MAX_BODY = 8 << 20  # a proof is a few KB; anything this large is not one


Admit = Literal["ask", "challenge", "refuse"]


def fil_to_atto(fil: str) -> int:
    """``types.ParseFIL`` for a plain decimal FIL amount (what curio's web UI takes)."""
    return int(Decimal(fil) * ATTO)


def atto_to_fil(atto: int) -> str:
    """``types.FIL(x).Unitless()``: FIL with trailing zeros dropped."""
    text = format(Decimal(atto) / ATTO, "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def _iso(epoch: float) -> str:
    # Go's time.Time JSON: RFC 3339 with nanoseconds, UTC as Z
    return datetime.fromtimestamp(epoch, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class Ask:
    """A provider's offer to compute a proof at a price (``common.WorkAsk``)."""

    id: int
    provider: str
    price: int  # attoFIL per proof
    created_at: float
    challenge: bool = False  # admitted for a challenge proof (no slot free)

    def json(self) -> dict[str, Any]:
        nfil = self.price // NANO_IN_ATTO
        return {
            "id": self.id,
            "min_price_nfil": nfil,
            "created_at": _iso(self.created_at),
            "min_price_fil": atto_to_fil(self.price),
        }


@dataclass(frozen=True)
class Terms:
    """What a pricing policy fixed for a paid ask at its match: the request's kind and what the
    completion pays (the market price then, scaled by the proof's cost)."""

    kind: str  # "porep" or "snap"
    market_price: int  # attoFIL per PoRep-equivalent at the match
    pay: int  # attoFIL the completion pays


@dataclass
class Request:
    """A proof request matched to a provider's ask (``common.WorkRequest``): curio keys its
    queue row by the ask's id (``service_id``, task_request.go:237-263)."""

    id: int
    ask: Ask
    cid: str
    kind: str  # "porep" or "snap"
    miner: int
    sector: int
    pow: bool  # a challenge proof: the market's own test, unpaid
    data: bytes  # the ProofData JSON GetProof returns
    matched_at: float
    done: bool = False
    completed_at: float | None = None
    proof_len: int = 0
    expired: bool = False  # past the deadline: taken back, no longer the provider's
    market_price: int | None = None  # a pricing policy's price at the match (``Terms``)
    pay: int | None = None  # what a paid completion earns (None: the ask's price)

    @property
    def amount(self) -> int:
        """attoFIL a paid completion earns."""
        return self.ask.price if self.pay is None else self.pay

    def json(self) -> dict[str, Any]:
        return {"id": self.id, "request_cid": self.cid, "done": self.done,
                "work_ask_id": self.ask.id}  # fmt: skip


class DemandPolicy(Protocol):
    """The market's rules for one provider: whether it may ask (a slot), which of its open asks
    are filled at a poll (demand), which requests are challenges, and what a late proof is worth
    (vastsim/demand.py ``FiniteDemand`` holds the documented ones).

    A policy may also have ``terms_for(ask) -> Terms | None``: the kind and pay of the request a
    paid ask it matched gets (a priced market); without it, or on None, the market draws the kind
    and pays the ask's price."""

    def admit(self, market: Market, provider: str, now: float) -> Admit:
        """ "ask", "challenge" (the ask will be filled with a challenge proof), or "refuse": 429
        (provictl.go:111-115, ``ErrTooManyRequests``)."""
        ...

    def match(self, market: Market, provider: str, asks: list[Ask], now: float) -> list[Ask]: ...

    def expire(self, market: Market, provider: str, now: float) -> None:
        """Take back what is past its deadline (before a poll or a completion)."""
        ...

    def completed(self, market: Market, req: Request, now: float) -> None:
        """A request was completed in time (a challenge earns its provider trust)."""
        ...


class UnlimitedDemand:
    """Every open ask gets a request at the next poll; no slots, no deadline."""

    def admit(self, market: Market, provider: str, now: float) -> Admit:
        return "ask"

    def match(self, market: Market, provider: str, asks: list[Ask], now: float) -> list[Ask]:
        return list(asks)

    def expire(self, market: Market, provider: str, now: float) -> None:
        return None

    def completed(self, market: Market, req: Request, now: float) -> None:
        return None


@dataclass
class Provider:
    """What the market keeps per provider wallet: its payment voucher's nonce and cumulative
    amount (``ProofReward.Nonce``/``CumulativeAmount``)."""

    nonce: int = 0
    cumulative: int = 0
    completed: int = 0
    challenges: int = 0
    refused: int = 0  # asks answered 429


class Market:
    """The market's state and rules; thread-safe (the HTTP server's threads, tests)."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.time,
        seed: int = 0,
        snap_share: float = 0.25,
        pow_share: float = 0.1,
        policy: DemandPolicy | None = None,
        lazy_data: bool = False,
    ) -> None:
        self.clock = clock
        self.snap_share = snap_share
        self.pow_share = pow_share
        self.policy: DemandPolicy = policy or UnlimitedDemand()
        # a bench that never fetches a request's data: made when asked for (its CID then names
        # the request's kind, miner and sector, not its bytes)
        self.lazy_data = lazy_data
        self._rng = random.Random(seed * 6151 + 29)
        self._seed = seed
        self.lock = threading.RLock()
        self.asks: dict[int, Ask] = {}  # open: not yet matched
        self.requests: dict[str, Request] = {}  # by cid
        # those neither done nor expired, by cid (what a poll and the policy scan: the whole
        # history grows with the hours a bench runs)
        self.live: dict[str, Request] = {}
        self.providers: dict[str, Provider] = {}
        self._next_ask = 1
        self._next_request = 1

    # -- the provider's calls ----------------------------------------------------------

    def create_ask(self, provider: str, price: int) -> Ask | None:
        """The new ask, or None when the policy refuses it (429)."""
        with self.lock:
            now = self.clock()
            self.providers.setdefault(provider, Provider())
            self.policy.expire(self, provider, now)
            admitted = self.policy.admit(self, provider, now)
            if admitted == "refuse":
                self.providers[provider].refused += 1
                return None
            ask = Ask(self._next_ask, provider, price, now, challenge=admitted == "challenge")
            self._next_ask += 1
            self.asks[ask.id] = ask
            return ask

    def poll(self, provider: str) -> dict[str, Any]:
        """``WorkResponse``: matches first (the policy), then what is the provider's."""
        with self.lock:
            now = self.clock()
            self.policy.expire(self, provider, now)
            mine = sorted((a for a in self.asks.values() if a.provider == provider),
                          key=lambda a: a.id)  # fmt: skip
            for ask in self.policy.match(self, provider, mine, now):
                if self.asks.pop(ask.id, None) is not None:
                    self._new_request(ask, now)
            open_asks = [a.json() for a in sorted(self.asks.values(), key=lambda a: a.id)
                         if a.provider == provider]  # fmt: skip
            requests = [r.json() for r in self.live.values()
                        if r.ask.provider == provider and not r.done and not r.expired]  # fmt: skip
            return {"requests": requests, "active_asks": open_asks}

    def proof_data(self, cid: str) -> bytes | None:
        with self.lock:
            req = self.requests.get(cid)
            if req is not None and not req.data:
                req.data = request_data(req.kind, req.miner, req.sector)
            return None if req is None else req.data

    def complete(self, provider: str, cid: str, proof: bytes) -> dict[str, Any] | None:
        """``ProofReward`` for a completion; None when the request is not this provider's to
        complete (done already, or never matched to it): 410 Gone."""
        with self.lock:
            now = self.clock()
            self.policy.expire(self, provider, now)
            req = self.requests.get(cid)
            if req is None or req.done or req.expired or req.ask.provider != provider:
                return None
            req.done, req.completed_at, req.proof_len = True, now, len(proof)
            self.live.pop(cid, None)
            account = self.providers.setdefault(provider, Provider())
            account.completed += 1
            self.policy.completed(self, req, now)
            if req.pow:
                account.challenges += 1
                return {
                    "status": "ok", "pow": True, "nonce": 0, "amount": "0",
                    "cumulative_amount": str(account.cumulative), "signature": None,
                }  # fmt: skip
            account.nonce += 1
            account.cumulative += req.amount
            signature = base64.b64encode(b"sim-voucher-unsigned").decode()  # not checked yet
            return {
                "status": "ok", "pow": False, "nonce": account.nonce,
                "amount": str(req.amount), "cumulative_amount": str(account.cumulative),
                "signature": signature,
            }  # fmt: skip

    # -- requests ------------------------------------------------------------------------

    def _new_request(self, ask: Ask, now: float) -> Request:
        rid = self._next_request
        self._next_request += 1
        kind = "snap" if self._rng.random() < self.snap_share else "porep"
        dice = self._rng.random() < self.pow_share  # drawn always: the seed's sequence stands
        pow_ = ask.challenge or dice  # a finite market's challenges are its policy's: pow_share 0
        miner = self._rng.randint(1000, 99999)
        sector = self._rng.randint(1, 99999)
        terms = self._terms(ask)
        if terms is not None:  # the kind was drawn anyway: the seed's sequence stands
            kind = terms.kind
        if self.lazy_data:
            data = b""
            cid = request_cid(self._seed, rid, f"{kind}:{miner}:{sector}".encode())
        else:
            data = request_data(kind, miner, sector)
            cid = request_cid(self._seed, rid, data)
        req = Request(rid, ask, cid, kind, miner, sector, pow_, data, now)
        if terms is not None:
            req.market_price, req.pay = terms.market_price, terms.pay
        self.requests[cid] = req
        self.live[cid] = req
        return req

    def _terms(self, ask: Ask) -> Terms | None:
        """A pricing policy's terms for a paid ask it matched (``DemandPolicy``), else None."""
        terms_for: Callable[[Ask], Terms | None] | None = getattr(self.policy, "terms_for", None)
        return None if terms_for is None else terms_for(ask)

    def stats(self) -> dict[str, Any]:
        """What the market saw, for tests."""
        with self.lock:
            done = [r for r in self.requests.values() if r.done]
            paid = [r for r in done if not r.pow]
            return {
                "open_asks": len(self.asks),
                "requests": len(self.requests),
                "completed": len(done),
                "completed_by_kind": {
                    k: sum(1 for r in done if r.kind == k) for k in ("porep", "snap")
                },
                "challenges": sum(1 for r in done if r.pow),
                "paid_by_kind": {
                    k: sum(r.amount for r in paid if r.kind == k) for k in ("porep", "snap")
                },
                "providers": {p: vars(a).copy() for p, a in self.providers.items()},
            }


def request_cid(seed: int, rid: int, data: bytes) -> str:
    """A CIDv1 (raw, sha2-256) in base32, as the market names a request's data."""
    digest = hashlib.sha256(f"{seed}:{rid}:".encode() + data).digest()
    raw = bytes([0x01, 0x55, 0x12, 0x20]) + digest
    return "b" + base64.b32encode(raw).decode().lower().rstrip("=")


def request_data(kind: str, miner: int, sector: int) -> bytes:
    """The ``ProofData`` JSON of a request (types.go:69-76), as Go's encoding/json writes it:
    ``SectorID`` (abi.SectorID: Miner, Number), and ``PoRep`` (the SealCommitPhase1Output,
    lib/proof/porep_vproof_types.go:230-240) or ``Snap`` (update_vproof_types.go:5-14: the
    commitments as [32]byte arrays, the vanilla partition proofs as base64 ``[][]byte``)."""
    sector_id = {"Miner": miner, "Number": sector}
    if kind == "snap":
        vanilla, ids = simlib.make_snap_vanilla(miner, sector)
        snap = {
            "ProofType": simlib.SNAP_REGISTERED_PROOF,
            "old_r": list(bytes.fromhex(ids["comm_r_old"])),
            "new_r": list(bytes.fromhex(ids["comm_r_new"])),
            "new_d": list(bytes.fromhex(ids["comm_d_new"])),
            "Proofs": json.loads(vanilla),
        }
        body: dict[str, Any] = {"SectorID": sector_id, "PoRep": None, "Snap": snap}
    else:
        c1 = json.loads(simlib.make_c1(miner, sector))
        phase1 = json.loads(base64.b64decode(c1["Phase1Out"]))
        body = {"SectorID": sector_id, "PoRep": phase1, "Snap": None}
    return json.dumps(body, separators=(",", ":")).encode()


# -- the HTTP service -------------------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    market: Market
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, value: Any) -> None:
        self._send(status, json.dumps(value).encode())

    def _text(self, status: int, text: str) -> None:
        self._send(status, text.encode(), "text/plain; charset=utf-8")

    def _route(self) -> tuple[list[str], dict[str, list[str]]] | None:
        url = urllib.parse.urlsplit(self.path)
        if not url.path.startswith(BASE_PATH + "/"):
            return None
        parts = [urllib.parse.unquote(p) for p in url.path[len(BASE_PATH) + 1 :].split("/")]
        return parts, urllib.parse.parse_qs(url.query)

    def do_GET(self) -> None:
        route = self._route()
        if route is None:
            return self._text(404, "404 page not found\n")
        parts, _query = route
        if len(parts) == 4 and parts[:3] == ["provider", "work", "poll"]:
            return self._json(200, self.market.poll(parts[3]))
        if len(parts) == 3 and parts[:2] == ["provider", "proof"]:
            data = self.market.proof_data(parts[2])
            if data is None:
                return self._text(404, "request not found\n")
            return self._send(200, data, "application/octet-stream")
        return self._text(404, "404 page not found\n")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            return self._text(413, "request too large\n")
        body = self.rfile.read(length) if length else b""
        route = self._route()
        if route is None:
            return self._text(404, "404 page not found\n")
        parts, query = route
        if len(parts) == 4 and parts[:3] == ["provider", "work", "ask"]:
            try:
                price = int((query.get("price") or [""])[0])
            except ValueError:
                return self._text(400, "invalid price\n")
            if price < 0:
                return self._text(400, "invalid price\n")
            ask = self.market.create_ask(parts[3], price)
            if ask is None:  # provictl.go:111-115 reads the status only
                return self._text(429, "no free work slot\n")
            return self._json(200, ask.json())
        if len(parts) == 5 and parts[:3] == ["provider", "work", "complete"]:
            reward = self.market.complete(parts[3], parts[4], body)
            if reward is None:
                return self._text(410, "work request gone\n")
            return self._json(200, reward)
        return self._text(404, "404 page not found\n")


class ProofService:
    """The market's HTTP server on a loopback port, in its own threads."""

    def __init__(self, market: Market) -> None:
        self.market = market
        self.server: ThreadingHTTPServer | None = None
        self.thread: threading.Thread | None = None
        self.host = "127.0.0.1"
        self.port = 0

    @property
    def url(self) -> str:
        """The market's URL as curio's ``marketUrl`` (provictl.go:30) would be."""
        return f"http://{self.host}:{self.port}{BASE_PATH}"

    def start(self, host: str = "127.0.0.1") -> int:
        handler = type("Handler", (_Handler,), {"market": self.market})
        server = ThreadingHTTPServer((host, 0), handler)
        server.daemon_threads = True
        self.server, self.host, self.port = server, host, int(server.server_address[1])
        self.thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True,
            name="sim-proofsvc",
        )  # fmt: skip
        self.thread.start()
        return self.port

    def stop(self) -> None:
        server, self.server = self.server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if self.thread is not None:
            with contextlib.suppress(RuntimeError):
                self.thread.join(5)
            self.thread = None


__all__ = [
    "BASE_PATH",
    "URL_ENV",
    "Ask",
    "DemandPolicy",
    "Market",
    "ProofService",
    "Request",
    "Terms",
    "UnlimitedDemand",
    "atto_to_fil",
    "fil_to_atto",
    "request_data",
]
