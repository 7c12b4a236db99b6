"""ClaudeCodeAgent against the real Claude Code CLI 2.1.197 (opt-in: RUN_SLOW=1).

The CLI comes from npm (``tests/real_peers/coding_clis.py`` installs the pinned packages into the
cache once and skips, saying why, when it cannot). The model is ``tests/fakes/model_api.py``
(Anthropic Messages) on 127.0.0.1; its scenario prefixes (``/text``, ``/tool``, ``/toolsleep``,
``/err401`` …) pick the answer, or its attributes do without a prefix. Every run goes through the
local host; after each test no process of ours may be left.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from runner_kit import process
from tests.fakes.model_api import FakeModelAPI
from tests.helpers import (
    children_left,
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
from tests.real_peers.coding_agents.conftest import tool_sleeps

pytestmark = [pytest.mark.slow, pytest.mark.real_peers, pytest.mark.timeout(600)]

PLUGIN = "claude-code-agent"
HELLO = "Hello from the fake model."


def config(clis: Any, api: FakeModelAPI, scenario: str | None, **extra: Any) -> dict[str, Any]:
    return {"executable": str(clis.claude), "base-url": api.anthropic_base_url(scenario), "api-key": api.api_key,
            "advanced-settings": True, "max-retries": 0, **extra}


async def collect(runner, host, ctx, on_first_delta=None) -> list[Any]:
    out, fired = [], False
    async for r in runner.invoke(ctx):
        host.apply_result(ctx.run_id, r)
        out.append(r)
        if on_first_delta and not fired and rtype(r) == "message.delta":
            fired = True
            on_first_delta()
    return out


async def test_text_turn_streams_the_answer(clis, api, host):
    results = await run(make_runner(PLUGIN, host), host, config=config(clis, api, "text"))
    assert rtype(terminal(results)) == "run.completed", terminal(results).data
    assert final_text(results) == HELLO and deltas(results)
    assert terminal(results).usage.completion_tokens == 7


async def test_tool_turn_runs_bash(clis, api, host):
    results = await run(make_runner(PLUGIN, host), host, config=config(clis, api, "tool"))
    assert final_text(results) == "The tool ran; done."
    started = [r.data for r in results if rtype(r) == "tool.call.started"]
    done = [r.data for r in results if rtype(r) == "tool.call.completed"]
    assert started[0]["tool_name"] == "Bash" and started[0]["parameters"]["command"] == "echo hi"
    assert done[0]["result"] == {"output": "hi"}


async def test_second_run_resumes_the_session(clis, api, host):
    runner = make_runner(PLUGIN, host)
    first = await run(runner, host, config=config(clis, api, "text"))
    stored = next(iter(state_updates(first).values()))
    second = await run(runner, host, config=config(clis, api, "text"))
    assert final_text(second) == HELLO
    reqs = api.model_requests()
    assert [r.headers.get("x-claude-code-session-id") for r in reqs] == [stored, stored]
    assert len(reqs[1].body["messages"]) > len(reqs[0].body["messages"]), "the history was resent"


async def test_follow_up_goes_to_the_same_live_process(clis, api, host, spawned):
    api.answer_tokens = ["first "] * 8 + ["turn."]
    api.token_delay = 0.05
    runner = make_runner(PLUGIN, host)
    ctx = host.make_context("first question", config=config(clis, api, None), steering=True)

    def follow_up():
        host.queue_steering(ctx, "second question")

    results = await collect(runner, host, ctx, follow_up)
    assert rtype(terminal(results)) == "run.completed", terminal(results).data
    shown = messages(results)
    assert len(shown) == 2 and shown[0].endswith("first turn.") and shown[1].endswith("first turn."), shown
    assert len(spawned) == 1, "both turns in one claude process"
    assert len(api.model_requests()) == 2


async def test_interrupt_mode_stops_the_turn_with_claudes_interrupt(clis, api, host, spawned):
    api.answer_tokens = ["working "] * 60
    api.token_delay = 0.1  # 6 s if nobody interrupts
    runner = make_runner(PLUGIN, host)
    ctx = host.make_context("long job", config=config(clis, api, None, **{"follow-up-mode": "interrupt"}),
                            steering=True)

    def follow_up():
        api.answer_tokens, api.token_delay = ["done."], 0.0
        host.queue_steering(ctx, "stop and do this")

    results = await collect(runner, host, ctx, follow_up)
    assert rtype(terminal(results)) == "run.completed", terminal(results).data
    shown = messages(results)
    assert len(shown) == 2 and shown[0].startswith("working") and shown[1] == "done.", shown
    # counted, not timed (a loaded machine starts claude slowly): the first answer was cut short
    assert shown[0].count("working") < 60, "the first turn streamed all of its 6 s"
    assert len(spawned) == 1, "the session went on in the same process"


@pytest.mark.parametrize(("scenario", "code"), [("err401", "upstream.auth"), ("err429", "upstream.rate_limited"),
                                                ("err500", "upstream.unavailable")])
async def test_upstream_errors(clis, api, host, scenario, code):
    started = time.monotonic()
    results = await run(make_runner(PLUGIN, host), host, config=config(clis, api, scenario))
    got, _, message = failure(results)
    assert got == code, message
    assert len(api.model_requests()) == 1, "max-retries 0: claude did not retry"
    assert time.monotonic() - started < 30, "not claude's own retries with back-off (minutes)"
    assert api.api_key not in message


async def test_cancel_during_a_tool_leaves_nothing(clis, api, host):
    cfg = config(clis, api, "toolsleep", **{"permission-mode": "full-access"})
    ctx = host.make_context("sleep", config=cfg)
    gen = make_runner(PLUGIN, host).invoke(ctx)
    async for r in gen:
        if rtype(r) == "tool.call.started":
            break
    for _ in range(100):  # the tool's shell starts the sleep a moment after the tool call
        if tool_sleeps():
            break
        await asyncio.sleep(0.1)
    assert tool_sleeps(), "the tool's sleep was running"
    await gen.aclose()
    assert not await children_left()
    assert not tool_sleeps()


# --- permission-mode: ask (can_use_tool over the stream-json control channel) -----------------------


async def _drive(runner, host, ctx, replies=()):
    """Run ``ctx``; each time a question reaches the chat the next of ``replies`` is typed."""
    replies, out = list(replies), []
    async for r in runner.invoke(ctx):
        host.apply_result(ctx.run_id, r)
        out.append(r)
        content = r.data.get("message", {}).get("content") if rtype(r) == "message.completed" else None
        if replies and isinstance(content, str) and "wants to" in content:
            host.queue_steering(ctx, replies.pop(0))
    return out


async def test_ask_mode_a_typed_allow_runs_the_command(clis, api, host, tmp_path):
    from runner_kit import approvals as ap

    api.tool_command = "touch made.txt"
    ws = tmp_path / "ws"
    cfg = config(clis, api, None, workspace=str(ws), **{"permission-mode": "ask"})
    try:
        out = await _drive(make_runner(PLUGIN, host), host, host.make_context("make a file", steering=True, config=cfg),
                           ["allow"])
    finally:
        await ap.close_all()
    assert rtype(terminal(out)) == "run.completed", terminal(out).data
    asked = [m for m in messages(out) if "wants to" in m]
    assert len(asked) == 1 and "run a command: touch made.txt" in asked[0], messages(out)
    assert (ws / "made.txt").exists()
    assert HELLO in "".join(messages(out))


async def test_ask_mode_a_denial_with_a_reason_reaches_the_model(clis, api, host, tmp_path):
    from runner_kit import approvals as ap

    api.tool_command = "touch made.txt"
    ws = tmp_path / "ws"
    cfg = config(clis, api, None, workspace=str(ws), **{"permission-mode": "ask"})
    try:
        out = await _drive(make_runner(PLUGIN, host), host, host.make_context("make a file", steering=True, config=cfg),
                           ["deny: not here"])
    finally:
        await ap.close_all()
    assert rtype(terminal(out)) == "run.completed", terminal(out).data
    assert not (ws / "made.txt").exists()
    sent = json_dumps_of(api.model_requests()[-1].body)
    assert "not here" in sent


async def test_ask_mode_a_button_in_a_new_run_finishes_the_turn(clis, api, host, tmp_path, spawned):
    from runner_kit import approvals as ap

    api.tool_command = "touch made.txt"
    ws = tmp_path / "ws"
    cfg = config(clis, api, None, workspace=str(ws), **{"permission-mode": "ask"})
    runner = make_runner(PLUGIN, host)
    try:
        out1 = await _drive(runner, host, host.make_context("make a file", interactions=True, config=cfg))
        assert rtype(terminal(out1)) == "run.completed", terminal(out1).data
        (req,) = host.interactions
        assert "touch made.txt" in req["description"]
        assert process.alive(spawned[0]) and not (ws / "made.txt").exists()
        out2 = await _drive(runner, host, host.make_context(
            "", interactions=True, config=cfg,
            interaction={"interaction_id": req["interaction_id"], "action_id": "allow"}))
    finally:
        await ap.close_all()
    assert rtype(terminal(out2)) == "run.completed", terminal(out2).data
    assert (ws / "made.txt").exists()
    assert HELLO in "".join(messages(out2))
    assert not process.alive(spawned[0])


def json_dumps_of(obj: Any) -> str:
    import json

    return json.dumps(obj, ensure_ascii=False)
