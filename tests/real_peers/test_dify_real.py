"""DifyAgent against a real Dify 1.12.1 API server (opt-in: RUN_SLOW=1; see dify_server.py).

The server is Dify's own ``api/`` from a source tree in the cache (``$DIFY_SOURCE``), with PostgreSQL
and Redis, all on loopback, provisioned with the apps of ``dify_apps.py``. Without the source tree
every test here skips, saying why and the one command that provides it.

Not covered, because this server cannot run them:

- chatbot and agent apps: every one of them calls a model, and a model provider needs Dify's plugin
  daemon, which cannot be built here;
- Human Input forms answered from the chat: the Service API for them (``/v1/form/human_input``)
  arrived in Dify 1.13, whose source (and its Python 3.12) is not available here.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import select
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from runner_kit.http import close_shared_client
from runners_cli.host import Identity, LocalHost
from tests.helpers import (
    deltas,
    failure,
    final_text,
    make_runner,
    messages,
    rtype,
    run,
    state_updates,
    terminal,
)
from tests.real_peers import dify_apps, dify_server, peers

pytestmark = [pytest.mark.slow, pytest.mark.real_peers, pytest.mark.timeout(900)]

PLUGIN = "dify-agent"
PNG_DOT = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP438AAAAQBAYDFKhhdAAAAAElFTkSuQmCC"


class SlowServer:
    """A loopback HTTP server whose ``GET /slow`` answers after ``delay`` seconds, or never answers
    when the caller hangs up first: what a Dify HTTP Request node waits on in the stop tests."""

    def __init__(self, delay: float = 1.0):
        self.delay = delay
        self.started = 0  # requests received
        self.finished = 0  # answered
        self.dropped = 0  # the caller hung up before the answer
        self.paths: list[str] = []  # what was asked, in order
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                server.started += 1
                server.paths.append(self.path)
                deadline = time.monotonic() + server.delay
                while time.monotonic() < deadline:
                    readable, _, _ = select.select([self.connection], [], [], 0.05)
                    if readable and not self.connection.recv(1, socket.MSG_PEEK):
                        server.dropped += 1
                        return
                body = b"late answer"
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                server.finished += 1

            def log_message(self, *args: Any) -> None:
                pass

        self._httpd = ThreadingHTTPServer((peers.LOOPBACK, 0), Handler)
        self._httpd.daemon_threads = True
        self.url = f"http://{peers.LOOPBACK}:{self._httpd.server_address[1]}/slow"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def __enter__(self) -> SlowServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


@pytest.fixture(scope="module")
def slow():
    with SlowServer() as server:
        yield server


@pytest.fixture(scope="module")
def dify(slow):
    problem = dify_server.source_problem()
    if problem:
        pytest.skip(problem)
    with dify_server.running_dify(dify_apps.all_apps(slow.url), unpublished=("workflow_unpublished",)) as server:
        yield server


@pytest.fixture(autouse=True)
async def _close_client():
    yield
    await close_shared_client()


def _host() -> LocalHost:
    return LocalHost(runner_id="plugin:langbot-team/DifyAgent/default")


def _config(dify: dify_server.Dify, app: str, **extra: Any) -> dict[str, Any]:
    app_type = "workflow" if dify.apps[app].mode == "workflow" else "chatflow"
    return {"base-url": dify.api, "api-key": dify.apps[app].key, "app-type": app_type, "timeout": 60, **extra}


def _conversation(results: list[Any]) -> str:
    (cid,) = state_updates(results).values()
    return cid


# --- chatflow: streaming, kept conversations, group members ----------------------------------------


async def test_chatflow_streams_and_keeps_the_conversation(dify):
    host = _host()
    runner = make_runner(PLUGIN, host)
    cfg = _config(dify, "chatflow")
    first = await run(runner, host, "hello", config=cfg)
    assert rtype(terminal(first)) == "run.completed", terminal(first).data
    assert final_text(first) == "echo: hello | last: none"
    assert deltas(first), "the answer reached the chat as it streamed"
    cid = _conversation(first)
    second = await run(runner, host, "second", config=cfg)
    assert final_text(second) == "echo: second | last: hello", "the conversation variable kept the first turn"
    assert state_updates(second) == {}, "the same Dify conversation is used again"
    with dify.service("chatflow") as api:
        names = api.get(f"/conversations/{cid}/variables", params={"user": "user_u-1"}).json()
    assert {v["name"]: v["value"] for v in names["data"]}["last"] == "second"


@pytest.mark.parametrize("source", ["actor", "conversation"])
async def test_members_of_a_group(dify, source):
    """Two members of one group chat, alternating: with ``actor`` each has their own Dify user and
    conversation (Dify would refuse one member's conversation to the other); with ``conversation``
    the group is one Dify user sharing one conversation."""
    host = _host()
    runner = make_runner(PLUGIN, host)
    cfg = _config(dify, "chatflow", **{"user-id-source": source})
    ann = Identity(conversation_id=f"group-{source}", actor_id="ann", actor_name="Ann")
    bob = Identity(conversation_id=f"group-{source}", actor_id="bob", actor_name="Bob")
    assert final_text(await run(runner, host, "ann-1", config=cfg, identity=ann)) == "echo: ann-1 | last: none"
    bob_first = final_text(await run(runner, host, "bob-1", config=cfg, identity=bob))
    ann_second = final_text(await run(runner, host, "ann-2", config=cfg, identity=ann))
    if source == "actor":
        assert bob_first == "echo: bob-1 | last: none"
        assert ann_second == "echo: ann-2 | last: ann-1", "Bob's turn did not enter Ann's conversation"
    else:
        assert bob_first == "echo: bob-1 | last: ann-1"
        assert ann_second == "echo: ann-2 | last: bob-1"


async def test_a_conversation_deleted_in_dify_starts_afresh_with_a_notice(dify):
    host = _host()
    runner = make_runner(PLUGIN, host)
    cfg = _config(dify, "chatflow")
    ident = Identity(conversation_id="conv-deleted")
    cid = _conversation(await run(runner, host, "before", config=cfg, identity=ident))
    with dify.service("chatflow") as api:
        assert api.request("DELETE", f"/conversations/{cid}", json={"user": "user_u-1"}).status_code == 204
    results = await run(runner, host, "after", config=cfg, identity=ident)
    assert rtype(terminal(results)) == "run.completed", terminal(results).data
    text = final_text(results)
    assert text.endswith("echo: after | last: none"), text
    assert text != "echo: after | last: none", "the member is told the conversation started afresh"
    assert "did you mean" not in text
    assert _conversation(results) != cid


async def test_a_langbot_reset_deletes_the_dify_conversation(dify):
    host = _host()
    runner = make_runner(PLUGIN, host)
    cfg = _config(dify, "chatflow")
    ident = Identity(conversation_id="conv-reset")
    old = _conversation(await run(runner, host, "remember me", config=cfg, identity=ident))
    host.reset_conversation(ident)
    results = await run(runner, host, "fresh?", config=cfg, identity=ident)
    assert final_text(results) == "echo: fresh? | last: none"
    with dify.service("chatflow") as api:
        listed = api.get("/conversations", params={"user": "user_u-1", "limit": 100}).json()["data"]
    ids = {c["id"] for c in listed}
    assert old not in ids, "the conversation LangBot reset was deleted in Dify"
    assert _conversation(results) in ids


async def test_files_reach_the_chatflow(dify, tmp_path, monkeypatch):
    """An image and a document, the document named as a macOS screenshot is (Dify refuses ``:`` in
    upload names: the plugin sends ``_`` instead of failing the message)."""
    monkeypatch.setenv("RUNNER_KIT_FILE_DIRS", str(tmp_path))
    (tmp_path / "notes 12:30.txt").write_text("meeting notes", encoding="utf-8")
    host = _host()
    runner = make_runner(PLUGIN, host)
    contents = [{"type": "image_base64", "image_base64": f"data:image/png;base64,{PNG_DOT}"}]
    attachments = [{"type": "file", "source": "message_chain", "path": str(tmp_path / "notes 12:30.txt"),
                    "name": "notes 12:30.txt"}]
    results = await run(runner, host, "what are these", config=_config(dify, "chatflow_files"), contents=contents,
                        attachments=attachments)
    assert rtype(terminal(results)) == "run.completed", terminal(results).data
    text = final_text(results)
    assert text.startswith("got: what are these | files: "), text
    assert "notes 12_30.txt" in text, text
    assert text.count("](") >= 2, f"both files reached the run as Dify files: {text}"
    # the Answer node's files come back in message_end.files: the image shown, the document linked
    assert _attached(results) == [("image_url", None), ("file_url", "notes 12_30.txt")], _attached(results)


def _attached(results: list[Any]) -> list[tuple[str, str | None]]:
    """(kind, file name) of what the answer carries besides text; every link is Dify's signed one."""
    content = [r for r in results if rtype(r) == "message.completed"][-1].data["message"]["content"]
    out = []
    for part in content if isinstance(content, list) else []:
        if part["type"] == "image_url":
            assert "/files/" in part["image_url"]["url"] and "sign=" in part["image_url"]["url"], part
            out.append(("image_url", None))
        elif part["type"] == "file_url":
            assert "/files/" in part["file_url"] and "sign=" in part["file_url"], part
            out.append(("file_url", part["file_name"]))
    return out


async def test_a_workflow_answers_with_its_text_and_its_files(dify, tmp_path, monkeypatch):
    """End node: ``result`` (text) and ``files`` (the message's files): the text is the answer, the
    files are attached, and no JSON of Dify's file objects reaches the chat."""
    monkeypatch.setenv("RUNNER_KIT_FILE_DIRS", str(tmp_path))
    (tmp_path / "report.txt").write_text("quarterly", encoding="utf-8")
    host = _host()
    runner = make_runner(PLUGIN, host)
    contents = [{"type": "image_base64", "image_base64": f"data:image/png;base64,{PNG_DOT}"}]
    attachments = [{"type": "file", "source": "message_chain", "path": str(tmp_path / "report.txt"), "name": "report.txt"}]
    results = await run(runner, host, "file these", config=_config(dify, "workflow_files"), contents=contents,
                        attachments=attachments)
    assert rtype(terminal(results)) == "run.completed", terminal(results).data
    assert final_text(results) == "file these"
    assert _attached(results) == [("image_url", None), ("file_url", "report.txt")]


# --- a long conversation, overlapping members ------------------------------------------------------


async def test_a_long_conversation_stays_one_dify_conversation(dify):
    """120 turns: every one continues the same Dify conversation and sees the turn before it."""
    host = _host()
    runner = make_runner(PLUGIN, host)
    cfg = _config(dify, "chatflow")
    ident = Identity(conversation_id="conv-long")
    cid = _conversation(await run(runner, host, "turn 0", config=cfg, identity=ident))
    for n in range(1, 120):
        results = await run(runner, host, f"turn {n}", config=cfg, identity=ident)
        assert final_text(results) == f"echo: turn {n} | last: turn {n - 1}", (n, terminal(results).data)
        assert state_updates(results) == {}, n
    with dify.service("chatflow") as api:
        page = api.get("/messages", params={"user": "user_u-1", "conversation_id": cid, "limit": 100}).json()
    assert page["has_more"] is True and len(page["data"]) == 100


@pytest.mark.parametrize("source", ["actor", "conversation"])
async def test_overlapping_members_lose_nothing(dify, source):
    """Three members write at the same moment, twice: every message is answered once, in a kept
    conversation (one each with ``actor``; one shared, taken in turn, with ``conversation``)."""
    host = _host()
    runner = make_runner(PLUGIN, host)
    cfg = _config(dify, "chatflow", **{"user-id-source": source})
    people = [Identity(conversation_id=f"overlap-{source}", actor_id=name, actor_name=name) for name in ("ann", "bob", "cy")]
    answers: list[str] = []
    for round_ in (1, 2):
        batch = await asyncio.gather(*(run(runner, host, f"{p.actor_id}-{round_}", config=cfg, identity=p)
                                       for p in people))
        for results in batch:
            assert rtype(terminal(results)) == "run.completed", terminal(results).data
            shown = messages(results)  # a run that waited for the one before it may first say so
            assert len(shown) <= 2 and shown[-1].startswith("echo: "), shown
            answers.append(shown[-1])
    said = sorted(a.split(" | ")[0].removeprefix("echo: ") for a in answers)
    assert said == sorted(f"{n}-{r}" for n in ("ann", "bob", "cy") for r in (1, 2))
    lasts = [a.split(" | last: ")[1] for a in answers]
    if source == "actor":
        assert sorted(lasts) == ["ann-1", "bob-1", "cy-1", "none", "none", "none"], answers
    else:
        assert lasts.count("none") == 1, f"one shared conversation, each turn after another: {answers}"


# --- workflow apps ---------------------------------------------------------------------------------


async def test_workflow_streams_its_output(dify):
    host = _host()
    runner = make_runner(PLUGIN, host)
    results = await run(runner, host, "run the flow", config=_config(dify, "workflow"))
    assert rtype(terminal(results)) == "run.completed", terminal(results).data
    assert final_text(results) == "run the flow"
    assert deltas(results), "the End node's text_chunk reached the chat before the end"


async def test_workflow_blocking_answer_is_read(dify, monkeypatch):
    """A blocking answer (what a gateway that buffers the stream hands on): the real
    ``{task_id, workflow_run_id, data{status, outputs}}`` body is read like the stream's end."""
    host = _host()
    runner = make_runner(PLUGIN, host)
    adapter_cls = type(runner).adapter
    original = adapter_cls._request

    async def blocking(self):
        url, body = await original(self)
        return url, {**body, "response_mode": "blocking"}

    monkeypatch.setattr(adapter_cls, "_request", blocking)
    results = await run(runner, host, "blocking please", config=_config(dify, "workflow"))
    assert rtype(terminal(results)) == "run.completed", terminal(results).data
    assert final_text(results) == "blocking please"
    chat = await run(runner, host, "and chat", config=_config(dify, "chatflow"))
    assert final_text(chat) == "echo: and chat | last: none"


# --- stop ------------------------------------------------------------------------------------------


async def _stopped_midway(runner: Any, host: LocalHost, ctx: Any, started: Callable[[], bool],
                          after: float = 0.3) -> list[Any]:
    """Run ``ctx`` until ``started()`` (the slow request reached our server) and ``after`` seconds
    more, then cancel the run as the host does (its task is cancelled)."""
    results: list[Any] = []

    async def consume() -> None:
        async for r in runner.invoke(ctx):
            host.apply_result(ctx.run_id, r)
            results.append(r)

    task = asyncio.create_task(consume())
    deadline = time.monotonic() + 30
    while not started():
        if task.done() or time.monotonic() > deadline:
            task.cancel()
            pytest.fail(f"the slow request never started: {[rtype(r) for r in results]}")
        await asyncio.sleep(0.05)
    await asyncio.sleep(after)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return results


def _runs(dify: dify_server.Dify, app: str) -> list[dict[str, Any]]:
    path = "advanced-chat/workflow-runs" if dify.apps[app].mode == "advanced-chat" else "workflow-runs"
    return dify.console_get(f"/console/api/apps/{dify.apps[app].app_id}/{path}", limit=20, triggered_from="app-run")["data"]


async def _settled(dify: dify_server.Dify, app: str, slow: SlowServer, wait: float) -> str:
    """The newest run's status once it ended, or once both slow requests could have been answered."""
    deadline = time.monotonic() + wait
    while True:
        runs = _runs(dify, app)
        status = runs[0]["status"] if runs else "none"
        if status not in ("none", "running") or time.monotonic() > deadline:
            return status
        await asyncio.sleep(0.2)


@pytest.mark.parametrize("app", ["workflow_slow", "chatflow_slow"])
async def test_stop_ends_the_run_in_dify(dify, slow, app, monkeypatch):
    """LangBot cancels the run while Dify waits on the app's first slow request. Hanging up alone
    leaves Dify's run going to completion (``succeeded``, its second request answered); the
    plugin's stop call is what keeps it from completing. Dify 1.12.1 still starts the node after the
    one that was running, ends the stream with ``workflow_finished`` ``stopped``, and keeps the run
    ``running`` in its logs when nobody reads that stream: the test holds the plugin to the part
    that is its own (the stop reaches Dify in time, so the run never succeeds)."""
    slow.delay = 3.0
    host = _host()
    runner = make_runner(PLUGIN, host)
    outcomes = {}
    for stop in (True, False):
        if not stop:
            monkeypatch.setattr(type(runner).adapter, "cancel", _no_stop)
        slow.paths.clear()
        ctx = host.make_context("take your time", config=_config(dify, app))
        # Dify streams its first event (the task id the stop needs) about a second after a new
        # conversation's run began here: it first fails to reach the absent plugin daemon
        await _stopped_midway(runner, host, ctx, lambda: bool(slow.paths), after=1.5)
        outcomes[stop] = await _settled(dify, app, slow, wait=3 * slow.delay + 3)
    assert outcomes[False] == "succeeded", "without the stop call Dify completes the run the chat left"
    assert outcomes[True] != "succeeded", f"the stopped run completed in Dify anyway ({outcomes[True]})"


async def _no_stop(self: Any) -> None:
    """The adapter's cancel with no stop call: the chat hangs up and nothing else."""


# --- what the bot owner is told --------------------------------------------------------------------


async def test_configuration_mistakes_are_clear_errors(dify):
    host = _host()
    runner = make_runner(PLUGIN, host)
    cases: list[tuple[str, dict[str, Any], str, tuple[str, ...]]] = [
        ("bad key", {**_config(dify, "chatflow"), "api-key": "app-not-a-real-key"}, "upstream.auth",
         ("Access token is invalid", "check the app API key")),
        ("workflow key, chatflow type", {**_config(dify, "workflow"), "app-type": "chatflow"}, "config.invalid",
         ("set app-type to workflow",)),
        ("chatflow key, workflow type", {**_config(dify, "chatflow"), "app-type": "workflow"}, "config.invalid",
         ("set app-type to chat, agent or chatflow",)),
        ("unpublished", _config(dify, "workflow_unpublished"), "config.invalid",
         ("Workflow not published", "publish")),
        ("missing input", _config(dify, "workflow_ticket"), "config.invalid", ("ticket is required", "Extra app inputs")),
        ("base-url without /v1", {**_config(dify, "chatflow"), "base-url": dify.base}, "upstream.not_found",
         ("/v1",)),
    ]
    for label, cfg, code, phrases in cases:
        got, retryable, message = failure(await run(runner, host, "hi", config=cfg))
        assert (got, retryable) == (code, False), (label, got, message)
        for phrase in phrases:
            assert phrase in message, (label, message)
        assert "did you mean" not in message, (label, message)
        assert dify.apps["chatflow"].key not in message
    ok = await run(runner, host, "hi", config={**_config(dify, "workflow_ticket"), "advanced-settings": True, "inputs": {"ticket": "T-7"}})
    assert final_text(ok) == "T-7", "with the input set under inputs the same app runs"


async def test_unknown_app_type_is_refused_before_anything_is_sent(dify):
    host = _host()
    runner = make_runner(PLUGIN, host)
    code, _, message = failure(await run(runner, host, "hi", config={**_config(dify, "chatflow"), "app-type": "assistant"}))
    assert code == "config.invalid" and "app-type" in message, message


# --- from a terminal -------------------------------------------------------------------------------


def test_runners_chat_keeps_the_conversation(dify, tmp_path):
    script = shutil.which("runners", path=str(Path(sys.executable).parent))
    cmd = [script] if script else [sys.executable, "-m", "runners_cli"]
    cfg = _config(dify, "chatflow")
    args = [*cmd, "chat", PLUGIN, "--set", f"base-url={cfg['base-url']}", "--set", f"api-key={cfg['api-key']}",
            "--set", "app-type=chatflow", "--state", str(tmp_path / "chat.sqlite")]
    first = subprocess.run([*args, "-m", "from the terminal"], capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == "echo: from the terminal | last: none", first.stdout
    second = subprocess.run([*args, "-m", "again"], capture_output=True, text=True, timeout=120)
    assert second.returncode == 0, second.stderr
    assert second.stdout.strip() == "echo: again | last: from the terminal", second.stdout
    assert cfg["api-key"] not in first.stdout + first.stderr + second.stdout + second.stderr


def test_the_suite_says_why_it_skips_without_the_source(tmp_path, monkeypatch):
    """With no source tree the reason names the one command that provides it (in the default suite,
    tests/test_warm_caches.py checks the same reason without a Dify)."""
    monkeypatch.setenv("DIFY_SOURCE", str(tmp_path / "nothing-here"))
    problem = dify_server.source_problem()
    assert problem is not None and dify_server.PROVIDE_COMMAND in problem and "nothing-here" in problem
    (tmp_path / "old" / "api").mkdir(parents=True)
    (tmp_path / "old" / "api" / "pyproject.toml").write_text('[project]\nname = "dify-api"\nversion = "1.9.0"\n')
    assert "1.9.0" in (dify_server.source_problem(tmp_path / "old") or "")




# --- the fake the default suite uses, held to the real server ---------------------------------------


def _events(raw: bytes) -> list[dict[str, Any]]:
    return [json.loads(block[len("data: "):]) for block in raw.decode().split("\n\n") if block.startswith("data: ")]


def _shapes(events: list[dict[str, Any]]) -> dict[str, set[str]]:
    """Per event name, its fields (and ``data.*`` fields): what a parser may rely on."""
    out: dict[str, set[str]] = {}
    for e in events:
        keys = set(e) | {f"data.{k}" for k in (e.get("data") or {}) if isinstance(e.get("data"), dict)}
        out.setdefault(e["event"], set()).update(keys)
    return out


@pytest.mark.parametrize(("app", "fake_mode", "path"), [
    ("chatflow", "chatflow", "/chat-messages"),
    ("workflow", "workflow", "/workflows/run"),
])
def test_the_fake_sends_what_the_real_server_sends(dify, app, fake_mode, path):
    """Same request to the real Dify and to tests/fakes/dify.py: the run's opening and closing
    events in the same order, every field the real server puts in an event, and in the blocking body."""
    from tests.fakes.dify import FakeDify

    body = {"inputs": {"langbot_user_message_text": "hi"}, "query": "hi", "user": "u-conf",
            "response_mode": "streaming"}
    with dify.service(app) as api:
        real = _events(api.post(path, json=body).content)
        real_blocking = api.post(path, json={**body, "response_mode": "blocking"}).json()
    with FakeDify(api_key="app-conformance") as fake:
        fake.mode = fake_mode
        headers = {"Authorization": "Bearer app-conformance"}
        with httpx.Client(base_url=fake.base_url, headers=headers, timeout=30) as client:
            faked = _events(client.post(path, json=body).content)
            fake_blocking = client.post(path, json={**body, "response_mode": "blocking"}).json()
    frame = ("workflow_started", "workflow_finished", "message_end")  # node events follow each app's graph
    assert [e["event"] for e in real if e["event"] in frame] == [e["event"] for e in faked if e["event"] in frame]
    real_shapes, fake_shapes = _shapes(real), _shapes(faked)
    missing = {name: sorted(keys - fake_shapes[name]) for name, keys in real_shapes.items()
               if name in fake_shapes and keys - fake_shapes[name]}
    assert not missing, f"fields the real Dify sends and the fake does not: {missing}"
    assert set(real_blocking) <= set(fake_blocking), sorted(set(real_blocking) - set(fake_blocking))
