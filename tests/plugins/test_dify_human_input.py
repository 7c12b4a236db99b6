"""DifyAgent: a chatflow/workflow that pauses at a Human Input node asks the chat; the answer (a click
in a new run, or a typed reply in the next message) goes to ``POST /form/human_input/{token}`` and
the rest of the run streams from ``GET /workflow/{run}/events``."""

from __future__ import annotations

import pytest

from runners_cli.host import Identity
from tests.fakes.dify import FakeDify
from tests.helpers import failure, final_text, rtype, run, state_updates, stored_key, terminal

PLUGIN = "dify-agent"  # tests/plugins/conftest.py: the host and runner fixtures
KEY = "app-dify-test-key-123"
PENDING = "dify.pending-form"  # per session, like the conversation id (runner_kit.pending)
SESSION = stored_key("dify.conversation_id")

APPROVE = {"node_title": "Approval", "form_content": "Publish the draft?", "inputs": [],
           "actions": [{"id": "approve", "title": "Approve", "button_style": "primary"},
                       {"id": "reject", "title": "Reject", "button_style": "default"}]}
COMMENT = {"node_title": "Review", "form_content": "Your comment: {{#$output.comment#}}",
           "inputs": [{"type": "paragraph", "output_variable_name": "comment",
                       "default": {"type": "constant", "selector": [], "value": ""}}],
           "actions": [{"id": "submit", "title": "Submit", "button_style": "primary"}]}
PRIORITY = {"node_title": "Triage", "form_content": "How urgent?",
            "inputs": [{"type": "select", "output_variable_name": "priority",
                        "option_source": {"type": "constant", "selector": [], "value": ["low", "medium", "high"]}}],
            "actions": [{"id": "go", "title": "Go", "button_style": "primary"}]}
TWO = {"node_title": "Details", "form_content": "Fill in the details.",
       "inputs": [{"type": "paragraph", "output_variable_name": "feedback"},
                  {"type": "select", "output_variable_name": "priority",
                   "option_source": {"type": "constant", "value": ["low", "high"]}}],
       "actions": [{"id": "approve", "title": "Approve"}, {"id": "reject", "title": "Request changes"}]}


@pytest.fixture
def srv():
    with FakeDify(api_key=KEY, mode="chatflow") as s:
        s.human_input = dict(APPROVE)
        s.before_form = ["Draft ", "ready. "]
        yield s
    assert s.handler_errors == []


def cfg(srv, **extra):
    return {"base-url": srv.base_url, "api-key": KEY, "app-type": "chatflow", **extra}


def pending(results):
    """The form record a run stored (None: none, or the form was settled)."""
    value = next((v for k, v in state_updates(results).items() if k.startswith(PENDING)), None)
    return value if (value or {}).get("id") else None


def touched(results) -> bool:
    return any(k.startswith(PENDING) for k in state_updates(results))


def click(record, action_id=None, **values):
    return {"interaction_id": record["id"], "action_id": action_id, "values": values}


async def test_buttons_then_click_streams_the_rest(srv, host, runner):
    r1 = await run(runner, host, "publish it", config=cfg(srv), interactions=True)
    assert rtype(terminal(r1)) == "run.completed"
    assert final_text(r1) == "Draft ready. "  # what streamed before the pause; the buttons ask
    record = pending(r1)
    assert record and record["form_token"] in srv.forms and record["workflow_run_id"] in srv.paused
    assert record["user"] == "user_u-1" and record["conversation_id"] == state_updates(r1)[SESSION]
    req = host.interactions[-1]
    assert req["interaction_id"] == record["id"] and not req.get("fields")
    assert [(a["id"], a["label"], a["style"]) for a in req["actions"]] == [
        ("approve", "Approve", "primary"), ("reject", "Reject", "default")]
    assert "Publish the draft?" in req["description"] and "1. Approve" in req["fallback_text"]
    assert req["expires_at"] == srv.forms[record["form_token"]].expiration_time

    r2 = await run(runner, host, "submitted", config=cfg(srv), interactions=True,
                   interaction=click(record, "approve"))
    assert rtype(terminal(r2)) == "run.completed"
    assert final_text(r2) == "Approved: done."
    assert srv.form_submissions == [{"inputs": {}, "action": "approve", "user": "user_u-1"}]
    assert touched(r2) and pending(r2) is None
    events = srv.find_requests("GET", f"/v1/workflow/{record['workflow_run_id']}/events")
    assert len(events) == 1 and events[0].query["user"] == "user_u-1"
    assert len(srv.find_requests("POST", "/v1/chat-messages")) == 1  # no new chat message for the click
    cid = record["conversation_id"]
    assert srv.turns(cid)[0].status == "succeeded"
    # the conversation goes on in the same Dify conversation
    srv.human_input = None
    r3 = await run(runner, host, "thanks", config=cfg(srv))
    assert final_text(r3) == "Hello, world!"
    assert srv.find_requests("POST", "/v1/chat-messages")[-1].json()["conversation_id"] == cid


