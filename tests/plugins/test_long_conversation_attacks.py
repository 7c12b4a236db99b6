"""A long conversation with a coding agent (docs attack.md, brief 2), against what issue 29 added:
the sandbox per agent process, the secret proxy, the LangBot MCP bridge bound to the run, and the
"allow for this session" list kept in conversation state.

With the scripted CLIs (tests/fakes/cli) in the sandbox and the fake model API:

- many runs in one conversation leave no listening port, file descriptor, thread, task, process,
  secret proxy or MCP config file behind (each run's proxy and bridge are there while it runs);
- a tool loop of dozens of model requests, and a follow-up turn in the live agent, all go through the
  proxy with the real key, on a bounded number of connections;
- "allow for this session" stays within LangBot's state limit however many commands were approved
  (it was one list that grew with every distinct command; past LangBot's 256 KiB the host dropped
  every later update, so each new approval was silently forgotten at the end of its run);
- state written by an older version (``shell:git`` scopes, a pending question record, one in a
  shape this version did not write) neither approves anything nor leaves the conversation stuck;
- a bubblewrap probe that failed for a passing reason (a timeout on a loaded host) is tried again:
  it was remembered for the life of the plugin process, and every later message of every
  conversation failed with ``process.no_sandbox``.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import secrets
import sys
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from runner_kit import approvals as ap
from runner_kit import command_scope as cs
from runner_kit import sandbox
from runner_kit.chat_commands import BOOK_SUFFIX
from runner_kit.process import alive
from runner_kit.secret_proxy import SecretProxy
from runners_cli.host import MAX_STATE_VALUE, Identity
from tests.fakes import model_api
from tests.fakes.model_api import FakeModelAPI
from tests.helpers import children_left, collect, dump, failure, make_runner, messages, rtype, run, terminal
from tests.helpers import run_answering as answering
from tests.plugins.test_hostile_members import HELLO, KEY_PREFIX, PLUGINS, agent_config, keys_sent, new_host

pytestmark = pytest.mark.usefixtures("no_parked")  # tests/conftest.py: nothing left parked

SESSION_KEY = "claude_code.session_id"  # claude-code-agent's state key (per sender: + ".u<hash>")
SETTLE = 2.0  # the longest a test waits for processes to go (it polls; usually milliseconds)
# runs per conversation: the fake ACP agent takes over a second to start, the others a fifth
RUNS = {"claude-code-agent": 8, "codex-agent": 8, "acp-agent-runner": 2}
# model requests per turn: the fake ACP agent makes at most 8 model calls in one turn
ROUNDS = {"claude-code-agent": 30, "codex-agent": 30, "acp-agent-runner": 7}


@pytest.fixture(autouse=True)
def owner_sandbox(tmp_path, monkeypatch) -> Path:
    """A fresh data root (workspaces, HOMEs) outside every writable extra path."""
    monkeypatch.delenv(sandbox.WRITE_ENV, raising=False)
    monkeypatch.delenv(sandbox.BWRAP_ENV, raising=False)
    root = tmp_path / "data"
    monkeypatch.setenv("RUNNER_KIT_DATA_DIR", str(root))
    return root


@pytest.fixture(autouse=True)
async def nothing_left_running():
    yield
    assert not await children_left(SETTLE), "a process this test started is still running"


@pytest.fixture
def key() -> str:
    return KEY_PREFIX + secrets.token_hex(16)


@pytest.fixture
def api(key):
    with FakeModelAPI(api_keys={key}) as srv:
        yield srv


# --- what this process holds ----------------------------------------------------------------------


def _socket_inodes() -> set[str]:
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            found.add(link[8:-1])
    return found


def _tcp(state: str) -> list[tuple[int, int]]:
    """(local port, remote port) of this process's TCP sockets in ``state`` (0A listen, 01 established)."""
    mine = _socket_inodes()
    out = []
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        with open(table) as fh:
            for line in fh.readlines()[1:]:
                f = line.split()
                if f[3] == state and f[9] in mine:
                    out.append((int(f[1].rsplit(":", 1)[1], 16), int(f[2].rsplit(":", 1)[1], 16)))
    return out


