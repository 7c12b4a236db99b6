"""Dify's error envelope ``{"status", "code", "message"}`` mapped onto the kit taxonomy."""

from __future__ import annotations

import json

from runner_kit.errors import RunnerError, status_to_code

from .const import PLATFORM

# Dify error code -> (taxonomy code, hint shown to the bot owner)
_BY_CODE: dict[str, tuple[str, str]] = {
    "unauthorized": ("upstream.auth", "check the app API key"),
    "provider_quota_exceeded": ("upstream.quota", "the model provider's quota in Dify is used up"),
    "rate_limit_error": ("upstream.quota", "the Dify app hit its rate or quota limit"),
    "too_many_requests": ("upstream.rate_limited", "Dify is rate limiting requests"),
    "provider_not_initialize": ("upstream.error", "the model provider is not configured in Dify"),
    "model_currently_not_support": ("upstream.error", "the app's model is not available"),
    "app_unavailable": ("config.invalid", "the app is unavailable or not published; check app-type and the key"),
    "not_chat_app": ("config.invalid", "this key belongs to a workflow app; set app-type to workflow"),
    "not_workflow_app": ("config.invalid", "this key does not belong to a workflow app; set app-type to chat"),
    "agent_not_published": ("config.invalid", "publish the agent app in Dify first"),
    "file_too_large": ("upstream.too_large", "a file is larger than Dify accepts"),
    "unsupported_file_type": ("input.invalid", "Dify does not accept this file type"),
    "conversation_completed": ("upstream.bad_request", "the Dify conversation is closed"),
}


def map_error(status: int | None, code: str | None, message: str | None) -> RunnerError:
    """One Dify error (pre-stream envelope or mid-stream ``error`` event) as a RunnerError."""
    code = code or ""
    message = (message or "").strip()
    taxonomy, hint = _BY_CODE.get(code, (status_to_code(status) if status else "upstream.error", ""))
    parts = [f"{PLATFORM} error"]
    if status:
        parts.append(f"HTTP {status}")
    if code:
        parts.append(code)
    text = " ".join(parts)
    detail = message or hint
    if detail:
        text += f": {detail[:300]}"
    if hint and message and hint not in message:
        text += f" ({hint})"
    if taxonomy == "upstream.error" and status is not None and status >= 500:
        taxonomy = "upstream.unavailable"
    return RunnerError(taxonomy, text, status=status)


def parse_envelope(status: int, body: bytes, content_type: str) -> RunnerError:
    """A non-2xx response; HTML pages from a proxy are reported by status alone."""
    code = message = None
    try:
        doc = json.loads(body) if body.strip()[:1] == b"{" else None
    except ValueError:
        doc = None
    if isinstance(doc, dict):
        code = doc.get("code") if isinstance(doc.get("code"), str) else None
        message = doc.get("message") if isinstance(doc.get("message"), str) else None
    elif body.lstrip()[:1] == b"<":
        message = "the server returned an HTML error page (is base-url the Dify API address ending in /v1?)"
    return map_error(status, code, message)
