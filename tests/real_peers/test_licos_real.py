"""LicosAgent against the real LICOS agent runtime (opt-in: RUN_SLOW=1; see real-http-peers.md §3).

- ``licos-agent-runtime`` (pinned to the versions the shared fixtures were captured with) is
  installed with ``uv`` into ``$LICOS_REAL_VENV`` (default
  ``~/.cache/langbot-agent-runners/licos-0.6.33-venv``, about 280 MB; under a minute with a warm uv
  cache) on first use and reused once its marker says the install finished. When ``uv`` or the
  install fails, the tests skip and say what failed.
- The agent project is ``licos_project/`` (the runtime's own agent loop around a ``ChatOpenAI``
  pointed at ``tests.fakes.openai.FakeOpenAI``, one tool ``get_weather``), copied to tmp three times
  with a different ``config/agent_llm_config.json`` each, every copy served by
  ``python -m licos_agent_runtime -m http`` on a free 127.0.0.1 port in its own process group, stopped
  by its PID:

  - ``legacy``: no LICOS platform at all (no platform env var, no token) — the project keeps no
    memory of its own, as a minimal project does;
  - ``memory``: ``harness.memory`` on. The runtime keys that memory by the caller's identity, which
    it checks against the platform, so this one runs with ``tests.fakes.licos_platform`` as its
    platform (``LICOS_PLATFORM_API_BASE_URL``, ``LICOS_AI_AGENT_TOKEN``, ``LICOS_USER_ID``) and the
    plugin sends a Bearer token that the stand-in knows;
  - ``managed``: ``agent_runtime`` on (runs, resumable events, history) — the events-v1 protocol,
    with the same platform stand-in.

The fake model answers ``You said: <every user message it was sent, joined by " | ">``, so an
answer shows exactly which earlier turns reached the model.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from runners_cli.host import Identity, LocalHost
from tests.fakes.licos_platform import FakeLicosPlatform
from tests.fakes.openai import FakeOpenAI, Say, ToolCalls
from tests.helpers import (
    deltas,
    failure,
    final_text,
    make_runner,
    rtype,
    run,
    state_updates,
    stored_key,
    terminal,
)
from tests.real_peers import peers

pytestmark = [pytest.mark.slow, pytest.mark.real_peers, pytest.mark.timeout(900)]

LABEL = "LICOS real peer"
PLUGIN = "licos-agent"
PACKAGES = [
    "licos-agent-runtime==0.6.33",
    "licos-dev-sdk==0.7.0",
    "licos-platform-sdk==0.9.8",
    "langgraph==1.2.15",
    "langchain-core==1.8.3",
    "langchain-openai==1.7.4",
    "openai==3.57.0",
    "fastapi==0.165.0",
    "uvicorn==0.54.0",
]
PROJECT = Path(__file__).with_name("licos_project")
START_TIMEOUT = 120.0
KEY = "licos.session_id"
USER_TOKEN = "sk-test"  # the Bearer token the platform stand-in maps to USER_ID
USER_ID = "user-1"
AGENT_TOKEN = "sk-agent"
TIMINGS: dict[str, float] = {}
RUN_ENDED = {"completed", "failed", "cancelled", "interrupted", "expired"}  # managed run statuses

MEMORY = {"harness": {"version": 1, "memory": {"enabled": True, "recent_turns": 3, "idle_ttl_seconds": 3600}}}
MANAGED = {"agent_runtime": {
    "version": 1, "graph_version": "1", "state_version": "1",
    "runs": {"enabled": True, "storage": "memory"},
    "events": {"enabled": True, "storage": "memory", "ttl_seconds": 3600},
    "history": {"enabled": True, "storage": "memory", "recent_turns": 3},
}}


def provide_licos() -> Path:
    venv = peers.cached_path("LICOS_REAL_VENV", "licos-0.6.33-venv")
    return peers.provide_venv(venv, PACKAGES, label=LABEL, command="licos-agent-runtime", timeout=900,
                              timings=TIMINGS)


def echo(body: dict) -> str:
    """The fake model's answer: every user message it was sent, oldest first."""
    said = [FakeOpenAI.last_user_text({"messages": [m]}) for m in body.get("messages") or [] if m.get("role") == "user"]
    return "You said: " + " | ".join(said)


