"""Faithful fake of Langflow 1.13's run API (docs/platforms.md §5, real-http-peers.md §2, the real
transcripts in fixtures/real-peers/langflow/).

``POST /api/v1/run/{flow}?stream=true`` answers ``text/event-stream; charset=utf-8`` whose body is
*not* SSE: bare JSON objects (``json.dumps`` default separators) each followed by ``\\n\\n``, one
HTTP chunk per event. Event order per ``srv.mode``:

- ``llm`` (a streaming model):  add_message(User) → add_message(Machine, "", state partial)
  → token("") → token(t)* → token("")×3 → add_message(Machine, complete, usage)×3 → end(RunResponse)
- ``plain`` (no model, or one without streaming): add_message(User) → add_message(Machine, full) → end
- a failing component (``error_event`` fault, ``fail_component``, a file path it does not know):
  add_message(User) [→ tokens] → error(Message object, category "error") → error({"error": "500: {json}"}),
  no ``end``

``?stream=false`` answers the RunResponse (``outputs[0].outputs[0].results.message.text`` …), or
HTTP 500 ``{"detail": "<json string>"}`` when the flow fails. Auth is ``x-api-key`` (header or query):
missing or wrong → 403 ``{"detail"}``; an unknown flow → 404. ``session_id`` omitted → the flow id
(every caller shares one memory). A client that closes the stream cancels the run (``cancelled``;
Langflow 1.13 ``simplified_run_flow``: ``on_disconnect`` cancels the flow's task); the AI message
stored so far stays (a streaming model's empty partial one). Nothing is sent between events.

Files (``langflow/api/v1/files.py``, ``api/v2/files.py``), auth by ``x-api-key`` (other routes than
/run answer 403 "No authentication credentials provided" / "Invalid API key"):

- ``POST /api/v2/files`` (or ``/api/v2/files/``) stores an upload as ``<user id>/<name>`` (``<stem> (n).<ext>``
  when the key owner has that name already) and answers 201 ``{"id", "name", "path", "size", "provider"}``;
  a name with ``..``, ``/``, ``\\``, NUL, CR/LF or format characters, or a Windows device name: 400.
  ``DELETE /api/v2/files/{id}`` → 200 ``{"detail"}``, 404 "File not found", 422 for an id that is no UUID.
- ``POST /api/v1/files/upload/{flow UUID}`` (the images route) stores ``<flow>/<YYYY-mm-dd_HH-MM-SS>_<name>``
  and answers 201 ``{"flowId", "file_path"}``; a name with a separator: 500; an unknown flow: 404
  "Flow not found"; a flow id that is no UUID (an endpoint name): 422. ``DELETE
  /api/v1/files/delete/{flow}/{name}`` → 200 ``{"message"}``, also for a file already gone.
- A run attaches files with ``tweaks = {"<ChatInput id>": {"files": [path]}}``; a path not in storage
  fails the Chat Input ("File not found").

``GET /api/v1/flows/{UUID}`` returns the flow with its nodes (an endpoint name: 422);
``GET /api/v1/flows/?header_flows=true`` the key owner's flow headers (``id``, ``endpoint_name``, …).
``DELETE /api/v1/monitor/messages/session/{session_id}`` deletes that session's messages (its chat
memory) and answers 204 with no body, also for a session that has none.
"""

from __future__ import annotations

import json
import re
import time
import unicodedata
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from .http_server import PlatformFake, Request, Response, fault_names

__all__ = ["FAULTS", "FakeLangflow", "Flow", "Run"]

