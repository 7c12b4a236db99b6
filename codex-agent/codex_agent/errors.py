"""Codex's failures mapped onto the kit taxonomy.

A model-API failure reaches us as an ``error`` notification ``{error: {message, codexErrorInfo},
willRetry}`` followed by ``turn/completed`` with ``status: "failed"`` and the same error. The
``codexErrorInfo`` is a camelCase name (``"internalServerError"``, ``"unauthorized"``) or a
one-key object carrying the upstream status (``{"httpConnectionFailed": {"httpStatusCode": 401}}``).
The message is Codex's own text: for a 500 it is a generic "high demand" line (the server's body is
dropped, real-peers.md §4), for a 401 ``unexpected status 401 Unauthorized: <body message>, url: …``,
for a 429 ``exceeded retry limit, last status: 429 Too Many Requests``. When the info gives no status
the message is searched for one.
"""

from __future__ import annotations

import re
from typing import Any

from runner_kit.errors import RunnerError, platform_error, status_to_code
from runner_kit.wire import json_object

from .const import PLATFORM

# codexErrorInfo name -> (taxonomy code, hint for the bot owner)
_BY_INFO: dict[str, tuple[str, str]] = {
    "unauthorized": ("upstream.auth", "check api-key and env-key: the model API refused the key"),
    "usageLimitExceeded": ("upstream.quota", "the model account's usage limit is reached"),
    "contextWindowExceeded": ("upstream.too_large", "the conversation no longer fits the model's context; reset it"),
    "serverOverloaded": ("upstream.unavailable", "the model API is overloaded; try again shortly"),
    "internalServerError": ("upstream.unavailable", "the model API had an internal error; try again shortly"),
    "badRequest": ("upstream.bad_request", "the model API rejected the request; check model and wire-api"),
    "sandboxError": ("upstream.error", "Codex's sandbox failed to run a command; see permission-mode and sandbox"),
    "cyberPolicy": ("upstream.forbidden", "the model provider refused the request"),
    "modelNotFound": ("upstream.not_found", "check model: the model API does not know it (or this key cannot use it)"),
    "threadRollbackFailed": ("upstream.error", ""),
    "activeTurnNotSteerable": ("upstream.error", ""),
}
_WITH_STATUS = frozenset({
    "httpConnectionFailed", "responseStreamConnectionFailed", "responseStreamDisconnected",
    "responseTooManyFailedAttempts",
})
_STATUS_HINTS: dict[str, str] = {
    "upstream.auth": "check api-key and env-key: the model API refused the key",
    "upstream.forbidden": "the model API refused this key or model",
    "upstream.not_found": "check base-url (it should end where /responses follows) and model",
    "upstream.rate_limited": "the model API is rate limiting; try again shortly or raise max-retries",
    "upstream.unavailable": "the model API is failing or unreachable; try again shortly",
    "upstream.bad_request": "the model API rejected the request; check model and wire-api",
    "upstream.too_large": "the request is larger than the model API accepts",
}
_STATUS_IN_TEXT = re.compile(r"\b(?:status(?: code)?:?|last status:)\s*(\d{3})\b", re.IGNORECASE)
_RECONNECTING = re.compile(r"^\s*Reconnecting\.\.\.", re.IGNORECASE)
_UNREACHABLE = ("error sending request", "connection refused", "dns error", "timed out", "connect error")
# the 502 the agent's secret proxy (runner_kit.secret_proxy) answers when it cannot connect upstream
_PROXY_UNREACHABLE = "could not reach "
# what Codex says when the stream ended without response.completed (a cut or a stall upstream)
_STREAM_CUT = ("stream disconnected", "stream closed before response.completed", "idle timeout waiting for sse")
_SESSION_GONE = ("no rollout found", "thread not found", "invalid thread id", "invalid session id", "no thread with id")
# an API error body Codex passes on verbatim (a 400 arrives as the body's JSON text): type -> code
_BODY_TYPES = (("invalid_request", "upstream.bad_request"), ("authentication", "upstream.auth"),
               ("permission", "upstream.forbidden"), ("rate_limit", "upstream.rate_limited"),
               ("insufficient_quota", "upstream.quota"), ("not_found", "upstream.not_found"),
               ("server_error", "upstream.unavailable"), ("overloaded", "upstream.unavailable"))
