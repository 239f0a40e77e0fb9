"""The demo's simulated cloud across runs: a world whose machines stay, a market that changes
with the seed, instance ids that never repeat an earlier run's, offers that come back when their
instance ends, hosts that go offline as often as their listed reliability says, and enough
viable offers to reach a target.

Deterministic: ManualClock, no sleeps; the demo's cloud is built by the runtime itself.
"""

from __future__ import annotations

import logging

import pytest

from vastsim import ManualClock, SimCloud
from vastsim.demo import DEMO_WORLD_SEED, make_demo_cloud
from vastsim.outages import OUTAGE_HORIZON_S
from vastsim.world import demo_cloud
from vastui.config import Config
from vastui.domain.machines import PerfRecord
from vastui.domain.worker import InstanceRecord
from vastui.engine.ranking import rank_offers
from vastui.engine.runtime import RunOptions, demo_history, demo_request
from vastui.store import Store
from vastui.vast.models import Offer
from vastui.vast.query import build_search_body

T0 = 1_790_000_000.0
BODY = {"rentable": {"eq": True}, "order": [["id", "asc"]], "type": "on-demand"}


def market(seed: int, hosts: int = 60, **kw) -> SimCloud:
    return SimCloud(seed=seed, world_seed=DEMO_WORLD_SEED, clock=ManualClock(T0), hosts=hosts, **kw)


def listed(cloud: SimCloud) -> dict[int, float]:
    return {o["id"]: o["dph_total"] for o in cloud.search(dict(BODY, limit=5000))["offers"]}


def rent(cloud: SimCloud, offer_id: int) -> int:
    return cloud.create(offer_id, {"image": "img", "label": "vastui-main-000000000001"})[
        "new_contract"
    ]


# -- the market: one world, a market per seed ----------------------------------------------------


def test_the_same_seed_gives_the_same_market_and_another_seed_another():
    a, again, b = market(1), market(1), market(2)
    assert listed(a) == listed(again)
    assert listed(a) != listed(b)
    # Not only prices: which machines are offered changes too.
    assert set(listed(a)) != set(listed(b))
    assert 0.5 < len(a.available) / len(a.offers) < 0.8


def test_machines_and_offer_ids_stay_the_same_whatever_the_seed():
    """So the per-machine record (and the bad list) learned in one run applies in the next."""
    a, b = market(1), market(2)
    assert set(a.machines_by_id) == set(b.machines_by_id)
    assert set(a.offers) == set(b.offers)
    for offer_id, offer in a.offers.items():
        other = b.offers[offer_id]
        assert (offer["machine_id"], offer["num_gpus"]) == (other["machine_id"], other["num_gpus"])
    for machine_id, machine in a.machines_by_id.items():
        assert machine.rate_for() == b.machines_by_id[machine_id].rate_for()


def test_a_seed_alone_lists_its_whole_world_at_the_generators_prices():
    alone = SimCloud(seed=DEMO_WORLD_SEED, clock=ManualClock(T0), hosts=60)
    assert alone.available == set(alone.offers)
    assert alone.world_seed == DEMO_WORLD_SEED


def default_search(config: Config) -> dict:
    """The body the engine sends for the configured filter (the disk we rent priced in)."""
    return build_search_body(
        config.offers.filter, order=config.offers.order, limit=config.offers.limit,
        allocated_storage=config.fleet.disk_gb,
    )  # fmt: skip


@pytest.fixture
def reference_world(monkeypatch):
    """The world as vastui's priors assume it: every GPU model's hidden mean rate is the
    reference figure (vastsim.market.world_rate_factor 1), not off it by the world's own
    factor. For the properties that hold only while the priors are right."""
    from vastsim import market as sim_market

    monkeypatch.setattr(sim_market, "RATE_FACTOR_RANGE", (1.0, 1.0))