MiB = 1024 * 1024
USER_ID = "38b7ee74-26f8-42a5-bc6c-0760fa8cade4"  # the API key owner (real runs: a UUID)
AUTO_LOGIN_403 = (
    "Since v1.5, LANGFLOW_AUTO_LOGIN requires a valid API key. Set LANGFLOW_SKIP_AUTH_AUTO_LOGIN=true to skip "
    "this check. Please update your authentication method."
)
_FAULT_BODIES: dict[int, tuple[str, Any]] = {
    400: ("application/json", {"detail": "Invalid tweaks: component 'Nope-1' not found"}),
    401: ("application/json", {"detail": "Could not validate credentials"}),
    403: ("application/json", {"detail": "Invalid or missing API key"}),
    404: ("application/json", {"detail": "Flow identifier {flow} not found"}),
    413: ("application/json", {"detail": "Request Entity Too Large"}),
    429: ("application/json", {"detail": "Too Many Requests"}),
    500: ("text/plain; charset=utf-8", "Internal Server Error"),  # starlette, an unhandled exception
    502: ("application/json", {"detail": "Bad Gateway"}),
    503: ("application/json", {"detail": "Service Unavailable"}),
}
FAULTS: tuple[str, ...] = fault_names(_FAULT_BODIES)
MODES = ("llm", "plain")
NO_CREDENTIALS = "No authentication credentials provided"
_DEVICE_NAME = re.compile(r"^(?:CON|PRN|AUX|NUL|CONIN\$|CONOUT\$|COM[0-9¹²³]|LPT[0-9¹²³])(?=[ .]|$)", re.I)


def _uuid(value: str) -> str | None:
    try:
        return str(uuid.UUID(value))
    except ValueError:
        return None


def _uuid_error(value: str, field_name: str) -> list[dict[str, Any]]:
    """FastAPI's 422 body for a path parameter that is no UUID."""
    bad = next((i for i, ch in enumerate(value) if ch not in "0123456789abcdefABCDEF-"), 0)
    return [{"type": "uuid_parsing", "loc": ["path", field_name],
             "msg": f"Input should be a valid UUID, invalid character: found `{value[bad:bad + 1]}` at {bad + 1}"}]


@dataclass
class Flow:
    """One stored flow: Chat Input → (model) → Chat Output."""

    id: str
    name: str
    endpoint_name: str | None = None
    chat_input_id: str = "ChatInput-Wna_m"
    chat_output_id: str = "ChatOutput--hvXQ"
    model_id: str = "OpenAIModelComponent-RcQ3e"


@dataclass
class Run:
    """One /run request as received."""

    flow: str
    stream: bool
    session_id: str
    user_id: str | None
    input_value: str
    input_type: str
    output_type: str
    output_component: str
    tweaks: dict[str, Any]
    files: list[str] = field(default_factory=list)
    global_vars: dict[str, str] = field(default_factory=dict)
    cancelled: bool = False  # the client closed the stream: Langflow cancels the flow's task


@dataclass
class StoredFile:
    """One file in storage: a v2 upload has a record (``id``) in "My Files", a v1 one has none."""

    path: str
    data: bytes
    id: str | None = None
    name: str = ""


class _Aborted(Exception):
    """The connection was closed on purpose (a fault) or by the client."""


def _ts() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()) + f".{int(time.time() * 1e6) % 1000000:06d} UTC"


