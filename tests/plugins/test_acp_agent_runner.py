"""acp-agent-runner through the local host, driving the scripted codex-acp-shaped test agent
(tests/fakes/cli/acp_agent.py), which calls the shared fake model API; plus the pieces a user
relies on: how the agent is started (argv, environment), the permission policy, the confined file
access, error wording."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

import tests.contract.cases  # noqa: F401  (the case module imports from it)
from runner_kit.process import alive, descendants
from runners_cli.host import Identity
from tests.contract.case_acp_agent_runner import KEY, _Server, config
from tests.helpers import (
    collect,
    deltas,
    failure,
    final_text,
    make_runner,
    messages,
    rtype,
    run,
    state_updates,
    terminal,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "acp-agent-runner"))
from acp_agent_runner import const, policy, providers  # noqa: E402
from acp_agent_runner.errors import classify  # noqa: E402

PLUGIN = "acp-agent-runner"  # tests/plugins/conftest.py: the host and runner fixtures
ADVANCED = {"advanced-settings": True}


@pytest.fixture
def srv():
    s = _Server().start()
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture(autouse=True)
def _data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("RUNNER_KIT_DATA_DIR", str(tmp_path / "data"))


async def _no_children() -> set[int]:
    import asyncio

    for _ in range(100):
        left = {p for p in descendants(os.getpid()) if alive(p)}
        if not left:
            return left
        await asyncio.sleep(0.05)
    return left


def tool_events(results):
    return [(rtype(r), r.data) for r in results if rtype(r).startswith("tool.call")]


# --- answering ------------------------------------------------------------------------------------


async def test_ok_text_streams_the_answer_without_the_codex_warning(srv, host):
    results = await run(make_runner("acp-agent-runner", host), host, config=config(srv))
    assert rtype(terminal(results)) == "run.completed"
    assert final_text(results) == "Hello from the fake model."
    assert all("Model metadata" not in d for d in deltas(results))
    (key, sid), = state_updates(results).items()
    assert key.startswith(const.SESSION_KEY) and sid
    req = srv.model_requests()[0]
    assert req.headers["authorization"] == f"Bearer {KEY}" and req.headers["session-id"] == sid
    assert not await _no_children()


async def test_ok_usage_comes_from_the_prompt_result(srv, host):
    end = terminal(await run(make_runner("acp-agent-runner", host), host, config=config(srv)))
    n_in = len(srv.requests[-1].body) // 4
    assert (end.usage.prompt_tokens, end.usage.completion_tokens, end.usage.total_tokens) == (n_in, 7, n_in + 7)


async def test_the_context_windows_fill_is_not_reported_as_usage(srv, host):
    """The real codex-acp 0.16.0 answers session/prompt without usage and sends usage_update {used,
    size}: how full the context window is after the turn, not what the turn consumed. Reported as
    the turn's total and summed over turns it grew with every message; LangBot gets no usage now."""
    cfg = {**config(srv), "env": config(srv)["env"] + "\nFAKE_ACP_NO_RESULT_USAGE=1"}
    runner = make_runner("acp-agent-runner", host)
    ends = [terminal(await run(runner, host, text, config=cfg)) for text in ("hello", "and again")]
    assert [rtype(e) for e in ends] == ["run.completed", "run.completed"]
    assert [e.usage for e in ends] == [None, None], [e.usage for e in ends]


async def test_the_sessions_cumulative_cost_becomes_each_turns_own(srv, host):
    """usage_update.cost is the session's cumulative cost (ACP schema): each turn reports what it
    added, in the run's usage and on the cost line; a session continued in a new process that counts
    from 0 again (as this fake does) is counted from 0, not from the earlier run's total."""
    cfg = {**config(srv), "env": config(srv)["env"] + "\nFAKE_ACP_NO_RESULT_USAGE=1\nFAKE_ACP_COST=0.25",
           "cost-footer": True, "advanced-settings": True}
    runner = make_runner("acp-agent-runner", host)
    ctx = host.make_context("one", config=cfg, steering=True)
    host.queue_steering(ctx, "two")
    results = await collect(runner, host, ctx)
    end = terminal(results)
    assert end.usage is not None and abs(end.usage.model_dump()["cost_usd"] - 0.5) < 1e-9, end.usage
    shown = messages(results)
    assert "$0.25" in shown[0] and "$0.50" in shown[1], shown
    again = await run(runner, host, "three", config=cfg)
    assert abs(terminal(again).usage.model_dump()["cost_usd"] - 0.25) < 1e-9, terminal(again).usage
    assert "$0.75" in messages(again)[-1] and "3 turns" in messages(again)[-1], messages(again)


