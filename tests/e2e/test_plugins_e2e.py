"""Every plugin inside the real LangBot 4.11.2 (issue 13): one entry per plugin, taken from the
contract suite's ``PluginCase`` (tests/contract/case_*.py), so a new plugin is covered here as soon
as it has its contract case; ``EXPECTED`` names them all, so a case that goes missing fails.

For each plugin (the HTTP platforms, and the coding agents driving their scripted CLIs over the fake
model API), against its fake on loopback, through the host's HTTP and websocket APIs: the ``.lbpkg``
from ``runners build`` installs and the runner shows its whole config form with labels in both
languages; a pipeline websocket chat streams the answer, its second message continues the upstream
conversation and its usage reaches the run ledger; agent debug answers; a wrong key is our
``upstream.auth`` with a clear message; an upstream conversation deleted between two messages
recovers with the notice; a mid-stream stall ends with the partial answer and its note; the owner's
reset starts a new upstream conversation; a host cancel stops the upstream work. The session's
plugin x check table (conftest.py) is printed at the end of the run.
"""

from __future__ import annotations

import json
import re
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from runner_kit.process import data_root
from runners_cli.plugins import find
from tests.contract.cases import CASES, PluginCase
from tests.e2e.harness import (
    Host,
    assert_partial_answer_kept,
    frame_text,
    recorded_failure,
    run_inputs,
    sandbox_grants,
    say,
    timing,
    wait_for,
    working_in,
    ws_conversation,
    ws_turns,
)

pytestmark = [pytest.mark.slow, pytest.mark.langbot, pytest.mark.timeout(600)]

TOKENS = ["Hello ", "from ", "the ", "platform."]
ANSWER = "".join(TOKENS)


def _cases() -> list[PluginCase]:
    """One case per plugin, HTTP platforms and coding agents (an agent CLI over the fake model API).
    LocalAgent runs on models registered in LangBot and has its own module (test_local_agent_e2e.py)."""
    seen: dict[str, PluginCase] = {}
    for case in CASES:
        if case.prepare_host is None and case.plugin not in seen:
            seen[case.plugin] = case
    return list(seen.values())


PLUGINS = _cases()
#: every plugin of the repository but LocalAgent, written out so a plugin whose contract case goes
#: missing fails here instead of silently leaving this suite
EXPECTED = ["acp-agent-runner", "claude-code-agent", "codex-agent", "coze-agent", "dashscope-agent",
            "deerflow-agent", "dify-agent", "langflow-agent", "licos-agent", "n8n-agent", "tbox-agent",
            "weknora-agent"]
#: plugins whose platform reports token usage on a chat answer (the fakes do as the platform does):
#: the usage must reach the run ledger. Langflow, DeerFlow and LICOS streams carry none.
USAGE = {"coze-agent", "dashscope-agent", "dify-agent", "n8n-agent", "tbox-agent", "weknora-agent"}


def test_every_plugin_has_a_row() -> None:
    assert sorted(c.plugin for c in PLUGINS) == EXPECTED


@pytest.fixture(params=PLUGINS, ids=[c.plugin for c in PLUGINS])
def case(request: pytest.FixtureRequest) -> Iterator[PluginCase]:
    c: PluginCase = request.param
    yield c


#: where a coding agent's runner keeps its agents' HOMEs inside LangBot: the runtime starts plugin
#: workers with an empty environment
AGENT_DATA = data_root({})


@pytest.fixture
def server(case: PluginCase) -> Iterator[Any]:
    srv = case.start_server()
    made: Callable[[], set[Path]] = set
    if hasattr(srv, "homes"):
        # a coding agent's fake finds the runner's HOMEs (to forget its sessions) under its data_dir;
        # inside LangBot they are under AGENT_DATA, shared with any other local use: the hooks see,
        # and the test removes afterwards, only the HOMEs this test made
        before = set(AGENT_DATA.glob("*/homes/*"))
        list_homes = srv.homes
        srv.data_dir = AGENT_DATA
        srv.homes = lambda platform_dir: [h for h in list_homes(platform_dir) if h not in before]

        def made() -> set[Path]:
            return set(AGENT_DATA.glob("*/homes/*")) - before
    try:
        yield srv
    finally:
        srv.stop()
        for home in made():
            shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def host(langbot: Host, case: PluginCase) -> Host:
    timing(case.plugin, install=langbot.ensure_plugin(find(case.plugin)))
    return langbot


