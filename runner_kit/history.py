"""The recent conversation from LangBot's transcript (``history_page``), as chat messages.

For platforms that keep no memory of their own: the runner sends the recent turns itself. LangBot
offers the transcript only when
``ctx.context.available_apis.history_page`` is true; the SDK's ``ctx.api.history_page`` returns a
``HistoryPage`` of ``TranscriptItem`` rows, newest first (sorted here by ``seq``).
"""

from __future__ import annotations

from typing import Any

from runner_kit.logs import get_logger

log = get_logger("runner_kit.history")

ROLES = ("user", "assistant")


def history_allowed(ctx: Any) -> bool:
    apis = getattr(getattr(ctx, "context", None), "available_apis", None)
    return bool(getattr(apis, "history_page", False))


def _field(item: Any, name: str) -> Any:
    return item.get(name) if isinstance(item, dict) else getattr(item, name, None)


async def recent_messages(ctx: Any, turns: int, current: str) -> list[dict[str, str]] | None:
    """Up to ``turns`` earlier user/assistant exchanges (``[{"role", "content"}]``, oldest first), or
    None when the host does not offer the transcript or reading it failed (logged).

    The host may already have recorded the message being answered; a trailing user item equal to
    ``current`` is left out so it is not sent twice."""
    if turns <= 0 or not history_allowed(ctx):
        return None
    try:
        page = await ctx.api.history_page(limit=min(100, turns * 2 + 1), direction="backward")
    except Exception as exc:  # noqa: BLE001 - history is a help, never a reason to fail the turn
        log.warning("could not read the conversation history from LangBot: %s", type(exc).__name__)
        return None
    items = list(_field(page, "items") or [])
    seqs = [_field(i, "seq") for i in items]
    if all(isinstance(s, int) for s in seqs):
        items = [i for _, i in sorted(zip(seqs, items, strict=True), key=lambda p: p[0])]
    out: list[dict[str, str]] = []
    for item in items:
        role = str(_field(item, "role") or "")
        kind = str(_field(item, "item_type") or "message")
        text = _field(item, "content")
        if role in ROLES and kind == "message" and isinstance(text, str) and text.strip():
            out.append({"role": role, "content": text})
    if out and out[-1]["role"] == "user" and out[-1]["content"].strip() == current.strip():
        out.pop()
    # whole exchanges only: never start with an assistant reply whose question was cut off
    while out and out[0]["role"] != "user":
        out.pop(0)
    keep: list[dict[str, str]] = []
    users = 0
    for msg in reversed(out):
        if msg["role"] == "user":
            users += 1
            if users > turns:
                break
        keep.append(msg)
    keep.reverse()
    while keep and keep[0]["role"] != "user":  # the cut may leave an answer whose question fell off
        keep.pop(0)
    return keep
