"""CozeAgent and the ends of a conversation (issue 33 items 14, 15): a LangBot reset deletes the Coze
conversation it left behind; Coze sends nothing while a plugin or workflow runs, so the idle timeout
stays off by default and the chat is shown what the bot is waiting on instead."""

from __future__ import annotations

import asyncio

import pytest

from runners_cli.host import Identity
from tests.fakes.coze import FakeCoze
from tests.helpers import deltas, final_text, rtype, run, state_updates, stored_key, terminal

PLUGIN = "coze-agent"  # tests/plugins/conftest.py: the host and runner fixtures
KEY = "pat_coze_reset_token_0001"
OTHER_KEY = "pat_coze_other_account_0002"
BOT = "7400000000000000456"
SESSION = stored_key("coze.conversation_id")
ALICE = Identity(actor_id="alice", actor_name="Alice")
BOB = Identity(actor_id="bob", actor_name="Bob")


@pytest.fixture
def srv():
    with FakeCoze(api_key=KEY, bot_id=BOT) as s:
        yield s
    assert s.handler_errors == []


def cfg(srv, key=KEY, **extra):
    return {"api-base": srv.base_url, "api-key": key, "bot-id": BOT, **extra}


async def deletes(srv, n, wait=2.0):
    """The DELETE requests so far, once ``n`` arrived (the end call comes after the run)."""
    await srv.wait_until_async(lambda: len(srv.find_requests("DELETE")) >= n, timeout=wait)
    return srv.find_requests("DELETE")


# --- reset ------------------------------------------------------------------------------------------


async def test_a_reset_deletes_the_old_coze_conversation_and_the_next_message_starts_a_new_one(srv, host, runner):
    first = await run(runner, host, "my name is Ada", config=cfg(srv))
    old = state_updates(first)[SESSION]
    await run(runner, host, "still there?", config=cfg(srv))
    assert srv.find_requests("DELETE") == []
    host.reset_conversation()
    second = await run(runner, host, "who am I?", config=cfg(srv))
    assert rtype(terminal(second)) == "run.completed"
    assert final_text(second).startswith("Hello, world!"), "nothing about the deletion in the reply"
    (delete,) = await deletes(srv, 1)
    assert delete.path == f"/v1/conversations/{old}" and delete.headers["authorization"] == f"Bearer {KEY}"
    assert srv.deleted == [old] and old not in srv.conversations
    new = state_updates(second)[SESSION]
    assert new != old and new in srv.conversations
    assert [r.query.get("conversation_id", "") for r in srv.chat_requests()] == ["", old, ""]
    await run(runner, host, "and now?", config=cfg(srv))
    await asyncio.sleep(0.05)
    assert srv.deleted == [old], "deleted once"


async def test_in_a_group_each_members_old_conversation_is_deleted_when_that_member_writes(srv, host, runner):
    a = state_updates(await run(runner, host, "hi", identity=ALICE, config=cfg(srv)))[stored_key("coze.conversation_id", ALICE)]
    b = state_updates(await run(runner, host, "hi", identity=BOB, config=cfg(srv)))[stored_key("coze.conversation_id", BOB)]
    host.reset_conversation(BOB)
    await run(runner, host, "again", identity=BOB, config=cfg(srv))
    await deletes(srv, 1)
    assert srv.deleted == [b] and a in srv.conversations, "only the writer's own conversation"
    await run(runner, host, "me too", identity=ALICE, config=cfg(srv))
    await deletes(srv, 2)
    assert srv.deleted == [b, a]


async def test_a_conversation_coze_no_longer_has_is_left_at_that(srv, host, runner):
    await run(runner, host, "one", config=cfg(srv))
    srv.forget_conversations()
    host.reset_conversation()
    second = await run(runner, host, "two", config=cfg(srv))
    assert final_text(second).startswith("Hello, world!"), "no notice: the reset already started a new one"
    await deletes(srv, 1)
    assert srv.deleted == []


async def test_a_conversation_of_another_coze_account_is_not_deleted(srv, host, runner):
    """The binding's token was changed to another account's between the two messages: Coze answers
    "not found" for a conversation that account did not create, and it stays."""
    srv.api_keys.add(OTHER_KEY)
    old = state_updates(await run(runner, host, "one", config=cfg(srv)))[SESSION]
    host.reset_conversation()
    second = await run(runner, host, "two", config=cfg(srv, key=OTHER_KEY))
    assert rtype(terminal(second)) == "run.completed"
    (delete,) = await deletes(srv, 1)
    assert delete.headers["authorization"] == f"Bearer {OTHER_KEY}"
    assert srv.deleted == [] and old in srv.conversations


# --- liveness ---------------------------------------------------------------------------------------


def test_the_idle_timeout_is_off_by_default_because_coze_sends_no_keepalives(runner):
    """Coze Studio @4f786d6a ``backend/api/handler/coze/agent_run_service.go`` streams the chat's
    events and nothing between them, and cozepy's SSE reader takes exactly an ``event:`` and a
    ``data:`` line per event (no comments): while a plugin or workflow runs, the stream is silent."""
    assert type(runner).schema.fields["idle-timeout"].default == 0


async def test_while_a_plugin_runs_the_chat_shows_what_the_bot_waits_on(srv, host, runner):
    srv.tools = True
    srv.tool_seconds = 0.4  # silent, longer than the answer's own pace
    results = await run(runner, host, "weather in Berlin?", config=cfg(srv))
    assert rtype(terminal(results)) == "run.completed", "a slow plugin is not cut off by default"
    shown = deltas(results)
    waiting = [d for d in shown if "weather-getWeather" in d]
    assert waiting and waiting[0].startswith("⏳"), shown
    assert "Hello" not in waiting[0]
    assert "weather-getWeather" not in final_text(results), "the waiting line is not part of the answer"
    assert final_text(results).startswith("Hello, world!")