_HTML = re.compile(r"<html.*?</html>|<!doctype html.*", re.IGNORECASE | re.DOTALL)


def info_name(info: Any) -> tuple[str | None, int | None]:
    """``(name, http status)`` of a ``codexErrorInfo`` value in either of its shapes."""
    if isinstance(info, str):
        return info, None
    if isinstance(info, dict) and len(info) == 1:
        name, inner = next(iter(info.items()))
        status = inner.get("httpStatusCode") if isinstance(inner, dict) else None
        return str(name), status if isinstance(status, int) else None
    return None, None


def turn_error(error: Any) -> RunnerError:
    """One failed turn's ``error`` object (from the notification or ``turn/completed``)."""
    err = error if isinstance(error, dict) else {}
    message = str(err.get("message") or "").strip()
    details = err.get("additionalDetails")
    if isinstance(details, str) and details.strip() and details.strip() not in message:
        message = f"{message} ({details.strip()})" if message else details.strip()
    name, status = info_name(err.get("codexErrorInfo"))
    message, body_code = _body_error(message)
    if _HTML.search(message):
        message = _HTML.sub("an HTML error page (a proxy or web server, not the model API)", message)
    if status is None:
        found = _STATUS_IN_TEXT.search(message)
        status = int(found.group(1)) if found else None
    if name in _BY_INFO:
        code, hint = _BY_INFO[name]
    elif status is not None:
        code = status_to_code(status)
        hint = _STATUS_HINTS.get(code, "")
    elif body_code is not None:
        code, hint = body_code, _STATUS_HINTS.get(body_code, "")
    elif any(s in message.lower() for s in _STREAM_CUT) or name == "responseStreamDisconnected":
        code, hint = "upstream.unavailable", "the model API's answer stream was cut off"
    elif any(s in message.lower() for s in _UNREACHABLE) or name in _WITH_STATUS:
        code, hint = "upstream.unavailable", "the model API cannot be reached; check base-url"
    else:
        code, hint = "upstream.error", ""
    if status == 502 and _PROXY_UNREACHABLE in message:
        hint = "the model API cannot be reached; check base-url"
    return platform_error(PLATFORM, code, hint, status, None, message or "the turn failed")


def _body_error(message: str) -> tuple[str, str | None]:
    """``(text to show, code)`` when ``message`` is an API error body in JSON (Codex passes a 400's
    body through as the whole message); else ``(message, None)``."""
    doc = json_object(message) if message.startswith("{") else None
    err = doc.get("error") if doc is not None else None
    if not isinstance(err, dict):
        return message, None
    kind = " ".join(str(err.get(k) or "") for k in ("type", "code")).lower()
    code = next((c for marker, c in _BODY_TYPES if marker in kind), "upstream.error")
    text = str(err.get("message") or "").strip() or message
    return text, code


def is_retry_notice(params: dict[str, Any]) -> bool:
    """An ``error`` notification Codex follows with a retry (``willRetry``, "Reconnecting... 1/2")."""
    if params.get("willRetry") is True:
        return True
    err = params.get("error")
    message = err.get("message") if isinstance(err, dict) else None
    return isinstance(message, str) and bool(_RECONNECTING.match(message))


def network_wait(message: str, details: str) -> bool:
    """A retry notice for a model API that cannot be connected to (refused, no route, DNS)."""
    return "waiting for network" in message.lower() or "connection failed" in details.lower()


def unreachable(details: str) -> RunnerError:
    return RunnerError("upstream.unavailable", f"{PLATFORM} cannot reach the model API ({details}); "
                                               "check base-url and that the API is running")


def session_gone(message: str) -> bool:
    """True when a thread/resume error says the stored thread does not exist (any more)."""
    low = message.lower()
    return any(s in low for s in _SESSION_GONE)


def rpc_failure(method: str, code: int, message: str) -> RunnerError:
    """A JSON-RPC error answer to one of our requests."""
    text = f"{PLATFORM} app-server refused {method}: {message or 'no reason given'} (code {code})"
    if code == -32001:  # "Server overloaded; retry later."
        return RunnerError("upstream.unavailable", text)
    if method == "initialize":
        return RunnerError("process.exited", text + "; is `executable` a Codex CLI that has `app-server`?")
    return RunnerError("upstream.bad_request", text)
