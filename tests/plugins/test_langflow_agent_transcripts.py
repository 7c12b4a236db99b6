"""LangflowAgent replaying wire transcripts byte for byte over a loopback socket: the plain-text
cases under transcripts/langflow/ (reviewable in a diff), and the real Langflow 1.13.0 captures in
fixtures/real-peers/langflow/ exactly as recorded. The outgoing request shape is asserted in
test_langflow_agent.py, because a replay cannot notice a dropped request field.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

import pytest

from runners_cli.host import LocalHost
from tests.fakes.http_server import FakeHTTPServer
from tests.fakes.replay import split_transcript
from tests.helpers import (
    deltas,
    failure,
    final_text,
    make_runner,
    rtype,
    run,
    state_updates,
    terminal,
)

HERE = Path(__file__).parent / "transcripts" / "langflow"
# unchanged copies of the shared real-peer captures (fixtures/real-peers/langflow)
REAL = Path(__file__).resolve().parents[1] / "plugins" / "transcripts" / "langflow" / "real"
FLOW = "54136e28-10ad-4da5-af34-dfbac388ccbf"
DELAY = "x-replay-event-delay"  # a transcript header the replay obeys and does not send


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes
    drop: bool = False  # close the connection instead of ending the chunked body


def parse(raw: bytes) -> Reply:
    """A transcript file: an HTTP response head, a blank line, the body (exact bytes)."""
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    return Reply(int(lines[0].split()[1]), headers, body)


def transcript(name: str, **kw) -> Reply:
    reply = parse((HERE / name).read_bytes())
    for k, v in kw.items():
        setattr(reply, k, v)
    return reply


def real(name: str) -> Reply:
    _, status, headers, body = split_transcript((REAL / name).read_bytes())
    return Reply(status, {k: v for k, v in headers.items() if k in ("content-type", "server", "vary")}, body)


class Replay(FakeHTTPServer):
    """Serves canned replies to /api/v1/run/{flow}, in order (the last one repeats)."""

    def __init__(self, *replies: Reply):
        super().__init__()
        self.replies = list(replies)
        self.served = 0
        self.add_route("POST", "/api/v1/run/{flow}", self._run)

    async def _run(self, req, resp):
        reply = self.replies[min(self.served, len(self.replies) - 1)]
        self.served += 1
        headers = dict(reply.headers)
        delay = float(headers.pop(DELAY, "0") or 0)
        ctype = headers.pop("content-type", "application/json")
        if "event-stream" not in ctype:
            await resp.send(reply.status, reply.body, ctype, headers)
            return
        await resp.start_stream(reply.status, ctype, headers)
        if delay:
            for i, block in enumerate(reply.body.split(b"\n\n")):
                if i:
                    await asyncio.sleep(delay)
                    await resp.write(b"\n\n")
                await resp.write(block)
        else:
            await resp.write_split(reply.body)
        if reply.drop:
            await resp.abort()
        else:
            await resp.end()

    def bodies(self) -> list[dict]:
        return [r.json() for r in self.find_requests("POST")]


def config(srv: Replay, **extra) -> dict:
    return {"base-url": srv.root_url, "api-key": "sk-replay-key", "flow-id": FLOW, **extra}


async def replay(*replies: Reply, **extra):
    with Replay(*replies) as srv:
        host = LocalHost()
        return await run(make_runner("langflow-agent", host), host, config=config(srv, **extra)), srv


# --- the standard cases ---------------------------------------------------------------------------


async def test_ok_text_answer_only_in_add_message_and_end():
    results, _ = await replay(transcript("ok_text.stream"))
    assert rtype(terminal(results)) == "run.completed"
    assert final_text(results) == "Hello 世界 👋", "the echoed user message is not part of the answer"
    assert terminal(results).usage is None, "no model, no usage: omitted, not 0"


async def test_ok_usage_tokens_streamed_repeated_final_message_counted_once():
    results, _ = await replay(transcript("ok_usage.stream"))
    assert final_text(results) == "Hello from the model."
    for a, b in zip(deltas(results), deltas(results)[1:], strict=False):
        assert b.startswith(a)
    assert terminal(results).usage.model_dump() == {"prompt_tokens": 12, "completion_tokens": 4, "total_tokens": 16}


async def test_ok_tool_agent_steps_become_one_tool_call():
    results, _ = await replay(transcript("ok_tool.stream"))
    started = [r.data for r in results if rtype(r) == "tool.call.started"]
    completed = [r.data for r in results if rtype(r) == "tool.call.completed"]
    assert [s["tool_name"] for s in started] == ["get_weather"] and started[0]["parameters"] == {"city": "Paris"}
    assert len(completed) == 1 and completed[0]["result"] == {"forecast": "sunny"}
    assert final_text(results) == "It is sunny in Paris."


async def test_resume_second_turn_sends_the_stored_session():
    with Replay(transcript("ok_text.stream"), transcript("resume.stream")) as srv:
        host = LocalHost()
        runner = make_runner("langflow-agent", host)
        first = await run(runner, host, "hi", config=config(srv))
        (session,) = state_updates(first).values()
        second = await run(runner, host, "and again", config=config(srv))
        assert final_text(second) == "You said hi before." and state_updates(second) == {}
        assert [b["session_id"] for b in srv.bodies()] == [session, session]


async def test_http_401_langflow_says_403_for_a_bad_key():
    code, retryable, message = failure((await replay(transcript("http_401_is_403.http")))[0])
    assert (code, retryable) == ("upstream.auth", False)
    assert "Invalid or missing API key" in message and "Langflow API Keys" in message


async def test_http_404_unknown_flow_names_flow_id():
    code, _, message = failure((await replay(transcript("http_404.http")))[0])
    assert code == "config.invalid" and "flow-id" in message and FLOW in message


async def test_http_429_is_retryable():
    assert failure((await replay(transcript("http_429.http")))[0])[:2] == ("upstream.rate_limited", True)


async def test_http_5xx_graph_error_is_the_flow_failing_and_a_proxy_page_is_unavailable():
    code, retryable, message = failure((await replay(transcript("http_5xx.http")))[0])
    assert (code, retryable) == ("upstream.error", False) and "missing variable 'topic'" in message
    assert "traceback" not in message and "\\" not in message, "the double-encoded detail is unpacked"
    code, retryable, message = failure((await replay(transcript("http_5xx_plain.http")))[0])
    assert (code, retryable) == ("upstream.unavailable", True) and "may be down" in message


async def test_error_event_midstream_keeps_the_partial_text_and_names_the_component():
    results, _ = await replay(transcript("error_event_midstream.stream"))
    code, retryable, message = failure(results)
    assert (code, retryable) == ("upstream.error", False)
    assert message == "the Langflow flow failed in component OpenAI: Rate limit reached for gpt-4o-mini"
    assert deltas(results) and deltas(results)[-1].startswith("Partial")


async def test_malformed_line_is_a_protocol_error():
    assert failure((await replay(transcript("malformed_line.stream")))[0])[:2] == ("upstream.protocol", False)


@pytest.mark.parametrize("drop", [False, True], ids=["body-ends", "connection-drops"])
async def test_truncated_stream_without_end_is_not_a_success(drop):
    results, _ = await replay(transcript("truncated_stream.stream", drop=drop))
    assert failure(results)[:2] == ("upstream.unavailable", True)
    assert deltas(results)[-1] == "Half an ans"


async def test_slow_stream_reaches_the_chat_while_it_is_still_coming():
    with Replay(transcript("slow_stream.stream")) as srv:
        host = LocalHost()
        runner = make_runner("langflow-agent", host)
        ctx = host.make_context("hi", config=config(srv))
        loop = asyncio.get_running_loop()
        started, first, stamps = loop.time(), None, []
        async for r in runner.invoke(ctx):
            stamps.append(r)
            if rtype(r) == "message.delta" and first is None:
                first = loop.time() - started
        assert first is not None and first < loop.time() - started - 1.0
        assert final_text(stamps) == "Hello from the model."


async def test_json_body_where_a_stream_was_asked_for_is_still_answered():
    results, _ = await replay(transcript("ok_nostream.http"))
    assert final_text(results) == "Hello without streaming"


# --- the real Langflow 1.13.0 captures, unchanged ------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "answer"),
    [
        ("02-run-nostream-with-session.http", "hi"),
        ("03-run-nostream-same-session-2nd.http", "second"),
        ("04-run-nostream-no-session.http", "hi"),
        ("05-run-stream-with-session.http", "hi"),
        ("06-run-stream-no-session.http", "hi"),
        ("07-run-stream-unicode.http", "h\u00e9llo \u4e16\u754c \U0001f44b"),
        ("31-llm-run-stream-tokens.http", "Hello from the fake model."),
        ("32-llm-run-nostream.http", "Hello from the fake model."),
    ],
)
async def test_real_capture_answers(name, answer):
    results, _ = await replay(real(name))
    assert rtype(terminal(results)) == "run.completed", terminal(results).data
    assert final_text(results) == answer


async def test_real_llm_capture_streams_tokens_and_reports_usage():
    results, _ = await replay(real("31-llm-run-stream-tokens.http"))
    assert len(deltas(results)) >= 1 and "Hello from the fake model.".startswith(deltas(results)[0])
    assert terminal(results).usage.model_dump() == {"prompt_tokens": 1, "completion_tokens": 9, "total_tokens": 10}


async def test_real_input_type_bogus_gives_no_answer_instead_of_an_empty_one():
    code, _, _ = failure((await replay(real("11-run-stream-bad-input-type.http")))[0])
    assert code == "upstream.empty_response"


@pytest.mark.parametrize(
    ("name", "code", "words"),
    [
        ("08-run-no-api-key.http", "upstream.auth", "requires a valid API key"),
        ("09-run-bad-api-key.http", "upstream.auth", "Invalid or missing API key"),
        ("10-run-unknown-flow.http", "config.invalid", "flow-id"),
        ("21-component-build-error-stream.http", "upstream.error", "LANGFLOW_SSRF_ALLOWED_HOSTS"),
        ("22-component-build-error-nostream.http", "upstream.error", "LANGFLOW_SSRF_ALLOWED_HOSTS"),
        ("33-llm-run-stream-model-error.http", "upstream.error", "fake upstream failure"),
        ("34-llm-run-nostream-model-error.http", "upstream.error", "fake upstream failure"),
    ],
)
async def test_real_capture_failures(name, code, words):
    got, retryable, message = failure((await replay(real(name)))[0])
    assert got == code and not retryable, message
    assert words in message, message