@pytest.fixture
def check(request: pytest.FixtureRequest, case: PluginCase, journey: Any) -> None:
    """Records this test's outcome in the session's table under its check name."""
    journey(case.plugin, request.node.originalname.removeprefix("test_"))


def _config(case: PluginCase, srv: Any, **extra: Any) -> dict[str, Any]:
    return {**case.config(srv), **sandbox_grants(find(case.plugin)), **extra}


def _secrets(case: PluginCase, srv: Any) -> list[str]:
    return case.secrets(srv) if case.secrets else [case.key] if case.key else []


def _name(case: PluginCase, what: str) -> str:
    return f"e2e-{case.plugin}-{what}-{uuid.uuid4().hex[:6]}"


# --- the checks ---------------------------------------------------------------------------------------


def test_form(case: PluginCase, host: Host, check: None) -> None:
    """The runner is listed with every config field of its manifest, each labelled in both languages."""
    plugin = find(case.plugin)
    stage = host.runner_stage(plugin.runner_id)
    keys = [item["id"].removeprefix(plugin.runner_id + ".") for item in stage["config"]]
    assert keys == [item["name"] for item in plugin.config_items]
    for item in stage["config"]:
        label = item.get("label") or {}
        assert label.get("en_US") and label.get("zh_Hans"), f"{item['id']} is not labelled in both languages: {label}"


def test_chat(case: PluginCase, server: Any, host: Host, check: None) -> None:
    """A websocket chat streams the answer; the second message continues the upstream conversation."""
    case.answer(server, TOKENS, 0.05)
    pipeline = host.create_pipeline(_name(case, "chat"), _config(case, server), find(case.plugin).runner_id)
    first, second = ws_turns(host, pipeline, ["hello", "and again"], timeout=60)
    for chat in (first, second):
        final = chat.final()
        assert final is not None and final["content"] == ANSWER, chat.shown()
    growing = [r["content"] for r in first.replies if r.get("content")]
    assert len(set(growing)) > 1, f"the answer arrived in one piece, not streamed: {growing}"
    timing(case.plugin, first_text=first.first_text_after(), message=first.final_after(),
           message_2=second.final_after())
    if case.seen is not None:
        seen = case.seen(server)
        # the first asks for a new conversation (or names the thread it created for it), the second continues it
        assert len(seen) == 2 and seen[1].conversation and seen[0].conversation in ("", seen[1].conversation), seen
    for secret in _secrets(case, server):
        assert secret not in json.dumps(first.frames + second.frames)
    # usage, where the platform reports it, reaches the run ledger
    runs = host.runs(first.conversation_id)
    assert len(runs) == 2 and all(r["status"] == "completed" for r in runs), runs
    usage = host.run_usage(runs[0])
    if case.plugin in USAGE:
        assert usage and usage.get("total_tokens", 0) > 0, f"no usage in the run ledger: {usage}"


def test_debug(case: PluginCase, server: Any, host: Host, check: None) -> None:
    """The agent debug API answers."""
    case.answer(server, TOKENS, 0.0)
    agent = host.create_agent(_name(case, "debug"), _config(case, server), find(case.plugin).runner_id)
    resp = host.debug(agent, "hello", f"e2e-{uuid.uuid4().hex[:8]}")
    assert resp.status_code == 200, resp.text
    assert resp.json()["data"]["final_text"] == ANSWER


