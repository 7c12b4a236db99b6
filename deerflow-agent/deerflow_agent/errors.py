"""DeerFlow / LangGraph error bodies (FastAPI ``{"detail": …}``) and in-stream ``error`` events
mapped onto the kit taxonomy, with a hint for the bot owner."""

from __future__ import annotations

from typing import Any

from runner_kit.errors import RunnerError, platform_error, status_to_code
from runner_kit.wire import json_object

from .const import BASE_URL_HINT, PLATFORM

# FastAPI's text for a route that does not exist (a wrong API prefix, not a missing thread)
NO_ROUTE = "not found"
# LangGraph's (and DeerFlow's) text when a thread id, or the assistant, is unknown
THREAD_MISSING = "thread or assistant not found"

_HINTS: dict[int, tuple[str, str]] = {
    401: ("upstream.auth", "check api-key / auth-header: DeerFlow takes a personal access token as Bearer, "
                           "LangGraph Platform its API key; a server with auth disabled needs neither"),
    403: ("upstream.forbidden", "the key may not create threads or runs on this server"),
    409: ("upstream.rate_limited", "DeerFlow is still working on an earlier message in this conversation; "
                                   "send the message again when it has answered"),
    413: ("upstream.too_large", "the message or a file is larger than DeerFlow accepts"),
    429: ("upstream.rate_limited", "DeerFlow is rate limiting requests"),
}


def detail_of(body: bytes) -> tuple[bool, str | None, str | None]:
    """``(is_json, code, message)`` of an error body: FastAPI's ``detail`` as a string, an object
    ``{code, message}`` (DeerFlow auth) or a validation list, or a bare ``{message}``."""
    doc = json_object(body)
    if doc is None:
        return False, None, None
    detail: Any = doc.get("detail", doc.get("message") or doc.get("error"))
    if isinstance(detail, dict):
        code = detail.get("code") if isinstance(detail.get("code"), str) else None
        msg = detail.get("message") or detail.get("msg")
        return True, code, str(msg) if msg else None
    if isinstance(detail, list):  # pydantic: [{"loc": [...], "msg": ...}, ...]
        parts = []
        for item in detail[:3]:
            if isinstance(item, dict):
                loc = ".".join(str(x) for x in (item.get("loc") or [])[1:])
                parts.append(f"{loc}: {item.get('msg')}" if loc else str(item.get("msg")))
        return True, None, "; ".join(parts) or None
    return True, None, str(detail) if detail not in (None, "") else None


def route_missing(status: int, body: bytes) -> bool:
    """While probing a prefix: the address has no such API route (FastAPI's bare 404, a web page, a
    proxy's 404, a 405) — anything but LangGraph's own "thread or assistant not found"."""
    return status == 405 or (status == 404 and not thread_missing(status, body))


def thread_missing(status: int, body: bytes) -> bool:
    """LangGraph's 404 for an unknown thread (or assistant): ``{"detail": "Thread or assistant not found."}``."""
    if status != 404:
        return False
    _, _, message = detail_of(body)
    text = (message or "").lower()
    return THREAD_MISSING in text or ("thread" in text and "not found" in text)


def html_hint(status: int) -> str:
    if status in (502, 503, 504):
        return "a proxy in front of DeerFlow returned an HTML error page: DeerFlow may be down or restarting"
    if status in (404, 405):
        return f"the server returned a web page, not the API ({BASE_URL_HINT})"
    return "the server returned an HTML error page"


def map_http(status: int, body: bytes, content_type: str) -> RunnerError:
    """A non-2xx response."""
    is_json, code, message = detail_of(body)
    if not is_json and (body.lstrip()[:1] == b"<" or "html" in content_type.lower()):
        message = html_hint(status)
    taxonomy, hint = _HINTS.get(status, (status_to_code(status), ""))
    text = (message or "").lower()
    if status == 403 and any(w in text for w in ("api key", "api-key", "authentication", "token")):
        taxonomy, hint = _HINTS[401]  # LangGraph Platform answers a missing or wrong x-api-key with 403
    if status == 404 and is_json and (message or "").strip().lower() == NO_ROUTE:
        hint = BASE_URL_HINT
    if status in (400, 422) and ("invalid assistant" in text or ("assistant" in text and "not found" in text)):
        taxonomy, hint = "config.invalid", "check assistant-id (DeerFlow's agent is lead_agent)"
    elif status == 400 and "model" in text and "allowlist" in text:
        taxonomy, hint = "config.invalid", "check model-name: it must be a model in DeerFlow's config.yaml"
    return platform_error(PLATFORM, taxonomy, hint, status, code, message)


def assistant_missing(assistant: str) -> RunnerError:
    """A 404 "Thread or assistant not found." for a thread created a moment ago: the assistant is unknown."""
    return RunnerError(
        "config.invalid",
        f"{PLATFORM} does not know the assistant '{assistant[:80]}' (check assistant-id: DeerFlow's agent is "
        "lead_agent; a LangGraph server takes a graph name from its langgraph.json or an assistant id)",
        status=404,
    )


def stream_error(data: Any) -> RunnerError:
    """An in-stream ``error`` event: LangGraph ``{"error", "message"}``, DeerFlow ``{"name", "message"}``."""
    if isinstance(data, dict):
        name = str(data.get("error") or data.get("name") or data.get("type") or "") or None
        message = data.get("message") or data.get("detail")
        message = str(message) if message not in (None, "") else None
    else:
        name, message = None, str(data) if data not in (None, "") else None
    kind = (name or "").lower()
    taxonomy, hint = "upstream.error", "the agent failed while answering"
    if "ratelimit" in kind:
        taxonomy, hint = "upstream.rate_limited", "the model provider behind DeerFlow is rate limiting"
    elif "timeout" in kind:
        taxonomy, hint = "upstream.timeout", "the model provider behind DeerFlow did not answer in time"
    elif any(k in kind for k in ("apierror", "connection", "internalserver", "unavailable", "overloaded")):
        taxonomy, hint = "upstream.unavailable", "the model provider behind DeerFlow failed"
    elif "recursion" in kind:
        hint = "the agent took more steps than recursion-limit allows"
    return platform_error(PLATFORM, taxonomy, hint, None, name, message)
