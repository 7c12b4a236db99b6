"""Self-test of the Coze fake, driven with plain httpx: what it sends is what real Coze sends."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.fakes.coze import FAULTS, FakeCoze

KEY = "pat_selftest_token_0001"
BOT = "7400000000000000001"
AUTH = {"Authorization": f"Bearer {KEY}"}


def chat_body(text: str = "hi", **extra: Any) -> dict[str, Any]:
    return {"bot_id": BOT, "user_id": "u1", "stream": True, "auto_save_history": True,
            "additional_messages": [{"role": "user", "type": "question", "content": text, "content_type": "text"}],
            **extra}


@pytest.fixture
def srv():
    with FakeCoze(api_key=KEY, bot_id=BOT) as s:
        yield s
    assert s.handler_errors == []


@pytest.fixture
async def client(srv: FakeCoze):
    async with httpx.AsyncClient(base_url=srv.base_url, headers=AUTH, timeout=5) as c:
        yield c


def parse(raw: bytes) -> list[tuple[str, Any]]:
    """Split a Coze stream the way cozepy does: exactly one event: and one data: line per event."""
    out = []
    for block in raw.decode().split("\n\n"):
        if not block:
            continue
        lines = block.split("\n")
        assert len(lines) == 2, block
        assert lines[0].startswith("event:") and not lines[0].startswith("event: "), lines[0]
        assert lines[1].startswith("data:") and not lines[1].startswith("data: "), lines[1]
        out.append((lines[0][6:], json.loads(lines[1][5:])))
    return out


async def stream(client, body=None, params=None) -> tuple[httpx.Response, list[tuple[str, Any]]]:
    r = await client.post("/v3/chat", json=body or chat_body(), params=params)
    return r, parse(r.content) if r.headers.get("content-type", "").startswith("text/event-stream") else []


async def test_stream_order_framing_and_ids(srv, client):
    r, events = await stream(client)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    names = [n for n, _ in events]
    assert names[:2] == ["conversation.chat.created", "conversation.chat.in_progress"]
    assert names[-2:] == ["conversation.chat.completed", "done"]
    assert events[-1][1] == "[DONE]" and r.content.endswith(b'event:done\ndata:"[DONE]"\n\n')
    deltas = [d for n, d in events if n == "conversation.message.delta"]
    assert "".join(d["content"] for d in deltas) == "Hello, world!"
    completed = [d for n, d in events if n == "conversation.message.completed"]
    assert [d["type"] for d in completed] == ["answer", "verbose", "follow_up", "follow_up"]
    assert completed[0]["content"] == "Hello, world!" and completed[0]["id"] == deltas[0]["id"]
    assert json.loads(completed[1]["content"])["msg_type"] == "generate_answer_finish"
    chat = events[0][1]
    assert chat["status"] == "created" and chat["bot_id"] == BOT and chat["conversation_id"] in srv.conversations
    assert all(d["chat_id"] == chat["id"] for d in deltas)
    usage = events[-2][1]["usage"]
    assert usage["token_count"] == usage["input_count"] + usage["output_count"]


async def test_no_trailing_blank_line_variant(srv, client):
    srv.trailing_blank_line = False
    r, _ = await stream(client)
    assert r.content.endswith(b'event:done\ndata:"[DONE]"')


async def test_conversation_is_a_query_parameter_and_continues(srv, client):
    _, first = await stream(client)
    cid = first[0][1]["conversation_id"]
    _, second = await stream(client, chat_body("again"), {"conversation_id": cid})
    assert second[0][1]["conversation_id"] == cid
    assert [m["content"] for m in srv.conversations[cid].messages] == ["hi", "Hello, world!", "again", "Hello, world!"]
    r = await client.post("/v3/chat", json=chat_body(conversation_id=cid))
    assert r.json()["code"] == 4000, "conversation_id in the body is refused"
    srv.forget_conversations()
    r = await client.post("/v3/chat", json=chat_body(), params={"conversation_id": cid})
    assert r.status_code == 200 and r.json()["code"] == 4002
    assert r.json()["detail"]["logid"] == r.headers["x-tt-logid"]


async def test_business_errors_come_with_http_200(srv, client):
    r = await client.post("/v3/chat", json={**chat_body(), "bot_id": "1"})
    assert (r.status_code, r.json()["code"]) == (200, 4006)
    srv.business_error = {"code": 4015, "msg": "bot not published"}
    r = await client.post("/v3/chat", json=chat_body())
    assert (r.status_code, r.json()["code"], r.json()["msg"]) == (200, 4015, "bot not published")
    r = await client.post("/v3/chat", json=chat_body(), headers={"Authorization": "Bearer nope"})
    assert (r.status_code, r.json()["code"]) == (401, 4100)
    r = await client.post("/v3/chat", json={**chat_body(), "stream": False, "auto_save_history": False})
    assert r.json()["code"] == 4007


async def test_reasoning_tools_and_multi_answer(srv, client):
    srv.reasoning = ["think ", "hard"]
    srv.tools = True
    srv.extra_answers = ["Second bubble."]
    _, events = await stream(client)
    completed = [d for n, d in events if n == "conversation.message.completed"]
    assert [d["type"] for d in completed][:2] == ["function_call", "tool_output"]
    call = json.loads(completed[0]["content"])
    assert call["name"] and call["arguments"] == {"city": "Berlin"}
    reasoning = [d["reasoning_content"] for n, d in events if n == "conversation.message.delta" and d.get("reasoning_content")]
    assert reasoning == ["think ", "hard"]
    answers = [d for d in completed if d["type"] == "answer"]
    assert answers[0]["reasoning_content"] == "think hard" and answers[1]["content"] == "Second bubble."
    assert answers[0]["id"] != answers[1]["id"]


async def test_chat_failed_and_requires_action(srv, client):
    srv.fail_chat = {"code": 4011, "msg": "balance insufficient"}
    _, events = await stream(client)
    assert [n for n, _ in events][-2:] == ["conversation.chat.failed", "done"]
    assert events[-2][1]["last_error"] == {"code": 4011, "msg": "balance insufficient"}
    srv.fail_chat = None
    srv.requires_action = True
    _, events = await stream(client)
    name, chat = events[-2]
    assert name == "conversation.chat.requires_action" and chat["status"] == "requires_action"
    call = chat["required_action"]["submit_tool_outputs"]["tool_calls"][0]
    r = await client.post("/v3/chat/submit_tool_outputs",
                          params={"conversation_id": chat["conversation_id"], "chat_id": chat["id"]},
                          json={"tool_outputs": [{"tool_call_id": call["id"], "output": "12:00"}], "stream": True})
    assert [n for n, _ in parse(r.content)][-2:] == ["conversation.chat.completed", "done"]
    assert srv.tool_outputs == [{"tool_call_id": call["id"], "output": "12:00"}]


async def test_non_stream_retrieve_both_methods_and_message_list(srv, client):
    r = await client.post("/v3/chat", json={**chat_body(), "stream": False})
    chat = r.json()["data"]
    assert r.json()["code"] == 0 and chat["status"] == "in_progress"
    q = {"conversation_id": chat["conversation_id"], "chat_id": chat["id"]}
    for method in ("GET", "POST"):
        r = await client.request(method, "/v3/chat/retrieve", params=q)
        assert r.json()["data"]["status"] == "completed" and r.json()["data"]["usage"]["token_count"]
    msgs = (await client.get("/v3/chat/message/list", params=q)).json()["data"]
    assert [m["content"] for m in msgs if m["type"] == "answer"] == ["Hello, world!"]


async def test_upload_and_object_string(srv, client):
    r = await client.post("/v1/files/upload", files={"file": ("a.png", b"\x89PNG....", "image/png")})
    data = r.json()["data"]
    assert r.json()["code"] == 0 and data["bytes"] == 8 and data["file_name"] == "a.png"
    parts = [{"type": "text", "text": "what is this"}, {"type": "image", "file_id": data["id"]}]
    msg = {"role": "user", "type": "question", "content": json.dumps(parts), "content_type": "object_string"}
    _, events = await stream(client, {**chat_body(), "additional_messages": [msg]})
    assert events[-1][1] == "[DONE]"
    (chat,) = srv.chats.values()
    assert chat.parts == parts
    bad = {**msg, "content": json.dumps([{"type": "image", "file_id": "999"}])}
    r = await client.post("/v3/chat", json={**chat_body(), "additional_messages": [bad]})
    assert r.json()["code"] == 4000
    srv.max_upload_bytes = 4
    r = await client.post("/v1/files/upload", files={"file": ("b.txt", b"too long", "text/plain")})
    assert (r.status_code, r.json()["code"]) == (200, 4302)


async def test_cancel_stops_a_running_chat(srv, client):
    srv.answer_tokens = ["a "] * 50
    srv.token_delay = 0.05
    async with client.stream("POST", "/v3/chat", json=chat_body()) as resp:
        buf = b""
        body = resp.aiter_bytes()
        async for chunk in body:
            buf += chunk
            if b"conversation.message.delta" in buf:
                break
        chat = parse(buf.split(b"\n\n", 1)[0] + b"\n\n")[0][1]
        r = await client.post("/v3/chat/cancel", json={"conversation_id": chat["conversation_id"], "chat_id": chat["id"]})
        assert r.json()["code"] == 0 and r.json()["data"]["status"] == "canceled"
        async for chunk in body:
            buf += chunk
    assert b"event:conversation.chat.canceled" in buf
    r = await client.post("/v3/chat/cancel", json={"conversation_id": chat["conversation_id"], "chat_id": chat["id"]})
    assert r.json()["code"] == 4104
    assert srv.cancelled[0] == (chat["conversation_id"], chat["id"])


async def test_busy_conversation_is_refused(srv, client):
    _, first = await stream(client)
    cid = first[0][1]["conversation_id"]
    srv.conversations[cid].running = "other"
    r = await client.post("/v3/chat", json=chat_body(), params={"conversation_id": cid})
    assert r.json()["code"] == 4016


@pytest.mark.parametrize("fault", [f for f in FAULTS if f.startswith(("http_", "html_"))])
async def test_status_faults(srv, client, fault):
    srv.fault = fault
    r = await client.post("/v3/chat", json=chat_body())
    assert r.status_code == int(fault.split("_")[1])
    if fault.startswith("http_"):
        assert r.json()["code"] != 0
    else:
        assert r.text.startswith("<html>")


async def test_stream_faults(srv, client):
    srv.fault = "error_event"
    _, events = await stream(client)
    assert ("error", {"code": 5000, "msg": events[-2][1]["msg"]}) == events[-2]
    srv.fault = "empty"
    r = await client.post("/v3/chat", json=chat_body())
    assert r.content == b""
    srv.fault = "invalid_json"
    r = await client.post("/v3/chat", json=chat_body())
    assert b"data:{not json" in r.content
    srv.fault = "truncated"
    with pytest.raises(httpx.RemoteProtocolError):
        await client.post("/v3/chat", json=chat_body())
    srv.fault = "non_utf8"
    r = await client.post("/v3/chat", json=chat_body())
    assert b"\xff\xfe" in r.content


async def test_unknown_route_is_the_go_servers_404(srv, client):
    r = await client.post("/v3/v3/chat", json=chat_body())
    assert (r.status_code, r.text) == (404, "404 page not found")


async def test_active_requests_drop_to_zero_after_a_stall_is_abandoned(srv):
    srv.fault = "stall"
    async with httpx.AsyncClient(base_url=srv.base_url, headers=AUTH, timeout=5) as c:
        async with c.stream("POST", "/v3/chat", json=chat_body()) as resp:
            async for chunk in resp.aiter_bytes():
                if b"message.delta" in chunk:
                    break
            assert srv.active_requests == 1, "the stalled chat is still being served"
    assert await srv.wait_until_async(lambda: srv.active_requests == 0, 3), "the handler ends when the client leaves"
