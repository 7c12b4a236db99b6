"""Approvals from the chat on the real LangBot 4.11.2 (issue: a coding agent asks, the person who
asked it answers).

- the pipeline websocket (no buttons): the question arrives as a message while the run is open,
  the typed ``allow`` is claimed by the run as steering and answers it, the turn goes on;
- a webhook-mode ``lark-omni`` bot against the fake Lark API: the question arrives as a CardKit
  card with buttons, the run that asked ends, the click comes back as a new ``interaction.submitted``
  run that attaches to the waiting agent process, and the agent's answer is delivered to the Lark chat.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import tests.contract.cases  # noqa: F401  (loads the case modules in order; the ACP case is used below)
from runners_cli.plugins import find
from tests.e2e.harness import FakeLark, Host, say, wait_for
from tests.fakes.dify import FakeDify

pytestmark = [pytest.mark.slow, pytest.mark.langbot, pytest.mark.timeout(900)]

DIFY = find("dify-agent")


@pytest.fixture
def lark(tmp_path: Path) -> Iterator[FakeLark]:
    fake = FakeLark(tmp_path)
    try:
        yield fake
    finally:
        fake.stop()


def _replies(lark: FakeLark, after: int = 0) -> list[str]:
    """Texts of the messages the bot sent to the chat (im/v1 message create or reply bodies)."""
    out = []
    for call in lark.calls()[after:]:
        if "/im/v1/messages" in call["path"] and call["method"] == "POST" and isinstance(call["body"], dict):
            content = call["body"].get("content")
            out.append(content if isinstance(content, str) else json.dumps(content, ensure_ascii=False))
    return out


@pytest.fixture(scope="module")
def dify_installed(langbot: Host) -> Host:
    langbot.ensure_plugin(DIFY)
    return langbot


def test_a_lark_bot_answers_through_the_pipeline(dify_installed: Host, lark: FakeLark) -> None:
    """The plumbing the button round trip stands on: a Lark webhook message reaches the pipeline's
    runner and its answer goes back to the Lark chat."""
    langbot = dify_installed
    with FakeDify(api_key="app-lark-e2e") as dify:
        dify.answer_tokens = ["Hello ", "from ", "Dify."]
        pipeline = langbot.create_pipeline("lark-dify", {"base-url": dify.base_url, "api-key": "app-lark-e2e",
                                                         "app-type": "chat", "timeout": 30}, DIFY.runner_id)
        bot = langbot.create_lark_bot("lark-dify", pipeline, lark)
        resp = langbot.lark_webhook(bot, lark.message("hi"))
        assert resp.status_code == 200, resp.text
        wait_for("the answer in the Lark chat", lambda: any("from Dify" in t for t in _replies(lark)), 30)
    say(f"lark calls: {[c['path'] for c in lark.calls()]}")


# --- a Dify chatflow pauses at a Human Input form; the person answers -----------------------------

APPROVAL_FORM = {"node_title": "Approval", "form_content": "Publish the draft?", "inputs": [],
                 "actions": [{"id": "approve", "title": "Approve", "button_style": "primary"},
                             {"id": "reject", "title": "Reject", "button_style": "default"}]}


@pytest.fixture
def dify_form() -> Iterator[FakeDify]:
    with FakeDify(api_key="app-form-e2e", mode="chatflow") as srv:
        srv.human_input = dict(APPROVAL_FORM)
        srv.before_form = ["Draft ", "ready. "]
        yield srv
    assert srv.handler_errors == []


def _dify_form_pipeline(host: Host, srv: FakeDify, name: str) -> str:
    return host.create_pipeline(name, {"base-url": srv.base_url, "api-key": "app-form-e2e", "app-type": "chatflow",
                                       "timeout": 30}, DIFY.runner_id)


def test_a_dify_form_is_answered_by_a_typed_reply_in_the_websocket_chat(
        dify_installed: Host, dify_form: FakeDify, journey: Any) -> None:
    """No buttons on the websocket: the form arrives as a numbered question after what streamed;
    the reply ``1`` (the next message) submits it to Dify and the rest of the workflow is the answer,
    in the same Dify conversation."""
    journey("dify-agent", "question_typed")
    from tests.e2e.harness import ws_turns

    host = dify_installed
    pipeline = _dify_form_pipeline(host, dify_form, "dify-form-ws")
    first, second = ws_turns(host, pipeline, ["publish the draft", "1"], timeout=60)
    shown = " ".join(r["content"] for r in first.shown())
    say(f"dify form over the websocket: {shown!r} -> {[r['content'] for r in second.shown()]}")
    assert "Draft ready." in shown and "Dify asks: Approval" in shown and "1. Approve" in shown, shown
    assert dify_form.form_submissions == [{"inputs": {}, "action": "approve",
                                           "user": dify_form.form_submissions[0]["user"]}]
    final = second.final()
    assert final is not None and final["content"].strip() == "Approved: done.", second.shown()
    assert len(dify_form.find_requests("POST", "/v1/chat-messages")) == 1, "the reply went to the form, not the chat"
    runs = host.runs(first.conversation_id)
    assert len(runs) == 2 and all(r["status"] == "completed" for r in runs), runs


def test_a_dify_form_is_answered_by_a_lark_button(dify_installed: Host, dify_form: FakeDify, lark: FakeLark, journey: Any) -> None:
    """A lark-omni bot shows the form's actions as card buttons; the click comes back as a new run,
    which submits the form and delivers the rest of the workflow to the Lark chat."""
    journey("dify-agent", "question_button")
    host = dify_installed
    pipeline = _dify_form_pipeline(host, dify_form, "dify-form-lark")
    bot = host.create_lark_bot("dify-form-lark", pipeline, lark)
    assert host.lark_webhook(bot, lark.message("publish the draft")).status_code == 200
    wait_for("the form's buttons in the Lark chat", lambda: len(lark.buttons()) >= 2, 60)
    buttons = dict(lark.buttons())
    say(f"lark buttons for the Dify form: {list(buttons)}")
    assert {"Approve", "Reject"} <= set(buttons), buttons
    assert dify_form.form_submissions == []
    before = len(lark.calls())
    assert host.lark_webhook(bot, lark.click(buttons["Approve"])).status_code == 200
    try:
        wait_for("the rest of the workflow in the Lark chat",
                 lambda: any("Approved: done." in t for t in _replies(lark, before)), 60)
    finally:
        say(f"lark calls after the click: {[(c['method'], c['path']) for c in lark.calls()[before:]]}")
    assert [s["action"] for s in dify_form.form_submissions] == ["approve"]
    assert len(dify_form.find_requests("POST", "/v1/chat-messages")) == 1


# --- a coding agent asks; the person answers ------------------------------------------------------

ACP = find("acp-agent-runner")


@pytest.fixture(scope="module")
def acp_installed(langbot: Host) -> Host:
    langbot.ensure_plugin(ACP)
    return langbot


@pytest.fixture
def model_api(tmp_path: Path) -> Iterator[Any]:
    """The fake model API the scripted codex-acp-shaped agent calls; it asks for ``touch made.txt``."""
    from tests.contract.case_acp_agent_runner import _Server

    srv = _Server().start()
    srv.tool_command = "touch made.txt"
    try:
        yield srv
    finally:
        srv.stop()


def _ask_config(srv: Any, workspace: Path, **extra: Any) -> dict[str, Any]:
    from tests.contract.case_acp_agent_runner import config
    from tests.e2e.harness import sandbox_grants

    return {**config(srv), **sandbox_grants(ACP), "workspace": str(workspace), "permission-mode": "ask",
            "timeout": 120, "advanced-settings": True, **extra}


def test_a_typed_approval_in_the_websocket_chat_answers_the_running_agent(
        acp_installed: Host, model_api: Any, tmp_path: Path, journey: Any) -> None:
    """No buttons on the websocket: the question arrives as its own reply while the run is open, the
    typed ``allow`` is claimed by that run (steering) and answers the agent, which runs the command
    and finishes the turn in the same run; the answer is logged with who gave it."""
    journey("acp-agent-runner", "approval_typed")
    from tests.e2e.harness import run_inputs, ws_dialogue

    host = acp_installed
    workspace = tmp_path / "ws"
    pipeline = host.create_pipeline("acp-ask-ws", _ask_config(model_api, workspace), ACP.runner_id)
    chat = ws_dialogue(host, pipeline, "make a file", [("wants to", "allow")], timeout=120)
    shown = [r["content"] for r in chat.shown()]
    say(f"acp ask over the websocket: {shown}")
    assert any("wants to run a command: touch made.txt" in s for s in shown), shown
    assert (workspace / "made.txt").exists(), "the approved command ran"
    run = host.finished_run(chat.conversation_id)
    assert run["status"] == "completed", run
    assert len(host.runs(chat.conversation_id)) == 1, "answered inside the run that asked"
    inputs = json.dumps(run_inputs(host, run["run_id"]))
    assert "steering.dropped" not in inputs
    events = host.run_events(run["run_id"])
    logged = json.dumps([e for e in events if e["type"] == "processor.log"], ensure_ascii=False)
    assert "allowed once by" in logged, logged
    (permission,) = model_api.events("permission")
    assert permission["option"] == "approved"


def test_a_lark_button_click_resumes_the_waiting_agent_in_a_new_run(
        acp_installed: Host, model_api: Any, lark: FakeLark, tmp_path: Path, journey: Any) -> None:
    """A lark-omni bot renders the question as a card with buttons; the run that asked ends, the
    click comes back as a new ``interaction.submitted`` run that attaches to the waiting agent, the
    command runs and the agent's answer is delivered to the Lark chat."""
    journey("acp-agent-runner", "approval_button")
    host = acp_installed
    workspace = tmp_path / "ws"
    pipeline = host.create_pipeline("acp-ask-lark", _ask_config(model_api, workspace), ACP.runner_id)
    bot = host.create_lark_bot("acp-ask-lark", pipeline, lark)
    assert host.lark_webhook(bot, lark.message("make a file")).status_code == 200
    wait_for("the question's buttons in the Lark chat", lambda: len(lark.buttons()) >= 3, 60)
    buttons = dict(lark.buttons())
    say(f"lark buttons: {list(buttons)}")
    # the session button says what it covers: this exact command (issue 29)
    assert {"Allow once", "Allow `touch made.txt` for this session", "Deny"} <= set(buttons), buttons
    assert not (workspace / "made.txt").exists(), "nothing runs before the answer"
    before = len(lark.calls())
    assert host.lark_webhook(bot, lark.click(buttons["Allow once"])).status_code == 200
    answer = "".join(model_api.answer_tokens)
    try:
        wait_for("the agent's answer in the Lark chat", lambda: any(answer in t for t in _replies(lark, before)), 60)
    finally:
        say(f"lark calls after the click: {[(c['method'], c['path'], c['body']) for c in lark.calls()[before:]]}")
    assert (workspace / "made.txt").exists(), "the approved command ran"
    (permission,) = model_api.events("permission")
    assert permission["option"] == "approved"
    assert any("Allow" in t for t in lark.texts()[before:]), "the card says what was chosen"
