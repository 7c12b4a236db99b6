"""Self-test of the Langflow fake, driven with plain httpx, checked against the real transcripts."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.fakes.langflow import FAULTS, FakeLangflow
from tests.fakes.replay import split_transcript

KEY = "sk-langflow-test-key"
# unchanged copies of the shared real-peer captures (fixtures/real-peers/langflow)
REAL = Path(__file__).resolve().parents[1] / "plugins" / "transcripts" / "langflow" / "real"
BODY = {"input_value": "hi", "input_type": "chat", "output_type": "chat", "session_id": "s-1"}


@pytest.fixture
def srv():
    with FakeLangflow(api_key=KEY) as s:
        yield s
    assert s.handler_errors == []


def run_url(srv: FakeLangflow, stream: bool) -> str:
    return f"{srv.base_url}/api/v1/run/{srv.flow_id}?stream={'true' if stream else 'false'}"


def events(raw: bytes) -> list[dict]:
    """Langflow's stream: bare JSON objects, each followed by a blank line, no ``data:`` prefix."""
    assert raw.endswith(b"\n\n") and not raw.startswith(b"data:")
    return [json.loads(block) for block in raw.decode().split("\n\n") if block.strip()]


def real_body(name: str) -> bytes:
    return split_transcript((REAL / name).read_bytes())[3]


def test_stream_framing_and_event_order_match_the_real_llm_transcript(srv):
    r = httpx.post(run_url(srv, True), headers={"x-api-key": KEY}, json=BODY)
    assert r.headers["content-type"] == "text/event-stream; charset=utf-8"
    got = events(r.content)
    real = events(real_body("31-llm-run-stream-tokens.http"))
    assert [e["event"] for e in got] == ["add_message", "add_message", "token"] + ["token"] * 5 + ["token"] * 3 + [
        "add_message"] * 3 + ["end"]
    assert [e["event"] for e in real][:3] == [e["event"] for e in got][:3] and real[-1]["event"] == "end"
    user, partial = got[0]["data"], got[1]["data"]
    assert user["sender"] == "User" and user["text"] == "hi"
    assert partial["properties"]["state"] == "partial" and partial["text"] == ""
    assert set(real[1]["data"]) <= set(partial) | {"id"}, "same Message fields as the real one"
    finals = [e["data"] for e in got if e["event"] == "add_message"][2:]
    assert {f["id"] for f in finals} == {partial["id"]} and finals[0]["properties"]["usage"]["total_tokens"] == 16
    result = got[-1]["data"]["result"]
    assert result["session_id"] == "s-1"
    assert result["outputs"][0]["outputs"][0]["results"]["message"]["text"] == "Hello from the fake model."


def test_plain_mode_has_no_tokens_and_session_defaults_to_the_flow_id(srv):
    srv.mode = "plain"
    body = {k: v for k, v in BODY.items() if k != "session_id"}
    got = events(httpx.post(run_url(srv, True), headers={"x-api-key": KEY}, json=body).content)
    assert [e["event"] for e in got] == ["add_message", "add_message", "end"]
    assert got[-1]["data"]["result"]["session_id"] == srv.flow_id


def test_non_stream_run_response_and_memory_per_session(srv):
    srv.echo_memory = True
    for expect in ("I remember 0 earlier turns.", "I remember 1 earlier turns."):
        doc = httpx.post(run_url(srv, False), headers={"x-api-key": KEY}, json=BODY).json()
        out = doc["outputs"][0]["outputs"][0]
        assert out["results"]["message"]["text"] == expect and out["outputs"]["message"]["message"] == expect
    srv.forget_conversations()
    doc = httpx.post(run_url(srv, False), headers={"x-api-key": KEY}, json=BODY).json()
    assert doc["outputs"][0]["outputs"][0]["messages"][0]["message"] == "I remember 0 earlier turns."


@pytest.mark.parametrize(
    ("headers", "query", "status", "detail"),
    [
        ({}, "", 403, "Since v1.5"),
        ({"x-api-key": "sk-wrong"}, "", 403, "Invalid or missing API key"),
        ({}, f"&x-api-key={KEY}", 200, None),
    ],
)
def test_auth_by_header_or_query(srv, headers, query, status, detail):
    r = httpx.post(run_url(srv, False) + query, headers=headers, json=BODY)
    assert r.status_code == status
    if detail:
        assert r.json()["detail"].startswith(detail)


