"""WeKnoraAgent when the stream breaks off, when WeKnora is silent, and when LangBot resets the
conversation (issue 33 items 10, 14 and 15), against the loopback fake WeKnora.

What the fake follows here is read from Tencent/WeKnora @412dcc41c662c9b45698959e0c3c37db5b8dc9d3:
the answer is generated on a context detached from the request (internal/handler/session/qa.go
executeQA, setupSSEStream) into the stream manager's event list (internal/stream/memory_manager.go,
redis_manager.go), each chat connection reads that list from offset 0 (stream.go
handleAgentEventsForSSE), ``GET /sessions/continue-stream/{session_id}?message_id=`` replays it from
offset 0 and then follows it (stream.go ContinueStream), ``POST /sessions/{session_id}/stop``
``{"message_id"}`` appends a stop event that cancels the generation (stream.go StopSession,
helpers.go startStopWatcher), and ``DELETE /sessions/{id}`` sits in the same API-key "chat"
capability group as ``POST /sessions`` (internal/router/routes_chat.go RegisterSessionRoutes).
"""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path

import pytest
import yaml

from runners_cli.host import Identity, LocalHost
from tests.fakes.replay import ReplayServer, Reply
from tests.fakes.weknora import FakeWeKnora
from tests.helpers import (
    deltas,
    failure,
    final_text,
    make_runner,
    rtype,
    run,
    state_updates,
    stored_key,
    terminal,
)

PLUGIN = "weknora-agent"  # tests/plugins/conftest.py: the host and runner fixtures
KEY = "sk-weknora-resume-test-0001"
SESSION = stored_key("weknora.session_id")
PDF = base64.b64encode(b"%PDF-1.4 tiny").decode()


@pytest.fixture
def srv():
    with FakeWeKnora(api_key=KEY) as s:
        yield s
    assert s.handler_errors == []


@pytest.fixture
def quick_retries(monkeypatch):
    from weknora_agent import const

    monkeypatch.setattr(const, "RESUME_BACKOFF", 0.01)


def cfg(srv, **extra):
    return {"base-url": srv.base_url, "api-key": KEY, "app-type": "chat", **extra}


def only_once(results, full: str) -> None:
    """Every delta is a prefix of the final answer: nothing was shown twice or taken back."""
    for shown in deltas(results):
        assert full.startswith(shown), f"{shown!r} is not a prefix of {full!r}"


# -- item 10: a dropped stream is resumed, what cannot be resumed is stopped --------------------------


async def test_a_dropped_stream_is_resumed_and_the_answer_shown_once(srv, host, runner):
    """The connection breaks after the first token while WeKnora goes on generating: the runner
    re-attaches with continue-stream (message_id from agent_query), which replays the answer from
    its first event; what was shown already is not shown again, and nothing is stopped."""
    srv.answer_tokens, srv.token_delay, srv.drops = ["The tail ", "points ", "away ", "from the Sun."], 0.02, 1
    results = await run(runner, host, "彗尾朝哪边？", config=cfg(srv))
    full = "The tail points away from the Sun."
    assert rtype(terminal(results)) == "run.completed"
    assert final_text(results) == full
    only_once(results, full)
    sid = state_updates(results)[SESSION]
    (mid,) = srv.runs
    (resume,) = srv.resume_requests()
    assert resume.path == f"/api/v1/sessions/continue-stream/{sid}" and resume.query == {"message_id": mid}
    assert resume.headers["x-api-key"] == KEY and resume.headers["x-external-user-id"] == "user_u-1"
    assert not srv.stopped, "a resumed answer is not stopped"
    assert srv.stored_answers(sid) == [full]


async def test_a_resumed_agent_answer_reports_its_tool_step_and_reasoning_once(srv, host, runner):
    srv.tools, srv.reasoning, srv.drops = True, ["Search ", "first."], 1
    srv.answer_tokens, srv.token_delay = ["Hello", ", ", "world", "!"], 0.02
    results = await run(runner, host, config=cfg(srv, **{"app-type": "agent"}))
    assert final_text(results) == "<think>\nSearch first.\n</think>\nHello, world!"
    kinds = [rtype(r) for r in results]
    assert kinds.count("tool.call.started") == 1 and kinds.count("tool.call.completed") == 1
    assert len(srv.resume_requests()) == 1


async def test_a_stream_that_breaks_again_and_again_but_moves_on_is_followed_to_the_end(srv, host, runner):
    """Behind a proxy that cuts long streams every resumed connection may break off again; as long
    as each one brings something new, the runner keeps following the answer."""
    tokens = [f"w{i} " for i in range(8)]
    srv.answer_tokens, srv.token_delay, srv.drops = tokens, 0.05, 5  # the chat call and 4 resumes break
    results = await run(runner, host, config=cfg(srv))
    assert final_text(results) == "".join(tokens)
    only_once(results, "".join(tokens))
    assert len(srv.resume_requests()) == 5 and not srv.stopped


