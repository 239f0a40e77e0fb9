"""vastui.ssh against a real asyncssh server on 127.0.0.1 playing a worker with ``workerctl``.

No test sleeps for timing: waits are on events/conditions, with timeouts only as upper bounds.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import shlex
import socket
from pathlib import Path
from typing import Any

import asyncssh
import pytest

from vastui.domain.reports import WorkerEvent
from vastui.sanitize import MAX_LINE
from vastui.ssh import (
    ConnState,
    HostKeyChanged,
    MemoryPins,
    RemoteForward,
    SshAuthFailed,
    SshClosed,
    SshPool,
    SshTimeout,
    SshUnreachable,
    StorePins,
    Worker,
    WorkerCommandFailed,
    WorkerConnection,
    WorkerProtocolError,
)
from vastui.store import Store

# ---------------------------------------------------------------------------------------------
# the fake worker

NASTY_STDOUT: list[bytes] = [
    b"\x1b[31mred\x1b[0m plain\n",
    b"bell\x07 and \x00 nul and \x7f del\n",
    b"bad utf8 \xff\xfe end\n",
    b"x" * 100_000 + b"\n",
    b"osc \x1b]0;evil title\x07 done\r\n",
    b"c1 \xc2\x9b31m csi\n",
    b"last line without newline",
]


def new_key() -> asyncssh.SSHKey:
    return asyncssh.generate_private_key("ssh-ed25519")


class FakeWorker:
    def __init__(self) -> None:
        self.host_key = new_key()
        self.client_key = new_key()
        self.server: asyncssh.SSHAcceptor | None = None
        self.port = 0
        self.connections = 0  # TCP connections accepted, ever
        self.conns: set[asyncssh.SSHServerConnection] = set()
        self.commands: list[str] = []
        self.status: dict[str, Any] = {"stage": "proving", "rate": 31.4, "msg": "\x1b[2Jok"}
        self.cuzk: dict[str, Any] = {"gpus": [{"id": 0, "busy": True}]}
        self.events: list[str] = []
        self._events_changed = asyncio.Event()
        self.event_streams: set[asyncssh.SSHServerProcess] = set()
        self.channels_closed: list[str] = []  # commands whose channel the client closed
        self.channel_closed = asyncio.Event()
        self.forward_requests: list[tuple[str, int]] = []
        self.session = True  # answers `workerctl session` (False: an image from before it)
        self.asked: list[str] = []  # questions asked on sessions
        self.session_raw: bytes | None = None  # what a session answers instead, when set

    # -- lifecycle --------------------------------------------------------------------------

    async def start(self, port: int = 0) -> None:
        fake = self

        class Server(asyncssh.SSHServer):
            def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
                fake.connections += 1
                fake.conns.add(conn)
                self._conn = conn

            def connection_lost(self, exc: Exception | None) -> None:
                fake.conns.discard(self._conn)

            def begin_auth(self, username: str) -> bool:
                return True

            def public_key_auth_supported(self) -> bool:
                return True

            def validate_public_key(self, username: str, key: asyncssh.SSHKey) -> bool:
                return username == "root" and key.public_data == fake.client_key.public_data

            def server_requested(self, listen_host: str, listen_port: int) -> bool:
                fake.forward_requests.append((listen_host, listen_port))
                return True

        self.server = await asyncssh.create_server(
            Server,
            "127.0.0.1",
            port,
            server_host_keys=[self.host_key],
            process_factory=self._handle,
            encoding=None,
            allow_pty=False,
        )
        self.port = self.server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Stop listening and drop every connection."""
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()
            self.server = None
        self.drop_connections()

    def drop_connections(self) -> None:
        for conn in list(self.conns):
            conn.close()

    def rekey(self) -> None:
        self.host_key = new_key()

    # -- events -----------------------------------------------------------------------------

    def add_events(self, *lines: str | dict[str, Any]) -> None:
        self.events.extend(x if isinstance(x, str) else json.dumps(x) for x in lines)
        self._events_changed.set()

    def drop_mid_line(self) -> None:
        """Send half an event line on every open event stream, then drop all connections."""
        for process in list(self.event_streams):
            process.stdout.write(b'{"id": 999, "half": ')
        self.drop_connections()

    # -- commands ---------------------------------------------------------------------------

    async def _handle(self, process: asyncssh.SSHServerProcess) -> None:
        command = process.command or ""
        self.commands.append(command)
        argv = shlex.split(command)
        try:
            if argv == ["workerctl", "status"]:
                process.stdout.write(json.dumps(self.status).encode() + b"\n")
            elif argv == ["workerctl", "cuzk-status"]:
                process.stdout.write(json.dumps(self.cuzk).encode() + b"\n")
            elif argv == ["workerctl", "session"] and self.session:
                await self._session(process)
                return
            elif argv[:2] == ["workerctl", "events"]:
                await self._events(process, argv[2:])
                return
            elif argv[:2] == ["workerctl", "logs"]:
                await self._logs(process, argv[2:])
                return
            elif argv == ["bad-json"]:
                process.stdout.write(b"this is \x1b[31mnot\x1b[0m json {\n")
            elif argv == ["list-json"]:
                process.stdout.write(b"[1, 2]\n")
            elif argv == ["nasty"]:
                for piece in NASTY_STDOUT:
                    process.stdout.write(piece)
                    await process.stdout.drain()
                process.stderr.write(b"err \x1b[1mbold\x1b[0m\n")
            elif argv == ["fail"]:
                process.stderr.write(b"first\nboom \x1b]0;x\x07 happened\n")
                process.exit(3)
                return
            elif argv == ["sleep-forever"]:
                await self._until_closed(process, command)
                return
            elif argv == ["tail-forever"]:
                process.stdout.write(b"first line\n")
                await self._until_closed(process, command)
                return
            else:
                process.stderr.write(f"unknown command: {command}\n".encode())
                process.exit(127)
                return
            process.exit(0)
        except (asyncssh.Error, OSError, BrokenPipeError):
            pass

    async def _session(self, process: asyncssh.SSHServerProcess) -> None:
        """worker-image/workerctl's `session`: a read per line in, `STATUS JSON` per line out."""
        answers = {"status": self.status, "cuzk-status": self.cuzk}
        while True:
            line = await process.stdin.readline()
            if not line:
                return
            name = line.decode().strip()
            self.asked.append(name)
            if self.session_raw is not None:
                process.stdout.write(self.session_raw)
            elif name in answers:
                process.stdout.write(b"0 " + json.dumps(answers[name]).encode() + b"\n")
            else:
                process.stdout.write(b"2 null\n")

    async def _until_closed(self, process: asyncssh.SSHServerProcess, command: str) -> None:
        await process.channel.wait_closed()
        self.channels_closed.append(command)
        self.channel_closed.set()

    async def _events(self, process: asyncssh.SSHServerProcess, args: list[str]) -> None:
        follow = "--follow" in args
        after = int(args[args.index("--after") + 1]) if "--after" in args else 0
        sent = after
        self.event_streams.add(process)
        try:
            while True:
                while sent < len(self.events):
                    process.stdout.write(self.events[sent].encode() + b"\n")
                    sent += 1
                if not follow:
                    process.exit(0)
                    return
                self._events_changed.clear()
                waiter = asyncio.ensure_future(self._events_changed.wait())
                closer = asyncio.ensure_future(process.channel.wait_closed())
                done, pending = await asyncio.wait(
                    {waiter, closer}, return_when=asyncio.FIRST_COMPLETED
                )
                for task in pending:
                    task.cancel()
                if closer in done:
                    return
        finally:
            self.event_streams.discard(process)

    async def _logs(self, process: asyncssh.SSHServerProcess, args: list[str]) -> None:
        source = args[0]
        tail = int(args[args.index("--tail") + 1]) if "--tail" in args else 10
        for i in range(tail):
            process.stdout.write(f"{source} line {i} \x1b[32mok\x1b[0m\n".encode())
        if "--follow" in args:
            await self._until_closed(process, " ".join(args))
            return
        process.exit(0)


