"""LocalAgent inside the real LangBot 4.11.2 host (opt-in: ``RUN_SLOW=1``).

LocalAgent's "upstream" is LangBot's own model layer, so these tests set LangBot up as a bot owner
would: an OpenAI-compatible model provider (requester ``openai-chat-completions``, litellm provider
``openai``) whose base URL is a ``FakeOpenAI`` on 127.0.0.1, and an LLM model on it. Then:

- the built ``local-agent`` package installs and its runner shows its whole config form;
- a pipeline bound to LocalAgent streams an answer over the WebUI websocket, a second message in
  the same chat reaches the model with the first exchange (LangBot's transcript), agent debug answers;
- a LangBot tool (from a test-only tool plugin built here) is called through the model's tool call;
- a wrong API key on the provider ends the chat with LocalAgent's explanation, fast;
- a conversation that outgrows a small context budget is summarised once, LangBot keeps the summary
  as the conversation's checkpoint, and the next run continues from it (issue 32);
- a legacy 4.10 ``local-agent`` pipeline written into SQLite migrates to this plugin and answers.

The session's LangBot comes from ``harness.py`` (fixture ``langbot`` in ``conftest.py``).
"""

from __future__ import annotations

import contextlib
import json
import re
import secrets
import sqlite3
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from runners_cli.build import sdk_build
from runners_cli.plugins import find
from tests.e2e.harness import (
    RUN_TERMINAL,
    Chat,
    Host,
    LegacyMigration,
    assert_failure_explained,
    assert_partial_answer_kept,
    frame_text,
    recorded_failure,
    say,
    wait_for,
    ws_chat,
    ws_turns,
)
from tests.fakes.openai import FakeOpenAI, Say, ToolCalls

pytestmark = [pytest.mark.slow, pytest.mark.langbot, pytest.mark.timeout(900)]

PLUGIN = find("local-agent")
RUNNER_ID = PLUGIN.runner_id  # plugin:langbot-team/LocalAgent/default
API_KEY = "sk-e2e-" + secrets.token_hex(12)  # the provider's key; must never come back in a host response
MODEL_NAME = "gpt-fake"
PROMPT = [{"role": "system", "content": "You are the e2e assistant. Answer in one sentence."}]
# what LangBot 4.11.2's migration emits for a legacy local-agent pipeline (host-contract.md section 5.2)
MIGRATED_KEYS = {
    "model", "prompt", "rerank-model", "rerank-top-k", "retrieval-top-k", "timeout", "advanced-settings",
    "date-grounding", "max-tool-iterations", "tool-execution-mode", "max-tool-result-chars",
    "context-history-fetch-limit", "context-window-tokens", "context-reserve-tokens",
    "context-keep-recent-tokens", "context-summary-tokens", "remove-think", "box-session-id-template",
}


# --- fixtures ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def host(langbot: Host) -> Host:
    """The session's LangBot with LocalAgent installed."""
    took = langbot.ensure_plugin(PLUGIN)
    if took is not None:
        say(f"measured: LocalAgent install (build + upload + runner listed) {took:.1f}s")
    return langbot


@pytest.fixture
def llm() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(api_key=API_KEY) as fake:
        fake.models = [MODEL_NAME]
        yield fake


@pytest.fixture
def model(host: Host, llm: FakeOpenAI) -> str:
    """An LLM model (with function calling) on a provider pointed at ``llm``: its uuid."""
    return host.create_llm_model(MODEL_NAME, base_url=llm.base_url, api_key=API_KEY)


def agent_config(model_uuid: str, **extra: Any) -> dict[str, Any]:
    """LocalAgent's config as the WebUI saves it for a bot owner who picked the model and a prompt."""
    return {"model": {"primary": model_uuid, "fallbacks": []}, "prompt": PROMPT, "enable-all-tools": False,
            "tools": [], "knowledge-bases": [], **extra}


