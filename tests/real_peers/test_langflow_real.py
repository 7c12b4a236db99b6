"""LangflowAgent against a real Langflow 1.13 (opt-in: RUN_SLOW=1; see real-http-peers.md §2).

- ``langflow==1.13.0`` is installed with ``uv`` into ``$LANGFLOW_REAL_VENV`` (default
  ``~/.cache/langbot-agent-runners/langflow-1.13-venv``, about 1.8 GB; ~30 s with a warm uv cache)
  on first use and reused once the marker file says the install finished. A file lock keeps two runs
  from installing at once. When ``uv`` or the install fails, the tests skip and say what failed.
- Langflow runs ``--backend-only`` on a free 127.0.0.1 port with its own config dir and SQLite in tmp
  (``LANGFLOW_AUTO_LOGIN=true`` to mint an API key, ``LANGFLOW_SSRF_ALLOWED_HOSTS=127.0.0.1`` so its
  OpenAI component may call the loopback fake model). It takes 30-40 s to answer ``/health``.
- Flows (``langflow_flows.py``, built with lfx's graph API in the Langflow venv): Chat Input → Chat
  Output; Chat Input → OpenAI (streaming, base URL = ``tests.fakes.openai.FakeOpenAI``, Message
  History as the system message) → Chat Output; the same pointing at a fake model that answers 500.
- Uploads: an image goes by ``/api/v1/files/upload/{flow}``, another file by ``/api/v2/files``; both
  must be gone after the run (``GET /api/v1/files/list/{flow}``, ``GET /api/v2/files``). A LangBot
  reset deletes the old session's messages (``GET /api/v1/monitor/messages``). Closing the stream
  (a stop) makes Langflow cancel the flow, which drops its model call.
- Langflow (a process group of its own) is stopped by its PID at the end.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import struct
import subprocess
import time
import zlib
from pathlib import Path

import httpx
import pytest

from runner_kit.http import close_shared_client
from runners_cli.host import Identity, LocalHost
from tests.fakes.openai import FakeOpenAI
from tests.helpers import deltas, failure, final_text, make_runner, rtype, run, state_updates, terminal
from tests.real_peers import peers

pytestmark = [pytest.mark.slow, pytest.mark.real_peers, pytest.mark.timeout(1800)]

LANGFLOW_VERSION = "1.13.0"
MARKER = "langbot-install-complete.json"
INSTALL_TIMEOUT = 1200.0
START_TIMEOUT = 240.0
LOOPBACK = "127.0.0.1"
FLOWS_SCRIPT = Path(__file__).with_name("langflow_flows.py")
TIMINGS: dict[str, float] = {}
ANSWER = "Hello from the fake model."
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 64).decode()
ECHO_ENDPOINT = "lb-echo"  # the echo flow's endpoint name


def _real_png() -> bytes:
    """A 2×2 PNG that PIL opens (Langflow checks an image by its content before giving it to a model)."""
    raw = b"".join(b"\x00" + b"\xff\x00\x00" * 2 for _ in range(2))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 2, 2, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


IMAGE = base64.b64encode(_real_png()).decode()
TXT = base64.b64encode(b"the secret word is kiwi").decode()


def say(text: str) -> None:
    peers.say("langflow-real", text)


def provide_langflow() -> Path:
    """The venv with Langflow installed (installing it under a lock if the marker is missing)."""
    venv = peers.cached_path("LANGFLOW_REAL_VENV", "langflow-1.13-venv")
    return peers.provide_venv(venv, [f"langflow=={LANGFLOW_VERSION}"], label="Langflow real peer",
                              command="langflow", marker=MARKER, timeout=INSTALL_TIMEOUT, timings=TIMINGS)


class Peer:
    """The running Langflow, its API key, the flows and the fake models."""

    def __init__(self, url: str, key: str, flows: dict[str, str], model: FakeOpenAI, broken: FakeOpenAI):
        self.url, self.key, self.flows, self.model, self.broken = url, key, flows, model, broken

    def config(self, flow: str, **extra) -> dict:
        return {"base-url": self.url, "api-key": self.key, "flow-id": self.flows[flow], **extra}

    def messages(self, session: str) -> list[dict]:
        r = httpx.get(self.url + "/api/v1/monitor/messages", params={"session_id": session},
                      headers={"x-api-key": self.key}, timeout=30)
        r.raise_for_status()
        return r.json()

    def get(self, path: str) -> object:
        r = httpx.get(self.url + path, headers={"x-api-key": self.key}, timeout=30)
        r.raise_for_status()
        return r.json()

    def flow_files(self, flow: str) -> list[str]:
        """What the v1 (images) route keeps beside the flow."""
        return list(self.get(f"/api/v1/files/list/{self.flows[flow]}")["files"])  # type: ignore[index]

    def my_files(self) -> list[str]:
        """The key owner's "My Files" (v2)."""
        return [f["path"] for f in self.get("/api/v2/files")]  # type: ignore[union-attr]


