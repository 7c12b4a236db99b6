"""Dify's error envelope ``{"status", "code", "message"}`` mapped onto the kit taxonomy."""

from __future__ import annotations

import json
from typing import Any

from runner_kit import errors
from runner_kit.errors import RunnerError, platform_error, status_to_code
from runner_kit.wire import json_object

from .const import PLATFORM

_UNSUPPORTED_APPS = "text-generation (completion) apps are not supported"

# Dify error code -> (taxonomy code, hint shown to the bot owner)
_BY_CODE: dict[str, tuple[str, str]] = {
    "unauthorized": ("upstream.auth", "check the app API key"),
    "provider_quota_exceeded": ("upstream.quota", "the model provider's quota in Dify is used up"),
    "rate_limit_error": ("upstream.quota", "the Dify app hit its rate or quota limit"),
    "too_many_requests": ("upstream.rate_limited", "Dify is rate limiting requests"),
    "provider_not_initialize": ("upstream.error", "the model provider is not configured in Dify"),
    "model_currently_not_support": ("upstream.error", "the app's model is not available"),
    "app_unavailable": ("config.invalid", "the app is unavailable or not published; check app-type and the key"),
    # Dify sends both for a text-generation app too, so neither hint may point only at the other type
    "not_chat_app": (
        "config.invalid",
        f"this key's app does not take chat messages: for a workflow app set app-type to workflow; "
        f"{_UNSUPPORTED_APPS}",
    ),
    "not_workflow_app": (
        "config.invalid",
        f"this key's app is not a workflow app: for a chatbot, agent or chatflow app set app-type to "
        f"chat, agent or chatflow; {_UNSUPPORTED_APPS}",
    ),
    "agent_not_published": ("config.invalid", "publish the agent app in Dify first"),
    "file_too_large": ("upstream.too_large", "a file is larger than Dify accepts"),
    "unsupported_file_type": ("input.invalid", "Dify does not accept this file type"),
    "conversation_completed": ("upstream.bad_request", "the Dify conversation is closed"),
}

BASE_URL_HINT = "is base-url the Dify API address ending in /v1?"
# the message Dify sends with 404 not_found when a conversation id is unknown to it
_CONVERSATION_MISSING = "conversation not exists"
# werkzeug's own text for a route that does not exist (base-url without /v1 reaches the API root)
_NO_SUCH_ROUTE = "requested url was not found"


def map_error(status: int | None, code: str | None, message: str | None) -> RunnerError:
    """One Dify error (pre-stream envelope or mid-stream ``error`` event) as a RunnerError."""
    taxonomy, hint = _BY_CODE.get(code or "", (status_to_code(status) if status else "upstream.error", ""))
    return platform_error(PLATFORM, taxonomy, hint, status, code, message)


def error_fields(doc: dict[str, Any]) -> tuple[int | None, str | None, str | None] | None:
    """``(status, code, message)`` of an error body, or None when ``doc`` does not look like one.

    Understands Dify's envelope and what proxies and gateways in front of it send:
    ``{"error": "…"}``, ``{"error": {"message": …, "code"/"type": …}}`` and ``{"detail": …}``.
    """
    status = doc.get("status") if isinstance(doc.get("status"), int) else None
    code = doc.get("code") if isinstance(doc.get("code"), str) else None
    texts: list[str] = []
    if doc.get("message"):  # a string; flask-restful's argument errors send an object
        texts.append(_as_text(doc["message"]))
    err = doc.get("error")
    if isinstance(err, dict):
        if not code and isinstance(err.get("code") or err.get("type"), str):
            code = err.get("code") or err.get("type")
        inner = err.get("message") or err.get("detail")
        if inner:
            texts.append(_as_text(inner))
    elif isinstance(err, str):
        texts.append(err)
    if doc.get("detail"):
        texts.append(_as_text(doc["detail"]))
    if not code and not texts:
        return None
    parts: list[str] = []
    for t in texts:
        t = t.strip()
        if t and t not in parts:
            parts.append(t)
    return status, code, "; ".join(parts) or None


def conversation_missing(status: int, body: bytes) -> bool:
    """True only for Dify's own answer that a conversation id is unknown (404 not_found)."""
    if status != 404:
        return False
    doc = json_object(body)
    if doc is None or doc.get("code") != "not_found":
        return False
    message = doc.get("message")
    return isinstance(message, str) and _CONVERSATION_MISSING in message.lower()


def parse_envelope(status: int, body: bytes, content_type: str) -> RunnerError:
    """A non-2xx response; HTML pages from a proxy are reported by status alone."""
    code = message = None
    doc = json_object(body)
    if doc is not None:
        fields = error_fields(doc)
        if fields is not None:
            _, code, message = fields
        if status == 404 and message and _NO_SUCH_ROUTE in message.lower():
            message = f"{message} ({BASE_URL_HINT})"
    elif errors.looks_html(body, content_type):
        message = html_hint(status)
    return map_error(status, code, message)


def html_hint(status: int) -> str:
    return errors.html_hint(status, "Dify", BASE_URL_HINT)


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