async def test_typed_answer_without_interactions(srv, host, runner):
    r1 = await run(runner, host, "publish it", config=cfg(srv))
    text = final_text(r1)
    assert text.startswith("Draft ready. \n\n📝 Dify asks: Approval")
    assert "Publish the draft?" in text and "1. Approve" in text and "2. Reject" in text
    assert host.interactions == []
    r2 = await run(runner, host, "2", config=cfg(srv))
    assert final_text(r2) == "Approved: done."
    assert srv.form_submissions[0]["action"] == "reject"
    assert pending(r2) is None


async def test_one_text_input_is_one_field(srv, host, runner):
    srv.human_input = dict(COMMENT)
    r1 = await run(runner, host, "review", config=cfg(srv), interactions=True)
    req = host.interactions[-1]
    assert req["kind"] == "form" and not req.get("actions")
    (fld,) = req["fields"]
    assert (fld["id"], fld["label"], fld["type"], fld["required"]) == ("comment", "comment", "textarea", True)
    assert "Your comment: [comment]" in req["description"]
    r2 = await run(runner, host, "submitted", config=cfg(srv), interactions=True,
                   interaction=click(pending(r1), comment="Looks good"))
    assert final_text(r2) == "Approved: done."
    assert srv.form_submissions[0] == {"inputs": {"comment": "Looks good"}, "action": "submit", "user": "user_u-1"}


async def test_one_text_input_typed_reply_is_the_answer(srv, host, runner):
    srv.human_input = dict(COMMENT)
    r1 = await run(runner, host, "review", config=cfg(srv))
    assert "Reply with your answer (comment)" in final_text(r1)
    await run(runner, host, "Ship it, but fix the typo", config=cfg(srv))
    assert srv.form_submissions[0]["inputs"] == {"comment": "Ship it, but fix the typo"}


async def test_one_select_input_is_a_choice(srv, host, runner):
    srv.human_input = dict(PRIORITY)
    r1 = await run(runner, host, "triage", config=cfg(srv), interactions=True)
    req = host.interactions[-1]
    assert req["kind"] == "choice" and [a["label"] for a in req["actions"]] == ["low", "medium", "high"]
    r2 = await run(runner, host, "submitted", config=cfg(srv), interactions=True,
                   interaction=click(pending(r1), "opt-2"))
    assert final_text(r2) == "Approved: done."
    assert srv.form_submissions[0] == {"inputs": {"priority": "high"}, "action": "go", "user": "user_u-1"}


async def test_several_inputs_are_typed_even_with_interactions(srv, host, runner):
    srv.human_input = dict(TWO)
    r1 = await run(runner, host, "details", config=cfg(srv), interactions=True)
    assert host.interactions == []  # no renderable form: the question is in the answer
    text = final_text(r1)
    assert "- feedback: text" in text and "- priority: one of low / high" in text
    assert "1. Approve" in text and "action: 1" in text
    r2 = await run(runner, host, "priority: 2", config=cfg(srv), interactions=True)
    assert "still open" in final_text(r2) and "feedback" in final_text(r2) and "action" in final_text(r2)
    assert srv.form_submissions == [] and not touched(r2)
    r3 = await run(runner, host, "feedback: fine by me\nsecond line\npriority: high\naction: Request changes",
                   config=cfg(srv), interactions=True)
    assert final_text(r3) == "Approved: done."
    assert srv.form_submissions[0] == {"inputs": {"feedback": "fine by me\nsecond line", "priority": "high"},
                                       "action": "reject", "user": "user_u-1"}


async def test_workflow_app_pauses_and_resumes(srv, host, runner):
    srv.mode = "workflow"
    srv.before_form = []
    r1 = await run(runner, host, "go", config=cfg(srv, **{"app-type": "workflow"}), interactions=True)
    assert rtype(terminal(r1)) == "run.completed"  # nothing streamed before the form: the buttons are the reply
    record = pending(r1)
    r2 = await run(runner, host, "submitted", config=cfg(srv, **{"app-type": "workflow"}), interactions=True,
                   interaction=click(record, "approve"))
    assert final_text(r2) == "Approved: done."
    assert srv.workflow_runs[0].status == "succeeded"


async def test_non_answer_message_while_pending_goes_on(srv, host, runner):
    await run(runner, host, "publish it", config=cfg(srv))
    srv.human_input = None
    r2 = await run(runner, host, "actually, what is the weather?", config=cfg(srv))
    text = final_text(r2)
    assert text.startswith("(The Dify form “Approval” was left unanswered; your new message comes next.)")
    assert text.endswith("Hello, world!")
    assert srv.form_submissions == [] and len(srv.find_requests("POST", "/v1/chat-messages")) == 2
    assert touched(r2) and pending(r2) is None


async def test_click_for_unknown_form_is_one_line(srv, host, runner):
    r = await run(runner, host, "submitted", config=cfg(srv), interactions=True,
                  interaction={"interaction_id": "dify-nope", "action_id": "approve", "values": {}})
    assert rtype(terminal(r)) == "run.completed"
    assert final_text(r) == "(That Dify form is no longer waiting for an answer. Send your message again.)"
    assert srv.find_requests("POST", "/v1/chat-messages") == [] and srv.form_submissions == []


