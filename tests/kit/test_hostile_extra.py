"""A chat member who is not benign (attack brief 3, issue 29), at the kit's depth: what the other
hostile suites did not reach. The agent (whatever a member got it to run) talks to its secret proxy
with raw request lines; links go through runner_kit.netguard; attachments are saved where the agent
may have planted links; "allow for this session" is asked about commands written to deceive."""

from __future__ import annotations

import asyncio
import gzip
import os

import httpx
import pytest
from aiohttp import web

from runner_kit import command_scope as cs
from runner_kit.errors import RunnerError
from runner_kit.netguard import FETCH_ALLOW_ENV, fetch
from runner_kit.process import save_attachment
from runner_kit.secret_proxy import SecretProxy
from tests.fakes.http_server import FakeHTTPServer
from tests.helpers import fake_dns

SECRET = "sk-real-secret-0123456789abcdef"
OTHER_SECRET = "sk-other-agents-secret-9876543210"


# --- the secret proxy ----------------------------------------------------------------------------


class Echo:
    """An upstream that answers with the key it was sent: in a header, in a JSON body, in an event
    stream with the key split across two writes, and gzip-compressed (as a gateway's "invalid key
    sk-…" error might)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str | None]] = []

    async def handle(self, request: web.Request) -> web.StreamResponse:
        key = request.headers.get("x-api-key") or ""
        self.seen.append((request.raw_path, key))
        if request.path.endswith("/split"):
            resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
            await resp.prepare(request)
            half = len(key) // 2
            await resp.write(f"data: invalid key {key[:half]}".encode())
            await asyncio.sleep(0.01)
            await resp.write(f"{key[half:]}\n\n".encode())
            await resp.write_eof()
            return resp
        if request.path.endswith("/gzip"):
            return web.Response(body=gzip.compress(f'{{"error": "invalid key {key}"}}'.encode()),
                                headers={"content-encoding": "gzip", "content-type": "application/json"})
        return web.json_response({"error": f"invalid key {key}", "path": request.raw_path}, status=401,
                                 headers={"x-echo-key": key, "www-authenticate": f'Bearer realm="{key}"'})


@pytest.fixture
async def echo():
    up = Echo()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", up.handle)
    runner = web.AppRunner(app, shutdown_timeout=0.05)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    up.base = f"http://127.0.0.1:{runner.addresses[0][1]}"
    yield up
    await runner.cleanup()


async def raw_request(base: str, line: str, headers: dict[str, str]) -> tuple[int, bytes]:
    """Send one request exactly as written (no client normalises its path) and read the answer."""
    host, port = base.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        head = "".join(f"{k}: {v}\r\n" for k, v in {"Host": "x", "Connection": "close", **headers}.items())
        writer.write(f"{line}\r\n{head}\r\n".encode())
        await writer.drain()
        data = await asyncio.wait_for(reader.read(), 2)
    finally:
        writer.close()
    status = int(data.split(b" ", 2)[1])
    return status, data


@pytest.mark.parametrize("tail", [
    "../../admin", "%2e%2e/%2e%2e/admin", "%2E%2E/admin", "..%2f..%2fadmin", ".%2e/admin", "a/../../admin",
    "..%5c..%5cadmin", "./../admin",
])
async def test_the_agent_cannot_leave_the_routes_path_prefix(echo, tail):
    """Before: ``/r/<id>/../../admin`` reached ``/admin`` on the upstream with the real key."""
    async with SecretProxy.open() as proxy:
        stand_in = proxy.stand_in(SECRET)
        base = proxy.route(echo.base + "/tenant-a/v1")
        path = base.removeprefix(proxy.base)
        status, body = await raw_request(proxy.base, f"GET {path}/{tail} HTTP/1.1", {"x-api-key": stand_in})
    assert status == 400 and b"leaves the route" in body
    assert echo.seen == [], "nothing reached the upstream"


async def test_escaped_characters_stay_in_the_path_and_absolute_form_stays_on_the_route(echo):
    async with SecretProxy.open() as proxy:
        stand_in = proxy.stand_in(SECRET)
        base = proxy.route(echo.base + "/tenant-a/v1")
        path = base.removeprefix(proxy.base)
        for line in (f"GET {path}/a%23b?x=1 HTTP/1.1", f"GET {path}/a%3Fq%3D1 HTTP/1.1",
                     f"GET {path}//evil.example/x HTTP/1.1", f"GET http://evil.example{path}/abs HTTP/1.1"):
            status, _ = await raw_request(proxy.base, line, {"x-api-key": stand_in, "Host": "evil.example"})
            assert status == 401
        status, _ = await raw_request(proxy.base, "CONNECT evil.example:443 HTTP/1.1", {"Host": "evil.example:443"})
        assert status in (400, 404, 405)
    assert [p for p, _ in echo.seen] == ["/tenant-a/v1/a%23b?x=1", "/tenant-a/v1/a%3Fq%3D1",
                                         "/tenant-a/v1//evil.example/x", "/tenant-a/v1/abs"]


async def test_an_upstream_that_echoes_the_key_never_shows_it_to_the_agent(echo):
    """Before: the real key came back to the agent in the echoing header and body."""
    async with SecretProxy.open() as proxy:
        stand_in = proxy.stand_in(SECRET)
        base = proxy.route(echo.base)
        async with httpx.AsyncClient() as client:
            plain = await client.get(base + "/v1/models", headers={"x-api-key": stand_in})
            zipped = await client.get(base + "/gzip", headers={"x-api-key": stand_in, "accept-encoding": "gzip"})
            async with client.stream("GET", base + "/split", headers={"x-api-key": stand_in}) as resp:
                streamed = b"".join([c async for c in resp.aiter_raw()])
    assert [key for _, key in echo.seen] == [SECRET] * 3, "the upstream got the real key each time"
    seen_by_agent = [str(plain.headers), plain.text, zipped.text, streamed.decode()]
    for text in seen_by_agent:
        assert SECRET not in text
    assert plain.status_code == 401 and plain.headers["x-echo-key"] == stand_in
    assert plain.json()["error"] == f"invalid key {stand_in}"
    assert zipped.json() == {"error": f"invalid key {stand_in}"}
    assert streamed == f"data: invalid key {stand_in}\n\n".encode()


async def test_another_agents_stand_in_opens_nothing_on_this_proxy(echo):
    async with SecretProxy.open() as mine, SecretProxy.open() as theirs:
        my_stand_in = mine.stand_in(SECRET)
        theirs.stand_in(OTHER_SECRET)
        their_base = theirs.route(echo.base)
        async with httpx.AsyncClient() as client:
            resp = await client.get(their_base + "/v1/models",
                                    headers={"x-api-key": my_stand_in, "authorization": f"Bearer {my_stand_in}"})
    assert echo.seen == [("/v1/models", my_stand_in)], "forwarded as a meaningless value, no secret filled in"
    assert SECRET not in resp.text and OTHER_SECRET not in resp.text


# --- links -----------------------------------------------------------------------------------------


async def get(url: str) -> RunnerError:
    with pytest.raises(RunnerError) as err:
        await fetch(url, label="'pic.png'", max_bytes=1 << 20, budget=2)
    return err.value


@pytest.fixture
def server(monkeypatch):
    monkeypatch.delenv(FETCH_ALLOW_ENV, raising=False)
    srv = FakeHTTPServer()

    async def pic(req, resp):
        await resp.send(200, b"PNG", "image/png")

    srv.add_route("GET", "/pic.png", pic)
    with srv:
        yield srv


async def test_a_host_name_that_is_no_valid_idna_is_refused_with_a_message_not_a_crash(server, monkeypatch):
    """Before: ``xn--zz.test`` made httpx raise IDNAError out of fetch, as a link or as a redirect's
    Location (the chat saw an internal error, not why the link was not fetched)."""
    fake_dns(monkeypatch, {"xn--zz.test": "127.0.0.1", "hop.test": "127.0.0.1"})
    err = await get(f"http://xn--zz.test:{server.port}/pic.png")
    assert err.code == "input.refused"
    assert str(err) == "the link to xn--zz.test was not fetched: it points to a private or local address"
    err = await get("http://xn--localhost-:1/pic.png")
    assert err.code == "input.unreadable" and "xn--localhost-" in str(err)

    monkeypatch.setenv(FETCH_ALLOW_ENV, "hop.test")
    hop = FakeHTTPServer()

    async def go(req, resp):
        await resp.send(302, b"", None, {"Location": f"http://xn--zz.test:{server.port}/pic.png"})

    hop.add_route("GET", "/go", go)
    with hop:
        err = await get(f"http://hop.test:{hop.port}/go")
    assert err.code == "input.unreadable" and str(err) == "could not download 'pic.png': it redirects to an " \
                                                        "invalid address"
    assert server.connections_accepted == 0


@pytest.mark.parametrize("url", [
    "http://localhost.:{port}/pic.png", "http://LOCALHOST:{port}/pic.png", "http://evil.com@127.0.0.1:{port}/pic.png",
    "http://127.0.0.1:{port}@localhost:{port}/pic.png", "http://127。0。0。1:{port}/pic.png",
    "http://[0:0:0:0:0:ffff:127.0.0.1]:{port}/pic.png", "http://[::1%25lo]:{port}/pic.png",
])
async def test_more_spellings_of_this_host_are_never_contacted(server, url):
    err = await get(url.format(port=server.port))
    assert err.code == "input.refused", err
    assert "alice" not in str(err) and server.connections_accepted == 0


# --- attachments -----------------------------------------------------------------------------------


def test_a_long_chinese_or_emoji_file_name_is_saved_with_its_extension(tmp_path):
    """Before: 85 Chinese characters (255 bytes) failed the message with input.unreadable
    "File name too long"; a long name lost its extension."""
    ws = tmp_path / "ws"
    ws.mkdir()
    for name in ("季度报告" * 30 + ".pdf", "😀" * 90 + ".png", "x" * 300 + ".docx", "a\x00b.txt"):
        first = save_attachment(ws, "langbot-files", name, b"one")
        again = save_attachment(ws, "langbot-files", name, b"two")
        for saved in (first, again):
            assert saved.parent == ws.resolve() / "langbot-files"
            assert len(saved.name.encode()) <= 255 and "\x00" not in saved.name
            assert saved.suffix == os.path.splitext(name)[1]
        assert first.read_bytes() == b"one" and again.read_bytes() == b"two"


def test_a_folder_swapped_for_a_link_while_saving_gets_nothing_out(tmp_path, monkeypatch):
    """A follow-up message is saved while the agent's tools run: one swaps the upload folder for a
    link to the host between the checks and the write. Before: the file was created through the
    link, outside the workspace."""
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    ws.mkdir()
    outside.mkdir()
    (ws / "langbot-files").mkdir()
    real_open = os.open

    def racing_open(path, flags, *args, **kw):
        if flags & os.O_CREAT and not (ws / "langbot-files").is_symlink():
            (ws / "langbot-files").rename(ws / "moved")
            (ws / "langbot-files").symlink_to(outside)
        return real_open(path, flags, *args, **kw)

    monkeypatch.setattr(os, "open", racing_open)
    try:
        save_attachment(ws, "langbot-files", "authorized_keys", b"ssh-ed25519 AAAA attacker")
    except RunnerError as err:
        assert err.code == "input.unreadable"
    assert list(outside.iterdir()) == [], "the attachment was written outside the workspace"


# --- "allow for this session" ------------------------------------------------------------------------


@pytest.mark.parametrize("command", [
    "git status\u200b", "git\u200bstatus", "git status\u202e", "git status\u00a0", "git status\u3000-s",
    "git status\u2028", "g\u0456t status", "git\u2060 status",
])
def test_a_command_that_does_not_read_as_itself_is_never_shown_as_another(command):
    """Before: the button read "Allow `git status` for this session" for these."""
    assert not cs.is_simple(command)
    key = cs.command_key(command)
    assert key and key != cs.command_key("git status")
    assert cs.label(key) == "Allow this exact command for this session"
    assert not cs.covers(cs.command_key("git status"), key)
    assert not cs.covers("cmd-prefix:git status", key) and not cs.covers("cmd-prefix:git", key)


@pytest.mark.parametrize(("rule", "command"), [
    ("git", "git -c core.pager=sh status"),
    ("git", "git -c alias.x=!sh x"),
    ("git", "git -c core.sshCommand='sh -c id' fetch"),
    ("git", "git --config-env=core.pager=EVIL log"),
    ("git grep", "git grep --open-files-in-pager=sh x"),
    ("git diff", "git diff --ext-diff"),
    ("tar -xf", "tar -xf a.tar --to-command=sh"),
    ("tar -xf", "tar -xf a.tar --checkpoint=1 --checkpoint-action=exec=sh"),
    ("tar", "tar --use-compress-program=sh -xf a.tar"),
    ("rsync", "rsync -e 'sh -c id' a b"),
    ("awk", "awk 'BEGIN{system(\"id\")}'"),
    ("man", "man -P sh ls"),
    ("vim", "vim -c '!sh'"),
    ("zip", "zip x.zip a -TT 'sh #'"),
    ("ssh-agent", "ssh-agent sh"),
])
def test_a_prefix_rule_never_covers_a_command_that_runs_another(rule, command):
    assert not cs.is_simple(command)
    assert not cs.covers(f"cmd-prefix:{rule}", cs.command_key(command))
    assert cs.prefix_key(rule, command) == ""
    assert cs.covers(cs.command_key(command), cs.command_key(command)), "its own exact key still works"


@pytest.mark.parametrize("command", [
    "git status \\\nrm -rf ~", "git${IFS}status;id", "git status\r", "git status <<<x", "git status\\", "git status #x",
])
def test_an_always_on_git_status_approves_no_trick_spelled_like_it(command):
    assert not cs.covers(cs.command_key("git status"), cs.command_key(command))
    assert not cs.covers("cmd-prefix:git status", cs.command_key(command))


def test_outer_spaces_and_tabs_are_the_same_command():
    assert cs.command_key("git status \t ") == cs.command_key("\tgit  status") == "cmd:git status"
