"""Readers for Tbox payloads: the JSON-string ``payload``, usage, suggested questions, image URLs,
and the request-side file type and token."""

from __future__ import annotations

import json
from typing import Any

from runner_kit import events as ev
from runner_kit.errors import RunnerError
from runner_kit.inputs import InputFile
from runner_kit.usage import usage_from
from runner_kit.wire import maybe_json


def file_type(f: InputFile) -> str:
    """Tbox's file type for an upload, from its mime type."""
    major = f.mime_type.split("/", 1)[0].lower()
    if f.kind == "image" or major == "image":
        return "IMAGE"
    if major == "audio" or f.kind == "voice":
        return "AUDIO"
    if major == "video":
        return "VIDEO"
    return "FILE"


def token(raw: Any) -> str:
    token = str(raw or "").strip()
    if token[:7].lower() == "bearer ":  # Tbox wants the raw token; a pasted scheme word is dropped
        token = token[7:].strip()
    return token


def _norm_key(key: str) -> str:
    return key.replace("_", "").replace("-", "").lower()


_USAGE_NAMES = {
    "prompttokens": "prompt", "inputtokens": "prompt", "prompttoken": "prompt", "inputtoken": "prompt",
    "completiontokens": "completion", "outputtokens": "completion", "completiontoken": "completion",
    "outputtoken": "completion",
    "totaltokens": "total", "totaltoken": "total", "tokens": "total", "tokencount": "total",
}


def usage_of(payload: Any) -> ev.Usage | None:
    """Token counts from a ``charge``/``meta`` payload under the spellings seen (camel or snake
    case, at the top or under ``usage``/``tokenUsage``); None when unknown or all zero."""
    if not isinstance(payload, dict):
        return None
    for scope in (payload, payload.get("usage"), payload.get("tokenUsage"), payload.get("tokens")):
        if not isinstance(scope, dict):
            continue
        found = {_USAGE_NAMES[n]: v for k, v in scope.items() if (n := _norm_key(str(k))) in _USAGE_NAMES}
        usage = usage_from(found, prompt="prompt", completion="completion", total="total")
        if usage is not None and (usage.prompt_tokens or usage.completion_tokens or usage.total_tokens):
            return usage
    return None


def image_urls(payload: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for key in ("url", "urls", "imageUrl", "imageUrls", "image_url", "src"):
        value = payload.get(key)
        for v in value if isinstance(value, list) else [value]:
            if isinstance(v, str) and v.strip().lower().startswith(("http://", "https://")):
                out.append(v.strip())
            elif isinstance(v, dict) and isinstance(v.get("url"), str):
                out.append(v["url"].strip())
    text = payload.get("text")
    if not out and isinstance(text, str) and text.strip().lower().startswith(("http://", "https://")):
        out.append(text.strip())
    return out


def follow_ups(payload: Any) -> list[str]:
    """The suggested questions of a ``followup`` payload (a list, or a list under a key)."""
    value = maybe_json(payload)
    if isinstance(value, dict):
        value = next((value[k] for k in ("followup", "followUp", "questions", "suggestions", "list", "data", "text")
                      if k in value), None)
        value = maybe_json(value)
    items = value if isinstance(value, list) else [value]
    out: list[str] = []
    for item in items:
        if isinstance(item, dict):
            item = item.get("text") or item.get("question") or item.get("content")
        if isinstance(item, str) and item.strip():
            out.append(" ".join(item.split()))
    return out


def payload_of(data: dict[str, Any]) -> dict[str, Any]:
    raw = data.get("payload")
    if raw in (None, ""):
        return {}
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, str):
        try:
            value = json.loads(raw)
        except ValueError:
            raise RunnerError(
                "upstream.protocol", f"Tbox sent a {str(data.get('type'))[:40]!r} message whose payload is not JSON"
            ) from None
        if isinstance(value, dict):
            return value
        return {"text": value} if isinstance(value, str) else {"value": value}
    return {"value": raw}
