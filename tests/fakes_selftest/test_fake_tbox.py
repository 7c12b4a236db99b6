"""Self-test of the Tbox fake, driven with plain httpx (platforms.md §6 "Fake server must")."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.fakes.tbox import FAULTS, FakeTbox

KEY = "pat_tbox_selftest_0001"
APP = "202501010000000009"


@pytest.fixture
def srv():
    with FakeTbox(api_key=KEY, app_id=APP) as s:
        yield s
    assert s.handler_errors == []


def chat(srv: FakeTbox, path: str = "/api/chat", key: str = KEY, **body) -> httpx.Response:
    doc = {"appId": APP, "query": "hi", "userId": "u-1", "stream": True, **body}
    return httpx.post(srv.base_url + path, headers={"Authorization": key}, json=doc, timeout=10)


def events(raw: bytes) -> list[tuple[str, dict]]:
    """(event name, data) per SSE block; the ``id:`` line comes first in every block."""
    out = []
    for block in raw.decode().split("\n\n"):
        if not block.strip():
            continue
        lines = dict(line.split(":", 1) for line in block.split("\n"))
        assert list(lines)[0] == "id"
        out.append((lines["event"], json.loads(lines["data"])))
    return out


def messages(raw: bytes) -> list[tuple[str, str, dict]]:
    """(type, lane, payload) of every ``event: message``; each payload is a JSON *string*."""
    out = []
    for name, data in events(raw):
        if name == "message":
            assert isinstance(data["payload"], str)
            out.append((data["type"], data["lane"], json.loads(data["payload"])))
    return out


def test_chat_streams_header_then_chunks_with_no_end_by_default(srv):
    r = chat(srv)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    got = messages(r.content)
    assert [t for t, _, _ in got] == ["header", "chunk", "chunk", "chunk", "chunk", "charge"]
    header = got[0][2]
    assert header["mediaType"] == "text" and header["sessionId"] == header["conversationId"]
    assert header["conversationId"] in srv.conversations
    assert "".join(p["text"] for t, _, p in got if t == "chunk") == "Hello from Tbox."
    assert got[-1][2]["totalTokens"] == got[-1][2]["inputTokens"] + got[-1][2]["outputTokens"]
    srv.send_end = True
    srv.include_usage = False
    assert [t for t, _, _ in messages(chat(srv).content)][-1] == "end"


def test_conversation_continues_only_for_its_own_user(srv):
    cid = messages(chat(srv).content)[0][2]["conversationId"]
    again = messages(chat(srv, conversationId=cid).content)
    assert again[0][2]["conversationId"] == cid
    assert len(srv.conversations[cid].turns) == 2
    other = chat(srv, conversationId=cid, userId="u-2")
    assert other.status_code == 200 and other.headers["content-type"].startswith("application/json")
    assert other.json()["errorCode"] == "CONVERSATION_NOT_EXIST"
    srv.forget_conversations()
    assert chat(srv, conversationId=cid).json()["errorMsg"].startswith("会话不存在")


def test_auth_is_the_raw_token_and_a_wrong_one_is_403(srv):
    assert chat(srv).status_code == 200
    assert chat(srv, key="Bearer " + KEY).status_code == 200, "lenient about a Bearer prefix"
    bad = chat(srv, key="pat_wrong")
    assert bad.status_code == 403 and set(bad.json()) == {"errorCode", "errorMsg", "data", "traceId"}
    srv.api_keys.add("pat_second")
    assert chat(srv, key="pat_second").status_code == 200


@pytest.mark.parametrize("missing", ["appId", "userId", "query"])
def test_required_fields_are_refused_with_a_200_envelope(srv, missing):
    doc = {"appId": APP, "query": "hi", "userId": "u-1"}
    del doc[missing]
    r = httpx.post(srv.base_url + "/api/chat", headers={"Authorization": KEY}, json=doc)
    assert r.status_code == 200 and r.json()["errorCode"] != "0"


def test_completion_takes_inputs_without_query(srv):
    r = chat(srv, "/api/completion", query=None, inputs={"topic": "cats"})
    assert r.headers["content-type"].startswith("text/event-stream")
    assert srv.chats[-1].body["inputs"] == {"topic": "cats"}


def test_variants_thinking_followup_image_lane_headerless_revoke(srv):
    srv.thinking = ["hmm"]
    srv.follow_ups = ["And tomorrow?"]
    srv.image_urls = ["https://cdn.example/a.png", "https://cdn.example/b.png"]
    srv.headerless = True
    got = messages(chat(srv).content)
    types = [t for t, _, _ in got]
    assert types[:3] == ["thinking", "chunk", "header"], "the first chunk comes before its header"
    image = [(t, p) for t, lane, p in got if lane == "image"]
    assert image == [("header", {"mediaType": "image"}), ("chunk", {"url": srv.image_urls})]
    assert ("followup", "default", {"questions": ["And tomorrow?"]}) in got
    srv.revoke = True
    assert [t for t, _, _ in messages(chat(srv).content)][-1] == "revoke"


def test_upload_envelope_and_files_must_exist(srv):
    r = httpx.post(srv.base_url + "/api/file/upload", headers={"Authorization": KEY},
                   files={"file": ("a.png", b"\x89PNG....", "image/png")})
    doc = r.json()
    assert doc["errorCode"] == "0" and doc["data"] in srv.uploads and doc["traceId"]
    assert chat(srv, files=[{"fileId": doc["data"], "type": "IMAGE"}]).headers["content-type"].startswith("text/")
    assert chat(srv, files=[{"fileId": "nope", "type": "IMAGE"}]).json()["errorCode"] == "FILE_NOT_EXIST"
    created = httpx.post(srv.base_url + "/api/conversation/create", headers={"Authorization": KEY},
                         json={"appId": APP}).json()
    assert created["errorCode"] == "0" and created["data"] in srv.conversations


def test_error_event_and_type_error(srv):
    srv.fault = "error_event"
    evs = events(chat(srv).content)
    assert evs[-1][0] == "error" and evs[-1][1]["description"]
    srv.fault = "type_error"
    assert messages(chat(srv).content)[-1][0] == "error"
    srv.fault = "json_error_200"
    r = chat(srv)
    assert r.status_code == 200 and r.json()["errorCode"] == "SYSTEM_BUSY"


@pytest.mark.parametrize("status", [400, 401, 403, 404, 413, 429, 500, 502, 503])
def test_http_and_html_faults(srv, status):
    srv.fault = f"http_{status}"
    r = chat(srv)
    assert r.status_code == status and r.json()["errorCode"]
    srv.fault = f"html_{status}"
    r = chat(srv)
    assert r.status_code == status and r.text.startswith("<html>")


def test_stream_faults(srv):
    srv.fault = "truncated"
    with pytest.raises(httpx.RemoteProtocolError):
        chat(srv)
    srv.fault = "empty"
    assert chat(srv).content == b""
    srv.fault = "non_utf8"
    with pytest.raises(UnicodeDecodeError):
        chat(srv).content.decode()
    srv.fault = "invalid_json"
    assert b"{not json" in chat(srv).content
    assert {"stall", "stall_pings", "stall_before_headers", "oversized"} <= set(FAULTS)


def test_stall_pings_are_empty_chunks_and_active_requests_drop(srv):
    srv.fault = "stall_pings"
    srv.stall_seconds = 0.5
    got = messages(chat(srv).content)
    assert [p for t, _, p in got if t == "chunk"][1:4] == [{"text": ""}] * 3
    assert srv.wait_until(lambda: srv.active_requests == 0)
