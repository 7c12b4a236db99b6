"""DeerFlowAgent in a group while a graph interrupt waits ("Delete 3 files?"), in every
``user-id-source`` (the default, ``conversation``, gives the group one thread). Only the asker (or
an approver) answers it; in a shared thread everyone else's message is kept and sent as a new run
right after the answer, because a run with new input on an interrupted thread drops the interrupt
(the fake does what ``langgraph dev`` does; tests/real_peers/test_langgraph_real.py checks the real
server). Per person each member has their own thread. An interrupt already answered in DeerFlow's
own UI is found in the thread's state, and the reply goes as an ordinary message."""

from __future__ import annotations

import pytest

from runners_cli.host import Identity
from tests.fakes.deerflow import FakeDeerFlow
from tests.helpers import final_text, rtype, run, state_updates, terminal

PLUGIN = "deerflow-agent"  # tests/plugins/conftest.py: the host and runner fixtures
SHARED = ("conversation", "legacy-session", "legacy-bot")
OWN = ("actor", "hashed")
ANSWER = "Hello from the fake agent."
QUESTION = "Delete 3 files?"


@pytest.fixture
def srv():
    with FakeDeerFlow(api_key="df-test-key") as s:
        yield s
    assert s.handler_errors == []


def cfg(srv, source=None, **extra):
    conf = {"api-base": srv.base_url, "api-key": "df-test-key"}
    if source is not None:
        conf["user-id-source"] = source
    if extra:
        conf.update({"advanced-settings": True, **extra})
    return conf


def person(name: str) -> Identity:
    return Identity(conversation_id="group-1", actor_id=name.lower(), actor_name=name,
                    launcher_type="group", launcher_id="g-1")


ALICE, BOB, CAROL = person("Alice"), person("Bob"), person("Carol")


async def ask(srv, host, runner, conf):
    srv.interrupt_value = {"question": QUESTION}
    r = await run(runner, host, "clean up the workspace", config=conf, identity=ALICE)
    assert final_text(r) == QUESTION and rtype(terminal(r)) == "run.completed"
    srv.interrupt_value = None
    (record,) = [v for k, v in state_updates(r).items() if k.startswith("deerflow.pending-interrupt")]
    return record


def sent(srv) -> list[object]:
    """What each run carried: the resume value, or the new message's text."""
    out = []
    for req in srv.stream_requests():
        body = req.json()
        out.append(("resume", body["command"]["resume"]) if "command" in body
                   else ("input", body["input"]["messages"][-1]["content"]))
    return out


@pytest.mark.parametrize("source", (None, *SHARED))
async def test_shared_thread_bob_never_answers_alices_question_and_is_sent_right_after(srv, host, runner, source):
    conf = cfg(srv, source)
    record = await ask(srv, host, runner, conf)
    r = await run(runner, host, "lol what is this bot doing", config=conf, identity=BOB)
    assert final_text(r) == ("(Your message is kept until Alice answers the DeerFlow question “Delete 3 files?”; "
                             "it is sent right after.)")
    r = await run(runner, host, "yes", config=conf, identity=BOB)
    assert "kept until Alice answers" in final_text(r)
    assert len(srv.stream_requests()) == 1 and srv.threads[record["thread_id"]].interrupt is not None, \
        "the interrupt still waits: nothing of Bob's reached the thread"
    r = await run(runner, host, "no, keep them", config=conf, identity=ALICE)
    assert final_text(r) == ("you said: no, keep them\n\n(Now what Bob wrote while the question was open:)\n\n"
                             + ANSWER)
    assert sent(srv)[1:] == [("resume", "no, keep them"), ("input", "lol what is this bot doing\n\nyes")]
    r = await run(runner, host, "ok", config=conf, identity=BOB)
    assert final_text(r) == ANSWER and sent(srv)[-1] == ("input", "ok"), "nothing is left over"


