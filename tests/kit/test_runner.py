"""The driver's guarantees, with scripted adapters (no network)."""

from __future__ import annotations

import asyncio
import time

import pytest

from runner_kit import events as ev
from runner_kit.config import ConfigSchema
from runner_kit.errors import RunnerError, SessionMissing
from runner_kit.runner import Adapter, deadline_margin
from runners_cli.host import Identity
from tests.helpers import (
    deltas,
    failure,
    final_text,
    rtype,
    run,
    scripted_runner,
    sleep_step,
    state_updates,
    stored_key,
    terminal,
)

SCHEMA = ConfigSchema.from_items(
    [
        {"name": "api-key", "type": "secret", "default": "sk-scripted-secret-1"},
        {"name": "timeout", "type": "float", "default": 60},
        {"name": "remove-think", "type": "boolean", "default": False},
    ]
)


class Scripted(Adapter):
    """Yields what the test put in ``script``; callables are awaited (for delays / raises)."""

    platform = "Scripted"
    session_key = "scripted.session"
    script: list = []
    cancelled: list = []
    attempts: list = []

    async def stream(self):
        type(self).attempts.append(self.env.session.current)
        for step in type(self).script:
            if callable(step):
                result = await step(self)
                if result is not None:
                    yield result
            else:
                yield step

    async def cancel(self):
        type(self).cancelled.append(True)


KEY = stored_key("scripted.session")  # per upstream user under the default user-id-source (actor)


def make(script):
    return scripted_runner(Scripted, SCHEMA, script=script, cancelled=[], attempts=[])


sleep = sleep_step


def boom(exc):
    async def step(_):
        raise exc

    return step


async def test_happy_path_with_session_and_usage():
    r, host, _ = make([ev.SessionId("s1"), ev.Text("hel"), ev.Text("lo"), ev.Usage(3, 4)])
    results = await run(r, host)
    assert final_text(results) == "hello"
    assert state_updates(results) == {KEY: "s1"}
    end = terminal(results)
    assert end.usage.model_dump() == {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}


async def test_partial_usage_rides_on_failure():
    r, host, _ = make([ev.Usage(5, None, 5), ev.Text("half"), boom(RunnerError("upstream.unavailable", "dropped"))])
    results = await run(r, host)
    code, retryable, _ = failure(results)
    assert code == "upstream.unavailable" and retryable
    assert terminal(results).usage.total_tokens == 5


async def test_unexpected_exception_becomes_internal_failure_without_secret():
    r, host, _ = make([boom(ValueError("bad thing with sk-scripted-secret-1"))])
    code, retryable, message = failure(await run(r, host))
    assert code == "runner.internal" and not retryable
    assert "sk-scripted-secret-1" not in message and "bad thing" in message


async def test_empty_answer_is_a_failure():
    r, host, _ = make([ev.Usage(1, 1)])
    assert failure(await run(r, host))[0] == "upstream.empty_response"


async def test_missing_session_retried_once_on_fresh_session():
    calls = []

    async def first_missing(adapter):
        calls.append(adapter.env.session.current)
        if len(calls) == 1:
            raise SessionMissing()

    r, host, cls = make([first_missing, ev.SessionId("fresh"), ev.Text("ok")])
    host.store.set(host.scope_key(Identity(), "conversation"), KEY, "stale")
    results = await run(r, host)
    assert final_text(results) == "(The previous conversation could not be continued, so this reply starts a new one.)\n\nok"
    assert calls == ["stale", None]
    assert state_updates(results) == {KEY: "fresh"}


async def test_missing_session_twice_fails_not_found():
    r, host, _ = make([boom(SessionMissing())])
    assert failure(await run(r, host))[0] == "upstream.not_found"


async def test_deadline_gives_retryable_timeout_before_host_deadline():
    r, host, _ = make([ev.Text("partial"), sleep(30)])
    deadline = time.time() + 1.0
    results = await run(r, host, deadline_at=deadline)
    code, retryable, _ = failure(results)
    assert (code, retryable) == ("upstream.timeout", True)
    assert time.time() < deadline
    assert deltas(results) == ["partial"], "text streamed before the timeout was delivered"


def test_margin_scales_with_deadline():
    assert deadline_margin(30) == 1.5 and deadline_margin(3) == 0.25 and deadline_margin(600) == 2.0


async def test_slow_text_is_flushed_by_timer_not_held_until_next_event():
    r, host, _ = make([ev.Text("a" * 10), ev.Text("b"), sleep(1.2), ev.Text("c")])
    ctx = host.make_context("x", config={"advanced-settings": True})
    seen = []
    start = time.monotonic()
    async for res in r.invoke(ctx):
        if rtype(res) == "message.delta":
            seen.append((round(time.monotonic() - start, 1), res.data["chunk"]["all_content"]))
    texts = [t for _, t in seen]
    assert "a" * 10 + "b" in texts, seen
    flushed_at = next(t for t, s in seen if s == "a" * 10 + "b")
    assert flushed_at < 1.0, "pending text goes out after max_delay, not when the next event comes"


async def test_host_cancel_calls_adapter_cancel_and_leaves_no_task():
    r, host, cls = make([ev.Text("start"), sleep(30)])
    gen = r.invoke(host.make_context("x"))
    async for res in gen:
        if rtype(res) == "message.delta":
            break
    await gen.aclose()
    await asyncio.sleep(0)
    assert cls.cancelled == [True]
    assert not [t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()]