def echo(body: dict[str, Any]) -> str:
    """The fake model's answer: it repeats the last user message, so each turn's answer differs."""
    return f"You said: {FakeOpenAI.last_user_text(body).strip()}."


def said_by(messages: list[dict[str, Any]], role: str) -> list[str]:
    """The text of every message of ``role`` in a completion request."""
    texts = []
    for m in messages:
        if m.get("role") != role:
            continue
        content = m.get("content")
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        texts.append(str(content or ""))
    return texts


def bilingual(label: Any) -> bool:
    """A label the WebUI can show in English and in Chinese."""
    return isinstance(label, dict) and all(str(label.get(lang) or "").strip() for lang in ("en_US", "zh_Hans"))


def secs(value: float | None) -> str:
    return "never" if value is None else f"{value:.2f}s"


def streamed_updates(chat: Chat, final: dict[str, Any]) -> list[str]:
    """The distinct texts the chat showed for the final message while it was being written."""
    texts: list[str] = []
    for reply in chat.replies:
        if reply.get("id") == final.get("id") and reply.get("content") and reply["content"] not in texts:
            texts.append(reply["content"])
    return texts


# --- the runner and its form ------------------------------------------------------------------------


def test_host_lists_local_agent_with_its_whole_config_form(host: Host, journey: Any) -> None:
    journey("local-agent", "form")
    assert RUNNER_ID in host.runner_ids()
    stage = host.runner_stage(RUNNER_ID)
    items = {item["id"].removeprefix(RUNNER_ID + "."): item for item in stage["config"]}
    assert list(items) == [item["name"] for item in PLUGIN.config_items]
    unlabeled = [name for name, item in items.items() if not bilingual(item.get("label"))]
    assert not unlabeled, f"fields without an en_US and a zh_Hans label: {unlabeled}"
    options = [f"{name}={opt.get('name')}" for name, item in items.items() for opt in item.get("options") or []
               if not bilingual(opt.get("label"))]
    assert not options, f"select options without an en_US and a zh_Hans label: {options}"
    # every key the 4.11.2 migration writes must be declared, or legacy pipelines cannot migrate
    assert MIGRATED_KEYS - {"box-session-id-template"} <= set(items), MIGRATED_KEYS - set(items)
    assert items["model"]["type"] == "model-fallback-selector", items["model"]
    assert items["prompt"]["type"] == "prompt-editor", items["prompt"]


# --- chat --------------------------------------------------------------------------------------------


def test_provider_test_call_reaches_the_fake_model(host: Host, llm: FakeOpenAI, model: str) -> None:
    """The model's "test" button in the WebUI: LangBot's litellm calls the fake with the model name."""
    resp = host.api("POST", f"/api/v1/provider/models/llm/{model}/test", json={})
    assert resp.json()["code"] == 0
    (request,) = llm.chat_requests
    assert request["model"] == MODEL_NAME
    assert API_KEY not in resp.text


