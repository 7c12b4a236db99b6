"""Langflow's error shapes mapped onto the kit taxonomy.

Before a stream starts Langflow answers FastAPI style, ``{"detail": "..."}`` (403 for a missing or
wrong API key, 404 for an unknown flow, 422 for a body it cannot read, 500 with ``detail`` holding a
second JSON document ``{"message": "Error running graph: ...", ...}`` when the flow itself failed).
Inside a stream a failure arrives as ``error`` events: first a Message object (``category: "error"``,
``text`` = the component's error), then ``{"error": "500: {json}"}``, and no ``end``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from runner_kit import errors
from runner_kit.errors import RunnerError, status_to_code

from .const import PLATFORM

BASE_URL_HINT = "is base-url the Langflow server address, e.g. http://host:7860?"
KEY_HINT = "check the API key (api-key setting); create one in Langflow under Settings → Langflow API Keys"
FLOW_HINT = "check flow-id: use the flow's id from its API access panel, or its endpoint name"
# FastAPI's own body for a route that does not exist (as opposed to a flow it does not know)
_NO_SUCH_ROUTE = "Not Found"
_STATUS_PREFIX = re.compile(r"^\s*(\d{3}):\s*(.*)$", re.S)


def json_doc(raw: bytes | str) -> Any:
    """The body parsed as JSON, or None."""
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError, TypeError):
        return None


def _detail_text(detail: Any) -> str:
    if isinstance(detail, str):
        return detail
    if isinstance(detail, list):  # pydantic validation errors
        parts = []
        for item in detail:
            if isinstance(item, dict):
                loc = ".".join(str(x) for x in item.get("loc") or () if x != "body")
                parts.append(f"{loc}: {item.get('msg')}" if loc else str(item.get("msg")))
            else:
                parts.append(str(item))
        return "; ".join(parts)
    return json.dumps(detail, ensure_ascii=False)


def graph_error(text: str) -> str | None:
    """The message of Langflow's double-encoded graph error ``{"message": ..., "traceback": ...}``."""
    doc = json_doc(text) if text.lstrip()[:1] == "{" else None
    if isinstance(doc, dict) and isinstance(doc.get("message"), str):
        return doc["message"].strip()
    return None


def flow_failed(message: str, component: str | None = None) -> RunnerError:
    """The flow ran and one of its components failed (a model error, a blocked URL, a bad tweak)."""
    where = f" in component {component}" if component else ""
    return RunnerError("upstream.error", f"the {PLATFORM} flow failed{where}: {message.strip()[:400]}")


def parse_envelope(status: int, body: bytes, content_type: str, flow: str) -> RunnerError:
    """A non-2xx response before any stream."""
    doc = json_doc(body) if body.strip()[:1] in (b"{", b"[") else None
    html = doc is None and errors.looks_html(body, content_type)
    detail = ""
    if isinstance(doc, dict):
        if "detail" in doc:
            detail = _detail_text(doc["detail"]).strip()
        elif isinstance(doc.get("message"), str):
            detail = doc["message"].strip()
        elif isinstance(doc.get("error"), (str, dict)):
            err = doc["error"]
            detail = err if isinstance(err, str) else str(err.get("message") or "")
    elif not html and body.strip():
        detail = body.decode("utf-8", "replace").strip()[:200]
    head = f"{PLATFORM} answered HTTP {status}"
    if html:
        return RunnerError(status_to_code(status), f"{head} with an HTML page ({_html_hint(status)})", status=status)
    if status in (401, 403):
        return RunnerError("upstream.auth", f"{head}: {detail or 'not authorised'} ({KEY_HINT})", status=status)
    if status == 404:
        if not detail or detail == _NO_SUCH_ROUTE:
            return RunnerError("upstream.not_found", f"{head}: no such API route ({BASE_URL_HINT})", status=status)
        return RunnerError(
            "config.invalid", f"{PLATFORM} has no flow '{flow[:80]}' (flow-id): {detail[:200]} ({FLOW_HINT})",
            status=status,
        )
    if status >= 500:
        inner = graph_error(detail)
        if inner is not None:
            return flow_failed(inner)
    code = status_to_code(status)
    return RunnerError(code, f"{head}: {(detail or 'no error details')[:300]}", status=status)


def cleanup_error(status: int, body: bytes, content_type: str) -> RunnerError:
    """A refused delete (an upload after the run, a reset session's messages): for the log only,
    so the status and Langflow's own words, without the run's hints."""
    doc = json_doc(body) if body.strip()[:1] in (b"{", b"[") else None
    detail = _detail_text(doc["detail"]) if isinstance(doc, dict) and "detail" in doc else ""
    if not detail and not errors.looks_html(body, content_type):
        detail = body.decode("utf-8", "replace").strip()
    return RunnerError(status_to_code(status), f"HTTP {status}: {(detail or 'no details')[:200]}", status=status)


def stream_error(data: Any) -> tuple[str, str | None] | None:
    """(message, component) of a mid-stream ``error`` event's data; None if it carries no text."""
    if not isinstance(data, dict):
        return None
    err = data.get("error")
    if isinstance(err, str) and "text" not in data:
        m = _STATUS_PREFIX.match(err)
        body = m.group(2) if m else err
        return (graph_error(body) or body.strip() or "unknown error"), None
    text = data.get("text")
    if isinstance(text, str) and text.strip():
        props = data.get("properties") if isinstance(data.get("properties"), dict) else {}
        source = props.get("source") if isinstance(props.get("source"), dict) else {}
        component = source.get("display_name") or data.get("sender_name") or data.get("sender")
        return text.strip(), (str(component) if component else None)
    return None


def _html_hint(status: int) -> str:
    if status in (502, 503, 504):
        return "a proxy in front of Langflow returned an error page: Langflow may be down, starting or too slow"
    if status in (404, 405):
        return BASE_URL_HINT
    return "not the Langflow API"
