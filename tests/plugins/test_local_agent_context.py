"""LocalAgent over long conversations (issue 32): budgeting over the whole request at every model
call, compaction of history and of the run's own tool rounds, the checkpoint cursor, bounded and
structured summaries, the overflow retry and fallbacks per model call, and follow-ups that steer a
tool loop. The fake model refuses a request over its window before any output, as providers do."""

# ruff: noqa: F811 - the fake/host fixtures are imported from test_local_agent and taken as parameters
from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import pytest

from runners_cli.host import LocalHost
from runners_cli.host_models import OpenAIChatModel
from runners_cli.plugins import find
from tests.fakes.openai import Fail, FakeOpenAI, Say, ToolCalls
from tests.helpers import collect, failure, final_text, messages, rtype, run, state_updates
from tests.plugins.test_local_agent import (  # noqa: F401
    CHECKPOINT,
    CONV,
    add_tool,
    cfg,
    fake,
    follow_up_at,
    host,
    sent,
    texts,
)

PLUGIN = "local-agent"


def summaries(fake: FakeOpenAI) -> list[dict[str, Any]]:
    return [r for r in fake.chat_requests if r.get("max_tokens") and not r.get("tools")]


def answers(fake: FakeOpenAI) -> list[dict[str, Any]]:
    return [r for r in fake.chat_requests if not r.get("max_tokens")]


def summarising(text: str = "SUMMARY") -> Any:
    """A responder: summary requests get ``text``, the rest what the script says (default reply)."""
    def respond(body: dict[str, Any]) -> str:
        return text if body.get("max_tokens") else "Done."
    return respond


def seed(host: LocalHost, n: int, size: int, start: int = 0) -> None:
    """``n`` earlier messages of the conversation, each carrying its marker ``m<i>``."""
    host.history = [{"role": "user" if i % 2 == 0 else "assistant", "conversation_id": CONV.conversation_id,
                     "bot_id": CONV.bot_id, "workspace_id": CONV.workspace_id,
                     "content": f"m{i} " + "x" * size} for i in range(start, start + n)]


def markers(text: str) -> set[str]:
    return set(re.findall(r"\bm\d+\b", text))


def request_text(req: dict[str, Any]) -> str:
    return json.dumps(req["messages"], ensure_ascii=False)


# --- 1. default settings on a 32k model ----------------------------------------------------------


async def test_default_settings_hold_a_long_conversation_on_a_32k_model(fake, host, runner):
    seed(host, 60, 1600)  # the newest 50 (the default fetch limit): about 20,000 tokens of history
    fake.context_window = 32768
    fake.responder = summarising()
    for n in range(3):
        ctx = host.make_context(f"five words, message {n}", config=cfg(), identity=CONV)
        ctx.runtime.metadata = {**(ctx.runtime.metadata or {}), "model_context_window_tokens": 32768}
        res = await collect(runner, host, ctx)
        assert final_text(res) == "Done.", failure(res)
    assert summaries(fake)  # compacted, with the default keep-recent capped to what the budget leaves
    assert all(r.get("max_tokens", 0) <= 8000 for r in summaries(fake))


# --- 2. the run's own tool rounds ---------------------------------------------------------------


async def test_a_long_tool_loop_is_compacted_and_the_work_kept(fake, host, runner):
    add_tool(host, "fetch", lambda p: {"page": p.get("n"), "body": f"page{p.get('n')} " + "b" * 9000},
             {"n": {"type": "integer"}})
    fake.context_window = 12000
    fake.script = [ToolCalls([("fetch", {"n": i})]) for i in range(8)] + [Say("All eight read.")]
    fake.summary_reply = "SUMMARY: fetched pages"
    config = cfg(**{"context-window-tokens": 12000})  # the default reserve (16,384) is capped to half of it
    res = await run(runner, host, "read the eight pages", config=config, identity=CONV)
    assert final_text(res) == "All eight read.", failure(res)
    assert CHECKPOINT in state_updates(res)
    last = answers(fake)[-1]
    assert "read the eight pages" in request_text(last)  # the message being answered is never summarised
    assert "SUMMARY: fetched pages" in request_text(last)
    for req in answers(fake):  # no assistant tool call is ever sent apart from its results
        msgs = req["messages"]
        for i, m in enumerate(msgs):
            if m.get("tool_calls"):
                ids = [c["id"] for c in m["tool_calls"]]
                assert [x.get("tool_call_id") for x in msgs[i + 1:i + 1 + len(ids)]] == ids
            if m["role"] == "tool":
                assert any(c["id"] == m["tool_call_id"] for p in msgs[:i] for c in p.get("tool_calls") or [])
    assert not fake.refused


# --- 3. the checkpoint cursor ---------------------------------------------------------------------


