"""ACPRunner against the real ACP adapters (opt-in: RUN_SLOW=1): Zed's ``codex-acp`` 0.16.0 (the
runner is pointed at npm's Node wrapper and must start the native binary itself) and
``claude-code-acp`` 0.16.2 driving the installed Claude Code 2.1.197 (``CLAUDE_CODE_EXECUTABLE``).

The packages come from npm through ``tests/real_peers/coding_clis.py`` (installed once into the cache;
the suite skips, saying why, when it cannot). The model is ``tests/fakes/model_api.py`` on 127.0.0.1
(OpenAI Responses for codex-acp, Anthropic Messages for claude-code-acp); its scenario prefixes pick
the answer. Every run goes through the local host; after each test no process of ours may be left.
"""

from __future__ import annotations

import asyncio
import os
import time
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

PLUGIN = "acp-agent-runner"
AGENTS = ("codex-acp", "claude-code-acp")


def config(clis: Any, api: FakeModelAPI, agent: str, scenario: str, **extra: Any) -> dict[str, Any]:
    if agent == "codex-acp":
        # Codex's Linux sandbox (read-only / auto modes) needs bwrap; this box has none on PATH, the
        # codex CLI package ships one (codex-acp does not)
        bwrap = clis.codex.parent.parent / "codex-resources"
        cfg = {"provider": "codex", "executable": str(clis.bin_dir / "codex-acp"),
               "base-url": api.openai_base_url(scenario), "model": "fake-model",
               "env": f"PATH={bwrap}:{os.environ['PATH']}"}
    else:
        cfg = {"provider": "claude-code", "command": " ".join(clis.claude_code_acp_command),
               "base-url": api.anthropic_base_url(scenario), "env": f"CLAUDE_CODE_EXECUTABLE={clis.claude}"}
    return {**cfg, "api-key": api.api_key, "langbot-tools": False, **extra}


@pytest.mark.parametrize("agent", AGENTS)
async def test_text_turn(clis, api, host, agent):
    results = await run(make_runner(PLUGIN, host), host, "say hello", config=config(clis, api, agent, "text"))
    assert rtype(terminal(results)) == "run.completed", terminal(results).data
    assert final_text(results) == "Hello from the fake model."
    assert deltas(results)
    if agent == "codex-acp":
        assert any("Model metadata" in r.data["text"] for r in results if rtype(r) == "processor.log")
        assert "codex_cli_rs/0.137.0" in api.model_requests()[0].headers.get("user-agent", "")


@pytest.mark.parametrize("agent", AGENTS)
async def test_tool_turn_writes_in_the_workspace(clis, api, host, agent, tmp_path):
    ws = tmp_path / "ws"
    cfg = config(clis, api, agent, "toolw", workspace=str(ws), **{"permission-mode": "workspace-write"})
    results = await run(make_runner(PLUGIN, host), host, "create a file", config=cfg)
    assert final_text(results) == "The tool ran; done.", terminal(results).data
    assert [r for r in results if rtype(r) == "tool.call.started"]
    assert (ws / "created-by-tool.txt").is_file()


@pytest.mark.parametrize("agent", AGENTS)
async def test_read_only_keeps_the_workspace_unchanged(clis, api, host, agent, tmp_path):
    ws = tmp_path / "ws"
    cfg = config(clis, api, agent, "toolw", workspace=str(ws), **{"permission-mode": "read-only"})
    results = await run(make_runner(PLUGIN, host), host, "create a file", config=cfg)
    assert rtype(terminal(results)) == "run.completed", terminal(results).data
    assert not (ws / "created-by-tool.txt").exists()


@pytest.mark.parametrize("agent", AGENTS)
async def test_a_second_run_resumes_the_session(clis, api, host, agent):
    runner = make_runner(PLUGIN, host)
    (sid,) = state_updates(await run(runner, host, "one", config=config(clis, api, agent, "text"))).values()
    second = await run(runner, host, "two", config=config(clis, api, agent, "text"))
    assert final_text(second) == "Hello from the fake model." and not state_updates(second)
    reqs = api.model_requests()
    assert "one" in str(reqs[-1].body), "the resumed session sends its history"
    if agent == "codex-acp":
        assert {r.headers.get("session-id") for r in reqs} == {sid}


