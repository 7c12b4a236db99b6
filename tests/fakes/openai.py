"""A loopback fake of the OpenAI Chat Completions API, for real platforms (n8n, Langflow, …) whose
model nodes are pointed at it, and for any test that needs a model that answers predictably.

    with FakeOpenAI() as llm:                      # base URL for clients: llm.base_url (…/v1)
        llm.reply = "Hello from the fake model."   # or llm.responder = lambda body: "…"
        ... point the platform's OpenAI credential at llm.base_url with api key llm.api_key ...
        llm.chat_requests[-1]["messages"]          # what the platform sent

Endpoints:

- ``POST /v1/chat/completions`` — ``stream: true``: ``text/event-stream`` with ``data: {chunk}``
  blocks (a first chunk with ``role``, one chunk per token — words and the spaces between them, as
  separate tokens —, a last chunk with ``finish_reason``, a usage chunk when
  ``stream_options.include_usage``), then ``data: [DONE]``; otherwise one ``chat.completion``
  JSON with ``usage``. When the request offers ``tools`` and the last user message contains
  ``tool_when`` (default ``TOOL``), the answer is one call of the first tool with
  ``tool_arguments`` instead of text (and, once the tool's result is in the messages, ``reply``).
- ``GET /v1/models`` — the ``models`` list.
- anything else (e.g. ``POST /v1/responses``, the Responses API) — 404 in OpenAI's error shape.

Auth: ``Authorization: Bearer <api_key>`` (``api_key=None`` accepts any; ``api_keys`` holds more
accepted keys); a wrong key gets 401 ``invalid_api_key``.

Scripted answers: ``script`` is a list of steps, one consumed per completion request (the list
shrinks as it is used); when it is empty the default behaviour above answers again.

    llm.script = [ToolCalls([("get_weather", {"city": "Paris"})]), Say("It is sunny in Paris.")]

- ``Say(text, usage=None, reasoning=None)`` — a text answer (streamed token by token), with this
  usage instead of ``usage`` and ``reasoning_content`` deltas streamed before the text;
- ``ToolCalls([(name, args), ...], text="")`` — one call per pair (several = parallel calls), ids
  ``call_1``, ``call_2``, … counted over the fake's life; streamed like OpenAI: a first chunk per call
  with its id, name and empty arguments, then the arguments JSON in two or more fragments;
- ``Fail(status, code_or_message)`` — that status with OpenAI's error envelope: a code without
  spaces (``context_length_exceeded``, ``insufficient_quota``, …) is sent as ``error.code`` with
  OpenAI's message for it, anything else as ``error.message``.

The contract-suite hooks every ``PlatformFake`` has: ``answer_tokens`` (when set, the default text
answer streams exactly these tokens), ``token_delay``, ``include_usage`` (False: no usage anywhere),
``reasoning`` (streams ``reasoning_content`` deltas before the default answer), ``api_keys``,
``active_requests`` and the sticky ``fault`` (``FAULTS``): ``http_<status>`` (OpenAI's error
envelope; any status), ``html_<status>`` (a proxy's page), ``invalid_json``, ``truncated`` (the
connection drops mid-answer), ``error_event`` (an ``error`` document mid-stream), ``empty``,
``non_utf8``, ``oversized`` (one line of ``oversized_bytes``), ``stall`` (the first token, then
nothing), ``stall_before_headers``. ``fail_when`` (default ``FAIL``) answers 500 ``fake upstream
failure`` for a request whose last user message contains it.

Recorded: ``requests`` (every HTTP request, from the base class) and ``chat_requests`` (each
completion request body, parsed).
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from .http_server import PlatformFake, Request, Response, fault_names

__all__ = ["FAULTS", "Fail", "FakeOpenAI", "Say", "ToolCalls"]

#: every fault name the fake knows (``http_<status>`` / ``html_<status>`` take any status too)
FAULTS: tuple[str, ...] = fault_names()
MiB = 1024 * 1024

#: OpenAI's messages for the error codes a ``Fail`` step may name
_CODE_MESSAGES = {
    "context_length_exceeded": "This model's maximum context length is 8192 tokens. However, your messages "
                               "resulted in 9000 tokens. Please reduce the length of the messages.",
    "insufficient_quota": "You exceeded your current quota, please check your plan and billing details.",
    "invalid_api_key": "Incorrect API key provided.",
    "model_not_found": "The model does not exist or you do not have access to it.",
    "rate_limit_exceeded": "Rate limit reached for requests.",
}


@dataclass
class Say:
    """A scripted text answer."""

    text: str
    usage: dict[str, Any] | None = None
    reasoning: str | None = None


@dataclass
class ToolCalls:
    """A scripted answer calling these tools (name, arguments) — several at once are parallel calls."""

    calls: list[tuple[str, dict[str, Any]]]
    text: str = ""
    usage: dict[str, Any] | None = None


@dataclass
class Fail:
    """A scripted error answer: ``status`` with OpenAI's error envelope."""

    status: int
    code_or_message: str = ""
    headers: dict[str, str] = field(default_factory=dict)