def test_pipeline_chat_streams_and_the_second_message_sees_the_first(
    host: Host, llm: FakeOpenAI, model: str, journey: Any) -> None:
    journey("local-agent", "chat")
    llm.responder = echo
    llm.token_delay = 0.1  # about a second per answer, so the chat has time to show it grow
    pipeline = host.create_pipeline(f"e2e-local-{uuid.uuid4().hex[:6]}", agent_config(model), RUNNER_ID)
    first_q, second_q = "What is the capital of France?", "And of Italy?"
    first, second = ws_turns(host, pipeline, [first_q, second_q])
    for n, chat in enumerate((first, second), 1):
        say(f"measured: message {n}: first text after {secs(chat.first_text_after())}, "
            f"final after {secs(chat.final_after())}")

    final = first.final()
    assert final is not None, f"no final answer to the first message: {first.frames}"
    assert final["content"] == f"You said: {first_q}.", first.replies
    updates = streamed_updates(first, final)
    assert len(updates) > 1, f"the answer arrived in one piece, not streamed: {first.replies}"
    assert all(final["content"].startswith(u) for u in updates), updates

    final2 = second.final()
    assert final2 is not None and final2["content"] == f"You said: {second_q}.", second.replies
    assert first.conversation_id == second.conversation_id

    assert len(llm.chat_requests) == 2, [r.get("messages") for r in llm.chat_requests]
    req1, req2 = llm.chat_requests
    assert req1["model"] == MODEL_NAME and req1.get("stream") is True
    assert PROMPT[0]["content"] in "\n".join(said_by(req1["messages"], "system"))
    # the second request carries the first exchange, from LangBot's transcript of this chat
    assert first_q in said_by(req2["messages"], "user")[:-1], req2["messages"]
    assert any(f"You said: {first_q}." in t for t in said_by(req2["messages"], "assistant")), req2["messages"]
    assert said_by(req2["messages"], "user")[-1].strip().endswith(second_q)

    runs = wait_for("both runs to finish", lambda: _finished_runs(host, first.conversation_id, 2), 30,
                    alive=host.alive)
    assert [r["status"] for r in runs] == ["completed", "completed"], runs


def _finished_runs(host: Host, conversation_id: str, count: int) -> list[dict[str, Any]] | None:
    rows = host.runs(conversation_id)
    return rows if len(rows) == count and all(r["status"] in RUN_TERMINAL for r in rows) else None


def test_agent_debug_answers(host: Host, llm: FakeOpenAI, model: str, journey: Any) -> None:
    journey("local-agent", "debug")
    llm.responder = echo
    agent = host.create_agent("e2e-local-debug", agent_config(model), RUNNER_ID)
    conversation = f"e2e-local-{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    resp = host.debug(agent, "ping from debug", conversation)
    say(f"measured: agent debug turn {time.monotonic() - started:.2f}s")
    assert resp.status_code == 200, resp.text
    data = resp.json()["data"]
    assert data["final_text"] == "You said: ping from debug.", data
    assert [e["type"] for e in data["execution_events"]][-1] == "run.completed"
    assert "ping from debug" in said_by(llm.chat_requests[-1]["messages"], "user")[-1]
    assert API_KEY not in resp.text


# --- a LangBot tool ----------------------------------------------------------------------------------

TOOL_PLUGIN_FILES = {
    "manifest.yaml": """\
apiVersion: v1
kind: Plugin
metadata:
  author: e2e-tests
  name: WeatherProbe
  repository: ''
  version: 0.1.0
  description:
    en_US: 'Test-only tool plugin for the LocalAgent end-to-end suite.'
    zh_Hans: '仅供 LocalAgent 端到端测试的工具插件。'
  label:
    en_US: Weather Probe
    zh_Hans: 天气探针
  icon: assets/icon.svg
spec:
  config: []
  components:
    Tool:
      fromDirs:
        - path: components/tools/
execution:
  python:
    path: main.py
    attr: WeatherProbePlugin
""",
    "main.py": """\
from langbot_plugin.api.definition.plugin import BasePlugin


class WeatherProbePlugin(BasePlugin):
    async def initialize(self) -> None:
        pass
""",
    "requirements.txt": "langbot-plugin>=0.7.16,<0.8\n",
    "assets/icon.svg": '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 8 8"><rect width="8" height="8"/></svg>\n',
    "components/__init__.py": "",
    "components/tools/__init__.py": "",
    "components/tools/get_weather.yaml": """\
apiVersion: v1
kind: Tool
metadata:
  name: get_weather
  label:
    en_US: Weather
    zh_Hans: 天气
  description:
    en_US: 'The current weather of a city.'
    zh_Hans: '城市的当前天气。'
spec:
  parameters:
    type: object
    properties:
      city:
        type: string
        description: The city.
    required: [city]
  llm_prompt: 'The current weather of a city.'
execution:
  python:
    path: get_weather.py
    attr: GetWeather
""",
    "components/tools/get_weather.py": """\
from __future__ import annotations

from typing import Any

from langbot_plugin.api.definition.components.tool.tool import Tool

REPORT_ID = "__REPORT_ID__"


class GetWeather(Tool):
    async def call(self, params: dict[str, Any], session: Any, query_id: int) -> str:
        return f"Weather in {params.get('city')}: sunny, 21 C (report {REPORT_ID})"
""",
}


