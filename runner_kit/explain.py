"""What the person in the chat reads when a run fails.

Seen on the real LangBot 4.11.2 host (tests/e2e): a ``run.failed`` becomes the host's generic line
("Agent runner execution failed." / "temporarily unavailable") in the chat, and the runner's own
message only reaches Run logs. So before the one ``run.failed`` the driver sends a complete message:

- when answer text was already streamed, that text followed by a short note on its own line saying
  the answer is incomplete and why (:func:`incomplete_note`);
- when nothing was answered, one plain explanation of what went wrong and what to do
  (:func:`explanation`) — unless the owner turned ``explain-failures`` off (public bots), in which
  case the host's generic notice is all the chat shows.

The texts never carry secrets (the messages are redacted before they get here), stack traces or a
bare internal code.
"""

from __future__ import annotations

_LIMIT = 400


def _detail(message: str) -> str:
    message = " ".join(message.split())
    return message if len(message) <= _LIMIT else message[: _LIMIT - 1] + "…"


def explanation(platform: str, code: str, message: str) -> str:
    """One or two plain sentences: what went wrong and what to do."""
    d = _detail(message)
    if code in ("config.missing", "config.invalid"):
        return f"This bot's {platform} settings need fixing: {d}. The bot owner can change them in the bot's AI settings."
    if code == "config.identity_unavailable":
        return f"This bot cannot tell who is asking: {d}."
    if code == "upstream.auth":
        return f"{platform} rejected the API key ({d}). The bot owner should check the key in this bot's AI settings."
    if code == "upstream.forbidden":
        return f"{platform} refused the request ({d}). The bot owner should check the key's permissions."
    if code == "upstream.quota":
        return f"{platform} reports a used-up quota or balance ({d}). The bot owner needs to check the plan."
    if code == "upstream.rate_limited":
        return f"{platform} is busy right now (rate limited). Please try again in a moment."
    if code == "upstream.timeout":
        return f"{platform} did not answer in time: {d}. Please try again."
    if code == "upstream.unavailable":
        return f"{platform} cannot be reached right now: {d}. Please try again in a moment."
    if code.startswith("input."):
        return f"Your message could not be sent to {platform}: {d}."
    if code in ("upstream.bad_request", "upstream.not_found", "upstream.too_large"):
        return f"{platform} refused the request: {d}."
    if code == "runner.internal":
        return f"Something went wrong inside the {platform} runner ({d}). Please report it to the bot owner."
    return f"{platform} could not answer: {d}."


def incomplete_note(platform: str, code: str, message: str, *, detailed: bool = True) -> str:
    """The line after a partial answer."""
    if not detailed:
        return "(This answer is incomplete.)"
    return f"(This answer is incomplete: {_detail(message).rstrip('.')}.)"
