"""DeerFlowAgent against the loopback fake DeerFlow / LangGraph server: request shape, threads and
per-run diffing, streaming quirks, tools and subagents, interrupts and clarifying questions, errors,
files, base URL forms and the prefix probe, cancel, and the migrated pipeline config."""

from __future__ import annotations

import asyncio
import base64
import time

import pytest

from runners_cli.host import Identity
from tests.fakes.deerflow import FakeDeerFlow
from tests.helpers import deltas, failure, final_text, rtype, run, state_updates, terminal

PLUGIN = "deerflow-agent"  # tests/plugins/conftest.py: the host and runner fixtures
KEY = "df-pat-plugin-test-token"
THREAD = "deerflow.thread_id"  # the default identity (one thread per LangBot conversation) keeps it here
PENDING = "deerflow.pending-interrupt"  # an interrupt waiting for its asker (runner_kit.pending)
ANSWER = "Hello from the fake agent."
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x01" * 32).decode()


@pytest.fixture(name="srv")
def deerflow_fake():
    """The fake DeerFlow gateway (other DeerFlow test modules import it: ``srv`` there too)."""
    with FakeDeerFlow(api_key=KEY) as s:
        yield s
    assert s.handler_errors == []


@pytest.fixture(name="lg")
def langgraph_fake():
    """The fake as a plain LangGraph API server (``lg``)."""
    with FakeDeerFlow(flavor="langgraph") as s:
        yield s
    assert s.handler_errors == []


def cfg(srv, **extra):
    base = {"api-base": srv.base_url}
    if srv.api_key:
        base["api-key"] = KEY
    return {**base, **extra}


def tool_events(results):
    out = []
    for r in results:
        if rtype(r) in ("tool.call.started", "tool.call.completed"):
            out.append((rtype(r), r.data))
    return out


# -- request shape ------------------------------------------------------------------------------------


async def test_request_shape(srv, host, runner):
    results = await run(runner, host, "hello", config=cfg(srv))
    assert final_text(results) == ANSWER
    (create,) = srv.find_requests("POST", "/api/langgraph/threads")
    assert create.json() == {"metadata": {"source": "langbot", "langbot_user": "conversation_conv-1"}}
    (req,) = srv.stream_requests()
    tid = state_updates(results)[THREAD]
    assert req.path == f"/api/langgraph/threads/{tid}/runs/stream"
    assert req.headers["authorization"] == f"Bearer {KEY}" and req.headers["x-api-key"] == KEY
    body = req.json()
    assert set(body) == {"assistant_id", "input", "stream_mode", "config", "context", "multitask_strategy",
                         "on_disconnect"}
    assert body["assistant_id"] == "lead_agent"
    assert body["input"] == {"messages": [{"role": "user", "content": "hello"}]}
    assert body["stream_mode"] == ["values", "messages-tuple", "updates", "custom"]
    assert body["config"] == {"recursion_limit": 1000}, "no configurable: LangGraph refuses it next to context"
    assert body["context"] == {"thinking_enabled": False, "is_plan_mode": False,
                               "subagent_enabled": False, "max_concurrent_subagents": 3}
    assert (body["multitask_strategy"], body["on_disconnect"]) == ("reject", "continue"), "a cut stream is joined again"


async def test_deerflow_settings_reach_the_context(srv, host, runner):
    settings = {"model-name": "deepseek-v3", "thinking-enabled": True, "plan-mode": True, "subagent-enabled": True,
                "max-concurrent-subagents": 5, "recursion-limit": 50, "assistant-id": "lead_agent"}
    await run(runner, host, config=cfg(srv, **settings))
    body = srv.stream_requests()[0].json()
    assert body["context"] == {
        "thinking_enabled": True, "is_plan_mode": True, "subagent_enabled": True,
        "max_concurrent_subagents": 5, "model_name": "deepseek-v3"}
    assert body["config"] == {"recursion_limit": 50}


async def test_auth_header_wins_over_the_api_key(srv, host, runner):
    srv.api_keys.add("other-token")
    await run(runner, host, config=cfg(srv, **{"auth-header": "Bearer other-token"}))
    req = srv.stream_requests()[0]
    assert req.headers["authorization"] == "Bearer other-token" and req.headers["x-api-key"] == KEY