def holdings(data: Path) -> dict[str, int]:
    """What this process holds that a run could leak."""
    gc.collect()
    return {
        "fds": len(os.listdir("/proc/self/fd")),
        "threads": threading.active_count(),
        "listening ports": len(_tcp("0A")),
        "tasks": len(asyncio.all_tasks()),
        "secret proxies": sum(1 for o in gc.get_objects() if isinstance(o, SecretProxy)),
        "MCP config files": len(list(data.glob("*/homes/*/langbot-mcp/*"))),
        "parked agents": len(ap.PARKED) + len(ap._CLOSING),
    }


# --- 1. many runs in one conversation -------------------------------------------------------------


@pytest.mark.parametrize("plugin", PLUGINS)
async def test_many_runs_in_one_conversation_leave_nothing_behind(plugin, api, key, owner_sandbox):
    api.tool_command = "echo hi"
    host = new_host(plugin)
    cfg = agent_config(plugin, api, key)  # the sandbox, a tool call each run, LangBot's tools on
    runner = make_runner(plugin, host)
    first = await run(runner, host, "warm up", config=cfg)
    assert rtype(terminal(first)) == "run.completed", dump(first)[-2000:]
    before = holdings(owner_sandbox)
    ports_while_running = []
    for i in range(RUNS[plugin]):
        ctx = host.make_context(f"message {i}", config=cfg)
        out = await collect(runner, host, ctx, lambda r: rtype(r) == "tool.call.started"
                            and ports_while_running.append(len(_tcp("0A"))))
        assert rtype(terminal(out)) == "run.completed" and messages(out) == [HELLO], dump(out)[-2000:]
    after = holdings(owner_sandbox)
    # each run had its secret proxy and its MCP bridge listening (beside the fake model API) ...
    assert min(ports_while_running) >= before["listening ports"] + 2, ports_while_running
    # ... and nothing of them, nor of the agent, is left: the same as after one run
    for what in ("listening ports", "tasks", "secret proxies", "MCP config files", "parked agents"):
        assert after[what] == before[what], (what, before, after)
    # a few may come and go (the shared client's keep-alive connections, the default executor's
    # threads): bounded, not one more per run
    assert after["fds"] <= before["fds"] + 3, (before, after)
    assert after["threads"] <= before["threads"] + 3, (before, after)
    assert not await children_left(SETTLE)
    assert keys_sent(api) == {key}
    assert len(api.model_requests()) == 2 * (RUNS[plugin] + 1)


# --- 2. a long tool loop, and a follow-up in the live agent ---------------------------------------


def _tool_loop(monkeypatch, rounds: int) -> None:
    """The fake model API asks for the tool ``rounds`` times after each prompt, then answers."""

    def anthropic(messages: Any) -> bool:
        count = 0
        for msg in messages if isinstance(messages, list) else []:
            if isinstance(msg, dict) and msg.get("role") == "user":
                results = any(b.get("type") == "tool_result" for b in model_api._blocks(msg.get("content")))
                count = count + 1 if results else 0
        return count >= rounds

    def openai(items: Any) -> bool:
        count = 0
        for item in items if isinstance(items, list) else []:
            if not isinstance(item, dict):
                continue
            if item.get("type", "message") == "message" and item.get("role") == "user":
                count = 0
            elif item.get("type") in ("function_call_output", "custom_tool_call_output", "local_shell_call_output"):
                count += 1
        return count >= rounds

    monkeypatch.setattr(model_api, "_anthropic_tool_answered", anthropic)
    monkeypatch.setattr(model_api, "_openai_tool_answered", openai)