async def test_every_message_after_the_checkpoint_is_read_whatever_the_fetch_limit(fake, host, runner):
    seed(host, 44, 20)
    seqs = [item["seq"] for item in host.history]
    scope = host.scope_key(CONV, "conversation")
    host.store.set(scope, CHECKPOINT, {"summary": "SUMMARY of m0-m3", "through_seq": seqs[3], "created_at": "x"})
    fake.script = [Say("ok")]
    res = await run(runner, host, "hi", config=cfg(**{"context-history-fetch-limit": 10}), identity=CONV)
    assert final_text(res) == "ok"
    seen = markers(json.dumps([m for m in sent_request(fake)["messages"] if m["role"] != "system"]))
    assert seen == {f"m{i}" for i in range(4, 44)}  # 40 messages after the cursor, none skipped
    assert "SUMMARY of m0-m3" in request_text(sent_request(fake))


def sent_request(fake: FakeOpenAI) -> dict[str, Any]:
    return answers(fake)[-1]


async def test_without_a_checkpoint_the_fetch_limit_reaches_back_that_far(fake, host, runner):
    seed(host, 30, 20)
    fake.script = [Say("ok")]
    await run(runner, host, "hi", config=cfg(**{"context-history-fetch-limit": 10}), identity=CONV)
    assert markers(request_text(sent_request(fake))) == {f"m{i}" for i in range(20, 30)}


# --- 4. bounded, structured summaries ----------------------------------------------------------------


async def test_the_summary_requests_fit_the_model_and_ask_for_sections(fake, host, runner):
    seed(host, 50, 3000)
    fake.context_window = 16000
    fake.responder = summarising("## Goals\n- read m-things\n## Open items\n- none")
    res = await run(runner, host, "next", config=cfg(**{"context-window-tokens": 16000}), identity=CONV)
    assert final_text(res) == "Done.", failure(res)
    reqs = summaries(fake)
    assert len(reqs) >= 3
    assert not fake.refused
    for header in ("## Goals", "## Decisions and facts", "## Files, URLs and names", "## Tool work", "## Open items"):
        assert header in reqs[0]["messages"][0]["content"]
    # each message is summarised once: no marker in two summary requests' new parts
    parts = [markers(r["messages"][1]["content"].split("New part of the conversation:")[1]) for r in reqs]
    seen: set[str] = set()
    for p in parts:
        assert not (p & seen)
        seen |= p
    sent_now = markers(" ".join(t for m in sent_request(fake)["messages"] if m["role"] != "system"
                                for t in [json.dumps(m["content"])]))
    assert not (sent_now & seen) and (sent_now | seen) == {f"m{i}" for i in range(50)}


# --- 5, 6, 7. overflow retry and fallbacks per model call --------------------------------------------


@pytest.fixture
def two_models(fake, host):
    host.add_model(OpenAIChatModel("m-alt", base_url=fake.base_url, api_key="sk-test", model_name="gpt-alt"))
    return cfg(model={"primary": "m-main", "fallbacks": ["m-alt"]})


async def test_overflow_in_tool_round_two_compacts_and_retries(fake, host, runner):
    seed(host, 10, 400)
    add_tool(host, "look", lambda p: {"found": "y" * 50})
    fake.script = [ToolCalls([("look", {})]), Fail(400, "context_length_exceeded"), Say("Found it.")]
    fake.summary_reply = "SUMMARY"
    res = await run(runner, host, "look it up", config=cfg(), identity=CONV)
    assert final_text(res) == "Found it.", failure(res)
    assert CHECKPOINT in state_updates(res)


async def test_a_failure_in_tool_round_two_moves_to_the_fallback(fake, host, runner, two_models):
    add_tool(host, "look", lambda p: {"found": "y"})
    fake.script = [ToolCalls([("look", {})]), Fail(503), Say("From the fallback.")]
    res = await run(runner, host, "look it up", config=two_models, identity=CONV)
    assert final_text(res) == "From the fallback.", failure(res)
    assert [r["model"] for r in fake.chat_requests] == ["gpt-fake", "gpt-fake", "gpt-alt"]


@pytest.mark.parametrize("step", [Fail(401, "invalid_api_key"), Fail(404, "model_not_found"),
                                  Fail(400, "image input is not supported by this model")],
                         ids=["bad-key", "deleted-model", "unsupported-input"])
async def test_the_fallback_is_tried_on_any_failure_before_output(fake, host, runner, two_models, step):
    fake.script = [step, Say("From the fallback.")]
    res = await run(runner, host, "hi", config=two_models, identity=CONV)
    assert final_text(res) == "From the fallback.", failure(res)
    logs = " ".join(str(r.data) for r in res if rtype(r) == "run.log" or "log" in rtype(r))
    assert "m-alt" in logs or "fallback" in logs


