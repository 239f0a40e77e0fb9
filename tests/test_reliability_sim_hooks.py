"""The simulator's switches the reliability trials use: every sandbox's sshd refusing
connections (``POST /_sim/ssh``, vastsim/sshd.py ``refuse_connections``) and its census in
``/_sim/stats``; and the harness's TCP proxy that makes the Vast API unreachable."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from pathlib import Path

import asyncssh
import httpx
import pytest

from reliability.proxy import TcpProxy
from vastsim import sshd
from vastsim.app import make_app
from vastsim.cloud import SimCloud


async def _sshd(tmp_path: Path, client_key: asyncssh.SSHKey) -> sshd.SandboxSshd:
    public = client_key.export_public_key().decode()
    server = sshd.SandboxSshd(
        tmp_path,
        {"PATH": "/usr/bin:/bin"},
        lambda: [public],
        asyncssh.generate_private_key("ssh-ed25519"),
    )
    await server.start(0)
    return server


async def _connect(port: int, key: asyncssh.SSHKey) -> asyncssh.SSHClientConnection:
    return await asyncssh.connect(
        "127.0.0.1", port, username="root", client_keys=[key], known_hosts=None,
        connect_timeout=10,
    )  # fmt: skip


async def test_refusing_drops_the_live_connections_and_refuses_new_ones(tmp_path: Path) -> None:
    key = asyncssh.generate_private_key("ssh-ed25519")
    box = await _sshd(tmp_path, key)
    try:
        conn = await _connect(box.ports[0], key)
        assert (await conn.run("echo hi", check=True)).stdout == "hi\n"
        assert sshd.census()["connections"] >= 1

        assert await sshd.refuse_connections(True) >= 1
        await conn.wait_closed()  # dropped, not left hanging
        with pytest.raises(ConnectionRefusedError):
            await _connect(box.ports[0], key)
        # the port stays held: nothing else may take it meanwhile
        other = socket.socket()
        with pytest.raises(OSError):
            other.bind(("127.0.0.1", box.ports[0]))
        other.close()
        assert sshd.census()["listening"] == 0 and sshd.refusing()

        await sshd.refuse_connections(False)
        again = await _connect(box.ports[0], key)  # the same port, listening again
        assert (await again.run("echo back", check=True)).stdout == "back\n"
        again.close()
    finally:
        await sshd.refuse_connections(False)
        await box.stop()


async def test_a_sandbox_started_while_refusing_refuses(tmp_path: Path) -> None:
    key = asyncssh.generate_private_key("ssh-ed25519")
    await sshd.refuse_connections(True)
    box = await _sshd(tmp_path, key)
    try:
        with pytest.raises(ConnectionRefusedError):
            await _connect(box.ports[0], key)
        await sshd.refuse_connections(False)
        conn = await _connect(box.ports[0], key)
        conn.close()
    finally:
        await sshd.refuse_connections(False)
        await box.stop()


async def test_the_switch_is_served_with_the_key() -> None:
    cloud = SimCloud(seed=1)
    transport = httpx.ASGITransport(app=make_app(cloud))
    async with httpx.AsyncClient(transport=transport, base_url="http://sim") as http:
        try:
            denied = await http.post("/_sim/ssh", json={"refuse": True})
            assert denied.status_code == 401 and not sshd.refusing()
            auth = {"Authorization": f"Bearer {cloud.api_key}"}
            bad = await http.post("/_sim/ssh", json={"refuse": "yes"}, headers=auth)
            assert bad.status_code == 400
            on = await http.post("/_sim/ssh", json={"refuse": True}, headers=auth)
            assert on.status_code == 200 and on.json()["refusing"] is True
            stats = (await http.get("/_sim/stats")).json()
            assert stats["ssh"]["refusing"] is True
            off = await http.post("/_sim/ssh", json={"refuse": False}, headers=auth)
            assert off.json()["refusing"] is False
        finally:
            await sshd.refuse_connections(False)


# -- the harness's proxy in front of the Vast API ----------------------------------------------


def _echo_server() -> socket.socket:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    return srv


def _answer_once(srv: socket.socket) -> None:
    conn, _ = srv.accept()
    with conn:
        data = conn.recv(65536)
        assert data.startswith(b"GET /api/v0/instances/ HTTP/1.1\r\n")
        conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}")


def test_the_proxy_passes_refuses_and_passes_again() -> None:
    srv = _echo_server()
    proxy = TcpProxy("127.0.0.1", srv.getsockname()[1])
    proxy.start()
    try:
        url = f"http://127.0.0.1:{proxy.port}/api/v0/instances/"

        def get_answered() -> int:
            t = threading.Thread(target=_answer_once, args=(srv,))
            t.start()
            status = httpx.get(url, timeout=10).status_code
            t.join()
            return status

        assert get_answered() == 200
        proxy.set_mode("refuse")
        with pytest.raises(httpx.ConnectError):
            httpx.get(url, timeout=10)
        proxy.set_mode("pass")
        assert get_answered() == 200
        assert proxy.stats()["refused_periods"] == 1
        # the proxy saw the requests and their answers
        seen = proxy.answers()
        assert [(a.method, a.path, a.status) for a in seen] == [
            ("GET", "/api/v0/instances/", 200),
            ("GET", "/api/v0/instances/", 200),
        ]
    finally:
        proxy.stop()
        srv.close()


def test_the_blackhole_accepts_and_never_answers_then_resets() -> None:
    srv = _echo_server()
    proxy = TcpProxy("127.0.0.1", srv.getsockname()[1])
    proxy.start()
    proxy.set_mode("blackhole")
    client = socket.create_connection(("127.0.0.1", proxy.port), timeout=10)
    try:
        client.sendall(b"GET /api/v0/instances/ HTTP/1.1\r\nhost: x\r\n\r\n")
        deadline = time.monotonic() + 10
        while proxy.stats()["held"] < 1 and time.monotonic() < deadline:
            threading.Event().wait(0.01)  # polling the proxy's count, not timing it
        assert proxy.stats()["held"] == 1
        proxy.set_mode("pass")  # the outage ends: what was held is reset, never answered
        with contextlib.suppress(ConnectionResetError):
            assert client.recv(100) == b""
        assert proxy.answers() == []
    finally:
        client.close()
        proxy.stop()
        srv.close()
