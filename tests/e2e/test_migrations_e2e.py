"""The legacy runners LangBot 4.11.2 migrates to our plugins, inside the real host (issue 13).

For each legacy runner: a pipeline with a realistic 4.10 config for that runner, written straight
into LangBot's SQLite database (the API refuses legacy configs), previews ``ready`` and executes to
``migrated`` through the migration API (host-contract.md section 5); the migrated runner config holds
only keys the plugin declares, with the values the host's planner writes; then the migrated pipeline
answers two messages over the WebUI websocket against the plugin's fake platform on loopback. The
legacy identities hold: ``legacy-session`` (Dify, Coze, n8n) sends the 4.10 user string
``<launcher_type>_<launcher_id>`` upstream, ``legacy-bot`` (Tbox) the bot's id.

``local-agent`` (the ninth) needs models registered in LangBot and lives in test_local_agent_e2e.py.
DashScope and Tbox had no address field in 4.10 (they always called the public service), so after
the migration those two pipelines get one change, ``base-url`` pointed at the loopback fake, made
through the pipeline API as an owner would in the WebUI; everything else is as migrated.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from runners_cli.plugins import find
from tests.contract.cases import CASES, PluginCase
from tests.e2e.harness import WEBSOCKET_BOT, Host, timing, ws_turns

pytestmark = [pytest.mark.slow, pytest.mark.langbot, pytest.mark.timeout(600)]

TOKENS = ["Hello ", "from ", "the ", "migrated ", "pipeline."]


@dataclass(frozen=True)
class Legacy:
    """One legacy runner: its 4.10 config against the fake, and what the migration must write."""

    runner: str  # the 4.10 runner name (``ai.runner.runner``)
    plugin: str  # the plugin LangBot migrates it to
    section: Callable[[Any, str], dict[str, Any]]  # (fake, key) -> the 4.10 ``ai.<runner>`` section
    expect: dict[str, Any]  # keys of the migrated runner config, with the values the planner writes
    user: str | None = None  # "session": the 4.10 user string upstream; "bot": the bot id
    redirect: str | None = None  # the address key an owner sets after migrating (none in 4.10)
    remove_think: bool = False  # output.misc.remove-think of the legacy pipeline


LEGACY = [
    Legacy("dify-service-api", "dify-agent",
           lambda srv, key: {"base-url": srv.base_url, "api-key": key, "app-type": "chat",
                             "base-prompt": "Describe the file.", "timeout": 120},
           # the planner forces Dify's timeout to 30 and copies remove-think from the output stage
           {"app-type": "chat", "timeout": 30, "remove-think": True, "user-id-source": "legacy-session"},
           user="session", remove_think=True),
    Legacy("coze-api", "coze-agent",
           lambda srv, key: {"api-key": key, "bot-id": "7400000000000000042", "api-base": srv.base_url,
                             "timeout": 120.5, "auto_save_history": True},  # the underscore alias of 4.10
           {"bot-id": "7400000000000000042", "timeout": 120.5, "auto-save-history": True,
            "user-id-source": "legacy-session"},
           user="session"),
    Legacy("dashscope-app-api", "dashscope-agent",
           lambda srv, key: {"app-type": "agent", "api-key": key, "app-id": "app-contract",
                             "references_quote": "参考资料来自:"},
           {"app-type": "agent", "app-id": "app-contract", "references_quote": "参考资料来自:", "timeout": 120},
           redirect="base-url"),
    Legacy("n8n-service-api", "n8n-agent",
           lambda srv, key: {"webhook-url": srv.webhook_url, "auth-type": "header", "header-name": "X-N8N-Key",
                             "header-value": key, "timeout": 120, "output-key": "response",
                             "jwt-algorithm": "HS256", "basic-username": "", "basic-password": "",
                             "jwt-secret": ""},
           {"auth-type": "header", "header-name": "X-N8N-Key", "output-key": "response", "basic-encoding": "latin1",
            "timeout": 120, "user-id-source": "legacy-session"},
           user="session"),
    Legacy("langflow-api", "langflow-agent",
           lambda srv, key: {"base-url": srv.base_url, "api-key": key, "flow-id": srv.flow_id,
                             "input_type": "chat", "output_type": "chat", "tweaks": "{}"},
           {"input-type": "chat", "output-type": "chat", "tweaks": {}}),  # the JSON string becomes a dict
    Legacy("deerflow-api", "deerflow-agent",
           lambda srv, key: {"api-base": srv.base_url, "api-key": "", "auth-header": f"Bearer {key}",
                             "assistant-id": "lead_agent", "model-name": "", "thinking-enabled": False,
                             "plan-mode": False, "subagent-enabled": False, "max-concurrent-subagents": 3,
                             "timeout": 300, "recursion-limit": 1000},
           {"assistant-id": "lead_agent", "recursion-limit": 1000, "timeout": 300}),
    Legacy("tbox-app-api", "tbox-agent",
           lambda srv, key: {"api-key": key, "app-id": "202501010000000042"},
           {"app-id": "202501010000000042", "timeout": 120, "user-id-source": "legacy-bot"},
           user="bot", redirect="base-url"),
    Legacy("weknora-api", "weknora-agent",
           lambda srv, key: {"base-url": srv.base_url, "api-key": key, "app-type": "chat",
                             "agent-id": "builtin-quick-answer", "knowledge-base-ids": [],
                             "web-search-enabled": False, "timeout": 90, "base-prompt": "请回答用户的问题。"},
           {"app-type": "chat", "agent-id": "builtin-quick-answer", "knowledge-base-ids": [], "timeout": 90}),
]


def _case(plugin: str) -> PluginCase:
    return next(c for c in CASES if c.plugin == plugin)


@pytest.fixture(params=LEGACY, ids=[legacy.runner for legacy in LEGACY])
def legacy(request: pytest.FixtureRequest) -> Legacy:
    row: Legacy = request.param
    return row


@pytest.fixture
def server(legacy: Legacy) -> Iterator[Any]:
    srv = _case(legacy.plugin).start_server()
    try:
        yield srv
    finally:
        srv.stop()


def test_migrates_and_answers(langbot: Host, legacy: Legacy, server: Any, journey: Any) -> None:
    journey(legacy.plugin, "migration")
    case, plugin = _case(legacy.plugin), find(legacy.plugin)
    timing(legacy.plugin, install=langbot.ensure_plugin(plugin))
    assert case.key, f"{legacy.plugin}'s contract case has no key"
    ai = {"runner": {"runner": legacy.runner, "expire-time": 0}, legacy.runner: legacy.section(server, case.key)}
    pipeline = langbot.insert_legacy_pipeline(f"e2e-legacy-{legacy.runner}-{uuid.uuid4().hex[:6]}", ai,
                                              remove_think=legacy.remove_think)

    migration = langbot.migrate(pipeline)
    migrated = migration.runner_config(legacy.runner, plugin)
    assert {k: migrated.get(k) for k in legacy.expect} == legacy.expect, migrated
    assert case.key in json.dumps(migrated), "the migration lost the credential"
    if legacy.redirect:
        langbot.set_runner_config(pipeline, **{legacy.redirect: server.base_url})

    case.answer(server, TOKENS, 0.02)
    chats = ws_turns(langbot, pipeline, ["hi", "and again"], timeout=60)
    for chat in chats:
        final = chat.final()
        assert final is not None and final["content"] == "".join(TOKENS), chat.shown()
    timing(legacy.plugin, migrated_message=chats[0].final_after())
    runs = langbot.runs(chats[0].conversation_id)
    assert [r["status"] for r in runs] == ["completed", "completed"], runs
    assert all(r["runner_id"] == plugin.runner_id for r in runs), runs

    if case.seen is not None:
        seen = case.seen(server)
        assert len(seen) == 2, seen
        assert seen[1].conversation and seen[0].conversation in ("", seen[1].conversation), \
            f"the migrated pipeline did not continue the upstream conversation: {seen}"
        if legacy.user == "session":  # 4.10's {launcher_type}_{launcher_id}: a websocket chat is a person
            assert [s.user for s in seen] == [chats[0].conversation_id] * 2, seen
        elif legacy.user == "bot":
            assert [s.user for s in seen] == [WEBSOCKET_BOT] * 2, seen
