"""LocalAgent against the local host's model, tool and knowledge actions, driven by FakeOpenAI on
loopback: what a bot owner sees in the chat and what the model receives."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from runners_cli.host import Identity, LocalHost
from runners_cli.host_models import LocalKnowledgeBase, LocalReranker, LocalTool, OpenAIChatModel
from runners_cli.plugins import find
from tests.fakes.http_server import BlackholeServer, closed_port
from tests.fakes.openai import Fail, FakeOpenAI, Say, ToolCalls
from tests.helpers import (
    collect,
    deltas,
    failure,
    final_text,
    messages,
    rtype,
    run,
    state_updates,
)

PLUGIN = "local-agent"  # tests/plugins/conftest.py: the runner fixture (the host is this module's own)
CONV = Identity(conversation_id="conv-1")
CHECKPOINT = "local-agent.checkpoint"


@pytest.fixture
def fake():
    with FakeOpenAI(api_key="sk-test") as srv:
        yield srv


@pytest.fixture
def host(fake):
    h = LocalHost(runner_id=find(PLUGIN).runner_id)
    h.add_model(OpenAIChatModel("m-main", base_url=fake.base_url, api_key="sk-test", model_name="gpt-fake"))
    return h


def cfg(**over: Any) -> dict[str, Any]:
    # the date and the context knobs the tests set are advanced settings: applied only with the switch on
    base: dict[str, Any] = {"model": {"primary": "m-main", "fallbacks": []}, "enable-all-tools": True,
                            "advanced-settings": True, "date-grounding": False}
    base.update(over)
    return base


def sent(fake: FakeOpenAI, n: int = -1) -> list[dict[str, Any]]:
    """The messages of the fake's n-th completion request."""
    return fake.chat_requests[n]["messages"]


def texts(msgs: list[dict[str, Any]]) -> list[str]:
    out = []
    for m in msgs:
        c = m.get("content")
        out.append(c if isinstance(c, str) else " ".join(p.get("text") or "" for p in c or [] if isinstance(p, dict)))
    return out


def tool_results(results: list[Any]) -> list[tuple[str, str]]:
    return [(rtype(r), r.data["tool_name"]) for r in results if rtype(r).startswith("tool.call.")]


def follow_up_at(host: LocalHost, ctx: Any, kind: str, text: str) -> Any:
    """A ``collect`` callback: ``text`` is sent as a follow-up when the first result of ``kind`` arrives."""
    queued = False

    def during(result: Any) -> None:
        nonlocal queued
        if not queued and rtype(result) == kind:
            host.queue_steering(ctx, text)
            queued = True

    return during


def add_tool(host: LocalHost, name: str, func: Any, props: dict[str, Any] | None = None) -> None:
    host.add_tool(LocalTool(name, f"The {name} tool", {"type": "object", "properties": props or {}}, func))


# --- answers ------------------------------------------------------------------------------------


async def test_streamed_answer_is_cumulative_and_one_complete_message(fake, host, runner):
    fake.script = [Say("Hello there, how can I help?")]
    res = await run(runner, host, "hi", config=cfg(), identity=CONV)
    assert final_text(res) == "Hello there, how can I help?"
    ds = deltas(res)
    assert ds and all(b.startswith(a) for a, b in zip(ds, ds[1:], strict=False))
    assert fake.chat_requests[0]["stream"] is True
    assert texts(sent(fake))[-1] == "hi"
    assert rtype(res[-1]) == "run.completed" and res[-1].data["finish_reason"] == "stop"


async def test_non_streaming_delivery_uses_invoke(fake, host, runner):
    fake.script = [Say("A single answer.")]
    ctx = host.make_context("hi", config=cfg(), identity=CONV)
    ctx.delivery.supports_streaming = False
    res = await collect(runner, host, ctx)
    assert final_text(res) == "A single answer."
    assert not fake.chat_requests[0].get("stream")
    assert "invoke_llm" in [c.action for c in host.calls]


