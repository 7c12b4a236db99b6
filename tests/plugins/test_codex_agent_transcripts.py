"""Real ``codex app-server`` 0.171.0 sessions through the plugin.

Two sources, both used unchanged:

- ``shared/fixtures/real-peers/codex-app-server/`` (the project's captures: text, resume, tool,
  approval, a 500, SIGTERM during a tool), and
- ``tests/plugins/transcripts/codex/captured/`` (captured for this plugin from the same CLI against
  ``tests/fakes/model_api.py``: a 400, an unknown model, an HTML 502, a cut stream, a body that is no
  stream, a declined approval, an interrupt during a tool, an unknown thread id, reasoning; see the
  README there).

Each is checked twice: notification by notification through :class:`TurnMapper` (what the chat
gets from each), and end to end, the runner talking to ``fake_codex.py replay``, which plays the
recorded server messages back over a real pipe in answer to the runner's own requests.
"""

from __future__ import annotations

import importlib
import json
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from runner_kit import events as ev
from runners_cli.host import Identity, LocalHost
from runners_cli.plugins import find, load_runner_class
from tests.helpers import (
    failure,
    final_text,
    make_runner,
    real_peer_fixtures,
    rtype,
    run,
    state_updates,
    stored_key,
    terminal,
)

load_runner_class(find("codex-agent"))  # imports the plugin package the way the host does
mapping = importlib.import_module("codex_agent.mapping")
rpc = importlib.import_module("codex_agent.rpc")

REAL = real_peer_fixtures("codex-app-server")
CAPTURED = Path(__file__).parent / "transcripts" / "codex" / "captured"
FAKE = Path(__file__).resolve().parents[1] / "fakes" / "cli" / "fake_codex.py"
PLUGIN = "codex-agent"
THREAD_OF_TEXT = "01a22ae1-de67-7da3-8aae-6167ad771e81"  # the thread text.jsonl started, text-resume resumed

needs_real = pytest.mark.skipif(not REAL.is_dir(), reason=f"real-peer fixtures not found at {REAL}")


def rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def server_notes(path: Path) -> list[Any]:
    return [rpc.Notification(r["msg"]["method"], r["msg"].get("params") or {}) for r in rows(path)
            if r["dir"] == "<-" and "method" in r["msg"] and "id" not in r["msg"]]


def map_turn(path: Path, *, fresh: bool = True) -> tuple[Any, list[ev.Event]]:
    """Feed the recorded notifications of the session's (last) turn as the adapter does."""
    recorded = rows(path)
    thread = next((r["msg"]["result"]["thread"]["id"] for r in recorded
                   if r["dir"] == "<-" and isinstance(r["msg"].get("result"), dict) and "thread" in r["msg"]["result"]),
                  None)
    turn = next((r["msg"]["result"]["turn"]["id"] for r in recorded
                 if r["dir"] == "<-" and isinstance(r["msg"].get("result"), dict) and "turn" in r["msg"]["result"]),
                None)
    mapper = mapping.TurnMapper(thread, turn, mapping.UsageMeter(fresh_thread=fresh))
    events: list[ev.Event] = []
    for note in server_notes(path):
        events += mapper.feed(note)
    return mapper, events


def text(events: list[ev.Event]) -> str:
    return "".join(e.text for e in events if isinstance(e, ev.Text))


def only(events: list[ev.Event], kind: type) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


ALL = sorted([*(REAL.glob("*.jsonl") if REAL.is_dir() else []), *CAPTURED.glob("*.jsonl")])


@pytest.mark.parametrize("path", ALL, ids=[f"{p.parent.name}/{p.name}" for p in ALL])
def test_every_transcript_maps_to_kit_events_only(path):
    mapper, events = map_turn(path)
    assert all(isinstance(e, ev.Event.__args__) for e in events)  # type: ignore[attr-defined]
    if mapper.done and mapper.error is None and mapper.status == "completed":
        assert text(events), path.name
    shown = text(events)
    assert "Model metadata" not in shown and "deprecated" not in shown, "warnings are never answer text"


