"""Self-test of the loopback HTTP fake base and the Dify fake, driven with plain httpx."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
import uuid
from typing import Any

import httpx
import pytest

from tests.fakes.dify import FAULTS, FakeDify
from tests.fakes.http_server import BlackholeServer, FakeHTTPServer, closed_port, split_payload

AUTH = {"Authorization": "Bearer app-test-key"}
CHAT = {"inputs": {}, "query": "hi", "user": "u1", "response_mode": "streaming"}
WORKFLOW = {"inputs": {"q": "hi"}, "user": "u1", "response_mode": "streaming"}


@pytest.fixture
def srv():
    with FakeDify() as s:
        yield s
    assert s.handler_errors == []


@pytest.fixture
async def client(srv: FakeDify):
    async with httpx.AsyncClient(base_url=srv.base_url, headers=AUTH, timeout=5) as c:
        yield c


def parse_sse(raw: bytes) -> list[dict[str, Any]]:
    """Split a Dify stream into events; pings become {"event": "ping"} (no data line)."""
    out: list[dict[str, Any]] = []
    for block in raw.decode("utf-8").split("\n\n"):
        if not block.strip():
            continue
        if block == "event: ping":
            out.append({"event": "ping"})
            continue
        assert block.startswith("data: "), block
        out.append(json.loads(block[len("data: ") :]))
    return out


def names(events: list[dict[str, Any]], pings: bool = False) -> list[str]:
    return [e["event"] for e in events if pings or e["event"] != "ping"]


async def stream(client: httpx.AsyncClient, path: str = "/chat-messages", body: dict | None = None):
    r = await client.post(path, json=body or CHAT)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/event-stream")
    return parse_sse(r.content)


# -- modes -------------------------------------------------------------------------------------


async def test_chat_mode_order_pings_and_common_fields(srv: FakeDify, client: httpx.AsyncClient):
    events = await stream(client)
    assert names(events) == ["message"] * 4 + ["message_end"]
    assert "ping" in names(events, pings=True)
    assert names(events, pings=True)[-1] == "message_end"
    data = [e for e in events if e["event"] != "ping"]
    cid = data[0]["conversation_id"]
    uuid.UUID(cid)
    for e in data:
        assert e["conversation_id"] == cid and e["task_id"] and e["message_id"] and e["created_at"]
    assert "".join(e["answer"] for e in data[:-1]) == "Hello, world!"
    usage = data[-1]["metadata"]["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    for k in (
        "prompt_price",
        "completion_price",
        "total_price",
        "prompt_unit_price",
        "completion_price_unit",
    ):
        assert isinstance(usage[k], str)
    assert usage["currency"] == "USD" and isinstance(usage["latency"], float)
    assert data[-1]["metadata"]["retriever_resources"] == []
    assert srv.conversations[cid].user == "u1"
    assert srv.turns(cid)[0].answer == "Hello, world!" and srv.turns(cid)[0].status == "succeeded"


async def test_agent_mode(srv: FakeDify, client: httpx.AsyncClient):
    """Function-calling agent as Dify sends it: each step's agent_thought is sent empty when the
    step starts and again as it is saved; the answer step's thought repeats the streamed answer."""
    srv.mode = "agent"
    events = [e for e in await stream(client) if e["event"] != "ping"]
    assert names(events) == (
        ["agent_thought", "agent_thought", "message_file", "agent_thought"]
        + ["agent_thought"] + ["agent_message"] * 4 + ["agent_thought", "message_end"]
    )
    tool_step = [e for e in events[:4] if e["event"] == "agent_thought"]
    assert len({t["id"] for t in tool_step}) == 1 and {t["position"] for t in tool_step} == {1}
    assert (tool_step[0]["thought"], tool_step[0]["tool"]) == ("", "")
    assert tool_step[1]["tool"] == "search" and tool_step[1]["thought"] == "I should look this up."
    assert json.loads(tool_step[1]["tool_input"]) == {"search": {"q": "x"}}
    assert tool_step[2]["observation"] and tool_step[2]["thought"] == tool_step[1]["thought"]
    answer_step = [events[4], events[9]]
    assert answer_step[0]["id"] == answer_step[1]["id"] != tool_step[0]["id"]
    assert {t["position"] for t in answer_step} == {2} and {t["tool"] for t in answer_step} == {""}
    assert answer_step[0]["thought"] == ""
    answer = "".join(e["answer"] for e in events if e["event"] == "agent_message")
    assert answer_step[1]["thought"] == answer == "Hello, world!"
    mf = events[2]
    assert tool_step[2]["message_files"] == [mf["id"]]
    assert mf["type"] == "image" and mf["belongs_to"] == "assistant"
    assert mf["url"] == f"http://127.0.0.1:{srv.port}/files/abc.png"
    img = await client.get(mf["url"])
    assert img.status_code == 200 and img.headers["content-type"] == "image/png"