async def test_resumes_are_bounded_in_all_even_when_each_brings_something(srv, host, runner, monkeypatch):
    from weknora_agent import const

    monkeypatch.setattr(const, "MAX_RESUMES_TOTAL", 2)
    srv.answer_tokens, srv.token_delay, srv.drops = [f"w{i} " for i in range(8)], 0.05, 10
    results = await run(runner, host, config=cfg(srv))
    code, retryable, message = failure(results)
    assert (code, retryable) == ("upstream.unavailable", True) and "kept breaking off (2 resumes)" in message
    assert len(srv.resume_requests()) == 2 and len(srv.stopped) == 1
    only_once(results, "".join(srv.answer_tokens))


async def test_a_resume_weknora_cannot_serve_stops_the_answer_and_says_so(srv, host, runner):
    """WeKnora restarted mid-answer (in-memory stream manager): continue-stream answers 404 "No
    stream events found". The runner stops the message, so WeKnora does not finish and store an
    answer nobody saw, and ends with a retryable error; the text shown so far stays, once."""
    srv.answer_tokens, srv.token_delay, srv.fault = ["The tail ", "points ", "away."], 0.02, "truncated"
    results = await run(runner, host, config=cfg(srv))
    code, retryable, message = failure(results)
    assert (code, retryable) == ("upstream.unavailable", True)
    assert "could not be resumed" in message and "No stream events found" in message and KEY not in message
    shown = final_text(results)
    assert shown.startswith("The tail") and "points" not in shown, "what was shown, and only that, stays"
    sid = state_updates(results)[SESSION]
    (mid,) = srv.runs
    assert len(srv.resume_requests()) == 1
    assert srv.stopped == [(sid, mid)]


async def test_a_stream_that_keeps_breaking_off_ends_with_the_stop_call(srv, host, runner, quick_retries):
    """Every resume is cut before it brings anything: after 3 fruitless resumes the runner stops
    WeKnora's answer (it stays unfinished there instead of being stored whole) and says the
    connection kept breaking off (retryable)."""
    tokens = ["a "] * 60
    srv.answer_tokens, srv.token_delay, srv.drops, srv.resume_cuts = tokens, 0.05, 1, 100
    results = await run(runner, host, config=cfg(srv))
    code, retryable, message = failure(results)
    assert (code, retryable) == ("upstream.unavailable", True) and "kept breaking off" in message
    assert len(srv.resume_requests()) == 3
    sid = state_updates(results)[SESSION]
    (mid,) = srv.runs
    assert srv.stopped == [(sid, mid)]
    assert await srv.wait_until_async(lambda: srv.runs[mid].completed, 2)
    (stored,) = srv.stored_answers(sid)
    assert len(stored) < len("".join(tokens)), "WeKnora stopped generating"
    assert final_text(results).startswith("a ")


async def test_a_failure_while_weknora_still_generates_stops_it(srv, host, runner):
    """An unreadable event ends the run; the answer WeKnora is still generating is stopped too."""
    srv.fault = "invalid_json"
    results = await run(runner, host, config=cfg(srv))
    assert failure(results)[0] == "upstream.protocol"
    sid = state_updates(results)[SESSION]
    (mid,) = srv.runs
    assert srv.stopped == [(sid, mid)]
    assert not srv.resume_requests(), "a broken event is not a broken connection"


async def test_a_stop_event_in_the_stream_is_not_stopped_again(srv, host, runner):
    srv.tools, srv.approval = True, True
    results = await run(runner, host, config=cfg(srv, **{"app-type": "agent"}))
    assert failure(results)[0] == "upstream.paused"
    assert len(srv.stopped) == 1


async def test_a_cancel_stops_the_answer_as_the_sessions_own_user(srv, host, runner):
    """StopSession looks the session up in the strict owner scope (GetOwnedSession), so in WeKnora's
    "direct" API-principal mode the stop must carry the X-External-User-ID that created the session,
    or it is refused and WeKnora answers on."""
    srv.direct_principal = True
    srv.answer_tokens, srv.token_delay = ["a "] * 100, 0.05
    gen = runner.invoke(host.make_context("hi", config=cfg(srv), identity=Identity(actor_id="alice")))
    async for r in gen:
        if rtype(r) == "message.delta":
            break
    await gen.aclose()
    (mid,) = srv.runs
    assert await srv.wait_until_async(lambda: srv.runs[mid].completed, 3), "WeKnora stopped generating"
    (stop,) = srv.find_requests("POST", f"/api/v1/sessions/{srv.runs[mid].session.id}/stop")
    assert stop.json() == {"message_id": mid} and stop.headers["x-external-user-id"] == "user_alice"
    assert len(srv.stored_answers(srv.runs[mid].session.id)[0]) < 200