# --- notification by notification -------------------------------------------------------------------


@needs_real
def test_text_streams_token_deltas_and_counts_the_turn():
    mapper, events = map_turn(REAL / "text.jsonl")
    assert [e.text for e in only(events, ev.Text)] == ["Hello", " from", " the", " fake", " model."]
    (usage,) = only(events, ev.Usage)
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (10104, 7, 10111)
    assert mapper.done and mapper.status == "completed" and mapper.error is None
    (warning,) = [e for e in only(events, ev.Log) if "Model metadata" in e.text]
    assert warning.level == "warning"


@needs_real
def test_resumed_thread_counts_only_the_new_turn():
    """On resume Codex first repeats the count the thread ended with, under the old turn's id."""
    _, events = map_turn(REAL / "text-resume.jsonl", fresh=False)
    (usage,) = only(events, ev.Usage)
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (20287 - 10104, 7, 20301 - 10111)


@needs_real
def test_tool_turn_reports_the_command_and_sums_both_requests():
    _, events = map_turn(REAL / "tool-echo.jsonl")
    (started,) = only(events, ev.ToolStarted)
    (done,) = only(events, ev.ToolCompleted)
    assert started.name == "shell" and started.parameters["command"] == "echo hi"
    assert done.call_id == started.call_id and done.error is None and done.result["output"] == "hi\n"
    assert text(events) == "The tool ran; done."
    # one usage event per model request (as Codex reports them), summing to the turn's
    assert [u.total_tokens for u in only(events, ev.Usage)] == [10111, 20317 - 10111]
    assert events.index(started) < events.index(done) < events.index(only(events, ev.Text)[0])


@needs_real
def test_error_turn_fails_with_codex_words_and_a_retryable_code():
    mapper, events = map_turn(REAL / "err500.jsonl")
    assert mapper.status == "failed" and not text(events)
    assert (mapper.error.code, mapper.error.retryable) == ("upstream.unavailable", True)
    assert "high demand" in mapper.error.message


@needs_real
def test_killed_process_leaves_the_tool_open_and_the_turn_unfinished():
    mapper, events = map_turn(REAL / "sigterm-during-tool.jsonl")
    assert not mapper.done and only(events, ev.ToolStarted) and not only(events, ev.ToolCompleted)


@pytest.mark.parametrize("name, code", [
    ("err400.jsonl", "upstream.bad_request"),
    ("err404-model.jsonl", "upstream.not_found"),
    ("html502.jsonl", "upstream.unavailable"),
    ("truncated.jsonl", "upstream.unavailable"),
    ("invalid-json.jsonl", "upstream.unavailable"),
])
def test_captured_failures_map_to_the_taxonomy(name, code):
    mapper, events = map_turn(CAPTURED / name)
    assert mapper.status == "failed" and mapper.error is not None
    assert mapper.error.code == code, mapper.error.message
    assert "<html" not in mapper.error.message.lower(), "an HTML page is named, not pasted"
    if name == "truncated.jsonl":
        assert text(events) == "Hello", "what streamed before the cut is kept"
    if name == "err400.jsonl":
        assert "Invalid request." in mapper.error.message and '{"error"' not in mapper.error.message


def test_captured_unreachable_api_gives_up_after_the_configured_retries():
    """Codex 0.171.0 waits for the network without end; the mapper gives up after max-retries."""
    recorded = server_notes(CAPTURED / "connection-refused.jsonl")
    waits = [n for n in recorded if n.method == "error"]
    assert len(waits) == 2 and all(n.params["willRetry"] for n in waits)
    for retries, gives_up_at in ((0, 1), (1, 2), (2, None)):
        mapper, _ = map_turn(CAPTURED / "connection-refused.jsonl")
        mapper = mapping.TurnMapper(mapper.thread_id, mapper.turn_id, mapping.UsageMeter(fresh_thread=True),
                                    network_retries=retries)
        seen = 0
        for note in recorded:
            mapper.feed(note)
            seen += note.method == "error"
            if mapper.give_up is not None:
                break
        if gives_up_at is None:
            assert mapper.give_up is None
        else:
            assert seen == gives_up_at and mapper.give_up.code == "upstream.unavailable"
            assert "base-url" in mapper.give_up.message and "Connection failed" in mapper.give_up.message


