"""The real claude 2.1.197 transcripts (shared/fixtures/real-peers/claude/, unchanged) through the
plugin's stream reader: what the chat would get from each, line by line as the CLI printed it."""

from __future__ import annotations

import importlib
import json
from typing import Any

import pytest

from runner_kit import events as ev
from runner_kit.errors import RunnerError, SessionMissing
from runner_kit.inputs import UserInput
from runners_cli.plugins import find, load_runner_class
from tests.helpers import real_peer_fixtures

load_runner_class(find("claude-code-agent"))  # imports the plugin package the way the host does
TurnReader = importlib.import_module("claude_code_agent.stream").TurnReader
ClaudeCodeAdapter = importlib.import_module("claude_code_agent.adapter").ClaudeCodeAdapter

REAL = real_peer_fixtures("claude")
pytestmark = pytest.mark.skipif(not REAL.is_dir(), reason=f"real-peer fixtures not found at {REAL}")


def lines(name: str) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in (REAL / name).read_text(encoding="utf-8").splitlines() if raw.strip()]


def read_turns(objs: list[dict[str, Any]], interrupted: bool = False) -> list[tuple[TurnReader, list[ev.Event]]]:
    """Feed stdout lines as the adapter does: one reader per turn, a new one after each result."""
    turns: list[tuple[TurnReader, list[ev.Event]]] = []
    reader, events = TurnReader(interrupted=interrupted), []
    for obj in objs:
        events += reader.feed(obj)
        if reader.done:
            turns.append((reader, events))
            reader, events = TurnReader(interrupted=interrupted), []
    if events or not turns:
        turns.append((reader, events))
    return turns


def text(events: list[ev.Event]) -> str:
    return "".join(e.text for e in events if isinstance(e, ev.Text))


def only(events: list[ev.Event], kind: type) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


@pytest.mark.parametrize("name", sorted(p.name for p in REAL.glob("*.jsonl") if ".traffic" not in p.name)
                         if REAL.is_dir() else [])
def test_every_real_transcript_parses(name):
    for reader, events in read_turns(lines(name)):
        assert all(isinstance(e, ev.Event.__args__) for e in events)  # type: ignore[attr-defined]
        if reader.error is None and reader.done:
            assert text(events) or only(events, ev.FinalText), name


def test_text_without_partial_messages_comes_from_the_assistant_line():
    [(reader, events)] = read_turns(lines("text.jsonl"))
    assert text(events) == "Hello from the fake model."
    assert only(events, ev.SessionId)[0].value == "11111111-2222-4333-8444-555555555555"
    usage = only(events, ev.Usage)[0]
    assert (usage.prompt_tokens, usage.completion_tokens) == (19078, 7)
    assert usage.extra["num_turns"] == 1 and usage.extra["cost_usd"] > 0
    assert reader.error is None and reader.finish_reason == "stop"


def test_partial_messages_stream_tokens_and_are_not_counted_twice():
    [(reader, events)] = read_turns(lines("text-partial.jsonl"))
    pieces = [e.text for e in only(events, ev.Text)]
    assert pieces == ["Hello", " from", " the", " fake", " model."]  # the assistant line adds nothing
    assert not only(events, ev.FinalText)
    assert only(events, ev.Usage)[0].completion_tokens == 7  # result's count, not message_start's 1


def test_resume_keeps_the_session_id():
    [(_, events)] = read_turns(lines("text-resume.jsonl"))
    assert {e.value for e in only(events, ev.SessionId)} == {"11111111-2222-4333-8444-555555555555"}
    assert text(events) == "Hello from the fake model."


def test_tool_turn_reports_the_bash_call_and_its_output():
    [(reader, events)] = read_turns(lines("tool-echo.jsonl"))
    [started] = only(events, ev.ToolStarted)
    assert (started.call_id, started.name, started.parameters["command"]) == ("toolu_fake0005", "Bash", "echo hi")
    [done] = only(events, ev.ToolCompleted)
    assert (done.call_id, done.name, done.result, done.error) == ("toolu_fake0005", "Bash", "hi", None)
    assert text(events) == "The tool ran; done."
    assert events.index(started) < events.index(done)
    assert only(events, ev.Usage)[0].extra["num_turns"] == 2