async def test_new_agent_duplicates_full_answer(srv: FakeDify, client: httpx.AsyncClient):
    srv.mode = "new-agent"
    events = [e for e in await stream(client) if e["event"] != "ping"]
    assert names(events) == ["agent_thought"] + ["agent_message"] * 4 + ["message", "message_end"]
    assert events[-2]["answer"] == "Hello, world!"
    assert "retriever_resources" not in events[-1]["metadata"]


async def test_chatflow_with_reasoning(srv: FakeDify, client: httpx.AsyncClient):
    srv.mode = "chatflow"
    srv.reasoning = "Let me think about it."
    ev = [e for e in await stream(client) if e["event"] != "ping"]
    n = names(ev)
    assert n[0] == "workflow_started" and n[-2:] == ["workflow_finished", "message_end"]  # as Dify 1.12.1
    assert n.index("node_started") < n.index("reasoning_chunk") < n.index("message")
    reasoning = [e["data"] for e in ev if e["event"] == "reasoning_chunk"]
    assert "".join(r["reasoning"] for r in reasoning) == "Let me think about it."
    assert reasoning[-1] == {**reasoning[-1], "is_final": True, "reasoning": ""}
    assert not any(r["is_final"] for r in reasoning[:-1])
    fin = ev[-2]
    assert fin["data"]["status"] == "succeeded" and fin["data"]["outputs"] == {"answer": "Hello, world!"}
    assert fin["data"]["total_tokens"] > 0 and fin["workflow_run_id"] == fin["data"]["id"]
    assert all(e["conversation_id"] == ev[0]["conversation_id"] for e in ev)


async def test_workflow_mode(srv: FakeDify, client: httpx.AsyncClient):
    srv.mode = "workflow"
    ev = [e for e in await stream(client, "/workflows/run", WORKFLOW) if e["event"] != "ping"]
    n = names(ev)
    assert n[0] == "workflow_started" and n[-1] == "workflow_finished"
    assert n.index("node_started") < n.index("text_chunk") < n.index("node_finished", n.index("text_chunk"))
    assert "".join(e["data"]["text"] for e in ev if e["event"] == "text_chunk") == "Hello, world!"
    assert ev[-1]["data"]["outputs"] == {"text": "Hello, world!"}
    for e in ev:
        assert "conversation_id" not in e and e["task_id"] and e["workflow_run_id"]
    assert srv.workflow_runs[0].inputs == {"q": "hi"}
    assert srv.workflow_runs[0].outputs == {"text": "Hello, world!"}

    srv.workflow_stream_text = False
    srv.workflow_output_key = "result"
    ev = await stream(client, "/workflows/run", WORKFLOW)
    assert "text_chunk" not in names(ev)
    assert ev[-1]["data"]["outputs"] == {"result": "Hello, world!"}

    ev = await stream(client, "/workflows/wf-pinned/run", WORKFLOW)  # version-pinned route
    assert ev[-1]["data"]["workflow_id"] == "wf-pinned"


async def test_app_mode_must_match_route(srv: FakeDify, client: httpx.AsyncClient):
    r = await client.post("/workflows/run", json=WORKFLOW)
    assert (r.status_code, r.json()["code"]) == (400, "not_workflow_app")
    srv.mode = "workflow"
    r = await client.post("/chat-messages", json=CHAT)
    assert (r.status_code, r.json()["code"]) == (400, "not_chat_app")
    srv.mode = "completion"  # a text generator is refused by both routes
    r = await client.post("/chat-messages", json=CHAT)
    assert (r.status_code, r.json()["code"]) == (400, "not_chat_app")
    r = await client.post("/workflows/run", json=WORKFLOW)
    assert (r.status_code, r.json()["code"]) == (400, "not_workflow_app")