def test_wrong_key(case: PluginCase, server: Any, host: Host, check: None) -> None:
    """A key the platform refuses is our upstream.auth, with a message that says so and no key in it."""
    if not case.key:
        pytest.skip(f"{case.plugin}'s contract config has no key")
    if getattr(server, "auth_disabled", False):  # a DeerFlow without auth (its default) accepts any key
        server.auth_disabled = False
        server.api_keys.add(case.key)
    wrong = "wrong-" + uuid.uuid4().hex
    # the key may sit inside a value ("Bearer <key>" in DeerFlow's auth-header)
    cfg = {k: (v.replace(case.key, wrong) if isinstance(v, str) else v) for k, v in _config(case, server).items()}
    assert cfg != case.config(server), f"{case.plugin}'s config does not carry its key"
    agent = host.create_agent(_name(case, "key"), cfg, find(case.plugin).runner_id)
    resp = host.debug(agent, "hello", f"e2e-{uuid.uuid4().hex[:8]}")
    assert resp.status_code == 422, resp.text
    body = resp.json()
    assert body["code"] == "upstream.auth", body
    assert wrong not in resp.text and case.key not in resp.text
    # what the debug panel shows the owner: the credential was refused, and what to change
    assert re.search(r"key|token|credential|auth", body["msg"], re.IGNORECASE), body
    say(f"{case.plugin} wrong key: {body['msg']}")


def test_session_gone(case: PluginCase, server: Any, host: Host, check: None) -> None:
    """The upstream conversation deleted between two messages: the second recovers with the notice."""
    if case.forget_sessions is None:
        pytest.skip(f"{case.plugin}'s contract case has no forget_sessions hook (its fake cannot drop a conversation)")
    forget = case.forget_sessions
    case.answer(server, TOKENS, 0.0)
    cfg = _config(case, server, **{"advanced-settings": True, "session-reset-notice": True})
    pipeline = host.create_pipeline(_name(case, "gone"), cfg, find(case.plugin).runner_id)
    first, second = ws_turns(host, pipeline, ["hello", "hello again"], timeout=60, between=lambda _i: forget(server))
    assert first.final() is not None and first.final()["content"] == ANSWER, first.shown()
    final = second.final()
    assert final is not None, second.shown()
    line, _, rest = final["content"].partition("\n\n")
    assert rest == ANSWER and "new" in line.lower(), final["content"]


def test_stall(case: PluginCase, server: Any, host: Host, check: None) -> None:
    """A mid-stream stall ends with the partial answer and its note; the ledger has upstream.timeout."""
    if case.stall is None:
        pytest.skip(f"{case.plugin} has no stall hook")
    case.stall(server, False)
    cfg = _config(case, server, timeout=6, **{"advanced-settings": True, "idle-timeout": 2})
    pipeline = host.create_pipeline(_name(case, "stall"), cfg, find(case.plugin).runner_id)
    started = time.monotonic()
    (chat,) = ws_turns(host, pipeline, ["hello"], timeout=40)
    streamed = next((r["content"] for r in chat.replies if r.get("content") and not r.get("is_final")), None)
    assert streamed, f"nothing was streamed before the stall: {chat.replies}"
    assert_partial_answer_kept(chat, streamed=streamed)
    assert time.monotonic() - started < 25
    failure = recorded_failure(host, host.finished_run(chat.conversation_id))
    assert failure.code in ("upstream.timeout", "upstream.unavailable"), failure