def test_unknown_flow_is_404_like_the_real_one_and_endpoint_names_work(srv):
    r = httpx.post(f"{srv.base_url}/api/v1/run/nope?stream=true", headers={"x-api-key": KEY}, json=BODY)
    assert r.status_code == 404 and r.json() == {"detail": "Flow identifier nope not found"}
    real = json.loads(real_body("10-run-unknown-flow.http"))
    assert set(real) == {"detail"} and real["detail"].startswith("Flow identifier ")
    r = httpx.post(f"{srv.base_url}/api/v1/run/lb-chat?stream=false", headers={"x-api-key": KEY}, json=BODY)
    assert r.status_code == 200


def test_error_stream_has_two_error_events_and_no_end_like_the_real_one(srv):
    srv.fail_component = "OpenAI"
    got = events(httpx.post(run_url(srv, True), headers={"x-api-key": KEY}, json=BODY).content)
    real = events(real_body("33-llm-run-stream-model-error.http"))
    assert [e["event"] for e in got] == [e["event"] for e in real] == ["add_message", "error", "error"]
    assert got[1]["data"]["category"] == "error" and got[1]["data"]["text"] == "fake upstream failure\n"
    assert got[2]["data"]["error"].startswith("500: {") and real[2]["data"]["error"].startswith("500: {")
    r = httpx.post(run_url(srv, False), headers={"x-api-key": KEY}, json=BODY)
    assert r.status_code == 500 and json.loads(r.json()["detail"])["message"].startswith("Error running graph")


def test_upload_then_attach_by_tweaks_and_an_unknown_path_fails_the_chat_input(srv):
    up = httpx.post(f"{srv.base_url}/api/v2/files", headers={"x-api-key": KEY}, files={"file": ("a.png", b"PNG")})
    assert up.status_code == 201
    path = up.json()["path"]
    assert path.endswith(".png") and path.count("/") == 1
    tweaks = {"ChatInput-Wna_m": {"files": [path]}}
    r = httpx.post(run_url(srv, False), headers={"x-api-key": KEY}, json={**BODY, "tweaks": tweaks})
    assert r.status_code == 200 and srv.runs[-1].files == [path]
    tweaks = {"ChatInput-Wna_m": {"files": ["someone/else.png"]}}
    got = events(httpx.post(run_url(srv, True), headers={"x-api-key": KEY}, json={**BODY, "tweaks": tweaks}).content)
    assert got[-1]["event"] == "error" and "File not found" in got[1]["data"]["text"]
    flow = httpx.get(f"{srv.base_url}/api/v1/flows/{srv.flow_id}", headers={"x-api-key": KEY}).json()
    assert [n["data"]["type"] for n in flow["data"]["nodes"]][0] == "ChatInput"


def test_request_fields_are_recorded(srv):
    body = {**BODY, "input_type": "bogus", "output_component": "ChatOutput-x", "user_id": "u-9",
            "tweaks": {"OpenAIModelComponent-RcQ3e": {"temperature": 0.1}}}
    httpx.post(run_url(srv, False), headers={"x-api-key": KEY, "X-LANGFLOW-GLOBAL-VAR-TONE": "dry"}, json=body)
    run = srv.runs[-1]
    assert (run.input_value, run.output_component, run.user_id) == ("", "ChatOutput-x", "u-9"), "bogus drops input"
    assert run.tweaks == body["tweaks"] and run.global_vars == {"tone": "dry"}


@pytest.mark.parametrize("fault", [f for f in FAULTS if f.startswith(("http_", "html_"))])
def test_http_faults(srv, fault):
    srv.fault = fault
    r = httpx.post(run_url(srv, True), headers={"x-api-key": KEY}, json=BODY)
    assert r.status_code == int(fault.split("_")[1])
    assert ("html" in r.headers["content-type"]) == fault.startswith("html_")


@pytest.mark.parametrize("fault", ["invalid_json", "error_event", "empty", "non_utf8"])
def test_stream_faults(srv, fault):
    srv.fault = fault
    raw = httpx.post(run_url(srv, True), headers={"x-api-key": KEY}, json=BODY).content
    if fault == "empty":
        assert raw == b""
    elif fault == "non_utf8":
        assert b"\xff\xfe" in raw
    elif fault == "invalid_json":
        assert b"{not json" in raw
    else:
        assert events(raw)[-1]["event"] == "error"


def test_truncated_and_stall_and_active_requests(srv):
    srv.fault = "truncated"
    with pytest.raises(httpx.RemoteProtocolError):
        httpx.post(run_url(srv, True), headers={"x-api-key": KEY}, json=BODY)
    srv.fault = "stall"
    with pytest.raises(httpx.ReadTimeout), httpx.Client(timeout=0.5) as c:
        c.post(run_url(srv, True), headers={"x-api-key": KEY}, json=BODY)
    assert srv.wait_until(lambda: srv.active_requests == 0, timeout=3)