async def test_task_cancellation_propagates_and_cleans_up():
    r, host, cls = make([ev.Text("start"), sleep(30)])

    async def consume():
        async for _ in r.invoke(host.make_context("x")):
            pass

    task = asyncio.create_task(consume())
    await asyncio.sleep(0.2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cls.cancelled == [True]


async def test_tool_events_and_think():
    r, host, _ = make([ev.Think("hmm"), ev.ToolStarted("c1", "search", {"q": 1}),
                       ev.ToolCompleted("c1", "search", "found"), ev.Text("done")])
    results = await run(r, host)
    types = [rtype(x) for x in results]
    assert types.index("tool.call.started") < types.index("tool.call.completed")
    done = [x for x in results if rtype(x) == "tool.call.completed"][0]
    assert done.data["result"] == {"output": "found"}
    assert final_text(results) == "<think>\nhmm\n</think>\ndone"


async def test_every_result_validates_as_the_host_does():
    """The host validates each known payload with the SDK model; an invalid one would be dropped."""
    from langbot_plugin.api.entities.builtin.runner import result as rmod

    models = {"message.delta": rmod.MessageDeltaPayload, "message.completed": rmod.MessageCompletedPayload,
              "run.completed": rmod.RunCompletedPayload, "run.failed": rmod.RunFailedPayload,
              "tool.call.started": rmod.ToolCallStartedPayload, "tool.call.completed": rmod.ToolCallCompletedPayload,
              "state.updated": rmod.StateUpdatedPayload}
    r, host, _ = make([ev.SessionId("s"), ev.Think("t"), ev.ToolStarted("c", "n", {}), ev.ToolCompleted("c", "n", 1),
                       ev.Text("x" * 50), ev.Text("y" * 50), ev.Usage(1, 2)])
    for res in await run(r, host):
        payload = res.model_dump(mode="json")
        models[payload["type"]].model_validate(payload["data"])


async def test_stored_session_kept_when_the_fresh_retry_also_fails():
    """If a fresh conversation fails the same way, the stored one was not the problem: keep it."""
    r, host, _ = make([boom(SessionMissing())])
    host.store.set(host.scope_key(Identity(), "conversation"), KEY, "stale")
    results = await run(r, host)
    assert failure(results)[0] == "upstream.not_found"
    assert state_updates(results) == {}
    assert host.make_context("next").state.conversation[KEY] == "stale"


async def test_stored_session_kept_when_the_fresh_retry_fails_otherwise():
    async def missing_then_down(adapter):
        if adapter.env.session.current:
            raise SessionMissing()
        raise RunnerError("upstream.unavailable", "HTTP 502")

    r, host, _ = make([missing_then_down])
    host.store.set(host.scope_key(Identity(), "conversation"), KEY, "old")
    results = await run(r, host)
    assert failure(results)[0] == "upstream.unavailable"
    assert state_updates(results) == {}
    assert host.make_context("next").state.conversation[KEY] == "old"


async def test_no_reply_completes_quietly_but_failures_still_fail():
    r, host, _ = make([ev.SessionId("s9"), ev.Usage(2, 3), ev.NoReply()])
    results = await run(r, host)
    end = terminal(results)
    assert rtype(end) == "run.completed" and end.data.get("message") is None
    assert not [x for x in results if rtype(x) in ("message.completed", "message.delta")]
    assert state_updates(results) == {KEY: "s9"} and end.usage.total_tokens == 5

    r, host, _ = make([ev.NoReply(), boom(RunnerError("upstream.error", "the workflow failed"))])
    assert failure(await run(r, host))[0] == "upstream.error"


async def test_meta_rides_on_the_complete_message_not_in_the_chat_text():
    r, host, _ = make([ev.Meta("run_id", "r-42"), ev.Text("answer")])
    results = await run(r, host)
    assert final_text(results) == "answer"
    (done,) = [x for x in results if x.type == "message.completed"]
    assert done.data["message"]["provider_specific_fields"] == {"run_id": "r-42"}
    r, host, _ = make([ev.Text("plain")])
    (done,) = [x for x in await run(r, host) if x.type == "message.completed"]
    assert "provider_specific_fields" not in done.data["message"] or not done.data["message"]["provider_specific_fields"]


# --- a delta for every token when the policy asks for it --------------------------------------------------

EVERY_TOKEN = ConfigSchema.from_items(
    [
        {"name": "api-key", "type": "secret", "default": "sk-scripted-secret-1"},
        {"name": "stream-growth", "type": "float", "default": 0.001},  # a delta for every token
        {"name": "stream-min-chars", "type": "integer", "default": 1},
    ]
)
TOKENS = [f"t{i} " for i in range(60)]


def every_token(script):
    return scripted_runner(Scripted, EVERY_TOKEN, script=script, cancelled=[], attempts=[])


async def test_a_loop_that_keeps_up_gets_every_delta():
    script = [s for t in TOKENS for s in (ev.Text(t), sleep(0))]  # the reader yields between tokens
    r, host, _ = every_token(script)
    results = await run(r, host)
    assert deltas(results) == ["".join(TOKENS[: i + 1]) for i in range(len(TOKENS))]
    assert final_text(results) == "".join(TOKENS)

