"""Fake of Ant Group Tbox's (百宝箱) agent API (docs/platforms.md §6, tboxsdk 0.0.12).

``POST /api/chat`` (``appId``, ``query``, ``userId`` required) and ``POST /api/completion``
(``inputs`` instead of ``query``) answer ``text/event-stream``: ``id:``/``event:``/``data:`` lines,
``event: message`` whose data is ``{"lane", "type", "payload"}`` with ``payload`` a JSON *string*.
One answer, in order: [``thinking``*] → ``header`` (lane ``default``, ``mediaType`` text, the
conversation id as both ``sessionId`` and ``conversationId``) → ``chunk``* (``{"text"}``) →
[a second lane ``image``: ``header`` + ``chunk`` with ``url`` list] → [``followup``] →
[``charge`` with token counts] → [``end``]. Like the real service as LangBot's old runner saw it,
``end`` is *not* sent by default (``send_end``): the body just ends.

Auth is ``Authorization: <token>`` (raw; a ``Bearer`` prefix is tolerated but recorded). A wrong
token is answered 403 with the envelope ``{"errorCode", "errorMsg", "data", "traceId"}``; a
refused request (unknown app, missing field, unknown conversation, unknown file) is the same
envelope with status **200** and ``application/json`` instead of a stream.

Assumptions (Tbox publishes neither): the error codes and messages, the ``charge`` payload
(``inputTokens``/``outputTokens``/``totalTokens``), the ``followup`` payload (``{"questions": [..]}``)
and "conversation not found" (``CONVERSATION_NOT_EXIST`` / 会话不存在). Conversations belong to
the user that opened them: another user's id is "not found" too.

``POST /api/conversation/create`` ``{appId}`` → ``data`` = a new conversation id;
``POST /api/file/upload`` (multipart ``file``) → ``data`` = a file id.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from .http_server import PlatformFake, Request, Response, fault_names

__all__ = ["FAULTS", "Chat", "Conversation", "FakeTbox"]

MiB = 1024 * 1024
# status -> (errorCode, errorMsg) of the http_<status> faults
_FAULT_ERRORS: dict[int, tuple[str, str]] = {
    400: ("PARAM_INVALID", "request parameter is invalid"),
    401: ("UNAUTHORIZED", "authorization token is invalid or expired"),
    403: ("PERMISSION_DENIED", "no permission to access this agent"),
    404: ("NOT_FOUND", "resource not found"),
    413: ("PAYLOAD_TOO_LARGE", "request entity too large"),
    429: ("RATE_LIMITED", "too many requests, rate limit exceeded"),
    500: ("SYSTEM_ERROR", "system error, please try again later"),
    502: ("BAD_GATEWAY", "bad gateway"),
    503: ("SERVICE_UNAVAILABLE", "service unavailable"),
}
FAULTS: tuple[str, ...] = fault_names(_FAULT_ERRORS, extra=("stall_pings", "json_error_200", "type_error"))
ERROR_EVENT = {"errorCode": "MODEL_ERROR", "description": "大模型调用失败：模型服务异常"}


@dataclass
class Conversation:
    id: str
    app_id: str
    user: str
    turns: list[tuple[str, str]] = field(default_factory=list)  # (query, answer)


@dataclass
class Chat:
    """One ``/api/chat`` or ``/api/completion`` call as received."""

    path: str
    body: dict[str, Any]
    credential: str
    user: str
    conversation: str  # the conversationId sent ("" = none)
    files: list[dict[str, Any]]


class _Refused(Exception):
    def __init__(self, code: str, msg: str, status: int = 200) -> None:
        super().__init__(msg)
        self.code, self.msg, self.status = code, msg, status


class _Aborted(Exception):
    """The client went away or a fault closed the connection."""


def _id() -> str:
    return uuid.uuid4().hex


class FakeTbox(PlatformFake):
    """``with FakeTbox() as srv: config base-url = srv.base_url, api-key = srv.api_key, app-id = srv.app_id``."""

    FAULTS = FAULTS
    server_name = "Tengine"
    proxy_name = "Tengine"

    def __init__(self, api_key: str = "pat_tbox_test_token_0001", app_id: str = "202501010000000001", *,
                 port: int = 0) -> None:
        super().__init__(port=port)
        self.api_key = api_key
        self.api_keys: set[str] = set()  # further accepted tokens (a second bot)
        self.app_id = app_id
        self.apps: set[str] = {app_id}
        # -- scenario knobs (read once at the start of each answer) --
        self.answer_tokens: list[str] = ["Hello", " from", " Tbox", "."]
        self.token_delay = 0.0
        self.include_usage = True
        self.send_end = False  # the real service often sends no end message
        self.thinking: list[str] = []  # thinking messages before the answer
        self.follow_ups: list[str] = []
        self.image_urls: list[str] = []  # a second lane "image"
        self.headerless = False  # the first chunk arrives before the lane's header
        self.id_spelling: tuple[str, ...] = ("sessionId", "conversationId")  # keys of the id in the header
        self.id_in_chunks = False  # chunks also carry conversationId
        self.revoke = False  # moderation withdraws the answer after the first token
        self.split_writes = False
        self.stall_seconds = 30.0
        self.stall_ping_every = 0.2
        self.oversized_bytes = 9 * MiB
        self.max_upload_bytes = 50 * MiB
        self.upload_delay = 0.0  # seconds each upload takes
        # -- recorded state --
        self.chats: list[Chat] = []
        self.conversations: dict[str, Conversation] = {}
        self.uploads: dict[str, tuple[str, bytes, str]] = {}  # id -> (name, data, content type)

        self.add_route("POST", "/api/chat", self._chat)
        self.add_route("POST", "/api/completion", self._chat)
        self.add_route("POST", "/api/conversation/create", self._create)
        self.add_route("POST", "/api/file/upload", self._upload)

    # -- public helpers ----------------------------------------------------------------------

    def forget_conversations(self) -> None:
        """Every conversation is deleted upstream: continuing one is refused as not existing."""
        self.conversations.clear()

    def chat_requests(self) -> list[Request]:
        return [r for r in self.requests if r.method == "POST" and r.path in ("/api/chat", "/api/completion")]

    # -- envelope ----------------------------------------------------------------------------

    async def _envelope(self, resp: Response, code: str, msg: str, data: Any = None, status: int = 200,
                        headers: Mapping[str, str] | None = None) -> None:
        doc = {"errorCode": code, "errorMsg": msg, "data": data, "traceId": _id()[:24]}
        await resp.send(status, json.dumps(doc, ensure_ascii=False).encode(), "application/json;charset=UTF-8",
                        headers)

    async def error_body(self, resp: Response, status: int, headers: Mapping[str, str] | None) -> None:
        code, msg = _FAULT_ERRORS[status]
        await self._envelope(resp, code, msg, status=status, headers=headers)

    def _auth(self, req: Request) -> str:
        token = req.headers.get("authorization", "").strip()
        raw = token[7:].strip() if token.lower().startswith("bearer ") else token
        if not raw or (raw != self.api_key and raw not in self.api_keys):
            raise _Refused("AUTH_TOKEN_INVALID", "authorization token is invalid", 403)
        return raw

    @staticmethod
    def _json(req: Request) -> dict[str, Any]:
        try:
            body = req.json()
        except (ValueError, UnicodeDecodeError):
            raise _Refused("PARAM_INVALID", "request body is not valid JSON") from None
        if not isinstance(body, dict):
            raise _Refused("PARAM_INVALID", "request body must be a JSON object")
        return body

    # -- routes ------------------------------------------------------------------------------

    async def _create(self, req: Request, resp: Response) -> None:
        try:
            self._auth(req)
            body = self._json(req)
            if body.get("appId") not in self.apps:
                raise _Refused("APP_NOT_EXIST", "智能体不存在或未发布 (app not exist)")
        except _Refused as e:
            await self._envelope(resp, e.code, e.msg, status=e.status)
            return
        conv = Conversation(_id(), str(body["appId"]), "")
        self.conversations[conv.id] = conv
        await self._envelope(resp, "0", "success", conv.id)

    async def _upload(self, req: Request, resp: Response) -> None:
        try:
            self._auth(req)
            try:
                form = req.form()
            except ValueError:
                raise _Refused("PARAM_INVALID", "multipart/form-data with a file part is required") from None
            part = form.files.get("file")
            if part is None or not part.data:
                raise _Refused("FILE_EMPTY", "file is empty")
            if len(part.data) > self.max_upload_bytes:
                raise _Refused("FILE_TOO_LARGE", "file size exceeds the limit")
        except _Refused as e:
            await self._envelope(resp, e.code, e.msg, status=e.status)
            return
        if self.upload_delay and not await resp.stall(self.upload_delay):
            return
        fid = "file_" + _id()[:20]
        self.uploads[fid] = (part.filename or "file", part.data, part.content_type or "")
        await self._envelope(resp, "0", "success", fid)

    def _snapshot(self) -> SimpleNamespace:
        return SimpleNamespace(
            fault=self.fault, tokens=list(self.answer_tokens), delay=self.token_delay, usage=self.include_usage,
            end=self.send_end, thinking=list(self.thinking), follow_ups=list(self.follow_ups),
            images=list(self.image_urls), headerless=self.headerless, id_keys=tuple(self.id_spelling),
            id_in_chunks=self.id_in_chunks, revoke=self.revoke, split=self.split_writes,
        )

    async def _chat(self, req: Request, resp: Response) -> None:
        s = self._snapshot()
        completion = req.path == "/api/completion"
        try:
            credential = self._auth(req)
            if await self.head_fault(resp, s.fault):
                return
            body = self._json(req)
            if s.fault == "json_error_200":
                raise _Refused("SYSTEM_BUSY", "系统繁忙，请稍后再试 (system busy)")
            user = body.get("userId")
            if body.get("appId") not in self.apps:
                raise _Refused("APP_NOT_EXIST", "智能体不存在或未发布 (app not exist)")
            if not isinstance(user, str) or not user:
                raise _Refused("PARAM_INVALID", "userId is required")
            if completion:
                if not isinstance(body.get("inputs", {}), dict):
                    raise _Refused("PARAM_INVALID", "inputs must be an object")
            elif not isinstance(body.get("query"), str) or not body["query"].strip():
                raise _Refused("PARAM_INVALID", "query is required")
            files = body.get("files") or []
            for f in files:
                if not isinstance(f, dict) or f.get("fileId") not in self.uploads:
                    raise _Refused("FILE_NOT_EXIST", "file not exist")
                if f.get("type") not in ("IMAGE", "AUDIO", "VIDEO", "FILE"):
                    raise _Refused("PARAM_INVALID", "file type must be IMAGE, AUDIO, VIDEO or FILE")
            cid = str(body.get("conversationId") or "")
            self.chats.append(Chat(req.path, body, credential, user, cid, list(files)))
            if cid:
                conv = self.conversations.get(cid)
                if conv is None or conv.user not in ("", user) or conv.app_id != body["appId"]:
                    raise _Refused("CONVERSATION_NOT_EXIST", "会话不存在 (conversation not exist)")
                conv.user = user
            else:
                conv = Conversation(_id(), str(body["appId"]), user)
                self.conversations[conv.id] = conv
        except _Refused as e:
            await self._envelope(resp, e.code, e.msg, status=e.status)
            return
        try:
            answer = await self._stream(s, resp, conv)
        except _Aborted:
            await resp.abort()
            return
        if answer is not None:
            conv.turns.append((str(body.get("query") or json.dumps(body.get("inputs"))), answer))

    # -- stream ------------------------------------------------------------------------------

    async def _event(self, s: SimpleNamespace, resp: Response, n: int, event: str, data: Any) -> None:
        text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, separators=(",", ":"))
        payload = f"id:{n}\nevent:{event}\ndata:{text}\n\n".encode()
        if resp.client_disconnected:
            raise _Aborted
        if s.split:
            await resp.write_split(payload)
        else:
            await resp.write(payload)

    async def _msg(self, s: SimpleNamespace, resp: Response, st: dict[str, int], mtype: str, payload: Any,
                   lane: str = "default") -> None:
        st["n"] += 1
        data = {"lane": lane, "type": mtype, "payload": json.dumps(payload, ensure_ascii=False)}
        await self._event(s, resp, st["n"], "message", data)

    async def _pause(self, resp: Response, seconds: float) -> None:
        if seconds > 0 and not await resp.stall(seconds):
            raise _Aborted

    async def _stream(self, s: SimpleNamespace, resp: Response, conv: Conversation) -> str | None:
        """Write the answer; the answer text when it went out completely."""
        await resp.start_stream(200, "text/event-stream;charset=UTF-8")
        if s.fault == "empty":
            return None
        st = {"n": 0}
        if s.fault == "invalid_json":
            await resp.write(b"id:1\nevent:message\ndata:{not json\n\n")
            return None
        for piece in s.thinking:
            await self._msg(s, resp, st, "thinking", {"text": piece})
        header = {"mediaType": "text", **{k: conv.id for k in s.id_keys}}
        tokens = s.tokens
        if s.headerless and tokens:
            await self._msg(s, resp, st, "chunk", {"text": tokens[0]})
            tokens = tokens[1:]
        await self._msg(s, resp, st, "header", header)
        if s.fault == "non_utf8":
            await resp.write(b'id:99\nevent:message\ndata:{"lane":"default","type":"chunk","payload":"\xff\xfe"}\n\n')
        if s.fault == "oversized":
            await resp.write(b'id:99\nevent:message\ndata:{"lane":"default","type":"chunk","payload":"')
            left = self.oversized_bytes
            while left > 0:
                await resp.write(b"x" * min(left, 64 * 1024))
                left -= 64 * 1024
            await resp.write(b'"}\n\n')
        answer = "".join(s.tokens)
        for i, tok in enumerate(tokens):
            if i:
                await self._pause(resp, s.delay)
            chunk = {"text": tok, **({"conversationId": conv.id} if s.id_in_chunks else {})}
            await self._msg(s, resp, st, "chunk", chunk)
            if i == 0 and await self._after_first(s, resp, st):
                return None
        if s.images:
            await self._msg(s, resp, st, "header", {"mediaType": "image"}, lane="image")
            await self._msg(s, resp, st, "chunk", {"url": s.images}, lane="image")
        if s.follow_ups:
            await self._msg(s, resp, st, "followup", {"questions": s.follow_ups})
        if s.usage:
            out = max(1, len(answer) // 2)
            await self._msg(s, resp, st, "charge", {"inputTokens": 42, "outputTokens": out, "totalTokens": 42 + out})
        if s.end:
            await self._msg(s, resp, st, "end", {})
        return answer

    async def _after_first(self, s: SimpleNamespace, resp: Response, st: dict[str, int]) -> bool:
        """Faults that strike after the first piece of the answer; True when the answer is over."""
        if s.fault == "truncated":
            raise _Aborted
        if s.fault == "error_event":
            st["n"] += 1
            await self._event(s, resp, st["n"], "error", ERROR_EVENT)
            return True
        if s.fault == "type_error":
            await self._msg(s, resp, st, "error", {"errorCode": "CONTENT_RISK", "errorMsg": "内容安全校验未通过"})
            return True
        if s.revoke:
            await self._msg(s, resp, st, "revoke", {})
            return True
        if s.fault == "stall":
            await self._pause(resp, self.stall_seconds)
        if s.fault == "stall_pings":
            deadline = time.monotonic() + self.stall_seconds
            while time.monotonic() < deadline:
                await self._pause(resp, self.stall_ping_every)
                await self._msg(s, resp, st, "chunk", {"text": ""})
        return False
