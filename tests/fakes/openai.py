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

Auth: ``Authorization: Bearer <api_key>`` (``api_key=None`` accepts any); a wrong key gets 401
``invalid_api_key``.

Faults: ``fault = "http_<status>"`` answers every completion with that status and OpenAI's error
envelope ``{"error": {"message", "type", "param", "code"}}``; ``fail_when`` (default ``FAIL``) does
the same with 500 ``fake upstream failure`` for a request whose last user message contains it;
``fault = "stall"`` sends the headers and the first token, then nothing.

Recorded: ``requests`` (every HTTP request, from the base class) and ``chat_requests`` (each
completion request body, parsed).
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable
from typing import Any

from .http_server import FakeHTTPServer, Request, Response

__all__ = ["FakeOpenAI"]

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


class FakeOpenAI(FakeHTTPServer):
    """OpenAI Chat Completions on 127.0.0.1; see the module docstring."""

    server_name = "fake-openai"

    def __init__(self, api_key: str | None = "sk-test", *, port: int = 0) -> None:
        super().__init__(port=port)
        self.api_key = api_key
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

    async def _error(self, resp: Response, status: int, message: str | None = None) -> None:
        etype, default = _ERRORS.get(status, ("server_error", "Error."))
        code = "invalid_api_key" if status == 401 else None
        await resp.json(status, {"error": {"message": message or default, "type": etype, "param": None, "code": code}})

    async def not_found(self, req: Request, resp: Response) -> None:
        await self._error(resp, 404, f"Unknown request URL: {req.method} {req.path}.")

    def _authorized(self, req: Request) -> bool:
        if self.api_key is None:
            return True
        return req.headers.get("authorization", "") == f"Bearer {self.api_key}"

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
        if fault and fault.startswith("http_"):
            await self._error(resp, int(fault[5:]))
            return
        user = self.last_user_text(body)
        if self.fail_when and self.fail_when in user:
            await self._error(resp, 500, "fake upstream failure")
            return
        model = str(body.get("model") or self.models[0])
        tool = self._tool_call(body, user)
        text = "" if tool else (self.responder(body) if self.responder else self.reply)
        cid = f"chatcmpl-{uuid.uuid4().hex[:24]}"
        if body.get("stream"):
            await self._stream(resp, body, cid, model, text, tool, stall=fault == "stall")
            return
        message: dict[str, Any] = {"role": "assistant", "content": text or None}
        if tool:
            message["tool_calls"] = [tool]
        await resp.json(200, {
            "id": cid, "object": "chat.completion", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "message": message, "logprobs": None,
                         "finish_reason": "tool_calls" if tool else "stop"}],
            "usage": dict(self.usage),
        })

    def _tool_call(self, body: dict[str, Any], user: str) -> dict[str, Any] | None:
        tools = body.get("tools") or []
        if not tools or not self.tool_when or self.tool_when not in user:
            return None
        if any(m.get("role") == "tool" for m in body.get("messages") or []):
            return None  # the tool already answered: now reply with text
        name = (tools[0].get("function") or {}).get("name") or "tool"
        return {"id": f"call_{uuid.uuid4().hex[:12]}", "type": "function",
                "function": {"name": name, "arguments": json.dumps(self.tool_arguments)}}

    async def _stream(self, resp: Response, body: dict[str, Any], cid: str, model: str, text: str,
                      tool: dict[str, Any] | None, *, stall: bool) -> None:
        created = int(time.time())

        def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
            doc = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                   "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}], **extra}
            return b"data: " + json.dumps(doc, ensure_ascii=False).encode() + b"\n\n"

        await resp.start_stream(200, "text/event-stream; charset=utf-8")
        await resp.write(chunk({"role": "assistant", "content": ""}))
        if tool:
            await resp.write(chunk({"tool_calls": [{"index": 0, **tool}]}))
        else:
            for i, token in enumerate(_tokens(text)):
                if i and self.token_delay and not await resp.stall(self.token_delay):
                    return
                await resp.write(chunk({"content": token}))
                if stall and not await resp.stall(3600):
                    return
        await resp.write(chunk({}, "tool_calls" if tool else "stop"))
        if (body.get("stream_options") or {}).get("include_usage"):
            doc = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model, "choices": [],
                   "usage": dict(self.usage)}
            await resp.write(b"data: " + json.dumps(doc).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.end()
