"""CozeAgent: a chat that ends in ``conversation.chat.requires_action`` asks the chat, and the
answer (a button click in a new run, or a typed reply in the next message) goes to
``POST /v3/chat/submit_tool_outputs``, whose stream is the rest of the answer."""

from __future__ import annotations

import asyncio

import pytest

from runners_cli.host import Identity
from tests.fakes.coze import FakeCoze
from tests.helpers import failure, final_text, rtype, run, state_updates, terminal

PLUGIN = "coze-agent"  # tests/plugins/conftest.py: the host and runner fixtures
KEY = "pat_coze_test_token_123456"
BOT = "7400000000000000123"
PENDING = "coze.pending-action"


@pytest.fixture
def srv():
    with FakeCoze(api_key=KEY, bot_id=BOT) as s:
        s.requires_action = True
        s.resume_tokens = ["It is ", "14:05 ", "in Berlin."]
        yield s
    assert s.handler_errors == []


def cfg(srv, **extra):
    return {"api-base": srv.base_url, "api-key": KEY, "bot-id": BOT, **extra}


def pending(results):
    """The question record a run stored (under its session's key: runner_kit.pending)."""
    return next((v for k, v in state_updates(results).items() if k.startswith(PENDING)), None)


def touched(results) -> bool:
    return any(k.startswith(PENDING) for k in state_updates(results))


async def test_buttons_then_click_streams_the_rest(srv, host, runner):
    srv.action_calls = [{"name": "pick_city", "arguments": {"question": "Which city?",
                                                            "options": ["Berlin", "Paris"]}}]
    r1 = await run(runner, host, "what time is it?", config=cfg(srv), interactions=True)
    assert rtype(terminal(r1)) == "run.completed"
    record = pending(r1)
    assert record and record["chat_id"] in srv.chats and record["tool_calls"]
    req = host.interactions[-1]
    assert req["interaction_id"] == record["id"] and req["kind"] == "choice"
    assert [a["label"] for a in req["actions"]] == ["Berlin", "Paris"] and "Which city?" in req["description"]
    assert srv.tool_outputs == []

    r2 = await run(runner, host, "submitted", config=cfg(srv), interactions=True,
                   interaction={"interaction_id": record["id"], "action_id": "opt-1", "values": {}})
    assert rtype(terminal(r2)) == "run.completed"
    assert final_text(r2) == "It is 14:05 in Berlin."
    assert srv.tool_outputs == [{"tool_call_id": record["tool_calls"][0], "output": "Paris"}]
    assert (pending(r2) or {}).get("id") is None and touched(r2)  # cleared
    # the call went to the chat that paused
    assert srv.chats[record["chat_id"]].status == "completed"


async def test_field_for_a_function_without_choices(srv, host, runner):
    r1 = await run(runner, host, "what time is it?", config=cfg(srv), interactions=True)
    req = host.interactions[-1]
    assert req["kind"] == "form" and req["fields"][0]["id"] == "answer"
    assert "get_local_time" in req["description"] and "Europe/Berlin" in req["description"]
    record = pending(r1)
    r2 = await run(runner, host, "submitted", config=cfg(srv), interactions=True,
                   interaction={"interaction_id": record["id"], "values": {"answer": "14:05"}})
    assert final_text(r2) == "It is 14:05 in Berlin."
    assert srv.tool_outputs[0]["output"] == "14:05"


async def test_typed_answer_without_interactions(srv, host, runner):
    r1 = await run(runner, host, "what time is it?", config=cfg(srv))
    text = final_text(r1)
    assert "Coze asks" in text and "get_local_time" in text and "Reply with your answer" in text
    assert host.interactions == []
    r2 = await run(runner, host, "14:05", config=cfg(srv))
    assert final_text(r2) == "It is 14:05 in Berlin."
    assert srv.tool_outputs[0]["output"] == "14:05"
    assert len(srv.chat_requests()) == 1  # the answer went to submit_tool_outputs, not a new chat


async def test_typed_option_number(srv, host, runner):
    srv.action_calls = [{"name": "pick_city", "arguments": {"options": ["Berlin", "Paris"]}}]
    r1 = await run(runner, host, "time?", config=cfg(srv))
    assert "1. Berlin" in final_text(r1)
    r2 = await run(runner, host, "1", config=cfg(srv))
    assert final_text(r2) == "It is 14:05 in Berlin." and srv.tool_outputs[0]["output"] == "Berlin"


async def test_non_answer_message_while_pending_goes_on(srv, host, runner):
    srv.action_calls = [{"name": "pick_city", "arguments": {"options": ["Berlin", "Paris"]}}]
    await run(runner, host, "time?", config=cfg(srv))
    srv.requires_action = False
    r2 = await run(runner, host, "never mind, tell me a joke", config=cfg(srv))
    text = final_text(r2)
    assert "left unanswered" in text and text.endswith("Hello, world!")
    assert srv.tool_outputs == [] and len(srv.chat_requests()) == 2
    assert touched(r2) and (pending(r2) or {}).get("id") is None


