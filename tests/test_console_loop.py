"""The operator's loop in the console (Pilot): the strip explains the fleet, an attached console
notices a gone engine, the detail view stays live, help follows the keymap, quitting asks, and
the small things that used to fail silently say what happened."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Static

from tests.helpers import settle
from tests.test_console import make_app
from vastsim.console_fixtures import FixedSource, fixed_app, fixed_data
from vastui.backend import Options
from vastui.config import Config
from vastui.console import detail
from vastui.console.app import VastuiApp, check_keymap, detached_text
from vastui.console.detail import DetailScreen
from vastui.console.dialogs import ConfirmScreen, PromptScreen, QuitScreen
from vastui.console.help import HelpScreen
from vastui.console.rowtable import RowTable
from vastui.console.sources import AttachedSource
from vastui.domain.engine_state import EngineStatus
from vastui.domain.worker import InstanceRecord
from vastui.store import Store


def strip(app: VastuiApp) -> str:
    return str(app.query_one("#summary", Static).render())


async def loaded(pilot: Any) -> None:
    app = pilot.app
    await settle(pilot, app, lambda: app.query_one("#offers-table", RowTable).row_count > 0)


def status(**kw: Any) -> EngineStatus:
    base = EngineStatus(
        target=3, workers=2, by_stage={"proving": 2}, reason_kind="no_viable_offer",
        reason="no viable offer: best 4711 RTX 4090 $0.0091/proof > max $0.0080",
        best={"offer_id": 4711}, dry_run=False, updated_at=1_790_000_000.0,
    )  # fmt: skip
    return replace(base, **kw)


# -- the strip: target, actual and why ---------------------------------------------------------


async def test_strip_shows_target_and_reason_and_follows_the_cause(tmp_path: Path) -> None:
    app = fixed_app(tmp_path)
    source = app.source
    assert isinstance(source, FixedSource)
    source.fixed_snapshot = replace(source.fixed_snapshot, engine_status=status())
    async with app.run_test(size=(200, 50)) as pilot:
        await loaded(pilot)
        await settle(pilot, app, lambda: "workers 2/3" in strip(app))
        assert "below target: no viable offer: best 4711 RTX 4090 $0.0091/proof" in strip(app)
        assert "spent $" in strip(app) and "rejected" in strip(app)
        # the cause changes: the $/h cap now holds the fleet back
        source.fixed_snapshot = replace(
            source.fixed_snapshot,
            engine_status=status(
                reason_kind="fleet_dph_cap", reason="fleet $/h cap: $4.00 + $0.30 > $4.00"
            ),
        )
        await settle(pilot, app, lambda: "fleet $/h cap" in strip(app))
        assert "no viable offer" not in strip(app)
        source.fixed_snapshot = replace(
            source.fixed_snapshot,
            engine_status=status(workers=3, reason_kind="at_target", reason="at target"),
        )
        await settle(pilot, app, lambda: "workers 3/3" in strip(app))
        assert "below target" not in strip(app)
        assert "CUT OFF" not in strip(app)
        # cut off from its workers for 12 minutes: said on the first line, whatever the reason
        source.fixed_snapshot = replace(
            source.fixed_snapshot,
            engine_status=status(
                workers=3, reason_kind="at_target", reason="at target",
                cut_off="instance 7: lotus api: refused", cut_off_since=1_790_000_000.0 - 720,
            ),
        )  # fmt: skip
        await settle(pilot, app, lambda: "CUT OFF 12m" in strip(app))
        assert strip(app).index("CUT OFF") < strip(app).index("\n")


# -- attached: a gone engine is noticed, and commands are refused ---------------------------


class Lease:
    """A lease held by a fake headless engine that heartbeats until told to stop."""

    def __init__(self, db: Path, *, pid: int = 4242, hostname: str = "ctl") -> None:
        self.db, self.pid, self.hostname = db, pid, hostname
        self.task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Lease:
        async with await Store.open(self.db) as store:
            await store.lease.acquire(
                "headless-1", pid=self.pid, hostname=self.hostname, mode="headless", ttl=600
            )
        self.task = asyncio.create_task(self._beat())
        return self

    async def _beat(self) -> None:
        async with await Store.open(self.db) as store:
            while True:
                await store.lease.renew("headless-1", ttl=600)
                await asyncio.sleep(0.2)

    async def stop(self, *, release: bool) -> None:
        assert self.task is not None
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
        if release:
            async with await Store.open(self.db) as store:
                await store.lease.release("headless-1")

    async def __aexit__(self, *exc: object) -> None:
        if self.task is not None and not self.task.done():
            await self.stop(release=False)


async def attached_app(tmp_path: Path) -> tuple[VastuiApp, AttachedSource]:
    """A console attached to whatever engine holds the lease when it starts."""
    opts = Options(config=Config(), db=tmp_path / "a.db", demo=True)
    source = AttachedSource(opts)
    return VastuiApp(opts, source), source


async def test_detached_when_the_engine_exits_and_commands_are_refused(tmp_path: Path) -> None:
    app, source = await attached_app(tmp_path)
    async with Lease(tmp_path / "a.db") as lease, app.run_test(size=(200, 50)) as pilot:
        await loaded(pilot)
        await settle(pilot, app, lambda: "ATTACHED" in strip(app))
        await lease.stop(release=True)  # a clean exit releases the lease
        await settle(pilot, app, lambda: "DETACHED" in strip(app))
        assert "ATTACHED" not in strip(app)
        # said as it was: a clean stop, not a lapse; the strip's state line says no engine
        # supervises the fleet (what it last published is history)
        assert source.detached_reason == "it stopped and released its lease"
        await settle(pilot, app, lambda: "no engine (it stopped" in strip(app))
        assert "nothing supervises the fleet" in strip(app)
        assert detached_text(source.detached_reason) == (
            "the headless engine is gone: it stopped and released its lease. Nothing "
            "supervises the fleet, and commands are refused until an engine runs again."
        )
        await pilot.press("d")
        await pilot.pause()
        assert not app.screen.query(".dialog-title"), "no dialog for a command nobody runs"
        with pytest.raises(ConnectionError, match="no engine to carry this out"):
            await source.submit("ignore", machine_id=1, reason="x")
    async with await Store.open(tmp_path / "a.db") as store:
        assert await store.commands.claim() == [], "nothing was queued for a later engine"


async def test_detached_when_the_engine_process_is_gone(tmp_path: Path) -> None:
    # SIGKILLed on this host: its lease row stays until it lapses, its pid is gone at once.
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    app, source = await attached_app(tmp_path)
    lease = Lease(tmp_path / "a.db", pid=proc.pid, hostname=socket.gethostname())
    async with lease, app.run_test(size=(200, 50)) as pilot:
        await loaded(pilot)
        await settle(pilot, app, lambda: "DETACHED" in strip(app))
        assert "not running" in (source.detached_reason or "")


async def test_detached_when_the_heartbeat_is_stale(tmp_path: Path) -> None:
    app, source = await attached_app(tmp_path)
    async with await Store.open(tmp_path / "a.db") as store:
        # another host's engine whose last heartbeat was a minute ago (lease not yet lapsed)
        await store.lease.acquire(
            "far", pid=1, hostname="elsewhere", mode="headless", ttl=600, now=time.time() - 60
        )
    async with app.run_test(size=(200, 50)) as pilot:
        await loaded(pilot)
        await settle(pilot, app, lambda: "DETACHED" in strip(app))
        assert "no heartbeat" in (source.detached_reason or "")


async def test_a_waiting_command_gives_up_when_the_engine_goes(tmp_path: Path) -> None:
    app, source = await attached_app(tmp_path)
    async with Lease(tmp_path / "a.db") as lease, app.run_test(size=(200, 50)) as pilot:
        await loaded(pilot)
        command_id = await source.submit("ignore", machine_id=5, reason="x")
        waiting = asyncio.create_task(source.wait_command(command_id, timeout=60))
        await lease.stop(release=True)
        await settle(pilot, app, lambda: waiting.done())
        ok, text = waiting.result()
        assert not ok and "the engine is gone" in text


# -- the detail view is live --------------------------------------------------------------


async def test_detail_view_changes_without_a_key(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(detail, "RECORD_EVERY", 0.05)
    monkeypatch.setattr(detail, "CUZK_EVERY", 0.05)
    app = fixed_app(tmp_path)
    source = app.source
    assert isinstance(source, FixedSource)
    async with app.run_test(size=(200, 50)) as pilot:
        await loaded(pilot)
        await pilot.press("2")
        await settle(pilot, app, lambda: app.query_one("#instances-table", RowTable).row_count)
        await pilot.press("enter")  # the first row: a proving worker
        await settle(pilot, app, lambda: isinstance(app.screen, DetailScreen))
        screen = app.screen
        assert isinstance(screen, DetailScreen)
        vast_id = screen.rec.vast_id
        await settle(pilot, app, lambda: screen.cuzk_reads >= 3)  # polled, no key pressed
        meta = lambda: screen.shown[0] if screen.shown else ""  # noqa: E731
        assert "proving / proving" in meta()
        moved = [
            replace(r, state="killed", failed_stage="proving", killed_at=r.created_at + 60,
                    kill_kind="prove_below_min", kill_reason="measured 20.0 < 29.0 proofs/h")
            if r.vast_id == vast_id else r
            for r in source.fixed_snapshot.instances
        ]  # fmt: skip
        source.fixed_snapshot = replace(source.fixed_snapshot, instances=moved)
        diagnosis = lambda: screen.shown[1] if screen.shown else ""  # noqa: E731
        await settle(pilot, app, lambda: "prove_below_min" in diagnosis())
        assert "killed / proving" in meta()


# -- help follows the keymap ------------------------------------------------------------------


async def test_help_lists_a_remapped_key_and_the_key_works(tmp_path: Path) -> None:
    snap, ranked = fixed_data()
    config = Config()
    config = replace(config, ui=replace(config.ui, keymap={"offers-deploy": "D", "help": "f1"}))
    opts = Options(config=config, db=tmp_path / "k.db", demo=True)
    app = VastuiApp(opts, FixedSource(opts, snap, ranked))
    async with app.run_test(size=(200, 50)) as pilot:
        await loaded(pilot)
        await pilot.press("f1")
        await settle(pilot, app, lambda: isinstance(app.screen, HelpScreen))
        rows = app.screen.rows  # type: ignore[attr-defined]
        assert ("Offers", "D", "Deploy") in rows
        assert not any(section == "Offers" and keys == "d" for section, keys, _ in rows)
        assert ("Everywhere", "f1", "Help") in rows
        await pilot.press("escape")
        await pilot.press("D")  # the remapped key deploys
        await settle(pilot, app, lambda: "Rent offer" in str(app.screen.query(".dialog-title")
                                                              .first().render()))  # fmt: skip


def test_every_binding_of_the_console_has_an_id() -> None:
    from textual.binding import Binding

    from vastui.console.app import binding_classes, binding_ids

    classes = binding_classes()
    assert {ConfirmScreen, PromptScreen, QuitScreen} <= set(classes)
    for cls in classes:
        for binding in cls.BINDINGS:
            assert isinstance(binding, Binding) and binding.id, (cls.__name__, binding)
    assert {"confirm-yes", "confirm-no", "prompt-cancel", "quit-handover"} <= binding_ids()


async def test_a_dialogs_key_can_be_remapped(tmp_path: Path) -> None:
    snap, ranked = fixed_data()
    config = Config()
    config = replace(config, ui=replace(config.ui, keymap={"confirm-yes": "j"}))
    opts = Options(config=config, db=tmp_path / "k.db", demo=True)
    check_keymap(opts)  # a known id
    source = FixedSource(opts, snap, ranked)
    app = VastuiApp(opts, source)
    async with app.run_test(size=(200, 50)) as pilot:
        await loaded(pilot)
        offer = app.pane("offers").selected_offer()
        assert offer is not None
        await pilot.press("d")
        await settle(pilot, app, lambda: app.screen.query(".dialog-title"))
        await pilot.press("y")  # no longer the key
        await pilot.pause()
        assert source.submitted == [] and app.screen.query(".dialog-title")
        await pilot.press("j")
        await settle(pilot, app, lambda: source.submitted)
        assert source.submitted == [("deploy", {"offer_id": offer.offer.id})]


async def test_footer_shows_the_focused_panes_keys(tmp_path: Path) -> None:
    app = fixed_app(tmp_path)
    async with app.run_test(size=(200, 50)) as pilot:
        await loaded(pilot)
        shown = {b.binding.action for b in app.screen.active_bindings.values() if b.binding.show}
        assert {"deploy", "edit_filter", "sort"} <= shown and "destroy" not in shown
        await pilot.press("2")
        await pilot.pause()
        shown = {b.binding.action for b in app.screen.active_bindings.values() if b.binding.show}
        assert {"destroy", "copy_ssh", "logs"} <= shown and "deploy" not in shown


async def test_sorted_column_is_marked(tmp_path: Path) -> None:
    app = fixed_app(tmp_path)
    async with app.run_test(size=(200, 50)) as pilot:
        await loaded(pilot)
        table = app.query_one("#offers-table", RowTable)
        labels = lambda: [str(c.label) for c in table.columns.values()]  # noqa: E731
        assert "Exp $/p ▲" in labels()
        await pilot.press("S")
        await pilot.pause()
        assert "Exp $/p ▼" in labels()
        await pilot.press("s")
        await pilot.pause()
        assert "Min ▼" in labels() and "Exp $/p" in labels()
        rates = [app.pane("offers").sort_value(r[2], "min") for r in app.pane("offers")._rows]
        shown = [int(str(table.get_row_at(i)[4])) for i in range(table.row_count)]
        assert shown == sorted(shown, reverse=True) and len(rates) == len(shown)


# -- quitting -------------------------------------------------------------------------------


async def test_quit_asks_while_own_engine_has_live_instances(tmp_path: Path) -> None:
    app, sim = make_app(tmp_path)
    async with app.run_test(size=(160, 40)) as pilot:
        await loaded(pilot)
        await pilot.press("d", "y")  # rent one
        await settle(pilot, app, lambda: any(not r.killed for r in app.snapshot.instances))
        await pilot.press("ctrl+q")
        await settle(pilot, app, lambda: isinstance(app.screen, QuitScreen))
        body = str(app.screen.query_one(".dialog-body", Static).render())
        assert "1 live instance" in body and "keep billing" in body
        assert not app.screen.query("#handover")  # the demo's cloud cannot be handed over
        await pilot.press("n")
        await pilot.pause()
        assert app.is_running and not isinstance(app.screen, QuitScreen)
        await pilot.press("ctrl+q")
        await settle(pilot, app, lambda: isinstance(app.screen, QuitScreen))
        await pilot.press("q")
        await settle(pilot, app, lambda: not app.is_running)
    assert sim.source is app.source


async def test_quit_without_live_instances_does_not_ask(tmp_path: Path) -> None:
    app, _sim = make_app(tmp_path)
    async with app.run_test(size=(160, 40)) as pilot:
        await loaded(pilot)
        await pilot.press("ctrl+q")
        await settle(pilot, app, lambda: not app.is_running)


async def test_ctrl_c_says_how_to_quit_in_plain_text(tmp_path: Path) -> None:
    app = fixed_app(tmp_path)
    async with app.run_test(size=(120, 30), notifications=True) as pilot:
        await loaded(pilot)
        await pilot.press("ctrl+c")
        await pilot.pause()
        messages = [n.message for n in app._notifications]
        assert "press ^q to quit" in messages
        assert not any("[b]" in m for m in messages)


# -- the small things ------------------------------------------------------------------------


async def test_destroy_on_a_killed_instance_says_why_nothing_happens(tmp_path: Path) -> None:
    app = fixed_app(tmp_path)
    async with app.run_test(size=(200, 50), notifications=True) as pilot:
        await loaded(pilot)
        await pilot.press("2")
        table = app.query_one("#instances-table", RowTable)
        await settle(pilot, app, lambda: table.row_count >= 5)
        killed = next(i for i, r in enumerate(app.pane("instances")._rows) if r[2].killed)
        table.move_cursor(row=killed)
        await pilot.press("x")
        await pilot.pause()
        assert not app.screen.query(".dialog-title")
        messages = [n.message for n in app._notifications]
        assert any("already destroyed (bench_below_min" in m for m in messages), messages


async def test_copied_ssh_command_names_vastuis_key(tmp_path: Path) -> None:
    app = fixed_app(tmp_path)
    async with app.run_test(size=(200, 50), notifications=True) as pilot:
        await loaded(pilot)
        await pilot.press("2")
        await settle(pilot, app, lambda: app.query_one("#instances-table", RowTable).row_count)
        await pilot.press("c")
        await pilot.pause()
        assert app.clipboard == (
            "ssh -i /home/operator/.local/state/vastui/id_ed25519 -p 40022 root@127.0.0.1"
        )


def test_ssh_command_uses_the_configured_key_with_home_as_tilde(tmp_path: Path) -> None:
    key = Path.home() / ".ssh" / "vastui_ed25519"
    config = Config()
    config = replace(config, ssh=replace(config.ssh, key_path=str(key)))
    source = AttachedSource(Options(config=config, db=tmp_path / "x.db"))
    rec = InstanceRecord(vast_id=1, label="vastui-main-1", ssh_host="1.2.3.4", ssh_port=2201)
    expected = "~/.ssh/vastui_ed25519" if str(Path.home()) != "/" else str(key)
    assert source.ssh_command(rec) == f"ssh -i {expected} -p 2201 root@1.2.3.4"
    assert source.ssh_command(replace(rec, state="killed", killed_at=5.0)) is None


class CountingStreams:
    """Log streams that stay open (as `tail -F` does) and count themselves."""

    def __init__(self) -> None:
        self.open = 0

    async def __call__(self, rec: InstanceRecord, source: str) -> AsyncIterator[list[str]]:
        self.open += 1
        try:
            yield [f"2026-03-13T17:00:0{len(source) % 10}Z {source} line"]
            await asyncio.Event().wait()  # until cancelled
        finally:
            self.open -= 1


async def test_switching_log_sources_closes_the_old_streams(tmp_path: Path) -> None:
    snap, ranked = fixed_data()
    opts = Options(config=Config(), db=tmp_path / "l.db", demo=True)
    streams = CountingStreams()
    app = VastuiApp(opts, FixedSource(opts, snap, ranked, stream=streams))
    async with app.run_test(size=(200, 50)) as pilot:
        await loaded(pilot)
        await pilot.press("2")
        await settle(pilot, app, lambda: app.query_one("#instances-table", RowTable).row_count)
        await pilot.press("l")  # "all": one stream per source
        await settle(pilot, app, lambda: streams.open == 5)
        for _ in range(3):
            await pilot.press("right_square_bracket")  # one source at a time
            await settle(pilot, app, lambda: streams.open == 1)
        await pilot.press("right_square_bracket", "right_square_bracket", "right_square_bracket")
        await settle(pilot, app, lambda: streams.open == 0)  # the engine log
    assert streams.open == 0


def test_merged_log_is_in_time_order() -> None:
    from vastui.console.panes.logs import MergedLog, line_time

    merged = MergedLog()
    assert merged.add("cuzk", ["2026-03-13T17:00:05.000000Z  INFO b", "   continued"])
    # an older backlog from another source arrives later: the merge reorders
    assert not merged.add("curio", ["2026-03-13T17:00:01.000Z\tINFO\ta", "2026-03-13T17:00:09Z c"])
    assert [text[-1] for _, text in merged.lines()] == ["a", "b", "d", "c"]
    assert merged.add("benchmark", ["[bench] no timestamp: placed where it arrived"])
    assert merged.lines()[-1][0] == "benchmark"
    assert line_time("2026-03-13 17:00:01,250 INFO engine") == line_time(
        "2026-03-13T17:00:01.25Z x"
    )
    assert line_time("no time here") is None


def test_no_negative_ages() -> None:
    from vastui.console.cells import age

    assert age(-30) == "0s" and age(45) == "45s" and age(600) == "10m" and age(7200) == "2.0h"


async def test_attached_console_shows_the_engines_offers(tmp_path: Path) -> None:
    from vastui.engine.ranking import to_record

    _snap, ranked = fixed_data()
    db = tmp_path / "a.db"
    async with await Store.open(db) as store:
        await store.status.put_offers("the engine's filter", [to_record(r) for r in ranked], 1.0)
    app, source = await attached_app(tmp_path)
    async with Lease(db), app.run_test(size=(200, 50)) as pilot:
        await loaded(pilot)
        shown = [o.offer.id for o in app.offers]
        assert shown == [r.offer.id for r in ranked], "the engine's list, in its order"
        assert source.client is not None
        # this view's own filter: our own search; the engine's filter is untouched
        source.set_filter("gpu_name=RTX_4090 num_gpus=1")
        offers = await source.offers(force=True)
        assert offers and all(o.offer.gpu_name == "RTX 4090" for o in offers)
        assert app.opts.config.offers.filter != "gpu_name=RTX_4090 num_gpus=1"


async def test_editing_the_view_filter_never_changes_what_the_engine_rents(tmp_path: Path) -> None:
    app, sim = make_app(tmp_path)
    async with app.run_test(size=(160, 40)) as pilot:
        await loaded(pilot)
        engine = sim.source.engine
        before = engine.config.offers.filter
        sim.source.set_filter("gpu_name=RTX_4090 num_gpus=1")
        offers = await sim.source.offers(force=True)
        assert offers and all(o.offer.gpu_name == "RTX 4090" for o in offers)
        assert engine.config.offers.filter == before
        engine_offers = await engine.refresh_offers(force=True)
        assert any(o.offer.gpu_name != "RTX 4090" for o in engine_offers)


def test_hand_over_starts_a_headless_engine_on_the_same_database(tmp_path: Path, monkeypatch):
    import subprocess as sp

    from vastui.console import app as app_module

    started: list[tuple[list[str], dict[str, Any]]] = []

    class FakePopen:
        pid = 4321

        def __init__(self, argv: list[str], **kw: Any) -> None:
            started.append((argv, kw))

    monkeypatch.setattr(app_module.subprocess, "Popen", FakePopen)
    config = replace(Config(), path=tmp_path / "c.toml")
    opts = Options(config=config, db=tmp_path / "fleet.db", api_url="http://127.0.0.1:8642")
    assert app_module.hand_over(opts) == 4321
    [(argv, kw)] = started
    assert argv[1:3] == ["-m", "vastui"] and "--engine-only" in argv
    assert argv[argv.index("--db") + 1] == str(tmp_path / "fleet.db")
    assert argv[argv.index("--config") + 1] == str(tmp_path / "c.toml")
    assert argv[argv.index("--api-url") + 1] == "http://127.0.0.1:8642"
    assert kw["start_new_session"] is True and kw["stdin"] is sp.DEVNULL


def test_help_reads_column_text_as_words_not_markup() -> None:
    """A column's meaning names a config section ("[bids] mode"): help showed "( mode = auto)",
    the section read as markup and dropped (issue 31 item 6)."""
    import io

    from rich.console import Console

    from vastui.console.help import columns_table
    from vastui.console.panes.base import Column

    out = io.StringIO()
    Console(file=out, width=200, color_system=None).print(
        columns_table([Column("bid", "Bid $/p", 7, "priced in ([bids] mode = auto) [bold]x[/]")])
    )
    assert "([bids] mode = auto) [bold]x[/]" in out.getvalue()