@dataclass
class WeatherTool:
    name: str
    report_id: str  # only the installed tool's answer contains it


@pytest.fixture(scope="module")
def weather_tool(host: Host, tmp_path_factory: pytest.TempPathFactory) -> WeatherTool:
    """A test-only plugin with one Tool component (``get_weather``), built and installed here."""
    report_id = secrets.token_hex(6)
    src = tmp_path_factory.mktemp("weather-probe")
    for rel, text in TOOL_PLUGIN_FILES.items():
        path = src / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.replace("__REPORT_ID__", report_id), encoding="utf-8")
    package = sdk_build(src, tmp_path_factory.mktemp("weather-probe-dist"))
    host.install_package(package)
    wait_for("get_weather in LangBot's tool list", lambda: _tool_listed(host, "get_weather"), 60, interval=1.0,
             alive=host.alive)
    return WeatherTool("get_weather", report_id)


def _tool_listed(host: Host, name: str) -> bool:
    """``name`` is in LangBot's tool catalog (what the WebUI lists and a run may be granted)."""
    return any(tool.get("name") == name for tool in host.data("GET", "/api/v1/tools")["tools"])


def test_model_calls_a_langbot_tool_and_answers_with_its_result(
    host: Host, llm: FakeOpenAI, model: str, weather_tool: WeatherTool, journey: Any) -> None:
    journey("local-agent", "tools")
    llm.script = [ToolCalls([(weather_tool.name, {"city": "Paris"})]), Say("It is sunny in Paris.")]
    config = agent_config(model, **{"enable-all-tools": True})
    pipeline = host.create_pipeline(f"e2e-local-tool-{uuid.uuid4().hex[:6]}", config, RUNNER_ID)
    chat = ws_chat(host, pipeline, "What is the weather in Paris?")
    say(f"measured: tool call round trip: final after {secs(chat.final_after())}")
    final = chat.last_shown()
    assert final is not None and final["is_final"], chat.replies
    assert final["content"].endswith("It is sunny in Paris."), chat.replies

    assert len(llm.chat_requests) == 2, [r.get("messages") for r in llm.chat_requests]
    offered = [(t.get("function") or {}).get("name") for t in llm.chat_requests[0].get("tools") or []]
    assert weather_tool.name in offered, offered
    tool_results = [m for m in llm.chat_requests[1]["messages"] if m.get("role") == "tool"]
    assert len(tool_results) == 1, llm.chat_requests[1]["messages"]
    assert f"report {weather_tool.report_id}" in json.dumps(tool_results[0]), tool_results
    assert "Paris" in json.dumps(tool_results[0])

    run = host.finished_run(chat.conversation_id)
    assert run["status"] == "completed", run
    types = [e["type"] for e in host.run_events(run["run_id"])]
    assert any(t.startswith("tool.call") for t in types), types


# --- failures ----------------------------------------------------------------------------------------


