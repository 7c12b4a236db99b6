"""Self-test of the model-API fake (Anthropic Messages + OpenAI Responses), over real loopback sockets
with httpx, including the request bodies the real Claude Code and Codex sent (fixtures fake-api/)."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import pytest

from tests.fakes.model_api import FAULTS, SCENARIOS, FakeModelAPI
from tests.helpers import real_peer_fixtures

KEY = "sk-test"
A_HDRS = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}
O_HDRS = {"Authorization": f"Bearer {KEY}"}
TEXT = "Hello from the fake model."
FIXTURES = real_peer_fixtures("fake-api")


@pytest.fixture
def srv():
    with FakeModelAPI() as s:
        yield s
    assert s.handler_errors == []


@pytest.fixture
async def client(srv: FakeModelAPI):
    async with httpx.AsyncClient(base_url=srv.root_url, timeout=10) as c:
        yield c


def a_body(text: str = "say hello", stream: bool = True, **extra: Any) -> dict[str, Any]:
    return {"model": "claude-test", "max_tokens": 100, "stream": stream,
            "messages": [{"role": "user", "content": [{"type": "text", "text": text}]}], **extra}


def o_body(text: str = "say hello", stream: bool = True, **extra: Any) -> dict[str, Any]:
    return {"model": "fake-model", "stream": stream,
            "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}], **extra}


def parse_sse(raw: bytes) -> list[tuple[str, dict[str, Any]]]:
    """``event:``/``data:`` blocks, strictly: every block has exactly those two lines."""
    out = []
    for block in raw.split(b"\n\n"):
        if not block:
            continue
        lines = block.decode("utf-8").split("\n")
        assert len(lines) == 2 and lines[0].startswith("event: ") and lines[1].startswith("data: "), block[:200]
        data = json.loads(lines[1][6:])
        assert data["type"] == lines[0][7:]
        out.append((lines[0][7:], data))
    return out


async def post(client: httpx.AsyncClient, api: str, body: dict[str, Any] | bytes, path: str = "",
               headers: dict[str, str] | None = None) -> httpx.Response:
    url = path + ("/v1/messages?beta=true" if api == "anthropic" else "/v1/responses")
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    hdrs = {"content-type": "application/json", **(headers if headers is not None else
                                                    (A_HDRS if api == "anthropic" else O_HDRS))}
    return await client.post(url, content=content, headers=hdrs)


def a_text(events: list[tuple[str, dict[str, Any]]]) -> str:
    return "".join(d["delta"]["text"] for n, d in events if n == "content_block_delta"
                   and d["delta"]["type"] == "text_delta")


def o_text(events: list[tuple[str, dict[str, Any]]]) -> str:
    return "".join(d["delta"] for n, d in events if n == "response.output_text.delta")


def a_tool_input(events: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    return json.loads("".join(d["delta"]["partial_json"] for n, d in events if n == "content_block_delta"
                              and d["delta"]["type"] == "input_json_delta"))


def o_call(events: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    [item] = [d["item"] for n, d in events if n == "response.output_item.done" and d["item"]["type"] == "function_call"]
    return item


# -- text streams ----------------------------------------------------------------------------------


async def test_anthropic_text_stream(srv, client):
    body = a_body()
    r = await post(client, "anthropic", body)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = parse_sse(r.content)
    assert [n for n, _ in events] == ["message_start", "content_block_start"] + ["content_block_delta"] * 5 + [
        "content_block_stop", "message_delta", "message_stop"]
    start = events[0][1]["message"]
    n_in = len(json.dumps(body).encode()) // 4
    assert start["model"] == "claude-test" and start["role"] == "assistant" and start["content"] == []
    assert start["usage"] == {"input_tokens": n_in, "output_tokens": 1, "cache_creation_input_tokens": 0,
                              "cache_read_input_tokens": 0}
    assert events[1][1]["content_block"] == {"type": "text", "text": ""}
    assert [d["delta"]["text"] for n, d in events if n == "content_block_delta"] == list(SCENARIOS["text"].answer_tokens)
    assert a_text(events) == TEXT
    assert events[-2][1] == {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                             "usage": {"output_tokens": 7}}
    assert r.headers["request-id"].startswith("req_")


async def test_anthropic_non_stream(srv, client):
    r = await post(client, "anthropic", a_body(stream=False))
    msg = r.json()
    assert r.status_code == 200 and msg["type"] == "message" and msg["stop_reason"] == "end_turn"
    assert msg["content"] == [{"type": "text", "text": TEXT}]
    assert msg["usage"]["output_tokens"] == 7


async def test_openai_text_stream(srv, client):
    body = o_body()
    r = await post(client, "openai", body)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = parse_sse(r.content)
    assert [n for n, _ in events] == [
        "response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
        *["response.output_text.delta"] * 5, "response.output_text.done", "response.content_part.done",
        "response.output_item.done", "response.completed"]
    assert [d["sequence_number"] for _, d in events] == list(range(len(events)))
    assert o_text(events) == TEXT
    assert events[-4][1]["text"] == TEXT
    done = events[-2][1]["item"]
    assert done["type"] == "message" and done["status"] == "completed" and done["content"][0]["text"] == TEXT
    completed = events[-1][1]["response"]
    n_in = len(json.dumps(body).encode()) // 4
    assert completed["status"] == "completed" and completed["output"] == [done]
    assert completed["usage"] == {"input_tokens": n_in, "input_tokens_details": {"cached_tokens": 0},
                                  "output_tokens": 7, "output_tokens_details": {"reasoning_tokens": 0},
                                  "total_tokens": n_in + 7}
    assert events[0][1]["response"]["id"] == completed["id"]


async def test_openai_non_stream(srv, client):
    r = await post(client, "openai", o_body(stream=False))
    doc = r.json()
    assert r.status_code == 200 and doc["object"] == "response" and doc["status"] == "completed"
    assert doc["output"][0]["content"][0]["text"] == TEXT and doc["usage"]["output_tokens"] == 7


async def test_answer_tokens_and_token_delay(srv, client):
    srv.answer_tokens = ["a", "b", "c"]
    srv.token_delay = 0.1
    started = time.monotonic()
    r = await post(client, "anthropic", a_body())
    assert time.monotonic() - started >= 0.18
    assert a_text(parse_sse(r.content)) == "abc"
    r = await post(client, "openai", o_body())
    assert o_text(parse_sse(r.content)) == "abc"


# -- tools -------------------------------------------------------------------------------------------


async def test_anthropic_tool_round_trip(srv, client):
    srv.tool_command = "echo hi"
    body = a_body("run echo hi")
    events = parse_sse((await post(client, "anthropic", body)).content)
    block = events[1][1]["content_block"]
    assert block["type"] == "tool_use" and block["name"] == "Bash" and block["input"] == {}
    assert a_tool_input(events) == {"command": "echo hi"}
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"
    assert a_text(events) == ""
    body["messages"] += [
        {"role": "assistant", "content": [{"type": "tool_use", "id": block["id"], "name": "Bash",
                                           "input": {"command": "echo hi"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": block["id"], "content": "hi"}]},
    ]
    events = parse_sse((await post(client, "anthropic", body)).content)
    assert a_text(events) == TEXT and events[-2][1]["delta"]["stop_reason"] == "end_turn"
    # a new prompt after the finished round trip calls the tool again
    body["messages"] += [{"role": "assistant", "content": [{"type": "text", "text": TEXT}]},
                         {"role": "user", "content": "again"}]
    events = parse_sse((await post(client, "anthropic", body)).content)
    assert a_tool_input(events) == {"command": "echo hi"}
    # non-stream
    msg = (await post(client, "anthropic", a_body(stream=False))).json()
    assert msg["stop_reason"] == "tool_use" and msg["content"][0]["input"] == {"command": "echo hi"}


async def test_openai_tool_round_trip(srv, client):
    srv.tool_command = "ls -la"
    body = o_body("run ls")
    events = parse_sse((await post(client, "openai", body)).content)
    names = [n for n, _ in events]
    assert "response.function_call_arguments.delta" in names and "response.output_text.delta" not in names
    item = o_call(events)
    assert item["name"] == "exec_command" and json.loads(item["arguments"]) == {"cmd": "ls -la"}
    added = [d["item"] for n, d in events if n == "response.output_item.added"][0]
    assert added["type"] == "function_call" and added["arguments"] == "" and added["call_id"] == item["call_id"]
    assert events[-1][1]["response"]["output"] == [item]
    body["input"] += [item, {"type": "function_call_output", "call_id": item["call_id"], "output": "total 0"}]
    events = parse_sse((await post(client, "openai", body)).content)
    assert o_text(events) == TEXT


# -- think, usage ------------------------------------------------------------------------------------


async def test_think_both_apis(srv, client):
    srv.think_tokens = ["Let me", " think."]
    events = parse_sse((await post(client, "anthropic", a_body())).content)
    assert events[1][1]["content_block"]["type"] == "thinking"
    thinking = [d["delta"] for n, d in events if n == "content_block_delta" and d["index"] == 0]
    assert [t["thinking"] for t in thinking if t["type"] == "thinking_delta"] == ["Let me", " think."]
    assert thinking[-1]["type"] == "signature_delta"
    assert [d["index"] for n, d in events if n == "content_block_stop"] == [0, 1]
    assert a_text(events) == TEXT
    events = parse_sse((await post(client, "openai", o_body())).content)
    assert "".join(d["delta"] for n, d in events if n == "response.reasoning_summary_text.delta") == "Let me think."
    done = [d["item"] for n, d in events if n == "response.output_item.done"]
    assert [i["type"] for i in done] == ["reasoning", "message"]
    assert done[0]["summary"] == [{"type": "summary_text", "text": "Let me think."}]
    assert events[-1][1]["response"]["usage"]["output_tokens_details"]["reasoning_tokens"] == 2
    assert o_text(events) == TEXT


async def test_usage_off(srv, client):
    srv.include_usage = False
    events = parse_sse((await post(client, "anthropic", a_body())).content)
    assert "usage" not in events[0][1]["message"] and "usage" not in events[-2][1]
    events = parse_sse((await post(client, "openai", o_body())).content)
    assert events[-1][1]["response"]["usage"] is None
    assert "usage" not in (await post(client, "anthropic", a_body(stream=False))).json()


# -- auth --------------------------------------------------------------------------------------------


async def test_auth(srv, client):
    r = await post(client, "anthropic", a_body(), headers={"x-api-key": "wrong"})
    assert r.status_code == 401
    assert r.json()["type"] == "error" and r.json()["error"]["type"] == "authentication_error"
    assert (await post(client, "anthropic", a_body(), headers={})).status_code == 401
    assert (await post(client, "anthropic", a_body(), headers={"Authorization": f"Bearer {KEY}"})).status_code == 200
    r = await post(client, "openai", o_body(), headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
    assert (await post(client, "openai", o_body(), headers={"x-api-key": KEY})).status_code == 401
    srv.api_keys = {"k1", "k2"}
    assert srv.api_key == "k1"
    assert (await post(client, "anthropic", a_body(), headers={"x-api-key": "k2"})).status_code == 200
    assert (await post(client, "anthropic", a_body())).status_code == 401
    srv.api_keys = set()
    assert (await post(client, "openai", o_body(), headers={})).status_code == 200


# -- faults ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("api", ["anthropic", "openai"])
@pytest.mark.parametrize("fault", [f for f in FAULTS if f.startswith(("http_", "html_"))])
async def test_status_faults(srv, client, api, fault):
    srv.fault = fault
    body = a_body() if api == "anthropic" else o_body()
    r = await post(client, api, body)
    status = int(fault.split("_")[1])
    assert r.status_code == status
    if fault.startswith("html_"):
        assert r.headers["content-type"] == "text/html" and f"<h1>{status}" in r.text
        return
    doc = r.json()
    if api == "anthropic":
        assert doc["type"] == "error" and set(doc["error"]) == {"type", "message"}
        assert doc["error"]["type"] == {401: "authentication_error", 429: "rate_limit_error", 500: "api_error",
                                        413: "request_too_large"}.get(status, doc["error"]["type"])
    else:
        assert set(doc["error"]) == {"message", "type", "param", "code"}
    assert (r.headers.get("retry-after") == "1") == (status == 429)


async def test_fault_validation(srv):
    with pytest.raises(ValueError):
        srv.fault = "nope"
    assert set(FAULTS) >= {"invalid_json", "truncated", "error_event", "empty", "non_utf8", "oversized", "stall",
                           "stall_before_headers", "http_413", "html_503"}


@pytest.mark.parametrize("api", ["anthropic", "openai"])
async def test_invalid_json_empty_and_non_utf8(srv, client, api):
    body = a_body() if api == "anthropic" else o_body()
    srv.fault = "invalid_json"
    r = await post(client, api, body)
    assert r.status_code == 200 and b"data:" not in r.content
    with pytest.raises(ValueError):
        json.loads(r.content)
    srv.fault = "empty"
    r = await post(client, api, body)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream") and r.content == b""
    srv.fault = "non_utf8"
    r = await post(client, api, body)
    assert r.status_code == 200 and b"\xff\xfe" in r.content
    with pytest.raises(UnicodeDecodeError):
        r.content.decode("utf-8")
    good = parse_sse(r.content.replace(b"\xff\xfe", b""))  # the rest of the stream is intact
    assert (a_text(good) if api == "anthropic" else o_text(good)) == TEXT


@pytest.mark.parametrize("api", ["anthropic", "openai"])
async def test_oversized_is_one_huge_line(srv, client, api):
    srv.fault = "oversized"
    srv.oversized_bytes = 2 * 1024 * 1024
    r = await post(client, api, a_body() if api == "anthropic" else o_body())
    longest = max(len(line) for line in r.content.split(b"\n"))
    assert longest > 2 * 1024 * 1024
    events = parse_sse(r.content)
    text = a_text(events) if api == "anthropic" else o_text(events)
    assert text == "x" * (2 * 1024 * 1024) + TEXT


@pytest.mark.parametrize("api", ["anthropic", "openai"])
async def test_truncated_cuts_the_connection_after_some_text(srv, client, api):
    srv.fault = "truncated"
    got = b""
    with pytest.raises(httpx.RemoteProtocolError):
        async with client.stream("POST", "/v1/messages" if api == "anthropic" else "/v1/responses",
                                 json=a_body() if api == "anthropic" else o_body(),
                                 headers=A_HDRS if api == "anthropic" else O_HDRS) as r:
            assert r.status_code == 200
            async for chunk in r.aiter_bytes():
                got += chunk
    complete, _, partial = got.rpartition(b"\n\n")
    events = parse_sse(complete)
    assert (a_text(events) if api == "anthropic" else o_text(events)) == "Hello"
    assert partial.startswith(b"event: ") and b"\n\n" not in partial


async def test_error_event(srv, client):
    srv.fault = "error_event"
    events = parse_sse((await post(client, "anthropic", a_body())).content)
    assert a_text(events) == "Hello"
    assert events[-1] == ("error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    events = parse_sse((await post(client, "openai", o_body())).content)
    assert o_text(events) == "Hello" and events[-1][0] == "response.failed"
    assert events[-1][1]["response"]["status"] == "failed" and events[-1][1]["response"]["error"]["code"]
    r = await post(client, "anthropic", a_body(stream=False))
    assert r.status_code == 500 and r.json()["error"]["type"] == "api_error"


@pytest.mark.parametrize("api", ["anthropic", "openai"])
async def test_stall_sends_the_first_token_then_nothing(srv, client, api):
    srv.fault = "stall"
    srv.stall_seconds = 0.6
    chunks: list[tuple[float, bytes]] = []
    started = time.monotonic()
    async with client.stream("POST", "/v1/messages" if api == "anthropic" else "/v1/responses",
                             json=a_body() if api == "anthropic" else o_body(),
                             headers=A_HDRS if api == "anthropic" else O_HDRS) as r:
        async for chunk in r.aiter_bytes():
            chunks.append((time.monotonic() - started, chunk))
    def first_seen(needle: bytes) -> float:
        seen = b""
        for t, c in chunks:
            seen += c
            if needle in seen:
                return t
        raise AssertionError(needle)

    assert first_seen(b'" from"') - first_seen(b'"Hello"') >= 0.55  # silence between the 1st and 2nd token
    events = parse_sse(b"".join(c for _, c in chunks))
    assert (a_text(events) if api == "anthropic" else o_text(events)) == TEXT


async def test_abandoned_stall_frees_the_handler(srv, client):
    srv.fault = "stall"
    async with client.stream("POST", "/v1/messages", json=a_body(), headers=A_HDRS) as r:
        async for chunk in r.aiter_bytes():
            if b"Hello" in chunk:
                break
    assert await srv.wait_until_async(lambda: srv.active_requests == 0, 3)


async def test_stall_before_headers(srv, client):
    srv.fault = "stall_before_headers"
    srv.stall_seconds = 0.3
    started = time.monotonic()
    with pytest.raises(httpx.RemoteProtocolError):
        await post(client, "openai", o_body())
    assert time.monotonic() - started >= 0.25


async def test_non_stream_faults(srv, client):
    for fault in ("empty", "non_utf8", "oversized"):
        srv.fault = fault
        srv.oversized_bytes = 1000
        r = await post(client, "anthropic", a_body(stream=False))
        assert r.status_code == 200, fault
        if fault == "empty":
            assert r.content == b""
        elif fault == "non_utf8":
            assert b"\xff\xfe" in r.content
        else:
            assert r.json()["content"][0]["text"] == "x" * 1000 + TEXT
    srv.fault = "truncated"
    with pytest.raises(httpx.RemoteProtocolError):
        await post(client, "openai", o_body(stream=False))


# -- scenarios, HEAD, records ---------------------------------------------------------------------------


async def test_scenario_text_ignores_programmatic_knobs(srv, client):
    srv.answer_tokens = ["other"]
    srv.tool_command = "echo no"
    srv.fault = "http_500"
    events = parse_sse((await post(client, "anthropic", a_body(), path="/text")).content)
    assert a_text(events) == TEXT
    events = parse_sse((await post(client, "openai", o_body(), path="/text")).content)
    assert o_text(events) == TEXT


@pytest.mark.parametrize("scenario,command", [("tool", "echo hi"), ("toolw", "touch created-by-tool.txt"),
                                              ("toolsleep", "sleep 45 && echo done")])
async def test_tool_scenarios(srv, client, scenario, command):
    body = a_body()
    events = parse_sse((await post(client, "anthropic", body, path=f"/{scenario}")).content)
    assert a_tool_input(events) == {"command": command}
    tid = events[1][1]["content_block"]["id"]
    body["messages"] += [{"role": "assistant", "content": [{"type": "tool_use", "id": tid, "name": "Bash",
                                                            "input": {"command": command}}]},
                         {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tid, "content": ""}]}]
    events = parse_sse((await post(client, "anthropic", body, path=f"/{scenario}")).content)
    assert a_text(events) == "The tool ran; done."
    body = o_body()
    item = o_call(parse_sse((await post(client, "openai", body, path=f"/{scenario}")).content))
    assert json.loads(item["arguments"]) == {"cmd": command}
    body["input"] += [item, {"type": "function_call_output", "call_id": item["call_id"], "output": ""}]
    assert o_text(parse_sse((await post(client, "openai", body, path=f"/{scenario}")).content)) == "The tool ran; done."


async def test_slow_scenario_stalls(srv, client):
    srv.stall_seconds = 0.3
    started = time.monotonic()
    events = parse_sse((await post(client, "openai", o_body(), path="/slow")).content)
    assert time.monotonic() - started >= 0.25 and o_text(events) == TEXT


@pytest.mark.parametrize("scenario,status,a_type,message", [
    ("err500", 500, "api_error", "fake internal error"),
    ("err429", 429, "rate_limit_error", "fake rate limit"),
    ("err401", 401, "authentication_error", "fake: invalid api key"),
])
async def test_error_scenarios(srv, client, scenario, status, a_type, message):
    r = await post(client, "anthropic", a_body(), path=f"/{scenario}")
    assert r.status_code == status and r.json()["error"] == {"type": a_type, "message": message}
    r = await post(client, "openai", o_body(), path=f"/{scenario}")
    assert r.status_code == status and r.json()["error"]["message"] == message
    assert (r.headers.get("retry-after") == "1") == (status == 429)


async def test_unknown_scenario_and_paths(srv, client):
    r = await post(client, "anthropic", a_body(), path="/nope")
    assert r.status_code == 404 and "nope" in r.json()["error"]["message"] and "toolsleep" in r.json()["error"]["message"]
    r = await client.post("/v1/chat/completions", json={}, headers=O_HDRS)
    assert r.status_code == 404 and "error" in r.json() and "type" in r.json()["error"]
    r = await client.get("/v1/messages", headers=A_HDRS)
    assert r.status_code == 405 and r.json()["type"] == "error"


async def test_head_probe_on_any_path(srv, client):
    for path in ("/", "/text", "/tool", "/v1/messages", "/anything/else"):
        r = await client.head(path)
        assert r.status_code == 200 and r.content == b"", path
    srv.fault = "html_502"
    assert (await client.head("/err500")).status_code == 200


async def test_base_urls_and_count_tokens(srv, client):
    assert srv.anthropic_base_url() == srv.root_url
    assert srv.anthropic_base_url("tool") == srv.root_url + "/tool"
    assert srv.openai_base_url("text") == srv.root_url + "/text/v1"
    r = await client.post("/tool/v1/messages/count_tokens", content=b"x" * 40, headers=A_HDRS)
    assert r.json() == {"input_tokens": 10}


async def test_model_requests_and_agent_pids(srv, client):
    await client.head("/text")
    await post(client, "anthropic", a_body(), path="/text", headers={**A_HDRS, "x-fake-agent-pid": "4242"})
    await post(client, "openai", o_body(), headers={**O_HDRS, "x-fake-agent-pid": "17"})
    await post(client, "openai", o_body(), headers={**O_HDRS, "x-fake-agent-pid": "junk"})
    await post(client, "anthropic", a_body(), headers={"x-api-key": "wrong"})  # rejected, still recorded
    reqs = srv.model_requests()
    assert [r.api for r in reqs] == ["anthropic", "openai", "openai", "anthropic"]
    api, body, headers = reqs[0]
    assert body["model"] == "claude-test" and headers["x-fake-agent-pid"] == "4242"
    assert srv.agent_pids() == [4242, 17]
    assert len(srv.requests) == 5
    # the server thread counts a request done just after the client has its response
    assert await srv.wait_until_async(lambda: srv.active_requests == 0, timeout=3)


async def test_concurrent_streams(srv, client):
    srv.token_delay = 0.05
    results = await asyncio.gather(*(post(client, "anthropic" if i % 2 else "openai",
                                          a_body() if i % 2 else o_body()) for i in range(6)))
    assert all(r.status_code == 200 for r in results)
    assert srv.peak_active_requests >= 2


# -- the real request bodies (trimmed captures of Claude Code 2.1.197 and Codex 0.171.0) --------------


def fixture_bytes(name: str) -> bytes:
    path = FIXTURES / name
    if not path.is_file():
        pytest.skip(f"real-peer fixture {path} is not available")
    return path.read_bytes()


async def test_real_claude_bodies(srv, client):
    first = fixture_bytes("anthropic-messages-request-claude-first-turn.json")
    after = fixture_bytes("anthropic-messages-request-claude-after-tool.json")
    events = parse_sse((await post(client, "anthropic", first, path="/text")).content)
    assert a_text(events) == TEXT
    assert events[0][1]["message"]["model"] == "claude-opus-4-8"
    assert events[0][1]["message"]["usage"]["input_tokens"] == len(first) // 4
    # with a tool scenario: the first turn calls Bash, the captured after-tool body gets the text
    events = parse_sse((await post(client, "anthropic", first, path="/tool")).content)
    assert a_tool_input(events) == {"command": "echo hi"}
    events = parse_sse((await post(client, "anthropic", after, path="/tool")).content)
    assert a_text(events) == "The tool ran; done."
    srv.tool_command = "echo hi"
    events = parse_sse((await post(client, "anthropic", after)).content)
    assert a_text(events) == TEXT
    assert [r.body["model"] for r in srv.model_requests()] == ["claude-opus-4-8"] * 4


async def test_real_codex_bodies(srv, client):
    first = fixture_bytes("openai-responses-request-codex-first-turn.json")
    after = fixture_bytes("openai-responses-request-codex-after-tool.json")
    events = parse_sse((await post(client, "openai", first, path="/text")).content)
    assert o_text(events) == TEXT
    assert events[-1][1]["response"]["usage"]["input_tokens"] == len(first) // 4
    item = o_call(parse_sse((await post(client, "openai", first, path="/tool")).content))
    assert item["name"] == "exec_command" and json.loads(item["arguments"]) == {"cmd": "echo hi"}
    assert o_text(parse_sse((await post(client, "openai", after, path="/tool")).content)) == "The tool ran; done."
    srv.tool_command = "echo hi"
    assert o_text(parse_sse((await post(client, "openai", after)).content)) == TEXT
    assert {r.api for r in srv.model_requests()} == {"openai"}
