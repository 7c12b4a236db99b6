"""Faithful fake of Tencent WeKnora's session chat API (docs/platforms.md section 7, read against
Tencent/WeKnora @412dcc41 ``internal/handler/session`` and ``internal/stream``).

- ``POST /api/v1/sessions`` needs a JSON body (an empty one is 400) and answers **201**
  ``{"success": true, "data": {"id", "title", "tenant_id", "user_id", …}}``; ``DELETE
  /api/v1/sessions/{id}`` answers ``{"success": true, "message": "Session deleted successfully"}``
  (404 AppError 1003 "session not found" for an unknown one or another user's).
- ``POST /api/v1/knowledge-chat/{sid}`` and ``/api/v1/agent-chat/{sid}`` answer a gin SSE stream:
  ``event:message`` / ``data:{StreamResponse}`` with no space after the colons, a blank line after
  each. Every event carries the request id as ``id``. Both start with ``agent_query`` (``session_id``
  and ``assistant_message_id`` at top level and in ``data``); then ``thinking``* (``interleave``
  mixes thinking events between answer tokens), agent ``tool_call``/``tool_result`` (a failed tool
  is an ``error`` with ``data.tool_call_id``), ``references`` before the answer, ``answer``*, an
  empty ``answer`` with ``done: true``, ``complete``, and — for a session without a title — a
  ``session_title`` up to ``title_delay`` seconds later. Real WeKnora sends no ``usage``:
  ``include_usage`` puts one on the final answer and ``complete`` (off by default).
- As in WeKnora, the answer is generated apart from the connection (qa.go executeQA runs it on a
  context detached from the request): every event goes into the run's event list (the stream
  manager), and each connection only reads that list from the start (stream.go
  handleAgentEventsForSSE, offset 0). A client that leaves does not stop the answer.
  ``GET /api/v1/sessions/continue-stream/{sid}?message_id=`` replays the whole list from the first
  event and then follows it until ``complete`` (stream.go ContinueStream); unknown message → 404
  AppError, a run whose events are gone → 404 ``{"success": false, "error": "No stream events
  found"}``.
- ``POST /api/v1/sessions/{sid}/stop`` ``{"message_id"}`` appends a ``stop`` event to the list
  (``content: ""``, ``data.reason: "user_requested"``), which ends the generation; the chat
  connection turns it into ``stop`` "Generation stopped by user" and ends, continue-stream replays it
  as stored. A finished message answers "Message already completed".
- Unknown session → 404 ``{"success": false, "error": {"code": 1003, "message": "Session not found"}}``;
  a bad key → 401 ``{"error": "Unauthorized: invalid API key"}``; an in-stream failure is
  ``response_type: "error"`` with ``data.stage``.
- ``approval`` / ``oauth`` make the agent wait for a person (``tool_approval_required`` /
  ``mcp_oauth_required``) until stopped.
- ``direct_principal``: sessions belong to the ``X-External-User-ID`` that created them (WeKnora's
  "direct" API-principal mode); another user gets "Session not found".
- Breaking connections: ``drops`` — the next that many answer connections (chat or continue-stream)
  break off after ``drop_after`` answer deltas new to them, while WeKnora goes on generating;
  ``resume_cuts`` — the next that many continue-stream requests are closed before any answer; the
  ``truncated`` fault breaks the chat connection after the first token *and* loses the run's events
  (a WeKnora restart with the in-memory stream manager: continue-stream then finds none).
- ``parse_delay``: seconds WeKnora spends parsing ``attachment_uploads`` before it answers at all
  (qa.go parseQARequest processes them before the SSE head is written).
- Skill artifacts (agent-chat only): ``artifacts`` lists the files the agent's skills leave in the
  sandbox's output directory (``{"file_name", "data"}``). As in WeKnora, they are drained into storage
  when the agent completes and announced on the ``complete`` event as ``data.artifacts`` (index,
  file_name, file_type, file_size, source_path, mod_time, created_at; no storage URL —
  agent_stream_handler.go handleComplete, publicArtifactViews), but the assistant message holding them
  is only stored after the agent returns (qa.go: completeAssistantMessage in the deferred block), so a
  download is 404 "artifact index out of range" until ``artifact_store_delay`` has passed after
  ``complete``. ``GET /sessions/{sid}/messages/{mid}/artifacts/{index}/download``
  (artifact_download.go DownloadMessageArtifact) checks the key, the index, the caller's own session
  (404 "session not found"), the message (404 "message not found"), then answers the bytes with
  ``Content-Type`` by extension (Go's built-in table; ``application/octet-stream`` otherwise),
  ``Content-Disposition: attachment; filename="…"; filename*=UTF-8''…`` and ``Content-Length``;
  ``GET /sessions/{sid}/messages/{mid}/artifacts`` lists them. Faults: ``missing_blobs`` (names whose
  stored blob is gone: 404 "artifact blob missing"), ``cut_blobs`` (names whose body breaks off
  midway), ``artifact_chunked`` (no Content-Length: a stored size of 0), ``artifact_redirect`` (a
  proxy in front of WeKnora answering downloads with a 302 to that URL; WeKnora itself never does).

One simplification: a connection whose generation ended without ``complete`` (an error, a stall
that ran out, a stop) ends its body, where WeKnora's would keep polling until the client leaves.
"""