async def test_prompt_date_and_usage(fake, host, runner):
    fake.script = [Say("ok", usage={"prompt_tokens": 11, "completion_tokens": 2, "total_tokens": 13})]
    prompt = [{"role": "system", "content": "You are Pirate Pete."}]
    res = await run(runner, host, "hi", config=cfg(prompt=prompt, **{"date-grounding": True}), identity=CONV)
    system = sent(fake)[0]
    assert system["role"] == "system" and system["content"].startswith("You are Pirate Pete.")
    assert f"Current date: {time.strftime('%Y-%m-%d', time.gmtime())}" in system["content"]
    assert res[-1].usage.total_tokens == 13


async def test_second_run_sees_the_first(fake, host, runner):
    fake.script = [Say("My name is Fakey."), Say("You asked my name.")]
    await run(runner, host, "What is your name?", config=cfg(), identity=CONV)
    await run(runner, host, "What did I ask?", config=cfg(), identity=CONV)
    second = [(m["role"], t) for m, t in zip(sent(fake), texts(sent(fake)), strict=True) if m["role"] != "system"]
    assert second == [("user", "What is your name?"), ("assistant", "My name is Fakey."), ("user", "What did I ask?")]


async def test_exact_migrated_config_answers(fake, host, runner):
    migrated = {  # LangBot 4.11.2's legacy local-agent migration (host-contract §5.2) + host fields
        "model": {"primary": "m-main", "fallbacks": [], "reasoning": {}},
        "prompt": [{"role": "system", "content": "You are a helpful assistant."}],
        "box-session-id-template": "{launcher_type}_{launcher_id}",
        "rerank-model": "", "rerank-top-k": 5, "retrieval-top-k": 5, "timeout": 300, "advanced-settings": False,
        "date-grounding": True, "max-tool-iterations": 100, "tool-execution-mode": "serial",
        "max-tool-result-chars": 20000, "context-history-fetch-limit": 50, "context-window-tokens": 200000,
        "context-reserve-tokens": 16384, "context-keep-recent-tokens": 20000, "context-summary-tokens": 8000,
        "remove-think": False, "enable-all-tools": False, "tools": [], "knowledge-bases": [],
        "mcp-resources": [], "mcp-resource-agent-read-enabled": False,
    }
    fake.script = [Say("Migrated and answering.")]
    res = await run(runner, host, "hi", config=migrated, identity=CONV)
    assert final_text(res) == "Migrated and answering."
    logs = [r.data["text"] for r in res if rtype(r) == "processor.log"]
    assert sum("box-session-id-template" in t for t in logs) == 1


# --- models and fallback ------------------------------------------------------------------------


async def test_fallback_after_primary_503(fake, host, runner):
    host.add_model(OpenAIChatModel("m-backup", base_url=fake.base_url, api_key="sk-test", model_name="gpt-backup"))
    fake.script = [Fail(503), Say("From the backup.")]
    res = await run(runner, host, "hi", config=cfg(model={"primary": "m-main", "fallbacks": ["m-backup"]}),
                    identity=CONV)
    assert final_text(res) == "From the backup."
    assert [r["model"] for r in fake.chat_requests] == ["gpt-fake", "gpt-backup"]
    assert any("m-backup" in r.data["text"] for r in res if rtype(r) == "processor.log")


async def test_reasoning_level_is_chosen_per_model_as_langbot_stores_it(fake, host, runner):
    # LangBot's model-fallback-selector keeps {model id: level}; "provider_default" sends nothing
    host.add_model(OpenAIChatModel("m-backup", base_url=fake.base_url, api_key="sk-test", model_name="gpt-backup"))
    fake.script = [Fail(503), Say("Thought hard.")]
    model = {"primary": "m-main", "fallbacks": ["m-backup"], "reasoning": {"m-main": "provider_default", "m-backup": "high"}}
    res = await run(runner, host, "hi", config=cfg(model=model), identity=CONV)
    assert final_text(res) == "Thought hard."
    streams = [c.data for c in host.calls if c.action == "invoke_llm_stream"]
    assert [(d["llm_model_uuid"], d.get("reasoning_level")) for d in streams] == [("m-main", None), ("m-backup", "high")]


