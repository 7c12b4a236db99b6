"""WeKnoraAgent replaying plain-text wire transcripts byte for byte over a loopback socket.

There is no recorded real WeKnora traffic in fixtures/real-peers (a real instance needs PostgreSQL
with vector extensions, Redis, a docreader and model endpoints), so the transcripts under
transcripts/weknora/ are written from the protocol as Tencent/WeKnora's handlers emit it
(platforms.md §7 and its corrections): gin's ``event:message`` / ``data:{…}`` framing without
spaces, Go's compact JSON (``&`` as ``\\u0026``), ``agent_query`` first on both endpoints,
references before the answer, thinking interleaved with answer deltas, ``session_title`` after
``complete``, no usage. The outgoing request shape is asserted in test_weknora_agent.py, because a
replay cannot notice a dropped request field.
"""

from __future__ import annotations

import time

from runners_cli.host import Identity, LocalHost
from tests.fakes.replay import ReplayServer, Reply, json_reply
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

SID = "0d2c4e9a-3b1f-4c6e-9a8d-5f7e1b2c3d4e"
MID = "7f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0"
KEY = stored_key("weknora.session_id")
SESSIONS = "POST /api/v1/sessions"
CHAT = "POST /api/v1/knowledge-chat/{sid}"
AGENT = "POST /api/v1/agent-chat/{sid}"
STOP = "POST /api/v1/sessions/{sid}/stop"
REFERENCES = "\n\nReferences:\n- 彗星.txt\n- 太阳风 (solar-wind.pdf)"


def transcript(name: str, **kw) -> Reply:
    return shared_transcript("weknora", name, **kw)


def created() -> Reply:
    return transcript("session_created.json", status=201, content_type="application/json")


class Replay(ReplayServer):
    def __init__(self, *replies: Reply, route: str = CHAT):
        super().__init__({SESSIONS: created(), route: list(replies), STOP: transcript(
            "stop_ok.json", content_type="application/json")})

    def chats(self) -> list[str]:
        return [r.path for r in self.requests if "-chat/" in r.path]


def config(srv: Replay, **extra) -> dict:
    return {"base-url": srv.root_url, "api-key": "sk-replay-key-000000001", "app-type": "chat", **extra}


async def replay(*replies: str | Reply, route: str = CHAT, state: dict | None = None, **extra):
    items = [transcript(r) if isinstance(r, str) else r for r in replies]
    with Replay(*items, route=route) as srv:
        host = LocalHost()
        for k, v in (state or {}).items():
            host.store.set(host.scope_key(Identity(), "conversation"), k, v)
        return await run(make_runner("weknora-agent", host), host, config=config(srv, **extra)), srv


def tools(results, kind: str) -> list[dict]:
    return [r.data for r in results if rtype(r) == f"tool.call.{kind}"]


# -- the standard cases --------------------------------------------------------------------------


async def test_ok_text_streams_the_answer_and_lists_the_cited_documents_after_it():
    results, srv = await replay("ok_text.sse")
    assert final_text(results) == "彗尾总是背向太阳，因为太阳风把它推开。" + REFERENCES
    assert not deltas(results)[0].startswith("References"), "references come after the answer, not before"
    assert state_updates(results) == {KEY: SID}
    assert terminal(results).usage is None, "WeKnora sends no usage: unknown, never 0"
    assert srv.served[SESSIONS] == 1 and srv.chats() == [f"/api/v1/knowledge-chat/{SID}"]


async def test_ok_tool_agent_steps_reasoning_and_trailing_title():
    results, _ = await replay("ok_tool.sse", route=AGENT, **{"app-type": "agent"})
    assert rtype(terminal(results)) == "run.completed"
    (started,), (done,) = tools(results, "started"), tools(results, "completed")
    assert started["tool_name"] == "knowledge_search"
    assert started["parameters"] == {"knowledge_base_ids": ["kb-1"], "query": "comet tail direction"}
    assert done["tool_call_id"] == started["tool_call_id"] == "call_9f8e7d6c"
    text = final_text(results)
    assert text.startswith("<think>\nThe user asks about comets. I should search the knowledge base.")
    assert "</think>\nThe tail points away from the Sun.\n\nReferences:" in text, "no think block mid-answer"
    assert "The documents agree." in text and "Mention the solar wind" not in text
    assert text.endswith(REFERENCES) and "彗尾的方向" not in text, "the session title is not answer text"


