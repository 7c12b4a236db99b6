"""A link in a chat message reaches public addresses only (runner_kit.netguard): every spelling of
a private or local address is refused, the connection goes to the address that was checked, each
redirect hop is checked, and an administrator's allow-list lets named hosts and ranges through."""

from __future__ import annotations

import ipaddress
import socket

import httpx
import pytest

from runner_kit import netguard
from runner_kit.errors import RunnerError
from runner_kit.inputs import InputFile, download
from runner_kit.netguard import FETCH_ALLOW_ENV, AllowList, checked_addresses, fetch, parse_ip, refusal
from tests.fakes.http_server import FakeHTTPServer
from tests.helpers import fake_dns

BODY = b"\x89PNG\r\n\x1a\n" + b"\x07" * 64

# every spelling here names an address that is not public
REFUSED = [
    "127.0.0.1", "127.9.8.7", "127.0.0.1.", "2130706433", "0x7f000001", "0x7f.1", "0177.0.0.1", "0177.1",
    "127.1", "127.000.000.001", "0", "0.0.0.0", "10.0.0.1", "10.255.255.255", "012.1", "172.16.0.1",
    "172.31.255.254", "192.168.1.1", "3232235777", "100.64.0.1", "100.127.255.254", "169.254.169.254",
    "2852039166", "0xa9.0xfe.0xa9.0xfe", "0251.0376.0251.0376", "169.254.0.1", "224.0.0.1",
    "239.255.255.250", "240.0.0.1", "255.255.255.255", "192.0.2.1", "198.18.0.1", "192.0.0.8",
    "::1", "[::1]", "::", "0:0:0:0:0:0:0:1", "::ffff:127.0.0.1", "[::ffff:7f00:1]", "::ffff:10.0.0.1",
    "::ffff:169.254.169.254", "::127.0.0.1", "64:ff9b::7f00:1", "64:ff9b::a9fe:a9fe", "64:ff9b:1::1",
    "2002:7f00:1::", "2002:a00:1::1", "2002:c0a8:101::1", "2002:a9fe:a9fe::", "fc00::1", "fd12:3456::1",
    "fe80::1", "fe80::1%25eth0", "fec0::1", "ff02::1", "2001:db8::1", "2001::1", "100::1",
]
PUBLIC = [
    "8.8.8.8", "1.1.1.1", "134744072", "0x08.0x08.0x08.0x08", "93.184.215.14", "172.32.0.1", "100.128.0.1",
    "192.169.0.1", "11.0.0.1", "2606:4700:4700::1111", "::ffff:8.8.8.8", "64:ff9b::808:808", "2002:808:808::1",
]


@pytest.mark.parametrize("spelling", REFUSED)
def test_every_private_or_local_spelling_is_refused(spelling):
    ip = parse_ip(spelling)
    assert ip is not None, spelling
    assert refusal(ip) is not None, (spelling, ip)


@pytest.mark.parametrize("spelling", PUBLIC)
def test_public_addresses_pass(spelling):
    ip = parse_ip(spelling)
    assert ip is not None and refusal(ip) is None, (spelling, ip)


def test_legacy_ipv4_spellings_read_as_inet_aton_reads_them():
    assert parse_ip("2130706433") == ipaddress.ip_address("127.0.0.1")
    assert parse_ip("0x7f.1") == ipaddress.ip_address("127.0.0.1")
    assert parse_ip("0177.0.0.01") == ipaddress.ip_address("127.0.0.1")
    assert parse_ip("10.1") == ipaddress.ip_address("10.0.0.1")
    assert parse_ip("192.168.257") == ipaddress.ip_address("192.168.1.1")
    for name in ("example.com", "1e100.net", "08.1", "1.2.3.4.5", "256.1.1.1", "0x", "localhost", ""):
        assert parse_ip(name) is None, name


def test_the_kind_of_address_is_named():
    assert refusal(ipaddress.ip_address("127.0.0.1")) == "loopback"
    assert refusal(ipaddress.ip_address("169.254.169.254")) == "link-local"
    assert refusal(ipaddress.ip_address("100.64.1.1")) == "carrier-grade NAT"
    assert refusal(ipaddress.ip_address("::ffff:192.168.0.1")) == "private"
    assert refusal(ipaddress.ip_address("ff02::1")) == "multicast"


