"""End to end against the real LangBot 4.11.2 host (opt-in: ``RUN_SLOW=1``).

What runs, all on 127.0.0.1 with ports picked at run time: the session's LangBot 4.11.2 and its
plugin runtime (``harness.py``, fixture ``langbot`` in ``conftest.py``), the DifyAgent package
built from this repository and installed through the host's HTTP API, and ``FakeDify``
(tests/fakes) as the upstream.

The tests drive the agent debug API (two turns sharing one Dify conversation, an upstream auth
failure), chat with API-made pipelines over the WebUI websocket to check what a user sees when a
run fails (a stalled answer keeps its text plus an "incomplete" note; a missing api-key is
explained instead of the host's generic "Agent runner execution failed.") and what the run ledger
records. (The legacy ``dify-service-api`` migration is a row of test_migrations_e2e.py, with the
other legacy runners.)

Follow-ups: a test-only multi-turn runner (``steer_probe/``) and the coding agents (Claude Code and
Codex, each with its scripted CLI and, when npm can install it, the real CLI, over the fake model API)
are sent a second websocket message while they answer; the host claims it for the running run and
the chat shows one reply per turn, with no ``steering.dropped`` in the run's journal.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runners_cli.plugins import PluginInfo, find, load_plugin
from tests.e2e.harness import (
    Host,
    assert_chat_ends_with_own_text,
    assert_failure_explained,
    assert_partial_answer_kept,
    frame_text,
    is_host_notice,
    recorded_failure,
    run_inputs,
    say,
    wait_for,
    working_in,
    ws_chat,
    ws_conversation,
    ws_turns,
)
from tests.fakes.dify import FakeDify

pytestmark = [pytest.mark.slow, pytest.mark.langbot, pytest.mark.timeout(900)]


PLUGIN = find("dify-agent")
RUNNER_ID = PLUGIN.runner_id  # plugin:langbot-team/DifyAgent/default
API_KEY = "app-e2e-" + "k3y" * 8  # must never come back in a host response


# --- fixtures ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def host(langbot: Host) -> Host:
    """The session's LangBot with DifyAgent installed."""
    langbot.ensure_plugin(PLUGIN)
    return langbot


@pytest.fixture
def dify() -> Iterator[FakeDify]:
    with FakeDify(api_key=API_KEY) as srv:
        yield srv


def dify_config(srv: FakeDify, **extra: Any) -> dict[str, Any]:
    return {"base-url": srv.base_url, "api-key": API_KEY, "app-type": "chat", "timeout": 30, **extra}


# --- tests ------------------------------------------------------------------------------------------


def test_host_lists_the_runner_with_its_config_schema(host: Host) -> None:
    assert RUNNER_ID in host.runner_ids()
    stage = host.runner_stage(RUNNER_ID)
    host_keys = [item["id"].removeprefix(RUNNER_ID + ".") for item in stage["config"]]
    assert host_keys == [item["name"] for item in PLUGIN.config_items]


def test_agent_debug_answers_and_keeps_the_dify_conversation(host: Host, dify: FakeDify) -> None:
    agent = host.create_agent("e2e-dify", dify_config(dify), RUNNER_ID)
    expected = "".join(dify.answer_tokens)
    conversation = f"e2e-conv-{uuid.uuid4().hex[:8]}"

    first = host.debug(agent, "hello", conversation)
    assert first.status_code == 200, first.text
    data1 = first.json()["data"]
    assert data1["final_text"] == expected
    assert data1["conversation_id"] == conversation
    assert [e["type"] for e in data1["execution_events"]][-1] == "run.completed"

    second = host.debug(agent, "hello again", conversation)
    assert second.status_code == 200, second.text
    assert second.json()["data"]["final_text"] == expected

    requests = dify.find_requests("POST", "/v1/chat-messages")
    assert len(requests) == 2
    bodies = [r.json() for r in requests]
    assert not bodies[0].get("conversation_id")
    assert list(dify.conversations) == [bodies[1]["conversation_id"]], \
        "the second turn did not continue the Dify conversation the first one created"
    assert [b["query"] for b in bodies] == ["hello", "hello again"]

    # the run ledger holds the state.updated the host persisted (and then sent back in the snapshot)
    run_id = data1["execution_events"][0]["run_id"]
    events = host.data("GET", f"/api/v1/monitoring/executions/agent/{run_id}", params={"section": "events"})["events"]
    updates = [e["data"] for e in events if e["type"] == "state.updated"]
    assert len(updates) == 1, updates
    # dify.conversation_id, or dify.conversation_id.u<digest> where each sender is their own Dify user
    # (the default user-id-source "actor"; dify-agent/README.md)
    assert re.fullmatch(r"dify\.conversation_id(\.u[0-9a-f]+)?", updates[0]["key"]), updates
    assert (updates[0]["scope"], updates[0]["value"]) == ("conversation", bodies[1]["conversation_id"])

    for resp in (first, second):
        assert API_KEY not in resp.text


