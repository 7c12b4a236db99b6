"""Follow-ups during a run (LangBot steering), for every runner that declares ``steering``: each
follow-up answered in the same live agent process with its own reply, ``follow-up-mode:
interrupt``, and on failure, deadline and cancel nothing the host handed over is lost silently and
no process of ours is left alive."""

from __future__ import annotations

import asyncio
import time

import pytest

from runners_cli.plugins import find
from tests.helpers import children_left, collect, failure, make_runner, messages, rtype, terminal

TOKENS = ["Hello", ", ", "this ", "is ", "the ", "answer."]
SLOW = ["working "] * 60


@pytest.fixture(autouse=True)
def _steering_only(case):
    if not find(case.plugin).capabilities.get("steering"):
        pytest.skip(f"{case.plugin} does not declare steering")


def _on_first_delta(action):
    done: list[bool] = []

    def during(r):
        if rtype(r) == "message.delta" and not done:
            done.append(True)
            action()

    return during


async def test_follow_up_is_answered_in_the_same_live_process_with_its_own_reply(case, server, host):
    case.answer(server, ["first "] * 8 + ["turn."], 0.05)
    runner = make_runner(case.plugin, host)
    ctx = host.make_context("first question", config=case.config(server), steering=True)

    def follow_up():
        host.queue_steering(ctx, "second question")
        case.answer(server, TOKENS, 0.0)

    results = await collect(runner, host, ctx, _on_first_delta(follow_up))
    assert rtype(terminal(results)) == "run.completed", terminal(results).data
    shown = messages(results)
    assert len(shown) == 2, shown
    assert shown[0].endswith("first turn.") and shown[1].endswith("".join(TOKENS))
    assert not host.steering, "the follow-up was taken"
    pids = case.agent_pids(server)
    assert len(pids) >= 2 and len(set(pids)) == 1, f"one live agent process for both turns: {pids}"
    assert not await children_left(), "no agent process survives the run"


async def test_interrupt_mode_answers_a_follow_up_at_once(case, server, host):
    case.answer(server, SLOW, 0.1)  # 6 s of answer if nobody interrupts
    runner = make_runner(case.plugin, host)
    cfg = {**case.config(server), "follow-up-mode": "interrupt"}
    ctx = host.make_context("long job", config=cfg, steering=True)

    def follow_up():
        case.answer(server, TOKENS, 0.0)
        host.queue_steering(ctx, "stop and do this")

    start = time.monotonic()
    results = await collect(runner, host, ctx, _on_first_delta(follow_up))
    assert time.monotonic() - start < 5.0, "the running turn was interrupted"
    assert rtype(terminal(results)) == "run.completed", terminal(results).data
    shown = messages(results)
    assert len(shown) == 2 and shown[1].endswith("".join(TOKENS)), shown
    assert not await children_left()


async def test_a_failed_follow_up_turn_says_what_was_not_answered(case, server, host):
    case.answer(server, ["first "] * 8, 0.05)
    runner = make_runner(case.plugin, host)
    ctx = host.make_context("first", config=case.config(server), steering=True, surface="api")

    def follow_up():
        host.queue_steering(ctx, "the follow-up that fails")
        case.set_fault(server, "http_500")

    results = await collect(runner, host, ctx, _on_first_delta(follow_up))
    code, _, _ = failure(results)
    assert code == case.faults["http_500"][0]
    shown = messages(results)
    assert shown[0].startswith("first")
    assert "the follow-up that fails" in shown[-1] and "not answered" in shown[-1], shown
    assert not await children_left()


async def test_deadline_with_a_follow_up_waiting_reports_it_and_stops_the_agent(case, server, host):
    case.stall(server, False)
    runner = make_runner(case.plugin, host)
    deadline = time.time() + 4.0 + case.startup
    ctx = host.make_context("x", config=case.config(server), steering=True, deadline_at=deadline, surface="api")
    results = await collect(runner, host, ctx, _on_first_delta(lambda: host.queue_steering(ctx, "still there?")))
    assert time.time() < deadline
    code, retryable, _ = failure(results)
    assert (code, retryable) == ("upstream.timeout", True)
    assert "still there?" in messages(results)[-1]
    assert not host.steering
    assert not await children_left()


async def test_host_cancel_mid_turn_leaves_no_process(case, server, host):
    case.answer(server, SLOW, 0.1)
    runner = make_runner(case.plugin, host)
    ctx = host.make_context("x", config=case.config(server), steering=True)
    gen = runner.invoke(ctx)
    async for r in gen:
        if rtype(r) == "message.delta":
            break
    await gen.aclose()
    assert not await children_left(), "cancel stops the agent and everything it started"
    await asyncio.sleep(0.05)
    stray = [t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()]
    assert not stray, stray