class Runtime:
    """One served copy of the project."""

    def __init__(self, name: str, url: str, proc: subprocess.Popen, log: Path):
        self.name, self.url, self.proc, self.log = name, url, proc, log

    def config(self, **extra) -> dict:
        return {"base-url": self.url + "/", **extra}

    def get(self, path: str) -> httpx.Response:
        return httpx.get(self.url + path, headers={"Authorization": f"Bearer {USER_TOKEN}"}, timeout=30)


def _start(venv: Path, home: Path, name: str, extra: dict, env_extra: dict[str, str]) -> Runtime:
    project = home / name / "project"
    shutil.copytree(PROJECT, project)
    cfg_path = project / "config" / "agent_llm_config.json"
    cfg_path.write_text(json.dumps({**json.loads(cfg_path.read_text(encoding="utf-8")), **extra}), encoding="utf-8")
    port = peers.free_port()
    log = home / name / "runtime.log"
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("LICOS_", "AIOS_", "OPENAI_")) and not k.endswith("PLATFORM_SERVICE_HOST")}
    env.update({"LICOS_PROJECT_PATH": str(project), "PYTHONUNBUFFERED": "1", "NO_COLOR": "1", **env_extra})
    with open(log, "w", encoding="utf-8") as out:
        proc = subprocess.Popen(
            [str(venv / "bin" / "python"), "-m", "licos_agent_runtime", "-m", "http", "--host", peers.LOOPBACK,
             "-p", str(port)],
            stdout=out, stderr=subprocess.STDOUT, env=env, cwd=project, start_new_session=True,
        )
    return Runtime(name, f"http://{peers.LOOPBACK}:{port}", proc, log)


@pytest.fixture(scope="module")
def llm():
    with FakeOpenAI(api_key="sk-fake-model") as fake:
        fake.responder = echo
        fake.token_delay = 0.01
        yield fake


@pytest.fixture(autouse=True)
def _fresh_model(llm):
    llm.fault, llm.responder, llm.token_delay = None, echo, 0.01
    yield


@pytest.fixture(scope="module")
def platform():
    with FakeLicosPlatform(agent_token=AGENT_TOKEN, users={USER_TOKEN: USER_ID}) as fake:
        yield fake


@pytest.fixture(scope="module")
def runtimes(tmp_path_factory, llm, platform):
    venv = provide_licos()
    home = tmp_path_factory.mktemp("licos")
    model = {"FAKE_OPENAI_BASE_URL": llm.base_url, "FAKE_OPENAI_API_KEY": llm.api_key}
    with_platform = {**model, "LICOS_PLATFORM_API_BASE_URL": platform.root_url, "LICOS_AI_AGENT_TOKEN": AGENT_TOKEN,
                     "LICOS_USER_ID": "owner-1"}
    started = time.monotonic()
    servers = {}
    try:
        servers["legacy"] = _start(venv, home, "legacy", {}, model)
        servers["memory"] = _start(venv, home, "memory", MEMORY, with_platform)
        servers["managed"] = _start(venv, home, "managed", MANAGED, with_platform)
        for s in servers.values():
            peers.wait_until_up(s.proc, s.url + "/health", s.log, f"{LABEL} ({s.name})", START_TIMEOUT)
        TIMINGS["start"] = time.monotonic() - started
        peers.say("licos-real", f"3 runtimes answered /health after {TIMINGS['start']:.1f}s")
        yield servers
    finally:
        for s in servers.values():
            peers.stop_group(s.proc)
        peers.say("licos-real", f"timings: { {k: round(v, 2) for k, v in TIMINGS.items()} }")


def _host() -> LocalHost:
    return LocalHost(runner_id="plugin:langbot-team/LicosAgent/default")


