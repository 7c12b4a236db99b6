"""Upstream conversation ids kept in LangBot conversation-scope state under a plugin-specific key.

The stored id must belong to the upstream user the run speaks as, or every change of speaker in a
group turns into "conversation not found" and a new conversation. So the key follows the identity:
where everyone in a LangBot conversation is one upstream user (``conversation``, ``legacy-*``) the
id is stored under the plugin's key itself (``dify.conversation_id``); where each sender is their
own upstream user (``actor``, ``hashed``) it is stored per user, under the plugin's key plus a short
digest of that user (``dify.conversation_id.u3f9c…``), so each person keeps their own conversation.
"""

from __future__ import annotations

import hashlib
from typing import Any

from .identity import PER_PERSON, normalize_source

RESERVED_KEYS = frozenset({"external.conversation_id", "conversation_id"})


def session_key(base: str | None, source: str | None, user: str) -> str | None:
    """The state key for this run's upstream conversation id."""
    if base is None:
        return None
    if normalize_source(source) in PER_PERSON:
        return f"{base}.u{hashlib.sha256(user.encode()).hexdigest()[:16]}"
    return base


class SessionHandle:
    """The stored upstream id for this conversation, read from the run's state snapshot."""

    def __init__(self, ctx: Any, key: str | None, scope: str = "conversation"):
        if key in RESERVED_KEYS:
            raise ValueError(f"{key} is the host's own key; use a plugin-specific key")
        self.key = key
        self.scope = scope
        snapshot = getattr(ctx.state, scope, None) or {} if key else {}
        stored = snapshot.get(key) if key else None
        self.stored: Any = stored if stored not in ("", None) else None
        self.current: Any = self.stored
        self.dropped = False

    def set(self, value: Any) -> None:
        """Adopt the upstream id the platform reported for this turn."""
        self.current = value or None

    def drop(self) -> None:
        """Forget the current id (the upstream reported it missing)."""
        self.current = None
        self.dropped = True

    def restore(self) -> None:
        """Keep the stored id after all (the fresh session failed too, so the old one was not the problem)."""
        self.current = self.stored
        self.dropped = False

    @property
    def dirty(self) -> bool:
        """True when the value to persist differs from the host's snapshot."""
        return self.key is not None and self.current != self.stored

    def mark_saved(self) -> None:
        self.stored = self.current
