"""A chat member who is not benign, against the three coding agents (issue 29, scenarios 2–4 and a
host without a sandbox), with the scripted CLIs running real ``/bin/bash`` for the tool calls the
fake model API asks for. Every tool call here is what a hostile member would get the agent to run
(``permission-mode: full-access``: as if someone had allowed it); each test asserts that the attack
fails the way a user would see it: what LangBot received (tool results, log lines, the chat), what
the model API received, what is left running on the host.

The sandbox is tested as an owner gets it: the session-wide ``LANGBOT_RUNNERS_SANDBOX_WRITE`` of
tests/conftest.py (pytest's temporary folders) is cleared, so the data root (workspaces, HOMEs) is
inside no writable extra path. The read-only extras stay (the scripted CLIs are Python scripts that
need the tests folder and the Python install).
"""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import stat
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runner_kit import sandbox
from runner_kit.process import alive
from runner_kit.secret_proxy import STAND_IN_PREFIX
from runners_cli.host import Identity, LocalHost
from runners_cli.plugins import find
from tests.fakes.model_api import ANTHROPIC, FakeModelAPI
from tests.helpers import (
    children_left,
    dump,
    failure,
    final_text,
    make_runner,
    messages,
    rtype,
    run,
    terminal,
)

CLI = Path(__file__).resolve().parents[1] / "fakes" / "cli"
KIT = Path(__file__).resolve().parents[2] / "runner_kit"
PLUGINS = ("claude-code-agent", "codex-agent", "acp-agent-runner")
KEY_PREFIX = "sk-hostile-"
HELLO = "Hello from the fake model."
SECTION = "@@section@@"
SETTLE = 2.0  # the longest a test waits for processes to appear or go (it polls; usually milliseconds)


# --- the setting ------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def owner_sandbox(tmp_path, monkeypatch) -> Path:
    """The sandbox as an owner gets it: no writable extra path; the data root is a fresh folder."""
    monkeypatch.delenv(sandbox.WRITE_ENV, raising=False)
    monkeypatch.delenv(sandbox.BWRAP_ENV, raising=False)
    root = tmp_path / "data"
    monkeypatch.setenv("RUNNER_KIT_DATA_DIR", str(root))
    return root


@pytest.fixture
def key() -> str:
    return KEY_PREFIX + secrets.token_hex(16)


@pytest.fixture
def api(key):
    with FakeModelAPI(api_keys={key}) as srv:
        yield srv


@pytest.fixture
def mcp_tokens(monkeypatch) -> list[str]:
    """The real token of every LangBot MCP bridge started during the test."""
    from langbot_plugin.api.agent_tools.mcp_bridge import AgentRunMCPBridge

    seen: list[str] = []
    start = AgentRunMCPBridge.start

    def recording_start(self, *args, **kwargs):
        seen.append(self.token)
        return start(self, *args, **kwargs)

    monkeypatch.setattr(AgentRunMCPBridge, "start", recording_start)
    return seen


@pytest.fixture(autouse=True)
async def nothing_left_running():
    yield
    assert not await children_left(SETTLE), "a process this test started is still running"


def _executable(path: Path) -> str:
    mode = path.stat().st_mode
    if not mode & stat.S_IXUSR:
        path.chmod(mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return str(path)


def agent_config(plugin: str, api: FakeModelAPI, key: str, program: str | None = None, **extra: Any) -> dict[str, Any]:
    """The plugin's config for the scripted CLI (``program`` replaces the CLI's path), with every
    tool call allowed and the LangBot tools on."""
    if plugin == "claude-code-agent":
        cfg: dict[str, Any] = {"executable": program or _executable(CLI / "fake_claude.py"),
                               "base-url": api.anthropic_base_url(), "api-key": key}
    elif plugin == "codex-agent":
        cfg = {"executable": program or _executable(CLI / "fake_codex.py"), "base-url": api.openai_base_url(),
               "api-key": key, "model": "fake-model", "max-retries": 0}
    else:
        cfg = {"provider": "codex", "command": program or f"{sys.executable} {CLI / 'acp_agent.py'}",
               "base-url": api.openai_base_url(), "api-key": key}
    return {**cfg, "advanced-settings": True, "permission-mode": "full-access", "langbot-tools": True, **extra}


def new_host(plugin: str) -> LocalHost:
    return LocalHost(runner_id=find(plugin).runner_id)


def keys_sent(api: FakeModelAPI) -> set[str]:
    """The credential of every model call the fake model API received."""
    return {r.headers.get("x-api-key") if r.api == ANTHROPIC and r.headers.get("x-api-key")
            else r.headers.get("authorization", "").removeprefix("Bearer ") for r in api.model_requests()}


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in _strings(v)]
    return []


