"""Issue 29 on the real LangBot 4.11.2: a chat member gets nothing the run was not granted. Two
conversations with one coding agent (claude-code-agent driving the scripted ``claude``, default
``isolation``: a bubblewrap sandbox per conversation) behind one pipeline: what the first
conversation's agent wrote into its workspace cannot be read from the second, whatever command its
model runs, while the first conversation still reads its own file on its next turn.

The plugin runs in LangBot's plugin worker, which the runtime starts with an empty environment; so
the scripted CLI (a Python script under tests/fakes/cli) is made readable inside the sandbox the way
an owner would do it, with the runner's ``sandbox-read-paths`` setting (the tests folder and the
Python install), not with environment variables.

The fake model echoes each tool result back as its answer (as models commonly quote what a command
printed), so whatever the command could read reaches the chat, the run's events and the model's next
request: each of the three is checked.
"""

from __future__ import annotations

import json
import re
import secrets
import shutil
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runner_kit.process import data_root
from runners_cli.plugins import find
from tests.e2e.harness import RUN_TERMINAL, Chat, Host, is_host_notice, say, wait_for, ws_turns
from tests.fakes.model_api import FakeModelAPI

pytestmark = [pytest.mark.slow, pytest.mark.langbot, pytest.mark.timeout(900)]

PLUGIN = find("claude-code-agent")
TESTS = Path(__file__).resolve().parents[1]
FAKE_CLAUDE = TESTS / "fakes" / "cli" / "fake_claude.py"
KEY = "sk-ant-e2e-isolation-" + secrets.token_hex(8)
#: the runtime starts plugin workers with an empty environment: this is where their data is
AGENT_DATA = data_root({}) / "claude-code"

WRITE = "please write the note"
SNOOP = "please look around"
READ = "please read the note back"
SNOOP_COMMAND = "ls ..; cat ../*/notes.txt; find / -name notes.txt 2>/dev/null | head"


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(str(b.get("text") or "") if b.get("type") == "text" else _text(b.get("content"))
                   for b in content if isinstance(b, dict)) if isinstance(content, list) else ""


