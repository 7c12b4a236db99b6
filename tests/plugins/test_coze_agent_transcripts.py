"""CozeAgent replaying plain-text wire transcripts byte for byte over a loopback socket.

The transcripts (transcripts/coze/*) are reviewable in a diff; there is no recorded real Coze
traffic in fixtures/real-peers, so they follow the Coze v3 wire format (platforms.md §3: two lines
per event, no space after the colon, ``data:"[DONE]"`` often without a final blank line). The
outgoing request shape is asserted in test_coze_agent.py, because a replay cannot notice a dropped
request field.
"""

from __future__ import annotations

import time
from pathlib import Path

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

ROUTE = "POST /v3/chat"
HERE = Path(__file__).parent / "transcripts" / "coze"
SESSION = stored_key("coze.conversation_id")
SSE = "text/event-stream"
JSON = "application/json"
CONV = "7391112223334445551"


def transcript(name: str, **kw) -> Reply:
    return shared_transcript("coze", name, **kw)


class Replay(ReplayServer):
    """Serves canned replies to /v3/chat in order; the last one is repeated."""

    def __init__(self, *replies: Reply):
        super().__init__({ROUTE: list(replies)})

    def conversations(self) -> list[str]:
        return [r.query.get("conversation_id", "") for r in self.find_requests("POST", "/v3/chat")]


def config(srv: Replay, **extra) -> dict:
    return {"api-base": srv.root_url, "api-key": "pat_replay_token_0001", "bot-id": "7391000000000000001", **extra}


async def replay(reply: str | Reply, **extra):
    with Replay(transcript(reply) if isinstance(reply, str) else reply) as srv:
        host = LocalHost()
        return await run(make_runner("coze-agent", host), host, config=config(srv, **extra)), srv


def tools(results, kind: str) -> list[dict]:
    return [r.data for r in results if rtype(r) == f"tool.call.{kind}"]


# -- the standard cases --------------------------------------------------------------------------


async def test_ok_text_without_trailing_blank_line():
    results, _ = await replay("ok_text.sse")
    assert final_text(results) == "今天是星期二。", "completed repeats the deltas; verbose and follow_up are not answer text"
    assert state_updates(results) == {SESSION: CONV}
    assert terminal(results).usage.model_dump() == {"prompt_tokens": 614, "completion_tokens": 19, "total_tokens": 633}


async def test_ok_text_with_follow_up_suggestions_listed():
    results, _ = await replay("ok_text.sse", **{"advanced-settings": True, "follow-up-suggestions": True})
    assert final_text(results) == "今天是星期二。\n\n- 明天是星期几？"


async def test_ok_tool_call_and_output_are_one_tool_step():
    results, _ = await replay("ok_tool.sse")
    assert final_text(results) == "北京今天晴，3°C。"
    (started,) = tools(results, "started")
    (completed,) = tools(results, "completed")
    assert started == {"tool_call_id": "7391112223334445612", "tool_name": "weather-getWeather",
                       "parameters": {"city": "北京"}}
    assert completed["tool_call_id"] == started["tool_call_id"] and completed["result"] == {"temp": 3, "weather": "晴"}
    types = [rtype(r) for r in results]
    answering = next(i for i, r in enumerate(results) if rtype(r) == "message.delta"
                     and "北京" in r.data["chunk"]["all_content"])
    assert types.index("tool.call.completed") < answering
    waiting = [r.data["chunk"]["all_content"] for r in results[:answering] if rtype(r) == "message.delta"]
    assert waiting == ["⏳ weather-getWeather"], "while the plugin runs, the chat shows what the bot waits on"


async def test_ok_usage_and_reasoning_as_think():
    results, _ = await replay("ok_usage.sse")
    assert final_text(results) == "<think>\n用户问的是加法。\n</think>\n1+1=2"
    assert terminal(results).usage.model_dump() == {"prompt_tokens": 40, "completion_tokens": 17, "total_tokens": 57}
    hidden, _ = await replay("ok_usage.sse", **{"remove-think": True})
    assert final_text(hidden) == "1+1=2"


async def test_resume_sends_the_stored_conversation_as_query_parameter():
    with Replay(transcript("ok_text.sse"), transcript("resume.sse")) as srv:
        host = LocalHost()
        runner = make_runner("coze-agent", host)
        await run(runner, host, config=config(srv))
        second = await run(runner, host, "what did I say?", config=config(srv))
        assert final_text(second) == "You said hello before."
        assert srv.conversations() == ["", CONV]
        assert state_updates(second) == {}, "the same conversation: nothing new to store"


async def test_http_401_is_an_auth_failure_naming_the_token():
    code, retryable, message = failure((await replay(transcript("http_401.json", status=401, content_type=JSON)))[0])
    assert (code, retryable) == ("upstream.auth", False)
    assert "4100" in message and "authentication is invalid" in message and "logid" in message


async def test_http_404_route_is_not_found_with_the_base_url_hint():
    reply = transcript("http_404.txt", status=404, content_type="text/plain; charset=utf-8")
    code, _, message = failure((await replay(reply))[0])
    assert code == "upstream.not_found" and "api-base" in message


async def test_http_429_is_rate_limited_and_retryable():
    code, retryable, _ = failure((await replay(transcript("http_429.json", status=429, content_type=JSON)))[0])
    assert (code, retryable) == ("upstream.rate_limited", True)


async def test_http_5xx_html_page_is_unavailable():
    code, retryable, message = failure((await replay(transcript("http_5xx.html", status=502, content_type="text/html")))[0])
    assert (code, retryable) == ("upstream.unavailable", True) and "may be down" in message