# -- conversations & validation ----------------------------------------------------------------


async def test_conversation_continuity_and_404(srv: FakeDify, client: httpx.AsyncClient):
    first = await stream(client)
    cid = first[0]["conversation_id"]
    second = await stream(client, body={**CHAT, "query": "again", "conversation_id": cid})
    assert {e["conversation_id"] for e in second if "conversation_id" in e} == {cid}
    assert [t.query for t in srv.turns(cid)] == ["hi", "again"]

    r = await client.post("/chat-messages", json={**CHAT, "conversation_id": str(uuid.uuid4())})
    assert r.status_code == 404
    # as Dify 1.12.1 sends it: Flask-RESTX's route suggestions follow Dify's own words
    assert r.json() == {"status": 404, "code": "not_found", "message": (
        "Conversation Not Exists. You have requested this URI [/v1/chat-messages] but did you mean "
        "/v1/chat-messages or /api/chat-messages or /v1/chat-messages/<string:task_id>/stop ?")}
    r = await client.post("/chat-messages", json={**CHAT, "conversation_id": "not-a-uuid"})
    assert r.status_code == 400 and r.json()["code"] == "invalid_param"
    assert "conversation_id must be a valid UUID" in r.json()["message"]
    r = await client.post("/chat-messages", json={**CHAT, "user": "u2", "conversation_id": cid})
    assert r.status_code == 404
    r = await client.post("/chat-messages", json={**CHAT, "conversation_id": ""})
    assert r.status_code == 200 and parse_sse(r.content)[0]["conversation_id"] != cid

    srv.forget_conversations()
    r = await client.post("/chat-messages", json={**CHAT, "conversation_id": cid})
    assert r.status_code == 404


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"inputs": {}, "query": "hi"}, "invalid_param"),  # no user
        ({"inputs": {}, "query": "hi", "user": ""}, "invalid_param"),
        ({"inputs": {}, "user": "u1"}, "invalid_param"),  # no query
        ({"query": "hi", "user": "u1"}, "invalid_param"),  # no inputs
        ({"inputs": [], "query": "hi", "user": "u1"}, "invalid_param"),
        ({**CHAT, "response_mode": "fast"}, "invalid_param"),
        (
            {**CHAT, "files": [{"type": "image", "transfer_method": "local_file", "upload_file_id": "x"}]},
            "invalid_param",
        ),
    ],
)
async def test_validation(client: httpx.AsyncClient, body: dict, code: str):
    r = await client.post("/chat-messages", json=body)
    assert r.status_code == 400 and r.json()["code"] == code and r.json()["status"] == 400


async def test_auth(srv: FakeDify):
    async with httpx.AsyncClient(base_url=srv.base_url) as c:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "app-test-key"}):
            r = await c.post("/chat-messages", json=CHAT, headers=headers)
            assert r.status_code == 401 and r.json()["code"] == "unauthorized"
        r = await c.get("/parameters", headers={"Authorization": "Bearer nope"})
        assert r.json() == {"code": "unauthorized", "message": "Access token is invalid", "status": 401}


async def test_unknown_route_and_method(client: httpx.AsyncClient):
    r = await client.get("/nope")  # Werkzeug's page, as Dify 1.12.1 answers an unknown route
    assert r.status_code == 404 and r.headers["content-type"].startswith("text/html")
    assert "The requested URL was not found on the server" in r.text
    r = await client.get("/chat-messages")
    assert r.status_code == 405


async def test_parameters(client: httpx.AsyncClient):
    r = await client.get("/parameters")
    body = r.json()
    assert r.status_code == 200 and body["user_input_form"] == []
    assert body["file_upload"]["image"]["enabled"] is True


# -- blocking ----------------------------------------------------------------------------------


