"""A loopback fake of the two model APIs the real coding CLIs call: Anthropic Messages (Claude Code,
claude-code-acp) and OpenAI Responses (codex, codex app-server, codex-acp), on one 127.0.0.1 port.
Built on ``PlatformFake`` (``tests/fakes/http_server.py``); see docs real-peers.md §2 for what the
CLIs send and expect.

    with FakeModelAPI() as api:
        env["ANTHROPIC_BASE_URL"] = api.anthropic_base_url("tool")    # http://127.0.0.1:PORT/tool
        env["ANTHROPIC_API_KEY"] = api.api_key                        # "sk-test"
        codex_cfg = f'model_providers.fake.base_url="{api.openai_base_url("text")}"'  # …/text/v1
        ...
        api.model_requests()[-1]      # ModelRequest(api="anthropic"|"openai", body=dict, headers=Headers)

Endpoints (``<prefix>`` is empty or one scenario segment, see below):

- ``HEAD <any path>`` → 200, empty (Claude Code probes the base URL before each request).
- ``POST <prefix>/v1/messages`` (a query string such as ``?beta=true`` is ignored): Anthropic
  Messages. ``stream: true`` → SSE ``event: <type>`` / ``data: <json>`` blocks: ``message_start``
  (message with ``usage``) → per block ``content_block_start`` → ``content_block_delta``
  (``thinking_delta`` + one ``signature_delta`` / ``text_delta`` / ``input_json_delta``) →
  ``content_block_stop`` → ``message_delta`` (``stop_reason`` ``end_turn`` | ``tool_use``,
  ``usage.output_tokens``) → ``message_stop``. Otherwise one ``message`` JSON.
  Auth: ``x-api-key`` or ``Authorization: Bearer`` must be in ``api_keys``, else 401
  ``authentication_error``. Errors: ``{"type": "error", "error": {"type", "message"}, "request_id"}``
  (429 with ``retry-after``). ``POST <prefix>/v1/messages/count_tokens`` answers ``{"input_tokens"}``.
- ``POST <prefix>/v1/responses``: OpenAI Responses. ``stream: true`` → SSE (every data carries
  ``type`` and ``sequence_number``): ``response.created`` → ``response.in_progress`` → per output
  item ``response.output_item.added`` → (message) ``response.content_part.added``,
  ``response.output_text.delta``…, ``response.output_text.done``, ``response.content_part.done`` /
  (function_call) ``response.function_call_arguments.delta``/``.done`` / (reasoning)
  ``response.reasoning_summary_part.added``, ``response.reasoning_summary_text.delta``…, ``.done``,
  ``response.reasoning_summary_part.done`` → ``response.output_item.done`` → ``response.completed``
  (``usage`` with ``input_tokens``, ``input_tokens_details.cached_tokens``, ``output_tokens``,
  ``output_tokens_details.reasoning_tokens``, ``total_tokens``). Otherwise one ``response`` JSON.
  Auth: ``Authorization: Bearer`` in ``api_keys``. Errors: ``{"error": {"message", "type", "param",
  "code"}}`` (429 with ``retry-after``).
- anything else → 404 in the error shape of the API the path looks like.

Scenarios: the first path segment of the base URL, as in the real-peer captures (fixtures README):

    text       "Hello from the fake model." as 5 deltas ("Hello", " from", " the", " fake", " model.")
    tool       1st call: Bash {"command": "echo hi"} / exec_command {"cmd": "echo hi"};
               once the tool's result is in the input: "The tool ran; done."
    toolw      as tool, command "touch created-by-tool.txt" (needs write permission)
    toolsleep  as tool, command "sleep 45 && echo done" (for signal tests)
    slow       the first text delta, then the stream stalls for ``stall_seconds`` (default 60)
    err500 / err429 / err401   HTTP 500 "fake internal error" / 429 "fake rate limit" +
               ``retry-after: 1`` / 401 "fake: invalid api key", in each API's error shape (even
               with a valid key)
    (none)     programmatic: the attributes below

A scenario sets the answer, the tool command and the fault; ``token_delay``, ``think_tokens``,
``include_usage``, ``stall_seconds`` and ``api_keys`` apply to every request. An unknown segment is a
404 naming the known scenarios (``SCENARIOS``).

Programmatic attributes (plain assignment; read at the start of each request):

- ``answer_tokens: list[str]`` — the text deltas (default the ``text`` words).
- ``token_delay: float`` — seconds between deltas (default 0).
- ``think_tokens: list[str]`` — when non-empty, a ``thinking`` block (Anthropic) / a ``reasoning``
  item with summary deltas (OpenAI) comes first.
- ``tool_command: str | None`` — when set, a request whose input has no tool result after its
  latest user prompt answers with one call: Anthropic ``tool_use`` ``Bash`` ``{"command": …}``
  (``stop_reason: tool_use``) / OpenAI ``function_call`` ``exec_command`` ``{"cmd": …}``. Once a
  ``tool_result`` / ``function_call_output`` follows the latest prompt, the text answer. (A later
  user prompt, e.g. a resumed session, triggers the tool again.)
- ``include_usage: bool`` — False drops ``usage`` (Anthropic) / sends ``usage: null`` (OpenAI).
- ``fault`` — sticky, one of ``FAULTS``: ``http_<s>`` for 400/401/403/404/413/429/500/502/503 in each
  API's own error shape; ``html_<s>`` a proxy's HTML page; ``invalid_json`` 200 with a body that is
  neither JSON nor SSE; ``truncated`` the connection is cut in the middle of the event after the
  first delta; ``error_event`` after the first delta, Anthropic ``event: error``
  (``overloaded_error``) / OpenAI ``response.failed`` (``server_error``), then the stream ends;
  ``empty`` 200 and a stream that ends with no event; ``non_utf8`` an extra first delta holding the
  bytes ``\\xff\\xfe``; ``oversized`` an extra first delta of ``oversized_bytes`` (one huge SSE
  line); ``stall`` the first delta, then silence for ``stall_seconds``, then the rest;
  ``stall_before_headers`` silence, then the connection closes. Stream faults hit the first delta
  of whatever the answer is (thinking, text or tool JSON). Non-stream requests: the same idea on the
  JSON body (``error_event`` is a 500).
- ``api_keys: set[str]`` — accepted keys (default ``{"sk-test"}``; an empty set accepts any key).
- ``stall_seconds`` (60), ``oversized_bytes`` (9 MiB), ``retry_after`` (1).

Usage (deterministic, like the captures): ``input_tokens`` = request body bytes // 4,
``output_tokens`` = 7 (``message_start`` says 1, ``message_delta`` 7; OpenAI
``reasoning_tokens`` = min(len(think_tokens), 7)).

Recorded: ``requests`` (every HTTP request, from the base class, HEAD probes included),
``model_requests()`` → ``ModelRequest(api, body, headers)`` for each POST to a model endpoint whose
body parsed (rejected ones included), ``agent_pids()`` → the ``x-fake-agent-pid`` header of each of
those as ints (missing or not a number → skipped), ``active_requests`` (handlers running now, from
the base class), ``handler_errors``.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from .http_server import Headers, PlatformFake, Request, Response, fault_names

__all__ = ["FAULTS", "SCENARIOS", "FakeModelAPI", "ModelRequest", "Scenario"]

MiB = 1024 * 1024
DEFAULT_API_KEY = "sk-test"
TEXT_TOKENS: tuple[str, ...] = ("Hello", " from", " the", " fake", " model.")
TOOL_DONE_TOKENS: tuple[str, ...] = ("The", " tool", " ran;", " done.")
FAULTS: tuple[str, ...] = fault_names()
ANTHROPIC = "anthropic"
OPENAI = "openai"

_BAD = "\x00BAD\x00"  # placeholder replaced by invalid UTF-8 bytes on the wire
_BAD_JSON = b"\\u0000BAD\\u0000"
_PAD = "\x00PAD\x00"  # placeholder replaced by oversized_bytes of "x"
_PAD_JSON = b"\\u0000PAD\\u0000"

# status -> (Anthropic error type, message)
_ANTHROPIC_ERRORS: dict[int, tuple[str, str]] = {
    400: ("invalid_request_error", "Invalid request."),
    401: ("authentication_error", "invalid x-api-key"),
    403: ("permission_error", "Your API key does not have permission to use the specified resource."),
    404: ("not_found_error", "The requested resource could not be found."),
    413: ("request_too_large", "Request exceeds the maximum allowed number of bytes."),
    429: ("rate_limit_error", "This request would exceed the rate limit for your organization."),
    500: ("api_error", "Internal server error"),
    502: ("api_error", "Bad gateway"),
    503: ("overloaded_error", "Overloaded"),
}
# status -> (OpenAI error type, code, message)
_OPENAI_ERRORS: dict[int, tuple[str, str | None, str]] = {
    400: ("invalid_request_error", None, "Invalid request."),
    401: ("invalid_request_error", "invalid_api_key", "Incorrect API key provided."),
    403: ("permission_error", "unsupported_country_region_territory", "You are not allowed to use this model."),
    404: ("invalid_request_error", "model_not_found", "The model does not exist or you do not have access to it."),
    413: ("invalid_request_error", "request_too_large", "Request too large."),
    429: ("requests", "rate_limit_exceeded", "Rate limit reached. Please try again later."),
    500: ("server_error", None, "The server had an error while processing your request."),
    502: ("server_error", None, "Bad gateway."),
    503: ("server_error", None, "The engine is currently overloaded, please try again later."),
}


@dataclass(frozen=True)
class Scenario:
    """What a base-URL prefix makes the fake answer."""

    answer_tokens: tuple[str, ...] = TEXT_TOKENS
    tool_command: str | None = None
    fault: str | None = None
    message: str | None = None  # the error message of an http_<status> fault


SCENARIOS: dict[str, Scenario] = {
    "text": Scenario(),
    "tool": Scenario(TOOL_DONE_TOKENS, "echo hi"),
    "toolw": Scenario(TOOL_DONE_TOKENS, "touch created-by-tool.txt"),
    "toolsleep": Scenario(TOOL_DONE_TOKENS, "sleep 45 && echo done"),
    "slow": Scenario(fault="stall"),
    "err500": Scenario(fault="http_500", message="fake internal error"),
    "err429": Scenario(fault="http_429", message="fake rate limit"),
    "err401": Scenario(fault="http_401", message="fake: invalid api key"),
}


class ModelRequest(NamedTuple):
    """One model call the fake received."""

    api: str  #: "anthropic" or "openai"
    body: dict[str, Any]
    headers: Headers


@dataclass
class _Plan:
    """The knobs of one request, read once when it arrives."""

    api: str
    scenario: str | None
    tokens: list[str]
    token_delay: float
    think: list[str]
    tool_command: str | None
    include_usage: bool
    fault: str | None
    message: str | None
    stall_seconds: float
    oversized_bytes: int


class _Gone(Exception):
    """The client went away, or a fault cut the connection."""


def _api_of(path: str) -> str | None:
    parts = [p for p in path.split("/") if p]
    if parts[-2:] == ["v1", "messages"] or parts[-3:] == ["v1", "messages", "count_tokens"]:
        return ANTHROPIC
    if parts[-2:] == ["v1", "responses"]:
        return OPENAI
    return None


def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, list):
        return [b for b in content if isinstance(b, dict)]
    return []


def _anthropic_tool_answered(messages: Any) -> bool:
    """A tool_result follows the latest user prompt (a user message without tool results)."""
    answered = False
    for msg in messages if isinstance(messages, list) else []:
        if not isinstance(msg, dict) or msg.get("role") != "user":
            continue
        if any(b.get("type") == "tool_result" for b in _blocks(msg.get("content"))):
            answered = True
        else:
            answered = False
    return answered


def _openai_tool_answered(items: Any) -> bool:
    """A function_call_output follows the latest user message item."""
    answered = False
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict):
            continue
        kind = item.get("type", "message")
        if kind == "message" and item.get("role") == "user":
            answered = False
        elif kind in ("function_call_output", "custom_tool_call_output", "local_shell_call_output"):
            answered = True
    return answered


class _SSE:
    """One SSE answer: event framing, token pacing and the mid-stream faults at the first delta."""

    def __init__(self, plan: _Plan, resp: Response, on_error_event: Callable[[], Awaitable[None]]) -> None:
        self.plan = plan
        self.resp = resp
        self.seq = 0
        self.deltas = 0
        self.on_error_event = on_error_event

    def frame(self, name: str, data: dict[str, Any]) -> bytes:
        if self.plan.api == OPENAI:
            data = {"type": name, **data, "sequence_number": self.seq}
            self.seq += 1
        return f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()

    async def event(self, name: str, data: dict[str, Any]) -> None:
        await self.resp.write(self.frame(name, data))

    async def delta(self, name: str, make: Callable[[str], dict[str, Any]], piece: str) -> bool:
        """Send one delta event; False when a fault ended the stream (the caller returns)."""
        plan, resp = self.plan, self.resp
        if self.deltas and plan.token_delay and not await resp.stall(plan.token_delay):
            raise _Gone
        first = self.deltas == 0
        self.deltas += 1
        if first and plan.fault == "non_utf8":
            await resp.write(self.frame(name, make(_BAD)).replace(_BAD_JSON, b"\xff\xfe"))
        if first and plan.fault == "oversized":
            prefix, _, suffix = self.frame(name, make(_PAD)).partition(_PAD_JSON)
            await resp.write(prefix)
            chunk = b"x" * (64 * 1024)
            left = plan.oversized_bytes
            while left > 0:
                await resp.write(chunk[: min(left, len(chunk))])
                left -= len(chunk)
            await resp.write(suffix)
        await resp.write(self.frame(name, make(piece)))
        if not first:
            return True
        if plan.fault == "truncated":
            cut = self.frame(name, make(piece))
            await resp.write(cut[: len(cut) // 2])
            await resp.abort()
            raise _Gone
        if plan.fault == "error_event":
            await self.on_error_event()
            return False
        if plan.fault == "stall" and not await resp.stall(plan.stall_seconds):
            raise _Gone
        return True


class FakeModelAPI(PlatformFake):
    """Anthropic Messages + OpenAI Responses on 127.0.0.1; see the module docstring."""

    FAULTS = FAULTS
    proxy_name = "cloudflare"
    server_name = "fake-model-api"
    stall_seconds = 60.0

    def __init__(self, api_keys: Iterable[str] = (DEFAULT_API_KEY,), *, port: int = 0) -> None:
        super().__init__(port=port)
        self.api_keys: set[str] = set(api_keys)
        self.answer_tokens: list[str] = list(TEXT_TOKENS)
        self.token_delay = 0.0
        self.think_tokens: list[str] = []
        self.tool_command: str | None = None
        self.include_usage = True
        self.oversized_bytes = 9 * MiB
        self.retry_after = 1
        self._ids = itertools.count(1)
        for prefix in ("", "/{scenario}"):
            self.add_route("POST", prefix + "/v1/messages", self._messages)
            self.add_route("POST", prefix + "/v1/messages/count_tokens", self._count_tokens)
            self.add_route("POST", prefix + "/v1/responses", self._responses)

    # -- URLs and records --------------------------------------------------------------------

    @property
    def api_key(self) -> str:
        """An accepted key (the default one when it is still accepted)."""
        if not self.api_keys or DEFAULT_API_KEY in self.api_keys:
            return DEFAULT_API_KEY
        return sorted(self.api_keys)[0]

    def anthropic_base_url(self, scenario: str | None = None) -> str:
        """``ANTHROPIC_BASE_URL``: ``http://127.0.0.1:PORT[/<scenario>]``."""
        return self.root_url + (f"/{scenario}" if scenario else "")

    def openai_base_url(self, scenario: str | None = None) -> str:
        """An OpenAI client's base URL: ``http://127.0.0.1:PORT[/<scenario>]/v1``."""
        return self.anthropic_base_url(scenario) + "/v1"

    def model_requests(self) -> list[ModelRequest]:
        """(api, parsed body, headers) of every POST to /v1/messages or /v1/responses, in order."""
        out = []
        for req in list(self.requests):
            api = _api_of(req.path)
            if req.method != "POST" or api is None or req.path.endswith("/count_tokens"):
                continue
            try:
                body = req.json()
            except (ValueError, UnicodeDecodeError):
                continue
            if isinstance(body, dict):
                out.append(ModelRequest(api, body, req.headers))
        return out

    def agent_pids(self) -> list[int]:
        """The ``x-fake-agent-pid`` header of each model request, as ints (missing ones skipped)."""
        pids = []
        for r in self.model_requests():
            try:
                pids.append(int(r.headers.get("x-fake-agent-pid", "").strip()))
            except ValueError:
                continue
        return pids

    # -- errors --------------------------------------------------------------------------------

    def _next_id(self) -> str:
        return f"{next(self._ids):04d}"

    async def _error(self, api: str, resp: Response, status: int, message: str | None = None,
                     headers: Mapping[str, str] | None = None) -> None:
        hdrs = dict(headers or {})
        if status == 429:
            hdrs.setdefault("retry-after", str(self.retry_after))
        if api == ANTHROPIC:
            etype, default = _ANTHROPIC_ERRORS.get(status, ("api_error", "Error"))
            rid = f"req_fake{self._next_id()}"
            hdrs.setdefault("request-id", rid)
            await resp.json(status, {"type": "error", "error": {"type": etype, "message": message or default},
                                     "request_id": rid}, hdrs)
        else:
            etype, code, default = _OPENAI_ERRORS.get(status, ("server_error", None, "Error."))
            await resp.json(status, {"error": {"message": message or default, "type": etype, "param": None,
                                               "code": code}}, hdrs)

    async def error_body(self, resp: Response, status: int, headers: Mapping[str, str] | None) -> None:
        await self._error(_api_of(resp.request.path) or ANTHROPIC, resp, status, None, headers)

    def _guess_api(self, req: Request) -> str:
        api = _api_of(req.path)
        if api is not None:
            return api
        if "x-api-key" in req.headers or "anthropic-version" in req.headers:
            return ANTHROPIC
        return OPENAI

    async def not_found(self, req: Request, resp: Response) -> None:
        if req.method == "HEAD":
            await resp.send(200, b"", None)
            return
        await self._error(self._guess_api(req), resp, 404, f"Not found: {req.method} {req.path}")

    async def method_not_allowed(self, req: Request, resp: Response, allowed: list[str]) -> None:
        if req.method == "HEAD":
            await resp.send(200, b"", None)
            return
        await self._error(self._guess_api(req), resp, 405, f"Method {req.method} not allowed for {req.path}",
                          {"Allow": ", ".join(sorted(set(allowed)))})

    # -- common request handling ---------------------------------------------------------------

    def _plan(self, api: str, req: Request) -> _Plan | None:
        name = req.path_params.get("scenario")
        sc = SCENARIOS.get(name) if name else None
        if name and sc is None:
            return None
        return _Plan(
            api=api, scenario=name,
            tokens=list(sc.answer_tokens) if sc else list(self.answer_tokens),
            token_delay=float(self.token_delay), think=list(self.think_tokens),
            tool_command=sc.tool_command if sc else self.tool_command,
            include_usage=bool(self.include_usage),
            fault=sc.fault if sc else self.fault, message=sc.message if sc else None,
            stall_seconds=float(self.stall_seconds), oversized_bytes=int(self.oversized_bytes),
        )

    def _authorized(self, api: str, req: Request) -> bool:
        if not self.api_keys:
            return True
        scheme, _, token = req.headers.get("authorization", "").partition(" ")
        keys = [token.strip()] if scheme.lower() == "bearer" else []
        if api == ANTHROPIC and "x-api-key" in req.headers:
            keys.append(req.headers["x-api-key"].strip())
        return any(k in self.api_keys for k in keys)

    async def _admit(self, api: str, req: Request, resp: Response) -> tuple[_Plan, dict[str, Any]] | None:
        """Scenario, head faults, auth and body; None when an answer was already sent."""
        plan = self._plan(api, req)
        if plan is None:
            await self._error(api, resp, 404, f"unknown fake scenario {req.path_params.get('scenario')!r}; "
                                              f"known: {', '.join(SCENARIOS)}")
            return None
        fault = plan.fault
        if fault and fault.startswith("http_") and plan.message:
            await self._error(api, resp, int(fault[5:]), plan.message)
            return None
        if await self.head_fault(resp, fault, stall_seconds=plan.stall_seconds):
            return None
        if not self._authorized(api, req):
            await self._error(api, resp, 401, None if api == ANTHROPIC else "Incorrect API key provided.")
            return None
        try:
            body = req.json()
        except (ValueError, UnicodeDecodeError):
            body = None
        if not isinstance(body, dict):
            await self._error(api, resp, 400, "The request body is not valid JSON.")
            return None
        if fault == "invalid_json":
            await resp.send(200, b'{"type": "message", "id": "msg_fake", "content": [{"type": "tex\n',
                            "application/json")
            return None
        if fault == "error_event" and body.get("stream") is not True:
            await self._error(api, resp, 500)
            return None
        return plan, body

    @staticmethod
    def _input_tokens(req: Request) -> int:
        return len(req.body) // 4

    async def _whole(self, plan: _Plan, resp: Response, obj: dict[str, Any]) -> None:
        """A non-stream answer with the body-level faults."""
        if plan.fault == "stall" and not await resp.stall(plan.stall_seconds):
            return
        data = json.dumps(obj, ensure_ascii=False).encode()
        if plan.fault == "empty":
            data = b""
        elif plan.fault == "non_utf8":
            data = data.replace(_BAD_JSON, b"\xff\xfe")
        elif plan.fault == "oversized":
            data = data.replace(_PAD_JSON, b"x" * plan.oversized_bytes)
        elif plan.fault == "truncated":
            await resp.send_head(200, {"Content-Type": "application/json", "Content-Length": str(len(data))})
            await resp.write_raw(data[: len(data) // 2])
            await resp.abort()
            return
        await resp.send(200, data, "application/json")

    @staticmethod
    def _fault_prefix(plan: _Plan) -> str:
        """Text a non-stream answer starts with for the non_utf8 / oversized faults."""
        return {"non_utf8": _BAD, "oversized": _PAD}.get(plan.fault or "", "")

    # -- Anthropic Messages --------------------------------------------------------------------

    async def _count_tokens(self, req: Request, resp: Response) -> None:
        if not self._authorized(ANTHROPIC, req):
            await self._error(ANTHROPIC, resp, 401)
            return
        await resp.json(200, {"input_tokens": self._input_tokens(req)})

    def _anthropic_usage(self, n_in: int, n_out: int) -> dict[str, int]:
        return {"input_tokens": n_in, "output_tokens": n_out, "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0}

    async def _messages(self, req: Request, resp: Response) -> None:
        admitted = await self._admit(ANTHROPIC, req, resp)
        if admitted is None:
            return
        plan, body = admitted
        call = plan.tool_command if plan.tool_command and not _anthropic_tool_answered(body.get("messages")) else None
        model = str(body.get("model") or "claude-fake")
        n_in = self._input_tokens(req)
        mid = f"msg_fake{self._next_id()}"
        if body.get("stream") is not True:
            content: list[dict[str, Any]] = []
            if plan.think:
                content.append({"type": "thinking", "thinking": "".join(plan.think), "signature": "fake-signature"})
            prefix = self._fault_prefix(plan)
            if call:
                if prefix:
                    content.append({"type": "text", "text": prefix})
                content.append({"type": "tool_use", "id": f"toolu_fake{self._next_id()}", "name": "Bash",
                                "input": {"command": call}})
            else:
                content.append({"type": "text", "text": prefix + "".join(plan.tokens)})
            msg: dict[str, Any] = {"id": mid, "type": "message", "role": "assistant", "model": model,
                                   "content": content, "stop_reason": "tool_use" if call else "end_turn",
                                   "stop_sequence": None}
            if plan.include_usage:
                msg["usage"] = self._anthropic_usage(n_in, 7)
            await self._whole(plan, resp, msg)
            return
        try:
            await self._anthropic_stream(plan, resp, mid, model, n_in, call)
        except _Gone:
            await resp.abort()

    async def _anthropic_stream(self, plan: _Plan, resp: Response, mid: str, model: str, n_in: int,
                                call: str | None) -> None:
        async def error_event() -> None:
            await sse.event("error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})

        sse = _SSE(plan, resp, error_event)
        await resp.start_stream(200, "text/event-stream; charset=utf-8", {"request-id": f"req_fake{self._next_id()}"})
        if plan.fault == "empty":
            return
        message: dict[str, Any] = {"id": mid, "type": "message", "role": "assistant", "model": model, "content": [],
                                   "stop_reason": None, "stop_sequence": None}
        if plan.include_usage:
            message["usage"] = self._anthropic_usage(n_in, 1)
        await sse.event("message_start", {"type": "message_start", "message": message})
        index = 0

        def delta(kind: str, key: str) -> Callable[[str], dict[str, Any]]:
            i = index
            return lambda piece: {"type": "content_block_delta", "index": i, "delta": {"type": kind, key: piece}}

        if plan.think:
            await sse.event("content_block_start", {"type": "content_block_start", "index": index,
                                                    "content_block": {"type": "thinking", "thinking": "",
                                                                      "signature": ""}})
            for piece in plan.think:
                if not await sse.delta("content_block_delta", delta("thinking_delta", "thinking"), piece):
                    return
            await sse.event("content_block_delta", {"type": "content_block_delta", "index": index,
                                                    "delta": {"type": "signature_delta",
                                                              "signature": "fake-signature"}})
            await sse.event("content_block_stop", {"type": "content_block_stop", "index": index})
            index += 1
        if call:
            await sse.event("content_block_start", {"type": "content_block_start", "index": index, "content_block": {
                "type": "tool_use", "id": f"toolu_fake{self._next_id()}", "name": "Bash", "input": {}}})
            args = json.dumps({"command": call})
            half = len(args) // 2
            for piece in (args[:half], args[half:]):
                if not await sse.delta("content_block_delta", delta("input_json_delta", "partial_json"), piece):
                    return
        else:
            await sse.event("content_block_start", {"type": "content_block_start", "index": index,
                                                    "content_block": {"type": "text", "text": ""}})
            for piece in plan.tokens:
                if not await sse.delta("content_block_delta", delta("text_delta", "text"), piece):
                    return
        await sse.event("content_block_stop", {"type": "content_block_stop", "index": index})
        final: dict[str, Any] = {"type": "message_delta",
                                 "delta": {"stop_reason": "tool_use" if call else "end_turn", "stop_sequence": None}}
        if plan.include_usage:
            final["usage"] = {"output_tokens": 7}
        await sse.event("message_delta", final)
        await sse.event("message_stop", {"type": "message_stop"})
        await resp.end()

    # -- OpenAI Responses ----------------------------------------------------------------------

    def _openai_usage(self, plan: _Plan, n_in: int) -> dict[str, Any] | None:
        if not plan.include_usage:
            return None
        return {"input_tokens": n_in, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 7,
                "output_tokens_details": {"reasoning_tokens": min(len(plan.think), 7)}, "total_tokens": n_in + 7}

    async def _responses(self, req: Request, resp: Response) -> None:
        admitted = await self._admit(OPENAI, req, resp)
        if admitted is None:
            return
        plan, body = admitted
        call = plan.tool_command if plan.tool_command and not _openai_tool_answered(body.get("input")) else None
        model = str(body.get("model") or "gpt-fake")
        n = self._next_id()
        response: dict[str, Any] = {"id": f"resp_fake{n}", "object": "response", "created_at": int(time.time()),
                                    "status": "in_progress", "model": model, "output": [], "usage": None,
                                    "error": None, "incomplete_details": None}
        items = self._openai_items(plan, n, call)
        if body.get("stream") is not True:
            prefix = self._fault_prefix(plan)
            if prefix:
                items.insert(0, {"id": f"msg_fake{n}x", "type": "message", "status": "completed", "role": "assistant",
                                 "content": [{"type": "output_text", "text": prefix, "annotations": []}]})
            await self._whole(plan, resp, {**response, "status": "completed", "output": items,
                                           "usage": self._openai_usage(plan, self._input_tokens(req))})
            return
        try:
            await self._openai_stream(plan, resp, response, items, self._input_tokens(req))
        except _Gone:
            await resp.abort()

    @staticmethod
    def _openai_items(plan: _Plan, n: str, call: str | None) -> list[dict[str, Any]]:
        """The finished output items of the answer."""
        items: list[dict[str, Any]] = []
        if plan.think:
            items.append({"id": f"rs_fake{n}", "type": "reasoning",
                          "summary": [{"type": "summary_text", "text": "".join(plan.think)}]})
        if call:
            items.append({"id": f"fc_fake{n}", "type": "function_call", "status": "completed", "name": "exec_command",
                          "call_id": f"call_fake{n}", "arguments": json.dumps({"cmd": call})})
        else:
            items.append({"id": f"msg_fake{n}", "type": "message", "status": "completed", "role": "assistant",
                          "content": [{"type": "output_text", "text": "".join(plan.tokens), "annotations": []}]})
        return items

    async def _openai_stream(self, plan: _Plan, resp: Response, response: dict[str, Any],
                             items: list[dict[str, Any]], n_in: int) -> None:
        async def error_event() -> None:
            await sse.event("response.failed", {"response": {
                **response, "status": "failed",
                "error": {"code": "server_error", "message": "The server had an error while processing your request."}}})

        sse = _SSE(plan, resp, error_event)
        await resp.start_stream(200, "text/event-stream; charset=utf-8")
        if plan.fault == "empty":
            return
        await sse.event("response.created", {"response": response})
        await sse.event("response.in_progress", {"response": response})
        for out_index, item in enumerate(items):
            iid = item["id"]
            kind = item["type"]
            if kind == "reasoning":
                await sse.event("response.output_item.added", {"output_index": out_index,
                                                               "item": {**item, "summary": []}})
                where = {"item_id": iid, "output_index": out_index, "summary_index": 0}
                await sse.event("response.reasoning_summary_part.added",
                                {**where, "part": {"type": "summary_text", "text": ""}})
                for piece in plan.think:
                    if not await sse.delta("response.reasoning_summary_text.delta",
                                           lambda p, w=where: {**w, "delta": p}, piece):
                        return
                text = item["summary"][0]["text"]
                await sse.event("response.reasoning_summary_text.done", {**where, "text": text})
                await sse.event("response.reasoning_summary_part.done",
                                {**where, "part": {"type": "summary_text", "text": text}})
            elif kind == "function_call":
                await sse.event("response.output_item.added", {"output_index": out_index, "item": {
                    **item, "status": "in_progress", "arguments": ""}})
                args = item["arguments"]
                half = len(args) // 2
                where = {"item_id": iid, "output_index": out_index}
                for piece in (args[:half], args[half:]):
                    if not await sse.delta("response.function_call_arguments.delta",
                                           lambda p, w=where: {**w, "delta": p}, piece):
                        return
                await sse.event("response.function_call_arguments.done", {**where, "arguments": args})
            else:
                await sse.event("response.output_item.added", {"output_index": out_index, "item": {
                    **item, "status": "in_progress", "content": []}})
                where = {"item_id": iid, "output_index": out_index, "content_index": 0}
                await sse.event("response.content_part.added",
                                {**where, "part": {"type": "output_text", "text": "", "annotations": []}})
                for piece in plan.tokens:
                    if not await sse.delta("response.output_text.delta",
                                           lambda p, w=where: {**w, "delta": p, "logprobs": []}, piece):
                        return
                text = item["content"][0]["text"]
                await sse.event("response.output_text.done", {**where, "text": text, "logprobs": []})
                await sse.event("response.content_part.done", {**where, "part": item["content"][0]})
            await sse.event("response.output_item.done", {"output_index": out_index, "item": item})
        await sse.event("response.completed", {"response": {**response, "status": "completed", "output": items,
                                                            "usage": self._openai_usage(plan, n_in)}})
        await resp.end()


def main(argv: list[str] | None = None) -> int:
    """Serve the fake on a free loopback port until Ctrl-C (to try the coding-agent runners with
    ``runners chat`` offline): ``uv run python -m tests.fakes.model_api [--tool 'echo hi']``."""
    import argparse
    import signal as _signal
    import threading

    ap = argparse.ArgumentParser(prog="python -m tests.fakes.model_api", description=main.__doc__)
    ap.add_argument("--key", default="sk-test", help="the API key it accepts (default sk-test)")
    ap.add_argument("--tool", default=None, metavar="COMMAND",
                    help="answer each new prompt with a shell tool call running COMMAND first")
    ap.add_argument("--answer", default=None, metavar="TEXT", help="the text to answer with")
    args = ap.parse_args(argv)
    api = FakeModelAPI(api_keys=(args.key,))
    api.tool_command = args.tool
    if args.answer:
        api.answer_tokens = [w + " " for w in args.answer.split()]
    api.start()
    print(f"Anthropic base URL: {api.anthropic_base_url()}\nOpenAI base URL:    {api.openai_base_url()}\n"
          f"API key: {args.key}\n(scenario prefixes such as {api.anthropic_base_url('tool')} also work; Ctrl-C stops)",
          flush=True)
    stop = threading.Event()
    _signal.signal(_signal.SIGINT, lambda *_: stop.set())
    _signal.signal(_signal.SIGTERM, lambda *_: stop.set())
    stop.wait()
    api.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
