"""DeerFlowAgent replaying wire transcripts byte for byte over a loopback socket: the hand-written
DeerFlow gateway answers under transcripts/deerflow/ (LF, ``end``, ``{"name","message"}`` errors,
subagent task events, the clarification tool message), and the real LangGraph API server captures
in transcripts/deerflow/real/ (unchanged copies of fixtures/real-peers/langgraph/: CRLF, heartbeats,
no ``end``). The outgoing request shape is asserted in test_deerflow_agent.py, because a replay
cannot notice a dropped request field.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fakes.replay import TRANSCRIPTS, ReplayServer, Reply, json_reply, split_transcript, transcript
from tests.helpers import deltas, failure, final_text, rtype, run, state_updates, terminal

PLUGIN = "deerflow-agent"  # tests/plugins/conftest.py: the host and runner fixtures
REAL = TRANSCRIPTS / "deerflow" / "real"
THREAD = "deerflow.thread_id"
DF = "/api/langgraph"
LOCATION = {"content-location": "/api/threads/2f1d8c9e-4b7a-4e21-8f3c-5a6b7c8d9e0f/runs/6c3b1f0e-0d5a-4c55-9a38-6f0a7b1c2d3e"}


class LangGraphReplay(ReplayServer):
    """A replay at a LangGraph server root: unknown routes answer FastAPI's ``{"detail":"Not Found"}``."""

    async def not_found(self, req, resp):
        await resp.json(404, {"detail": "Not Found"})


def df(name: str, **kw) -> Reply:
    if name.endswith(".json"):
        return json_reply((TRANSCRIPTS / "deerflow" / name).read_text(), **kw)
    if name.endswith(".html"):
        return Reply((TRANSCRIPTS / "deerflow" / name).read_bytes(), content_type="text/html", streamed=False, **kw)
    return transcript("deerflow", name, content_type="text/event-stream; charset=utf-8",
                      headers=kw.pop("headers", LOCATION), **kw)


def real(name: str, delay: float = 0.0) -> Reply:
    _, status, headers, body = split_transcript((REAL / name).read_bytes())
    keep = {k: v for k, v in headers.items() if k in ("content-type", "content-location", "vary", "server")}
    ctype = keep.pop("content-type", "application/json")
    flushed = REAL / name.replace(".http", ".chunks.json")  # the sizes the real server flushed
    sizes = json.loads(flushed.read_text())["http_chunk_sizes"] if flushed.exists() else None
    return Reply(body, status=status, content_type=ctype, headers=keep, streamed=ctype.startswith("text/event-stream"),
                 sizes=sizes, delay=delay)


def deerflow(*replies: Reply, thread: Reply | None = None, state: Reply | None = None) -> ReplayServer:
    routes = {f"POST {DF}/threads": thread or df("create_thread.json"),
              f"POST {DF}/threads/{{tid}}/runs/stream": list(replies),
              "POST /api/threads/{tid}/uploads": df("upload.json")}
    if state is not None:
        routes[f"GET {DF}/threads/{{tid}}/state"] = state
    return ReplayServer(routes)


def langgraph(*replies: Reply, state: Reply | None = None) -> LangGraphReplay:
    routes = {"POST /threads": real("01-create-thread.http"), "POST /threads/{tid}/runs/stream": list(replies)}
    if state is not None:
        routes["GET /threads/{tid}/state"] = state
    return LangGraphReplay(routes)


def question(results):
    """The open question a run kept (runner_kit.pending), or None."""
    value = next((v for k, v in state_updates(results).items() if k.startswith("deerflow.pending-interrupt")), None)
    return value if (value or {}).get("id") else None


def steps(results):
    return [(rtype(r), r.data.get("tool_name"), r.data.get("parameters") if rtype(r) == "tool.call.started"
             else r.data.get("result")) for r in results if rtype(r).startswith("tool.call.")]


# -- DeerFlow gateway ---------------------------------------------------------------------------------


async def test_ok_text_shows_only_this_runs_answer_with_reasoning(host, runner):
    with deerflow(df("ok_text.stream")) as srv:
        results = await run(runner, host, config={"api-base": srv.root_url})
    assert rtype(terminal(results)) == "run.completed"
    assert final_text(results) == "<think>\nThe user asks about DeerFlow.\n</think>\nDeerFlow is a deep-research agent."
    assert "你好" not in final_text(results), "the earlier turn in values is never replayed"
    assert terminal(results).usage.total_tokens == 134
    assert state_updates(results) == {THREAD: "2f1d8c9e-4b7a-4e21-8f3c-5a6b7c8d9e0f"}


async def test_ok_usage_sums_both_model_calls(host, runner):
    with deerflow(df("ok_usage.stream")) as srv:
        results = await run(runner, host, config={"api-base": srv.root_url})
    end = terminal(results)
    assert (end.usage.prompt_tokens, end.usage.completion_tokens, end.usage.total_tokens) == (170, 24, 194)
    assert steps(results) == [("tool.call.started", "web_search", {"query": "DeerFlow"}),
                              ("tool.call.completed", "web_search",
                               {"output": "DeerFlow is an open-source deep research framework by ByteDance."})]


