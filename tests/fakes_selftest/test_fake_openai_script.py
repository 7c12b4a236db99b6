"""Self-test of the fake OpenAI server's scripted answers (``script``: Say / ToolCalls / Fail) and the
contract-suite hooks it shares with every platform fake, over loopback with httpx."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.fakes.openai import Fail, FakeOpenAI, Say, ToolCalls
from tests.fakes_selftest import test_fake_openai as plain
from tests.fakes_selftest.test_fake_openai import AUTH, sse

llm = plain.llm  # the same fixture: a started fake with no token delay


def post(llm: FakeOpenAI, headers: dict[str, str] | None = None, **extra) -> httpx.Response:
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}], **extra}
    return httpx.post(llm.base_url + "/chat/completions", headers=AUTH if headers is None else headers, json=body)


def deltas(events: list) -> list[dict]:
    return [e["choices"][0]["delta"] for e in events if isinstance(e, dict) and e.get("choices")]


def test_steps_are_consumed_in_order_then_the_default_answers(llm):
    llm.script = [Say("first"), "second", Say("third", usage={"prompt_tokens": 1, "completion_tokens": 2,
                                                               "total_tokens": 3})]
    answers = [post(llm).json() for _ in range(4)]
    assert [a["choices"][0]["message"]["content"] for a in answers] == ["first", "second", "third", llm.reply]
    assert answers[2]["usage"]["total_tokens"] == 3 and answers[3]["usage"] == llm.usage
    assert llm.script == [] and len(llm.chat_requests) == 4


def test_tool_calls_non_streamed_are_parallel_with_counted_ids(llm):
    llm.script = [ToolCalls([("get_weather", {"city": "Paris"}), ("get_time", {})], text="Checking."),
                  ToolCalls([("get_weather", {"city": "Rome"})])]
    first = post(llm).json()["choices"][0]
    assert first["finish_reason"] == "tool_calls" and first["message"]["content"] == "Checking."
    assert [(c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
            for c in first["message"]["tool_calls"]] == [("call_1", "get_weather", {"city": "Paris"}),
                                                         ("call_2", "get_time", {})]
    second = post(llm).json()["choices"][0]["message"]["tool_calls"]
    assert [c["id"] for c in second] == ["call_3"]


def test_streamed_tool_calls_come_in_fragments_like_openai(llm):
    llm.script = [ToolCalls([("get_weather", {"city": "Paris"}), ("get_time", {"tz": "UTC"})])]
    events = sse(post(llm, stream=True).content)
    assert events[-1] == "[DONE]"
    frags = [tc for d in deltas(events) for tc in d.get("tool_calls") or []]
    heads = [f for f in frags if "id" in f]
    assert [(f["index"], f["id"], f["function"]["name"], f["function"]["arguments"]) for f in heads] == [
        (0, "call_1", "get_weather", ""), (1, "call_2", "get_time", "")]
    for index, args in ((0, {"city": "Paris"}), (1, {"tz": "UTC"})):
        parts = [f["function"]["arguments"] for f in frags if f["index"] == index and "id" not in f]
        assert len(parts) >= 2 and json.loads("".join(parts)) == args
    assert events[-2]["choices"][0]["finish_reason"] == "tool_calls"


def test_say_streams_reasoning_then_tokens_and_usage(llm):
    llm.script = [Say("Sunny today.", reasoning="Look outside.")]
    events = sse(post(llm, stream=True, stream_options={"include_usage": True}).content)
    ds = deltas(events)
    reasoning = "".join(d.get("reasoning_content", "") for d in ds)
    text = "".join(d.get("content", "") for d in ds)
    assert reasoning == "Look outside." and text == "Sunny today."
    first_text = next(i for i, d in enumerate(ds) if d.get("content"))
    assert all("reasoning_content" in d for d in ds[1:first_text])
    assert events[-2]["usage"]["total_tokens"] == llm.usage["total_tokens"]


@pytest.mark.parametrize(("step", "status", "code", "says"), [
    (Fail(400, "context_length_exceeded"), 400, "context_length_exceeded", "maximum context length"),
    (Fail(429, "insufficient_quota"), 429, "insufficient_quota", "quota"),
    (Fail(503, "The engine is busy right now"), 503, None, "The engine is busy right now"),
])
def test_fail_steps_answer_openai_error_envelopes(llm, step, status, code, says):
    llm.script = [step]
    r = post(llm, stream=True)
    err = r.json()["error"]
    assert r.status_code == status and err["code"] == code and says in err["message"]
    assert post(llm).status_code == 200  # the step is used up


def test_platform_hooks_answer_tokens_usage_reasoning_and_keys(llm):
    llm.answer_tokens = ["Hel", "lo", "!"]
    llm.include_usage = False
    llm.reasoning = "hmm"
    events = sse(post(llm, stream=True, stream_options={"include_usage": True}).content)
    assert [d["content"] for d in deltas(events) if d.get("content")] == ["Hel", "lo", "!"]
    assert "".join(d.get("reasoning_content", "") for d in deltas(events)) == "hmm"
    assert not any(isinstance(e, dict) and e.get("usage") for e in events)
    doc = post(llm).json()
    assert "usage" not in doc and doc["choices"][0]["message"]["reasoning_content"] == "hmm"
    llm.api_keys.add("sk-second-bot")
    assert post(llm, headers={"Authorization": "Bearer sk-second-bot"}).status_code == 200
    assert post(llm, headers={"Authorization": "Bearer sk-nobody"}).status_code == 401
    assert llm.wait_until(lambda: llm.active_requests == 0, timeout=3)  # counted done just after the response


def test_fault_names_are_validated_and_served(llm):
    with pytest.raises(ValueError):
        llm.fault = "no_such_fault"
    llm.fault = "html_502"
    r = post(llm)
    assert r.status_code == 502 and r.headers["content-type"].startswith("text/html")
    llm.fault = "error_event"
    events = sse(post(llm, stream=True).content)
    assert any(isinstance(e, dict) and "error" in e for e in events) and "[DONE]" not in events
    llm.fault = "invalid_json"
    with pytest.raises(ValueError):
        post(llm).json()
    llm.fault = "empty"
    assert post(llm, stream=True).content == b""
    llm.fault = "truncated"
    with pytest.raises(httpx.RemoteProtocolError):
        post(llm, stream=True)
    llm.fault = "non_utf8"
    with pytest.raises(UnicodeDecodeError):
        post(llm, stream=True).content.decode("utf-8")
    llm.fault = None
    llm.script = [Say("kept for later")]
    llm.fault = "http_500"
    assert post(llm).status_code == 500 and llm.script  # a sticky fault does not use up a step
