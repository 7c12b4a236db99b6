"""Self-test of the DashScope fake, driven with plain httpx (no runner involved)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from tests.fakes.dashscope import FAULTS, FakeDashScope

KEY = "sk-self-test"
APP = "app-self"
SSE_HEADERS = {"Authorization": f"Bearer {KEY}", "X-DashScope-SSE": "enable"}
BODY = {"input": {"prompt": "hi"}, "parameters": {"incremental_output": True}, "debug": {}}


@pytest.fixture
def srv():
    with FakeDashScope(api_key=KEY, app_id=APP) as s:
        yield s
    assert s.handler_errors == []


@pytest.fixture
async def client(srv):
    async with httpx.AsyncClient(base_url=srv.base_url, timeout=5) as c:
        yield c


def blocks(raw: bytes) -> list[dict[str, Any]]:
    """Each SSE block as {id, event, status, data}; asserts DashScope's exact framing."""
    out = []
    for block in raw.decode().split("\n\n"):
        if not block.strip():
            continue
        lines = block.split("\n")
        assert lines[0].startswith("id:") and lines[1].startswith("event:") and lines[2].startswith(":HTTP_STATUS/")
        assert lines[3].startswith("data:") and not lines[3].startswith("data: "), "no space after the colon"
        out.append({"id": int(lines[0][3:]), "event": lines[1][6:], "status": int(lines[2][13:]),
                    "data": json.loads(lines[3][5:])})
    return out


async def post(client, body=None, headers=None, app=APP):
    return await client.post(f"/apps/{app}/completion", json=body or BODY, headers=headers or SSE_HEADERS)


async def test_stream_framing_null_string_and_stop(client):
    r = await post(client)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    evs = blocks(r.content)
    assert [e["id"] for e in evs] == list(range(1, len(evs) + 1))
    assert {e["event"] for e in evs} == {"result"} and {e["status"] for e in evs} == {200}
    reasons = [e["data"]["output"]["finish_reason"] for e in evs]
    assert reasons[:-1] == ["null"] * (len(evs) - 1) and reasons[-1] == "stop"
    assert "".join(e["data"]["output"]["text"] for e in evs) == "Hello, world!"
    assert len({e["data"]["output"]["session_id"] for e in evs}) == 1
    assert evs[-1]["data"]["usage"]["models"][0]["output_tokens"] == 4


async def test_cumulative_text_without_incremental_output(client):
    evs = blocks((await post(client, {"input": {"prompt": "hi"}})).content)
    texts = [e["data"]["output"]["text"] for e in evs]
    assert texts[:4] == ["Hello", "Hello, ", "Hello, world", "Hello, world!"] and texts[-1] == "Hello, world!"


async def test_without_the_sse_header_one_json_answer(client):
    r = await post(client, headers={"Authorization": f"Bearer {KEY}"})
    doc = r.json()
    assert doc["output"]["text"] == "Hello, world!" and doc["output"]["finish_reason"] == "stop"


async def test_session_continues_and_forgotten_sessions(srv, client):
    sid = blocks((await post(client)).content)[0]["data"]["output"]["session_id"]
    again = blocks((await post(client, {**BODY, "input": {"prompt": "2", "session_id": sid}})).content)
    assert again[0]["data"]["output"]["session_id"] == sid
    # the handler records the turn after the last byte went out: wait for it instead of racing it
    assert await srv.wait_until_async(lambda: [t[0] for t in srv.sessions[sid].turns] == ["hi", "2"], timeout=5)
    srv.forget_conversations()
    r = await post(client, {**BODY, "input": {"prompt": "3", "session_id": sid}})
    assert r.status_code == 400 and r.json()["code"] == "InvalidParameter" and sid in r.json()["message"]
    srv.forgotten_session = "restart"
    fresh = blocks((await post(client, {**BODY, "input": {"prompt": "4", "session_id": sid}})).content)
    assert fresh[0]["data"]["output"]["session_id"] != sid


async def test_auth_keys_and_apps(srv, client):
    r = await post(client, headers={"Authorization": "Bearer sk-wrong", "X-DashScope-SSE": "enable"})
    assert r.status_code == 401 and r.json()["code"] == "InvalidApiKey" and r.json()["request_id"]
    srv.api_keys.add("sk-second")
    assert (await post(client, headers={"Authorization": "Bearer sk-second", "X-DashScope-SSE": "enable"})).status_code == 200
    r = await post(client, app="nope")
    assert r.status_code == 404 and r.json()["code"] == "AppNotFound"


async def test_request_validation(client):
    r = await post(client, {"input": {"prompt": ""}})
    assert r.status_code == 400 and r.json()["code"] == "InvalidParameter"
    r = await post(client, {"input": {"prompt": "x", "image_list": ["data:image/png;base64,AAAA"]}})
    assert r.status_code == 400 and "image_list" in r.json()["message"]