class FakeLangflow(PlatformFake):
    FAULTS = FAULTS
    proxy_name = "nginx"

    """Langflow fake: ``with FakeLangflow() as srv: config(base_url=srv.base_url, flow_id=srv.flow_id)``."""

    server_name = "uvicorn"

    def __init__(self, api_key: str = "sk-langflow-test-key", *, mode: str = "llm", port: int = 0) -> None:
        super().__init__(port=port)
        self.api_key = api_key
        self.api_keys: set[str] = set()
        flow = Flow(id="54136e28-10ad-4da5-af34-dfbac388ccbf", name="echo-flow", endpoint_name="lb-chat")
        self.flows: dict[str, Flow] = {flow.id: flow}
        self.flow_id = flow.id
        self.mode = mode
        # -- scenario knobs (read once at the start of each request) --
        self.answer_tokens: list[str] = ["Hello", " from", " the", " fake", " model."]
        self.token_delay = 0.0
        self.include_usage = True
        self.repeat_final = 3  # Langflow 1.13 sends the completed AI message three times
        self.fail_component: str | None = None  # the flow fails in this component with fail_text
        self.fail_text = "fake upstream failure"
        self.echo_memory = False  # answer with what the session remembers (proves memory is kept)
        self.answer_files: list[str] = []  # storage paths the flow attaches to its answer (a Chat Output's files)
        self.keep_uploads = True  # False: uploads are answered, then lost (runs naming them fail)
        self.upload_faults: list[int | None] = []  # one per upload request, in order: refuse it with this status
        self.delete_fault: int | None = None  # the delete routes answer this status (500: storage trouble)
        self.delete_delay = 0.0  # seconds the delete routes take
        self.fault_queue: list[str | None] = []
        self.stall_seconds = 3600.0
        self._fault_flow = ""  # the flow named in the http_404 fault body
        self.oversized_bytes = 9 * MiB
        # -- recorded state --
        self.runs: list[Run] = []
        self.sessions: dict[str, list[tuple[str, str]]] = {}  # session id -> [(sender, text)]
        self.uploads: dict[str, bytes] = {}  # path -> bytes: every upload received, kept after a delete
        self.stored: dict[str, StoredFile] = {}  # path -> what storage holds now
        self.deleted: list[str] = []  # paths deleted, in order
        self.deleted_sessions: list[str] = []  # sessions whose messages were deleted (monitor route)

        self.add_route("POST", "/api/v1/run/{flow}", self._run)
        self.add_route("GET", "/api/v1/flows/", self._list_flows)
        self.add_route("GET", "/api/v1/flows/{flow}", self._get_flow)
        self.add_route("POST", "/api/v2/files", self._upload)
        self.add_route("POST", "/api/v2/files/", self._upload)
        self.add_route("DELETE", "/api/v2/files/{file_id}", self._delete_file)
        self.add_route("POST", "/api/v1/files/upload/{flow}", self._upload_v1)
        self.add_route("DELETE", "/api/v1/files/delete/{flow}/{name}", self._delete_v1)
        self.add_route("DELETE", "/api/v1/monitor/messages/session/{session}", self._delete_session)
        self.add_route("GET", "/health", self._health)

    # -- public helpers ----------------------------------------------------------------------

    def forget_conversations(self) -> None:
        """Drop every session's memory. Langflow reports nothing: the next run just starts empty."""
        self.sessions.clear()

    def add_flow(self, name: str, **kw: Any) -> Flow:
        flow = Flow(id=str(uuid.uuid4()), name=name, **kw)
        self.flows[flow.id] = flow
        return flow

    # -- routes ------------------------------------------------------------------------------

    async def not_found(self, req: Request, resp: Response) -> None:
        """FastAPI's answer for a route that does not exist."""
        await self._detail(resp, 404, "Not Found")

    async def method_not_allowed(self, req: Request, resp: Response, allowed: list[str]) -> None:
        await self._detail(resp, 405, "Method Not Allowed")

    async def _health(self, req: Request, resp: Response) -> None:
        await resp.json(200, {"status": "ok"})

    def _key(self, req: Request) -> str | None:
        return req.headers.get("x-api-key") or req.query.get("x-api-key")

    async def _auth(self, req: Request, resp: Response, *, run: bool = False) -> bool:
        """/run checks the key itself (``api_key_security``); the other routes through the current
        user (``get_current_active_user``), with other words."""
        key = self._key(req)
        if not key:
            await self._detail(resp, 403, AUTO_LOGIN_403 if run else NO_CREDENTIALS)
            return False
        if key != self.api_key and key not in self.api_keys:
            await self._detail(resp, 403, "Invalid or missing API key" if run else "Invalid API key")
            return False
        return True

    async def _detail(self, resp: Response, status: int, detail: Any) -> None:
        body = json.dumps({"detail": detail}, separators=(",", ":")).encode()
        await resp.send(status, body, "application/json", {"vary": "Origin"})

    def _flow(self, ident: str) -> Flow | None:
        if ident in self.flows:
            return self.flows[ident]
        return next((f for f in self.flows.values() if f.endpoint_name == ident), None)

    async def _get_flow(self, req: Request, resp: Response) -> None:
        if not await self._auth(req, resp):
            return
        ident = req.path_params["flow"]
        if _uuid(ident) is None:  # the route takes a UUID only, no endpoint name
            await self._detail(resp, 422, _uuid_error(ident, "flow_id") * 2)
            return
        flow = self.flows.get(_uuid(ident) or "")
        if flow is None:
            await self._detail(resp, 404, "Flow not found")
            return
        nodes = [
            {"id": flow.chat_input_id, "data": {"id": flow.chat_input_id, "type": "ChatInput", "node": {}}},
            {"id": flow.model_id, "data": {"id": flow.model_id, "type": "OpenAIModelComponent", "node": {}}},
            {"id": flow.chat_output_id, "data": {"id": flow.chat_output_id, "type": "ChatOutput", "node": {}}},
        ]
        await resp.json(200, {"id": flow.id, "name": flow.name, "endpoint_name": flow.endpoint_name,
                              "user_id": USER_ID, "data": {"nodes": nodes, "edges": []}})

    async def _list_flows(self, req: Request, resp: Response) -> None:
        """The key owner's flows; ``header_flows=true``: headers only (``data`` null for a flow)."""
        if not await self._auth(req, resp):
            return
        headers = req.query.get("header_flows", "false").lower() == "true"
        out = []
        for flow in self.flows.values():
            doc: dict[str, Any] = {"id": flow.id, "name": flow.name, "folder_id": "419b50f4-6358-4c11-bd8e-f8524255256b",
                                   "is_component": False, "endpoint_name": flow.endpoint_name,
                                   "description": "", "data": None, "access_type": "PRIVATE", "tags": [],
                                   "mcp_enabled": False, "flow_type": "workflow", "updated_at": _ts()}
            if not headers:
                doc["user_id"] = USER_ID
            out.append(doc)
        await resp.json(200, out)

    async def _upload(self, req: Request, resp: Response) -> None:
        """v2: the key owner's "My Files", ``<user id>/<name>`` (a name taken gets `` (n)``)."""
        if not await self._auth(req, resp):
            return
        part = self._file_part(req)
        if part is None:
            await self._detail(resp, 422, [{"type": "missing", "loc": ["body", "file"], "msg": "Field required"}])
            return
        if await self._upload_fault(resp):
            return
        name = part.filename or ""
        if not name:
            await self._detail(resp, 400, "No file provided")
            return
        if bad := _bad_v2_name(name):
            await self._detail(resp, 400, bad)
            return
        root, dot, ext = name.rpartition(".")
        if not dot:
            root, ext = name, ""
        taken = [f.name for f in self.stored.values() if f.id is not None and f.name.startswith(root)]
        if taken:
            counts = [int(m.group(1)) for n in taken if (m := re.search(r"\((\d+)\)(?=\.\w+$|$)", n))]
            root = f"{root} ({(max(counts) if counts else 0) + 1})"
        fid = str(uuid.uuid4())
        path = f"{USER_ID}/{root}.{ext}" if ext else f"{USER_ID}/{root}"
        self.uploads[path] = part.data
        if self.keep_uploads:
            self.stored[path] = StoredFile(path, part.data, fid, root)
        await resp.json(201, {"id": fid, "name": root, "path": path, "size": len(part.data), "provider": None})

    async def _upload_v1(self, req: Request, resp: Response) -> None:
        """v1 (the route for images): beside the flow, ``<flow>/<timestamp>_<name>``, no record."""
        if not await self._auth(req, resp):
            return
        ident = req.path_params["flow"]
        if _uuid(ident) is None:
            await self._detail(resp, 422, _uuid_error(ident, "flow_id"))
            return
        flow = self.flows.get(_uuid(ident) or "")
        if flow is None:
            await self._detail(resp, 404, "Flow not found")
            return
        part = self._file_part(req)
        if part is None:
            await self._detail(resp, 422, [{"type": "missing", "loc": ["body", "file"], "msg": "Field required"}])
            return
        if await self._upload_fault(resp):
            return
        name = part.filename or ""
        if "/" in name or "\\" in name or ".." in name:
            await self._detail(resp, 500, "Invalid file name: contains path separators")
            return
        path = f"{flow.id}/{time.strftime('%Y-%m-%d_%H-%M-%S')}_{name}"
        self.uploads[path] = part.data
        if self.keep_uploads:
            self.stored[path] = StoredFile(path, part.data)
        await resp.json(201, {"flowId": flow.id, "file_path": path})

    async def _upload_fault(self, resp: Response) -> bool:
        """The next ``upload_faults`` entry, if it refuses this upload (True: answered)."""
        status = self.upload_faults.pop(0) if self.upload_faults else None
        if status is None:
            return False
        if status == 413:
            await self._detail(resp, 413, "File size is larger than the maximum file size 1024MB.")
        else:
            await self.error_body(resp, status, None)
        return True

    @staticmethod
    def _file_part(req: Request) -> Any:
        try:
            return req.form().files.get("file")
        except ValueError:
            return None

    async def _delete_pause(self, resp: Response) -> bool:
        """The delete routes' knobs; False when the response was sent (a fault) or the client left."""
        if self.delete_delay > 0 and not await resp.stall(self.delete_delay):
            return False
        if self.delete_fault is not None:
            await self._detail(resp, self.delete_fault, "Failed to delete file from storage. Please try again. "
                                                        "Error: storage unavailable")
            return False
        return True

    async def _delete_file(self, req: Request, resp: Response) -> None:
        if not await self._auth(req, resp):
            return
        ident = req.path_params["file_id"]
        if _uuid(ident) is None:
            await self._detail(resp, 422, _uuid_error(ident, "file_id"))
            return
        if not await self._delete_pause(resp):
            return
        found = next((f for f in self.stored.values() if f.id == _uuid(ident)), None)
        if found is None:
            await self._detail(resp, 404, "File not found")
            return
        del self.stored[found.path]
        self.deleted.append(found.path)
        await resp.json(200, {"detail": f"File {found.name} deleted successfully"})

    async def _delete_v1(self, req: Request, resp: Response) -> None:
        if not await self._auth(req, resp):
            return
        ident, name = req.path_params["flow"], req.path_params["name"]
        if ".." in name or "\\" in name:
            await self._detail(resp, 400, "Invalid file name. Use a simple file name without directory paths or '..'.")
            return
        if _uuid(ident) is None:
            await self._detail(resp, 422, _uuid_error(ident, "flow_id"))
            return
        flow = self.flows.get(_uuid(ident) or "")
        if flow is None:
            await self._detail(resp, 404, "Flow not found")
            return
        if not await self._delete_pause(resp):
            return
        path = f"{flow.id}/{name}"
        if self.stored.pop(path, None) is not None:  # a file already gone: 200 all the same
            self.deleted.append(path)
        await resp.json(200, {"message": f"File {name} deleted successfully"})

    async def _delete_session(self, req: Request, resp: Response) -> None:
        """The session's messages, i.e. the flow's memory of it; 204 with no body, also for none."""
        if not await self._auth(req, resp):
            return
        session = req.path_params["session"]
        if self.delete_fault is not None:
            await self._detail(resp, self.delete_fault, "database is locked")
            return
        self.sessions.pop(session, None)
        self.deleted_sessions.append(session)
        await resp.send(204, b"", "application/json")

    def _snapshot(self) -> SimpleNamespace:
        fault = self.fault_queue.pop(0) if self.fault_queue else self.fault
        if fault is not None and fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}")
        if self.mode not in MODES:
            raise ValueError(f"unknown mode {self.mode!r}")
        return SimpleNamespace(
            fault=fault, mode=self.mode, tokens=list(self.answer_tokens), delay=self.token_delay,
            usage=self.include_usage, repeat=self.repeat_final, fail=self.fail_component, fail_text=self.fail_text,
            echo_memory=self.echo_memory, answer_files=list(self.answer_files),
        )

    async def _run(self, req: Request, resp: Response) -> None:
        s = self._snapshot()
        if not await self._auth(req, resp, run=True):
            return
        ident = req.path_params["flow"]
        flow = self._flow(ident)
        self._fault_flow = ident
        if await self.head_fault(resp, s.fault):
            return
        if flow is None:
            await self._detail(resp, 404, f"Flow identifier {ident} not found")
            return
        try:
            body = req.json()
        except (ValueError, UnicodeDecodeError):
            await self._detail(resp, 422, [{"type": "json_invalid", "loc": ["body", 0], "msg": "JSON decode error"}])
            return
        if not isinstance(body, dict):
            await self._detail(resp, 422, [{"type": "model_attributes_type", "loc": ["body"],
                                            "msg": "Input should be a valid dictionary"}])
            return
        tweaks = body.get("tweaks") or {}
        if not isinstance(tweaks, dict):
            await self._detail(resp, 422, [{"type": "dict_type", "loc": ["body", "tweaks"],
                                            "msg": "Input should be a valid dictionary"}])
            return
        stream = req.query.get("stream", "false").lower() == "true"
        input_type = str(body.get("input_type") or "chat")
        session = body.get("session_id") or flow.id  # Langflow's default: every caller shares the flow's memory
        files = []
        for comp, values in tweaks.items():
            if isinstance(values, dict) and "files" in values:
                got = values["files"]
                files += got if isinstance(got, list) else [got]
                if comp != flow.chat_input_id:
                    await self._detail(resp, 400, f"Invalid tweaks: component '{comp}' not found in flow")
                    return
        run = Run(
            flow=flow.id, stream=stream, session_id=session, user_id=body.get("user_id"),
            input_value=str(body.get("input_value") or "") if input_type in ("chat", "any") else "",
            input_type=input_type, output_type=str(body.get("output_type") or "chat"),
            output_component=str(body.get("output_component") or ""), tweaks=tweaks, files=[str(f) for f in files],
            global_vars={k[len("x-langflow-global-var-"):]: v for k, v in req.headers.items()
                         if k.startswith("x-langflow-global-var-")},
        )
        self.runs.append(run)
        missing = [f for f in run.files if f not in self.stored]
        if missing and not s.fail:
            s.fail, s.fail_text = "Chat Input", f"File not found: {missing[0]}"
        memory = list(self.sessions.get(session, []))
        # this run's turns: a forget_conversations() while the answer is still being finished (the
        # client has it already) drops them with the rest instead of failing the handler
        turns = self.sessions.setdefault(session, [])
        turns.append(("User", run.input_value))
        if s.echo_memory:
            s.tokens = [f"I remember {len(memory) // 2} earlier turns."]
        answer = "".join(s.tokens)
        ctx = _Ctx(self, flow, run, s, answer)
        try:
            if stream:
                await self._stream(ctx, resp)
            else:
                await self._blocking(ctx, resp)
        except _Aborted:
            if resp.client_disconnected and not resp.aborted:
                run.cancelled = True  # on_disconnect: the flow's task is cancelled
                if ctx.partial_stored:
                    turns.append(("Machine", ""))  # the partial AI message stays as it was stored
            return
        if ctx.completed:
            turns.append(("Machine", answer))

    async def error_body(self, resp: Response, status: int, headers: Mapping[str, str] | None) -> None:
        ctype, doc = _FAULT_BODIES[status]
        if isinstance(doc, str):
            await resp.text(status, doc, ctype, headers)
            return
        await self._detail(resp, status, str(doc["detail"]).replace("{flow}", self._fault_flow))

    # -- stream ------------------------------------------------------------------------------

    async def _send(self, resp: Response, event: str, data: Any) -> None:
        await resp.write(json.dumps({"event": event, "data": data}).encode() + b"\n\n")

    async def _pause(self, resp: Response, seconds: float) -> None:
        if seconds > 0 and not await resp.stall(seconds):
            raise _Aborted

    async def _stream(self, c: _Ctx, resp: Response) -> None:
        s = c.s
        await resp.start_stream(200, "text/event-stream; charset=utf-8", {"vary": "Origin"})
        if s.fault == "empty":
            return
        if s.fault == "invalid_json":
            await resp.write(b'{"event": "add_message", "data": {not json\n\n')
            return
        await self._send(resp, "add_message", c.message("User", c.run.input_value, user=True))
        if s.fault == "non_utf8":
            await resp.write(b'{"event": "token", "data": {"chunk": "\xff\xfe", "id": "x"}}\n\n')
        if s.fault == "oversized":
            await resp.write(b'{"event": "token", "data": {"chunk": "')
            left = self.oversized_bytes
            while left > 0:
                await resp.write(b"x" * min(left, 64 * 1024))
                left -= 64 * 1024
            await resp.write(b'", "id": "x"}}\n\n')
        if s.fail and not s.fault:
            await self._pause(resp, s.delay)
            await self._fail_events(c, resp)
            return
        if s.mode == "plain":
            await self._pause(resp, s.delay)
            await self._send(resp, "add_message", c.message("Machine", c.answer))
            if await self._after_first(c, resp):
                return
        else:
            await self._send(resp, "add_message", c.message("Machine", "", state="partial"))
            c.partial_stored = True
            await self._send(resp, "token", {"chunk": "", "id": c.ai_id})
            for i, tok in enumerate(s.tokens):
                if i:
                    await self._pause(resp, s.delay)
                await self._send(resp, "token", {"chunk": tok, "id": c.ai_id})
                if i == 0 and await self._after_first(c, resp):
                    return
            for _ in range(3):
                await self._send(resp, "token", {"chunk": "", "id": c.ai_id})
            for _ in range(max(1, s.repeat)):
                await self._send(resp, "add_message", c.message("Machine", c.answer, usage=True))
        await self._send(resp, "end", {"result": c.result()})
        c.completed = True

    async def _after_first(self, c: _Ctx, resp: Response) -> bool:
        """Faults that strike after the first piece of the answer; True when the stream is over."""
        fault = c.s.fault
        if fault == "truncated":
            await resp.abort()
            raise _Aborted
        if fault == "error_event":
            await self._fail_events(c, resp)
            return True
        if fault == "stall":
            await self._pause(resp, self.stall_seconds)
        return False

    async def _fail_events(self, c: _Ctx, resp: Response) -> None:
        component = c.s.fail or "OpenAI"
        err = c.message(component, c.s.fail_text + "\n", error=True)
        await self._send(resp, "error", err)
        await self._send(resp, "error", {"error": "500: " + c.graph_error(component)})

    async def _blocking(self, c: _Ctx, resp: Response) -> None:
        s = c.s
        fault = s.fault
        if fault in ("stall",):
            await self._pause(resp, self.stall_seconds)
        if fault == "empty":
            await resp.send(200, b"", "application/json")
            return
        if fault == "invalid_json":
            await resp.send(200, b'{"session_id": "x", "outputs": [', "application/json")
            return
        if fault == "truncated":
            await resp.send_head(200, {"Content-Type": "application/json", "Content-Length": "5000"})
            await resp.write_raw(b'{"session_id": "')
            await resp.abort()
            raise _Aborted
        if fault == "non_utf8":
            await resp.send(200, b'{"session_id": "\xff\xfe", "outputs": []}', "application/json")
            return
        if fault == "oversized":
            await resp.send(200, b'{"pad": "' + b"x" * (17 * MiB) + b'"}', "application/json")
            return
        await self._pause(resp, s.delay * max(len(s.tokens) - 1, 0))
        if fault == "error_event" or s.fail:
            await self._detail(resp, 500, c.graph_error(s.fail or "OpenAI"))
            return
        await resp.json(200, c.result())
        c.completed = True


