"""LicosAgent replaying the real LICOS runtime captures byte for byte over a loopback socket, with
the chunk sizes the real server flushed: transcripts/licos/real/ (legacy ``/stream_run``, LF, whole
``answer`` turns) and transcripts/licos/real-managed/ (events-v1: ``id:`` lines, token chunks in
``graph_event``, ``answer`` again at the end, resume via ``/agent/v1/runs/{id}/events``). The request
shape is asserted in test_licos_agent.py, because a replay cannot notice a dropped request field.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.fakes.replay import TRANSCRIPTS, ReplayServer, Reply, split_transcript
from tests.helpers import (
    deltas,
    failure,
    final_text,
    real_peer_fixtures,
    rtype,
    run,
    state_updates,
    terminal,
)

PLUGIN = "licos-agent"  # tests/plugins/conftest.py: the host and runner fixtures
LEGACY = TRANSCRIPTS / "licos" / "real"
MANAGED = TRANSCRIPTS / "licos" / "real-managed"
TOKEN = "sk-test"


def real(path: Path, *, body: bytes | None = None, drop: bool = False) -> Reply:
    _, status, headers, raw = split_transcript(path.read_bytes())
    keep = {k: v for k, v in headers.items() if k in ("vary", "x-licos-stream-resume")}
    ctype = headers.get("content-type", "application/json")
    flushed = path.with_name(path.name.replace(".http", ".chunks.json"))
    sizes = json.loads(flushed.read_text())["http_chunk_sizes"] if flushed.exists() and body is None else None
    return Reply(raw if body is None else body, status=status, content_type=ctype, headers=keep,
                 streamed=ctype.startswith("text/event-stream"), sizes=sizes, drop=drop)


def legacy(name: str) -> ReplayServer:
    return ReplayServer({"POST /stream_run": real(LEGACY / name), "POST /cancel/{run_id}": Reply(
        b'{"status": "not_found"}', content_type="application/json")})


def cfg(srv, **kw):
    return {"base-url": srv.base_url, **kw}


def steps(results):
    return [(rtype(r), r.data.get("tool_name"), r.data.get("parameters") if rtype(r) == "tool.call.started"
             else r.data.get("result")) for r in results if rtype(r).startswith("tool.call.")]


def logs(results):
    return [r.data.get("text", "") for r in results if rtype(r) == "processor.log"]


def test_the_copies_are_unchanged():
    for mine, source in ((LEGACY, "licos"), (MANAGED, "licos-managed")):
        theirs = real_peer_fixtures(source)
        if not theirs.exists():
            pytest.skip("shared fixtures not present")
        for f in theirs.iterdir():
            assert (mine / f.name).read_bytes() == f.read_bytes(), f.name


# -- legacy ------------------------------------------------------------------------------------------


async def test_ok_text(host, runner):
    with legacy("04-stream-run-input-session.http") as srv:
        results = await run(runner, host, "hi", config=cfg(srv))
    end = terminal(results)
    assert rtype(end) == "run.completed"
    assert final_text(results) == "Hello from the fake model."
    assert (end.usage.prompt_tokens, end.usage.completion_tokens, end.usage.total_tokens) == (7, 9, 16)
    assert any("run record" in t and "/run_records/" in t for t in logs(results))
    (session,) = state_updates(results).values()
    assert session.startswith("langbot-")


async def test_ok_usage_carries_the_run_id(host, runner):
    with legacy("06-stream-run-content-query-prompt.http") as srv:
        results = await run(runner, host, "hi from prompt blocks", config=cfg(srv))
        sent = srv.find_requests("POST", "/stream_run")[0]
    end = terminal(results)
    run_id = sent.headers["x-run-id"]
    assert end.usage.total_tokens == 19
    stored = [r for r in results if rtype(r) == "message.completed"][-1].data["message"]
    assert stored["provider_specific_fields"] == {"licos_run_id": run_id}, "the run id is kept with the answer"
    assert any(run_id in t for t in logs(results))


async def test_resume_second_turn_same_session(host, runner):
    srv = ReplayServer({"POST /stream_run": [real(LEGACY / "04-stream-run-input-session.http"),
                                             real(LEGACY / "05-stream-run-same-session-2nd.http")]})
    with srv:
        first = await run(runner, host, "hi", config=cfg(srv))
        second = await run(runner, host, "second", config=cfg(srv))
        bodies = [r.json() for r in srv.find_requests("POST", "/stream_run")]
    assert final_text(first) == final_text(second) == "Hello from the fake model."
    assert bodies[0]["session_id"] == bodies[1]["session_id"]
    assert not state_updates(second), "the session id was kept, not replaced"


async def test_ok_tool(host, runner):
    with legacy("21-stream-run-tool-call.http") as srv:
        results = await run(runner, host, "TOOL weather please", config=cfg(srv))
    started, completed = steps(results)
    assert started == ("tool.call.started", "get_weather", {"city": "Paris"})
    assert completed[:2] == ("tool.call.completed", "get_weather") and "sunny in Paris" in str(completed[2])
    assert final_text(results) == "Tool said: sunny in Paris"
    assert terminal(results).usage.total_tokens == 31


async def test_model_failure_is_retryable_and_usage_stays_unknown(host, runner):
    with legacy("10-stream-run-model-error.http") as srv:
        results = await run(runner, host, "please FAIL", config=cfg(srv))
    code, retryable, message = failure(results)
    assert (code, retryable) == ("upstream.unavailable", True)
    assert "105000" in message and "fake upstream failure" in message
    assert terminal(results).usage is None, "complete=false with zero counts is unknown usage, not 0"
    assert any("incomplete" in t for t in logs(results))


@pytest.mark.parametrize("name", ["08-stream-run-upload-file-data-url.http", "09-stream-run-upload-file-bad-url.http"])
async def test_attachment_failure_names_the_file(host, runner, name):
    png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
    with legacy(name) as srv:
        results = await run(runner, host, "read the attachment", config=cfg(srv),
                            contents=[{"type": "text", "text": "read the attachment"},
                                      {"type": "image_base64", "image_base64": png}])
        prompt = srv.find_requests("POST", "/stream_run")[0].json()["content"]["query"]["prompt"]
    code, retryable, message = failure(results)
    (upload,) = [b["content"]["upload_file"] for b in prompt if b["type"] == "upload_file"]
    assert code == "input.invalid" and not retryable
    assert repr(upload["file_name"]) in message and "Bearer token" in message
    assert upload["url"].startswith("data:image/png;base64,")


async def test_invalid_json_400_is_a_bad_request_without_the_traceback(host, runner):
    with legacy("13-stream-run-invalid-json.http") as srv:
        code, retryable, message = failure(await run(runner, host, config=cfg(srv)))
    assert (code, retryable) == ("upstream.bad_request", False)
    assert "Invalid JSON format" in message and "Traceback" not in message


async def test_bearer_without_a_platform_is_the_untyped_error_event(host, runner):
    with legacy("24-stream-run-with-bearer-no-platform.http") as srv:
        code, _, message = failure(await run(runner, host, config=cfg(srv, **{"api-key": "sk-test-token"})))
    assert code == "config.invalid"
    assert "LICOS_PLATFORM_API_BASE_URL is not configured" in message and "api-key" in message


# -- managed -----------------------------------------------------------------------------------------


def managed(*replies: Reply, events: Reply | None = None) -> ReplayServer:
    routes = {"POST /stream_run": list(replies)}
    if events is not None:
        routes["GET /agent/v1/runs/{run_id}/events"] = events
    return ReplayServer(routes)


def mcfg(srv):
    return {"base-url": srv.base_url, "api-key": TOKEN, "protocol": "managed"}


async def test_managed_streams_tokens_and_shows_the_closing_answer_once(host, runner):
    with managed(real(MANAGED / "m01-stream-run.http")) as srv:
        results = await run(runner, host, "hi", config=mcfg(srv))
    assert final_text(results) == "Hello from the fake model."
    shown = deltas(results)
    assert shown and final_text(results).startswith(shown[-1])  # (all 19 events came within 1 ms)
    assert terminal(results).usage.total_tokens == 153


async def test_managed_tool_call(host, runner):
    with managed(real(MANAGED / "m03-stream-run-tool-call.http")) as srv:
        results = await run(runner, host, "TOOL weather please", config=mcfg(srv))
    assert [s[:2] for s in steps(results)] == [("tool.call.started", "list_files"),
                                               ("tool.call.completed", "list_files")]
    assert final_text(results) == 'Tool said: {"path": ".", "entries": [], "next_offset": null}'
    assert terminal(results).usage.total_tokens == 302


async def test_managed_model_failure(host, runner):
    with managed(real(MANAGED / "m04-stream-run-model-error.http")) as srv:
        code, retryable, message = failure(await run(runner, host, "please FAIL", config=mcfg(srv)))
    assert (code, retryable) == ("upstream.unavailable", True)
    assert "fake upstream failure" in message


async def test_insufficient_credit_402(host, runner):
    with managed(real(MANAGED / "m08-insufficient-credit-stream-run.http")) as srv:
        code, retryable, message = failure(await run(runner, host, config=mcfg(srv)))
    assert (code, retryable) == ("upstream.quota", False)
    assert "INSUFFICIENT_CREDIT_BALANCE" in message and "credit" in message


async def test_managed_without_a_token_bare_500(host, runner):
    with managed(real(MANAGED / "m10-no-bearer-stream-run.http")) as srv:
        code, retryable, message = failure(await run(runner, host, config=mcfg(srv)))
    assert (code, retryable) == ("upstream.unavailable", True)
    assert "api-key" in message


async def test_cursor_outside_the_run_409(host, runner):
    with managed(real(MANAGED / "m21-stream-run-last-event-id-resume.http")) as srv:
        code, _, message = failure(await run(runner, host, config=mcfg(srv)))
    assert code == "upstream.protocol" and "Event cursor is outside this run" in message


async def test_a_dropped_managed_stream_resumes_after_the_last_id(host, runner):
    """m01 cut after ``id: 10`` (the connection drops), then the real ``?after=10`` replay (m14): the
    user gets the whole answer once, without the tokens already shown again."""
    _, _, _, body = split_transcript((MANAGED / "m01-stream-run.http").read_bytes())
    cut = re.search(rb"id: 11\n", body).start()
    with managed(real(MANAGED / "m01-stream-run.http", body=body[:cut], drop=True),
                 events=real(MANAGED / "m14-agent-v1-run-events-after-10.http")) as srv:
        results = await run(runner, host, "hi", config=mcfg(srv))
        (again,) = srv.find_requests("GET")
    assert rtype(terminal(results)) == "run.completed"
    assert final_text(results) == "Hello from the fake model."
    assert again.query.get("after") == "10"
    assert any("resuming" in t for t in logs(results))