async def test_blocking_shapes(srv: FakeDify, client: httpx.AsyncClient):
    r = await client.post("/chat-messages", json={**CHAT, "response_mode": "blocking"})
    body = r.json()
    assert r.status_code == 200 and body["event"] == "message" and body["mode"] == "chat"
    assert body["answer"] == "Hello, world!" and body["id"] == body["message_id"]
    assert {"usage", "retriever_resources"} <= body["metadata"].keys()
    uuid.UUID(body["conversation_id"])

    srv.mode = "chatflow"
    r = await client.post("/chat-messages", json={k: v for k, v in CHAT.items() if k != "response_mode"})
    assert r.json()["mode"] == "advanced-chat"  # blocking is the default

    for mode in ("agent", "new-agent"):
        srv.mode = mode
        r = await client.post("/chat-messages", json={**CHAT, "response_mode": "blocking"})
        assert r.status_code == 400
        assert r.json()["code"] == "bad_request"
        assert r.json()["message"] == "Agent App only supports streaming response mode."

    srv.mode = "workflow"
    r = await client.post("/workflows/run", json={**WORKFLOW, "response_mode": "blocking"})
    body = r.json()
    assert set(body) == {"task_id", "workflow_run_id", "data"}
    assert body["data"]["status"] == "succeeded" and body["data"]["outputs"] == {"text": "Hello, world!"}


# -- options -----------------------------------------------------------------------------------


async def test_replace_and_fail_midstream(srv: FakeDify, client: httpx.AsyncClient):
    srv.replace_with = "[redacted]"
    ev = [e for e in await stream(client) if e["event"] != "ping"]
    assert names(ev)[-2:] == ["message_replace", "message_end"] and ev[-2]["answer"] == "[redacted]"

    srv.replace_with = None
    srv.fail_midstream = {"status": 400, "code": "provider_quota_exceeded", "message": "quota"}
    ev = [e for e in await stream(client) if e["event"] != "ping"]
    assert names(ev) == ["message", "error"]
    assert "task_id" not in ev[-1] and ev[-1]["code"] == "provider_quota_exceeded"
    assert ev[-1]["conversation_id"] == ev[0]["conversation_id"]


async def test_workflow_fail(srv: FakeDify, client: httpx.AsyncClient):
    srv.mode = "chatflow"
    srv.workflow_fail = "boom"
    ev = [e for e in await stream(client) if e["event"] != "ping"]
    assert names(ev)[-2:] == ["workflow_finished", "error"] and "message_end" not in names(ev)
    assert ev[-2]["data"]["status"] == "failed" and ev[-2]["data"]["error"] == "boom"
    srv.mode = "workflow"
    ev = [e for e in await stream(client, "/workflows/run", WORKFLOW) if e["event"] != "ping"]
    assert names(ev)[-2:] == ["workflow_finished", "error"] and "task_id" not in ev[-1]


async def test_include_usage_off(srv: FakeDify, client: httpx.AsyncClient):
    srv.include_usage = False
    ev = await stream(client)
    assert "usage" not in ev[-1]["metadata"]
    srv.mode = "workflow"
    ev = await stream(client, "/workflows/run", WORKFLOW)
    assert "total_tokens" not in ev[-1]["data"]


async def test_no_trailing_blank_line(srv: FakeDify, client: httpx.AsyncClient):
    srv.trailing_blank_line = False
    r = await client.post("/chat-messages", json=CHAT)
    assert r.content.startswith(b"data: ") and r.content.endswith(b"}")
    assert json.loads(r.content.rsplit(b"\n\n", 1)[1][6:])["event"] == "message_end"


async def test_split_writes_cut_utf8_and_json(srv: FakeDify, client: httpx.AsyncClient):
    srv.answer_tokens = ["Grüß ", "你好", " 🌍"]
    srv.split_writes = True
    srv.split_delay = 0
    pieces: list[bytes] = []
    async with client.stream("POST", "/chat-messages", json=CHAT) as r:
        async for chunk in r.aiter_raw():
            pieces.append(chunk)
    assert len(pieces) > 20
    undecodable = 0
    for p in pieces:
        try:
            p.decode("utf-8")
        except UnicodeDecodeError:
            undecodable += 1
    assert undecodable > 0
    ev = [e for e in parse_sse(b"".join(pieces)) if e["event"] != "ping"]
    assert "".join(e["answer"] for e in ev[:-1]) == "Grüß 你好 🌍"


