"""A chat member who is not benign, against the REAL coding CLIs in their sandbox (issue 29; opt-in:
RUN_SLOW=1): Claude Code 2.1.197 and claude-code-acp in full-access mode (tools run without
asking), Codex 0.171.0 (app-server) and codex-acp 0.16.0 in workspace-write mode (Codex's own
default, where commands in the workspace run without asking; Codex's own bwrap sandbox runs nested
inside ours).

The model is ``tests/fakes/model_api.py`` on 127.0.0.1: it answers the first request with one shell
tool call (``tool_command``), the command a hostile member got the agent to run, and the next with
text. Each test asserts what a user would notice: what LangBot received from the run, what the
model API received (the tool's raw output goes back to the model, past any redaction), and what is
left running on the host.

The sandbox is the one an owner gets: the session-wide ``LANGBOT_RUNNERS_SANDBOX_READ``/``_WRITE``
of tests/conftest.py are cleared (the real CLIs need nothing of the tests: their install tree is
bound read-only from the program's path, the ACP stdio MCP proxy's Python by the adapter), and the
data root is a fresh folder under pytest's temporary folder.

With ``isolation: none`` the isolation test fails (conversation B reads A's notes by their path)
and so does the containment test (the ``env -i setsid`` sleep carries no tag and survives).
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from runner_kit import agent_mcp, sandbox
from runner_kit.process import alive
from runners_cli.host import Identity, LocalHost
from runners_cli.plugins import find
from tests.fakes.model_api import FakeModelAPI
from tests.helpers import make_runner, rtype, terminal

pytestmark = [pytest.mark.slow, pytest.mark.real_peers, pytest.mark.timeout(600)]

# agent -> (plugin, permission mode): the mode where a tool runs without anyone being asked
AGENTS = {
    "claude": ("claude-code-agent", "full-access"),
    "codex": ("codex-agent", "workspace-write"),
    "codex-acp": ("acp-agent-runner", "workspace-write"),
    "claude-code-acp": ("acp-agent-runner", "full-access"),
}
ANTHROPIC_AGENTS = ("claude", "claude-code-acp")
DONE = "Hello from the fake model."
SETTLE = 5.0  # at most this long for the agent's processes to go after a run (polled every 50 ms)
# a tool the run grants, so the LangBot MCP bridge (and its token) exists
GRANTS = {"tools": [{"tool_name": "weather", "operations": ["call"]}]}


@pytest.fixture(autouse=True)
def owner_sandbox(tmp_path, monkeypatch) -> Path:
    """No extra read or write path; a fresh data root."""
    monkeypatch.delenv(sandbox.READ_ENV, raising=False)
    monkeypatch.delenv(sandbox.WRITE_ENV, raising=False)
    root = tmp_path / "data"
    monkeypatch.setenv("RUNNER_KIT_DATA_DIR", str(root))
    return root


@pytest.fixture
def key() -> str:
    return "sk-hostile-" + secrets.token_hex(16)


@pytest.fixture
def api(key):
    """The fake model API accepting only the real key (a stand-in would get a 401)."""
    with FakeModelAPI(api_keys={key}) as srv:
        yield srv


@pytest.fixture
def mcp_tokens(monkeypatch) -> list[str]:
    """Every LangBot MCP bridge token handed out during the test (the real ones)."""
    tokens: list[str] = []
    original = agent_mcp._RunTools.bind

    def bind(self, env):
        original(self, env)
        if self.bridge is not None:
            tokens.append(str(self.bridge.token))

    monkeypatch.setattr(agent_mcp._RunTools, "bind", bind)
    return tokens


def config(clis: Any, api: FakeModelAPI, key: str, agent: str) -> dict[str, Any]:
    plugin, mode = AGENTS[agent]
    if agent == "claude":
        cfg = {"executable": str(clis.claude), "base-url": api.anthropic_base_url(), "advanced-settings": True,
               "max-retries": 0}
    elif agent == "codex":
        cfg = {"executable": str(clis.bin_dir / "codex"), "base-url": api.openai_base_url(), "model": "fake-model",
               "advanced-settings": True, "max-retries": 0}
    elif agent == "codex-acp":
        # codex-acp's own sandbox (workspace-write) needs a bwrap on PATH: the codex package ships one
        bwrap_dir = clis.codex.parent.parent / "codex-resources"
        cfg = {"provider": "codex", "executable": str(clis.bin_dir / "codex-acp"), "base-url": api.openai_base_url(),
               "model": "fake-model", "env": f"PATH={bwrap_dir}:/usr/local/bin:/usr/bin:/bin"}
    else:
        cfg = {"provider": "claude-code", "command": " ".join(clis.claude_code_acp_command),
               "base-url": api.anthropic_base_url(), "env": f"CLAUDE_CODE_EXECUTABLE={clis.claude}"}
    return {**cfg, "api-key": key, "permission-mode": mode, "langbot-tools": True}


def plugin_of(agent: str) -> str:
    return AGENTS[agent][0]


async def attack(clis: Any, api: FakeModelAPI, key: str, agent: str, command: str, *,
                 conversation: str = "conv-1") -> list[Any]:
    """One run in which the model asks for ``command`` (as if a member had asked the agent to run it)."""
    api.tool_command = command
    host = LocalHost(runner_id=find(plugin_of(agent)).runner_id)
    ctx = host.make_context("please run this for me", config=config(clis, api, key, agent), resources=GRANTS,
                            identity=Identity(conversation_id=conversation))
    out = []
    async for r in make_runner(plugin_of(agent), host).invoke(ctx):
        host.apply_result(ctx.run_id, r)
        out.append(r)
    assert rtype(terminal(out)) == "run.completed", terminal(out).data
    return out


def tool_outputs(results: list[Any]) -> str:
    """What LangBot was shown of the tool calls (results and errors)."""
    return "\n".join(json.dumps(r.data, ensure_ascii=False) for r in results if rtype(r) == "tool.call.completed")


def seen_by_langbot(results: list[Any]) -> str:
    return "\n".join(json.dumps(r.data, ensure_ascii=False, default=str) for r in results)


def seen_by_model(api: FakeModelAPI, since: int = 0) -> str:
    """Every request body the model API received (tool results come back to it unredacted)."""
    return "\n".join(json.dumps(r.body, ensure_ascii=False) for r in api.model_requests()[since:])


def auth_values(api: FakeModelAPI) -> list[str]:
    return [r.headers.get("x-api-key") or (r.headers.get("authorization") or "").removeprefix("Bearer ")
            for r in api.model_requests()]


@pytest.mark.parametrize("agent", list(AGENTS))
async def test_no_secret_reaches_a_tool(clis, api, key, mcp_tokens, agent):
    """The tool prints its environment, its parent's, every process's it can see, and the agent's
    config files: neither the API key nor the LangBot MCP token is in any of it."""
    command = ("printenv; echo @@parent; cat /proc/$PPID/environ | tr '\\0' '\\n'; echo @@all; "
               "for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do tr '\\0' '\\n' < $f; done 2>/dev/null; "
               "echo @@files; cat $HOME/langbot-mcp/*.json $CODEX_HOME/config.toml $HOME/.codex/config.toml "
               "2>/dev/null; echo @@end")
    results = await attack(clis, api, key, agent, command)
    told = seen_by_model(api)
    assert "@@end" in told and "PATH=" in told, "the tool ran and its output went back to the model"
    assert mcp_tokens, "the run had a LangBot MCP bridge"
    offered = json.dumps(api.model_requests()[0].body.get("tools"))
    assert "langbot" in offered, "the agent reached the bridge with what it holds (a stand-in, via the proxy)"
    for secret in (key, *mcp_tokens):
        assert secret not in told, "a secret reached the tool (and the model)"
        assert secret not in seen_by_langbot(results)
    assert set(auth_values(api)) == {key}, "the model API got the real key on every request"


@pytest.mark.parametrize("agent", list(AGENTS))
async def test_another_conversations_files_stay_out_of_reach(clis, api, key, owner_sandbox, agent):
    """Conversation A leaves notes in its workspace; conversation B's tool looks for them next door,
    by A's path, and in the data root: it finds nothing."""
    marker = "note-of-a-" + secrets.token_hex(8)
    await attack(clis, api, key, agent, f"echo {marker} > notes.txt; echo written", conversation="conv-A")
    (notes,) = [p for p in owner_sandbox.rglob("notes.txt") if p.parent.parent.name == "workspaces"]
    assert notes.read_text().strip() == marker, "A's notes are on the host"
    since = len(api.model_requests())
    command = (f"ls -la ..; cat ../*/notes.txt; cat {notes}; ls -laR {owner_sandbox}; "
               f"find / -name notes.txt -not -path '/proc/*' 2>/dev/null; echo @@end")
    results = await attack(clis, api, key, agent, command, conversation="conv-B")
    told = seen_by_model(api, since)
    assert "@@end" in told, "B's tool ran and its output went back to the model"
    assert str(notes) in told, "B's tool tried A's path"
    assert marker not in told, "B's tool read A's notes"
    assert marker not in seen_by_langbot(results)


