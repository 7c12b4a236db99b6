"""WeKnora's error bodies mapped onto the kit taxonomy.

Handlers answer ``{"success": false, "error": {"code", "message", "details"}}`` (an ``AppError``:
1000 bad request, 1001 unauthorized, 1002 forbidden, 1003 not found, 1006 too many requests,
1007 internal, 1008 unavailable, 1009 timeout, 1010 validation); the auth middleware and a few
handlers answer ``{"error": "…"}`` (a bad key: 401 ``{"error": "Unauthorized: invalid API key"}``);
gin's own unknown route is a plain ``404 page not found``. In a stream, ``response_type: "error"``
carries the message in ``content`` and ``data.stage``.
"""

from __future__ import annotations

from typing import Any

from runner_kit.errors import RunnerError, html_hint, looks_html, platform_error, status_to_code
from runner_kit.wire import json_object

from .const import NOT_FOUND_CODE, PLATFORM

BASE_URL_HINT = "is base-url the WeKnora server, such as http://your-host:8080 or http://your-host:8080/api/v1?"

# WeKnora AppError code -> taxonomy code (when the status says less)
_BY_CODE: dict[int, str] = {
    1000: "upstream.bad_request",
    1001: "upstream.auth",
    1002: "upstream.forbidden",
    1003: "upstream.not_found",
    1005: "upstream.bad_request",
    1006: "upstream.rate_limited",
    1007: "upstream.error",
    1008: "upstream.unavailable",
    1009: "upstream.timeout",
    1010: "upstream.bad_request",
}
# what the owner should check, per taxonomy code
_HINTS: dict[str, str] = {
    "upstream.auth": "check the api-key setting; WeKnora issues keys under Settings → API Keys",
    "upstream.forbidden": "the API key may be limited to other knowledge bases or lack the chat capability",
    "upstream.rate_limited": "WeKnora is rate limiting requests; try again shortly",
    "upstream.unavailable": "WeKnora or a model it calls failed; try again shortly",
    "upstream.too_large": "the message or a file is larger than WeKnora accepts",
}
_ROUTE_MISSING = "404 page not found"  # gin's text for a path it has no route for


def map_error(status: int | None, code: Any, message: str | None) -> RunnerError:
    """One WeKnora error (HTTP body or in-stream ``error``) as a RunnerError with a hint."""
    num = code if isinstance(code, int) and not isinstance(code, bool) else None
    if status is not None and status >= 400:
        taxonomy = status_to_code(status)
        if taxonomy == "upstream.bad_request" and num in _BY_CODE:
            taxonomy = _BY_CODE[num]
    else:
        taxonomy = _BY_CODE.get(num or 0, "upstream.error")
    shown = str(num) if num is not None else None
    return platform_error(PLATFORM, taxonomy, _HINTS.get(taxonomy, ""), status, shown, message)


def error_fields(doc: dict[str, Any]) -> tuple[Any, str | None] | None:
    """``(code, message)`` of an error body, or None when ``doc`` is not one."""
    err = doc.get("error")
    if isinstance(err, dict):
        message = err.get("message") or err.get("detail")
        return err.get("code"), str(message) if message else None
    if isinstance(err, str) and err.strip():
        return None, err
    if doc.get("success") is False:
        message = doc.get("message")
        return doc.get("code"), str(message) if message else None
    return None


def session_missing(status: int, body: bytes) -> bool:
    """True only for WeKnora's own answer that a session id is unknown (404, AppError 1003)."""
    if status != 404:
        return False
    doc = json_object(body)
    fields = error_fields(doc) if doc is not None else None
    if fields is None:
        return False
    code, message = fields
    return code == NOT_FOUND_CODE and "session" in (message or "").lower()


def parse_error(status: int, body: bytes, content_type: str) -> RunnerError:
    """A non-2xx response; an HTML page or gin's bare 404 is reported by status with a hint."""
    doc = json_object(body)
    fields = error_fields(doc) if doc is not None else None
    if fields is not None:
        code, message = fields
        return map_error(status, code, message)
    text = body.decode("utf-8", "replace").strip()
    if status == 404 and text.lower().startswith(_ROUTE_MISSING):
        return map_error(status, None, f"no such API route ({BASE_URL_HINT})")
    if looks_html(body, content_type):
        return map_error(status, None, html_hint(status, PLATFORM, BASE_URL_HINT))
    return map_error(status, None, text[:200] or None)

