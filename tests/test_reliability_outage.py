"""The outage and resource invariants (reliability/invariants.py, reliability/resources.py):
given what was observed, the violations."""

from __future__ import annotations

import pytest

from reliability import invariants as inv
from reliability import resources as res
from reliability.invariants import (
    Outage,
    Sample,
    StoreBan,
    StoreInstance,
    StoreIntent,
    StoreStrike,
    StoreView,
    Tolerance,
)

A = "vastui-trial-aaaaaaaaaaaa"
T0 = 1_000_000.0  # engine clock: the outage's start
MIN = 60.0


def api_outage(minutes: float = 30, after: float = 60) -> Outage:
    end = T0 + minutes * MIN
    return Outage("outage_destroy", "the Vast API", T0, end, end + after * MIN, "api")


def ssh_cut(minutes: float = 90, after: float = 60) -> Outage:
    end = T0 + minutes * MIN
    return Outage("cut_off_destroy", "SSH to the workers", T0, end, end + after * MIN, "ssh")


def destroy(iid: int, kind: str, at: float, machine: int = 7) -> StoreIntent:
    return StoreIntent(
        iid, "destroy", "done", None, iid, machine, {"kind": kind}, created_at=at, reason=f"{kind}!"
    )


def subjects(violations: list[inv.Violation]) -> list[tuple[str, str]]:
    return [v.key for v in violations]


# -- destroys decided ---------------------------------------------------------------------------


def test_a_destroy_is_decided_at_its_earliest_record() -> None:
    store = StoreView(
        instances=(
            StoreInstance(1, A, "killed", 7, "offline", "r", killed_at=T0 + 500),
            StoreInstance(2, A, "killed", 8, "vanished", "gone", killed_at=T0 + 50),
            StoreInstance(3, A, "proving", 9),
        ),
        intents=(
            destroy(1, "offline", T0 + 100),
            destroy(1, "offline", T0 + 400),  # a retried decision: the first one counts
            StoreIntent(9, "rent", "done", A, 4, 9, {}, created_at=T0),
        ),
    )
    got = [(d.instance_id, d.kind, d.at) for d in inv.destroys_decided(store)]
    assert got == [(2, "vanished", T0 + 50), (1, "offline", T0 + 100)]


# -- the outage's window ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("outage", "kind", "at", "unhealthy", "expected"),
    [
        # lost contact is never an excuse, during or after
        (ssh_cut(), "prove_unresponsive", T0 + 5 * MIN, {}, ["instance 1"]),
        (ssh_cut(), "tunnel_down", T0 + 95 * MIN, {}, ["instance 1"]),
        (ssh_cut(), "deadline_first_report", T0 + 20 * MIN, {}, ["instance 1"]),
        (api_outage(), "vanished", T0 + 31 * MIN, {}, ["instance 1"]),
        (api_outage(), "deadline_loading", T0 + 31 * MIN, {}, ["instance 1"]),
        # Vast listing it exited or offline, as the observer saw: Vast's own word
        (api_outage(), "offline", T0 + 40 * MIN, {1: "offline"}, []),
        (api_outage(), "exited", T0 + 40 * MIN, {}, ["instance 1"]),  # not seen so
        # the worker's own word: heard over SSH while only the API was out...
        (api_outage(), "prove_overdue", T0 + 10 * MIN, {}, []),
        # ... but during a cut nothing the worker says reaches the engine
        (ssh_cut(), "prove_daemon_died", T0 + 10 * MIN, {}, ["instance 1"]),
        (ssh_cut(), "prove_daemon_died", T0 + 91 * MIN, {}, []),
        # the operator's, or above the target
        (ssh_cut(), "manual", T0 + 10 * MIN, {}, []),
        (ssh_cut(), "surplus", T0 + 10 * MIN, {}, []),
        # outside the window: not the outage's
        (ssh_cut(), "prove_unresponsive", T0 - 1, {}, []),
        (ssh_cut(), "prove_unresponsive", T0 + 151 * MIN, {}, []),
        (ssh_cut(), "prove_unresponsive", T0 + 150 * MIN, {}, ["instance 1"]),  # its edge
    ],
)
def test_destroys_in_an_outage(
    outage: Outage, kind: str, at: float, unhealthy: dict[int, str], expected: list[str]
) -> None:
    store = StoreView(intents=(destroy(1, kind, at),))
    found = inv.outage_harm(outage, store, unhealthy)
    assert [v.subject for v in found] == expected
    assert all(v.invariant == outage.invariant for v in found)


def test_the_violation_says_when_in_the_outage() -> None:
    store = StoreView(intents=(destroy(1, "prove_unresponsive", T0 + 6 * MIN),))
    (v,) = inv.outage_harm(ssh_cut(), store, {})
    assert "6.0 min into the outage" in v.detail and "prove_unresponsive" in v.detail
    store = StoreView(intents=(destroy(1, "tunnel_down", T0 + 93 * MIN),))
    (v,) = inv.outage_harm(ssh_cut(), store, {})
    assert "3.0 min after it ended" in v.detail


