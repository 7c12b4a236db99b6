"""Self-test of the LICOS fake, driven with plain httpx, checked against the real runtime captures."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest

from tests.fakes.licos import FAULTS, FakeLicos
from tests.fakes.replay import split_transcript

TOKEN = "licos-selftest-token"
TRANSCRIPTS = Path(__file__).resolve().parents[1] / "plugins" / "transcripts" / "licos"
BODY = {"session_id": "s-1", "content": {"query": {"prompt": [{"type": "text", "content": {"text": "hi"}}]}}}


@pytest.fixture
def srv():
    with FakeLicos() as s:
        yield s
    assert s.handler_errors == []


@pytest.fixture
def msrv():
    with FakeLicos(TOKEN, managed=True) as s:
        yield s
    assert s.handler_errors == []


def blocks(raw: bytes) -> list[tuple[str | None, dict]]:
    """(id, data) per event; every event is ``event: message`` with LF line ends."""
    out = []
    assert b"\r\n" not in raw and raw.endswith(b"\n\n")
    for block in raw.decode().split("\n\n"):
        if not block:
            continue
        lines = dict(line.split(": ", 1) for line in block.split("\n"))
        assert lines["event"] == "message"
        out.append((lines.get("id"), json.loads(lines["data"])))
    return out


def real(folder: str, name: str) -> list[tuple[str | None, dict]]:
    return blocks(split_transcript((TRANSCRIPTS / folder / name).read_bytes())[3])


def kinds(events) -> list[str]:
    return [d.get("type") for _, d in events]


def test_legacy_stream_matches_the_real_capture(srv):
    r = httpx.post(srv.url("/stream_run"), json=BODY, headers={"X-Run-Id": "run-1"})
    assert r.headers["content-type"] == "text/event-stream; charset=utf-8"
    got, want = blocks(r.content), real("real", "06-stream-run-content-query-prompt.http")
    assert kinds(got) == kinds(want) == ["message_start", "answer", "message_end"]
    assert got[0][1]["content"]["message_start"] == {"local_msg_id": "run-1", "msg_id": "run-1"}
    assert set(got[2][1]["content"]["message_end"]) == set(want[2][1]["content"]["message_end"])
    assert set(got[2][1]["content"]["message_end"]["token_cost"]) == {"input_tokens", "output_tokens",
                                                                        "total_tokens", "complete"}
    assert r.content.startswith(b'event: message\ndata: {"type": "message_start", "content": {"message_start": ')


def test_legacy_tool_and_failure_match_the_real_captures(srv):
    srv.tool_call = True
    got = blocks(httpx.post(srv.url("/stream_run"), json=BODY).content)
    assert kinds(got) == kinds(real("real", "21-stream-run-tool-call.http"))
    srv.tool_call, srv.fail_model = False, "Error code: 500 - fake upstream failure"
    got = blocks(httpx.post(srv.url("/stream_run"), json=BODY).content)
    want = real("real", "10-stream-run-model-error.http")
    assert kinds(got) == kinds(want)
    assert got[1][1]["content"]["error"]["code"] == want[1][1]["content"]["error"]["code"] == 105000
    assert got[2][1]["content"]["message_end"]["token_cost"]["complete"] is False


def test_bearer_without_platform_gives_the_untyped_event(srv):
    got = blocks(httpx.post(srv.url("/stream_run"), json=BODY, headers={"Authorization": "Bearer x"}).content)
    assert [d for _, d in got] == [d for _, d in real("real", "24-stream-run-with-bearer-no-platform.http")]


def test_upload_needs_a_token(srv):
    body = {"session_id": "s", "content": {"query": {"prompt": [{"type": "upload_file", "content": {"upload_file": {
        "file_name": "a.md", "url": "data:text/markdown;base64,aGk=", "mime_type": "text/markdown"}}}]}}}
    got = blocks(httpx.post(srv.url("/stream_run"), json=body).content)
    assert got[1][1]["content"]["error"] == {**real("real", "08-stream-run-upload-file-data-url.http")[1][1][
        "content"]["error"], "local_msg_id": got[0][1]["content"]["message_start"]["msg_id"]}


def test_invalid_json_and_credit(srv):
    r = httpx.post(srv.url("/stream_run"), content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["detail"].startswith("Invalid JSON format: Traceback")
    srv.broke_users.add("poor")
    r = httpx.post(srv.url("/stream_run"), json=BODY, headers={"X-Licos-Current-User-Id": "poor"})
    want = json.loads(split_transcript((TRANSCRIPTS / "real-managed" / "m08-insufficient-credit-stream-run.http")
                                       .read_bytes())[3])
    assert r.status_code == 402 and set(r.json()) == set(want) and r.json()["errorCode"] == want["errorCode"]


def test_managed_stream_matches_the_real_capture(msrv):
    r = httpx.post(msrv.url("/stream_run"), json=BODY, headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.headers["x-licos-stream-resume"] == "events-v1"
    got, want = blocks(r.content), real("real-managed", "m01-stream-run.http")
    assert kinds(got)[:3] == kinds(want)[:3] == ["message_start", "run_started", "graph_event"]
    assert kinds(got)[-3:] == kinds(want)[-3:] == ["answer", "run_status", "message_end"]
    assert got[0][0] is None and got[-1][0] is None and all(i is not None for i, _ in got[1:-1])
    assert [int(i) for i, _ in got[1:-1]] == list(range(1, len(got) - 1))
    assert "complete" not in got[-1][1]["content"]["message_end"]["token_cost"]


def test_managed_needs_a_bearer(msrv):
    r = httpx.post(msrv.url("/stream_run"), json=BODY)
    assert (r.status_code, r.text, r.headers["content-type"]) == (500, "Internal Server Error",
                                                                 "text/plain; charset=utf-8")


def test_managed_events_replay_after_a_cursor(msrv):
    auth = {"Authorization": f"Bearer {TOKEN}", "X-Run-Id": "r-9"}
    first = blocks(httpx.post(msrv.url("/stream_run"), json=BODY, headers=auth).content)
    raw = blocks(httpx.get(msrv.url("/agent/v1/runs/r-9/events"), params={"after": 3}, headers=auth).content)
    assert [int(i) for i, _ in raw] == list(range(4, len(first) - 1))
    assert "platform_event" in kinds(raw) and "answer" not in kinds(raw)  # the raw format wraps it
    assert kinds(real("real-managed", "m14-agent-v1-run-events-after-10.http"))[-2] == "platform_event"
    chat = blocks(httpx.get(msrv.url("/agent/v1/runs/r-9/events"), params={"after": 3, "format": "chat"},
                            headers=auth).content)
    assert kinds(chat)[-3:] == ["answer", "run_status", "message_end"]
    r = httpx.get(msrv.url("/agent/v1/runs/r-9/events"), params={"after": 999}, headers=auth)
    assert r.status_code == 409 and r.json() == {"detail": "Event cursor is outside this run"}


def test_a_drop_leaves_the_run_going(msrv):
    msrv.drop_after = 4
    auth = {"Authorization": f"Bearer {TOKEN}", "X-Run-Id": "r-d"}
    with pytest.raises(httpx.HTTPError):
        httpx.post(msrv.url("/stream_run"), json=BODY, headers=auth)
    deadline = time.monotonic() + 3
    while msrv.finals["r-d"]["status"] == "running" and time.monotonic() < deadline:
        time.sleep(0.02)
    rest = blocks(httpx.get(msrv.url("/agent/v1/runs/r-d/events"), params={"after": 4, "format": "chat"},
                            headers=auth).content)
    text = "".join(d["data"][0]["content"] for _, d in rest if d.get("type") == "graph_event")
    assert text == " from the fake model."


def test_cancel_legacy_needs_a_token(srv):
    assert httpx.post(srv.url("/cancel/x")).status_code == 401
    assert httpx.post(srv.url("/cancel/x"), headers={"Authorization": "Bearer t"}).status_code == 200
    assert srv.cancelled == ["x"]


@pytest.mark.parametrize("fault", [f for f in FAULTS if f.startswith("http_")])
def test_http_faults_use_the_runtimes_bodies(srv, fault):
    srv.fault = fault
    r = httpx.post(srv.url("/stream_run"), json=BODY)
    assert r.status_code == int(fault[5:]) and "detail" in r.json()


def test_every_fault_name_is_known(srv):
    for name in ("stall", "empty", "truncated", "error_event", "invalid_json", "non_utf8", "oversized",
                 "stall_before_headers"):
        assert name in FAULTS
    with pytest.raises(ValueError):
        srv.fault = "nope"
