"""codex-agent against the scripted ``codex app-server`` (tests/fakes/cli/fake_codex.py) and the
shared fake model API: what a chat user and the bot owner notice, plus the request shapes the
runner sends (thread/start, turn/start, the generated config.toml, the child's argv and env)."""

from __future__ import annotations

import base64
import json
import os
import stat
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest

from runner_kit.process import alive, descendants
from runners_cli.host import Identity, LocalHost
from tests.fakes.model_api import FakeModelAPI
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

PLUGIN = "codex-agent"
FAKE = Path(__file__).resolve().parents[1] / "fakes" / "cli" / "fake_codex.py"
KEY = "sk-codex-plugin-test-key"
PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 64


class Env:
    """The fake model API, the runner's private data directory and the fake's event log."""

    def __init__(self, api: FakeModelAPI, root: Path):
        self.api = api
        self.root = root
        self.log = root / "events.jsonl"

    def config(self, scenario: str | None = None, **extra: Any) -> dict[str, Any]:
        return {"executable": str(FAKE), "base-url": self.api.openai_base_url(scenario), "api-key": KEY,
                "model": "fake-model", "advanced-settings": True, "max-retries": 0,
                "env": f"FAKE_CODEX_EVENTS={self.log}", **extra}

    def events(self, kind: str) -> list[dict[str, Any]]:
        if not self.log.is_file():
            return []
        return [e for e in map(json.loads, self.log.read_text().splitlines()) if e["event"] == kind]

    def requests(self, method: str) -> list[dict[str, Any]]:
        return [e["params"] for e in self.events("request") if e["method"] == method]

    def homes(self) -> list[Path]:
        return sorted((self.root / "data" / "codex-agent" / "homes").glob("*/.codex"))

    def workspaces(self) -> list[Path]:
        return sorted((self.root / "data" / "codex-agent" / "workspaces").glob("*"))


@pytest.fixture
def env(tmp_path, monkeypatch):
    mode = FAKE.stat().st_mode
    if not mode & stat.S_IXUSR:
        FAKE.chmod(mode | stat.S_IXUSR)
    monkeypatch.setenv("RUNNER_KIT_DATA_DIR", str(tmp_path / "data"))
    with FakeModelAPI(api_keys={KEY}) as api:
        yield Env(api, tmp_path)
    left = {p for p in descendants(os.getpid()) if alive(p)}
    assert not left, f"processes left behind: {left}"


def logs(results: list[Any]) -> list[str]:
    return [r.data["text"] for r in results if rtype(r) == "processor.log"]


# --- the standard cases ---------------------------------------------------------------------------------


async def test_ok_text_streams_the_answer(env, host):
    env.api.token_delay = 0.3
    results = await run(make_runner(PLUGIN, host), host, "say hello", config=env.config())
    assert rtype(terminal(results)) == "run.completed"
    assert final_text(results) == "Hello from the fake model."
    shown = deltas(results)
    assert len(shown) >= 2 and all(b.startswith(a) for a, b in zip(shown, shown[1:], strict=False))
    assert not any("Model metadata" in d for d in shown), "the model-metadata warning is no answer text"
    assert any("Model metadata" in t for t in logs(results)), "…it is a processor log line"


async def test_ok_tool_shows_the_command_then_the_answer(env, host):
    results = await run(make_runner(PLUGIN, host), host, "run it", config=env.config("tool"))
    kinds = [rtype(r) for r in results]
    assert "tool.call.started" in kinds and "tool.call.completed" in kinds
    started = next(r for r in results if rtype(r) == "tool.call.started")
    assert started.data["tool_name"] == "shell" and started.data["parameters"]["command"] == "echo hi"
    done = next(r for r in results if rtype(r) == "tool.call.completed")
    assert done.data["result"]["output"] == "hi\n" and done.data["error"] is None
    assert any(d.startswith("⏳ shell: echo hi") for d in deltas(results)), "one progress line while it works"
    assert final_text(results) == "The tool ran; done.", "the progress line is not part of the answer"


async def test_ok_usage_is_the_turns_own_share_of_the_thread_count(env, host):
    runner = make_runner(PLUGIN, host)
    first = terminal(await run(runner, host, "one", config=env.config()))
    second = terminal(await run(runner, host, "two", config=env.config()))
    bodies = [len(json.dumps(r.body)) for r in env.api.model_requests()]
    assert first.usage.completion_tokens == 7 and second.usage.completion_tokens == 7
    assert first.usage.prompt_tokens < second.usage.prompt_tokens < first.usage.prompt_tokens + second.usage.prompt_tokens
    assert len(bodies) == 2