def test_split_payload_cuts_inside_every_multibyte_char():
    data = "a€b🌍".encode()  # € at bytes 1-3, 🌍 at bytes 5-8
    pieces = split_payload(data, sizes=(100,))
    assert b"".join(pieces) == data
    cuts = set(itertools.accumulate(len(p) for p in pieces))
    assert {2, 6} <= cuts


# -- uploads -----------------------------------------------------------------------------------


async def test_upload_and_reference(srv: FakeDify, client: httpx.AsyncClient):
    r = await client.post(
        "/files/upload", data={"user": "u1"}, files={"file": ("a.png", b"\x89PNG", "image/png")}
    )
    assert r.status_code == 201
    up = r.json()
    assert {
        "id",
        "name",
        "size",
        "extension",
        "mime_type",
        "created_by",
        "created_at",
        "preview_url",
        "source_url",
    } <= up.keys()
    assert (up["name"], up["size"], up["extension"], up["mime_type"]) == ("a.png", 4, "png", "image/png")
    assert srv.uploads[up["id"]].data == b"\x89PNG" and srv.uploads[up["id"]].user == "u1"
    assert (await client.get(up["source_url"])).content == b"\x89PNG"

    ref = [{"type": "image", "transfer_method": "local_file", "upload_file_id": up["id"]}]
    r = await client.post("/chat-messages", json={**CHAT, "user": "u2", "files": ref})
    assert r.status_code == 400 and r.json()["code"] == "invalid_param"
    r = await client.post("/chat-messages", json={**CHAT, "files": ref})
    assert r.status_code == 200
    assert srv.request_files[-1] == ref
    cid = parse_sse(r.content)[0]["conversation_id"]
    assert srv.turns(cid)[0].files == ref


async def test_upload_errors(srv: FakeDify, client: httpx.AsyncClient):
    r = await client.post(
        "/files/upload", data={"user": "u1"}, files={"other": ("a.txt", b"x", "text/plain")}
    )
    assert (r.status_code, r.json()["code"]) == (400, "no_file_uploaded")
    r = await client.post(
        "/files/upload", data={"user": "u1"}, files={"file": ("a/b.txt", b"x", "text/plain")}
    )
    assert r.status_code == 400
    r = await client.post("/files/upload", files={"file": ("a.txt", b"x", "text/plain")})
    assert (r.status_code, r.json()["code"]) == (400, "invalid_param")  # no user
    srv.max_upload_bytes = 1000
    r = await client.post(
        "/files/upload", data={"user": "u1"}, files={"file": ("a.txt", b"x" * 1001, "text/plain")}
    )
    assert r.status_code == 413 and r.json() == {"code": "file_too_large", "message": "", "status": 413}


async def test_upload_delay_and_outcomes(srv: FakeDify, client: httpx.AsyncClient):
    srv.upload_delays = {"slow.txt": 0.3}
    srv.max_upload_bytes = 10
    start = time.monotonic()
    r = await client.post("/files/upload", data={"user": "u1"}, files={"file": ("slow.txt", b"x", "text/plain")})
    assert r.status_code == 201 and time.monotonic() - start >= 0.3
    r = await client.post("/files/upload", data={"user": "u1"}, files={"file": ("big.txt", b"x" * 11, "text/plain")})
    assert r.status_code == 413
    assert srv.upload_outcomes == {"slow.txt": "stored", "big.txt": "rejected"}

    srv.upload_delays = {"gone.txt": 30}
    with pytest.raises(httpx.ReadTimeout):
        await client.post(
            "/files/upload", data={"user": "u1"}, files={"file": ("gone.txt", b"x", "text/plain")}, timeout=0.2
        )
    assert await srv.wait_until_async(lambda: "gone.txt" in srv.upload_outcomes)
    assert srv.upload_outcomes["gone.txt"] == "disconnected"
    assert not any(u.name == "gone.txt" for u in srv.uploads.values())