def test_wrong_provider_api_key_is_explained_in_the_chat(host: Host, llm: FakeOpenAI, journey: Any) -> None:
    journey("local-agent", "wrong_key")
    wrong = host.create_llm_model(MODEL_NAME, base_url=llm.base_url, api_key="sk-wrong-" + secrets.token_hex(8))
    pipeline = host.create_pipeline(f"e2e-local-401-{uuid.uuid4().hex[:6]}", agent_config(wrong), RUNNER_ID)
    started = time.monotonic()
    chat = ws_chat(host, pipeline, "hello")
    took = time.monotonic() - started
    ended = chat.final_after()
    say(f"measured: wrong API key explained after {secs(ended)} (chat read for {took:.1f}s)")
    assert ended is not None and ended < 20, chat.frames  # an answer, not a hang
    assert_failure_explained(chat, "API key")
    # LangBot's litellm did call the provider, with the wrong key (the fake answered 401)
    calls = llm.find_requests("POST", "/v1/chat/completions")
    assert calls and all(r.headers.get("authorization") != f"Bearer {API_KEY}" for r in calls), calls
    failure = recorded_failure(host, host.finished_run(chat.conversation_id))
    assert (failure.code, failure.retryable) == ("upstream.auth", False), failure


# --- journeys: reset, host cancel, stall ----------------------------------------------------------


def test_after_a_reset_the_model_no_longer_sees_the_earlier_messages(
        host: Host, llm: FakeOpenAI, model: str, journey: Any) -> None:
    """LocalAgent's conversation is LangBot's own transcript: after the owner resets the context
    (the WebUI's monitoring page), the next message reaches the model without the earlier exchange."""
    journey("local-agent", "reset")
    llm.responder = echo
    pipeline = host.create_pipeline(f"e2e-local-reset-{uuid.uuid4().hex[:6]}", agent_config(model), RUNNER_ID)
    conversation: list[str] = []
    chats = ws_turns(host, pipeline, ["My name is Ada.", "What is my name?", "Do you know my name?"],
                     between=lambda i: i == 2 and host.reset_context(conversation[0]),
                     on_connect=conversation.append)
    assert [c.final()["content"] if c.final() else None for c in chats] == [
        "You said: My name is Ada..", "You said: What is my name?.", "You said: Do you know my name?."]
    second, third = (said_by(r["messages"], "user") for r in llm.chat_requests[1:3])
    assert "My name is Ada." in second[:-1], second
    assert not any("My name is Ada." in t or "What is my name?" in t for t in third[:-1]), \
        f"the reset did not clear what the model sees: {third}"


def test_a_host_cancel_stops_the_model_call(host: Host, llm: FakeOpenAI, model: str, journey: Any) -> None:
    """The agent debug panel closed mid-answer: LangBot cancels the run, and the runner ends its
    model call (the provider's stream closes) instead of reading the answer to its end."""
    journey("local-agent", "cancel")
    llm.answer_tokens = [f"t{i} " for i in range(40)]
    llm.token_delay = 0.25  # 10 s of answer
    agent = host.create_agent("e2e-local-cancel", agent_config(model), RUNNER_ID)
    conversation = f"e2e-local-cancel-{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    frames = host.debug_stream(agent, "write a long answer", conversation, until=frame_text)
    assert frames[-1].get("kind") == "result" and frame_text(frames[-1]), frames
    run = host.finished_run(conversation)
    assert (run["status"], run["status_reason"]) == ("cancelled", "consumer_cancelled"), run
    wait_for("the model call to end", lambda: llm.active_requests == 0, 8, interval=0.1)
    took = time.monotonic() - started
    say(f"measured: LocalAgent host cancel stopped the model call after {took:.2f}s")
    assert took < 8, f"the model call was not stopped early ({took:.1f}s; the answer lasts 10 s)"


def test_a_stalled_model_keeps_the_partial_answer_with_its_note(
        host: Host, llm: FakeOpenAI, model: str, journey: Any) -> None:
    journey("local-agent", "stall")
    llm.answer_tokens = ["The first part ", "and the rest."]
    llm.fault = "stall"  # the first token, then nothing
    config = agent_config(model, timeout=6, **{"advanced-settings": True, "idle-timeout": 2})
    pipeline = host.create_pipeline(f"e2e-local-stall-{uuid.uuid4().hex[:6]}", config, RUNNER_ID)
    started = time.monotonic()
    chat = ws_chat(host, pipeline, "hello", timeout=40)
    assert_partial_answer_kept(chat, streamed="The first part ")
    assert time.monotonic() - started < 25
    failure = recorded_failure(host, host.finished_run(chat.conversation_id))
    assert failure.code in ("upstream.timeout", "upstream.unavailable"), failure


