"""LicosAgent against the LICOS fake (tests/fakes/licos.py): the standard cases, the request shape,
and LICOS's quirks (whole-turn answers, partial usage, approvals, memory from LangBot's transcript,
managed resume, cancel)."""

from __future__ import annotations

import asyncio
import base64

import pytest

from runners_cli.host import Identity
from tests.fakes.licos import FakeLicos
from tests.helpers import (
    deltas,
    failure,
    final_text,
    rtype,
    run,
    state_updates,
    stored_key,
    terminal,
)

PLUGIN = "licos-agent"  # tests/plugins/conftest.py: the host and runner fixtures
TOKEN = "licos-user-token-1"
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 64).decode()
HOST_FIELDS = {"enable-all-tools": False, "tools": [], "knowledge-bases": [], "mcp-resources": [],
               "mcp-resource-agent-read-enabled": False}


@pytest.fixture(name="srv")
def licos_fake():
    """The fake LICOS runtime, legacy protocol (other LICOS test modules import it: ``srv`` there too)."""
    with FakeLicos() as s:
        yield s


@pytest.fixture(name="msrv")
def licos_managed_fake():
    """The fake LICOS runtime, managed protocol with :data:`TOKEN` (``msrv``)."""
    with FakeLicos(TOKEN, managed=True) as s:
        yield s


def cfg(s, **kw):
    return {"base-url": s.base_url, **kw}


def mcfg(s, **kw):
    return {"base-url": s.base_url, "api-key": TOKEN, "protocol": "managed", **kw}


def logs(results):
    return [r.data.get("text", "") for r in results if rtype(r) == "processor.log"]


# -- standard cases ------------------------------------------------------------------------------------


async def test_ok_text(host, runner, srv):
    results = await run(runner, host, "hi", config=cfg(srv))
    assert rtype(terminal(results)) == "run.completed"
    assert final_text(results) == "Hello from the fake model."


async def test_ok_tool(host, runner, srv):
    srv.tool_call = True
    results = await run(runner, host, "weather?", config=cfg(srv))
    kinds = [(rtype(r), r.data.get("tool_name")) for r in results if rtype(r).startswith("tool.call.")]
    assert kinds == [("tool.call.started", "get_weather"), ("tool.call.completed", "get_weather")]
    assert final_text(results) == "Hello from the fake model."


async def test_ok_usage(host, runner, srv):
    end = terminal(await run(runner, host, config=cfg(srv)))
    assert (end.usage.prompt_tokens, end.usage.completion_tokens, end.usage.total_tokens) == (7, 5, 12)


async def test_resume(host, runner, srv):
    srv.memory, srv.echo_memory = "session", True
    first = await run(runner, host, "my name is Ada", config=cfg(srv))
    second = await run(runner, host, "what is my name?", config=cfg(srv))
    assert final_text(first) == "You said before: nothing."
    assert final_text(second) == "You said before: my name is Ada."
    a, b = [r.json()["session_id"] for r in srv.find_requests("POST", "/stream_run")]
    assert a == b == state_updates(first)[stored_key("licos.session_id")]


@pytest.mark.parametrize("fault,code,retryable", [
    ("http_401", "upstream.auth", False), ("http_404", "upstream.not_found", False),
    ("http_429", "upstream.rate_limited", True), ("http_500", "upstream.unavailable", True),
    ("http_502", "upstream.unavailable", True), ("http_503", "upstream.unavailable", True)])
async def test_http_errors(host, runner, srv, fault, code, retryable):
    srv.fault = fault
    got, again, message = failure(await run(runner, host, config=cfg(srv)))
    assert (got, again) == (code, retryable)
    if fault == "http_500":
        assert "RUNTIME_ERROR" in message and "boom in graph" in message and "Traceback" not in message
    if fault == "http_404":
        assert "base-url" in message


async def test_error_event_midstream(host, runner, srv):
    srv.fault = "error_event"
    results = await run(runner, host, config=cfg(srv))
    code, retryable, message = failure(results)
    assert (code, retryable) == ("upstream.unavailable", True) and "105000" in message
    assert final_text(results).startswith("Hello from the fake model.\n\n"), "the shown turn is kept, with a note"


async def test_malformed_line(host, runner, srv):
    srv.fault = "invalid_json"
    assert failure(await run(runner, host, config=cfg(srv)))[0] == "upstream.protocol"


async def test_truncated_stream(host, runner, srv):
    srv.fault = "truncated"
    code, retryable, _ = failure(await run(runner, host, config=cfg(srv)))
    assert (code, retryable) == ("upstream.unavailable", True)