async def test_no_key_sends_no_credential_headers(host, runner):
    with FakeDeerFlow() as open_srv:  # DEER_FLOW_AUTH_DISABLED
        assert final_text(await run(runner, host, config=cfg(open_srv))) == ANSWER
        req = open_srv.stream_requests()[0]
        assert "authorization" not in req.headers and "x-api-key" not in req.headers


# -- threads and per-run diffing ----------------------------------------------------------------------


async def test_resume_second_turn_continues_the_thread_and_never_replays_the_first_answer(srv, host, runner):
    first = await run(runner, host, "one", config=cfg(srv))
    tid = state_updates(first)[THREAD]
    srv.answer_tokens = ["The ", "second ", "answer."]
    second = await run(runner, host, "two", config=cfg(srv))
    assert final_text(second) == "The second answer.", "values carry the whole history: only this run counts"
    assert not state_updates(second), "the same thread, nothing new to store"
    assert [r.path for r in srv.stream_requests()] == [f"/api/langgraph/threads/{tid}/runs/stream"] * 2
    assert len(srv.find_requests("POST", "/api/langgraph/threads")) == 1
    assert [m["type"] for m in srv.threads[tid].messages] == ["human", "ai", "human", "ai"]


async def test_each_conversation_gets_its_own_thread(srv, host, runner):
    a = await run(runner, host, config=cfg(srv))
    b = await run(runner, host, config=cfg(srv), identity=Identity(conversation_id="conv-2"))
    assert state_updates(a)[THREAD] != state_updates(b)[THREAD]


async def test_whole_ai_message_from_a_node_is_shown_once(srv, host, runner):
    srv.whole_message = True
    results = await run(runner, host, config=cfg(srv))
    assert final_text(results) == ANSWER
    assert terminal(results).usage.total_tokens == 16


async def test_ok_usage_sums_the_runs_ai_messages(srv, host, runner):
    srv.tool_call = True
    end = terminal(await run(runner, host, config=cfg(srv)))
    # tool-calling turn 7+4, answering turn 11+5
    assert (end.usage.prompt_tokens, end.usage.completion_tokens, end.usage.total_tokens) == (18, 9, 27)
    srv.include_usage = False
    srv.tool_call = False
    assert terminal(await run(runner, host, config=cfg(srv))).usage is None


async def test_ok_tool_call_chunks_become_one_tool_step_with_whole_arguments(srv, host, runner):
    srv.tool_call = True
    results = await run(runner, host, config=cfg(srv))
    assert final_text(results) == ANSWER
    steps = tool_events(results)
    assert [s[0] for s in steps] == ["tool.call.started", "tool.call.completed"]
    assert steps[0][1]["tool_name"] == "get_weather" and steps[0][1]["parameters"] == {"city": "Paris"}
    assert steps[1][1]["result"] == {"output": "sunny in Paris"}


async def test_subagent_task_events_are_one_step_each(srv, host, runner):
    srv.subagent = True
    results = await run(runner, host, config=cfg(srv, **{"subagent-enabled": True}))
    assert final_text(results) == ANSWER
    steps = tool_events(results)
    assert [s[0] for s in steps] == ["tool.call.started", "tool.call.completed"], steps
    assert steps[0][1]["tool_name"] == "task" and steps[0][1]["parameters"]["description"] == "Look it up"
    assert steps[1][1]["result"] == {"output": "It is sunny."}
    assert terminal(results).usage.total_tokens == 11 + 8 + 16, "the subagent's own tokens count too"


@pytest.mark.parametrize("blocks", [False, True])
async def test_reasoning_is_think_and_can_be_hidden(srv, host, runner, blocks):
    srv.reasoning = "Think about it first."
    srv.thinking_blocks = blocks
    shown = final_text(await run(runner, host, config=cfg(srv)))
    assert shown == "<think>\nThink about it first.\n</think>\n" + ANSWER
    hidden = final_text(await run(runner, host, config=cfg(srv, **{"remove-think": True})))
    assert hidden == ANSWER


