"""Every plugin that downloads a link from the chat reaches public addresses only (issue 29,
scenario 6): a loopback server, a private address, the cloud metadata address, a name that resolves
to loopback and a redirect into loopback are refused with one clear ``input.refused`` message,
nothing is fetched from them and nothing is uploaded to the platform; the administrator's
allow-list (``RUNNER_KIT_FETCH_ALLOW``) lets a server through, and the host's own files (bytes in
the run context) need no fetch at all.

``FETCHING`` names each such plugin; ``test_no_plugin_downloads_a_link_by_itself`` keeps the list
complete (a plugin that imports the kit's ``download`` must be here, and none may fetch a link any
other way)."""

from __future__ import annotations

import ast
import base64
import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from runner_kit.netguard import FETCH_ALLOW_ENV
from runners_cli.host import LocalHost
from runners_cli.plugins import discover, find
from tests.fakes.http_server import FakeHTTPServer
from tests.helpers import failure, fake_dns, make_runner, rtype, run, terminal

ROOT = Path(__file__).resolve().parents[2]
PNG = b"\x89PNG\r\n\x1a\n" + b"\x05" * 48
OTHER_PNG = b"\x89PNG\r\n\x1a\n" + b"\x06" * 48


@dataclass
class Fetcher:
    """How to run one fetching plugin against its loopback fake platform."""

    start: Callable[[], Any]  # the fake platform, started
    config: Callable[[Any], dict[str, Any]]
    uploaded: Callable[[Any], list[bytes]]  # the file bodies the platform received
    asked: Callable[[Any], int]  # chat requests the platform received


def _tbox() -> Fetcher:
    from tests.fakes.tbox import FakeTbox

    key, app = "pat_links_tbox_token_0001", "202501010000000077"

    def start() -> Any:
        return FakeTbox(api_key=key, app_id=app).start()

    return Fetcher(
        start=start,
        config=lambda srv: {"base-url": srv.base_url, "api-key": key, "app-id": app},
        uploaded=lambda srv: [data for _, data, _ in srv.uploads.values()],
        asked=lambda srv: len(srv.chat_requests()),
    )


FETCHING: dict[str, Callable[[], Fetcher]] = {"tbox-agent": _tbox}
# plugins that fetch links the *platform* names in its answer (never one from the chat), through the
# same guarded fetch, and the test that tries a private one against them
FETCHING_PLATFORM_LINKS = {
    "deerflow-agent": "tests/plugins/test_deerflow_agent_runs.py::"
                      "test_presented_paths_outside_the_workspace_and_private_links_are_never_fetched",
}
_find = functools.cache(find)  # reading every manifest once per test is slow


@pytest.fixture(params=sorted(FETCHING))
def plugin(request) -> Iterator[tuple[Fetcher, Any, LocalHost, Any]]:
    fetcher = FETCHING[request.param]()
    info = _find(request.param)
    srv = fetcher.start()
    host = LocalHost(runner_id=info.runner_id)
    try:
        yield fetcher, srv, host, make_runner(info, host)
    finally:
        srv.stop()


@pytest.fixture
def pics() -> Iterator[FakeHTTPServer]:
    """A picture server on 127.0.0.1: what an attacker points the link at."""
    srv = FakeHTTPServer()

    async def pic(req, resp):
        await resp.send(200, PNG, "image/png")

    srv.add_route("GET", "/pic.png", pic)
    with srv:
        yield srv


@pytest.fixture(autouse=True)
def no_allow_list(monkeypatch):
    monkeypatch.delenv(FETCH_ALLOW_ENV, raising=False)


def link(url: str) -> dict[str, Any]:
    return {"contents": [{"type": "image_url", "image_url": {"url": url}}]}


async def refused(plugin, **ctx) -> str:
    fetcher, srv, host, runner = plugin
    # a second file in the same message: it must not reach the platform either
    ctx["attachments"] = [{"type": "image", "source": "base64", "content": base64.b64encode(OTHER_PNG).decode()}]
    results = await run(runner, host, "what is in the picture?", config=fetcher.config(srv), **ctx)
    code, retryable, message = failure(results)
    assert code == "input.refused" and not retryable, (code, message)
    assert fetcher.uploaded(srv) == [] and fetcher.asked(srv) == 0, "nothing reaches the platform"
    return message


async def test_a_loopback_server_is_not_contacted(plugin, pics):
    message = await refused(plugin, **link(pics.url("/pic.png")))
    assert "the link to 127.0.0.1 was not fetched: it points to a private or local address" in message
    assert pics.connections_accepted == 0


@pytest.mark.parametrize("url", ["http://10.0.0.1/pic.png", "http://192.168.1.20:8080/pic.png",
                                 "http://169.254.169.254/latest/meta-data/iam/security-credentials/",
                                 "http://[::ffff:169.254.169.254]/latest/meta-data/", "http://0x7f.1/pic.png"])