def test_the_allow_list_format(caplog):
    allow = AllowList.parse("files.internal.example, 10.1.0.0/16 *.corp.example bad;entry fd00::/8\n127.0.0.1,Pics.Test.")
    assert allow.allows_host("files.internal.example") and allow.allows_host("FILES.internal.example.")
    assert allow.allows_host("a.b.corp.example") and not allow.allows_host("corp.example")
    assert allow.allows_host("pics.test") and not allow.allows_host("internal.example")
    assert allow.allows_ip(ipaddress.ip_address("10.1.200.3")) and not allow.allows_ip(ipaddress.ip_address("10.2.0.1"))
    assert allow.allows_ip(ipaddress.ip_address("fd00::5")) and allow.allows_ip(ipaddress.ip_address("127.0.0.1"))
    assert not allow.allows_ip(ipaddress.ip_address("127.0.0.2"))
    assert "ignoring 'bad;entry'" in caplog.text


# --- resolving ---------------------------------------------------------------------------------


async def test_a_name_is_refused_when_any_of_its_addresses_is_private(monkeypatch):
    async def resolve(host, port):
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.215.14", port)),
                (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.0.0.7", port))]

    monkeypatch.setattr(netguard, "_getaddrinfo", resolve)
    with pytest.raises(RunnerError) as err:
        await checked_addresses("mixed.example", 80, allow=AllowList(), timeout=1)
    assert err.value.code == "input.refused"
    assert str(err.value) == "the link to mixed.example was not fetched: it points to a private or local address"


async def test_resolving_answers_public_allowed_and_missing_names(monkeypatch):
    fake_dns(monkeypatch, {"cdn.example": ["93.184.215.14"], "files.lan": ["10.1.2.3"]})
    assert await checked_addresses("cdn.example", 443, allow=AllowList(), timeout=1) == [
        ipaddress.ip_address("93.184.215.14")]
    with pytest.raises(RunnerError) as err:
        await checked_addresses("files.lan", 80, allow=AllowList(), timeout=1)
    assert err.value.code == "input.refused"
    assert await checked_addresses("files.lan", 80, allow=AllowList.parse("files.lan"), timeout=1)
    assert await checked_addresses("files.lan", 80, allow=AllowList.parse("10.1.0.0/16"), timeout=1)
    with pytest.raises(RunnerError) as err:
        await checked_addresses("nowhere.example", 80, allow=AllowList(), timeout=1)
    assert err.value.code == "input.unreadable" and "nowhere.example was not found" in str(err.value)


async def test_the_resolver_runs_off_the_event_loop():
    import threading

    seen = []
    real = socket.getaddrinfo

    def spy(*a, **kw):
        seen.append(threading.current_thread() is threading.main_thread())
        return real(*a, **kw)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(socket, "getaddrinfo", spy)
        with pytest.raises(RunnerError):
            await checked_addresses("localhost", 80, allow=AllowList(), timeout=2)
    assert seen == [False]


# --- fetching ----------------------------------------------------------------------------------


@pytest.fixture
def pics():
    srv = FakeHTTPServer()

    async def pic(req, resp):
        await resp.send(200, BODY, "image/png")

    srv.add_route("GET", "/pic.png", pic)
    with srv:
        yield srv


@pytest.fixture
def no_allow(monkeypatch):
    monkeypatch.delenv(FETCH_ALLOW_ENV, raising=False)


def redirector(location: str) -> FakeHTTPServer:
    srv = FakeHTTPServer()

    async def go(req, resp):
        await resp.send(302, b"", None, {"Location": location})

    srv.add_route("GET", "/go", go)
    return srv


async def get(url: str, **kw):
    return await fetch(url, label="'pic.png'", max_bytes=kw.pop("max_bytes", 1 << 20), budget=kw.pop("budget", 5), **kw)


async def refused_with(url: str) -> str:
    with pytest.raises(RunnerError) as err:
        await get(url)
    assert err.value.code == "input.refused", err.value
    return str(err.value)


async def test_a_loopback_server_is_never_contacted(pics, no_allow):
    for url in (pics.url("/pic.png"), f"http://2130706433:{pics.port}/pic.png", f"http://0x7f.1:{pics.port}/pic.png",
                f"http://[::ffff:127.0.0.1]:{pics.port}/pic.png", f"http://127.1:{pics.port}/pic.png"):
        message = await refused_with(url)
        assert "was not fetched: it points to a private or local address" in message
    assert await refused_with(pics.url("/pic.png")) == \
        "the link to 127.0.0.1 was not fetched: it points to a private or local address"
    assert pics.connections_accepted == 0 and pics.requests == []


@pytest.mark.parametrize("url", ["http://10.0.0.1/x.png", "http://192.168.0.1:8080/", "http://169.254.169.254/latest/meta-data/",
                                 "https://[fd00::1]/x", "http://100.64.0.1/", "http://0.0.0.0:80/"])
async def test_private_and_metadata_addresses_are_refused(url, no_allow):
    await refused_with(url)


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://example.com/x", "gopher://127.0.0.1:70/_x",
                                 "dict://127.0.0.1:11211/", "data:text/plain,hi"])