async def test_error_event_midstream_keeps_the_partial_answer_and_names_the_coze_error():
    results, _ = await replay("error_event_midstream.sse")
    code, retryable, message = failure(results)
    assert (code, retryable) == ("upstream.unavailable", True)
    assert "4013" in message and "model service error" in message
    assert final_text(results).startswith("Let me ") and "incomplete" in final_text(results)
    assert state_updates(results) == {SESSION: CONV}, "the conversation is kept for the next turn"


async def test_error_event_without_details_is_still_an_error():
    code, _, message = failure((await replay("error_event_empty.sse"))[0])
    assert code == "upstream.error" and "error event" in message


async def test_malformed_line_is_a_protocol_error():
    code, retryable, _ = failure((await replay("malformed_line.sse"))[0])
    assert (code, retryable) == ("upstream.protocol", False)


@pytest.mark.parametrize("drop", [False, True], ids=["body-ends", "connection-drops"])
async def test_truncated_stream_is_not_a_success(drop):
    code, retryable, _ = failure((await replay(transcript("truncated_stream.sse", drop=drop)))[0])
    assert (code, retryable) == ("upstream.unavailable", True)


async def test_slow_stream_reaches_the_chat_before_it_ends():
    with Replay(transcript("ok_text.sse", delay=0.004)) as srv:
        host = LocalHost()
        runner = make_runner("coze-agent", host)
        ctx = host.make_context("hi", config=config(srv))
        start, first, results = time.monotonic(), None, []
        async for r in runner.invoke(ctx):
            results.append(r)
            if rtype(r) == "message.delta" and first is None:
                first = time.monotonic() - start
        total = time.monotonic() - start
    assert first is not None and first < total - 0.3
    shown = deltas(results)
    assert shown[0] != "今天是星期二。" and all(b.startswith(a) for a, b in zip(shown, shown[1:], strict=False))


# -- Coze quirks ----------------------------------------------------------------------------------


async def test_requires_action_asks_the_chat_not_an_empty_answer():
    # the answer round trip (submit_tool_outputs) is in test_coze_agent_requires_action.py
    results, _ = await replay("requires_action.sse")
    assert rtype(results[-1]) == "run.completed"
    text = final_text(results)
    assert "get_order_status" in text and "A-17" in text and "Reply with your answer" in text
    (record,) = [v for k, v in state_updates(results).items() if k.startswith("coze.pending-action")]
    assert record["chat_id"] == "7391112223334445681" and record["conversation_id"] == "7391112223334445551"
    assert record["tool_calls"] == ["call_7391112223334445683"]


async def test_bot_that_produces_nothing_is_a_clear_failure():
    code, _, message = failure((await replay("empty_answer.sse"))[0])
    assert code == "upstream.empty_response" and "bot finished without producing any answer" in message


async def test_several_answer_messages_are_shown_one_after_the_other():
    results, _ = await replay("multi_answer.sse")
    assert final_text(results) == "First part.\n\nSecond part."


async def test_business_envelope_with_http_200_is_mapped_with_its_hint():
    code, _, message = failure((await replay(transcript("business_4015.json", content_type=JSON)))[0])
    assert code == "config.invalid" and "4015" in message and "Agent As API" in message


async def test_coze_conversation_missing_retries_once_on_a_fresh_conversation():
    with Replay(transcript("ok_text.sse"), transcript("conversation_missing.json", content_type=JSON),
                transcript("resume.sse")) as srv:
        host = LocalHost()
        runner = make_runner("coze-agent", host)
        await run(runner, host, config=config(srv))
        results = await run(runner, host, config=config(srv))
        assert final_text(results).endswith("You said hello before.")
        assert srv.conversations() == ["", CONV, ""]
        assert rtype(terminal(results)) == "run.completed"


@pytest.mark.parametrize(
    "reply",
    [
        pytest.param(transcript("http_404.txt", status=404, content_type="text/plain"), id="route-404"),
        pytest.param(Reply(b'{"code":4200,"msg":"resource not found"}', 200, JSON), id="other-code"),
        pytest.param(Reply(b'{"code":4002,"msg":"not found"}', 200, JSON), id="4002-without-a-stored-id"),
    ],
)
async def test_other_not_found_answers_keep_the_stored_id(reply):
    if "4002" in reply.body.decode():
        # 4002 only means "your stored conversation is gone" when one was sent
        code, _, _ = failure((await replay(reply))[0])
        assert code == "upstream.not_found"
        return
    with Replay(transcript("ok_text.sse"), reply) as srv:
        host = LocalHost()
        runner = make_runner("coze-agent", host)
        await run(runner, host, config=config(srv))
        results = await run(runner, host, config=config(srv))
        assert failure(results)[0] == "upstream.not_found"
        assert state_updates(results) == {}
        assert srv.conversations() == ["", CONV], "no retry on a fresh conversation"


async def test_conversation_missing_reported_in_the_stream_also_retries_fresh():
    with Replay(transcript("ok_text.sse"), transcript("conversation_missing_in_stream.sse"),
                transcript("resume.sse")) as srv:
        host = LocalHost()
        runner = make_runner("coze-agent", host)
        await run(runner, host, config=config(srv))
        results = await run(runner, host, config=config(srv))
        assert rtype(terminal(results)) == "run.completed" and final_text(results).endswith("You said hello before.")
        assert srv.conversations() == ["", CONV, ""]


async def test_all_zero_usage_is_unknown_not_zero():
    body = (HERE / "ok_text.sse").read_bytes().replace(
        b'"usage":{"token_count":633,"output_count":19,"input_count":614}',
        b'"usage":{"token_count":0,"output_count":0,"input_count":0}')
    results, _ = await replay(Reply(body))
    assert final_text(results) == "今天是星期二。" and terminal(results).usage is None