def test_strikes_and_bans_in_the_window_unless_their_destroy_was_excused() -> None:
    store = StoreView(
        intents=(destroy(1, "offline", T0 + 40 * MIN, machine=7),),
        strike_rows=(
            StoreStrike(7, 1, "offline", "offline on Vast", T0 + 41 * MIN),  # its kill excused
            StoreStrike(8, 2, "prove_unresponsive", "silent", T0 + 6 * MIN),
            StoreStrike(9, 3, "prove_failing", "before", T0 - MIN),  # before the outage
        ),
        ban_rows=(
            StoreBan(8, "2 strikes", "automatic", T0 + 7 * MIN),
            StoreBan(10, "ignored", "manual", T0 + 7 * MIN),  # the operator's
            StoreBan(7, "2 strikes", "automatic", T0 + 41 * MIN),
        ),
    )
    found = inv.outage_harm(api_outage(), store, {1: "offline"})
    assert subjects(found) == [
        ("outage_destroy", "machine 8 strike prove_unresponsive"),
        ("outage_destroy", "machine 8 ban"),
    ]


def test_a_later_ban_that_counted_the_outages_strike() -> None:
    store = StoreView(
        strike_rows=(
            StoreStrike(8, 2, "prove_unresponsive", "silent", T0 + 6 * MIN),
            StoreStrike(8, 5, "prove_overdue", "slow", T0 + 300 * MIN),
            StoreStrike(9, 6, "prove_overdue", "slow", T0 + 300 * MIN),
        ),
        ban_rows=(
            StoreBan(8, "2 strikes", "automatic", T0 + 300 * MIN),
            StoreBan(9, "2 strikes", "automatic", T0 + 301 * MIN),  # none of the outage's
        ),
    )
    found = inv.outage_harm(ssh_cut(), store, {})
    assert subjects(found) == [
        ("cut_off_destroy", "machine 8 strike prove_unresponsive"),
        ("cut_off_destroy", "machine 8 ban"),
    ]
    assert "one strike the outage's" in found[1].detail


# -- recovery ---------------------------------------------------------------------------------


def test_listed_again_within_the_bound() -> None:
    back = 500.0
    answered = [
        (back - 1, "/api/v0/instances/", 200),  # before the return: not it
        (back + 2, "/api/v0/bundles/", 200),
        (back + 3, "/api/v1/instances/?limit=25", 502),
        (back + 9, "/api/v1/instances/?limit=25", 200),
    ]
    assert inv.listed_again(back, answered, 10.0) == []
    late = inv.listed_again(back, answered, 5.0)
    assert subjects(late) == [("outage_recovery", "instance list")]
    assert "the first after 9s" in late[0].detail
    assert "none" in inv.listed_again(back, answered[:3], 5.0)[0].detail


def test_counters_read_again_after_the_cut() -> None:
    back = T0 + 90 * MIN
    store = StoreView(
        instances=(
            StoreInstance(1, A, "proving", proving_at=T0 - MIN, prod_checked_at=back + 30),
            StoreInstance(2, A, "proving", proving_at=T0 - MIN, prod_checked_at=T0 - 10),
            StoreInstance(3, A, "proving", proving_at=back + 60),  # proving since: not yet read
            StoreInstance(4, A, "killed", proving_at=T0 - MIN),
        )
    )
    assert subjects(inv.counters_read_again(store, back)) == [("outage_recovery", "instance 2")]


def test_recovered_target_counts_from_the_return() -> None:
    back = 100.0
    samples = [Sample(90, 0, 3, excused=True), Sample(101, 2, 3), Sample(150, 2, 3)]
    assert inv.recovered_target(samples, 60.0, back) == []
    late = inv.recovered_target([*samples, Sample(170, 2, 3), Sample(172, 3, 3)], 60.0, back)
    assert subjects(late) == [("outage_recovery", "t=101")]


# -- growth -----------------------------------------------------------------------------------


def series(values: list[float], every: float = 10.0) -> list[tuple[float, float]]:
    return [(i * every, v) for i, v in enumerate(values)]


def test_a_level_series_with_noise_did_not_grow() -> None:
    values = [100 + (i % 5) for i in range(120)]  # a sawtooth: the same peaks in every third
    g = inv.growth("rss_mib", series(values), Tolerance(0.05, 4.0), warmup=0.25)
    assert g.judged and not g.grew
    assert g.middle_max == 104 and g.last_max == 104


