"""Regression tests for defects found when the kit was tried as a hostile user would (issue 6 §1)."""

from __future__ import annotations

import asyncio
import gc
import ssl
import subprocess
import time
from pathlib import Path

import pytest

from runner_kit import events as ev
from runner_kit.config import ConfigSchema
from runner_kit.errors import RunnerError
from runner_kit.http import _clients, close_shared_client, open_stream, shared_client
from runner_kit.identity import upstream_user
from runner_kit.runner import Adapter, KitRunner
from runners_cli.host import Identity, LocalHost
from tests.fakes.http_server import FakeHTTPServer
from tests.helpers import failure, rtype

SCHEMA = ConfigSchema.from_items(
    [
        {"name": "api-key", "type": "secret", "default": "sk-hardening-secret"},
        {"name": "timeout", "type": "float", "default": 60},
        {"name": "stream-growth", "type": "float", "default": 1.0, "x-minimum": 0},
    ]
)


class SlowStop(Adapter):
    platform = "Slow"
    stops: list[float] = []

    async def stream(self):
        yield ev.Text("partial answer")
        await asyncio.sleep(60)

    async def cancel(self):
        type(self).stops.append(time.time())
        await asyncio.sleep(10)  # a stop endpoint that hangs


async def test_a_run_ends_before_the_host_deadline_whatever_the_stop_call_does():
    """Issue 34 item 1: the upstream stalls and its stop call hangs; through the SDK's deadline path the
    run's last result (the partial answer with its note) reaches the host and the run itself ends before
    the host's deadline, so the host never replaces the answer with its own failure; the upstream is
    still told to stop, after the run."""
    SlowStop.stops.clear()
    runner_cls = type("R", (KitRunner,), {"adapter": SlowStop, "schema": SCHEMA})
    host = LocalHost()
    r = runner_cls()
    r.bind_runtime(plugin_runtime_handler=host)
    deadline = time.time() + 1.5
    results = [res async for res in r.invoke(host.make_context("x", deadline_at=deadline))]
    ended_at = time.time()
    assert ended_at < deadline, f"the run ended {ended_at - deadline:.2f} s after the host's deadline"
    assert failure(results)[0] == "upstream.timeout"
    assert "partial answer" in str([res.data for res in results])  # the partial answer stays
    for _ in range(100):  # the stop call, made after the run, within moments
        if SlowStop.stops:
            break
        await asyncio.sleep(0.01)
    assert SlowStop.stops, "the upstream was still told to stop"


async def test_zero_or_blank_timeout_means_no_deadline():
    runner_cls = type("R", (KitRunner,), {"adapter": Quick, "schema": SCHEMA})
    host = LocalHost()
    r = runner_cls()
    r.bind_runtime(plugin_runtime_handler=host)
    for value in ("0", "", 0):
        ctx = host.make_context("x", config={"timeout": value})
        assert ctx.runtime.deadline_at is None  # as LangBot reads it
        results = [res async for res in r.invoke(ctx)]
        assert rtype(results[-1]) == "run.completed", results[-1].data


class Quick(Adapter):
    platform = "Quick"

    async def stream(self):
        assert self.env.budget() > 3600
        yield ev.Text("ok")


async def test_negative_minimum_fields_are_config_errors():
    with pytest.raises(RunnerError) as info:
        SCHEMA.load({"stream-growth": -1})
    assert info.value.code == "config.invalid" and "stream-growth" in info.value.message


@pytest.mark.parametrize("key", ["stream-growth", "stream-max-delay", "idle-timeout", "max-file-size-mb"])
def test_dify_declares_minimums_for_its_numbers(key):
    from runners_cli.plugins import find

    schema = ConfigSchema.from_items(find("dify-agent").config_items)
    with pytest.raises(RunnerError) as info:
        schema.load({"base-url": "http://127.0.0.1:1/v1", "api-key": "app-x", "advanced-settings": True, key: -1})
    assert info.value.code == "config.invalid" and key in info.value.message


# --- HTTP ----------------------------------------------------------------------------------------


class Redirecting(FakeHTTPServer):
    def __init__(self, location: str):
        super().__init__()
        self.location = location
        self.add_route("POST", "/v1/chat-messages", self._moved)

    async def _moved(self, req, resp):
        await resp.send(301, b"<html>moved</html>", "text/html", {"Location": self.location})


async def test_redirect_is_a_config_error_naming_where_to():
    with Redirecting("https://dify.example.com/v1/chat-messages?token=abc") as srv:
        with pytest.raises(RunnerError) as info:
            async with open_stream(shared_client(), "POST", srv.url("/v1/chat-messages"), budget=5, platform="Dify"):
                pass
    err = info.value
    assert err.code == "config.invalid" and not err.retryable
    assert "https://dify.example.com/v1/chat-messages" in err.message and "https://" in err.message
    assert "token=abc" not in err.message
    await close_shared_client()


async def test_non_ascii_key_is_a_config_error_not_a_crash():
    with Redirecting("/x") as srv:
        with pytest.raises(RunnerError) as info:
            async with open_stream(shared_client(), "POST", srv.url("/v1/chat-messages"), budget=5, platform="Dify",
                                   headers={"Authorization": "Bearer app-密钥\u3000"}):
                pass
    assert info.value.code == "config.invalid"
    assert "密钥" not in info.value.message
    await close_shared_client()


