"""Faithful fake of the DashScope application API (Alibaba Cloud Bailian apps, platforms.md §4).

``POST /api/v1/apps/{app_id}/completion`` with ``Authorization: Bearer sk-…``. With
``X-DashScope-SSE: enable`` the answer is SSE, one block per chunk, exactly as DashScope frames it::

    id:1
    event:result
    :HTTP_STATUS/200
    data:{"output":{"session_id":"…","finish_reason":"null","text":"Hel"},"usage":{"models":[…]},"request_id":"…"}

(no space after the colons, ``finish_reason`` the *string* ``"null"`` until the last chunk's
``"stop"``). ``parameters.incremental_output`` true gives deltas, otherwise the text is
cumulative. Without the SSE header one JSON object answers. Errors before the stream are HTTP
status + ``{"code","message","request_id"}``; after it started, ``event:error`` +
``:HTTP_STATUS/<code>`` + the same envelope, then the body ends.

Scenarios (``srv.mode``): ``agent`` (``output.text``; with ``has_thoughts`` the ``reasoning`` pieces
and a ``tool`` step come first as ``output.thoughts``; ``doc_references`` on the last chunk) and
``workflow`` (``biz_params`` recorded; ``flow_stream_mode`` ``agent_format`` streams
``output.text``, ``message_format`` streams ``workflow_message`` per node with ``output.text``
empty, ``full_thoughts`` sends node results in ``thoughts`` and the text in the last chunk;
``usage`` is ``{}`` on intermediate workflow chunks). ``usage.models`` holds one entry per model
the app called (``models`` knob), its counts cumulative per chunk.

Unverified against the real service (no public transcript): what DashScope answers for a
session id it no longer knows. ``forgotten_session`` picks it: ``"error"`` (default; 400
``InvalidParameter`` naming the session) or ``"restart"`` (silently a new session id).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from .http_server import PlatformFake, Request, Response, fault_names

__all__ = ["FAULTS", "MODES", "Call", "FakeDashScope", "Session"]

MODES = ("agent", "workflow")
MiB = 1024 * 1024

# status -> (code, message) for the http_<status> faults, as DashScope words them
_FAULT_ERRORS: dict[int, tuple[str, str]] = {
    400: ("InvalidParameter", "Required parameter(s) missing or invalid, please check the request parameters."),
    401: ("InvalidApiKey", "Invalid API-key provided."),
    403: ("AccessDenied", "Access denied."),
    404: ("AppNotFound", "App not found or not published."),
    413: ("RequestTooLarge", "Request entity too large."),
    429: ("Throttling.RateQuota", "Requests rate limit exceeded, please try again later."),
    500: ("InternalError", "An internal error has occured, please try again later or contact service support."),
    502: ("BadGateway", "Bad gateway."),
    503: ("ServiceUnavailable", "Service temporarily unavailable, please try again later."),
}
FAULTS: tuple[str, ...] = fault_names(_FAULT_ERRORS, extra=("stall_pings",))
_ERROR_EVENT = (500, "InternalError", "An internal error has occured, please try again later.")


@dataclass
class Session:
    """Server-side history of one DashScope session."""

    id: str
    app_id: str
    credential: str
    turns: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class Call:
    """One completion request as DashScope received it."""

    credential: str
    app_id: str
    body: dict[str, Any]
    headers: dict[str, str]
    session_in: str  # input.session_id ("" = a new session)
    session_out: str = ""  # the session the answer belongs to ("" = no answer)


class _Aborted(Exception):
    """The client went away or a fault closed the connection."""


class FakeDashScope(PlatformFake):
    FAULTS = FAULTS
    proxy_name = "istio-envoy"

    """``with FakeDashScope() as srv: base_url = srv.base_url`` (``…/api/v1``)."""

    server_name = "istio-envoy"

    def __init__(self, api_key: str = "sk-test-key", app_id: str = "app-test", *, mode: str = "agent", port: int = 0):
        super().__init__(port=port)
        self.api_key = api_key
        self.api_keys: set[str] = set()  # further accepted keys (a second bot)
        self.app_ids: set[str] = {app_id}
        self.mode = mode
        # -- scenario knobs (read at the start of each request) --
        self.answer_tokens: list[str] = ["Hello", ", ", "world", "!"]
        self.token_delay = 0.0
        self.reasoning: list[str] = []  # thoughts of action_type "reasoning", before the answer
        self.tool: dict[str, Any] | None = None  # {"name", "input", "observation"}: one plugin call
        self.doc_references: list[dict[str, Any]] = []
        self.models: list[tuple[str, int]] = [("qwen-plus", 12)]  # (model_id, input_tokens) per model
        self.include_usage = True
        self.finish_reason = "stop"
        self.forgotten_session = "error"  # "error" | "restart"
        self.trailing_blank_line = True
        self.split_writes = False
        self.workflow_nodes: list[str] = ["End"]  # message_format: nodes whose messages stream
        # -- faults --
        self.fault_queue: list[str | None] = []
        self.stall_seconds = 3600.0
        self.stall_ping_every = 0.25
        self.oversized_bytes = 9 * MiB
        # -- recorded state --
        self.sessions: dict[str, Session] = {}
        self.calls: list[Call] = []
        self.record_calls = True  # False for long benchmarks
        self.add_route("POST", "/api/v1/apps/{app_id}/completion", self._completion)

    # -- public helpers ----------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return self.root_url + "/api/v1"

    def clear_requests(self) -> None:
        super().clear_requests()
        self.calls.clear()

    def forget_conversations(self) -> None:
        """Every session expires (DashScope keeps sessions for a limited time)."""
        self.sessions.clear()

    # -- the route ---------------------------------------------------------------------------

    def _snapshot(self) -> SimpleNamespace:
        fault = self.fault_queue.pop(0) if self.fault_queue else self.fault
        if self.mode not in MODES:
            raise ValueError(f"unknown mode {self.mode!r}")
        return SimpleNamespace(
            mode=self.mode, tokens=list(self.answer_tokens), token_delay=self.token_delay,
            reasoning=list(self.reasoning), tool=dict(self.tool) if self.tool else None,
            refs=list(self.doc_references), models=list(self.models), include_usage=self.include_usage,
            finish_reason=self.finish_reason, trailing=self.trailing_blank_line, split=self.split_writes,
            nodes=list(self.workflow_nodes), fault=fault,
        )

    async def _completion(self, req: Request, resp: Response) -> None:
        s = self._snapshot()
        request_id = str(uuid.uuid4())
        if await self._pre_fault(s, resp, request_id):
            return
        try:
            credential = self._auth(req)
            app_id = req.path_params["app_id"]
            body = self._body(req)
            call = Call(credential, app_id, body, {k: v for k, v in req.headers.items()},
                        str(body["input"].get("session_id") or ""))
            if self.record_calls:
                self.calls.append(call)
            if app_id not in self.app_ids:
                raise _Err(404, "AppNotFound", "App not found or not published.")
            session = self._session(call, app_id, credential)
        except _Err as e:
            await resp.json(e.status, {"code": e.code, "message": e.message, "request_id": request_id})
            return
        call.session_out = session.id
        inp, params = body["input"], body.get("parameters") or {}
        stream = req.headers.get("x-dashscope-sse", "").lower() == "enable"
        run = _Run(s, session, request_id, inp, params, resp)
        if not stream:
            await self._non_stream(run)
            return
        await resp.start_stream(200, "text/event-stream;charset=UTF-8",
                                {"Connection": "close"} if s.fault == "empty" else None)
        try:
            await self._stream(run)
        except _Done:
            pass
        except (_Aborted, ConnectionError):
            await resp.abort()
        finally:
            run.record_turn()  # a stream cut short keeps what it had said

    def _auth(self, req: Request) -> str:
        scheme, _, token = req.headers.get("authorization", "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise _Err(401, "InvalidApiKey", "No API-key provided.")
        if token != self.api_key and token not in self.api_keys:
            raise _Err(401, "InvalidApiKey", "Invalid API-key provided.")
        return token

    @staticmethod
    def _body(req: Request) -> dict[str, Any]:
        try:
            body = req.json()
        except (ValueError, UnicodeDecodeError):
            raise _Err(400, "InvalidParameter", "Request body is not valid json.") from None
        if not isinstance(body, dict) or not isinstance(body.get("input"), dict):
            raise _Err(400, "InvalidParameter", "Missing required parameter: input.")
        inp = body["input"]
        if not (isinstance(inp.get("prompt"), str) and inp["prompt"].strip()) and not inp.get("messages"):
            raise _Err(400, "InvalidParameter", "Required parameter(s) missing or invalid: input.prompt.")
        for key in ("image_list", "file_list"):
            urls = inp.get(key)
            if urls is None:
                continue
            if not isinstance(urls, list) or not all(isinstance(u, str) and u.startswith(("http://", "https://"))
                                                    for u in urls):
                raise _Err(400, "InvalidParameter", f"input.{key} must be a list of http(s) urls.")
        if "biz_params" in inp and not isinstance(inp["biz_params"], dict):
            raise _Err(400, "InvalidParameter", "input.biz_params must be an object.")
        return body

    def _session(self, call: Call, app_id: str, credential: str) -> Session:
        sid = call.session_in
        if sid:
            found = self.sessions.get(sid)
            if found is not None and found.app_id == app_id:
                return found
            if self.forgotten_session == "error":
                raise _Err(400, "InvalidParameter", f"Session not found or expired: {sid}")
        new = Session(uuid.uuid4().hex, app_id, credential)
        self.sessions[new.id] = new
        return new

    async def _pre_fault(self, s: SimpleNamespace, resp: Response, request_id: str) -> bool:
        kind, _, num = (s.fault or "").partition("_")
        if kind == "http" and num.isdigit():  # DashScope's envelope names the request
            code, msg = _FAULT_ERRORS[int(num)]
            await resp.json(int(num), {"code": code, "message": msg, "request_id": request_id})
            return True
        return await self.head_fault(resp, s.fault)

    # -- answers -----------------------------------------------------------------------------

    async def _non_stream(self, run: _Run) -> None:
        answer = "".join(run.s.tokens)
        run.answer = answer
        output: dict[str, Any] = {"text": answer, "finish_reason": run.s.finish_reason, "session_id": run.session.id}
        if run.s.refs:
            output["doc_references"] = run.s.refs
        doc: dict[str, Any] = {"output": output, "request_id": run.request_id}
        if run.s.include_usage:
            doc["usage"] = self._usage(run, len(run.s.tokens))
        await run.resp.json(200, doc)

    def _usage(self, run: _Run, produced: int) -> dict[str, Any]:
        return {"models": [{"model_id": m, "input_tokens": i, "output_tokens": max(produced, 1)}
                           for m, i in run.s.models]}

    async def _stream(self, run: _Run) -> None:
        s = run.s
        if s.fault == "empty":
            return await run.resp.end()
        if s.fault == "invalid_json":
            await run.block(b"id:1\nevent:result\n:HTTP_STATUS/200\ndata:{not json")
            return await run.resp.end()
        if s.fault == "non_utf8":
            await run.block(b'id:1\nevent:result\n:HTTP_STATUS/200\ndata:{"output":{"text":"\xff\xfe"}}\n\n')
        if s.fault == "oversized":
            await run.block(b'id:1\nevent:result\n:HTTP_STATUS/200\ndata:{"output":{"text":"'
                            + b"x" * self.oversized_bytes + b'"}}\n\n')
        workflow = s.mode == "workflow"
        flow_mode = str(run.params.get("flow_stream_mode") or "full_thoughts") if workflow else ""
        if not workflow and run.params.get("has_thoughts"):
            await self._thoughts(run)
        tokens = s.tokens
        for i, tok in enumerate(tokens):
            run.answer += tok
            await self._chunk(run, tok, flow_mode, last=False)
            if i == 0:
                await self._after_first(run)
            if i < len(tokens) - 1 and s.token_delay:
                await run.sleep(s.token_delay)
        if not tokens:
            await self._after_first(run)
        # the session holds the turn before the finishing event goes out, as the service's does: a
        # client that reads that event and asks again at once must find it
        run.record_turn()
        await self._chunk(run, "", flow_mode, last=True)
        await run.resp.end()

    async def _thoughts(self, run: _Run) -> None:
        s = run.s
        reasoning = ""
        for piece in s.reasoning:
            reasoning += piece
            shown = piece if run.incremental else reasoning
            await run.send({"thoughts": [{"action_type": "reasoning", "thought": shown}], "text": ""})
        if s.tool:
            step = {"action_type": "api", "action_name": s.tool["name"], "action": s.tool["name"],
                    "thought": s.tool.get("thought", ""), "action_input_stream": json.dumps(s.tool.get("input") or {}),
                    "action_input": s.tool.get("input") or {}}
            await run.send({"thoughts": [step], "text": ""})
            done = {**step, "observation": json.dumps(s.tool.get("observation"), ensure_ascii=False)}
            await run.send({"thoughts": [done], "text": ""})

    async def _chunk(self, run: _Run, tok: str, flow_mode: str, last: bool) -> None:
        s = run.s
        text = tok if run.incremental else run.answer
        out: dict[str, Any] = {}
        if tok:
            run.emitted += 1
        usage: dict[str, Any] | None = self._usage(run, run.emitted) if s.include_usage else None
        if flow_mode == "message_format":
            out["text"] = ""
            if tok:
                node = s.nodes[-1] if s.nodes else "End"
                out["workflow_message"] = {
                    "node_id": f"{node}_1", "node_name": node, "node_type": node, "node_status": "executing",
                    "node_is_completed": False, "node_msg_seq_id": len(run.answer),
                    "message": {"role": "assistant", "content": text},
                }
        elif flow_mode == "full_thoughts":
            out["thoughts"] = [{"response": json.dumps({"nodeName": "LLM", "nodeType": "LLM", "nodeStatus": "success",
                                                        "nodeResult": json.dumps({"result": run.answer})})}]
            out["text"] = run.answer if last else ""  # the End node's text, once, at the end
        else:
            out["text"] = "" if last and tok == "" else text
            if last and not run.incremental:
                out["text"] = run.answer
        if last:
            out["finish_reason"] = s.finish_reason
            if s.refs:
                out["doc_references"] = s.refs
        if s.mode == "workflow" and not last and usage is not None:
            usage = {}
        await run.send(out, usage=usage, last=last)

    async def _after_first(self, run: _Run) -> None:
        s = run.s
        if s.fault == "truncated":
            raise _Aborted
        if s.fault == "error_event":
            status, code, message = _ERROR_EVENT
            await run.error(status, code, message)
            raise _Done
        if s.fault == "stall":
            await run.sleep(self.stall_seconds)
        if s.fault == "stall_pings":
            deadline = time.monotonic() + self.stall_seconds
            while time.monotonic() < deadline:
                await run.sleep(self.stall_ping_every)
                await run.send({"text": ""})  # an agent at work: progress chunks with no new text


class _Err(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


class _Done(Exception):
    """The stream ended on purpose (error event sent)."""


class _Run:
    """One streamed answer: framing, counters, client-gone checks."""

    def __init__(self, s: SimpleNamespace, session: Session, request_id: str, inp: dict[str, Any],
                 params: dict[str, Any], resp: Response) -> None:
        self.s = s
        self.session = session
        self.request_id = request_id
        self.inp = inp
        self.params = params
        self.resp = resp
        self.incremental = bool(params.get("incremental_output"))
        self.answer = ""
        self.emitted = 0
        self.seq = 0
        self.recorded = False

    def record_turn(self) -> None:
        """Put this turn into its session's history, once."""
        if not self.recorded:
            self.recorded = True
            self.session.turns.append((str(self.inp.get("prompt") or ""), self.answer))

    async def block(self, payload: bytes) -> None:
        if self.s.split:
            await self.resp.write_split(payload)
        else:
            await self.resp.write(payload)

    async def send(self, output: dict[str, Any], usage: dict[str, Any] | None = None, last: bool = False) -> None:
        self.seq += 1
        output = {"session_id": self.session.id, "finish_reason": "null", **output}
        doc: dict[str, Any] = {"output": output, "request_id": self.request_id}
        if usage is not None:
            doc["usage"] = usage
        data = json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode()
        payload = b"id:%d\nevent:result\n:HTTP_STATUS/200\ndata:" % self.seq + data
        if not (last and not self.s.trailing):
            payload += b"\n\n"
        await self.block(payload)

    async def error(self, status: int, code: str, message: str) -> None:
        self.seq += 1
        data = json.dumps({"code": code, "message": message, "request_id": self.request_id}).encode()
        await self.block(b"id:%d\nevent:error\n:HTTP_STATUS/%d\ndata:" % (self.seq, status) + data + b"\n\n")
        await self.resp.end()

    async def sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            if self.resp.client_disconnected:
                raise _Aborted
            await asyncio.sleep(min(left, 0.05))