# ---------------------------------------------------------------------------------------------
# fixtures and helpers

WAIT = 5.0  # upper bound for waiting on a condition; never a timing assumption
IID = 4242


class Sleeps:
    """Injected ``sleep``: records the backoff delays and returns at once."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)
        await asyncio.sleep(0)


class States:
    def __init__(self) -> None:
        self.seen: list[tuple[ConnState, str]] = []
        self.changed = asyncio.Event()

    def __call__(self, conn: WorkerConnection, state: ConnState, detail: str) -> None:
        self.seen.append((state, detail))
        self.changed.set()

    async def wait_for(self, state: ConnState) -> None:
        async with asyncio.timeout(WAIT):
            while not self.seen or self.seen[-1][0] != state:
                self.changed.clear()
                await self.changed.wait()


@pytest.fixture
async def fake():
    worker = FakeWorker()
    await worker.start()
    try:
        yield worker
    finally:
        await worker.stop()


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
async def make_conn(fake: FakeWorker, sleeps: Sleeps):
    made: list[WorkerConnection] = []

    def make(**kw: Any) -> WorkerConnection:
        kw.setdefault("client_key", fake.client_key)
        kw.setdefault("pins", MemoryPins())
        kw.setdefault("sleep", sleeps)
        kw.setdefault("rng", lambda: 1.0)
        kw.setdefault("connect_timeout", WAIT)
        conn = WorkerConnection(kw.pop("instance_id", IID), "127.0.0.1", fake.port, **kw)
        made.append(conn)
        return conn

    yield make
    for conn in made:
        await conn.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def assert_display_safe(line: str) -> None:
    assert isinstance(line, str)
    assert len(line) <= MAX_LINE
    assert not any((ord(c) < 0x20 and c != "\t") or 0x7F <= ord(c) <= 0x9F for c in line), line


async def collect(aiter: Any, n: int) -> list[Any]:
    out = []
    async with asyncio.timeout(WAIT):
        for _ in range(n):
            out.append(await anext(aiter))
    return out


# ---------------------------------------------------------------------------------------------
# host keys: trust on first use, pinning, changed keys


async def test_first_connect_pins_host_key_in_store(fake, make_conn, tmp_path: Path) -> None:
    store = await Store.open(tmp_path / "vastui.db")
    try:
        states = States()
        conn = make_conn(pins=StorePins(store), on_state=states)
        assert conn.state == ConnState.DISCONNECTED
        assert await store.host_keys.get(IID) is None

        result = await conn.run("workerctl status", timeout=WAIT)
        assert result.exit_status == 0 and result.ok
        assert conn.state == ConnState.CONNECTED
        assert [s for s, _ in states.seen] == [ConnState.CONNECTING, ConnState.CONNECTED]

        rec = await store.host_keys.get(IID)
        assert rec is not None
        assert rec.fingerprint == fake.host_key.get_fingerprint()
        assert rec.public_key == fake.host_key.export_public_key("openssh").decode().strip()
        assert (rec.host, rec.port) == ("127.0.0.1", fake.port)

        # A second call reuses the connection.
        await conn.run("workerctl status", timeout=WAIT)
        assert fake.connections == 1 and conn.connect_attempts == 1
    finally:
        await store.close()

    # The pin survives a restart: a new process, a new connection, the same trusted key.
    async with await Store.open(tmp_path / "vastui.db") as store:
        conn = make_conn(pins=StorePins(store))
        assert (await conn.run("workerctl status", timeout=WAIT)).ok
        assert (await store.host_keys.get(IID)).pinned_at == rec.pinned_at


async def test_changed_host_key_blocks_until_forgotten_and_unblocked(
    fake, make_conn, sleeps, tmp_path: Path
) -> None:
    async with await Store.open(tmp_path / "vastui.db") as store:
        pins = StorePins(store)
        states = States()
        conn = make_conn(pins=pins, on_state=states)
        await conn.run("workerctl status", timeout=WAIT)
        old_fp = fake.host_key.get_fingerprint()

        # The worker comes back on the same port with a different host key.
        port = fake.port
        await fake.stop()
        await states.wait_for(ConnState.DISCONNECTED)
        fake.rekey()
        await fake.start(port)
        new_fp = fake.host_key.get_fingerprint()
        before = fake.connections

        with pytest.raises(HostKeyChanged) as exc:
            await conn.run("workerctl status", timeout=WAIT)
        assert (exc.value.instance_id, exc.value.expected_fp, exc.value.got_fp) == (
            IID,
            old_fp,
            new_fp,
        )
        assert "\n" not in str(exc.value) and old_fp in str(exc.value)
        assert conn.state == ConnState.BLOCKED and conn.blocked_error is exc.value
        assert states.seen[-1][0] == ConnState.BLOCKED
        assert fake.connections == before + 1  # exactly one attempt, no retry
        assert sleeps.delays == []

        # Blocked: every call fails at once, without touching the network.
        attempts = conn.connect_attempts
        for call in (
            conn.run("workerctl status", timeout=WAIT),
            conn.run_json("workerctl status", timeout=WAIT),
            conn.connect(),
        ):
            with pytest.raises(HostKeyChanged):
                await call
        with pytest.raises(HostKeyChanged):
            async with contextlib.aclosing(conn.follow("tail-forever")) as lines:
                await anext(lines)
        assert fake.connections == before + 1 and conn.connect_attempts == attempts
        assert (await store.host_keys.get(IID)).fingerprint == old_fp  # never re-pinned

        # Unblocking without forgetting the pin just blocks again (one attempt).
        conn.unblock()
        assert conn.state == ConnState.DISCONNECTED
        with pytest.raises(HostKeyChanged):
            await conn.run("workerctl status", timeout=WAIT)
        assert conn.state == ConnState.BLOCKED

        # The operator verifies the new key, forgets the pin, unblocks: TOFU again.
        assert await store.host_keys.forget(IID) is True
        conn.unblock()
        assert (await conn.run("workerctl status", timeout=WAIT)).ok
        assert conn.state == ConnState.CONNECTED
        assert (await store.host_keys.get(IID)).fingerprint == new_fp


async def test_wrong_client_key_is_auth_failure_without_retries(fake, make_conn, sleeps) -> None:
    conn = make_conn(client_key=new_key(), max_attempts=5)
    with pytest.raises(SshAuthFailed) as exc:
        await conn.run("workerctl status", timeout=WAIT)
    assert exc.value.instance_id == IID
    assert "\n" not in str(exc.value)
    assert fake.connections == 1 and conn.connect_attempts == 1
    assert sleeps.delays == []
    assert conn.state == ConnState.DISCONNECTED
    # Each call makes one attempt, never a storm.
    with pytest.raises(SshAuthFailed):
        await conn.run("workerctl status", timeout=WAIT)
    assert fake.connections == 2 and sleeps.delays == []


async def test_client_key_from_path(fake, make_conn, tmp_path: Path, caplog) -> None:
    path = tmp_path / "id_ed25519"
    fake.client_key.write_private_key(path)
    caplog.set_level(logging.DEBUG, logger="vastui.ssh")
    conn = make_conn(client_key=path)
    assert (await conn.run("workerctl status", timeout=WAIT)).ok
    body = fake.client_key.export_private_key().decode()
    pub = fake.client_key.export_public_key().decode().split()[1]
    assert body not in caplog.text and pub not in caplog.text

    missing = make_conn(client_key=tmp_path / "nope", instance_id=7)
    with pytest.raises(SshAuthFailed, match="cannot load client key"):
        await missing.connect()


async def test_unreachable_after_bounded_attempts_with_backoff(make_conn, sleeps) -> None:
    port = free_port()
    states = States()
    conn = make_conn(max_attempts=4, backoff=(0.5, 2.0, 1.5), on_state=states)
    conn.port = port
    with pytest.raises(SshUnreachable) as exc:
        await conn.run("workerctl status", timeout=WAIT)
    assert exc.value.attempts == 4 and conn.connect_attempts == 4
    assert sleeps.delays == [0.5, 1.0, 1.5]  # exponential, capped (rng pinned to full delay)
    assert conn.state == ConnState.DISCONNECTED
    assert [s for s, _ in states.seen].count(ConnState.CONNECTING) == 4
    assert f"127.0.0.1:{port}" in str(exc.value)


async def test_backoff_is_jittered(make_conn) -> None:
    conn = make_conn(rng=lambda: 0.0, backoff=(1.0, 3.0, 100.0))
    assert [conn.backoff_delay(n) for n in (1, 2, 3)] == [0.5, 1.5, 4.5]


# ---------------------------------------------------------------------------------------------
# commands


async def test_run_collects_sanitized_output(make_conn) -> None:
    conn = make_conn()
    result = await conn.run("nasty", timeout=WAIT)
    assert result.exit_status == 0
    for line in result.stdout_lines + result.stderr_lines:
        assert_display_safe(line)
    out = result.stdout_lines
    assert out[0] == "red plain"
    assert out[2] == "bad utf8 \ufffd\ufffd end"
    assert len(out[3]) == MAX_LINE and out[3].endswith("…")
    assert out[4] == "osc  done"
    assert out[-1] == "last line without newline"
    assert result.stderr_lines == ["err bold"]


async def test_run_nonzero_exit_and_run_json_errors(make_conn) -> None:
    conn = make_conn()
    result = await conn.run("fail", timeout=WAIT)
    assert result.exit_status == 3 and not result.ok
    assert result.stderr_lines == ["first", "boom  happened"]

    with pytest.raises(WorkerCommandFailed) as exc:
        await conn.run_json("fail", timeout=WAIT)
    assert exc.value.exit_status == 3 and exc.value.stderr_tail[-1] == "boom  happened"

    with pytest.raises(WorkerProtocolError) as bad:
        await conn.run_json("bad-json", timeout=WAIT)
    msg = str(bad.value)
    assert "\n" not in msg and "\x1b" not in msg
    assert msg.startswith(f"instance {IID}: bad JSON from bad-json")
    assert "this is not json" in msg


async def test_run_timeout_closes_the_remote_channel(fake, make_conn) -> None:
    conn = make_conn()
    with pytest.raises(SshTimeout) as exc:
        await conn.run("sleep-forever", timeout=0.2)
    assert exc.value.timeout == 0.2 and exc.value.command == "sleep-forever"
    async with asyncio.timeout(WAIT):
        await fake.channel_closed.wait()
    assert fake.channels_closed == ["sleep-forever"]
    # The connection itself is fine.
    assert (await conn.run("workerctl status", timeout=WAIT)).ok
    assert fake.connections == 1


async def test_follow_yields_sanitized_lines(make_conn) -> None:
    conn = make_conn()
    async with contextlib.aclosing(conn.follow("nasty")) as lines:
        got = [line async for line in lines]
    for line in got:
        assert_display_safe(line)
        assert "\x1b" not in line
    assert got[0] == "red plain"
    assert got[1] == "bell  and   nul and   del"
    assert got[2] == "bad utf8 \ufffd\ufffd end"
    assert len(got[3]) == MAX_LINE and got[3].endswith("…")
    assert got[5] == "c1  csi"  # 8-bit CSI and its parameters removed
    assert got[-1] == "last line without newline"
    assert len(got) == len(NASTY_STDOUT)


async def test_closing_follow_closes_the_channel(fake, make_conn) -> None:
    conn = make_conn()
    async with contextlib.aclosing(conn.follow("tail-forever")) as lines:
        assert await collect(lines, 1) == ["first line"]
    async with asyncio.timeout(WAIT):
        await fake.channel_closed.wait()
    assert fake.channels_closed == ["tail-forever"]


async def test_follow_failure_raises_with_stderr(make_conn) -> None:
    conn = make_conn()
    with pytest.raises(WorkerCommandFailed) as exc:
        async with contextlib.aclosing(conn.follow("fail")) as lines:
            async for _ in lines:
                pass
    assert exc.value.exit_status == 3
    assert "boom  happened" in str(exc.value)


async def test_close_makes_calls_fail(make_conn) -> None:
    conn = make_conn()
    await conn.connect()
    await conn.close()
    assert conn.closed and conn.state == ConnState.DISCONNECTED
    with pytest.raises(SshClosed):
        await conn.run("workerctl status", timeout=WAIT)


async def test_a_close_the_peer_never_answers_is_aborted_not_waited_for(
    make_conn, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a peer that reads nothing: the close's wait never ends (an engine's stop must not hang)
    from vastui.ssh import connection

    monkeypatch.setattr(connection, "_CLOSE_GRACE", 0.01)
    conn = make_conn()
    await conn.connect()
    real = conn._conn
    assert real is not None
    never = asyncio.get_running_loop().create_future()
    aborted: list[bool] = []
    monkeypatch.setattr(real, "wait_closed", lambda: never)
    monkeypatch.setattr(real, "abort", lambda: aborted.append(True))
    await conn.close()
    assert aborted == [True] and conn.closed and conn.state == ConnState.DISCONNECTED
    never.cancel()


# ---------------------------------------------------------------------------------------------
# workerctl helpers


async def test_worker_status_and_cuzk_status(fake, make_conn) -> None:
    """The reads share one `workerctl session` channel (issue 32: not a channel each)."""
    conn = make_conn()
    worker = Worker(conn)
    status = await worker.status()
    assert status == {"stage": "proving", "rate": 31.4, "msg": "ok"}
    assert await worker.cuzk_status() == fake.cuzk
    assert await Worker(conn).status() == status  # another Worker on the same connection
    assert fake.commands == ["workerctl session"]
    assert fake.asked == ["status", "cuzk-status", "status"]
    assert conn.reads.opened == 1


async def test_an_image_without_session_is_asked_command_by_command(fake, make_conn) -> None:
    fake.session = False
    conn = make_conn()
    worker = Worker(conn)
    assert (await worker.status())["stage"] == "proving"
    assert await worker.cuzk_status() == fake.cuzk
    assert fake.commands == ["workerctl session", "workerctl status", "workerctl cuzk-status"]
    assert conn.reads.supported is False


async def test_a_dropped_session_is_reopened_for_the_next_read(fake, make_conn) -> None:
    conn = make_conn()
    worker = Worker(conn)
    await worker.status()
    fake.drop_connections()  # the connection, and the session on it, gone
    assert (await worker.cuzk_status()) == fake.cuzk
    assert fake.commands == ["workerctl session", "workerctl session"]
    assert conn.reads.opened == 2


@pytest.mark.parametrize(
    ("raw", "error", "match"),
    [
        (b'1 {"error":"cuzk status unavailable"}\n', WorkerCommandFailed, "status 1"),
        (b"0 this is \x1b[31mnot json\n", WorkerProtocolError, "bad JSON"),
        (b"\x1b]0;owned\x07 junk\n", WorkerProtocolError, "bad session answer"),
    ],
)
async def test_a_bad_session_answer_is_the_commands_error(
    fake, make_conn, raw: bytes, error: type[Exception], match: str
) -> None:
    fake.session_raw = raw
    with pytest.raises(error, match=match) as caught:
        await Worker(make_conn()).cuzk_status()
    assert "\x1b" not in str(caught.value) and "\x07" not in str(caught.value)


async def test_worker_rejects_non_object_json(fake, make_conn) -> None:
    fake.status = [1, 2]  # type: ignore[assignment]
    with pytest.raises(WorkerProtocolError, match="expected an object"):
        await Worker(make_conn()).status()


async def test_logs_validates_source_and_quotes(fake, make_conn) -> None:
    worker = Worker(make_conn())
    with pytest.raises(ValueError, match="unknown log source"):
        async for _ in worker.logs("cuzk; rm -rf /"):
            pass
    with pytest.raises(ValueError, match="tail"):
        async for _ in worker.logs("cuzk", tail=-1):
            pass
    assert fake.commands == []

    lines = [line async for line in worker.logs("benchmark", follow=False, tail=3)]
    assert lines == [f"benchmark line {i} ok" for i in range(3)]
    assert fake.commands == ["workerctl logs benchmark --tail 3"]

    async with contextlib.aclosing(worker.logs("cuzk", tail=2)) as follow:
        assert await collect(follow, 2) == ["cuzk line 0 ok", "cuzk line 1 ok"]
    async with asyncio.timeout(WAIT):
        await fake.channel_closed.wait()
    assert fake.commands[-1] == "workerctl logs cuzk --tail 2 --follow"


async def test_events_resume_after_drop_without_duplicates_or_loss(
    fake, make_conn, sleeps, caplog
) -> None:
    states = States()
    worker = Worker(make_conn(on_state=states))
    fake.add_events(
        {"detail": "1"},
        {"detail": "2"},
        "garbage, not json",
        {"detail": "3", "reason": "\x1b[5mhi"},
    )

    async with contextlib.aclosing(worker.events()) as events:
        first = await collect(events, 3)
        assert first == [
            WorkerEvent(detail="1"),
            WorkerEvent(detail="2"),
            WorkerEvent(detail="3", reason="hi"),
        ]
        assert fake.commands == ["workerctl events --follow --after 0"]
        assert "skipping non-JSON event line 3" in caplog.text

        # The connection drops halfway through a line; more events arrive meanwhile.
        fake.drop_mid_line()
        await states.wait_for(ConnState.DISCONNECTED)
        fake.add_events({"detail": "4"}, {"detail": "5"})

        rest = await collect(events, 2)
        assert rest == [WorkerEvent(detail="4"), WorkerEvent(detail="5")]
        assert fake.commands[-1] == "workerctl events --follow --after 4"
        assert fake.connections == 2
        assert len(sleeps.delays) == 1  # one backoff before resuming

        fake.add_events({"detail": "6"})
        assert await collect(events, 1) == [WorkerEvent(detail="6")]


async def test_events_start_after_and_quoting(fake, make_conn) -> None:
    worker = Worker(make_conn())
    fake.add_events(*({"detail": str(i)} for i in range(1, 6)))
    async with contextlib.aclosing(worker.events(after=3)) as events:
        assert await collect(events, 2) == [WorkerEvent(detail="4"), WorkerEvent(detail="5")]
    assert fake.commands == ["workerctl events --follow --after 3"]
    with pytest.raises(ValueError):
        async for _ in worker.events(after=-1):
            pass
    assert shlex.split("workerctl events") == ["workerctl", "events"]


async def test_events_give_up_when_reconnect_fails(fake, make_conn, sleeps) -> None:
    states = States()
    worker = Worker(make_conn(on_state=states, max_attempts=2))
    fake.add_events({"detail": "1"})
    async with contextlib.aclosing(worker.events()) as events:
        assert await collect(events, 1) == [WorkerEvent(detail="1")]
        await fake.stop()
        await states.wait_for(ConnState.DISCONNECTED)
        with pytest.raises(SshUnreachable):
            await collect(events, 1)


# ---------------------------------------------------------------------------------------------
# remote port forwards


async def _echo_server() -> tuple[asyncio.Server, int]:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(4096):
                writer.write(data)
                await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def test_remote_forward_carries_bytes_and_is_restored_on_reconnect(fake, make_conn) -> None:
    echo, echo_port = await _echo_server()
    try:
        fw = RemoteForward("127.0.0.1", 0, "127.0.0.1", echo_port)
        states = States()
        conn = make_conn(forwards=[fw], on_state=states)
        await conn.connect()
        assert fake.forward_requests == [("127.0.0.1", 0)]
        worker_port = conn.forwarded_ports[fw]
        assert worker_port > 0 and conn.forward_errors == {}

        async def roundtrip(port: int, payload: bytes) -> bytes:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            try:
                writer.write(payload)
                await writer.drain()
                async with asyncio.timeout(WAIT):
                    return await reader.readexactly(len(payload))
            finally:
                writer.close()

        assert await roundtrip(worker_port, b"hello through the tunnel") == (
            b"hello through the tunnel"
        )

        # After a reconnect the forward is requested again.
        fake.drop_connections()
        await states.wait_for(ConnState.DISCONNECTED)
        assert conn.forwarded_ports == {}
        await conn.connect()
        assert len(fake.forward_requests) == 2
        assert await roundtrip(conn.forwarded_ports[fw], b"again") == b"again"
    finally:
        echo.close()
        await echo.wait_closed()


# ---------------------------------------------------------------------------------------------
# pool


async def test_pool_one_connection_per_instance(fake, sleeps) -> None:
    pool = SshPool(client_key=fake.client_key, pins=MemoryPins(), sleep=sleeps)
    try:
        a = pool.get_or_create(1, ("127.0.0.1", fake.port))
        assert pool.get_or_create(1, ("127.0.0.1", fake.port)) is a
        b = pool.get_or_create(2, ("127.0.0.1", fake.port))
        assert a is not b and len(pool) == 2 and 1 in pool
        assert (await pool.worker(2, ("127.0.0.1", fake.port)).status())["stage"] == "proving"
        assert b.state == ConnState.CONNECTED

        # A moved endpoint re-points the same connection; a live one (its tunnels) is kept.
        await a.connect()
        other = free_port()
        assert pool.get_or_create(1, ("127.0.0.1", other)) is a
        assert (a.host, a.port) == ("127.0.0.1", other)
        assert a.state == ConnState.CONNECTED

        assert await pool.close_instance(1) is True
        assert await pool.close_instance(1) is False
        assert a.closed and 1 not in pool
        # A closed connection is replaced by a fresh one.
        assert pool.get_or_create(1, ("127.0.0.1", fake.port)) is not a
    finally:
        await pool.close_all()
    assert len(pool) == 0 and b.closed


async def test_a_new_endpoint_keeps_a_live_connection_and_its_tunnels(fake, make_conn) -> None:
    """Vast reports the direct port after the proxy: the live connection (the worker's tunnels)
    is kept; only a later connect goes to the new endpoint."""
    conn = make_conn()
    await conn.connect()
    live = conn._alive()
    assert live is not None
    other = free_port()
    conn.set_endpoint("127.0.0.1", other)
    assert conn._alive() is live and (conn.host, conn.port) == ("127.0.0.1", other)
    result = await conn.run("nasty", timeout=WAIT)  # over the kept connection
    assert result.exit_status == 0 and conn._alive() is live
    await conn.close()
    fresh = make_conn()
    fresh.set_endpoint("127.0.0.1", other)  # not connected: the next connect goes there
    assert fresh._alive() is None and fresh.port == other


async def test_a_read_cancelled_before_its_answer_leaves_no_answer_behind(fake, make_conn) -> None:
    """A follower stopped while its read waits: the next read must not get that answer."""
    conn = make_conn()
    worker = Worker(conn)
    assert (await worker.status())["stage"] == "proving"
    slow = asyncio.Event()
    answer_status = fake._session

    async def late(process: asyncssh.SSHServerProcess) -> None:
        line = await process.stdin.readline()  # the cancelled question, answered late
        await slow.wait()
        fake.asked.append(line.decode().strip())
        process.stdout.write(b"0 " + json.dumps(fake.status).encode() + b"\n")
        await answer_status(process)

    fake._session = late  # the next session opened answers its first question late
    conn.reads.drop()
    task = asyncio.create_task(worker.status())
    for _ in range(200):  # until the question is on its way
        await asyncio.sleep(0)
        if conn.reads.opened == 2:
            break
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    slow.set()
    fake._session = answer_status
    assert await worker.cuzk_status() == fake.cuzk  # not the status asked before
    assert conn.reads.opened == 3