async def test_click_for_unknown_id_is_one_line(srv, host, runner):
    r = await run(runner, host, "submitted", config=cfg(srv), interactions=True,
                  interaction={"interaction_id": "ask-nope", "action_id": "opt-0", "values": {}})
    assert rtype(terminal(r)) == "run.completed"
    assert final_text(r) == "(That Coze bot's question is no longer waiting for an answer. Send your message again.)"
    assert srv.chat_requests() == [] and srv.tool_outputs == []


async def test_click_after_expiry_is_one_line(srv, host, runner):
    r1 = await run(runner, host, "time?", config=cfg(srv, **{"advanced-settings": True, "approval-timeout": 0.05}),
                   interactions=True)
    record = pending(r1)
    await asyncio.sleep(0.1)
    r2 = await run(runner, host, "submitted", config=cfg(srv), interactions=True,
                   interaction={"interaction_id": record["id"], "values": {"answer": "x"}})
    assert final_text(r2).startswith("(The Coze bot's question “") and "expired before it was answered" in final_text(r2)
    assert srv.tool_outputs == [] and (pending(r2) or {}).get("id") is None


async def test_typed_message_after_expiry_is_sent_as_usual(srv, host, runner):
    await run(runner, host, "time?", config=cfg(srv, **{"advanced-settings": True, "approval-timeout": 0.05}))
    await asyncio.sleep(0.1)
    srv.requires_action = False
    r2 = await run(runner, host, "hello again", config=cfg(srv))
    text = final_text(r2)
    assert "expired before it was answered; your message was sent as a new one" in text
    assert text.endswith("Hello, world!") and srv.tool_outputs == [] and len(srv.chat_requests()) == 2


async def test_submit_refused_is_a_clear_failure(srv, host, runner):
    r1 = await run(runner, host, "time?", config=cfg(srv), interactions=True)
    record = pending(r1)
    srv.expire_actions()  # Coze dropped the paused chat meanwhile
    r2 = await run(runner, host, "submitted", config=cfg(srv), interactions=True,
                   interaction={"interaction_id": record["id"], "values": {"answer": "14:05"}})
    code, _, message = failure(r2)
    assert code in ("upstream.bad_request", "upstream.error")
    assert "did not take the answer" in message and "expired" in message


async def test_submit_unknown_chat_is_a_clear_failure(srv, host, runner):
    r1 = await run(runner, host, "time?", config=cfg(srv), interactions=True)
    record = pending(r1)
    srv.chats.clear()
    r2 = await run(runner, host, "submitted", config=cfg(srv), interactions=True,
                   interaction={"interaction_id": record["id"], "values": {"answer": "14:05"}})
    code, _, message = failure(r2)
    assert "did not take the answer" in message and "4001" in message and code.startswith("upstream.")


async def test_in_own_sessions_someone_else_talks_in_their_own_conversation(srv, host, runner):
    # user-id-source actor (the default): Alice's question is in Alice's Coze conversation only
    alice, bob = Identity(actor_id="alice", actor_name="Alice"), Identity(actor_id="bob", actor_name="Bob")
    r1 = await run(runner, host, "time?", config=cfg(srv), identity=alice)
    srv.requires_action = False
    r2 = await run(runner, host, "13:00", config=cfg(srv), identity=bob)
    assert final_text(r2) == "Hello, world!" and srv.tool_outputs == []
    assert srv.chat_requests()[-1].json()["user_id"] == "user_bob"
    assert srv.chat_requests()[-1].query.get("conversation_id") != pending(r1)["conversation_id"]
    r3 = await run(runner, host, "14:05", config=cfg(srv), identity=alice)
    assert final_text(r3) == "It is 14:05 in Berlin."


async def test_an_approver_may_answer_for_the_asker(srv, host, runner):
    alice, bob = Identity(actor_id="alice", actor_name="Alice"), Identity(actor_id="bob", actor_name="Bob")
    conf = cfg(srv, **{"advanced-settings": True, "approvers": ["bob"], "user-id-source": "conversation"})
    await run(runner, host, "time?", config=conf, identity=alice)
    r2 = await run(runner, host, "14:05", config=conf, identity=bob)
    assert final_text(r2) == "It is 14:05 in Berlin." and srv.tool_outputs[0]["output"] == "14:05"


async def test_a_replayed_click_on_an_answered_question_says_so(srv, host, runner):
    r1 = await run(runner, host, "time?", config=cfg(srv), interactions=True)
    record = pending(r1)
    r2 = await run(runner, host, "14:05", config=cfg(srv), interactions=True)  # typed: the buttons stay
    assert final_text(r2) == "It is 14:05 in Berlin."
    r3 = await run(runner, host, "submitted", config=cfg(srv), interactions=True,
                   interaction={"interaction_id": record["id"], "values": {"answer": "15:00"}})
    assert final_text(r3) == "(The Coze bot's question “the result of the client-side function get_local_time” was " \
                             "already answered by Tester.)"
    assert len(srv.tool_outputs) == 1
