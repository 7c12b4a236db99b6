"""``<think>…</think>`` markers inside streamed answer text, turned into reasoning events.

Some Tbox agents (a reasoning model behind a plain text lane) put their reasoning into the answer
text between ``<think>`` and ``</think>``; the kit's splitter finds them, split markers included.
"""

from __future__ import annotations

from runner_kit import events as ev
from runner_kit.results import ThinkSplitter as _Splitter


def _events(parts: list[tuple[bool, str]]) -> list[ev.Event]:
    return [ev.Think(text) if think else ev.Text(text) for think, text in parts]


class ThinkSplitter:
    """Feed answer text pieces; get ``ev.Text`` and ``ev.Think`` events in order."""

    def __init__(self) -> None:
        self._split = _Splitter()

    @property
    def inside(self) -> bool:
        return self._split.inside

    def feed(self, piece: str) -> list[ev.Event]:
        return _events(self._split.feed(piece))

    def flush(self) -> list[ev.Event]:
        """The end of the answer: a held partial marker was text after all."""
        return _events(self._split.flush())
