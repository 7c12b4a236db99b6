"""A long conversation against the kit: dozens of streamed model calls through one secret proxy (a
real key echoed back, split at every byte, gzip-compressed, cut off mid-way), hundreds of
attachments with the same long name, and a manifest edited while ``runners chat`` keeps running."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import os
import random
import signal
import zlib

import httpx
import pytest
from aiohttp import web

from runner_kit.errors import RunnerError
from runner_kit.process import NAME_BYTES, safe_file_name, save_attachment
from runner_kit.secret_proxy import SecretProxy, _Mask

SECRET = "sk-ant-api03-" + "Q7x" * 30  # an Anthropic-shaped key, about 100 bytes
TOKEN = "tok_" + "ab" * 20  # a second secret of the same agent (the LangBot MCP token)
PATIENCE = 5.0  # only reached when something is broken; a passing test waits milliseconds


def reference(data: bytes, stand_ins: dict[str, str]) -> bytes:
    for real, fake in stand_ins.items():
        data = data.replace(real.encode(), fake.encode())
    return data


def fed(mask: _Mask, chunks: list[bytes]) -> bytes:
    return b"".join(mask.feed(c) for c in chunks) + mask.flush()


# --- the mask on its own ---------------------------------------------------------------------------


PAIRS = {SECRET: "lbsi-STANDIN-1", TOKEN: "lbsi-STANDIN-2"}
EVENTS = (
    f"data: {{\"error\": \"invalid key {SECRET}\"}}\n\n"  # the key whole
    f"data: sk-ant-api03-Q7 is not a key\n\n"  # a prefix, then something else
    f"data: {SECRET}{SECRET}{TOKEN}\n\n"  # back to back
    f"data: sk-sk-ant-{SECRET[:-1]}{SECRET}\n\n"  # near misses just before the real thing
    f"data: trailing {SECRET[:40]}"  # the stream ends on the start of the key
).encode()


def test_every_split_of_a_stream_gives_the_same_answer_with_every_key_swapped():
    want = reference(EVENTS, PAIRS)
    assert SECRET.encode() not in want and want.endswith(SECRET[:40].encode())
    for cut in range(len(EVENTS) + 1):
        got = fed(_Mask(PAIRS), [EVENTS[:cut], EVENTS[cut:]])
        assert got == want, f"split at byte {cut}"
    assert fed(_Mask(PAIRS), [EVENTS[i:i + 1] for i in range(len(EVENTS))]) == want, "one byte at a time"


def test_a_long_stream_in_random_pieces_loses_nothing_and_repeats_nothing():
    rng = random.Random(29)
    parts = []
    for i in range(3000):  # a few hundred KB of events, a key now and then
        text = f"delta {i} " + ("x" * rng.randrange(0, 120))
        if i % 97 == 0:
            text += f" key={SECRET}"
        if i % 89 == 0:
            text += f" {SECRET[:rng.randrange(1, len(SECRET))]}"
        parts.append(f"event: content_block_delta\ndata: {text}\n\n".encode())
    body = b"".join(parts)
    chunks, at = [], 0
    while at < len(body):
        n = rng.choice((1, 2, 3, 7, 64, 500, 4096, 16384))
        chunks.append(body[at:at + n])
        at += n
    mask = _Mask(PAIRS)
    assert fed(mask, chunks) == reference(body, PAIRS)
    assert mask.flush() == b"", "a second flush gives nothing more"


def test_a_complete_event_is_never_held_back_however_it_is_cut():
    """Latency: whatever is held is the start of a key, never an event's closing newlines, so every
    complete event reaches the agent when its last byte arrives."""
    event = f"data: the key begins {SECRET[:50]}\n\n".encode()
    for cut in range(1, len(event) + 1):
        mask = _Mask(PAIRS)
        out = mask.feed(event[:cut]) + mask.feed(event[cut:])
        assert out == event, f"split at byte {cut}: {len(event) - len(out)} bytes held"


# --- through the proxy ------------------------------------------------------------------------------


def long_answer(n: int, key: str) -> bytes:
    """One model call's stream: ``n`` events echoing ``key``, ending on the key's first 20 bytes."""
    events = b"".join(f"data: {{\"i\": {i}, \"text\": \"{'y' * 150}\", \"echo\": \"{key}\"}}\n\n".encode()
                      for i in range(n))
    return events + f"data: last {key[:20]}".encode()


class Model:
    """A model API that streams back the key it was sent, in the ways a long tool loop meets."""

    def __init__(self) -> None:
        self.go = asyncio.Event()  # the test lets the second half of /paced through
        self.gone = asyncio.Event()  # /held's handler saw its client leave
        self.requests = 0

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.requests += 1
        key = request.headers.get("x-api-key", "")
        n = int(request.query.get("n", "0"))
        sse = {"content-type": "text/event-stream"}
        if request.path == "/v1/long":  # one model call: n events, cut anywhere (in the key too)
            resp = web.StreamResponse(headers=sse)
            await resp.prepare(request)
            body = long_answer(n, key)
            for at in range(0, len(body), 997):
                await resp.write(body[at:at + 997])
            await resp.write_eof()
            return resp
        if request.path == "/v1/paced":  # an event, then nothing until the test says so
            zipped = request.query.get("gzip") == "1"
            resp = web.StreamResponse(headers={**sse, **({"content-encoding": "gzip"} if zipped else {})})
            await resp.prepare(request)
            z = zlib.compressobj(wbits=31)

            def pack(data: bytes) -> bytes:
                return z.compress(data) + z.flush(zlib.Z_SYNC_FLUSH) if zipped else data

            half = len(key) // 2
            await resp.write(pack(f"data: first {key[:half]}".encode()))
            await asyncio.sleep(0.005)
            await resp.write(pack(f"{key[half:]}\n\n".encode()))
            await self.go.wait()
            await resp.write(pack(b"data: second\n\n") + (z.flush() if zipped else b""))
            await resp.write_eof()
            return resp
        if request.path == "/v1/big":  # a large gzip body, decoded on the way
            body = b"".join(f"line {i} {key}\n".encode() for i in range(n))
            return web.Response(body=gzip.compress(body), headers={"content-encoding": "gzip"})
        if request.path == "/v1/held":  # cut off while the start of the key is held
            resp = web.StreamResponse(headers=sse)
            await resp.prepare(request)
            await resp.write(f"data: ok\n\ndata: {key[:30]}".encode())
            try:
                await asyncio.sleep(3600)
            finally:
                self.gone.set()
        return web.Response(status=404)


@pytest.fixture
async def model():
    m = Model()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", m.handle)
    runner = web.AppRunner(app, shutdown_timeout=0.05, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    m.base = f"http://127.0.0.1:{runner.addresses[0][1]}"
    yield m
    m.go.set()
    await runner.cleanup()


async def test_dozens_of_long_streams_through_one_proxy_arrive_whole_with_the_key_swapped(model):
    async with SecretProxy.open() as proxy, httpx.AsyncClient(timeout=PATIENCE) as client:
        base = proxy.route(model.base)
        stand_in = proxy.stand_in(SECRET)
        for call in range(24):  # a tool loop of two dozen rounds, ~250 KB each
            async with client.stream("POST", base + "/v1/long", params={"n": 1200},
                                     headers={"x-api-key": stand_in}) as resp:
                body = b"".join([c async for c in resp.aiter_raw()])
            want = long_answer(1200, stand_in)[:-20] + SECRET[:20].encode()  # its end: not a whole key
            assert body == want, f"call {call}: {len(body)} bytes, {len(want)} expected"
        assert not proxy._active, "every request served is forgotten"
    assert model.requests == 24


@pytest.mark.parametrize("zipped", ["0", "1"], ids=["plain", "gzip"])
async def test_each_event_reaches_the_agent_when_it_is_complete(model, zipped):
    """Nothing waits for the next event: the first one (its key swapped) arrives while the model
    is still thinking about the second, compressed or not."""
    async with SecretProxy.open() as proxy, httpx.AsyncClient(timeout=PATIENCE) as client:
        base = proxy.route(model.base)
        stand_in = proxy.stand_in(SECRET)
        async with client.stream("GET", base + "/v1/paced", params={"gzip": zipped},
                                 headers={"x-api-key": stand_in}) as resp:
            assert "content-encoding" not in resp.headers
            got = b""
            stream = resp.aiter_raw()
            while not got.endswith(b"\n\n"):
                got += await asyncio.wait_for(anext(stream), PATIENCE)
            assert got == f"data: first {stand_in}\n\n".encode()
            model.go.set()
            rest = b"".join([c async for c in stream])
        assert rest == b"data: second\n\n"


async def test_a_large_gzip_answer_is_decoded_whole(model):
    async with SecretProxy.open() as proxy, httpx.AsyncClient(timeout=PATIENCE) as client:
        base = proxy.route(model.base)
        stand_in = proxy.stand_in(SECRET)
        resp = await client.get(base + "/v1/big", params={"n": 40000}, headers={"x-api-key": stand_in})
    assert resp.status_code == 200 and "content-encoding" not in resp.headers
    assert resp.content == b"".join(f"line {i} {stand_in}\n".encode() for i in range(40000))


async def test_a_stream_cancelled_while_a_key_start_is_held_closes_upstream_and_the_proxy_goes_on(model):
    async with SecretProxy.open() as proxy, httpx.AsyncClient(timeout=PATIENCE) as client:
        base = proxy.route(model.base)
        stand_in = proxy.stand_in(SECRET)
        async with client.stream("GET", base + "/v1/held", headers={"x-api-key": stand_in}) as resp:
            first = await asyncio.wait_for(anext(resp.aiter_raw()), PATIENCE)
            assert first == b"data: ok\n\ndata: ", "the complete event came, the key's start is held"
        await asyncio.wait_for(model.gone.wait(), PATIENCE)  # the agent left: so did the upstream call
        for _ in range(100):
            if not proxy._active:
                break
            await asyncio.sleep(0.01)
        assert not proxy._active
        again = await client.get(base + "/v1/big", params={"n": 3}, headers={"x-api-key": stand_in})
        assert again.content == b"".join(f"line {i} {stand_in}\n".encode() for i in range(3))


# --- attachments over a long conversation -------------------------------------------------------


def test_the_same_name_sent_a_thousand_times_is_still_saved(tmp_path):
    """Before: once 999 numbered copies of "image.png" were in the workspace (weeks of screenshots
    from a platform that names them all alike), every later message with one failed with "too
    many files named image.png", for good."""
    folder = tmp_path / "uploads"
    folder.mkdir()
    for n in range(1000):
        (folder / ("image.png" if n == 0 else f"{n}-image.png")).write_bytes(b"old")
    saved = {save_attachment(tmp_path, "uploads", "image.png", f"new {i}".encode()) for i in range(3)}
    assert len(saved) == 3 and all(p.parent == folder and p.name.endswith("image.png") for p in saved)
    assert sorted(p.read_bytes() for p in saved) == [b"new 0", b"new 1", b"new 2"]
    assert len(list(folder.iterdir())) == 1003, "nothing was replaced"