# --- compaction across runs (issue 32) ---------------------------------------------------------------

# LangBot 4.11.2 counts a request for an ``openai-chat-completions`` model with litellm's
# ``token_counter`` on ``openai/<model name>`` (requesters/litellmchat.py ``count_tokens``): for the
# unknown name ``gpt-fake`` that is tiktoken's cl100k_base plus 3 tokens a message and 3 for the reply,
# and the tool definitions (``get_weather``: 39). Counted that way, one note is ~541 tokens, one answer
# ~10, and the requests of runs 1-4 without compaction ~600, ~1150, ~1700 and ~2250 (run 4 logged 2221
# counted whole; summing each message counted alone adds ~5 a message: 2240). The budget, 2000, sits
# between runs 3 and 4 (~12% either side); after run 4 summarises, run 5 needs ~1750, and the messages
# to summarise (~1100) fit one summary request.
COMPACT_WINDOW, COMPACT_RESERVE = 2400, 400
COMPACT_KEEP = 600  # the newest message and its answer fit verbatim, two messages do not
COMPACT_SUMMARY = 256  # the form's minimum: every summary request asks for at most this many tokens
NOTE_WORDS = "The quick brown fox jumps over the lazy dog near the old river bank. " * 34
NOTES = 5


def _output_limit(body: dict[str, Any]) -> Any:
    """The answer length a completion request asks for (litellm may send either name)."""
    return body.get("max_tokens", body.get("max_completion_tokens"))


def _request_text(body: dict[str, Any]) -> str:
    return "\n".join(said_by(body.get("messages") or [], "system") + said_by(body.get("messages") or [], "user")
                     + said_by(body.get("messages") or [], "assistant"))


def _conversation_rows(host: Host, sql: str, *args: Any) -> list[dict[str, Any]]:
    with contextlib.closing(sqlite3.connect(host.db_path, timeout=30)) as db:
        db.row_factory = sqlite3.Row
        return [dict(r) for r in db.execute(sql, args).fetchall()]


