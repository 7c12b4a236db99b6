"""Faithful fake of DeerFlow's LangGraph-compatible API and of a plain LangGraph API server
(docs/platforms.md §8, real-http-peers.md §1, the real captures in fixtures/real-peers/langgraph/).

Two flavours (``flavor``):

- ``deerflow`` — the DeerFlow gateway behind its nginx: the API under ``/api/langgraph`` (nginx)
  and ``/api`` (gateway), LF framing, ``: heartbeat`` comments, a final ``event: end`` with
  ``data: null``, errors ``{"name", "message"}``, strict run validation (unknown fields → 422,
  ``stream_mode`` only values/messages-tuple/updates/debug/tasks/checkpoints/custom), Bearer auth
  (a personal access token) unless ``auth_disabled``, ``POST /api/threads/{id}/uploads``. As the
  real gateway since 2.0-rc (``runs/stream`` is ``require_permission(..., require_existing=True)``
  in ``app/gateway/routers/thread_runs.py``): a run on a thread it does not track is 404
  ``Thread <id> not found``, so a client creates the thread first (``creates_unknown_threads``
  models the gateway of 2026-03-30..04-08, which created it instead; uploads never need the thread
  to exist); every ``assistant_id`` runs the lead agent (another name is a custom agent; one with other characters is
  refused), an unknown ``context.model_name`` is 400, JSON uses Python's default separators.
- ``langgraph`` — ``langgraph dev``: the API at the root, CRLF framing, heartbeats, the stream just
  ends (no ``end``), errors ``{"error", "message"}``, ``x-api-key`` auth when keys are set, mode
  ``messages`` as ``messages/metadata`` + accumulated ``messages/partial``.

Both: ``Content-Location: /threads/{tid}/runs/{run_id}`` and no ``Location`` (that would make a
LangGraph SDK reconnect), ``{"detail": …}`` errors, 404 ``Thread or assistant not found.`` (LangGraph:
an unknown thread or assistant UUID; an unknown graph name is 422), 409 for a busy thread, FastAPI's ``{"detail":"Not Found"}`` for unknown routes, threads keep the whole
history (every ``values`` event carries it), ``interrupt`` / ``clarification`` scenarios, subagent
``custom`` task events, cancel. Interrupts as ``langgraph dev`` 0.16 handles them (seen there): the
thread's state lists them (``interrupts`` and each task's; DeerFlow's gateway only ``next`` and
tasks without interrupts); a run with new input on an interrupted
thread drops the interrupt and runs the graph from the start; a resume with no interrupt waiting
runs nothing (only ``values``, unchanged); :meth:`FakeDeerFlow.answer_interrupt` answers one as
DeerFlow's own UI would.

Runs outlive their HTTP stream, as on both servers: a run is a task that publishes its events into
the run's log (DeerFlow's ``StreamBridge``, LangGraph's stream manager) and every stream — the
``POST …/runs/stream`` that created it, or a later ``GET …/runs/{run_id}/stream`` join — writes
that log out. When the creating stream's client goes away the run is cancelled only with
``on_disconnect: "cancel"`` (DeerFlow's default, ``app/gateway/run_models.py`` and
``services.py`` ``sse_consumer``; langgraph-api 0.16.7 defaults to ``"continue"``,
``api/runs.py`` ``stream_run``). Joins: DeerFlow stamps every event ``id: <ms>-<seq>`` (after
``data:``), replays after ``Last-Event-ID`` (or, without one or with an id it does not know, from
the earliest event it still keeps), answers an id older than what it keeps with one ``gap`` event
and keeps a run's events ``stream_cleanup_delay`` seconds after it ended (then a join gets only
``end``); LangGraph stamps ids only on ``stream_resumable`` runs, replays after ``Last-Event-ID``
only for those, and otherwise joins live (nothing of what was sent before).

Both servers' ``messages`` mode drops a message whose id it already streamed
(``StreamMessagesHandler._emit(dedupe=True)`` for node outputs): text a middleware appends to a
streamed message (DeerFlow's LoopDetectionMiddleware "[FORCED STOP] …", its
SafetyFinishReasonMiddleware explanation; ``appended``) reaches a client only in ``values`` and
``updates``. Files a DeerFlow run presents (``present_files``) are listed in ``values.artifacts``
(merged over the thread's life, ``merge_artifacts``) and in the tool node's ``updates``, and served
by ``GET /api/threads/{id}/artifacts/<virtual path>`` (``app/gateway/routers/artifacts.py``).
``DELETE {prefix}/threads/{id}``: LangGraph 204 (its runs go with it), DeerFlow 200
``{"success", "message"}`` or 409 while a run is in flight.
"""

from __future__ import annotations

import asyncio
import json
import mimetypes
import re
import time
import uuid
from dataclasses import dataclass, field
from http import HTTPStatus
from types import SimpleNamespace
from typing import Any

from .http_server import FakeHTTPServer, Request, Response

__all__ = ["FAULTS", "FakeDeerFlow", "Thread"]

MiB = 1024 * 1024
_ARTIFACT = re.compile(r"^/api/threads/([^/]+)/artifacts/(.+)$")
DELETE_BUSY = "Thread has work in flight. Delete it after the work finishes."
DEERFLOW_MODES = {"values", "messages-tuple", "updates", "debug", "tasks", "checkpoints", "custom"}
LANGGRAPH_MODES = DEERFLOW_MODES | {"messages", "events"}
RUN_FIELDS = {
    "assistant_id", "input", "command", "metadata", "config", "context", "conversation_references", "webhook",
    "checkpoint_id", "checkpoint", "interrupt_before", "interrupt_after", "stream_mode", "stream_subgraphs",
    "stream_resumable", "on_disconnect", "on_completion", "multitask_strategy", "after_seconds", "if_not_exists",
    "feedback_keys",
}
BUSY = "Thread is already running a task. Wait for it to finish or choose a different multitask strategy."
MISSING = "Thread or assistant not found."
_FAULT_BODIES: dict[int, Any] = {
    400: {"detail": "Bad Request"},
    401: {"detail": {"code": "not_authenticated", "message": "Authentication required"}},
    403: {"detail": "Forbidden: missing permission threads:write"},
    404: {"detail": "Not Found"},
    413: {"detail": "Request Entity Too Large"},
    429: {"detail": "Too Many Requests"},
    500: "Internal Server Error",
    502: {"detail": "Bad Gateway"},
    503: {"detail": "Service Unavailable"},
}
_STREAM_FAULTS = ("invalid_json", "truncated", "error_event", "empty", "non_utf8", "oversized", "stall",
                  "stall_before_headers", "stall_pings")