async def test_slow_stream_arrives_in_pieces_with_heartbeats_between(srv, host, runner):
    srv.token_delay = 0.3
    srv.heartbeat_interval = 0.1
    results = await run(runner, host, config=cfg(srv, **{"advanced-settings": True, "idle-timeout": 0.25}))
    assert final_text(results) == ANSWER, "heartbeats keep an idle timeout shorter than the token gap away"
    assert deltas(results)[0] == "Hello" and len(deltas(results)) >= 2


# -- interrupts and clarifying questions --------------------------------------------------------------


async def test_interrupt_asks_the_question_and_the_next_message_resumes(srv, host, runner):
    srv.interrupt_value = {"question": "Which city?", "options": ["Paris", "Berlin"]}
    first = await run(runner, host, "weather?", config=cfg(srv))
    assert rtype(terminal(first)) == "run.completed"
    assert final_text(first) == "Which city?\n\n1. Paris\n2. Berlin"
    tid = state_updates(first)[THREAD]
    (question,) = [v for k, v in state_updates(first).items() if k.startswith(PENDING)]
    assert question["thread_id"] == tid and question["interrupts"] == [srv.threads[tid].interrupt["id"]]
    assert question["title"] == "Which city?" and question["actor"] == "u-1"
    srv.interrupt_value = None
    second = await run(runner, host, "Paris", config=cfg(srv))
    assert final_text(second) == "you said: Paris"
    body = srv.stream_requests()[1].json()
    assert body["command"] == {"resume": "Paris"} and "input" not in body
    (settled,) = [v for k, v in state_updates(second).items() if k.startswith(PENDING)]
    assert "id" not in settled and settled["answered"][0]["id"] == question["id"], "answered: no question is open"
    assert THREAD not in state_updates(second), "the thread id stays as it was"
    third = await run(runner, host, "thanks", config=cfg(srv))
    assert "input" in srv.stream_requests()[2].json() and final_text(third) == ANSWER


async def test_a_plain_string_interrupt_is_shown_as_is(srv, host, runner):
    srv.interrupt_value = "Approve the plan? (yes/no)"
    assert final_text(await run(runner, host, config=cfg(srv))) == "Approve the plan? (yes/no)"


async def test_deerflow_clarification_is_shown_as_the_answer(srv, host, runner):
    srv.clarification = {"question": "❓ Which city do you mean?", "clarification_type": "missing_info"}
    results = await run(runner, host, "weather?", config=cfg(srv))
    assert rtype(terminal(results)) == "run.completed"
    assert final_text(results) == "❓ Which city do you mean?"
    assert tool_events(results) == [], "ask_clarification is the question, not a tool step"
    assert isinstance(state_updates(results)[THREAD], str), "no graph interrupt: the next message is new input"


async def test_empty_answer_is_a_failure_not_an_apology(srv, host, runner):
    srv.answer_tokens = []
    srv.include_usage = False
    code, _, _ = failure(await run(runner, host, config=cfg(srv)))
    assert code == "upstream.empty_response"


# -- errors ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fault", "code", "retryable", "words"),
    [
        ("http_401", "upstream.auth", False, "Authentication required"),
        ("http_404", "upstream.not_found", False, "api-base"),
        ("http_429", "upstream.rate_limited", True, "Too Many Requests"),
        ("http_500", "upstream.unavailable", True, "HTTP 500"),
        ("http_503", "upstream.unavailable", True, "HTTP 503"),
        ("invalid_json", "upstream.protocol", False, "invalid JSON"),
        ("empty", "upstream.empty_response", False, "without sending anything"),
    ],
)
async def test_http_and_stream_faults(srv, host, runner, fault, code, retryable, words):
    srv.fault = fault
    got = failure(await run(runner, host, config=cfg(srv)))
    assert got[:2] == (code, retryable) and words in got[2], got


async def test_error_event_midstream_keeps_what_was_streamed(srv, host, runner):
    srv.fail_with = ("ValueError", "boom: the graph failed")
    results = await run(runner, host, config=cfg(srv))
    code, retryable, message = failure(results)
    assert (code, retryable) == ("upstream.error", False) and "ValueError: boom: the graph failed" in message
    assert final_text(results).startswith(ANSWER + "\n\n(This answer is incomplete")