def top_picks(seed: int) -> tuple[int, int, int, int]:
    """(viable offers, offers that truly pay, offers in all, truly paying among the ranking's
    first six viable picks) of the demo's market of ``seed``, nothing measured yet."""
    config = Config()
    cloud = market(seed, hosts=400)
    offers = [Offer.from_api(o) for o in cloud.search(default_search(config))["offers"]]
    ranked = rank_offers(offers, [], {}, config.fleet.max_cost_per_proof)
    viable = [r for r in ranked if r.viable]
    truth = [cloud.offer_machine[r.offer.id].rate_for(r.offer.num_gpus) for r in ranked]
    paying = sum(t >= r.min_rate for t, r in zip(truth, ranked, strict=True))
    good = sum(
        cloud.offer_machine[r.offer.id].rate_for(r.offer.num_gpus) >= r.min_rate for r in viable[:6]
    )
    return len(viable), paying, len(ranked), good


def test_the_demo_market_has_viable_offers_and_top_picks_beat_the_market():
    """The economics of the demo's own world, whose GPU models are off vastui's priors (by
    -20 % to +19 % in world 7): at the default $0.008/proof some offers pay off, and the
    ranking's first picks pay off at least three times as often as the market's offers."""
    for seed in (1, 2, 3):
        viable, paying, total, good = top_picks(seed)
        assert viable >= 10, seed
        assert 0.05 <= paying / total <= 0.4, (seed, paying, total)
        assert good / 6 >= 3 * paying / total, (seed, good, paying, total)


def test_where_the_priors_are_right_most_top_picks_truly_pay_off(reference_world):
    """With every model at its reference rate the ranking's prior for unknown machines is
    honest enough that most of its first picks really do pay."""
    for seed in (1, 2, 3):
        viable, paying, total, good = top_picks(seed)
        assert viable >= 10, seed
        assert 0.05 <= paying / total <= 0.4, (seed, paying, total)
        assert good >= 4, (seed, good)


def test_learning_from_measured_machines_leaves_viable_offers(reference_world):
    """The regression of "2 of 3 workers, then nothing": rent the best viable offer, measure its
    true rate into the record, re-rank; three good machines are found quickly and what the
    ranking learned from their peers still leaves offers worth renting (priors right)."""
    learn_three_good_machines((1, 2, 3))


@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason="found by the neutral world: in world 7, market 2, the first RTX 4090 measured is "
    "a slow one and the ranking trusts that single peer for every 4090 (model(1): 12.4/h a GPU "
    "where the good ones do 29-30), so after 1 good machine in 3 nothing is viable while 8 "
    "offers would pay",
)
def test_learning_leaves_viable_offers_when_the_priors_are_off():
    learn_three_good_machines((2,))


def learn_three_good_machines(seeds: tuple[int, ...]) -> None:
    config = Config()
    body = default_search(config)
    for seed in seeds:
        # no other bidders: which machines on-demand renters hold is not what is tested here
        cloud = market(seed, hosts=400, bid_pressure=0.0)
        offers = [Offer.from_api(o) for o in cloud.search(body)["offers"]]
        perf: list[PerfRecord] = []
        good: list[int] = []
        for step in range(8):
            ranked = rank_offers(offers, perf, {}, config.fleet.max_cost_per_proof)
            tried = {p.machine_id for p in perf}
            pick = next((r for r in ranked if r.viable and r.offer.machine_id not in tried), None)
            assert pick is not None, (seed, "nothing viable left after", len(good), "good")
            o = pick.offer
            rate = cloud.offer_machine[o.id].rate_for(o.num_gpus)
            perf.append(PerfRecord(o.machine_id, o.gpu_name, o.num_gpus, rate, rate, 1,
                                   T0 + step, o.cpu_ram_gb))  # fmt: skip
            if rate >= pick.min_rate:
                good.append(o.machine_id)
            if len(good) == 3:
                break
        assert len(good) == 3 and len(perf) <= 5, (seed, len(perf))
        ranked = rank_offers(offers, perf, {}, config.fleet.max_cost_per_proof)
        # (thin after one slow peer of a GPU model: the ranking trusts a single peer fully)
        assert any(r.viable and r.offer.machine_id not in good for r in ranked), seed


# -- instances: ids that only grow, offers that come back ----------------------------------------


