"""One answer's output lanes: which lane is text, the text shown, images, suggestions and usage."""

from __future__ import annotations

from typing import Any

from runner_kit import events as ev
from runner_kit.logs import get_logger
from runner_kit.netguard import chat_link

from . import const
from .payloads import image_urls
from .think import ThinkSplitter

log = get_logger("runner_kit.tbox")


class AnswerState:
    """One answer's lanes, text and closing extras."""

    def __init__(self, *, sent_conversation: bool) -> None:
        self.sent_conversation = sent_conversation
        self.lanes: dict[str, str] = {}  # lane -> mediaType from its header
        self.conversation: str | None = None
        self.text_lane: str | None = None  # the lane whose text was shown last
        self.text_shown = False
        self.output = False  # anything of the answer reached the user
        self.attachments: set[str] = set()
        self.follow_ups: list[str] = []
        self.usage: ev.Usage | None = None
        self.finished = False
        self.revoked = False
        self.seen = False
        self.unknown: set[str] = set()
        self.splitter = ThinkSplitter()

    def chunk(self, lane: str, payload: dict[str, Any]) -> list[ev.Event]:
        if self.revoked:
            return []
        media = self.lanes.get(lane, const.TEXT)  # a chunk before its lane's header is text
        if media != const.TEXT:
            out: list[ev.Event] = []
            kind = "image" if media == const.IMAGE else "file"
            for url in image_urls(payload):
                if chat_link(url) is None:  # an agent can echo a member's link (netguard.chat_link)
                    log.warning("Tbox: a file in the answer is not linked: its link is not a public http(s) one")
                    continue
                if url not in self.attachments:
                    self.attachments.add(url)
                    self.output = True
                    out.append(ev.Attachment(url=url, kind=kind))
            if out or media == const.IMAGE:
                return out
            # a lane of another media type that carries plain text: show the text
        text = payload.get("text")
        if not isinstance(text, str) or not text:
            return []
        out = []
        if self.text_lane is not None and lane != self.text_lane and self.text_shown:
            out.extend(self.close())
            out.append(ev.Text("\n\n"))  # a second text lane reads as its own paragraph
        self.text_lane = lane
        for item in self.splitter.feed(text):
            if isinstance(item, ev.Text) and item.text.strip():
                self.text_shown = True
            self.output = True
            out.append(item)
        return out

    def close(self) -> list[ev.Event]:
        """What the think splitter still holds (an unfinished tag at the end is text)."""
        return self.splitter.flush()