async def test_model_not_granted_is_skipped_with_a_log(fake, host, runner):
    fake.script = [Say("Primary-less answer.")]
    res = await run(runner, host, "hi", config=cfg(model={"primary": "m-gone", "fallbacks": ["m-main"]}),
                    identity=CONV)
    assert final_text(res) == "Primary-less answer."
    assert any("m-gone" in r.data["text"] and "skipped" in r.data["text"]
               for r in res if rtype(r) == "processor.log")


async def test_no_model_available_names_the_key(fake, host, runner):
    res = await run(runner, host, "hi", config=cfg(model="m-gone"), identity=CONV)
    code, _, message = failure(res)
    assert code == "config.invalid" and "'model'" in message and "m-gone" in message
    assert not fake.chat_requests


async def test_no_switch_after_output_streamed(fake, host, runner):
    host.add_model(OpenAIChatModel("m-backup", base_url=fake.base_url, api_key="sk-test", model_name="gpt-backup"))
    fake.answer_tokens = ["The first part ", "of the answer"]
    fake.fault = "truncated"
    res = await run(runner, host, "hi", config=cfg(model={"primary": "m-main", "fallbacks": ["m-backup"]}),
                    identity=CONV)
    code, retryable, _ = failure(res)
    assert code == "upstream.unavailable" and retryable
    assert final_text(res).startswith("The first part")
    assert [r["model"] for r in fake.chat_requests] == ["gpt-fake"]


@pytest.mark.parametrize(("status", "code", "retryable"), [(401, "upstream.auth", False),
                                                          (429, "upstream.rate_limited", True)])
async def test_model_error_codes(fake, host, runner, status, code, retryable):
    fake.script = [Fail(status)]
    res = await run(runner, host, "hi", config=cfg(), identity=CONV)
    got, again, message = failure(res)
    assert (got, again) == (code, retryable)
    assert "m-main" in message and "sk-test" not in message


async def test_closed_port_is_unavailable(host, runner):
    host.add_model(OpenAIChatModel("m-main", base_url=f"http://127.0.0.1:{closed_port()}/v1", api_key="sk-test",
                                   model_name="gpt-fake"))
    res = await run(runner, host, "hi", config=cfg(), identity=CONV)
    assert failure(res)[:2] == ("upstream.unavailable", True)


async def test_connect_timeout_is_a_retryable_timeout(host, runner):
    blackhole = BlackholeServer().start()
    try:
        host.add_model(OpenAIChatModel("m-main", base_url=f"http://127.0.0.1:{blackhole.port}/v1", api_key="sk-test",
                                       model_name="gpt-fake", timeout=1.0))
        res = await run(runner, host, "hi", config=cfg(timeout=20), identity=CONV)
    finally:
        blackhole.stop()
    assert failure(res)[:2] == ("upstream.timeout", True)


# --- tools ----------------------------------------------------------------------------------------


async def test_tool_loop_serial(fake, host, runner):
    seen: list[dict[str, Any]] = []
    add_tool(host, "get_weather", lambda p: seen.append(p) or {"city": p["city"], "sky": "sunny"},
             {"city": {"type": "string"}})
    fake.script = [ToolCalls([("get_weather", {"city": "Paris"})]), Say("It is sunny in Paris.")]
    res = await run(runner, host, "Weather in Paris?", config=cfg(), identity=CONV)
    assert final_text(res) == "It is sunny in Paris."
    assert seen == [{"city": "Paris"}]
    # each call appears exactly once as started + completed (the SDK's tracing reports it)
    assert tool_results(res) == [("tool.call.started", "get_weather"), ("tool.call.completed", "get_weather")]
    tool_msg = sent(fake)[-1]
    assert tool_msg["role"] == "tool" and json.loads(tool_msg["content"]) == {"city": "Paris", "sky": "sunny"}
    assert sent(fake)[-2]["tool_calls"][0]["function"]["name"] == "get_weather"