def test_agent_debug_reports_upstream_auth_failure(host: Host, dify: FakeDify) -> None:
    agent = host.create_agent("e2e-dify-401", dify_config(dify), RUNNER_ID)
    dify.fault = "http_401"
    resp = host.debug(agent, "hello", f"e2e-401-{uuid.uuid4().hex[:8]}")
    assert resp.status_code == 422, resp.text
    body = resp.json()
    assert body["code"] == "upstream.auth", body
    assert API_KEY not in resp.text
    assert len(dify.find_requests("POST", "/v1/chat-messages")) == 1


# --- failures as a user sees them ------------------------------------------------------------------
# LangBot 4.11.2 answers a runner's run.failed in a pipeline chat with its own generic line
# (pipeline/process/handlers/chat.py L250-256): over the streamed message when streaming, instead of
# every runner message otherwise. These tests pin what the user must see instead.


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "no-stream"])
def test_pipeline_chat_keeps_a_partial_answer_with_an_incomplete_note(host: Host, dify: FakeDify, stream: bool) -> None:
    dify.fault = "stall"  # the first token, then nothing (tests/fakes/dify.py _after_first)
    config = dify_config(dify, timeout=6, **{"advanced-settings": True, "idle-timeout": 2})
    pipeline = host.create_pipeline(f"e2e-stall-{uuid.uuid4().hex[:6]}", config, RUNNER_ID)
    started = time.monotonic()
    chat = ws_chat(host, pipeline, "hello", stream=stream)
    elapsed = time.monotonic() - started

    assert_partial_answer_kept(chat, streamed=dify.answer_tokens[0])
    assert elapsed < 20, f"the stalled answer took {elapsed:.0f}s to end (timeout 6, idle-timeout 2)"
    assert API_KEY not in json.dumps(chat.frames)

    failure = recorded_failure(host, host.finished_run(chat.conversation_id))
    assert (failure.code, failure.retryable) == ("upstream.timeout", True), failure


def test_a_run_that_reaches_its_time_limit_keeps_its_partial_answer_after_the_host_deadline(
        host: Host, dify: FakeDify) -> None:
    """Issue 34 item 1: the upstream stalls until the run's total timeout (no idle-timeout) and its stop
    call hangs. The chat keeps the partial answer and its note: listening on after the final frame past
    the host's own deadline, LangBot never replaces the bubble with its generic failure line."""
    dify.fault = "stall"
    dify.stop_delay = 12.0  # longer than the runner waits for it (CANCEL_GRACE)
    try:
        config = dify_config(dify, timeout=8)
        pipeline = host.create_pipeline(f"e2e-deadline-{uuid.uuid4().hex[:6]}", config, RUNNER_ID)
        started = time.monotonic()
        chat = ws_chat(host, pipeline, "hello", timeout=40, settle=4.0)  # 4 s on after the final frame
        assert time.monotonic() - started > 8, "the chat was read past the host's deadline"
        assert_partial_answer_kept(chat, streamed=dify.answer_tokens[0])
        failure = recorded_failure(host, host.finished_run(chat.conversation_id))
        assert failure.code == "upstream.timeout", failure
        assert dify.stopped_tasks or _eventually(lambda: bool(dify.stopped_tasks)), "Dify was told to stop"
    finally:
        dify.stop_delay = 0.0


def form_label(key: str, locale: str) -> str:
    """What the runner form (as LangBot renders it from the YAML) calls ``key``."""
    (item,) = [i for i in PLUGIN.config_items if i["name"] == key]
    return str(item["label"][locale])


