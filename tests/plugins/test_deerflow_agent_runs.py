"""DeerFlowAgent: what a run's end says beyond its stream, a stream cut mid-answer, the files a run
produces, the owner's extra configurable values, and the two ways a conversation ends (stop and
reset). Against the loopback fake (tests/fakes/deerflow.py), which models both servers as their
source shows them; the sources are named in each test."""

from __future__ import annotations

import base64
import json

import pytest

from runner_kit import resets
from runners_cli.host import Identity
from tests.fakes.deerflow import FakeDeerFlow, Thread
from tests.fakes.http_server import FakeHTTPServer
from tests.helpers import deltas, failure, final_text, rtype, run, state_updates, terminal
from tests.plugins.test_deerflow_agent import (  # noqa: F401 - the srv and lg fixtures, as test_deerflow_agent has them
    ANSWER,
    KEY,
    THREAD,
    cfg,
    deerflow_fake,
    langgraph_fake,
)

PLUGIN = "deerflow-agent"  # tests/plugins/conftest.py: the host and runner fixtures
FORCED_STOP = ("[FORCED STOP] Repeated tool calls exceeded the safety limit. Producing final answer with results "
               "collected so far.")
SAFETY = ("The model provider stopped this response with a safety-related signal (finish_reason='content_filter', "
          "detector='openai') and returned no content. Please rephrase your request or start a new conversation.")
PNG = b"\x89PNG\r\n\x1a\n" + b"\x01" * 64
REPORT = b"# Weather report\n\nParis is sunny.\n"


@pytest.fixture(autouse=True)
def _fresh_reset_memory():
    resets.forget()
    yield
    resets.forget()


def advanced(srv, **extra):
    return cfg(srv, **{"advanced-settings": True, **extra})


NOT_SENT = "LangBot cannot pass a file from this plugin into the chat."  # runner_kit.results, for a data: file


def attachments(results) -> list[dict]:
    (done,) = [r for r in results if rtype(r) == "message.completed"]
    content = done.data["message"]["content"]
    return [c for c in content if c.get("type") != "text"] if isinstance(content, list) else []


def grows(shown: list[str]) -> bool:
    """Every delta extends the one before (nothing shown twice, nothing taken back)."""
    return all(b.startswith(a) for a, b in zip(shown, shown[1:], strict=False))


# -- 11: text a middleware appends to a message that already streamed ------------------------------------


@pytest.mark.parametrize("flavor", ["deerflow", "langgraph"])
async def test_forced_stop_appended_to_a_streamed_message_reaches_the_chat(host, runner, flavor):
    """DeerFlow's LoopDetectionMiddleware ends a looping agent by returning the last AI message
    again, same id, with "[FORCED STOP] …" appended (bytedance/deer-flow @f1f4af99
    backend/packages/harness/deerflow/agents/middlewares/loop_detection_middleware.py
    ``_append_text`` / ``_apply``). LangGraph's messages mode sends a node's output only for ids it
    has not streamed (langgraph ``pregel/_messages.py`` ``StreamMessagesHandler._emit(dedupe=True)``),
    so the appended words come only in ``values`` and ``updates``; the chat used to keep just
    "Let me search…"."""
    with FakeDeerFlow(api_key=KEY if flavor == "deerflow" else None, flavor=flavor) as server:
        server.answer_tokens = ["Let me ", "search the ", "web…"]
        server.appended = FORCED_STOP
        results = await run(runner, host, "weather?", config=cfg(server))
        assert rtype(terminal(results)) == "run.completed", terminal(results).data
        assert final_text(results) == "Let me search the web…\n\n" + FORCED_STOP
        shown = deltas(results)
        assert grows(shown) and shown[0] == "Let me "
        sent = [json.dumps(d) for r in server.logs.values() for _i, n, d in r.events if n == "messages"]
        assert not any("FORCED STOP" in s for s in sent), "the fake sends it as the real servers do: not as a message"


async def test_appended_text_in_content_blocks_is_shown_too(srv, host, runner):
    """Anthropic-style list content: the middleware appends a ``{"type": "text", "text": "\\n\\n…"}``
    block (``_append_text`` for a list), which reads the same once the blocks are joined."""
    srv.thinking_blocks = True
    srv.reasoning = "Looping."
    srv.appended = FORCED_STOP
    text = final_text(await run(runner, host, config=cfg(srv)))
    assert text.endswith(ANSWER + "\n\n" + FORCED_STOP) and text.startswith("<think>")


