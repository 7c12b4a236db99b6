"""The scripted claude speaks the real CLI's stream-json (shapes from shared/fixtures/real-peers/claude/)
against the fake Anthropic Messages API: flags, sessions on disk, several turns per process, the
control interrupt, and the signals of real-peers.md §6."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runner_kit.process import alive, descendants
from tests.fakes.model_api import FakeModelAPI

FAKE = str(Path(__file__).resolve().parents[1] / "fakes" / "cli" / "fake_claude.py")
STREAM = ["-p", "--output-format", "stream-json", "--verbose"]
STDIN = [*STREAM, "--input-format", "stream-json", "--include-partial-messages"]


@pytest.fixture
def api():
    srv = FakeModelAPI()
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def env(api, tmp_path):
    (tmp_path / "work").mkdir()
    return {"PATH": os.environ["PATH"], "HOME": str(tmp_path / "home"), "ANTHROPIC_API_KEY": api.api_key,
            "ANTHROPIC_BASE_URL": api.anthropic_base_url(), "CLAUDE_CODE_MAX_RETRIES": "0"}


def claude(args, env, cwd, stdin: str | None = None, timeout: float = 15) -> tuple[list[dict], str, int]:
    p = subprocess.run([sys.executable, FAKE, *args], input=(stdin or "").encode(), capture_output=True, env=env,
                       cwd=cwd, timeout=timeout)
    lines = [json.loads(raw) for raw in p.stdout.decode().splitlines() if raw.strip()]
    return lines, p.stderr.decode(), p.returncode


def user(text: str) -> str:
    return json.dumps({"type": "user", "session_id": "", "message": {"role": "user", "content": [
        {"type": "text", "text": text}]}, "parent_tool_use_id": None}) + "\n"


def kinds(lines) -> list[str]:
    return [ln["type"] + (f"/{ln['subtype']}" if ln.get("subtype") else "") for ln in lines]


def test_text_turn_has_the_real_line_sequence_and_headers(api, env, tmp_path):
    lines, err, rc = claude([*STREAM, "say hello"], env, tmp_path / "work")
    assert rc == 0 and not err
    assert kinds(lines) == ["system/init", "assistant", "result/success"]
    assert lines[1]["message"]["content"] == [{"type": "text", "text": "Hello from the fake model."}]
    assert lines[1]["message"]["usage"]["output_tokens"] == 1  # message_start's, like the real CLI
    assert lines[-1]["usage"]["output_tokens"] == 7 and lines[-1]["result"] == "Hello from the fake model."
    [req] = api.model_requests()
    assert req.headers["x-fake-agent-pid"].isdigit() and req.headers["x-api-key"] == api.api_key
    assert req.headers["x-claude-code-session-id"] == lines[0]["session_id"]
    assert any(r.method == "HEAD" for r in api.requests), "the pre-connect probe"


def test_partial_messages_wrap_each_sse_event_and_put_the_assistant_line_before_block_stop(api, env, tmp_path):
    lines, _, rc = claude([*STREAM, "--include-partial-messages", "hi"], env, tmp_path / "work")
    assert rc == 0
    events = [ln["event"]["type"] if ln["type"] == "stream_event" else ln["type"] for ln in lines]
    assert events[:4] == ["system", "system", "message_start", "content_block_start"]
    assert events.index("assistant") == events.index("content_block_stop") - 1
    deltas = [ln["event"]["delta"]["text"] for ln in lines if ln["type"] == "stream_event"
              and ln["event"]["type"] == "content_block_delta"]
    assert "".join(deltas) == "Hello from the fake model."


def test_stream_json_needs_verbose(env, tmp_path):
    _, err, rc = claude(["-p", "--output-format", "stream-json", "hi"], env, tmp_path / "work")
    assert rc == 1 and "requires --verbose" in err


def test_sessions_resume_by_id_from_the_same_cwd_only(api, env, tmp_path):
    sid = "11111111-2222-4333-8444-555555555555"
    lines, _, rc = claude([*STREAM, "--session-id", sid, "one"], env, tmp_path / "work")
    assert rc == 0 and lines[0]["session_id"] == sid
    _, err, rc = claude([*STREAM, "--session-id", sid, "again"], env, tmp_path / "work")
    assert rc == 1 and f"Session ID {sid} is already in use" in err
    lines, _, rc = claude([*STREAM, "--resume", sid, "two"], env, tmp_path / "work")
    assert rc == 0 and lines[-1]["session_id"] == sid
    assert len(api.model_requests()[-1].body["messages"]) == 3
    (tmp_path / "other").mkdir()
    lines, err, rc = claude([*STREAM, "--resume", sid, "three"], env, tmp_path / "other")
    assert rc == 1 and "No conversation found with session ID" in err
    assert kinds(lines) == ["result/error_during_execution"] and lines[0]["errors"]


def test_tool_runs_for_real_under_the_permission_mode(api, env, tmp_path):
    api.tool_command = "touch made.txt"
    work = tmp_path / "work"
    lines, _, _ = claude([*STREAM, "x"], env, work)
    assert not (work / "made.txt").exists() and lines[-1]["permission_denials"]
    tool_result = next(ln for ln in lines if ln["type"] == "user")["message"]["content"][0]
    assert tool_result["is_error"] is True
    lines, _, rc = claude([*STREAM, "--permission-mode", "acceptEdits", "x"], env, work)
    assert rc == 0 and (work / "made.txt").exists() and not lines[-1]["permission_denials"]
    assert kinds(lines) == ["system/init", "assistant", "user", "assistant", "result/success"]


@pytest.mark.skipif(os.geteuid() != 0, reason="the root refusal needs root")
def test_bypass_as_root_needs_is_sandbox(env, tmp_path):
    lines, err, rc = claude([*STREAM, "--permission-mode", "bypassPermissions", "x"], env, tmp_path / "work")
    assert rc == 1 and not lines and "cannot be used with root/sudo privileges" in err
    lines, _, rc = claude([*STREAM, "--permission-mode", "bypassPermissions", "x"], {**env, "IS_SANDBOX": "1"},
                          tmp_path / "work")
    assert rc == 0


@pytest.mark.parametrize(("fault", "status", "words"), [
    ("http_401", 401, "Invalid API key"), ("http_429", 429, "Request rejected (429)"),
    ("http_500", 500, "server-side issue"), ("truncated", None, "empty or malformed response"),
    ("invalid_json", None, "Failed to parse JSON"),
])
def test_api_errors_look_like_the_real_ones(api, env, tmp_path, fault, status, words):
    api.fault = fault
    lines, _, rc = claude([*STREAM, "hi"], env, tmp_path / "work")
    assert rc == 1
    assistant, result = lines[-2], lines[-1]
    assert assistant["message"]["model"] == "<synthetic>" and assistant["error"]
    assert result["subtype"] == "success" and result["is_error"] is True
    assert result["api_error_status"] == status and words in result["result"]


def test_retries_follow_claude_code_max_retries(api, env, tmp_path):
    api.fault = "http_500"
    lines, _, _ = claude([*STREAM, "hi"], {**env, "CLAUDE_CODE_MAX_RETRIES": "2"}, tmp_path / "work")
    assert kinds(lines).count("system/api_retry") == 2 and len(api.model_requests()) == 3


def test_two_turns_on_one_process_and_exit_on_end_of_input(api, env, tmp_path):
    lines, _, rc = claude(STDIN, env, tmp_path / "work", stdin=user("one") + user("two"))
    assert rc == 0
    assert [k for k in kinds(lines) if k in ("system/init", "result/success")] == ["system/init", "result/success"] * 2
    assert len(set(api.agent_pids())) == 1 and len(api.agent_pids()) == 2


def _spawn(env, cwd, *extra: str):
    return subprocess.Popen([sys.executable, FAKE, *STDIN, *extra], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, cwd=cwd, start_new_session=True)


def _read_until(proc, pred, timeout=10.0) -> list[dict]:
    out = []
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        raw = proc.stdout.readline()
        if not raw:
            break
        out.append(json.loads(raw))
        if pred(out[-1]):
            return out
    raise AssertionError(f"no such line; got {kinds(out)}")


def test_control_interrupt_ends_the_turn_and_the_process_takes_the_next(api, env, tmp_path):
    api.answer_tokens = ["slow "] * 50
    api.token_delay = 0.1
    proc = _spawn(env, tmp_path / "work")
    try:
        proc.stdin.write(user("long").encode())
        proc.stdin.flush()
        _read_until(proc, lambda ln: ln["type"] == "stream_event" and ln["event"]["type"] == "content_block_delta")
        proc.stdin.write(json.dumps({"type": "control_request", "request_id": "r1",
                                     "request": {"subtype": "interrupt"}}).encode() + b"\n")
        proc.stdin.flush()
        lines = _read_until(proc, lambda ln: ln["type"] == "result")
        assert {"type": "control_response", "response": {"subtype": "success", "request_id": "r1"}} in lines
        assert lines[-1]["subtype"] == "error_during_execution"
        api.token_delay = 0.0
        api.answer_tokens = ["next."]
        proc.stdin.write(user("next").encode())
        proc.stdin.close()
        lines = _read_until(proc, lambda ln: ln["type"] == "result")
        assert lines[-1]["subtype"] == "success" and lines[-1]["result"] == "next."
        assert proc.wait(5) == 0
    finally:
        proc.kill()
        proc.wait()


def _during_tool(api, env, tmp_path):
    api.tool_command = "sleep 30 && echo done"
    proc = _spawn({**env, "IS_SANDBOX": "1"}, tmp_path / "work", "--permission-mode", "bypassPermissions")
    proc.stdin.write(user("sleep").encode())
    proc.stdin.flush()
    _read_until(proc, lambda ln: ln["type"] == "assistant" and ln["message"]["content"][0]["type"] == "tool_use")
    end = time.monotonic() + 5
    while not any(_is_sleep(p) for p in descendants(proc.pid)) and time.monotonic() < end:
        time.sleep(0.05)
    return proc, descendants(proc.pid)


def _is_sleep(pid: int) -> bool:
    try:
        return b"sleep" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def test_sigint_during_a_tool_kills_it_and_ends_cleanly(api, env, tmp_path):
    proc, tree = _during_tool(api, env, tmp_path)
    assert any(_is_sleep(p) for p in tree)
    proc.send_signal(signal.SIGINT)
    lines = _read_until(proc, lambda ln: ln["type"] == "result")
    assert lines[-1]["subtype"] == "error_during_execution" and lines[-1]["is_error"]
    assert "[Request interrupted by user for tool use]" in json.dumps(lines)
    assert proc.wait(5) == 1
    time.sleep(0.1)
    assert not [p for p in tree if alive(p)], "nothing survives a SIGINT"


def test_sigterm_during_a_tool_leaves_the_tool_running_like_the_real_cli(api, env, tmp_path):
    proc, tree = _during_tool(api, env, tmp_path)
    try:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(5) == 143
        time.sleep(0.1)
        assert [p for p in tree if alive(p) and _is_sleep(p)], "the tool shell is in its own session"
    finally:
        for p in tree:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