def test_denied_tool_is_a_tool_error_and_a_counted_denial_not_a_failure():
    [(reader, events)] = read_turns(lines("toolw-default-perms.jsonl"))
    [done] = only(events, ev.ToolCompleted)
    assert done.error and "was blocked" in done.error
    assert reader.error is None and text(events) == "The tool ran; done."
    assert only(events, ev.Usage)[0].extra["permission_denials"] == 1


@pytest.mark.parametrize(
    ("name", "code", "shown"),
    [
        ("err401-maxretries0.jsonl", "upstream.auth", "Invalid API key"),
        ("err401-default.jsonl", "upstream.auth", "Invalid API key"),
        ("err429-maxretries0.jsonl", "upstream.rate_limited", "fake rate limit"),
        ("err500-maxretries0.jsonl", "upstream.unavailable", "fake internal error"),
        ("err500-maxretries2.jsonl", "upstream.unavailable", "fake internal error"),
    ],
)
def test_api_errors_are_failures_with_the_clis_words_never_answer_text(name, code, shown):
    [(reader, events)] = read_turns(lines(name))
    assert isinstance(reader.error, RunnerError), name
    assert reader.error.code == code and shown in reader.error.message
    assert f"HTTP {reader.result['api_error_status']}" in reader.error.message
    assert not text(events) and not only(events, ev.FinalText)  # the error text is not the answer
    assert not only(events, ev.Usage)  # all zero: nothing was measured


def test_retries_show_as_progress():
    [(_, events)] = read_turns(lines("err500-maxretries2.jsonl"))
    progress = only(events, ev.Progress)
    assert len(progress) == 2 and "500" in progress[0].text


def test_unknown_resume_id_is_session_missing_and_not_kept():
    [(reader, events)] = read_turns(lines("resume-unknown-id.jsonl"))
    assert isinstance(reader.error, SessionMissing)
    assert not only(events, ev.SessionId)


def test_sigint_during_tool_ends_the_turn_quietly_when_we_interrupted():
    [(reader, events)] = read_turns(lines("sigint-during-tool.jsonl"), interrupted=True)
    assert reader.done and reader.error is None
    [done] = only(events, ev.ToolCompleted)
    assert done.error and "doesn't want to proceed" in done.error
    [(reader, _)] = read_turns(lines("sigint-during-tool.jsonl"))
    assert isinstance(reader.error, RunnerError)  # a stop nobody asked for is a failure


@pytest.mark.parametrize("name", ["sigterm-midstream.jsonl", "sigterm-during-tool.jsonl"])
def test_killed_cli_leaves_an_unfinished_turn(name):
    [(reader, events)] = read_turns(lines(name))
    assert not reader.done  # the adapter reports the exit (process.exited / process.crashed)
    if name == "sigterm-midstream.jsonl":
        assert text(events) == "Hello"


def test_two_turns_on_one_process_are_two_answers():
    turns = read_turns(lines("stdin-stream-json-2turns.jsonl"))
    assert len(turns) == 2
    assert [text(e) for _, e in turns] == ["Hello from the fake model."] * 2
    assert turns[0][0].session_id == turns[1][0].session_id
    # each result's usage is that turn's own (19078 then 19117 input tokens)
    assert [only(e, ev.Usage)[0].prompt_tokens for _, e in turns] == [19078, 19117]


def test_stdin_traffic_lines_are_the_sdk_shape_the_adapter_writes():
    sent = [json.loads(raw)["line"] for raw in (REAL / "stdin-stream-json-2turns.traffic.jsonl").read_text().splitlines()
            if raw.strip() and json.loads(raw)["dir"] == "in"]
    adapter = ClaudeCodeAdapter.__new__(ClaudeCodeAdapter)
    adapter.workspace = None
    ours = adapter.user_line(UserInput(text="say hello", files=[], params={}))
    assert ours == sent[0]


def test_json_output_result_alone_still_answers():
    [(_, events)] = read_turns(lines("text-json.jsonl"))
    assert [e.text for e in only(events, ev.FinalText)] == ["Hello from the fake model."]
