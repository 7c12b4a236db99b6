"""Faithful fake of the Coze Open API v3 chat (see docs/platforms.md section 3).

Stream (``POST /v3/chat`` with ``stream: true``): every event is exactly two lines,
``event:<name>`` and ``data:<json>`` with no space after the colon, blank-line separated:

    conversation.chat.created -> conversation.chat.in_progress
    [tools]     message.completed(function_call) -> message.completed(tool_output)
    [reasoning] message.delta(reasoning_content, content "")*
    message.delta(answer)* -> message.completed(answer, the whole text again)
    [extra_answers] (message.delta* -> message.completed) per further answer message
    message.completed(verbose generate_answer_finish) -> message.completed(follow_up)*
    conversation.chat.completed(usage) -> done ``data:"[DONE]"`` (``trailing_blank_line``: whether
    a blank line follows it; real Coze often ends the body right after it)

Variants: ``fail_chat`` ends with ``conversation.chat.failed`` (``last_error``); ``requires_action``
ends with ``conversation.chat.requires_action`` after a local function call (continued through
``/v3/chat/submit_tool_outputs``); ``completed_only`` sends the answer only as message.completed;
``empty_answer`` completes with no answer message. Refusals come as HTTP 200 with a business
envelope ``{"code": <non-zero>, "msg", "detail": {"logid"}}`` (unknown conversation 4002, unknown
bot 4006, a chat already running in the conversation 4016, ``business_error``); a bad token is
HTTP 401 code 4100. Non-stream chats are polled through ``/v3/chat/retrieve`` (GET and POST) and
read with ``/v3/chat/message/list``. ``/v1/files/upload`` stores files for ``object_string`` parts.

``DELETE /v1/conversations/{id}`` deletes a conversation and its messages (cozepy
``ConversationsClient.delete``: HTTP 200 ``{"code": 0, "msg": "", "data": {}}``). Only the account
whose token created it may: an unknown id and another account's conversation are both "not found"
(Coze Studio @4f786d6a ``backend/application/conversation/conversation.go`` ``DeleteConversation``:
``ErrConversationNotFound`` for both, sent as HTTP 200 with the business code; the cloud's code for it
is taken to be 4002, as for ``/v3/chat``). Deletions are recorded in ``deleted``.
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

__all__ = ["FAULTS", "Chat", "Conversation", "FakeCoze", "UploadedFile"]

# status -> (code, msg) for the http_<status> faults
_FAULT_ERRORS: dict[int, tuple[int, str]] = {
    400: (4000, "The request parameters are incorrect. Please check your input."),
    401: (4100, "authentication is invalid"),
    403: (4101, "The token you entered does not have permission to access this resource."),
    404: (4200, "Requested resource not found."),
    413: (4302, "The size of the file exceeds the limit."),
    429: (4009, "The request frequency exceeds the limit. Please try again later."),
    500: (5000, "We're currently experiencing server issues. Please try your request again after a short delay."),
    502: (5000, "Bad Gateway"),
    503: (5000, "Service Unavailable"),
}
FAULTS: tuple[str, ...] = fault_names(_FAULT_ERRORS, extra=("stall_pings",))
_ERROR_EVENT = {"code": 5000, "msg": "We're currently experiencing server issues. Please try again later."}
_PART_TYPES = {"text", "image", "file", "audio"}
MiB = 1024 * 1024


@dataclass
class Conversation:
    id: str
    bot_id: str
    user: str
    created_at: int
    messages: list[dict[str, Any]] = field(default_factory=list)  # saved history (auto_save_history)
    running: str | None = None  # chat id of a chat in progress
    owner: str = ""  # the token (account) that created it


@dataclass
class Chat:
    """One ``/v3/chat`` call."""

    id: str
    conversation_id: str
    bot_id: str
    user: str
    stream: bool
    question: dict[str, Any]
    parts: list[dict[str, Any]]  # the question's object_string parts (or one text part)
    custom_variables: dict[str, Any]
    auto_save_history: bool
    created_at: int
    status: str = "created"
    answer: str = ""
    messages: list[dict[str, Any]] = field(default_factory=list)
    usage: dict[str, int] | None = None
    last_error: dict[str, Any] = field(default_factory=lambda: {"code": 0, "msg": ""})
    required_action: dict[str, Any] | None = None
    cancel_event: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass
class UploadedFile:
    id: str
    name: str
    data: bytes
    content_type: str
    created_at: int


class _Refused(Exception):
    def __init__(self, code: int, msg: str, status: int = 200) -> None:
        super().__init__(msg)
        self.code, self.msg, self.status = code, msg, status


class _Aborted(Exception):
    """The client went away or a fault closed the connection."""


def _now() -> int:
    return int(time.time())


def _id() -> str:
    return str(uuid.uuid4().int)[:19]  # Coze ids are 19-digit numbers sent as strings


class FakeCoze(PlatformFake):
    FAULTS = FAULTS
    proxy_name = "openresty"

    """Coze Open API fake: ``with FakeCoze() as srv: config api-base = srv.base_url``."""

    server_name = "volc-dcdn"

    def __init__(self, api_key: str = "pat_test_token_123456", bot_id: str = "7400000000000000001", *,
                 port: int = 0) -> None:
        super().__init__(port=port)
        self.api_key = api_key
        self.api_keys: set[str] = set()  # further accepted tokens (a second bot)
        self.bot_id = bot_id
        self.bot_ids: set[str] = set()
        # -- scenario knobs (read at the start of each request) --
        self.answer_tokens: list[str] = ["Hello", ", ", "world", "!"]
        self.token_delay = 0.0
        self.reasoning: list[str] = []
        self.include_usage = True
        self.follow_ups: list[str] = ["What else can you do?", "Tell me more about it."]
        self.verbose = True
        self.tools = False  # a plugin call (function_call + tool_output) before the answer
        self.tool_seconds = 0.0  # how long that plugin runs: Coze sends nothing meanwhile
        self.extra_answers: list[str] = []  # further answer messages (multi-answer bots)
        self.completed_only = False  # answer only in message.completed, no deltas
        self.empty_answer = False
        self.fail_chat: dict[str, Any] | None = None  # last_error of a conversation.chat.failed
        self.requires_action = False
        # the tool_calls of the requires_action: [{"name", "arguments"(dict)}]; None = get_local_time
        # (shapes: coze-dev/coze-py cozepy/chat/__init__.py ChatRequiredAction / ChatToolCall)
        self.action_calls: list[dict[str, Any]] | None = None
        self.resume_tokens: list[str] | None = None  # the answer streamed after submit_tool_outputs
        self.business_error: dict[str, Any] | None = None  # {"code", "msg"} at HTTP 200 instead of a stream
        self.trailing_blank_line = True
        self.split_writes = False
        # -- faults --
        self.stall_seconds = 3600.0
        self.stall_ping_every = 0.25
        self.oversized_bytes = 9 * MiB
        self.max_upload_bytes = 512 * MiB
        # -- recorded state --
        self.conversations: dict[str, Conversation] = {}
        self.chats: dict[str, Chat] = {}
        self.uploads: dict[str, UploadedFile] = {}
        self.cancelled: list[tuple[str, str]] = []  # (conversation_id, chat_id) of cancel calls
        self.tool_outputs: list[dict[str, Any]] = []
        self.deleted: list[str] = []  # conversation ids DELETE removed

        self.add_route("POST", "/v3/chat", self._chat)
        self.add_route("POST", "/v3/chat/retrieve", self._retrieve)
        self.add_route("GET", "/v3/chat/retrieve", self._retrieve)
        self.add_route("GET", "/v3/chat/message/list", self._message_list)
        self.add_route("POST", "/v3/chat/cancel", self._cancel)
        self.add_route("POST", "/v3/chat/submit_tool_outputs", self._submit_tool_outputs)
        self.add_route("POST", "/v1/conversation/create", self._conversation_create)
        self.add_route("DELETE", "/v1/conversations/{conversation_id}", self._conversation_delete)
        self.add_route("POST", "/v1/files/upload", self._upload)
        self.add_route("GET", "/v1/files/retrieve", self._file_retrieve)

    # -- public helpers ----------------------------------------------------------------------

    def expire_actions(self) -> None:
        """Every chat waiting in requires_action is dropped (a later submit is refused)."""
        for chat in self.chats.values():
            if chat.status == "requires_action":
                chat.status = "expired"

    def forget_conversations(self) -> None:
        """Delete every conversation (old ids now get code 4002)."""
        self.conversations.clear()

    def chat_requests(self) -> list[Request]:
        return self.find_requests("POST", "/v3/chat")

    # -- envelopes ---------------------------------------------------------------------------

    async def _envelope(self, resp: Response, code: int, msg: str, status: int = 200,
                        data: Any = None) -> None:
        logid = time.strftime("%Y%m%d%H%M%S") + uuid.uuid4().hex[:20].upper()
        body: dict[str, Any] = {"code": code, "msg": msg}
        if data is not None:
            body["data"] = data
        body["detail"] = {"logid": logid}
        await resp.json(status, body, {"x-tt-logid": logid})

    def _auth(self, req: Request) -> str:
        scheme, _, token = req.headers.get("authorization", "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token or (token != self.api_key and token not in self.api_keys):
            raise _Refused(4100, "authentication is invalid", 401)
        return token

    @staticmethod
    def _body(req: Request) -> dict[str, Any]:
        try:
            body = req.json()
        except (ValueError, UnicodeDecodeError):
            raise _Refused(4000, "The field http body provided is not a valid json or chat request.") from None
        if not isinstance(body, dict):
            raise _Refused(4000, "The field http body provided is not a valid json or chat request.")
        return body

    async def not_found(self, req: Request, resp: Response) -> None:
        await resp.text(404, "404 page not found")  # the Go server's own text

    # -- /v3/chat ----------------------------------------------------------------------------

    def _snapshot(self) -> SimpleNamespace:
        return SimpleNamespace(
            tokens=list(self.answer_tokens), token_delay=self.token_delay, reasoning=list(self.reasoning),
            include_usage=self.include_usage, follow_ups=list(self.follow_ups), verbose=self.verbose,
            tools=self.tools, tool_seconds=self.tool_seconds, extra_answers=list(self.extra_answers), completed_only=self.completed_only,
            empty_answer=self.empty_answer, fail_chat=dict(self.fail_chat) if self.fail_chat else None,
            requires_action=self.requires_action, action_calls=self.action_calls,
            resume_tokens=self.resume_tokens, trailing_blank_line=self.trailing_blank_line,
            split_writes=self.split_writes, fault=self.fault, stall_seconds=self.stall_seconds,
            stall_ping_every=self.stall_ping_every, oversized_bytes=self.oversized_bytes,
            business_error=dict(self.business_error) if self.business_error else None,
        )

    async def error_body(self, resp: Response, status: int, headers: Mapping[str, str] | None) -> None:
        code, msg = _FAULT_ERRORS[status]
        await self._envelope(resp, code, msg, status)

    async def _pre_fault(self, s: SimpleNamespace, resp: Response) -> bool:
        return await self.head_fault(resp, s.fault, stall_seconds=s.stall_seconds)

    def _parts(self, msg: dict[str, Any]) -> list[dict[str, Any]]:
        ctype = msg.get("content_type") or "text"
        content = msg.get("content")
        if not isinstance(content, str):
            raise _Refused(4000, "additional_messages.content must be a string")
        if ctype == "text":
            return [{"type": "text", "text": content}]
        if ctype != "object_string":
            raise _Refused(4000, f"unsupported content_type {ctype!r}")
        try:
            parts = json.loads(content)  # a JSON-encoded string holding the array
        except ValueError:
            raise _Refused(4000, "object_string content is not valid JSON") from None
        if not isinstance(parts, list) or not parts:
            raise _Refused(4000, "object_string content must be a non-empty array")
        for p in parts:
            if not isinstance(p, dict) or p.get("type") not in _PART_TYPES:
                raise _Refused(4000, "object_string item has an invalid type")
            if p["type"] == "text":
                if not isinstance(p.get("text"), str):
                    raise _Refused(4000, "text item needs text")
            elif p.get("file_id"):
                if str(p["file_id"]) not in self.uploads:
                    raise _Refused(4000, f"file_id {p['file_id']} is invalid")
            elif not p.get("file_url"):
                raise _Refused(4000, f"{p['type']} item needs file_id or file_url")
        return parts

    async def _chat(self, req: Request, resp: Response) -> None:
        s = self._snapshot()
        if await self._pre_fault(s, resp):
            return
        try:
            token = self._auth(req)
            body = self._body(req)
            bot = body.get("bot_id")
            user = body.get("user_id")
            if not isinstance(bot, str) or not bot or not isinstance(user, str) or not user:
                raise _Refused(4000, "bot_id and user_id are required strings")
            if bot != self.bot_id and bot not in self.bot_ids:
                raise _Refused(4006, f"invalid bot: bot_id={bot} does not exist or is not published to the API")
            stream = body.get("stream") is True
            auto_save = body.get("auto_save_history", True) is not False
            if not stream and not auto_save:
                raise _Refused(4007, "stream=false is only allowed when auto_save_history=true")
            messages = body.get("additional_messages") or []
            if not isinstance(messages, list) or len(messages) > 100:
                raise _Refused(4004, "additional_messages exceeds the limit")
            question = messages[-1] if messages else {"content": "", "content_type": "text"}
            parts = self._parts(question) if messages else []
            variables = body.get("custom_variables") or {}
            if not isinstance(variables, dict) or any(not isinstance(v, str) for v in variables.values()):
                raise _Refused(4000, "custom_variables must be a map of strings")
            if "conversation_id" in body:
                raise _Refused(4000, "conversation_id is a query parameter")  # the SDK never sends it in the body
            cid = req.query.get("conversation_id", "")
            if cid:
                conv = self.conversations.get(cid)
                if conv is None:
                    raise _Refused(4002, f"invalid conversation: conversation_id={cid} not found")
                if conv.running is not None:
                    raise _Refused(4016, "Cannot send a new message while a chat is in progress in this conversation")
            if s.business_error:
                raise _Refused(int(s.business_error.get("code", 4000)), str(s.business_error.get("msg", "")))
        except _Refused as e:
            await self._envelope(resp, e.code, e.msg, e.status)
            return
        if not cid:
            cid = _id()
            self.conversations[cid] = Conversation(cid, bot, user, _now(), owner=token)
        conv = self.conversations[cid]
        chat = Chat(_id(), cid, bot, user, stream, question, parts, dict(variables), auto_save, _now())
        self.chats[chat.id] = chat
        conv.running = chat.id
        if auto_save and messages:
            conv.messages.extend(messages)
        try:
            if stream:
                await self._stream(s, chat, resp)
            else:
                await self._envelope(resp, 0, "", data=self._chat_obj(chat, "in_progress"))
                await self._run_silently(s, chat)
        except _Aborted:
            await resp.abort()
        finally:
            conv.running = None
            if chat.status in ("created", "in_progress"):
                chat.status = "failed"
            if auto_save and chat.answer:
                conv.messages.append({"role": "assistant", "type": "answer", "content": chat.answer})

    def _chat_obj(self, chat: Chat, status: str | None = None) -> dict[str, Any]:
        obj: dict[str, Any] = {
            "id": chat.id,
            "conversation_id": chat.conversation_id,
            "bot_id": chat.bot_id,
            "created_at": chat.created_at,
            "last_error": chat.last_error,
            "status": status or chat.status,
            "section_id": chat.conversation_id,
        }
        if chat.status == "completed":
            obj["completed_at"] = _now()
            if chat.usage is not None:
                obj["usage"] = chat.usage
        if chat.status == "failed":
            obj["failed_at"] = _now()
        if chat.required_action is not None:
            obj["required_action"] = chat.required_action
        return obj

    def _message(self, chat: Chat, mid: str, mtype: str, content: str, **extra: Any) -> dict[str, Any]:
        msg = {
            "id": mid,
            "conversation_id": chat.conversation_id,
            "bot_id": chat.bot_id,
            "role": "assistant",
            "type": mtype,
            "content": content,
            "content_type": "text",
            "chat_id": chat.id,
            "section_id": chat.conversation_id,
        }
        msg.update(extra)
        return msg

    async def _send(self, s: SimpleNamespace, resp: Response, name: str, data: Any, *, last: bool = False) -> None:
        if last:
            # like Coze, a chat that has ended frees its conversation before the client reads [DONE]
            # (not when this handler returns, which races a client that sends the next message at once)
            for conv in self.conversations.values():
                running = self.chats.get(conv.running) if conv.running else None
                if running is not None and running.status not in ("created", "in_progress"):
                    conv.running = None
        payload = f"event:{name}\ndata:{json.dumps(data, ensure_ascii=False)}".encode()
        if not (last and not s.trailing_blank_line):
            payload += b"\n\n"
        if s.split_writes:
            await resp.write_split(payload)
        else:
            await resp.write(payload)

    async def _wait(self, chat: Chat, resp: Response | None, seconds: float) -> bool:
        """Sleep; True when the chat was cancelled meanwhile. Raises _Aborted if the client left."""
        deadline = time.monotonic() + seconds
        while not chat.cancel_event.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if resp is not None and resp.client_disconnected:
                self.client_disconnects += 1
                raise _Aborted
            try:
                await asyncio.wait_for(chat.cancel_event.wait(), min(left, 0.1))
            except TimeoutError:
                pass
        return True

    async def _stream(self, s: SimpleNamespace, chat: Chat, resp: Response) -> None:
        headers = {"Connection": "close"} if s.fault == "empty" else None
        await resp.start_stream(200, "text/event-stream", headers)
        if s.fault == "empty":
            chat.status = "failed"
            return
        await self._send(s, resp, "conversation.chat.created", self._chat_obj(chat, "created"))
        chat.status = "in_progress"
        await self._send(s, resp, "conversation.chat.in_progress", self._chat_obj(chat))
        if s.fault == "invalid_json":
            await resp.write(b"event:conversation.message.delta\ndata:{not json\n\n")
            return
        if s.fault == "non_utf8":
            raw = json.dumps(self._message(chat, _id(), "answer", "\x00BAD\x00")).encode()
            await resp.write(b"event:conversation.message.delta\ndata:" + raw.replace(b"\\u0000BAD\\u0000", b"\xff\xfe")
                             + b"\n\n")
        if s.fault == "oversized":
            await self._oversized(s, chat, resp)
        if s.tools or s.requires_action:
            await self._tool_step(s, chat, resp)
            if s.requires_action:
                return
        outcome = await self._answers(s, chat, resp)
        if outcome == "cancelled":
            chat.status = "canceled"
            await self._send(s, resp, "conversation.chat.canceled", self._chat_obj(chat))
            await self._send(s, resp, "done", "[DONE]", last=True)
            return
        if outcome:
            return
        await self._finish(s, chat, resp)

    async def _oversized(self, s: SimpleNamespace, chat: Chat, resp: Response) -> None:
        head = json.dumps(self._message(chat, _id(), "answer", "\x00PAD\x00")).encode()
        prefix, _, suffix = head.partition(b"\\u0000PAD\\u0000")
        await resp.write(b"event:conversation.message.delta\ndata:" + prefix)
        chunk = b"x" * (64 * 1024)
        left = s.oversized_bytes
        while left > 0:
            await resp.write(chunk[: min(left, len(chunk))])
            left -= len(chunk)
        await resp.write(suffix + b"\n\n")

    async def _tool_step(self, s: SimpleNamespace, chat: Chat, resp: Response) -> None:
        call = {"name": "weather-getWeather", "arguments": {"city": "Berlin"}, "plugin_id": "7300000000000000001",
                "api_id": "7300000000000000002", "plugin_type": 1, "thought": "The user asks for the weather."}
        call_id = _id()
        await self._send(s, resp, "conversation.message.completed",
                         self._message(chat, call_id, "function_call", json.dumps(call, ensure_ascii=False)))
        if s.requires_action:
            chat.status = "requires_action"
            specs = s.action_calls or [{"name": "get_local_time", "arguments": {"tz": "Europe/Berlin"}}]
            # arguments is a JSON string (ChatToolCallFunction.arguments: str)
            calls = [{"id": call_id if i == 0 else _id(), "type": "function",
                      "function": {"name": c["name"], "arguments": json.dumps(c.get("arguments") or {})}}
                     for i, c in enumerate(specs)]
            chat.required_action = {"type": "submit_tool_outputs", "submit_tool_outputs": {"tool_calls": calls}}
            await self._send(s, resp, "conversation.chat.requires_action", self._chat_obj(chat))
            await self._send(s, resp, "done", "[DONE]", last=True)
            return
        await self._wait(chat, resp, s.tool_seconds)
        await self._send(s, resp, "conversation.message.completed",
                         self._message(chat, _id(), "tool_output", json.dumps({"temp": 12, "sky": "cloudy"})))

    async def _answers(self, s: SimpleNamespace, chat: Chat, resp: Response) -> str | None:
        """Reasoning, the answer message(s); None when they all went out."""
        if s.empty_answer:
            return None
        mid = _id()
        reasoning = ""
        for piece in s.reasoning:
            reasoning += piece
            await self._send(s, resp, "conversation.message.delta",
                             self._message(chat, mid, "answer", "", reasoning_content=piece))
        tokens = s.tokens
        if s.completed_only:
            chat.answer = "".join(tokens)
        else:
            for i, tok in enumerate(tokens):
                await self._send(s, resp, "conversation.message.delta", self._message(chat, mid, "answer", tok))
                chat.answer += tok
                if i == 0:
                    outcome = await self._after_first(s, chat, resp)
                    if outcome:
                        return outcome
                if i < len(tokens) - 1 and await self._wait(chat, resp, s.token_delay):
                    return "cancelled"
        extra = {"reasoning_content": reasoning} if reasoning else {}
        await self._send(s, resp, "conversation.message.completed",
                         self._message(chat, mid, "answer", "".join(tokens), created_at=_now(), **extra))
        for text in s.extra_answers:
            mid = _id()
            await self._send(s, resp, "conversation.message.delta", self._message(chat, mid, "answer", text))
            await self._send(s, resp, "conversation.message.completed", self._message(chat, mid, "answer", text))
            chat.answer += "\n\n" + text
        return None

    async def _after_first(self, s: SimpleNamespace, chat: Chat, resp: Response) -> str | None:
        if s.fault == "truncated":
            await resp.abort()
            raise _Aborted
        if s.fault == "error_event":
            chat.status = "failed"
            await self._send(s, resp, "error", _ERROR_EVENT)
            await self._send(s, resp, "done", "[DONE]", last=True)
            return "failed"
        if s.fail_chat:
            chat.status = "failed"
            chat.last_error = {"code": s.fail_chat.get("code", 5000), "msg": s.fail_chat.get("msg", "")}
            await self._send(s, resp, "conversation.chat.failed", self._chat_obj(chat))
            await self._send(s, resp, "done", "[DONE]", last=True)
            return "failed"
        if s.fault == "stall" and await self._wait(chat, resp, s.stall_seconds):
            return "cancelled"
        if s.fault == "stall_pings":
            deadline = time.monotonic() + s.stall_seconds
            mid = _id()
            while time.monotonic() < deadline:
                if await self._wait(chat, resp, min(s.stall_ping_every, max(deadline - time.monotonic(), 0))):
                    return "cancelled"
                await self._send(s, resp, "conversation.message.delta", self._message(chat, mid, "answer", ""))
        if chat.cancel_event.is_set():
            return "cancelled"
        return None

    async def _finish(self, s: SimpleNamespace, chat: Chat, resp: Response) -> None:
        if s.verbose:
            finish = {"msg_type": "generate_answer_finish", "data": "", "from_module": None, "from_unit": None}
            await self._send(s, resp, "conversation.message.completed",
                             self._message(chat, _id(), "verbose", json.dumps(finish)))
        for q in s.follow_ups:
            await self._send(s, resp, "conversation.message.completed", self._message(chat, _id(), "follow_up", q))
        chat.status = "completed"
        if s.include_usage:
            out = max(1, len(chat.answer) // 2)
            chat.usage = {"token_count": 42 + out, "output_count": out, "input_count": 42}
        await self._send(s, resp, "conversation.chat.completed", self._chat_obj(chat))
        await self._send(s, resp, "done", "[DONE]", last=True)

    async def _run_silently(self, s: SimpleNamespace, chat: Chat) -> None:
        """A non-stream chat: the answer becomes readable through retrieve and message/list."""
        chat.status = "in_progress"
        if s.fail_chat:
            chat.status = "failed"
            chat.last_error = {"code": s.fail_chat.get("code", 5000), "msg": s.fail_chat.get("msg", "")}
            return
        chat.answer = "" if s.empty_answer else "".join(s.tokens)
        if chat.answer:
            chat.messages.append(self._message(chat, _id(), "answer", chat.answer))
        for q in s.follow_ups:
            chat.messages.append(self._message(chat, _id(), "follow_up", q))
        if s.include_usage:
            out = max(1, len(chat.answer) // 2)
            chat.usage = {"token_count": 42 + out, "output_count": out, "input_count": 42}
        chat.status = "completed"

    # -- other chat routes -------------------------------------------------------------------

    def _find_chat(self, req: Request, body: dict[str, Any] | None = None) -> Chat:
        src = body if body is not None else req.query
        cid, chat_id = str(src.get("conversation_id") or ""), str(src.get("chat_id") or "")
        chat = self.chats.get(chat_id)
        if chat is None or chat.conversation_id != cid:
            raise _Refused(4001, f"invalid chat: chat_id={chat_id} not found")
        return chat

    async def _retrieve(self, req: Request, resp: Response) -> None:
        try:
            self._auth(req)
            chat = self._find_chat(req)
        except _Refused as e:
            await self._envelope(resp, e.code, e.msg, e.status)
            return
        await self._envelope(resp, 0, "", data=self._chat_obj(chat))

    async def _message_list(self, req: Request, resp: Response) -> None:
        try:
            self._auth(req)
            chat = self._find_chat(req)
        except _Refused as e:
            await self._envelope(resp, e.code, e.msg, e.status)
            return
        await self._envelope(resp, 0, "", data=list(chat.messages))

    async def _cancel(self, req: Request, resp: Response) -> None:
        try:
            self._auth(req)
            body = self._body(req)
            self.cancelled.append((str(body.get("conversation_id") or ""), str(body.get("chat_id") or "")))
            chat = self._find_chat(req, body)
            if chat.status not in ("created", "in_progress"):
                raise _Refused(4104, "The chat cannot be canceled: it is completed, failed or requires action")
        except _Refused as e:
            await self._envelope(resp, e.code, e.msg, e.status)
            return
        chat.cancel_event.set()
        chat.status = "canceled"
        await self._envelope(resp, 0, "", data=self._chat_obj(chat))

    async def _submit_tool_outputs(self, req: Request, resp: Response) -> None:
        s = self._snapshot()
        try:
            self._auth(req)
            chat = self._find_chat(req)
            body = self._body(req)
            outputs = body.get("tool_outputs")
            if chat.status == "expired":
                # Coze drops a chat left in requires_action too long (the real code is not
                # documented in what we could read; 4000 with a clear msg here)
                raise _Refused(4000, "the chat has expired: tool outputs were not submitted in time")
            if chat.status != "requires_action" or not isinstance(outputs, list) or not outputs:
                raise _Refused(4000, "the chat is not waiting for tool outputs")
            wanted = {c["id"] for c in (chat.required_action or {}).get("submit_tool_outputs", {}).get("tool_calls", [])}
            got = {str(o.get("tool_call_id")) for o in outputs if isinstance(o, dict)}
            if got != wanted or not all(isinstance(o.get("output"), str) for o in outputs):
                raise _Refused(4000, "tool_outputs must answer every tool_call_id with a string output")
        except _Refused as e:
            await self._envelope(resp, e.code, e.msg, e.status)
            return
        self.tool_outputs.extend(outputs)
        chat.required_action = None
        chat.status = "in_progress"
        await resp.start_stream(200, "text/event-stream")
        await self._send(s, resp, "conversation.chat.in_progress", self._chat_obj(chat))
        s.fault = None
        if s.resume_tokens is not None:
            s.tokens = list(s.resume_tokens)
        try:
            await self._answers(s, chat, resp)
            await self._finish(s, chat, resp)
        except _Aborted:
            await resp.abort()

    async def _conversation_create(self, req: Request, resp: Response) -> None:
        try:
            token = self._auth(req)
            body = self._body(req) if req.body else {}
        except _Refused as e:
            await self._envelope(resp, e.code, e.msg, e.status)
            return
        cid = _id()
        conv = Conversation(cid, str(body.get("bot_id") or ""), "", _now(), list(body.get("messages") or []),
                            owner=token)
        self.conversations[cid] = conv
        await self._envelope(resp, 0, "", data={"id": cid, "created_at": conv.created_at, "meta_data": {}})

    async def _conversation_delete(self, req: Request, resp: Response) -> None:
        cid = req.path_params["conversation_id"]
        try:
            token = self._auth(req)
            conv = self.conversations.get(cid)
            if conv is None or conv.owner != token:
                raise _Refused(4002, f"invalid conversation: conversation_id={cid} not found")
        except _Refused as e:
            await self._envelope(resp, e.code, e.msg, e.status)
            return
        del self.conversations[cid]
        self.deleted.append(cid)
        await self._envelope(resp, 0, "", data={})

    # -- files -------------------------------------------------------------------------------

    async def _upload(self, req: Request, resp: Response) -> None:
        try:
            self._auth(req)
            try:
                form = req.form()
            except ValueError:
                raise _Refused(4300, "The file is empty: send multipart/form-data with a file part") from None
            files = [p for p in form.parts if p.is_file]
            if len(files) > 1:
                raise _Refused(4301, "Only one file can be uploaded at a time")
            part = form.files.get("file")
            if part is None or not part.data:
                raise _Refused(4300, "The file is empty")
            if len(part.data) > self.max_upload_bytes:
                raise _Refused(4302, "The size of the file exceeds the limit")
        except _Refused as e:
            await self._envelope(resp, e.code, e.msg, e.status)
            return
        fid = _id()
        up = UploadedFile(fid, part.filename or "file", part.data, part.content_type or "", _now())
        self.uploads[fid] = up
        await self._envelope(resp, 0, "", data={"id": fid, "bytes": len(up.data), "created_at": up.created_at,
                                                "file_name": up.name})

    async def _file_retrieve(self, req: Request, resp: Response) -> None:
        try:
            self._auth(req)
            up = self.uploads.get(req.query.get("file_id", ""))
            if up is None:
                raise _Refused(4200, "file not found")
        except _Refused as e:
            await self._envelope(resp, e.code, e.msg, e.status)
            return
        await self._envelope(resp, 0, "", data={"id": up.id, "bytes": len(up.data), "created_at": up.created_at,
                                                "file_name": up.name})
