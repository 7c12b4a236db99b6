"""Self-test of the DeerFlow / LangGraph fake, driven with plain httpx, checked against the real
LangGraph captures (tests/plugins/transcripts/deerflow/real/, unchanged copies of
fixtures/real-peers/langgraph/)."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest

from tests.fakes.deerflow import FAULTS, FakeDeerFlow
from tests.fakes.replay import TRANSCRIPTS, split_transcript

KEY = "df-pat-selftest"
REAL = TRANSCRIPTS / "deerflow" / "real"
RUN = {"assistant_id": "lead_agent", "input": {"messages": [{"role": "user", "content": "hi"}]},
       "stream_mode": ["values", "messages-tuple", "updates", "custom"]}
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture
def srv():
    with FakeDeerFlow(api_key=KEY) as s:
        yield s
    assert s.handler_errors == []


@pytest.fixture
def lg():
    with FakeDeerFlow(flavor="langgraph") as s:
        yield s
    assert s.handler_errors == []


def sse(raw: bytes, nl: str) -> list[tuple[str, object]]:
    """(event, data) pairs; every line must end in ``nl``; comments are dropped."""
    text = raw.decode()
    other = "\r\n" if nl == "\n" else None
    assert other is None or other not in text, "framing mixes line ends"
    if nl == "\r\n":
        assert "\n" not in text.replace("\r\n", "")
    out = []
    for block in text.split(nl + nl):
        lines = [line for line in block.split(nl) if line and not line.startswith(":")]
        if not lines:
            continue
        name = next(line[7:] for line in lines if line.startswith("event: "))
        data = next(line[6:] for line in lines if line.startswith("data: "))
        out.append((name, json.loads(data)))
    return out


def thread(srv, prefix=None, **kw) -> str:
    prefix = srv.api_prefix if prefix is None else prefix
    r = httpx.post(srv.root_url + prefix + "/threads", json={"metadata": {"k": "v"}}, **kw)
    assert r.status_code == 200, r.text
    assert set(r.json()) >= {"thread_id", "created_at", "metadata", "status", "values"}
    return r.json()["thread_id"]


def stream(srv, tid, body=None, prefix=None, **kw) -> httpx.Response:
    prefix = srv.api_prefix if prefix is None else prefix
    return httpx.post(f"{srv.root_url}{prefix}/threads/{tid}/runs/stream", json=body or RUN, timeout=20, **kw)


def test_deerflow_framing_event_order_and_end(srv):
    tid = thread(srv, headers=AUTH)
    r = stream(srv, tid, headers=AUTH)
    assert r.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert "location" not in r.headers and r.headers["content-location"].startswith(f"/api/threads/{tid}/runs/")
    got = sse(r.content, "\n")
    names = [n for n, _ in got]
    assert names[0] == "metadata" and set(got[0][1]) == {"run_id", "thread_id"}
    assert names[-1] == "end" and got[-1][1] is None
    assert names[1] == "values" and names.count("messages") == 6
    chunks = [d[0] for n, d in got if n == "messages"]
    assert {c["type"] for c in chunks} == {"AIMessageChunk"} and len({c["id"] for c in chunks}) == 1
    assert "".join(c["content"] for c in chunks) == "Hello from the fake agent."
    assert chunks[-1]["usage_metadata"] == {"input_tokens": 11, "output_tokens": 5, "total_tokens": 16}
    assert "updates" in names and r.headers["content-location"].rsplit("/", 1)[1] == got[0][1]["run_id"]


def test_langgraph_framing_matches_the_real_capture(lg):
    tid = thread(lg)
    r = stream(lg, tid, body={**RUN, "assistant_id": "agent", "stream_mode": ["values", "messages-tuple"]})
    got = sse(r.content, "\r\n")
    _, _, headers, real_body = split_transcript((REAL / "06-fake-run-stream-values-messages-tuple.http").read_bytes())
    real = sse(real_body, "\r\n")
    assert [n for n, _ in got] == [n for n, _ in real][:2] + ["messages"] * 6 + ["values"]
    assert [n for n, _ in real][-1] == "values" and got[-1][0] == "values", "no end event: the body just ends"
    assert set(got[0][1]) == set(real[0][1]) == {"run_id", "attempt"}
    mine, theirs = got[2][1], real[2][1]
    assert set(mine[0]) == set(theirs[0]), "the same AIMessageChunk fields"
    assert {"run_id", "thread_id", "langgraph_node", "langgraph_step"} <= set(mine[1]) & set(theirs[1])
    assert r.headers["content-location"] == f"/threads/{tid}/runs/{got[0][1]['run_id']}"
    assert "location" not in r.headers and "location" in headers, "the real one sets it; a fake must not"


def test_values_carry_the_whole_history(srv):
    tid = thread(srv, headers=AUTH)
    stream(srv, tid, headers=AUTH)
    got = sse(stream(srv, tid, headers=AUTH).content, "\n")
    first_values = next(d for n, d in got if n == "values")
    assert [m["type"] for m in first_values["messages"]] == ["human", "ai", "human"]


def test_messages_mode_is_partial_accumulated_on_langgraph_and_refused_by_deerflow(srv, lg):
    tid = thread(lg)
    got = sse(stream(lg, tid, body={**RUN, "stream_mode": ["messages"]}).content, "\r\n")
    partials = [d[0]["content"] for n, d in got if n == "messages/partial"]
    assert partials[0] == "Hello" and partials[-1] == "Hello from the fake agent." and got[1][0] == "messages/metadata"
    tid = thread(srv, headers=AUTH)
    r = stream(srv, tid, body={**RUN, "stream_mode": ["messages"]}, headers=AUTH)
    assert r.status_code == 422 and "Unsupported stream mode(s): messages" in r.text


def test_deerflow_validation_and_errors(srv):
    tid = thread(srv, headers=AUTH)
    assert stream(srv, tid, body={**RUN, "bogus": 1}, headers=AUTH).status_code == 422
    assert stream(srv, tid, body={**RUN, "stream_resumable": True}, headers=AUTH).status_code == 422
    assert stream(srv, tid, body={"stream_mode": ["values"], "input": RUN["input"]}, headers=AUTH).status_code == 422
    unknown = "00000000-0000-0000-0000-000000000000"
    r = stream(srv, unknown, headers=AUTH)
    assert (r.status_code, r.json()) == (404, {"detail": f"Thread {unknown} not found"}), "2.0-rc: create it first"
    assert unknown not in srv.threads
    srv.creates_unknown_threads = True  # the gateway before 2.0-rc
    r = stream(srv, unknown, body={**RUN, "metadata": {"source": "x"}}, headers=AUTH)
    assert r.status_code == 200 and srv.threads[unknown].metadata == {"source": "x"}, "created on the fly"
    r = stream(srv, tid, body={**RUN, "assistant_id": "my_researcher"}, headers=AUTH)
    assert r.status_code == 200, "another name is a custom agent"
    r = stream(srv, tid, body={**RUN, "assistant_id": "no such/agent"}, headers=AUTH)
    assert r.status_code == 422 and "Invalid assistant_id" in r.json()["detail"]
    r = stream(srv, tid, body={**RUN, "context": {"model_name": "gpt-9"}}, headers=AUTH)
    assert r.status_code == 400 and "allowlist" in r.json()["detail"]
    r = httpx.post(srv.root_url + "/threads", json={})
    assert (r.status_code, r.json()) == (404, {"detail": "Not Found"}), "no API at the nginx root itself"


def test_langgraph_creates_an_unknown_thread_only_when_asked(lg):
    """``if_not_exists: "create"`` makes the run's thread, with the run's metadata over the graph's
    (langgraph-runtime-inmem ``Runs.put``); without it an unknown thread is 404."""
    unknown = "00000000-0000-0000-0000-0000000000aa"
    r = stream(lg, unknown)
    assert (r.status_code, r.json()) == (404, {"detail": "Thread or assistant not found."})
    r = stream(lg, unknown, body={**RUN, "if_not_exists": "create", "metadata": {"source": "langbot"}})
    assert r.status_code == 200
    assert lg.threads[unknown].metadata == {"graph_id": RUN["assistant_id"], "assistant_id": RUN["assistant_id"],
                                            "source": "langbot"}


def test_langgraph_errors_match_the_real_captures(lg):
    tid = thread(lg)
    r = stream(lg, tid, body={**RUN, "assistant_id": "nope"})
    real = split_transcript((REAL / "12-unknown-assistant-stream.http").read_bytes())
    assert r.status_code == real[1] == 422 and r.json()["detail"].startswith("Invalid assistant: 'nope'.")
    r = stream(lg, "00000000-0000-0000-0000-000000000000", body={**RUN, "assistant_id": "agent"})
    real = split_transcript((REAL / "13-unknown-thread-stream.http").read_bytes())
    assert (r.status_code, r.content) == (real[1], real[3])
    assert httpx.post(lg.root_url + "/api/langgraph/threads", json={}).json() == {"detail": "Not Found"}


def test_auth_deerflow_bearer_and_langgraph_x_api_key():
    with FakeDeerFlow(api_key=KEY) as srv:
        r = httpx.post(srv.root_url + "/api/langgraph/threads", json={})
        assert r.status_code == 401 and r.json()["detail"]["code"] == "not_authenticated"
        assert httpx.post(srv.root_url + "/api/threads", json={}, headers={"Authorization": "Bearer x"}).status_code == 401
        srv.api_keys.add("second")
        thread(srv, headers={"Authorization": "Bearer second"})
    with FakeDeerFlow(api_key=KEY, flavor="langgraph") as lgk:
        assert httpx.post(lgk.root_url + "/threads", json={}).status_code == 403
        thread(lgk, headers={"x-api-key": KEY})
    with FakeDeerFlow(api_key=KEY, auth_disabled=True) as open_srv:
        thread(open_srv)


def test_busy_thread_is_409(srv):
    tid = thread(srv, headers=AUTH)
    srv.token_delay = 0.3
    t = threading.Thread(target=stream, args=(srv, tid), kwargs={"headers": AUTH})
    t.start()
    assert srv.wait_until(lambda: srv.threads[tid].busy, 3)
    r = stream(srv, tid, headers=AUTH)
    assert r.status_code == 409 and "already running" in r.json()["detail"]
    t.join()


def test_interrupt_then_resume(lg):
    tid = thread(lg)
    lg.interrupt_value = {"question": "Which city?"}
    got = sse(stream(lg, tid, body={**RUN, "assistant_id": "agent"}).content, "\r\n")
    last = got[-1][1]
    assert got[-1][0] == "values" and last["__interrupt__"][0]["value"] == {"question": "Which city?"}
    assert ("updates", {"__interrupt__": last["__interrupt__"]}) in got
    lg.interrupt_value = None
    body = {"assistant_id": "agent", "command": {"resume": "Paris"}, "stream_mode": ["values", "messages-tuple"]}
    got = sse(stream(lg, tid, body=body).content, "\r\n")
    assert "".join(d[0]["content"] for n, d in got if n == "messages") == "you said: Paris"


def test_interrupts_as_langgraph_dev_handles_them(lg):
    """What tests/real_peers/test_langgraph_real.py sees on the real server: the state lists the
    interrupt (top level and in its task, shaped like 35-ask-thread-state-interrupted.http); new
    input drops it; a resume with nothing waiting runs nothing."""
    tid = thread(lg)
    lg.interrupt_value = {"question": "Which city?"}
    stream(lg, tid, body={**RUN, "assistant_id": "agent"})
    lg.interrupt_value = None
    state = httpx.get(f"{lg.root_url}/threads/{tid}/state").json()
    _, _, _, real = split_transcript((REAL / "35-ask-thread-state-interrupted.http").read_bytes())
    assert {"values", "next", "tasks", "interrupts"} <= set(json.loads(real)) and {"values", "next", "tasks",
                                                                                  "interrupts"} <= set(state)
    first = state["interrupts"][0]["id"]
    assert state["next"] and state["tasks"][0]["interrupts"][0]["id"] == first
    stream(lg, tid, body={**RUN, "assistant_id": "agent", "input": {"messages": [{"role": "user", "content": "lol"}]}})
    state = httpx.get(f"{lg.root_url}/threads/{tid}/state").json()
    assert state["interrupts"] == [] and state["next"] == [], "new input dropped the interrupt"
    before = state["values"]["messages"]
    got = sse(stream(lg, tid, body={"assistant_id": "agent", "command": {"resume": "Paris"},
                                    "stream_mode": ["values", "messages-tuple"]}).content, "\r\n")
    assert [n for n, _ in got] == ["metadata", "values"], "a resume with nothing waiting runs nothing"
    assert httpx.get(f"{lg.root_url}/threads/{tid}/state").json()["values"]["messages"] == before


def test_deerflow_state_says_only_whether_the_graph_waits(srv):
    tid = thread(srv, headers=AUTH)
    srv.interrupt_value = {"question": "Delete 3 files?"}
    stream(srv, tid, headers=AUTH)
    srv.interrupt_value = None
    assert httpx.get(f"{srv.root_url}/api/langgraph/threads/{tid}/state").status_code == 401
    state = httpx.get(f"{srv.root_url}/api/langgraph/threads/{tid}/state", headers=AUTH).json()
    assert state["next"] and "interrupts" not in state and all(set(t) == {"id", "name"} for t in state["tasks"])
    srv.answer_interrupt(tid, "yes")  # as DeerFlow's own UI would
    state = httpx.get(f"{srv.root_url}/api/threads/{tid}/state", headers=AUTH).json()
    assert state["next"] == [] and state["tasks"] == []


def test_tool_subagent_and_clarification_scenarios(srv):
    tid = thread(srv, headers=AUTH)
    srv.tool_call = srv.subagent = True
    got = sse(stream(srv, tid, headers=AUTH).content, "\n")
    tool_chunks = [c for n, d in got if n == "messages" for c in d[0].get("tool_call_chunks") or []]
    assert tool_chunks[0]["name"] == "get_weather" and tool_chunks[1]["name"] is None and tool_chunks[1]["id"] is None
    tools = [d[0] for n, d in got if n == "messages" and d[0]["type"] == "tool"]
    assert [t["name"] for t in tools] == ["get_weather", "task"]
    customs = [d["type"] for n, d in got if n == "custom"]
    assert customs == ["task_started", "task_running", "task_completed"]
    srv.tool_call = srv.subagent = False
    srv.clarification = {"question": "Which one?"}
    got = sse(stream(srv, tid, headers=AUTH).content, "\n")
    last_tool = [d[0] for n, d in got if n == "messages" and d[0]["type"] == "tool"][-1]
    assert (last_tool["name"], last_tool["content"]) == ("ask_clarification", "Which one?")


def test_heartbeats_while_the_agent_is_slow(srv):
    srv.token_delay = 0.35
    srv.heartbeat_interval = 0.1
    tid = thread(srv, headers=AUTH)
    raw = stream(srv, tid, headers=AUTH).content
    assert raw.count(b": heartbeat\n\n") >= 8


def test_cancel_stops_the_run(srv):
    tid = thread(srv, headers=AUTH)
    srv.answer_tokens = ["a "] * 100
    srv.token_delay = 0.05
    started = time.monotonic()
    api = srv.root_url + srv.api_prefix
    with httpx.stream("POST", f"{api}/threads/{tid}/runs/stream", json=RUN, headers=AUTH, timeout=20) as r:
        rid = r.headers["content-location"].rsplit("/", 1)[1]
        c = httpx.post(f"{api}/threads/{tid}/runs/{rid}/cancel", headers=AUTH)
        assert (c.status_code, c.json()) == (200, {})
        r.read()
    assert srv.cancelled == [rid] and time.monotonic() - started < 3
    assert httpx.post(f"{api}/threads/{tid}/runs/nope/cancel", headers=AUTH).status_code == 404
    late = httpx.post(f"{api}/threads/{tid}/runs/{rid}/cancel", headers=AUTH)
    assert late.status_code == 404 and "No matching runs to cancel" in late.json()["detail"], "as langgraph-api"
    assert srv.wait_until(lambda: srv.active_requests == 0, 3)


def test_uploads(srv):
    tid = thread(srv, headers=AUTH)
    r = httpx.post(f"{srv.root_url}/api/threads/{tid}/uploads", headers=AUTH,
                   files=[("files", ("a.txt", b"abc", "text/plain")), ("files", ("b.md", b"#", "text/markdown"))])
    doc = r.json()
    assert doc["success"] and [f["virtual_path"] for f in doc["files"]] == ["/mnt/user-data/uploads/a.txt",
                                                                         "/mnt/user-data/uploads/b.md"]
    assert srv.threads[tid].uploads == {"a.txt": b"abc", "b.md": b"#"}


def test_forget_conversations(srv, lg):
    tid = thread(srv, headers=AUTH)
    srv.forget_conversations()
    assert stream(srv, tid, headers=AUTH).status_code == 404, "DeerFlow since 2.0-rc"
    srv.creates_unknown_threads = True
    got = sse(stream(srv, tid, headers=AUTH).content, "\n")
    assert [m["type"] for m in got[1][1]["messages"]] == ["human"], "DeerFlow before: the same id, an empty thread"
    tid = thread(lg)
    lg.forget_conversations()
    assert stream(lg, tid, body={**RUN, "assistant_id": "agent"}).status_code == 404


@pytest.mark.parametrize("fault", FAULTS)
def test_every_fault_is_served(srv, fault):
    if fault.startswith("stall"):
        srv.stall_seconds = 0.3
    tid = thread(srv, headers=AUTH)
    srv.fault = fault
    try:
        r = stream(srv, tid, headers=AUTH)
    except httpx.HTTPError:
        assert fault in ("truncated", "stall_before_headers")
        return
    kind, _, num = fault.partition("_")
    if kind in ("http", "html") and num.isdigit():
        assert r.status_code == int(num)
        assert ("<html>" in r.text) == (kind == "html")
    elif fault == "empty":
        assert r.status_code == 200 and r.content == b""
    elif fault == "error_event":
        assert b'event: error\ndata: {"message": "An internal error occurred", "name": "OpenAIAPIError"}' in r.content
    assert srv.wait_until(lambda: srv.active_requests == 0, 3)


def test_unknown_fault_is_refused(srv):
    with pytest.raises(ValueError):
        srv.fault = "nope"
