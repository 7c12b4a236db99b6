"""The secret proxy: the agent holds a stand-in, the upstream gets the real secret, nothing waits."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
from aiohttp import web

from runner_kit.errors import Redactor
from runner_kit.secret_proxy import STAND_IN_PREFIX, SecretProxy

SECRET = "sk-real-secret-0123456789"


class Upstream:
    """A loopback server that records what reached it; /stall streams one event and then waits."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, dict[str, str], bytes]] = []
        self.stalled = asyncio.Event()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.seen.append((request.method, request.path_qs, dict(request.headers), body))
        if request.path.endswith("/stall"):
            resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
            await resp.prepare(request)
            await resp.write(b"data: first\n\n")
            self.stalled.set()
            await asyncio.sleep(60)
            return resp
        if request.path.endswith("/stream"):
            resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
            await resp.prepare(request)
            for i in range(3):
                await resp.write(f"data: {i}\n\n".encode())
            await resp.write_eof()
            return resp
        return web.json_response({"path": request.path, "auth": request.headers.get("authorization")},
                                 status=201, headers={"x-up": "yes"})


@pytest.fixture
async def upstream():
    up = Upstream()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", up.handle)
    runner = web.AppRunner(app, shutdown_timeout=0.05, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    up.base = f"http://127.0.0.1:{runner.addresses[0][1]}"
    yield up
    await runner.cleanup()


async def test_the_upstream_gets_the_secret_and_the_agent_only_a_stand_in(upstream):
    redact = Redactor()
    async with SecretProxy.open(redact) as proxy:
        stand_in = proxy.stand_in(SECRET)
        assert stand_in.startswith(STAND_IN_PREFIX) and SECRET not in stand_in
        assert proxy.stand_in(SECRET) == stand_in, "one stand-in per secret"
        base = proxy.route(upstream.base + "/api/prefix/")
        assert base.startswith("http://127.0.0.1:") and upstream.base not in base
        async with httpx.AsyncClient() as client:
            resp = await client.post(base + "/v1/messages?beta=true&key=" + stand_in,
                                     headers={"x-api-key": stand_in, "authorization": f"Bearer {stand_in}"},
                                     content=b'{"hello": 1}')
    assert resp.status_code == 201 and resp.headers["x-up"] == "yes"
    method, path_qs, headers, body = upstream.seen[0]
    assert method == "POST" and body == b'{"hello": 1}'
    assert path_qs == f"/api/prefix/v1/messages?beta=true&key={SECRET}", "path prefix kept, stand-in swapped"
    assert headers["x-api-key"] == SECRET and headers["Authorization"] == f"Bearer {SECRET}"
    assert SECRET not in redact(f"echo {SECRET}"), "the secret is in the run's redactor"


async def test_streams_pass_through_as_they_come_and_head_works(upstream):
    async with SecretProxy.open() as proxy:
        base = proxy.route(upstream.base)
        async with httpx.AsyncClient() as client:
            head = await client.head(base)
            assert head.status_code == 201
            async with client.stream("GET", base + "/stream") as resp:
                text = b"".join([c async for c in resp.aiter_raw()])
    assert text == b"data: 0\n\ndata: 1\n\ndata: 2\n\n"
    assert [m for m, *_ in upstream.seen] == ["HEAD", "GET"]


async def test_a_closed_proxy_opens_nothing_and_never_waits_for_a_stalled_upstream(upstream):
    proxy = SecretProxy()
    await proxy.start()
    base = proxy.route(upstream.base)
    stand_in = proxy.stand_in(SECRET)
    client = httpx.AsyncClient(timeout=5)
    try:
        async with client.stream("GET", base + "/stall", headers={"x-api-key": stand_in}) as resp:
            chunks = resp.aiter_raw()
            first = await chunks.__anext__()
            assert first.startswith(b"data: first")
            started = time.monotonic()
            await proxy.close()
            assert time.monotonic() - started < 1.0, "the close does not wait out the stalled stream"
            with pytest.raises(httpx.HTTPError):
                async for _ in chunks:
                    pass
        with pytest.raises(httpx.HTTPError):
            await client.get(base + "/x", headers={"x-api-key": stand_in})
    finally:
        await client.aclose()
        await proxy.close()  # twice is fine


async def test_unknown_routes_and_unreachable_upstreams_answer_plainly():
    async with SecretProxy.open() as proxy:
        proxy.stand_in(SECRET)
        dead = proxy.route("http://127.0.0.1:9")  # discard port: nothing listens
        async with httpx.AsyncClient() as client:
            missing = await client.get(proxy.base + "/r/nope/x")
            down = await client.get(dead + "/v1/x")
    assert missing.status_code == 404
    assert down.status_code == 502 and "127.0.0.1" in down.text and SECRET not in down.text


def test_route_refuses_what_is_not_an_http_url():
    proxy = SecretProxy()
    proxy.base = "http://127.0.0.1:1"
    for bad in ("file:///etc/passwd", "ftp://x", "not a url"):
        with pytest.raises(ValueError):
            proxy.route(bad)