_RAW_FAULTS = ("empty", "invalid_json", "non_utf8", "oversized")  # served as bytes, with no run behind them
FAULTS: tuple[str, ...] = (
    tuple(f"http_{s}" for s in _FAULT_BODIES) + tuple(f"html_{s}" for s in _FAULT_BODIES) + _STREAM_FAULTS
)


def _dumps(obj: Any, compact: bool = True) -> str:
    return json.dumps(obj, separators=(",", ":") if compact else None, ensure_ascii=False)


@dataclass
class Thread:
    id: str
    metadata: dict[str, Any]
    messages: list[dict[str, Any]] = field(default_factory=list)
    interrupt: dict[str, Any] | None = None  # pending {"value", "id"}
    busy: bool = False
    uploads: dict[str, bytes] = field(default_factory=dict)
    artifacts: list[str] = field(default_factory=list)  # values.artifacts: every path presented so far
    files: dict[str, bytes] = field(default_factory=dict)  # virtual path -> bytes the artifacts route serves


@dataclass
class RunLog:
    """One run's published events (DeerFlow's stream bridge, LangGraph's stream manager)."""

    run_id: str
    thread_id: str
    on_disconnect: str
    resumable: bool
    events: list[tuple[str, str, Any]] = field(default_factory=list)  # (id, event, data), retained only
    start: int = 0  # the absolute offset of events[0]
    seq: int = 0
    ended: bool = False
    ended_at: float = 0.0
    status: str = "pending"
    quiet: bool = False  # a stall without heartbeats (the "stall" fault)
    cut_at: int | None = None  # the creating stream is cut once it wrote this many events ("truncated")
    task: asyncio.Task[None] | None = None

    def publish(self, name: str, data: Any, keep: int) -> None:
        self.events.append((f"{int(time.time() * 1000)}-{self.seq}", name, data))
        self.seq += 1
        if len(self.events) > keep:
            drop = len(self.events) - keep
            del self.events[:drop]
            self.start += drop


class _Gone(Exception):
    """The client went away or the run was cancelled: stop writing."""


