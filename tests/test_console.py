"""The console: actions through a real engine (Pilot), and snapshots of every pane on fixed data."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
from dataclasses import replace
from pathlib import Path

import pytest
from textual.widgets import DataTable, Static

from vastui.backend import Options, client_for_cloud
from vastui.config import Config
from vastui.console.app import VastuiApp
from vastui.console.bridge import FleetBridge, Snapshot
from vastui.console.logview import LogView
from vastui.engine.engine import Engine, EngineSettings
from vastui.engine.ranking import rank_offers
from vastui.sim import ManualClock, SimCloud
from vastui.store import BadEntry, Event, InstanceRecord, LegacyReviewEntry, PerfRecord, Store
from vastui.vast.client import RetryPolicy

T0 = 1_790_000_000.0
PUBKEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIConsoleTestKeyMaterial00000000000000 t"


async def _no_sleep(_s: float) -> None:
    return None


class EngineBridge(FleetBridge):
    """A real engine and store on a simulated cloud with a manual clock; no SSH."""

    def __init__(self, opts: Options, cloud: SimCloud, *, read_only: bool = False) -> None:
        super().__init__(opts, read_only=read_only)
        self.cloud = cloud

    async def start(self) -> None:
        self.store = await Store.open(self.opts.db_path)
        client = client_for_cloud(
            self.cloud, pacing={}, sleep=_no_sleep, retry=RetryPolicy(create_lookups=1)
        )
        engine = Engine(
            self.opts.config, self.store, client, ssh=None, public_key=PUBKEY,
            clock=self.cloud.clock.now, settings=EngineSettings(poll_interval=0.05),
        )  # fmt: skip
        self.runtime = type("R", (), {"engine": engine, "store": self.store, "demo": None})()
        self.mode = "engine"
        self._engine_task = asyncio.create_task(engine.run(self._stop))

    async def close(self) -> None:
        self._stop.set()
        if self._engine_task is not None:
            with contextlib.suppress(Exception):
                await self._engine_task
        if self.engine is not None:
            await self.engine.close()
            await self.engine.client.aclose()
        if self.store is not None:
            await self.store.close()


def make_app(tmp_path: Path, *, read_only: bool = False) -> tuple[VastuiApp, EngineBridge]:
    config = Config()
    opts = Options(config=config, db=tmp_path / "c.db", demo=True)
    bridge = EngineBridge(opts, SimCloud(seed=5, clock=ManualClock(), hosts=120),
                          read_only=read_only)  # fmt: skip
    return VastuiApp(opts, read_only=read_only, bridge=bridge), bridge


async def settle(pilot, app: VastuiApp, until, tries: int = 100) -> None:
    """Let workers and the engine run until a condition holds (bounded, no fixed sleeps)."""
    for _ in range(tries):
        await pilot.pause()
        result = until()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return
        await asyncio.sleep(0.02)
    raise AssertionError("condition not reached")


async def test_deploy_from_offers_pane_rents_and_records(tmp_path: Path):
    app, bridge = make_app(tmp_path)
    async with app.run_test(size=(160, 40)) as pilot:
        await settle(pilot, app, lambda: app.query_one("#offers-table", DataTable).row_count > 0)
        offer_id = int(app._selected_offer().offer.id)
        await pilot.press("d")
        await pilot.pause()
        assert "Rent offer" in str(app.screen.query_one(".dialog-title").render())
        await pilot.press("y")

        async def rented() -> bool:
            return bool(await bridge.store.list_instances())

        await settle(pilot, app, rented)
        [rec] = await bridge.store.list_instances()
        assert rec.offer_id == offer_id and rec.label.startswith("vastui-main-")
        assert [e.kind for e in await bridge.store.list_events(kind="rent")] == ["rent"]
        assert list(bridge.cloud.instances) == [rec.vast_id]


async def test_deploy_cancel_does_nothing(tmp_path: Path):
    app, bridge = make_app(tmp_path)
    async with app.run_test(size=(160, 40)) as pilot:
        await settle(pilot, app, lambda: app.query_one("#offers-table", DataTable).row_count > 0)
        await pilot.press("d", "n")
        await pilot.pause()
        assert await bridge.store.list_instances() == []
        assert bridge.cloud.instances == {}


async def test_ignore_then_unignore_machine(tmp_path: Path):
    app, bridge = make_app(tmp_path)
    async with app.run_test(size=(160, 40)) as pilot:
        await settle(pilot, app, lambda: app.query_one("#offers-table", DataTable).row_count > 0)
        machine = app._selected_offer().offer.machine_id
        await pilot.press("i")
        await pilot.pause()
        app.screen.query_one("Input").value = "GPU errors under load"
        await pilot.press("enter")

        async def banned() -> bool:
            return machine in await bridge.store.bad_machine_ids()

        await settle(pilot, app, banned)
        [entry] = await bridge.store.list_bad()
        assert entry.reason == "GPU errors under load" and entry.source == "manual"
        await pilot.press("4")

        async def listed() -> bool:
            return app.query_one("#bad-table", DataTable).row_count == 1

        await settle(pilot, app, listed)
        await pilot.press("u", "y")

        async def unbanned() -> bool:
            return await bridge.store.bad_machine_ids() == set()

        await settle(pilot, app, unbanned)
        kinds = [e.kind for e in await bridge.store.list_events()]
        assert kinds == ["ban", "unban"]


async def test_destroy_from_instances_pane(tmp_path: Path):
    app, bridge = make_app(tmp_path)
    async with app.run_test(size=(160, 40)) as pilot:
        await settle(pilot, app, lambda: app.query_one("#offers-table", DataTable).row_count > 0)
        await pilot.press("d", "y")

        async def rented() -> bool:
            return app.query_one("#instances-table", DataTable).row_count == 1

        await settle(pilot, app, rented)
        [rec] = await bridge.store.list_instances()
        await pilot.press("2", "x")
        await pilot.pause()
        assert "Destroy instance" in str(app.screen.query_one(".dialog-title").render())
        await pilot.press("y")

        async def destroyed() -> bool:
            got = await bridge.store.get_instance(rec.vast_id)
            return got is not None and got.killed

        await settle(pilot, app, destroyed)
        rec = await bridge.store.get_instance(rec.vast_id)
        assert rec.kill_kind == "manual"
        [event] = await bridge.store.list_events(kind="destroy")
        assert event.instance_id == rec.vast_id
        assert bridge.cloud.instances == {}


async def test_read_only_disables_actions(tmp_path: Path):
    app, bridge = make_app(tmp_path, read_only=True)
    async with app.run_test(size=(160, 40)) as pilot:
        await settle(pilot, app, lambda: app.query_one("#offers-table", DataTable).row_count > 0)
        await pilot.press("d", "i")
        await pilot.pause()
        assert len(app.screen_stack) == 1, "no dialog opens in read-only mode"
        assert "READ-ONLY" in str(app.query_one("#summary", Static).render())
        with pytest.raises(PermissionError):
            await bridge.submit("ignore", machine_id=1, reason="x")


async def test_bad_filter_is_shown_inline_not_applied(tmp_path: Path):
    app, _bridge = make_app(tmp_path)
    async with app.run_test(size=(160, 40)) as pilot:
        await settle(pilot, app, lambda: app.query_one("#offers-table", DataTable).row_count > 0)
        await pilot.press("e")
        await pilot.pause()
        app.screen.query_one("Input").value = "gpu_ram>>12"
        await pilot.press("enter")
        await pilot.pause()
        error = str(app.screen.query_one("#prompt-error", Static).render())
        assert "gpu_ram>>12" in error
        await pilot.press("escape")
        assert app.opts.config.offers.filter == Config().offers.filter


# -- snapshots on fixed data ---------------------------------------------------------------


class FixedBridge(FleetBridge):
    """Fixed data: no engine, no network, no clock."""

    def __init__(self, opts: Options, snapshot: Snapshot, offers, logs=()) -> None:
        super().__init__(opts)
        self._snap = snapshot
        self._fixed_offers = offers
        self._logs = list(logs)
        self.mode = "engine"

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def snapshot(self) -> Snapshot:
        return self._snap

    async def offers(self, force: bool = False):
        return self._fixed_offers

    @property
    def vast_age(self) -> float | None:
        return 12.0

    async def stream_logs(self, rec, source, tail=500):
        lines = [text for src, text in self._logs if src == source]
        if lines:
            yield lines


def fixed_data() -> tuple[Snapshot, list]:
    cloud = SimCloud(seed=3, clock=ManualClock(), hosts=30)
    from vastui.vast.models import Offer

    offers = [Offer.from_api(cloud.offers[i]) for i in sorted(cloud.offers)][:60]
    m = offers
    perf = [
        PerfRecord(m[0].machine_id, m[0].gpu_name, m[0].num_gpus, 41.2, 40.8, 2, T0, 515.9),
        PerfRecord(m[3].machine_id, m[3].gpu_name, m[3].num_gpus, 18.0, 17.5, 1, T0, 257.9),
    ]
    bad = [
        BadEntry(machine_id=m[5].machine_id, reason="benchmark error in warmup: CUDA error 700",
                 source="automatic", host_id=m[5].host_id, gpu_name=m[5].gpu_name,
                 created_at=T0, updated_at=T0, expires_at=T0 + 30 * 86400, strikes=2),
        BadEntry(machine_id=m[6].machine_id, reason="Not good enough (RTX 3090, Poland, PL)",
                 source="manual", host_id=m[6].host_id, gpu_name=m[6].gpu_name,
                 created_at=T0 - 3600, updated_at=T0 - 3600),
    ]  # fmt: skip
    legacy = [
        LegacyReviewEntry(id=1, kind="bad_host", host_id=187302, gpu_name=None, num_gpus=None,
                          bench_rate=None, reason="slow host",
                          legacy_added_at=T0 - 86400 * 90, imported_at=T0, source_path="x.db"),
    ]  # fmt: skip
    ranked = rank_offers(offers, perf, {b.machine_id: b.reason for b in bad}, 0.008)

    def inst(vid, o, state, **kw):
        kw.setdefault("image", "ghcr.io/vastui/curio-cuzk-worker:latest")
        return InstanceRecord(
            vast_id=vid, label=f"vastui-main-{vid:012x}", offer_id=o.id, machine_id=o.machine_id,
            host_id=o.host_id, gpu_name=o.gpu_name, num_gpus=o.num_gpus, dph_total=o.dph_total,
            cpu_ram_gb=o.cpu_ram_gb, geolocation=o.geolocation,
            state=state, created_at=T0 - 3000,
            stage_started_at=T0 - 600, last_seen_at=T0, ssh_host="127.0.0.1", ssh_port=40022,
            min_rate=float(int(o.dph_total / 0.008) + 1), **kw,
        )  # fmt: skip

    instances = [
        inst(3000001, m[0], "proving", bench_rate=40.8, bench_outcome="pass"),
        inst(3000002, m[1], "benchmark"),
        inst(3000003, m[2], "paramfetch", image="ghcr.io/vastui/curio-cuzk-worker:v0.9"),
        inst(3000004, m[3], "killed", bench_rate=17.5, bench_outcome="below_min",
             failed_stage="benchmark", kill_kind="bench_below_min",
             kill_reason="benchmark below_min: 17.5 < 29.0 proofs/h", killed_at=T0 - 100,
             bench_result=json.dumps({"outcome": "below_min", "stage": "done",
                                      "rate_per_hour": 17.5, "proofs_completed": 12,
                                      "proofs_failed": 0, "exit_code": 10})),
        inst(3000005, m[5], "killed", bench_outcome="error", failed_stage="benchmark",
             kill_kind="bench_error", killed_at=T0 - 50,
             kill_reason="benchmark error in warmup: CUDA error 700: illegal memory access",
             error_lines=("thread 'gpu-worker-0' panicked at cuzk-core/src/engine.rs:812:17",
                          "CUDA error 700: an illegal memory access was encountered \x1b[31m[red]")),
    ]  # fmt: skip
    events = [
        Event(id=1, ts=T0 - 3000, kind="rent", instance_id=3000001, machine_id=m[0].machine_id,
              reason="rented", detail={}),
    ]  # fmt: skip
    snap = Snapshot(instances=instances, bad=bad, legacy=legacy, perf=perf, events=events,
                    taken_at=T0)  # fmt: skip
    return snap, ranked


def fixed_app(tmp_path: Path, logs=()) -> VastuiApp:
    snap, ranked = fixed_data()
    config = Config()
    config = replace(config, ui=replace(config.ui, theme="vastui-night"))
    opts = Options(config=config, db=tmp_path / "f.db", demo=True)
    return VastuiApp(opts, bridge=FixedBridge(opts, snap, ranked, logs))


LOGS = [
    ("cuzk", "2026-03-13T17:17:02.321000Z  INFO cuzk_daemon: cuzk-daemon ready, on 0.0.0.0:9820"),
    ("benchmark", "[bench] warmup proof 1/1"),
    ("cuzk", "2026-03-13T17:19:40.100000Z ERROR cuzk_core::engine: CUDA error 2: out of memory"),
    ("benchmark", "  [1/12] COMPLETED — 118.3s (prove=41230 ms, queue=2 ms)"),
]  # fmt: skip


async def _wait_loaded(pilot) -> None:
    app = pilot.app
    for _ in range(50):
        await pilot.pause()
        if app.query_one("#offers-table", DataTable).row_count and app.snapshot.instances:
            return
    raise AssertionError("fixed data never loaded")


@pytest.mark.parametrize("size", [(80, 24), (200, 50)])
def test_snapshot_offers(snap_compare, tmp_path: Path, size):
    assert snap_compare(fixed_app(tmp_path), terminal_size=size, run_before=_wait_loaded)


def test_snapshot_instances(snap_compare, tmp_path: Path):
    async def before(pilot) -> None:
        await _wait_loaded(pilot)
        await pilot.press("2")

    assert snap_compare(fixed_app(tmp_path), terminal_size=(160, 30), run_before=before)


def test_snapshot_detail_of_a_failed_instance(snap_compare, tmp_path: Path):
    async def before(pilot) -> None:
        await _wait_loaded(pilot)
        await pilot.press("2")
        table = pilot.app.query_one("#instances-table", DataTable)
        table.move_cursor(row=table.get_row_index("3000005"))
        await pilot.press("enter")

    assert snap_compare(fixed_app(tmp_path), terminal_size=(160, 45), run_before=before)


def test_snapshot_logs(snap_compare, tmp_path: Path):
    async def before(pilot) -> None:
        await _wait_loaded(pilot)
        await pilot.press("2")
        table = pilot.app.query_one("#instances-table", DataTable)
        table.move_cursor(row=table.get_row_index("3000001"))
        await pilot.press("l")
        for _ in range(20):
            await pilot.pause()
            if pilot.app.query_one(LogView).line_count >= len(LOGS):
                break

    assert snap_compare(fixed_app(tmp_path, LOGS), terminal_size=(160, 24), run_before=before)


def test_snapshot_bad_list(snap_compare, tmp_path: Path):
    async def before(pilot) -> None:
        await _wait_loaded(pilot)
        await pilot.press("4")

    assert snap_compare(fixed_app(tmp_path), terminal_size=(160, 24), run_before=before)


def test_snapshot_deploy_confirm(snap_compare, tmp_path: Path):
    async def before(pilot) -> None:
        await _wait_loaded(pilot)
        await pilot.press("d")

    assert snap_compare(fixed_app(tmp_path), terminal_size=(120, 30), run_before=before)


def test_snapshot_ignore_prompt(snap_compare, tmp_path: Path):
    async def before(pilot) -> None:
        await _wait_loaded(pilot)
        await pilot.press("i")

    assert snap_compare(fixed_app(tmp_path), terminal_size=(120, 30), run_before=before)


async def test_untrusted_text_is_never_markup_or_escapes(tmp_path: Path):
    app = fixed_app(tmp_path)
    async with app.run_test(size=(160, 45)) as pilot:
        await _wait_loaded(pilot)
        await pilot.press("2")
        table = app.query_one("#instances-table", DataTable)
        table.move_cursor(row=table.get_row_index("3000005"))
        await pilot.press("enter")
        await pilot.pause()
        diagnosis = str(app.screen.query_one("#detail-diagnosis", Static).render())
        assert "[red]" in diagnosis and "\x1b" not in diagnosis
