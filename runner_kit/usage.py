"""Token usage: upstream counts summed across turns; unknown stays unknown (never 0)."""

from __future__ import annotations

from typing import Any

from .events import Usage

_FIELDS = ("prompt_tokens", "completion_tokens", "total_tokens")


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, float) and value.is_integer() and value >= 0:
        return int(value)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def usage_from(mapping: dict[str, Any] | None, *, prompt: str = "prompt_tokens",
               completion: str = "completion_tokens", total: str = "total_tokens") -> Usage | None:
    """Read token counts from an upstream dict under the given field names; None if none known."""
    if not isinstance(mapping, dict):
        return None
    u = Usage(_as_int(mapping.get(prompt)), _as_int(mapping.get(completion)), _as_int(mapping.get(total)))
    if u.prompt_tokens is None and u.completion_tokens is None and u.total_tokens is None:
        return None
    return u


class UsageTotals:
    """Sums Usage events over one run (several turns, steering follow-ups)."""

    def __init__(self) -> None:
        self._totals: dict[str, int] = {}
        self._extra: dict[str, Any] = {}

    def add(self, usage: Usage | None) -> None:
        if usage is None:
            return
        prompt, completion, total = usage.prompt_tokens, usage.completion_tokens, usage.total_tokens
        if total is None and prompt is not None and completion is not None:
            total = prompt + completion
        for name, value in zip(_FIELDS, (prompt, completion, total), strict=True):
            if value is not None:
                self._totals[name] = self._totals.get(name, 0) + value
        for k, v in usage.extra.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool) and isinstance(self._extra.get(k, 0), (int, float)):
                self._extra[k] = self._extra.get(k, 0) + v
            else:
                self._extra[k] = v

    @property
    def known(self) -> bool:
        return bool(self._totals)

    def as_dict(self) -> dict[str, Any] | None:
        """The envelope usage dict, or None when nothing is known (a cost alone is known: an ACP
        agent may report what a turn cost and no token counts)."""
        if not self._totals and not self._extra:
            return None
        out: dict[str, Any] = dict(self._totals)
        out.update(self._extra)
        return out
