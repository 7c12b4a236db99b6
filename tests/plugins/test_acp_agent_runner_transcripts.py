"""The real ACP agents' traffic (fixtures/real-peers/{codex-acp,claude-code-acp,acp-echo-agent}, read
unchanged from the shared fixtures) replayed into the adapter's client side.

Every agent → client message goes through the ``acp`` library's own client router (the code that
handles it on the wire) into the adapter; every result is parsed with the library's response model
of the request it answers; every error is mapped as the adapter maps a JSON-RPC error. Asserted:
what a user would see — the answer text (codex-acp's model-metadata warning dropped, the history
``session/load`` replays not repeated), tool steps, usage, stop reasons, permission answers, error
codes."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from acp import RequestError
from acp.client.router import build_client_router
from acp.schema import InitializeResponse, NewSessionResponse, PromptResponse, RequestPermissionResponse

from runner_kit import events as ev
from runner_kit.errors import Redactor, RunnerError
from tests.helpers import real_peer_fixtures

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "acp-agent-runner"))
from acp_agent_runner.adapter import ACPAdapter, ACPClient, _Turn  # noqa: E402
from acp_agent_runner.errors import map_request_error  # noqa: E402

AGENTS = ("codex-acp", "claude-code-acp", "acp-echo-agent")
ALL = sorted((a, p.stem) for a in AGENTS for p in real_peer_fixtures(a).glob("*.jsonl"))
# every test here replays the shared captures: without them (a clone not beside ../shared) say so
pytestmark = pytest.mark.skipif(
    not all(real_peer_fixtures(a).is_dir() for a in AGENTS),
    reason=f"real-peer fixtures not found under {real_peer_fixtures('').parent}",
)


def _adapter(mode: str = "workspace-write", workspace: str = "/srv/peers/work") -> ACPAdapter:
    env = SimpleNamespace(config={"permission-mode": mode}, redact=Redactor(), session=SimpleNamespace(current=None))
    adapter = ACPAdapter(env)
    adapter.workspace = Path(workspace)
    return adapter


class Replay:
    """What one transcript did to the adapter."""

    def __init__(self) -> None:
        self.events: list[ev.Event] = []
        self.permissions: list[RequestPermissionResponse] = []
        self.error: RunnerError | None = None
        self.init: InitializeResponse | None = None
        self.dropped_before_prompt = 0


async def replay(agent: str, name: str, mode: str = "workspace-write") -> Replay:
    adapter = _adapter(mode)
    router = build_client_router(ACPClient(adapter), use_unstable_protocol=True)
    out = Replay()
    pending: dict[Any, str] = {}  # request id -> method, client → agent
    turn: _Turn | None = None
    for line in (real_peer_fixtures(agent) / f"{name}.jsonl").read_text().splitlines():
        rec = json.loads(line)
        msg = rec["msg"]
        if rec["dir"] == "->":
            if "method" in msg and "id" in msg:
                pending[msg["id"]] = msg["method"]
            if msg.get("method") == "session/prompt":
                turn = adapter._turn = _Turn()
            continue
        if "method" in msg:  # agent → client request or notification, handled as on the wire
            if adapter._turn is None and msg["method"] == "session/update":
                out.dropped_before_prompt += 1
            result = await router(msg["method"], msg.get("params"), "id" not in msg)
            if msg["method"] == "session/request_permission":
                out.permissions.append(result)
            continue
        method = pending.pop(msg["id"], None)
        if "error" in msg:
            err = msg["error"]
            out.error = map_request_error(RequestError(err["code"], err["message"], err.get("data")), method or "?")
            continue
        result = msg.get("result")
        if method == "initialize":
            out.init = InitializeResponse.model_validate(result)
            adapter.caps = out.init.agent_capabilities
        elif method in ("session/new",):
            adapter.session_id = NewSessionResponse.model_validate(result).session_id
        elif method in ("session/load", "session/resume"):
            adapter.session_id = next(json.loads(x)["msg"]["params"]["sessionId"]
                                      for x in (real_peer_fixtures(agent) / f"{name}.jsonl").read_text().splitlines()
                                      if json.loads(x)["msg"].get("method") == method)
        elif method == "session/prompt":
            assert turn is not None
            while not turn.queue.empty():
                out.events.append(turn.queue.get_nowait())
            out.events.extend(adapter._finish(PromptResponse.model_validate(result), turn))
            adapter._turn = None
    if turn is not None:
        while not turn.queue.empty():
            out.events.append(turn.queue.get_nowait())
    return out


def text(r: Replay) -> str:
    return "".join(e.text for e in r.events if isinstance(e, ev.Text))


def meta(r: Replay, key: str) -> Any:
    if key == "finish_reason":  # the run's finish_reason, from ev.Finish
        return next((e.reason for e in reversed(r.events) if isinstance(e, ev.Finish)), None)
    return next((e.value for e in r.events if isinstance(e, ev.Meta) and e.key == key), None)


@pytest.mark.parametrize(("agent", "name"), ALL, ids=[f"{a}/{n}" for a, n in ALL])
async def test_every_real_transcript_parses(agent, name):
    r = await replay(agent, name)
    assert r.init is not None and r.init.protocol_version == 1
    assert all(not isinstance(e, ev.Text) or "Model metadata" not in e.text for e in r.events)


async def test_codex_acp_text_drops_the_model_metadata_warning():
    r = await replay("codex-acp", "text-new")
    assert text(r) == "Hello from the fake model."
    assert any(isinstance(e, ev.Log) and "Model metadata for `fake-model`" in e.text for e in r.events)
    # its usage_update (used 10853 of 258400) is the context window's fill, not the turn's usage
    assert not [e for e in r.events if isinstance(e, ev.Usage)]
    assert meta(r, "finish_reason") == "stop"


@pytest.mark.parametrize(("agent", "name"), [("codex-acp", "text-load"), ("claude-code-acp", "text-load"),
                                              ("acp-echo-agent", "load")])
async def test_history_replayed_by_session_load_is_not_answer_text(agent, name):
    r = await replay(agent, name)
    assert r.dropped_before_prompt >= 2
    assert text(r) in ("Hello from the fake model.", "echo: say hello again")


async def test_codex_acp_tool_call_becomes_tool_events():
    r = await replay("codex-acp", "tool-echo")
    started = [e for e in r.events if isinstance(e, ev.ToolStarted)]
    done = [e for e in r.events if isinstance(e, ev.ToolCompleted)]
    assert [(s.name, s.parameters["command"]) for s in started] == [("shell", "echo hi")]
    assert "call_id" not in started[0].parameters and "turn_id" not in started[0].parameters
    assert len(done) == 1 and done[0].error is None and done[0].call_id == started[0].call_id
    assert text(r) == "The tool ran; done."


async def test_claude_code_acp_announces_a_call_twice_but_it_is_one_tool_step():
    r = await replay("claude-code-acp", "tool-echo")
    started = [e for e in r.events if isinstance(e, ev.ToolStarted)]
    done = [e for e in r.events if isinstance(e, ev.ToolCompleted)]
    assert [(s.name, s.parameters.get("command")) for s in started] == [("Bash", "echo hi")]
    assert [d.result for d in done] == ["hi"]
    assert text(r) == "The tool ran; done."


@pytest.mark.parametrize(("mode", "codex", "claude"), [
    ("workspace-write", "approved", "allow"),
    ("full-access", "approved", "allow"),
    ("read-only", "abort", "reject"),
])
async def test_permission_requests_are_answered_by_the_mode_with_the_agents_own_options(mode, codex, claude):
    for agent, expect in (("codex-acp", codex), ("claude-code-acp", claude)):
        r = await replay(agent, "tool-approval", mode)
        assert [p.outcome.option_id for p in r.permissions] == [expect], (agent, mode)


async def test_cancel_midstream_keeps_the_text_and_says_cancelled():
    for agent in ("codex-acp", "claude-code-acp"):
        r = await replay(agent, "cancel-midstream")
        assert meta(r, "stop_reason") == "cancelled" and meta(r, "finish_reason") == "cancelled", agent


@pytest.mark.parametrize(("agent", "words"), [("codex-acp", "high demand"), ("claude-code-acp", "API Error: 500")])
async def test_prompt_errors_map_to_unavailable_with_the_agents_words(agent, words):
    r = await replay(agent, "err500")
    assert r.error is not None
    assert (r.error.code, r.error.retryable) == ("upstream.unavailable", True)
    assert words in r.error.message


async def test_claude_code_acp_as_root_without_is_sandbox_fails_session_new_clearly():
    r = await replay("claude-code-acp", "root-without-IS_SANDBOX")
    assert r.error is not None and "Query closed before response received" in r.error.message