def read_one(folder: Path, name: str) -> str:
    """The text of the one file called ``name`` under ``folder``, as it is on disk."""
    found = [folder / name] if (folder / name).is_file() else list(folder.rglob(name))
    assert len(found) == 1, found
    return found[0].read_text(errors="replace")


def tool_output(results: list[Any]) -> str:
    """Everything the host received as the result of the run's tool calls (output and error)."""
    done = [r.data for r in results if rtype(r) == "tool.call.completed"]
    assert done, "the tool call never completed"
    return "\n".join(s for d in done for s in _strings([d.get("result"), d.get("error")]))


async def one_turn(plugin: str, host: LocalHost, cfg: dict[str, Any], text: str = "do it",
                   identity: Identity | None = None) -> list[Any]:
    results = await run(make_runner(plugin, host), host, text, config=cfg, identity=identity)
    assert rtype(terminal(results)) == "run.completed", dump(results)[-2000:]
    return results


# --- 1. secrets -----------------------------------------------------------------------------------

# every read of the agent's environment and config a tool can make, written to a file in the
# workspace (the test reads it as it is: no redactor between); then two proof lines (a stand-in was
# found in the environment; the owner's variable is set) and the file reversed (which no redactor
# recognises) and as it is, for LangBot (which may cut a long tool result)
SECRETS_PROBE = (
    "{ printenv; echo ==; cat /proc/$PPID/environ /proc/1/environ 2>/dev/null | tr '\\0' '\\n'; echo ==; "
    "cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' '\\n'; echo ==; "
    "cat ~/.codex/config.toml ~/langbot-mcp/*.json 2>/dev/null; echo ==; "
    "find ~ -type f -exec cat {} + 2>/dev/null; echo ==; "
    "grep -rIaho --exclude-dir=usr --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev "
    f"--exclude-dir=.venv --exclude-dir=.pyenv '{KEY_PREFIX}[0-9a-f]*' / 2>/dev/null | sort -u | head; "
    "} > leak.txt 2>&1; "
    f"printenv | grep -o '{STAND_IN_PREFIX}[0-9a-f]*' | head -1 | sed 's/^/stand-in: /'; "
    "echo \"passphrase is: $DB_PASSPHRASE\"; rev leak.txt; cat leak.txt"
)


async def probe_secrets(plugin: str, api: FakeModelAPI, key: str, data: Path, **extra: Any) -> tuple[list[Any], str, str]:
    """Run SECRETS_PROBE: (the run's results, what the tool read as it is, what the host received
    as the tool's result)."""
    api.tool_command = SECRETS_PROBE
    results = await one_turn(plugin, new_host(plugin), agent_config(plugin, api, key, **extra))
    raw = read_one(data, "leak.txt")
    assert STAND_IN_PREFIX in raw, "the command ran, and the agent holds stand-ins"
    out = tool_output(results)
    assert "stand-in: " in out, "the host received the tool's output"
    assert final_text(results) == HELLO
    return results, raw, out


def assert_nowhere(secret: str, raw: str, results: list[Any], caplog: pytest.LogCaptureFixture) -> None:
    assert secret not in raw, "a tool read a real secret inside the sandbox"
    everything = dump(results) + "\n" + caplog.text
    assert secret not in everything and secret[::-1] not in everything, \
        "a real secret reached LangBot (a tool result, processor.log, the chat) or a log line"


@pytest.mark.parametrize("plugin", PLUGINS)
async def test_secrets_no_tool_finds_the_api_key(plugin, api, key, owner_sandbox, caplog):
    caplog.set_level("DEBUG")
    passphrase = "pp-" + secrets.token_hex(12)
    results, raw, out = await probe_secrets(plugin, api, key, owner_sandbox, env=f"DB_PASSPHRASE={passphrase}")
    assert_nowhere(key, raw, results, caplog)
    # the model API still got the real key, from the proxy
    assert keys_sent(api) == {key}
    # a secret the owner gave the agent in `env` is the agent's to use, but reaches no one
    assert passphrase in raw, "the agent got the variable the owner set"
    assert "passphrase is: ***" in out and passphrase not in dump(results) + caplog.text