def test_a_summary_checkpoint_carries_the_conversation_into_the_next_run(
        host: Host, llm: FakeOpenAI, model: str, weather_tool: WeatherTool, journey: Any) -> None:
    """Issue 32: one real LangBot conversation outgrows a small context budget. The run that no longer
    fits summarises the oldest messages with one model call (``max_tokens`` = context-summary-tokens,
    no tools), LangBot stores the summary as the conversation's ``local-agent.checkpoint``, and the
    next run, a new run reading LangBot's transcript again, starts from that summary: it sends the
    summary and the messages after it, none of the summarised ones, and summarises nothing more."""
    journey("local-agent", "compaction")
    tag = secrets.token_hex(4)
    marker = [f"note-{n}-{tag}" for n in range(1, NOTES + 1)]  # marker[k]: only in note k+1
    notes = [f"Part {n} of my notes ({marker[n - 1]}): {NOTE_WORDS}" for n in range(1, NOTES + 1)]
    summaries: list[str] = []

    def answer(body: dict[str, Any]) -> str:
        if _output_limit(body) is not None:  # a summary request; a chat request sets no length
            summaries.append(f"Summary {len(summaries) + 1} ({tag}): the user shares numbered notes about a "
                             "fox that jumps over a dog by a river.")
            return summaries[-1]
        found = re.search(rf"note-(\d+)-{tag}", FakeOpenAI.last_user_text(body))
        return f"Noted part {found.group(1)}." if found else "Noted."

    llm.responder = answer
    llm.tool_when = llm.fail_when = None  # no note may turn into a tool call or a failure
    config = agent_config(model, tools=[weather_tool.name], **{
        "advanced-settings": True, "date-grounding": False, "context-window-tokens": COMPACT_WINDOW,
        "context-reserve-tokens": COMPACT_RESERVE,
        "context-keep-recent-tokens": COMPACT_KEEP, "context-summary-tokens": COMPACT_SUMMARY})
    pipeline = host.create_pipeline(f"e2e-local-compact-{uuid.uuid4().hex[:6]}", config, RUNNER_ID)

    conversation: list[str] = []
    ends = [0]  # len(llm.chat_requests) when each run had finished

    def finished(runs: int) -> None:
        """Wait until ``runs`` runs ended (each message is its own run, not a follow-up of the last)."""
        wait_for(f"run {runs} to finish", lambda: _finished_runs(host, conversation[0], runs), 30, interval=0.1,
                 alive=host.alive)
        ends.append(len(llm.chat_requests))

    started = time.monotonic()
    chats = ws_turns(host, pipeline, notes, settle=0.5, between=finished, on_connect=conversation.append)
    finished(NOTES)
    say(f"measured: {NOTES} messages with one compaction in {time.monotonic() - started:.1f}s")
    assert [c.final()["content"] if c.final() else None for c in chats] == [
        f"Noted part {n}." for n in range(1, NOTES + 1)], [c.replies for c in chats]
    runs = host.runs(conversation[0])
    assert [r["status"] for r in runs] == ["completed"] * NOTES, runs
    per_run = [llm.chat_requests[a:b] for a, b in zip(ends, ends[1:], strict=False)]
    shapes = [["summary" if _output_limit(r) is not None else "chat" for r in reqs] for reqs in per_run]

    # runs 1-3 fit the budget; run 4 does not: it summarises first, then answers; run 5 fits again
    assert shapes == [["chat"], ["chat"], ["chat"], ["summary", "chat"], ["chat"]], shapes
    chat_requests = [r for reqs in per_run for r in reqs if _output_limit(r) is None]
    offered = [[(t.get("function") or {}).get("name") for t in r.get("tools") or []] for r in chat_requests]
    assert offered == [[weather_tool.name]] * NOTES, offered

    (summary_request, fourth), fifth = per_run[3], per_run[4][0]
    # LangBot's litellm passes LocalAgent's max_tokens through as max_tokens for this model
    assert summary_request.get("max_tokens") == COMPACT_SUMMARY, {k: v for k, v in summary_request.items()
                                                                  if k != "messages"}
    assert not summary_request.get("tools") and not summary_request.get("tool_choice"), summary_request.get("tools")
    summarised = [m for m in marker if m in _request_text(summary_request)]
    assert summarised and summarised[0] == marker[0], f"the oldest note was not summarised: {summarised}"
    assert marker[3] not in summarised and marker[4] not in summarised, summarised  # the notes being answered
    (summary,) = summaries

    # LangBot keeps the checkpoint as the conversation's state (runner_state, scope conversation)
    state = _conversation_rows(host, "SELECT runner_id, scope, value_json FROM runner_state WHERE conversation_id = ?"
                               " AND state_key = 'local-agent.checkpoint'", conversation[0])
    assert [(s["runner_id"], s["scope"]) for s in state] == [(RUNNER_ID, "conversation")], state
    checkpoint = json.loads(state[0]["value_json"])
    assert checkpoint["summary"] == summary and isinstance(checkpoint["through_seq"], int), checkpoint
    assert checkpoint.get("created_at"), checkpoint
    events = host.run_events(runs[3]["run_id"])
    for line in (str((e.get("data") or {}).get("text", "")) for e in events if e["type"] == "processor.log"):
        if "summaris" in line:
            say(f"measured: run 4 logged: {line}")  # the request size LangBot counted, against the budget
    updates = [e["data"] for e in events if e["type"] == "state.updated"]
    assert [(u["key"], u["scope"], u["value"]["summary"]) for u in updates] == [
        ("local-agent.checkpoint", "conversation", summary)], updates

    # the checkpoint's cursor splits LangBot's transcript: what is up to it was summarised, what is
    # after it is sent again by the next run (nothing is sent twice, nothing is lost)
    user_rows = _conversation_rows(host, "SELECT seq FROM transcript WHERE conversation_id = ?"
                                   " AND role = 'user' ORDER BY seq", conversation[0])
    assert len(user_rows) == NOTES, [r["seq"] for r in user_rows]
    up_to = [m for m, r in zip(marker, user_rows, strict=True) if r["seq"] <= checkpoint["through_seq"]]
    assert up_to == summarised, (up_to, summarised, checkpoint)

    for request, run in ((fourth, 4), (fifth, 5)):
        sent = _request_text(request)
        assert summary in "\n".join(said_by(request["messages"], "system")), f"run {run} lacks the summary"
        assert not [m for m in summarised if m in sent], f"run {run} sent summarised notes again"
        assert [m for m in marker[:run] if m not in summarised and m not in sent] == [], \
            f"run {run} lost a note that was not summarised"
    assert "Summary of the earlier conversation:" in "\n".join(said_by(fifth["messages"], "system"))


