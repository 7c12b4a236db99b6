"""TboxAgent replaying plain-text wire transcripts byte for byte over a loopback socket.

There is no recorded real Tbox traffic (fixtures/real-peers has none: Tbox is SaaS only), so the
transcripts (transcripts/tbox/*) follow the wire format of platforms.md §6 and the tboxsdk parser:
``event: message`` with a JSON-string ``payload``, including the quirks (no ``end``, a chunk before
its lane's header, a JSON envelope with status 200, ``event: error``, thinking, followup, revoke,
a second image lane). The outgoing request shape is asserted in test_tbox_agent.py, because a replay
cannot notice a dropped request field.
"""

from __future__ import annotations

import time

import pytest

from runners_cli.host import LocalHost
from tests.fakes.replay import JSON, ReplayServer, Reply, json_reply, transcript
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

SESSION = stored_key("tbox.conversation_id")
CID = "20250601abcdef0123456789conv0001"
CHAT = "POST /api/chat"


def t(name: str, **kw) -> Reply:
    return transcript("tbox", name, **kw)


def config(srv: ReplayServer, **extra) -> dict:
    return {"base-url": srv.root_url, "api-key": "pat_replay_token_0001", "app-id": "202501010000000001", **extra}


async def replay(*replies: Reply, **extra):
    with ReplayServer({CHAT: list(replies)}) as srv:
        host = LocalHost()
        return await run(make_runner("tbox-agent", host), host, config=config(srv, **extra)), srv


def message_content(results) -> list[dict]:
    msg = [r for r in results if rtype(r) == "message.completed"][0].data["message"]["content"]
    return msg if isinstance(msg, list) else [{"type": "text", "text": msg}]


# -- the standard cases --------------------------------------------------------------------------


async def test_ok_text_without_end_is_a_complete_answer():
    results, _ = await replay(t("ok_text.sse"))
    assert rtype(terminal(results)) == "run.completed"
    assert final_text(results) == "你好，我是百宝箱智能体。"
    assert state_updates(results) == {SESSION: CID}
    assert terminal(results).usage is None, "no charge message: usage unknown, not 0"


async def test_ok_tool_agent_shows_only_its_answer():
    results, _ = await replay(t("ok_tool.sse"))
    assert final_text(results) == "杭州今天晴，最高 25°C。"
    assert not [r for r in results if rtype(r).startswith("tool.")], "Tbox streams no tool steps"


async def test_ok_usage_from_charge():
    results, _ = await replay(t("ok_usage.sse"))
    assert final_text(results) == "1+1=2"
    assert terminal(results).usage.model_dump() == {"prompt_tokens": 120, "completion_tokens": 8, "total_tokens": 128}


async def test_resume_sends_the_stored_conversation_and_reads_session_id():
    with ReplayServer({CHAT: [t("ok_text.sse"), t("resume.sse")]}) as srv:
        host = LocalHost()
        runner = make_runner("tbox-agent", host)
        await run(runner, host, config=config(srv))
        second = await run(runner, host, "我刚才说了什么？", config=config(srv))
        assert final_text(second) == "你刚才说了你好。"
        sent = [r.json().get("conversationId") for r in srv.find_requests("POST", "/api/chat")]
        assert sent == [None, CID]
        assert state_updates(second) == {}, "the same conversation: nothing new to store"


async def test_http_403_invalid_token_is_an_auth_failure():
    results, _ = await replay(t("http_403_invalid_token.json", status=403, content_type=JSON))
    code, retryable, message = failure(results)
    assert (code, retryable) == ("upstream.auth", False)
    assert "AUTH_TOKEN_INVALID" in message and "api-key" in message and "traceId 21f0a1b2c3d4e5f6" in message


async def test_http_404_html_page_points_at_base_url():
    code, _, message = failure((await replay(t("http_404.html", status=404, content_type="text/html")))[0])
    assert code == "upstream.not_found" and "base-url" in message


async def test_http_429_is_retryable_rate_limit():
    code, retryable, message = failure((await replay(t("http_429.json", status=429, content_type=JSON)))[0])
    assert (code, retryable) == ("upstream.rate_limited", True) and "RATE_LIMITED" in message


async def test_http_5xx_proxy_page_is_retryable():
    code, retryable, message = failure((await replay(t("http_5xx.html", status=502, content_type="text/html")))[0])
    assert (code, retryable) == ("upstream.unavailable", True) and "HTML" in message


async def test_json_error_with_status_200_is_mapped_with_tbox_code_and_message():
    results, _ = await replay(t("json_error_200.json", content_type="application/json;charset=UTF-8"))
    code, _, message = failure(results)
    assert code == "upstream.error" and "SYSTEM_BUSY" in message and "系统繁忙" in message