async def test_only_http_and_https_are_fetched(url, no_allow):
    message = await refused_with(url)
    assert "only http and https links" in message


async def test_the_message_names_the_host_only(no_allow):
    message = await refused_with("http://alice:hunter2@127.0.0.1:9/private/path.png?token=s3cr3t-value")
    assert message == "the link to 127.0.0.1 was not fetched: it points to a private or local address"


async def test_a_public_looking_name_that_resolves_to_loopback_is_refused(pics, monkeypatch, no_allow):
    fake_dns(monkeypatch, {"images.example.com": ["127.0.0.1"]})
    message = await refused_with(f"http://images.example.com:{pics.port}/pic.png")
    assert message == "the link to images.example.com was not fetched: it points to a private or local address"
    assert pics.connections_accepted == 0


async def test_the_allow_list_lets_a_loopback_server_through(pics, monkeypatch):
    monkeypatch.setenv(FETCH_ALLOW_ENV, "127.0.0.1")
    got = await get(pics.url("/pic.png"))
    assert got.data == BODY and got.content_type == "image/png"
    (req,) = pics.requests
    assert req.headers["host"] == f"127.0.0.1:{pics.port}"


async def test_the_connection_goes_to_the_checked_address_with_the_links_host_name(pics, monkeypatch):
    """DNS rebinding: the name is resolved once per hop; a second answer could not move the connection."""
    calls: list[str] = []
    fake_dns(monkeypatch, {"rebind.test": ["127.0.0.1", "169.254.169.254"]}, calls)
    monkeypatch.setenv(FETCH_ALLOW_ENV, "127.0.0.1/32")
    got = await get(f"http://rebind.test:{pics.port}/pic.png")
    assert got.data == BODY and calls == ["rebind.test"]
    assert pics.requests[0].headers["host"] == f"rebind.test:{pics.port}"


async def test_a_redirect_into_loopback_is_refused(pics, monkeypatch):
    fake_dns(monkeypatch, {"redirector.test": ["127.0.0.1"]})
    monkeypatch.setenv(FETCH_ALLOW_ENV, "redirector.test")
    with redirector(pics.url("/pic.png")) as hop:
        message = await refused_with(f"http://redirector.test:{hop.port}/go")
        assert len(hop.requests) == 1
    assert message == ("the link to redirector.test was not fetched: it redirects to 127.0.0.1, "
                       "a private or local address")
    assert pics.connections_accepted == 0


@pytest.mark.parametrize("target", ["http://localhost:{port}/pic.png", "http://[::1]:{port}/pic.png",
                                    "http://169.254.169.254/latest/meta-data/", "file:///etc/passwd"])
async def test_every_redirect_hop_is_checked(pics, monkeypatch, target):
    fake_dns(monkeypatch, {"redirector.test": ["127.0.0.1"], "localhost": ["127.0.0.1"]})
    monkeypatch.setenv(FETCH_ALLOW_ENV, "redirector.test")
    with redirector(target.format(port=pics.port)) as hop:
        await refused_with(f"http://redirector.test:{hop.port}/go")
    assert pics.connections_accepted == 0


async def test_an_allowed_redirect_chain_is_followed_and_bounded(pics, monkeypatch):
    fake_dns(monkeypatch, {"redirector.test": ["127.0.0.1"], "pics.test": ["127.0.0.1"]})
    monkeypatch.setenv(FETCH_ALLOW_ENV, "redirector.test, pics.test")
    with redirector(f"http://pics.test:{pics.port}/pic.png") as hop:
        assert (await get(f"http://redirector.test:{hop.port}/go")).data == BODY
    assert pics.requests[0].headers["host"] == f"pics.test:{pics.port}"

    loop = FakeHTTPServer()

    async def again(req, resp):
        await resp.send(302, b"", None, {"Location": "/again"})

    loop.add_route("GET", "/again", again)
    with loop:
        with pytest.raises(RunnerError) as err:
            await get(f"http://redirector.test:{loop.port}/again")
        assert len(loop.requests) == netguard.MAX_REDIRECTS + 1
    assert err.value.code == "input.unreadable" and "more than 5 redirects" in str(err.value)