@pytest.fixture(scope="module")
def peer(tmp_path_factory):
    venv = provide_langflow()
    model = FakeOpenAI(api_key=None)  # the flows' OpenAI component sends its own placeholder key
    model.token_delay = 0.15
    model.start()
    broken = FakeOpenAI(api_key=None)
    broken.fault = "http_500"
    broken.start()
    home = tmp_path_factory.mktemp("langflow")
    port = peers.free_port()
    env = {
        **os.environ,
        "LANGFLOW_CONFIG_DIR": str(home),
        "LANGFLOW_DATABASE_URL": f"sqlite:///{home}/langflow.db",
        "LANGFLOW_AUTO_LOGIN": "true",
        "DO_NOT_TRACK": "true",
        "LANGFLOW_SSRF_ALLOWED_HOSTS": LOOPBACK,
    }
    log = home / "langflow.log"
    out = open(log, "w", encoding="utf-8")
    proc = subprocess.Popen(
        [str(venv / "bin" / "langflow"), "run", "--host", LOOPBACK, "--port", str(port), "--backend-only",
         "--no-open-browser", "--workers", "1"],
        stdout=out, stderr=subprocess.STDOUT, env=env, cwd=home, start_new_session=True,
    )
    url = f"http://{LOOPBACK}:{port}"
    try:
        TIMINGS["start"] = peers.wait_until_up(proc, url + "/health", log, "Langflow", START_TIMEOUT)
        say(f"Langflow {LANGFLOW_VERSION} answered /health after {TIMINGS['start']:.1f}s on {url}")
        token = httpx.get(url + "/api/v1/auto_login", timeout=30).json()["access_token"]
        key = httpx.post(url + "/api/v1/api_key/", headers={"Authorization": f"Bearer {token}"},
                         json={"name": "langbot-real-peer"}, timeout=30).json()["api_key"]
        built = subprocess.run([str(venv / "bin" / "python"), str(FLOWS_SCRIPT), model.base_url, broken.base_url],
                               capture_output=True, text=True, timeout=300, check=False)
        assert built.returncode == 0, built.stderr[-2000:]
        flows = {}
        for name, body in json.loads(built.stdout).items():
            if name == "echo":
                body["endpoint_name"] = ECHO_ENDPOINT
            r = httpx.post(url + "/api/v1/flows/", headers={"x-api-key": key}, json=body, timeout=60)
            assert r.status_code == 201, r.text[:500]
            flows[name] = r.json()["id"]
        yield Peer(url, key, flows, model, broken)
    finally:
        peers.stop_group(proc)
        out.close()
        model.stop()
        broken.stop()
        say(f"timings: {json.dumps({k: round(v, 1) for k, v in TIMINGS.items()})}")


def _prompt(body: dict) -> str:
    """A completion request's messages as one text (system + user)."""
    parts = []
    for m in body.get("messages") or []:
        c = m.get("content")
        if isinstance(c, list):
            c = " ".join(p.get("text", "") for p in c if isinstance(p, dict))
        parts.append(f"{m.get('role')}: {c}")
    return "\n".join(parts)


@pytest.fixture(autouse=True)
async def _close():
    yield
    await close_shared_client()


def _host() -> LocalHost:
    return LocalHost(runner_id="plugin:langbot-team/LangflowAgent/default")


async def test_streaming_answer_arrives_in_deltas_before_the_end(peer):
    host = _host()
    runner = make_runner("langflow-agent", host)
    ctx = host.make_context("hello there", config=peer.config("llm"))
    started = time.monotonic()
    stamped = []
    async for r in runner.invoke(ctx):
        host.apply_result(ctx.run_id, r)
        stamped.append((time.monotonic() - started, r))
    results = [r for _, r in stamped]
    end = terminal(results)
    assert rtype(end) == "run.completed", end.data
    assert final_text(results) == ANSWER
    shown = deltas(results)
    assert len(shown) >= 2 and ANSWER.startswith(shown[0]) and shown[0] != ANSWER, shown
    first = next(t for t, r in stamped if rtype(r) == "message.delta")
    assert first < stamped[-1][0] - 0.3, "text reached the chat while the model was still generating"
    assert end.usage is not None and end.usage.total_tokens, "Langflow passes the model's usage on"
    session = next(iter(state_updates(results).values()))
    assert session.startswith("langbot-") and session != peer.flows["llm"]
    TIMINGS["first_delta"] = first


