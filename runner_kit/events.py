"""The small typed vocabulary an adapter yields; only the kit turns these into RunnerResults."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class Text:
    """A piece of answer text to append."""

    text: str


@dataclass(slots=True)
class Think:
    """A piece of reasoning text; shown as a <think> block before the answer unless remove-think."""

    text: str


@dataclass(slots=True)
class ReplaceText:
    """Replace the whole answer so far (moderation replace, or a closing full answer)."""

    text: str


@dataclass(slots=True)
class FinalText:
    """The complete answer as the upstream states it at the end.

    If the streamed text already equals it nothing changes; if nothing was streamed it becomes the
    answer; if it differs it replaces the streamed answer.
    """

    text: str


@dataclass(slots=True)
class ToolStarted:
    """An upstream tool step began."""

    call_id: str
    name: str
    parameters: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class ToolCompleted:
    """An upstream tool step finished."""

    call_id: str
    name: str
    result: Any = None
    error: str | None = None


@dataclass(slots=True)
class Attachment:
    """A file or image the upstream produced, delivered with the final message."""

    url: str
    kind: str = "image"  # image | file
    name: str | None = None
    mime_type: str | None = None


@dataclass(slots=True)
class Usage:
    """Token counts for one upstream turn; None means unknown."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class SessionId:
    """The upstream conversation/session handle to keep for the next turn."""

    value: str | None


@dataclass(slots=True)
class Log:
    """A diagnostic line for the host's processor log (never shown on a platform)."""

    text: str
    level: str = "info"


@dataclass(slots=True)
class NoReply:
    """The upstream finished and this run must end without a message in the chat (for example n8n's
    ``response-handling: ignore``): without answer text the run then completes quietly instead of
    failing with ``upstream.empty_response``."""


@dataclass(slots=True)
class Meta:
    """A small scalar fact about this run for whoever reads the stored answer (for example the
    platform's run id, so an operator can open its run record). It rides on the complete message's
    ``provider_specific_fields``; the chat never shows it."""

    key: str
    value: str | int | float | bool | None



@dataclass(slots=True)
class Finish:
    """Why the upstream stopped (the run's ``finish_reason`` in LangBot's ledger, e.g. ``max_turns``
    or ``refusal``); the last one of a run wins. Without it a successful run ends with ``stop``."""

    reason: str


@dataclass(slots=True)
class Progress:
    """What the agent is doing now (e.g. ``Bash: npm test``): one compact line the streamed message
    shows while no answer text has come yet; replaced by the answer, never part of the final one."""

    text: str


@dataclass(slots=True)
class State:
    """A value to keep in LangBot's persistent state for later runs (``state.updated``), e.g. a
    conversation's summary checkpoint. ``scope`` is conversation, actor, subject or runner."""

    key: str
    value: Any
    scope: str = "conversation"


@dataclass(slots=True)
class Interaction:
    """Ask the chat through LangBot's interactions (``action.requested`` / ``interaction.requested``):
    ``request`` is an ``InteractionRequest`` dict (see :func:`runner_kit.approvals.interaction_request`
    for buttons or one field). Emit it only when ``ctx.delivery.interactions`` is set; the answer
    comes back as a new run with ``ctx.input.interaction``."""

    request: dict[str, Any]


Event = (
    Text | Think | ReplaceText | FinalText | ToolStarted | ToolCompleted | Attachment | Usage | SessionId | Log
    | NoReply | Meta | Progress | Finish | State | Interaction
)