async def test_private_and_metadata_addresses_are_refused(plugin, url):
    message = await refused(plugin, **link(url))
    assert "was not fetched: it points to a private or local address" in message
    assert "meta-data" not in message and "security-credentials" not in message


async def test_a_public_looking_name_resolving_to_loopback_is_refused(plugin, pics, monkeypatch):
    fake_dns(monkeypatch, {"images.example.com": "127.0.0.1"})
    message = await refused(plugin, **link(f"http://images.example.com:{pics.port}/pic.png"))
    assert "the link to images.example.com was not fetched" in message
    assert pics.connections_accepted == 0


async def test_a_redirect_into_loopback_is_refused(plugin, pics, monkeypatch):
    """The redirecting server is reachable (allow-listed by name); where it points is not."""
    fake_dns(monkeypatch, {"cdn.example.net": "127.0.0.1"})
    monkeypatch.setenv(FETCH_ALLOW_ENV, "cdn.example.net")
    hop = FakeHTTPServer()

    async def go(req, resp):
        await resp.send(302, b"", None, {"Location": pics.url("/pic.png")})

    hop.add_route("GET", "/pic.png", go)
    with hop:
        message = await refused(plugin, **link(f"http://cdn.example.net:{hop.port}/pic.png"))
        assert len(hop.requests) == 1
    assert "the link to cdn.example.net was not fetched: it redirects to 127.0.0.1" in message
    assert pics.connections_accepted == 0


async def test_the_allow_list_lets_a_loopback_server_through(plugin, pics, monkeypatch):
    fetcher, srv, host, runner = plugin
    monkeypatch.setenv(FETCH_ALLOW_ENV, "127.0.0.1")
    results = await run(runner, host, "what is in the picture?", config=fetcher.config(srv),
                        **link(pics.url("/pic.png")))
    assert rtype(terminal(results)) == "run.completed", terminal(results).data
    assert fetcher.uploaded(srv) == [PNG] and len(pics.requests) == 1


async def test_the_hosts_own_file_needs_no_fetch(plugin, pics):
    """An attachment the host filled in (its bytes) is used as it is, even with a private link beside it."""
    fetcher, srv, host, runner = plugin
    attachment = {"type": "image", "source": "url", "url": pics.url("/pic.png"), "name": "cat.png",
                  "content": base64.b64encode(OTHER_PNG).decode()}
    results = await run(runner, host, "what is in the picture?", config=fetcher.config(srv), attachments=[attachment])
    assert rtype(terminal(results)) == "run.completed", terminal(results).data
    assert fetcher.uploaded(srv) == [OTHER_PNG] and pics.connections_accepted == 0


# --- the list above is complete -------------------------------------------------------------


def _downloads(path: Path) -> list[str]:
    """Ways ``path`` fetches a URL itself, or through the kit's guarded ``download``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module in ("runner_kit.inputs", "runner_kit.netguard"):
            found += [f"imports {a.name}" for a in node.names if a.name in ("download", "fetch")]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            first = node.args[0] if node.args else None
            if node.func.attr == "stream" and isinstance(first, ast.Constant) and first.value == "GET":
                found.append("client.stream('GET', ...)")
            elif node.func.attr == "get" and isinstance(node.func.value, ast.Attribute) \
                    and node.func.value.attr == "client":
                found.append("client.get(...)")
            if any(k.arg == "follow_redirects" for k in node.keywords):
                found.append("follow_redirects=")
    return found


def test_no_plugin_downloads_a_link_by_itself():
    uses: dict[str, list[str]] = {}
    for info in discover():
        for path in sorted(info.directory.rglob("*.py")):
            for how in _downloads(path):
                uses.setdefault(info.dirname, []).append(f"{path.relative_to(ROOT)}: {how}")
    bypass = {p: hows for p, hows in uses.items() if any(": imports " not in h for h in hows)}
    assert bypass == {}, "fetch links only with runner_kit.inputs.download (public addresses only)"
    assert set(uses) == set(FETCHING) | set(FETCHING_PLATFORM_LINKS), \
        f"plugins that download links: {sorted(uses)}; add them to FETCHING (or FETCHING_PLATFORM_LINKS)"
    for plugin, test in FETCHING_PLATFORM_LINKS.items():
        path, _, name = test.partition("::")
        assert f"def {name}(" in (ROOT / path).read_text(encoding="utf-8"), f"{plugin}: {test} is gone"


def test_the_download_finder_catches_the_patterns(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from runner_kit.inputs import download\n"
        "async def f(self, url):\n"
        "    async with self.env.client.stream('GET', url) as r: ...\n"
        "    await self.env.client.get(url)\n"
        "    await other.send(req, follow_redirects=True)\n"
    )
    assert _downloads(probe) == ["imports download", "client.stream('GET', ...)", "client.get(...)", "follow_redirects="]