@pytest.mark.parametrize("agent", AGENTS)
async def test_a_follow_up_is_absorbed_into_the_same_live_process(clis, api, host, agent):
    api.token_delay = 0.1
    runner = make_runner(PLUGIN, host)
    ctx = host.make_context("first", config=config(clis, api, agent, "text"), steering=True)
    out, queued = [], False
    async for r in runner.invoke(ctx):
        host.apply_result(ctx.run_id, r)
        out.append(r)
        if rtype(r) == "message.delta" and not queued:
            queued = True
            host.queue_steering(ctx, "second")
    assert rtype(terminal(out)) == "run.completed", terminal(out).data
    assert len([r for r in out if rtype(r) == "message.completed"]) == 2
    agents = {r.headers.get("user-agent") for r in api.model_requests()}
    assert len(agents) == 1


@pytest.mark.parametrize("agent", AGENTS)
async def test_interrupt_mode_stops_the_running_tool_and_answers_at_once(clis, api, host, agent):
    runner = make_runner(PLUGIN, host)
    cfg = config(clis, api, agent, "toolsleep", **{"follow-up-mode": "interrupt", "permission-mode": "full-access"})
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


@pytest.mark.parametrize("agent", AGENTS)
@pytest.mark.parametrize("scenario, code", [("err401", "upstream.auth"), ("err429", "upstream.rate_limited"),
                                            ("err500", "upstream.unavailable")])
async def test_upstream_errors(clis, api, host, agent, scenario, code):
    results = await run(make_runner(PLUGIN, host), host, "hi", config=config(clis, api, agent, scenario))
    assert failure(results)[0] == code, failure(results)


@pytest.mark.parametrize("agent", AGENTS)
async def test_cancel_in_the_middle_of_a_tool_leaves_nothing(clis, api, host, agent):
    runner = make_runner(PLUGIN, host)
    ctx = host.make_context("sleep", config=config(clis, api, agent, "toolsleep",
                                                   **{"permission-mode": "full-access"}))
    gen = runner.invoke(ctx)
    async for r in gen:
        if rtype(r) == "tool.call.started":
            await asyncio.sleep(0.8)
            break
    await gen.aclose()
    assert not await children_left()
    for _ in range(100):
        if not tool_sleeps():
            break
        await asyncio.sleep(0.05)
    assert not tool_sleeps(), "the tool's sleep is gone too"


# --- permission-mode: ask ---------------------------------------------------------------------------



@pytest.mark.parametrize("agent", AGENTS)
async def test_ask_a_typed_allow_lets_the_write_run(clis, api, host, agent, tmp_path, no_parked):
    ws = tmp_path / "ws"
    cfg = config(clis, api, agent, "toolw", workspace=str(ws), **{"permission-mode": "ask"})
    runner = make_runner(PLUGIN, host)
    ctx = host.make_context("create a file", config=cfg, steering=True)
    out, asked = [], []
    async for r in runner.invoke(ctx):
        host.apply_result(ctx.run_id, r)
        out.append(r)
        if rtype(r) == "message.completed" and "wants to" in str(r.data["message"]["content"]):
            asked.append(r.data["message"]["content"])
            host.queue_steering(ctx, "allow")
    assert rtype(terminal(out)) == "run.completed", terminal(out).data
    assert asked and "created-by-tool.txt" in asked[0], asked
    assert (ws / "created-by-tool.txt").is_file()
    said = [r.data["message"]["content"] for r in out if rtype(r) == "message.completed"]
    assert "wants to" in said[0] and said[-1].endswith("The tool ran; done."), said
    assert not await children_left()


@pytest.mark.parametrize("agent", AGENTS)
async def test_ask_a_button_in_a_new_run_lets_the_write_run(clis, api, host, agent, tmp_path, no_parked):
    ws = tmp_path / "ws"
    cfg = config(clis, api, agent, "toolw", workspace=str(ws), **{"permission-mode": "ask"})
    runner = make_runner(PLUGIN, host)
    first = await run(runner, host, "create a file", config=cfg, interactions=True)
    assert rtype(terminal(first)) == "run.completed", terminal(first).data
    (req,) = host.interactions
    assert "created-by-tool.txt" in req["description"], req
    assert not (ws / "created-by-tool.txt").exists()
    second = await run(runner, host, "", config=cfg, interactions=True,
                       interaction={"interaction_id": req["interaction_id"], "action_id": "allow"})
    assert rtype(terminal(second)) == "run.completed", terminal(second).data
    assert (ws / "created-by-tool.txt").is_file()
    assert "The tool ran; done." in "".join(r.data["message"]["content"] for r in second
                                            if rtype(r) == "message.completed"
                                            and isinstance(r.data["message"]["content"], str))
    assert not await children_left()