_ERRORS: dict[int, tuple[str, str]] = {
    400: ("invalid_request_error", "Invalid request."),
    401: ("invalid_request_error", "Incorrect API key provided."),
    403: ("permission_error", "You are not allowed to use this model."),
    404: ("invalid_request_error", "The model does not exist."),
    429: ("rate_limit_error", "Rate limit reached."),
    500: ("server_error", "The server had an error while processing your request."),
    502: ("server_error", "Bad gateway."),
    503: ("server_error", "The engine is currently overloaded."),
}


def _tokens(text: str) -> list[str]:
    return re.findall(r"\S+|\s+", text) or [""]


class FakeOpenAI(PlatformFake):
    """OpenAI Chat Completions on 127.0.0.1; see the module docstring."""

    server_name = "fake-openai"
    FAULTS: ClassVar[tuple[str, ...]] = FAULTS + ("stall_pings",)
    stall_seconds = 3600.0

    def __init__(self, api_key: str | None = "sk-test", *, port: int = 0) -> None:
        super().__init__(port=port)
        self.api_key = api_key
        self.api_keys: set[str] = set()
        #: scripted steps (``Say`` / ``ToolCalls`` / ``Fail``), one per completion request
        self.script: list[Say | ToolCalls | Fail | str] = []
        #: when set, the default text answer streams exactly these tokens
        self.answer_tokens: list[str] | None = None
        self.include_usage = True
        #: reasoning streamed as ``reasoning_content`` before the default answer
        self.reasoning: str | None = None
        self.oversized_bytes = 9 * MiB
        self._call_counter = 0
        self.models = ["gpt-4o-mini", "gpt-4o"]
        self.reply = "Hello from the fake model."
        #: when set, computes the reply from the request body (overrides ``reply``)
        self.responder: Callable[[dict[str, Any]], str] | None = None
        self.token_delay = 0.02
        self.fault: str | None = None
        self.fail_when: str | None = "FAIL"
        self.tool_when: str | None = "TOOL"
        self.tool_arguments: dict[str, Any] = {"city": "Paris"}
        self.usage = {"prompt_tokens": 12, "completion_tokens": 6, "total_tokens": 18}
        self.chat_requests: list[dict[str, Any]] = []
        #: when set, a request longer than this many tokens (its prompt, estimated like the local host's
        #: count_tokens: one token per 4 bytes of its compact JSON, plus max_tokens when given) is refused
        #: before any output with OpenAI's 400 context_length_exceeded, as real providers do
        self.context_window: int | None = None
        #: when set, a summary request (``max_tokens`` set, no tools) is answered with this text and
        #: takes no step of ``script`` (so a script can lay out a tool loop that is compacted midway)
        self.summary_reply: str | None = None
        #: the requests refused as over ``context_window``
        self.refused: list[dict[str, Any]] = []
        self.add_route("POST", "/v1/chat/completions", self._completions)
        self.add_route("GET", "/v1/models", self._models)

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1`` — what OpenAI clients take as their base URL."""
        return self.root_url + "/v1"

    # -- helpers -------------------------------------------------------------------------------

    @staticmethod
    def last_user_text(body: dict[str, Any]) -> str:
        """The text of the last user message of a completion request."""
        for msg in reversed(body.get("messages") or []):
            if msg.get("role") == "user":
                content = msg.get("content")
                if isinstance(content, list):
                    return "".join(p.get("text", "") for p in content if isinstance(p, dict))
                return str(content or "")
        return ""

    async def _error(self, resp: Response, status: int, message: str | None = None, *, code: str | None = None,
                     headers: Mapping[str, str] | None = None) -> None:
        etype, default = _ERRORS.get(status, ("server_error", "Error."))
        code = code or ("invalid_api_key" if status == 401 else None)
        await resp.json(status, {"error": {"message": message or default, "type": etype, "param": None, "code": code}},
                        headers)

    async def not_found(self, req: Request, resp: Response) -> None:
        await self._error(resp, 404, f"Unknown request URL: {req.method} {req.path}.")

    @PlatformFake.fault.setter  # type: ignore[attr-defined]
    def fault(self, value: str | None) -> None:
        kind, _, num = (value or "").partition("_")
        if value is not None and value not in self.FAULTS and not (kind in ("http", "html") and num.isdigit()):
            raise ValueError(f"unknown fault {value!r}; known: {', '.join(self.FAULTS)}")
        self._fault = value

    async def error_body(self, resp: Response, status: int, headers: Mapping[str, str] | None) -> None:
        await self._error(resp, status, headers=headers)

    def _authorized(self, req: Request) -> bool:
        if self.api_key is None:
            return True
        given = req.headers.get("authorization", "")
        return given == f"Bearer {self.api_key}" or given.removeprefix("Bearer ") in self.api_keys

    # -- routes --------------------------------------------------------------------------------

    async def _models(self, req: Request, resp: Response) -> None:
        if not self._authorized(req):
            await self._error(resp, 401)
            return
        await resp.json(200, {"object": "list", "data": [
            {"id": m, "object": "model", "created": 1700000000, "owned_by": "fake"} for m in self.models]})

    async def _completions(self, req: Request, resp: Response) -> None:
        if not self._authorized(req):
            await self._error(resp, 401)
            return
        try:
            body = req.json()
        except ValueError:
            await self._error(resp, 400, "We could not parse the JSON body of your request.")
            return
        self.chat_requests.append(body)
        fault = self.fault
        if await self.head_fault(resp, fault):
            return
        stream = bool(body.get("stream"))
        model = str(body.get("model") or self.models[0])
        cid = f"chatcmpl-{uuid.uuid4().hex[:24]}"
        if self.context_window is not None:
            doc = {"messages": body.get("messages") or []}
            if body.get("tools"):
                doc["tools"] = body["tools"]
            used = -(-len(json.dumps(doc, ensure_ascii=False, separators=(",", ":"), sort_keys=True).encode()) // 4)
            used += int(body.get("max_tokens") or body.get("max_completion_tokens") or 0)
            if used > self.context_window:
                self.refused.append(body)
                await self._error(resp, 400, f"This model's maximum context length is {self.context_window} tokens. "
                                  f"However, your messages resulted in {used} tokens. Please reduce the length "
                                  "of the messages.", code="context_length_exceeded")
                return
        if self.summary_reply is not None and body.get("max_tokens") and not body.get("tools"):
            step: Say | ToolCalls | Fail | str | None = Say(self.summary_reply)
        else:
            step = self.script.pop(0) if self.script else None
        if isinstance(step, str):
            step = Say(step)
        if isinstance(step, Fail):
            await self._fail(resp, step)
            return
        if step is None and self.fail_when and self.fail_when in self.last_user_text(body):
            await self._error(resp, 500, "fake upstream failure")
            return
        answer = self._answer(body, step)
        if stream:
            await self._stream(resp, body, cid, model, answer, fault)
        else:
            await self._complete(resp, cid, model, answer, fault)

    async def _fail(self, resp: Response, step: Fail) -> None:
        text = step.code_or_message
        if text and " " not in text:
            await self._error(resp, step.status, _CODE_MESSAGES.get(text, text), code=text, headers=step.headers)
        else:
            await self._error(resp, step.status, text or None, headers=step.headers)

    def _answer(self, body: dict[str, Any], step: Say | ToolCalls | None) -> dict[str, Any]:
        """What to answer: text tokens, tool calls, reasoning, usage."""
        if isinstance(step, Say):
            return {"tokens": _tokens(step.text), "calls": [], "reasoning": step.reasoning,
                    "usage": step.usage or dict(self.usage), "split": True}
        if isinstance(step, ToolCalls):
            calls = []
            for name, args in step.calls:
                self._call_counter += 1
                calls.append({"id": f"call_{self._call_counter}", "type": "function",
                              "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)}})
            return {"tokens": _tokens(step.text) if step.text else [], "calls": calls, "reasoning": None,
                    "usage": step.usage or dict(self.usage), "split": True}
        tool = self._tool_call(body, self.last_user_text(body))
        if tool:
            tokens: list[str] = []
        elif self.answer_tokens is not None and not self.responder:
            tokens = list(self.answer_tokens)
        else:
            tokens = _tokens(self.responder(body) if self.responder else self.reply)
        return {"tokens": tokens, "calls": [tool] if tool else [], "reasoning": self.reasoning,
                "usage": dict(self.usage), "split": False}

    async def _complete(self, resp: Response, cid: str, model: str, answer: dict[str, Any],
                        fault: str | None) -> None:
        """A non-streamed ``chat.completion`` (or the body fault)."""
        text = "".join(answer["tokens"])
        message: dict[str, Any] = {"role": "assistant", "content": text or None}
        if answer["reasoning"]:
            message["reasoning_content"] = answer["reasoning"]
        if answer["calls"]:
            message["tool_calls"] = answer["calls"]
        doc: dict[str, Any] = {
            "id": cid, "object": "chat.completion", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "message": message, "logprobs": None,
                         "finish_reason": "tool_calls" if answer["calls"] else "stop"}],
        }
        if self.include_usage:
            doc["usage"] = answer["usage"]
        raw = json.dumps(doc, ensure_ascii=False).encode()
        if fault == "invalid_json":
            await resp.send(200, raw[: len(raw) // 2] + b"<not json", "application/json")
        elif fault == "empty":
            await resp.send(200, b"", "application/json")
        elif fault == "non_utf8":
            await resp.send(200, b'{"id": "' + bytes([0xFF, 0xFE, 0xC3]) + b'"}', "application/json")
        elif fault == "oversized":
            pad = json.dumps({**doc, "padding": "x" * self.oversized_bytes}).encode()
            await resp.send(200, pad, "application/json")
        elif fault == "error_event":
            await resp.json(200, {"error": {"message": "The server had an error while processing your request.",
                                            "type": "server_error", "param": None, "code": None}})
        elif fault == "truncated":
            await resp.send_head(200, {"Content-Type": "application/json", "Content-Length": str(len(raw))})
            await resp.write_raw(raw[: len(raw) // 2])
            await resp.abort()
        elif fault in ("stall", "stall_pings"):
            await resp.send_head(200, {"Content-Type": "application/json", "Content-Length": str(len(raw))})
            await resp.write_raw(raw[:1])
            await resp.stall(self.stall_seconds)
            await resp.abort()
        else:
            await resp.send(200, raw, "application/json")

    def _tool_call(self, body: dict[str, Any], user: str) -> dict[str, Any] | None:
        tools = body.get("tools") or []
        if not tools or not self.tool_when or self.tool_when not in user:
            return None
        if any(m.get("role") == "tool" for m in body.get("messages") or []):
            return None  # the tool already answered: now reply with text
        name = (tools[0].get("function") or {}).get("name") or "tool"
        return {"id": f"call_{uuid.uuid4().hex[:12]}", "type": "function",
                "function": {"name": name, "arguments": json.dumps(self.tool_arguments)}}

    async def _stream(self, resp: Response, body: dict[str, Any], cid: str, model: str, answer: dict[str, Any],
                      fault: str | None) -> None:
        created = int(time.time())

        def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
            doc = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                   "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}], **extra}
            return b"data: " + json.dumps(doc, ensure_ascii=False).encode() + b"\n\n"

        connection = {"Connection": "close"} if fault in ("empty", "truncated") else None
        await resp.start_stream(200, "text/event-stream; charset=utf-8", connection)
        if fault == "empty":
            await resp.end()
            return
        await resp.write(chunk({"role": "assistant", "content": ""}))
        if fault == "oversized":
            await resp.write(b"data: " + json.dumps({"padding": "x" * self.oversized_bytes}).encode() + b"\n\n")
            await resp.end()
            return
        pieces = [{"reasoning_content": t} for t in _tokens(answer["reasoning"])] if answer["reasoning"] else []
        pieces += [{"content": t} for t in answer["tokens"]]
        for n, call in enumerate(answer["calls"]):
            if not answer["split"]:  # the default tool answer: the whole call in one chunk
                pieces.append({"tool_calls": [{"index": n, **call}]})
                continue
            pieces.append({"tool_calls": [{"index": n, "id": call["id"], "type": "function",
                                           "function": {"name": call["function"]["name"], "arguments": ""}}]})
            args = call["function"]["arguments"]
            cut = max(1, len(args) // 2)
            for part in (args[:cut], args[cut:]):
                pieces.append({"tool_calls": [{"index": n, "function": {"arguments": part}}]})
        for i, delta in enumerate(pieces):
            if i and self.token_delay and not await resp.stall(self.token_delay):
                return
            await resp.write(chunk(delta))
            if i == 0 and fault in ("stall", "stall_pings", "invalid_json", "non_utf8", "error_event", "truncated"):
                if await self._stream_fault(resp, fault):
                    return
        await resp.write(chunk({}, "tool_calls" if answer["calls"] else "stop"))
        if self.include_usage and (body.get("stream_options") or {}).get("include_usage"):
            doc = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model, "choices": [],
                   "usage": answer["usage"]}
            await resp.write(b"data: " + json.dumps(doc).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.end()

    async def _stream_fault(self, resp: Response, fault: str) -> bool:
        """A fault after the first streamed piece; True when the stream is over."""
        if fault in ("stall", "stall_pings"):
            while fault == "stall_pings":
                if not await resp.stall(0.25):
                    return True
                await resp.write(b": keep-alive\n\n")
            await resp.stall(self.stall_seconds)
            return True
        if fault == "invalid_json":
            await resp.write(b"data: {\"choices\": [{\"delta\": <not json\n\n")
        elif fault == "non_utf8":
            await resp.write(b'data: {"choices": [{"index": 0, "delta": {"content": "\xff\xfe\xc3"}}]}\n\n')
        elif fault == "error_event":
            await resp.write(b"data: " + json.dumps({"error": {
                "message": "The server had an error while processing your request.", "type": "server_error",
                "param": None, "code": None}}).encode() + b"\n\n")
        elif fault == "truncated":
            await resp.abort()
            return True
        await resp.end()
        return True
