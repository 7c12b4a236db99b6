"""n8n's error answers mapped onto the kit taxonomy.

What the real n8n 2.40.7 sends (fixtures real-peers/n8n/, platforms.md §2):

- webhook authentication (nodes/Webhook/utils.js): plain text with ``WWW-Authenticate: Basic``.
  401 ``Authorization is required!`` (basic auth, nothing sent), 401 ``Authentication data is
  wrong!`` (basic auth, wrong), 401 ``No token provided`` (JWT, nothing sent), 403 ``Authorization
  data is wrong!`` (header auth, missing or wrong), 403 with jsonwebtoken's reason (``invalid
  signature``, ``jwt expired``, ``invalid algorithm``) for a JWT that fails. All mean the
  credentials in this bot's settings; 500 ``No authentication data defined on node!`` means the
  node itself has none.
- unknown path or wrong method: ``404 {"code":404,"message":"The requested webhook \\"POST x\\" is
  not registered.","hint":…,"stacktrace":…}``.
- a body n8n cannot parse: ``422 {"code":422,"message":"Failed to parse request body",…}``.
- a workflow that failed (Last Node / Respond to Webhook modes): ``500 {"message":"Error in workflow"}``.
  That is the workflow's own failure, not n8n being down, so it is not retryable.
"""

from __future__ import annotations

import json
from typing import Any

from runner_kit import errors
from runner_kit.errors import RunnerError, status_to_code

from . import const

P = const.PLATFORM


def json_doc(body: bytes) -> Any:
    """The body parsed as JSON, or None."""
    if body.strip()[:1] not in (b"{", b"["):
        return None
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None


def _text(body: bytes) -> str:
    return " ".join(body.decode("utf-8", "replace").split())[:300]


def parse_error(status: int, body: bytes, content_type: str) -> RunnerError:
    """A non-2xx answer from the webhook (or from a proxy in front of n8n)."""
    ctype = content_type.lower()
    doc = json_doc(body)
    message = hint = ""
    if isinstance(doc, dict):
        message = str(doc.get("message") or doc.get("error") or "").strip()
        if isinstance(doc.get("error"), dict):
            message = str(doc["error"].get("message") or "").strip()
        hint = str(doc.get("hint") or "").strip()  # the stacktrace is left out: server paths, noise
    elif errors.looks_html(body, ctype):
        return _html(status)
    else:
        message = _text(body)

    plain = doc is None and bool(message)
    if plain and (status == 401 or (status == 403 and message.startswith(const.AUTH_FAILED_403))):
        what = "asks for credentials" if message in (const.AUTH_REQUIRED, "No token provided") else (
            "rejected the credentials")
        return RunnerError(
            "upstream.auth",
            f"{P} {what} (HTTP {status} {message}): set auth-type and its key or credentials to what the "
            "Webhook node's Authentication expects",
            status=status,
        )
    if plain and status == 500 and message == const.NO_NODE_CREDENTIAL:
        return RunnerError(
            "upstream.error",
            f"{P} HTTP 500 {message} (the Webhook node's Authentication has no credential selected in n8n)",
            status=status,
        )
    if status == 404 and "not registered" in message:
        if "Did you mean" in message:
            extra = " (LangBot sends POST: set the Webhook node's HTTP Method to POST)"
        else:
            extra = f" ({const.URL_HINT})"
        return RunnerError("upstream.not_found", f"{P} HTTP 404: {message[:300]}{extra}", status=status)
    if status == 500 and message == const.WORKFLOW_ERROR:
        return workflow_failed("", "")
    code = status_to_code(status)
    text = f"{P} returned HTTP {status}"
    if message:
        text += f": {message[:300]}"
    if hint and status != 404:
        text += f" ({hint[:200]})"
    if status == 404 and not message:
        text += f" ({const.URL_HINT})"
    return RunnerError(code, text, status=status)


def workflow_failed(node: str, detail: str) -> RunnerError:
    """The workflow stopped with an error (a 500 ``Error in workflow`` or a streamed ``error`` item)."""
    where = f" in node '{node}'" if node else ""
    if detail:
        return RunnerError("upstream.error", f"the {P} workflow failed{where}: {detail[:300]}")
    return RunnerError(
        "upstream.error",
        f"the {P} workflow failed{where} ({P} sent no details; the execution in n8n's Executions list shows why)",
    )


def _html(status: int) -> RunnerError:
    why = errors.html_hint(status, P, const.URL_HINT, what="webhook")
    return RunnerError(status_to_code(status), f"{P} returned HTTP {status}: {why}", status=status)