def test_captured_interrupt_closes_the_running_tool():
    mapper, events = map_turn(CAPTURED / "interrupt-during-tool.jsonl")
    assert mapper.done and mapper.interrupted and mapper.error is None
    (started,) = only(events, ev.ToolStarted)
    (done,) = only(events, ev.ToolCompleted)
    assert started.parameters["command"] == "sleep 45 && echo done" and done.error == "stopped before it finished"


def test_captured_reasoning_is_think_text_before_the_answer():
    _, events = map_turn(CAPTURED / "reasoning.jsonl")
    assert "".join(e.text for e in only(events, ev.Think)) == "Let me think about this."
    assert text(events) == "Hello from the fake model."
    assert only(events, ev.Usage)[0].extra == {"reasoning_output_tokens": 2}


def test_captured_declined_command_is_a_failed_tool_and_the_turn_goes_on():
    _, events = map_turn(CAPTURED / "approval-decline.jsonl")
    (done,) = only(events, ev.ToolCompleted)
    assert done.error == "declined" and text(events) == "The tool ran; done."


# --- end to end over a pipe ------------------------------------------------------------------------------


def launcher(tmp_path: Path, *recordings: Path) -> str:
    """An executable that starts the replaying fake on these recordings (the runner adds app-server)."""
    script = tmp_path / "codex"
    files = " ".join(f"'{p}'" for p in recordings)
    script.write_text(f"#!/bin/sh\nexec '{sys.executable}' '{FAKE}' replay {files} \"$@\"\n", encoding="utf-8")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


def client_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


