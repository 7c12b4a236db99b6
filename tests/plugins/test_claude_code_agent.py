"""claude-code-agent through the local host, driving the scripted claude (tests/fakes/cli/fake_claude.py)
against the fake Anthropic Messages API: what a chat sees, what claude is started with, and that
nothing of ours keeps running."""

from __future__ import annotations

import asyncio
import base64
import os
import time
from pathlib import Path

import pytest

from runner_kit.process import alive, descendants
from runner_kit.secret_proxy import STAND_IN_PREFIX
from runners_cli.host import Identity
from tests.contract import cases as _cases  # noqa: F401 - loads the case modules in their order
from tests.contract.case_claude_code_agent import KEY, ClaudeModelAPI, config
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

PLUGIN = "claude-code-agent"
HELLO = "Hello from the fake model."
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 64).decode()


@pytest.fixture
def api():
    srv = ClaudeModelAPI(api_keys={KEY})
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


def tools(results, kind: str) -> list[dict]:
    return [r.data for r in results if rtype(r) == f"tool.call.{kind}"]


async def no_children(timeout: float = 5.0) -> set[int]:
    end = time.monotonic() + timeout
    while True:
        left = {p for p in descendants(os.getpid()) if alive(p)}
        if not left or time.monotonic() > end:
            return left
        await asyncio.sleep(0.05)


def cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read()
    except OSError:
        return b""


def file_exists(path: str) -> bool:
    return os.path.exists(path)


def sessions(api) -> list[str]:
    return [r.headers.get("x-claude-code-session-id", "") for r in api.model_requests()]


# --- the standard cases ---------------------------------------------------------------------------


async def test_ok_text_streams_token_by_token(api, host):
    results = await run(make_runner(PLUGIN, host), host, config=config(api))
    assert rtype(terminal(results)) == "run.completed"
    assert final_text(results) == HELLO
    assert deltas(results) and all(HELLO.startswith(d) for d in deltas(results))
    [req] = api.model_requests()
    assert req.headers["x-api-key"] == KEY and req.body["stream"] is True
    assert req.body["messages"][-1]["content"] == [{"type": "text", "text": "hello"}]
    assert state_updates(results) == {stored_key("claude_code.session_id"): sessions(api)[0]}  # config: actor
    assert not await no_children()


async def test_ok_tool_shows_the_command_and_its_output(api, host):
    api.tool_command = "echo hi"
    results = await run(make_runner(PLUGIN, host), host, config=config(api))
    assert final_text(results) == HELLO
    [started] = tools(results, "started")
    assert started["tool_name"] == "Bash" and started["parameters"]["command"] == "echo hi"
    [done] = tools(results, "completed")
    assert done["result"] == {"output": "hi"} and not done.get("error")
    assert len(api.model_requests()) == 2  # the tool result went back to the model


async def test_ok_usage_is_the_results_own_count_with_cost_and_steps(api, host):
    api.tool_command = "echo hi"
    end = terminal(await run(make_runner(PLUGIN, host), host, config=config(api)))
    usage = end.usage.model_dump() if hasattr(end.usage, "model_dump") else dict(end.usage)
    sent = sum(len(r.body and __import__("json").dumps(r.body)) for r in api.model_requests())
    assert usage["completion_tokens"] == 14  # 7 per model call, never message_start's 1
    assert 0 < usage["prompt_tokens"] <= sent
    assert usage["total_tokens"] == usage["prompt_tokens"] + 14


async def test_resume_continues_the_same_claude_session(api, host):
    runner = make_runner(PLUGIN, host)
    first = await run(runner, host, config=config(api))
    second = await run(runner, host, config=config(api))
    assert final_text(second) == HELLO
    s1, s2 = sessions(api)
    assert s1 == s2 and s1
    assert not state_updates(second), "the same session id: nothing new to store"
    history = api.model_requests()[-1].body["messages"]
    assert [m["role"] for m in history] == ["user", "assistant", "user"], "claude resent the history"
    assert first  # noqa: B018