SID = "0d2c4e9a-3b1f-4c6e-9a8d-5f7e1b2c3d4e"
MID = "7f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0"
RID = "c4a1f0e2-9b7d-4e35-8a61-2f0d9c8b7a65"


def _sse(*events: dict) -> bytes:
    """gin's framing of WeKnora StreamResponses: ``event:message`` / ``data:{…}``, no spaces."""
    return b"".join(b"event:message\ndata:" + json.dumps(e, separators=(",", ":")).encode() + b"\n\n"
                    for e in events)


_QUERY = {"id": RID, "response_type": "agent_query", "content": "", "done": True, "session_id": SID,
          "assistant_message_id": MID, "data": {"assistant_message_id": MID, "session_id": SID}}
_COMPLETE = {"id": RID, "response_type": "complete", "content": "", "done": True, "data": {"total_steps": 1}}


def _answer(text: str, done: bool = False) -> dict:
    return {"id": RID, "response_type": "answer", "content": text, "done": done, "data": {"event_id": "answer-1"}}


async def test_a_stream_a_proxy_ends_cleanly_before_complete_is_resumed_too():
    """WeKnora ends a chat stream only at complete or stop (handleAgentEventsForSSE), so a body that
    simply ends midway was ended by something in between (a proxy's read timeout, a restart): it is
    resumed like a broken one. The replay carries the same first events, then the rest."""
    first = _sse(_QUERY, _answer("The tail "))
    replay = _sse(_QUERY, _answer("The tail "), _answer("points away."), _answer("", True), _COMPLETE)
    routes = {
        "POST /api/v1/sessions": Reply(b'{"success":true,"data":{"id":"%s","title":"t"}}' % SID.encode(),
                                       status=201, content_type="application/json"),
        "POST /api/v1/knowledge-chat/{sid}": Reply(first, content_type="text/event-stream"),
        "GET /api/v1/sessions/continue-stream/{sid}": Reply(replay, content_type="text/event-stream"),
    }
    with ReplayServer(routes) as srv:
        host = LocalHost()
        results = await run(make_runner(PLUGIN, host), host,
                            config={"base-url": srv.root_url, "api-key": KEY, "app-type": "chat"})
        (resume,) = srv.find_requests("GET")
    assert final_text(results) == "The tail points away."
    only_once(results, "The tail points away.")
    assert resume.query == {"message_id": MID}


# -- item 14: silence ---------------------------------------------------------------------------------


def test_idle_timeout_is_on_by_default(runner):
    """WeKnora sends no keep-alive (stream.go writes only events), so silence is noticed by the
    idle-timeout alone: on by default, above the longest quiet step of a healthy run (an agent model
    call ≤ 120 s, internal/agent/const.go defaultLLMCallTimeout; a tool ≤ 60 s,
    defaultToolExecTimeout)."""
    doc = yaml.safe_load((Path(__file__).parents[2] / PLUGIN / "components/runner/default.yaml").read_text())
    (field,) = [f for f in doc["spec"]["config"] if f["name"] == "idle-timeout"]
    assert field["default"] == 300
    loaded = type(runner).schema.load({"base-url": "http://x", "api-key": "sk-x"})
    assert loaded["idle-timeout"] == 300


async def test_a_silent_weknora_ends_the_run_and_its_answer(srv, host, runner):
    srv.answer_tokens, srv.fault = ["The first part ", "and the rest."], "stall"
    config = cfg(srv, **{"advanced-settings": True, "idle-timeout": 0.3, "timeout": 30})
    loop = asyncio.get_running_loop()
    start = loop.time()
    results = await run(runner, host, config=config)
    code, retryable, message = failure(results)
    assert (code, retryable) == ("upstream.timeout", True) and "sent nothing for 0.3 s" in message
    assert loop.time() - start < 5
    assert final_text(results).startswith("The first part")
    assert await srv.wait_until_async(lambda: bool(srv.stopped), 3), "the silent answer is stopped"


async def test_files_weknora_reads_before_it_answers_are_not_silence(srv, host, runner):
    """WeKnora saves and parses inline attachment_uploads before it writes the stream's head
    (qa.go parseQARequest → AttachmentProcessor.ProcessAttachment; its docreader call may take
    minutes): that wait does not count as silence."""
    srv.parse_delay = 0.9
    config = cfg(srv, **{"advanced-settings": True, "idle-timeout": 0.3})
    contents = [{"type": "text", "text": "summarise"},
                {"type": "file_base64", "file_base64": PDF, "file_name": "report.pdf"}]
    results = await run(runner, host, "summarise", config=config, contents=contents)
    assert rtype(terminal(results)) == "run.completed" and final_text(results) == "Hello, world!"