async def test_second_turn_keeps_the_session_and_the_model_sees_the_first(peer):
    host = _host()
    runner = make_runner("langflow-agent", host)
    ident = Identity(conversation_id="real-conv-2", actor_id="alice")
    first = await run(runner, host, "remember the word pineapple", config=peer.config("llm"), identity=ident)
    assert rtype(terminal(first)) == "run.completed", terminal(first).data
    (session,) = state_updates(first).values()
    before = len(peer.model.chat_requests)
    second = await run(runner, host, "which word did I ask you to remember?", config=peer.config("llm"),
                       identity=ident)
    assert final_text(second) == ANSWER
    assert state_updates(second) == {}, "the same Langflow session is kept"
    prompt = _prompt(peer.model.chat_requests[before])
    assert "pineapple" in prompt and "which word" in prompt, prompt
    texts = [m["text"] for m in peer.messages(session)]
    assert texts == ["remember the word pineapple", ANSWER, "which word did I ask you to remember?", ANSWER]
    other = await run(runner, host, "hi", config=peer.config("llm"), identity=Identity(conversation_id="other"))
    assert list(state_updates(other).values()) != [session], "another conversation gets its own session"


async def test_failing_flow_is_a_clear_failure(peer):
    host = _host()
    results = await run(make_runner("langflow-agent", host), host, "hi", config=peer.config("failing"))
    code, retryable, message = failure(results)
    assert (code, retryable) == ("upstream.error", False), message
    assert "OpenAI" in message and "server had an error" in message, message


async def test_echo_flow_without_streaming_and_with_the_api_prefix_pasted(peer):
    host = _host()
    runner = make_runner("langflow-agent", host)
    cfg = peer.config("echo", **{"base-url": peer.url + "/api/v1/", "advanced-settings": True, "streaming": False})
    results = await run(runner, host, "héllo 世界 👋", config=cfg)
    assert final_text(results) == "héllo 世界 👋"
    streamed = await run(runner, host, "second", config=peer.config("echo", **{"base-url": peer.url + "/"}))
    assert final_text(streamed) == "second"


async def test_wrong_key_and_unknown_flow_tell_the_owner(peer):
    host = _host()
    runner = make_runner("langflow-agent", host)
    code, _, message = failure(await run(runner, host, config={**peer.config("echo"), "api-key": "sk-wrong-key-1"}))
    assert code == "upstream.auth" and "Invalid or missing API key" in message and "Langflow API Keys" in message
    cfg = {**peer.config("echo"), "flow-id": "00000000-0000-0000-0000-000000000000"}
    code, _, message = failure(await run(runner, host, config=cfg))
    assert code == "config.invalid" and "flow-id" in message and "00000000" in message, message


async def test_image_is_uploaded_and_attached_to_the_chat_input(peer):
    host = _host()
    contents = [{"type": "text", "text": "what is this"}, {"type": "image_base64", "image_base64": PNG}]
    results = await run(make_runner("langflow-agent", host), host, "what is this", config=peer.config("echo"),
                        contents=contents)
    assert final_text(results) == "what is this", terminal(results).data
    (session,) = state_updates(results).values()
    user = [m for m in peer.messages(session) if m["sender"] == "User"]
    files = user[0]["files"]
    files = json.loads(files) if isinstance(files, str) else files
    assert len(files) == 1 and str(files[0]).endswith(".png"), user[0]
    await _cleanups()
    assert peer.flow_files("echo") == [], "deleted after the run"


async def _cleanups() -> None:
    from langflow_agent import adapter  # loaded with the plugin's runner

    await asyncio.wait_for(adapter.cleanups_done(), 15)


