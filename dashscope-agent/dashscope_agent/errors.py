"""DashScope's error envelope ``{"code", "message", "request_id"}`` mapped onto the kit taxonomy."""

from __future__ import annotations

import re
from typing import Any

from runner_kit import errors
from runner_kit.errors import RunnerError, platform_error, status_to_code
from runner_kit.wire import json_object

from .const import PLATFORM

BASE_URL_HINT = "is base-url the DashScope address, e.g. https://dashscope.aliyuncs.com/api/v1?"

_APP_HINT = "check app-id (the Bailian app id) and that the app is published"

# DashScope error code -> (taxonomy code, hint for the bot owner)
_BY_CODE: dict[str, tuple[str, str]] = {
    "InvalidApiKey": ("upstream.auth", "check the Bailian API key (sk-…) in this bot's settings"),
    "Unauthorized": ("upstream.auth", "check the Bailian API key (sk-…) in this bot's settings"),
    "AccessDenied": (
        "upstream.forbidden",
        "the key may not use this app: check that app-id belongs to the key's workspace (set workspace-id for a "
        "sub-workspace) and that the app is published",
    ),
    "Workspace.AccessDenied": ("upstream.forbidden", "the key has no access to this workspace (check workspace-id)"),
    "AccessDenied.Unpurchased": ("upstream.forbidden", "Model Studio is not activated for this Alibaba Cloud account"),
    "Arrearage": ("upstream.quota", "the Alibaba Cloud account is overdue; top it up"),
    "DataInspectionFailed": ("upstream.bad_request", "DashScope's content inspection refused the input or output"),
    "Throttling": ("upstream.rate_limited", "DashScope is rate limiting this key; try again shortly"),
    "Throttling.RateQuota": ("upstream.rate_limited", "the app's rate limit was reached; try again shortly"),
    "Throttling.AllocationQuota": ("upstream.quota", "the key's token quota is used up for now"),
    "Throttling.FreeTierOnly": ("upstream.quota", "the free tier is used up; enable paid use in Model Studio"),
    "AppNotFound": ("upstream.not_found", _APP_HINT),
    "App.NotFound": ("upstream.not_found", _APP_HINT),
    "NotFound": ("upstream.not_found", ""),
    "ModelNotFound": ("upstream.not_found", "the app's model is not available; check the app in Bailian"),
    "InvalidParameter": ("upstream.bad_request", ""),
    "BadRequest.InputLength": ("upstream.too_large", "the message is longer than the app accepts"),
    "InternalError": ("upstream.unavailable", "DashScope had an internal error; try again"),
    "InternalError.Timeout": ("upstream.timeout", "DashScope timed out generating the answer"),
    "ServiceUnavailable": ("upstream.unavailable", "DashScope is temporarily unavailable"),
    "SystemError": ("upstream.unavailable", "DashScope had an internal error; try again"),
}

# an unknown or expired session, as DashScope words it (InvalidParameter / NotFound)
_SESSION_GONE = re.compile(r"session\w*[^.;]*\b(not\s+(?:found|exist\w*)|expired|invalid|does\s+not\s+exist)", re.I)


def _key_hint(code: str, message: str, status: int | None) -> tuple[str, str] | None:
    """InvalidParameter also covers a wrong app id or workspace; its message says which."""
    if code != "InvalidParameter":
        return None
    low = message.lower()
    taxonomy = status_to_code(status) if status and status >= 400 else "upstream.bad_request"
    if "app" in low and ("not found" in low or "not exist" in low or "invalid" in low):
        return taxonomy, _APP_HINT
    if "workspace" in low:
        return taxonomy, "check workspace-id (advanced settings) and that the app lives in that workspace"
    return None


def map_error(status: int | None, code: str | None, message: str | None) -> RunnerError:
    """One DashScope error (HTTP envelope or ``event:error`` in the stream) as a RunnerError."""
    code = (code or "").strip()
    message = (message or "").strip()
    found = _key_hint(code, message, status) or _BY_CODE.get(code)
    if found is None and "." in code:
        found = _BY_CODE.get(code.split(".", 1)[0])
    if found is None:
        found = (status_to_code(status) if status else "upstream.error", "")
    taxonomy, hint = found
    if taxonomy == "upstream.bad_request" and status == 404:
        taxonomy = "upstream.not_found"
    return platform_error(PLATFORM, taxonomy, hint, status, code, message)


def error_fields(doc: dict[str, Any]) -> tuple[str | None, str | None] | None:
    """``(code, message)`` of an error body, or None when ``doc`` does not look like one.

    DashScope sends ``{"code", "message", "request_id"}``; gateways in front of it may send
    ``{"error": {"code"/"type", "message"}}`` or ``{"error": "…"}``."""
    code = doc.get("code") if isinstance(doc.get("code"), str) and doc.get("code") else None
    message = doc.get("message") if isinstance(doc.get("message"), str) else None
    err = doc.get("error")
    if isinstance(err, dict):
        code = code or (err.get("code") or err.get("type") or None)
        message = message or err.get("message")
    elif isinstance(err, str):
        message = message or err
    if code is None and not message:
        return None
    return (str(code) if code else None), (str(message) if message else None)


def session_gone(status: int, body: bytes | str) -> bool:
    """True only for DashScope's own answer that the session id it was sent is unknown or expired."""
    if status not in (400, 404):
        return False
    doc = json_object(body)
    if doc is None:
        return False
    fields = error_fields(doc)
    if fields is None:
        return False
    code, message = fields
    if code not in ("InvalidParameter", "NotFound", "SessionNotFound", "InvalidSession"):
        return False
    return bool(message and _SESSION_GONE.search(message))


def parse_envelope(status: int, body: bytes, content_type: str) -> RunnerError:
    """A non-2xx response; HTML pages from a proxy are reported by status alone."""
    code = message = None
    doc = json_object(body)
    if doc is not None:
        fields = error_fields(doc)
        if fields is not None:
            code, message = fields
    elif errors.looks_html(body, content_type):
        message = html_hint(status)
    if status == 404 and code is None:
        message = f"{message or 'no such address'} ({BASE_URL_HINT})"
    return map_error(status, code, message)


def html_hint(status: int) -> str:
    return errors.html_hint(status, "DashScope", BASE_URL_HINT)
