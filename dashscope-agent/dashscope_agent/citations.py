"""Knowledge-base citation tags in a streamed answer, made readable.

A Bailian app that cites its knowledge base writes ``<ref>[4]</ref>`` into ``output.text`` (unless
``doc_reference_type`` is ``simple``) and lists the cited slices in ``output.doc_references``, each
with the ``index_id`` the tag names. With incremental output the tag arrives cut anywhere:
``"<ref>[4]</"`` then ``"ref>，理解"``, or ``"<ref"`` then ``">[2]</ref"`` then ``">"``.

:class:`Citations` turns each whole tag into ``[4]`` (the number the list after the answer uses),
or into nothing when that list is not shown, and holds back only what may still become a tag, so
the text shown never contains half a tag and never has to be taken back.
"""

from __future__ import annotations

import re

OPEN = "<ref>"
CLOSE = "</ref>"
# what may stand between the tags: "[4]", "[2][3]", "[1,2]", "4"; longer or multi-line text after
# a "<ref>" is not a citation and is shown as it came
_MAX_INSIDE = 40
_BRACKETED = re.compile(r"(?:\[[^\[\]<>\n]{1,12}\])+")
_BARE = re.compile(r"[\w ,，、-]{1,24}")


def _held_prefix(text: str, tag: str) -> int:
    """How many characters at the end of ``text`` could begin ``tag``."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if tag.startswith(text[-n:]):
            return n
    return 0


def _citation(inside: str) -> bool:
    """Whether ``inside`` (what stands after a ``<ref>``) can be a citation's content."""
    return len(inside) <= _MAX_INSIDE and "\n" not in inside and "<" not in inside


class Citations:
    """Rewrites ``<ref>…</ref>`` in text fed piece by piece; ``keep`` False drops the citations."""

    __slots__ = ("_pending", "keep", "seen")

    def __init__(self, keep: bool = True) -> None:
        self.keep = keep
        self._pending = ""
        self.seen = False  # a citation tag was met

    def render(self, inside: str) -> str:
        """The readable form of one tag's content."""
        inside = inside.strip()
        if not self.keep or not inside:
            return ""
        if _BRACKETED.fullmatch(inside):
            return inside
        if _BARE.fullmatch(inside):
            return f"[{inside}]"
        return inside

    def feed(self, text: str) -> str:
        """What of everything fed so far can be shown now (after what earlier calls returned)."""
        buf = self._pending + text
        self._pending = ""
        out: list[str] = []
        i = 0
        while True:
            j = buf.find(OPEN, i)
            if j < 0:
                hold = _held_prefix(buf[i:], OPEN)
                out.append(buf[i : len(buf) - hold])
                self._pending = buf[len(buf) - hold :]
                return "".join(out)
            out.append(buf[i:j])
            k = buf.find(CLOSE, j + len(OPEN))
            if k < 0:
                so_far = buf[j + len(OPEN) :]
                if _citation(so_far[: len(so_far) - _held_prefix(so_far, CLOSE)]):
                    self._pending = buf[j:]  # the rest of this tag is still to come
                    return "".join(out)
            elif _citation(buf[j + len(OPEN) : k]):
                self.seen = True
                out.append(self.render(buf[j + len(OPEN) : k]))
                i = k + len(CLOSE)
                continue
            out.append(OPEN)  # not a citation: the "<ref>" is text
            i = j + len(OPEN)

    def flush(self) -> str:
        """What is still held at the end of the answer: a tag that never closed is shown as the
        citation it began, a mere ``<re`` as the text it is."""
        rest, self._pending = self._pending, ""
        if rest.startswith(OPEN):
            inside = rest[len(OPEN) :]
            self.seen = True
            return self.render(inside[: len(inside) - _held_prefix(inside, CLOSE)])
        return rest

    def whole(self, text: str) -> str:
        """``text`` complete (a blocking answer)."""
        return self.feed(text) + self.flush()
