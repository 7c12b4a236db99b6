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
and a ``tool`` step come first as ``output.thoughts``) and ``workflow`` (``biz_params`` recorded;
``flow_stream_mode`` ``agent_format`` streams ``output.text``, ``message_format`` streams the End
node's ``workflow_message`` deltas with no ``output.text``, then the node's closing message (empty
content, ``node_is_completed``) and a last event whose ``output.text`` is the whole answer and which
has no ``workflow_message`` (Bailian "调用工作流应用", message_format response example; the fake
sends that whole text whatever ``incremental_output`` says); ``full_thoughts`` sends node results in
``thoughts`` and the text in the last chunk; ``usage`` is ``{}`` on intermediate workflow chunks).
``usage.models`` holds one entry per model the app called (``models`` knob), its counts cumulative
per chunk.

Reasoning (``reasoning``) is the model's deep thinking: it comes when ``parameters.enable_thinking``
is true, or is absent and the app thinks by itself (``app_thinking``), never when it is false.

Knowledge-base citations: answer tokens may carry ``<ref>[n]</ref>`` tags cut anywhere (as the real
service cuts them: ``"<ref>[4]</"`` + ``"ref>，"``). Each entry of ``doc_references`` whose
``index_id`` the answer cites is listed from the event in which its tag is complete on, the list
growing and sorted by index (cnblogs/dashscope-sdk @7afccbd test/Cnblogs.DashScope.Tests.Shared/
RawHttpData/application-single-generation-text-sse.response.body.txt, a recorded real stream);
entries never cited come on the last event. ``input.doc_reference_type: simple`` takes the tags out
of the text (dashscope SDK ``Application.call`` doc: "simple ... not include index in response text").

Temporary storage (images sent as data; Model Studio "Upload a local file to obtain a temporary URL",
dashscope SDK ``utils/oss_utils.py``): ``GET /api/v1/uploads?action=getPolicy&model=<m>`` answers a
policy whose ``upload_host`` is this server's root (``upload_host`` knob overrides it); a form POST
there with the policy's fields, ``key`` under ``upload_dir`` and the ``file`` part last stores the
object (200 with an empty body for ``success_action_status`` 200; OSS's XML ``<Error>`` otherwise,
409 ``FileAlreadyExists`` for a key already there). A completion may then name ``oss://<key>`` in
``image_list`` only with ``X-DashScope-OssResourceResolve: enable`` (400 otherwise, as the docs say
the call fails without it); an object uploaded for another model than ``app_model`` is refused too
(the docs bind a file to the model named at upload; unverified for app calls). ``uploads`` keeps
what was stored, ``Call.images`` what a completion resolved.

Unverified against the real service (no public transcript): what DashScope answers for a
session id it no longer knows. ``forgotten_session`` picks it: ``"error"`` (default; 400
``InvalidParameter`` naming the session) or ``"restart"`` (silently a new session id).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import re
import time
import uuid
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from .http_server import PlatformFake, Request, Response, fault_names

__all__ = ["FAULTS", "MODES", "Call", "FakeDashScope", "Session", "Upload"]

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
_CITATION = re.compile(r"<ref>(.*?)</ref>", re.S)


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
    images: list[bytes] = field(default_factory=list)  # the oss:// images the call resolved


