"""Issue 35, attack brief 2 (a long conversation) against DifyAgent: a chatflow whose message_end
comes late or never after workflow_finished, usage over many turns, files over many turns, a
conversation id kept for weeks and then gone, messages longer than the Start node allows, and
workflows with huge outputs."""

from __future__ import annotations

import asyncio
import json
import math
import time

import pytest

from runners_cli.host import Identity
from tests.fakes.dify import dify_file
from tests.helpers import (
    failure,
    final_text,
    rtype,
    run,
    state_updates,
    terminal,
)
from tests.plugins.test_dify import KEY, SESSION, cfg, chat_bodies, dify_fake  # noqa: F401 - dify_fake: the srv fixture, as test_dify has it

PLUGIN = "dify-agent"  # tests/plugins/conftest.py: the host and runner fixtures


def chatflow(srv, **extra):
    srv.mode = "chatflow"
    return cfg(srv, **{"app-type": "chatflow", **extra})


def content_of(results):
    return [r for r in results if rtype(r) in ("message.completed",)][-1].data["message"]["content"]


# --- a chatflow's answer is complete at workflow_finished -------------------------------------------


async def test_a_chatflow_whose_message_end_never_comes_keeps_its_answer_before_the_deadline(srv, host, runner):
    """The answer streamed, workflow_finished came, then Dify only pings: the run's deadline must
    not turn the complete answer into a timeout with an "incomplete" note."""
    srv.message_end_gap = math.inf
    srv.stall_ping_every = 0.02
    srv.answer_files = [dify_file("5f0c6d8e-0000-4000-8000-000000000001", "chart.png", "image/png")]
    results = await run(runner, host, config=chatflow(srv, timeout=1), deadline_at=time.time() + 1)
    end = terminal(results)
    assert rtype(end) == "run.completed", end.data
    assert end.data.get("finish_reason") in (None, "stop"), end.data
    assert final_text(results) == "Hello, world!"
    assert [c["type"] for c in content_of(results)] == ["text", "image_url"], "the Answer's file, from workflow_finished"
    assert end.usage is not None and end.usage.total_tokens == 16, "workflow_finished's total stands in"
    assert await srv.wait_until_async(lambda: srv.client_disconnects >= 1, timeout=2), "the stream is let go"


async def test_a_chatflow_cut_after_workflow_finished_keeps_its_answer_and_usage(srv, host, runner):
    srv.message_end_lost = True
    results = await run(runner, host, config=chatflow(srv))
    end = terminal(results)
    assert rtype(end) == "run.completed", end.data
    assert final_text(results) == "Hello, world!"
    assert end.usage.total_tokens == 16


async def test_a_chatflow_silent_after_workflow_finished_is_not_an_idle_timeout(srv, host, runner):
    """No ping at all after workflow_finished: the idle timeout must not fail a finished answer."""
    srv.message_end_gap = math.inf
    srv.stall_ping_every = 3600  # not even a ping
    results = await run(runner, host, config=chatflow(srv, **{"advanced-settings": True, "idle-timeout": 0.3}))
    end = terminal(results)
    assert rtype(end) == "run.completed", end.data
    assert final_text(results) == "Hello, world!"


async def test_a_late_message_end_still_brings_its_usage_and_files(srv, host, runner):
    """Dify saving the message takes a moment: a short wait for message_end is kept."""
    srv.message_end_gap = 0.2
    srv.stall_ping_every = 0.05
    srv.usage = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
    srv.answer_files = [dify_file("5f0c6d8e-0000-4000-8000-000000000001", "chart.png", "image/png")]
    results = await run(runner, host, config=chatflow(srv))
    end = terminal(results)
    assert rtype(end) == "run.completed", end.data
    assert (end.usage.prompt_tokens, end.usage.total_tokens) == (11, 18)
    assert [c["type"] for c in content_of(results)] == ["text", "image_url"]


async def test_output_moderation_after_workflow_finished_replaces_the_answer(srv, host, runner):
    """Dify 1.12.1 runs the end-of-answer output moderation after workflow_finished: its
    message_replace, before message_end, must still replace what the chat keeps."""
    srv.message_end_gap = 0.2  # the moderation call takes a moment
    srv.stall_ping_every = 0.05
    srv.replace_with = "[removed by moderation]"
    results = await run(runner, host, config=chatflow(srv))
    assert rtype(terminal(results)) == "run.completed"
    assert final_text(results) == "[removed by moderation]"