@pytest.mark.parametrize("mode", ["serial", "parallel"])
async def test_parallel_tools_overlap(fake, host, runner, mode):
    spans: dict[int, tuple[float, float]] = {}

    async def slow(p: dict[str, Any]) -> dict[str, Any]:
        start = time.monotonic()
        await asyncio.sleep(0.3)
        spans[p["n"]] = (start, time.monotonic())
        return {"done": p.get("n")}

    add_tool(host, "slow_a", slow)
    add_tool(host, "slow_b", slow)
    fake.script = [ToolCalls([("slow_a", {"n": 1}), ("slow_b", {"n": 2})]), Say("Both done.")]
    res = await run(runner, host, "go", config=cfg(**{"tool-execution-mode": mode}), identity=CONV)
    assert final_text(res) == "Both done."
    # the results go back in the model's order either way
    assert [json.loads(m["content"]) for m in sent(fake) if m["role"] == "tool"] == [{"done": 1}, {"done": 2}]
    (a_start, a_end), (b_start, b_end) = spans[1], spans[2]
    if mode == "parallel":
        assert b_start < a_end and a_start < b_end, spans  # the two calls ran at the same time
    else:
        assert b_start >= a_end, spans  # the second began after the first ended


async def test_iteration_cap_ends_with_a_tool_less_call(fake, host, runner):
    add_tool(host, "search", lambda p: {"hits": []})
    fake.script = [ToolCalls([("search", {"q": "a"})]), ToolCalls([("search", {"q": "b"})]), Say("Best I can do.")]
    res = await run(runner, host, "find it", config=cfg(**{"max-tool-iterations": 2}), identity=CONV)
    assert final_text(res) == "Best I can do."
    assert len(fake.chat_requests) == 3
    assert "tools" in fake.chat_requests[1] and "tools" not in fake.chat_requests[2]
    assert "tool round" in texts(sent(fake))[-1]


async def test_terminate_ends_without_another_model_call(fake, host, runner):
    add_tool(host, "hand_off", lambda p: {"terminate": True, "message": "Handed to a human."})
    fake.script = [ToolCalls([("hand_off", {})]), Say("never sent")]
    res = await run(runner, host, "help", config=cfg(), identity=CONV)
    assert final_text(res) == "Handed to a human."
    assert len(fake.chat_requests) == 1


async def test_oversized_result_keeps_paths_and_urls(fake, host, runner):
    big = "x" * 5000 + " see https://example.com/report/42.pdf and /srv/data/out/result.csv " + "y" * 5000
    add_tool(host, "report", lambda p: {"text": big})
    fake.script = [ToolCalls([("report", {})]), Say("done")]
    await run(runner, host, "report", config=cfg(**{"max-tool-result-chars": 1000}), identity=CONV)
    content = sent(fake)[-1]["content"]
    assert len(content) < 1400
    assert "https://example.com/report/42.pdf" in content and "/srv/data/out/result.csv" in content
    assert "characters cut" in content


def test_a_result_of_nothing_but_links_stays_bounded(runner):
    from local_agent.tools import preview  # noqa: PLC0415 - importable once the runner is loaded

    links = " ".join(f"https://example.com/page/{i}" for i in range(2000))
    shown = preview(links, 1000)
    assert len(shown) <= 1000
    assert "https://example.com/page/0" in shown and "more)" in shown


async def test_tool_error_and_bad_arguments_go_back_to_the_model(fake, host, runner):
    def broken(p: dict[str, Any]) -> Any:
        raise RuntimeError("disk on fire")

    add_tool(host, "broken", broken)
    fake.script = [ToolCalls([("broken", {})]), Say("The tool failed, sorry.")]
    res = await run(runner, host, "try", config=cfg(), identity=CONV)
    assert final_text(res) == "The tool failed, sorry."
    err = json.loads(sent(fake)[-1]["content"])
    assert "disk on fire" in err["error"]