async def test_error_event_midstream_keeps_the_text_and_shows_the_description():
    results, _ = await replay(t("error_event_midstream.sse"))
    code, retryable, message = failure(results)
    assert (code, retryable) == ("upstream.error", False)
    assert "大模型调用失败" in message and "MODEL_ERROR" in message
    text = message_content(results)[0]["text"]
    assert text.startswith("正在生成\n\n") and "incomplete" in text.lower()


async def test_type_error_message_fails_with_its_message():
    code, _, message = failure((await replay(t("error_message_type.sse")))[0])
    assert code == "upstream.error" and "内容安全校验未通过" in message


async def test_malformed_line_is_a_protocol_error():
    code, _, message = failure((await replay(t("malformed_line.sse")))[0])
    assert code == "upstream.protocol" and "payload" in message


async def test_truncated_stream_is_a_failure_not_an_answer():
    results, _ = await replay(t("truncated_stream.sse", drop=True))
    code, retryable, _ = failure(results)
    assert (code, retryable) == ("upstream.unavailable", True)
    assert message_content(results)[0]["text"].startswith("写到一半")


async def test_slow_stream_arrives_in_pieces():
    started = time.monotonic()
    results, _ = await replay(t("slow_stream.sse", delay=0.01))
    assert final_text(results) == "一二三四五"
    assert len(deltas(results)) >= 2 and time.monotonic() - started > 0.3


# -- Tbox's quirks --------------------------------------------------------------------------------


@pytest.mark.parametrize("remove", [False, True])
async def test_thinking_followup_and_crlf(remove):
    results, _ = await replay(t("ok_thinking_followup_crlf.sse"), **{"remove-think": remove})
    answer = "明天多云。\n\n- 后天呢？\n- 需要带伞吗？"
    if remove:
        assert final_text(results) == answer
    else:
        assert final_text(results) == "<think>\n用户在问天气，需要查一下。\n</think>\n" + answer


async def test_followups_can_be_turned_off():
    results, _ = await replay(t("ok_thinking_followup_crlf.sse"),
                              **{"advanced-settings": True, "follow-up-suggestions": False, "remove-think": True})
    assert final_text(results) == "明天多云。"


@pytest.mark.parametrize("remove", [False, True])
async def test_think_markers_split_across_chunks_become_one_block(remove):
    results, _ = await replay(t("ok_think_tags.sse"), **{"remove-think": remove})
    text = final_text(results)
    if remove:
        assert text == "答案是 42。"
        assert not any("想" in d or "<" in d for d in deltas(results))
    else:
        assert text == "<think>\n先想一想\n</think>\n答案是 42。"
    for a, b in zip(deltas(results), deltas(results)[1:], strict=False):
        assert b.startswith(a)


async def test_headerless_chunk_is_text_and_the_image_lane_becomes_images():
    results, _ = await replay(t("ok_headerless_and_image_lane.sse"))
    content = message_content(results)
    assert (content[0]["type"], content[0]["text"]) == ("text", "这是你要的图片：")
    assert [c["type"] for c in content[1:]] == ["image_url", "image_url"]
    assert [c["image_url"]["url"] for c in content[1:]] == [
        "https://mdn.alipayobjects.com/a.png", "https://mdn.alipayobjects.com/b.png"]


async def test_revoke_replaces_what_was_shown():
    results, _ = await replay(t("revoke.sse"))
    assert rtype(terminal(results)) == "run.completed"
    assert final_text(results) == "(Tbox withdrew this answer after its content review.)"
    assert deltas(results)[-1] == final_text(results)


async def test_conversation_missing_is_retried_once_fresh():
    with ReplayServer({CHAT: [t("ok_text.sse"), t("conversation_missing_200.json", content_type=JSON),
                              t("resume.sse")]}) as srv:
        host = LocalHost()
        runner = make_runner("tbox-agent", host)
        await run(runner, host, config=config(srv))
        second = await run(runner, host, config=config(srv))
        assert rtype(terminal(second)) == "run.completed"
        assert final_text(second).endswith("你刚才说了你好。") and "new one" in final_text(second)
        assert [r.json().get("conversationId") for r in srv.find_requests("POST", "/api/chat")] == [None, CID, None]


async def test_a_non_stream_json_answer_is_still_an_answer():
    results, _ = await replay(json_reply(t("ok_nostream.json").body.decode()))
    assert final_text(results) == "非流式回答。"
    assert state_updates(results) == {SESSION: CID}
