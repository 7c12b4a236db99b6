"""Faithful fake of an n8n workflow behind a Webhook node (platforms.md §2, real-http-peers.md §4).

Routes: ``POST /webhook/{path}`` (production) and ``POST /webhook-test/{path}`` (test URL: answers
once per ``listen_test()``, like the editor's "Listen for test event"). Other paths and methods get
n8n's 404 JSON (``The requested webhook "POST x" is not registered.`` with ``hint``/``stacktrace``).

The workflow answers according to ``srv.mode``, as n8n 2.40.7 does (fixtures real-peers/n8n/):

- ``streaming``:     Webhook (Streaming) -> AI Agent: ``200 application/json`` chunked NDJSON,
                     ``begin``, one ``item`` per token (``content`` = delta, one HTTP chunk per line),
                     ``end``; with ``include_usage`` a Respond to Webhook node follows with its own
                     ``begin``/``item``/``end`` whose content is ``{"tokenUsage": …}`` serialised as a
                     JSON string; ``second_node_text`` adds one more node's group; ``object_content``
                     sends items as ``{"text_chunk": …}`` objects; a ``{"type":"keepalive"}`` line
                     comes every ``keepalive_every`` seconds (n8n: 30 s)
- ``stream_respond``: Webhook (Streaming) -> Respond to Webhook (JSON): one begin/item/end, all in
                     one HTTP chunk, ``item.content`` = ``{"<output_key>": answer}`` as a JSON string
- ``last_node``:     ``{"<output_key>": answer}`` (``Content-Length`` JSON, sent when done)
- ``all_entries``:   ``[{"<output_key>": part}, …]`` one entry per token
- ``respond_text``:  Respond to Webhook (Text): the text, labelled ``text/html; charset=utf-8``
- ``on_received``:   ``{"message": "Workflow was started"}`` at once
- ``respond_binary``: Respond to Webhook (Binary File): the file's bytes labelled with its MIME type
                     (``binary_mime``), ``Content-Length``, no file name (n8n sends none); the node's
                     Response Headers (``response_headers``, e.g. a Content-Disposition) are added
- ``last_node_binary``: When Last Node Finishes / First Entry Binary. With ``binary_in_memory`` (n8n's
                     default binary mode) the file goes through express's ``res.json``: the body is
                     ``{"type":"Buffer","data":[…bytes…]}`` labelled ``<mime>; charset=utf-8``; else
                     the bytes are streamed (chunked) with the MIME type
- ``stream_respond_binary``: Webhook (Streaming) -> Respond to Webhook (Binary File): the stream's
                     head, then nothing (n8n drops a file in streaming mode), the body ends empty

Non-streaming modes take ``token_delay`` per token before answering, sending nothing meanwhile.
``status_code`` sets the Webhook/Respond node's response code (any 2xx).

Authentication (``auth``): ``none``, ``basic`` (``basic_users`` user -> password, decoded with
``basic_encoding``), ``header`` (``header_name``; accepted values ``api_keys``) or ``jwt``
(``jwt_secret``/``jwt_algorithm``, HS*; checks signature and ``exp``). Refusals are plain text with
``WWW-Authenticate: Basic realm="Webhook"``, as n8n 2.40.7's Webhook node sends them: basic
401 ``Authorization is required!`` / 401 ``Authentication data is wrong!``; header 403
``Authorization data is wrong!`` (missing or wrong); JWT 401 ``No token provided`` / 403 with the
jsonwebtoken reason (``invalid signature``, ``jwt expired``, ``invalid algorithm``).

Memory: like a Simple Memory node whose key is ``{{ $json.body.<memory_key> }}`` (``sessionId``; a
workflow built for LangBot 4.10 reads ``session_id``), ``srv.memory[key]`` holds the
``(chatInput, answer)`` turns; ``srv.history_seen`` records, per request, how many turns the model
had in front of it. A body without that field makes the memory node throw ``Key parameter is
empty`` (real n8n 2.40.7, ``@n8n/n8n-nodes-langchain`` ``utils/helpers.js`` ``getSessionId``): a
streaming workflow sends one AI Agent ``error`` item with that text and no ``begin``; the other modes
answer 500 ``{"message":"Error in workflow"}``.

Faults (``srv.fault``, sticky; the Dify fake's names): ``http_<status>`` / ``html_<status>`` (n8n's
own bodies where n8n sends that status: 401/403 plain text, 404 not registered, 500
``{"message":"Error in workflow"}``), and mid-stream after the first token: ``invalid_json``,
``truncated``, ``error_event`` (an AI Agent's ``error`` item with ``content``, no ``end``), ``empty``
(200 with an empty body), ``non_utf8``, ``oversized`` (one 9 MiB line), ``stall``, ``stall_pings``
(keep-alive lines only), ``stall_before_headers``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from .http_server import PlatformFake, Request, Response, fault_names

__all__ = ["FAULTS", "MODES", "FakeN8n", "Turn"]

MODES = ("streaming", "stream_respond", "last_node", "all_entries", "respond_text", "on_received", "respond_binary",
         "last_node_binary", "stream_respond_binary")
# a 1x1 PNG: what the binary modes answer with unless told otherwise
PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP438AAAAQBAYDFKhhdAAAAAElFTkSuQmCC")
MiB = 1024 * 1024

_STATUS_BODIES: dict[int, tuple[str, Any]] = {
    # status -> (content type, body) as n8n (or the proxy in front of it) sends them
    400: ("json", {"code": 400, "message": "Bad request", "hint": "The request could not be processed"}),
    401: ("text", "Authorization is required!"),
    403: ("text", "IP is not whitelisted to access the webhook!"),
    404: ("json", None),  # the not-registered envelope, filled per request
    413: ("json", {"code": 413, "message": "request entity too large"}),
    429: ("json", {"code": 429, "message": "Too Many Requests"}),
    500: ("json", {"message": "Error in workflow"}),
    502: ("json", {"code": 502, "message": "Bad Gateway"}),
    503: ("json", {"code": 503, "message": "Service Unavailable"}),
}
FAULTS: tuple[str, ...] = fault_names(_STATUS_BODIES, extra=("stall_pings",))
_HINT = (
    "The workflow must be active for a production URL to run successfully. You can activate the workflow using "
    "the toggle in the top-right of the editor. Note that unlike test URL calls, production URL calls aren't "
    "shown on the canvas (only in the executions list)"
)
_STREAM_HEADERS = {"Cache-Control": "no-cache", "Vary": "Accept-Encoding"}
# what n8n 2.40.7 adds to a Respond to Webhook / last-node answer (webhook-response-headers.js applySandboxCSP)
_SANDBOX_CSP = ("sandbox allow-downloads allow-forms allow-modals allow-orientation-lock allow-pointer-lock "
                "allow-popups allow-popups-to-escape-sandbox allow-presentation allow-scripts "
                "allow-top-navigation-by-user-activation allow-top-navigation-to-custom-protocols")
_JWT_HASH = {"HS256": hashlib.sha256, "HS384": hashlib.sha384, "HS512": hashlib.sha512}


@dataclass
class Turn:
    """One webhook call as the workflow saw it."""

    path: str
    body: dict[str, Any]
    files: dict[str, tuple[str | None, str | None, bytes]] = field(default_factory=dict)  # field -> (name, type, data)
    answer: str = ""


class _Aborted(Exception):
    pass


def _b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class FakeN8n(PlatformFake):
    FAULTS = FAULTS
    proxy_name = "nginx"

    """``with FakeN8n() as srv: post(srv.webhook_url, json={"chatInput": …, "sessionId": …})``."""

    server_name = "fake-n8n"  # real n8n (express) sends no Server header; the base always adds one

    def __init__(self, *, path: str = "chat", mode: str = "streaming", port: int = 0) -> None:
        super().__init__(port=port)
        self.path = path
        self.mode = mode
        self.paths: set[str] = {path}  # registered (active) production paths
        self._test_listening = False
        # -- scenario --
        self.answer_tokens: list[str] = ["Hello", " from", " n8n", "."]
        self.token_delay = 0.0
        self.output_key = "output"  # the key the workflow answers under
        self.include_usage = False  # n8n sends no usage unless the workflow returns some
        self.usage = {"promptTokens": 11, "completionTokens": 4, "totalTokens": 15}
        self.second_node_text: str | None = None
        self.object_content = False
        self.split_writes = False  # write each line in tiny pieces, cut inside UTF-8 characters
        self.keepalive_every = 30.0
        self.status_code = 200
        self.echo_history = False  # the answer says how many earlier turns memory held
        self.memory_key = "sessionId"  # the body field the workflow's memory node is keyed by
        self.binary_data = PNG
        self.binary_mime = "image/png"
        self.binary_in_memory = True  # n8n's default binary data mode (last_node_binary's JSON Buffer)
        self.response_headers: dict[str, str] = {}  # the Respond/Webhook node's Response Headers option
        # -- auth --
        self.auth = "none"
        self.basic_users: dict[str, str] = {}
        self.basic_encoding = "utf-8"  # n8n's basic-auth parser decodes the credentials as UTF-8
        self.header_name = "X-N8N-Key"
        self.api_keys: set[str] = set()
        self.jwt_secret = ""
        self.jwt_algorithm = "HS256"
        self.jwt_payloads: list[dict[str, Any]] = []
        # -- faults --
        self.stall_seconds = 3600.0
        self.stall_ping_every = 0.25
        self.oversized_bytes = 9 * MiB
        self.error_message = "fake upstream failure"
        # -- recorded --
        self.turns: list[Turn] = []
        self.memory: dict[str, list[tuple[str, str]]] = {}
        self.history_seen: list[int] = []
        self.add_route("POST", "/webhook/{path}", self._production)
        self.add_route("POST", "/webhook-test/{path}", self._test)

    # -- public helpers ------------------------------------------------------------------------

    @property
    def webhook_url(self) -> str:
        """The default workflow's production URL."""
        return f"{self.root_url}/webhook/{self.path}"

    @property
    def base_url(self) -> str:
        return self.webhook_url

    def listen_test(self) -> None:
        """The editor's "Listen for test event": the next /webhook-test/ call is answered."""
        self._test_listening = True

    def bodies(self) -> list[dict[str, Any]]:
        """Every webhook call's body (JSON, or the multipart text fields)."""
        return [t.body for t in self.turns]

    # -- routes --------------------------------------------------------------------------------

    async def not_found(self, req: Request, resp: Response) -> None:
        await self._not_registered(req, resp)

    async def method_not_allowed(self, req: Request, resp: Response, allowed: list[str]) -> None:
        msg = f"This webhook is not registered for {req.method} requests. Did you mean to make a POST request?"
        await resp.json(404, {"code": 404, "message": msg, "stacktrace": f"ResponseError: {msg}\n    at fake"})

    async def _not_registered(self, req: Request, resp: Response) -> None:
        name = req.path.split("/", 2)[-1] if req.path.count("/") >= 2 else req.path
        msg = f'The requested webhook "{req.method} {name}" is not registered.'
        await resp.json(404, {"code": 404, "message": msg, "hint": _HINT,
                              "stacktrace": f"ResponseError: {msg}\n    at LiveWebhooks.findWebhook (fake)"})

    async def _production(self, req: Request, resp: Response) -> None:
        if req.path_params["path"] not in self.paths:
            await self._not_registered(req, resp)
            return
        await self._run(req, resp)

    async def _test(self, req: Request, resp: Response) -> None:
        if not self._test_listening or req.path_params["path"] not in self.paths:
            msg = f'The requested webhook "{req.path_params["path"]}" is not registered.'
            await resp.json(404, {"code": 404, "message": msg,
                                  "hint": "Click the 'Execute workflow' button on the canvas, then try again. "
                                          "(In test mode, the webhook only works for one call after you click "
                                          "this button)"})
            return
        self._test_listening = False
        await self._run(req, resp)

    # -- one execution -------------------------------------------------------------------------

    def _snapshot(self) -> SimpleNamespace:
        return SimpleNamespace(
            mode=self.mode, tokens=list(self.answer_tokens), delay=self.token_delay, key=self.output_key,
            usage=dict(self.usage) if self.include_usage else None, second=self.second_node_text,
            object_content=self.object_content, split=self.split_writes, keepalive=self.keepalive_every,
            status=self.status_code, fault=self._fault, echo=self.echo_history, binary=self.binary_data,
            mime=self.binary_mime, in_memory=self.binary_in_memory, headers=dict(self.response_headers),
        )

    async def _run(self, req: Request, resp: Response) -> None:
        s = self._snapshot()
        if await self.head_fault(resp, s.fault, close_after_stall=False):
            return
        if not await self._authorized(req, resp):
            return
        try:
            turn = self._turn(req)
        except ValueError as exc:
            msg = "Failed to parse request body"
            await resp.json(422, {"code": 422, "message": msg, "hint": str(exc)[:200],
                                  "stacktrace": f"ResponseError: {msg}\n    at parseBody (fake)"})
            return
        self.turns.append(turn)
        session = str(turn.body.get(self.memory_key) or "")
        if not session and self.memory_key != "sessionId":  # the memory node's key expression is empty
            await self._key_parameter_empty(resp, s)
            return
        history = self.memory.setdefault(session, []) if session else []
        self.history_seen.append(len(history))
        if s.echo:
            s.tokens = [f"(memory: {len(history)} turns) ", *s.tokens]
        try:
            answer = await self._respond(resp, s)
        except _Aborted:
            await resp.abort()
            return
        turn.answer = answer
        if session and answer is not None:
            history.append((str(turn.body.get("chatInput") or ""), answer))

    def _turn(self, req: Request) -> Turn:
        ctype = req.headers.get("content-type", "").lower()
        files: dict[str, tuple[str | None, str | None, bytes]] = {}
        if ctype.startswith("multipart/form-data"):
            form = req.form()
            body: dict[str, Any] = dict(form.fields)
            for part in form.parts:
                if part.is_file:
                    files[part.name] = (part.filename, part.content_type, part.data)
        elif req.body:
            doc = json.loads(req.body)
            body = doc if isinstance(doc, dict) else {"body": doc}
        else:
            body = {}
        return Turn(req.path, body, files)

    # -- auth ----------------------------------------------------------------------------------

    async def _authorized(self, req: Request, resp: Response) -> bool:
        if self.auth == "none":
            return True
        header = req.headers.get("authorization", "")
        refused: tuple[int, str] | None = None
        if self.auth == "basic":
            if not header.lower().startswith("basic "):
                refused = (401, "Authorization is required!")
            else:
                try:
                    user, _, password = base64.b64decode(header[6:]).decode(self.basic_encoding).partition(":")
                except (ValueError, UnicodeDecodeError):
                    user, password = "", None  # type: ignore[assignment]
                if not (user in self.basic_users and self.basic_users[user] == password):
                    refused = (401, "Authentication data is wrong!")
        elif self.auth == "header":
            if req.headers.get(self.header_name, None) not in self.api_keys:
                refused = (403, "Authorization data is wrong!")
        elif self.auth == "jwt":
            refused = self._jwt_refusal(header)
        else:
            raise AssertionError(self.auth)
        if refused is not None:  # n8n answers every auth failure in plain text with this header
            await resp.text(*refused, headers={"WWW-Authenticate": 'Basic realm="Webhook"'})
            return False
        return True

    def _jwt_refusal(self, header: str) -> tuple[int, str] | None:
        token = header.split(" ")[1] if " " in header else ""
        if not token:
            return (401, "No token provided")
        try:
            h, p, sig = token.strip().split(".")
            head = json.loads(_b64url_decode(h))
            payload = json.loads(_b64url_decode(p))
        except ValueError:
            return (403, "jwt malformed")
        digest = _JWT_HASH.get(self.jwt_algorithm)
        if digest is None or head.get("alg") != self.jwt_algorithm:
            return (403, "invalid algorithm")
        want = hmac.new(self.jwt_secret.encode(), f"{h}.{p}".encode(), digest).digest()
        if not hmac.compare_digest(want, _b64url_decode(sig)):
            return (403, "invalid signature")
        if isinstance(payload.get("exp"), (int, float)) and payload["exp"] < time.time():
            return (403, "jwt expired")
        self.jwt_payloads.append(payload)
        return None

    # -- faults --------------------------------------------------------------------------------

    async def error_body(self, resp: Response, status: int, headers: Mapping[str, str] | None) -> None:
        ctype, body = _STATUS_BODIES[status]
        if status == 404:
            await self._not_registered(resp.request, resp)
        elif ctype == "text":
            extra = {"WWW-Authenticate": 'Basic realm="Webhook"'} if status == 401 else None
            await resp.text(status, body, headers=extra)
        else:
            await resp.send(status, json.dumps(body, separators=(",", ":")).encode(),
                            "application/json; charset=utf-8")

    # -- answers -------------------------------------------------------------------------------

    async def _wait(self, resp: Response, seconds: float) -> None:
        if seconds > 0 and not await resp.stall(seconds):
            raise _Aborted

    async def _key_parameter_empty(self, resp: Response, s: SimpleNamespace) -> None:
        if s.mode in ("streaming", "stream_respond", "stream_respond_binary"):
            await resp.start_stream(s.status, "application/json; charset=utf-8", _STREAM_HEADERS)
            await self._line(resp, s, {"type": "error", "content": "Key parameter is empty",
                                       "metadata": self._meta("agent-1", "AI Agent", error=True)})
            await resp.end()
            return
        await resp.send(500, b'{"message":"Error in workflow"}', "application/json; charset=utf-8")

    async def _binary(self, resp: Response, s: SimpleNamespace) -> str:
        """A file answer (``respond_binary``, ``last_node_binary``) as n8n 2.40.7 sends it."""
        headers = {k.lower(): v for k, v in s.headers.items()}  # the node lower-cases its header names
        headers["content-security-policy"] = _SANDBOX_CSP
        if s.mode == "respond_binary":  # RespondToWebhook utils/binary.js getBinaryResponse
            headers.setdefault("content-type", s.mime)
            await resp.send(s.status, s.binary, None, headers)
        elif s.in_memory:  # webhook-request-handler.js sendStaticResponse: res.json(<Buffer>)
            headers["content-type"] = f"{s.mime}; charset=utf-8"
            body = json.dumps({"type": "Buffer", "data": list(s.binary)}, separators=(",", ":")).encode()
            await resp.send(s.status, body, None, headers)
        else:  # sendStreamResponse: the binary data service's stream, piped
            await resp.start_stream(s.status, s.mime, headers)
            await resp.write(s.binary)
            await resp.end()
        return f"<{len(s.binary)} bytes of {s.mime}>"

    async def _respond(self, resp: Response, s: SimpleNamespace) -> str | None:
        if s.mode in ("respond_binary", "last_node_binary"):
            return await self._binary(resp, s)
        if s.mode == "stream_respond_binary":  # the Respond node's sendResponse has nobody to answer
            await resp.start_stream(s.status, "application/json; charset=utf-8", _STREAM_HEADERS)
            await resp.end()
            return None
        if s.mode == "on_received":
            await resp.send(s.status, b'{"message":"Workflow was started"}', "application/json; charset=utf-8")
            return None
        if s.mode in ("streaming", "stream_respond"):
            return await self._stream(resp, s)
        for _ in s.tokens[1:]:
            await self._wait(resp, s.delay)
        answer = "".join(s.tokens)
        if s.fault in ("stall", "stall_pings"):
            await self._wait(resp, self.stall_seconds)
        if s.fault == "empty":
            await resp.send(s.status, b"", "application/json; charset=utf-8")
            return None
        if s.mode == "respond_text":  # express labels a string body text/html, and n8n keeps that
            await resp.send(s.status, answer.encode(), "text/html; charset=utf-8")
            return answer
        if s.mode == "all_entries":
            doc: Any = [{s.key: t} for t in s.tokens]
        else:
            doc = {s.key: answer}
            if s.usage:
                doc["tokenUsage"] = s.usage
        raw = json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()
        if s.fault == "invalid_json":
            raw = raw[: len(raw) // 2]
        elif s.fault == "non_utf8":
            raw = raw.replace(b"{", b'{"junk":"\xff\xfe",', 1)
        elif s.fault == "oversized":
            raw = raw[:-1] + b',"padding":"' + b"x" * self.oversized_bytes + b'"}'
        elif s.fault == "error_event":
            await resp.send(500, b'{"message":"Error in workflow"}', "application/json; charset=utf-8")
            return None
        if s.fault == "truncated":
            await resp.send_head(s.status, {"Content-Type": "application/json; charset=utf-8",
                                             "Content-Length": str(len(raw))})
            await resp.write_raw(raw[: len(raw) // 2])
            raise _Aborted
        await resp.send(s.status, raw, "application/json; charset=utf-8")
        return answer

    @staticmethod
    def _meta(node_id: str, name: str, *, error: bool = False) -> dict[str, Any]:
        if error:  # n8n orders these two the other way round and leaves out timestamp on error items
            return {"nodeId": node_id, "nodeName": name, "runIndex": 0, "itemIndex": 0}
        return {"nodeId": node_id, "nodeName": name, "itemIndex": 0, "runIndex": 0,
                "timestamp": int(time.time() * 1000)}

    async def _line(self, resp: Response, s: SimpleNamespace, obj: dict[str, Any] | bytes) -> None:
        data = obj if isinstance(obj, bytes) else json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()
        data += b"\n"
        if s.split:
            await resp.write_split(data)
        else:
            await resp.write(data)

    async def _stream(self, resp: Response, s: SimpleNamespace) -> str | None:
        await resp.start_stream(s.status, "application/json; charset=utf-8", _STREAM_HEADERS)
        if s.fault == "empty":
            return None
        if s.mode == "stream_respond":
            answer = "".join(s.tokens)
            doc: dict[str, Any] = {s.key: answer}
            if s.usage:
                doc["tokenUsage"] = s.usage
            meta = self._meta("respond-1", "Respond to Webhook")
            content = json.dumps(doc, separators=(",", ":"), ensure_ascii=False)
            block = b"".join(json.dumps(o, separators=(",", ":"), ensure_ascii=False).encode() + b"\n" for o in (
                {"type": "begin", "metadata": meta}, {"type": "item", "content": content, "metadata": meta},
                {"type": "end", "metadata": meta}))
            await resp.write(block)  # the Respond node flushes its three lines in one HTTP chunk
            return answer
        meta = self._meta("agent-1", "AI Agent")
        await self._line(resp, s, {"type": "begin", "metadata": meta})
        sent: list[str] = []
        s.next_keepalive = time.monotonic() + s.keepalive if s.keepalive else None
        for i, token in enumerate(s.tokens):
            if i:
                await self._wait_streaming(resp, s, s.delay)
            content: Any = {"text_chunk": token, "metadata": {}} if s.object_content else token
            await self._line(resp, s, {"type": "item", "content": content, "metadata": self._meta("agent-1", "AI Agent")})
            sent.append(token)
            if i == 0 and await self._after_first(resp, s):
                return None
        await self._line(resp, s, {"type": "end", "metadata": self._meta("agent-1", "AI Agent")})
        answer = "".join(sent)
        if s.second:
            m2 = self._meta("respond-2", "Respond to Webhook")
            for obj in ({"type": "begin", "metadata": m2}, {"type": "item", "content": s.second, "metadata": m2},
                        {"type": "end", "metadata": m2}):
                await self._line(resp, s, obj)
        if s.usage:
            m3 = self._meta("respond-usage", "Respond to Webhook")
            content = json.dumps({"tokenUsage": s.usage}, separators=(",", ":"))
            for obj in ({"type": "begin", "metadata": m3}, {"type": "item", "content": content, "metadata": m3},
                        {"type": "end", "metadata": m3}):
                await self._line(resp, s, obj)
        return answer

    async def _wait_streaming(self, resp: Response, s: SimpleNamespace, seconds: float) -> None:
        """Wait between tokens; n8n's keep-alive timer keeps ticking meanwhile (every 30 s from the start)."""
        end = time.monotonic() + seconds
        while True:
            now = time.monotonic()
            due = s.next_keepalive
            if due is None or due >= end:
                await self._wait(resp, end - now)
                return
            await self._wait(resp, due - now)
            await self._line(resp, s, {"type": "keepalive"})
            s.next_keepalive = due + s.keepalive

    async def _after_first(self, resp: Response, s: SimpleNamespace) -> bool:
        """Apply a mid-stream fault after the first token; True when the stream is over."""
        f = s.fault
        if f == "truncated":
            raise _Aborted
        if f == "error_event":
            await self._line(resp, s, {"type": "error", "content": self.error_message,
                                       "metadata": self._meta("agent-1", "AI Agent", error=True)})
            return True
        if f == "invalid_json":
            await self._line(resp, s, b'{"type":"item","content":"bro')
            return True
        if f == "non_utf8":
            await self._line(resp, s, b'{"type":"item","content":"\xff\xfe"}')
            return True
        if f == "oversized":
            await self._line(resp, s, b'{"type":"item","content":"' + b"x" * self.oversized_bytes + b'"}')
            return True
        if f == "stall":
            await self._wait(resp, self.stall_seconds)
        if f == "stall_pings":
            deadline = time.monotonic() + self.stall_seconds
            while time.monotonic() < deadline:
                await self._wait(resp, min(self.stall_ping_every, deadline - time.monotonic()))
                await self._line(resp, s, {"type": "keepalive"})
        return False