def test_a_person_writing_chinese_reads_the_plugins_own_words_in_chinese(host: Host, dify: FakeDify) -> None:
    """Issue 34 item 2, through LangBot's websocket chat: a failure explained, a cut-off answer's note
    and the new-conversation notice, each in Chinese for a Chinese message (the setting named by the
    form's Chinese label); the same pipeline answers an English message in English."""
    nokey = host.create_pipeline(f"e2e-zh-nokey-{uuid.uuid4().hex[:6]}", dify_config(dify, **{"api-key": ""}),
                                 RUNNER_ID)
    chat = ws_chat(host, nokey, "你好，请介绍一下你自己")
    assert_failure_explained(chat, must_name=form_label("api-key", "zh_Hans"))
    content = chat.last_shown()["content"]
    assert "设置" in content and "settings" not in content and "api-key" not in content, content
    english = ws_chat(host, nokey, "hello, who are you?")
    assert_failure_explained(english, must_name=form_label("api-key", "en_US"))
    assert "settings" in english.last_shown()["content"]

    # a new conversation because Dify lost the stored one: the notice before the answer
    pipeline = host.create_pipeline(f"e2e-zh-{uuid.uuid4().hex[:6]}", dify_config(dify), RUNNER_ID)
    first, second = ws_turns(host, pipeline, ["你好", "我们继续刚才的话题"],
                             between=lambda _i: dify.forget_conversations())
    assert_chat_ends_with_own_text(first)
    shown = assert_chat_ends_with_own_text(second)
    assert shown.startswith("（之前的会话无法继续，这条回复开始了一段新的会话。）"), shown

    # a stalled answer cut off by idle-timeout: the note after the partial answer
    dify.fault = "stall"
    try:
        stalled = host.create_pipeline(f"e2e-zh-stall-{uuid.uuid4().hex[:6]}", dify_config(
            dify, timeout=6, **{"advanced-settings": True, "idle-timeout": 2}), RUNNER_ID)
        chat = ws_chat(host, stalled, "请写一段总结")
    finally:
        dify.fault = None
    assert_partial_answer_kept(chat, streamed=dify.answer_tokens[0])
    assert "（此回答不完整" in chat.last_shown()["content"]


def _eventually(check: Any, seconds: float = 5.0) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "no-stream"])
def test_pipeline_chat_explains_a_missing_api_key(host: Host, dify: FakeDify, stream: bool) -> None:
    # the WebUI and the API both let an owner save the pipeline with the key left empty
    pipeline = host.create_pipeline(f"e2e-nokey-{uuid.uuid4().hex[:6]}", dify_config(dify, **{"api-key": ""}),
                                    RUNNER_ID)
    chat = ws_chat(host, pipeline, "hello", stream=stream)

    assert_failure_explained(chat, must_name=form_label("api-key", "en_US"))
    assert "api-key" not in chat.last_shown()["content"], "the chat names the setting as the form does"
    assert not dify.find_requests("POST", "/v1/chat-messages"), "a run without an api-key still called Dify"

    failure = recorded_failure(host, host.finished_run(chat.conversation_id))
    assert (failure.code, failure.retryable) == ("config.missing", False), failure


def test_agent_debug_explains_a_missing_api_key(host: Host, dify: FakeDify) -> None:
    agent = host.create_agent("e2e-dify-nokey", dify_config(dify, **{"api-key": ""}), RUNNER_ID)

    # POST /debug: a failed run is HTTP 422 {code, msg}; msg is the runner's run.failed error
    conversation = f"e2e-nokey-{uuid.uuid4().hex[:8]}"
    resp = host.debug(agent, "hello", conversation)
    assert resp.status_code == 422, resp.text
    body = resp.json()
    assert body["code"] == "config.missing", body
    assert "api-key" in body["msg"], body

    # /debug/stream (the WebUI's agent debug panel): the runner's messages, then an error bubble
    frames = host.debug_stream(agent, "hello", f"e2e-nokey-{uuid.uuid4().hex[:8]}")
    assert frames and frames[-1]["kind"] == "error", frames
    assert frames[-1]["code"] == "config.missing", frames[-1]
    shown = [frames[-1]["msg"], *filter(None, map(frame_text, frames[:-1]))]
    assert any("api-key" in text for text in shown), shown
    assert not any(is_host_notice(text) for text in shown), shown
    assert not dify.find_requests("POST", "/v1/chat-messages")

    failure = recorded_failure(host, host.finished_run(conversation))
    assert (failure.status, failure.code, failure.retryable) == ("failed", "config.missing", False), failure


# --- steering: follow-ups sent during a run --------------------------------------------------------

PROBE = load_plugin(Path(__file__).with_name("steer_probe"))  # a test-only multi-turn runner on the kit




@pytest.fixture(scope="module")
def probe(host: Host) -> str:
    host.ensure_plugin(PROBE)
    return PROBE.runner_id