from __future__ import annotations

import asyncio
import json
import posixpath
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any
from urllib.parse import quote

from .http_server import PlatformFake, Request, Response, fault_names

__all__ = ["FAULTS", "FakeWeKnora", "Session"]

API = "/api/v1"
# status -> body of the http_<status> faults (WeKnora's AppError envelope; the auth middleware's own)
_FAULT_BODIES: dict[int, dict[str, Any]] = {
    400: {"success": False, "error": {"code": 1000, "message": "Query content cannot be empty", "details": None}},
    401: {"error": "Unauthorized: invalid API key"},
    403: {"success": False, "error": {"code": 1002, "message": "Forbidden: API key cannot access this knowledge base",
                                      "details": None}},
    404: {"success": False, "error": {"code": 1003, "message": "Shared agent not found", "details": None}},
    413: {"success": False, "error": {"code": 1000, "message": "request body too large", "details": None}},
    429: {"success": False, "error": {"code": 1006, "message": "too many requests", "details": None}},
    500: {"success": False, "error": {"code": 1007, "message": "Internal server error", "details": None}},
    502: {"success": False, "error": {"code": 1007, "message": "upstream model service error", "details": None}},
    503: {"success": False, "error": {"code": 1008, "message": "服务暂时不可用", "details": None}},
}
# "stall_pings": after the first token only empty thinking deltas keep coming (WeKnora has no keep-alive)
FAULTS: tuple[str, ...] = fault_names(_FAULT_BODIES, extra=("stall_pings",))
MiB = 1024 * 1024
DEFAULT_REFERENCES: list[dict[str, Any]] = [
    {"id": "chunk-1", "content": "彗星由冰和尘埃组成。", "knowledge_id": "doc-comet", "chunk_index": 0,
     "knowledge_title": "彗星.txt", "score": 0.91, "match_type": 3, "chunk_type": "text",
     "knowledge_filename": "彗星.txt"},
    {"id": "chunk-2", "content": "彗尾背向太阳。", "knowledge_id": "doc-comet", "chunk_index": 3,
     "knowledge_title": "彗星.txt", "score": 0.72, "match_type": 3, "chunk_type": "text",
     "knowledge_filename": "彗星.txt"},
    {"id": "chunk-3", "content": "Solar wind pushes the tail.", "knowledge_id": "doc-sun", "chunk_index": 1,
     "knowledge_title": "The Sun", "score": 0.55, "match_type": 1, "chunk_type": "text",
     "knowledge_filename": "sun.md"},
]


@dataclass
class Session:
    id: str
    title: str
    key: str
    owner: str  # the X-External-User-ID that created it ("" = the tenant)
    created_at: str
    messages: list[dict[str, Any]] = field(default_factory=list)  # {"role", "content"} in order



@dataclass
class _Run:
    """One chat call: the assistant message being generated and its stream-manager event list."""

    session: Session
    message_id: str
    request_id: str
    events: list[dict[str, Any]] = field(default_factory=list)
    stop: asyncio.Event = field(default_factory=asyncio.Event)  # the stop watcher fired
    waiters: set[asyncio.Event] = field(default_factory=set)  # connections following the list
    answer: str = ""  # what the generation produced so far (stored when it ends)
    artifacts: list[dict[str, Any]] = field(default_factory=list)  # MessageArtifact, with the bytes
    artifacts_stored_at: float | None = None  # monotonic time the message with its artifacts is stored
    completed: bool = False  # the message is stored as complete (finished, failed or stopped)
    generating: bool = True
    lost: bool = False  # the events were lost (a restart): continue-stream finds none
    task: asyncio.Task[None] | None = None

    def append(self, obj: dict[str, Any]) -> None:
        if self.lost:
            return
        self.events.append(obj)
        self.wake()

    def wake(self) -> None:
        for waiter in self.waiters:
            waiter.set()


class _Abort(Exception):
    """The client left or a fault closed the connection."""