def _runner(host: LocalHost):
    try:
        return make_runner(PLUGIN, host)
    except Exception as exc:  # noqa: BLE001 - the plugin is written alongside this suite
        pytest.skip(f"{PLUGIN} cannot be loaded yet: {type(exc).__name__}: {exc}")


def _authed(**extra) -> dict:
    return {"api-key": USER_TOKEN, **extra}


def _completed(results) -> None:
    end = terminal(results)
    assert rtype(end) == "run.completed", (end.data, peers_log_hint(results))


def peers_log_hint(results) -> list:
    return [(rtype(r), r.data) for r in results if rtype(r) in ("processor.log", "run.failed")][-3:]


def _run_ids(results) -> set[str]:
    """The LICOS run id the complete answer carries (``provider_specific_fields.licos_run_id``)."""
    done = [r for r in results if rtype(r) in ("message.completed", "run.completed") and r.data.get("message")]
    fields = [(r.data["message"].get("provider_specific_fields") or {}) for r in done]
    return {f["licos_run_id"] for f in fields if isinstance(f.get("licos_run_id"), str)}


# --- legacy protocol, no platform ------------------------------------------------------------

async def test_text_turn_streams_the_answer_once_with_usage(runtimes, llm):
    server = runtimes["legacy"]
    host = _host()
    results = await run(_runner(host), host, "hello there", config=server.config())
    _completed(results)
    assert final_text(results) == "You said: hello there", "one model turn is shown once, never duplicated"
    assert [d for d in deltas(results) if d], "the answer reached the chat as a message delta"
    end = terminal(results)
    assert end.usage is not None and end.usage.prompt_tokens == 12 and end.usage.completion_tokens == 6, end.usage
    assert state_updates(results).get(stored_key(KEY)), "the session id is stored under licos.session_id"
    records = [i for i in _run_ids(results) if server.get(f"/run_records/{i}").status_code == 200]
    assert records, "the completed result names the LICOS run id an operator can open in /run_records"
    assert server.get(f"/run_records/{records[0]}").json()["status"] == "success"
    sent = llm.chat_requests[-1]["messages"]
    assert [m["role"] for m in sent] == ["system", "user"], sent


async def test_tool_turn_shows_the_tool_step(runtimes):
    host = _host()
    results = await run(_runner(host), host, "TOOL weather in Paris", config=runtimes["legacy"].config())
    _completed(results)
    started = [r.data for r in results if rtype(r) == "tool.call.started"]
    done = [r.data for r in results if rtype(r) == "tool.call.completed"]
    assert len(started) == 1 and len(done) == 1, (started, done)
    assert "get_weather" in str(started[0]) and "Paris" in str(started[0]), started[0]
    assert "Paris is sunny, 21 degrees" in str(done[0]), done[0]
    assert final_text(results) == "You said: TOOL weather in Paris"


async def test_model_failure_is_a_clear_failure(runtimes):
    host = _host()
    results = await run(_runner(host), host, "FAIL please", config=runtimes["legacy"].config())
    code, retryable, message = failure(results)
    assert code.startswith("upstream."), (code, message)
    assert "fake upstream failure" in message or "model" in message.lower(), message
    assert "You said" not in final_text(results)


async def test_minimal_project_forgets_with_service_history(runtimes):
    """The limitation history-source exists for: session_id alone gives the model no history."""
    host = _host()
    runner = _runner(host)
    ident = Identity(conversation_id="licos-forget", actor_id="alice")
    await run(runner, host, "my name is Ada", config=runtimes["legacy"].config(), identity=ident)
    second = await run(runner, host, "what is my name?", config=runtimes["legacy"].config(), identity=ident)
    _completed(second)
    assert final_text(second) == "You said: what is my name?"