# -- faults ------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [400, 401, 403, 404, 413, 429, 500, 502, 503])
async def test_http_and_html_faults(srv: FakeDify, client: httpx.AsyncClient, status: int):
    srv.fault = f"http_{status}"
    r = await client.post("/chat-messages", json=CHAT)
    body = r.json()
    assert r.status_code == status and r.headers["content-type"] == "application/json"
    assert body["status"] == status and isinstance(body["code"], str) and "message" in body
    if status == 413:
        assert body["message"] == ""
    if status == 404:
        assert body["message"] == "Conversation Not Exists."
    srv.fault = f"html_{status}"
    r = await client.post("/chat-messages", json=CHAT)
    assert r.status_code == status and r.headers["content-type"].startswith("text/html")
    assert f"<h1>{status} " in r.text


def test_unknown_fault_rejected(srv: FakeDify):
    with pytest.raises(ValueError):
        srv.fault = "http_999"
    assert "stall_before_headers" in FAULTS


async def test_fault_queue_then_success(srv: FakeDify, client: httpx.AsyncClient):
    srv.fault_queue = ["http_429", None]
    assert (await client.post("/chat-messages", json=CHAT)).status_code == 429
    assert (await client.post("/chat-messages", json=CHAT)).status_code == 200


async def test_stream_body_faults(srv: FakeDify, client: httpx.AsyncClient):
    srv.fault = "invalid_json"
    r = await client.post("/chat-messages", json=CHAT)
    assert r.status_code == 200 and r.content.startswith(b"data: {not json")

    srv.fault = "empty"
    r = await client.post("/chat-messages", json=CHAT)
    assert r.status_code == 200 and r.content == b""
    assert r.headers["content-type"].startswith("text/event-stream")

    srv.fault = "non_utf8"
    r = await client.post("/chat-messages", json=CHAT)
    assert b"\xff\xfe" in r.content
    with pytest.raises(UnicodeDecodeError):
        r.content.decode("utf-8")

    srv.fault = "error_event"
    r = await client.post("/chat-messages", json=CHAT)
    ev = [e for e in parse_sse(r.content) if e["event"] != "ping"]
    assert names(ev) == ["message", "error"] and ev[-1]["status"] == 500
    assert ev[-1]["code"] == "internal_server_error"


async def test_oversized_line(srv: FakeDify, client: httpx.AsyncClient):
    srv.fault = "oversized"
    r = await client.post("/chat-messages", json=CHAT)
    first_line = r.content.split(b"\n", 1)[0]
    assert len(first_line) + 2 == srv.oversized_bytes == 9 * 1024 * 1024
    assert json.loads(first_line[6:])["event"] == "message"
    assert parse_sse(r.content)[-1]["event"] == "message_end"


async def test_truncated_stream(srv: FakeDify, client: httpx.AsyncClient):
    srv.fault = "truncated"
    with pytest.raises(httpx.RemoteProtocolError):
        async with client.stream("POST", "/chat-messages", json=CHAT) as r:
            assert r.status_code == 200
            async for _ in r.aiter_bytes():
                pass
    srv.fault = None
    assert (await client.post("/chat-messages", json=CHAT)).status_code == 200


@pytest.mark.parametrize("fault", ["stall", "stall_before_headers"])
async def test_stall_read_timeout(srv: FakeDify, fault: str):
    srv.fault = fault
    timeout = httpx.Timeout(5, read=0.5)
    async with httpx.AsyncClient(base_url=srv.base_url, headers=AUTH, timeout=timeout) as c:
        started = time.monotonic()
        with pytest.raises(httpx.ReadTimeout):
            async with c.stream("POST", "/chat-messages", json=CHAT) as r:
                async for _ in r.aiter_bytes():
                    pass
        assert time.monotonic() - started < 2
    # the client went away: the stalled handler notices and the connection is released
    assert await srv.wait_until_async(lambda: srv.open_connections == 0, timeout=3)


