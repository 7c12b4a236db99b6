"""Upstream conversation ids kept in LangBot conversation-scope state under a plugin-specific key."""

from __future__ import annotations

from typing import Any

RESERVED_KEYS = frozenset({"external.conversation_id", "conversation_id"})


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

    def set(self, value: Any) -> None:
        """Adopt the upstream id the platform reported for this turn."""
        self.current = value or None

    def drop(self) -> None:
        """Forget the current id (the upstream reported it missing)."""
        self.current = None

    @property
    def dirty(self) -> bool:
        """True when the value to persist differs from the host's snapshot."""
        return self.key is not None and self.current != self.stored

    def mark_saved(self) -> None:
        self.stored = self.current