# --- legacy pipeline migration (host-contract.md section 5) ------------------------------------------


@dataclass
class Migration(LegacyMigration):
    model: str
    llm: FakeOpenAI


LEGACY_PROMPT = [{"role": "system", "content": "You are the legacy 4.10 assistant."}]


@pytest.fixture(scope="module")
def migration(host: Host) -> Iterator[Migration]:
    """A 4.10 ``local-agent`` pipeline (the model by uuid, a prompt, max-round) migrated by LangBot."""
    with FakeOpenAI(api_key=API_KEY) as fake:
        model_uuid = host.create_llm_model(MODEL_NAME, base_url=fake.base_url, api_key=API_KEY)
        ai = {
            "runner": {"runner": "local-agent", "expire-time": 0},
            "local-agent": {"model": model_uuid, "max-round": 10, "prompt": LEGACY_PROMPT,
                            "knowledge-bases": []},
        }
        pipeline = host.insert_legacy_pipeline("e2e-legacy-local", ai, remove_think=True)
        yield Migration(**vars(host.migrate(pipeline)), model=model_uuid, llm=fake)


def test_legacy_local_agent_pipeline_migrates_to_this_plugin(migration: Migration) -> None:
    migrated = migration.runner_config("local-agent", PLUGIN)
    assert migrated["model"] == {"primary": migration.model, "fallbacks": [], "reasoning": {}}
    assert migrated["prompt"] == LEGACY_PROMPT
    assert migrated["remove-think"] is True
    assert migrated["enable-all-tools"] is True  # 4.10's local agent offered every tool


def test_migrated_local_agent_pipeline_answers_over_the_webui_websocket(host: Host, migration: Migration, journey: Any) -> None:
    journey("local-agent", "migration")
    results = (migration.task.get("task_context") or {}).get("metadata", {}).get("results")
    assert results and results[0]["state"] == "migrated", f"the pipeline was not migrated: {results}"
    migration.llm.reply = "Hello from the migrated pipeline."
    chat = ws_chat(host, migration.pipeline, "hi")
    say(f"measured: migrated pipeline: first text after {secs(chat.first_text_after())}, "
        f"final after {secs(chat.final_after())}")
    final = chat.final()
    assert final is not None, f"no final response over the websocket: {chat.replies}"
    assert final["content"] == "Hello from the migrated pipeline."
    request = migration.llm.chat_requests[-1]
    assert "You are the legacy 4.10 assistant." in "\n".join(said_by(request["messages"], "system"))
    assert said_by(request["messages"], "user")[-1].strip().endswith("hi")
    assert host.finished_run(chat.conversation_id)["status"] == "completed"