@pytest.mark.parametrize("plugin", PLUGINS)
async def test_a_long_tool_loop_and_a_follow_up_go_through_the_proxy(plugin, api, key, owner_sandbox, monkeypatch):
    rounds = ROUNDS[plugin]
    _tool_loop(monkeypatch, rounds)
    api.tool_command = "echo round"
    api_port = urlsplit(api.root_url).port
    host = new_host(plugin)
    runner = make_runner(plugin, host)
    ctx = host.make_context("loop", steering=True, config=agent_config(plugin, api, key))
    upstream, fds = [], []

    def during(r: Any) -> None:
        if rtype(r) == "tool.call.completed":
            # the proxy's connections to the model API, and everything this process has open
            upstream.append(sum(1 for _, remote in _tcp("01") if remote == api_port))
            fds.append(len(os.listdir("/proc/self/fd")))
            if len(fds) == 1:
                host.queue_steering(ctx, "and once more")  # a follow-up turn in the same agent

    out = await collect(runner, host, ctx, during)
    assert rtype(terminal(out)) == "run.completed", dump(out)[-2000:]
    assert messages(out) == [HELLO, HELLO], "both turns answered, after their whole tool loops"
    assert len(fds) == 2 * rounds, "every tool call of both loops completed"
    assert len(api.model_requests()) == 2 * (rounds + 1), "every model request went through"
    assert keys_sent(api) == {key}, "each with the real key, from the proxy"
    # each stream is closed when it ends: the connections are reused, never one more per request (a
    # leak would leave one per model call, 60 here; on a loaded machine a request may start before
    # the last stream's connection is back in the pool, so a few are open at once)
    assert max(upstream) <= 5, upstream
    assert max(fds) - min(fds) <= 4, fds


# --- 3. "allow for this session" in a long conversation -------------------------------------------


def _claude_ask(api: FakeModelAPI, key: str) -> dict[str, Any]:
    return agent_config("claude-code-agent", api, key, **{"permission-mode": "ask"})


def _conversation(host: Any) -> tuple[str, dict[str, Any]]:
    """(scope key, conversation state) of the test's one conversation."""
    scope = host.scope_key(Identity(), "conversation")
    return scope, host.store.snapshot(scope)


async def _claude_session(host: Any, api: FakeModelAPI, key: str) -> tuple[str, str, str]:
    """Run one plain turn; (conversation scope key, claude's session state key, the session id)."""
    api.tool_command = None
    out = await run(make_runner("claude-code-agent", host), host, "hello", config=_claude_ask(api, key))
    assert messages(out) == [HELLO], dump(out)[-2000:]
    scope, state = _conversation(host)
    [(session_key, sid)] = [(k, v) for k, v in state.items()  # not the session's book (chat_commands)
                            if k.startswith(SESSION_KEY) and not k.endswith(BOOK_SUFFIX)]
    return scope, session_key, sid


def _asked(out: list[Any]) -> list[str]:
    return [m for m in messages(out) if "wants to" in m]


def test_the_memory_keeps_the_newest_approvals_within_its_bounds():
    m = ap.Memory("k", None)
    for i in range(ap.MEMORY_MAX_KEYS + 50):
        value = m.remember(f"cmd:make target-{i}", "s1")
    assert value is not None and len(value["allow"]) == ap.MEMORY_MAX_KEYS
    assert value["allow"][-1] == f"cmd:make target-{ap.MEMORY_MAX_KEYS + 49}", "the newest approval is kept"
    assert not m.allows("cmd:make target-0", "s1"), "the oldest is forgotten: asked again"
    assert m.allows(f"cmd:make target-{ap.MEMORY_MAX_KEYS + 49}", "s1")
    # long exact commands: bounded by size too
    m = ap.Memory("k", None)
    for i in range(40):
        value = m.remember(cs.command_key(f"make target-{i} && echo {'x' * (cs.MAX_KEY - 100)}"), "s1")
    assert value is not None and len(json.dumps(value, ensure_ascii=False).encode()) <= ap.MEMORY_MAX_BYTES
    assert value["allow"][-1].startswith("cmd:make target-39 ")
    # a list stored before the bounds is cut to them when read, newest kept
    stored = {"session": "s1", "v": ap.MEMORY_VERSION, "allow": [f"cmd:make t{i}" for i in range(5000)]}
    m = ap.Memory("k", stored)
    assert len(m.scopes) == ap.MEMORY_MAX_KEYS and m.allows("cmd:make t4999", "s1") and not m.allows("cmd:make t0", "s1")


