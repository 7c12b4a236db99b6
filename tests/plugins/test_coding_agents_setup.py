"""Issue 29, scenario 8: a coding-agent binding its owner never set up starts nothing.

LangBot 4.11.2 binds every new pipeline to the first runner it lists and stores that runner's YAML
defaults as its config (``PipelineService.get_default_pipeline_config``: each declared item's
``default``, ``None`` where the YAML has none); a config made another way may be empty. With the
whole collection installed the first runner was ACPRunner, and an untouched pipeline started
codex-acp (workspace-write) when someone wrote "hello". Each coding agent (ACP, Claude Code, Codex)
must answer such a binding with one line telling the owner what to do — no process started, no file
written — and still run once its owner has set it up.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runner_kit.config import NOT_SET_UP
from runner_kit.errors import RunnerError
from runner_kit.process import AgentProcess
from runners_cli.host import LocalHost
from runners_cli.plugins import find, load_runner_class
from tests.helpers import failure, final_text, make_runner, messages, rtype, run, terminal

AGENTS = {"acp-agent-runner": "the ACP coding agent", "claude-code-agent": "Claude Code", "codex-agent": "Codex"}
PLUGINS = list(AGENTS)
INFO = {plugin: find(plugin) for plugin in PLUGINS}  # (reading every plugin's manifests once, not per test)


def host_and_runner(plugin: str) -> tuple[LocalHost, Any]:
    host = LocalHost(runner_id=INFO[plugin].runner_id)
    return host, make_runner(INFO[plugin], host)


def stored_untouched(plugin: str, **former: Any) -> dict[str, Any]:
    """The runner config LangBot 4.11.2 stores for a new pipeline bound to ``plugin``: every
    declared key with its YAML default, ``None`` where there is none (``former`` replaces values
    with what an earlier version of the YAML declared)."""
    config = {item["name"]: item.get("default") for item in INFO[plugin].config_items}
    return {**config, **former}


def line(plugin: str) -> str:
    return NOT_SET_UP.format(agent=AGENTS[plugin])


@pytest.fixture(autouse=True)
def data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The runners' data directory (workspaces, private HOMEs); a run that wrote nothing leaves it absent."""
    path = tmp_path / "data"
    monkeypatch.setenv("RUNNER_KIT_DATA_DIR", str(path))
    return path