class FakeDeerFlow(FakeHTTPServer):
    """``with FakeDeerFlow() as srv: config = {"api-base": srv.base_url}``."""

    server_name = "uvicorn"

    def __init__(self, api_key: str | None = None, *, flavor: str = "deerflow", auth_disabled: bool | None = None,
                 port: int = 0) -> None:
        super().__init__(port=port)
        if flavor not in ("deerflow", "langgraph"):
            raise ValueError(flavor)
        self.flavor = flavor
        self.api_key = api_key
        self.api_keys: set[str] = set()
        self.auth_disabled = api_key is None if auth_disabled is None else auth_disabled
        self.assistants = {"agent", "lead_agent"}  # LangGraph: the graphs in langgraph.json
        self.models = {"deepseek-v3", "fake-model"}  # DeerFlow: the models in config.yaml
        # -- scenario knobs (read once at the start of each run) --
        self.answer_tokens: list[str] = ["Hello", " from", " the", " fake", " agent."]
        self.reasoning = ""  # streamed first as additional_kwargs.reasoning_content
        self.thinking_blocks = False  # reasoning as {"type":"thinking"} content blocks instead
        self.token_delay = 0.0
        self.include_usage = True
        self.whole_message = False  # the node returns one whole "ai" message (no chunks)
        self.tool_call = False  # one get_weather tool step before the answer
        self.subagent = False  # a DeerFlow "task" subagent step with custom task events
        self.interrupt_value: Any = None  # the next run interrupts with this value
        self.clarification: dict[str, Any] | None = None  # the model calls ask_clarification
        self.fail_with: tuple[str, str] | None = None  # an error event (exception name, message) after the tokens
        # a middleware rewrites the streamed answer (same id) with this text appended: values/updates only
        self.appended: str | None = None
        self.present_files: dict[str, bytes] = {}  # the run presents these files (virtual path -> bytes)
        self.extra_artifacts: list[str] = []  # written into values.artifacts as they are (a custom agent)
        self.after_answer_delay = 0.0  # the run goes on this long after the answer's last chunk
        self.tool_preamble = ""  # the tool-calling model turn streams this text before its call ("Let me look")
        # -- joins: what a client that joins a run again may meet --
        self.join_gaps = 0  # the next joins with a Last-Event-ID get DeerFlow's ``gap`` (the events are gone)
        self.join_after_run_ends = False  # a join is answered only once the run ended (the client came late)
        self.lose_runs = False  # the server restarted: it no longer knows any run (a join is 404 / "Run not found")
        self.cut_cleanly = False  # "truncated" ends the body properly (a proxy closing it) instead of breaking it
        self.retained_events = 256  # DeerFlow MemoryStreamBridge queue_maxsize
        self.stream_cleanup_delay = 60.0  # DeerFlow keeps a run's events this long after it ended
        self.heartbeat_interval = 5.0
        # DeerFlow before 2.0-rc: a run on an unknown thread created it (empty) instead of a 404
        self.creates_unknown_threads = False
        self._fault: str | None = None
        self.fault_queue: list[str | None] = []
        self.stall_seconds = 3600.0
        self.oversized_bytes = 9 * MiB
        # -- recorded state --
        self.threads: dict[str, Thread] = {}
        self.runs: list[SimpleNamespace] = []  # thread_id, body, headers, run_id
        self.cancelled: list[str] = []  # run ids a cancel request named (running, or already over: 404)
        self.disconnect_cancelled: list[str] = []  # runs stopped because the client went away (on_disconnect)
        self._cancel_flags: dict[str, asyncio.Event] = {}  # every run's flag, kept after it ended
        self._active: set[str] = set()
        self.logs: dict[str, RunLog] = {}  # run id -> its events
        self.joins: list[Request] = []  # GET …/runs/{run_id}/stream (and DeerFlow's /join)
        self.deleted: list[str] = []  # threads a DELETE removed
        self.artifact_requests: list[Request] = []

        prefixes = ("/api/langgraph", "/api") if flavor == "deerflow" else ("",)
        for p in prefixes:
            self.add_route("POST", f"{p}/threads", self._create_thread)
            self.add_route("POST", f"{p}/threads/{{tid}}/runs/stream", self._run_stream)
            self.add_route("POST", f"{p}/threads/{{tid}}/runs/{{rid}}/cancel", self._cancel)
            self.add_route("GET", f"{p}/threads/{{tid}}/state", self._state)
            self.add_route("GET", f"{p}/threads/{{tid}}/runs/{{rid}}/stream", self._join)
            self.add_route("GET", f"{p}/threads/{{tid}}/runs/{{rid}}", self._get_run)
            self.add_route("DELETE", f"{p}/threads/{{tid}}", self._delete_thread)
            if flavor == "deerflow":
                self.add_route("GET", f"{p}/threads/{{tid}}/runs/{{rid}}/join", self._join)
        if flavor == "deerflow":
            self.add_route("POST", "/api/threads/{tid}/uploads", self._upload)
        else:
            self.add_route("GET", "/info", self._info)

    # -- public helpers ----------------------------------------------------------------------

    @property
    def fault(self) -> str | None:
        return self._fault

    @fault.setter
    def fault(self, value: str | None) -> None:
        if value is not None and value not in FAULTS:
            raise ValueError(f"unknown fault {value!r}; known: {', '.join(FAULTS)}")
        self._fault = value

    @property
    def api_prefix(self) -> str:
        return "/api/langgraph" if self.flavor == "deerflow" else ""

    def forget_conversations(self) -> None:
        """Every thread is gone (deleted, or an in-memory server restarted). A run on one is then 404
        (LangGraph: ``Thread or assistant not found.``, DeerFlow: ``Thread <id> not found``); with
        ``creates_unknown_threads`` DeerFlow silently starts it again, empty."""
        self.threads.clear()

    def answer_interrupt(self, thread_id: str, value: Any) -> None:
        """The thread's interrupt is answered elsewhere (DeerFlow's own web UI resumed it)."""
        thread = self.threads[thread_id]
        thread.interrupt = None
        thread.messages.append({"content": f"you said: {value}", "additional_kwargs": {}, "response_metadata": {},
                                "type": "ai", "name": None, "id": str(uuid.uuid4())})

    def stream_requests(self) -> list[Request]:
        return [r for r in self.requests if r.method == "POST" and r.path.endswith("/runs/stream")]

    # -- plumbing ------------------------------------------------------------------------------

    async def not_found(self, req: Request, resp: Response) -> None:
        m = _ARTIFACT.match(req.path) if self.flavor == "deerflow" and req.method == "GET" else None
        if m is not None:  # {path:path}: the fake's routes match one segment only
            await self._artifact(req, resp, m.group(1), m.group(2))
            return
        await self._detail(resp, 404, "Not Found")

    async def _shutdown(self) -> None:
        for log in self.logs.values():
            if log.task is not None and not log.task.done():
                log.task.cancel()
        await super()._shutdown()

    async def method_not_allowed(self, req: Request, resp: Response, allowed: list[str]) -> None:
        await self._detail(resp, 405, "Method Not Allowed")

    async def _detail(self, resp: Response, status: int, detail: Any) -> None:
        await resp.send(status, _dumps({"detail": detail}).encode(), "application/json", {"vary": "Origin"})

    async def _auth(self, req: Request, resp: Response) -> bool:
        keys = {k for k in (self.api_key, *self.api_keys) if k}
        if self.auth_disabled or not keys:
            return True
        if self.flavor == "langgraph":
            if req.headers.get("x-api-key") in keys:
                return True
            await self._detail(resp, 403, "Invalid API key" if req.headers.get("x-api-key") else "Missing API key")
            return False
        auth = req.headers.get("authorization")
        if auth is None:
            await self._detail(resp, 401, {"code": "not_authenticated", "message": "Authentication required"})
            return False
        if not auth.startswith("Bearer ") or auth[7:] not in keys:
            await self._detail(resp, 401, "Invalid or expired personal access token")
            return False
        return True

    async def _info(self, req: Request, resp: Response) -> None:
        await resp.json(200, {"version": "0.16.7", "langgraph_py_version": "1.2.24", "flags": {"assistants": True}})

    async def _create_thread(self, req: Request, resp: Response) -> None:
        if not await self._auth(req, resp):
            return
        try:
            body = req.json() if req.body else {}
        except ValueError:
            await self._detail(resp, 422, [{"type": "json_invalid", "loc": ["body", 0], "msg": "JSON decode error"}])
            return
        tid = str(body.get("thread_id") or uuid.uuid4())
        meta = body.get("metadata") if isinstance(body.get("metadata"), dict) else {}
        self.threads[tid] = Thread(tid, dict(meta))
        now = "2026-12-01T12:00:00.000000+00:00"
        await resp.json(200, {"thread_id": tid, "created_at": now, "updated_at": now, "state_updated_at": now,
                              "metadata": meta, "status": "idle", "config": {}, "values": None, "interrupts": {}})

    async def _state(self, req: Request, resp: Response) -> None:
        if not await self._auth(req, resp):
            return
        thread = self.threads.get(req.path_params["tid"])
        if thread is None:
            await self._detail(resp, 404, f"Thread with ID {req.path_params['tid']} not found")
            return
        interrupts = [thread.interrupt] if thread.interrupt else []
        task = {"id": str(uuid.uuid4()), "name": "ask"}
        if self.flavor == "deerflow":
            # DeerFlow's gateway (app/gateway/routers/threads.py get_thread_state): tasks are only
            # {id, name}, no interrupts anywhere; ``next`` says whether the graph waits
            await resp.json(200, {"values": {"messages": thread.messages}, "next": ["ask"] if interrupts else [],
                                  "metadata": {}, "tasks": [task] if interrupts else []})
            return
        await resp.json(200, {"values": {"messages": thread.messages}, "next": ["ask"] if interrupts else [],
                              "tasks": [{**task, "interrupts": interrupts}] if interrupts else [],
                              "interrupts": interrupts})

    async def _upload(self, req: Request, resp: Response) -> None:
        if not await self._auth(req, resp):
            return
        thread = self.threads.get(req.path_params["tid"])
        try:
            parts = req.form().files_named("files")
        except ValueError:
            parts = []
        if not parts:
            await self._detail(resp, 422, [{"type": "missing", "loc": ["body", "files"], "msg": "Field required"}])
            return
        files = []
        for part in parts:
            name = part.filename or "file"
            if thread is not None:
                thread.uploads[name] = part.data
            files.append({"filename": name, "size": len(part.data),
                          "path": f"/data/threads/{req.path_params['tid']}/user-data/uploads/{name}",
                          "virtual_path": f"/mnt/user-data/uploads/{name}",
                          "artifact_url": f"/api/threads/{req.path_params['tid']}/artifacts/mnt/user-data/uploads/{name}",
                          "extension": "." + name.rpartition(".")[2] if "." in name else None})
        await resp.json(200, {"success": True, "files": files, "message": f"Successfully uploaded {len(files)} file(s)",
                              "skipped_files": []})

    async def _cancel(self, req: Request, resp: Response) -> None:
        if not await self._auth(req, resp):
            return
        rid = req.path_params["rid"]
        flag = self._cancel_flags.get(rid)
        if flag is not None:
            self.cancelled.append(rid)
        if flag is None or rid not in self._active:
            # as langgraph-api: also for a run that already ended (e.g. cancelled by on_disconnect)
            await self._detail(resp, 404, "No matching runs to cancel. Please verify the thread ID and run IDs are "
                                          "correct, and the runs haven't been deleted or completed.")
            return
        flag.set()
        await resp.json(200, {})

    async def _get_run(self, req: Request, resp: Response) -> None:
        if not await self._auth(req, resp):
            return
        log = self.logs.get(req.path_params["rid"])
        if log is None or log.thread_id != req.path_params["tid"]:
            await self._detail(resp, 404, f"Run {req.path_params['rid']} not found" if self.flavor == "deerflow"
                               else "Run not found")
            return
        await resp.json(200, {"run_id": log.run_id, "thread_id": log.thread_id, "assistant_id": "lead_agent",
                              "status": log.status, "metadata": {}, "multitask_strategy": "reject"})

    async def _delete_thread(self, req: Request, resp: Response) -> None:
        if not await self._auth(req, resp):
            return
        tid = req.path_params["tid"]
        thread = self.threads.get(tid)
        if thread is None:
            await self._detail(resp, 404, f"Thread {tid} not found" if self.flavor == "deerflow"
                               else f"Thread with ID {tid} not found")
            return
        if self.flavor == "deerflow":
            if thread.busy:  # run_manager.reserve_thread_operation -> ConflictError
                await self._detail(resp, 409, DELETE_BUSY)
                return
            del self.threads[tid]
            self.deleted.append(tid)
            await resp.json(200, {"success": True, "message": f"Deleted local thread data for {tid}"})
            return
        # langgraph-runtime-inmem Threads.delete: the thread and its runs go (a running one stops)
        for log in self.logs.values():
            if log.thread_id == tid and not log.ended:
                self._cancel_flags[log.run_id].set()
        del self.threads[tid]
        self.deleted.append(tid)
        await resp.send(204, b"", None)

    async def _artifact(self, req: Request, resp: Response, tid: str, path: str) -> None:
        """``GET /api/threads/{id}/artifacts/{path}``: ``path`` is the virtual path without its
        leading slash (``mnt/user-data/outputs/report.md``), already percent-decoded."""
        self.artifact_requests.append(req)
        if not await self._auth(req, resp):
            return
        if ".." in path.split("/"):
            await self._detail(resp, 403, "Access denied: path traversal detected")
            return
        thread = self.threads.get(tid)
        data = thread.files.get("/" + path) if thread is not None else None
        if data is None:
            await self._detail(resp, 404, f"Artifact not found: {path}")
            return
        name = path.rsplit("/", 1)[-1]
        mime = mimetypes.guess_type(name)[0]
        active = mime in ("text/html", "application/xhtml+xml", "image/svg+xml")
        disposition = "attachment" if active or req.query.get("download") == "true" else "inline"
        await resp.send(200, data, mime or "application/octet-stream",
                        {"content-disposition": f"{disposition}; filename*=UTF-8''{name}"})

    # -- joining a run's stream --------------------------------------------------------------------

    async def _join(self, req: Request, resp: Response) -> None:
        self.joins.append(req)
        if not await self._auth(req, resp):
            return
        rid, tid = req.path_params["rid"], req.path_params["tid"]
        log = None if self.lose_runs else self.logs.get(rid)
        last = req.headers.get("last-event-id") or None
        if log is not None and self.join_after_run_ends and log.task is not None:
            await asyncio.wait([log.task])
        if self.flavor == "deerflow":
            if log is None or log.thread_id != tid:
                await self._detail(resp, 404, f"Run {rid} not found")
                return
            await resp.start_stream(200, "text/event-stream; charset=utf-8", {"x-accel-buffering": "no"})
            if log.ended and time.monotonic() - log.ended_at >= self.stream_cleanup_delay:
                await resp.write("event: end\ndata: null\n\n")  # _terminal_record_stream_missing
                return
            offset = log.start
            if last is not None:
                seq = _seq(last)
                if self.join_gaps > 0:
                    self.join_gaps -= 1
                    seq = -1  # older than anything kept
                if seq is not None and log.events and seq < log.start:
                    await resp.write(self._frame("gap", {
                        "code": "stream_replay_gap", "run_id": rid, "requested_event_id": last,
                        "earliest_available_event_id": log.events[0][0],
                        "latest_available_event_id": log.events[-1][0], "recovery": "reload_durable_state"}, None))
                    return  # no end: the bridge's subscriber stops after the gap
                if seq is not None and 0 <= seq - log.start < len(log.events) and log.events[seq - log.start][0] == last:
                    offset = seq + 1
        else:
            if log is None or log.thread_id != tid:
                # Runs.Stream.join: no stored events, then the run is looked up and is not there
                await resp.start_stream(200, "text/event-stream; charset=utf-8", {})
                await resp.write(self._frame("error", {"error": "HTTPException", "message": "404: Run not found"}, None))
                return
            await resp.start_stream(200, "text/event-stream; charset=utf-8", {
                "location": f"/threads/{tid}/runs/{rid}/stream", "content-location": f"/threads/{tid}/runs/{rid}"})
            offset = log.start + len(log.events)  # live only
            if last is not None and log.resumable:
                offset = next((log.start + i for i, (eid, _n, _d) in enumerate(log.events) if eid > last), offset)
        if self.fault == "truncated":  # the sticky fault cuts every stream: a join before it brings anything
            await resp.abort()
            return
        cancel = self.flavor == "deerflow" or req.query.get("cancel_on_disconnect", "").lower() in ("true", "1", "yes")
        await self._serve(resp, log, offset, cancel_on_disconnect=cancel)

    # -- writing a run's log out -------------------------------------------------------------------

    def _frame(self, name: str, data: Any, event_id: str | None) -> str:
        nl = "\n" if self.flavor == "deerflow" else "\r\n"
        payload = _dumps(data, compact=self.flavor == "langgraph")
        tail = f"id: {event_id}{nl}" if event_id else ""
        return f"event: {name}{nl}data: {payload}{nl}{tail}{nl}"

    async def _serve(self, resp: Response, log: RunLog, offset: int, *, cut_by_run: bool = False,
                     cut_after: int | None = None, cancel_on_disconnect: bool) -> None:
        """Write ``log`` from ``offset`` until the run ends (DeerFlow then says ``end``), with
        heartbeats while nothing comes; ``cut_by_run`` (where the run marked ``cut_at``) /
        ``cut_after`` (events written) drop the connection there, as a proxy cutting it would."""
        nl = "\n" if self.flavor == "deerflow" else "\r\n"
        ids = self.flavor == "deerflow" or log.resumable
        written, waited = 0, 0.0
        cursor: str | None = None  # the id of the last event written (the gap names it)
        try:
            while True:
                if resp.client_disconnected:
                    raise _Gone
                if offset < log.start:  # fell behind what is kept: one gap, then the subscriber stops
                    if self.flavor == "deerflow":  # (bytedance/deer-flow @f1f4af99 stream_bridge/memory.py subscribe)
                        await resp.write(self._frame("gap", {
                            "code": "stream_replay_gap", "run_id": log.run_id, "requested_event_id": cursor,
                            "earliest_available_event_id": log.events[0][0],
                            "latest_available_event_id": log.events[-1][0], "recovery": "reload_durable_state"},
                            None))
                        await resp.end()
                        return
                    offset = log.start
                if offset - log.start < len(log.events):
                    eid, name, data = log.events[offset - log.start]
                    offset += 1
                    cursor = eid
                    await resp.write(self._frame(name, data, eid if ids else None))
                    written, waited = written + 1, 0.0
                    if (cut_by_run and log.cut_at is not None and offset >= log.cut_at) or \
                            (cut_after is not None and written >= cut_after):
                        if self.cut_cleanly:
                            await resp.end()
                            return
                        await resp.abort()
                        raise _Gone
                    continue
                if log.ended:
                    break
                await asyncio.sleep(0.01)
                waited += 0.01
                if waited >= self.heartbeat_interval and not log.quiet:
                    await resp.write(f": heartbeat{nl}{nl}")
                    waited = 0.0
        except (_Gone, ConnectionError):
            if cancel_on_disconnect and log.on_disconnect == "cancel" and not log.ended:
                self.disconnect_cancelled.append(log.run_id)
                self._cancel_flags[log.run_id].set()
            if not resp.aborted:
                await resp.abort()
            return
        if self.flavor == "deerflow":
            await resp.write("event: end\ndata: null\n\n")
        await resp.end()

    # -- runs ----------------------------------------------------------------------------------

    def _snapshot(self) -> SimpleNamespace:
        fault = self.fault_queue.pop(0) if self.fault_queue else self.fault
        return SimpleNamespace(
            fault=fault, tokens=list(self.answer_tokens), reasoning=self.reasoning, blocks=self.thinking_blocks,
            delay=self.token_delay, usage=self.include_usage, whole=self.whole_message, tool=self.tool_call,
            subagent=self.subagent, interrupt=self.interrupt_value, clarify=self.clarification, fail=self.fail_with,
            appended=self.appended, present=dict(self.present_files), extra_artifacts=list(self.extra_artifacts),
            after=self.after_answer_delay,
        )

    async def _validate(self, body: Any, resp: Response) -> bool:
        if not isinstance(body, dict):
            await self._detail(resp, 422, [{"type": "model_attributes_type", "loc": ["body"],
                                            "msg": "Input should be a valid dictionary"}])
            return False
        if self.flavor == "deerflow":
            extra = sorted(set(body) - RUN_FIELDS)
            if extra:
                await self._detail(resp, 422, [{"type": "extra_forbidden", "loc": ["body", k],
                                                "msg": "Extra inputs are not permitted"} for k in extra])
                return False
            if body.get("stream_resumable") not in (None, False):
                await self._detail(resp, 422, [{"type": "unsupported_run_option", "loc": ["body", "stream_resumable"],
                                                "msg": "Run option 'stream_resumable' is not supported by DeerFlow"}])
                return False
        if not body.get("assistant_id"):
            await self._detail(resp, 422, [{"type": "missing", "loc": ["body", "assistant_id"], "msg": "Field required"}])
            return False
        modes = body.get("stream_mode") or ["values"]
        modes = [modes] if isinstance(modes, str) else modes
        allowed = DEERFLOW_MODES if self.flavor == "deerflow" else LANGGRAPH_MODES
        bad = [m for m in modes if m not in allowed]
        if bad:
            await self._detail(resp, 422, [{"type": "unsupported_stream_mode", "loc": ["body", "stream_mode"],
                                            "msg": f"Unsupported stream mode(s): {', '.join(bad)}"}])
            return False
        inp, command = body.get("input"), body.get("command")
        if command is None and (not isinstance(inp, dict) or not isinstance(inp.get("messages"), list)
                                or not inp["messages"]):
            await self._detail(resp, 422, [{"type": "missing", "loc": ["body", "input", "messages"],
                                            "msg": "Field required"}])
            return False
        return True

    async def _run_stream(self, req: Request, resp: Response) -> None:
        s = self._snapshot()
        if not await self._auth(req, resp):
            return
        kind, _, num = (s.fault or "").partition("_")
        if kind in ("http", "html") and num.isdigit():
            await self._http_fault(resp, int(num), html=kind == "html")
            return
        if s.fault == "stall_before_headers":
            await resp.stall(self.stall_seconds)
            await resp.abort()
            return
        try:
            body = req.json()
        except (ValueError, UnicodeDecodeError):
            await self._detail(resp, 422, [{"type": "json_invalid", "loc": ["body", 0], "msg": "JSON decode error"}])
            return
        if not await self._validate(body, resp):
            return
        tid = req.path_params["tid"]
        thread = self.threads.get(tid)
        assistant = str(body["assistant_id"])
        if self.flavor == "deerflow":
            if thread is None and self.creates_unknown_threads:  # (if_not_exists is always "create")
                thread = self.threads[tid] = Thread(tid, dict(body.get("metadata") or {}))
            elif thread is None:  # the route's owner check, after the body parsed and before the run starts
                await self._detail(resp, 404, f"Thread {tid} not found")
                return
            agent = assistant.strip().lower().replace("_", "-")
            if not agent or any(c not in "abcdefghijklmnopqrstuvwxyz0123456789-" for c in agent):
                await self._detail(resp, 422, f"Invalid assistant_id {assistant!r}: must contain only letters, "
                                              "digits, and hyphens after normalization.")
                return
            model = (body.get("context") or {}).get("model_name")
            if model and model not in self.models:
                await self._detail(resp, 400, f"Model {model!r} is not in the configured model allowlist")
                return
        elif assistant not in self.assistants:
            if not _is_uuid(assistant):
                graphs = ", ".join(sorted(self.assistants))
                await self._detail(resp, 422, f"Invalid assistant: '{assistant}'. Must be either:\n- A valid assistant "
                                              f"UUID, or\n- One of the registered graphs: {graphs}")
            else:
                await self._detail(resp, 404, MISSING)
            return
        elif thread is None and body.get("if_not_exists") == "create":
            # LangGraph's Runs.put (which names the graph's assistant by its UUID where this keeps the name)
            meta = {"graph_id": assistant, "assistant_id": assistant, **(body.get("metadata") or {})}
            thread = self.threads[tid] = Thread(tid, meta)
        if thread is None:
            await self._detail(resp, 404, MISSING)
            return
        if thread.busy and (body.get("multitask_strategy") or "reject") == "reject":
            await self._detail(resp, 409, BUSY)
            return
        run_id = str(uuid.uuid4())
        self.runs.append(SimpleNamespace(thread_id=tid, body=body, headers=req.headers, run_id=run_id))
        flag = self._cancel_flags[run_id] = asyncio.Event()
        thread.busy = True
        self._active.add(run_id)
        prefix = "/api" if self.flavor == "deerflow" else ""
        headers = {"content-location": f"{prefix}/threads/{thread.id}/runs/{run_id}", "cache-control": "no-store",
                   "x-accel-buffering": "no", "vary": "Origin"}
        if s.fault in _RAW_FAULTS:  # what the wire carries is broken: no run behind it
            try:
                await resp.start_stream(200, "text/event-stream; charset=utf-8", headers)
                await self._raw_fault(resp, s.fault, run_id, thread)
            finally:
                thread.busy = False
                self._active.discard(run_id)
            return
        # DeerFlow's RunCreateRequest defaults on_disconnect to "cancel"; langgraph-api's stream_run to "continue"
        on_disconnect = body.get("on_disconnect") or ("cancel" if self.flavor == "deerflow" else "continue")
        resumable = self.flavor == "langgraph" and bool(body.get("stream_resumable"))
        log = self.logs[run_id] = RunLog(run_id, tid, on_disconnect, resumable, status="running")
        log.task = asyncio.create_task(self._execute(thread, body, log, s, flag))
        await resp.start_stream(200, "text/event-stream; charset=utf-8", headers)
        await self._serve(resp, log, 0, cut_by_run=s.fault == "truncated", cancel_on_disconnect=True)

    async def _raw_fault(self, resp: Response, fault: str, run_id: str, thread: Thread) -> None:
        nl = "\n" if self.flavor == "deerflow" else "\r\n"
        if fault == "empty":
            return
        await resp.write(self._frame("metadata", {"run_id": run_id, "attempt": 1} if self.flavor == "langgraph"
                                     else {"run_id": run_id, "thread_id": thread.id}, None))
        if fault == "invalid_json":
            await resp.write(f"event: values{nl}data: {{not json{nl}{nl}")
        elif fault == "non_utf8":
            await resp.write(f"event: messages{nl}data: [{{\"content\":\"".encode() + b"\xff\xfe" + f"\"}}]{nl}{nl}".encode())
        elif fault == "oversized":
            await resp.write(f"event: values{nl}data: {{\"pad\":\"".encode())
            left = self.oversized_bytes
            while left > 0:
                await resp.write(b"x" * min(left, 64 * 1024))
                left -= 64 * 1024
            await resp.write(f"\"}}{nl}{nl}".encode())

    async def _execute(self, thread: Thread, body: dict[str, Any], log: RunLog, s: SimpleNamespace,
                       cancel: asyncio.Event) -> None:
        """The run itself, in the background: it publishes into ``log`` whoever listens."""
        try:
            await self._stream(thread, body, log, s, cancel)
            if log.status == "running":
                log.status = "success"
        except _Gone:
            log.status = "interrupted"
        except asyncio.CancelledError:
            log.status = "interrupted"
            raise
        except Exception as e:  # a bug in the fake: keep it visible to tests
            self.handler_errors.append(e)
            log.status = "error"
        finally:
            log.ended, log.ended_at = True, time.monotonic()
            thread.busy = False
            self._active.discard(log.run_id)

    async def _http_fault(self, resp: Response, status: int, *, html: bool) -> None:
        if html:
            phrase = HTTPStatus(status).phrase
            page = (f"<html>\r\n<head><title>{status} {phrase}</title></head>\r\n<body>\r\n<center><h1>{status} "
                    f"{phrase}</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n")
            await resp.text(status, page, "text/html")
            return
        doc = _FAULT_BODIES[status]
        if isinstance(doc, str):
            await resp.text(status, doc, "text/plain; charset=utf-8")
            return
        await self._detail(resp, status, doc["detail"])

    # -- the event stream ----------------------------------------------------------------------

    async def _stream(self, thread: Thread, body: dict[str, Any], log: RunLog, s: SimpleNamespace,
                      cancel: asyncio.Event) -> None:
        modes = body.get("stream_mode") or ["values"]
        modes = {modes} if isinstance(modes, str) else set(modes)
        run = _RunWriter(self, log, thread, modes, cancel)
        await run.event("metadata", {"run_id": log.run_id, "attempt": 1} if self.flavor == "langgraph"
                        else {"run_id": log.run_id, "thread_id": thread.id})
        command = body.get("command") if isinstance(body.get("command"), dict) else None
        if command is not None and "resume" in command and thread.interrupt is not None:
            answer = command["resume"]
            if isinstance(answer, dict):
                answer = answer.get(thread.interrupt["id"], "")
            thread.interrupt = None
            s.tokens = [f"you said: {answer}"]
        elif command is not None:
            # as langgraph dev: a resume with no interrupt waiting runs nothing; the thread's values
            # come back unchanged and the run ends
            await run.values()
            return
        else:
            # as langgraph dev: new input on an interrupted thread drops the interrupt and starts
            # the graph again from the start with the message appended
            thread.interrupt = None
            for msg in body["input"]["messages"]:
                thread.messages.append({"content": msg.get("content"), "additional_kwargs": msg.get(
                    "additional_kwargs") or {}, "response_metadata": {}, "type": "human", "name": None,
                    "id": str(uuid.uuid4())})
        await run.values()
        if s.interrupt is not None and command is None:
            thread.interrupt = {"value": s.interrupt, "id": uuid.uuid4().hex}
            await run.updates({"__interrupt__": [thread.interrupt]})
            await run.values({"__interrupt__": [thread.interrupt]})
            return
        step = 1
        if s.clarify is not None:
            await run.ai_tool_call("ask_clarification", s.clarify, step)
            text = s.clarify.get("question", "")
            await run.tool_message("ask_clarification", text, step + 1)
            return await run.finish(s)
        if s.tool:
            await run.ai_tool_call("get_weather", {"city": "Paris"}, step)
            await run.tool_message("get_weather", "sunny in Paris", step + 1)
            step += 2
        if s.subagent:
            call = await run.ai_tool_call("task", {"description": "Look it up", "prompt": "Find the weather",
                                                    "subagent_type": "general-purpose"}, step)
            await run.custom({"type": "task_started", "task_id": call, "description": "Look it up",
                              "model_name": "fake-model"})
            await run.custom({"type": "task_running", "task_id": call, "message": {"type": "ai", "content": "..."},
                              "message_index": 1, "total_messages": 1})
            await run.custom({"type": "task_completed", "task_id": call, "result": "It is sunny.",
                              "usage": {"input_tokens": 5, "output_tokens": 3, "total_tokens": 8}})
            await run.tool_message("task", "Task Succeeded. Result: It is sunny.", step + 1, call_id=call)
            step += 2
        if s.present or s.extra_artifacts:
            await run.present(s, step)
            step += 2
        await run.answer(s, step)
        if s.fail is not None:
            name, message = s.fail
            log.status = "error"
            await run.event("error", {"error": name, "message": message} if self.flavor == "langgraph"
                            else {"message": message, "name": name})
            return
        if s.appended is not None:
            await run.append_to_answer(s.appended)
        if s.after:
            await run.pause(s.after)
        await run.finish(s)


