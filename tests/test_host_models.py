"""The local host's model, tool and knowledge actions, through the SDK's real run proxy, against
the fake OpenAI server over loopback: LangBot's response shapes, its litellm error texts and its
run-scoped grants."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from langbot_plugin.api.definition.components.runner.runner import Runner
from langbot_plugin.api.entities.builtin.provider.message import ContentElement, Message
from langbot_plugin.api.entities.builtin.rag.context import RetrievalResultEntry
from langbot_plugin.api.entities.builtin.resource.tool import LLMTool
from langbot_plugin.api.entities.builtin.runner.errors import AgentAPIException
from langbot_plugin.api.entities.builtin.runner.result import RunnerResult
from langbot_plugin.entities.io.errors import ActionCallError

from runners_cli.host import LocalHost
from runners_cli.host_models import LocalKnowledgeBase, LocalReranker, LocalTool, OpenAIChatModel
from tests.fakes.http_server import closed_port
from tests.fakes.openai import Fail, FakeOpenAI, Say, ToolCalls

KEY = "sk-test-secret-9f3a"
CONFIG = {"model": {"primary": "m-main", "fallbacks": []}}
USER = [Message(role="user", content="What is the weather in Paris?")]
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


@pytest.fixture
def fake():
    with FakeOpenAI(api_key=KEY) as srv:
        srv.token_delay = 0.0
        yield srv
    assert srv.handler_errors == []


def make_host(fake: FakeOpenAI, **model: Any) -> LocalHost:
    host = LocalHost(runner_id="plugin:langbot-team/LocalAgent/default")
    host.add_model(OpenAIChatModel("m-main", base_url=fake.base_url, api_key=KEY, model_name="gpt-fake", **model))
    return host


async def with_api(host: LocalHost, fn: Callable[[Any], Awaitable[Any]], config: dict[str, Any] | None = None,
                   **ctx_args: Any) -> Any:
    """Run ``fn(ctx.api)`` inside a bound runner's run; returns its value or raises its error."""
    box: dict[str, Any] = {}

    class Probe(Runner):
        async def run(self, ctx):
            try:
                box["value"] = await fn(ctx.api)
            except Exception as exc:  # noqa: BLE001 - handed to the test
                box["error"] = exc
            yield RunnerResult.run_completed(ctx.run_id, message={"role": "assistant", "content": "ok"})

    runner = Probe()
    runner.bind_runtime(plugin_runtime_handler=host)
    ctx = host.make_context("hi", config=dict(CONFIG if config is None else config), **ctx_args)
    _ = [r async for r in runner.invoke(ctx)]
    if "error" in box:
        raise box["error"]
    return box["value"]


def weather_tool() -> LLMTool:
    return LLMTool(name="get_weather", human_desc="weather", description="Weather for a city",
                   parameters=WEATHER, func=lambda **_: None)


async def stream_events(api: Any, **kwargs: Any) -> list[Any]:
    return [e async for e in api.invoke_llm_stream_events(llm_model_uuid="m-main", messages=USER, **kwargs)]


# --- invoke / stream --------------------------------------------------------------------------


async def test_invoke_returns_message_and_usage_and_sends_an_openai_request(fake):
    host = make_host(fake)
    png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYGD4DwABBAEAwS2OUAAAAABJRU5ErkJggg=="
    messages = [
        Message(role="system", content="Be brief."),
        Message(role="user", content=[ContentElement.from_text("Look:"), ContentElement.from_image_base64(png),
                                      ContentElement.from_file_url("https://files.example/r.pdf", "r.pdf")]),
    ]
    result = await with_api(host, lambda api: api.invoke_llm_with_usage(
        llm_model_uuid="m-main", messages=messages, funcs=[weather_tool()], extra_args={"temperature": 0.2}))
    assert result.message.role == "assistant" and result.message.content == fake.reply
    assert result.usage.total_tokens == 18 and result.usage.prompt_tokens == 12
    body = fake.chat_requests[-1]
    assert body["model"] == "gpt-fake" and body["temperature"] == 0.2 and "stream" not in body
    assert body["messages"][0] == {"role": "system", "content": "Be brief."}
    parts = body["messages"][1]["content"]
    assert parts[0] == {"type": "text", "text": "Look:"}
    assert parts[1] == {"type": "image_url", "image_url": {"url": "data:image/png;base64," + png}}
    assert parts[2]["type"] == "text" and "r.pdf" in parts[2]["text"]
    assert body["tools"] == [{"type": "function", "function": {"name": "get_weather",
                                                               "description": "Weather for a city",
                                                               "parameters": WEATHER}}]
    assert body["tool_choice"] == "auto"
    assert [c.action for c in host.calls if c.action == "invoke_llm"] == ["invoke_llm"]