@pytest.mark.parametrize("mode", ["next-turn", "interrupt"])
def test_follow_ups_during_a_run_each_get_their_own_reply(host: Host, probe: str, mode: str) -> None:
    """A websocket chat sends more messages while the first run is answering: the host claims them
    for that run (steering), the runner answers them in the same run, and the chat shows one reply
    per turn. next-turn: the two follow-ups that came during turn 0 are answered together in turn 1;
    interrupt: the follow-up stops turn 0 at once (its partial reply says so) and is answered."""
    pipeline = host.create_pipeline(f"steer-{mode}", {"turn-seconds": 3, "follow-up-mode": mode}, runner_id=probe)
    sends = [(0.0, "first question"), (1.0, "second question")]
    if mode == "next-turn":
        sends.append((0.2, "third question"))
    start = time.monotonic()
    chat = ws_conversation(host, pipeline, sends)
    took = time.monotonic() - start
    shown = [r["content"] for r in chat.shown()]
    say(f"steering ({mode}): {len(shown)} replies in {took:.1f}s: {shown}")
    rows = host.runs(chat.conversation_id)
    assert len(rows) == 1, f"the follow-ups were claimed by the running run, not new runs: {rows}"
    run = host.finished_run(chat.conversation_id)
    assert run["status"] == "completed", run
    assert len(shown) == 2, f"one reply per turn: {shown}"
    if mode == "next-turn":
        assert shown == ["reply 0: first question", "reply 1: second question\n\nthird question"], shown
    else:
        note = "(Stopped here to take your next message.)"
        assert shown[0].endswith(note), shown
        partial = shown[0].removesuffix(note).strip()
        # cut wherever the follow-up arrived (a word or two in): a strict prefix of the full reply
        assert partial and "reply 0: first question".startswith(partial) and partial != "reply 0: first question", \
            shown
        assert shown[1] == "reply 1: second question", shown
    inputs = run_inputs(host, run["run_id"])
    assert "steering.injected" in json.dumps(inputs), inputs
    assert "steering.dropped" not in json.dumps(inputs), inputs
    types = [e["type"] for e in host.run_events(run["run_id"])]
    assert types.count("message.completed") == 2 and types[-1] == "run.completed", types


# --- coding agents on the real host: follow-ups go to the live agent process -----------------------

CODING = {  # plugin -> (attribute of CodingCLIs with the real CLI, model API flavour)
    "claude-code-agent": ("claude", "anthropic"),
    "codex-agent": ("codex", "openai"),
}


@pytest.fixture(scope="module")
def coding_plugins(host: Host) -> dict[str, PluginInfo]:
    installed = {}
    for name in CODING:
        info = find(name)
        host.ensure_plugin(info)
        installed[name] = info
    return installed


def _real_cli(plugin: str) -> str:
    from tests.real_peers.coding_clis import provide_coding_clis

    return str(getattr(provide_coding_clis(), CODING[plugin][0]))  # skips, saying why, when npm cannot install it


@pytest.mark.parametrize("cli", ["real"])  # the scripted CLIs: test_follow_up in test_plugins_e2e.py
@pytest.mark.parametrize("plugin", sorted(CODING))
def test_coding_agent_answers_a_follow_up_in_the_same_live_process(
    host: Host, coding_plugins: dict[str, PluginInfo], tmp_path: Path, plugin: str, cli: str, journey: Any
) -> None:
    """A coding agent's real CLI (when npm can install it) behind a pipeline: a message sent while
    it answers is claimed by the running run and answered by the same agent process, each with its
    own reply; nothing is dropped and no process survives the run."""
    journey(plugin, "follow_up_real_cli")
    from tests.fakes.model_api import FakeModelAPI

    info = coding_plugins[plugin]
    executable = _real_cli(plugin)
    workspace = tmp_path / "workspace"
    with FakeModelAPI() as api:
        api.answer_tokens = ["Working ", "on ", "it ", "now."]
        # the first answer takes ~6 s, so the follow-up (sent 1.2 s in) reaches the run while it works
        # even when the test machine is busy (at 0.6 s a token, a loaded run once ended first)
        api.token_delay = 1.5
        base = api.anthropic_base_url() if CODING[plugin][1] == "anthropic" else api.openai_base_url()
        config = {"executable": executable, "base-url": base, "api-key": api.api_key, "model": "fake-model",
                  "workspace": str(workspace), "permission-mode": "read-only", "timeout": 120,
                  "advanced-settings": True, "max-retries": 0}
        if plugin == "claude-code-agent":
            del config["model"]
        pipeline = host.create_pipeline(f"{plugin}-steer-{cli}", config, runner_id=info.runner_id)
        chat = ws_conversation(host, pipeline, [(0.0, "first question"), (1.2, "second question")], timeout=90)
        shown = [r["content"] for r in chat.shown()]
        say(f"{plugin} ({cli}) replies: {shown}")
        requests = api.model_requests()
    run = host.finished_run(chat.conversation_id)
    assert run["status"] == "completed", run
    assert len(host.runs(chat.conversation_id)) == 1
    assert shown == ["Working on it now.", "Working on it now."], shown
    bodies = [json.dumps(r.body, ensure_ascii=False) for r in requests]
    assert any("second question" in b and "first question" in b for b in bodies), \
        "the follow-up went to the same agent session (its history holds the first question)"
    inputs = json.dumps(run_inputs(host, run["run_id"]))
    assert "steering.injected" in inputs and "steering.dropped" not in inputs
    events = [e["type"] for e in host.run_events(run["run_id"])]
    assert events.count("message.completed") == 2 and events[-1] == "run.completed", events
    wait_for("every process working in the agent's workspace to end", lambda: not working_in(workspace), 10,
             interval=0.2)