def test_reset(case: PluginCase, server: Any, host: Host, check: None) -> None:
    """A bot owner resets the conversation's context (the WebUI's monitoring page): the next message
    starts a new upstream conversation, on the same chat, and where the platform can end one the old
    one is ended (issue 33 item 15)."""
    if case.seen is None:
        pytest.skip(f"{case.plugin}'s contract case cannot see the upstream requests (no seen hook)")
    case.answer(server, TOKENS, 0.0)
    pipeline = host.create_pipeline(_name(case, "reset"), _config(case, server), find(case.plugin).runner_id)
    conversation: list[str] = []

    def reset_before_third(i: int) -> None:
        if i == 2:
            host.reset_context(conversation[0])

    chats = ws_turns(host, pipeline, ["hello", "and again", "after the reset"], timeout=60,
                     between=reset_before_third, on_connect=conversation.append)
    for chat in chats:
        final = chat.final()
        assert final is not None and final["content"] == ANSWER, chat.shown()
    seen = case.seen(server)
    assert len(seen) == 3, seen
    assert seen[1].conversation and seen[0].conversation in ("", seen[1].conversation), \
        f"the second message did not continue the conversation: {seen}"
    assert seen[2].conversation != seen[1].conversation, f"the reset did not start a new conversation: {seen}"
    if case.ended is not None:  # the platform can end one: the conversation the reset left is ended, once
        wait_for("the old upstream conversation to be ended", lambda: case.ended(server) == [seen[1].conversation],
                 8, interval=0.1)


def test_cancel(case: PluginCase, server: Any, host: Host, check: None) -> None:
    """The host cancels a run mid-stream (the agent debug panel closed: LangBot cancels the run of a
    consumer that went away): the ledger says cancelled and the upstream work stops, through the
    platform's stop API where it has one, else by closing the stream."""
    tokens = [f"t{i} " for i in range(40)]
    case.answer(server, tokens, 0.25)  # 10 s of answer
    plugin = find(case.plugin)
    agent = host.create_agent(_name(case, "cancel"), _config(case, server), plugin.runner_id)
    conversation = f"e2e-cancel-{uuid.uuid4().hex[:8]}"
    started = time.monotonic()

    frames = host.debug_stream(agent, "hello", conversation, until=frame_text)
    assert frames and frames[-1]["kind"] == "result" and frame_text(frames[-1]), \
        f"the stream ended before any text: {frames}"
    run = host.finished_run(conversation)
    assert (run["status"], run["status_reason"]) == ("cancelled", "consumer_cancelled"), run
    if plugin.capabilities.get("interrupt") and case.cancel_seen is not None:
        stop_seen = case.cancel_seen
        what = "the platform's stop call"
    else:
        def stop_seen(srv: Any) -> bool:
            return case.open_connections(srv) == 0
        what = "the answer stream to close"
    wait_for(what, lambda: stop_seen(server), 8, interval=0.1)
    took = time.monotonic() - started
    timing(case.plugin, cancel=took)
    assert took < 8, f"the upstream answer was not stopped early ({took:.1f}s; it lasts 10 s)"


def test_follow_up(case: PluginCase, server: Any, host: Host, check: None, tmp_path: Path) -> None:
    """A message sent while a steering runner (a coding agent) answers is claimed by the running run
    and answered in it by the same agent process, each with its own reply; nothing is dropped, and
    no process is left working in the agent's workspace afterwards."""
    plugin = find(case.plugin)
    if not plugin.capabilities.get("steering"):
        pytest.skip(f"{case.plugin} does not declare steering: a message sent during a run gets its own run")
    case.answer(server, ["Working ", "on ", "it ", "now."], 0.6)
    workspace = tmp_path / "workspace"
    pipeline = host.create_pipeline(_name(case, "steer"), _config(case, server, workspace=str(workspace)),
                                    plugin.runner_id)
    chat = ws_conversation(host, pipeline, [(0.0, "first question"), (1.2, "second question")], timeout=90)
    shown = [r["content"] for r in chat.shown()]
    run = host.finished_run(chat.conversation_id)
    assert run["status"] == "completed", run
    assert len(host.runs(chat.conversation_id)) == 1, "the follow-up started a run of its own"
    assert shown == ["Working on it now.", "Working on it now."], shown
    inputs = json.dumps(run_inputs(host, run["run_id"]))
    assert "steering.injected" in inputs and "steering.dropped" not in inputs, inputs
    if case.agent_pids is not None:
        pids = case.agent_pids(server)
        assert len(pids) >= 2 and len(set(pids)) == 1, f"both turns in one live agent process: {pids}"
    wait_for("every process working in the agent's workspace to end", lambda: not working_in(workspace), 10,
             interval=0.2)