async def test_resume_continues_the_same_agent_session_in_a_new_process(srv, host):
    runner = make_runner("acp-agent-runner", host)
    first = await run(runner, host, config=config(srv))
    second = await run(runner, host, "and again?", config=config(srv))
    assert final_text(second) == "Hello from the fake model." and not state_updates(second)
    a, b = srv.model_requests()
    assert a.headers["session-id"] == b.headers["session-id"] == next(iter(state_updates(first).values()))
    assert len(b.body["input"]) > len(a.body["input"]), "the resumed session carries the history"
    assert a.headers["x-fake-agent-pid"] != b.headers["x-fake-agent-pid"]


async def test_ok_tool_runs_the_command_in_the_workspace(srv, host, tmp_path):
    srv.tool_command = "echo hi && pwd"
    ws = tmp_path / "ws"
    results = await run(make_runner("acp-agent-runner", host), host, config={**config(srv), "workspace": str(ws)})
    assert rtype(terminal(results)) == "run.completed"
    tools = tool_events(results)
    assert [t for t, _ in tools] == ["tool.call.started", "tool.call.completed"]
    started, done = tools[0][1], tools[1][1]
    assert started["parameters"]["command"] == "echo hi && pwd"
    assert done["result"]["stdout"] == f"hi\n{ws}\n"
    assert final_text(results) == "Hello from the fake model."


async def test_read_only_rejects_a_write_and_the_file_is_not_created(srv, host, tmp_path):
    srv.tool_command = "touch created-by-tool.txt"
    ws = tmp_path / "ws"
    cfg = {**config(srv), "workspace": str(ws), "permission-mode": "read-only"}
    results = await run(make_runner("acp-agent-runner", host), host, config=cfg)
    assert rtype(terminal(results)) == "run.completed"
    assert not (ws / "created-by-tool.txt").exists()
    assert [e["mode"] for e in srv.events("set_mode")] == ["read-only"], "the agent's own mode follows"
    done = [d for t, d in tool_events(results) if t == "tool.call.completed"]
    assert done and done[0]["error"]


async def test_workspace_write_lets_the_agent_write_in_its_workspace(srv, host, tmp_path):
    srv.tool_command = "touch created-by-tool.txt"
    ws = tmp_path / "ws"
    cfg = {**config(srv), "workspace": str(ws)}
    await run(make_runner("acp-agent-runner", host), host, config=cfg)
    assert (ws / "created-by-tool.txt").exists()
    assert [e["mode"] for e in srv.events("set_mode")] == ["auto"]


async def test_full_access_keeps_the_agents_full_access_mode(srv, host):
    await run(make_runner("acp-agent-runner", host), host, config={**config(srv), "permission-mode": "full-access"})
    assert srv.events("set_mode") == []


async def test_a_stray_non_json_line_on_stdout_is_skipped(srv, host):
    cfg = {**config(srv), "env": config(srv)["env"] + "\nFAKE_ACP_NOISE=1"}
    results = await run(make_runner("acp-agent-runner", host), host, config=cfg)
    assert final_text(results) == "Hello from the fake model."


async def test_langbot_tools_reach_the_agent_as_an_mcp_server_unless_switched_off(srv, host):
    await run(make_runner("acp-agent-runner", host), host, config={**config(srv), "langbot-tools": True})
    (first,) = srv.events("new_session")
    assert first["mcp"] == [{"name": "langbot", "type": "http", "headers": ["Authorization"]}]
    cfg = {**config(srv), "langbot-tools": False}
    await run(make_runner("acp-agent-runner", host), host, config=cfg, identity=Identity(conversation_id="another"))
    assert srv.events("new_session")[1]["mcp"] == []


async def test_configured_mcp_servers_are_added(srv, host):
    cfg = {**config(srv), **ADVANCED, "langbot-tools": False,
           "mcp-servers": {"files": {"command": "mcp-files", "args": ["--root", "."], "env": {"X": "1"}},
                           "web": {"type": "http", "url": "http://127.0.0.1:9/mcp", "headers": {"A": "b"}}}}
    await run(make_runner("acp-agent-runner", host), host, config=cfg)
    (ev,) = srv.events("new_session")
    assert ev["mcp"] == [{"name": "files", "type": "stdio", "headers": []},
                         {"name": "web", "type": "http", "headers": ["A"]}]


def test_the_plan_is_one_progress_line():
    from acp.schema import PlanEntry
    from acp_agent_runner.adapter import _plan

    from runner_kit import events as ev

    entries = [PlanEntry(content="read the code", priority="high", status="completed"),
               PlanEntry(content="fix the bug", priority="high", status="in_progress"),
               PlanEntry(content="run tests", priority="low", status="pending")]
    assert _plan(entries) == [ev.Progress("Plan 2/3: fix the bug")]
    done = [PlanEntry(content=e.content, priority=e.priority, status="completed") for e in entries]
    assert _plan(done) == [ev.Progress("Plan: all 3 steps done")]