async def test_resume_continues_the_same_thread_in_a_new_process(env, host):
    runner = make_runner(PLUGIN, host)
    first = await run(runner, host, "one", config=env.config())
    (thread,) = state_updates(first).values()
    second = await run(runner, host, "two", config=env.config())
    assert not state_updates(second), "same thread, nothing new to keep"
    reqs = env.api.model_requests()
    assert [r.headers["thread-id"] for r in reqs] == [thread, thread]
    assert len({r.headers["x-fake-agent-pid"] for r in reqs}) == 2, "one process per run"
    assert env.requests("thread/resume")[0]["threadId"] == thread
    assert "one" in json.dumps(reqs[1].body["input"]), "the history goes along"
    assert len(env.workspaces()) == 1 and len(env.homes()) == 1, "same workspace and CODEX_HOME, reused"


@pytest.mark.parametrize("fault, code, words", [
    ("http_401", "upstream.auth", "401 Unauthorized"),
    ("http_404", "upstream.not_found", "model does not exist"),
    ("http_429", "upstream.rate_limited", "429 Too Many Requests"),
    ("http_500", "upstream.unavailable", "high demand"),
    ("http_503", "upstream.unavailable", "503 Service Unavailable"),
    ("error_event", "upstream.unavailable", "stream disconnected"),
    ("invalid_json", "upstream.unavailable", "stream disconnected"),
    ("truncated", "upstream.unavailable", "stream disconnected"),
])
async def test_model_api_failures_are_explained_with_codexs_words(env, host, fault, code, words):
    env.api.fault = fault
    results = await run(make_runner(PLUGIN, host), host, "hi", config=env.config())
    got, retryable, message = failure(results)
    assert got == code and words in message, message
    assert KEY not in json.dumps([r.model_dump(mode="json") for r in results])


async def test_error_event_midstream_keeps_the_streamed_part(env, host):
    env.api.fault = "error_event"
    results = await run(make_runner(PLUGIN, host), host, "hi", config=env.config())
    assert failure(results)[0] == "upstream.unavailable"
    assert final_text(results).startswith("Hello") and "incomplete" in final_text(results).lower()


async def test_malformed_line_from_codex_is_skipped(env, host, tmp_path):
    """A non-JSON line on app-server's stdout (a stray print) does not break the session."""
    rec = tmp_path / "noise.jsonl"
    rec.write_text("\n".join(json.dumps(r) for r in [
        {"dir": "->", "t": 0, "msg": {"id": 1, "method": "initialize"}},
        {"dir": "<-", "t": 0, "msg": {"id": 1, "result": {"userAgent": "x"}}},
        {"dir": "->", "t": 0, "msg": {"method": "initialized"}},
        {"dir": "->", "t": 0, "msg": {"id": 2, "method": "thread/start"}},
        {"dir": "<-", "t": 0, "msg": {"id": 2, "result": {"thread": {"id": "01a20000-0000-7000-8000-000000000001"}}}},
        {"dir": "->", "t": 0, "msg": {"id": 3, "method": "turn/start"}},
        {"dir": "<-", "t": 0, "msg": {"id": 3, "result": {"turn": {"id": "t1", "status": "inProgress"}}}},
        {"dir": "<-", "t": 0, "msg": {"method": "item/agentMessage/delta", "params": {"turnId": "t1", "itemId": "m",
                                                                                      "delta": "fine"}}},
        {"dir": "<-", "t": 0, "msg": {"method": "turn/completed", "params": {"turn": {"id": "t1",
                                                                                     "status": "completed"}}}},
    ]) + "\n")
    script = tmp_path / "codex"
    script.write_text(f"#!/bin/sh\necho 'not json at all'\nexec '{sys.executable}' '{FAKE}' replay '{rec}' \"$@\"\n")
    script.chmod(0o755)
    results = await run(make_runner(PLUGIN, host), host, "hi", config={**env.config(), "executable": str(script)})
    assert final_text(results) == "fine"


async def test_slow_stream_arrives_while_codex_still_generates(env, host):
    env.api.answer_tokens = ["slow "] * 6
    env.api.token_delay = 0.15
    runner = make_runner(PLUGIN, host)
    ctx = host.make_context("hi", config=env.config())
    start, first = time.monotonic(), None
    async for r in runner.invoke(ctx):
        if rtype(r) == "message.delta" and first is None:
            first = time.monotonic() - start
    assert first is not None and first < time.monotonic() - start - 0.4


