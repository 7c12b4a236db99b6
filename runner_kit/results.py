"""The one place that builds RunnerResults: cumulative deltas, coalescing, think blocks, one final
message and one terminal result.

Delta policy (``StreamPolicy``): the first visible text goes out at once. After that a delta is
sent when the text not yet sent is at least ``growth`` times the text already sent (and at least
``min_chars``), or when unsent text has waited ``max_delay`` seconds. Geometric growth keeps the
bytes sent to the host for a long answer within a small multiple of the answer (each delta carries
the whole text so far), and ``max_delay`` keeps a slow stream visibly moving.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from langbot_plugin.api.entities.builtin.provider.message import Message
from langbot_plugin.api.entities.builtin.runner.result import RunnerResult, RunnerResultType

from .events import Attachment
from .usage import UsageTotals

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"


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


class ThinkFilter:
    """Removes ``<think>…</think>`` spans from streamed text, tags split across pieces included."""

    def __init__(self) -> None:
        self._inside = False
        self._hold = ""

    def feed(self, piece: str) -> str:
        text = self._hold + piece
        self._hold = ""
        out: list[str] = []
        while text:
            tag = THINK_CLOSE if self._inside else THINK_OPEN
            idx = text.find(tag)
            if idx >= 0:
                if not self._inside:
                    out.append(text[:idx])
                text = text[idx + len(tag) :]
                self._inside = not self._inside
                if not self._inside:
                    text = text.lstrip("\n")
                continue
            # keep a possible partial tag at the end for the next piece
            keep = _partial_suffix(text, tag)
            body = text[: len(text) - keep]
            if not self._inside:
                out.append(body)
            self._hold = text[len(text) - keep :]
            break
        return "".join(out)

    def flush(self) -> str:
        held, self._hold = self._hold, ""
        return "" if self._inside else held


def _partial_suffix(text: str, tag: str) -> int:
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:n]):
            return n
    return 0


def strip_think(text: str) -> str:
    """Remove every think block from a complete text."""
    f = ThinkFilter()
    return (f.feed(text) + f.flush()).lstrip("\n") if THINK_OPEN in text else text


class ResultBuilder:
    """Accumulates one run's output and decides which results to send."""

    def __init__(
        self,
        run_id: str,
        *,
        remove_think: bool = False,
        policy: StreamPolicy | None = None,
        clock: Any = time.monotonic,
    ):
        self.run_id = run_id
        self.remove_think = remove_think
        self.policy = policy or StreamPolicy()
        self._clock = clock
        self._answer: list[str] = []
        self._answer_len = 0
        self._answer_cache: str | None = ""
        self._think: list[str] = []
        self._think_len = 0
        self._filter = ThinkFilter() if remove_think else None
        self._sent = ""  # visible text already sent to the host
        self._dirty_since: float | None = None
        self._chunk_seq = 0
        self.attachments: list[Attachment] = []
        self.deltas_sent = 0
        self.finished = False

    # --- accumulating ---------------------------------------------------------------------------

    @property
    def answer(self) -> str:
        if self._answer_cache is None:
            joined = "".join(self._answer)
            self._answer = [joined]
            self._answer_cache = joined
        return self._answer_cache

    @property
    def think(self) -> str:
        return "".join(self._think)

    def visible(self) -> str:
        """The text the user sees now: the think block (unless removed) and the answer."""
        answer = self.answer
        if self._think_len and not self.remove_think:
            think = self.think.strip("\n")
            block = f"{THINK_OPEN}\n{think}\n{THINK_CLOSE}"
            return f"{block}\n{answer}" if answer else block
        return answer

    @property
    def has_output(self) -> bool:
        return bool(self._answer_len or self.attachments or (self._think_len and not self.remove_think))

    def add_text(self, piece: str) -> RunnerResult | None:
        if self._filter is not None:
            piece = self._filter.feed(piece)
        if not piece:
            return None
        if not self._answer_len:
            piece = piece.lstrip("\n") if self._filter is not None else piece
            if not piece:
                return None
        self._answer.append(piece)
        self._answer_len += len(piece)
        self._answer_cache = None
        return self._maybe_emit()

    def add_think(self, piece: str) -> RunnerResult | None:
        if not piece:
            return None
        self._think.append(piece)
        self._think_len += len(piece)
        if self.remove_think:
            return None
        return self._maybe_emit()

    def replace(self, text: str) -> RunnerResult | None:
        """Replace the whole answer and send it at once."""
        if self.remove_think:
            text = strip_think(text)
        self._answer = [text]
        self._answer_len = len(text)
        self._answer_cache = text
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
        pending = self._answer_len + self._think_len - sent
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
        text = self.visible()
        if text == self._sent:
            return None
        piece = text[len(self._sent) :] if text.startswith(self._sent) else text
        self._sent = text
        self._chunk_seq += 1
        self.deltas_sent += 1
        chunk = {
            "resp_message_id": None,
            "role": "assistant",
            "name": None,
            "all_content": text,
            "content": piece,
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
        return RunnerResult.state_updated(self.run_id, key, value, scope)

    def log(self, text: str, level: str = "info") -> RunnerResult:
        return RunnerResult(run_id=self.run_id, type="processor.log", data={"text": text[:65536], "level": level})

    def final_message(self) -> RunnerResult | None:
        """The one complete assistant message (None when there is nothing to say)."""
        if self._filter is not None:
            tail = self._filter.flush()
            if tail:
                self._answer.append(tail)
                self._answer_len += len(tail)
                self._answer_cache = None
        text = self.visible()
        if not text and not self.attachments:
            return None
        content: Any
        if self.attachments:
            content = [{"type": "text", "text": text}] if text else []
            for att in self.attachments:
                if att.kind == "image":
                    content.append({"type": "image_url", "image_url": {"url": att.url}})
                else:
                    content.append({"type": "file_url", "file_url": att.url, "file_name": att.name})
        else:
            content = text
        return RunnerResult.message_completed(self.run_id, Message(role="assistant", content=content))

    def completed(self, usage: UsageTotals) -> RunnerResult:
        self.finished = True
        return RunnerResult.run_completed(self.run_id, usage=usage.as_dict())

    def failed(self, code: str, message: str, retryable: bool, usage: UsageTotals | None = None) -> RunnerResult:
        self.finished = True
        return RunnerResult.run_failed(
            self.run_id, message, code=code, retryable=retryable, usage=usage.as_dict() if usage else None
        )