async def test_ok_usage_is_read_when_a_server_sends_it():
    results, _ = await replay("ok_usage.sse")
    assert final_text(results) == "The tail points away from the Sun."
    assert terminal(results).usage.model_dump() == {"prompt_tokens": 812, "completion_tokens": 15,
                                                    "total_tokens": 827}, "counted once, not per event"


async def test_resume_continues_the_stored_session_without_creating_one():
    results, srv = await replay("resume.sse", state={KEY: SID})
    assert final_text(results) == "正如刚才所说，彗尾背向太阳。"
    assert srv.served[SESSIONS] == 0
    assert srv.chats() == [f"/api/v1/knowledge-chat/{SID}"]
    assert state_updates(results) == {}, "the same session: nothing new to store"


async def test_http_401_is_an_auth_failure_naming_the_key():
    results, _ = await replay(json_reply(transcript("http_401.json").body.decode(), 401))
    code, retryable, message = failure(results)
    assert (code, retryable) == ("upstream.auth", False)
    assert "invalid API key" in message and "check the api-key setting" in message and "***" not in message


async def test_http_404_route_missing_points_at_base_url():
    reply = Reply(transcript("http_404.txt").body, status=404, content_type="text/plain")
    code, _, message = failure((await replay(reply))[0])
    assert code == "upstream.not_found" and "base-url" in message


async def test_http_404_session_not_found_for_a_new_session_is_not_retried():
    results, srv = await replay(json_reply(transcript("session_missing.json").body.decode(), 404))
    assert failure(results)[0] == "upstream.not_found"
    assert srv.served[SESSIONS] == 1, "a session created just now is not 'gone': no second session"


async def test_session_missing_for_a_stored_session_starts_a_fresh_one_once():
    gone = json_reply(transcript("session_missing.json").body.decode(), 404)
    results, srv = await replay(gone, transcript("ok_text.sse"), state={KEY: "old-session"})
    assert rtype(terminal(results)) == "run.completed"
    assert final_text(results).startswith("(The previous conversation could not be continued")
    assert srv.chats() == ["/api/v1/knowledge-chat/old-session", f"/api/v1/knowledge-chat/{SID}"]
    assert state_updates(results) == {KEY: SID}


async def test_http_429_is_retryable():
    results, _ = await replay(json_reply(transcript("http_429.json").body.decode(), 429))
    assert failure(results)[:2] == ("upstream.rate_limited", True)


async def test_http_5xx_html_page_is_unavailable_and_says_so():
    reply = Reply(transcript("http_5xx.html").body, status=502, content_type="text/html")
    code, retryable, message = failure((await replay(reply))[0])
    assert (code, retryable) == ("upstream.unavailable", True) and "HTML" in message


async def test_error_event_midstream_keeps_the_partial_answer_with_the_message():
    results, _ = await replay("error_event_midstream.sse")
    code, _, message = failure(results)
    assert code == "upstream.error" and "context deadline exceeded" in message and "knowledge_qa_execution" in message
    text = final_text(results)
    assert text.startswith("彗尾总是") and "incomplete" in text.lower()


async def test_error_event_before_any_answer_is_explained():
    results, _ = await replay("error_event_before_answer.sse")
    code, _, message = failure(results)
    assert code == "upstream.error" and "no model configured" in message


async def test_malformed_line_is_a_protocol_error():
    results, _ = await replay("malformed_line.sse")
    assert failure(results)[0] == "upstream.protocol"


async def test_truncated_stream_is_unavailable_and_keeps_the_text():
    """The stream breaks off and continue-stream cannot serve it (this replay has no such route):
    the answer is stopped in WeKnora with its message id (issue 33 item 10)."""
    results, srv = await replay(transcript("truncated_stream.sse", drop=True))
    assert failure(results)[:2] == ("upstream.unavailable", True)
    assert final_text(results).startswith("The tail points")
    (resume,) = srv.find_requests("GET", f"/api/v1/sessions/continue-stream/{SID}")
    assert resume.query == {"message_id": MID}
    (stop,) = srv.find_requests("POST", f"/api/v1/sessions/{SID}/stop")
    assert stop.json() == {"message_id": MID}