@pytest.fixture
def spawned(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Every agent process a run tries to start (none is started: the attempt fails the run)."""
    calls: list[list[str]] = []

    async def spawn(cls: Any, argv: list[str], *args: Any, **kwargs: Any) -> Any:
        calls.append(list(argv))
        raise RunnerError("process.not_found", "this test starts no agent")

    monkeypatch.setattr(AgentProcess, "spawn", classmethod(spawn))
    return calls


def schema_of(plugin: str) -> tuple[Any, Any]:
    cls = load_runner_class(INFO[plugin])
    return cls.adapter, cls.schema


# --- a binding nobody set up ----------------------------------------------------------------------


@pytest.mark.parametrize("surface", ["platform", "webui"])
@pytest.mark.parametrize("stored", ["yaml-defaults", "empty"])
@pytest.mark.parametrize("plugin", PLUGINS)
async def test_an_untouched_binding_starts_nothing_and_answers_one_line(plugin, stored, surface, spawned, data):
    host, runner = host_and_runner(plugin)
    config = stored_untouched(plugin) if stored == "yaml-defaults" else {}
    results = await run(runner, host, config=config, surface=surface)
    code, retryable, message = failure(results)
    assert (code, retryable) == ("config.missing", False)
    assert messages(results) == [line(plugin)], "the chat reads exactly the one line"
    assert "\n" not in line(plugin) and "choose and configure a runner" in line(plugin)
    assert message == line(plugin)  # the ledger (and agent debug's error) says the same
    assert spawned == [], "no agent process was started"
    assert not data.exists(), "no workspace, HOME or other file was written"
    if surface == "platform":  # a pipeline keeps the line in the chat: the run completes with the code
        assert terminal(results).data["finish_reason"] == "config.missing"


async def test_an_acp_pipeline_stored_by_the_older_plugin_with_codex_preselected_starts_nothing(spawned, data):
    """Up to 0.3.0 `provider` defaulted to `codex`: that is what every untouched pipeline holds."""
    host, runner = host_and_runner("acp-agent-runner")
    config = stored_untouched("acp-agent-runner", provider="codex")
    assert config["permission-mode"] == "workspace-write"
    results = await run(runner, host, config=config)
    assert failure(results)[0] == "config.missing"
    assert messages(results) == [line("acp-agent-runner")]
    assert spawned == [] and not data.exists()


@pytest.mark.parametrize(("plugin", "former"), [
    # issue 34 item 8: Claude Code's whose-session default went from the sender to the conversation,
    # as in ACP and Codex; and every notice from the English line to blank (the built-in line)
    ("claude-code-agent", {"user-id-source": "actor",
                           "session-reset-text": "(The previous conversation could not be continued, so this "
                                                 "reply starts a new one.)"}),
    ("codex-agent", {"session-reset-text": "(The previous conversation could not be continued, so this reply "
                                           "starts a new one.)"}),
])
async def test_a_binding_stored_by_the_older_plugin_is_still_untouched(plugin, former, spawned, data):
    host, runner = host_and_runner(plugin)
    config = stored_untouched(plugin, **former)
    assert any(config[k] != item.get("default") for item in INFO[plugin].config_items
               for k in former if item["name"] == k), "the form's default has changed since"
    results = await run(runner, host, config=config)
    assert failure(results)[0] == "config.missing"
    assert messages(results) == [line(plugin)]
    assert spawned == [] and not data.exists()


def test_the_acp_form_preselects_no_agent():
    (provider,) = [i for i in INFO["acp-agent-runner"].config_items if i["name"] == "provider"]
    assert provider.get("required") is True and provider.get("default") is None


# --- a binding its owner touched but left without a way to sign in -------------------------------


@pytest.mark.parametrize(("plugin", "config", "says"), [
    ("acp-agent-runner", {"provider": "claude-code"}, "claude-code-acp has nothing to sign in"),
    ("acp-agent-runner", {"provider": "codex", "permission-mode": "read-only"}, "set `api-key`"),
    ("claude-code-agent", {"base-url": "http://127.0.0.1:9"}, "api-key"),
    ("claude-code-agent", {"model": "sonnet", "api-key": "  "}, "api-key"),
    ("codex-agent", {"model": "gpt-5.1-codex"}, "api-key"),
])
async def test_a_touched_binding_without_a_credential_names_what_is_missing(plugin, config, says, spawned, data):
    host, runner = host_and_runner(plugin)
    results = await run(runner, host, config={**stored_untouched(plugin), **config})
    code, _, message = failure(results)
    assert code == "config.missing" and says in message
    (shown,) = messages(results)
    assert shown != line(plugin) and "settings" in shown
    assert spawned == [] and not data.exists()


# --- what counts as set up ------------------------------------------------------------------------


@pytest.mark.parametrize(("plugin", "config"), [
    ("acp-agent-runner", {"provider": "codex", "api-key": "sk-x"}),
    ("acp-agent-runner", {"provider": "gemini", "env": "GEMINI_API_KEY=g"}),
    ("acp-agent-runner", {"provider": "claude-code", "executable": "/opt/my-claude-acp"}),
    ("acp-agent-runner", {"provider": "custom", "command": "my-agent --acp"}),
    ("acp-agent-runner", {"provider": "opencode"}),  # opencode reads its own settings
    ("acp-agent-runner", {"provider": "codex", "advanced-settings": True, "auth-method": "chatgpt"}),
    ("claude-code-agent", {"api-key": "sk-ant-x"}),
    ("claude-code-agent", {"auth-token": "tok"}),
    ("claude-code-agent", {"advanced-settings": True, "env": "CLAUDE_CODE_OAUTH_TOKEN=oat"}),
    ("claude-code-agent", {"advanced-settings": True, "env": '{"CLAUDE_CODE_USE_BEDROCK": "1"}'}),
    ("codex-agent", {"api-key": "sk-x"}),
])
def test_what_an_owner_sets_up_passes_the_check(plugin, config):
    adapter, schema = schema_of(plugin)
    adapter.check_setup({**stored_untouched(plugin), **config}, schema)  # raises nothing


@pytest.mark.parametrize(("plugin", "config"), [
    # a credential in `env` counts only while the advanced settings (where `env` lives) are on
    ("claude-code-agent", {"advanced-settings": False, "env": "CLAUDE_CODE_OAUTH_TOKEN=oat"}),
    # a variable claude does not sign in with is not a credential
    ("claude-code-agent", {"advanced-settings": True, "env": "HTTPS_PROXY=http://proxy:3128"}),
])
def test_what_is_not_a_credential(plugin, config):
    adapter, schema = schema_of(plugin)
    with pytest.raises(RunnerError) as err:
        adapter.check_setup({**stored_untouched(plugin), **config}, schema)
    assert err.value.code == "config.missing"


def test_the_host_fields_in_a_stored_config_do_not_count_as_set_up():
    host_fields = {"enable-all-tools": True, "tools": [], "knowledge-bases": [], "mcp-resources": [],
                   "mcp-resource-agent-read-enabled": False}
    for plugin in PLUGINS:
        adapter, schema = schema_of(plugin)
        with pytest.raises(RunnerError) as err:
            adapter.check_setup({**stored_untouched(plugin), **host_fields}, schema)
        assert str(err.value) == line(plugin)


# --- a binding its owner set up still runs --------------------------------------------------------


async def test_a_set_up_acp_binding_still_runs():
    import tests.contract.cases  # noqa: F401  (the case module imports from it)
    from tests.contract.case_acp_agent_runner import _Server, config

    srv = _Server().start()
    try:
        host, runner = host_and_runner("acp-agent-runner")
        results = await run(runner, host,
                            config={**stored_untouched("acp-agent-runner"), **config(srv)})
        assert rtype(terminal(results)) == "run.completed" and final_text(results)
        assert srv.model_requests()
    finally:
        srv.stop()


async def test_a_set_up_claude_code_binding_still_runs():
    from tests.contract.case_claude_code_agent import config, start

    srv = start()
    try:
        host, runner = host_and_runner("claude-code-agent")
        results = await run(runner, host,
                            config={**stored_untouched("claude-code-agent"), **config(srv)})
        assert rtype(terminal(results)) == "run.completed" and final_text(results)
        assert srv.model_requests()
    finally:
        srv.stop()


async def test_a_set_up_codex_binding_still_runs():
    from tests.contract.case_codex_agent import CodexServer, config

    srv = CodexServer().start()
    try:
        host, runner = host_and_runner("codex-agent")
        results = await run(runner, host,
                            config={**stored_untouched("codex-agent"), **config(srv)})
        assert rtype(terminal(results)) == "run.completed" and final_text(results)
        assert srv.model_requests()
    finally:
        srv.stop()