@pytest.mark.parametrize("long_name", [
    "报告" * 120 + ".pdf",  # 3 bytes a character: cut by bytes
    "a" * 300 + ".tar",  # cut by characters
    "é" * 99 + "x" * 5 + ".docx",
], ids=["cjk", "ascii", "mixed"])
def test_long_similar_names_keep_their_extension_and_fit_the_file_system(tmp_path, long_name):
    variants = [long_name[:-5] + f"{i}" + long_name[-5:] for i in range(5)]  # differ past the cut
    paths = [save_attachment(tmp_path, "uploads", v, b"x") for v in variants for _ in range(30)]
    assert len(set(paths)) == 150
    ext = long_name.rsplit(".", 1)[1]
    assert all(p.suffix == "." + ext for p in paths)
    assert all(len(p.name.encode()) <= NAME_BYTES + len("999-") for p in paths)
    assert len(safe_file_name(long_name).encode()) <= NAME_BYTES


def test_the_folder_turned_into_a_link_is_still_refused(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "uploads").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(RunnerError) as err:
        save_attachment(tmp_path, "uploads", "a.txt", b"x")
    assert err.value.code == "input.unreadable" and not list((tmp_path / "elsewhere").iterdir())


# --- a long-lived `runners chat` --------------------------------------------------------------------