@pytest.fixture(scope="module")
def tls_cert(tmp_path_factory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("tls")
    cert, key = d / "cert.pem", d / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
         "-days", "1", "-subj", "/CN=127.0.0.1"],
        check=True, capture_output=True,
    )
    return cert, key


async def test_tls_certificate_failure_is_said_and_not_retryable(tls_cert):
    cert, key = tls_cert
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)

    async def handle(reader, writer):
        try:
            await reader.read(100)
        except Exception:  # noqa: BLE001 - the client aborts the handshake
            pass
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=ctx)
    port = server.sockets[0].getsockname()[1]
    try:
        with pytest.raises(RunnerError) as info:
            async with open_stream(shared_client(), "POST", f"https://127.0.0.1:{port}/v1/x", budget=5,
                                   platform="Dify"):
                pass
    finally:
        server.close()
        await server.wait_closed()
        await close_shared_client()
    err = info.value
    assert err.code == "upstream.tls" and not err.retryable
    assert "TLS certificate verification failed" in err.message
    assert "refused" not in err.message


async def test_shared_client_keeps_no_cookies():
    class Cookie(FakeHTTPServer):
        def __init__(self):
            super().__init__()
            self.add_route("GET", "/c", self._c)

        async def _c(self, req, resp):
            await resp.send(200, b"{}", "application/json", {"Set-Cookie": "sid=bot-a-secret; Path=/"})

    with Cookie() as srv:
        client = shared_client()
        await client.get(srv.url("/c"))
        await client.get(srv.url("/c"))
        assert [r.headers.get("cookie") for r in srv.find_requests()] == [None, None]
        assert not list(client.cookies.jar)
    await close_shared_client()


async def test_shared_client_connections_probe_a_vanished_peer_with_tcp_keepalive():
    """Issue 33 item 14: a stream that is silent while the platform works must not wait a whole
    deadline (or a day, with timeout 0) on a connection whose server is gone: every connection of
    the shared client has TCP keepalive on, probing after 30 quiet seconds."""
    import socket

    from runner_kit import http as kit_http

    class Ok(FakeHTTPServer):
        def __init__(self):
            super().__init__()
            self.add_route("GET", "/ok", self._ok)

        async def _ok(self, req, resp):
            await resp.send(200, b"{}", "application/json")

    with Ok() as srv:
        async with shared_client().stream("GET", srv.url("/ok")) as resp:
            sock = resp.extensions["network_stream"].get_extra_info("socket")
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
            if hasattr(socket, "TCP_KEEPIDLE"):
                assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == kit_http.KEEPALIVE_IDLE
                assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == kit_http.KEEPALIVE_COUNT
            await resp.aread()
    await close_shared_client()


async def test_shared_client_still_goes_through_the_proxy_the_environment_names(monkeypatch):
    """Keepalive needs the client's own transport; a proxy set in HTTP_PROXY is still used."""
    lines: list[bytes] = []

    async def proxy(reader, writer):
        lines.append(await reader.readline())
        while (await reader.readline()) not in (b"\r\n", b""):
            pass
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(proxy, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{port}")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    await close_shared_client()
    try:
        resp = await shared_client().get("http://platform.example/v1/ping")
        assert resp.text == "ok"
        assert lines == [b"GET http://platform.example/v1/ping HTTP/1.1\r\n"]
    finally:
        await close_shared_client()
        server.close()
        await server.wait_closed()


def test_clients_of_finished_event_loops_are_freed():
    class Ok(FakeHTTPServer):
        def __init__(self):
            super().__init__()
            self.add_route("GET", "/x", self._x)

        async def _x(self, req, resp):
            await resp.send(200, b"{}", "application/json")

    with Ok() as srv:
        async def use():
            await shared_client().get(srv.url("/x"))  # a pooled connection ties the client to its loop

        for _ in range(4):
            asyncio.run(use())  # never closed explicitly, like a worker loop that went away
        gc.collect()
        assert len(_clients) <= 1, "at most the entry of the loop that ran last"


# --- identity ------------------------------------------------------------------------------------


def test_hashed_identity_is_stable_opaque_and_scoped_per_bot():
    host = LocalHost()
    a = host.make_context("x", identity=Identity(actor_id="wxid_alice", bot_id="bot-1"))
    a2 = host.make_context("y", identity=Identity(actor_id="wxid_alice", bot_id="bot-1", conversation_id="other"))
    b = host.make_context("x", identity=Identity(actor_id="wxid_bob", bot_id="bot-1"))
    other_bot = host.make_context("x", identity=Identity(actor_id="wxid_alice", bot_id="bot-2"))
    ua = upstream_user(a, "hashed")
    assert ua.startswith("lb_") and "alice" not in ua and len(ua) == 35
    assert upstream_user(a2, "hashed") == ua
    assert upstream_user(b, "hashed") != ua
    assert upstream_user(other_bot, "hashed") != ua
    assert upstream_user(a, "actor") == "user_wxid_alice"


def test_legacy_identities_stay_exactly_as_the_migration_expects():
    host = LocalHost()
    ctx = host.make_context("x", identity=Identity(launcher_type="group", launcher_id="123", bot_id="b-9"))
    assert upstream_user(ctx, "legacy-session") == "group_123"
    assert upstream_user(ctx, "legacy-bot") == "b-9"
    bare = host.make_context("x", identity=Identity(launcher_type=None, launcher_id=None))
    with pytest.raises(RunnerError) as info:
        upstream_user(bare, "legacy-session")
    assert info.value.code == "config.identity_unavailable"
