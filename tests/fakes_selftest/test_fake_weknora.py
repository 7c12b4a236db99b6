"""Self-test of the WeKnora fake, driven with plain httpx: what it sends is what WeKnora sends."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from tests.fakes.weknora import DEFAULT_REFERENCES, FAULTS, FakeWeKnora

KEY = "sk-selftest-weknora-0001"
AUTH = {"X-API-Key": KEY}


@pytest.fixture
def srv():
    with FakeWeKnora(api_key=KEY) as s:
        yield s
    assert s.handler_errors == []


@pytest.fixture
async def client(srv: FakeWeKnora):
    async with httpx.AsyncClient(base_url=srv.base_url, headers=AUTH, timeout=5) as c:
        yield c


def parse(raw: bytes) -> list[dict[str, Any]]:
    """Split a gin SSE body: exactly ``event:message`` and one ``data:`` line per event, no spaces."""
    out = []
    for block in raw.decode().split("\n\n"):
        if not block:
            continue
        lines = block.split("\n")
        assert lines[0] == "event:message" and len(lines) == 2, block
        assert lines[1].startswith("data:{"), lines[1]
        out.append(json.loads(lines[1][5:]))
    return out


async def new_session(client: httpx.AsyncClient, title: str = "t") -> str:
    r = await client.post("/sessions", json={"title": title})
    assert r.status_code == 201 and r.json()["success"] is True
    return r.json()["data"]["id"]


async def test_session_creation_needs_a_json_body_and_answers_201(client):
    assert (await client.post("/sessions")).status_code == 400
    r = await client.post("/sessions", json={"title": "IM Chat"})
    assert r.status_code == 201
    data = r.json()["data"]
    assert data["title"] == "IM Chat" and data["id"] and "created_at" in data


async def test_bad_or_missing_key_is_401_error_string(srv):
    async with httpx.AsyncClient(base_url=srv.base_url) as c:
        r = await c.post("/sessions", json={}, headers={"X-API-Key": "sk-nope"})
        assert r.status_code == 401 and r.json() == {"error": "Unauthorized: invalid API key"}
        r = await c.post("/sessions", json={})
        assert r.json() == {"error": "Unauthorized: missing authentication"}


async def test_knowledge_chat_sequence(client, srv):
    srv.references = DEFAULT_REFERENCES
    sid = await new_session(client)
    r = await client.post(f"/knowledge-chat/{sid}", json={"query": "hi"})
    assert r.headers["content-type"] == "text/event-stream"
    events = parse(r.content)
    kinds = [e["response_type"] for e in events]
    assert kinds == ["agent_query", "references", "answer", "answer", "answer", "answer", "answer", "complete"]
    assert events[0]["session_id"] == sid and events[0]["assistant_message_id"]
    assert events[1]["knowledge_references"][0]["knowledge_title"] == "彗星.txt"
    assert events[-2]["done"] is True and events[-2]["content"] == ""
    assert len({e["id"] for e in events}) == 1, "every event carries the request id"
    assert all("usage" not in e for e in events), "real WeKnora sends no usage"


async def test_agent_chat_tools_thinking_and_trailing_title(client, srv):
    srv.tools, srv.reasoning, srv.interleave, srv.include_usage = True, ["a", "b"], True, True
    r = await client.post("/sessions", json={})
    sid = r.json()["data"]["id"]  # no title: WeKnora sends one after complete
    events = parse((await client.post(f"/agent-chat/{sid}", json={"query": "hi", "agent_enabled": True})).content)
    kinds = [e["response_type"] for e in events]
    # each call announced twice, as the real server does: pending (no arguments), then with them
    assert kinds[:4] == ["agent_query", "tool_call", "tool_call", "tool_result"]
    assert kinds[4:8] == ["thinking", "answer", "thinking", "answer"], "thinking interleaves with the answer"
    assert kinds[-2:] == ["complete", "session_title"]
    pending, call = events[1]["data"], events[2]["data"]
    assert pending["arguments"] is None and call["arguments"]["query"]
    assert call["tool_name"] == "knowledge_search" and call["tool_call_id"] == events[3]["data"]["tool_call_id"]
    assert pending["tool_call_id"] == call["tool_call_id"]
    assert "usage" in events[-2]


async def test_failed_tool_is_an_error_event_with_the_tool_ids(client, srv):
    srv.tools, srv.tool_fails = True, True
    sid = await new_session(client)
    events = parse((await client.post(f"/agent-chat/{sid}", json={"query": "x", "agent_enabled": True})).content)
    err = next(e for e in events if e["response_type"] == "error")
    assert err["data"]["tool_call_id"] and err["data"]["success"] is False
    assert events[-1]["response_type"] == "complete"


async def test_unknown_session_is_404_app_error(client):
    r = await client.post("/knowledge-chat/nope", json={"query": "x"})
    assert r.status_code == 404
    assert r.json() == {"success": False, "error": {"code": 1003, "message": "Session not found", "details": None}}


async def test_forgotten_sessions_are_gone(client, srv):
    sid = await new_session(client)
    srv.forget_conversations()
    assert (await client.post(f"/knowledge-chat/{sid}", json={"query": "x"})).status_code == 404


async def test_empty_query_is_400(client):
    sid = await new_session(client)
    r = await client.post(f"/knowledge-chat/{sid}", json={"query": ""})
    assert r.status_code == 400 and r.json()["error"]["code"] == 1000


async def test_unknown_route_is_gins_plain_404(client):
    r = await client.post("/chat", json={})
    assert r.status_code == 404 and r.text == "404 page not found"


async def test_stop_ends_the_stream_with_a_stop_event(client, srv):
    srv.answer_tokens, srv.token_delay = ["a"] * 50, 0.05
    sid = await new_session(client)
    async with client.stream("POST", f"/knowledge-chat/{sid}", json={"query": "x"}) as resp:
        body = b""
        async for chunk in resp.aiter_bytes():
            body += chunk
            if b'"answer"' in body and not srv.stopped:
                mid = parse(body.split(b"\n\n", 1)[0] + b"\n\n")[0]["assistant_message_id"]
                r = await client.post(f"/sessions/{sid}/stop", json={"message_id": mid})
                assert r.json() == {"success": True, "message": "Generation stopped"}
    events = parse(body)
    assert events[-1]["response_type"] == "stop" and events[-1]["done"] is True
    assert (await client.post(f"/sessions/{sid}/stop", json={})).status_code == 400


async def test_approval_waits_until_stopped(client, srv):
    srv.tools, srv.approval = True, True
    sid = await new_session(client)

    async def stop_soon() -> None:
        await asyncio.sleep(0.3)
        (mid,) = list(srv.runs)
        await client.post(f"/sessions/{sid}/stop", json={"message_id": mid})

    task = asyncio.create_task(stop_soon())
    events = parse((await client.post(f"/agent-chat/{sid}", json={"query": "x", "agent_enabled": True})).content)
    await task
    kinds = [e["response_type"] for e in events]
    assert kinds == ["agent_query", "tool_call", "tool_call", "tool_approval_required", "stop"]
    assert events[3]["data"]["mcp_tool_name"] == "delete_file"


async def test_direct_principal_scopes_sessions_per_external_user(client, srv):
    srv.direct_principal = True
    r = await client.post("/sessions", json={}, headers={"X-External-User-ID": "alice"})
    sid = r.json()["data"]["id"]
    other = await client.post(f"/knowledge-chat/{sid}", json={"query": "x"}, headers={"X-External-User-ID": "bob"})
    assert other.status_code == 404
    mine = await client.post(f"/knowledge-chat/{sid}", json={"query": "x"}, headers={"X-External-User-ID": "alice"})
    assert mine.status_code == 200


async def test_images_need_image_upload_enabled(client, srv):
    srv.image_upload_enabled = False
    sid = await new_session(client)
    r = await client.post(f"/knowledge-chat/{sid}", json={"query": "x", "images": [{"data": "data:image/png;base64,AA=="}]})
    assert r.status_code == 400 and "Image upload is not enabled" in r.json()["error"]["message"]


@pytest.mark.parametrize("fault", [f for f in FAULTS if f.startswith(("http_", "html_"))])
async def test_http_faults(client, srv, fault):
    sid = await new_session(client)
    srv.fault = fault
    r = await client.post(f"/knowledge-chat/{sid}", json={"query": "x"})
    assert r.status_code == int(fault.split("_")[1])
    if fault.startswith("html_"):
        assert r.headers["content-type"].startswith("text/html")
    elif fault == "http_401":
        assert r.json() == {"error": "Unauthorized: invalid API key"}
    else:
        assert r.json()["success"] is False and isinstance(r.json()["error"]["code"], int)


async def test_stream_faults(client, srv):
    sid = await new_session(client)
    srv.fault = "invalid_json"
    assert b"data:{not json" in (await client.post(f"/knowledge-chat/{sid}", json={"query": "x"})).content
    srv.fault = "error_event"
    events = parse((await client.post(f"/knowledge-chat/{sid}", json={"query": "x"})).content)
    assert events[-1]["response_type"] == "error" and events[-1]["data"]["stage"]
    srv.fault = "empty"
    assert (await client.post(f"/knowledge-chat/{sid}", json={"query": "x"})).content == b""
    srv.fault = "truncated"
    with pytest.raises(httpx.RemoteProtocolError):
        await client.post(f"/knowledge-chat/{sid}", json={"query": "x"})


async def test_stall_pings_send_empty_thinking(client, srv):
    srv.fault, srv.stall_seconds, srv.stall_ping_every = "stall_pings", 0.6, 0.1
    sid = await new_session(client)
    events = parse((await client.post(f"/knowledge-chat/{sid}", json={"query": "x"})).content)
    pings = [e for e in events if e["response_type"] == "thinking" and e["content"] == ""]
    assert len(pings) >= 3


async def test_unknown_fault_is_refused(srv):
    with pytest.raises(ValueError):
        srv.fault = "nope"


async def test_second_key_accepted(client, srv):
    srv.api_keys.add("sk-second-bot-key")
    r = await client.post("/sessions", json={}, headers={"X-API-Key": "sk-second-bot-key"})
    assert r.status_code == 201
