"""CozeAgent in a group while the bot's question (``requires_action``) is open, in every
``user-id-source``: two and three members, who may answer, and what happens to everyone else's
messages. Per person (``actor``, ``hashed``) each member talks in their own Coze conversation and
never meets Alice's question; in a shared conversation (``conversation``, ``legacy-*``) nobody but
Alice (or an approver) answers it, and the others' messages are kept and sent as one new chat right
after the answer (a Coze conversation runs one chat at a time, and a question node would take the
next chat as its answer: runner_kit.pending)."""

from __future__ import annotations

import pytest

from runners_cli.host import Identity
from tests.fakes.coze import FakeCoze
from tests.helpers import final_text, rtype, run, state_updates, terminal

PLUGIN = "coze-agent"  # tests/plugins/conftest.py: the host and runner fixtures
KEY = "pat_coze_test_token_123456"
BOT = "7400000000000000123"
SHARED = ("conversation", "legacy-session", "legacy-bot")
OWN = ("actor", "hashed")
ANSWERED = "It is 14:05 in Berlin."
HELLO = "Hello, world!"


@pytest.fixture
def srv():
    with FakeCoze(api_key=KEY, bot_id=BOT) as s:
        s.resume_tokens = ["It is ", "14:05 ", "in Berlin."]
        yield s
    assert s.handler_errors == []


def cfg(srv, source, **extra):
    return {"api-base": srv.base_url, "api-key": KEY, "bot-id": BOT, "user-id-source": source,
            **({"advanced-settings": True, **extra} if extra else {})}


def person(name: str) -> Identity:
    return Identity(conversation_id="group-1", actor_id=name.lower(), actor_name=name,
                    launcher_type="group", launcher_id="g-1")


ALICE, BOB, CAROL = person("Alice"), person("Bob"), person("Carol")


async def ask(srv, host, runner, conf):
    """Alice's message makes the bot ask (a free-text question: any text would fit it)."""
    srv.requires_action = True
    r = await run(runner, host, "what time is it?", config=conf, identity=ALICE)
    assert "Coze asks" in final_text(r) and rtype(terminal(r)) == "run.completed"
    srv.requires_action = False
    (record,) = [v for k, v in state_updates(r).items() if k.startswith("coze.pending-action")]
    return record


def chats(srv) -> list[tuple[str, str, str]]:
    """(user_id, conversation_id or "", text) of every /v3/chat call."""
    out = []
    for req in srv.chat_requests():
        body = req.json()
        out.append((body["user_id"], req.query.get("conversation_id", ""), body["additional_messages"][-1]["content"]))
    return out


@pytest.mark.parametrize("source", SHARED)
async def test_shared_bob_is_kept_never_an_answer_and_goes_right_after_alices_answer(srv, host, runner, source):
    conf = cfg(srv, source)
    record = await ask(srv, host, runner, conf)
    r = await run(runner, host, "lol what is this bot doing", config=conf, identity=BOB)
    assert final_text(r) == ("(Your message is kept until Alice answers the Coze bot's question “the result of the "
                             "client-side function get_local_time”; it is sent right after.)")
    r = await run(runner, host, "yes", config=conf, identity=BOB)
    assert "kept until Alice answers" in final_text(r)
    assert srv.tool_outputs == [] and len(srv.chat_requests()) == 1, "nothing of Bob's reached Coze yet"
    r = await run(runner, host, "14:05", config=conf, identity=ALICE)
    assert final_text(r) == f"{ANSWERED}\n\n(Now what Bob wrote while the question was open:)\n\n{HELLO}"
    assert srv.tool_outputs == [{"tool_call_id": record["tool_calls"][0], "output": "14:05"}]
    user, conversation, text = chats(srv)[-1]
    assert conversation == record["conversation_id"] and text == "lol what is this bot doing\n\nyes"
    r = await run(runner, host, "thanks", config=conf, identity=BOB)
    assert final_text(r) == HELLO and chats(srv)[-1][2] == "thanks", "nothing is left over"