async def test_an_empty_answer_given_its_explanation_afterwards_is_shown(srv, host, runner):
    """DeerFlow's SafetyFinishReasonMiddleware fills a provider-filtered empty answer with an
    explanation under the same id (deer-flow @f1f4af99
    agents/middlewares/safety_finish_reason_middleware.py ``_build_suppressed_message``); the
    message streamed no text, so the explanation comes only in ``values``, after the earlier
    turn's "Let me look that up." that did stream."""
    srv.tool_call = True
    srv.tool_preamble = "Let me look that up."
    srv.answer_tokens = []
    srv.appended = SAFETY
    results = await run(runner, host, config=cfg(srv))
    assert rtype(terminal(results)) == "run.completed", terminal(results).data
    assert final_text(results) == "Let me look that up.\n\n" + SAFETY


async def test_a_rewritten_message_is_not_repeated(srv, host, runner):
    """The final state repeats every streamed message: nothing is shown twice when it adds nothing."""
    srv.tool_call = True
    srv.tool_preamble = "Let me look that up."
    results = await run(runner, host, config=cfg(srv))
    assert final_text(results) == "Let me look that up.\n\n" + ANSWER


# -- 12: a stream cut mid-answer: the run goes on, the plugin joins it again -------------------------


async def test_a_cut_stream_is_joined_again_and_the_answer_completes_once(srv, host, runner):
    """``on_disconnect: "continue"`` keeps the run going when the connection drops (DeerFlow's
    default is "cancel": deer-flow @f1f4af99 app/gateway/run_models.py, services.py ``sse_consumer``);
    the plugin joins it (``GET …/runs/{run_id}/stream``, thread_runs.py ``stream_existing_run``) with
    the last ``id:`` it saw, and DeerFlow replays exactly what followed (runtime/stream_bridge/memory.py
    ``_resolve_start_offset``)."""
    srv.fault_queue = ["truncated"]
    srv.token_delay = 0.02
    results = await run(runner, host, config=cfg(srv))
    assert rtype(terminal(results)) == "run.completed", terminal(results).data
    assert final_text(results) == ANSWER
    shown = deltas(results)
    assert grows(shown), shown
    (join,) = srv.joins
    (run_,) = srv.runs
    assert join.path == f"/api/langgraph/threads/{run_.thread_id}/runs/{run_.run_id}/stream"
    log = srv.logs[run_.run_id]
    assert join.headers["last-event-id"] == log.events[log.cut_at - 1][0], "the id of the last event that arrived"
    assert run_.body["on_disconnect"] == "continue" and not srv.disconnect_cancelled and log.status == "success"
    assert terminal(results).usage.total_tokens == 16, "usage came with the joined part"


async def test_a_deerflow_stream_that_ends_without_end_was_cut(srv, host, runner):
    """DeerFlow ends every stream with ``event: end`` (services.py ``sse_consumer``); a body that ends
    cleanly before it (a proxy closing the response) was cut too, and is joined again."""
    srv.fault_queue = ["truncated"]
    srv.cut_cleanly = True
    results = await run(runner, host, config=cfg(srv))
    assert final_text(results) == ANSWER and len(srv.joins) == 1 and grows(deltas(results))


async def test_langgraph_run_is_resumable_and_joined_after_its_last_event(lg, host, runner):
    """A plain LangGraph server keeps a run's events for a join only for ``stream_resumable`` runs
    and then replays after ``Last-Event-ID`` (langgraph-api 0.16.7 api/runs.py ``join_run_stream``,
    langgraph-runtime-inmem ops.py ``Runs.Stream.join``, inmem_stream.py ``restore_messages``)."""
    lg.fault_queue = ["truncated"]
    results = await run(runner, host, config=cfg(lg))
    assert final_text(results) == ANSWER and grows(deltas(results))
    (run_,) = lg.runs
    assert run_.body["stream_resumable"] is True and run_.body["on_disconnect"] == "continue"
    (join,) = lg.joins
    assert join.path == f"/threads/{run_.thread_id}/runs/{run_.run_id}/stream" and join.headers["last-event-id"]