async def test_allow_for_this_session_is_still_kept_after_many_long_commands(api, key):
    host = new_host("claude-code-agent")
    scope, session_key, sid = await _claude_session(host, api, key)
    # what the session remembered after dozens of distinct long commands had each been allowed for
    # the session: as much as LangBot's state takes
    padding = "x" * (cs.MAX_KEY - 200)
    old = [cs.command_key(f"touch old-{i}.txt && echo {padding}") for i in range(200)]
    allow: list[str] = []
    while len(json.dumps({"session": sid, "allow": [*allow, old[len(allow)]], "v": 2}).encode()) < MAX_STATE_VALUE - 64:
        allow.append(old[len(allow)])
    memory_key = session_key + ap.MEMORY_SUFFIX
    host.store.set(scope, memory_key, {"session": sid, "allow": allow, "v": ap.MEMORY_VERSION})

    command = f"touch new.txt && echo {padding}"
    api.tool_command = command
    runner = make_runner("claude-code-agent", host)
    cfg = _claude_ask(api, key)
    out = await answering(runner, host, host.make_context("one more", steering=True, config=cfg), ["always"])
    assert rtype(terminal(out)) == "run.completed" and len(_asked(out)) == 1, dump(out)[-2000:]
    stored = _conversation(host)[1][memory_key]
    assert cs.command_key(command) in stored["allow"], "LangBot kept the new approval"
    assert len(json.dumps(stored, ensure_ascii=False).encode()) <= ap.MEMORY_MAX_BYTES
    assert allow[-1] in stored["allow"] and allow[0] not in stored["allow"], "the oldest approvals went first"

    # the next message: the same command is not asked again
    out = await answering(runner, host, host.make_context("again", steering=True, config=cfg), ["deny"])
    assert rtype(terminal(out)) == "run.completed" and not _asked(out), messages(out)
    assert messages(out)[-1] == HELLO


# --- 4. state written by an older version --------------------------------------------------------


async def test_old_shell_scopes_approve_nothing_and_are_replaced(api, key):
    host = new_host("claude-code-agent")
    scope, session_key, sid = await _claude_session(host, api, key)
    old = {"session": sid, "allow": ["shell:git", "shell:touch", "edit"]}  # the first version's memory
    base = SESSION_KEY
    for k in {base + ap.MEMORY_SUFFIX, session_key + ap.MEMORY_SUFFIX}:  # its key, and this version's
        host.store.set(scope, k, old)
    api.tool_command = "git status"
    runner = make_runner("claude-code-agent", host)
    cfg = _claude_ask(api, key)
    out = await answering(runner, host, host.make_context("status?", steering=True, config=cfg), ["always"])
    assert rtype(terminal(out)) == "run.completed" and messages(out)[-1] == HELLO, dump(out)[-2000:]
    [question] = _asked(out)
    assert "git status" in question, "asked: shell:git allowed nothing"
    stored = _conversation(host)[1][session_key + ap.MEMORY_SUFFIX]
    # this version's value replaces it: the agent's own rule (the scripted claude proposes Bash(git:*))
    assert stored == {"session": sid, "allow": ["cmd-prefix:git"], "v": ap.MEMORY_VERSION}
    api.tool_command = "git status; touch PWNED.txt"
    out = await answering(runner, host, host.make_context("again", steering=True, config=cfg), ["deny"])
    assert len(_asked(out)) == 1 and rtype(terminal(out)) == "run.completed"


PENDING_RECORDS = {
    # as every version so far wrote it, for an agent this process no longer holds
    "current": lambda now: {"id": "ask-0123456789abcdef", "title": "run a command: git push", "kind": "permission",
                            "agent": "claude-code-agent", "asked_at": int(now) - 60, "expires_at": int(now) + 500},
    # in shapes no version of this kit wrote: a date as text, a bare id
    "text date": lambda now: {"id": "ask-x", "title": "run a command: git push", "expires_at": "2026-01-01T00:00:00Z"},
    "bare id": lambda now: "ask-0123456789abcdef",
}


@pytest.mark.parametrize("record", PENDING_RECORDS)
async def test_a_pending_question_from_before_never_leaves_the_conversation_stuck(record, api, key):
    host = new_host("claude-code-agent")
    scope, session_key, _ = await _claude_session(host, api, key)
    pending_key = SESSION_KEY + ap.PENDING_SUFFIX
    runner = make_runner("claude-code-agent", host)
    cfg = _claude_ask(api, key)
    for answer in ("allow", "what is new?"):  # an answer to it, then a new message
        host.store.set(scope, pending_key, PENDING_RECORDS[record](time.time()))
        out = await run(runner, host, answer, config=cfg)
        assert rtype(terminal(out)) == "run.completed", dump(out)[-2000:]
        assert any("no longer waiting" in m for m in messages(out)), messages(out)
        assert _conversation(host)[1].get(pending_key) is None, "the record is cleared"
    assert messages(out)[-1].endswith(HELLO), "the new message is answered"


