"""The scripted ``codex app-server`` (tests/fakes/cli/fake_codex.py) behaves like the real 0.171.0:
same JSON-RPC lines, answers from the fake model API, tools run for real, threads kept on disk,
approvals asked and waited for, interrupts and signals as the real one handles them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from runner_kit.process import alive, descendants
from tests.fakes.model_api import FakeModelAPI

FAKE = Path(__file__).resolve().parents[1] / "fakes" / "cli" / "fake_codex.py"


class Codex:
    """One fake app-server process and a line reader for it."""

    def __init__(self, home: Path, base_url: str, cwd: Path, key: str = "sk-test", *extra: str):
        home.mkdir(parents=True, exist_ok=True)
        (home / "config.toml").write_text(
            'model = "fake-model"\nmodel_provider = "t"\n[model_providers.t]\nname = "t"\n'
            f'base_url = "{base_url}"\nwire_api = "responses"\nenv_key = "T_KEY"\n'
            "request_max_retries = 0\nstream_max_retries = 0\n", encoding="utf-8")
        env = {"PATH": os.environ["PATH"], "CODEX_HOME": str(home), "T_KEY": key}
        self.proc = subprocess.Popen([sys.executable, str(FAKE), "app-server", *extra], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=cwd,
                                     start_new_session=True)
        self.cwd = cwd
        self.seen: list[dict[str, Any]] = []
        self.ids = 0

    def send(self, msg: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(msg) + "\n").encode())
        self.proc.stdin.flush()

    def request(self, method: str, params: dict[str, Any] | None = None) -> int:
        self.ids += 1
        self.send({"id": self.ids, "method": method, "params": params or {}})
        return self.ids

    def read(self, until, timeout: float = 10.0) -> dict[str, Any]:
        assert self.proc.stdout is not None
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            line = self.proc.stdout.readline()
            if not line:
                raise AssertionError("the fake codex closed its output")
            msg = json.loads(line)
            self.seen.append(msg)
            if until(msg):
                return msg
        raise AssertionError("timed out")

    def answer(self, rid: int) -> dict[str, Any]:
        return self.read(lambda m: m.get("id") == rid and "method" not in m)

    def start(self, **params: Any) -> str:
        assert "result" in self.answer(self.request("initialize", {"clientInfo": {"name": "t", "version": "1"}}))
        self.send({"method": "initialized"})
        return self.answer(self.request("thread/start", {"cwd": str(self.cwd), **params}))["result"]["thread"]["id"]

    def turn(self, thread: str, text: str) -> str:
        return self.answer(self.request("turn/start", {"threadId": thread, "input": [{"type": "text", "text": text}]}))[
            "result"]["turn"]["id"]

    def completed(self) -> dict[str, Any]:
        return self.read(lambda m: m.get("method") == "turn/completed")["params"]["turn"]

    def notes(self, method: str) -> list[dict[str, Any]]:
        return [m["params"] for m in self.seen if m.get("method") == method]

    def close(self) -> int:
        if self.proc.stdin and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            return self.proc.wait(5)
        finally:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
            for f in (self.proc.stdout, self.proc.stderr):
                if f:
                    f.close()


@pytest.fixture
def api():
    with FakeModelAPI() as srv:
        yield srv


@pytest.fixture
def codex(tmp_path, api):
    made: list[Codex] = []

    def make(scenario: str | None = None, key: str = "sk-test", *extra: str) -> Codex:
        work = tmp_path / "work"
        work.mkdir(exist_ok=True)
        c = Codex(tmp_path / "home", api.openai_base_url(scenario), work, key, *extra)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


def test_text_turn_streams_deltas_and_counts_tokens(codex, api):
    c = codex()
    thread = c.start()
    started = c.read(lambda m: m.get("method") == "thread/started")  # right after the thread/start result
    assert started["params"]["thread"]["id"] == thread
    turn = c.turn(thread, "say hello")
    done = c.completed()
    assert done["id"] == turn and done["status"] == "completed"
    assert [d["delta"] for d in c.notes("item/agentMessage/delta")] == ["Hello", " from", " the", " fake", " model."]
    assert "Model metadata for `fake-model` not found" in c.notes("warning")[0]["message"]
    (usage,) = c.notes("thread/tokenUsage/updated")
    assert usage["turnId"] == turn and usage["tokenUsage"]["total"]["outputTokens"] == 7
    (req,) = api.model_requests()
    assert req.headers["authorization"] == "Bearer sk-test" and req.headers["thread-id"] == thread
    assert int(req.headers["x-fake-agent-pid"]) == c.proc.pid
    assert req.body["stream"] is True and req.body["input"][-1]["content"][0]["text"] == "say hello"
    assert c.close() == 0, "app-server exits 0 at end of input"


def test_requests_before_initialize_are_refused(codex):
    c = codex()
    err = c.answer(c.request("thread/start", {}))["error"]
    assert err == {"code": -32600, "message": "Not initialized"}


def test_tool_turn_runs_the_command_in_the_cwd_then_answers(codex, api):
    c = codex("toolw")
    thread = c.start(sandbox="workspace-write", approvalPolicy="never")
    c.turn(thread, "create a file")
    assert c.completed()["status"] == "completed"
    assert (c.cwd / "created-by-tool.txt").is_file(), "the tool really ran, in the thread's cwd"
    started = [n["item"] for n in c.notes("item/started") if n["item"]["type"] == "commandExecution"]
    done = [n["item"] for n in c.notes("item/completed") if n["item"]["type"] == "commandExecution"]
    assert started[0]["command"] == "/bin/bash -lc 'touch created-by-tool.txt'" and done[0]["exitCode"] == 0
    assert "".join(d["delta"] for d in c.notes("item/agentMessage/delta")) == "The tool ran; done."
    second = api.model_requests()[-1].body["input"]
    assert [i["type"] for i in second[-2:]] == ["function_call", "function_call_output"]
    totals = [n["tokenUsage"]["total"]["totalTokens"] for n in c.notes("thread/tokenUsage/updated")]
    assert len(totals) == 2 and totals[1] > totals[0], "cumulative for the thread"


def test_a_new_process_resumes_the_thread_and_repeats_its_count_first(codex):
    first = codex()
    thread = first.start()
    old_turn = first.turn(thread, "one")
    first.completed()
    first.close()
    second = codex()
    assert "result" in second.answer(second.request("initialize", {"clientInfo": {"name": "t"}}))
    second.send({"method": "initialized"})
    resumed = second.answer(second.request("thread/resume", {"threadId": thread}))
    assert resumed["result"]["thread"]["id"] == thread and second.notes("deprecationNotice")
    second.turn(thread, "two")
    second.completed()
    counts = second.notes("thread/tokenUsage/updated")
    assert counts[0]["turnId"] == old_turn, "the old count comes first, under the old turn"
    assert counts[1]["tokenUsage"]["total"]["totalTokens"] > counts[0]["tokenUsage"]["total"]["totalTokens"]


def test_unknown_and_malformed_thread_ids_fail_like_the_real_one(codex):
    c = codex()
    c.start()
    err = c.answer(c.request("thread/resume", {"threadId": "01a22ae1-0000-7000-8000-000000000000"}))["error"]
    assert err == {"code": -32600, "message": "no rollout found for thread id 01a22ae1-0000-7000-8000-000000000000"}
    err = c.answer(c.request("thread/resume", {"threadId": "not-a-thread"}))["error"]
    assert err["message"].startswith("invalid session id")


@pytest.mark.parametrize("scenario, message, info", [
    ("err401", "unexpected status 401 Unauthorized: fake: invalid api key, url: ",
     {"httpConnectionFailed": {"httpStatusCode": 401}}),
    ("err429", "exceeded retry limit, last status: 429 Too Many Requests",
     {"responseTooManyFailedAttempts": {"httpStatusCode": 429}}),
    ("err500", "We\u2019re currently experiencing high demand", "internalServerError"),
])
def test_model_api_errors_are_worded_as_codex_0171_words_them(codex, scenario, message, info):
    c = codex(scenario)
    c.turn(c.start(), "hi")
    done = c.completed()
    assert done["status"] == "failed" and done["error"]["message"].startswith(message)
    assert done["error"]["codexErrorInfo"] == info
    (err,) = c.notes("error")
    assert err["willRetry"] is False and err["error"] == done["error"]


@pytest.mark.parametrize("fault", ["invalid_json", "empty", "truncated", "non_utf8", "error_event"])
def test_broken_streams_are_stream_disconnected(codex, api, fault):
    api.fault = fault
    c = codex()
    c.turn(c.start(), "hi")
    done = c.completed()
    assert done["status"] == "failed" and done["error"]["codexErrorInfo"] == "other"
    assert done["error"]["message"].startswith("stream disconnected before completion: ")


def test_retries_announce_themselves_before_failing(tmp_path, api):
    work = tmp_path / "w"
    work.mkdir()
    c = Codex(tmp_path / "h", api.openai_base_url("err500"), work, "sk-test",
              "-c", "model_providers.t.request_max_retries=2")
    try:
        c.turn(c.start(), "hi")
        assert c.completed()["status"] == "failed"
        notices = c.notes("error")
        assert [n["willRetry"] for n in notices] == [True, True, False]
        assert notices[0]["error"]["message"].startswith("Reconnecting... 1/2 (")
    finally:
        c.close()


@pytest.mark.parametrize("decision, status, ran", [("accept", "completed", True), ("decline", "declined", False)])
def test_untrusted_policy_asks_and_waits_for_the_answer(codex, decision, status, ran):
    c = codex("toolw")
    thread = c.start(approvalPolicy="untrusted", sandbox="read-only")
    c.turn(thread, "create a file")
    ask = c.read(lambda m: m.get("method") == "item/commandExecution/requestApproval")
    assert "id" in ask and ask["params"]["command"].endswith("'touch created-by-tool.txt'")
    assert "accept" in ask["params"]["availableDecisions"]
    c.send({"id": ask["id"], "result": {"decision": decision}})
    done = c.completed()
    assert done["status"] == "completed"
    item = [n["item"] for n in c.notes("item/completed") if n["item"]["type"] == "commandExecution"][0]
    assert item["status"] == status and (c.cwd / "created-by-tool.txt").exists() == ran
    assert c.notes("serverRequest/resolved")[0]["requestId"] == ask["id"]


def _sleep_pids(root: int) -> set[int]:
    out = set()
    for pid in descendants(root):
        try:
            if b"sleep" in Path(f"/proc/{pid}/cmdline").read_bytes():
                out.add(pid)
        except OSError:
            pass
    return out


def _wait_gone(pids: set[int], timeout: float = 5.0) -> set[int]:
    end = time.monotonic() + timeout
    while time.monotonic() < end and any(alive(p) for p in pids):
        time.sleep(0.05)
    return {p for p in pids if alive(p)}


def test_interrupt_during_a_tool_kills_it_and_ends_the_turn_interrupted(codex):
    c = codex("toolsleep")
    thread = c.start(sandbox="danger-full-access", approvalPolicy="never")
    turn = c.turn(thread, "sleep")
    c.read(lambda m: m.get("method") == "item/started" and m["params"]["item"]["type"] == "commandExecution")
    time.sleep(0.3)
    sleeps = _sleep_pids(c.proc.pid)
    assert sleeps, "the tool runs"
    assert c.answer(c.request("turn/interrupt", {"threadId": thread, "turnId": turn}))["result"] == {}
    assert c.completed()["status"] == "interrupted"
    assert not _wait_gone(sleeps)
    assert not [n for n in c.notes("item/completed") if n["item"]["type"] == "commandExecution"]
    c.turn(thread, "again")  # the thread stays usable in the same process
    c.read(lambda m: m.get("method") == "item/started" and m["params"]["item"]["type"] == "commandExecution")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_takes_the_tool_with_it(codex, sig):
    c = codex("toolsleep")
    c.turn(c.start(sandbox="danger-full-access", approvalPolicy="never"), "sleep")
    c.read(lambda m: m.get("method") == "item/started" and m["params"]["item"]["type"] == "commandExecution")
    time.sleep(0.3)
    sleeps = _sleep_pids(c.proc.pid)
    assert sleeps
    c.proc.send_signal(sig)
    assert c.proc.wait(5) == -sig
    assert not _wait_gone(sleeps), "nothing survives the app-server"


def test_several_turns_in_one_process_share_one_thread(codex, api):
    c = codex()
    thread = c.start()
    for text in ("one", "two", "three"):
        c.turn(thread, text)
        assert c.completed()["status"] == "completed"
    bodies = [r.body for r in api.model_requests()]
    assert len({r.headers["x-fake-agent-pid"] for r in api.model_requests()}) == 1
    users = [m["content"][0]["text"] for m in bodies[-1]["input"] if m.get("role") == "user"]
    assert users[-3:] == ["one", "two", "three"], "the whole thread's history goes to the model"


def test_an_interrupt_while_the_model_is_silent_ends_the_turn_at_once(codex, api):
    api.fault = "stall_before_headers"
    c = codex()
    thread = c.start()
    turn = c.turn(thread, "hi")
    time.sleep(0.3)
    start = time.monotonic()
    c.request("turn/interrupt", {"threadId": thread, "turnId": turn})
    assert c.completed()["status"] == "interrupted"
    assert time.monotonic() - start < 1.0


def test_missing_key_variable_fails_the_turn(tmp_path, api):
    work = tmp_path / "w"
    work.mkdir()
    c = Codex(tmp_path / "h", api.openai_base_url(), work, "")
    try:
        c.turn(c.start(), "hi")
        done = c.completed()
        assert done["status"] == "failed" and "Missing environment variable: `T_KEY`" in done["error"]["message"]
        assert not api.model_requests()
    finally:
        c.close()


def test_replay_mode_plays_a_recording_back_in_answer_to_the_client(tmp_path):
    rec = tmp_path / "rec.jsonl"
    rec.write_text("\n".join(json.dumps(r) for r in [
        {"dir": "->", "t": 0, "msg": {"id": 7, "method": "initialize", "params": {}}},
        {"dir": "<-", "t": 0, "msg": {"id": 7, "result": {"userAgent": "x"}}},
        {"dir": "<-", "t": 0, "msg": {"method": "warning", "params": {"message": "w"}}},
    ]) + "\n")
    proc = subprocess.Popen([sys.executable, str(FAKE), "replay", str(rec), "app-server"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    out, _ = proc.communicate(json.dumps({"id": 1, "method": "initialize", "params": {}}) + "\n", timeout=10)
    lines = [json.loads(x) for x in out.splitlines()]
    assert lines == [{"id": 1, "result": {"userAgent": "x"}}, {"method": "warning", "params": {"message": "w"}}]
    assert proc.returncode == 0


def test_no_child_left_after_the_selftests():
    time.sleep(0.1)
    left = {p for p in descendants(os.getpid()) if alive(p)}
    assert not left, left


def test_an_unreachable_model_api_is_waited_for_not_failed(tmp_path):
    from tests.fakes.http_server import closed_port

    work = tmp_path / "w"
    work.mkdir()
    c = Codex(tmp_path / "h", f"http://127.0.0.1:{closed_port()}/v1", work)
    try:
        thread = c.start()
        turn = c.turn(thread, "hi")
        notice = c.read(lambda m: m.get("method") == "error")["params"]
        assert notice["willRetry"] is True and notice["error"]["message"] == "Reconnecting... waiting for network"
        assert notice["error"]["additionalDetails"] == "Connection failed: error sending request"
        c.request("turn/interrupt", {"threadId": thread, "turnId": turn})
        assert c.completed()["status"] == "interrupted"
    finally:
        c.close()