async def test_form_expired_upstream_is_one_line(srv, host, runner):
    r1 = await run(runner, host, "publish it", config=cfg(srv), interactions=True)
    srv.expire_forms()  # Dify's form passed its expiration_time; the kept copy has not yet
    r2 = await run(runner, host, "submitted", config=cfg(srv), interactions=True,
                   interaction=click(pending(r1), "approve"))
    assert rtype(terminal(r2)) == "run.completed"
    assert final_text(r2) == "(The Dify form “Approval” expired before it was answered.)"
    assert pending(r2) is None and srv.form_submissions == []


async def test_form_expired_locally_is_one_line(srv, host, runner):
    srv.human_input = dict(APPROVE, timeout=0)
    r1 = await run(runner, host, "publish it", config=cfg(srv), interactions=True)
    r2 = await run(runner, host, "submitted", config=cfg(srv), interactions=True,
                   interaction=click(pending(r1), "approve"))
    assert final_text(r2) == "(The Dify form “Approval” expired before it was answered.)"
    assert srv.find_requests("POST", f"/v1/form/human_input/{pending(r1)['form_token']}") == []


async def test_typed_message_after_expiry_is_sent_as_new(srv, host, runner):
    srv.human_input = dict(APPROVE, timeout=0)
    await run(runner, host, "publish it", config=cfg(srv))
    srv.human_input = None
    r2 = await run(runner, host, "approve", config=cfg(srv))
    text = final_text(r2)
    assert text.startswith("(The Dify form “Approval” expired before it was answered; your message was sent")
    assert text.endswith("Hello, world!") and srv.form_submissions == []


async def test_submit_failing_upstream_is_a_clear_failure(srv, host, runner):
    r1 = await run(runner, host, "publish it", config=cfg(srv), interactions=True)
    record = pending(r1)
    srv.submit_fault = (500, "internal_server_error", "Internal Server Error, please contact support.")
    r2 = await run(runner, host, "submitted", config=cfg(srv), interactions=True, interaction=click(record, "approve"))
    code, _, message = failure(r2)
    assert code == "upstream.unavailable"  # Dify 5xx: retryable
    assert "did not take the answer to the form “Approval”" in message and "500" in message
    assert not touched(r2)  # still pending: the same click may be retried
    srv.submit_fault = None
    r3 = await run(runner, host, "submitted", config=cfg(srv), interactions=True, interaction=click(record, "approve"))
    assert final_text(r3) == "Approved: done."


async def test_invalid_answer_refused_by_dify_is_a_clear_failure(srv, host, runner):
    srv.human_input = dict(PRIORITY)
    r1 = await run(runner, host, "triage", config=cfg(srv), interactions=True)
    srv.forms[pending(r1)["form_token"]].inputs[0]["option_source"]["value"] = ["urgent"]  # changed upstream
    r2 = await run(runner, host, "submitted", config=cfg(srv), interactions=True,
                   interaction=click(pending(r1), "opt-0"))
    code, _, message = failure(r2)
    assert code == "upstream.bad_request" and "invalid_form_data" in message


async def test_email_delivered_form_cannot_be_answered(srv, host, runner):
    srv.human_input = dict(APPROVE, delivery="email")
    r = await run(runner, host, "publish it", config=cfg(srv))
    code, _, message = failure(r)
    assert code == "upstream.paused" and "Web App" in message


async def test_empty_event_data_quirk_is_a_clear_failure(srv, host, runner):
    srv.human_input = dict(APPROVE, empty_data=True)
    r = await run(runner, host, "publish it", config=cfg(srv))
    code, _, message = failure(r)
    assert code == "upstream.paused" and "sent no form" in message


async def test_only_the_asker_answers_and_someone_elses_reply_waits(srv, host, runner):
    alice, bob = Identity(actor_id="alice", actor_name="Alice"), Identity(actor_id="bob", actor_name="Bob")
    src = {"user-id-source": "conversation"}  # one Dify user for the whole group
    await run(runner, host, "publish it", config=cfg(srv, **src), identity=alice)
    r2 = await run(runner, host, "1", config=cfg(srv, **src), identity=bob)
    assert final_text(r2) == "(Your message is kept until Alice answers the Dify form “Approval”; it is sent right after.)"
    assert srv.form_submissions == [] and len(srv.find_requests("POST", "/v1/chat-messages")) == 1
    srv.human_input = None
    r3 = await run(runner, host, "approve", config=cfg(srv, **src), identity=alice)
    assert final_text(r3) == "Approved: done.\n\n(Now what Bob wrote while the question was open:)\n\nHello, world!"
    assert srv.form_submissions[0]["action"] == "approve"
    assert srv.find_requests("POST", "/v1/chat-messages")[-1].json()["query"] == "1"