@pytest.mark.parametrize(
    ("fault", "code", "retryable", "words"),
    [
        ("http_401", "upstream.auth", False, "Invalid API key"),
        ("http_404", "upstream.not_found", False, "404"),
        ("http_429", "upstream.rate_limited", True, "429"),
        ("http_500", "upstream.unavailable", True, "server-side"),
        ("http_503", "upstream.unavailable", True, "503"),
    ],
)
async def test_model_api_errors_fail_fast_with_claudes_words(api, host, fault, code, retryable, words):
    api.fault = fault
    started = time.monotonic()
    results = await run(make_runner(PLUGIN, host), host, config=config(api), surface="api")
    got, got_retryable, message = failure(results)
    assert (got, got_retryable) == (code, retryable)
    assert words in message and KEY not in message
    assert time.monotonic() - started < 5, "max-retries 1, not claude's 10 with backoff"
    retried = fault != "http_404"  # claude retries even a 401 (real-peers.md §3), once with max-retries 1
    assert len(api.model_requests()) == (2 if retried else 1)


async def test_error_event_midstream_keeps_the_partial_text(api, host):
    api.answer_tokens = ["The first part ", "and the rest."]
    api.fault = "error_event"
    results = await run(make_runner(PLUGIN, host), host, config=config(api))
    assert failure(results)[:2] == ("upstream.unavailable", True)
    assert deltas(results)[-1] == "The first part "
    assert final_text(results).startswith("The first part \n\n")


async def test_malformed_and_unknown_lines_are_skipped(api, host):
    cfg = {**config(api), "advanced-settings": True, "env": "FAKE_CLAUDE_NOISE=1"}
    results = await run(make_runner(PLUGIN, host), host, config=cfg)
    assert rtype(terminal(results)) == "run.completed" and final_text(results) == HELLO


async def test_truncated_stream_is_retryable(api, host):
    api.fault = "truncated"
    assert failure(await run(make_runner(PLUGIN, host), host, config=config(api)))[:2] == (
        "upstream.unavailable", True)


async def test_slow_stream_arrives_while_claude_is_still_answering(api, host):
    api.answer_tokens = ["one ", "two ", "three ", "four ", "five."]
    api.token_delay = 0.2
    ctx = host.make_context("hi", config=config(api))
    start, first = time.monotonic(), None
    async for r in make_runner(PLUGIN, host).invoke(ctx):
        if rtype(r) == "message.delta" and first is None:
            first = time.monotonic() - start
    assert first is not None and time.monotonic() - start - first > 0.6


# --- claude's own quirks --------------------------------------------------------------------------


async def test_a_session_claude_no_longer_has_starts_afresh_once_with_the_notice(api, host):
    runner = make_runner(PLUGIN, host)
    first = await run(runner, host, config=config(api))
    old = next(iter(state_updates(first).values()))
    api.forget_sessions()
    second = await run(runner, host, config=config(api))
    assert rtype(terminal(second)) == "run.completed"
    notice, _, answer = final_text(second).partition("\n\n")
    assert answer == HELLO and "new" in notice.lower()
    new = next(iter(state_updates(second).values()))
    assert new != old and sessions(api)[-1] == new


async def test_a_crash_mid_stream_names_the_exit_and_stderr(api, host):
    cfg = {**config(api), "advanced-settings": True, "env": "FAKE_CLAUDE_CRASH=1"}
    code, retryable, message = failure(await run(make_runner(PLUGIN, host), host, config=cfg))
    assert code == "process.exited" and "code 3" in message and "fake crash" in message
    assert not await no_children()


async def test_missing_executable_and_missing_key_are_explained(api, host):
    runner = make_runner(PLUGIN, host)
    code, _, message = failure(await run(runner, host, config={**config(api), "executable": "/nonexistent/claude"}))
    assert code == "process.not_found" and "executable" in message
    code, _, message = failure(await run(runner, host, config={**config(api), "api-key": ""}))
    assert code == "config.missing" and "api-key" in message
    assert not api.model_requests()


async def test_a_binding_without_a_key_names_every_problem_it_can_see_at_once(api, host):
    # issue 34 item 8: with no key and a wrong program, the chat named the key only; the program was
    # reported after the owner had set the key and tried again. Now one message names everything
    # the binding already gets wrong, and nothing is started.
    cfg = {**config(api), "api-key": "", "executable": "/nonexistent/claude", "base-url": "api.anthropic.com"}
    results = await run(make_runner(PLUGIN, host), host, config=cfg)
    code, _, message = failure(results)
    assert code == "config.missing"
    assert "'api-key' is required but empty" in message
    assert "/nonexistent/claude is not an executable file" in message
    assert "'base-url' must be an http(s) address" in message
    chat = final_text(results)
    assert "API key" in chat and "Claude Code program" in chat and "Model API base URL" in chat, chat
    # a program that is fine is not named; a key that is set leaves the program to the start
    cfg = {**config(api), "api-key": ""}
    code, _, message = failure(await run(make_runner(PLUGIN, host), host, config=cfg))
    assert code == "config.missing" and "executable" not in message and "base-url" not in message
    assert not api.model_requests()