@dataclass
class Upload:
    """One object in the temporary storage."""

    key: str
    data: bytes
    content_type: str
    model: str
    credential: str


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
        self.app_thinking = True  # the app's model thinks unless enable_thinking says otherwise
        # temporary storage
        self.app_model = "qwen-vl-max"  # the model the app's oss:// images must be uploaded for
        self.upload_host: str | None = None  # None: this server's root
        self.upload_max_mb = 1024
        self.policy_fault: tuple[int, str, str] | None = None  # (status, code, message) for getPolicy
        self.uploads: dict[str, Upload] = {}
        # signature -> (upload_dir, model, credential, expiry, policy)
        self._policies: dict[str, tuple[str, str, str, float, str]] = {}
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
        self.add_route("GET", "/api/v1/uploads", self._get_policy)
        self.add_route("POST", "/", self._oss_post)

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
            nodes=list(self.workflow_nodes), fault=fault, app_thinking=self.app_thinking,
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
            self._resolve(req, call)
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
            if not isinstance(urls, list) or not all(isinstance(u, str) and u.startswith(("http://", "https://",
                                                                                          "oss://"))
                                                    for u in urls):
                raise _Err(400, "InvalidParameter", f"input.{key} must be a list of http(s) urls.")
        if "biz_params" in inp and not isinstance(inp["biz_params"], dict):
            raise _Err(400, "InvalidParameter", "input.biz_params must be an object.")
        if "memory_id" in inp and not isinstance(inp["memory_id"], str):
            raise _Err(400, "InvalidParameter", "input.memory_id must be a string.")
        if inp.get("doc_reference_type") not in (None, "simple", "indexed"):
            raise _Err(400, "InvalidParameter", "input.doc_reference_type must be simple or indexed.")
        params = body.get("parameters") or {}
        if "enable_thinking" in params and not isinstance(params["enable_thinking"], bool):
            raise _Err(400, "InvalidParameter", "parameters.enable_thinking must be a boolean.")
        return body

    def _resolve(self, req: Request, call: Call) -> None:
        """The oss:// links of ``image_list``, read from the temporary storage."""
        links = [u for key in ("image_list", "file_list") for u in call.body["input"].get(key) or []
                 if u.startswith("oss://")]
        if not links:
            return
        if req.headers.get("x-dashscope-ossresourceresolve", "").lower() != "enable":
            raise _Err(400, "InvalidParameter", "The provided URL does not appear to be valid. Ensure it is "
                                                "correctly formatted.")
        for link in links:
            found = self.uploads.get(link[len("oss://"):])
            if found is None or found.credential != call.credential:
                raise _Err(400, "InvalidParameter", f"Download the media resource timed out or failed: {link}")
            if found.model != self.app_model:
                raise _Err(400, "InvalidParameter", f"The file {link} was uploaded for another model.")
            call.images.append(found.data)

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

    # -- temporary storage ---------------------------------------------------------------------

    OSS_ACCESS_KEY_ID = "LTAI5tFakeAccessKeyId"

    async def _get_policy(self, req: Request, resp: Response) -> None:
        """``GET /api/v1/uploads?action=getPolicy&model=…``: a form-upload policy for one model."""
        request_id = str(uuid.uuid4())
        try:
            credential = self._auth(req)
            if req.query.get("action") != "getPolicy":
                raise _Err(400, "InvalidParameter", "Unsupported action.")
            model = req.query.get("model", "")
            if not model:
                raise _Err(400, "InvalidParameter", "Required parameter(s) missing or invalid: model.")
            if self.policy_fault is not None:
                raise _Err(*self.policy_fault)
        except _Err as e:
            await resp.json(e.status, {"code": e.code, "message": e.message, "request_id": request_id})
            return
        account = hashlib.md5(credential.encode(), usedforsecurity=False).hexdigest()
        upload_dir = f"dashscope-instant/{account}/{time.strftime('%Y-%m-%d')}/{request_id}"
        max_bytes = int(self.upload_max_mb * 1024 * 1024)
        policy = base64.b64encode(json.dumps({
            "expiration": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(time.time() + 300)),
            "conditions": [["content-length-range", 0, max_bytes], ["starts-with", "$key", upload_dir],
                           {"bucket": "dashscope-file-mgr"}, {"x-oss-object-acl": "private"},
                           {"x-oss-forbid-overwrite": "true"}],
        }, separators=(",", ":")).encode()).decode()
        signature = base64.b64encode(uuid.uuid4().bytes[:15]).decode()
        self._policies[signature] = (upload_dir, model, credential, time.time() + 300, policy)
        await resp.json(200, {"data": {
            "policy": policy, "signature": signature, "upload_dir": upload_dir,
            "upload_host": self.upload_host or self.root_url, "expire_in_seconds": 300,
            "max_file_size_mb": self.upload_max_mb, "capacity_limit_mb": 999999999,
            "oss_access_key_id": self.OSS_ACCESS_KEY_ID, "x_oss_object_acl": "private",
            "x_oss_forbid_overwrite": "true",
        }, "request_id": request_id})

    async def _oss_post(self, req: Request, resp: Response) -> None:
        """OSS PostObject under a policy from ``_get_policy``; the ``file`` part must come last."""
        try:
            form = req.form()
        except ValueError:
            return await _oss_error(resp, 400, "InvalidArgument", "The body of your POST request is not well-formed "
                                                                  "multipart/form-data.")
        if not form.parts or form.parts[-1].name != "file" or not form.parts[-1].is_file:
            return await _oss_error(resp, 400, "InvalidArgument", "The file part must be the last part.")
        f = form.fields
        missing = [k for k in ("OSSAccessKeyId", "policy", "Signature", "key") if not f.get(k)]
        if missing:
            return await _oss_error(resp, 400, "InvalidArgument", f"Missing form field: {missing[0]}.")
        found = self._policies.get(f["Signature"])
        if found is None or f["OSSAccessKeyId"] != self.OSS_ACCESS_KEY_ID or f["policy"] != found[4]:
            return await _oss_error(resp, 403, "SignatureDoesNotMatch", "The request signature we calculated does "
                                                                        "not match the signature you provided.")
        upload_dir, model, credential, expiry, _ = found
        if time.time() > expiry:
            return await _oss_error(resp, 403, "AccessDenied", "Invalid according to Policy: Policy expired.")
        key = f["key"]
        if not key.startswith(upload_dir + "/") or f.get("x-oss-object-acl") != "private" \
                or f.get("x-oss-forbid-overwrite") != "true":
            return await _oss_error(resp, 403, "AccessDenied", "Invalid according to Policy: Policy Condition "
                                                               "failed.")
        data = form.parts[-1].data
        if len(data) > self.upload_max_mb * 1024 * 1024:
            return await _oss_error(resp, 400, "EntityTooLarge", "Your proposed upload exceeds the maximum allowed "
                                                                 "size.")
        if key in self.uploads:
            return await _oss_error(resp, 409, "FileAlreadyExists", "The object you specified already exists and "
                                                                    "can not be overwritten.")
        ctype = f.get("x-oss-content-type") or form.parts[-1].content_type or "application/octet-stream"
        self.uploads[key] = Upload(key, data, ctype, model, credential)
        status = f.get("success_action_status", "")
        await resp.send(int(status) if status in ("200", "201") else 204, b"", None,
                        {"x-oss-request-id": uuid.uuid4().hex[:24].upper()})

    # -- answers -----------------------------------------------------------------------------

    async def _non_stream(self, run: _Run) -> None:
        answer = "".join(run.tokens())
        run.answer = answer
        output: dict[str, Any] = {"text": answer, "finish_reason": run.s.finish_reason, "session_id": run.session.id}
        if run.s.refs:
            output["doc_references"] = run.references(True)
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
        tokens = run.tokens()
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
        if flow_mode == "message_format" and tokens:
            await self._node_closed(run)
        await self._chunk(run, "", flow_mode, last=True)
        await run.resp.end()

    async def _node_closed(self, run: _Run) -> None:
        """message_format: the End node's closing message (no content) before the last event."""
        node = run.s.nodes[-1] if run.s.nodes else "End"
        run.node_seq += 1
        await run.send({"workflow_message": {
            "node_id": f"{node}_1", "node_name": node, "node_type": node, "node_status": "success",
            "node_is_completed": True, "node_msg_seq_id": run.node_seq,
            "message": {"role": "assistant", "content": ""}}}, usage={} if run.s.include_usage else None)

    async def _thoughts(self, run: _Run) -> None:
        s = run.s
        reasoning = ""
        for piece in s.reasoning if run.thinking else []:
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
            if tok:
                node = s.nodes[-1] if s.nodes else "End"
                run.node_seq += 1
                out["workflow_message"] = {
                    "node_id": f"{node}_1", "node_name": node, "node_type": node, "node_status": "executing",
                    "node_is_completed": False, "node_msg_seq_id": run.node_seq,
                    "message": {"role": "assistant", "content": tok},
                }
            elif last:
                out["text"] = run.answer  # the End node's whole text closes the stream
        elif flow_mode == "full_thoughts":
            out["thoughts"] = [{"response": json.dumps({"nodeName": "LLM", "nodeType": "LLM", "nodeStatus": "success",
                                                        "nodeResult": json.dumps({"result": run.answer})})}]
            out["text"] = run.answer if last else ""  # the End node's text, once, at the end
        else:
            out["text"] = "" if last and tok == "" else text
            if last and not run.incremental:
                out["text"] = run.answer
        refs = run.references(last)
        if refs:
            out["doc_references"] = refs
        if last:
            out["finish_reason"] = s.finish_reason
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


