"""N8nAgent and workflows built for LangBot 4.10 (issue 33 items 1 and 15): the top-level fields
4.10's runner sent, who they name in a group, and what a LangBot reset does to the n8n memory.

What 4.10 sent: LangBot v4.10.8 (3d4a726c) ``src/langbot/pkg/provider/runners/n8nsvapi.py``
``_call_webhook`` — ``chatInput``, ``message``, ``user_message_text``, ``conversation_id``,
``session_id``/``user_id`` (``<launcher_type>_<launcher_id>``), ``msg_create_time``, then every query
variable at the top level (``pipeline/preproc/preproc.py``: ``launcher_type``, ``launcher_id``,
``sender_id``, ``sender_name``, ``group_name``, …). LangBot 4.11.2 passes the variables to runners as
``adapter.extra.params`` (``pkg/agent/runner/query_entry_adapter.py`` ``build_params``).
"""

from __future__ import annotations

import base64
import json

import pytest

from runners_cli.host import Identity
from tests.fakes.n8n import FakeN8n
from tests.helpers import failure, final_text, rtype, run, state_updates, terminal

PLUGIN = "n8n-agent"
LEGACY = {"user-id-source": "legacy-session"}
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x01" * 32).decode()


@pytest.fixture
def srv():
    with FakeN8n() as s:
        s.mode = "last_node"
        s.output_key = "response"
        yield s


def cfg(srv, **extra):
    return {"webhook-url": srv.webhook_url, **extra}


def person() -> Identity:
    return Identity(conversation_id="conv-1", actor_id="10001", actor_name="Ann", launcher_type="person",
                    launcher_id="10001")


def member(actor: str, name: str) -> Identity:
    return Identity(conversation_id="group-conv", actor_id=actor, actor_name=name, launcher_type="group",
                    launcher_id="g-7")


def host_params(ident: Identity, **extra) -> dict:
    """The variables LangBot 4.11.2 hands the runner for this identity (preproc.py, build_params)."""
    return {"launcher_type": ident.launcher_type, "launcher_id": ident.launcher_id, "sender_id": ident.actor_id,
            "session_id": f"{ident.launcher_type}_{ident.launcher_id}", "conversation_id": ident.conversation_id,
            "msg_create_time": 1767225600, "group_name": "Team" if ident.launcher_type == "group" else "",
            "sender_name": ident.actor_name, "user_message_text": "x", **extra}


# -- item 1: the fields a 4.10 workflow reads ------------------------------------------------


async def test_a_migrated_workflow_whose_memory_reads_session_id_answers_and_remembers(srv, host, runner):
    """The issue's workflow: a Simple Memory keyed on ``{{ $json.body.session_id }}``. With the field
    only under ``params`` n8n threw "Key parameter is empty" on every message (the fake does what
    n8n 2.40.7 does: ``@n8n/n8n-nodes-langchain`` ``utils/helpers.js`` ``getSessionId``)."""
    srv.memory_key = "session_id"
    srv.echo_history = True
    ident = person()
    first = await run(runner, host, "my name is Ann", config=cfg(srv, **LEGACY), identity=ident,
                      params=host_params(ident))
    assert rtype(terminal(first)) == "run.completed", terminal(first).data
    second = await run(runner, host, "what is my name?", config=cfg(srv, **LEGACY), identity=ident,
                       params=host_params(ident))
    assert final_text(second).startswith("(memory: 1 turns)"), "the workflow remembered the first message"
    body = srv.bodies()[1]
    assert body["session_id"] == "person_10001" == body["sessionId"], "4.10's session id, as 4.10 sent it"
    assert srv.memory["person_10001"][0][0] == "my name is Ann"


async def test_every_field_langbot_410_sent_is_at_the_top_level(srv, host, runner):
    ident = person()
    await run(runner, host, "héllo", config=cfg(srv, **LEGACY), identity=ident,
              params=host_params(ident, my_variable="kept"))
    (body,) = srv.bodies()
    assert {k: body[k] for k in ("chatInput", "message", "user_message_text")} == dict.fromkeys(
        ("chatInput", "message", "user_message_text"), "héllo")
    assert body["user_id"] == body["session_id"] == "person_10001"
    assert body["conversation_id"] == "conv-1"
    assert (body["launcher_type"], body["launcher_id"]) == ("person", "10001")
    assert (body["sender_id"], body["sender_name"]) == ("10001", "Ann")
    assert body["msg_create_time"] == 1767225600 and body["group_name"] == ""
    assert body["my_variable"] == "kept", "4.10 put every pipeline variable at the top level"
    assert body["params"] == host_params(ident, my_variable="kept"), "4.11's params object is kept as it was"