@pytest.mark.parametrize("source", SHARED)
async def test_shared_thread_three_members_only_the_asker_answers(srv, host, runner, source):
    conf = cfg(srv, source)  # DeerFlow has no approvers setting: only the asker answers
    await ask(srv, host, runner, conf)
    await run(runner, host, "what is it doing?", config=conf, identity=BOB)
    r = await run(runner, host, "yes, delete", config=conf, identity=CAROL)
    assert "kept until Alice answers" in final_text(r)
    r = await run(runner, host, "no", config=conf, identity=ALICE)
    assert final_text(r).startswith("you said: no")
    assert sent(srv)[1:] == [("resume", "no"), ("input", "Bob: what is it doing?\nCarol: yes, delete")]


@pytest.mark.parametrize("source", OWN)
async def test_own_threads_bob_goes_on_in_his_own_and_alice_answers_hers(srv, host, runner, source):
    conf = cfg(srv, source)
    record = await ask(srv, host, runner, conf)
    for text in ("lol what is this bot doing", "yes"):
        r = await run(runner, host, text, config=conf, identity=BOB)
        assert final_text(r) == ANSWER, text
    assert srv.threads[record["thread_id"]].interrupt is not None, "Alice's question is untouched"
    assert {run_.thread_id for run_ in srv.runs[1:]} != {record["thread_id"]}
    r = await run(runner, host, "no, keep them", config=conf, identity=ALICE)
    assert final_text(r) == "you said: no, keep them"
    assert sent(srv) == [("input", "clean up the workspace"), ("input", "lol what is this bot doing"),
                         ("input", "yes"), ("resume", "no, keep them")]


@pytest.mark.parametrize("source", (None, "actor"))
@pytest.mark.parametrize("flavor", ("deerflow", "langgraph"))  # the state says `next` only, or lists interrupts
async def test_answered_elsewhere_the_reply_goes_as_a_new_message(host, runner, source, flavor):
    with FakeDeerFlow(api_key="df-test-key", flavor=flavor) as srv:
        await _answered_elsewhere(srv, host, runner, source)
    assert srv.handler_errors == []


async def _answered_elsewhere(srv, host, runner, source):
    conf = cfg(srv, source)
    record = await ask(srv, host, runner, conf)
    srv.answer_interrupt(record["thread_id"], "yes")  # someone answered in DeerFlow's own UI
    r = await run(runner, host, "yes please", config=conf, identity=ALICE)
    assert rtype(terminal(r)) == "run.completed", terminal(r).data
    assert final_text(r) == ("(The DeerFlow question “Delete 3 files?” no longer waits for an answer: it was "
                             "answered elsewhere (in DeerFlow itself?); your reply was sent as a new message.)\n\n"
                             + ANSWER)
    assert sent(srv)[-1] == ("input", "yes please")
    assert srv.find_requests("GET", f"{srv.api_prefix}/threads/{record['thread_id']}/state")


async def test_answered_elsewhere_takes_the_kept_messages_along(srv, host, runner):
    conf = cfg(srv)
    record = await ask(srv, host, runner, conf)
    await run(runner, host, "hello?", config=conf, identity=BOB)
    srv.answer_interrupt(record["thread_id"], "no")
    r = await run(runner, host, "no", config=conf, identity=ALICE)
    assert final_text(r).endswith(ANSWER) and "answered elsewhere" in final_text(r)
    assert sent(srv)[-1] == ("input", "Bob: hello?\nAlice: no")


async def test_a_question_kept_by_an_older_version_is_still_answered(srv, host, runner):
    conf = cfg(srv)
    srv.interrupt_value = {"question": QUESTION}
    r = await run(runner, host, "clean up", config=conf, identity=ALICE)
    srv.interrupt_value = None
    (key,) = [k for k in state_updates(r) if k.startswith("deerflow.pending-interrupt")]
    tid = state_updates(r)["deerflow.thread_id"]
    # what versions before kept: the question in the thread's own value, nobody named as asker
    scope = host.scope_key(ALICE, "conversation")
    host.store.delete(scope, key)
    host.store.set(scope, "deerflow.thread_id", {"thread_id": tid, "interrupts": [srv.threads[tid].interrupt["id"]],
                                                 "question": QUESTION})
    r = await run(runner, host, "no, keep them", config=conf, identity=BOB)
    assert final_text(r) == "you said: no, keep them", "as before: whoever wrote next answered it"
    assert state_updates(r)["deerflow.thread_id"] == tid, "the thread's value is its id again"
    assert sent(srv)[-1] == ("resume", "no, keep them")
