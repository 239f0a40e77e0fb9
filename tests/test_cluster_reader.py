"""The engine's cluster reader (vastui/engine/cluster.py) against a real PostgreSQL holding
curio's schema, filled with curio's own statements (tests/pgfixtures.py)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tests.helpers import eventually
from tests.pgfixtures import CurioDb
from vastui.engine.cluster import ClusterAbsent, ClusterError, ClusterReader, Row, Worker, belongs

T0 = 1_780_000_000.0
H = 3600.0


def worker(vast_id: int, runner: int, machine_id: int | None = None, since: float = T0) -> Worker:
    return Worker(
        vast_id, f"127.0.0.1:{12400 + runner}", f"vastui-main-r{runner}", machine_id, since,
        since,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("row", "reported", "ours"),
    [
        (Row(5, "127.0.0.1:12401", "vastui-main-r1", None, False), None, True),
        (Row(5, "127.0.0.1:12401", "vastui-main-r1", None, False), 5, True),
        (Row(5, "127.0.0.1:12401", None, None, False), 5, True),  # details not written yet
        (Row(5, "127.0.0.1:12401", None, None, False), None, False),  # nothing proves it
        (Row(5, "127.0.0.1:12401", "vastui-other-r1", None, False), None, False),  # other fleet
        (Row(5, "127.0.0.1:12401", "vastui-main-r1", None, False), 6, False),  # another id
        (Row(5, "127.0.0.1:12402", "vastui-main-r1", None, False), 5, False),  # another address
    ],
)
def test_a_row_belongs_to_a_worker_only_when_everything_known_agrees(
    row: Row, reported: int | None, ours: bool
) -> None:
    assert belongs(worker(1, 1, reported), row) is ours


async def test_reading_workers_and_totals(curio_db: CurioDb) -> None:
    db = curio_db
    m1 = db.register("127.0.0.1:12401", "vastui-main-r1", T0)
    m2 = db.register("127.0.0.1:12402", "vastui-main-r2", T0)
    own = db.register("10.0.0.9:12300", "operator-node", T0)  # the operator's own node
    tasks = [db.add_task("PSProve", T0) for _ in range(6)]
    req = db.add_task("bg:PShareRequest", T0)
    assert db.claim(m1, tasks[:3]) == tasks[:3]
    assert db.claim(m2, tasks[3:4]) == tasks[3:4]
    assert db.claim(m2, [req]) == [req]
    # m1 finished two proofs and failed one; an old failure before it began proving is not its
    db.complete(tasks[0], "127.0.0.1:12401", True, "", T0 + 0.5 * H)
    db.complete(tasks[1], "127.0.0.1:12401", True, "", T0 + 0.6 * H)
    db.complete(tasks[2], "127.0.0.1:12401", False, "proof check failed: invalid UpdateProof",
                T0 + 0.7 * H)  # fmt: skip
    assert db.claim(own, tasks[4:5]) == tasks[4:5]
    db.complete(tasks[4], "10.0.0.9:12300", True, "", T0 + 0.7 * H)  # another machine's
    db.q("UPDATE harmony_machines SET unschedulable = true WHERE id = %s", (m2,))
    db.market(10, T0 + 0.5 * H, computed=8, submitted=6, pow_=2, paid=4)
    reader = db.reader()
    try:
        view = await reader.read([worker(101, 1, m1), worker(102, 2, None)], now=T0 + H, window_s=H)
    finally:
        await reader.close()
    a, b = view.workers[101], view.workers[102]
    assert (a.machine_id, a.held, a.done, a.failed, a.cordoned) == (m1, 0, 2, 1, False)
    assert a.last_error == "error: proof check failed: invalid UpdateProof"
    assert a.last_contact == pytest.approx(T0)
    assert (b.machine_id, b.held, b.cordoned, b.done) == (m2, 2, True, 0)
    assert b.held_by_name == {"PSProve": 1, "bg:PShareRequest": 1}
    t = view.totals
    assert (t.waiting, t.claimed) == (2, 1)  # the failed one (retried) and the last; m2's
    assert t.request_task and t.request_owner == m2
    assert (t.taken, t.computed, t.submitted, t.challenges, t.paid) == (10, 8, 6, 2, 4)
    assert (t.cluster_done, t.cluster_failed) == (3, 1)
    assert t.machines == 3 and own not in {a.machine_id, b.machine_id}


async def test_the_window_and_the_start_of_proving_bound_the_counts(curio_db: CurioDb) -> None:
    db = curio_db
    m1 = db.register("127.0.0.1:12401", "vastui-main-r1", T0)
    for i, ok in enumerate([True, False, True, True]):
        t = db.add_task("PSProve", T0)
        db.claim(m1, [t])
        db.complete(t, "127.0.0.1:12401", ok, "boom", T0 + (i + 1) * H)
    # a proof another node stored first is work done twice, not this machine's failure
    t = db.add_task("PSProve", T0)
    db.claim(m1, [t])
    db.complete(t, "127.0.0.1:12401", False, "no task found", T0 + 3.5 * H)
    reader = db.reader()
    try:
        # proving since T0 + 1.5 h; window of 1.5 h ending at T0 + 4 h: results at 2, 3, 4 h
        w = Worker(1, "127.0.0.1:12401", "vastui-main-r1", m1, T0 + 1.5 * H, T0 + 2.5 * H)
        view = await reader.read([w], now=T0 + 4 * H, window_s=1.5 * H)
    finally:
        await reader.close()
    s = view.workers[1]
    assert (s.done_total, s.failed_total) == (2, 1)  # 2 h failed, 3 h and 4 h done
    assert (s.done, s.failed) == (2, 0)  # the window from 2.5 h


async def test_cordon_and_release_touch_only_this_fleets_row(curio_db: CurioDb) -> None:
    db = curio_db
    mine = db.register("127.0.0.1:12401", "vastui-main-r1", T0)
    theirs = db.register("127.0.0.1:12402", "vastui-blue-r2", T0)  # another fleet, same cluster
    ids = [db.add_task("PSProve", T0) for _ in range(4)]
    db.claim(mine, ids[:2])
    db.claim(theirs, ids[2:])
    reader = db.reader()
    try:
        assert await reader.cordon(worker(1, 1, mine)) == mine
        assert db.unschedulable(mine) is True
        # our runner 2 would be at 127.0.0.1:12402, which the other fleet's node holds
        assert await reader.cordon(worker(2, 2, None)) is None
        assert await reader.release(worker(2, 2, None)) == (0, None)
        assert db.unschedulable(theirs) is False and db.owned(theirs) == ids[2:]
        # a reported machine id that is not the row's: not ours either
        assert await reader.release(worker(1, 1, theirs)) == (0, None)
        assert await reader.release(worker(1, 1, mine), keep_row=True) == (2, mine)
        assert db.owned(mine) == [] and db.unschedulable(mine) is True
        db.claim(mine, ids[:1])
        assert await reader.release(worker(1, 1, mine)) == (1, mine)
        assert db.unschedulable(mine) is None  # its row is gone
        assert db.q("SELECT owner_id FROM harmony_task WHERE id = %s", (ids[0],)) == [(None,)]
        assert await reader.release(worker(1, 1, mine)) == (0, None)  # again: nothing
    finally:
        await reader.close()


async def test_identity_in_use(curio_db: CurioDb) -> None:
    db = curio_db
    other = db.register("127.0.0.1:12403", "operator-node", T0)
    db.register("127.0.0.1:12404", "vastui-main-r4", T0)  # our own, an earlier curio run
    reader = db.reader()
    try:
        line = await reader.identity_in_use(worker(3, 3), T0 + 60)
        assert line is not None and f"live machine {other}" in line
        assert "listen_port_base" in line
        assert await reader.identity_in_use(worker(4, 4), T0 + 60) is None
        assert await reader.identity_in_use(worker(5, 5), T0 + 60) is None
        # a machine without a heartbeat for curio's 10 minutes is dead: its address is free
        assert await reader.identity_in_use(worker(3, 3), T0 + 11 * 60) is None
    finally:
        await reader.close()


async def test_an_absent_cluster_and_a_wrong_password_are_one_line_without_the_secret(
    curio_db: CurioDb,
) -> None:
    from vastsim.postgres import _free_port

    absent = ClusterReader("127.0.0.1", _free_port("127.0.0.1"), user="yugabyte",
                           dbname="yugabyte", password="hunter2-secret")  # fmt: skip
    with pytest.raises(ClusterAbsent) as exc:
        await absent.probe()
    assert "\n" not in str(exc.value) and "hunter2" not in str(exc.value)
    wrong = ClusterReader(curio_db.server.host, curio_db.server.port, user="yugabyte",
                          dbname=curio_db.name, password="hunter2-secret")  # fmt: skip
    with pytest.raises(ClusterError) as exc2:
        await wrong.probe()
    assert not isinstance(exc2.value, ClusterAbsent)
    assert "password authentication failed" in str(exc2.value)
    assert "hunter2" not in str(exc2.value) and "\n" not in str(exc2.value)


async def test_after_a_failure_the_cluster_is_not_tried_again_for_a_while(
    curio_db: CurioDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vastui.engine import cluster

    reader = curio_db.reader()
    good_port = reader.port
    reader.port = _dead_port()
    with pytest.raises(ClusterAbsent):
        await reader.probe()
    reader.port = good_port  # back, but the back-off holds: no connection is tried
    tried: list[int] = []
    real = reader._connect

    async def counting() -> object:
        tried.append(1)
        return await real()

    monkeypatch.setattr(reader, "_connect", counting)
    with pytest.raises(ClusterError, match="tried again in"):
        await reader.probe()
    assert tried == []
    # the back-off over (its clock is time.monotonic unless given): tried, and read
    now = reader._monotonic()
    monkeypatch.setattr(reader, "_monotonic", lambda: now + cluster.BACKOFF_S[1] + 1)
    await reader.probe()
    assert tried == [1]
    await reader.close()


def _dead_port() -> int:
    from vastsim.postgres import _free_port

    return _free_port("127.0.0.1")


async def test_a_release_that_conflicts_with_a_nodes_write_is_tried_again(
    curio_db: CurioDb,
) -> None:
    import asyncio

    import psycopg

    db = curio_db
    mid = db.register("127.0.0.1:12401", "vastui-main-r1", T0)
    ids = [db.add_task("PSProve", T0) for _ in range(2)]
    db.claim(mid, ids)
    # the node writes its heartbeat in a transaction of its own, not committed yet
    node = await psycopg.AsyncConnection.connect(db.server.conninfo(db.name))
    await node.execute(
        "UPDATE harmony_machines SET last_contact = last_contact WHERE id = %s", (mid,)
    )
    reader = db.reader()
    release = asyncio.create_task(reader.release(worker(1, 1, mid)))
    # the release waits on the node's row lock (read from pg_locks)

    async def waiting() -> bool:
        return db.q("SELECT count(*) FROM pg_locks WHERE NOT granted")[0][0] > 0

    await eventually(waiting, 30, "the release waiting on the node's lock")
    await node.commit()  # under repeatable read the release's first try now fails (40001)
    assert await release == (2, mid)
    assert db.owned(mid) == [] and db.unschedulable(mid) is None
    await node.close()
    await reader.close()


@pytest.mark.parametrize(
    ("err", "whose"),
    [
        ("proof check failed: invalid UpdateProof", "machine"),
        ("failed to get proof: Get \"https://mainnet.snass.fsp.sh/v0/proofs/provider/proof/x\": "
         "dial tcp 1.2.3.4:443: connect: connection refused", "machine"),  # its own internet
        ("failed to store proof: 127.0.0.1:5433 (127.0.0.1): dial error: dial tcp "
         "127.0.0.1:5433: connect: connection refused", "controller"),  # the tunnel: ours
        ("failed to connect to `user=yugabyte database=yugabyte`: [::1]:5433 (localhost): dial "
         "error", "controller"),
        ("failed to store proof: conn closed", "controller"),  # pgx, the tunnel gone mid-query
        ("no task found", "neither"),  # work done twice
        ("failed to store proof: 127.0.0.1:54330: refused", "machine"),  # not a tunnel port
    ],
)  # fmt: skip
async def test_whose_failure_a_psprove_error_is(curio_db: CurioDb, err: str, whose: str) -> None:
    db = curio_db
    mid = db.register("127.0.0.1:12401", "vastui-main-r1", T0)
    t = db.add_task("PSProve", T0)
    db.claim(mid, [t])
    db.complete(t, "127.0.0.1:12401", False, err, T0 + 60)
    reader = db.reader()
    try:
        view = await reader.read([worker(1, 1, mid)], now=T0 + 120, window_s=H)
    finally:
        await reader.close()
    s = view.workers[1]
    assert (s.failed, s.failed_controller) == {
        "machine": (1, 0), "controller": (0, 1), "neither": (0, 0),
    }[whose]  # fmt: skip
    assert (s.last_error is not None) == (whose == "machine")


def request_run(db: CurioDb, start: float, end: float) -> None:
    """A bg:PShareRequest run as harmonytask records it (task_type_handler.go:484-486)."""
    from vastui.engine.cluster import to_db_time

    db.q(
        """INSERT INTO harmony_task_history (task_id, name, posted, work_start, work_end, result,
           completed_by_host_and_port, err) VALUES (1, 'bg:PShareRequest', %s, %s, %s, true,
           '127.0.0.1:12401', '')""",
        (to_db_time(start), to_db_time(start), to_db_time(end)),
    )


async def test_requests_past_the_markets_deadline_not_submitted_are_overdue(
    curio_db: CurioDb,
) -> None:
    db = curio_db
    db.market(3, T0, submitted=1)  # 46 min before the reading: two not submitted
    db.market(2, T0 + 30 * 60)  # 16 min before: in time
    reader = db.reader()
    try:
        view = await reader.read([], now=T0 + 46 * 60, window_s=H, deadline_s=45 * 60)
    finally:
        await reader.close()
    assert view.totals.overdue == 2


async def test_the_request_tasks_runs_measure_what_the_market_sends(curio_db: CurioDb) -> None:
    """Two runs in the window (one begun before it: counted from the window's start), one
    before it; requests obtained during a run count, one obtained between runs does not. A
    run's first poll is a batch of what the market held when it began asking: a backlog, not a
    rate, left out with the time before it."""
    db = curio_db
    request_run(db, T0 - 0.5 * H, T0 - 0.2 * H)  # ended before the window
    request_run(db, T0 + 0.9 * H, T0 + 1.25 * H)  # began before the window (T0 + H)
    request_run(db, T0 + 1.5 * H, T0 + 1.75 * H)
    for at in (T0 - 0.3 * H, T0 + 0.95 * H, T0 + 1.05 * H, T0 + 1.1 * H, T0 + 1.2 * H,
               T0 + 1.4 * H, T0 + 1.55 * H, T0 + 1.55 * H + 0.4, T0 + 1.6 * H,
               T0 + 1.7 * H):  # fmt: skip
        db.market(1, at)
    reader = db.reader()
    try:
        view = await reader.read([], now=T0 + 2 * H, window_s=H)
    finally:
        await reader.close()
    t = view.totals
    # from each run's first batch (1.05 h; 1.55 h, two rows 0.4 s apart) to its end
    assert t.request_runs_s == pytest.approx(0.2 * H + 0.2 * H)
    assert t.request_obtained == 4  # 1.1, 1.2; 1.6, 1.7 h (0.95 h is before the window)
    from vastui.engine.autoscale import requested_per_h

    assert requested_per_h(t.request_obtained, t.request_runs_s) == pytest.approx(10.0)
    assert requested_per_h(1, 59.0) is None


async def test_the_request_tasks_runs_one_by_one_as_the_demand_test_reads_them(
    curio_db: CurioDb,
) -> None:
    """The same runs as the window's sum, one by one (vastui/engine/demandshift.py): each from
    its first poll's batch on, that batch left out; a run that ends in the future is not
    believed."""
    db = curio_db
    request_run(db, T0 + 0.9 * H, T0 + 1.25 * H)
    request_run(db, T0 + 1.5 * H, T0 + 1.75 * H)
    request_run(db, T0 + 3.0 * H, T0 + 3.1 * H)  # past the reading's now
    for at in (T0 + 1.05 * H, T0 + 1.1 * H, T0 + 1.2 * H, T0 + 1.55 * H, T0 + 1.55 * H + 0.4,
               T0 + 1.6 * H, T0 + 1.7 * H):  # fmt: skip
        db.market(1, at)
    reader = db.reader()
    try:
        runs = await reader.request_runs(T0, now=T0 + 2 * H)
        later = await reader.request_runs(T0 + 1.5 * H, now=T0 + 2 * H)
    finally:
        await reader.close()
    assert [(round(r.end - T0), round(r.asked_s), r.obtained, r.first) for r in runs] == [
        (round(1.25 * H), round(0.2 * H), 2, 1),
        (round(1.75 * H), round(0.2 * H), 2, 2),
    ]
    assert [round(r.end - T0) for r in later] == [round(1.75 * H)]


async def test_the_markets_pay_over_the_window_from_cumulative_vouchers(curio_db: CurioDb) -> None:
    """A wallet's vouchers are cumulative: the window's pay is its highest in the window less
    its highest before. The ask is proofshare_meta.pprice, attoFIL."""
    db = curio_db
    before = datetime.fromtimestamp(T0, UTC)
    inside = datetime.fromtimestamp(T0 + 1.5 * H, UTC)
    for nonce, cum, at in ((1, 5, before), (2, 10, before), (3, 15, inside), (4, 23, inside)):
        db.q(
            """INSERT INTO proofshare_provider_payments (provider_id, request_cid,
               payment_nonce, payment_cumulative_amount, payment_signature, created_at)
               VALUES (7, %s, %s, %s, %s, %s)""",
            (f"c{nonce}", nonce, str(cum * 10**15), b"sig", at),
        )
    db.q("UPDATE proofshare_meta SET pprice = %s", (str(5 * 10**15),))
    reader = db.reader()
    try:
        view = await reader.read([], now=T0 + 2 * H, window_s=H)
    finally:
        await reader.close()
    assert view.totals.paid_fil == pytest.approx(0.013)  # 0.023 − 0.010 FIL
    assert view.totals.ask_fil == pytest.approx(0.005)
