"""Every HTTP plugin inside the real LangBot 4.11.2 (issue 13, first part): one entry per plugin,
taken from the contract suite's ``PluginCase`` (tests/contract/case_*.py), so a new plugin is
covered here as soon as it has its contract case.

For each plugin, against its fake platform on loopback, through the host's HTTP and websocket APIs:
the ``.lbpkg`` from ``runners build`` installs and the runner shows its whole config form with
labels in both languages; a pipeline websocket chat streams the answer and its second message
continues the upstream conversation; agent debug answers; a wrong key is our ``upstream.auth`` with
a clear message; an upstream conversation deleted between two messages recovers with the notice;
a mid-stream stall ends with the partial answer and its note. A table plugin x check is printed at
the end of the module (``-s`` shows it).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from runners_cli.plugins import find
from tests.contract.cases import CASES, PluginCase
from tests.e2e.harness import (
    Host,
    assert_partial_answer_kept,
    recorded_failure,
    say,
    ws_turns,
)

pytestmark = [pytest.mark.slow, pytest.mark.langbot, pytest.mark.timeout(600)]

TOKENS = ["Hello ", "from ", "the ", "platform."]
ANSWER = "".join(TOKENS)


def _http_cases() -> list[PluginCase]:
    """One case per HTTP plugin: coding agents (an agent process) and LocalAgent (LangBot's own
    models) have their own e2e modules."""
    seen: dict[str, PluginCase] = {}
    for case in CASES:
        if case.agent_pids is None and case.prepare_host is None and case.plugin not in seen:
            seen[case.plugin] = case
    return list(seen.values())


HTTP = _http_cases()
RESULTS: dict[str, dict[str, str]] = {}  # plugin -> check -> pass/fail, printed at the end
TIMES: dict[str, dict[str, float]] = {}


@pytest.fixture(scope="module", autouse=True)
def _table() -> Iterator[None]:
    yield
    checks = list(dict.fromkeys(c for r in RESULTS.values() for c in r))
    if not checks:
        return
    width = max(len(p) for p in RESULTS)
    say("plugin x check (real LangBot 4.11.2):")
    say(" ".join([" " * width, *(c[:12].ljust(12) for c in checks)]))
    for plugin, row in sorted(RESULTS.items()):
        say(" ".join([plugin.ljust(width), *(row.get(c, "-").ljust(12) for c in checks)]))
    for plugin, t in sorted(TIMES.items()):
        say(f"{plugin}: " + ", ".join(f"{k} {v:.2f}s" for k, v in t.items()))


@pytest.fixture(params=HTTP, ids=[c.plugin for c in HTTP])
def case(request: pytest.FixtureRequest) -> Iterator[PluginCase]:
    c: PluginCase = request.param
    yield c


@pytest.fixture
def server(case: PluginCase) -> Iterator[Any]:
    srv = case.start_server()
    try:
        yield srv
    finally:
        srv.stop()


_INSTALLED: set[str] = set()


@pytest.fixture
def host(langbot: Host, case: PluginCase) -> Host:
    if case.plugin not in _INSTALLED:
        took = langbot.install_plugin(find(case.plugin))
        TIMES.setdefault(case.plugin, {})["install"] = took
        _INSTALLED.add(case.plugin)
    return langbot


@pytest.fixture
def check(request: pytest.FixtureRequest, case: PluginCase) -> Iterator[None]:
    """Records this test's outcome in the table under its check name."""
    name = request.node.originalname.removeprefix("test_")
    yield
    rep = getattr(request.node, "e2e_report_call", None)
    outcome = "skip" if rep is not None and rep.skipped else "pass" if rep is not None and rep.passed else "FAIL"
    RESULTS.setdefault(case.plugin, {})[name] = outcome


def _config(case: PluginCase, srv: Any, **extra: Any) -> dict[str, Any]:
    return {**case.config(srv), **extra}


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
    TIMES.setdefault(case.plugin, {}).update({"first text": first.first_text_after() or -1,
                                               "message": first.final_after() or -1,
                                               "message 2": second.final_after() or -1})
    if case.seen is not None:
        seen = case.seen(server)
        # the first asks for a new conversation (or names the thread it created for it), the second continues it
        assert len(seen) == 2 and seen[1].conversation and seen[0].conversation in ("", seen[1].conversation), seen
    for secret in _secrets(case, server):
        assert secret not in json.dumps(first.frames + second.frames)


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
    cfg = {k: (v.replace(case.key, wrong) if isinstance(v, str) else v) for k, v in case.config(server).items()}
    assert cfg != case.config(server), f"{case.plugin}'s config does not carry its key"
    agent = host.create_agent(_name(case, "key"), cfg, find(case.plugin).runner_id)
    resp = host.debug(agent, "hello", f"e2e-{uuid.uuid4().hex[:8]}")
    assert resp.status_code == 422, resp.text
    body = resp.json()
    assert body["code"] == "upstream.auth", body
    assert wrong not in resp.text and case.key not in resp.text


def test_session_gone(case: PluginCase, server: Any, host: Host, check: None) -> None:
    """The upstream conversation deleted between two messages: the second recovers with the notice."""
    if case.forget_sessions is None:
        pytest.skip(f"{case.plugin} keeps no upstream conversation")
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
