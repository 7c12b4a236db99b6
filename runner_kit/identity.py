"""The upstream end-user string, chosen by the ``user-id-source`` config key."""

from __future__ import annotations

from typing import Any

from .errors import RunnerError

SOURCES = ("actor", "conversation", "legacy-session", "legacy-bot")


def upstream_user(ctx: Any, source: str | None) -> str:
    """Build the user string the upstream scopes conversations and files by."""
    source = (source or "actor").strip() or "actor"
    conv = ctx.conversation
    if source == "actor":
        actor = ctx.actor
        if actor is not None and actor.actor_id:
            return f"{actor.actor_type}_{actor.actor_id}"
        if conv is not None and conv.sender_id:
            return f"user_{conv.sender_id}"
        return "langbot_anonymous"
    if source == "conversation":
        cid = (conv.conversation_id if conv is not None else None) or ctx.context.conversation_id
        if not cid:
            raise RunnerError(
                "config.identity_unavailable",
                "user-id-source is 'conversation' but this run has no conversation id",
            )
        return f"conversation_{cid}"
    if source == "legacy-session":
        if conv is None or not conv.launcher_type or not conv.launcher_id:
            raise RunnerError(
                "config.identity_unavailable",
                "user-id-source is 'legacy-session' but the host sent no launcher identity for this run "
                "(it is only available for migrated pipelines); set user-id-source to 'actor'",
            )
        return f"{conv.launcher_type}_{conv.launcher_id}"
    if source == "legacy-bot":
        bot = (conv.bot_id if conv is not None else None) or (ctx.runtime.metadata or {}).get("bot_id")
        if not bot:
            raise RunnerError(
                "config.identity_unavailable",
                "user-id-source is 'legacy-bot' but this run has no bot id; set user-id-source to 'actor'",
            )
        return str(bot)
    raise RunnerError("config.invalid", f"config key 'user-id-source' must be one of: {', '.join(SOURCES)}")
