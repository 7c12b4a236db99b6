"""LICOS error bodies (FastAPI ``{"detail": …}``, the platform's ``{"code", "message", "errorCode"}``
envelope, a bare ``Internal Server Error``) and in-stream errors (the typed ``error`` event, the
untyped ``{"error_code", "error_message"}`` event, a managed ``run_status`` failure) mapped onto the
kit taxonomy, with a hint for the bot owner."""

from __future__ import annotations

from typing import Any

from runner_kit.errors import RunnerError, html_hint, looks_html, platform_error, status_to_code
from runner_kit.wire import json_object

from . import const

_HINTS: dict[int, tuple[str, str]] = {
    401: ("upstream.auth", "check api-key (the service wants a LICOS user token, sent as Bearer)"),
    402: ("upstream.quota", "the LICOS account has no credit left for this user; top it up on the LICOS platform"),
    403: ("upstream.forbidden", "this user or token may not run this agent"),
    404: ("upstream.not_found", const.BASE_URL_HINT),
    409: ("upstream.rate_limited", "LICOS is still answering an earlier message in this conversation; "
                                   "send the message again when it has answered"),
    413: ("upstream.too_large", "the message or an attachment is larger than LICOS accepts"),
    426: ("config.invalid", "this LICOS project asks for interactive agent-v1 clients, which this plugin is not"),
    429: ("upstream.rate_limited", "LICOS is rate limiting requests"),
    504: ("upstream.timeout", "LICOS did not finish in time (LICOS_AGENT_RUN_TIMEOUT_SECONDS on the service)"),
}


def _first_line(text: str) -> str:
    """A message without the traceback the runtime appends (``Invalid JSON format: Traceback …``)."""
    head = text.split("Traceback (most recent call last)", 1)[0].strip().rstrip(":").strip()
    return (head or text.strip()).splitlines()[0][:300] if (head or text.strip()) else ""


def detail_of(body: bytes) -> tuple[str | None, str | None]:
    """``(code, message)`` of an error body; ``(None, None)`` when it is not JSON."""
    doc = json_object(body)
    if doc is None:
        return None, None
    detail: Any = doc.get("detail", doc)
    if isinstance(detail, dict):
        code = detail.get("error_code") or detail.get("errorCode") or detail.get("code")
        msg = detail.get("error_message") or detail.get("message") or detail.get("msg")
        return (str(code) if code not in (None, "") else None), _first_line(str(msg)) if msg else None
    if isinstance(detail, list):  # pydantic validation errors
        msgs = [str(i.get("msg")) for i in detail[:3] if isinstance(i, dict)]
        return None, "; ".join(msgs) or None
    return None, _first_line(str(detail)) if detail not in (None, "") else None


def map_http(status: int, body: bytes, content_type: str, files: list[str] | None = None) -> RunnerError:
    """A non-2xx answer to ``/stream_run`` or the events route."""
    code, message = detail_of(body)
    taxonomy, hint = _HINTS.get(status, (status_to_code(status), ""))
    if code is None and message is None:
        if looks_html(body, content_type):
            message = html_hint(status, const.PLATFORM, const.BASE_URL_HINT)
        elif status == 500 and body.strip() == b"Internal Server Error":
            hint = ("the service failed before answering; a managed LICOS project also fails this way when "
                    "api-key (a LICOS user token) is missing")
    if code == "INVALID_ATTACHMENT" or (status == 400 and files and "attachment" in (message or "").lower()):
        return attachment_error(message, files or [])
    if status == 400 and "invalid json" in (message or "").lower():
        hint = "LICOS could not read the request; this is a bug in the plugin or a proxy that changed the body"
    if status == 409 and "cursor" in (message or "").lower():
        taxonomy, hint = "upstream.protocol", "LICOS refused the stream position this run resumed from"
    return platform_error(const.PLATFORM, taxonomy, hint, status, code, message)


def attachment_error(message: str | None, files: list[str]) -> RunnerError:
    names = ", ".join(repr(n) for n in files) or "the attachment"
    return RunnerError(
        "input.invalid",
        f"{const.PLATFORM} could not use the attachment {names}: {message or 'it was refused'} "
        "(session files need a LICOS platform and a user token as api-key)",
    )


def _by_text(text: str) -> tuple[str, str]:
    """Taxonomy and hint for a failure the runtime only describes in words (model/provider errors)."""
    low = text.lower()
    if "rate limit" in low or "ratelimit" in low or "error code: 429" in low:
        return "upstream.rate_limited", "the model provider behind LICOS is rate limiting"
    if "timeout" in low or "timed out" in low:
        return "upstream.timeout", "the model provider behind LICOS did not answer in time"
    if any(k in low for k in ("error code: 5", "apierror", "connection", "unavailable", "overloaded",
                              "internal error", "internalserver")):
        return "upstream.unavailable", "the model behind the LICOS agent failed"
    if "credit" in low or "balance" in low:
        return "upstream.quota", _HINTS[402][1]
    return "upstream.error", "the LICOS agent failed while answering"


def stream_error(code: Any, message: Any, files: list[str]) -> RunnerError:
    """A typed ``error`` event (``{code, error_msg}``) or a managed failure (``{code, message}``)."""
    code_s = str(code) if code not in (None, "") else ""
    text = str(message or "").strip()
    if code_s == const.PARAM_FAILURE and files:
        return attachment_error(text, files)
    if code_s == const.PARAM_FAILURE and "bearer" in text.lower():
        # the project's own memory and session files need a caller the platform vouches for
        return platform_error(const.PLATFORM, "config.invalid",
                              "this LICOS project keeps memory or session files, which need api-key (a user token "
                              "the LICOS platform accepts); without a platform use history-source: langbot",
                              None, code_s, text)
    if code_s == const.PARAM_FAILURE:
        return platform_error(const.PLATFORM, "upstream.bad_request", "LICOS refused a request parameter",
                              None, code_s, text)
    if code_s == const.TIMEOUT_FAILURE:
        return platform_error(const.PLATFORM, "upstream.timeout", _HINTS[504][1], None, code_s, text)
    if "attachment" in text.lower() and files:
        return attachment_error(text, files)
    taxonomy, hint = _by_text(f"{code_s} {text}")
    if code_s == const.MODEL_FAILURE and taxonomy == "upstream.error":
        hint = "the LICOS agent or its model failed; its run record has the details"
    return platform_error(const.PLATFORM, taxonomy, hint, None, code_s or None, text or None)


def untyped_error(data: dict[str, Any]) -> RunnerError:
    """``{"error_code": "RUNTIME_ERROR", "error_message": …, "category": …}`` (no ``type``)."""
    code = str(data.get("error_code") or "")
    text = str(data.get("error_message") or data.get("message") or "").strip()
    category = str(data.get("category") or "").lower()
    if "not configured" in text.lower() and "platform" in text.lower():
        return platform_error(const.PLATFORM, "config.invalid", "this service runs without a LICOS platform, "
                              "so it cannot check a user token; leave api-key empty", None, code, text)
    if category in ("auth", "authentication", "permission"):
        return platform_error(const.PLATFORM, "upstream.auth", _HINTS[401][1], None, code, text)
    taxonomy, hint = _by_text(text)
    return platform_error(const.PLATFORM, taxonomy, hint, None, code or None, text or None)