async def test_overflow_with_little_history_says_the_window_is_overstated(fake, host, runner):
    fake.context_window = 300  # the real model; the config says 200,000
    res = await run(runner, host, "tell me " + "about it " * 150, config=cfg(), identity=CONV)
    code, _, message = failure(res)
    assert code == "input.too_large"
    assert "smaller than configured" in message and "lower context-window-tokens" in message
    counted = int(re.search(r"counts it at (\d+) tokens", message).group(1))
    assert 300 < counted < 1000  # LangBot's own figure for this request, not made up
    assert "even after summarising" not in message  # nothing was there to summarise


# --- 8. follow-ups steer the tool loop ------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["next-turn", "interrupt"])
async def test_a_follow_up_during_a_tool_reaches_the_loop(fake, host, runner, mode):
    state = {"cancelled": False}

    async def slow(p: dict[str, Any]) -> dict[str, Any]:
        try:
            await asyncio.sleep(0.4 if mode == "next-turn" else 30)
        except asyncio.CancelledError:
            state["cancelled"] = True
            raise
        return {"weather": "sunny"}

    add_tool(host, "weather", slow)
    fake.script = [ToolCalls([("weather", {})]), Say("Sunny, and I will bring an umbrella.")]
    ctx = host.make_context("what is the weather", config=cfg(**{"follow-up-mode": mode}), identity=CONV,
                            steering=True)
    res = await collect(runner, host, ctx, follow_up_at(host, ctx, "tool.call.started",
                                                        "also: should I bring an umbrella?"))
    assert messages(res) == ["Sunny, and I will bring an umbrella."]  # one reply answers both
    last = texts(sent(fake))
    assert any("should I bring an umbrella?" in t for t in last)
    assert state["cancelled"] is (mode == "interrupt")
    if mode == "interrupt":
        assert any("the user sent a new message" in t for t in last)
    assert "(Stopped here" not in final_text(res)


