"""Faithful fake of Tencent WeKnora's session chat API (docs/platforms.md section 7, read against
Tencent/WeKnora ``internal/handler/session``).

- ``POST /api/v1/sessions`` needs a JSON body (an empty one is 400) and answers **201**
  ``{"success": true, "data": {"id", "title", "tenant_id", "user_id", …}}``.
- ``POST /api/v1/knowledge-chat/{sid}`` and ``/api/v1/agent-chat/{sid}`` answer a gin SSE stream:
  ``event:message`` / ``data:{StreamResponse}`` with no space after the colons, a blank line after
  each. Every event carries the request id as ``id``. Both start with ``agent_query`` (``session_id``
  and ``assistant_message_id`` at top level and in ``data``); then ``thinking``* (``interleave``
  mixes thinking events between answer tokens), agent ``tool_call``/``tool_result`` (a failed tool
  is an ``error`` with ``data.tool_call_id``), ``references`` before the answer, ``answer``*, an
  empty ``answer`` with ``done: true``, ``complete``, and — for a session without a title — a
  ``session_title`` up to ``title_delay`` seconds later. Real WeKnora sends no ``usage``:
  ``include_usage`` puts one on the final answer and ``complete`` (off by default).
- Unknown session → 404 ``{"success": false, "error": {"code": 1003, "message": "Session not found"}}``;
  a bad key → 401 ``{"error": "Unauthorized: invalid API key"}``; an in-stream failure is
  ``response_type: "error"`` with ``data.stage``; ``POST /api/v1/sessions/{sid}/stop``
  ``{"message_id"}`` ends the running answer with a ``stop`` event.
- ``approval`` / ``oauth`` make the agent wait for a person (``tool_approval_required`` /
  ``mcp_oauth_required``) until stopped.
- ``direct_principal``: sessions belong to the ``X-External-User-ID`` that created them (WeKnora's
  "direct" API-principal mode); another user gets "Session not found".
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

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
    """One chat call in progress."""

    session: Session
    message_id: str
    stop: asyncio.Event = field(default_factory=asyncio.Event)


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
        self.preamble = ""  # agent answer text streamed before the tool step
        self.approval = False
        self.oauth = False
        self.include_usage = False
        self.title_delay = 0.05
        self.image_upload_enabled = True
        self.direct_principal = False
        self.split_writes = False
        # -- faults --
        self.stall_seconds = 3600.0
        self.stall_ping_every = 0.25
        self.oversized_bytes = 9 * MiB
        # -- recorded state --
        self.sessions: dict[str, Session] = {}
        self.runs: dict[str, _Run] = {}  # assistant message id -> the run generating it
        self.stopped: list[tuple[str, str]] = []  # (session id, message id) of stop calls
        self.preset_session: str | None = None  # a session id that always exists (benchmarks)

        self.add_route("POST", f"{API}/sessions", self._create_session)
        self.add_route("GET", f"{API}/sessions/{{sid}}", self._get_session)
        self.add_route("POST", f"{API}/sessions/{{sid}}/stop", self._stop)
        self.add_route("POST", f"{API}/knowledge-chat/{{sid}}", self._knowledge_chat)
        self.add_route("POST", f"{API}/agent-chat/{{sid}}", self._agent_chat)

    @property
    def base_url(self) -> str:  # type: ignore[override]
        return self.root_url + API

    def forget_conversations(self) -> None:
        """Delete every session (stored ids now get 404 "Session not found")."""
        self.sessions.clear()

    def chat_requests(self) -> list[Request]:
        return [r for r in self.requests if r.method == "POST" and "-chat/" in r.path]

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

    async def _stop(self, req: Request, resp: Response) -> None:
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
        if run.stop.is_set():
            await resp.json(200, {"success": True, "message": "Message already completed"})
            return
        run.stop.set()
        await resp.json(200, {"success": True, "message": "Generation stopped"})

    # -- chat ------------------------------------------------------------------------------------

    async def _knowledge_chat(self, req: Request, resp: Response) -> None:
        await self._chat(req, resp, agent=False)

    async def _agent_chat(self, req: Request, resp: Response) -> None:
        await self._chat(req, resp, agent=True)

    def _snapshot(self) -> SimpleNamespace:
        return SimpleNamespace(
            tokens=list(self.answer_tokens), token_delay=self.token_delay, reasoning=list(self.reasoning),
            interleave=self.interleave, references=[dict(r) for r in self.references], tools=self.tools,
            tool_fails=self.tool_fails, preamble=self.preamble, approval=self.approval, oauth=self.oauth,
            include_usage=self.include_usage, title_delay=self.title_delay, split_writes=self.split_writes,
            fault=self.fault, stall_seconds=self.stall_seconds, stall_ping_every=self.stall_ping_every,
            oversized_bytes=self.oversized_bytes, request_id=str(uuid.uuid4()),
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
        agent_mode = agent and (body.get("agent_id") == "builtin-smart-reasoning" or body.get("agent_enabled") is True)
        run = _Run(session, str(uuid.uuid4()))
        self.runs[run.message_id] = run
        session.messages.append({"role": "user", "content": body["query"]})
        if s.fault == "empty":  # headers, then the body ends without one event
            await resp.start_stream(200, "text/event-stream", {"X-Accel-Buffering": "no", "Connection": "close"})
            resp.close_connection = True
            return
        await resp.start_stream(200, "text/event-stream", {"X-Accel-Buffering": "no", "Connection": "keep-alive"})
        answer = ""
        try:
            answer = await self._stream(s, resp, run, agent_mode)
        except _Abort:
            await resp.abort()
        finally:
            run.stop.set()
            if answer:
                session.messages.append({"role": "assistant", "content": answer})

    async def _send(self, s: SimpleNamespace, resp: Response, rtype: str, content: str = "", done: bool = False,
                    **extra: Any) -> None:
        if resp.client_disconnected:
            self.client_disconnects += 1
            raise _Abort
        obj: dict[str, Any] = {"id": s.request_id, "response_type": rtype, "content": content, "done": done}
        obj.update(extra)
        payload = ("event:message\ndata:" + _go_json(obj) + "\n\n").encode()
        if s.split_writes:
            await resp.write_split(payload)
        else:
            await resp.write(payload)

    async def _wait(self, run: _Run, resp: Response, seconds: float) -> bool:
        """Sleep; True when the run was stopped meanwhile. Raises _Abort if the client left."""
        deadline = time.monotonic() + seconds
        while not run.stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if resp.client_disconnected:
                self.client_disconnects += 1
                raise _Abort
            try:
                await asyncio.wait_for(run.stop.wait(), min(left, 0.05))
            except TimeoutError:
                pass
        return True

    async def _stopped(self, s: SimpleNamespace, resp: Response) -> None:
        await self._send(s, resp, "stop", "Generation stopped by user", True)

    async def _stream(self, s: SimpleNamespace, resp: Response, run: _Run, agent_mode: bool) -> str:
        sid = run.session.id
        await self._send(s, resp, "agent_query", "", True, session_id=sid, assistant_message_id=run.message_id,
                         data={"session_id": sid, "assistant_message_id": run.message_id})
        if s.fault == "invalid_json":
            await resp.write(b"event:message\ndata:{not json\n\n")
            return ""
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
        think_id = f"thinking-{uuid.uuid4().hex[:8]}"
        pending_thoughts = list(s.reasoning)
        if not s.interleave:
            for piece in pending_thoughts:
                await self._send(s, resp, "thinking", piece, data={"event_id": think_id})
            if pending_thoughts:
                await self._send(s, resp, "thinking", "", True, data={"event_id": think_id, "duration_ms": 5})
            pending_thoughts = []
        if agent_mode and s.preamble:
            pre_id = f"answer-{uuid.uuid4().hex[:8]}"
            await self._send(s, resp, "answer", s.preamble, data={"event_id": pre_id})
        if agent_mode and (s.tools or s.approval or s.oauth):
            outcome = await self._tool_step(s, resp, run)
            if outcome:
                return ""
        if s.references:
            await self._send(s, resp, "references", knowledge_references=s.references,
                             data={"references": s.references})
        answer_id = f"answer-{uuid.uuid4().hex[:8]}"
        answer = ""
        for i, tok in enumerate(s.tokens):
            if pending_thoughts:
                await self._send(s, resp, "thinking", pending_thoughts.pop(0), data={"event_id": think_id})
            await self._send(s, resp, "answer", tok, data={"event_id": answer_id})
            answer += tok
            if i == 0:
                outcome = await self._after_first(s, resp, run)
                if outcome:
                    return answer
            if i < len(s.tokens) - 1 and await self._wait(run, resp, s.token_delay):
                await self._stopped(s, resp)
                return answer
        for piece in pending_thoughts:
            await self._send(s, resp, "thinking", piece, data={"event_id": think_id})
        usage = ({"usage": {"prompt_tokens": 120, "completion_tokens": max(1, len(answer) // 2),
                            "total_tokens": 120 + max(1, len(answer) // 2)}} if s.include_usage else {})
        await self._send(s, resp, "answer", "", True, data={"event_id": answer_id, "duration_ms": 12}, **usage)
        await self._send(s, resp, "complete", "", True, data={"total_steps": 2 if agent_mode else 1,
                                                              "total_duration_ms": 40}, **usage)
        if not run.session.title:
            # WeKnora waits up to 3 s for the generated title of an untitled session
            if not await self._wait(run, resp, s.title_delay):
                run.session.title = answer[:20] or "New chat"
                await self._send(s, resp, "session_title", run.session.title, True,
                                 data={"session_id": sid, "title": run.session.title})
        return answer

    async def _tool_step(self, s: SimpleNamespace, resp: Response, run: _Run) -> bool:
        call_id = str(uuid.uuid4())
        args = {"query": "comet tail", "knowledge_base_ids": ["kb-1"]}
        # two tool_call events per call, as the real server sends them (Tencent/WeKnora @412dcc41,
        # internal/agent/think.go: a "<id>-tool-call-pending" event without arguments while the model
        # still streams the call; internal/agent/act.go: "<id>-tool-hint" with them when it runs;
        # agent_stream_handler.go handleToolCall turns each into a tool_call with data.arguments)
        await self._send(s, resp, "tool_call", "Calling tool: knowledge_search",
                         data={"tool_name": "knowledge_search", "arguments": None, "tool_call_id": call_id})
        await self._send(s, resp, "tool_call", "Calling tool: knowledge_search",
                         data={"tool_name": "knowledge_search", "arguments": args, "tool_call_id": call_id})
        if s.approval or s.oauth:
            kind = "tool_approval_required" if s.approval else "mcp_oauth_required"
            text = "MCP tool requires human approval" if s.approval else "MCP service requires OAuth authorization"
            await self._send(s, resp, kind, text, True, data={
                "pending_id": "pend-1", "session_id": run.session.id, "assistant_message_id": run.message_id,
                "service_id": "mcp-1", "service_name": "Files", "mcp_tool_name": "delete_file",
                "timeout_seconds": 600, "tool_call_id": call_id})
            await self._wait(run, resp, s.stall_seconds)
            await self._stopped(s, resp)
            return True
        if s.tool_fails:
            await self._send(s, resp, "error", "knowledge base kb-1 is not available", data={
                "tool_name": "knowledge_search", "success": False, "error": "knowledge base kb-1 is not available",
                "duration_ms": 8, "tool_call_id": call_id})
        else:
            await self._send(s, resp, "tool_result", "Found 2 relevant chunks", data={
                "tool_name": "knowledge_search", "success": True, "error": "", "duration_ms": 8,
                "tool_call_id": call_id, "display_type": "search_results"})
        return False

    async def _after_first(self, s: SimpleNamespace, resp: Response, run: _Run) -> bool:
        if s.fault == "truncated":
            raise _Abort
        if s.fault == "error_event":
            await self._send(s, resp, "error", "failed to call model: connection reset by peer", True,
                             data={"stage": "knowledge_qa_execution", "error": "failed to call model"})
            return True
        if s.fault == "stall":
            if await self._wait(run, resp, s.stall_seconds):
                await self._stopped(s, resp)
            return True
        if s.fault == "stall_pings":
            deadline = time.monotonic() + s.stall_seconds
            while time.monotonic() < deadline:
                if await self._wait(run, resp, min(s.stall_ping_every, max(deadline - time.monotonic(), 0))):
                    await self._stopped(s, resp)
                    return True
                await self._send(s, resp, "thinking", "", data={"event_id": "thinking-wait"})
            return True
        return False


def _go_json(obj: Any) -> str:
    """JSON as Go's encoding/json writes it: compact, UTF-8, with <, > and & escaped."""
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S+08:00")