async def test_invoke_parses_tool_calls(fake):
    fake.script = [ToolCalls([("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Rome"})])]
    msg = await with_api(make_host(fake), lambda api: api.invoke_llm(
        llm_model_uuid="m-main", messages=USER, funcs=[weather_tool()]))
    assert [(c.id, c.function.name, json.loads(c.function.arguments)) for c in msg.tool_calls] == [
        ("call_1", "get_weather", {"city": "Paris"}), ("call_2", "get_weather", {"city": "Rome"})]
    assert fake.script == []


async def test_a_model_without_func_call_gets_no_tools(fake):
    await with_api(make_host(fake, abilities=()), lambda api: api.invoke_llm(
        llm_model_uuid="m-main", messages=USER, funcs=[weather_tool()]))
    assert "tools" not in fake.chat_requests[-1]


async def test_stream_yields_deltas_a_final_chunk_and_usage(fake):
    fake.script = [Say("It is sunny in Paris.", usage={"prompt_tokens": 30, "completion_tokens": 7,
                                                       "total_tokens": 37})]
    events = await with_api(make_host(fake), stream_events)
    chunks = [e.chunk for e in events if e.chunk is not None]
    pieces = [c.content for c in chunks if c.content]
    assert "".join(pieces) == "It is sunny in Paris." and pieces[:3] == ["It", " ", "is"]  # deltas, not cumulative
    final = [c for c in chunks if c.is_final]
    assert len(final) == 1 and final[0] is chunks[-1]
    assert final[0].provider_specific_fields["finish_reason"] == "stop"
    assert events[-1].usage.total_tokens == 37 and events[-1].chunk is None
    body = fake.chat_requests[-1]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}


async def test_stream_without_provider_usage_has_no_usage_event(fake):
    fake.include_usage = False
    events = await with_api(make_host(fake), stream_events)
    assert all(e.usage is None for e in events)
    assert "".join(e.chunk.content or "" for e in events) == fake.reply


async def test_streamed_parallel_tool_calls_carry_id_and_name_on_every_fragment(fake):
    fake.script = [ToolCalls([("get_weather", {"city": "Paris"}), ("get_time", {"tz": "Europe/Paris"})])]
    events = await with_api(make_host(fake), lambda api: stream_events(api, funcs=[weather_tool()]))
    fragments = [tc for e in events if e.chunk for tc in e.chunk.tool_calls or []]
    assert all(f.id and f.function.name for f in fragments)
    calls: dict[str, tuple[str, str]] = {}
    for f in fragments:
        name, args = calls.get(f.id, (f.function.name, ""))
        calls[f.id] = (name, args + f.function.arguments)
    assert {i: (n, json.loads(a)) for i, (n, a) in calls.items()} == {
        "call_1": ("get_weather", {"city": "Paris"}), "call_2": ("get_time", {"tz": "Europe/Paris"})}
    assert sum(1 for f in fragments if f.id == "call_1" and f.function.arguments) >= 2
    final = [e.chunk for e in events if e.chunk and e.chunk.is_final]
    assert [c.provider_specific_fields["finish_reason"] for c in final] == ["tool_calls"]


async def test_reasoning_is_wrapped_in_think_tags_unless_removed(fake):
    fake.script = [Say("Sunny.", reasoning="Paris is in France."), Say("Sunny.", reasoning="Paris is in France.")]
    host = make_host(fake)
    shown = await with_api(host, stream_events)
    assert "".join(e.chunk.content or "" for e in shown if e.chunk) == "<think>\nParis is in France.\n</think>\nSunny."
    hidden = await with_api(host, lambda api: stream_events(api, remove_think=True))
    assert "".join(e.chunk.content or "" for e in hidden if e.chunk) == "Sunny."
    assert any((e.chunk.provider_specific_fields or {}).get("reasoning_content") for e in hidden if e.chunk)


async def test_remove_think_strips_inline_think_blocks_from_invoke(fake):
    fake.reply = "<think>secret plan</think>The answer."
    host = make_host(fake)
    msg = await with_api(host, lambda api: api.invoke_llm(llm_model_uuid="m-main", messages=USER),
                         config={**CONFIG, "remove-think": True})
    assert msg.content == "The answer."


# --- errors -------------------------------------------------------------------------------------

