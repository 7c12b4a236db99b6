"""``<think>…</think>`` markers inside streamed answer text, turned into reasoning events.

Some Tbox agents (a reasoning model behind a plain text lane) put their reasoning into the answer
text between ``<think>`` and ``</think>``. The markers may be split across chunks; the splitter
holds back a possible partial marker until the next piece shows what it is.
"""

from __future__ import annotations

from runner_kit import events as ev

OPEN = "<think>"
CLOSE = "</think>"


def _partial(text: str, tag: str) -> int:
    """How many characters at the end of ``text`` could start ``tag``."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:n]):
            return n
    return 0


class ThinkSplitter:
    """Feed answer text pieces; get ``ev.Text`` and ``ev.Think`` events in order."""

    def __init__(self) -> None:
        self.inside = False
        self._hold = ""

    def _event(self, text: str) -> ev.Event:
        return ev.Think(text) if self.inside else ev.Text(text)

    def feed(self, piece: str) -> list[ev.Event]:
        text = self._hold + piece
        self._hold = ""
        out: list[ev.Event] = []
        while text:
            tag = CLOSE if self.inside else OPEN
            idx = text.find(tag)
            if idx < 0:
                keep = _partial(text, tag)
                body = text[: len(text) - keep]
                if body:
                    out.append(self._event(body))
                self._hold = text[len(text) - keep :]
                break
            if idx:
                out.append(self._event(text[:idx]))
            text = text[idx + len(tag) :]
            self.inside = not self.inside
            if not self.inside:
                text = text.lstrip("\n")  # the answer starts after the block, not with its line break
        return out

    def flush(self) -> list[ev.Event]:
        """The end of the answer: a held partial marker was text after all."""
        held, self._hold = self._hold, ""
        return [self._event(held)] if held else []