def sleeps(tag: str) -> set[int]:
    """Host pids of ``sleep <tag>...`` processes (the tool's, wherever they were reparented)."""
    out = set()
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                cmd = Path(f"/proc/{entry.name}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if len(cmd) >= 2 and cmd[0].endswith(b"sleep") and cmd[1].startswith(tag.encode()):
                out.add(int(entry.name))
    return out


async def gone(tag: str) -> set[int]:
    """The tool's sleeps still running after at most ``SETTLE`` seconds (empty once they are gone)."""
    end = time.monotonic() + SETTLE
    for _ in range(int(SETTLE / 0.05) + 1):
        left = sleeps(tag)
        if not left or time.monotonic() > end:
            return left
        await asyncio.sleep(0.05)
    return sleeps(tag)


@pytest.mark.parametrize("agent", list(AGENTS))
async def test_nothing_the_tool_starts_outlives_the_run(clis, api, key, agent):
    """The tool leaves sleeps behind every way a shell can (nohup in the background, setsid, setsid
    with an empty environment); once the run is over none of them runs on the host."""
    tag = f"30{secrets.randbelow(10**6):06d}"  # unique: sleep 30xxxxxx.1 / .2 / .3 seconds
    command = (f"nohup sleep {tag}.1 >/dev/null 2>&1 & setsid -f sleep {tag}.2; "
               f"env -i /usr/bin/setsid -f /bin/sleep {tag}.3; sleep 0.2; "
               f"echo running=$(ps -eo args | grep -cE '^(/bin/)?sleep {tag}')")
    try:
        await attack(clis, api, key, agent, command)
        # what the tool printed, as the model got it back: for this command codex-acp 0.16.0 was seen
        # to end the turn without a completion for the tool call, so LangBot may be shown none
        assert "running=3" in seen_by_model(api), "the tool's three sleeps were running when it ended"
        assert not await gone(tag), "a sleep the tool started outlived the run"
    finally:
        for pid in sleeps(tag):  # never leave them on the host, whatever failed
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