# --- failures -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("fault", "code", "words"), [
    ("http_401", "upstream.auth", "401"),
    ("http_404", "upstream.not_found", "404"),
    ("http_429", "upstream.rate_limited", "429"),
    ("http_500", "upstream.unavailable", "high demand"),
    ("http_503", "upstream.unavailable", "high demand"),
    ("truncated", "upstream.unavailable", "stream disconnected"),
    ("invalid_json", "upstream.unavailable", "stream disconnected"),
])
async def test_model_api_errors_reach_the_chat_in_the_agents_words(srv, host, fault, code, words):
    srv.fault = fault
    results = await run(make_runner("acp-agent-runner", host), host, config=config(srv))
    got, _, message = failure(results)
    assert got == code and words in message, message
    assert KEY not in message
    assert not await _no_children()


async def test_error_event_midstream_keeps_the_text_so_far(srv, host):
    srv.answer_tokens = ["Part one, ", "part two."]
    srv.fault = "error_event"
    results = await run(make_runner("acp-agent-runner", host), host, config=config(srv))
    code, retryable, _ = failure(results)
    assert (code, retryable) == ("upstream.unavailable", True)


async def test_slow_stream_is_streamed_and_a_stall_ends_by_idle_timeout(srv, host):
    srv.answer_tokens = ["a ", "b ", "c ", "d"]
    srv.token_delay = 0.15
    results = await run(make_runner("acp-agent-runner", host), host, config=config(srv))
    assert deltas(results)[0] == "a " and final_text(results) == "a b c d", "the first piece is shown at once"
    srv.fault = "stall"
    results = await run(make_runner("acp-agent-runner", host), host,
                        config={**config(srv), **ADVANCED, "idle-timeout": 1})
    code, _, message = failure(results)
    assert code == "upstream.timeout" and "idle-timeout" in message
    assert not await _no_children()


async def test_an_agent_that_exits_at_once_is_named_with_its_exit_code(srv, host):
    cfg = {**config(srv), "command": f"{sys.executable} -c \"import sys; sys.stderr.write('boom'); sys.exit(3)\""}
    code, _, message = failure(await run(make_runner("acp-agent-runner", host), host, config=cfg))
    assert code == "process.exited" and "code 3" in message and "boom" in message


async def test_a_missing_agent_program_is_process_not_found(srv, host):
    cfg = {**config(srv), "command": "/nonexistent/agent --acp"}
    code, _, message = failure(await run(make_runner("acp-agent-runner", host), host, config=cfg))
    assert code == "process.not_found" and "/nonexistent/agent" in message


async def test_custom_provider_needs_a_command(srv, host):
    cfg = {**config(srv), "provider": "custom", "command": ""}
    code, _, message = failure(await run(make_runner("acp-agent-runner", host), host, config=cfg))
    assert code == "config.invalid" and "command" in message


async def test_an_auth_method_the_agent_does_not_offer_is_named(srv, host):
    cfg = {**config(srv), **ADVANCED, "auth-method": "chatgpt"}
    code, _, message = failure(await run(make_runner("acp-agent-runner", host), host, config=cfg))
    assert code == "config.invalid" and "openai-api-key" in message
    cfg["auth-method"] = "openai-api-key"
    assert rtype(terminal(await run(make_runner("acp-agent-runner", host), host, config=cfg))) == "run.completed"


# --- how the agent is started ----------------------------------------------------------------------


def _cfg(**kw):
    from runner_kit.config import ConfigSchema

    schema = ConfigSchema.from_yaml(Path(__file__).resolve().parents[2] / "acp-agent-runner" / "components"
                                    / "runner" / "default.yaml")
    return schema.load({"advanced-settings": True, **kw})


@pytest.mark.parametrize("base", ["http://h:8080", "http://h:8080/", "http://h:8080/v1", "http://h:8080/v1/",
                                  "http://h:8080/v1/responses"])
def test_codex_gets_a_custom_provider_and_the_key_only_in_its_environment(base):
    spec = providers.launch(_cfg(provider="codex", command="codex-acp-test", **{"base-url": base,
                                                                               "api-key": "sk-secret-xyz"}))
    # `command` must resolve; use python so the test does not need codex-acp installed
    assert 'model_providers.langbot.base_url="http://h:8080/v1"' in spec.argv
    assert "sk-secret-xyz" not in " ".join(spec.argv)
    assert spec.env[const.CODEX_KEY_ENV] == "sk-secret-xyz" and spec.codex_home