async def test_size_limits_and_error_statuses_stay(pics, monkeypatch):
    monkeypatch.setenv(FETCH_ALLOW_ENV, "127.0.0.1")
    with pytest.raises(RunnerError) as err:
        await get(pics.url("/pic.png"), max_bytes=16)
    assert err.value.code == "input.too_large"

    streamed = FakeHTTPServer()

    async def endless(req, resp):
        await resp.start_stream(200, "application/octet-stream")
        for _ in range(64):
            await resp.write(b"\0" * 1024)
        await resp.end()

    streamed.add_route("GET", "/big", endless)
    with streamed:
        with pytest.raises(RunnerError) as err:
            await get(streamed.url("/big"), max_bytes=4096)
        assert err.value.code == "input.too_large"
        with pytest.raises(RunnerError) as err:
            await get(streamed.url("/missing"))
        assert err.value.code == "input.unreadable" and "(HTTP 404)" in str(err.value)


async def test_https_is_pinned_with_the_host_name_as_tls_server_name(monkeypatch, no_allow):
    """No TLS server here: the request the client would send is captured instead."""
    fake_dns(monkeypatch, {"cdn.example": ["93.184.215.14"]})
    sent: list[httpx.Request] = []

    async def send(self, request, **kw):
        sent.append(request)
        return httpx.Response(200, content=BODY, request=request)

    monkeypatch.setattr(httpx.AsyncClient, "send", send)
    got = await get("https://cdn.example/a/pic.png?x=1")
    assert got.data == BODY
    (req,) = sent
    assert str(req.url) == "https://93.184.215.14/a/pic.png?x=1"
    assert req.headers["host"] == "cdn.example"
    assert req.extensions["sni_hostname"] == "cdn.example"


async def test_download_uses_bytes_in_hand_and_fetches_only_links(pics, no_allow):
    assert await download(InputFile("a.png", "image", "image/png", data=b"abc"), max_bytes=10, budget=1) == b"abc"
    with pytest.raises(RunnerError) as err:
        await download(InputFile("pic.png", "image", "image/png", url=pics.url("/pic.png")), max_bytes=1 << 20,
                       budget=1)
    assert err.value.code == "input.refused" and pics.connections_accepted == 0


# --- links an answer passes to the chat (netguard.chat_link) ----------------------------------------

OWN = "https://user:secret@dify.example.com:8443/v1"


@pytest.mark.parametrize("url", [
    "https://cdn.example.com/a.png?sign=abc",
    "http://93.184.215.14/report.pdf",
    "https://dify.example.com:8443/files/x/file-preview?sign=s",
])
def test_public_links_pass(url):
    assert netguard.chat_link(url, OWN) == url


@pytest.mark.parametrize("url", [
    "file:///etc/passwd", "javascript:alert(1)", "data:image/png;base64,AAAA", "ftp://example.com/x",
    "http://169.254.169.254/latest/meta-data/", "http://127.0.0.1:8080/x", "http://10.0.0.5/x", "http://[::1]/x",
    "http://2130706433/x", "http://[::ffff:127.0.0.1]/x", "http://localhost/x", "http://api.localhost/x",
    "https://user:pw@cdn.example.com/x", "//evil.example.com/x", "https://cdn.example.com/a b.png",
    "https://cdn.example.com/a\nb.png", "https://cdn.example.com/" + "a" * 9000, "",
])
def test_links_the_chat_must_not_get_are_refused(url):
    assert netguard.chat_link(url, OWN) is None


def test_the_platforms_own_host_and_the_owners_allow_list(monkeypatch):
    own = "http://127.0.0.1:5001/v1"
    assert netguard.chat_link("http://127.0.0.1:5001/files/a.png", own) == "http://127.0.0.1:5001/files/a.png"
    assert netguard.chat_link("http://127.0.0.1:5002/files/a.png", own) is None, "another port is another host"
    assert netguard.chat_link("/files/a.png?sign=1", OWN) == "https://dify.example.com:8443/files/a.png?sign=1"
    assert netguard.chat_link("/files/a.png", None) is None, "a relative link needs the platform's address"
    monkeypatch.setenv(FETCH_ALLOW_ENV, "10.0.0.0/8")
    assert netguard.chat_link("http://10.0.0.5/x", OWN) == "http://10.0.0.5/x"
