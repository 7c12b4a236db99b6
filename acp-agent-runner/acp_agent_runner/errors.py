"""JSON-RPC errors from an ACP agent mapped onto the runner taxonomy.

The agents put what went wrong with the model API into the error they answer ``session/prompt``
with (fixtures/real-peers):

- codex-acp: ``-32603 "Internal error"`` with ``data: {message, codex_error_info}`` where the message
  is the Codex core's text (500: "We're currently experiencing high demand…", 429: "exceeded retry
  limit, last status: 429 Too Many Requests", 401: "unexpected status 401 Unauthorized: …").
- claude-code-acp: ``-32603 "Internal error: API Error: 500 {…body…}"`` (the text in ``message``).
"""

from __future__ import annotations

import re
from typing import Any

from runner_kit.errors import RunnerError, platform_error, status_to_code

from . import const

_STATUS = re.compile(
    r"(?i)(?:API Error:?\s*|unexpected status\s+|last status:?\s*|status(?: code)?[:= ]\s*|Request rejected\s*\(|HTTP\s+)(\d{3})\b"
)
_WORDS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"(?i)invalid api key|unauthori[sz]ed|authentication|not logged in|/login\b"), "upstream.auth"),
    (re.compile(r"(?i)\bforbidden\b|permission denied"), "upstream.forbidden"),
    (re.compile(r"(?i)rate.?limit|too many requests|usage.?limit|quota"), "upstream.rate_limited"),
    (re.compile(r"(?i)high demand|overloaded|internal server error|server.?side|bad gateway|service unavailable"
                r"|stream disconnected|error sending request|connection (?:refused|reset|closed)"), "upstream.unavailable"),
    (re.compile(r"(?i)context (?:window|length)|too large|too long"), "upstream.too_large"),
]
_CODEX_INFO = {
    "unauthorized": "upstream.auth",
    "usage_limit_exceeded": "upstream.rate_limited",
    "too_many_requests": "upstream.rate_limited",
    "internal_server_error": "upstream.unavailable",
    "server_overloaded": "upstream.unavailable",
    "http_connection_failed": "upstream.unavailable",
    "response_stream_connection_failed": "upstream.unavailable",
    "response_stream_disconnected": "upstream.unavailable",
    "context_window_exceeded": "upstream.too_large",
    "bad_request": "upstream.bad_request",
}
_HINTS = {
    "upstream.auth": "check `api-key` (or the agent's own login)",
    "upstream.forbidden": "the model API refused this key or model",
    "upstream.rate_limited": "the model API is rate limiting; try again shortly",
    "upstream.unavailable": "the model API failed or is unreachable; check `base-url`",
    "upstream.too_large": "the conversation is too long for the model; start a new one",
    "upstream.bad_request": "check `model` and the agent's settings",
}


def error_text(exc: Any) -> str:
    """What the agent said: ``data.message`` (or ``data.details``) when given, else the message."""
    data = getattr(exc, "data", None)
    if isinstance(data, dict):
        for key in ("message", "details", "error"):
            value = data.get(key)
            if isinstance(value, str) and value.strip():
                return value.strip()
    return str(exc).strip() or "error"


def classify(text: str, info: str | None = None) -> tuple[str, int | None]:
    """(taxonomy code, HTTP status if the text names one) for an agent's error text."""
    if info and info.lower() in _CODEX_INFO:
        m = _STATUS.search(text)
        return _CODEX_INFO[info.lower()], int(m.group(1)) if m else None
    m = _STATUS.search(text)
    if m:
        status = int(m.group(1))
        return status_to_code(status), status
    for pattern, code in _WORDS:
        if pattern.search(text):
            return code, None
    return "upstream.error", None


def map_request_error(exc: Any, what: str, agent: str = f"{const.PLATFORM} agent") -> RunnerError:
    """A JSON-RPC error answer (``acp.RequestError``) from ``what`` (e.g. ``session/prompt``) of
    ``agent`` (its name, as the owner knows it)."""
    code = getattr(exc, "code", None)
    text = error_text(exc)
    data = getattr(exc, "data", None)
    info = data.get("codex_error_info") if isinstance(data, dict) else None
    if code == -32000:
        taxonomy, status = "upstream.auth", None
    else:
        taxonomy, status = classify(text, info if isinstance(info, str) else None)
        if taxonomy == "upstream.error" and code == -32602:
            taxonomy = "upstream.bad_request"
    label = f"{agent} ({what})"
    return platform_error(label, taxonomy, _HINTS.get(taxonomy, ""), status, None, _one_line(text))


def session_gone(exc: Any) -> bool:
    """The agent says the session id it was asked to load/resume does not exist."""
    code = getattr(exc, "code", None)
    if code == -32002:  # Resource not found
        return True
    if code == -32601:  # the method itself is unknown, not the session
        return False
    text = error_text(exc).lower() + " " + str(exc).lower()
    return any(w in text for w in ("not found", "no rollout", "unknown session", "does not exist",
                                   "no such session", "no conversation found"))


def _one_line(text: str) -> str:
    return " ".join(text.split())[:300]
