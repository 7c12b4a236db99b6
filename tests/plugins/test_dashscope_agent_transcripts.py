"""DashScopeAgent replaying plain-text DashScope wire transcripts byte for byte over loopback.

The transcripts (transcripts/dashscope/*.sse) keep DashScope's framing exactly: ``id:``, ``event:``,
the ``:HTTP_STATUS/<code>`` comment line, ``data:`` without a space, ``finish_reason`` as the string
``"null"``. There is no recorded real DashScope session in ../shared/fixtures/real-peers/ (SaaS
only); these follow platforms.md §4 and the dashscope SDK's response model. Request shapes are
asserted in test_dashscope_agent.py, because a replay cannot notice a dropped request field.
"""

from __future__ import annotations

import pytest

from runners_cli.host import LocalHost
from tests.fakes.replay import ReplayServer, transcript
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

SESSION = stored_key("dashscope.session_id")
SID = "f4b6e1d27c9a4e0b8c3d5a6f7e8d9c0b"
SSE = "text/event-stream;charset=UTF-8"


async def replay(name: str, drop: bool = False, **extra):
    reply = transcript("dashscope", name, content_type=SSE, drop=drop)
    with ReplayServer({"POST /api/v1/apps/{app_id}/completion": reply}) as srv:
        host = LocalHost()
        config = {"base-url": srv.root_url + "/api/v1/", "api-key": "sk-replay-0000", "app-id": "a1",
                  "app-type": "agent", **extra}
        return await run(make_runner("dashscope-agent", host), host, config=config)


async def test_agent_stream():
    results = await replay("ok_agent_stream.sse")
    assert final_text(results) == "我是通义千问，很高兴为你服务。"
    assert state_updates(results) == {SESSION: SID}
    assert terminal(results).usage.model_dump() == {"prompt_tokens": 58, "completion_tokens": 4, "total_tokens": 62}


async def test_stream_without_trailing_blank_line():
    results = await replay("ok_no_trailing_newline.sse")
    assert rtype(terminal(results)) == "run.completed"
    assert final_text(results) == "我是通义千问，很高兴为你服务。"


async def test_rag_agent_search_step_and_references():
    results = await replay("ok_agent_rag_thoughts.sse")
    started = [r.data for r in results if rtype(r) == "tool.call.started"]
    completed = [r.data for r in results if rtype(r) == "tool.call.completed"]
    assert started == [{"tool_call_id": "step-1", "tool_name": "知识检索", "parameters": {"query": "退货政策"}}]
    assert completed[0]["result"] == {"output": [{"docName": "售后手册.pdf", "content": "七天无理由退货"}]}
    assert len(completed) == 1, "the step re-sent on every event is one tool call"
    assert final_text(results) == "支持七天无理由退货[1]。\n\n参考资料来自:\n[1] 售后手册.pdf"
    assert terminal(results).usage.total_tokens == 65


async def test_rag_references_with_a_custom_heading():
    results = await replay("ok_agent_rag_thoughts.sse", references_quote="References:")
    assert final_text(results).endswith("\n\nReferences:\n[1] 售后手册.pdf")


async def test_workflow_message_format():
    results = await replay("ok_workflow_message_format.sse", **{"app-type": "workflow"})
    assert final_text(results) == "今天杭州晴。"
    assert terminal(results).usage.model_dump() == {"prompt_tokens": 51, "completion_tokens": 8, "total_tokens": 59}


async def test_error_event_midstream():
    results = await replay("error_event_midstream.sse")
    code, retryable, message = failure(results)
    assert (code, retryable) == ("upstream.bad_request", False)
    assert "HTTP 400 DataInspectionFailed" in message and "inappropriate" in message
    assert final_text(results).startswith("好的，") and "incomplete" in final_text(results)
    assert state_updates(results) == {SESSION: SID}


async def test_malformed_line():
    code, retryable, _ = failure(await replay("malformed_line.sse"))
    assert (code, retryable) == ("upstream.protocol", False)


@pytest.mark.parametrize("drop", [False, True])
async def test_stream_ending_without_stop_is_not_a_success(drop):
    results = await replay("truncated_stream.sse", drop=drop)
    code, retryable, _ = failure(results)
    assert (code, retryable) == ("upstream.unavailable", True)
    assert final_text(results).startswith("我是通义")


@pytest.mark.parametrize("remove", [False, True])
async def test_think_tags_in_the_answer(remove):
    results = await replay("ok_think_tags_in_answer.sse", **{"remove-think": remove})
    if remove:
        assert final_text(results) == "你好！"
        assert not any("打招呼" in d for d in deltas(results))
    else:
        assert final_text(results) == "<think>\n用户在打招呼</think>\n\n你好！"


async def test_incremental_thoughts_two_calls_of_one_plugin():
    """Incremental thoughts: the first call's input arrives only with its observation; a second
    call of the same plugin with another input is a second tool call."""
    results = await replay("ok_agent_two_tool_calls.sse")
    started = [r.data for r in results if rtype(r) == "tool.call.started"]
    completed = [r.data for r in results if rtype(r) == "tool.call.completed"]
    assert [s["tool_call_id"] for s in started] == ["step-1", "step-2"]
    assert started[1]["parameters"] == {"city": "上海"}
    assert [c["tool_call_id"] for c in completed] == ["step-1", "step-2"]
    assert [c["result"] for c in completed] == [{"weather": "晴"}, {"weather": "雨"}]
    assert final_text(results) == "<think>\n需要查两个城市的天气。\n</think>\n杭州晴，上海雨。"
