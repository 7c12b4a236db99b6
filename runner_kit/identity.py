"""The upstream end-user string, chosen by the ``user-id-source`` config key.

What a group chat sees, per source (the stored upstream conversation follows the same rule, see
:func:`runner_kit.session.session_key`):

- ``actor`` (default): each sender is their own upstream user with their own upstream conversation;
  in a group every person has a separate conversation with the agent.
- ``hashed``: like ``actor``, but the upstream sees ``lb_`` + a digest of the bot/workspace and the
  sender instead of raw IM user ids (stable, opaque, different per bot).
- ``conversation``: one upstream user and one shared conversation per LangBot conversation; in a
  group everyone talks in the same upstream conversation.
- ``legacy-session``: LangBot 4.10's ``{launcher_type}_{launcher_id}`` (a group's launcher is the
  group, so a group shares one conversation), only for migrated pipelines.
- ``legacy-bot``: the bot id as the user (as the old Tbox runner did); one shared conversation per
  LangBot conversation.
"""

from __future__ import annotations

import hashlib
from typing import Any

from .errors import RunnerError

SOURCES = ("actor", "hashed", "conversation", "legacy-session", "legacy-bot")
# sources under which each sender in a group is a different upstream user
PER_PERSON = frozenset({"actor", "hashed"})


def normalize_source(source: str | None) -> str:
    return (source or "actor").strip() or "actor"


def _actor(ctx: Any) -> str:
    actor = ctx.actor
    if actor is not None and actor.actor_id:
        return f"{actor.actor_type}_{actor.actor_id}"
    conv = ctx.conversation
    if conv is not None and conv.sender_id:
        return f"user_{conv.sender_id}"
    return "langbot_anonymous"


def _scope(ctx: Any) -> tuple[str, str]:
    conv = ctx.conversation
    meta = ctx.runtime.metadata or {}
    bot = (conv.bot_id if conv is not None else None) or meta.get("bot_id") or ""
    workspace = (conv.workspace_id if conv is not None else None) or meta.get("workspace_id") or ""
    return str(workspace), str(bot)


def hashed_user(ctx: Any) -> str:
    """``lb_`` + a digest over (workspace, bot, actor): stable per person and bot, opaque upstream."""
    workspace, bot = _scope(ctx)
    digest = hashlib.sha256("\x1f".join(("langbot-runner-user/1", workspace, bot, _actor(ctx))).encode()).hexdigest()
    return "lb_" + digest[:32]


def upstream_user(ctx: Any, source: str | None) -> str:
    """Build the user string the upstream scopes conversations and files by."""
    source = normalize_source(source)
    conv = ctx.conversation
    if source == "actor":
        return _actor(ctx)
    if source == "hashed":
        return hashed_user(ctx)
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