async def test_a_message_end_without_usage_falls_back_to_workflow_finished_once(srv, host, runner):
    srv.mode = "chatflow"
    plain = srv._message_end

    def no_usage(run_):
        event = plain(run_)
        event["metadata"].pop("usage", None)
        return event

    srv._message_end = no_usage
    end = terminal(await run(runner, host, config=chatflow(srv)))
    assert rtype(end) == "run.completed"
    assert end.usage is not None and end.usage.total_tokens == 16, end.usage


# --- hundreds of turns --------------------------------------------------------------------------------


async def test_hundreds_of_chatflow_turns_with_files_count_each_turn_once(srv, host, runner):
    """150 turns of one chatflow conversation, each answering with 12 files: every message reaches
    Dify once in the same conversation, each turn's usage is its own (never added to another's or
    counted twice), each answer links 10 files and names the other 2, and nothing piles up in the
    conversation's state."""
    srv.usage = {"prompt_tokens": 100, "completion_tokens": 5, "total_tokens": 105}
    srv.answer_files = [dify_file(f"5f0c6d8e-0000-4000-8000-0000000000{n:02d}", f"p{n}.png", "image/png")
                        for n in range(12)]
    config = chatflow(srv)
    cid = None
    for i in range(150):
        results = await run(runner, host, f"message {i}", config=config)
        end = terminal(results)
        assert rtype(end) == "run.completed", (i, end.data)
        assert (end.usage.prompt_tokens, end.usage.total_tokens) == (100, 105), (i, end.usage)
        content = content_of(results)
        assert len([c for c in content if c["type"] == "image_url"]) == 10, i
        text = "".join(c["text"] for c in content if c["type"] == "text")
        assert text.startswith("Hello, world!") and "p10.png" in text and "p11.png" in text, text
        cid = cid or state_updates(results)[SESSION]
    assert [t.query for t in srv.turns(cid)] == [f"message {i}" for i in range(150)]
    assert len(srv.conversations) == 1
    state = host.store.snapshot(host.scope_key(Identity(), "conversation"))
    assert list(state) == [SESSION] and len(json.dumps(state)) < 1024, state


@pytest.mark.parametrize("mode", ["chat", "workflow"])
async def test_blocking_answers_count_usage_once(srv, host, runner, mode):
    """A gateway that turns the stream into Dify's blocking JSON: the turn's usage once."""
    srv.mode = mode
    srv.usage = {"prompt_tokens": 40, "completion_tokens": 2, "total_tokens": 42}
    real = srv._response_mode
    srv._response_mode = lambda body: "blocking" if real(body) else "blocking"
    ends = [terminal(await run(runner, host, f"m{i}", config=cfg(srv, **{"app-type": mode}))) for i in range(3)]
    assert all(rtype(e) == "run.completed" for e in ends), [e.data for e in ends]
    assert [e.usage.total_tokens for e in ends] == [42, 42, 42]


# --- a conversation kept for weeks, then gone -------------------------------------------------------


@pytest.mark.parametrize("stored", ["gone", "not-a-uuid"])
async def test_a_conversation_gone_after_weeks_starts_exactly_one_fresh_one(srv, host, runner, stored):
    """The id kept for weeks is unknown to Dify (404 with Flask's route suggestions), or an id
    Dify cannot parse: one fresh conversation, one notice, and the turns after it stay there."""
    config = chatflow(srv)
    for i in range(20):
        await run(runner, host, f"week {i}", config=config)
    old = chat_bodies(srv)[-1]["conversation_id"]
    if stored == "gone":
        srv.forget_conversations()
    else:
        scope = host.scope_key(Identity(), "conversation")
        kept = json.dumps(host.store.get(scope, SESSION))
        assert old in kept
        host.store.set(scope, SESSION, json.loads(kept.replace(old, "conv-from-elsewhere")))
    first = await run(runner, host, "are you there?", config=config)
    shown = final_text(first)
    assert shown.endswith("Hello, world!") and shown != "Hello, world!", shown
    assert "did you mean" not in shown and "requested this URI" not in shown
    later = [final_text(await run(runner, host, f"after {i}", config=config)) for i in range(5)]
    assert later == ["Hello, world!"] * 5, "the notice is shown once"
    ids = [b["conversation_id"] for b in chat_bodies(srv)][20:]
    assert ids[0] == (old if stored == "gone" else "conv-from-elsewhere") and ids[1] == "", ids
    assert len(ids) == 7 and len(set(ids[2:])) == 1 and ids[2] not in ("", old), ids
    assert len(srv.conversations) == (1 if stored == "gone" else 2)