async def test_after_a_gap_the_answer_is_caught_up_from_values_without_repeats(srv, host, runner):
    """DeerFlow answers a Last-Event-ID older than what it keeps with one ``gap`` event
    (services.py ``sse_consumer``, memory.py ``_make_gap``); the next join has no id, replays from the
    earliest event kept, and the answer is completed from ``values``' whole message, not from
    deltas whose start is unknown."""
    srv.fault_queue = ["truncated"]
    srv.join_gaps = 1
    srv.token_delay = 0.02
    results = await run(runner, host, config=cfg(srv))
    assert rtype(terminal(results)) == "run.completed", terminal(results).data
    assert final_text(results) == ANSWER and grows(deltas(results))
    first, second = srv.joins
    assert first.headers.get("last-event-id") and "last-event-id" not in second.headers


async def test_a_fast_answer_that_outruns_the_stream_buffer_still_arrives_whole(srv, host, runner):
    """A model that writes faster than the chat reads overflows DeerFlow's per-run event buffer
    (MemoryStreamBridge ``queue_maxsize`` 256): the live stream then gets one ``gap`` and stops
    (bytedance/deer-flow @f1f4af99 stream_bridge/memory.py ``subscribe``, "fell behind retained
    buffer"). The whole answer still reaches the chat, once (the bench's 4,000-token burst found
    the fake skipping the lost events silently and the plugin showing a third of the answer)."""
    srv.retained_events = 16
    srv.answer_tokens = [f"w{i} " for i in range(400)]
    results = await run(runner, host, config=cfg(srv))
    assert rtype(terminal(results)) == "run.completed", terminal(results).data
    assert final_text(results) == "".join(srv.answer_tokens)
    assert grows(deltas(results))


async def test_a_run_that_ended_before_the_join_is_read_from_the_thread(srv, host, runner):
    """DeerFlow forgets a run's events a while after it ended and then answers a join with ``end``
    alone (services.py ``_terminal_record_stream_missing``); the run's status
    (``GET …/runs/{run_id}``) and the thread's state give the answer."""
    srv.fault_queue = ["truncated"]
    srv.join_after_run_ends = True
    srv.stream_cleanup_delay = 0.0
    results = await run(runner, host, config=cfg(srv))
    assert final_text(results) == ANSWER and grows(deltas(results))
    assert srv.find_requests("GET", f"/api/langgraph/threads/{srv.runs[0].thread_id}/state")


async def test_a_run_that_failed_after_the_cut_is_a_failure(srv, host, runner):
    srv.fault_queue = ["truncated"]
    srv.fail_with = ("ValueError", "boom")
    srv.join_after_run_ends = True
    srv.stream_cleanup_delay = 0.0
    results = await run(runner, host, config=cfg(srv))
    code, _, message = failure(results)
    assert code == "upstream.error" and "failed after the connection" in message
    assert final_text(results).startswith("Hello\n\n(This answer is incomplete")


async def test_joining_is_bounded_and_the_partial_answer_kept(srv, host, runner):
    """Every stream is cut (the sticky fault): three joins, then the cut is the failure."""
    srv.fault = "truncated"
    results = await run(runner, host, config=cfg(srv))
    code, retryable, _ = failure(results)
    assert (code, retryable) == ("upstream.unavailable", True)
    assert len(srv.joins) == 3
    assert final_text(results).startswith("Hello") and "incomplete" in final_text(results) and grows(deltas(results))


@pytest.mark.parametrize("flavor", ["deerflow", "langgraph"])
async def test_a_run_the_server_no_longer_knows_is_not_joined_in_a_loop(host, runner, flavor):
    """A restarted in-memory server has lost the run: DeerFlow answers the join 404 (thread_runs.py
    ``stream_existing_run``), LangGraph with an ``error`` event ``{"error": "HTTPException",
    "message": "404: Run not found"}`` (seen on langgraph dev 0.16.7; ops.py ``Runs.Stream.join``).
    The cut stands after one try."""
    with FakeDeerFlow(flavor=flavor) as server:
        server.fault_queue = ["truncated"]
        server.lose_runs = True
        code, _, message = failure(await run(runner, host, config=cfg(server)))
        assert code == "upstream.unavailable" and "closed before the answer finished" in message
        assert len(server.joins) == 1


async def test_the_error_a_joined_run_ends_with_is_the_failure(srv, host, runner):
    srv.fault_queue = ["truncated"]
    srv.fail_with = ("ValueError", "boom: the graph failed")
    code, retryable, message = failure(await run(runner, host, config=cfg(srv)))
    assert (code, retryable) == ("upstream.error", False) and "boom: the graph failed" in message