def test_instance_ids_stay_above_a_floor_even_for_the_same_seed():
    first = market(5)
    ids = [rent(first, oid) for oid in sorted(first.available)[:3]]
    carried = market(5, instance_ids_after=max(ids))
    new = [rent(carried, oid) for oid in sorted(carried.available)[:3]]
    assert min(new) > max(ids)
    assert new == sorted(new)


def test_without_the_floor_the_same_seed_reuses_ids():
    """What the floor is for: a second run of the same seed hands out the first run's ids."""
    a, b = market(5), market(5)
    ids_a = [rent(a, oid) for oid in sorted(a.available)[:2]]
    ids_b = [rent(b, oid) for oid in sorted(b.available)[:2]]
    assert ids_a == ids_b


async def test_a_new_demo_cloud_gives_no_id_an_earlier_run_gave(store: Store, caplog):
    """The runtime builds the demo cloud from the database: ids above every id it holds and a
    clock that starts after the latest time it recorded."""
    old = [3_456_789, 3_056_572]
    for i, vast_id in enumerate(old):
        await store.instances.upsert(
            InstanceRecord(vast_id=vast_id, label=f"vastui-main-{vast_id:012x}", machine_id=70348,
                           state="loading", created_at=T0 + i),
            now=T0 + i,
        )  # fmt: skip
    await store.mark_killed(3_456_789, "vanished", "instance disappeared from vast", now=T0 + 900)
    assert await demo_history(store) == (3_456_789, T0 + 900)

    caplog.set_level(logging.INFO, logger="vastui.engine")
    run = RunOptions(seed=5, machine_fault_rate=0.0)
    cloud = demo_cloud(await demo_request(store, run))
    assert cloud.seed == 5 and cloud.world_seed == DEMO_WORLD_SEED
    assert "demo market seed 5 (run it again with --seed 5)" in caplog.text
    assert cloud.clock.now() >= T0 + 900 + 60
    ids = [rent(cloud, oid) for oid in sorted(cloud.available)[:4]]
    assert min(ids) > max(old)


async def test_a_demo_without_a_seed_draws_one_and_says_which(store: Store, caplog):
    caplog.set_level(logging.INFO, logger="vastui.engine")
    cloud = demo_cloud(await demo_request(store, RunOptions(seed=None)))
    assert 1 <= cloud.seed < 1_000_000
    assert f"demo market seed {cloud.seed} (run it again with --seed {cloud.seed})" in caplog.text
    assert make_demo_cloud(None, hosts=5).world_seed == DEMO_WORLD_SEED


def test_a_destroyed_instance_gives_its_offer_back_to_the_market():
    cloud = market(3)
    offer_id = sorted(cloud.available)[0]
    iid = rent(cloud, offer_id)
    assert offer_id not in listed(cloud)
    assert cloud.offers[offer_id]["rented"] is True
    cloud.destroy(iid)
    assert offer_id in listed(cloud)
    assert cloud.offers[offer_id]["rentable"] is True and cloud.offers[offer_id]["rented"] is False
    # ... and the same machine can be rented again, under a new instance id.
    assert rent(cloud, offer_id) > iid


def rent_everything(cloud: SimCloud) -> list[int]:
    ids = []
    for offer_id in sorted(cloud.available):
        if offer_id in cloud.available:  # a slice of a machine rented whole is gone
            ids.append(rent(cloud, offer_id))
    return ids


def test_a_host_goes_offline_as_often_as_its_listed_reliability_says():
    """The outage model (vastsim.outages: reliability = the chance a machine stays up a
    day): over every offer of the demo's market, the outages within a day of running are as
    many as the listed reliabilities expect, not the flat third of rentals it once was."""
    cloud = SimCloud(
        seed=4, world_seed=DEMO_WORLD_SEED, clock=ManualClock(T0), hosts=400, host_maintenance=1.0
    )
    ids = rent_everything(cloud)
    insts = [cloud.instances[i] for i in ids]
    assert len(insts) > 1000
    expected = sum(1.0 - i.offer["reliability"] for i in insts)
    within_day = [i for i in insts if i.fail is not None and i.fail[1] <= 86400.0]
    assert abs(len(within_day) - expected) <= 4 * expected**0.5, (len(within_day), expected)
    assert all(i.fail is None or (i.fail[0] == "offline" and i.fail[1] <= OUTAGE_HORIZON_S)
               for i in insts)  # fmt: skip
    # The less reliable half of the machines loses its hosts more often than the other half.
    by_reliability = sorted(insts, key=lambda i: i.offer["reliability"])
    half = len(by_reliability) // 2
    low, high = (sum(i.fail is not None for i in part)
                 for part in (by_reliability[:half], by_reliability[half:]))  # fmt: skip
    assert low > 2 * high, (low, high)


