"""DifyAgent replaying plain-text wire transcripts byte for byte over a loopback socket.

The transcripts (transcripts/dify/*.sse) are reviewable in a diff; the outgoing request shape is
asserted in test_dify.py, because a replay cannot notice a dropped request field.
"""

from __future__ import annotations

import json

import pytest

from runners_cli.host import LocalHost
from tests.fakes.replay import ReplayServer, Reply
from tests.fakes.replay import transcript as shared_transcript
from tests.helpers import (
    deltas,
    failure,
    final_text,
    make_runner,
    rtype,
    run,
    state_updates,
    stored_key,
    terminal,
)

ROUTE = "POST /v1/chat-messages"
SESSION = stored_key("dify.conversation_id")  # where the default identity's conversation id is kept
SSE = "text/event-stream; charset=utf-8"
NGINX_502 = (
    b"<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad Gateway</h1>"
    b"</center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n"
)
WEB_UI = b"<!DOCTYPE html><html lang=\"en-US\"><head><meta charset=\"utf-8\"><title>Dify</title></head><body></body></html>"


def transcript(name: str, **kw) -> Reply:
    return shared_transcript("dify", name, **kw)


def envelope(status: int, doc: dict, content_type: str = "application/json") -> Reply:
    return Reply(json.dumps(doc).encode(), status, content_type)


class Replay(ReplayServer):
    """Serves canned replies to /chat-messages in order; the last one is repeated."""

    def __init__(self, *replies: Reply):
        super().__init__({ROUTE: list(replies)})

    def bodies(self) -> list[dict]:
        return [r.json() for r in self.find_requests("POST", "/v1/chat-messages")]


def config(srv: Replay, **extra) -> dict:
    return {"base-url": srv.root_url + "/v1", "api-key": "app-replay", "app-type": "chat", **extra}


async def replay(name: str | Reply, **extra):
    with Replay(transcript(name) if isinstance(name, str) else name) as srv:
        host = LocalHost()
        return await run(make_runner("dify-agent", host), host, config=config(srv, **extra)), srv


async def test_chat_with_crlf_pings_and_no_trailing_blank_line():
    results, _ = await replay("ok_chat_crlf_no_trailing.sse")
    assert final_text(results) == "Hello 世界"
    assert state_updates(results) == {SESSION: "c-1"}
    assert terminal(results).usage.model_dump() == {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12}


async def test_agent_thought_upserts_become_one_tool_call():
    results, srv = await replay("ok_agent_thought_upserts.sse", **{"app-type": "agent"})
    started = [r.data for r in results if rtype(r) == "tool.call.started"]
    completed = [r.data for r in results if rtype(r) == "tool.call.completed"]
    assert started == [{"tool_call_id": "th-1", "tool_name": "web_search",
                        "parameters": {"web_search": {"query": "weather"}}}]
    assert completed[0]["result"] == {"web_search": "sunny"}
    msg = [r for r in results if rtype(r) == "message.completed"][0].data["message"]["content"]
    assert msg[0]["text"] == "<think>\nI should search.\n</think>\nIt is sunny."
    assert msg[1]["image_url"]["url"] == srv.root_url + "/files/tools/abc.png?timestamp=1&sign=x"


async def test_new_agent_closing_message_replaces_not_appends():
    results, _ = await replay("ok_new_agent_closing_message.sse", **{"app-type": "agent"})
    assert final_text(results) == "Done now."
    assert all(d in ("Done", "Done now.") for d in deltas(results))


async def test_chatflow_failure_reports_the_workflow_error():
    results, _ = await replay("error_chatflow_failed.sse", **{"app-type": "chatflow"})
    code, retryable, message = failure(results)
    assert code == "upstream.error" and "model overloaded" in message
    assert state_updates(results) == {SESSION: "c-4"}, "the conversation is kept for the next turn"


async def test_malformed_line_is_a_protocol_error():
    code, retryable, _ = failure((await replay("malformed_line.sse"))[0])
    assert (code, retryable) == ("upstream.protocol", False)