# -- 13: files the run produced --------------------------------------------------------------------------


async def test_files_the_run_presented_are_attached(srv, host, runner):
    """DeerFlow's ``present_files`` puts each file's virtual path into ``values.artifacts``
    (deer-flow @f1f4af99 tools/builtins/present_file_tool.py, agents/thread_state.py
    ``merge_artifacts``) and serves it at ``/api/threads/{id}/artifacts/<path>``
    (app/gateway/routers/artifacts.py ``get_artifact``; the web UI builds that URL in
    frontend/src/core/artifacts/utils.ts ``urlOfArtifact``)."""
    srv.present_files = {"/mnt/user-data/outputs/weather report.md": REPORT,
                         "/mnt/user-data/outputs/chart.png": PNG}
    results = await run(runner, host, "write a report", config=cfg(srv))
    (image,) = attachments(results)
    assert (image["type"], image["image_base64"]) == ("image_base64", "data:image/png;base64," + base64.b64encode(PNG).decode())
    # LangBot 4.11.2 takes a file from a runner only as a link: the kit names it instead
    assert final_text(results) == ANSWER + f"\n\n(Not sent: “weather report.md”. {NOT_SENT})"
    tid = state_updates(results)[THREAD]
    assert sorted(r.path for r in srv.artifact_requests) == [
        f"/api/threads/{tid}/artifacts/mnt/user-data/outputs/chart.png",
        f"/api/threads/{tid}/artifacts/mnt/user-data/outputs/weather report.md"]
    assert all(r.headers["authorization"] == f"Bearer {KEY}" for r in srv.artifact_requests)
    assert "weather%20report.md" in next(r.target for r in srv.artifact_requests if "report" in r.path)
    srv.present_files = {}
    again = await run(runner, host, "thanks", config=cfg(srv))
    assert attachments(again) == [], "values.artifacts still lists them: only a run's own files are attached"


async def test_a_file_over_the_size_limit_is_named_not_attached(srv, host, runner):
    srv.present_files = {"/mnt/user-data/outputs/big.png": PNG * 64, "/mnt/user-data/outputs/small.png": PNG}
    results = await run(runner, host, config=advanced(srv, **{"max-file-size-mb": 0.001}))
    assert [f["image_base64"] for f in attachments(results)] == ["data:image/png;base64," + base64.b64encode(PNG).decode()]
    assert final_text(results) == ANSWER + "\n\n(Not attached: 'big.png' (larger than 1 KiB, the file size limit).)"


async def test_images_come_first_within_the_size_budget(srv, host, runner):
    srv.present_files = {"/mnt/user-data/outputs/report.pdf": b"%PDF" * (125 * 1024),  # 500 KiB
                         "/mnt/user-data/outputs/chart.png": PNG + b"\0" * (200 * 1024)}
    results = await run(runner, host, config=cfg(srv))
    assert [f["type"] for f in attachments(results)] == ["image_base64"]
    assert "'report.pdf' (larger than one LangBot message can carry)" in final_text(results)


async def test_files_beyond_what_one_langbot_message_carries_are_named(srv, host, runner):
    """LangBot 4.11.2 truncates a result over 1 MiB (runner_kit.results): the inlined files stay
    within the plugin's budget, whatever max-file-size-mb allows."""
    srv.present_files = {"/mnt/user-data/outputs/video.mp4": b"\0" * (700 * 1024)}
    results = await run(runner, host, "你好，请生成报告", config=cfg(srv))
    assert attachments(results) == []
    assert final_text(results).endswith("（未附上：“video.mp4”（超出一条 LangBot 消息能携带的大小）。）")


async def test_a_long_answer_leaves_less_room_for_files(srv, host, runner):
    """The answer's text and its files travel in the same result: a long answer leaves less room."""
    srv.answer_tokens = ["word " * (180 * 1024)]  # 900 KiB of text
    srv.present_files = {"/mnt/user-data/outputs/notes.txt": b"n" * (100 * 1024)}
    results = await run(runner, host, config=cfg(srv))
    assert attachments(results) == []
    assert final_text(results).endswith("(Not attached: 'notes.txt' (larger than one LangBot message can carry).)")