ERRORS = [
    (Fail(401, "invalid_api_key"), "Invalid API key"),
    (Fail(404, "model_not_found"), "Invalid model or endpoint"),
    (Fail(429, "rate_limit_exceeded"), "Rate limit exceeded or insufficient balance"),
    (Fail(429, "insufficient_quota"), "Rate limit exceeded or insufficient balance"),
    (Fail(400, "context_length_exceeded"), "Context length exceeded"),
    (Fail(400, "This model's maximum context length is 4096 tokens."), "Context length exceeded"),
    (Fail(400, "Invalid value for 'temperature'."), "Invalid request parameters"),
    (Fail(403, "You are not allowed to use this model."), "API error"),
    (Fail(500, "boom"), "API error"),
    (Fail(503, "overloaded"), "API error"),
]
FAULTS = [("invalid_json", "API error"), ("truncated", "API error"), ("error_event", "API error"),
          ("empty", "API error"), ("non_utf8", "API error"), ("oversized", "API error"),
          ("html_502", "API error"), ("html_401", "Invalid API key")]


async def _fails(host: LocalHost, streamed: bool) -> AgentAPIException:
    async def call(api: Any) -> Any:
        if streamed:
            return await stream_events(api)
        return await api.invoke_llm(llm_model_uuid="m-main", messages=USER)

    with pytest.raises(AgentAPIException) as info:
        await with_api(host, call)
    return info.value


@pytest.mark.parametrize("streamed", [False, True], ids=["invoke", "stream"])
@pytest.mark.parametrize(("step", "reason"), ERRORS, ids=[f"{s.status}-{s.code_or_message[:12]}" for s, _ in ERRORS])
async def test_provider_errors_map_to_langbot_reasons(fake, step, reason, streamed):
    fake.script = [step]
    exc = await _fails(make_host(fake), streamed)
    assert exc.error.code == "host.action_error"
    assert exc.error.message == f"RequesterError: Model request failed: {reason}"


@pytest.mark.parametrize("streamed", [False, True], ids=["invoke", "stream"])
@pytest.mark.parametrize(("fault", "reason"), FAULTS, ids=[f for f, _ in FAULTS])
async def test_broken_answers_map_to_langbot_reasons(fake, fault, reason, streamed):
    fake.fault = fault
    exc = await _fails(make_host(fake), streamed)
    assert exc.error.message == f"RequesterError: Model request failed: {reason}"


@pytest.mark.parametrize("streamed", [False, True], ids=["invoke", "stream"])
async def test_wrong_key_unreachable_and_stalled_providers(fake, streamed):
    host = LocalHost()
    host.add_model(OpenAIChatModel("m-main", base_url=fake.base_url, api_key="sk-wrong-key-77", model_name="x"))
    exc = await _fails(host, streamed)
    assert exc.error.message == "RequesterError: Model request failed: Invalid API key"
    assert "sk-wrong-key-77" not in str(exc)

    host = LocalHost()
    host.add_model(OpenAIChatModel("m-main", base_url=f"http://127.0.0.1:{closed_port()}/v1", api_key=KEY,
                                   model_name="x"))
    assert (await _fails(host, streamed)).error.message == "RequesterError: Model request failed: Connection failed"

    fake.fault = "stall"
    exc = await _fails(make_host(fake, timeout=0.5), streamed)
    assert exc.error.message == "RequesterError: Model request failed: Request timed out"


# --- grants ---------------------------------------------------------------------------------------


def full_host(fake: FakeOpenAI) -> LocalHost:
    host = make_host(fake, context_window=8192)
    host.add_model(OpenAIChatModel("m-backup", base_url=fake.base_url, api_key=KEY, model_name="gpt-fake-2"))
    host.add_model(OpenAIChatModel("m-other", base_url=fake.base_url, api_key=KEY, model_name="gpt-other"))
    host.add_model(LocalReranker("rr-1"))
    host.add_tool(LocalTool("get_weather", "Weather for a city", WEATHER, lambda p: {"city": p["city"], "sky": "sun"}))
    host.add_tool(LocalTool("get_time", "The time", {"type": "object", "properties": {}}, lambda p: "12:00"))
    host.add_knowledge_base(LocalKnowledgeBase("kb-1", "Handbook", [{"text": "Holidays are in August."}]))
    host.add_knowledge_base(LocalKnowledgeBase("kb-2", "Secrets", [{"text": "The vault code."}]))
    return host


