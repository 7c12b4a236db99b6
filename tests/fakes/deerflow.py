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
"""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import dataclass, field
from http import HTTPStatus
from types import SimpleNamespace
from typing import Any

from .http_server import FakeHTTPServer, Request, Response

__all__ = ["FAULTS", "FakeDeerFlow", "Thread"]

MiB = 1024 * 1024
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

        prefixes = ("/api/langgraph", "/api") if flavor == "deerflow" else ("",)
        for p in prefixes:
            self.add_route("POST", f"{p}/threads", self._create_thread)
            self.add_route("POST", f"{p}/threads/{{tid}}/runs/stream", self._run_stream)
            self.add_route("POST", f"{p}/threads/{{tid}}/runs/{{rid}}/cancel", self._cancel)
            self.add_route("GET", f"{p}/threads/{{tid}}/state", self._state)
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
        await self._detail(resp, 404, "Not Found")

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

    # -- runs ----------------------------------------------------------------------------------

    def _snapshot(self) -> SimpleNamespace:
        fault = self.fault_queue.pop(0) if self.fault_queue else self.fault
        return SimpleNamespace(
            fault=fault, tokens=list(self.answer_tokens), reasoning=self.reasoning, blocks=self.thinking_blocks,
            delay=self.token_delay, usage=self.include_usage, whole=self.whole_message, tool=self.tool_call,
            subagent=self.subagent, interrupt=self.interrupt_value, clarify=self.clarification, fail=self.fail_with,
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
        try:
            await self._stream(resp, thread, body, run_id, s, flag)
        except _Gone:
            if flag.is_set() and not resp.aborted and not resp.client_disconnected:
                # cancelled through the API: the stream ends normally (DeerFlow still says end)
                if self.flavor == "deerflow":
                    await resp.write("event: end\ndata: null\n\n")
                await resp.end()
                return
            if not flag.is_set() and (body.get("on_disconnect") or "cancel") == "cancel":
                self.disconnect_cancelled.append(run_id)
            if not resp.aborted:
                await resp.abort()
        finally:
            thread.busy = False
            self._active.discard(run_id)

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

    async def _stream(self, resp: Response, thread: Thread, body: dict[str, Any], run_id: str, s: SimpleNamespace,
                      cancel: asyncio.Event) -> None:
        modes = body.get("stream_mode") or ["values"]
        modes = {modes} if isinstance(modes, str) else set(modes)
        nl = "\n" if self.flavor == "deerflow" else "\r\n"
        prefix = "/api" if self.flavor == "deerflow" else ""
        await resp.start_stream(200, "text/event-stream; charset=utf-8", {
            "content-location": f"{prefix}/threads/{thread.id}/runs/{run_id}", "cache-control": "no-store",
            "x-accel-buffering": "no", "vary": "Origin"})
        run = _RunWriter(self, resp, thread, run_id, modes, nl, cancel)
        if s.fault == "empty":
            return
        await run.event("metadata", {"run_id": run_id, "attempt": 1} if self.flavor == "langgraph"
                        else {"run_id": run_id, "thread_id": thread.id})
        if s.fault == "invalid_json":
            await resp.write(f"event: values{nl}data: {{not json{nl}{nl}")
            return
        if s.fault == "non_utf8":
            await resp.write(f"event: messages{nl}data: [{{\"content\":\"".encode() + b"\xff\xfe" + f"\"}}]{nl}{nl}".encode())
            return
        if s.fault == "oversized":
            await resp.write(f"event: values{nl}data: {{\"pad\":\"".encode())
            left = self.oversized_bytes
            while left > 0:
                await resp.write(b"x" * min(left, 64 * 1024))
                left -= 64 * 1024
            await resp.write(f"\"}}{nl}{nl}".encode())
            return
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
            if self.flavor == "deerflow":
                await run.event("end", None)
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
        await run.answer(s, step)
        if s.fail is not None:
            name, message = s.fail
            await run.event("error", {"error": name, "message": message} if self.flavor == "langgraph"
                            else {"message": message, "name": name})
            return
        await run.finish(s)


class _RunWriter:
    """Writes one run's events in the flavour's framing, honouring the requested stream modes."""

    def __init__(self, srv: FakeDeerFlow, resp: Response, thread: Thread, run_id: str, modes: set[str], nl: str,
                 cancel: asyncio.Event) -> None:
        self.srv, self.resp, self.thread, self.run_id, self.modes, self.nl = srv, resp, thread, run_id, modes, nl
        self.cancel = cancel
        self.ai_id = f"lc_run--{uuid.uuid4()}"
        self.partial: dict[str, dict[str, Any]] = {}

    def meta(self, step: int, node: str = "agent") -> dict[str, Any]:
        return {"created_by": "system", "graph_id": "lead_agent", "run_attempt": 1, "langgraph_version": "1.2.24",
                "run_id": self.run_id, "thread_id": self.thread.id, "langgraph_step": step, "langgraph_node": node,
                "langgraph_triggers": ["branch:to:" + node], "langgraph_checkpoint_ns": f"{node}:{uuid.uuid4()}"}

    async def event(self, name: str, data: Any) -> None:
        if self.cancel.is_set() or self.resp.client_disconnected:
            raise _Gone
        payload = _dumps(data, compact=self.srv.flavor == "langgraph")
        await self.resp.write(f"event: {name}{self.nl}data: {payload}{self.nl}{self.nl}")

    async def pause(self, seconds: float, *, pings: bool = True) -> None:
        """Wait, sending ``: heartbeat`` comments every heartbeat_interval like the real server."""
        left = seconds
        while left > 0:
            wait = min(left, self.srv.heartbeat_interval) if pings else left
            step = 0.05
            waited = 0.0
            while waited < wait:
                if self.cancel.is_set() or self.resp.client_disconnected:
                    raise _Gone
                await asyncio.sleep(min(step, wait - waited))
                waited += step
            left -= wait
            if pings and left > 0:
                await self.resp.write(f": heartbeat{self.nl}{self.nl}")

    async def values(self, extra: dict[str, Any] | None = None) -> None:
        if "values" in self.modes:
            await self.event("values", {"messages": self.thread.messages, **(extra or {})})

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
        await self.message(self.chunk(mid, tool_call_chunks=[
            {"name": name, "args": "", "id": call_id, "index": 0, "type": "tool_call_chunk"}]), step)
        for piece in (text[:half], text[half:]):
            await self.message(self.chunk(mid, tool_call_chunks=[
                {"name": None, "args": piece, "id": None, "index": 0, "type": "tool_call_chunk"}]), step)
        usage = {"input_tokens": 7, "output_tokens": 4, "total_tokens": 11}
        await self.message(self.chunk(mid, response_metadata={"finish_reason": "tool_calls", "model_name": "fake"},
                                      usage_metadata=usage, chunk_position="last"), step)
        whole = {"content": "", "additional_kwargs": {}, "response_metadata": {"finish_reason": "tool_calls"},
                 "type": "ai", "name": None, "id": mid, "tool_calls": [{"name": name, "args": args, "id": call_id,
                 "type": "tool_call"}], "invalid_tool_calls": [], "usage_metadata": usage}
        self.thread.messages.append(whole)
        await self.values()
        await self.updates({"agent": {"messages": [whole]}})
        return call_id

    async def tool_message(self, name: str, content: str, step: int, call_id: str | None = None) -> None:
        if call_id is None:
            call_id = next((c["id"] for m in reversed(self.thread.messages) for c in m.get("tool_calls") or []
                            if c["name"] == name), "call_x")
        msg = {"content": content, "additional_kwargs": {}, "response_metadata": {}, "type": "tool", "name": name,
               "id": str(uuid.uuid4()), "tool_call_id": call_id, "artifact": None, "status": "success"}
        self.thread.messages.append(msg)
        await self.message(msg, step, node="tools")
        await self.values()
        await self.updates({"tools": {"messages": [msg]}})

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

    async def after_first(self, s: SimpleNamespace) -> bool:
        """Faults that strike after the first piece of the answer; True when the stream is over."""
        if s.fault == "truncated":
            await self.resp.abort()
            raise _Gone
        if s.fault == "error_event":
            data = {"error": "OpenAIAPIError", "message": "An internal error occurred"}
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
        if self.srv.flavor == "deerflow":
            await self.event("end", None)


def _pieces(text: str) -> list[str]:
    if not text:
        return []
    words = text.split(" ")
    return [w + (" " if i < len(words) - 1 else "") for i, w in enumerate(words)]


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True