async def test_stall_pings_keeps_sending_keepalives(srv: FakeDify):
    srv.fault = "stall_pings"
    srv.stall_ping_every = 0.05
    srv.ping_every = 0  # only the stall's keep-alives
    raw = b""
    async with httpx.AsyncClient(base_url=srv.base_url, headers=AUTH, timeout=5) as c:
        async with c.stream("POST", "/chat-messages", json=CHAT) as r:
            async for chunk in r.aiter_bytes():
                raw += chunk
                if raw.count(b"event: ping") >= 3:
                    break
    events = parse_sse(raw)
    assert names(events, pings=True)[:4] == ["message", "ping", "ping", "ping"]
    assert await srv.wait_until_async(lambda: srv.open_connections == 0, timeout=3)


async def test_extra_api_keys_are_accepted(srv: FakeDify):
    srv.api_keys.add("app-second-key")
    async with httpx.AsyncClient(base_url=srv.base_url, headers={"Authorization": "Bearer app-second-key"}) as c:
        assert (await c.post("/chat-messages", json=CHAT)).status_code == 200
    async with httpx.AsyncClient(base_url=srv.base_url, headers={"Authorization": "Bearer app-third-key"}) as c:
        assert (await c.post("/chat-messages", json=CHAT)).status_code == 401


# -- stop --------------------------------------------------------------------------------------


async def test_stop_ends_running_stream(srv: FakeDify, client: httpx.AsyncClient):
    srv.token_delay = 0.3
    srv.answer_tokens = [f"t{i} " for i in range(20)]
    started = time.monotonic()
    events: list[dict[str, Any]] = []
    async with client.stream("POST", "/chat-messages", json=CHAT) as r:
        buf = b""
        async for chunk in r.aiter_bytes():
            buf += chunk
            if not events and b"\n\n" in buf:
                first = parse_sse(buf.split(b"\n\n", 1)[0] + b"\n\n")[0]
                events.append(first)
                task_id = first["task_id"]
                other = await client.post(f"/chat-messages/{task_id}/stop", json={"user": "intruder"})
                assert other.json() == {"result": "success"}  # no-op but "success"
                stop = await client.post(f"/chat-messages/{task_id}/stop", json={"user": "u1"})
                assert stop.status_code == 200 and stop.json() == {"result": "success"}
    assert time.monotonic() - started < 2
    ev = [e for e in parse_sse(buf) if e["event"] != "ping"]
    assert ev[-1]["event"] == "message_end" and len(ev) < 10
    assert srv.stopped_tasks == [(task_id, "intruder"), (task_id, "u1")]
    assert srv.turns(ev[0]["conversation_id"])[0].status == "stopped"


async def test_workflow_stop_route(srv: FakeDify, client: httpx.AsyncClient):
    srv.mode = "workflow"
    srv.fault = "stall"
    async with client.stream("POST", "/workflows/run", json=WORKFLOW) as r:
        buf = b""
        async for chunk in r.aiter_bytes():
            buf += chunk
            if b"text_chunk" in buf and not srv.stopped_tasks:
                stop = await client.post(f"/workflows/tasks/{srv.last_task_id}/stop", json={"user": "u1"})
                assert stop.json() == {"result": "success"}
    ev = parse_sse(buf)
    assert ev[-1]["event"] == "workflow_finished" and ev[-1]["data"]["status"] == "stopped"


# -- transport-level behaviour -----------------------------------------------------------------


async def test_keep_alive_reuses_one_connection(srv: FakeDify, client: httpx.AsyncClient):
    for _ in range(5):
        await stream(client)
    assert srv.connections_accepted == 1
    assert len({r.connection_id for r in srv.requests}) == 1 and len(srv.requests) == 5
    # an idle pooled keep-alive connection is still open, but nothing is in flight (the handler
    # finishes its bookkeeping just after the client has read the last byte, hence the wait)
    assert await srv.wait_until_async(lambda: srv.active_requests == 0, timeout=2)
    assert srv.open_connections == 1
    await client.aclose()
    assert await srv.wait_until_async(lambda: srv.open_connections == 0, timeout=2)