async def test_stalled_model_ends_in_a_clean_timeout_and_stops_codex(env, host):
    env.api.fault = "stall"
    results = await run(make_runner(PLUGIN, host), host, "hi", config=env.config(), deadline_at=time.time() + 3)
    assert failure(results)[:2] == ("upstream.timeout", True)
    assert env.events("interrupt"), "turn/interrupt was sent before the process was stopped"


# --- request shapes --------------------------------------------------------------------------------------


async def test_generated_config_and_child_environment(env, host, monkeypatch):
    monkeypatch.setenv("LANGBOT_PLUGIN_RUNTIME_CONTROL_TOKEN", "control-token-that-must-stay-home")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-host-key-that-must-stay-home")
    cfg = env.config(**{"env-key": "MY_PROVIDER_KEY", "max-retries": 3, "env": f"FAKE_CODEX_EVENTS={env.log}\nFOO=bar"})
    cfg["base-url"] = env.api.openai_base_url() + "/responses/"  # pasted with the endpoint and a slash
    cfg["api-key"] = "sk-other-key-for-this-test"
    env.api.api_keys.add("sk-other-key-for-this-test")
    results = await run(make_runner(PLUGIN, host), host, "hi", config=cfg)
    assert rtype(terminal(results)) == "run.completed"
    (home,) = env.homes()
    doc = tomllib.loads((home / "config.toml").read_text())
    provider = doc["model_providers"][doc["model_provider"]]
    # codex talks to this agent's secret proxy, which forwards to the configured URL with the real key
    assert provider["base_url"].startswith("http://127.0.0.1:") and provider["base_url"] != env.api.openai_base_url()
    (req,) = env.api.model_requests()  # answered: the pasted /responses/ was cut before the proxy route
    assert req.api == "openai"
    assert provider["env_key"] == "MY_PROVIDER_KEY" and provider["wire_api"] == "responses"
    assert provider["request_max_retries"] == 3 and provider["stream_max_retries"] == 3
    assert doc["check_for_update_on_startup"] is False and doc["analytics"] == {"enabled": False}
    assert doc["model"] == "fake-model" and doc["web_search"] == "disabled"
    assert "sk-other-key" not in (home / "config.toml").read_text()
    assert "sk-other-key" not in str(results)
    (start,) = env.events("start")
    assert start["argv"][1:] == ["app-server"], "nothing but app-server on the command line"
    assert "MY_PROVIDER_KEY" in start["env"] and "FOO" in start["env"] and "CODEX_HOME" in start["env"]
    assert "LANGBOT_PLUGIN_RUNTIME_CONTROL_TOKEN" not in start["env"] and "OPENAI_API_KEY" not in start["env"]
    assert env.api.model_requests()[0].headers["authorization"] == "Bearer sk-other-key-for-this-test"
    assert Path(start["cwd"]) == env.workspaces()[0]


@pytest.mark.parametrize("mode, sandbox, approval", [
    ("read-only", "read-only", "never"),
    ("workspace-write", "workspace-write", "never"),
    ("full-access", "danger-full-access", "never"),
])
async def test_permission_mode_presets_codexs_own_policy(env, host, mode, sandbox, approval):
    await run(make_runner(PLUGIN, host), host, "hi", config=env.config(**{"permission-mode": mode}))
    (start,) = env.requests("thread/start")
    assert (start["sandbox"], start["approvalPolicy"]) == (sandbox, approval)
    assert start["cwd"] == str(env.workspaces()[0]) and start["model"] == "fake-model"


async def test_turn_input_carries_text_and_images(env, host):
    contents = [{"type": "text", "text": "what is this"},
                {"type": "image_base64", "image_base64": base64.b64encode(PNG).decode()}]
    results = await run(make_runner(PLUGIN, host), host, "what is this", config=env.config(), contents=contents)
    assert rtype(terminal(results)) == "run.completed"
    (turn,) = env.requests("turn/start")
    kinds = [i["type"] for i in turn["input"]]
    assert kinds == ["text", "localImage"]
    image = [c for i in env.api.model_requests()[0].body["input"] for c in i.get("content") or []
             if c.get("type") == "input_image"]
    assert image and base64.b64decode(image[0]["image_url"].split(",", 1)[1]) == PNG
    assert not os.path.exists(turn["input"][1]["path"]), "the image file is removed with the run"  # noqa: ASYNC240


