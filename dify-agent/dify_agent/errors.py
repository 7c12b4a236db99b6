"""Dify's error envelope ``{"status", "code", "message"}`` mapped onto the kit taxonomy."""

from __future__ import annotations

import json
import re
import uuid
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
# pydantic's text for a conversation_id that is not a UUID (api/controllers/service_api/app/completion.py)
_NOT_A_UUID = "conversation_id must be a valid UUID"
# werkzeug's own text for a route that does not exist (base-url without /v1 reaches the API root)
_NO_SUCH_ROUTE = "requested url was not found"


# Flask-RESTX appends its route suggestions to a 404's message (Dify leaves ERROR_404_HELP on):
# "Conversation Not Exists. You have requested this URI [/v1/chat-messages] but did you mean
# /v1/chat-messages or /api/chat-messages or … ?" — noise for a chat, and it names Dify's routes
_ROUTE_HELP = re.compile(r"\s*You have requested this URI \[[^\]]*\] but did you mean .*$", re.S)
# Dify's checks of a run's inputs against the app's Start node (api/core/app/apps/base_app_generator.py
# _validate_inputs, api/core/workflow/nodes/start/start_node.py), sent as 400 invalid_param
_REQUIRED = re.compile(r"^(?P<name>\S+) is required in input form")
_TOO_LONG = re.compile(r"^(?P<name>\S+) in input form must be less than (?P<limit>\d+) characters")
_FORM = re.compile(r"^(?:\(type '[^']*'\) )?(?P<name>\S+) in input form must be ")


def strip_route_help(message: str | None) -> str | None:
    """``message`` without Flask's "You have requested this URI … did you mean …" suffix."""
    if not message:
        return message
    return _ROUTE_HELP.sub("", message).strip() or message


def _invalid_param(message: str) -> tuple[str, str] | None:
    """The taxonomy code and hint for the ``invalid_param`` refusals a bot owner can act on."""
    text = message.strip()
    if text.lower().startswith("workflow not published"):
        return "config.invalid", "publish the app in Dify (Publish, then Publish update) before using its API key"
    if text.lower().startswith("workflow not initialized"):
        return "config.invalid", "the app has no workflow yet: build and publish it in Dify"
    if found := _TOO_LONG.match(text):
        return ("input.too_large", f"the app's Start node allows at most {found['limit']} characters in "
                f"“{found['name']}”: raise its max length in Dify, or make it a Paragraph")
    if found := _REQUIRED.match(text):
        return ("config.invalid", f"the app's Start node requires “{found['name']}”: give it under Extra app "
                "inputs (advanced settings) or as a pipeline variable, or make it optional in Dify")
    if found := _FORM.match(text):
        return ("config.invalid", f"the value sent for “{found['name']}” does not fit the app's Start node: "
                "check Extra app inputs and the pipeline variables")
    return None


def map_error(status: int | None, code: str | None, message: str | None) -> RunnerError:
    """One Dify error (pre-stream envelope or mid-stream ``error`` event) as a RunnerError. Dify's
    words may quote a member (a refused file by the name Dify took from the member's link, line
    breaks and all): the kit's platform_error puts them on one line."""
    message = strip_route_help(message)  # runner_kit.errors.platform_error puts it on one line
    taxonomy, hint = _BY_CODE.get(code or "", (status_to_code(status) if status else "upstream.error", ""))
    if code == "invalid_param" and message:
        taxonomy, hint = _invalid_param(message) or (taxonomy, hint)
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


def conversation_missing(status: int, body: bytes, sent: str | None = None) -> bool:
    """True only for Dify's own answers that a stored conversation id can never be used: 404
    not_found "Conversation Not Exists." (deleted, or another user's), and 400 invalid_param from
    the check Dify 1.12.1 makes first, that ``conversation_id`` is a UUID (an id kept from
    elsewhere would otherwise fail every message of the conversation). ``sent``, the id that was
    sent: a UUID never fails that check, and any 400 for it is about something else (a member's
    file named "conversation_id must be a valid UUID.mp3" makes Dify answer "File validation
    failed for file: conversation_id must be a valid UUID.mp3")."""
    if status not in (400, 404) or (status == 400 and sent is not None and _is_uuid(sent)):
        return False
    doc = json_object(body)
    message = doc.get("message") if doc is not None else None
    if not isinstance(message, str):
        return False
    if status == 400:
        return doc.get("code") == "invalid_param" and _NOT_A_UUID in message
    return doc.get("code") == "not_found" and _CONVERSATION_MISSING in message.lower()


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value.strip())
    except ValueError:
        return False
    return True


def parse_envelope(status: int, body: bytes, content_type: str) -> RunnerError:
    """A non-2xx response; HTML pages from a proxy are reported by status alone."""
    code = message = None
    doc = json_object(body)
    if doc is not None:
        fields = error_fields(doc)
        if fields is not None:
            _, code, message = fields
            message = strip_route_help(message)
        if status == 404 and message and _NO_SUCH_ROUTE in message.lower():
            message = f"{message} ({BASE_URL_HINT})"
    elif errors.looks_html(body, content_type):
        message = html_hint(status)
    return map_error(status, code, message)


def html_hint(status: int) -> str:
    return errors.html_hint(status, "Dify", BASE_URL_HINT)


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