async def test_an_image_and_a_file_reach_the_model_then_both_are_deleted(peer):
    """The image by the v1 route, the text file by v2: the model gets the image as an image part and
    the file's text; afterwards neither is left beside the flow nor in the key owner's "My Files"."""
    host = _host()
    before = len(peer.model.chat_requests)
    contents = [{"type": "text", "text": "what are these"}, {"type": "image_base64", "image_base64": IMAGE},
                {"type": "file_base64", "file_base64": TXT, "file_name": "notes.txt"}]
    results = await run(make_runner("langflow-agent", host), host, "what are these", config=peer.config("llm"),
                        contents=contents, identity=Identity(conversation_id="real-files"))
    assert final_text(results) == ANSWER, terminal(results).data
    parts = peer.model.chat_requests[before]["messages"][-1]["content"]
    kinds = [p["type"] for p in parts]
    assert kinds.count("image_url") == 1 and parts[kinds.index("image_url")]["image_url"]["url"].startswith(
        "data:image/png;base64,"), kinds
    assert any("the secret word is kiwi" in (p.get("text") or "") for p in parts), parts
    await _cleanups()
    assert peer.flow_files("llm") == [] and not [p for p in peer.my_files() if "notes" in p], peer.my_files()


async def test_an_endpoint_name_finds_the_flow_for_the_image_route(peer):
    host = _host()
    contents = [{"type": "text", "text": "named"}, {"type": "image_base64", "image_base64": IMAGE}]
    results = await run(make_runner("langflow-agent", host), host, "named",
                        config={**peer.config("echo"), "flow-id": ECHO_ENDPOINT}, contents=contents)
    assert final_text(results) == "named", terminal(results).data
    await _cleanups()
    assert peer.flow_files("echo") == []


async def test_uploads_are_deleted_when_the_flow_fails(peer):
    host = _host()
    contents = [{"type": "text", "text": "x"}, {"type": "image_base64", "image_base64": IMAGE}]
    results = await run(make_runner("langflow-agent", host), host, "x", config=peer.config("failing"),
                        contents=contents)
    assert failure(results)[0] == "upstream.error"
    await _cleanups()
    assert peer.flow_files("failing") == []


async def test_a_stop_closes_the_stream_langflow_drops_the_model_call_and_the_upload_is_deleted(peer):
    host = _host()
    runner = make_runner("langflow-agent", host)
    peer.model.token_delay = 0.6
    drops = peer.model.client_disconnects
    try:
        contents = [{"type": "text", "text": "long one"}, {"type": "image_base64", "image_base64": IMAGE}]
        gen = runner.invoke(host.make_context("long one", config=peer.config("llm"), contents=contents,
                                              identity=Identity(conversation_id="real-stop")))
        async for r in gen:
            if rtype(r) == "message.delta":
                break
        await gen.aclose()
        assert await peer.model.wait_until_async(lambda: peer.model.client_disconnects > drops, 10), \
            "Langflow cancelled the flow, which dropped its model call"
    finally:
        peer.model.token_delay = 0.15
    await _cleanups()
    assert peer.flow_files("llm") == []
    stored = peer.get(f"/api/v1/monitor/messages?flow_id={peer.flows['llm']}")
    (asked,) = [m for m in stored if m["text"] == "long one"]  # type: ignore[union-attr]
    answers = [m["text"] for m in peer.messages(asked["session_id"]) if m["sender"] == "Machine"]
    assert ANSWER not in answers, answers


async def test_a_reset_deletes_the_old_sessions_messages_so_the_model_forgets(peer):
    host = _host()
    runner = make_runner("langflow-agent", host)
    ident = Identity(conversation_id="real-reset", actor_id="carol")
    first = await run(runner, host, "remember the word mango", config=peer.config("llm"), identity=ident)
    (old,) = state_updates(first).values()
    assert len(peer.messages(old)) == 2
    host.reset_conversation(ident)  # as LangBot 4.11.2 does it
    before = len(peer.model.chat_requests)
    after = await run(runner, host, "which word?", config=peer.config("llm"), identity=ident)
    assert final_text(after) == ANSWER
    (new,) = state_updates(after).values()
    assert new != old and peer.messages(old) == [], "the old session's messages (its memory) are gone"
    assert "mango" not in _prompt(peer.model.chat_requests[before])
    assert [m["text"] for m in peer.messages(new)] == ["which word?", ANSWER]


@pytest.mark.parametrize(("uv", "words"), [(None, "`uv` is not installed"), ("/bin/false", "failed (exit 1)")])
def test_an_install_that_cannot_be_done_skips_and_says_why(tmp_path, monkeypatch, uv, words):
    monkeypatch.setenv("LANGFLOW_REAL_VENV", str(tmp_path / "venv"))
    monkeypatch.setattr(shutil, "which", lambda name: uv)
    with pytest.raises(pytest.skip.Exception, match="Langflow real peer: .*" + words.replace("(", r"\(").replace(")", r"\)")):
        provide_langflow()
    assert not (tmp_path / "venv" / MARKER).exists(), "no marker for an install that did not finish"