async def test_slow_stream(host, runner, srv):
    srv.turns, srv.token_delay = ["One.", "Two."], 0.3
    results = await run(runner, host, config=cfg(srv))
    assert final_text(results) == "One.\n\nTwo."
    assert deltas(results)[0] == "One.", "the first turn is shown before the second arrives"


# -- LICOS quirks ----------------------------------------------------------------------------------------


async def test_each_whole_turn_is_shown_once_as_its_own_paragraph(host, runner, srv):
    srv.turns = ["Let me look that up.", "It is sunny in Paris."]
    results = await run(runner, host, config=cfg(srv))
    assert final_text(results) == "Let me look that up.\n\nIt is sunny in Paris."


async def test_request_shape(host, runner, srv):
    srv.api_keys.add(TOKEN)
    ident = Identity(actor_id="alice", conversation_id="c-1")
    results = await run(runner, host, "hello there", identity=ident,
                        config=cfg(srv, **{"api-key": TOKEN, "advanced-settings": True, "org-id": "org-9"}))
    assert rtype(terminal(results)) == "run.completed"
    (req,) = srv.find_requests("POST", "/stream_run")
    body = req.json()
    assert body["content"] == {"query": {"prompt": [{"type": "text", "content": {"text": "hello there"}}]}}
    assert "messages" not in body and body["session_id"].startswith("langbot-")
    assert req.headers["authorization"] == f"Bearer {TOKEN}"
    assert "alice" in req.headers["x-licos-current-user-id"]
    assert req.headers["x-licos-current-org-id"] == "org-9"
    assert any(req.headers["x-run-id"] in t for t in logs(results)), "the run id is logged for /run_records"


async def test_user_id_header_can_be_renamed_or_left_out(host, runner, srv):
    await run(runner, host, config=cfg(srv, **{"advanced-settings": True, "user-id-header": "X-Current-User-Id"}))
    await run(runner, host, config=cfg(srv, **{"advanced-settings": True, "user-id-header": ""}))
    a, b = srv.find_requests("POST", "/stream_run")
    assert a.headers.get("x-current-user-id") and "x-licos-current-user-id" not in a.headers
    assert "x-current-user-id" not in b.headers and "x-licos-current-user-id" not in b.headers


@pytest.mark.parametrize("suffix", ["", "/", "/stream_run", "/stream_run/"])
async def test_base_url_forms(host, runner, srv, suffix):
    results = await run(runner, host, config={"base-url": srv.base_url + suffix})
    assert final_text(results) == "Hello from the fake model."


async def test_partial_usage_is_marked_not_counted_as_complete(host, runner, srv):
    srv.fail_model = "Error code: 500 - provider down"
    results = await run(runner, host, config=cfg(srv))
    assert failure(results)[0] == "upstream.unavailable"
    assert terminal(results).usage is None
    assert any("token_cost.complete=false" in t for t in logs(results))


async def test_insufficient_credit(host, runner, srv):
    srv.broke_users.add("conversation_conv-1")
    code, _, message = failure(await run(runner, host, config=cfg(srv, **{"user-id-source": "conversation"})))
    assert code == "upstream.quota" and "credit" in message


async def test_approval_gate_is_explained_legacy(host, runner, srv):
    srv.approval = True
    results = await run(runner, host, config=cfg(srv), deadline_at=None)
    text = final_text(results)
    assert rtype(terminal(results)) == "run.completed"
    assert "waiting for approval" in text and "'get_weather'" in text and "/agent/approvals/" in text


async def test_approval_gate_is_explained_managed(host, runner, msrv):
    msrv.approval = True
    text = final_text(await run(runner, host, config=mcfg(msrv)))
    assert "waiting for approval" in text and "'get_weather'" in text


async def test_thinking_shown_only_when_asked(host, runner, srv):
    srv.reasoning = "Considering the question."
    on = final_text(await run(runner, host, config=cfg(srv, thinking=True)))
    off = final_text(await run(runner, host, config=cfg(srv)))
    assert on == "<think>\nConsidering the question.\n</think>\nHello from the fake model."
    assert off == "Hello from the fake model."


def _item(seq, role, text):
    return {"transcript_id": f"t{seq}", "event_id": f"e{seq}", "role": role, "item_type": "message",
            "content": text, "content_json": None, "seq": seq, "cursor": str(seq)}


