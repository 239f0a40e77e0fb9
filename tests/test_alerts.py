"""Alerts without Prometheus (vastui/alerts.py): once per episode and once when it clears,
rate-limited; hooks that fail or hang are logged and never raise."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import httpx
import pytest

from vastui.alerts import AlertBook, Conditions, FleetFacts, Notifier

MIN = 60.0


def facts(workers: int = 3, target: int = 3, **kw: object) -> FleetFacts:
    base: dict[str, object] = dict(
        target=target, workers=workers, reason_kind=None, reason=None, credit=None,
        bans_last_hour=0, kills_last_hour=0,
    )  # fmt: skip
    base.update(kw)
    return FleetFacts(**base)  # type: ignore[arg-type]


def test_an_episode_fires_once_and_clears_once() -> None:
    book = AlertBook()
    sent = []
    for t, holding in [
        (0, {}),
        (60, {"low_credit": "credit $3"}),
        (120, {"low_credit": "credit $2"}),  # the same episode: nothing new
        (180, {"low_credit": "credit $1", "ban_storm": "6 bans"}),
        (240, {"ban_storm": "7 bans"}),
        (300, {}),
        (360, {"low_credit": "credit $0"}),  # a new episode
    ]:
        sent += [(a.key, a.state, a.at) for a in book.observe(holding, float(t))]
    assert sent == [
        ("low_credit", "firing", 60.0),
        ("ban_storm", "firing", 180.0),
        ("low_credit", "resolved", 240.0),
        ("ban_storm", "resolved", 300.0),
        ("low_credit", "firing", 360.0),
    ]


def test_the_rate_limit_drops_a_fire_and_its_clear() -> None:
    book = AlertBook(max_per_hour=2)
    out = book.observe({"a": "x", "b": "y", "c": "z"}, 0.0)
    assert [a.key for a in out] == ["a", "b"] and book.dropped == 1
    # c was never announced: its end is not either; a and b's clears wait for the hour
    assert book.observe({}, 10.0) == [] and book.dropped == 3
    assert [a.key for a in book.observe({"c": "again"}, 3601.0)] == ["c"]


@pytest.mark.parametrize(
    ("case", "seq", "want"),
    [
        ("below target, not yet long", [(0, facts(1)), (14 * MIN, facts(1))], set()),
        ("below target 15 min", [(0, facts(1)), (15 * MIN, facts(1))], {"below_target"}),
        ("back at target resets", [(0, facts(1)), (10 * MIN, facts(3)), (20 * MIN, facts(1))],
         set()),
        ("target 0 is manual", [(0, facts(0, 0)), (30 * MIN, facts(0, 0))], set()),
        ("budget", [(0, facts(reason_kind="daily_budget", reason="spent $50"))],
         {"daily_budget"}),
        ("rent breaker", [(0, facts(reason_kind="rent_breaker", reason="rent breaker: 4"))],
         {"rent_breaker"}),
        ("credit low", [(0, facts(credit=4.0))], {"low_credit"}),
        ("credit fine", [(0, facts(credit=40.0))], set()),
        ("ban storm", [(0, facts(bans_last_hour=5))], {"ban_storm"}),
        ("kill storm", [(0, facts(kills_last_hour=10))], {"kill_storm"}),
        ("cluster unreadable, not yet long",
         [(9 * MIN, facts(cluster_error="refused", cluster_error_since=0.0))], set()),
        ("cluster unreadable 10 min",
         [(10 * MIN, facts(cluster_error="refused", cluster_error_since=0.0))],
         {"cluster_unreadable"}),
        ("cluster readable again", [(30 * MIN, facts())], set()),
    ],
)  # fmt: skip
def test_conditions(case: str, seq: list[tuple[float, FleetFacts]], want: set[str]) -> None:
    cond = Conditions(below_target_min=15, min_credit=10.0, storm_bans=5, storm_kills=10)
    holding: dict[str, str] = {}
    for t, f in seq:
        holding = cond.holding(f, t)
    assert set(holding) == want, case


def test_below_target_names_the_reason() -> None:
    cond = Conditions(below_target_min=15)
    cond.holding(facts(1, reason="no viable offer: best RTX 4090"), 0)
    line = cond.holding(facts(1, reason="no viable offer: best RTX 4090"), 20 * MIN)
    assert line["below_target"] == "1/3 workers for 20 min: no viable offer: best RTX 4090"


async def test_a_webhook_gets_the_alert_as_json_and_no_secret() -> None:
    got: list[dict[str, object]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        got.append(json.loads(request.content))
        return httpx.Response(204)

    n = Notifier(
        webhook="https://hooks.example/T0K3N", secrets=["sekrit-key"],
        transport=httpx.MockTransport(handler),
    )  # fmt: skip
    book = AlertBook(fleet="main")
    for a in book.observe({"low_credit": "key sekrit-key \x1b[31m$1"}, 5.0):
        n.submit(a)
    await n.drain()
    await n.close()
    assert len(got) == 1 and n.sent == 1
    assert got[0]["alert"] == "low_credit" and got[0]["state"] == "firing"
    assert got[0]["fleet"] == "main"
    assert "sekrit-key" not in json.dumps(got) and "\x1b" not in json.dumps(got)


async def test_a_failing_webhook_is_retried_a_bounded_number_of_times_then_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    posts: list[int] = []
    waits: list[float] = []

    def handler(request: httpx.Request) -> httpx.Response:
        posts.append(1)
        return httpx.Response(503)

    async def sleep(s: float) -> None:
        waits.append(s)

    n = Notifier(
        webhook="https://hooks.example/path-T0K3N", retries=3, sleep=sleep,
        transport=httpx.MockTransport(handler),
    )  # fmt: skip
    caplog.set_level(logging.WARNING, "vastui.alerts")
    n.submit(AlertBook().observe({"kill_storm": "12"}, 0.0)[0])
    await n.drain()
    await n.close()
    assert len(posts) == 3 and waits == [1.0, 2.0] and n.failed == 1
    assert "webhook hooks.example failed: HTTP 503" in caplog.text
    assert "T0K3N" not in caplog.text


async def test_a_refused_webhook_is_not_retried() -> None:
    posts: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        posts.append(1)
        return httpx.Response(404)

    n = Notifier(webhook="https://hooks.example/x", transport=httpx.MockTransport(handler))
    n.submit(AlertBook().observe({"kill_storm": "12"}, 0.0)[0])
    await n.drain()
    await n.close()
    assert posts == [1] and n.failed == 1


async def test_a_command_gets_the_alert_on_stdin_without_a_shell(tmp_path: Path) -> None:
    out = tmp_path / "alert.json"
    script = f"import sys; open({str(out)!r}, 'w').write(sys.stdin.read())"
    n = Notifier(command=[sys.executable, "-c", script, "; rm -rf /"])
    n.submit(AlertBook().observe({"daily_budget": "spent $50.00 of $50.00"}, 0.0)[0])
    await n.drain()
    await n.close()
    assert json.loads(out.read_text())["summary"] == "spent $50.00 of $50.00"
    assert n.sent == 1


async def test_a_hanging_command_is_killed_and_the_next_alert_still_goes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    marker = tmp_path / "second"
    # sh, not Python: the well-behaved call must start well within the timeout on a loaded host
    script = (
        f'a=$(cat); case "$a" in *kill_storm*) printf ok > {marker};; *) exec sleep 3600;; esac'
    )
    n = Notifier(command=["/bin/sh", "-c", script], timeout_s=3.0)
    caplog.set_level(logging.WARNING, "vastui.alerts")
    book = AlertBook()
    n.submit(book.observe({"ban_storm": "7"}, 0.0)[0])
    n.submit(book.observe({"ban_storm": "7", "kill_storm": "12"}, 1.0)[0])
    await n.drain()
    await n.close()
    assert "timed out" in caplog.text and marker.read_text() == "ok"
    assert (n.sent, n.failed) == (1, 1)


async def test_a_command_that_cannot_start_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    n = Notifier(command=["/nonexistent/notify-send"])
    caplog.set_level(logging.WARNING, "vastui.alerts")
    n.submit(AlertBook().observe({"ban_storm": "7"}, 0.0)[0])
    await n.drain()
    await n.close()
    assert "did not start" in caplog.text and n.failed == 1
