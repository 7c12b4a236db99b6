"""CodexAgent against the real Codex CLI 0.171.0 (``codex app-server``; opt-in: RUN_SLOW=1).

The CLI comes from npm (``tests/real_peers/coding_clis.py`` installs the pinned packages into the
cache once and skips, saying why, when it cannot). The runner is pointed at npm's Node wrapper in
``node_modules/.bin`` — the way an owner would configure it — and has to find and start the native
binary itself. The model is ``tests/fakes/model_api.py`` (OpenAI Responses) on 127.0.0.1; its
scenario prefixes (``/text``, ``/tool``, ``/toolsleep``, ``/err401`` …) pick the answer. Every run goes
through the local host; after each test no process of ours may be left.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.model_api import FakeModelAPI
from tests.helpers import (
    children_left,
    deltas,
    failure,
    final_text,
    make_runner,
    rtype,
    run,
    state_updates,
    terminal,
)
from tests.real_peers.coding_agents.conftest import tool_sleeps

pytestmark = [pytest.mark.slow, pytest.mark.real_peers, pytest.mark.timeout(600)]

PLUGIN = "codex-agent"


def config(clis: Any, api: FakeModelAPI, scenario: str, **extra: Any) -> dict[str, Any]:
    return {"executable": str(clis.bin_dir / "codex"), "base-url": api.openai_base_url(scenario),
            "api-key": api.api_key, "model": "fake-model", "advanced-settings": True, "max-retries": 0, **extra}


async def test_text_turn_streams_through_the_native_binary(clis, api, host):
    results = await run(make_runner(PLUGIN, host), host, "say hello", config=config(clis, api, "text"))
    assert rtype(terminal(results)) == "run.completed", terminal(results).data
    assert final_text(results) == "Hello from the fake model."
    assert deltas(results) and terminal(results).usage.total_tokens
    assert any("Model metadata" in r.data["text"] for r in results if rtype(r) == "processor.log")
    ua = api.model_requests()[0].headers.get("user-agent", "")
    assert "0.171.0" in ua


async def test_tool_turn_runs_the_command_in_the_workspace(clis, api, host):
    results = await run(make_runner(PLUGIN, host), host, "run it",
                        config=config(clis, api, "toolw", **{"permission-mode": "workspace-write"}))
    assert final_text(results) == "The tool ran; done.", terminal(results).data
    started = [r for r in results if rtype(r) == "tool.call.started"]
    assert started and started[0].data["parameters"]["command"] == "touch created-by-tool.txt"
    where = Path(started[0].data["parameters"]["cwd"])
    assert (where / "created-by-tool.txt").is_file(), "written inside the workspace under workspace-write"


async def test_a_second_run_resumes_the_thread(clis, api, host):
    runner = make_runner(PLUGIN, host)
    (thread,) = state_updates(await run(runner, host, "one", config=config(clis, api, "text"))).values()
    second = await run(runner, host, "two", config=config(clis, api, "text"))
    assert final_text(second) == "Hello from the fake model." and not state_updates(second)
    reqs = api.model_requests()
    assert [r.headers.get("thread-id") for r in reqs] == [thread, thread]
    assert "one" in str(reqs[1].body["input"]), "the resumed thread sends its history"
    assert terminal(second).usage.completion_tokens == 7, "this turn's own count, not the thread's 14"


async def test_a_follow_up_is_absorbed_into_the_same_live_process(clis, api, host):
    api.token_delay = 0.1
    host_s = host
    runner = make_runner(PLUGIN, host_s)
    ctx = host_s.make_context("first", config=config(clis, api, "text"), steering=True)
    out, queued = [], False
    async for r in runner.invoke(ctx):
        host_s.apply_result(ctx.run_id, r)
        out.append(r)
        if rtype(r) == "message.delta" and not queued:
            queued = True
            host_s.queue_steering(ctx, "second")
    assert rtype(terminal(out)) == "run.completed", terminal(out).data
    replies = [r for r in out if rtype(r) == "message.completed"]
    assert len(replies) == 2
    uas = {r.headers.get("session-id") for r in api.model_requests()}
    assert len(uas) == 1 and len(api.model_requests()) == 2, "one thread, one process, two turns"


async def test_interrupt_mode_stops_the_running_tool_and_answers_at_once(clis, api, host):
    runner = make_runner(PLUGIN, host)
    cfg = config(clis, api, "toolsleep", **{"follow-up-mode": "interrupt", "permission-mode": "full-access"})
    ctx = host.make_context("sleep", config=cfg, steering=True)
    out, queued = [], False
    start = time.monotonic()
    async for r in runner.invoke(ctx):
        host.apply_result(ctx.run_id, r)
        out.append(r)
        if rtype(r) == "tool.call.started" and not queued:
            queued = True
            await asyncio.sleep(0.5)
            host.queue_steering(ctx, "never mind")
    assert time.monotonic() - start < 30, "the 45 s tool did not run to its end"
    assert rtype(terminal(out)) == "run.completed", terminal(out).data
    assert len([r for r in out if rtype(r) == "message.completed"]) == 2
    assert not tool_sleeps()


@pytest.mark.parametrize("scenario, code", [("err401", "upstream.auth"), ("err429", "upstream.rate_limited"),
                                            ("err500", "upstream.unavailable")])
async def test_upstream_errors(clis, api, host, scenario, code):
    results = await run(make_runner(PLUGIN, host), host, "hi", config=config(clis, api, scenario))
    assert failure(results)[0] == code


async def test_cancel_in_the_middle_of_a_tool_leaves_nothing(clis, api, host):
    runner = make_runner(PLUGIN, host)
    ctx = host.make_context("sleep", config=config(clis, api, "toolsleep", **{"permission-mode": "full-access"}))
    gen = runner.invoke(ctx)
    async for r in gen:
        if rtype(r) == "tool.call.started":
            await asyncio.sleep(0.5)
            assert tool_sleeps(), "the tool is running"
            break
    await gen.aclose()
    assert not await children_left()
    for _ in range(100):
        if not tool_sleeps():
            break
        await asyncio.sleep(0.05)
    assert not tool_sleeps(), "the tool's sleep is gone too"


async def test_an_unreachable_model_api_fails_fast_instead_of_waiting_for_the_network(clis, api, host):
    """Codex itself waits "for the network" without end; the runner gives up after max-retries."""
    from tests.fakes.http_server import closed_port

    cfg = {**config(clis, api, "text"), "base-url": f"http://127.0.0.1:{closed_port()}/v1"}
    start = time.monotonic()
    code, retryable, message = failure(await run(make_runner(PLUGIN, host), host, "hi", config=cfg))
    assert (code, retryable) == ("upstream.unavailable", True) and "base-url" in message
    assert time.monotonic() - start < 15


async def test_langbot_tools_reach_the_model_as_codexs_mcp_tools(clis, api, host):
    resources = {"tools": [{"tool_name": "weather", "operations": ["call"]}]}
    results = await run(make_runner(PLUGIN, host), host, "hi", config=config(clis, api, "text"), resources=resources)
    assert rtype(terminal(results)) == "run.completed"
    offered = [t.get("name") for t in api.model_requests()[0].body.get("tools", [])]
    assert "mcp__langbot" in offered, offered
    plain = await run(make_runner(PLUGIN, host), host, "hi", config=config(clis, api, "text", **{"langbot-tools": False}),
                      resources=resources)
    assert rtype(terminal(plain)) == "run.completed"
    assert "mcp__langbot" not in [t.get("name") for t in api.model_requests()[-1].body.get("tools", [])]


# --- permission-mode: ask (untrusted asks item/commandExecution/requestApproval) ---------------------


async def test_ask_mode_a_typed_allow_runs_the_command(clis, api, host):
    from runner_kit import approvals as ap
    from tests.helpers import messages
    from tests.plugins.test_codex_agent_approvals import drive, questions

    try:
        runner = make_runner(PLUGIN, host)
        ctx = host.make_context("run it", steering=True, config=config(clis, api, "toolw", **{"permission-mode": "ask"}))
        out = await drive(runner, host, ctx, ["allow"])
        assert rtype(terminal(out)) == "run.completed", terminal(out).data
        (q,) = questions(out)
        assert "run a command: touch created-by-tool.txt" in q
        started = [r for r in out if rtype(r) == "tool.call.started"]
        assert (Path(started[0].data["parameters"]["cwd"]) / "created-by-tool.txt").is_file()
        assert "The tool ran; done." in "".join(messages(out))
    finally:
        await ap.close_all()


async def test_ask_mode_a_button_in_a_new_run_runs_the_command(clis, api, host):
    from runner_kit import approvals as ap
    from tests.helpers import messages
    from tests.plugins.test_codex_agent_approvals import drive

    try:
        runner = make_runner(PLUGIN, host)
        cfg = config(clis, api, "toolw", **{"permission-mode": "ask"})
        out1 = await drive(runner, host, host.make_context("run it", interactions=True, config=cfg))
        assert rtype(terminal(out1)) == "run.completed", terminal(out1).data
        (req,) = host.interactions
        assert "touch created-by-tool.txt" in req["description"]
        out2 = await drive(runner, host, host.make_context(
            "", interactions=True, config=cfg,
            interaction={"interaction_id": req["interaction_id"], "action_id": "allow"}))
        assert rtype(terminal(out2)) == "run.completed", terminal(out2).data
        done = [r for r in out2 if rtype(r) == "tool.call.completed"]
        assert done and not done[0].data.get("error"), "the rest of the turn streams in run 2"
        assert "The tool ran; done." in "".join(messages(out2))
        assert not await children_left()
    finally:
        await ap.close_all()