async def test_langbot_history_gives_the_second_turn_the_first(runtimes, llm):
    host = _host()
    runner = _runner(host)
    ident = Identity(conversation_id="licos-langbot", actor_id="bob")
    config = runtimes["legacy"].config(**{"history-source": "langbot", "history-turns": 5})
    first = await run(runner, host, "my name is Ada", config=config, identity=ident)
    _completed(first)
    assert final_text(first) == "You said: my name is Ada"
    second = await run(runner, host, "what is my name?", config=config, identity=ident)
    _completed(second)
    assert final_text(second) == "You said: my name is Ada | what is my name?", "turn one reached the model, once"
    sent = llm.chat_requests[-1]["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "user"], sent
    assert sent[2]["content"] == "You said: my name is Ada"
    assert any(c.action == "history_page" for c in host.calls), "the transcript came through history_page"


# --- legacy protocol with the project's own memory (needs an identity: platform stand-in) --------

async def test_service_history_second_turn_remembers_the_first(runtimes, llm):
    host = _host()
    runner = _runner(host)
    ident = Identity(conversation_id="licos-memory", actor_id="carol")
    config = runtimes["memory"].config(**_authed())
    first = await run(runner, host, "my name is Ada", config=config, identity=ident)
    _completed(first)
    second = await run(runner, host, "what is my name?", config=config, identity=ident)
    _completed(second)
    assert final_text(second) == "You said: my name is Ada | what is my name?", "the project's memory answered"
    assert state_updates(second) == {}, "the same LICOS session is kept"
    other = await run(runner, host, "who am I?", config=config, identity=Identity(conversation_id="licos-memory-2"))
    assert final_text(other) == "You said: who am I?", "another LangBot conversation is another session"


# --- managed protocol (agent_runtime, events-v1) ----------------------------------------------

async def test_managed_turn_streams_tokens(runtimes, llm):
    words = " ".join(f"word{i}" for i in range(30))
    llm.responder = lambda body: f"{words} end: {echo(body)}"
    llm.token_delay = 0.04  # ~2.4 s of tokens: the kit's coalescing still sends several deltas
    host = _host()
    started = time.monotonic()
    stamped = []
    ctx = host.make_context("hello managed", config=runtimes["managed"].config(**_authed(protocol="managed")))
    async for r in _runner(host).invoke(ctx):
        host.apply_result(ctx.run_id, r)
        stamped.append((time.monotonic() - started, r))
    results = [r for _, r in stamped]
    _completed(results)
    assert final_text(results) == f"{words} end: You said: hello managed"
    shown = [d for d in deltas(results) if d]
    assert len(shown) >= 3, f"token chunks are streamed, not one whole answer: {shown}"
    assert all(b.startswith(a) for a, b in zip(shown, shown[1:], strict=False)), "each delta extends the last"
    first = next(t for t, r in stamped if rtype(r) == "message.delta")
    assert first < stamped[-1][0] - 1.0, "text reached the chat while the model was still generating"
    end = terminal(results)
    assert end.usage is not None and end.usage.prompt_tokens == 12 and end.usage.completion_tokens == 6, end.usage


@pytest.mark.parametrize("source", ["service", "langbot"])
async def test_managed_second_turn_remembers_the_first_once(runtimes, llm, source):
    """Either the runtime's agent_runtime.history or LangBot's transcript supplies turn one, and
    never both (explicit messages replace the runtime's own history)."""
    host = _host()
    runner = _runner(host)
    ident = Identity(conversation_id=f"licos-managed-{source}", actor_id="dave")
    config = runtimes["managed"].config(**_authed(protocol="managed", **{"history-source": source}))
    _completed(await run(runner, host, "my name is Ada", config=config, identity=ident))
    second = await run(runner, host, "what is my name?", config=config, identity=ident)
    _completed(second)
    assert final_text(second) == "You said: my name is Ada | what is my name?"
    assert any(c.action == "history_page" for c in host.calls) == (source == "langbot")


async def test_managed_model_failure_is_a_clear_failure(runtimes):
    host = _host()
    results = await run(_runner(host), host, "FAIL managed",
                        config=runtimes["managed"].config(**_authed(protocol="managed")))
    code, _, message = failure(results)
    assert code.startswith("upstream."), (code, message)
    assert message.strip(), message


class CuttingProxy:
    """A loopback TCP proxy that drops the first ``POST /stream_run`` connection after ``cut_after``
    response bytes (headers included) and passes everything else through, recording request lines."""

    def __init__(self, upstream_port: int, cut_after: int):
        self.upstream_port, self.cut_after = upstream_port, cut_after
        self.request_lines: list[str] = []
        self.cuts = 0
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((peers.LOOPBACK, 0))
        self._sock.listen(16)
        self.port = self._sock.getsockname()[1]
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://{peers.LOOPBACK}:{self.port}"

    def close(self) -> None:
        self._closed = True
        self._sock.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        upstream = socket.create_connection((peers.LOOPBACK, self.upstream_port))
        state = {"cut": False}

        def up() -> None:
            try:
                while data := client.recv(65536):
                    for m in re.finditer(rb"(GET|POST|DELETE|PUT) (/\S*) HTTP/1\.[01]\r\n", data):
                        line = f"{m.group(1).decode()} {m.group(2).decode()}"
                        self.request_lines.append(line)
                        if line == "POST /stream_run" and self.cuts == 0:
                            self.cuts = 1
                            state["cut"] = True
                    upstream.sendall(data)
            except OSError:
                pass
            finally:
                _shut(upstream)

        threading.Thread(target=up, daemon=True).start()
        sent = 0
        try:
            while data := upstream.recv(65536):
                if state["cut"]:
                    room = self.cut_after - sent
                    if room <= len(data):
                        client.sendall(data[:max(room, 0)])
                        break
                client.sendall(data)
                sent += len(data)
        except OSError:
            pass
        finally:
            _shut(client)
            _shut(upstream)


def _shut(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    s.close()


async def test_managed_stream_cut_midway_is_resumed_and_shown_once(runtimes, llm):
    words = " ".join(f"word{i}" for i in range(40))
    llm.responder = lambda body: f"{words} end: {echo(body)}"
    llm.token_delay = 0.03
    server = runtimes["managed"]
    proxy = CuttingProxy(int(server.url.rsplit(":", 1)[1]), cut_after=6000)
    try:
        host = _host()
        config = {"base-url": proxy.url, **_authed(protocol="managed")}
        results = await run(_runner(host), host, "tell me a long story", config=config)
    finally:
        proxy.close()
    assert proxy.cuts == 1, proxy.request_lines
    _completed(results)
    expected = f"{words} end: You said: tell me a long story"
    assert final_text(results) == expected, "the user gets the whole answer, exactly once"
    resumed = [line for line in proxy.request_lines if line.startswith("GET /agent/v1/runs/")]
    after = [re.search(r"[?&]after=(\d+)", line) for line in resumed]
    assert after and after[0] and int(after[0].group(1)) > 0, f"resumed after what it already had: {resumed}"


# --- runners chat from a terminal ------------------------------------------------------------

def test_runners_chat_remembers_with_langbot_history(runtimes, tmp_path):
    """`runners chat` twice on one state file: the local host's transcript feeds history_page."""
    script = shutil.which("runners", path=str(Path(sys.executable).parent))
    cmd = [script] if script else [sys.executable, "-m", "runners_cli"]
    args = [*cmd, "chat", PLUGIN, "--set", f"base-url={runtimes['legacy'].url}", "--set", "history-source=langbot",
            "--state", str(tmp_path / "chat.sqlite")]
    first = subprocess.run([*args, "-m", "my name is Ada"], capture_output=True, text=True, timeout=120)
    if first.returncode != 0 and "cannot load" in first.stderr:
        pytest.skip(f"{PLUGIN} cannot be loaded yet: {first.stderr.strip()[-300:]}")
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == "You said: my name is Ada", first.stdout
    second = subprocess.run([*args, "-m", "what is my name?"], capture_output=True, text=True, timeout=120)
    assert second.returncode == 0, second.stderr
    assert second.stdout.strip() == "You said: my name is Ada | what is my name?", second.stdout


# --- host cancel -------------------------------------------------------------------------------

async def _cancel_midway(host: LocalHost, config: dict, stop_at: str) -> str:
    """Start a slow answer, stop reading at the first ``stop_at`` result (the host cancels the run),
    return the LICOS run id the run logged."""
    ctx = host.make_context("tell me slowly", config=config)
    gen = _runner(host).invoke(ctx)
    seen = []
    async for r in gen:
        host.apply_result(ctx.run_id, r)
        seen.append(r)
        if rtype(r) == stop_at:
            break
    await gen.aclose()
    logged = " ".join(str(r.data.get("text")) for r in seen if rtype(r) == "processor.log")
    found = re.search(r"\b[0-9a-f]{32}\b", logged)
    assert found, f"the run id was logged for the operator: {logged!r}"
    return found.group(0)


async def test_host_cancel_cancels_the_managed_run(runtimes, llm):
    llm.responder = lambda body: " ".join(f"slow{i}" for i in range(60))
    llm.token_delay = 0.1
    server = runtimes["managed"]
    run_id = await _cancel_midway(_host(), server.config(**_authed(protocol="managed")), "message.delta")
    deadline = time.monotonic() + 15
    while (status := server.get(f"/agent/v1/runs/{run_id}").json().get("status")) not in RUN_ENDED:
        if time.monotonic() > deadline:
            pytest.fail(f"the run was not cancelled on the server: {status}")
        await asyncio.sleep(0.2)
    assert status == "cancelled", status


async def test_host_cancel_stops_the_legacy_run(runtimes, llm):
    """Legacy answers come as whole model turns, so the host cancels while the model is still
    generating, before any text: the run ends cancelled instead of completing. The runtime only
    accepts ``POST /cancel/{run_id}`` with the Bearer token that started the run (without one it
    answers 401 and only the closed stream stops the run), so this uses the platform-backed copy."""
    llm.responder = lambda body: " ".join(f"slow{i}" for i in range(60))
    llm.token_delay = 0.1
    server = runtimes["memory"]
    run_id = await _cancel_midway(_host(), server.config(**_authed()), "processor.log")
    deadline = time.monotonic() + 15
    while (record := server.get(f"/run_records/{run_id}")).status_code != 200 or record.json()["status"] == "running":
        if time.monotonic() > deadline:
            pytest.fail(f"no finished run record for the cancelled run: {record.status_code} {record.text[:300]}")
        await asyncio.sleep(0.2)
    assert (record.json()["status"], record.json().get("error")) == ("error", "cancelled"), record.json()
    assert f'"POST /cancel/{run_id} HTTP/1.1" 200' in peers.tail(server.log, 400), "the plugin called /cancel"


# --- attachments (need an identity: the platform-backed copy) ----------------------------------

async def test_a_file_from_the_chat_reaches_the_session_files(runtimes):
    """An upload_file block (base64 data URL) is saved under the session's assets/upload and read
    to the model; the runtime does this only for a caller the platform vouches for."""
    server = runtimes["memory"]
    body = b"# Spec\nThe launch code is 4711.\n"
    contents = [{"type": "text", "text": "read my spec"},
                {"type": "file_base64", "file_base64": base64.b64encode(body).decode(), "file_name": "spec.md"}]
    host = _host()
    results = await run(_runner(host), host, "read my spec", config=server.config(**_authed()), contents=contents)
    _completed(results)
    saved = list((server.log.parent).glob(".licos/agent-session-files/**/spec.md"))
    assert len(saved) == 1 and saved[0].read_bytes() == body, saved
    assert "The launch code is 4711." in final_text(results), "the model read the saved file"


async def test_project_memory_without_a_token_is_explained(runtimes):
    """harness.memory keys the memory by the caller the platform vouches for; without api-key the
    runtime refuses even a text-only turn (error 105002 "Session file access requires an
    authenticated Bearer token"). The owner must learn that a token is missing, not that a file failed."""
    host = _host()
    results = await run(_runner(host), host, "hello", config=runtimes["memory"].config())
    code, _, message = failure(results)
    assert "Bearer token" in message or "api-key" in message, (code, message)


# --- liveness and reset (issue 33 items 14, 15) --------------------------------------------------

ADVANCED = {"advanced-settings": True}


async def test_legacy_keepalives_carry_a_silent_model_past_the_idle_timeout(runtimes, llm):
    """The legacy /stream_run sends ": ping" after 30 s without events (service.py
    _stream_sse_agent_platform with RunOpt.workflow_ping_interval_seconds = 30.0): a model that is
    silent for 40 s outlives an idle timeout of 35 s, which only that ping can explain."""
    llm.responder = lambda body: "slow answer"  # streamed as "slow", " ", "answer": 2 gaps of 20 s
    llm.token_delay = 20.0
    host = _host()
    started = time.monotonic()
    config = runtimes["legacy"].config(**ADVANCED, **{"idle-timeout": 35, "timeout": 120})
    results = await run(_runner(host), host, "take your time", config=config)
    took = time.monotonic() - started
    _completed(results)
    assert final_text(results) == "slow answer"
    assert took > 38, f"the model was silent for 40 s, yet the run took {took:.1f} s"


@contextmanager
def _slow_download(seconds: float):
    """A loopback file whose 3 bytes come one every ``seconds / 3`` (each gap under the runtime's
    30 s read timeout), for the managed project's built-in ``download_file`` tool."""
    gap = seconds / 3

    class Drip(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the stdlib's name
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", "3")
            self.end_headers()
            for _ in range(3):
                time.sleep(gap)
                self.wfile.write(b"x")
                self.wfile.flush()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer((peers.LOOPBACK, 0), Drip)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://{peers.LOOPBACK}:{server.server_address[1]}/slow.txt"
    finally:
        server.shutdown()
        server.server_close()


async def test_managed_a_slow_tool_is_vouched_for_by_the_run_status(runtimes, llm):
    """The managed stream sends nothing while a tool runs (managed_agents.py events: stored events
    only). Here the project's built-in download_file takes 12 s under an idle timeout of 6 s: the
    plugin asks GET /agent/v1/runs/{id} meanwhile and the run LICOS reports running is kept."""
    server = runtimes["managed"]
    host = _host()
    with _slow_download(12.0) as url:
        llm.script = [ToolCalls([("download_file", {"url": url, "path": "assets/slow.txt"})]), Say("downloaded it")]
        try:
            config = server.config(**_authed(protocol="managed"), **ADVANCED, **{"idle-timeout": 6, "timeout": 120})
            results = await run(_runner(host), host, "fetch the slow file", config=config)
        finally:
            llm.script = []
    _completed(results)
    assert final_text(results) == "downloaded it"
    (run_id,) = _run_ids(results)
    assert f'"GET /agent/v1/runs/{run_id} HTTP/1.1" 200' in peers.tail(server.log, 400), "the plugin asked about the run"


async def test_managed_reset_deletes_the_old_session(runtimes, llm):
    server = runtimes["managed"]
    host = _host()
    runner = _runner(host)
    ident = Identity(conversation_id="licos-reset", actor_id="erin")
    config = server.config(**_authed(protocol="managed"))
    first = await run(runner, host, "my name is Ada", config=config, identity=ident)
    _completed(first)
    old = state_updates(first)[stored_key(KEY, ident)]
    assert server.get(f"/agent/v1/sessions/{old}").status_code == 200
    host.reset_conversation(ident)
    second = await run(runner, host, "who am I?", config=config, identity=ident)
    _completed(second)
    assert final_text(second) == "You said: who am I?", "the new session does not know the old one"
    new = state_updates(second)[stored_key(KEY, ident)]
    deadline = time.monotonic() + 10
    while (gone := server.get(f"/agent/v1/sessions/{old}")).status_code != 404:
        if time.monotonic() > deadline:
            pytest.fail(f"the old session was not deleted: {gone.status_code} {gone.text[:200]}")
        await asyncio.sleep(0.1)
    assert "Session not found" in gone.text
    assert server.get(f"/agent/v1/sessions/{new}").status_code == 200
    assert f'"DELETE /agent/v1/sessions/{old} HTTP/1.1" 200' in peers.tail(server.log, 400)