async def _oss_error(resp: Response, status: int, code: str, message: str) -> None:
    """OSS's XML error body."""
    body = ('<?xml version="1.0" encoding="UTF-8"?>\n<Error>\n'
            f"  <Code>{code}</Code>\n  <Message>{message}</Message>\n"
            f"  <RequestId>{uuid.uuid4().hex[:24].upper()}</RequestId>\n"
            "  <HostId>dashscope-file-mgr.oss-cn-beijing.aliyuncs.com</HostId>\n</Error>\n")
    await resp.text(status, body, "application/xml")


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
        thinking = params.get("enable_thinking")
        self.thinking = thinking if isinstance(thinking, bool) else bool(s.app_thinking)
        self.answer = ""
        self.emitted = 0
        self.seq = 0
        self.node_seq = 0
        self.recorded = False

    def tokens(self) -> list[str]:
        """The answer's pieces; ``doc_reference_type: simple`` writes no citation tags (the text
        without them, cut into as many pieces of the same lengths)."""
        tokens = list(self.s.tokens)
        if self.inp.get("doc_reference_type") != "simple":
            return tokens
        plain = _CITATION.sub("", "".join(tokens))
        pieces, at = [], 0
        for tok in tokens:
            if at < len(plain):
                pieces.append(plain[at : at + max(len(tok), 1)])
                at += max(len(tok), 1)
        if at < len(plain):
            pieces.append(plain[at:])
        return pieces

    def references(self, last: bool) -> list[dict[str, Any]]:
        """``doc_references`` of the event now: each entry from the event its citation is complete
        in, sorted by index; on the last event also those never cited."""
        if not self.s.refs:
            return []
        cited = {n.strip() for inside in _CITATION.findall(self.answer) for n in re.findall(r"\[([^\]]+)\]", inside)}
        listed = [r for r in self.s.refs if str(r.get("index_id")) in cited or last]
        return sorted(listed, key=lambda r: (len(str(r.get("index_id"))), str(r.get("index_id"))))

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
