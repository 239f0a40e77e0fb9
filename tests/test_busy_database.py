"""An operator's command is never dropped for a busy database (another connection holding the
write lock past the busy timeout: an engine's transaction stretched by a loaded event loop, a
`vastui bad add`, a sqlite3 shell). The console keeps it and says so until the store has it,
then says it is sent and, when the engine answers, done; the engine keeps a command (or its
answer) that met the lock for its next step; the CLI, which cannot keep it, says it was NOT
done. Never lost, never done twice.

The lock is real: a sqlite3 connection of its own holds ``BEGIN IMMEDIATE`` in a thread until
the test lets it go (the busy timeout is cut to 0.1 s so that a test holds it "long")."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Static

from tests.enginekit import World
from tests.helpers import settle
from tests.test_cli import run
from tests.test_console import make_app
from vastui.backend import Options
from vastui.config import Config
from vastui.console.app import VastuiApp
from vastui.console.dialogs import ConfirmScreen, PromptScreen
from vastui.console.rowtable import RowTable
from vastui.console.sources import AttachedSource
from vastui.console.sources import attached as attached_source
from vastui.store import Store, StoreBusy
from vastui.store import database as store_database
from vastui.store.database import fetch_all


@pytest.fixture(autouse=True)
def _short_busy_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store_database, "BUSY_TIMEOUT_MS", 100)


class WriteLock:
    """Another connection's write lock on the database, held until `release()`."""

    def __init__(self, db: Path) -> None:
        self.db = db
        self._held = threading.Event()
        self._release = threading.Event()
        self._thread = threading.Thread(target=self._hold, daemon=True)

    def _hold(self) -> None:
        conn = sqlite3.connect(self.db, timeout=30, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            self._held.set()
            self._release.wait(60)
            conn.execute("ROLLBACK")
        finally:
            conn.close()

    async def take(self) -> WriteLock:
        self._thread.start()
        await asyncio.to_thread(self._held.wait, 30)
        assert self._held.is_set(), "the lock was never taken"
        return self

    async def release(self) -> None:
        self._release.set()
        await asyncio.to_thread(self._thread.join, 30)


@contextlib.asynccontextmanager
async def write_lock(db: Path) -> AsyncIterator[WriteLock]:
    lock = await WriteLock(db).take()
    try:
        yield lock
    finally:
        await lock.release()


def messages(app: VastuiApp) -> list[str]:
    return [n.message for n in app._notifications]


async def ask_to_ignore(pilot: Any, app: VastuiApp) -> int:
    """`i` on the offers pane: the prompt is open with its default reason (enter sends it)."""
    machine = app.pane("offers").selected_offer().offer.machine_id
    await pilot.press("i")
    await settle(pilot, app, lambda: isinstance(app.screen, PromptScreen))
    return machine


async def bans_of(db: Path, machine: int) -> list[str]:
    async with await Store.open(db, migrate=False) as store:
        events = await store.events.all(limit=10_000)
    return [e.kind for e in events if e.machine_id == machine and e.kind == "ban"]


# -- the console ----------------------------------------------------------------------------


async def test_an_ignore_from_the_console_waits_out_a_held_lock_and_is_done_once(
    tmp_path: Path,
) -> None:
    """The console runs its own engine (the user's case): the lock holds both back."""
    app, _sim = make_app(tmp_path)
    db = tmp_path / "c.db"
    async with app.run_test(size=(160, 40), notifications=True) as pilot:
        await settle(pilot, app, lambda: app.query_one("#offers-table", RowTable).row_count > 0)
        machine = await ask_to_ignore(pilot, app)
        async with write_lock(db):
            await pilot.press("enter")
            what = f"ignore machine {machine}"
            waiting = f"{what}: waiting for the database (retrying); kept until it is sent"
            await settle(pilot, app, lambda: waiting in messages(app))
            assert app.outbox.waiting == [what]
            assert await bans_of(db, machine) == []
            # quitting now asks first: it would drop the command
            await pilot.press("ctrl+q")
            await settle(pilot, app, lambda: isinstance(app.screen, ConfirmScreen))
            body = str(app.screen.query_one(".dialog-body", Static).render())
            assert f"1 command(s) still wait for the database, not sent: {what}." in body
            await pilot.press("escape")
            await settle(pilot, app, lambda: not isinstance(app.screen, ConfirmScreen))
        await settle(pilot, app, lambda: f"{what}: sent after waiting for the database"
                     in messages(app))  # fmt: skip
        await settle(pilot, app, lambda: f"machine {machine} ignored" in messages(app))
        assert app.outbox.waiting == []
    assert await bans_of(db, machine) == ["ban"]
    async with await Store.open(db, migrate=False) as store:
        entry = next(e for e in await store.badlist.all() if e.machine_id == machine)
        assert entry.bans == 1 and entry.source == "manual"
        async with store.db.read() as conn:
            sent = await fetch_all(conn, "SELECT kind, status FROM commands")
    assert [tuple(row) for row in sent] == [("ignore", "done")]


async def _beat(db: Path, stop: asyncio.Event) -> None:
    """A headless engine's heartbeat, as runtime.py renews it: a busy database is retried."""
    async with await Store.open(db) as store:
        await store.lease.acquire("headless-1", pid=4242, hostname="ctl", mode="headless", ttl=600)
        while not stop.is_set():
            with contextlib.suppress(StoreBusy):
                await store.lease.renew("headless-1", ttl=600)
            await asyncio.sleep(0.05)


async def test_an_attached_consoles_ignore_waits_out_a_lock_that_stalls_the_heartbeat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attached to a headless engine: the lock also stops its heartbeat, and the console takes
    the engine for gone meanwhile; the command it kept waits through that too."""
    db = tmp_path / "a.db"
    opts = Options(config=Config(), db=db, demo=True)
    source = AttachedSource(opts)
    app = VastuiApp(opts, source)
    stop = asyncio.Event()
    async with await Store.open(db):
        pass
    beat = asyncio.create_task(_beat(db, stop))
    try:
        async with app.run_test(size=(200, 50), notifications=True) as pilot:
            await settle(pilot, app, lambda: app.query_one("#offers-table", RowTable).row_count)
            await settle(pilot, app, lambda: "ATTACHED" in str(app.query_one("#summary", Static)
                                                                .render()))  # fmt: skip
            machine = await ask_to_ignore(pilot, app)
            async with write_lock(db):
                await pilot.press("enter")
                what = f"ignore machine {machine}"
                await settle(pilot, app, lambda: f"{what}: waiting for the database (retrying); "
                             "kept until it is sent" in messages(app))  # fmt: skip
                # the engine's heartbeat is held back too: the console takes it for gone
                stale = attached_source.HEARTBEAT_STALE
                monkeypatch.setattr(attached_source, "HEARTBEAT_STALE", 0.3)
                await settle(pilot, app, lambda: source.detached_reason is not None)
                await settle(
                    pilot,
                    app,
                    lambda: any(
                        m.startswith(f"{what}: waiting for the engine") for m in messages(app)
                    ),
                )
                monkeypatch.setattr(attached_source, "HEARTBEAT_STALE", stale)
            await settle(
                pilot,
                app,
                lambda: any(m.startswith(f"{what}: sent after waiting") for m in messages(app)),
            )
            assert app.outbox.waiting == []
    finally:
        stop.set()
        await beat
    async with await Store.open(db, migrate=False) as store:
        claimed = await store.commands.claim()
    assert [(c.kind, c.args["machine_id"]) for c in claimed] == [("ignore", machine)]


# -- the engine ------------------------------------------------------------------------------


def lock_before(
    db: Path, call: Callable[..., Awaitable[Any]], held: list[WriteLock]
) -> Callable[..., Awaitable[Any]]:
    """`call`, the first time with another connection's write lock taken just before it."""

    async def wrapped(*args: Any, **kw: Any) -> Any:
        if not held:
            held.append(await WriteLock(db).take())
        return await call(*args, **kw)

    return wrapped


async def test_the_engine_keeps_a_command_whose_ban_met_the_lock(tmp_path: Path) -> None:
    world = World(tmp_path)
    db = tmp_path / "s.db"
    async with await Store.open(db) as store:
        engine = await world.engine(store)
        held: list[WriteLock] = []
        real_add = store.badlist.add
        store.badlist.add = lock_before(db, real_add, held)  # type: ignore[method-assign]
        command_id = await store.commands.submit("ignore", {"machine_id": 777, "reason": "x"})
        await engine.run_commands()
        assert held, "the ban met the lock"
        cmd = await store.commands.get(command_id)
        assert cmd is not None and cmd.status == "running"  # claimed, kept, not answered
        assert await store.badlist.all() == []
        await engine.run_commands()  # still held: kept again
        await held[0].release()
        await engine.run_commands()
        cmd = await store.commands.get(command_id)
        assert cmd is not None and (cmd.status, cmd.result) == ("done", "machine 777 ignored")
        [entry] = await store.badlist.all()
        assert (entry.machine_id, entry.bans) == (777, 1)


async def test_an_answer_the_store_refused_is_written_at_the_next_step(tmp_path: Path) -> None:
    world = World(tmp_path)
    db = tmp_path / "s.db"
    async with await Store.open(db) as store:
        engine = await world.engine(store)
        held: list[WriteLock] = []
        real_finish = store.commands.finish
        store.commands.finish = lock_before(db, real_finish, held)  # type: ignore[method-assign]
        command_id = await store.commands.submit("ignore", {"machine_id": 778, "reason": "x"})
        second = await store.commands.submit("unignore", {"machine_id": 778})
        await engine.run_commands()
        assert held
        assert [e.bans for e in await store.badlist.all()] == [1]  # done, its answer kept
        first = await store.commands.get(command_id)
        assert first is not None and first.status == "running"
        await held[0].release()
        await engine.run_commands()
        first, then = await store.commands.get(command_id), await store.commands.get(second)
        assert first is not None and (first.status, first.result) == ("done", "machine 778 ignored")
        assert then is not None and then.status == "done"
        assert await store.badlist.all() == []
        assert await bans_of(db, 778) == ["ban"], "carried out once"


async def test_a_command_interrupted_after_its_ban_was_recorded_is_not_repeated(
    tmp_path: Path,
) -> None:
    """The acts catch what the lock does to a destroy (it is retried by the reconcile), so
    this is the net beneath them: an act that recorded something, then met the lock."""
    world = World(tmp_path)
    db = tmp_path / "s.db"
    async with await Store.open(db) as store:
        engine = await world.engine(store)
        real_ban = engine.acts.ban

        async def ban_then_busy(*args: Any, **kw: Any) -> None:
            await real_ban(*args, **kw)
            raise StoreBusy("database s.db: cannot begin transaction: database is locked")

        engine.acts.ban = ban_then_busy  # type: ignore[method-assign]
        command_id = await store.commands.submit("ignore", {"machine_id": 779, "reason": "x"})
        await engine.run_commands()
        cmd = await store.commands.get(command_id)
        assert cmd is not None and cmd.status == "failed"
        assert cmd.result is not None and cmd.result.startswith("interrupted: ")
        assert "not repeated" in cmd.result
        await engine.run_commands()
        assert [e.bans for e in await store.badlist.all()] == [1]
        assert await bans_of(db, 779) == ["ban"]


# -- the CLI ---------------------------------------------------------------------------------


async def test_the_cli_says_a_bad_add_was_not_done(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "s.db"
    async with await Store.open(db):
        pass
    async with write_lock(db):
        code, out, err = await asyncio.to_thread(
            run, capsys, "bad", "add", "4242", "--reason", "slow", "--db", str(db)
        )
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith("vastui: error: NOT done: machine 4242 was not added to the bad list")
    assert "database is locked" in err and err.rstrip().endswith("run the command again")
    assert await bans_of(db, 4242) == []