class _Ctx:
    """One run's ids and the documents built from them."""

    def __init__(self, srv: FakeLangflow, flow: Flow, run: Run, s: SimpleNamespace, answer: str) -> None:
        self.srv, self.flow, self.run, self.s, self.answer = srv, flow, run, s, answer
        self.run_id = str(uuid.uuid4())
        self.ai_id = str(uuid.uuid4())
        self.ts = _ts()
        self.completed = False
        self.partial_stored = False  # the streaming model's empty AI message was stored

    def usage(self) -> dict[str, int] | None:
        if not self.s.usage or self.s.mode != "llm":
            return None
        out = max(1, len(self.s.tokens))
        return {"input_tokens": 11, "output_tokens": out, "total_tokens": 11 + out}

    def message(self, sender: str, text: str, *, user: bool = False, state: str = "complete", usage: bool = False,
                error: bool = False) -> dict[str, Any]:
        mid = str(uuid.uuid4()) if user or error else self.ai_id
        if user:
            source = {"id": None, "display_name": None, "source": None}
        elif error:
            source = {"id": self.flow.model_id, "display_name": sender, "source": sender}
        elif self.s.mode == "llm":
            source = {"id": self.flow.model_id, "display_name": "OpenAI", "source": "gpt-4o-mini"}
        else:
            source = {"id": self.flow.chat_input_id, "display_name": "Chat Input", "source": "Chat Input"}
        props = {"text_color": "red" if error else None, "background_color": "red" if error else None,
                 "edited": False, "source": source, "icon": "error" if error else ("OpenAI" if not user and
                 self.s.mode == "llm" else None), "allow_markdown": False, "positive_feedback": None,
                 "state": state, "targets": [], "usage": self.usage() if usage else None, "build_duration": None}
        inner = {"timestamp": self.ts, "sender": "User" if user else ("Machine" if not error else sender),
                 "sender_name": "User" if user else ("AI" if not error else sender),
                 "session_id": self.run.session_id, "context_id": "" if not error else None, "text": text,
                 "files": list(self.run.files) if user else ([] if error else list(self.s.answer_files)),
                 "error": False, "edit": False, "properties": props,
                 "category": "error" if error else "message",
                 "content_blocks": [{"title": "Error", "contents": [{"type": "error", "component": sender,
                                    "reason": f"**Error**\n - **{text.strip()}**\n", "traceback": "Traceback ..."}]}]
                 if error else [],
                 "session_metadata": {"graph_run_id": self.run_id}, "id": mid, "flow_id": self.flow.id,
                 "run_id": self.run_id, "duration": None}
        return {"text_key": "text", "data": inner, "default_value": "", **{k: v for k, v in inner.items()
                if k not in ("id",)}, "id": mid}

    def graph_error(self, component: str) -> str:
        return json.dumps({"message": f"Error running graph: Error building Component {component}: \n\n"
                                      f"{self.s.fail_text}", "traceback": None, "description": None, "code": None,
                           "suggestion": None}, separators=(",", ":"))

    def result(self) -> dict[str, Any]:
        msg = self.message("Machine", self.answer, usage=True)
        out = {
            "results": {"message": msg},
            "artifacts": {"message": self.answer, "sender": "Machine", "sender_name": "AI",
                          "files": list(self.s.answer_files), "type": "object"},
            "outputs": {"message": {"message": self.answer, "type": "text"}},
            "logs": {"message": []},
            "messages": [{"message": self.answer, "sender": "Machine", "sender_name": "AI",
                          "session_id": self.run.session_id, "stream_url": None,
                          "component_id": self.flow.chat_output_id, "files": list(self.s.answer_files),
                          "type": "text"}],
            "timedelta": None, "duration": None, "component_display_name": "Chat Output",
            "component_id": self.flow.chat_output_id, "used_frozen_result": False, "token_usage": None,
        }
        inputs = {"input_value": self.run.input_value} if self.run.input_type in ("chat", "any") else {}
        return {"session_id": self.run.session_id, "outputs": [{"inputs": inputs, "outputs": [out]}]}


def _bad_v2_name(name: str) -> str | None:
    """Why ``/api/v2/files`` refuses a file name (``_validate_file_name``), or None."""
    if any(x in name for x in ("..", "/", "\\", "\x00", "\n", "\r")) or any(
            unicodedata.category(ch) in ("Cf", "Zl", "Zp") for ch in name):
        return "Invalid file name: paths, '..', NUL, CR/LF, and unsafe Unicode formatting are forbidden."
    if len(name.encode("utf-8")) > 255:
        return "File name is too long. Maximum 255 bytes allowed."
    if _DEVICE_NAME.match(name):
        return f"Invalid file name. '{name}' is a reserved system name."
    return None