def _latest(messages: Any) -> tuple[str, str | None]:
    """The latest user prompt's text, and the tool result that followed it (None: not yet)."""
    prompt, result = "", None
    for msg in messages if isinstance(messages, list) else []:
        if not isinstance(msg, dict) or msg.get("role") != "user":
            continue
        blocks = msg.get("content") if isinstance(msg.get("content"), list) else []
        results = [b for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result"]
        if results:
            result = "\n".join(_text(b.get("content")) for b in results)
        else:
            prompt, result = _text(msg.get("content")), None
    return prompt, result


class ToolModel(FakeModelAPI):
    """The shared fake Anthropic API, scripted per prompt: a prompt containing one of ``commands``'
    keys gets one Bash call running that command; once its result is in, the answer is the result."""

    commands: dict[str, str] = {}

    def _plan(self, api: str, req: Any) -> Any:
        plan = super()._plan(api, req)
        if plan is None:
            return None
        try:
            body = req.json()
        except ValueError:
            return plan
        prompt, result = _latest(body.get("messages") if isinstance(body, dict) else None)
        plan.tool_command = next((c for k, c in self.commands.items() if k in prompt), None)
        if result is not None:
            plan.tool_command = None
            plan.tokens = ["Tool output:\n", result or "(nothing)"]
        return plan


@pytest.fixture(scope="module")
def claude_installed(langbot: Host) -> Host:
    langbot.ensure_plugin(PLUGIN)
    return langbot


@pytest.fixture
def model() -> Iterator[ToolModel]:
    before = set(AGENT_DATA.glob("*/*"))
    with ToolModel(api_keys={KEY}) as api:
        yield api
    for made in set(AGENT_DATA.glob("*/*")) - before:  # this test's workspaces and HOMEs
        shutil.rmtree(made, ignore_errors=True)


def _config(api: ToolModel, **extra: Any) -> dict[str, Any]:
    read = "\n".join(dict.fromkeys([str(TESTS), sys.base_prefix, sys.prefix]))
    return {"executable": str(FAKE_CLAUDE), "base-url": api.anthropic_base_url(), "api-key": KEY,
            "permission-mode": "full-access", "timeout": 180, "advanced-settings": True, "max-retries": 0,
            "sandbox-read-paths": read, **extra}


def _own(chat: Chat) -> Chat:
    """The frames of this connection's own turn. LangBot 4.11.2's WebUI websocket sends every
    message of a pipeline's person chat to each of its open connections (``broadcast_to_pipeline``
    in ``websocket_adapter.py``; the runner still gets one conversation per connection), so what
    another connection's turn sent while this one waited comes first: keep what follows this
    connection's own message."""
    start = max((i for i, f in enumerate(chat.frames) if f.get("type") == "user_message"
                 and (f.get("data") or {}).get("connection_id") == chat.connection_id), default=0)
    return Chat(chat.connection_id, chat.frames[start:])


def _reply(chat: Chat) -> str:
    chat = _own(chat)
    shown = [r["content"] for r in chat.shown()]
    assert shown and chat.final() is not None, f"no finished reply: {chat.frames}"
    assert not any(is_host_notice(s) for s in shown), f"the run failed: {shown}"
    return "\n".join(shown)


def _workspace(reply: str) -> Path:
    """The workspace path ``pwd`` printed (the same path inside the sandbox as outside)."""
    found = re.search(re.escape(str(AGENT_DATA / "workspaces")) + r"/[0-9a-f]+", reply)
    assert found, f"no workspace path in {reply!r}"
    return Path(found.group(0))


def _run_events(host: Host, chat: Chat, runs: int) -> tuple[str, list[str]]:
    """The conversation's ``runs``-th run, once finished: its events as JSON, and their types."""
    def finished() -> dict[str, Any] | None:
        rows = host.runs(chat.conversation_id)
        return rows[-1] if len(rows) == runs and rows[-1]["status"] in RUN_TERMINAL else None

    run = wait_for(f"run {runs} of {chat.conversation_id} to finish", finished, 30, interval=0.2)
    assert run["status"] == "completed", run
    events = host.run_events(run["run_id"])
    return json.dumps(events, ensure_ascii=False), [e["type"] for e in events]


def _model_saw(api: ToolModel, prompt: str) -> list[str]:
    """The tool results the model was sent after ``prompt`` (the command's output as the agent got it)."""
    out = []
    for r in api.model_requests():
        latest, result = _latest(r.body.get("messages"))
        if prompt in latest and result is not None:
            out.append(result)
    return out


def test_a_second_conversation_cannot_read_what_the_first_wrote(
        claude_installed: Host, model: ToolModel, journey: Any) -> None:
    journey("claude-code-agent", "sandbox_isolation")
    host = claude_installed
    marker = f"MARKER-{uuid.uuid4().hex}"
    model.commands = {WRITE: f"echo {marker} > notes.txt && pwd", SNOOP: SNOOP_COMMAND, READ: "cat notes.txt"}
    model.token_delay = 0.0
    pipeline = host.create_pipeline(f"isolation-{uuid.uuid4().hex[:6]}", _config(model), PLUGIN.runner_id)
    seen: dict[str, Any] = {}

    def other_conversation(i: int) -> None:
        """Between conversation 1's two turns, a different chat session asks its agent to look around."""
        (snoop,) = ws_turns(host, pipeline, [SNOOP], timeout=180)
        seen["snoop"] = snoop

    first, again = ws_turns(host, pipeline, [WRITE, READ], timeout=180, between=other_conversation)
    snoop = seen["snoop"]
    assert snoop.conversation_id != first.conversation_id

    wrote = _reply(first)
    say(f"conversation 1 wrote its note: {wrote!r}")
    workspace = _workspace(wrote)
    assert (workspace / "notes.txt").read_text().strip() == marker, "the note is in conversation 1's workspace"

    snooped = _reply(snoop)
    say(f"conversation 2 looked around: {snooped!r}")
    assert "Tool output:" in snooped, snooped
    assert marker not in snooped, "conversation 2's agent read conversation 1's note"
    assert workspace.name not in snooped, "conversation 2's agent saw conversation 1's workspace"
    listed = snooped.split("\n")[1:]
    listed = listed[: next((i for i, line in enumerate(listed) if line.startswith("cat:")), len(listed))]
    assert len(listed) == 1 and re.fullmatch(r"[0-9a-f]+", listed[0]), f"`ls ..` shows only its own workspace: {listed}"
    events, types = _run_events(host, snoop, 1)
    assert "tool.call.completed" in types, types
    assert marker not in events, "conversation 1's note is in conversation 2's run events"
    (result,) = _model_saw(model, SNOOP)
    assert marker not in result and workspace.name not in result, result

    read = _reply(again)
    say(f"conversation 1 read its note back: {read!r}")
    assert marker in read, "conversation 1 can still read its own file"
    assert marker in _model_saw(model, READ)[-1]
    events, _ = _run_events(host, again, 2)
    assert marker in events, "the tool result is in conversation 1's run events"
    assert len(host.runs(first.conversation_id)) == 2 and len(host.runs(snoop.conversation_id)) == 1


def test_the_same_look_around_without_the_sandbox_reads_the_note(
        claude_installed: Host, model: ToolModel, journey: Any) -> None:
    """The control for the test above: with ``isolation: none`` (the owner's unsafe opt-out), the
    same kind of command from another conversation does read the note, so that test's probe sees a
    leak when there is one. (``cat`` only: a ``find /`` over the whole unconfined host is slow.)"""
    journey("claude-code-agent", "no_isolation_control")
    host = claude_installed
    marker = f"MARKER-{uuid.uuid4().hex}"
    model.commands = {WRITE: f"echo {marker} > notes.txt && pwd", SNOOP: "ls ..; cat ../*/notes.txt"}
    model.token_delay = 0.0
    pipeline = host.create_pipeline(f"isolation-none-{uuid.uuid4().hex[:6]}", _config(model, isolation="none"),
                                    PLUGIN.runner_id)
    (first,) = ws_turns(host, pipeline, [WRITE], timeout=180)
    workspace = _workspace(_reply(first))
    assert (workspace / "notes.txt").read_text().strip() == marker
    (snoop,) = ws_turns(host, pipeline, [SNOOP], timeout=180)
    snooped = _reply(snoop)
    say(f"unconfined conversation 2 looked around: {snooped[:300]!r}")
    assert marker in snooped and workspace.name in snooped, snooped
