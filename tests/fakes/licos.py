"""Faithful fake of a LICOS agent service (licos-agent-runtime 0.6.33; real-http-peers.md §3 and the
real captures in fixtures/real-peers/licos/ and licos-managed/).

``POST /stream_run`` answers ``text/event-stream; charset=utf-8`` with **LF** line ends; every event is
``event: message\\ndata: <json.dumps default separators>\\n\\n`` and one HTTP chunk.

- legacy (``managed=False``): ``message_start {local_msg_id, msg_id}`` (= the run id, taken from
  ``X-Run-Id`` like the runtime does), ``thinking_delta``/``thinking_done`` (``reasoning``),
  ``tool_request``/``tool_response`` (``tool_call``), one ``answer`` per model turn holding the turn's
  *whole* text (``turns``; the tokens only pace it), ``message_end {code "0", token_cost {…,
  complete}}``. A model failure: ``error {code 105000}`` + ``message_end`` with ``complete: false``.
  An attachment that cannot be used: ``error 105002``. A Bearer token on a service without a
  platform (``api_keys`` empty): one untyped ``{"error_code": "RUNTIME_ERROR", …}`` event.
- managed (``managed=True``, header ``x-licos-stream-resume: events-v1``): ``message_start`` without id,
  then ``id: N`` events: ``run_started``, ``graph_event`` (human message, then one ``AIMessageChunk``
  per token, a usage chunk, a ``chunk_position: last`` chunk, ``updates``), ``answer``, ``run_status``,
  then ``message_end`` without id and without ``complete``. ``GET /agent/v1/runs/{id}/events?after=N``
  replays what came after N (``format=chat``: the chat events, then ``error``/``message_end``; the
  default raw format wraps ``answer`` as ``platform_event``). ``drop_after`` cuts the POST stream
  after that event once; no Bearer → bare 500 ``Internal Server Error``.

Errors before the stream: invalid JSON → 400 ``{"detail": "Invalid JSON format: Traceback …"}``; a
user in ``broke_users`` → 402 ``{"code": 20802, "errorCode": "INSUFFICIENT_CREDIT_BALANCE", …}``; a
wrong Bearer (a service with a platform) → 401 ``{"detail": …}``. ``approval`` makes the agent wait
for approval of its tool call (legacy: ``approval_required``; managed: ``run_status waiting_approval``).
Keep-alives (legacy only): while the agent sends nothing for ``ping_interval`` seconds the stream
carries a ``: ping`` comment (licos-agent-runtime 0.6.33 ``service.py``
``_stream_sse_agent_platform``: ``yield ": ping\\n\\n"`` whenever its event queue stays empty for
``RunOpt.workflow_ping_interval_seconds``, 30 s by default, ``stream_runner.py``); ``ping_interval``
0 is a service whose event loop is stuck (nothing at all). Managed streams have none: they poll the
run's stored events (``managed_agents.py`` ``events``) and send only those. ``tool_seconds``: how long
the tool runs between ``tool_request`` and ``tool_response``.

Managed routes besides the stream: ``GET /agent/v1/runs/{id}`` (the run record: ``run_id``,
``session_id``, ``status`` running/completed/failed/…, ``sequence``; 404 ``{"detail": "'AGENT run not
found for this user'"}`` for an unknown run or another user's; ``hang_status`` makes it answer
nothing, as a stuck service), ``DELETE /agent/v1/sessions/{id}`` (``agent_sessions.py``
``AgentSessions.delete``: 200 ``{"deleted": true, "session_id"}``; 404 ``{"detail": "'Session not
found for this user'"}`` for an unknown session or another user's; 409 ``{"detail": "Cancel the
unfinished run before deleting the session"}`` while its run is unfinished). A legacy project has
no such routes' data: ``components()`` raises, answered 400 ``{"detail": "This project has not
enabled agent_runtime"}``. Sessions belong to the token that ran them; ``deleted_sessions`` records
the deletions.

Memory: ``memory="none"`` is the minimal project (``session_id`` alone gives the model no history);
``"session"`` keeps the turns per ``session_id``; explicit ``messages`` are always used.
``echo_memory`` answers with the earlier user messages the model saw.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from .http_server import PlatformFake, Request, Response, fault_names

__all__ = ["FAULTS", "FakeLicos", "LicosRun"]

MiB = 1024 * 1024
MAX_ATTACHMENT = 20 * MiB
SSE_TYPE = "text/event-stream; charset=utf-8"
FAULTS: tuple[str, ...] = fault_names()
TRACEBACK = ('Invalid JSON format: Traceback (most recent call last):\n  File "/srv/licos/lib/python3.11/site-packages/'
             'licos_agent_runtime/app.py", line 393, in http_stream_run\n    payload = json.loads(body_text) if '
             'body_text else {}\njson.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)\n')
_FAULT_BODIES: dict[int, tuple[str, Any]] = {
    400: ("application/json", {"detail": TRACEBACK}),
    401: ("application/json", {"detail": "Invalid or expired user token"}),
    403: ("application/json", {"detail": "Only the project owner may run this agent"}),
    404: ("application/json", {"detail": "Not Found"}),
    413: ("application/json", {"detail": "Request Entity Too Large"}),
    429: ("application/json", {"detail": "Too Many Requests"}),
    500: ("application/json", {"detail": {"error_code": "RUNTIME_ERROR", "error_message": "boom in graph",
                                          "stack_trace": "Traceback (most recent call last): ..."}}),
    502: ("application/json", {"detail": "Bad Gateway"}),
    503: ("application/json", {"detail": "Service Unavailable"}),
}


@dataclass
class LicosRun:
    """One ``/stream_run`` request as received."""

    run_id: str
    session_id: str | None
    text: str
    user: str
    org: str | None
    token: str | None
    messages: list[dict[str, Any]] | None
    uploads: list[dict[str, Any]] = field(default_factory=list)
    body: dict[str, Any] = field(default_factory=dict)


class _Aborted(Exception):
    """The connection was closed on purpose (a fault) or by the client."""


def _event(data: dict[str, Any], seq: int | None = None) -> bytes:
    head = f"id: {seq}\n" if seq is not None else ""
    return f"{head}event: message\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


def _legacy(kind: str, **content: Any) -> dict[str, Any]:
    return {"type": kind, "content": {kind: content}}


class FakeLicos(PlatformFake):
    """``with FakeLicos() as srv: {"base-url": srv.base_url}``; ``FakeLicos("tok", managed=True)`` for
    a managed project behind a LICOS platform that checks user tokens."""

    FAULTS = FAULTS
    proxy_name = "nginx"
    server_name = "uvicorn"

    def __init__(self, api_key: str | None = None, *, managed: bool = False, port: int = 0) -> None:
        super().__init__(port=port)
        self.api_keys: set[str] = {api_key} if api_key else set()
        self.managed = managed
        # -- scenario knobs (read once at the start of each request) --
        self.answer_tokens: list[str] = ["Hello", " from", " the", " fake", " model."]
        self.turns: list[str] | None = None  # several model turns, each one whole ``answer``
        self.token_delay = 0.0
        self.include_usage = True
        self.tool_call = False
        self.reasoning = ""
        self.approval = False
        self.fail_model: str | None = None  # the model call fails with this message
        self.drop_after: int | None = None  # managed: cut the POST stream after this event id (once)
        self.memory = "none"  # none | session
        self.echo_memory = False
        self.broke_users: set[str] = set()
        self.fault_queue: list[str | None] = []
        self.stall_seconds = 30.0
        self.oversized_bytes = 9 * MiB
        self.ping_interval = 30.0  # legacy keep-alive comment after this long without events (0: none)
        self.tool_seconds = 0.0  # how long the tool runs, silently
        self.hang_status = False  # GET /agent/v1/runs/{id} answers nothing (a stuck service)
        # -- recorded state --
        self.runs: list[LicosRun] = []
        self.cancelled: list[str] = []
        self.sessions: dict[str, list[tuple[str, str]]] = {}
        self.uploads: dict[str, bytes] = {}
        self.events: dict[str, list[tuple[int, dict[str, Any]]]] = {}  # run id -> numbered events
        self.finals: dict[str, dict[str, Any]] = {}  # run id -> {"status", "error", "usage"}
        self.resumes: list[tuple[str, int, str]] = []  # (run id, after, format)
        self.session_owners: dict[str, str | None] = {}  # managed session id -> the token that ran it
        self.run_sessions: dict[str, str | None] = {}  # managed run id -> its session id
        self.deleted_sessions: list[str] = []

        self.add_route("POST", "/stream_run", self._stream_run)
        self.add_route("POST", "/cancel/{run_id}", self._cancel)
        self.add_route("GET", "/agent/v1/runs/{run_id}/events", self._replay)
        self.add_route("GET", "/agent/v1/runs/{run_id}", self._run_record)
        self.add_route("DELETE", "/agent/v1/sessions/{session_id}", self._delete_session)
        self.add_route("GET", "/health", self._health)

    # -- public helpers ----------------------------------------------------------------------

    def forget_conversations(self) -> None:
        """Drop every session's memory; LICOS reports nothing, the next turn just starts empty."""
        self.sessions.clear()

    # -- routes ------------------------------------------------------------------------------

    async def not_found(self, req: Request, resp: Response) -> None:
        await resp.json(404, {"detail": "Not Found"}, {"vary": "Origin"})

    async def method_not_allowed(self, req: Request, resp: Response, allowed: list[str]) -> None:
        await resp.json(405, {"detail": "Method Not Allowed"}, {"vary": "Origin"})

    async def error_body(self, resp: Response, status: int, headers: Mapping[str, str] | None) -> None:
        ctype, doc = _FAULT_BODIES[status]
        await resp.send(status, json.dumps(doc, separators=(",", ":")).encode(), ctype, {"vary": "Origin"})

    async def _health(self, req: Request, resp: Response) -> None:
        await resp.json(200, {"status": "ok", "message": "Service is running"})

    def _token(self, req: Request) -> str | None:
        auth = req.headers.get("authorization", "")
        return auth[7:].strip() if auth.lower().startswith("bearer ") else None

    async def _auth(self, req: Request, resp: Response) -> bool:
        """A service with a platform (``api_keys``) checks a Bearer token when one is sent; a managed
        project needs one (without it the runtime fails with a bare 500)."""
        token = self._token(req)
        if self.api_keys and token is not None and token not in self.api_keys:
            await resp.json(401, {"detail": "Invalid or expired user token"}, {"vary": "Origin"})
            return False
        if self.managed and token is None:
            await resp.send(500, b"Internal Server Error", "text/plain; charset=utf-8")
            return False
        return True

    def _snapshot(self) -> SimpleNamespace:
        fault = self.fault_queue.pop(0) if self.fault_queue else self.fault
        if fault is not None and fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}")
        turns = list(self.turns) if self.turns else ["".join(self.answer_tokens)]
        return SimpleNamespace(fault=fault, tokens=list(self.answer_tokens), turns=turns, delay=self.token_delay,
                               usage=self.include_usage, tool=self.tool_call, reasoning=self.reasoning,
                               approval=self.approval, fail=self.fail_model, drop=self.drop_after,
                               memory=self.memory, echo=self.echo_memory, tool_seconds=self.tool_seconds,
                               pings=0.0 if self.managed else self.ping_interval)

    async def _stream_run(self, req: Request, resp: Response) -> None:
        s = self._snapshot()
        if await self.head_fault(resp, s.fault):
            return
        try:
            body = json.loads(req.body.decode("utf-8")) if req.body else {}
        except (ValueError, UnicodeDecodeError):
            await resp.json(400, {"detail": TRACEBACK}, {"vary": "Origin"})
            return
        if not isinstance(body, dict):
            body = {"input": body}
        user = req.headers.get("x-licos-current-user-id", "")
        if user in self.broke_users:
            await resp.json(402, {"code": 20802, "message": "insufficient credit", "errorCode":
                                  "INSUFFICIENT_CREDIT_BALANCE", "data": {"allowed": False, "reasonMessage":
                                  "insufficient credit"}, "success": False})
            return
        if not await self._auth(req, resp):
            return
        run_id = req.headers.get("x-run-id") or uuid.uuid4().hex
        text, uploads = self._prompt(body)
        run = LicosRun(run_id=run_id, session_id=body.get("session_id"), text=text, user=user,
                       org=req.headers.get("x-licos-current-org-id"), token=self._token(req),
                       messages=body.get("messages") if isinstance(body.get("messages"), list) else None,
                       uploads=uploads, body=body)
        self.runs.append(run)
        headers = {"vary": "Origin"}
        if self.managed:
            headers["x-licos-stream-resume"] = "events-v1"
            self.run_sessions[run.run_id] = run.session_id
            if run.session_id:
                self.session_owners.setdefault(run.session_id, run.token)
        await resp.start_stream(200, SSE_TYPE, headers)
        try:
            if self.managed:
                await self._managed(run, s, resp)
            else:
                await self._legacy(run, s, resp)
        except _Aborted:
            return
        await resp.end()

    def _prompt(self, body: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
        content = body.get("content")
        blocks = content.get("query", {}).get("prompt") if isinstance(content, dict) and isinstance(
            content.get("query"), dict) else None
        if not isinstance(blocks, list):
            return str(body.get("input") or ""), []
        texts, uploads = [], []
        for b in blocks:
            if not isinstance(b, dict):
                continue
            inner = b.get("content") if isinstance(b.get("content"), dict) else {}
            if b.get("type") == "text":
                texts.append(str(inner.get("text") or ""))
            elif b.get("type") == "upload_file" and isinstance(inner.get("upload_file"), dict):
                uploads.append(inner["upload_file"])
        return "\n".join(t for t in texts if t), uploads

    def _attachment_error(self, run: LicosRun) -> str | None:
        """The runtime saves uploads to the session before the model runs (needs a checked token)."""
        for up in run.uploads:
            if not self.api_keys or run.token is None:
                return "Session file access requires an authenticated Bearer token"
            name, url = str(up.get("file_name") or ""), str(up.get("url") or "")
            if not url.startswith("data:"):
                return f"Attachment {name} could not be downloaded: {url[:60]}"
            try:
                data = base64.b64decode(url.split(",", 1)[1], validate=True)
            except (IndexError, binascii.Error):
                return f"Attachment {name} is not valid base64"
            if len(data) > MAX_ATTACHMENT:
                return f"Attachment {name} exceeds {MAX_ATTACHMENT} bytes"
            self.uploads[name] = data
        return None

    def _answers(self, run: LicosRun, s: SimpleNamespace) -> list[str]:
        if not s.echo:
            return s.turns
        if run.messages:
            earlier = [str(m.get("content")) for m in run.messages[:-1] if isinstance(m, dict)
                       and m.get("role") == "user"]
        elif s.memory == "session" and run.session_id:
            earlier = [t for role, t in self.sessions.get(run.session_id, []) if role == "user"]
        else:
            earlier = []
        return ["You said before: " + ("; ".join(earlier) if earlier else "nothing") + "."]

    def _usage(self, s: SimpleNamespace, complete: bool | None) -> dict[str, Any]:
        out = {"input_tokens": 7, "output_tokens": max(1, len(s.tokens)), "total_tokens": 7 + max(1, len(s.tokens))}
        if not s.usage:
            out = {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}
        if complete is not None:
            out["complete"] = complete and s.usage
        return out

    async def _pause(self, resp: Response, seconds: float, pings: float = 0.0) -> None:
        """Send nothing for ``seconds`` (legacy: but a ``: ping`` comment every ``pings`` seconds)."""
        while seconds > 0:
            quiet = min(seconds, pings) if pings > 0 else seconds
            if not await resp.stall(quiet):
                raise _Aborted
            seconds -= quiet
            if pings > 0 and quiet >= pings:
                await resp.write(b": ping\n\n")

    async def _stream_fault(self, resp: Response, s: SimpleNamespace) -> bool:
        """Faults that replace the events; True when the stream is over."""
        if s.fault == "empty":
            return True
        if s.fault == "invalid_json":
            await resp.write(b'event: message\ndata: {"type": "answer", "content": {not json\n\n')
            return True
        if s.fault == "non_utf8":
            await resp.write(b'event: message\ndata: {"type": "answer", "content": {"answer": "\xff\xfe"}}\n\n')
            return True
        if s.fault == "oversized":
            await resp.write(b'event: message\ndata: {"type": "answer", "content": {"answer": "')
            left = self.oversized_bytes
            while left > 0:
                await resp.write(b"x" * min(left, 64 * 1024))
                left -= 64 * 1024
            await resp.write(b'"}}\n\n')
            return True
        return False

    async def _after_first(self, resp: Response, s: SimpleNamespace) -> str | None:
        """Faults that strike after the first piece of the answer: "failed" for an error event."""
        if s.fault == "truncated":
            await resp.abort()
            raise _Aborted
        if s.fault == "stall":
            await self._pause(resp, self.stall_seconds, s.pings)
        return "failed" if s.fault == "error_event" else None

    # -- legacy ------------------------------------------------------------------------------

    async def _legacy(self, run: LicosRun, s: SimpleNamespace, resp: Response) -> None:
        start = time.monotonic()
        if run.token is not None and not self.api_keys:
            await resp.write(_event({"error_code": "RUNTIME_ERROR", "error_message":
                                     "LICOS_PLATFORM_API_BASE_URL is not configured", "category": "runtime"}))
            return
        if await self._stream_fault(resp, s):
            return
        await resp.write(_event(_legacy("message_start", local_msg_id=run.run_id, msg_id=run.run_id)))

        async def end(code: str, message: str, complete: bool) -> None:
            cost = self._usage(s, True) if code == "0" else {"input_tokens": 0, "output_tokens": 0,
                                                               "total_tokens": 0, "complete": complete}
            await resp.write(_event(_legacy("message_end", code=code, message=message, token_cost=cost,
                                            time_cost_ms=int((time.monotonic() - start) * 1000))))

        if err := self._attachment_error(run):
            await resp.write(_event(_legacy("error", local_msg_id=run.run_id, code=105002, error_msg=err)))
            await end("105002", err, True)
            return
        if s.reasoning:
            await resp.write(_event(_legacy("thinking_delta", text=s.reasoning)))
            await resp.write(_event({"type": "thinking_done", "content": {}}))
        if s.tool or s.approval:
            call = {"tool_call_id": "call_fake_1", "tool_name": "get_weather"}
            if s.approval:
                event = {"type": "approval_required", "run_id": run.run_id, "session_id": run.session_id, **call,
                         "input": {"city": "Paris"}, "expires_at": "2026-12-01T13:00:00+00:00"}
                await resp.write(_event({**event, "content": event}))
                await self._pause(resp, self.stall_seconds, s.pings)
                return
            await resp.write(_event(_legacy("tool_request", **call, parameters={"city": "Paris"}, is_parallel=False,
                                            index=0, stream_parameters="")))
            await self._pause(resp, s.tool_seconds, s.pings)
            await resp.write(_event(_legacy("tool_response", tool_call_id="call_fake_1", code="0", message="success",
                                            result="sunny in Paris", time_cost_ms=0, tool_name="get_weather")))
        if s.fail:
            await resp.write(_event(_legacy("error", local_msg_id=run.run_id, code=105000, error_msg=s.fail)))
            await end("105000", s.fail, False)
            return
        answers = self._answers(run, s)
        for i, answer in enumerate(answers):
            # the model streams its tokens, but the legacy protocol sends the whole turn when it is done
            await self._pause(resp, s.delay * max(len(s.tokens) - 1, 0) if i == 0 else s.delay, s.pings)
            await resp.write(_event(_legacy("answer", answer=answer)))
            if i == 0 and await self._after_first(resp, s) == "failed":
                msg = "Error code: 500 - fake upstream failure"
                await resp.write(_event(_legacy("error", local_msg_id=run.run_id, code=105000, error_msg=msg)))
                await end("105000", msg, False)
                return
        self._remember(run, answers)
        await end("0", "success", True)

    def _remember(self, run: LicosRun, answers: list[str]) -> None:
        if run.session_id:
            turn = self.sessions.setdefault(run.session_id, [])
            turn += [("user", run.text), ("assistant", answers[-1] if answers else "")]

    # -- managed -----------------------------------------------------------------------------

    async def _managed(self, run: LicosRun, s: SimpleNamespace, resp: Response) -> None:
        if await self._stream_fault(resp, s):
            return
        await resp.write(_event(_legacy("message_start", local_msg_id=run.run_id, msg_id=run.run_id)))
        log: list[tuple[int, dict[str, Any]]] = []
        self.events[run.run_id] = log
        final = {"status": "running", "error": None, "usage": self._usage(s, None)}
        self.finals[run.run_id] = final
        meta = {"user_id": run.user, "run_id": run.run_id, "thread_id": uuid.uuid4().hex, "langgraph_node": "agent"}
        ai_id = f"lc_run--{uuid.uuid4()}"

        def chunk(text: str, **extra: Any) -> dict[str, Any]:
            msg = {"content": text, "additional_kwargs": {}, "response_metadata": {"model_provider": "openai"},
                   "type": "AIMessageChunk", "name": None, "id": ai_id, "tool_calls": [], "invalid_tool_calls": [],
                   "usage_metadata": None, "tool_call_chunks": [], "chunk_position": None, **extra}
            return {"type": "graph_event", "mode": "messages", "namespace": [], "data": [msg, meta]}

        async def emit(data: dict[str, Any], pause: float = 0.0) -> None:
            seq = len(log) + 1
            record = {"sequence": seq, "run_id": run.run_id, **data}
            log.append((seq, record))
            await self._pause(resp, pause)
            await resp.write(_event(_chat(record), seq))
            if s.drop is not None and seq == s.drop:
                self.drop_after = None  # once
                s.drop = None
                self._finish_later(run, s, log, final, chunk)
                await resp.abort()
                raise _Aborted

        await emit({"type": "run_started", "session_id": run.session_id})
        human = {"content": run.text, "type": "human", "id": str(uuid.uuid4())}
        await emit({"type": "graph_event", "mode": "messages", "namespace": [], "data": [human, {**meta,
                    "langgraph_node": "normalize"}]})
        if err := self._attachment_error(run):
            final.update(status="failed", error={"code": "AttachmentInputError", "message": err})
            await emit({"type": "run_status", "status": "failed", "error": final["error"]})
            await self._chat_end(resp, run.run_id)
            return
        if s.reasoning:
            await emit({"type": "platform_event", "data": {"type": "thinking_delta", "content": {"text": s.reasoning}}})
            await emit({"type": "platform_event", "data": {"type": "thinking_done", "content": {}}})
        if s.approval:
            pending = [{"type": "approval", "tool_call_id": "call_fake_1", "tool_name": "get_weather",
                        "input": {"city": "Paris"}}]
            final.update(status="waiting_approval")
            await emit({"type": "run_status", "status": "waiting_approval", "pending": pending, "result": None})
            await self._chat_end(resp, run.run_id)
            return
        if s.tool:
            await emit({"type": "platform_event", "data": _legacy(
                "tool_request", tool_call_id="call_fake_1", tool_name="get_weather", parameters={"city": "Paris"},
                is_parallel=False, index=0, stream_parameters="")})
            await emit({"type": "platform_event", "data": _legacy(
                "tool_response", tool_call_id="call_fake_1", code="0", message="success", result="sunny in Paris",
                time_cost_ms=0, tool_name="get_weather")}, s.tool_seconds)
        if s.fail:
            final.update(status="failed", error={"code": "OpenAIAPIError", "message": s.fail})
            await emit({"type": "run_status", "status": "failed", "error": final["error"]})
            await self._chat_end(resp, run.run_id)
            return
        await emit(chunk(""))
        answer = self._answers(run, s)[-1]
        tokens = s.tokens if not s.echo else [answer]
        for i, tok in enumerate(tokens):
            await emit(chunk(tok), s.delay if i else 0.0)
            if i == 0 and s.fault == "truncated":  # the connection drops; the run goes on server-side
                self._finish_later(run, s, log, final, chunk)
            if i == 0 and await self._after_first(resp, s) == "failed":
                final.update(status="failed", error={"code": "OpenAIAPIError",
                                                     "message": "Error code: 500 - fake upstream failure"})
                await emit({"type": "run_status", "status": "failed", "error": final["error"]})
                await self._chat_end(resp, run.run_id)
                return
        await self._managed_tail(run, s, emit, chunk, final, answer)
        await self._chat_end(resp, run.run_id)

    async def _managed_tail(self, run, s, emit, chunk, final, answer) -> None:
        usage = self._usage(s, None)
        await emit(chunk("", usage_metadata={**usage, "input_token_details": {}, "output_token_details": {}}
                         if s.usage else None))
        await emit(chunk("", chunk_position="last"))
        await emit({"type": "platform_event", "data": _legacy("answer", answer=answer)})
        final.update(status="completed")
        await emit({"type": "run_status", "status": "completed", "pending": [], "result": {"messages": [
            {"content": run.text, "type": "human"}, {"content": answer, "type": "ai"}]}})
        self._remember(run, [answer])

    def _finish_later(self, run, s, log, final, chunk) -> None:
        """After a cut: the run goes on server-side; its remaining events land in the log."""
        async def record(data: dict[str, Any], pause: float = 0.0) -> None:
            seq = len(log) + 1
            log.append((seq, {"sequence": seq, "run_id": run.run_id, **data}))

        async def rest() -> None:
            done = sum(1 for _, e in log if e.get("type") == "graph_event" and e["data"][0].get("type") ==
                       "AIMessageChunk" and e["data"][0].get("content"))
            for tok in s.tokens[done:]:
                await record(chunk(tok))
            await self._managed_tail(run, s, record, chunk, final, "".join(s.tokens))

        asyncio.get_running_loop().create_task(rest())

    async def _chat_end(self, resp: Response, run_id: str) -> None:
        for data in self._closing(run_id):
            await resp.write(_event(data))

    def _closing(self, run_id: str) -> list[dict[str, Any]]:
        final = self.finals[run_id]
        out = []
        if final["status"] == "failed":
            out.append(_legacy("error", local_msg_id=run_id, code="AGENT_RUN_FAILED",
                               error_msg=final["error"]["message"]))
        ok = final["status"] in ("completed", "waiting_input", "waiting_approval", "paused")
        usage = final["usage"] if final["status"] == "completed" else {"input_tokens": 0, "output_tokens": 0,
                                                                        "total_tokens": 0}
        out.append(_legacy("message_end", code="0" if ok else final["status"], message=final["status"],
                           token_cost=usage, time_cost_ms=0))
        return out

    async def _replay(self, req: Request, resp: Response) -> None:
        s = self._snapshot()
        run_id = req.path_params["run_id"]
        if not await self._auth(req, resp):
            return
        if run_id not in self.events:
            await resp.json(404, {"detail": "Run not found"}, {"vary": "Origin"})
            return
        try:
            after = int(req.headers.get("last-event-id") or req.query.get("after") or 0)
        except ValueError:
            await resp.json(422, {"detail": [{"loc": ["query", "after"], "msg": "Input should be a valid integer"}]})
            return
        fmt = req.query.get("format", "events")
        self.resumes.append((run_id, after, fmt))
        log = self.events[run_id]
        if after > len(log):
            await resp.json(409, {"detail": "Event cursor is outside this run"}, {"vary": "Origin"})
            return
        await resp.start_stream(200, SSE_TYPE, {"vary": "Origin", "x-licos-stream-resume": "events-v1"})
        if s.fault == "truncated":  # the connection keeps dropping
            await resp.abort()
            return
        while True:
            for seq, record in list(log):
                if seq > after:
                    await resp.write(_event(_chat(record) if fmt == "chat" else record, seq))
                    after = seq
            if self.finals[run_id]["status"] != "running" and after >= len(log):
                break
            if not await resp.stall(0.05):
                return
        if fmt == "chat":
            await self._chat_end(resp, run_id)
        await resp.end()

    async def _run_record(self, req: Request, resp: Response) -> None:
        run_id = req.path_params["run_id"]
        if not await self._auth(req, resp):
            return
        if not self.managed:
            await resp.json(400, {"detail": "This project has not enabled agent_runtime"}, {"vary": "Origin"})
            return
        if self.hang_status and not await resp.stall(self.stall_seconds):
            return
        run = next((r for r in self.runs if r.run_id == run_id), None)
        if run is None or run_id not in self.finals or run.token != self._token(req):
            await resp.json(404, {"detail": "'AGENT run not found for this user'"}, {"vary": "Origin"})
            return
        final = self.finals[run_id]
        await resp.json(200, {"run_id": run_id, "session_id": run.session_id, "status": final["status"],
                              "sequence": len(self.events.get(run_id, [])), "error": final["error"]})

    async def _delete_session(self, req: Request, resp: Response) -> None:
        sid = req.path_params["session_id"]
        if not await self._auth(req, resp):
            return
        if not self.managed:
            await resp.json(400, {"detail": "This project has not enabled agent_runtime"}, {"vary": "Origin"})
            return
        if sid not in self.session_owners or self.session_owners[sid] != self._token(req):
            await resp.json(404, {"detail": "'Session not found for this user'"}, {"vary": "Origin"})
            return
        runs = [r for r, s in self.run_sessions.items() if s == sid]
        # the session's thread holds its latest run; only a finished one lets it go
        if runs and self.finals.get(runs[-1], {}).get("status") not in (None, "completed", "cancelled", "expired"):
            await resp.json(409, {"detail": "Cancel the unfinished run before deleting the session"}, {"vary": "Origin"})
            return
        for r in runs:
            self.events.pop(r, None)
            self.finals.pop(r, None)
            self.run_sessions.pop(r, None)
        self.sessions.pop(sid, None)
        del self.session_owners[sid]
        self.deleted_sessions.append(sid)
        await resp.json(200, {"deleted": True, "session_id": sid})

    async def _cancel(self, req: Request, resp: Response) -> None:
        run_id = req.path_params["run_id"]
        if not self.managed and self._token(req) is None:
            await resp.json(401, {"detail": "Cancellation requires an authenticated Bearer token"})
            return
        self.cancelled.append(run_id)
        if run_id in self.finals and self.finals[run_id]["status"] == "running":
            self.finals[run_id]["status"] = "cancelled"
        await resp.json(200, {"status": "cancelled", "run_id": run_id, "message": "Task cancelled."})


def _chat(record: dict[str, Any]) -> dict[str, Any]:
    """A stored runtime event in the chat format (``platform_event`` unwrapped)."""
    if record.get("type") == "platform_event":
        return record["data"]
    return record