async def test_ok_tool_subagent_task_is_one_step(host, runner):
    with deerflow(df("ok_tool.stream")) as srv:
        results = await run(runner, host, config={"api-base": srv.root_url})
    assert final_text(results) == "DeerFlow is a deep-research agent."
    (started, completed) = steps(results)
    assert started[:2] == ("tool.call.started", "task") and started[2]["subagent_type"] == "general-purpose"
    assert completed == ("tool.call.completed", "task", {"output": "DeerFlow is a deep-research agent."})
    assert terminal(results).usage.total_tokens == 60 + 340 + 134


async def test_clarification_question_is_the_answer(host, runner):
    with deerflow(df("clarification.stream")) as srv:
        results = await run(runner, host, config={"api-base": srv.root_url})
    assert rtype(terminal(results)) == "run.completed"
    assert final_text(results) == "🤔 Which DeerFlow do you mean?\n\n  1. the ByteDance agent\n  2. the band"
    assert steps(results) == []


async def test_resume_after_an_interrupt(host, runner):
    with deerflow(df("interrupt.stream"), df("resume.stream"), state=df("thread_state_interrupted.json")) as srv:
        first = await run(runner, host, "research DeerFlow", config={"api-base": srv.root_url})
        assert final_text(first) == "Proceed with the research plan?\n\n1. yes\n2. no"
        second = await run(runner, host, "yes", config={"api-base": srv.root_url})
        body = srv.requests[-1].json()
        checked = srv.served[f"GET {DF}/threads/{{tid}}/state"]
    assert question(first)["interrupts"] == ["e9b2c7d1a0f34b6c8d2e1f0a9b8c7d6e"]
    assert checked == 1, "the thread's state was read before resuming (DeerFlow: its next step waits)"
    assert body["command"] == {"resume": "yes"} and "input" not in body
    assert final_text(second) == "Starting the research."
    assert question(second) is None


async def test_error_event_midstream_keeps_the_partial_answer(host, runner):
    with deerflow(df("error_event_midstream.stream")) as srv:
        results = await run(runner, host, config={"api-base": srv.root_url})
    code, retryable, message = failure(results)
    assert (code, retryable) == ("upstream.error", False)
    assert "GraphRecursionError" in message and "recursion-limit" in message
    assert final_text(results).startswith("DeerFlow is a \n\n(This answer is incomplete")


async def test_malformed_line_is_protocol(host, runner):
    with deerflow(df("malformed_line.stream")) as srv:
        assert failure(await run(runner, host, config={"api-base": srv.root_url}))[0] == "upstream.protocol"


async def test_truncated_stream_is_unavailable(host, runner):
    with deerflow(df("truncated_stream.stream", drop=True)) as srv:
        results = await run(runner, host, config={"api-base": srv.root_url})
    assert failure(results)[:2] == ("upstream.unavailable", True)
    assert "DeerFlow is" in final_text(results)


async def test_slow_stream_streams_as_it_arrives(host, runner):
    with deerflow(df("slow_stream.stream", delay=0.004)) as srv:
        results = await run(runner, host, config={"api-base": srv.root_url})
    assert final_text(results) == "DeerFlow is a deep-research agent." and len(deltas(results)) >= 2


@pytest.mark.parametrize(
    ("reply", "code", "retryable", "words"),
    [
        (lambda: df("http_401.json", status=401), "upstream.auth", False, "Authentication required"),
        (lambda: df("http_404_route.json", status=404), "upstream.not_found", False, "api-base"),
        (lambda: df("http_404_thread.json", status=404), "config.invalid", False, "assistant-id"),
        (lambda: df("http_429.json", status=429), "upstream.rate_limited", True, "Too Many Requests"),
        (lambda: df("http_5xx.html", status=502), "upstream.unavailable", True, "HTTP 502"),
    ],
)
async def test_http_errors(host, runner, reply, code, retryable, words):
    with deerflow(reply()) as srv:
        got = failure(await run(runner, host, config={"api-base": srv.root_url}))
    assert got[:2] == (code, retryable) and words in got[2], got


# -- real LangGraph API server captures ------------------------------------------------------------------


async def test_real_echo_two_turns_never_replay_the_first(host, runner):
    with langgraph(real("02-echo-run1-stream-values-messages-tuple.http"), real("03-echo-run2-same-thread.http")) as srv:
        first = await run(runner, host, "hi", config={"api-base": srv.root_url, "assistant-id": "echo"})
        second = await run(runner, host, "second", config={"api-base": srv.root_url, "assistant-id": "echo"})
    assert final_text(first) == "echo: hi"
    assert final_text(second) == "echo: second"
    assert state_updates(first) == {THREAD: "01a22add-fd22-70a9-818a-85442c88d770"}
    assert terminal(first).usage is None, "usage_metadata null: unknown, never 0"