async def test_presented_paths_outside_the_workspace_and_private_links_are_never_fetched(srv, host, runner):
    """A custom agent (or a prompt-injected one) can write anything into ``artifacts``: only
    virtual paths under /mnt/user-data/ go to the thread's artifacts route, a ``..`` never does, and a
    link is fetched only when it points to a public address (runner_kit.netguard)."""
    with FakeHTTPServer() as internal:
        srv.extra_artifacts = [f"{internal.root_url}/admin/secrets.txt", "/mnt/user-data/../../etc/passwd",
                               "/etc/passwd", "relative/notes.txt"]
        srv.present_files = {"/mnt/user-data/outputs/ok.png": PNG}
        results = await run(runner, host, config=cfg(srv))
        assert internal.requests == [], "nothing was fetched from the private address"
    assert [f["type"] for f in attachments(results)] == ["image_base64"]
    assert [r.path for r in srv.artifact_requests] == [
        f"/api/threads/{srv.runs[0].thread_id}/artifacts/mnt/user-data/outputs/ok.png"]
    text = final_text(results)
    assert text == ANSWER + ("\n\n(Not attached: 'secrets.txt' (a link to a private or local address); 'passwd' (not a "
                             "file DeerFlow serves from this thread); 'passwd' (not a file DeerFlow serves from this "
                             "thread); 'notes.txt' (not a file DeerFlow serves from this thread).)")


async def test_a_plain_langgraph_server_has_no_files_to_attach(lg, host, runner):
    lg.present_files = {"/mnt/user-data/outputs/report.md": REPORT}
    results = await run(runner, host, config=cfg(lg))
    assert final_text(results) == ANSWER and attachments(results) == []


# -- 13: the owner's extra configurable values --------------------------------------------------------------


async def test_extra_configurable_reaches_deerflow_in_config_configurable(srv, host, runner):
    """DeerFlow copies ``config.configurable`` into the graph's config as it is, but only its own keys
    from ``context`` (deer-flow @f1f4af99 app/gateway/services.py ``build_run_config``,
    ``merge_run_context_overrides``)."""
    extra = {"reasoning_effort": "high", "max_total_subagents": 6}
    await run(runner, host, config=advanced(srv, **{"extra-configurable": json.dumps(extra)}))
    body = srv.stream_requests()[0].json()
    assert body["config"] == {"recursion_limit": 1000, "configurable": extra}
    assert "reasoning_effort" not in body["context"] and "stream_resumable" not in body


async def test_extra_configurable_joins_the_context_on_langgraph(lg, host, runner):
    """langgraph-api refuses ``configurable`` next to ``context`` ("Cannot specify both configurable and
    context", models/run.py ``create_valid_run``) and copies the context into the graph's configurable."""
    await run(runner, host, config=advanced(lg, **{"extra-configurable": {"system_prompt": "Be brief."}}))
    body = lg.stream_requests()[0].json()
    assert body["config"] == {"recursion_limit": 1000}
    assert body["context"]["system_prompt"] == "Be brief." and body["context"]["thinking_enabled"] is False


@pytest.mark.parametrize("bad", [{"model_name": "x"}, {"thinking_enabled": True}, {"thread_id": "t"},
                                 {"__internal": 1}, {"langgraph_auth_user": "u"}])
async def test_extra_configurable_may_not_set_the_plugins_or_the_servers_keys(srv, host, runner, bad):
    code, _, message = failure(await run(runner, host, config=advanced(srv, **{"extra-configurable": bad})))
    assert code == "config.invalid" and "extra-configurable" in message and next(iter(bad)) in message
    assert srv.stream_requests() == []


async def test_extra_configurable_must_be_a_json_object(srv, host, runner):
    code, _, message = failure(await run(runner, host, config=advanced(srv, **{"extra-configurable": "[1, 2]"})))
    assert code == "config.invalid" and "JSON object" in message


async def test_extra_configurable_is_ignored_while_advanced_settings_are_off(srv, host, runner):
    await run(runner, host, config=cfg(srv, **{"extra-configurable": {"reasoning_effort": "high"}}))
    assert "configurable" not in srv.stream_requests()[0].json()["config"]


# -- 15: stop and reset ------------------------------------------------------------------------------------