@pytest.mark.parametrize("suffix", ["", "/", "/v1", "/v1/", "/v1/messages"])
async def test_base_url_as_pasted(api, host, suffix):
    cfg = {**config(api), "base-url": api.anthropic_base_url() + suffix}
    results = await run(make_runner(PLUGIN, host), host, config=cfg)
    assert final_text(results) == HELLO
    assert api.model_requests()[0].headers.get("x-api-key") == KEY


async def test_claude_gets_only_an_allow_listed_environment_and_no_secret_in_argv(api, host, monkeypatch):
    monkeypatch.setenv("LANGBOT_PLUGIN_RUNTIME_CONTROL_TOKEN", "control-token-that-must-stay-here")
    monkeypatch.setenv("SOME_HOST_SECRET", "host-secret-value")
    api.tool_command = "env; echo ARGV; tr '\\0' ' ' < /proc/$PPID/cmdline"
    cfg = {**config(api), "permission-mode": "full-access", "advanced-settings": True, "env": "EXTRA_VAR=yes"}
    results = await run(make_runner(PLUGIN, host), host, config=cfg)
    [done] = tools(results, "completed")
    env_text, _, argv = done["result"]["output"].partition("ARGV")
    env = dict(line.split("=", 1) for line in env_text.strip().splitlines() if "=" in line)
    # no secret inside: a stand-in key, and a base URL on the run's own proxy, which sends the real key
    assert KEY not in done["result"]["output"] and KEY not in str(results)
    assert env["ANTHROPIC_API_KEY"].startswith(STAND_IN_PREFIX) or env["ANTHROPIC_API_KEY"] == "***"
    assert env["ANTHROPIC_BASE_URL"].startswith("http://127.0.0.1:")
    assert env["ANTHROPIC_BASE_URL"] != api.anthropic_base_url()
    assert {r.headers.get("x-api-key") for r in api.model_requests()} == {KEY}
    assert env["CLAUDE_CODE_MAX_RETRIES"] == "1" and env["EXTRA_VAR"] == "yes"
    for quiet in ("DISABLE_TELEMETRY", "DISABLE_AUTOUPDATER", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
                  "DISABLE_ERROR_REPORTING"):
        assert env[quiet] == "1"
    assert "LANGBOT_PLUGIN_RUNTIME_CONTROL_TOKEN" not in env and "SOME_HOST_SECRET" not in env
    assert Path(env["HOME"]).is_relative_to(api.data_dir)
    if os.geteuid() == 0:
        assert env["IS_SANDBOX"] == "1", "bypassPermissions as root needs it"
    assert KEY not in argv and "--permission-mode bypassPermissions" in argv
    assert "--input-format stream-json" in argv and "--include-partial-messages" in argv
    assert "--session-id" in argv and "--resume" not in argv


@pytest.mark.parametrize(("mode", "created"), [("read-only", False), ("workspace-write", True)])
async def test_permission_mode_is_claudes_own_policy(api, host, tmp_path, mode, created):
    api.tool_command = "touch created-by-tool.txt"
    cfg = {**config(api), "permission-mode": mode, "workspace": str(tmp_path / "ws")}
    results = await run(make_runner(PLUGIN, host), host, config=cfg)
    assert rtype(terminal(results)) == "run.completed"
    [done] = tools(results, "completed")
    assert (tmp_path / "ws" / "created-by-tool.txt").exists() is created
    assert bool(done.get("error")) is not created
    assert end_usage_extra(results)["permission_denials"] == (0 if created else 1)


def end_usage_extra(results) -> dict:
    usage = terminal(results).usage
    return usage.model_dump() if hasattr(usage, "model_dump") else dict(usage)


async def test_workspace_is_per_conversation_and_kept_across_runs(api, host):
    api.tool_command = "pwd"
    runner = make_runner(PLUGIN, host)
    a1 = await run(runner, host, config=config(api), identity=Identity(conversation_id="c1", actor_id="alice"))
    a2 = await run(runner, host, config=config(api), identity=Identity(conversation_id="c1", actor_id="alice"))
    b = await run(runner, host, config=config(api), identity=Identity(conversation_id="c2", actor_id="bob"))
    dirs = [tools(r, "completed")[0]["result"]["output"] for r in (a1, a2, b)]
    assert dirs[0] == dirs[1] != dirs[2]
    assert all(Path(d).is_relative_to(api.data_dir) for d in dirs)


