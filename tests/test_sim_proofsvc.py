"""The proofshare market stand-in (vastsim/proofsvc.py) answers curio's provider calls
(lib/proofsvc/provictl.go) with the shapes of lib/proofsvc/common/types.go: asks matched at the
next poll, the request's data, a reward per completion (nonce and cumulative amount at the
ask's price; challenge proofs unpaid), 410 for a request that is not the provider's."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from vastsim.proofsvc import Market, ProofService, atto_to_fil, fil_to_atto
from vastsim.standins import _simlib as simlib

WALLET = "f1abcdefghijklmnopqrstuvwxyzabcdefghijklm"


@pytest.fixture
def service() -> Iterator[ProofService]:
    svc = ProofService(Market(seed=2, snap_share=0.5, pow_share=0.5))
    svc.start()
    try:
        yield svc
    finally:
        svc.stop()


def call(svc: ProofService, method: str, path: str, body: bytes | None = None) -> tuple[int, Any]:
    req = urllib.request.Request(svc.url + path, data=body, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            raw = resp.read()
            status = resp.status
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw


def test_an_ask_is_matched_at_the_next_poll_and_its_request_has_data(service) -> None:
    price = fil_to_atto("0.005")
    status, ask = call(service, "POST", f"/provider/work/ask/{WALLET}?price={price}&signature=00")
    assert status == 200
    assert set(ask) == {"id", "min_price_nfil", "created_at", "min_price_fil"}
    assert ask["min_price_nfil"] == 5_000_000 and ask["min_price_fil"] == "0.005"
    status, work = call(service, "GET", f"/provider/work/poll/{WALLET}")
    assert status == 200 and work["active_asks"] == []
    [req] = work["requests"]
    assert req["work_ask_id"] == ask["id"] and req["done"] is False
    assert req["request_cid"].startswith("b")
    status, data = call(service, "GET", f"/provider/proof/{req['request_cid']}")
    assert status == 200 and set(data) == {"SectorID", "PoRep", "Snap"}
    assert set(data["SectorID"]) == {"Miner", "Number"}
    if data["Snap"] is not None:
        snap = data["Snap"]
        assert snap["ProofType"] == simlib.SNAP_REGISTERED_PROOF
        assert len(snap["old_r"]) == 32 and len(snap["Proofs"]) == simlib.SNAP_PARTITIONS
    else:  # the C1 output, bound to this sector (cuzk's self-check needs the same ids)
        replica = data["PoRep"]["replica_id"]
        sector = data["SectorID"]
        assert replica == simlib.replica_id(sector["Miner"], sector["Number"])
    assert call(service, "GET", "/provider/proof/bnothere")[0] == 404


def test_completions_pay_the_provider_in_order_and_challenges_not(service) -> None:
    price = fil_to_atto("0.01")
    for _ in range(8):
        call(service, "POST", f"/provider/work/ask/{WALLET}?price={price}&signature=00")
    _, work = call(service, "GET", f"/provider/work/poll/{WALLET}")
    paid = 0
    kinds = set()
    for req in work["requests"]:
        cid = req["request_cid"]
        path = f"/provider/work/complete/{WALLET}/{cid}?signature=0"
        status, reward = call(service, "POST", path, b"proof")
        assert status == 200
        assert set(reward) == {"status", "pow", "nonce", "amount", "cumulative_amount",
                               "signature"}  # fmt: skip
        kinds.add(reward["pow"])
        if reward["pow"]:
            assert reward["signature"] is None and reward["amount"] == "0"
            continue
        paid += 1
        assert reward["nonce"] == paid and int(reward["amount"]) == price
        assert int(reward["cumulative_amount"]) == paid * price
        assert base64.b64decode(reward["signature"])
        # done: the same completion again is gone (provictl.go:253-256)
        assert call(service, "POST", f"/provider/work/complete/{WALLET}/{cid}", b"p")[0] == 410
    assert kinds == {True, False}
    _, after = call(service, "GET", f"/provider/work/poll/{WALLET}")
    assert after == {"requests": [], "active_asks": []}
    stats = service.market.stats()
    assert stats["completed"] == 8 and stats["providers"][WALLET]["nonce"] == paid


def test_another_providers_request_is_gone_and_a_bad_price_refused(service) -> None:
    call(service, "POST", f"/provider/work/ask/{WALLET}?price=1&signature=00")
    _, work = call(service, "GET", f"/provider/work/poll/{WALLET}")
    cid = work["requests"][0]["request_cid"]
    assert call(service, "POST", f"/provider/work/complete/f1other/{cid}", b"p")[0] == 410
    assert call(service, "POST", f"/provider/work/ask/{WALLET}?price=x")[0] == 400


def test_fil_amounts() -> None:
    assert fil_to_atto("0.005") == 5 * 10**15 and atto_to_fil(5 * 10**15) == "0.005"
    assert atto_to_fil(2 * 10**18) == "2"
