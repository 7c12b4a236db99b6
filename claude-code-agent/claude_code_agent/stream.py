"""Claude Code's stream-json output, one turn at a time (platforms.md §10, real-peers.md §3).

Line order for one turn (``--verbose --include-partial-messages``):
``system/init`` (session id, model, tools) → per model call ``system/status`` "requesting",
``stream_event`` lines wrapping the raw Anthropic SSE events (``content_block_delta`` with
``text_delta`` / ``thinking_delta`` / ``input_json_delta``) with the complete ``assistant`` line
(one per content block, sharing the message id) between the deltas and ``content_block_stop`` →
``user`` lines carrying ``tool_result`` blocks → … → ``result``.

Quirks this reader keeps:
- text arrives twice, as deltas and in the ``assistant`` line: a message whose deltas were seen is
  not added again (without partial messages the ``assistant`` line is the only copy);
- a failed API call is an ``assistant`` line from model ``<synthetic>`` with ``error`` set whose text
  is the error message, then ``result`` with ``subtype: success`` but ``is_error: true`` and
  ``api_error_status``: that text is the failure, never the answer;
- the ``assistant`` usage is message_start's (``output_tokens: 1``); the turn's usage is ``result``'s;
- an interrupted turn ends in ``result`` ``error_during_execution`` (that is not a failure when we
  interrupted it);
- lines of a sub-agent (``parent_tool_use_id`` set) are its own work, not the answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from runner_kit import events as ev
from runner_kit.errors import RunnerError, SessionMissing, platform_error, status_to_code
from runner_kit.texts import t
from runner_kit.usage import usage_from

from . import const

AUTH_HINT = "check `api-key` (or `auth-token`) and `base-url`"
HINTS = {
    "upstream.auth": AUTH_HINT,
    "upstream.forbidden": AUTH_HINT,
    "upstream.rate_limited": "the model API is rate limiting this key; try again shortly",
    "upstream.unavailable": "the model API had a server error; try again shortly",
    "upstream.not_found": "check `base-url` and `model`",
    "upstream.bad_request": "check `model` and the request limits of the model API",
}

# finish reasons from claude's stop_reason / result subtype
FINISH = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
    "error_max_turns": "max_turns",
    "error_max_budget_usd": "max_budget",
}


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(c.get("text") or "") for c in content if isinstance(c, dict) and c.get("type") == "text")
    return "" if content is None else str(content)


def turn_usage(result: dict[str, Any]) -> ev.Usage | None:
    """``result.usage`` (input incl. cache reads/writes, output) plus cost, model calls and
    permission denials as extra fields; None when the counts are all zero (nothing was measured)."""
    raw = result.get("usage")
    if not isinstance(raw, dict):
        return None
    prompt = sum(
        int(raw.get(k) or 0)
        for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
        if isinstance(raw.get(k), int)
    )
    usage = usage_from({"p": prompt, "c": raw.get("output_tokens")}, prompt="p", completion="c")
    if usage is None or not (usage.prompt_tokens or usage.completion_tokens):
        return None
    if isinstance(cost := result.get("total_cost_usd"), (int, float)):
        usage.extra["cost_usd"] = cost
    if isinstance(turns := result.get("num_turns"), int):
        usage.extra["num_turns"] = turns
    if isinstance(denials := result.get("permission_denials"), list):
        usage.extra["permission_denials"] = len(denials)
    return usage


def _code_for(status: int | None, message: str) -> str:
    if status:
        return status_to_code(status)
    low = message.lower()
    if "empty or malformed response" in low:
        return "upstream.unavailable"  # a stream cut off or ended by an error event (checked on 2.1.197)
    if "parse" in low or "malformed" in low or "invalid json" in low:
        return "upstream.protocol"
    if any(w in low for w in ("connection", "timed out", "timeout", "overloaded", "econnrefused", "socket")):
        return "upstream.unavailable"
    return "upstream.error"


def result_error(result: dict[str, Any], error_text: str = "") -> RunnerError | SessionMissing:
    """The failure a ``result`` with ``is_error: true`` stands for."""
    errors = [str(e) for e in (result.get("errors") or []) if e]
    message = str(result.get("result") or error_text or "; ".join(errors) or "").strip()
    if any(const.NO_CONVERSATION in e for e in errors) or const.NO_CONVERSATION in message:
        return SessionMissing()
    status = result.get("api_error_status")
    status = status if isinstance(status, int) and status > 0 else None
    subtype = str(result.get("subtype") or "")
    if not message:
        message = {
            "error_max_turns": "stopped at the `max-turns` limit before finishing",
            "error_max_budget_usd": "stopped at its spending limit before finishing",
        }.get(subtype, f"the turn ended with {subtype or 'an error'}")
    code = _code_for(status, message)
    return platform_error(const.PLATFORM, code, HINTS.get(code, ""), status, None, message)


@dataclass
class TurnReader:
    """Turns the stdout lines of one claude turn into kit events; ``done`` after its ``result``."""

    interrupted: bool = False  # set by the adapter when it interrupted this turn
    session_id: str | None = None
    model: str | None = None
    result: dict[str, Any] | None = None
    finish_reason: str | None = None
    text_seen: bool = False
    error: RunnerError | SessionMissing | None = None  # what the turn's result reported
    _streamed: set[str] = field(default_factory=set)  # message ids whose deltas came as stream_event
    _current: str | None = None  # the message id being streamed
    _text_block_open: bool = False
    _tools: dict[str, str] = field(default_factory=dict)  # tool_use id -> tool name
    _error_text: str = ""

    @property
    def done(self) -> bool:
        return self.result is not None

    def _text(self, piece: str) -> list[ev.Event]:
        if not piece:
            return []
        out: list[ev.Event] = []
        if self.text_seen and not self._text_block_open:
            out.append(ev.Text("\n\n"))  # a new text block after a tool step: keep them apart
        self._text_block_open = True
        self.text_seen = True
        out.append(ev.Text(piece))
        return out

    def feed(self, obj: dict[str, Any]) -> list[ev.Event]:
        kind = obj.get("type")
        if obj.get("session_id") and kind in ("system", "result"):
            self.session_id = str(obj["session_id"])
        if kind == "system":
            return self._system(obj)
        if kind == "result":
            return self._result(obj)
        if obj.get("parent_tool_use_id"):
            return []  # a sub-agent's own stream
        if kind == "stream_event":
            return self._event(obj.get("event") or {})
        if kind == "assistant":
            return self._assistant(obj)
        if kind == "user":
            return self._user(obj)
        return []  # rate_limit_event, control_response, future kinds

    def _system(self, obj: dict[str, Any]) -> list[ev.Event]:
        sub = obj.get("subtype")
        if sub == "init":
            self.model = obj.get("model") or self.model
            return [ev.SessionId(self.session_id)] if self.session_id else []
        if sub == "api_retry":
            what = obj.get("error_status") or obj.get("error") or "error"
            return [ev.Progress(t("Retrying the model API ({what}), attempt {n}", "正在重试模型 API（{what}），第 {n} 次",
                                  what=what, n=obj.get("attempt")))]
        return []

    def _event(self, event: dict[str, Any]) -> list[ev.Event]:
        etype = event.get("type")
        if etype == "message_start":
            msg = event.get("message") or {}
            self._current = str(msg.get("id") or "")
            self._streamed.add(self._current)
            self._text_block_open = False
            return []
        if etype == "content_block_start":
            self._text_block_open = False
            return []
        if etype == "content_block_delta":
            delta = event.get("delta") or {}
            if delta.get("type") == "text_delta":
                return self._text(str(delta.get("text") or ""))
            if delta.get("type") == "thinking_delta":
                return [ev.Think(t)] if (t := str(delta.get("thinking") or "")) else []
            return []
        if etype == "message_delta":
            stop = (event.get("delta") or {}).get("stop_reason")
            if stop:
                self.finish_reason = FINISH.get(stop, str(stop))
        return []

    def _assistant(self, obj: dict[str, Any]) -> list[ev.Event]:
        msg = obj.get("message") or {}
        blocks = msg.get("content") or []
        if obj.get("error"):
            self._error_text = _text_of(blocks)  # the API error, as the CLI words it
            return []
        streamed = str(msg.get("id") or "") in self._streamed
        out: list[ev.Event] = []
        for block in blocks if isinstance(blocks, list) else []:
            if not isinstance(block, dict):
                continue
            btype = block.get("type")
            if btype == "text" and not streamed:
                self._text_block_open = False
                out += self._text(str(block.get("text") or ""))
            elif btype == "thinking" and not streamed and block.get("thinking"):
                out.append(ev.Think(str(block["thinking"])))
            elif btype in ("tool_use", "server_tool_use"):
                call_id = str(block.get("id") or "")
                name = str(block.get("name") or "tool")
                self._tools[call_id] = name
                raw = block.get("input")
                params: dict[str, Any] = raw if isinstance(raw, dict) else {}
                self._text_block_open = False
                out.append(ev.ToolStarted(call_id, name, params))
        return out

    def _user(self, obj: dict[str, Any]) -> list[ev.Event]:
        content = (obj.get("message") or {}).get("content")
        out: list[ev.Event] = []
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                call_id = str(block.get("tool_use_id") or "")
                text = _text_of(block.get("content"))
                err = (text or "the tool failed") if block.get("is_error") else None
                out.append(ev.ToolCompleted(call_id, self._tools.get(call_id, "tool"), None if err else text, err))
        return out

    def _result(self, obj: dict[str, Any]) -> list[ev.Event]:
        self.result = obj
        out: list[ev.Event] = []
        if self.session_id:
            out.append(ev.SessionId(self.session_id))
        usage = turn_usage(obj)
        if usage is not None:
            out.append(usage)
        subtype = str(obj.get("subtype") or "")
        if subtype in FINISH:
            self.finish_reason = FINISH[subtype]
        elif obj.get("stop_reason"):
            self.finish_reason = FINISH.get(str(obj["stop_reason"]), self.finish_reason)
        if obj.get("is_error") and not self.interrupted:
            if subtype in ("error_max_turns", "error_max_budget_usd") and self.text_seen:
                return out  # stopped at a limit the owner set: the text so far is the answer
            self.error = result_error(obj, self._error_text)
            if isinstance(self.error, SessionMissing):
                return []  # the id claude echoes for a session it does not have is not one to keep
            return out
        if not obj.get("is_error") and not self.text_seen and (final := str(obj.get("result") or "")):
            out.append(ev.FinalText(final))
        return out
