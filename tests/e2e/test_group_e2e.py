"""Two people in one Lark group chat with the bot, on the real LangBot 4.11.2 (issue 31).

A webhook-mode ``lark-omni`` bot against the fake Lark API (``../shared/recipes/fake_lark.py``); the
members' messages are Lark group events that @-mention the bot (LangBot's default group respond
rule), each with its own sender, and their button clicks carry their own ``operator``:

- a coding agent (the ACP runner driving the scripted codex-acp-shaped agent over the fake model
  API), one session per person (``user-id-source: actor``):
  - Alice's request makes the agent ask permission (a card with buttons); Bob's unrelated message
    meanwhile is answered at once from his own session, never "waiting for Alice"; Bob's click on
    Alice's "Allow once" changes nothing (LangBot itself refuses a click by anyone but the asker,
    before any run: the runner never hears of it); Alice's click lets her agent go on and her answer
    arrives;
  - Bob writes while Alice's run still works: LangBot claims his message for her run (steering);
    the run answers it after hers, in Bob's own session, and nothing is dropped; the group must see
    all of it, on a bot that sends messages (LangBot's default, which delivers only the last message
    of a run) and on one that streams into cards;
- DeerFlow, one thread for the whole group (``user-id-source: conversation``, its default): while
  the graph waits on Alice's "Delete 3 files?", Bob's messages are not taken as the answer and are
  not lost: they are kept, and sent to the thread right after Alice's answer.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import tests.contract.cases  # noqa: F401  (loads the case modules in order; the ACP case is used below)
from runners_cli.plugins import find
from tests.e2e.harness import RUN_TERMINAL, FakeLark, Host, run_inputs, sandbox_grants, say, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.langbot, pytest.mark.timeout(900)]

ACP = find("acp-agent-runner")
DEERFLOW = find("deerflow-agent")
ALICE, BOB = "ou_alice", "ou_bob"  # the two members' Lark open_ids


# --- the Lark group chat and the host's records of it ------------------------------------------------


@pytest.fixture
def lark(tmp_path: Path) -> Iterator[FakeLark]:
    fake = FakeLark(tmp_path)
    try:
        yield fake
    finally:
        fake.stop()


@pytest.fixture
def group() -> str:
    return f"oc_group_{uuid.uuid4().hex[:10]}"


def _text_of(content: Any) -> str:
    """The words of one Lark message body (``text``, or a ``post``'s paragraphs); "" for a card."""
    try:
        body = json.loads(content) if isinstance(content, str) else content
    except ValueError:
        return str(content)
    if not isinstance(body, dict):
        return ""
    if isinstance(body.get("text"), str):
        return str(body["text"])
    for post in body.values():
        if isinstance(post, dict) and isinstance(post.get("content"), list):
            return "\n\n".join("".join(str(e.get("text", "")) for e in para if isinstance(e, dict))
                               for para in post["content"] if isinstance(para, list)).strip()
    return ""


def _mentioned(content: Any) -> list[str]:
    """Whom a ``post`` message @-mentions (LangBot's ``at-sender``), in order."""
    try:
        body = json.loads(content) if isinstance(content, str) else content
    except ValueError:
        return []
    found: list[str] = []
    for post in body.values() if isinstance(body, dict) else []:
        for para in post.get("content", []) if isinstance(post, dict) else []:
            found += [str(e.get("user_id")) for e in para if isinstance(e, dict) and e.get("tag") == "at"]
    return found


def _said(lark: FakeLark, after: int = 0) -> list[str]:
    """The texts of the messages the bot sent to the chat (message create or reply), in order."""
    out = []
    for call in lark.calls()[after:]:
        if "/im/v1/messages" in call["path"] and call["method"] == "POST" and isinstance(call["body"], dict):
            text = _text_of(call["body"].get("content"))
            if text:
                out.append(text)
    return out


def _said_to(lark: FakeLark, after: int = 0) -> list[tuple[str, list[str]]]:
    """(text, whom it @-mentions) of each message the bot sent."""
    return [(_text_of(c["body"].get("content")), _mentioned(c["body"].get("content"))) for c in lark.calls()[after:]
            if "/im/v1/messages" in c["path"] and c["method"] == "POST" and isinstance(c["body"], dict)
            and _text_of(c["body"].get("content"))]


def _one_with(lark: FakeLark, words: str, after: int = 0) -> str | None:
    return next((t for t in _said(lark, after) if words in t), None)


def _rows(host: Host, sql: str, *args: Any) -> list[dict[str, Any]]:
    with contextlib.closing(sqlite3.connect(host.db_path, timeout=30)) as db:
        db.row_factory = sqlite3.Row
        return [dict(r) for r in db.execute(sql, args).fetchall()]


def _runs(host: Host, bot: str) -> list[dict[str, Any]]:
    """The run ledger rows of the bot's runs, oldest first."""
    return _rows(host, "SELECT * FROM agent_run WHERE bot_id = ? ORDER BY id", bot)


def _settled(host: Host, bot: str, count: int) -> list[dict[str, Any]]:
    """Wait until the bot has ``count`` runs and all of them ended (at most 60 s)."""
    def done() -> list[dict[str, Any]] | None:
        runs = _runs(host, bot)
        return runs if len(runs) >= count and all(r["status"] in RUN_TERMINAL for r in runs) else None

    try:
        runs: list[dict[str, Any]] = wait_for(f"{count} finished run(s) of the group's bot", done, 60,
                                              interval=0.2, alive=host.alive)
        return runs
    finally:
        say(f"runs: {[(r['status'], r['status_reason']) for r in _runs(host, bot)]}")


def _questions(host: Host, bot: str) -> list[dict[str, Any]]:
    """The host's interaction records (questions with buttons) of the bot: status and asker."""
    return _rows(host, "SELECT interaction_id, status, actor_id, conversation_id FROM agent_interaction"
                       " WHERE bot_id = ? ORDER BY id", bot)


def _journal(host: Host, run_id: str) -> list[dict[str, Any]]:
    """The entries of a run's journal (``event_type``, ``actor_id``, ...): what LangBot handed it."""
    found: list[dict[str, Any]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if "event_type" in node:
                found.append(node)
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(run_inputs(host, run_id))
    return found


def _run_said(host: Host, run_id: str) -> list[str]:
    """The complete messages the runner gave LangBot in one run (its ``message.completed`` results)."""
    return [str((e.get("data") or {}).get("message", {}).get("content") or e.get("data"))[:300]
            for e in host.run_events(run_id) if e["type"] == "message.completed"]


def _dropped(host: Host, runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ``steering.dropped`` entries of the runs' journals: follow-ups LangBot claimed for a run
    that the run never took (they got no reply)."""
    return [e for r in runs for e in _journal(host, r["run_id"]) if e["event_type"] == "steering.dropped"]


# --- a coding agent, one session per person --------------------------------------------------------


@pytest.fixture(scope="module")
def acp_installed(langbot: Host) -> Host:
    langbot.ensure_plugin(ACP)
    return langbot


@pytest.fixture
def model_api() -> Iterator[Any]:
    """The fake model API the scripted codex-acp-shaped agent calls (as test_approvals_e2e.py)."""
    from tests.contract.case_acp_agent_runner import _Server

    srv = _Server().start()
    try:
        yield srv
    finally:
        srv.stop()


def _acp_config(srv: Any, workspace: Path, **extra: Any) -> dict[str, Any]:
    from tests.contract.case_acp_agent_runner import config

    # the ACP form's own default is one session for the group (conversation); a member's own
    # session is what Claude Code's default (actor) gives, and what this scenario is about
    return {**config(srv), **sandbox_grants(ACP), "workspace": str(workspace), "permission-mode": "ask",
            "timeout": 120, "advanced-settings": True, "user-id-source": "actor", **extra}


def _sessions(srv: Any) -> list[tuple[str, str]]:
    """(agent session id, the last user text) of each request the agents made to the model."""
    out = []
    for r in srv.model_requests():
        texts = [c.get("text", "") for item in r.body.get("input") or [] if isinstance(item, dict)
                 and item.get("role") == "user" for c in item.get("content") or [] if isinstance(c, dict)]
        out.append((r.headers.get("session-id", ""), texts[-1] if texts else ""))
    return out


def test_a_question_in_one_members_session_never_blocks_or_is_answered_by_another(
        acp_installed: Host, model_api: Any, lark: FakeLark, group: str, tmp_path: Path, journey: Any) -> None:
    """Alice's agent asks permission with buttons; Bob's unrelated message is answered at once from
    his own agent session; Bob's click on Alice's button changes nothing; Alice's click lets her
    agent run the command and her answer arrives in the group."""
    journey("acp-agent-runner", "group_question")
    host = acp_installed
    workspace = tmp_path / "ws"
    pipeline = host.create_pipeline("acp-group-ask", _acp_config(model_api, workspace), ACP.runner_id)
    bot = host.create_lark_bot("acp-group-ask", pipeline, lark)

    model_api.tool_command = "touch made.txt"
    assert host.lark_webhook(bot, lark.message("make a file", sender=ALICE, group=group)).status_code == 200
    wait_for("the question's buttons in the group", lambda: len(lark.buttons()) >= 3, 60)
    buttons = dict(lark.buttons())
    say(f"buttons for Alice's question: {list(buttons)}")
    assert {"Allow once", "Deny"} <= set(buttons), buttons
    _settled(host, bot, 1)  # the run that asked ended; the agent waits for the click
    (question,) = _questions(host, bot)
    assert question["status"] == "pending" and question["actor_id"] == ALICE, question

    # Bob, meanwhile: something unrelated, answered from his own session
    model_api.tool_command = None
    model_api.answer_tokens = ["Paris ", "is ", "the ", "capital."]
    before = len(lark.calls())
    assert host.lark_webhook(bot, lark.message("what is the capital of France?", sender=BOB, group=group)) \
        .status_code == 200
    try:
        bob_answer = wait_for("Bob's answer in the group", lambda: _one_with(lark, "Paris is the capital.", before), 60)
        _settled(host, bot, 2)
    finally:
        say(f"the group after Bob's message: {_said_to(lark, before)}")
    assert "waiting for" not in bob_answer and "kept" not in bob_answer, bob_answer
    assert _said(lark, before) == [bob_answer], "one answer, and no line about Alice's question"
    alice_session, alice_asked = _sessions(model_api)[0]
    bob_session, bob_asked = _sessions(model_api)[1]
    assert "make a file" in alice_asked and "capital of France" in bob_asked, _sessions(model_api)
    assert bob_session and bob_session != alice_session, "Bob was answered in his own agent session"
    assert not (workspace / "made.txt").exists() and model_api.events("permission") == []

    # Bob clicks Alice's "Allow once": it is not his to answer
    before = len(lark.calls())
    refused = host.lark_webhook(bot, lark.click(buttons["Allow once"], sender=BOB, group=group))
    say(f"Bob's click: HTTP {refused.status_code} {refused.text[:300]}; the group then got {_said_to(lark, before)}")
    # LangBot 4.11.2 checks a click's sender against the asker itself (agent_interaction.actor_id) and
    # refuses it before any run starts (the runner never hears of it); the bot's log says why
    logs = host.data("POST", f"/api/v1/platform/bots/{bot}/logs", json={"from_index": -1, "max_count": 20})
    say(f"the bot's log on the refusal: {[str(x)[:200] for x in logs['logs'] if 'scope' in str(x)]}")
    assert [q["status"] for q in _questions(host, bot)] == ["pending"], "the question stays open for Alice"
    assert model_api.events("permission") == [] and not (workspace / "made.txt").exists(), \
        "Bob's click did not answer Alice's agent"
    assert not any("allowed" in t.lower() for t in _said(lark, before)), _said(lark, before)

    # Alice clicks: her agent goes on, and her answer arrives
    model_api.answer_tokens = ["Made ", "the ", "file."]
    before = len(lark.calls())
    assert host.lark_webhook(bot, lark.click(buttons["Allow once"], sender=ALICE, group=group)).status_code == 200
    try:
        wait_for("Alice's answer in the group", lambda: _one_with(lark, "Made the file.", before), 60)
    finally:
        say(f"the group after Alice's click: {_said_to(lark, before)}")
    assert (workspace / "made.txt").exists(), "the approved command ran"
    (permission,) = model_api.events("permission")
    assert permission["option"] == "approved"
    assert any("Allow" in t for t in lark.texts()[before:]), "the card says what was chosen"
    assert [q["status"] for q in _questions(host, bot)] == ["submitted"]
    assert _sessions(model_api)[-1][0] == alice_session, "the answer came from Alice's own session"
    runs = _settled(host, bot, 3)
    assert len(runs) == 3 and all(r["status"] == "completed" for r in runs), runs
    assert _dropped(host, runs) == [], "a message of the group got no reply"


@pytest.mark.parametrize("stream_reply", [
    pytest.param(False, marks=pytest.mark.xfail(strict=True, reason=(
        "LangBot 4.11.2 delivers only a run's last message on a bot without stream reply (pipeline "
        "chat handler / respback's resp_messages[-1]) and tells the runner it streams "
        "(delivery.supports_streaming is always true for pipelines), so Alice's answer and the line "
        "for Bob never reach the group; the READMEs tell owners to turn stream reply on"))),
    True], ids=["messages", "cards"])
def test_a_message_claimed_for_another_members_run_is_answered_after_it_in_the_senders_session(
        acp_installed: Host, model_api: Any, lark: FakeLark, group: str, tmp_path: Path, journey: Any,
        stream_reply: bool) -> None:
    """Bob writes while Alice's run works: LangBot claims his message for her run (steering); the
    run answers Alice first, says in one line that Bob is answered next in his own session, then
    answers Bob from his own agent session; the run took every message it was given (no
    ``steering.dropped``), and the group sees all of it, on a bot that sends messages (LangBot's
    default) and on one that streams into cards."""
    journey("acp-agent-runner", "group_steering_cards" if stream_reply else "group_steering")
    host = acp_installed
    workspace = tmp_path / "ws"
    pipeline = host.create_pipeline("acp-group-steer", _acp_config(model_api, workspace), ACP.runner_id)
    bot = host.create_lark_bot("acp-group-steer", pipeline, lark, stream_reply=stream_reply)

    # Alice's answer takes a few seconds (the model thinks first): Bob writes in that time
    model_api.think_tokens = ["Reading the parser. "] * 8
    model_api.token_delay = 0.3
    model_api.answer_tokens = ["The ", "parser ", "is ", "refactored."]
    assert host.lark_webhook(bot, lark.message("refactor the parser", sender=ALICE, group=group)).status_code == 200
    wait_for("Alice's request at the model", lambda: model_api.model_requests(), 60, interval=0.05)
    time.sleep(0.2)  # the fake reads the answer the moment a request arrives; hers streams for ~3.6 s more
    model_api.answer_tokens = ["Paris ", "is ", "the ", "capital."]  # read when Bob's turn asks the model
    assert host.lark_webhook(bot, lark.message("what is the capital of France?", sender=BOB, group=group)) \
        .status_code == 200
    runs = _settled(host, bot, 1)
    journal = _journal(host, runs[0]["run_id"])
    said = _run_said(host, runs[0]["run_id"])
    say(f"Alice's run's journal: {[(e['event_type'], e.get('actor_id')) for e in journal]}; it said {said}")
    assert len(runs) == 1 and any(e["event_type"] == "steering.injected" and e.get("actor_id") == BOB
                                  for e in journal), \
        f"Bob's message was not claimed by Alice's run (it must arrive while her run works): {runs}"
    assert runs[0]["status"] == "completed", runs
    assert _dropped(host, runs) == [], "LangBot dropped a follow-up the run never took"

    # the runner: Alice's answer, one line for Bob, then Bob's answer
    assert len(said) == 3, said
    assert "The parser is refactored." in said[0] and "Paris" not in said[0], said
    assert lark.member_name(BOB) in said[1] and "own session" in said[1] and "\n" not in said[1].strip(), said
    assert "Paris is the capital." in said[2] and "refactor" not in said[2], said
    sessions = _sessions(model_api)
    alice_sessions = {s for s, text in sessions if "refactor the parser" in text}
    bob_sessions = {s for s, text in sessions if "capital of France" in text}
    assert len(alice_sessions) == 1 and len(bob_sessions) == 1 and alice_sessions != bob_sessions, sessions
    assert not any("capital of France" in text and s in alice_sessions for s, text in sessions), \
        "Alice's agent never heard Bob's message"

    # the group: everything the run said (a bot that sends messages gets each as one; a streaming bot
    # fills one card per message)
    wanted = ["The parser is refactored.", said[1], "Paris is the capital."]

    def missing() -> list[str]:
        shown = "\n".join(_said(lark)) if not stream_reply else "\n".join(lark.texts())
        return [w for w in wanted if w not in shown]

    with contextlib.suppress(TimeoutError):
        wait_for("everything the run said in the group", lambda: not missing(), 10, interval=0.2)
    say(f"the group: {_said_to(lark) if not stream_reply else len(lark.texts())} -> missing {missing()}")
    assert not missing(), (
        f"the group never saw {missing()} of what Alice's run said; it got {_said_to(lark)}"
        + ("" if stream_reply else " (LangBot 4.11.2 hands a bot without stream replies only the last message"
                                   " of a run: pipeline/process/handlers/chat.py)"))


# --- an HTTP platform, one thread for the whole group -------------------------------------------------

QUESTION = "Delete 3 files?"
DEERFLOW_KEY = "df-e2e-key"
DEERFLOW_ANSWER = "Hello from the fake agent."


@pytest.fixture(scope="module")
def deerflow_installed(langbot: Host) -> Host:
    langbot.ensure_plugin(DEERFLOW)
    return langbot


@pytest.fixture
def deerflow() -> Iterator[Any]:
    from tests.fakes.deerflow import FakeDeerFlow

    with FakeDeerFlow(api_key=DEERFLOW_KEY) as srv:
        yield srv
    assert srv.handler_errors == []


def _deerflow_sent(srv: Any) -> list[tuple[str, str]]:
    """What each DeerFlow run carried: ("resume", the answer) or ("input", the new message's text)."""
    out = []
    for req in srv.stream_requests():
        body = req.json()
        value = body["command"]["resume"] if "command" in body else body["input"]["messages"][-1]["content"]
        # LangBot leaves the space that followed the @-mention of the bot in the text
        words = "\n".join(line.strip() for line in str(value).strip().splitlines())
        out.append(("resume" if "command" in body else "input", words))
    return out


def test_a_shared_thread_keeps_other_members_messages_until_the_askers_answer(
        deerflow_installed: Host, deerflow: Any, lark: FakeLark, group: str, journey: Any) -> None:
    """DeerFlow's graph waits on Alice's question in the group's one thread. Bob's messages (one
    of them "yes") are not the answer: each gets one line saying it is kept, nothing reaches the
    thread; Alice's answer resumes the graph, then Bob's messages go to the thread as one new message
    and the group sees both answers."""
    journey("deerflow-agent", "group_shared_question")
    host = deerflow_installed
    pipeline = host.create_pipeline("deerflow-group", {"api-base": deerflow.base_url, "api-key": DEERFLOW_KEY,
                                                       "user-id-source": "conversation"}, DEERFLOW.runner_id)
    bot = host.create_lark_bot("deerflow-group", pipeline, lark)

    deerflow.interrupt_value = {"question": QUESTION}
    assert host.lark_webhook(bot, lark.message("clean up the workspace", sender=ALICE, group=group)).status_code == 200
    wait_for("DeerFlow's question in the group", lambda: _one_with(lark, QUESTION), 60)
    deerflow.interrupt_value = None
    _settled(host, bot, 1)
    (thread,) = deerflow.threads.values()
    assert thread.interrupt is not None

    for n, text in enumerate(("lol what is this bot doing", "yes"), start=2):
        before = len(lark.calls())
        assert host.lark_webhook(bot, lark.message(text, sender=BOB, group=group)).status_code == 200
        try:
            wait_for(f"the answer to Bob's {text!r}", lambda b=before: _said(lark, b), 60)  # type: ignore[misc]
            _settled(host, bot, n)
        finally:
            say(f"the group after Bob's {text!r}: {_said_to(lark, before)}")
        note = _said(lark, before)
        assert len(note) == 1 and "kept" in note[0] and QUESTION in note[0], note
        assert lark.member_name(ALICE) in note[0], f"the line names who may answer: {note}"
    assert _deerflow_sent(deerflow) == [("input", "clean up the workspace")], "nothing of Bob's reached the thread"
    assert thread.interrupt is not None, "the question still waits for Alice"

    before = len(lark.calls())
    assert host.lark_webhook(bot, lark.message("no, keep them", sender=ALICE, group=group)).status_code == 200
    try:
        answer = wait_for("the graph's answers in the group", lambda: _one_with(lark, DEERFLOW_ANSWER, before), 60)
    finally:
        say(f"the group after Alice's answer: {_said_to(lark, before)}")
    assert "no, keep them" in answer and answer.index("no, keep them") < answer.index(DEERFLOW_ANSWER), answer
    assert lark.member_name(BOB) in answer, f"the group is told whose kept messages went on: {answer!r}"
    assert _deerflow_sent(deerflow) == [("input", "clean up the workspace"), ("resume", "no, keep them"),
                                        ("input", "lol what is this bot doing\n\nyes")], _deerflow_sent(deerflow)
    runs = _settled(host, bot, 4)
    assert all(r["status"] == "completed" for r in runs), runs
    assert _dropped(host, runs) == [], "a message of the group got no reply"
