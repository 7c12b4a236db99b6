"""Coze's error envelopes mapped onto the kit taxonomy.

Coze answers most failures with HTTP 200 and a business envelope ``{"code": <non-zero>, "msg",
"detail": {"logid"}}``; auth failures and gateways may also use 4xx/5xx. OAuth endpoints send
``{"error_code", "error_message"}``. In a stream, ``conversation.chat.failed`` carries the same
codes in ``last_error {code, msg}``, and an ``error`` event carries ``{code, msg}``.
Codes: https://www.coze.cn/open/docs/developer_guides/coze_error_codes
"""

from __future__ import annotations

import json
from typing import Any

from runner_kit import errors
from runner_kit.errors import RunnerError, status_to_code
from runner_kit.wire import json_object

from .const import CONVERSATION_MISSING, PLATFORM

BASE_URL_HINT = "is api-base the Coze API address, such as https://api.coze.cn or https://api.coze.com?"

# Coze business code -> (taxonomy code, hint for the bot owner)
_BY_CODE: dict[int, tuple[str, str]] = {
    4000: ("upstream.bad_request", "Coze refused the request parameters"),
    4001: ("upstream.bad_request", "the chat id is unknown to Coze"),
    4002: ("upstream.not_found", "the Coze conversation does not exist"),
    4003: ("upstream.bad_request", "meta_data exceeds Coze's limit"),
    4004: ("upstream.bad_request", "the message exceeds Coze's limit"),
    4005: ("input.invalid", "Coze refused the message content"),
    4006: ("config.invalid", "check bot-id: the bot does not exist or this token cannot use it"),
    4007: ("config.invalid", "non-streaming chats need auto-save-history on"),
    4008: ("upstream.quota", "the bot's daily usage limit is reached; try again tomorrow"),
    4009: ("upstream.rate_limited", "Coze is at capacity right now"),
    4010: ("upstream.too_large", "the question is longer than the bot's model accepts"),
    4011: ("upstream.quota", "the Coze account's token balance is used up"),
    4012: ("config.invalid", "the bot's model is no longer available; choose another model in Coze"),
    4013: ("upstream.unavailable", "the bot's model service failed"),
    4014: ("upstream.error", "the bot cannot answer this question"),
    4015: ("config.invalid", "publish the bot to the API channel (Agent as API) in Coze first"),
    4016: ("upstream.rate_limited", "another answer in this Coze conversation is still running"),
    4019: ("upstream.quota", "the Coze (Volcengine) account is in arrears"),
    4020: ("upstream.rate_limited", "the purchased RPM quota is exceeded"),
    4021: ("config.invalid", "the bot's workflow is not configured"),
    4022: ("upstream.quota", "the model service (Volcano Ark) is in arrears"),
    4028: ("upstream.quota", "the Coze free quota is used up"),
    4100: ("upstream.auth", "check the access token (api-key)"),
    4101: ("upstream.forbidden", "the access token lacks permission for this bot or workspace"),
    4102: ("upstream.forbidden", "Coze's risk control blocked the request"),
    4105: ("upstream.error", "Coze flagged sensitive content"),
    4200: ("upstream.not_found", "the resource does not exist or belongs to another account"),
    4300: ("input.invalid", "the uploaded file is empty"),
    4301: ("input.invalid", "only one file can be uploaded at a time"),
    4302: ("upstream.too_large", "the file is larger than Coze accepts"),
    4303: ("input.invalid", "Coze does not accept this file type"),
    4304: ("input.invalid", "Coze could not read the file"),
    5000: ("upstream.unavailable", "Coze had an internal error"),
}
# OAuth / gateway string codes
_BY_NAME: dict[str, tuple[str, str]] = {
    "invalid_token": ("upstream.auth", "check the access token (api-key)"),
    "token_expired": ("upstream.auth", "the access token has expired"),
    "access_denied": ("upstream.forbidden", "the access token lacks permission"),
}


def map_error(status: int | None, code: Any, message: str | None, logid: str | None = None) -> RunnerError:
    """One Coze error (HTTP envelope, ``chat.failed``'s ``last_error`` or an ``error`` event)."""
    message = (message or "").strip()
    num = _int(code)
    if num is not None and num in _BY_CODE:
        taxonomy, hint = _BY_CODE[num]
    elif isinstance(code, str) and code.lower() in _BY_NAME:
        taxonomy, hint = _BY_NAME[code.lower()]
    elif status is not None and status >= 400:
        taxonomy, hint = status_to_code(status), ""
    elif num is not None and num >= 700000000:  # the platform's auth layer (e.g. 700012006 token invalid)
        taxonomy, hint = "upstream.auth", "check the access token (api-key)"
    else:
        taxonomy, hint = "upstream.error", ""
    if status is not None and status >= 500 and taxonomy in ("upstream.error", "upstream.bad_request"):
        taxonomy = "upstream.unavailable"
    parts = [f"{PLATFORM} error"]
    if status and status != 200:
        parts.append(f"HTTP {status}")
    if code not in (None, "", 0):
        parts.append(f"code {code}")
    text = " ".join(parts)
    detail = message or hint
    if detail:
        text += f": {detail[:300]}"
    if hint and message and hint.lower() not in message.lower():
        text += f" ({hint})"
    if logid:
        text += f" [logid {str(logid)[:64]}]"
    return RunnerError(taxonomy, text, status=status)


def envelope_error(doc: dict[str, Any], status: int | None = None) -> RunnerError | None:
    """The error a Coze (or gateway) JSON body states, or None when it states none (``code`` 0)."""
    logid = None
    detail = doc.get("detail")
    if isinstance(detail, dict):
        logid = detail.get("logid")
    if "code" in doc and not isinstance(doc.get("code"), bool):
        code = doc.get("code")
        if code in (0, "0", None) and not (status and status >= 400):
            return None
        return map_error(status, code, _text(doc.get("msg") or doc.get("message")), logid)
    if doc.get("error_code") or doc.get("error_message"):
        return map_error(status, doc.get("error_code"), _text(doc.get("error_message")), logid)
    err = doc.get("error")
    if isinstance(err, dict):
        return map_error(status, err.get("code") or err.get("type"), _text(err.get("message") or err.get("msg")))
    if isinstance(err, str) and err:
        return map_error(status, None, err)
    if doc.get("message") or (detail and not isinstance(detail, dict)):
        return map_error(status, None, _text(doc.get("message") or detail))
    return None


def conversation_missing(doc: dict[str, Any] | None) -> bool:
    """True only for Coze's own code for an unknown conversation id."""
    return doc is not None and _int(doc.get("code")) == CONVERSATION_MISSING


def parse_http_error(status: int, body: bytes, content_type: str) -> RunnerError:
    """A non-2xx response; HTML pages from a proxy are reported by status alone."""
    doc = json_object(body)
    if doc is not None:
        err = envelope_error(doc, status)
        if err is not None:
            if status == 404 and _int(doc.get("code")) is None:
                return RunnerError(err.code, f"{err.message} ({BASE_URL_HINT})", status=status)
            return err
    if errors.looks_html(body, content_type):
        return map_error(status, None, html_hint(status))
    if status == 404:
        return map_error(status, None, f"no such API route ({BASE_URL_HINT})")
    return map_error(status, None, None)


def html_hint(status: int) -> str:
    return errors.html_hint(status, "Coze", BASE_URL_HINT)


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    return None


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