async def test_slow_stream_delivers_text_before_the_end():
    reply = transcript("ok_text.sse", delay=0.004)
    with Replay(reply) as srv:
        host = LocalHost()
        runner = make_runner("weknora-agent", host)
        ctx = host.make_context("hi", config=config(srv))
        start, first = time.monotonic(), None
        async for r in runner.invoke(ctx):
            if rtype(r) == "message.delta" and first is None:
                first = time.monotonic() - start
        assert first is not None and first < time.monotonic() - start - 0.2


# -- WeKnora's quirks ----------------------------------------------------------------------------


async def test_answer_done_then_body_end_without_complete_is_a_full_answer():
    results, _ = await replay("answer_done_only.sse")
    assert rtype(terminal(results)) == "run.completed"
    assert final_text(results) == "彗尾背向太阳。" + REFERENCES


async def test_an_agent_rounds_preamble_is_retracted_when_it_calls_a_tool():
    """Issue 33 item 8: answer text streamed before a tool call is that round's preamble; WeKnora's
    server drops it from the stored answer and its web UI retracts it, so the chat does too: the
    person saw "Let me look that up." while the tool ran, and the answer alone stays."""
    results, _ = await replay("preamble.sse", route=AGENT, **{"app-type": "agent"})
    shown = deltas(results)
    assert any("Let me look that up." in d for d in shown), "streamed while the model wrote it"
    assert final_text(results) == "Comet C/2026 A1 is visible in December."
    (started,) = tools(results, "started")
    assert started["parameters"] == {"query": "comet 2026"}, "a JSON-string argument is parsed"


async def test_failed_tool_is_a_failed_step_not_a_failed_run():
    results, _ = await replay("tool_failed.sse", route=AGENT, **{"app-type": "agent"})
    assert rtype(terminal(results)) == "run.completed"
    (done,) = tools(results, "completed")
    assert "not available" in (done.get("error") or "")
    assert final_text(results).endswith("comet tails point away from the Sun.")


async def test_stop_event_ends_with_the_partial_answer_and_says_why():
    results, _ = await replay("stop.sse")
    code, _, message = failure(results)
    assert code == "upstream.error" and "stopped" in message
    assert final_text(results).startswith("The tail ")


async def test_tool_approval_is_a_clear_pause_and_the_answer_is_stopped():
    results, srv = await replay("approval.sse", route=AGENT, **{"app-type": "agent"})
    code, _, message = failure(results)
    assert code == "upstream.paused"
    assert "delete_file" in message and "Files" in message and "web UI" in message
    (stop,) = srv.find_requests("POST", f"/api/v1/sessions/{SID}/stop")
    assert stop.json() == {"message_id": MID}, "WeKnora's waiting agent is released"


async def test_resource_links_are_left_readable():
    results, _ = await replay("resource_link.sse")
    text = final_text(results)
    assert "![chart](resource://kb-1/images/chart-01.png)" in text and "Q3 & Q4" in text


async def test_references_can_be_hidden_or_retitled():
    results, _ = await replay("ok_text.sse", **{"advanced-settings": True, "show-references": False})
    assert final_text(results) == "彗尾总是背向太阳，因为太阳风把它推开。"
    results, _ = await replay("ok_text.sse", **{"advanced-settings": True, "references-heading": "参考资料："})
    assert final_text(results).endswith("\n\n参考资料：\n- 彗星.txt\n- 太阳风 (solar-wind.pdf)")


async def test_an_empty_answer_is_reported_not_shown_as_blank():
    results, _ = await replay("empty_answer.sse")
    assert failure(results)[0] == "upstream.empty_response"


async def test_image_refused_by_the_agent_names_the_fix():
    reply = json_reply(transcript("http_400_image.json").body.decode(), 400)
    code, _, message = failure((await replay(reply))[0])
    assert code == "upstream.bad_request" and "Image upload is not enabled" in message