async def test_a_file_is_saved_in_the_workspace_and_named(env, host):
    data = base64.b64encode(b"col1,col2\n1,2\n").decode()
    contents = [{"type": "text", "text": "sum it"}, {"type": "file_base64", "file_base64": data, "file_name": "t.csv"}]
    await run(make_runner(PLUGIN, host), host, "sum it", config=env.config(), contents=contents)
    (turn,) = env.requests("turn/start")
    text = turn["input"][0]["text"]
    saved = env.workspaces()[0] / ".langbot-attachments" / "t.csv"
    assert saved.read_bytes() == b"col1,col2\n1,2\n" and str(saved) in text


# --- approvals, answered by the permission mode ------------------------------------------------------


@pytest.mark.parametrize("mode, ran", [("read-only", False), ("workspace-write", True), ("full-access", True)])
async def test_approval_requests_are_answered_by_the_permission_mode(env, host, mode, ran):
    cfg = env.config("toolw", **{"permission-mode": mode, "approval-policy": "untrusted", "sandbox": "danger-full-access"})
    results = await run(make_runner(PLUGIN, host), host, "make a file", config=cfg)
    assert final_text(results) == "The tool ran; done."
    (asked,) = env.events("approval")
    assert asked["answer"]["decision"] == ("accept" if ran else "decline")
    assert (env.workspaces()[0] / "created-by-tool.txt").exists() == ran
    assert any("asked to approve" in t and ("accepted" if ran else "declined") in t for t in logs(results))
    done = next(r for r in results if rtype(r) == "tool.call.completed")
    assert (done.data["error"] == "declined") == (not ran)


# --- the binary, the workspace, the session ---------------------------------------------------------------


async def test_the_npm_wrapper_is_replaced_by_the_native_binary_next_to_it(env, host, tmp_path):
    nm = tmp_path / "npm" / "node_modules"
    wrapper = nm / "@openai" / "codex" / "bin" / "codex.js"
    wrapper.parent.mkdir(parents=True)
    wrapper.write_text("#!/usr/bin/env node\nprocess.exit(9)\n")
    wrapper.chmod(0o755)
    vendor = nm / "@openai" / "codex-linux-x64" / "vendor" / "x86_64-unknown-linux-musl"
    (vendor / "bin").mkdir(parents=True)
    (vendor / "path").mkdir()
    native = vendor / "bin" / "codex"
    native.write_text(f"#!/bin/sh\nexec '{sys.executable}' '{FAKE}' \"$@\"\n")
    native.chmod(0o755)
    (nm / ".bin").mkdir()
    (nm / ".bin" / "codex").symlink_to("../@openai/codex/bin/codex.js")
    if os.uname().machine not in ("x86_64", "amd64"):
        pytest.skip("the layout above is the x86_64 one")
    results = await run(make_runner(PLUGIN, host), host, "hi", config={**env.config(), "executable": str(nm / ".bin" / "codex")})
    assert final_text(results) == "Hello from the fake model."
    (start,) = env.events("start")
    assert start["path"].split(os.pathsep)[0] == str(vendor / "path"), "rg's directory first on PATH, as the wrapper does"


async def test_missing_executable_is_explained(env, host, tmp_path):
    results = await run(make_runner(PLUGIN, host), host, "hi", config={**env.config(), "executable": str(tmp_path / "nope")})
    code, _, message = failure(results)
    assert code == "process.not_found" and "executable" in message
    assert not env.api.model_requests()


async def test_configured_workspace_is_created_and_used(env, host, tmp_path):
    where = tmp_path / "projects" / "repo"
    await run(make_runner(PLUGIN, host), host, "hi", config=env.config(workspace=str(where)))
    assert where.is_dir() and env.requests("thread/start")[0]["cwd"] == str(where)
    code, _, message = failure(await run(make_runner(PLUGIN, host), host, "hi", config=env.config(workspace="rel/dir")))
    assert code == "config.invalid" and "workspace" in message


async def test_a_user_reset_starts_a_new_thread(env, host):
    runner = make_runner(PLUGIN, host)
    (first,) = state_updates(await run(runner, host, "one", config=env.config())).values()
    host.reset_conversation()
    (second,) = state_updates(await run(runner, host, "two", config=env.config())).values()
    assert first != second and len(env.requests("thread/resume")) == 0