async def test_undeclared_tool_is_an_error_result(fake, host, runner):
    add_tool(host, "search", lambda p: {"hits": []})
    fake.script = [ToolCalls([("not_there", {})]), Say("Recovered.")]
    res = await run(runner, host, "try", config=cfg(), identity=CONV)
    assert final_text(res) == "Recovered."
    assert "not available" in json.loads(sent(fake)[-1]["content"])["error"]


# --- knowledge --------------------------------------------------------------------------------------


async def test_rag_with_rerank_orders_and_labels(fake, host, runner):
    host.add_knowledge_base(LocalKnowledgeBase("kb-1", "Handbook", [
        {"text": "Holidays: staff get 30 vacation days.", "metadata": {"file_name": "holidays.md"}},
        {"text": "Parking is behind the building.", "metadata": {"file_name": "parking.md"}},
    ]))
    host.add_knowledge_base(LocalKnowledgeBase("kb-2", "Wiki", [
        {"text": "vacation days vacation policy for staff", "metadata": {"url": "https://wiki/vacation"}},
    ]))
    host.add_model(LocalReranker("rr-1"))
    fake.script = [Say("30 days.")]
    config = cfg(**{"knowledge-bases": ["kb-1", "kb-2"], "rerank-model": "rr-1", "rerank-top-k": 2})
    await run(runner, host, "How many vacation days do staff get?", config=config, identity=CONV)
    system = sent(fake)[0]["content"]
    assert "[1] (" in system and "[2] (" in system and "[3] (" not in system
    assert "Parking" not in system
    # the reranker scores by shared words: the holidays passage shares the most with the question
    assert system.index("[1] (Handbook · holidays.md)\nHolidays: staff get 30") < system.index(
        "[2] (Wiki · https://wiki/vacation)\nvacation days vacation policy")
    assert [c.action for c in host.calls].count("retrieve_knowledge_base") == 2
    assert "invoke_rerank" in [c.action for c in host.calls]


# --- budget, compaction, overflow ---------------------------------------------------------------------


def long_history(host: LocalHost, pairs: int, size: int = 400) -> None:
    items = []
    for i in range(pairs):
        items.append({"role": "user", "content": f"question {i} " + "q" * size})
        items.append({"role": "assistant", "content": f"answer {i} " + "a" * size})
    host.history = items


async def test_compaction_writes_a_checkpoint_the_next_run_reuses(fake, host, runner):
    long_history(host, 10, size=800)
    config = cfg(**{"context-window-tokens": 2500, "context-reserve-tokens": 500,
                    "context-keep-recent-tokens": 400, "context-summary-tokens": 300})
    fake.responder = lambda body: "SUMMARY: ten questions asked." if body.get("max_tokens") else "Answer one."
    fake.context_window = 2500  # the model refuses what does not fit: a summary request too
    res = await run(runner, host, "next question", config=config, identity=CONV)
    assert final_text(res) == "Answer one."
    summaries = [r for r in fake.chat_requests if r.get("max_tokens")]
    assert len(summaries) >= 2  # 8,000 characters of history do not fit one 2,500-token summary request
    assert all(r["max_tokens"] == 300 and not r.get("tools") for r in summaries)
    assert "## Open items" in summaries[0]["messages"][0]["content"]  # a structured summary is asked for
    assert "Earlier summary:" in summaries[1]["messages"][1]["content"]  # each chunk builds on the last
    checkpoint = state_updates(res)[CHECKPOINT]
    assert checkpoint["summary"] == "SUMMARY: ten questions asked." and isinstance(checkpoint["through_seq"], int)
    answer_req = sent(fake)
    assert "SUMMARY: ten questions asked." in " ".join(texts(answer_req))
    assert not any("question 0 " in t for t in texts(answer_req))

    fake.responder = None
    fake.script = [Say("Answer two.")]
    before = len(fake.chat_requests)
    res2 = await run(runner, host, "another one", config=config, identity=CONV)
    assert final_text(res2) == "Answer two."
    assert len(fake.chat_requests) == before + 1  # no second summary call
    third = sent(fake)
    assert "SUMMARY: ten questions asked." in " ".join(texts(third))
    assert len(third) < 22 and not any("question 0 " in t for t in texts(third))