def test_an_outage_takes_the_host_offline_at_its_time_and_a_scale_of_0_never():
    clock = ManualClock(T0)
    # A fault-rate scale far above the demo's: the least reliable machine fails within hours.
    cloud = SimCloud(
        seed=4, world_seed=DEMO_WORLD_SEED, clock=clock, hosts=30, host_maintenance=200.0
    )
    offer_id = min(cloud.available, key=lambda o: cloud.offers[o]["reliability"])
    inst = cloud.instances[rent(cloud, offer_id)]
    assert inst.fail is not None and inst.fail[0] == "offline"
    clock.set(inst.t_running + inst.fail[1] - 1)
    assert cloud.status_of(inst)[0] == "running"
    clock.set(inst.t_running + inst.fail[1])
    assert cloud.status_of(inst)[0] == "offline"
    quiet = market(4, hosts=30)
    assert all(quiet.instances[i].fail is None for i in rent_everything(quiet))


@pytest.mark.parametrize("seed", [1, 2])
def test_machine_faults_belong_to_the_machine_not_to_the_run(seed, tmp_path):
    from vastsim.workers import SimWorkerHost

    hosts = [SimWorkerHost(market(s, hosts=30), tmp_path, speed=1.0) for s in (seed, seed + 10)]
    machine_ids = sorted(hosts[0].cloud.machines_by_id)
    assert [hosts[0].fault_for(m) for m in machine_ids] == [
        hosts[1].fault_for(m) for m in machine_ids
    ]


def test_the_snap_invalid_gpu_is_drawn_last_and_injectable(tmp_path, monkeypatch):
    """The fault a later table row adds moves no other machine's draw (FAULTS is walked in
    order); a test injects it like any other (SimWorkerHost.fault_overrides)."""
    from vastsim import workers

    host = workers.SimWorkerHost(market(2, hosts=60), tmp_path, speed=1.0, machine_fault_rate=3.0)
    machine_ids = sorted(host.cloud.machines_by_id)
    now = {m: host.fault_for(m) for m in machine_ids}
    assert workers.FAULTS[-1][0] == "snap_invalid"
    monkeypatch.setattr(workers, "FAULTS", workers.FAULTS[:-1])
    before = {m: host.fault_for(m) for m in machine_ids}
    changed = [m for m in machine_ids if now[m] != before[m]]
    assert all(now[m]["fault"] == "snap_invalid" and before[m] == {"fault": "none"}
               for m in changed)  # fmt: skip
    host.fault_overrides[machine_ids[0]] = "snap_invalid"
    assert host.fault_for(machine_ids[0]) == {"fault": "snap_invalid"}


def test_a_machines_hidden_fault_does_not_move_its_price():
    """No source says faulty machines ask less: a moment's prices are the same whatever the
    world seed (which alone decides the faults), each in its GPU model's range."""
    from vastsim import market as sim_market

    machines = market(6, hosts=60).machines
    prices = sim_market.market_moment(machines, 6, DEMO_WORLD_SEED, listed_share=1.0)
    for other_world in (DEMO_WORLD_SEED + 1, 12345):
        assert sim_market.market_moment(machines, 6, other_world, listed_share=1.0) == prices
    for m in machines:
        model = sim_market.GPU_BY_NAME[m.gpu_name]
        price = prices[m.machine_id]
        assert price is not None and model.dph_lo <= price <= model.dph_hi