async def test_in_a_group_the_fields_name_the_sender_and_no_variable_can_change_that(srv, host, runner):
    """Variables are not identity: one that spells ``session_id`` or ``sender_id`` never decides
    whose memory or name the workflow sees (Bob cannot write into Alice's memory)."""
    config = cfg(srv)  # the default: each member has their own sessionId
    for actor, name in (("alice", "Alice"), ("bob", "Bob")):
        ident = member(actor, name)
        spoof = {"session_id": "group_g-7", "sender_id": "alice", "sender_name": "Alice", "user_id": "user_alice",
                 "conversation_id": "other", "launcher_id": "g-1"}
        await run(runner, host, f"I am {name}", config=config, identity=ident, params=host_params(ident, **spoof))
    alice, bob = srv.bodies()
    assert alice["session_id"] == alice["sessionId"] != bob["session_id"] == bob["sessionId"]
    assert (bob["sender_id"], bob["sender_name"], bob["user_id"]) == ("bob", "Bob", "user_bob")
    assert (bob["conversation_id"], bob["launcher_id"], bob["group_name"]) == ("group-conv", "g-7", "Team")
    assert bob["params"]["sender_id"] == "alice", "the params object stays as LangBot sent it"


async def test_a_migrated_group_shares_one_session_as_in_langbot_410(srv, host, runner):
    for actor, name in (("alice", "Alice"), ("bob", "Bob")):
        ident = member(actor, name)
        await run(runner, host, "hi", config=cfg(srv, **LEGACY), identity=ident, params=host_params(ident))
    alice, bob = srv.bodies()
    assert alice["session_id"] == bob["session_id"] == alice["user_id"] == "group_g-7"
    assert (alice["sender_name"], bob["sender_name"]) == ("Alice", "Bob")


async def test_hashed_identity_sends_no_im_id_anywhere(srv, host, runner):
    """``hashed`` promises n8n never sees IM user ids: not at the top level, not in ``params``."""
    ident = Identity(conversation_id="conv-9", actor_id="im-4711", actor_name="Ann", launcher_type="group",
                     launcher_id="g-0815")
    await run(runner, host, "hi", config=cfg(srv, **{"user-id-source": "hashed"}), identity=ident,
              params=host_params(ident))
    (body,) = srv.bodies()
    text = json.dumps(body)
    assert "im-4711" not in text and "g-0815" not in text, body
    assert body["user_id"] == body["sender_id"] == body["userId"] and body["userId"].startswith("lb_")
    assert body["launcher_id"].startswith("lb_") and body["params"]["launcher_id"] == body["launcher_id"]
    assert body["session_id"] == body["sessionId"] == body["params"]["session_id"]


async def test_the_fields_arrive_as_form_fields_with_files(srv, host, runner):
    ident = person()
    contents = [{"type": "text", "text": "see"}, {"type": "image_base64", "image_base64": PNG}]
    await run(runner, host, "see", config=cfg(srv, **LEGACY), identity=ident, contents=contents,
              params=host_params(ident))
    (turn,) = srv.turns
    assert turn.body["session_id"] == "person_10001" and turn.body["sender_name"] == "Ann"
    assert turn.body["msg_create_time"] == "1767225600" and "file0" in turn.files


# -- item 15: a LangBot reset starts a new n8n memory ----------------------------------------


async def test_a_reset_starts_a_fresh_memory_for_a_migrated_session(srv, host, runner):
    """4.10's session id keeps a migrated workflow's memory until the conversation is reset in
    LangBot; then the workflow gets a new session id, so its memory starts over. n8n offers no way
    to delete the old memory through a webhook, so nothing else is called."""
    srv.memory_key = "session_id"
    srv.echo_history = True
    ident = person()
    config = cfg(srv, **LEGACY)
    await run(runner, host, "one", config=config, identity=ident)
    before = await run(runner, host, "two", config=config, identity=ident)
    assert final_text(before).startswith("(memory: 1 turns)")
    host.reset_conversation(ident)
    after = await run(runner, host, "three", config=config, identity=ident)
    assert final_text(after).startswith("(memory: 0 turns)"), "the reset started a new memory"
    again = await run(runner, host, "four", config=config, identity=ident)
    assert final_text(again).startswith("(memory: 1 turns)"), "and the new one is kept"
    sessions = [b["session_id"] for b in srv.bodies()]
    assert sessions[:2] == ["person_10001"] * 2
    assert sessions[2] == sessions[3] != "person_10001" and sessions[2].startswith("person_10001-")
    assert state_updates(after) == {"n8n.session_id": sessions[2]}
    assert len(srv.find_requests()) == 4, "only the four webhook calls"


async def test_a_reset_starts_a_fresh_memory_per_person_too(srv, host, runner):
    srv.memory_key = "session_id"
    srv.echo_history = True
    await run(runner, host, "one", config=cfg(srv))
    host.reset_conversation()
    after = await run(runner, host, "two", config=cfg(srv))
    assert final_text(after).startswith("(memory: 0 turns)")
    first, second = srv.bodies()
    assert first["session_id"] != second["session_id"] == second["sessionId"]


async def test_a_410_memory_without_its_field_is_the_workflows_failure(srv, host, runner):
    """What the issue saw, through n8n's own answer: the fake's workflow reads a field the request
    lacks (a workflow keyed on something LangBot does not send) and fails clearly."""
    srv.memory_key = "chat_key"
    code, _, message = failure(await run(runner, host, config=cfg(srv)))
    assert code == "upstream.error" and "Executions list" in message
    srv.mode = "streaming"
    code, _, message = failure(await run(runner, host, config=cfg(srv)))
    assert code == "upstream.error" and "Key parameter is empty" in message and "AI Agent" in message