async def test_a_cleared_codex_home_starts_fresh_with_one_notice(env, host):
    runner = make_runner(PLUGIN, host)
    (first,) = state_updates(await run(runner, host, "one", config=env.config())).values()
    for home in env.homes():
        for f in (home / "sessions").glob("*"):
            f.unlink()
    results = await run(runner, host, "two", config=env.config())
    (second,) = state_updates(results).values()
    assert second != first and final_text(results).endswith("Hello from the fake model.")
    assert "new one" in final_text(results).split("\n\n")[0]


async def test_group_threads_follow_the_identity_setting(env, host):
    runner = make_runner(PLUGIN, host)
    threads: dict[str, set[str]] = {}
    for source in ("conversation", "actor"):
        seen = set()
        for actor in ("alice", "bob"):
            ident = Identity(conversation_id=f"g-{source}", actor_id=actor, launcher_type="group", launcher_id="g1")
            await run(runner, host, "hi", config=env.config(**{"user-id-source": source}), identity=ident)
            seen.add(host.store.get(host.scope_key(ident, "conversation"),
                                    stored_key("codex.thread_id", ident, source=source) if source == "actor"
                                    else "codex.thread_id"))
        threads[source] = seen
    assert len(threads["conversation"]) == 1, "the whole group shares one thread (and workspace)"
    assert len(threads["actor"]) == 2, "each person their own"


async def test_two_bots_in_one_process_keep_their_keys_apart(env, host):
    import asyncio

    env.api.api_keys.add("sk-second-bot-key-0123")
    host_b = LocalHost(runner_id=host.runner_id)
    a, b = make_runner(PLUGIN, host), make_runner(PLUGIN, host_b)
    env.api.token_delay = 0.02
    res = await asyncio.gather(
        run(a, host, "hi", config=env.config(), identity=Identity(conversation_id="c-a", actor_id="alice", bot_id="a")),
        run(b, host_b, "hi", config={**env.config(), "api-key": "sk-second-bot-key-0123"},
            identity=Identity(conversation_id="c-b", actor_id="bob", bot_id="b")))
    assert all(rtype(terminal(r)) == "run.completed" for r in res)
    by_thread = {r.headers["thread-id"]: r.headers["authorization"] for r in env.api.model_requests()}
    assert sorted(by_thread.values()) == sorted([f"Bearer {KEY}", "Bearer sk-second-bot-key-0123"])


async def test_langbot_tools_reach_codex_as_a_run_scoped_mcp_server(env, host):
    resources = {"tools": [{"tool_name": "weather", "operations": ["call"]}]}
    results = await run(make_runner(PLUGIN, host), host, "hi", config=env.config(), resources=resources)
    assert rtype(terminal(results)) == "run.completed"
    (start,) = env.requests("thread/start")
    server = start.get("config", {}).get("mcp_servers.langbot")
    if server is None:
        pytest.skip("this host grants nothing the SDK's bridge offers")
    assert server["url"].startswith("http://127.0.0.1:") and server["bearer_token_env_var"] == "LANGBOT_MCP_TOKEN"
    (proc,) = env.events("start")
    assert "LANGBOT_MCP_TOKEN" in proc["env"]
    off = env.config(**{"langbot-tools": False})
    await run(make_runner(PLUGIN, host), host, "hi", config=off, resources=resources)
    assert "config" not in env.requests("thread/resume")[0], "switched off: no server"


HOST_FIELDS = {"enable-all-tools": False, "tools": [], "knowledge-bases": [], "mcp-resources": [],
               "mcp-resource-agent-read-enabled": False}


@pytest.mark.parametrize("suffix", ["", "/", "/responses", "/responses/"])
async def test_base_url_forms_and_the_hosts_own_fields(env, host, suffix):
    """What an owner pastes, next to the fields LangBot adds to every runner config (no legacy
    pipeline migrates to this runner: LangBot 4.11.2's 0015 migration only renames its id)."""
    cfg = {**env.config(), **HOST_FIELDS, "base-url": env.api.openai_base_url() + suffix}
    results = await run(make_runner(PLUGIN, host), host, "hi", config=cfg)
    assert final_text(results) == "Hello from the fake model."
    assert env.api.model_requests()[0].headers["x-fake-agent-cwd"]


async def test_env_key_may_not_shadow_the_childs_own_variables(env, host):
    code, _, message = failure(await run(make_runner(PLUGIN, host), host, "hi",
                                         config=env.config(**{"env-key": "PATH"})))
    assert code == "config.invalid" and "env-key" in message
