"""DifyAgent and the ends of a conversation (issue 33 items 14, 15): a LangBot reset deletes the Dify
conversation it left behind, as the Dify user it belongs to; Dify's keep-alive pings keep a slow
answer alive under the default idle timeout, and a Dify that sends nothing at all is given up on
by it."""

from __future__ import annotations

import asyncio
import dataclasses
import time

import pytest

from runners_cli.host import Identity
from tests.helpers import failure, final_text, rtype, run, state_updates, stored_key, terminal
from tests.plugins.test_dify import KEY, SESSION, cfg, dify_fake  # noqa: F401 - dify_fake: the srv fixture, as test_dify has it

PLUGIN = "dify-agent"  # tests/plugins/conftest.py: the host and runner fixtures
ALICE = Identity(actor_id="alice", actor_name="Alice")
BOB = Identity(actor_id="bob", actor_name="Bob")
# Dify publishes a ping every 10 s of a stream (langgenius/dify @cd03e0a9 (1.12.1)
# api/core/app/apps/base_app_queue_manager.py AppQueueManager.listen: QueuePingEvent whenever
# elapsed_time // 10 grows, sent as "event: ping")
PING_INTERVAL = 10.0
SCALE = 0.02  # the default idle timeout and Dify's ping interval, both scaled to milliseconds


def chat_ids(srv):
    return [r.json()["conversation_id"] for r in srv.find_requests("POST", "/v1/chat-messages")]


async def deleted(srv, n, wait=2.0):
    """The conversations deleted so far, once ``n`` are (the end call comes after the run)."""
    await srv.wait_until_async(lambda: len(srv.deleted) >= n, timeout=wait)
    return list(srv.deleted)


# --- reset ------------------------------------------------------------------------------------------


async def test_a_reset_deletes_the_old_dify_conversation_and_the_next_message_starts_a_new_one(srv, host, runner):
    first = await run(runner, host, "my name is Ada", config=cfg(srv))
    old = state_updates(first)[SESSION]
    await run(runner, host, "still there?", config=cfg(srv))
    assert srv.deleted == [], "no reset, nothing deleted"
    host.reset_conversation()
    second = await run(runner, host, "who am I?", config=cfg(srv))
    assert rtype(terminal(second)) == "run.completed"
    assert final_text(second) == "Hello, world!", "the reply says nothing about the deletion"
    assert await deleted(srv, 1) == [(old, "user_u-1")], "deleted as the Dify user it belongs to"
    new = state_updates(second)[SESSION]
    assert chat_ids(srv) == ["", old, ""] and new != old
    assert old not in srv.conversations and new in srv.conversations
    delete = srv.find_requests("DELETE")[0]
    assert delete.path == f"/v1/conversations/{old}" and delete.headers["authorization"] == f"Bearer {KEY}"
    await run(runner, host, "and now?", config=cfg(srv))
    await asyncio.sleep(0.05)
    assert len(srv.deleted) == 1, "deleted once"


async def test_in_a_group_each_members_old_conversation_is_deleted_as_that_member(srv, host, runner):
    """Per-person sessions (the sender): one member's reset resets the LangBot conversation for
    everyone; each member's old Dify conversation is deleted when that member next writes, with that
    member's Dify user (Dify before 1.8 refuses another user's delete with 404)."""
    srv.delete_checks_user = True
    a = state_updates(await run(runner, host, "hi", identity=ALICE, config=cfg(srv)))[stored_key("dify.conversation_id", ALICE)]
    b = state_updates(await run(runner, host, "hi", identity=BOB, config=cfg(srv)))[stored_key("dify.conversation_id", BOB)]
    host.reset_conversation(ALICE)
    await run(runner, host, "again", identity=ALICE, config=cfg(srv))
    assert await deleted(srv, 1) == [(a, "user_alice")]
    assert b in srv.conversations, "Bob's conversation is his to end"
    await run(runner, host, "me too", identity=BOB, config=cfg(srv))
    assert await deleted(srv, 2) == [(a, "user_alice"), (b, "user_bob")]