async def test_stream_ending_without_message_end_is_not_a_success():
    code, retryable, _ = failure((await replay("truncated_stream.sse"))[0])
    assert (code, retryable) == ("upstream.unavailable", True)


# -- agent thoughts that repeat the answer -----------------------------------------------------


def message_text(results) -> str:
    content = [r for r in results if rtype(r) == "message.completed"][0].data["message"]["content"]
    return content if isinstance(content, str) else "".join(c.get("text") or "" for c in content)


async def test_agent_answer_repeated_as_final_thought_is_shown_once():
    """Dify's function-calling agent saves each step's model output as the step's thought and
    re-sends the step: the answer step's thought is the whole streamed answer. Only the tool
    step's thought (never streamed as answer text) is reasoning."""
    results, _ = await replay("ok_agent_answer_repeated_in_thought.sse", **{"app-type": "agent"})
    assert message_text(results) == (
        "<think>\nThe user wants the weather in Berlin; I will ask the weather tool.\n</think>\n"
        "It is 12°C and cloudy in Berlin."
    )
    assert all(d.count("cloudy in Berlin") <= 1 for d in deltas(results))
    started = [r.data for r in results if rtype(r) == "tool.call.started"]
    assert started == [{"tool_call_id": "th-1", "tool_name": "weather", "parameters": {"weather": {"city": "Berlin"}}}]
    assert terminal(results).usage.total_tokens == 241


async def test_agent_thought_already_streamed_as_answer_is_not_reasoning():
    """A model that talks before calling a tool: Dify streams that text as agent_message and sends
    it back as the tool step's thought; a thought that is only the start of the streamed answer is
    not reasoning either."""
    results, _ = await replay("ok_agent_streamed_step_text.sse", **{"app-type": "agent"})
    assert message_text(results) == "Let me check the weather.\nIt is 12°C and cloudy."
    assert [r.data["tool_name"] for r in results if rtype(r) == "tool.call.completed"] == ["weather"]


# -- which 404 means the conversation is gone --------------------------------------------------

NOT_DIFY_404 = [
    pytest.param(Reply(b"<html><body><h1>404 Not Found</h1></body></html>", 404, "text/html"), id="html-page"),
    pytest.param(
        envelope(404, {"code": "not_found", "status": 404, "message": "The requested URL was not found on the "
                       "server. If you entered the URL manually please check your spelling and try again."}),
        id="route-not-found",
    ),
    pytest.param(envelope(404, {"code": "app_not_found", "status": 404, "message": "Conversation Not Exists."}),
                 id="other-code"),
    pytest.param(envelope(404, {"error": "no route"}), id="gateway-json"),
]


@pytest.mark.parametrize("reply", NOT_DIFY_404)
async def test_a_404_that_is_not_dify_conversation_missing_keeps_the_stored_id(reply):
    with Replay(transcript("ok_chat_crlf_no_trailing.sse"), reply) as srv:
        host = LocalHost()
        runner = make_runner("dify-agent", host)
        assert final_text(await run(runner, host, config=config(srv))) == "Hello 世界"
        results = await run(runner, host, config=config(srv))
        code, retryable, _ = failure(results)
        assert (code, retryable) == ("upstream.not_found", False)
        assert state_updates(results) == {}, "the stored conversation id is kept"
        assert [b["conversation_id"] for b in srv.bodies()] == ["", "c-1"], "no retry on a fresh conversation"
        srv.replies[ROUTE].append(transcript("ok_chat_crlf_no_trailing.sse"))
        assert final_text(await run(runner, host, config=config(srv))) == "Hello 世界"
        assert srv.bodies()[-1]["conversation_id"] == "c-1"


async def test_dify_conversation_not_exists_retries_on_a_fresh_conversation():
    missing = envelope(404, {"code": "not_found", "message": "Conversation Not Exists.", "status": 404})
    with Replay(transcript("ok_chat_crlf_no_trailing.sse"), missing, transcript("ok_new_agent_closing_message.sse")) as srv:
        host = LocalHost()
        runner = make_runner("dify-agent", host)
        await run(runner, host, config=config(srv))
        results = await run(runner, host, config=config(srv))
        assert final_text(results).endswith("Done now.")  # the kit may announce the fresh conversation
        assert [b["conversation_id"] for b in srv.bodies()] == ["", "c-1", ""]
        assert list(state_updates(results).values()) == ["c-3"]