async def test_images_go_to_claude_as_image_blocks(api, host):
    contents = [{"type": "text", "text": "what is this"}, {"type": "image_base64", "image_base64": PNG}]
    results = await run(make_runner(PLUGIN, host), host, "what is this", config=config(api), contents=contents)
    assert rtype(terminal(results)) == "run.completed"
    blocks = api.model_requests()[0].body["messages"][-1]["content"]
    assert blocks[0] == {"type": "text", "text": "what is this"}
    assert blocks[1]["type"] == "image" and blocks[1]["source"]["media_type"] == "image/png"


async def test_cancel_during_a_tool_leaves_no_process_behind(api, host):
    api.tool_command = "sleep 30 && echo done"
    cfg = {**config(api), "permission-mode": "full-access"}
    ctx = host.make_context("sleep", config=cfg)
    gen = make_runner(PLUGIN, host).invoke(ctx)
    async for r in gen:
        if rtype(r) == "tool.call.started":
            break
    await asyncio.sleep(0.3)  # the tool shell is running in its own session now
    assert any(b"sleep" in cmdline(p) for p in descendants(os.getpid()) if alive(p))
    await gen.aclose()
    assert not await no_children(), "claude, its tool shell and the sleep are all gone"


async def test_max_turns_without_an_answer_says_so(api, host):
    api.tool_command = "echo hi"
    cfg = {**config(api), "advanced-settings": True, "max-turns": 1}
    code, _, message = failure(await run(make_runner(PLUGIN, host), host, config=cfg))
    assert code == "upstream.error" and "max-turns" in message


async def test_files_that_are_not_images_are_saved_in_the_workspace(api, host, tmp_path):
    import base64 as b64

    data = b64.b64encode(b"col1,col2\n1,2\n").decode()
    attachments = [{"type": "file", "name": "table.csv", "mime_type": "text/csv", "content": data}]
    cfg = {**config(api), "workspace": str(tmp_path / "ws")}
    results = await run(make_runner(PLUGIN, host), host, "read it", config=cfg, attachments=attachments)
    assert rtype(terminal(results)) == "run.completed"
    text = api.model_requests()[0].body["messages"][-1]["content"][0]["text"]
    assert "./langbot-files/table.csv" in text
    assert (tmp_path / "ws" / "langbot-files" / "table.csv").read_bytes() == b"col1,col2\n1,2\n"


@pytest.mark.parametrize("enabled", [True, False])
async def test_langbot_tools_reach_claude_as_a_private_mcp_config(api, host, enabled):
    api.tool_command = ("args=$(tr '\\0' '\\n' < /proc/$PPID/cmdline); echo \"$args\"; "
                        "f=$(echo \"$args\" | grep -A1 -x -- --mcp-config | tail -n +2); "
                        "[ -n \"$f\" ] && stat -c 'MODE %a' \"$f\" && cat \"$f\"")
    cfg = {**config(api), "permission-mode": "full-access", "advanced-settings": True, "langbot-tools": enabled}
    results = await run(make_runner(PLUGIN, host), host, config=cfg)
    [done] = tools(results, "completed")
    out = (done.get("result") or {}).get("output") or done.get("error") or ""
    if not enabled:
        assert "--mcp-config" not in out
        return
    argv, _, doc = out.partition("MODE ")
    mode, _, body = doc.partition("\n")
    assert "--mcp-config" in argv and mode.strip() == "600"
    server = __import__("json").loads(body)["mcpServers"]["langbot"]
    assert server["type"] == "http" and server["url"].startswith("http://127.0.0.1:")
    token = next(iter(server["headers"].values()))
    assert token not in argv, "the bridge token is in the file, not on the command line"
    path = next(line for line in argv.splitlines() if line.endswith(".json"))
    assert not file_exists(path), "the config file is removed when the run ends"


async def test_host_fields_of_a_saved_pipeline_are_accepted(api, host):
    # LangBot 4.11.2 has no legacy Claude Code runner to migrate; a pipeline saved in its UI carries
    # these host fields beside the runner's own keys
    cfg = {**config(api), "enable-all-tools": False, "tools": [], "knowledge-bases": [], "mcp-resources": [],
           "mcp-resource-agent-read-enabled": False, "timeout": 120}
    results = await run(make_runner(PLUGIN, host), host, config=cfg)
    assert final_text(results) == HELLO
