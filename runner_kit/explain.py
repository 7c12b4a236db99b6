"""What the person in the chat reads when a run fails, and how the failure still reaches the ledger.

Observed on the real LangBot 4.11.2 host (probe plugin and DifyAgent through the pipeline websocket
chat, stream on and off, and the agent debug API; tests/e2e keeps the cells):

- A pipeline run that ends in ``run.failed`` shows only the host's generic line ("Agent runner
  execution failed." / "…temporarily unavailable…"). When streaming, the host sends it as an update
  of the runner's own message, replacing the text already shown; without streaming nothing the
  runner sent is delivered at all. No pipeline setting hides that line (an owner can only reword it).
- A pipeline run that ends in ``run.completed`` delivers its ``message.completed`` in both modes; the
  ledger row is then ``completed`` with the ``finish_reason`` as its status reason, the envelope
  usage is kept, and ``processor.log`` results are stored as run events (never shown in the chat).
- Agent debug (``delivery.automatic_reply`` false) answers a ``run.failed`` with HTTP 422
  ``{code, msg}``; its streaming variant, which the WebUI panel uses, shows the runner's message and
  then an error bubble with ``msg``. The ledger row is ``failed`` with code and ``retryable``.

So the driver ends a failed run with a complete message first — the text already streamed followed
by a short note on its own line saying it is incomplete and why (:func:`incomplete_note`), or, when
nothing was answered, one plain explanation of what went wrong and what to do (:func:`explanation`).
In pipelines it then logs ``run failed: code=<code> retryable=<true|false>: <message>`` as an error
``processor.log`` and ends with ``run.completed(finish_reason=<code>)`` carrying the partial usage:
the chat keeps the runner's words and the ledger keeps code, retryable and usage (its status column
says completed — the price of the host's behaviour). Elsewhere it ends with the one ``run.failed``.
``explain-failures: false`` (public bots) sends no explanation and always ends in ``run.failed``, so
the host's generic notice is all the chat shows.

The texts never carry secrets (messages are redacted before they get here, and once more here with
the run's redactor: a URL's ``user:password@`` shows as ``***@``), stack traces or a bare internal
code.
"""

from __future__ import annotations

import re

from .logs import redact_log

_LIMIT = 400
_FAILURE_LOG = re.compile(r"run failed: code=(\S+) retryable=(true|false): (.*)", re.DOTALL)


def failure_log(code: str, retryable: bool, message: str) -> str:
    """The ``processor.log`` line that records a failure a pipeline run ends without ``run.failed``."""
    return f"run failed: code={code} retryable={'true' if retryable else 'false'}: {redact_log(message)}"


def parse_failure_log(text: object) -> tuple[str, bool, str] | None:
    """``(code, retryable, message)`` from a :func:`failure_log` line, else None."""
    m = _FAILURE_LOG.fullmatch(str(text or ""))
    return (m.group(1), m.group(2) == "true", m.group(3)) if m else None


def _detail(message: str) -> str:
    message = " ".join(redact_log(message).split()).rstrip(".")
    return message if len(message) <= _LIMIT else message[: _LIMIT - 1] + "…"


# code -> what the chat reads ({p}: the platform, {d}: the failure's own redacted message)
_EXPLANATIONS: dict[str, str] = {
    "config.missing": "This bot's {p} settings need fixing: {d}. The bot owner can change them in the bot's AI settings.",
    "config.invalid": "This bot's {p} settings need fixing: {d}. The bot owner can change them in the bot's AI settings.",
    "config.identity_unavailable": "This bot cannot tell who is asking: {d}.",
    "upstream.auth": "{p} rejected the API key ({d}). The bot owner should check the key in this bot's AI settings.",
    "upstream.forbidden": "{p} refused the request ({d}). The bot owner should check the key's permissions.",
    "upstream.quota": "{p} reports a used-up quota or balance ({d}). The bot owner needs to check the plan.",
    "upstream.rate_limited": "{p} is busy right now (rate limited). Please try again in a moment.",
    "upstream.timeout": "{p} did not answer in time: {d}. Please try again.",
    "upstream.unavailable": "{p} cannot be reached right now: {d}. Please try again in a moment.",
    "upstream.tls": "{p}'s secure connection could not be verified: {d}.",
    "upstream.bad_request": "{p} refused the request: {d}.",
    "upstream.not_found": "{p} refused the request: {d}.",
    "upstream.too_large": "{p} refused the request: {d}.",
    "process.no_sandbox": "{p} could not start safely here: {d}.",
    "runner.internal": "Something went wrong inside the {p} runner ({d}). Please report it to the bot owner.",
}


def explanation(platform: str, code: str, message: str) -> str:
    """One or two plain sentences: what went wrong and what to do."""
    if code.startswith("input."):
        template = "Your message could not be sent to {p}: {d}."
    else:
        template = _EXPLANATIONS.get(code, "{p} could not answer: {d}.")
    return template.format(p=platform, d=_detail(message))


def incomplete_note(platform: str, code: str, message: str, *, detailed: bool = True) -> str:
    """The line after a partial answer."""
    if not detailed:
        return "(This answer is incomplete.)"
    return f"(This answer is incomplete: {_detail(message)}.)"