# -- the stream ends after message_end ---------------------------------------------------------


@pytest.mark.parametrize("drop", [False, True], ids=["body-ends", "connection-drops"])
async def test_stream_ending_after_message_end_is_a_finished_answer(drop):
    """A chatbot configured as chatflow, or a chatflow whose connection drops before
    workflow_finished: message_end already carried the whole answer and its usage."""
    reply = transcript("ok_chatflow_ends_after_message_end.sse", drop=drop)
    results, _ = await replay(reply, **{"app-type": "chatflow"})
    assert final_text(results) == "All done."
    assert terminal(results).usage.model_dump() == {"prompt_tokens": 8, "completion_tokens": 2, "total_tokens": 10}


async def test_connection_drop_before_message_end_is_still_a_failure():
    code, retryable, _ = failure((await replay(transcript("truncated_stream.sse", drop=True)))[0])
    assert (code, retryable) == ("upstream.unavailable", True)


# -- 2xx bodies that are not an answer ---------------------------------------------------------


@pytest.mark.parametrize(
    "reply",
    [
        pytest.param(Reply(WEB_UI, 200, "text/html; charset=utf-8"), id="text/html"),
        pytest.param(Reply(WEB_UI, 200, "application/json"), id="html-labelled-json"),
        pytest.param(Reply(WEB_UI, 200, None), id="no-content-type"),
    ],
)
async def test_a_200_html_page_is_a_protocol_error_with_the_base_url_hint(reply):
    code, retryable, message = failure((await replay(reply))[0])
    assert (code, retryable) == ("upstream.protocol", False)
    assert "is base-url the Dify API address ending in /v1?" in message


@pytest.mark.parametrize(
    ("doc", "code", "words"),
    [
        ({"status": 400, "code": "provider_quota_exceeded", "message": "quota gone"}, "upstream.quota", "quota gone"),
        ({"error": "model overloaded"}, "upstream.error", "model overloaded"),
        ({"error": {"message": "gateway refused", "type": "gateway_error"}}, "upstream.error", "gateway refused"),
    ],
)
async def test_a_200_json_error_envelope_is_mapped_not_an_empty_answer(doc, code, words):
    got, _, message = failure((await replay(envelope(200, doc)))[0])
    assert got == code and words in message


# -- error pages: hints only where they help, details kept --------------------------------------


@pytest.mark.parametrize(
    ("reply", "code", "present", "absent"),
    [
        (Reply(NGINX_502, 502, "text/html"), "upstream.unavailable", "may be down", "/v1"),
        (Reply(NGINX_502.replace(b"502 Bad Gateway", b"504 Gateway Time-out"), 504, "text/html"),
         "upstream.unavailable", "may be down", "/v1"),
        (Reply(NGINX_502.replace(b"502 Bad Gateway", b"503 Service Unavailable"), 503, "text/html"),
         "upstream.unavailable", "may be down", "/v1"),
        (Reply(b"<html><body>Not Found</body></html>", 404, "text/html"), "upstream.not_found", "/v1?", None),
        (Reply(b"<html><body>Method Not Allowed</body></html>", 405, "text/html"), "upstream.bad_request", "/v1?",
         None),
        (envelope(500, {"error": "upstream exploded"}), "upstream.unavailable", "upstream exploded", "/v1"),
        (envelope(502, {"error": {"message": "no healthy upstream", "code": "bad_gateway"}}), "upstream.unavailable",
         "no healthy upstream", "/v1"),
        (envelope(422, {"detail": [{"loc": ["body", "query"], "msg": "field required"}]}), "upstream.bad_request",
         "field required", "/v1"),
    ],
)
async def test_error_pages_get_the_right_hint_and_keep_their_details(reply, code, present, absent):
    got, _, message = failure((await replay(reply))[0])
    assert got == code, message
    assert present in message
    if absent:
        assert absent not in message