async def test_stop_cancels_the_run_through_the_api_not_by_hanging_up(srv, host, runner):
    """With ``on_disconnect: "continue"`` closing the stream no longer stops the run: the plugin
    cancels it (``POST …/runs/{run_id}/cancel``, thread_runs.py ``cancel_run``)."""
    srv.answer_tokens = ["a "] * 100
    srv.token_delay = 0.05
    gen = runner.invoke(host.make_context("hi", config=cfg(srv)))
    async for r in gen:
        if rtype(r) == "message.delta":
            break
    await gen.aclose()
    assert await srv.wait_until_async(lambda: bool(srv.cancelled), 3)
    (run_,) = srv.runs
    assert srv.cancelled == [run_.run_id] and srv.disconnect_cancelled == []
    assert await srv.wait_until_async(lambda: srv.logs[run_.run_id].status == "interrupted", 3)


@pytest.mark.parametrize("flavor", ["deerflow", "langgraph"])
async def test_reset_deletes_the_thread_it_left_behind(host, runner, flavor):
    """LangBot's reset clears the stored thread id and seeds a new reset generation (LangBot 4.11.2
    agent/runner/context_reset.py); the kit hands the old id to ``end_conversation``, which deletes
    the thread (LangGraph ``DELETE /threads/{id}`` 204, langgraph-api api/threads.py
    ``delete_thread``; DeerFlow 200, deer-flow @f1f4af99 app/gateway/routers/threads.py
    ``delete_thread_data``). The next message starts a new thread."""
    with FakeDeerFlow(api_key=KEY if flavor == "deerflow" else None, flavor=flavor) as server:
        first = await run(runner, host, "remember pineapple", config=cfg(server))
        old = state_updates(first)[THREAD]
        host.reset_conversation()
        second = await run(runner, host, "what did I say?", config=cfg(server))
        assert rtype(terminal(second)) == "run.completed", terminal(second).data
        new = state_updates(second)[THREAD]
        assert new != old and server.deleted == [old] and list(server.threads) == [new]
        assert [r.thread_id for r in server.runs] == [old, new]
        (delete,) = server.find_requests("DELETE")
        assert delete.path == f"{server.api_prefix}/threads/{old}"
        assert final_text(second) == ANSWER, "no notice: the person asked for a new conversation"
        third = await run(runner, host, "again", config=cfg(server))
        assert server.deleted == [old] and not state_updates(third), "only a reset deletes"


async def test_reset_in_a_group_deletes_only_the_resetting_conversations_thread(srv, host, runner):
    """Per-person threads (``user-id-source: actor``): the reset of one conversation ends the thread
    of each of its sessions that is used again, never another conversation's."""
    conf = cfg(srv, **{"user-id-source": "actor"})
    alice = Identity(conversation_id="group-1", actor_id="alice")
    other = Identity(conversation_id="group-2", actor_id="alice")
    a = state_updates(await run(runner, host, config=conf, identity=alice))
    o = state_updates(await run(runner, host, config=conf, identity=other))
    host.reset_conversation(alice)
    await run(runner, host, config=conf, identity=alice)
    await run(runner, host, config=conf, identity=other)
    assert srv.deleted == list(a.values()) and next(iter(o.values())) in srv.threads


async def test_end_conversation_deletes_one_thread_and_tolerates_a_gone_one(srv, host, runner):
    """The hook itself: the thread named, nothing else; an already deleted thread (404) is fine; a
    thread with a run in flight (DeerFlow 409) is reported to the kit, which logs it."""
    from runner_kit.errors import Redactor, RunnerError
    from runner_kit.runner import RunEnv

    adapter_cls, schema = type(runner).adapter, type(runner).schema
    ctx = host.make_context("x", config=cfg(srv))
    env = RunEnv(ctx, schema.load(ctx.config), Redactor(), adapter_cls.session_key)
    for tid in ("t-1", "t-2"):
        srv.threads[tid] = Thread(tid, {})
    await adapter_cls(env).end_conversation("t-1")
    assert srv.deleted == ["t-1"] and list(srv.threads) == ["t-2"]
    await adapter_cls(env).end_conversation("t-1")  # already gone: no error
    await adapter_cls(env).end_conversation({"thread_id": "t-2", "interrupts": []})  # an older version's value
    assert srv.deleted == ["t-1", "t-2"]
    srv.threads["t-3"] = Thread("t-3", {}, busy=True)
    with pytest.raises(RunnerError) as err:
        await adapter_cls(env).end_conversation("t-3")
    assert err.value.status == 409 and "t-3" in srv.threads