class _RunWriter:
    """Publishes one run's events into its log, honouring the requested stream modes."""

    def __init__(self, srv: FakeDeerFlow, log: RunLog, thread: Thread, modes: set[str], cancel: asyncio.Event) -> None:
        self.srv, self.log, self.thread, self.modes = srv, log, thread, modes
        self.cancel = cancel
        self.ai_id = f"lc_run--{uuid.uuid4()}"
        self.partial: dict[str, dict[str, Any]] = {}

    def meta(self, step: int, node: str = "agent") -> dict[str, Any]:
        return {"created_by": "system", "graph_id": "lead_agent", "run_attempt": 1, "langgraph_version": "1.2.24",
                "run_id": self.log.run_id, "thread_id": self.thread.id, "langgraph_step": step, "langgraph_node": node,
                "langgraph_triggers": ["branch:to:" + node], "langgraph_checkpoint_ns": f"{node}:{uuid.uuid4()}"}

    async def event(self, name: str, data: Any) -> None:
        if self.cancel.is_set():
            raise _Gone
        # a copy: the thread's messages change after this event was published
        self.log.publish(name, json.loads(json.dumps(data)), self.srv.retained_events)
        await asyncio.sleep(0)

    async def pause(self, seconds: float, *, pings: bool = True) -> None:
        """Wait (cancellable); the streams send ``: heartbeat`` meanwhile unless ``pings`` is off."""
        self.log.quiet = not pings
        try:
            deadline = time.monotonic() + seconds
            while (left := deadline - time.monotonic()) > 0:
                if self.cancel.is_set():
                    raise _Gone
                await asyncio.sleep(min(0.02, left))
        finally:
            self.log.quiet = False

    async def values(self, extra: dict[str, Any] | None = None) -> None:
        if "values" in self.modes:
            state: dict[str, Any] = {"messages": self.thread.messages}
            if self.thread.artifacts:
                state["artifacts"] = self.thread.artifacts
            await self.event("values", {**state, **(extra or {})})

    async def updates(self, data: dict[str, Any]) -> None:
        if "updates" in self.modes:
            await self.event("updates", data)

    async def custom(self, data: dict[str, Any]) -> None:
        if "custom" in self.modes:
            await self.event("custom", data)

    async def message(self, msg: dict[str, Any], step: int, node: str = "agent") -> None:
        """One message in mode messages-tuple (a delta chunk or a whole message), or, in mode
        ``messages``, the accumulated message so far as ``messages/partial``."""
        if "messages-tuple" in self.modes:
            await self.event("messages", [msg, self.meta(step, node)])
        elif "messages" in self.modes:
            acc = self.partial.get(msg["id"])
            if acc is None:
                acc = self.partial[msg["id"]] = dict(msg)
                await self.event("messages/metadata", {msg["id"]: {"metadata": self.meta(step, node)}})
            else:
                acc["content"] = (acc.get("content") or "") + (msg.get("content") or "")
                if msg.get("usage_metadata"):
                    acc["usage_metadata"] = msg["usage_metadata"]
            await self.event("messages/partial", [acc])

    def chunk(self, mid: str, content: Any = "", **kw: Any) -> dict[str, Any]:
        out = {"content": content, "additional_kwargs": {}, "response_metadata": {}, "type": "AIMessageChunk",
               "name": None, "id": mid, "tool_calls": [], "invalid_tool_calls": [], "usage_metadata": None,
               "tool_call_chunks": [], "chunk_position": None}
        out.update(kw)
        return out

    async def ai_tool_call(self, name: str, args: dict[str, Any], step: int) -> str:
        mid, call_id = f"lc_run--{uuid.uuid4()}", f"call_{uuid.uuid4().hex[:12]}"
        text = _dumps(args)
        half = len(text) // 2
        preamble = self.srv.tool_preamble if name != "present_files" else ""
        for piece in _pieces(preamble):
            await self.message(self.chunk(mid, piece), step)
        await self.message(self.chunk(mid, tool_call_chunks=[
            {"name": name, "args": "", "id": call_id, "index": 0, "type": "tool_call_chunk"}]), step)
        for piece in (text[:half], text[half:]):
            await self.message(self.chunk(mid, tool_call_chunks=[
                {"name": None, "args": piece, "id": None, "index": 0, "type": "tool_call_chunk"}]), step)
        usage = {"input_tokens": 7, "output_tokens": 4, "total_tokens": 11}
        await self.message(self.chunk(mid, response_metadata={"finish_reason": "tool_calls", "model_name": "fake"},
                                      usage_metadata=usage, chunk_position="last"), step)
        whole = {"content": preamble, "additional_kwargs": {}, "response_metadata": {"finish_reason": "tool_calls"},
                 "type": "ai", "name": None, "id": mid, "tool_calls": [{"name": name, "args": args, "id": call_id,
                 "type": "tool_call"}], "invalid_tool_calls": [], "usage_metadata": usage}
        self.thread.messages.append(whole)
        await self.values()
        await self.updates({"agent": {"messages": [whole]}})
        return call_id

    async def tool_message(self, name: str, content: str, step: int, call_id: str | None = None,
                           update: dict[str, Any] | None = None) -> None:
        if call_id is None:
            call_id = next((c["id"] for m in reversed(self.thread.messages) for c in m.get("tool_calls") or []
                            if c["name"] == name), "call_x")
        msg = {"content": content, "additional_kwargs": {}, "response_metadata": {}, "type": "tool", "name": name,
               "id": str(uuid.uuid4()), "tool_call_id": call_id, "artifact": None, "status": "success"}
        self.thread.messages.append(msg)
        await self.message(msg, step, node="tools")
        await self.values()
        await self.updates({"tools": {**(update or {}), "messages": [msg]}})

    async def present(self, s: SimpleNamespace, step: int) -> None:
        """DeerFlow's ``present_files`` tool: a ``Command(update={"artifacts": paths, "messages": …})``
        (tools/builtins/present_file_tool.py), merged into values.artifacts by ``merge_artifacts``."""
        paths = list(s.present)
        await self.ai_tool_call("present_files", {"filepaths": paths}, step)
        self.thread.files.update(s.present)
        for path in [*paths, *s.extra_artifacts]:
            if path not in self.thread.artifacts:
                self.thread.artifacts.append(path)
        await self.tool_message("present_files", "Successfully presented files", step + 1,
                                update={"artifacts": paths + list(s.extra_artifacts)})

    async def answer(self, s: SimpleNamespace, step: int) -> None:
        mid, text = self.ai_id, "".join(s.tokens)
        usage = {"input_tokens": 11, "output_tokens": max(1, len(s.tokens)), "total_tokens": 11 + max(1, len(s.tokens))}
        usage = usage if s.usage else None
        whole = {"content": text, "additional_kwargs": {}, "response_metadata": {"finish_reason": "stop",
                 "model_name": "fake-model"}, "type": "ai", "name": None, "id": mid, "tool_calls": [],
                 "invalid_tool_calls": [], "usage_metadata": usage}
        if s.whole:
            await self.pause(s.delay)
            if s.reasoning:
                whole["additional_kwargs"] = {"reasoning_content": s.reasoning}
            await self.message(whole, step)
            if await self.after_first(s):
                return
        else:
            for piece in _pieces(s.reasoning):
                think = [{"type": "thinking", "thinking": piece}] if s.blocks else ""
                kw = {} if s.blocks else {"additional_kwargs": {"reasoning_content": piece}}
                await self.message(self.chunk(mid, think, **kw), step)
            for i, tok in enumerate(s.tokens):
                if i:
                    await self.pause(s.delay)
                content = [{"type": "text", "text": tok}] if s.blocks else tok
                await self.message(self.chunk(mid, content), step)
                if i == 0 and await self.after_first(s):
                    return
            await self.message(self.chunk(mid, "", response_metadata={"finish_reason": "stop", "model_name":
                                          "fake-model"}, usage_metadata=usage, chunk_position="last"), step)
        if s.fail is not None:
            return
        self.thread.messages.append(whole)

    async def append_to_answer(self, text: str) -> None:
        """A middleware's ``after_model`` returns the answer again under its id with ``text``
        appended (deer-flow LoopDetectionMiddleware._append_text / SafetyFinishReasonMiddleware):
        the messages mode drops it (an id it already streamed), values and updates carry it."""
        msg = self.thread.messages[-1]
        content = msg.get("content")
        if isinstance(content, list):
            msg["content"] = [*content, {"type": "text", "text": f"\n\n{text}"}]
        else:
            msg["content"] = f"{content}\n\n{text}" if content else text
        msg["tool_calls"] = []
        await self.updates({"LoopDetectionMiddleware.after_model": {"messages": [msg]}})
        await self.values()

    async def after_first(self, s: SimpleNamespace) -> bool:
        """Faults that strike after the first piece of the answer; True when the run is over."""
        if s.fault == "truncated":
            self.log.cut_at = self.log.start + len(self.log.events)  # the creating stream is cut here
        if s.fault == "error_event":
            data = {"error": "OpenAIAPIError", "message": "An internal error occurred"}
            self.log.status = "error"
            await self.event("error", data if self.srv.flavor == "langgraph" else
                             {"message": data["message"], "name": data["error"]})
            return True
        if s.fault == "stall":
            await self.pause(self.srv.stall_seconds, pings=False)
        if s.fault == "stall_pings":
            await self.pause(self.srv.stall_seconds)
        return False

    async def finish(self, s: SimpleNamespace) -> None:
        await self.values()
        last = self.thread.messages[-1] if self.thread.messages else None
        if last is not None:
            await self.updates({"agent": {"messages": [last]}})


def _pieces(text: str) -> list[str]:
    if not text:
        return []
    words = text.split(" ")
    return [w + (" " if i < len(words) - 1 else "") for i, w in enumerate(words)]


def _seq(event_id: str) -> int | None:
    """The per-run sequence number of a DeerFlow ``<ms>-<seq>`` event id."""
    m = re.fullmatch(r"\d+-(\d+)", event_id)
    return int(m.group(1)) if m else None


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True