async def test_thoughts_only_with_has_thoughts(srv, client):
    srv.reasoning = ["a", "b"]
    srv.tool = {"name": "calc", "input": {"x": 1}, "observation": {"y": 2}}
    plain = blocks((await post(client)).content)
    assert not any("thoughts" in e["data"]["output"] for e in plain)
    body = {**BODY, "parameters": {"incremental_output": True, "has_thoughts": True}}
    evs = blocks((await post(client, body)).content)
    thoughts = [t for e in evs for t in e["data"]["output"].get("thoughts", [])]
    assert [t["thought"] for t in thoughts if t["action_type"] == "reasoning"] == ["a", "b"]
    tools = [t for t in thoughts if t["action_type"] == "api"]
    assert tools[0]["action_input"] == {"x": 1} and json.loads(tools[-1]["observation"]) == {"y": 2}


async def test_workflow_modes(srv, client):
    srv.mode = "workflow"
    body = {"input": {"prompt": "go", "biz_params": {"k": "v"}},
            "parameters": {"incremental_output": True, "flow_stream_mode": "message_format"}}
    evs = blocks((await post(client, body)).content)
    # the documented message_format stream: node messages without ``text``, the End node closed, then
    # one last event whose ``text`` repeats the whole answer (Bailian "调用工作流应用" example)
    *streamed, closed, last = evs
    assert all("text" not in e["data"]["output"] for e in [*streamed, closed])
    assert "".join(e["data"]["output"]["workflow_message"]["message"]["content"] for e in streamed) == "Hello, world!"
    assert closed["data"]["output"]["workflow_message"]["node_is_completed"] is True
    assert last["data"]["output"]["text"] == "Hello, world!" and "workflow_message" not in last["data"]["output"]
    assert evs[0]["data"]["usage"] == {} and evs[-1]["data"]["usage"]["models"]
    assert srv.calls[-1].body["input"]["biz_params"] == {"k": "v"}
    body["parameters"]["flow_stream_mode"] = "agent_format"
    evs = blocks((await post(client, body)).content)
    assert "".join(e["data"]["output"]["text"] for e in evs) == "Hello, world!"


@pytest.mark.parametrize("fault", [f for f in FAULTS if f.startswith(("http_", "html_"))])
async def test_http_faults(srv, client, fault):
    srv.fault = fault
    r = await post(client)
    assert r.status_code == int(fault.split("_")[1])
    if fault.startswith("http_"):
        assert set(r.json()) == {"code", "message", "request_id"}
    else:
        assert r.headers["content-type"].startswith("text/html")


async def test_error_event_frames_the_status_in_the_comment(srv, client):
    srv.fault = "error_event"
    evs = blocks((await post(client)).content)
    assert evs[-1]["event"] == "error" and evs[-1]["status"] == 500
    assert set(evs[-1]["data"]) == {"code", "message", "request_id"}
    assert evs[0]["event"] == "result"


@pytest.mark.parametrize("fault", ["empty", "invalid_json", "non_utf8"])
async def test_body_faults(srv, client, fault):
    srv.fault = fault
    r = await post(client)
    assert r.status_code == 200
    if fault == "empty":
        assert r.content == b""
    elif fault == "invalid_json":
        assert r.content.endswith(b"data:{not json")
    else:
        assert b"\xff\xfe" in r.content


async def test_truncated_drops_the_connection(srv, client):
    srv.fault = "truncated"
    with pytest.raises(httpx.RemoteProtocolError):
        await post(client)


async def test_stall_pings_send_empty_progress_chunks(srv):
    srv.fault = "stall_pings"
    srv.stall_ping_every = 0.05
    async with httpx.AsyncClient(base_url=srv.base_url, timeout=5) as c:
        async with c.stream("POST", f"/apps/{APP}/completion", json=BODY, headers=SSE_HEADERS) as r:
            got = b""
            async for chunk in r.aiter_bytes():
                got += chunk
                if got.count(b"event:result") >= 4:
                    break
    texts = [json.loads(line[5:])["output"]["text"] for line in got.split(b"\n") if line.startswith(b"data:")]
    assert texts[0] == "Hello" and texts[1:4] == ["", "", ""]
    assert await srv.wait_until_async(lambda: srv.active_requests == 0, timeout=3)


async def test_stall_before_headers_and_active_requests(srv):
    srv.fault = "stall_before_headers"
    async with httpx.AsyncClient(base_url=srv.base_url, timeout=httpx.Timeout(0.3)) as c:
        with pytest.raises(httpx.ReadTimeout):
            await post(c)
    assert await srv.wait_until_async(lambda: srv.active_requests == 0, timeout=3)


async def test_oversized_event(srv, client):
    srv.fault = "oversized"
    srv.oversized_bytes = 1024 * 1024
    r = await post(client)
    assert len(r.content) > 1024 * 1024


async def test_concurrent_requests_are_independent(srv, client):
    rs = await asyncio.gather(*(post(client, {**BODY, "input": {"prompt": f"q{i}"}}) for i in range(5)))
    sids = {blocks(r.content)[0]["data"]["output"]["session_id"] for r in rs}
    assert len(sids) == 5 and len(srv.calls) == 5
