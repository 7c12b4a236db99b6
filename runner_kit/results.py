"""The one place that builds RunnerResults: cumulative deltas, coalescing, think blocks, one final
message and one terminal result.

Delta policy (``StreamPolicy``): the first visible text goes out at once. After that a delta is
sent when the text not yet sent is at least ``growth`` times the text already sent (and at least
``min_chars``), or when unsent text has waited ``max_delay`` seconds. Geometric growth keeps the
bytes sent to the host for a long answer within a small multiple of the answer (each delta carries
the whole text so far), and ``max_delay`` keeps a slow stream visibly moving.

Visible text is append-only, so every delta's ``all_content`` extends the previous one: reasoning
opens a ``<think>`` block that stays open while it streams and is closed when the answer starts;
reasoning that arrives after answer text is appended as a new block after it, never inserted before
text the user has already seen. Only ``replace`` (moderation, or an upstream's differing closing
answer) rewrites what was shown.

Size: LangBot 4.11.2 truncates any result whose JSON (ASCII-escaped, so one CJK character costs six
bytes) exceeds 1 MiB, which cut the last delta to a fragment and dropped the final message of very
long answers. The builder keeps the visible text's escaped size under ``TEXT_BUDGET``; an answer
that would exceed it is cut with a visible notice, and the final message carries the same text.
A delta's ``content`` is ``None``: ``all_content`` carries the text and the host reads only that.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from langbot_plugin.api.entities.builtin.provider.message import Message
from langbot_plugin.api.entities.builtin.runner.result import RunnerResult, RunnerResultType

from . import texts
from .events import Attachment
from .texts import t
from .usage import UsageTotals

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"

# The host truncates results over 1 MiB of ASCII-escaped JSON; keep the text well inside it (the
# envelope, attachments and a failure note need room too).
HOST_RESULT_LIMIT = 1024 * 1024
TEXT_BUDGET = HOST_RESULT_LIMIT - 16 * 1024
TRUNCATED_NOTICE = "\n\n[The answer was cut here: it is longer than LangBot can deliver in one message.]"
TRUNCATED_NOTICE_ZH = "\n\n[回答在此处被截断：它超出了 LangBot 单条消息能发送的长度。]"
PROGRESS_MAX = 160  # characters of the progress line


def escaped_len(text: str) -> int:
    """Length of ``text`` as the host measures it (inside ASCII-escaped JSON, without quotes)."""
    if text.isascii() and text.isprintable() and '"' not in text and "\\" not in text:
        return len(text)
    return len(json.dumps(text)) - 2


@dataclass(frozen=True, slots=True)
class StreamPolicy:
    """When to send a delta to the host."""

    growth: float = 1.0
    min_chars: int = 24
    max_delay: float = 0.5

    @classmethod
    def from_config(cls, config: Any) -> StreamPolicy:
        get = getattr(config, "get", lambda _k, d=None: d)
        default = cls()
        return cls(
            growth=float(get("stream-growth", None) or default.growth),
            min_chars=int(get("stream-min-chars", None) or default.min_chars),
            max_delay=float(get("stream-max-delay", None) or default.max_delay),
        )


class ThinkSplitter:
    """Splits streamed text at ``<think>``/``</think>`` markers into ``(is_think, piece)`` parts, in
    order; a marker split across pieces is held back until the next piece shows what it is. The
    line break after a closing marker is dropped (the answer starts after the block)."""

    def __init__(self) -> None:
        self.inside = False
        self._hold = ""

    def feed(self, piece: str) -> list[tuple[bool, str]]:
        text = self._hold + piece
        self._hold = ""
        out: list[tuple[bool, str]] = []
        while text:
            tag = THINK_CLOSE if self.inside else THINK_OPEN
            idx = text.find(tag)
            if idx < 0:
                keep = _partial_suffix(text, tag)
                if len(text) > keep:
                    out.append((self.inside, text[: len(text) - keep]))
                self._hold = text[len(text) - keep :]
                break
            if idx:
                out.append((self.inside, text[:idx]))
            text = text[idx + len(tag) :]
            self.inside = not self.inside
            if not self.inside:
                text = text.lstrip("\n")
        return out

    def flush(self) -> list[tuple[bool, str]]:
        """The end of the text: a held partial marker was content after all."""
        held, self._hold = self._hold, ""
        return [(self.inside, held)] if held else []


class ThinkFilter:
    """Removes ``<think>…</think>`` spans from streamed text, tags split across pieces included."""

    def __init__(self) -> None:
        self._split = ThinkSplitter()

    def feed(self, piece: str) -> str:
        return "".join(text for think, text in self._split.feed(piece) if not think)

    def flush(self) -> str:
        return "".join(text for think, text in self._split.flush() if not think)


def _partial_suffix(text: str, tag: str) -> int:
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:n]):
            return n
    return 0


def strip_think(text: str) -> str:
    """Remove every think block from a complete text."""
    f = ThinkFilter()
    return (f.feed(text) + f.flush()).lstrip("\n") if THINK_OPEN in text else text


def _cut_to_budget(text: str, budget: int) -> str:
    """The longest prefix of ``text`` whose escaped length fits ``budget``."""
    if escaped_len(text) <= budget:
        return text
    lo, hi = 0, min(len(text), budget)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if escaped_len(text[:mid]) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo]


_PROGRESS_KEYS = ("command", "cmd", "file_path", "path", "filePath", "url", "pattern", "query", "description", "title")


def progress_line(name: str, parameters: Any) -> str:
    """``Bash: npm test`` — a tool step as one short line (tool name and its main target)."""
    target = ""
    if isinstance(parameters, dict):
        for key in _PROGRESS_KEYS:
            value = parameters.get(key)
            if isinstance(value, list):
                value = " ".join(str(v) for v in value)
            if isinstance(value, str) and value.strip():
                target = value.strip()
                break
    name = name or "tool"
    return f"⏳ {name}: {target}" if target else f"⏳ {name}"


class ResultBuilder:
    """Accumulates one run's output and decides which results to send."""

    def __init__(
        self,
        run_id: str,
        *,
        remove_think: bool = False,
        policy: StreamPolicy | None = None,
        clock: Any = time.monotonic,
        text_budget: int = TEXT_BUDGET,
    ):
        self.run_id = run_id
        self._text_budget = text_budget
        self.messages_sent = 0  # complete messages this builder already sent (next_message)
        self.remove_think = remove_think
        self.policy = policy or StreamPolicy()
        self._clock = clock
        self._budget = text_budget - max(escaped_len(TRUNCATED_NOTICE), escaped_len(TRUNCATED_NOTICE_ZH))
        # the visible text, append-only between replaces
        self._parts: list[str] = []
        self._len = 0
        self._escaped = 0
        self._cache: str | None = ""
        self._preamble = ""
        self._in_think = False
        self._think_hold = ""  # trailing newlines of a think block, shown only if more follows
        self._truncated = False
        # what the upstream said, for final_text comparisons and reporting
        self._answer: list[str] = []
        self._answer_len = 0
        self._think: list[str] = []
        self._think_len = 0
        self._filter = ThinkFilter() if remove_think else None
        self._sent = ""  # visible text already sent to the host
        self._dirty_since: float | None = None
        self._chunk_seq = 0
        self.attachments: list[Attachment] = []
        self.deltas_sent = 0
        self.finished = False
        self.no_reply = False  # the upstream asked for the run to end without a message
        self.meta: dict[str, Any] = {}  # ev.Meta facts, carried on the complete message
        self._progress = ""  # one line for the current step, shown only until answer text comes
        self._still = ""  # the progress line when it is the kit's own "still working" line
        self._waiting = ""  # who waits for this turn's end (follow-ups), shown under the streamed text
        self.auto_progress = False  # derive that line from tool starts (coding agents)
        # told of every state value the run stores (runner_kit.sessions: the next run of the same
        # session sees it even when its own snapshot was taken before)
        self.on_state: Any = None

    # --- accumulating ---------------------------------------------------------------------------

    @property
    def answer(self) -> str:
        """The answer text so far (without reasoning or the preamble)."""
        if len(self._answer) > 1:
            self._answer = ["".join(self._answer)]
        return self._answer[0] if self._answer else ""

    @property
    def think(self) -> str:
        return "".join(self._think)

    @property
    def truncated(self) -> bool:
        return self._truncated

    def visible(self) -> str:
        """The text the user sees now: preamble, think blocks (unless removed) and the answer."""
        if self._cache is None:
            joined = "".join(self._parts)
            self._parts = [joined] if joined else []
            self._cache = joined
        return self._cache

    @property
    def has_output(self) -> bool:
        """Something of the upstream's answer (not just a preamble) has been produced."""
        return bool(self._answer_len or self.attachments or (self._think_len and not self.remove_think))

    @property
    def has_answer_text(self) -> bool:
        return bool(self.answer.strip())

    def set_progress(self, text: str) -> RunnerResult | None:
        """Show one compact line for what the agent is doing now (replaced by the answer; never
        part of the complete message). Ignored once answer text has come."""
        line = " ".join(str(text or "").split())
        if len(line) > PROGRESS_MAX:
            line = line[: PROGRESS_MAX - 1] + "…"
        if self._answer_len or line == self._progress:
            return None
        self._progress = line
        self._dirty_since = self._dirty_since or self._clock()
        return self.flush()

    def still_working(self, text: str) -> RunnerResult | None:
        """A "still working" line while the upstream has shown nothing for a while: only where no
        answer and no line of the agent's own stands (it replaces only an earlier such line)."""
        if self._answer_len or (self._progress and self._progress != self._still):
            return None
        result = self.set_progress(text)
        self._still = self._progress
        return result

    def set_waiting(self, line: str) -> RunnerResult | None:
        """One line under the streamed text while follow-ups wait for this turn to end ("Bob: your
        message is handled after the current turn"); never part of the complete message."""
        line = " ".join(str(line or "").split())[:PROGRESS_MAX]
        if line == self._waiting:
            return None
        self._waiting = line
        return self.flush()

    def _shown(self) -> str:
        text = self.visible()
        if self._progress and not self._answer_len and not self._truncated:
            sep = "" if not text else "\n" if text.endswith("\n") else "\n\n"
            text = f"{text}{sep}{self._progress}"
        if self._waiting and not self._truncated:
            sep = "" if not text else "\n" if text.endswith("\n") else "\n\n"
            text = f"{text}{sep}{self._waiting}"
        return text

    def set_preamble(self, text: str) -> None:
        """A line shown before everything else (e.g. the fresh-session notice); only before output."""
        if self._len or not text.strip():
            return
        self._preamble = text.strip() + "\n\n"
        self._append(self._preamble)

    def _append(self, piece: str) -> None:
        if self._truncated or not piece:
            return
        esc = escaped_len(piece)
        if self._escaped + esc > self._budget:
            piece = _cut_to_budget(piece, self._budget - self._escaped)
            self._truncated = True
            if self._in_think:
                piece += f"\n{THINK_CLOSE}"
                self._in_think = False
            piece += t(TRUNCATED_NOTICE, TRUNCATED_NOTICE_ZH)
            esc = escaped_len(piece)
        self._parts.append(piece)
        self._len += len(piece)
        self._escaped += esc
        self._cache = None

    def _close_think(self) -> None:
        if self._in_think:
            self._think_hold = ""
            self._append(f"\n{THINK_CLOSE}\n")
            self._in_think = False

    def add_text(self, piece: str) -> RunnerResult | None:
        if self._filter is not None:
            piece = self._filter.feed(piece)
        if not piece:
            return None
        if not self._answer_len:
            piece = piece.lstrip("\n") if (self._filter is not None or self._in_think) else piece
            if not piece:
                return None
        self._close_think()
        self._answer.append(piece)
        self._answer_len += len(piece)
        self._append(piece)
        if self._progress:  # the answer replaces the progress line at once
            self._progress = ""
            return self.flush()
        return self._maybe_emit()

    def add_think(self, piece: str) -> RunnerResult | None:
        if not piece:
            return None
        self._think.append(piece)
        self._think_len += len(piece)
        if self.remove_think:
            return None
        if not self._in_think:
            piece = piece.lstrip("\n")
            if not piece:
                return None
            # after answer text a new block follows it; nothing is inserted before shown text
            sep = "\n\n" if self._answer_len else ""
            self._append(f"{sep}{THINK_OPEN}\n")
            self._in_think = True
        text = self._think_hold + piece
        body = text.rstrip("\n")
        self._think_hold = text[len(body) :]
        if body:
            self._append(body)
        return self._maybe_emit()

    def replace(self, text: str) -> RunnerResult | None:
        """Replace the whole answer and send it at once (reasoning shown so far is kept)."""
        if self.remove_think:
            text = strip_think(text)
        self._answer = [text]
        self._answer_len = len(text)
        self._in_think = False
        self._think_hold = ""
        self._parts, self._len, self._escaped, self._cache = [], 0, 0, ""
        self._truncated = False
        if self._preamble:
            self._append(self._preamble)
        if self._think_len and not self.remove_think:
            think = self.think.strip("\n")
            self._append(f"{THINK_OPEN}\n{think}\n{THINK_CLOSE}\n")
        self._append(text)
        self._dirty_since = self._dirty_since or self._clock()
        return self.flush()

    def final_text(self, text: str) -> RunnerResult | None:
        """The upstream's complete answer: adopt it if it differs from what was streamed."""
        if self.remove_think:
            text = strip_think(text)
        if text and text != self.answer:
            return self.replace(text)
        return None

    def add_attachment(self, att: Attachment) -> None:
        self.attachments.append(att)

    # --- emitting -------------------------------------------------------------------------------

    def _maybe_emit(self) -> RunnerResult | None:
        now = self._clock()
        if self._dirty_since is None:
            self._dirty_since = now
        if not self._sent:
            return self.flush()
        sent = len(self._sent)
        pending = self._len - sent
        if pending >= self.policy.min_chars and pending >= self.policy.growth * sent:
            return self.flush()
        if now - self._dirty_since >= self.policy.max_delay:
            return self.flush()
        return None

    def due_in(self) -> float | None:
        """Seconds until unsent text must go out, or None when nothing is pending."""
        if self._dirty_since is None:
            return None
        return max(0.0, self._dirty_since + self.policy.max_delay - float(self._clock()))

    def flush(self) -> RunnerResult | None:
        """Send a delta for any unsent text now."""
        self._dirty_since = None
        text = self._shown()
        if text == self._sent or not text.strip():
            return None
        self._sent = text
        self._chunk_seq += 1
        self.deltas_sent += 1
        chunk = {
            "resp_message_id": None,
            "role": "assistant",
            "name": None,
            "all_content": text,
            "content": None,  # the host reads all_content; repeating the text here doubles the size
            "tool_calls": None,
            "tool_call_id": None,
            "is_final": False,
            "msg_sequence": self._chunk_seq,
            "provider_specific_fields": None,
        }
        return RunnerResult.model_construct(
            run_id=self.run_id,
            type=RunnerResultType.MESSAGE_DELTA,
            data={"chunk": chunk},
            usage=None,
            sequence=None,
            timestamp=None,
        )

    def tool_started(self, call_id: str, name: str, parameters: dict[str, Any]) -> RunnerResult:
        return RunnerResult.tool_call_started(self.run_id, call_id, name, parameters)

    def tool_completed(self, call_id: str, name: str, result: Any, error: str | None) -> RunnerResult:
        if result is not None and not isinstance(result, dict):
            result = {"output": result}
        return RunnerResult.tool_call_completed(self.run_id, call_id, name, result=result, error=error)

    def state(self, key: str, value: Any, scope: str = "conversation") -> RunnerResult:
        if self.on_state is not None and self.on_state(key, value, scope) is False:
            # from before a LangBot reset (runner_kit.sessions.Slot.writer): the host would keep it
            return self.log(f"not stored: {key!r} belongs to the conversation before its reset")
        return RunnerResult.state_updated(self.run_id, key, value, scope)

    def log(self, text: str, level: str = "info") -> RunnerResult:
        return RunnerResult(run_id=self.run_id, type="processor.log", data={"text": text[:65536], "level": level})

    def _finish_text(self) -> str:
        if self._filter is not None:
            tail = self._filter.flush()
            if tail:
                self._answer.append(tail)
                self._answer_len += len(tail)
                self._append(tail)
        if self._in_think:
            self._close_think()
        return self.visible().rstrip("\n") if not self._answer_len else self.visible()

    def final_message(self, note: str | None = None) -> RunnerResult | None:
        """The one complete assistant message (None when there is nothing to say).

        ``note`` (a partial answer's "incomplete" line) goes on its own line after the text.
        """
        text = self._finish_text()
        shown = self.has_answer_text or (self._think_len and not self.remove_think)
        if not shown and not self.attachments:
            return None
        if note:
            # on its own line, after exactly what was shown (the final message extends the last delta)
            sep = "" if text.endswith("\n\n") else "\n" if text.endswith("\n") else "\n\n"
            text = f"{text}{sep}{note}"
        return self._message(text)

    def next_message(self) -> None:
        """Start a new message in the same run (the one so far was sent complete): the text,
        think, progress and attachment state start over; settings stay."""
        sent = self.messages_sent + 1
        auto = self.auto_progress
        self.__init__(self.run_id, remove_think=self.remove_think, policy=self.policy,  # type: ignore[misc]
                      clock=self._clock, text_budget=self._text_budget)
        self.messages_sent = sent
        self.auto_progress = auto

    def notice_message(self, text: str) -> RunnerResult:
        """A complete message that is not an upstream answer (a failure explained to the user)."""
        prefix = self._preamble.rstrip()
        return self._message(f"{prefix}\n\n{text}" if prefix else text, attachments=False)

    def _message(self, text: str, attachments: bool = True) -> RunnerResult:
        content: Any
        if attachments and self.attachments:
            # LangBot 4.11.2 (langbot_plugin provider/message.py _get_content_platform_message_chain)
            # shows an image_url only when it is an http(s) link and drops the rest; a data: image
            # goes as image_base64, which it turns into an Image. A file it takes only as a link:
            # a data: file would reach the platform as a link nobody can open, so it is named instead.
            content = []
            undelivered = []
            for att in self.attachments:
                inline = att.url.startswith("data:")
                if att.kind == "image" and inline:
                    content.append({"type": "image_base64", "image_base64": att.url})
                elif att.kind == "image":
                    content.append({"type": "image_url", "image_url": {"url": att.url}})
                elif inline:
                    undelivered.append(att.name or "file")
                else:
                    content.append({"type": "file_url", "file_url": att.url, "file_name": att.name})
            if undelivered:
                names = "、".join(f"“{n}”" for n in undelivered) if texts.current() == texts.ZH else \
                    ", ".join(f"“{n}”" for n in undelivered)
                note = texts.t("(Not sent: {names}. LangBot cannot pass a file from this plugin into the chat.)",
                               "（未发送：{names}。LangBot 无法把本插件生成的文件发到聊天中。）", names=names)
                text = f"{text}\n\n{note}" if text else note
            content = ([{"type": "text", "text": text}] if text else []) + content
        else:
            content = text
        extra = {"provider_specific_fields": dict(self.meta)} if self.meta else {}
        return RunnerResult.message_completed(self.run_id, Message(role="assistant", content=content, **extra))

    def completed(self, usage: UsageTotals, finish_reason: str = "stop") -> RunnerResult:
        self.finished = True
        return RunnerResult.run_completed(self.run_id, finish_reason=finish_reason, usage=usage.as_dict())

    def failed(self, code: str, message: str, retryable: bool, usage: UsageTotals | None = None) -> RunnerResult:
        self.finished = True
        return RunnerResult.run_failed(
            self.run_id, message, code=code, retryable=retryable, usage=usage.as_dict() if usage else None
        )