async def test_real_streamed_chunks_with_usage(host, runner):
    # the server's own chunks, 0.1 s apart (as a model would pace them), so the deltas can be seen
    with langgraph(real("06-fake-run-stream-values-messages-tuple.http", delay=0.1)) as srv:
        results = await run(runner, host, config={"api-base": srv.root_url, "assistant-id": "fake"})
    assert final_text(results) == "Hello from the fake model."
    assert len(deltas(results)) >= 2
    u = terminal(results).usage
    assert (u.prompt_tokens, u.completion_tokens, u.total_tokens) == (1, 9, 10)


async def test_real_messages_mode_partials_are_accumulated_not_deltas(host, runner):
    with langgraph(real("07-fake-run-stream-messages.http")) as srv:
        results = await run(runner, host, config={"api-base": srv.root_url})
    assert final_text(results) == "Hello from the fake model."


async def test_real_updates_only_stream_still_answers(host, runner):
    with langgraph(real("08-fake-run-stream-updates.http")) as srv:
        results = await run(runner, host, config={"api-base": srv.root_url})
    assert final_text(results) == "Hello from the fake model."


async def test_real_graph_exception_is_upstream_error(host, runner):
    with langgraph(real("10-boom-run-stream-error.http")) as srv:
        code, retryable, message = failure(await run(runner, host, config={"api-base": srv.root_url}))
    assert (code, retryable) == ("upstream.error", False) and "boom: deliberate failure" in message


async def test_real_model_failure_is_retryable(host, runner):
    with langgraph(real("32-react-stream-model-error.http")) as srv:
        code, retryable, message = failure(await run(runner, host, config={"api-base": srv.root_url}))
    assert (code, retryable) == ("upstream.unavailable", True) and "An internal error occurred" in message


async def test_real_unknown_assistant_422(host, runner):
    with langgraph(real("12-unknown-assistant-stream.http")) as srv:
        code, _, message = failure(await run(runner, host, config={"api-base": srv.root_url, "assistant-id": "nope"}))
    assert code == "config.invalid" and "Invalid assistant" in message and "assistant-id" in message


async def test_real_unknown_thread_starts_fresh_once(host, runner):
    with langgraph(real("02-echo-run1-stream-values-messages-tuple.http"), real("13-unknown-thread-stream.http"),
                   real("02-echo-run1-stream-values-messages-tuple.http")) as srv:
        await run(runner, host, config={"api-base": srv.root_url})
        second = await run(runner, host, config={"api-base": srv.root_url})
    assert rtype(terminal(second)) == "run.completed"
    notice, _, answer = final_text(second).partition("\n\n")
    assert "new one" in notice and answer == "echo: hi"


async def test_real_bad_body_422(host, runner):
    with langgraph(real("14-bad-body-stream.http")) as srv:
        code, _, message = failure(await run(runner, host, config={"api-base": srv.root_url}))
    assert code == "upstream.bad_request" and "assistant_id" in message


async def test_real_heartbeat_comment_is_skipped(host, runner):
    with langgraph(real("18-slow-run-heartbeat.http")) as srv:
        assert final_text(await run(runner, host, config={"api-base": srv.root_url})) == "slow echo: hi"


async def test_real_busy_thread_409(host, runner):
    with langgraph(real("24-busy-thread-reject.http")) as srv:
        code, retryable, message = failure(await run(runner, host, config={"api-base": srv.root_url}))
    assert (code, retryable) == ("upstream.rate_limited", True) and "already running" in message


async def test_real_tool_call_chunks_and_tool_message(host, runner):
    with langgraph(real("31-react-stream-tool-call.http")) as srv:
        results = await run(runner, host, config={"api-base": srv.root_url, "assistant-id": "react"})
    assert steps(results) == [("tool.call.started", "get_weather", {"city": "Paris"}),
                              ("tool.call.completed", "get_weather", {"output": "sunny in Paris"})]
    assert final_text(results).startswith("Tool said: sunny")
    assert terminal(results).usage.prompt_tokens is not None


async def test_real_interrupt_then_resume(host, runner):
    with langgraph(real("34-ask-stream-interrupt.http"), real("36-ask-stream-resume.http"),
                   state=real("35-ask-thread-state-interrupted.http")) as srv:
        first = await run(runner, host, "weather?", config={"api-base": srv.root_url, "assistant-id": "ask"})
        second = await run(runner, host, "Paris", config={"api-base": srv.root_url, "assistant-id": "ask"})
        body = srv.requests[-1].json()
        checked = srv.served["GET /threads/{tid}/state"]
    assert rtype(terminal(first)) == "run.completed" and final_text(first) == "Which city?"
    assert question(first)["interrupts"] == ["fb65204ec2658204333918779f65c7ef"]
    assert checked == 1, "the real state lists the interrupt by id: it still waits, so the reply resumes it"
    assert body == {**body, "command": {"resume": "Paris"}} and "input" not in body
    assert final_text(second) == "you said: Paris"


def test_real_copies_are_unchanged():
    from tests.helpers import real_peer_fixtures

    shared = real_peer_fixtures("langgraph")
    if not shared.is_dir():
        pytest.skip("the shared real-peer fixtures are not beside the repository")
    for copy in sorted(Path(REAL).glob("*.http")):
        assert copy.read_bytes() == (shared / copy.name).read_bytes(), copy.name