async def test_langgraph_error_event_shape(lg, host, runner):
    lg.fail_with = ("OpenAIAPIError", "An internal error occurred")
    code, retryable, message = failure(await run(runner, host, config=cfg(lg)))
    assert (code, retryable) == ("upstream.unavailable", True) and "OpenAIAPIError" in message


async def test_truncated_stream_is_unavailable(srv, host, runner):
    srv.fault = "truncated"
    results = await run(runner, host, config=cfg(srv))
    assert failure(results)[:2] == ("upstream.unavailable", True)
    assert deltas(results) and final_text(results).startswith("Hello")


async def test_malformed_line_is_protocol(srv, host, runner):
    srv.fault = "non_utf8"
    assert failure(await run(runner, host, config=cfg(srv)))[0] == "upstream.protocol"


async def test_busy_thread_is_a_clear_retryable_error(srv, host, runner):
    await run(runner, host, config=cfg(srv))
    (thread,) = srv.threads.values()
    thread.busy = True
    code, retryable, message = failure(await run(runner, host, config=cfg(srv)))
    assert (code, retryable) == ("upstream.rate_limited", True) and "still working" in message


async def test_deleted_thread_starts_a_fresh_one_once(lg, host, runner):
    """LangGraph answers a run on a thread it no longer has with 404: one fresh thread, announced."""
    first = await run(runner, host, config=cfg(lg))
    lg.forget_conversations()
    second = await run(runner, host, config=cfg(lg))
    assert rtype(terminal(second)) == "run.completed"
    notice, _, answer = final_text(second).partition("\n\n")
    assert answer == ANSWER and "new one" in notice
    assert state_updates(second)[THREAD] != state_updates(first)[THREAD]
    assert len(lg.stream_requests()) == 3


@pytest.mark.parametrize("notice", [True, False])
async def test_deerflow_restarting_a_lost_thread_empty_is_announced(srv, host, runner, notice):
    """The gateway before 2.0-rc did not say 404: it started the missing thread again, empty, under
    the same id."""
    srv.creates_unknown_threads = True
    settings = {"advanced-settings": True, "session-reset-notice": notice}
    first = await run(runner, host, config=cfg(srv, **settings))
    await run(runner, host, config=cfg(srv, **settings))
    srv.forget_conversations()
    third = await run(runner, host, config=cfg(srv, **settings))
    text = final_text(third)
    if notice:
        assert text == "(The previous conversation could not be continued, so this reply starts a new one.)\n\n" + ANSWER
    else:
        assert text == ANSWER
    assert not state_updates(third) and len(srv.stream_requests()) == 3, "the same thread id goes on"
    assert list(srv.threads) == [state_updates(first)[THREAD]]
    fourth = await run(runner, host, config=cfg(srv, **settings))
    assert final_text(fourth) == ANSWER, "the next message continues it without a notice"


async def test_a_new_thread_is_kept_only_once_a_run_started(srv, host, runner):
    srv.fault = "http_503"
    failed = await run(runner, host, config=cfg(srv))
    assert failure(failed)[0] == "upstream.unavailable" and not state_updates(failed)
    srv.fault = None
    ok = await run(runner, host, config=cfg(srv))
    assert final_text(ok) == ANSWER, "no 'new conversation' notice for a thread that never held a message"


async def test_unknown_assistant_is_config_invalid_and_never_loops(lg, host, runner):
    await run(runner, host, config=cfg(lg))  # a stored thread
    lg.clear_requests()
    ghost = "6f1c2b7e-0000-4000-8000-000000000000"
    code, retryable, message = failure(await run(runner, host, config=cfg(lg, **{"assistant-id": ghost})))
    assert (code, retryable) == ("config.invalid", False) and "assistant-id" in message and ghost in message
    assert len(lg.stream_requests()) == 2, "the stored thread, then one fresh thread: no loop"
    assert len(lg.find_requests("POST", "/threads")) == 1


async def test_deerflow_custom_agent_and_bad_names(srv, host, runner):
    assert final_text(await run(runner, host, config=cfg(srv, **{"assistant-id": "my_researcher"}))) == ANSWER
    code, _, message = failure(await run(runner, host, config=cfg(srv, **{"assistant-id": "no such/agent"})))
    assert code == "config.invalid" and "assistant-id" in message
    code, _, message = failure(await run(runner, host, config=cfg(srv, **{"model-name": "gpt-9"})))
    assert code == "config.invalid" and "model-name" in message and "gpt-9" in message