async def test_a_hung_tool_is_named_when_the_time_limit_ends_the_run(fake, host, runner):
    async def hang(p: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(30)
        return {}

    add_tool(host, "crawl", hang)
    fake.script = [ToolCalls([("crawl", {})])]
    res = await run(runner, host, "crawl it", config=cfg(timeout=1), identity=CONV)
    code, _, message = failure(res)
    assert code == "upstream.timeout" and message.startswith("the tool 'crawl' did not finish"), message


async def test_an_interrupted_reply_that_wrote_nothing_leaves_no_empty_message(fake, host, runner):
    fake.script = [ToolCalls([("look", {})]), Say("First."), Say("Second.")]
    add_tool(host, "look", lambda p: {"ok": 1})
    fake.token_delay = 0.05
    ctx = host.make_context("go", config=cfg(**{"follow-up-mode": "interrupt"}), identity=CONV, steering=True)
    host.queue_steering(ctx, "and this")
    res = await collect(runner, host, ctx)
    assert res and not failure(res)[0] if rtype(res[-1]) == "run.failed" else True
    for req in fake.chat_requests:
        assert not [m for m in req["messages"] if m["role"] == "assistant" and not m.get("content")
                    and not m.get("tool_calls")]


# --- 9. the smaller items ---------------------------------------------------------------------------------


async def test_tools_run_in_parallel_by_default(fake, host, runner):
    running = {"now": 0, "most": 0}

    async def slow(p: dict[str, Any]) -> dict[str, Any]:
        running["now"] += 1
        running["most"] = max(running["most"], running["now"])
        await asyncio.sleep(0.05)
        running["now"] -= 1
        return {}

    add_tool(host, "a", slow)
    add_tool(host, "b", slow)
    fake.script = [ToolCalls([("a", {}), ("b", {})]), Say("ok")]
    await run(runner, host, "go", config=cfg(), identity=CONV)
    assert running["most"] == 2


def test_previews_keep_every_kind_of_link_and_path(runner):
    from local_agent.tools import preview  # importable once the runner is loaded

    refs = ["s3://bucket/key/a.parquet", "gs://bkt/obj.csv", "ftp://files.example.org/pub/x.tar",
            "file:///srv/data/report.pdf", r"C:\Users\ann\report.docx"]
    text = "x" * 5000 + " " + " ".join(refs) + " " + "y" * 5000
    out = preview(text, 1000)
    for r in refs:
        assert r in out, r


async def test_bytes_sent_per_tool_round_do_not_grow_with_the_loop(fake, host, runner):
    add_tool(host, "step", lambda p: {"result": "r" * 2000})
    fake.script = [ToolCalls([("step", {"i": i})]) for i in range(12)] + [Say("done")]
    await run(runner, host, "go", config=cfg(), identity=CONV)
    counts = [len(json.dumps(c.data, default=str)) for c in host.calls if c.action == "count_tokens"]
    # each message is counted once: round 12 counts as little as round 2 (the whole request is never recounted)
    assert len(counts) < 40 and max(counts[4:]) < 3 * max(counts[1:4])


async def test_at_the_round_limit_a_model_still_calling_tools_gets_a_clear_reply(fake, host, runner):
    add_tool(host, "look", lambda p: {"ok": 1})
    fake.script = [ToolCalls([("look", {})]), ToolCalls([("look", {})])]
    res = await run(runner, host, "go", config=cfg(**{"max-tool-iterations": 1}), identity=CONV)
    said = final_text(res)
    assert "“Most tool rounds”" in said and "max-tool-iterations" not in said, "the setting as the form names it"
    fake.script = [ToolCalls([("look", {})]), ToolCalls([("look", {})])]
    zh = await run(runner, host, "继续查", config=cfg(**{"max-tool-iterations": 1}), identity=CONV)
    assert "「工具调用轮数上限」" in final_text(zh) and "请让我继续" in final_text(zh)


async def test_images_of_earlier_turns_are_not_resent_empty(fake, host, runner):
    host.history = [{"role": "user", "conversation_id": CONV.conversation_id, "bot_id": CONV.bot_id,
                     "workspace_id": CONV.workspace_id, "content": "look at this",
                     "content_json": {"role": "user", "content": [
                         {"type": "text", "text": "look at this"},
                         {"type": "image_base64", "image_base64": None}]}}]
    fake.script = [Say("ok")]
    await run(runner, host, "and now?", config=cfg(), identity=CONV)
    body = request_text(sent_request(fake))
    assert "null" not in body and "an image was sent here" in body


def test_the_form_declares_what_the_specification_says():
    import yaml

    doc = yaml.safe_load(find("local-agent").runner_yaml.read_text())
    fields = {f["name"]: f for f in doc["spec"]["config"]}
    assert fields["tool-execution-mode"]["default"] == "parallel"
    assert fields["prompt"].get("required") is True
    # timeout stays a number field: LangBot's migration writes 300 and owners' forms hold 120.5 alike,
    # and an integer field would refuse the latter (tests/test_repo_check.py holds every plugin to it)
    assert fields["timeout"]["type"] == "float"
    assert not doc["spec"]["permissions"].get("storage")


# --- the long conversation ------------------------------------------------------------------------------


async def test_three_hundred_messages_over_twenty_runs_at_an_8k_window(fake, host, runner):
    """Every message is either sent or summarised, and summarised exactly once; once summarised it is
    never sent again; no run fails. 13 messages of other members arrive between the bot's runs."""
    fake.context_window = 8192
    counter = iter(range(10**6))
    ids = {"next": 0}

    def marker() -> str:
        ids["next"] += 1
        return f"m{ids['next'] - 1}"

    def respond(body: dict[str, Any]) -> str:
        if body.get("max_tokens"):  # the summary covers what it was given (earlier summary included)
            seen = markers(body["messages"][1]["content"])
            return "covers: " + " ".join(sorted(seen, key=lambda m: int(m[1:])))
        next(counter)
        return f"{marker()} answer " + "a" * 300

    fake.responder = respond
    scope = {"conversation_id": CONV.conversation_id, "bot_id": CONV.bot_id, "workspace_id": CONV.workspace_id,
             "thread_id": CONV.thread_id}
    config = cfg(**{"context-window-tokens": 8192})
    for n in range(20):
        for _ in range(13):
            host.store.append_transcript({**scope, "role": "user", "content": f"{marker()} said " + "o" * 400})
        res = await run(runner, host, f"{marker()} question {n} " + "q" * 300, config=config, identity=CONV)
        assert final_text(res).endswith("a" * 300), failure(res)
    assert ids["next"] == 300
    summarised: list[set[str]] = [
        markers(r["messages"][1]["content"].split("New part of the conversation:")[1]) for r in summaries(fake)]
    once: set[str] = set()
    for part in summarised:
        assert not (part & once), part & once  # never summarised twice
        once |= part
    sent_any: set[str] = set()
    done: set[str] = set()
    for r in fake.chat_requests:
        if r.get("max_tokens"):
            done |= markers(r["messages"][1]["content"].split("New part of the conversation:")[1])
            continue
        body = markers(json.dumps([m for m in r["messages"] if m["role"] != "system"]))
        assert not (body & done), body & done  # once summarised, never sent again
        sent_any |= body
    everything = {f"m{i}" for i in range(300)}
    answers_markers = {f"m{i}" for i in range(300)} - sent_any - once
    # every message but the last answer (which no later run could read) was sent or summarised
    assert len(answers_markers) <= 1, sorted(answers_markers, key=lambda m: int(m[1:]))[:10]
    assert len(summaries(fake)) >= 5 and once < everything
    assert not fake.refused