@pytest.mark.parametrize("source", ["actor", "conversation"])
async def test_a_gone_conversation_in_a_busy_moment_is_replaced_once(srv, host, runner, source):
    """Three messages at once just after Dify lost the conversation: one fresh conversation, one
    notice, and the other two messages continue it."""
    srv.token_delay = 0.03
    config = chatflow(srv, **{"user-id-source": source})
    people = [Identity(actor_id=a, actor_name=a) for a in ("alice", "bob", "carol")]
    await run(runner, host, "first", config=config, identity=people[0])
    srv.forget_conversations()
    before = len(chat_bodies(srv))
    who = people if source == "conversation" else [people[0]] * 3
    shown = [final_text(r) for r in await asyncio.gather(
        *[run(runner, host, f"busy {i}", config=config, identity=who[i]) for i in range(3)])]
    assert sorted(shown, key=len)[:2] == ["Hello, world!"] * 2 and sorted(shown, key=len)[2] != "Hello, world!", shown
    ids = [b["conversation_id"] for b in chat_bodies(srv)][before:]
    assert ids.count("") == 1 and len(srv.conversations) == 1 and len(set(ids) - {""}) == 2, ids


# --- messages longer than the Start node allows -----------------------------------------------------


async def test_a_message_longer_than_the_start_node_allows_is_refused_once_and_clearly(srv, host, runner):
    """A workflow's Start node declares langbot_user_message_text as a text input (Dify's default
    max length is 48): a long message is refused once, with what to change, and the next short
    message goes through."""
    srv.mode = "workflow"
    srv.user_input_form = [{"text-input": {"variable": "langbot_user_message_text", "required": True,
                                           "max_length": 48}}]
    config = cfg(srv, **{"app-type": "workflow"})
    results = await run(runner, host, "x" * 5000, config=config)
    code, retryable, message = failure(results)
    assert (code, retryable) == ("input.too_large", False), (code, retryable, message)
    assert "48" in message and "langbot_user_message_text" in message and "Paragraph" in message, message
    assert len(srv.find_requests("POST", "/v1/workflows/run")) == 1, "no retry of a refusal"
    shown = final_text(results)
    assert "48" in shown and len(shown) < 1000, shown
    ok = await run(runner, host, "short", config=config)
    assert rtype(terminal(ok)) == "run.completed" and len(srv.find_requests("POST", "/v1/workflows/run")) == 2


# --- huge workflow outputs ---------------------------------------------------------------------------


async def test_a_5_mb_workflow_output_gives_a_bounded_answer(srv, host, runner):
    srv.mode = "workflow"
    srv.workflow_stream_text = False  # the End node's text comes only in workflow_finished
    srv.answer_tokens = ["y" * (1024 * 1024)] * 5
    started = time.monotonic()
    results = await run(runner, host, config=cfg(srv, **{"app-type": "workflow"}))
    assert rtype(terminal(results)) == "run.completed", terminal(results).data
    shown = final_text(results)
    assert 500_000 < len(shown) < 1024 * 1024 and "cut here" in shown, len(shown)
    assert time.monotonic() - started < 5


async def test_a_workflow_with_10000_file_outputs_links_ten_and_names_a_few(srv, host, runner):
    srv.mode = "workflow"
    srv.workflow_output_key = "files"
    srv.workflow_stream_text = False
    srv.answer_files = [dify_file(f"5f0c6d8e-0000-4000-8000-{n:012d}", f"page-{n}.png", "image/png")
                        for n in range(10_000)]
    started = time.monotonic()
    results = await run(runner, host, config=cfg(srv, **{"app-type": "workflow"}))
    assert rtype(terminal(results)) == "run.completed", terminal(results).data
    content = content_of(results)
    assert len([c for c in content if c["type"] == "image_url"]) == 10
    text = "".join(c["text"] for c in content if c["type"] == "text")
    assert "9970 more" in text and len(text) < 2000 and "dify_model_identity" not in text, text
    assert time.monotonic() - started < 10