async def test_langgraph_invalid_assistant_422_points_at_assistant_id(lg, host, runner):
    code, _, message = failure(await run(runner, host, config=cfg(lg, **{"assistant-id": "nope"})))
    assert code == "config.invalid" and "assistant-id" in message


async def test_deerflow_refuses_unsupported_options_so_none_are_sent(srv, host, runner):
    """The fake rejects what DeerFlow rejects (extra fields, stream_resumable, mode "messages")."""
    assert rtype(terminal(await run(runner, host, config=cfg(srv)))) == "run.completed"
    body = srv.stream_requests()[0].json()
    assert "messages" not in body["stream_mode"] and "stream_resumable" not in body


# -- files ------------------------------------------------------------------------------------------------


async def test_images_go_as_content_parts_and_files_are_uploaded(srv, host, runner):
    contents = [
        {"type": "text", "text": "look"},
        {"type": "image_base64", "image_base64": f"data:image/png;base64,{PNG}"},
        {"type": "file_base64", "file_base64": base64.b64encode(b"notes").decode(), "file_name": "notes.txt"},
    ]
    results = await run(runner, host, "look", config=cfg(srv), contents=contents)
    assert final_text(results) == ANSWER
    (upload,) = [r for r in srv.requests if r.path.endswith("/uploads")]
    tid = state_updates(results)[THREAD]
    assert upload.path == f"/api/threads/{tid}/uploads" and upload.headers["authorization"] == f"Bearer {KEY}"
    assert srv.threads[tid].uploads == {"notes.txt": b"notes"}
    msg = srv.stream_requests()[0].json()["input"]["messages"][0]
    assert msg["content"] == [{"type": "text", "text": "look"},
                              {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}]
    assert msg["additional_kwargs"] == {"files": [{"filename": "notes.txt", "size": 5,
                                                   "path": "/mnt/user-data/uploads/notes.txt", "status": "uploaded"}]}


async def test_plain_langgraph_server_gets_images_and_a_note_for_other_files(lg, host, runner):
    contents = [
        {"type": "image_base64", "image_base64": f"data:image/png;base64,{PNG}"},
        {"type": "file_base64", "file_base64": base64.b64encode(b"notes").decode(), "file_name": "notes.txt"},
    ]
    results = await run(runner, host, "look", config=cfg(lg), contents=contents)
    text = final_text(results)
    assert text.startswith("(Not sent to DeerFlow: 'notes.txt'; only images can be passed") and text.endswith(ANSWER)
    content = lg.stream_requests()[0].json()["input"]["messages"][0]["content"]
    assert [p["type"] for p in content] == ["text", "image_url"]
    assert not [r for r in lg.requests if "upload" in r.path]


# -- base URL and the API prefix ----------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", ["", "/", "/api/langgraph", "/api/langgraph/", "/api", "/api/"])
async def test_deerflow_base_url_forms(srv, host, runner, suffix):
    results = await run(runner, host, config=cfg(srv, **{"api-base": srv.root_url + suffix}))
    assert final_text(results) == ANSWER
    want = "/api" if suffix.startswith("/api") and "langgraph" not in suffix else "/api/langgraph"
    assert [r.path.rsplit("/threads", 1)[0] for r in srv.requests if r.method == "POST"] == [want, want]


@pytest.mark.parametrize("suffix", ["", "/"])
async def test_plain_langgraph_root_is_probed_once_and_remembered(lg, host, runner, suffix):
    first = await run(runner, host, config=cfg(lg, **{"api-base": lg.root_url + suffix}))
    assert final_text(first) == ANSWER
    assert [r.path for r in lg.requests][:2] == ["/api/langgraph/threads", "/threads"]
    lg.clear_requests()
    await run(runner, host, "again", config=cfg(lg, **{"api-base": lg.root_url + suffix}))
    assert [r.path.split("/runs")[0].rsplit("/", 1)[0] for r in lg.requests] == ["/threads"], "no second probe"


