"""DeerFlowAgent against a real LangGraph API server — the protocol DeerFlow serves (opt-in:
RUN_SLOW=1; see real-http-peers.md §1).

- ``langgraph-cli[inmem]`` (pinned to the versions the shared fixtures were captured with) is
  installed with ``uv`` into ``$LANGGRAPH_REAL_VENV`` (default
  ``~/.cache/langbot-agent-runners/langgraph-0.16-venv``, about 150 MB; seconds with a warm uv
  cache) on first use and reused once its marker says the install finished. When ``uv`` or the
  install fails, the tests skip and say what failed.
- ``langgraph dev`` (in-memory, no auth, no network) serves the graphs in ``langgraph_project/``
  from a copy in tmp, on a free 127.0.0.1 port, in its own process group stopped by its PID.
- ``api-base`` is the plain server root: no ``/api/langgraph`` prefix, as a LangGraph server (not a
  DeerFlow nginx) serves it, so the plugin's prefix detection is exercised too.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from runners_cli.host import Identity, LocalHost
from tests.helpers import deltas, failure, final_text, make_runner, rtype, run, state_updates, terminal
from tests.real_peers import peers

pytestmark = [pytest.mark.slow, pytest.mark.real_peers, pytest.mark.timeout(900)]

LABEL = "LangGraph real peer"
PACKAGES = [
    "langgraph-cli[inmem]==0.4.40",
    "langgraph-api==0.16.7",
    "langgraph-runtime-inmem==0.36.7",
    "langgraph==1.2.24",
    "langchain-core==1.8.3",
]
PROJECT = Path(__file__).with_name("langgraph_project")
START_TIMEOUT = 120.0
TIMINGS: dict[str, float] = {}
KEY = "deerflow.thread_id"


def provide_langgraph() -> Path:
    venv = peers.cached_path("LANGGRAPH_REAL_VENV", "langgraph-0.16-venv")
    return peers.provide_venv(venv, PACKAGES, label=LABEL, command="langgraph", timeout=600, timings=TIMINGS)


class Server:
    def __init__(self, url: str):
        self.url = url

    def config(self, graph: str, **extra) -> dict:
        return {"api-base": self.url + "/", "assistant-id": graph, **extra}

    def get(self, path: str):
        r = httpx.get(self.url + path, timeout=30)
        r.raise_for_status()
        return r.json()

    def runs(self, thread_id: str) -> list[dict]:
        return self.get(f"/threads/{thread_id}/runs")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    venv = provide_langgraph()
    home = tmp_path_factory.mktemp("langgraph")
    shutil.copytree(PROJECT, home / "project")
    port = peers.free_port()
    log = home / "langgraph.log"
    out = open(log, "w", encoding="utf-8")
    env = {**os.environ, "LANGGRAPH_CLI_NO_ANALYTICS": "1", "LANGSMITH_TRACING": "false", "NO_COLOR": "1"}
    for name in ("LANGSMITH_API_KEY", "LANGGRAPH_API_KEY", "OPENAI_API_KEY"):
        env.pop(name, None)
    proc = subprocess.Popen(
        [str(venv / "bin" / "langgraph"), "dev", "--no-browser", "--no-reload", "--host", peers.LOOPBACK,
         "--port", str(port), "--n-jobs-per-worker", "4"],
        stdout=out, stderr=subprocess.STDOUT, env=env, cwd=home / "project", start_new_session=True,
    )
    try:
        # `langgraph dev` silently moves to another port when the chosen one was taken meanwhile
        started = time.monotonic()
        while not (found := re.search(r"API: \S*http://127\.0\.0\.1:(\d+)", peers.tail(log, 200))):
            if proc.poll() is not None or time.monotonic() - started > START_TIMEOUT:
                pytest.fail(f"{LABEL}: langgraph dev did not announce its API:\n{peers.tail(log)}")
            time.sleep(0.2)
        url = f"http://{peers.LOOPBACK}:{found.group(1)}"
        TIMINGS["start"] = peers.wait_until_up(proc, url + "/ok", log, LABEL, START_TIMEOUT)
        peers.say("langgraph-real", f"langgraph dev answered /ok on {url} after {TIMINGS['start']:.1f}s")
        yield Server(url)
    finally:
        peers.stop_group(proc)
        out.close()
        peers.say("langgraph-real", f"timings: { {k: round(v, 2) for k, v in TIMINGS.items()} }")


def _host() -> LocalHost:
    return LocalHost(runner_id="plugin:langbot-team/DeerFlowAgent/default")


def _thread(results) -> str:
    """The thread id the run stored (the stored value may be a record holding it)."""
    (stored,) = [v for k, v in state_updates(results).items() if k.startswith(KEY)]
    return stored["thread_id"] if isinstance(stored, dict) else stored


async def test_streamed_answer_reasoning_and_usage(server):
    host = _host()
    runner = make_runner("deerflow-agent", host)
    ctx = host.make_context("hello there", config=server.config("chat"))
    started = time.monotonic()
    stamped = []
    async for r in runner.invoke(ctx):
        host.apply_result(ctx.run_id, r)
        stamped.append((time.monotonic() - started, r))
    results = [r for _, r in stamped]
    end = terminal(results)
    assert rtype(end) == "run.completed", end.data
    text = final_text(results)
    assert text.endswith("Turn 1: you said hello there"), text
    assert "<think>" in text and "Thinking it over." in text, "reasoning_content is shown as a think block"
    shown = [d for d in deltas(results) if d]
    assert len(shown) >= 2 and shown[0] != shown[-1], shown
    first = next(t for t, r in stamped if rtype(r) == "message.delta")
    assert first < stamped[-1][0] - 0.3, "text reached the chat while the model was still generating"
    assert end.usage is not None and end.usage.completion_tokens == 7 and end.usage.prompt_tokens, end.usage
    thread_id = _thread(results)
    assert server.get(f"/threads/{thread_id}")["status"] == "idle"
    TIMINGS["first_delta"] = first


async def test_second_turn_continues_the_thread_without_replaying_turn_one(server):
    host = _host()
    runner = make_runner("deerflow-agent", host)
    ident = Identity(conversation_id="lg-conv-2", actor_id="alice")
    first = await run(runner, host, "remember pineapple", config=server.config("chat"), identity=ident)
    assert final_text(first).endswith("Turn 1: you said remember pineapple")
    thread_id = _thread(first)
    second = await run(runner, host, "what did I say?", config=server.config("chat"), identity=ident)
    assert rtype(terminal(second)) == "run.completed", terminal(second).data
    text = final_text(second)
    assert text.endswith("Turn 2: you said what did I say?"), text
    assert "Turn 1" not in text and "pineapple" not in text, "an earlier turn's answer is never replayed"
    assert state_updates(second) == {}, "the stored thread is kept"
    values = server.get(f"/threads/{thread_id}/state")["values"]["messages"]
    assert [m["type"] for m in values] == ["human", "ai", "human", "ai"]


async def test_tool_step_is_shown_and_the_answer_uses_it(server):
    host = _host()
    results = await run(make_runner("deerflow-agent", host), host, "weather in Paris", config=server.config("tools"))
    assert rtype(terminal(results)) == "run.completed", terminal(results).data
    started = [r.data for r in results if rtype(r) == "tool.call.started"]
    done = [r.data for r in results if rtype(r) == "tool.call.completed"]
    assert len(started) == 1 and len(done) == 1, (started, done)
    assert "lookup" in str(started[0]) and "Paris" in str(started[0]), started[0]
    assert "Paris is sunny, 21 degrees" in str(done[0]), done[0]
    assert final_text(results).endswith("The lookup tool says: Paris is sunny, 21 degrees")


async def test_an_interrupt_is_asked_and_the_next_message_resumes_it(server):
    host = _host()
    runner = make_runner("deerflow-agent", host)
    ident = Identity(conversation_id="lg-conv-ask", actor_id="bob")
    asked = await run(runner, host, "what's the weather?", config=server.config("ask"), identity=ident)
    assert rtype(terminal(asked)) == "run.completed", terminal(asked).data
    assert "Which city do you mean?" in final_text(asked)
    thread_id = _thread(asked)
    assert server.get(f"/threads/{thread_id}")["status"] == "interrupted"
    answered = await run(runner, host, "Paris", config=server.config("ask"), identity=ident)
    assert rtype(terminal(answered)) == "run.completed", terminal(answered).data
    assert final_text(answered).endswith("you said The city is Paris"), final_text(answered)
    assert server.get(f"/threads/{thread_id}")["status"] == "idle"
    values = server.get(f"/threads/{thread_id}/state")["values"]["messages"]
    assert [m["content"] for m in values if m["type"] == "human"] == ["what's the weather?", "The city is Paris"], \
        "the reply resumed the interrupt instead of starting a new turn"


async def test_a_failing_graph_is_a_clear_failure(server):
    host = _host()
    results = await run(make_runner("deerflow-agent", host), host, "hi", config=server.config("boom"))
    code, retryable, message = failure(results)
    assert code.startswith("upstream."), code
    assert "boom: the graph failed on purpose" in message, message


async def test_unknown_assistant_is_explained_not_retried_on_fresh_threads(server):
    host = _host()
    results = await run(make_runner("deerflow-agent", host), host, "hi", config=server.config("no-such-graph"))
    code, _, message = failure(results)
    assert code in {"config.invalid", "upstream.not_found"}, code
    assert "no-such-graph" in message or "assistant" in message.lower(), message


async def test_host_cancel_cancels_the_run_on_the_server(server):
    host = _host()
    runner = make_runner("deerflow-agent", host)
    ctx = host.make_context("go slowly", config=server.config("slow"))
    gen = runner.invoke(ctx)
    seen = []
    async for r in gen:
        host.apply_result(ctx.run_id, r)
        seen.append(r)
        if rtype(r) == "message.delta" and "w1" in r.data["chunk"]["all_content"]:
            break  # the answer itself is streaming
    await gen.aclose()
    thread_id = _thread(seen)
    deadline = time.monotonic() + 10
    while True:
        statuses = [run_["status"] for run_ in server.runs(thread_id)]
        if statuses and "running" not in statuses and "pending" not in statuses:
            break
        if time.monotonic() > deadline:
            pytest.fail(f"the slow run was not cancelled on the server: {statuses}")
        await asyncio.sleep(0.2)
    assert statuses == ["interrupted"], statuses


def _post_run(server: Server, thread_id: str, body: dict) -> None:
    """One run through the API itself (as DeerFlow's own UI would make it), read to its end."""
    with httpx.stream("POST", f"{server.url}/threads/{thread_id}/runs/stream", timeout=60,
                      json={"assistant_id": "ask", "stream_mode": ["values"], **body}) as r:
        r.raise_for_status()
        for _ in r.iter_bytes():
            pass


def test_new_input_on_an_interrupted_thread_drops_the_interrupt(server):
    """The server fact the plugin's group handling rests on: a run with new input on an interrupted
    thread does not keep the interrupt waiting (the graph starts again from the start), so in a
    shared thread another member's message must not go there while the question is open."""
    thread_id = httpx.post(server.url + "/threads", json={}, timeout=30).json()["thread_id"]
    _post_run(server, thread_id, {"input": {"messages": [{"role": "user", "content": "weather?"}]}})
    first = server.get(f"/threads/{thread_id}/state")["interrupts"]
    assert len(first) == 1, first
    _post_run(server, thread_id, {"input": {"messages": [{"role": "user", "content": "lol what is this"}]}})
    after = server.get(f"/threads/{thread_id}/state")
    assert first[0]["id"] not in {i["id"] for i in after["interrupts"]}, "the first interrupt was dropped"
    # and a resume with nothing waiting runs nothing: the thread's messages stay as they were
    _post_run(server, thread_id, {"command": {"resume": "Paris"}})
    _post_run(server, thread_id, {"command": {"resume": "Rome"}})
    humans = [m["content"] for m in server.get(f"/threads/{thread_id}/state")["values"]["messages"]
              if m["type"] == "human"]
    assert humans == ["weather?", "lol what is this", "The city is Paris"], humans


async def test_group_thread_only_the_asker_answers_and_the_others_go_right_after(server):
    host = _host()
    runner = make_runner("deerflow-agent", host)
    alice = Identity(conversation_id="lg-group", actor_id="alice", actor_name="Alice")
    bob = Identity(conversation_id="lg-group", actor_id="bob", actor_name="Bob")
    conf = server.config("ask")  # default user-id-source: one thread for the group
    asked = await run(runner, host, "what's the weather?", config=conf, identity=alice)
    assert final_text(asked) == "Which city do you mean?"
    thread_id = _thread(asked)
    kept = await run(runner, host, "lol what is this bot doing", config=conf, identity=bob)
    assert "kept until Alice answers" in final_text(kept)
    assert server.get(f"/threads/{thread_id}")["status"] == "interrupted" and len(server.runs(thread_id)) == 1
    answered = await run(runner, host, "Paris", config=conf, identity=alice)
    assert rtype(terminal(answered)) == "run.completed", terminal(answered).data
    text = final_text(answered)
    assert "Turn 2: you said The city is Paris\n\n(Now what Bob wrote while the question was open:)\n\n" in text, text
    assert text.endswith("Which city do you mean?"), "Bob's message started the ask graph again"
    (question,) = [v for k, v in state_updates(answered).items() if k.startswith("deerflow.pending-interrupt")]
    assert question["actor"] == "bob", "the question about Bob's message is Bob's to answer"
    humans = [m["content"] for m in server.get(f"/threads/{thread_id}/state")["values"]["messages"]
              if m["type"] == "human"]
    assert humans[:3] == ["what's the weather?", "The city is Paris", "lol what is this bot doing"], humans


async def test_a_question_answered_elsewhere_sends_the_reply_as_a_new_message(server):
    host = _host()
    runner = make_runner("deerflow-agent", host)
    ident = Identity(conversation_id="lg-elsewhere", actor_id="alice", actor_name="Alice")
    conf = server.config("ask")
    asked = await run(runner, host, "weather?", config=conf, identity=ident)
    assert final_text(asked) == "Which city do you mean?"
    thread_id = _thread(asked)
    _post_run(server, thread_id, {"command": {"resume": "Berlin"}})  # answered in DeerFlow's own UI
    assert server.get(f"/threads/{thread_id}")["status"] == "idle"
    reply = await run(runner, host, "Paris", config=conf, identity=ident)
    assert rtype(terminal(reply)) == "run.completed", terminal(reply).data
    text = final_text(reply)
    assert text.startswith("(The DeerFlow question “Which city do you mean?” no longer waits for an answer: it "
                           "was answered elsewhere"), text
    assert text.endswith("Which city do you mean?"), "sent as new input: the ask graph starts again and asks"
    humans = [m["content"] for m in server.get(f"/threads/{thread_id}/state")["values"]["messages"]
              if m["type"] == "human"]
    assert humans == ["weather?", "The city is Berlin", "Paris"], humans


async def test_text_a_later_node_appends_to_a_streamed_message_reaches_the_chat(server):
    """The real server's messages mode never sends a message id twice (langgraph
    ``StreamMessagesHandler._emit(dedupe=True)``): the ``appends`` graph's second node returns the
    streamed answer again, same id, with "[FORCED STOP] …" added, as DeerFlow's
    LoopDetectionMiddleware does (deer-flow @f1f4af99 loop_detection_middleware.py ``_append_text``).
    Those words come only in ``values``; the chat shows them after the streamed answer."""
    host = _host()
    results = await run(make_runner("deerflow-agent", host), host, "are you looping?", config=server.config("appends"))
    assert rtype(terminal(results)) == "run.completed", terminal(results).data
    text = final_text(results)
    assert text.endswith("Turn 1: you said are you looping?\n\n[FORCED STOP] Repeated tool calls exceeded the safety "
                         "limit."), text
    assert text.count("Turn 1: you said") == 1, "the streamed part is not repeated"


class CuttingProxy:
    """A TCP relay in front of the server that cuts the first ``POST …/runs/stream`` response once
    ``marker`` passed through it (as a proxy or a network break would), and notes every join."""

    def __init__(self, upstream: str, marker: bytes):
        self.host, self.port = upstream.removeprefix("http://").split(":")
        self.marker = marker
        self.armed = True
        self.cuts = 0
        self.joins: list[bytes] = []  # the head of every GET …/runs/{run_id}/stream request
        self.server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://{peers.LOOPBACK}:{self.server.sockets[0].getsockname()[1]}"

    async def __aenter__(self) -> CuttingProxy:
        self.server = await asyncio.start_server(self._conn, peers.LOOPBACK, 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()

    async def _conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(self.host, int(self.port))
        request = [b""]  # the head of the request now on this (keep-alive) connection

        async def upward() -> None:
            while data := await reader.read(65536):
                if data.split(b" ", 1)[0] in (b"GET", b"POST", b"DELETE", b"PUT", b"PATCH"):
                    request[0] = data[:2048]
                    if data.startswith(b"GET ") and b"/runs/" in data.split(b"\r\n", 1)[0] and \
                            data.split(b"\r\n", 1)[0].split(b" ")[1].endswith(b"/stream"):
                        self.joins.append(data[:2048])
                up_writer.write(data)
                await up_writer.drain()

        async def downward() -> None:
            seen = b""
            while data := await up_reader.read(65536):
                line = request[0].split(b"\r\n", 1)[0]
                target = self.armed and line.startswith(b"POST ") and line.split(b" ")[1].endswith(b"/runs/stream")
                writer.write(data)
                await writer.drain()
                if target:
                    seen += data
                    if self.marker in seen:
                        self.armed = False
                        self.cuts += 1
                        writer.transport.abort()
                        up_writer.close()
                        return

        try:
            await asyncio.gather(upward(), downward())
        except (ConnectionError, OSError):
            pass
        finally:
            for w in (writer, up_writer):
                if not w.transport.is_closing():
                    w.close()


async def test_a_cut_stream_goes_on_and_is_joined_after_its_last_event(server):
    """The run is started with ``on_disconnect: "continue"`` and ``stream_resumable: true``; a proxy
    cuts its stream mid-answer. The server keeps running it (langgraph-api 0.16.7 api/runs.py
    ``stream_run``: only "cancel" cancels on a disconnect), the plugin joins it with ``Last-Event-ID``
    (``join_run_stream``; langgraph-runtime-inmem ``Runs.Stream.join`` replays a resumable run's
    events after that id) and the answer completes once, in order."""
    host = _host()
    runner = make_runner("deerflow-agent", host)
    async with CuttingProxy(server.url, marker=b"w3") as proxy:
        results = await run(runner, host, "count", config={**server.config("words"), "api-base": proxy.url})
    assert rtype(terminal(results)) == "run.completed", terminal(results).data
    assert proxy.cuts == 1 and len(proxy.joins) == 1, (proxy.cuts, proxy.joins)
    assert b"last-event-id:" in proxy.joins[0].lower(), proxy.joins[0]
    text = final_text(results)
    assert text.endswith(" ".join(f"w{i}" for i in range(15))), text
    shown = [d for d in deltas(results) if d]
    assert all(b.startswith(a) for a, b in zip(shown, shown[1:], strict=False)), shown
    thread_id = _thread(results)
    assert [r["status"] for r in server.runs(thread_id)] == ["success"], "the cut did not cancel the run"


async def test_extra_configurable_reaches_a_langgraph_graphs_configurable(server):
    """langgraph-api copies the run's ``context`` into the graph's ``configurable`` (models/run.py
    ``create_valid_run``), which is where the plugin puts **Extra agent settings** on LangGraph."""
    host = _host()
    conf = {**server.config("configured"), "advanced-settings": True, "extra-configurable": '{"greeting": "hi there"}'}
    results = await run(make_runner("deerflow-agent", host), host, "hello", config=conf)
    assert final_text(results) == "greeting=hi there", final_text(results)


async def test_a_reset_deletes_the_thread_it_left_behind(server):
    """After a LangBot reset the kit hands the old thread id to ``end_conversation``, which deletes it
    on the server (``DELETE /threads/{id}``, langgraph-api api/threads.py ``delete_thread``)."""
    host = _host()
    runner = make_runner("deerflow-agent", host)
    ident = Identity(conversation_id="lg-reset", actor_id="carol")
    first = await run(runner, host, "remember mango", config=server.config("chat"), identity=ident)
    old = _thread(first)
    assert server.get(f"/threads/{old}")["thread_id"] == old
    host.reset_conversation(ident)
    second = await run(runner, host, "what did I say?", config=server.config("chat"), identity=ident)
    assert rtype(terminal(second)) == "run.completed", terminal(second).data
    assert final_text(second).endswith("Turn 1: you said what did I say?"), "a new thread: turn 1 again"
    assert _thread(second) != old
    gone = await asyncio.to_thread(httpx.get, f"{server.url}/threads/{old}", timeout=30)
    assert gone.status_code == 404, gone.text