@pytest.mark.parametrize("plugin", PLUGINS)
async def test_secrets_no_tool_finds_the_langbot_mcp_token(plugin, api, key, mcp_tokens, owner_sandbox, caplog):
    caplog.set_level("DEBUG")
    results, raw, _ = await probe_secrets(plugin, api, key, owner_sandbox)
    assert mcp_tokens, "the LangBot MCP bridge was offered to the agent"
    for token in mcp_tokens:
        assert_nowhere(token, raw, results, caplog)


# --- 2. other conversations -----------------------------------------------------------------------


@pytest.mark.parametrize("plugin", PLUGINS)
async def test_isolation_conversation_b_cannot_see_what_conversation_a_wrote(plugin, api, key, owner_sandbox):
    host = new_host(plugin)
    note, said = "note-" + secrets.token_hex(8), "said-" + secrets.token_hex(8)
    alice = Identity(conversation_id="conv-a", actor_id="alice")
    bob = Identity(conversation_id="conv-b", actor_id="bob")
    cfg = agent_config(plugin, api, key)

    api.tool_command = f"echo {note} > notes.txt && pwd"
    a = await one_turn(plugin, host, cfg, f"please remember {said}", identity=alice)
    a_ws = Path(tool_output(a).strip().splitlines()[-1])
    assert (a_ws / "notes.txt").read_text().strip() == note
    [a_home] = [h for h in owner_sandbox.glob("*/homes/*") if h.is_dir()]
    assert any(said in f.read_text(errors="replace") for f in a_home.rglob("*") if f.is_file()), \
        "A's session store (in A's HOME) holds what A said"

    mine = "mine-" + secrets.token_hex(8)
    api.tool_command = (
        # what B can list (A's workspace and HOME must not be named) ...
        "ls -la ..; ls ../..; ls -laR ../../..; "
        "find / \\( -path /usr -o -path /proc -o -path /sys -o -path /dev \\) -prune -o -name notes.txt -print "
        f"2>/dev/null; ls -R {owner_sandbox}; echo {SECTION}; "
        # ... and what B can read, by guessing and by A's absolute paths
        f"cat ../*/notes.txt; cat {a_ws}/notes.txt; ls -la {a_home}; "
        f"find {a_home} -type f -exec cat {{}} + ; grep -r . {a_ws} {a_home}; echo {SECTION}; "
        f"echo {mine} > own.txt && cat own.txt"
    )
    b = await one_turn(plugin, host, cfg, "look around", identity=bob)
    listed, read, own = tool_output(b).split(SECTION)
    assert note not in dump(b) and said not in dump(b), "B read A's workspace or A's session store"
    assert a_ws.name not in listed and a_home.name not in listed, "B can list A's workspace or HOME"
    assert "No such file" in read
    # B's own workspace works
    assert mine in own
    assert read_one(owner_sandbox, "own.txt").strip() == mine and not (a_ws / "own.txt").exists()


# --- 3. nothing outlives the run ------------------------------------------------------------------


def sleeps(nonce: str) -> set[int]:
    """Live processes on this host running one of this test's ``sleep 30x.<nonce>``."""
    wanted = {f"sleep\0{n}.{nonce}\0".encode() for n in (300, 301, 302)}
    found = set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as fh:
                cmdline = fh.read()
        except OSError:
            continue
        if any(cmdline == w or cmdline.endswith(b"/" + w) for w in wanted) and alive(int(entry.name)):
            found.add(int(entry.name))
    return found


async def poll(check: Callable[[], bool], timeout: float = SETTLE) -> bool:
    """Wait until ``check()`` holds (True), or ``timeout`` passes (False)."""
    end = time.monotonic() + timeout
    while not check():
        if time.monotonic() > end:
            return False
        await asyncio.sleep(0.02)
    return True


@pytest.mark.parametrize("isolation", ["sandbox", "none"])
@pytest.mark.parametrize("plugin", PLUGINS)
async def test_containment_background_processes_end_with_the_run(plugin, isolation, api, key):
    nonce = str(secrets.randbelow(10**9))  # this test's own sleeps: `sleep 300.<nonce>`
    api.tool_command = (f"nohup sleep 300.{nonce} >/dev/null 2>&1 & setsid -f sleep 301.{nonce} >/dev/null 2>&1; "
                        f"(sleep 302.{nonce} >/dev/null 2>&1 &) ; echo started")
    # The agent's answer after the tool streams slowly, so the run outlives the tool by a few tenths
    # of a second; a watcher notes every sleep it sees while the run lasts (once the agent exits, the
    # run ends and its processes go, which can be before this test reads the tool's result).
    api.answer_tokens, api.token_delay = ["all", " ", "started", "."], 0.1
    host = new_host(plugin)
    ctx = host.make_context("start something", config=agent_config(plugin, api, key, isolation=isolation))
    running: set[int] = set()
    results = []
    done = asyncio.Event()

    async def watch() -> None:
        while not done.is_set():
            running.update(sleeps(nonce))
            await asyncio.sleep(0.01)

    watcher = asyncio.create_task(watch())
    try:
        async for r in make_runner(plugin, host).invoke(ctx):
            host.apply_result(ctx.run_id, r)
            results.append(r)
        done.set()
        await watcher
        assert rtype(terminal(results)) == "run.completed"
        assert "started" in tool_output(results)
        assert len(running) == 3, "the tool started its three background sleeps"
        assert await poll(lambda: not sleeps(nonce)), f"left running after the run: {sleeps(nonce)}"
    finally:
        done.set()
        await watcher
        for pid in sleeps(nonce):
            os.kill(pid, signal.SIGKILL)


