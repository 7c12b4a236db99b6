"""DifyAgent in a group while a Human Input form is open, in every ``user-id-source``: two and three
members, who may answer, and what happens to everyone else's messages. Per person (``actor``,
``hashed``) each member has their own Dify conversation and never meets Alice's form; in a shared
conversation (``conversation``, ``legacy-*``) nobody but Alice (or an approver) answers it, and the
others' messages are kept and sent as one chat message right after the form's run went on."""

from __future__ import annotations

import pytest

from runners_cli.host import Identity
from tests.fakes.dify import FakeDify
from tests.helpers import final_text, run, state_updates

PLUGIN = "dify-agent"  # tests/plugins/conftest.py: the host and runner fixtures
KEY = "app-dify-test-key-123"
SHARED = ("conversation", "legacy-session", "legacy-bot")
OWN = ("actor", "hashed")
FORM = {"node_title": "Review", "form_content": "Your comment: {{#$output.comment#}}",
        "inputs": [{"type": "paragraph", "output_variable_name": "comment"}],
        "actions": [{"id": "submit", "title": "Submit", "button_style": "primary"}]}
DONE = "Approved: done."
HELLO = "Hello, world!"


@pytest.fixture
def srv():
    with FakeDify(api_key=KEY, mode="chatflow") as s:
        yield s
    assert s.handler_errors == []


def cfg(srv, source, **extra):
    return {"base-url": srv.base_url, "api-key": KEY, "app-type": "chatflow", "user-id-source": source,
            **({"advanced-settings": True, **extra} if extra else {})}


def person(name: str) -> Identity:
    return Identity(conversation_id="group-1", actor_id=name.lower(), actor_name=name,
                    launcher_type="group", launcher_id="g-1")


ALICE, BOB, CAROL = person("Alice"), person("Bob"), person("Carol")


async def ask(srv, host, runner, conf):
    """Alice's message pauses the chatflow at a one-field form (any text would fill it)."""
    srv.human_input = dict(FORM)
    r = await run(runner, host, "review my draft", config=conf, identity=ALICE)
    assert "Dify asks: Review" in final_text(r)
    srv.human_input = None
    (record,) = [v for k, v in state_updates(r).items() if k.startswith("dify.pending-form")]
    return record


def messages(srv) -> list[tuple[str, str, str]]:
    """(user, conversation_id, query) of every /v1/chat-messages call."""
    return [(b["user"], b.get("conversation_id") or "", b["query"])
            for b in (r.json() for r in srv.find_requests("POST", "/v1/chat-messages"))]


@pytest.mark.parametrize("source", SHARED)
async def test_shared_bob_is_kept_never_an_answer_and_goes_right_after_alices_answer(srv, host, runner, source):
    conf = cfg(srv, source)
    record = await ask(srv, host, runner, conf)
    r = await run(runner, host, "lol what is this bot doing", config=conf, identity=BOB)
    assert final_text(r) == "(Your message is kept until Alice answers the Dify form “Review”; it is sent right after.)"
    r = await run(runner, host, "yes", config=conf, identity=BOB)
    assert "kept until Alice answers" in final_text(r)
    assert srv.form_submissions == [] and len(messages(srv)) == 1, "nothing of Bob's reached Dify yet"
    r = await run(runner, host, "Looks good", config=conf, identity=ALICE)
    assert final_text(r) == f"{DONE}\n\n(Now what Bob wrote while the question was open:)\n\n{HELLO}"
    assert srv.form_submissions == [{"inputs": {"comment": "Looks good"}, "action": "submit", "user": record["user"]}]
    assert messages(srv)[-1] == (record["user"], record["conversation_id"], "lol what is this bot doing\n\nyes")
    r = await run(runner, host, "thanks", config=conf, identity=BOB)
    assert final_text(r) == HELLO and messages(srv)[-1][2] == "thanks", "nothing is left over"


@pytest.mark.parametrize("source", SHARED)
async def test_shared_three_members_an_approver_answers(srv, host, runner, source):
    conf = cfg(srv, source, approvers=["carol"])
    await ask(srv, host, runner, conf)
    await run(runner, host, "is it stuck?", config=conf, identity=BOB)
    r = await run(runner, host, "Ship it", config=conf, identity=CAROL)
    assert final_text(r).startswith(DONE) and srv.form_submissions[0]["inputs"] == {"comment": "Ship it"}
    assert messages(srv)[-1][2] == "is it stuck?"


@pytest.mark.parametrize("source", OWN)
async def test_own_conversations_bob_goes_on_in_his_own_and_alice_answers_hers(srv, host, runner, source):
    conf = cfg(srv, source, approvers=["carol"])
    record = await ask(srv, host, runner, conf)
    for text in ("lol what is this bot doing", "yes"):
        r = await run(runner, host, text, config=conf, identity=BOB)
        assert final_text(r) == HELLO, text
    assert srv.form_submissions == [], "Bob's 'yes' is his own message"
    assert all(m[0] != record["user"] and m[1] != record["conversation_id"] for m in messages(srv)[1:])
    r = await run(runner, host, "Looks good", config=conf, identity=ALICE)
    assert final_text(r) == DONE and srv.form_submissions[0]["user"] == record["user"]
    assert len(messages(srv)) == 3, "every message reached Dify once"


@pytest.mark.parametrize("source", OWN)
async def test_own_conversations_an_approvers_words_in_her_own_session_are_hers(srv, host, runner, source):
    """Carol may answer Alice's form, but its one field takes any text: what Carol types in her own
    conversation is hers (she answers the form with its button, or Alice does)."""
    conf = cfg(srv, source, approvers=["carol"])
    record = await ask(srv, host, runner, conf)
    r = await run(runner, host, "Ship it", config=conf, identity=CAROL)
    assert final_text(r) == HELLO and srv.form_submissions == []
    assert messages(srv)[-1][0] != record["user"], "Carol's own conversation"
    r = await run(runner, host, "Ship it", config=conf, identity=ALICE)
    assert final_text(r) == DONE
    assert srv.form_submissions == [{"inputs": {"comment": "Ship it"}, "action": "submit", "user": record["user"]}]