async def test_nothing_answering_at_the_address_is_config_invalid(host, runner):
    from tests.fakes.http_server import FakeHTTPServer

    with FakeHTTPServer() as nothing:
        code, _, message = failure(await run(runner, host, config={"api-base": nothing.root_url + "/x"}))
    assert code == "config.invalid" and "api-base" in message and "/api/langgraph" in message


@pytest.mark.parametrize("bad", ["ftp://host", "not a url", "http://"])
async def test_api_base_must_be_http(host, runner, bad):
    code, _, message = failure(await run(runner, host, config={"api-base": bad}))
    assert code == "config.invalid" and "api-base" in message


# -- cancel -------------------------------------------------------------------------------------------------


async def test_host_cancel_cancels_the_run_upstream(srv, host, runner):
    srv.answer_tokens = ["a "] * 100
    srv.token_delay = 0.05
    gen = runner.invoke(host.make_context("hi", config=cfg(srv)))
    async for r in gen:
        if rtype(r) == "message.delta":
            break
    await gen.aclose()
    assert await srv.wait_until_async(lambda: bool(srv.cancelled), 3)
    (run_,) = srv.runs
    assert srv.cancelled == [run_.run_id]
    (req,) = [r for r in srv.requests if r.path.endswith("/cancel")]
    assert req.path == f"/api/langgraph/threads/{run_.thread_id}/runs/{run_.run_id}/cancel"
    assert req.headers["authorization"] == f"Bearer {KEY}"


async def test_idle_timeout_cancels_the_run_upstream(srv, host, runner):
    srv.fault = "stall"
    srv.answer_tokens = ["first ", "second"]
    results = await run(runner, host, config=cfg(srv, **{"advanced-settings": True, "idle-timeout": 0.5}),
                        deadline_at=time.time() + 10)
    assert failure(results)[:2] == ("upstream.timeout", True)
    assert await srv.wait_until_async(lambda: bool(srv.cancelled), 3)


async def test_finished_run_is_not_cancelled(srv, host, runner):
    await run(runner, host, config=cfg(srv))
    await asyncio.sleep(0.05)
    assert not srv.cancelled and not [r for r in srv.requests if r.path.endswith("/cancel")]


# -- identities and the migrated pipeline -----------------------------------------------------------------


async def test_group_shares_one_thread_by_default(srv, host, runner):
    def ident(actor):
        return Identity(conversation_id="group-1", actor_id=actor, launcher_type="group", launcher_id="g-1")

    a = await run(runner, host, config=cfg(srv), identity=ident("alice"))
    await run(runner, host, config=cfg(srv), identity=ident("bob"))
    tid = state_updates(a)[THREAD]
    assert {r.path for r in srv.stream_requests()} == {f"/api/langgraph/threads/{tid}/runs/stream"}


async def test_migrated_pipeline_config_runs(host, runner):
    """The exact config LangBot 4.11.2's migration emits for a deerflow-api pipeline (int timeout 300,
    no advanced-settings), against DeerFlow with authentication disabled."""
    with FakeDeerFlow() as open_srv:
        migrated = {
            "api-base": open_srv.root_url, "api-key": "", "auth-header": "", "assistant-id": "lead_agent",
            "model-name": "", "thinking-enabled": False, "plan-mode": False, "subagent-enabled": False,
            "max-concurrent-subagents": 3, "timeout": 300, "recursion-limit": 1000,
            "enable-all-tools": False, "tools": [], "knowledge-bases": [], "mcp-resources": [],
            "mcp-resource-agent-read-enabled": False,
        }
        first = await run(runner, host, config=migrated)
        assert final_text(first) == ANSWER
        second = await run(runner, host, "again", config=migrated)
        assert final_text(second) == ANSWER
        tid = state_updates(first)[THREAD]
        assert [r.path for r in open_srv.stream_requests()] == [f"/api/langgraph/threads/{tid}/runs/stream"] * 2
        body = open_srv.stream_requests()[0].json()
        assert "authorization" not in open_srv.stream_requests()[0].headers
        assert body["context"]["thinking_enabled"] is False and body["config"] == {"recursion_limit": 1000}


async def test_timeout_is_the_hosts_deadline(srv, host, runner):
    srv.token_delay = 1.0
    started = time.monotonic()
    code, retryable, _ = failure(await run(runner, host, config=cfg(srv, timeout=1.5)))
    assert (code, retryable) == ("upstream.timeout", True) and time.monotonic() - started < 3
    assert await srv.wait_until_async(lambda: bool(srv.cancelled), 3), "the run is cancelled upstream too"