# --- 4. the host's files --------------------------------------------------------------------------


@pytest.mark.parametrize("plugin", PLUGINS)
async def test_host_files_outside_the_workspace_are_not_there(plugin, api, key, owner_sandbox, tmp_path):
    elsewhere, other = tmp_path / "elsewhere" / "secret.txt", owner_sandbox / "another-plugin" / "secret.txt"
    markers = {}
    for path in (elsewhere, other):
        path.parent.mkdir(parents=True)
        markers[path] = "host-" + secrets.token_hex(8)
        path.write_text(markers[path])
    api.tool_command = (f"cat /etc/hostname; ls -a /root /home /work {KIT.parent} 2>/dev/null; echo {SECTION}; "
                        f"cat {elsewhere} {other} 2>&1; ls {elsewhere.parent} {other.parent} 2>&1; "
                        f"head -c 300 {KIT / 'secret_proxy.py'} 2>&1")
    results = await one_turn(plugin, new_host(plugin), agent_config(plugin, api, key))
    listed, read = tool_output(results).split(SECTION)
    assert read_one(Path("/etc"), "hostname").strip() in listed, "the system paths are readable (the command ran)"
    for marker in markers.values():
        assert marker not in dump(results), "a file outside the workspace was read"
    assert "No such file" in read and "Keep a coding agent" not in read, "the plugin's own files were read"
    plugins_folder = {"runner_kit", "runners_cli", "pyproject.toml", plugin}
    assert not plugins_folder & set(listed.split()), "the plugins' folder can be listed"


# --- 5. a host where no sandbox can be built ------------------------------------------------------


@pytest.fixture
def no_namespaces(tmp_path, monkeypatch):
    """A bwrap that fails the way it does in Docker with the default seccomp profile."""
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create a new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv(sandbox.BWRAP_ENV, str(fake))
    sandbox.forget_probes()
    yield fake
    sandbox.forget_probes()


def starting_wrapper(plugin: str, tmp_path: Path) -> tuple[str, Path]:
    """A program that notes that it started, then runs the plugin's scripted CLI."""
    started = tmp_path / "started.txt"
    target = {"claude-code-agent": _executable(CLI / "fake_claude.py"),
              "codex-agent": _executable(CLI / "fake_codex.py"),
              "acp-agent-runner": f"'{sys.executable}' '{CLI / 'acp_agent.py'}'"}[plugin]
    wrapper = tmp_path / "agent-wrapper"
    wrapper.write_text(f"#!/bin/sh\necho started >> '{started}'\nexec {target} \"$@\"\n")
    wrapper.chmod(0o755)
    return str(wrapper), started


@pytest.mark.parametrize("plugin", PLUGINS)
async def test_no_sandbox_runs_nothing_and_says_so_unless_the_owner_opts_out(plugin, api, key, tmp_path, no_namespaces):
    program, started = starting_wrapper(plugin, tmp_path)
    host = new_host(plugin)
    results = await run(make_runner(plugin, host), host, config=agent_config(plugin, api, key, program=program))
    code, _, message = failure(results)
    assert code == "process.no_sandbox"
    [shown] = messages(results)
    # the chat says what happened and what the owner can do; the run log also says why
    assert "no sandbox can be built" in shown and "Isolation to 'None (unsafe)'" in shown, shown
    assert "No permissions to create a new namespace" in message
    assert not started.exists(), "the agent was started without a sandbox"
    assert not api.model_requests()

    cfg = agent_config(plugin, api, key, program=program, isolation="none")
    results = await run(make_runner(plugin, host), host, config=cfg)
    assert rtype(terminal(results)) == "run.completed" and final_text(results) == HELLO
    assert started.exists() and keys_sent(api) == {key}