def test_a_leak_grows() -> None:
    values = [100 + 0.5 * i for i in range(120)]  # 0.5 MiB per sample
    g = inv.growth("rss_mib", series(values), Tolerance(0.05, 4.0), warmup=0.25)
    assert g.grew
    assert g.slope_per_hour == pytest.approx(0.5 * 360)  # per 10 s sample, per hour
    (v,) = inv.growth_violations([g], "resource_growth")
    assert v.subject == "rss_mib" and "last third" in v.detail


def test_the_warm_up_is_not_judged() -> None:
    # caches filling until t=850 s of 1190 s, level after: growth only without the warm-up
    values = [50 + 2.0 * i for i in range(85)] + [230.0] * 35
    assert not inv.growth("rss_mib", series(values), Tolerance(0.05, 4.0), 0.25).grew
    assert inv.growth("rss_mib", series(values), Tolerance(0.05, 4.0), 0.0).grew


def test_a_peak_in_the_middle_third_then_lower_is_fine() -> None:
    values = [10.0] * 40 + [10, 30, 10] + [10.0] * 37 + [12.0] * 40
    assert not inv.growth("fds", series(values), Tolerance(0.15, 10.0), 0.25).grew


def test_too_short_a_series_is_not_judged() -> None:
    g = inv.growth("fds", series([1, 2, 3, 4, 5]), Tolerance(0.0, 0.0), 0.25)
    assert not g.judged and not g.grew
    assert inv.growth_violations([g], "resource_growth") == []
    assert not inv.growth("fds", [], Tolerance(0.0, 0.0), 0.25).judged


def test_the_detection_limit_is_the_tolerance_over_a_third() -> None:
    values = [100.0] * 120  # 1200 s; a warm-up of 300 s leaves thirds of 300 s
    g = inv.growth("rss_mib", series(values), Tolerance(0.05, 4.0), 0.25)
    assert g.detects_per_hour == pytest.approx((5 + 4) / 297.5 * 3600)


def test_theil_sen_ignores_spikes() -> None:
    points = [(float(t), 2.0 * t) for t in range(50)]
    points[10] = (10.0, 1e6)
    assert inv.theil_sen(points) == pytest.approx(2.0)
    assert inv.theil_sen([(0.0, 1.0)]) is None


# -- the engine's sockets ---------------------------------------------------------------------

NET_TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 100 1
   1: 0100007F:D431 0100007F:1F90 01 00000000:00000000 00:00000000 00000000     0        0 101 1
   2: 0100007F:D432 0100007F:84D1 01 00000000:00000000 00:00000000 00000000     0        0 102 1
   3: 0100007F:D433 0100007F:1538 01 00000000:00000000 00:00000000 00000000     0        0 103 1
   4: 0100007F:1F90 0100007F:D499 01 00000000:00000000 00:00000000 00000000     0        0 104 1
   5: 0100007F:D434 0100007F:84D2 06 00000000:00000000 00:00000000 00000000     0        0 0 1
   6: 0100007F:D435 0100007F:84D3 01 00000000:00000000 00:00000000 00000000     0        0 999 1
   junk
"""


def test_the_engines_sockets_by_what_they_reach() -> None:
    entries = res.parse_net_tcp(NET_TCP)
    assert len(entries) == 7
    assert entries[1] == res.TcpEntry(0xD431, 0x1F90, "01", 101)
    inodes = res.socket_inodes(
        ["socket:[100]", "socket:[101]", "socket:[102]", "socket:[103]", "socket:[104]",
         "/tmp/x.db", "pipe:[7]", "socket:[bad]"]
    )  # fmt: skip
    got = res.classify(entries, inodes, api_ports={0x1F90 + 1}, tunnel_ports={0x1538})
    # its own listener on 8080 and both ends of a connection to it (101 and 104)
    assert got == {"tcp_api": 0, "tcp_tunnel": 1, "tcp_ssh": 1, "tcp_self": 2, "listening": 1}
    got = res.classify(entries, inodes, api_ports={0x1F90}, tunnel_ports={0x1538})
    assert got["tcp_api"] == 1 and got["tcp_self"] == 1  # the 999 socket is another process's


def test_proc_status() -> None:
    text = "Name:\tvastui\nVmRSS:\t  81234 kB\nThreads:\t7\nVmPeak: x\n"
    assert res.proc_status(text) == {"VmRSS": 81234, "Threads": 7}


def test_judging_a_series_of_samples() -> None:
    rows = [
        {"t": i * 10.0, "rss_mib": 80 + 0.4 * i, "fds": 30 + i % 3, "rows_per_instance": None}
        for i in range(120)
    ]
    growths, found = res.judge(rows, 0.25)
    by = {g.metric: g for g in growths}
    assert by["rss_mib"].grew and not by["fds"].grew
    assert not by["rows_per_instance"].judged  # no values: not judged, no violation
    assert subjects(found) == [("resource_growth", "rss_mib")]