async def test_a_silent_tool_within_the_idle_timeout_does_not_end_the_run(srv, host, runner, monkeypatch):
    """A tool runs without a word from WeKnora (internal/agent/act.go: nothing is sent between the
    tool_call and its tool_result): the chat says WeKnora is still working, and the answer follows."""
    from runner_kit import runner as kit_runner

    monkeypatch.setattr(kit_runner, "STILL_WORKING_AFTER", 0.2)
    srv.tools, srv.tool_seconds = True, 0.5
    config = cfg(srv, **{"app-type": "agent", "advanced-settings": True, "idle-timeout": 1.0})
    results = await run(runner, host, config=config)
    assert any("WeKnora is still working" in d for d in deltas(results))
    assert final_text(results) == "Hello, world!"


# -- item 15: reset ----------------------------------------------------------------------------------


async def test_a_langbot_reset_deletes_the_old_weknora_session(srv, host, runner):
    """After a reset (LangBot deletes the conversation state and seeds a new reset generation) the
    next message answers in a new WeKnora session, and the one left behind is deleted with the same
    key and user it was created with."""
    first = await run(runner, host, "one", config=cfg(srv))
    old = state_updates(first)[SESSION]
    host.reset_conversation()
    second = await run(runner, host, "two", config=cfg(srv))
    new = state_updates(second)[SESSION]
    assert final_text(second) == "Hello, world!" and new != old
    assert [r.path.rsplit("/", 1)[-1] for r in srv.chat_requests()] == [old, new]
    assert await srv.wait_until_async(lambda: srv.deleted == [old], 3)
    (delete,) = srv.find_requests("DELETE")
    assert delete.path == f"/api/v1/sessions/{old}"
    assert delete.headers["x-api-key"] == KEY and delete.headers["x-external-user-id"] == "user_u-1"
    assert new in srv.sessions and old not in srv.sessions


async def test_a_reset_in_a_group_deletes_each_members_own_session_only(srv, host, runner):
    """Per-person sessions: the reset clears everyone's stored id; each member's next message
    deletes that member's old session, never another's."""
    alice, bob = Identity(actor_id="alice"), Identity(actor_id="bob")
    sids = {}
    for who in (alice, bob):
        results = await run(runner, host, config=cfg(srv), identity=who)
        sids[who.actor_id] = state_updates(results)[stored_key("weknora.session_id", who)]
    host.reset_conversation(alice)
    await run(runner, host, config=cfg(srv), identity=alice)
    assert await srv.wait_until_async(lambda: srv.deleted == [sids["alice"]], 3)
    assert sids["bob"] in srv.sessions, "Bob's session stays until Bob writes again"
    await run(runner, host, config=cfg(srv), identity=bob)
    assert await srv.wait_until_async(lambda: srv.deleted == [sids["alice"], sids["bob"]], 3)


async def test_a_run_without_a_reset_deletes_nothing(srv, host, runner):
    for text in ("one", "two", "three"):
        await run(runner, host, text, config=cfg(srv))
    await asyncio.sleep(0.05)
    assert not srv.deleted and not srv.find_requests("DELETE")


def _adapter(srv, host, runner, **extra):
    """An adapter in a run's environment, for calling end_conversation directly."""
    from weknora_agent.adapter import WeKnoraAdapter

    from runner_kit.errors import Redactor
    from runner_kit.runner import RunEnv

    ctx = host.make_context("hi", config=cfg(srv, **extra))
    env = RunEnv(ctx, type(runner).schema.load(ctx.config), Redactor(), "weknora.session_id")
    return WeKnoraAdapter(env)


async def test_ending_a_session_already_gone_is_quiet_and_a_hostile_id_stays_in_its_path(srv, host, runner):
    adapter = _adapter(srv, host, runner)
    await adapter.end_conversation("no-such-session")  # 404: nothing left to end
    await adapter.end_conversation("../../knowledge-bases/kb-1")
    targets = [r.target for r in srv.find_requests("DELETE")]
    assert targets == ["/api/v1/sessions/no-such-session", "/api/v1/sessions/..%2F..%2Fknowledge-bases%2Fkb-1"]


async def test_a_refused_delete_raises_without_the_key(srv, host, runner):
    from runner_kit.errors import RunnerError

    adapter = _adapter(srv, host, runner, **{"api-key": "sk-not-this-one-0000"})
    with pytest.raises(RunnerError) as info:
        await adapter.end_conversation("some-session")
    assert info.value.code == "upstream.auth" and "sk-not-this-one" not in info.value.message