def test_a_manifest_edited_while_chat_runs_is_read_again_even_with_the_same_size_and_time(tmp_path):
    """Before: the cache knew a file by its size and modification time; an edit that kept both
    (a version bumped within the file system's clock tick, a file put back with ``cp -p`` or
    ``rsync -t``) left the running process on the old manifest."""
    from runners_cli.plugins import _read_yaml

    path = tmp_path / "manifest.yaml"
    path.write_text("metadata:\n  version: 1.0.0\n")
    first = _read_yaml(path)
    stamp = path.stat()
    first["metadata"]["version"] = "changed by a caller"
    assert _read_yaml(path)["metadata"]["version"] == "1.0.0", "callers get their own copy"
    path.write_text("metadata:\n  version: 1.0.1\n")
    os.utime(path, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    assert path.stat().st_size == stamp.st_size
    assert _read_yaml(path)["metadata"]["version"] == "1.0.1"


def test_the_manifest_cache_does_not_grow_with_reads(tmp_path):
    from runners_cli import plugins

    path = tmp_path / "manifest.yaml"
    before = len(plugins._parsed)
    for i in range(200):
        path.write_text(f"n: {i}\n")
        assert plugins._read_yaml(path) == {"n": i}
    assert len(plugins._parsed) == before + 1



# --- the sandbox probe ----------------------------------------------------------------------------


async def test_a_probe_cancelled_twice_while_its_bwrap_is_set_up_leaves_no_bwrap(tmp_path, monkeypatch):
    """Before: the first cancel waited for the set-up to hand back bwrap; a second one (the run
    cancelled, then the plugin stopping) cancelled that set-up instead, and bwrap's namespaced
    child waited for ever, one more each time it happened."""
    from runner_kit import sandbox
    from runner_kit.process import alive

    pids = tmp_path / "child.pid"
    stuck = tmp_path / "bwrap"
    stuck.write_text(f"#!/bin/sh\nsleep 3600 & echo $! > {pids}\nwait\n")
    stuck.chmod(0o755)
    handed_back = asyncio.Event()
    real_exec = asyncio.create_subprocess_exec

    async def slow_setup(*args, **kwargs):
        proc = await real_exec(*args, **kwargs)
        await handed_back.wait()  # the pipes are still being connected
        return proc

    monkeypatch.setattr(sandbox.asyncio, "create_subprocess_exec", slow_setup)
    sandbox.forget_probes()
    task = asyncio.ensure_future(sandbox.probe(str(stuck)))
    for _ in range(500):
        if pids.exists() and pids.read_text().strip():
            break
        await asyncio.sleep(0.01)
    child = int(pids.read_text())
    task.cancel()
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    handed_back.set()
    for _ in range(500):
        if not alive(child):
            break
        await asyncio.sleep(0.01)
    try:
        assert not alive(child), "the probe's bwrap was left waiting"
    finally:
        with contextlib.suppress(OSError):
            os.kill(child, signal.SIGKILL)
        sandbox.forget_probes()