async def test_a_run_is_granted_what_its_config_names_that_the_host_knows(fake):
    host = full_host(fake)
    ctx = host.make_context("hi", config={"model": {"primary": "m-main", "fallbacks": ["m-backup", "m-gone"]},
                                          "rerank-model": "rr-1", "enable-all-tools": False,
                                          "tools": ["get_weather", "nope"],
                                          "knowledge-bases": ["kb-1", "kb-gone"]})
    res = ctx.resources
    assert [(m.model_id, sorted(m.operations)) for m in res.models] == [
        ("m-main", ["count_tokens", "invoke", "stream"]), ("m-backup", ["count_tokens", "invoke", "stream"]),
        ("rr-1", ["rerank"])]
    assert [(t.tool_name, t.description, t.parameters, sorted(t.operations)) for t in res.tools] == [
        ("get_weather", "Weather for a city", WEATHER, ["call", "detail"])]
    assert [(k.kb_id, k.kb_name, sorted(k.operations)) for k in res.knowledge_bases] == [
        ("kb-1", "Handbook", ["list", "retrieve"])]
    assert ctx.runtime.metadata["model_context_window_tokens"] == 8192
    assert ctx.context.available_apis.prompt_get is True
    every = host.make_context("hi", config={"model": "m-other", "enable-all-tools": True})
    assert [t.tool_name for t in every.resources.tools] == ["get_weather", "get_time"]
    assert [m.model_id for m in every.resources.models] == ["m-other"]
    assert "model_context_window_tokens" not in every.runtime.metadata
    unset = host.make_context("hi", config={"model": "m-other", "tools": ["get_weather"]})
    assert [t.tool_name for t in unset.resources.tools] == ["get_weather", "get_time"]  # LangBot defaults it on


async def test_the_host_refuses_ungranted_resources_with_langbots_text(fake):
    host = full_host(fake)
    ctx = host.make_context("hi", config={"model": "m-main", "rerank-model": "rr-1", "enable-all-tools": False,
                                          "tools": ["get_time"], "knowledge-bases": ["kb-1"]})
    run = ctx.run_id
    cases = [
        ("invoke_llm", {"llm_model_uuid": "m-other", "messages": []}, "model m-other", "invoke"),
        ("count_tokens", {"llm_model_uuid": "m-other", "messages": []}, "model m-other", "count_tokens"),
        ("invoke_llm", {"llm_model_uuid": "rr-1", "messages": []}, "model rr-1", "invoke"),
        ("invoke_rerank", {"rerank_model_uuid": "m-main", "query": "q", "documents": []}, "model m-main", "rerank"),
        ("call_tool", {"tool_name": "get_weather", "parameters": {}}, "tool get_weather", "call"),
        ("get_tool_detail", {"tool_name": "get_weather"}, "tool get_weather", "detail"),
        ("retrieve_knowledge_base", {"kb_id": "kb-2", "query_text": "vault"}, "knowledge_base kb-2", "retrieve"),
    ]
    for action, data, what, op in cases:
        with pytest.raises(ActionCallError) as info:
            await host.call_action(action, {"run_id": run, **data})
        assert str(info.value) == f"{what} is not authorized for operation {op} for this agent run"
    with pytest.raises(ActionCallError, match="is not authorized for operation stream"):
        _ = [x async for x in host.call_action_generator(
            "invoke_llm_stream", {"run_id": run, "llm_model_uuid": "m-other", "messages": []})]
    assert fake.chat_requests == []


async def test_streaming_without_a_model_keeps_the_old_error():
    host = LocalHost()
    ctx = host.make_context("hi")
    with pytest.raises(ActionCallError, match="LLM streaming is not available in the local host"):
        _ = [x async for x in host.call_action_generator("invoke_llm_stream", {"run_id": ctx.run_id})]


# --- tools, rerank, knowledge, tokens, prompt ---------------------------------------------------


async def test_tools_are_called_with_parameters_and_failures_read_like_langbot(fake):
    seen: list[dict[str, Any]] = []

    async def weather(params: dict[str, Any]) -> dict[str, Any]:
        seen.append(params)
        return {"city": params["city"], "sky": "sunny"}

    def broken(params: dict[str, Any]) -> Any:
        raise RuntimeError("the weather station is down")

    host = make_host(fake)
    host.add_tool(LocalTool("get_weather", "Weather for a city", WEATHER, weather))
    host.add_tool(LocalTool("flaky", "Fails", {"type": "object", "properties": {}}, broken))
    config = {**CONFIG, "enable-all-tools": True}

    async def use(api: Any) -> Any:
        detail = await api.get_tool_detail("get_weather")
        result = await api.call_tool("get_weather", {"city": "Paris"})
        try:
            await api.call_tool("flaky", {})
        except AgentAPIException as exc:
            return detail, result, exc.error.message
        raise AssertionError("the failing tool did not fail")

    detail, result, error = await with_api(host, use, config=config)
    assert detail == {"name": "get_weather", "description": "Weather for a city", "parameters": WEATHER}
    assert result == {"city": "Paris", "sky": "sunny"} and seen == [{"city": "Paris"}]
    assert error == "Failed to execute tool flaky: the weather station is down"