@pytest.mark.parametrize("source", SHARED)
async def test_shared_three_members_an_approver_answers_and_a_click_is_refused(srv, host, runner, source):
    conf = cfg(srv, source, approvers=["carol"])
    record = await ask(srv, host, runner, conf)
    r = await run(runner, host, "submitted", config=conf, identity=BOB, interactions=True,
                  interaction={"interaction_id": record["id"], "values": {"answer": "09:00"}})
    assert final_text(r) == ("(Only Alice, carol can answer the Coze bot's question “the result of the client-side "
                             "function get_local_time”.)")
    await run(runner, host, "is it broken?", config=conf, identity=BOB)
    r = await run(runner, host, "14:05", config=conf, identity=CAROL)
    assert final_text(r).startswith(ANSWERED) and srv.tool_outputs[0]["output"] == "14:05"
    assert chats(srv)[-1][2] == "is it broken?"
    r = await run(runner, host, "14:06", config=conf, identity=ALICE)  # the question is settled
    assert final_text(r) == HELLO and len(srv.tool_outputs) == 1


@pytest.mark.parametrize("source", SHARED)
async def test_shared_alice_moving_on_sends_everyone_with_their_names(srv, host, runner, source):
    conf = cfg(srv, source)
    srv.action_calls = [{"name": "pick_city", "arguments": {"options": ["Berlin", "Paris"]}}]
    await ask(srv, host, runner, conf)
    await run(runner, host, "hello?", config=conf, identity=BOB)
    await run(runner, host, "me too", config=conf, identity=CAROL)
    r = await run(runner, host, "forget it, tell me a joke", config=conf, identity=ALICE)
    text = final_text(r)
    assert "left unanswered" in text and "Sent together with what Bob, Carol wrote" in text and text.endswith(HELLO)
    assert chats(srv)[-1][2] == "Bob: hello?\nCarol: me too\nAlice: forget it, tell me a joke"
    assert srv.tool_outputs == []


@pytest.mark.parametrize("source", OWN)
async def test_own_conversations_bob_goes_on_in_his_own_and_alice_answers_hers(srv, host, runner, source):
    conf = cfg(srv, source, approvers=["carol"])
    record = await ask(srv, host, runner, conf)
    for text in ("lol what is this bot doing", "yes", "14:05"):
        r = await run(runner, host, text, config=conf, identity=BOB)
        assert final_text(r) == HELLO, text
    assert srv.tool_outputs == [], "Bob's 'yes' and '14:05' are his own messages, in his own conversation"
    bob_chats = chats(srv)[1:]
    assert all(c[0] != chats(srv)[0][0] and c[1] != record["conversation_id"] for c in bob_chats)
    r = await run(runner, host, "14:05", config=conf, identity=ALICE)
    assert final_text(r) == ANSWERED and srv.tool_outputs[0]["output"] == "14:05"
    assert len(srv.chat_requests()) == 4, "every message reached Coze once: nothing dropped, nothing doubled"


@pytest.mark.parametrize("source", OWN)
async def test_own_conversations_an_approvers_words_in_her_own_session_are_hers(srv, host, runner, source):
    """Carol may answer Alice's question, but the question takes any text: what Carol types in her
    own conversation is hers (she answers Alice's question with its button, or Alice does)."""
    conf = cfg(srv, source, approvers=["carol"])
    record = await ask(srv, host, runner, conf)
    r = await run(runner, host, "14:05", config=conf, identity=CAROL)
    assert final_text(r) == HELLO and srv.tool_outputs == []
    assert chats(srv)[-1][1] != record["conversation_id"], "Carol's own conversation"
    r = await run(runner, host, "14:06", config=conf, identity=ALICE)
    assert final_text(r) == ANSWERED and srv.tool_outputs[0]["output"] == "14:06"
