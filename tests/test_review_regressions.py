"""Regression tests for problems found in review: each one failed before its fix."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tests.test_engine import World, rent_one
from vastsim.console_fixtures import fixed_app
from vastui.backend import Options
from vastui.cli import main
from vastui.config import ApiKeyError, Config, ConfigError, load_api_key, load_config
from vastui.console.app import check_keymap
from vastui.domain.reports import parse_event
from vastui.engine import policy
from vastui.sanitize import sanitize_line
from vastui.store import Store
from vastui.vast.errors import VastServerError
from vastui.vast.models import Offer


async def test_notifications_never_parse_markup(tmp_path: Path):
    app = fixed_app(tmp_path)
    async with app.run_test(size=(100, 30), notifications=True) as pilot:
        message = "server said: [/b] [@click=app.quit]gotcha[/]"
        app.notify(message, title="[b]x", severity="error")
        await pilot.pause()
        # Parsed as markup, the message would raise (a stray [/b]) or lose its brackets and
        # arm a click action; shown literally, every character is on the toast.
        (notification,) = app._notifications
        assert (notification.message, notification.title) == (message, "[b]x")
        assert notification.severity == "error" and notification.markup is False
        (toast,) = app.screen.query("Toast")  # Textual's notification widget
        assert toast.render().plain == f"[b]x\n{message}" and toast.has_class("-error")
        assert app.is_running


async def test_a_bad_command_fails_without_stopping_the_engine(tmp_path: Path):
    world = World(tmp_path)
    async with await Store.open(tmp_path / "s.db") as store:
        engine = await world.engine(store)
        bad = await store.commands.submit("ignore", {"machine_id": 10**30, "reason": "typo"})
        good = await store.commands.submit("ignore", {"machine_id": 4242, "reason": "ok"})
        await engine.step()
        assert (await store.commands.get(bad)).status == "failed"
        assert (await store.commands.get(good)).status == "done"
        await engine.close()


def test_malformed_api_key_is_refused_without_echo(monkeypatch):
    monkeypatch.setenv("VAST_API_KEY", "SECRETKEY123\nabc")
    with pytest.raises(ApiKeyError) as info:
        load_api_key()
    assert "SECRETKEY123" not in str(info.value) and "$VAST_API_KEY" in str(info.value)


def test_remote_text_is_made_safe_at_the_model_boundary():
    offer = Offer.from_api(
        {"id": 1, "machine_id": 2, "dph_total": 0.1,
         "gpu_name": "RTX 4090\x1b]0;PWNED\x07\x1b[2J\u202eevil", "geolocation": "X\u2028Y"}
    )  # fmt: skip
    assert offer.gpu_name == "RTX 4090 evil" and offer.geolocation == "X Y"
    assert sanitize_line("a\ud800b") == "a b"


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (
            ["bad", "add", "99999999999999999999999", "--reason", "r"],
            ["machine_id", "positive 64-bit integer", "'99999999999999999999999'"],
        ),
        (["--api-url", "http://[::1", "offers"], ["--api-url", "'http://[::1'", "not a valid URL"]),
        (["--api-url", "ftp://x", "offers"], ["--api-url", "'ftp://x'", "http(s)://host"]),
    ],
)
def test_cli_bad_inputs_are_one_line(argv, words, capsys, tmp_path: Path):
    try:
        code = main([*argv, "--db", str(tmp_path / "x.db")])
    except SystemExit as exc:  # argparse refuses it before main's handler
        code = exc.code
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    # Exactly one line: one trailing newline and none inside, naming the input and what is wrong.
    assert err.endswith("\n") and "\n" not in err[:-1], err
    assert err.startswith("vastui: error: ") and all(word in err for word in words), err


def test_explicit_db_in_a_missing_directory_is_refused(capsys, tmp_path: Path):
    target = tmp_path / "nope" / "x.db"
    assert main(["bad", "list", "--db", str(target)]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert not target.parent.exists()


def test_zero_deadline_is_refused(tmp_path: Path):
    path = tmp_path / "c.toml"
    path.write_text("[deadlines]\nloading_min = 0\n")
    with pytest.raises(ConfigError, match=r"deadlines\.loading_min"):
        load_config(path)


def test_unknown_keymap_id_is_refused():
    config = replace(Config(), ui=replace(Config().ui, keymap={"ofers-deploy": "D"}))
    with pytest.raises(ValueError, match=r"ui\.keymap\.ofers-deploy"):
        check_keymap(Options(config=config))
    ok = replace(Config(), ui=replace(Config().ui, keymap={"offers-deploy": "D"}))
    check_keymap(Options(config=ok))  # a real id of the app's bindings passes


async def test_other_fleet_with_hyphen_is_neither_adopted_nor_destroyed(tmp_path: Path):
    world = World(tmp_path)
    async with world.client() as client:
        offer = (await client.search_offers("num_gpus=1", order="dph")).offers[0]
        theirs = await client.create_instance(
            offer.id, label="vastui-main-eu-0123456789ab", image="i", disk_gb=10
        )
    async with await Store.open(tmp_path / "s.db") as store:
        engine = await world.engine(store)
        await store.badlist.add(offer.machine_id, "ban", now=world.clock.now())
        await engine.step()
        assert await store.instances.get(theirs.instance_id) is None
        assert theirs.instance_id in world.cloud.instances
        await engine.close()


async def test_failed_destroy_keeps_its_ban_and_one_intent(tmp_path: Path):
    world = World(tmp_path)
    async with await Store.open(tmp_path / "s.db") as store:
        engine, iid = await rent_one(world, store)
        real_destroy = engine.client.destroy_instance
        calls = 0

        async def flaky(instance_id: int) -> bool:
            nonlocal calls
            calls += 1
            if calls == 1:
                raise VastServerError(503, "maintenance")
            return await real_destroy(instance_id)

        engine.client.destroy_instance = flaky  # type: ignore[method-assign]
        tail = ["ERROR cuzk: CUDA error 700: an illegal memory access was encountered"]
        await engine.handle_worker_event(
            iid, parse_event({"stage": "benchmark", "event": "result",
                  "result": {"outcome": "error", "stage": "warmup", "error_tail": tail}})
        )  # fmt: skip
        assert not (await store.instances.get(iid)).killed
        for _ in range(3):
            await engine.step()
        assert len(await store.intents.all(kind="destroy")) == 1
        world.clock.advance(400)  # past the backoff (5 s doubling, at most 300 s: acts.py)
        await engine.step()
        rec = await store.instances.get(iid)
        assert rec.killed and rec.kill_kind == "bench_error" and rec.error_lines == tuple(tail)
        assert [b.machine_id for b in await store.badlist.all(now=world.clock.now())] == [
            rec.machine_id
        ]
        await engine.close()


async def test_one_list_missing_a_row_is_not_a_vanish(tmp_path: Path):
    world = World(tmp_path)
    async with await Store.open(tmp_path / "s.db") as store:
        engine, iid = await rent_one(world, store)
        real_list = engine.client.list_instances

        async def partial():
            return [i for i in await real_list() if i.id != iid]

        engine.client.list_instances = partial  # type: ignore[method-assign]
        await engine.step()
        assert not (await store.instances.get(iid)).killed, "show_instance says it still exists"
        await engine.close()


def test_kill_detail_round_trip():
    kill = policy.Kill("bench_error", "why", "benchmark", ("a", "b"), "error", "ban it", {"r": 1})
    assert policy.Kill.from_detail("why", kill.to_detail()) == kill
