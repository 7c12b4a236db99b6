"""Self-test of the fake OpenAI Chat Completions server (used by real n8n / Langflow peers)."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.fakes.openai import FakeOpenAI

AUTH = {"Authorization": "Bearer sk-test"}


@pytest.fixture
def llm():
    with FakeOpenAI() as s:
        s.token_delay = 0.0
        yield s
    assert s.handler_errors == []


def chat(**extra):
    return {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}], **extra}


def sse(raw: bytes) -> list:
    out = []
    for block in raw.decode().split("\n\n"):
        if block.startswith("data: "):
            data = block[6:]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


def test_streaming_chunks_then_done(llm):
    r = httpx.post(llm.base_url + "/chat/completions", headers=AUTH,
                   json=chat(stream=True, stream_options={"include_usage": True}))
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = sse(r.content)
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == "Hello from the fake model."
    assert [c["choices"][0]["delta"]["content"] for c in chunks[1:4]] == ["Hello", " ", "from"]
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] == 18
    assert llm.chat_requests[0]["stream"] is True


def test_non_stream_and_responder(llm):
    llm.responder = lambda body: "you said " + FakeOpenAI.last_user_text(body)
    doc = httpx.post(llm.base_url + "/chat/completions", headers=AUTH, json=chat()).json()
    assert doc["object"] == "chat.completion"
    assert doc["choices"][0]["message"] == {"role": "assistant", "content": "you said hi"}
    assert doc["usage"]["prompt_tokens"] == 12


def test_models_auth_and_unknown_routes(llm):
    assert [m["id"] for m in httpx.get(llm.base_url + "/models", headers=AUTH).json()["data"]] == llm.models
    r = httpx.post(llm.base_url + "/chat/completions", json=chat())
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
    r = httpx.post(llm.base_url + "/responses", headers=AUTH, json={})
    assert r.status_code == 404 and "error" in r.json()


def test_faults(llm):
    r = httpx.post(llm.base_url + "/chat/completions", headers=AUTH,
                   json={**chat(), "messages": [{"role": "user", "content": "please FAIL"}]})
    assert r.status_code == 500 and r.json()["error"]["message"] == "fake upstream failure"
    llm.fault = "http_429"
    r = httpx.post(llm.base_url + "/chat/completions", headers=AUTH, json=chat())
    assert r.status_code == 429 and r.json()["error"]["type"] == "rate_limit_error"


def test_tool_call_then_text(llm):
    tools = [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}]
    body = chat(tools=tools, messages=[{"role": "user", "content": "TOOL weather?"}])
    doc = httpx.post(llm.base_url + "/chat/completions", headers=AUTH, json=body).json()
    (call,) = doc["choices"][0]["message"]["tool_calls"]
    assert call["function"]["name"] == "weather" and json.loads(call["function"]["arguments"]) == {"city": "Paris"}
    body["messages"] += [doc["choices"][0]["message"], {"role": "tool", "tool_call_id": call["id"], "content": "sunny"}]
    doc = httpx.post(llm.base_url + "/chat/completions", headers=AUTH, json=body).json()
    assert doc["choices"][0]["message"]["content"] == llm.reply
    streamed = sse(httpx.post(llm.base_url + "/chat/completions", headers=AUTH,
                              json={**chat(tools=tools, stream=True),
                                    "messages": [{"role": "user", "content": "TOOL"}]}).content)
    assert streamed[1]["choices"][0]["delta"]["tool_calls"][0]["function"]["name"] == "weather"
    assert streamed[-2]["choices"][0]["finish_reason"] == "tool_calls"
