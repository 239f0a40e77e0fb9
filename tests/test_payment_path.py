"""The payment path (vastui/engine/payment.py): curio signs every ask and completion through the
Lotus API; signatures refused pause provisioning with the cause named, nobody is struck, and
the pause lifts once a signature goes through. The decision as a table; the reader and the
engine on a real PostgreSQL with curio's schema (tests/pgfixtures.py)."""

from __future__ import annotations

import pytest

from tests.enginekit import World
from tests.pgfixtures import CurioDb
from tests.test_engine_cluster import events, proving_fleet, target
from vastui.engine import payment
from vastui.engine.cluster import to_db_time
from vastui.store import Store

REFUSED = (
    "failed to create work ask: failed to sign work ask: failed to sign data with key f3abc: "
    "missing permission to invoke 'WalletSign' (need 'sign')"
)


@pytest.mark.parametrize(
    ("signing", "broken"),
    [
        (payment.Signing(0, None, None, None), False),
        (payment.Signing(3, REFUSED, 100.0, None), True),
        (payment.Signing(3, REFUSED, 100.0, 50.0), True),  # worked once, refused since
        (payment.Signing(3, REFUSED, 100.0, 150.0), False),  # refused once, works since
    ],
)
def test_signatures_refused_and_not_mended_since_break_the_payment_path(signing, broken) -> None:
    line = payment.broken(signing)
    assert (line is not None) == broken
    if line is not None:
        assert line.startswith("the payment path: curio cannot sign") and "\n" not in line
        assert "missing permission to invoke 'WalletSign'" in line
    assert payment.mended(signing, 120.0) == (signing.signed_at is not None
                                              and signing.signed_at > 120.0)  # fmt: skip


def history(db: CurioDb, name: str, at: float, ok: bool, err: str = "") -> None:
    db.q(
        """INSERT INTO harmony_task_history (task_id, name, posted, work_start, work_end, result,
           completed_by_host_and_port, err)
           VALUES (7, %s, %s, %s, %s, %s, '127.0.0.1:12401', %s)""",
        (name, to_db_time(at - 5), to_db_time(at - 5), to_db_time(at), ok, err),
    )


async def test_the_reader_sees_refusals_and_the_last_signature_that_went_through(
    curio_db: CurioDb,
) -> None:
    t0 = 1_780_000_000.0
    history(curio_db, "PShareSubmit", t0 + 100, True)
    history(curio_db, "bg:PShareRequest", t0 + 200, False, REFUSED)
    history(curio_db, "bg:PShareRequest", t0 + 300, False, REFUSED)
    history(curio_db, "bg:PShareRequest", t0 + 310, False, "failed to poll work: 502")
    history(curio_db, "PSProve", t0 + 320, False, "missing permission to invoke 'X'")  # not ours
    reader = curio_db.reader()
    try:
        t = (await reader.read([], now=t0 + 600, window_s=3600)).totals
    finally:
        await reader.close()
    assert (t.sign_refused, t.sign_error) == (2, REFUSED)
    assert t.sign_refused_at == pytest.approx(t0 + 300) and t.signed_at == pytest.approx(t0 + 100)


async def test_refused_signatures_pause_provisioning_without_a_strike_until_one_goes_through(
    world: World, store: Store, curio_db: CurioDb
) -> None:
    target(world, 5)  # short of it: the status says why nothing more is rented
    engine, ids, _machines = await proving_fleet(world, store, curio_db, 1)
    now = world.clock.now()
    live = len(await store.instances.all(include_killed=False))
    history(curio_db, "bg:PShareRequest", now - 10, False, REFUSED)
    await engine.step()
    status = await store.status.get()
    assert status.reason_kind == "fleet_failure"
    assert "the payment path: curio cannot sign" in (status.reason or "")
    assert "until curio's signatures go through or `vastui resume`" in (status.reason or "")
    [paused] = await events(store, "fleet_failure")
    assert "provisioning paused: the payment path" in paused.reason
    assert await store.badlist.strikes() == [] and await store.badlist.machine_ids() == set()
    assert len(await store.instances.all(include_killed=False)) == live, "none rented or destroyed"
    # a worker passing its benchmark signs nothing: the pause stands
    rec = await store.instances.get(ids[0])
    await engine.acts.worker_passed(rec, world.clock.now())
    assert (await store.meta.fleet_failure() or {}).get("signature") == "payment_path"
    # a completion submitted (signed) after the pause began: lifted
    world.clock.advance(60)
    history(curio_db, "PShareSubmit", world.clock.now() - 1, True)
    await engine.step()
    assert await store.meta.fleet_failure() is None
    assert (await store.status.get()).reason_kind != "fleet_failure"
    resumed = await events(store, "fleet_failure")
    assert resumed[-1].reason.startswith("provisioning resumed: curio's signatures go through")
    await engine.close()