async def test_context_overflow_compacts_harder_and_retries_once(fake, host, runner):
    long_history(host, 4, size=50)
    fake.script = [Fail(400, "context_length_exceeded"), Say("short summary"), Say("Fits now.")]
    res = await run(runner, host, "hi", config=cfg(**{"context-keep-recent-tokens": 40}), identity=CONV)
    assert final_text(res) == "Fits now."
    assert CHECKPOINT in state_updates(res)
    assert len(fake.chat_requests) == 3


async def test_overflow_after_the_retry_fails_as_too_large(fake, host, runner):
    long_history(host, 4, size=50)
    fake.script = [Fail(400, "context_length_exceeded"), Say("short summary"), Fail(400, "context_length_exceeded")]
    res = await run(runner, host, "hi", config=cfg(**{"context-keep-recent-tokens": 40}), identity=CONV)
    assert failure(res)[:2] == ("input.too_large", False)
    assert len(fake.chat_requests) == 3  # retried once, not again


async def test_without_token_counting_the_run_fails_closed(fake, host, runner):
    host.count_tokens_supported = False
    res = await run(runner, host, "hi", config=cfg(), identity=CONV)
    code, retryable, message = failure(res)
    assert code == "config.invalid" and not retryable
    assert "token counter" in message
    assert not fake.chat_requests


async def test_message_over_budget_is_too_large(fake, host, runner):
    res = await run(runner, host, "z" * 20000, config=cfg(**{"context-window-tokens": 1500,
                                                             "context-reserve-tokens": 500}), identity=CONV)
    code, _, message = failure(res)
    assert code == "input.too_large" and "tokens" in message
    assert not fake.chat_requests


# --- steering and cancel ------------------------------------------------------------------------------


async def test_follow_up_gets_its_own_reply_in_the_same_run(fake, host, runner):
    fake.script = [Say("First answer."), Say("Second answer.")]
    fake.token_delay = 0.05
    ctx = host.make_context("first", config=cfg(), identity=CONV, steering=True)
    res = await collect(runner, host, ctx, follow_up_at(host, ctx, "message.delta", "and a follow-up"))
    assert messages(res) == ["First answer.", "Second answer."]
    follow = [(m["role"], t) for m, t in zip(sent(fake), texts(sent(fake)), strict=True) if m["role"] != "system"]
    assert follow[-3:] == [("user", "first"), ("assistant", "First answer."), ("user", "and a follow-up")]
    assert len([r for r in res if rtype(r) in ("run.completed", "run.failed")]) == 1


async def test_host_cancel_mid_stream_closes_the_model_stream(fake, host, runner):
    fake.answer_tokens = ["tok "] * 200
    fake.token_delay = 0.05
    ctx = host.make_context("hi", config=cfg(), identity=CONV)
    gen = runner.invoke(ctx)
    got = 0
    async for r in gen:
        if rtype(r) == "message.delta":
            got += 1
            if got >= 2:
                break
    await gen.aclose()
    for _ in range(60):
        if fake.active_requests == 0:
            break
        await asyncio.sleep(0.05)
    assert fake.active_requests == 0
    left = [t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()
            and "local_agent" in repr(t.get_coro())]
    assert not left


async def test_host_cancel_during_a_tool_cancels_the_call(fake, host, runner):
    state = {"started": False, "cancelled": False}

    async def slow(p: dict[str, Any]) -> dict[str, Any]:
        state["started"] = True
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            state["cancelled"] = True
            raise
        return {}

    add_tool(host, "slow", slow)
    fake.script = [ToolCalls([("slow", {})])]
    ctx = host.make_context("go", config=cfg(), identity=CONV)
    gen = runner.invoke(ctx)
    async for r in gen:
        if rtype(r) == "tool.call.started":
            break
    await asyncio.sleep(0.1)
    await gen.aclose()
    assert state == {"started": True, "cancelled": True}