async def test_langgraph_platform_key_goes_as_x_api_key_and_its_403_is_auth(host, runner):
    with FakeDeerFlow(api_key=KEY, flavor="langgraph") as platform:
        assert final_text(await run(runner, host, config=cfg(platform))) == ANSWER
        assert platform.stream_requests()[0].headers["x-api-key"] == KEY
        code, _, message = failure(await run(runner, host, config={"api-base": platform.root_url},
                                             identity=Identity(conversation_id="conv-9")))
    assert code == "upstream.auth" and "Missing API key" in message and "api-key" in message


async def test_a_file_note_does_not_stop_the_fresh_thread_retry(lg, host, runner):
    await run(runner, host, config=cfg(lg))
    lg.forget_conversations()
    contents = [{"type": "file_base64", "file_base64": base64.b64encode(b"notes").decode(), "file_name": "notes.txt"}]
    results = await run(runner, host, "read", config=cfg(lg), contents=contents)
    assert rtype(terminal(results)) == "run.completed", terminal(results).data
    text = final_text(results)
    assert "new one" in text and "'notes.txt'" in text and text.endswith(ANSWER)


async def test_a_lost_thread_is_noticed_in_the_first_run_after_a_restart(srv, host, runner):
    """A new plugin process knows no prefix yet (it probes while running the kept thread) and still
    notices the empty restarted thread."""
    import sys

    srv.creates_unknown_threads = True
    first = await run(runner, host, config=cfg(srv))
    prefixes = sys.modules[type(runner).adapter.__module__]._PREFIXES
    assert prefixes[srv.root_url] == "/api/langgraph"
    del prefixes[srv.root_url]  # as after a restart
    srv.forget_conversations()
    second = await run(runner, host, config=cfg(srv))
    assert final_text(second).startswith("(The previous conversation could not be continued")
    assert list(srv.threads) == [state_updates(first)[THREAD]]


@pytest.mark.parametrize("restarted", [False, True])
async def test_a_thread_deerflow_no_longer_tracks_starts_a_new_one_with_the_notice(srv, host, runner, restarted):
    """DeerFlow since 2.0-rc answers a run on a thread it does not track (deleted, or its store
    restarted) with 404 ``Thread <id> not found``: the runner creates a new thread, says so once,
    and keeps the new one. In a new plugin process (no prefix remembered) that 404 is not taken for
    a missing route: the prefix stays the DeerFlow one."""
    import sys

    first = await run(runner, host, config=cfg(srv))
    old = state_updates(first)[THREAD]
    prefixes = sys.modules[type(runner).adapter.__module__]._PREFIXES
    if restarted:
        del prefixes[srv.root_url]
    srv.forget_conversations()
    second = await run(runner, host, config=cfg(srv))
    assert rtype(terminal(second)) == "run.completed", terminal(second).data
    notice, _, answer = final_text(second).partition("\n\n")
    assert answer == ANSWER and "could not be continued" in notice
    new = state_updates(second)[THREAD]
    assert new != old and list(srv.threads) == [new]
    assert srv.threads[new].metadata["source"] == "langbot"
    assert prefixes[srv.root_url] == "/api/langgraph"
    third = await run(runner, host, config=cfg(srv))
    assert final_text(third) == ANSWER and not state_updates(third), "the new thread goes on, no second notice"
    assert [r.thread_id for r in srv.runs] == [old, new, new]


async def test_a_remembered_prefix_that_no_longer_answers_is_probed_again(host, runner):
    """The process remembers each address's API prefix; when a plain LangGraph server now answers
    where DeerFlow did (same address, new server), the runner finds the new prefix by itself."""
    import sys

    with FakeDeerFlow(api_key=KEY, flavor="langgraph") as lg:
        prefixes = sys.modules[type(runner).adapter.__module__]._PREFIXES
        prefixes[lg.root_url] = "/api/langgraph"  # what a DeerFlow at this address left behind
        assert final_text(await run(runner, host, config=cfg(lg))) == ANSWER
        assert prefixes[lg.root_url] == ""