async def test_rerank_orders_by_overlap_and_cuts_to_top_k(fake):
    host = make_host(fake)
    host.add_model(LocalReranker("rr-1"))
    docs = ["bananas are yellow", "the paris weather is sunny today", "weather in rome", "paris"]
    results = await with_api(host, lambda api: api.invoke_rerank("rr-1", "paris weather today", docs, top_k=3),
                             config={**CONFIG, "rerank-model": "rr-1"})
    assert [r["index"] for r in results] == [1, 2, 3]
    scores = [r["relevance_score"] for r in results]
    assert scores == sorted(scores, reverse=True) and scores[0] == 1.0


async def test_knowledge_base_retrieval_returns_langbot_entries(fake):
    host = make_host(fake)
    host.add_knowledge_base(LocalKnowledgeBase("kb-1", "Handbook", [
        {"text": "Office hours are nine to five.", "metadata": {"section": "hours"}, "file_name": "hours.md"},
        {"text": "Holidays: the office closes in August.", "metadata": {"file_name": "holidays.md"}},
        {"text": "Parking is behind the building.", "document_name": "Parking"},
    ]))
    results = await with_api(host, lambda api: api.retrieve_knowledge("kb-1", "when does the office close", top_k=2),
                             config={**CONFIG, "knowledge-bases": ["kb-1"]})
    entries = [RetrievalResultEntry.model_validate(r) for r in results]
    assert [e.content[0].text for e in entries] == ["Holidays: the office closes in August.",
                                                    "Office hours are nine to five."]
    assert entries[0].metadata == {"file_name": "holidays.md"}
    assert entries[1].metadata == {"section": "hours", "file_name": "hours.md"}
    assert entries[0].score > entries[1].score and entries[0].distance < entries[1].distance
    assert len({e.id for e in entries}) == 2


async def test_count_tokens_is_deterministic_and_fails_without_support(fake):
    host = make_host(fake)
    longer = [*USER, Message(role="assistant", content="It is sunny. " * 40)]

    async def count(api: Any) -> tuple[int, int, int, int]:
        return (await api.count_tokens("m-main", USER), await api.count_tokens("m-main", USER),
                await api.count_tokens("m-main", USER, funcs=[weather_tool()]), await api.count_tokens("m-main", longer))

    a, b, with_tools, more = await with_api(host, count)
    assert a == b > 0 and with_tools > a and more > a + 100
    assert fake.chat_requests == []  # counted by the host, not the provider
    host.count_tokens_supported = False
    with pytest.raises(AgentAPIException) as info:
        await with_api(host, lambda api: api.count_tokens("m-main", USER))
    assert info.value.error.message == "LLM provider does not support token counting"


async def test_get_prompt_serves_the_host_prompt_else_the_configured_one(fake):
    host = make_host(fake)
    configured = [{"role": "system", "content": "You are the office assistant."}]
    assert await with_api(host, lambda api: api.get_prompt(), config={**CONFIG, "prompt": configured}) == configured
    host.prompt = [{"role": "system", "content": "Preprocessed prompt."}]
    assert await with_api(host, lambda api: api.get_prompt(), config={**CONFIG, "prompt": configured}) == host.prompt


async def test_skills_are_granted_to_every_run(fake):
    host = make_host(fake)
    host.skills = [{"skill_name": "pdf", "display_name": "PDF", "description": "Read PDFs"}]
    ctx = host.make_context("hi", config=CONFIG)
    assert [(s.skill_name, s.display_name, s.description) for s in ctx.resources.skills] == [("pdf", "PDF",
                                                                                             "Read PDFs")]


async def test_remove_think_drops_think_tags_split_across_stream_deltas(fake):
    fake.answer_tokens = ["<thi", "nk>secret", " plan</th", "ink>The ", "answer", " <", "3"]
    host = make_host(fake)
    hidden = await with_api(host, lambda api: stream_events(api, remove_think=True))
    assert "".join(e.chunk.content or "" for e in hidden if e.chunk) == "The answer <3"
    shown = await with_api(host, stream_events)
    assert "".join(e.chunk.content or "" for e in shown if e.chunk) == "".join(fake.answer_tokens)
