"""Tbox's error answers mapped onto the kit taxonomy.

Tbox reports a failure as a non-2xx status with a JSON or text body, as a 2xx JSON envelope
``{"errorCode", "errorMsg", "data", "traceId"}`` (``errorCode`` "0" is success) where a stream
was expected, as ``event: error`` with ``{"description", …}``, or as a ``type: "error"`` message.
Its error codes are not published, so the taxonomy comes from the HTTP status, refined by what the
word code (or, without one, the message) says: an invalid token is answered with 403, but it is a
key problem.
"""

from __future__ import annotations

from typing import Any

from runner_kit.errors import RunnerError, platform_error, status_to_code
from runner_kit.wire import json_object

from .const import PLATFORM

BASE_URL_HINT = "is base-url the Tbox API address, https://api.tbox.cn?"

_HINTS: dict[str, str] = {
    "upstream.auth": "check api-key: the Tbox API token, sent as it is (no Bearer)",
    "upstream.forbidden": "check that the API key may use this app-id and that the agent is published",
    "upstream.not_found": "check app-id and base-url",
    "upstream.rate_limited": "Tbox is rate limiting requests; try again shortly",
    "upstream.quota": "the Tbox quota or balance for this agent is used up",
    "upstream.too_large": "a file or message is larger than Tbox accepts",
    "upstream.bad_request": "Tbox refused the request; check app-id and app-type",
}
_AUTH_WORDS = ("unauthorized", "authentication", "鉴权", "认证", "令牌")
_TOKEN_WORDS = ("invalid", "expired", "illegal", "无效", "过期", "错误", "不合法")
_RATE_WORDS = ("rate limit", "too many", "频繁", "限流")
_QUOTA_WORDS = ("quota", "balance", "insufficient", "余额", "额度", "欠费")
_LARGE_WORDS = ("too large", "exceed", "过大", "超过")
_MISSING_WORDS = ("not exist", "not found", "不存在")


def _said(code: Any, message: Any) -> str:
    """What to classify: Tbox's ``errorCode`` when it is a word code (``AUTH_TOKEN_INVALID``), else —
    a numeric code or none, as in ``event: error`` — the message, the only thing Tbox said."""
    code = str(code or "").strip()
    text = code if code and not code.isdigit() else str(message or "")
    return text.replace("_", " ").lower()


def _refine(code: Any, message: Any) -> str | None:
    text = _said(code, message)
    if any(w in text for w in _AUTH_WORDS) or ("token" in text and any(w in text for w in _TOKEN_WORDS)):
        return "upstream.auth"
    if any(w in text for w in _RATE_WORDS):
        return "upstream.rate_limited"
    if any(w in text for w in _QUOTA_WORDS):
        return "upstream.quota"
    if any(w in text for w in _LARGE_WORDS):
        return "upstream.too_large"
    if any(w in text for w in ("app", "智能体", "应用")) and any(w in text for w in _MISSING_WORDS):
        return "upstream.not_found"
    return None


def conversation_missing(code: Any, message: Any) -> bool:
    """True only when Tbox says the conversation itself does not exist (deleted or expired)."""
    text = _said(code, message)
    return ("conversation" in text or "会话" in text) and any(w in text for w in _MISSING_WORDS)


def map_error(status: int | None, code: Any, message: Any, trace: Any = None) -> RunnerError:
    """One Tbox error as the owner reads it: status, errorCode, errorMsg, a hint and the traceId."""
    code = "" if code is None else str(code).strip()
    message = "" if message is None else str(message).strip()
    taxonomy = _refine(code, message) or (status_to_code(status) if status else "upstream.error")
    if trace:
        message = f"{message} (traceId {str(trace)[:64]})" if message else f"traceId {str(trace)[:64]}"
    return platform_error(PLATFORM, taxonomy, _HINTS.get(taxonomy, ""), status, code, message)


def error_fields(doc: dict[str, Any]) -> tuple[Any, Any, Any] | None:
    """``(code, message, traceId)`` of a Tbox error body, or None when it reports success."""
    code = doc.get("errorCode", doc.get("code"))
    message = doc.get("errorMsg") or doc.get("description") or doc.get("message") or doc.get("msg")
    if str(code) in ("0", "200", "None") and not doc.get("description"):
        return None
    if code is None and not message:
        return None
    return code, message, doc.get("traceId")


def parse_http_error(status: int, body: bytes, content_type: str) -> RunnerError:
    """A non-2xx response: Tbox's envelope, a plain text body, or a proxy's HTML page."""
    doc = json_object(body)
    if doc is not None:
        fields = error_fields(doc)
        if fields is not None:
            return map_error(status, *fields)
    if body.lstrip()[:1] == b"<" or "html" in content_type.lower():
        if status in (502, 503, 504):
            return map_error(status, None, "a proxy in front of Tbox returned an HTML error page; Tbox may be down")
        return map_error(status, None, f"the server returned an HTML page, not the Tbox API ({BASE_URL_HINT})")
    text = body.decode("utf-8", "replace").strip()
    return map_error(status, None, text[:300] or None)