@pytest.fixture
def replay_env(tmp_path, monkeypatch):
    monkeypatch.setenv("RUNNER_KIT_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "client.jsonl"  # the replaying fake writes it (named through the `env` setting)


def cfg(exe: str, log: Path, **extra: Any) -> dict[str, Any]:
    return {"executable": exe, "base-url": "http://127.0.0.1:9/v1", "api-key": "sk-replay-key", "model": "fake-model",
            "advanced-settings": True, "env": f"FAKE_CODEX_CLIENT_LOG={log}", "langbot-tools": False, **extra}


def _host() -> LocalHost:
    return LocalHost(runner_id=find(PLUGIN).runner_id)


@needs_real
async def test_replayed_text_session_answers_and_keeps_the_thread(tmp_path, replay_env):
    host = _host()
    results = await run(make_runner(PLUGIN, host), host, "say hello",
                        config=cfg(launcher(tmp_path, REAL / "text.jsonl"), replay_env))
    assert rtype(terminal(results)) == "run.completed", terminal(results).data
    assert final_text(results) == "Hello from the fake model."
    assert list(state_updates(results).values()) == [THREAD_OF_TEXT]
    assert terminal(results).usage.total_tokens == 10111
    sent = client_lines(replay_env)
    assert [m.get("method") for m in sent] == ["initialize", "initialized", "thread/start", "turn/start"]
    assert all("jsonrpc" not in m for m in sent), "Codex's wire format has no jsonrpc member"
    start = sent[2]["params"]
    assert start["sandbox"] == "workspace-write" and start["approvalPolicy"] == "never" and start["cwd"]
    assert sent[3]["params"]["input"] == [{"type": "text", "text": "say hello", "text_elements": []}]


@needs_real
async def test_replayed_resume_sends_the_stored_thread_and_its_policy(tmp_path, replay_env):
    host = _host()
    ident = Identity()
    key = host.scope_key(ident, "conversation")
    host.store.set(key, stored_key("codex.thread_id", ident, source="conversation"), THREAD_OF_TEXT)
    results = await run(make_runner(PLUGIN, host), host, "say hello again", identity=ident,
                        config=cfg(launcher(tmp_path, REAL / "text-resume.jsonl"), replay_env,
                                   **{"permission-mode": "read-only"}))
    assert final_text(results) == "Hello from the fake model."
    assert not state_updates(results), "the same thread: nothing new to store"
    resume = client_lines(replay_env)[2]
    assert resume["method"] == "thread/resume" and resume["params"]["threadId"] == THREAD_OF_TEXT
    assert resume["params"]["sandbox"] == "read-only" and resume["params"]["approvalPolicy"] == "never"
    assert terminal(results).usage.total_tokens == 20301 - 10111


@needs_real
async def test_replayed_unknown_thread_starts_a_fresh_one_with_the_notice(tmp_path, replay_env):
    host = _host()
    ident = Identity()
    host.store.set(host.scope_key(ident, "conversation"), stored_key("codex.thread_id", ident, source="conversation"),
                   "01a22ae1-0000-7000-8000-000000000000")
    exe = launcher(tmp_path, CAPTURED / "resume-unknown-id.jsonl", REAL / "text.jsonl")
    results = await run(make_runner(PLUGIN, host), host, "hi", identity=ident, config=cfg(exe, replay_env))
    assert rtype(terminal(results)) == "run.completed", terminal(results).data
    notice, _, answer = final_text(results).partition("\n\n")
    assert "new one" in notice and answer == "Hello from the fake model."
    assert list(state_updates(results).values()) == [THREAD_OF_TEXT]
    methods = [m.get("method") for m in client_lines(replay_env)]
    assert methods == ["initialize", "initialized", "thread/resume", "thread/start", "turn/start"], "one process"


@needs_real
@pytest.mark.parametrize("mode, decision", [("workspace-write", "decline"), ("full-access", "accept")])
async def test_replayed_approval_request_is_answered_by_the_permission_mode(tmp_path, replay_env, mode, decision):
    """The recorded command runs in /srv/peers/work, outside this run's workspace."""
    host = _host()
    exe = launcher(tmp_path, REAL / "tool-approval.jsonl")
    results = await run(make_runner(PLUGIN, host), host, "say hello",
                        config=cfg(exe, replay_env, **{"permission-mode": mode}))
    assert final_text(results) == "The tool ran; done."
    (answer,) = [m for m in client_lines(replay_env) if m.get("id") == 0 and "result" in m]
    assert answer["result"] == {"decision": decision}
    logged = [r.data["text"] for r in results if rtype(r) == "processor.log" and "approve" in r.data["text"]]
    assert logged and ("accepted" if decision == "accept" else "declined") in logged[0]


@needs_real
async def test_replayed_error_turn_is_explained_and_failed(tmp_path, replay_env):
    host = _host()
    results = await run(make_runner(PLUGIN, host), host, "say hello",
                        config=cfg(launcher(tmp_path, REAL / "err500.jsonl"), replay_env))
    code, retryable, message = failure(results)
    assert (code, retryable) == ("upstream.unavailable", True) and "high demand" in message


@needs_real
async def test_replayed_kill_during_a_tool_is_a_crash(tmp_path, replay_env):
    host = _host()
    results = await run(make_runner(PLUGIN, host), host, "say hello",
                        config=cfg(launcher(tmp_path, REAL / "sigterm-during-tool.jsonl"), replay_env))
    code, retryable, message = failure(results)
    assert (code, retryable) == ("process.crashed", True) and "SIGTERM" in message
    tools = [r for r in results if rtype(r) in ("tool.call.started", "tool.call.completed")]
    assert [rtype(r) for r in tools] == ["tool.call.started"]