async def test_chunked_request_body(srv: FakeDify, client: httpx.AsyncClient):
    async def body():
        raw = json.dumps(CHAT).encode()
        for i in range(0, len(raw), 7):
            yield raw[i : i + 7]

    r = await client.post("/chat-messages", content=body(), headers={"Content-Type": "application/json"})
    assert r.status_code == 200
    assert srv.requests[-1].chunked and srv.requests[-1].json() == CHAT
    assert srv.requests[-1].headers["AUTHORIZATION"] == AUTH["Authorization"]


def test_sync_usage_and_restart():
    srv = FakeDify(api_key="app-k").start()
    try:
        r = httpx.post(srv.base_url + "/chat-messages", json=CHAT, headers={"Authorization": "Bearer app-k"})
        assert r.status_code == 200
        port = srv.port
    finally:
        srv.stop()
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/v1/parameters", timeout=1)
    srv.start()  # restart rebinds the same port when it is free; state survives
    try:
        assert srv.port == port and len(srv.conversations) == 1
    finally:
        srv.stop()


async def test_stop_is_fast_with_stalled_handler():
    srv = FakeDify().start()
    srv.fault = "stall_before_headers"
    async with httpx.AsyncClient(base_url=srv.base_url, headers=AUTH, timeout=10) as c:
        task = asyncio.create_task(c.post("/chat-messages", json=CHAT))
        assert await srv.wait_until_async(lambda: len(srv.requests) == 1)
        assert srv.open_connections == 1
        started = time.monotonic()
        await asyncio.to_thread(srv.stop)
        assert time.monotonic() - started < 1.0
        with pytest.raises(httpx.TransportError):
            await task
    assert srv.open_connections == 0 and not srv.running


async def test_base_server_routes_and_form():
    class Echo(FakeHTTPServer):
        def __init__(self) -> None:
            super().__init__()
            self.add_route("POST", "/items/{item_id}/parts/{part}", self.item)

        async def item(self, req, resp):
            form = req.form()
            await resp.start_stream(200, "text/plain")
            await resp.write_split(
                json.dumps(
                    {
                        "params": req.path_params,
                        "q": req.query,
                        "fields": form.fields,
                        "file": form.files["f"].filename,
                    }
                )
            )
            await resp.end()

    async with Echo() as srv, httpx.AsyncClient(base_url=srv.base_url) as c:
        r = await c.post("/items/7/parts/x?a=1", data={"k": "v"}, files={"f": ("ü.txt", b"hi", "text/plain")})
        assert r.json() == {
            "params": {"item_id": "7", "part": "x"},
            "q": {"a": "1"},
            "fields": {"k": "v"},
            "file": "ü.txt",
        }
        assert srv.requests[0].form().files["f"].data == b"hi"


async def test_closed_port_and_blackhole():
    async with httpx.AsyncClient(timeout=httpx.Timeout(2, connect=0.5)) as c:
        with pytest.raises(httpx.ConnectError):
            await c.get(f"http://127.0.0.1:{closed_port()}/")
        with BlackholeServer() as bh:
            started = time.monotonic()
            with pytest.raises(httpx.ConnectTimeout):
                await c.get(bh.base_url + "/")
            assert time.monotonic() - started < 2


async def test_base_server_reset_and_uncooperative_handler_stop():
    class Faulty(FakeHTTPServer):
        def __init__(self) -> None:
            super().__init__()
            self.add_route("GET", "/reset", self.reset)
            self.add_route("GET", "/sleep", self.sleep)

        async def reset(self, req, resp):
            await resp.start_stream(200, "text/plain")
            await resp.write(b"partial")
            await resp.abort(reset=True)

        async def sleep(self, req, resp):
            await asyncio.sleep(100)  # ignores disconnects: stop() must cancel it

    srv = Faulty().start()
    async with httpx.AsyncClient(base_url=srv.base_url, timeout=5) as c:
        with pytest.raises(httpx.TransportError):
            await c.get("/reset")
        task = asyncio.create_task(c.get("/sleep"))
        assert await srv.wait_until_async(lambda: srv.active_requests == 1)
        started = time.monotonic()
        await asyncio.to_thread(srv.stop)
        assert time.monotonic() - started < 1.5
        with pytest.raises(httpx.TransportError):
            await task
    assert srv.open_connections == 0 and srv.handler_errors == []