async def test_history_from_langbot_gives_a_memoryless_project_context(host, runner, srv):
    srv.echo_memory = True  # memory "none": session_id alone gives the model nothing
    # (LangBot records the message being answered in the transcript too; the plugin leaves it out)
    host.history = [_item(1, "user", "my name is Ada"), _item(2, "assistant", "Hi Ada")]
    results = await run(runner, host, "what is my name?", config=cfg(srv, **{"history-source": "langbot"}))
    assert final_text(results) == "You said before: my name is Ada."
    (req,) = srv.find_requests("POST", "/stream_run")
    assert req.json()["messages"] == [{"role": "user", "content": "my name is Ada"},
                                      {"role": "assistant", "content": "Hi Ada"},
                                      {"role": "user", "content": "what is my name?"}]


async def test_history_turns_bound_what_is_sent(host, runner, srv):
    host.history = [_item(i * 2 + j, role, f"{role} {i}") for i in range(5)
                    for j, role in enumerate(("user", "assistant"))]
    await run(runner, host, "now", config=cfg(srv, **{"history-source": "langbot", "history-turns": 2}))
    sent = srv.find_requests("POST", "/stream_run")[0].json()["messages"]
    assert [m["content"] for m in sent] == ["user 3", "assistant 3", "user 4", "assistant 4", "now"]


async def test_history_source_langbot_without_the_api_sends_session_only(host, runner, srv):
    results = await run(runner, host, config=cfg(srv, **{"history-source": "langbot"}),
                        identity=Identity(conversation_id=None))
    assert rtype(terminal(results)) == "run.completed"
    assert "messages" not in srv.find_requests("POST", "/stream_run")[0].json()


async def test_managed_image_goes_up_as_a_data_url(host, runner, msrv):
    contents = [{"type": "text", "text": "what is this"}, {"type": "image_base64", "image_base64": PNG}]
    results = await run(runner, host, "what is this", config=mcfg(msrv), contents=contents)
    assert rtype(terminal(results)) == "run.completed"
    assert any(v.startswith(b"\x89PNG") for v in msrv.uploads.values())


async def test_managed_drop_is_resumed_without_duplicates(host, runner, msrv):
    msrv.drop_after = 5  # run_started, human, "", "Hello", " from" — then the connection drops
    results = await run(runner, host, config=mcfg(msrv))
    assert final_text(results) == "Hello from the fake model."
    ((run_id, after, fmt),) = msrv.resumes
    assert (after, fmt) == (5, "chat")
    assert terminal(results).usage.total_tokens == 12, "message_end of the resumed stream carries usage"


async def test_managed_needs_a_token(host, runner, msrv):
    code, _, message = failure(await run(runner, host, config={"base-url": msrv.base_url, "protocol": "managed"}))
    assert code == "config.missing" and "api-key" in message
    assert not msrv.find_requests()


async def test_cancel_posts_to_the_run(host, runner, msrv):
    msrv.answer_tokens, msrv.token_delay = ["a "] * 100, 0.05
    ctx = host.make_context("hi", config=mcfg(msrv))
    gen = runner.invoke(ctx)
    async for r in gen:
        if rtype(r) == "message.delta":
            break
    await gen.aclose()
    assert await msrv.wait_until_async(lambda: bool(msrv.cancelled), timeout=3)
    assert msrv.cancelled == [msrv.runs[0].run_id]


async def test_two_sends_in_parallel_keep_their_own_runs(host, runner, srv):
    a, b = await asyncio.gather(run(runner, host, config=cfg(srv)), run(runner, host, config=cfg(srv)))
    assert final_text(a) == final_text(b) == "Hello from the fake model."
    assert len({r.run_id for r in srv.runs}) == 2


async def test_minimal_config_with_host_fields_answers(host, runner, srv):
    """LangBot 4.11.2 has no legacy LICOS runner to migrate; a new binding carries the host fields."""
    results = await run(runner, host, config={"base-url": srv.base_url + "/", **HOST_FIELDS})
    assert final_text(results) == "Hello from the fake model."


async def test_second_turn_remembers_the_first_through_the_hosts_transcript(host, runner, srv):
    """history-source langbot end to end: the local host records both turns, like LangBot."""
    srv.echo_memory = True
    conf = cfg(srv, **{"history-source": "langbot"})
    first = await run(runner, host, "my name is Ada", config=conf)
    second = await run(runner, host, "what is my name?", config=conf)
    assert final_text(first) == "You said before: nothing."
    assert final_text(second) == "You said before: my name is Ada."