# --- 5. a sandbox probe that failed for a moment ---------------------------------------------------


@pytest.fixture
def slow_then_fine_bwrap(tmp_path, monkeypatch):
    """A bubblewrap that hangs while ``hang`` exists (a host under load), then is the real one."""
    real = sandbox.find_bwrap()
    if real is None:
        pytest.skip("bubblewrap is not installed")
    hang = tmp_path / "hang"
    hang.touch()
    fake = tmp_path / "bwrap"
    fake.write_text(f"#!/bin/sh\nif [ -e '{hang}' ]; then sleep 30 & wait; fi\nexec '{real}' \"$@\"\n")
    fake.chmod(0o755)
    monkeypatch.setenv(sandbox.BWRAP_ENV, str(fake))
    monkeypatch.setattr(sandbox, "PROBE_TIMEOUT", 0.3)
    monkeypatch.setattr(sandbox, "PROBE_RETRY", 0.2)
    sandbox.forget_probes()
    yield hang
    sandbox.forget_probes()


async def test_a_probe_that_timed_out_is_tried_again(api, key, slow_then_fine_bwrap, monkeypatch):
    host = new_host("claude-code-agent")
    runner = make_runner("claude-code-agent", host)
    cfg = agent_config("claude-code-agent", api, key)
    out = await run(runner, host, "hello", config=cfg)
    code, _, message = failure(out)
    assert code == "process.no_sandbox" and "did not start" in message
    slow_then_fine_bwrap.unlink()  # the load is gone
    monkeypatch.setattr(sandbox, "PROBE_TIMEOUT", 10.0)  # (this machine's may not be: no 0.3 s race)
    await asyncio.sleep(sandbox.PROBE_RETRY)
    out = await run(runner, host, "and again", config=cfg)
    assert rtype(terminal(out)) == "run.completed" and messages(out) == [HELLO], dump(out)[-2000:]


async def _cancel_a_stuck_probe(tmp_path: Path) -> int:
    """Probe with a bwrap that never finishes (it waits on a child), cancel the probe once that child
    runs, and return the child's pid once it is gone or after 2 s (SIGKILL is asynchronous, and a
    loaded machine takes a moment)."""
    pids = tmp_path / "child.pid"
    stuck = tmp_path / "bwrap"
    stuck.write_text(f"#!/bin/sh\nsleep 3600 & echo $! > {pids}\nwait\n")
    stuck.chmod(0o755)
    sandbox.forget_probes()
    task = asyncio.ensure_future(sandbox.probe(str(stuck)))
    for _ in range(200):
        if pids.exists() and pids.read_text().strip():
            break
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    child = int(pids.read_text())
    for _ in range(200):
        if not alive(child):
            break
        await asyncio.sleep(0.01)
    # the cancelled probe decided nothing: the next run probes again
    assert str(stuck) not in sandbox._probed
    return child


async def test_a_probe_cancelled_with_its_run_leaves_no_bwrap(tmp_path):
    assert not alive(await _cancel_a_stuck_probe(tmp_path)), "the probe's bwrap was left waiting"
    sandbox.forget_probes()


async def test_a_probe_cancelled_while_its_bwrap_is_being_set_up_leaves_no_bwrap(tmp_path, monkeypatch):
    """On a loaded machine the run may be cancelled after bwrap was forked but before asyncio has
    handed back its process: that bwrap is killed too, not left waiting."""
    real_exec = asyncio.create_subprocess_exec

    async def slow_setup(*args: Any, **kwargs: Any) -> Any:
        proc = await real_exec(*args, **kwargs)
        await asyncio.sleep(0.5)  # the pipes are still being connected when the cancel comes
        return proc

    monkeypatch.setattr(sandbox.asyncio, "create_subprocess_exec", slow_setup)
    assert not alive(await _cancel_a_stuck_probe(tmp_path)), "the bwrap being set up was left running"
    sandbox.forget_probes()


if sys.platform != "linux":  # pragma: no cover
    pytestmark = [pytestmark, pytest.mark.skip(reason="the sandbox is Linux only")]