async def test_progress_line_shows_the_running_tool(fake, host, runner):
    async def slow(p: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(1.0)
        return {"ok": True}

    add_tool(host, "lookup", slow, {"city": {"type": "string"}})
    fake.script = [ToolCalls([("lookup", {"city": "Oslo"})]), Say("Done.")]
    res = await run(runner, host, "go", config=cfg(), identity=CONV)
    assert any("lookup" in d and "Oslo" in d for d in deltas(res))
    assert final_text(res) == "Done."


async def test_failing_knowledge_base_is_skipped_with_a_log(fake, host, runner):
    host.add_knowledge_base(LocalKnowledgeBase("kb-1", "Handbook", [{"text": "Office opens at nine.",
                                                                     "metadata": {"file_name": "hours.md"}}]))
    ghost = {"knowledge_bases": [{"kb_id": "kb-ghost", "kb_name": "Ghost", "operations": ["list", "retrieve"]}]}
    fake.script = [Say("Nine.")]
    res = await run(runner, host, "When does the office open?", config=cfg(**{"knowledge-bases": ["kb-1"]}),
                    identity=CONV, resources=ghost)
    assert final_text(res) == "Nine."
    assert "[1] (Handbook · hours.md)" in sent(fake)[0]["content"]
    assert any("Ghost" in r.data["text"] and "skipped" in r.data["text"] for r in res if rtype(r) == "processor.log")


async def test_granted_skills_are_offered_in_the_system_prompt(fake, host, runner):
    host.skills = [{"skill_name": "pdf-tools", "display_name": "PDF tools", "description": "Split and merge PDFs"}]
    fake.script = [Say("ok"), Say("ok")]
    await run(runner, host, "hi", config=cfg(), identity=CONV)
    assert "pdf-tools" not in sent(fake)[0]["content"]  # no skill tool to activate them with: not announced
    add_tool(host, "activate", lambda p: {"ok": True}, {"skill_name": {"type": "string"}})
    await run(runner, host, "hi", config=cfg(), identity=CONV)
    assert "pdf-tools (PDF tools): Split and merge PDFs" in sent(fake)[0]["content"]


async def test_malformed_arguments_become_an_error_result_without_calling_the_tool(runner):
    from local_agent.tools import Call, run_one  # importable once the runner is loaded

    class Api:
        called = False

        async def call_tool(self, name: str, params: dict[str, Any]) -> Any:
            Api.called = True

    ctx = type("Ctx", (), {"api": Api()})()
    outcome = await run_one(ctx, Call("c1", "search", '{"q": "unterminated'))
    assert not Api.called
    body = json.loads(outcome.message(1000)["content"])
    assert "not valid JSON" in body["error"] and "search" in body["error"]


async def test_tool_parameters_come_from_get_tool_detail_when_the_grant_has_none(fake, host, runner):
    add_tool(host, "get_weather", lambda p: {"sky": "clear"}, {"city": {"type": "string"}})
    bare = {"tools": [{"tool_name": "get_weather", "tool_type": "plugin", "operations": ["detail", "call"]}]}
    fake.script = [Say("ok")]
    await run(runner, host, "hi", config=cfg(), identity=CONV, resources=bare)
    offered = fake.chat_requests[0]["tools"][0]["function"]
    assert offered["name"] == "get_weather" and offered["parameters"]["properties"] == {"city": {"type": "string"}}
    assert "get_tool_detail" in [c.action for c in host.calls]


async def test_a_model_without_the_count_tokens_grant_fails_closed(fake, host, runner):
    no_count = {"models": [{"model_id": "m-main", "model_type": "llm", "operations": ["invoke", "stream"]}]}
    res = await run(runner, host, "hi", config=cfg(), identity=CONV, resources=no_count)
    code, _, message = failure(res)
    assert code == "config.invalid" and "token counter" in message and "m-main" in message
    assert not fake.chat_requests