class FakeWeKnora(PlatformFake):
    """WeKnora fake: ``with FakeWeKnora() as srv: base-url = srv.base_url``."""

    FAULTS = FAULTS
    server_name = "weknora"

    def __init__(self, api_key: str = "sk-weknora-test-key-0001", *, port: int = 0) -> None:
        super().__init__(port=port)
        self.api_key = api_key
        self.api_keys: set[str] = set()  # further accepted keys (a second bot)
        # -- scenario knobs (read at the start of each chat request) --
        self.answer_tokens: list[str] = ["Hello", ", ", "world", "!"]
        self.token_delay = 0.0
        self.reasoning: list[str] = []
        self.interleave = False  # thinking pieces alternate with answer tokens
        self.references: list[dict[str, Any]] = []
        self.tools = False  # agent-chat: a knowledge_search tool step before the answer
        self.tool_fails = False
        self.tool_seconds = 0.0  # how long the tool runs (silently) before its result
        self.preamble = ""  # agent answer text streamed before the tool step
        self.approval = False
        self.oauth = False
        self.include_usage = False
        self.title_delay = 0.05
        self.title_wait = 3.0  # how long a chat connection waits for the title after complete
        self.image_upload_enabled = True
        self.direct_principal = False
        self.split_writes = False
        self.parse_delay = 0.0  # seconds spent on attachment_uploads before the response head
        # -- skill artifacts (agent-chat) --
        self.artifacts: list[dict[str, Any]] = []  # {"file_name", "data"[, "file_size"]} a skill writes
        self.artifact_store_delay = 0.0  # seconds after complete before the message (and its files) is stored
        self.missing_blobs: set[str] = set()  # file names whose stored blob is gone
        self.cut_blobs: set[str] = set()  # file names whose download breaks off midway
        self.artifact_chunked = False  # no Content-Length on downloads (a stored file_size of 0)
        self.artifact_redirect: str | None = None  # a proxy's 302 to this URL instead of the download
        # -- breaking connections --
        self.drops = 0
        self.drop_after = 1
        self.resume_cuts = 0
        # -- faults --
        self.stall_seconds = 3600.0
        self.stall_ping_every = 0.25
        self.oversized_bytes = 9 * MiB
        # -- recorded state --
        self.sessions: dict[str, Session] = {}
        self.runs: dict[str, _Run] = {}  # assistant message id -> the run generating it
        self.stopped: list[tuple[str, str]] = []  # (session id, message id) of stop calls
        self.deleted: list[str] = []  # ids of the sessions deleted through the API
        self.preset_session: str | None = None  # a session id that always exists (benchmarks)

        self.add_route("POST", f"{API}/sessions", self._create_session)
        self.add_route("GET", f"{API}/sessions/continue-stream/{{sid}}", self._continue_stream)
        self.add_route("GET", f"{API}/sessions/{{sid}}", self._get_session)
        self.add_route("DELETE", f"{API}/sessions/{{sid}}", self._delete_session)
        self.add_route("POST", f"{API}/sessions/{{sid}}/stop", self._stop)
        self.add_route("POST", f"{API}/knowledge-chat/{{sid}}", self._knowledge_chat)
        self.add_route("POST", f"{API}/agent-chat/{{sid}}", self._agent_chat)
        self.add_route("GET", f"{API}/sessions/{{sid}}/messages/{{mid}}/artifacts", self._list_artifacts)
        self.add_route("GET", f"{API}/sessions/{{sid}}/messages/{{mid}}/artifacts/{{index}}/download",
                       self._download_artifact)

    @property
    def base_url(self) -> str:  # type: ignore[override]
        return self.root_url + API

    def forget_conversations(self) -> None:
        """Delete every session (stored ids now get 404 "Session not found")."""
        self.sessions.clear()

    def chat_requests(self) -> list[Request]:
        return [r for r in self.requests if r.method == "POST" and "-chat/" in r.path]

    def resume_requests(self) -> list[Request]:
        return [r for r in self.requests if r.method == "GET" and "/continue-stream/" in r.path]

    def artifact_requests(self) -> list[Request]:
        return [r for r in self.requests if r.method == "GET" and r.path.endswith("/download")]

    def stored_answers(self, sid: str) -> list[str]:
        """The assistant messages WeKnora stored in session ``sid`` (what its web UI shows)."""
        s = self.sessions.get(sid)
        return [m["content"] for m in (s.messages if s else []) if m["role"] == "assistant"]

    # -- helpers ---------------------------------------------------------------------------------

    async def not_found(self, req: Request, resp: Response) -> None:
        await resp.text(404, "404 page not found")  # gin's own text

    def _key(self, req: Request) -> str | None:
        key = req.headers.get("x-api-key", "").strip()
        if not key:
            bearer = req.headers.get("authorization", "")
            key = bearer.removeprefix("Bearer ").strip()
        return key if key and (key == self.api_key or key in self.api_keys) else None

    async def _unauthorized(self, req: Request, resp: Response) -> None:
        given = req.headers.get("x-api-key") or req.headers.get("authorization")
        text = "Unauthorized: invalid API key" if given else "Unauthorized: missing authentication"
        await resp.json(401, {"error": text})

    @staticmethod
    async def _app_error(resp: Response, status: int, code: int, message: str) -> None:
        await resp.json(status, {"success": False, "error": {"code": code, "message": message, "details": None}})

    def _owner(self, req: Request) -> str:
        return req.headers.get("x-external-user-id", "").strip() if self.direct_principal else ""

    def _session(self, req: Request, sid: str, key: str) -> Session | None:
        if self.preset_session and sid == self.preset_session and sid not in self.sessions:
            self.sessions[sid] = Session(sid, "bench", key, "", _now())
        s = self.sessions.get(sid)
        if s is None or s.key != key or s.owner != self._owner(req):
            return None
        return s

    # -- sessions ----------------------------------------------------------------------------------

    async def _create_session(self, req: Request, resp: Response) -> None:
        key = self._key(req)
        if key is None:
            await self._unauthorized(req, resp)
            return
        try:
            body = json.loads(req.body) if req.body else None
        except (ValueError, UnicodeDecodeError):
            body = None
        if not isinstance(body, dict):
            await self._app_error(resp, 400, 1000, "EOF" if not req.body else "invalid character in JSON body")
            return
        sid = str(uuid.uuid4())
        s = Session(sid, str(body.get("title") or ""), key, self._owner(req), _now())
        self.sessions[sid] = s
        await resp.json(201, {"success": True, "data": {
            "id": sid, "title": s.title, "description": str(body.get("description") or ""), "tenant_id": 10000,
            "user_id": s.owner or "system-10000", "is_pinned": False, "created_at": s.created_at,
            "updated_at": s.created_at, "deleted_at": None}})

    async def _get_session(self, req: Request, resp: Response) -> None:
        key = self._key(req)
        if key is None:
            await self._unauthorized(req, resp)
            return
        s = self._session(req, req.path_params["sid"], key)
        if s is None:
            await self._app_error(resp, 404, 1003, "session not found")
            return
        await resp.json(200, {"success": True, "data": {"id": s.id, "title": s.title, "created_at": s.created_at}})

    async def _delete_session(self, req: Request, resp: Response) -> None:
        """handler.go DeleteSession: the session service looks the session up for this tenant and
        user (sessionRepo.Get) before it soft-deletes it."""
        key = self._key(req)
        if key is None:
            await self._unauthorized(req, resp)
            return
        sid = req.path_params["sid"]
        if self._session(req, sid, key) is None:
            await self._app_error(resp, 404, 1003, "session not found")
            return
        del self.sessions[sid]
        self.deleted.append(sid)
        await resp.json(200, {"success": True, "message": "Session deleted successfully"})

    async def _stop(self, req: Request, resp: Response) -> None:
        """stream.go StopSession: the message, then the caller's own session; a message still being
        generated gets a stop event in its stream, which the stop watcher turns into a cancel."""
        key = self._key(req)
        if key is None:
            await self._unauthorized(req, resp)
            return
        try:
            body = json.loads(req.body or b"{}")
        except ValueError:
            body = {}
        mid = body.get("message_id") if isinstance(body, dict) else None
        sid = req.path_params["sid"]
        if not mid:
            await resp.json(400, {"error": "message_id is required"})
            return
        self.stopped.append((sid, str(mid)))
        run = self.runs.get(str(mid))
        if run is None or run.session.id != sid:
            await resp.json(404, {"error": "Message not found"})
            return
        if self._session(req, sid, key) is None:
            await resp.json(404, {"error": "Session not found"})
            return
        if run.completed:
            await resp.json(200, {"success": True, "message": "Message already completed"})
            return
        run.lost = False  # the event store works again after a restart
        run.append({"id": run.request_id, "response_type": "stop", "content": "", "done": True,
                    "data": {"session_id": sid, "message_id": run.message_id, "reason": "user_requested"}})
        run.stop.set()
        await resp.json(200, {"success": True, "message": "Generation stopped"})

    # -- skill artifacts ------------------------------------------------------------------------

    def _message(self, req: Request, key: str) -> tuple[_Run | None, str | None]:
        """The assistant message of the path, or the error WeKnora answers (handler order: the
        caller's own session via GetSession, then GetMessage scoped to that session)."""
        sid, mid = req.path_params["sid"], req.path_params["mid"]
        if self._session(req, sid, key) is None:
            return None, "session not found"
        run = self.runs.get(mid)
        if run is None or run.session.id != sid:
            return None, "message not found"
        return run, None

    @staticmethod
    def _stored(run: _Run) -> list[dict[str, Any]]:
        """The artifacts of the stored message (none until completeAssistantMessage wrote it)."""
        if run.artifacts_stored_at is None or time.monotonic() < run.artifacts_stored_at:
            return []
        return run.artifacts

    async def _list_artifacts(self, req: Request, resp: Response) -> None:
        """artifact_download.go ListMessageArtifacts: metadata only, never the storage URL."""
        key = self._key(req)
        if key is None:
            await self._unauthorized(req, resp)
            return
        run, missing = self._message(req, key)
        if run is None:
            await self._app_error(resp, 404, 1003, missing or "")
            return
        await resp.json(200, {"success": True, "data": _artifact_views(self._stored(run))})

    async def _download_artifact(self, req: Request, resp: Response) -> None:
        """artifact_download.go DownloadMessageArtifact."""
        key = self._key(req)
        if key is None:
            await self._unauthorized(req, resp)
            return
        if self.artifact_redirect:
            await resp.send(302, b"", None, {"Location": self.artifact_redirect})
            return
        raw = req.path_params["index"]
        if not raw.lstrip("+-").isdigit() or int(raw) < 0:  # strconv.Atoi, then index < 0
            await self._app_error(resp, 400, 1000, "invalid artifact index")
            return
        run, missing = self._message(req, key)
        if run is None:
            await self._app_error(resp, 404, 1003, missing or "")
            return
        stored = self._stored(run)
        index = int(raw)
        if index >= len(stored):
            await self._app_error(resp, 404, 1003, "artifact index out of range")
            return
        art = stored[index]
        name = art["file_name"]
        if name in self.missing_blobs:
            await self._app_error(resp, 404, 1003, "artifact blob missing")
            return
        headers = {"Content-Type": _go_mime(name), "X-Content-Type-Options": "nosniff",
                   "Content-Disposition": _attachment_header(name)}
        data: bytes = art["data"]
        if name in self.cut_blobs:
            await resp.send_head(200, {**headers, "Content-Length": str(len(data))})
            await resp.write_raw(data[: len(data) // 2])
            await resp.abort()
            return
        if self.artifact_chunked or not art["file_size"]:
            await resp.start_stream(200, headers["Content-Type"], headers)
            for start in range(0, len(data), 64 * 1024):
                await resp.write(data[start:start + 64 * 1024])
            await resp.end()
            return
        await resp.send(200, data, None, headers)

    # -- chat ------------------------------------------------------------------------------------

    async def _knowledge_chat(self, req: Request, resp: Response) -> None:
        await self._chat(req, resp, agent=False)

    async def _agent_chat(self, req: Request, resp: Response) -> None:
        await self._chat(req, resp, agent=True)

    def _snapshot(self) -> SimpleNamespace:
        return SimpleNamespace(
            tokens=list(self.answer_tokens), token_delay=self.token_delay, reasoning=list(self.reasoning),
            interleave=self.interleave, references=[dict(r) for r in self.references], tools=self.tools,
            tool_fails=self.tool_fails, tool_seconds=self.tool_seconds, preamble=self.preamble,
            approval=self.approval, oauth=self.oauth, include_usage=self.include_usage,
            title_delay=self.title_delay, split_writes=self.split_writes, fault=self.fault,
            stall_seconds=self.stall_seconds, stall_ping_every=self.stall_ping_every,
            oversized_bytes=self.oversized_bytes, request_id=str(uuid.uuid4()),
            artifacts=[dict(a) for a in self.artifacts], artifact_store_delay=self.artifact_store_delay,
        )

    async def error_body(self, resp: Response, status: int, headers: Mapping[str, str] | None) -> None:
        await resp.json(status, _FAULT_BODIES[status], headers)

    async def _chat(self, req: Request, resp: Response, *, agent: bool) -> None:
        s = self._snapshot()
        if await self.head_fault(resp, s.fault, stall_seconds=s.stall_seconds):
            return
        key = self._key(req)
        if key is None:
            await self._unauthorized(req, resp)
            return
        try:
            body = json.loads(req.body)
        except (ValueError, UnicodeDecodeError):
            await self._app_error(resp, 400, 1000, "invalid character in request body")
            return
        if not isinstance(body, dict) or not isinstance(body.get("query"), str) or not body["query"]:
            await self._app_error(resp, 400, 1000, "Key: 'CreateKnowledgeQARequest.Query' Error:Field validation "
                                                   "for 'Query' failed on the 'required' tag")
            return
        if req.query.get("resource_urls", "handle") not in ("handle", "public"):
            await self._app_error(resp, 400, 1000, "invalid resource_urls value")
            return
        session = self._session(req, req.path_params["sid"], key)
        if session is None:
            await self._app_error(resp, 404, 1003, "Session not found")
            return
        if body.get("images") and not self.image_upload_enabled:
            await self._app_error(resp, 400, 1000, "Image upload is not enabled for this agent")
            return
        uploads = body.get("attachment_uploads") or []
        if len(uploads) > 5:
            await self._app_error(resp, 400, 1000, "at most 5 attachments are allowed per request")
            return
        if uploads and self.parse_delay > 0:
            # inline files are saved and parsed (docreader, ASR) before the stream's head is written
            if not await resp.stall(self.parse_delay):
                return
        agent_mode = agent and (body.get("agent_id") == "builtin-smart-reasoning" or body.get("agent_enabled") is True)
        run = _Run(session, str(uuid.uuid4()), s.request_id)
        self.runs[run.message_id] = run
        session.messages.append({"role": "user", "content": body["query"]})
        wait_title = not session.title
        if s.fault == "empty":  # headers, then the body ends without one event
            run.generating, run.completed = False, True
            await resp.start_stream(200, "text/event-stream", {"X-Accel-Buffering": "no", "Connection": "close"})
            resp.close_connection = True
            return
        await resp.start_stream(200, "text/event-stream", {"X-Accel-Buffering": "no", "Connection": "keep-alive"})
        # setupSSEStream writes agent_query before the answer is generated, on a detached context
        sid = session.id
        run.append({"id": run.request_id, "response_type": "agent_query", "content": "", "done": True,
                     "session_id": sid, "assistant_message_id": run.message_id,
                     "data": {"session_id": sid, "assistant_message_id": run.message_id}})
        run.task = asyncio.get_running_loop().create_task(self._generate(s, run, agent_mode))
        run.task.add_done_callback(self._generation_ended)
        try:
            await self._follow(s, resp, run, chat=True, wait_title=wait_title)
        except _Abort:
            await resp.abort()

    def _generation_ended(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            self.handler_errors.append(task.exception())  # type: ignore[arg-type]

    async def _continue_stream(self, req: Request, resp: Response) -> None:
        """stream.go ContinueStream: replay every event from offset 0, then follow until complete."""
        s = self._snapshot()
        key = self._key(req)
        if key is None:
            await self._unauthorized(req, resp)
            return
        if self.resume_cuts > 0:
            self.resume_cuts -= 1
            await resp.abort()
            return
        sid, mid = req.path_params["sid"], req.query.get("message_id", "")
        if not mid:
            await self._app_error(resp, 400, 1000, "Missing message ID")
            return
        if req.query.get("resource_urls", "handle") not in ("handle", "public"):
            await self._app_error(resp, 400, 1000, "invalid resource_urls value")
            return
        if self._session(req, sid, key) is None:
            await self._app_error(resp, 404, 1003, "session not found")
            return
        run = self.runs.get(mid)
        if run is None or run.session.id != sid:
            await self._app_error(resp, 404, 1003, "record not found")
            return
        if not run.events:
            await resp.json(404, {"success": False, "error": "No stream events found"})
            return
        await resp.start_stream(200, "text/event-stream", {"X-Accel-Buffering": "no", "Connection": "keep-alive"})
        try:
            await self._follow(s, resp, run, chat=False, wait_title=False)
        except _Abort:
            await resp.abort()

    async def _write(self, s: SimpleNamespace, resp: Response, obj: dict[str, Any]) -> None:
        if resp.client_disconnected:
            self.client_disconnects += 1
            raise _Abort
        payload = ("event:message\ndata:" + _go_json(obj) + "\n\n").encode()
        if s.split_writes:
            await resp.write_split(payload)
        else:
            await resp.write(payload)

    async def _raw_fault(self, s: SimpleNamespace, resp: Response) -> bool:
        """Bytes that are not a good event, right after agent_query; True when the body ends there."""
        if s.fault == "invalid_json":
            await resp.write(b"event:message\ndata:{not json\n\n")
            return True
        if s.fault == "non_utf8":
            await resp.write(b'event:message\ndata:{"id":"x","response_type":"answer","content":"\xff\xfe",'
                             b'"done":false}\n\n')
        if s.fault == "oversized":
            await resp.write(b'event:message\ndata:{"id":"x","response_type":"answer","content":"')
            chunk = b"x" * (64 * 1024)
            left = s.oversized_bytes
            while left > 0:
                await resp.write(chunk[: min(left, len(chunk))])
                left -= len(chunk)
            await resp.write(b'","done":false}\n\n')
        return False

    async def _follow(self, s: SimpleNamespace, resp: Response, run: _Run, *, chat: bool, wait_title: bool) -> None:
        """One connection reading the run's events from the first (handleAgentEventsForSSE for the
        chat call, ContinueStream for a resume)."""
        offset, fresh_from, new_answers = 0, (0 if chat else len(run.events)), 0
        cut = self.drops > 0
        if cut:
            self.drops -= 1
        waiter = asyncio.Event()
        run.waiters.add(waiter)
        title_deadline: float | None = None
        try:
            while True:
                while offset < len(run.events):
                    obj = run.events[offset]
                    offset += 1
                    kind = obj["response_type"]
                    if title_deadline is not None:
                        if kind == "session_title":
                            await self._write(s, resp, obj)
                            return
                        continue
                    if kind == "stop" and chat:
                        # the chat connection's own stop notice (handleAgentEventsForSSE), then the end
                        await self._write(s, resp, {"id": run.request_id, "response_type": "stop",
                                                    "content": "Generation stopped by user", "done": True})
                        return
                    await self._write(s, resp, obj)
                    if chat and offset == 1 and await self._raw_fault(s, resp):
                        return
                    if kind == "answer" and obj["content"] and offset > fresh_from:
                        new_answers += 1
                        if chat and s.fault == "truncated":
                            run.lost = True  # WeKnora went down: the answer and its events are gone
                            run.events.clear()
                            if run.task is not None:
                                run.task.cancel()
                            raise _Abort
                        if cut and new_answers >= self.drop_after:
                            raise _Abort
                    if kind == "complete":
                        if not (chat and wait_title):
                            return
                        title_deadline = time.monotonic() + self.title_wait
                if not run.generating and (title_deadline is None or offset >= len(run.events)):
                    return
                if title_deadline is not None and time.monotonic() >= title_deadline:
                    return
                waiter.clear()
                try:
                    await asyncio.wait_for(waiter.wait(), 0.05)
                except TimeoutError:
                    if resp.client_disconnected:
                        self.client_disconnects += 1
                        return
        finally:
            run.waiters.discard(waiter)

    # -- generation (apart from any connection) ----------------------------------------------------

    def _emit(self, s: SimpleNamespace, run: _Run, rtype: str, content: str = "", done: bool = False,
              **extra: Any) -> None:
        obj: dict[str, Any] = {"id": s.request_id, "response_type": rtype, "content": content, "done": done}
        obj.update(extra)
        run.append(obj)

    async def _wait(self, run: _Run, seconds: float) -> bool:
        """Sleep; True when the run was stopped meanwhile."""
        if run.stop.is_set():
            return True
        if seconds <= 0:
            await asyncio.sleep(0)
            return run.stop.is_set()
        try:
            await asyncio.wait_for(run.stop.wait(), max(seconds, 0.0))
        except TimeoutError:
            return run.stop.is_set()
        return True

    async def _generate(self, s: SimpleNamespace, run: _Run, agent_mode: bool) -> None:
        try:
            await self._answer(s, run, agent_mode)
        finally:
            run.generating = False
            if not run.lost:
                run.completed = True
                if run.answer:
                    run.session.messages.append({"role": "assistant", "content": run.answer})
            run.wake()

    async def _answer(self, s: SimpleNamespace, run: _Run, agent_mode: bool) -> None:
        sid = run.session.id
        await asyncio.sleep(0)  # the first connection reads agent_query on its own
        think_id = f"thinking-{uuid.uuid4().hex[:8]}"
        pending_thoughts = list(s.reasoning)
        if not s.interleave:
            for piece in pending_thoughts:
                self._emit(s, run, "thinking", piece, data={"event_id": think_id})
            if pending_thoughts:
                self._emit(s, run, "thinking", "", True, data={"event_id": think_id, "duration_ms": 5})
            pending_thoughts = []
        if agent_mode and s.preamble:
            pre_id = f"answer-{uuid.uuid4().hex[:8]}"
            self._emit(s, run, "answer", s.preamble, data={"event_id": pre_id})
        if agent_mode and (s.tools or s.approval or s.oauth):
            if await self._tool_step(s, run):
                return
        if s.references:
            self._emit(s, run, "references", knowledge_references=s.references, data={"references": s.references})
        answer_id = f"answer-{uuid.uuid4().hex[:8]}"
        for i, tok in enumerate(s.tokens):
            if pending_thoughts:
                self._emit(s, run, "thinking", pending_thoughts.pop(0), data={"event_id": think_id})
            self._emit(s, run, "answer", tok, data={"event_id": answer_id})
            run.answer += tok
            if i == 0 and await self._after_first(s, run):
                return
            if i < len(s.tokens) - 1 and await self._wait(run, s.token_delay):
                return
        for piece in pending_thoughts:
            self._emit(s, run, "thinking", piece, data={"event_id": think_id})
        usage = ({"usage": {"prompt_tokens": 120, "completion_tokens": max(1, len(run.answer) // 2),
                            "total_tokens": 120 + max(1, len(run.answer) // 2)}} if s.include_usage else {})
        self._emit(s, run, "answer", "", True, data={"event_id": answer_id, "duration_ms": 12}, **usage)
        complete: dict[str, Any] = {"total_steps": 2 if agent_mode else 1, "total_duration_ms": 40}
        if agent_mode and s.artifacts:
            # ArtifactCollector drains the sandbox output dir before complete is appended; the message
            # holding them is stored only once the agent returned (qa.go deferred completeAssistantMessage)
            run.artifacts = [_collected(a) for a in s.artifacts]
            run.artifacts_stored_at = time.monotonic() + s.artifact_store_delay
            complete["artifacts"] = _artifact_views(run.artifacts)
        self._emit(s, run, "complete", "", True, data=complete, **usage)
        if not run.session.title:
            # the title is generated apart and appended whenever it is ready (GenerateTitleAsync)
            if not await self._wait(run, s.title_delay):
                run.session.title = run.answer[:20] or "New chat"
                self._emit(s, run, "session_title", run.session.title, True,
                           data={"session_id": sid, "title": run.session.title})

    async def _tool_step(self, s: SimpleNamespace, run: _Run) -> bool:
        """One knowledge_search call; True when the generation ends here (it waits for a person)."""
        call_id = str(uuid.uuid4())
        args = {"query": "comet tail", "knowledge_base_ids": ["kb-1"]}
        # two tool_call events per call, as the real server sends them (Tencent/WeKnora @412dcc41,
        # internal/agent/think.go: a "<id>-tool-call-pending" event without arguments while the model
        # still streams the call; internal/agent/act.go: "<id>-tool-hint" with them when it runs;
        # agent_stream_handler.go handleToolCall turns each into a tool_call with data.arguments)
        self._emit(s, run, "tool_call", "Calling tool: knowledge_search",
                   data={"tool_name": "knowledge_search", "arguments": None, "tool_call_id": call_id})
        self._emit(s, run, "tool_call", "Calling tool: knowledge_search",
                   data={"tool_name": "knowledge_search", "arguments": args, "tool_call_id": call_id})
        if s.approval or s.oauth:
            kind = "tool_approval_required" if s.approval else "mcp_oauth_required"
            text = "MCP tool requires human approval" if s.approval else "MCP service requires OAuth authorization"
            self._emit(s, run, kind, text, True, data={
                "pending_id": "pend-1", "session_id": run.session.id, "assistant_message_id": run.message_id,
                "service_id": "mcp-1", "service_name": "Files", "mcp_tool_name": "delete_file",
                "timeout_seconds": 600, "tool_call_id": call_id})
            await self._wait(run, s.stall_seconds)
            return True
        if s.tool_seconds > 0 and await self._wait(run, s.tool_seconds):  # the tool runs: nothing is sent
            return True
        if s.tool_fails:
            self._emit(s, run, "error", "knowledge base kb-1 is not available", data={
                "tool_name": "knowledge_search", "success": False, "error": "knowledge base kb-1 is not available",
                "duration_ms": 8, "tool_call_id": call_id})
        else:
            self._emit(s, run, "tool_result", "Found 2 relevant chunks", data={
                "tool_name": "knowledge_search", "success": True, "error": "", "duration_ms": 8,
                "tool_call_id": call_id, "display_type": "search_results"})
        return False

    async def _after_first(self, s: SimpleNamespace, run: _Run) -> bool:
        """A fault after the first token; True when the generation ends there."""
        if s.fault == "error_event":
            self._emit(s, run, "error", "failed to call model: connection reset by peer", True,
                       data={"stage": "knowledge_qa_execution", "error": "failed to call model"})
            return True
        if s.fault == "stall":
            await self._wait(run, s.stall_seconds)
            return True
        if s.fault == "stall_pings":
            deadline = time.monotonic() + s.stall_seconds
            while time.monotonic() < deadline:
                if await self._wait(run, min(s.stall_ping_every, max(deadline - time.monotonic(), 0))):
                    return True
                self._emit(s, run, "thinking", "", data={"event_id": "thinking-wait"})
            return True
        return False


# Go's built-in extension table (mime.TypeByExtension); a container without /etc/mime.types knows no more
_GO_MIME = {".avif": "image/avif", ".css": "text/css; charset=utf-8", ".gif": "image/gif",
            ".htm": "text/html; charset=utf-8", ".html": "text/html; charset=utf-8", ".jpeg": "image/jpeg",
            ".jpg": "image/jpeg", ".js": "text/javascript; charset=utf-8", ".json": "application/json",
            ".mjs": "text/javascript; charset=utf-8", ".pdf": "application/pdf", ".png": "image/png",
            ".svg": "image/svg+xml", ".wasm": "application/wasm", ".webp": "image/webp",
            ".xml": "text/xml; charset=utf-8"}


def _go_mime(name: str) -> str:
    """artifact_download.go mimeTypeFor."""
    ext = posixpath.splitext(name)[1].lower()
    return _GO_MIME.get(ext, "application/octet-stream")


def _attachment_header(name: str) -> str:
    """artifact_download.go buildAttachmentHeader: an ASCII fallback and the RFC 5987 form."""
    ascii_name = "".join("_" if c in '"\\' else c for c in name if 0x20 <= ord(c) <= 0x7E) or "download"
    encoded = quote(name.encode(), safe="-._~")
    return f'attachment; filename="{ascii_name}"; filename*=UTF-8\'\'{encoded}'


def _collected(spec: dict[str, Any]) -> dict[str, Any]:
    """One MessageArtifact as ArtifactCollector records it (the bytes ride along for the download)."""
    name = str(spec["file_name"])
    data = bytes(spec.get("data", b""))
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S+08:00")
    return {"url": f"local://artifacts/{uuid.uuid4().hex}", "file_name": name,
            "file_type": posixpath.splitext(name)[1], "file_size": spec.get("file_size", len(data)),
            "source_path": posixpath.join("/workspace/output", name), "mod_time": stamp, "created_at": stamp,
            "data": data}


def _artifact_views(arts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """agent_stream_handler.go publicArtifactViews: the storage URL and the bytes stay on the server."""
    keys = ("file_name", "file_type", "file_size", "source_path", "mod_time", "created_at")
    return [{"index": i, **{k: a[k] for k in keys}} for i, a in enumerate(arts)]


def _go_json(obj: Any) -> str:
    """JSON as Go's encoding/json writes it: compact, UTF-8, with <, > and & escaped."""
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S+08:00")
