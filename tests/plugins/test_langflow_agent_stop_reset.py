"""LangflowAgent when LangBot stops a run, when someone resets the conversation, and when Langflow
is silent (issue 33 items 14/15).

Langflow 1.13.0 (the langflow-base 1.13.0 wheel from PyPI, as installed in the real-peer venv):

- stop: ``langflow/api/v1/endpoints.py`` ``simplified_run_flow`` has no cancel route for ``/run``
  (only UI builds have ``/api/v1/build/{job_id}/cancel``); its stream's ``on_disconnect`` cancels
  the flow's task when the client goes away.
- reset: ``langflow/api/v1/monitor.py`` ``delete_messages_session`` —
  ``DELETE /api/v1/monitor/messages/session/{session_id}``, any authenticated user (``x-api-key``),
  deletes that one session's messages in the caller's own flows (``crud.delete_messages_for_user_by_session``)
  and answers 204, also when there were none. Those messages are the flow's chat memory.
- silence: ``consume_and_yield`` only waits on the run's event queue; nothing is sent between events.
"""

from __future__ import annotations

import logging
import time

import pytest

from runner_kit.errors import Redactor
from runner_kit.runner import RunEnv
from runners_cli.host import Identity
from tests.fakes.langflow import FakeLangflow
from tests.helpers import failure, final_text, make_runner, rtype, run, state_updates

PLUGIN = "langflow-agent"
KEY = "sk-langflow-reset-test-key"


@pytest.fixture
def srv():
    with FakeLangflow(api_key=KEY) as s:
        yield s
    assert s.handler_errors == []


def cfg(srv, **extra):
    return {"base-url": srv.base_url, "api-key": KEY, "flow-id": srv.flow_id, **extra}


def fresh(name):
    """A conversation of this test only (the kit remembers sessions per process)."""
    return Identity(conversation_id=f"{name}-{time.monotonic_ns()}")


# -- reset -------------------------------------------------------------------------------------------------


async def test_a_reset_deletes_the_old_sessions_messages_and_the_next_turn_starts_fresh(srv, host, runner):
    srv.mode, srv.echo_memory = "plain", True
    ident = fresh("reset")
    first = await run(runner, host, "a", config=cfg(srv), identity=ident)
    (old,) = state_updates(first).values()
    assert final_text(await run(runner, host, "b", config=cfg(srv), identity=ident)) == "I remember 1 earlier turns."
    host.reset_conversation(ident)  # LangBot's reset: state gone, a new generation
    after = await run(runner, host, "c", config=cfg(srv), identity=ident)
    assert final_text(after) == "I remember 0 earlier turns."
    (new,) = state_updates(after).values()
    assert new != old and srv.runs[-1].session_id == new
    assert srv.deleted_sessions == [old] and old not in srv.sessions
    (req,) = srv.find_requests("DELETE")
    assert req.path == f"/api/v1/monitor/messages/session/{old}" and req.headers["x-api-key"] == KEY


async def test_a_reset_with_explicit_generations_deletes_exactly_the_stored_session(srv, host, runner):
    """As LangBot seeds it: turn 1 in generation gen-1 stores the session; turn 2's conversation
    state is only ``{"external.conversation_id": "gen-2"}``."""
    ident = fresh("gens")
    key = host.scope_key(ident, "conversation")
    host.store.set(key, "external.conversation_id", "gen-1")
    first = await run(runner, host, "one", config=cfg(srv), identity=ident)
    (old,) = state_updates(first).values()
    host.store.reset(key)
    host.store.set(key, "external.conversation_id", "gen-2")
    second = await run(runner, host, "two", config=cfg(srv), identity=ident)
    assert rtype(second[-1]) == "run.completed"
    assert srv.deleted_sessions == [old]
    assert srv.runs[1].session_id not in (old, srv.flow_id)


async def test_in_a_group_a_reset_deletes_each_members_own_session_only_when_that_member_comes_back(srv, host,
                                                                                                     runner):
    conv = f"group-{time.monotonic_ns()}"
    alice, bob = Identity(conversation_id=conv, actor_id="alice"), Identity(conversation_id=conv, actor_id="bob")
    a1 = await run(runner, host, "hi", config=cfg(srv), identity=alice)
    b1 = await run(runner, host, "hi", config=cfg(srv), identity=bob)
    (a_old,), (b_old,) = state_updates(a1).values(), state_updates(b1).values()
    host.reset_conversation(alice)
    await run(runner, host, "again", config=cfg(srv), identity=alice)
    assert srv.deleted_sessions == [a_old], "only the member who came back"
    await run(runner, host, "again", config=cfg(srv), identity=bob)
    assert srv.deleted_sessions == [a_old, b_old]


async def test_a_failed_reset_delete_is_logged_and_the_answer_stands(srv, host, runner, caplog):
    caplog.set_level(logging.INFO)
    ident = fresh("fail")
    await run(runner, host, "a", config=cfg(srv), identity=ident)
    host.reset_conversation(ident)
    srv.delete_fault = 500
    results = await run(runner, host, "b", config=cfg(srv), identity=ident)
    assert rtype(results[-1]) == "run.completed" and final_text(results) == "Hello from the fake model."
    said = [r.getMessage() for r in caplog.records if "was not ended" in r.getMessage()]
    assert len(said) == 1 and "upstream.unavailable" in said[0] and KEY not in said[0]
    assert srv.deleted_sessions == [], "refused: the old messages stay"


async def test_end_conversation_touches_only_a_session_this_plugin_minted(srv, host):
    """Never the flow id (``session_id`` omitted means the flow id: every caller's shared memory),
    nor anything else that is not a ``langbot-`` id."""
    runner_cls = type(make_runner(PLUGIN, host))
    ctx = host.make_context("x", config=cfg(srv))
    adapter = runner_cls.adapter(RunEnv(ctx, runner_cls.schema.load(ctx.config), Redactor(), "langflow.session_id"))
    for other in (srv.flow_id, "someone-else", "", None, 42, "../langbot-x"):
        await adapter.end_conversation(other)
    assert not srv.find_requests("DELETE")
    await adapter.end_conversation("langbot-0123abcd")
    assert srv.deleted_sessions == ["langbot-0123abcd"]


# -- stop and silence ------------------------------------------------------------------------------------


async def test_stop_closes_the_stream_and_langflow_cancels_the_flow(srv, host, runner):
    srv.answer_tokens = ["a "] * 50
    srv.token_delay = 0.05
    gen = runner.invoke(host.make_context("hi", config=cfg(srv)))
    async for r in gen:
        if rtype(r) == "message.delta":
            break
    await gen.aclose()
    assert await srv.wait_until_async(lambda: srv.runs[0].cancelled, 3)
    assert not srv.find_requests("DELETE") and not srv.find_requests("POST", "/api/v1/build"), "no other call"


async def test_a_silent_langflow_is_only_ended_by_the_idle_timeout_when_one_is_set(srv, host, runner):
    srv.fault = "stall"  # the first token, then nothing at all
    results = await run(runner, host, config=cfg(srv, **{"advanced-settings": True, "idle-timeout": 0.5}),
                        deadline_at=time.time() + 10)
    code, retryable, message = failure(results)
    assert (code, retryable) == ("upstream.timeout", True) and "sent nothing for 0.5 s" in message
    assert await srv.wait_until_async(lambda: srv.runs[0].cancelled, 3)