def test_claude_code_gets_the_anthropic_variables():
    spec = providers.launch(_cfg(provider="claude-code", command="claude-code-acp-test", model="claude-x",
                                 **{"base-url": "https://gw.example/v1/", "api-key": "sk-ant-1"}))
    assert spec.env["ANTHROPIC_BASE_URL"] == "https://gw.example"
    assert spec.env["ANTHROPIC_API_KEY"] == "sk-ant-1" and spec.env["ANTHROPIC_MODEL"] == "claude-x"
    assert spec.env["CLAUDE_CODE_MAX_RETRIES"] == "1"


def test_env_setting_and_args_are_added():
    spec = providers.launch(_cfg(provider="custom", command="my-agent-test --acp", args="--flag 'two words'",
                                 env="A=1\nB=two"))
    assert spec.argv[-3:] == ["--acp", "--flag", "two words"]
    assert spec.env == {"A": "1", "B": "two"}


@pytest.fixture(autouse=True)
def _fake_programs(tmp_path, monkeypatch):
    """Programs named in the start-up tests, on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("codex-acp-test", "claude-code-acp-test", "my-agent-test"):
        p = bin_dir / name
        p.write_text("#!/bin/sh\n")
        p.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")


def test_the_native_codex_acp_binary_is_preferred_over_the_npm_wrapper(tmp_path, monkeypatch):
    import platform

    if platform.machine() not in ("x86_64", "aarch64"):
        pytest.skip("no codex-acp native package name for this machine")
    arch = "x64" if platform.machine() == "x86_64" else "arm64"
    nm = tmp_path / "lib" / "node_modules"
    wrapper = nm / "@zed-industries" / "codex-acp" / "bin" / "codex-acp.js"
    native = nm / "@zed-industries" / f"codex-acp-linux-{arch}" / "bin" / "codex-acp"
    for f in (wrapper, native):
        f.parent.mkdir(parents=True)
        f.write_text("#!/bin/sh\n")
        f.chmod(0o755)
    bin_dir = tmp_path / "npmbin"
    bin_dir.mkdir()
    (bin_dir / "codex-acp").symlink_to(wrapper)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    assert providers.launch(_cfg(provider="codex")).argv[0] == str(native)


# --- permissions, files, errors ----------------------------------------------------------------------


@pytest.mark.parametrize(("mode", "kind", "paths", "ok"), [
    ("read-only", "read", [], True),
    ("read-only", "execute", [], False),
    ("read-only", "edit", ["/ws/a.py"], False),
    ("workspace-write", "edit", ["/ws/a.py"], True),
    ("workspace-write", "edit", ["/etc/passwd"], False),
    ("workspace-write", "execute", [], True),
    ("workspace-write", "fetch", [], False),
    ("full-access", "edit", ["/etc/passwd"], True),
])
def test_permission_policy(tmp_path, mode, kind, paths, ok):
    ws = tmp_path / "ws"
    ws.mkdir()
    paths = [p.replace("/ws", str(ws)) for p in paths]
    assert policy.allowed(mode, kind, paths, ws) is ok


def test_files_outside_the_workspace_are_refused(tmp_path):
    from types import SimpleNamespace

    from acp import RequestError
    from acp_agent_runner.adapter import ACPAdapter

    from runner_kit.errors import Redactor

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("one\ntwo\nthree\n")
    (tmp_path / "secret.txt").write_text("no")
    env = SimpleNamespace(config={"permission-mode": "read-only"}, redact=Redactor(), session=None)
    a = ACPAdapter(env)
    a.workspace = ws
    assert a.read_file(str(ws / "a.txt"), 2, 1) == "two\n"
    for bad in (str(tmp_path / "secret.txt"), str(ws / ".." / "secret.txt")):
        with pytest.raises(RequestError):
            a.read_file(bad, None, None)
    with pytest.raises(RequestError):
        a.write_file(str(ws / "b.txt"), "x")  # read-only
    a.mode = "workspace-write"
    a.write_file(str(ws / "sub" / "b.txt"), "x")
    assert (ws / "sub" / "b.txt").read_text() == "x"
    with pytest.raises(RequestError):
        a.write_file(str(tmp_path / "c.txt"), "x")


@pytest.mark.parametrize(("text", "code"), [
    ("unexpected status 401 Unauthorized: bad key, url: http://x/v1/responses", "upstream.auth"),
    ("exceeded retry limit, last status: 429 Too Many Requests", "upstream.rate_limited"),
    ("We're currently experiencing high demand, which may cause temporary errors.", "upstream.unavailable"),
    ("Internal error: API Error: 500 {\"type\":\"error\"}", "upstream.unavailable"),
    ("API Error: Request rejected (429) · fake rate limit", "upstream.rate_limited"),
    ("Invalid API key · Fix external API key", "upstream.auth"),
    ("used 10853 of 258400 tokens", "upstream.error"),
])
def test_agent_error_wording_maps_to_the_taxonomy(text, code):
    assert classify(text)[0] == code