async def test_a_shared_conversation_is_deleted_once_by_whoever_writes_first(srv, host, runner):
    shared = cfg(srv, **{"user-id-source": "conversation"})
    first = await run(runner, host, "hi", identity=ALICE, config=shared)
    old = state_updates(first)[stored_key("dify.conversation_id", source="conversation")]
    await run(runner, host, "hi", identity=BOB, config=shared)
    host.reset_conversation(BOB)
    await run(runner, host, "after", identity=BOB, config=shared)
    await run(runner, host, "after too", identity=ALICE, config=shared)
    assert await deleted(srv, 1) == [(old, "conversation_conv-1")]
    await asyncio.sleep(0.05)
    assert len(srv.deleted) == 1


async def test_a_conversation_dify_no_longer_has_is_left_at_that(srv, host, runner):
    """Dify before 1.8 answers 404 "Conversation Not Exists." for a conversation already gone; the
    next message is answered as usual and nothing about it reaches the chat."""
    srv.delete_checks_user = True
    await run(runner, host, "one", config=cfg(srv))
    srv.forget_conversations()
    host.reset_conversation()
    second = await run(runner, host, "two", config=cfg(srv))
    assert final_text(second) == "Hello, world!", "no notice: the reset already started a new conversation"
    await srv.wait_until_async(lambda: bool(srv.find_requests("DELETE")), timeout=2)
    assert srv.find_requests("DELETE")[0].json() == {"user": "user_u-1"}
    assert srv.deleted == []


async def test_a_workflow_app_keeps_no_conversation_to_delete(srv, host, runner):
    srv.mode = "workflow"
    await run(runner, host, "one", config=cfg(srv, **{"app-type": "workflow"}))
    host.reset_conversation()
    await run(runner, host, "two", config=cfg(srv, **{"app-type": "workflow"}))
    await asyncio.sleep(0.1)
    assert srv.find_requests("DELETE") == []


# --- liveness ---------------------------------------------------------------------------------------


@pytest.fixture
def scaled_default(runner, monkeypatch):
    """The runner's own idle-timeout default, scaled like the fake's ping interval, applied the way
    a binding without advanced settings gets it."""
    fields = type(runner).schema.fields
    field = fields["idle-timeout"]
    monkeypatch.setitem(fields, "idle-timeout", dataclasses.replace(field, default=field.default * SCALE))
    return field.default


def test_the_default_idle_timeout_outlasts_two_missed_pings(runner):
    default = type(runner).schema.fields["idle-timeout"].default
    assert default >= 3 * PING_INTERVAL and default < 120, "catches a dead stream long before the deadline"


async def test_a_slow_answer_with_pings_outlives_the_default_idle_timeout(srv, host, runner, scaled_default):
    srv.fault = "stall_pings"  # silent but for Dify's pings, for longer than the idle timeout
    srv.stall_seconds = 3 * scaled_default * SCALE
    srv.stall_ping_every = PING_INTERVAL * SCALE
    results = await run(runner, host, config=cfg(srv))
    assert rtype(terminal(results)) == "run.completed"
    assert final_text(results) == "Hello, world!"


async def test_a_dify_that_sends_nothing_is_given_up_on_by_the_default_idle_timeout(srv, host, runner, scaled_default):
    srv.fault = "stall"  # not even a ping
    srv.stall_seconds = 30
    started = time.monotonic()
    results = await run(runner, host, config=cfg(srv))
    took = time.monotonic() - started
    code, retryable, message = failure(results)
    assert (code, retryable) == ("upstream.timeout", True)
    assert f"{scaled_default * SCALE:g} s" in message and "nothing" in message, message
    assert took < 5, "ended by the idle timeout, not the run's time limit"
    assert final_text(results).startswith("Hello"), "what was streamed is kept, with a note"
